#include <math.h>

#include "skv_base.h"

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void skv_rng_seed(skv_rng *rng, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        rng->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t skv_rng_next(skv_rng *rng)
{
    uint64_t *s = rng->s;
    uint64_t r = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

float skv_rng_uniform(skv_rng *rng)
{
    return (float)(skv_rng_next(rng) >> 40) * (1.0f / 16777216.0f);
}

float skv_rng_normal(skv_rng *rng)
{
    float u1 = skv_rng_uniform(rng);
    float u2 = skv_rng_uniform(rng);
    if (u1 < 1e-7f)
        u1 = 1e-7f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}
