/* Eviction: least-recently-used records that nothing depends on. */
#include <string.h>

#include "store_priv.h"

typedef struct {
    seqkv *db;
    uint64_t tenant; /* 0: any */
    skv_irec *best;
    ns_ent *best_ns;
    ns_ent *cur;
} pick_ctx;

static void pick_one(void *vctx, skv_irec *r)
{
    pick_ctx *c = vctx;
    if (r->deps || r->evicting || r->tr.hidden)
        return;
    if (!c->best || r->tick < c->best->tick)
        c->best = r, c->best_ns = c->cur;
}

typedef struct {
    skv_irec *r;
    ns_ent *e;
} victim;

/* Victims hidden from readers (hide) or shown again */
static void show_victims(seqkv *db, victim *v, size_t n, int hide)
{
    if (n == 0)
        return;
    pthread_rwlock_wrlock(&db->rw);
    for (size_t i = 0; i < n; i++)
        v[i].r->tr.hidden = (uint8_t)hide;
    pthread_rwlock_unlock(&db->rw);
}

typedef struct {
    const victim *v;
    size_t done, batch, n; /* deleted, a transaction's count, victims */
} evict_txn;

/* The next batch of victims' records deleted, and the count of evictions */
static int evict_body(seqkv *db, MDB_txn *txn, void *ctx)
{
    const evict_txn *et = ctx;
    const size_t end = et->done + et->batch < et->n ? et->done + et->batch : et->n;
    int mrc = 0;
    for (size_t i = et->done; !mrc && i < end; i++)
        mrc = skv_store_del_rec(db, txn, et->v[i].r->tr.key);
    uint8_t b8[8];
    MDB_val mk = {9, "evictions"}, mv = {8, b8};
    skv_store64_le(b8, db->evictions + end);
    if (!mrc)
        mrc = mdb_put(txn, db->db_meta, &mk, &mv, 0);
    return mrc ? skv_mdb_error(mrc, "evict") : SKV_OK;
}

static int evict_full(seqkv *db, void *ctx)
{
    (void)db;
    evict_txn *et = ctx;
    if (et->batch == 1)
        return skv_error(SKV_ERR_MAP_FULL, "LMDB map full at its limit; nothing can be freed");
    et->batch = 1;
    return SKV_OK;
}

/* Evict least-recently-used records that nothing depends on until `need`
 * bytes are free under the limit (tenant 0: the store's budget, else the
 * tenant's). Records marked `evicting` beforehand are protected. */
int skv_store_evict(seqkv *db, uint64_t tenant, uint64_t used, uint64_t limit, uint64_t need,
                 int *count)
{
    victim *v = NULL;
    size_t nv = 0, cap = 0;
    uint64_t freed = 0;
    int rc = SKV_OK;
    while (used - freed + need > limit) {
        pick_ctx pc = {db, tenant, NULL, NULL, NULL};
        for (size_t i = 0; i < db->nns; i++) {
            if (tenant && db->ns[i].tenant != tenant)
                continue;
            pc.cur = &db->ns[i];
            skv_irec_foreach(db->ns[i].trie, pick_one, &pc);
        }
        if (!pc.best)
            break;
        if (nv == cap) {
            cap = cap ? cap * 2 : 16;
            victim *nvv = skv_realloc(v, cap * sizeof *v);
            if (!nvv) {
                rc = skv_error(SKV_ERR_NOMEM, "eviction list");
                break;
            }
            v = nvv;
        }
        v[nv].r = pc.best;
        v[nv++].e = pc.best_ns;
        pc.best->evicting = 1;
        skv_store_deps(pc.best_ns, pc.best, -1);
        freed += pc.best->bytes;
    }
    if (!rc && used - freed + need > limit)
        rc = skv_error(SKV_ERR_TOO_LARGE,
                       "%llu bytes do not fit in the budget of %llu (everything evictable is gone)",
                       (unsigned long long)need, (unsigned long long)limit);
    /* hidden from readers before the deletes commit: one that matched a
     * victim afterwards would find its record missing */
    show_victims(db, v, rc ? 0 : nv, 1);
    /* deleting needs a few fresh pages too (copy-on-write): at the map's
     * limit, one record per transaction */
    evict_txn et = {v, 0, nv, nv};
    while (!rc && et.done < nv) {
        rc = skv_store_write(db, "evict", evict_body, evict_full, &et, 0);
        if (!rc)
            et.done = et.done + et.batch < nv ? et.done + et.batch : nv;
    }
    const size_t done = et.done;
    if (rc && done) {
        /* what was deleted is gone: keep the index true to it, and give
         * the rest back */
        show_victims(db, v + done, nv - done, 0);
        for (size_t i = done; i < nv; i++) {
            v[i].r->evicting = 0;
            skv_store_deps(v[i].e, v[i].r, +1);
        }
        nv = done;
    }
    int keep_rc = rc;
    if (rc && done)
        rc = SKV_OK;
    if (rc) {
        show_victims(db, v, nv, 0);
        for (size_t i = 0; i < nv; i++) {
            v[i].r->evicting = 0;
            skv_store_deps(v[i].e, v[i].r, +1);
        }
    } else if (nv) {
        pthread_rwlock_wrlock(&db->rw);
        for (size_t i = 0; i < nv; i++)
            skv_store_unindex(db, v[i].e, v[i].r, 0);
        db->evictions += nv;
        pthread_rwlock_unlock(&db->rw);
    }
    if (count)
        *count += (int)nv;
    skv_free(v);
    if (keep_rc)
        return keep_rc;
    return rc;
}
