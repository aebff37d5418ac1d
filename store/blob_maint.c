/* The blob namespace's deletes and upkeep (seqkv.h): DEL, expiry,
 * FLUSHDB, the sweep of expired keys, eviction under a budget, and the
 * counts made when a store opens. Bounded write transactions: other
 * writers go between them. */
#include <stdlib.h>
#include <string.h>

#include "blob.h"
#include "blob_int.h"
#include "seqkv.h"

/* ---- deletes and expiry ---------------------------------------------------- */

typedef struct {
    bkeys k;
    size_t n;
    const uint8_t *const *keys;
    const size_t *lens;
    int64_t now, at;
    unsigned cond;
    size_t done;
} del_ctx;

static int del_txn(seqkv *db, MDB_txn *txn, void *vc, bdelta *d)
{
    del_ctx *c = vc;
    c->done = 0;
    for (size_t i = 0; i < c->n; i++) {
        uint8_t kb[KPFX + SEQKV_BLOB_KEY_MAX];
        MDB_val k = {skvb_ent_key(&c->k, c->keys[i], c->lens[i], kb), kb}, v;
        blob_ent e;
        int mrc = mdb_get(txn, db->db_blob, &k, &v), rc;
        if (mrc == MDB_NOTFOUND)
            continue;
        if (mrc)
            return skv_mdb_error(mrc, "blob entry");
        if ((rc = skvb_ent_unpack(&v, &e)) || (rc = skvb_ent_del(db, txn, c->k.tid, &k, &e, d)))
            return rc;
        if (skvb_expired(&e, c->now))
            d->expired++;
        else
            c->done++;
    }
    return SKV_OK;
}

int seqkv_blob_del(seqkv *db, const char *tenant, size_t n, const uint8_t *const *keys,
                   const size_t *key_lens, size_t *deleted)
{
    *deleted = 0;
    del_ctx c = {.n = n, .keys = keys, .lens = key_lens, .now = skv_now_ms()};
    MDB_txn *none;
    int rc = skvb_begin(db, tenant, n, keys, key_lens, 1, &c.k, &none);
    if (rc || !c.k.tid)
        return rc;
    const uint64_t tid = c.k.tid;
    pthread_mutex_lock(&db->wlock);
    rc = skvb_txn(db, tid, del_txn, &c);
    pthread_mutex_unlock(&db->wlock);
    if (!rc)
        *deleted = c.done;
    return rc;
}

static int expire_txn(seqkv *db, MDB_txn *txn, void *vc, bdelta *d)
{
    del_ctx *c = vc;
    c->done = 0;
    uint8_t kb[KPFX + SEQKV_BLOB_KEY_MAX];
    MDB_val k = {skvb_ent_key(&c->k, c->keys[0], c->lens[0], kb), kb}, v;
    blob_ent e;
    int mrc = mdb_get(txn, db->db_blob, &k, &v), rc;
    if (mrc == MDB_NOTFOUND)
        return SKV_OK;
    if (mrc)
        return skv_mdb_error(mrc, "blob entry");
    if ((rc = skvb_ent_unpack(&v, &e)))
        return rc;
    if (skvb_expired(&e, c->now)) {
        d->expired++;
        return skvb_ent_del(db, txn, c->k.tid, &k, &e, d);
    }
    /* none counts as an infinite time for GT and LT */
    const int has = e.expire_at > 0;
    if (((c->cond & SEQKV_EXPIRE_NX) && has) || ((c->cond & SEQKV_EXPIRE_XX) && !has) ||
        ((c->cond & SEQKV_EXPIRE_GT) && (!has || c->at <= e.expire_at)) ||
        ((c->cond & SEQKV_EXPIRE_LT) && has && c->at >= e.expire_at) || (c->at < 0 && !has))
        return SKV_OK;
    c->done = 1;
    if (c->at >= 0 && c->at <= c->now)
        return skvb_ent_del(db, txn, c->k.tid, &k, &e, d);
    e.expire_at = c->at < 0 ? 0 : c->at;
    uint8_t eb[ENT_SIZE];
    skvb_ent_pack(&e, eb);
    MDB_val ev = {ENT_SIZE, eb};
    mrc = mdb_put(txn, db->db_blob, &k, &ev, 0);
    return mrc ? skv_mdb_error(mrc, "blob entry") : SKV_OK;
}

int seqkv_blob_expire(seqkv *db, const char *tenant, const uint8_t *key, size_t key_len,
                      int64_t expire_at, unsigned cond, int *changed)
{
    *changed = 0;
    int rc = skvb_key_ok(key, key_len);
    uint64_t tid = rc ? 0 : skvb_tenant_id(db, tenant);
    if (!tid)
        return rc;
    if (db->o.read_only)
        return skv_error(SKV_ERR_ARG, "store opened read-only");
    const uint8_t *keys[1] = {key};
    del_ctx c = {.n = 1, .keys = keys, .lens = &key_len, .now = skv_now_ms(), .at = expire_at,
                 .cond = cond};
    skvb_keys(db, tid, &c.k);
    pthread_mutex_lock(&db->wlock);
    rc = skvb_txn(db, tid, expire_txn, &c);
    pthread_mutex_unlock(&db->wlock);
    if (!rc)
        *changed = (int)c.done;
    return rc;
}

/* ---- bounded passes over a tenant's entries: flush, sweep, eviction ------ */

#define PASS_BATCH 1024 /* entries a write transaction deletes */

typedef struct {
    uint64_t tid;      /* 0: every tenant (the sweep) */
    int expired_only;
    size_t examine;    /* entries to look at this transaction */
    uint8_t from[KPFX + SEQKV_BLOB_KEY_MAX]; /* where to go on */
    size_t from_len;
    size_t removed;
    int end;
} pass_ctx;

static int pass_txn(seqkv *db, MDB_txn *txn, void *vc, bdelta *d)
{
    pass_ctx *c = vc;
    c->removed = 0;
    c->end = 0;
    MDB_cursor *cur;
    int mrc = mdb_cursor_open(txn, db->db_blob, &cur), rc = SKV_OK;
    if (mrc)
        return skv_mdb_error(mrc, "blob cursor");
    uint8_t start[KPFX];
    skv_store64_be(start, c->tid);
    memset(start + 8, 0, 8);
    MDB_val k = c->from_len ? (MDB_val){c->from_len, c->from} : (MDB_val){c->tid ? 8 : 0, start}, v;
    const int64_t now = skv_now_ms();
    size_t seen = 0;
    mrc = c->from_len || c->tid ? mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE)
                                : mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    for (; !mrc && !rc; mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (k.mv_size <= KPFX || (c->tid && skv_load64_be(k.mv_data) != c->tid)) {
            mrc = MDB_NOTFOUND;
            break;
        }
        /* one tenant a transaction: its counts go to it */
        if (seen++ == c->examine || c->removed == PASS_BATCH ||
            (d->tid && skv_load64_be(k.mv_data) != d->tid)) {
            memcpy(c->from, k.mv_data, k.mv_size);
            c->from_len = k.mv_size;
            break;
        }
        blob_ent e;
        if (skvb_ent_unpack(&v, &e)) {
            seqkv_error_clear();
            continue;
        }
        int ex = skvb_expired(&e, now);
        if (c->expired_only && !ex)
            continue;
        /* (k's bytes are not valid after the delete) */
        const uint64_t tid = skv_load64_be(k.mv_data);
        /* the cursor stays valid over its own deletion (MDB_NEXT after
         * mdb_cursor_del moves to the entry after) */
        if ((mrc = mdb_cursor_del(cur, 0)))
            break;
        d->tid = tid;
        d->keys--;
        d->raw -= (int64_t)e.len;
        d->expired += ex;
        c->removed++;
        rc = skvb_unref(db, txn, tid, e.cid, d);
    }
    mdb_cursor_close(cur);
    if (mrc == MDB_NOTFOUND) {
        c->end = 1;
        mrc = 0;
    }
    if (rc)
        return rc;
    return mrc ? skv_mdb_error(mrc, "blob pass") : SKV_OK;
}

int seqkv_blob_flush(seqkv *db, const char *tenant, uint64_t *deleted)
{
    *deleted = 0;
    uint64_t tid = skvb_tenant_id(db, tenant);
    if (!tid)
        return SKV_OK;
    if (db->o.read_only)
        return skv_error(SKV_ERR_ARG, "store opened read-only");
    pass_ctx *c = skv_calloc(1, sizeof *c);
    if (!c)
        return skv_error(SKV_ERR_NOMEM, "flush");
    c->tid = tid;
    c->examine = SIZE_MAX;
    int rc = SKV_OK;
    do {
        /* one bounded transaction a round; other writers go between */
        skv_store_wlock_yield(db);
        pthread_mutex_lock(&db->wlock);
        c->from_len = 0;
        rc = skvb_txn(db, tid, pass_txn, c);
        pthread_mutex_unlock(&db->wlock);
        *deleted += c->removed;
    } while (!rc && !c->end);
    skv_free(c);
    return rc;
}

int seqkv_blob_sweep(seqkv *db, size_t max, size_t *removed)
{
    if (removed)
        *removed = 0;
    if (db->o.read_only || !max)
        return SKV_OK;
    uint64_t keys = 0;
    pthread_rwlock_rdlock(&db->rw);
    for (size_t i = 0; i < db->nten; i++)
        keys += db->ten[i].bkeys;
    pthread_rwlock_unlock(&db->rw);
    if (!keys)
        return SKV_OK; /* (no write transaction a second for a store without blobs) */
    pass_ctx *c = skv_calloc(1, sizeof *c);
    if (!c)
        return skv_error(SKV_ERR_NOMEM, "sweep");
    c->expired_only = 1;
    c->examine = max * 4;
    pthread_mutex_lock(&db->wlock);
    memcpy(c->from, db->blob_sweep, db->blob_sweep_len);
    c->from_len = db->blob_sweep_len;
    /* the counts go to whichever tenants the removed keys had */
    int rc = skvb_txn(db, 0, pass_txn, c);
    if (!rc) {
        db->blob_sweep_len = c->end ? 0 : c->from_len;
        memcpy(db->blob_sweep, c->from, db->blob_sweep_len);
    }
    pthread_mutex_unlock(&db->wlock);
    if (removed)
        *removed = c->removed;
    skv_free(c);
    return rc;
}

typedef struct {
    int64_t set_at;
    size_t off, len; /* the entry's key in keybuf */
} ev_ent;

typedef struct {
    ev_ent *e;
    size_t n, next;
    uint8_t *keybuf;
    uint64_t over, freed;
} evict_ctx;

static int ev_cmp(const void *a, const void *b)
{
    const ev_ent *x = a, *y = b;
    return x->set_at < y->set_at ? -1 : x->set_at > y->set_at;
}

static int evict_txn(seqkv *db, MDB_txn *txn, void *vc, bdelta *d)
{
    evict_ctx *c = vc;
    size_t i = c->next;
    for (; i < c->n && (uint64_t)(-d->stored) < c->over - c->freed && i - c->next < PASS_BATCH; i++) {
        MDB_val k = {c->e[i].len, c->keybuf + c->e[i].off}, v;
        blob_ent e;
        if (mdb_get(txn, db->db_blob, &k, &v) || skvb_ent_unpack(&v, &e)) {
            seqkv_error_clear();
            continue; /* gone meanwhile */
        }
        int rc = skvb_ent_del(db, txn, skv_load64_be(k.mv_data), &k, &e, d);
        if (rc)
            return rc;
        d->evicted++;
    }
    c->next = i;
    return SKV_OK;
}

int skv_blob_evict(seqkv *db, uint64_t tid, uint64_t over)
{
    evict_ctx c = {.over = over};
    size_t cap = 0, kcap = 0, klen = 0;
    MDB_txn *txn;
    MDB_cursor *cur;
    int mrc = mdb_txn_begin(db->env, NULL, MDB_RDONLY, &txn), rc = SKV_OK;
    if (mrc)
        return skv_mdb_error(mrc, "begin read transaction");
    if ((mrc = mdb_cursor_open(txn, db->db_blob, &cur))) {
        mdb_txn_abort(txn);
        return skv_mdb_error(mrc, "blob cursor");
    }
    uint8_t start[8];
    skv_store64_be(start, tid);
    MDB_val k = {8, start}, v;
    for (mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); !mrc && !rc;
         mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (k.mv_size <= KPFX || skv_load64_be(k.mv_data) != tid)
            break;
        blob_ent e;
        if (skvb_ent_unpack(&v, &e)) {
            seqkv_error_clear();
            continue;
        }
        if (c.n == cap) {
            cap = cap ? cap * 2 : 256;
            ev_ent *ne = skv_realloc(c.e, cap * sizeof *ne);
            if (!ne) {
                rc = skv_error(SKV_ERR_NOMEM, "eviction list");
                break;
            }
            c.e = ne;
        }
        if (klen + k.mv_size > kcap) {
            kcap = (klen + k.mv_size) * 2;
            uint8_t *nk = skv_realloc(c.keybuf, kcap);
            if (!nk) {
                rc = skv_error(SKV_ERR_NOMEM, "eviction list");
                break;
            }
            c.keybuf = nk;
        }
        memcpy(c.keybuf + klen, k.mv_data, k.mv_size);
        c.e[c.n++] = (ev_ent){e.set_at, klen, k.mv_size};
        klen += k.mv_size;
    }
    mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    if (!rc && c.n) {
        qsort(c.e, c.n, sizeof *c.e, ev_cmp);
        while (!rc && c.next < c.n && c.freed < c.over) {
            uint64_t before;
            pthread_rwlock_rdlock(&db->rw);
            tenant_ent *te = skvb_tenant(db, tid);
            before = te ? te->bstored : 0;
            pthread_rwlock_unlock(&db->rw);
            rc = skvb_txn(db, tid, evict_txn, &c);
            pthread_rwlock_rdlock(&db->rw);
            te = skvb_tenant(db, tid);
            c.freed += te && te->bstored < before ? before - te->bstored : 0;
            pthread_rwlock_unlock(&db->rw);
        }
    }
    skv_free(c.e);
    skv_free(c.keybuf);
    return rc;
}

/* ---- opening a store ------------------------------------------------------ */

int skv_blob_load(seqkv *db, MDB_txn *txn)
{
    static const char *const names[3] = {"blobs", "blobvals", "blobrefs"};
    MDB_dbi *dbis[3] = {&db->db_blob, &db->db_bval, &db->db_bref};
    for (int i = 0; i < 3; i++) {
        int mrc = mdb_dbi_open(txn, names[i], db->o.read_only ? 0 : MDB_CREATE, dbis[i]);
        if (mrc == MDB_NOTFOUND && db->o.read_only)
            return SKV_OK; /* written before blobs existed: none */
        if (mrc)
            return skv_mdb_error(mrc, names[i]);
    }
    db->has_blobs = 1;
    MDB_cursor *cur;
    MDB_val k, v;
    int mrc = mdb_cursor_open(txn, db->db_bval, &cur);
    if (mrc)
        return skv_mdb_error(mrc, "blob values");
    while (!(mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))) {
        tenant_ent *te = k.mv_size == VKEY ? skvb_tenant(db, skv_load64_be(k.mv_data)) : NULL;
        skv_blob_hdr h;
        if (!te || skvb_val_info(&v, &h)) {
            seqkv_error_clear();
            continue; /* a GET of it fails with its error */
        }
        te->bvalues++;
        te->bvbytes += h.raw_len;
        te->bstored += v.mv_size;
        te->bkv += h.enc == SKV_BLOB_ENC_KV;
        te->used += v.mv_size;
        db->stored += v.mv_size;
    }
    mdb_cursor_close(cur);
    if (mrc != MDB_NOTFOUND)
        return skv_mdb_error(mrc, "blob values");
    if ((mrc = mdb_cursor_open(txn, db->db_blob, &cur)))
        return skv_mdb_error(mrc, "blobs");
    while (!(mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))) {
        tenant_ent *te = k.mv_size > KPFX ? skvb_tenant(db, skv_load64_be(k.mv_data)) : NULL;
        blob_ent e;
        if (!te || skvb_ent_unpack(&v, &e)) {
            seqkv_error_clear();
            continue;
        }
        te->bkeys++;
        te->braw += e.len;
    }
    mdb_cursor_close(cur);
    return mrc == MDB_NOTFOUND ? SKV_OK : skv_mdb_error(mrc, "blobs");
}
