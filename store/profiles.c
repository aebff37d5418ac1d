/* Profiles and tenants (seqkv.h): their records (FORMAT.md, "Profile
 * records", "Tenant records"), setting and listing profiles, a profile's
 * calibrations, creating tenants and their settings. */
#include <lmdb.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "skv_delta.h"
#include "store_int.h"
#include "seal.h"
#include "store_priv.h"


/* ---- profile and tenant records --------------------------------------------- */

void skv_store_prof_pack(const seqkv_profile *p, uint8_t *b)
{
    memset(b, 0, SKV_PROF_SIZE);
    skv_store32_le(b, SKV_PROF_MAGIC);
    skv_store32_le(b + 4, 1);
    skv_store32_le(b + 8, (uint32_t)p->vocab);
    skv_store32_le(b + 12, (uint32_t)p->auto_calibrate);
    memcpy(b + 16, p->name, strnlen(p->name, SEQKV_NAME_MAX));
    uint8_t *q = b + 80;
    int32_t f[10] = {p->layers, p->kv_heads, p->head_dim, (int32_t)p->dtype,
                     (int32_t)skv_f32_bits(p->rope_theta), p->rope_dim, p->rope_half,
                     p->chunk, (int32_t)p->level, p->has_calib};
    for (int i = 0; i < 10; i++)
        skv_store32_le(q + 4 * i, (uint32_t)f[i]);
    memcpy(b + 120, p->calib_id, 16);
    memcpy(b + 136, p->id, 32);
    memcpy(b + 168, p->model, strnlen(p->model, SEQKV_PATH_MAX));
    skv_lossy_prof_pack(p, b + SKV_PROF_BASE_SIZE);
}

/* Why no profile may be p (what seqkv_profile_set refuses and a reader
 * refuses as damaged), or NULL */
static const char *prof_invalid(const seqkv_profile *p)
{
    if (!p->name[0])
        return "no name";
    if (p->layers <= 0 || p->kv_heads <= 0 || p->head_dim <= 0 || p->layers > 4096 ||
        p->kv_heads > 4096 || p->head_dim > 4096)
        return "layers, kv_heads and head_dim must be 1..4096";
    if (skv_dtype_size(p->dtype) == 0 || p->dtype == SEQKV_DT_I32)
        return "dtype must be bf16, fp16, fp8 or fp32";
    if (p->chunk < 1 || p->chunk > SEQKV_CHUNK_MAX)
        return "chunk must be 1..4096 tokens";
    if ((unsigned)p->level >= SEQKV_LEVELS)
        return "no such level";
    if (p->rope_dim < 0 || p->rope_dim > p->head_dim || (p->rope_dim & 1))
        return "rope_dim must be even and <= head_dim";
    if (!(p->rope_theta > 0) || !isfinite(p->rope_theta))
        return "rope_theta must be positive and finite";
    if ((unsigned)p->rope_half > 1 || (unsigned)p->has_calib > 1)
        return "rope_half and has_calib are 0 or 1";
    return NULL;
}

int skv_store_prof_unpack(const uint8_t *b, size_t len, seqkv_profile *p)
{
    if (len == SKV_PROF_BASE_SIZE && skv_load32_le(b) == SKV_PROF_MAGIC)
        return skv_error(SKV_ERR_VERSION,
                         "profile record of %d bytes (FORMAT 14 or before): this build reads only the "
                         "%d-byte record of FORMAT 15",
                         SKV_PROF_BASE_SIZE, SKV_PROF_SIZE);
    if (len != SKV_PROF_SIZE || skv_load32_le(b) != SKV_PROF_MAGIC)
        return skv_error(SKV_ERR_CORRUPT, "damaged profile record");
    if (skv_load32_le(b + 4) > 1)
        return skv_error(SKV_ERR_VERSION, "profile record of a newer version");
    memset(p, 0, sizeof *p);
    memcpy(p->name, b + 16, SEQKV_NAME_MAX);
    const uint8_t *q = b + 80;
    p->layers = (int)skv_load32_le(q);
    p->kv_heads = (int)skv_load32_le(q + 4);
    p->head_dim = (int)skv_load32_le(q + 8);
    p->dtype = (seqkv_dtype)skv_load32_le(q + 12);
    p->rope_theta = skv_bits_f32(skv_load32_le(q + 16));
    p->rope_dim = (int)skv_load32_le(q + 20);
    p->rope_half = (int)skv_load32_le(q + 24);
    p->chunk = (int)skv_load32_le(q + 28);
    p->level = (seqkv_level)skv_load32_le(q + 32);
    p->has_calib = (int)skv_load32_le(q + 36);
    memcpy(p->calib_id, b + 120, 16);
    memcpy(p->id, b + 136, 32);
    memcpy(p->model, b + 168, SEQKV_PATH_MAX);
    /* (seqkv_profile_set writes the bound it settled on: never 0) */
    p->vocab = (int)skv_load32_le(b + 8);
    if (p->vocab < 1)
        return skv_error(SKV_ERR_CORRUPT, "profile record with impossible fields (vocab %d)", p->vocab);
    /* (0: the default) */
    p->auto_calibrate = (int)skv_load32_le(b + 12);
    if (p->auto_calibrate < -1)
        return skv_error(SKV_ERR_CORRUPT, "profile record with impossible fields");
    /* what seqkv_profile_set lets through, no more: the coders index by
     * these (a RoPE wider than a head would reach past it) */
    const char *bad = prof_invalid(p);
    if (bad)
        return skv_error(SKV_ERR_CORRUPT, "profile record with impossible fields (%s)", bad);
    return skv_lossy_prof_unpack(b + SKV_PROF_BASE_SIZE, p);
}

void skv_store_ten_pack(const tenant_ent *t, uint8_t *b)
{
    memset(b, 0, SKV_TEN_SIZE);
    skv_store32_le(b, SKV_TEN_MAGIC);
    skv_store32_le(b + 4, 1);
    skv_store64_le(b + 8, t->id);
    skv_store32_le(b + 16, (uint32_t)t->read_shared);
    skv_store64_le(b + 24, t->budget);
}


/* ---- profiles ------------------------------------------------------------------ */

typedef struct {
    const char *name;
    const uint8_t *prof;
    const MDB_val *ck, *cv; /* a calibration beside it, or NULL */
} prof_txn;

static int prof_body(seqkv *db, MDB_txn *txn, void *v)
{
    const prof_txn *w = v;
    MDB_val k = {strlen(w->name), (void *)w->name}, pv = {SKV_PROF_SIZE, (void *)w->prof};
    MDB_val cv = w->cv ? *w->cv : (MDB_val){0, NULL};
    int mrc = w->ck ? mdb_put(txn, db->db_calib, (MDB_val *)w->ck, &cv, 0) : 0;
    if (!mrc)
        mrc = mdb_put(txn, db->db_prof, &k, &pv, 0);
    return mrc ? skv_mdb_error(mrc, "write profile") : SKV_OK;
}

int skv_store_profile_write(seqkv *db, const seqkv_profile *p, MDB_val *ck, MDB_val *cv)
{
    uint8_t b[SKV_PROF_SIZE];
    skv_store_prof_pack(p, b);
    prof_txn w = {p->name, b, ck, cv};
    return skv_store_write(db, "write profile", prof_body, NULL, &w, 0);
}

static int write_profile(seqkv *db, const seqkv_profile *p)
{
    return skv_store_profile_write(db, p, NULL, NULL);
}

int skv_store_profile_model(seqkv *db, prof_ent *pe, skv_model **out)
{
    *out = NULL;
    if (!pe->p.model[0])
        return skv_error(SKV_ERR_ARG, "profile %s names no model", pe->p.name);
    pthread_mutex_lock(&db->clock);
    int rc = SKV_OK;
    if (!pe->model && !pe->model_failed) {
        rc = skv_model_load(pe->p.model, &pe->model);
        pe->model_failed = rc != 0;
    } else if (pe->model_failed) {
        rc = skv_error(SKV_ERR_IO, "model %s of profile %s failed to load", pe->p.model, pe->p.name);
    }
    pthread_mutex_unlock(&db->clock);
    *out = pe->model;
    return rc;
}

/* The bytes of a profile the caller's struct holds (its .size; 0: all) */
static int prof_size(const seqkv_profile *p, size_t *out)
{
    *out = p->size ? p->size : sizeof *p;
    if (*out < offsetof(seqkv_profile, name) + SEQKV_NAME_MAX + 1 || *out > sizeof *p)
        return skv_error(SKV_ERR_ARG, "seqkv_profile.size is %zu (this seqkv's is %zu): use "
                                      "SEQKV_PROFILE_INIT", p->size, sizeof *p);
    return SKV_OK;
}

/* p's fields into the caller's struct of size bytes, its size kept */
static void prof_out(const seqkv_profile *p, void *out, size_t size)
{
    memcpy((uint8_t *)out + sizeof(size_t), (const uint8_t *)p + sizeof(size_t),
           size - sizeof(size_t));
}

int seqkv_profile_set(seqkv *db, seqkv_profile *p)
{
    size_t size;
    int rc = prof_size(p, &size);
    if (rc)
        return rc;
    seqkv_profile q = SEQKV_PROFILE_INIT; /* the caller's fields, the rest (an older caller's) zero */
    memset(&q, 0, sizeof q);
    memcpy(&q, p, size);
    q.size = sizeof q;
    if ((rc = skv_store_check_name("profile", q.name, 0)))
        return rc;
    if (db->o.read_only)
        return skv_error(SKV_ERR_ARG, "store opened read-only");
    if ((unsigned)q.level >= SEQKV_LEVELS)
        return skv_error(SKV_ERR_ARG, "bad level %d", (int)q.level);
    if (strnlen(q.model, SEQKV_PATH_MAX + 1) > SEQKV_PATH_MAX)
        return skv_error(SKV_ERR_ARG, "model path too long");
    if (q.model[0]) {
        skv_model *m;
        if ((rc = skv_model_load(q.model, &m)))
            return rc;
        const skv_model_config *c = skv_model_cfg(m);
        int shape_given = q.layers || q.kv_heads || q.head_dim;
        if (!shape_given) {
            q.layers = c->n_layers;
            q.kv_heads = c->n_kv_heads;
            q.head_dim = c->head_dim;
        }
        if (q.rope_theta == 0 && !shape_given) {
            q.rope_theta = c->rope_theta;
            q.rope_dim = c->rope_dim;
            q.rope_half = c->rope_layout == SKV_ROPE_HALF;
        }
        int bad = q.layers != c->n_layers || q.kv_heads != c->n_kv_heads || q.head_dim != c->head_dim;
        const int mv = c->vocab_size;
        skv_model_free(m);
        if (bad)
            return skv_error(SKV_ERR_SHAPE, "model %s does not have the profile's shape", q.model);
        if (q.vocab && q.vocab != mv)
            return skv_error(SKV_ERR_ARG, "vocab %d: the model %s has a vocabulary of %d", q.vocab,
                             q.model, mv);
        q.vocab = mv;
    }
    if (q.auto_calibrate < -1)
        return skv_error(SKV_ERR_ARG, "auto_calibrate must be a token count, 0 (the default, %d) "
                                      "or -1 (never)", SEQKV_AUTO_CALIBRATE_DEFAULT);
    if ((rc = skv_lossy_prof_check(&q)))
        return rc;
    if (q.vocab < 0)
        return skv_error(SKV_ERR_ARG, "vocab must be 1..%d token ids (0: %d)", SEQKV_VOCAB_MAX,
                         SEQKV_VOCAB_DEFAULT);
    if (!q.vocab)
        q.vocab = SEQKV_VOCAB_DEFAULT;
    if (q.layers <= 0 || q.kv_heads <= 0 || q.head_dim <= 0 || q.layers > 4096 ||
        q.kv_heads > 4096 || q.head_dim > 4096)
        return skv_error(SKV_ERR_ARG, "profile %s needs layers, kv_heads and head_dim (or a model)",
                         q.name);
    if (!q.chunk)
        q.chunk = SEQKV_CHUNK_DEFAULT;
    if (q.rope_theta == 0)
        q.rope_theta = 10000.0f;
    if (!q.rope_dim)
        q.rope_dim = q.head_dim;
    q.has_calib = q.has_lossy = 0;
    /* every field the caller sets reads back through the profile table
     * (seqkv.h "Profiles as text": the bounds the server and CLI apply) */
    for (size_t f = 0; f < seqkv_profile_field_count(); f++) {
        char v[SEQKV_PATH_MAX + 2];
        seqkv_profile scratch = q;
        if (seqkv_profile_field_at(f)->flags & SEQKV_FIELD_STORE)
            continue;
        if (seqkv_profile_field_format(&q, f, v, sizeof v) < 0 ||
            seqkv_profile_field_parse(&scratch, f, v))
            return skv_error(SKV_ERR_ARG, "profile %s: %s", q.name, seqkv_error_detail());
    }
    const char *bad = prof_invalid(&q); /* (the record could not be read back) */
    if (bad)
        return skv_error(SKV_ERR_ARG, "profile %s: %s", q.name, bad);
    memset(q.calib_id, 0, 16);
    memset(q.lossy_id, 0, 16);
    skv_profile_id(&q, q.id);
    pthread_mutex_lock(&db->wlock);
    prof_ent *pe = skv_store_profile(db, q.name);
    if (pe) {
        if (memcmp(pe->p.id, q.id, 32) != 0) {
            pthread_mutex_unlock(&db->wlock);
            return skv_error(SKV_ERR_SHAPE,
                             "profile %s exists with another shape, dtype, RoPE or chunk", q.name);
        }
        q.has_calib = pe->p.has_calib;
        memcpy(q.calib_id, pe->p.calib_id, 16);
        q.has_lossy = pe->p.has_lossy;
        memcpy(q.lossy_id, pe->p.lossy_id, 16);
    }
    rc = write_profile(db, &q);
    if (!rc) {
        pthread_rwlock_wrlock(&db->rw);
        if (pe) {
            if (strcmp(pe->p.model, q.model) != 0) {
                skv_model_free(pe->model);
                pe->model = NULL;
                pe->model_failed = 0;
            }
            pe->p = q;
        } else {
            rc = skv_store_add_profile(db, &q);
        }
        pthread_rwlock_unlock(&db->rw);
    }
    pthread_mutex_unlock(&db->wlock);
    if (!rc)
        prof_out(&q, p, size);
    return rc;
}

int skv_store_no_profile(seqkv *db, const char *name)
{
    char list[512] = "";
    size_t used = 0;
    for (size_t i = 0; i < db->nprof && used + 8 < sizeof list; i++) {
        int w = snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", db->prof[i].p.name);
        used += w > 0 ? (size_t)w : 0;
    }
    if (used >= sizeof list)
        snprintf(list + sizeof list - 5, 5, "...");
    if (!db->nprof)
        return skv_error(SKV_ERR_NOT_FOUND, "no profile '%s': the store has none yet (put makes one)",
                         name ? name : "");
    return skv_error(SKV_ERR_NOT_FOUND, "no profile '%s' (the store has %s)", name ? name : "", list);
}

int seqkv_profile_get(seqkv *db, const char *name, seqkv_profile *out)
{
    size_t size;
    int rc = prof_size(out, &size);
    if (rc)
        return rc;
    pthread_rwlock_rdlock(&db->rw);
    prof_ent *pe = name ? skv_store_profile(db, name) : NULL;
    if (pe)
        prof_out(&pe->p, out, size);
    else
        rc = skv_store_no_profile(db, name);
    pthread_rwlock_unlock(&db->rw);
    return rc;
}

static int prof_by_name(const void *a, const void *b)
{
    return strcmp(((const seqkv_profile *)a)->name, ((const seqkv_profile *)b)->name);
}

int seqkv_profile_list(seqkv *db, seqkv_profile *out, size_t cap, size_t *n)
{
    size_t size = sizeof *out;
    int rc = cap ? prof_size(out, &size) : SKV_OK;
    if (rc)
        return rc;
    pthread_rwlock_rdlock(&db->rw);
    *n = db->nprof;
    const size_t k = db->nprof < cap ? db->nprof : cap;
    seqkv_profile *all = k ? skv_malloc(k * sizeof *all) : NULL;
    for (size_t i = 0; all && i < k; i++)
        all[i] = db->prof[i].p;
    pthread_rwlock_unlock(&db->rw);
    if (k && !all)
        return skv_error(SKV_ERR_NOMEM, "profile list");
    if (k > 1)
        qsort(all, k, sizeof *all, prof_by_name);
    for (size_t i = 0; i < k; i++) {
        memcpy((uint8_t *)out + i * size, &size, sizeof size);
        prof_out(&all[i], (uint8_t *)out + i * size, size);
    }
    skv_free(all);
    return SKV_OK;
}

static int put_calib(seqkv *db, prof_ent *pe, const uint8_t id[16], const uint8_t *img, size_t len);

int skv_store_set_calib(seqkv *db, prof_ent *pe, const uint8_t id[16], const uint8_t *img,
                        size_t len)
{
    uint8_t *sealed;
    int rc = skv_store_calib_seal(db, id, img, len, &sealed, &len);
    if (rc)
        return rc;
    rc = put_calib(db, pe, id, sealed ? sealed : img, len);
    skv_free(sealed);
    return rc;
}

static int put_calib(seqkv *db, prof_ent *pe, const uint8_t id[16], const uint8_t *img, size_t len)
{
    seqkv_profile q = pe->p;
    q.has_calib = 1;
    memcpy(q.calib_id, id, 16);
    if (q.level == SEQKV_RAW) /* calibrating means compressing: raw becomes ctx */
        q.level = SEQKV_CTX;
    MDB_val ck = {16, (void *)id}, cv = {len, (void *)img};
    int rc = skv_store_profile_write(db, &q, &ck, &cv);
    if (!rc) {
        /* readers (a GET's profile copy, a lookup by name) hold rw: the
         * caller holds the writer lock only */
        pthread_rwlock_wrlock(&db->rw);
        pe->p = q;
        pthread_rwlock_unlock(&db->rw);
        memset(&pe->drift, 0, sizeof pe->drift); /* measured again under the new one */
    }
    return rc;
}

/* ---- tenants ------------------------------------------------------------------- */

typedef struct {
    const tenant_ent *t;
    int new_id;
} ten_txn;

static int tenant_body(seqkv *db, MDB_txn *txn, void *v)
{
    const ten_txn *w = v;
    uint8_t b[SKV_TEN_SIZE];
    skv_store_ten_pack(w->t, b);
    MDB_val k = {strlen(w->t->name), (void *)w->t->name}, tv = {SKV_TEN_SIZE, b};
    int mrc = mdb_put(txn, db->db_ten, &k, &tv, 0);
    if (mrc)
        return skv_mdb_error(mrc, "write tenant");
    int rc = SKV_OK;
    /* (an id taken from a fleet may be below the next one) */
    if (w->new_id && w->t->id + 1 > skv_store_meta_u64(txn, db->db_meta, "next_tenant"))
        rc = skv_store_meta_put_u64(txn, db->db_meta, "next_tenant", w->t->id + 1);
    if (w->new_id && !rc)
        rc = skv_tkeys_put(db, txn, w->t);
    return rc;
}

static int tenant_write(seqkv *db, const tenant_ent *t, int new_id)
{
    ten_txn w = {t, new_id};
    return skv_store_write(db, "write tenant", tenant_body, NULL, &w, 0);
}

/* The tenant, created when absent and create is set (caller holds wlock). */
int skv_store_tenant(seqkv *db, const char *name, int create, tenant_ent **out)
{
    *out = NULL;
    int rc = skv_store_check_name("tenant", name, strcmp(name, SEQKV_SHARED_TENANT) == 0);
    if (rc)
        return rc;
    tenant_ent *t = skv_store_find_tenant(db, name);
    if (t) {
        *out = t;
        return SKV_OK;
    }
    if (!create)
        return skv_error(SKV_ERR_NOT_FOUND, "unknown tenant '%s'", name);
    if (db->o.read_only)
        return skv_error(SKV_ERR_ARG, "store opened read-only");
    return skv_store_tenant_new(db, name, 0, NULL, out);
}

uint64_t skv_store_next_tenant(seqkv *db)
{
    MDB_txn *txn;
    uint64_t id = 0;
    if (!skv_store_txn_begin(db, 1, &txn)) {
        id = skv_store_meta_u64(txn, db->db_meta, "next_tenant");
        mdb_txn_abort(txn);
    }
    if (id <= SKV_SHARED_ID)
        id = SKV_SHARED_ID + 1;
    for (size_t i = 0; i < db->nten; i++)
        if (db->ten[i].id >= id)
            id = db->ten[i].id + 1;
    return id;
}

int skv_store_tenant_new(seqkv *db, const char *name, uint64_t id, const uint8_t *keys,
                         tenant_ent **out)
{
    *out = NULL;
    int rc = skv_store_check_name("tenant", name, 0);
    if (rc)
        return rc;
    if (db->o.read_only)
        return skv_error(SKV_ERR_ARG, "store opened read-only");
    tenant_ent nt;
    memset(&nt, 0, sizeof nt);
    strcpy(nt.name, name);
    nt.id = id ? id : skv_store_next_tenant(db);
    if (keys) {
        if ((rc = skv_tkeys_alloc(&nt)))
            return rc;
        memcpy(nt.keys, keys, SKV_TKEYS);
    } else if ((rc = skv_tkeys_make(db, &nt))) {
        skv_tkeys_free(&nt);
        return rc;
    }
    if ((rc = tenant_write(db, &nt, 1))) {
        skv_tkeys_free(&nt);
        return rc;
    }
    pthread_rwlock_wrlock(&db->rw);
    rc = skv_store_add_tenant(db, &nt);
    pthread_rwlock_unlock(&db->rw);
    if (rc)
        skv_tkeys_free(&nt);
    else
        *out = &db->ten[db->nten - 1];
    return rc;
}

int seqkv_tenant_set(seqkv *db, const char *tenant, const seqkv_tenant_conf *conf)
{
    seqkv_tenant_conf cc;
    const seqkv_tenant_conf *c = &cc;
    int rc0 = conf ? skv_store_opts(&cc, sizeof cc, conf, "seqkv_tenant_conf")
                   : skv_error(SKV_ERR_ARG, "seqkv_tenant_set without a configuration");
    if (rc0)
        return rc0;
    pthread_mutex_lock(&db->wlock);
    tenant_ent *t;
    int rc = skv_store_tenant(db, tenant, 1, &t);
    if (!rc) {
        tenant_ent nt = *t;
        nt.read_shared = c->read_shared != 0;
        nt.budget = c->budget;
        if (!(rc = tenant_write(db, &nt, 0)))
            *t = nt;
    }
    pthread_mutex_unlock(&db->wlock);
    return rc;
}
