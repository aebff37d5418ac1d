/* The storage-dtype casts, written once for the C and the CUDA compilers
 * (SKV_HD marks them __host__ __device__ under nvcc) so the GPU path is
 * bit-identical to the CPU path by construction. Integer-only rounding:
 * round to nearest, ties to even. Rules: FORMAT.md "Storage dtypes". */
#ifndef SKV_DTYPE_IMPL_H_
#define SKV_DTYPE_IMPL_H_
#include <stdint.h>

#ifdef __CUDACC__
#define SKV_HD static __host__ __device__ __forceinline__
#else
#define SKV_HD static inline
#endif

SKV_HD uint32_t skv__bits(float f)
{
    union { float f; uint32_t u; } c;
    c.f = f;
    return c.u;
}
SKV_HD float skv__float(uint32_t u)
{
    union { float f; uint32_t u; } c;
    c.u = u;
    return c.f;
}

/* Round the integer m right by `shift` bits (1..31), ties to even. */
SKV_HD uint32_t skv__rshift_rne(uint32_t m, uint32_t shift)
{
    uint32_t k = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (k & 1u)))
        k++;
    return k;
}

SKV_HD uint16_t skv__f32_to_bf16(float x)
{
    uint32_t u = skv__bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep sign + top payload, quiet */
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u); /* RNE; overflow carries into inf */
    return (uint16_t)(u >> 16);
}

SKV_HD float skv__bf16_to_f32(uint16_t h)
{
    return skv__float((uint32_t)h << 16);
}

SKV_HD uint16_t skv__f32_to_f16(float x)
{
    uint32_t u = skv__bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* >= 65520 (incl. inf) rounds to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) { /* normal: >= 2^-14 */
        uint32_t r = a - (112u << 23);
        r += 0xfffu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    uint32_t e = a >> 23;
    if (e < 102u) /* below half the smallest subnormal (2^-25): zero */
        return sign;
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    return (uint16_t)(sign | skv__rshift_rne(m, 126u - e));
}

SKV_HD float skv__f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu)
        return skv__float(sign | 0x7f800000u | (m << 13));
    if (e == 0) { /* zero or subnormal: m * 2^-24, exact */
        float v = (float)m * 5.9604644775390625e-08f;
        return sign ? -v : v;
    }
    return skv__float(sign | ((e + 112u) << 23) | (m << 13));
}

/* OCP FP8 E4M3 ("e4m3fn"): bias 7, no inf, max 448 = 0x7e, NaN = 0x7f. */
SKV_HD uint8_t skv__f32_to_f8e4m3(float x)
{
    uint32_t u = skv__bits(x);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN */
        return (uint8_t)(sign | 0x7fu);
    if (a >= 0x43e00000u) /* >= 448, incl. inf: saturate */
        return (uint8_t)(sign | 0x7eu);
    if (a >= 0x3c800000u) { /* normal: >= 2^-6 */
        uint32_t r = a - (120u << 23);
        r += 0x7ffffu + ((r >> 20) & 1u);
        return (uint8_t)(sign | (r >> 20));
    }
    uint32_t e = a >> 23;
    if (e < 117u) /* below 2^-10, half the smallest subnormal: zero */
        return sign;
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    return (uint8_t)(sign | skv__rshift_rne(m, 141u - e));
}

SKV_HD float skv__f8e4m3_to_f32(uint8_t b)
{
    uint32_t sign = (uint32_t)(b & 0x80u) << 24;
    uint32_t e = (b >> 3) & 0xfu, m = b & 7u;
    if (e == 0xfu && m == 7u)
        return skv__float(sign | 0x7fc00000u);
    if (e == 0) { /* m * 2^-9, exact */
        float v = (float)m * 0.001953125f;
        return sign ? -v : v;
    }
    return skv__float(sign | ((e + 120u) << 23) | (m << 20));
}

#endif
