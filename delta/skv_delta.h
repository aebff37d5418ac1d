/*
 * skv_delta.h - predictors and calibration: every KV scalar is coded as a
 * residual against a prediction mu with a calibrated spread s, losslessly,
 * through skv_codec. Encoder and decoder run the same predictor code on the
 * same already-decoded data.
 *
 * Levels (ARCHITECTURE.md, "Predictors"):
 *   stat  calibrated per-(layer, k/v, head, channel) mean
 *   ctx   least-squares blend per (layer, k/v, head) of: the previous
 *         position in the same channel, a per-(layer, token) codebook of
 *         mean K (learned before RoPE, rotated to the position) and V, and
 *         the channel mean  -- the "top-k expected KV"
 *   spec  the int8 copy of the model attending over the exact, already
 *         decoded KV (layer by layer through the engine's KV hook), blended
 *         with the ctx candidates
 *   full  the float32 model the same way: the recompute end
 *
 * Streams: a sequence is cut into chunks of `chunk` tokens; each chunk has
 * one stream per (layer, K|V), scalars in [position][kv_head][head_dim]
 * order. Depends on skv_codec, skv_model, skv_tensor, skv_base.
 */
#ifndef SKV_DELTA_H
#define SKV_DELTA_H

#include <stddef.h>
#include <stdint.h>

#include "seqkv.h"
#include "skv_codec.h"
#include "skv_model.h"
#include "skv_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The coder takes every level of seqkv.h but SEQKV_RAW. */

/* The calibration file version this build writes and the only one it
 * reads (a sparse codebook, stat's atoms); 1 and 2 (dense codebooks) are
 * refused with SKV_ERR_VERSION. */
#define SKV_CALIB_VERSION 3

/* Shape and RoPE of the KV a calibration describes. */
typedef struct {
    int layers, kv_heads, head_dim, vocab;
    seqkv_dtype dtype;
    float rope_theta;
    int rope_dim;
    skv_rope_layout rope_layout;
} skv_kvshape;

typedef struct skv_calib skv_calib;

typedef struct {
    const skv_model *model;   /* float32 model: needed for spec and full */
    skv_pool *pool;           /* threads for the model's forward passes */
    int max_fit_samples;      /* per channel, for fitting s (0: by the shape, 512 to 4096) */
    int quiet;                /* no progress on stderr */
    /* positions learned from, at most (0: SKV_CALIB_SAMPLE_POSITIONS, and
     * no more than SKV_CALIB_SAMPLE_BYTES of KV; SIZE_MAX: every one) */
    size_t sample_positions;
    const int *stop;          /* when *stop turns non-zero: SKV_ERR_CANCELLED soon */
} skv_calib_opts;

/* The default sample: at most this many positions, and at most this
 * many bytes of KV (for Llama-3-8B's 128 KiB a token: 2,048 positions) */
#define SKV_CALIB_SAMPLE_POSITIONS 16384
#define SKV_CALIB_SAMPLE_BYTES ((size_t)256 << 20)
/* A sample of P positions takes windows from the first P / this many
 * sequences at most (Llama-3-8B's 2,048 positions: 16 sequences) */
#define SKV_CALIB_WINDOW_MIN 128

/* A calibration sample: what a calibration learns from, a window of each
 * of n sequences whose lengths are known before their KV is (stored
 * sequences decoded one at a time, so memory is bounded by the sample,
 * not by what is stored). The windows split the positions as evenly as
 * the lengths allow; where a window is shorter than its sequence it
 * starts at a position chosen by the sequence's hash (h: an unkeyed hash
 * of its tokens, so the sample depends on what is stored, not on a key or
 * a CPU), or at 0 when prefix (a calibration with a model: its forward
 * pass needs the whole prefix). sh: the KV's shape, RoPE and vocabulary. */
typedef struct skv_calib_sample skv_calib_sample;
int skv_calib_sample_create(const skv_kvshape *sh, size_t n, const size_t *T, const uint64_t *h,
                            size_t max_positions, int prefix, skv_calib_sample **out);
/* The positions sequence i's window needs: [0, *end) of its tokens and KV */
size_t skv_calib_sample_end(const skv_calib_sample *s, size_t i);
/* Sequence i (its shape, and at least skv_calib_sample_end positions)
 * into the sample: its window is copied. */
int skv_calib_sample_add(skv_calib_sample *s, size_t i, const skv_kvseq *q);
/* Learn from a sample every sequence of which was added; the shape's
 * vocabulary grows to hold its tokens */
int skv_calib_learn_sample(skv_calib_sample *s, const skv_calib_opts *opts, skv_calib **out);
void skv_calib_sample_free(skv_calib_sample *s);
/* The positions a default sample takes of KV of this shape */
size_t skv_calib_sample_default(const skv_kvshape *sh);

/* Learn a calibration from the sequences of a KV file (skv_kvfile_*).
 * Levels spec and full are calibrated only when opts->model is given and
 * matches the KV shape. RoPE parameters come from the model, else from the
 * file's metadata (seqkv.rope_*), else K's codebook is learned after RoPE. */
int skv_calib_learn(const skv_st *kvfile, const skv_calib_opts *opts, skv_calib **out);
void skv_calib_free(skv_calib *c);
int skv_calib_save(const skv_calib *c, const char *path);
/* The same file image in memory (skv_free it). */
int skv_calib_serialize(const skv_calib *c, uint8_t **out, size_t *len);
/* Load and verify (version, shapes, content hash). Errors: SKV_ERR_IO,
 * SKV_ERR_FORMAT (not a calibration / bad shapes), SKV_ERR_VERSION (a
 * version other than SKV_CALIB_VERSION),
 * SKV_ERR_CORRUPT (content hash mismatch), SKV_ERR_NOMEM. */
int skv_calib_load(const char *path, skv_calib **out);
/* The same from a file image in memory (borrowed). */
int skv_calib_parse(const uint8_t *buf, size_t len, skv_calib **out);
const skv_kvshape *skv_calib_shape(const skv_calib *c);
/* 16-byte content hash (BLAKE2b-128 of the calibration's tensors). */
const uint8_t *skv_calib_id(const skv_calib *c);
int skv_calib_has_level(const skv_calib *c, seqkv_level l);
/* Model fingerprint the spec/full levels were calibrated with ("" if none). */
const char *skv_calib_model(const skv_calib *c);

/* ------------------------------------------------------------------------
 * Coding one sequence.
 * ---------------------------------------------------------------------- */
typedef struct skv_delta skv_delta;

/* A coder for one level. spec and full need the float32 model (the int8
 * copy is made inside); its fingerprint must match the calibration's.
 * pool (may be NULL) runs the model's forward passes and, for stat and
 * ctx, the (layer, k/v) streams of a chunk in parallel; the bytes do not
 * depend on it. One coder codes one sequence at a time. */
int skv_delta_create(const skv_calib *cal, seqkv_level level, const skv_model *model,
                     skv_pool *pool, skv_delta **out);
void skv_delta_free(skv_delta *d);

typedef struct {
    uint8_t *data;   /* concatenated streams (borrowed when cap == 0) */
    size_t len, cap;
    size_t *offs;    /* stream i occupies [offs[i], offs[i+1]) */
    size_t nstreams, ncap;
} skv_streams;
void skv_streams_free(skv_streams *s);
/* No streams, the memory kept for the next appends (s owns its data) */
void skv_streams_clear(skv_streams *s);
/* Append one stream of n bytes (copied). */
int skv_streams_append(skv_streams *s, const uint8_t *p, size_t n);

/* Encode a sequence: k and v in the calibration's dtype, KV file layout
 * [layers][T][kv_heads][head_dim]. Appends chunks*layers*2 streams. */
int skv_delta_encode(skv_delta *d, const int32_t *tokens, size_t T, const void *k,
                     const void *v, size_t chunk, skv_streams *out);
/* Decode the same; k and v receive the exact bytes. */
int skv_delta_decode(skv_delta *d, const int32_t *tokens, size_t T, const skv_streams *in,
                     size_t first_stream, size_t chunk, void *k, void *v);

/* ------------------------------------------------------------------------
 * Range coding (the store): positions [start, end) of a sequence coded as
 * one chunk (2 * layers streams), the exact KV of [0, start) being context.
 * k and v hold [layers][stride][kv_heads][head_dim] dtype elements
 * (stride >= end); decoding reads positions < start from them and writes
 * [start, end).
 * ---------------------------------------------------------------------- */
/* An optional second prediction a per scalar (the KV of a centroid at
 * aligned positions), blended per (layer, k/v, head) h as
 *   mu' = w[h][0] * mu + w[h][1] * a,   s' = s * sscale[h]
 * where a is not NaN (NaN: no aligned position, mu and s unchanged). */
typedef struct {
    const float *pred[2];  /* K and V: [layers][end - start][C] */
    const float *w;        /* [layers][2][kv_heads][2] */
    const float *sscale;   /* [layers][2][kv_heads] */
} skv_delta_aux;
int skv_delta_encode_range(skv_delta *d, const int32_t *tokens, size_t start, size_t end,
                           size_t stride, const void *k, const void *v, const skv_delta_aux *aux,
                           skv_streams *out);
int skv_delta_decode_range(skv_delta *d, const int32_t *tokens, size_t start, size_t end,
                           size_t stride, const skv_streams *in, size_t first_stream, const skv_delta_aux *aux,
                           void *k, void *v);
/* skv_delta_decode_range a stream or a layer at a time: a model-free
 * level's layers do not depend on one another, and a stream of layer l
 * needs only layer l of the positions before start. open prepares what the
 * streams share (tokens are read there only, not after); stream decodes
 * layer l's K (kv 0) or V (kv 1) -- or both (kv -1), together where that is
 * faster -- with the workspace of the coder's pool thread `worker` (its
 * fn's worker argument; 0 without a pool). Streams of distinct (l, kv) may
 * decode at once on distinct workers, of one range or of several ranges of
 * the same coder; a stream of a range needs the same stream of the
 * positions before it decoded first. SKV_ERR_ARG for a level with a model,
 * whose layer l is predicted from layer l - 1. */
typedef struct skv_delta_range skv_delta_range;
int skv_delta_range_open(skv_delta *d, const int32_t *tokens, size_t start, size_t end,
                         size_t stride, const skv_streams *in, size_t first_stream,
                         const skv_delta_aux *aux, void *k, void *v, skv_delta_range **out);
int skv_delta_range_stream(skv_delta_range *r, size_t l, int kv, int worker);
void skv_delta_range_free(skv_delta_range *r);
/* The level's own predictions mu for [start, end) (no coding; the encoder
 * side, every value known): mu_k, mu_v receive [layers][end - start][C]. */
int skv_delta_predict_range(skv_delta *d, const int32_t *tokens, size_t start, size_t end,
                            size_t stride, const void *k, const void *v, float *mu_k, float *mu_v);
/* Cost accounting of the encodes since the last reset: ideal and actual
 * bits per layer and k/v (arrays of layers*2, index layer*2 + kv); the
 * ideal bits are NaN once a stream was coded without them. */
void skv_delta_costs(const skv_delta *d, const double **ideal_bits, const double **coded_bytes,
                     const uint64_t **scalars);
void skv_delta_reset_costs(skv_delta *d);
/* Whether encodes add up the ideal code length (on after create). It costs
 * the encoder a table load and an add a symbol (about 9% of ctx's encode);
 * coders that only want the bytes (the store) turn it off. The bytes are
 * the same either way. */
void skv_delta_set_ideal(skv_delta *d, int on);
/* The codec stream version encodes write (skv_encoder_set_version): 0 is
 * the level's default, 2 for stat (sixteen states) and ctx (eight) when the
 * dtype is bf16 and a row (kv_heads x head_dim) is whole groups of
 * SKV_V2_GROUP, else 1 -- never the CPU's choice (ARCHITECTURE.md,
 * "Determinism"). Decoders
 * read either. SKV_ERR_ARG for version 2 on rows that are not whole
 * groups, or a version not 0-2. */
int skv_delta_set_stream_version(skv_delta *d, int version);
int skv_delta_stream_version(const skv_delta *d);

/* ------------------------------------------------------------------------
 * Coded KV files ("SKVF", FORMAT.md): a 40-byte header, then per sequence
 * u32 T, T x i32 tokens, u32 stream count, u32 sizes, the streams.
 * ---------------------------------------------------------------------- */
#define SKV_CODED_MAGIC 0x46564b53u /* "SKVF" */
#define SKV_CODED_VERSION 1
#define SKV_CODED_HEADER 40

typedef struct {
    seqkv_level level;
    seqkv_dtype dtype;
    uint32_t n_seq, chunk;
    uint8_t calib_id[16];
} skv_coded_info;

int skv_coded_write_header(uint8_t out[SKV_CODED_HEADER], const skv_coded_info *info);
/* Errors: SKV_ERR_FORMAT (short, bad magic, bad fields), SKV_ERR_VERSION. */
int skv_coded_read_header(const uint8_t *buf, size_t len, skv_coded_info *info);
/* Read the sequence at *pos (advanced past it): T, its tokens (LE int32,
 * unaligned, into buf) and its streams (data borrowed from buf; free the
 * struct with skv_streams_free). SKV_ERR_FORMAT when anything is cut. */
int skv_coded_read_seq(const uint8_t *buf, size_t len, size_t *pos, uint32_t *T,
                       const uint8_t **tokens, skv_streams *s);

#ifdef __cplusplus
}
#endif
#endif /* SKV_DELTA_H */
