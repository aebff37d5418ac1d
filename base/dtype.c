#include <ctype.h>
#include <string.h>
#include <strings.h>

#include "skv_dtype_impl.h"
#include "skv_base.h"

size_t skv_dtype_size(seqkv_dtype dt)
{
    switch (dt) {
    case SEQKV_DT_F32: return 4;
    case SEQKV_DT_BF16: return 2;
    case SEQKV_DT_F16: return 2;
    case SEQKV_DT_F8E4M3: return 1;
    case SEQKV_DT_I32: return 4;
    }
    return 0;
}

const char *skv_dtype_name(seqkv_dtype dt)
{
    switch (dt) {
    case SEQKV_DT_F32: return "F32";
    case SEQKV_DT_BF16: return "BF16";
    case SEQKV_DT_F16: return "F16";
    case SEQKV_DT_F8E4M3: return "F8_E4M3";
    case SEQKV_DT_I32: return "I32";
    }
    return "?";
}

static int name_is(const char *s, size_t len, const char *lit)
{
    return strlen(lit) == len && memcmp(s, lit, len) == 0;
}

int skv_dtype_from_name(const char *name, size_t len, seqkv_dtype *out)
{
    static const seqkv_dtype all[] = {SEQKV_DT_F32, SEQKV_DT_BF16, SEQKV_DT_F16,
                                    SEQKV_DT_F8E4M3, SEQKV_DT_I32};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (name_is(name, len, skv_dtype_name(all[i]))) {
            *out = all[i];
            return SKV_OK;
        }
    }
    static const char *const known[] = {"F64", "I64", "U64", "I16", "U16", "I8",
                                        "U8", "BOOL", "F8_E5M2", "U32", "F8_E8M0",
                                        "F4", "F6_E2M3", "F6_E3M2"};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (name_is(name, len, known[i]))
            return skv_error(SKV_ERR_UNSUPPORTED, "dtype %s is not supported", known[i]);
    return skv_error(SKV_ERR_FORMAT, "unknown dtype \"%.*s\"", (int)(len > 32 ? 32 : len), name);
}

int skv_dtype_from_user(const char *name, seqkv_dtype *out)
{
    static const struct { const char *s; seqkv_dtype dt; } map[] = {
        {"bf16", SEQKV_DT_BF16},   {"fp16", SEQKV_DT_F16},    {"f16", SEQKV_DT_F16},
        {"fp8", SEQKV_DT_F8E4M3},  {"f8_e4m3", SEQKV_DT_F8E4M3}, {"fp8-e4m3", SEQKV_DT_F8E4M3},
        {"e4m3", SEQKV_DT_F8E4M3}, {"fp32", SEQKV_DT_F32},    {"f32", SEQKV_DT_F32},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        if (strcasecmp(name, map[i].s) == 0) {
            *out = map[i].dt;
            return SKV_OK;
        }
    }
    return skv_error(SKV_ERR_ARG, "unknown dtype \"%s\" (expected bf16, fp16, fp8 or fp32)", name);
}

uint16_t skv_f32_to_bf16(float x) { return skv__f32_to_bf16(x); }
float skv_bf16_to_f32(uint16_t h) { return skv__bf16_to_f32(h); }
uint16_t skv_f32_to_f16(float x) { return skv__f32_to_f16(x); }
float skv_f16_to_f32(uint16_t h) { return skv__f16_to_f32(h); }
uint8_t skv_f32_to_f8e4m3(float x) { return skv__f32_to_f8e4m3(x); }
float skv_f8e4m3_to_f32(uint8_t b) { return skv__f8e4m3_to_f32(b); }

int skv_cast_from_f32(seqkv_dtype dt, void *dst, const float *src, size_t n)
{
    uint8_t *d = dst;
    switch (dt) {
    case SEQKV_DT_F32:
        for (size_t i = 0; i < n; i++)
            skv_store32_le(d + 4 * i, skv__bits(src[i]));
        return SKV_OK;
    case SEQKV_DT_BF16:
        for (size_t i = 0; i < n; i++)
            skv_store16_le(d + 2 * i, skv__f32_to_bf16(src[i]));
        return SKV_OK;
    case SEQKV_DT_F16:
        for (size_t i = 0; i < n; i++)
            skv_store16_le(d + 2 * i, skv__f32_to_f16(src[i]));
        return SKV_OK;
    case SEQKV_DT_F8E4M3:
        for (size_t i = 0; i < n; i++)
            d[i] = skv__f32_to_f8e4m3(src[i]);
        return SKV_OK;
    default:
        return skv_error(SKV_ERR_ARG, "cannot cast float32 to %s", skv_dtype_name(dt));
    }
}

int skv_cast_to_f32(seqkv_dtype dt, float *dst, const void *src, size_t n)
{
    const uint8_t *s = src;
    switch (dt) {
    case SEQKV_DT_F32:
        for (size_t i = 0; i < n; i++)
            dst[i] = skv__float(skv_load32_le(s + 4 * i));
        return SKV_OK;
    case SEQKV_DT_BF16:
        for (size_t i = 0; i < n; i++)
            dst[i] = skv__bf16_to_f32(skv_load16_le(s + 2 * i));
        return SKV_OK;
    case SEQKV_DT_F16:
        for (size_t i = 0; i < n; i++)
            dst[i] = skv__f16_to_f32(skv_load16_le(s + 2 * i));
        return SKV_OK;
    case SEQKV_DT_F8E4M3:
        for (size_t i = 0; i < n; i++)
            dst[i] = skv__f8e4m3_to_f32(s[i]);
        return SKV_OK;
    default:
        return skv_error(SKV_ERR_ARG, "cannot cast %s to float32", skv_dtype_name(dt));
    }
}
