/* libFuzzer target for the coded-stream decoder (and a round trip through
 * the encoder).
 *
 * Input: one selector byte, then a stream. Selector bits 0-1 pick the dtype
 * (bf16, f16, f8e4m3, f32), bits 2-3 the model (0: SKV_MIX_DEFAULT with a
 * uniform p_emp; 1: the golden histogram model of tests/golden/codec;
 * 2: w1 = 0, w2 = 1; 3: w1 = w2 = 30000), bits 4-7 how each scalar's
 * (mu, s) is derived: 0 is the golden input formula of
 * tests/golden/codec/make_golden.c (so the golden streams, prefixed with
 * their selector byte, decode to the end), 1-15 a hash of the scalar index,
 * the selector and stream bytes 32..35 (the calib_id, free to mutate), with
 * mu and s drawn from zero, NaN/inf, any bit pattern and dtype-scale values
 * so the decoder meets STEP, BUCKET and escape classes alike.
 *
 * The stream is decoded with skv_decoder_begin/get (up to min(n, 2^16)
 * scalars)/end, and again with skv_decoder_get_n in batches (same scalars,
 * same first error, same end), and with the first scalars' (mu, s) as a
 * row that repeats, row by row with get_n and a few rows at a time with
 * skv_decoder_get_rows under a limit (same scalars, same first error, a
 * stop right after each row over the limit); every decoded scalar must
 * fit the dtype width. A version 2 stream without atoms is also decoded
 * as both streams of skv_decoder_get_n2, the second under other (mu, s)
 * (check_pair). Inputs of at most 4 KiB are also taken as raw
 * little-endian scalars of the dtype and encoded twice, with
 * skv_encoder_put and in batches with skv_encoder_put_n (identical bytes,
 * within skv_encoder_bound) and decoded: the scalars must come back
 * exactly.
 * Atoms: a stream whose model id is that of the model with the fixed atoms
 * of atoms_for() (3 channels: none, the dtype's special values, 16 low bit
 * patterns) is decoded with them; raw inputs of odd length are encoded
 * with them. Any violation aborts. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec_tune.h"
#include "skv_codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- the golden input formula (a copy of tests/golden/codec/make_golden.c) */
#include "../golden/codec/golden_inputs.h"
#include "fuzz_check.h"

/* ---- end of the golden input formula -------------------------------------- */

/* (mu, s) of scalar i: see the file comment. */
static void fuzz_param(int di, unsigned mode, uint32_t key, uint32_t i, float *mu, float *s)
{
    if (mode == 0) {
        uint32_t x;
        gold_input(di, i, &x, mu, s);
        return;
    }
    uint32_t h1 = gold_hash(i * 0x9e3779b9u ^ key), h2 = gold_hash(h1 + mode);
    int e = GOLD_EMIN[di] + (int)(h2 % (uint32_t)(GOLD_EMAX[di] - GOLD_EMIN[di] + 1));
    float scale = ldexpf(1.0f + (float)((h2 >> 8) & 255) / 256.0f, e);
    switch (h1 & 15) {
    case 0: *mu = 0.0f; break;
    case 1: *mu = (h2 & 1) ? NAN : (h2 & 2) ? -INFINITY : INFINITY; break;
    case 2: *mu = skv_bits_f32(h2); break;                      /* any pattern */
    case 3: *mu = scale * 1e12f * ((h2 >> 31) ? -1.0f : 1.0f); break; /* far out */
    default: *mu = (h2 >> 31) ? -scale : scale; break;
    }
    uint32_t h3 = gold_hash(h2 ^ 0x5bd1e995u);
    switch ((h1 >> 4) & 15) {
    case 0: *s = skv_bits_f32(h3); break; /* any pattern, NaN and negative too */
    case 1: *s = 0.0f; break;
    case 2: *s = ldexpf(1.0f, -(int)(h3 % 150)); break;
    default: /* relative to the scale, shifted by the mode: STEP for small
              * s, BUCKET for large */
        *s = ldexpf(1.0f + (float)(h3 & 7) / 8.0f, e + (int)((h3 >> 3) % 41) - 30 + (int)mode - 8);
        break;
    }
}

static skv_cmodel *g_models[4][4];

/* Build the BUCKET tables of bf16 model m (with all of them built the
 * decoder's AVX2 pack takes its shortcuts: an all-BUCKET group without
 * their lookup, a group packed again by its phases): values at scales of
 * every width class, mu at every phase, coded once */
static void build_bucket_tables(skv_cmodel *m)
{
    enum { N = 8 * 4096 };
    static uint32_t x[N];
    static float mu[N], s[N];
    uint32_t h = 5150;
    for (int k = 0; k < N; k++) {
        h = h * 1664525u + 1013904223u;
        s[k] = ldexpf(1.0f + (float)(k % 8) / 8.0f + 1.0f / 16.0f, -4 - (int)(h >> 30));
        mu[k] = ((float)(h >> 8 & 0xffff) / 65536.0f - 0.5f) * 4.0f;
        float v = mu[k] + s[k] * ((float)(h & 0xff) / 64.0f - 2.0f);
        uint32_t b;
        memcpy(&b, &v, sizeof b);
        x[k] = (b + 0x7fffu + (b >> 16 & 1u)) >> 16; /* bf16, nearest even */
    }
    skv_encoder *e = NULL;
    CHECK(skv_encoder_create(m, &e) == 0 && skv_encoder_set_version(e, 2) == 0);
    CHECK(skv_encoder_put_n(e, x, mu, s, N) == 0);
    size_t cap = skv_encoder_bound(e), len;
    uint8_t *buf = malloc(cap);
    CHECK(buf && skv_encoder_finish(e, buf, cap, &len) == 0);
    free(buf);
    skv_encoder_free(e);
}

static skv_cmodel *model_for(int di, int mi)
{
    if (g_models[di][mi])
        return g_models[di][mi];
    static const skv_mix mixes[4] = {{1966u, 1311u}, {3000u, 5000u}, {0u, 1u}, {30000u, 30000u}};
    uint32_t hist[256];
    for (uint32_t b = 0; b < 256; b++)
        hist[b] = ((37u * b) % 256u) * 16u; /* the golden histogram */
    CHECK(skv_cmodel_create(GOLD_DT[di], mixes[mi], mi == 1 ? hist : NULL, &g_models[di][mi]) == 0);
    if (GOLD_DT[di] == SEQKV_DT_BF16)
        build_bucket_tables(g_models[di][mi]);
    return g_models[di][mi];
}

static skv_atoms *g_atoms[4];

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static const skv_atoms *atoms_for(int di)
{
    if (g_atoms[di])
        return g_atoms[di];
    uint32_t k[3] = {0, 0, 16}, lam[3] = {0, 30000u, 50000u}, vals[8 + 16], cnts[8 + 16];
    uint32_t sp[8];
    memcpy(sp, GOLD_SPECIAL[di], sizeof sp);
    qsort(sp, 8, sizeof *sp, cmp_u32);
    for (int i = 0; i < 8; i++)
        if (k[1] == 0 || sp[i] != vals[k[1] - 1])
            vals[k[1]] = sp[i], cnts[k[1]] = 1u + (uint32_t)i, k[1]++;
    for (uint32_t j = 0; j < 16; j++)
        vals[k[1] + j] = 0x10u + j, cnts[k[1] + j] = 1u + j % 5u;
    CHECK(skv_atoms_create(GOLD_DT[di], 3, k, lam, vals, cnts, &g_atoms[di]) == 0);
    return g_atoms[di];
}

static uint32_t width_mask(seqkv_dtype dt)
{
    return dt == SEQKV_DT_F32 ? 0xffffffffu : dt == SEQKV_DT_F8E4M3 ? 0xffu : 0xffffu;
}

/* Rows: the first w scalars' (mu, s) as one row that repeats. Decoded
 * with skv_decoder_get_n row by row, then with skv_decoder_get_rows a few
 * rows at a time under a limit: the same scalars and the same first
 * error, and get_rows stops right after each row over its limit. */
static void decode_rows(skv_decoder *d, const skv_atoms *A, const uint8_t *src, size_t len, int di,
                        const float *mus, const float *ss, uint32_t lim, uint32_t key, int v2)
{
    /* rows of 1..40, and a quarter of the time 257..320: longer than the
     * row cache's first memory, so that it grows (version 2: rounded up
     * to whole groups, which get_rows runs across) */
    uint32_t w = (key >> 6) % 4 == 0 ? 257 + key % 64 : 1 + key % 40;
    if (v2)
        w = (w + 7) & ~7u;
    const uint32_t rows = lim / w, mag = width_mask(GOLD_DT[di]) >> 1;
    if (rows == 0)
        return;
    uint32_t *zs = malloc((size_t)rows * w * sizeof *zs), *ys = malloc((size_t)rows * w * sizeof *ys);
    CHECK(zs && ys);
    CHECK(skv_decoder_begin_atoms(d, src, len, A, NULL) == 0);
    uint32_t good = 0;
    int zrc = 0;
    for (uint32_t r = 0; r < rows && !zrc; r++) {
        zrc = skv_decoder_get_n(d, mus, ss, zs + (size_t)r * w, w);
        CHECK(zrc == 0 || zrc == SKV_ERR_CORRUPT);
        good += zrc == 0;
    }
    const uint32_t big = key & 1 ? UINT32_MAX : (key >> 4) & mag;
    CHECK(skv_decoder_begin_atoms(d, src, len, A, NULL) == 0);
    uint32_t at = 0;
    int yrc = 0;
    while (at < rows) {
        size_t done = 0, ask = 1 + (at * 3u + key) % 9u;
        if (ask > rows - at)
            ask = rows - at;
        yrc = skv_decoder_get_rows(d, mus, ss, w, ask, big, ys + (size_t)at * w, &done);
        CHECK(done <= ask);
        if (yrc) {
            CHECK(yrc == SKV_ERR_CORRUPT && zrc == SKV_ERR_CORRUPT && at + done == good);
            at += (uint32_t)done;
            break;
        }
        CHECK(done >= 1);
        for (size_t k = 0; k < done; k++) {
            int over = 0;
            for (uint32_t i = 0; i < w; i++)
                over |= (ys[(at + k) * w + i] & mag) > big;
            CHECK(!over || k + 1 == done);     /* it stops right after a row over */
            CHECK(over || k + 1 < done || done == ask); /* and only there */
        }
        at += (uint32_t)done;
    }
    if (!yrc)
        CHECK(zrc == 0 && at == rows);
    for (size_t k = 0; k < (size_t)at * w; k++)
        CHECK(ys[k] == zs[k]);
    free(zs);
    free(ys);
}

/* Decode again (begun on d) with skv_decoder_get_n in batches of unit x
 * (1..spread) scalars into ys: it must agree with xs on every scalar
 * before bad_at (the first failing scalar or group, or lim), fail in the
 * batch that holds bad_at, and end as end_rc (-1: not known). */
static void check_batches(skv_decoder *d, const float *mus, const float *ss, const uint32_t *xs, uint32_t *ys,
                          uint32_t lim, uint32_t bad_at, int end_rc, uint32_t key, uint32_t unit,
                          uint32_t spread)
{
    int brc = 0;
    for (uint32_t j = 0; j < lim;) {
        uint32_t b = unit * (1 + (j * 7u + key) % spread);
        if (b > lim - j)
            b = lim - j;
        if ((brc = skv_decoder_get_n(d, mus + j, ss + j, ys + j, b)) != 0) {
            CHECK(brc == SKV_ERR_CORRUPT && bad_at >= j && bad_at < j + b);
            for (uint32_t k = j; k < bad_at; k++)
                CHECK(ys[k] == xs[k]);
            return;
        }
        j += b;
    }
    CHECK(bad_at == lim);
    for (uint32_t k = 0; k < lim; k++)
        CHECK(ys[k] == xs[k]);
    if (end_rc != -1)
        CHECK(skv_decoder_end(d) == end_rc);
}

/* The stream (no atoms) as both streams of skv_decoder_get_n2, the second
 * under other (mu, s) so that the two fail at other places, its s one row
 * that repeats (as ctx's, whose groups the pack then takes by their
 * phases when they were all BUCKET the row before): row by row
 * (rows of 8..32 scalars), each must give what it gives alone (xs up to
 * bad_at; the other decoded alone here), and a failure must lie in the
 * row of the first failure of either. */
static void check_pair(skv_cmodel *m, int di, unsigned mode, uint32_t key, const uint8_t *src, size_t len,
                       const float *mus, const float *ss, const uint32_t *xs, uint32_t lim, uint32_t bad_at)
{
    const uint32_t w = 8 * (1 + key % 4), rows = lim / w;
    if (rows == 0)
        return;
    float *mu2 = malloc((size_t)lim * sizeof *mu2), *s2 = malloc((size_t)lim * sizeof *s2);
    uint32_t *x2 = malloc((size_t)lim * sizeof *x2), *ya = malloc((size_t)lim * sizeof *ya),
             *yb = malloc((size_t)lim * sizeof *yb);
    CHECK(mu2 && s2 && x2 && ya && yb);
    for (uint32_t i = 0; i < lim; i++) {
        float unused;
        fuzz_param(di, mode ? mode : 1, key ^ 0x5bd1e995u, i, &mu2[i], &unused);  /* mu: the scalar's */
        fuzz_param(di, mode ? mode : 1, key ^ 0x5bd1e995u, i % w, &unused, &s2[i]); /* s: the first row's */
        if (key & 0x10000u) { /* or ctx-like: s wide, mu of moderate size (BUCKET classes) */
            uint32_t h = (i + 1) * 0x9e3779b1u ^ key;
            h ^= h >> 15, h *= 0x85ebca6bu, h ^= h >> 13;
            s2[i] = 16.0f * (float)(1 + (i % w) % 15);
            mu2[i] = (float)((int)(h % 4001u) - 2000) / 64.0f;
        }
    }
    skv_decoder *d[2] = {NULL, NULL};
    CHECK(skv_decoder_create(m, &d[0]) == 0 && skv_decoder_create(m, &d[1]) == 0);
    skv_decoder_set_row_cache(d[0], 0);
    skv_decoder_set_row_cache(d[1], 0);
    /* the second alone, in groups */
    CHECK(skv_decoder_begin(d[1], src, len, NULL) == 0);
    uint32_t bad2 = rows * w;
    for (uint32_t i = 0; i < rows * w; i += 8)
        if (skv_decoder_get_n(d[1], mu2 + i, s2 + i, x2 + i, 8) != 0) {
            bad2 = i;
            break;
        }
    CHECK(skv_decoder_begin(d[0], src, len, NULL) == 0 && skv_decoder_begin(d[1], src, len, NULL) == 0);
    const uint32_t first = bad_at < bad2 ? bad_at : bad2;
    for (uint32_t r = 0; r < rows; r++) {
        const float *const mu[2] = {mus + r * w, mu2 + r * w}, *const sv[2] = {ss + r * w, s2 + r * w};
        uint32_t *const x[2] = {ya + r * w, yb + r * w};
        int rc = skv_decoder_get_n2(d, mu, sv, x, w);
        if (rc) {
            CHECK(rc == SKV_ERR_CORRUPT && first >= r * w && first < (r + 1) * w);
            break;
        }
        CHECK(first >= (r + 1) * w);
        for (uint32_t k = r * w; k < (r + 1) * w; k++)
            CHECK(ya[k] == xs[k] && yb[k] == x2[k]);
    }
    skv_decoder_free(d[0]);
    skv_decoder_free(d[1]);
    free(mu2);
    free(s2);
    free(x2);
    free(ya);
    free(yb);
}

/* A version 2 stream (begun on d): in groups of 8, then in batches of
 * 8..72 scalars; the two must agree on every scalar before the group of
 * the first error, on that error and on skv_decoder_end; a call that
 * does not take whole groups is refused without decoding. */
static void decode_v2(skv_cmodel *m, skv_decoder *d, const skv_atoms *A, int di, unsigned mode, uint32_t key,
                      const uint8_t *src, size_t len, const skv_stream_info *info)
{
    CHECK(info->dtype == GOLD_DT[di]);
    CHECK((uint64_t)SKV_STREAM_HEADER + info->payload <= len);
    uint32_t lim = info->n < (1u << 16) ? info->n : (1u << 16);
    uint32_t *xs = malloc((lim + 1) * sizeof *xs), *ys = malloc((lim + 1) * sizeof *ys);
    float *mus = malloc((lim + 1) * sizeof *mus), *ss = malloc((lim + 1) * sizeof *ss);
    CHECK(xs && ys && mus && ss);
    for (uint32_t i = 0; i < lim; i++)
        fuzz_param(di, mode, key, i, &mus[i], &ss[i]);
    if (lim > 1) {
        uint32_t x[2];
        CHECK(skv_decoder_get_n(d, mus, ss, x, 1 + (lim > 8)) == SKV_ERR_ARG);
    }
    int rc = 0, end_rc = -1;
    uint32_t i = 0;
    for (; i < lim; i += 8) {
        uint32_t b = lim - i < 8 ? lim - i : 8;
        if ((rc = skv_decoder_get_n(d, mus + i, ss + i, xs + i, b)) != 0) {
            CHECK(rc == SKV_ERR_CORRUPT);
            break;
        }
        for (uint32_t k = i; k < i + b; k++)
            CHECK((xs[k] & ~width_mask(GOLD_DT[di])) == 0);
    }
    uint32_t bad_at = rc ? i : lim; /* the first failing group's first scalar, or lim */
    if (rc == 0 && lim == info->n) {
        end_rc = skv_decoder_end(d);
        CHECK(end_rc == 0 || end_rc == SKV_ERR_CORRUPT);
    }
    CHECK(skv_decoder_begin_atoms(d, src, len, A, NULL) == 0);
    check_batches(d, mus, ss, xs, ys, lim, bad_at, end_rc, key, 8, 9);
    decode_rows(d, A, src, len, di, mus, ss, lim, key, 1);
    if (!A)
        check_pair(m, di, mode, key, src, len, mus, ss, xs, lim, bad_at);
    free(xs);
    free(ys);
    free(mus);
    free(ss);
}

/* Decode src one scalar at a time, then again with skv_decoder_get_n in
 * batches of 1..67 scalars: the two must agree on every scalar before the
 * first error, on that error and on skv_decoder_end. Version 2 streams:
 * decode_v2. */
static void decode_input(skv_cmodel *m, int di, unsigned mode, uint32_t key, const uint8_t *src,
                         size_t len)
{
    skv_decoder *d = NULL;
    CHECK(skv_decoder_create(m, &d) == 0);
    skv_stream_info info;
    const skv_atoms *A = NULL;
    if (skv_stream_info_read(src, len, &info) == 0 && info.dtype == GOLD_DT[di] &&
        info.cmodel_id == skv_stream_model_id(m, atoms_for(di)))
        A = atoms_for(di);
    int rc = skv_decoder_begin_atoms(d, src, len, A, &info);
    if (rc == 0 && info.version == 2) {
        decode_v2(m, d, A, di, mode, key, src, len, &info);
    } else if (rc == 0) {
        CHECK(info.dtype == GOLD_DT[di]);
        CHECK((uint64_t)SKV_STREAM_HEADER + info.payload <= len);
        CHECK(info.n <= SKV_STREAM_MAX_SCALARS);
        uint32_t lim = info.n < (1u << 16) ? info.n : (1u << 16);
        uint32_t *xs = malloc((lim + 1) * sizeof *xs);
        float *mus = malloc((lim + 1) * sizeof *mus), *ss = malloc((lim + 1) * sizeof *ss);
        CHECK(xs && mus && ss);
        uint32_t i = 0;
        for (; i < lim; i++) {
            float mu, s;
            uint32_t x = 0;
            fuzz_param(di, mode, key, i, &mu, &s);
            mus[i] = mu, ss[i] = s;
            rc = skv_decoder_get(d, mu, s, &x);
            if (rc) {
                CHECK(rc == SKV_ERR_CORRUPT);
                break;
            }
            CHECK((x & ~width_mask(GOLD_DT[di])) == 0);
            xs[i] = x;
        }
        uint32_t bad_at = i; /* the first failing scalar, or lim */
        int end_rc = -1;
        if (rc == 0 && i == info.n) {
            uint32_t x;
            CHECK(skv_decoder_get(d, 0.0f, 1.0f, &x) == SKV_ERR_ARG);
            end_rc = skv_decoder_end(d);
            CHECK(end_rc == 0 || end_rc == SKV_ERR_CORRUPT);
        }
        for (uint32_t k = i; k < lim; k++)
            fuzz_param(di, mode, key, k, &mus[k], &ss[k]);
        /* the batch decoder */
        CHECK(skv_decoder_begin_atoms(d, src, len, A, NULL) == 0);
        uint32_t *ys = malloc((lim + 1) * sizeof *ys);
        CHECK(ys != NULL);
        check_batches(d, mus, ss, xs, ys, lim, bad_at, end_rc, key, 1, 67);
        free(ys);
        decode_rows(d, A, src, len, di, mus, ss, lim, key, 0);
        free(xs);
        free(mus);
        free(ss);
    } else {
        CHECK(rc == SKV_ERR_FORMAT || rc == SKV_ERR_VERSION || rc == SKV_ERR_RANGE ||
              rc == SKV_ERR_SHAPE || rc == SKV_ERR_CORRUPT || rc == SKV_ERR_TOO_LARGE);
    }
    skv_decoder_free(d);
}

/* batched: skv_encoder_put_n in batches of 1..61 scalars; version: the
 * stream version written */
static uint8_t *encode(skv_cmodel *m, int di, unsigned mode, uint32_t key, const uint32_t *xs,
                       size_t n, const uint8_t *calib, size_t *len, int batched,
                       const skv_atoms *A, int version)
{
    skv_encoder *e = NULL;
    CHECK(skv_encoder_create(m, &e) == 0);
    CHECK(skv_encoder_set_version(e, version) == 0);
    if (version == 2) /* without the ideal cost, put_n may take the AVX2 path; put never does */
        skv_encoder_set_ideal(e, 0);
    if (version == 2 && (key >> 7 & 1u)) /* eight states for half the keys */
        CHECK(skv_encoder_set_states(e, 8) == 0);
    skv_encoder_reset_atoms(e, calib, A);
    float *mus = malloc((n + 1) * sizeof *mus), *ss = malloc((n + 1) * sizeof *ss);
    CHECK(mus && ss);
    for (size_t i = 0; i < n; i++)
        fuzz_param(di, mode, key, (uint32_t)i, &mus[i], &ss[i]);
    for (size_t i = 0; i < n && !batched; i++)
        CHECK(skv_encoder_put(e, xs[i], mus[i], ss[i]) == 0);
    for (size_t i = 0, b; i < n && batched; i += b) {
        b = 1 + (i * 5u + key) % 61u;
        if (b > n - i)
            b = n - i;
        CHECK(skv_encoder_put_n(e, xs + i, mus + i, ss + i, b) == 0);
    }
    free(mus);
    free(ss);
    size_t cap = skv_encoder_bound(e);
    uint8_t *buf = malloc(cap);
    CHECK(buf != NULL);
    CHECK(skv_encoder_finish(e, buf, cap, len) == 0);
    CHECK(*len <= cap);
    skv_encoder_free(e);
    return buf;
}

static void round_trip(skv_cmodel *m, int di, unsigned mode, uint32_t key, const uint8_t *src,
                       size_t len)
{
    seqkv_dtype dt = GOLD_DT[di];
    size_t nb = dt == SEQKV_DT_F32 ? 4 : dt == SEQKV_DT_F8E4M3 ? 1 : 2;
    size_t n = len / nb;
    uint32_t *xs = malloc((n ? n : 1) * sizeof *xs);
    CHECK(xs != NULL);
    for (size_t i = 0; i < n; i++)
        xs[i] = nb == 4 ? skv_load32_le(src + 4 * i) : nb == 2 ? skv_load16_le(src + 2 * i) : src[i];
    uint8_t calib[16] = {0};
    memcpy(calib, src, len < 16 ? len : 16);
    size_t l1, l2;
    const skv_atoms *A = (len & 1) ? atoms_for(di) : NULL;
    uint8_t *b1 = encode(m, di, mode, key, xs, n, calib, &l1, 0, A, 1);
    uint8_t *b2 = encode(m, di, mode, key, xs, n, calib, &l2, 1, A, 1);
    CHECK(l1 == l2 && memcmp(b1, b2, l1) == 0); /* deterministic; put_n == put */
    free(b2);
    /* version 2 (put and put_n give the same bytes), decoded in groups */
    size_t l3;
    uint8_t *b3 = encode(m, di, mode, key, xs, n, calib, &l3, 0, A, 2);
    b2 = encode(m, di, mode, key, xs, n, calib, &l2, 1, A, 2);
    CHECK(l3 == l2 && memcmp(b3, b2, l3) == 0);
    {
        skv_decoder *d2 = NULL;
        CHECK(skv_decoder_create(m, &d2) == 0);
        skv_stream_info i2;
        CHECK(skv_decoder_begin_atoms(d2, b3, l3, A, &i2) == 0 && i2.version == 2 && i2.n == n);
        for (size_t i = 0; i < n; i += 8) {
            float mu[8], s[8];
            uint32_t x[8], b = n - i < 8 ? (uint32_t)(n - i) : 8;
            for (uint32_t k = 0; k < b; k++)
                fuzz_param(di, mode, key, (uint32_t)(i + k), &mu[k], &s[k]);
            CHECK(skv_decoder_get_n(d2, mu, s, x, b) == 0);
            for (uint32_t k = 0; k < b; k++)
                CHECK(x[k] == xs[i + k]);
        }
        CHECK(skv_decoder_end(d2) == 0);
        skv_decoder_free(d2);
    }
    free(b3);

    skv_decoder *d = NULL;
    CHECK(skv_decoder_create(m, &d) == 0);
    skv_stream_info info;
    CHECK(skv_decoder_begin_atoms(d, b1, l1, A, &info) == 0);
    CHECK(info.n == n && info.dtype == dt && memcmp(info.calib_id, calib, 16) == 0);
    for (size_t i = 0; i < n; i++) {
        float mu, s;
        uint32_t x = 0;
        fuzz_param(di, mode, key, (uint32_t)i, &mu, &s);
        CHECK(skv_decoder_get(d, mu, s, &x) == 0);
        if (x != xs[i]) {
            fprintf(stderr, "fuzz_stream: scalar %zu: coded 0x%x decoded 0x%x (mu %a s %a)\n", i,
                    xs[i], x, (double)mu, (double)s);
            abort();
        }
    }
    CHECK(skv_decoder_end(d) == 0);
    skv_decoder_free(d);
    free(b1);
    free(b2);
    free(xs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int di = data[0] & 3, mi = (data[0] >> 2) & 3;
    unsigned mode = data[0] >> 4;
    const uint8_t *src = data + 1;
    size_t len = size - 1;
    uint32_t key = len >= 36 ? skv_load32_le(src + 32) : 0;
    skv_cmodel *m = model_for(di, mi);

    /* a private copy of exactly len bytes: reads past it are caught */
    uint8_t *buf = malloc(len ? len : 1);
    CHECK(buf != NULL);
    if (len)
        memcpy(buf, src, len);
    decode_input(m, di, mode, key, buf, len);
    if (len <= 4096)
        round_trip(m, di, mode, key, buf, len);
    free(buf);
    return 0;
}
