/* The lossy tier's bench (`seqkv codec bench --level q4,q3,q2`, `seqkv
 * demo --level q3`): each level and the baselines at the same coded bits,
 * measured on the model (cli/lossy_bench.c, cli/lossy_baselines.c). */
#ifndef SKV_LOSSY_BENCH_H
#define SKV_LOSSY_BENCH_H
#include <stdio.h>

#include "skv_lossy.h"

typedef struct {
    const skv_model *m;
    skv_pool *pool;
    seqkv_dtype dt;
    size_t n_cal, n_test;
    const int32_t *const *cal_tok, *const *test_tok;
    const size_t *cal_len, *test_len;
    /* optional: the test set's K and V as stored (dtype, KV layout); when
     * given they must equal the model's, or the bench stops */
    const uint8_t *const *test_k, *const *test_v;
    int want[5];      /* want[b]: level qb */
    int sink, recent; /* the exact window */
    int json, quiet;
} lossy_bench_in;

/* Calibrate on the calibration sequences, then print one row per level
 * and baseline to out. */
int lossy_bench_run(const lossy_bench_in *in, FILE *out);

/* ---- shared by the bench's files ---- */

/* One test sequence: its tokens, the reference K/V (dtype-rounded, float
 * [L][n][H][D]) and queries ([L][n][nh*D]), and the reference logits. */
typedef struct {
    const int32_t *tok;
    size_t n;
    float *k, *v, *q, *logits;
} lb_seq;

/* What a baseline quantiser gets: the test set, the window, the shape. */
typedef struct {
    lb_seq *seq;
    size_t n_seq;
    int L, H, D, sink, recent;
    seqkv_dtype dt;
} lb_set;

static inline size_t lb_lo(const lb_set *s, size_t n) { return (size_t)s->sink < n ? (size_t)s->sink : n; }
static inline size_t lb_hi(const lb_set *s, size_t n)
{
    const size_t lo = lb_lo(s, n);
    return n - lo > (size_t)s->recent ? n - (size_t)s->recent : lo;
}

typedef enum { LB_RTN = 0, LB_KIVI = 1, LB_SQ = 2 } lb_kind;
/* Quantise the set by baseline kind with parameter p (levels for RTN and
 * KIVI, the step for SQ); rk/rv (per sequence, float, layout of seq) get
 * the reconstruction when not NULL; returns the bits per lossy scalar
 * (indices at their empirical entropy, side information as stored). */
double lb_quantise(const lb_set *s, lb_kind kind, double p, const skv_lossy_cal *cal, float **rk,
                   float **rv);
/* The parameter of kind that gives `bits`, then its reconstruction. */
double lb_match(const lb_set *s, lb_kind kind, double bits, const skv_lossy_cal *cal, float **rk,
                float **rv, double *param);
#endif
