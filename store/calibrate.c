/* Calibration from stored data: the profile's stored sequences (every
 * tenant's: the calibration holds per-channel statistics, a per-token
 * codebook and blend weights, no sequence) are decoded, learned from, and
 * the result is kept in LMDB under its content id. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_priv.h"

typedef struct {
    skv_tip *tips;
    size_t n, cap;
    ns_ent *e;
    int oom;
} tips_ctx;

static void collect_tip(void *vctx, skv_irec *r)
{
    tips_ctx *c = vctx;
    if (r->deps || r->tr.hidden)
        return; /* (hidden: a put's record not committed yet, or one being deleted) */
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 64;
        skv_tip *t = skv_realloc(c->tips, cap * sizeof *t);
        if (!t) {
            c->oom = 1;
            return;
        }
        c->tips = t;
        c->cap = cap;
    }
    c->tips[c->n++] = (skv_tip){r, c->e, 0};
}

/* By the hash of what a tip holds (an unkeyed one: a sample and an order
 * that do not follow the store's keys), then by tenant */
static int by_content(const void *pa, const void *pb)
{
    const skv_tip *x = pa, *y = pb;
    if (x->h != y->h)
        return x->h < y->h ? -1 : 1;
    if (x->e->tenant != y->e->tenant)
        return x->e->tenant < y->e->tenant ? -1 : 1;
    return memcmp(x->r->tr.key, y->r->tr.key, 32); /* (the same record below another prefix) */
}

static int by_recent_use(const void *pa, const void *pb)
{
    const skv_tip *x = pa, *y = pb;
    if (x->r->tick != y->r->tick)
        return x->r->tick > y->r->tick ? -1 : 1;
    return by_content(pa, pb);
}

int skv_store_tips(seqkv *db, const uint8_t prof_id[32], int recent, size_t max, skv_tip **out,
                   size_t *n)
{
    tips_ctx tc = {NULL, 0, 0, NULL, 0};
    for (size_t i = 0; i < db->nns; i++) {
        tc.e = &db->ns[i];
        if (memcmp(tc.e->prof_id, prof_id, 32) == 0)
            skv_irec_foreach(tc.e->trie, collect_tip, &tc);
    }
    if (tc.oom) {
        skv_free(tc.tips);
        return skv_error(SKV_ERR_NOMEM, "the stored sequences");
    }
    for (size_t i = 0; i < tc.n; i++) { /* (the tokens little-endian, as on every CPU) */
        const skv_irec *r = tc.tips[i].r;
        uint8_t le[4 * SEQKV_CHUNK_MAX];
        const size_t k = r->tr.n < SEQKV_CHUNK_MAX ? r->tr.n : SEQKV_CHUNK_MAX;
        for (size_t j = 0; j < k; j++)
            skv_store32_le(le + 4 * j, (uint32_t)r->tr.tokens[j]);
        tc.tips[i].h = skv_checksum64(le, 4 * k, r->tr.chunk_index);
    }
    const size_t m = max && tc.n > max ? max : tc.n;
    if (recent && tc.n) /* the m most recently used, then in the same order as the rest */
        qsort(tc.tips, tc.n, sizeof *tc.tips, by_recent_use);
    if (tc.n)
        qsort(tc.tips, recent ? m : tc.n, sizeof *tc.tips, by_content);
    *out = tc.tips;
    *n = m;
    return SKV_OK;
}

void skv_store_drift(prof_ent *pe, uint64_t bytes, uint64_t scalars)
{
    skv_drift *d = &pe->drift;
    const double bits = scalars ? 8.0 * (double)bytes / (double)scalars : 0.0;
    if (++d->n <= SKV_DRIFT_BASE) {
        d->sum += bits;
        d->base = d->avg = d->sum / (double)d->n;
        return;
    }
    d->avg += (bits - d->avg) / SKV_DRIFT_BASE;
    d->over = d->avg > d->base * SKV_DRIFT_RATIO ? d->over + 1 : 0;
    if (d->n >= SKV_DRIFT_MIN && d->over >= SKV_DRIFT_BASE)
        __atomic_store_n(&d->drifted, 1, __ATOMIC_RELAXED);
}

static int import_calib(seqkv *db, prof_ent *pe, const skv_calib *cal)
{
    const skv_kvshape *sh = skv_calib_shape(cal);
    if (sh->layers != pe->p.layers || sh->kv_heads != pe->p.kv_heads ||
        sh->head_dim != pe->p.head_dim || sh->dtype != pe->p.dtype)
        return skv_error(SKV_ERR_SHAPE, "the calibration describes another KV shape or dtype than "
                                        "profile %s", pe->p.name);
    uint8_t *img;
    size_t len;
    int rc = skv_calib_serialize(cal, &img, &len);
    if (!rc)
        rc = skv_store_set_calib(db, pe, skv_calib_id(cal), img, len);
    skv_free(img);
    return rc;
}

/* The sample a calibration of profile pp learns from: a window of each
 * of the first stored sequences tips (skv_calib_sample), each decoded as
 * far as its window and let go before the next, so memory is bounded by
 * the sample, not by what is stored; *nused: the sequences it read. Caller
 * holds rw shared. */
static int read_sample(seqkv *db, skv_role role, const seqkv_profile *pp, prof_ent *pe,
                       const skv_tip *tips, size_t ntips, int prefix, skv_calib_sample **out,
                       size_t *nused)
{
    *out = NULL;
    *nused = 0;
    const size_t CH = (size_t)pp->chunk;
    size_t *T = skv_malloc((ntips ? ntips : 1) * sizeof *T);
    uint64_t *h = skv_malloc((ntips ? ntips : 1) * sizeof *h);
    int rc = T && h ? SKV_OK : skv_error(SKV_ERR_NOMEM, "calibration sample");
    for (size_t j = 0; !rc && j < ntips; j++) {
        T[j] = (size_t)tips[j].r->tr.chunk_index * CH + tips[j].r->tr.n;
        h[j] = tips[j].h;
    }
    skv_kvshape sh = {pp->layers, pp->kv_heads, pp->head_dim, pp->vocab, pp->dtype,
                      pp->rope_theta, pp->rope_dim, pp->rope_half ? SKV_ROPE_HALF : SKV_ROPE_PAIR};
    skv_calib_sample *s = NULL;
    if (!rc)
        rc = skv_calib_sample_create(&sh, ntips, T, h, db->o.calib_sample, prefix, &s);
    MDB_txn *txn = NULL;
    if (!rc) {
        int mrc = mdb_txn_begin(db->env, NULL, MDB_RDONLY, &txn);
        rc = mrc ? skv_mdb_error(mrc, "begin transaction") : SKV_OK;
    }
    for (size_t j = 0; !rc && j < ntips; j++) {
        if (__atomic_load_n(&db->stop_bg, __ATOMIC_RELAXED)) {
            rc = skv_error(SKV_ERR_CANCELLED, "calibration stopped: the store is being closed");
            break;
        }
        size_t n;
        int32_t *tok;
        uint8_t *k, *v;
        size_t cap[2];
        const size_t end = skv_calib_sample_end(s, j);
        if (end == 0) { /* (not in the sample: nothing to decode) */
            skv_kvseq none = {0, NULL, pp->dtype, pp->layers, pp->kv_heads, pp->head_dim, NULL, NULL};
            rc = skv_calib_sample_add(s, j, &none);
            continue;
        }
        rc = skv_store_decode_prefix(db, txn, &role, tips[j].e, pe, tips[j].r, end, &n, &tok, &k, &v, cap);
        if (!rc) {
            skv_kvseq q = {n, tok, pp->dtype, pp->layers, pp->kv_heads, pp->head_dim, k, v};
            rc = skv_calib_sample_add(s, j, &q);
            (*nused)++;
        }
        skv_free(tok);
        skv_warm_free(k, cap[0]);
        skv_warm_free(v, cap[1]);
    }
    if (txn)
        mdb_txn_abort(txn);
    skv_free(T);
    skv_free(h);
    if (rc) {
        skv_calib_sample_free(s);
        return rc;
    }
    *out = s;
    return SKV_OK;
}

/* Learn profile's calibration from a sample of up to max_seq stored
 * sequences; with the profile's model (spec, full) unless model_free, on
 * pool. Caller holds wlock -- or, when background, nothing: the sample is
 * read as a reader, learned with no lock held, and the calibration goes
 * in under the writer lock unless the profile has one by then. */
static int calibrate(seqkv *db, const char *profile, size_t max_seq, int model_free,
                     skv_pool *pool, int background, int recent)
{
    pthread_rwlock_rdlock(&db->rw);
    prof_ent *pe = profile ? skv_store_profile(db, profile) : NULL;
    int rc = pe ? SKV_OK : skv_store_no_profile(db, profile);
    seqkv_profile pp = SEQKV_PROFILE_INIT;
    memset(&pp, 0, sizeof pp);
    if (pe)
        pp = pe->p;
    /* the stored sequences: a sample of max_seq, or (recent) the max_seq
     * most recently used */
    skv_tip *tips = NULL;
    size_t ntips = 0, nused = 0;
    if (!rc)
        rc = skv_store_tips(db, pp.id, recent, max_seq, &tips, &ntips);
    skv_model *model = NULL;
    if (!rc && pp.model[0] && !model_free)
        rc = skv_store_profile_model(db, pe, &model);
    skv_calib_sample *sample = NULL;
    if (!rc && ntips == 0)
        rc = skv_error(SKV_ERR_ARG, "profile %s has no stored sequences to calibrate from", profile);
    if (!rc)
        rc = read_sample(db, background ? SKV_READER : SKV_WRITER, &pp, pe, tips, ntips, model != NULL,
                         &sample, &nused);
    pthread_rwlock_unlock(&db->rw);
    pe = NULL; /* (from here on, pp: the profiles may move) */
    skv_calib *cal = NULL;
    if (!rc) {
        if (!db->o.quiet)
            fprintf(stderr, "seqkv: calibrating profile %s from windows of %zu of %zu stored "
                            "sequences\n", pp.name, nused, ntips);
        skv_calib_opts o = {.model = model, .pool = pool, .quiet = db->o.quiet, .stop = &db->stop_bg};
        rc = skv_calib_learn_sample(sample, &o, &cal);
    }
    skv_calib_sample_free(sample);
    const int locked = !rc && background;
    if (locked)
        pthread_mutex_lock(&db->wlock);
    /* in the background, only over the calibration it was learned to
     * replace (another may have come in meanwhile) */
    if (!rc && (pe = skv_store_profile(db, pp.name)) &&
        (!background || (pe->p.has_calib == pp.has_calib &&
                         (!pp.has_calib || !memcmp(pe->p.calib_id, pp.calib_id, 16)))))
        rc = import_calib(db, pe, cal);
    if (!rc && !pe)
        rc = skv_error(SKV_ERR_NOT_FOUND, "profile %s went away during its calibration", pp.name);
    if (locked)
        pthread_mutex_unlock(&db->wlock);
    skv_calib_free(cal);
    skv_free(tips);
    return rc;
}

void seqkv_stop_background(seqkv *db)
{
    __atomic_store_n(&db->stop_bg, 1, __ATOMIC_RELAXED);
}

int seqkv_calibrate(seqkv *db, const char *profile, size_t max_seq)
{
    pthread_mutex_lock(&db->wlock);
    int rc = calibrate(db, profile, max_seq ? max_seq : 64, 0, db->pool, 0, 0);
    pthread_mutex_unlock(&db->wlock);
    return rc;
}

/* Token positions the profile's records hold (all tenants); caller holds rw */
typedef struct {
    uint64_t n;
} count_ctx;

static void count_rec(void *vctx, skv_irec *r)
{
    ((count_ctx *)vctx)->n += r->tr.n - r->tr.lo;
}

uint64_t skv_store_profile_positions(seqkv *db, const prof_ent *pe)
{
    count_ctx c = {0};
    for (size_t i = 0; i < db->nns; i++)
        if (!memcmp(db->ns[i].prof_id, pe->p.id, 32))
            skv_irec_foreach(db->ns[i].trie, count_rec, &c);
    return c.n;
}

int seqkv_auto_calibrate(seqkv *db, const char *profile, int *learned)
{
    if (learned)
        *learned = 0;
    if (db->o.read_only)
        return SKV_OK;
    int err = SKV_OK;
    for (size_t i = 0;; i++) {
        /* the decision as a reader; the learning with no lock held (gets
         * and puts go on: puts store raw meanwhile) */
        pthread_rwlock_rdlock(&db->rw);
        if (i >= db->nprof) {
            pthread_rwlock_unlock(&db->rw);
            break;
        }
        prof_ent *pe = &db->prof[i];
        const int want = pe->p.auto_calibrate ? pe->p.auto_calibrate : SEQKV_AUTO_CALIBRATE_DEFAULT;
        /* (drifted: the writer's figure, read as it last wrote it) */
        const int drifted = pe->p.has_calib && __atomic_load_n(&pe->drift.drifted, __ATOMIC_RELAXED);
        const int skip = (profile && strcmp(profile, pe->p.name) != 0) ||
                         (pe->p.has_calib && !drifted) || want < 0 ||
                         !seqkv_level_predictive(pe->p.level);
        const uint64_t held = skip ? 0 : skv_store_profile_positions(db, pe);
        const uint64_t failed = pe->autocal_failed;
        char name[SEQKV_NAME_MAX + 1];
        snprintf(name, sizeof name, "%s", pe->p.name);
        const seqkv_level level = pe->p.level;
        pthread_rwlock_unlock(&db->rw);
        if (skip || (!drifted && (held < (uint64_t)want || (failed && held < 2 * failed))))
            continue;
        if (!db->o.quiet)
            fprintf(stderr, drifted ? "seqkv: profile %s: new chunks cost %.0f%% more bits than "
                                      "after its calibration: learning a new one (%s)\n"
                                    : "seqkv: profile %s holds %.0f token positions: learning "
                                      "its calibration (%s)\n", name,
                    drifted ? 100.0 * (pe->drift.avg / pe->drift.base - 1.0) : (double)held,
                    seqkv_level_name(level));
        if (drifted) /* (measured again under the new one) */
            __atomic_store_n(&pe->drift.drifted, 0, __ATOMIC_RELAXED);
        skv_pool *pool = NULL;
        int rc = skv_store_bg_pool(db, &pool);
        if (!rc) /* (drifted: from the sequences used last, what the profile holds now) */
            rc = calibrate(db, name, 64, level < SEQKV_SPEC, pool, 1, drifted);
        skv_pool_free(pool);
        if (rc == SKV_ERR_CANCELLED) /* (a shutdown: not a failure to remember) */
            return rc;
        if (rc) {
            err = rc;
            char why[256];
            snprintf(why, sizeof why, "%s", seqkv_error_detail());
            pthread_mutex_lock(&db->wlock);
            if ((pe = skv_store_profile(db, name)))
                pe->autocal_failed = held;
            pthread_mutex_unlock(&db->wlock);
            skv_error(rc, "profile %s: self-calibration failed at %llu positions (again at %llu): %s",
                      name, (unsigned long long)held, (unsigned long long)(2 * held), why);
        } else if (learned) {
            (*learned)++;
        }
    }
    /* the opt-in lossy tier's calibration, learned the same way */
    const int lrc = skv_store_lossy_auto(db, profile, learned);
    return err ? err : lrc;
}

int seqkv_calibrate_import(seqkv *db, const char *profile, const char *path)
{
    pthread_mutex_lock(&db->wlock);
    prof_ent *pe = profile ? skv_store_profile(db, profile) : NULL;
    int rc = pe ? SKV_OK : skv_store_no_profile(db, profile);
    skv_calib *cal = NULL;
    if (!rc)
        rc = skv_calib_load(path, &cal);
    if (!rc && skv_calib_model(cal)[0] && pe->p.model[0]) {
        skv_model *m;
        if (!(rc = skv_store_profile_model(db, pe, &m)) &&
            strcmp(skv_model_fingerprint(m), skv_calib_model(cal)) != 0)
            rc = skv_error(SKV_ERR_SHAPE, "the calibration was made with another model than %s",
                           pe->p.model);
    }
    if (!rc)
        rc = import_calib(db, pe, cal);
    skv_calib_free(cal);
    pthread_mutex_unlock(&db->wlock);
    return rc;
}
