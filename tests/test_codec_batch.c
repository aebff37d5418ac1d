/* Criterion suite for the codec's batch hot path (codec/cfast.h,
 * skv_encoder_put_n/put_rows, skv_decoder_get_n/get_rows) against the
 * reference classification and planner of codec/cmodel.c, and the row
 * cache growing or going without its memory. */
#include <criterion/criterion.h>

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../codec/cfast.h" /* internals: coverage counts, fast path vs reference */
#include "codecutil.h"
#include "skv_codec.h"
#include "testutil.h"

/* ========================================================================
 * The batch hot path (codec/cfast.h, skv_encoder_put_n, skv_decoder_get_n)
 * against the reference classification and planner of codec/cmodel.c
 * ====================================================================== */

Test(batch, fast_classification_equals_the_reference)
{
    skv_rng r;
    skv_rng_seed(&r, 4242);
    for (int d = 0; d < 4; d++) {
        seqkv_dtype dt = DTYPES[d];
        skv_cmodel *m = model_new(dt, SKV_MIX_DEFAULT, NULL);
        const skv_lat *L = dt == SEQKV_DT_BF16 ? &SKV__LAT_BF16 : dt == SEQKV_DT_F16 ? &SKV__LAT_F16
                         : dt == SEQKV_DT_F8E4M3 ? &SKV__LAT_F8 : &SKV__LAT_F32;
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
        cr_assert_eq(rc, 0, "put_n at %zu: %s (%s)", i, seqkv_strerror(rc), seqkv_error_detail());
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
    cr_assert_eq(skv_decoder_begin(d, exact, len, NULL), 0, "%s", seqkv_error_detail());
    uint32_t *got = malloc((q->n + 1) * sizeof *got);
    for (size_t i = 0; i < q->n; i += batch) {
        size_t k = q->n - i < batch ? q->n - i : batch;
        int rc = skv_decoder_get_n(d, q->mu + i, q->s + i, got + i, k);
        cr_assert_eq(rc, 0, "%s: get_n(%zu) at %zu: %s (%s)", skv_dtype_name(q->dt), k, i,
                     seqkv_strerror(rc), seqkv_error_detail());
    }
    uint32_t x;
    float mu = 0.0f, s = 1.0f;
    cr_expect_eq(skv_decoder_get_n(d, &mu, &s, &x, 1), SKV_ERR_ARG, "past the end");
    cr_assert_eq(skv_decoder_end(d), 0, "%s", seqkv_error_detail());
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
    skv_cmodel *m = model_new(SEQKV_DT_BF16, SKV_MIX_DEFAULT, NULL);
    enum { N = 200000 };
    float *mu = malloc(N * sizeof *mu), *s = malloc(N * sizeof *s);
    skv_fcls *got = malloc(N * sizeof *got);
    for (size_t i = 0; i < N; i++) {
        random_mu_s(&r, SEQKV_DT_BF16, &mu[i], &s[i]);
        if (i % 97 == 0) /* exactly on a bf16 point, s a few steps */
            mu[i] = from_dt(SEQKV_DT_BF16, (uint32_t)skv_rng_next(&r) & 0xffffu),
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
    seq_init(&q, SEQKV_DT_BF16, N);
    for (size_t i = 0; i < N; i++) {
        uint32_t x = isfinite(mu[i]) && isfinite(s[i]) && i % 7
                         ? to_dt(SEQKV_DT_BF16, mu[i] + s[i] * skv_rng_normal(&r))
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
        seqkv_dtype dt = DTYPES[d];
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
        seqkv_dtype dt = DTYPES[d];
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
    skv_cmodel *m = model_new(SEQKV_DT_BF16, SKV_MIX_DEFAULT, NULL);
    seq_t q;
    gaussian_seq(&q, SEQKV_DT_BF16, 3000, 31);
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
        cr_expect_eq(rc, SKV_ERR_CORRUPT, "cut at %zu of %zu: %s", cut, len, seqkv_strerror(rc));
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
    const seqkv_dtype dts[] = {SEQKV_DT_BF16, SEQKV_DT_F16, SEQKV_DT_F8E4M3};
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

/* The first row at or after r0 of the rows x[r * n ..] (of nrow) holding a
 * magnitude above big; nrow when none. */
static size_t first_big_row(const uint32_t *x, size_t n, size_t r0, size_t nrow, seqkv_dtype dt,
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
        const seqkv_dtype dt = DTYPES[di];
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
                cr_assert_eq(skv_encoder_put_rows(e, x, mu, s, n, 5), 0, "%s", seqkv_error_detail());
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
                    cr_assert_eq(rc, 0, "%s: %s", what, seqkv_error_detail());
                    cr_assert_eq(at + done, want, "%s n %zu atoms %d version %d: stopped at row %zu, not %zu",
                                 what, n, with_atoms, ver, at + done, want);
                    at += done;
                    stops++;
                }
                cr_assert_geq(stops, 2, "row 9 stops it");
                cr_assert_eq(memcmp(y, x, n * NROW * sizeof *x), 0, "%s: rows decoded", what);
#ifdef SKV_HAVE_CLS8
                /* (rows of 32 are not whole rounds of the atoms' 5 channels) */
                if (ver == 2 && dt == SEQKV_DT_BF16 && n <= RCACHE_MAX && (!a || n % 5 == 0) &&
                    cls_simd() >= 2)
                    cr_expect_gt(skv__decoder_fast_groups(d), (uint64_t)(n * NROW / 8) / 4,
                                 "n %zu atoms %d: the AVX2 path took %" PRIu64 " of %zu groups", n, with_atoms,
                                 skv__decoder_fast_groups(d), n * NROW / 8);
#endif
                cr_assert_eq(skv_decoder_end(d), 0, "%s", seqkv_error_detail());
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
    skv_cmodel *m = model_new(SEQKV_DT_BF16, SKV_MIX_DEFAULT, NULL);
    for (int wi = 0; wi < 2; wi++) {
        const size_t n = widths[wi];
        cr_assert_gt(n, RCACHE_MIN);
        float *mu = malloc(n * sizeof *mu), *s = malloc(n * sizeof *s);
        uint32_t *x = malloc(n * NROW * sizeof *x), *y = malloc(n * NROW * sizeof *y);
        cr_assert(mu && s && x && y);
        for (size_t c = 0; c < n; c++)
            random_mu_s(&r, SEQKV_DT_BF16, &mu[c], &s[c]);
        for (size_t t = 0; t < NROW; t++)
            for (size_t c = 0; c < n; c++) {
                float v = isfinite(mu[c]) && isfinite(s[c]) ? mu[c] + s[c] * (float)skv_rng_normal(&r)
                                                            : 0.5f;
                x[t * n + c] = to_dt(SEQKV_DT_BF16, v);
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
        cr_assert_eq(rc, 0, "n %zu: %s", n, seqkv_error_detail());
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
        cr_assert_eq(rc, 0, "n %zu: %s", n, seqkv_error_detail());
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
