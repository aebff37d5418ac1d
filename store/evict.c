/* Eviction: least-recently-used records that nothing depends on. */
#include <string.h>

#include "store_priv.h"

typedef struct {
    seqkv *db;
    uint64_t tenant; /* 0: any */
    skv_trie_rec *best;
    ns_ent *best_ns;
    ns_ent *cur;
} pick_ctx;

static void pick_one(void *vctx, skv_trie_rec *r)
{
    pick_ctx *c = vctx;
    if (r->deps || r->evicting || r->hidden)
        return;
    if (!c->best || r->tick < c->best->tick)
        c->best = r, c->best_ns = c->cur;
}

typedef struct {
    skv_trie_rec *r;
    ns_ent *e;
} victim;

/* Victims hidden from readers (hide) or shown again */
static void show_victims(seqkv *db, victim *v, size_t n, int hide)
{
    if (n == 0)
        return;
    pthread_rwlock_wrlock(&db->rw);
    for (size_t i = 0; i < n; i++)
        v[i].r->hidden = (uint8_t)hide;
    pthread_rwlock_unlock(&db->rw);
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
            skv_trie_foreach(db->ns[i].trie, pick_one, &pc);
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
    /* deleting needs a few fresh pages too (copy-on-write): on
     * MDB_MAP_FULL grow the map, or delete one record per transaction */
    size_t done = 0, batch = nv;
    for (int attempt = 0; !rc && done < nv && attempt < 64;) {
        size_t end = done + batch < nv ? done + batch : nv;
        MDB_txn *txn = NULL;
        int mrc = mdb_txn_begin(db->env, NULL, 0, &txn);
        for (size_t i = done; !mrc && i < end; i++)
            mrc = skv_store_del_rec(db, txn, v[i].r->key);
        if (!mrc) {
            uint8_t b8[8];
            MDB_val mk = {9, "evictions"}, mv = {8, b8};
            skv_store64_le(b8, db->evictions + end);
            mrc = mdb_put(txn, db->db_meta, &mk, &mv, 0);
        }
        if (!mrc)
            mrc = mdb_txn_commit(txn);
        else if (txn)
            mdb_txn_abort(txn);
        if (!mrc) {
            done = end;
            continue;
        }
        attempt++;
        if (mrc != MDB_MAP_FULL)
            rc = skv_mdb_error(mrc, "evict");
        else if (skv_store_grow(db) != SKV_OK) {
            if (batch == 1)
                rc = skv_error(SKV_ERR_TOO_LARGE, "LMDB map full at its limit; nothing can be freed");
            batch = 1;
        }
    }
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
