/* libFuzzer target for the fast level's stream decoder (skv_fast_decode)
 * and a round trip through its encoder.
 *
 * Input: one selector byte, then bytes. Selector bits 0-1 pick the dtype
 * (bf16, f16, f8e4m3; 3 is bf16 too), bits 2-7 the channel count - 1
 * (1..64). The rest is decoded as a stream of the shape its header claims
 * when that matches the selector's dtype and channels (at most 2^16
 * scalars), on the scalar path and on this CPU's best path: both must give
 * the same result and, on success, the same scalars. The rest is also
 * taken as raw scalars (whole rows) and encoded twice: identical bytes
 * within skv_fast_bound, decoded back exactly on both paths. Any
 * violation aborts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fast_int.h"
#include "skv_codec.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const seqkv_dtype dts[4] = {SEQKV_DT_BF16, SEQKV_DT_F16, SEQKV_DT_F8E4M3, SEQKV_DT_BF16};

/* decode on the scalar path and the best one: same code, same scalars */
static int decode_both(const uint8_t *s, size_t len, seqkv_dtype dt, size_t rows, size_t C, uint8_t *o1,
                       uint8_t *o2, size_t cap)
{
    const int best = skv__fast_simd_pick();
    skv__fast_simd = 0;
    int r1 = skv_fast_decode(s, len, dt, rows, C, o1, cap);
    skv__fast_simd = best;
    int r2 = skv_fast_decode(s, len, dt, rows, C, o2, cap);
    CHECK(r1 == r2);
    if (!r1)
        CHECK(memcmp(o1, o2, rows * C * skv_dtype_size(dt)) == 0);
    return r1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const seqkv_dtype dt = dts[data[0] & 3];
    const size_t C = (size_t)(data[0] >> 2) + 1, es = skv_dtype_size(dt);
    const uint8_t *p = data + 1;
    const size_t n = size - 1;
    /* decode-only: the shape the header claims, if it is the selector's */
    if (n >= SKV_FAST_HEADER && p[5] == (unsigned)dt) {
        const size_t rows = skv_load32_le(p + 8), ch = skv_load32_le(p + 12);
        if (ch == C && rows >= 1 && rows * ch <= 65536) {
            uint8_t *o1 = malloc(rows * ch * es), *o2 = malloc(rows * ch * es);
            CHECK(o1 && o2);
            decode_both(p, n, dt, rows, ch, o1, o2, rows * ch * es);
            free(o1);
            free(o2);
        }
    }
    /* round trip of the bytes as whole rows of scalars */
    const size_t rows = n / (C * es);
    if (rows >= 1 && n <= 65536) {
        const size_t cap = skv_fast_bound(dt, rows, C);
        uint8_t *a = malloc(cap), *b = malloc(cap), *o1 = malloc(rows * C * es), *o2 = malloc(rows * C * es);
        CHECK(a && b && o1 && o2);
        size_t la, lb;
        CHECK(skv_fast_encode(dt, p, rows, C, a, cap, &la) == 0);
        CHECK(skv_fast_encode(dt, p, rows, C, b, cap, &lb) == 0);
        CHECK(la == lb && la <= cap && memcmp(a, b, la) == 0);
        CHECK(decode_both(a, la, dt, rows, C, o1, o2, rows * C * es) == 0);
        CHECK(memcmp(o1, p, rows * C * es) == 0);
        free(a);
        free(b);
        free(o1);
        free(o2);
    }
    return 0;
}
