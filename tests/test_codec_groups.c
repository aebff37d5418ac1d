/* Criterion suite for the grouped layout (stream version 2, its lanes):
 * the reference path's round trips and damage, eight states, the AVX2
 * paths against the reference paths, the row cache switched off, two
 * streams decoded together and groups packed by their phases. */
#include <criterion/criterion.h>

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../codec/cfast.h" /* internals: coverage counts, fast path vs reference */
#include "codec_tune.h"
#include "codecutil.h"
#include "skv_codec.h"
#include "testutil.h"

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
        cr_assert_eq(rc, 0, "%s", seqkv_error_detail());
    }
    size_t cap = skv_encoder_bound(e);
    uint8_t *out = malloc(cap);
    cr_assert_not_null(out);
    int rc = skv_encoder_finish(e, out, cap, len);
    cr_assert_eq(rc, 0, "finish: %s (%s)", seqkv_strerror(rc), seqkv_error_detail());
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
                         seqkv_strerror(rc), seqkv_error_detail());
            for (size_t i = 0; i < q->n; i++)
                cr_assert_eq(got[i], q->x[i], "%s %s: scalar %zu: coded 0x%x, decoded 0x%x",
                             skv_dtype_name(q->dt), what, i, q->x[i], got[i]);
        }
        free(buf);
    }
    free(got);
}

Test(groups, round_trip_for_every_dtype_and_way_of_coding)
{
    for (int di = 0; di < 4; di++) {
        seqkv_dtype dt = DTYPES[di];
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

Test(groups, round_trip_with_atoms)
{
    for (int di = 0; di < 4; di++) {
        seqkv_dtype dt = DTYPES[di];
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

Test(groups, the_decoder_takes_whole_groups_and_version_1_stays_the_default)
{
    skv_cmodel *m = model_new(SEQKV_DT_BF16, SKV_MIX_DEFAULT, NULL);
    seq_t q;
    gaussian_seq(&q, SEQKV_DT_BF16, 21, 5);
    size_t len;
    uint8_t *buf = v2_encode(m, NULL, &q, 21, &len);
    skv_decoder *d = NULL;
    cr_assert_eq(skv_decoder_create(m, &d), 0);
    skv_stream_info info;
    cr_assert_eq(skv_decoder_begin(d, buf, len, &info), 0);
    uint32_t x[24];
    cr_expect_eq(skv_decoder_get(d, q.mu[0], q.s[0], x), SKV_ERR_ARG);
    cr_expect_eq(skv_decoder_get_n(d, q.mu, q.s, x, 12), SKV_ERR_ARG);
    cr_assert_eq(skv_decoder_get_n(d, q.mu, q.s, x, 16), 0, "%s", seqkv_error_detail());
    cr_expect_eq(skv_decoder_get_n(d, q.mu + 16, q.s + 16, x + 16, 4), SKV_ERR_ARG);
    cr_assert_eq(skv_decoder_get_n(d, q.mu + 16, q.s + 16, x + 16, 5), 0, "%s", seqkv_error_detail());
    cr_expect_eq(skv_decoder_get_n(d, q.mu, q.s, x, 0), 0, "after a ragged last group, nothing asked");
    cr_assert_eq(skv_decoder_end(d), 0, "%s", seqkv_error_detail());
    for (int i = 0; i < 21; i++)
        cr_expect_eq(x[i], q.x[i]);
    free(buf);
    /* an empty stream */
    seq_t none = {SEQKV_DT_BF16, 0, 0, NULL, NULL, NULL};
    buf = v2_encode(m, NULL, &none, 8, &len);
    cr_expect_eq(v2_decode(m, NULL, buf, len, &none, 8, x), 0, "%s", seqkv_error_detail());
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
Test(groups, truncated_and_flipped_streams_fail)
{
    skv_cmodel *m = model_new(SEQKV_DT_BF16, SKV_MIX_DEFAULT, NULL);
    seq_t q;
    gaussian_seq(&q, SEQKV_DT_BF16, 203, 17);
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
    skv_cmodel *m = model_new(SEQKV_DT_BF16, a ? (skv_mix){600u, 100u} : SKV_MIX_DEFAULT, NULL);
    skv_rng r = *rp;
    seq_t q;
    seq_init(&q, SEQKV_DT_BF16, C * T);
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) {
            const float *mu = mu0 + (size_t)t * mstride;
            uint64_t k;
            uint32_t x = to_dt(SEQKV_DT_BF16, odd_value(&r, mu[c], sg[c], 500, &k));
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
            cr_assert_eq(skv_encoder_put_n(e, q.x + i, q.mu + i, q.s + i, nb), 0, "%s", seqkv_error_detail());
        }
        size_t cap = skv_encoder_bound(e), l2;
        uint8_t *b2 = malloc(cap);
        cr_assert_eq(skv_encoder_finish(e, b2, cap, &l2), 0, "%s", seqkv_error_detail());
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
            cr_assert_eq(rc, 0, "pass %d row %d: %s (%s)", pass, t, seqkv_strerror(rc), seqkv_error_detail());
            for (int c = 0; c < C; c++)
                cr_assert_eq(x[c], q.x[t * C + c], "pass %d row %d channel %d", pass, t, c);
        }
        cr_assert_eq(skv_decoder_end(d), 0, "pass %d: %s", pass, seqkv_error_detail());
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
        x[c] = to_dt(SEQKV_DT_BF16, h->mu[c]);
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
Test(groups, the_avx2_path_takes_tables_built_on_two_threads)
{
    enum { C = 32, T = 64 };
    skv_cmodel *m = model_new(SEQKV_DT_BF16, SKV_MIX_DEFAULT, NULL);
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
    seq_init(&q, SEQKV_DT_BF16, C * T);
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++)
            seq_push(&q, to_dt(SEQKV_DT_BF16, mu[c] + sg[c] * skv_rng_normal(&r)), mu[c], sg[c]);
    size_t len;
    uint8_t *buf = v2_encode(m, NULL, &q, C, &len);
    skv_decoder *d = NULL;
    cr_assert_eq(skv_decoder_create(m, &d), 0);
    cr_assert_eq(skv_decoder_begin(d, buf, len, NULL), 0);
    uint32_t x[C];
    for (int t = 0; t < T; t++) {
        cr_assert_eq(skv_decoder_get_n(d, mu, sg, x, C), 0, "%s", seqkv_error_detail());
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

Test(groups, the_avx2_paths_code_what_the_reference_paths_code)
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
        uint32_t t[4] = {to_dt(SEQKV_DT_BF16, 0.0f), to_dt(SEQKV_DT_BF16, mu[c]), to_dt(SEQKV_DT_BF16, mu[c] + sg[c]),
                         to_dt(SEQKV_DT_BF16, -sg[c])};
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
    cr_assert_eq(skv_atoms_create(SEQKV_DT_BF16, C, k, lam, vals, cnts, &a), 0, "%s", seqkv_error_detail());
    v2_avx2_check(a, mu, 0, sg, &r);
    skv_atoms_free(a);
}

/* ctx-like rows: every row its own predictions (the row before, moved a
 * little), widths from far below a lattice step (STEP classes) to many
 * steps (BUCKET): classified straight into the AVX2 paths' packs (the row
 * cache switches itself off), with sixteen states and with eight */
Test(groups, rows_that_do_not_repeat_take_the_avx2_paths)
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
Test(groups, eight_states)
{
    v2_states = 8;
    for (int di = 0; di < 4; di++) {
        seqkv_dtype dt = DTYPES[di];
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
    skv_cmodel *m = model_new(SEQKV_DT_BF16, SKV_MIX_DEFAULT, NULL);
    seq_t q;
    gaussian_seq(&q, SEQKV_DT_BF16, 203, 17);
    size_t len;
    uint8_t *buf = v2_encode(m, NULL, &q, 64, &len);
    uint32_t *got = malloc(q.n * sizeof *got);
    cr_assert_eq(v2_decode(m, NULL, buf, len, &q, 8, got), 0, "%s", seqkv_error_detail());
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
Test(groups, the_row_cache_switched_off_changes_nothing_but_speed)
{
    enum { C = 32, T = 40 };
    skv_cmodel *m = model_new(SEQKV_DT_BF16, SKV_MIX_DEFAULT, NULL);
    float mu[C], sg[C];
    skv_rng r;
    skv_rng_seed(&r, 77);
    for (int c = 0; c < C; c++)
        mu[c] = (skv_rng_uniform(&r) - 0.5f) * 4.0f, sg[c] = 0.01f + skv_rng_uniform(&r);
    uint32_t x[C * T], y[C * T];
    for (int i = 0; i < C * T; i++)
        x[i] = to_dt(SEQKV_DT_BF16, mu[i % C] + sg[i % C] * skv_rng_normal(&r));
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
                    cr_assert_eq(skv_encoder_put_n(e, x + t * C, mu, sg, C), 0, "%s", seqkv_error_detail());
                if (!on) /* (on, it may still switch itself off: version 2 with the ideal cost puts groups) */
                    cr_expect_eq(skv__encoder_rcache(e)->off, 1, "version %d, round %d", ver, round);
            }
            size_t cap = skv_encoder_bound(e);
            buf[on] = malloc(cap);
            cr_assert_eq(skv_encoder_finish(e, buf[on], cap, &len[on]), 0, "%s", seqkv_error_detail());
            skv_encoder_free(e);
        }
        cr_expect(len[0] == len[1] && memcmp(buf[0], buf[1], len[0]) == 0, "version %d: the bytes differ", ver);
        for (int on = 0; on < 2; on++) {
            skv_decoder *d = NULL;
            cr_assert_eq(skv_decoder_create(m, &d), 0);
            skv_decoder_set_row_cache(d, on);
            cr_assert_eq(skv_decoder_begin(d, buf[0], len[0], NULL), 0);
            for (int t = 0; t < T; t++)
                cr_assert_eq(skv_decoder_get_n(d, mu, sg, y + t * C, C), 0, "%s", seqkv_error_detail());
            cr_assert_eq(skv_decoder_end(d), 0, "%s", seqkv_error_detail());
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
Test(groups, wide_rows_that_do_not_repeat)
{
    enum { C = 320, T = 24 };
    skv_cmodel *m = model_new(SEQKV_DT_BF16, SKV_MIX_DEFAULT, NULL);
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
            x[t * C + c] = to_dt(SEQKV_DT_BF16, mu[t * C + c] + sg[t % 3 == 1][c] * skv_rng_normal(&r));
        }
    skv_encoder *e = NULL;
    cr_assert_eq(skv_encoder_create(m, &e), 0);
    cr_assert_eq(skv_encoder_set_version(e, 2), 0);
    cr_assert_eq(skv_encoder_set_states(e, 8), 0);
    skv_encoder_set_row_cache(e, 0);
    skv_encoder_set_ideal(e, 0);
    skv_encoder_reset(e, NULL);
    for (int t = 0; t < T; t++)
        cr_assert_eq(skv_encoder_put_n(e, x + t * C, mu + t * C, sg[t % 3 == 1], C), 0, "%s", seqkv_error_detail());
    size_t cap = skv_encoder_bound(e), len;
    uint8_t *buf = malloc(cap);
    cr_assert_eq(skv_encoder_finish(e, buf, cap, &len), 0, "%s", seqkv_error_detail());
    skv_encoder_free(e);
    skv_decoder *d = NULL;
    cr_assert_eq(skv_decoder_create(m, &d), 0);
    skv_decoder_set_row_cache(d, 0);
    cr_assert_eq(skv_decoder_begin(d, buf, len, NULL), 0);
    for (int t = 0; t < T; t++)
        cr_assert_eq(skv_decoder_get_n(d, mu + t * C, sg[t % 3 == 1], y + t * C, C), 0, "row %d: %s", t,
                     seqkv_error_detail());
    cr_assert_eq(skv_decoder_end(d), 0, "%s", seqkv_error_detail());
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
    seq_init(q, SEQKV_DT_BF16, C * T);
    for (size_t t = 0; t < T; t++)
        for (size_t c = 0; c < C; c++) {
            mu[c] += 0.3f * sg[c] * skv_rng_normal(&r);
            uint64_t k;
            seq_push(q, to_dt(SEQKV_DT_BF16, odd_value(&r, mu[c], sg[c], 300, &k)), mu[c], sg[c]);
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
    seq_init(&q, SEQKV_DT_BF16, 8 * 4096);
    for (int k = 0; k < 8 * 4096; k++) {
        float s = ldexpf(1.0f + (float)(k % 8) / 8.0f + 1.0f / 16.0f, -4 - (int)(skv_rng_next(&r) % 4));
        float mu = (skv_rng_uniform(&r) - 0.5f) * 4.0f;
        seq_push(&q, to_dt(SEQKV_DT_BF16, mu + s * skv_rng_normal(&r)), mu, s);
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
Test(groups, two_streams_decoded_together)
{
    static const size_t widths[] = {32, 320};
    skv_cmodel *m = model_new(SEQKV_DT_BF16, SKV_MIX_DEFAULT, NULL);
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
            cr_assert_eq(rc, 0, "C %zu pass %d: %s (%s)", C, pass, seqkv_strerror(rc), seqkv_error_detail());
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
    seq_init(q, SEQKV_DT_BF16, C * T);
    for (size_t t = 0; t < T; t++)
        for (size_t c = 0; c < C; c++) {
            float s = scale * sg[c], m = mu[c];
            if (!repeat)
                m = mu[c] += 0.3f * s * skv_rng_normal(&r);
            if (!repeat && t % 7 == 3 && c / 8 == t % (C / 8))
                m = 300.0f + (float)c; /* (a STEP group, packed in full) */
            seq_push(q, to_dt(SEQKV_DT_BF16, m + s * skv_rng_normal(&r)), m, s);
        }
}

/* A decoder that decodes rows that do not repeat packs a group that was
 * all BUCKET last row, under the same s, by its phases alone: the values
 * as coded, most groups so; and not after the same decoder packed rows
 * of other s from its row cache in between (which overwrite the pack):
 * three streams on one decoder, the row cache off, on, off */
Test(groups, a_group_packed_again_by_its_phases)
{
    enum { C = 32, T = 60 };
    skv_cmodel *m = model_new(SEQKV_DT_BF16, SKV_MIX_DEFAULT, NULL);
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
            cr_assert_eq(rc, 0, "stream %d, row %zu: %s (%s)", k, i / C, seqkv_strerror(rc), seqkv_error_detail());
        }
        cr_assert_eq(skv_decoder_end(d), 0, "stream %d: %s", k, seqkv_error_detail());
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
