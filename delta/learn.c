/* Learning a calibration from a sample (sample.c) of stored sequences or
 * of a KV file: the means and codebook, model features for spec and full,
 * then each level's fit, on every thread of the pool. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rope.h"
#include "rows.h"

/* Model features for one sequence: run `m` with a hook that records its
 * K/V and substitutes the exact values. pred: [2][L][T][C]. */
typedef struct {
    const float *exact[2]; /* [L][T][C] */
    float *pred[2];
    size_t T, C;
    int subst; /* hand the exact values to the engine (spec) or not (full) */
} rec_hook_ctx;

static void rec_hook(void *vctx, int layer, size_t pos0, size_t n, float *k, float *v)
{
    rec_hook_ctx *h = vctx;
    for (int kv = 0; kv < 2; kv++) {
        float *x = kv ? v : k;
        size_t o = ((size_t)layer * h->T + pos0) * h->C;
        memcpy(h->pred[kv] + o, x, n * h->C * sizeof(float));
        if (h->subst)
            memcpy(x, h->exact[kv] + o, n * h->C * sizeof(float));
    }
}

static int model_features(const skv_model *m, skv_pool *pool, const int32_t *tok, size_t T,
                          const float *ek, const float *ev, float *pk, float *pv, int subst)
{
    skv_kvcache *cache;
    int rc = skv_kvcache_create(skv_model_cfg(m), T, &cache);
    if (rc)
        return rc;
    const skv_model_config *mc = skv_model_cfg(m);
    rec_hook_ctx h = {{ek, ev}, {pk, pv}, T, (size_t)mc->n_kv_heads * mc->head_dim, subst};
    skv_forward_opts o = {.pool = pool, .hook = rec_hook, .hook_ctx = &h};
    rc = skv_model_forward(m, cache, tok, T, &o);
    skv_kvcache_free(cache);
    return rc;
}

/* The vocabulary and RoPE of the model, when the calibration has one
 * (its shape must be the KV's) */
static int model_shape(skv_calib *c, const skv_model *model)
{
    const skv_model_config *mc = skv_model_cfg(model);
    if (mc->n_layers != c->sh.layers || mc->n_kv_heads != c->sh.kv_heads || mc->head_dim != c->sh.head_dim)
        return skv_error(SKV_ERR_SHAPE, "model shape (%d layers, %d kv heads, head_dim %d) does not match the KV (%d, %d, %d)",
                         mc->n_layers, mc->n_kv_heads, mc->head_dim, c->sh.layers, c->sh.kv_heads, c->sh.head_dim);
    c->sh.vocab = mc->vocab_size;
    c->sh.rope_theta = mc->rope_theta;
    c->sh.rope_dim = mc->rope_dim;
    c->sh.rope_layout = mc->rope_layout;
    snprintf(c->model_fp, sizeof c->model_fp, "%s", skv_model_fingerprint(model));
    return SKV_OK;
}

/* A KV file's shape, with the RoPE and vocabulary of its metadata
 * (seqkv.rope_*, seqkv.vocab) where it has them */
static void file_shape(skv_kvshape *sh, const skv_kvseq *s0, const skv_st *kvfile)
{
    memset(sh, 0, sizeof *sh);
    sh->layers = s0->layers;
    sh->kv_heads = s0->kv_heads;
    sh->head_dim = s0->head_dim;
    sh->dtype = s0->dtype;
    float th = 0, rd = 0;
    const char *lay = skv_st_meta(kvfile, "seqkv.rope_layout");
    if (!parse_float_meta(kvfile, "seqkv.rope_theta", &th) &&
        !parse_float_meta(kvfile, "seqkv.rope_dim", &rd) && lay) {
        sh->rope_theta = th;
        sh->rope_dim = (int)rd;
        sh->rope_layout = strcmp(lay, "half") == 0 ? SKV_ROPE_HALF : SKV_ROPE_PAIR;
    }
    float vv;
    if (!parse_float_meta(kvfile, "seqkv.vocab", &vv))
        sh->vocab = (int)vv;
}

/* The codebook's bytes a calibration may hold: rows for the tokens seen
 * most often, as many as fit (for Llama-3-8B's 64k scalars a token, 256
 * rows; for stories260K's 320, every token of any sample) */
#define SKV_CALIB_CB_BYTES ((size_t)64 << 20)

/* (token, count): by count descending, then token */
static int by_count(const void *pa, const void *pb)
{
    const int32_t *a = pa, *b = pb;
    if (a[1] != b[1])
        return a[1] > b[1] ? -1 : 1;
    return (a[0] > b[0]) - (a[0] < b[0]);
}

static int cmp_i32(const void *a, const void *b)
{
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The codebook's rows: the distinct tokens of the samples, the most
 * frequent that fit SKV_CALIB_CB_BYTES, ascending, into c->cb_tok (n_tok
 * of them), then every sample's row into d->row (-1: no row); allocates
 * the calibration. The vocabulary (an id bound the coder checks, sizing
 * nothing) grows to hold every token. */
static int codebook_tokens(skv_calib *c, calib_data *d)
{
    size_t tot = 0;
    int32_t max_tok = 0;
    for (size_t i = 0; i < d->n_seq; i++) {
        tot += d->T[i] - d->first[i];
        for (size_t t = 0; t < d->pos0[i] + d->T[i]; t++)
            max_tok = d->tok[i][t] > max_tok ? d->tok[i][t] : max_tok;
    }
    if (c->sh.vocab <= max_tok)
        c->sh.vocab = max_tok + 1;
    if (tot == 0)
        return skv_error(SKV_ERR_ARG, "calibration data holds no tokens");
    int32_t *u = skv_malloc(tot * sizeof *u), *pr = skv_malloc(tot * 2 * sizeof *pr);
    if (!u || !pr) {
        skv_free(u);
        skv_free(pr);
        return skv_error(SKV_ERR_NOMEM, "calibration (%zu tokens)", tot);
    }
    size_t n = 0;
    for (size_t i = 0; i < d->n_seq; i++)
        for (size_t t = d->first[i]; t < d->T[i]; t++)
            u[n++] = d->tok[i][d->pos0[i] + t];
    qsort(u, tot, sizeof *u, cmp_i32);
    size_t nt = 0; /* (token, count) pairs, by token */
    for (size_t j = 0; j < tot;) {
        size_t k = j;
        while (k < tot && u[k] == u[j])
            k++;
        pr[2 * nt] = u[j], pr[2 * nt + 1] = (int32_t)(k - j);
        nt++;
        j = k;
    }
    skv_free(u);
    u = pr;
    const size_t row_bytes = (size_t)c->sh.layers * 2 * chan_count(&c->sh) * sizeof(float);
    size_t keep = row_bytes ? SKV_CALIB_CB_BYTES / row_bytes : nt;
    if (keep < nt) {
        qsort(u, nt, 2 * sizeof *u, by_count);
        nt = keep;
    }
    qsort(u, nt, 2 * sizeof *u, cmp_i32); /* by token */
    c->n_tok = nt;
    int rc = calib_alloc(c);
    for (size_t j = 0; j < nt && !rc; j++)
        c->cb_tok[j] = u[2 * j];
    skv_free(u);
    for (size_t i = 0; i < d->n_seq && !rc; i++) {
        if (!(d->row[i] = skv_malloc((d->T[i] ? d->T[i] : 1) * sizeof *d->row[i])))
            return skv_error(SKV_ERR_NOMEM, "calibration data");
        for (size_t t = 0; t < d->T[i]; t++)
            d->row[i][t] = calib_row(c, d->tok[i][d->pos0[i] + t]);
    }
    return rc;
}

/* The means, codebook sums and p_emp of layers [b, e): each layer by one
 * thread, in the samples' order (the same sums on any number of threads) */
typedef struct {
    skv_calib *c;
    const calib_data *d;
    uint32_t (*pemp)[256]; /* [L] */
    int *rc;               /* [L] */
} means_job;

static void means_task(void *ctx, size_t b, size_t e, int worker)
{
    (void)worker;
    const means_job *j = ctx;
    skv_calib *c = j->c;
    const calib_data *d = j->d;
    const size_t C = chan_count(&c->sh), shift = 8 * skv_dtype_size(c->sh.dtype) - 8;
    float *row = skv_malloc(C * sizeof(float));
    for (size_t l = b; l < e; l++) {
        if (!row) {
            j->rc[l] = SKV_ERR_NOMEM;
            continue;
        }
        for (int k = 0; k < 2; k++) {
            float *mn = c->mean + (l * 2 + (size_t)k) * C;
            for (size_t i = 0; i < d->n_seq; i++)
                for (size_t t = d->first[i]; t < d->T[i]; t++) {
                    const size_t at = (l * d->T[i] + t) * C;
                    cd_row(d, k, i, l, t, C, row);
                    for (size_t ch = 0; ch < C; ch++) {
                        mn[ch] += row[ch];
                        j->pemp[l][cd_bits(d, k, i, at + ch) >> shift]++;
                    }
                    const int32_t r = d->row[i][t];
                    if (r < 0)
                        continue;
                    if (k == 0)
                        rope_row(c, row, d->pos0[i] + t, -1);
                    float *cb = c->cb + ((l * c->n_tok + (size_t)r) * 2 + (size_t)k) * C;
                    for (size_t ch = 0; ch < C; ch++)
                        cb[ch] += row[ch];
                }
        }
    }
    skv_free(row);
}

/* means, codebook sums, p_emp; then the means and codebook rows divided
 * by their counts */
static int means_and_codebook(skv_calib *c, const calib_data *d, skv_pool *pool)
{
    const size_t L = (size_t)c->sh.layers, C = chan_count(&c->sh);
    size_t tot = 0;
    for (size_t i = 0; i < d->n_seq; i++) {
        tot += d->T[i] - d->first[i];
        for (size_t t = d->first[i]; t < d->T[i]; t++)
            if (d->row[i][t] >= 0)
                c->cb_n[d->row[i][t]]++;
    }
    means_job j = {c, d, skv_calloc(L, sizeof *j.pemp), skv_calloc(L, sizeof(int))};
    if (!j.pemp || !j.rc) {
        skv_free(j.pemp);
        skv_free(j.rc);
        return skv_error(SKV_ERR_NOMEM, "calibration");
    }
    skv_pool_run_any(pool, L, means_task, &j);
    int rc = SKV_OK;
    for (size_t l = 0; l < L; l++) {
        rc = rc ? rc : j.rc[l];
        for (int b = 0; b < 256; b++)
            c->pemp[b] += j.pemp[l][b];
    }
    skv_free(j.pemp);
    skv_free(j.rc);
    if (rc)
        return skv_error(rc, "calibration");
    for (size_t k = 0; k < L * 2 * C; k++)
        c->mean[k] = tot ? c->mean[k] / (float)tot : 0.0f;
    for (size_t l = 0; l < L; l++)
        for (size_t v = 0; v < c->n_tok; v++)
            for (size_t k = 0; k < 2 * C; k++)
                c->cb[(l * c->n_tok + v) * 2 * C + k] /= (float)c->cb_n[v];
    return SKV_OK;
}

/* Level lv (spec or full) with the predictor pm: its model features over
 * every window (a prefix window: the sequence from position 0), then its
 * fit */
static int fit_model_level(skv_calib *c, const calib_data *d, seqkv_level lv, const skv_model *pm,
                           const skv_calib_opts *o, int max_s)
{
    const size_t L = (size_t)c->sh.layers, C = chan_count(&c->sh), n_seq = d->n_seq;
    int rc = SKV_OK;
    float **pred[2] = {skv_calloc(n_seq, sizeof(float *)), skv_calloc(n_seq, sizeof(float *))};
    if (!pred[0] || !pred[1])
        rc = skv_error(SKV_ERR_NOMEM, "model features");
    for (size_t i = 0; i < n_seq && !rc; i++) {
        size_t n = L * d->T[i] * C;
        pred[0][i] = skv_malloc((n ? n : 1) * sizeof(float));
        pred[1][i] = skv_malloc((n ? n : 1) * sizeof(float));
        float *ek = skv_malloc((n ? n : 1) * sizeof(float)), *ev = skv_malloc((n ? n : 1) * sizeof(float));
        if (!pred[0][i] || !pred[1][i] || !ek || !ev)
            rc = skv_error(SKV_ERR_NOMEM, "model features");
        else if (d->pos0[i] != 0)
            rc = skv_error(SKV_ERR_ARG, "model features need windows that start their sequence");
        else if (calib_stopped(o->stop))
            rc = skv_error(SKV_ERR_CANCELLED, "calibration stopped: the store is being closed");
        if (!rc && d->T[i]) {
            skv_cast_to_f32(c->sh.dtype, ek, d->kv[0][i], n);
            skv_cast_to_f32(c->sh.dtype, ev, d->kv[1][i], n);
            rc = model_features(pm, o->pool, d->tok[i], d->T[i], ek, ev, pred[0][i], pred[1][i],
                                lv == SEQKV_SPEC);
        }
        skv_free(ek);
        skv_free(ev);
    }
    if (!rc) {
        float *const *pp[2] = {pred[0], pred[1]};
        rc = fit_level(c, d, lv, pp, max_s, o->pool, o);
    }
    for (size_t i = 0; i < n_seq; i++) {
        if (pred[0])
            skv_free(pred[0][i]);
        if (pred[1])
            skv_free(pred[1][i]);
    }
    skv_free(pred[0]);
    skv_free(pred[1]);
    return rc;
}

/* Samples a channel for fitting its spread: what the caller asks, else
 * 4096 for a narrow shape and fewer for a wide one (about 2^23 samples in
 * all, at least 128 a channel: s is chosen on a grid of steps of 2^(1/8),
 * and the code length is flat near its optimum; on Llama-3-8B-shaped KV,
 * 128 samples a channel code 0.05% more bits than 1024) */
static int fit_samples(const skv_calib *c, const skv_calib_opts *o)
{
    if (o->max_fit_samples > 0)
        return o->max_fit_samples;
    const size_t ch = 2 * (size_t)c->sh.layers * chan_count(&c->sh), n = ((size_t)1 << 23) / (ch ? ch : 1);
    return n > 4096 ? 4096 : n < 128 ? 128 : (int)n;
}

/* Every level's fit: stat (and its atoms) and ctx, then spec (the int8
 * copy's features) and full (the model's) when there is a model */
static int fit_levels(skv_calib *c, const calib_data *d, const skv_calib_opts *o)
{
    const int max_s = fit_samples(c, o);
    float *const *none[2] = {NULL, NULL};
    int rc;
    if ((rc = fit_level(c, d, SEQKV_STAT, none, max_s, o->pool, o)))
        return rc;
    if ((rc = fit_atoms(c, d, o->pool, o->stop)))
        return rc;
    if ((rc = fit_level(c, d, SEQKV_CTX, none, max_s, o->pool, o)))
        return rc;
    c->levels = level_bit(SEQKV_STAT) | level_bit(SEQKV_CTX);
    if (!o->model)
        return SKV_OK;
    skv_model *q8 = NULL;
    if ((rc = skv_model_quantize(o->model, SKV_WQ_INT8, &q8)))
        return rc;
    for (int lv = SEQKV_SPEC; lv <= SEQKV_FULL && !rc; lv++) {
        rc = fit_model_level(c, d, (seqkv_level)lv, lv == SEQKV_SPEC ? q8 : o->model, o, max_s);
        if (!rc)
            c->levels |= level_bit((seqkv_level)lv);
    }
    skv_model_free(q8);
    return rc;
}

int skv_calib_learn_sample(skv_calib_sample *d, const skv_calib_opts *opts, skv_calib **out)
{
    *out = NULL;
    const skv_calib_opts none = {.quiet = 1};
    const skv_calib_opts *o = opts ? opts : &none;
    if (d->added != d->n_seq)
        return skv_error(SKV_ERR_ARG, "calibration sample: %zu of its %zu sequences were added",
                         d->added, d->n_seq);
    skv_calib *c = skv_calloc(1, sizeof *c);
    if (!c)
        return skv_error(SKV_ERR_NOMEM, "calibration");
    c->sh = d->sh;
    int rc = o->model ? model_shape(c, o->model) : SKV_OK;
    if (!rc && (c->sh.rope_dim > c->sh.head_dim || (c->sh.rope_dim & 1)))
        c->sh.rope_dim = 0;
    if (!rc)
        rc = codebook_tokens(c, d);
    if (!rc) {
        rope_init(c);
        rc = means_and_codebook(c, d, o->pool);
    }
    if (!rc)
        rc = fit_levels(c, d, o);
    if (!rc) {
        compute_id(c);
        rc = calib_index(c);
    }
    if (rc) {
        skv_calib_free(c);
        return rc;
    }
    *out = c;
    return SKV_OK;
}

int skv_calib_learn(const skv_st *kvfile, const skv_calib_opts *opts, skv_calib **out)
{
    *out = NULL;
    size_t n_seq;
    int rc = skv_kvfile_count(kvfile, &n_seq);
    if (rc)
        return rc;
    if (n_seq == 0)
        return skv_error(SKV_ERR_ARG, "calibration file holds no sequences");
    skv_kvseq q;
    if ((rc = skv_kvfile_get(kvfile, 0, &q)))
        return rc;
    skv_kvshape sh;
    file_shape(&sh, &q, kvfile);
    size_t *T = skv_malloc(n_seq * sizeof *T);
    uint64_t *h = skv_malloc(n_seq * sizeof *h);
    if (!T || !h)
        rc = skv_error(SKV_ERR_NOMEM, "calibration");
    for (size_t i = 0; i < n_seq && !rc; i++) /* (the tokens as the file holds them: LE) */
        if (!(rc = skv_kvfile_get(kvfile, i, &q))) {
            T[i] = q.T;
            h[i] = skv_checksum64(q.tokens, 4 * q.T, 0);
        }
    skv_calib_sample *s = NULL;
    if (!rc)
        rc = skv_calib_sample_create(&sh, n_seq, T, h, opts ? opts->sample_positions : 0,
                                     opts && opts->model, &s);
    for (size_t i = 0; i < n_seq && !rc; i++)
        if (!(rc = skv_kvfile_get(kvfile, i, &q)))
            rc = skv_calib_sample_add(s, i, &q);
    if (!rc)
        rc = skv_calib_learn_sample(s, opts, out);
    skv_calib_sample_free(s);
    skv_free(T);
    skv_free(h);
    return rc;
}
