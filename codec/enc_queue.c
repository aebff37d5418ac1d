/* The operation queue: each scalar's rANS operations queued (table
 * symbols and plain bits, skv__plan's plan as enc_one computes it); and
 * the serial layout's finish (stream version 1), which codes the queue
 * last to first on four interleaved states. The grouped layout's encoder
 * queues its odd groups through here too (enc_groups.c sorts them). */
#include <math.h>

#include "classify_avx2.h"
#include "stream_int.h"

/* A queued operation is one word, the address of the skv_eop that codes it
 * (codec_int.h; freq < 2^16: every table has at least two symbols of
 * frequency >= 1): a table symbol's entry, or for nb <= PLAIN_TAB_BITS
 * plain bits of value v the shared entry skv__plain_tab[2^nb + v]. Wider plain
 * bits (f32 only) are 1 | nb << 1 | v << 8 (entries are aligned, so bit 0
 * tells them apart), coded as the template plain_ops[nb] with v added to
 * its bias. Eight bytes an operation: a stream's queue stays half the
 * size (and in cache) that of the entries themselves. */
_Static_assert(_Alignof(skv_eop) >= 2, "bit 0 of an entry's address is clear");
skv_eop skv__plain_tab[2u << PLAIN_TAB_BITS]; /* 32 KiB, filled once */
static pthread_once_t plain_once = PTHREAD_ONCE_INIT;

static void plain_fill(void)
{
    for (int nb = 1; nb <= PLAIN_TAB_BITS; nb++)
        for (uint32_t v = 0; v < 1u << nb; v++)
            skv__plain_tab[(1u << nb) + v] = skv__eop(v, 1, nb);
}

void skv__plain_init(void)
{
    pthread_once(&plain_once, plain_fill);
}

#define PLAIN_OP(nb) {~0ull, (1u << (nb)) - 1u, 0x10000u >> (nb), (1u << (nb)) - 1u}
static const skv_eop plain_ops[17] = {
    {0, 0, 0, 0}, PLAIN_OP(1),  PLAIN_OP(2),  PLAIN_OP(3),  PLAIN_OP(4),  PLAIN_OP(5),
    PLAIN_OP(6),  PLAIN_OP(7),  PLAIN_OP(8),  PLAIN_OP(9),  PLAIN_OP(10), PLAIN_OP(11),
    PLAIN_OP(12), PLAIN_OP(13), PLAIN_OP(14), PLAIN_OP(15), PLAIN_OP(16),
};

/* each width's row of skv__plain_tab and mask, as constants (no shifts in the
 * hot loop, whose registers are all taken) */
#define PLAIN_ROW(nb) {skv__plain_tab + (1u << (nb)), (1u << (nb)) - 1u}
static const struct {
    const skv_eop *row;
    uint32_t mask;
} plain_rows[17] = {
    {skv__plain_tab, 0},  PLAIN_ROW(1),         PLAIN_ROW(2),         PLAIN_ROW(3),
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
        /* skv__plain_tab[2^nb + (mag mod 2^nb)] */
        skv_v8u p2 = (skv_v8u)_mm256_sllv_epi32((__m256i)V8(1), (__m256i)nb);
        __m256i pidx = (__m256i)(p2 + ((skv_v8u)mag & (p2 - 1u)));
        const __m256i ptab = _mm256_set1_epi64x((long long)(uintptr_t)skv__plain_tab);
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
                                 (L->dt != SEQKV_DT_F8E4M3 || (mag | ((1u << nb) - 1u)) < L->inf_mag),
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
                                        (L->dt != SEQKV_DT_F8E4M3 || E < (L->inf_mag >> L->mbits)),
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
    if (L->dt == SEQKV_DT_BF16 && n - i >= 8 && !rc && cls_simd() >= 2) {
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

/* n scalars as version 1 queues them, with the classes of their row
 * given (or NULL: found here) */
int skv__enc_queue_put(skv_encoder *e, const uint32_t *x, const float *mu, const float *s, size_t n,
                    const skv_fcls *given)
{
    if (e->atoms) {
        switch (e->m->lat.dt) {
        case SEQKV_DT_BF16: return put_n_atoms_impl(e, &SKV__LAT_BF16, x, mu, s, n, given);
        case SEQKV_DT_F16: return put_n_atoms_impl(e, &SKV__LAT_F16, x, mu, s, n, given);
        case SEQKV_DT_F8E4M3: return put_n_atoms_impl(e, &SKV__LAT_F8, x, mu, s, n, given);
        default: return put_n_atoms_impl(e, &SKV__LAT_F32, x, mu, s, n, given);
        }
    }
    switch (e->m->lat.dt) {
    case SEQKV_DT_BF16: return put_n_impl(e, &SKV__LAT_BF16, x, mu, s, n, given);
    case SEQKV_DT_F16: return put_n_impl(e, &SKV__LAT_F16, x, mu, s, n, given);
    case SEQKV_DT_F8E4M3: return put_n_impl(e, &SKV__LAT_F8, x, mu, s, n, given);
    default: return put_n_impl(e, &SKV__LAT_F32, x, mu, s, n, given);
    }
}

/* one queued operation coded on state *s (enc_eop) */
SKV_ALWAYS_INLINE void enc_op(uint32_t *s, uint64_t op, uint16_t *top, ptrdiff_t *nn)
{
    if (__builtin_expect(op & 1u, 0)) /* wide plain bits: f32 only */
        enc_eop(s, &plain_ops[(op >> 1) & 31u], (uint32_t)(op >> 8), top, nn);
    else
        enc_eop(s, (const skv_eop *)(uintptr_t)op, 0, top, nn);
}

/* The queue coded last to first, op i on state i mod 4, and the stream
 * written (FORMAT.md, version 1) */
int skv__enc_serial_finish(skv_encoder *e, uint8_t *dst, size_t cap, size_t *len)
{
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
