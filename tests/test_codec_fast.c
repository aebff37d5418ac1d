/* The fast level's streams: round trips of every dtype's patterns and of
 * awkward shapes, the scalar and SIMD decoders against each other, and
 * damaged streams refused. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "fast_int.h"
#include "skv_codec.h"
/* the library's plain (SSE2) XXH3 beside its dispatching entry points */
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>
#if defined(__x86_64__)
#define XXH_DISPATCH_DISABLE_REPLACE
#include <xxh_x86dispatch.h>
#endif

static const seqkv_dtype dts[] = {SEQKV_DT_BF16, SEQKV_DT_F16, SEQKV_DT_F8E4M3};

/* Encode, decode on every path, compare; returns the stream (caller frees). */
static uint8_t *round_trip(seqkv_dtype dt, const void *src, size_t rows, size_t C, size_t *len)
{
    const size_t es = skv_dtype_size(dt), cap = skv_fast_bound(dt, rows, C);
    cr_assert(cap > 0);
    uint8_t *dst = malloc(cap), *out = malloc(rows * C * es + 1);
    cr_assert_eq(skv_fast_encode(dt, src, rows, C, dst, cap, len), 0);
    const int paths[] = {0, 2, 3}, saved = fast_simd();
    for (int k = 0; k < 3; k++) {
        if (paths[k] > saved)
            continue;
        skv__fast_simd = paths[k];
        memset(out, 0xa5, rows * C * es);
        cr_assert_eq(skv_fast_decode(dst, *len, dt, rows, C, out, rows * C * es), 0, "path %d", paths[k]);
        cr_assert(memcmp(out, src, rows * C * es) == 0, "path %d dtype %d", paths[k], (int)dt);
    }
    skv__fast_simd = saved;
    free(out);
    return dst;
}

Test(codec_fast, every_pattern_round_trips)
{
    uint16_t *a = malloc(65536 * 2);
    for (uint32_t i = 0; i < 65536; i++)
        a[i] = (uint16_t)(i * 40503u); /* every pattern, shuffled */
    for (int d = 0; d < 2; d++) {
        size_t len;
        free(round_trip(dts[d], a, 65536 / 64, 64, &len));
        free(round_trip(dts[d], a, 1, 65536, &len));
        free(round_trip(dts[d], a, 65536, 1, &len));
    }
    uint8_t b[256 * 3];
    for (int i = 0; i < 256 * 3; i++)
        b[i] = (uint8_t)(i * 167);
    size_t len;
    free(round_trip(SEQKV_DT_F8E4M3, b, 256 * 3 / 8, 8, &len));
    free(round_trip(SEQKV_DT_F8E4M3, b, 1, 256 * 3, &len));
    free(a);
}

Test(codec_fast, edge_values_and_shapes)
{
    const uint16_t e16[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x7f7f, 0xff7f, 0x0080,
                            0x7f80, 0xff80, 0x7fc0, 0xffc1, 0x7c00, 0xfc00, 0x7bff, 0x03ff, 0x7e01};
    const uint8_t e8[] = {0x00, 0x80, 0x01, 0x81, 0x07, 0x7e, 0xfe, 0x7f, 0xff, 0x08};
    const size_t shapes[][2] = {{1, 1}, {1, 3}, {3, 1}, {7, 5}, {256, 32}, {33, 31}, {100, 17}, {5, 127}, {2, 300}};
    srand(7);
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        const size_t R = shapes[k][0], C = shapes[k][1], n = R * C;
        for (int d = 0; d < 3; d++)
            for (int kind = 0; kind < 4; kind++) {
                uint8_t *v = malloc(2 * n);
                for (size_t i = 0; i < n; i++) {
                    uint32_t x;
                    if (kind == 0)
                        x = dts[d] == SEQKV_DT_F8E4M3 ? e8[i % sizeof e8] : e16[i % 17];
                    else if (kind == 1)
                        x = (uint32_t)rand();
                    else if (kind == 2) /* constant channels */
                        x = (uint32_t)(i % C) * 977u + 0x3f00u;
                    else /* Gaussian-ish values around channel scales */
                        x = 0x3c00u + ((i % C) << 7) + (uint32_t)(rand() % 512) - 256;
                    if (dts[d] == SEQKV_DT_F8E4M3)
                        v[i] = (uint8_t)x;
                    else
                        ((uint16_t *)v)[i] = (uint16_t)x;
                }
                size_t len;
                free(round_trip(dts[d], v, R, C, &len));
                free(v);
            }
    }
    cr_log_info("fast: edge values, random, constant channels over %zu shapes", sizeof shapes / sizeof *shapes);
}

Test(codec_fast, refuses_other_dtypes)
{
    float f[4] = {0};
    uint8_t dst[4096];
    size_t len;
    cr_assert_eq(skv_fast_encode(SEQKV_DT_F32, f, 1, 4, dst, sizeof dst, &len), SKV_ERR_ARG);
    cr_assert_eq(skv_fast_encode(SEQKV_DT_I32, f, 1, 4, dst, sizeof dst, &len), SKV_ERR_ARG);
    cr_assert_eq(skv_fast_bound(SEQKV_DT_F32, 1, 4), 0);
    cr_assert_eq(skv_fast_encode(SEQKV_DT_BF16, f, 0, 4, dst, sizeof dst, &len), SKV_ERR_ARG);
    cr_assert_eq(skv_fast_encode(SEQKV_DT_BF16, f, 1, 4, dst, 10, &len), SKV_ERR_TOO_LARGE);
}

/* Every cut and every flipped bit of bf16 stream s (R x C) is refused,
 * the same way on the scalar path and this CPU's */
static void refuse_damage(const uint8_t *s, size_t len, size_t R, size_t C)
{
    const size_t n = R * C;
    uint8_t *t = malloc(len);
    uint16_t *out = malloc(2 * n);
    const int saved = fast_simd();
    for (size_t cut = 0; cut < len; cut += 1 + cut / 8) {
        memcpy(t, s, cut);
        cr_assert_neq(skv_fast_decode(t, cut, SEQKV_DT_BF16, R, C, out, 2 * n), 0, "cut %zu", cut);
    }
    for (size_t pos = 0; pos < len; pos++)
        for (int bit = 0; bit < 8; bit += 3) {
            memcpy(t, s, len);
            t[pos] ^= (uint8_t)(1u << bit);
            int rc[2];
            for (int k = 0; k < 2; k++) {
                skv__fast_simd = k ? saved : 0;
                rc[k] = skv_fast_decode(t, len, SEQKV_DT_BF16, R, C, out, 2 * n);
            }
            cr_assert_neq(rc[0], 0, "byte %zu bit %d", pos, bit);
            cr_assert_eq(rc[0], rc[1], "paths disagree at byte %zu", pos);
        }
    skv__fast_simd = saved;
    free(t);
    free(out);
}

Test(codec_fast, damaged_streams_are_refused)
{
    const size_t R = 64, C = 32, n = R * C;
    uint16_t *v = malloc(2 * n), *out = malloc(4 * n);
    srand(3);
    for (size_t i = 0; i < n; i++)
        v[i] = (uint16_t)(0x3c00u + ((i % C) << 6) + (uint32_t)(rand() % 700));
    size_t len;
    uint8_t *s = round_trip(SEQKV_DT_BF16, v, R, C, &len);
    cr_assert_eq(s[4], 1, "no row repeats: version 1");
    refuse_damage(s, len, R, C);
    cr_assert_eq(skv_fast_decode(s, len, SEQKV_DT_F16, R, C, out, 2 * n), SKV_ERR_FORMAT);
    cr_assert_eq(skv_fast_decode(s, len, SEQKV_DT_BF16, R + 1, C, out, 4 * n), SKV_ERR_FORMAT);
    uint8_t *t = malloc(len);
    memcpy(t, s, len);
    t[4] = 2; /* version 2 without row references */
    cr_assert_eq(skv_fast_decode(t, len, SEQKV_DT_BF16, R, C, out, 2 * n), SKV_ERR_FORMAT);
    t[4] = 3;
    cr_assert_eq(skv_fast_decode(t, len, SEQKV_DT_BF16, R, C, out, 2 * n), SKV_ERR_VERSION);
    free(s);
    free(t);
    free(v);
    free(out);
}

/* Rows that repeat earlier ones, as layer 0's V does (a function of the
 * token alone): version 2 streams code each such row as a reference, so
 * they cost a few bytes instead of a row; every dtype round trips on
 * every path, and damage to the references is refused. */
Test(codec_fast, repeated_rows_are_references)
{
    const size_t R = 96, C = 32, n = R * C, distinct = 24;
    for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++) {
        const seqkv_dtype dt = dts[k];
        const size_t es = skv_dtype_size(dt);
        uint8_t *v = malloc(n * es), *u = malloc(n * es);
        srand(7 + (unsigned)k);
        for (size_t i = 0; i < distinct * C * es; i++)
            v[i] = (uint8_t)(es == 2 && i % 2 ? 0x3c + rand() % 8 : rand() % 251);
        /* rows distinct.. copy rows chosen at random from before them, far
         * and near (references past 127 rows take two varint bytes) */
        for (size_t r = distinct; r < R; r++)
            memcpy(v + r * C * es, v + (size_t)(rand() % (int)(r < 80 ? distinct : r)) * C * es, C * es);
        /* the same values, every row unique: one scalar changed per row */
        memcpy(u, v, n * es);
        for (size_t r = 0; r < R; r++)
            u[r * C * es] = (uint8_t)r;
        size_t lv, lu;
        uint8_t *sv = round_trip(dt, v, R, C, &lv), *su = round_trip(dt, u, R, C, &lu);
        cr_assert_eq(sv[4], 2, "dtype %d: references: version 2", (int)dt);
        cr_assert_eq(su[4], 1, "dtype %d: no repeats: version 1", (int)dt);
        cr_assert_lt(lv * 2, lu, "dtype %d: %zu bytes with references, %zu without", (int)dt, lv, lu);
        cr_log_info("fast: %zu x %zu of dtype %d, %zu of them repeats: %zu bytes; unique rows: %zu",
                    R, C, (int)dt, R - distinct, lv, lu);
        if (dt == SEQKV_DT_BF16)
            refuse_damage(sv, lv, R, C);
        free(sv);
        free(su);
        free(v);
        free(u);
    }
}

Test(codec_fast, bytes_do_not_depend_on_the_path)
{
    /* one encoder path; the encoded bytes must be the same whatever the
     * decoder's path, and repeat exactly */
    const size_t R = 256, C = 32, n = R * C;
    uint16_t *v = malloc(2 * n);
    srand(11);
    for (size_t i = 0; i < n; i++)
        v[i] = (uint16_t)(0x3c00u + ((i % C) << 5) + (uint32_t)(rand() % 900));
    size_t l1, l2;
    const int saved = fast_simd();
    skv__fast_simd = 0;
    uint8_t *a = round_trip(SEQKV_DT_BF16, v, R, C, &l1);
    skv__fast_simd = saved;
    uint8_t *b = round_trip(SEQKV_DT_BF16, v, R, C, &l2);
    cr_assert_eq(l1, l2);
    cr_assert(memcmp(a, b, l1) == 0);
    cr_log_info("fast: %zu x %zu bf16 in %zu bytes (%.2f bits/scalar)", R, C, l1, 8.0 * (double)l1 / (double)n);
    free(a);
    free(b);
    free(v);
}

/* The checksums (fast streams, chunk records) go through libxxhash's
 * CPU-dispatching XXH3 (base/skv_xxh.h): on every length, one shot and
 * streamed in uneven pieces, it gives what the plain SSE2 build gives. */
Test(codec_fast, checksums_do_not_depend_on_the_cpu)
{
#if defined(__x86_64__)
    const size_t big = (640 << 10) + 3;
    uint8_t *b = malloc(big);
    srand(17);
    for (size_t i = 0; i < big; i++)
        b[i] = (uint8_t)rand();
    const size_t lens[] = {0, 1, 3, 16, 17, 128, 129, 240, 241, 1024, 4095, 65537, big};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        const size_t n = lens[k];
        cr_assert_eq(XXH3_64bits_dispatch(b, n), XXH3_64bits(b, n), "64 bits, %zu bytes", n);
        XXH128_hash_t d = XXH3_128bits_dispatch(b, n), p = XXH3_128bits(b, n);
        cr_assert(d.low64 == p.low64 && d.high64 == p.high64, "128 bits, %zu bytes", n);
        XXH3_state_t s64, s128;
        XXH3_64bits_reset(&s64);
        XXH3_128bits_reset(&s128);
        for (size_t o = 0, step = 1; o < n; o += step, step = step * 3 + 1) {
            const size_t m = o + step < n ? step : n - o;
            XXH3_64bits_update_dispatch(&s64, b + o, m);
            XXH3_128bits_update_dispatch(&s128, b + o, m);
        }
        cr_assert_eq(XXH3_64bits_digest(&s64), XXH3_64bits(b, n), "streamed, %zu bytes", n);
        d = XXH3_128bits_digest(&s128);
        cr_assert(d.low64 == p.low64 && d.high64 == p.high64, "streamed 128, %zu bytes", n);
    }
    free(b);
#else
    cr_skip_test("not x86-64: one XXH3 build");
#endif
}
