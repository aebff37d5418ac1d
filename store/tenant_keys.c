/* Tenants' keys and the store's side of sealing (seal.h): each tenant's
 * data key and hash secret, random, stored only wrapped by the master key
 * (table `tkeys`), held in locked memory (sodium_malloc: mlocked, guarded,
 * wiped when freed); and records sealed where they are written, opened
 * where they are read. A tenant's keys are made with the tenant (a new
 * store's @shared: at its first open); a store whose tenant has none is
 * damaged (a store from before sealing, which had none, is refused by its
 * format version before). */
#include <sodium.h>
#include <string.h>

#include "seal.h"
#include "blob_int.h"

int skv_tkeys_alloc(tenant_ent *t)
{
    if (t->keys)
        return SKV_OK;
    t->keys = sodium_malloc(SKV_TKEYS);
    return t->keys ? SKV_OK : skv_error(SKV_ERR_NOMEM, "locked memory for tenant keys");
}

void skv_tkeys_free(tenant_ent *t)
{
    if (t->keys)
        sodium_free(t->keys); /* (wipes) */
    t->keys = NULL;
}

int skv_tkeys_put(seqkv *db, MDB_txn *txn, const tenant_ent *t)
{
    uint8_t k[8], w[SKV_TKEYS_WRAPPED];
    skv_store64_be(k, t->id);
    skv_tkeys_wrap(db->master, t->id, t->keys, w);
    MDB_val kv = {8, k}, v = {sizeof w, w};
    int mrc = mdb_put(txn, db->db_tkeys, &kv, &v, 0);
    return mrc ? skv_mdb_error(mrc, "write tenant keys") : SKV_OK;
}

int skv_tkeys_make(const seqkv *db, tenant_ent *t)
{
    int rc = skv_tkeys_alloc(t);
    if (rc)
        return rc;
    /* the data key random; the hash secret as tenants have always had it,
     * from the master key of the day -- kept wrapped from then on, so a
     * later master key (a rotation) renames nothing, and a store's names
     * stay a function of its key and contents */
    randombytes_buf(t->keys, 32);
    skv_tenant_secret(db->master, t->id, t->keys + 32);
    return SKV_OK;
}

int skv_tkeys_load(seqkv *db, MDB_txn *txn)
{
    /* (a store of the current format has the table from its first open
     * on: without it, this is that open, and @shared the only tenant) */
    int mrc = mdb_dbi_open(txn, "tkeys", 0, &db->db_tkeys);
    const int fresh = mrc == MDB_NOTFOUND && !db->o.read_only;
    if (fresh)
        mrc = mdb_dbi_open(txn, "tkeys", MDB_CREATE, &db->db_tkeys);
    if (mrc)
        return mrc == MDB_NOTFOUND ? skv_error(SKV_ERR_CORRUPT, "the store has no tenant keys")
                                   : skv_mdb_error(mrc, "tkeys");
    for (size_t i = 0; i < db->nten; i++) {
        tenant_ent *t = &db->ten[i];
        int rc = skv_tkeys_alloc(t);
        if (rc)
            return rc;
        uint8_t k[8];
        skv_store64_be(k, t->id);
        MDB_val kv = {8, k}, v;
        if (!(mrc = mdb_get(txn, db->db_tkeys, &kv, &v))) {
            if ((rc = skv_tkeys_unwrap(db->master, t->id, v.mv_data, v.mv_size, t->keys)))
                return rc;
            continue;
        }
        if (mrc != MDB_NOTFOUND)
            return skv_mdb_error(mrc, "tkeys");
        if (!fresh)
            return skv_error(SKV_ERR_CORRUPT, "tenant %s has no keys", t->name);
        /* a new store's @shared */
        if ((rc = skv_tkeys_make(db, t)) || (rc = skv_tkeys_put(db, txn, t)))
            return rc;
    }
    return SKV_OK;
}

static int tenant_key(seqkv *db, uint64_t tid, size_t at, uint8_t out[32]);

int skv_store_dek(seqkv *db, uint64_t tid, uint8_t dek[32])
{
    return tenant_key(db, tid, 0, dek);
}

int skv_store_hsec(seqkv *db, uint64_t tid, uint8_t hsec[32])
{
    return tenant_key(db, tid, 32, hsec);
}

static int tenant_key(seqkv *db, uint64_t tid, size_t at, uint8_t out[32])
{
    int rc = skv_error(SKV_ERR_CORRUPT, "tenant %llu has no keys", (unsigned long long)tid);
    pthread_mutex_lock(&db->kmu);
    for (size_t i = 0; i < db->nten; i++)
        if (db->ten[i].id == tid && db->ten[i].keys) {
            memcpy(out, db->ten[i].keys + at, 32);
            rc = SKV_OK;
            break;
        }
    pthread_mutex_unlock(&db->kmu);
    if (!rc)
        seqkv_error_clear();
    return rc;
}

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
                         size_t len, unsigned flags, int *mrc)
{
    skv_rec r;
    uint8_t dek[32];
    int rc = seal_prep(db, img, len, &r, dek);
    if (rc)
        return rc;
    MDB_val k = {32, (void *)key}, v = {skv_rec_sealed_size(&r, len), NULL};
    *mrc = mdb_put(txn, db->db_chunk, &k, &v, flags | MDB_RESERVE);
    if (!*mrc)
        skv_rec_seal_into_pool(key, dek, &r, img, len, v.mv_data, db->pool);
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
