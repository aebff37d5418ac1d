/* The decoder's floor on this machine: a stripped-down copy of the common
 * case of skv_decoder_get_n for bf16 (codec/stream.c dec_run) -- four rANS
 * states used round robin by operation, 16-bit renormalisation words, the
 * 64-bit index entry of a 256-slot run, one BUCKET table symbol then its
 * plain bits -- without escapes, the bucket at zero, atoms, per-row calls
 * or class caches. Variants, timed in the same process alternately (best
 * of REPS runs of a stream of N scalars, so a noisy neighbour hurts them
 * alike; compare ratios):
 *   closed    plain-bit count and first point from the bucket index in
 *             closed form (a bit scan), as the decoder did before its
 *             bucket values
 *   values    both from a per-width table of bucket values (dec_run now)
 *   values+h  values, plus the version-1 checksum step per scalar
 *   rawbits   values, with the plain bits in a separate raw bit stream
 *             instead of rANS operations (a stream format change)
 *   raw+h4    rawbits, plus a checksum step per four scalars packed in
 *             a 64-bit word (what a second stream version could carry)
 * Every variant's output is checked against the scalars encoded.
 * usage: bench_rans_floor [REPS] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N 8192      /* scalars a stream: a 256-token stories260K layer's K or V */
#define NCH 32      /* channels a row, each with its own class */
#define NSYM 64     /* table symbols */
#define MBITS 7     /* bf16 */
#define BIAS 127

static uint32_t cum[NSYM + 1], freq[NSYM];
static uint64_t lut[NCH][256];
static uint32_t vals[256]; /* bucket values of the one width used: key + 128 */
static uint32_t syms[N], bits[N], want[N], out[N];
static uint16_t words1[4 * N + 8], words2[2 * N + 8];
static const uint16_t *w1start, *w2start;
static uint32_t fin1[4], fin2[4];
static uint8_t raw[2 * N + 16];

typedef struct {
    const uint64_t *tab;
    int64_t base;
    int G;
} cls_t;
static cls_t cls[NCH];

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int floor_log2(uint64_t j) { return 63 - __builtin_clzll(j); }

/* the bucket index of channel ch's scalar of symbol s: 1..112 */
static uint64_t bucket(int ch, uint32_t s) { return (uint64_t)(cls[ch].base + (int64_t)s); }
static int nb_of(uint64_t j) { return MBITS - floor_log2(j); }
static uint32_t first_point(uint64_t j, int G)
{
    int k = floor_log2(j);
    return ((uint32_t)(k + G + BIAS - 1) << MBITS) + (uint32_t)(j << (MBITS - k));
}

static uint32_t rng = 12345;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

static void setup(void)
{
    double p[NSYM], t = 0;
    for (int i = 0; i < NSYM; i++) {
        double z = (i - 32) / 6.0;
        double e = 1.0, term = 1.0; /* exp(-z^2/2) by series, no libm */
        for (int k = 1; k < 40; k++)
            term *= -0.5 * z * z / k, e += term;
        t += (p[i] = (e > 0 ? e : 0) + 1e-3);
    }
    uint32_t sum = 0, c = 0;
    for (int i = 0; i < NSYM; i++)
        sum += (freq[i] = (uint32_t)(p[i] / t * 65536 * 0.999) + 1);
    freq[32] += 65536 - sum;
    for (int i = 0; i < NSYM; i++)
        cum[i] = c, c += freq[i];
    cum[NSYM] = c;
    uint64_t l[256];
    for (uint32_t j = 0, s = 0; j < 256; j++) {
        while (cum[s + 1] <= j << 8)
            s++;
        uint64_t c2 = s + 2 <= NSYM ? cum[s + 2] : 65536;
        l[j] = (uint64_t)cum[s] | (uint64_t)cum[s + 1] << 16 | c2 << 33 | (uint64_t)s << 53;
    }
    for (int ch = 0; ch < NCH; ch++) {
        memcpy(lut[ch], l, sizeof l); /* a table per channel, as stat's classes */
        cls[ch] = (cls_t){lut[ch], 1 + (ch & 3) * 16, -3};
    }
    for (int k = -128; k < 128; k++)
        vals[k + 128] = k >= 1 && k < 128 ? first_point((uint64_t)k, -3) | (uint32_t)nb_of((uint64_t)k) << 24 : 0;
}

/* rANS encode ops (start, freq, bits) in reverse into words, four states */
static void rans_encode(const uint32_t *st, const uint32_t *fr, const uint8_t *nbits, int nops,
                        uint16_t *words, size_t cap, const uint16_t **wstart, uint32_t fin[4])
{
    uint32_t x[4] = {1u << 16, 1u << 16, 1u << 16, 1u << 16};
    uint16_t *top = words + cap;
    for (int i = nops - 1; i >= 0; i--) {
        uint32_t *s = &x[i & 3], v = *s, f = fr[i];
        if (v >= f << (32 - nbits[i])) {
            *--top = (uint16_t)v;
            v >>= 16;
        }
        *s = ((v / f) << nbits[i]) + v % f + st[i];
    }
    *wstart = top;
    memcpy(fin, x, 4 * sizeof *x);
}

static void make_streams(void)
{
    static uint32_t st[2 * N], fr[2 * N];
    static uint8_t nbits[2 * N];
    int no = 0;
    uint64_t pos = 0;
    for (int i = 0; i < N; i++) {
        uint32_t r = rnd() & 0xffff, s = 0;
        while (cum[s + 1] <= r)
            s++;
        uint64_t j = bucket(i % NCH, s);
        int nb = nb_of(j);
        syms[i] = s;
        bits[i] = rnd() & ((1u << nb) - 1);
        want[i] = first_point(j, -3) + bits[i];
        st[no] = cum[s], fr[no] = freq[s], nbits[no++] = 16;
        st[no] = bits[i], fr[no] = 1, nbits[no++] = (uint8_t)nb;
        for (int b = 0; b < nb; b++, pos++)
            if (bits[i] >> b & 1)
                raw[pos >> 3] |= (uint8_t)(1u << (pos & 7));
    }
    rans_encode(st, fr, nbits, no, words1, sizeof words1 / 2, &w1start, fin1);
    for (int i = 0; i < N; i++) /* table symbols only */
        st[i] = cum[syms[i]], fr[i] = freq[syms[i]], nbits[i] = 16;
    rans_encode(st, fr, nbits, N, words2, sizeof words2 / 2, &w2start, fin2);
}

#if defined(__x86_64__) && defined(__GNUC__)
#define RENORM(V, W)                                                                               \
    do {                                                                                           \
        uint32_t nv_ = ((V) << 16) | *(W);                                                         \
        const uint16_t *wn_ = (W) + 1;                                                             \
        __asm__("cmpl $0x10000, %[v]\n\tcmovb %[nv], %[v]\n\tcmovb %[wn], %[w]"                  \
                : [v] "+&r"(V), [w] "+r"(W)                                                        \
                : [nv] "r"(nv_), [wn] "r"(wn_)                                                     \
                : "cc");                                                                           \
    } while (0)
#else
#define RENORM(V, W)                                                                               \
    do {                                                                                           \
        uint32_t need_ = (V) < (1u << 16);                                                         \
        uint32_t nv_ = ((V) << 16) | *(W);                                                         \
        (V) = need_ ? nv_ : (V);                                                                   \
        (W) += need_;                                                                              \
    } while (0)
#endif

/* table symbol on *st (codec/stream.c rd_sym) */
static inline __attribute__((always_inline)) uint32_t tab_op(uint32_t *st, const uint16_t **w,
                                                             const uint64_t *L)
{
    uint32_t x = *st, slot = x & 0xffff;
    uint64_t e = L[slot >> 8];
    uint32_t k = (uint32_t)(e >> 53), start = (uint32_t)e & 0xffff;
    uint32_t b = (uint32_t)(e >> 16) & 0x1ffff, c2 = (uint32_t)(e >> 33) & 0x1ffff, end = b;
    if (__builtin_expect(slot >= c2, 0)) {
        k += 2;
        while (cum[k + 1] <= slot)
            k++;
        start = cum[k], end = cum[k + 1];
    } else {
        uint32_t up = slot >= b;
        start = up ? b : start, end = up ? c2 : end, k += up;
    }
    uint32_t v = (end - start) * (x >> 16) + slot - start;
    RENORM(v, *w);
    *st = v;
    return k;
}

static inline __attribute__((always_inline)) uint32_t bits_op(uint32_t *st, const uint16_t **w,
                                                              int nb)
{
    uint32_t x = *st, v = x >> nb;
    RENORM(v, *w);
    *st = v;
    return x & ((1u << nb) - 1);
}

#define ROT(s0, s1, s2, s3)                                                                        \
    do {                                                                                           \
        uint32_t t_ = s0;                                                                          \
        s0 = s1, s1 = s2, s2 = s3, s3 = t_;                                                        \
    } while (0)

/* mode 0 closed, 1 values, 2 values + checksum, 3 raw bits, 4 raw bits +
 * a checksum step per four scalars */
static inline __attribute__((always_inline)) uint64_t decode(int mode)
{
    const int raw_bits = mode >= 3;
    const uint32_t *f = raw_bits ? fin2 : fin1;
    uint32_t s0 = f[0], s1 = f[1], s2 = f[2], s3 = f[3];
    const uint16_t *w = raw_bits ? w2start : w1start;
    uint64_t h = 0x243f6a8885a308d3ull, pos = 0, pk = 0;
    for (int i = 0; i < N; i++) {
        const cls_t *c = &cls[i % NCH];
        uint32_t k = tab_op(&s0, &w, c->tab);
        ROT(s0, s1, s2, s3);
        int64_t key = c->base + (int64_t)k;
        uint32_t lo;
        int nb;
        if (mode == 0) {
            uint64_t j = (uint64_t)(key ^ (key >> 63));
            int kk = floor_log2(j | 1u), e = kk + c->G;
            nb = MBITS - kk;
            lo = ((uint32_t)(e + BIAS - 1) << MBITS) + (uint32_t)(j << (nb & 31));
            if (__builtin_expect(j - 1u >= (1u << MBITS) - 1u || (unsigned)(e + 126) > 253u, 0))
                return 0; /* the general path: not in this model */
        } else {
            if (__builtin_expect((uint64_t)(key + 128) >= 256u, 0))
                return 0;
            uint32_t ent = vals[key + 128];
            nb = (int)(ent >> 24), lo = ent & 0xffffff;
            if (__builtin_expect(nb == 0, 0))
                return 0;
        }
        uint32_t idx;
        if (raw_bits) {
            uint64_t word;
            memcpy(&word, raw + (pos >> 3), 8);
            idx = (uint32_t)(word >> (pos & 7)) & ((1u << nb) - 1);
            pos += (uint64_t)nb;
        } else {
            idx = bits_op(&s0, &w, nb);
            ROT(s0, s1, s2, s3);
        }
        uint32_t x = lo + idx;
        if (mode == 2) {
            h = (h + x + 1) * 0x9e3779b97f4a7c15ull;
            h ^= h >> 29;
        } else if (mode == 4) {
            pk = pk << 16 | x;
            if ((i & 3) == 3) {
                h = (h + pk + 1) * 0x9e3779b97f4a7c15ull;
                h ^= h >> 29;
            }
        }
        out[i] = x;
    }
    return h;
}

static __attribute__((noinline)) uint64_t run(int mode)
{
    switch (mode) {
    case 0: return decode(0);
    case 1: return decode(1);
    case 2: return decode(2);
    case 3: return decode(3);
    default: return decode(4);
    }
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 2000;
    if (reps < 1)
        reps = 1;
    setup();
    make_streams();
    static const char *names[] = {"closed", "values", "values+h", "rawbits", "raw+h4"};
    double best[5] = {1e30, 1e30, 1e30, 1e30, 1e30};
    volatile uint64_t sink = 0;
    for (int m = 0; m < 5; m++) {
        memset(out, 0, sizeof out);
        sink += run(m);
        if (memcmp(out, want, sizeof out) != 0) {
            fprintf(stderr, "bench_rans_floor: %s decodes wrongly\n", names[m]);
            return 1;
        }
    }
    for (int r = 0; r < reps; r++)
        for (int m = 0; m < 5; m++) {
            double t = now();
            sink += run(m);
            t = now() - t;
            if (t < best[m])
                best[m] = t;
        }
    printf("bench_rans_floor: bf16 BUCKET scalars, streams of %d, %d channel tables, best of %d "
           "alternated runs (M scalars/s, ratio to closed)\n",
           N, NCH, reps);
    for (int m = 0; m < 5; m++)
        printf("%-9s %7.1f  %.2fx\n", names[m], N / best[m] / 1e6, best[0] / best[m]);
    return (int)(sink & 0);
}
