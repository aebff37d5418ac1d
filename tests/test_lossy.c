/*
 * test_lossy.c - the lossy tier's codec: symbol streams, the symmetric
 * square roots and their inverses, lossy streams (exact window bit-exact,
 * the decoder rebuilding exactly what the encoder promised, the same bytes
 * on every run and thread count), calibrations saved and loaded, and
 * damaged input refused. On a seeded random model always; on stories260K's
 * own KV when ../shared/models has it.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "randmodel.h"
#include "skv_lossy.h"
#include "testutil.h"

/* ---- symbol streams ----------------------------------------------------- */

Test(sym, round_trips_under_mixed_tables_and_refuses_damage)
{
    uint64_t c1[5] = {1000, 10, 10, 1, 0}, c2[300];
    for (int i = 0; i < 300; i++)
        c2[i] = (uint64_t)(i % 7) * 3;
    skv_symtab *t1, *t2, *t3;
    cr_assert_eq(skv_symtab_build(c1, 5, &t1), 0);
    cr_assert_eq(skv_symtab_build(c2, 300, &t2), 0);
    cr_assert_eq(skv_symtab_build(NULL, 4095, &t3), 0);
    cr_assert_eq(skv_symtab_build(NULL, 0, &t3 + 0) , SKV_ERR_ARG);
    uint64_t sum = 0;
    for (uint32_t s = 0; s < 300; s++) {
        cr_assert_geq(skv_symtab_freqs(t2)[s], 1, "every symbol stays codable");
        sum += skv_symtab_freqs(t2)[s];
    }
    cr_assert_eq(sum, 1u << SKV_SYM_PREC);
    enum { N = 20000 };
    uint32_t *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    const skv_symtab **tabs = malloc(N * sizeof *tabs);
    skv_rng r;
    skv_rng_seed(&r, 7);
    for (int i = 0; i < N; i++) {
        const int w = (int)(skv_rng_next(&r) % 3);
        tabs[i] = w == 0 ? t1 : w == 1 ? t2 : t3;
        x[i] = (uint32_t)(skv_rng_next(&r) % skv_symtab_size(tabs[i]));
        if (w == 0 && skv_rng_next(&r) % 4)
            x[i] = 0; /* mostly the probable one */
    }
    const size_t cap = skv_sym_bound(N);
    uint8_t *buf = malloc(cap);
    size_t len;
    cr_assert_eq(skv_sym_encode(x, tabs, N, buf, cap, &len), 0);
    cr_assert_eq(skv_sym_decode(buf, len, tabs, N, y), 0);
    cr_assert_arr_eq(x, y, N * sizeof *x);
    /* short, long, or a flipped byte: an error, never a silent success */
    cr_assert_eq(skv_sym_decode(buf, len - 1, tabs, N, y), SKV_ERR_CORRUPT);
    cr_assert_eq(skv_sym_decode(buf, len, tabs, N - 1, y), SKV_ERR_CORRUPT);
    buf[len / 2] ^= 0x40;
    const int rc = skv_sym_decode(buf, len, tabs, N, y);
    cr_assert(rc == SKV_ERR_CORRUPT || memcmp(x, y, N * sizeof *x) != 0);
    /* a symbol outside its table */
    x[3] = skv_symtab_size(tabs[3]);
    cr_assert_eq(skv_sym_encode(x, tabs, N, buf, cap, &len), SKV_ERR_ARG);
    free(x), free(y), free(tabs), free(buf);
    skv_symtab_free(t1), skv_symtab_free(t2), skv_symtab_free(t3);
}

/* ---- eigen-decomposition -------------------------------------------------- */

Test(eig, decomposes_symmetric_matrices)
{
    enum { n = 8 };
    double a[n * n], w[n], v[n * n];
    skv_rng r;
    skv_rng_seed(&r, 3);
    for (int i = 0; i < n; i++)
        for (int j = 0; j <= i; j++)
            a[i * n + j] = a[j * n + i] = skv_rng_normal(&r);
    cr_assert_eq(skv_eig_sym(a, n, w, v), 0);
    for (int k = 0; k < n; k++) {
        if (k)
            cr_assert_leq(w[k - 1], w[k], "ascending");
        for (int i = 0; i < n; i++) {
            double av = 0.0;
            for (int j = 0; j < n; j++)
                av += a[i * n + j] * v[j * n + k];
            cr_assert_lt(fabs(av - w[k] * v[i * n + k]), 1e-9, "A v = w v");
        }
    }
}

/* ---- calibration and streams ---------------------------------------------- */

static skv_model *model_of(const rm_shape *s, uint64_t seed)
{
    size_t len;
    uint8_t *img = rm_llama2c(s, seed, &len);
    skv_model *m;
    cr_assert_eq(skv_model_load_llama2c_mem(img, len, &m), 0);
    free(img);
    return m;
}

static skv_model *random_model(void)
{
    rm_shape s = {0, 32, 64, 2, 4, 2, 8, 40, 64, 1, 10000.0f, 1e-5f};
    return model_of(&s, 42);
}

typedef struct {
    size_t n;
    int32_t *tok[8];
    size_t len[8];
} seqs;

static void make_seqs(const skv_model *m, seqs *s, size_t n, size_t len, uint64_t seed)
{
    const int V = skv_model_cfg(m)->vocab_size;
    skv_rng r;
    skv_rng_seed(&r, seed);
    s->n = n;
    for (size_t i = 0; i < n; i++) {
        s->tok[i] = malloc(len * sizeof(int32_t));
        s->len[i] = len;
        for (size_t t = 0; t < len; t++)
            s->tok[i][t] = (int32_t)(skv_rng_next(&r) % (uint64_t)V);
    }
}

static void free_seqs(seqs *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->tok[i]);
}

/* K and V of tok in dt, KV layout. */
static void kv_of(const skv_model *m, const int32_t *tok, size_t n, seqkv_dtype dt, uint8_t **k,
                  uint8_t **v)
{
    skv_kvcache *c;
    cr_assert_eq(skv_kvcache_create(skv_model_cfg(m), n, &c), 0);
    cr_assert_eq(skv_model_forward(m, c, tok, n, NULL), 0);
    const size_t bytes = skv_model_kv_per_token(m) / 2 * n * skv_dtype_size(dt);
    *k = malloc(bytes);
    *v = malloc(bytes);
    cr_assert_eq(skv_kvcache_export(c, 0, n, dt, *k, *v), 0);
    skv_kvcache_free(c);
}

static skv_lossy_cal *calibrate(const skv_model *m, const seqs *s, skv_pool *pool, int rvq)
{
    skv_lossy_opts o = {SEQKV_DT_BF16, 2, rvq, 0, 0, pool, 1, 0};
    skv_lossy_cal *c;
    cr_assert_eq(skv_lossy_calibrate(m, (const int32_t *const *)s->tok, s->len, s->n, &o, &c), 0);
    return c;
}

static void check_inverse(const skv_lossy_cal *c)
{
    int L, H, D;
    skv_lossy_cal_shape(c, &L, &H, &D);
    for (int l = 0; l < L; l++)
        for (int kv = 0; kv < 2; kv++)
            for (int h = 0; h < H; h++) {
                const float *T = skv_lossy_transform(c, l, kv, h, 0), *Ti = skv_lossy_transform(c, l, kv, h, 1);
                double tmax = 0.0;
                for (int i = 0; i < D * D; i++)
                    tmax = fmax(tmax, fabs(T[i]));
                cr_assert_gt(tmax, 0.0);
                for (int i = 0; i < D; i++)
                    for (int j = 0; j < D; j++) {
                        double p = 0.0;
                        for (int q = 0; q < D; q++)
                            p += (double)T[i * D + q] * Ti[q * D + j];
                        /* float32 storage of a regularised G^{1/2}: within 1e-4 of I */
                        cr_assert_lt(fabs(p - (i == j)), 1e-4, "T Ti at (%d,%d,%d)[%d][%d] = %g", l, kv, h, i, j, p);
                        cr_assert_lt(fabs(T[i * D + j] - T[j * D + i]), 1e-5 * tmax, "T is symmetric");
                    }
            }
}

/* Code tok at every level with the window [0, lo) and [hi, n) exact; the
 * decoder must rebuild what the encoder promised; the window is bit-exact;
 * the rest is close. Returns the streams' bytes at q4. */
static size_t levels_round_trip(const skv_lossy_cal *c, const skv_model *m, const int32_t *tok, size_t n,
                                size_t lo, size_t hi, uint8_t **q4_stream)
{
    uint8_t *k, *v;
    kv_of(m, tok, n, SEQKV_DT_BF16, &k, &v);
    const size_t half = skv_model_kv_per_token(m) / 2 * n * 2, row = half / n / (size_t)skv_model_cfg(m)->n_layers;
    const size_t cap = skv_lossy_bound(c, n);
    uint8_t *st = malloc(cap), *ek = malloc(half), *ev = malloc(half), *dk = malloc(half), *dv = malloc(half);
    size_t q4len = 0;
    double err_prev = 0.0;
    for (int b = 4; b >= 2; b--)
        for (int kind = 0; kind < 2; kind++) {
            if (!skv_lossy_cal_has(c, b, (skv_lossy_kind)kind))
                continue;
            size_t len;
            cr_assert_eq(skv_lossy_encode(c, b, (skv_lossy_kind)kind, k, v, n, lo, hi, st, cap, &len, ek, ev), 0);
            memset(dk, 0xee, half);
            memset(dv, 0xee, half);
            cr_assert_eq(skv_lossy_decode(c, st, len, n, dk, dv), 0);
            cr_assert_arr_eq(dk, ek, half, "q%d: the decoder rebuilds the encoder's K", b);
            cr_assert_arr_eq(dv, ev, half, "q%d: and V", b);
            int bits, kd;
            size_t sn, slo, shi;
            cr_assert_eq(skv_lossy_info(st, len, &bits, (skv_lossy_kind *)&kd, &sn, &slo, &shi), 0);
            cr_assert(bits == b && kd == kind && sn == n && slo == lo && shi == hi);
            double e = 0.0, s = 0.0;
            int differs = 0;
            for (int l = 0; l < skv_model_cfg(m)->n_layers; l++)
                for (size_t p = 0; p < n; p++) {
                    const size_t off = ((size_t)l * n + p) * row;
                    if (p < lo || p >= hi) {
                        cr_assert_arr_eq(dk + off, k + off, row, "the window is exact (K, layer %d, position %zu)", l, p);
                        cr_assert_arr_eq(dv + off, v + off, row, "the window is exact (V)");
                        continue;
                    }
                    differs |= memcmp(dk + off, k + off, row) != 0;
                    /* the error the quantiser controls: in the transformed
                     * (attention-output) metric, |T(x - x^)| against |T x| */
                    const int D = skv_model_cfg(m)->head_dim;
                    for (int h = 0; h < skv_model_cfg(m)->n_kv_heads; h++) {
                        const float *T = skv_lossy_transform(c, l, 0, h, 0);
                        float x[256], d[256];
                        for (int i = 0; i < D; i++) {
                            x[i] = skv_bf16_to_f32(skv_load16_le(k + off + 2 * ((size_t)h * D + i)));
                            d[i] = x[i] - skv_bf16_to_f32(skv_load16_le(dk + off + 2 * ((size_t)h * D + i)));
                        }
                        for (int a = 0; a < D; a++) {
                            double tx = 0.0, td = 0.0;
                            for (int j = 0; j < D; j++) {
                                tx += (double)T[a * D + j] * x[j];
                                td += (double)T[a * D + j] * d[j];
                            }
                            e += td * td;
                            s += tx * tx;
                        }
                    }
                }
            if (hi == lo)
                continue;
            cr_assert(differs, "q%d is lossy", b);
            const double rel = sqrt(e / s);
            cr_assert_lt(rel, 1.0, "q%d: K relative error (transformed) %.3f", b, rel);
            if (kind == 0) {
                if (b < 4)
                    cr_assert_gt(rel, err_prev * 0.9, "fewer bits, no less error (q%d %.4f after %.4f)", b, rel, err_prev);
                err_prev = rel;
            }
            if (b == 4 && kind == 0) {
                q4len = len;
                *q4_stream = malloc(len);
                memcpy(*q4_stream, st, len);
            }
        }
    free(k), free(v), free(st), free(ek), free(ev), free(dk), free(dv);
    return q4len;
}

Test(lossy, random_model_transforms_invert_window_exact_and_deterministic)
{
    skv_model *m = random_model();
    seqs cal = {0}, test = {0};
    make_seqs(m, &cal, 6, 40, 1);
    make_seqs(m, &test, 1, 40, 2);
    skv_pool *p2;
    cr_assert_eq(skv_pool_create(&p2, 2), 0);
    skv_lossy_cal *c1 = calibrate(m, &cal, NULL, 1), *c2 = calibrate(m, &cal, p2, 1);
    /* (the fuzz seed's calibration: q-levels of a model this small stay small) */
    cr_assert_arr_eq(skv_lossy_cal_id(c1), skv_lossy_cal_id(c2), 16, "the same calibration on 1 and 2 threads");
    check_inverse(c1);
    uint8_t *s1 = NULL, *s2 = NULL;
    const size_t n1 = levels_round_trip(c1, m, test.tok[0], 40, 3, 30, &s1);
    const size_t n2 = levels_round_trip(c2, m, test.tok[0], 40, 3, 30, &s2);
    cr_assert_eq(n1, n2);
    cr_assert_arr_eq(s1, s2, n1, "the same stream bytes");
    /* all lossy, all exact */
    uint8_t *s3 = NULL;
    levels_round_trip(c1, m, test.tok[0], 40, 0, 40, &s3);
    free(s3);
    s3 = NULL;
    levels_round_trip(c1, m, test.tok[0], 40, 0, 0, &s3);
    free(s3);

    /* save, load: the same id; the loaded one decodes the stream */
    uint8_t *img;
    size_t ilen;
    cr_assert_eq(skv_lossy_cal_save(c1, &img, &ilen), 0);
    skv_lossy_cal *c3;
    cr_assert_eq(skv_lossy_cal_load(img, ilen, &c3), 0);
    cr_assert_arr_eq(skv_lossy_cal_id(c3), skv_lossy_cal_id(c1), 16);
    const size_t half = skv_model_kv_per_token(m) / 2 * 40 * 2;
    uint8_t *dk = malloc(half), *dv = malloc(half);
    cr_assert_eq(skv_lossy_decode(c3, s1, n1, 40, dk, dv), 0);
    /* SKV_LOSSY_CORPUS=DIR: write fuzz_lossy's seed (calibration + stream) */
    const char *corpus = getenv("SKV_LOSSY_CORPUS");
    if (corpus) {
        FILE *f = fopen(tu_path(corpus, "random_model_q4.bin"), "wb");
        cr_assert(f);
        uint8_t l4[4];
        skv_store32_le(l4, (uint32_t)ilen);
        fwrite(l4, 1, 4, f);
        fwrite(img, 1, ilen, f);
        fwrite(s1, 1, n1, f);
        fclose(f);
        /* and a slab of layer 1's V, as the store's records hold them */
        uint8_t *k, *v;
        kv_of(m, test.tok[0], 40, SEQKV_DT_BF16, &k, &v);
        const size_t sb = skv_lossy_slab_bound(c1, 40);
        uint8_t *slab = malloc(sb);
        size_t slen;
        const size_t rowsz = half / 2; /* layer 1 of 2: its V, 40 positions */
        cr_assert_eq(skv_lossy_slab_encode(c1, 3, SKV_LQ_PVQ, 1, 1, v + rowsz, 40, 4, 32, slab, sb, &slen, NULL), 0);
        f = fopen(tu_path(corpus, "random_model_slab_q3.bin"), "wb");
        cr_assert(f);
        fwrite(l4, 1, 4, f);
        fwrite(img, 1, ilen, f);
        fwrite(slab, 1, slen, f);
        fclose(f);
        free(k), free(v), free(slab);
    }
    /* damaged calibrations: refused, never loaded wrong */
    for (size_t cut = 0; cut < ilen; cut += ilen / 97 + 1) {
        skv_lossy_cal *bad = NULL;
        cr_assert_neq(skv_lossy_cal_load(img, cut, &bad), 0, "a calibration cut at %zu", cut);
    }
    img[ilen - 3] ^= 1; /* a frequency: no longer sums to 2^15 */
    skv_lossy_cal *bad = NULL;
    cr_assert_eq(skv_lossy_cal_load(img, ilen, &bad), SKV_ERR_CORRUPT);
    /* damaged streams */
    cr_assert_eq(skv_lossy_decode(c1, s1, n1, 39, dk, dv), SKV_ERR_SHAPE, "other positions");
    skv_lossy_cal *other = calibrate(m, &test, NULL, 0);
    cr_assert_eq(skv_lossy_decode(other, s1, n1, 40, dk, dv), SKV_ERR_SHAPE, "another calibration");
    cr_assert_eq(skv_lossy_decode(c1, s1, n1 - 1, 40, dk, dv), SKV_ERR_CORRUPT, "truncated");
    s1[n1 - 5] ^= 0x10;
    cr_assert_eq(skv_lossy_decode(c1, s1, n1, 40, dk, dv), SKV_ERR_CORRUPT, "a flipped bit");
    s1[0] ^= 1;
    cr_assert_eq(skv_lossy_decode(c1, s1, n1, 40, dk, dv), SKV_ERR_FORMAT, "not a lossy stream");
    free(dk), free(dv), free(img), free(s1), free(s2);
    skv_lossy_cal_free(c1), skv_lossy_cal_free(c2), skv_lossy_cal_free(c3), skv_lossy_cal_free(other);
    skv_pool_free(p2);
    free_seqs(&cal), free_seqs(&test);
    skv_model_free(m);
}

Test(lossy, stories260k_kv_round_trips)
{
    const char *p = tu_shared_model("stories260K.bin");
    if (!p)
        cr_skip("../shared/models/stories260K.bin not present");
    skv_model *m;
    cr_assert_eq(skv_model_load(p, &m), 0);
    seqs cal = {0}, test = {0};
    /* sampled text, not random ids: the model's own kind of KV */
    const size_t n = 96;
    for (int i = 0; i < 8; i++) {
        skv_rng r;
        skv_rng_seed(&r, 100 + (uint64_t)i);
        int32_t bos = 1;
        cal.tok[i] = malloc(n * sizeof(int32_t));
        cal.len[i] = n;
        cr_assert_eq(skv_model_generate(m, NULL, &bos, 1, n, 1.0f, 0.9f, &r, cal.tok[i]), 0);
    }
    cal.n = 8;
    skv_rng r;
    skv_rng_seed(&r, 200);
    int32_t bos = 1;
    test.tok[0] = malloc(n * sizeof(int32_t));
    test.n = 1;
    cr_assert_eq(skv_model_generate(m, NULL, &bos, 1, n, 1.0f, 0.9f, &r, test.tok[0]), 0);
    skv_lossy_cal *c = calibrate(m, &cal, NULL, 0);
    check_inverse(c);
    uint8_t *s = NULL;
    const size_t len = levels_round_trip(c, m, test.tok[0], n, 4, n - 8, &s);
    const double bits = 8.0 * (double)(len - SKV_LOSSY_HEADER - 12 * skv_model_kv_per_token(m) * 2) /
                        ((double)(n - 12) * skv_model_kv_per_token(m));
    cr_log_info("stories260K q4: %.3f bits a lossy scalar", bits);
    /* a calibration this small (8 x 96 positions) leaves the books short
     * of vectors: more escapes than the bench's 4.1 bits */
    cr_assert_lt(bits, 6.0, "q4 codes near its 4 bits (%.3f)", bits);
    cr_assert_gt(bits, 3.0, "q4 codes near its 4 bits (%.3f)", bits);
    free(s);
    skv_lossy_cal_free(c);
    free_seqs(&cal), free_seqs(&test);
    skv_model_free(m);
}

/* heads of 128 channels, as Llama 3's and Qwen3's */
Test(lossy, wide_heads_round_trip)
{
    rm_shape sh = {0, 256, 64, 1, 2, 1, 128, 40, 64, 1, 10000.0f, 1e-5f};
    skv_model *m = model_of(&sh, 77);
    cr_assert_eq(skv_model_cfg(m)->head_dim, 128);
    seqs cal = {0}, test = {0};
    make_seqs(m, &cal, 4, 40, 5);
    make_seqs(m, &test, 1, 40, 6);
    skv_lossy_cal *c = calibrate(m, &cal, NULL, 0);
    check_inverse(c);
    uint8_t *s = NULL;
    cr_assert_gt(levels_round_trip(c, m, test.tok[0], 40, 2, 36, &s), 0);
    free(s);
    skv_lossy_cal_free(c);
    free_seqs(&cal), free_seqs(&test);
    skv_model_free(m);
}
