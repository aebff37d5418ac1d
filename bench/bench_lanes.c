/* What a lane layout of the coded stream would decode at on real KV: the
 * stat level's scalars of a KV file, coded with the codec's own classes
 * and tables, once as version-1 streams (skv_encoder_put_rows, decoded
 * by skv_decoder_get_rows, as the delta coder codes stat) and once in a
 * model of a second stream version (bench/lanes.h): sixteen states, the
 * scalars of a row in groups of eight with scalar j of a group on state
 * j (+ 8 for odd groups, two vectors in flight); per group the table
 * symbols of its lanes, then the zero-bucket levels of its lanes at zero,
 * their renormalisation words in lane order; the plain bits in a raw bit
 * stream; a checksum lane per state. Both decoders' output is checked
 * against the input; they are timed alternately in one process (best of
 * REPS, thread CPU time) and printed in M scalars/s and cycles a scalar.
 * The lane streams are written by a plain reference encoder
 * (lane_encode). The codec's own stream version 2 (FORMAT.md), which is
 * that layout, is decoded with get_rows and encoded with put_rows in the
 * same rounds, and version 1's encoder (its bytes checked against the
 * first encode) is its baseline. (The model's AVX2 encoder, which the
 * codec's v2_put_run grew from, is gone: the codec's figures are the
 * ones that count.)
 *
 * The predictions are the stat level's kind: per (layer, k/v, channel)
 * mean mu and spread s, here the test data's own mean and standard
 * deviation (no calibration file needed; the classes, the share of the
 * buckets at zero and the bits come out close to stat's). The model
 * covers the common case only: a stream with an escape, a STEP class or a
 * bucket off the normal binades is left out of both measurements and
 * counted; atoms are not used.
 *
 * usage: bench_lanes TEST.safetensors [N_SEQ] [REPS]   (bf16 KV) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../codec/cfast.h"
#include "clock.h"
#include "../codec/lanes.h"
#include "skv_codec.h"
#include "skv_tensor.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(const char *what, int rc)
{
    fprintf(stderr, "bench_lanes: %s: %s (%s)\n", what, skv_strerror(rc), skv_error_detail());
    return 1;
}

#ifndef SKV_LANES_OK
int main(void)
{
    printf("bench_lanes: needs x86-64 with GCC or Clang (AVX2)\n");
    return 0;
}
#else

#define NST 16

/* A stream type: one (layer, k/v), its C channels' classes as the lane
 * decoder reads them */
typedef struct {
    float *mu, *s;
    skv_fcls *fc;
    int32_t *toff, *base, *boff, *g; /* per channel: index offset, base, bucket-values offset, G */
    uint32_t *nesc1;                 /* per channel: the escape symbol - 1 */
    uint64_t *e4;                    /* per channel: its table's skv_eop array << 4 | channel mod 8 */
    const uint32_t **cum;            /* per channel: the table's cumulative frequencies */
    int ok;
} stype;

/* One coded stream, both ways */
typedef struct {
    int type;
    const uint16_t *x; /* the input, T * C bf16 */
    uint8_t *v1, *v2; /* version 1 and version 2 (the codec's own lane layout) */
    size_t v1len, v2len;
    uint16_t *words; /* the lane version: words (from wstart), raw bits, final states */
    const uint16_t *wstart;
    uint8_t *raw;
    size_t nraw;
    uint32_t fin[NST];
} stream;

static size_t C, T, NTYPE;
static stype *types;
static uint32_t *IX0, *IX1, *BVT;

/* The plan of bf16 scalar x under class c, enc_one's common case: its
 * class symbol, whether it is in a bucket at zero (then its level t),
 * its plain bits and their count; 0 off the common case. */
static int sym_bits(uint32_t x, const skv_fcls *c, uint32_t *sym, int *zero, uint32_t *t,
                    uint32_t *plain, int *nb)
{
    const skv_lat *L = &SKV__LAT_BF16;
    uint32_t mag = x & 0x7fffu, E = mag >> 7;
    int n = L->bias + L->mbits + c->G - (int)E;
    if (E == 0 || E >= 255)
        return 0;
    int64_t kb;
    if (n >= 0 && n <= 7) {
        uint64_t j = (uint64_t)((mag & 0x7fu) | 0x80u) >> n;
        kb = (int64_t)j ^ -(int64_t)(x >> 15);
        *zero = 0, *plain = mag & ((1u << n) - 1u), *nb = n;
    } else if (n > 7 && n - 7 <= ZLEVELS) { /* the buckets at zero: level n - 8 */
        kb = -(int64_t)((x & 0x8000u) != 0);
        *zero = 1, *t = (uint32_t)(n - 8), *plain = mag & 0x7fu, *nb = 7;
    } else {
        return 0;
    }
    uint64_t sy = (uint64_t)(kb - c->base);
    if (sy >= c->nesc)
        return 0;
    *sym = (uint32_t)sy;
    return 1;
}

/* Whether o holds stream z's scalars */
static int same(const uint32_t *o, const stream *z)
{
    for (size_t j = 0; j < T * C; j++)
        if (o[j] != skv_load16_le((const uint8_t *)(z->x + j)))
            return 0;
    return 1;
}

/* Code stream z in the lane layout; 0 when a scalar is off the common case */
static int lane_encode(stream *z, const skv_cmodel *m)
{
    const stype *ty = &types[z->type];
    size_t n = T * C, no = 0;
    uint32_t *st = malloc(2 * n * sizeof *st), *fr = malloc(2 * n * sizeof *fr);
    uint8_t *ln = malloc(2 * n);
    z->raw = calloc(n + 16, 1);
    z->words = malloc((2 * n + 16) * sizeof *z->words);
    if (!st || !fr || !ln || !z->raw || !z->words)
        exit(fail("lanes", SKV_ERR_NOMEM));
    uint64_t pos = 0;
    int ok = 1;
    for (size_t g = 0; g < n / 8 && ok; g++) {
        uint32_t sy[8], tl[8], pl[8];
        int zr[8], nb[8];
        int l0 = (int)(g & 1) * 8;
        for (int j = 0; j < 8 && ok; j++) {
            size_t i = g * 8 + (size_t)j;
            ok = sym_bits(z->x[i], &ty->fc[i % C], &sy[j], &zr[j], &tl[j], &pl[j], &nb[j]);
        }
        for (int j = 0; j < 8 && ok; j++) {
            const skv_ftab *tb = ty->fc[(g * 8 + (size_t)j) % C].tab;
            st[no] = tb->cum[sy[j]], fr[no] = tb->cum[sy[j] + 1] - tb->cum[sy[j]], ln[no++] = (uint8_t)(l0 + j);
        }
        for (int j = 0; j < 8 && ok; j++)
            if (zr[j])
                st[no] = m->zero.cum[tl[j]], fr[no] = m->zero.cum[tl[j] + 1] - m->zero.cum[tl[j]],
                ln[no++] = (uint8_t)(l0 + j);
        for (int j = 0; j < 8 && ok; j++)
            for (int b = 0; b < nb[j]; b++, pos++)
                if (pl[j] >> b & 1)
                    z->raw[pos >> 3] |= (uint8_t)(1u << (pos & 7));
    }
    if (ok) { /* rANS in reverse, op i on state ln[i], 16-bit table symbols */
        uint32_t x[NST];
        for (int i = 0; i < NST; i++)
            x[i] = 1u << 16;
        uint16_t *top = z->words + 2 * n + 8; /* 8 words of slack after: the reader loads 8 */
        for (size_t i = no; i-- > 0;) {
            uint32_t *sp = &x[ln[i]], v = *sp, f = fr[i];
            if (v >= f << 16) {
                *--top = (uint16_t)v;
                v >>= 16;
            }
            *sp = ((v / f) << 16) + v % f + st[i];
        }
        z->wstart = top;
        memcpy(z->fin, x, sizeof x);
        z->nraw = (size_t)(pos + 7) / 8;
    }
    free(st);
    free(fr);
    free(ln);
    return ok;
}

/* Eight scalars of a group on the states *x: every lane's table symbol,
 * the levels of the lanes at zero, the plain bits. Nonzero: a lane off
 * the common case. */
LANES_INLINE int group(__m256i *x, const uint16_t **w, const uint8_t *raw, uint64_t *pos,
                       const stype *ty, size_t c0, uint32_t *o, __m256i *acc)
{
    const __m256i m16 = _mm256_set1_epi32(0xffff), one = _mm256_set1_epi32(1);
    const __m256i all = _mm256_set1_epi32(-1);
    __m256i slot = _mm256_and_si256(*x, m16);
    __m256i ix = _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(ty->toff + c0)), _mm256_srli_epi32(slot, 8));
    __m256i e0 = _mm256_i32gather_epi32((const int *)IX0, ix, 4);
    __m256i e1 = _mm256_i32gather_epi32((const int *)IX1, ix, 4);
    __m256i start = _mm256_and_si256(e0, m16), bm1 = _mm256_srli_epi32(e0, 16);
    __m256i c2 = _mm256_and_si256(e1, _mm256_set1_epi32(0x1ffff)), k = _mm256_srli_epi32(e1, 17);
    __m256i up = _mm256_cmpgt_epi32(slot, bm1);
    __m256i many = _mm256_cmpgt_epi32(slot, _mm256_sub_epi32(c2, one));
    __m256i b = _mm256_add_epi32(bm1, one);
    __m256i st = _mm256_blendv_epi8(start, b, up), en = _mm256_blendv_epi8(b, c2, up);
    k = _mm256_sub_epi32(k, up);
    int mb = _mm256_movemask_ps(_mm256_castsi256_ps(many));
    if (__builtin_expect(mb != 0, 0)) /* runs where several symbols start: search the lane's cum */
        lanes_search(slot, &st, &en, &k, mb, ty->cum + c0);
    __m256i nx = _mm256_add_epi32(_mm256_mullo_epi32(_mm256_sub_epi32(en, st), _mm256_srli_epi32(*x, 16)),
                                  _mm256_sub_epi32(slot, st));
    lanes_renorm(x, nx, all, w);
    /* bucket values: key = base + k, entry key + 128 of the lane's width */
    __m256i kp = _mm256_add_epi32(_mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(ty->base + c0)), k),
                                  _mm256_set1_epi32(BVT_K));
    __m256i bad = _mm256_cmpgt_epi32(_mm256_min_epu32(kp, _mm256_set1_epi32(2 * BVT_K)),
                                     _mm256_set1_epi32(2 * BVT_K - 1));
    kp = _mm256_and_si256(kp, _mm256_set1_epi32(2 * BVT_K - 1));
    __m256i ent = _mm256_i32gather_epi32(
        (const int *)BVT, _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(ty->boff + c0)), kp), 4);
    __m256i nb = _mm256_srli_epi32(ent, 24), first = _mm256_and_si256(ent, _mm256_set1_epi32(0xffffff));
    __m256i neg = _mm256_cmpeq_epi32(kp, _mm256_set1_epi32(BVT_K - 1));
    __m256i zm = _mm256_or_si256(_mm256_cmpeq_epi32(kp, _mm256_set1_epi32(BVT_K)), neg);
    bad = _mm256_or_si256(bad, _mm256_andnot_si256(zm, _mm256_cmpeq_epi32(nb, _mm256_setzero_si256())));
    if (_mm256_movemask_ps(_mm256_castsi256_ps(zm))) {
        __m256i t = lanes_zero(x, w, zm);
        /* binade 2^(G - t - 1): exponent field bias + G - t - 1, normal */
        __m256i E = _mm256_sub_epi32(_mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(ty->g + c0)),
                                                      _mm256_set1_epi32(126)), t);
        __m256i off = _mm256_or_si256(_mm256_cmpgt_epi32(t, _mm256_set1_epi32(ZLEVELS - 1)),
                                      _mm256_or_si256(_mm256_cmpgt_epi32(one, E),
                                                      _mm256_cmpgt_epi32(E, _mm256_set1_epi32(254))));
        bad = _mm256_or_si256(bad, _mm256_and_si256(zm, off));
        __m256i zf = _mm256_or_si256(_mm256_and_si256(neg, _mm256_set1_epi32(0x8000)), _mm256_slli_epi32(E, 7));
        first = _mm256_blendv_epi8(first, zf, zm);
        nb = _mm256_blendv_epi8(nb, _mm256_set1_epi32(7), zm);
    }
    lanes_bits(first, nb, raw, pos, o, acc);
    return _mm256_movemask_ps(_mm256_castsi256_ps(bad));
}

/* Decode stream z in the lane layout into o; the folded checksum lanes,
 * 0 when a lane left the common case */
LANES_TARGET static uint64_t lane_decode(const stream *z, uint32_t *o)
{
    const stype *ty = &types[z->type];
    __m256i x0 = _mm256_loadu_si256((const __m256i *)z->fin), x1 = _mm256_loadu_si256((const __m256i *)(z->fin + 8));
    __m256i a0 = _mm256_set1_epi32(0x243f6a88), a1 = a0;
    const uint16_t *w = z->wstart;
    uint64_t pos = 0;
    size_t n = T * C;
    for (size_t i = 0; i < n; i += 16)
        if (__builtin_expect(group(&x0, &w, z->raw, &pos, ty, i % C, o + i, &a0) |
                                 group(&x1, &w, z->raw, &pos, ty, (i + 8) % C, o + i + 8, &a1),
                             0))
            return 0;
    uint32_t a[16];
    _mm256_storeu_si256((__m256i *)a, a0);
    _mm256_storeu_si256((__m256i *)(a + 8), a1);
    uint64_t h = 0;
    for (int j = 0; j < 16; j++)
        h = (h + a[j] + 1) * 0x9e3779b97f4a7c15ull, h ^= h >> 29;
    return h | 1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_lanes TEST.safetensors [N_SEQ] [REPS]\n");
        return 2;
    }
    size_t want = argc > 2 ? (size_t)atol(argv[2]) : 8;
    int reps = argc > 3 ? atoi(argv[3]) : 10;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2")) {
        printf("bench_lanes: needs AVX2\n");
        return 0;
    }
    lanes_init();
    skv_st *stf = NULL;
    size_t n_seq = 0;
    int rc;
    if ((rc = skv_st_open(argv[1], &stf)) || (rc = skv_kvfile_count(stf, &n_seq)))
        return fail(argv[1], rc);
    n_seq = want < n_seq ? want : n_seq;
    if (n_seq == 0)
        return fail(argv[1], SKV_ERR_ARG);
    skv_kvseq *sq = calloc(n_seq, sizeof *sq);
    for (size_t i = 0; i < n_seq; i++)
        if ((rc = skv_kvfile_get(stf, i, &sq[i])))
            return fail("kv file", rc);
    if (sq[0].dtype != SKV_DT_BF16)
        return fail("bench_lanes takes bf16 KV", SKV_ERR_SHAPE);
    C = (size_t)sq[0].kv_heads * sq[0].head_dim, T = sq[0].T, NTYPE = 2 * (size_t)sq[0].layers;
    for (size_t i = 0; i < n_seq; i++)
        if (sq[i].T != T)
            return fail("sequences of different lengths", SKV_ERR_SHAPE);
    if (C % 8 || T * C % 16)
        return fail("rows must be a multiple of 8 scalars", SKV_ERR_SHAPE);
    skv_cmodel *m;
    if ((rc = skv_cmodel_create(SKV_DT_BF16, SKV_MIX_DEFAULT, NULL, &m)))
        return fail("cmodel", rc);
    /* the zero table as lanes_zero reads it */
    for (uint32_t t = 0; t <= ZLEVELS; t++) {
        uint32_t c = t == 0 ? 0 : t <= 16 ? 65528u - (1u << (16 - t)) : 65511u + t;
        if (m->zero.cum[t] != c)
            return fail("the zero table is not the one lanes.h decodes", SKV_ERR_CORRUPT);
    }
    /* the stream types: mu, s from the data; classes; the lane decoder's
     * tables (every distinct table's index, every width's bucket values) */
    types = calloc(NTYPE, sizeof *types);
    const skv_ftab **tabs = calloc(NTYPE * C, sizeof *tabs);
    int *gs = calloc(NTYPE * C, sizeof *gs);
    size_t ntab = 0, ng = 0;
    for (size_t y = 0; y < NTYPE; y++) {
        stype *ty = &types[y];
        ty->mu = calloc(C, sizeof(float)), ty->s = calloc(C, sizeof(float));
        ty->fc = calloc(C, sizeof *ty->fc);
        ty->toff = calloc(C, 4), ty->base = calloc(C, 4), ty->boff = calloc(C, 4), ty->g = calloc(C, 4);
        ty->cum = calloc(C, sizeof *ty->cum);
        ty->nesc1 = calloc(C, 4), ty->e4 = calloc(C, 8);
        ty->ok = 1;
        for (size_t c = 0; c < C; c++) {
            double s1 = 0, s2 = 0;
            for (size_t i = 0; i < n_seq; i++) {
                const uint8_t *p = (y & 1) ? sq[i].v : sq[i].k;
                for (size_t t = 0; t < T; t++) {
                    double v = skv__bf16_to_f32(skv_load16_le(p + 2 * (((y / 2) * T + t) * C + c)));
                    s1 += v, s2 += v * v;
                }
            }
            double mean = s1 / (double)(n_seq * T), var = s2 / (double)(n_seq * T) - mean * mean;
            ty->mu[c] = (float)mean;
            ty->s[c] = (float)sqrt(var > 1e-12 ? var : 1e-12);
            if (fclassify(m, &SKV__LAT_BF16, ty->mu[c], ty->s[c], &ty->fc[c]) || !ty->fc[c].bucket) {
                ty->ok = 0;
                continue;
            }
            size_t a = 0, q = 0;
            while (a < ntab && tabs[a] != ty->fc[c].tab)
                a++;
            if (a == ntab)
                tabs[ntab++] = ty->fc[c].tab;
            while (q < ng && gs[q] != ty->fc[c].G)
                q++;
            if (q == ng) {
                gs[ng++] = ty->fc[c].G;
                skv__build_bvt(m, ty->fc[c].G);
            }
            ty->toff[c] = (int32_t)(a * 256), ty->base[c] = (int32_t)ty->fc[c].base;
            ty->boff[c] = (int32_t)(q * 2 * BVT_K), ty->g[c] = ty->fc[c].G;
            ty->cum[c] = ty->fc[c].tab->cum;
            ty->nesc1[c] = ty->fc[c].nesc - 1;
            ty->e4[c] = (uint64_t)(uintptr_t)ty->fc[c].tab->enc << 4 | (c % 8);
        }
    }
    IX0 = malloc(ntab * 256 * 4), IX1 = malloc(ntab * 256 * 4), BVT = malloc(ng * 2 * BVT_K * 4 + 4);
    for (size_t a = 0; a < ntab; a++)
        for (int j = 0; j < 256; j++) {
            const skv_lut *e = &tabs[a]->lut[j >> (tabs[a]->lsh - 8)]; /* (a run of 256 slots lies in its table's run) */
            IX0[a * 256 + (size_t)j] = (uint32_t)e->start | (uint32_t)e->bm1 << 16;
            IX1[a * 256 + (size_t)j] = ((uint32_t)e->c2m1 + 1) | (uint32_t)e->k << 17;
        }
    for (size_t q = 0; q < ng; q++)
        memcpy(BVT + q * 2 * BVT_K, m->bvt[gs[q] + BVT_G0], 2 * BVT_K * 4);
    /* the streams, both ways */
    stream *zs = calloc(n_seq * NTYPE, sizeof *zs);
    size_t nz = 0, left = 0, n = T * C;
    skv_encoder *e;
    skv_decoder *d;
    skv_encoder *e2;
    if ((rc = skv_encoder_create(m, &e)) || (rc = skv_decoder_create(m, &d)) ||
        (rc = skv_encoder_create(m, &e2)))
        return fail("coder", rc);
    skv_encoder_set_ideal(e2, 0);
    skv_encoder_set_ideal(e, 0);
    uint8_t cid[16] = {0};
    double b1 = 0, b2 = 0, b3 = 0;
    uint32_t *xin = malloc(n * 4), *out = malloc(n * 4 + 64);
    for (size_t i = 0; i < n_seq; i++)
        for (size_t y = 0; y < NTYPE; y++) {
            stream *z = &zs[nz];
            z->type = (int)y;
            z->x = (const uint16_t *)(((y & 1) ? sq[i].v : sq[i].k) + 2 * (y / 2) * T * C);
            if (!types[y].ok || !lane_encode(z, m)) {
                left++;
                free(z->raw), free(z->words);
                continue;
            }
            for (size_t j = 0; j < n; j++)
                xin[j] = skv_load16_le((const uint8_t *)(z->x + j));
            skv_encoder_reset(e, cid);
            for (size_t t = 0; t < T && !rc; t++)
                rc = skv_encoder_put_n(e, xin + t * C, types[y].mu, types[y].s, C);
            z->v1 = malloc(skv_encoder_bound(e));
            if (rc || !z->v1 || (rc = skv_encoder_finish(e, z->v1, skv_encoder_bound(e), &z->v1len)))
                return fail("v1 encode", rc ? rc : SKV_ERR_NOMEM);
            b1 += 8.0 * (double)(z->v1len - SKV_STREAM_HEADER - 16);
            if ((rc = skv_encoder_set_version(e2, 2)))
                return fail("v2", rc);
            skv_encoder_reset(e2, cid);
            for (size_t t = 0; t < T && !rc; t++)
                rc = skv_encoder_put_n(e2, xin + t * C, types[y].mu, types[y].s, C);
            z->v2 = malloc(skv_encoder_bound(e2));
            if (rc || !z->v2 || (rc = skv_encoder_finish(e2, z->v2, skv_encoder_bound(e2), &z->v2len)))
                return fail("v2 encode", rc ? rc : SKV_ERR_NOMEM);
            b3 += 8.0 * (double)(z->v2len - SKV_STREAM_HEADER - 64);
            b2 += 16.0 * (double)(z->words + 2 * n + 8 - z->wstart) + 8.0 * (double)z->nraw;
            nz++;
        }
    if (!nz)
        return fail("no stream in the common case", SKV_ERR_SHAPE);
    /* per round and stream: version 1's decoder, the lanes', version 1's
     * encoder (its bytes checked against the first encode), then version
     * 2's decoder and encoder; the decoders' output checked in the first
     * round, which is not timed */
    uint8_t *v1buf = malloc(skv_encoder_bound(e) + 4 * n + 1024);
    if (!v1buf)
        return fail("buffers", SKV_ERR_NOMEM);
    /* decode v1, lanes; encode v1; decode, encode version 2 */
    enum { DEC1, DECL, ENC1, DEC2, ENC2, NT };
    double best[NT] = {1e30, 1e30, 1e30, 1e30, 1e30};
    for (int r = 0; r <= reps; r++) {
        double t[NT] = {0, 0, 0, 0, 0}, t0;
        for (size_t q = 0; q < nz; q++) {
            stream *z = &zs[q];
            const stype *ty = &types[z->type];
            t0 = now();
            size_t done = 0;
            rc = skv_decoder_begin(d, z->v1, z->v1len, NULL);
            if (!rc)
                rc = skv_decoder_get_rows(d, ty->mu, ty->s, C, T, UINT32_MAX, out, &done);
            if (!rc)
                rc = skv_decoder_end(d);
            t[DEC1] += now() - t0;
            if (rc)
                return fail("v1 decode", rc);
            if (r == 0 && !same(out, z))
                return fail("v1 round trip", SKV_ERR_CORRUPT);
            t0 = now();
            uint64_t h = lane_decode(z, out);
            t[DECL] += now() - t0;
            if (!h)
                return fail("a lane left the common case", SKV_ERR_CORRUPT);
            if (r == 0 && !same(out, z))
                return fail("lane round trip", SKV_ERR_CORRUPT);
            for (size_t j = 0; j < n; j++)
                xin[j] = skv_load16_le((const uint8_t *)(z->x + j));
            t0 = now();
            skv_encoder_reset(e, cid);
            rc = skv_encoder_put_rows(e, xin, ty->mu, ty->s, C, T);
            size_t len = 0;
            if (!rc)
                rc = skv_encoder_finish(e, v1buf, skv_encoder_bound(e) + 4 * n + 1024, &len);
            t[ENC1] += now() - t0;
            if (rc || len != z->v1len || memcmp(v1buf, z->v1, len) != 0)
                return fail("v1 encode again", rc ? rc : SKV_ERR_CORRUPT);
            t0 = now();
            rc = skv_decoder_begin(d, z->v2, z->v2len, NULL);
            if (!rc)
                rc = skv_decoder_get_rows(d, ty->mu, ty->s, C, T, UINT32_MAX, out, &done);
            if (!rc)
                rc = skv_decoder_end(d);
            t[DEC2] += now() - t0;
            if (rc)
                return fail("v2 decode", rc);
            if (r == 0 && !same(out, z))
                return fail("v2 round trip", SKV_ERR_CORRUPT);
            t0 = now();
            skv_encoder_reset(e2, cid);
            rc = skv_encoder_put_rows(e2, xin, ty->mu, ty->s, C, T);
            if (!rc)
                rc = skv_encoder_finish(e2, v1buf, skv_encoder_bound(e) + 4 * n + 1024, &len);
            t[ENC2] += now() - t0;
            if (rc || len != z->v2len || memcmp(v1buf, z->v2, len) != 0)
                return fail("v2 encode again", rc ? rc : SKV_ERR_CORRUPT);
        }
        for (int k = 0; k < NT && r > 0; k++)
            best[k] = t[k] < best[k] ? t[k] : best[k];
    }
    free(v1buf);
    double tot = (double)(nz * n), ghz = skv_bench_clock_ghz();
    printf("bench_lanes: %zu streams of %zu bf16 scalars (rows of %zu; %zu left out: off the common "
           "case), best of %d alternated rounds\n",
           nz, n, C, left, reps);
    printf("  %-40s %.3f bits a scalar (payload)\n", "version 1", b1 / tot);
    printf("  %-40s %.3f bits a scalar (payload)\n", "lanes (16 states, words in lane order)", b2 / tot);
    printf("  decode: version 1 (get_rows) %6.1f M/s, lanes %6.1f M/s, %.2fx\n", tot / best[DEC1] / 1e6,
           tot / best[DECL] / 1e6, best[DEC1] / best[DECL]);
    printf("  the codec's version 2 (%.3f bits a scalar): decode %6.1f M/s (%.2fx version 1), encode %6.1f M/s "
           "(%.2fx version 1's %.1f)\n",
           b3 / tot, tot / best[DEC2] / 1e6, best[DEC1] / best[DEC2], tot / best[ENC2] / 1e6,
           best[ENC1] / best[ENC2], tot / best[ENC1] / 1e6);
    if (ghz > 0)
        printf("  cycles a scalar at the core's %.2f GHz: decode %.1f (version 1), %.1f (lanes), %.1f (version 2); "
               "encode %.1f (version 1), %.1f (version 2) (150 M/s is %.1f, 100 M/s %.1f)\n",
               ghz, ghz * 1e9 * best[DEC1] / tot, ghz * 1e9 * best[DECL] / tot, ghz * 1e9 * best[DEC2] / tot,
               ghz * 1e9 * best[ENC1] / tot, ghz * 1e9 * best[ENC2] / tot, ghz * 1e3 / 150, ghz * 10);
    for (size_t q = 0; q < nz; q++)
        free(zs[q].v1), free(zs[q].v2), free(zs[q].raw), free(zs[q].words);
    for (size_t y = 0; y < NTYPE; y++) {
        stype *ty = &types[y];
        free(ty->mu), free(ty->s), free(ty->fc), free(ty->toff), free(ty->base), free(ty->boff);
        free(ty->g), free(ty->cum), free(ty->nesc1), free(ty->e4);
    }
    free(zs), free(types), free(tabs), free(gs), free(IX0), free(IX1), free(BVT), free(xin), free(out);
    free(sq);
    skv_encoder_free(e);
    skv_encoder_free(e2);
    skv_decoder_free(d);
    skv_cmodel_free(m);
    skv_st_free(stf);
    return 0;
}
#endif
