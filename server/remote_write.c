/* The remote tier's writes (remote.h): the store's commit hook queues each
 * committed record (bounded: past remote-backlog a record is dropped and
 * remembered as unconfirmed); one writer thread sends them to the cluster
 * (SET NX of the record, then HSET of its index entry, on one shard's
 * connection; WAIT for durability replica); a replica put waits for its
 * own records. A record whose write failed is written again by the next
 * put that reuses it. */
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "remote_int.h"

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

static int enqueue(srv_remote *r, const skv_tier_rec *x);

/* A record of this store the cluster may lack (ref: the hook's entry for
 * it, bytes NULL), written again: its bytes and calibration from the store */
static void requeue(srv_remote *r, const skv_tier_rec *ref)
{
    uint8_t *b;
    size_t len;
    skv_tier_rec x, h;
    if (skv_tier_read(r->s->db, ref->key, &b, &len))
        return;
    if (!skv_tier_peek(b, len, &h)) {
        x = *ref;
        memcpy(x.calib, h.calib, 16);
        x.bytes = b;
        x.len = len;
        enqueue(r, &x);
    }
    skv_free(b);
}

static int enqueue(srv_remote *r, const skv_tier_rec *x)
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

void srv_remote_unconfirmed(srv_remote *r, const uint8_t (*keys)[32], size_t n)
{
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < n; i++)
        uc_add(r, keys[i]);
    pthread_mutex_unlock(&r->mu);
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
 * reused and what any of them needs (bases, centroid chains) written
 * again when an earlier write of theirs failed, so that everything an
 * acknowledged put's prefix needs is in the cluster */
void srv_remote_on_commit(void *ctx, const skv_tier_rec *recs, size_t n)
{
    srv_remote *r = ctx;
    for (size_t i = 0; i < n; i++) {
        const skv_tier_rec *x = &recs[i];
        if (!srv_rshared(r, x->tenant))
            continue;
        if (!x->bytes) { /* a reused record */
            if (unconfirmed(r, x->key))
                requeue(r, x);
            continue;
        }
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
static int write_items(srv_remote *r, rq_item *items, size_t n, int deadline_ms)
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
        if (seen || skv_tier_calib_export(r->s->db, it->calib, r->fkey, &w.cval[w.ncal], &cl))
            continue;
        memcpy(w.cid[w.ncal], it->calib, 16);
        char k[48];
        srv_calkey(it->calib, k);
        add_cmd(&w, 4, "SET", k, w.cval[w.ncal], cl, "NX", 2);
        w.ncal++;
    }
    size_t m = 0;
    for (rq_item *it = items; it; it = it->next, m++) {
        char k[96];
        srv_rkey(it->tag, it->key, k);
        /* replica: a plain SET, so that WAIT proves this record (one
         * another host wrote, unconfirmed, may be gone after a failover
         * that WAIT would not see; the same tokens' record is the same KV) */
        add_cmd(&w, r->replica ? 3 : 4, "SET", k, it->val, it->len, "NX", 2);
        srv_ckey(it->tag, it->parent, k);
        skv_store32_le(w.nval[m], it->n);
        add_cmd(&w, 4, "HSET", k, it->key, 32, w.nval[m], 4);
    }
    redisReply **rep = skv_calloc(w.ncmd, sizeof *rep);
    int rc = rep ? skv_rc_exec(r->rc, w.cmd, w.ncmd, rep, r->replica, deadline_ms) : -1;
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

void *srv_remote_writer(void *arg)
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
        const int stopping = r->stop;
        pthread_mutex_unlock(&r->mu);

        /* stopping: what is left gets one short try (a stop never waits
         * minutes on an unreachable cluster; what fails is a miss there) */
        const int tries = stopping || r->replica ? 1 : WRITE_TRIES;
        const int deadline = stopping && r->timeout_ms > STOP_DEADLINE_MS ? STOP_DEADLINE_MS
                                                                            : r->timeout_ms;
        int rc = -1;
        for (int t = 0; rc && t < tries; t++) {
            if (t)
                nanosleep(&(struct timespec){0, 200000000}, NULL);
            rc = write_items(r, first, n, deadline);
        }
        if (rc)
            srv_log(r->s, "remote: %zu records not written: %s", n, seqkv_error_detail());
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
