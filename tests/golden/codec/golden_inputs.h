/* The input formula of the golden streams: scalar i's (x, mu, s) for
 * dtype index di, from a fixed integer hash. Shared by make_golden.c (which
 * wrote the golden files), the codec suites through tests/codecutil.h
 * (which regenerate the inputs to check them) and tests/fuzz/fuzz_stream.c.
 * Changing it breaks the golden streams: don't. */
#ifndef SKV_GOLDEN_INPUTS_H
#define SKV_GOLDEN_INPUTS_H
#include <math.h>
#include <stdint.h>

#include "skv_base.h"

__attribute__((unused)) static const seqkv_dtype GOLD_DT[4] = {SEQKV_DT_BF16, SEQKV_DT_F16, SEQKV_DT_F8E4M3, SEQKV_DT_F32};
__attribute__((unused)) static const int GOLD_EMIN[4] = {-40, -16, -8, -60};
__attribute__((unused)) static const int GOLD_EMAX[4] = {40, 14, 7, 60};
/* +0, -0, min subnormal, -max subnormal, -max finite, +inf (fp8: +max),
 * quiet NaN with payload, signalling -NaN with payload (fp8: -NaN) */
__attribute__((unused)) static const uint32_t GOLD_SPECIAL[4][8] = {
    {0x0000, 0x8000, 0x0001, 0x807f, 0xff7f, 0x7f80, 0x7fc1, 0xff81},
    {0x0000, 0x8000, 0x0001, 0x83ff, 0xfbff, 0x7c00, 0x7e01, 0xfc01},
    {0x00, 0x80, 0x01, 0x87, 0xfe, 0x7e, 0x7f, 0xff},
    {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0xff7fffffu, 0x7f800000u,
     0x7fc00001u, 0xff800001u},
};
__attribute__((unused)) static const uint8_t GOLD_CALIB[16] = "seqkv-golden-v1";

__attribute__((unused)) static uint32_t gold_hash(uint32_t k)
{
    k ^= k >> 16;
    k *= 0x7feb352du;
    k ^= k >> 15;
    k *= 0x846ca68bu;
    k ^= k >> 16;
    return k;
}

__attribute__((unused)) static void gold_input(int di, uint32_t i, uint32_t *x, float *mu, float *s)
{
    uint32_t h1 = gold_hash(3 * i), h2 = gold_hash(3 * i + 1), h3 = gold_hash(3 * i + 2);
    int e = GOLD_EMIN[di] + (int)(h1 % (uint32_t)(GOLD_EMAX[di] - GOLD_EMIN[di] + 1));
    float m = ldexpf(1.0f + (float)((h1 >> 8) & 255) / 256.0f, e);
    if (h1 >> 31)
        m = -m;
    if (i % 16 == 0)
        m = 0.0f;
    float sv = ldexpf(1.0f + (float)((h2 >> 8) & 7) / 8.0f, e + (int)(h2 % 41) - 30);
    float z = (float)((int)(h3 & 63) - 32) / 8.0f;
    float v = m + sv * z;
    uint32_t xv;
    switch (GOLD_DT[di]) {
    case SEQKV_DT_BF16: xv = skv_f32_to_bf16(v); break;
    case SEQKV_DT_F16: xv = skv_f32_to_f16(v); break;
    case SEQKV_DT_F8E4M3: xv = skv_f32_to_f8e4m3(v); break;
    default: xv = skv_f32_bits(v); break;
    }
    if (i % 25 == 7)
        xv = GOLD_DT[di] == SEQKV_DT_F32 ? h3 : GOLD_DT[di] == SEQKV_DT_F8E4M3 ? (h3 & 0xff) : (h3 & 0xffff);
    else if (i % 25 == 13)
        xv = GOLD_SPECIAL[di][(i / 25) % 8];
    if (i % 50 == 21)
        m *= 4096.0f;
    *x = xv;
    *mu = m;
    *s = sv;
}

#endif
