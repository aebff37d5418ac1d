/* Coded streams: the interleaved rANS coder and the stream container.
 *
 * rANS with 32-bit states, 16-bit renormalisation words and four states
 * used round-robin by operation index (op i uses state i mod 4). The
 * encoder queues every scalar's operations, then codes them in reverse;
 * the decoder reads the four final states and then the words in order,
 * checking every read against the end of the payload. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cfast.h"
#ifdef SKV_HAVE_CLS8
#include <immintrin.h>
#include <stddef.h>

#include "lanes.h"
_Static_assert(SKV_CUM_PAD >= LANES_CUM_PAD, "the codec's tables have the entries lanes_search loads");
#endif

#define RANS_L (1u << 16)

/* ---- checksums ----------------------------------------------------------- */

static inline uint64_t mix_in(uint64_t h, uint64_t v)
{
    h = (h + v + 1) * 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 29);
}

/* Version 2 streams (FORMAT.md): scalar i on state v2_lane(i) of
 * sixteen, a 32-bit checksum lane per state. */
#define SKV_V2_STATES 16
#define V2_ACC0 0x243f6a88u
static inline int v2_lane(uint32_t i)
{
    return (int)((i & 7u) | ((i >> 3 & 1u) << 3));
}

static inline uint32_t v2_acc(uint32_t a, uint32_t x)
{
    a += x;
    return (a ^ (a >> 15)) * 0x9e3779b1u;
}

/* A row's classes as version 2's AVX2 paths load them, one per coder:
 * packed when the row cache hands a row (slot and generation) they do
 * not hold (v2_pack) */
typedef struct {
    const skv_fcls *row; /* the row cache's array they came from, n scalars */
    uint32_t gen;        /* that slot's generation */
    const skv_atoms *as; /* the atoms they were packed with (scalar j on channel j mod nch) */
    size_t n, cap;
    void *mem;
    const uint8_t *lbase, *bbase; /* the model's table block's first index, its bucket values */
    int32_t *lut, *bvt;  /* per scalar: its table's index, its width's bucket values, as byte
                          * offsets from them (32-bit gathers; the decoder); a table's index
                          * at lbase + i * sizeof(skv_ftab) is table block entry i's */
    uint64_t *e4;        /* per scalar: its table's skv_eop array << 4 (the encoder) */
    int32_t *base, *g, *nesc;
    int32_t *ok;         /* per scalar: -1 when the paths take its class (its table built) */
    int32_t *stp;        /* per scalar: -1 for a STEP class, 0 for BUCKET */
    int okall;           /* every scalar's is */
    int bready;          /* v2_pack_rows: every BUCKET table of the model is built */
    int anystp;          /* some scalar's class is STEP (the paths' variant that takes them) */
    size_t sn;           /* v2_pack_rows: the widths of s = slast[0..sn) are all built, */
    float *slast;
    int32_t *ses, *ssub, *sg; /* and s's part of its classes (cls8_s); cap each, */
    int32_t *sbo;        /* and a BUCKET lane's table index offset but for its phase; */
    uint8_t *gb;         /* per group: packed all BUCKET, tables built, under that s (the
                          * decoder then packs its next rows' lut and base alone) */
    uint64_t nb;         /* the groups so packed (tests) */
    /* per scalar, its first table: the atoms' of its channel when it has
     * any (ak atoms, values from vals + aoff), else its class's */
    int32_t *lut1, *ak, *aoff; /* lut1: from abase on channels with atoms, else lbase */
    uint64_t *e41;
    const uint32_t *vals;
    const uint8_t *abase; /* the atoms' channels (one block: their indexes lie close) */
} skv_v2pack;

uint64_t skv_checksum64(const void *data, size_t len, uint64_t seed)
{
    const uint8_t *p = data;
    uint64_t h = seed ^ 0x243f6a8885a308d3ull;
    size_t i = 0;
    for (; i + 8 <= len; i += 8)
        h = mix_in(h, skv_load64_le(p + i));
    uint64_t t = 0;
    for (size_t k = 0; i < len; i++, k++)
        t |= (uint64_t)p[i] << (8 * k);
    h = mix_in(h, t ^ ((uint64_t)len << 56));
    return h ^ (h >> 32);
}

/* ---- classification, eight bf16 lanes at a time --------------------------- */

#ifdef SKV_HAVE_CLS8
int skv__cls_simd = -1;

int skv__cls_simd_pick(void)
{
    /* SEQKV_SIMD "0": the scalar path, "2": AVX2 alone (tests, comparisons) */
    const char *e = getenv("SEQKV_SIMD");
    int v = 0;
    if ((!e || strcmp(e, "0") != 0) && __builtin_cpu_supports("avx2")) {
        v = 2;
        if ((!e || strcmp(e, "2") != 0) && __builtin_cpu_supports("avx512f") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512dq"))
            v = 3;
    }
    __atomic_store_n(&skv__cls_simd, v, __ATOMIC_RELAXED);
    return v;
}

/* The target of the copies of the decoder's AVX2 paths built for CPUs
 * with AVX-512 (cls_simd() 3): the same code, which the compiler then
 * writes with AVX-512VL's instructions (masks, three-input logic) */
#define T512 "avx2,popcnt,bmi2,avx512f,avx512vl,avx512bw,avx512dq"

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

/* cls8_group with s's part (cls8_s) given */
static inline __attribute__((target("avx2"), always_inline)) void
cls8_mu(const skv_v8i *K, const float *mu, skv_v8i Es, skv_v8i sub, skv_v8i G, skv_v8i *flag_o, skv_v8i *idx_o,
        skv_v8i *key_o, const int SPLIT)
{
    skv_v8i mb, emu, Y, em;
    cls8_y(K, mu, &mb, &emu, &Y, &em);
    skv_v8i idxS = V8(0), okS = V8(0), bi = V8(0), idxB = V8(0), okB = V8(0);
    if (SPLIT == 2 && cls8_allb(K, emu, G)) {
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
    /* SPLIT (v2_pack_rows): a group whose lanes are all STEP or all
     * BUCKET, nearly every group at ctx (a head's channels share their
     * scale), works out that class alone (SPLIT 2, the decoder's: one
     * that is all BUCKET by mu's exponent alone skips c, above) */
    const int ms = SPLIT ? _mm256_movemask_ps((__m256)step) : 0x100;
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
           skv_v8i *key_o, skv_v8i *G_o, const int SPLIT)
{
    skv_v8i Es, sub;
    cls8_s(K, s, &Es, &sub, G_o);
    cls8_mu(K, mu, Es, sub, *G_o, flag_o, idx_o, key_o, SPLIT);
}

__attribute__((target("avx2"))) void skv__cls8_avx2(const float *mu, const float *s, size_t groups,
                                                   skv_cls8 *o)
{
    /* the constants through a pointer the compiler cannot see through: one
     * memory operand per use instead of a broadcast rebuilt in the loop */
    const skv_v8i *K = cls8_k;
    __asm__("" : "+r"(K));
    for (; groups--; mu += 8, s += 8, o++) {
        skv_v8i flag, idx, key, G;
        cls8_group(K, mu, s, &flag, &idx, &key, &G, 0);
        memcpy(o->flag, &flag, sizeof flag);
        memcpy(o->idx, &idx, sizeof idx);
        memcpy(o->key, &key, sizeof key);
        memcpy(o->G, &G, sizeof G);
    }
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

__attribute__((target("avx2"))) void skv__cls8_fill_avx2(skv_ftab *const *tabs, const skv_cls8 *o,
                                                        size_t groups, skv_fcls *cls, uint8_t *fix)
{
    for (size_t j = 0; j < groups; j++, o++, cls += 8)
        fix[j] = (uint8_t)fill_group(tabs, o, cls);
}
#endif

/* ---- encoder ----------------------------------------------------------------- */

/* A queued operation is one word, the address of the skv_eop that codes it
 * (codec_int.h; freq < 2^16: every table has at least two symbols of
 * frequency >= 1): a table symbol's entry, or for nb <= PLAIN_TAB_BITS
 * plain bits of value v the shared entry plain_tab[2^nb + v]. Wider plain
 * bits (f32 only) are 1 | nb << 1 | v << 8 (entries are aligned, so bit 0
 * tells them apart), coded as the template plain_ops[nb] with v added to
 * its bias. Eight bytes an operation: a stream's queue stays half the
 * size (and in cache) that of the entries themselves. */
#define PLAIN_TAB_BITS 10 /* bf16, f16 and fp8 buckets hold at most 2^10 points */
_Static_assert(_Alignof(skv_eop) >= 2, "bit 0 of an entry's address is clear");
static skv_eop plain_tab[2u << PLAIN_TAB_BITS]; /* 32 KiB, filled once */
static pthread_once_t plain_once = PTHREAD_ONCE_INIT;

static void plain_init(void)
{
    for (int nb = 1; nb <= PLAIN_TAB_BITS; nb++)
        for (uint32_t v = 0; v < 1u << nb; v++)
            plain_tab[(1u << nb) + v] = skv__eop(v, 1, nb);
}

#define PLAIN_OP(nb) {~0ull, (1u << (nb)) - 1u, 0x10000u >> (nb), (1u << (nb)) - 1u}
static const skv_eop plain_ops[17] = {
    {0, 0, 0, 0}, PLAIN_OP(1),  PLAIN_OP(2),  PLAIN_OP(3),  PLAIN_OP(4),  PLAIN_OP(5),
    PLAIN_OP(6),  PLAIN_OP(7),  PLAIN_OP(8),  PLAIN_OP(9),  PLAIN_OP(10), PLAIN_OP(11),
    PLAIN_OP(12), PLAIN_OP(13), PLAIN_OP(14), PLAIN_OP(15), PLAIN_OP(16),
};

/* each width's row of plain_tab and mask, as constants (no shifts in the
 * hot loop, whose registers are all taken) */
#define PLAIN_ROW(nb) {plain_tab + (1u << (nb)), (1u << (nb)) - 1u}
static const struct {
    const skv_eop *row;
    uint32_t mask;
} plain_rows[17] = {
    {plain_tab, 0},       PLAIN_ROW(1),         PLAIN_ROW(2),         PLAIN_ROW(3),
    PLAIN_ROW(4),         PLAIN_ROW(5),         PLAIN_ROW(6),         PLAIN_ROW(7),
    PLAIN_ROW(8),         PLAIN_ROW(9),         PLAIN_ROW(10),        {NULL, (1u << 11) - 1u},
    {NULL, (1u << 12) - 1u}, {NULL, (1u << 13) - 1u}, {NULL, (1u << 14) - 1u},
    {NULL, (1u << 15) - 1u}, {NULL, (1u << 16) - 1u},
};

/* queue the low nb (1..16) bits of v */
SKV_ALWAYS_INLINE void put_plain(uint64_t **o, uint32_t v, int nb)
{
    v &= plain_rows[nb].mask;
    if (nb <= PLAIN_TAB_BITS)
        *(*o)++ = (uint64_t)(uintptr_t)(plain_rows[nb].row + v);
    else
        *(*o)++ = 1u | (uint64_t)nb << 1 | (uint64_t)v << 8;
}

/* Scalars are classified a block at a time, then planned. */
#define SKV_BLOCK 64

#ifdef SKV_HAVE_CLS8
/* The encoder's common case for bf16, eight lanes at a time (AVX2): the
 * groups of skv__cls8_avx2's output filled as skv__cls8_fill_avx2 fills
 * them (cls, fix), and for every lane that enc_one would code by its
 * first branch (a BUCKET scalar whose table is built, x normal in a
 * bucket j >= 1 of 2^nb points, a symbol below the escape) its symbol,
 * the entry of its nb plain bits (queued when nb > 0), and in cnt its
 * number of operations (bits 0-1) and nb (bits 2-4). A STEP lane of
 * finite x has cnt ENC8_STEP, sym = ordinal(x) - ordinal(c) and is left
 * out of fix: the caller finds its table, and if the symbol is not below
 * the escape there, has it classified and coded by enc_one. cnt is 0 for
 * every other lane (enc_one codes it). */
#define ENC8_STEP 0x80
typedef struct {
    uint64_t plain[SKV_BLOCK];
    uint32_t sym[SKV_BLOCK];
    uint8_t cnt[SKV_BLOCK];
} skv_enc8;

/* x: the scalars (bits above the 16th are ignored). In the arithmetic of
 * skv__cls8_avx2: lane masks are -1 or 0. */
static __attribute__((target("avx2"))) void enc8_avx2(skv_ftab *const *tabs, const skv_cls8 *o,
                                                      size_t groups, const uint32_t *x,
                                                      skv_fcls *cls, uint8_t *fix, skv_enc8 *p)
{
    const skv_v8i lanebit = {1, 2, 4, 8, 16, 32, 64, 128};
    for (size_t j = 0; j < groups; j++, o++, cls += 8, x += 8) {
        unsigned f = fill_group(tabs, o, cls);
        skv_v8i xv, G, key, flag;
        memcpy(&xv, x, sizeof xv);
        memcpy(&G, o->G, sizeof G);
        memcpy(&key, o->key, sizeof key);
        memcpy(&flag, o->flag, sizeof flag);
        xv &= V8(0xffff);
        skv_v8i mag = xv & V8(0x7fff), neg = -(xv >> 15);
        /* BUCKET: nb = bias + mbits + G - E; j = x's significand >> nb */
        skv_v8i nb = G + V8(134) - (mag >> 7);
        skv_v8i ok = (mag > V8(0x7f)) & (mag < V8(0x7f80)) & (nb >= V8(0)) & (nb <= V8(7));
        skv_v8i sig = (mag & V8(0x7f)) | V8(0x80);
        skv_v8i jv = (skv_v8i)_mm256_srlv_epi32((__m256i)sig, (__m256i)nb);
        /* kb - base = kb - key + R, exact in 32 bits for every symbol in
         * range (|kb - key + R| < 2^31 + 2^10 cannot wrap into it) */
        skv_v8i sym = (skv_v8i)((skv_v8u)(jv ^ neg) - (skv_v8u)key + (skv_v8u)V8(BUCKET_R));
        ok &= (sym >= V8(0)) & (sym < V8(2 * BUCKET_R + 1)) & ((V8((int)f) & lanebit) == V8(0));
        skv_v8i cnt = ok & ((V8(1) - (nb > V8(0))) | ((nb & V8(7)) << 2));
        /* plain_tab[2^nb + (mag mod 2^nb)] */
        skv_v8u p2 = (skv_v8u)_mm256_sllv_epi32((__m256i)V8(1), (__m256i)nb);
        __m256i pidx = (__m256i)(p2 + ((skv_v8u)mag & (p2 - 1u)));
        const __m256i ptab = _mm256_set1_epi64x((long long)(uintptr_t)plain_tab);
        __m256i i0 = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(pidx));
        __m256i i1 = _mm256_cvtepi32_epi64(_mm256_extracti128_si256(pidx, 1));
        _mm256_storeu_si256((__m256i *)&p->plain[8 * j],
                            _mm256_add_epi64(ptab, _mm256_slli_epi64(i0, 4)));
        _mm256_storeu_si256((__m256i *)&p->plain[8 * j + 4],
                            _mm256_add_epi64(ptab, _mm256_slli_epi64(i1, 4)));
        /* STEP lanes of finite x: ordinal(x) - ordinal(c), key = c's bits
         * (the caller adds its table's R and checks the symbol) */
        skv_v8i st = (flag == V8(0)) & (mag < V8(0x7f80));
        skv_v8i dord = (mag ^ neg) - ((key & V8(0x7fff)) ^ -((key >> 15) & V8(1)));
        sym = SEL(st, dord, sym);
        memcpy(&p->sym[8 * j], &sym, sizeof sym);
        cnt |= st & V8(ENC8_STEP);
        fix[j] = (uint8_t)(f & ~(unsigned)_mm256_movemask_ps((__m256)st));
        __m128i c16 = _mm_packs_epi32(_mm256_castsi256_si128((__m256i)cnt),
                                      _mm256_extracti128_si256((__m256i)cnt, 1));
        _mm_storel_epi64((__m128i *)&p->cnt[8 * j], _mm_packus_epi16(c16, c16));
    }
}
#endif

struct skv_encoder {
    skv_cmodel *m;
    uint64_t *ops;
    size_t nops, cap;
    uint32_t n;
    uint64_t h;
    double ideal;
    int ideal_on, ideal_now; /* the ideal cost asked for; kept for this stream */
    uint8_t calib[16];
    const skv_atoms *atoms;
    uint16_t *words;
    size_t wcap;
    uint64_t raw_slow; /* plain bits queued out of line by the current put_n */
    skv_fcache fc;
    skv_rcache rc;
    int version_on, version; /* the stream version asked for; this stream's */
    int states_on, states;   /* version 2's states asked for; this stream's */
    int rc_off;              /* the row cache switched off (skv_encoder_set_row_cache) */
    /* version 2: the table symbols in decoding order (skv_eop address << 4
     * | state), the raw bit stream (zero past rbits2), the operations of
     * an unfinished group waiting in ops, the fast path's packed row */
    uint64_t *q2;
    size_t nq2, q2cap;
    uint8_t *raw2;
    uint64_t rbits2;
    size_t raw2cap;
    skv_v2pack pk2;
    uint32_t acc[SKV_V2_STATES]; /* version 2: the checksum lanes */
};

int skv_encoder_create(skv_cmodel *m, skv_encoder **out)
{
    *out = NULL;
    pthread_once(&plain_once, plain_init);
    skv_encoder *e = skv_calloc(1, sizeof *e);
    if (!e || !rcache_grow(&e->rc, RCACHE_MIN)) {
        skv_free(e);
        return skv_error(SKV_ERR_NOMEM, "encoder");
    }
    e->m = m;
    e->ideal_on = 1;
    e->version_on = 1;
    e->states_on = SKV_V2_STATES;
    skv_encoder_reset(e, NULL);
    *out = e;
    return SKV_OK;
}

void skv_encoder_free(skv_encoder *e)
{
    if (!e)
        return;
    skv_free(e->ops);
    skv_free(e->words);
    skv_free(e->q2);
    skv_free(e->raw2);
    skv_free(e->pk2.mem);
    rcache_free(&e->rc);
    skv_free(e);
}

const skv_rcache *skv__encoder_rcache(const skv_encoder *e)
{
    return &e->rc;
}

void skv_encoder_reset(skv_encoder *e, const uint8_t calib_id[16])
{
    skv_encoder_reset_atoms(e, calib_id, NULL);
}

void skv_encoder_reset_atoms(skv_encoder *e, const uint8_t calib_id[16], const skv_atoms *atoms)
{
    e->atoms = atoms;
    e->nops = 0;
    e->n = 0;
    e->ideal = 0;
    e->ideal_now = e->ideal_on;
    fcache_start(&e->fc, e->m->lat.dt);
    rcache_clear(&e->rc);
    e->rc.off = e->rc_off;
    e->h = 0x243f6a8885a308d3ull;
    e->version = e->version_on;
    e->states = e->states_on;
    if (e->raw2) /* the raw bit stream is ORed into zeros */
        memset(e->raw2, 0, (size_t)(e->rbits2 / 8) + 16 < e->raw2cap ? (size_t)(e->rbits2 / 8) + 16 : e->raw2cap);
    e->nq2 = 0;
    e->rbits2 = 0;
    for (int l = 0; l < SKV_V2_STATES; l++)
        e->acc[l] = V2_ACC0;
    if (calib_id)
        memcpy(e->calib, calib_id, 16);
    else
        memset(e->calib, 0, 16);
}

/* queue a table symbol (and add its ideal cost when the stream keeps it:
 * track, skv_encoder_set_ideal) */
SKV_ALWAYS_INLINE void put_sym(uint64_t **o, double *ideal, int track, const skv_ftab *t,
                               uint32_t sym)
{
    *(*o)++ = (uint64_t)(uintptr_t)&t->enc[sym];
    if (track)
        *ideal += t->lpd[sym]; /* (double)t->lp[sym] */
}

/* queue nb (<= 32) plain bits of v, high 16 first (cmodel.c op_raw) */
SKV_ALWAYS_INLINE void put_raw(uint64_t **o, uint64_t *raw_bits, uint32_t v, int nb)
{
    *raw_bits += (uint64_t)nb;
    if (__builtin_expect(nb > 16, 0)) {
        nb -= 16;
        put_plain(o, v >> nb, 16);
    }
    if (nb > 0)
        put_plain(o, v, nb);
}

/* the escape: the table's last symbol, x's high byte under p_emp, the rest
 * as plain bits */
SKV_ALWAYS_INLINE void put_escape(const skv_cmodel *m, const skv_ftab *t, uint32_t x, uint64_t **o,
                                  double *ideal, int track, uint64_t *raw_bits)
{
    const skv_lat *L = &m->lat;
    put_sym(o, ideal, track, t, t->n - 1);
    put_sym(o, ideal, track, &m->pemp, x >> (L->nbits - 8));
    if (L->nbits > 8)
        put_raw(o, raw_bits, x & ((1u << (L->nbits - 8)) - 1u), L->nbits - 8);
}

/* BUCKET mode off the common case: the zero bucket, buckets below one
 * lattice step or in subnormals, escapes (skv__plan) */
SKV_ALWAYS_INLINE void put_bucket_slow(const skv_cmodel *m, const skv_lat *L, const skv_fcls *c,
                                       uint32_t x, uint64_t **o, double *ideal, int track,
                                       uint64_t *raw_bits)
{
    const skv_ftab *t = c->tab;
    uint32_t mag = x & (L->sign - 1u);
    int big = mag >= L->inf_mag;
    uint64_t j = big ? 0 : fbucket_of(L, mag, c->G, &big);
    if (big) { /* not finite, or j >= 2^40: far outside any window */
        put_escape(m, t, x, o, ideal, track, raw_bits);
        return;
    }
    int64_t kb = (int64_t)j ^ -(int64_t)((x & L->sign) != 0); /* -1 - j for negative x */
    uint64_t sym = (uint64_t)(kb - c->base);
    if (sym >= c->nesc) {
        put_escape(m, t, x, o, ideal, track, raw_bits);
        return;
    }
    put_sym(o, ideal, track, t, (uint32_t)sym);
    uint32_t lo, hi;
    if (j > 0) {
        fbucket_range(L, j, c->G, &lo, &hi);
    } else {
        int lvl = fzero_level(L, mag, c->G);
        put_sym(o, ideal, track, &m->zero, (uint32_t)lvl);
        fzero_range(L, c->G, lvl, &lo, &hi);
    }
    put_raw(o, raw_bits, mag - lo, fbits_for((uint64_t)hi - lo));
}

/* The out-of-line forms of the two: the queue pointer and the cost go in
 * and come back by value, so that the hot loop's own copies are never
 * addressed and stay in registers (the symbol costs are summed in the
 * same order either way); plain bits are counted in *raw_slow. */
typedef struct {
    uint64_t *o;
    double ideal;
} skv_eret;

static __attribute__((noinline)) skv_eret put_escape_ool(const skv_cmodel *m, const skv_ftab *t,
                                                         uint32_t x, uint64_t *o, double ideal,
                                                         int track, uint64_t *raw_slow)
{
    put_escape(m, t, x, &o, &ideal, track, raw_slow);
    return (skv_eret){o, ideal};
}

static __attribute__((noinline)) skv_eret put_bucket_ool(const skv_cmodel *m, const skv_lat *L,
                                                         const skv_fcls *c, uint32_t x, uint64_t *o,
                                                         double ideal, int track, uint64_t *raw_slow)
{
    put_bucket_slow(m, L, c, x, &o, &ideal, track, raw_slow);
    return (skv_eret){o, ideal};
}

/* The operations of one scalar x < 2^nbits of class c (skv__plan). The
 * common case, x normal in a bucket j >= 1 that holds 2^nb lattice points:
 * j is x's significand shifted right by nb, and x's index in the bucket its
 * low nb bits. */
SKV_ALWAYS_INLINE void enc_one(const skv_cmodel *m, const skv_lat *L, const skv_fcls *c, uint32_t x,
                               uint64_t **o, double *ideal, int track, uint64_t *raw_bits,
                               uint64_t *raw_slow)
{
    const skv_ftab *t = c->tab;
    uint32_t mag = x & (L->sign - 1u);
    if (c->bucket) {
        uint32_t E = mag >> L->mbits;
        int nb = L->bias + L->mbits + c->G - (int)E; /* -(exponent of x's step - G) */
        /* E != 0 && mag < L->inf_mag, as one comparison */
        int normal = mag - (1u << L->mbits) < L->inf_mag - (1u << L->mbits);
        if (__builtin_expect(normal && (unsigned)nb <= (unsigned)L->mbits &&
                                 (L->dt != SKV_DT_F8E4M3 || (mag | ((1u << nb) - 1u)) < L->inf_mag),
                             1)) {
            uint64_t j = (uint64_t)((mag & ((1u << L->mbits) - 1u)) | (1u << L->mbits)) >> nb;
            int64_t kb = (int64_t)j ^ -(int64_t)(x >> (L->nbits - 1)); /* x < 2^nbits */
            uint64_t sym = (uint64_t)(kb - c->base);
            if (__builtin_expect(sym < c->nesc, 1)) {
                put_sym(o, ideal, track, t, (uint32_t)sym);
                if (L->mbits > 16) { /* f32: up to 23 bits, as 16 + the rest */
                    put_raw(o, raw_bits, mag & ((1u << nb) - 1u), nb);
                } else {
                    *raw_bits += (uint32_t)nb; /* 0..mbits: no sign extension */
                    if (nb > 0)
                        put_plain(o, mag, nb);
                }
                return;
            }
        } else if (__builtin_expect(normal && nb > L->mbits &&
                                        nb - L->mbits <= ZLEVELS &&
                                        (L->dt != SKV_DT_F8E4M3 || E < (L->inf_mag >> L->mbits)),
                                    1)) {
            /* the bucket at zero, x normal within ZLEVELS binades below g:
             * its level is its binade, its index its fraction bits */
            int64_t kb = -(int64_t)((x & L->sign) != 0);
            uint64_t sym = (uint64_t)(kb - c->base);
            if (__builtin_expect(sym < c->nesc, 1)) {
                put_sym(o, ideal, track, t, (uint32_t)sym);
                put_sym(o, ideal, track, &m->zero, (uint32_t)(nb - L->mbits - 1));
                put_raw(o, raw_bits, mag & ((1u << L->mbits) - 1u), L->mbits);
                return;
            }
        }
        skv_eret r = put_bucket_ool(m, L, c, x, *o, *ideal, track, raw_slow);
        *o = r.o;
        *ideal = r.ideal;
        return;
    }
    uint64_t sym = (uint64_t)(fordinal(L, x) - c->base);
    if (__builtin_expect(mag < L->inf_mag && sym < c->nesc, 1)) {
        put_sym(o, ideal, track, t, (uint32_t)sym);
    } else {
        skv_eret r = put_escape_ool(m, t, x, *o, *ideal, track, raw_slow);
        *o = r.o;
        *ideal = r.ideal;
    }
}

SKV_ALWAYS_INLINE int put_n_impl(skv_encoder *e, const skv_lat *L, const uint32_t *x,
                                 const float *mu, const float *s, size_t n, const skv_fcls *given)
{
    skv_cmodel *m = e->m;
    const uint32_t mask = L->nbits == 32 ? 0xffffffffu : ((1u << L->nbits) - 1u);
    uint64_t *o = e->ops + e->nops;
    double ideal = 0;
    const int track = e->ideal_now;
    uint64_t raw_bits = 0, h = e->h;
    e->raw_slow = 0;
    int rc = SKV_OK;
    size_t i = 0;
    skv_fcls cls[SKV_BLOCK];
    if (given || rcache_on(&e->rc, n)) { /* repeating rows of (mu, s) */
        const skv_fcls *row = given ? given : rcache_get(m, L, &e->rc, mu, s, n);
        if (__builtin_expect(!row, 0))
            rc = SKV_ERR_NOMEM;
        else
            for (; i < n; i++) {
                uint32_t xi = x[i] & mask;
                enc_one(m, L, &row[i], xi, &o, &ideal, track, &raw_bits, &e->raw_slow);
                h = mix_in(h, xi);
            }
    } else if (!e->fc.off) { /* repeating (mu, s): look each class up as it comes */
        uint32_t hits = 0;
        for (; i < n; i++) {
            const skv_fcls *c = fcache_get(m, L, &e->fc, mu[i], s[i], &hits);
            if (__builtin_expect(!c, 0)) {
                rc = SKV_ERR_NOMEM;
                break;
            }
            uint32_t xi = x[i] & mask;
            enc_one(m, L, c, xi, &o, &ideal, track, &raw_bits, &e->raw_slow);
            h = mix_in(h, xi);
        }
        fcache_count(&e->fc, (uint32_t)i, hits);
    }
#ifdef SKV_HAVE_CLS8
    if (L->dt == SKV_DT_BF16 && n - i >= 8 && !rc && cls_simd() >= 2) {
        skv_cls8 o8[SKV_BLOCK / 8];
        uint8_t fix[SKV_BLOCK / 8];
        skv_enc8 p;
        while (n - i >= 8 && !rc) {
            size_t g = (n - i) / 8 < SKV_BLOCK / 8 ? (n - i) / 8 : SKV_BLOCK / 8, nk = 8 * g;
            skv__cls8_avx2(mu + i, s + i, g, o8);
            enc8_avx2(m->tabs, o8, g, x + i, cls, fix, &p);
            for (size_t j = 0; j < g && !rc; j++)
                for (unsigned f = fix[j]; f; f &= f - 1)
                    if (__builtin_expect(cls8_lane(m, L, mu + i + 8 * j, s + i + 8 * j, &o8[j],
                                                   __builtin_ctz(f), cls + 8 * j) != SKV_OK,
                                         0)) {
                        rc = SKV_ERR_NOMEM; /* code the groups before this one */
                        nk = 8 * j;
                        break;
                    }
            for (size_t k = 0; k < nk; k++, i++) {
                uint32_t xi = x[i] & mask;
                uint32_t c = p.cnt[k];
                if (c & 3u) { /* a BUCKET lane planned */
                    const skv_ftab *t = cls[k].tab;
                    uint32_t sy = p.sym[k];
                    o[0] = (uint64_t)(uintptr_t)&t->enc[sy];
                    o[1] = p.plain[k];
                    o += c & 3u;
                    raw_bits += c >> 2;
                    if (track)
                        ideal += t->lpd[sy];
                } else if (c == ENC8_STEP) {
                    const skv_cls8 *g8 = &o8[k >> 3];
                    const skv_ftab *t = __atomic_load_n(&m->tabs[g8->idx[k & 7]], __ATOMIC_ACQUIRE);
                    uint32_t sy = t ? p.sym[k] + (uint32_t)t->R : 0;
                    if (__builtin_expect(t != NULL && sy < t->n - 1, 1)) {
                        o[0] = (uint64_t)(uintptr_t)&t->enc[sy];
                        o++;
                        if (track)
                            ideal += t->lpd[sy];
                    } else {
                        size_t b = i - (k & 7); /* the group's first scalar */
                        if (__builtin_expect(cls8_lane(m, L, mu + b, s + b, g8, (int)(k & 7),
                                                       cls + (k & ~(size_t)7)) != SKV_OK,
                                             0)) {
                            rc = SKV_ERR_NOMEM;
                            break;
                        }
                        enc_one(m, L, &cls[k], xi, &o, &ideal, track, &raw_bits, &e->raw_slow);
                    }
                } else {
                    enc_one(m, L, &cls[k], xi, &o, &ideal, track, &raw_bits, &e->raw_slow);
                }
                h = mix_in(h, xi);
            }
        }
    }
#endif
    while (i < n && !rc) {
        size_t nb = n - i < SKV_BLOCK ? n - i : SKV_BLOCK;
        rc = fclassify_block(m, L, mu + i, s + i, nb, cls, &nb);
        for (size_t k = 0; k < nb; k++, i++) {
            uint32_t xi = x[i] & mask;
            enc_one(m, L, &cls[k], xi, &o, &ideal, track, &raw_bits, &e->raw_slow);
            h = mix_in(h, xi);
        }
    }
    e->nops = (size_t)(o - e->ops);
    e->ideal += ideal + (double)(raw_bits + e->raw_slow);
    e->h = h;
    e->n += (uint32_t)i;
    return rc ? skv_error(rc, "codec table") : SKV_OK;
}

/* The class of scalar i of a put_n/get_n with atoms (classified only when
 * its atom symbol says "none"): from the cached row, the (mu, s) cache, or
 * fclassify into *cl; NULL when a table cannot be built. */
SKV_ALWAYS_INLINE const skv_fcls *cls_one(skv_cmodel *m, const skv_lat *L, const skv_fcls *row,
                                          skv_fcache *fc, size_t i, const float *mu,
                                          const float *s, skv_fcls *cl, uint32_t *hits,
                                          uint32_t *looks)
{
    if (row)
        return &row[i];
    if (!fc->off) {
        (*looks)++;
        return fcache_get(m, L, fc, mu[i], s[i], hits);
    }
    return fclassify(m, L, mu[i], s[i], cl) == SKV_OK ? cl : NULL;
}

/* With atoms: scalar i is channel (e->n + i) mod nch; a channel with atoms
 * codes its atom symbol first and, for "none", the scalar as usual. */
SKV_ALWAYS_INLINE int put_n_atoms_impl(skv_encoder *e, const skv_lat *L, const uint32_t *x,
                                       const float *mu, const float *s, size_t n,
                                       const skv_fcls *given)
{
    skv_cmodel *m = e->m;
    const skv_atoms *as = e->atoms;
    const uint32_t mask = L->nbits == 32 ? 0xffffffffu : ((1u << L->nbits) - 1u);
    uint64_t *o = e->ops + e->nops;
    double ideal = 0;
    const int track = e->ideal_now;
    uint64_t raw_bits = 0, h = e->h;
    e->raw_slow = 0;
    int rc = SKV_OK;
    size_t i = 0;
    uint32_t ch = e->n % as->nch, hits = 0, looks = 0;
    const skv_fcls *row = given;
    if (!row && rcache_on(&e->rc, n) && !(row = rcache_get(m, L, &e->rc, mu, s, n))) {
        rc = SKV_ERR_NOMEM;
        n = 0;
    }
    for (; i < n; i++) {
        const skv_atom_ch *a = &as->ch[ch];
        uint32_t xi = x[i] & mask;
        if (++ch == as->nch)
            ch = 0;
        h = mix_in(h, xi);
        if (a->k) {
            uint32_t j = skv__atom_find(a, xi);
            put_sym(&o, &ideal, track, &a->tab, j);
            if (j < a->k)
                continue;
        }
        skv_fcls cl;
        const skv_fcls *c = cls_one(m, L, row, &e->fc, i, mu, s, &cl, &hits, &looks);
        if (__builtin_expect(!c, 0)) {
            rc = SKV_ERR_NOMEM;
            h = e->h; /* the stream is unusable until the next reset */
            break;
        }
        enc_one(m, L, c, xi, &o, &ideal, track, &raw_bits, &e->raw_slow);
    }
    if (looks)
        fcache_count(&e->fc, looks, hits);
    e->nops = (size_t)(o - e->ops);
    e->ideal += ideal + (double)(raw_bits + e->raw_slow);
    e->h = h;
    e->n += (uint32_t)i;
    return rc ? skv_error(rc, "codec table") : SKV_OK;
}

/* p (holding *cap elements of size sz) grown to hold need, its capacity
 * doubled from 4096: the block, or NULL when memory fails (p is then
 * unchanged, and so is *cap) */
static void *grow(void *p, size_t *cap, size_t need, size_t sz)
{
    if (need <= *cap && p)
        return p;
    size_t nc = *cap ? 2 * *cap : 4096;
    while (nc < need)
        nc *= 2;
    void *q = skv_realloc(p, nc * sz);
    if (q)
        *cap = nc;
    return q;
}

/* put_n's checks and queue room for n more scalars */
static int put_room(skv_encoder *e, size_t n)
{
    if (e->atoms && e->atoms->dt != e->m->lat.dt)
        return skv_error(SKV_ERR_ARG, "atoms of %s for a model of %s", skv_dtype_name(e->atoms->dt),
                         skv_dtype_name(e->m->lat.dt));
    if (n > SKV_STREAM_MAX_SCALARS - e->n)
        return skv_error(SKV_ERR_TOO_LARGE, "stream holds at most %u scalars", SKV_STREAM_MAX_SCALARS);
    /* version 2 queues version 1's operations for at most two partial
     * groups at a time (the one waiting and the one being put) */
    size_t nq = e->version == 2 ? 16 : n;
    uint64_t *o = grow(e->ops, &e->cap, e->nops + SKV_MAX_OPS * nq, sizeof *o);
    if (!o)
        return skv_error(SKV_ERR_NOMEM, "encoder ops");
    e->ops = o;
    if (e->version == 2) { /* at most 3 table symbols and 32 plain bits a scalar */
        uint64_t *q = grow(e->q2, &e->q2cap, e->nq2 + 3 * n + 24, sizeof *q);
        if (!q)
            return skv_error(SKV_ERR_NOMEM, "encoder ops");
        e->q2 = q;
        size_t had = e->raw2cap;
        uint8_t *r = grow(e->raw2, &e->raw2cap, (size_t)(e->rbits2 / 8) + 4 * (n + 16) + 16, 1);
        if (!r)
            return skv_error(SKV_ERR_NOMEM, "encoder ops");
        e->raw2 = r;
        if (e->raw2cap > had) /* the raw bit stream is ORed into zeros */
            memset(e->raw2 + had, 0, e->raw2cap - had);
    }
    return SKV_OK;
}

/* n scalars, with the classes of their row given (or NULL: found here) */
static int put_n_given1(skv_encoder *e, const uint32_t *x, const float *mu, const float *s, size_t n,
                        const skv_fcls *given)
{
    if (e->atoms) {
        switch (e->m->lat.dt) {
        case SKV_DT_BF16: return put_n_atoms_impl(e, &SKV__LAT_BF16, x, mu, s, n, given);
        case SKV_DT_F16: return put_n_atoms_impl(e, &SKV__LAT_F16, x, mu, s, n, given);
        case SKV_DT_F8E4M3: return put_n_atoms_impl(e, &SKV__LAT_F8, x, mu, s, n, given);
        default: return put_n_atoms_impl(e, &SKV__LAT_F32, x, mu, s, n, given);
        }
    }
    switch (e->m->lat.dt) {
    case SKV_DT_BF16: return put_n_impl(e, &SKV__LAT_BF16, x, mu, s, n, given);
    case SKV_DT_F16: return put_n_impl(e, &SKV__LAT_F16, x, mu, s, n, given);
    case SKV_DT_F8E4M3: return put_n_impl(e, &SKV__LAT_F8, x, mu, s, n, given);
    default: return put_n_impl(e, &SKV__LAT_F32, x, mu, s, n, given);
    }
}

/* nb plain bits of v into version 2's raw bit stream */
static inline void v2_raw(skv_encoder *e, uint32_t v, int nb)
{
    uint8_t *p = e->raw2 + (e->rbits2 >> 3);
    uint64_t cur;
    memcpy(&cur, p, 8);
    cur |= (uint64_t)(v & (uint32_t)((1ull << nb) - 1u)) << (e->rbits2 & 7);
    memcpy(p, &cur, 8); /* little-endian hosts; see skv_load64_le elsewhere */
    e->rbits2 += (uint64_t)nb;
}

/* The m scalars of the group at g0, whose version 1 operations are
 * ops[0..nops), sorted into version 2's order: the table symbols in
 * rounds, each on its scalar's state (the first of each scalar: the atom
 * symbol, or the class symbol; then the second of those that have one:
 * the class symbol after an atom "none", a zero level, a p_emp byte;
 * then the third), the plain bits to the raw bit stream in scalar order
 * (version 1's plans put nothing else after a first symbol). */
static void v2_sort_group(skv_encoder *e, uint32_t g0, uint32_t m)
{
    const skv_cmodel *cm = e->m;
    const skv_eop *z0 = cm->zero.enc, *z1 = z0 + cm->zero.n, *e0 = cm->pemp.enc, *e1 = e0 + cm->pemp.n;
    const skv_eop *t0 = plain_tab, *t1 = plain_tab + (2u << PLAIN_TAB_BITS);
    const skv_atoms *as = e->atoms;
    const uint64_t *ops = e->ops;
    size_t p = 0, nops = e->nops;
    uint64_t more[8][3];
    int nm[8];
    for (uint32_t j = 0; j < m; j++) {
        uint64_t lane = (uint64_t)v2_lane(g0 + j);
        uint64_t op = ops[p++];
        e->q2[e->nq2++] = op << 4 | lane;
        nm[j] = 0;
        if (as) {
            const skv_atom_ch *a = &as->ch[(g0 + j) % as->nch];
            if (a->k && op != (uint64_t)(uintptr_t)&a->tab.enc[a->k])
                continue; /* an atom: nothing follows */
            if (a->k) /* "none": the class symbol */
                more[j][nm[j]++] = ops[p++] << 4 | lane;
        }
        for (; p < nops; p++) {
            op = ops[p];
            const skv_eop *ep = (const skv_eop *)(uintptr_t)op;
            if (op & 1u) { /* wide plain bits */
                v2_raw(e, (uint32_t)(op >> 8), (int)((op >> 1) & 31u));
            } else if (ep >= t0 && ep < t1) {
                uint32_t idx = (uint32_t)(ep - t0);
                int nb = 31 - __builtin_clz(idx);
                v2_raw(e, idx - (1u << nb), nb);
            } else if ((ep >= z0 && ep < z1) || (ep >= e0 && ep < e1)) {
                more[j][nm[j]++] = op << 4 | lane;
            } else {
                break; /* the next scalar's first */
            }
        }
    }
    for (int k = 0; k < 3; k++) /* rounds 2 and up */
        for (uint32_t j = 0; j < m; j++)
            if (nm[j] > k)
                e->q2[e->nq2++] = more[j][k];
    e->nops = 0;
}

#ifdef SKV_HAVE_CLS8
/* v2_pack_room when p has less room than n */
static int v2_pack_grow(skv_v2pack *p, size_t n)
{
    size_t per = 2 * sizeof(uint64_t) + 15 * sizeof(int32_t);
    void *mem = skv_malloc(n * per + n / 8 + 64);
    if (!mem)
        return 0;
    skv_free(p->mem);
    p->mem = mem;
    p->cap = n;
    p->sn = 0; /* (slast is new) */
    p->e4 = mem;
    p->e41 = p->e4 + n;
    int32_t **arr[] = {&p->lut, &p->bvt, &p->base, &p->g,   &p->nesc, &p->ok,  &p->stp,
                       &p->lut1, &p->ak, &p->aoff, &p->ses, &p->ssub, &p->sg, &p->sbo};
    int32_t *q = (int32_t *)(void *)(p->e41 + n);
    for (size_t k = 0; k < sizeof arr / sizeof *arr; k++, q += n)
        *arr[k] = q;
    p->slast = (float *)(void *)q; /* 14 arrays of int32_t and this one: per above */
    p->gb = (uint8_t *)(void *)(p->slast + n);
    return 1;
}

/* Room in p for rows of n scalars; 0 when memory fails. */
static inline int v2_pack_room(skv_v2pack *p, size_t n)
{
    return n <= p->cap || v2_pack_grow(p, n);
}

/* The bases p's offsets are taken from: m's table block (its indexes),
 * m's bucket values, the atoms' channels */
static void v2_pack_bases(const skv_cmodel *m, skv_v2pack *p, const skv_atoms *as)
{
    p->lbase = (const uint8_t *)m->tblock[0].lut;
    p->bbase = (const uint8_t *)m->bvblock;
    p->okall = 1;
    p->anystp = 0;
    p->vals = as ? as->vals : NULL;
    p->abase = as ? (const uint8_t *)as->ch : NULL;
}

/* Scalar j's first table in p (its channel's atoms', when it has any),
 * after its class's (p->lut, p->e4) */
static inline void v2_pack_atoms(skv_v2pack *p, const skv_atoms *as, size_t j, int ok)
{
    const skv_atom_ch *a = as && as->ch[j % as->nch].k ? &as->ch[j % as->nch] : NULL;
    p->ak[j] = a ? (int32_t)a->k : 0;
    p->aoff[j] = a ? (int32_t)(a->val - as->vals) : 0;
    p->lut1[j] = !ok ? 0 : a ? (int32_t)((const uint8_t *)a->tab.lut - p->abase) : p->lut[j];
    p->e41[j] = !ok ? 0 : a ? (uint64_t)(uintptr_t)a->tab.enc << 4 : p->e4[j];
}

/* p holding row (n scalars, an array of the row cache rc) as it is now:
 * packed unless it already is; 0 when memory fails. The bucket values
 * of the row's widths are built here. */
static int v2_pack(skv_cmodel *m, const skv_rcache *rc, skv_v2pack *p, const skv_fcls *row, size_t n,
                   const skv_atoms *as)
{
    if (as && n % as->nch) /* (its dtype is the model's: begin and put_room check) */
        return 0;
    uint32_t gen = 0;
    for (int k = 0; k < RCACHE_SLOTS; k++)
        if (rc->cls[k] == row) {
            if (p->row == row && p->n == n && p->gen == rc->gen[k] && rc->n[k] == n && p->as == as)
                return 1;
            gen = rc->gen[k];
        }
    if (!v2_pack_room(p, n))
        return 0;
    v2_pack_bases(m, p, as);
    p->sn = 0; /* (v2_pack_rows's groups of gb are overwritten) */
    for (size_t j = 0; j < n; j++) {
        const skv_fcls *c = &row[j];
        int ok = c->tab >= m->tblock && c->tab < m->tblock + N_STEP_TABS + N_BUCKET_TABS &&
                 c->tab->enc && c->base > -(1 << 30) && c->base < (1 << 30);
        if (c->bucket && ok && __atomic_load_n(&m->bvt[c->G + BVT_G0], __ATOMIC_ACQUIRE) == skv__bvt_none)
            skv__build_bvt(m, c->G);
        ok = ok && (!c->bucket || __atomic_load_n(&m->bvt[c->G + BVT_G0], __ATOMIC_ACQUIRE) != skv__bvt_none);
        const int32_t lo = ok ? (int32_t)((c->tab - m->tblock) * (ptrdiff_t)sizeof(skv_ftab)) : 0;
        p->ok[j] = ok ? -1 : 0;
        p->okall &= ok;
        p->stp[j] = c->bucket ? 0 : -1;
        p->anystp |= !c->bucket;
        p->lut[j] = lo;
        p->bvt[j] = ok && c->bucket ? (c->G + BVT_G0) * 2 * BVT_K * 4 : 0;
        p->e4[j] = ok ? (uint64_t)(uintptr_t)c->tab->enc << 4 : 0;
        p->base[j] = ok ? (int32_t)c->base : 0;
        p->g[j] = c->G;
        p->nesc[j] = (int32_t)c->nesc;
        v2_pack_atoms(p, as, j, ok);
    }
    p->row = row;
    p->n = n;
    p->gen = gen;
    p->as = as;
    return 1;
}

/* v2_pack_rows's group of lanes j..j+7 into p (enc: the encoder's e4
 * too), its lanes' ok, STEP and widths folded into *okacc, *sacc, *bvall
 * (sknown: s's part already in p). Returns whether the group is all
 * BUCKET with its tables built and taken (p->gb). */
static inline __attribute__((target("avx2"), always_inline)) int
v2_pack_group(const skv_v8i *K, skv_cmodel *m, skv_v2pack *p, const float *mu, const float *s, size_t j,
              int sknown, int enc, __m256i *okacc, __m256i *sacc, __m256i *bvall)
{
    const int bready = p->bready;
    const uint8_t *tb = (const uint8_t *)m->tblock;
    const int *rdy = m->ready, *rdyb = m->ready + N_STEP_TABS + N_BUCKET_TABS;
    const __m256i zero = _mm256_setzero_si256(), one = _mm256_set1_epi32(1);
    __m256i isS, isB, ok, ix, kv, Gv, R;
    int allb;
    for (int tries = 0;; tries++) {
        skv_v8i flag, idx, key, G, Es, sub;
        if (sknown) {
            memcpy(&Es, p->ses + j, sizeof Es);
            memcpy(&sub, p->ssub + j, sizeof sub);
            memcpy(&G, p->sg + j, sizeof G);
        } else {
            cls8_s(K, s + j, &Es, &sub, &G);
            memcpy(p->ses + j, &Es, sizeof Es);
            memcpy(p->ssub + j, &sub, sizeof sub);
            memcpy(p->sg + j, &G, sizeof G);
            skv_v8i bo = (sub * 4 + K[K_NSTEP]) * (int)sizeof(skv_ftab);
            memcpy(p->sbo + j, &bo, sizeof bo);
        }
        cls8_mu(K, mu + j, Es, sub, G, &flag, &idx, &key, enc ? 1 : 2);
        __m256i fl = (__m256i)flag;
        ix = (__m256i)idx, kv = (__m256i)key, Gv = (__m256i)G;
        isS = _mm256_cmpeq_epi32(fl, zero), isB = _mm256_cmpeq_epi32(fl, one);
        __m256i okc = _mm256_or_si256(isS, isB);
        ix = _mm256_and_si256(ix, okc);
        allb = bready && _mm256_movemask_ps(_mm256_castsi256_ps(isB)) == 0xff;
        if (allb) {
            /* every lane BUCKET (most groups at ctx), every BUCKET table
             * built: R is theirs, without the gather (which waits on the
             * classification: the pack's longest chain) */
            R = _mm256_set1_epi32(BUCKET_R);
            ok = isB;
        } else {
            R = _mm256_mask_i32gather_epi32(zero, rdy, ix, okc, 4); /* 0: not built */
            ok = _mm256_cmpgt_epi32(R, zero);
        }
        if (!sknown) { /* every lane's width (G comes from s alone, in range), built here */
            __m256i gi = _mm256_add_epi32(Gv, _mm256_set1_epi32(BVT_G0));
            __m256i rb = _mm256_i32gather_epi32(rdyb, gi, 4);
            unsigned nb = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(rb)) ^ 0xffu;
            if (nb) {
                int32_t gs[8];
                _mm256_storeu_si256((__m256i *)gs, Gv);
                for (; nb; nb &= nb - 1)
                    skv__build_bvt(m, gs[__builtin_ctz(nb)]);
                rb = _mm256_i32gather_epi32(rdyb, gi, 4);
            }
            *bvall = _mm256_and_si256(*bvall, rb);
            ok = _mm256_and_si256(ok, _mm256_or_si256(isS, rb));
        }
        unsigned miss = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_andnot_si256(ok, okc)));
        if (!miss || tries)
            break;
        for (; miss; miss &= miss - 1) { /* build what the lane needs, then again */
            int q = __builtin_ctz(miss);
            skv_fcls c;
            if (fclassify(m, &SKV__LAT_BF16, mu[j + q], s[j + q], &c) == SKV_OK && c.bucket)
                skv__build_bvt(m, c.G);
        }
    }
    __m256i off = _mm256_and_si256(_mm256_mullo_epi32(ix, _mm256_set1_epi32((int)sizeof(skv_ftab))), ok);
    R = _mm256_and_si256(R, ok);
    __m256i nn = _mm256_add_epi32(_mm256_add_epi32(R, R), _mm256_set1_epi32(2)); /* 2R + 2 symbols */
    /* STEP: key is c's bits, the base its signed ordinal */
    __m256i neg = _mm256_sub_epi32(zero, _mm256_and_si256(_mm256_srli_epi32(kv, 15), one));
    __m256i ord = _mm256_xor_si256(_mm256_and_si256(kv, _mm256_set1_epi32(0x7fff)), neg);
    __m256i base = _mm256_and_si256(_mm256_sub_epi32(_mm256_blendv_epi8(kv, ord, isS), R), ok);
    __m256i gi = _mm256_and_si256(_mm256_add_epi32(Gv, _mm256_set1_epi32(BVT_G0)), _mm256_andnot_si256(isS, ok));
    _mm256_storeu_si256((__m256i *)(p->lut + j), off);
    _mm256_storeu_si256((__m256i *)(p->bvt + j), _mm256_slli_epi32(gi, 10)); /* 2 * BVT_K * 4 bytes */
    _mm256_storeu_si256((__m256i *)(p->base + j), base);
    _mm256_storeu_si256((__m256i *)(p->g + j), Gv);
    _mm256_storeu_si256((__m256i *)(p->nesc + j), _mm256_sub_epi32(nn, one));
    _mm256_storeu_si256((__m256i *)(p->ok + j), ok);
    _mm256_storeu_si256((__m256i *)(p->stp + j), isS);
    *okacc = _mm256_and_si256(*okacc, ok);
    *sacc = _mm256_or_si256(*sacc, _mm256_and_si256(isS, ok));
    if (enc) {
        const long long *eb = (const long long *)(const void *)(tb + offsetof(skv_ftab, enc));
        __m256i m0 = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(ok));
        __m256i m1 = _mm256_cvtepi32_epi64(_mm256_extracti128_si256(ok, 1));
        __m256i e0 = _mm256_mask_i32gather_epi64(zero, eb, _mm256_castsi256_si128(off), m0, 1);
        __m256i e1 = _mm256_mask_i32gather_epi64(zero, eb, _mm256_extracti128_si256(off, 1), m1, 1);
        _mm256_storeu_si256((__m256i *)(p->e4 + j), _mm256_slli_epi64(e0, 4));
        _mm256_storeu_si256((__m256i *)(p->e4 + j + 4), _mm256_slli_epi64(e1, 4));
    }
    return allb && _mm256_movemask_ps(_mm256_castsi256_ps(ok)) == 0xff;
}

/* v2_pack_group for the decoder's group of lanes j..j+7 when v2_pack_rows
 * packed it last as all BUCKET, under the same s, its tables built (gb):
 * its classes then differ in their phase alone, and of its arrays only
 * lut and base change. Returns 0, with nothing stored, when mu's group is
 * not all BUCKET by its exponent alone (cls8_mu's SPLIT 2). */
static inline __attribute__((target("avx2"), always_inline)) int v2_pack_group_b(const skv_v8i *K, skv_v2pack *p,
                                                                                  const float *mu, size_t j)
{
    skv_v8i mb, emu, Y, em, G, bo;
    cls8_y(K, mu + j, &mb, &emu, &Y, &em);
    memcpy(&G, p->sg + j, sizeof G);
    if (!cls8_allb(K, emu, G))
        return 0;
    /* cls8_bucket on such lanes: em - G is below -17 (emu < G + 133, and
     * G >= -123 from s's range), so every lane is in range, kb = G - em is
     * 18 or more, the bucket Y >> kb and the phase (Y >> (kb - 2)) & 3
     * (vpsravd's shifts past 31 give the sign, as 31 does) */
    const __m256i kb = (__m256i)(G - em), Yv = (__m256i)Y;
    __m256i bi = _mm256_srav_epi32(Yv, kb);
    __m256i ph = _mm256_and_si256(_mm256_srav_epi32(Yv, _mm256_sub_epi32(kb, _mm256_set1_epi32(2))),
                                  _mm256_set1_epi32(3));
    /* the index of phase ph of the width's classes: bo + ph * sizeof */
    const __m256i phoff = _mm256_setr_epi32(0, (int)sizeof(skv_ftab), 2 * (int)sizeof(skv_ftab),
                                            3 * (int)sizeof(skv_ftab), 0, 0, 0, 0);
    memcpy(&bo, p->sbo + j, sizeof bo);
    _mm256_storeu_si256((__m256i *)(p->lut + j), _mm256_add_epi32((__m256i)bo, _mm256_permutevar8x32_epi32(phoff, ph)));
    _mm256_storeu_si256((__m256i *)(p->base + j), _mm256_sub_epi32(bi, _mm256_set1_epi32(BUCKET_R)));
    p->nb++;
    return 1;
}

/* p holding the classes of the bf16 row mu[0..n), s[0..n) (n a multiple
 * of 8), classified eight lanes at a time (skv__cls8_avx2's arithmetic)
 * straight into the pack: rows that do not repeat (ctx's, with the row
 * cache off). Tables not built yet are built on the way; a lane the
 * arithmetic flags, or whose table cannot be built, is left to the other
 * paths (p->ok 0). enc: the encoder's e4 as well. 0 when memory fails. */
static inline __attribute__((target("avx2"), always_inline)) int
v2_pack_rows_t(skv_cmodel *m, skv_v2pack *p, const float *mu, const float *s, size_t n, const skv_atoms *as,
               int enc)
{
    if (n % 8 || (as && n % as->nch) || !v2_pack_room(p, n))
        return 0;
    v2_pack_bases(m, p, as);
    p->row = NULL, p->gen = 0, p->n = n, p->as = as;
    if (!p->bready) { /* (tables once built stay: checked until they all are) */
        p->bready = 1;
        for (int t = N_STEP_TABS; t < N_STEP_TABS + N_BUCKET_TABS; t++)
            p->bready &= __atomic_load_n(&m->ready[t], __ATOMIC_ACQUIRE) == BUCKET_R;
    }
    const skv_v8i *K = cls8_k;
    __asm__("" : "+r"(K));
    __m256i okacc = _mm256_set1_epi32(-1), sacc = _mm256_setzero_si256();
    /* the bucket values' widths depend on s alone: checked again only
     * when s is not the row's of the call before (ctx: a seen-class's) */
    int sknown = p->sn == n;
    for (size_t j = 0; sknown && j < n; j += 8) /* (memcmp's bits, without its call) */
        sknown = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(
                     _mm256_loadu_si256((const __m256i *)(p->slast + j)), _mm256_loadu_si256((const __m256i *)(s + j))))) == 0xff;
    __m256i bvall = _mm256_set1_epi32(-1);
    /* the decoder's groups packed all BUCKET last time under this s */
    const int fastb = sknown && !as && !enc;
    for (size_t j = 0; j < n; j += 8) {
        if (fastb && p->gb[j / 8] && v2_pack_group_b(K, p, mu, j))
            continue;
        int gb = v2_pack_group(K, m, p, mu, s, j, sknown, enc, &okacc, &sacc, &bvall);
        if (!enc)
            p->gb[j / 8] = (uint8_t)gb;
        for (int q = 0; as && q < 8; q++)
            v2_pack_atoms(p, as, j + (size_t)q, p->ok[j + q] != 0);
    }
    p->okall = _mm256_movemask_ps(_mm256_castsi256_ps(okacc)) == 0xff;
    p->anystp = _mm256_movemask_ps(_mm256_castsi256_ps(sacc)) != 0;
    if (!sknown && _mm256_movemask_ps(_mm256_castsi256_ps(bvall)) == 0xff) {
        /* every lane's widths checked: the next call with this s may skip it */
        memcpy(p->slast, s, n * sizeof *s);
        p->sn = n;
    }
    return 1;
}

static __attribute__((target(T512))) int v2_pack_rows_512(skv_cmodel *m, skv_v2pack *p, const float *mu,
                                                         const float *s, size_t n, const skv_atoms *as, int enc)
{
    return enc ? v2_pack_rows_t(m, p, mu, s, n, as, 1) : v2_pack_rows_t(m, p, mu, s, n, as, 0);
}

static __attribute__((target("avx2"))) int v2_pack_rows(skv_cmodel *m, skv_v2pack *p, const float *mu,
                                                      const float *s, size_t n, const skv_atoms *as,
                                                      int enc)
{
    if (cls_simd() == 3)
        return v2_pack_rows_512(m, p, mu, s, n, as, enc);
    return enc ? v2_pack_rows_t(m, p, mu, s, n, as, 1) : v2_pack_rows_t(m, p, mu, s, n, as, 0);
}

/* Whole groups of bf16 scalars x (the row's scalars from i on, at stream
 * position e->n, a multiple of 8), up to ng, planned eight at a time on
 * AVX2 (enc_one's common case; grown from bench_lanes's model): each
 * group's table symbols into q2 in decoding order (version 2's rounds),
 * its plain bits into the raw bit stream at once; stops before a group
 * with a lane off that case. With ATOMS, a lane on a channel with atoms
 * looks its value up among them (skv__atom_find): an atom codes its
 * symbol alone, "none" codes the class symbol in round 2 and a level in
 * round 3. Returns the groups done. */
static inline __attribute__((target("avx2"), always_inline)) size_t
v2_put_run_t(skv_encoder *e, const uint32_t *x, size_t i, size_t ng, const int ATOMS, const int STEPS)
{
    const skv_v2pack *p = &e->pk2;
    const __m256i m7f = _mm256_set1_epi32(0x7f), one = _mm256_set1_epi32(1);
    const uint64_t zenc = (uint64_t)(uintptr_t)e->m->zero.enc << 4;
    size_t k = 0;
    for (; k < ng; k++) {
        size_t c0 = i + 8 * k;
        uint32_t at = e->n + 8 * (uint32_t)k;
        uint64_t l0 = (at >> 3 & 1u) * 8;
        __m256i xv = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + 8 * k)), _mm256_set1_epi32(0xffff));
        __m256i mag = _mm256_and_si256(xv, _mm256_set1_epi32(0x7fff)), sg = _mm256_srli_epi32(xv, 15);
        __m256i nb = _mm256_sub_epi32(_mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(p->g + c0)),
                                                       _mm256_set1_epi32(134)),
                                      _mm256_srli_epi32(mag, 7));
        __m256i normal = _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(0x80), mag),
                                             _mm256_cmpgt_epi32(_mm256_set1_epi32(0x7f80), mag));
        __m256i common = _mm256_and_si256(normal, _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_setzero_si256(), nb),
                                                                      _mm256_cmpgt_epi32(_mm256_set1_epi32(8), nb)));
        __m256i zb = _mm256_and_si256(normal, _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(8), nb),
                                                                  _mm256_cmpgt_epi32(_mm256_set1_epi32(8 + ZLEVELS), nb)));
        __m256i nbc = _mm256_and_si256(nb, _mm256_set1_epi32(7));
        __m256i j = _mm256_srlv_epi32(_mm256_or_si256(_mm256_and_si256(mag, m7f), _mm256_set1_epi32(0x80)), nbc);
        __m256i neg = _mm256_sub_epi32(_mm256_setzero_si256(), sg);
        __m256i kb = _mm256_blendv_epi8(_mm256_xor_si256(j, neg), neg, zb);
        /* STEP lanes: the signed ordinal, any finite value */
        __m256i stp = _mm256_setzero_si256();
        common = _mm256_or_si256(common, zb);
        if (STEPS) {
            stp = _mm256_loadu_si256((const __m256i *)(p->stp + c0));
            kb = _mm256_blendv_epi8(kb, _mm256_xor_si256(mag, neg), stp);
            common = _mm256_blendv_epi8(common, _mm256_cmpgt_epi32(_mm256_set1_epi32(0x7f80), mag), stp);
            zb = _mm256_andnot_si256(stp, zb);
        }
        __m256i sy = _mm256_sub_epi32(kb, _mm256_loadu_si256((const __m256i *)(p->base + c0)));
        __m256i nm1 = _mm256_sub_epi32(_mm256_loadu_si256((const __m256i *)(p->nesc + c0)), one);
        __m256i cok = _mm256_and_si256(common, _mm256_cmpeq_epi32(_mm256_min_epu32(sy, nm1), sy));
        __m256i hit = _mm256_setzero_si256(), none = hit, r1 = sy;
        if (ATOMS) {
            uint32_t xs[8], ai[8];
            _mm256_storeu_si256((__m256i *)xs, xv);
            for (int jj = 0; jj < 8; jj++)
                ai[jj] = p->ak[c0 + jj] ? skv__atom_find(&e->atoms->ch[(c0 + jj) % e->atoms->nch], xs[jj]) : 0;
            __m256i akv = _mm256_loadu_si256((const __m256i *)(p->ak + c0));
            __m256i aiv = _mm256_loadu_si256((const __m256i *)ai);
            hit = _mm256_cmpgt_epi32(akv, aiv);
            none = _mm256_andnot_si256(hit, _mm256_cmpgt_epi32(akv, _mm256_setzero_si256()));
            r1 = _mm256_blendv_epi8(sy, aiv, _mm256_or_si256(hit, none));
            cok = _mm256_or_si256(cok, hit);
            zb = _mm256_andnot_si256(hit, zb);
        }
        __m256i ok = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(p->ok + c0)), cok);
        if (_mm256_movemask_ps(_mm256_castsi256_ps(ok)) != 0xff)
            break;
        __m256i nbv = _mm256_blendv_epi8(nbc, _mm256_set1_epi32(7), zb);
        if (STEPS)
            nbv = _mm256_andnot_si256(stp, nbv);
        if (ATOMS)
            nbv = _mm256_andnot_si256(hit, nbv);
        __m256i plain = _mm256_and_si256(mag, _mm256_sub_epi32(_mm256_sllv_epi32(one, nbv), one));
        const __m256i lane0 = _mm256_setr_epi64x((long long)l0, (long long)l0 + 1, (long long)l0 + 2,
                                                 (long long)l0 + 3); /* the group's states */
        uint64_t *qo = e->q2 + e->nq2;
        const uint64_t *e1 = ATOMS ? p->e41 : p->e4; /* round 1's tables */
        __m256i q0 = _mm256_add_epi64(_mm256_loadu_si256((const __m256i *)(e1 + c0)),
                                      _mm256_slli_epi64(_mm256_cvtepu32_epi64(_mm256_castsi256_si128(r1)), 8));
        __m256i q1 = _mm256_add_epi64(_mm256_loadu_si256((const __m256i *)(e1 + c0 + 4)),
                                      _mm256_slli_epi64(_mm256_cvtepu32_epi64(_mm256_extracti128_si256(r1, 1)), 8));
        _mm256_storeu_si256((__m256i *)qo, _mm256_add_epi64(q0, lane0));
        _mm256_storeu_si256((__m256i *)(qo + 4), _mm256_add_epi64(q1, _mm256_add_epi64(lane0, _mm256_set1_epi64x(4))));
        qo += 8;
        unsigned zmask = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(zb));
        unsigned nmask = ATOMS ? (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(none)) : 0;
        if (zmask | nmask) {
            uint32_t nbs[8], sys[8];
            _mm256_storeu_si256((__m256i *)nbs, nb);
            _mm256_storeu_si256((__m256i *)sys, sy);
            /* round 2: the class symbols after "none", the levels of the
             * other lanes at zero; round 3: the levels after "none" */
            for (unsigned m = zmask | nmask; m; m &= m - 1) {
                unsigned jj = (unsigned)__builtin_ctz(m);
                *qo++ = (nmask >> jj & 1u ? p->e4[c0 + jj] + ((uint64_t)sys[jj] << 8)
                                          : zenc + ((uint64_t)(nbs[jj] - 8) << 8)) | (l0 + jj);
            }
            for (unsigned m = zmask & nmask; m; m &= m - 1) {
                unsigned jj = (unsigned)__builtin_ctz(m);
                *qo++ = (zenc + ((uint64_t)(nbs[jj] - 8) << 8)) | (l0 + jj);
            }
        }
        e->nq2 = (size_t)(qo - e->q2);
        /* plain bits: lane j's at the sum of lanes 0..j-1's, as one word */
        __m256i ps = _mm256_add_epi32(nbv, _mm256_slli_si256(nbv, 4));
        ps = _mm256_add_epi32(ps, _mm256_slli_si256(ps, 8));
        ps = _mm256_add_epi32(ps, _mm256_blend_epi32(_mm256_setzero_si256(),
                                                     _mm256_permutevar8x32_epi32(ps, _mm256_set1_epi32(3)), 0xf0));
        __m256i atb = _mm256_sub_epi32(ps, nbv);
        __m256i w0 = _mm256_sllv_epi64(_mm256_cvtepu32_epi64(_mm256_castsi256_si128(plain)),
                                       _mm256_cvtepu32_epi64(_mm256_castsi256_si128(atb)));
        __m256i w1 = _mm256_sllv_epi64(_mm256_cvtepu32_epi64(_mm256_extracti128_si256(plain, 1)),
                                       _mm256_cvtepu32_epi64(_mm256_extracti128_si256(atb, 1)));
        __m256i wo = _mm256_or_si256(w0, w1);
        __m128i h = _mm_or_si128(_mm256_castsi256_si128(wo), _mm256_extracti128_si256(wo, 1));
        uint64_t bits = (uint64_t)_mm_cvtsi128_si64(_mm_or_si128(h, _mm_unpackhi_epi64(h, h))), cur;
        uint8_t *rp = e->raw2 + (e->rbits2 >> 3);
        memcpy(&cur, rp, 8);
        cur |= bits << (e->rbits2 & 7);
        memcpy(rp, &cur, 8);
        e->rbits2 += (uint32_t)_mm256_extract_epi32(ps, 7);
        /* the checksum lanes */
        uint32_t *acc = e->acc + l0;
        __m256i A = _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)acc), xv);
        A = _mm256_mullo_epi32(_mm256_xor_si256(A, _mm256_srli_epi32(A, 15)), _mm256_set1_epi32((int)0x9e3779b1));
        _mm256_storeu_si256((__m256i *)acc, A);
    }
    e->n += 8 * (uint32_t)k;
    return k;
}

static __attribute__((target("avx2"))) size_t v2_put_run(skv_encoder *e, const uint32_t *x, size_t i,
                                                        size_t ng)
{
    if (e->pk2.anystp)
        return e->pk2.as ? v2_put_run_t(e, x, i, ng, 1, 1) : v2_put_run_t(e, x, i, ng, 0, 1);
    return e->pk2.as ? v2_put_run_t(e, x, i, ng, 1, 0) : v2_put_run_t(e, x, i, ng, 0, 0);
}
#endif

/* Version 2: whole groups that start on a group and whose row the row
 * cache holds go by v2_put_run (bf16, AVX2, no atoms, streams without
 * their ideal cost); the rest queue version 1's operations (the same
 * paths), a group at a time, sorted by v2_sort_group when the group is
 * whole. The checksum lanes are summed as the scalars come. */
static int put_n_given(skv_encoder *e, const uint32_t *x, const float *mu, const float *s, size_t n,
                       const skv_fcls *given)
{
    if (e->version != 2)
        return put_n_given1(e, x, mu, s, n, given);
    const skv_lat *L = &e->m->lat;
    const uint32_t mask = L->nbits == 32 ? 0xffffffffu : ((1u << L->nbits) - 1u);
    const skv_fcls *row = given;
    int fast = 0;
#ifdef SKV_HAVE_CLS8
    if (L->dt == SKV_DT_BF16 && !e->ideal_now && n >= 8 && cls_simd() >= 2 &&
        (!e->atoms || e->n % e->atoms->nch == 0)) {
        if (!row && rcache_on(&e->rc, n) && !(row = rcache_get(e->m, L, &e->rc, mu, s, n)))
            return skv_error(SKV_ERR_NOMEM, "codec table");
        fast = row ? v2_pack(e->m, &e->rc, &e->pk2, row, n, e->atoms)
                   : v2_pack_rows(e->m, &e->pk2, mu, s, n, e->atoms, 1);
    }
#endif
    size_t i = 0;
    while (i < n) {
#ifdef SKV_HAVE_CLS8
        if (fast && e->n % 8 == 0 && n - i >= 8) {
            size_t done = v2_put_run(e, x + i, i, (n - i) / 8);
            i += 8 * done;
            if (done)
                continue;
        }
#endif
        uint32_t k = 8 - e->n % 8, at = e->n;
        if (k > n - i)
            k = (uint32_t)(n - i);
        int rc = put_n_given1(e, x + i, mu + i, s + i, k, row ? row + i : NULL);
        for (uint32_t j = 0; at + j < e->n; j++)
            e->acc[v2_lane(at + j)] = v2_acc(e->acc[v2_lane(at + j)], x[i + j] & mask);
        if (rc)
            return rc;
        i += k;
        if (e->n % 8 == 0)
            v2_sort_group(e, e->n - 8, 8);
    }
    return SKV_OK;
}

int skv_encoder_put_n(skv_encoder *e, const uint32_t *x, const float *mu, const float *s, size_t n)
{
    int rc = put_room(e, n);
    return rc ? rc : put_n_given(e, x, mu, s, n, NULL);
}

int skv_encoder_put_rows(skv_encoder *e, const uint32_t *x, const float *mu, const float *s,
                         size_t n, size_t rows)
{
    if (n == 0 || rows == 0)
        return SKV_OK;
    if (rows > SKV_STREAM_MAX_SCALARS / n)
        return skv_error(SKV_ERR_TOO_LARGE, "stream holds at most %u scalars", SKV_STREAM_MAX_SCALARS);
    int rc = put_room(e, n * rows);
    if (rc)
        return rc;
    /* the row's classes once (the row cache), then every row with them */
    const skv_fcls *row = NULL;
    if (rcache_on(&e->rc, n)) {
        if (!(row = rcache_get(e->m, &e->m->lat, &e->rc, mu, s, n)))
            return skv_error(SKV_ERR_NOMEM, "codec table"); /* nothing queued */
    }
    for (size_t r = 0; r < rows && !rc; r++)
        rc = put_n_given(e, x + r * n, mu, s, n, row);
    return rc;
}

int skv_encoder_put(skv_encoder *e, uint32_t x, float mu, float s)
{
    return skv_encoder_put_n(e, &x, &mu, &s, 1);
}

double skv_encoder_ideal_bits(const skv_encoder *e)
{
    return e->ideal_now ? e->ideal : NAN;
}

void skv_encoder_set_row_cache(skv_encoder *e, int on)
{
    e->rc_off = !on;
}

void skv_encoder_set_ideal(skv_encoder *e, int on)
{
    e->ideal_on = on != 0;
}

int skv_encoder_set_version(skv_encoder *e, int version)
{
    if (version != 1 && version != 2)
        return skv_error(SKV_ERR_ARG, "stream version %d: 1 or 2", version);
    e->version_on = version;
    return SKV_OK;
}

int skv_encoder_set_states(skv_encoder *e, int states)
{
    if (states != 8 && states != 16)
        return skv_error(SKV_ERR_ARG, "stream version 2 has 8 or 16 states, not %d", states);
    e->states_on = states;
    return SKV_OK;
}

int skv_stream_v2_fast(skv_dtype dt)
{
#ifdef SKV_HAVE_CLS8
    return dt == SKV_DT_BF16 && cls_simd() >= 2;
#else
    (void)dt;
    return 0;
#endif
}

size_t skv_encoder_bound(const skv_encoder *e)
{
    if (e->version == 2) /* the states; a word a table symbol; the raw bits; a waiting group */
        return SKV_STREAM_HEADER + 4 * (size_t)e->states + 2 * e->nq2 + (size_t)(e->rbits2 / 8) + 1 +
               4 * e->nops + 8;
    return SKV_STREAM_HEADER + 16 + 2 * e->nops;
}

static uint64_t final_checksum(uint64_t h, uint32_t n)
{
    h = mix_in(h, n);
    return h ^ (h >> 32);
}

/* one encoding step of state *s (ops are coded last to first; skv_eop):
 * the words go down from top (top[0] the first out, the last in the
 * stream), *nn their count negated */
SKV_ALWAYS_INLINE void enc_eop(uint32_t *s, const skv_eop *e, uint32_t val, uint16_t *top,
                               ptrdiff_t *nn)
{
    uint32_t v = *s, hi = v >> 16;
    uint32_t emit = hi >= e->xm; /* a coin flip: branch-free */
    top[*nn] = (uint16_t)v;
    *nn -= emit;
    v = emit ? hi : v;
    *s = skv__eop_step(e, v) + val;
}

SKV_ALWAYS_INLINE void enc_op(uint32_t *s, uint64_t op, uint16_t *top, ptrdiff_t *nn)
{
    if (__builtin_expect(op & 1u, 0)) /* wide plain bits: f32 only */
        enc_eop(s, &plain_ops[(op >> 1) & 31u], (uint32_t)(op >> 8), top, nn);
    else
        enc_eop(s, (const skv_eop *)(uintptr_t)op, 0, top, nn);
}

/* Version 2 (FORMAT.md): per group of eight scalars, the first operation
 * of each (a table symbol) in lane order, then each scalar's other table
 * symbols, lane after lane, on the scalar's state; the plain bits in a
 * raw bit stream, scalar after scalar, least significant bit first. The
 * table symbols are sorted into that order (an operation is its skv_eop
 * address shifted left by 4, the state in the low bits), then coded last
 * to first. */
static int finish_v2(skv_encoder *e, uint8_t *dst, size_t cap, size_t *len)
{
    if (e->n % 8 && e->nops) /* the last group, not whole (once: finish may be called again) */
        v2_sort_group(e, e->n - e->n % 8, e->n % 8);
    size_t nq = e->nq2, nraw = (size_t)((e->rbits2 + 7) / 8);
    if (e->wcap < nq + 1) {
        uint16_t *w = skv_realloc(e->words, (nq + 1) * sizeof *w);
        if (!w)
            return skv_error(SKV_ERR_NOMEM, "encoder words");
        e->words = w;
        e->wcap = nq + 1;
    }
    const uint64_t *q = e->q2;
    const uint8_t *raw = e->raw2;
    /* lane l of the queue (v2_lane) is state l mod states */
    const int ns = e->states;
    const uint64_t smask = (uint64_t)ns - 1;
    uint32_t x[SKV_V2_STATES];
    for (int l = 0; l < SKV_V2_STATES; l++)
        x[l] = RANS_L;
    uint16_t *top = e->words + nq;
    ptrdiff_t nn = 0;
    for (size_t k = nq; k-- > 0;)
        enc_eop(&x[q[k] & smask], (const skv_eop *)(uintptr_t)(q[k] >> 4), 0, top, &nn);
    size_t nw = (size_t)-nn;
    const uint16_t *words = top + nn + 1;
    size_t payload = 4 * (size_t)ns + 2 * nw + nraw;
    size_t total = SKV_STREAM_HEADER + payload;
    int rc = SKV_OK;
    if (total > cap)
        rc = skv_error(SKV_ERR_TOO_LARGE, "stream needs %zu bytes, buffer has %zu", total, cap);
    else if (payload > 0xffffffffu)
        rc = skv_error(SKV_ERR_TOO_LARGE, "stream payload over 4 GiB");
    if (rc)
        return rc;
    uint64_t h = 0x243f6a8885a308d3ull;
    for (int l = 0; l < SKV_V2_STATES; l++)
        h = mix_in(h, e->acc[l]);
    uint8_t *o = dst;
    memset(o, 0, SKV_STREAM_HEADER);
    skv_store32_le(o, SKV_STREAM_MAGIC);
    skv_store16_le(o + 4, 2);
    o[6] = (uint8_t)e->m->lat.dt;
    o[7] = ns == 8; /* 0: sixteen states, 1: eight */
    skv_store32_le(o + 8, e->n);
    skv_store32_le(o + 12, (uint32_t)payload);
    skv_store32_le(o + 16, skv_stream_model_id(e->m, e->atoms));
    skv_store32_le(o + 20, (uint32_t)nraw);
    skv_store64_le(o + 24, final_checksum(h, e->n));
    memcpy(o + 32, e->calib, 16);
    o += SKV_STREAM_HEADER;
    for (int l = 0; l < ns; l++)
        skv_store32_le(o + 4 * l, x[l]);
    o += 4 * ns;
    for (size_t k = 0; k < nw; k++)
        skv_store16_le(o + 2 * k, words[k]);
    o += 2 * nw;
    if (nraw) /* an empty stream has no raw buffer */
        memcpy(o, raw, nraw);
    *len = total;
    return SKV_OK;
}

int skv_encoder_finish(skv_encoder *e, uint8_t *dst, size_t cap, size_t *len)
{
    *len = 0;
    if (e->version == 2)
        return finish_v2(e, dst, cap, len);
    if (e->wcap < e->nops + 1) {
        uint16_t *w = skv_realloc(e->words, (e->nops + 1) * sizeof *w);
        if (!w)
            return skv_error(SKV_ERR_NOMEM, "encoder words");
        e->words = w;
        e->wcap = e->nops + 1;
    }
    uint32_t x[4] = {RANS_L, RANS_L, RANS_L, RANS_L};
    size_t i = e->nops;
    ptrdiff_t nn = 0;
    /* locals: the word stores cannot then make the compiler reload them */
    const uint64_t *ops = e->ops;
    uint16_t *top = e->words + e->nops; /* at most one word an operation */
    /* op i uses state i mod 4: the ragged end first, then blocks of four */
    while (i & 3) {
        i--;
        enc_op(&x[i & 3], ops[i], top, &nn);
    }
    uint32_t x0 = x[0], x1 = x[1], x2 = x[2], x3 = x[3];
    while (i) {
        i -= 4;
        enc_op(&x3, ops[i + 3], top, &nn);
        enc_op(&x2, ops[i + 2], top, &nn);
        enc_op(&x1, ops[i + 1], top, &nn);
        enc_op(&x0, ops[i], top, &nn);
    }
    x[0] = x0, x[1] = x1, x[2] = x2, x[3] = x3;
    size_t nw = (size_t)-nn;
    const uint16_t *words = top + nn + 1; /* in stream order */
    size_t payload = 16 + 2 * nw;
    size_t total = SKV_STREAM_HEADER + payload;
    if (total > cap)
        return skv_error(SKV_ERR_TOO_LARGE, "stream needs %zu bytes, buffer has %zu", total, cap);
    if (payload > 0xffffffffu)
        return skv_error(SKV_ERR_TOO_LARGE, "stream payload over 4 GiB");
    uint8_t *p = dst;
    memset(p, 0, SKV_STREAM_HEADER);
    skv_store32_le(p, SKV_STREAM_MAGIC);
    skv_store16_le(p + 4, SKV_STREAM_VERSION);
    p[6] = (uint8_t)e->m->lat.dt;
    skv_store32_le(p + 8, e->n);
    skv_store32_le(p + 12, (uint32_t)payload);
    skv_store32_le(p + 16, skv_stream_model_id(e->m, e->atoms));
    skv_store64_le(p + 24, final_checksum(e->h, e->n));
    memcpy(p + 32, e->calib, 16);
    p += SKV_STREAM_HEADER;
    for (int k = 0; k < 4; k++)
        skv_store32_le(p + 4 * k, x[k]);
    p += 16;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(p, words, 2 * nw); /* the words' own bytes are little-endian already */
#else
    for (size_t k = 0; k < nw; k++)
        skv_store16_le(p + 2 * k, words[k]);
#endif
    *len = total;
    return SKV_OK;
}

/* ---- container ------------------------------------------------------------- */

int skv_stream_info_read(const uint8_t *src, size_t len, skv_stream_info *info)
{
    if (len < SKV_STREAM_HEADER)
        return skv_error(SKV_ERR_FORMAT, "stream: %zu bytes, shorter than its %d-byte header", len,
                         SKV_STREAM_HEADER);
    if (skv_load32_le(src) != SKV_STREAM_MAGIC)
        return skv_error(SKV_ERR_FORMAT, "stream: bad magic 0x%08x", skv_load32_le(src));
    unsigned ver = skv_load16_le(src + 4);
    if (ver > 2)
        return skv_error(SKV_ERR_VERSION, "stream: version %u, this build reads up to 2", ver);
    if (ver == 0)
        return skv_error(SKV_ERR_FORMAT, "stream: version 0");
    skv_lat L;
    if (src[6] > SKV_DT_F8E4M3 || skv__lat_init(&L, (skv_dtype)src[6]))
        return skv_error(SKV_ERR_FORMAT, "stream: bad dtype %u", src[6]);
    if ((ver == 1 && src[7] != 0) || (ver == 2 && src[7] > 1) || (ver == 1 && skv_load32_le(src + 20) != 0))
        return skv_error(SKV_ERR_FORMAT, "stream: reserved header fields are not zero");
    info->version = ver;
    info->states = ver == 1 ? 4 : src[7] ? 8 : 16;
    info->raw = ver == 2 ? skv_load32_le(src + 20) : 0;
    info->dtype = (skv_dtype)src[6];
    info->n = skv_load32_le(src + 8);
    info->payload = skv_load32_le(src + 12);
    info->cmodel_id = skv_load32_le(src + 16);
    info->checksum = skv_load64_le(src + 24);
    memcpy(info->calib_id, src + 32, 16);
    if (info->n > SKV_STREAM_MAX_SCALARS)
        return skv_error(SKV_ERR_TOO_LARGE, "stream: %u scalars exceeds the limit", info->n);
    if (ver == 1 && (info->payload < 16 || (info->payload & 1)))
        return skv_error(SKV_ERR_FORMAT, "stream: payload size %u is impossible", info->payload);
    if (ver == 2 && ((uint64_t)info->raw + 4 * info->states > info->payload ||
                     ((info->payload - info->raw) & 1)))
        return skv_error(SKV_ERR_FORMAT, "stream: payload size %u with %u raw bytes is impossible",
                         info->payload, info->raw);
    if ((uint64_t)SKV_STREAM_HEADER + info->payload > len)
        return skv_error(SKV_ERR_RANGE, "stream: truncated: header says %u payload bytes, %zu present",
                         info->payload, len - SKV_STREAM_HEADER);
    return SKV_OK;
}

/* ---- decoder ------------------------------------------------------------------ */

static int v2_fast_ok(const skv_cmodel *m);

struct skv_decoder {
    skv_cmodel *m;
    const uint8_t *w, *wend; /* 16-bit words */
    uint32_t x[4];           /* the states, the next operation's first */
    uint32_t n, got;
    uint64_t h, want;
    int bad;                 /* sticky: a read past the end or an impossible symbol */
    const skv_atoms *atoms;
    skv_fcache fc;
    skv_rcache rc;
    uint32_t version;
    uint32_t x2[SKV_V2_STATES];  /* version 2: the states (eight: x2[0..8) only) */
    uint32_t states;             /* version 2: 16 or 8 */
    int rc_off;                  /* the row cache switched off (skv_decoder_set_row_cache) */
    uint32_t acc[SKV_V2_STATES]; /* version 2: the checksum lanes */
    const uint8_t *rb;           /* version 2: the raw bit stream, rbits long */
    uint64_t rpos, rbits;
    int fast2;                   /* version 2: the AVX2 group path applies (bf16, the zero table
                                  * lanes_zero assumes) */
    uint64_t nfast;              /* version 2: groups the AVX2 path took (tests) */
    int pairok;                  /* skv_decoder_get_n2 may take this stream's rows with another's
                                  * (pair_fast; set by begin) */
    skv_v2pack pk;               /* version 2: the AVX2 path's packed row */
};

int skv_decoder_create(skv_cmodel *m, skv_decoder **out)
{
    *out = NULL;
    skv_decoder *d = skv_calloc(1, sizeof *d);
    if (!d || !rcache_grow(&d->rc, RCACHE_MIN)) {
        skv_free(d);
        return skv_error(SKV_ERR_NOMEM, "decoder");
    }
    d->m = m;
    *out = d;
    return SKV_OK;
}

const skv_rcache *skv__decoder_rcache(const skv_decoder *d)
{
    return &d->rc;
}

uint64_t skv__decoder_fast_groups(const skv_decoder *d)
{
    return d->nfast;
}

uint64_t skv__decoder_phase_groups(const skv_decoder *d)
{
#ifdef SKV_HAVE_CLS8
    return d->pk.nb;
#else
    (void)d;
    return 0;
#endif
}

void skv_decoder_free(skv_decoder *d)
{
    if (d) {
        rcache_free(&d->rc);
        skv_free(d->pk.mem);
    }
    skv_free(d);
}

void skv_decoder_set_row_cache(skv_decoder *d, int on)
{
    d->rc_off = !on;
}

int skv_decoder_begin(skv_decoder *d, const uint8_t *src, size_t len, skv_stream_info *info)
{
    return skv_decoder_begin_atoms(d, src, len, NULL, info);
}

int skv_decoder_begin_atoms(skv_decoder *d, const uint8_t *src, size_t len, const skv_atoms *atoms,
                            skv_stream_info *info)
{
    skv_stream_info tmp;
    if (!info)
        info = &tmp;
    d->pairok = 0;
    int rc = skv_stream_info_read(src, len, info);
    if (rc)
        return rc;
    if (info->dtype != d->m->lat.dt)
        return skv_error(SKV_ERR_SHAPE, "stream holds %s, the model codes %s",
                         skv_dtype_name(info->dtype), skv_dtype_name(d->m->lat.dt));
    if (atoms && atoms->dt != d->m->lat.dt)
        return skv_error(SKV_ERR_ARG, "atoms of %s for a model of %s", skv_dtype_name(atoms->dt),
                         skv_dtype_name(d->m->lat.dt));
    uint32_t want_id = skv_stream_model_id(d->m, atoms);
    if (info->cmodel_id != want_id)
        return skv_error(SKV_ERR_CORRUPT, "stream was coded with tables %08x, these are %08x",
                         info->cmodel_id, want_id);
    d->atoms = atoms;
    const uint8_t *p = src + SKV_STREAM_HEADER;
    d->version = info->version;
    if (info->version == 2) {
        d->states = info->states;
        for (int l = 0; l < SKV_V2_STATES; l++) { /* eight states: the second bank mirrors the first */
            d->x2[l] = skv_load32_le(p + 4 * (l & (int)(d->states - 1)));
            d->acc[l] = V2_ACC0;
            if (d->x2[l] < RANS_L)
                return skv_error(SKV_ERR_CORRUPT, "stream: rANS state %d out of range", l);
        }
        d->w = p + 4 * d->states;
        d->wend = p + info->payload - info->raw;
        d->rb = d->wend;
        d->rpos = 0;
        d->rbits = 8 * (uint64_t)info->raw;
        d->fast2 = v2_fast_ok(d->m);
        d->pk.row = NULL; /* the row cache starts empty */
    } else {
        for (int k = 0; k < 4; k++) {
            d->x[k] = skv_load32_le(p + 4 * k);
            if (d->x[k] < RANS_L)
                return skv_error(SKV_ERR_CORRUPT, "stream: rANS state %d out of range", k);
        }
        d->w = p + 16;
        d->wend = p + info->payload;
    }
    d->n = info->n;
    d->got = 0;
    d->h = 0x243f6a8885a308d3ull;
    d->want = info->checksum;
    d->bad = 0;
    fcache_start(&d->fc, d->m->lat.dt);
    rcache_clear(&d->rc);
    d->rc.off = d->rc_off;
    /* get_pair_v2's streams: version 2 on the AVX2 path, eight states, no
     * atoms, the row cache off (the rows are packed as they come) */
    d->pairok = d->version == 2 && d->fast2 && !d->atoms && d->states == 8 && d->rc_off;
    return SKV_OK;
}

/* The reader of a batch: s0 is the state of the next operation, s1..s3
 * the ones after it (a rotation replaces "op mod 4" indexing, so the
 * states stay in registers; the decoder keeps them in the same order).
 * Checked readers test every word read against the end; the scalars of a
 * batch for which the payload left holds SKV_MAX_OPS words each run
 * unchecked (an operation reads at most one). */
typedef struct {
    uint32_t s0, s1, s2, s3;
    const uint8_t *w, *wend;
    int bad;
} rd_t;

/* The reader's state to and from the decoder (batch boundaries, and the
 * out-of-line paths, which run on the decoder so that the hot loop keeps
 * its state in registers). */
SKV_ALWAYS_INLINE void rd_save(skv_decoder *d, const rd_t *r)
{
    d->x[0] = r->s0;
    d->x[1] = r->s1;
    d->x[2] = r->s2;
    d->x[3] = r->s3;
    d->w = r->w;
    d->bad = r->bad;
}

SKV_ALWAYS_INLINE void rd_load(const skv_decoder *d, rd_t *r)
{
    r->s0 = d->x[0];
    r->s1 = d->x[1];
    r->s2 = d->x[2];
    r->s3 = d->x[3];
    r->w = d->w;
    r->wend = d->wend;
    r->bad = d->bad;
}

/* A state v renormalised from the words at *w, checked against wend
 * (both versions' checked readers) */
SKV_ALWAYS_INLINE uint32_t renorm_checked(uint32_t v, const uint8_t **w, const uint8_t *wend, int *bad)
{
    if (v < RANS_L) {
        if (*w >= wend) {
            *bad = 1;
            v = RANS_L; /* keep going safely; the error is reported */
        } else {
            v = (v << 16) | skv_load16_le(*w);
            *w += 2;
        }
    }
    return v;
}

SKV_ALWAYS_INLINE void rd_next(rd_t *r, uint32_t v, int checked)
{
    if (checked) {
        v = renorm_checked(v, &r->w, r->wend, &r->bad);
    } else { /* branch-free (the test is a coin flip): a word is there to read either way */
        uint32_t nv = (v << 16) | skv_load16_le(r->w);
#if defined(__x86_64__) && defined(__GNUC__)
        /* one compare feeds both moves (GCC makes a 0/1 of it otherwise) */
        const uint8_t *wn = r->w + 2;
        __asm__("cmpl %[lim], %[v]\n\tcmovb %[nv], %[v]\n\tcmovb %[wn], %[w]"
                : [v] "+&r"(v), [w] "+r"(r->w)
                : [nv] "r"(nv), [wn] "r"(wn), [lim] "i"(RANS_L)
                : "cc");
#else
        uint32_t need = v < RANS_L;
        v = fsel(need, nv, v);
        r->w += 2 * need;
#endif
    }
    r->s0 = r->s1;
    r->s1 = r->s2;
    r->s2 = r->s3;
    r->s3 = v;
}

static __attribute__((noinline)) uint32_t find_multi(const skv_ftab *t, uint32_t slot, uint32_t k)
{
    while (t->cum[k + 1] <= slot)
        k++;
    return k;
}

SKV_ALWAYS_INLINE uint32_t rd_sym(rd_t *r, const skv_ftab *t, int checked)
{
    uint32_t x = r->s0, slot = x & 0xffffu;
    const skv_lut *e = &t->lut[slot >> t->lsh];
    uint32_t k = e->k, start, end, bm1 = e->bm1, c2m1 = e->c2m1;
    /* Below cum[k + 2] the symbol is k or k + 1, in any run: always when
     * at most one more symbol starts inside it, and for about half the
     * operations of runs where several do */
    if (__builtin_expect(slot <= c2m1, 1)) {
        /* k or k + 1: a coin flip near the boundary, so conditional moves */
        uint32_t b = bm1 + 1, c2 = c2m1 + 1;
        start = e->start;
        end = b;
#if defined(__x86_64__) && defined(__GNUC__)
        /* slot > bm1 (CF of bm1 - slot): start = b, end = c2, k + 1 */
        __asm__("cmpl %[slot], %[bm1]\n\tcmovb %[b], %[start]\n\tcmovb %[c2], %[end]\n\t"
                "adcl $0, %[k]"
                : [start] "+&r"(start), [end] "+&r"(end), [k] "+&r"(k)
                : [b] "r"(b), [c2] "r"(c2), [bm1] "r"(bm1), [slot] "r"(slot)
                : "cc");
#else
        uint32_t up = slot > bm1;
        start = fsel(up, b, start);
        end = fsel(up, c2, end);
        k += up;
#endif
    } else {
        k = find_multi(t, slot, k + 2);
        start = t->cum[k];
        end = t->cum[k + 1];
    }
    rd_next(r, (end - start) * (x >> 16) + slot - start, checked);
    return k;
}

/* nb plain bits, 1 <= nb <= 16 */
SKV_ALWAYS_INLINE uint32_t rd_bits(rd_t *r, int nb, int checked)
{
    uint32_t x = r->s0;
    rd_next(r, x >> nb, checked);
    return x & ((1u << nb) - 1u);
}

/* nb plain bits, 0 <= nb <= 32, high 16 first */
SKV_ALWAYS_INLINE uint32_t rd_raw(rd_t *r, int nb, int checked)
{
    uint32_t v = 0;
    if (__builtin_expect(nb > 16, 0)) {
        nb -= 16;
        v = rd_bits(r, 16, checked) << nb;
    }
    if (nb > 0)
        v |= rd_bits(r, nb, checked);
    return v;
}

/* The escape: x's high byte under p_emp, the rest as plain bits. */
static __attribute__((noinline)) uint32_t dec_escape(skv_decoder *d)
{
    const skv_lat *L = &d->m->lat;
    rd_t r;
    rd_load(d, &r);
    uint32_t hi = rd_sym(&r, &d->m->pemp, 1);
    uint32_t lo = L->nbits > 8 ? rd_raw(&r, L->nbits - 8, 1) : 0;
    rd_save(d, &r);
    return (hi << (L->nbits - 8)) | lo;
}

/* BUCKET mode off the common case (the zero bucket, buckets below one
 * lattice step or in subnormals, impossible buckets) */
static __attribute__((noinline)) uint32_t dec_bucket_slow(skv_decoder *d, const skv_fcls *c,
                                                          int64_t key, int lvl)
{
    const skv_lat *L = &d->m->lat;
    int64_t neg = key >> 63; /* bucket -1 - j holds -x for x in bucket j */
    uint32_t sign = L->sign & (uint32_t)neg, x = 0;
    uint64_t j = (uint64_t)(key ^ neg);
    uint32_t lo, hi;
    rd_t r;
    rd_load(d, &r);
    if (j > 0) {
        fbucket_range(L, j, c->G, &lo, &hi);
    } else {
        if (lvl < 0) /* not read yet */
            lvl = (int)rd_sym(&r, &d->m->zero, 1);
        fzero_range(L, c->G, lvl, &lo, &hi);
    }
    if (hi <= lo) {
        r.bad = 1;
    } else {
        uint32_t idx = rd_raw(&r, fbits_for((uint64_t)hi - lo), 1);
        if (idx >= hi - lo || lo + idx >= L->inf_mag)
            r.bad = 1;
        else
            x = sign | (lo + idx);
    }
    rd_save(d, &r);
    return x;
}

/* One scalar of class c; the result counts when r->bad stays 0. The
 * common case mirrors enc_one: bucket j >= 1 with 2^nb lattice points
 * inside a normal binade, x = (exponent, j's low bits, nb plain bits). */
SKV_ALWAYS_INLINE uint32_t dec_after(skv_decoder *d, const skv_lat *L, rd_t *r, const skv_fcls *c,
                                     uint32_t sym, int checked)
{
    int64_t key = c->base + (int64_t)sym;
    if (__builtin_expect(sym == c->nesc, 0)) {
        rd_save(d, r);
        uint32_t x = dec_escape(d);
        rd_load(d, r);
        return x;
    }
    if (c->bucket) {
        int64_t neg = key >> 63;
        uint64_t j = (uint64_t)(key ^ neg);
        /* 1 <= j < 2^(mbits + 1) (k <= mbits), exponent k + G normal */
        int k = 63 - __builtin_clzll(j | 1u), e = k + c->G, nb = L->mbits - k;
        uint32_t lo = ((uint32_t)(e + L->bias - 1) << L->mbits) + (uint32_t)(j << (nb & 31));
        if (__builtin_expect(j - 1u < (2ull << L->mbits) - 1u &&
                                 (unsigned)(e - lat_emin(L)) <= (unsigned)(lat_emax(L) - lat_emin(L)) &&
                                 (L->dt != SKV_DT_F8E4M3 || lo + (1u << nb) <= L->inf_mag),
                             1)) {
            uint32_t idx = 0;
            if (L->mbits > 16) /* f32: up to 23 bits, as 16 + the rest */
                idx = rd_raw(r, nb, checked);
            else if (__builtin_expect(nb > 0, 1))
                idx = rd_bits(r, nb, checked);
            return (L->sign & (uint32_t)neg) | (lo + idx);
        }
        int lvl = -1;
        if (j == 0) {
            /* the bucket at zero: level lvl is the binade [2^e, 2^(e+1)),
             * e = G - lvl - 1, of 2^mbits points when it is normal */
            lvl = (int)rd_sym(r, &d->m->zero, checked);
            e = c->G - lvl - 1;
            if (__builtin_expect(lvl < ZLEVELS && e >= lat_emin(L) &&
                                     e <= lat_emax(L) - (L->dt == SKV_DT_F8E4M3),
                                 1)) {
                uint32_t idx = rd_raw(r, L->mbits, checked);
                return (L->sign & (uint32_t)neg) | (((uint32_t)(e + L->bias) << L->mbits) + idx);
            }
        }
        rd_save(d, r);
        uint32_t x = dec_bucket_slow(d, c, key, lvl);
        rd_load(d, r);
        return x;
    }
    int64_t top = (int64_t)L->inf_mag - 1, neg = key >> 63;
    if (key > top || key < -top - 1) {
        r->bad = 1;
        return 0;
    }
    return (uint32_t)(key ^ neg) | (L->sign & (uint32_t)neg); /* the signed ordinal to bits */
}

SKV_ALWAYS_INLINE uint32_t dec_one(skv_decoder *d, const skv_lat *L, rd_t *r, const skv_fcls *c,
                                   int checked)
{
    return dec_after(d, L, r, c, rd_sym(r, c->tab, checked), checked);
}

/* Unchecked decoding of the scalars cb[0..n) into out for the dtypes of
 * at most 16 mantissa bits, the hot loop with its reader in locals: a
 * common BUCKET scalar from the bucket values of its width (one load
 * where dec_after's closed form needs a bit scan and five checks on the
 * way to the plain bits), everything else through dec_after. Same
 * operations, same results as dec_one; returns the scalars done (all of
 * them unless r->bad). */
SKV_ALWAYS_INLINE size_t dec_run(skv_decoder *d, const skv_lat *L, rd_t *r, const skv_fcls *cb,
                                 size_t n, uint32_t *out, uint64_t *hp)
{
    rd_t st = {r->s0, r->s1, r->s2, r->s3, r->w, r->wend, 0};
    uint64_t h = *hp;
    const skv_fcls *c = cb, *cend = cb + n;
    const uint32_t **bvt = d->m->bvt + BVT_G0; /* indexed by G */
    uint32_t *o = out;
    for (; c < cend; c++) {
        uint32_t sym = rd_sym(&st, c->tab, 0), x;
        int64_t key = c->base + (int64_t)sym;
        uint32_t ent = 0;
        const uint32_t *vt = NULL;
        if (c->bucket) {
            /* skv__bvt_none is all 0: its entries take dec_after */
            vt = __atomic_load_n(&bvt[c->G], __ATOMIC_ACQUIRE);
            if (__builtin_expect((uint64_t)(key + BVT_K) < 2 * BVT_K, 1))
                ent = vt[key + BVT_K];
        }
        if (__builtin_expect((ent >> 24) != 0 && sym != 2 * BUCKET_R + 1, 1)) {
            x = (ent & 0xffffffu) + rd_bits(&st, (int)(ent >> 24), 0);
        } else {
            if (__builtin_expect(vt == skv__bvt_none, 0))
                skv__build_bvt(d->m, c->G); /* the next scalar of this width uses them */
            x = dec_after(d, L, &st, c, sym, 0);
            if (__builtin_expect(st.bad, 0)) {
                r->bad = 1;
                break;
            }
        }
        h = mix_in(h, x);
        *o++ = x;
    }
    r->s0 = st.s0, r->s1 = st.s1, r->s2 = st.s2, r->s3 = st.s3, r->w = st.w;
    *hp = h;
    return (size_t)(o - out);
}

SKV_ALWAYS_INLINE int get_n_impl(skv_decoder *d, const skv_lat *L, const float *mu, const float *s,
                                 uint32_t *out, size_t n, int checked, const skv_fcls *given)
{
    skv_cmodel *m = d->m;
    rd_t r;
    rd_load(d, &r); /* d->bad is 0 here */
    uint64_t h = d->h;
    int rc = SKV_OK;
    size_t i = 0;
    skv_fcls cls[SKV_BLOCK];
    const skv_fcls *row = given;
    if (!row && rcache_on(&d->rc, n) && !(row = rcache_get(m, L, &d->rc, mu, s, n)))
        rc = SKV_ERR_NOMEM;
    while (i < n && !rc && !r.bad) {
        size_t nb = n - i < SKV_BLOCK ? n - i : SKV_BLOCK;
        const skv_fcls *cb = cls;
        if (row) { /* repeating rows: the whole row at once */
            cb = row + i;
            nb = n - i;
        } else if (!d->fc.off) { /* repeating (mu, s) */
            uint32_t hits = 0;
            for (size_t k = 0; k < nb; k++) {
                const skv_fcls *c = fcache_get(m, L, &d->fc, mu[i + k], s[i + k], &hits);
                if (__builtin_expect(!c, 0)) {
                    rc = SKV_ERR_NOMEM;
                    nb = k;
                    break;
                }
                cls[k] = *c;
            }
            fcache_count(&d->fc, (uint32_t)nb, hits);
        } else {
            rc = fclassify_block(m, L, mu + i, s + i, nb, cls, &nb);
        }
        if (!checked && L->mbits <= 16) {
            size_t got = dec_run(d, L, &r, cb, nb, out + i, &h);
            i += got;
            continue;
        }
        for (size_t k = 0; k < nb; k++, i++) {
            /* The next scalar's table operation will most likely use s2
             * (BUCKET: two operations now) or s1 (STEP: one), already
             * final: fetch its index entry while this one decodes. */
            if (k + 1 < nb)
                __builtin_prefetch(&cb[k + 1].tab->lut[((cb[k].bucket ? r.s2 : r.s1) & 0xffffu) >>
                                                       cb[k + 1].tab->lsh]);
            uint32_t x = dec_one(d, L, &r, &cb[k], checked);
            if (__builtin_expect(r.bad, 0))
                break;
            h = mix_in(h, x);
            out[i] = x;
        }
    }
    rd_save(d, &r);
    d->h = h;
    d->got += (uint32_t)i;
    if (r.bad)
        return skv_error(SKV_ERR_CORRUPT, "stream: corrupted at scalar %u", d->got);
    if (rc)
        return skv_error(rc, "codec table");
    return SKV_OK;
}

/* With atoms (put_n_atoms_impl): one scalar at a time, the channel's atom
 * symbol first. */
SKV_ALWAYS_INLINE int get_n_atoms_impl(skv_decoder *d, const skv_lat *L, const float *mu,
                                       const float *s, uint32_t *out, size_t n, int checked,
                                       const skv_fcls *given)
{
    skv_cmodel *m = d->m;
    const skv_atoms *as = d->atoms;
    rd_t r;
    rd_load(d, &r);
    uint64_t h = d->h;
    int rc = SKV_OK;
    size_t i = 0;
    uint32_t ch = d->got % as->nch, hits = 0, looks = 0;
    const skv_fcls *row = given;
    if (!row && rcache_on(&d->rc, n) && !(row = rcache_get(m, L, &d->rc, mu, s, n))) {
        rd_save(d, &r);
        return skv_error(SKV_ERR_NOMEM, "codec table"); /* nothing consumed */
    }
    for (; i < n; i++) {
        const skv_atom_ch *a = &as->ch[ch];
        if (++ch == as->nch)
            ch = 0;
        uint32_t x;
        if (a->k) {
            uint32_t j = rd_sym(&r, &a->tab, checked);
            if (j < a->k) {
                if (__builtin_expect(r.bad, 0))
                    break;
                x = a->val[j];
                h = mix_in(h, x);
                out[i] = x;
                continue;
            }
        }
        skv_fcls cl;
        const skv_fcls *c = cls_one(m, L, row, &d->fc, i, mu, s, &cl, &hits, &looks);
        if (__builtin_expect(!c, 0)) {
            rc = SKV_ERR_NOMEM;
            break;
        }
        x = dec_one(d, L, &r, c, checked);
        if (__builtin_expect(r.bad, 0))
            break;
        h = mix_in(h, x);
        out[i] = x;
    }
    if (looks)
        fcache_count(&d->fc, looks, hits);
    rd_save(d, &r);
    d->h = h;
    d->got += (uint32_t)i;
    if (r.bad)
        return skv_error(SKV_ERR_CORRUPT, "stream: corrupted at scalar %u", d->got);
    if (rc) {
        d->bad = 1; /* the atom symbol of scalar i is consumed: no way back */
        return skv_error(rc, "codec table");
    }
    return SKV_OK;
}

/* get_n_split's row cache lookup for a row it splits: SKV_ERR_NOMEM (set)
 * when a table cannot be built */
static __attribute__((noinline)) int split_row(skv_decoder *d, const float *mu, const float *s,
                                               size_t n, const skv_fcls **row)
{
    if (rcache_on(&d->rc, n) && !(*row = rcache_get(d->m, &d->m->lat, &d->rc, mu, s, n)))
        return skv_error(SKV_ERR_NOMEM, "codec table");
    return SKV_OK;
}

/* The scalars that cannot reach the end of the payload (an operation reads
 * at most one word) run unchecked, the rest checked; given: the classes
 * of the row (NULL: found here). A row split in two (near a stream's end)
 * takes its classes from the row cache once, for both parts. */
SKV_ALWAYS_INLINE int get_n_split(skv_decoder *d, const skv_lat *L, const float *mu,
                                  const float *s, uint32_t *x, size_t n, const skv_fcls *given)
{
    size_t safe = (size_t)(d->wend - d->w) / (2 * SKV_MAX_OPS), fast = safe < n ? safe : n;
    if (__builtin_expect(!given && fast - 1 < n - 1, 0) && split_row(d, mu, s, n, &given))
        return SKV_ERR_NOMEM; /* nothing decoded */
    const skv_fcls *rest = given ? given + fast : NULL;
    int rc;
    if (d->atoms) {
        rc = fast ? get_n_atoms_impl(d, L, mu, s, x, fast, 0, given) : SKV_OK;
        if (!rc && fast < n)
            rc = get_n_atoms_impl(d, L, mu + fast, s + fast, x + fast, n - fast, 1, rest);
        return rc;
    }
    rc = fast ? get_n_impl(d, L, mu, s, x, fast, 0, given) : SKV_OK;
    if (!rc && fast < n)
        rc = get_n_impl(d, L, mu + fast, s + fast, x + fast, n - fast, 1, rest);
    return rc;
}

/* ---- version 2: the reference path -------------------------------------
 * A group's scalars are classified, then the first table symbol of each
 * is read in lane order, then each scalar in lane order reads its other
 * table symbols on its state and its plain bits from the raw bit stream.
 * Every read is checked. */
typedef struct {
    uint32_t *x;
    const uint8_t *w, *wend, *rb;
    uint64_t rpos, rbits;
    int bad;
} r2_t;

static uint32_t r2_sym(r2_t *r, int lane, const skv_ftab *t)
{
    uint32_t x = r->x[lane], slot = x & 0xffffu, k = skv__find(t, slot);
    uint32_t v = (t->cum[k + 1] - t->cum[k]) * (x >> 16) + slot - t->cum[k];
    r->x[lane] = renorm_checked(v, &r->w, r->wend, &r->bad);
    return k;
}

/* nb (0..16) plain bits, least significant first */
static uint32_t r2_bits(r2_t *r, int nb)
{
    if (r->rpos + (uint64_t)nb > r->rbits) {
        r->bad = 1;
        return 0;
    }
    uint32_t v = 0;
    for (int b = 0; b < nb; b++, r->rpos++)
        v |= (uint32_t)(r->rb[r->rpos >> 3] >> (r->rpos & 7) & 1u) << b;
    return v;
}

/* nb (0..32) plain bits, as rd_raw: the high 16 first */
static uint32_t r2_raw(r2_t *r, int nb)
{
    uint32_t v = 0;
    if (nb > 16) {
        nb -= 16;
        v = r2_bits(r, 16) << nb;
    }
    return v | r2_bits(r, nb);
}

/* The table that follows a scalar of class c whose class symbol is sym
 * (the p_emp byte after the escape, the level after the bucket at zero),
 * or NULL */
static const skv_ftab *dec2_next(const skv_cmodel *m, const skv_fcls *c, uint32_t sym)
{
    if (sym == c->nesc)
        return &m->pemp;
    if (!c->bucket)
        return NULL;
    int64_t key = c->base + (int64_t)sym;
    return key == 0 || key == -1 ? &m->zero : NULL;
}

/* The scalar of class c whose class symbol is sym, and `next` the symbol
 * of the table dec2_next gave (dec_after's cases: the escape, a bucket
 * with its place, the bucket at zero with its level, a STEP ordinal; the
 * bucket ranges of the general path serve them all); its plain bits come
 * from the raw bit stream */
static uint32_t dec2_after(skv_decoder *d, r2_t *r, const skv_fcls *c, uint32_t sym, uint32_t next)
{
    const skv_cmodel *m = d->m;
    const skv_lat *L = &m->lat;
    if (sym == c->nesc) {
        uint32_t lo = L->nbits > 8 ? r2_raw(r, L->nbits - 8) : 0;
        return (next << (L->nbits - 8)) | lo;
    }
    int64_t key = c->base + (int64_t)sym, neg = key >> 63;
    if (c->bucket) {
        uint64_t j = (uint64_t)(key ^ neg);
        uint32_t lo, hi;
        if (j > 0)
            fbucket_range(L, j, c->G, &lo, &hi);
        else
            fzero_range(L, c->G, (int)next, &lo, &hi);
        if (hi <= lo) {
            r->bad = 1;
            return 0;
        }
        uint32_t idx = r2_raw(r, fbits_for((uint64_t)hi - lo));
        if (idx >= hi - lo || lo + idx >= L->inf_mag) {
            r->bad = 1;
            return 0;
        }
        return (L->sign & (uint32_t)neg) | (lo + idx);
    }
    int64_t top = (int64_t)L->inf_mag - 1;
    if (key > top || key < -top - 1) {
        r->bad = 1;
        return 0;
    }
    return (uint32_t)(key ^ neg) | (L->sign & (uint32_t)neg);
}

/* The k (<= 8) scalars of the group at scalar `at`, of classes c, by the
 * reference path into x: the table symbols in rounds (each scalar's
 * first, then the second of those that have one, then the third), then
 * each scalar's value and plain bits, scalar after scalar */
static void v2_group_ref(skv_decoder *d, r2_t *r, const skv_fcls *c, uint32_t at, uint32_t k,
                         uint32_t *x)
{
    const skv_atoms *as = d->atoms;
    const skv_atom_ch *a[8];
    const skv_ftab *t[8]; /* each scalar's next table, NULL once it has none */
    uint32_t sym[8], next[8] = {0};
    int val[8]; /* an atom's value is known */
    for (uint32_t j = 0; j < k; j++) {
        a[j] = as && as->ch[(at + j) % as->nch].k ? &as->ch[(at + j) % as->nch] : NULL;
        t[j] = a[j] ? &a[j]->tab : c[j].tab;
    }
    /* round 1: the atom symbol or the class symbol */
    for (uint32_t j = 0; j < k; j++) {
        uint32_t s1 = r2_sym(r, v2_lane(at + j) & (int)(d->states - 1), t[j]);
        val[j] = a[j] && s1 < a[j]->k;
        if (val[j]) {
            x[j] = a[j]->val[s1];
            t[j] = NULL;
        } else if (a[j]) {
            t[j] = c[j].tab; /* "none": the class symbol follows */
        } else {
            sym[j] = s1;
            t[j] = dec2_next(d->m, &c[j], s1);
        }
    }
    /* rounds 2 and 3: the class symbol after "none"; a level or p_emp byte */
    for (int round = 2; round <= 3; round++)
        for (uint32_t j = 0; j < k; j++) {
            if (!t[j])
                continue;
            uint32_t s = r2_sym(r, v2_lane(at + j) & (int)(d->states - 1), t[j]);
            if (a[j] && round == 2) { /* after "none": the class symbol */
                sym[j] = s;
                t[j] = dec2_next(d->m, &c[j], s);
            } else {
                next[j] = s;
                t[j] = NULL;
            }
        }
    for (uint32_t j = 0; j < k; j++) {
        int lane = v2_lane(at + j);
        if (!val[j])
            x[j] = dec2_after(d, r, &c[j], sym[j], next[j]);
        d->acc[lane] = v2_acc(d->acc[lane], x[j]);
    }
}

#ifdef SKV_HAVE_CLS8
static pthread_once_t lanes_once = PTHREAD_ONCE_INIT;

/* Whether m's zero table is the one lanes_zero decodes in closed form */
static int v2_fast_ok(const skv_cmodel *m)
{
    if (m->lat.dt != SKV_DT_BF16 || cls_simd() < 2)
        return 0;
    for (uint32_t t = 0; t <= ZLEVELS; t++)
        if (m->zero.cum[t] != (t == 0 ? 0 : t <= 16 ? 65528u - (1u << (16 - t)) : 65511u + t))
            return 0;
    pthread_once(&lanes_once, lanes_init);
    return 1;
}

/* lanes_search on the lanes of mb, each table found from its index's
 * offset (lutv: from p->abase on the lanes of ma, else p->lbase) */
static inline __attribute__((target("avx2"), always_inline)) void v2_search(const skv_v2pack *p, __m256i lutv, int ma,
                                                              __m256i slot, __m256i *st, __m256i *en,
                                                              __m256i *k, int mb)
{
    int32_t off[8];
    const uint32_t *cm[8] = {NULL};
    _mm256_storeu_si256((__m256i *)off, lutv);
    for (int m = mb; m; m &= m - 1) {
        int j = __builtin_ctz((unsigned)m);
        const uint8_t *b = (ma >> j & 1) ? p->abase : p->lbase;
        cm[j] = ((const skv_ftab *)(const void *)(b + off[j] - offsetof(skv_ftab, lut)))->cum;
    }
    lanes_search(slot, st, en, k, mb, cm);
}

/* The table symbol k of every lane from the tables whose indexes lie at
 * byte offsets lutv from p->lbase, or from p->abase on the lanes of ma
 * (a movemask; A the same lanes as a mask), and the states after it,
 * before their renormalisation (*nx); the lanes of act are searched when
 * their slot lies in a run where several symbols start */
static inline __attribute__((target("avx2,popcnt"), always_inline)) __m256i
v2_sym(const skv_v2pack *p, __m256i lutv, __m256i sh, __m256i X, int act, int ma, __m256i A, __m256i *nx)
{
    const __m256i m16 = _mm256_set1_epi32(0xffff), one = _mm256_set1_epi32(1);
    __m256i slot = _mm256_and_si256(X, m16);
    /* the run's entry (runs of 1 << sh slots: the table's lsh): skv_lut's
     * start | bm1 << 16 at +0, c2m1 | k << 16 at +4 */
    __m256i ix = _mm256_add_epi32(lutv, _mm256_slli_epi32(_mm256_srlv_epi32(slot, sh), 3));
    __m256i e0, e1;
    if (ma == 0 || ma == 0xff) {
        const uint8_t *tb = ma ? p->abase : p->lbase;
        e0 = _mm256_i32gather_epi32((const int *)(const void *)tb, ix, 1);
        e1 = _mm256_i32gather_epi32((const int *)(const void *)(tb + 4), ix, 1);
    } else { /* some lanes from each */
        const __m256i z = _mm256_setzero_si256(), L = _mm256_xor_si256(A, _mm256_set1_epi32(-1));
        e0 = _mm256_mask_i32gather_epi32(z, (const int *)(const void *)p->lbase, ix, L, 1);
        e1 = _mm256_mask_i32gather_epi32(z, (const int *)(const void *)(p->lbase + 4), ix, L, 1);
        e0 = _mm256_mask_i32gather_epi32(e0, (const int *)(const void *)p->abase, ix, A, 1);
        e1 = _mm256_mask_i32gather_epi32(e1, (const int *)(const void *)(p->abase + 4), ix, A, 1);
    }
    __m256i start = _mm256_and_si256(e0, m16), bm1 = _mm256_srli_epi32(e0, 16);
    __m256i c2m1 = _mm256_and_si256(e1, m16), k = _mm256_srli_epi32(e1, 16);
    __m256i up = _mm256_cmpgt_epi32(slot, bm1);
    __m256i b = _mm256_add_epi32(bm1, one);
    __m256i st = _mm256_blendv_epi8(start, b, up);
    __m256i en = _mm256_blendv_epi8(b, _mm256_add_epi32(c2m1, one), up);
    k = _mm256_sub_epi32(k, up);
    int mb = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(slot, c2m1))) & act;
    if (__builtin_expect(mb != 0, 0)) /* runs where several symbols start */
        v2_search(p, lutv, ma, slot, &st, &en, &k, mb);
    *nx = _mm256_add_epi32(_mm256_mullo_epi32(_mm256_sub_epi32(en, st), _mm256_srli_epi32(X, 16)),
                           _mm256_sub_epi32(slot, st));
    return k;
}

/* A STEP lane's value from its signed ordinal key (bf16 bits: sign and
 * magnitude) into *v; the lanes whose key is not finite ([-0x7f80,
 * 0x7f7f]) as the mask returned */
static inline __attribute__((target("avx2"), always_inline)) __m256i v2_step_value(__m256i key, __m256i *v)
{
    __m256i sn = _mm256_srai_epi32(key, 31);
    *v = _mm256_or_si256(_mm256_xor_si256(key, sn), _mm256_and_si256(sn, _mm256_set1_epi32(0x8000)));
    __m256i ko = _mm256_add_epi32(key, _mm256_set1_epi32(0x7f80));
    return _mm256_cmpeq_epi32(_mm256_min_epu32(ko, _mm256_set1_epi32(0xff00)), _mm256_set1_epi32(0xff00));
}

/* The lanes whose class symbol k is the bucket at zero (key 0 or -1) */
static inline __attribute__((target("avx2"), always_inline)) __m256i v2_atzero(const int32_t *base, __m256i k)
{
    __m256i key = _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)base), k);
    __m256i k1 = _mm256_add_epi32(key, _mm256_set1_epi32(1)); /* 0 or 1 */
    return _mm256_cmpeq_epi32(_mm256_min_epu32(k1, _mm256_set1_epi32(1)), k1);
}

/* One group of bf16 scalars in the common case on AVX2, classes from p at
 * scalar i of the row (bench_lanes's group on the codec's tables), in
 * version 2's rounds: every lane's first table symbol from its table's
 * index (32-bit gathers from one base): with ATOMS, a lane on a channel
 * with atoms reads the atom symbol first, an atom's value by a gather,
 * and for "none" its class symbol in round 2; a bucket's value from the
 * bucket values of its width; the levels of the lanes at zero in closed
 * form, in the round after their class symbol; the plain bits from one
 * 64-bit load, folded into the checksum lanes *A. Returns nonzero, with
 * nothing stored to x or *A (but *X and *w moved), when a lane leaves
 * that case (an escape, a bucket the values send to the general path, a
 * level off the normal binades). */
static inline __attribute__((target("avx2,popcnt"), always_inline)) int
v2_group(const skv_v2pack *p, size_t i, __m256i *X, __m256i *A, const uint16_t **w, uint64_t *pos,
         const uint8_t *rb, uint32_t *x, const int ATOMS, const int STEPS)
{
    const __m256i ones = _mm256_set1_epi32(-1);
    const int32_t *base = p->base + i;
    __m256i nx, k, hit = _mm256_setzero_si256(), none = hit, av = hit, zA = hit, t = hit;
    int mn = 0;
    /* the class tables' index shifts: STEP's LUT_SHIFT_STEP, else LUT_SHIFT */
    const __m256i stp = STEPS ? _mm256_loadu_si256((const __m256i *)(p->stp + i)) : _mm256_setzero_si256();
    const __m256i shc = STEPS ? _mm256_add_epi32(_mm256_set1_epi32(LUT_SHIFT),
                                                 _mm256_and_si256(stp, _mm256_set1_epi32(LUT_SHIFT_STEP - LUT_SHIFT)))
                              : _mm256_set1_epi32(LUT_SHIFT);
    _Static_assert(((LUT_SHIFT_STEP - LUT_SHIFT) & (LUT_SHIFT_STEP - LUT_SHIFT - 1)) == 0, "a one-bit mask of stp");
    /* round 1 */
    if (ATOMS) {
        __m256i akv = _mm256_loadu_si256((const __m256i *)(p->ak + i));
        __m256i am = _mm256_cmpgt_epi32(akv, _mm256_setzero_si256());
        /* (an atom table's shift is LUT_SHIFT) */
        __m256i sh1 = STEPS ? _mm256_blendv_epi8(shc, _mm256_set1_epi32(LUT_SHIFT), am) : shc;
        k = v2_sym(p, _mm256_loadu_si256((const __m256i *)(p->lut1 + i)), sh1, *X, 0xff,
                   _mm256_movemask_ps(_mm256_castsi256_ps(am)), am, &nx);
        lanes_renorm(X, nx, ones, w);
        hit = _mm256_cmpgt_epi32(akv, k);
        none = _mm256_andnot_si256(hit, am);
        if (_mm256_movemask_ps(_mm256_castsi256_ps(hit)))
            av = _mm256_mask_i32gather_epi32(
                av, (const int *)(const void *)p->vals,
                _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(p->aoff + i)), k), hit, 4);
        mn = _mm256_movemask_ps(_mm256_castsi256_ps(none));
        if (_mm256_movemask_ps(_mm256_castsi256_ps(hit)) == 0xff) { /* every lane an atom */
            _mm256_storeu_si256((__m256i *)x, av);
            lanes_acc(A, av);
            return 0;
        }
        if (mn) { /* round 2: the class symbols after "none", the levels of lanes at zero */
            zA = _mm256_andnot_si256(_mm256_or_si256(hit, none), v2_atzero(base, k));
            if (STEPS)
                zA = _mm256_andnot_si256(stp, zA);
            __m256i k2 = v2_sym(p, _mm256_loadu_si256((const __m256i *)(p->lut + i)), shc, *X, mn, 0,
                                hit, &nx);
            if (_mm256_movemask_ps(_mm256_castsi256_ps(zA))) {
                __m256i nz;
                t = lanes_zero_step(*X, &nz);
                nx = _mm256_blendv_epi8(nx, nz, zA);
            }
            lanes_renorm(X, nx, _mm256_or_si256(none, zA), w);
            k = _mm256_blendv_epi8(k, k2, none);
        }
    } else {
        k = v2_sym(p, _mm256_loadu_si256((const __m256i *)(p->lut + i)), shc, *X, 0xff, 0, hit, &nx);
        lanes_renorm(X, nx, ones, w);
    }
    __m256i key = _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)base), k);
    if (STEPS && !ATOMS && _mm256_movemask_ps(_mm256_castsi256_ps(stp)) == 0xff) {
        /* every lane STEP (a fifth of ctx's groups): the signed ordinal
         * keys, finite ([-0x7f80, 0x7f7f]), no plain bits */
        __m256i sv, bad = _mm256_or_si256(_mm256_cmpeq_epi32(k, _mm256_loadu_si256((const __m256i *)(p->nesc + i))),
                                          v2_step_value(key, &sv));
        if (_mm256_movemask_ps(_mm256_castsi256_ps(bad)))
            return 1;
        _mm256_storeu_si256((__m256i *)x, sv);
        lanes_acc(A, sv);
        return 0;
    }
    /* the bucket's value: entry key + BVT_K of the width's values */
    const __m256i stpv = ATOMS && STEPS ? _mm256_andnot_si256(hit, stp) : stp;
    __m256i kp = _mm256_add_epi32(key, _mm256_set1_epi32(BVT_K));
    __m256i bad = _mm256_or_si256(_mm256_cmpeq_epi32(k, _mm256_loadu_si256((const __m256i *)(p->nesc + i))),
                                  _mm256_andnot_si256(stpv, _mm256_cmpgt_epi32(_mm256_min_epu32(kp, _mm256_set1_epi32(2 * BVT_K)),
                                                                              _mm256_set1_epi32(2 * BVT_K - 1))));
    kp = _mm256_and_si256(kp, _mm256_set1_epi32(2 * BVT_K - 1));
    __m256i ent = _mm256_i32gather_epi32(
        (const int *)(const void *)p->bbase,
        _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(p->bvt + i)), _mm256_slli_epi32(kp, 2)), 1);
    __m256i nb = _mm256_srli_epi32(ent, 24), first = _mm256_and_si256(ent, _mm256_set1_epi32(0xffffff));
    __m256i neg = _mm256_cmpeq_epi32(kp, _mm256_set1_epi32(BVT_K - 1));
    __m256i zm = _mm256_andnot_si256(stpv, _mm256_or_si256(_mm256_cmpeq_epi32(kp, _mm256_set1_epi32(BVT_K)), neg));
    bad = _mm256_or_si256(bad, _mm256_andnot_si256(_mm256_or_si256(zm, stpv),
                                                   _mm256_cmpeq_epi32(nb, _mm256_setzero_si256())));
    if (STEPS && _mm256_movemask_ps(_mm256_castsi256_ps(stpv))) {
        __m256i sv;
        bad = _mm256_or_si256(bad, _mm256_and_si256(stpv, v2_step_value(key, &sv)));
        first = _mm256_blendv_epi8(first, sv, stpv);
        nb = _mm256_andnot_si256(stpv, nb);
    }
    if (ATOMS) {
        bad = _mm256_andnot_si256(hit, bad);
        zm = _mm256_andnot_si256(hit, zm);
    }
    if (_mm256_movemask_ps(_mm256_castsi256_ps(zm))) {
        /* the levels not read in round 2: a third round, or the second */
        __m256i zB = ATOMS && mn ? _mm256_and_si256(zm, none) : zm;
        if (!ATOMS || !mn || _mm256_movemask_ps(_mm256_castsi256_ps(zB)))
            t = ATOMS ? _mm256_blendv_epi8(t, lanes_zero(X, w, zB), zB) : lanes_zero(X, w, zB);
        /* the binade 2^(G - t - 1): exponent field 126 + G - t, normal */
        __m256i E = _mm256_sub_epi32(_mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(p->g + i)),
                                                      _mm256_set1_epi32(126)), t);
        __m256i off = _mm256_or_si256(_mm256_cmpgt_epi32(t, _mm256_set1_epi32(ZLEVELS - 1)),
                                      _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(1), E),
                                                      _mm256_cmpgt_epi32(E, _mm256_set1_epi32(254))));
        bad = _mm256_or_si256(bad, _mm256_and_si256(zm, off));
        __m256i zf = _mm256_or_si256(_mm256_and_si256(neg, _mm256_set1_epi32(0x8000)), _mm256_slli_epi32(E, 7));
        first = _mm256_blendv_epi8(first, zf, zm);
        nb = _mm256_blendv_epi8(nb, _mm256_set1_epi32(7), zm);
    }
    if (_mm256_movemask_ps(_mm256_castsi256_ps(bad)))
        return 1;
    if (ATOMS) {
        first = _mm256_blendv_epi8(first, av, hit);
        nb = _mm256_andnot_si256(hit, nb);
    }
    lanes_bits(first, nb, rb, pos, x, A);
    return 0;
}

/* A stream's words and raw bits as a run reads them (suffix S: v2_run_t
 * has one stream, v2_run2_t two; R its r2_t). A group reads at most 24
 * words (8 a round, ATOMS: 3 rounds), each round's load 8 words ahead,
 * and at most 63 raw bits by one 8-byte load. Near either stream's end
 * the groups read from a zero-padded copy of its last words or bytes (tw,
 * trb) instead (wreal: in the copy, the real word of tw[0]; pos from rgo
 * on reads the copy, where bit0 is the real pos of trb[0]), and a group
 * that consumes past the real end marks the stream corrupt. */
#define SIDE(S, R)                                                                                    \
    const uint16_t *w##S = (const uint16_t *)(const void *)(R)->w,                                    \
                   *wend##S = (const uint16_t *)(const void *)(R)->wend, *wreal##S = NULL;            \
    const uint8_t *rb##S = (R)->rb;                                                                   \
    uint64_t pos##S = (R)->rpos, rbytes##S = (R)->rbits >> 3;                                         \
    uint64_t rgo##S = rbytes##S >= 8 ? 8 * (rbytes##S - 8) + 1 : 0, bit0##S = 0, rend##S = 0;         \
    int tail_w##S = 0, tail_r##S = 0, bad##S = 0;                                                     \
    uint16_t tw##S[64];                                                                               \
    uint8_t trb##S[32]
/* the checks before a group that reads at most MARGIN words */
#define SIDE_ROOM(S, MARGIN)                                                                          \
    do {                                                                                              \
        if (__builtin_expect(wend##S - w##S < (MARGIN), 0)) {                                         \
            if (w##S > wend##S) {                                                                     \
                bad##S = 1;                                                                           \
                goto out;                                                                             \
            }                                                                                         \
            if (!tail_w##S) {                                                                         \
                size_t nw = (size_t)(wend##S - w##S);                                                 \
                memset(tw##S, 0, sizeof tw##S);                                                       \
                memcpy(tw##S, w##S, nw * 2);                                                          \
                wreal##S = w##S, w##S = tw##S, wend##S = tw##S + nw, tail_w##S = 1;                   \
            }                                                                                         \
        }                                                                                             \
        if (__builtin_expect(pos##S >= rgo##S, 0)) {                                                  \
            if (!tail_r##S) {                                                                         \
                size_t nb = rbytes##S < 16 ? (size_t)rbytes##S : 16;                                  \
                memset(trb##S, 0, sizeof trb##S);                                                     \
                memcpy(trb##S, rb##S + (rbytes##S - nb), nb);                                         \
                bit0##S = 8 * (rbytes##S - nb), pos##S -= bit0##S, rb##S = trb##S, rend##S = 8 * nb;  \
                rgo##S = 0, tail_r##S = 1;                                                            \
            }                                                                                         \
            if (pos##S > rend##S) {                                                                   \
                bad##S = 1;                                                                           \
                goto out;                                                                             \
            }                                                                                         \
        }                                                                                             \
    } while (0)
/* The groups from here (a stream's w, wend, pos and rgo: SIDE's) that
 * SIDE_ROOM(S, 24) would pass without a look: a group of no atoms reads
 * at most 16 words (two rounds) and 56 raw bits (bf16's plain bits are at
 * most 7 a lane) */
static inline size_t side_safe(const uint16_t *w, const uint16_t *wend, uint64_t pos, uint64_t rgo)
{
    size_t gw = wend - w < 24 ? 0 : (size_t)(wend - w - 24) / 16 + 1;
    size_t gr = pos >= rgo ? 0 : (size_t)((rgo - pos + 55) / 56);
    return gw < gr ? gw : gr;
}
#define SIDE_CLOSE(S, R)                                                                              \
    do {                                                                                              \
        if (tail_w##S) {                                                                              \
            bad##S |= w##S > wend##S;                                                                 \
            w##S = wreal##S + (w##S - tw##S);                                                         \
        }                                                                                             \
        if (tail_r##S) {                                                                              \
            bad##S |= pos##S > rend##S;                                                               \
            pos##S += bit0##S;                                                                        \
        }                                                                                             \
        (R)->w = (const uint8_t *)(const void *)w##S;                                                 \
        (R)->rpos = pos##S;                                                                           \
        (R)->bad |= bad##S;                                                                           \
    } while (0)

/* Whole groups from scalar i of d->pk's row on (at: its index in the
 * stream), up to ng of them, rows after rows of the same classes, by
 * v2_group with the states and checksum lanes in registers; stops before
 * a group that leaves the common case or that d->pk does not pass, and
 * (setting *stop) after a row with a magnitude (bits under mag) above big.
 * Returns the groups done (their state kept in d and r); a group that
 * reads past the end of the words or raw bits sets r->bad. */
static inline __attribute__((target("avx2,popcnt"), always_inline)) size_t
v2_run_t(skv_decoder *d, r2_t *r, size_t i, uint32_t at, size_t ng, uint32_t *x, uint32_t mag, uint32_t big,
         int *stop, const int ATOMS, const int STEPS, const int ONE)
{
    const skv_v2pack *p = &d->pk;
    const size_t n = p->n;
    const int okall = p->okall;
    const uint32_t *x0 = x - i; /* the row's first scalar */
    /* the two banks of states in registers: groups two at a time */
    __m256i X0 = _mm256_loadu_si256((const __m256i *)r->x), X1 = _mm256_loadu_si256((const __m256i *)(r->x + 8));
    __m256i A0 = _mm256_loadu_si256((const __m256i *)d->acc), A1 = _mm256_loadu_si256((const __m256i *)(d->acc + 8));
    SIDE(, r);
    size_t k = 0;
#define V2_STEP(XX, AA)                                                                                   \
    do {                                                                                                  \
        if (k == ng || (!okall && _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)(p->ok + i)))) != 0xff)) \
            goto out;                                                                                     \
        SIDE_ROOM(, ATOMS ? 32 : 24);                                                                     \
        __m256i Xs = XX;                                                                                  \
        const uint16_t *ws = w;                                                                           \
        if (v2_group(p, i, &XX, &AA, &w, &pos, rb, x + 8 * k, ATOMS, STEPS)) {                                   \
            XX = Xs, w = ws;                                                                              \
            goto out;                                                                                     \
        }                                                                                                 \
        k++;                                                                                              \
        if ((i += 8) == n) { /* a row done: the next from the pack's start */                             \
            i = 0;                                                                                        \
            if (big < mag && lanes_any_above(x0, n, mag, big)) {                                          \
                *stop = 1;                                                                                \
                goto out;                                                                                 \
            }                                                                                             \
            x0 += n;                                                                                      \
        }                                                                                                 \
    } while (0)
    if (ONE) { /* eight states: every group on X0, the checksum lanes still alternate */
        if (at >> 3 & 1u)
            V2_STEP(X0, A1);
        for (;;) {
            V2_STEP(X0, A0);
            V2_STEP(X0, A1);
        }
    }
    if (at >> 3 & 1u)
        V2_STEP(X1, A1);
    for (;;) {
        V2_STEP(X0, A0);
        V2_STEP(X1, A1);
    }
#undef V2_STEP
out:
    SIDE_CLOSE(, r);
    _mm256_storeu_si256((__m256i *)r->x, X0), _mm256_storeu_si256((__m256i *)(r->x + 8), X1);
    _mm256_storeu_si256((__m256i *)d->acc, A0), _mm256_storeu_si256((__m256i *)(d->acc + 8), A1);
    d->nfast += k;
    return k;
}

static __attribute__((target("avx2,popcnt"))) size_t v2_run(skv_decoder *d, r2_t *r, size_t i, uint32_t at,
                                                           size_t ng, uint32_t *x, uint32_t mag, uint32_t big,
                                                           int *stop)
{
    if (d->states == 8) /* (the STEP variant takes packs without STEP lanes too) */
        return d->pk.as ? v2_run_t(d, r, i, at, ng, x, mag, big, stop, 1, 1, 1)
                        : v2_run_t(d, r, i, at, ng, x, mag, big, stop, 0, 1, 1);
    if (d->pk.anystp)
        return d->pk.as ? v2_run_t(d, r, i, at, ng, x, mag, big, stop, 1, 1, 0)
                        : v2_run_t(d, r, i, at, ng, x, mag, big, stop, 0, 1, 0);
    return d->pk.as ? v2_run_t(d, r, i, at, ng, x, mag, big, stop, 1, 0, 0)
                    : v2_run_t(d, r, i, at, ng, x, mag, big, stop, 0, 0, 0);
}

/* Two streams of eight states (K and V of a layer), their groups taken in
 * turn: group k of d[0], then group k of d[1], from scalar i of their
 * packs' rows (the same n; at: both streams' index of scalar i), up to ng
 * groups each, into x[0] and x[1]. Each group is v2_run_t's (no atoms);
 * the two state chains do not wait on each other, so one stream's group
 * runs while the other's waits on its loads. Stops before a group that
 * leaves the common case or a pack does not pass; done[s]: stream s's
 * groups (done[1] is done[0] or done[0] - 1). */
static inline __attribute__((target("avx2,popcnt"), always_inline)) void
v2_run2_t(skv_decoder *const d[2], r2_t *const r[2], size_t i, uint32_t at, size_t ng, uint32_t *const x[2],
          size_t done[2])
{
    const skv_v2pack *p0 = &d[0]->pk, *p1 = &d[1]->pk;
    const size_t n = p0->n;
    const int okall = p0->okall && p1->okall;
    __m256i X0 = _mm256_loadu_si256((const __m256i *)r[0]->x), X1 = _mm256_loadu_si256((const __m256i *)r[1]->x);
    /* each stream's checksum lanes of even and odd groups: A*0 holds the next group's */
    __m256i A00 = _mm256_loadu_si256((const __m256i *)d[0]->acc), A01 = _mm256_loadu_si256((const __m256i *)(d[0]->acc + 8));
    __m256i A10 = _mm256_loadu_si256((const __m256i *)d[1]->acc), A11 = _mm256_loadu_si256((const __m256i *)(d[1]->acc + 8));
    const int odd = at >> 3 & 1u;
    if (odd) {
        __m256i t = A00;
        A00 = A01, A01 = t, t = A10, A10 = A11, A11 = t;
    }
    SIDE(0, r[0]);
    SIDE(1, r[1]);
    size_t k0 = 0, k1 = 0;
    const size_t safe0 = side_safe(w0, wend0, pos0, rgo0), safe1 = side_safe(w1, wend1, pos1, rgo1),
                 safe = safe0 < safe1 ? safe0 : safe1;
    while (k0 < ng) {
        if (!okall && (_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)(p0->ok + i)))) != 0xff ||
                       _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)(p1->ok + i)))) != 0xff))
            break;
        if (k0 >= safe) { /* near an end: the checks */
            SIDE_ROOM(0, 24);
            SIDE_ROOM(1, 24);
        }
        __m256i Xs = X0;
        const uint16_t *ws = w0;
        if (v2_group(p0, i, &X0, &A00, &w0, &pos0, rb0, x[0] + 8 * k0, 0, 1)) {
            X0 = Xs, w0 = ws;
            break;
        }
        k0++;
        Xs = X1, ws = w1;
        if (v2_group(p1, i, &X1, &A10, &w1, &pos1, rb1, x[1] + 8 * k1, 0, 1)) {
            X1 = Xs, w1 = ws;
            break;
        }
        k1++;
        __m256i t = A00;
        A00 = A01, A01 = t, t = A10, A10 = A11, A11 = t;
        if ((i += 8) == n)
            i = 0;
    }
out:
    if ((odd + k1) & 1u) { /* back in place: [0, 8) the even groups' (stream 0's A00 holds group
                            * k1's lanes whether or not it decoded that group) */
        __m256i t = A00;
        A00 = A01, A01 = t, t = A10, A10 = A11, A11 = t;
    }
    SIDE_CLOSE(0, r[0]);
    SIDE_CLOSE(1, r[1]);
    _mm256_storeu_si256((__m256i *)r[0]->x, X0), _mm256_storeu_si256((__m256i *)r[1]->x, X1);
    _mm256_storeu_si256((__m256i *)d[0]->acc, A00), _mm256_storeu_si256((__m256i *)(d[0]->acc + 8), A01);
    _mm256_storeu_si256((__m256i *)d[1]->acc, A10), _mm256_storeu_si256((__m256i *)(d[1]->acc + 8), A11);
    d[0]->nfast += k0;
    d[1]->nfast += k1;
    done[0] = k0, done[1] = k1;
}
#undef SIDE
#undef SIDE_ROOM
#undef SIDE_CLOSE

#else
static int v2_fast_ok(const skv_cmodel *m)
{
    (void)m;
    return 0;
}
#endif

/* rows rows of n scalars of version 2, each with the classes of mu, s (or
 * given), into x; after a row with a magnitude (bits under mag) above big
 * it stops. *done: the rows decoded. Set up once for all the rows (stat's
 * runs of rows with one prediction). */
static int get_rows_v2(skv_decoder *d, const float *mu, const float *s, uint32_t *x, size_t n,
                       const skv_fcls *given, size_t rows, uint32_t mag, uint32_t big, size_t *done)
{
    *done = 0;
    if (n == 0 || rows == 0)
        return SKV_OK;
    if ((d->got & 7u) || ((n & 7u) && (rows > 1 || d->got + n != d->n)))
        return skv_error(SKV_ERR_ARG, "stream version 2: scalars %u..%zu do not make whole groups of 8",
                         d->got, d->got + n * rows);
    skv_cmodel *m = d->m;
    const skv_lat *L = &m->lat;
    r2_t r = {d->x2, d->w, d->wend, d->rb, d->rpos, d->rbits, 0};
    /* the call's classes: the row cache (stat's rows repeat), else one by one */
    const skv_fcls *row = given;
    if (!row && rcache_on(&d->rc, n) && !(row = rcache_get(m, L, &d->rc, mu, s, n)))
        return skv_error(SKV_ERR_NOMEM, "codec table"); /* nothing decoded */
    int fast = 0;
#ifdef SKV_HAVE_CLS8
    /* the AVX2 path takes rows from the row cache, their classes packed
     * once, or classifies a row that does not repeat straight into the pack */
    if (d->fast2 && (!d->atoms || d->got % d->atoms->nch == 0))
        fast = row ? v2_pack(d->m, &d->rc, &d->pk, row, n, d->atoms)
                   : v2_pack_rows(d->m, &d->pk, mu, s, n, d->atoms, 0);
#endif
    int rc = SKV_OK;
    size_t i = 0, rw = 0;
#ifdef SKV_HAVE_CLS8
    if (fast && n % 8 == 0) { /* whole rows: v2_run runs across them */
        const size_t G = rows * (n / 8), gr = n / 8;
        size_t g = 0;
        int stop = 0;
        while (g < G && !r.bad && !stop) {
            size_t pi = (g % gr) * 8;
            g += v2_run(d, &r, pi, d->got + (uint32_t)(8 * g), G - g, x + 8 * g, mag, big, &stop);
            if (g == G || r.bad || stop)
                break;
            pi = (g % gr) * 8;
            skv_fcls cl[8];
            for (int q = 0; q < 8 && !row && !rc; q++)
                rc = fclassify(m, L, mu[pi + q], s[pi + q], &cl[q]);
            if (rc)
                break;
            v2_group_ref(d, &r, row ? row + pi : cl, d->got + (uint32_t)(8 * g), 8, x + 8 * g);
            g++;
            if (g % gr == 0 && !r.bad && big < mag && skv_any_above32(x + 8 * g - n, n, mag, big))
                stop = 1;
        }
        d->w = r.w;
        d->rpos = r.rpos;
        *done = 8 * (r.bad ? g - 1 : g) / n; /* on damage, the rows before its group */
        if (r.bad) {
            d->bad = 1;
            d->got += (uint32_t)(8 * g);
            return skv_error(SKV_ERR_CORRUPT, "stream: corrupted in the group of scalar %u", d->got - 8);
        }
        d->got += (uint32_t)(8 * g);
        if (rc) /* a table: nothing of group g was read */
            return skv_error(rc, "codec table");
        return SKV_OK;
    }
#endif
    for (; rw < rows && !r.bad && !rc; rw++) {
        uint32_t *xr = x + rw * n;
        const uint32_t at0 = d->got + (uint32_t)(rw * n);
        for (i = 0; i < n && !r.bad; i += 8) {
            uint32_t k = n - i < 8 ? (uint32_t)(n - i) : 8, at = at0 + (uint32_t)i;
            skv_fcls cl[8];
            const skv_fcls *c = row ? row + i : cl;
            for (uint32_t j = 0; j < k && !row && !rc; j++)
                rc = fclassify(m, L, mu[i + j], s[i + j], &cl[j]);
            if (rc)
                break;
#ifdef SKV_HAVE_CLS8
            if (fast && k == 8) {
                int stop = 0;
                size_t ng = v2_run(d, &r, i, at, (n - i) / 8, xr + i, 0, 0, &stop);
                if (ng) {
                    i += 8 * ng - 8; /* the loop adds the last 8 */
                    continue;
                }
            }
#endif
            v2_group_ref(d, &r, c, at, k, xr + i);
        }
        if (r.bad || rc)
            break;
        *done = rw + 1;
        if (big < mag && skv_any_above32(xr, n, mag, big)) {
            rw++;
            break;
        }
    }
    d->w = r.w;
    d->rpos = r.rpos;
    if (r.bad) {
        d->bad = 1;
        d->got += (uint32_t)(rw * n + i);
        return skv_error(SKV_ERR_CORRUPT, "stream: corrupted in the group of scalar %u", d->got - 8);
    }
    if (rc) { /* a table: nothing of this group was read */
        d->got += (uint32_t)(rw * n + i);
        return skv_error(rc, "codec table");
    }
    d->got += (uint32_t)(*done * n);
    return SKV_OK;
}

static int get_n_given(skv_decoder *d, const float *mu, const float *s, uint32_t *x, size_t n,
                       const skv_fcls *given)
{
    if (d->version == 2) {
        size_t done;
        return get_rows_v2(d, mu, s, x, n, given, 1, 0, 0, &done);
    }
    switch (d->m->lat.dt) {
    case SKV_DT_BF16: return get_n_split(d, &SKV__LAT_BF16, mu, s, x, n, given);
    case SKV_DT_F16: return get_n_split(d, &SKV__LAT_F16, mu, s, x, n, given);
    case SKV_DT_F8E4M3: return get_n_split(d, &SKV__LAT_F8, mu, s, x, n, given);
    default: return get_n_split(d, &SKV__LAT_F32, mu, s, x, n, given);
    }
}

int skv_decoder_get_n(skv_decoder *d, const float *mu, const float *s, uint32_t *x, size_t n)
{
    if (n > d->n - d->got)
        return skv_error(SKV_ERR_ARG, "stream holds %u scalars; asked for %zu more after %u", d->n,
                         n, d->got);
    if (d->bad)
        return skv_error(SKV_ERR_CORRUPT, "stream: corrupted at scalar %u", d->got);
    return get_n_given(d, mu, s, x, n, NULL);
}

#ifdef SKV_HAVE_CLS8
/* Whether skv_decoder_get_n2 takes d's rows of n scalars two streams at a
 * time (v2_run2_t): streams that may (pairok), whole groups at the same
 * index in both */
static int pair_fast(skv_decoder *const d[2], size_t n)
{
    return d[0]->pairok & d[1]->pairok & (d[0]->got == d[1]->got) & ((d[0]->got | n) % 8 == 0);
}

/* skv_decoder_get_n2 on pair_fast's streams: their groups in turn
 * (v2_run2_t); a group either stream cannot take there takes that
 * stream's own paths (v2_run, else v2_group_ref on fclassify's classes).
 * 1, with nothing decoded, when there is no room to pack the rows. */
static inline __attribute__((target("avx2,popcnt"), always_inline)) int
get_pair_v2_t(skv_decoder *const d[2], const float *const mu[2], const float *const s[2], uint32_t *const x[2],
              size_t n)
{
    for (int k = 0; k < 2; k++)
        if (!v2_pack_rows_t(d[k]->m, &d[k]->pk, mu[k], s[k], n, NULL, 0))
            return 1; /* no room: nothing decoded */
    r2_t rr[2];
    r2_t *const r[2] = {&rr[0], &rr[1]};
    for (int k = 0; k < 2; k++)
        rr[k] = (r2_t){d[k]->x2, d[k]->w, d[k]->wend, d[k]->rb, d[k]->rpos, d[k]->rbits, 0};
    const size_t G = n / 8;
    size_t g[2] = {0, 0};
    int rc = SKV_OK;
    while ((g[0] < G || g[1] < G) && !rr[0].bad && !rr[1].bad && !rc) {
        if (g[0] == g[1]) {
            size_t done[2];
            uint32_t *const xx[2] = {x[0] + 8 * g[0], x[1] + 8 * g[1]};
            v2_run2_t(d, r, 8 * g[0], d[0]->got + (uint32_t)(8 * g[0]), G - g[0], xx, done);
            g[0] += done[0], g[1] += done[1];
            if ((g[0] == G && g[1] == G) || rr[0].bad || rr[1].bad)
                break;
        }
        /* the stream(s) behind: one group on their own */
        const size_t lo = g[0] < g[1] ? g[0] : g[1];
        for (int k = 0; k < 2 && !rc && !rr[0].bad && !rr[1].bad; k++) {
            if (g[k] != lo)
                continue;
            const size_t pi = 8 * g[k];
            const uint32_t at = d[k]->got + (uint32_t)pi;
            int stop = 0;
            if (!v2_run(d[k], r[k], pi, at, 1, x[k] + pi, 0, 0, &stop) && !rr[k].bad) {
                skv_fcls cl[8];
                for (int q = 0; q < 8 && !rc; q++)
                    rc = fclassify(d[k]->m, &d[k]->m->lat, mu[k][pi + q], s[k][pi + q], &cl[q]);
                if (rc)
                    break;
                v2_group_ref(d[k], r[k], cl, at, 8, x[k] + pi);
            }
            g[k]++;
        }
    }
    int bad = 0;
    for (int k = 0; k < 2; k++) {
        d[k]->w = rr[k].w;
        d[k]->rpos = rr[k].rpos;
        d[k]->got += (uint32_t)(8 * g[k]);
        if (rr[k].bad) {
            d[k]->bad = 1;
            if (!bad)
                bad = skv_error(SKV_ERR_CORRUPT, "stream: corrupted in the group of scalar %u", d[k]->got - 8);
        }
    }
    if (bad)
        return bad;
    if (rc) /* a table: nothing of that group was read */
        return skv_error(rc, "codec table");
    return SKV_OK;
}

static __attribute__((target(T512))) int get_pair_v2_512(skv_decoder *const d[2], const float *const mu[2],
                                                        const float *const s[2], uint32_t *const x[2], size_t n)
{
    return get_pair_v2_t(d, mu, s, x, n);
}

/* get_pair_v2_t with the packs and the paired run inlined, for AVX2 or
 * (cls_simd() 3) AVX-512VL */
static __attribute__((target("avx2,popcnt"))) int get_pair_v2(skv_decoder *const d[2], const float *const mu[2],
                                                             const float *const s[2], uint32_t *const x[2],
                                                             size_t n)
{
    if (cls_simd() == 3)
        return get_pair_v2_512(d, mu, s, x, n);
    return get_pair_v2_t(d, mu, s, x, n);
}
#endif

int skv_decoder_get_n2(skv_decoder *const d[2], const float *const mu[2], const float *const s[2],
                       uint32_t *const x[2], size_t n)
{
    for (int k = 0; k < 2; k++) {
        if (n > d[k]->n - d[k]->got)
            return skv_error(SKV_ERR_ARG, "stream holds %u scalars; asked for %zu more after %u", d[k]->n, n,
                             d[k]->got);
        if (d[k]->bad)
            return skv_error(SKV_ERR_CORRUPT, "stream: corrupted at scalar %u", d[k]->got);
    }
#ifdef SKV_HAVE_CLS8
    if (pair_fast(d, n)) {
        int rc = get_pair_v2(d, mu, s, x, n);
        if (rc != 1)
            return rc; /* (else one stream after the other) */
    }
#endif
    int rc = get_n_given(d[0], mu[0], s[0], x[0], n, NULL);
    return rc ? rc : get_n_given(d[1], mu[1], s[1], x[1], n, NULL);
}

int skv_decoder_get_rows(skv_decoder *d, const float *mu, const float *s, size_t n, size_t rows,
                         uint32_t big, uint32_t *x, size_t *done)
{
    *done = 0;
    if (n == 0 || rows == 0)
        return SKV_OK;
    if (rows > (d->n - d->got) / n)
        return skv_error(SKV_ERR_ARG, "stream holds %u scalars; asked for %zu rows of %zu after %u",
                         d->n, rows, n, d->got);
    if (d->bad)
        return skv_error(SKV_ERR_CORRUPT, "stream: corrupted at scalar %u", d->got);
    const skv_fcls *row = NULL;
    if (rcache_on(&d->rc, n) && !(row = rcache_get(d->m, &d->m->lat, &d->rc, mu, s, n)))
        return skv_error(SKV_ERR_NOMEM, "codec table"); /* nothing decoded */
    const uint32_t mag = d->m->lat.sign - 1u; /* a magnitude's bits; none is above it */
    if (d->version == 2 && n % 8 == 0)
        return get_rows_v2(d, mu, s, x, n, row, rows, mag, big, done);
    for (size_t r = 0; r < rows; r++) {
        uint32_t *xr = x + r * n;
        int rc = get_n_given(d, mu, s, xr, n, row);
        if (rc)
            return rc;
        *done = r + 1;
        if (big < mag && skv_any_above32(xr, n, mag, big))
            break;
    }
    return SKV_OK;
}

int skv_decoder_get(skv_decoder *d, float mu, float s, uint32_t *out)
{
    return skv_decoder_get_n(d, &mu, &s, out, 1);
}

int skv_decoder_end(skv_decoder *d)
{
    if (d->got != d->n)
        return skv_error(SKV_ERR_ARG, "stream: %u of %u scalars decoded", d->got, d->n);
    if (d->version == 2) {
        if (d->bad || d->w != d->wend)
            return skv_error(SKV_ERR_CORRUPT, "stream: %td payload bytes left over",
                             (ptrdiff_t)(d->wend - d->w));
        /* the raw bit stream: consumed but for the zero bits of its last byte */
        if (d->rbits - d->rpos >= 8 || (d->rpos < d->rbits && (d->rb[d->rpos >> 3] >> (d->rpos & 7))))
            return skv_error(SKV_ERR_CORRUPT, "stream: raw bits left over");
        for (uint32_t l = 0; l < d->states; l++)
            if (d->x2[l] != RANS_L)
                return skv_error(SKV_ERR_CORRUPT, "stream: rANS state %u did not return to its start", l);
        uint64_t h = 0x243f6a8885a308d3ull;
        for (int l = 0; l < SKV_V2_STATES; l++)
            h = mix_in(h, d->acc[l]);
        if (final_checksum(h, d->n) != d->want)
            return skv_error(SKV_ERR_CORRUPT, "stream: checksum of the decoded scalars does not match");
        return SKV_OK;
    }
    if (d->bad || d->w != d->wend)
        return skv_error(SKV_ERR_CORRUPT, "stream: %td payload bytes left over",
                         (ptrdiff_t)(d->wend - d->w));
    for (int k = 0; k < 4; k++)
        if (d->x[k] != RANS_L)
            return skv_error(SKV_ERR_CORRUPT, "stream: rANS state %d did not return to its start", k);
    if (final_checksum(d->h, d->n) != d->want)
        return skv_error(SKV_ERR_CORRUPT, "stream: checksum of the decoded scalars does not match");
    return SKV_OK;
}
