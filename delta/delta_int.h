/* Internal declarations of the delta module, shared by its files.
 *
 * Prediction of scalar (layer l, kv, position t, channel c = head*D + d):
 *   mu = w0*f_model + w1*f_prev + w2*f_cb + w3*f_mean      (float, in order)
 * f_model: the model's K/V for (l, t) computed over exact earlier KV
 *          (spec: int8 copy, full: float32; 0 for stat and ctx)
 * f_prev:  the exact value at t-1 in the same channel (f_mean at t = 0)
 * f_cb:    codebook mean of (l, token_t, kv, c); K is learned before RoPE
 *          and rotated to t; f_mean for tokens never seen in calibration
 * f_mean:  calibrated channel mean
 * Weights per (level, l, kv, head) by least squares; stat uses (0,0,0,1).
 * s per (level, l, kv, c) minimises the measured code length. */
#ifndef SKV_DELTA_INT_H
#define SKV_DELTA_INT_H

#include <stddef.h>
#include <stdint.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "skv_delta.h"
#include "skv_dtype_impl.h"

#define NF 4

/* A coded level's bit in skv_calib.levels, as calibration files and ids
 * hold it: bit 0 stat, 1 ctx, 2 spec, 3 full */
static inline unsigned level_bit(seqkv_level l)
{
    return 1u << ((int)l - SEQKV_STAT);
}

struct skv_calib {
    skv_kvshape sh;
    unsigned levels;     /* bit mask */
    float *mean;         /* [L][2][C] */
    float *s[SEQKV_LEVELS];  /* per coded level (none for raw): [L][2][seen][C] */
    float *w[SEQKV_LEVELS];  /* [L][2][H][seen][NF] */
    /* The codebook, sparse: a row for each of the n_tok distinct tokens of
     * the calibration data (so bounded by its tokens, not by the largest
     * id), cb_tok ascending; a token without a row is unseen (count 0). */
    size_t n_tok;
    int32_t *cb_tok;     /* [NT] the seen token ids, ascending */
    float *cb;           /* [L][NT][2][C], K before RoPE */
    int32_t *cb_n;       /* [NT] occurrences, >= 1 */
    uint8_t *cb_ok;      /* [L][NT][2]: the codebook row all_small (calib_index) */
    uint32_t pemp[256];
    float *inv_freq;     /* [rope_dim/2] */
    int rope_known;
    char model_fp[33];
    uint8_t id[16];
    /* stat's atoms (skv_atoms) per (layer, k/v, channel): counts, lambda in
     * 2^-16, and the values and counts of every channel's atoms in order */
    uint32_t *at_k, *at_lam; /* [L][2][C] */
    uint32_t *at_val, *at_cnt;
    size_t at_total;
};

static inline size_t chan_count(const skv_kvshape *s)
{
    return (size_t)s->kv_heads * (size_t)s->head_dim;
}

/* every value of magnitude at most 2^100, so finite (and RoPE of such a
 * row stays finite); four lanes at a time on the bits */
static inline int all_small(const float *v, size_t n)
{
    return !skv_any_above32(v, n, 0x7fffffffu, 0x71800000u);
}

/* Stat codes a run of constant rows (the same mu and s row) in one codec
 * call of up to this many rows: about 16k scalars, at least one row. */
static inline size_t batch_rows(size_t C)
{
    return C < 16384 ? 16384 / C : 1;
}

/* ---- calibration (calib.c, calib_io.c) --------------------------------------- */

/* At most this many codebook rows (distinct calibration tokens) */
#define SKV_CALIB_ROWS_MAX (1 << 24)

int calib_alloc(skv_calib *c);
/* The codebook row of token tok (-1: unseen), by binary search of cb_tok */
int32_t calib_row(const skv_calib *c, int32_t tok);
/* Whether the (layer, row, k/v) codebook row passes cb_ok (an unseen
 * token's, row -1, always does: its feature is the mean) */
static inline int calib_cb_ok(const skv_calib *c, size_t l, int32_t row, size_t kv)
{
    return row < 0 || c->cb_ok[(l * c->n_tok + (size_t)row) * 2 + kv];
}
/* A row's count (0 for an unseen token, row -1) */
static inline int32_t calib_count(const skv_calib *c, int32_t row)
{
    return row < 0 ? 0 : c->cb_n[row];
}
void rope_init(skv_calib *c);
void compute_id(skv_calib *c);
int calib_index(skv_calib *c);
int parse_float_meta(const skv_st *st, const char *key, float *out);

/* ---- levels (level.c) ------------------------------------------------------------ */

skv_mix level_mix(seqkv_level l);
int default_version(const skv_calib *cal, seqkv_level level);
int level_states(seqkv_level level);

/* ---- learning (learn.c, fit.c, atoms.c) ------------------------------------------ */

/* The calibration sample (sample.c): a window of each sequence learned
 * from, its rows [pos0, pos0 + T) in the dtype's bytes (2 bytes a scalar
 * for bf16, not floats: the sample is the learning's memory). Row 0 of a
 * window that does not start a sequence is context only (first = 1: the
 * previous position, which the first sample predicts from); samples are
 * rows first..T-1. */
struct skv_calib_sample {
    skv_kvshape sh;
    size_t n_seq;
    size_t *want, *start;   /* per sequence: its window's samples and first one */
    size_t *T, *pos0;
    uint8_t *first;
    int32_t **tok;          /* [T] (a prefix window: the sequence's tokens) */
    int32_t **row;          /* [T]: the token's codebook row (calib_row) */
    uint8_t **kv[2];        /* [L][T][C] dtype bytes, little-endian */
    size_t es;              /* bytes a scalar */
    size_t added;           /* sequences handed over */
};
typedef struct skv_calib_sample calib_data;

/* Scalar i of window sq's K (kv 0) or V as dtype bits and as a float */
static inline uint32_t cd_bits(const calib_data *d, int kv, size_t sq, size_t i)
{
    const uint8_t *p = d->kv[kv][sq] + i * d->es;
    return d->es == 2 ? skv_load16_le(p) : d->es == 1 ? p[0] : skv_load32_le(p);
}

static inline float cd_val(const calib_data *d, int kv, size_t sq, size_t i)
{
    const uint32_t x = cd_bits(d, kv, sq, i);
    switch (d->sh.dtype) {
    case SEQKV_DT_BF16: return skv__bf16_to_f32((uint16_t)x);
    case SEQKV_DT_F16: return skv__f16_to_f32((uint16_t)x);
    case SEQKV_DT_F8E4M3: return skv__f8e4m3_to_f32((uint8_t)x);
    default: return skv_bits_f32(x);
    }
}

/* Row (layer l, row t) of window sq's K or V as C floats into out */
static inline void cd_row(const calib_data *d, int kv, size_t sq, size_t l, size_t t, size_t C,
                          float *out)
{
    skv_cast_to_f32(d->sh.dtype, out, d->kv[kv][sq] + (l * d->T[sq] + t) * C * d->es, C);
}

/* Whether the learning was asked to stop (opts->stop) */
static inline int calib_stopped(const int *stop)
{
    return stop && __atomic_load_n(stop, __ATOMIC_RELAXED);
}

/* Fit level lvl's blend weights and spreads, its (layer, kv, head) groups
 * split over pool (NULL: this thread) */
int fit_level(skv_calib *c, const calib_data *d, seqkv_level lvl, float *const *model_pred[2],
              int max_samples, skv_pool *pool, const skv_calib_opts *o);
int fit_atoms(skv_calib *c, const calib_data *d, skv_pool *pool, const int *stop);

/* ---- coding (coder.c, chunk.c, sequence.c) --------------------------------------- */

/* A pool thread's coder workspace */
struct coder_ws {
    skv_encoder *enc;
    skv_decoder *dec, *dec2; /* dec2: a layer's V stream, decoded with its K (code_pair) */
    void *pair;              /* code_pair's rows, paircap bytes */
    size_t paircap;
    float *cbf;
    uint32_t *xb; /* stat's runs of constant rows: batch_rows(C) rows */
};

struct skv_delta {
    const skv_calib *cal;
    seqkv_level level;
    const skv_model *model; /* the predictor actually run (int8 copy or float32) */
    skv_model *owned;
    skv_pool *pool;
    skv_cmodel *cm;
    skv_atoms **atoms;      /* [L][2] (stat): NULL where no channel has atoms */
    int plain;              /* SEQKV_PLAIN_PREDICT set: predict() per scalar, no constant rows
                             * (the tests compare the bytes with the fast path's) */
    int nws;
    struct coder_ws *ws;    /* one per pool thread */
    double *ideal, *bytes;
    int ideal_on; /* encoders add up the ideal code length (skv_delta_set_ideal) */
    int version;  /* the stream version encoders write (skv_delta_set_stream_version) */
    uint64_t *nsc;
};

/* What coding a sequence does: encode its rows to streams, decode them
 * from streams, or hand back each scalar's prediction (mu) alone */
typedef enum { CODE_ENCODE, CODE_DECODE, CODE_PREDICT } code_mode;

/* The state of coding one sequence: exact values as floats (what the
 * predictors read) and as dtype bytes (what is coded). */
typedef struct {
    skv_delta *d;
    const int32_t *tok;
    int32_t *row;           /* [T] each token's codebook row (-1: unseen), made once */
    size_t T;
    uint8_t *kvb[2];        /* dtype bytes [L][T][C] (encode: input; decode: output) */
    float *kvf[2];          /* exact floats [L][T][C], filled as decoded (a
                               model's levels; NULL without one) */
    size_t t0, t1;
    code_mode mode;
    const skv_streams *in;
    size_t first_stream;
    size_t chunk_index;
    skv_streams *out;
    const skv_delta_aux *aux;   /* optional second prediction (range coding) */
    size_t start;               /* first coded position */
    size_t stride;              /* positions per layer in kvb (>= T) */
    float *mu_out[2];           /* CODE_PREDICT: mu per scalar [L][end-start][C] */
    float *rope_sc;             /* [T][rope_dim/2][sin, cos] (rope_angles) or NULL */
    float *rope_cs;             /* [T][2][rope_dim] (rope_cs) where rope_lanes, or NULL */
    int rc;
} seq_ctx;

/* Code the current chunk [q->t0, q->t1) of a model-free level, its
 * streams in parallel (chunk.c) */
int code_chunk_parallel(seq_ctx *q);
/* Decode stream (l, kv) of the current chunk with pool worker's workspace
 * (kv -1: both of layer l, together where code_pair can) */
int code_one_stream(seq_ctx *q, int worker, int l, int kv);
/* The model's KV hook that codes each layer of the chunk (chunk.c) */
void coder_hook(void *vctx, int layer, size_t pos0, size_t n, float *k, float *v);

#endif
