/* The choice of classification and decoding paths for this CPU
 * (cls_simd: they all give the same bytes), and bf16 classification
 * eight lanes at a time (classify_avx2.h's parts, for cfast.h's
 * fclassify_block and the encoder). */
#include <stdlib.h>
#include <string.h>

#include "classify_avx2.h"

#ifdef SKV_HAVE_CLS8
int skv__cls_simd = -1;

int skv__cls_simd_pick(void)
{
    /* SEQKV_SIMD "0": the scalar path, "2": AVX2 alone (tests, comparisons) */
    const char *e = getenv("SEQKV_SIMD");
    int v = 0;
    if ((!e || strcmp(e, "0") != 0) && __builtin_cpu_supports("avx2")) {
        v = 2;
        if ((!e || strcmp(e, "2") != 0) && __builtin_cpu_supports("avx512f") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512dq"))
            v = 3;
    }
    __atomic_store_n(&skv__cls_simd, v, __ATOMIC_RELAXED);
    return v;
}

__attribute__((target("avx2"))) void skv__cls8_avx2(const float *mu, const float *s, size_t groups,
                                                   skv_cls8 *o)
{
    /* the constants through a pointer the compiler cannot see through: one
     * memory operand per use instead of a broadcast rebuilt in the loop */
    const skv_v8i *K = cls8_k;
    __asm__("" : "+r"(K));
    for (; groups--; mu += 8, s += 8, o++) {
        skv_v8i flag, idx, key, G;
        cls8_group(K, mu, s, &flag, &idx, &key, &G, CLS8_WHOLE);
        memcpy(o->flag, &flag, sizeof flag);
        memcpy(o->idx, &idx, sizeof idx);
        memcpy(o->key, &key, sizeof key);
        memcpy(o->G, &G, sizeof G);
    }
}

__attribute__((target("avx2"))) void skv__cls8_fill_avx2(skv_ftab *const *tabs, const skv_cls8 *o,
                                                        size_t groups, skv_fcls *cls, uint8_t *fix)
{
    for (size_t j = 0; j < groups; j++, o++, cls += 8)
        fix[j] = (uint8_t)fill_group(tabs, o, cls);
}
#endif
