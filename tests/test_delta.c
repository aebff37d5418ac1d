/* Predictors and calibration: every level round-trips bit-exactly on real
 * model KV (a seeded random model always; stories260K when present) in
 * every dtype; levels are ordered as they should be; calibration files
 * round-trip and reject corruption; mismatched inputs are refused. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "randmodel.h"
#include "skv_delta.h"
#include "testutil.h"

typedef struct {
    size_t n;
    size_t T[16];
    int32_t *tok[16];
    uint8_t *k[16], *v[16];
} kvset;

/* Sample n sequences of T tokens from m and compute their KV in dtype. */
static void make_kv(const skv_model *m, size_t n, size_t T, uint64_t seed, seqkv_dtype dt, kvset *s)
{
    const skv_model_config *c = skv_model_cfg(m);
    s->n = n;
    size_t per = skv_model_kv_per_token(m) / 2 * skv_dtype_size(dt);
    for (size_t i = 0; i < n; i++) {
        skv_rng r;
        skv_rng_seed(&r, seed + i);
        int32_t bos = c->bos_id;
        s->T[i] = T - (i % 3); /* ragged lengths */
        s->tok[i] = malloc(T * sizeof(int32_t));
        cr_assert_eq(skv_model_generate(m, NULL, &bos, 1, s->T[i], 1.0f, 0.9f, &r, s->tok[i]), 0);
        skv_kvcache *kc;
        cr_assert_eq(skv_kvcache_create(c, s->T[i], &kc), 0);
        cr_assert_eq(skv_model_forward(m, kc, s->tok[i], s->T[i], NULL), 0);
        s->k[i] = malloc(s->T[i] * per);
        s->v[i] = malloc(s->T[i] * per);
        cr_assert_eq(skv_kvcache_export(kc, 0, s->T[i], dt, s->k[i], s->v[i]), 0);
        skv_kvcache_free(kc);
    }
}

static void free_kv(kvset *s)
{
    for (size_t i = 0; i < s->n; i++) {
        free(s->tok[i]);
        free(s->k[i]);
        free(s->v[i]);
    }
}

/* The set as a parsed KV file (buffer returned for freeing). */
static skv_st *as_file(const skv_model *m, const kvset *s, seqkv_dtype dt, uint8_t **buf)
{
    const skv_model_config *c = skv_model_cfg(m);
    skv_st_writer *w;
    cr_assert_eq(skv_stw_create(&w), 0);
    for (size_t i = 0; i < s->n; i++) {
        skv_kvseq q = {s->T[i], s->tok[i], dt, c->n_layers, c->n_kv_heads, c->head_dim, s->k[i], s->v[i]};
        cr_assert_eq(skv_kvfile_add(w, i, &q), 0);
    }
    size_t len;
    cr_assert_eq(skv_stw_serialize(w, buf, &len), 0);
    skv_stw_free(w);
    skv_st *st;
    cr_assert_eq(skv_st_parse(*buf, len, &st), 0);
    return st;
}

/* Encode and decode every test sequence at `lvl`; returns bits/scalar. */
static double round_trip(const skv_calib *cal, seqkv_level lvl, const skv_model *m, const kvset *t,
                         seqkv_dtype dt, size_t chunk)
{
    skv_delta *d;
    cr_assert_eq(skv_delta_create(cal, lvl, m, NULL, &d), 0, "%s", seqkv_error_detail());
    size_t per = skv_model_kv_per_token(m) / 2 * skv_dtype_size(dt), bytes = 0, scalars = 0;
    for (size_t i = 0; i < t->n; i++) {
        skv_streams s = {0};
        cr_assert_eq(skv_delta_encode(d, t->tok[i], t->T[i], t->k[i], t->v[i], chunk, &s), 0, "%s",
                     seqkv_error_detail());
        size_t L = (size_t)skv_model_cfg(m)->n_layers, chunks = (t->T[i] + chunk - 1) / chunk;
        cr_assert_eq(s.nstreams, chunks * L * 2);
        uint8_t *k = malloc(t->T[i] * per + 1), *v = malloc(t->T[i] * per + 1);
        cr_assert_eq(skv_delta_decode(d, t->tok[i], t->T[i], &s, 0, chunk, k, v), 0, "%s %s",
                     seqkv_level_name(lvl), seqkv_error_detail());
        cr_assert_eq(memcmp(k, t->k[i], t->T[i] * per), 0, "K bit-exact (%s, seq %zu)", seqkv_level_name(lvl), i);
        cr_assert_eq(memcmp(v, t->v[i], t->T[i] * per), 0, "V bit-exact (%s, seq %zu)", seqkv_level_name(lvl), i);
        /* a corrupted stream is detected, never decoded into wrong bytes */
        s.data[s.offs[1] - 3] ^= 0x5a;
        int rc = skv_delta_decode(d, t->tok[i], t->T[i], &s, 0, chunk, k, v);
        cr_assert_neq(rc, 0, "corruption detected (%s)", seqkv_level_name(lvl));
        bytes += s.len;
        scalars += 2 * t->T[i] * per / skv_dtype_size(dt);
        free(k);
        free(v);
        skv_streams_free(&s);
    }
    skv_delta_free(d);
    return 8.0 * (double)bytes / (double)scalars;
}

/* ncal calibration sequences and ntest test sequences of T tokens from m
 * (seeds seed and seed + 4000), and a calibration learned from the first */
static skv_calib *learned(const skv_model *m, seqkv_dtype dt, size_t ncal, size_t ntest, size_t T,
                          uint64_t seed, kvset *test)
{
    kvset cal = {0};
    make_kv(m, ncal, T, seed, dt, &cal);
    make_kv(m, ntest, T, seed + 4000, dt, test);
    uint8_t *buf;
    skv_st *st = as_file(m, &cal, dt, &buf);
    skv_calib *c;
    skv_calib_opts o = {.model = m, .max_fit_samples = 256, .quiet = 1};
    cr_assert_eq(skv_calib_learn(st, &o, &c), 0, "%s", seqkv_error_detail());
    skv_st_free(st);
    free(buf);
    free_kv(&cal);
    return c;
}

static void levels_case(const skv_model *m, seqkv_dtype dt, size_t ncal, size_t T, size_t chunk,
                        double bits[SEQKV_LEVELS])
{
    kvset test = {0};
    skv_calib *c = learned(m, dt, ncal, 3, T, 1000, &test);
    for (int l = SEQKV_STAT; l <= SEQKV_FULL; l++) {
        cr_assert(skv_calib_has_level(c, (seqkv_level)l));
        bits[l] = round_trip(c, (seqkv_level)l, m, &test, dt, chunk);
    }
    skv_calib_free(c);
    free_kv(&test);
}

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

/* ctx at rows of 320 scalars (10 KV heads of 32), wider than the stack
 * buffers the paired decode of a layer's K and V (code_pair) once had:
 * bit-exact, chunks of 24 (the row before a chunk from its bytes) */
Test(delta, ctx_round_trips_rows_wider_than_256)
{
    rm_shape sh = {0, 320, 64, 2, 10, 10, 32, 40, 64, 1, 10000.0f, 1e-5f};
    skv_model *m = model_of(&sh, 43);
    cr_assert_eq(skv_model_cfg(m)->n_kv_heads * skv_model_cfg(m)->head_dim, 320);
    kvset test = {0};
    skv_calib *c = learned(m, SEQKV_DT_BF16, 4, 2, 40, 77, &test);
    double bits = round_trip(c, SEQKV_CTX, m, &test, SEQKV_DT_BF16, 24);
    cr_expect_lt(bits, 16.0);
    skv_calib_free(c);
    free_kv(&test);
    skv_model_free(m);
}

/* Rows of 640 scalars (20 KV heads of 32), wider than the stack buffers
 * of code_stream (512): the row before and this one then live on the heap.
 * Bit-exact at stat and ctx, in bf16 (decoded by code_pair) and in f16
 * (decoded by code_stream), chunks of 24 (the row before a chunk from its
 * bytes) */
Test(delta, model_free_levels_round_trip_rows_wider_than_512)
{
    rm_shape sh = {0, 640, 64, 2, 20, 20, 32, 40, 64, 1, 10000.0f, 1e-5f};
    skv_model *m = model_of(&sh, 44);
    cr_assert_eq(skv_model_cfg(m)->n_kv_heads * skv_model_cfg(m)->head_dim, 640);
    const seqkv_dtype dts[2] = {SEQKV_DT_BF16, SEQKV_DT_F16};
    for (int i = 0; i < 2; i++) {
        kvset test = {0};
        skv_calib *c = learned(m, dts[i], 4, 2, 40, 78, &test);
        for (int lv = SEQKV_STAT; lv <= SEQKV_CTX; lv++)
            cr_expect_lt(round_trip(c, (seqkv_level)lv, m, &test, dts[i], 24), 17.0);
        skv_calib_free(c);
        free_kv(&test);
    }
    skv_model_free(m);
}

Test(delta, every_level_and_dtype_round_trips_on_random_model_kv)
{
    skv_model *m = random_model();
    seqkv_dtype dts[4] = {SEQKV_DT_BF16, SEQKV_DT_F16, SEQKV_DT_F8E4M3, SEQKV_DT_F32};
    for (int i = 0; i < 4; i++) {
        double b[SEQKV_LEVELS];
        levels_case(m, dts[i], 6, 48, 20, b);
        cr_assert_lt(b[SEQKV_FULL], b[SEQKV_STAT], "%s: full %.3f < stat %.3f",
                     skv_dtype_name(dts[i]), b[SEQKV_FULL], b[SEQKV_STAT]);
    }
    skv_model_free(m);
}

Test(delta, stories260k_levels_round_trip_and_rank)
{
    const char *p = tu_shared_model("stories260K.bin");
    if (!p)
        cr_skip("../shared/models/stories260K.bin not present");
    skv_model *m;
    cr_assert_eq(skv_model_load(p, &m), 0);
    double b[SEQKV_LEVELS];
    levels_case(m, SEQKV_DT_BF16, 8, 96, 64, b);
    cr_assert_lt(b[SEQKV_CTX], b[SEQKV_STAT], "ctx %.3f < stat %.3f", b[SEQKV_CTX], b[SEQKV_STAT]);
    cr_assert_lt(b[SEQKV_SPEC], b[SEQKV_CTX], "spec %.3f < ctx %.3f", b[SEQKV_SPEC], b[SEQKV_CTX]);
    cr_assert_lt(b[SEQKV_FULL], 0.5, "full %.3f bits: seqkv's own KV is nearly free", b[SEQKV_FULL]);
    cr_assert_lt(b[SEQKV_STAT], 12.0, "stat %.3f beats raw 16 bits", b[SEQKV_STAT]);
    double b8[SEQKV_LEVELS];
    levels_case(m, SEQKV_DT_F8E4M3, 8, 64, 64, b8);
    cr_assert_lt(b8[SEQKV_SPEC], 8.0);
    skv_model_free(m);
}

Test(delta, calibration_file_round_trips_and_rejects_corruption)
{
    skv_model *m = random_model();
    kvset cal = {0};
    make_kv(m, 4, 32, 7, SEQKV_DT_BF16, &cal);
    uint8_t *buf;
    skv_st *st = as_file(m, &cal, SEQKV_DT_BF16, &buf);
    skv_calib *c, *c2;
    skv_calib_opts o = {.model = NULL, .max_fit_samples = 128, .quiet = 1};
    cr_assert_eq(skv_calib_learn(st, &o, &c), 0, "%s", seqkv_error_detail());
    cr_assert(skv_calib_has_level(c, SEQKV_CTX));
    cr_assert(!skv_calib_has_level(c, SEQKV_SPEC), "no model, no spec level");
    skv_delta *d;
    cr_assert_eq(skv_delta_create(c, SEQKV_SPEC, m, NULL, &d), SKV_ERR_ARG);
    const char *dir = tu_tmpdir(), *path = tu_path(dir, "c.cal");
    cr_assert_eq(skv_calib_save(c, path), 0);
    cr_assert_eq(skv_calib_load(path, &c2), 0, "%s", seqkv_error_detail());
    cr_assert_eq(memcmp(skv_calib_id(c), skv_calib_id(c2), 16), 0, "same content, same id");
    /* streams coded with one load decode with the other */
    kvset t = {0};
    make_kv(m, 1, 32, 99, SEQKV_DT_BF16, &t);
    cr_assert_lt(round_trip(c2, SEQKV_CTX, m, &t, SEQKV_DT_BF16, 16), 16.0);
    /* flip one byte of the codebook: the content hash catches it */
    size_t len;
    uint8_t *f = tu_read(path, &len);
    f[len - 2000] ^= 1;
    cr_assert_eq(skv_file_write(path, f, len), 0);
    skv_calib_free(c2);
    cr_assert_eq(skv_calib_load(path, &c2), SKV_ERR_CORRUPT);
    cr_assert_null(c2);
    free(f);
    skv_calib_free(c);
    skv_st_free(st);
    free(buf);
    free_kv(&cal);
    free_kv(&t);
    skv_model_free(m);
}

Test(delta, refuses_mismatched_inputs)
{
    skv_model *m = random_model();
    kvset cal = {0};
    make_kv(m, 3, 24, 3, SEQKV_DT_BF16, &cal);
    uint8_t *buf;
    skv_st *st = as_file(m, &cal, SEQKV_DT_BF16, &buf);
    skv_calib *c;
    skv_calib_opts o = {.model = m, .max_fit_samples = 64, .quiet = 1};
    cr_assert_eq(skv_calib_learn(st, &o, &c), 0);
    /* another model for spec: fingerprint mismatch */
    rm_shape s2 = {0, 32, 64, 2, 4, 2, 8, 40, 64, 1, 10000.0f, 1e-5f};
    size_t len;
    uint8_t *img = rm_llama2c(&s2, 43, &len);
    skv_model *m2;
    cr_assert_eq(skv_model_load_llama2c_mem(img, len, &m2), 0);
    skv_delta *d;
    cr_assert_eq(skv_delta_create(c, SEQKV_SPEC, m2, NULL, &d), SKV_ERR_SHAPE);
    cr_assert_eq(skv_delta_create(c, SEQKV_FULL, NULL, NULL, &d), SKV_ERR_ARG);
    cr_assert_eq(skv_delta_create(c, SEQKV_CTX, NULL, NULL, &d), 0);
    /* token outside the vocabulary */
    int32_t bad[2] = {1, 40};
    skv_streams ss = {0};
    uint8_t kv[2 * 2 * 16 * 2];
    cr_assert_eq(skv_delta_encode(d, bad, 2, kv, kv, 16, &ss), SKV_ERR_ARG);
    /* streams of another calibration are refused */
    skv_streams good = {0};
    cr_assert_eq(skv_delta_encode(d, cal.tok[0], cal.T[0], cal.k[0], cal.v[0], 8, &good), 0);
    skv_calib *c3;
    skv_calib_opts o3 = {.model = NULL, .max_fit_samples = 32, .quiet = 1};
    cr_assert_eq(skv_calib_learn(st, &o3, &c3), 0);
    skv_delta *d3;
    cr_assert_eq(skv_delta_create(c3, SEQKV_CTX, NULL, NULL, &d3), 0);
    uint8_t *k = malloc(cal.T[0] * 2 * 16 * 2), *v = malloc(cal.T[0] * 2 * 16 * 2);
    int rc = skv_delta_decode(d3, cal.tok[0], cal.T[0], &good, 0, 8, k, v);
    cr_assert_eq(rc, SKV_ERR_CORRUPT, "%s", seqkv_error_detail());
    /* truncated stream list */
    good.nstreams = 3;
    cr_assert_eq(skv_delta_decode(d, cal.tok[0], cal.T[0], &good, 0, 8, k, v), SKV_ERR_FORMAT);
    free(k);
    free(v);
    skv_streams_free(&good);
    skv_delta_free(d3);
    skv_calib_free(c3);
    skv_delta_free(d);
    skv_model_free(m2);
    free(img);
    skv_calib_free(c);
    skv_st_free(st);
    free(buf);
    free_kv(&cal);
    skv_model_free(m);
}

Test(delta, parallel_layers_give_the_same_streams_and_bytes)
{
    skv_model *m = random_model();
    kvset cal = {0}, t = {0};
    make_kv(m, 4, 40, 11, SEQKV_DT_BF16, &cal);
    make_kv(m, 2, 40, 12, SEQKV_DT_BF16, &t);
    uint8_t *buf;
    skv_st *st = as_file(m, &cal, SEQKV_DT_BF16, &buf);
    skv_calib *c;
    skv_calib_opts o = {.model = NULL, .max_fit_samples = 128, .quiet = 1};
    cr_assert_eq(skv_calib_learn(st, &o, &c), 0);
    skv_pool *pool;
    cr_assert_eq(skv_pool_create(&pool, 2), 0);
    size_t per = skv_model_kv_per_token(m) / 2 * 2;
    for (int lvl = SEQKV_STAT; lvl <= SEQKV_CTX; lvl++) {
        skv_delta *d1, *d2;
        cr_assert_eq(skv_delta_create(c, (seqkv_level)lvl, NULL, NULL, &d1), 0);
        cr_assert_eq(skv_delta_create(c, (seqkv_level)lvl, NULL, pool, &d2), 0);
        skv_delta_set_ideal(d2, 0); /* as the store codes: the same bytes, no ideal cost */
        for (size_t i = 0; i < t.n; i++) {
            skv_streams a = {0}, b = {0};
            cr_assert_eq(skv_delta_encode(d1, t.tok[i], t.T[i], t.k[i], t.v[i], 16, &a), 0);
            cr_assert_eq(skv_delta_encode(d2, t.tok[i], t.T[i], t.k[i], t.v[i], 16, &b), 0);
            cr_assert_eq(a.nstreams, b.nstreams);
            cr_assert_eq(a.len, b.len);
            cr_assert_eq(memcmp(a.data, b.data, a.len), 0, "same bytes with 1 and 2 threads");
            uint8_t *k = malloc(t.T[i] * per), *v = malloc(t.T[i] * per);
            cr_assert_eq(skv_delta_decode(d2, t.tok[i], t.T[i], &a, 0, 16, k, v), 0, "%s", seqkv_error_detail());
            cr_assert_eq(memcmp(k, t.k[i], t.T[i] * per), 0);
            cr_assert_eq(memcmp(v, t.v[i], t.T[i] * per), 0);
            free(k);
            free(v);
            skv_streams_free(&a);
            skv_streams_free(&b);
        }
        const double *i1, *b1, *i2, *b2;
        const uint64_t *n1, *n2;
        skv_delta_costs(d1, &i1, &b1, &n1);
        skv_delta_costs(d2, &i2, &b2, &n2);
        for (int j = 0; j < 2 * skv_model_cfg(m)->n_layers; j++) {
            cr_assert(isfinite(i1[j]) && i1[j] > 0 && isnan(i2[j]), "layer/kv %d: %g, %g", j, i1[j],
                      i2[j]);
            cr_assert(b1[j] == b2[j] && n1[j] == n2[j]);
        }
        skv_delta_free(d1);
        skv_delta_free(d2);
    }
    skv_pool_free(pool);
    skv_calib_free(c);
    skv_st_free(st);
    free(buf);
    free_kv(&cal);
    free_kv(&t);
    skv_model_free(m);
}

/* Write odd value j (cycling through the list) of dtype dt at scalar `at`. */
static void poke_odd(seqkv_dtype dt, uint8_t *base, size_t at, size_t j)
{
    /* inf, -inf, NaN, huge, |x| just over 2^100, exactly 2^100 (small),
     * the largest finite; fp8 e4m3 has NaN and no infinities */
    static const uint16_t bf[] = {0x7f80, 0xff80, 0x7fc1, 0x7f00, 0xf181, 0x7180, 0x7f7f};
    static const uint16_t hf[] = {0x7c00, 0xfc00, 0x7e01, 0x7bff, 0xfbff, 0x7c01, 0x8000};
    static const uint32_t ff[] = {0x7f800000, 0xff800000, 0x7fc00001, 0x7f000000,
                                  0xf1800001, 0x71800000, 0x71800001};
    static const uint8_t f8[] = {0x7f, 0xff, 0x7e, 0xfe, 0x80, 0x7f, 0x01};
    j %= 7;
    switch (dt) {
    case SEQKV_DT_BF16: skv_store16_le(base + 2 * at, bf[j]); break;
    case SEQKV_DT_F16: skv_store16_le(base + 2 * at, hf[j]); break;
    case SEQKV_DT_F32: skv_store32_le(base + 4 * at, ff[j]); break;
    default: base[at] = f8[j]; break;
    }
}

/* Sequences of t coded at lvl by the fast predictor paths and by the
 * plain one (SEQKV_PLAIN_PREDICT), chunks of 16: the same bytes, and each
 * coder's streams decode, by the other coder, to the KV put in. */
static void check_fast_is_plain(const skv_calib *c, int lvl, const kvset *t, size_t per,
                                const char *what)
{
    skv_delta *fast, *plain;
    cr_assert_eq(skv_delta_create(c, (seqkv_level)lvl, NULL, NULL, &fast), 0);
    setenv("SEQKV_PLAIN_PREDICT", "1", 1);
    cr_assert_eq(skv_delta_create(c, (seqkv_level)lvl, NULL, NULL, &plain), 0);
    unsetenv("SEQKV_PLAIN_PREDICT");
    const char *ln = seqkv_level_name((seqkv_level)lvl);
    for (size_t i = 0; i < t->n; i++) {
        skv_streams a = {0}, b = {0};
        cr_assert_eq(skv_delta_encode(fast, t->tok[i], t->T[i], t->k[i], t->v[i], 16, &a), 0);
        cr_assert_eq(skv_delta_encode(plain, t->tok[i], t->T[i], t->k[i], t->v[i], 16, &b), 0);
        cr_assert_eq(a.len, b.len, "%s %s seq %zu", what, ln, i);
        cr_assert_eq(memcmp(a.data, b.data, a.len), 0, "%s %s seq %zu: same bytes", what, ln, i);
        uint8_t *k = malloc(t->T[i] * per), *v = malloc(t->T[i] * per);
        cr_assert_eq(skv_delta_decode(fast, t->tok[i], t->T[i], &b, 0, 16, k, v), 0, "%s",
                     seqkv_error_detail());
        cr_assert_eq(memcmp(k, t->k[i], t->T[i] * per), 0, "%s %s seq %zu: K", what, ln, i);
        cr_assert_eq(memcmp(v, t->v[i], t->T[i] * per), 0, "%s %s seq %zu: V", what, ln, i);
        cr_assert_eq(skv_delta_decode(plain, t->tok[i], t->T[i], &a, 0, 16, k, v), 0, "%s",
                     seqkv_error_detail());
        cr_assert_eq(memcmp(k, t->k[i], t->T[i] * per), 0, "%s %s seq %zu: K", what, ln, i);
        cr_assert_eq(memcmp(v, t->v[i], t->T[i] * per), 0, "%s %s seq %zu: V", what, ln, i);
        free(k);
        free(v);
        skv_streams_free(&a);
        skv_streams_free(&b);
    }
    skv_delta_free(fast);
    skv_delta_free(plain);
}

/* The same with odd values in every dtype, and huge ones in the calibration
 * set (so that codebook rows hold them too), coded in chunks of 16: stat's
 * constant rows, which the codec takes only where the previous row and the
 * codebook row are finite with a margin (tested once per calibration and
 * as rows are coded), give the plain path's bytes. */
Test(delta, fast_paths_give_the_plain_bytes_on_odd_values_in_every_dtype)
{
    const seqkv_dtype dts[] = {SEQKV_DT_BF16, SEQKV_DT_F16, SEQKV_DT_F32, SEQKV_DT_F8E4M3};
    skv_model *m = random_model();
    for (size_t di = 0; di < 4; di++) {
        const seqkv_dtype dt = dts[di];
        kvset cal = {0}, t = {0};
        make_kv(m, 8, 40, 31, dt, &cal);
        make_kv(m, 3, 40, 32, dt, &t);
        const size_t per = skv_model_kv_per_token(m) / 2 * skv_dtype_size(dt),
                     nsc = per / skv_dtype_size(dt);
        /* calibration: 2^107 in a few places, which leaves the channel means
         * (over ~300 positions) under 2^100 and the codebook rows of tokens
         * seen under 128 times over it; only bf16 and f32 hold such values */
        for (size_t j = 0; j < 4 && (dt == SEQKV_DT_BF16 || dt == SEQKV_DT_F32); j++) {
            uint8_t *sq = j & 1 ? cal.v[1 + j] : cal.k[1 + j];
            size_t at = nsc + (j * 389 + 7) % ((cal.T[1 + j] - 1) * nsc); /* not position 0 */
            if (dt == SEQKV_DT_BF16)
                skv_store16_le(sq + 2 * at, j & 2 ? 0xf500 : 0x7500);
            else
                skv_store32_le(sq + 4 * at, j & 2 ? 0xf5000000u : 0x75000000u);
        }
        for (size_t i = 1; i < t.n; i++) /* sequence 0 stays clean */
            for (size_t j = 0; j < 14; j++) {
                size_t at = (j * 977 + i * 131) % (t.T[i] * nsc);
                poke_odd(dt, t.k[i], at, j);
                poke_odd(dt, t.v[i], (at * 7) % (t.T[i] * nsc), j + 3);
            }
        /* and whole rows at a chunk's edges (positions 15, 16, 31, 32) */
        for (size_t ch = 0; ch < nsc; ch++) {
            poke_odd(dt, t.k[2], 15 * nsc + ch, 3);
            poke_odd(dt, t.v[2], 16 * nsc + ch, 0);
            poke_odd(dt, t.k[2], 31 * nsc + ch, 4);
            poke_odd(dt, t.v[2], 32 * nsc + ch, 2);
        }
        uint8_t *buf;
        skv_st *st = as_file(m, &cal, dt, &buf);
        skv_calib *c;
        skv_calib_opts o = {.model = NULL, .max_fit_samples = 128, .quiet = 1};
        cr_assert_eq(skv_calib_learn(st, &o, &c), 0, "%s", seqkv_error_detail());
        for (int lvl = SEQKV_STAT; lvl <= SEQKV_CTX; lvl++)
            check_fast_is_plain(c, lvl, &t, per, skv_dtype_name(dt));
        skv_calib_free(c);
        skv_st_free(st);
        free(buf);
        free_kv(&cal);
        free_kv(&t);
    }
    skv_model_free(m);
}

/* The fast predictor paths (stat's constant rows, four-lane predict) give
 * the bytes of the plain one (SEQKV_PLAIN_PREDICT), also on KV holding
 * infinities, NaNs and huge values, which send rows back to the general
 * path (0 * inf is NaN: a constant row would be wrong there). */
Test(delta, fast_prediction_paths_give_the_plain_paths_bytes)
{
    skv_model *m = random_model();
    kvset cal = {0}, t = {0};
    make_kv(m, 4, 40, 21, SEQKV_DT_BF16, &cal);
    make_kv(m, 3, 40, 22, SEQKV_DT_BF16, &t);
    uint8_t *buf;
    skv_st *st = as_file(m, &cal, SEQKV_DT_BF16, &buf);
    skv_calib *c;
    skv_calib_opts o = {.model = NULL, .max_fit_samples = 128, .quiet = 1};
    cr_assert_eq(skv_calib_learn(st, &o, &c), 0);
    size_t per = skv_model_kv_per_token(m) / 2 * 2;
    const uint16_t odd[] = {0x7f80, 0xff80, 0x7fc1, 0x7f00, 0xfe00, 0x8000};
    for (size_t i = 1; i < t.n; i++) /* sequence 0 stays clean */
        for (size_t j = 0; j < 6; j++) {
            size_t at = (j * 977 + i * 131) % (t.T[i] * per / 2);
            skv_store16_le(t.k[i] + 2 * at, odd[j]);
            skv_store16_le(t.v[i] + 2 * ((at * 7) % (t.T[i] * per / 2)), odd[(j + 3) % 6]);
        }
    for (int lvl = SEQKV_STAT; lvl <= SEQKV_CTX; lvl++)
        check_fast_is_plain(c, lvl, &t, per, "bf16");
    skv_calib_free(c);
    skv_st_free(st);
    free(buf);
    free_kv(&cal);
    free_kv(&t);
    skv_model_free(m);
}

/* A calibration file of the current version (cal) and the coded files
 * made with it (tests/fuzz/corpus: golden files, never rewritten) load,
 * with their ids, are written back unchanged, decode, and re-encode to
 * the same bytes. */
static void golden_calibration_case(const char *cal, const char *names[2])
{
    char p[1024];
    snprintf(p, sizeof p, "%s/tests/fuzz/corpus/fuzz_calib/%s", tu_source_root(), cal);
    skv_calib *c;
    cr_assert_eq(skv_calib_load(p, &c), 0, "%s", seqkv_error_detail());
    uint8_t *img;
    size_t ilen;
    cr_assert_eq(skv_calib_serialize(c, &img, &ilen), 0);
    size_t flen;
    uint8_t *file = tu_read(p, &flen);
    cr_assert_eq(ilen, flen);
    cr_assert_eq(memcmp(img, file, flen), 0, "%s is written back unchanged", cal);
    free(file);
    skv_free(img);
    for (int f = 0; f < 2; f++) {
        snprintf(p, sizeof p, "%s/tests/fuzz/corpus/fuzz_coded/%s", tu_source_root(), names[f]);
        size_t len;
        uint8_t *buf = tu_read(p, &len);
        cr_assert_not_null(buf, "%s", p);
        skv_coded_info ci;
        cr_assert_eq(skv_coded_read_header(buf, len, &ci), 0);
        cr_assert_eq(memcmp(ci.calib_id, skv_calib_id(c), 16), 0, "%s: the same calibration id", names[f]);
        skv_delta *d;
        cr_assert_eq(skv_delta_create(c, ci.level, NULL, NULL, &d), 0, "%s", seqkv_error_detail());
        const skv_kvshape *sh = skv_calib_shape(c);
        size_t pos = SKV_CODED_HEADER;
        for (uint32_t i = 0; i < ci.n_seq; i++) {
            uint32_t T;
            const uint8_t *tb;
            skv_streams s = {0};
            cr_assert_eq(skv_coded_read_seq(buf, len, &pos, &T, &tb, &s), 0);
            int32_t *tok = malloc((T + 1) * sizeof *tok);
            for (uint32_t t = 0; t < T; t++)
                tok[t] = (int32_t)skv_load32_le(tb + 4 * t);
            size_t nb = (size_t)sh->layers * T * sh->kv_heads * sh->head_dim * skv_dtype_size(sh->dtype);
            uint8_t *k = malloc(nb + 1), *v = malloc(nb + 1);
            cr_assert_eq(skv_delta_decode(d, tok, T, &s, 0, ci.chunk, k, v), 0, "%s seq %u: %s",
                         names[f], i, seqkv_error_detail());
            skv_streams e = {0};
            cr_assert_eq(skv_delta_encode(d, tok, T, k, v, ci.chunk, &e), 0);
            cr_assert_eq(e.len, s.len, "%s seq %u: same size", names[f], i);
            cr_assert_eq(memcmp(e.data, s.data, s.len), 0, "%s seq %u: same bytes", names[f], i);
            skv_streams_free(&e);
            skv_streams_free(&s);
            free(tok);
            free(k);
            free(v);
        }
        skv_delta_free(d);
        free(buf);
    }
    skv_calib_free(c);
}

Test(delta, golden_calibration_and_its_coded_files_decode_and_re_encode)
{
    const char *names[2] = {"tiny_stat.skv", "tiny_ctx.skv"};
    golden_calibration_case("tiny_bf16_v3.cal", names);
}

/* The same with stat's atoms learned */
Test(delta, golden_calibration_with_atoms_and_its_coded_files_decode_and_re_encode)
{
    const char *names[2] = {"tiny_atoms_stat.skv", "tiny_atoms_ctx.skv"};
    golden_calibration_case("tiny_bf16_v3_atoms.cal", names);
}

/* Calibration files of versions 1 and 2 (dense codebooks, written before
 * FORMAT 6) are refused for their version, naming it, not read */
Test(delta, calibrations_of_versions_1_and_2_are_refused)
{
    for (int v = 1; v <= 2; v++) {
        char p[4096], want[64];
        snprintf(p, sizeof p, "%s/tests/fuzz/corpus/fuzz_calib/refused_v%d.cal", tu_source_root(), v);
        skv_calib *c = NULL;
        cr_assert_eq(skv_calib_load(p, &c), SKV_ERR_VERSION, "%s: %s", p, seqkv_error_detail());
        cr_assert_null(c);
        snprintf(want, sizeof want, "calibration version %d: this build reads only version 3", v);
        cr_assert(strstr(seqkv_error_detail(), want) != NULL, "%s", seqkv_error_detail());
    }
}

/* A learned calibration is version 3: its codebook holds rows for the
 * distinct tokens seen only (ids far apart), written with their ids; the
 * file round-trips with the same id and codes the same bytes. */
/* A version 3 file (written by this build; tests/fuzz/corpus/fuzz_calib)
 * loads; the same file with one codebook token id changed, its content
 * hash left alone, is refused as malformed before the hash is checked */
Test(delta, a_sparse_codebook_with_tokens_out_of_order_is_refused)
{
    char p[4096];
    skv_calib *c = NULL;
    snprintf(p, sizeof p, "%s/tests/fuzz/corpus/fuzz_calib/tiny_bf16_v3_sparse.cal", tu_source_root());
    cr_assert_eq(skv_calib_load(p, &c), 0, "%s", seqkv_error_detail());
    skv_calib_free(c);
    c = NULL;
    snprintf(p, sizeof p, "%s/tests/fuzz/corpus/fuzz_calib/v3_token_flipped.cal", tu_source_root());
    cr_assert_eq(skv_calib_load(p, &c), SKV_ERR_FORMAT, "%s", seqkv_error_detail());
    cr_assert_null(c);
    cr_assert(strstr(seqkv_error_detail(), "tokens ascending") != NULL, "%s", seqkv_error_detail());
}

Test(delta, sparse_version_3_calibration_round_trips_with_rows_for_seen_tokens_only)
{
    skv_model *m = random_model();
    kvset cal = {0};
    make_kv(m, 4, 32, 7, SEQKV_DT_BF16, &cal);
    for (size_t i = 0; i < cal.n; i++)
        for (size_t t = 0; t < cal.T[i]; t++)
            cal.tok[i][t] = cal.tok[i][t] * 10000000 + 3;
    uint8_t *buf;
    skv_st *st = as_file(m, &cal, SEQKV_DT_BF16, &buf);
    skv_calib *c, *c2;
    skv_calib_opts o = {.model = NULL, .max_fit_samples = 128, .quiet = 1};
    cr_assert_eq(skv_calib_learn(st, &o, &c), 0, "%s", seqkv_error_detail());
    uint8_t *img;
    size_t ilen;
    cr_assert_eq(skv_calib_serialize(c, &img, &ilen), 0);
    skv_st *cs;
    cr_assert_eq(skv_st_parse(img, ilen, &cs), 0);
    cr_assert_str_eq(skv_st_meta(cs, "seqkv.calib_version"), "3");
    const skv_tensor *tk = skv_st_find(cs, "codebook.tokens"), *cb = skv_st_find(cs, "codebook");
    cr_assert_not_null(tk);
    cr_assert_leq(tk->nelem, 4 * 32, "at most a row per calibration token");
    cr_assert_eq((size_t)cb->shape[1], tk->nelem);
    for (size_t r = 0; r < tk->nelem; r++)
        cr_assert_eq((int32_t)skv_load32_le(tk->data + 4 * r) % 10000000, 3);
    cr_assert_eq(skv_calib_parse(img, ilen, &c2), 0, "%s", seqkv_error_detail());
    cr_assert_eq(memcmp(skv_calib_id(c), skv_calib_id(c2), 16), 0, "same content, same id");
    uint8_t *img2;
    size_t ilen2;
    cr_assert_eq(skv_calib_serialize(c2, &img2, &ilen2), 0);
    cr_assert(ilen2 == ilen && memcmp(img, img2, ilen) == 0, "written back unchanged");
    kvset t = {0};
    make_kv(m, 1, 32, 99, SEQKV_DT_BF16, &t);
    for (size_t i = 0; i < t.T[0]; i++)
        t.tok[0][i] = t.tok[0][i] * 10000000 + 3;
    for (int lv = SEQKV_STAT; lv <= SEQKV_CTX; lv++) {
        skv_streams e1 = {0}, e2 = {0};
        skv_delta *d1, *d2;
        cr_assert_eq(skv_delta_create(c, (seqkv_level)lv, NULL, NULL, &d1), 0);
        cr_assert_eq(skv_delta_create(c2, (seqkv_level)lv, NULL, NULL, &d2), 0);
        cr_assert_eq(skv_delta_encode(d1, t.tok[0], t.T[0], t.k[0], t.v[0], 16, &e1), 0, "%s", seqkv_error_detail());
        cr_assert_eq(skv_delta_encode(d2, t.tok[0], t.T[0], t.k[0], t.v[0], 16, &e2), 0);
        cr_assert(e1.len == e2.len && memcmp(e1.data, e2.data, e1.len) == 0, "the same coded bytes");
        cr_assert_lt(round_trip(c2, (seqkv_level)lv, m, &t, SEQKV_DT_BF16, 16), 16.0);
        skv_streams_free(&e1);
        skv_streams_free(&e2);
        skv_delta_free(d1);
        skv_delta_free(d2);
    }
    skv_st_free(cs);
    skv_free(img);
    skv_free(img2);
    skv_calib_free(c);
    skv_calib_free(c2);
    skv_st_free(st);
    free(buf);
    free_kv(&cal);
    free_kv(&t);
    skv_model_free(m);
}

/* stat learns atoms where values repeat exactly: layer 0's V is a function
 * of the token. They are saved (calibration version 3), reload with the
 * same id, and make stat's layer-0 V far cheaper than the mixture alone. */
Test(delta, stat_learns_atoms_for_token_determined_channels_and_saves_them)
{
    skv_model *m = random_model();
    kvset cal = {0}, t = {0};
    make_kv(m, 8, 48, 11, SEQKV_DT_BF16, &cal);
    make_kv(m, 2, 48, 12, SEQKV_DT_BF16, &t);
    uint8_t *buf;
    skv_st *st = as_file(m, &cal, SEQKV_DT_BF16, &buf);
    skv_calib *c, *c2;
    skv_calib_opts o = {.model = NULL, .max_fit_samples = 128, .quiet = 1};
    cr_assert_eq(skv_calib_learn(st, &o, &c), 0, "%s", seqkv_error_detail());
    uint8_t *img;
    size_t ilen;
    cr_assert_eq(skv_calib_serialize(c, &img, &ilen), 0);
    skv_st *cs;
    cr_assert_eq(skv_st_parse(img, ilen, &cs), 0);
    cr_assert_str_eq(skv_st_meta(cs, "seqkv.calib_version"), "3");
    const skv_tensor *av = skv_st_find(cs, "atoms.value"), *lam = skv_st_find(cs, "atoms.lambda");
    cr_assert_not_null(av);
    cr_assert_not_null(lam);
    const skv_model_config *mc = skv_model_cfg(m);
    size_t C = (size_t)mc->n_kv_heads * mc->head_dim, on_l0v = 0, on_other = 0;
    for (size_t i = 0; i < lam->nelem; i++)
        if (skv_load32_le(lam->data + 4 * i)) {
            if (i / C == 1)
                on_l0v++;
            else
                on_other++;
        }
    cr_assert_eq(on_l0v, C, "every channel of layer 0's V has atoms (%zu of %zu)", on_l0v, C);
    cr_assert_gt(av->nelem, 0);
    skv_st_free(cs);
    cr_assert_eq(skv_calib_parse(img, ilen, &c2), 0, "%s", seqkv_error_detail());
    cr_assert_eq(memcmp(skv_calib_id(c), skv_calib_id(c2), 16), 0, "same content, same id");
    /* streams coded with one decode with the other; layer 0's V is cheap */
    skv_delta *d1, *d2;
    cr_assert_eq(skv_delta_create(c, SEQKV_STAT, NULL, NULL, &d1), 0);
    cr_assert_eq(skv_delta_create(c2, SEQKV_STAT, NULL, NULL, &d2), 0);
    size_t per = skv_model_kv_per_token(m) / 2 * 2;
    for (size_t i = 0; i < t.n; i++) {
        skv_streams s = {0};
        cr_assert_eq(skv_delta_encode(d1, t.tok[i], t.T[i], t.k[i], t.v[i], 16, &s), 0);
        uint8_t *k = malloc(t.T[i] * per), *v = malloc(t.T[i] * per);
        cr_assert_eq(skv_delta_decode(d2, t.tok[i], t.T[i], &s, 0, 16, k, v), 0, "%s", seqkv_error_detail());
        cr_assert_eq(memcmp(k, t.k[i], t.T[i] * per), 0);
        cr_assert_eq(memcmp(v, t.v[i], t.T[i] * per), 0);
        free(k);
        free(v);
        skv_streams_free(&s);
    }
    const double *ideal, *bytes;
    const uint64_t *nsc;
    skv_delta_costs(d1, &ideal, &bytes, &nsc);
    double l0v = ideal[1] / (double)nsc[1], l1v = ideal[3] / (double)nsc[3];
    cr_assert_lt(l0v, 0.75 * l1v, "layer 0 V %.2f bits/scalar, layer 1 V %.2f", l0v, l1v);
    skv_delta_free(d1);
    skv_delta_free(d2);
    skv_free(img);
    skv_calib_free(c);
    skv_calib_free(c2);
    skv_st_free(st);
    free(buf);
    free_kv(&cal);
    free_kv(&t);
    skv_model_free(m);
}

/* stat and ctx write stream version 2 by default for bf16 (on any CPU:
 * the version is the profile's, not the machine's), stat with sixteen
 * states and ctx with eight;
 * either version set by hand round-trips, and a coder decodes the other
 * version's streams; on real KV when ../shared has the model */
static void versions_case(const skv_model *m, size_t ncal, size_t T)
{
    const seqkv_dtype dt = SEQKV_DT_BF16;
    kvset test = {0};
    skv_calib *c = learned(m, dt, ncal, 2, T, 1100, &test);
    size_t per = skv_model_kv_per_token(m) / 2 * skv_dtype_size(dt);
    for (int lvl = SEQKV_STAT; lvl <= SEQKV_CTX; lvl++) {
        skv_delta *d;
        cr_assert_eq(skv_delta_create(c, (seqkv_level)lvl, NULL, NULL, &d), 0, "%s", seqkv_error_detail());
        cr_expect_eq(skv_delta_stream_version(d), 2, "%s", seqkv_level_name((seqkv_level)lvl));
        skv_streams s[2] = {{0}, {0}};
        for (int ver = 1; ver <= 2; ver++) {
            cr_assert_eq(skv_delta_set_stream_version(d, ver), 0, "%s", seqkv_error_detail());
            cr_assert_eq(skv_delta_encode(d, test.tok[0], test.T[0], test.k[0], test.v[0], 64, &s[ver - 1]), 0,
                         "%s", seqkv_error_detail());
            skv_stream_info info;
            cr_assert_eq(skv_stream_info_read(s[ver - 1].data, s[ver - 1].len, &info), 0);
            cr_expect_eq(info.version, (uint32_t)ver);
            cr_expect_eq(info.states, ver == 1 ? 4u : lvl == SEQKV_STAT ? 16u : 8u, "%s version %d",
                         seqkv_level_name((seqkv_level)lvl), ver);
        }
        /* each decoded by a coder set to the other version */
        for (int ver = 1; ver <= 2; ver++) {
            cr_assert_eq(skv_delta_set_stream_version(d, 3 - ver), 0);
            uint8_t *k = malloc(test.T[0] * per), *v = malloc(test.T[0] * per);
            cr_assert_eq(skv_delta_decode(d, test.tok[0], test.T[0], &s[ver - 1], 0, 64, k, v), 0, "%s version %d: %s",
                         seqkv_level_name((seqkv_level)lvl), ver, seqkv_error_detail());
            cr_expect(memcmp(k, test.k[0], test.T[0] * per) == 0 && memcmp(v, test.v[0], test.T[0] * per) == 0,
                      "%s version %d: not bit-exact", seqkv_level_name((seqkv_level)lvl), ver);
            free(k);
            free(v);
        }
        cr_expect_eq(skv_delta_set_stream_version(d, 3), SKV_ERR_ARG);
        skv_streams_free(&s[0]);
        skv_streams_free(&s[1]);
        skv_delta_free(d);
    }
    skv_calib_free(c);
    free_kv(&test);
}

Test(delta, stat_and_ctx_stream_versions)
{
    skv_model *m = random_model();
    versions_case(m, 6, 96);
    skv_model_free(m);
    const char *p = tu_shared_model("stories260K.bin");
    if (!p) {
        cr_log_info("../shared/models/stories260K.bin not present: versions checked on a random model only");
        return;
    }
    cr_assert_eq(skv_model_load(p, &m), 0);
    versions_case(m, 8, 128);
    skv_model_free(m);
}

/* The calibration sample: positions shared out as evenly as the lengths
 * allow over the first P / SKV_CALIB_WINDOW_MIN sequences, windows inside
 * their sequences placed by the hash, a prefix window at 0; every position
 * learned from is the learning on everything; a window short of its
 * sequence learns another calibration, which codes losslessly; a sequence
 * shorter than its window is refused. */
Test(delta, a_sample_takes_windows_of_its_sequences)
{
    const skv_kvshape sh = {2, 2, 4, 0, SEQKV_DT_BF16, 0, 0, SKV_ROPE_PAIR};
    const size_t T[3] = {10, 100, 1000};
    const uint64_t h[3] = {5, 77, 123456789};
    skv_calib_sample *s;
    cr_assert_eq(SKV_CALIB_WINDOW_MIN, 128);
    /* 512 positions, from up to 4 sequences: 10 and 100 whole (from 0), the
     * 402 left a window of the third */
    cr_assert_eq(skv_calib_sample_create(&sh, 3, T, h, 512, 0, &s), 0, "%s", seqkv_error_detail());
    cr_assert_eq(skv_calib_sample_end(s, 0), 10);
    cr_assert_eq(skv_calib_sample_end(s, 1), 100);
    cr_assert_eq(skv_calib_sample_end(s, 2), 1 + 123456789 % (1000 - 402) + 402);
    skv_calib_sample_free(s);
    cr_assert_eq(skv_calib_sample_create(&sh, 3, T, h, 512, 1, &s), 0);
    cr_assert_eq(skv_calib_sample_end(s, 2), 402, "a prefix window");
    skv_calib_sample_free(s);
    /* 300 positions: windows of 128 at least, so the first 2 sequences
     * only: the 100 whole, a window of 200 of the 1000 */
    const size_t T2[3] = {1000, 100, 10};
    cr_assert_eq(skv_calib_sample_create(&sh, 3, T2, h, 300, 0, &s), 0);
    cr_assert_eq(skv_calib_sample_end(s, 0), 1 + 5 % (1000 - 200) + 200);
    cr_assert_eq(skv_calib_sample_end(s, 1), 100);
    cr_assert_eq(skv_calib_sample_end(s, 2), 0, "not in the sample");
    skv_calib_sample_free(s);

    skv_model *m = random_model();
    kvset cal = {0};
    make_kv(m, 4, 32, 7, SEQKV_DT_BF16, &cal);
    uint8_t *buf;
    skv_st *st = as_file(m, &cal, SEQKV_DT_BF16, &buf);
    skv_calib *all, *dflt, *part;
    skv_calib_opts o = {.max_fit_samples = 128, .quiet = 1, .sample_positions = SIZE_MAX};
    cr_assert_eq(skv_calib_learn(st, &o, &all), 0, "%s", seqkv_error_detail());
    o.sample_positions = 0; /* 128 positions: under the default's */
    cr_assert_eq(skv_calib_learn(st, &o, &dflt), 0);
    cr_assert_eq(memcmp(skv_calib_id(all), skv_calib_id(dflt), 16), 0, "all of it either way");
    o.sample_positions = 20; /* a window of the first sequence */
    cr_assert_eq(skv_calib_learn(st, &o, &part), 0, "%s", seqkv_error_detail());
    cr_assert_neq(memcmp(skv_calib_id(all), skv_calib_id(part), 16), 0);
    kvset t = {0};
    make_kv(m, 1, 32, 99, SEQKV_DT_BF16, &t);
    cr_assert_lt(round_trip(part, SEQKV_CTX, m, &t, SEQKV_DT_BF16, 16), 16.0);

    /* a sequence handed over shorter than its window */
    size_t T1[1] = {32};
    uint64_t h1[1] = {9};
    cr_assert_eq(skv_calib_sample_create(&sh, 1, T1, h1, 8, 0, &s), 0);
    int32_t tok[8] = {0};
    uint8_t kv[2 * 8 * 8 * 2] = {0};
    skv_kvseq q = {8, tok, SEQKV_DT_BF16, 2, 2, 4, kv, kv};
    cr_assert_eq(skv_calib_sample_add(s, 0, &q), SKV_ERR_SHAPE);
    skv_calib_sample_free(s);
    skv_calib_free(all);
    skv_calib_free(dflt);
    skv_calib_free(part);
    skv_st_free(st);
    free(buf);
    free_kv(&cal);
    free_kv(&t);
    skv_model_free(m);
}
