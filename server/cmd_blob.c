/* The plain Redis string commands over the tenant's blob namespace
 * (seqkv.h, the blob namespace): GET, SET, MGET, MSET, EXISTS, DEL, UNLINK, STRLEN,
 * EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT, TTL, PTTL, PERSIST, TYPE, SCAN,
 * DBSIZE and FLUSHDB, with Redis's arguments, reply types and error
 * words, so that a Redis client (redis-py, hiredis, LMCache's remote
 * backend) works unchanged. Each runs on a worker for the client's
 * tenant; server/README.md documents them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "seqkv.h"
#include "server_int.h"

static void syntax(srv_job *j)
{
    skv_rbuf_error(&j->reply, "ERR", "syntax error");
}

/* A signed decimal as Redis reads integers; -1 when it is not one */
static int parse_i64(const uint8_t *a, size_t len, int64_t *out)
{
    size_t i = 0;
    int neg = 0;
    if (len && (a[0] == '-' || a[0] == '+')) {
        neg = a[0] == '-';
        i = 1;
    }
    if (i == len || len - i > 18)
        return -1;
    int64_t v = 0;
    for (; i < len; i++) {
        if (a[i] < '0' || a[i] > '9')
            return -1;
        v = v * 10 + (a[i] - '0');
    }
    *out = neg ? -v : v;
    return 0;
}

static int int_arg(srv_job *j, size_t i, int64_t *out)
{
    if (parse_i64(j->cmd.argv[i], j->cmd.argl[i], out)) {
        skv_rbuf_error(&j->reply, "ERR", "value is not an integer or out of range");
        return -1;
    }
    return 0;
}

static void counted(skv_server *s, srv_job *j, uint64_t gets, uint64_t hits, uint64_t sets,
                    uint64_t in, uint64_t out)
{
    pthread_mutex_lock(&s->smu);
    srv_tstats *t = &s->ts[j->tenant];
    t->blob_gets += gets;
    t->blob_hits += hits;
    t->blob_sets += sets;
    t->blob_bytes_in += in;
    t->blob_bytes_out += out;
    pthread_mutex_unlock(&s->smu);
}

/* ---- GET, MGET ---------------------------------------------------------- */

typedef struct {
    srv_job *j;
    int array;  /* MGET: nil misses as null bulks in an array */
    uint64_t hits, bytes;
} get_ctx;

static void *get_one(void *vc, size_t i, int found, size_t len)
{
    (void)i;
    get_ctx *c = vc;
    skv_rbuf *r = &c->j->reply;
    if (!found) {
        skv_rbuf_null(r, c->j->proto);
        return NULL;
    }
    if (c->j->on_loop && c->bytes + len > SRV_LOOP_BYTES) {
        c->j->declined = 1; /* too large for the loop thread: a worker's */
        return NULL;
    }
    uint8_t head[SKV_RESP_HEAD_MAX];
    const size_t hl = skv_resp_head(head, '$', 0, len);
    uint8_t *p = skv_rbuf_reserve(r, hl + len + 2);
    if (!p)
        return NULL;
    memcpy(p, head, hl);
    p[hl + len] = '\r';
    p[hl + len + 1] = '\n';
    c->hits++;
    c->bytes += len;
    return p + hl;
}

static void do_get(skv_server *s, srv_job *j, size_t first, size_t n, int array)
{
    get_ctx c = {j, array, 0, 0};
    if (array)
        skv_rbuf_array(&j->reply, n);
    const size_t mark = j->reply.len;
    int rc = seqkv_blob_get(s->db, srv_tenant_name(s, j), n, (const uint8_t *const *)j->cmd.argv + first,
                            j->cmd.argl + first, get_one, &c);
    if (j->declined) {
        seqkv_error_clear();
        return;
    }
    if (rc) {
        j->reply.len = array ? 0 : mark; /* the error replaces what was written */
        srv_store_err(s, j, rc, array ? "MGET" : "GET");
        return;
    }
    counted(s, j, n, c.hits, 0, 0, c.bytes);
}

/* GET: a value the hot tier holds is sent straight from it (a view: no
 * copy, on the loop thread whatever its size); one it does not is decoded
 * into a view of its own, on the loop when it has at most SRV_LOOP_BYTES,
 * else by a worker (the loop declines it) */
void srv_cmd_bget(skv_server *s, srv_job *j)
{
    seqkv_view *v = NULL;
    int found = 0;
    int rc = seqkv_blob_get_view(s->db, srv_tenant_name(s, j), j->cmd.argv[1], j->cmd.argl[1],
                                 j->on_loop ? SRV_LOOP_BYTES : SIZE_MAX, &v, &found);
    if (rc) {
        srv_store_err(s, j, rc, "GET");
        return;
    }
    if (v) {
        uint8_t head[SKV_RESP_HEAD_MAX];
        const size_t len = seqkv_view_bytes(v);
        skv_rbuf_raw(&j->reply, head, skv_resp_head(head, '$', 0, len));
        j->view = v;
        j->view_layers = 0;
        counted(s, j, 1, 1, 0, 0, len);
    } else if (!found) {
        skv_rbuf_null(&j->reply, j->proto);
        counted(s, j, 1, 0, 0, 0, 0);
    } else if (j->on_loop) {
        j->declined = 1; /* cold and large (or empty): a worker's */
    } else {
        skv_rbuf_bulk(&j->reply, "", 0); /* (empty: the one value with no view) */
        counted(s, j, 1, 1, 0, 0, 0);
    }
}

void srv_cmd_mget(skv_server *s, srv_job *j)
{
    do_get(s, j, 1, j->cmd.argc - 1, 1);
}

/* ---- SET, MSET ---------------------------------------------------------- */

/* SET key value [NX | XX] [GET] [EX s | PX ms | EXAT s | PXAT ms | KEEPTTL]:
 * its flags and expiry; -1 when it replied with an error */
static int set_parse(srv_job *j, unsigned *flags, int64_t *at)
{
    int has_time = 0;
    *flags = 0;
    *at = 0;
    for (size_t i = 3; i < j->cmd.argc; i++) {
        const int more = i + 1 < j->cmd.argc;
        if (srv_arg_is(j, i, "NX") && !(*flags & SEQKV_BLOB_XX)) {
            *flags |= SEQKV_BLOB_NX;
        } else if (srv_arg_is(j, i, "XX") && !(*flags & SEQKV_BLOB_NX)) {
            *flags |= SEQKV_BLOB_XX;
        } else if (srv_arg_is(j, i, "KEEPTTL") && !has_time) {
            *flags |= SEQKV_BLOB_KEEPTTL;
            has_time = 1;
        } else if (srv_arg_is(j, i, "GET")) {
            skv_rbuf_error(&j->reply, "ERR", "SET ... GET is not supported by seqkv");
            return -1;
        } else if (more && !has_time &&
                   (srv_arg_is(j, i, "EX") || srv_arg_is(j, i, "PX") || srv_arg_is(j, i, "EXAT") ||
                    srv_arg_is(j, i, "PXAT"))) {
            int64_t v;
            if (int_arg(j, i + 1, &v))
                return -1;
            const int ms = srv_arg_is(j, i, "PX") || srv_arg_is(j, i, "PXAT");
            const int abs = srv_arg_is(j, i, "EXAT") || srv_arg_is(j, i, "PXAT");
            if (v <= 0 || v > (int64_t)1 << 46) {
                skv_rbuf_error(&j->reply, "ERR", "invalid expire time in 'set' command");
                return -1;
            }
            *at = (ms ? v : v * 1000) + (abs ? 0 : skv_now_ms());
            has_time = 1;
            i++;
        } else {
            syntax(j);
            return -1;
        }
    }
    return 0;
}

/* SET and MSET are group-committed (SRV_F_BATCH): a worker queues them
 * and the committer writes the queued ones with one seqkv_blob_set_batch,
 * one durable LMDB commit (server.c put_submit) */
void srv_cmd_set(skv_server *s, srv_job *j)
{
    srv_blob_batch(s, &j, 1);
}

void srv_cmd_mset(skv_server *s, srv_job *j)
{
    srv_blob_batch(s, &j, 1);
}

void srv_blob_batch(skv_server *s, srv_job **jobs, size_t n)
{
    seqkv_blob_set_req *q = calloc(n, sizeof *q);
    srv_job **ok = calloc(n, sizeof *ok);
    seqkv_blob_item **items = calloc(n, sizeof *items);
    if (!q || !ok || !items) {
        for (size_t i = 0; i < n; i++)
            skv_rbuf_error(&jobs[i]->reply, "ERR", "out of memory");
        free(q);
        free(ok);
        free(items);
        return;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        srv_job *j = jobs[i];
        const int mset = srv_arg_is(j, 0, "MSET");
        unsigned flags = 0;
        int64_t at = 0;
        if (mset && (j->cmd.argc - 1) % 2) {
            skv_rbuf_error(&j->reply, "ERR", "wrong number of arguments for 'mset' command");
            continue;
        }
        if (!mset && set_parse(j, &flags, &at))
            continue;
        const size_t k = mset ? (j->cmd.argc - 1) / 2 : 1;
        /* the items, then their layouts (LMCache's pairs: lmcache.c; the
         * config's kv-layout lines: kv_layout.c) */
        if (!(items[m] = malloc(k * (sizeof **items + sizeof(seqkv_blob_layout))))) {
            skv_rbuf_error(&j->reply, "ERR", "out of memory");
            continue;
        }
        for (size_t x = 0; x < k; x++)
            items[m][x] = (seqkv_blob_item){j->cmd.argv[1 + 2 * x], j->cmd.argl[1 + 2 * x],
                                            j->cmd.argv[2 + 2 * x], j->cmd.argl[2 + 2 * x], NULL, 0};
        srv_lmcache_layouts(s, srv_tenant_name(s, j), items[m], k,
                            (seqkv_blob_layout *)(items[m] + k));
        srv_kv_layouts(s, items[m], k, (seqkv_blob_layout *)(items[m] + k));
        q[m] = (seqkv_blob_set_req){.tenant = srv_tenant_name(s, j), .items = items[m], .n = k,
                                    .flags = flags, .expire_at = at};
        ok[m++] = j;
    }
    int rc = m ? seqkv_blob_set_batch(s->db, q, m) : SKV_OK;
    for (size_t i = 0; i < m; i++) {
        srv_job *j = ok[i];
        const int mset = srv_arg_is(j, 0, "MSET");
        if (rc || q[i].rc) {
            const int code = rc ? rc : q[i].rc;
            if (!rc)
                skv_error(code, "%s", q[i].detail); /* the request's own words */
            srv_store_err(s, j, code, mset ? "MSET" : "SET");
        } else {
            uint64_t bytes = 0;
            for (size_t x = 0; x < q[i].n; x++)
                bytes += q[i].items[x].val_len;
            counted(s, j, 0, 0, q[i].written ? q[i].n : 0, q[i].written ? bytes : 0, 0);
            if (q[i].written)
                srv_lmcache_relayout(s, q[i].tenant, q[i].items, q[i].n);
            if (q[i].written || mset)
                skv_rbuf_simple(&j->reply, "OK");
            else
                skv_rbuf_null(&j->reply, j->proto);
        }
        free(items[i]);
    }
    free(q);
    free(ok);
    free(items);
}

/* ---- EXISTS, DEL, STRLEN, TYPE ---------------------------------------------- */

void srv_cmd_exists(skv_server *s, srv_job *j)
{
    size_t count = 0;
    int rc = seqkv_blob_exists(s->db, srv_tenant_name(s, j), j->cmd.argc - 1,
                               (const uint8_t *const *)j->cmd.argv + 1, j->cmd.argl + 1, &count);
    if (rc) {
        srv_store_err(s, j, rc, "EXISTS");
        return;
    }
    skv_rbuf_int(&j->reply, (long long)count);
}

/* DEL and UNLINK (the same here: a delete is one small transaction) */
void srv_cmd_bdel(skv_server *s, srv_job *j)
{
    size_t n = 0;
    int rc = seqkv_blob_del(s->db, srv_tenant_name(s, j), j->cmd.argc - 1,
                            (const uint8_t *const *)j->cmd.argv + 1, j->cmd.argl + 1, &n);
    if (rc) {
        srv_store_err(s, j, rc, "DEL");
        return;
    }
    skv_rbuf_int(&j->reply, (long long)n);
}

static int stat_key(skv_server *s, srv_job *j, seqkv_blob_info *in)
{
    int rc = seqkv_blob_stat(s->db, srv_tenant_name(s, j), j->cmd.argv[1], j->cmd.argl[1], in);
    if (rc)
        srv_store_err(s, j, rc, (const char *)j->cmd.argv[0]);
    return rc;
}

void srv_cmd_strlen(skv_server *s, srv_job *j)
{
    seqkv_blob_info in;
    if (!stat_key(s, j, &in))
        skv_rbuf_int(&j->reply, in.found ? (long long)in.len : 0);
}

void srv_cmd_type(skv_server *s, srv_job *j)
{
    seqkv_blob_info in;
    if (!stat_key(s, j, &in))
        skv_rbuf_simple(&j->reply, in.found ? "string" : "none");
}

/* ---- expiry --------------------------------------------------------------- */

/* TTL and PTTL: -2 absent, -1 no expiry, else the time left */
void srv_cmd_ttl(skv_server *s, srv_job *j)
{
    seqkv_blob_info in;
    if (stat_key(s, j, &in))
        return;
    const int ms = srv_arg_is(j, 0, "PTTL");
    if (!in.found || !in.expire_at) {
        skv_rbuf_int(&j->reply, in.found ? -1 : -2);
        return;
    }
    int64_t left = in.expire_at - skv_now_ms();
    if (left < 0)
        left = 0;
    skv_rbuf_int(&j->reply, (long long)(ms ? left : (left + 500) / 1000));
}

/* EXPIRE key s, PEXPIRE key ms, EXPIREAT key t, PEXPIREAT key t_ms
 * [NX | XX | GT | LT]; PERSIST key */
void srv_cmd_expire(skv_server *s, srv_job *j)
{
    const int persist = srv_arg_is(j, 0, "PERSIST");
    int64_t at = -1;
    unsigned cond = 0;
    if (!persist) {
        int64_t v;
        if (j->cmd.argc < 3) {
            skv_rbuf_error(&j->reply, "ERR", "wrong number of arguments for '%s' command",
                           (const char *)j->cmd.argv[0]);
            return;
        }
        if (int_arg(j, 2, &v))
            return;
        const int ms = srv_arg_is(j, 0, "PEXPIRE") || srv_arg_is(j, 0, "PEXPIREAT");
        const int abs = srv_arg_is(j, 0, "EXPIREAT") || srv_arg_is(j, 0, "PEXPIREAT");
        if (v > (int64_t)1 << 46 || v < -((int64_t)1 << 46)) {
            skv_rbuf_error(&j->reply, "ERR", "invalid expire time in '%s' command",
                           (const char *)j->cmd.argv[0]);
            return;
        }
        at = (ms ? v : v * 1000) + (abs ? 0 : skv_now_ms());
        if (at < 1)
            at = 1; /* at or before now: the key goes */
        for (size_t i = 3; i < j->cmd.argc; i++) {
            if (srv_arg_is(j, i, "NX"))
                cond |= SEQKV_EXPIRE_NX;
            else if (srv_arg_is(j, i, "XX"))
                cond |= SEQKV_EXPIRE_XX;
            else if (srv_arg_is(j, i, "GT"))
                cond |= SEQKV_EXPIRE_GT;
            else if (srv_arg_is(j, i, "LT"))
                cond |= SEQKV_EXPIRE_LT;
            else {
                skv_rbuf_error(&j->reply, "ERR", "Unsupported option %.*s",
                               (int)(j->cmd.argl[i] < 32 ? j->cmd.argl[i] : 32),
                               (const char *)j->cmd.argv[i]);
                return;
            }
        }
        if ((cond & SEQKV_EXPIRE_NX) && (cond & ~SEQKV_EXPIRE_NX)) {
            skv_rbuf_error(&j->reply, "ERR",
                           "NX and XX, GT or LT options at the same time are not compatible");
            return;
        }
        if ((cond & SEQKV_EXPIRE_GT) && (cond & SEQKV_EXPIRE_LT)) {
            skv_rbuf_error(&j->reply, "ERR", "GT and LT options at the same time are not compatible");
            return;
        }
    }
    int changed = 0;
    int rc = seqkv_blob_expire(s->db, srv_tenant_name(s, j), j->cmd.argv[1], j->cmd.argl[1], at, cond,
                               &changed);
    if (rc) {
        srv_store_err(s, j, rc, (const char *)j->cmd.argv[0]);
        return;
    }
    skv_rbuf_int(&j->reply, changed);
}

/* ---- SCAN, DBSIZE, FLUSHDB -------------------------------------------------- */

typedef struct {
    skv_rbuf keys;
    size_t n;
    const uint8_t *pat;
    size_t pl;
} scan_ctx;

static int scan_one(void *vc, const uint8_t *key, size_t len)
{
    scan_ctx *c = vc;
    if (c->pat && !srv_glob(c->pat, c->pl, key, len))
        return 0;
    skv_rbuf_bulk(&c->keys, key, len);
    c->n++;
    return c->keys.oom ? SKV_ERR_NOMEM : 0;
}

/* SCAN cursor [MATCH pattern] [COUNT count] [TYPE type] */
void srv_cmd_scan(skv_server *s, srv_job *j)
{
    uint64_t cur = 0;
    const uint8_t *a = j->cmd.argv[1];
    size_t al = j->cmd.argl[1];
    if (al == 0 || al > 20) {
        skv_rbuf_error(&j->reply, "ERR", "invalid cursor");
        return;
    }
    for (size_t i = 0; i < al; i++) {
        if (a[i] < '0' || a[i] > '9' || cur > (UINT64_MAX - (a[i] - '0')) / 10) {
            skv_rbuf_error(&j->reply, "ERR", "invalid cursor");
            return;
        }
        cur = cur * 10 + (uint64_t)(a[i] - '0');
    }
    scan_ctx c = {{0}, 0, NULL, 0};
    int64_t count = 10, only_strings = 1;
    for (size_t i = 2; i < j->cmd.argc; i += 2) {
        if (i + 1 >= j->cmd.argc) {
            syntax(j);
            return;
        }
        if (srv_arg_is(j, i, "MATCH")) {
            c.pat = j->cmd.argv[i + 1];
            c.pl = j->cmd.argl[i + 1];
        } else if (srv_arg_is(j, i, "COUNT")) {
            if (int_arg(j, i + 1, &count))
                return;
            if (count < 1) {
                syntax(j);
                return;
            }
        } else if (srv_arg_is(j, i, "TYPE")) {
            only_strings = srv_arg_is(j, i + 1, "string");
        } else {
            syntax(j);
            return;
        }
    }
    uint64_t next = 0;
    int rc = only_strings ? seqkv_blob_scan(s->db, srv_tenant_name(s, j), cur,
                                            (size_t)(count > 1 << 20 ? 1 << 20 : count), scan_one,
                                            &c, &next)
                          : SKV_OK;
    if (rc) {
        skv_rbuf_free(&c.keys);
        srv_store_err(s, j, rc, "SCAN");
        return;
    }
    char nb[24];
    snprintf(nb, sizeof nb, "%llu", (unsigned long long)next);
    skv_rbuf_array(&j->reply, 2);
    skv_rbuf_bulk_str(&j->reply, nb);
    skv_rbuf_array(&j->reply, c.n);
    skv_rbuf_raw(&j->reply, c.keys.p, c.keys.len);
    skv_rbuf_free(&c.keys);
}

void srv_cmd_dbsize(skv_server *s, srv_job *j)
{
    seqkv_blob_stats st;
    seqkv_blob_stat_all(s->db, srv_tenant_name(s, j), &st);
    skv_rbuf_int(&j->reply, (long long)st.keys);
}

/* FLUSHDB [ASYNC | SYNC]: admin only, the caller's own tenant only */
void srv_cmd_flushdb(skv_server *s, srv_job *j)
{
    if (j->cmd.argc == 2 && !srv_arg_is(j, 1, "ASYNC") && !srv_arg_is(j, 1, "SYNC")) {
        syntax(j);
        return;
    }
    uint64_t n = 0;
    int rc = seqkv_blob_flush(s->db, srv_tenant_name(s, j), &n);
    if (rc) {
        srv_store_err(s, j, rc, "FLUSHDB");
        return;
    }
    srv_log(s, "FLUSHDB: tenant %s: %llu keys deleted", srv_tenant_name(s, j), (unsigned long long)n);
    skv_rbuf_simple(&j->reply, "OK");
}
