/* The model engine on stories260K (when ../shared is present) and on seeded
 * random models: reference outputs, prefill vs incremental, determinism
 * across runs and thread counts, quantized predictors, sampling, errors. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "randmodel.h"
#include "skv_model.h"
#include "testutil.h"

static skv_model *load_stories(void)
{
    const char *p = tu_shared_model("stories260K.bin");
    if (!p)
        return NULL;
    skv_model *m = NULL;
    int rc = skv_model_load(p, &m);
    cr_assert_eq(rc, 0, "load %s: %s", p, seqkv_error_detail());
    return m;
}

/* stories260K, or the test skipped when ../shared/models lacks it */
static skv_model *need_stories(void)
{
    skv_model *m = load_stories();
    if (!m)
        cr_skip("../shared/models/stories260K.bin not present");
    return m;
}

static skv_model *random_model(uint64_t seed, int tied)
{
    rm_shape s = {0, 48, 96, 3, 6, 2, 8, 97, 128, tied, 10000.0f, 1e-5f};
    size_t len;
    uint8_t *img = rm_llama2c(&s, seed, &len);
    skv_model *m = NULL;
    cr_assert_eq(skv_model_load_llama2c_mem(img, len, &m), 0, "%s", seqkv_error_detail());
    free(img);
    return m;
}

/* T tokens: BOS then a deterministic pseudo-random walk over the vocabulary. */
static int32_t *some_tokens(const skv_model *m, size_t T, uint64_t seed)
{
    int32_t *t = malloc(T * sizeof *t);
    skv_rng r;
    skv_rng_seed(&r, seed);
    t[0] = skv_model_cfg(m)->bos_id;
    for (size_t i = 1; i < T; i++)
        t[i] = (int32_t)(skv_rng_next(&r) % (uint64_t)skv_model_cfg(m)->vocab_size);
    return t;
}

/* Prefill tokens and export the KV (dtype) into fresh buffers. */
static void kv_of(const skv_model *m, skv_pool *pool, const int32_t *tok, size_t T, seqkv_dtype dt,
                  uint8_t **k, uint8_t **v, float *logits)
{
    skv_kvcache *c;
    cr_assert_eq(skv_kvcache_create(skv_model_cfg(m), T, &c), 0);
    skv_forward_opts o = {.pool = pool, .logits = logits};
    cr_assert_eq(skv_model_forward(m, c, tok, T, &o), 0, "%s", seqkv_error_detail());
    size_t n = T * skv_model_kv_per_token(m) / 2 * skv_dtype_size(dt);
    *k = malloc(n);
    *v = malloc(n);
    cr_assert_eq(skv_kvcache_export(c, 0, T, dt, *k, *v), 0);
    skv_kvcache_free(c);
}

Test(stories, greedy_matches_llama2c_reference)
{
    skv_model *m = need_stories();
    size_t len;
    uint8_t *ref = tu_read(tu_shared_model("stories260K.greedy.txt"), &len);
    cr_assert_not_null(ref);
    int32_t want[256];
    int n = 0;
    char *p = (char *)ref, *end;
    ref[len - 1] = 0;
    while (n < 256 && (want[n] = (int32_t)strtol(p, &end, 10), end != p)) {
        n++;
        p = end;
    }
    cr_assert_eq(n, 256);
    int32_t bos = 1, out[257];
    skv_rng rng;
    skv_rng_seed(&rng, 0);
    cr_assert_eq(skv_model_generate(m, NULL, &bos, 1, 257, 0.0f, 1.0f, &rng, out), 0);
    for (int i = 0; i < 256; i++)
        cr_assert_eq(out[i + 1], want[i], "greedy id %d: %d != %d", i, out[i + 1], want[i]);
    free(ref);
    skv_model_free(m);
}

Test(stories, logits_of_first_8_positions_match_reference)
{
    skv_model *m = need_stories();
    size_t len;
    char *ref = (char *)tu_read(tu_shared_model("stories260K.logits8.txt"), &len);
    uint8_t *greedy = tu_read(tu_shared_model("stories260K.greedy.txt"), NULL);
    cr_assert(ref && greedy);
    int32_t tok[8] = {1};
    char *p = (char *)greedy, *end;
    for (int i = 1; i < 8; i++) {
        tok[i] = (int32_t)strtol(p, &end, 10);
        p = end;
    }
    float *lg = malloc(8 * 512 * sizeof *lg);
    skv_kvcache *c;
    cr_assert_eq(skv_kvcache_create(skv_model_cfg(m), 8, &c), 0);
    skv_forward_opts o = {.logits = lg};
    cr_assert_eq(skv_model_forward(m, c, tok, 8, &o), 0);
    p = ref;
    double worst = 0;
    for (int i = 0; i < 8 * 512; i++) {
        double want = strtod(p, &end);
        cr_assert_neq(end, p, "reference ends early at %d", i);
        p = end;
        double diff = fabs(want - (double)lg[i]);
        if (diff > worst)
            worst = diff;
    }
    cr_assert_leq(worst, 1e-4, "max |logit - reference| = %g", worst);
    skv_kvcache_free(c);
    free(lg);
    free(ref);
    free(greedy);
    skv_model_free(m);
}

/* Prefill of T tokens vs one-token steps: K, V and logits bit-identical
 * (the contract is stronger than the 1e-5 asked of it). */
static void check_prefill_vs_steps(const skv_model *m, size_t T)
{
    const skv_model_config *cfg = skv_model_cfg(m);
    int32_t *tok = some_tokens(m, T, 5);
    skv_kvcache *a, *b;
    cr_assert_eq(skv_kvcache_create(cfg, T, &a), 0);
    cr_assert_eq(skv_kvcache_create(cfg, T, &b), 0);
    float *la = malloc(T * cfg->vocab_size * sizeof *la), *lb = malloc(cfg->vocab_size * sizeof *lb);
    skv_forward_opts oa = {.logits = la};
    cr_assert_eq(skv_model_forward(m, a, tok, T, &oa), 0);
    skv_forward_opts ob = {.logits = lb};
    double worst = 0;
    for (size_t t = 0; t < T; t++) {
        cr_assert_eq(skv_model_forward(m, b, tok + t, 1, &ob), 0);
        for (int j = 0; j < cfg->vocab_size; j++)
            cr_assert_eq(skv_f32_bits(la[t * cfg->vocab_size + j]), skv_f32_bits(lb[j]),
                         "logit %zu,%d", t, j);
    }
    const size_t row = (size_t)cfg->n_kv_heads * cfg->head_dim;
    for (int l = 0; l < cfg->n_layers; l++)
        for (size_t t = 0; t < T; t++)
            for (size_t j = 0; j < row; j++) {
                float ka = skv_kvcache_k(a, l, t)[j], kb = skv_kvcache_k(b, l, t)[j];
                float va = skv_kvcache_v(a, l, t)[j], vb = skv_kvcache_v(b, l, t)[j];
                worst = fmax(worst, fmax(fabs((double)ka - kb), fabs((double)va - vb)));
                cr_assert_eq(skv_f32_bits(ka), skv_f32_bits(kb), "K l%d t%zu j%zu", l, t, j);
                cr_assert_eq(skv_f32_bits(va), skv_f32_bits(vb), "V l%d t%zu j%zu", l, t, j);
            }
    cr_assert_leq(worst, 1e-5);
    skv_kvcache_free(a);
    skv_kvcache_free(b);
    free(la);
    free(lb);
    free(tok);
}

Test(stories, prefill_kv_equals_incremental_kv)
{
    skv_model *m = need_stories();
    check_prefill_vs_steps(m, 200);
    skv_model_free(m);
}

Test(engine, prefill_kv_equals_incremental_kv_on_random_model)
{
    skv_model *m = random_model(1, 1);
    check_prefill_vs_steps(m, 70);
    skv_model_free(m);
    m = random_model(2, 0);
    check_prefill_vs_steps(m, 33);
    skv_model_free(m);
}

static void check_determinism(const skv_model *m, size_t T)
{
    int32_t *tok = some_tokens(m, T, 9);
    skv_pool *p1, *p2, *p3;
    cr_assert_eq(skv_pool_create(&p1, 1), 0);
    cr_assert_eq(skv_pool_create(&p2, 2), 0);
    cr_assert_eq(skv_pool_create(&p3, 3), 0);
    uint8_t *k[4], *v[4];
    kv_of(m, p1, tok, T, SEQKV_DT_BF16, &k[0], &v[0], NULL);
    kv_of(m, p1, tok, T, SEQKV_DT_BF16, &k[1], &v[1], NULL);
    kv_of(m, p2, tok, T, SEQKV_DT_BF16, &k[2], &v[2], NULL);
    kv_of(m, p3, tok, T, SEQKV_DT_BF16, &k[3], &v[3], NULL);
    size_t n = T * skv_model_kv_per_token(m) / 2 * 2;
    for (int i = 1; i < 4; i++) {
        cr_assert_eq(memcmp(k[0], k[i], n), 0, "K of run %d differs", i);
        cr_assert_eq(memcmp(v[0], v[i], n), 0, "V of run %d differs", i);
    }
    for (int i = 0; i < 4; i++) {
        free(k[i]);
        free(v[i]);
    }
    skv_pool_free(p1);
    skv_pool_free(p2);
    skv_pool_free(p3);
    free(tok);
}

Test(stories, bf16_kv_identical_across_runs_and_thread_counts)
{
    skv_model *m = need_stories();
    check_determinism(m, 256);
    skv_model_free(m);
}

Test(engine, bf16_kv_identical_across_runs_and_thread_counts_on_random_model)
{
    skv_model *m = random_model(3, 1);
    check_determinism(m, 100);
    skv_model_free(m);
}

/* Mean |a - b| over the float KV of two prefills, relative to mean |b|. */
static double kv_rel_err(const float *a, const float *b, size_t n)
{
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        e += fabs((double)a[i] - b[i]);
        s += fabs((double)b[i]);
    }
    return e / s;
}

typedef struct {
    const float *exact_k, *exact_v; /* [layer][T][row] */
    size_t T, row;
    int calls;
    int *layers_seen;
    float *pred_k;                  /* [layer][T][row]: what the model predicted */
} exact_hook_ctx;

static void exact_hook(void *vctx, int layer, size_t pos0, size_t n, float *k, float *v)
{
    exact_hook_ctx *c = vctx;
    c->calls++;
    c->layers_seen[layer]++;
    size_t off = ((size_t)layer * c->T + pos0) * c->row;
    memcpy(c->pred_k + off, k, n * c->row * sizeof *k);
    memcpy(k, c->exact_k + off, n * c->row * sizeof *k);
    memcpy(v, c->exact_v + off, n * c->row * sizeof *v);
}

/* The int8 and fp8 copies as predictors of the float32 engine's KV: alone,
 * attending over an exact prefix, and with the exact KV substituted layer
 * by layer through the hook (what a decoder does). */
static void check_quantized(const skv_model *m, size_t T, double max_int8_err)
{
    const skv_model_config *cfg = skv_model_cfg(m);
    const size_t row = (size_t)cfg->n_kv_heads * cfg->head_dim, n = (size_t)cfg->n_layers * T * row;
    int32_t *tok = some_tokens(m, T, 21);
    uint8_t *ek, *ev;
    kv_of(m, NULL, tok, T, SEQKV_DT_F32, &ek, &ev, NULL);
    const float *exact_k = (const float *)ek, *exact_v = (const float *)ev;
    double err[3];
    for (int q = 1; q <= 2; q++) {
        skv_model *qm;
        cr_assert_eq(skv_model_quantize(m, (skv_wquant)q, &qm), 0);
        cr_assert_lt(skv_model_weight_bytes(qm), skv_model_weight_bytes(m) / 2);
        cr_assert_str_neq(skv_model_fingerprint(qm), skv_model_fingerprint(m));
        uint8_t *qk, *qv;
        kv_of(qm, NULL, tok, T, SEQKV_DT_F32, &qk, &qv, NULL);
        err[q] = kv_rel_err((float *)qk, exact_k, n);
        cr_assert_gt(err[q], 0.0, "a quantized copy is not exact");
        free(qk);
        free(qv);
        skv_model_free(qm);
    }
    cr_assert_lt(err[1], max_int8_err, "int8 KV relative error %g", err[1]);
    cr_assert_lt(err[1], err[2], "int8 (%g) predicts better than fp8 (%g)", err[1], err[2]);

    skv_model *q8;
    cr_assert_eq(skv_model_quantize(m, SKV_WQ_INT8, &q8), 0);
    /* 1) attend over the exact KV of the first half */
    const size_t P = T / 2;
    skv_kvcache *c;
    cr_assert_eq(skv_kvcache_create(cfg, T, &c), 0);
    float *pk = malloc(n * sizeof *pk), *pv = malloc(n * sizeof *pv);
    for (int l = 0; l < cfg->n_layers; l++) {
        memcpy(pk + (size_t)l * P * row, exact_k + (size_t)l * T * row, P * row * sizeof *pk);
        memcpy(pv + (size_t)l * P * row, exact_v + (size_t)l * T * row, P * row * sizeof *pv);
    }
    cr_assert_eq(skv_kvcache_append(c, SEQKV_DT_F32, pk, pv, P), 0);
    cr_assert_eq(skv_kvcache_len(c), P);
    cr_assert_eq(skv_model_forward(q8, c, tok + P, T - P, NULL), 0);
    double e_prefix = 0, e_alone = 0, s = 0;
    uint8_t *ak, *av;
    kv_of(q8, NULL, tok, T, SEQKV_DT_F32, &ak, &av, NULL);
    for (int l = 0; l < cfg->n_layers; l++)
        for (size_t t = P; t < T; t++)
            for (size_t j = 0; j < row; j++) {
                double x = exact_k[((size_t)l * T + t) * row + j];
                e_prefix += fabs(skv_kvcache_k(c, l, t)[j] - x);
                e_alone += fabs(((float *)ak)[((size_t)l * T + t) * row + j] - x);
                s += fabs(x);
            }
    cr_assert_lt(e_prefix, e_alone, "exact prefix helps: %g vs %g", e_prefix / s, e_alone / s);
    /* 2) exact KV substituted through the hook, all layers */
    int seen[64] = {0};
    exact_hook_ctx hc = {exact_k, exact_v, T, row, 0, seen, pk};
    skv_kvcache_truncate(c, 0);
    skv_forward_opts o = {.hook = exact_hook, .hook_ctx = &hc};
    cr_assert_eq(skv_model_forward(q8, c, tok, T, &o), 0);
    cr_assert_eq(hc.calls, cfg->n_layers);
    for (int l = 0; l < cfg->n_layers; l++)
        cr_assert_eq(seen[l], 1);
    double e_hook = 0;
    for (int l = 0; l < cfg->n_layers; l++)
        for (size_t t = P; t < T; t++)
            for (size_t j = 0; j < row; j++)
                e_hook += fabs(pk[((size_t)l * T + t) * row + j] -
                               exact_k[((size_t)l * T + t) * row + j]);
    cr_assert_lt(e_hook, e_prefix, "exact KV of every layer helps more: %g vs %g", e_hook / s,
                 e_prefix / s);
    /* the cache holds what the hook left: the exact values */
    cr_assert_eq(memcmp(skv_kvcache_k(c, cfg->n_layers - 1, 0),
                        exact_k + (size_t)(cfg->n_layers - 1) * T * row, T * row * sizeof(float)),
                 0);
    free(ak);
    free(av);
    free(pk);
    free(pv);
    skv_kvcache_free(c);
    skv_model_free(q8);
    free(ek);
    free(ev);
    free(tok);
}

Test(stories, quantized_copies_predict_kv_and_attend_over_exact_prefix)
{
    skv_model *m = need_stories();
    check_quantized(m, 128, 0.05);
    skv_model_free(m);
}

Test(engine, quantized_copies_on_random_model)
{
    skv_model *m = random_model(4, 1);
    check_quantized(m, 64, 0.05);
    skv_model_free(m);
}

Test(engine, rejects_bad_calls_without_touching_the_cache)
{
    skv_model *m = random_model(5, 1);
    skv_kvcache *c;
    cr_assert_eq(skv_kvcache_create(skv_model_cfg(m), 4, &c), 0);
    int32_t bad[2] = {1, 97};
    cr_assert_eq(skv_model_forward(m, c, bad, 2, NULL), SKV_ERR_ARG);
    cr_assert(strstr(seqkv_error_detail(), "97") != NULL);
    int32_t neg = -1;
    cr_assert_eq(skv_model_forward(m, c, &neg, 1, NULL), SKV_ERR_ARG);
    cr_assert_eq(skv_model_forward(m, c, bad, 0, NULL), SKV_ERR_ARG);
    int32_t five[5] = {1, 2, 3, 4, 5};
    cr_assert_eq(skv_model_forward(m, c, five, 5, NULL), SKV_ERR_TOO_LARGE);
    cr_assert_eq(skv_kvcache_len(c), 0);
    cr_assert_eq(skv_model_forward(m, c, five, 4, NULL), 0);
    cr_assert_eq(skv_kvcache_len(c), 4);
    cr_assert_eq(skv_model_forward(m, c, five, 1, NULL), SKV_ERR_TOO_LARGE);
    cr_assert_eq(skv_kvcache_truncate(c, 5), SKV_ERR_ARG);
    uint8_t out[4 * 4 * 3 * 2 * 8];
    cr_assert_eq(skv_kvcache_export(c, 2, 3, SEQKV_DT_BF16, out, out), SKV_ERR_ARG);
    cr_assert_eq(skv_kvcache_export(c, 0, 1, SEQKV_DT_I32, out, out), SKV_ERR_ARG);
    skv_kvcache_free(c);
    skv_model_free(m);
}

Test(loader, rejects_malformed_llama2c_checkpoints)
{
    rm_shape s = {0, 16, 32, 2, 4, 2, 4, 11, 8, 1, 10000.0f, 1e-5f};
    size_t len;
    uint8_t *img = rm_llama2c(&s, 7, &len);
    skv_model *m = NULL;
    cr_assert_eq(skv_model_load_llama2c_mem(img, len, &m), 0);
    skv_model_free(m);
    cr_assert_eq(skv_model_load_llama2c_mem(img, 27, &m), SKV_ERR_FORMAT);
    cr_assert_eq(skv_model_load_llama2c_mem(img, len - 4, &m), SKV_ERR_SHAPE, "truncated");
    cr_assert_null(m);
    uint8_t *bad = malloc(len + 4);
    memcpy(bad, img, len);
    cr_assert_eq(skv_model_load_llama2c_mem(bad, len + 4, &m), SKV_ERR_SHAPE, "trailing bytes");
    skv_store32_le(bad + 12, 3); /* 3 heads do not divide dim 16 */
    cr_assert_eq(skv_model_load_llama2c_mem(bad, len, &m), SKV_ERR_FORMAT);
    memcpy(bad, img, 28);
    skv_store32_le(bad + 16, 3); /* kv heads must divide heads */
    cr_assert_eq(skv_model_load_llama2c_mem(bad, len, &m), SKV_ERR_FORMAT);
    memcpy(bad, img, 28);
    skv_store32_le(bad + 8, 0x7fffffff); /* absurd layer count */
    cr_assert_eq(skv_model_load_llama2c_mem(bad, len, &m), SKV_ERR_FORMAT);
    free(bad);
    /* every allocation failure is reported, never a crash or a leak */
    for (long k = 0;; k++) {
        skv_alloc_fail_after(k, 0);
        int rc = skv_model_load_llama2c_mem(img, len, &m);
        skv_alloc_fail_after(-1, 0);
        if (rc == 0) {
            skv_model_free(m);
            cr_assert_gt(k, 5);
            break;
        }
        cr_assert_eq(rc, SKV_ERR_NOMEM, "allocation %ld: %s", k, seqkv_strerror(rc));
        cr_assert_null(m);
    }
    free(img);
    cr_assert_eq(skv_model_load("/nonexistent/model.bin", &m), SKV_ERR_IO);
}

Test(sampling, seeded_and_consistent)
{
    skv_model *m = random_model(6, 1);
    int32_t bos = 1, a[40], b[40], c[40];
    skv_rng r;
    skv_rng_seed(&r, 77);
    cr_assert_eq(skv_model_generate(m, NULL, &bos, 1, 40, 1.0f, 0.9f, &r, a), 0);
    skv_rng_seed(&r, 77);
    cr_assert_eq(skv_model_generate(m, NULL, &bos, 1, 40, 1.0f, 0.9f, &r, b), 0);
    cr_assert_eq(memcmp(a, b, sizeof a), 0, "same seed, same tokens");
    skv_rng_seed(&r, 78);
    cr_assert_eq(skv_model_generate(m, NULL, &bos, 1, 40, 1.0f, 0.9f, &r, c), 0);
    cr_assert_neq(memcmp(a, c, sizeof a), 0, "another seed, other tokens");
    cr_assert_eq(a[0], 1);
    /* top_p -> 0 keeps only the most probable token: greedy */
    skv_rng_seed(&r, 1);
    cr_assert_eq(skv_model_generate(m, NULL, &bos, 1, 40, 1.0f, 1e-6f, &r, b), 0);
    cr_assert_eq(skv_model_generate(m, NULL, &bos, 1, 40, 0.0f, 1.0f, &r, c), 0);
    cr_assert_eq(memcmp(b, c, sizeof b), 0);
    skv_model_free(m);
}

Test(sampling, frequencies_follow_the_truncated_distribution)
{
    /* logits for probabilities 0.5, 0.3, 0.15, 0.05 */
    float lg[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    int count[4] = {0};
    skv_rng r;
    skv_rng_seed(&r, 5);
    for (int i = 0; i < 40000; i++)
        count[skv_sample_top_p(lg, 4, 1.0f, 0.9f, &r, NULL)]++;
    /* top_p 0.9 keeps {0.5, 0.3, 0.15} (mass 0.95), renormalised */
    cr_assert_eq(count[3], 0);
    cr_assert(fabs(count[0] / 40000.0 - 0.5 / 0.95) < 0.015, "p0 %f", count[0] / 40000.0);
    cr_assert(fabs(count[1] / 40000.0 - 0.3 / 0.95) < 0.015, "p1 %f", count[1] / 40000.0);
    cr_assert_eq(skv_sample_argmax(lg, 4), 0);
    float tie[3] = {2.0f, 5.0f, 5.0f};
    cr_assert_eq(skv_sample_argmax(tie, 3), 1, "ties go to the lower id");
}

Test(mathx, deterministic_functions_are_accurate)
{
    double worst_e = 0, worst_l = 0, worst_s = 0, worst_f = 0;
    for (double x = -700; x < 700; x += 0.0137) {
        worst_e = fmax(worst_e, fabs(skv_exp(x) / exp(x) - 1));
        double s, c;
        skv_sincos(x * 10, &s, &c);
        worst_s = fmax(worst_s, fmax(fabs(s - sin(x * 10)), fabs(c - cos(x * 10))));
    }
    for (double x = 1e-300; x < 1e300; x *= 1.37)
        worst_l = fmax(worst_l, fabs(skv_log(x) - log(x)) / fmax(1.0, fabs(log(x))));
    for (float x = -100.0f; x < 88.0f; x += 0.00731f) {
        double ref = exp((double)x);
        double ulp = ldexp(1.0, ilogb(ref) - 23);
        if (ref > 1.2e-38)
            worst_f = fmax(worst_f, fabs((double)skv_expf(x) - ref) / ulp);
    }
    cr_assert_lt(worst_e, 1e-14, "exp rel err %g", worst_e);
    cr_assert_lt(worst_l, 1e-15, "log err %g", worst_l);
    cr_assert_lt(worst_s, 1e-12, "sin/cos err %g", worst_s);
    cr_assert_lt(worst_f, 2.0, "expf err %g ulp", worst_f);
    cr_assert_eq(skv_expf(-200.0f), 0.0f);
    cr_assert(isinf(skv_expf(100.0f)));
    cr_assert(isnan(skv_expf(NAN)));
    float lg[5] = {1, 2, 3, 4, 5}, lp[5];
    skv_log_softmax(lp, lg, 1, 5);
    double sum = 0;
    for (int i = 0; i < 5; i++)
        sum += exp(lp[i]);
    cr_assert(fabs(sum - 1) < 1e-6);
}
