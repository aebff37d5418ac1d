/* The slot map of a Redis Cluster and what the cluster says about it:
 * CRC16 key slots with hash tags, CLUSTER SLOTS replies, -MOVED and -ASK
 * redirects, seed addresses. Every byte parsed here came off the network
 * (or from the caller's seed string): lengths, ports and slot numbers are
 * checked before use. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "rc_int.h"
#include "skv_rcluster.h"

/* CRC16-XMODEM by byte: crc16_table[b] is the CRC of the byte b << 8
 * (Redis' crc16.c holds the same table). */
static const uint16_t crc16_table[256] = {
    0x0000, 0x1021, 0x2042, 0x3063, 0x4084, 0x50a5, 0x60c6, 0x70e7,
    0x8108, 0x9129, 0xa14a, 0xb16b, 0xc18c, 0xd1ad, 0xe1ce, 0xf1ef,
    0x1231, 0x0210, 0x3273, 0x2252, 0x52b5, 0x4294, 0x72f7, 0x62d6,
    0x9339, 0x8318, 0xb37b, 0xa35a, 0xd3bd, 0xc39c, 0xf3ff, 0xe3de,
    0x2462, 0x3443, 0x0420, 0x1401, 0x64e6, 0x74c7, 0x44a4, 0x5485,
    0xa56a, 0xb54b, 0x8528, 0x9509, 0xe5ee, 0xf5cf, 0xc5ac, 0xd58d,
    0x3653, 0x2672, 0x1611, 0x0630, 0x76d7, 0x66f6, 0x5695, 0x46b4,
    0xb75b, 0xa77a, 0x9719, 0x8738, 0xf7df, 0xe7fe, 0xd79d, 0xc7bc,
    0x48c4, 0x58e5, 0x6886, 0x78a7, 0x0840, 0x1861, 0x2802, 0x3823,
    0xc9cc, 0xd9ed, 0xe98e, 0xf9af, 0x8948, 0x9969, 0xa90a, 0xb92b,
    0x5af5, 0x4ad4, 0x7ab7, 0x6a96, 0x1a71, 0x0a50, 0x3a33, 0x2a12,
    0xdbfd, 0xcbdc, 0xfbbf, 0xeb9e, 0x9b79, 0x8b58, 0xbb3b, 0xab1a,
    0x6ca6, 0x7c87, 0x4ce4, 0x5cc5, 0x2c22, 0x3c03, 0x0c60, 0x1c41,
    0xedae, 0xfd8f, 0xcdec, 0xddcd, 0xad2a, 0xbd0b, 0x8d68, 0x9d49,
    0x7e97, 0x6eb6, 0x5ed5, 0x4ef4, 0x3e13, 0x2e32, 0x1e51, 0x0e70,
    0xff9f, 0xefbe, 0xdfdd, 0xcffc, 0xbf1b, 0xaf3a, 0x9f59, 0x8f78,
    0x9188, 0x81a9, 0xb1ca, 0xa1eb, 0xd10c, 0xc12d, 0xf14e, 0xe16f,
    0x1080, 0x00a1, 0x30c2, 0x20e3, 0x5004, 0x4025, 0x7046, 0x6067,
    0x83b9, 0x9398, 0xa3fb, 0xb3da, 0xc33d, 0xd31c, 0xe37f, 0xf35e,
    0x02b1, 0x1290, 0x22f3, 0x32d2, 0x4235, 0x5214, 0x6277, 0x7256,
    0xb5ea, 0xa5cb, 0x95a8, 0x8589, 0xf56e, 0xe54f, 0xd52c, 0xc50d,
    0x34e2, 0x24c3, 0x14a0, 0x0481, 0x7466, 0x6447, 0x5424, 0x4405,
    0xa7db, 0xb7fa, 0x8799, 0x97b8, 0xe75f, 0xf77e, 0xc71d, 0xd73c,
    0x26d3, 0x36f2, 0x0691, 0x16b0, 0x6657, 0x7676, 0x4615, 0x5634,
    0xd94c, 0xc96d, 0xf90e, 0xe92f, 0x99c8, 0x89e9, 0xb98a, 0xa9ab,
    0x5844, 0x4865, 0x7806, 0x6827, 0x18c0, 0x08e1, 0x3882, 0x28a3,
    0xcb7d, 0xdb5c, 0xeb3f, 0xfb1e, 0x8bf9, 0x9bd8, 0xabbb, 0xbb9a,
    0x4a75, 0x5a54, 0x6a37, 0x7a16, 0x0af1, 0x1ad0, 0x2ab3, 0x3a92,
    0xfd2e, 0xed0f, 0xdd6c, 0xcd4d, 0xbdaa, 0xad8b, 0x9de8, 0x8dc9,
    0x7c26, 0x6c07, 0x5c64, 0x4c45, 0x3ca2, 0x2c83, 0x1ce0, 0x0cc1,
    0xef1f, 0xff3e, 0xcf5d, 0xdf7c, 0xaf9b, 0xbfba, 0x8fd9, 0x9ff8,
    0x6e17, 0x7e36, 0x4e55, 0x5e74, 0x2e93, 0x3eb2, 0x0ed1, 0x1ef0,
};

uint16_t skv_rc_crc16(const void *p, size_t len)
{
    const uint8_t *b = (const uint8_t *)p;
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++)
        crc = (uint16_t)((crc << 8) ^ crc16_table[((crc >> 8) ^ b[i]) & 0xff]);
    return crc;
}

unsigned skv_rc_slot(const void *key, size_t len)
{
    const char *k = (const char *)key;
    /* the hash tag: from the first '{' to the first '}' after it, when
     * something lies between them (Redis' keyHashSlot) */
    const char *open = len ? memchr(k, '{', len) : NULL;
    if (open) {
        size_t from = (size_t)(open - k) + 1;
        const char *close = memchr(k + from, '}', len - from);
        if (close && close > k + from)
            return skv_rc_crc16(k + from, (size_t)(close - (k + from))) & (SKV_RC_SLOTS - 1);
    }
    return skv_rc_crc16(k, len) & (SKV_RC_SLOTS - 1);
}

/* ------------------------------------------------------------------------
 * The map.
 * ---------------------------------------------------------------------- */
void skv_rc_map_init(skv_rc_map *m)
{
    for (size_t s = 0; s < SKV_RC_SLOTS; s++)
        m->owner[s] = -1;
    m->node = NULL;
    m->index = NULL;
    m->nnodes = m->cap = 0;
}

void skv_rc_map_free(skv_rc_map *m)
{
    skv_free(m->node);
    skv_free(m->index);
    skv_rc_map_init(m);
}

/* FNV-1a of host and port, the bucket to start probing at */
static size_t addr_bucket(const skv_rc_addr *a)
{
    uint32_t h = 2166136261u;
    for (const char *c = a->host; *c; c++)
        h = (h ^ (uint8_t)*c) * 16777619u;
    h = (h ^ (uint32_t)a->port) * 16777619u;
    return h & (SKV_RC_INDEX_SIZE - 1);
}

int skv_rc_map_add(skv_rc_map *m, const skv_rc_addr *a, int master)
{
    if (!m->index) {
        m->index = skv_malloc(SKV_RC_INDEX_SIZE * sizeof *m->index);
        if (!m->index)
            return skv_error(SKV_ERR_NOMEM, "cluster node index");
        for (size_t i = 0; i < SKV_RC_INDEX_SIZE; i++)
            m->index[i] = -1;
    }
    /* linear probing; the table is at most half full */
    size_t b = addr_bucket(a);
    for (; m->index[b] >= 0; b = (b + 1) & (SKV_RC_INDEX_SIZE - 1)) {
        skv_rc_node *n = &m->node[m->index[b]];
        if (n->addr.port == a->port && strcmp(n->addr.host, a->host) == 0) {
            n->master |= master != 0;
            return m->index[b];
        }
    }
    if (m->nnodes >= SKV_RC_MAX_NODES)
        return skv_error(SKV_ERR_TOO_LARGE, "more than %d cluster nodes", SKV_RC_MAX_NODES);
    if (m->nnodes == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 8;
        skv_rc_node *n = skv_realloc(m->node, cap * sizeof *n);
        if (!n)
            return skv_error(SKV_ERR_NOMEM, "cluster node list");
        m->node = n;
        m->cap = cap;
    }
    m->node[m->nnodes].addr = *a;
    m->node[m->nnodes].master = master != 0;
    m->index[b] = (int32_t)m->nnodes;
    return (int)m->nnodes++;
}

int skv_rc_map_masters(const skv_rc_map *m)
{
    int n = 0;
    uint8_t *seen = m->nnodes ? skv_calloc(m->nnodes, 1) : NULL;
    if (m->nnodes && !seen)
        return 0;
    for (size_t s = 0; s < SKV_RC_SLOTS; s++) {
        int32_t o = m->owner[s];
        if (o >= 0 && (size_t)o < m->nnodes && !seen[o]) {
            seen[o] = 1;
            n++;
        }
    }
    skv_free(seen);
    return n;
}

/* ------------------------------------------------------------------------
 * Addresses.
 * ---------------------------------------------------------------------- */
/* A host of len bytes into out->host: no NUL inside, at most
 * SKV_RC_HOST_MAX bytes. */
static int set_host(skv_rc_addr *out, const char *h, size_t len)
{
    if (len > SKV_RC_HOST_MAX)
        return skv_error(SKV_ERR_FORMAT, "host of %zu bytes (at most %d)", len, SKV_RC_HOST_MAX);
    if (memchr(h, '\0', len))
        return skv_error(SKV_ERR_FORMAT, "host with a NUL byte");
    memcpy(out->host, h, len);
    out->host[len] = '\0';
    return 0;
}

/* Decimal digits only (no sign, no space), value within lo..hi. */
static int parse_uint(const char *s, size_t len, long lo, long hi, long *out)
{
    if (len == 0 || len > 9)
        return skv_error(SKV_ERR_FORMAT, "not a number: '%.*s'", (int)(len > 16 ? 16 : len), s);
    long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return skv_error(SKV_ERR_FORMAT, "not a number: '%.*s'", (int)(len > 16 ? 16 : len),
                             s);
        v = v * 10 + (s[i] - '0');
    }
    if (v < lo || v > hi)
        return skv_error(SKV_ERR_RANGE, "%ld outside %ld..%ld", v, lo, hi);
    *out = v;
    return 0;
}

int skv_rc_parse_addr(const char *s, size_t len, const char *default_host, skv_rc_addr *out)
{
    const char *colon = NULL;
    for (size_t i = len; i > 0; i--) {
        if (s[i - 1] == ':') {
            colon = s + i - 1;
            break;
        }
    }
    if (!colon)
        return skv_error(SKV_ERR_FORMAT, "'%.*s': no ':port'", (int)(len > 64 ? 64 : len), s);
    long port;
    int rc = parse_uint(colon + 1, len - (size_t)(colon + 1 - s), 1, 65535, &port);
    if (rc)
        return skv_error(rc, "'%.*s': bad port", (int)(len > 64 ? 64 : len), s);
    const char *h = s;
    size_t hl = (size_t)(colon - s);
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    if (hl == 0) {
        if (!default_host)
            return skv_error(SKV_ERR_FORMAT, "'%.*s': no host", (int)(len > 64 ? 64 : len), s);
        h = default_host;
        hl = strlen(default_host);
    }
    out->port = (int)port;
    return set_host(out, h, hl);
}

int skv_rc_parse_redirect(const char *msg, size_t len, const char *from_host, int *slot,
                          skv_rc_addr *to)
{
    int kind;
    size_t at;
    if (len >= 6 && memcmp(msg, "MOVED ", 6) == 0) {
        kind = SKV_RC_REDIRECT_MOVED;
        at = 6;
    } else if (len >= 4 && memcmp(msg, "ASK ", 4) == 0) {
        kind = SKV_RC_REDIRECT_ASK;
        at = 4;
    } else {
        return 0;
    }
    const char *sp = memchr(msg + at, ' ', len - at);
    if (!sp)
        return skv_error(SKV_ERR_FORMAT, "redirect without an address");
    long s;
    int rc = parse_uint(msg + at, (size_t)(sp - (msg + at)), 0, SKV_RC_SLOTS - 1, &s);
    if (rc)
        return rc;
    size_t from = (size_t)(sp + 1 - msg);
    /* the address ends the line; tolerate trailing spaces */
    size_t end = len;
    while (end > from && msg[end - 1] == ' ')
        end--;
    rc = skv_rc_parse_addr(msg + from, end - from, from_host, to);
    if (rc)
        return rc;
    *slot = (int)s;
    return kind;
}

/* ------------------------------------------------------------------------
 * CLUSTER SLOTS.
 * ---------------------------------------------------------------------- */
/* A node entry [host, port, ...] into *a; 1 when its endpoint is unknown
 * ("?"), 0 when set, or an error. */
static int parse_node(const redisReply *n, const char *asked_host, skv_rc_addr *a)
{
    if (!n || n->type != REDIS_REPLY_ARRAY || n->elements < 2 || !n->element)
        return skv_error(SKV_ERR_FORMAT, "a node is not [host, port, ...]");
    const redisReply *h = n->element[0], *p = n->element[1];
    if (!h || !p)
        return skv_error(SKV_ERR_FORMAT, "a node with a missing field");
    if (p->type != REDIS_REPLY_INTEGER)
        return skv_error(SKV_ERR_FORMAT, "a node's port is not an integer");
    if (p->integer < 1 || p->integer > 65535)
        return skv_error(SKV_ERR_RANGE, "port %lld outside 1..65535", p->integer);
    a->port = (int)p->integer;
    if (h->type == REDIS_REPLY_NIL || (h->type == REDIS_REPLY_STRING && h->len == 0)) {
        if (!asked_host)
            return skv_error(SKV_ERR_FORMAT, "a node without a host");
        return set_host(a, asked_host, strlen(asked_host));
    }
    if (h->type != REDIS_REPLY_STRING || !h->str)
        return skv_error(SKV_ERR_FORMAT, "a node's host is not a string");
    if (h->len == 1 && h->str[0] == '?')
        return 1;
    return set_host(a, h->str, h->len);
}

static int slot_number(const redisReply *v, long long *out)
{
    if (!v || v->type != REDIS_REPLY_INTEGER)
        return skv_error(SKV_ERR_FORMAT, "a slot range bound is not an integer");
    if (v->integer < 0 || v->integer >= SKV_RC_SLOTS)
        return skv_error(SKV_ERR_RANGE, "slot %lld outside 0..%d", v->integer, SKV_RC_SLOTS - 1);
    *out = v->integer;
    return 0;
}

static int parse_range(const redisReply *e, const char *asked_host, skv_rc_map *m, int *served)
{
    if (!e || e->type != REDIS_REPLY_ARRAY || e->elements < 3 || !e->element)
        return skv_error(SKV_ERR_FORMAT, "a slot range is not [start, end, master, ...]");
    long long lo, hi;
    int rc = slot_number(e->element[0], &lo);
    if (!rc)
        rc = slot_number(e->element[1], &hi);
    if (rc)
        return rc;
    if (lo > hi)
        return skv_error(SKV_ERR_RANGE, "slot range %lld..%lld is reversed", lo, hi);
    int32_t owner = -1;
    for (size_t j = 2; j < e->elements; j++) {
        skv_rc_addr a;
        rc = parse_node(e->element[j], asked_host, &a);
        if (rc < 0)
            return rc;
        if (rc == 1)
            continue; /* unknown endpoint: nowhere to connect */
        rc = skv_rc_map_add(m, &a, j == 2);
        if (rc < 0)
            return rc;
        if (j == 2)
            owner = rc;
    }
    for (long long s = lo; s <= hi; s++) {
        if (m->owner[s] != -2)
            return skv_error(SKV_ERR_RANGE, "slot %lld listed twice", s);
        m->owner[s] = owner;
    }
    *served += owner >= 0;
    return 0;
}

int skv_rc_parse_slots(const redisReply *r, const char *asked_host, skv_rc_map *out)
{
    skv_rc_map_init(out);
    if (!r || r->type != REDIS_REPLY_ARRAY)
        return skv_error(SKV_ERR_FORMAT, "CLUSTER SLOTS: not an array");
    if (r->elements && !r->element)
        return skv_error(SKV_ERR_FORMAT, "CLUSTER SLOTS: array without elements");
    /* -2 marks a slot no range has listed yet (duplicates are refused) */
    for (size_t s = 0; s < SKV_RC_SLOTS; s++)
        out->owner[s] = -2;
    int served = 0, rc = 0;
    for (size_t i = 0; i < r->elements && !rc; i++)
        rc = parse_range(r->element[i], asked_host, out, &served);
    if (!rc && served == 0)
        rc = skv_error(SKV_ERR_FORMAT, "CLUSTER SLOTS: no slot is served");
    if (rc) {
        skv_rc_map_free(out);
        return rc;
    }
    for (size_t s = 0; s < SKV_RC_SLOTS; s++)
        if (out->owner[s] == -2)
            out->owner[s] = -1;
    return 0;
}

/* ------------------------------------------------------------------------
 * The reader's cap on arrays. hiredis (0.14) callocs an array's element
 * vector as soon as it reads "*N": the wrapper refuses N above the cap
 * first, and otherwise calls hiredis' own function.
 * ---------------------------------------------------------------------- */
static redisReplyObjectFunctions capped_fns;
static void *(*hiredis_create_array)(const redisReadTask *, int);
static pthread_once_t capped_once = PTHREAD_ONCE_INIT;

static void *capped_create_array(const redisReadTask *task, int elements)
{
    if (elements < 0 || elements > SKV_RC_MAX_ELEMENTS)
        return NULL; /* the reader then fails ("Out of memory") */
    return hiredis_create_array(task, elements);
}

static void capped_init(void)
{
    /* hiredis' default functions are static in it: read them off a reader */
    redisReader *r = redisReaderCreate();
    if (!r || !r->fn) {
        redisReaderFree(r);
        return;
    }
    capped_fns = *r->fn;
    hiredis_create_array = capped_fns.createArray;
    if (hiredis_create_array)
        capped_fns.createArray = capped_create_array;
    redisReaderFree(r);
}

void skv_rc_reader_cap(redisReader *r)
{
    pthread_once(&capped_once, capped_init);
    if (r && hiredis_create_array && r->fn && r->fn->createArray == hiredis_create_array)
        r->fn = &capped_fns;
}
