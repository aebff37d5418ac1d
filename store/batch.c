/* Put batches (seqkv_put_batch, seqkv_put): the writer's records,
 * written in one transaction. */
#include <stdio.h>
#include <string.h>

#include "store_priv.h"

/* A put batch commits early once its records reach this many bytes. */
#define SKV_BATCH_BYTES (64u << 20)

pend_rec *skv_batch_find(struct skv_put_batch *pb, const uint8_t key[32])
{
    for (size_t i = pb ? pb->nrec : 0; i-- > 0;)
        if (memcmp(pb->rec[i].key, key, 32) == 0)
            return &pb->rec[i];
    return NULL;
}

int skv_batch_whole(pend_rec *p)
{
    if (!p->at.src)
        return SKV_OK;
    uint8_t *w = skv_rec_gather(p->img, p->len, &p->at);
    if (!w)
        return skv_error(SKV_ERR_NOMEM, "record");
    skv_free(p->img);
    skv_free((void *)p->at.src);
    p->img = w;
    p->at = (skv_rec_at){0};
    return SKV_OK;
}

/* Room in the array *p (capacity *cap, elements of size sz) for need
 * elements: twice need when it grows */
static int batch_grow(void **p, size_t *cap, size_t need, size_t sz)
{
    if (need <= *cap)
        return SKV_OK;
    void *q = skv_realloc(*p, need * 2 * sz);
    if (!q)
        return skv_error(SKV_ERR_NOMEM, "put batch");
    *p = q;
    *cap = need * 2;
    return SKV_OK;
}

int skv_batch_reserve(struct skv_put_batch *pb, size_t nrec, size_t ntick)
{
    int rc = batch_grow((void **)&pb->rec, &pb->rec_cap, pb->nrec + nrec, sizeof *pb->rec);
    return rc ? rc : batch_grow((void **)&pb->tick, &pb->tick_cap, pb->ntick + ntick, sizeof *pb->tick);
}

/* Forget the batch's records from `from` on (never written): out of the
 * index, newest first, and their images freed. */
void skv_batch_drop(seqkv *db, struct skv_put_batch *pb, size_t from)
{
    pthread_rwlock_wrlock(&db->rw);
    while (pb->nrec > from) {
        pend_rec *p = &pb->rec[--pb->nrec];
        skv_irec *t = skv_irec_find(p->e->trie, p->key);
        if (t && t->tr.hidden)
            skv_store_unindex(db, p->e, t, 1);
        pb->bytes -= p->len;
        skv_free(p->img);
        skv_free((void *)p->at.src);
        p->at.src = NULL;
        skv_hot_unref(p->hot);
        p->hot = NULL;
    }
    if (from == 0)
        pb->ntick = 0;
    pthread_rwlock_unlock(&db->rw);
}

/* Write the batch's records (and its paths' recency) in one transaction
 * (skv_store_write: at the map's limit a quarter of what is evictable
 * goes), then show them to readers; a failure fails the batch (the caller
 * drops it). */
static int batch_write(seqkv *db, struct skv_put_batch *pb, uint8_t *const *sealed,
                       const size_t *slen, int *evicted);

static int batch_commit(seqkv *db, struct skv_put_batch *pb, int *evicted)
{
    if (pb->nrec == 0) {
        skv_tier_committed(db, pb, NULL, NULL); /* (the prefixes the puts reused) */
        pb->ntick = 0; /* a put of cached tokens only: recency goes out later */
        return SKV_OK;
    }
    /* sealed before the transaction (the stored bytes; the batch keeps the
     * plain images for its own reads until the commit) when the remote tier
     * takes the sealed bytes after it; else sealed straight into the
     * transaction's pages (batch_write: one copy of the KV fewer) */
    uint8_t **sealed = skv_calloc(pb->nrec, sizeof *sealed);
    size_t *slen = skv_calloc(pb->nrec, sizeof *slen);
    int src = sealed && slen ? SKV_OK : skv_error(SKV_ERR_NOMEM, "sealed records");
    for (size_t j = 0; !src && !db->o.no_seal && db->tier_fn && j < pb->nrec; j++)
        if (!(src = skv_batch_whole(&pb->rec[j])))
            src = skv_store_rec_seal(db, pb->rec[j].key, pb->rec[j].img, pb->rec[j].len, &sealed[j],
                                     &slen[j]);
    if (src) {
        for (size_t j = 0; sealed && j < pb->nrec; j++)
            skv_free(sealed[j]);
        skv_free(sealed);
        skv_free(slen);
        return src;
    }
    const size_t n = pb->nrec; /* (the write empties the batch) */
    int crc = batch_write(db, pb, sealed, slen, evicted);
    for (size_t j = 0; j < n; j++)
        skv_free(sealed[j]);
    skv_free(sealed);
    skv_free(slen);
    return crc;
}

typedef struct {
    struct skv_put_batch *pb;
    uint8_t *const *sealed;
    const size_t *slen;
    int *evicted;
} batch_txn;

/* The batch's records and its paths' recency, in txn */
static int batch_body(seqkv *db, MDB_txn *txn, void *v)
{
    const batch_txn *bt = v;
    const struct skv_put_batch *pb = bt->pb;
    const int in_place = !db->o.no_seal && !db->tier_fn;
    int mrc = 0;
    for (size_t j = 0; !mrc && j < pb->nrec; j++) {
        const pend_rec *p = &pb->rec[j];
        const skv_irec *t = skv_irec_find(p->e->trie, p->key);
        MDB_val k = {32, (void *)p->key};
        /* (sealed here, or before the transaction for the remote tier, or
         * with sealing off stored as it is) */
        const int pre = !in_place && bt->sealed[j];
        int rc = skv_chunk_put(db, txn, p->key, pre ? bt->sealed[j] : p->img, pre ? bt->slen[j] : p->len,
                               pre || !p->at.src ? NULL : &p->at, in_place, MDB_NOOVERWRITE, db->pool,
                               &mrc);
        if (rc)
            return rc;
        if (mrc == MDB_KEYEXIST)
            mrc = 0; /* the same tokens under the same key: already stored */
        uint8_t b[8];
        skv_store64_le(b, t ? t->tick : skv_store_tick(db));
        MDB_val tv = {8, b};
        if (!mrc)
            mrc = mdb_put(txn, db->db_evict, &k, &tv, 0);
    }
    for (size_t j = 0; !mrc && j < pb->ntick; j++) {
        const skv_irec *t = skv_irec_find(pb->tick[j].e->trie, pb->tick[j].key);
        if (!t || t->tr.hidden)
            continue; /* evicted since, or one of the batch's own */
        uint8_t b[8];
        skv_store64_le(b, t->tick);
        MDB_val k = {32, (void *)t->tr.key}, tv = {8, b};
        mrc = mdb_put(txn, db->db_evict, &k, &tv, 0);
    }
    return mrc ? skv_mdb_error(mrc, "write chunks") : SKV_OK;
}

/* The map is full at its limit: a quarter of what is evictable goes */
static int batch_full(seqkv *db, void *v)
{
    const batch_txn *bt = v;
    return skv_store_evict(db, 0, db->stored, db->stored * 3 / 4, 0, bt->evicted);
}

static int batch_write(seqkv *db, struct skv_put_batch *pb, uint8_t *const *sealed,
                       const size_t *slen, int *evicted)
{
    batch_txn bt = {pb, sealed, slen, evicted};
    int rc = skv_store_write(db, "write chunks", batch_body, batch_full, &bt, 0);
    if (rc)
        return rc;
    skv_tier_committed(db, pb, sealed, slen);
    pthread_rwlock_wrlock(&db->rw);
    for (size_t j = 0; j < pb->nrec; j++) {
        skv_irec *t = skv_irec_find(pb->rec[j].e->trie, pb->rec[j].key);
        if (t) {
            t->tr.hidden = 0;
            t->tick_saved = t->tick;
            if (db->hot && pb->rec[j].hot)
                skv_hot_put(db->hot, pb->rec[j].hot); /* recently put: hot */
        }
        skv_free(pb->rec[j].img);
        skv_free((void *)pb->rec[j].at.src);
        pb->rec[j].at.src = NULL;
        skv_hot_unref(pb->rec[j].hot);
        pb->rec[j].hot = NULL;
    }
    for (size_t j = 0; j < pb->ntick; j++) {
        skv_irec *t = skv_irec_find(pb->tick[j].e->trie, pb->tick[j].key);
        if (t)
            t->tick_saved = t->tick;
    }
    pthread_rwlock_unlock(&db->rw);
    pb->nrec = pb->ntick = 0;
    pb->bytes = 0;
    return SKV_OK;
}

static void req_error(seqkv_put_req *q, int rc)
{
    q->rc = rc;
    snprintf(q->detail, sizeof q->detail, "%s", rc ? seqkv_error_detail() : "");
    if (rc)
        memset(&q->res, 0, sizeof q->res);
}

/* One request alone: prepared and committed by itself; its records are
 * dropped again when that fails. */
static int put_alone(seqkv *db, struct skv_put_batch *pb, seqkv_put_req *q, int standalone,
                     int *prefix)
{
    int rc = skv_store_put_one(db, q, pb, standalone, prefix);
    if (!rc)
        rc = batch_commit(db, pb, &q->res.evicted);
    if (rc)
        skv_batch_drop(db, pb, 0);
    return rc;
}

/* A group's commit failed (its records are dropped): put its requests
 * again one by one, each with its own commit, standalone when its prefix
 * is in the way (at the map limit). */
static void group_retry(seqkv *db, struct skv_put_batch *pb, seqkv_put_req *req, size_t n,
                        const int *prefix, int rc0)
{
    size_t ok = 0;
    for (size_t i = 0; i < n; i++)
        ok += req[i].rc == 0;
    for (size_t i = 0; i < n; i++) {
        if (req[i].rc)
            continue;
        int rc = rc0, pf = prefix[i], tried = 0;
        if (ok > 1) {
            tried = 1;
            rc = put_alone(db, pb, &req[i], 0, &pf);
        }
        if (rc == SKV_ERR_TOO_LARGE && pf) {
            tried = 1;
            rc = put_alone(db, pb, &req[i], 1, &pf);
        }
        if (tried) {
            req_error(&req[i], rc);
        } else { /* the group's own failure: its detail is in error already */
            req[i].rc = rc;
            memset(&req[i].res, 0, sizeof req[i].res);
        }
    }
}

/* Commit the batch's records: those of requests [first, end). */
static void commit_group(seqkv *db, struct skv_put_batch *pb, seqkv_put_req *req, size_t first,
                         size_t end, const int *prefix)
{
    int ev = 0, rc = batch_commit(db, pb, &ev);
    if (rc) {
        char why[sizeof req->detail];
        snprintf(why, sizeof why, "%s", seqkv_error_detail());
        skv_batch_drop(db, pb, 0);
        for (size_t k = first; k < end; k++)
            if (!req[k].rc)
                snprintf(req[k].detail, sizeof req[k].detail, "%s", why);
        group_retry(db, pb, req + first, end - first, prefix + first, rc);
        return;
    }
    for (size_t k = end; k-- > first;)
        if (!req[k].rc) {
            req[k].res.evicted += ev;
            break;
        }
}

size_t seqkv_put_batch(seqkv *db, seqkv_put_req *req, size_t n)
{
    size_t failed = 0;
    for (size_t i = 0; i < n; i++) {
        req[i].rc = 0;
        req[i].detail[0] = 0;
        memset(&req[i].res, 0, sizeof req[i].res);
    }
    if (n == 0)
        return 0;
    int *prefix = skv_calloc(n, sizeof *prefix);
    if (db->o.read_only || !prefix) {
        int rc = prefix ? skv_error(SKV_ERR_ARG, "store opened read-only")
                        : skv_error(SKV_ERR_NOMEM, "put batch");
        for (size_t i = 0; i < n; i++)
            req_error(&req[i], rc);
        skv_free(prefix);
        return n;
    }
    skv_store_wlock_client(db);
    struct skv_put_batch pb = {0};
    db->batch = &pb;
    size_t first = 0;
    for (size_t i = 0; i < n; i++) {
        int rc = skv_store_put_one(db, &req[i], &pb, 0, &prefix[i]);
        if (rc == SKV_ERR_TOO_LARGE && pb.nrec > 0) {
            /* the batch's hidden records cannot be evicted: when they are
             * in the way of the room this put needs, commit them first */
            commit_group(db, &pb, req, first, i, prefix);
            first = i;
            rc = skv_store_put_one(db, &req[i], &pb, 0, &prefix[i]);
        }
        req_error(&req[i], rc);
        if (pb.bytes < SKV_BATCH_BYTES && i + 1 < n)
            continue;
        commit_group(db, &pb, req, first, i + 1, prefix);
        first = i + 1;
    }
    db->batch = NULL;
    skv_free(pb.rec);
    skv_free(pb.tick);
    pthread_mutex_unlock(&db->wlock);
    skv_free(prefix);
    for (size_t i = 0; i < n; i++)
        failed += req[i].rc != 0;
    return failed;
}

int seqkv_put(seqkv *db, const char *tenant, const char *profile, const int32_t *tokens,
              size_t n, const void *kv, size_t kv_len, const seqkv_put_opts *opts,
              seqkv_put_result *res)
{
    seqkv_put_req q;
    memset(&q, 0, sizeof q);
    q.tenant = tenant;
    q.profile = profile;
    q.tokens = tokens;
    q.n = n;
    q.kv = kv;
    q.kv_len = kv_len;
    q.opts = opts;
    seqkv_put_batch(db, &q, 1);
    if (res)
        *res = q.res;
    if (q.rc)
        return skv_error_at(q.rc, NULL, 0, "%s", q.detail);
    return SKV_OK;
}
