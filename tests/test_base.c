/* skv_base: casts (edge values, exhaustive round trips, and agreement with
 * independent reference roundings), the heap wrapper, the pool, the RNG. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "skv_base.h"

static float f(uint32_t u) { return skv_bits_f32(u); }

/* ---- independent references -------------------------------------------
 * Nearest representable value by exact comparison in double (every float32,
 * bf16, fp16 and fp8 value is exact in double), ties to the even code. */
static uint32_t nearest_code(double x, const double *vals, const uint32_t *codes, int n)
{
    /* vals ascending, finite */
    int best = 0;
    double bd = fabs(x - vals[0]);
    for (int i = 1; i < n; i++) {
        double d = fabs(x - vals[i]);
        if (d < bd || (d == bd && (codes[i] & 1) == 0 && (codes[best] & 1))) {
            best = i;
            bd = d;
        }
    }
    return codes[best];
}

Test(cast_bf16, edge_values)
{
    cr_assert_eq(skv_f32_to_bf16(1.0f), 0x3f80);
    cr_assert_eq(skv_f32_to_bf16(f(0x3f808000)), 0x3f80, "tie rounds to even (down)");
    cr_assert_eq(skv_f32_to_bf16(f(0x3f818000)), 0x3f82, "tie rounds to even (up)");
    cr_assert_eq(skv_f32_to_bf16(f(0x3f808001)), 0x3f81, "above the tie rounds up");
    cr_assert_eq(skv_f32_to_bf16(f(0x7f7f7fff)), 0x7f7f);
    cr_assert_eq(skv_f32_to_bf16(f(0x7f7f8000)), 0x7f80, "max tie overflows to inf");
    cr_assert_eq(skv_f32_to_bf16(f(0x7f7fffff)), 0x7f80);
    cr_assert_eq(skv_f32_to_bf16(INFINITY), 0x7f80);
    cr_assert_eq(skv_f32_to_bf16(-INFINITY), 0xff80);
    cr_assert_eq(skv_f32_to_bf16(-0.0f), 0x8000);
    cr_assert_eq(skv_f32_to_bf16(f(0x00000001)), 0x0000, "tiny subnormal to zero");
    cr_assert_eq(skv_f32_to_bf16(f(0x00008000)), 0x0000, "subnormal tie to even");
    cr_assert_eq(skv_f32_to_bf16(f(0x00018000)), 0x0002);
    cr_assert_eq(skv_f32_to_bf16(f(0x7fc00000)), 0x7fc0);
    cr_assert_eq(skv_f32_to_bf16(f(0x7f800001)), 0x7fc0, "signalling NaN stays NaN, quieted");
    cr_assert_eq(skv_f32_to_bf16(f(0xffa50001)), 0xffe5, "NaN keeps sign and top payload");
}

Test(cast_bf16, exhaustive_round_trip)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float x = skv_bf16_to_f32((uint16_t)h);
        cr_assert_eq(skv_f32_bits(x), h << 16);
        uint16_t back = skv_f32_to_bf16(x);
        if ((h & 0x7fff) > 0x7f80)
            cr_assert_eq(back, (uint16_t)(h | 0x40), "NaN %04x", h);
        else
            cr_assert_eq(back, (uint16_t)h, "value %04x", h);
    }
}

Test(cast_bf16, matches_reference_on_random_floats)
{
    skv_rng r;
    skv_rng_seed(&r, 7);
    for (int i = 0; i < 200000; i++) {
        uint32_t u = (uint32_t)skv_rng_next(&r);
        if ((u & 0x7f800000) == 0x7f800000)
            continue;
        uint32_t t = u >> 16;
        double cand[2], x = (double)f(u);
        uint32_t codes[2] = {t, t + 1};
        cand[0] = (double)f(t << 16);
        cand[1] = ((t + 1) & 0x7fff) >= 0x7f80 ? copysign(INFINITY, x) : (double)f((t + 1) << 16);
        uint32_t want;
        if (isinf(cand[1])) {
            /* overflow threshold: halfway between max and 2^128 */
            double lim = ldexp(2.0 - ldexp(1.0, -8), 127); /* max + half ulp */
            want = fabs(x) >= lim ? codes[1] : codes[0];
        } else {
            double a = fabs(x - cand[0]), b = fabs(x - cand[1]);
            want = a < b ? codes[0] : b < a ? codes[1] : ((codes[0] & 1) ? codes[1] : codes[0]);
        }
        cr_assert_eq(skv_f32_to_bf16(f(u)), want, "input %08x", u);
    }
}

Test(cast_f16, edge_values)
{
    cr_assert_eq(skv_f32_to_f16(1.0f), 0x3c00);
    cr_assert_eq(skv_f32_to_f16(65504.0f), 0x7bff);
    cr_assert_eq(skv_f32_to_f16(f(0x477fefff)), 0x7bff, "just below 65520 stays finite");
    cr_assert_eq(skv_f32_to_f16(65520.0f), 0x7c00, "65520 rounds to inf");
    cr_assert_eq(skv_f32_to_f16(INFINITY), 0x7c00);
    cr_assert_eq(skv_f32_to_f16(-INFINITY), 0xfc00);
    cr_assert_eq(skv_f32_to_f16(-0.0f), 0x8000);
    cr_assert_eq(skv_f32_to_f16(ldexpf(1.0f, -24)), 0x0001, "min subnormal");
    cr_assert_eq(skv_f32_to_f16(ldexpf(1.0f, -25)), 0x0000, "half min subnormal ties to zero");
    cr_assert_eq(skv_f32_to_f16(f(0x33000001)), 0x0001);
    cr_assert_eq(skv_f32_to_f16(ldexpf(3.0f, -25)), 0x0002, "subnormal tie to even");
    cr_assert_eq(skv_f32_to_f16(ldexpf(2047.0f, -25)), 0x0400, "max subnormal tie to min normal");
    cr_assert_eq(skv_f32_to_f16(ldexpf(1.0f, -14)), 0x0400);
    cr_assert_eq(skv_f32_to_f16(1.0f + ldexpf(1.0f, -11)), 0x3c00, "tie to even");
    cr_assert_eq(skv_f32_to_f16(1.0f + ldexpf(3.0f, -11)), 0x3c02, "tie to even (up)");
    cr_assert_eq(skv_f32_to_f16(f(0x7fc00000)), 0x7e00);
    cr_assert_eq(skv_f32_to_f16(f(0x7f800001)), 0x7e00, "signalling NaN quieted");
    cr_assert_eq(skv_f32_to_f16(f(0xff802000)), 0xfe01, "NaN keeps sign and top payload");
}

Test(cast_f16, exhaustive_round_trip)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float x = skv_f16_to_f32((uint16_t)h);
        uint16_t back = skv_f32_to_f16(x);
        if ((h & 0x7fff) > 0x7c00) {
            cr_assert(isnan(x));
            cr_assert_eq(back, (uint16_t)(h | 0x200), "NaN %04x", h);
        } else {
            cr_assert_eq(back, (uint16_t)h, "value %04x", h);
        }
    }
}

#if defined(__FLT16_MAX__)
Test(cast_f16, matches_compiler_float16_conversion)
{
    skv_rng r;
    skv_rng_seed(&r, 11);
    for (int i = 0; i < 300000; i++) {
        uint32_t u = (uint32_t)skv_rng_next(&r);
        /* concentrate on the fp16 range and its subnormals */
        if (i & 1)
            u = (u & 0x80ffffffu) | ((0x30u + (u >> 24) % 0x18u) << 24);
        float x = f(u);
        if (isnan(x))
            continue;
        _Float16 h = (_Float16)x;
        uint16_t hb;
        memcpy(&hb, &h, 2);
        cr_assert_eq(skv_f32_to_f16(x), hb, "input %08x", u);
    }
}
#endif

Test(cast_fp8, edge_values)
{
    cr_assert_eq(skv_f32_to_f8e4m3(1.0f), 0x38);
    cr_assert_eq(skv_f32_to_f8e4m3(448.0f), 0x7e);
    cr_assert_eq(skv_f32_to_f8e4m3(449.0f), 0x7e, "saturates");
    cr_assert_eq(skv_f32_to_f8e4m3(464.0f), 0x7e, "would round to 480: saturates");
    cr_assert_eq(skv_f32_to_f8e4m3(1e30f), 0x7e);
    cr_assert_eq(skv_f32_to_f8e4m3(INFINITY), 0x7e, "inf saturates");
    cr_assert_eq(skv_f32_to_f8e4m3(-INFINITY), 0xfe);
    cr_assert_eq(skv_f32_to_f8e4m3(NAN), 0x7f);
    cr_assert_eq(skv_f32_to_f8e4m3(-NAN), 0xff);
    cr_assert_eq(skv_f32_to_f8e4m3(-0.0f), 0x80);
    cr_assert_eq(skv_f32_to_f8e4m3(ldexpf(1.0f, -9)), 0x01, "min subnormal");
    cr_assert_eq(skv_f32_to_f8e4m3(ldexpf(1.0f, -10)), 0x00, "half min subnormal ties to zero");
    cr_assert_eq(skv_f32_to_f8e4m3(ldexpf(3.0f, -10)), 0x02, "subnormal tie to even");
    cr_assert_eq(skv_f32_to_f8e4m3(ldexpf(15.0f, -10)), 0x08, "max subnormal tie to min normal");
    cr_assert_eq(skv_f32_to_f8e4m3(1.0625f), 0x38, "tie to even (down)");
    cr_assert_eq(skv_f32_to_f8e4m3(1.1875f), 0x3a, "tie to even (up)");
    cr_assert(isnan(skv_f8e4m3_to_f32(0x7f)));
    cr_assert(isnan(skv_f8e4m3_to_f32(0xff)));
    cr_assert_eq(skv_f8e4m3_to_f32(0x7e), 448.0f);
    cr_assert_eq(skv_f8e4m3_to_f32(0x01), ldexpf(1.0f, -9));
}

Test(cast_fp8, exhaustive_round_trip_and_reference)
{
    double vals[127];
    uint32_t codes[127];
    int n = 0;
    for (uint32_t b = 0; b < 256; b++) {
        float x = skv_f8e4m3_to_f32((uint8_t)b);
        uint8_t back = skv_f32_to_f8e4m3(x);
        if ((b & 0x7f) == 0x7f)
            cr_assert_eq(back, b, "NaN %02x", b);
        else
            cr_assert_eq(back, b, "value %02x", b);
        if (b <= 0x7e)
            vals[n] = x, codes[n++] = b;
    }
    cr_assert_eq(n, 127, "127 finite non-negative codes (0x00..0x7e)");
    skv_rng r;
    skv_rng_seed(&r, 13);
    for (int i = 0; i < 100000; i++) {
        /* magnitudes spread over the fp8 range and a little beyond */
        float x = ldexpf(skv_rng_uniform(&r) + 0.5f, (int)(skv_rng_next(&r) % 24) - 14);
        uint32_t want = fabsf(x) >= 448.0f ? 0x7e : nearest_code(fabs((double)x), vals, codes, n);
        cr_assert_eq(skv_f32_to_f8e4m3(x), want, "input %a", (double)x);
        cr_assert_eq(skv_f32_to_f8e4m3(-x), want | 0x80, "input %a", (double)-x);
    }
}

Test(cast, bulk_casts_are_little_endian)
{
    float src[4] = {1.0f, -2.0f, 0.5f, 65504.0f};
    uint8_t out[16];
    cr_assert_eq(skv_cast_from_f32(SEQKV_DT_BF16, out, src, 4), 0);
    cr_assert_eq(out[0], 0x80);
    cr_assert_eq(out[1], 0x3f);
    cr_assert_eq(skv_cast_from_f32(SEQKV_DT_F16, out, src, 4), 0);
    cr_assert_eq(skv_load16_le(out + 6), 0x7bff);
    float back[4];
    for (int dt = SEQKV_DT_F32; dt <= SEQKV_DT_F8E4M3; dt++) {
        cr_assert_eq(skv_cast_from_f32((seqkv_dtype)dt, out, src, 4), 0);
        cr_assert_eq(skv_cast_to_f32((seqkv_dtype)dt, back, out, 4), 0);
        cr_assert_eq(back[0], 1.0f);
        cr_assert_eq(back[1], -2.0f);
    }
    cr_assert_eq(skv_cast_from_f32(SEQKV_DT_I32, out, src, 4), SKV_ERR_ARG);
}

Test(cast, gpu_path_is_optional_and_bit_identical)
{
    if (!skv_gpu_available()) {
        float x = 1.0f;
        uint8_t o[4];
        cr_assert_eq(skv_gpu_cast_from_f32(SEQKV_DT_BF16, o, &x, 1), SKV_ERR_NO_DEVICE);
        cr_skip("no GPU: %s", skv_gpu_describe());
    }
    enum { N = 1 << 16 };
    static float src[N];
    static uint8_t a[N * 4], b[N * 4];
    skv_rng r;
    skv_rng_seed(&r, 3);
    for (int i = 0; i < N; i++)
        src[i] = f((uint32_t)skv_rng_next(&r));
    for (int dt = SEQKV_DT_F32; dt <= SEQKV_DT_F8E4M3; dt++) {
        cr_assert_eq(skv_cast_from_f32((seqkv_dtype)dt, a, src, N), 0);
        cr_assert_eq(skv_gpu_cast_from_f32((seqkv_dtype)dt, b, src, N), 0);
        cr_assert_eq(memcmp(a, b, N * skv_dtype_size((seqkv_dtype)dt)), 0, "dtype %d", dt);
    }
}

Test(dtype, names_parse_and_reject)
{
    seqkv_dtype dt;
    cr_assert_eq(skv_dtype_from_name("F8_E4M3", 7, &dt), 0);
    cr_assert_eq(dt, SEQKV_DT_F8E4M3);
    cr_assert_eq(skv_dtype_from_name("F64", 3, &dt), SKV_ERR_UNSUPPORTED);
    cr_assert_eq(skv_dtype_from_name("Q4", 2, &dt), SKV_ERR_FORMAT);
    cr_assert_eq(skv_dtype_from_user("BF16", &dt), 0);
    cr_assert_eq(dt, SEQKV_DT_BF16);
    cr_assert_eq(skv_dtype_from_user("fp8", &dt), 0);
    cr_assert_eq(dt, SEQKV_DT_F8E4M3);
    cr_assert_eq(skv_dtype_from_user("int4", &dt), SKV_ERR_ARG);
    cr_assert_str_eq(skv_dtype_name(SEQKV_DT_F16), "F16");
}

Test(alloc, injected_failure_hits_the_nth_call_once)
{
    skv_alloc_fail_after(2, 0);
    void *a = skv_malloc(8), *b = skv_malloc(8), *c = skv_malloc(8), *d = skv_malloc(8);
    cr_assert_not_null(a);
    cr_assert_not_null(b);
    cr_assert_null(c);
    cr_assert_not_null(d);
    skv_free(a);
    skv_free(b);
    skv_free(d);
    skv_alloc_fail_after(0, 1);
    cr_assert_null(skv_malloc(1));
    cr_assert_null(skv_calloc(1, 1));
    skv_alloc_fail_after(-1, 0);
    void *e = skv_calloc(4, 4);
    cr_assert_not_null(e);
    skv_free(e);
    cr_assert_null(skv_calloc((size_t)-1 / 2, 4), "overflowing calloc fails");
}

/* The huge-page block: zeroed, writable end to end, aligned to 2 MiB
 * (but under ASan, which keeps it on its heap), refused when injected to
 * fail or when its size cannot be rounded up */
Test(alloc, huge_blocks_are_zeroed_aligned_and_fail_when_told)
{
    static const size_t sizes[] = {1, 4096, (2u << 20) + 5, 5u << 20};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        uint8_t *p = skv_calloc_huge(sizes[k]);
        cr_assert_not_null(p, "%zu bytes", sizes[k]);
        size_t nz = 0;
        for (size_t i = 0; i < sizes[k]; i += 4093)
            nz += p[i] != 0;
        cr_expect_eq(nz + (p[sizes[k] - 1] != 0), 0, "%zu bytes: not zeroed", sizes[k]);
        p[0] = 1, p[sizes[k] - 1] = 2;
#if !defined(__SANITIZE_ADDRESS__)
        cr_expect_eq((uintptr_t)p % (2u << 20), 0, "%zu bytes at %p", sizes[k], (void *)p);
#endif
        /* it takes its pages, not whole 2 MiB ones */
        size_t len = skv_huge_len(sizes[k]);
        cr_expect(len >= sizes[k] && len - sizes[k] < 4096, "%zu bytes take %zu", sizes[k], len);
        skv_free_huge(p, sizes[k]);
    }
    skv_alloc_fail_after(0, 0);
    cr_assert_null(skv_calloc_huge(64));
    cr_assert_null(skv_calloc_huge((size_t)-1 - 5), "an unroundable size fails");
    skv_free_huge(NULL, 64);
}

Test(error, codes_have_names_and_details)
{
    for (int e = 0; e >= SKV_ERR_MIN_; e--)
        cr_assert_str_neq(seqkv_strerror(e), "unknown error", "code %d", e);
    int rc = skv_error(SKV_ERR_SHAPE, "tensor %s", "x");
    cr_assert_eq(rc, SKV_ERR_SHAPE);
    cr_assert(strstr(seqkv_error_detail(), "tensor x") != NULL);
}

typedef struct {
    int *hits;
} pool_ctx;

static void mark(void *ctx, size_t b, size_t e, int worker)
{
    pool_ctx *c = ctx;
    for (size_t i = b; i < e; i++)
        c->hits[i] += 1;
    (void)worker;
}

Test(pool, covers_every_item_once_for_any_thread_count)
{
    for (int th = 1; th <= 5; th++) {
        skv_pool *p;
        cr_assert_eq(skv_pool_create(&p, th), 0);
        cr_assert_eq(skv_pool_threads(p), th);
        for (size_t n = 0; n < 40; n += 3) {
            int hits[40] = {0};
            pool_ctx c = {hits};
            for (int rep = 0; rep < 3; rep++)
                skv_pool_run(p, n, mark, &c);
            for (size_t i = 0; i < 40; i++)
                cr_assert_eq(hits[i], i < n ? 3 : 0, "threads %d n %zu item %zu", th, n, i);
        }
        skv_pool_free(p);
    }
    skv_pool_free(NULL);
}

Test(rng, same_seed_same_stream)
{
    skv_rng a, b;
    skv_rng_seed(&a, 42);
    skv_rng_seed(&b, 42);
    for (int i = 0; i < 1000; i++)
        cr_assert_eq(skv_rng_next(&a), skv_rng_next(&b));
    skv_rng_seed(&a, 1);
    /* the first output of xoshiro256** seeded by splitmix64(1) */
    uint64_t first = skv_rng_next(&a);
    skv_rng_seed(&b, 2);
    cr_assert_neq(first, skv_rng_next(&b));
    double sum = 0;
    for (int i = 0; i < 100000; i++) {
        float u = skv_rng_uniform(&a);
        cr_assert(u >= 0.0f && u < 1.0f);
        sum += u;
    }
    cr_assert(fabs(sum / 100000 - 0.5) < 0.01, "mean %f", sum / 100000);
}

Test(error, every_code_has_its_identifier)
{
    cr_assert_str_eq(seqkv_error_name(SKV_ERR_CORRUPT), "SKV_ERR_CORRUPT");
    cr_assert_str_eq(seqkv_error_name(SKV_OK), "SKV_OK");
    for (int e = 0; e >= SKV_ERR_MIN_; e--)
        cr_assert_not_null(seqkv_error_name(e), "code %d", e);
    cr_assert_null(seqkv_error_name(SKV_ERR_MIN_ - 1));
    cr_assert_null(seqkv_error_name(1));
}

/* ---- warm big buffers (base/warm.c) ---------------------------------------- */

Test(warm, a_big_block_given_back_is_the_next_one_of_its_size_and_small_ones_are_not_kept)
{
    skv_warm_trim();
    const size_t mib = (size_t)1 << 20;
    size_t cap;
    uint8_t *a = skv_warm_alloc(3 * mib, &cap);
    cr_assert_not_null(a);
    cr_assert_eq(cap, 3 * mib);
#if !defined(__SANITIZE_ADDRESS__)
    /* a fresh block of SKV_WARM_HUGE or more is a huge-page mapping: it
     * starts on 2 MiB, and takes its pages */
    cr_expect_eq((uintptr_t)a % (2u << 20), 0, "a fresh block at %p", (void *)a);
    size_t capo;
    uint8_t *odd = skv_warm_alloc(3 * mib + 5, &capo);
    cr_assert_not_null(odd);
    cr_expect_eq(capo, skv_huge_len(3 * mib + 5));
    cr_expect(capo >= 3 * mib + 5 && capo <= 3 * mib + 4096, "%zu", capo);
    skv_warm_free(odd, capo);
    skv_warm_trim();
#endif
    memset(a, 7, cap);
    skv_warm_free(a, cap);
    cr_assert_eq(skv_warm_bytes(), 3 * mib);
    /* the same block again for as many bytes, or a few fewer */
    size_t cap2;
    uint8_t *b = skv_warm_alloc(3 * mib - 100, &cap2);
    cr_assert_eq(b, a, "the kept block is handed out again");
    cr_assert_eq(cap2, 3 * mib);
    cr_assert_eq(skv_warm_bytes(), 0);
    skv_warm_free(b, cap2);
    /* not for far fewer bytes (it would sit half used), nor for more */
    size_t cap3;
    uint8_t *c = skv_warm_alloc(mib + 1, &cap3);
    cr_assert_neq(c, a);
    /* (under SKV_WARM_HUGE: from the heap, of its own size) */
    cr_assert_eq(cap3, mib + 1);
    size_t cap4;
    cr_assert_null(skv_warm_take(3 * mib + 1, &cap4));
    skv_warm_free(c, cap3);
    cr_assert_eq(skv_warm_bytes(), 3 * mib + cap3);
    /* below SKV_WARM_MIN: freed, not kept */
    uint8_t *s = skv_warm_alloc(1000, &cap);
    cr_assert_eq(cap, 1000);
    skv_warm_free(s, cap);
    cr_assert_eq(skv_warm_bytes(), 3 * mib + cap3);
    skv_warm_trim();
    cr_assert_eq(skv_warm_bytes(), 0);
    cr_assert_null(skv_warm_take(3 * mib, &cap));
}

Test(warm, what_is_kept_stays_within_its_count_and_bytes)
{
    skv_warm_trim();
    const size_t mib = (size_t)1 << 20;
    /* more blocks than it keeps: at most SKV_WARM_KEEP, the biggest */
    uint8_t *p[SKV_WARM_KEEP + 4];
    for (size_t i = 0; i < SKV_WARM_KEEP + 4; i++) {
        size_t cap;
        p[i] = skv_warm_alloc((i + 1) * mib, &cap);
    }
    for (size_t i = 0; i < SKV_WARM_KEEP + 4; i++)
        skv_warm_free(p[i], (i + 1) * mib);
    size_t want = 0;
    for (size_t i = 4; i < SKV_WARM_KEEP + 4; i++)
        want += (i + 1) * mib;
    cr_assert_eq(skv_warm_bytes(), want, "the %d biggest kept", SKV_WARM_KEEP);
    size_t cap;
    /* a block over the whole budget is never kept */
    uint8_t *huge = skv_warm_alloc(SKV_WARM_BYTES + mib, &cap);
    skv_warm_free(huge, cap);
    cr_assert_eq(skv_warm_bytes(), want);
    /* blocks up to the budget's bytes: the total never passes it */
    skv_warm_trim();
    for (int i = 0; i < 6; i++) {
        uint8_t *b = skv_warm_alloc(SKV_WARM_BYTES / 4, &cap);
        skv_warm_free(b, cap);
        uint8_t *b2 = skv_warm_alloc(SKV_WARM_BYTES / 4 + mib, &cap);
        skv_warm_free(b2, cap);
        cr_assert_leq(skv_warm_bytes(), SKV_WARM_BYTES);
    }
    skv_warm_trim();
}
