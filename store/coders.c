/* A cache of calibrations and predictive-delta coders, keyed by
 * (calibration id, level). A coder codes one sequence at a time, so a
 * busy one is never handed out twice; concurrent callers get another. */
#include <string.h>

#include "store_priv.h"

static int load_calib(seqkv *db, MDB_txn *txn, const uint8_t id[16], skv_calib **out)
{
    MDB_val k = {16, (void *)id}, v;
    int mrc = mdb_get(txn, db->db_calib, &k, &v);
    if (mrc == MDB_NOTFOUND)
        return skv_error(SKV_ERR_CORRUPT, "a chunk names a calibration the store does not hold");
    if (mrc)
        return skv_mdb_error(mrc, "calibration");
    /* (sealed ones open into a buffer of their own) */
    uint8_t *owned;
    const uint8_t *img;
    size_t len;
    int rc = skv_store_calib_read(db, id, v.mv_data, v.mv_size, &owned, &img, &len);
    if (rc)
        return rc;
    /* the parsed calibration borrows its buffer: keep a private copy */
    rc = skv_calib_parse(img, len, out);
    skv_free(owned);
    if (!rc && memcmp(skv_calib_id(*out), id, 16) != 0) {
        skv_calib_free(*out);
        *out = NULL;
        rc = skv_error(SKV_ERR_CORRUPT, "calibration stored under the wrong id");
    }
    return rc;
}

/* A pool runs one region at a time, so only the writer (one thread at a
 * time, under wlock) gets coders that use the store's pool, and only the
 * get that took the read pool coders that use it; the other readers get
 * single-threaded ones and run side by side. */
skv_pool *skv_store_read_pool_take(seqkv *db)
{
    return db->rpool && pthread_mutex_trylock(&db->rpool_mu) == 0 ? db->rpool : NULL;
}

void skv_store_read_pool_give(seqkv *db, skv_pool *taken)
{
    if (taken)
        pthread_mutex_unlock(&db->rpool_mu);
}

int skv_store_coder(seqkv *db, MDB_txn *txn, prof_ent *pe, const uint8_t calib_id[16], int level,
                    const skv_role *role, coder_ent **out)
{
    const int pooled = role->writer ? (db->pool ? 1 : 0) : role->rpool ? 2 : 0;
    *out = NULL;
    if (!seqkv_level_predictive((seqkv_level)level))
        return skv_error(SKV_ERR_CORRUPT, "no coder for level %d", level);
    skv_model *model = NULL;
    int rc;
    if (level >= SEQKV_SPEC && (rc = skv_store_profile_model(db, pe, &model)))
        return rc;
    pthread_mutex_lock(&db->clock);
    skv_calib *cal = NULL;
    for (size_t i = 0; i < db->ncoders; i++) {
        coder_ent *c = &db->coders[i];
        if (memcmp(c->calib_id, calib_id, 16) != 0)
            continue;
        cal = c->cal;
        if (c->level == level && c->pooled == pooled && !c->busy) {
            c->busy = 1;
            pthread_mutex_unlock(&db->clock);
            *out = c;
            return SKV_OK;
        }
    }
    int owns = 0;
    rc = SKV_OK;
    if (!cal) {
        rc = load_calib(db, txn, calib_id, &cal);
        owns = rc == 0;
    }
    skv_delta *d = NULL;
    if (!rc)
        rc = skv_delta_create(cal, (seqkv_level)level, model, pooled == 1 ? db->pool : pooled == 2 ? db->rpool : NULL, &d);
    if (!rc) /* records keep bytes; no ideal code length is read here */
        skv_delta_set_ideal(d, 0);
    if (!rc && db->ncoders == db->coders_cap) {
        /* entries are referenced by pointer while busy: never move them */
        rc = skv_error(SKV_ERR_TOO_LARGE, "too many concurrent coders");
    }
    if (rc) {
        skv_delta_free(d);
        if (owns)
            skv_calib_free(cal);
        pthread_mutex_unlock(&db->clock);
        return rc;
    }
    coder_ent *c = &db->coders[db->ncoders++];
    memcpy(c->calib_id, calib_id, 16);
    c->level = level;
    c->pooled = pooled;
    c->cal = cal;
    c->owns_cal = owns;
    c->d = d;
    c->busy = 1;
    pthread_mutex_unlock(&db->clock);
    *out = c;
    return SKV_OK;
}

void skv_store_coder_release(seqkv *db, coder_ent *c)
{
    pthread_mutex_lock(&db->clock);
    c->busy = 0;
    pthread_mutex_unlock(&db->clock);
}

void skv_store_coders_free(seqkv *db)
{
    for (size_t i = 0; i < db->ncoders; i++)
        skv_delta_free(db->coders[i].d);
    for (size_t i = 0; i < db->ncoders; i++)
        if (db->coders[i].owns_cal)
            skv_calib_free(db->coders[i].cal);
    skv_free(db->coders);
}
