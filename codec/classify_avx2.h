/* bf16 classification eight lanes at a time (AVX2): fclassify's integer
 * arithmetic (cfast.h) on 32-bit lanes, in parts that the encoder, the
 * packs (pack_avx2.h) and skv__cls8_avx2 inline. x86-64 with GCC or Clang
 * only (SKV_HAVE_CLS8). */
#ifndef SKV_CLASSIFY_AVX2_H
#define SKV_CLASSIFY_AVX2_H

#include "cfast.h"
#ifdef SKV_HAVE_CLS8
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#define V8(x) ((skv_v8i){(x), (x), (x), (x), (x), (x), (x), (x)})
#define SEL(m, a, b) (((a) & (m)) | ((b) & ~(m))) /* m ? a : b per lane */

/* fclassify for bf16 on lanes (cfast.h): each step is fclassify's, with
 * comparisons as lane masks (-1 true, 0 false) and a ? b : c as blends */
/* skv__cls8_avx2's constants, in order of first use */
enum {
    K_X7F800000, K_X03800000, K_X71800000, K_XFF, K_127, K_7, K_3, K_X7FFFFF, K_X800000, K_150,
    K_X7FFF, K_1, K_X7F80, K_X8000, K_X7F7F, K_134, K_M12, K_16, K_2, K_4, K_X7F, K_X80, K_22,
    K_P26, K_M26, K_12, K_6, K_31, K_NSTEP
};
static const skv_v8i cls8_k[] = {
    V8(0x7f800000),
    V8(0x03800000),
    V8(0x71800000),
    V8(0xff),
    V8(127),
    V8(7),
    V8(3),
    V8(0x7fffff),
    V8(0x800000),
    V8(150),
    V8(0x7fff),
    V8(1),
    V8(0x7f80),
    V8(0x8000),
    V8(0x7f7f),
    V8(134),
    V8(-12),
    V8(16),
    V8(2),
    V8(4),
    V8(0x7f),
    V8(0x80),
    V8(22),
    V8(1 << 26),
    V8(-(1 << 26)),
    V8(12),
    V8(6),
    V8(31),
    V8(N_STEP_TABS),
};

/* skv__cls8_avx2 in parts (constants K: cls8_k): cls8_s takes s's part
 * of eight lanes (its exponent Es, width class sub, G), cls8_mu the rest
 * from mu, cls8_group both (flag, idx, key and G) */
static inline __attribute__((target("avx2"), always_inline)) void
cls8_s(const skv_v8i *K, const float *s, skv_v8i *Es_o, skv_v8i *sub_o, skv_v8i *G_o)
{
    skv_v8i sb;
    memcpy(&sb, s, sizeof sb);
    /* s: NaN, negative or below 2^-120 -> 2^-120; above 2^100 -> 2^100
     * (positive floats order as their bits) */
    skv_v8i lo = (sb > K[K_X7F800000]) | (sb < K[K_X03800000]);
    sb = (sb & ~lo) | (K[K_X03800000] & lo);
    skv_v8i hi = sb > K[K_X71800000];
    sb = (sb & ~hi) | (K[K_X71800000] & hi);
    skv_v8i Es = ((sb >> 23) & K[K_XFF]) - K[K_127];
    *Es_o = Es, *sub_o = (sb >> 20) & K[K_7], *G_o = Es - K[K_3];
}

/* The BUCKET class of lanes of mu = Y * 2^em: floor(mu / 2^G) and the
 * phase of the rest (okB: in range) */
static inline __attribute__((target("avx2"), always_inline)) void
cls8_bucket(const skv_v8i *K, skv_v8i Y, skv_v8i em, skv_v8i sub, skv_v8i G, skv_v8i *okB_o, skv_v8i *idxB_o,
            skv_v8i *bi_o)
{
    skv_v8i d = em - G, pos = d >= V8(0);
    skv_v8i okB = ~pos | (d <= K[K_6]);
    skv_v8i dp = d & pos & okB;
    skv_v8i kb = (-d) & ~pos, kb31 = SEL(kb > K[K_31], K[K_31], kb);
    skv_v8i sh2 = kb - K[K_2], sh2c = SEL(sh2 > K[K_31], K[K_31], SEL(sh2 < V8(0), V8(0), sh2));
    skv_v8i phN = SEL(kb >= K[K_2], (Y >> sh2c) & K[K_3], (Y & K[K_1]) << 1);
    *bi_o = SEL(pos, Y << dp, Y >> kb31);
    skv_v8i phB = phN & ~pos;
    *idxB_o = sub * 4 + phB;
    *okB_o = okB;
}

/* Eight lanes of mu as Y * 2^em (NaN, inf: +0), with their bits mb
 * and exponent field emu */
static inline __attribute__((target("avx2"), always_inline)) void
cls8_y(const skv_v8i *K, const float *mu, skv_v8i *mb_o, skv_v8i *emu_o, skv_v8i *Y_o, skv_v8i *em_o)
{
    skv_v8i mb;
    memcpy(&mb, mu, sizeof mb);
    mb &= ~((mb & K[K_X7F800000]) == K[K_X7F800000]); /* NaN, inf: mu = +0 */
    skv_v8i emu = (mb >> 23) & K[K_XFF];
    skv_v8i M = (mb & K[K_X7FFFFF]) | ((emu != V8(0)) & K[K_X800000]);
    skv_v8i sgn = mb >> 31;
    *Y_o = (M ^ sgn) - sgn;
    *em_o = emu + (emu == V8(0)) * -1 - K[K_150];
    *mb_o = mb, *emu_o = emu;
}

/* Whether every lane is BUCKET whatever c is: c's exponent field is at
 * most mu's plus one (rounding up; saturation only lowers it), so U is at
 * most emu - 133 (emu 0: U is -135 or -133), below G */
static inline __attribute__((target("avx2"), always_inline)) int cls8_allb(const skv_v8i *K, skv_v8i emu,
                                                                          skv_v8i G)
{
    return !_mm256_movemask_ps((__m256)(emu - K[K_134] + K[K_1] >= G));
}

/* How cls8_mu works out a group's classes: every lane through both the
 * STEP and the BUCKET arithmetic (CLS8_WHOLE); a group whose lanes are all
 * STEP or all BUCKET by that class's alone (CLS8_SPLIT, the encoder's
 * packs); and, as the decoder's packs do, a group that is all BUCKET by
 * mu's exponent alone without c at all (CLS8_SPLIT_ALLB). The classes are
 * the same every way. */
typedef enum { CLS8_WHOLE, CLS8_SPLIT, CLS8_SPLIT_ALLB } cls8_how;

/* cls8_group with s's part (cls8_s) given */
static inline __attribute__((target("avx2"), always_inline)) void
cls8_mu(const skv_v8i *K, const float *mu, skv_v8i Es, skv_v8i sub, skv_v8i G, skv_v8i *flag_o, skv_v8i *idx_o,
        skv_v8i *key_o, const cls8_how how)
{
    skv_v8i mb, emu, Y, em;
    cls8_y(K, mu, &mb, &emu, &Y, &em);
    skv_v8i idxS = V8(0), okS = V8(0), bi = V8(0), idxB = V8(0), okB = V8(0);
    if (how == CLS8_SPLIT_ALLB && cls8_allb(K, emu, G)) {
        cls8_bucket(K, Y, em, sub, G, &okB, &idxB, &bi);
        *flag_o = SEL(okB, K[K_1], K[K_2]), *idx_o = idxB + K[K_NSTEP], *key_o = bi;
        return;
    }
    /* c: bf16 nearest mu (RNE), saturated to the largest finite */
    skv_v8u u = (skv_v8u)mb;
    skv_v8i cc = (skv_v8i)((u + (skv_v8u)K[K_X7FFF] + ((u >> 16) & (skv_v8u)K[K_1])) >> 16);
    skv_v8i sat = (cc & K[K_X7FFF]) >= K[K_X7F80];
    cc = (cc & ~sat) | (((cc & K[K_X8000]) | K[K_X7F7F]) & sat);
    skv_v8i cm = cc & K[K_X7FFF], E = cm >> 7;
    skv_v8i U = E + (E == V8(0)) * -1 - K[K_134];
    skv_v8i step = U >= G;
    /* split (the packs): a group whose lanes are all STEP or all BUCKET,
     * nearly every group at ctx (a head's channels share their scale),
     * works out that class alone (CLS8_SPLIT_ALLB: one that is all BUCKET
     * by mu's exponent alone skipped c, above) */
    const int ms = how != CLS8_WHOLE ? _mm256_movemask_ps((__m256)step) : 0x100;
    if (ms != 0) {
        /* STEP: octave, phases, phase of mu's offset from c */
        skv_v8i oct = Es - U, low = oct < K[K_M12];
        oct = (oct & ~low) | (K[K_M12] & low);
        skv_v8i subS = sub & ~low;
        skv_v8i nph = SEL(oct < V8(0), K[K_16], SEL(oct < K[K_2], K[K_4], K[K_1]));
        skv_v8i Mc = (cm & K[K_X7F]) | ((E != V8(0)) & K[K_X80]);
        skv_v8i csg = (cc & K[K_X8000]) != V8(0);
        skv_v8i Yc = (Mc ^ csg) - csg; /* c = Yc * 2^U */
        skv_v8i k = U - em; /* -(em - U) */
        skv_v8i kok = (k >= K[K_1]) & (k <= K[K_22]);
        skv_v8i kc = (k & kok) | (K[K_1] & ~kok); /* a safe shift where not ok */
        skv_v8i N = Y - (Yc << kc); /* (mu - c) / 2^U = N / 2^k */
        skv_v8i nok = (N < K[K_P26]) & (N > K[K_M26]);
        skv_v8i T = (N * nph + (nph << (kc - K[K_1]))) >> kc;
        skv_v8i ph = SEL(T < K[K_1], V8(0), SEL(T >= nph, nph - K[K_1], T));
        skv_v8i one = nph == K[K_1];
        ph &= ~one;
        idxS = ((oct + K[K_12]) * 8 + subS) * 16 + ph;
        okS = one | (kok & nok);
    }
    if (ms != 0xff)
        cls8_bucket(K, Y, em, sub, G, &okB, &idxB, &bi);
    skv_v8i flag, idx, key;
    if (ms == 0) {
        flag = SEL(okB, K[K_1], K[K_2]), idx = idxB + K[K_NSTEP], key = bi;
    } else if (ms == 0xff) {
        flag = SEL(okS, V8(0), K[K_2]), idx = idxS, key = cc;
    } else {
        flag = SEL(step, SEL(okS, V8(0), K[K_2]), SEL(okB, K[K_1], K[K_2]));
        idx = SEL(step, idxS, idxB + K[K_NSTEP]), key = SEL(step, cc, bi);
    }
    *flag_o = flag, *idx_o = idx, *key_o = key;
}

static inline __attribute__((target("avx2"), always_inline)) void
cls8_group(const skv_v8i *K, const float *mu, const float *s, skv_v8i *flag_o, skv_v8i *idx_o,
           skv_v8i *key_o, skv_v8i *G_o, const cls8_how how)
{
    skv_v8i Es, sub;
    cls8_s(K, s, &Es, &sub, G_o);
    cls8_mu(K, mu, Es, sub, *G_o, flag_o, idx_o, key_o, how);
}
_Static_assert(sizeof(skv_fcls) == 32 && offsetof(skv_fcls, base) == 8 &&
                   offsetof(skv_fcls, G) == 16 && offsetof(skv_fcls, bucket) == 20 &&
                   offsetof(skv_fcls, nesc) == 24,
               "skv__cls8_fill_avx2 writes skv_fcls as four 64-bit words");

/* One group of skv__cls8_fill_avx2: the eight records into cls, and the
 * lanes left to cls8_lane as the return value. */
static inline __attribute__((target("avx2"), always_inline)) unsigned
fill_group(skv_ftab *const *tabs, const skv_cls8 *o, skv_fcls *cls)
{
    const __m256i one = _mm256_set1_epi32(1), zero = _mm256_setzero_si256();
    const __m256i R = _mm256_set1_epi64x(BUCKET_R), nesc = _mm256_set1_epi64x(2 * BUCKET_R + 1);
    __m256i flag = _mm256_loadu_si256((const __m256i *)o->flag);
    __m256i idx = _mm256_loadu_si256((const __m256i *)o->idx);
    __m256i key = _mm256_loadu_si256((const __m256i *)o->key);
    __m256i G = _mm256_loadu_si256((const __m256i *)o->G);
    __m256i isb = _mm256_cmpeq_epi32(flag, one);
    /* the tables of BUCKET lanes only (other lanes' idx may be anything) */
    __m256i m0 = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(isb));
    __m256i m1 = _mm256_cvtepi32_epi64(_mm256_extracti128_si256(isb, 1));
    __m256i t0 = _mm256_mask_i32gather_epi64(zero, (const long long *)tabs,
                                             _mm256_castsi256_si128(idx), m0, 8);
    __m256i t1 = _mm256_mask_i32gather_epi64(zero, (const long long *)tabs,
                                             _mm256_extracti128_si256(idx, 1), m1, 8);
    unsigned nb = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(isb)) ^ 0xffu;
    nb |= (unsigned)_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(t0, zero)));
    nb |= (unsigned)_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(t1, zero))) << 4;
    __m256i b0 = _mm256_sub_epi64(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(key)), R);
    __m256i b1 = _mm256_sub_epi64(_mm256_cvtepi32_epi64(_mm256_extracti128_si256(key, 1)), R);
    /* (G, bucket = 1) pairs: lanes 0, 1, 4, 5 and 2, 3, 6, 7 */
    __m256i gl = _mm256_unpacklo_epi32(G, one), gh = _mm256_unpackhi_epi32(G, one);
    __m256i f0 = _mm256_permute2x128_si256(gl, gh, 0x20), f1 = _mm256_permute2x128_si256(gl, gh, 0x31);
    /* a record (tab, base, G | bucket, nesc) per lane: 4x4 transposes */
    __m256i a = _mm256_unpacklo_epi64(t0, b0), b = _mm256_unpackhi_epi64(t0, b0);
    __m256i c = _mm256_unpacklo_epi64(f0, nesc), d = _mm256_unpackhi_epi64(f0, nesc);
    _mm256_storeu_si256((__m256i *)&cls[0], _mm256_permute2x128_si256(a, c, 0x20));
    _mm256_storeu_si256((__m256i *)&cls[1], _mm256_permute2x128_si256(b, d, 0x20));
    _mm256_storeu_si256((__m256i *)&cls[2], _mm256_permute2x128_si256(a, c, 0x31));
    _mm256_storeu_si256((__m256i *)&cls[3], _mm256_permute2x128_si256(b, d, 0x31));
    a = _mm256_unpacklo_epi64(t1, b1), b = _mm256_unpackhi_epi64(t1, b1);
    c = _mm256_unpacklo_epi64(f1, nesc), d = _mm256_unpackhi_epi64(f1, nesc);
    _mm256_storeu_si256((__m256i *)&cls[4], _mm256_permute2x128_si256(a, c, 0x20));
    _mm256_storeu_si256((__m256i *)&cls[5], _mm256_permute2x128_si256(b, d, 0x20));
    _mm256_storeu_si256((__m256i *)&cls[6], _mm256_permute2x128_si256(a, c, 0x31));
    _mm256_storeu_si256((__m256i *)&cls[7], _mm256_permute2x128_si256(b, d, 0x31));
    return nb;
}
#endif
#endif
