/* RoPE as the engine applies it, for the codebook feature: K rows are
 * learned before RoPE and rotated to the position they predict. Inline:
 * the coder's per-row loops call these. */
#ifndef SKV_DELTA_ROPE_H
#define SKV_DELTA_ROPE_H

#include "delta_int.h"

/* Whether rope_row_sc rotates four lanes at a time (and rope_cs applies) */
static inline int rope_lanes(const skv_calib *c)
{
#ifdef __SSE2__
    const int half = c->sh.rope_dim / 2;
    return c->rope_known && c->sh.rope_layout == SKV_ROPE_PAIR && half % 2 == 0 && half <= 128 &&
           c->sh.head_dim % 4 == 0;
#else
    (void)c;
    return 0;
#endif
}

/* The four-lane factors of position sc (rope_angles' sin, cos pairs),
 * rotating to it (sign +1) or back (-1), into cs: cc then ss, rope_dim
 * floats each (x*cc + swap(x)*ss with ss = (-s, s): a - b is a + (-b),
 * and x0*s + x1*co commutes, so the same bits as the pairs one by one) */
static inline void rope_cs(const skv_calib *c, const float *sc, int sign, float *cs)
{
    const int half = c->sh.rope_dim / 2;
    for (int i = 0; i < half; i++) {
        const float s = sign > 0 ? sc[2 * i] : -sc[2 * i];
        cs[2 * i] = cs[2 * i + 1] = sc[2 * i + 1];
        cs[2 * half + 2 * i] = -s, cs[2 * half + 2 * i + 1] = s;
    }
}

/* out = the K row v rotated with the factors cs (rope_cs), four lanes at
 * a time (out may be v) */
static inline void rope_row_cs(const skv_calib *c, const float *v, const float *cs, float *out)
{
#ifdef __SSE2__
    const int half = c->sh.rope_dim / 2, D = c->sh.head_dim, H = c->sh.kv_heads;
    for (int h = 0; h < H; h++) {
        const float *x = v + (size_t)h * D;
        float *o = out + (size_t)h * D;
        int j = 0;
        for (; j < 2 * half; j += 4) {
            __m128 xv = _mm_loadu_ps(x + j);
            __m128 sw = _mm_shuffle_ps(xv, xv, _MM_SHUFFLE(2, 3, 0, 1));
            _mm_storeu_ps(o + j, _mm_add_ps(_mm_mul_ps(xv, _mm_loadu_ps(cs + j)),
                                            _mm_mul_ps(sw, _mm_loadu_ps(cs + 2 * half + j))));
        }
        for (; j < D; j++)
            o[j] = x[j];
    }
#else
    (void)c, (void)v, (void)cs, (void)out;
#endif
}

/* Rotate every head of a K row (C channels) to position pos (sign = +1) or
 * back from it (sign = -1), as the engine does. */
static inline void rope_angles(const skv_calib *c, size_t pos, int i, float *s, float *co)
{
    float ang = (float)pos * c->inv_freq[i];
    double sd, cd;
    skv_sincos((double)ang, &sd, &cd);
    *s = (float)sd;
    *co = (float)cd;
}

/* sc: NULL, or rope_angles of pos for every i (sin, cos pairs), as made
 * once per sequence by the coder */
static inline void rope_row_sc(const skv_calib *c, float *v, size_t pos, int sign, const float *sc)
{
    if (!c->rope_known)
        return;
    /* the shape in locals: the stores to v could alias c for all the
     * compiler knows (-fno-strict-aliasing) */
    const int half = c->sh.rope_dim / 2, H = c->sh.kv_heads, pair = c->sh.rope_layout == SKV_ROPE_PAIR;
    if (sc && rope_lanes(c)) { /* adjacent pairs four lanes at a time */
        float cs[512];
        rope_cs(c, sc, sign, cs);
        rope_row_cs(c, v, cs, v);
        return;
    }
    const int D = c->sh.head_dim;
    for (int i = 0; i < half; i++) {
        float sn, co;
        if (sc)
            sn = sc[2 * i], co = sc[2 * i + 1];
        else
            rope_angles(c, pos, i, &sn, &co);
        const float s = sign > 0 ? sn : -sn;
        const int a = pair ? 2 * i : i, b = pair ? 2 * i + 1 : i + half;
        for (int h = 0; h < H; h++) {
            float *x = v + (size_t)h * D;
            const float x0 = x[a], x1 = x[b];
            x[a] = x0 * co - x1 * s;
            x[b] = x0 * s + x1 * co;
        }
    }
}

static inline void rope_row(const skv_calib *c, float *v, size_t pos, int sign)
{
    rope_row_sc(c, v, pos, sign, NULL);
}

#endif
