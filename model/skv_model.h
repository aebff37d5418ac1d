/*
 * skv_model.h - the embedded model engine: llama-family transformers
 * (llama2.c checkpoints; Hugging Face llama, qwen2, qwen3 safetensors),
 * a deterministic float32 forward pass that returns logits and the KV
 * cache, int8/fp8 weight-quantized copies used as predictors, and seeded
 * sampling.
 *
 * Determinism contract (ARCHITECTURE.md, "Determinism"): for the same
 * weights and tokens, every logit and every KV scalar is bit-identical on
 * every run, for every thread count, and between one prefill and the
 * equivalent one-token steps. The engine computes every output element in
 * one thread with a fixed reduction order, uses no FMA contraction and no
 * libm transcendental (exp, log, sin and cos are seqkv's own, from IEEE
 * basic operations only), so results also agree across machines whose
 * float arithmetic is IEEE-754.
 *
 * Depends on skv_base and skv_tensor.
 */
#ifndef SKV_MODEL_H
#define SKV_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "skv_base.h"
#include "skv_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    SKV_ARCH_LLAMA = 0, /* llama2.c checkpoints and HF "llama" */
    SKV_ARCH_QWEN2 = 1, /* + q/k/v projection biases */
    SKV_ARCH_QWEN3 = 2, /* + per-head RMSNorm of q and k, explicit head_dim */
} skv_arch;

typedef enum {
    SKV_ROPE_PAIR = 0, /* rotate adjacent pairs (2i, 2i+1): Meta, llama2.c */
    SKV_ROPE_HALF = 1, /* rotate (i, i + rot/2): Hugging Face layout */
} skv_rope_layout;

typedef enum {
    SKV_WQ_F32 = 0,  /* float32 weights, the reference engine */
    SKV_WQ_INT8 = 1, /* int8 per output row, fp32 scale = max|row| / 127 */
    SKV_WQ_FP8 = 2,  /* fp8-e4m3 per output row, fp32 scale = max|row| / 448 */
} skv_wquant;

typedef struct {
    skv_arch arch;
    int dim;          /* hidden size */
    int hidden_dim;   /* FFN inner size */
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int head_dim;
    int vocab_size;
    int max_seq;      /* positions the model was trained for (advisory) */
    float rope_theta;
    int rope_dim;     /* rotated channels per head (even, <= head_dim) */
    skv_rope_layout rope_layout;
    float norm_eps;
    int tied_embeddings;
    int qkv_bias;     /* qwen2 */
    int qk_norm;      /* qwen3 */
    int bos_id;
} skv_model_config;

typedef struct skv_model skv_model;

/* Load a model. `path` is a llama2.c checkpoint (.bin), a Hugging Face
 * directory holding config.json and model.safetensors (or a sharded
 * model.safetensors.index.json), or the path of either file inside it.
 * Errors: SKV_ERR_IO, SKV_ERR_FORMAT (bad header/config), SKV_ERR_SHAPE
 * (a tensor of the wrong shape or a file of the wrong size),
 * SKV_ERR_UNSUPPORTED (architecture or option seqkv does not implement),
 * SKV_ERR_NOMEM. The detail names the offending tensor or field. */
int skv_model_load(const char *path, skv_model **out);
/* Parse a llama2.c checkpoint image (borrowed; weights are copied). */
int skv_model_load_llama2c_mem(const uint8_t *buf, size_t len, skv_model **out);
/* Parse an HF config.json into cfg (no weights); used by the loader and
 * the fuzz target. */
int skv_model_config_from_hf(const char *json, size_t len, skv_model_config *cfg);
void skv_model_free(skv_model *m);

const skv_model_config *skv_model_cfg(const skv_model *m);
skv_wquant skv_model_wquant(const skv_model *m);
/* Bytes of weight storage (quantized copies are smaller). */
size_t skv_model_weight_bytes(const skv_model *m);
/* Number of parameters. */
size_t skv_model_params(const skv_model *m);
/* KV scalars per token: layers * 2 * kv_heads * head_dim. */
size_t skv_model_kv_per_token(const skv_model *m);
/* Identity of the model: BLAKE2b-128 (libsodium) of the config and the
 * weights as loaded, 32 hex digits; stable across loads of the same
 * checkpoint. Quantized copies get their own. */
const char *skv_model_fingerprint(const skv_model *m);

/* A new model whose matrices are quantized copies of m's (m must be
 * SKV_WQ_F32). Norms, biases and the embedding lookup stay float32. */
int skv_model_quantize(const skv_model *m, skv_wquant q, skv_model **out);

/* Layer l's attention output projection W_O as float32 (dequantized for
 * quantized copies), [dim][n_heads * head_dim] row-major, into out.
 * Errors: SKV_ERR_ARG (l out of range). */
int skv_model_wo(const skv_model *m, int layer, float *out);

/* Write m (float32 weights) as a Hugging Face llama checkpoint: dir/
 * config.json and dir/model.safetensors, weights in `dtype` (F32 exact,
 * or BF16/F16 rounded). Models with the pair RoPE layout have their q and
 * k rows permuted to the HF half layout, as HF's own converter does, so
 * the written model computes the same function; its K channels come out
 * in the HF order (see skv_rope_pair_to_half). */
int skv_model_save_hf(const skv_model *m, const char *dir, seqkv_dtype dtype);
/* Channel c of a head in the pair layout lands at this index in the half
 * layout (rot = rope_dim): c = 2b + a  ->  a * rot/2 + b. */
int skv_rope_pair_to_half(int c, int rot);

/* ------------------------------------------------------------------------
 * KV cache: float32 K (after RoPE) and V for positions [0, len), laid out
 * [layer][pos][kv_head][head_dim], with a fixed capacity.
 * ---------------------------------------------------------------------- */
typedef struct skv_kvcache skv_kvcache;

int skv_kvcache_create(const skv_model_config *cfg, size_t capacity, skv_kvcache **out);
void skv_kvcache_free(skv_kvcache *c);
size_t skv_kvcache_len(const skv_kvcache *c);
size_t skv_kvcache_capacity(const skv_kvcache *c);
/* Forget positions >= len (len <= current length). */
int skv_kvcache_truncate(skv_kvcache *c, size_t len);
/* Row of kv_heads*head_dim floats for (layer, pos); pos < capacity. */
float *skv_kvcache_k(skv_kvcache *c, int layer, size_t pos);
float *skv_kvcache_v(skv_kvcache *c, int layer, size_t pos);
/* Append n positions of externally supplied KV, e.g. the exact decoded KV
 * a quantized predictor attends over. k, v: dtype elements laid out
 * [layer][n][kv_head][head_dim] (the KV file layout). */
int skv_kvcache_append(skv_kvcache *c, seqkv_dtype dtype, const void *k, const void *v,
                       size_t n);
/* Export positions [p0, p0+n) as dtype in the KV file layout
 * [layer][n][kv_head][head_dim]; k_out and v_out hold
 * layers*n*kv_heads*head_dim elements each. */
int skv_kvcache_export(const skv_kvcache *c, size_t p0, size_t n, seqkv_dtype dtype,
                       void *k_out, void *v_out);

/* Called once per layer after the new positions' K (after RoPE) and V are
 * computed and before attention uses them. k and v are [n][kv_heads *
 * head_dim] for positions pos0..pos0+n-1 of `layer`; the hook may
 * overwrite them (a decoder puts the exact values there) and what it
 * leaves is what the cache stores and attention reads. */
typedef void (*skv_kv_hook)(void *ctx, int layer, size_t pos0, size_t n, float *k,
                            float *v);

/* Called once per layer with the new positions' queries after RoPE (and
 * qwen3's q norm), [n][n_heads * head_dim], before attention reads them;
 * read-only. The lossy tier's calibration learns from them. */
typedef void (*skv_q_hook)(void *ctx, int layer, size_t pos0, size_t n, const float *q);

typedef struct {
    skv_pool *pool;   /* NULL: one thread */
    float *logits;    /* optional out: [n][vocab] (or [vocab] if last_only) */
    float *logprobs;  /* optional out: log-softmax of the logits, same shape */
    int last_only;    /* logits/logprobs for the last position only */
    skv_kv_hook hook; /* optional */
    void *hook_ctx;
    skv_q_hook qhook; /* optional: sees each layer's queries */
    void *qhook_ctx;
} skv_forward_opts;

/* Run tokens[0..n) at positions len..len+n-1 of the cache, appending their
 * KV. n > 1 is a prefill; n == 1 an incremental step; both give identical
 * bits. The classifier runs only when logits or logprobs are requested.
 * Errors: SKV_ERR_ARG (token id out of range, n == 0, cache of another
 * shape), SKV_ERR_TOO_LARGE (capacity exceeded), SKV_ERR_NOMEM. */
int skv_model_forward(const skv_model *m, skv_kvcache *cache, const int32_t *tokens,
                      size_t n, const skv_forward_opts *opts);

/* ------------------------------------------------------------------------
 * Sampling.
 * ---------------------------------------------------------------------- */
/* Index of the largest logit (lowest index on ties). */
int skv_sample_argmax(const float *logits, int vocab);
/* Sample from softmax(logits / temp) restricted to the smallest set of
 * most probable tokens whose mass reaches top_p (ties by lower id).
 * temp <= 0 means argmax. `scratch` holds 2*vocab floats-or-ints (may be
 * NULL: then it allocates). Deterministic for a given rng state. */
int skv_sample_top_p(const float *logits, int vocab, float temp, float top_p,
                     skv_rng *rng, void *scratch);
/* Log-softmax of n rows of `vocab` logits, in place allowed. */
void skv_log_softmax(float *out, const float *logits, size_t n, int vocab);

/* Generate: prompt[0..n_prompt) (n_prompt >= 1) then sample until
 * `total` tokens; out receives all `total` ids (prompt included). */
int skv_model_generate(const skv_model *m, skv_pool *pool, const int32_t *prompt,
                       size_t n_prompt, size_t total, float temp, float top_p,
                       skv_rng *rng, int32_t *out);

/* The engine's float exp (within 2 ulp; IEEE basic operations only). The
 * double-precision skv_exp, skv_log and skv_sincos are in skv_base.h. */
float skv_expf(float x);

#ifdef __cplusplus
}
#endif
#endif /* SKV_MODEL_H */
