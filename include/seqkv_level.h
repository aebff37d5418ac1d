/*
 * seqkv_level.h - the coding levels, one enum for the store (a profile's
 * level, each record's) and the predictive-delta coder (every level but
 * raw): what predicts a scalar before the lossless stage codes it.
 */
#ifndef SEQKV_LEVEL_H
#define SEQKV_LEVEL_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    SEQKV_RAW = 0,  /* no predictor: the bytes as given (still deduplicated) */
    SEQKV_STAT = 1, /* per-channel statistics */
    SEQKV_CTX = 2,  /* context predictors (previous position, codebook) */
    SEQKV_SPEC = 3, /* int8 copy of the model over the exact KV */
    SEQKV_FULL = 4, /* the model itself: the recompute end */
    SEQKV_FAST = 5, /* no predictor: static per-channel tables (skv_fast_*) */
    SEQKV_LOSSY = 6, /* a chunk record's only: the opt-in lossy tier (a
                        profile's `lossy` setting, never a level to code
                        at or to parse; not counted in SEQKV_LEVELS) */
} seqkv_level;
#define SEQKV_LEVELS 6
/* Whether level l codes against a predictor (stat..full), and so needs a
 * calibration and the delta coder; raw and fast need neither. */
static inline int seqkv_level_predictive(seqkv_level l)
{
    return l >= SEQKV_STAT && l <= SEQKV_FULL;
}
/* "raw", "stat", "ctx", "spec", "full", "fast", "lossy"; "?" for any other value. */
const char *seqkv_level_name(seqkv_level l);
/* The level of such a name; SKV_ERR_ARG for an unknown one. */
int seqkv_level_parse(const char *s, seqkv_level *out);

#ifdef __cplusplus
}
#endif
#endif /* SEQKV_LEVEL_H */
