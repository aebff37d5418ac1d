/* The fast level's SIMD decoders (AVX-512: two vectors of 16 lanes a
 * step; AVX2: four of 8). One step decodes FAST_LANES scalars exactly as
 * fast_dec.c's reference loop does: a gather of each lane's slot entry,
 * the state update, and the renormalisation words of the lanes that need
 * one, taken in lane order by an expand. They run while at least 64
 * bytes of words are left (a step reads at most 64), so no read passes
 * the words' end; the reference path finishes. */
#include <immintrin.h>
#include <pthread.h>

#include "fast_int.h"

#define T512F "avx2,popcnt,avx512f,avx512bw,avx512vl"

/* Lanes l (0..FAST_LANES) of the first step's channels, and the step's
 * channel advance. */
static inline uint32_t fast_ch0(size_t step, uint32_t l, uint32_t C)
{
    return (uint32_t)((step * FAST_LANES + l) % C);
}

static inline __attribute__((target(T512F), always_inline)) __m512i
step512(const fast_dec *d, __m512i x, __m512i base, const uint8_t **w, __m512i *sym)
{
    const __m512i mslot = _mm512_set1_epi32(FAST_M - 1);
    const __m512i slot = _mm512_and_si512(x, mslot);
    const __m512i e = _mm512_i32gather_epi32(_mm512_add_epi32(base, slot), (const void *)d->dtab, 4);
    *sym = _mm512_and_si512(e, _mm512_set1_epi32(0xff));
    const __m512i f = _mm512_add_epi32(_mm512_and_si512(_mm512_srli_epi32(e, 8), mslot), _mm512_set1_epi32(1));
    const __m512i cum = _mm512_srli_epi32(e, 20);
    x = _mm512_add_epi32(_mm512_mullo_epi32(f, _mm512_srli_epi32(x, FAST_PROB)), _mm512_sub_epi32(slot, cum));
    const __mmask16 m = _mm512_cmplt_epu32_mask(x, _mm512_set1_epi32(FAST_L));
    const __m512i wv = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const void *)*w));
    const __m512i ex = _mm512_maskz_expand_epi32(m, wv);
    x = _mm512_mask_mov_epi32(x, m, _mm512_or_si512(_mm512_slli_epi32(x, 16), ex));
    *w += 2 * (unsigned)__builtin_popcount(m);
    return x;
}

static inline __attribute__((target(T512F), always_inline)) void
out512(const fast_dec *d, __m512i sym, size_t i, void *dst)
{
    if (d->dt != SEQKV_DT_F8E4M3) {
        const __m512i raw = _mm512_cvtepu8_epi32(_mm_loadu_si128((const void *)(d->raw + i)));
        const __m512i v = _mm512_or_si512(
            _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(raw, _mm512_set1_epi32(0x80)), 8),
                            _mm512_slli_epi32(sym, 7)),
            _mm512_and_si512(raw, _mm512_set1_epi32(0x7f)));
        _mm256_storeu_si256((void *)((uint8_t *)dst + 2 * i), _mm512_cvtepi32_epi16(v));
    } else {
        const __m512i v = _mm512_or_si512(_mm512_srli_epi32(sym, 1),
                                          _mm512_slli_epi32(_mm512_and_si512(sym, _mm512_set1_epi32(1)), 7));
        _mm_storeu_si128((void *)((uint8_t *)dst + i), _mm512_cvtepi32_epi8(v));
    }
}

__attribute__((target(T512F))) size_t skv__fast_steps_avx512(fast_dec *d, size_t step, size_t steps,
                                                             void *dst)
{
    const uint32_t C = d->C, adv = FAST_LANES % C;
    const int fixed = adv == 0; /* each lane keeps its channel */
    uint32_t ch[FAST_LANES];
    for (uint32_t l = 0; l < FAST_LANES; l++)
        ch[l] = fast_ch0(step, l, C);
    __m512i cha = _mm512_loadu_si512(ch), chb = _mm512_loadu_si512(ch + 16);
    __m512i ba = _mm512_i32gather_epi32(cha, (const void *)d->chbase, 4);
    __m512i bb = _mm512_i32gather_epi32(chb, (const void *)d->chbase, 4);
    __m512i xa = _mm512_loadu_si512(d->x), xb = _mm512_loadu_si512(d->x + 16);
    const __m512i vadv = _mm512_set1_epi32((int)adv), vC = _mm512_set1_epi32((int)C);
    const uint8_t *w = d->w;
    for (; step < steps && d->wend - w >= 64; step++) {
        const size_t i = step * FAST_LANES;
        __m512i sa, sb;
        xa = step512(d, xa, ba, &w, &sa);
        xb = step512(d, xb, bb, &w, &sb);
        out512(d, sa, i, dst);
        out512(d, sb, i + 16, dst);
        if (!fixed) {
            cha = _mm512_add_epi32(cha, vadv);
            chb = _mm512_add_epi32(chb, vadv);
            cha = _mm512_mask_sub_epi32(cha, _mm512_cmpge_epu32_mask(cha, vC), cha, vC);
            chb = _mm512_mask_sub_epi32(chb, _mm512_cmpge_epu32_mask(chb, vC), chb, vC);
            ba = _mm512_i32gather_epi32(cha, (const void *)d->chbase, 4);
            bb = _mm512_i32gather_epi32(chb, (const void *)d->chbase, 4);
        }
    }
    _mm512_storeu_si512(d->x, xa);
    _mm512_storeu_si512(d->x + 16, xb);
    d->w = w;
    return step;
}

/* AVX2: the expand is a permutation from a table (lane j of mask m takes
 * word popcount(m & ((1 << j) - 1))). */
static uint32_t perm8[256][8];
static pthread_once_t perm8_once = PTHREAD_ONCE_INIT;

static void perm8_init(void)
{
    for (int m = 0; m < 256; m++)
        for (int j = 0, k = 0; j < 8; j++) {
            perm8[m][j] = (uint32_t)k;
            k += (m >> j) & 1;
        }
}

static inline __attribute__((target("avx2,popcnt"), always_inline)) __m256i
step256(const fast_dec *d, __m256i x, __m256i base, const uint8_t **w, __m256i *sym)
{
    const __m256i mslot = _mm256_set1_epi32(FAST_M - 1);
    const __m256i slot = _mm256_and_si256(x, mslot);
    const __m256i e = _mm256_i32gather_epi32((const int *)d->dtab, _mm256_add_epi32(base, slot), 4);
    *sym = _mm256_and_si256(e, _mm256_set1_epi32(0xff));
    const __m256i f = _mm256_add_epi32(_mm256_and_si256(_mm256_srli_epi32(e, 8), mslot), _mm256_set1_epi32(1));
    const __m256i cum = _mm256_srli_epi32(e, 20);
    x = _mm256_add_epi32(_mm256_mullo_epi32(f, _mm256_srli_epi32(x, FAST_PROB)), _mm256_sub_epi32(slot, cum));
    const __m256i need = _mm256_cmpeq_epi32(_mm256_srli_epi32(x, 16), _mm256_setzero_si256());
    const unsigned m = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(need));
    const __m256i wv = _mm256_cvtepu16_epi32(_mm_loadu_si128((const void *)*w));
    const __m256i ex = _mm256_permutevar8x32_epi32(wv, _mm256_loadu_si256((const void *)perm8[m]));
    x = _mm256_blendv_epi8(x, _mm256_or_si256(_mm256_slli_epi32(x, 16), ex), need);
    *w += 2 * (unsigned)__builtin_popcount(m);
    return x;
}

static inline __attribute__((target("avx2"), always_inline)) void
out256(const fast_dec *d, __m256i sym, size_t i, void *dst)
{
    const __m128i lo = _mm256_castsi256_si128(sym), hi = _mm256_extracti128_si256(sym, 1);
    if (d->dt != SEQKV_DT_F8E4M3) {
        const __m256i raw = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)(d->raw + i)));
        const __m256i v = _mm256_or_si256(
            _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(raw, _mm256_set1_epi32(0x80)), 8),
                            _mm256_slli_epi32(sym, 7)),
            _mm256_and_si256(raw, _mm256_set1_epi32(0x7f)));
        const __m128i p = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        _mm_storeu_si128((void *)((uint8_t *)dst + 2 * i), p);
    } else {
        __m128i v = _mm_packus_epi32(lo, hi);
        v = _mm_or_si128(_mm_srli_epi16(v, 1), _mm_slli_epi16(_mm_and_si128(v, _mm_set1_epi16(1)), 7));
        _mm_storel_epi64((void *)((uint8_t *)dst + i), _mm_packus_epi16(v, v));
    }
}

__attribute__((target("avx2,popcnt"))) size_t skv__fast_steps_avx2(fast_dec *d, size_t step, size_t steps,
                                                                 void *dst)
{
    pthread_once(&perm8_once, perm8_init);
    const uint32_t C = d->C, adv = FAST_LANES % C;
    uint32_t ch[FAST_LANES];
    for (uint32_t l = 0; l < FAST_LANES; l++)
        ch[l] = fast_ch0(step, l, C);
    __m256i chv[4], bv[4], xv[4];
    for (int k = 0; k < 4; k++) {
        chv[k] = _mm256_loadu_si256((const void *)(ch + 8 * k));
        bv[k] = _mm256_i32gather_epi32((const int *)d->chbase, chv[k], 4);
        xv[k] = _mm256_loadu_si256((const void *)(d->x + 8 * k));
    }
    const __m256i vadv = _mm256_set1_epi32((int)adv), vC1 = _mm256_set1_epi32((int)C - 1);
    const uint8_t *w = d->w;
    for (; step < steps && d->wend - w >= 64; step++) {
        const size_t i = step * FAST_LANES;
        for (int k = 0; k < 4; k++) {
            __m256i s;
            xv[k] = step256(d, xv[k], bv[k], &w, &s);
            out256(d, s, i + 8 * (size_t)k, dst);
        }
        if (adv)
            for (int k = 0; k < 4; k++) {
                __m256i c = _mm256_add_epi32(chv[k], vadv);
                /* channels stay below C < 2^30: signed compares are exact */
                c = _mm256_sub_epi32(c, _mm256_and_si256(_mm256_cmpgt_epi32(c, vC1), _mm256_add_epi32(vC1, _mm256_set1_epi32(1))));
                chv[k] = c;
                bv[k] = _mm256_i32gather_epi32((const int *)d->chbase, c, 4);
            }
    }
    for (int k = 0; k < 4; k++)
        _mm256_storeu_si256((void *)(d->x + 8 * k), xv[k]);
    d->w = w;
    return step;
}
