/* Criterion suite for the codec's round trips: bit-exact for every dtype
 * (model-like data, every bit pattern, edge values under hostile (mu, s),
 * mu far beyond the dtype's range, empty and one-scalar streams, other
 * mixtures and histograms), and the encoder's rANS step exact over its
 * whole contract. */
#include <criterion/criterion.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../codec/cfast.h" /* internals: coverage counts, fast path vs reference */
#include "codecutil.h"
#include "skv_codec.h"
#include "testutil.h"

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

/* ========================================================================
 * Round trips
 * ====================================================================== */

Test(round_trip, gaussian_data_with_any_mu_and_s_is_bit_exact_for_every_dtype)
{
    for (int d = 0; d < 4; d++) {
        seqkv_dtype dt = DTYPES[d];
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
        seqkv_dtype dt = DTYPES[d];
        skv_cmodel *m = model_new(dt, SKV_MIX_DEFAULT, NULL);
        seq_t q;
        /* 8- and 16-bit dtypes: every pattern, each under a random (mu, s),
         * and under (mu, s) near the pattern itself; f32: random patterns */
        size_t n = dt == SEQKV_DT_F32 ? 60000 : dt == SEQKV_DT_F8E4M3 ? 256 * 40 : 2 * 65536;
        seq_init(&q, dt, n);
        for (size_t i = 0; i < n; i++) {
            uint32_t x = dt == SEQKV_DT_F32 ? (uint32_t)skv_rng_next(&r) : (uint32_t)i & width_mask(dt);
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

Test(round_trip, edge_values_survive_every_hostile_mu_and_s)
{
    for (int d = 0; d < 4; d++) {
        seqkv_dtype dt = DTYPES[d];
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
                                 (double)mus[i], (double)ss[j], seqkv_strerror(rc),
                                 seqkv_error_detail());
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
    const seqkv_dtype dts[] = {SEQKV_DT_F16, SEQKV_DT_F8E4M3, SEQKV_DT_BF16};
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
        if (dts[d] != SEQKV_DT_BF16) /* nothing representable is near mu */
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
        cr_assert_eq(skv_decoder_begin(dec, buf, len, &info), 0, "%s", seqkv_error_detail());
        cr_expect_eq(info.n, 0);
        cr_expect_eq(info.payload, 16);
        uint32_t x;
        cr_expect_eq(skv_decoder_get(dec, 0.0f, 1.0f, &x), SKV_ERR_ARG);
        cr_expect_eq(skv_decoder_end(dec), 0, "%s", seqkv_error_detail());
        skv_decoder_free(dec);
        free(buf);
        seq_free(&q);
        skv_cmodel_free(m);
    }
}

Test(round_trip, single_scalar_streams_round_trip)
{
    for (int d = 0; d < 4; d++) {
        seqkv_dtype dt = DTYPES[d];
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
