/* The blob namespace's reads: GET, STAT, EXISTS, SCAN and the per-tenant
 * counts; a read transaction each, no lock past the tenant's id. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>
#include <time.h>

#include "blob.h"
#include "blob_int.h"
#include "seal.h"
#include "seqkv.h"


/* ---- reads ------------------------------------------------------------- */

/* Value e (image v) into the buffer fn gives: from the hot tier, else
 * decoded (and offered to the tier when it was coded) */
static int get_value(seqkv *db, uint64_t tid, const blob_ent *e, const MDB_val *v, seqkv_blob_fn fn,
                     void *ctx, size_t i)
{
    uint8_t hk[32];
    skvb_hot_key(tid, e->cid, hk);
    hot_chunk *h = db->hot ? skv_hot_get(db->hot, hk) : NULL;
    if (h && h->bytes != e->len) { /* (cannot be: a content id names one value) */
        skv_hot_unref(h);
        h = NULL;
    }
    uint8_t *dst = fn(ctx, i, 1, e->len);
    if (!dst) {
        skv_hot_unref(h);
        return skv_error(SKV_ERR_NOMEM, "reply of %llu bytes", (unsigned long long)e->len);
    }
    if (h) {
        memcpy(dst, h->kv, e->len);
        skv_hot_unref(h);
        return SKV_OK;
    }
    uint8_t vk[VKEY];
    skvb_val_key(tid, e->cid, vk);
    int rc = skvb_val_decode(db, vk, v, dst, e->len);
    if (!rc && db->hot && skvb_enc_of(v) != SKV_BLOB_ENC_RAW &&
        (h = skv_hot_new_bytes(hk, e->len))) {
        memcpy(h->kv, dst, e->len);
        skv_hot_put(db->hot, h);
        skv_hot_unref(h);
    }
    return rc;
}

/* The n keys' sizes checked, then the tenant's blob keys and a read
 * transaction; *txn NULL (and 0) when the tenant does not exist */
int skvb_begin(seqkv *db, const char *tenant, size_t n, const uint8_t *const *keys,
               const size_t *lens, int write, bkeys *bk, MDB_txn **txn)
{
    *txn = NULL;
    for (size_t i = 0; i < n; i++) {
        int rc = skvb_key_ok(keys[i], lens[i]);
        if (rc)
            return rc;
    }
    uint64_t tid = skvb_tenant_id(db, tenant);
    if (!tid)
        return SKV_OK;
    if (write && db->o.read_only)
        return skv_error(SKV_ERR_ARG, "store opened read-only");
    skvb_keys(db, tid, bk);
    if (write)
        return SKV_OK; /* (the caller's transaction comes under the writer lock) */
    int mrc = mdb_txn_begin(db->env, NULL, MDB_RDONLY, txn);
    if (mrc) {
        *txn = NULL;
        return skv_mdb_error(mrc, "begin read transaction");
    }
    return SKV_OK;
}

int seqkv_blob_get(seqkv *db, const char *tenant, size_t n, const uint8_t *const *keys,
                   const size_t *key_lens, seqkv_blob_fn fn, void *ctx)
{
    bkeys bk;
    MDB_txn *txn;
    int rc = skvb_begin(db, tenant, n, keys, key_lens, 0, &bk, &txn), mrc;
    if (rc || !txn) {
        for (size_t i = 0; !rc && i < n; i++)
            fn(ctx, i, 0, 0);
        return rc;
    }
    const int64_t now = skv_now_ms();
    for (size_t i = 0; i < n && !rc; i++) {
        blob_ent e;
        int found;
        if ((rc = skvb_live(db, txn, &bk, keys[i], key_lens[i], now, &e, &found)))
            break;
        uint8_t vk[VKEY];
        skvb_val_key(bk.tid, e.cid, vk);
        MDB_val k = {VKEY, vk}, v;
        if (found && (mrc = mdb_get(txn, db->db_bval, &k, &v))) {
            rc = mrc == MDB_NOTFOUND ? skv_error(SKV_ERR_CORRUPT, "a blob's value is missing")
                                     : skv_mdb_error(mrc, "blob value");
            break;
        }
        if (!found) {
            fn(ctx, i, 0, 0);
            continue;
        }
        rc = get_value(db, bk.tid, &e, &v, fn, ctx, i);
    }
    mdb_txn_abort(txn);
    return rc;
}

int seqkv_blob_get_view(seqkv *db, const char *tenant, const uint8_t *key, size_t key_len,
                        size_t max_cold, seqkv_view **out, int *found)
{
    *out = NULL;
    *found = 0;
    bkeys bk;
    MDB_txn *txn;
    int rc = skvb_begin(db, tenant, 1, &key, &key_len, 0, &bk, &txn), mrc;
    if (rc || !txn)
        return rc;
    blob_ent e;
    rc = skvb_live(db, txn, &bk, key, key_len, skv_now_ms(), &e, found);
    if (rc || !*found || e.len == 0) {
        mdb_txn_abort(txn);
        return rc;
    }
    uint8_t hk[32], vk[VKEY];
    skvb_hot_key(bk.tid, e.cid, hk);
    skvb_val_key(bk.tid, e.cid, vk);
    MDB_val k = {VKEY, vk}, v;
    hot_chunk *h = NULL;
    if (db->hot && (h = skv_hot_get(db->hot, hk)) && h->bytes != e.len) {
        skv_hot_unref(h); /* (cannot be: a content id names one value) */
        h = NULL;
    }
    if (!h && e.len > max_cold) {
        mdb_txn_abort(txn);
        return SKV_OK;
    }
    if (!h) {
        if ((mrc = mdb_get(txn, db->db_bval, &k, &v)))
            rc = mrc == MDB_NOTFOUND ? skv_error(SKV_ERR_CORRUPT, "a blob's value is missing")
                                     : skv_mdb_error(mrc, "blob value");
        else if (!(h = skv_hot_new_bytes(hk, e.len)))
            rc = skv_error(SKV_ERR_NOMEM, "value of %llu bytes", (unsigned long long)e.len);
        else if (!(rc = skvb_val_decode(db, vk, &v, h->kv, e.len)) && db->hot &&
                 skvb_enc_of(&v) != SKV_BLOB_ENC_RAW)
            skv_hot_put(db->hot, h);
    }
    mdb_txn_abort(txn);
    if (rc) {
        skv_hot_unref(h);
        return rc;
    }
    if (!(*out = skv_view_of_chunk(h, e.len)))
        return skv_error(SKV_ERR_NOMEM, "view");
    return SKV_OK;
}

int seqkv_blob_stat(seqkv *db, const char *tenant, const uint8_t *key, size_t key_len,
                    seqkv_blob_info *out)
{
    memset(out, 0, sizeof *out);
    bkeys bk;
    MDB_txn *txn;
    int rc = skvb_begin(db, tenant, 1, &key, &key_len, 0, &bk, &txn);
    if (rc || !txn)
        return rc;
    blob_ent e;
    rc = skvb_live(db, txn, &bk, key, key_len, skv_now_ms(), &e, &out->found);
    mdb_txn_abort(txn);
    if (!rc && out->found) {
        out->len = e.len;
        out->expire_at = e.expire_at;
    }
    return rc;
}

int seqkv_blob_exists(seqkv *db, const char *tenant, size_t n, const uint8_t *const *keys,
                      const size_t *key_lens, size_t *count)
{
    *count = 0;
    bkeys bk;
    MDB_txn *txn;
    int rc = skvb_begin(db, tenant, n, keys, key_lens, 0, &bk, &txn);
    if (rc || !txn)
        return rc;
    const int64_t now = skv_now_ms();
    for (size_t i = 0; i < n && !rc; i++) {
        blob_ent e;
        int found;
        rc = skvb_live(db, txn, &bk, keys[i], key_lens[i], now, &e, &found);
        *count += !rc && found;
    }
    mdb_txn_abort(txn);
    return rc;
}

int seqkv_blob_scan(seqkv *db, const char *tenant, uint64_t cursor, size_t count,
                    seqkv_blob_key_fn fn, void *ctx, uint64_t *next)
{
    *next = 0;
    uint64_t tid = skvb_tenant_id(db, tenant);
    if (!tid)
        return SKV_OK;
    MDB_txn *txn;
    MDB_cursor *cur;
    int mrc = mdb_txn_begin(db->env, NULL, MDB_RDONLY, &txn);
    if (mrc)
        return skv_mdb_error(mrc, "begin read transaction");
    if ((mrc = mdb_cursor_open(txn, db->db_blob, &cur))) {
        mdb_txn_abort(txn);
        return skv_mdb_error(mrc, "blob cursor");
    }
    uint8_t kb[KPFX];
    skv_store64_be(kb, tid);
    skv_store64_be(kb + 8, cursor);
    MDB_val k = {KPFX, kb}, v;
    const int64_t now = skv_now_ms();
    size_t seen = 0;
    uint64_t last = 0;
    int rc = SKV_OK;
    mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    while (!mrc && !rc) {
        const uint8_t *kp = k.mv_data;
        if (k.mv_size <= KPFX || skv_load64_be(kp) != tid)
            break;
        uint64_t h = skv_load64_be(kp + 8);
        /* a batch ends between hashes, never inside a run of one hash */
        if (seen >= (count ? count : 10) && h != last) {
            *next = h;
            break;
        }
        last = h;
        seen++;
        blob_ent e;
        if (!skvb_ent_unpack(&v, &e) && !skvb_expired(&e, now))
            rc = fn(ctx, kp + KPFX, k.mv_size - KPFX);
        seqkv_error_clear();
        mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
    }
    mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    if (mrc && mrc != MDB_NOTFOUND)
        return skv_mdb_error(mrc, "blob scan");
    return rc;
}

int seqkv_blob_stat_all(seqkv *db, const char *tenant, seqkv_blob_stats *out)
{
    memset(out, 0, sizeof *out);
    pthread_rwlock_rdlock(&db->rw);
    for (size_t i = 0; i < db->nten; i++) {
        const tenant_ent *t = &db->ten[i];
        if (tenant && strcmp(t->name, tenant) != 0)
            continue;
        out->keys += t->bkeys;
        out->values += t->bvalues;
        out->raw_bytes += t->braw;
        out->value_bytes += t->bvbytes;
        out->stored_bytes += t->bstored;
        out->kv_values += t->bkv;
    }
    out->evicted = db->blob_evicted;
    out->expired = db->blob_expired;
    pthread_rwlock_unlock(&db->rw);
    return SKV_OK;
}
