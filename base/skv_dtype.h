/*
 * skv_dtype.h - the storage dtypes' sizes, names and exact casts (the
 * seqkv_dtype enum is seqkv.h's).
 */
#ifndef SKV_DTYPE_H
#define SKV_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "seqkv.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
 * Storage dtypes. Values are stored little-endian. The casts from float32
 * round to nearest, ties to even; their overflow and NaN rules are in
 * FORMAT.md ("Storage dtypes") and summarised here:
 *   bf16  : overflow rounds to +-inf as IEEE does; NaN stays NaN, sign and
 *           top 7 payload bits kept, quiet bit forced.
 *   fp16  : overflow (|x| >= 65520) gives +-inf; subnormals kept exactly
 *           rounded; NaN stays NaN, sign and top 10 payload bits kept,
 *           quiet bit forced.
 *   fp8   : OCP E4M3 ("e4m3fn": bias 7, no infinities, max 448, NaN is
 *           S.1111.111). Saturating: finite values beyond 448 and +-inf
 *           give +-448; NaN gives 0x7F with the sign of the input.
 * The casts to float32 are exact.
 * ---------------------------------------------------------------------- */


/* Bytes per element (0 for an unknown dtype). */
size_t skv_dtype_size(seqkv_dtype dt);
/* safetensors spelling: "F32", "BF16", "F16", "F8_E4M3", "I32". */
const char *skv_dtype_name(seqkv_dtype dt);
/* Parse a safetensors dtype name (not NUL-terminated); SKV_ERR_UNSUPPORTED
 * for a valid but unhandled name. */
int skv_dtype_from_name(const char *name, size_t len, seqkv_dtype *out);
/* Parse a user spelling: bf16, fp16/f16, fp8/f8_e4m3, fp32/f32 (any case). */
int skv_dtype_from_user(const char *name, seqkv_dtype *out);

uint16_t skv_f32_to_bf16(float x);
float skv_bf16_to_f32(uint16_t h);
uint16_t skv_f32_to_f16(float x);
float skv_f16_to_f32(uint16_t h);
uint8_t skv_f32_to_f8e4m3(float x);
float skv_f8e4m3_to_f32(uint8_t b);

/* Cast n float32 values to dtype `dt` (F32, BF16, F16 or F8E4M3), writing
 * n * skv_dtype_size(dt) little-endian bytes to dst. */
int skv_cast_from_f32(seqkv_dtype dt, void *dst, const float *src, size_t n);
/* The inverse, exact. */
int skv_cast_to_f32(seqkv_dtype dt, float *dst, const void *src, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* SKV_DTYPE_H */
