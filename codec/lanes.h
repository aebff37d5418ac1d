/* AVX2 pieces of an eight-lane rANS decoder: eight 32-bit states in a
 * vector, lane j on state j, 16-bit renormalisation words read from one
 * stream in lane order, plain bits from a separate raw bit stream in
 * scalar order -- stream version 2's layout (FORMAT.md), whose common
 * case dec_groups_avx2.c decodes with them. x86-64 with GCC or Clang only
 * (SKV_LANES_OK). */
#ifndef SKV_LANES_H
#define SKV_LANES_H

#if defined(__x86_64__) && defined(__GNUC__)
#define SKV_LANES_OK 1
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define LANES_TARGET __attribute__((target("avx2,popcnt")))
#define LANES_INLINE LANES_TARGET static inline __attribute__((always_inline))

/* lane j of a renormalisation mask m: the index of the word it reads */
static uint32_t lanes_perm[256][8];

static void lanes_init(void)
{
    for (int m = 0; m < 256; m++)
        for (int j = 0, c = 0; j < 8; j++)
            if (m >> j & 1)
                lanes_perm[m][j] = (uint32_t)c++;
}

/* Entries past cum[n] (2^16) that lanes_search may load: they must hold
 * 2^16 or more too */
#define LANES_CUM_PAD 7

/* The lanes of mask mb whose slot lies past their index run's second
 * symbol (a run where several symbols start): their symbol k, start st
 * and end en found by a search of lane j's cumulative frequencies cm[j],
 * from k + 1 (k comes in as the run's second symbol), eight entries a
 * compare (a loop branch per eight symbols, not one per symbol). */
LANES_INLINE void lanes_search(__m256i slot, __m256i *st, __m256i *en, __m256i *k, int mb,
                               const uint32_t *const *cm)
{
    uint32_t as[8], at[8], ae[8], ak[8];
    _mm256_storeu_si256((__m256i *)as, slot);
    _mm256_storeu_si256((__m256i *)at, *st);
    _mm256_storeu_si256((__m256i *)ae, *en);
    _mm256_storeu_si256((__m256i *)ak, *k);
    for (; mb; mb &= mb - 1) {
        int j = __builtin_ctz((unsigned)mb);
        const uint32_t *c = cm[j];
        const __m256i sv = _mm256_set1_epi32((int)as[j]);
        uint32_t kk = ak[j] + 1;
        for (;;) { /* c[kk + 1..kk + 8] above the slot: the lanes from the first such on */
            unsigned gt = (unsigned)_mm256_movemask_ps(
                _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_loadu_si256((const __m256i *)(c + kk + 1)), sv)));
            if (gt) {
                kk += (uint32_t)__builtin_ctz(gt);
                break;
            }
            kk += 8;
        }
        ak[j] = kk, at[j] = c[kk], ae[j] = c[kk + 1];
    }
    *st = _mm256_loadu_si256((const __m256i *)at);
    *en = _mm256_loadu_si256((const __m256i *)ae);
    *k = _mm256_loadu_si256((const __m256i *)ak);
}

/* The states nx (new values) on the lanes of act, renormalised: a lane
 * below 2^16 takes the next word, in lane order; other lanes keep *x. */
LANES_INLINE void lanes_renorm(__m256i *x, __m256i nx, __m256i act, const uint16_t **w)
{
    const __m256i m16 = _mm256_set1_epi32(0xffff);
    nx = _mm256_blendv_epi8(*x, nx, act);
    __m256i need = _mm256_and_si256(_mm256_cmpeq_epi32(_mm256_min_epu32(nx, m16), nx), act);
    int m = _mm256_movemask_ps(_mm256_castsi256_ps(need));
    __m256i wv = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)*w));
    wv = _mm256_permutevar8x32_epi32(wv, _mm256_loadu_si256((const __m256i *)lanes_perm[m]));
    *x = _mm256_blendv_epi8(nx, _mm256_or_si256(_mm256_slli_epi32(nx, 16), wv), need);
    *w += __builtin_popcount((unsigned)m);
}

/* The symbol of the zero-bucket level table in closed form, on every lane
 * (the codec's zero table is fixed: frequencies 32760 for t = 0,
 * 2^(15 - t) for 1 <= t <= 15, 1 for 16 <= t <= 24, so with r = 65528 -
 * slot a slot of 32760..65526 has t = 16 - ceil(log2 r), read off the
 * exponent of the float r - 1, and slots from 65527 on are t = slot -
 * 65511). Returns t; *nx gets the states after the step, before their
 * renormalisation. */
LANES_INLINE __m256i lanes_zero_step(__m256i x, __m256i *nx)
{
    const __m256i one = _mm256_set1_epi32(1);
    __m256i slot = _mm256_and_si256(x, _mm256_set1_epi32(0xffff));
    __m256i rm1 = _mm256_sub_epi32(_mm256_set1_epi32(65527), slot); /* r - 1 */
    __m256i fl = _mm256_sub_epi32(_mm256_srli_epi32(_mm256_castps_si256(_mm256_cvtepi32_ps(rm1)), 23),
                                  _mm256_set1_epi32(127)); /* floor(log2(r - 1)) */
    __m256i tmid = _mm256_sub_epi32(_mm256_set1_epi32(15), fl);
    __m256i hi = _mm256_cmpgt_epi32(slot, _mm256_set1_epi32(65526));
    __m256i lo = _mm256_cmpgt_epi32(_mm256_set1_epi32(32760), slot);
    __m256i t = _mm256_blendv_epi8(tmid, _mm256_sub_epi32(slot, _mm256_set1_epi32(65511)), hi);
    t = _mm256_andnot_si256(lo, t);
    __m256i p = _mm256_sllv_epi32(one, _mm256_sub_epi32(_mm256_set1_epi32(15), tmid)); /* 2^(15 - t) */
    __m256i st = _mm256_sub_epi32(_mm256_set1_epi32(65528), _mm256_add_epi32(p, p));
    st = _mm256_blendv_epi8(st, _mm256_add_epi32(t, _mm256_set1_epi32(65511)), hi);
    st = _mm256_andnot_si256(lo, st);
    __m256i f = _mm256_blendv_epi8(p, one, hi);
    f = _mm256_blendv_epi8(f, _mm256_set1_epi32(32760), lo);
    *nx = _mm256_add_epi32(_mm256_mullo_epi32(f, _mm256_srli_epi32(x, 16)), _mm256_sub_epi32(slot, st));
    return t;
}

/* lanes_zero_step on the lanes of act, their states renormalised */
LANES_INLINE __m256i lanes_zero(__m256i *x, const uint16_t **w, __m256i act)
{
    __m256i nx;
    __m256i t = lanes_zero_step(*x, &nx);
    lanes_renorm(x, nx, act, w);
    return t;
}

/* Whether any of the n (a multiple of 8) values at x has its bits under
 * mag above big */
LANES_INLINE int lanes_any_above(const uint32_t *x, size_t n, uint32_t mag, uint32_t big)
{
    const __m256i m = _mm256_set1_epi32((int)mag), b = _mm256_set1_epi32((int)big);
    __m256i over = _mm256_setzero_si256();
    for (size_t j = 0; j < n; j += 8) {
        __m256i v = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + j)), m);
        over = _mm256_or_si256(over, _mm256_cmpgt_epi32(v, b)); /* mag < 2^31: signed is fine */
    }
    return !_mm256_testz_si256(over, over);
}

/* The values xv folded into the checksum lanes *acc */
LANES_INLINE void lanes_acc(__m256i *acc, __m256i xv)
{
    __m256i a = _mm256_add_epi32(*acc, xv);
    *acc = _mm256_mullo_epi32(_mm256_xor_si256(a, _mm256_srli_epi32(a, 15)), _mm256_set1_epi32((int)0x9e3779b1));
}

/* The plain bits of the eight lanes (nb each, at most 7; lane j's after
 * lanes 0..j-1's, from the raw bit stream rw at bit *pos) added to first
 * and stored at o; the values are folded into the checksum lanes *acc. */
LANES_INLINE void lanes_bits(__m256i first, __m256i nb, const uint8_t *rw, uint64_t *pos, uint32_t *o,
                             __m256i *acc)
{
    const __m256i one = _mm256_set1_epi32(1);
    __m256i p = _mm256_add_epi32(nb, _mm256_slli_si256(nb, 4)); /* inclusive prefix sums */
    p = _mm256_add_epi32(p, _mm256_slli_si256(p, 8));
    p = _mm256_add_epi32(p, _mm256_blend_epi32(_mm256_setzero_si256(),
                                               _mm256_permutevar8x32_epi32(p, _mm256_set1_epi32(3)), 0xf0));
    __m256i bp = _mm256_add_epi32(_mm256_sub_epi32(p, nb), _mm256_set1_epi32((int)(*pos & 7)));
    /* at most 7 + 8 * 7 = 63 bits from the byte at pos: one 64-bit word,
     * shifted right per lane (a gather of 32-bit words was ~10% slower) */
    uint64_t wd;
    memcpy(&wd, rw + (*pos >> 3), 8);
    __m256i W = _mm256_set1_epi64x((long long)wd);
    __m256i lo = _mm256_srlv_epi64(W, _mm256_cvtepu32_epi64(_mm256_castsi256_si128(bp)));
    __m256i hi = _mm256_srlv_epi64(W, _mm256_cvtepu32_epi64(_mm256_extracti128_si256(bp, 1)));
    __m256i g = _mm256_permutevar8x32_epi32(_mm256_blend_epi32(lo, _mm256_slli_epi64(hi, 32), 0xaa),
                                            _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
    __m256i v = _mm256_and_si256(g, _mm256_sub_epi32(_mm256_sllv_epi32(one, nb), one));
    *pos += (uint32_t)_mm256_extract_epi32(p, 7);
    __m256i xv = _mm256_add_epi32(first, v);
    _mm256_storeu_si256((__m256i *)o, xv);
    lanes_acc(acc, xv);
}
#endif

#endif
