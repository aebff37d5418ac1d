/* Learning a calibration from a KV file: the data, the means and
 * codebook, model features for spec and full, then each level's fit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rope.h"
#include "rows.h"

static void data_free(calib_data *d)
{
    for (size_t i = 0; i < d->n_seq; i++) {
        if (d->tok)
            skv_free(d->tok[i]);
        if (d->row)
            skv_free(d->row[i]);
        for (int k = 0; k < 2; k++) {
            if (d->kv[k])
                skv_free(d->kv[k][i]);
            if (d->bits[k])
                skv_free(d->bits[k][i]);
        }
    }
    skv_free(d->T);
    skv_free(d->tok);
    skv_free(d->row);
    for (int k = 0; k < 2; k++) {
        skv_free(d->kv[k]);
        skv_free(d->bits[k]);
    }
}

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

/* The calibration's shape: the KV's, with the vocabulary and RoPE of the
 * model when there is one, else of the KV file's metadata */
static int learn_shape(skv_calib *c, const skv_kvseq *s0, const skv_st *kvfile, const skv_model *model)
{
    c->sh.layers = s0->layers;
    c->sh.kv_heads = s0->kv_heads;
    c->sh.head_dim = s0->head_dim;
    c->sh.dtype = s0->dtype;
    c->sh.vocab = 0;
    if (model) {
        const skv_model_config *mc = skv_model_cfg(model);
        if (mc->n_layers != s0->layers || mc->n_kv_heads != s0->kv_heads || mc->head_dim != s0->head_dim)
            return skv_error(SKV_ERR_SHAPE, "model shape (%d layers, %d kv heads, head_dim %d) does not match the KV (%d, %d, %d)",
                             mc->n_layers, mc->n_kv_heads, mc->head_dim, s0->layers, s0->kv_heads, s0->head_dim);
        c->sh.vocab = mc->vocab_size;
        c->sh.rope_theta = mc->rope_theta;
        c->sh.rope_dim = mc->rope_dim;
        c->sh.rope_layout = mc->rope_layout;
        snprintf(c->model_fp, sizeof c->model_fp, "%s", skv_model_fingerprint(model));
    } else {
        float th = 0, rd = 0;
        const char *lay = skv_st_meta(kvfile, "seqkv.rope_layout");
        if (!parse_float_meta(kvfile, "seqkv.rope_theta", &th) &&
            !parse_float_meta(kvfile, "seqkv.rope_dim", &rd) && lay) {
            c->sh.rope_theta = th;
            c->sh.rope_dim = (int)rd;
            c->sh.rope_layout = strcmp(lay, "half") == 0 ? SKV_ROPE_HALF : SKV_ROPE_PAIR;
        }
        float vv;
        if (!parse_float_meta(kvfile, "seqkv.vocab", &vv))
            c->sh.vocab = (int)vv;
    }
    if (c->sh.rope_dim > c->sh.head_dim || (c->sh.rope_dim & 1))
        c->sh.rope_dim = 0;
    return SKV_OK;
}

/* Sequence i of the KV file into d (its tokens, floats and bits), raising
 * *max_tok to its largest token */
static int read_seq(const skv_st *kvfile, size_t i, const skv_calib *c, calib_data *d, int32_t *max_tok)
{
    const size_t L = (size_t)c->sh.layers, C = chan_count(&c->sh);
    skv_kvseq s;
    int rc = skv_kvfile_get(kvfile, i, &s);
    if (rc)
        return rc;
    if (s.layers != c->sh.layers || s.kv_heads != c->sh.kv_heads || s.head_dim != c->sh.head_dim ||
        s.dtype != c->sh.dtype)
        return skv_error(SKV_ERR_SHAPE, "sequence %zu has another shape or dtype than sequence 0", i);
    size_t T = s.T, n = L * T * C;
    d->T[i] = T;
    d->tok[i] = skv_malloc((T ? T : 1) * sizeof(int32_t));
    for (int k = 0; k < 2; k++) {
        d->kv[k][i] = skv_malloc((n ? n : 1) * sizeof(float));
        d->bits[k][i] = skv_malloc((n ? n : 1) * sizeof(uint32_t));
    }
    if (!d->tok[i] || !d->kv[0][i] || !d->kv[1][i] || !d->bits[0][i] || !d->bits[1][i])
        return skv_error(SKV_ERR_NOMEM, "calibration data");
    for (size_t t = 0; t < T; t++) {
        d->tok[i][t] = (int32_t)skv_load32_le((const uint8_t *)s.tokens + 4 * t);
        if (d->tok[i][t] < 0 || d->tok[i][t] == INT32_MAX)
            return skv_error(SKV_ERR_FORMAT, "sequence %zu: token id %d at %zu outside [0, 2^31 - 1)",
                             i, d->tok[i][t], t);
        if (d->tok[i][t] > *max_tok)
            *max_tok = d->tok[i][t];
    }
    size_t es = skv_dtype_size(s.dtype);
    for (int k = 0; k < 2; k++) {
        const uint8_t *src = k ? s.v : s.k;
        skv_cast_to_f32(s.dtype, d->kv[k][i], src, n);
        for (size_t j = 0; j < n; j++)
            d->bits[k][i][j] = load_bits(s.dtype, src + j * es);
    }
    return SKV_OK;
}

/* Every sequence of the KV file into d (data_free it, whether or not this
 * succeeds); the vocabulary (an id bound the coder checks, sizing
 * nothing) grows to hold every token */
static int read_data(const skv_st *kvfile, size_t n_seq, skv_calib *c, calib_data *d)
{
    memset(d, 0, sizeof *d);
    d->n_seq = n_seq;
    d->T = skv_calloc(n_seq, sizeof *d->T);
    d->tok = skv_calloc(n_seq, sizeof *d->tok);
    d->row = skv_calloc(n_seq, sizeof *d->row);
    for (int k = 0; k < 2; k++) {
        d->kv[k] = skv_calloc(n_seq, sizeof *d->kv[k]);
        d->bits[k] = skv_calloc(n_seq, sizeof *d->bits[k]);
    }
    if (!d->T || !d->tok || !d->row || !d->kv[0] || !d->kv[1] || !d->bits[0] || !d->bits[1])
        return skv_error(SKV_ERR_NOMEM, "calibration data");
    int32_t max_tok = 0;
    for (size_t i = 0; i < n_seq; i++) {
        int rc = read_seq(kvfile, i, c, d, &max_tok);
        if (rc)
            return rc;
    }
    if (c->sh.vocab <= max_tok)
        c->sh.vocab = max_tok + 1;
    return SKV_OK;
}

static int cmp_i32(const void *a, const void *b)
{
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The codebook's rows: the distinct tokens of d, ascending, into c->cb_tok
 * (n_tok of them: bounded by the calibration's tokens, not by their ids),
 * then every position's row into d->row; allocates the calibration */
static int codebook_tokens(skv_calib *c, calib_data *d)
{
    size_t tot = 0;
    for (size_t i = 0; i < d->n_seq; i++)
        tot += d->T[i];
    if (tot == 0)
        return skv_error(SKV_ERR_ARG, "calibration data holds no tokens");
    int32_t *u = skv_malloc(tot * sizeof *u);
    if (!u)
        return skv_error(SKV_ERR_NOMEM, "calibration (%zu tokens)", tot);
    for (size_t i = 0, n = 0; i < d->n_seq; n += d->T[i], i++)
        memcpy(u + n, d->tok[i], d->T[i] * sizeof *u);
    qsort(u, tot, sizeof *u, cmp_i32);
    size_t nt = 1;
    for (size_t j = 1; j < tot; j++)
        if (u[j] != u[nt - 1])
            u[nt++] = u[j];
    c->n_tok = nt;
    int rc = calib_alloc(c);
    if (!rc)
        memcpy(c->cb_tok, u, nt * sizeof *u);
    skv_free(u);
    for (size_t i = 0; i < d->n_seq && !rc; i++) {
        if (!(d->row[i] = skv_malloc((d->T[i] ? d->T[i] : 1) * sizeof *d->row[i])))
            return skv_error(SKV_ERR_NOMEM, "calibration data");
        for (size_t t = 0; t < d->T[i]; t++)
            d->row[i][t] = calib_row(c, d->tok[i][t]);
    }
    return rc;
}

/* means, codebook sums, p_emp; then the means and codebook rows divided
 * by their counts */
static int means_and_codebook(skv_calib *c, const calib_data *d)
{
    const size_t L = (size_t)c->sh.layers, C = chan_count(&c->sh);
    size_t tot = 0;
    for (size_t i = 0; i < d->n_seq; i++) {
        size_t T = d->T[i];
        tot += T;
        float *row = skv_malloc(C * sizeof(float));
        if (!row)
            return skv_error(SKV_ERR_NOMEM, "calibration");
        for (int k = 0; k < 2; k++)
            for (size_t l = 0; l < L; l++)
                for (size_t t = 0; t < T; t++) {
                    const float *x = d->kv[k][i] + (l * T + t) * C;
                    memcpy(row, x, C * sizeof(float));
                    if (k == 0)
                        rope_row(c, row, t, -1);
                    float *e = c->cb + ((l * c->n_tok + (size_t)d->row[i][t]) * 2 + (size_t)k) * C;
                    float *mn = c->mean + (l * 2 + (size_t)k) * C;
                    for (size_t ch = 0; ch < C; ch++) {
                        e[ch] += row[ch];
                        mn[ch] += x[ch];
                        c->pemp[d->bits[k][i][(l * T + t) * C + ch] >> (8 * skv_dtype_size(c->sh.dtype) - 8)]++;
                    }
                }
        for (size_t t = 0; t < T; t++)
            c->cb_n[d->row[i][t]]++;
        skv_free(row);
    }
    for (size_t j = 0; j < L * 2 * C; j++)
        c->mean[j] = tot ? c->mean[j] / (float)tot : 0.0f;
    for (size_t l = 0; l < L; l++)
        for (size_t v = 0; v < c->n_tok; v++)
            for (size_t j = 0; j < 2 * C; j++)
                c->cb[(l * c->n_tok + v) * 2 * C + j] /= (float)c->cb_n[v];
    return SKV_OK;
}

/* Level lv (spec or full) with the predictor pm: its model features over
 * every sequence, then its fit */
static int fit_model_level(skv_calib *c, const calib_data *d, seqkv_level lv, const skv_model *pm,
                           skv_pool *pool, int max_s, int quiet)
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
        if (!pred[0][i] || !pred[1][i])
            rc = skv_error(SKV_ERR_NOMEM, "model features");
        else if (d->T[i])
            rc = model_features(pm, pool, d->tok[i], d->T[i], d->kv[0][i], d->kv[1][i], pred[0][i],
                                pred[1][i], lv == SEQKV_SPEC);
    }
    if (!rc) {
        float *const *pp[2] = {pred[0], pred[1]};
        rc = fit_level(c, d, lv, pp, max_s, pool, quiet);
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

/* Every level's fit: stat (and its atoms) and ctx, then spec (the int8
 * copy's features) and full (the model's) when there is a model */
static int fit_levels(skv_calib *c, const calib_data *d, const skv_calib_opts *opts)
{
    int max_s = opts && opts->max_fit_samples > 0 ? opts->max_fit_samples : 4096;
    int quiet = opts ? opts->quiet : 1;
    float *const *none[2] = {NULL, NULL};
    int rc;
    c->version = SKV_CALIB_VERSION;
    if ((rc = fit_level(c, d, SEQKV_STAT, none, max_s, opts ? opts->pool : NULL, quiet)))
        return rc;
    if ((rc = fit_atoms(c, d)))
        return rc;
    if ((rc = fit_level(c, d, SEQKV_CTX, none, max_s, opts ? opts->pool : NULL, quiet)))
        return rc;
    c->levels = level_bit(SEQKV_STAT) | level_bit(SEQKV_CTX);
    const skv_model *model = opts ? opts->model : NULL;
    if (!model)
        return SKV_OK;
    skv_model *q8 = NULL;
    if ((rc = skv_model_quantize(model, SKV_WQ_INT8, &q8)))
        return rc;
    for (int lv = SEQKV_SPEC; lv <= SEQKV_FULL && !rc; lv++) {
        rc = fit_model_level(c, d, (seqkv_level)lv, lv == SEQKV_SPEC ? q8 : model, opts->pool, max_s,
                             quiet);
        if (!rc)
            c->levels |= level_bit((seqkv_level)lv);
    }
    skv_model_free(q8);
    return rc;
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
    skv_kvseq s0;
    if ((rc = skv_kvfile_get(kvfile, 0, &s0)))
        return rc;
    skv_calib *c = skv_calloc(1, sizeof *c);
    if (!c)
        return skv_error(SKV_ERR_NOMEM, "calibration");
    if ((rc = learn_shape(c, &s0, kvfile, opts ? opts->model : NULL))) {
        skv_free(c);
        return rc;
    }
    calib_data d;
    rc = read_data(kvfile, n_seq, c, &d);
    if (!rc)
        rc = codebook_tokens(c, &d);
    if (rc)
        goto fail;
    rope_init(c);
    if ((rc = means_and_codebook(c, &d)) || (rc = fit_levels(c, &d, opts)))
        goto fail;
    compute_id(c);
    if ((rc = calib_index(c)))
        goto fail;
    data_free(&d);
    *out = c;
    return SKV_OK;
fail:
    data_free(&d);
    skv_calib_free(c);
    return rc;
}
