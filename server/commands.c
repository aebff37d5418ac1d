/* The server's commands (server/README.md documents each), INFO and the
 * per-tenant and per-command statistics.
 *
 * Commands flagged SRV_F_LOOP run on the loop thread and touch only the
 * client; the others run on a worker and touch only their job, the store
 * handle (thread-safe) and the statistics (under smu). The tenant is
 * always the client's, fixed when it connected or authenticated: no
 * command takes a tenant argument. */
#include <ctype.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "seqkv.h"
#include "remote.h"
#include "server_int.h"

/* ------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------- */
int srv_arg_is(const srv_job *j, size_t i, const char *s)
{
    return i < j->cmd.argc && j->cmd.argl[i] == strlen(s) &&
           strcasecmp((const char *)j->cmd.argv[i], s) == 0;
}

const char *srv_tenant_name(const skv_server *s, const srv_job *j)
{
    return s->cfg.tenants[j->tenant].name;
}


void srv_err_reply(srv_job *j, const char *code, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    skv_rbuf_error(&j->reply, code, "%s", msg);
}

void srv_store_err(skv_server *s, srv_job *j, int rc, const char *what)
{
    const char *code = "ERR";
    switch (rc) {
    case SKV_ERR_NOT_FOUND: code = "NOTFOUND"; break;
    case SKV_ERR_SHAPE: code = "SHAPE"; break;
    case SKV_ERR_CORRUPT: code = "CORRUPT"; break;
    case SKV_ERR_TOO_LARGE: code = "TOOLARGE"; break;
    default: break;
    }
    const char *d = seqkv_error_detail(), *where = seqkv_error_where();
    if (d && *d)
        srv_err_reply(j, code, "%s: %s (%s)", what, seqkv_strerror(rc), d);
    else
        srv_err_reply(j, code, "%s: %s", what, seqkv_strerror(rc));
    /* the log, not the reply, says where in the source it arose */
    srv_log(s, "%s (tenant %s): %s (%s)%s%s%s", what,
            j->tenant >= 0 ? srv_tenant_name(s, j) : "-", seqkv_strerror(rc), d ? d : "",
            where && *where ? " [" : "", where ? where : "", where && *where ? "]" : "");
    if (j->tenant >= 0) {
        pthread_mutex_lock(&s->smu);
        s->ts[j->tenant].errors++;
        pthread_mutex_unlock(&s->smu);
    }
}

int srv_parse_ll(const uint8_t *a, size_t len, long long lo, long long hi, long long *out)
{
    if (len == 0 || len > 18)
        return -1;
    long long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (a[i] < '0' || a[i] > '9')
            return -1;
        v = v * 10 + (a[i] - '0');
    }
    if (v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* A profile name argument; replies and returns -1 when it is not one. */
int srv_name_arg(srv_job *j, size_t i, char out[SEQKV_NAME_MAX + 1])
{
    size_t n = j->cmd.argl[i];
    if (n == 0 || n > SEQKV_NAME_MAX || memchr(j->cmd.argv[i], 0, n)) {
        srv_err_reply(j, "ERR", "a profile name is 1 to %d bytes", SEQKV_NAME_MAX);
        return -1;
    }
    memcpy(out, j->cmd.argv[i], n + 1);
    return 0;
}

/* Tokens: a bulk of little-endian u32. Replies and returns -1 on error. */
static int tokens_arg(srv_job *j, size_t i, int32_t **tok, size_t *n)
{
    size_t len = j->cmd.argl[i];
    *tok = NULL;
    if (len == 0 || len % 4) {
        srv_err_reply(j, "ERR", "tokens are a non-empty bulk of little-endian u32 (%zu bytes given)",
                  len);
        return -1;
    }
    if (len / 4 > SEQKV_MAX_TOKENS) {
        srv_err_reply(j, "TOOLARGE", "%zu tokens: at most %u per request", len / 4, SEQKV_MAX_TOKENS);
        return -1;
    }
    int32_t *t = skv_malloc(len);
    if (!t) {
        srv_err_reply(j, "ERR", "out of memory");
        return -1;
    }
    for (size_t k = 0; k < len / 4; k++) {
        uint32_t v = skv_load32_le(j->cmd.argv[i] + 4 * k);
        if (v > INT32_MAX) {
            skv_free(t);
            srv_err_reply(j, "ERR", "token %zu is %" PRIu32 ": token ids are below 2^31", k, v);
            return -1;
        }
        t[k] = (int32_t)v;
    }
    *tok = t;
    *n = len / 4;
    return 0;
}

/* TOKENS "<id> <id> ...": decimal ids in [0, 2^31) separated by spaces or
 * tabs, 1 to SEQKV_MAX_TOKENS of them. Replies and returns -1 on error. */
static int tokens_text(srv_job *j, const uint8_t *a, size_t len, int32_t **tok, size_t *n)
{
    size_t cap = len / 2 + 1, k, bad = 0, blen = 0;
    if (cap > SEQKV_MAX_TOKENS)
        cap = SEQKV_MAX_TOKENS;
    int32_t *t = skv_malloc(cap * sizeof *t);
    if (!t) {
        srv_err_reply(j, "ERR", "out of memory");
        return -1;
    }
    int rc = skv_resp_token_text(a, len, SEQKV_MAX_TOKENS, t, &k, &bad, &blen);
    if (rc == SKV_ERR_FORMAT)
        srv_err_reply(j, "ERR", "TOKENS: id %zu, \"%.*s\", is not a token id (a decimal number "
                            "from 0 to 2147483647)", k, (int)(blen < 24 ? blen : 24), a + bad);
    else if (rc)
        srv_err_reply(j, "TOOLARGE", "TOKENS: more than %u ids: at most %u per request", SEQKV_MAX_TOKENS,
                  SEQKV_MAX_TOKENS);
    else if (k == 0)
        srv_err_reply(j, "ERR", "TOKENS: no token ids (want \"<id> <id> ...\")");
    if (rc || k == 0) {
        skv_free(t);
        return -1;
    }
    *tok = t;
    *n = k;
    return 0;
}

/* The tokens of a command from argument i on: TOKENS "<ids>" (two
 * arguments) or one binary bulk. A 6-byte "TOKENS" is never a binary
 * token bulk (not a multiple of 4), so the two cannot be confused. *next
 * is the argument after them. Replies and returns -1 on error. */
static int tokens_at(srv_job *j, size_t i, int32_t **tok, size_t *n, size_t *next)
{
    *tok = NULL;
    if (srv_arg_is(j, i, "TOKENS")) {
        if (i + 1 >= j->cmd.argc) {
            srv_err_reply(j, "ERR", "TOKENS wants one argument, the ids: TOKENS \"1 2 3\"");
            return -1;
        }
        *next = i + 2;
        return tokens_text(j, j->cmd.argv[i + 1], j->cmd.argl[i + 1], tok, n);
    }
    *next = i + 1;
    return tokens_arg(j, i, tok, n);
}

/* tokens_at, for a command whose tokens are followed by exactly `after`
 * arguments; usage is its syntax for the error reply. */
static int tokens_then(srv_job *j, size_t after, const char *usage, int32_t **tok, size_t *n)
{
    size_t next;
    if (tokens_at(j, 2, tok, n, &next))
        return -1;
    if (next + after != j->cmd.argc) {
        skv_free(*tok);
        *tok = NULL;
        srv_err_reply(j, "ERR", "wrong number of arguments: %s", usage);
        return -1;
    }
    return 0;
}

size_t srv_put_kv_len(const srv_job *j)
{
    size_t n = 0;
    for (size_t i = 1; i < j->cmd.argc; i++)
        n += j->cmd.argl[i];
    return n;
}

#define TS(s, j) (&(s)->ts[(j)->tenant])

/* ------------------------------------------------------------------------
 * Loop-thread commands
 * ---------------------------------------------------------------------- */
static void cmd_ping(skv_server *s, srv_job *j)
{
    (void)s;
    if (j->cmd.argc == 2)
        skv_rbuf_bulk(&j->reply, j->cmd.argv[1], j->cmd.argl[1]);
    else
        skv_rbuf_simple(&j->reply, "PONG");
}

static void auth_failed(skv_server *s, srv_job *j, int rc)
{
    if (rc == -2) {
        srv_err_reply(j, "BUSY", "that tenant has all the connections its max-clients allows");
        return;
    }
    srv_err_reply(j, "WRONGPASS", "invalid username-password pair or user is disabled.");
    if (j->c->auth_fails >= 3) {
        j->close_after = 1;
        srv_log(s, "client %llu (uid %u): %d failed AUTH attempts, closing",
                (unsigned long long)j->c->id, (unsigned)j->c->uid, j->c->auth_fails);
    }
}

/* AUTH <token> | AUTH <tenant> <token> */
static void cmd_auth(skv_server *s, srv_job *j)
{
    int two = j->cmd.argc == 3;
    int rc = srv_auth(s, j->c, two ? j->cmd.argv[1] : NULL, two ? j->cmd.argl[1] : 0,
                      j->cmd.argv[two ? 2 : 1], j->cmd.argl[two ? 2 : 1]);
    if (rc) {
        auth_failed(s, j, rc);
        return;
    }
    skv_rbuf_simple(&j->reply, "OK");
}

/* SELECT db: one database, 0 (NIXL's Redis plugin selects it) */
static void cmd_select(skv_server *s, srv_job *j)
{
    (void)s;
    long long db;
    const int neg = j->cmd.argl[1] > 1 && j->cmd.argv[1][0] == '-';
    if (srv_parse_ll(j->cmd.argv[1] + neg, j->cmd.argl[1] - (size_t)neg, 0, LLONG_MAX, &db))
        srv_err_reply(j, "ERR", "value is not an integer or out of range");
    else if (neg || db != 0)
        srv_err_reply(j, "ERR", "DB index is out of range");
    else
        skv_rbuf_simple(&j->reply, "OK");
}

/* HELLO [protover [AUTH user pass] [SETNAME name]] */
static void cmd_hello(skv_server *s, srv_job *j)
{
    srv_client *c = j->c;
    int proto = c->proto;
    size_t i = 1;
    if (j->cmd.argc > 1) {
        long long v;
        if (srv_parse_ll(j->cmd.argv[1], j->cmd.argl[1], 0, 1000, &v) || (v != 2 && v != 3)) {
            srv_err_reply(j, "NOPROTO", "unsupported protocol version (2 or 3)");
            return;
        }
        proto = (int)v;
        i = 2;
    }
    for (; i < j->cmd.argc; i++) {
        if (srv_arg_is(j, i, "AUTH") && i + 2 < j->cmd.argc) {
            int rc = srv_auth(s, c, j->cmd.argv[i + 1], j->cmd.argl[i + 1], j->cmd.argv[i + 2],
                              j->cmd.argl[i + 2]);
            if (rc) {
                auth_failed(s, j, rc);
                return;
            }
            i += 2;
        } else if (srv_arg_is(j, i, "SETNAME") && i + 1 < j->cmd.argc) {
            i++;
        } else {
            srv_err_reply(j, "ERR", "syntax error in HELLO");
            return;
        }
    }
    if (c->tenant < 0) {
        srv_err_reply(j, "NOAUTH", "HELLO must be called with the client already authenticated, "
                                   "otherwise the HELLO <proto> AUTH <user> <pass> option can be "
                                   "used to authenticate the client and select the RESP protocol "
                                   "version at the same time");
        return;
    }
    c->proto = proto;
    j->proto = proto;
    skv_rbuf *r = &j->reply;
    skv_rbuf_map(r, proto, 9);
    skv_rbuf_bulk_str(r, "server");
    skv_rbuf_bulk_str(r, "seqkv");
    skv_rbuf_bulk_str(r, "version");
    skv_rbuf_bulk_str(r, SEQKV_VERSION);
    skv_rbuf_bulk_str(r, "proto");
    skv_rbuf_int(r, proto);
    skv_rbuf_bulk_str(r, "id");
    skv_rbuf_int(r, (long long)c->id);
    skv_rbuf_bulk_str(r, "mode");
    skv_rbuf_bulk_str(r, "standalone");
    skv_rbuf_bulk_str(r, "role");
    skv_rbuf_bulk_str(r, "master");
    skv_rbuf_bulk_str(r, "modules");
    skv_rbuf_array(r, 0);
    skv_rbuf_bulk_str(r, "tenant");
    skv_rbuf_bulk_str(r, s->cfg.tenants[c->tenant].name);
    skv_rbuf_bulk_str(r, "admin");
    skv_rbuf_int(r, c->admin);
}

static void cmd_quit(skv_server *s, srv_job *j)
{
    (void)s;
    skv_rbuf_simple(&j->reply, "OK");
    j->close_after = 1;
}

/* COMMAND [...]: an empty list, so that interactive redis-cli starts. */
static void cmd_command(skv_server *s, srv_job *j)
{
    (void)s;
    skv_rbuf_array(&j->reply, 0);
}

/* CLIENT SETNAME|SETINFO|ID: what client libraries send on connect. */
static void cmd_client(skv_server *s, srv_job *j)
{
    (void)s;
    if (srv_arg_is(j, 1, "ID"))
        skv_rbuf_int(&j->reply, (long long)j->c->id);
    else if (srv_arg_is(j, 1, "SETNAME") || srv_arg_is(j, 1, "SETINFO"))
        skv_rbuf_simple(&j->reply, "OK");
    else
        srv_err_reply(j, "ERR", "CLIENT supports ID, SETNAME and SETINFO");
}

static void cmd_shutdown(skv_server *s, srv_job *j)
{
    srv_log(s, "SHUTDOWN by client %llu (tenant %s, uid %u)", (unsigned long long)j->c->id,
            srv_tenant_name(s, j), (unsigned)j->c->uid);
    skv_rbuf_simple(&j->reply, "OK");
    atomic_store(&s->stop_req, 1);
}

/* ------------------------------------------------------------------------
 * KV.PUT, KV.LOOKUP, KV.GET, KV.DEL, KV.CALIBRATE, KV.COMPACT, KV.STATS
 * ---------------------------------------------------------------------- */
void srv_put_batch(skv_server *s, srv_job **jobs, size_t n)
{
    seqkv_put_req *q = skv_calloc(n, sizeof *q);
    int32_t **tok = skv_calloc(n, sizeof *tok);
    char(*prof)[SEQKV_NAME_MAX + 1] = skv_calloc(n, sizeof *prof);
    size_t *idx = skv_calloc(n, sizeof *idx);
    if (!q || !tok || !prof || !idx) {
        for (size_t i = 0; i < n; i++)
            srv_err_reply(jobs[i], "ERR", "KV.PUT: out of memory");
        n = 0;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        srv_job *j = jobs[i];
        size_t nt;
        if (srv_name_arg(j, 1, prof[i]) ||
            tokens_then(j, 1, "KV.PUT <profile> <tokens>|TOKENS \"<ids>\" <kv>", &tok[i], &nt))
            continue; /* replied */
        q[m].tenant = srv_tenant_name(s, j);
        q[m].profile = prof[i];
        q[m].tokens = tok[i];
        q[m].n = nt;
        q[m].kv = j->cmd.argv[j->cmd.argc - 1];
        q[m].kv_len = j->cmd.argl[j->cmd.argc - 1];
        idx[m++] = i;
    }
    const uint64_t mark = srv_remote_mark(s);
    if (m)
        seqkv_put_batch(s->db, q, m);
    const int rrc = m ? srv_remote_wait(s, mark) : SKV_OK;
    char rmsg[256];
    snprintf(rmsg, sizeof rmsg, "%s", rrc ? seqkv_error_detail() : "");
    for (size_t k = 0; k < m; k++) {
        srv_job *j = jobs[idx[k]];
        if (q[k].rc) {
            skv_error_at(q[k].rc, NULL, 0, "%s", q[k].detail);
            srv_store_err(s, j, q[k].rc, "KV.PUT");
            continue;
        }
        if (rrc) { /* (remote-durability replica) */
            srv_err_reply(j, "REMOTE", "KV.PUT: %s", rmsg);
            continue;
        }
        pthread_mutex_lock(&s->smu);
        TS(s, j)->puts++;
        TS(s, j)->tokens_put += q[k].n;
        TS(s, j)->new_tokens += q[k].n - q[k].res.cached_tokens;
        TS(s, j)->put_bytes += q[k].kv_len;
        TS(s, j)->evictions += (uint64_t)(q[k].res.evicted > 0 ? q[k].res.evicted : 0);
        pthread_mutex_unlock(&s->smu);
        /* the tokens that were not cached before this put */
        skv_rbuf_int(&j->reply, (long long)(q[k].n - q[k].res.cached_tokens));
    }
    if (m) {
        pthread_mutex_lock(&s->smu);
        s->batches++;
        s->batched_puts += m;
        pthread_mutex_unlock(&s->smu);
    }
    for (size_t i = 0; i < n; i++)
        skv_free(tok[i]);
    skv_free(q);
    skv_free(tok);
    skv_free(prof);
    skv_free(idx);
}

static void cmd_put(skv_server *s, srv_job *j)
{
    srv_put_batch(s, &j, 1);
}

/* NOT_FOUND from lookup/get/del: an unknown tenant (it never put) is a
 * miss; an unknown profile is an error. 1 when it is a miss. */
static int miss_or_err(skv_server *s, srv_job *j, const char *prof, int rc, const char *what)
{
    if (rc == SKV_ERR_NOT_FOUND) {
        seqkv_profile p = SEQKV_PROFILE_INIT;
        int rp = seqkv_profile_get(s->db, prof, &p);
        if (rp == 0)
            return 1;
        srv_store_err(s, j, rp, what);
        return 0;
    }
    srv_store_err(s, j, rc, what);
    return 0;
}

static void cmd_lookup(skv_server *s, srv_job *j)
{
    char prof[SEQKV_NAME_MAX + 1];
    int32_t *tok;
    size_t n, m = 0;
    if (srv_name_arg(j, 1, prof) ||
        tokens_then(j, 0, "KV.LOOKUP <profile> <tokens>|TOKENS \"<ids>\"", &tok, &n))
        return;
    int rc = seqkv_lookup(s->db, srv_tenant_name(s, j), prof, tok, n, &m);
    if (rc) {
        if (!miss_or_err(s, j, prof, rc, "KV.LOOKUP")) {
            skv_free(tok);
            return;
        }
        m = 0;
    }
    m = srv_remote_lookup(s, srv_tenant_name(s, j), prof, tok, n, m);
    skv_free(tok);
    pthread_mutex_lock(&s->smu);
    TS(s, j)->lookups++;
    if (m)
        TS(s, j)->lookup_hits++;
    else
        TS(s, j)->lookup_misses++;
    pthread_mutex_unlock(&s->smu);
    skv_rbuf_int(&j->reply, (long long)m);
}

static void get_counted(skv_server *s, srv_job *j, size_t got, size_t bytes)
{
    pthread_mutex_lock(&s->smu);
    TS(s, j)->gets++;
    if (got) {
        TS(s, j)->get_hits++;
        TS(s, j)->tokens_served += got;
        TS(s, j)->bytes_served += bytes;
    } else {
        TS(s, j)->get_misses++;
    }
    pthread_mutex_unlock(&s->smu);
}

/* A streamed KV.GET's layers, told to the loop as they decode; the last
 * (all of them, verified) comes with the job's completion */
typedef struct {
    skv_server *s;
    srv_job *j;
    size_t layers;
} get_stream;

static void layers_told(void *ctx, const seqkv_view *v, size_t ready)
{
    get_stream *g = ctx;
    if (ready < g->layers)
        srv_stream_told(g->s, g->j, v, ready);
}

/* KV.GET <profile> <tokens>|TOKENS "<ids>" [<n>] [LAYERS] [LOSSY] */
static void cmd_get(skv_server *s, srv_job *j)
{
    char prof[SEQKV_NAME_MAX + 1];
    int32_t *tok = NULL;
    size_t n, want = 0, next;
    int layers = 0;
    unsigned flags = 0;
    if (srv_name_arg(j, 1, prof) || tokens_at(j, 2, &tok, &n, &next))
        return;
    for (size_t i = next; i < j->cmd.argc; i++) {
        long long v;
        if (srv_arg_is(j, i, "LAYERS")) {
            layers = 1;
        } else if (srv_arg_is(j, i, "LOSSY")) { /* the lossy tier's reconstruction is accepted */
            flags |= SEQKV_GET_LOSSY;
        } else if (!want && srv_parse_ll(j->cmd.argv[i], j->cmd.argl[i], 1, SEQKV_MAX_TOKENS, &v) == 0) {
            want = (size_t)v;
        } else {
            skv_free(tok);
            srv_err_reply(j, "ERR", "KV.GET <profile> <tokens>|TOKENS \"<ids>\" [<n>] [LAYERS] [LOSSY]: n is "
                                "a token count in [1, %u]", SEQKV_MAX_TOKENS);
            return;
        }
    }
    if (want > n) {
        skv_free(tok);
        srv_err_reply(j, "ERR", "n (%zu) is more than the %zu tokens given", want, n);
        return;
    }
    seqkv_profile p = SEQKV_PROFILE_INIT;
    int rc = seqkv_profile_get(s->db, prof, &p);
    if (rc) {
        skv_free(tok);
        srv_store_err(s, j, rc, "KV.GET");
        return;
    }
    const char *tn = srv_tenant_name(s, j);
    srv_remote_fill(s, tn, prof, tok, n, want); /* what the shared tier adds, installed here */
    if (!want) {
        size_t m = 0;
        rc = seqkv_lookup(s->db, tn, prof, tok, n, &m);
        if (rc && rc != SKV_ERR_NOT_FOUND) {
            skv_free(tok);
            srv_store_err(s, j, rc, "KV.GET");
            return;
        }
        if (m == 0) {
            skv_free(tok);
            get_counted(s, j, 0, 0);
            srv_err_reply(j, "NOTFOUND", "KV.GET: no prefix of these tokens is cached");
            return;
        }
        want = m;
    }
    const size_t tb = seqkv_profile_token_bytes(&p);
    const size_t bytes = want * tb;
    /* (a config reload may change them: reload.c) */
    const uint64_t max_bulk = __atomic_load_n(&s->cfg.max_bulk, __ATOMIC_RELAXED),
                   max_out = __atomic_load_n(&s->cfg.max_output, __ATOMIC_RELAXED);
    if (bytes > max_bulk || bytes + 64 > max_out) {
        skv_free(tok);
        srv_err_reply(j, "TOOLARGE", "KV.GET: %zu tokens are %zu bytes, more than the server's reply "
                                 "limit (max-bulk %" PRIu64 ")", want, bytes, max_bulk);
        return;
    }
    /* a view of the store's memory (the hot tier's entries): the loop
     * sends its pieces as they are, the reply is never staged */
    size_t got = 0;
    seqkv_view *v = NULL;
    if (layers && !j->inline_) { /* the loop sends each layer as it decodes */
        j->stream_layers = p.layers;
        get_stream gs = {s, j, (size_t)p.layers};
        rc = seqkv_get_view(s->db, tn, prof, tok, n, &(seqkv_get_opts){.want = want, .flags = flags, .on_ready = layers_told, .ctx = &gs}, &v, &got);
    } else {
        rc = seqkv_get_view(s->db, tn, prof, tok, n, &(seqkv_get_opts){.want = want, .flags = flags}, &v, &got);
    }
    skv_free(tok);
    if (rc && v) { /* after layers went out: the loop cuts the reply (server.c stream_end) */
        j->view = v;
        j->stream_failed = 1;
        get_counted(s, j, 0, 0);
        srv_store_err(s, j, rc, "KV.GET");
        return;
    }
    if (rc || got != want) {
        seqkv_view_free(v);
        get_counted(s, j, 0, 0);
        if (rc == SKV_ERR_LOSSY) /* stored lossy: a miss for this request, and why */
            srv_err_reply(j, "NOTFOUND", "KV.GET: %s", seqkv_error_detail());
        else if (rc == 0 || rc == SKV_ERR_NOT_FOUND)
            srv_err_reply(j, "NOTFOUND", "KV.GET: fewer than %zu tokens of this prefix are cached",
                      want);
        else
            srv_store_err(s, j, rc, "KV.GET");
        return;
    }
    if (!layers) {
        skv_rbuf_fmt(&j->reply, "$%zu\r\n", bytes);
    } else if (j->stream_told) { /* (no lock: only this worker writes it) */
        j->view_layers = p.layers; /* the loop queued the header with the first layers */
    } else {
        /* layer l is one contiguous slab [k, v][token][kv_head][head_dim] */
        skv_rbuf_array(&j->reply, (size_t)p.layers);
        j->view_layers = p.layers;
    }
    j->view = v;
    get_counted(s, j, got, bytes);
}

static void cmd_del(skv_server *s, srv_job *j)
{
    char prof[SEQKV_NAME_MAX + 1];
    int32_t *tok;
    size_t n, removed = 0;
    if (srv_name_arg(j, 1, prof) ||
        tokens_then(j, 0, "KV.DEL <profile> <tokens>|TOKENS \"<ids>\"", &tok, &n))
        return;
    int rc = seqkv_del(s->db, srv_tenant_name(s, j), prof, tok, n, &removed);
    skv_free(tok);
    if (rc) {
        if (!miss_or_err(s, j, prof, rc, "KV.DEL"))
            return;
        removed = 0;
    }
    pthread_mutex_lock(&s->smu);
    TS(s, j)->dels++;
    TS(s, j)->tokens_deleted += removed;
    pthread_mutex_unlock(&s->smu);
    skv_rbuf_int(&j->reply, (long long)removed);
}

/* KV.CALIBRATE <profile> [<max_seq>]: admin only -- it learns from the
 * sequences of every tenant and changes the profile for all of them. */
static void cmd_calibrate(skv_server *s, srv_job *j)
{
    char prof[SEQKV_NAME_MAX + 1];
    long long max_seq = 0;
    if (srv_name_arg(j, 1, prof))
        return;
    if (j->cmd.argc == 3 && srv_parse_ll(j->cmd.argv[2], j->cmd.argl[2], 1, 1 << 20, &max_seq)) {
        srv_err_reply(j, "ERR", "KV.CALIBRATE <profile> [<max_seq>]: max_seq in [1, 1048576]");
        return;
    }
    int rc = seqkv_calibrate(s->db, prof, (size_t)max_seq);
    seqkv_profile p = SEQKV_PROFILE_INIT;
    if (!rc && !(rc = seqkv_profile_get(s->db, prof, &p)) && p.lossy && !p.has_lossy)
        rc = seqkv_lossy_calibrate(s->db, prof, (size_t)max_seq); /* and its lossy tier's */
    if (rc) {
        srv_store_err(s, j, rc, "KV.CALIBRATE");
        return;
    }
    skv_rbuf_simple(&j->reply, "OK");
}

/* KV.COMPACT [<profile>]: admin only -- a compaction now (seqkv_compact:
 * what the background thread does every compact-interval), a profile that
 * crossed its auto-calibrate threshold calibrating itself first; the
 * reply is what it did */
static void cmd_compact(skv_server *s, srv_job *j)
{
    char prof[SEQKV_NAME_MAX + 1];
    if (j->cmd.argc == 2 && srv_name_arg(j, 1, prof))
        return;
    const char *p = j->cmd.argc == 2 ? prof : NULL;
    int learned = 0;
    if (seqkv_auto_calibrate(s->db, p, &learned)) /* (compaction goes on without it) */
        srv_log(s, "KV.COMPACT: %s", seqkv_error_detail());
    seqkv_compact_stats st;
    int rc = seqkv_compact(s->db, p, NULL, NULL, &st);
    if (rc) {
        srv_store_err(s, j, rc, "KV.COMPACT");
        return;
    }
    skv_rbuf *r = &j->reply;
    skv_rbuf_map(r, j->proto, 8);
    const char *keys[] = {"self_calibrations", "records", "recoded", "merged", "bytes_before",
                          "bytes_after", "calibrations_deleted", "damaged"};
    const uint64_t vals[] = {(uint64_t)learned, st.records, st.recoded, st.merged,
                             st.bytes_before, st.bytes_after, st.calibrations_deleted, st.damaged};
    for (int i = 0; i < 8; i++) {
        skv_rbuf_bulk_str(r, keys[i]);
        skv_rbuf_int(r, (long long)vals[i]);
    }
}

static void cmd_stats(skv_server *s, srv_job *j)
{
    seqkv_stats st;
    memset(&st, 0, sizeof st);
    int rc = seqkv_stat(s->db, srv_tenant_name(s, j), &st);
    if (rc && rc != SKV_ERR_NOT_FOUND) {
        srv_store_err(s, j, rc, "KV.STATS");
        return;
    }
    if (rc)
        memset(&st, 0, sizeof st);
    seqkv_blob_stats bs;
    seqkv_blob_stat_all(s->db, srv_tenant_name(s, j), &bs);
    skv_rbuf *r = &j->reply;
    const struct {
        const char *key;
        uint64_t v;
        int ratio; /* v: raw bytes, v2: stored: their ratio as a double */
        uint64_t v2;
    } f[] = {
        {"tokens", st.tokens, 0, 0},
        {"chunks", st.chunks, 0, 0},
        {"raw_bytes", st.raw_bytes, 0, 0},
        {"stored_bytes", st.stored_bytes, 0, 0},
        {"ratio", st.raw_bytes, 1, st.stored_bytes},
        {"coded_tokens", st.coded_tokens, 0, 0},
        {"centroid_chunks", st.centroid_chunks, 0, 0},
        {"content_chunks", st.content_chunks, 0, 0},
        {"evictions", st.evictions, 0, 0},
        /* the opt-in lossy tier (not in the figures of the levels) */
        {"lossy_tokens", st.lossy_tokens, 0, 0},
        {"lossy_raw_bytes", st.lossy_raw, 0, 0},
        {"lossy_stored_bytes", st.lossy_stored, 0, 0},
        /* the blob namespace (Redis string commands) */
        {"blob_keys", bs.keys, 0, 0},
        {"blob_raw_bytes", bs.raw_bytes, 0, 0},
        {"blob_stored_bytes", bs.stored_bytes, 0, 0},
        {"blob_ratio", bs.raw_bytes, 1, bs.stored_bytes},
    };
    const size_t nf = sizeof f / sizeof f[0];
    skv_rbuf_map(r, j->proto, 1 + nf + SEQKV_LEVELS);
    skv_rbuf_bulk_str(r, "tenant");
    skv_rbuf_bulk_str(r, srv_tenant_name(s, j));
    for (size_t i = 0; i < nf; i++) {
        skv_rbuf_bulk_str(r, f[i].key);
        if (f[i].ratio)
            skv_rbuf_double(r, j->proto, srv_ratio(f[i].v, f[i].v2));
        else
            skv_rbuf_int(r, (long long)f[i].v);
    }
    for (int l = 0; l < SEQKV_LEVELS; l++) {
        char key[32];
        snprintf(key, sizeof key, "level.%s", seqkv_level_name((seqkv_level)l));
        skv_rbuf_bulk_str(r, key);
        skv_rbuf_array(r, 3);
        skv_rbuf_int(r, (long long)st.level_tokens[l]);
        skv_rbuf_int(r, (long long)st.level_raw[l]);
        skv_rbuf_int(r, (long long)st.level_stored[l]);
    }
}

static void cmd_info(skv_server *s, srv_job *j)
{
    char sec[32] = {0};
    const char *secp = NULL;
    if (j->cmd.argc == 2) {
        snprintf(sec, sizeof sec, "%.*s", (int)(j->cmd.argl[1] < 31 ? j->cmd.argl[1] : 31),
                 (const char *)j->cmd.argv[1]);
        secp = sec;
    }
    skv_rbuf b = {0};
    int rc = srv_info_report(s, j, secp, &b);
    if (rc) {
        skv_rbuf_free(&b);
        if (rc == SKV_ERR_NOMEM)
            srv_err_reply(j, "ERR", "out of memory");
        else
            srv_store_err(s, j, rc, "INFO");
        return;
    }
    skv_rbuf_bulk(&j->reply, b.p ? b.p : (const uint8_t *)"", b.len);
    skv_rbuf_free(&b);
}

/* ------------------------------------------------------------------------
 * The table
 * ---------------------------------------------------------------------- */
static const srv_cmd cmds[] = {
    {"PING", 1, 2, SRV_F_LOOP | SRV_F_NOAUTH, cmd_ping, 0},
    {"HELLO", 1, -1, SRV_F_LOOP | SRV_F_NOAUTH, cmd_hello, 0},
    {"AUTH", 2, 3, SRV_F_LOOP | SRV_F_NOAUTH, cmd_auth, 0},
    {"QUIT", 1, -1, SRV_F_LOOP | SRV_F_NOAUTH, cmd_quit, 0},
    {"COMMAND", 1, -1, SRV_F_LOOP | SRV_F_NOAUTH, cmd_command, 0},
    {"CLIENT", 2, -1, SRV_F_LOOP, cmd_client, 0},
    {"SELECT", 2, 2, SRV_F_LOOP, cmd_select, 0},
    {"SHUTDOWN", 1, 2, SRV_F_LOOP | SRV_F_ADMIN, cmd_shutdown, 0},
    {"INFO", 1, 2, 0, cmd_info, 0},
    {"KV.PROFILE", 2, -1, 0, srv_cmd_profile, 0},
    {"KV.PUT", 4, 5, SRV_F_BATCH, cmd_put, 0},
    {"KV.LOOKUP", 3, 4, 0, cmd_lookup, 0},
    {"KV.GET", 3, 6, 0, cmd_get, 0},
    {"KV.DEL", 3, 4, 0, cmd_del, 0},
    {"KV.CALIBRATE", 2, 3, SRV_F_ADMIN, cmd_calibrate, 0},
    {"KV.COMPACT", 1, 2, SRV_F_ADMIN, cmd_compact, 0},
    {"KV.STATS", 1, 1, 0, cmd_stats, 0},
    {"KV.TENANT", 3, 3, SRV_F_ADMIN, srv_cmd_tenant, 0},
    {"KV.CONFIG", 2, 2, SRV_F_LOOP | SRV_F_ADMIN, srv_cmd_config, 0},
    /* the blob namespace: Redis's string commands (cmd_blob.c) */
    {"GET", 2, 2, SRV_F_HOT, srv_cmd_bget, 0},
    {"MGET", 2, -1, SRV_F_HOT, srv_cmd_mget, 0},
    {"SET", 3, -1, SRV_F_BATCH, srv_cmd_set, 0},
    {"MSET", 3, -1, SRV_F_BATCH, srv_cmd_mset, 0},
    {"EXISTS", 2, -1, SRV_F_HOT, srv_cmd_exists, 0},
    {"DEL", 2, -1, 0, srv_cmd_bdel, 0},
    {"UNLINK", 2, -1, 0, srv_cmd_bdel, 0},
    {"STRLEN", 2, 2, SRV_F_HOT, srv_cmd_strlen, 0},
    {"TYPE", 2, 2, SRV_F_HOT, srv_cmd_type, 0},
    {"TTL", 2, 2, SRV_F_HOT, srv_cmd_ttl, 0},
    {"PTTL", 2, 2, SRV_F_HOT, srv_cmd_ttl, 0},
    {"EXPIRE", 3, 4, 0, srv_cmd_expire, 0},
    {"PEXPIRE", 3, 4, 0, srv_cmd_expire, 0},
    {"EXPIREAT", 3, 4, 0, srv_cmd_expire, 0},
    {"PEXPIREAT", 3, 4, 0, srv_cmd_expire, 0},
    {"PERSIST", 2, 2, 0, srv_cmd_expire, 0},
    {"SCAN", 2, -1, 0, srv_cmd_scan, 0},
    {"DBSIZE", 1, 1, 0, srv_cmd_dbsize, 0},
    {"FLUSHDB", 1, 2, SRV_F_ADMIN, srv_cmd_flushdb, 0},
};
#define NCMDS (sizeof cmds / sizeof cmds[0])
_Static_assert(NCMDS <= SRV_NCMD, "SRV_NCMD too small");

const srv_cmd *srv_cmd_find(const uint8_t *name, size_t len)
{
    for (size_t i = 0; i < NCMDS; i++)
        if (strlen(cmds[i].name) == len && strncasecmp((const char *)name, cmds[i].name, len) == 0)
            return &cmds[i];
    return NULL;
}

const srv_cmd *srv_cmd_at(int idx)
{
    return idx >= 0 && (size_t)idx < NCMDS ? &cmds[idx] : NULL;
}

void srv_stat_latency(skv_server *s, const srv_cmd *def, double seconds)
{
    uint64_t us = seconds > 0 ? (uint64_t)(seconds * 1e6) : 0;
    int b = 0;
    while (b < SRV_NBUCKETS - 1 && ((uint64_t)1 << b) <= us)
        b++;
    int i = (int)(def - cmds);
    pthread_mutex_lock(&s->smu);
    s->calls[i]++;
    s->usec[i] += us;
    s->hist[i][b]++;
    pthread_mutex_unlock(&s->smu);
}
