/* Predictors, calibration and the per-sequence coder.
 *
 * Prediction of scalar (layer l, kv, position t, channel c = head*D + d):
 *   mu = w0*f_model + w1*f_prev + w2*f_cb + w3*f_mean      (float, in order)
 * f_model: the model's K/V for (l, t) computed over exact earlier KV
 *          (spec: int8 copy, full: float32; 0 for stat and ctx)
 * f_prev:  the exact value at t-1 in the same channel (f_mean at t = 0)
 * f_cb:    codebook mean of (l, token_t, kv, c); K is learned before RoPE
 *          and rotated to t; f_mean for tokens never seen in calibration
 * f_mean:  calibrated channel mean
 * Weights per (level, l, kv, head) by least squares; stat uses (0,0,0,1).
 * s per (level, l, kv, c) minimises the measured code length. */
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "codec_tune.h"
#include "skv_delta.h"
#include "skv_dtype_impl.h"

#define NF 4

static const char *const level_names[SKV_LEVEL_COUNT] = {"stat", "ctx", "spec", "full"};

const char *skv_level_name(skv_level l)
{
    return (unsigned)l < SKV_LEVEL_COUNT ? level_names[l] : "?";
}

int skv_level_from_name(const char *s, skv_level *out)
{
    for (int i = 0; i < SKV_LEVEL_COUNT; i++)
        if (strcmp(s, level_names[i]) == 0) {
            *out = (skv_level)i;
            return SKV_OK;
        }
    return skv_error(SKV_ERR_ARG, "unknown level \"%s\" (stat, ctx, spec or full)", s);
}

struct skv_calib {
    skv_kvshape sh;
    unsigned levels;     /* bit mask */
    float *mean;         /* [L][2][C] */
    float *s[SKV_LEVEL_COUNT];  /* [L][2][seen][C] */
    float *w[SKV_LEVEL_COUNT];  /* [L][2][H][seen][NF] */
    float *cb;           /* [L][V][2][C], K before RoPE */
    int32_t *cb_n;       /* [V] */
    uint8_t *cb_ok;      /* [L][V][2]: cb_n 0 or the codebook row all_small (calib_index) */
    uint32_t pemp[256];
    float *inv_freq;     /* [rope_dim/2] */
    int rope_known;
    char model_fp[33];
    uint8_t id[16];
    int version;         /* of the file it came from (1: no atoms), else SKV_CALIB_VERSION */
    /* stat's atoms (skv_atoms) per (layer, k/v, channel): counts, lambda in
     * 2^-16, and the values and counts of every channel's atoms in order */
    uint32_t *at_k, *at_lam; /* [L][2][C] */
    uint32_t *at_val, *at_cnt;
    size_t at_total;
};

/* Mixture weights per level. An escape weight w2 costs a floor of
 * -log2(1 - w2) bits per scalar, and real KV residuals are light-tailed
 * (on stories260K, w1 = 0.009 / w2 = 0.0015 beat the 0.03 / 0.02 default
 * by 0.013 bits at stat and tie at spec), so the statistical levels use
 * those; full, whose predictions are near exact, escapes at 2^-10. The
 * 3s component and the escape still carry outliers, inf and NaN. */
static skv_mix level_mix(skv_level l)
{
    if (l == SKV_LEVEL_FULL)
        return (skv_mix){655u, 64u};
    return (skv_mix){600u, 100u}; /* 0.009, 0.0015: KV residuals are light-tailed */
}

static size_t chan_count(const skv_kvshape *s)
{
    return (size_t)s->kv_heads * (size_t)s->head_dim;
}

const skv_kvshape *skv_calib_shape(const skv_calib *c) { return &c->sh; }
const uint8_t *skv_calib_id(const skv_calib *c) { return c->id; }
int skv_calib_has_level(const skv_calib *c, skv_level l) { return (c->levels >> l) & 1; }
const char *skv_calib_model(const skv_calib *c) { return c->model_fp; }

/* The codebook's bytes (L x V x 2 x C floats; one float for a shape
 * without any), 0 when that overflows */
static size_t cb_bytes(const skv_calib *c)
{
    size_t n = sizeof(float);
    const size_t f[4] = {(size_t)c->sh.layers, (size_t)c->sh.vocab, 2, chan_count(&c->sh)};
    for (int i = 0; i < 4; i++)
        if (__builtin_mul_overflow(n, f[i], &n))
            return 0;
    return n ? n : sizeof(float);
}

void skv_calib_free(skv_calib *c)
{
    if (!c)
        return;
    skv_free(c->mean);
    for (int i = 0; i < SKV_LEVEL_COUNT; i++) {
        skv_free(c->s[i]);
        skv_free(c->w[i]);
    }
    skv_free_huge(c->cb, cb_bytes(c));
    skv_free(c->cb_n);
    skv_free(c->cb_ok);
    skv_free(c->inv_freq);
    skv_free(c->at_k);
    skv_free(c->at_lam);
    skv_free(c->at_val);
    skv_free(c->at_cnt);
    skv_free(c);
}

static int calib_alloc(skv_calib *c)
{
    const size_t L = (size_t)c->sh.layers, C = chan_count(&c->sh), H = (size_t)c->sh.kv_heads,
                 V = (size_t)c->sh.vocab;
    c->mean = skv_calloc(L * 2 * C, sizeof(float));
    for (int i = 0; i < SKV_LEVEL_COUNT; i++) {
        c->s[i] = skv_calloc(L * 2 * 2 * C, sizeof(float));
        c->w[i] = skv_calloc(L * 2 * H * 2 * NF, sizeof(float));
        if (!c->s[i] || !c->w[i])
            return skv_error(SKV_ERR_NOMEM, "calibration");
    }
    /* (read a row a position at random: on huge pages, where they are) */
    c->cb = cb_bytes(c) ? skv_calloc_huge(cb_bytes(c)) : NULL;
    c->cb_n = skv_calloc(V, sizeof(int32_t));
    c->inv_freq = skv_calloc((size_t)(c->sh.rope_dim > 0 ? c->sh.rope_dim : 2), sizeof(float));
    c->at_k = skv_calloc(L * 2 * C, sizeof(uint32_t));
    c->at_lam = skv_calloc(L * 2 * C, sizeof(uint32_t));
    if (!c->at_k || !c->at_lam)
        return skv_error(SKV_ERR_NOMEM, "calibration");
    if (!c->mean || !c->cb || !c->cb_n || !c->inv_freq)
        return skv_error(SKV_ERR_NOMEM, "calibration (codebook of %zu tokens)", V);
    return SKV_OK;
}

static void rope_init(skv_calib *c)
{
    c->rope_known = c->sh.rope_dim >= 2 && c->sh.rope_theta > 1.0f;
    if (!c->rope_known)
        return;
    double lt = skv_log((double)c->sh.rope_theta);
    for (int i = 0; i < c->sh.rope_dim / 2; i++)
        c->inv_freq[i] = (float)skv_exp(-lt * (double)(2 * i) / (double)c->sh.rope_dim);
}

/* Whether rope_row_sc rotates four lanes at a time (and rope_cs applies) */
static int rope_lanes(const skv_calib *c)
{
#ifdef __SSE2__
    const int half = c->sh.rope_dim / 2;
    return c->rope_known && c->sh.rope_layout == SKV_ROPE_PAIR && half % 2 == 0 && half <= 128 &&
           c->sh.head_dim % 4 == 0;
#else
    (void)c;
    return 0;
#endif
}

/* The four-lane factors of position sc (rope_angles' sin, cos pairs),
 * rotating to it (sign +1) or back (-1), into cs: cc then ss, rope_dim
 * floats each (x*cc + swap(x)*ss with ss = (-s, s): a - b is a + (-b),
 * and x0*s + x1*co commutes, so the same bits as the pairs one by one) */
static void rope_cs(const skv_calib *c, const float *sc, int sign, float *cs)
{
    const int half = c->sh.rope_dim / 2;
    for (int i = 0; i < half; i++) {
        const float s = sign > 0 ? sc[2 * i] : -sc[2 * i];
        cs[2 * i] = cs[2 * i + 1] = sc[2 * i + 1];
        cs[2 * half + 2 * i] = -s, cs[2 * half + 2 * i + 1] = s;
    }
}

/* out = the K row v rotated with the factors cs (rope_cs), four lanes at
 * a time (out may be v) */
static void rope_row_cs(const skv_calib *c, const float *v, const float *cs, float *out)
{
#ifdef __SSE2__
    const int half = c->sh.rope_dim / 2, D = c->sh.head_dim, H = c->sh.kv_heads;
    for (int h = 0; h < H; h++) {
        const float *x = v + (size_t)h * D;
        float *o = out + (size_t)h * D;
        int j = 0;
        for (; j < 2 * half; j += 4) {
            __m128 xv = _mm_loadu_ps(x + j);
            __m128 sw = _mm_shuffle_ps(xv, xv, _MM_SHUFFLE(2, 3, 0, 1));
            _mm_storeu_ps(o + j, _mm_add_ps(_mm_mul_ps(xv, _mm_loadu_ps(cs + j)),
                                            _mm_mul_ps(sw, _mm_loadu_ps(cs + 2 * half + j))));
        }
        for (; j < D; j++)
            o[j] = x[j];
    }
#else
    (void)c, (void)v, (void)cs, (void)out;
#endif
}

/* Rotate every head of a K row (C channels) to position pos (sign = +1) or
 * back from it (sign = -1), as the engine does. */
static void rope_angles(const skv_calib *c, size_t pos, int i, float *s, float *co)
{
    float ang = (float)pos * c->inv_freq[i];
    double sd, cd;
    skv_sincos((double)ang, &sd, &cd);
    *s = (float)sd;
    *co = (float)cd;
}

/* sc: NULL, or rope_angles of pos for every i (sin, cos pairs), as made
 * once per sequence by the coder */
static void rope_row_sc(const skv_calib *c, float *v, size_t pos, int sign, const float *sc)
{
    if (!c->rope_known)
        return;
    /* the shape in locals: the stores to v could alias c for all the
     * compiler knows (-fno-strict-aliasing) */
    const int half = c->sh.rope_dim / 2, H = c->sh.kv_heads, pair = c->sh.rope_layout == SKV_ROPE_PAIR;
    if (sc && rope_lanes(c)) { /* adjacent pairs four lanes at a time */
        float cs[512];
        rope_cs(c, sc, sign, cs);
        rope_row_cs(c, v, cs, v);
        return;
    }
    const int D = c->sh.head_dim;
    for (int i = 0; i < half; i++) {
        float sn, co;
        if (sc)
            sn = sc[2 * i], co = sc[2 * i + 1];
        else
            rope_angles(c, pos, i, &sn, &co);
        const float s = sign > 0 ? sn : -sn;
        const int a = pair ? 2 * i : i, b = pair ? 2 * i + 1 : i + half;
        for (int h = 0; h < H; h++) {
            float *x = v + (size_t)h * D;
            const float x0 = x[a], x1 = x[b];
            x[a] = x0 * co - x1 * s;
            x[b] = x0 * s + x1 * co;
        }
    }
}

static void rope_row(const skv_calib *c, float *v, size_t pos, int sign)
{
    rope_row_sc(c, v, pos, sign, NULL);
}

static void compute_id(skv_calib *c)
{
    const size_t L = (size_t)c->sh.layers, C = chan_count(&c->sh), H = (size_t)c->sh.kv_heads,
                 V = (size_t)c->sh.vocab;
    crypto_generichash_state st;
    crypto_generichash_init(&st, NULL, 0, 16);
    int32_t hdr[] = {c->version, c->sh.layers, c->sh.kv_heads, c->sh.head_dim, c->sh.vocab,
                     (int32_t)c->sh.dtype, c->sh.rope_dim, (int32_t)c->sh.rope_layout,
                     (int32_t)c->levels, c->rope_known};
    uint8_t b[4];
    for (size_t i = 0; i < sizeof hdr / 4; i++) {
        skv_store32_le(b, (uint32_t)hdr[i]);
        crypto_generichash_update(&st, b, 4);
    }
#define HASHF(p, n)                                                                              \
    for (size_t i_ = 0; i_ < (n); i_++) {                                                        \
        skv_store32_le(b, skv_f32_bits((p)[i_]));                                                \
        crypto_generichash_update(&st, b, 4);                                                    \
    }
    float th = c->sh.rope_theta;
    HASHF(&th, 1);
    HASHF(c->mean, L * 2 * C);
    for (int l = 0; l < SKV_LEVEL_COUNT; l++) {
        HASHF(c->s[l], L * 2 * 2 * C);
        HASHF(c->w[l], L * 2 * H * 2 * NF);
    }
    HASHF(c->cb, L * V * 2 * C);
#undef HASHF
    for (size_t i = 0; i < V; i++) {
        skv_store32_le(b, (uint32_t)c->cb_n[i]);
        crypto_generichash_update(&st, b, 4);
    }
    for (int i = 0; i < 256; i++) {
        skv_store32_le(b, c->pemp[i]);
        crypto_generichash_update(&st, b, 4);
    }
    crypto_generichash_update(&st, (const uint8_t *)c->model_fp, 32);
    if (c->version >= 2) { /* atoms */
        const uint32_t *arr[4] = {c->at_k, c->at_lam, c->at_val, c->at_cnt};
        const size_t len[4] = {L * 2 * C, L * 2 * C, c->at_total, c->at_total};
        for (int a = 0; a < 4; a++)
            for (size_t i = 0; i < len[a]; i++) {
                skv_store32_le(b, arr[a][i]);
                crypto_generichash_update(&st, b, 4);
            }
    }
    crypto_generichash_final(&st, c->id, 16);
}

/* ---- features ----------------------------------------------------------- */

/* Codebook feature row for (l, kv, token, position): C floats into out.
 * `loo` removes one occurrence (the value `self`, pre-RoPE for K) for
 * leave-one-out fitting. */
static void cb_feature_sc(const skv_calib *c, int l, int kv, int32_t tok, size_t pos,
                          const float *self, const float *sc, const float *cs, float *out)
{
    const size_t C = chan_count(&c->sh);
    const float *mean = c->mean + ((size_t)l * 2 + kv) * C;
    int32_t n = c->cb_n[tok];
    if (n - (self ? 1 : 0) <= 0) {
        memcpy(out, mean, C * sizeof(float));
        return;
    }
    const float *e = c->cb + (((size_t)l * c->sh.vocab + (size_t)tok) * 2 + kv) * C;
    if (kv == 0 && cs && !self) { /* rotated straight from the codebook */
        rope_row_cs(c, e, cs, out);
        return;
    }
    if (self) {
        for (size_t i = 0; i < C; i++)
            out[i] = (e[i] * (float)n - self[i]) / (float)(n - 1);
    } else {
        memcpy(out, e, C * sizeof(float));
    }
    if (kv == 0)
        rope_row_sc(c, out, pos, +1, sc);
}

static void cb_feature(const skv_calib *c, int l, int kv, int32_t tok, size_t pos,
                       const float *self, float *out)
{
    cb_feature_sc(c, l, kv, tok, pos, self, NULL, NULL, out);
}

/* Store dtype bits x at p (LE) and return their float value. */
static inline float store_bits(skv_dtype dt, uint8_t *p, uint32_t x)
{
    switch (dt) {
    case SKV_DT_BF16:
        skv_store16_le(p, (uint16_t)x);
        return skv__bf16_to_f32((uint16_t)x);
    case SKV_DT_F16:
        skv_store16_le(p, (uint16_t)x);
        return skv__f16_to_f32((uint16_t)x);
    case SKV_DT_F8E4M3:
        p[0] = (uint8_t)x;
        return skv__f8e4m3_to_f32((uint8_t)x);
    default:
        skv_store32_le(p, x);
        return skv_bits_f32(x);
    }
}

static inline float predict(const float *w, float fm, float fp, float fc, float fmean)
{
    return ((w[0] * fm + w[1] * fp) + w[2] * fc) + w[3] * fmean;
}

typedef float skv_v4f __attribute__((vector_size(16)));
/* predict() over a whole row, four lanes at a time, with each channel's
 * weights (wc: the NF weights of its head, feature after feature, C
 * each): each lane is the same IEEE single-precision products and sums in
 * the same order (no contraction: -ffp-contract=off), so the result is
 * predict()'s bit for bit (the plain path, SEQKV_PLAIN); fm NULL reads as
 * 0. */
static inline void predict_row(const float *wc, size_t C, const float *fm, const float *fp,
                               const float *fc, const float *fmean, float *out)
{
    const float *w0 = wc, *w1 = wc + C, *w2 = wc + 2 * C, *w3 = wc + 3 * C;
    const skv_v4f zero = {0.0f, 0.0f, 0.0f, 0.0f};
    size_t i = 0;
    for (; i + 4 <= C; i += 4) {
        skv_v4f a0, a1, a2, a3, a, b, c, m, r;
        memcpy(&a0, w0 + i, sizeof a0);
        memcpy(&a1, w1 + i, sizeof a1);
        memcpy(&a2, w2 + i, sizeof a2);
        memcpy(&a3, w3 + i, sizeof a3);
        if (fm)
            memcpy(&a, fm + i, sizeof a);
        else
            a = zero;
        memcpy(&b, fp + i, sizeof b);
        memcpy(&c, fc + i, sizeof c);
        memcpy(&m, fmean + i, sizeof m);
        r = ((a0 * a + a1 * b) + a2 * c) + a3 * m;
        memcpy(out + i, &r, sizeof r);
    }
    for (; i < C; i++)
        out[i] = ((w0[i] * (fm ? fm[i] : 0.0f) + w1[i] * fp[i]) + w2[i] * fc[i]) + w3[i] * fmean[i];
}

/* Whether every weight of the model, previous-position and codebook
 * features is +0 (bits), for every head of one seen-class: then, with no
 * model feature and finite previous and codebook features, predict() is
 * predict(w, 0, 0, 0, mean) (every zero term sums to +0), and the codebook
 * feature need not be computed (stat). */
static int mean_only(const float *W, size_t H, size_t seen)
{
    for (size_t h = 0; h < H; h++) {
        const float *w = W + (h * 2 + seen) * NF;
        for (int k = 0; k < 3; k++)
            if (skv_f32_bits(w[k]) != 0)
                return 0;
    }
    return 1;
}

/* every value of magnitude at most 2^100, so finite (and RoPE of such a
 * row stays finite); four lanes at a time on the bits */
static int all_small(const float *v, size_t n)
{
    return !skv_any_above32(v, n, 0x7fffffffu, 0x71800000u);
}

/* Stat codes a run of constant rows (the same mu and s row) in one codec
 * call of up to this many rows: about 16k scalars, at least one row. */
static size_t batch_rows(size_t C)
{
    return C < 16384 ? 16384 / C : 1;
}

/* The largest magnitude (dtype bits without the sign) whose value passes
 * all_small's test (finite, at most 2^100): get_rows stops after a row
 * above it, since the next row's prediction is then not the constant. */
static uint32_t small_mag(skv_dtype dt)
{
    switch (dt) {
    case SKV_DT_BF16: return 0x7180u;
    case SKV_DT_F16: return 0x7bffu;    /* every finite half */
    case SKV_DT_F8E4M3: return 0x7eu;   /* every finite e4m3 (0x7f: NaN) */
    default: return 0x71800000u;
    }
}

/* The coder's per-row test of the codebook feature (stat's constant rows
 * need it finite, with all_small's margin) is a constant of the
 * calibration: worked out once when a calibration is made or loaded. */
static int calib_index(skv_calib *c)
{
    const size_t L = (size_t)c->sh.layers, C = chan_count(&c->sh), V = (size_t)c->sh.vocab;
    skv_free(c->cb_ok);
    if (!(c->cb_ok = skv_malloc(L * V > 0 ? L * V * 2 : 1)))
        return skv_error(SKV_ERR_NOMEM, "calibration (codebook index of %zu tokens)", V);
    for (size_t j = 0; j < L * V * 2; j++)
        c->cb_ok[j] = c->cb_n[(j / 2) % V] <= 0 || all_small(c->cb + j * C, C);
    return SKV_OK;
}

/* ---- calibration ----------------------------------------------------------- */

typedef struct {
    size_t n_seq;
    size_t *T;
    int32_t **tok;
    float **kv[2];   /* per sequence [L][T][C] */
    uint32_t **bits[2];
} calib_data;

static void data_free(calib_data *d)
{
    for (size_t i = 0; i < d->n_seq; i++) {
        if (d->tok)
            skv_free(d->tok[i]);
        for (int k = 0; k < 2; k++) {
            if (d->kv[k])
                skv_free(d->kv[k][i]);
            if (d->bits[k])
                skv_free(d->bits[k][i]);
        }
    }
    skv_free(d->T);
    skv_free(d->tok);
    for (int k = 0; k < 2; k++) {
        skv_free(d->kv[k]);
        skv_free(d->bits[k]);
    }
}

static uint32_t load_bits(skv_dtype dt, const uint8_t *p)
{
    switch (dt) {
    case SKV_DT_F32: return skv_load32_le(p);
    case SKV_DT_F8E4M3: return p[0];
    default: return skv_load16_le(p);
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

/* Solve the NF x NF system A w = b (A symmetric) by Gaussian elimination
 * with partial pivoting; unused features have zero rows and get w = 0. */
static void solve(double A[NF][NF], double b[NF], const int *use, float *w)
{
    double M[NF][NF + 1];
    int idx[NF], n = 0;
    for (int i = 0; i < NF; i++)
        if (use[i])
            idx[n++] = i;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++)
            M[i][j] = A[idx[i]][idx[j]] + (i == j ? 1e-6 * (A[idx[i]][idx[i]] + 1e-12) : 0);
        M[i][n] = b[idx[i]];
    }
    for (int col = 0; col < n; col++) {
        int piv = col;
        for (int r = col + 1; r < n; r++)
            if (fabs(M[r][col]) > fabs(M[piv][col]))
                piv = r;
        for (int j = 0; j <= n; j++) {
            double t = M[col][j];
            M[col][j] = M[piv][j];
            M[piv][j] = t;
        }
        if (fabs(M[col][col]) < 1e-300)
            continue;
        for (int r = 0; r < n; r++) {
            if (r == col)
                continue;
            double f = M[r][col] / M[col][col];
            for (int j = col; j <= n; j++)
                M[r][j] -= f * M[col][j];
        }
    }
    for (int i = 0; i < NF; i++)
        w[i] = 0.0f;
    for (int i = 0; i < n; i++)
        w[idx[i]] = fabs(M[i][i]) < 1e-300 ? 0.0f : (float)(M[i][n] / M[i][i]);
}

/* Total coded size (bits) of the samples under spread s. */
static double total_cost(skv_cmodel *cm, const uint32_t *x, const float *mu, size_t n, float s)
{
    double tot = 0;
    for (size_t i = 0; i < n; i++) {
        double a;
        skv_cmodel_cost(cm, x[i], mu[i], s, &a, NULL);
        tot += a;
    }
    return tot;
}

/* Choose s for one channel: the candidate with the smallest total coded
 * size over the samples (x bits, mu): a coarse sweep by 2^(1/2) over
 * 2^-20..2^4 times the residual RMS, then steps of 2^(1/8) around the best. */
static float fit_s(skv_cmodel *cm, const uint32_t *x, const float *mu, size_t n, double rms,
                   double typical)
{
    double base = rms > 0 ? rms : typical;
    if (!(base > 0))
        base = 1e-3;
    double best = INFINITY;
    float best_s = (float)base;
    for (int k = -40; k <= 8; k++) {
        float s = (float)(base * skv_exp(0.34657359 * k));
        double tot = total_cost(cm, x, mu, n, s);
        if (tot < best) {
            best = tot;
            best_s = s;
        }
    }
    const float center = best_s;
    for (int k = -3; k <= 3; k++) {
        float s = (float)((double)center * skv_exp(0.08664339 * k));
        double tot = k ? total_cost(cm, x, mu, n, s) : INFINITY;
        if (tot < best) {
            best = tot;
            best_s = s;
        }
    }
    return best_s;
}

/* Calibration sample (sequence sq, layer l, kv, position t): its exact row
 * (returned) and the leave-one-out codebook row (into cbf; self is
 * scratch for the row before RoPE). */
static const float *loo_features(const skv_calib *c, const calib_data *d, size_t sq, size_t l,
                                 int kv, size_t t, float *self, float *cbf)
{
    const size_t C = chan_count(&c->sh), T = d->T[sq];
    const float *row = d->kv[kv][sq] + (l * T + t) * C;
    memcpy(self, row, C * sizeof(float));
    if (kv == 0)
        rope_row(c, self, t, -1);
    cb_feature(c, (int)l, kv, d->tok[sq][t], t, self, cbf);
    return row;
}

/* The four features of channel ch of that sample, as the coder sees them:
 * model, previous position, codebook, mean. */
static inline void features(const skv_calib *c, const calib_data *d, float *const *model_pred,
                            size_t sq, size_t l, int kv, size_t t, size_t ch, const float *cbf,
                            float f[NF])
{
    const size_t C = chan_count(&c->sh), T = d->T[sq];
    const float *mean = c->mean + (l * 2 + (size_t)kv) * C;
    f[0] = model_pred ? model_pred[sq][(l * T + t) * C + ch] : 0.0f;
    f[1] = t ? d->kv[kv][sq][(l * T + t - 1) * C + ch] : mean[ch];
    f[2] = cbf[ch];
    f[3] = mean[ch];
}

static int fit_level(skv_calib *c, const calib_data *d, skv_level lvl, float *const *model_pred[2],
                     int max_samples, int quiet)
{
    const size_t L = (size_t)c->sh.layers, C = chan_count(&c->sh), H = (size_t)c->sh.kv_heads,
                 D = (size_t)c->sh.head_dim;
    int use[NF] = {lvl >= SKV_LEVEL_SPEC, lvl >= SKV_LEVEL_CTX, lvl >= SKV_LEVEL_CTX, 1};
    skv_cmodel *cm;
    int rc = skv_cmodel_create(c->sh.dtype, level_mix(lvl), c->pemp, &cm);
    if (rc)
        return rc;
    size_t total = 0;
    for (size_t i = 0; i < d->n_seq; i++)
        total += d->T[i];
    size_t ns = (total < (size_t)max_samples ? total : (size_t)max_samples) + 2;
    uint32_t *xs = skv_malloc(ns * D * sizeof *xs);
    float *mus = skv_malloc(ns * D * sizeof *mus);
    float *cbf = skv_malloc(C * sizeof *cbf), *self = skv_malloc(C * sizeof *self);
    double *res2 = skv_calloc(D, sizeof *res2), *mag = skv_calloc(D, sizeof *mag);
    size_t *cnt = skv_calloc(D, sizeof *cnt);
    if (!xs || !mus || !cbf || !self || !res2 || !mag || !cnt) {
        rc = skv_error(SKV_ERR_NOMEM, "calibration samples");
        goto done;
    }
    for (size_t l = 0; l < L && !rc; l++) {
        for (int kv = 0; kv < 2; kv++) {
            for (size_t h = 0; h < H; h++) {
                /* Separate parameters for tokens the codebook has seen and
                 * for the rest (leave-one-out: "seen" means another
                 * occurrence exists), so exact codebook hits cost ~0 bits
                 * without pricing unseen tokens as outliers. */
                for (size_t seen = 0; seen < 2; seen++) {
                    float *w = c->w[lvl] + (((l * 2 + (size_t)kv) * H + h) * 2 + seen) * NF;
                    double A[NF][NF] = {{0}}, bvec[NF] = {0};
                    size_t nsamp = 0;
                    /* 1) least squares (leave-one-out codebook) */
                    for (size_t sq = 0; sq < d->n_seq; sq++) {
                        size_t T = d->T[sq];
                        for (size_t t = 0; t < T; t++) {
                            if ((size_t)(c->cb_n[d->tok[sq][t]] > 1) != seen)
                                continue;
                            nsamp++;
                            if (lvl == SKV_LEVEL_STAT)
                                continue;
                            const float *row = loo_features(c, d, sq, l, kv, t, self, cbf);
                            for (size_t dd = 0; dd < D; dd++) {
                                size_t ch = h * D + dd;
                                float f4[NF];
                                features(c, d, model_pred[kv], sq, l, kv, t, ch, cbf, f4);
                                double f[NF] = {f4[0], f4[1], f4[2], f4[3]};
                                for (int i = 0; i < NF; i++) {
                                    for (int j = 0; j < NF; j++)
                                        A[i][j] += f[i] * f[j];
                                    bvec[i] += f[i] * row[ch];
                                }
                            }
                        }
                    }
                    if (lvl == SKV_LEVEL_STAT || nsamp == 0) {
                        memset(w, 0, NF * sizeof *w);
                        w[3] = 1.0f;
                        if (nsamp == 0 && lvl != SKV_LEVEL_STAT && seen == 1)
                            memcpy(w, w - NF, NF * sizeof *w); /* no seen samples: as unseen */
                    } else {
                        solve(A, bvec, use, w);
                    }
                    /* 2) s per channel by measured code length on a subsample */
                    size_t st = nsamp > (size_t)max_samples ? (nsamp + (size_t)max_samples - 1) / (size_t)max_samples : 1;
                    for (size_t dd = 0; dd < D; dd++)
                        res2[dd] = mag[dd] = 0, cnt[dd] = 0;
                    size_t g = 0;
                    for (size_t sq = 0; sq < d->n_seq; sq++) {
                        size_t T = d->T[sq];
                        for (size_t t = 0; t < T; t++) {
                            if ((size_t)(c->cb_n[d->tok[sq][t]] > 1) != seen)
                                continue;
                            if (g++ % st || cnt[0] >= ns)
                                continue;
                            const float *row = loo_features(c, d, sq, l, kv, t, self, cbf);
                            for (size_t dd = 0; dd < D; dd++) {
                                size_t ch = h * D + dd;
                                float f4[NF];
                                features(c, d, model_pred[kv], sq, l, kv, t, ch, cbf, f4);
                                float mu = predict(w, f4[0], f4[1], f4[2], f4[3]);
                                size_t k = cnt[dd]++;
                                xs[dd * ns + k] = d->bits[kv][sq][(l * T + t) * C + ch];
                                mus[dd * ns + k] = mu;
                                double e = (double)row[ch] - mu;
                                res2[dd] += e * e;
                                mag[dd] += fabs((double)row[ch]);
                            }
                        }
                    }
                    float *sv = c->s[lvl] + ((l * 2 + (size_t)kv) * 2 + seen) * C;
                    for (size_t dd = 0; dd < D; dd++) {
                        size_t n = cnt[dd];
                        double rms = n ? sqrt(res2[dd] / (double)n) : 0;
                        double typ = n ? mag[dd] / (double)n / 128.0 : 1e-3;
                        if (n == 0 && seen == 1)
                            sv[h * D + dd] = sv[h * D + dd - C]; /* as unseen */
                        else
                            sv[h * D + dd] = n ? fit_s(cm, xs + dd * ns, mus + dd * ns, n, rms, typ) : 1.0f;
                    }
                }
            }
        }
        if (!quiet)
            fprintf(stderr, isatty(2) ? "\rcalibrate: %s layer %zu/%zu" : "calibrate: %s layer %zu/%zu\n",
                    skv_level_name(lvl), l + 1, L);
    }
    if (!quiet && isatty(2))
        fprintf(stderr, "\n");
done:
    skv_free(xs);
    skv_free(mus);
    skv_free(cbf);
    skv_free(self);
    skv_free(res2);
    skv_free(mag);
    skv_free(cnt);
    skv_cmodel_free(cm);
    return rc;
}

/* ---- stat's atoms -------------------------------------------------------------- */

/* A value is an atom of its channel when calibration saw it at least
 * ATOM_MIN_COUNT times (at most SKV_ATOMS_MAX per channel, the most frequent). */
#define ATOM_MIN_COUNT 2

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* (value, count) pairs: by count descending, then value */
static int cmp_by_count(const void *a, const void *b)
{
    const uint32_t *x = a, *y = b;
    if (x[1] != y[1])
        return x[1] > y[1] ? -1 : 1;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Atoms of stat per (layer, k/v, channel), with lambda chosen by the
 * measured code length of the calibration samples, each coded against the
 * counts of the others (leave one out): an atom symbol costs
 * -log2(lambda * (count - 1) / (sum - 1)), any other scalar -log2(1 - lambda)
 * plus its cost under the mixture; lambda = 0 (no atoms, no atom symbol)
 * when nothing beats the mixture alone. Layer 0's V is a function of the
 * token alone, so its channels take few distinct values. */
static int fit_atoms(skv_calib *c, const calib_data *d)
{
    const size_t L = (size_t)c->sh.layers, C = chan_count(&c->sh);
    size_t N = 0;
    for (size_t i = 0; i < d->n_seq; i++)
        N += d->T[i];
    skv_cmodel *cm;
    int rc = skv_cmodel_create(c->sh.dtype, level_mix(SKV_LEVEL_STAT), c->pemp, &cm);
    if (rc)
        return rc;
    uint32_t *xs = skv_malloc((N ? N : 1) * sizeof *xs), *srt = skv_malloc((N ? N : 1) * sizeof *srt);
    uint32_t *pairs = skv_malloc((N ? N : 1) * 2 * sizeof *pairs);
    double *g = skv_malloc((N ? N : 1) * sizeof *g);
    uint8_t *seen = skv_malloc(N ? N : 1);
    size_t cap = 0;
    if (!xs || !srt || !pairs || !g || !seen)
        rc = skv_error(SKV_ERR_NOMEM, "calibration atoms");
    /* lambda candidates, 2^-16 units: j/16, then 1 - 2^-j */
    uint32_t lams[21];
    int nl = 0;
    for (int j = 1; j < 16; j++)
        lams[nl++] = (uint32_t)j << 12;
    for (int j = 5; j <= 10; j++)
        lams[nl++] = 65536u - (65536u >> j);
    c->at_total = 0;
    for (size_t l = 0; l < L && !rc; l++)
        for (int kv = 0; kv < 2 && !rc; kv++)
            for (size_t ch = 0; ch < C && !rc; ch++) {
                size_t idx = (l * 2 + (size_t)kv) * C + ch, n = 0;
                for (size_t sq = 0; sq < d->n_seq; sq++)
                    for (size_t t = 0; t < d->T[sq]; t++) {
                        seen[n] = c->cb_n[d->tok[sq][t]] > 1;
                        xs[n++] = d->bits[kv][sq][(l * d->T[sq] + t) * C + ch];
                    }
                memcpy(srt, xs, n * sizeof *srt);
                qsort(srt, n, sizeof *srt, cmp_u32);
                size_t k = 0;
                for (size_t i = 0; i < n;) {
                    size_t j = i;
                    while (j < n && srt[j] == srt[i])
                        j++;
                    if (j - i >= ATOM_MIN_COUNT) {
                        pairs[2 * k] = srt[i];
                        pairs[2 * k + 1] = (uint32_t)(j - i);
                        k++;
                    }
                    i = j;
                }
                c->at_k[idx] = 0;
                c->at_lam[idx] = 0;
                if (k == 0)
                    continue;
                if (k > SKV_ATOMS_MAX) {
                    qsort(pairs, k, 2 * sizeof *pairs, cmp_by_count);
                    k = SKV_ATOMS_MAX;
                }
                qsort(pairs, k, 2 * sizeof *pairs, cmp_u32); /* by value */
                uint64_t sum = 0;
                for (size_t j = 0; j < k; j++)
                    sum += pairs[2 * j + 1];
                const float mu = c->mean[(l * 2 + (size_t)kv) * C + ch];
                const float *sv = c->s[SKV_LEVEL_STAT] + (l * 2 + (size_t)kv) * 2 * C + ch;
                double base = 0, gsum_none = 0;
                size_t n_atom = 0;
                double atom_bits = 0; /* sum of -log2((count - 1) / (sum - 1)) */
                for (size_t i = 0; i < n; i++) {
                    skv_cmodel_cost(cm, xs[i], mu, sv[seen[i] ? C : 0], &g[i], NULL);
                    base += g[i];
                    size_t lo = 0, hi = k; /* the value's atom, if any */
                    while (lo < hi) {
                        size_t mid = (lo + hi) / 2;
                        if (pairs[2 * mid] < xs[i])
                            lo = mid + 1;
                        else
                            hi = mid;
                    }
                    uint32_t cnt = lo < k && pairs[2 * lo] == xs[i] ? pairs[2 * lo + 1] : 0;
                    if (cnt > ATOM_MIN_COUNT) { /* still an atom without this sample */
                        n_atom++;
                        atom_bits -= skv_log((double)(cnt - 1) / (double)(sum - 1)) / 0.69314718055994530942;
                    } else {
                        gsum_none += g[i];
                    }
                }
                double best = base;
                uint32_t best_lam = 0;
                for (int j = 0; j < nl; j++) {
                    double lam = (double)lams[j] / 65536.0;
                    double tot = atom_bits - (double)n_atom * skv_log(lam) / 0.69314718055994530942 +
                                 gsum_none - (double)(n - n_atom) * skv_log(1.0 - lam) / 0.69314718055994530942;
                    if (tot < best) {
                        best = tot;
                        best_lam = lams[j];
                    }
                }
                if (!best_lam)
                    continue;
                if (c->at_total + k > cap) {
                    size_t nc = cap ? 2 * cap : 4096;
                    while (nc < c->at_total + k)
                        nc *= 2;
                    uint32_t *v = skv_realloc(c->at_val, nc * sizeof *v);
                    if (v)
                        c->at_val = v;
                    uint32_t *q = skv_realloc(c->at_cnt, nc * sizeof *q);
                    if (q)
                        c->at_cnt = q;
                    if (!v || !q) {
                        rc = skv_error(SKV_ERR_NOMEM, "calibration atoms");
                        break;
                    }
                    cap = nc;
                }
                for (size_t j = 0; j < k; j++) {
                    c->at_val[c->at_total + j] = pairs[2 * j];
                    c->at_cnt[c->at_total + j] = pairs[2 * j + 1];
                }
                c->at_total += k;
                c->at_k[idx] = (uint32_t)k;
                c->at_lam[idx] = best_lam;
            }
    skv_free(xs);
    skv_free(srt);
    skv_free(pairs);
    skv_free(g);
    skv_free(seen);
    skv_cmodel_free(cm);
    return rc;
}

static int parse_float_meta(const skv_st *st, const char *key, float *out)
{
    const char *v = skv_st_meta(st, key);
    if (!v)
        return -1;
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end)
        return -1;
    *out = (float)x;
    return 0;
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
    c->sh.layers = s0.layers;
    c->sh.kv_heads = s0.kv_heads;
    c->sh.head_dim = s0.head_dim;
    c->sh.dtype = s0.dtype;
    c->sh.vocab = 0;
    const skv_model *model = opts ? opts->model : NULL;
    if (model) {
        const skv_model_config *mc = skv_model_cfg(model);
        if (mc->n_layers != s0.layers || mc->n_kv_heads != s0.kv_heads || mc->head_dim != s0.head_dim) {
            skv_free(c);
            return skv_error(SKV_ERR_SHAPE, "model shape (%d layers, %d kv heads, head_dim %d) does not match the KV (%d, %d, %d)",
                             mc->n_layers, mc->n_kv_heads, mc->head_dim, s0.layers, s0.kv_heads, s0.head_dim);
        }
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
    calib_data d;
    memset(&d, 0, sizeof d);
    d.n_seq = n_seq;
    d.T = skv_calloc(n_seq, sizeof *d.T);
    d.tok = skv_calloc(n_seq, sizeof *d.tok);
    for (int k = 0; k < 2; k++) {
        d.kv[k] = skv_calloc(n_seq, sizeof *d.kv[k]);
        d.bits[k] = skv_calloc(n_seq, sizeof *d.bits[k]);
    }
    const size_t L = (size_t)c->sh.layers, C = chan_count(&c->sh);
    int32_t max_tok = 0;
    if (!d.T || !d.tok || !d.kv[0] || !d.kv[1] || !d.bits[0] || !d.bits[1])
        rc = skv_error(SKV_ERR_NOMEM, "calibration data");
    for (size_t i = 0; i < n_seq && !rc; i++) {
        skv_kvseq s;
        if ((rc = skv_kvfile_get(kvfile, i, &s)))
            break;
        if (s.layers != c->sh.layers || s.kv_heads != c->sh.kv_heads || s.head_dim != c->sh.head_dim ||
            s.dtype != c->sh.dtype) {
            rc = skv_error(SKV_ERR_SHAPE, "sequence %zu has another shape or dtype than sequence 0", i);
            break;
        }
        size_t T = s.T, n = L * T * C;
        d.T[i] = T;
        d.tok[i] = skv_malloc((T ? T : 1) * sizeof(int32_t));
        for (int k = 0; k < 2; k++) {
            d.kv[k][i] = skv_malloc((n ? n : 1) * sizeof(float));
            d.bits[k][i] = skv_malloc((n ? n : 1) * sizeof(uint32_t));
        }
        if (!d.tok[i] || !d.kv[0][i] || !d.kv[1][i] || !d.bits[0][i] || !d.bits[1][i]) {
            rc = skv_error(SKV_ERR_NOMEM, "calibration data");
            break;
        }
        for (size_t t = 0; t < T; t++) {
            d.tok[i][t] = (int32_t)skv_load32_le((const uint8_t *)s.tokens + 4 * t);
            if (d.tok[i][t] < 0) {
                rc = skv_error(SKV_ERR_FORMAT, "sequence %zu: negative token id", i);
                break;
            }
            if (d.tok[i][t] > max_tok)
                max_tok = d.tok[i][t];
        }
        size_t es = skv_dtype_size(s.dtype);
        for (int k = 0; k < 2 && !rc; k++) {
            const uint8_t *src = k ? s.v : s.k;
            skv_cast_to_f32(s.dtype, d.kv[k][i], src, n);
            for (size_t j = 0; j < n; j++)
                d.bits[k][i][j] = load_bits(s.dtype, src + j * es);
        }
    }
    if (!rc && c->sh.vocab <= max_tok)
        c->sh.vocab = max_tok + 1;
    if (!rc)
        rc = calib_alloc(c);
    if (rc)
        goto fail;
    rope_init(c);
    /* means, codebook sums, p_emp */
    size_t tot = 0;
    for (size_t i = 0; i < n_seq; i++) {
        size_t T = d.T[i];
        tot += T;
        float *row = skv_malloc(C * sizeof(float));
        if (!row) {
            rc = skv_error(SKV_ERR_NOMEM, "calibration");
            goto fail;
        }
        for (int k = 0; k < 2; k++)
            for (size_t l = 0; l < L; l++)
                for (size_t t = 0; t < T; t++) {
                    const float *x = d.kv[k][i] + (l * T + t) * C;
                    memcpy(row, x, C * sizeof(float));
                    if (k == 0)
                        rope_row(c, row, t, -1);
                    float *e = c->cb + ((l * (size_t)c->sh.vocab + (size_t)d.tok[i][t]) * 2 + (size_t)k) * C;
                    float *mn = c->mean + (l * 2 + (size_t)k) * C;
                    for (size_t ch = 0; ch < C; ch++) {
                        e[ch] += row[ch];
                        mn[ch] += x[ch];
                        c->pemp[d.bits[k][i][(l * T + t) * C + ch] >> (8 * skv_dtype_size(c->sh.dtype) - 8)]++;
                    }
                }
        for (size_t t = 0; t < T; t++)
            c->cb_n[d.tok[i][t]]++;
        skv_free(row);
    }
    for (size_t j = 0; j < L * 2 * C; j++)
        c->mean[j] = tot ? c->mean[j] / (float)tot : 0.0f;
    for (size_t l = 0; l < L; l++)
        for (size_t v = 0; v < (size_t)c->sh.vocab; v++)
            for (size_t j = 0; j < 2 * C; j++)
                if (c->cb_n[v])
                    c->cb[(l * (size_t)c->sh.vocab + v) * 2 * C + j] /= (float)c->cb_n[v];
    int max_s = opts && opts->max_fit_samples > 0 ? opts->max_fit_samples : 4096;
    int quiet = opts ? opts->quiet : 1;
    float *const *none[2] = {NULL, NULL};
    c->version = SKV_CALIB_VERSION;
    if ((rc = fit_level(c, &d, SKV_LEVEL_STAT, none, max_s, quiet)))
        goto fail;
    if ((rc = fit_atoms(c, &d)))
        goto fail;
    if ((rc = fit_level(c, &d, SKV_LEVEL_CTX, none, max_s, quiet)))
        goto fail;
    c->levels = 1u << SKV_LEVEL_STAT | 1u << SKV_LEVEL_CTX;
    if (model) {
        skv_model *q8 = NULL;
        if ((rc = skv_model_quantize(model, SKV_WQ_INT8, &q8)))
            goto fail;
        for (int lv = SKV_LEVEL_SPEC; lv <= SKV_LEVEL_FULL && !rc; lv++) {
            const skv_model *pm = lv == SKV_LEVEL_SPEC ? q8 : model;
            float **pred[2] = {skv_calloc(n_seq, sizeof(float *)), skv_calloc(n_seq, sizeof(float *))};
            if (!pred[0] || !pred[1])
                rc = skv_error(SKV_ERR_NOMEM, "model features");
            for (size_t i = 0; i < n_seq && !rc; i++) {
                size_t n = L * d.T[i] * C;
                pred[0][i] = skv_malloc((n ? n : 1) * sizeof(float));
                pred[1][i] = skv_malloc((n ? n : 1) * sizeof(float));
                if (!pred[0][i] || !pred[1][i])
                    rc = skv_error(SKV_ERR_NOMEM, "model features");
                else if (d.T[i])
                    rc = model_features(pm, opts->pool, d.tok[i], d.T[i], d.kv[0][i], d.kv[1][i],
                                        pred[0][i], pred[1][i], lv == SKV_LEVEL_SPEC);
            }
            if (!rc) {
                float *const *pp[2] = {pred[0], pred[1]};
                rc = fit_level(c, &d, (skv_level)lv, pp, max_s, quiet);
            }
            for (size_t i = 0; i < n_seq; i++) {
                if (pred[0])
                    skv_free(pred[0][i]);
                if (pred[1])
                    skv_free(pred[1][i]);
            }
            skv_free(pred[0]);
            skv_free(pred[1]);
            if (!rc)
                c->levels |= 1u << lv;
        }
        skv_model_free(q8);
        if (rc)
            goto fail;
    }
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

/* ---- persistence: a safetensors file ---------------------------------------- */

static int calib_writer(const skv_calib *c, skv_st_writer **out)
{
    *out = NULL;
    const int64_t L = c->sh.layers, C = (int64_t)chan_count(&c->sh), H = c->sh.kv_heads,
                  V = c->sh.vocab;
    skv_st_writer *w;
    int rc = skv_stw_create(&w);
    if (rc)
        return rc;
    char buf[64], hex[33];
#define META(k, fmt, ...) (snprintf(buf, sizeof buf, fmt, __VA_ARGS__), rc = rc ? rc : skv_stw_meta(w, k, buf))
    META("seqkv.kind", "%s", "calibration");
    META("seqkv.calib_version", "%d", c->version);
    META("seqkv.dtype", "%s", skv_dtype_name(c->sh.dtype));
    META("seqkv.rope_theta", "%.9g", (double)c->sh.rope_theta);
    META("seqkv.rope_dim", "%d", c->sh.rope_dim);
    META("seqkv.rope_layout", "%s", c->sh.rope_layout == SKV_ROPE_HALF ? "half" : "pair");
    META("seqkv.levels", "%u", c->levels);
    META("seqkv.model", "%s", c->model_fp[0] ? c->model_fp : "-");
    sodium_bin2hex(hex, sizeof hex, c->id, 16);
    META("seqkv.calib_id", "%s", hex);
#undef META
    int64_t sh_mean[3] = {L, 2, C}, sh_s[4] = {L, 2, 2, C}, sh_w[5] = {L, 2, H, 2, NF},
            sh_cb[4] = {L, V, 2, C}, sh_v[1] = {V}, sh_p[1] = {256};
    if (!rc)
        rc = skv_stw_add(w, "mean", SKV_DT_F32, 3, sh_mean, c->mean, (size_t)(L * 2 * C) * 4);
    for (int l = 0; l < SKV_LEVEL_COUNT && !rc; l++) {
        char n[32];
        snprintf(n, sizeof n, "s.%s", skv_level_name((skv_level)l));
        rc = skv_stw_add(w, n, SKV_DT_F32, 4, sh_s, c->s[l], (size_t)(L * 2 * 2 * C) * 4);
        snprintf(n, sizeof n, "w.%s", skv_level_name((skv_level)l));
        if (!rc)
            rc = skv_stw_add(w, n, SKV_DT_F32, 5, sh_w, c->w[l], (size_t)(L * 2 * H * 2 * NF) * 4);
    }
    if (!rc)
        rc = skv_stw_add(w, "codebook", SKV_DT_F32, 4, sh_cb, c->cb, (size_t)(L * V * 2 * C) * 4);
    if (!rc)
        rc = skv_stw_add(w, "codebook.count", SKV_DT_I32, 1, sh_v, c->cb_n, (size_t)V * 4);
    if (!rc)
        rc = skv_stw_add(w, "pemp", SKV_DT_I32, 1, sh_p, c->pemp, 256 * 4);
    if (!rc && c->version >= 2) {
        int64_t sh_a[1] = {(int64_t)c->at_total};
        rc = skv_stw_add(w, "atoms.k", SKV_DT_I32, 3, sh_mean, c->at_k, (size_t)(L * 2 * C) * 4);
        if (!rc)
            rc = skv_stw_add(w, "atoms.lambda", SKV_DT_I32, 3, sh_mean, c->at_lam, (size_t)(L * 2 * C) * 4);
        if (!rc)
            rc = skv_stw_add(w, "atoms.value", SKV_DT_I32, 1, sh_a, c->at_val, c->at_total * 4);
        if (!rc)
            rc = skv_stw_add(w, "atoms.count", SKV_DT_I32, 1, sh_a, c->at_cnt, c->at_total * 4);
    }
    if (rc) {
        skv_stw_free(w);
        return rc;
    }
    *out = w;
    return SKV_OK;
}

int skv_calib_save(const skv_calib *c, const char *path)
{
    skv_st_writer *w;
    int rc = calib_writer(c, &w);
    if (rc)
        return rc;
    rc = skv_stw_write(w, path);
    skv_stw_free(w);
    return rc;
}

int skv_calib_serialize(const skv_calib *c, uint8_t **out, size_t *len)
{
    skv_st_writer *w;
    int rc = calib_writer(c, &w);
    if (rc)
        return rc;
    rc = skv_stw_serialize(w, out, len);
    skv_stw_free(w);
    return rc;
}

static int get_f32(const skv_st *st, const char *name, float *dst, size_t n)
{
    const skv_tensor *t = skv_st_find(st, name);
    if (!t)
        return skv_error(SKV_ERR_FORMAT, "calibration: no tensor \"%s\"", name);
    if ((t->dtype != SKV_DT_F32 && t->dtype != SKV_DT_I32) || t->nelem != n)
        return skv_error(SKV_ERR_SHAPE, "calibration: tensor \"%s\" has the wrong shape", name);
    for (size_t i = 0; i < n; i++)
        skv_store32_le(&dst[i], skv_load32_le(t->data + 4 * i));
    return SKV_OK;
}

/* Stat's atoms of a version 2 file: per-channel counts and lambdas, then
 * values and counts that skv_atoms_create accepts (checked here, so a bad
 * file fails at load, not when a coder is made). */
static int get_atoms(const skv_st *st, const char *path, skv_calib *c)
{
    const size_t LC = (size_t)c->sh.layers * 2 * chan_count(&c->sh);
    int rc = get_f32(st, "atoms.k", (float *)c->at_k, LC);
    if (!rc)
        rc = get_f32(st, "atoms.lambda", (float *)c->at_lam, LC);
    if (rc)
        return rc;
    uint64_t total = 0;
    for (size_t i = 0; i < LC; i++) {
        if (c->at_k[i] > SKV_ATOMS_MAX || c->at_lam[i] > 65535u)
            return skv_error(SKV_ERR_FORMAT, "%s: atoms of channel %zu out of range", path, i);
        total += c->at_k[i];
    }
    const skv_tensor *tv = skv_st_find(st, "atoms.value");
    if (!tv || tv->nelem != total)
        return skv_error(SKV_ERR_FORMAT, "%s: atoms.value does not hold the %llu atoms counted", path,
                         (unsigned long long)total);
    c->at_total = (size_t)total;
    c->at_val = skv_malloc((total ? total : 1) * sizeof *c->at_val);
    c->at_cnt = skv_malloc((total ? total : 1) * sizeof *c->at_cnt);
    if (!c->at_val || !c->at_cnt)
        return skv_error(SKV_ERR_NOMEM, "calibration atoms");
    rc = get_f32(st, "atoms.value", (float *)c->at_val, total);
    if (!rc)
        rc = get_f32(st, "atoms.count", (float *)c->at_cnt, total);
    return rc;
}

/* After the content hash: atoms that skv_atoms_create accepts (a file with
 * a valid hash and invalid atoms was crafted, not damaged). */
static int check_atoms(const char *path, const skv_calib *c)
{
    const size_t LC = (size_t)c->sh.layers * 2 * chan_count(&c->sh);
    const uint32_t mask = c->sh.dtype == SKV_DT_F32 ? 0xffffffffu : c->sh.dtype == SKV_DT_F8E4M3 ? 0xffu : 0xffffu;
    for (size_t i = 0, off = 0; i < LC; off += c->at_k[i], i++)
        for (size_t j = 0; j < c->at_k[i]; j++) {
            const uint32_t v = c->at_val[off + j];
            if ((v & ~mask) || c->at_cnt[off + j] == 0 || (j && v <= c->at_val[off + j - 1]))
                return skv_error(SKV_ERR_FORMAT, "%s: atoms of channel %zu are not distinct "
                                 "values in increasing order with counts >= 1", path, i);
        }
    return SKV_OK;
}

/* Build a calibration from a parsed safetensors image; `path` names it in
 * errors. Does not take ownership of st. */
static int calib_from_st(const skv_st *st, const char *path, skv_calib **out)
{
    *out = NULL;
    int rc;
    skv_calib *c = skv_calloc(1, sizeof *c);
    if (!c)
        return skv_error(SKV_ERR_NOMEM, "calibration");
    const char *kind = skv_st_meta(st, "seqkv.kind"), *ver = skv_st_meta(st, "seqkv.calib_version");
    const char *dt = skv_st_meta(st, "seqkv.dtype"), *lay = skv_st_meta(st, "seqkv.rope_layout");
    const char *lv = skv_st_meta(st, "seqkv.levels"), *mfp = skv_st_meta(st, "seqkv.model");
    const char *idh = skv_st_meta(st, "seqkv.calib_id");
    const skv_tensor *cb = skv_st_find(st, "codebook"), *mean = skv_st_find(st, "mean");
    if (!kind || strcmp(kind, "calibration") || !ver || !dt || !lay || !lv || !mfp || !idh || !cb ||
        !mean || cb->ndim != 4 || mean->ndim != 3) {
        rc = skv_error(SKV_ERR_FORMAT, "%s: not a seqkv calibration file", path);
        goto fail;
    }
    c->version = atoi(ver);
    if (c->version < 1) {
        rc = skv_error(SKV_ERR_FORMAT, "%s: calibration version %s", path, ver);
        goto fail;
    }
    if (c->version > SKV_CALIB_VERSION) {
        rc = skv_error(SKV_ERR_VERSION, "%s: calibration version %s, this build reads %d", path, ver,
                       SKV_CALIB_VERSION);
        goto fail;
    }
    if ((rc = skv_dtype_from_name(dt, strlen(dt), &c->sh.dtype)))
        goto fail;
    c->sh.layers = (int)cb->shape[0];
    c->sh.vocab = (int)cb->shape[1];
    int64_t C = cb->shape[3];
    const skv_tensor *wt = skv_st_find(st, "w.stat");
    if (!wt || wt->ndim != 5 || wt->shape[2] < 1 || C < 1 || C % wt->shape[2] || cb->shape[2] != 2 ||
        cb->shape[0] < 1 || cb->shape[0] > 4096 || cb->shape[1] < 1 || cb->shape[1] > (1 << 24) ||
        C > (1 << 20)) {
        rc = skv_error(SKV_ERR_FORMAT, "%s: inconsistent calibration shapes", path);
        goto fail;
    }
    c->sh.kv_heads = (int)wt->shape[2];
    c->sh.head_dim = (int)(C / wt->shape[2]);
    float th, rd;
    if (parse_float_meta(st, "seqkv.rope_theta", &th) || parse_float_meta(st, "seqkv.rope_dim", &rd)) {
        rc = skv_error(SKV_ERR_FORMAT, "%s: bad RoPE metadata", path);
        goto fail;
    }
    c->sh.rope_theta = th;
    c->sh.rope_dim = (int)rd;
    if (c->sh.rope_dim < 0 || c->sh.rope_dim > c->sh.head_dim || (c->sh.rope_dim & 1)) {
        rc = skv_error(SKV_ERR_FORMAT, "%s: bad rotary dim", path);
        goto fail;
    }
    c->sh.rope_layout = strcmp(lay, "half") == 0 ? SKV_ROPE_HALF : SKV_ROPE_PAIR;
    c->levels = (unsigned)atoi(lv) & 15u;
    snprintf(c->model_fp, sizeof c->model_fp, "%s", strcmp(mfp, "-") ? mfp : "");
    if ((rc = calib_alloc(c)))
        goto fail;
    rope_init(c);
    const size_t L = (size_t)c->sh.layers, H = (size_t)c->sh.kv_heads, V = (size_t)c->sh.vocab;
    rc = get_f32(st, "mean", c->mean, L * 2 * (size_t)C);
    for (int l = 0; l < SKV_LEVEL_COUNT && !rc; l++) {
        char n[32];
        snprintf(n, sizeof n, "s.%s", skv_level_name((skv_level)l));
        rc = get_f32(st, n, c->s[l], L * 2 * 2 * (size_t)C);
        snprintf(n, sizeof n, "w.%s", skv_level_name((skv_level)l));
        if (!rc)
            rc = get_f32(st, n, c->w[l], L * 2 * H * 2 * NF);
    }
    if (!rc)
        rc = get_f32(st, "codebook", c->cb, L * V * 2 * (size_t)C);
    if (!rc)
        rc = get_f32(st, "codebook.count", (float *)c->cb_n, V);
    if (!rc)
        rc = get_f32(st, "pemp", (float *)c->pemp, 256);
    if (!rc && c->version >= 2)
        rc = get_atoms(st, path, c);
    if (rc)
        goto fail;
    for (size_t v = 0; v < V; v++)
        if (c->cb_n[v] < 0) {
            rc = skv_error(SKV_ERR_FORMAT, "%s: negative codebook count", path);
            goto fail;
        }
    compute_id(c);
    char hex[33];
    sodium_bin2hex(hex, sizeof hex, c->id, 16);
    if (strcmp(hex, idh) != 0) {
        rc = skv_error(SKV_ERR_CORRUPT, "%s: content hash %s does not match the recorded id %s", path, hex, idh);
        goto fail;
    }
    if (c->version >= 2 && (rc = check_atoms(path, c)))
        goto fail;
    if ((rc = calib_index(c)))
        goto fail;
    *out = c;
    return SKV_OK;
fail:
    skv_calib_free(c);
    return rc;
}

int skv_calib_parse(const uint8_t *buf, size_t len, skv_calib **out)
{
    *out = NULL;
    skv_st *st;
    int rc = skv_st_parse(buf, len, &st);
    if (rc)
        return rc;
    rc = calib_from_st(st, "calibration", out);
    skv_st_free(st);
    return rc;
}

int skv_calib_load(const char *path, skv_calib **out)
{
    *out = NULL;
    skv_st *st;
    int rc = skv_st_open(path, &st);
    if (rc)
        return rc;
    rc = calib_from_st(st, path, out);
    skv_st_free(st);
    return rc;
}

/* ---- coding ------------------------------------------------------------------- */

struct skv_delta {
    const skv_calib *cal;
    skv_level level;
    const skv_model *model; /* the predictor actually run (int8 copy or float32) */
    skv_model *owned;
    skv_pool *pool;
    skv_cmodel *cm;
    skv_atoms **atoms;      /* [L][2] (stat): NULL where no channel has atoms */
    int plain;              /* SEQKV_PLAIN_PREDICT set: predict() per scalar, no constant rows
                             * (the tests compare the bytes with the fast path's) */
    int nws;
    struct coder_ws {
        skv_encoder *enc;
        skv_decoder *dec, *dec2; /* dec2: a layer's V stream, decoded with its K (code_pair) */
        void *pair;              /* code_pair's rows, paircap bytes */
        size_t paircap;
        float *cbf;
        uint32_t *xb; /* stat's runs of constant rows: batch_rows(C) rows */
    } *ws;                  /* one per pool thread */
    double *ideal, *bytes;
    int ideal_on; /* encoders add up the ideal code length (skv_delta_set_ideal) */
    int version;  /* the stream version encoders write (skv_delta_set_stream_version) */
    uint64_t *nsc;
};

/* The stream version is the profile's, never the CPU's: the model-free
 * levels (stat, ctx) code bf16 rows of whole groups in version 2's lane
 * layout, which has fast paths for bf16 (on AVX2: stat decodes about
 * 1.5x as fast as version 1, ctx 1.2x; a CPU without them reads it by the
 * reference path); other dtypes and shapes, and spec and full (whose
 * predictor costs far more than the coder) keep version 1. The same
 * calibration, level and KV give the same bytes on every machine. */
static int default_version(const skv_calib *cal, skv_level level)
{
    return (level == SKV_LEVEL_STAT || level == SKV_LEVEL_CTX) && cal->sh.dtype == SKV_DT_BF16 &&
                   chan_count(&cal->sh) % SKV_V2_GROUP == 0
               ? 2
               : 1;
}

/* Version 2's states: ctx takes eight, 32 bytes a stream fewer than
 * sixteen (at ~8 bits a scalar, 0.4 % of a stories260K stream of 8192
 * scalars) for a few per cent of decode speed; stat keeps sixteen */
static int level_states(skv_level level)
{
    return level == SKV_LEVEL_STAT ? 16 : 8;
}

int skv_delta_create(const skv_calib *cal, skv_level level, const skv_model *model, skv_pool *pool,
                     skv_delta **out)
{
    *out = NULL;
    if (!skv_calib_has_level(cal, level))
        return skv_error(SKV_ERR_ARG, "the calibration has no \"%s\" level%s", skv_level_name(level),
                         level >= SKV_LEVEL_SPEC ? " (calibrate with --model)" : "");
    if (level >= SKV_LEVEL_SPEC) {
        if (!model)
            return skv_error(SKV_ERR_ARG, "level %s needs the model", skv_level_name(level));
        if (strcmp(skv_model_fingerprint(model), cal->model_fp) != 0)
            return skv_error(SKV_ERR_SHAPE, "model %s is not the one the calibration was made with (%s)",
                             skv_model_fingerprint(model), cal->model_fp);
    }
    skv_delta *d = skv_calloc(1, sizeof *d);
    if (!d)
        return skv_error(SKV_ERR_NOMEM, "delta coder");
    d->cal = cal;
    d->level = level;
    d->ideal_on = 1;
    d->version = default_version(cal, level);
    d->pool = pool;
    const char *pl = getenv("SEQKV_PLAIN_PREDICT");
    d->plain = pl && *pl && strcmp(pl, "0") != 0;
    size_t n = (size_t)cal->sh.layers * 2;
    d->ideal = skv_calloc(n, sizeof *d->ideal);
    d->bytes = skv_calloc(n, sizeof *d->bytes);
    d->nsc = skv_calloc(n, sizeof *d->nsc);
    int rc = (d->ideal && d->bytes && d->nsc) ? SKV_OK : skv_error(SKV_ERR_NOMEM, "delta coder");
    if (!rc)
        rc = skv_cmodel_create(cal->sh.dtype, level_mix(level), cal->pemp, &d->cm);
    if (!rc && level == SKV_LEVEL_STAT && cal->at_total) {
        const size_t C = chan_count(&cal->sh);
        d->atoms = skv_calloc(n, sizeof *d->atoms);
        if (!d->atoms)
            rc = skv_error(SKV_ERR_NOMEM, "delta coder");
        for (size_t j = 0, off = 0; !rc && j < n; j++) {
            const uint32_t *k = cal->at_k + j * C, *lam = cal->at_lam + j * C;
            size_t cnt = 0, on = 0;
            for (size_t ch = 0; ch < C; ch++)
                cnt += k[ch], on += lam[ch] && k[ch];
            if (on)
                rc = skv_atoms_create(cal->sh.dtype, (uint32_t)C, k, lam, cal->at_val + off,
                                      cal->at_cnt + off, &d->atoms[j]);
            off += cnt;
        }
    }
    d->nws = skv_pool_threads(pool);
    d->ws = rc ? NULL : skv_calloc((size_t)d->nws, sizeof *d->ws);
    if (!rc && !d->ws)
        rc = skv_error(SKV_ERR_NOMEM, "delta coder");
    for (int i = 0; !rc && i < d->nws; i++) {
        rc = skv_encoder_create(d->cm, &d->ws[i].enc);
        if (!rc)
            rc = skv_decoder_create(d->cm, &d->ws[i].dec);
        if (!rc)
            rc = skv_decoder_create(d->cm, &d->ws[i].dec2);
        d->ws[i].cbf = rc ? NULL : skv_malloc(chan_count(&cal->sh) * sizeof(float));
        d->ws[i].xb = rc ? NULL
                         : skv_malloc(batch_rows(chan_count(&cal->sh)) * chan_count(&cal->sh) *
                                      sizeof(uint32_t));
        if (!rc && (!d->ws[i].cbf || !d->ws[i].xb))
            rc = skv_error(SKV_ERR_NOMEM, "delta coder");
    }
    if (!rc && level == SKV_LEVEL_SPEC) {
        rc = skv_model_quantize(model, SKV_WQ_INT8, &d->owned);
        d->model = d->owned;
    } else if (!rc && level == SKV_LEVEL_FULL) {
        d->model = model;
    }
    if (rc) {
        skv_delta_free(d);
        return rc;
    }
    *out = d;
    return SKV_OK;
}

void skv_delta_free(skv_delta *d)
{
    if (!d)
        return;
    for (int i = 0; d->ws && i < d->nws; i++) {
        skv_encoder_free(d->ws[i].enc);
        skv_decoder_free(d->ws[i].dec);
        skv_decoder_free(d->ws[i].dec2);
        skv_free(d->ws[i].pair);
        skv_free(d->ws[i].cbf);
        skv_free(d->ws[i].xb);
    }
    skv_free(d->ws);
    for (size_t j = 0; d->atoms && j < (size_t)d->cal->sh.layers * 2; j++)
        skv_atoms_free(d->atoms[j]);
    skv_free(d->atoms);
    skv_cmodel_free(d->cm);
    skv_model_free(d->owned);
    skv_free(d->ideal);
    skv_free(d->bytes);
    skv_free(d->nsc);
    skv_free(d);
}

void skv_delta_costs(const skv_delta *d, const double **ideal_bits, const double **coded_bytes,
                     const uint64_t **scalars)
{
    *ideal_bits = d->ideal;
    *coded_bytes = d->bytes;
    *scalars = d->nsc;
}

void skv_delta_set_ideal(skv_delta *d, int on)
{
    d->ideal_on = on != 0;
}

int skv_delta_set_stream_version(skv_delta *d, int version)
{
    if (version == 0)
        version = default_version(d->cal, d->level);
    if (version != 1 && version != 2)
        return skv_error(SKV_ERR_ARG, "stream version %d: 1 or 2 (0: the level's default)", version);
    if (version == 2 && chan_count(&d->cal->sh) % SKV_V2_GROUP)
        return skv_error(SKV_ERR_ARG, "stream version 2 needs rows of whole groups of %d; rows here are %zu",
                         SKV_V2_GROUP, chan_count(&d->cal->sh));
    d->version = version;
    return SKV_OK;
}

int skv_delta_stream_version(const skv_delta *d) { return d->version; }

void skv_delta_reset_costs(skv_delta *d)
{
    size_t n = (size_t)d->cal->sh.layers * 2;
    memset(d->ideal, 0, n * sizeof *d->ideal);
    memset(d->bytes, 0, n * sizeof *d->bytes);
    memset(d->nsc, 0, n * sizeof *d->nsc);
}

void skv_streams_free(skv_streams *s)
{
    if (s->cap)
        skv_free(s->data); /* cap == 0: data is borrowed (skv_coded_read_seq) */
    skv_free(s->offs);
    memset(s, 0, sizeof *s);
}

int skv_streams_append(skv_streams *s, const uint8_t *p, size_t n)
{
    if (s->nstreams + 2 > s->ncap) {
        size_t nc = s->ncap ? 2 * s->ncap : 64;
        size_t *o = skv_realloc(s->offs, nc * sizeof *o);
        if (!o)
            return skv_error(SKV_ERR_NOMEM, "streams");
        s->offs = o;
        s->ncap = nc;
        if (s->nstreams == 0)
            s->offs[0] = 0;
    }
    if (s->len + n > s->cap) {
        size_t nc = s->cap ? 2 * s->cap : 65536;
        while (nc < s->len + n)
            nc *= 2;
        uint8_t *b = skv_realloc(s->data, nc);
        if (!b)
            return skv_error(SKV_ERR_NOMEM, "streams");
        s->data = b;
        s->cap = nc;
    }
    if (s->nstreams == 0)
        s->offs[0] = 0;
    memcpy(s->data + s->len, p, n);
    s->len += n;
    s->offs[++s->nstreams] = s->len;
    return SKV_OK;
}

/* The state of coding one sequence: exact values as floats (what the
 * predictors read) and as dtype bytes (what is coded). */
typedef struct {
    skv_delta *d;
    const int32_t *tok;
    size_t T;
    uint8_t *kvb[2];        /* dtype bytes [L][T][C] (encode: input; decode: output) */
    float *kvf[2];          /* exact floats [L][T][C], filled as decoded */
    size_t t0, t1;
    int decode;
    const skv_streams *in;
    size_t first_stream;
    size_t chunk_index;
    skv_streams *out;
    const skv_delta_aux *aux;   /* optional second prediction (range coding) */
    size_t start;               /* first coded position */
    size_t stride;              /* positions per layer in kvb (>= T) */
    float *mu_out[2];           /* predict-only mode: mu per scalar [L][end-start][C] */
    float *rope_sc;             /* [T][rope_dim/2][sin, cos] (rope_angles) or NULL */
    float *rope_cs;             /* [T][2][rope_dim] (rope_cs) where rope_lanes, or NULL */
    int rc;
} seq_ctx;

/* bf16 rows, the common dtype, eight lanes at a time where SSE2 is there
 * (no switch per scalar). A row's floats are its bits << 16, so
 * all_small's test on them reads the bits as they pass: |f| > 2^100 or NaN
 * is (f_bits & 0x7fffffff) > 0x71800000, a signed compare of non-negative
 * lanes. */

/* Decoded bf16 bits x of one row to p (LE) and their floats to row;
 * returns all_small(row, n). */
static inline __attribute__((always_inline)) int bf16_row_store(uint8_t *p, float *row, const uint32_t *x, size_t n)
{
    uint32_t big = 0;
    size_t i = 0;
#ifdef __SSE2__
    const __m128i mag = _mm_set1_epi32(0x7fffffff), lim = _mm_set1_epi32(0x71800000);
    __m128i bad = _mm_setzero_si128();
    for (; i + 8 <= n; i += 8) {
        __m128i fa = _mm_slli_epi32(_mm_loadu_si128((const __m128i *)(x + i)), 16),
                fb = _mm_slli_epi32(_mm_loadu_si128((const __m128i *)(x + i + 4)), 16);
        _mm_storeu_si128((__m128i *)(row + i), fa);
        _mm_storeu_si128((__m128i *)(row + i + 4), fb);
        /* the low 16 bits of each lane, sign-extended so the saturating
         * pack keeps them as they are */
        _mm_storeu_si128((__m128i *)(p + 2 * i),
                         _mm_packs_epi32(_mm_srai_epi32(fa, 16), _mm_srai_epi32(fb, 16)));
        bad = _mm_or_si128(bad, _mm_or_si128(_mm_cmpgt_epi32(_mm_and_si128(fa, mag), lim),
                                             _mm_cmpgt_epi32(_mm_and_si128(fb, mag), lim)));
    }
    big = (uint32_t)_mm_movemask_epi8(bad);
#endif
    for (; i < n; i++) {
        skv_store16_le(p + 2 * i, (uint16_t)x[i]);
        row[i] = skv__bf16_to_f32((uint16_t)x[i]);
        big |= (skv_f32_bits(row[i]) & 0x7fffffffu) > 0x71800000u;
    }
    return !big;
}

/* The bf16 bits of one row at p into x; returns all_small of the row's
 * floats (those skv_cast_to_f32 made of the same bytes). */
static int bf16_row_load(uint32_t *x, const uint8_t *p, size_t n)
{
    uint32_t big = 0;
    size_t i = 0;
#ifdef __SSE2__
    const __m128i mag = _mm_set1_epi32(0x7fffffff), lim = _mm_set1_epi32(0x71800000),
                  zero = _mm_setzero_si128();
    __m128i bad = zero;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(p + 2 * i));
        _mm_storeu_si128((__m128i *)(x + i), _mm_unpacklo_epi16(h, zero));
        _mm_storeu_si128((__m128i *)(x + i + 4), _mm_unpackhi_epi16(h, zero));
        __m128i fa = _mm_unpacklo_epi16(zero, h), fb = _mm_unpackhi_epi16(zero, h); /* << 16 */
        bad = _mm_or_si128(bad, _mm_or_si128(_mm_cmpgt_epi32(_mm_and_si128(fa, mag), lim),
                                             _mm_cmpgt_epi32(_mm_and_si128(fb, mag), lim)));
    }
    big = (uint32_t)_mm_movemask_epi8(bad);
#endif
    for (; i < n; i++) {
        x[i] = skv_load16_le(p + 2 * i);
        big |= (skv_f32_bits(skv__bf16_to_f32((uint16_t)x[i])) & 0x7fffffffu) > 0x71800000u;
    }
    return !big;
}

/* A decoded row's bits into the output bytes p and its floats into row;
 * returns whether the row is all_small. */
static int store_row(skv_dtype dt, uint8_t *p, float *row, const uint32_t *x, size_t C)
{
    if (dt == SKV_DT_BF16) /* the common dtype without a switch per scalar */
        return bf16_row_store(p, row, x, C);
    const size_t es = skv_dtype_size(dt);
    for (size_t ch = 0; ch < C; ch++)
        row[ch] = store_bits(dt, p + ch * es, x[ch]);
    return all_small(row, C);
}

/* A decoded row's bits into the output bytes p alone (its floats are made
 * when a prediction first reads them); returns whether it is all_small,
 * on the bits as load_row. */
static int store_row_bytes(skv_dtype dt, uint8_t *p, const uint32_t *x, size_t C)
{
    const size_t es = skv_dtype_size(dt);
    const uint32_t mag = (uint32_t)((1ull << (8 * es - 1)) - 1u), lim = small_mag(dt);
    uint32_t big = 0;
    size_t i = 0;
#ifdef __SSE2__
    if (dt == SKV_DT_BF16) {
        const __m128i m = _mm_set1_epi32((int)mag), l = _mm_set1_epi32((int)lim);
        __m128i bad = _mm_setzero_si128();
        for (; i + 8 <= C; i += 8) {
            /* the low 16 bits of each lane, sign-extended so the saturating
             * pack keeps them as they are */
            __m128i a = _mm_loadu_si128((const __m128i *)(x + i)), b = _mm_loadu_si128((const __m128i *)(x + i + 4));
            _mm_storeu_si128((__m128i *)(p + 2 * i), _mm_packs_epi32(_mm_srai_epi32(_mm_slli_epi32(a, 16), 16),
                                                                     _mm_srai_epi32(_mm_slli_epi32(b, 16), 16)));
            bad = _mm_or_si128(bad, _mm_or_si128(_mm_cmpgt_epi32(_mm_and_si128(a, m), l),
                                                 _mm_cmpgt_epi32(_mm_and_si128(b, m), l)));
        }
        big = (uint32_t)_mm_movemask_epi8(bad);
    }
#endif
    for (; i < C; i++) {
        if (es == 1)
            p[i] = (uint8_t)x[i];
        else if (es == 2)
            skv_store16_le(p + 2 * i, (uint16_t)x[i]);
        else
            skv_store32_le(p + 4 * i, x[i]);
        big |= (x[i] & mag) > lim;
    }
    return !big;
}

/* A row to encode from its bytes p; returns whether it is all_small. */
static int load_row(skv_dtype dt, uint32_t *x, const uint8_t *p, size_t C)
{
    if (dt == SKV_DT_BF16)
        return bf16_row_load(x, p, C);
    const size_t es = skv_dtype_size(dt);
    const uint32_t mag = (uint32_t)((1ull << (8 * es - 1)) - 1u), lim = small_mag(dt);
    uint32_t big = 0;
    for (size_t ch = 0; ch < C; ch++) {
        x[ch] = load_bits(dt, p + ch * es);
        big |= (x[ch] & mag) > lim; /* all_small on the bits */
    }
    return !big;
}

/* Begin dec on stream (layer l, kv) of the current chunk (stream
 * first_stream + chunk_index * 2L + 2l + kv), checking its size and
 * calibration */
static int begin_stream(const seq_ctx *q, skv_decoder *dec, int l, int kv, const skv_atoms *atoms)
{
    const skv_calib *c = q->d->cal;
    const size_t C = chan_count(&c->sh), L = (size_t)c->sh.layers;
    size_t si = q->first_stream + q->chunk_index * 2 * L + (size_t)l * 2 + (size_t)kv;
    if (si >= q->in->nstreams)
        return skv_error(SKV_ERR_FORMAT, "missing stream for layer %d %s", l, kv ? "V" : "K");
    size_t a = q->in->offs[si], b = q->in->offs[si + 1];
    skv_stream_info info;
    int rc = skv_decoder_begin_atoms(dec, q->in->data + a, b - a, atoms, &info);
    if (rc)
        return rc;
    if (info.n != (q->t1 - q->t0) * C)
        return skv_error(SKV_ERR_CORRUPT, "stream holds %u scalars, the chunk has %zu", info.n,
                         (q->t1 - q->t0) * C);
    if (memcmp(info.calib_id, c->id, 16) != 0)
        return skv_error(SKV_ERR_CORRUPT, "stream was coded with another calibration");
    return SKV_OK;
}

/* Each channel's weights, per seen-class (predict_row's wc), from W's per
 * (head, seen-class) */
static void channel_weights(const float *W, size_t H, size_t D, float *wc)
{
    const size_t C = H * D;
    for (size_t seen = 0; seen < 2; seen++)
        for (size_t f = 0; f < NF; f++)
            for (size_t h = 0; h < H; h++)
                for (size_t dd = 0; dd < D; dd++)
                    wc[(seen * NF + f) * C + h * D + dd] = W[(h * 2 + seen) * NF + f];
}

/* Whether code_pair decodes layer l's two streams: a bf16 model-free
 * level whose rows of both are predict_row's (no constant rows, as
 * code_stream would code stat's), without a second prediction */
static int pair_rows(const seq_ctx *q, int l)
{
    const skv_delta *d = q->d;
    const skv_calib *c = d->cal;
    const size_t C = chan_count(&c->sh), H = (size_t)c->sh.kv_heads;
    if (!q->decode || d->model || q->aux || q->mu_out[0] || d->plain || c->sh.dtype != SKV_DT_BF16 ||
        C % 8)
        return 0;
    for (size_t kv = 0; kv < 2; kv++) {
        const float *W = c->w[d->level] + ((size_t)l * 2 + kv) * H * 2 * NF;
        if (all_small(c->mean + ((size_t)l * 2 + kv) * C, C) && (mean_only(W, H, 0) || mean_only(W, H, 1)))
            return 0;
    }
    return 1;
}

/* Decode layer l's K and V streams of the current chunk together, a row
 * of each at a time through skv_decoder_get_n2 (their groups in turn):
 * the same predictions as code_stream's, the same values. */
static int code_pair(seq_ctx *q, struct coder_ws *ws, int l)
{
    const skv_calib *c = q->d->cal;
    const size_t C = chan_count(&c->sh), H = (size_t)c->sh.kv_heads, D = (size_t)c->sh.head_dim,
                 half = (size_t)(c->sh.rope_dim / 2);
    skv_decoder *const dec[2] = {ws->dec, ws->dec2};
    /* each stream's weights (predict_row's), mu, decoded row and its floats
     * (the row before and this one, in turn: predictions read nothing
     * older, and the floats of the whole sequence would only crowd the
     * cache) */
    const size_t per = (2 * NF + 3) * C * sizeof(float) + C * sizeof(uint32_t);
    if (2 * per > ws->paircap) {
        void *b = skv_malloc(2 * per);
        if (!b)
            return skv_error(SKV_ERR_NOMEM, "row buffers");
        skv_free(ws->pair);
        ws->pair = b;
        ws->paircap = 2 * per;
    }
    float *wc[2], *mu[2], *X[2];
    uint32_t *x[2];
    for (int kv = 0; kv < 2; kv++) {
        wc[kv] = (float *)(void *)((uint8_t *)ws->pair + (size_t)kv * per);
        mu[kv] = wc[kv] + 2 * NF * C;
        X[kv] = mu[kv] + C; /* row t at X + (t & 1) * C */
        x[kv] = (uint32_t *)(void *)(X[kv] + 2 * C);
    }
    const float *mean[2], *S[2];
    uint8_t *B[2];
    for (int kv = 0; kv < 2; kv++) {
        const size_t lk = (size_t)l * 2 + (size_t)kv;
        mean[kv] = c->mean + lk * C;
        S[kv] = c->s[q->d->level] + lk * 2 * C;
        B[kv] = q->kvb[kv] + (size_t)l * q->stride * C * 2;
        channel_weights(c->w[q->d->level] + lk * H * 2 * NF, H, D, wc[kv]);
        skv_decoder_set_row_cache(dec[kv], 0);
        int rc = begin_stream(q, dec[kv], l, kv, NULL);
        if (rc)
            return rc;
        if (q->t0) /* the row before, from its bytes (code_stream makes rows lazily) */
            skv_cast_to_f32(SKV_DT_BF16, X[kv] + ((q->t0 - 1) & 1) * C, B[kv] + (q->t0 - 1) * C * 2, C);
    }
    for (size_t t = q->t0; t < q->t1; t++) {
        const int32_t tok = q->tok[t];
        const size_t seen = c->cb_n[tok] > 0;
        if (t + 1 < q->t1) /* the next codebook rows (code_stream's fetch_cb) */
            for (size_t kv = 0; kv < 2; kv++)
                for (size_t o = 0; o < C * sizeof(float); o += 64)
                    __builtin_prefetch((const char *)(c->cb + (((size_t)l * c->sh.vocab + (size_t)q->tok[t + 1]) * 2 + kv) * C) + o);
        for (int kv = 0; kv < 2; kv++) {
            /* cb_feature_sc's row: V's and an unseen token's read where they lie */
            const float *fc = !seen ? mean[kv] : c->cb + (((size_t)l * c->sh.vocab + (size_t)tok) * 2 + (size_t)kv) * C;
            if (seen && kv == 0) {
                cb_feature_sc(c, l, kv, tok, t, NULL, q->rope_sc ? q->rope_sc + t * half * 2 : NULL,
                              q->rope_cs ? q->rope_cs + t * half * 4 : NULL, ws->cbf);
                fc = ws->cbf;
            }
            predict_row(wc[kv] + seen * NF * C, C, NULL, t ? X[kv] + ((t - 1) & 1) * C : mean[kv], fc, mean[kv],
                        mu[kv]);
        }
        const float *const m2[2] = {mu[0], mu[1]}, *const s2[2] = {S[0] + seen * C, S[1] + seen * C};
        uint32_t *const x2[2] = {x[0], x[1]};
        int rc = skv_decoder_get_n2(dec, m2, s2, x2, C);
        if (rc)
            return rc;
        for (int kv = 0; kv < 2; kv++)
            bf16_row_store(B[kv] + t * C * 2, X[kv] + (t & 1) * C, x[kv], C);
    }
    int rc = skv_decoder_end(dec[0]);
    return rc ? rc : skv_decoder_end(dec[1]);
}

/* Code the stream of (layer l, kv) for the current chunk with workspace ws.
 * Decoding reads stream first_stream + chunk_index * 2L + 2l + kv;
 * encoding returns the finished stream in *out_buf (skv_free it). Streams
 * of different (l, kv) touch disjoint data, so they may run in parallel. */
static int code_stream(seq_ctx *q, struct coder_ws *ws, int l, int kv, const float *model_pred,
                       uint8_t **out_buf, size_t *out_len)
{
    skv_delta *d = q->d;
    const skv_calib *c = d->cal;
    const size_t C = chan_count(&c->sh), H = (size_t)c->sh.kv_heads, D = (size_t)c->sh.head_dim,
                 T = q->T, es = skv_dtype_size(c->sh.dtype);
    const float *mean = c->mean + ((size_t)l * 2 + (size_t)kv) * C;
    const float *S = c->s[d->level] + ((size_t)l * 2 + (size_t)kv) * 2 * C;
    const float *W = c->w[d->level] + ((size_t)l * 2 + (size_t)kv) * H * 2 * NF;
    float *X = q->kvf[kv] + (size_t)l * T * C;
    uint8_t *B = q->kvb[kv] + (size_t)l * q->stride * C * es;
    float *cbf = ws->cbf;
    const skv_atoms *atoms = d->atoms ? d->atoms[(size_t)l * 2 + (size_t)kv] : NULL;
    int rc = SKV_OK;
    if (q->decode) {
        skv_decoder_set_row_cache(ws->dec, d->level == SKV_LEVEL_STAT);
        if ((rc = begin_stream(q, ws->dec, l, kv, atoms)))
            return rc;
    } else if (!q->mu_out[0]) {
        skv_encoder_set_ideal(ws->enc, d->ideal_on);
        skv_encoder_set_version(ws->enc, d->version);
        skv_encoder_set_states(ws->enc, level_states(d->level));
        /* rows predicted from the row before never repeat (stat's do) */
        skv_encoder_set_row_cache(ws->enc, d->level == SKV_LEVEL_STAT);
        skv_encoder_reset_atoms(ws->enc, c->id, atoms);
    }
    /* range coding: an optional second prediction (a centroid) blended per
     * head; predict-only mode hands mu back instead of coding */
    const skv_delta_aux *aux = q->aux;
    const size_t naux = q->T - q->start;
    const float *apred = aux ? aux->pred[kv] + (size_t)l * naux * C : NULL;
    const float *aw = aux ? aux->w + ((size_t)l * 2 + (size_t)kv) * H * 2 : NULL;
    const float *as = aux ? aux->sscale + ((size_t)l * 2 + (size_t)kv) * H : NULL;
    float *mo = q->mu_out[0] ? q->mu_out[kv] + (size_t)l * naux * C : NULL;
    /* one position row at a time through the codec's batch calls: the row's
     * predictions depend only on earlier rows */
    float mu_stack[512], s_stack[512], wc_stack[2 * NF * 256];
    uint32_t x_stack[512];
    float *mu_row = mu_stack, *s_row = s_stack, *wc = wc_stack;
    uint32_t *x_row = x_stack;
    if (C > 512) {
        mu_row = skv_malloc(C * sizeof *mu_row);
        s_row = skv_malloc(C * sizeof *s_row);
        x_row = skv_malloc(C * sizeof *x_row);
        if (!mu_row || !s_row || !x_row)
            rc = skv_error(SKV_ERR_NOMEM, "row buffers");
    }
    if (C > 256 && !rc && !(wc = skv_malloc(2 * NF * C * sizeof *wc)))
        rc = skv_error(SKV_ERR_NOMEM, "row buffers");
    if (!rc)
        channel_weights(W, H, D, wc);
    const skv_dtype dt = c->sh.dtype;
    /* stat: mu is a constant row per seen-class (mean_only), computed once;
     * rows whose features are not all finite take the general path */
    float muc_stack[2][512];
    float *muc[2] = {NULL, NULL};
    const int mean_ok = all_small(mean, C);
    for (size_t seen = 0; seen < 2 && !rc && !model_pred && mean_ok && !d->plain; seen++) {
        if (!mean_only(W, H, seen))
            continue;
        if (C <= 512)
            muc[seen] = muc_stack[seen];
        else if (!(muc[seen] = skv_malloc(C * sizeof(float)))) {
            rc = skv_error(SKV_ERR_NOMEM, "row buffers");
            break;
        }
        for (size_t h = 0; h < H; h++)
            for (size_t dd = 0; dd < D; dd++)
                muc[seen][h * D + dd] =
                    predict(W + (h * 2 + seen) * NF, 0.0f, 0.0f, 0.0f, mean[h * D + dd]);
    }
    /* stat: whether row t - 1 is all_small, found as it was coded (-1: not
     * known here, as at a chunk's first row: test it) */
    int prev_small = -1;
    /* whether row t - 1's floats were made as it was decoded */
    int xmade = 0;
    /* without a model: a row of X is made from the bytes (the input, or
     * what was decoded) when a prediction first reads it, as the previous
     * row (code_seq); stat's runs of constant rows store only bytes */
    const int lazy_x = !d->model;
    /* the codebook row of the next position, fetched a row ahead: its
     * token picks it from the whole vocabulary, so it is seldom in L1 (not
     * at stat, whose constant rows mostly skip it) */
    const float *cb_lk = c->cb + (size_t)l * c->sh.vocab * 2 * C + (size_t)kv * C;
    const int fetch_cb = !(muc[0] && muc[1]);
    for (size_t t = q->t0; t < q->t1 && !rc; t++) {
        const int32_t tok = q->tok[t];
        if (fetch_cb && t + 1 < q->t1)
            for (size_t o = 0; o < C * sizeof(float); o += 64)
                __builtin_prefetch((const char *)(cb_lk + (size_t)q->tok[t + 1] * 2 * C) + o);
        const size_t seen = c->cb_n[tok] > 0;
        const float *sv = S + seen * C;
        float *row = X + t * C;
        const float *prev = t ? X + (t - 1) * C : mean;
        const float *fm_row = model_pred ? model_pred + (t - q->t0) * C : NULL;
        const int ps = prev_small;
        prev_small = -1;
        const float *mu = mu_row;
        /* (prev and the codebook row: finite, with a margin) */
        int cst = muc[seen] && c->cb_ok[((size_t)l * c->sh.vocab + (size_t)tok) * 2 + (size_t)kv];
        int made = !lazy_x || !t || xmade; /* prev's floats are there */
        xmade = 0;
        if (cst && t && ps < 0) {
            if (!made)
                skv_cast_to_f32(dt, X + (t - 1) * C, B + (t - 1) * C * es, C);
            made = 1;
            cst = all_small(prev, C);
        } else if (cst && t) {
            cst = ps;
        }
        if (cst && !mo && !apred) {
            /* a run of rows whose predictions are this constant row: while
             * the tokens keep its seen-class and codebook test, and each row
             * before is all_small (known as it is loaded or decoded) */
            size_t k = 1, kmax = batch_rows(C);
            while (k < kmax && t + k < q->t1) {
                const int32_t tk = q->tok[t + k];
                if ((size_t)(c->cb_n[tk] > 0) != seen ||
                    !c->cb_ok[((size_t)l * c->sh.vocab + (size_t)tk) * 2 + (size_t)kv])
                    break;
                k++;
            }
            uint8_t *p = B + t * C * es;
            size_t done = 0;
            int small = 1;
            if (q->decode) {
                rc = skv_decoder_get_rows(ws->dec, muc[seen], sv, C, k, small_mag(dt), ws->xb,
                                          &done);
                for (size_t j = 0; j < done; j++)
                    small = lazy_x ? store_row_bytes(dt, p + j * C * es, ws->xb + j * C, C)
                                   : store_row(dt, p + j * C * es, X + (t + j) * C, ws->xb + j * C, C);
            } else {
                while (done < k && small)
                    small = load_row(dt, ws->xb + done * C, p + done * C * es, C), done++;
                rc = skv_encoder_put_rows(ws->enc, ws->xb, muc[seen], sv, C, done);
            }
            if (rc)
                break;
            prev_small = small;
            t += done - 1; /* done >= 1: the loop adds the last one */
            continue;
        }
        if (cst) {
            mu = muc[seen];
        } else {
            if (!made)
                skv_cast_to_f32(dt, X + (t - 1) * C, B + (t - 1) * C * es, C);
            cb_feature_sc(c, l, kv, tok, t, NULL,
                          q->rope_sc ? q->rope_sc + t * (size_t)(c->sh.rope_dim / 2) * 2 : NULL,
                          q->rope_cs ? q->rope_cs + t * (size_t)(c->sh.rope_dim / 2) * 4 : NULL, cbf);
            for (size_t h = 0; h < H && d->plain; h++)
                for (size_t dd = 0; dd < D; dd++) {
                    size_t ch = h * D + dd;
                    mu_row[ch] = predict(W + (h * 2 + seen) * NF, fm_row ? fm_row[ch] : 0.0f,
                                         prev[ch], cbf[ch], mean[ch]);
                }
            if (!d->plain)
                predict_row(wc + seen * NF * C, C, fm_row, prev, cbf, mean, mu_row);
        }
        if (mo) {
            memcpy(mo + (t - q->start) * C, mu, C * sizeof(float));
            continue;
        }
        if (apred) {
            const float *ar = apred + (t - q->start) * C;
            for (size_t h = 0; h < H; h++)
                for (size_t dd = 0; dd < D; dd++) {
                    size_t ch = h * D + dd;
                    float a = ar[ch];
                    s_row[ch] = sv[ch];
                    mu_row[ch] = mu[ch];
                    if (a == a) { /* NaN: no aligned position */
                        mu_row[ch] = aw[h * 2] * mu_row[ch] + aw[h * 2 + 1] * a;
                        s_row[ch] *= as[h];
                    }
                }
            sv = s_row;
            mu = mu_row;
        }
        uint8_t *p = B + t * C * es;
        if (q->decode) {
            if ((rc = skv_decoder_get_n(ws->dec, mu, sv, x_row, C)))
                break;
            prev_small = store_row(dt, p, row, x_row, C);
            xmade = 1;
        } else {
            prev_small = load_row(dt, x_row, p, C);
            rc = skv_encoder_put_n(ws->enc, x_row, mu, sv, C);
        }
    }
    for (int k = 0; k < 2; k++)
        if (muc[k] != muc_stack[k])
            skv_free(muc[k]);
    if (mu_row != mu_stack) {
        skv_free(mu_row);
        skv_free(s_row);
        skv_free(x_row);
    }
    if (wc != wc_stack)
        skv_free(wc);
    if (rc)
        return rc;
    size_t idx = (size_t)l * 2 + (size_t)kv;
    if (q->decode)
        return skv_decoder_end(ws->dec);
    if (mo)
        return SKV_OK;
    size_t need = skv_encoder_bound(ws->enc), len;
    uint8_t *buf = skv_malloc(need);
    if (!buf)
        return skv_error(SKV_ERR_NOMEM, "stream buffer");
    if ((rc = skv_encoder_finish(ws->enc, buf, need, &len))) {
        skv_free(buf);
        return rc;
    }
    d->ideal[idx] += skv_encoder_ideal_bits(ws->enc);
    d->bytes[idx] += (double)len;
    d->nsc[idx] += (q->t1 - q->t0) * C;
    *out_buf = buf;
    *out_len = len;
    return SKV_OK;
}

/* Code stream (l, kv) and, when encoding, append it to the output. */
static int code_and_append(seq_ctx *q, struct coder_ws *ws, int l, int kv, const float *model_pred)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = code_stream(q, ws, l, kv, model_pred, &buf, &len);
    if (!rc && !q->decode && !q->mu_out[0])
        rc = skv_streams_append(q->out, buf, len);
    skv_free(buf);
    return rc;
}

/* The streams of one chunk of a model-free level, in parallel over
 * (layer, kv); encoded streams are appended afterwards in order. */
typedef struct {
    seq_ctx *q;
    uint8_t **bufs;
    size_t *lens;
    int *rcs;
} par_ctx;

static void par_task(void *vctx, size_t b, size_t e, int worker)
{
    par_ctx *p = vctx;
    struct coder_ws *ws = &p->q->d->ws[worker];
    for (size_t j = b; j < e; j++) {
        if (j % 2 == 0 && j + 1 < e && pair_rows(p->q, (int)(j / 2))) { /* K and V of layer j / 2 */
            p->rcs[j] = p->rcs[j + 1] = code_pair(p->q, ws, (int)(j / 2));
            j++;
            continue;
        }
        p->rcs[j] = code_stream(p->q, ws, (int)(j / 2), (int)(j & 1), NULL, &p->bufs[j], &p->lens[j]);
    }
}

static int code_chunk_parallel(seq_ctx *q)
{
    const size_t n = (size_t)q->d->cal->sh.layers * 2;
    par_ctx p = {q, skv_calloc(n, sizeof(uint8_t *)), skv_calloc(n, sizeof(size_t)),
                 skv_calloc(n, sizeof(int))};
    int rc = (p.bufs && p.lens && p.rcs) ? SKV_OK : skv_error(SKV_ERR_NOMEM, "chunk jobs");
    if (!rc)
        skv_pool_run(q->d->nws > 1 ? q->d->pool : NULL, n, par_task, &p);
    for (size_t j = 0; !rc && j < n; j++)
        rc = p.rcs[j];
    for (size_t j = 0; !rc && !q->decode && !q->mu_out[0] && j < n; j++)
        rc = skv_streams_append(q->out, p.bufs[j], p.lens[j]);
    for (size_t j = 0; p.bufs && j < n; j++)
        skv_free(p.bufs[j]);
    skv_free(p.bufs);
    skv_free(p.lens);
    skv_free(p.rcs);
    return rc;
}

/* KV hook: code layer l of the chunk with the model's predictions; for
 * spec, then hand the exact values to the engine. full is the recompute
 * end: the float32 model runs on its own KV, so on KV from seqkv's own
 * engine its predictions are the original values. */
static void coder_hook(void *vctx, int layer, size_t pos0, size_t n, float *k, float *v)
{
    seq_ctx *q = vctx;
    const size_t C = chan_count(&q->d->cal->sh), T = q->T;
    (void)pos0;
    if (q->rc)
        return;
    for (int kv = 0; kv < 2 && !q->rc; kv++) {
        float *x = kv ? v : k;
        q->rc = code_and_append(q, &q->d->ws[0], layer, kv, x);
        /* spec attends over the exact KV; full recomputes on its own */
        if (!q->rc && q->d->level == SKV_LEVEL_SPEC)
            memcpy(x, q->kvf[kv] + ((size_t)layer * T + q->t0) * C, n * C * sizeof(float));
    }
}

/* Code positions [q->start, T) in chunks of `chunk` tokens; positions
 * before q->start are exact context (their bytes are in kvb). */
static int code_seq(seq_ctx *q, size_t chunk)
{
    skv_delta *d = q->d;
    const skv_calib *c = d->cal;
    const size_t L = (size_t)c->sh.layers, C = chan_count(&c->sh), T = q->T;
    const size_t es = skv_dtype_size(c->sh.dtype);
    int rc = SKV_OK;
    if (chunk == 0)
        return skv_error(SKV_ERR_ARG, "chunk length 0");
    if (q->start > T || q->stride < T)
        return skv_error(SKV_ERR_ARG, "range [%zu, %zu) with stride %zu", q->start, T, q->stride);
    for (size_t t = 0; t < T; t++)
        if (q->tok[t] < 0 || q->tok[t] >= c->sh.vocab)
            return skv_error(SKV_ERR_ARG, "token id %d at %zu outside the calibration's vocabulary [0, %d)",
                             q->tok[t], t, c->sh.vocab);
    uint8_t *pre[2] = {NULL, NULL};
    skv_kvcache *cache = NULL;
    for (int kv = 0; kv < 2; kv++)
        q->kvf[kv] = skv_malloc((L * T * C > 0 ? L * T * C : 1) * sizeof(float));
    if (!q->kvf[0] || !q->kvf[1]) {
        rc = skv_error(SKV_ERR_NOMEM, "sequence buffers");
        goto done;
    }
    /* the codebook feature's RoPE angles, once per position rather than
     * per layer (stat's constant rows seldom need them) */
    if (c->rope_known && T && (d->level != SKV_LEVEL_STAT || d->plain)) {
        const size_t half = (size_t)c->sh.rope_dim / 2;
        if (!(q->rope_sc = skv_malloc(T * half * 2 * sizeof(float)))) {
            rc = skv_error(SKV_ERR_NOMEM, "sequence buffers");
            goto done;
        }
        for (size_t t = q->start; t < T; t++)
            for (size_t i = 0; i < half; i++)
                rope_angles(c, t, (int)i, &q->rope_sc[(t * half + i) * 2],
                            &q->rope_sc[(t * half + i) * 2 + 1]);
        if (rope_lanes(c) && !d->plain) {
            if (!(q->rope_cs = skv_malloc(T * half * 4 * sizeof(float)))) {
                rc = skv_error(SKV_ERR_NOMEM, "sequence buffers");
                goto done;
            }
            for (size_t t = q->start; t < T; t++)
                rope_cs(c, q->rope_sc + t * half * 2, +1, q->rope_cs + t * half * 4);
        }
    }
    /* exact floats, for a model: the context when decoding, everything
     * when encoding (its hook reads whole chunks); without one,
     * code_stream makes each row from the bytes when a prediction first
     * reads it (stat's constant rows seldom do) */
    const size_t pre_rows = !d->model ? 0 : q->decode ? q->start : T;
    for (int kv = 0; kv < 2 && pre_rows; kv++)
        for (size_t l = 0; l < L; l++)
            skv_cast_to_f32(c->sh.dtype, q->kvf[kv] + l * T * C, q->kvb[kv] + l * q->stride * C * es,
                            pre_rows * C);
    if (d->model && T && (rc = skv_kvcache_create(skv_model_cfg(d->model), T, &cache)))
        goto done;
    if (cache && q->start && d->level == SKV_LEVEL_FULL) {
        /* full is the recompute end: the model runs on its own KV of the
         * context, as it does across the chunks of a whole sequence */
        skv_forward_opts o = {.pool = d->pool};
        rc = skv_model_forward(d->model, cache, q->tok, q->start, &o);
    } else if (cache && q->start) {
        /* the predictor attends over the exact context */
        for (int kv = 0; kv < 2 && !rc; kv++) {
            pre[kv] = skv_malloc(L * q->start * C * es);
            if (!pre[kv])
                rc = skv_error(SKV_ERR_NOMEM, "context buffers");
            for (size_t l = 0; !rc && l < L; l++)
                memcpy(pre[kv] + l * q->start * C * es, q->kvb[kv] + l * q->stride * C * es,
                       q->start * C * es);
        }
        if (!rc)
            rc = skv_kvcache_append(cache, c->sh.dtype, pre[0], pre[1], q->start);
    }
    for (q->t0 = q->start, q->chunk_index = 0; q->t0 < T && !rc; q->t0 = q->t1, q->chunk_index++) {
        q->t1 = q->t0 + chunk < T ? q->t0 + chunk : T;
        if (d->model) {
            q->rc = SKV_OK;
            skv_forward_opts o = {.pool = d->pool, .hook = coder_hook, .hook_ctx = q};
            rc = skv_model_forward(d->model, cache, q->tok + q->t0, q->t1 - q->t0, &o);
            if (!rc)
                rc = q->rc;
        } else {
            rc = code_chunk_parallel(q);
        }
    }
done:
    skv_kvcache_free(cache);
    skv_free(pre[0]);
    skv_free(pre[1]);
    skv_free(q->kvf[0]);
    skv_free(q->kvf[1]);
    skv_free(q->rope_sc);
    skv_free(q->rope_cs);
    q->rope_sc = q->rope_cs = NULL;
    return rc;
}

static void seq_init(seq_ctx *q, skv_delta *d, const int32_t *tokens, size_t T, const void *k,
                     const void *v)
{
    memset(q, 0, sizeof *q);
    q->d = d;
    q->tok = tokens;
    q->T = T;
    q->stride = T;
    q->kvb[0] = (uint8_t *)k;
    q->kvb[1] = (uint8_t *)v;
}

int skv_delta_encode(skv_delta *d, const int32_t *tokens, size_t T, const void *k, const void *v,
                     size_t chunk, skv_streams *out)
{
    seq_ctx q;
    seq_init(&q, d, tokens, T, k, v);
    q.out = out;
    return code_seq(&q, chunk);
}

int skv_delta_decode(skv_delta *d, const int32_t *tokens, size_t T, const skv_streams *in,
                     size_t first_stream, size_t chunk, void *k, void *v)
{
    seq_ctx q;
    seq_init(&q, d, tokens, T, k, v);
    q.decode = 1;
    q.in = in;
    q.first_stream = first_stream;
    return code_seq(&q, chunk);
}

int skv_delta_encode_range(skv_delta *d, const int32_t *tokens, size_t start, size_t end,
                           size_t stride, const void *k, const void *v, const skv_delta_aux *aux,
                           skv_streams *out)
{
    if (start >= end)
        return skv_error(SKV_ERR_ARG, "empty range [%zu, %zu)", start, end);
    seq_ctx q;
    seq_init(&q, d, tokens, end, k, v);
    q.out = out;
    q.start = start;
    q.stride = stride;
    q.aux = aux;
    return code_seq(&q, end - start);
}

int skv_delta_decode_range(skv_delta *d, const int32_t *tokens, size_t start, size_t end,
                           size_t stride, const skv_streams *in, size_t first_stream,
                           const skv_delta_aux *aux, void *k, void *v)
{
    if (start >= end)
        return skv_error(SKV_ERR_ARG, "empty range [%zu, %zu)", start, end);
    seq_ctx q;
    seq_init(&q, d, tokens, end, k, v);
    q.decode = 1;
    q.in = in;
    q.first_stream = first_stream;
    q.start = start;
    q.stride = stride;
    q.aux = aux;
    return code_seq(&q, end - start);
}

int skv_delta_predict_range(skv_delta *d, const int32_t *tokens, size_t start, size_t end,
                            size_t stride, const void *k, const void *v, float *mu_k, float *mu_v)
{
    if (start >= end)
        return skv_error(SKV_ERR_ARG, "empty range [%zu, %zu)", start, end);
    seq_ctx q;
    seq_init(&q, d, tokens, end, k, v);
    q.start = start;
    q.stride = stride;
    q.mu_out[0] = mu_k;
    q.mu_out[1] = mu_v;
    return code_seq(&q, end - start);
}

/* ---- coded KV files ("SKVF") -------------------------------------------------- */

int skv_coded_write_header(uint8_t out[SKV_CODED_HEADER], const skv_coded_info *info)
{
    memset(out, 0, SKV_CODED_HEADER);
    skv_store32_le(out, SKV_CODED_MAGIC);
    skv_store16_le(out + 4, SKV_CODED_VERSION);
    out[6] = (uint8_t)info->level;
    out[7] = (uint8_t)info->dtype;
    skv_store32_le(out + 8, info->n_seq);
    skv_store32_le(out + 12, info->chunk);
    memcpy(out + 16, info->calib_id, 16);
    return SKV_OK;
}

int skv_coded_read_header(const uint8_t *buf, size_t len, skv_coded_info *info)
{
    if (len < SKV_CODED_HEADER)
        return skv_error(SKV_ERR_FORMAT, "coded file: %zu bytes, shorter than its header", len);
    if (skv_load32_le(buf) != SKV_CODED_MAGIC)
        return skv_error(SKV_ERR_FORMAT, "not a seqkv coded file (bad magic)");
    unsigned v = skv_load16_le(buf + 4);
    if (v > SKV_CODED_VERSION)
        return skv_error(SKV_ERR_VERSION, "coded file version %u; this build reads %d", v, SKV_CODED_VERSION);
    if (v == 0)
        return skv_error(SKV_ERR_FORMAT, "coded file version 0");
    if (buf[6] >= SKV_LEVEL_COUNT || buf[7] > SKV_DT_F8E4M3)
        return skv_error(SKV_ERR_FORMAT, "coded file: bad level %u or dtype %u", buf[6], buf[7]);
    if (skv_load64_le(buf + 32) != 0)
        return skv_error(SKV_ERR_FORMAT, "coded file: reserved bytes are not zero");
    info->level = (skv_level)buf[6];
    info->dtype = (skv_dtype)buf[7];
    info->n_seq = skv_load32_le(buf + 8);
    info->chunk = skv_load32_le(buf + 12);
    memcpy(info->calib_id, buf + 16, 16);
    if (info->chunk == 0)
        return skv_error(SKV_ERR_FORMAT, "coded file: chunk length 0");
    return SKV_OK;
}

int skv_coded_read_seq(const uint8_t *buf, size_t len, size_t *pos, uint32_t *T,
                       const uint8_t **tokens, skv_streams *s)
{
    size_t p = *pos;
    if (p > len || len - p < 4)
        return skv_error(SKV_ERR_FORMAT, "coded file: truncated at byte %zu (sequence length)", p);
    uint32_t t = skv_load32_le(buf + p);
    p += 4;
    if ((len - p) / 4 < (size_t)t + 1)
        return skv_error(SKV_ERR_FORMAT, "coded file: truncated tokens (%u claimed)", t);
    *tokens = buf + p;
    p += 4 * (size_t)t;
    uint32_t ns = skv_load32_le(buf + p);
    p += 4;
    if ((len - p) / 4 < ns)
        return skv_error(SKV_ERR_FORMAT, "coded file: truncated stream table (%u streams claimed)", ns);
    if (s->cap)
        skv_free(s->data);
    size_t *o = skv_realloc(s->offs, ((size_t)ns + 1) * sizeof *o);
    if (!o)
        return skv_error(SKV_ERR_NOMEM, "stream table");
    s->offs = o;
    s->ncap = (size_t)ns + 1;
    s->offs[0] = 0;
    for (size_t j = 0; j < ns; j++) {
        uint32_t sz = skv_load32_le(buf + p + 4 * j);
        s->offs[j + 1] = s->offs[j] + sz;
    }
    p += 4 * (size_t)ns;
    if (s->offs[ns] > len - p)
        return skv_error(SKV_ERR_FORMAT, "coded file: streams run past the end");
    s->data = (uint8_t *)(uintptr_t)(buf + p); /* borrowed: cap stays 0 */
    s->cap = 0;
    s->len = s->offs[ns];
    s->nstreams = ns;
    p += s->len;
    *T = t;
    *pos = p;
    return SKV_OK;
}
