/* Internals of the model module, shared by its files only. */
#ifndef SKV_MODEL_INT_H
#define SKV_MODEL_INT_H

#include "skv_model.h"

/* A weight matrix [rows][cols], row-major (out, in). Float32 rows live in
 * f; quantized rows in q8 (int8 or fp8 bytes) with one scale per row. */
typedef struct {
    int rows, cols;
    skv_wquant q;
    float *f;      /* SKV_WQ_F32 */
    uint8_t *q8;   /* SKV_WQ_INT8 (as int8_t) / SKV_WQ_FP8 */
    float *scale;  /* per row, quantized only */
} skv_mat;

typedef struct {
    float *rms_att;              /* [dim] */
    skv_mat wq, wk, wv, wo;      /* [nh*hd][dim], [kvh*hd][dim] x2, [dim][nh*hd] */
    float *bq, *bk, *bv;         /* qwen2 biases or NULL */
    float *q_norm, *k_norm;      /* qwen3 [head_dim] or NULL */
    float *rms_ffn;              /* [dim] */
    skv_mat w1, w2, w3;          /* gate [hid][dim], down [dim][hid], up [hid][dim] */
} skv_layer;

struct skv_model {
    skv_model_config cfg;
    skv_wquant wq;
    float *tok_emb;     /* [vocab][dim] */
    skv_layer *layers;
    float *rms_final;   /* [dim] */
    skv_mat cls;        /* [vocab][dim]; for tied f32 models cls.f == tok_emb */
    int cls_borrowed;   /* cls.f aliases tok_emb */
    float *rope_inv_freq; /* [rope_dim/2] */
    char fingerprint[33];
};

/* Allocation helpers; all return SKV_ERR_NOMEM with a detail. */
int skv__mat_alloc(skv_mat *m, int rows, int cols);
void skv__mat_free(skv_mat *m);
int skv__model_alloc(const skv_model_config *cfg, skv_model **out);
/* Validate a config's numbers (positive sizes, divisibility, limits). */
int skv__config_check(const skv_model_config *cfg);
/* Compute derived state (RoPE table, fingerprint) once weights are set. */
int skv__model_finish(skv_model *m);
/* fp8-e4m3 byte -> float32, all 256 codes. */
const float *skv__fp8_lut(void);

/* The engine's float exp, inline for the softmax and SiLU loops; see
 * mathx.c for why seqkv has its own. */
#include <math.h>
#include <stdint.h>
static inline float pow2f(int k) /* 2^k for -126 <= k <= 127 */
{
    union { float f; uint32_t u; } c;
    c.u = (uint32_t)(k + 127) << 23;
    return c.f;
}

/* Float exp for the hot paths (softmax, SiLU): Cody-Waite reduction by
 * ln2 and a degree-7 Taylor polynomial; within 2 ulp of exp(x). */
static inline float skv__expf(float x)
{
    if (x != x)
        return x;
    if (x > 88.7228f)
        return HUGE_VALF;
    if (x < -103.973f)
        return 0.0f;
    float kf = x * 1.44269504f;
    int k = kf >= 0.0f ? (int)(kf + 0.5f) : -(int)(0.5f - kf);
    float r = (x - (float)k * 0.693145751953125f) - (float)k * 1.428606765330187e-06f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    if (k >= -126 && k <= 127)
        return p * pow2f(k);
    if (k > 127)
        return (p * pow2f(127)) * 2.0f;
    return (p * pow2f(k + 100)) * pow2f(-100);
}

#endif
