/*
 * skv_lossy.h - the opt-in lossy tier: attention-preserving transform
 * coding of K and V ("Spend Bits Where Queries Look").
 *
 * The distortion that matters is the error of what attention computes,
 * not of K and V themselves. For each layer and KV head, a calibration
 * run of the model measures, over the query heads that share the KV head
 * (GQA), how an error e in a key or a value reaches the attention output
 * after W_O:
 *   K: G_K = E_keys[ sum_t a_tj^2 |W_O(v_j - o_t)|^2 q_t q_t^T / d ]
 *      (the attention-weighted query second moment: a logit error q.e/sqrt(d)
 *      moves o_t by a_tj (v_j - o_t) per unit)
 *   V: G_V = E_keys[ sum_t a_tj^2 ] W_O^T W_O   (the attention-weighted
 *      statistics of how much each value is read, and through which channels)
 * so the expected output error of e is e^T G e. The transforms are the
 * symmetric square roots T = G^{1/2} (eigen-decomposition in double,
 * regularised by 1e-3 of the mean eigenvalue), with T^{-1} = G^{-1/2}:
 * squared error in y = T x is output error, one unit for every layer,
 * head, K and V, so one quantiser step everywhere spends bits where the
 * queries look.
 *
 * y is cut into sub-vectors of 2 and each is coded by an entropy-
 * constrained product VQ (codebooks learned at calibration by Lloyd
 * iterations under distortion + lambda * bits, started from the step's
 * lattice); residual VQ adds a coarse codebook over the whole head vector
 * first. Indices are coded by seqkv's symbol streams under tables learned
 * with the codebooks, so the rate is the coded size. A level's step is
 * searched at calibration for its target: q4, q3, q2 coded bits a scalar.
 *
 * Reconstruction is float32 with fixed operation order and no FMA, then
 * rounded to the storage dtype: the same bytes on every CPU and thread
 * count. Depends on skv_model (calibration) and skv_codec (symbol streams).
 */
#ifndef SKV_LOSSY_H
#define SKV_LOSSY_H

#include <stddef.h>
#include <stdint.h>

#include "skv_base.h"
#include "skv_codec.h"
#include "skv_model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SKV_LOSSY_LEVELS 3      /* q4, q3, q2 */
#define SKV_LOSSY_SUB 2         /* dimensions of a product-VQ sub-vector */
#define SKV_LOSSY_RVQ_K1 32     /* residual VQ's coarse codebook */
#define SKV_LOSSY_DMAX 256       /* the largest head the tier codes */
#define SKV_LOSSY_MAGIC 0x4c564b53u /* "SKVL" */
#define SKV_LOSSY_VERSION 1
#define SKV_LOSSY_HEADER 56

typedef enum {
    SKV_LQ_PVQ = 0, /* product VQ on sub-vectors of the transformed head vector */
    SKV_LQ_RVQ = 1, /* a coarse VQ of the whole vector, then product VQ of the residual */
} skv_lossy_kind;

/* "q4" -> 4 and so on; 0 for anything else. */
int skv_lossy_level_parse(const char *s);

typedef struct skv_lossy_cal skv_lossy_cal;

typedef struct {
    seqkv_dtype dtype;  /* the storage dtype the codebooks learn from */
    int sink;         /* the first positions of each sequence, left out of the statistics */
    int rvq;          /* also learn residual VQ codebooks (the bench's rows) */
    int identity;     /* T = I: plain VQ, for comparison (the bench's rows) */
    int only;         /* 0: learn q4, q3 and q2; 2..4: that level alone */
    skv_pool *pool;   /* NULL: one thread */
    int quiet;        /* no progress on stderr */
    int plain_q;      /* G_K from the plain query second moment E[q q^T] / d
                         rather than the attention-weighted one (the bench's
                         rows: what the weighting buys) */
} skv_lossy_opts;

/* Learn transforms and the codebooks of q4, q3 and q2 from the sequences
 * tok[i][0..len[i]) run through m (float32 weights; max_seq bounds len).
 * Errors: SKV_ERR_ARG (no sequences, shapes the tier cannot code: odd
 * head_dim), SKV_ERR_NOMEM, the model's errors. */
int skv_lossy_calibrate(const skv_model *m, const int32_t *const *tok, const size_t *len,
                        size_t n_seq, const skv_lossy_opts *o, skv_lossy_cal **out);
void skv_lossy_cal_free(skv_lossy_cal *c);

/* Shape and identity. id: BLAKE2b-128 of the serialized calibration. */
void skv_lossy_cal_shape(const skv_lossy_cal *c, int *layers, int *kv_heads, int *head_dim);
seqkv_dtype skv_lossy_cal_dtype(const skv_lossy_cal *c);
const uint8_t *skv_lossy_cal_id(const skv_lossy_cal *c);
int skv_lossy_cal_has(const skv_lossy_cal *c, int bits, skv_lossy_kind kind);
/* The level's quantiser step in the transformed domain. */
double skv_lossy_cal_step(const skv_lossy_cal *c, int bits, skv_lossy_kind kind);
/* The transform of (layer, kv: 0 K / 1 V, head) and its inverse,
 * head_dim x head_dim row-major floats (borrowed). */
const float *skv_lossy_transform(const skv_lossy_cal *c, int layer, int kv, int head, int inverse);

/* Serialize (FORMAT.md, "Lossy calibrations"): *out is skv_malloc'd. */
int skv_lossy_cal_save(const skv_lossy_cal *c, uint8_t **out, size_t *len);
/* Parse a serialized calibration; trusts nothing in buf. */
int skv_lossy_cal_load(const uint8_t *buf, size_t len, skv_lossy_cal **out);

/* ---- coding: n positions of K and V in the KV layout
 * [layer][n][kv_head][head_dim] of the calibration's dtype, positions
 * [lo, hi) lossy and the rest (the exact window) stored as they are --- */
size_t skv_lossy_bound(const skv_lossy_cal *c, size_t n);
/* Code k, v into dst[0..cap); *len the stream's size. With recon (may be
 * NULL), the reconstruction the decoder will produce: k then v, each in
 * the same layout and dtype, the window bit-exact. Errors: SKV_ERR_ARG
 * (level not calibrated, lo > hi or hi > n), SKV_ERR_TOO_LARGE, SKV_ERR_NOMEM. */
int skv_lossy_encode(const skv_lossy_cal *c, int bits, skv_lossy_kind kind, const void *k,
                     const void *v, size_t n, size_t lo, size_t hi, uint8_t *dst, size_t cap,
                     size_t *len, void *recon_k, void *recon_v);
/* Read a stream's head: its level, kind, positions and lossy range. */
int skv_lossy_info(const uint8_t *src, size_t len, int *bits, skv_lossy_kind *kind, size_t *n,
                   size_t *lo, size_t *hi);
/* Decode a stream of n positions into k, v (the calibration's dtype).
 * Trusts nothing in src: SKV_ERR_FORMAT (not a lossy stream), SKV_ERR_VERSION,
 * SKV_ERR_SHAPE (other positions, dtype or calibration), SKV_ERR_CORRUPT
 * (the symbol stream or the reconstruction's checksum wrong). */
int skv_lossy_decode(const skv_lossy_cal *c, const uint8_t *src, size_t len, size_t n, void *k,
                     void *v);

/* One (layer, K|V) slab: x is [n][kv_head][head_dim], positions [lo, hi)
 * lossy; otherwise as skv_lossy_encode / skv_lossy_decode (a slab's
 * stream names its layer and K|V: decoded as another is SKV_ERR_SHAPE). */
size_t skv_lossy_slab_bound(const skv_lossy_cal *c, size_t n);
int skv_lossy_slab_encode(const skv_lossy_cal *c, int bits, skv_lossy_kind kind, int layer, int kv,
                          const void *x, size_t n, size_t lo, size_t hi, uint8_t *dst, size_t cap,
                          size_t *len, void *recon);
int skv_lossy_slab_decode(const skv_lossy_cal *c, const uint8_t *src, size_t len, int layer, int kv,
                          size_t n, void *x);

/* Symmetric eigen-decomposition of a (n x n, row-major, double) by cyclic
 * Jacobi: values ascending into w, vectors as the columns of v. */
int skv_eig_sym(const double *a, int n, double *w, double *v);

#ifdef __cplusplus
}
#endif
#endif /* SKV_LOSSY_H */
