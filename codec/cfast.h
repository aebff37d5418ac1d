/* The codec's hot path: classification and the lattice arithmetic of one
 * scalar, written for the batch encoders and decoders (enc_queue.c, enc_groups.c,
 * dec_serial.c, dec_groups.c) with the
 * dtype's lattice as compile-time constants. Every function here computes
 * exactly what its reference in cmodel.c computes (skv__classify,
 * skv__plan, ceil_lat, skv__zero_range): closed forms where the lattice
 * is regular (normal binades), the reference itself elsewhere. The golden
 * streams and the reference-planner test in tests/test_codec_batch.c hold the
 * two to the same bits. */
#ifndef SKV_CFAST_H
#define SKV_CFAST_H

#include <string.h>

#include "codec_int.h"
#include "skv_dtype_impl.h"

#define SKV_ALWAYS_INLINE static inline __attribute__((always_inline))

/* cond ? a : b without a branch, for the coin flips of the rANS hot path
 * (renormalisation, the symbol at a boundary), which GCC turns into
 * branches when left to itself. */
SKV_ALWAYS_INLINE uint32_t fsel(uint32_t cond, uint32_t a, uint32_t b)
{
#if defined(__x86_64__) || defined(__i386__)
    __asm__("test %2, %2\n\tcmovnz %1, %0" : "+r"(b) : "r"(a), "r"(cond) : "cc");
    return b;
#else
    uint32_t m = 0u - (cond != 0);
    return b ^ ((a ^ b) & m);
#endif
}

/* Lattices as constants: the hot loops take `const skv_lat *L` pointing at
 * one of these and are instantiated per dtype, so GCC folds the fields. */
static const skv_lat SKV__LAT_BF16 = {SEQKV_DT_BF16, 16, 7, 127, 0x8000u, 0x7f80u};
static const skv_lat SKV__LAT_F16 = {SEQKV_DT_F16, 16, 10, 15, 0x8000u, 0x7c00u};
static const skv_lat SKV__LAT_F8 = {SEQKV_DT_F8E4M3, 8, 3, 7, 0x80u, 0x7fu};
static const skv_lat SKV__LAT_F32 = {SEQKV_DT_F32, 32, 23, 127, 0x80000000u, 0x7f800000u};

/* How one scalar is coded, the hot-path form of skv_cls: the table symbol
 * of x is key(x) - base, where key is x's signed ordinal (STEP) or its
 * bucket index (BUCKET). */
typedef struct {
    const skv_ftab *tab;
    int64_t base;  /* STEP: ordinal(c) - R; BUCKET: floor(mu / g) - R */
    int G;         /* BUCKET: g = 2^G */
    int bucket;
    uint32_t nesc; /* the escape symbol, tab->n - 1 */
} skv_fcls;

SKV_ALWAYS_INLINE double fpow2d(int e)
{
    union { double d; uint64_t u; } c;
    c.u = (uint64_t)(e + 1023) << 52;
    return c.d;
}

SKV_ALWAYS_INLINE int64_t ffloor_i64(double y)
{
    int64_t i = (int64_t)y;
    return i - (int64_t)((double)i > y);
}

SKV_ALWAYS_INLINE int lat_emin(const skv_lat *L) { return 1 - L->bias; }
SKV_ALWAYS_INLINE int lat_emax(const skv_lat *L)
{
    return (int)((L->inf_mag - 1u) >> L->mbits) - L->bias;
}

/* nearest finite lattice point to a finite mu (cmodel.c nearest()) */
SKV_ALWAYS_INLINE uint32_t fnearest(const skv_lat *L, float mu)
{
    uint32_t c;
    switch (L->dt) {
    case SEQKV_DT_BF16: {
        uint32_t u = skv__bits(mu); /* finite: RNE only */
        c = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        break;
    }
    case SEQKV_DT_F16: c = skv__f32_to_f16(mu); break;
    case SEQKV_DT_F8E4M3: c = skv__f32_to_f8e4m3(mu); break;
    default: c = skv__bits(mu); break;
    }
    if ((c & (L->sign - 1u)) >= L->inf_mag)
        c = (c & L->sign) | (L->inf_mag - 1u);
    return c;
}

SKV_ALWAYS_INLINE int64_t fordinal(const skv_lat *L, uint32_t x)
{
    int64_t m = (int64_t)(x & (L->sign - 1u));
    return m ^ -(int64_t)((x & L->sign) != 0); /* -m - 1 when negative */
}

/* exact value of a finite dtype pattern, as a double */
SKV_ALWAYS_INLINE double fvalue(const skv_lat *L, uint32_t x)
{
    uint32_t m = x & (L->sign - 1u);
    uint32_t E = m >> L->mbits, F = m & ((1u << L->mbits) - 1u);
    uint64_t mant = E ? ((1ull << L->mbits) | F) : F;
    int ex = (int)(E ? E : 1) - L->bias - L->mbits;
    double v = (double)mant * fpow2d(ex);
    return (x & L->sign) ? -v : v;
}

SKV_ALWAYS_INLINE const skv_ftab *ftable(skv_cmodel *m, int bucket_mode, int idx, int oct, int sub,
                                          int ph, int nph)
{
    skv_ftab *const *slot = &m->tabs[bucket_mode ? N_STEP_TABS + idx : idx];
    skv_ftab *t = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (__builtin_expect(t != NULL, 1))
        return t;
    return skv__build_table(m, bucket_mode, idx, oct, sub, ph, nph);
}

/* The reference classification as an skv_fcls, for the corners the
 * integer path leaves to it (STEP with mu's lattice far finer or coarser
 * than the dtype's); cold, in cmodel.c. */
int skv__fclassify_ref(skv_cmodel *m, float mu, float s, skv_fcls *c);

/* skv__classify, for the hot path, in integer arithmetic: mu is Y * 2^em
 * (Y its signed 24-bit significand), so mu / 2^G and mu's offset from c in
 * steps are shifts of Y; the reference's double arithmetic is exact in
 * these ranges (tests/test_codec_batch.c holds the two together). Returns 0, or
 * SKV_ERR_NOMEM when a table cannot be built. */
SKV_ALWAYS_INLINE int fclassify(skv_cmodel *m, const skv_lat *L, float mu, float s, skv_fcls *c)
{
    uint32_t mb = skv__bits(mu);
    if ((mb & 0x7f800000u) == 0x7f800000u)
        mb = 0; /* NaN, inf: mu = +0 */
    if (!(s >= 0x1p-120f))
        s = 0x1p-120f;
    if (s > 0x1p100f)
        s = 0x1p100f;
    uint32_t sb = skv__bits(s);
    int Es = (int)((sb >> 23) & 0xff) - 127;
    int sub = (int)((sb >> 20) & 7);
    uint32_t emu = (mb >> 23) & 0xffu;
    int64_t M = (int64_t)((mb & 0x7fffffu) | (emu ? 0x800000u : 0u));
    int64_t Y = (mb >> 31) ? -M : M; /* mu = Y * 2^em */
    int em = (int)(emu ? emu : 1u) - 150;
    uint32_t cc = fnearest(L, skv__float(mb));
    uint32_t cm = cc & (L->sign - 1u);
    uint32_t E = cm >> L->mbits;
    int U = (int)(E ? E : 1) - L->bias - L->mbits;
    int G = Es - 3;
    const skv_ftab *t;
    if (U >= G) {
        int oct = Es - U;
        if (oct < STEP_OCT_MIN) {
            oct = STEP_OCT_MIN;
            sub = 0;
        }
        int nph = oct < 0 ? 16 : oct < 2 ? 4 : 1;
        int64_t T = 0; /* floor(((mu - c) / 2^U + 1/2) * nph) */
        if (nph > 1) {
            int64_t Mc = (int64_t)((cm & ((1u << L->mbits) - 1u)) | (E ? 1u << L->mbits : 0u));
            int64_t Yc = (cc & L->sign) ? -Mc : Mc; /* c = Yc * 2^U */
            int d = em - U;
            if (d < 0 && d >= -34) {
                int k = -d;
                int64_t N = Y - Yc * ((int64_t)1 << k); /* (mu - c) / 2^U = N / 2^k */
                T = (N * nph + ((int64_t)nph << (k - 1))) >> k;
            } else if (d >= 0 && d <= 30) {
                T = (Y * ((int64_t)1 << d) - Yc) * nph + nph / 2;
            } else {
                return skv__fclassify_ref(m, mu, s, c);
            }
        }
        int ph = T < 1 ? 0 : T >= nph ? nph - 1 : (int)T;
        int idx = ((oct - STEP_OCT_MIN) * 8 + sub) * 16 + ph;
        t = ftable(m, 0, idx, oct, sub, ph, nph);
        if (!t)
            return SKV_ERR_NOMEM;
        c->bucket = 0;
        c->G = G;
        c->base = fordinal(L, cc) - t->R;
        c->nesc = t->n - 1;
    } else {
        /* bi = floor(mu / 2^G) (clamped to +-2^60), ph = floor(4 * frac) */
        int d = em - G;
        int64_t bi;
        int ph;
        if (d >= 0) {
            bi = d >= 37 ? ((mb >> 31) ? -((int64_t)1 << 60) : ((int64_t)1 << 60))
                         : Y * ((int64_t)1 << d);
            ph = 0;
        } else {
            int k = -d > 60 ? 60 : -d;
            bi = Y >> k; /* arithmetic: floor */
            ph = (int)(((uint64_t)(Y & (((int64_t)1 << k) - 1)) << 2) >> k);
        }
        t = ftable(m, 1, sub * 4 + ph, 0, sub, ph, 4);
        if (!t)
            return SKV_ERR_NOMEM;
        c->bucket = 1;
        c->G = G;
        c->base = bi - BUCKET_R; /* every BUCKET table has R = BUCKET_R */
        c->nesc = 2 * BUCKET_R + 1;
    }
    c->tab = t;
    return SKV_OK;
}

/* A direct-mapped cache of classifications keyed by the exact bits of
 * (mu, s), per encoder/decoder and stream: predictors that repeat their
 * pairs (stat: one per channel and seen/unseen) skip the classification.
 * It switches itself off for a stream after FCACHE_PROBE lookups with
 * under half hits (ctx, spec: predictions vary per scalar). Purely a
 * speed-up: a hit returns what fclassify would. */
#define FCACHE_BITS 9
#define FCACHE_PROBE 1024
typedef struct {
    uint64_t key[1u << FCACHE_BITS]; /* (mu bits | s bits << 32) + 1; 0: empty */
    skv_fcls cls[1u << FCACHE_BITS];
    uint32_t lookups, hits;
    int off;
} skv_fcache;

static inline void fcache_clear(skv_fcache *fc)
{
    memset(fc->key, 0, sizeof fc->key);
    fc->lookups = fc->hits = 0;
    fc->off = 0;
}

/* The class of (mu, s) through the cache (which must be on); NULL when a
 * table cannot be built. The pointer is valid until the next lookup. */
SKV_ALWAYS_INLINE const skv_fcls *fcache_get(skv_cmodel *m, const skv_lat *L, skv_fcache *fc,
                                             float mu, float s, uint32_t *hits)
{
    uint64_t key = ((uint64_t)skv__bits(mu) | (uint64_t)skv__bits(s) << 32) + 1u;
    uint32_t slot = (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> (64 - FCACHE_BITS));
    if (__builtin_expect(fc->key[slot] == key && key != 0, 1)) {
        (*hits)++;
        return &fc->cls[slot];
    }
    skv_fcls c;
    if (__builtin_expect(fclassify(m, L, mu, s, &c) != SKV_OK, 0))
        return NULL;
    fc->key[slot] = key;
    fc->cls[slot] = c;
    return &fc->cls[slot];
}

/* After a batch of n lookups with `hits` hits. */
static inline void fcache_count(skv_fcache *fc, uint32_t n, uint32_t hits)
{
    fc->hits += hits;
    fc->lookups += n;
    if (fc->lookups >= FCACHE_PROBE && fc->hits < fc->lookups / 2)
        fc->off = 1;
}

/* A cache of whole rows of classes keyed by the exact bits of the row's
 * (mu, s), per encoder/decoder and stream: a predictor whose rows repeat
 * (stat: mu is the channel mean, s one of two rows, seen/unseen) pays one
 * compare of the row instead of a lookup per scalar. Rows of at most
 * RCACHE_MAX scalars (a model's kv_heads x head_dim), RCACHE_SLOTS of them
 * (the least recently used goes), in memory for RCACHE_MIN scalars a slot
 * made with the coder, grown for a longer row when one comes and kept
 * across streams. It switches itself off after RCACHE_PROBE rows with
 * under half hits (ctx: mu varies per row), and for the stream when the
 * larger memory cannot be had. Purely a speed-up, like skv_fcache. */
#define RCACHE_MIN 256
#define RCACHE_MAX 8192
#define RCACHE_SLOTS 2
#define RCACHE_PROBE 8
typedef struct {
    uint32_t n[RCACHE_SLOTS]; /* scalars in the slot; 0: empty */
    uint32_t age[RCACHE_SLOTS];
    uint32_t gen[RCACHE_SLOTS]; /* bumped whenever the slot is filled (v2's packed rows) */
    uint32_t clock, lookups, hits;
    int off;
    size_t cap;  /* scalars a slot holds; 0: nothing allocated */
    void *mem;   /* the slots' classes, then mu, then s */
    skv_fcls *cls[RCACHE_SLOTS];
    float *mu[RCACHE_SLOTS], *s[RCACHE_SLOTS];
} skv_rcache;

static inline void rcache_clear(skv_rcache *rc)
{
    for (int k = 0; k < RCACHE_SLOTS; k++)
        rc->n[k] = 0, rc->age[k] = 0;
    rc->clock = rc->lookups = rc->hits = 0;
    rc->off = 0;
}

static inline void rcache_free(skv_rcache *rc)
{
    skv_free(rc->mem);
    rc->mem = NULL;
    rc->cap = 0;
}

/* Room for slots of n scalars (n <= RCACHE_MAX): the memory grows, and
 * the slots are emptied; 0 when it cannot be had (the cache is then off
 * for this stream). */
static __attribute__((noinline)) int rcache_grow(skv_rcache *rc, size_t n)
{
    size_t cap = rc->cap ? rc->cap : RCACHE_MIN;
    while (cap < n)
        cap *= 2;
    void *mem = skv_malloc(RCACHE_SLOTS * cap * (sizeof(skv_fcls) + 2 * sizeof(float)));
    if (!mem) {
        rc->off = 1;
        return 0;
    }
    skv_free(rc->mem);
    rc->mem = mem;
    rc->cap = cap;
    float *f = (float *)((skv_fcls *)mem + RCACHE_SLOTS * cap);
    for (int k = 0; k < RCACHE_SLOTS; k++) {
        rc->cls[k] = (skv_fcls *)mem + k * cap;
        rc->mu[k] = f + (2 * k) * cap;
        rc->s[k] = f + (2 * k + 1) * cap;
        rc->n[k] = 0;
    }
    return 1;
}

/* The row caches of a coder, for tests */
const skv_rcache *skv__encoder_rcache(const skv_encoder *e);
const skv_rcache *skv__decoder_rcache(const skv_decoder *d);
/* test hook: the version 2 groups this decoder took by its AVX2 path */
uint64_t skv__decoder_fast_groups(const skv_decoder *d);
/* test hook: the groups its AVX2 path packed again by their phases alone */
uint64_t skv__decoder_phase_groups(const skv_decoder *d);

/* Whether rows of n scalars go through the cache (rcache_get) */
static inline int rcache_on(skv_rcache *rc, size_t n)
{
    if (rc->off || n - 1 >= RCACHE_MAX)
        return 0;
    return __builtin_expect(n <= rc->cap, 1) || rcache_grow(rc, n);
}

/* Classify mu[0..n), s[0..n) into cls (a block ahead of the rANS chain,
 * when the cache is off); SKV_ERR_NOMEM, with *done set to the scalars
 * classified, when a table cannot be built. */
#if defined(__x86_64__) && defined(__GNUC__)
#define SKV_HAVE_CLS8 1
/* bf16 classification eight lanes at a time (AVX2, chosen at run time):
 * the integer arithmetic of fclassify on 32-bit lanes, for the ranges
 * where 32 bits are exact; every other lane is flagged for fclassify. Out:
 * per lane flag (0 STEP, 1 BUCKET, 2 take fclassify), the table index, key
 * (STEP: c's bits; BUCKET: floor(mu / 2^G)) and G; the table index is
 * into skv_cmodel.tabs (BUCKET: N_STEP_TABS + class). */
typedef int32_t skv_v8i __attribute__((vector_size(32)));
typedef uint32_t skv_v8u __attribute__((vector_size(32)));
typedef struct {
    int32_t flag[8], idx[8], key[8], G[8];
} skv_cls8;
void skv__cls8_avx2(const float *mu, const float *s, size_t groups, skv_cls8 *o);
/* The classes of o[0..groups) into cls[0..8 * groups) as BUCKET lanes
 * with their tables already built are (the common case at ctx); bit k of
 * fix[j] set for each lane k of group j that is not one of those (STEP,
 * flagged, or a table not built yet: cls8_lane finishes it). The tables
 * are read with plain loads, which on x86 order like the acquire loads
 * of ftable. */
void skv__cls8_fill_avx2(skv_ftab *const *tabs, const skv_cls8 *o, size_t groups, skv_fcls *cls,
                         uint8_t *fix);
/* 0: scalar classification (SEQKV_SIMD=0), 2: AVX2 (SEQKV_SIMD=2), 3:
 * AVX2 with the decoder's hottest paths in copies built for AVX-512 (CPUs
 * with AVX-512F, VL, BW and DQ); chosen at the first use
 * (skv__cls_simd_pick); the tests set it to compare them */
extern int skv__cls_simd;
int skv__cls_simd_pick(void);

SKV_ALWAYS_INLINE int cls_simd(void)
{
    int v = __atomic_load_n(&skv__cls_simd, __ATOMIC_RELAXED);
    return v >= 0 ? v : skv__cls_simd_pick();
}

/* lane k of o into cls[k] (bf16): the table by index, fclassify for a
 * flagged lane or a table not built yet */
SKV_ALWAYS_INLINE int cls8_lane(skv_cmodel *m, const skv_lat *L, const float *mu, const float *s,
                                const skv_cls8 *o, int k, skv_fcls *cls)
{
    skv_fcls *c = &cls[k];
    const int f = o->flag[k];
    const skv_ftab *t = f == 2 ? NULL : __atomic_load_n(&m->tabs[o->idx[k]], __ATOMIC_ACQUIRE);
    if (__builtin_expect(!t, 0))
        return fclassify(m, L, mu[k], s[k], c);
    c->tab = t;
    c->G = o->G[k];
    c->bucket = f;
    if (f) {
        c->base = (int64_t)o->key[k] - BUCKET_R;
        c->nesc = 2 * BUCKET_R + 1;
    } else {
        c->base = fordinal(L, (uint32_t)o->key[k]) - t->R;
        c->nesc = t->n - 1;
    }
    return SKV_OK;
}
#endif

/* A cache for a new stream of dtype dt: off from the start where bf16 is
 * classified eight lanes at a time (a miss there costs several block
 * classifications, and repeating predictors repeat whole rows, which the
 * row cache serves), else on, probing its hit rate again. */
static inline void fcache_start(skv_fcache *fc, seqkv_dtype dt)
{
#ifdef SKV_HAVE_CLS8
    if (dt == SEQKV_DT_BF16 && cls_simd() >= 2) {
        fc->lookups = fc->hits = 0;
        fc->off = 1;
        return;
    }
#endif
    fcache_clear(fc);
}

SKV_ALWAYS_INLINE int fclassify_block(skv_cmodel *m, const skv_lat *L, const float *mu,
                                      const float *s, size_t n, skv_fcls *cls, size_t *done)
{
    size_t k0 = 0;
#ifdef SKV_HAVE_CLS8
    if (L->dt == SEQKV_DT_BF16 && n >= 8 && cls_simd() >= 2) {
        skv_cls8 o[8];
        while (k0 + 8 <= n) {
            size_t g = (n - k0) / 8 < 8 ? (n - k0) / 8 : 8;
            uint8_t fix[8];
            skv__cls8_avx2(mu + k0, s + k0, g, o);
            skv__cls8_fill_avx2(m->tabs, o, g, cls + k0, fix);
            for (size_t j = 0; j < g; j++, k0 += 8)
                for (unsigned f = fix[j]; f; f &= f - 1)
                    if (__builtin_expect(cls8_lane(m, L, mu + k0, s + k0, &o[j], __builtin_ctz(f),
                                                   cls + k0) != SKV_OK,
                                         0)) {
                        *done = k0; /* the group's lanes are not all right: report the group */
                        return SKV_ERR_NOMEM;
                    }
        }
    }
#endif
    for (size_t k = k0; k < n; k++)
        if (__builtin_expect(fclassify(m, L, mu[k], s[k], &cls[k]) != SKV_OK, 0)) {
            *done = k;
            return SKV_ERR_NOMEM;
        }
    *done = n;
    return SKV_OK;
}

/* The classes of the row mu[0..n), s[0..n) through the row cache (for
 * which rcache_on(rc, n) must hold): a hit returns the stored row, a miss
 * classifies the row into the least recently used slot. NULL when a table
 * cannot be built (the slot is then left empty). The pointer is valid
 * until the next lookup. */
static inline const skv_fcls *rcache_get(skv_cmodel *m, const skv_lat *L, skv_rcache *rc,
                                         const float *mu, const float *s, size_t n)
{
    int v = 0;
    rc->lookups++;
    rc->clock++;
    for (int k = 0; k < RCACHE_SLOTS; k++) {
        if (rc->n[k] == n && memcmp(rc->mu[k], mu, n * sizeof *mu) == 0 &&
            memcmp(rc->s[k], s, n * sizeof *s) == 0) {
            rc->hits++;
            rc->age[k] = rc->clock;
            return rc->cls[k];
        }
        if (rc->age[k] < rc->age[v])
            v = k;
    }
    if (rc->lookups >= RCACHE_PROBE && rc->hits < rc->lookups / 2)
        rc->off = 1; /* this miss is still served */
    size_t done;
    rc->n[v] = 0;
    if (fclassify_block(m, L, mu, s, n, rc->cls[v], &done) != SKV_OK)
        return NULL;
    memcpy(rc->mu[v], mu, n * sizeof *mu);
    memcpy(rc->s[v], s, n * sizeof *s);
    rc->n[v] = (uint32_t)n;
    rc->gen[v]++;
    rc->age[v] = rc->clock;
    return rc->cls[v];
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

/* ceil_lat(L, 1, e): the code of 2^e, or the reference off the normal range */
SKV_ALWAYS_INLINE uint32_t fpow2_code(const skv_lat *L, int e)
{
    if (__builtin_expect(e >= lat_emin(L) && e <= lat_emax(L), 1))
        return (uint32_t)(e + L->bias) << L->mbits;
    if (e > lat_emax(L))
        return L->inf_mag;
    return skv__ceil_lat(L, 1, e);
}

/* Magnitude codes [lo, hi) of bucket j > 0 of width 2^G:
 * lo = ceil_lat(j, G), hi = ceil_lat(j + 1, G). Inside a normal binade
 * with at least one point per bucket the bucket is an aligned run of
 * 2^(mbits - k) codes (k = floor(log2 j)); a carry into the exponent field
 * is the next binade's first code. */
SKV_ALWAYS_INLINE void fbucket_range(const skv_lat *L, uint64_t j, int G, uint32_t *lo,
                                     uint32_t *hi)
{
    int k = 63 - __builtin_clzll(j);
    int e = k + G;
    if (__builtin_expect(k <= L->mbits && e >= lat_emin(L) && e <= lat_emax(L), 1)) {
        uint32_t l = ((uint32_t)(e + L->bias) << L->mbits) +
                     (uint32_t)((j - (1ull << k)) << (L->mbits - k));
        uint32_t h = l + (1u << (L->mbits - k));
        *lo = l;
        *hi = h > L->inf_mag ? L->inf_mag : h;
        return;
    }
    *lo = skv__ceil_lat(L, j, G);
    *hi = skv__ceil_lat(L, j + 1, G);
}

/* skv__zero_range */
SKV_ALWAYS_INLINE void fzero_range(const skv_lat *L, int G, int lvl, uint32_t *lo, uint32_t *hi)
{
    if (lvl < ZLEVELS) {
        *lo = fpow2_code(L, G - lvl - 1);
        *hi = fpow2_code(L, G - lvl);
    } else {
        *lo = 0;
        *hi = fpow2_code(L, G - ZLEVELS);
    }
}

/* The zero bucket's level of a magnitude below 2^G (skv__plan's loop):
 * for a normal magnitude of exponent ex it is G - ex - 1, capped at
 * ZLEVELS; zero and subnormals take the loop. */
SKV_ALWAYS_INLINE int fzero_level(const skv_lat *L, uint32_t mag, int G)
{
    uint32_t E = mag >> L->mbits;
    if (__builtin_expect(E != 0, 1)) {
        int d = G - ((int)E - L->bias);
        return d > ZLEVELS ? ZLEVELS : d - 1;
    }
    for (int tl = 1; tl <= ZLEVELS; tl++)
        if (mag >= fpow2_code(L, G - tl))
            return tl - 1;
    return ZLEVELS;
}

/* floor(|x| / 2^G) of a finite magnitude code (cmodel.c bucket_of) */
SKV_ALWAYS_INLINE uint64_t fbucket_of(const skv_lat *L, uint32_t m, int G, int *big)
{
    uint32_t E = m >> L->mbits, F = m & ((1u << L->mbits) - 1u);
    uint64_t mant = E ? ((1ull << L->mbits) | F) : F;
    int sh = (int)(E ? E : 1) - L->bias - L->mbits - G;
    *big = 0;
    if (mant == 0)
        return 0;
    if (sh >= 0) {
        if (sh > 40) {
            *big = 1;
            return 0;
        }
        uint64_t j = mant << sh;
        if (j >> 40)
            *big = 1;
        return j;
    }
    return -sh >= 64 ? 0 : mant >> (-sh);
}

SKV_ALWAYS_INLINE int fbits_for(uint64_t n)
{
    return n <= 1 ? 0 : 64 - __builtin_clzll(n - 1);
}

#endif
