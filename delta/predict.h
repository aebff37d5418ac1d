/* The predictors' features and their mix (delta_int.h states the
 * prediction). Inline: the coder's per-row loops call these. */
#ifndef SKV_DELTA_PREDICT_H
#define SKV_DELTA_PREDICT_H

#include "rope.h"

/* Codebook feature row for (l, kv, token's codebook row, position): C
 * floats into out; row -1 (an unseen token) gives the mean. A non-NULL
 * `self` removes one occurrence (that value, pre-RoPE for K) for
 * leave-one-out fitting. */
static inline void cb_feature_sc(const skv_calib *c, int l, int kv, int32_t row, size_t pos,
                          const float *self, const float *sc, const float *cs, float *out)
{
    const size_t C = chan_count(&c->sh);
    const float *mean = c->mean + ((size_t)l * 2 + kv) * C;
    int32_t n = calib_count(c, row);
    if (n - (self ? 1 : 0) <= 0) {
        memcpy(out, mean, C * sizeof(float));
        return;
    }
    const float *e = c->cb + (((size_t)l * c->n_tok + (size_t)row) * 2 + kv) * C;
    if (kv == 0 && cs && !self) { /* rotated straight from the codebook */
        rope_row_cs(c, e, cs, out);
        return;
    }
    if (self) {
        for (size_t i = 0; i < C; i++)
            out[i] = (e[i] * (float)n - self[i]) / (float)(n - 1);
    } else {
        memcpy(out, e, C * sizeof(float));
    }
    if (kv == 0)
        rope_row_sc(c, out, pos, +1, sc);
}

static inline void cb_feature(const skv_calib *c, int l, int kv, int32_t row, size_t pos,
                       const float *self, float *out)
{
    cb_feature_sc(c, l, kv, row, pos, self, NULL, NULL, out);
}

static inline float predict(const float *w, float fm, float fp, float fc, float fmean)
{
    return ((w[0] * fm + w[1] * fp) + w[2] * fc) + w[3] * fmean;
}

typedef float skv_v4f __attribute__((vector_size(16)));
/* predict() over a whole row, four lanes at a time, with each channel's
 * weights (wc: the NF weights of its head, feature after feature, C
 * each): each lane is the same IEEE single-precision products and sums in
 * the same order (no contraction: -ffp-contract=off), so the result is
 * predict()'s bit for bit (the plain path, SEQKV_PLAIN); fm NULL reads as
 * 0. */
static inline void predict_row(const float *wc, size_t C, const float *fm, const float *fp,
                               const float *fc, const float *fmean, float *out)
{
    const float *w0 = wc, *w1 = wc + C, *w2 = wc + 2 * C, *w3 = wc + 3 * C;
    const skv_v4f zero = {0.0f, 0.0f, 0.0f, 0.0f};
    size_t i = 0;
    for (; i + 4 <= C; i += 4) {
        skv_v4f a0, a1, a2, a3, a, b, c, m, r;
        memcpy(&a0, w0 + i, sizeof a0);
        memcpy(&a1, w1 + i, sizeof a1);
        memcpy(&a2, w2 + i, sizeof a2);
        memcpy(&a3, w3 + i, sizeof a3);
        if (fm)
            memcpy(&a, fm + i, sizeof a);
        else
            a = zero;
        memcpy(&b, fp + i, sizeof b);
        memcpy(&c, fc + i, sizeof c);
        memcpy(&m, fmean + i, sizeof m);
        r = ((a0 * a + a1 * b) + a2 * c) + a3 * m;
        memcpy(out + i, &r, sizeof r);
    }
    for (; i < C; i++)
        out[i] = ((w0[i] * (fm ? fm[i] : 0.0f) + w1[i] * fp[i]) + w2[i] * fc[i]) + w3[i] * fmean[i];
}

/* Whether every weight of the model, previous-position and codebook
 * features is +0 (bits), for every head of one seen-class: then, with no
 * model feature and finite previous and codebook features, predict() is
 * predict(w, 0, 0, 0, mean) (every zero term sums to +0), and the codebook
 * feature need not be computed (stat). */
static inline int mean_only(const float *W, size_t H, size_t seen)
{
    for (size_t h = 0; h < H; h++) {
        const float *w = W + (h * 2 + seen) * NF;
        for (int k = 0; k < 3; k++)
            if (skv_f32_bits(w[k]) != 0)
                return 0;
    }
    return 1;
}

#endif
