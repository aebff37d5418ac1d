/* Criterion suite for the codec module: bit-exact round trips of every
 * dtype (model-like data, every bit pattern, edge values under hostile
 * (mu, s)), code length against skv_cmodel_cost, determinism and model
 * identity, truncation and corruption of every byte, header errors,
 * allocation failure, and the stream-version-1 golden files of
 * tests/golden/codec (decoded and re-encoded byte for byte forever). */
#include <criterion/criterion.h>

#include <dirent.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../codec/cfast.h" /* internals: coverage counts, fast path vs reference */
#include "codec_tune.h"
#include "skv_codec.h"
#include "testutil.h"

/* ========================================================================
 * Helpers
 * ====================================================================== */

static const skv_dtype DTYPES[4] = {SKV_DT_BF16, SKV_DT_F16, SKV_DT_F8E4M3, SKV_DT_F32};

static int nbits(skv_dtype dt)
{
    return dt == SKV_DT_F32 ? 32 : dt == SKV_DT_F8E4M3 ? 8 : 16;
}

static uint32_t width_mask(skv_dtype dt)
{
    return dt == SKV_DT_F32 ? 0xffffffffu : (1u << nbits(dt)) - 1u;
}

/* first magnitude code that is not finite (fp8: the NaN 0x7f) */
static uint32_t inf_mag(skv_dtype dt)
{
    switch (dt) {
    case SKV_DT_BF16: return 0x7f80;
    case SKV_DT_F16: return 0x7c00;
    case SKV_DT_F8E4M3: return 0x7f;
    default: return 0x7f800000u;
    }
}

static int is_finite_bits(skv_dtype dt, uint32_t x)
{
    uint32_t sign = 1u << (nbits(dt) - 1);
    return (x & (sign - 1u)) < inf_mag(dt);
}

static uint32_t to_dt(skv_dtype dt, float v)
{
    switch (dt) {
    case SKV_DT_BF16: return skv_f32_to_bf16(v);
    case SKV_DT_F16: return skv_f32_to_f16(v);
    case SKV_DT_F8E4M3: return skv_f32_to_f8e4m3(v);
    default: return skv_f32_bits(v);
    }
}

static float from_dt(skv_dtype dt, uint32_t x)
{
    switch (dt) {
    case SKV_DT_BF16: return skv_bf16_to_f32((uint16_t)x);
    case SKV_DT_F16: return skv_f16_to_f32((uint16_t)x);
    case SKV_DT_F8E4M3: return skv_f8e4m3_to_f32((uint8_t)x);
    default: return skv_bits_f32(x);
    }
}

static skv_cmodel *model_new(skv_dtype dt, skv_mix mix, const uint32_t *hist)
{
    skv_cmodel *m = NULL;
    int rc = skv_cmodel_create(dt, mix, hist, &m);
    cr_assert_eq(rc, 0, "cmodel_create(%s): %s (%s)", skv_dtype_name(dt), skv_strerror(rc),
                 skv_error_detail());
    cr_assert_not_null(m);
    cr_assert_eq(skv_cmodel_dtype(m), dt);
    return m;
}

/* A sequence of scalars with their (mu, s). */
typedef struct {
    skv_dtype dt;
    size_t n, cap;
    uint32_t *x;
    float *mu, *s;
} seq_t;

static void seq_init(seq_t *q, skv_dtype dt, size_t cap)
{
    q->dt = dt;
    q->n = 0;
    q->cap = cap ? cap : 1;
    q->x = malloc(q->cap * sizeof *q->x);
    q->mu = malloc(q->cap * sizeof *q->mu);
    q->s = malloc(q->cap * sizeof *q->s);
    cr_assert(q->x && q->mu && q->s);
}

static void seq_push(seq_t *q, uint32_t x, float mu, float s)
{
    cr_assert_lt(q->n, q->cap);
    q->x[q->n] = x & width_mask(q->dt);
    q->mu[q->n] = mu;
    q->s[q->n] = s;
    q->n++;
}

static void seq_free(seq_t *q)
{
    free(q->x);
    free(q->mu);
    free(q->s);
}

/* (mu, s) of scalar i; past the end (a damaged n) the sequence repeats. */
static void seq_param(const seq_t *q, size_t i, float *mu, float *s)
{
    if (q->n == 0) {
        *mu = 0.0f;
        *s = 1.0f;
        return;
    }
    *mu = q->mu[i % q->n];
    *s = q->s[i % q->n];
}

/* Encode q with a fresh encoder; returns an exact-size malloc'd copy so
 * that ASan sees any read past the end of the stream. */
static uint8_t *encode_with(skv_encoder *e, const seq_t *q, const uint8_t *calib, size_t *len)
{
    skv_encoder_reset(e, calib);
    for (size_t i = 0; i < q->n; i++) {
        int rc = skv_encoder_put(e, q->x[i], q->mu[i], q->s[i]);
        cr_assert_eq(rc, 0, "put #%zu: %s (%s)", i, skv_strerror(rc), skv_error_detail());
    }
    size_t cap = skv_encoder_bound(e);
    uint8_t *tmp = malloc(cap);
    cr_assert_not_null(tmp);
    int rc = skv_encoder_finish(e, tmp, cap, len);
    cr_assert_eq(rc, 0, "finish: %s (%s)", skv_strerror(rc), skv_error_detail());
    cr_assert_leq(*len, cap, "stream of %zu bytes exceeds its bound %zu", *len, cap);
    uint8_t *out = malloc(*len);
    cr_assert_not_null(out);
    memcpy(out, tmp, *len);
    free(tmp);
    return out;
}

static uint8_t *encode_seq(skv_cmodel *m, const seq_t *q, const uint8_t *calib, size_t *len)
{
    skv_encoder *e = NULL;
    cr_assert_eq(skv_encoder_create(m, &e), 0);
    uint8_t *out = encode_with(e, q, calib, len);
    skv_encoder_free(e);
    return out;
}

/* Decode with q's (mu, s): the first error of begin, get (i < n; version
 * 2: get_n of each group of eight) and end, or 0. Scalars i < q->n land in out (if not NULL). Never asks for more
 * than max_get scalars (a damaged n), in which case end reports. */
static int decode_with(skv_decoder *d, const uint8_t *buf, size_t len, const seq_t *q,
                       uint32_t *out, skv_stream_info *info_out)
{
    const uint32_t max_get = 1u << 22;
    skv_stream_info info;
    memset(&info, 0, sizeof info);
    int rc = skv_decoder_begin(d, buf, len, &info);
    if (info_out)
        *info_out = info;
    if (rc)
        return rc;
    for (uint32_t i = 0; i < info.n && i < max_get; i += info.version == 2 ? 8 : 1) {
        /* version 2: a group of eight at a time */
        uint32_t k = info.version == 2 && info.n - i > 1 ? (info.n - i < 8 ? info.n - i : 8) : 1;
        float mu[8], s[8];
        uint32_t x[8];
        for (uint32_t j = 0; j < k; j++)
            seq_param(q, i + j, &mu[j], &s[j]);
        rc = k == 1 ? skv_decoder_get(d, mu[0], s[0], x) : skv_decoder_get_n(d, mu, s, x, k);
        if (rc)
            return rc;
        for (uint32_t j = 0; j < k; j++)
            if (out && i + j < q->n)
                out[i + j] = x[j];
    }
    return skv_decoder_end(d);
}

static int decode_seq(skv_cmodel *m, const uint8_t *buf, size_t len, const seq_t *q,
                      uint32_t *out, skv_stream_info *info)
{
    skv_decoder *d = NULL;
    cr_assert_eq(skv_decoder_create(m, &d), 0);
    int rc = decode_with(d, buf, len, q, out, info);
    skv_decoder_free(d);
    return rc;
}

/* Encode, decode, compare every scalar's bits. Returns the stream size. */
static size_t assert_round_trip(skv_cmodel *m, const seq_t *q, const char *what)
{
    size_t len;
    uint8_t *buf = encode_seq(m, q, NULL, &len);
    uint32_t *got = malloc((q->n ? q->n : 1) * sizeof *got);
    cr_assert_not_null(got);
    skv_stream_info info;
    int rc = decode_seq(m, buf, len, q, got, &info);
    cr_assert_eq(rc, 0, "%s %s: decode failed: %s (%s)", skv_dtype_name(q->dt), what,
                 skv_strerror(rc), skv_error_detail());
    cr_assert_eq(info.n, q->n);
    cr_assert_eq(info.dtype, q->dt);
    cr_assert_eq(info.cmodel_id, skv_cmodel_id(m));
    cr_assert_eq((size_t)info.payload + SKV_STREAM_HEADER, len);
    for (size_t i = 0; i < q->n; i++)
        cr_assert_eq(got[i], q->x[i],
                     "%s %s: scalar %zu: coded 0x%x, decoded 0x%x (mu %a = %g, s %a = %g)",
                     skv_dtype_name(q->dt), what, i, q->x[i], got[i], (double)q->mu[i],
                     (double)q->mu[i], (double)q->s[i], (double)q->s[i]);
    free(got);
    free(buf);
    return len;
}

/* How scalar x is coded under (mu, s): 0 STEP, 1 BUCKET, 2 escape. */
static int coding_mode(skv_cmodel *m, uint32_t x, float mu, float s)
{
    skv_cls c;
    skv_op o[8];
    cr_assert_eq(skv__classify(m, mu, s, &c), 0);
    skv__plan(m, &c, x, o);
    const skv_ftab *t = c.tab;
    if (o[0].bits == SKV_CODEC_PREC && o[0].start == t->cum[t->n - 1] &&
        o[0].freq == t->cum[t->n] - t->cum[t->n - 1])
        return 2;
    return c.bucket;
}

/* Log-uniform in [10^lo, 10^hi). */
static float log_uniform(skv_rng *r, float lo, float hi)
{
    return powf(10.0f, lo + (hi - lo) * skv_rng_uniform(r));
}

/* ========================================================================
 * The golden input formula of tests/golden/codec/make_golden.c (a copy;
 * keep the two, and tests/fuzz/fuzz_stream.c, in step).
 * ====================================================================== */

#include "golden/codec/golden_inputs.h"
static const skv_mix GOLD_HIST_MIX = {3000u, 5000u};
#define N_GOLD 300

static void gold_hist(uint32_t *hist)
{
    for (uint32_t b = 0; b < 256; b++)
        hist[b] = ((37u * b) % 256u) * 16u;
}

static void gold_seq(seq_t *q, int di, size_t n)
{
    seq_init(q, GOLD_DT[di], n);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t x;
        float mu, s;
        gold_input(di, i, &x, &mu, &s);
        seq_push(q, x, mu, s);
    }
}

/* ========================================================================
 * Round trips
 * ====================================================================== */

/* Gaussian scalars around mu with s from 1e-8 to 1e4 and |mu| from 1e-10 to
 * 1e6 (and 0); one in five drawn far from mu, a few hundred-fold outliers. */
static void gaussian_seq(seq_t *q, skv_dtype dt, size_t n, uint64_t seed)
{
    skv_rng r;
    skv_rng_seed(&r, seed);
    seq_init(q, dt, n);
    for (size_t i = 0; i < n; i++) {
        float s = log_uniform(&r, -8.0f, 4.0f);
        float mu = log_uniform(&r, -10.0f, 6.0f);
        uint64_t k = skv_rng_next(&r);
        if (k & 1)
            mu = -mu;
        if ((k >> 1) % 16 == 0)
            mu = 0.0f;
        float z = skv_rng_normal(&r);
        float v;
        switch ((k >> 8) % 10) {
        case 0: v = mu + s * z * 1000.0f; break;                  /* far: escapes */
        case 1: v = log_uniform(&r, -12.0f, 8.0f) * (z < 0 ? -1.0f : 1.0f); break; /* unrelated */
        default: v = mu + s * z; break;                           /* near */
        }
        seq_push(q, to_dt(dt, v), mu, s);
    }
}

Test(round_trip, gaussian_data_with_any_mu_and_s_is_bit_exact_for_every_dtype)
{
    for (int d = 0; d < 4; d++) {
        skv_dtype dt = DTYPES[d];
        skv_cmodel *m = model_new(dt, SKV_MIX_DEFAULT, NULL);
        seq_t q;
        gaussian_seq(&q, dt, 20000, 100 + (uint64_t)d);
        int modes[3] = {0, 0, 0};
        for (size_t i = 0; i < q.n; i++)
            modes[coding_mode(m, q.x[i], q.mu[i], q.s[i])]++;
        /* the data reach every way of coding a scalar */
        cr_expect_gt(modes[0], 1000, "%s: %d STEP", skv_dtype_name(dt), modes[0]);
        cr_expect_gt(modes[1], 1000, "%s: %d BUCKET", skv_dtype_name(dt), modes[1]);
        cr_expect_gt(modes[2], 1000, "%s: %d escapes", skv_dtype_name(dt), modes[2]);
        assert_round_trip(m, &q, "gaussian");
        seq_free(&q);
        skv_cmodel_free(m);
    }
}

Test(round_trip, every_bit_pattern_survives)
{
    skv_rng r;
    skv_rng_seed(&r, 7);
    for (int d = 0; d < 4; d++) {
        skv_dtype dt = DTYPES[d];
        skv_cmodel *m = model_new(dt, SKV_MIX_DEFAULT, NULL);
        seq_t q;
        /* 8- and 16-bit dtypes: every pattern, each under a random (mu, s),
         * and under (mu, s) near the pattern itself; f32: random patterns */
        size_t n = dt == SKV_DT_F32 ? 60000 : dt == SKV_DT_F8E4M3 ? 256 * 40 : 2 * 65536;
        seq_init(&q, dt, n);
        for (size_t i = 0; i < n; i++) {
            uint32_t x = dt == SKV_DT_F32 ? (uint32_t)skv_rng_next(&r) : (uint32_t)i & width_mask(dt);
            float mu, s;
            if (i & (1u << (nbits(dt) == 32 ? 0 : nbits(dt)))) {
                mu = from_dt(dt, x);
                s = log_uniform(&r, -30.0f, 2.0f) * (isfinite(mu) ? fabsf(mu) + 1e-30f : 1.0f);
            } else if (i % 3 == 0) { /* any float bits, NaN and inf included */
                mu = skv_bits_f32((uint32_t)skv_rng_next(&r));
                s = skv_bits_f32((uint32_t)skv_rng_next(&r));
            } else {
                mu = log_uniform(&r, -6.0f, 3.0f) * (skv_rng_next(&r) & 1 ? -1.0f : 1.0f);
                s = log_uniform(&r, -8.0f, 4.0f);
            }
            seq_push(&q, x, mu, s);
        }
        assert_round_trip(m, &q, "bit patterns");
        seq_free(&q);
        skv_cmodel_free(m);
    }
}

/* Edge values per dtype (dtype bits). */
static size_t edge_values(skv_dtype dt, uint32_t *v)
{
    static const uint32_t bf16[] = {
        0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x807f, 0x0080, 0x8080, 0x7f7f, 0xff7f,
        0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7fc5, 0x7f81, 0xff81, 0x7fff, 0xffff, 0x3f80, 0xbf80,
    };
    static const uint32_t f16[] = {
        0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x83ff, 0x0400, 0x8400, 0x7bff, 0xfbff,
        0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7e05, 0x7c01, 0xfd55, 0x7fff, 0xffff, 0x3c00, 0xbc00,
    };
    static const uint32_t f8[] = {
        0x00, 0x80, 0x01, 0x81, 0x07, 0x87, 0x08, 0x88, 0x7e, 0xfe, 0x7f, 0xff, 0x38, 0xb8,
    };
    static const uint32_t f32[] = {
        0x00000000u, 0x80000000u, 0x00000001u, 0x80000001u, 0x007fffffu, 0x807fffffu,
        0x00800000u, 0x80800000u, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u,
        0x7fc00000u, 0xffc00000u, 0x7fc12345u, 0x7f800001u, 0xff80beefu, 0x7fffffffu,
        0xffffffffu, 0x3f800000u, 0xbf800000u,
    };
    const uint32_t *src;
    size_t n;
    switch (dt) {
    case SKV_DT_BF16: src = bf16; n = sizeof bf16 / sizeof *bf16; break;
    case SKV_DT_F16: src = f16; n = sizeof f16 / sizeof *f16; break;
    case SKV_DT_F8E4M3: src = f8; n = sizeof f8 / sizeof *f8; break;
    default: src = f32; n = sizeof f32 / sizeof *f32; break;
    }
    memcpy(v, src, n * sizeof *v);
    return n;
}

Test(round_trip, edge_values_survive_every_hostile_mu_and_s)
{
    for (int d = 0; d < 4; d++) {
        skv_dtype dt = DTYPES[d];
        skv_cmodel *m = model_new(dt, SKV_MIX_DEFAULT, NULL);
        skv_encoder *e = NULL;
        skv_decoder *dec = NULL;
        cr_assert_eq(skv_encoder_create(m, &e), 0);
        cr_assert_eq(skv_decoder_create(m, &dec), 0);
        uint32_t ev[32];
        size_t ne = edge_values(dt, ev);
        seq_t all;
        seq_init(&all, dt, ne * 16 * 16);
        for (size_t a = 0; a < ne; a++) {
            float val = from_dt(dt, ev[a]);
            float next = is_finite_bits(dt, ev[a] + 1) ? from_dt(dt, ev[a] + 1) : val;
            const float mus[] = {0.0f, -0.0f, val, NAN, -NAN, INFINITY, -INFINITY, next,
                                 FLT_MAX, -FLT_MAX, 0x1p-149f, 1.0f, -val, val * 1e3f};
            const float ss[] = {0.0f, -1.0f, NAN, INFINITY, 1e30f, 1e-30f, 0x1p-149f, 1.0f,
                                1e3f, FLT_MAX, isfinite(val) ? fabsf(val) * 1e-3f : 1.0f, 1e-8f};
            for (size_t i = 0; i < sizeof mus / sizeof *mus; i++)
                for (size_t j = 0; j < sizeof ss / sizeof *ss; j++) {
                    seq_push(&all, ev[a], mus[i], ss[j]);
                    /* and each alone, as a one-scalar stream */
                    seq_t one = {dt, 1, 1, &all.x[all.n - 1], &all.mu[all.n - 1],
                                 &all.s[all.n - 1]};
                    size_t len;
                    uint8_t *buf = encode_with(e, &one, NULL, &len);
                    uint32_t got = 0;
                    int rc = decode_with(dec, buf, len, &one, &got, NULL);
                    cr_assert_eq(rc, 0, "%s 0x%x mu %a s %a: %s (%s)", skv_dtype_name(dt), ev[a],
                                 (double)mus[i], (double)ss[j], skv_strerror(rc),
                                 skv_error_detail());
                    cr_assert_eq(got, ev[a], "%s 0x%x mu %a s %a: decoded 0x%x",
                                 skv_dtype_name(dt), ev[a], (double)mus[i], (double)ss[j], got);
                    free(buf);
                }
        }
        assert_round_trip(m, &all, "edge values");
        seq_free(&all);
        skv_encoder_free(e);
        skv_decoder_free(dec);
        skv_cmodel_free(m);
    }
}

/* mu far outside a narrow dtype's range (f16 max 65504, fp8 max 448): the
 * lattice saturates, mu / g overflows int64 in BUCKET mode; every finite
 * x must escape cleanly (no signed overflow: run under UBSan). */
Test(round_trip, mu_far_beyond_the_dtype_range_escapes_without_overflow)
{
    const float mus[] = {1e30f, -1e30f, FLT_MAX, -FLT_MAX, 0x1p70f, -0x1p64f, 1e20f};
    const float ss[] = {1e-30f, 1e-3f, 1.0f, 1e3f, 1e6f, 1e12f, 1e20f, 1e30f, FLT_MAX};
    const skv_dtype dts[] = {SKV_DT_F16, SKV_DT_F8E4M3, SKV_DT_BF16};
    for (size_t d = 0; d < 3; d++) {
        skv_cmodel *m = model_new(dts[d], SKV_MIX_DEFAULT, NULL);
        uint32_t ev[32];
        size_t ne = edge_values(dts[d], ev);
        seq_t q;
        seq_init(&q, dts[d], ne * 7 * 9);
        int escapes = 0;
        for (size_t a = 0; a < ne; a++)
            for (size_t i = 0; i < 7; i++)
                for (size_t j = 0; j < 9; j++) {
                    seq_push(&q, ev[a], mus[i], ss[j]);
                    escapes += coding_mode(m, ev[a], mus[i], ss[j]) == 2;
                }
        if (dts[d] != SKV_DT_BF16) /* nothing representable is near mu */
            cr_expect_gt(escapes, (int)q.n / 2, "%s: %d of %zu escape", skv_dtype_name(dts[d]),
                         escapes, q.n);
        assert_round_trip(m, &q, "huge mu");
        seq_free(&q);
        skv_cmodel_free(m);
    }
}

Test(round_trip, empty_stream_holds_no_scalars_and_refuses_get)
{
    for (int d = 0; d < 4; d++) {
        skv_cmodel *m = model_new(DTYPES[d], SKV_MIX_DEFAULT, NULL);
        seq_t q;
        seq_init(&q, DTYPES[d], 0);
        size_t len;
        uint8_t *buf = encode_seq(m, &q, NULL, &len);
        cr_expect_eq(len, SKV_STREAM_HEADER + 16, "four rANS states and nothing else");
        skv_decoder *dec = NULL;
        cr_assert_eq(skv_decoder_create(m, &dec), 0);
        skv_stream_info info;
        cr_assert_eq(skv_decoder_begin(dec, buf, len, &info), 0, "%s", skv_error_detail());
        cr_expect_eq(info.n, 0);
        cr_expect_eq(info.payload, 16);
        uint32_t x;
        cr_expect_eq(skv_decoder_get(dec, 0.0f, 1.0f, &x), SKV_ERR_ARG);
        cr_expect_eq(skv_decoder_end(dec), 0, "%s", skv_error_detail());
        skv_decoder_free(dec);
        free(buf);
        seq_free(&q);
        skv_cmodel_free(m);
    }
}

Test(round_trip, single_scalar_streams_round_trip)
{
    for (int d = 0; d < 4; d++) {
        skv_dtype dt = DTYPES[d];
        skv_cmodel *m = model_new(dt, SKV_MIX_DEFAULT, NULL);
        const float vals[] = {0.0f, 1.0f, -3.5f, 1e-3f, 100.0f};
        for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
            seq_t q;
            seq_init(&q, dt, 1);
            seq_push(&q, to_dt(dt, vals[i]), vals[i] * 0.99f, 0.1f);
            size_t len = assert_round_trip(m, &q, "one scalar");
            cr_expect_lt(len, SKV_STREAM_HEADER + 16 + 16, "%zu bytes for one scalar", len);
            seq_free(&q);
        }
        skv_cmodel_free(m);
    }
}

Test(round_trip, non_default_mixtures_and_histograms_round_trip)
{
    uint32_t hist[256];
    gold_hist(hist);
    const skv_mix mixes[] = {{0u, 1u}, {0u, 65471u}, {30000u, 30000u}, {65000u, 400u}};
    for (int d = 0; d < 4; d++)
        for (size_t k = 0; k < sizeof mixes / sizeof *mixes; k++) {
            skv_cmodel *m = model_new(DTYPES[d], mixes[k], k & 1 ? hist : NULL);
            seq_t q;
            gaussian_seq(&q, DTYPES[d], 3000, 500 + k);
            assert_round_trip(m, &q, "mixture");
            seq_free(&q);
            skv_cmodel_free(m);
        }
}

/* ========================================================================
 * The encoder's step (codec_int.h skv_eop): a multiplication by a
 * reciprocal instead of a division, exact over the whole contract
 * ====================================================================== */

/* The rANS step as FORMAT.md states it, from a renormalised v. */
static uint32_t rans_step(uint32_t v, uint32_t start, uint32_t f, int bits)
{
    return ((v / f) << bits) + v % f + start;
}

static void check_step(uint32_t v, uint32_t start, uint32_t f, int bits)
{
    skv_eop op = skv__eop(start, f, bits);
    uint32_t got = skv__eop_step(&op, v), want = rans_step(v, start, f, bits);
    if (got != want)
        cr_assert_fail("f %u bits %d start %u v %u: step %u, want %u", f, bits, start, v, got, want);
}

Test(encoder_step, every_table_frequency_is_exact_at_the_edges_of_its_states)
{
    skv_rng r;
    skv_rng_seed(&r, 5);
    for (uint32_t f = 1; f < 65536; f++) {
        skv_eop op = skv__eop(0, f, 16);
        cr_assert_eq((uint32_t)op.xm << 16, f << 16, "f %u: xmax", f);
        uint64_t top = (uint64_t)f << 16; /* renormalised states: v in [1, f 2^16) */
        const uint32_t start = (uint32_t)(skv_rng_next(&r) % (65537 - f));
        const uint64_t qs[] = {0, 1, 2, 255, 256, 4095, 4096, 32767, 32768, 65534, 65535};
        for (size_t k = 0; k < sizeof qs / sizeof qs[0]; k++)
            for (int d = -1; d <= 1; d++) { /* around every multiple q f, and q f + f - 1 */
                uint64_t v = qs[k] * f + (uint64_t)(int64_t)d, w = qs[k] * f + f - 1;
                if (v >= 1 && v < top)
                    check_step((uint32_t)v, start, f, 16);
                if (w >= 1 && w < top)
                    check_step((uint32_t)w, start, f, 16);
            }
        for (int k = 0; k < 16; k++)
            check_step((uint32_t)(1 + skv_rng_next(&r) % (top - 1)), start, f, 16);
    }
}

Test(encoder_step, every_state_is_exact_for_sampled_frequencies_and_plain_bits)
{
    static const uint32_t fs[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 251, 641};
    for (size_t k = 0; k < sizeof fs / sizeof fs[0]; k++)
        for (uint32_t v = 1; v < fs[k] << 16; v++)
            check_step(v, 65536 - fs[k], fs[k], 16);
    /* nb plain bits: frequency 1 in a total of 2^nb, states below 2^(32 - nb) */
    skv_rng r;
    skv_rng_seed(&r, 6);
    for (int nb = 1; nb <= 16; nb++) {
        skv_eop op = skv__eop(0, 1, nb);
        cr_assert_eq((uint64_t)op.xm << 16, 1ull << (32 - nb), "nb %d: xmax", nb);
        uint32_t top = 1u << (32 - nb), val = (1u << nb) - 1u;
        for (uint32_t v = 1; v < 1u << 16; v++)
            check_step(v, val & v, 1, nb);
        for (uint32_t v = top > 65536 ? top - 65536 : 1; v < top; v++)
            check_step(v, val & ~v, 1, nb);
        for (int k = 0; k < 100000; k++)
            check_step((uint32_t)(1 + skv_rng_next(&r) % (top - 1)), (uint32_t)skv_rng_next(&r) & val,
                       1, nb);
    }
}

/* ========================================================================
 * Code length
 * ====================================================================== */

Test(code_length, stream_size_matches_the_sum_of_actual_costs)
{
    skv_cmodel *m = model_new(SKV_DT_BF16, SKV_MIX_DEFAULT, NULL);
    skv_rng r;
    skv_rng_seed(&r, 42);
    seq_t q;
    seq_init(&q, SKV_DT_BF16, 100000);
    double actual = 0, ideal = 0;
    for (size_t i = 0; i < q.cap; i++) {
        float mu = skv_rng_normal(&r) * 2.0f;
        float s = log_uniform(&r, -3.0f, 0.0f);
        float v = i % 50 == 0 ? skv_rng_normal(&r) * 1e4f : mu + s * skv_rng_normal(&r);
        seq_push(&q, skv_f32_to_bf16(v), mu, s);
        double a, id;
        skv_cmodel_cost(m, q.x[i], mu, s, &a, &id);
        cr_assert(a > 0 && id > 0, "scalar %zu: costs %g %g", i, a, id);
        actual += a;
        ideal += id;
    }
    skv_encoder *e = NULL;
    cr_assert_eq(skv_encoder_create(m, &e), 0);
    size_t len;
    uint8_t *buf = encode_with(e, &q, NULL, &len);
    double want = actual / 8.0;
    cr_expect_leq(fabs((double)len - want), 0.005 * want + 80.0,
                  "stream %zu bytes, actual costs sum to %.1f bytes", len, want);
    /* the encoder's ideal total is the sum of the per-scalar ideal costs */
    cr_expect_leq(fabs(skv_encoder_ideal_bits(e) - ideal), 1e-9 * ideal, "%.3f vs %.3f",
                  skv_encoder_ideal_bits(e), ideal);
    /* and rounding frequencies to 16 bits costs little */
    cr_expect_leq(fabs(actual - ideal), 0.01 * ideal, "actual %.0f ideal %.0f bits", actual, ideal);
    /* the data were model-like: well under the 16 raw bits per scalar */
    cr_expect_lt(want, 100000 * 1.0, "%.0f bytes", want);
    free(buf);
    skv_encoder_free(e);
    seq_free(&q);
    skv_cmodel_free(m);
}

Test(code_length, an_exact_prediction_costs_almost_nothing)
{
    const float mus[] = {1.0f, -1.5f, 3.140625f, 1e-3f, -250.0f, 6.0e4f, 1e20f, -1e-20f};
    for (int d = 0; d < 4; d++) {
        skv_dtype dt = DTYPES[d];
        skv_cmodel *m = model_new(dt, SKV_MIX_DEFAULT, NULL);
        for (size_t i = 0; i < sizeof mus / sizeof *mus; i++) {
            uint32_t x = to_dt(dt, mus[i]);
            float mu = from_dt(dt, x); /* exactly on the lattice */
            if (!isfinite(mu) || (dt == SKV_DT_F8E4M3 && fabsf(mu) != fabsf(mus[i])))
                continue; /* fp8 saturates: not an exact value any more */
            /* tiny against the lattice: 2^-12 of a step at mu */
            const float ss[] = {ldexpf(fabsf(mu), -(nbits(dt) == 32 ? 23 : nbits(dt) == 8 ? 3 : dt == SKV_DT_F16 ? 10 : 7) - 12),
                                1e-30f, 0.0f};
            for (size_t j = 0; j < 3; j++) {
                double a, id;
                skv_cmodel_cost(m, x, mu, ss[j], &a, &id);
                cr_expect_lt(a, 0.05, "%s x 0x%x = mu %g s %g: %g bits", skv_dtype_name(dt), x,
                             (double)mu, (double)ss[j], a);
                cr_expect_lt(id, 0.05);
            }
        }
        skv_cmodel_free(m);
    }
}

Test(code_length, costs_grow_with_distance_and_reach_the_escape)
{
    skv_cmodel *m = model_new(SKV_DT_BF16, SKV_MIX_DEFAULT, NULL);
    double prev = 0;
    for (int k = 0; k < 8; k++) {
        double a;
        /* x = mu + k s, on a fine lattice (BUCKET mode) */
        skv_cmodel_cost(m, skv_f32_to_bf16(100.0f + 8.0f * (float)k), 100.0f, 8.0f, &a, NULL);
        cr_expect_geq(a, prev - 1e-9, "k=%d: %g < %g", k, a, prev);
        prev = a;
    }
    double nan_cost;
    skv_cmodel_cost(m, 0x7fc1, 100.0f, 8.0f, &nan_cost, NULL);
    cr_expect_gt(nan_cost, 8.0, "an escape codes at least the plain low byte: %g", nan_cost);
    skv_cmodel_free(m);
}

/* ========================================================================
 * The batch hot path (codec/cfast.h, skv_encoder_put_n, skv_decoder_get_n)
 * against the reference classification and planner of codec/cmodel.c
 * ====================================================================== */

/* hostile and model-like (mu, s): any float bits, values near the
 * lattices' edges, tiny and huge spreads */
static void random_mu_s(skv_rng *r, skv_dtype dt, float *mu, float *s)
{
    uint64_t k = skv_rng_next(r);
    switch (k % 8) {
    case 0:
        *mu = skv_bits_f32((uint32_t)skv_rng_next(r));
        *s = skv_bits_f32((uint32_t)skv_rng_next(r));
        break;
    case 1: { /* on or next to a lattice point, s a few steps or far below */
        uint32_t x = (uint32_t)skv_rng_next(r) & width_mask(dt);
        float v = from_dt(dt, x);
        *mu = isfinite(v) ? v * (1.0f + (float)((int)(k >> 8) % 5 - 2) * 0x1p-12f) : 1.0f;
        *s = log_uniform(r, -40.0f, 1.0f) * (isfinite(v) ? fabsf(v) + 1e-38f : 1.0f);
        break;
    }
    case 2: /* subnormal floats */
        *mu = skv_bits_f32((uint32_t)skv_rng_next(r) & 0x807fffffu);
        *s = log_uniform(r, -44.0f, -30.0f);
        break;
    default:
        *mu = log_uniform(r, -12.0f, 8.0f) * ((k >> 4) & 1 ? -1.0f : 1.0f);
        if ((k >> 5) % 16 == 0)
            *mu = (k >> 9) & 1 ? -0.0f : 0.0f;
        *s = log_uniform(r, -10.0f, 6.0f);
        break;
    }
}

Test(batch, fast_classification_equals_the_reference)
{
    skv_rng r;
    skv_rng_seed(&r, 4242);
    for (int d = 0; d < 4; d++) {
        skv_dtype dt = DTYPES[d];
        skv_cmodel *m = model_new(dt, SKV_MIX_DEFAULT, NULL);
        const skv_lat *L = dt == SKV_DT_BF16 ? &SKV__LAT_BF16 : dt == SKV_DT_F16 ? &SKV__LAT_F16
                         : dt == SKV_DT_F8E4M3 ? &SKV__LAT_F8 : &SKV__LAT_F32;
        cr_assert_eq(memcmp(L, &m->lat, sizeof *L), 0, "%s: constant lattice differs",
                     skv_dtype_name(dt));
        int modes[2] = {0, 0};
        for (int i = 0; i < 400000; i++) {
            float mu, s;
            random_mu_s(&r, dt, &mu, &s);
            skv_cls ref;
            skv_fcls f;
            cr_assert_eq(skv__classify(m, mu, s, &ref), 0);
            cr_assert_eq(fclassify(m, L, mu, s, &f), 0);
            int64_t base = (ref.bucket ? ref.b0 : skv__ordinal(L, ref.c)) - ref.tab->R;
            cr_assert(f.tab == ref.tab && f.bucket == ref.bucket && f.base == base &&
                          (!ref.bucket || f.G == ref.G),
                      "%s mu %a s %a: fast (tab %p, %s, base %lld, G %d) vs reference (tab %p, "
                      "%s, base %lld, G %d)",
                      skv_dtype_name(dt), (double)mu, (double)s, (void *)f.tab,
                      f.bucket ? "BUCKET" : "STEP", (long long)f.base, f.G, (void *)ref.tab,
                      ref.bucket ? "BUCKET" : "STEP", (long long)base, ref.G);
            modes[ref.bucket]++;
        }
        cr_expect_gt(modes[0], 40000, "%s: %d STEP", skv_dtype_name(dt), modes[0]);
        cr_expect_gt(modes[1], 40000, "%s: %d BUCKET", skv_dtype_name(dt), modes[1]);
        skv_cmodel_free(m);
    }
}

/* The stream FORMAT.md describes, written from skv__classify/skv__plan
 * with a plain rANS coder: the fast encoder must produce these bytes. */
static uint8_t *reference_stream(skv_cmodel *m, const seq_t *q, size_t *len)
{
    size_t cap = 8 * q->n + 8, nops = 0;
    skv_op *ops = malloc(cap * sizeof *ops);
    uint16_t *words = malloc((cap + 1) * sizeof *words);
    cr_assert(ops && words);
    uint64_t h = 0x243f6a8885a308d3ull;
    for (size_t i = 0; i < q->n; i++) {
        skv_cls c;
        cr_assert_eq(skv__classify(m, q->mu[i], q->s[i], &c), 0);
        nops += (size_t)skv__plan(m, &c, q->x[i], ops + nops);
        h = (h + q->x[i] + 1) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
    }
    h = (h + q->n + 1) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
    h ^= h >> 32;
    uint32_t st[4] = {1u << 16, 1u << 16, 1u << 16, 1u << 16};
    size_t nw = 0;
    for (size_t i = nops; i-- > 0;) {
        uint32_t *x = &st[i & 3];
        if ((uint64_t)*x >= (uint64_t)ops[i].freq << (32 - ops[i].bits)) {
            words[nw++] = (uint16_t)*x;
            *x >>= 16;
        }
        *x = ((*x / ops[i].freq) << ops[i].bits) + *x % ops[i].freq + ops[i].start;
    }
    *len = SKV_STREAM_HEADER + 16 + 2 * nw;
    uint8_t *b = calloc(1, *len);
    cr_assert_not_null(b);
    skv_store32_le(b, SKV_STREAM_MAGIC);
    skv_store16_le(b + 4, 1);
    b[6] = (uint8_t)q->dt;
    skv_store32_le(b + 8, (uint32_t)q->n);
    skv_store32_le(b + 12, (uint32_t)(16 + 2 * nw));
    skv_store32_le(b + 16, skv_cmodel_id(m));
    skv_store64_le(b + 24, h);
    for (int k = 0; k < 4; k++)
        skv_store32_le(b + SKV_STREAM_HEADER + 4 * k, st[k]);
    for (size_t k = 0; k < nw; k++)
        skv_store16_le(b + SKV_STREAM_HEADER + 16 + 2 * k, words[nw - 1 - k]);
    free(ops);
    free(words);
    return b;
}

/* put_n in batches of varying size (1, 2, ..., 61 scalars), get_n likewise */
static uint8_t *encode_batched(skv_cmodel *m, const seq_t *q, size_t *len)
{
    skv_encoder *e = NULL;
    cr_assert_eq(skv_encoder_create(m, &e), 0);
    skv_encoder_reset(e, NULL);
    for (size_t i = 0, b = 1; i < q->n; i += b, b = b % 61 + 1) {
        size_t k = q->n - i < b ? q->n - i : b;
        int rc = skv_encoder_put_n(e, q->x + i, q->mu + i, q->s + i, k);
        cr_assert_eq(rc, 0, "put_n at %zu: %s (%s)", i, skv_strerror(rc), skv_error_detail());
    }
    size_t cap = skv_encoder_bound(e);
    uint8_t *buf = malloc(cap);
    cr_assert_eq(skv_encoder_finish(e, buf, cap, len), 0);
    skv_encoder_free(e);
    return buf;
}

static void decode_batched(skv_cmodel *m, const uint8_t *buf, size_t len, const seq_t *q,
                           size_t batch)
{
    skv_decoder *d = NULL;
    cr_assert_eq(skv_decoder_create(m, &d), 0);
    uint8_t *exact = malloc(len); /* ASan sees any read past the stream */
    memcpy(exact, buf, len);
    cr_assert_eq(skv_decoder_begin(d, exact, len, NULL), 0, "%s", skv_error_detail());
    uint32_t *got = malloc((q->n + 1) * sizeof *got);
    for (size_t i = 0; i < q->n; i += batch) {
        size_t k = q->n - i < batch ? q->n - i : batch;
        int rc = skv_decoder_get_n(d, q->mu + i, q->s + i, got + i, k);
        cr_assert_eq(rc, 0, "%s: get_n(%zu) at %zu: %s (%s)", skv_dtype_name(q->dt), k, i,
                     skv_strerror(rc), skv_error_detail());
    }
    uint32_t x;
    float mu = 0.0f, s = 1.0f;
    cr_expect_eq(skv_decoder_get_n(d, &mu, &s, &x, 1), SKV_ERR_ARG, "past the end");
    cr_assert_eq(skv_decoder_end(d), 0, "%s", skv_error_detail());
    for (size_t i = 0; i < q->n; i++)
        cr_assert_eq(got[i], q->x[i], "%s: scalar %zu of batch size %zu: 0x%x, want 0x%x",
                     skv_dtype_name(q->dt), i, batch, got[i], q->x[i]);
    free(got);
    free(exact);
    skv_decoder_free(d);
}

#ifdef SKV_HAVE_CLS8
/* The eight-lane bf16 classification (AVX2, when the CPU has it) gives
 * fclassify's classes for every (mu, s), lanes it cannot take included;
 * with SEQKV_SIMD's scalar path (skv__cls_simd = 0) the streams are the
 * same bytes. */
Test(batch, simd_classification_equals_the_scalar_one)
{
    if (!__builtin_cpu_supports("avx2")) {
        cr_log_info("no AVX2: the scalar path is the only one");
        return;
    }
    skv_rng r;
    skv_rng_seed(&r, 9191);
    skv_cmodel *m = model_new(SKV_DT_BF16, SKV_MIX_DEFAULT, NULL);
    enum { N = 200000 };
    float *mu = malloc(N * sizeof *mu), *s = malloc(N * sizeof *s);
    skv_fcls *got = malloc(N * sizeof *got);
    for (size_t i = 0; i < N; i++) {
        random_mu_s(&r, SKV_DT_BF16, &mu[i], &s[i]);
        if (i % 97 == 0) /* exactly on a bf16 point, s a few steps */
            mu[i] = from_dt(SKV_DT_BF16, (uint32_t)skv_rng_next(&r) & 0xffffu),
            s[i] = log_uniform(&r, -30.0f, 30.0f);
    }
    const float odd[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, FLT_MAX, -FLT_MAX, 0x1p-149f,
                         0x1p-126f, 0x1p-120f, 0x1p100f, 0x1p101f, 3.3895e38f};
    for (size_t i = 0; i < 13 * 13; i++)
        mu[i] = odd[i % 13], s[i] = odd[i / 13];
    int saved = skv__cls_simd;
    skv__cls_simd = 2;
    size_t done;
    cr_assert_eq(fclassify_block(m, &SKV__LAT_BF16, mu, s, N, got, &done), 0);
    cr_assert_eq(done, N);
    int modes[2] = {0, 0};
    for (size_t i = 0; i < N; i++) {
        skv_fcls f;
        cr_assert_eq(fclassify(m, &SKV__LAT_BF16, mu[i], s[i], &f), 0);
        cr_assert(got[i].tab == f.tab && got[i].bucket == f.bucket && got[i].base == f.base &&
                      got[i].G == f.G && got[i].nesc == f.nesc,
                  "mu %a s %a: lanes (%s, base %lld, G %d) vs scalar (%s, base %lld, G %d)",
                  (double)mu[i], (double)s[i], got[i].bucket ? "BUCKET" : "STEP",
                  (long long)got[i].base, got[i].G, f.bucket ? "BUCKET" : "STEP",
                  (long long)f.base, f.G);
        modes[f.bucket]++;
    }
    cr_expect_gt(modes[0], 20000);
    cr_expect_gt(modes[1], 20000);
    /* the same bytes both ways, through the encoder and the decoder */
    seq_t q;
    seq_init(&q, SKV_DT_BF16, N);
    for (size_t i = 0; i < N; i++) {
        uint32_t x = isfinite(mu[i]) && isfinite(s[i]) && i % 7
                         ? to_dt(SKV_DT_BF16, mu[i] + s[i] * skv_rng_normal(&r))
                         : (uint32_t)skv_rng_next(&r) & 0xffffu;
        seq_push(&q, x, mu[i], s[i]);
    }
    size_t l1, l2;
    uint8_t *a = encode_batched(m, &q, &l1);
    skv__cls_simd = 0;
    uint8_t *b = encode_batched(m, &q, &l2);
    cr_assert_eq(l1, l2);
    cr_assert_eq(memcmp(a, b, l1), 0, "SIMD and scalar classification write the same bytes");
    decode_batched(m, a, l1, &q, 64);
    skv__cls_simd = 2;
    decode_batched(m, a, l1, &q, 64);
    decode_batched(m, a, l1, &q, 61);
    skv__cls_simd = saved;
    free(a);
    free(b);
    seq_free(&q);
    free(mu);
    free(s);
    free(got);
    skv_cmodel_free(m);
}
#endif

Test(batch, put_n_writes_the_reference_stream_and_get_n_reads_it_back)
{
    skv_rng r;
    skv_rng_seed(&r, 777);
    for (int d = 0; d < 4; d++) {
        skv_dtype dt = DTYPES[d];
        skv_cmodel *m = model_new(dt, SKV_MIX_DEFAULT, NULL);
        seq_t q;
        seq_init(&q, dt, 60000);
        for (size_t i = 0; i < q.cap; i++) {
            float mu, s;
            random_mu_s(&r, dt, &mu, &s);
            uint64_t k = skv_rng_next(&r);
            uint32_t x;
            if (k % 4 == 0 || !isfinite(mu) || !isfinite(s))
                x = (uint32_t)skv_rng_next(&r); /* any pattern */
            else
                x = to_dt(dt, mu + s * skv_rng_normal(&r) * ((k >> 8) % 8 == 0 ? 30.0f : 1.0f));
            seq_push(&q, x, mu, s);
        }
        size_t lref, l1, l2;
        uint8_t *ref = reference_stream(m, &q, &lref);
        uint8_t *one = encode_seq(m, &q, NULL, &l1);
        uint8_t *bat = encode_batched(m, &q, &l2);
        cr_assert_eq(l1, lref, "%s: put writes %zu bytes, the reference %zu", skv_dtype_name(dt),
                     l1, lref);
        cr_assert_eq(memcmp(one, ref, lref), 0, "%s: put differs from the reference",
                     skv_dtype_name(dt));
        cr_assert_eq(l2, lref);
        cr_assert_eq(memcmp(bat, ref, lref), 0, "%s: put_n differs from the reference",
                     skv_dtype_name(dt));
        const size_t batches[] = {1, 7, 32, 1000, 60000};
        for (size_t b = 0; b < sizeof batches / sizeof *batches; b++)
            decode_batched(m, ref, lref, &q, batches[b]);
        free(ref);
        free(one);
        free(bat);
        seq_free(&q);
        skv_cmodel_free(m);
    }
}

/* Rows that repeat their (mu, s) exactly, as stat's do (the row cache),
 * mixed with rows that do not and rows of another length: put_n by rows
 * writes the reference stream and get_n by rows reads it back. */
Test(batch, repeating_rows_code_as_the_reference)
{
    skv_rng r;
    skv_rng_seed(&r, 4242);
    enum { ROW = 32, NROW = 400 };
    for (int d = 0; d < 4; d++) {
        skv_dtype dt = DTYPES[d];
        skv_cmodel *m = model_new(dt, SKV_MIX_DEFAULT, NULL);
        float pmu[3][ROW], ps[3][ROW];
        for (int p = 0; p < 3; p++)
            for (int c = 0; c < ROW; c++)
                random_mu_s(&r, dt, &pmu[p][c], &ps[p][c]);
        seq_t q;
        seq_init(&q, dt, (size_t)ROW * NROW);
        for (int t = 0; t < NROW; t++) {
            uint64_t k = skv_rng_next(&r);
            int p = (int)(k % 3); /* three patterns through two slots: hits and evictions */
            for (int c = 0; c < ROW; c++) {
                float mu = pmu[p][c], s = ps[p][c];
                if ((k >> 8) % 16 == 0)
                    random_mu_s(&r, dt, &mu, &s); /* a row of its own */
                uint32_t x = isfinite(mu) && isfinite(s) && c % 5
                                 ? to_dt(dt, mu + s * skv_rng_normal(&r))
                                 : (uint32_t)skv_rng_next(&r);
                seq_push(&q, x, mu, s);
            }
        }
        size_t lref, lrow;
        uint8_t *ref = reference_stream(m, &q, &lref);
        skv_encoder *e = NULL;
        cr_assert_eq(skv_encoder_create(m, &e), 0);
        skv_encoder_reset(e, NULL);
        for (size_t i = 0; i < q.n; i += ROW)
            cr_assert_eq(skv_encoder_put_n(e, q.x + i, q.mu + i, q.s + i, ROW), 0);
        size_t cap = skv_encoder_bound(e);
        uint8_t *buf = malloc(cap);
        cr_assert_eq(skv_encoder_finish(e, buf, cap, &lrow), 0);
        cr_assert_eq(lrow, lref, "%s", skv_dtype_name(dt));
        cr_assert_eq(memcmp(buf, ref, lref), 0, "%s: rows differ from the reference",
                     skv_dtype_name(dt));
        decode_batched(m, ref, lref, &q, ROW);
        decode_batched(m, ref, lref, &q, 2 * ROW);
        skv_encoder_free(e);
        free(buf);
        free(ref);
        seq_free(&q);
        skv_cmodel_free(m);
    }
}

Test(batch, truncated_streams_fail_under_get_n_without_reading_past_the_end)
{
    skv_cmodel *m = model_new(SKV_DT_BF16, SKV_MIX_DEFAULT, NULL);
    seq_t q;
    gaussian_seq(&q, SKV_DT_BF16, 3000, 31);
    size_t len;
    uint8_t *buf = encode_seq(m, &q, NULL, &len);
    skv_decoder *d = NULL;
    cr_assert_eq(skv_decoder_create(m, &d), 0);
    uint32_t *got = malloc(q.n * sizeof *got);
    for (size_t cut = SKV_STREAM_HEADER + 16; cut < len; cut += 2) {
        uint8_t *t = malloc(cut); /* exact size: ASan sees a read past the end */
        memcpy(t, buf, cut);
        skv_store32_le(t + 12, (uint32_t)(cut - SKV_STREAM_HEADER)); /* a consistent header */
        int rc = skv_decoder_begin(d, t, cut, NULL);
        cr_assert_eq(rc, 0);
        for (size_t i = 0; i < q.n && !rc; i += 500)
            rc = skv_decoder_get_n(d, q.mu + i, q.s + i, got + i, q.n - i < 500 ? q.n - i : 500);
        if (!rc)
            rc = skv_decoder_end(d);
        cr_expect_eq(rc, SKV_ERR_CORRUPT, "cut at %zu of %zu: %s", cut, len, skv_strerror(rc));
        free(t);
    }
    free(got);
    skv_decoder_free(d);
    free(buf);
    seq_free(&q);
    skv_cmodel_free(m);
}

/* The decoder's bucket values (codec_int.h) against the reference
 * planner: for every bucket width of every dtype the decoder takes them
 * for, each entry that is not 0 is bucket k's first point and plain-bit
 * count, so x = entry + idx plans as the symbol of k then nb plain bits
 * holding idx; an entry of 0 only sends a bucket down the general path. */
Test(batch, bucket_values_are_what_the_reference_plans)
{
    const skv_dtype dts[] = {SKV_DT_BF16, SKV_DT_F16, SKV_DT_F8E4M3};
    for (size_t di = 0; di < 3; di++) {
        skv_cmodel *m = model_new(dts[di], SKV_MIX_DEFAULT, NULL);
        const skv_ftab *tab = skv__build_table(m, 1, 0, 0, 0, 0, 4);
        cr_assert_not_null(tab);
        size_t fast = 0;
        for (int G = -123; G <= 97; G++) {
            cr_assert_eq(m->bvt[G + BVT_G0], skv__bvt_none);
            skv__build_bvt(m, G);
            const uint32_t *t = m->bvt[G + BVT_G0];
            cr_assert_neq(t, skv__bvt_none, "%s G %d: not built", skv_dtype_name(dts[di]), G);
            for (int key = -BVT_K; key < BVT_K; key++) {
                uint32_t e = t[key + BVT_K];
                if (!e)
                    continue;
                fast++;
                int nb = (int)(e >> 24);
                cr_assert(nb >= 1 && nb <= m->lat.mbits, "%s G %d key %d: nb %d",
                          skv_dtype_name(dts[di]), G, key, nb);
                skv_cls c = {.bucket = 1, .G = G, .b0 = key, .tab = tab};
                for (uint32_t idx = 0; idx < (1u << nb); idx += (1u << nb) > 4 ? (1u << nb) / 3 : 1) {
                    uint32_t x = (e & 0xffffffu) + idx;
                    skv_op o[SKV_MAX_OPS];
                    int n = skv__plan(m, &c, x, o);
                    cr_assert_eq(n, 2, "%s G %d key %d idx %u: x 0x%x plans %d operations",
                                 skv_dtype_name(dts[di]), G, key, idx, x, n);
                    cr_assert_eq(o[0].start, tab->cum[tab->R], "%s G %d key %d: not bucket k's symbol",
                                 skv_dtype_name(dts[di]), G, key);
                    cr_assert(o[1].freq == 1 && o[1].bits == nb && o[1].start == idx,
                              "%s G %d key %d idx %u: plain bits %u of %u, want %u of %d",
                              skv_dtype_name(dts[di]), G, key, idx, o[1].start, o[1].bits, idx, nb);
                }
            }
        }
        cr_assert_gt(fast, 100, "%s: only %zu buckets take the table", skv_dtype_name(dts[di]), fast);
        skv_cmodel_free(m);
    }
}

/* ========================================================================
 * Determinism and model identity
 * ====================================================================== */

Test(determinism, two_encoders_give_identical_bytes)
{
    for (int d = 0; d < 4; d++) {
        skv_cmodel *m1 = model_new(DTYPES[d], SKV_MIX_DEFAULT, NULL);
        skv_cmodel *m2 = model_new(DTYPES[d], SKV_MIX_DEFAULT, NULL);
        seq_t q, other;
        gaussian_seq(&q, DTYPES[d], 5000, 900 + (uint64_t)d);
        gaussian_seq(&other, DTYPES[d], 3000, 999);
        /* m2 builds its tables in another order first */
        size_t l0;
        free(encode_seq(m2, &other, NULL, &l0));
        size_t l1, l2, l3;
        uint8_t *b1 = encode_seq(m1, &q, GOLD_CALIB, &l1);
        uint8_t *b2 = encode_seq(m2, &q, GOLD_CALIB, &l2);
        /* a reused encoder, reset, gives the same bytes too */
        skv_encoder *e = NULL;
        cr_assert_eq(skv_encoder_create(m1, &e), 0);
        free(encode_with(e, &other, NULL, &l0));
        uint8_t *b3 = encode_with(e, &q, GOLD_CALIB, &l3);
        cr_assert_eq(l1, l2);
        cr_assert_eq(l1, l3);
        cr_expect_eq(memcmp(b1, b2, l1), 0, "%s: encoders disagree", skv_dtype_name(DTYPES[d]));
        cr_expect_eq(memcmp(b1, b3, l1), 0, "%s: reset encoder differs", skv_dtype_name(DTYPES[d]));
        cr_expect_eq(memcmp(b1 + 32, GOLD_CALIB, 16), 0, "calib_id recorded at offset 32");
        skv_encoder_free(e);
        free(b1);
        free(b2);
        free(b3);
        seq_free(&q);
        seq_free(&other);
        skv_cmodel_free(m1);
        skv_cmodel_free(m2);
    }
}

typedef struct {
    skv_cmodel *m;
    const seq_t *q;
    uint8_t *buf;
    size_t len;
} enc_job;

static void *enc_thread(void *arg)
{
    enc_job *j = arg;
    skv_encoder *e = NULL;
    if (skv_encoder_create(j->m, &e))
        return NULL;
    skv_encoder_reset(e, NULL);
    for (size_t i = 0; i < j->q->n; i++)
        if (skv_encoder_put(e, j->q->x[i], j->q->mu[i], j->q->s[i])) {
            skv_encoder_free(e);
            return NULL;
        }
    size_t cap = skv_encoder_bound(e);
    j->buf = malloc(cap);
    if (j->buf && skv_encoder_finish(e, j->buf, cap, &j->len)) {
        free(j->buf);
        j->buf = NULL;
    }
    skv_encoder_free(e);
    return NULL;
}

Test(determinism, threads_sharing_one_model_build_the_same_tables)
{
    skv_cmodel *ref = model_new(SKV_DT_F16, SKV_MIX_DEFAULT, NULL);
    skv_cmodel *shared = model_new(SKV_DT_F16, SKV_MIX_DEFAULT, NULL);
    seq_t q;
    gaussian_seq(&q, SKV_DT_F16, 4000, 31337);
    size_t rlen;
    uint8_t *rbuf = encode_seq(ref, &q, NULL, &rlen);
    enc_job jobs[4];
    pthread_t th[4];
    for (int t = 0; t < 4; t++) {
        jobs[t] = (enc_job){shared, &q, NULL, 0};
        cr_assert_eq(pthread_create(&th[t], NULL, enc_thread, &jobs[t]), 0);
    }
    for (int t = 0; t < 4; t++) {
        pthread_join(th[t], NULL);
        cr_assert_not_null(jobs[t].buf, "thread %d failed", t);
        cr_expect_eq(jobs[t].len, rlen);
        cr_expect_eq(memcmp(jobs[t].buf, rbuf, rlen), 0, "thread %d differs", t);
        free(jobs[t].buf);
    }
    free(rbuf);
    seq_free(&q);
    skv_cmodel_free(ref);
    skv_cmodel_free(shared);
}

Test(model, id_is_stable_and_depends_on_dtype_mix_and_histogram)
{
    uint32_t h1[256], h2[256];
    gold_hist(h1);
    memcpy(h2, h1, sizeof h2);
    h2[0x3f] += 5000; /* a clearly different p_emp */
    skv_cmodel *a = model_new(SKV_DT_BF16, SKV_MIX_DEFAULT, NULL);
    skv_cmodel *b = model_new(SKV_DT_BF16, SKV_MIX_DEFAULT, NULL);
    skv_cmodel *c = model_new(SKV_DT_BF16, SKV_MIX_DEFAULT, h1);
    skv_cmodel *c2 = model_new(SKV_DT_BF16, SKV_MIX_DEFAULT, h1);
    skv_cmodel *dd = model_new(SKV_DT_BF16, SKV_MIX_DEFAULT, h2);
    skv_cmodel *w1 = model_new(SKV_DT_BF16, (skv_mix){1967u, 1311u}, NULL);
    skv_cmodel *w2 = model_new(SKV_DT_BF16, (skv_mix){1966u, 1312u}, NULL);
    skv_cmodel *f16 = model_new(SKV_DT_F16, SKV_MIX_DEFAULT, NULL);
    cr_expect_eq(skv_cmodel_id(a), skv_cmodel_id(b));
    cr_expect_eq(skv_cmodel_id(c), skv_cmodel_id(c2));
    /* a flat histogram is the uniform p_emp */
    uint32_t flat[256];
    for (int i = 0; i < 256; i++)
        flat[i] = 0;
    skv_cmodel *fl = model_new(SKV_DT_BF16, SKV_MIX_DEFAULT, flat);
    cr_expect_eq(skv_cmodel_id(a), skv_cmodel_id(fl));
    const skv_cmodel *all[] = {a, c, dd, w1, w2, f16};
    for (size_t i = 0; i < 6; i++)
        for (size_t j = i + 1; j < 6; j++)
            cr_expect_neq(skv_cmodel_id(all[i]), skv_cmodel_id(all[j]), "models %zu and %zu", i, j);
    /* ids are computed at creation: using a model does not change it */
    uint32_t before = skv_cmodel_id(a);
    double cost;
    skv_cmodel_cost(a, 0x3f80, 1.0f, 0.1f, &cost, NULL);
    cr_expect_eq(skv_cmodel_id(a), before);
    skv_cmodel *ms[] = {a, b, c, c2, dd, w1, w2, f16, fl};
    for (size_t i = 0; i < sizeof ms / sizeof *ms; i++)
        skv_cmodel_free(ms[i]);
    skv_cmodel_free(NULL);
}

Test(model, create_rejects_impossible_mixtures_and_non_float_dtypes)
{
    skv_cmodel *m = (skv_cmodel *)&m;
    cr_expect_eq(skv_cmodel_create(SKV_DT_BF16, (skv_mix){1966u, 0u}, NULL, &m), SKV_ERR_ARG);
    cr_expect_null(m);
    m = (skv_cmodel *)&m;
    cr_expect_eq(skv_cmodel_create(SKV_DT_BF16, (skv_mix){65536u - 64u - 1u, 1u}, NULL, &m),
                 SKV_ERR_ARG);
    cr_expect_null(m);
    cr_expect_eq(skv_cmodel_create(SKV_DT_BF16, (skv_mix){40000u, 40000u}, NULL, &m), SKV_ERR_ARG);
    cr_expect_eq(skv_cmodel_create(SKV_DT_BF16, (skv_mix){0u, 70000u}, NULL, &m), SKV_ERR_ARG);
    cr_expect_eq(skv_cmodel_create(SKV_DT_BF16, (skv_mix){0xffffffffu, 2u}, NULL, &m), SKV_ERR_ARG,
                 "w1 + w2 must not wrap around");
    skv_cmodel_free(m); /* in case it was wrongly accepted */
    cr_expect_eq(skv_cmodel_create(SKV_DT_I32, SKV_MIX_DEFAULT, NULL, &m), SKV_ERR_ARG);
    cr_expect_null(m);
    cr_expect_eq(skv_cmodel_create((skv_dtype)77, SKV_MIX_DEFAULT, NULL, &m), SKV_ERR_ARG);
    /* the largest legal weights are accepted */
    cr_expect_eq(skv_cmodel_create(SKV_DT_BF16, (skv_mix){65536u - 64u - 2u, 1u}, NULL, &m), 0);
    skv_cmodel_free(m);
}

/* ========================================================================
 * Damaged streams
 * ====================================================================== */

static uint8_t *gold_stream(skv_cmodel **m, seq_t *q, int di, size_t *len)
{
    *m = model_new(GOLD_DT[di], SKV_MIX_DEFAULT, NULL);
    gold_seq(q, di, N_GOLD);
    return encode_seq(*m, q, GOLD_CALIB, len);
}

Test(damage, every_truncated_prefix_fails)
{
    for (int di = 0; di < 4; di++) {
        skv_cmodel *m;
        seq_t q;
        size_t len;
        uint8_t *full = gold_stream(&m, &q, di, &len);
        skv_decoder *d = NULL;
        cr_assert_eq(skv_decoder_create(m, &d), 0);
        for (size_t k = 0; k < len; k++) {
            uint8_t *b = malloc(k ? k : 1); /* exact size: ASan sees any over-read */
            memcpy(b, full, k);
            int rc = decode_with(d, b, k, &q, NULL, NULL);
            cr_assert_lt(rc, 0, "%s: a %zu-byte prefix of %zu decoded", skv_dtype_name(q.dt), k, len);
            cr_expect(rc == (k < SKV_STREAM_HEADER ? SKV_ERR_FORMAT : SKV_ERR_RANGE),
                      "prefix %zu: %s", k, skv_strerror(rc));
            free(b);
        }
        cr_assert_eq(decode_with(d, full, len, &q, NULL, NULL), 0);
        skv_decoder_free(d);
        free(full);
        seq_free(&q);
        skv_cmodel_free(m);
    }
}

/* Flip each byte of [lo, hi) with several masks; returns how many of the
 * `tried` variants were detected. */
static size_t flip_sweep(skv_cmodel *m, const seq_t *q, const uint8_t *full, size_t len,
                         size_t lo, size_t hi, size_t *tried, size_t *first_missed)
{
    static const uint8_t masks[] = {0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80, 0xff, 0x5a};
    skv_decoder *d = NULL;
    cr_assert_eq(skv_decoder_create(m, &d), 0);
    size_t caught = 0;
    *tried = 0;
    *first_missed = (size_t)-1;
    uint8_t *b = malloc(len);
    cr_assert_not_null(b);
    for (size_t i = lo; i < hi; i++)
        for (size_t k = 0; k < sizeof masks; k++) {
            memcpy(b, full, len);
            b[i] ^= masks[k];
            int rc = decode_with(d, b, len, q, NULL, NULL);
            (*tried)++;
            if (rc < 0)
                caught++;
            else if (*first_missed == (size_t)-1)
                *first_missed = i;
        }
    free(b);
    skv_decoder_free(d);
    return caught;
}

Test(damage, every_payload_byte_flip_is_detected)
{
    for (int di = 0; di < 4; di++) {
        skv_cmodel *m;
        seq_t q;
        size_t len;
        uint8_t *full = gold_stream(&m, &q, di, &len);
        size_t tried, missed_at;
        size_t caught = flip_sweep(m, &q, full, len, SKV_STREAM_HEADER, len, &tried, &missed_at);
        cr_expect_geq(caught, tried - tried / 100, "%s: %zu of %zu flips detected",
                      skv_dtype_name(q.dt), caught, tried);
        cr_expect_eq(caught, tried, "%s: %zu of %zu payload flips undetected, first at byte %zu",
                     skv_dtype_name(q.dt), tried - caught, tried, missed_at);
        free(full);
        seq_free(&q);
        skv_cmodel_free(m);
    }
}

Test(damage, every_header_byte_flip_is_detected_or_visible)
{
    for (int di = 0; di < 4; di++) {
        skv_cmodel *m;
        seq_t q;
        size_t len;
        uint8_t *full = gold_stream(&m, &q, di, &len);
        /* bytes 0..31: magic, version, dtype, reserved, n, payload, cmodel
         * id, reserved, checksum: every change is an error */
        size_t tried, missed_at;
        size_t caught = flip_sweep(m, &q, full, len, 0, 32, &tried, &missed_at);
        cr_expect_eq(caught, tried, "%s: %zu header flips undetected, first at byte %zu",
                     skv_dtype_name(q.dt), tried - caught, missed_at);
        /* bytes 32..47: calib_id is opaque to the codec, not covered by the
         * checksum; it is handed back exactly so the caller can check it */
        for (size_t i = 32; i < SKV_STREAM_HEADER; i++) {
            uint8_t *b = malloc(len);
            memcpy(b, full, len);
            b[i] ^= 0x20;
            skv_stream_info info;
            cr_expect_eq(decode_seq(m, b, len, &q, NULL, &info), 0);
            cr_expect_eq(info.calib_id[i - 32], GOLD_CALIB[i - 32] ^ 0x20);
            free(b);
        }
        free(full);
        seq_free(&q);
        skv_cmodel_free(m);
    }
}

Test(damage, random_garbage_after_a_valid_header_is_rejected)
{
    skv_rng r;
    skv_rng_seed(&r, 2024);
    for (int di = 0; di < 4; di++) {
        skv_cmodel *m;
        seq_t q;
        size_t len;
        uint8_t *full = gold_stream(&m, &q, di, &len);
        uint8_t *b = malloc(len);
        for (int t = 0; t < 300; t++) {
            memcpy(b, full, len);
            /* keep the header; overwrite a random span (or everything) of the payload */
            size_t from = SKV_STREAM_HEADER + (size_t)(skv_rng_next(&r) % (len - SKV_STREAM_HEADER));
            size_t to = t % 3 == 0 ? len : from + 1 + (size_t)(skv_rng_next(&r) % 8);
            if (to > len)
                to = len;
            int changed = 0;
            for (size_t i = from; i < to; i++) {
                uint8_t v = (uint8_t)skv_rng_next(&r);
                changed |= v != b[i];
                b[i] = v;
            }
            if (!changed)
                continue;
            cr_expect_lt(decode_seq(m, b, len, &q, NULL, NULL), 0, "%s trial %d",
                         skv_dtype_name(q.dt), t);
        }
        free(b);
        free(full);
        seq_free(&q);
        skv_cmodel_free(m);
    }
}

/* ========================================================================
 * Header errors
 * ====================================================================== */

Test(header, each_malformation_has_its_own_error)
{
    skv_cmodel *m;
    seq_t q;
    size_t len;
    uint8_t *full = gold_stream(&m, &q, 0, &len);
    uint8_t *b = malloc(len + 8);
    skv_stream_info info;

    cr_assert_eq(skv_stream_info_read(full, len, &info), 0);
    cr_expect_eq(info.dtype, SKV_DT_BF16);
    cr_expect_eq(info.n, N_GOLD);
    cr_expect_eq(info.payload + SKV_STREAM_HEADER, len);
    cr_expect_eq(info.cmodel_id, skv_cmodel_id(m));
    cr_expect_eq(memcmp(info.calib_id, GOLD_CALIB, 16), 0);
    cr_expect_eq(skv_load32_le(full), SKV_STREAM_MAGIC);
    cr_expect_eq(memcmp(full, "SKVR", 4), 0);
    cr_expect_eq(skv_load16_le(full + 4), SKV_STREAM_VERSION);

    memcpy(b, full, len);
    b[3] = 'Q';
    cr_expect_eq(decode_seq(m, b, len, &q, NULL, NULL), SKV_ERR_FORMAT, "bad magic");
    memcpy(b, full, len);
    skv_store16_le(b + 4, 2); /* a version 1 body read as version 2 */
    cr_expect_eq(decode_seq(m, b, len, &q, NULL, NULL), SKV_ERR_CORRUPT, "version 2");
    skv_store16_le(b + 4, 3);
    cr_expect_eq(decode_seq(m, b, len, &q, NULL, NULL), SKV_ERR_VERSION, "version 3");
    skv_store16_le(b + 4, 0xffff);
    cr_expect_eq(decode_seq(m, b, len, &q, NULL, NULL), SKV_ERR_VERSION, "version 65535");
    memcpy(b, full, len);
    b[6] = SKV_DT_F32;
    cr_expect_eq(decode_seq(m, b, len, &q, NULL, NULL), SKV_ERR_SHAPE, "f32 stream, bf16 model");
    b[6] = 200;
    cr_expect_eq(decode_seq(m, b, len, &q, NULL, NULL), SKV_ERR_FORMAT, "dtype 200");
    memcpy(b, full, len);
    skv_store32_le(b + 12, (uint32_t)(len - SKV_STREAM_HEADER + 2));
    cr_expect_eq(decode_seq(m, b, len, &q, NULL, NULL), SKV_ERR_RANGE, "payload past the end");
    skv_store32_le(b + 12, 0xfffffffeu);
    cr_expect_eq(decode_seq(m, b, len, &q, NULL, NULL), SKV_ERR_RANGE, "payload 4 GiB");

    /* another model's stream */
    skv_cmodel *other = model_new(SKV_DT_BF16, (skv_mix){1966u, 1312u}, NULL);
    cr_expect_eq(decode_seq(other, full, len, &q, NULL, NULL), SKV_ERR_CORRUPT, "cmodel id");
    skv_cmodel_free(other);

    /* a stream inside a larger buffer: only header + payload are read */
    memcpy(b, full, len);
    memset(b + len, 0xa5, 8);
    cr_expect_eq(decode_seq(m, b, len + 8, &q, NULL, NULL), 0, "%s", skv_error_detail());

    /* more scalars than n, and end before all of them */
    skv_decoder *d = NULL;
    cr_assert_eq(skv_decoder_create(m, &d), 0);
    cr_assert_eq(decode_with(d, full, len, &q, NULL, NULL), 0);
    uint32_t x;
    cr_expect_eq(skv_decoder_get(d, 0.0f, 1.0f, &x), SKV_ERR_ARG, "scalar n+1");
    cr_assert_eq(skv_decoder_begin(d, full, len, NULL), 0);
    for (uint32_t i = 0; i < 10; i++) {
        float mu, s;
        seq_param(&q, i, &mu, &s);
        cr_assert_eq(skv_decoder_get(d, mu, s, &x), 0);
        cr_expect_eq(x, q.x[i]);
    }
    int rc = skv_decoder_end(d);
    cr_expect_lt(rc, 0, "end after 10 of %d scalars", N_GOLD);
    cr_expect_eq(rc, SKV_ERR_ARG);
    /* a decoder is reusable after an error */
    cr_expect_eq(decode_with(d, full, len, &q, NULL, NULL), 0);
    skv_decoder_free(d);
    skv_decoder_free(NULL);
    skv_encoder_free(NULL);

    free(b);
    free(full);
    seq_free(&q);
    skv_cmodel_free(m);
}

Test(header, finish_reports_a_buffer_that_is_too_small)
{
    skv_cmodel *m = model_new(SKV_DT_BF16, SKV_MIX_DEFAULT, NULL);
    seq_t q;
    gold_seq(&q, 0, N_GOLD);
    skv_encoder *e = NULL;
    cr_assert_eq(skv_encoder_create(m, &e), 0);
    size_t len;
    uint8_t *full = encode_with(e, &q, NULL, &len);
    uint8_t *b = malloc(len);
    size_t got = 123;
    cr_expect_eq(skv_encoder_finish(e, b, len - 1, &got), SKV_ERR_TOO_LARGE);
    cr_expect_eq(got, 0);
    cr_expect_eq(skv_encoder_finish(e, b, len, &got), 0, "finishing again after a failure");
    cr_expect_eq(got, len);
    cr_expect_eq(memcmp(b, full, len), 0);
    free(b);
    free(full);
    skv_encoder_free(e);
    seq_free(&q);
    skv_cmodel_free(m);
}

/* ========================================================================
 * Allocation failure
 * ====================================================================== */

/* Create a model, an encoder, code q, decode it with a fresh model and
 * decoder, one scalar at a time (batch 1) or in put_n/get_n batches; the
 * first error, or 0 (and the round trip checked). */
static int alloc_pass(const seq_t *q, size_t batch)
{
    skv_cmodel *m = NULL, *m2 = NULL;
    skv_encoder *e = NULL;
    skv_decoder *d = NULL;
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = skv_cmodel_create(q->dt, SKV_MIX_DEFAULT, NULL, &m);
    if (rc) {
        cr_expect_null(m);
        goto out;
    }
    if ((rc = skv_encoder_create(m, &e))) {
        cr_expect_null(e);
        goto out;
    }
    skv_encoder_reset(e, NULL);
    for (size_t i = 0; i < q->n; i += batch) {
        size_t nb = q->n - i < batch ? q->n - i : batch;
        if ((rc = batch == 1 ? skv_encoder_put(e, q->x[i], q->mu[i], q->s[i])
                             : skv_encoder_put_n(e, q->x + i, q->mu + i, q->s + i, nb)))
            goto out;
    }
    size_t cap = skv_encoder_bound(e);
    buf = malloc(cap);
    if ((rc = skv_encoder_finish(e, buf, cap, &len)))
        goto out;
    if ((rc = skv_cmodel_create(q->dt, SKV_MIX_DEFAULT, NULL, &m2)))
        goto out;
    if ((rc = skv_decoder_create(m2, &d))) {
        cr_expect_null(d);
        goto out;
    }
    if ((rc = skv_decoder_begin(d, buf, len, NULL)))
        goto out;
    uint32_t x[64];
    for (size_t i = 0; i < q->n; i += batch) {
        size_t nb = q->n - i < batch ? q->n - i : batch;
        if ((rc = batch == 1 ? skv_decoder_get(d, q->mu[i], q->s[i], x)
                             : skv_decoder_get_n(d, q->mu + i, q->s + i, x, nb)))
            goto out;
        for (size_t k = 0; k < nb; k++)
            cr_assert_eq(x[k], q->x[i + k]);
    }
    rc = skv_decoder_end(d);
out:
    free(buf);
    skv_decoder_free(d);
    skv_encoder_free(e);
    skv_cmodel_free(m);
    skv_cmodel_free(m2);
    return rc;
}

Test(alloc_failure, every_failure_is_nomem_and_frees_everything)
{
    /* enough scalars to grow the op queue past its first 4096 entries,
     * with few distinct s so the table count stays small; mu varies, so
     * that rows of the batch paths do not repeat (a row cache hit would
     * skip the per-scalar classes), and the second half brings new s, so
     * that tables are first needed after the row cache has turned off */
    seq_t q;
    seq_init(&q, SKV_DT_BF16, 5000);
    skv_rng r;
    skv_rng_seed(&r, 5);
    const float ss[2][3] = {{0.01f, 0.5f, 1e-6f}, {0.03f, 0.75f, 3e-6f}};
    for (size_t i = 0; i < q.cap; i++) {
        float mu = 1.0f + (float)(skv_rng_next(&r) % 1024) / 256.0f;
        float s = ss[2 * i >= q.cap][i % 3];
        float v = i % 97 == 0 ? 1e30f : mu + s * skv_rng_normal(&r);
        seq_push(&q, skv_f32_to_bf16(v), mu, s);
    }
    /* one at a time, and in rows of 61 (they do not repeat: the batch
     * paths, with bf16's eight-lane classes and encoder planning where the
     * CPU has AVX2, meet tables not built yet in STEP and BUCKET lanes) */
    const size_t batches[2] = {1, 61};
    for (int b = 0; b < 2; b++) {
        long fails = 0;
        for (long k = 0;; k++) {
            skv_alloc_fail_after(k, 0);
            int rc = alloc_pass(&q, batches[b]);
            skv_alloc_fail_after(-1, 0);
            if (rc == 0)
                break;
            cr_assert_eq(rc, SKV_ERR_NOMEM, "batch %zu, allocation %ld: %s (%s)", batches[b], k,
                         skv_strerror(rc), skv_error_detail());
            fails++;
            cr_assert_lt(k, 2000);
        }
        cr_expect_geq(fails, 10, "batch %zu: %ld injected failures", batches[b], fails);
        /* sticky failure from some point on: still NOMEM, never a crash */
        for (long k = 0; k < fails; k += 3) {
            skv_alloc_fail_after(k, 1);
            int rc = alloc_pass(&q, batches[b]);
            skv_alloc_fail_after(-1, 0);
            cr_expect_eq(rc, SKV_ERR_NOMEM, "batch %zu, sticky from %ld: %s", batches[b], k,
                         skv_strerror(rc));
        }
        /* and everything works again afterwards */
        cr_expect_eq(alloc_pass(&q, batches[b]), 0);
    }
    seq_free(&q);
}

/* ========================================================================
 * Golden files (stream version 1)
 * ====================================================================== */

static const char *golden_dir(void)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/tests/golden/codec", tu_source_root());
    return buf;
}

static const struct {
    const char *file;
    int di;       /* index into GOLD_DT */
    int hist;     /* GOLD_HIST_MIX and gold_hist() instead of the defaults */
    uint32_t n;
    int version;  /* the stream version */
} GOOD[] = {
    {"good_bf16.skvr", 0, 0, N_GOLD, 1},      {"good_f16.skvr", 1, 0, N_GOLD, 1},
    {"good_f8e4m3.skvr", 2, 0, N_GOLD, 1},    {"good_f32.skvr", 3, 0, N_GOLD, 1},
    {"good_bf16_hist.skvr", 0, 1, N_GOLD, 1}, {"good_f32_empty.skvr", 3, 0, 0, 1},
    {"good2_bf16.skvr", 0, 0, N_GOLD, 2},     {"good2_f16.skvr", 1, 0, N_GOLD, 2},
    {"good2_f8e4m3.skvr", 2, 0, N_GOLD, 2},   {"good2_f32.skvr", 3, 0, N_GOLD, 2},
};
#define N_GOOD (sizeof GOOD / sizeof GOOD[0])

static skv_cmodel *good_model(size_t g)
{
    uint32_t hist[256];
    gold_hist(hist);
    return model_new(GOLD_DT[GOOD[g].di], GOOD[g].hist ? GOLD_HIST_MIX : SKV_MIX_DEFAULT,
                     GOOD[g].hist ? hist : NULL);
}

Test(golden, good_streams_decode_to_the_formula_and_re_encode_byte_for_byte)
{
    for (size_t g = 0; g < N_GOOD; g++) {
        size_t len;
        uint8_t *file = tu_read(tu_path(golden_dir(), GOOD[g].file), &len);
        cr_assert_not_null(file, "%s/%s missing", golden_dir(), GOOD[g].file);
        skv_cmodel *m = good_model(g);
        seq_t q;
        gold_seq(&q, GOOD[g].di, GOOD[g].n);
        uint32_t *got = malloc((q.n ? q.n : 1) * sizeof *got);
        skv_stream_info info;
        int rc = decode_seq(m, file, len, &q, got, &info);
        cr_assert_eq(rc, 0, "%s: %s (%s)", GOOD[g].file, skv_strerror(rc), skv_error_detail());
        cr_expect_eq(info.n, GOOD[g].n);
        cr_expect_eq(info.dtype, GOLD_DT[GOOD[g].di]);
        cr_expect_eq(memcmp(info.calib_id, GOLD_CALIB, 16), 0);
        for (size_t i = 0; i < q.n; i++)
            cr_assert_eq(got[i], q.x[i], "%s: scalar %zu decoded 0x%x, the formula gives 0x%x",
                         GOOD[g].file, i, got[i], q.x[i]);
        cr_expect_eq(info.version, (uint32_t)GOOD[g].version, "%s", GOOD[g].file);
        /* format stability: today's encoder writes the same bytes */
        size_t elen;
        skv_encoder *e = NULL;
        cr_assert_eq(skv_encoder_create(m, &e), 0);
        cr_assert_eq(skv_encoder_set_version(e, GOOD[g].version), 0);
        uint8_t *enc = encode_with(e, &q, GOLD_CALIB, &elen);
        skv_encoder_free(e);
        cr_assert_eq(elen, len,
                     "%s: the encoder now writes %zu bytes, the golden file has %zu: "
                     "an encoding change breaks its stream version",
                     GOOD[g].file, elen, len);
        size_t diff = 0;
        while (diff < len && enc[diff] == file[diff])
            diff++;
        cr_assert_eq(diff, len,
                     "%s: re-encoding differs from the golden file at byte %zu: "
                     "an encoding change breaks its stream version",
                     GOOD[g].file, diff);
        free(enc);
        free(got);
        free(file);
        seq_free(&q);
        skv_cmodel_free(m);
    }
}

Test(golden, bad_streams_fail_with_the_expected_error)
{
    static tu_expected ex[128];
    int n = tu_golden_expected(golden_dir(), ex, 128);
    cr_assert_geq(n, 20, "EXPECTED missing or malformed in %s", golden_dir());
    skv_cmodel *m = good_model(0); /* good_bf16's model and inputs */
    seq_t q;
    gold_seq(&q, 0, N_GOLD);
    for (int i = 0; i < n; i++) {
        const char *fname = ex[i].file, *ename = ex[i].name;
        int want = ex[i].code;
        cr_assert_neq(want, 1, "unknown error name %s", ename);
        cr_expect_neq(want, 0, "%s: a bad file must fail", fname);
        size_t len = 0;
        uint8_t *b = tu_read(tu_path(golden_dir(), fname), &len);
        cr_assert_not_null(b, "%s unreadable", fname);
        uint8_t *exact = malloc(len ? len : 1);
        memcpy(exact, b, len);
        int rc = decode_seq(m, exact, len, &q, NULL, NULL);
        cr_expect_eq(rc, want, "%s: expected %s, got %s (%s)", fname, ename, skv_strerror(rc),
                     skv_error_detail());
        free(exact);
        free(b);
    }
    const char *unlisted = tu_golden_unlisted(golden_dir(), ex, n);
    cr_expect_null(unlisted, "%s is not listed in EXPECTED", unlisted);

    DIR *d = opendir(golden_dir());
    cr_assert_not_null(d);
    struct dirent *e;
    int goods = 0;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "good_", 5) != 0 && strncmp(e->d_name, "good2_", 6) != 0)
            continue;
        int found = 0;
        for (size_t g = 0; g < N_GOOD; g++)
            found |= strcmp(GOOD[g].file, e->d_name) == 0;
        cr_expect(found, "%s is not decoded by the golden test", e->d_name);
        goods++;
    }
    closedir(d);
    cr_expect_eq(goods, (int)N_GOOD);
    seq_free(&q);
    skv_cmodel_free(m);
}

/* ========================================================================
 * Atoms: a per-channel distribution over exact values in front of the
 * mixture (skv_atoms)
 * ====================================================================== */

#define AT_NCH 5

/* Atoms for AT_NCH channels of dt: channel 0 none, channel 3 atoms with
 * lambda 0 (off), the others a few of the edge values plus values near
 * 1.0, with counts. Returns the atoms; *vals_out gets channel 1's values. */
static int cmp_u32_test(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static skv_atoms *test_atoms(skv_dtype dt, uint32_t lambda_scale)
{
    uint32_t ev[32];
    size_t ne = edge_values(dt, ev);
    uint32_t k[AT_NCH] = {0}, lam[AT_NCH] = {0}, vals[4 * 64], cnts[4 * 64];
    size_t off = 0;
    for (int c = 1; c < AT_NCH; c++) {
        uint32_t tmp[64];
        size_t n = 0;
        for (size_t i = (size_t)c; i < ne; i += 2) /* every other edge value */
            tmp[n++] = ev[i];
        for (int j = 0; j < 6 * c; j++) /* a run of values near 1.0 */
            tmp[n++] = (to_dt(dt, 1.0f) + (uint32_t)j) & width_mask(dt);
        qsort(tmp, n, sizeof *tmp, cmp_u32_test);
        size_t u = 0;
        for (size_t i = 0; i < n; i++)
            if (u == 0 || tmp[i] != tmp[u - 1])
                tmp[u++] = tmp[i];
        for (size_t i = 0; i < u; i++) {
            vals[off + i] = tmp[i];
            cnts[off + i] = 1 + (uint32_t)((i * 7 + (size_t)c) % 13);
        }
        k[c] = (uint32_t)u;
        lam[c] = c == 3 ? 0 : (uint32_t)(lambda_scale * (uint32_t)c) % 65536u;
        off += u;
    }
    skv_atoms *a = NULL;
    int rc = skv_atoms_create(dt, AT_NCH, k, lam, vals, cnts, &a);
    cr_assert_eq(rc, 0, "%s", skv_error_detail());
    return a;
}

/* Scalars for the atoms channels: atoms, edge values, near values. */
static void atoms_seq(seq_t *q, skv_dtype dt, size_t n, uint64_t seed)
{
    seq_t g;
    gaussian_seq(&g, dt, n, seed);
    uint32_t ev[32];
    size_t ne = edge_values(dt, ev);
    skv_rng r;
    skv_rng_seed(&r, seed ^ 0xa70);
    seq_init(q, dt, n);
    for (size_t i = 0; i < n; i++) {
        uint64_t k = skv_rng_next(&r);
        uint32_t x = g.x[i];
        if (k % 3 == 0)
            x = ev[(k >> 8) % ne];
        else if (k % 3 == 1)
            x = (to_dt(dt, 1.0f) + (uint32_t)((k >> 8) % 40)) & width_mask(dt);
        seq_push(q, x, g.mu[i], g.s[i]);
    }
    seq_free(&g);
}

static uint8_t *encode_atoms(skv_cmodel *m, const skv_atoms *a, const seq_t *q, size_t batch,
                             size_t *len, double *ideal)
{
    skv_encoder *e = NULL;
    cr_assert_eq(skv_encoder_create(m, &e), 0);
    skv_encoder_reset_atoms(e, NULL, a);
    for (size_t i = 0; i < q->n; i += batch) {
        size_t nb = q->n - i < batch ? q->n - i : batch;
        int rc = skv_encoder_put_n(e, q->x + i, q->mu + i, q->s + i, nb);
        cr_assert_eq(rc, 0, "%s", skv_error_detail());
    }
    if (ideal)
        *ideal = skv_encoder_ideal_bits(e);
    size_t cap = skv_encoder_bound(e);
    uint8_t *tmp = malloc(cap);
    cr_assert_eq(skv_encoder_finish(e, tmp, cap, len), 0);
    uint8_t *out = malloc(*len);
    memcpy(out, tmp, *len);
    free(tmp);
    skv_encoder_free(e);
    return out;
}

/* Decode in batches of `batch` (1: skv_decoder_get); first error or 0. */
static int decode_atoms(skv_cmodel *m, const skv_atoms *a, const uint8_t *buf, size_t len,
                        const seq_t *q, size_t batch, uint32_t *out)
{
    skv_decoder *d = NULL;
    cr_assert_eq(skv_decoder_create(m, &d), 0);
    skv_stream_info info;
    int rc = skv_decoder_begin_atoms(d, buf, len, a, &info);
    for (size_t i = 0; !rc && i < q->n; i += batch) {
        size_t nb = q->n - i < batch ? q->n - i : batch;
        if (batch == 1)
            rc = skv_decoder_get(d, q->mu[i], q->s[i], out + i);
        else
            rc = skv_decoder_get_n(d, q->mu + i, q->s + i, out + i, nb);
    }
    if (!rc)
        rc = skv_decoder_end(d);
    skv_decoder_free(d);
    return rc;
}

Test(atoms, round_trip_for_every_dtype_and_batch_size)
{
    for (int di = 0; di < 4; di++) {
        skv_dtype dt = DTYPES[di];
        skv_cmodel *m = model_new(dt, (skv_mix){600u, 100u}, NULL);
        skv_atoms *a = test_atoms(dt, 20000u);
        seq_t q;
        atoms_seq(&q, dt, 4001, 77 + (uint64_t)di);
        size_t batches[4] = {1, 3, AT_NCH * 7, 4001};
        uint8_t *first = NULL;
        size_t first_len = 0;
        for (int b = 0; b < 4; b++) {
            size_t len;
            double ideal;
            uint8_t *buf = encode_atoms(m, a, &q, batches[b], &len, &ideal);
            skv_stream_info info;
            cr_assert_eq(skv_stream_info_read(buf, len, &info), 0);
            cr_assert_eq(info.cmodel_id, skv_stream_model_id(m, a));
            cr_assert_neq(info.cmodel_id, skv_cmodel_id(m), "atoms change the model id");
            /* the size follows the ideal code length (payload within 1% + 64 bytes) */
            cr_assert_lt(8.0 * (double)len, ideal * 1.01 + 8.0 * 64, "%s: %zu bytes, ideal %.0f bits",
                         skv_dtype_name(dt), len, ideal);
            if (!first) {
                first = buf;
                first_len = len;
            } else {
                cr_assert_eq(len, first_len, "batching does not change the stream");
                cr_assert_eq(memcmp(buf, first, len), 0);
                free(buf);
            }
            for (int db = 0; db < 4; db++) {
                uint32_t *got = malloc(q.n * sizeof *got);
                int rc = decode_atoms(m, a, first, first_len, &q, batches[db], got);
                cr_assert_eq(rc, 0, "%s: %s", skv_dtype_name(dt), skv_error_detail());
                for (size_t i = 0; i < q.n; i++)
                    cr_assert_eq(got[i], q.x[i], "%s scalar %zu", skv_dtype_name(dt), i);
                free(got);
            }
        }
        /* another stream model: no atoms, or other atoms, is refused up front */
        uint32_t *got = malloc(q.n * sizeof *got);
        cr_assert_eq(decode_atoms(m, NULL, first, first_len, &q, 64, got), SKV_ERR_CORRUPT);
        skv_atoms *b2 = test_atoms(dt, 21000u);
        cr_assert_neq(skv_atoms_id(b2), skv_atoms_id(a));
        cr_assert_eq(decode_atoms(m, b2, first, first_len, &q, 64, got), SKV_ERR_CORRUPT);
        /* every payload byte flip is detected or harmless, never read past the end */
        size_t missed = 0;
        for (size_t p = SKV_STREAM_HEADER; p < first_len; p += 7) {
            uint8_t *t = malloc(first_len);
            memcpy(t, first, first_len);
            t[p] ^= (uint8_t)(1u << (p % 8));
            int rc = decode_atoms(m, a, t, first_len, &q, 64, got);
            if (rc == 0)
                missed++;
            else
                cr_assert_eq(rc, SKV_ERR_CORRUPT, "flip at %zu: %s", p, skv_strerror(rc));
            free(t);
        }
        cr_assert_eq(missed, 0, "%zu flips decoded as valid", missed);
        /* truncations: every shorter consistent stream fails cleanly */
        for (size_t cut = SKV_STREAM_HEADER + 16; cut < first_len; cut += 2) {
            uint8_t *t = malloc(cut);
            memcpy(t, first, cut);
            skv_store32_le(t + 12, (uint32_t)(cut - SKV_STREAM_HEADER));
            cr_assert_eq(decode_atoms(m, a, t, cut, &q, 64, got), SKV_ERR_CORRUPT, "cut %zu", cut);
            free(t);
        }
        free(got);
        free(first);
        skv_atoms_free(b2);
        skv_atoms_free(a);
        seq_free(&q);
        skv_cmodel_free(m);
    }
}

Test(atoms, all_channels_without_atoms_code_exactly_as_no_atoms_but_for_the_id)
{
    skv_dtype dt = SKV_DT_BF16;
    skv_cmodel *m = model_new(dt, SKV_MIX_DEFAULT, NULL);
    uint32_t k[2] = {2, 0}, lam[2] = {0, 0}, vals[2] = {1, 2}, cnts[2] = {3, 4};
    skv_atoms *a = NULL;
    cr_assert_eq(skv_atoms_create(dt, 2, k, lam, vals, cnts, &a), 0);
    seq_t q;
    gaussian_seq(&q, dt, 1000, 5);
    size_t l1, l2;
    uint8_t *b1 = encode_atoms(m, a, &q, 100, &l1, NULL);
    uint8_t *b2 = encode_seq(m, &q, NULL, &l2);
    cr_assert_eq(l1, l2);
    cr_assert_eq(memcmp(b1, b2, 16), 0);
    cr_assert_eq(memcmp(b1 + 20, b2 + 20, l1 - 20), 0, "the same stream but for the model id");
    free(b1);
    free(b2);
    seq_free(&q);
    skv_atoms_free(a);
    skv_cmodel_free(m);
}

Test(atoms, an_exact_atom_costs_about_log2_of_its_probability)
{
    skv_dtype dt = SKV_DT_BF16;
    skv_cmodel *m = model_new(dt, SKV_MIX_DEFAULT, NULL);
    /* one channel, atoms 1.0 (count 3) and 2.0 (count 1), lambda 1/2 */
    uint32_t k = 2, lam = 32768, vals[2] = {0x3f80, 0x4000}, cnts[2] = {3, 1};
    skv_atoms *a = NULL;
    cr_assert_eq(skv_atoms_create(dt, 1, &k, &lam, vals, cnts, &a), 0);
    seq_t q;
    seq_init(&q, dt, 4096);
    for (int i = 0; i < 4096; i++)
        seq_push(&q, i & 3 ? 0x3f80 : 0x4000, 0.0f, 1.0f);
    size_t len;
    double ideal;
    uint8_t *buf = encode_atoms(m, a, &q, 4096, &len, &ideal);
    /* 3/4 at -log2(3/8), 1/4 at -log2(1/8): 2.19 bits each */
    double want = 4096 * (0.75 * 1.415037 + 0.25 * 3.0);
    cr_assert_float_eq(ideal, want, 1.0, "ideal %.2f bits, want %.2f", ideal, want);
    cr_assert_lt((double)(len - SKV_STREAM_HEADER - 16) * 8.0, want * 1.005);
    free(buf);
    seq_free(&q);
    skv_atoms_free(a);
    skv_cmodel_free(m);
}

Test(atoms, create_rejects_unsorted_duplicate_zero_count_and_too_wide_values)
{
    skv_atoms *a = NULL;
    uint32_t k = 2, lam = 100;
    uint32_t unsorted[2] = {5, 4}, dup[2] = {4, 4}, wide[2] = {4, 0x10000}, ok[2] = {4, 5};
    uint32_t c1[2] = {1, 1}, c0[2] = {1, 0};
    cr_assert_eq(skv_atoms_create(SKV_DT_BF16, 1, &k, &lam, unsorted, c1, &a), SKV_ERR_ARG);
    cr_assert_eq(skv_atoms_create(SKV_DT_BF16, 1, &k, &lam, dup, c1, &a), SKV_ERR_ARG);
    cr_assert_eq(skv_atoms_create(SKV_DT_BF16, 1, &k, &lam, wide, c1, &a), SKV_ERR_ARG);
    cr_assert_eq(skv_atoms_create(SKV_DT_BF16, 1, &k, &lam, ok, c0, &a), SKV_ERR_ARG);
    cr_assert_eq(skv_atoms_create(SKV_DT_I32, 1, &k, &lam, ok, c1, &a), SKV_ERR_ARG);
    uint32_t big = SKV_ATOMS_MAX + 1, lam_big = 65536;
    cr_assert_eq(skv_atoms_create(SKV_DT_BF16, 1, &big, &lam, ok, c1, &a), SKV_ERR_ARG);
    cr_assert_eq(skv_atoms_create(SKV_DT_BF16, 1, &k, &lam_big, ok, c1, &a), SKV_ERR_ARG);
    cr_assert_null(a);
    cr_assert_eq(skv_atoms_create(SKV_DT_BF16, 1, &k, &lam, ok, c1, &a), 0);
    skv_cmodel *m = model_new(SKV_DT_F16, SKV_MIX_DEFAULT, NULL);
    skv_encoder *e = NULL;
    cr_assert_eq(skv_encoder_create(m, &e), 0);
    skv_encoder_reset_atoms(e, NULL, a);
    uint32_t x = 4;
    cr_assert_eq(skv_encoder_put(e, x, 0.0f, 1.0f), SKV_ERR_ARG, "bf16 atoms, f16 model");
    skv_encoder_free(e);
    skv_cmodel_free(m);
    skv_atoms_free(a);
    skv_atoms_free(NULL);
}

/* skv_encoder_set_ideal: a stream coded without its ideal code length is
 * the same bytes (every path of put_n: rows the row cache serves, scalars
 * classified one by one or eight lanes at a time, atoms), its ideal bits
 * are NaN, and the setting takes effect at the next reset. */
static void put_rows(skv_encoder *e, const seq_t *q, const skv_atoms *a, size_t row)
{
    skv_encoder_reset_atoms(e, NULL, a);
    for (size_t i = 0; i < q->n; i += row) {
        size_t k = q->n - i < row ? q->n - i : row;
        int rc = skv_encoder_put_n(e, q->x + i, q->mu + i, q->s + i, k);
        cr_assert_eq(rc, 0, "put_n at %zu: %s (%s)", i, skv_strerror(rc), skv_error_detail());
    }
}

static uint8_t *finish_copy(skv_encoder *e, size_t *len)
{
    size_t cap = skv_encoder_bound(e);
    uint8_t *buf = malloc(cap);
    cr_assert_not_null(buf);
    cr_assert_eq(skv_encoder_finish(e, buf, cap, len), 0, "%s", skv_error_detail());
    return buf;
}

Test(code_length, streams_without_the_ideal_cost_are_the_same_bytes)
{
    const skv_dtype dts[] = {SKV_DT_BF16, SKV_DT_F16, SKV_DT_F8E4M3, SKV_DT_F32};
    for (size_t di = 0; di < 4; di++) {
        const skv_dtype dt = dts[di];
        skv_cmodel *m = model_new(dt, SKV_MIX_DEFAULT, NULL);
        skv_atoms *atoms = test_atoms(dt, 40000);
        for (int kind = 0; kind < 3; kind++) {
            seq_t q;
            if (kind == 0) {
                gaussian_seq(&q, dt, 6000, 77 + di);
            } else if (kind == 1) { /* rows of 32 channels that repeat: the row cache */
                seq_t g;
                gaussian_seq(&g, dt, 6000, 91 + di);
                seq_init(&q, dt, 6000);
                for (size_t i = 0; i < 6000; i++)
                    seq_push(&q, g.x[i], g.mu[i % 32], g.s[i % 32]);
                seq_free(&g);
            } else {
                atoms_seq(&q, dt, 6000, 55 + di);
            }
            const skv_atoms *a = kind == 2 ? atoms : NULL;
            const size_t row = kind == 1 ? 32 : 61;
            skv_encoder *e = NULL;
            cr_assert_eq(skv_encoder_create(m, &e), 0);
            size_t l_on, l_off, l_again;
            put_rows(e, &q, a, row);
            const double ideal = skv_encoder_ideal_bits(e);
            uint8_t *on = finish_copy(e, &l_on);
            cr_assert(isfinite(ideal) && ideal > 0, "%s kind %d: ideal %g", skv_dtype_name(dt), kind,
                      ideal);
            skv_encoder_set_ideal(e, 0);
            put_rows(e, &q, a, row);
            skv_encoder_set_ideal(e, 1); /* from the next reset on */
            cr_assert(isnan(skv_encoder_ideal_bits(e)), "%s kind %d: no ideal cost kept",
                      skv_dtype_name(dt), kind);
            uint8_t *off = finish_copy(e, &l_off);
            cr_assert_eq(l_on, l_off, "%s kind %d: %zu vs %zu bytes", skv_dtype_name(dt), kind, l_on,
                         l_off);
            cr_assert_eq(memcmp(on, off, l_on), 0, "%s kind %d: the same bytes", skv_dtype_name(dt),
                         kind);
            put_rows(e, &q, a, row);
            cr_assert_eq(skv_encoder_ideal_bits(e), ideal, "%s kind %d: on again, the same sum",
                         skv_dtype_name(dt), kind);
            uint8_t *again = finish_copy(e, &l_again);
            cr_assert(l_again == l_on && memcmp(again, on, l_on) == 0);
            free(on);
            free(off);
            free(again);
            skv_encoder_free(e);
            seq_free(&q);
        }
        skv_atoms_free(atoms);
        skv_cmodel_free(m);
    }
}

/* The first row at or after r0 of the rows x[r * n ..] (of nrow) holding a
 * magnitude above big; nrow when none. */
static size_t first_big_row(const uint32_t *x, size_t n, size_t r0, size_t nrow, skv_dtype dt,
                            uint32_t big)
{
    const uint32_t mag = width_mask(dt) >> 1;
    for (size_t r = r0; r < nrow; r++)
        for (size_t i = 0; i < n; i++)
            if ((x[r * n + i] & mag) > big)
                return r;
    return nrow;
}

/* put_rows is rows calls of put_n with one row of predictions (the same
 * bytes, in any split of the rows), and get_rows decodes it back, stopping
 * right after each row that holds a magnitude above its limit; through
 * the row cache in the memory it is made with (rows of 32), in memory
 * grown for longer rows (300) and without it (rows longer than it takes),
 * with and without atoms, in every dtype, in stream versions 1 and 2
 * (whose rows are whole groups: 320 and RCACHE_MAX + 40, multiples of the
 * atoms' 5 channels too, which its AVX2 path then takes). Asking for more
 * rows than are left decodes nothing. */
Test(batch, put_rows_and_get_rows_are_put_n_and_get_n_of_a_repeated_row)
{
    skv_rng r;
    skv_rng_seed(&r, 777);
    enum { NROW = 37 };
    for (int ver = 1; ver <= 2; ver++)
    for (int di = 0; di < 4; di++) {
        const size_t widths[3] = {32, ver == 1 ? 300 : 320, ver == 1 ? RCACHE_MAX + 1 : RCACHE_MAX + 40};
        const skv_dtype dt = DTYPES[di];
        skv_cmodel *m = model_new(dt, SKV_MIX_DEFAULT, NULL);
        /* a limit most rows stay under: the magnitude of 100 (fp8 holds up
         * to 448) */
        const uint32_t big = to_dt(dt, 100.0f) & (width_mask(dt) >> 1);
        for (int with_atoms = 0; with_atoms < 2; with_atoms++) {
            skv_atoms *a = with_atoms ? test_atoms(dt, 40000) : NULL;
            for (int wi = 0; wi < 3; wi++) {
                const size_t n = widths[wi];
                float *mu = malloc(n * sizeof *mu), *s = malloc(n * sizeof *s);
                uint32_t *x = malloc(n * NROW * sizeof *x), *y = malloc(n * NROW * sizeof *y);
                cr_assert(mu && s && x && y);
                for (size_t c = 0; c < n; c++) {
                    random_mu_s(&r, dt, &mu[c], &s[c]);
                    if (ver == 2 ? c % 16 != 5 : c % 3 == 0) { /* tame ones too, so that most rows pass
                                                                * the limit (version 2: most groups, so
                                                                * that its AVX2 path takes them) */
                        mu[c] = (float)skv_rng_normal(&r);
                        s[c] = 0.25f;
                    }
                }
                for (size_t t = 0; t < NROW; t++)
                    for (size_t c = 0; c < n; c++) {
                        uint64_t k = skv_rng_next(&r);
                        float v = isfinite(mu[c]) && isfinite(s[c])
                                      ? mu[c] + s[c] * (float)skv_rng_normal(&r)
                                      : 0.5f;
                        if (!(fabsf(v) <= 50.0f))
                            v = 1.0f;
                        uint32_t xv = to_dt(dt, v);
                        if (k % 97 == 0)
                            xv = (uint32_t)(k >> 8); /* anything, big ones included */
                        x[t * n + c] = xv & width_mask(dt);
                    }
                x[9 * n + 1] = to_dt(dt, 300.0f); /* at least row 9 is over the limit */
                const char *what = skv_dtype_name(dt);
                /* put_n row by row, then put_rows in three pieces */
                skv_encoder *e = NULL;
                cr_assert_eq(skv_encoder_create(m, &e), 0);
                cr_assert_eq(skv_encoder_set_version(e, ver), 0);
                skv_encoder_reset_atoms(e, NULL, a);
                for (size_t t = 0; t < NROW; t++)
                    cr_assert_eq(skv_encoder_put_n(e, x + t * n, mu, s, n), 0);
                size_t lref, lrows;
                uint8_t *ref = finish_copy(e, &lref);
                skv_encoder_reset_atoms(e, NULL, a);
                cr_assert_eq(skv_encoder_put_rows(e, x, mu, s, n, 0), 0);
                cr_assert_eq(skv_encoder_put_rows(e, x, mu, s, n, 5), 0, "%s", skv_error_detail());
                cr_assert_eq(skv_encoder_put_rows(e, x + 5 * n, mu, s, n, 1), 0);
                cr_assert_eq(skv_encoder_put_rows(e, x + 6 * n, mu, s, n, NROW - 6), 0);
                uint8_t *rows = finish_copy(e, &lrows);
                cr_assert_eq(lrows, lref, "%s n %zu atoms %d version %d", what, n, with_atoms, ver);
                cr_assert_eq(memcmp(rows, ref, lref), 0, "%s n %zu atoms %d version %d: same bytes", what, n,
                             with_atoms, ver);
                /* get_rows: too many rows decodes nothing; then it stops after
                 * each row over the limit, and the rest follows */
                skv_decoder *d = NULL;
                skv_stream_info info;
                cr_assert_eq(skv_decoder_create(m, &d), 0);
                cr_assert_eq(skv_decoder_begin_atoms(d, ref, lref, a, &info), 0);
                size_t done = 99;
                cr_assert_eq(skv_decoder_get_rows(d, mu, s, n, NROW + 1, big, y, &done),
                             SKV_ERR_ARG);
                cr_assert_eq(done, 0);
                size_t at = 0, stops = 0;
                while (at < NROW) {
                    size_t want = first_big_row(x, n, at, NROW, dt, big);
                    want = want < NROW ? want + 1 : NROW;
                    int rc = skv_decoder_get_rows(d, mu, s, n, NROW - at, big, y + at * n, &done);
                    cr_assert_eq(rc, 0, "%s: %s", what, skv_error_detail());
                    cr_assert_eq(at + done, want, "%s n %zu atoms %d version %d: stopped at row %zu, not %zu",
                                 what, n, with_atoms, ver, at + done, want);
                    at += done;
                    stops++;
                }
                cr_assert_geq(stops, 2, "row 9 stops it");
                cr_assert_eq(memcmp(y, x, n * NROW * sizeof *x), 0, "%s: rows decoded", what);
#ifdef SKV_HAVE_CLS8
                /* (rows of 32 are not whole rounds of the atoms' 5 channels) */
                if (ver == 2 && dt == SKV_DT_BF16 && n <= RCACHE_MAX && (!a || n % 5 == 0) &&
                    cls_simd() >= 2)
                    cr_expect_gt(skv__decoder_fast_groups(d), (uint64_t)(n * NROW / 8) / 4,
                                 "n %zu atoms %d: the AVX2 path took %" PRIu64 " of %zu groups", n, with_atoms,
                                 skv__decoder_fast_groups(d), n * NROW / 8);
#endif
                cr_assert_eq(skv_decoder_end(d), 0, "%s", skv_error_detail());
                /* no limit: every row in one call */
                cr_assert_eq(skv_decoder_begin_atoms(d, rows, lrows, a, &info), 0);
                memset(y, 0, n * NROW * sizeof *y);
                cr_assert_eq(skv_decoder_get_rows(d, mu, s, n, NROW, UINT32_MAX, y, &done), 0);
                cr_assert_eq(done, NROW);
                cr_assert_eq(memcmp(y, x, n * NROW * sizeof *x), 0);
                cr_assert_eq(skv_decoder_end(d), 0);
                skv_decoder_free(d);
                skv_encoder_free(e);
                free(ref);
                free(rows);
                free(mu);
                free(s);
                free(x);
                free(y);
            }
            skv_atoms_free(a);
        }
        skv_cmodel_free(m);
    }
}

/* Rows longer than the row cache's first memory (RCACHE_MIN) grow it,
 * twice over for 1000 scalars, and code the bytes the same rows give in
 * pieces short enough for that memory; when the larger memory cannot be
 * had (every allocation failing, after a first stream that built the
 * tables and the encoder's buffers), the coder goes on without the cache
 * to the same bytes and scalars. */
Test(rcache, longer_rows_grow_the_cache_or_go_without_it)
{
    skv_rng r;
    skv_rng_seed(&r, 4242);
    enum { NROW = 12, PIECE = 50 };
    const size_t widths[2] = {300, 1000};
    skv_cmodel *m = model_new(SKV_DT_BF16, SKV_MIX_DEFAULT, NULL);
    for (int wi = 0; wi < 2; wi++) {
        const size_t n = widths[wi];
        cr_assert_gt(n, RCACHE_MIN);
        float *mu = malloc(n * sizeof *mu), *s = malloc(n * sizeof *s);
        uint32_t *x = malloc(n * NROW * sizeof *x), *y = malloc(n * NROW * sizeof *y);
        cr_assert(mu && s && x && y);
        for (size_t c = 0; c < n; c++)
            random_mu_s(&r, SKV_DT_BF16, &mu[c], &s[c]);
        for (size_t t = 0; t < NROW; t++)
            for (size_t c = 0; c < n; c++) {
                float v = isfinite(mu[c]) && isfinite(s[c]) ? mu[c] + s[c] * (float)skv_rng_normal(&r)
                                                            : 0.5f;
                x[t * n + c] = to_dt(SKV_DT_BF16, v);
            }
        skv_encoder *e = NULL;
        skv_decoder *d = NULL;
        skv_stream_info info;
        cr_assert_eq(skv_encoder_create(m, &e), 0);
        cr_assert_eq(skv_decoder_create(m, &d), 0);
        /* pieces of PIECE scalars: the first memory holds them */
        skv_encoder_reset(e, NULL);
        for (size_t t = 0; t < NROW; t++)
            for (size_t c = 0; c < n; c += PIECE) {
                size_t k = n - c < PIECE ? n - c : PIECE;
                cr_assert_eq(skv_encoder_put_n(e, x + t * n + c, mu + c, s + c, k), 0);
            }
        size_t lref, len;
        uint8_t *ref = finish_copy(e, &lref);
        /* whole rows: the cache grows, and its second row on is a hit */
        skv_encoder_reset(e, NULL);
        for (size_t t = 0; t < NROW; t++)
            cr_assert_eq(skv_encoder_put_n(e, x + t * n, mu, s, n), 0);
        cr_assert_geq(skv__encoder_rcache(e)->cap, n);
        cr_assert_eq(skv__encoder_rcache(e)->off, 0);
        cr_assert_eq(skv__encoder_rcache(e)->hits, NROW - 1);
        uint8_t *got = finish_copy(e, &len);
        cr_assert_eq(len, lref);
        cr_assert_eq(memcmp(got, ref, lref), 0, "n %zu: the same bytes", n);
        free(got);
        cr_assert_eq(skv_decoder_begin(d, ref, lref, &info), 0);
        for (size_t t = 0; t < NROW; t++)
            cr_assert_eq(skv_decoder_get_n(d, mu, s, y + t * n, n), 0);
        cr_assert_eq(skv__decoder_rcache(d)->hits, NROW - 1);
        cr_assert_eq(skv_decoder_end(d), 0);
        cr_assert_eq(memcmp(y, x, n * NROW * sizeof *x), 0);
        /* the same with fresh coders whose memory cannot grow */
        skv_encoder *e2 = NULL;
        skv_decoder *d2 = NULL;
        cr_assert_eq(skv_encoder_create(m, &e2), 0);
        cr_assert_eq(skv_decoder_create(m, &d2), 0);
        skv_encoder_reset(e2, NULL); /* a first stream in pieces: the encoder's buffers */
        for (size_t t = 0; t < NROW; t++)
            for (size_t c = 0; c < n; c += PIECE) {
                size_t k = n - c < PIECE ? n - c : PIECE;
                cr_assert_eq(skv_encoder_put_n(e2, x + t * n + c, mu + c, s + c, k), 0);
            }
        free(finish_copy(e2, &len));
        skv_encoder_reset(e2, NULL);
        uint8_t *buf = malloc(lref);
        cr_assert(buf);
        skv_alloc_fail_after(0, 1);
        int rc = 0;
        for (size_t t = 0; t < NROW && !rc; t++)
            rc = skv_encoder_put_n(e2, x + t * n, mu, s, n);
        if (!rc)
            rc = skv_encoder_finish(e2, buf, lref, &len);
        int off = skv__encoder_rcache(e2)->off;
        size_t cap = skv__encoder_rcache(e2)->cap;
        skv_alloc_fail_after(-1, 0);
        cr_assert_eq(rc, 0, "n %zu: %s", n, skv_error_detail());
        cr_assert_eq(off, 1);
        cr_assert_eq(cap, RCACHE_MIN);
        cr_assert_eq(len, lref);
        cr_assert_eq(memcmp(buf, ref, lref), 0, "n %zu: the same bytes without the cache", n);
        memset(y, 0, n * NROW * sizeof *y);
        cr_assert_eq(skv_decoder_begin(d2, ref, lref, &info), 0);
        skv_alloc_fail_after(0, 1);
        for (size_t t = 0; t < NROW && !rc; t++)
            rc = skv_decoder_get_n(d2, mu, s, y + t * n, n);
        if (!rc)
            rc = skv_decoder_end(d2);
        off = skv__decoder_rcache(d2)->off;
        skv_alloc_fail_after(-1, 0);
        cr_assert_eq(rc, 0, "n %zu: %s", n, skv_error_detail());
        cr_assert_eq(off, 1);
        cr_assert_eq(memcmp(y, x, n * NROW * sizeof *x), 0, "n %zu: decoded without the cache", n);
        free(buf);
        free(ref);
        skv_decoder_free(d2);
        skv_encoder_free(e2);
        skv_decoder_free(d);
        skv_encoder_free(e);
        free(mu);
        free(s);
        free(x);
        free(y);
    }
    skv_cmodel_free(m);
}

/* ========================================================================
 * Stream version 2 (the lane layout): the reference path
 * ====================================================================== */

/* the states v2_encode asks for */
static int v2_states = 16;

/* q coded as version 2 (with atoms a, or NULL), put_n in batches of pb */
static uint8_t *v2_encode(skv_cmodel *m, const skv_atoms *a, const seq_t *q, size_t pb, size_t *len)
{
    skv_encoder *e = NULL;
    cr_assert_eq(skv_encoder_create(m, &e), 0);
    cr_assert_eq(skv_encoder_set_version(e, 2), 0);
    cr_assert_eq(skv_encoder_set_states(e, v2_states), 0);
    skv_encoder_reset_atoms(e, NULL, a);
    for (size_t i = 0; i < q->n; i += pb) {
        size_t nb = q->n - i < pb ? q->n - i : pb;
        int rc = skv_encoder_put_n(e, q->x + i, q->mu + i, q->s + i, nb);
        cr_assert_eq(rc, 0, "%s", skv_error_detail());
    }
    size_t cap = skv_encoder_bound(e);
    uint8_t *out = malloc(cap);
    cr_assert_not_null(out);
    int rc = skv_encoder_finish(e, out, cap, len);
    cr_assert_eq(rc, 0, "finish: %s (%s)", skv_strerror(rc), skv_error_detail());
    skv_encoder_free(e);
    return out;
}

/* Decode in get_n calls of gb scalars (a multiple of 8); first error or 0 */
static int v2_decode(skv_cmodel *m, const skv_atoms *a, const uint8_t *buf, size_t len, const seq_t *q,
                     size_t gb, uint32_t *out)
{
    skv_decoder *d = NULL;
    cr_assert_eq(skv_decoder_create(m, &d), 0);
    skv_stream_info info;
    int rc = skv_decoder_begin_atoms(d, buf, len, a, &info);
    if (!rc) {
        cr_assert_eq(info.version, 2);
        cr_assert_eq(info.states, (uint32_t)v2_states);
    }
    for (size_t i = 0; !rc && i < info.n && i < q->n; i += gb) {
        size_t nb = q->n - i < gb ? q->n - i : gb;
        rc = skv_decoder_get_n(d, q->mu + i, q->s + i, out + i, nb);
    }
    if (!rc)
        rc = skv_decoder_end(d);
    skv_decoder_free(d);
    return rc;
}

static void v2_assert_round_trip(skv_cmodel *m, const skv_atoms *a, const seq_t *q, const char *what)
{
    static const size_t pbs[] = {1, 7, 64, 1000000}, gbs[] = {8, 24, 1 << 20};
    uint32_t *got = malloc((q->n + 1) * sizeof *got);
    cr_assert_not_null(got);
    for (size_t p = 0; p < sizeof pbs / sizeof *pbs; p++) {
        size_t len;
        uint8_t *buf = v2_encode(m, a, q, pbs[p], &len);
        for (size_t g = 0; g < sizeof gbs / sizeof *gbs; g++) {
            memset(got, 0xa5, (q->n + 1) * sizeof *got);
            int rc = v2_decode(m, a, buf, len, q, gbs[g], got);
            cr_assert_eq(rc, 0, "%s %s: decode in %zu: %s (%s)", skv_dtype_name(q->dt), what, gbs[g],
                         skv_strerror(rc), skv_error_detail());
            for (size_t i = 0; i < q->n; i++)
                cr_assert_eq(got[i], q->x[i], "%s %s: scalar %zu: coded 0x%x, decoded 0x%x",
                             skv_dtype_name(q->dt), what, i, q->x[i], got[i]);
        }
        free(buf);
    }
    free(got);
}

Test(v2, round_trip_for_every_dtype_and_way_of_coding)
{
    for (int di = 0; di < 4; di++) {
        skv_dtype dt = DTYPES[di];
        skv_cmodel *m = model_new(dt, SKV_MIX_DEFAULT, NULL);
        seq_t q;
        gaussian_seq(&q, dt, 6003, 300 + (uint64_t)di); /* STEP, BUCKET, escapes; a ragged end */
        v2_assert_round_trip(m, NULL, &q, "gaussian");
        seq_free(&q);
        /* edge values under hostile predictions */
        uint32_t ev[32];
        size_t ne = edge_values(dt, ev);
        seq_init(&q, dt, ne * 6);
        const float mus[] = {0.0f, NAN, INFINITY, 1.0f, -FLT_MAX, 0x1p-149f};
        for (size_t k = 0; k < ne; k++)
            for (size_t j = 0; j < 6; j++)
                seq_push(&q, ev[k], mus[j], j % 2 ? 1e-30f : 1.0f);
        v2_assert_round_trip(m, NULL, &q, "edge values");
        seq_free(&q);
        skv_cmodel_free(m);
    }
}

Test(v2, round_trip_with_atoms)
{
    for (int di = 0; di < 4; di++) {
        skv_dtype dt = DTYPES[di];
        skv_cmodel *m = model_new(dt, (skv_mix){600u, 100u}, NULL);
        skv_atoms *a = test_atoms(dt, 20000u);
        seq_t q;
        atoms_seq(&q, dt, 2001, 91 + (uint64_t)di);
        v2_assert_round_trip(m, a, &q, "atoms");
        seq_free(&q);
        skv_atoms_free(a);
        skv_cmodel_free(m);
    }
}

Test(v2, the_decoder_takes_whole_groups_and_version_1_stays_the_default)
{
    skv_cmodel *m = model_new(SKV_DT_BF16, SKV_MIX_DEFAULT, NULL);
    seq_t q;
    gaussian_seq(&q, SKV_DT_BF16, 21, 5);
    size_t len;
    uint8_t *buf = v2_encode(m, NULL, &q, 21, &len);
    skv_decoder *d = NULL;
    cr_assert_eq(skv_decoder_create(m, &d), 0);
    skv_stream_info info;
    cr_assert_eq(skv_decoder_begin(d, buf, len, &info), 0);
    uint32_t x[24];
    cr_expect_eq(skv_decoder_get(d, q.mu[0], q.s[0], x), SKV_ERR_ARG);
    cr_expect_eq(skv_decoder_get_n(d, q.mu, q.s, x, 12), SKV_ERR_ARG);
    cr_assert_eq(skv_decoder_get_n(d, q.mu, q.s, x, 16), 0, "%s", skv_error_detail());
    cr_expect_eq(skv_decoder_get_n(d, q.mu + 16, q.s + 16, x + 16, 4), SKV_ERR_ARG);
    cr_assert_eq(skv_decoder_get_n(d, q.mu + 16, q.s + 16, x + 16, 5), 0, "%s", skv_error_detail());
    cr_expect_eq(skv_decoder_get_n(d, q.mu, q.s, x, 0), 0, "after a ragged last group, nothing asked");
    cr_assert_eq(skv_decoder_end(d), 0, "%s", skv_error_detail());
    for (int i = 0; i < 21; i++)
        cr_expect_eq(x[i], q.x[i]);
    free(buf);
    /* an empty stream */
    seq_t none = {SKV_DT_BF16, 0, 0, NULL, NULL, NULL};
    buf = v2_encode(m, NULL, &none, 8, &len);
    cr_expect_eq(v2_decode(m, NULL, buf, len, &none, 8, x), 0, "%s", skv_error_detail());
    free(buf);
    /* a fresh encoder writes version 1; other versions are refused */
    skv_encoder *e = NULL;
    cr_assert_eq(skv_encoder_create(m, &e), 0);
    cr_expect_eq(skv_encoder_set_version(e, 3), SKV_ERR_ARG);
    cr_expect_eq(skv_encoder_set_version(e, 0), SKV_ERR_ARG);
    buf = encode_with(e, &q, NULL, &len);
    cr_assert_eq(skv_stream_info_read(buf, len, &info), 0);
    cr_expect_eq(info.version, 1);
    free(buf);
    skv_encoder_free(e);
    skv_decoder_free(d);
    seq_free(&q);
    skv_cmodel_free(m);
}

/* sixteen states and eight */
Test(v2, truncated_and_flipped_streams_fail)
{
    skv_cmodel *m = model_new(SKV_DT_BF16, SKV_MIX_DEFAULT, NULL);
    seq_t q;
    gaussian_seq(&q, SKV_DT_BF16, 203, 17);
    for (v2_states = 16; v2_states >= 8; v2_states -= 8) {
        size_t len;
        uint8_t *buf = v2_encode(m, NULL, &q, 64, &len);
        uint32_t *got = malloc(q.n * sizeof *got);
        for (size_t cut = 0; cut < len; cut++)
            cr_expect_neq(v2_decode(m, NULL, buf, cut, &q, 8, got), 0, "%d states: prefix of %zu of %zu bytes",
                          v2_states, cut, len);
        /* every bit of the payload */
        for (size_t b = SKV_STREAM_HEADER; b < len; b++)
            for (int bit = 0; bit < 8; bit++) {
                buf[b] ^= (uint8_t)(1u << bit);
                int rc = v2_decode(m, NULL, buf, len, &q, 8, got);
                cr_expect_neq(rc, 0, "%d states: byte %zu bit %d flipped: decoded without an error", v2_states, b,
                              bit);
                buf[b] ^= (uint8_t)(1u << bit);
            }
        cr_assert_eq(v2_decode(m, NULL, buf, len, &q, 8, got), 0);
        free(got);
        free(buf);
    }
    v2_states = 16;
    seq_free(&q);
    skv_cmodel_free(m);
}

/* Stat-like rows (32 channels of fixed (mu, s), bf16), with a few
 * escapes, exact zeros and subnormals among them: the AVX2 group path
 * (skv__cls_simd = 2) and the reference path (0) decode the same
 * scalars, and the AVX2 path takes most groups. */
enum { V2C = 32, V2T = 300 };

/* A value about mu at scale sg, or (k = rng % period, returned: 0, 1, 2)
 * an escape, an exact zero or a subnormal in bf16 */
static float odd_value(skv_rng *r, float mu, float sg, unsigned period, uint64_t *kout)
{
    float v = mu + sg * skv_rng_normal(r);
    uint64_t k = skv_rng_next(r) % period;
    if (k == 0)
        v = mu + sg * 1e4f; /* an escape */
    else if (k == 1)
        v = 0.0f;
    else if (k == 2)
        v = 0x1p-130f; /* subnormal in bf16 */
    *kout = k;
    return v;
}

/* Rows of V2C stat-like bf16 scalars (escapes, zeros, subnormals; with
 * atoms, each channel's atoms half the time) coded as version 2 with the
 * AVX2 paths on and off: the same bytes, the same values, and the AVX2
 * decoder takes more than 3/4 of the groups */
static void v2_avx2_check(const skv_atoms *a, const float *mu0, size_t mstride, const float *sg, skv_rng *rp)
{
    enum { C = V2C, T = V2T };
    skv_cmodel *m = model_new(SKV_DT_BF16, a ? (skv_mix){600u, 100u} : SKV_MIX_DEFAULT, NULL);
    skv_rng r = *rp;
    seq_t q;
    seq_init(&q, SKV_DT_BF16, C * T);
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) {
            const float *mu = mu0 + (size_t)t * mstride;
            uint64_t k;
            uint32_t x = to_dt(SKV_DT_BF16, odd_value(&r, mu[c], sg[c], 500, &k));
            const skv_atom_ch *ch = a ? &a->ch[c] : NULL;
            if (ch && ch->k && (k % 2 || c < 8)) /* the first group of a row: all atoms */
                x = ch->val[k % ch->k];
            seq_push(&q, x, mu[c], sg[c]);
        }
    size_t len;
    uint8_t *buf = v2_encode(m, a, &q, C, &len);
    int saved = skv__cls_simd;
    /* the encoder's AVX2 path (streams without their ideal cost, rows of
     * whole groups) writes the same bytes as version 1's planning sorted:
     * rows of 32 and batches of 13 (groups split across calls), each with
     * the AVX2 path on and off */
    for (int pass = 0; pass < 4; pass++) {
        skv__cls_simd = pass & 1 ? 0 : 2;
        skv_encoder *e = NULL;
        cr_assert_eq(skv_encoder_create(m, &e), 0);
        cr_assert_eq(skv_encoder_set_version(e, 2), 0);
        cr_assert_eq(skv_encoder_set_states(e, v2_states), 0);
        skv_encoder_set_ideal(e, 0);
        skv_encoder_reset_atoms(e, NULL, a);
        size_t pb = pass < 2 ? C : 13;
        for (size_t i = 0; i < q.n; i += pb) {
            size_t nb = q.n - i < pb ? q.n - i : pb;
            cr_assert_eq(skv_encoder_put_n(e, q.x + i, q.mu + i, q.s + i, nb), 0, "%s", skv_error_detail());
        }
        size_t cap = skv_encoder_bound(e), l2;
        uint8_t *b2 = malloc(cap);
        cr_assert_eq(skv_encoder_finish(e, b2, cap, &l2), 0, "%s", skv_error_detail());
        cr_expect(l2 == len && memcmp(b2, buf, len) == 0, "%s pass %d: the stream differs",
                  a ? "atoms" : "no atoms", pass);
        free(b2);
        skv_encoder_free(e);
    }
    uint64_t fast[2];
    for (int pass = 0; pass < 2; pass++) {
        skv__cls_simd = pass ? 0 : 2;
        skv_decoder *d = NULL;
        cr_assert_eq(skv_decoder_create(m, &d), 0);
        cr_assert_eq(skv_decoder_begin_atoms(d, buf, len, a, NULL), 0);
        uint32_t x[C];
        for (int t = 0; t < T; t++) {
            int rc = skv_decoder_get_n(d, mu0 + (size_t)t * mstride, sg, x, C);
            cr_assert_eq(rc, 0, "pass %d row %d: %s (%s)", pass, t, skv_strerror(rc), skv_error_detail());
            for (int c = 0; c < C; c++)
                cr_assert_eq(x[c], q.x[t * C + c], "pass %d row %d channel %d", pass, t, c);
        }
        cr_assert_eq(skv_decoder_end(d), 0, "pass %d: %s", pass, skv_error_detail());
        fast[pass] = skv__decoder_fast_groups(d);
        skv_decoder_free(d);
    }
    skv__cls_simd = saved;
    cr_expect_eq(fast[1], 0, "the reference pass took %" PRIu64 " groups by AVX2", fast[1]);
#ifdef SKV_HAVE_CLS8
    if (cls_simd() >= 2)
        cr_expect_gt(fast[0], (uint64_t)(C * T / 8) * 3 / 4, "%s: the AVX2 path took %" PRIu64 " of %d groups",
                     a ? "atoms" : "no atoms", fast[0], C * T / 8);
#endif
    free(buf);
    seq_free(&q);
    skv_cmodel_free(m);
    *rp = r;
}

/* The classes of half a row, put on another thread: their tables are
 * built there (glibc gives a thread its own arena, far from the main
 * heap) */
struct half_put {
    skv_cmodel *m;
    const float *mu, *sg;
};
static void *put_half_row(void *arg)
{
    const struct half_put *h = arg;
    skv_encoder *e = NULL;
    uint32_t x[16];
    for (int c = 0; c < 16; c++)
        x[c] = to_dt(SKV_DT_BF16, h->mu[c]);
    if (skv_encoder_create(h->m, &e) == 0) {
        skv_encoder_set_version(e, 2);
        skv_encoder_reset(e, NULL);
        skv_encoder_put_n(e, x, h->mu, h->sg, 16);
    }
    skv_encoder_free(e);
    return NULL;
}

/* A row whose tables were built by two threads (half each) is still
 * decoded by the AVX2 path (its gathers reach every table from one base:
 * stat on a pool, as codec bench's decode on two threads, took the
 * reference path before the tables lived in one block) */
Test(v2, the_avx2_path_takes_tables_built_on_two_threads)
{
    enum { C = 32, T = 64 };
    skv_cmodel *m = model_new(SKV_DT_BF16, SKV_MIX_DEFAULT, NULL);
    float mu[C], sg[C];
    skv_rng r;
    skv_rng_seed(&r, 99);
    for (int c = 0; c < C; c++) {
        mu[c] = (skv_rng_uniform(&r) - 0.5f) * 4.0f;
        sg[c] = c < 16 ? 0.5f + 0.1f * (float)c : 3.0f + 0.5f * (float)(c - 16); /* other widths */
    }
    pthread_t th;
    struct half_put h = {m, mu, sg};
    cr_assert_eq(pthread_create(&th, NULL, put_half_row, &h), 0);
    cr_assert_eq(pthread_join(th, NULL), 0);
    seq_t q;
    seq_init(&q, SKV_DT_BF16, C * T);
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++)
            seq_push(&q, to_dt(SKV_DT_BF16, mu[c] + sg[c] * skv_rng_normal(&r)), mu[c], sg[c]);
    size_t len;
    uint8_t *buf = v2_encode(m, NULL, &q, C, &len);
    skv_decoder *d = NULL;
    cr_assert_eq(skv_decoder_create(m, &d), 0);
    cr_assert_eq(skv_decoder_begin(d, buf, len, NULL), 0);
    uint32_t x[C];
    for (int t = 0; t < T; t++) {
        cr_assert_eq(skv_decoder_get_n(d, mu, sg, x, C), 0, "%s", skv_error_detail());
        cr_assert_eq(memcmp(x, q.x + t * C, sizeof x), 0, "row %d", t);
    }
    cr_assert_eq(skv_decoder_end(d), 0);
#ifdef SKV_HAVE_CLS8
    if (cls_simd() >= 2)
        cr_expect_gt(skv__decoder_fast_groups(d), (uint64_t)(C * T / 8) * 3 / 4,
                     "the AVX2 path took %" PRIu64 " of %d groups", skv__decoder_fast_groups(d), C * T / 8);
#endif
    skv_decoder_free(d);
    free(buf);
    seq_free(&q);
    skv_cmodel_free(m);
}

Test(v2, the_avx2_paths_code_what_the_reference_paths_code)
{
    enum { C = V2C };
    float mu[C], sg[C];
    skv_rng r;
    skv_rng_seed(&r, 2026);
    for (int c = 0; c < C; c++) {
        mu[c] = (c % 3 == 0) ? 0.0f : (skv_rng_uniform(&r) - 0.5f) * 4.0f;
        sg[c] = 0.05f + 2.0f * skv_rng_uniform(&r);
    }
    v2_avx2_check(NULL, mu, 0, sg, &r);
    /* atoms on three channels in four and on the first eight: zero, the
     * mean, the mean + s, -s (stat's layer-0 streams have them) */
    uint32_t k[C], lam[C], vals[4 * C], cnts[4 * C];
    size_t off = 0;
    for (int c = 0; c < C; c++) {
        uint32_t t[4] = {to_dt(SKV_DT_BF16, 0.0f), to_dt(SKV_DT_BF16, mu[c]), to_dt(SKV_DT_BF16, mu[c] + sg[c]),
                         to_dt(SKV_DT_BF16, -sg[c])};
        qsort(t, 4, sizeof *t, cmp_u32_test);
        k[c] = 0;
        for (int j = 0; j < 4 && (c % 4 != 1 || c < 8); j++)
            if (k[c] == 0 || t[j] != vals[off + k[c] - 1]) {
                vals[off + k[c]] = t[j];
                cnts[off + k[c]] = 5u - (uint32_t)j;
                k[c]++;
            }
        lam[c] = k[c] ? 30000u : 0u;
        off += k[c];
    }
    skv_atoms *a = NULL;
    cr_assert_eq(skv_atoms_create(SKV_DT_BF16, C, k, lam, vals, cnts, &a), 0, "%s", skv_error_detail());
    v2_avx2_check(a, mu, 0, sg, &r);
    skv_atoms_free(a);
}

/* ctx-like rows: every row its own predictions (the row before, moved a
 * little), widths from far below a lattice step (STEP classes) to many
 * steps (BUCKET): classified straight into the AVX2 paths' packs (the row
 * cache switches itself off), with sixteen states and with eight */
Test(v2, rows_that_do_not_repeat_take_the_avx2_paths)
{
    enum { C = V2C, T = V2T };
    static float mu[(T + 1) * C];
    float sg[C];
    skv_rng r;
    skv_rng_seed(&r, 4242);
    /* the first group all STEP, the second all BUCKET (v2_pack_rows works
     * such a group's class out alone), the others mixed */
    for (int c = 0; c < C; c++) {
        mu[c] = (skv_rng_uniform(&r) - 0.5f) * 8.0f;
        if (c < 8)
            mu[c] = 2.0f + (float)c; /* |mu| >= 2: a bf16 step of 2^-6 or more */
        int tiny = c < 8 || (c >= 16 && c % 4 == 0);
        sg[c] = tiny ? 0.0005f + 0.0001f * (float)c : 0.05f + 2.0f * skv_rng_uniform(&r);
    }
    for (int t = 1; t <= T; t++)
        for (int c = 0; c < C; c++)
            mu[t * C + c] = mu[(t - 1) * C + c] + 0.3f * sg[c] * skv_rng_normal(&r);
    for (int ns = 16; ns >= 8; ns -= 8) {
        v2_states = ns;
        skv_rng r2 = r;
        v2_avx2_check(NULL, mu, C, sg, &r2);
    }
    v2_states = 16;
}

/* Eight states: every dtype and way of coding round-trips, the stream
 * is shorter, read as sixteen it fails; other counts are refused (damage:
 * truncated_and_flipped_streams_fail) */
Test(v2, eight_states)
{
    v2_states = 8;
    for (int di = 0; di < 4; di++) {
        skv_dtype dt = DTYPES[di];
        skv_cmodel *m = model_new(dt, SKV_MIX_DEFAULT, NULL);
        seq_t q;
        gaussian_seq(&q, dt, 6003, 300 + (uint64_t)di);
        v2_assert_round_trip(m, NULL, &q, "gaussian, eight states");
        size_t l8, l16;
        uint8_t *b8 = v2_encode(m, NULL, &q, 64, &l8);
        v2_states = 16;
        uint8_t *b16 = v2_encode(m, NULL, &q, 64, &l16);
        v2_states = 8;
        cr_expect_lt(l8 + 16, l16, "%s: %zu bytes with eight states, %zu with sixteen", skv_dtype_name(dt), l8, l16);
        free(b8);
        free(b16);
        seq_free(&q);
        skv_cmodel_free(m);
    }
    skv_cmodel *m = model_new(SKV_DT_BF16, SKV_MIX_DEFAULT, NULL);
    seq_t q;
    gaussian_seq(&q, SKV_DT_BF16, 203, 17);
    size_t len;
    uint8_t *buf = v2_encode(m, NULL, &q, 64, &len);
    uint32_t *got = malloc(q.n * sizeof *got);
    cr_assert_eq(v2_decode(m, NULL, buf, len, &q, 8, got), 0, "%s", skv_error_detail());
    skv_stream_info info;
    buf[7] = 0; /* read as sixteen states: fails, never misdecodes */
    v2_states = 16;
    cr_expect_neq(v2_decode(m, NULL, buf, len, &q, 8, got), 0);
    buf[7] = 2;
    cr_expect_eq(skv_stream_info_read(buf, len, &info), SKV_ERR_FORMAT);
    skv_encoder *e = NULL;
    cr_assert_eq(skv_encoder_create(m, &e), 0);
    cr_expect_eq(skv_encoder_set_states(e, 4), SKV_ERR_ARG);
    cr_expect_eq(skv_encoder_set_states(e, 32), SKV_ERR_ARG);
    skv_encoder_free(e);
    free(got);
    free(buf);
    seq_free(&q);
    skv_cmodel_free(m);
    v2_states = 16;
}

/* The row cache switched off by the caller (the delta coder's ctx): the
 * same bytes and values as with it on, in both versions, and it stays
 * off across resets and begins */
Test(v2, the_row_cache_switched_off_changes_nothing_but_speed)
{
    enum { C = 32, T = 40 };
    skv_cmodel *m = model_new(SKV_DT_BF16, SKV_MIX_DEFAULT, NULL);
    float mu[C], sg[C];
    skv_rng r;
    skv_rng_seed(&r, 77);
    for (int c = 0; c < C; c++)
        mu[c] = (skv_rng_uniform(&r) - 0.5f) * 4.0f, sg[c] = 0.01f + skv_rng_uniform(&r);
    uint32_t x[C * T], y[C * T];
    for (int i = 0; i < C * T; i++)
        x[i] = to_dt(SKV_DT_BF16, mu[i % C] + sg[i % C] * skv_rng_normal(&r));
    for (int ver = 1; ver <= 2; ver++) {
        uint8_t *buf[2];
        size_t len[2];
        for (int on = 0; on < 2; on++) {
            skv_encoder *e = NULL;
            cr_assert_eq(skv_encoder_create(m, &e), 0);
            cr_assert_eq(skv_encoder_set_version(e, ver), 0);
            skv_encoder_set_row_cache(e, on);
            for (int round = 0; round < 2; round++) { /* the second after a reset */
                skv_encoder_reset(e, NULL);
                for (int t = 0; t < T; t++)
                    cr_assert_eq(skv_encoder_put_n(e, x + t * C, mu, sg, C), 0, "%s", skv_error_detail());
                if (!on) /* (on, it may still switch itself off: version 2 with the ideal cost puts groups) */
                    cr_expect_eq(skv__encoder_rcache(e)->off, 1, "version %d, round %d", ver, round);
            }
            size_t cap = skv_encoder_bound(e);
            buf[on] = malloc(cap);
            cr_assert_eq(skv_encoder_finish(e, buf[on], cap, &len[on]), 0, "%s", skv_error_detail());
            skv_encoder_free(e);
        }
        cr_expect(len[0] == len[1] && memcmp(buf[0], buf[1], len[0]) == 0, "version %d: the bytes differ", ver);
        for (int on = 0; on < 2; on++) {
            skv_decoder *d = NULL;
            cr_assert_eq(skv_decoder_create(m, &d), 0);
            skv_decoder_set_row_cache(d, on);
            cr_assert_eq(skv_decoder_begin(d, buf[0], len[0], NULL), 0);
            for (int t = 0; t < T; t++)
                cr_assert_eq(skv_decoder_get_n(d, mu, sg, y + t * C, C), 0, "%s", skv_error_detail());
            cr_assert_eq(skv_decoder_end(d), 0, "%s", skv_error_detail());
            cr_expect_eq(skv__decoder_rcache(d)->off, !on, "version %d, row cache %d", ver, on);
            cr_expect_eq(memcmp(x, y, sizeof x), 0, "version %d, row cache %d: decoded values differ", ver, on);
            skv_decoder_free(d);
        }
        free(buf[0]);
        free(buf[1]);
    }
    skv_cmodel_free(m);
}

/* ctx-like rows wider than the classification's per-s memory ever was
 * (320 scalars; real models' rows are 1024 and more), classified straight
 * into the pack with the row cache off: decoded as coded, most groups on
 * the AVX2 path, with eight states */
Test(v2, wide_rows_that_do_not_repeat)
{
    enum { C = 320, T = 24 };
    skv_cmodel *m = model_new(SKV_DT_BF16, SKV_MIX_DEFAULT, NULL);
    static float mu[T * C];
    float sg[2][C];
    static uint32_t x[T * C], y[T * C];
    skv_rng r;
    skv_rng_seed(&r, 320);
    for (int c = 0; c < C; c++) {
        mu[c] = (skv_rng_uniform(&r) - 0.5f) * 6.0f;
        /* a head in four of tiny widths (STEP); two seen-classes of s */
        sg[0][c] = (c / 8) % 4 == 0 ? 0.0007f : 0.05f + 2.0f * skv_rng_uniform(&r);
        sg[1][c] = 1.5f * sg[0][c];
    }
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) {
            if (t)
                mu[t * C + c] = mu[(t - 1) * C + c] + 0.2f * sg[0][c] * skv_rng_normal(&r);
            x[t * C + c] = to_dt(SKV_DT_BF16, mu[t * C + c] + sg[t % 3 == 1][c] * skv_rng_normal(&r));
        }
    skv_encoder *e = NULL;
    cr_assert_eq(skv_encoder_create(m, &e), 0);
    cr_assert_eq(skv_encoder_set_version(e, 2), 0);
    cr_assert_eq(skv_encoder_set_states(e, 8), 0);
    skv_encoder_set_row_cache(e, 0);
    skv_encoder_set_ideal(e, 0);
    skv_encoder_reset(e, NULL);
    for (int t = 0; t < T; t++)
        cr_assert_eq(skv_encoder_put_n(e, x + t * C, mu + t * C, sg[t % 3 == 1], C), 0, "%s", skv_error_detail());
    size_t cap = skv_encoder_bound(e), len;
    uint8_t *buf = malloc(cap);
    cr_assert_eq(skv_encoder_finish(e, buf, cap, &len), 0, "%s", skv_error_detail());
    skv_encoder_free(e);
    skv_decoder *d = NULL;
    cr_assert_eq(skv_decoder_create(m, &d), 0);
    skv_decoder_set_row_cache(d, 0);
    cr_assert_eq(skv_decoder_begin(d, buf, len, NULL), 0);
    for (int t = 0; t < T; t++)
        cr_assert_eq(skv_decoder_get_n(d, mu + t * C, sg[t % 3 == 1], y + t * C, C), 0, "row %d: %s", t,
                     skv_error_detail());
    cr_assert_eq(skv_decoder_end(d), 0, "%s", skv_error_detail());
    cr_expect_eq(memcmp(x, y, sizeof x), 0, "decoded values differ");
#ifdef SKV_HAVE_CLS8
    if (cls_simd() >= 2)
        cr_expect_gt(skv__decoder_fast_groups(d), (uint64_t)(C * T / 8) * 3 / 4, "the AVX2 path took %" PRIu64 " of %d groups",
                     skv__decoder_fast_groups(d), C * T / 8);
#endif
    skv_decoder_free(d);
    free(buf);
    skv_cmodel_free(m);
}

/* A ctx-like stream for pair_decode: rows of C bf16 scalars whose mu
 * drifts row to row (no row repeats), some heads' scales far below their
 * lattice step (STEP lanes), and escapes, exact zeros and subnormals at
 * random places, each stream its own */
static void pair_stream(seq_t *q, size_t C, size_t T, uint64_t seed)
{
    skv_rng r;
    skv_rng_seed(&r, seed);
    float mu[512], sg[512];
    cr_assert_leq(C, 512);
    for (size_t c = 0; c < C; c++) {
        mu[c] = (skv_rng_uniform(&r) - 0.5f) * 8.0f;
        sg[c] = c / 8 % 3 == 1 ? 0.0004f + 0.0001f * (float)(c % 8) : 0.03f + skv_rng_uniform(&r);
        if (c / 8 % 3 == 1)
            mu[c] = 2.0f + (float)(c % 8);
    }
    seq_init(q, SKV_DT_BF16, C * T);
    for (size_t t = 0; t < T; t++)
        for (size_t c = 0; c < C; c++) {
            mu[c] += 0.3f * sg[c] * skv_rng_normal(&r);
            uint64_t k;
            seq_push(q, to_dt(SKV_DT_BF16, odd_value(&r, mu[c], sg[c], 300, &k)), mu[c], sg[c]);
        }
}

/* Build every BUCKET table of bf16 model m (v2_pack_rows then packs
 * all-BUCKET groups without looking their tables up): values at scales
 * of every width class, mu at every phase; true when they all are */
static int build_bucket_tables(skv_cmodel *m)
{
    skv_rng r;
    skv_rng_seed(&r, 5150);
    seq_t q;
    seq_init(&q, SKV_DT_BF16, 8 * 4096);
    for (int k = 0; k < 8 * 4096; k++) {
        float s = ldexpf(1.0f + (float)(k % 8) / 8.0f + 1.0f / 16.0f, -4 - (int)(skv_rng_next(&r) % 4));
        float mu = (skv_rng_uniform(&r) - 0.5f) * 4.0f;
        seq_push(&q, to_dt(SKV_DT_BF16, mu + s * skv_rng_normal(&r)), mu, s);
    }
    size_t len;
    free(v2_encode(m, NULL, &q, 64, &len));
    seq_free(&q);
    int all = 1;
    for (int t = N_STEP_TABS; t < N_STEP_TABS + N_BUCKET_TABS; t++)
        all &= m->ready[t] == BUCKET_R;
    return all;
}

/* Decode streams a and b (rows of C) row by row with skv_decoder_get_n2
 * into ga and gb; the first error or 0; *fast: the groups both decoders
 * took on their AVX2 paths */
static int pair_decode(skv_cmodel *m, const uint8_t *ba, size_t la, const uint8_t *bb, size_t lb, const seq_t *qa,
                       const seq_t *qb, size_t C, uint32_t *ga, uint32_t *gb, uint64_t *fast)
{
    skv_decoder *d[2] = {NULL, NULL};
    cr_assert_eq(skv_decoder_create(m, &d[0]), 0);
    cr_assert_eq(skv_decoder_create(m, &d[1]), 0);
    skv_decoder_set_row_cache(d[0], 0);
    skv_decoder_set_row_cache(d[1], 0);
    int rc = skv_decoder_begin(d[0], ba, la, NULL);
    if (!rc)
        rc = skv_decoder_begin(d[1], bb, lb, NULL);
    for (size_t i = 0; !rc && i < qa->n; i += C) {
        const float *const mu[2] = {qa->mu + i, qb->mu + i}, *const s[2] = {qa->s + i, qb->s + i};
        uint32_t *const x[2] = {ga + i, gb + i};
        rc = skv_decoder_get_n2(d, mu, s, x, C);
    }
    if (!rc)
        rc = skv_decoder_end(d[0]);
    if (!rc)
        rc = skv_decoder_end(d[1]);
    *fast = skv__decoder_fast_groups(d[0]) + skv__decoder_fast_groups(d[1]);
    skv_decoder_free(d[0]);
    skv_decoder_free(d[1]);
    return rc;
}

/* Two eight-state streams decoded together (skv_decoder_get_n2, the
 * delta coder's K and V of a layer): the values each was coded with,
 * whichever stream's group leaves the common case; most groups on the
 * AVX2 path; the same values on the reference path and with a stream of
 * sixteen states (each on its own then); a damaged stream fails. Then
 * again with every BUCKET table built (packed without their lookup): the
 * same bytes coded, the same values decoded. */
Test(v2, two_streams_decoded_together)
{
    static const size_t widths[] = {32, 320};
    skv_cmodel *m = model_new(SKV_DT_BF16, SKV_MIX_DEFAULT, NULL);
    uint8_t *first[2] = {NULL, NULL};
    size_t first_len[2] = {0, 0};
    for (size_t wi = 0; wi < 4; wi++) {
        if (wi == 2)
            cr_assert(build_bucket_tables(m), "the BUCKET tables were not all built");
        const size_t C = widths[wi % 2], T = wi % 2 ? 24 : 200;
        seq_t qa, qb;
        pair_stream(&qa, C, T, 91 + wi % 2);
        pair_stream(&qb, C, T, 92 + wi % 2);
        size_t la, lb, lb16;
        v2_states = 8;
        uint8_t *ba = v2_encode(m, NULL, &qa, C, &la), *bb = v2_encode(m, NULL, &qb, C, &lb);
        if (wi < 2) {
            first[wi] = malloc(la);
            memcpy(first[wi], ba, la);
            first_len[wi] = la;
        } else {
            cr_expect(la == first_len[wi - 2] && memcmp(ba, first[wi - 2], la) == 0,
                      "C %zu: with every BUCKET table built the stream differs", C);
        }
        v2_states = 16;
        uint8_t *bb16 = v2_encode(m, NULL, &qb, C, &lb16);
        uint32_t *ga = malloc(qa.n * sizeof *ga), *gb = malloc(qb.n * sizeof *gb);
        cr_assert(ga && gb);
        const int saved = skv__cls_simd;
        /* the AVX2 paths (and their AVX-512 copies where the CPU has
         * them); the reference path; V with sixteen states; AVX2 alone */
        for (int pass = 0; pass < 4; pass++) {
            if (pass == 3 && saved != 3)
                break;
            skv__cls_simd = pass == 1 ? 0 : pass == 3 ? 2 : saved;
            memset(ga, 0xa5, qa.n * sizeof *ga);
            memset(gb, 0xa5, qb.n * sizeof *gb);
            uint64_t fast = 0;
            int rc = pass != 2 ? pair_decode(m, ba, la, bb, lb, &qa, &qb, C, ga, gb, &fast)
                               : pair_decode(m, ba, la, bb16, lb16, &qa, &qb, C, ga, gb, &fast);
            cr_assert_eq(rc, 0, "C %zu pass %d: %s (%s)", C, pass, skv_strerror(rc), skv_error_detail());
            for (size_t i = 0; i < qa.n; i++) {
                cr_assert_eq(ga[i], qa.x[i], "C %zu pass %d: stream a, scalar %zu", C, pass, i);
                cr_assert_eq(gb[i], qb.x[i], "C %zu pass %d: stream b, scalar %zu", C, pass, i);
            }
            if (pass == 1)
                cr_expect_eq(fast, 0, "the reference pass took %" PRIu64 " groups by AVX2", fast);
#ifdef SKV_HAVE_CLS8
            if ((pass == 0 || pass == 3) && cls_simd() >= 2)
                cr_expect_gt(fast, (uint64_t)(2 * C * T / 8) * 3 / 4, "C %zu: the AVX2 paths took %" PRIu64 " of %zu groups",
                             C, fast, 2 * C * T / 8);
#endif
        }
        skv__cls_simd = saved;
        /* damage in either stream: an error, never a crash or a silent
         * misdecode (the checksum of each stream) */
        uint64_t fast;
        for (int which = 0; which < 2; which++)
            for (size_t at = SKV_STREAM_HEADER; at < (which ? lb : la); at += (which ? lb : la) / 7) {
                uint8_t *dmg = malloc(which ? lb : la);
                memcpy(dmg, which ? bb : ba, which ? lb : la);
                dmg[at] ^= 0x10;
                int rc = which ? pair_decode(m, ba, la, dmg, lb, &qa, &qb, C, ga, gb, &fast)
                               : pair_decode(m, dmg, la, bb, lb, &qa, &qb, C, ga, gb, &fast);
                cr_expect_neq(rc, 0, "C %zu: a flipped bit at byte %zu of stream %d decoded", C, at, which);
                free(dmg);
            }
        free(ga);
        free(gb);
        free(ba);
        free(bb);
        free(bb16);
        seq_free(&qa);
        seq_free(&qb);
    }
    free(first[0]);
    free(first[1]);
    skv_cmodel_free(m);
}

/* Rows of C bf16 scalars, mu a walk with steps of 0.3 s (repeat: the
 * first row's mu over and over), s = scale * sg, most groups BUCKET;
 * every 7th row one group's mu jumps far off */
static void walk_rows(seq_t *q, const float *sg, float scale, size_t C, size_t T, int repeat, uint64_t seed)
{
    skv_rng r;
    skv_rng_seed(&r, seed);
    float mu[64];
    cr_assert_leq(C, 64);
    for (size_t c = 0; c < C; c++)
        mu[c] = (skv_rng_uniform(&r) - 0.5f) * 3.0f;
    seq_init(q, SKV_DT_BF16, C * T);
    for (size_t t = 0; t < T; t++)
        for (size_t c = 0; c < C; c++) {
            float s = scale * sg[c], m = mu[c];
            if (!repeat)
                m = mu[c] += 0.3f * s * skv_rng_normal(&r);
            if (!repeat && t % 7 == 3 && c / 8 == t % (C / 8))
                m = 300.0f + (float)c; /* (a STEP group, packed in full) */
            seq_push(q, to_dt(SKV_DT_BF16, m + s * skv_rng_normal(&r)), m, s);
        }
}

/* A decoder that decodes rows that do not repeat packs a group that was
 * all BUCKET last row, under the same s, by its phases alone: the values
 * as coded, most groups so; and not after the same decoder packed rows
 * of other s from its row cache in between (which overwrite the pack):
 * three streams on one decoder, the row cache off, on, off */
Test(v2, a_group_packed_again_by_its_phases)
{
    enum { C = 32, T = 60 };
    skv_cmodel *m = model_new(SKV_DT_BF16, SKV_MIX_DEFAULT, NULL);
    cr_assert(build_bucket_tables(m), "the BUCKET tables were not all built");
    float sg[C];
    skv_rng r;
    skv_rng_seed(&r, 606);
    for (int c = 0; c < C; c++)
        sg[c] = 0.3f + 1.5f * skv_rng_uniform(&r);
    seq_t q[3];
    walk_rows(&q[0], sg, 1.0f, C, T, 0, 1);
    walk_rows(&q[1], sg, 8.0f, C, T, 1, 2);
    walk_rows(&q[2], sg, 1.0f, C, T, 0, 3);
    skv_decoder *d = NULL;
    cr_assert_eq(skv_decoder_create(m, &d), 0);
    v2_states = 8;
    uint32_t got[C * T];
    for (int k = 0; k < 3; k++) {
        size_t len;
        uint8_t *buf = v2_encode(m, NULL, &q[k], C, &len);
        skv_decoder_set_row_cache(d, k == 1);
        const uint64_t nb0 = skv__decoder_phase_groups(d);
        cr_assert_eq(skv_decoder_begin(d, buf, len, NULL), 0);
        memset(got, 0xa5, sizeof got);
        for (size_t i = 0; i < q[k].n; i += C) {
            int rc = skv_decoder_get_n(d, q[k].mu + i, q[k].s + i, got + i, C);
            cr_assert_eq(rc, 0, "stream %d, row %zu: %s (%s)", k, i / C, skv_strerror(rc), skv_error_detail());
        }
        cr_assert_eq(skv_decoder_end(d), 0, "stream %d: %s", k, skv_error_detail());
        for (size_t i = 0; i < q[k].n; i++)
            cr_assert_eq(got[i], q[k].x[i], "stream %d, scalar %zu: coded 0x%x, decoded 0x%x", k, i, q[k].x[i],
                         got[i]);
        const uint64_t nb = skv__decoder_phase_groups(d) - nb0;
#ifdef SKV_HAVE_CLS8
        if (k != 1 && cls_simd() >= 2)
            cr_expect_gt(nb, (uint64_t)(C / 8 * T) / 2, "stream %d: %" PRIu64 " of %d groups packed by their phases",
                         k, nb, C / 8 * T);
#endif
        if (k == 1)
            cr_expect_eq(nb, 0, "the row cache's rows were packed by their phases");
        free(buf);
        seq_free(&q[k]);
    }
    v2_states = 16;
    skv_decoder_free(d);
    skv_cmodel_free(m);
}
