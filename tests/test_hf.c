/* Hugging Face checkpoints: llama / qwen2 / qwen3 models with seeded
 * random weights written by the test, checked against a plain double-
 * precision reference; weight dtypes; shards; conversion of llama2.c
 * checkpoints (stories260K when present); malformed checkpoints. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "randmodel.h"
#include "skv_model.h"
#include "testutil.h"

static skv_model *load(const char *dir)
{
    skv_model *m = NULL;
    int rc = skv_model_load(dir, &m);
    cr_assert_eq(rc, 0, "load %s: %s (%s)", dir, seqkv_strerror(rc), seqkv_error_detail());
    return m;
}

static int32_t toks[24] = {1, 5, 9, 2, 33, 7, 7, 7, 12, 40, 3, 0, 18, 22, 9, 1, 5, 30, 31, 2, 6, 44, 10, 11};

/* Engine vs reference: logits, K and V within tol (absolute, values O(1)). */
static void check_against_reference(const rm_hf *r, skv_model *m, int n, double tol)
{
    const rm_shape *s = &r->s;
    const size_t kvd = (size_t)s->kv_heads * s->head_dim, kvn = (size_t)s->layers * n * kvd;
    float *rl = malloc((size_t)n * s->vocab * sizeof *rl), *rk = malloc(kvn * 4), *rv = malloc(kvn * 4);
    rm_hf_reference(r, toks, n, rl, rk, rv);
    float *ml = malloc((size_t)n * s->vocab * sizeof *ml), *mk = malloc(kvn * 4), *mv = malloc(kvn * 4);
    skv_kvcache *c;
    cr_assert_eq(skv_kvcache_create(skv_model_cfg(m), (size_t)n, &c), 0);
    skv_forward_opts o = {.logits = ml};
    cr_assert_eq(skv_model_forward(m, c, toks, (size_t)n, &o), 0, "%s", seqkv_error_detail());
    cr_assert_eq(skv_kvcache_export(c, 0, (size_t)n, SEQKV_DT_F32, mk, mv), 0);
    double wl = 0, wk = 0, wv = 0, scale = 0;
    for (size_t i = 0; i < (size_t)n * s->vocab; i++) {
        wl = fmax(wl, fabs((double)rl[i] - ml[i]));
        scale = fmax(scale, fabs((double)rl[i]));
    }
    for (size_t i = 0; i < kvn; i++) {
        wk = fmax(wk, fabs((double)rk[i] - mk[i]));
        wv = fmax(wv, fabs((double)rv[i] - mv[i]));
    }
    cr_assert_gt(scale, 0.5, "logits are not trivial");
    cr_assert_leq(wl, tol, "logits differ by %g", wl);
    cr_assert_leq(wk, tol, "K differs by %g", wk);
    cr_assert_leq(wv, tol, "V differs by %g", wv);
    skv_kvcache_free(c);
    free(rl); free(rk); free(rv); free(ml); free(mk); free(mv);
}

static void arch_case(int arch, int tied, int head_dim, seqkv_dtype dt, int shards)
{
    rm_shape s = {arch, 32, 64, 2, 4, 2, head_dim, 50, 64, tied, 10000.0f, 1e-6f};
    rm_hf *r = rm_hf_new(&s, 100 + (uint64_t)arch);
    const char *dir = tu_tmpdir();
    cr_assert_eq(rm_hf_write(r, dir, dt, shards), 0, "%s", seqkv_error_detail());
    skv_model *m = load(dir);
    const skv_model_config *c = skv_model_cfg(m);
    cr_assert_eq((int)c->arch, arch);
    cr_assert_eq(c->head_dim, head_dim);
    cr_assert_eq(c->rope_layout, SKV_ROPE_HALF);
    cr_assert_eq(c->qkv_bias, arch == 1);
    cr_assert_eq(c->qk_norm, arch == 2);
    cr_assert_eq(c->tied_embeddings, tied);
    check_against_reference(r, m, 24, 2e-4);
    skv_model_free(m);
    rm_hf_free(r);
}

Test(hf, llama_matches_reference) { arch_case(0, 0, 8, SEQKV_DT_F32, 0); }
Test(hf, llama_tied_bf16_weights_match_reference) { arch_case(0, 1, 8, SEQKV_DT_BF16, 0); }
Test(hf, qwen2_with_qkv_bias_matches_reference) { arch_case(1, 1, 8, SEQKV_DT_F32, 0); }
Test(hf, qwen3_with_qk_norm_and_explicit_head_dim_matches_reference) { arch_case(2, 0, 12, SEQKV_DT_F16, 0); }
Test(hf, sharded_checkpoint_matches_reference) { arch_case(2, 1, 16, SEQKV_DT_BF16, 2); }

Test(hf, weight_dtypes_load_to_identical_models)
{
    rm_shape s = {2, 32, 64, 2, 4, 2, 8, 50, 64, 0, 10000.0f, 1e-6f};
    rm_hf *r = rm_hf_new(&s, 9);
    char fp[3][33];
    seqkv_dtype dts[3] = {SEQKV_DT_F32, SEQKV_DT_BF16, SEQKV_DT_F16};
    for (int i = 0; i < 3; i++) {
        const char *dir = tu_tmpdir();
        cr_assert_eq(rm_hf_write(r, dir, dts[i], 0), 0);
        skv_model *m = load(dir);
        snprintf(fp[i], sizeof fp[i], "%s", skv_model_fingerprint(m));
        skv_model_free(m);
    }
    cr_assert_str_eq(fp[0], fp[1], "bf16 file holds the same numbers");
    cr_assert_str_eq(fp[0], fp[2], "f16 file holds the same numbers");
    rm_hf_free(r);
}

/* llama2.c (pair RoPE) -> HF (half RoPE, permuted q/k rows) computes the
 * same function; K comes out with channels permuted. */
static void check_conversion(skv_model *a, size_t T, double tol)
{
    const char *dir = tu_tmpdir();
    cr_assert_eq(skv_model_save_hf(a, dir, SEQKV_DT_F32), 0, "%s", seqkv_error_detail());
    skv_model *b = load(dir);
    const skv_model_config *ca = skv_model_cfg(a), *cb = skv_model_cfg(b);
    cr_assert_eq(cb->rope_layout, SKV_ROPE_HALF);
    cr_assert_eq(ca->n_layers, cb->n_layers);
    cr_assert_eq(ca->tied_embeddings, cb->tied_embeddings);
    cr_assert_eq(ca->norm_eps, cb->norm_eps);
    int32_t *tok = malloc(T * sizeof *tok);
    for (size_t i = 0; i < T; i++)
        tok[i] = (int32_t)((i * 7919 + 1) % (size_t)ca->vocab_size);
    tok[0] = ca->bos_id;
    skv_kvcache *x, *y;
    cr_assert_eq(skv_kvcache_create(ca, T, &x), 0);
    cr_assert_eq(skv_kvcache_create(cb, T, &y), 0);
    float *la = malloc(T * ca->vocab_size * 4), *lb = malloc(T * ca->vocab_size * 4);
    skv_forward_opts oa = {.logits = la}, ob = {.logits = lb};
    cr_assert_eq(skv_model_forward(a, x, tok, T, &oa), 0);
    cr_assert_eq(skv_model_forward(b, y, tok, T, &ob), 0);
    double wl = 0, wk = 0, wv = 0;
    for (size_t i = 0; i < T * ca->vocab_size; i++)
        wl = fmax(wl, fabs((double)la[i] - lb[i]));
    const int hd = ca->head_dim;
    for (int l = 0; l < ca->n_layers; l++)
        for (size_t t = 0; t < T; t++)
            for (int h = 0; h < ca->n_kv_heads; h++)
                for (int c = 0; c < hd; c++) {
                    int ch = skv_rope_pair_to_half(c, ca->rope_dim);
                    wk = fmax(wk, fabs(skv_kvcache_k(x, l, t)[h * hd + c] - skv_kvcache_k(y, l, t)[h * hd + ch]));
                    wv = fmax(wv, fabs(skv_kvcache_v(x, l, t)[h * hd + c] - skv_kvcache_v(y, l, t)[h * hd + c]));
                }
    cr_assert_leq(wl, tol, "logits differ by %g", wl);
    cr_assert_leq(wk, tol, "K (permuted back) differs by %g", wk);
    cr_assert_leq(wv, tol, "V differs by %g", wv);
    skv_kvcache_free(x);
    skv_kvcache_free(y);
    free(la);
    free(lb);
    free(tok);
    skv_model_free(b);
}

Test(hf, converted_llama2c_model_computes_the_same_function)
{
    rm_shape s = {0, 48, 96, 3, 6, 3, 8, 97, 64, 0, 10000.0f, 1e-5f};
    size_t len;
    uint8_t *img = rm_llama2c(&s, 12, &len);
    skv_model *a = NULL;
    cr_assert_eq(skv_model_load_llama2c_mem(img, len, &a), 0);
    check_conversion(a, 40, 1e-5);
    skv_model_free(a);
    free(img);
}

Test(hf, stories260k_converted_to_safetensors_reproduces_reference)
{
    const char *p = tu_shared_model("stories260K.bin");
    if (!p)
        cr_skip("../shared/models/stories260K.bin not present");
    skv_model *a = load(p);
    check_conversion(a, 64, 1e-4);
    /* the converted checkpoint reproduces llama2.c's greedy ids */
    const char *dir = tu_tmpdir();
    cr_assert_eq(skv_model_save_hf(a, dir, SEQKV_DT_F32), 0);
    skv_model *b = load(tu_path(dir, "config.json"));
    uint8_t *ref = tu_read(tu_shared_model("stories260K.greedy.txt"), NULL);
    int32_t bos = 1, out[257];
    skv_rng rng;
    skv_rng_seed(&rng, 0);
    cr_assert_eq(skv_model_generate(b, NULL, &bos, 1, 257, 0.0f, 1.0f, &rng, out), 0);
    char *q = (char *)ref, *end;
    for (int i = 0; i < 256; i++) {
        long want = strtol(q, &end, 10);
        q = end;
        cr_assert_eq(out[i + 1], want, "greedy id %d", i);
    }
    free(ref);
    skv_model_free(b);
    skv_model_free(a);
}

static int load_rc(const char *dir)
{
    skv_model *m = NULL;
    int rc = skv_model_load(dir, &m);
    skv_model_free(m);
    return rc;
}

static void write_text(const char *path, const char *text)
{
    cr_assert_eq(skv_file_write(path, text, strlen(text)), 0);
}

Test(hf, malformed_checkpoints_fail_with_clear_errors)
{
    rm_shape s = {0, 16, 32, 1, 2, 2, 8, 20, 16, 1, 10000.0f, 1e-6f};
    rm_hf *r = rm_hf_new(&s, 3);
    const char *dir = tu_tmpdir();
    cr_assert_eq(rm_hf_write(r, dir, SEQKV_DT_F32, 0), 0);
    cr_assert_eq(load_rc(dir), 0);
    const char *cfg = tu_path(dir, "config.json");
    size_t len;
    char *orig = (char *)tu_read(cfg, &len);
    /* a tensor of the wrong shape: claim a bigger FFN */
    char *t = strdup(orig);
    char *p = strstr(t, "\"intermediate_size\": 32");
    cr_assert_not_null(p);
    memcpy(p, "\"intermediate_size\": 33", 23);
    write_text(cfg, t);
    cr_assert_eq(load_rc(dir), SKV_ERR_SHAPE);
    cr_assert(strstr(seqkv_error_detail(), "mlp.gate_proj.weight") != NULL, "%s", seqkv_error_detail());
    /* untied: lm_head is missing */
    strcpy(t, orig);
    p = strstr(t, "\"tie_word_embeddings\": true");
    memcpy(p, "\"tie_word_embeddings\": 0001", 27);
    write_text(cfg, t);
    cr_assert_eq(load_rc(dir), SKV_ERR_FORMAT, "0001 is not JSON");
    memcpy(p, "\"tie_word_embeddings\":false", 27);
    write_text(cfg, t);
    cr_assert_eq(load_rc(dir), SKV_ERR_NOT_FOUND);
    cr_assert(strstr(seqkv_error_detail(), "lm_head.weight") != NULL);
    write_text(cfg, "{\"model_type\": \"gpt2\", \"hidden_size\": 16}");
    cr_assert_eq(load_rc(dir), SKV_ERR_UNSUPPORTED);
    write_text(cfg, "{\"model_type\": \"llama\", \"hidden_size\": 16}");
    cr_assert_eq(load_rc(dir), SKV_ERR_FORMAT);
    cr_assert(strstr(seqkv_error_detail(), "intermediate_size") != NULL);
    strcpy(t, orig);
    p = strstr(t, "\"rope_scaling\": null");
    memcpy(p, "\"rope_scaling\": 1.00", 20);
    write_text(cfg, t);
    cr_assert_eq(load_rc(dir), SKV_ERR_UNSUPPORTED);
    strcpy(t, orig);
    p = strstr(t, "\"num_key_value_heads\": 2");
    memcpy(p, "\"num_key_value_heads\": 3", 24);
    write_text(cfg, t);
    cr_assert_eq(load_rc(dir), SKV_ERR_FORMAT);
    write_text(cfg, orig);
    cr_assert_eq(load_rc(dir), 0);
    /* a corrupted weights file */
    const char *st = tu_path(dir, "model.safetensors");
    size_t sl;
    uint8_t *w = tu_read(st, &sl);
    cr_assert_eq(skv_file_write(st, w, sl / 2), 0);
    cr_assert_neq(load_rc(dir), 0);
    free(w);
    free(t);
    free(orig);
    rm_hf_free(r);
    cr_assert_eq(load_rc("/nonexistent-dir/x.safetensors"), SKV_ERR_IO);
}

Test(hf, config_parser_defaults)
{
    skv_model_config c;
    const char *j = "{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":128,"
                    "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"vocab_size\":100}";
    cr_assert_eq(skv_model_config_from_hf(j, strlen(j), &c), 0, "%s", seqkv_error_detail());
    cr_assert_eq(c.n_kv_heads, 4);
    cr_assert_eq(c.head_dim, 16);
    cr_assert_eq(c.rope_dim, 16);
    cr_assert_eq(c.rope_theta, 10000.0f);
    cr_assert_eq(c.tied_embeddings, 0);
    cr_assert_eq(c.rope_layout, SKV_ROPE_HALF);
    const char *q = "{\"model_type\":\"qwen3\",\"hidden_size\":64,\"intermediate_size\":128,"
                    "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
                    "\"head_dim\":32,\"vocab_size\":100,\"rope_theta\":1000000,\"tie_word_embeddings\":true}";
    cr_assert_eq(skv_model_config_from_hf(q, strlen(q), &c), 0, "%s", seqkv_error_detail());
    cr_assert_eq(c.head_dim, 32);
    cr_assert_eq(c.qk_norm, 1);
    cr_assert_eq(c.qkv_bias, 0);
    cr_assert_eq(c.rope_theta, 1e6f);
    cr_assert_eq(c.tied_embeddings, 1);
}
