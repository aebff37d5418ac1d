/* Tenants' keys: each tenant's data key and hash secret, random, stored
 * only wrapped by the master key (table `tkeys`, seal.c's skv_tkeys_wrap),
 * held in locked memory (sodium_malloc: mlocked, guarded, wiped when
 * freed). A tenant's keys are made with the tenant (a new store's
 * @shared: at its first open); a store whose tenant has none is damaged.
 * Sealing itself: seal.c (the primitives), seal_store.c (the store's
 * records and calibrations). */
#include <sodium.h>
#include <string.h>

#include "seal.h"
#include "store_priv.h"

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
    int found = 0;
    pthread_mutex_lock(&db->kmu);
    for (size_t i = 0; i < db->nten && !found; i++)
        if (db->ten[i].id == tid && db->ten[i].keys) {
            memcpy(out, db->ten[i].keys + at, 32);
            found = 1;
        }
    pthread_mutex_unlock(&db->kmu);
    return found ? SKV_OK
                 : skv_error(SKV_ERR_CORRUPT, "tenant %llu has no keys", (unsigned long long)tid);
}
