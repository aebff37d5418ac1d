/* Rows of dtype bits: loaded to be encoded, stored as decoded (with
 * their floats), each with all_small's test on the way. Inline: the
 * coder's per-row loops call these. */
#ifndef SKV_DELTA_ROWS_H
#define SKV_DELTA_ROWS_H

#include "delta_int.h"

/* Store dtype bits x at p (LE) and return their float value. */
static inline float store_bits(seqkv_dtype dt, uint8_t *p, uint32_t x)
{
    switch (dt) {
    case SEQKV_DT_BF16:
        skv_store16_le(p, (uint16_t)x);
        return skv__bf16_to_f32((uint16_t)x);
    case SEQKV_DT_F16:
        skv_store16_le(p, (uint16_t)x);
        return skv__f16_to_f32((uint16_t)x);
    case SEQKV_DT_F8E4M3:
        p[0] = (uint8_t)x;
        return skv__f8e4m3_to_f32((uint8_t)x);
    default:
        skv_store32_le(p, x);
        return skv_bits_f32(x);
    }
}

/* The largest magnitude (dtype bits without the sign) whose value passes
 * all_small's test (finite, at most 2^100): get_rows stops after a row
 * above it, since the next row's prediction is then not the constant. */
static inline uint32_t small_mag(seqkv_dtype dt)
{
    switch (dt) {
    case SEQKV_DT_BF16: return 0x7180u;
    case SEQKV_DT_F16: return 0x7bffu;    /* every finite half */
    case SEQKV_DT_F8E4M3: return 0x7eu;   /* every finite e4m3 (0x7f: NaN) */
    default: return 0x71800000u;
    }
}

static inline uint32_t load_bits(seqkv_dtype dt, const uint8_t *p)
{
    switch (dt) {
    case SEQKV_DT_F32: return skv_load32_le(p);
    case SEQKV_DT_F8E4M3: return p[0];
    default: return skv_load16_le(p);
    }
}

/* bf16 rows, the common dtype, eight lanes at a time where SSE2 is there
 * (no switch per scalar). A row's floats are its bits << 16, so
 * all_small's test on them reads the bits as they pass: |f| > 2^100 or NaN
 * is (f_bits & 0x7fffffff) > 0x71800000, a signed compare of non-negative
 * lanes. */

/* Decoded bf16 bits x of one row to p (LE) and their floats to row;
 * returns all_small(row, n). */
static inline __attribute__((always_inline)) int bf16_row_store(uint8_t *p, float *row, const uint32_t *x, size_t n)
{
    uint32_t big = 0;
    size_t i = 0;
#ifdef __SSE2__
    const __m128i mag = _mm_set1_epi32(0x7fffffff), lim = _mm_set1_epi32(0x71800000);
    __m128i bad = _mm_setzero_si128();
    for (; i + 8 <= n; i += 8) {
        __m128i fa = _mm_slli_epi32(_mm_loadu_si128((const __m128i *)(x + i)), 16),
                fb = _mm_slli_epi32(_mm_loadu_si128((const __m128i *)(x + i + 4)), 16);
        _mm_storeu_si128((__m128i *)(row + i), fa);
        _mm_storeu_si128((__m128i *)(row + i + 4), fb);
        /* the low 16 bits of each lane, sign-extended so the saturating
         * pack keeps them as they are */
        _mm_storeu_si128((__m128i *)(p + 2 * i),
                         _mm_packs_epi32(_mm_srai_epi32(fa, 16), _mm_srai_epi32(fb, 16)));
        bad = _mm_or_si128(bad, _mm_or_si128(_mm_cmpgt_epi32(_mm_and_si128(fa, mag), lim),
                                             _mm_cmpgt_epi32(_mm_and_si128(fb, mag), lim)));
    }
    big = (uint32_t)_mm_movemask_epi8(bad);
#endif
    for (; i < n; i++) {
        skv_store16_le(p + 2 * i, (uint16_t)x[i]);
        row[i] = skv__bf16_to_f32((uint16_t)x[i]);
        big |= (skv_f32_bits(row[i]) & 0x7fffffffu) > 0x71800000u;
    }
    return !big;
}

/* The bf16 bits of one row at p into x; returns all_small of the row's
 * floats (those skv_cast_to_f32 made of the same bytes). */
static inline int bf16_row_load(uint32_t *x, const uint8_t *p, size_t n)
{
    uint32_t big = 0;
    size_t i = 0;
#ifdef __SSE2__
    const __m128i mag = _mm_set1_epi32(0x7fffffff), lim = _mm_set1_epi32(0x71800000),
                  zero = _mm_setzero_si128();
    __m128i bad = zero;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(p + 2 * i));
        _mm_storeu_si128((__m128i *)(x + i), _mm_unpacklo_epi16(h, zero));
        _mm_storeu_si128((__m128i *)(x + i + 4), _mm_unpackhi_epi16(h, zero));
        __m128i fa = _mm_unpacklo_epi16(zero, h), fb = _mm_unpackhi_epi16(zero, h); /* << 16 */
        bad = _mm_or_si128(bad, _mm_or_si128(_mm_cmpgt_epi32(_mm_and_si128(fa, mag), lim),
                                             _mm_cmpgt_epi32(_mm_and_si128(fb, mag), lim)));
    }
    big = (uint32_t)_mm_movemask_epi8(bad);
#endif
    for (; i < n; i++) {
        x[i] = skv_load16_le(p + 2 * i);
        big |= (skv_f32_bits(skv__bf16_to_f32((uint16_t)x[i])) & 0x7fffffffu) > 0x71800000u;
    }
    return !big;
}

/* A decoded row's bits into the output bytes p and its floats into row;
 * returns whether the row is all_small. */
static inline int store_row(seqkv_dtype dt, uint8_t *p, float *row, const uint32_t *x, size_t C)
{
    if (dt == SEQKV_DT_BF16) /* the common dtype without a switch per scalar */
        return bf16_row_store(p, row, x, C);
    const size_t es = skv_dtype_size(dt);
    for (size_t ch = 0; ch < C; ch++)
        row[ch] = store_bits(dt, p + ch * es, x[ch]);
    return all_small(row, C);
}

/* A decoded row's bits into the output bytes p alone (its floats are made
 * when a prediction first reads them); returns whether it is all_small,
 * on the bits as load_row. */
static inline int store_row_bytes(seqkv_dtype dt, uint8_t *p, const uint32_t *x, size_t C)
{
    const size_t es = skv_dtype_size(dt);
    const uint32_t mag = (uint32_t)((1ull << (8 * es - 1)) - 1u), lim = small_mag(dt);
    uint32_t big = 0;
    size_t i = 0;
#ifdef __SSE2__
    if (dt == SEQKV_DT_BF16) {
        const __m128i m = _mm_set1_epi32((int)mag), l = _mm_set1_epi32((int)lim);
        __m128i bad = _mm_setzero_si128();
        for (; i + 8 <= C; i += 8) {
            /* the low 16 bits of each lane, sign-extended so the saturating
             * pack keeps them as they are */
            __m128i a = _mm_loadu_si128((const __m128i *)(x + i)), b = _mm_loadu_si128((const __m128i *)(x + i + 4));
            _mm_storeu_si128((__m128i *)(p + 2 * i), _mm_packs_epi32(_mm_srai_epi32(_mm_slli_epi32(a, 16), 16),
                                                                     _mm_srai_epi32(_mm_slli_epi32(b, 16), 16)));
            bad = _mm_or_si128(bad, _mm_or_si128(_mm_cmpgt_epi32(_mm_and_si128(a, m), l),
                                                 _mm_cmpgt_epi32(_mm_and_si128(b, m), l)));
        }
        big = (uint32_t)_mm_movemask_epi8(bad);
    }
#endif
    for (; i < C; i++) {
        if (es == 1)
            p[i] = (uint8_t)x[i];
        else if (es == 2)
            skv_store16_le(p + 2 * i, (uint16_t)x[i]);
        else
            skv_store32_le(p + 4 * i, x[i]);
        big |= (x[i] & mag) > lim;
    }
    return !big;
}

/* A row to encode from its bytes p; returns whether it is all_small. */
static inline int load_row(seqkv_dtype dt, uint32_t *x, const uint8_t *p, size_t C)
{
    if (dt == SEQKV_DT_BF16)
        return bf16_row_load(x, p, C);
    const size_t es = skv_dtype_size(dt);
    const uint32_t mag = (uint32_t)((1ull << (8 * es - 1)) - 1u), lim = small_mag(dt);
    uint32_t big = 0;
    for (size_t ch = 0; ch < C; ch++) {
        x[ch] = load_bits(dt, p + ch * es);
        big |= (x[ch] & mag) > lim; /* all_small on the bits */
    }
    return !big;
}

#endif
