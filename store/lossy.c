/*
 * lossy.c - the opt-in lossy tier in the store (ARCHITECTURE.md, "The
 * lossy tier"): a profile's settings, its lossy calibration (learned from
 * its stored sequences run through its model; kept sealed in table calib
 * under 'L' + its id, where compaction's clean-up never looks), chunk
 * records coded lossy (one lossy slab stream per (layer, K|V), the
 * exact window as it was put), and the refusal of a get that did not ask
 * for a lossy prefix.
 */
#include <stdio.h>
#include <string.h>

#include "store_priv.h"

#define LCAL_KEY 17

static void lcal_key(const uint8_t id[16], uint8_t k[LCAL_KEY])
{
    k[0] = 'L';
    memcpy(k + 1, id, 16);
}

/* ---- the profile's settings ------------------------------------------------------ */

void skv_lossy_prof_pack(const seqkv_profile *p, uint8_t *b)
{
    skv_store32_le(b, (uint32_t)p->lossy);
    skv_store32_le(b + 4, (uint32_t)p->lossy_sink);
    skv_store32_le(b + 8, (uint32_t)p->lossy_recent);
    skv_store32_le(b + 12, (uint32_t)p->has_lossy);
    memcpy(b + 16, p->lossy_id, 16);
}

int skv_lossy_prof_unpack(const uint8_t *b, seqkv_profile *p)
{
    p->lossy = (int)skv_load32_le(b);
    p->lossy_sink = (int)skv_load32_le(b + 4);
    p->lossy_recent = (int)skv_load32_le(b + 8);
    p->has_lossy = (int)skv_load32_le(b + 12);
    memcpy(p->lossy_id, b + 16, 16);
    if ((p->lossy && (p->lossy < 2 || p->lossy > 4)) || p->lossy_sink < -1 || p->lossy_recent < -1 ||
        p->lossy_sink > (1 << 20) || p->lossy_recent > (1 << 20) || (unsigned)p->has_lossy > 1)
        return skv_error(SKV_ERR_CORRUPT, "profile record with impossible lossy fields");
    return SKV_OK;
}

int skv_lossy_prof_check(const seqkv_profile *q)
{
    if (q->lossy && (q->lossy < 2 || q->lossy > 4))
        return skv_error(SKV_ERR_ARG, "lossy must be 0 (off), or 4, 3 or 2 (q4, q3, q2), not %d", q->lossy);
    if (q->lossy && !q->model[0])
        return skv_error(SKV_ERR_ARG, "profile %s: the lossy tier learns from the model's queries: "
                                      "give the profile a model", q->name);
    if (q->lossy_sink < -1 || q->lossy_recent < -1 || q->lossy_sink > (1 << 20) || q->lossy_recent > (1 << 20))
        return skv_error(SKV_ERR_ARG, "lossy_sink and lossy_recent are token counts (0: the "
                                      "defaults, %d and %d; -1: none)",
                         SEQKV_LOSSY_SINK_DEFAULT, SEQKV_LOSSY_RECENT_DEFAULT);
    return SKV_OK;
}

static size_t sink_of(const seqkv_profile *p)
{
    return p->lossy_sink < 0 ? 0 : p->lossy_sink ? (size_t)p->lossy_sink : SEQKV_LOSSY_SINK_DEFAULT;
}

static size_t recent_of(const seqkv_profile *p)
{
    return p->lossy_recent < 0 ? 0 : p->lossy_recent ? (size_t)p->lossy_recent : SEQKV_LOSSY_RECENT_DEFAULT;
}

/* ---- the calibration ------------------------------------------------------------- */

/* The profile's lossy calibration of id, loaded on first need (it is
 * learned once: the pointer, once set, stays until close) */
static int lossy_cal(seqkv *db, MDB_txn *txn, prof_ent *pe, const uint8_t id[16],
                     const skv_lossy_cal **out)
{
    const skv_lossy_cal *c = __atomic_load_n(&pe->lossy, __ATOMIC_ACQUIRE);
    if (c && memcmp(skv_lossy_cal_id(c), id, 16) == 0) {
        *out = c;
        return SKV_OK;
    }
    if (c || !pe->p.has_lossy || memcmp(pe->p.lossy_id, id, 16) != 0)
        return skv_error(SKV_ERR_CORRUPT, "a chunk names a lossy calibration profile %s does not have",
                         pe->p.name);
    uint8_t key[LCAL_KEY];
    lcal_key(id, key);
    MDB_val k = {LCAL_KEY, key}, v;
    int mrc = mdb_get(txn, db->db_calib, &k, &v);
    if (mrc)
        return mrc == MDB_NOTFOUND ? skv_error(SKV_ERR_CORRUPT, "profile %s's lossy calibration is missing",
                                               pe->p.name)
                                   : skv_mdb_error(mrc, "lossy calibration");
    uint8_t *owned;
    const uint8_t *img;
    size_t len;
    int rc = skv_store_calib_read(db, id, v.mv_data, v.mv_size, &owned, &img, &len);
    skv_lossy_cal *cal = NULL;
    if (!rc)
        rc = skv_lossy_cal_load(img, len, &cal);
    skv_free(owned);
    if (!rc && memcmp(skv_lossy_cal_id(cal), id, 16) != 0)
        rc = skv_error(SKV_ERR_CORRUPT, "lossy calibration stored under the wrong id");
    if (rc) {
        skv_lossy_cal_free(cal);
        return rc;
    }
    pthread_mutex_lock(&db->clock);
    if (pe->lossy) { /* another thread loaded it meanwhile */
        skv_lossy_cal_free(cal);
    } else {
        __atomic_store_n(&pe->lossy, cal, __ATOMIC_RELEASE);
    }
    *out = pe->lossy;
    pthread_mutex_unlock(&db->clock);
    return SKV_OK;
}

int skv_store_lossy_ready(seqkv *db, MDB_txn *txn, prof_ent *pe)
{
    const skv_lossy_cal *c;
    return pe->p.lossy && pe->p.has_lossy && lossy_cal(db, txn, pe, pe->p.lossy_id, &c) == SKV_OK &&
           skv_lossy_cal_has(c, pe->p.lossy, SKV_LQ_PVQ);
}

/* Learn and keep the profile's lossy calibration. Caller holds wlock
 * when !background; in the background no lock is held while learning. */
static int learn(seqkv *db, const char *profile, size_t max_seq, int background)
{
    const skv_role role = background ? SKV_READER : SKV_WRITER;
    pthread_rwlock_rdlock(&db->rw);
    prof_ent *pe = profile ? skv_store_profile(db, profile) : NULL;
    int rc = pe ? SKV_OK : skv_store_no_profile(db, profile);
    if (!rc && (!pe->p.lossy || !pe->p.model[0]))
        rc = skv_error(SKV_ERR_ARG, "profile %s has no lossy setting and model to learn from", profile);
    if (!rc && pe->p.has_lossy)
        rc = skv_error(SKV_ERR_ARG, "profile %s has its lossy calibration already", profile);
    seqkv_profile pp = SEQKV_PROFILE_INIT;
    memset(&pp, 0, sizeof pp);
    if (!rc)
        pp = pe->p;
    skv_tip *tips = NULL;
    size_t ntips = 0;
    int32_t **tok = skv_calloc(max_seq, sizeof *tok);
    size_t *len = skv_calloc(max_seq, sizeof *len);
    if (!rc && (!tok || !len))
        rc = skv_error(SKV_ERR_NOMEM, "lossy calibration");
    if (!rc) /* (the first stored) */
        rc = skv_store_tips(db, pp.id, 0, max_seq, &tips, &ntips);
    MDB_txn *txn = NULL;
    if (!rc) {
        int mrc = mdb_txn_begin(db->env, NULL, MDB_RDONLY, &txn);
        rc = mrc ? skv_mdb_error(mrc, "begin transaction") : SKV_OK;
    }
    size_t nseq = 0, ntok = 0;
    for (size_t j = 0; !rc && j < ntips; j++) {
        uint8_t *k = NULL, *v = NULL;
        size_t cap[2];
        rc = skv_store_decode_chain(db, txn, &role, tips[j].e, pe, tips[j].r, &len[nseq], &tok[nseq], &k, &v,
                                    cap);
        skv_warm_free(k, cap[0]);
        skv_warm_free(v, cap[1]);
        if (!rc)
            ntok += len[nseq++];
    }
    if (txn)
        mdb_txn_abort(txn);
    skv_model *model = NULL;
    if (!rc)
        rc = skv_store_profile_model(db, pe, &model);
    pthread_rwlock_unlock(&db->rw);
    if (!rc && nseq == 0)
        rc = skv_error(SKV_ERR_ARG, "profile %s has no stored sequences to learn its lossy tier from", profile);
    skv_pool *pool = NULL;
    if (!rc)
        rc = skv_store_bg_pool(db, &pool);
    skv_lossy_cal *cal = NULL;
    if (!rc) {
        if (!db->o.quiet)
            fprintf(stderr, "seqkv: profile %s: learning its lossy tier (q%d) from %zu stored "
                            "sequences (%zu tokens) and its model\n", pp.name, pp.lossy, nseq, ntok);
        const int sink = (int)sink_of(&pp);
        skv_lossy_opts o = {pp.dtype, sink, 0, 0, 0, pool, db->o.quiet, 0};
        rc = skv_lossy_calibrate(model, (const int32_t *const *)tok, len, nseq, &o, &cal);
    }
    skv_pool_free(pool);
    uint8_t *img = NULL, *sealed = NULL;
    size_t ilen = 0, slen = 0;
    if (!rc)
        rc = skv_lossy_cal_save(cal, &img, &ilen);
    if (!rc)
        rc = skv_store_calib_seal(db, skv_lossy_cal_id(cal), img, ilen, &sealed, &slen);
    const int locked = background && !rc;
    if (locked)
        pthread_mutex_lock(&db->wlock);
    if (!rc && (!(pe = skv_store_profile(db, pp.name)) || pe->p.has_lossy))
        rc = skv_error(SKV_ERR_NOT_FOUND, "profile %s went away or was calibrated meanwhile", pp.name);
    if (!rc) {
        seqkv_profile q = pe->p;
        q.has_lossy = 1;
        memcpy(q.lossy_id, skv_lossy_cal_id(cal), 16);
        uint8_t key[LCAL_KEY];
        lcal_key(q.lossy_id, key);
        MDB_val ck = {LCAL_KEY, key}, cv = {sealed ? slen : ilen, sealed ? sealed : img};
        rc = skv_store_profile_write(db, &q, &ck, &cv);
        if (!rc) {
            pthread_rwlock_wrlock(&db->rw);
            pe->p = q;
            __atomic_store_n(&pe->lossy, cal, __ATOMIC_RELEASE);
            cal = NULL;
            pthread_rwlock_unlock(&db->rw);
        }
    }
    if (locked)
        pthread_mutex_unlock(&db->wlock);
    skv_lossy_cal_free(cal);
    skv_free(img);
    skv_free(sealed);
    for (size_t j = 0; tok && j < max_seq; j++)
        skv_free(tok[j]);
    skv_free(tok);
    skv_free(len);
    skv_free(tips);
    return rc;
}

int seqkv_lossy_calibrate(seqkv *db, const char *profile, size_t max_seq)
{
    if (db->o.read_only)
        return skv_error(SKV_ERR_ARG, "store opened read-only");
    pthread_mutex_lock(&db->wlock);
    int rc = learn(db, profile, max_seq ? max_seq : 64, 0);
    pthread_mutex_unlock(&db->wlock);
    return rc;
}

int skv_store_lossy_auto(seqkv *db, const char *profile, int *learned)
{
    /* the profiles due, decided as a reader; each learned with no lock */
    pthread_rwlock_rdlock(&db->rw);
    const size_t np = db->nprof;
    char (*due)[SEQKV_NAME_MAX + 1] = skv_calloc(np ? np : 1, sizeof *due);
    uint64_t *held = skv_calloc(np ? np : 1, sizeof *held);
    size_t nd = 0;
    for (size_t i = 0; due && held && i < np; i++) {
        const prof_ent *pe = &db->prof[i];
        const int want = pe->p.auto_calibrate ? pe->p.auto_calibrate : SEQKV_AUTO_CALIBRATE_DEFAULT;
        if ((profile && strcmp(profile, pe->p.name) != 0) || !pe->p.lossy || pe->p.has_lossy ||
            !pe->p.model[0] || want < 0)
            continue;
        const uint64_t h = skv_store_profile_positions(db, pe);
        if (h < (uint64_t)want || (pe->autocal_failed && h < 2 * pe->autocal_failed))
            continue;
        snprintf(due[nd], sizeof due[nd], "%s", pe->p.name);
        held[nd++] = h;
    }
    pthread_rwlock_unlock(&db->rw);
    int err = due && held ? SKV_OK : skv_error(SKV_ERR_NOMEM, "lossy self-calibration");
    for (size_t k = 0; k < nd; k++) {
        int rc = learn(db, due[k], 64, 1);
        if (rc) {
            err = rc;
            pthread_mutex_lock(&db->wlock);
            prof_ent *pe = skv_store_profile(db, due[k]);
            if (pe)
                pe->autocal_failed = held[k];
            pthread_mutex_unlock(&db->wlock);
        } else if (learned) {
            (*learned)++;
        }
    }
    skv_free(due);
    skv_free(held);
    return err;
}

/* ---- records ------------------------------------------------------------------------ */

int skv_store_lossy_code(seqkv *db, MDB_txn *txn, prof_ent *pe, seqbuf *s, size_t a, size_t b,
                         size_t n, skv_rec *r, skv_streams *st, int *coded)
{
    *coded = 0;
    const skv_lossy_cal *c;
    int rc = lossy_cal(db, txn, pe, pe->p.lossy_id, &c);
    if (rc)
        return rc;
    /* the window: positions [0, sink) and the put's last `recent` stay exact */
    const size_t sink = sink_of(&pe->p), recent = recent_of(&pe->p);
    const size_t glo = a > sink ? a : sink, ghi = n > recent ? (b < n - recent ? b : n - recent) : 0;
    if (glo >= ghi)
        return SKV_OK;
    const size_t rows = b - a, L = (size_t)pe->p.layers, row = pe->C * pe->es;
    const size_t cap = skv_lossy_slab_bound(c, rows);
    uint8_t *buf = skv_malloc(cap), *rec = skv_malloc(rows * row);
    if (!buf || !rec)
        rc = skv_error(SKV_ERR_NOMEM, "lossy record");
    for (size_t l = 0; !rc && l < L; l++)
        for (int kv = 0; !rc && kv < 2; kv++) {
            uint8_t *x = s->kv[kv] + (l * s->stride + a) * row;
            size_t len = 0;
            rc = skv_lossy_slab_encode(c, pe->p.lossy, SKV_LQ_PVQ, (int)l, kv, x, rows, glo - a,
                                       ghi - a, buf, cap, &len, rec);
            if (!rc)
                rc = skv_streams_append(st, buf, len);
            if (!rc) /* what a get will see: the context of what follows */
                memcpy(x, rec, rows * row);
        }
    skv_free(buf);
    skv_free(rec);
    if (!rc) {
        r->level = SEQKV_LOSSY;
        memcpy(r->calib, skv_lossy_cal_id(c), 16);
        *coded = 1;
    }
    return rc;
}

int skv_store_lossy_stream(seqkv *db, MDB_txn *txn, prof_ent *pe, const skv_rec *r, size_t j,
                           const uint8_t *src, size_t len, size_t rows, uint8_t *dst)
{
    const skv_lossy_cal *c;
    int rc = lossy_cal(db, txn, pe, r->calib, &c);
    if (!rc)
        rc = skv_lossy_slab_decode(c, src, len, (int)(j / 2), (int)(j & 1), rows, dst);
    if (rc == SKV_ERR_FORMAT || rc == SKV_ERR_SHAPE || rc == SKV_ERR_ARG)
        rc = skv_error(SKV_ERR_CORRUPT, "lossy stream %zu: %s", j, seqkv_error_detail());
    return rc;
}

/* ---- gets ---------------------------------------------------------------------------- */

int skv_store_lossy_check(const match_res *m, size_t want, unsigned flags)
{
    /* (a profile holds lossy records only once it has had its lossy
     * calibration, which it keeps: every other get skips the walk) */
    if ((flags & SEQKV_GET_LOSSY) || !m->pe->p.has_lossy)
        return SKV_OK;
    const size_t CH = (size_t)m->pe->p.chunk;
    for (size_t j = 0; j < m->steps && j * CH < want; j++) {
        const skv_irec *x = skv_irec_of(m->path[j].rec);
        for (size_t hops = 0; x && hops <= CH; hops++) {
            if (x->level == SEQKV_LOSSY)
                return skv_error(SKV_ERR_LOSSY,
                                 "the cached prefix is stored lossy (profile %s's opt-in lossy "
                                 "tier); ask with LOSSY to accept its reconstruction",
                                 m->pe->p.name);
            x = x->has_base && m->e ? skv_irec_find(m->e->trie, x->base) : NULL;
        }
    }
    return SKV_OK;
}
