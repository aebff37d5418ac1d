/* Centroids of the probabilistic trie (store/cluster.c). */
#ifndef SKV_STORE_CLUSTER_H
#define SKV_STORE_CLUSTER_H
#include "store_priv.h"

/* A shared prefix shorter than this code length never clusters. */
#define SKV_CLUSTER_MIN_BITS 32.0
/* New positions aligned at most (the rest is coded without a centroid). */
#define SKV_CLUSTER_MAX_ALIGN 16384

typedef struct skv_centroid {
    uint8_t tip_key[32]; /* the centroid's last record */
    size_t nc;           /* its tokens */
    int32_t *tok;
    uint8_t *k, *v;      /* its KV, [layers][nc][C] */
    size_t cap[2];       /* k's and v's blocks (skv_warm_free) */
    int32_t *align;      /* [n] member position -> centroid position or -1 */
    double d_bits;       /* code length of the shared prefix */
    int by_content;      /* found by the content index, not the prefix rule */
} skv_centroid;

/* The centroid for a put of tok[0..n) whose longest cached prefix is m
 * (path/steps from skv_trie_match; m may be 0), or *out = NULL when none
 * fits: by the prefix rule, else by the namespace's content index. */
int skv_cluster_find(seqkv *db, MDB_txn *txn, ns_ent *e, prof_ent *pe, const int32_t *tok,
                     size_t n, size_t m, const skv_trie_step *path, size_t steps,
                     skv_centroid **out);
void skv_centroid_free(skv_centroid *c);
/* Second predictions for member positions [a, b) (al: their alignment,
 * b - a entries): the centroid's residual x_c - mu_c against the coder d's
 * own predictions over the aligned span (d NULL: x_c itself), K rotated
 * from the centroid's position to the member's; pk, pv [layers][b - a][C]
 * floats, NaN where unaligned. ctok, ck, cv: the centroid sequence. */
int skv_centroid_pred(const prof_ent *pe, skv_delta *d, const int32_t *ctok, const uint8_t *ck,
                      const uint8_t *cv, size_t nc, const int32_t *al, size_t a, size_t b,
                      float *pk, float *pv);
/* Blend weights and spread scales per (layer, k/v, head) by least squares
 * on n positions: x exact values, mu the level's predictions, ap the
 * centroid's ([layers][n][C] each, K then V). */
void skv_centroid_fit(const prof_ent *pe, const float *x[2], const float *mu[2],
                      const float *ap[2], size_t n, float *w, float *sscale);
/* Side info of a centroid-coded record (FORMAT.md, "Chunk records"). */
size_t skv_side_size(const prof_ent *pe, size_t count);
void skv_side_write(const prof_ent *pe, uint32_t nc, const int32_t *al, size_t count,
                    const float *w, const float *sscale, uint8_t *dst);
int skv_side_read(const prof_ent *pe, const uint8_t *src, size_t len, size_t count,
                  uint32_t *nc, int32_t *al, float *w, float *sscale);
#endif
