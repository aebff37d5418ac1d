/*
 * skv_codec.h - the lossless entropy stage. Each scalar x of a storage
 * dtype is coded against a prediction mu and a spread s (value units)
 * under the mixture
 *     q(x) = w0 N(mu, s^2) + w1 N(mu, (3s)^2)  (integrated over x's cell)
 *            + w2 p_emp(x)                       (escape path)
 * with interleaved rANS (4 states, 16-bit frequencies) into self-checking
 * streams. Encoder and decoder derive identical integer frequency tables
 * from identical inputs: tables are built with integer arithmetic from
 * skv_normal_cdf (IEEE basic operations only), never libm.
 *
 * How a scalar is coded (FORMAT.md, "Coded streams"):
 *  - STEP mode, when the dtype's lattice at mu is at least as coarse as
 *    s/8: the signed distance r, in lattice steps, between x and the
 *    lattice point nearest mu, under the mixture in step units (classes of
 *    s/step, 8 per octave, and of mu's offset inside its cell).
 *  - BUCKET mode otherwise (the lattice is fine relative to s): x's bucket
 *    of width g = 2^floor(log2 s - 3) in value space, under the mixture in
 *    bucket units (8 classes of s/g, 4 of mu's phase), then x's place in
 *    the bucket, uniform in value: plain bits inside one binade, a
 *    geometric sub-binade code in the bucket at zero.
 *  - ESCAPE, for anything else (outside the table window, inf, NaN, -0 in
 *    odd places): the high byte of x under the calibrated empirical
 *    marginal p_emp, the rest as plain bits. Every bit pattern survives.
 *
 * The fast level's streams (below, "Fast streams") are a separate,
 * model-free format. Depends on seqkv.h (errors, dtypes) only.
 */
#ifndef SKV_CODEC_H
#define SKV_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "skv_dtype.h"
#include "seqkv.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SKV_CODEC_PREC 16 /* frequency precision, bits */

/* Mixture weights in units of 2^-16: w0 (N(mu, s^2)) is what w1 and w2
 * leave. Defaults: w1 = 0.03, w2 = 0.02. */
typedef struct {
    uint32_t w1;  /* N(mu, (3s)^2) */
    uint32_t w2;  /* escape (p_emp) */
} skv_mix;
#define SKV_MIX_DEFAULT ((skv_mix){1966u, 1311u})

/* A coding model: dtype, mixture weights and p_emp (a histogram of the
 * high byte of the dtype's bit patterns; NULL means uniform). Tables are
 * built lazily, thread-safely. */
typedef struct skv_cmodel skv_cmodel;

int skv_cmodel_create(seqkv_dtype dt, skv_mix mix, const uint32_t pemp_hist[256],
                      skv_cmodel **out);
void skv_cmodel_free(skv_cmodel *m);
seqkv_dtype skv_cmodel_dtype(const skv_cmodel *m);
/* 32-bit identity of (dtype, mixture, p_emp, table construction version);
 * recorded in every stream, checked by the decoder. */
uint32_t skv_cmodel_id(const skv_cmodel *m);

/* Code length of x (dtype bits) given (mu, s): `actual` is -log2 of the
 * quantized 16-bit frequencies (what the coder spends, before the few
 * bytes of rANS overhead); `ideal` is -log2 of the unquantized model
 * probability. Either pointer may be NULL. */
void skv_cmodel_cost(skv_cmodel *m, uint32_t x, float mu, float s, double *actual,
                     double *ideal);

/* ------------------------------------------------------------------------
 * Atoms: a per-channel empirical distribution over exact dtype values,
 * mixed in front of the model. For a stream whose scalar i belongs to
 * channel i mod nch, a channel with atoms first codes which of its atoms x
 * is (probability lambda * count / sum of counts) or "none" (1 - lambda);
 * "none" then codes x under the mixture as usual. Channels with no atoms
 * (k = 0 or lambda = 0) code exactly as without atoms. Frequencies come
 * from the integer counts (FORMAT.md, "Coded streams", atoms).
 * ---------------------------------------------------------------------- */
#define SKV_ATOMS_MAX 4096 /* atoms per channel */
typedef struct skv_atoms skv_atoms;
/* nch channels; channel c has k[c] atoms, values (dtype bits, strictly
 * increasing) and counts (>= 1) at vals/cnts + off where off is the sum of
 * k[0..c), and lambda[c] in units of 2^-16 (0..65535; 0 disables the
 * channel). Errors: SKV_ERR_ARG (unsorted or out-of-range values, a
 * count of 0, k > SKV_ATOMS_MAX, a non-float dtype), SKV_ERR_NOMEM. */
int skv_atoms_create(seqkv_dtype dt, uint32_t nch, const uint32_t *k, const uint32_t *lambda,
                     const uint32_t *vals, const uint32_t *cnts, skv_atoms **out);
void skv_atoms_free(skv_atoms *a);
/* 32-bit identity of the atoms' quantized tables; folded into the model id
 * that streams coded with them record. */
uint32_t skv_atoms_id(const skv_atoms *a);

/* ------------------------------------------------------------------------
 * Streams. One stream codes n scalars in order; the caller supplies each
 * scalar's (mu, s), which may depend on the scalars before it (the decoder
 * hands them back in the same order).
 * ---------------------------------------------------------------------- */
#define SKV_STREAM_MAGIC 0x52564b53u /* "SKVR" */
#define SKV_STREAM_VERSION 1
#define SKV_STREAM_HEADER 48
#define SKV_STREAM_MAX_SCALARS (1u << 30)

typedef struct skv_encoder skv_encoder;
int skv_encoder_create(skv_cmodel *m, skv_encoder **out);
void skv_encoder_free(skv_encoder *e);
/* Start a stream; calib_id is recorded in its header (16 bytes, may be
 * NULL for zeros). */
void skv_encoder_reset(skv_encoder *e, const uint8_t calib_id[16]);
/* The same, coding with atoms (NULL: none). The atoms must outlive the
 * stream; the stream's model id becomes the pair's (skv_stream_model_id). */
void skv_encoder_reset_atoms(skv_encoder *e, const uint8_t calib_id[16], const skv_atoms *atoms);
/* Queue one scalar. */
int skv_encoder_put(skv_encoder *e, uint32_t x, float mu, float s);
/* Queue n scalars x[i] with predictions (mu[i], s[i]): the same stream as
 * n calls of skv_encoder_put, faster (the hot path; callers that have a
 * row of predictions at once should use it). Errors: SKV_ERR_TOO_LARGE
 * (the stream would exceed SKV_STREAM_MAX_SCALARS; nothing is queued),
 * SKV_ERR_NOMEM (the stream is then unusable until the next reset). */
int skv_encoder_put_n(skv_encoder *e, const uint32_t *x, const float *mu, const float *s,
                      size_t n);
/* Queue rows of n scalars that share one row of predictions: row r is
 * x[r * n .. r * n + n), all under (mu[0..n), s[0..n)). The same stream as
 * rows calls of skv_encoder_put_n with that row, faster for short rows
 * (the row is classified, or found in the row cache, once). Errors as
 * put_n; on SKV_ERR_NOMEM rows before the failing one may be queued, and
 * the stream is unusable until the next reset. */
int skv_encoder_put_rows(skv_encoder *e, const uint32_t *x, const float *mu, const float *s,
                         size_t n, size_t rows);
/* Ideal code length (bits, unquantized model) of the scalars queued since
 * the last reset; NaN for a stream coded without it (skv_encoder_set_ideal). */
double skv_encoder_ideal_bits(const skv_encoder *e);
/* Whether the streams from the next reset on add up their ideal code length
 * (on after create). The sum costs a table load and an add a symbol, which
 * coders that only want the bytes (the store) turn off; the bytes are the
 * same either way. */
void skv_encoder_set_ideal(skv_encoder *e, int on);
/* Version 2 streams are decoded in groups of this many scalars. */
#define SKV_V2_GROUP 8
/* The stream version written from the next reset on (1 after create; 2:
 * the lane layout of FORMAT.md, which a decoder takes in whole groups of
 * eight scalars). SKV_ERR_ARG for any other. */
int skv_encoder_set_version(skv_encoder *e, int version);
/* Version 2's rANS states from the next reset on: 16 (after create) or 8,
 * which costs 32 fewer bytes a stream (FORMAT.md; short streams) and
 * decodes a little slower. SKV_ERR_ARG for any other count. */
int skv_encoder_set_states(skv_encoder *e, int states);
/* Upper bound of the stream size for n queued scalars. */
size_t skv_encoder_bound(const skv_encoder *e);
/* Write the stream; SKV_ERR_TOO_LARGE if cap is too small. */
int skv_encoder_finish(skv_encoder *e, uint8_t *dst, size_t cap, size_t *len);

typedef struct {
    seqkv_dtype dtype;
    uint32_t n;          /* scalars */
    uint32_t payload;    /* bytes after the header */
    uint32_t cmodel_id;
    uint64_t checksum;   /* of the decoded scalars (FORMAT.md) */
    uint8_t calib_id[16];
    uint32_t version;    /* 1, or 2: get_n must then take whole groups of eight */
    uint32_t raw;        /* version 2: bytes of the raw bit stream at the payload's end */
    uint32_t states;     /* rANS states: 4 (version 1), 16 or 8 (version 2) */
} skv_stream_info;

/* Parse and check a stream header (magic, version, sizes against len). */
int skv_stream_info_read(const uint8_t *src, size_t len, skv_stream_info *info);

typedef struct skv_decoder skv_decoder;
int skv_decoder_create(skv_cmodel *m, skv_decoder **out);
void skv_decoder_free(skv_decoder *d);
/* Begin decoding src[0..len): checks header, model id and sizes. */
int skv_decoder_begin(skv_decoder *d, const uint8_t *src, size_t len, skv_stream_info *info);
/* The same for a stream coded with atoms (NULL: none); they must outlive
 * the decoding. A stream coded with other atoms is refused like one coded
 * with other tables (SKV_ERR_CORRUPT). */
int skv_decoder_begin_atoms(skv_decoder *d, const uint8_t *src, size_t len, const skv_atoms *atoms,
                            skv_stream_info *info);
/* The model id a stream coded with m and atoms (NULL: m's id) records. */
uint32_t skv_stream_model_id(const skv_cmodel *m, const skv_atoms *atoms);
/* Next scalar given its (mu, s). Errors: SKV_ERR_CORRUPT (an impossible
 * symbol, reading past the payload), SKV_ERR_ARG (more than n; a version
 * 2 stream's scalar that does not end a group). */
int skv_decoder_get(skv_decoder *d, float mu, float s, uint32_t *x);
/* The next n scalars into x[0..n), given their (mu[i], s[i]): the same
 * values as n calls of skv_decoder_get, faster. Errors as skv_decoder_get
 * (SKV_ERR_ARG, with nothing decoded, when fewer than n are left); on
 * SKV_ERR_CORRUPT the scalars before the damaged one are in x and the
 * decoder refuses further calls. */
int skv_decoder_get_n(skv_decoder *d, const float *mu, const float *s, uint32_t *x, size_t n);
/* Two streams' next n scalars each, stream k's into x[k] given mu[k],
 * s[k]: the same values as skv_decoder_get_n on each. Version 2 streams
 * of eight states at the same index (K and V of a layer) are decoded
 * together, their groups in turn, so that one stream's group runs while
 * the other's waits on its loads. Errors as skv_decoder_get_n, for the
 * first stream that has one (the other may then hold part of its row). */
int skv_decoder_get_n2(skv_decoder *const d[2], const float *const mu[2], const float *const s[2],
                       uint32_t *const x[2], size_t n);
/* (A version 2 stream is decoded a group of eight scalars at a time: a
 * call must start at a multiple of 8 and take a multiple of 8, or all
 * that is left; SKV_ERR_ARG, with nothing decoded, otherwise.) */
/* Up to rows rows of n scalars under one row of predictions (the
 * counterpart of skv_encoder_put_rows) into x[0..rows * n): the same values
 * as that many calls of skv_decoder_get_n. Stops after the first row that
 * holds a scalar whose magnitude (its bits without the sign bit) is above
 * big, for callers whose next prediction depends on that (UINT32_MAX: never
 * stops). *done: the rows decoded. Errors as get_n (SKV_ERR_ARG, with
 * nothing decoded, when fewer than rows * n scalars are left; on
 * SKV_ERR_CORRUPT the rows before *done are whole, and the damaged row
 * holds the scalars before the damaged one). */
int skv_decoder_get_rows(skv_decoder *d, const float *mu, const float *s, size_t n, size_t rows,
                         uint32_t big, uint32_t *x, size_t *done);
/* After n scalars: the payload must be fully consumed and the checksum
 * must match (SKV_ERR_CORRUPT otherwise). */
int skv_decoder_end(skv_decoder *d);

/* ------------------------------------------------------------------------
 * Fast streams: the model-free `fast` level (FORMAT.md, "Fast streams").
 * rows x channels scalars, row-major, in one self-contained stream: for
 * 16-bit dtypes bits 7..14 of each scalar (bf16's exponent) are coded
 * under static 12-bit tables, one per group of channels, stored in the
 * stream, by 32 interleaved rANS states; sign and low mantissa bits are
 * stored raw. fp8-e4m3 codes its whole byte. No model, no calibration;
 * the bytes do not depend on the CPU (the decoder has scalar, AVX2 and
 * AVX-512 paths that decode the same values).
 * ---------------------------------------------------------------------- */
#define SKV_FAST_MAGIC 0x51564b53u /* "SKVQ" */
#define SKV_FAST_VERSION 2
#define SKV_FAST_HEADER 40
#define SKV_FAST_MAX_SCALARS (1u << 30)

/* Upper bound of skv_fast_encode's output for rows x channels scalars of
 * dt; 0 when the fast level cannot code them (dtype other than bf16, f16,
 * f8e4m3; no rows or channels; more than SKV_FAST_MAX_SCALARS). */
size_t skv_fast_bound(seqkv_dtype dt, size_t rows, size_t channels);
/* Code src (rows x channels scalars of dt, row-major, little-endian
 * element bytes as stored) into dst[0..cap); *len: the stream's size.
 * Allocates scratch (freed before it returns). Errors: SKV_ERR_ARG (f32,
 * i32 or another dtype the level does not code; no rows or channels; a
 * NULL pointer), SKV_ERR_TOO_LARGE (more than SKV_FAST_MAX_SCALARS; cap
 * too small: skv_fast_bound is always enough), SKV_ERR_NOMEM. */
int skv_fast_encode(seqkv_dtype dt, const void *src, size_t rows, size_t channels, uint8_t *dst,
                    size_t cap, size_t *len);
/* Decode the stream src[0..len), which must be exactly one stream of
 * rows x channels scalars of dt, into dst (dst_cap >= rows * channels *
 * element size). Trusts nothing in src. Errors: SKV_ERR_FORMAT (not a
 * fast stream, or another dtype or shape than asked), SKV_ERR_VERSION (a
 * newer version), SKV_ERR_CORRUPT (sizes, tables, words, final states or
 * the checksum of the decoded scalars wrong; dst may then hold garbage),
 * SKV_ERR_ARG (dst_cap too small, NULL), SKV_ERR_NOMEM. */
int skv_fast_decode(const uint8_t *src, size_t len, seqkv_dtype dt, size_t rows, size_t channels,
                    void *dst, size_t dst_cap);

/* ------------------------------------------------------------------------
 * Symbol streams (FORMAT.md, "Symbol streams"): categorical symbols, each
 * coded under a static table of its own choosing, by one rANS state
 * (32-bit, bytes out). A table gives every symbol of its alphabet a
 * frequency >= 1 of 2^SKV_SYM_PREC, so any symbol stays codable.
 * ---------------------------------------------------------------------- */
#define SKV_SYM_PREC 15
#define SKV_SYM_MAX (1u << 14) /* the largest alphabet */
typedef struct skv_symtab skv_symtab;

/* A table for the alphabet [0, n) from counts (NULL: uniform), by
 * integer arithmetic only: the same counts give the same table anywhere.
 * Errors: SKV_ERR_ARG (n == 0 or above SKV_SYM_MAX), SKV_ERR_NOMEM. */
int skv_symtab_build(const uint64_t *counts, uint32_t n, skv_symtab **out);
/* A table from stored frequencies; SKV_ERR_CORRUPT unless each is >= 1
 * and they sum to 2^SKV_SYM_PREC. */
int skv_symtab_from_freqs(const uint16_t *freq, uint32_t n, skv_symtab **out);
void skv_symtab_free(skv_symtab *t);
uint32_t skv_symtab_size(const skv_symtab *t);
const uint16_t *skv_symtab_freqs(const skv_symtab *t);
/* What symbol s costs under t, in bits. */
double skv_symtab_bits(const skv_symtab *t, uint32_t s);
/* Upper bound of skv_sym_encode's output for n symbols. */
size_t skv_sym_bound(size_t n);
/* Code syms[i] under tabs[i], i < n, into dst[0..cap); *len its size.
 * Errors: SKV_ERR_ARG (a symbol outside its table), SKV_ERR_TOO_LARGE. */
int skv_sym_encode(const uint32_t *syms, const skv_symtab *const *tabs, size_t n, uint8_t *dst,
                   size_t cap, size_t *len);
/* Decode exactly n symbols from src[0..len), which they must use whole.
 * Trusts nothing in src: SKV_ERR_CORRUPT for a stream that ends early,
 * runs on or leaves its state anywhere but where the encoder began. */
int skv_sym_decode(const uint8_t *src, size_t len, const skv_symtab *const *tabs, size_t n,
                   uint32_t *syms);

/* The same one symbol at a time, each table chosen as the symbols before
 * it say (the state is the caller's; nothing allocated). */
typedef struct {
    const uint8_t *src;
    size_t len, pos;
    uint32_t x;
} skv_symdec;
int skv_symdec_begin(skv_symdec *d, const uint8_t *src, size_t len);
int skv_symdec_get(skv_symdec *d, const skv_symtab *t, uint32_t *sym);
/* SKV_ERR_CORRUPT unless the stream was used whole and its state is back
 * where the encoder began. */
int skv_symdec_end(const skv_symdec *d);

/* 64-bit checksum used by streams (a fixed multiply-xorshift hash). */
uint64_t skv_checksum64(const void *data, size_t len, uint64_t seed);

#ifdef __cplusplus
}
#endif
#endif /* SKV_CODEC_H */
