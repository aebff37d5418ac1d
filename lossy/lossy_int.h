/* Internals of the lossy tier, shared by its files only. */
#ifndef SKV_LOSSY_INT_H
#define SKV_LOSSY_INT_H

#include "skv_lossy.h"

#define LQ_EPS_REL 1e-3      /* regularisation: of the mean eigenvalue */
#define LQ_MAX_SAMPLES 16384 /* training vectors per codebook */
#define LQ_ITERS 10          /* Lloyd iterations */
#define LQ_LN2 0.69314718055994530942

#define LQ_ESC_MAX 2047 /* an escaped sub-vector's lattice indices: |q| <= this */

/* A codebook: k codewords of dim floats, what each costs under its table.
 * A product-VQ book has one more symbol, k, the escape: the sub-vector
 * follows as lattice indices round(y / step), one symbol a dimension
 * under the calibration's uniform escape table, so a vector far from
 * every codeword (one the calibration never saw) costs bits, not error. */
typedef struct {
    uint32_t k;
    int dim, esc;
    float *c;    /* [k][dim] */
    float *bits; /* [k + esc] */
    skv_symtab *tab;
} lq_book;

typedef struct {
    int present;
    double step;
    lq_book *coarse; /* RVQ: [L][2][H] */
    lq_book *pq;     /* [L][2][H][M] */
} lq_level;

struct skv_lossy_cal {
    int L, H, D, M;
    seqkv_dtype dt;
    int sink;
    float *t, *ti; /* [L][2][H][D*D] */
    skv_symtab *esc_tab; /* uniform over [-LQ_ESC_MAX, LQ_ESC_MAX] */
    lq_level lv[SKV_LOSSY_LEVELS][2];
    uint8_t id[16];
};

static inline int lq_level_index(int bits) { return bits >= 2 && bits <= 4 ? 4 - bits : -1; }
/* The Lagrangian's price of a bit at step s: dD/dR of a uniform quantiser. */
static inline float lq_lambda(double step) { return (float)(LQ_LN2 / 6.0 * step * step); }
static inline size_t lq_head(const skv_lossy_cal *c, int l, int kv, int h)
{
    return ((size_t)l * 2 + (size_t)kv) * (size_t)c->H + (size_t)h;
}

/* Index of the codeword minimising |y - c|^2 + lambda * bits (lowest on ties). */
uint32_t lq_nearest(const lq_book *b, const float *y, float lambda);
void lq_book_clear(lq_book *b);
/* Code one product-VQ sub-vector y: a codeword, or the escape when that
 * costs less (error + lambda * bits). sym[0] is the book's symbol, then
 * sym[1..dim] the lattice indices (biased by LQ_ESC_MAX) after an escape;
 * returns how many symbols; rec gets the reconstruction. */
int lq_code_sub(const skv_lossy_cal *c, const lq_book *b, const float *y, double step,
                uint32_t *sym, float *rec);
/* The reconstruction of an escaped sub-vector's lattice symbol. */
static inline float lq_esc_value(uint32_t s, double step)
{
    return (float)(((double)s - LQ_ESC_MAX) * step);
}
int lq_book_finish(lq_book *b, const uint64_t *counts);
/* y = T x for one head vector (fixed order). */
void lq_apply(const float *t, const float *x, float *y, int d);

/* Training (vq.c): the books of one level from the transformed samples
 * y [L*2*H][n][D]. */
int lq_train_level(skv_lossy_cal *c, int bits, skv_lossy_kind kind, const float *y, size_t n,
                   skv_pool *pool, int quiet);
/* The id: BLAKE2b-128 of the serialized calibration (lcal_io.c). */
int lq_set_id(skv_lossy_cal *c);
int lq_cal_alloc(skv_lossy_cal **out, int L, int H, int D, seqkv_dtype dt);

#endif
