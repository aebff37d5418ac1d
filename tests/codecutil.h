/* Helpers shared by the codec suites (test_codec_*.c): dtype bits,
 * sequences of scalars with their (mu, s), encoding and decoding them
 * with the Criterion checks of every call, the golden input formula, and
 * the generators of test data (gaussian, edge values, hostile (mu, s),
 * atoms). They assert with Criterion: call them from a test only. */
#ifndef SKV_CODECUTIL_H
#define SKV_CODECUTIL_H
#include <stddef.h>
#include <stdint.h>

#include "skv_codec.h"
#include "testutil.h"

/* The golden input formula of tests/golden/codec/make_golden.c (GOLD_DT,
 * GOLD_CALIB, gold_input; keep it, and tests/fuzz/fuzz_stream.c, in
 * step) */
#include "golden/codec/golden_inputs.h"

/* The four float dtypes, in the order the suites loop over them. */
extern const seqkv_dtype DTYPES[4];

int nbits(seqkv_dtype dt);
uint32_t width_mask(seqkv_dtype dt);
/* first magnitude code that is not finite (fp8: the NaN 0x7f) */
uint32_t inf_mag(seqkv_dtype dt);
int is_finite_bits(seqkv_dtype dt, uint32_t x);
uint32_t to_dt(seqkv_dtype dt, float v);
float from_dt(seqkv_dtype dt, uint32_t x);
/* skv_cmodel_create, asserted to succeed */
skv_cmodel *model_new(seqkv_dtype dt, skv_mix mix, const uint32_t *hist);

/* A sequence of scalars with their (mu, s). */
typedef struct {
    seqkv_dtype dt;
    size_t n, cap;
    uint32_t *x;
    float *mu, *s;
} seq_t;

void seq_init(seq_t *q, seqkv_dtype dt, size_t cap);
void seq_push(seq_t *q, uint32_t x, float mu, float s);
void seq_free(seq_t *q);
/* (mu, s) of scalar i; past the end (a damaged n) the sequence repeats. */
void seq_param(const seq_t *q, size_t i, float *mu, float *s);

/* Encode q with a fresh encoder; returns an exact-size malloc'd copy so
 * that ASan sees any read past the end of the stream. */
uint8_t *encode_with(skv_encoder *e, const seq_t *q, const uint8_t *calib, size_t *len);
uint8_t *encode_seq(skv_cmodel *m, const seq_t *q, const uint8_t *calib, size_t *len);
/* Decode with q's (mu, s): the first error of begin, get (i < n; version
 * 2: get_n of each group of eight) and end, or 0. Scalars i < q->n land in
 * out (if not NULL). Never asks for more than max_get scalars (a damaged
 * n), in which case end reports. */
int decode_with(skv_decoder *d, const uint8_t *buf, size_t len, const seq_t *q, uint32_t *out,
                skv_stream_info *info_out);
int decode_seq(skv_cmodel *m, const uint8_t *buf, size_t len, const seq_t *q, uint32_t *out,
               skv_stream_info *info);
/* Encode, decode, compare every scalar's bits. Returns the stream size. */
size_t assert_round_trip(skv_cmodel *m, const seq_t *q, const char *what);
/* The finished stream of e (malloc'd, of the encoder's bound). */
uint8_t *finish_copy(skv_encoder *e, size_t *len);

/* Log-uniform in [10^lo, 10^hi). */
float log_uniform(skv_rng *r, float lo, float hi);

/* The golden streams' sizes and histogram (make_golden.c) */
#define N_GOLD 300
void gold_hist(uint32_t *hist);
/* The first n scalars of the golden formula for dtype index di. */
void gold_seq(seq_t *q, int di, size_t n);

/* Gaussian scalars around mu with s from 1e-8 to 1e4 and |mu| from 1e-10 to
 * 1e6 (and 0); one in five drawn far from mu, a few hundred-fold outliers. */
void gaussian_seq(seq_t *q, seqkv_dtype dt, size_t n, uint64_t seed);
/* Edge values per dtype (dtype bits) into v (room for 32); the count. */
size_t edge_values(seqkv_dtype dt, uint32_t *v);
/* hostile and model-like (mu, s): any float bits, values near the
 * lattices' edges, tiny and huge spreads */
void random_mu_s(skv_rng *r, seqkv_dtype dt, float *mu, float *s);

/* Atoms: the channels of test_atoms */
#define AT_NCH 5
int cmp_u32_test(const void *a, const void *b);
/* Atoms for AT_NCH channels of dt: channel 0 none, channel 3 atoms with
 * lambda 0 (off), the others a few of the edge values plus values near
 * 1.0, with counts. */
skv_atoms *test_atoms(seqkv_dtype dt, uint32_t lambda_scale);
/* Scalars for the atoms channels: atoms, edge values, near values. */
void atoms_seq(seq_t *q, seqkv_dtype dt, size_t n, uint64_t seed);
#endif
