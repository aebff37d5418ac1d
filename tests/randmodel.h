/* Seeded random tiny models written by the tests themselves: a llama2.c
 * image, and Hugging Face checkpoints (llama, qwen2, qwen3) together with
 * a plain double-precision reference forward pass to check the engine. */
#ifndef SKV_RANDMODEL_H
#define SKV_RANDMODEL_H
#include <stddef.h>
#include <stdint.h>

#include "skv_base.h"

typedef struct {
    int arch; /* 0 llama, 1 qwen2, 2 qwen3 */
    int dim, hidden, layers, heads, kv_heads, head_dim, vocab, max_seq;
    int tied;
    float theta, eps;
} rm_shape;

/* llama2.c checkpoint image (arch must be llama, head_dim = dim/heads). */
uint8_t *rm_llama2c(const rm_shape *s, uint64_t seed, size_t *len);

/* Float32 weights of an HF-layout model (HALF RoPE). Values are rounded to
 * bf16 and kept away from fp16 subnormals, so F32, BF16 and F16 files hold
 * the same numbers. */
typedef struct {
    rm_shape s;
    float *emb, *norm, *lm_head;
    struct {
        float *in_norm, *q, *k, *v, *o, *bq, *bk, *bv, *qn, *kn, *post_norm, *gate, *up, *down;
    } *L;
} rm_hf;

rm_hf *rm_hf_new(const rm_shape *s, uint64_t seed);
void rm_hf_free(rm_hf *m);
/* Write dir/config.json and dir/model.safetensors (weights in dt); with
 * shards = 2, two files and model.safetensors.index.json instead. */
int rm_hf_write(const rm_hf *m, const char *dir, seqkv_dtype dt, int shards);
/* Reference forward over tokens[0..n): logits [n][vocab], k and v
 * [layers][n][kv_heads*head_dim] (K after RoPE). Double precision, libm. */
void rm_hf_reference(const rm_hf *m, const int32_t *tokens, int n, float *logits, float *k, float *v);
#endif
