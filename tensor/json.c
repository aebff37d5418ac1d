/*
 * json.c - a strict RFC 8259 DOM parser for untrusted input.
 *
 * Every node and every decoded string lives in a chain of arena chunks
 * owned by the document, so a parse is a handful of allocations and
 * skv_json_free() is a walk over the chunk list. The root node is the
 * first member of the document header, which is how skv_json_free() finds
 * the arena from the root pointer.
 *
 * Strictness: no comments, no trailing commas, no NaN/Infinity, no leading
 * zeros, no '+', no bare '.', no control characters or invalid UTF-8 in
 * strings, no lone surrogates, no U+0000 (strings are handed out as C
 * strings), and nothing but whitespace after the value. Nesting deeper
 * than SKV_JSON_MAX_DEPTH is SKV_ERR_TOO_LARGE. Every error detail names
 * the byte offset where the problem was detected.
 */
#include "skv_tensor.h"

#include <stdalign.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ---- arena ------------------------------------------------------------ */

#define ARENA_FIRST_CHUNK 4096u
#define ARENA_MAX_CHUNK (64u << 20)

typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t cap;
    size_t used;
    alignas(max_align_t) unsigned char data[];
} arena_chunk;

typedef struct {
    skv_json root;        /* must stay first: skv_json_free casts back */
    arena_chunk *chunks;  /* newest first */
    size_t next_cap;
} json_doc;

static void *arena_alloc(json_doc *doc, size_t n, size_t align)
{
    arena_chunk *c = doc->chunks;
    if (c) {
        size_t off = (c->used + (align - 1)) & ~(align - 1);
        if (off <= c->cap && c->cap - off >= n) {
            c->used = off + n;
            return c->data + off;
        }
    }
    size_t cap = doc->next_cap;
    if (cap < n)
        cap = n;
    if (cap > SIZE_MAX - sizeof(arena_chunk))
        return NULL;
    c = skv_malloc(sizeof(arena_chunk) + cap);
    if (!c)
        return NULL;
    c->next = doc->chunks;
    c->cap = cap;
    c->used = n;
    doc->chunks = c;
    if (doc->next_cap < ARENA_MAX_CHUNK)
        doc->next_cap *= 2;
    return c->data;
}

static void doc_free(json_doc *doc)
{
    if (!doc)
        return;
    arena_chunk *c = doc->chunks;
    while (c) {
        arena_chunk *next = c->next;
        skv_free(c);
        c = next;
    }
    skv_free(doc);
}

/* ---- parser ----------------------------------------------------------- */

typedef struct {
    const char *base;
    const char *p;
    const char *end;
    json_doc *doc;
    size_t nodes_left; /* SKV_JSON_MAX_NODES budget */
} json_parser;

static size_t off_of(const json_parser *ps, const char *at)
{
    return (size_t)(at - ps->base);
}

static int is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static void skip_ws(json_parser *ps)
{
    while (ps->p < ps->end && is_ws(*ps->p))
        ps->p++;
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Four hex digits at p (p + 4 <= end checked by the caller). */
static int read_hex4(const char *p, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0)
            return -1;
        v = (v << 4) | (unsigned)h;
    }
    *out = v;
    return 0;
}

static size_t put_utf8(char *dst, unsigned cp)
{
    unsigned char *d = (unsigned char *)dst;
    if (cp < 0x80) {
        d[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        d[0] = (unsigned char)(0xC0 | (cp >> 6));
        d[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        d[0] = (unsigned char)(0xE0 | (cp >> 12));
        d[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        d[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    d[0] = (unsigned char)(0xF0 | (cp >> 18));
    d[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    d[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    d[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Parse a string whose opening quote is at ps->p. The decoded text is
 * never longer than the raw text (every escape shrinks or keeps its
 * length), so one arena block of raw length + 1 holds it. */
static int parse_string(json_parser *ps, const char **out, size_t *out_len)
{
    const char *start = ps->p + 1;
    const char *q = start;
    while (q < ps->end && *q != '"') {
        if (*q == '\\') {
            if (q + 1 >= ps->end)
                break;
            q += 2;
        } else {
            q++;
        }
    }
    if (q >= ps->end)
        return skv_error(SKV_ERR_FORMAT, "json: byte %zu: unterminated string",
                         off_of(ps, ps->p));
    const char *close = q;
    char *dst = arena_alloc(ps->doc, (size_t)(close - start) + 1, 1);
    if (!dst)
        return skv_error(SKV_ERR_NOMEM, "json: out of memory for a string");
    size_t n = 0;
    const char *p = start;
    while (p < close) {
        unsigned char c = (unsigned char)*p;
        if (c < 0x20)
            return skv_error(SKV_ERR_FORMAT,
                             "json: byte %zu: control character 0x%02x in string",
                             off_of(ps, p), c);
        if (c >= 0x80) {
            size_t l = skv_utf8_seq_len((const unsigned char *)p,
                                    (const unsigned char *)close);
            if (l == 0)
                return skv_error(SKV_ERR_FORMAT,
                                 "json: byte %zu: invalid UTF-8 in string",
                                 off_of(ps, p));
            memcpy(dst + n, p, l);
            n += l;
            p += l;
            continue;
        }
        if (c != '\\') {
            dst[n++] = (char)c;
            p++;
            continue;
        }
        /* an escape: the scan above guarantees p + 1 < close */
        const char *esc = p;
        char e = p[1];
        p += 2;
        switch (e) {
        case '"': dst[n++] = '"'; break;
        case '\\': dst[n++] = '\\'; break;
        case '/': dst[n++] = '/'; break;
        case 'b': dst[n++] = '\b'; break;
        case 'f': dst[n++] = '\f'; break;
        case 'n': dst[n++] = '\n'; break;
        case 'r': dst[n++] = '\r'; break;
        case 't': dst[n++] = '\t'; break;
        case 'u': {
            unsigned cp;
            if (close - p < 4 || read_hex4(p, &cp) != 0)
                return skv_error(SKV_ERR_FORMAT,
                                 "json: byte %zu: \\u needs four hex digits",
                                 off_of(ps, esc));
            p += 4;
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return skv_error(SKV_ERR_FORMAT,
                                 "json: byte %zu: lone low surrogate \\u%04X",
                                 off_of(ps, esc), cp);
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo;
                if (close - p < 6 || p[0] != '\\' || p[1] != 'u' ||
                    read_hex4(p + 2, &lo) != 0 || lo < 0xDC00 || lo > 0xDFFF)
                    return skv_error(SKV_ERR_FORMAT,
                                     "json: byte %zu: high surrogate \\u%04X not "
                                     "followed by a low surrogate",
                                     off_of(ps, esc), cp);
                p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (cp == 0)
                return skv_error(SKV_ERR_FORMAT,
                                 "json: byte %zu: U+0000 is not allowed in strings",
                                 off_of(ps, esc));
            n += put_utf8(dst + n, cp);
            break;
        }
        default:
            return skv_error(SKV_ERR_FORMAT, "json: byte %zu: invalid escape '\\%c'",
                             off_of(ps, esc),
                             (e >= 0x20 && e < 0x7F) ? e : '?');
        }
    }
    dst[n] = '\0';
    *out = dst;
    *out_len = n;
    ps->p = close + 1;
    return 0;
}

static int parse_number(json_parser *ps, skv_json *node)
{
    const char *s = ps->p;
    const char *p = s;
    int neg = 0, integral = 1;
    if (p < ps->end && *p == '-') {
        neg = 1;
        p++;
    }
    if (p >= ps->end || !is_digit(*p))
        return skv_error(SKV_ERR_FORMAT, "json: byte %zu: invalid number",
                         off_of(ps, s));
    const char *int_start = p;
    if (*p == '0') {
        p++;
        if (p < ps->end && is_digit(*p))
            return skv_error(SKV_ERR_FORMAT,
                             "json: byte %zu: leading zero in number", off_of(ps, s));
    } else {
        while (p < ps->end && is_digit(*p))
            p++;
    }
    const char *int_end = p;
    if (p < ps->end && *p == '.') {
        integral = 0;
        p++;
        if (p >= ps->end || !is_digit(*p))
            return skv_error(SKV_ERR_FORMAT,
                             "json: byte %zu: digit expected after '.'",
                             off_of(ps, p));
        while (p < ps->end && is_digit(*p))
            p++;
    }
    if (p < ps->end && (*p == 'e' || *p == 'E')) {
        integral = 0;
        p++;
        if (p < ps->end && (*p == '+' || *p == '-'))
            p++;
        if (p >= ps->end || !is_digit(*p))
            return skv_error(SKV_ERR_FORMAT,
                             "json: byte %zu: digit expected in exponent",
                             off_of(ps, p));
        while (p < ps->end && is_digit(*p))
            p++;
    }
    size_t len = (size_t)(p - s);

    /* strtod needs a NUL-terminated copy: the input is not terminated and
     * may continue with more digits-looking bytes in a caller's buffer. */
    char small[128];
    char *buf = small;
    if (len >= sizeof small) {
        buf = skv_malloc(len + 1);
        if (!buf)
            return skv_error(SKV_ERR_NOMEM, "json: out of memory for a number");
    }
    memcpy(buf, s, len);
    buf[len] = '\0';
    node->num = strtod(buf, NULL);
    if (buf != small)
        skv_free(buf);

    node->is_int = 0;
    node->i64 = 0;
    if (integral) {
        /* Exact int64 by accumulating the magnitude as uint64. */
        uint64_t limit = neg ? (uint64_t)INT64_MAX + 1u : (uint64_t)INT64_MAX;
        uint64_t v = 0;
        int fits = 1;
        for (const char *d = int_start; d < int_end; d++) {
            unsigned dig = (unsigned)(*d - '0');
            if (v > (limit - dig) / 10) {
                fits = 0;
                break;
            }
            v = v * 10 + dig;
        }
        if (fits) {
            node->is_int = 1;
            if (neg)
                node->i64 = v == (uint64_t)INT64_MAX + 1u ? INT64_MIN : -(int64_t)v;
            else
                node->i64 = (int64_t)v;
        }
    }
    node->type = SKV_JSON_NUM;
    ps->p = p;
    return 0;
}

static int match_lit(json_parser *ps, const char *lit)
{
    size_t n = strlen(lit);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, lit, n) != 0)
        return skv_error(SKV_ERR_FORMAT, "json: byte %zu: invalid literal",
                         off_of(ps, ps->p));
    ps->p += n;
    return 0;
}

static skv_json *new_node(json_parser *ps)
{
    skv_json *n = arena_alloc(ps->doc, sizeof(skv_json), alignof(skv_json));
    if (n)
        memset(n, 0, sizeof *n);
    return n;
}

static int parse_value(json_parser *ps, skv_json *node, int depth);

static int parse_container(json_parser *ps, skv_json *node, int depth)
{
    int is_obj = *ps->p == '{';
    char close = is_obj ? '}' : ']';
    if (depth >= SKV_JSON_MAX_DEPTH)
        return skv_error(SKV_ERR_TOO_LARGE,
                         "json: byte %zu: nesting deeper than %d levels",
                         off_of(ps, ps->p), SKV_JSON_MAX_DEPTH);
    node->type = is_obj ? SKV_JSON_OBJ : SKV_JSON_ARR;
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        return 0;
    }
    skv_json *tail = NULL;
    for (;;) {
        if (ps->nodes_left == 0)
            return skv_error(SKV_ERR_TOO_LARGE, "json: byte %zu: more than %u values",
                             off_of(ps, ps->p), SKV_JSON_MAX_NODES);
        ps->nodes_left--;
        skv_json *child = new_node(ps);
        if (!child)
            return skv_error(SKV_ERR_NOMEM, "json: out of memory for a node");
        if (is_obj) {
            if (ps->p >= ps->end || *ps->p != '"')
                return skv_error(SKV_ERR_FORMAT,
                                 "json: byte %zu: object key (a string) expected",
                                 off_of(ps, ps->p));
            int rc = parse_string(ps, &child->key, &child->key_len);
            if (rc)
                return rc;
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':')
                return skv_error(SKV_ERR_FORMAT,
                                 "json: byte %zu: ':' expected after object key",
                                 off_of(ps, ps->p));
            ps->p++;
            skip_ws(ps);
        }
        int rc = parse_value(ps, child, depth + 1);
        if (rc)
            return rc;
        if (tail)
            tail->next = child;
        else
            node->child = child;
        tail = child;
        node->count++;
        skip_ws(ps);
        if (ps->p >= ps->end)
            return skv_error(SKV_ERR_FORMAT, "json: byte %zu: unterminated %s",
                             off_of(ps, ps->p), is_obj ? "object" : "array");
        if (*ps->p == ',') {
            ps->p++;
            skip_ws(ps);
            if (ps->p < ps->end && *ps->p == close)
                return skv_error(SKV_ERR_FORMAT, "json: byte %zu: trailing comma",
                                 off_of(ps, ps->p));
            continue;
        }
        if (*ps->p == close) {
            ps->p++;
            return 0;
        }
        return skv_error(SKV_ERR_FORMAT, "json: byte %zu: ',' or '%c' expected",
                         off_of(ps, ps->p), close);
    }
}

/* ps->p is at the first byte of a value (whitespace already skipped). */
static int parse_value(json_parser *ps, skv_json *node, int depth)
{
    if (ps->p >= ps->end)
        return skv_error(SKV_ERR_FORMAT, "json: byte %zu: value expected",
                         off_of(ps, ps->p));
    switch (*ps->p) {
    case '{':
    case '[':
        return parse_container(ps, node, depth);
    case '"':
        node->type = SKV_JSON_STR;
        return parse_string(ps, &node->str, &node->str_len);
    case 't':
        node->type = SKV_JSON_BOOL;
        node->boolean = 1;
        return match_lit(ps, "true");
    case 'f':
        node->type = SKV_JSON_BOOL;
        node->boolean = 0;
        return match_lit(ps, "false");
    case 'n':
        node->type = SKV_JSON_NULL;
        return match_lit(ps, "null");
    default:
        if (*ps->p == '-' || is_digit(*ps->p))
            return parse_number(ps, node);
        return skv_error(SKV_ERR_FORMAT, "json: byte %zu: unexpected character",
                         off_of(ps, ps->p));
    }
}

int skv_json_parse(const char *text, size_t len, skv_json **out)
{
    if (!out || (!text && len))
        return skv_error(SKV_ERR_ARG, "json: NULL argument");
    *out = NULL;
    json_doc *doc = skv_malloc(sizeof *doc);
    if (!doc)
        return skv_error(SKV_ERR_NOMEM, "json: out of memory");
    memset(doc, 0, sizeof *doc);
    /* Chunks start at 4 KiB (one chunk for a typical header) and double. */
    doc->next_cap = ARENA_FIRST_CHUNK;
    json_parser ps = { text, text, text + len, doc, SKV_JSON_MAX_NODES };
    skip_ws(&ps);
    int rc = parse_value(&ps, &doc->root, 0);
    if (rc == 0) {
        skip_ws(&ps);
        if (ps.p != ps.end)
            rc = skv_error(SKV_ERR_FORMAT,
                           "json: byte %zu: unexpected data after the value",
                           off_of(&ps, ps.p));
    }
    if (rc) {
        doc_free(doc);
        return rc;
    }
    *out = &doc->root;
    return 0;
}

void skv_json_free(skv_json *root)
{
    /* root is the first member of its json_doc */
    doc_free((json_doc *)(void *)root);
}

const skv_json *skv_json_get(const skv_json *obj, const char *key)
{
    if (!obj || !key || obj->type != SKV_JSON_OBJ)
        return NULL;
    size_t n = strlen(key);
    for (const skv_json *c = obj->child; c; c = c->next)
        if (c->key_len == n && memcmp(c->key, key, n) == 0)
            return c;
    return NULL;
}

const skv_json *skv_json_at(const skv_json *arr, size_t i)
{
    if (!arr || arr->type != SKV_JSON_ARR || i >= arr->count)
        return NULL;
    const skv_json *c = arr->child;
    while (i-- && c)
        c = c->next;
    return c;
}
