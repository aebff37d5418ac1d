/* The store's one write path: a write transaction that owns the map's
 * growth. Every writer (the put batch, compaction, eviction, DEL, blobs,
 * the remote tier's installs, profiles, tenants, calibrations) hands its
 * writes to skv_store_write as a body; no writer grows the map itself. */
#include <stdio.h>
#include <time.h>

#include "store_priv.h"

void skv_store_wlock_client(seqkv *db)
{
    __atomic_add_fetch(&db->wwait, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_lock(&db->wlock);
    __atomic_sub_fetch(&db->wwait, 1, __ATOMIC_ACQ_REL);
}

void skv_store_wlock_yield(seqkv *db)
{
    const struct timespec ms = {0, 1000000};
    for (int i = 0; i < 1000 && __atomic_load_n(&db->wwait, __ATOMIC_ACQUIRE) > 0; i++)
        nanosleep(&ms, NULL);
}

/* Double the map (up to map_max); SKV_ERR_MAP_FULL at the limit. Caller
 * holds no transaction, and rw exclusively when held says so. */
static int grow(seqkv *db, int held)
{
    if (db->map_size >= db->o.map_max)
        return skv_error(SKV_ERR_MAP_FULL, "LMDB map full at its limit (%llu bytes; raise map_max)",
                         (unsigned long long)db->map_size);
    uint64_t ns = db->map_size * 2;
    if (ns > db->o.map_max)
        ns = db->o.map_max;
    if (!held)
        pthread_rwlock_wrlock(&db->rw);
    int mrc = mdb_env_set_mapsize(db->env, (size_t)ns);
    if (!mrc)
        db->map_size = ns;
    if (!held)
        pthread_rwlock_unlock(&db->rw);
    if (mrc)
        return skv_mdb_error(mrc, "grow map");
    if (!db->o.quiet)
        fprintf(stderr, "seqkv: LMDB map grown to %llu MiB\n", (unsigned long long)(ns >> 20));
    return SKV_OK;
}

int skv_store_grow(seqkv *db)
{
    return grow(db, 0);
}

int skv_store_write(seqkv *db, const char *what, skv_write_fn body, skv_full_fn full, void *ctx,
                    unsigned flags)
{
    const int held = (flags & SKV_WRITE_RW_HELD) != 0;
    for (int tries = 1;; tries++) {
        MDB_txn *txn = NULL;
        if (!held)
            pthread_rwlock_rdlock(&db->rw);
        int mrc = mdb_txn_begin(db->env, NULL, 0, &txn);
        int rc = mrc ? skv_mdb_error(mrc, what) : body(db, txn, ctx);
        /* (what it did to value files, taken while the transaction is
         * held: after it another writer's begins) */
        skv_vf_txn vt = {0};
        if (!mrc) {
            int vrc = skv_vf_txn_take(db, &vt);
            rc = rc ? rc : vrc;
        }
        if (!mrc && rc) {
            mdb_txn_abort(txn);
            skv_vf_txn_end(db, &vt, SKV_VF_ABORTED);
        } else if (!mrc && (mrc = mdb_txn_commit(txn))) {
            rc = skv_mdb_error(mrc, what);
            skv_vf_txn_end(db, &vt, SKV_VF_UNKNOWN); /* (the next open sweeps) */
        } else if (!mrc) {
            skv_vf_txn_end(db, &vt, SKV_VF_COMMITTED);
        }
        if (!held)
            pthread_rwlock_unlock(&db->rw);
        if (rc != SKV_ERR_MAP_FULL || tries >= SKV_WRITE_TRIES)
            return rc;
        rc = grow(db, held);
        if (rc == SKV_ERR_MAP_FULL && full) /* at its limit: make room, or give up */
            rc = full(db, ctx);
        if (rc)
            return rc;
    }
}

typedef struct {
    MDB_dbi dbi;
    MDB_val k, v;
    unsigned flags;
} put1;

static int put1_body(seqkv *db, MDB_txn *txn, void *ctx)
{
    (void)db;
    put1 *p = ctx;
    MDB_val v = p->v; /* (a put may change its value's address) */
    int mrc = mdb_put(txn, p->dbi, &p->k, &v, p->flags);
    return mrc && mrc != MDB_KEYEXIST ? skv_mdb_error(mrc, "put") : SKV_OK;
}

int skv_store_write_one(seqkv *db, MDB_dbi dbi, const void *key, size_t klen, const void *val,
                        size_t vlen, unsigned mdb_flags, const char *what)
{
    put1 p = {dbi, {klen, (void *)key}, {vlen, (void *)val}, mdb_flags};
    return skv_store_write(db, what, put1_body, NULL, &p, 0);
}

typedef struct {
    const uint8_t (*keys)[32];
    size_t n;
} del_recs;

static int del_body(seqkv *db, MDB_txn *txn, void *ctx)
{
    const del_recs *d = ctx;
    int mrc = 0;
    for (size_t i = 0; !mrc && i < d->n; i++)
        if ((mrc = skv_store_del_rec(db, txn, d->keys[i])) == MDB_NOTFOUND)
            mrc = 0;
    return mrc ? skv_mdb_error(mrc, "delete records") : SKV_OK;
}

int skv_store_write_del(seqkv *db, const uint8_t (*keys)[32], size_t n, const char *what)
{
    del_recs d = {keys, n};
    return skv_store_write(db, what, del_body, NULL, &d, 0);
}
