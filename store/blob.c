/* The blob namespace (seqkv.h; FORMAT.md, "Blobs"): a tenant's named
 * values in three LMDB tables --
 *   blobs:     tenant u64 BE | name hash u64 BE | name  ->  entry (blob_ent)
 *   blobvals:  tenant u64 BE | content id (16)          ->  stored image (blob_code.c)
 *   blobrefs:  the same key                             ->  u64 LE: entries naming it
 * The name hash (SipHash under the tenant's blob key) orders a tenant's
 * names for SCAN; the content id (XXH3-128 seeded by the tenant's blob
 * key) deduplicates values within a tenant only, so no tenant learns
 * whether another stored a value. Writes hold the writer lock, one write
 * transaction a call; reads take a read transaction and no lock past the
 * tenant's id. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>
#include <time.h>

#include "blob.h"
#include "blob_int.h"
#include "seal.h"
#include "seqkv.h"

void skvb_keys(seqkv *db, uint64_t tid, bkeys *k)
{
    uint8_t sec[32], out[24];
    if (skv_store_hsec((seqkv *)db, tid, sec))
        memset(sec, 0, sizeof sec); /* (cannot be: a tenant's keys load with it) */
    crypto_generichash(out, sizeof out, (const uint8_t *)"seqkv blob keys", 15, sec, sizeof sec);
    k->tid = tid;
    memcpy(k->sip, out, 16);
    k->seed = skv_load64_le(out + 16);
    sodium_memzero(sec, sizeof sec);
    sodium_memzero(out, sizeof out);
}

static uint64_t name_hash(const bkeys *k, const uint8_t *name, size_t len)
{
    uint8_t h[8];
    crypto_shorthash(h, name, len, k->sip);
    uint64_t v = skv_load64_be(h);
    return v ? v : 1; /* 0 is the cursor of a new scan */
}

/* blobs' key of name into b (KPFX + len bytes) */
size_t skvb_ent_key(const bkeys *k, const uint8_t *name, size_t len, uint8_t *b)
{
    skv_store64_be(b, k->tid);
    skv_store64_be(b + 8, name_hash(k, name, len));
    memcpy(b + KPFX, name, len);
    return KPFX + len;
}

void skvb_hot_key(uint64_t tid, const uint8_t cid[16], uint8_t b[32])
{
    skvb_val_key(tid, cid, b);
    memcpy(b + VKEY, "SKVBLOB", 8); /* (record keys are keyed hashes: no clash) */
}

void skvb_val_key(uint64_t tid, const uint8_t cid[16], uint8_t b[VKEY])
{
    skv_store64_be(b, tid);
    memcpy(b + 8, cid, 16);
}

void skvb_ent_pack(const blob_ent *e, uint8_t b[ENT_SIZE])
{
    memset(b, 0, ENT_SIZE);
    skv_store32_le(b, ENT_MAGIC);
    b[4] = 1;
    skv_store64_le(b + 8, (uint64_t)e->expire_at);
    skv_store64_le(b + 16, (uint64_t)e->set_at);
    skv_store64_le(b + 24, e->len);
    memcpy(b + 32, e->cid, 16);
}

int skvb_ent_unpack(const MDB_val *v, blob_ent *e)
{
    const uint8_t *b = v->mv_data;
    if (v->mv_size != ENT_SIZE || skv_load32_le(b) != ENT_MAGIC)
        return skv_error(SKV_ERR_CORRUPT, "damaged blob entry");
    if (b[4] > 1)
        return skv_error(SKV_ERR_VERSION, "blob entry of a newer version (%u)", b[4]);
    e->expire_at = (int64_t)skv_load64_le(b + 8);
    e->set_at = (int64_t)skv_load64_le(b + 16);
    e->len = skv_load64_le(b + 24);
    memcpy(e->cid, b + 32, 16);
    return SKV_OK;
}

int skvb_expired(const blob_ent *e, int64_t now)
{
    return e->expire_at > 0 && e->expire_at <= now;
}

int skvb_key_ok(const uint8_t *key, size_t len)
{
    if (!key || len == 0 || len > SEQKV_BLOB_KEY_MAX)
        return skv_error(SKV_ERR_ARG, "a key is 1 to %d bytes (this one: %zu)", SEQKV_BLOB_KEY_MAX,
                         len);
    return SKV_OK;
}

/* The tenant's id for a read (0 when it does not exist) */
uint64_t skvb_tenant_id(seqkv *db, const char *tenant)
{
    tenant_ent *te;
    uint64_t id = 0;
    if (!db->has_blobs)
        return 0; /* (a read-only store from before blobs: its tables are not there) */
    pthread_rwlock_rdlock(&db->rw);
    if (!skv_store_tenant(db, tenant, 0, &te))
        id = te->id;
    pthread_rwlock_unlock(&db->rw);
    seqkv_error_clear();
    return id;
}

tenant_ent *skvb_tenant(seqkv *db, uint64_t id)
{
    for (size_t i = 0; i < db->nten; i++)
        if (db->ten[i].id == id)
            return &db->ten[i];
    return NULL;
}

/* ---- changes inside one write transaction ------------------------------- */

void skvb_delta_apply(seqkv *db, uint64_t tid, const bdelta *d)
{
    pthread_rwlock_wrlock(&db->rw);
    tenant_ent *te = skvb_tenant(db, tid);
    if (te) {
        te->bkeys += (uint64_t)d->keys;
        te->bvalues += (uint64_t)d->values;
        te->braw += (uint64_t)d->raw;
        te->bvbytes += (uint64_t)d->vbytes;
        te->bstored += (uint64_t)d->stored;
        te->bkv += (uint64_t)d->kv;
        te->used += (uint64_t)d->stored;
    }
    db->stored += (uint64_t)d->stored;
    db->blob_evicted += d->evicted;
    db->blob_expired += d->expired;
    pthread_rwlock_unlock(&db->rw);
}

int skvb_val_info(const MDB_val *v, skv_blob_hdr *h)
{
    int kind;
    uint16_t info;
    uint64_t extra;
    memset(h, 0, sizeof *h);
    if (!skv_sv_is_sealed(v->mv_data, v->mv_size))
        return skv_blob_parse(v->mv_data, v->mv_size, h);
    int rc = skv_sv_fields(v->mv_data, v->mv_size, &kind, &info, &extra);
    if (!rc && kind != SKV_SV_BLOB)
        rc = skv_error(SKV_ERR_CORRUPT, "a blob value sealed as something else");
    h->enc = info;
    h->raw_len = extra;
    return rc;
}

int skvb_enc_of(const MDB_val *v)
{
    skv_blob_hdr h;
    return skvb_val_info(v, &h) ? -1 : h.enc;
}

int skvb_val_put(seqkv *db, MDB_txn *txn, const uint8_t vk[VKEY], const uint8_t *img, size_t len,
                 size_t *stored)
{
    MDB_val k = {VKEY, (void *)vk}, v = {len, (void *)img};
    *stored = len;
    int mrc;
    if (db->o.no_seal) {
        mrc = mdb_put(txn, db->db_bval, &k, &v, 0);
        return mrc ? skv_mdb_error(mrc, "blob value") : SKV_OK;
    }
    uint8_t dek[32];
    int rc = skv_store_dek(db, skv_load64_be(vk), dek);
    if (rc)
        return rc;
    /* sealed straight into LMDB's page, bound to the tenant and content id */
    v.mv_size = *stored = skv_sv_size(len);
    if (!(mrc = mdb_put(txn, db->db_bval, &k, &v, MDB_RESERVE)))
        skv_sv_seal(dek, SKV_SV_BLOB, img[5], skv_load64_le(img + 8), vk, VKEY, img, len,
                    v.mv_data);
    sodium_memzero(dek, sizeof dek);
    return mrc ? skv_mdb_error(mrc, "blob value") : SKV_OK;
}

int skvb_val_read(seqkv *db, const uint8_t vk[VKEY], const MDB_val *v, uint8_t **owned,
                  const uint8_t **img, size_t *len)
{
    *owned = NULL;
    *img = v->mv_data;
    *len = v->mv_size;
    if (!skv_sv_is_sealed(v->mv_data, v->mv_size))
        return SKV_OK;
    uint8_t dek[32];
    int rc = skv_store_dek(db, skv_load64_be(vk), dek);
    if (!rc)
        rc = skv_sv_open(dek, vk, VKEY, v->mv_data, v->mv_size, owned, len);
    sodium_memzero(dek, sizeof dek);
    *img = *owned;
    return rc;
}

int skvb_val_decode(seqkv *db, const uint8_t vk[VKEY], const MDB_val *v, uint8_t *out,
                    size_t out_len)
{
    uint8_t *owned;
    const uint8_t *img;
    size_t len;
    int rc = skvb_val_read(db, vk, v, &owned, &img, &len);
    if (!rc)
        rc = skv_blob_decode(img, len, out, out_len);
    skv_free(owned);
    return rc;
}

/* One entry fewer names value cid: its image goes with the last one */
int skvb_unref(seqkv *db, MDB_txn *txn, uint64_t tid, const uint8_t cid[16], bdelta *d)
{
    uint8_t kb[VKEY];
    skvb_val_key(tid, cid, kb);
    MDB_val k = {VKEY, kb}, rv, iv;
    int mrc = mdb_get(txn, db->db_bref, &k, &rv);
    if (mrc)
        return mrc == MDB_NOTFOUND ? SKV_OK : skv_mdb_error(mrc, "blob references");
    uint64_t refs = rv.mv_size == 8 ? skv_load64_le(rv.mv_data) : 1;
    if (refs > 1) {
        uint8_t b[8];
        skv_store64_le(b, refs - 1);
        MDB_val nv = {8, b};
        mrc = mdb_put(txn, db->db_bref, &k, &nv, 0);
        return mrc ? skv_mdb_error(mrc, "blob references") : SKV_OK;
    }
    if (!mdb_get(txn, db->db_bval, &k, &iv)) {
        skv_blob_hdr h;
        d->values--;
        d->stored -= (int64_t)iv.mv_size;
        if (!skvb_val_info(&iv, &h)) {
            d->vbytes -= (int64_t)h.raw_len;
            d->kv -= h.enc == SKV_BLOB_ENC_KV;
        }
    }
    if ((mrc = mdb_del(txn, db->db_bref, &k, NULL)) && mrc != MDB_NOTFOUND)
        return skv_mdb_error(mrc, "blob references");
    if (db->hot) {
        uint8_t hk[32];
        skvb_hot_key(tid, cid, hk);
        skv_hot_drop(db->hot, hk);
    }
    if ((mrc = mdb_del(txn, db->db_bval, &k, NULL)) && mrc != MDB_NOTFOUND)
        return skv_mdb_error(mrc, "blob values");
    return SKV_OK;
}

/* Delete the entry at key k (its value e) */
int skvb_ent_del(seqkv *db, MDB_txn *txn, uint64_t tid, MDB_val *k, const blob_ent *e, bdelta *d)
{
    int mrc = mdb_del(txn, db->db_blob, k, NULL);
    if (mrc)
        return skv_mdb_error(mrc, "delete blob");
    d->keys--;
    d->raw -= (int64_t)e->len;
    return skvb_unref(db, txn, tid, e->cid, d);
}

typedef struct {
    txn_fn fn;
    void *ctx;
    bdelta d;
} blob_txn;

static int blob_body(seqkv *db, MDB_txn *txn, void *v)
{
    blob_txn *bt = v;
    memset(&bt->d, 0, sizeof bt->d);
    return bt->fn(db, txn, bt->ctx, &bt->d);
}

int skvb_txn(seqkv *db, uint64_t tid, txn_fn fn, void *ctx)
{
    blob_txn bt = {fn, ctx, {0}};
    int rc = skv_store_write(db, "blobs", blob_body, NULL, &bt, 0);
    if (!rc)
        skvb_delta_apply(db, bt.d.tid ? bt.d.tid : tid, &bt.d);
    return rc;
}

/* The live entry of key (found 0: none, or expired at now) */
int skvb_live(seqkv *db, MDB_txn *txn, const bkeys *bk, const uint8_t *key, size_t len,
                int64_t now, blob_ent *e, int *found)
{
    uint8_t kb[KPFX + SEQKV_BLOB_KEY_MAX];
    MDB_val k = {skvb_ent_key(bk, key, len, kb), kb}, v;
    *found = 0;
    int mrc = mdb_get(txn, db->db_blob, &k, &v);
    if (mrc == MDB_NOTFOUND)
        return SKV_OK;
    if (mrc)
        return skv_mdb_error(mrc, "blob entry");
    int rc = skvb_ent_unpack(&v, e);
    if (!rc)
        *found = !skvb_expired(e, now);
    return rc;
}
