/* The store's side of sealing (seal.h; FORMAT.md "Sealed chunk records"):
 * chunk records sealed under their tenant's data key where they are
 * written (straight into the pages LMDB reserves for them), opened where
 * they are read; calibrations sealed under the shared namespace's key.
 * With sealing off (the no_seal option) records are written and read as
 * they are. */
#include <sodium.h>
#include <string.h>

#include "seal.h"
#include "store_priv.h"

/* A record image parsed, and its tenant's data key (wipe it), to seal it */
static int seal_prep(seqkv *db, const uint8_t *img, size_t len, skv_rec *r, uint8_t dek[32])
{
    int rc = skv_rec_parse_ex(img, len, 0, r);
    return rc ? rc : skv_store_dek(db, r->tenant, dek);
}

int skv_store_rec_seal(seqkv *db, const uint8_t key[32], const uint8_t *img, size_t len,
                       uint8_t **out, size_t *out_len)
{
    *out = NULL;
    skv_rec r;
    uint8_t dek[32];
    int rc = seal_prep(db, img, len, &r, dek);
    if (rc)
        return rc;
    *out_len = skv_rec_sealed_size(&r, len);
    if (!(*out = skv_malloc(*out_len)))
        rc = skv_error(SKV_ERR_NOMEM, "sealed record");
    else /* (on the writer's pool: both callers write) */
        skv_rec_seal_into_pool(key, dek, &r, img, len, *out, db->pool);
    sodium_memzero(dek, sizeof dek);
    return rc;
}

int skv_store_put_sealed(seqkv *db, MDB_txn *txn, const uint8_t key[32], const uint8_t *img,
                         size_t len, unsigned flags, skv_pool *pool, int *mrc)
{
    skv_rec r;
    uint8_t dek[32];
    int rc = seal_prep(db, img, len, &r, dek);
    if (rc)
        return rc;
    MDB_val k = {32, (void *)key}, v = {skv_rec_sealed_size(&r, len), NULL};
    *mrc = mdb_put(txn, db->db_chunk, &k, &v, flags | MDB_RESERVE);
    if (!*mrc)
        skv_rec_seal_into_pool(key, dek, &r, img, len, v.mv_data, pool);
    sodium_memzero(dek, sizeof dek);
    return SKV_OK;
}

int skv_store_rec_read(seqkv *db, const uint8_t key[32], const uint8_t *v, size_t len, skv_pool *pool,
                       uint8_t **owned, const uint8_t **img, size_t *img_len)
{
    *owned = NULL;
    *img = v;
    *img_len = len;
    if (!skv_rec_is_sealed(v, len))
        return SKV_OK; /* a record written with sealing off (no_seal) */
    uint8_t dek[32];
    int rc = skv_store_dek(db, skv_rec_sealed_tenant(v, len), dek);
    if (!rc)
        rc = skv_rec_unseal(key, dek, v, len, pool, owned, img_len);
    sodium_memzero(dek, sizeof dek);
    *img = *owned;
    return rc;
}

int skv_store_rec_head(seqkv *db, const uint8_t key[32], const uint8_t *v, size_t len,
                       uint8_t **owned, skv_rec *r)
{
    *owned = NULL;
    if (!skv_rec_is_sealed(v, len))
        return skv_rec_parse_ex(v, len, 0, r);
    uint8_t dek[32];
    int rc = skv_store_dek(db, skv_rec_sealed_tenant(v, len), dek);
    if (!rc)
        rc = skv_rec_unseal_head(key, dek, v, len, owned, r);
    sodium_memzero(dek, sizeof dek);
    return rc;
}

int skv_store_rec_sealed_raw(const uint8_t *v, size_t len)
{
    const uint8_t *hdr = v + 8 + SKV_SEAL_NONCE; /* the image's header, in the clear */
    return len >= SKV_SEAL_HEAD && skv_rec_is_sealed(v, len) && hdr[6] == SEQKV_RAW &&
           skv_load16_le(hdr + 4) == SKV_REC_VERSION;
}

int skv_store_rec_raw_open(seqkv *db, const uint8_t key[32], const uint8_t *v, size_t len,
                           const skv_rec *r, skv_pool *pool, uint8_t *const *dst)
{
    uint8_t dek[32];
    int rc = skv_store_dek(db, skv_rec_sealed_tenant(v, len), dek);
    if (!rc)
        rc = skv_rec_unseal_raw(key, dek, v, len, r, pool, dst);
    sodium_memzero(dek, sizeof dek);
    return rc;
}

size_t skv_store_rec_bytes(const seqkv *db, size_t len)
{
    return db->o.no_seal ? len : len + SKV_SEAL_OVERHEAD;
}

/* Calibrations are the profile's, learned from every tenant's data: they
 * are sealed under the shared namespace's data key (tenant 1, @shared) */
#define CALIB_TENANT 1

int skv_store_calib_seal(seqkv *db, const uint8_t id[16], const uint8_t *img, size_t len,
                         uint8_t **out, size_t *out_len)
{
    *out = NULL;
    *out_len = len;
    if (db->o.no_seal)
        return SKV_OK;
    uint8_t dek[32];
    int rc = skv_store_dek(db, CALIB_TENANT, dek);
    if (rc)
        return rc;
    *out_len = skv_sv_size(len);
    if (!(*out = skv_malloc(*out_len)))
        rc = skv_error(SKV_ERR_NOMEM, "sealed calibration");
    else
        skv_sv_seal(dek, SKV_SV_CALIB, 0, len, id, 16, img, len, *out);
    sodium_memzero(dek, sizeof dek);
    return rc;
}

int skv_store_calib_read(seqkv *db, const uint8_t id[16], const uint8_t *v, size_t len,
                         uint8_t **owned, const uint8_t **img, size_t *img_len)
{
    *owned = NULL;
    *img = v;
    *img_len = len;
    if (!skv_sv_is_sealed(v, len))
        return SKV_OK;
    uint8_t dek[32];
    int rc = skv_store_dek(db, CALIB_TENANT, dek);
    if (!rc)
        rc = skv_sv_open(dek, id, 16, v, len, owned, img_len);
    sodium_memzero(dek, sizeof dek);
    *img = *owned;
    return rc;
}
