/* The shared remote tier on a Redis Cluster (remote.h). One writer thread
 * drains a bounded queue of committed records into the cluster, so the
 * event loop and the committer never wait on the network (with
 * `remote-durability replica` the committing worker waits for its own
 * records' WAIT, the loop still does not). Reads run on the workers.
 *
 * Cluster keys (FORMAT.md "Remote tier"); T is the chain's tag -- the key
 * of the first full chunk on the record's path, or the root for a partial
 * chunk 0 -- as 16 hex digits, so a prompt's chain is one shard's:
 *   skv:r:{T}:<record key>   a record as stored here, after a 40-byte head
 *   skv:c:{T}:<node>         HASH: record key (32 bytes) -> u32 LE tokens, the records below node
 *   skv:cal:<id>             a calibration, sealed under the fleet key
 *   skv:t:<name hash>        a tenant's fleet entry; skv:next_tenant its ids */
#include <hiredis/hiredis.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "remote.h"
#include "seqkv_tier.h"
#include "server_int.h"
#include "skv_rcluster.h"

#define RHEAD 40              /* "SKVW", version, 3 zero, the centroid chain's tag */
#define RMAGIC "SKVW"
#define RQ_BATCH 128          /* records a cluster round trip carries */
#define RQ_BATCH_BYTES (64u << 20)
#define RQ_FAILS 256          /* failed seq ranges remembered for waiters */
#define FETCH_MAX 4096        /* records one GET may fetch */
#define WRITE_TRIES 3         /* (durability local) rounds before a batch is given up */
#define READ_DEADLINE_MS 1000 /* a LOOKUP's or GET's cluster calls: past it, a miss */
#define UNCONF_MAX (1u << 20) /* unconfirmed records remembered */

typedef struct rq_item {
    struct rq_item *next;
    uint64_t seq;
    uint8_t tag[32];
    uint8_t key[32], parent[32], calib[16];
    uint32_t n;
    uint8_t *val;
    size_t len;
} rq_item;

struct srv_remote {
    skv_server *s;
    skv_rc *rc;
    uint8_t *fkey; /* the fleet key (sodium_malloc'd) */
    int replica, timeout_ms;
    uint64_t backlog_max;
    pthread_t thr;
    int started, stop;
    pthread_mutex_t mu;
    pthread_cond_t cv, dcv;
    rq_item *head, *tail;
    uint64_t next_seq;
    uint64_t fly_a, fly_b; /* the batch being written: seqs [fly_a, fly_b) */
    uint64_t fail_a[RQ_FAILS], fail_b[RQ_FAILS];
    size_t nfail;
    uint8_t (*cals)[16]; /* calibrations the cluster has */
    size_t ncals, cals_cap;
    /* records whose write failed or was dropped: a later put that reuses
     * one writes it again with its own (open addressing, zero = empty) */
    uint8_t (*unconf)[32];
    size_t nunconf, unconf_cap;
    char shared[SKV_SERVER_MAX_TENANTS][SEQKV_NAME_MAX + 1];
    size_t nshared;
    srv_remote_stats st;
};

static void hexs(const uint8_t *b, size_t n, char *out)
{
    static const char d[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = d[b[i] >> 4];
        out[2 * i + 1] = d[b[i] & 15];
    }
    out[2 * n] = 0;
}

static void rkey(const uint8_t tag[32], const uint8_t key[32], char out[96])
{
    char t[17], k[65];
    hexs(tag, 8, t);
    hexs(key, 32, k);
    snprintf(out, 96, "skv:r:{%s}:%s", t, k);
}

static void ckey(const uint8_t tag[32], const uint8_t node[32], char out[96])
{
    char t[17], k[65];
    hexs(tag, 8, t);
    hexs(node, 32, k);
    snprintf(out, 96, "skv:c:{%s}:%s", t, k);
}

static void calkey(const uint8_t id[16], char out[48])
{
    char h[33];
    hexs(id, 16, h);
    snprintf(out, 48, "skv:cal:%s", h);
}

/* One command at a time (tenants, calibrations, an index): its reply or
 * NULL after deadline_ms */
static redisReply *exec1(srv_remote *r, int argc, const char **argv, const size_t *len,
                         int deadline_ms)
{
    skv_rc_cmd c = {argc, argv, len, 1};
    redisReply *rep = NULL;
    skv_rc_exec(r->rc, &c, 1, &rep, 0, deadline_ms);
    return rep;
}

static int is_shared(srv_remote *r, const char *tenant)
{
    for (size_t i = 0; i < r->nshared; i++)
        if (strcmp(r->shared[i], tenant) == 0)
            return 1;
    return 0;
}

/* ---- tenants ---------------------------------------------------------------- */

/* A tenant new here: the fleet's entry taken, or one made with an id from
 * the fleet's counter (above every id of this store) */
static int tenant_new(srv_remote *r, const char *name, const char *k, uint8_t mine[SEQKV_TIER_TENANT_BYTES])
{
    seqkv *db = r->s->db;
    const char *get[2] = {"GET", k};
    redisReply *g = exec1(r, 2, get, NULL, r->timeout_ms);
    if (!g)
        return skv_error(SKV_ERR_IO, "remote: cluster unreachable (%s)", skv_error_detail());
    if (g->type == REDIS_REPLY_STRING && g->len == SEQKV_TIER_TENANT_BYTES) {
        memcpy(mine, g->str, SEQKV_TIER_TENANT_BYTES);
        freeReplyObject(g);
        return seqkv_tier_tenant_import(db, name, r->fkey, mine);
    }
    freeReplyObject(g);
    const uint64_t want = seqkv_tier_next_tenant(db);
    const char *incr[2] = {"INCR", "skv:next_tenant"};
    redisReply *x = exec1(r, 2, incr, NULL, r->timeout_ms);
    long long id = x && x->type == REDIS_REPLY_INTEGER ? x->integer : -1;
    if (x)
        freeReplyObject(x);
    if (id > 0 && (uint64_t)id < want) { /* past every id of this store */
        char by[24];
        snprintf(by, sizeof by, "%llu", (unsigned long long)(want - (uint64_t)id));
        const char *ib[3] = {"INCRBY", "skv:next_tenant", by};
        x = exec1(r, 3, ib, NULL, r->timeout_ms);
        id = x && x->type == REDIS_REPLY_INTEGER ? x->integer : -1;
        if (x)
            freeReplyObject(x);
    }
    if (id <= 0)
        return skv_error(SKV_ERR_IO, "remote: no tenant id from the cluster");
    return seqkv_tier_tenant_create(db, name, (uint64_t)id, r->fkey, mine);
}

/* Tenant name joins the fleet: 1 when its records are shared, 0 when it
 * stays local (logged), or an error when the cluster cannot be reached */
static int tenant_join(srv_remote *r, const char *name)
{
    uint8_t nh[16], mine[SEQKV_TIER_TENANT_BYTES];
    char hx[33], k[48];
    seqkv_tier_tenant_name(r->fkey, name, nh);
    hexs(nh, 16, hx);
    snprintf(k, sizeof k, "skv:t:%s", hx);
    int rc = seqkv_tier_tenant_export(r->s->db, name, r->fkey, mine);
    if (rc == SKV_ERR_NOT_FOUND)
        rc = tenant_new(r, name, k, mine);
    if (rc == SKV_ERR_IO)
        return rc;
    if (!rc) {
        const char *set[4] = {"SET", k, (const char *)mine, "NX"};
        const size_t len[4] = {3, strlen(k), sizeof mine, 2};
        redisReply *x = exec1(r, 4, set, len, r->timeout_ms);
        const int won = x && x->type == REDIS_REPLY_STATUS;
        const int lost = x && x->type == REDIS_REPLY_NIL;
        if (x)
            freeReplyObject(x);
        if (!won && !lost)
            return skv_error(SKV_ERR_IO, "remote: cluster unreachable (%s)", skv_error_detail());
        if (lost) { /* the fleet has it: the same keys, or this one stays local */
            const char *get[2] = {"GET", k};
            redisReply *g = exec1(r, 2, get, NULL, r->timeout_ms);
            rc = g && g->type == REDIS_REPLY_STRING && g->len == SEQKV_TIER_TENANT_BYTES
                     ? seqkv_tier_tenant_import(r->s->db, name, r->fkey, (const uint8_t *)g->str)
                     : skv_error(SKV_ERR_CORRUPT, "remote: tenant entry of another shape");
            if (g)
                freeReplyObject(g);
        }
    }
    if (rc) {
        srv_log(r->s, "remote: tenant '%s' stays local: %s", name, skv_error_detail());
        r->st.tenants_local++;
        return 0;
    }
    memcpy(r->shared[r->nshared++], name, SEQKV_NAME_MAX + 1);
    r->st.tenants_shared++;
    return 1;
}

/* ---- writing ------------------------------------------------------------------ */

static void fail_range(srv_remote *r, uint64_t a, uint64_t b)
{
    r->fail_a[r->nfail % RQ_FAILS] = a;
    r->fail_b[r->nfail % RQ_FAILS] = b;
    r->nfail++;
}

/* ---- unconfirmed records (under mu) ---- */
static size_t uc_slot(const srv_remote *r, const uint8_t key[32])
{
    size_t i = (size_t)skv_load64_le(key) & (r->unconf_cap - 1);
    while (memcmp(r->unconf[i], (const uint8_t[32]){0}, 32) != 0 && memcmp(r->unconf[i], key, 32) != 0)
        i = (i + 1) & (r->unconf_cap - 1);
    return i;
}

static void uc_add(srv_remote *r, const uint8_t key[32])
{
    if (r->nunconf * 2 >= r->unconf_cap) {
        const size_t oc = r->unconf_cap, nc = oc ? 2 * oc : 1024;
        if (nc > 2 * (size_t)UNCONF_MAX)
            return; /* (then a reused record is not written again: a miss elsewhere) */
        uint8_t(*old)[32] = r->unconf, (*nu)[32] = skv_calloc(nc, 32);
        if (!nu)
            return;
        r->unconf = nu;
        r->unconf_cap = nc;
        r->nunconf = 0;
        for (size_t i = 0; i < oc; i++)
            if (memcmp(old[i], (const uint8_t[32]){0}, 32) != 0) {
                memcpy(r->unconf[uc_slot(r, old[i])], old[i], 32);
                r->nunconf++;
            }
        skv_free(old);
    }
    const size_t i = uc_slot(r, key);
    if (memcmp(r->unconf[i], key, 32) != 0) {
        memcpy(r->unconf[i], key, 32);
        r->nunconf++;
    }
}

/* Take key out of the set: 1 when it was there */
static int uc_take(srv_remote *r, const uint8_t key[32])
{
    if (!r->unconf_cap)
        return 0;
    size_t i = uc_slot(r, key);
    if (memcmp(r->unconf[i], key, 32) != 0)
        return 0;
    /* backward-shift deletion keeps every probe chain whole */
    memset(r->unconf[i], 0, 32);
    r->nunconf--;
    for (size_t j = (i + 1) & (r->unconf_cap - 1);
         memcmp(r->unconf[j], (const uint8_t[32]){0}, 32) != 0; j = (j + 1) & (r->unconf_cap - 1)) {
        uint8_t k[32];
        memcpy(k, r->unconf[j], 32);
        memset(r->unconf[j], 0, 32);
        memcpy(r->unconf[uc_slot(r, k)], k, 32);
    }
    return 1;
}

static int enqueue(srv_remote *r, const seqkv_tier_rec *x);

/* A record of this store the cluster may lack, written again (its tag
 * given; the rest from its stored bytes) */
static void requeue(srv_remote *r, const uint8_t key[32], const uint8_t tag[32], const char *tenant)
{
    uint8_t *b;
    size_t len;
    seqkv_tier_rec x;
    if (seqkv_tier_read(r->s->db, key, &b, &len))
        return;
    if (!seqkv_tier_peek(b, len, &x)) {
        x.tenant = tenant;
        memcpy(x.key, key, 32);
        memcpy(x.tag, tag, 32);
        x.bytes = b;
        x.len = len;
        x.has_centroid = 0; /* (its centroid chain's tag is not known here: a miss for it) */
        enqueue(r, &x);
    }
    skv_free(b);
}

/* the store's commit hook: each record copied into the queue (or, past
 * the backlog's bound, counted as dropped and failed for its waiter) */
static int enqueue(srv_remote *r, const seqkv_tier_rec *x)
{
    rq_item *it = skv_calloc(1, sizeof *it);
    uint8_t *val = it ? skv_malloc(RHEAD + x->len) : NULL;
    pthread_mutex_lock(&r->mu);
    const uint64_t seq = r->next_seq++;
    if (!val || r->st.backlog_bytes + x->len > r->backlog_max) {
        fail_range(r, seq, seq + 1);
        uc_add(r, x->key);
        r->st.dropped++;
        pthread_cond_broadcast(&r->dcv);
        pthread_mutex_unlock(&r->mu);
        skv_free(val);
        skv_free(it);
        return -1;
    }
    memcpy(val, RMAGIC, 4);
    val[4] = 1;
    memset(val + 5, 0, 3);
    memcpy(val + 8, x->has_centroid ? x->cent_tag : (const uint8_t[32]){0}, 32);
    memcpy(val + RHEAD, x->bytes, x->len);
    it->seq = seq;
    memcpy(it->tag, x->tag, 32);
    memcpy(it->key, x->key, 32);
    memcpy(it->parent, x->parent, 32);
    memcpy(it->calib, x->calib, 16);
    it->n = x->n;
    it->val = val;
    it->len = RHEAD + x->len;
    if (r->tail)
        r->tail->next = it;
    else
        r->head = it;
    r->tail = it;
    r->st.queued++;
    r->st.queued_bytes += it->len;
    r->st.backlog++;
    r->st.backlog_bytes += it->len;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return 0;
}

/* Whether key was unconfirmed (and is now taken out, to be written again) */
static int unconfirmed(srv_remote *r, const uint8_t key[32])
{
    pthread_mutex_lock(&r->mu);
    const int was = uc_take(r, key);
    pthread_mutex_unlock(&r->mu);
    return was;
}

/* the store's commit hook: the new records queued; the records the puts
 * reused (and the new ones' bases) written again when an earlier write of
 * theirs failed, so that an acknowledged put's whole prefix is in the
 * cluster */
static void on_commit(void *ctx, const seqkv_tier_rec *recs, size_t n)
{
    srv_remote *r = ctx;
    for (size_t i = 0; i < n; i++) {
        const seqkv_tier_rec *x = &recs[i];
        if (!is_shared(r, x->tenant))
            continue;
        if (!x->bytes) { /* a reused record */
            if (unconfirmed(r, x->key))
                requeue(r, x->key, x->tag, x->tenant);
            continue;
        }
        if (x->has_base && unconfirmed(r, x->base))
            requeue(r, x->base, x->tag, x->tenant);
        enqueue(r, x);
    }
}

static int cal_known(const srv_remote *r, const uint8_t id[16])
{
    for (size_t i = 0; i < r->ncals; i++)
        if (memcmp(r->cals[i], id, 16) == 0)
            return 1;
    return 0;
}

static void cal_add(srv_remote *r, const uint8_t id[16])
{
    if (cal_known(r, id))
        return;
    if (r->ncals == r->cals_cap) {
        size_t nc = r->cals_cap ? 2 * r->cals_cap : 16;
        void *p = skv_realloc(r->cals, nc * 16);
        if (!p)
            return;
        r->cals = p;
        r->cals_cap = nc;
    }
    memcpy(r->cals[r->ncals++], id, 16);
}

/* Arguments of one batch's commands, kept until its exec is done */
typedef struct {
    skv_rc_cmd *cmd;
    const char *(*argv)[4];
    size_t (*argl)[4];
    char (*names)[96];
    uint8_t (*nval)[4];
    uint8_t **cval;
    uint8_t (*cid)[16];
    size_t ncmd, ncal;
} wbatch;

static int batch_alloc(wbatch *w, size_t items)
{
    const size_t cap = 3 * items; /* a record, its index entry, maybe a calibration */
    memset(w, 0, sizeof *w);
    w->cmd = skv_calloc(cap, sizeof *w->cmd);
    w->argv = skv_calloc(cap, sizeof *w->argv);
    w->argl = skv_calloc(cap, sizeof *w->argl);
    w->names = skv_calloc(cap, sizeof *w->names);
    w->nval = skv_calloc(items, sizeof *w->nval);
    w->cval = skv_calloc(items, sizeof *w->cval);
    w->cid = skv_calloc(items, sizeof *w->cid);
    return w->cmd && w->argv && w->argl && w->names && w->nval && w->cval && w->cid;
}

static void batch_free(wbatch *w)
{
    for (size_t i = 0; w->cval && i < w->ncal; i++)
        skv_free(w->cval[i]);
    skv_free(w->cmd);
    skv_free(w->argv);
    skv_free(w->argl);
    skv_free(w->names);
    skv_free(w->nval);
    skv_free(w->cval);
    skv_free(w->cid);
}

static void add_cmd(wbatch *w, int argc, const char *a0, const char *a1, const void *a2,
                    size_t l2, const void *a3, size_t l3)
{
    const size_t i = w->ncmd++;
    snprintf(w->names[i], sizeof w->names[i], "%s", a1);
    w->argv[i][0] = a0;
    w->argv[i][1] = w->names[i];
    w->argv[i][2] = a2;
    w->argv[i][3] = a3;
    w->argl[i][0] = strlen(a0);
    w->argl[i][1] = strlen(w->names[i]);
    w->argl[i][2] = l2;
    w->argl[i][3] = l3;
    w->cmd[i] = (skv_rc_cmd){argc, w->argv[i], w->argl[i], 1};
}

/* Write items to the cluster: 0 when every command was answered (and,
 * replica, confirmed) */
static int write_items(srv_remote *r, rq_item *items, size_t n)
{
    wbatch w;
    if (!batch_alloc(&w, n)) {
        batch_free(&w);
        return -1;
    }
    for (rq_item *it = items; it; it = it->next) {
        static const uint8_t zero[16];
        if (memcmp(it->calib, zero, 16) == 0 || cal_known(r, it->calib))
            continue;
        int seen = 0;
        for (size_t c = 0; c < w.ncal && !seen; c++)
            seen = memcmp(w.cid[c], it->calib, 16) == 0;
        size_t cl;
        if (seen || seqkv_tier_calib_export(r->s->db, it->calib, r->fkey, &w.cval[w.ncal], &cl))
            continue;
        memcpy(w.cid[w.ncal], it->calib, 16);
        char k[48];
        calkey(it->calib, k);
        add_cmd(&w, 4, "SET", k, w.cval[w.ncal], cl, "NX", 2);
        w.ncal++;
    }
    size_t m = 0;
    for (rq_item *it = items; it; it = it->next, m++) {
        char k[96];
        rkey(it->tag, it->key, k);
        add_cmd(&w, 4, "SET", k, it->val, it->len, "NX", 2);
        ckey(it->tag, it->parent, k);
        skv_store32_le(w.nval[m], it->n);
        add_cmd(&w, 4, "HSET", k, it->key, 32, w.nval[m], 4);
    }
    redisReply **rep = skv_calloc(w.ncmd, sizeof *rep);
    int rc = rep ? skv_rc_exec(r->rc, w.cmd, w.ncmd, rep, r->replica, r->timeout_ms) : -1;
    for (size_t i = 0; rep && i < w.ncmd; i++) {
        if (rep[i] && rep[i]->type == REDIS_REPLY_ERROR)
            rc = -1;
        if (rep[i])
            freeReplyObject(rep[i]);
    }
    if (!rc) {
        pthread_mutex_lock(&r->mu);
        for (size_t c = 0; c < w.ncal; c++)
            cal_add(r, w.cid[c]);
        r->st.calibs_written += w.ncal;
        pthread_mutex_unlock(&r->mu);
    }
    skv_free(rep);
    batch_free(&w);
    return rc;
}

static void *writer_main(void *arg)
{
    srv_remote *r = arg;
    for (;;) {
        pthread_mutex_lock(&r->mu);
        while (!r->head && !r->stop)
            pthread_cond_wait(&r->cv, &r->mu);
        if (!r->head) {
            pthread_mutex_unlock(&r->mu);
            break;
        }
        rq_item *first = r->head, *last = first;
        size_t n = 1, bytes = first->len;
        while (last->next && n < RQ_BATCH && bytes + last->next->len <= RQ_BATCH_BYTES) {
            last = last->next;
            bytes += last->len;
            n++;
        }
        r->head = last->next;
        if (!r->head)
            r->tail = NULL;
        last->next = NULL;
        r->fly_a = first->seq;
        r->fly_b = last->seq + 1;
        pthread_mutex_unlock(&r->mu);

        int rc = -1;
        for (int t = 0; rc && t < (r->replica ? 1 : WRITE_TRIES); t++) {
            if (t)
                nanosleep(&(struct timespec){0, 200000000}, NULL);
            rc = write_items(r, first, n);
        }
        if (rc)
            srv_log(r->s, "remote: %zu records not written: %s", n, skv_error_detail());
        pthread_mutex_lock(&r->mu);
        if (rc) {
            fail_range(r, first->seq, last->seq + 1);
            r->st.write_failures += n;
            for (rq_item *it = first; it; it = it->next)
                uc_add(r, it->key);
        } else {
            r->st.written += n;
            r->st.written_bytes += bytes;
        }
        r->st.backlog -= n;
        r->st.backlog_bytes -= bytes;
        r->fly_a = r->fly_b = 0;
        pthread_cond_broadcast(&r->dcv);
        pthread_mutex_unlock(&r->mu);
        for (rq_item *it = first, *nx; it; it = nx) {
            nx = it->next;
            skv_free(it->val);
            skv_free(it);
        }
    }
    return NULL;
}

uint64_t srv_remote_mark(skv_server *s)
{
    srv_remote *r = s->remote;
    if (!r)
        return 0;
    pthread_mutex_lock(&r->mu);
    const uint64_t m = r->next_seq;
    pthread_mutex_unlock(&r->mu);
    return m;
}

int srv_remote_wait(skv_server *s, uint64_t mark)
{
    srv_remote *r = s->remote;
    if (!r || !r->replica)
        return SKV_OK;
    pthread_mutex_lock(&r->mu);
    const uint64_t end = r->next_seq; /* this batch's records: [mark, end) */
    /* until none of them is queued or being written (the queue is in seq order) */
    while (end > mark && ((r->head && r->head->seq < end) || (r->fly_b > mark && r->fly_a < end)))
        pthread_cond_wait(&r->dcv, &r->mu);
    int failed = 0;
    const size_t nf = r->nfail < RQ_FAILS ? r->nfail : RQ_FAILS;
    for (size_t i = 0; i < nf && !failed; i++)
        failed = r->fail_a[i] < end && r->fail_b[i] > mark;
    pthread_mutex_unlock(&r->mu);
    return failed ? skv_error(SKV_ERR_IO, "stored here, but the cluster did not confirm it on a "
                                          "replica (remote-durability replica)")
                  : SKV_OK;
}

/* ---- reading -------------------------------------------------------------------- */

/* A fetched record: the cluster's value, its tag, its clear header */
typedef struct {
    uint8_t key[32], tag[32];
    redisReply *rep; /* the value (RHEAD, then the stored bytes) */
    seqkv_tier_rec h;
    int ok;          /* fetched and well formed */
    int viable;      /* it and everything it needs are here or fetched */
} fetched;

typedef struct {
    fetched *f;
    size_t n, cap;
} fetch_set;

static fetched *fs_find(fetch_set *fs, const uint8_t key[32])
{
    for (size_t i = 0; i < fs->n; i++)
        if (memcmp(fs->f[i].key, key, 32) == 0)
            return &fs->f[i];
    return NULL;
}

static fetched *fs_add(fetch_set *fs, const uint8_t key[32], const uint8_t tag[32])
{
    if (fs->n == fs->cap) {
        size_t nc = fs->cap ? 2 * fs->cap : 64;
        void *p = skv_realloc(fs->f, nc * sizeof *fs->f);
        if (!p)
            return NULL;
        fs->f = p;
        fs->cap = nc;
    }
    fetched *x = &fs->f[fs->n++];
    memset(x, 0, sizeof *x);
    memcpy(x->key, key, 32);
    memcpy(x->tag, tag, 32);
    return x;
}

static void fs_free(fetch_set *fs)
{
    for (size_t i = 0; i < fs->n; i++)
        if (fs->f[i].rep)
            freeReplyObject(fs->f[i].rep);
    skv_free(fs->f);
}

/* GET (or EXISTS, exists set) of records [from, fs->n) of fs in one exec */
static void fetch_round(srv_remote *r, fetch_set *fs, size_t from, int exists)
{
    const size_t n = fs->n - from;
    if (n == 0)
        return;
    skv_rc_cmd *c = skv_calloc(n, sizeof *c);
    const char *(*argv)[2] = skv_calloc(n, sizeof *argv);
    char (*names)[96] = skv_calloc(n, sizeof *names);
    redisReply **rep = skv_calloc(n, sizeof *rep);
    if (c && argv && names && rep) {
        for (size_t i = 0; i < n; i++) {
            rkey(fs->f[from + i].tag, fs->f[from + i].key, names[i]);
            argv[i][0] = exists ? "EXISTS" : "GET";
            argv[i][1] = names[i];
            c[i] = (skv_rc_cmd){2, argv[i], NULL, 1};
        }
        skv_rc_exec(r->rc, c, n, rep, 0, READ_DEADLINE_MS);
        for (size_t i = 0; i < n; i++) {
            fetched *x = &fs->f[from + i];
            if (exists) {
                x->ok = rep[i] && rep[i]->type == REDIS_REPLY_INTEGER && rep[i]->integer == 1;
                if (rep[i])
                    freeReplyObject(rep[i]);
                continue;
            }
            x->rep = rep[i];
            x->ok = rep[i] && rep[i]->type == REDIS_REPLY_STRING && rep[i]->len > RHEAD &&
                    memcmp(rep[i]->str, RMAGIC, 4) == 0 && rep[i]->str[4] == 1 &&
                    !seqkv_tier_peek((const uint8_t *)rep[i]->str + RHEAD, rep[i]->len - RHEAD,
                                     &x->h);
        }
    }
    skv_free(c);
    skv_free(argv);
    skv_free(names);
    skv_free(rep);
}

/* The children index of node: the longest record whose tokens are a
 * prefix of tok[0, avail) (more than `beyond` of them), its key into key;
 * its token count, or 0 */
static size_t tail_child(srv_remote *r, const char *tenant, const uint8_t tag[32],
                         const uint8_t node[32], const int32_t *tok, size_t avail, size_t beyond,
                         uint8_t key[32])
{
    char k[96];
    ckey(tag, node, k);
    const char *argv[2] = {"HGETALL", k};
    redisReply *h = exec1(r, 2, argv, NULL, READ_DEADLINE_MS);
    size_t best = 0;
    for (size_t i = 0; h && h->type == REDIS_REPLY_ARRAY && i + 1 < h->elements; i += 2) {
        const redisReply *f = h->element[i], *v = h->element[i + 1];
        if (f->type != REDIS_REPLY_STRING || f->len != 32 || v->type != REDIS_REPLY_STRING ||
            v->len != 4)
            continue;
        const size_t m = skv_load32_le(v->str);
        uint8_t want[32];
        if (m <= best || m <= beyond || m > avail ||
            seqkv_tier_key(r->s->db, tenant, node, tok, m, want) ||
            memcmp(want, f->str, 32) != 0)
            continue;
        best = m;
        memcpy(key, want, 32);
    }
    if (h)
        freeReplyObject(h);
    return best;
}

/* The prompt's records in the cluster past the local prefix: full chunks
 * [i0, j) found (fetched unless exists), then the longest tail record of
 * chunk j; the tokens they reach */
static size_t probe(srv_remote *r, const char *tenant, const char *profile, const int32_t *tok,
                    size_t n, size_t local, size_t target, int exists, fetch_set *fs)
{
    seqkv_profile p;
    if (seqkv_profile_get(r->s->db, profile, &p))
        return local;
    const size_t CH = (size_t)p.chunk, F = n / CH;
    uint8_t(*nodes)[32] = skv_malloc((F + 1) * 32);
    size_t ch;
    if (!nodes || seqkv_tier_chain(r->s->db, tenant, profile, tok, n, nodes, &ch)) {
        skv_free(nodes);
        return local;
    }
    const uint8_t *tag = F >= 1 ? nodes[1] : nodes[0];
    size_t i0 = local / CH, lim = (target + CH - 1) / CH, j = i0;
    if (lim > F)
        lim = F;
    size_t got = local;
    if (i0 < lim) {
        const size_t from = fs->n;
        for (size_t i = i0; i < lim; i++)
            if (!fs_add(fs, nodes[i + 1], tag))
                break;
        fetch_round(r, fs, from, exists);
        while (j < lim && from + (j - i0) < fs->n && fs->f[from + j - i0].ok)
            j++;
        if (j * CH > got)
            got = j * CH;
    }
    if (j * CH < target && j * CH < n) {
        uint8_t key[32];
        const size_t avail = n - j * CH, have = got > j * CH ? got - j * CH : 0;
        const size_t m = tail_child(r, tenant, j == 0 ? nodes[0] : tag, nodes[j], tok + j * CH,
                                    avail < CH ? avail : CH - 1, have, key);
        if (m) {
            const size_t from = fs->n;
            if (fs_add(fs, key, j == 0 ? nodes[0] : tag)) {
                fetch_round(r, fs, from, exists);
                if (fs->f[from].ok)
                    got = j * CH + m;
            }
        }
    }
    skv_free(nodes);
    return got;
}

size_t srv_remote_lookup(skv_server *s, const char *tenant, const char *profile, const int32_t *tok,
                         size_t n, size_t local)
{
    srv_remote *r = s->remote;
    if (!r || local >= n || !is_shared(r, tenant))
        return local;
    fetch_set fs = {0};
    const size_t got = probe(r, tenant, profile, tok, n, local, n, 1, &fs);
    fs_free(&fs);
    pthread_mutex_lock(&r->mu);
    r->st.lookups++;
    r->st.lookup_tokens += got - local;
    pthread_mutex_unlock(&r->mu);
    return got;
}

/* What fetched record x needs that is neither here nor fetched: added to
 * fs (under x's tag, or its centroid chain's) */
static void need(srv_remote *r, fetch_set *fs, const uint8_t key[32], const uint8_t tag[32])
{
    if (fs->n < FETCH_MAX && !fs_find(fs, key) && !seqkv_tier_has(r->s->db, key))
        fs_add(fs, key, tag);
}

static int dep_ok(srv_remote *r, fetch_set *fs, const uint8_t key[32])
{
    const fetched *d = fs_find(fs, key);
    return d ? d->viable : seqkv_tier_has(r->s->db, key);
}

/* Calibrations the fetched records need, fetched and stored here */
static void fetch_calibs(srv_remote *r, fetch_set *fs)
{
    static const uint8_t zero[16];
    for (size_t i = 0; i < fs->n; i++) {
        fetched *x = &fs->f[i];
        if (!x->ok || memcmp(x->h.calib, zero, 16) == 0 || seqkv_tier_calib_has(r->s->db, x->h.calib))
            continue;
        char k[48];
        calkey(x->h.calib, k);
        const char *argv[2] = {"GET", k};
        redisReply *g = exec1(r, 2, argv, NULL, READ_DEADLINE_MS);
        if (g && g->type == REDIS_REPLY_STRING &&
            !seqkv_tier_calib_import(r->s->db, x->h.calib, r->fkey, (const uint8_t *)g->str, g->len)) {
            pthread_mutex_lock(&r->mu);
            r->st.calibs_fetched++;
            pthread_mutex_unlock(&r->mu);
        }
        if (g)
            freeReplyObject(g);
    }
}

static int install(srv_remote *r, const char *tenant, const char *profile, fetch_set *fs,
                   size_t *count, size_t *bytes)
{
    seqkv_tier_in *in = skv_calloc(fs->n ? fs->n : 1, sizeof *in);
    if (!in)
        return SKV_ERR_NOMEM;
    size_t m = 0;
    for (size_t i = 0; i < fs->n; i++)
        if (fs->f[i].viable) {
            memcpy(in[m].key, fs->f[i].key, 32);
            in[m].bytes = (const uint8_t *)fs->f[i].rep->str + RHEAD;
            in[m].len = fs->f[i].rep->len - RHEAD;
            *bytes += in[m].len;
            m++;
        }
    int rc = m ? seqkv_tier_install(r->s->db, tenant, profile, in, m) : SKV_OK;
    *count = m;
    if (rc && m > 1) {
        /* one bad record: the others one at a time, in chunk order (what
         * needs a record that fails stays unreachable, never wrong) */
        size_t *ord = skv_malloc(fs->n * sizeof *ord), k = 0, bad = 0;
        for (size_t i = 0; ord && i < fs->n; i++)
            if (fs->f[i].viable) {
                size_t at = k++;
                while (at > 0 && fs->f[ord[at - 1]].h.chunk_index > fs->f[i].h.chunk_index) {
                    ord[at] = ord[at - 1];
                    at--;
                }
                ord[at] = i;
            }
        *count = 0;
        for (size_t q = 0; q < k; q++) {
            const fetched *x = &fs->f[ord[q]];
            seqkv_tier_in one = {.bytes = (const uint8_t *)x->rep->str + RHEAD,
                                 .len = x->rep->len - RHEAD};
            memcpy(one.key, x->key, 32);
            if (seqkv_tier_install(r->s->db, tenant, profile, &one, 1))
                bad++;
            else
                (*count)++;
        }
        if (!bad && ord)
            rc = SKV_OK;
        skv_free(ord);
    }
    skv_free(in);
    return rc;
}

void srv_remote_fill(skv_server *s, const char *tenant, const char *profile, const int32_t *tok,
                     size_t n, size_t want)
{
    srv_remote *r = s->remote;
    if (!r || !is_shared(r, tenant))
        return;
    size_t local = 0;
    if (seqkv_lookup(s->db, tenant, profile, tok, n, &local))
        local = 0; /* (nothing of this tenant here yet) */
    const size_t target = want ? want : n;
    if (local >= target)
        return;
    fetch_set fs = {0};
    probe(r, tenant, profile, tok, n, local, target, 0, &fs);
    /* what they need: parents, bases, centroid chains, round by round */
    for (size_t done = 0; done < fs.n;) {
        const size_t end = fs.n;
        for (size_t i = done; i < end; i++) {
            fetched *x = &fs.f[i];
            if (!x->ok)
                continue;
            if (x->h.chunk_index > 0)
                need(r, &fs, x->h.parent, x->tag);
            if (x->h.has_base)
                need(r, &fs, x->h.base, x->tag);
            if (x->h.has_centroid)
                need(r, &fs, x->h.centroid, (const uint8_t *)x->rep->str + 8);
        }
        done = end;
        fetch_round(r, &fs, end, 0);
    }
    fetch_calibs(r, &fs);
    static const uint8_t zero[16];
    for (size_t i = 0; i < fs.n; i++)
        fs.f[i].viable = fs.f[i].ok && !seqkv_tier_has(s->db, fs.f[i].key) &&
                         (memcmp(fs.f[i].h.calib, zero, 16) == 0 ||
                          seqkv_tier_calib_has(s->db, fs.f[i].h.calib));
    for (int changed = 1; changed;) {
        changed = 0;
        for (size_t i = 0; i < fs.n; i++) {
            fetched *x = &fs.f[i];
            if (!x->viable)
                continue;
            if ((x->h.chunk_index > 0 && !dep_ok(r, &fs, x->h.parent)) ||
                (x->h.has_base && !dep_ok(r, &fs, x->h.base)) ||
                (x->h.has_centroid && !dep_ok(r, &fs, x->h.centroid))) {
                x->viable = 0;
                changed = 1;
            }
        }
    }
    size_t count = 0, bytes = 0, misses = 0;
    for (size_t i = 0; i < fs.n; i++)
        misses += !fs.f[i].ok;
    int rc = install(r, tenant, profile, &fs, &count, &bytes);
    if (rc)
        srv_log(s, "remote: fetched records not installed: %s", skv_error_detail());
    pthread_mutex_lock(&r->mu);
    r->st.fills++;
    r->st.fetched += count;
    r->st.fetched_bytes += bytes;
    r->st.fetch_misses += misses;
    r->st.installed += count;
    r->st.install_failures += rc != 0;
    pthread_mutex_unlock(&r->mu);
    fs_free(&fs);
}

/* ---- start, stop, figures ----------------------------------------------------- */

int srv_remote_start(skv_server *s)
{
    const char *seeds = s->o.remote ? s->o.remote : (s->cfg.remote[0] ? s->cfg.remote : NULL);
    if (!seeds)
        return SKV_OK;
    const char *ks = s->o.remote_key ? s->o.remote_key
                                     : (s->cfg.remote_key[0] ? s->cfg.remote_key : NULL);
    if (!ks)
        return skv_error(SKV_ERR_ARG, "--remote needs --remote-key (the fleet's shared key: a key "
                                      "file, fd:N or env:VAR; every host gives the same)");
    srv_remote *r = skv_calloc(1, sizeof *r);
    if (!r)
        return SKV_ERR_NOMEM;
    r->s = s;
    r->replica = s->o.remote_durability ? s->o.remote_durability == 2
                                        : s->cfg.remote_durability == 2;
    r->timeout_ms = s->cfg.remote_timeout_ms;
    r->backlog_max = s->cfg.remote_backlog;
    r->next_seq = 1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    pthread_cond_init(&r->dcv, NULL);
    s->remote = r;
    int rc = (r->fkey = sodium_malloc(32)) ? seqkv_tier_key_load(ks, r->fkey) : SKV_ERR_NOMEM;
    if (rc)
        return rc;
    char err[256];
    if (!(r->rc = skv_rc_open(seeds, r->timeout_ms < 5000 ? r->timeout_ms : 5000, err, sizeof err)))
        return skv_error(SKV_ERR_IO, "remote %s: %s", seeds, err);
    for (size_t t = 0; t < s->cfg.ntenants; t++)
        if ((rc = tenant_join(r, s->cfg.tenants[t].name)) < 0)
            return rc;
    if (pthread_create(&r->thr, NULL, writer_main, r) != 0)
        return skv_error(SKV_ERR_IO, "pthread_create failed");
    r->started = 1;
    seqkv_tier_on_commit(s->db, on_commit, r);
    srv_log(s, "remote tier %s: %zu tenants shared, %zu local, durability %s", seeds,
            r->st.tenants_shared, r->st.tenants_local, r->replica ? "replica" : "local");
    return SKV_OK;
}

void srv_remote_stop(skv_server *s)
{
    srv_remote *r = s->remote;
    if (!r)
        return;
    if (s->db)
        seqkv_tier_on_commit(s->db, NULL, NULL);
    if (r->started) {
        pthread_mutex_lock(&r->mu);
        r->stop = 1;
        pthread_cond_broadcast(&r->cv);
        pthread_cond_broadcast(&r->dcv);
        pthread_mutex_unlock(&r->mu);
        pthread_join(r->thr, NULL);
    }
    for (rq_item *it = r->head, *nx; it; it = nx) {
        nx = it->next;
        skv_free(it->val);
        skv_free(it);
    }
    skv_rc_close(r->rc);
    if (r->fkey)
        sodium_free(r->fkey);
    skv_free(r->cals);
    skv_free(r->unconf);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    pthread_cond_destroy(&r->dcv);
    skv_free(r);
    s->remote = NULL;
}

void srv_remote_stat(skv_server *s, srv_remote_stats *st)
{
    srv_remote *r = s->remote;
    memset(st, 0, sizeof *st);
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    *st = r->st;
    pthread_mutex_unlock(&r->mu);
}

void srv_remote_client_info(skv_server *s, char *buf, size_t cap)
{
    srv_remote *r = s->remote;
    skv_rc_stats c;
    memset(&c, 0, sizeof c);
    if (r && r->rc)
        skv_rc_get_stats(r->rc, &c);
    snprintf(buf, cap,
             "remote_durability:%s\r\nremote_backlog_max:%llu\r\nremote_masters:%d\r\n"
             "remote_commands:%llu\r\nremote_moved:%llu\r\nremote_ask:%llu\r\n"
             "remote_refreshes:%llu\r\nremote_reconnects:%llu\r\nremote_client_failures:%llu\r\n",
             r && r->replica ? "replica" : "local", (unsigned long long)(r ? r->backlog_max : 0),
             c.masters, (unsigned long long)c.commands, (unsigned long long)c.redirects_moved,
             (unsigned long long)c.redirects_ask, (unsigned long long)c.refreshes,
             (unsigned long long)c.reconnects, (unsigned long long)c.failures);
}
