/* codec_baselines.h - codec bench's zstd baselines and fast level
 * (cli/codec_baselines.c). */
#ifndef SKV_CODEC_BASELINES_H
#define SKV_CODEC_BASELINES_H

#include <stddef.h>
#include <stdint.h>

#include "skv_dtype.h"

/* The test set: all K then V bytes of every sequence back to back (all,
 * n scalars of es bytes, for zstd), and per sequence its K and V
 * ([layers][T][C]) for the fast streams. */
typedef struct {
    const uint8_t *all;
    size_t n, es;
    seqkv_dtype dt;
    size_t layers, C, chunk, n_seq;
    const size_t *T;
    const uint8_t *const *k, *const *v;
    long reps;
    int json;
} cb_input;

/* zstd -1/-3/-19 on the raw bytes and on byte planes (their decode speed,
 * one thread, best of reps). */
void cli_codec_baselines(const cb_input *in);
/* The fast level, whole set and per chunk stream; an error code when a
 * stream fails or does not round-trip. */
int cli_codec_fast(const cb_input *in);

#endif
