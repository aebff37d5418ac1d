/* Criterion suite for the codec model: code length against
 * skv_cmodel_cost (and streams coded without their ideal cost), determinism
 * (encoders, a reset encoder, threads sharing one model) and model
 * identity and creation. */
#include <criterion/criterion.h>

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "codecutil.h"
#include "skv_codec.h"
#include "testutil.h"

/* ========================================================================
 * Code length
 * ====================================================================== */

Test(code_length, stream_size_matches_the_sum_of_actual_costs)
{
    skv_cmodel *m = model_new(SEQKV_DT_BF16, SKV_MIX_DEFAULT, NULL);
    skv_rng r;
    skv_rng_seed(&r, 42);
    seq_t q;
    seq_init(&q, SEQKV_DT_BF16, 100000);
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
        seqkv_dtype dt = DTYPES[d];
        skv_cmodel *m = model_new(dt, SKV_MIX_DEFAULT, NULL);
        for (size_t i = 0; i < sizeof mus / sizeof *mus; i++) {
            uint32_t x = to_dt(dt, mus[i]);
            float mu = from_dt(dt, x); /* exactly on the lattice */
            if (!isfinite(mu) || (dt == SEQKV_DT_F8E4M3 && fabsf(mu) != fabsf(mus[i])))
                continue; /* fp8 saturates: not an exact value any more */
            /* tiny against the lattice: 2^-12 of a step at mu */
            const float ss[] = {ldexpf(fabsf(mu), -(nbits(dt) == 32 ? 23 : nbits(dt) == 8 ? 3 : dt == SEQKV_DT_F16 ? 10 : 7) - 12),
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
    skv_cmodel *m = model_new(SEQKV_DT_BF16, SKV_MIX_DEFAULT, NULL);
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
        cr_assert_eq(rc, 0, "put_n at %zu: %s (%s)", i, seqkv_strerror(rc), seqkv_error_detail());
    }
}

Test(code_length, streams_without_the_ideal_cost_are_the_same_bytes)
{
    const seqkv_dtype dts[] = {SEQKV_DT_BF16, SEQKV_DT_F16, SEQKV_DT_F8E4M3, SEQKV_DT_F32};
    for (size_t di = 0; di < 4; di++) {
        const seqkv_dtype dt = dts[di];
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
    skv_cmodel *ref = model_new(SEQKV_DT_F16, SKV_MIX_DEFAULT, NULL);
    skv_cmodel *shared = model_new(SEQKV_DT_F16, SKV_MIX_DEFAULT, NULL);
    seq_t q;
    gaussian_seq(&q, SEQKV_DT_F16, 4000, 31337);
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
    skv_cmodel *a = model_new(SEQKV_DT_BF16, SKV_MIX_DEFAULT, NULL);
    skv_cmodel *b = model_new(SEQKV_DT_BF16, SKV_MIX_DEFAULT, NULL);
    skv_cmodel *c = model_new(SEQKV_DT_BF16, SKV_MIX_DEFAULT, h1);
    skv_cmodel *c2 = model_new(SEQKV_DT_BF16, SKV_MIX_DEFAULT, h1);
    skv_cmodel *dd = model_new(SEQKV_DT_BF16, SKV_MIX_DEFAULT, h2);
    skv_cmodel *w1 = model_new(SEQKV_DT_BF16, (skv_mix){1967u, 1311u}, NULL);
    skv_cmodel *w2 = model_new(SEQKV_DT_BF16, (skv_mix){1966u, 1312u}, NULL);
    skv_cmodel *f16 = model_new(SEQKV_DT_F16, SKV_MIX_DEFAULT, NULL);
    cr_expect_eq(skv_cmodel_id(a), skv_cmodel_id(b));
    cr_expect_eq(skv_cmodel_id(c), skv_cmodel_id(c2));
    /* a flat histogram is the uniform p_emp */
    uint32_t flat[256];
    for (int i = 0; i < 256; i++)
        flat[i] = 0;
    skv_cmodel *fl = model_new(SEQKV_DT_BF16, SKV_MIX_DEFAULT, flat);
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
    cr_expect_eq(skv_cmodel_create(SEQKV_DT_BF16, (skv_mix){1966u, 0u}, NULL, &m), SKV_ERR_ARG);
    cr_expect_null(m);
    m = (skv_cmodel *)&m;
    cr_expect_eq(skv_cmodel_create(SEQKV_DT_BF16, (skv_mix){65536u - 64u - 1u, 1u}, NULL, &m),
                 SKV_ERR_ARG);
    cr_expect_null(m);
    cr_expect_eq(skv_cmodel_create(SEQKV_DT_BF16, (skv_mix){40000u, 40000u}, NULL, &m), SKV_ERR_ARG);
    cr_expect_eq(skv_cmodel_create(SEQKV_DT_BF16, (skv_mix){0u, 70000u}, NULL, &m), SKV_ERR_ARG);
    cr_expect_eq(skv_cmodel_create(SEQKV_DT_BF16, (skv_mix){0xffffffffu, 2u}, NULL, &m), SKV_ERR_ARG,
                 "w1 + w2 must not wrap around");
    skv_cmodel_free(m); /* in case it was wrongly accepted */
    cr_expect_eq(skv_cmodel_create(SEQKV_DT_I32, SKV_MIX_DEFAULT, NULL, &m), SKV_ERR_ARG);
    cr_expect_null(m);
    cr_expect_eq(skv_cmodel_create((seqkv_dtype)77, SKV_MIX_DEFAULT, NULL, &m), SKV_ERR_ARG);
    /* the largest legal weights are accepted */
    cr_expect_eq(skv_cmodel_create(SEQKV_DT_BF16, (skv_mix){65536u - 64u - 2u, 1u}, NULL, &m), 0);
    skv_cmodel_free(m);
}
