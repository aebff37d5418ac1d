/*
 * lossy_baselines.c - the quantisers the lossy levels are compared with,
 * at the same coded bits: plain per-channel round-to-nearest (RTN), a
 * KIVI-style one (K per channel in groups of 32 positions, V per token),
 * and scalar quantisation in the levels' own transformed domain (SQ).
 * Indices are counted at their empirical entropy over the test set (a
 * table fitted to the test set itself: a bound no real coder of theirs
 * reaches), side information (fp16 minimum and maximum) as stored.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lossy_bench.h"

#define KIVI_GROUP 32
#define SQ_MAXQ 2047

/* Empirical entropy of per-context histograms of nbins. */
typedef struct {
    size_t ctx, nbins;
    uint32_t *h;
} hists;

static int hists_init(hists *hs, size_t ctx, size_t nbins)
{
    hs->ctx = ctx;
    hs->nbins = nbins;
    hs->h = calloc(ctx * nbins, sizeof(uint32_t));
    return hs->h ? 0 : -1;
}

static double hists_bits(const hists *hs)
{
    double bits = 0.0;
    for (size_t c = 0; c < hs->ctx; c++) {
        const uint32_t *h = hs->h + c * hs->nbins;
        double tot = 0.0;
        for (size_t i = 0; i < hs->nbins; i++)
            tot += h[i];
        for (size_t i = 0; i < hs->nbins; i++)
            if (h[i])
                bits -= h[i] * log2(h[i] / tot);
    }
    return bits;
}

static float f16r(float x) { return skv_f16_to_f32(skv_f32_to_f16(x)); }

static float dtr(seqkv_dtype dt, float x)
{
    uint8_t b[4];
    float y;
    skv_cast_from_f32(dt, b, &x, 1);
    skv_cast_to_f32(dt, &y, b, 1);
    return y;
}

/* Uniform quantiser of nl levels over [mn, mx] (fp16 side information). */
static float uq(float x, float mn, float mx, int nl, uint32_t *idx)
{
    const float sc = (mx - mn) / (float)(nl - 1);
    long q = sc > 0.0f ? lroundf((x - mn) / sc) : 0;
    q = q < 0 ? 0 : q >= nl ? nl - 1 : q;
    *idx = (uint32_t)q;
    return mn + (float)q * sc;
}

static void range_of(const float *x, size_t n, size_t stride, float *mn, float *mx)
{
    float a = INFINITY, b = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        const float v = x[i * stride];
        a = v < a ? v : a;
        b = v > b ? v : b;
    }
    *mn = f16r(a);
    *mx = f16r(b);
    if (*mx < b) /* keep the maximum inside the range after rounding */
        *mx = skv_f16_to_f32((uint16_t)(skv_f32_to_f16(b) + (b > 0 ? 1 : -1)));
}

double lb_quantise(const lb_set *s, lb_kind kind, double p, const skv_lossy_cal *cal, float **rk,
                   float **rv)
{
    const int L = s->L, H = s->H, D = s->D, kvd = H * D;
    const int nl = (int)p;
    hists hs;
    if (hists_init(&hs, (size_t)L * 2 * kvd, kind == LB_SQ ? 2 * SQ_MAXQ + 1 : (size_t)nl))
        return -1.0;
    double side = 0.0, scalars = 0.0;
    size_t clamped = 0;
    for (size_t i = 0; i < s->n_seq; i++) {
        const lb_seq *q = &s->seq[i];
        const size_t n = q->n, lo = lb_lo(s, n), hi = lb_hi(s, n);
        scalars += (double)(hi - lo) * L * 2 * kvd;
        for (int l = 0; l < L; l++)
            for (int kv = 0; kv < 2; kv++) {
                const float *X = (kv ? q->v : q->k) + (size_t)l * n * kvd;
                float *R = rk ? (kv ? rv[i] : rk[i]) + (size_t)l * n * kvd : NULL;
                uint32_t *hb = hs.h + ((size_t)l * 2 + kv) * kvd * hs.nbins;
                if (R) /* the window as stored */
                    for (size_t t = 0; t < n; t++)
                        if (t < lo || t >= hi)
                            memcpy(R + t * kvd, X + t * kvd, (size_t)kvd * sizeof(float));
                if (hi == lo)
                    continue;
                if (kind == LB_SQ) {
                    for (int h = 0; h < H; h++) {
                        const float *T = skv_lossy_transform(cal, l, kv, h, 0);
                        const float *Ti = skv_lossy_transform(cal, l, kv, h, 1);
                        for (size_t t = lo; t < hi; t++) {
                            float y[SKV_LOSSY_DMAX], x[SKV_LOSSY_DMAX];
                            const float *xi = X + t * kvd + (size_t)h * D;
                            for (int a = 0; a < D; a++) {
                                float acc = 0.0f;
                                for (int b = 0; b < D; b++)
                                    acc += T[a * D + b] * xi[b];
                                long qq = lround(acc / p);
                                if (qq < -SQ_MAXQ || qq > SQ_MAXQ)
                                    clamped++;
                                qq = qq < -SQ_MAXQ ? -SQ_MAXQ : qq > SQ_MAXQ ? SQ_MAXQ : qq;
                                hb[((size_t)h * D + a) * hs.nbins + (size_t)(qq + SQ_MAXQ)]++;
                                y[a] = (float)((double)qq * p);
                            }
                            if (!R)
                                continue;
                            for (int a = 0; a < D; a++) {
                                float acc = 0.0f;
                                for (int b = 0; b < D; b++)
                                    acc += Ti[a * D + b] * y[b];
                                x[a] = acc;
                            }
                            for (int a = 0; a < D; a++)
                                R[t * kvd + (size_t)h * D + a] = dtr(s->dt, x[a]);
                        }
                    }
                } else if (kind == LB_RTN || kv == 0) {
                    /* per channel: over the whole range (RTN) or groups (KIVI's K) */
                    const size_t g = kind == LB_RTN ? hi - lo : KIVI_GROUP;
                    for (int c = 0; c < kvd; c++)
                        for (size_t t0 = lo; t0 < hi; t0 += g) {
                            const size_t t1 = t0 + g < hi ? t0 + g : hi;
                            float mn, mx;
                            range_of(X + t0 * kvd + c, t1 - t0, (size_t)kvd, &mn, &mx);
                            side += 32.0;
                            for (size_t t = t0; t < t1; t++) {
                                uint32_t id;
                                const float r = uq(X[t * kvd + c], mn, mx, nl, &id);
                                hb[(size_t)c * hs.nbins + id]++;
                                if (R)
                                    R[t * kvd + c] = dtr(s->dt, r);
                            }
                        }
                } else {
                    /* KIVI's V: per token, over the layer's channels */
                    for (size_t t = lo; t < hi; t++) {
                        float mn, mx;
                        range_of(X + t * kvd, (size_t)kvd, 1, &mn, &mx);
                        side += 32.0;
                        for (int c = 0; c < kvd; c++) {
                            uint32_t id;
                            const float r = uq(X[t * kvd + c], mn, mx, nl, &id);
                            hb[(size_t)c * hs.nbins + id]++;
                            if (R)
                                R[t * kvd + c] = dtr(s->dt, r);
                        }
                    }
                }
            }
    }
    double bits = (hists_bits(&hs) + side) / (scalars > 0 ? scalars : 1.0);
    free(hs.h);
    if (clamped) /* a step this fine does not fit the index range: as if too many bits */
        bits = INFINITY;
    return bits;
}

double lb_match(const lb_set *s, lb_kind kind, double bits, const skv_lossy_cal *cal, float **rk,
                float **rv, double *param)
{
    double best = 0.0, got = 0.0;
    if (kind == LB_SQ) { /* the step: bits fall as it grows */
        double lo = -30.0, hi = 30.0;
        for (int it = 0; it < 50; it++) {
            const double mid = 0.5 * (lo + hi);
            if (lb_quantise(s, kind, exp2(mid), cal, NULL, NULL) > bits)
                lo = mid;
            else
                hi = mid;
        }
        best = exp2(0.5 * (lo + hi));
    } else { /* levels: bits grow with them */
        long lo = 2, hi = 1 << 12;
        while (hi - lo > 1) {
            const long mid = (lo + hi) / 2;
            if (lb_quantise(s, kind, (double)mid, cal, NULL, NULL) > bits)
                hi = mid;
            else
                lo = mid;
        }
        /* the nearer of the two around the bits */
        const double blo = lb_quantise(s, kind, (double)lo, cal, NULL, NULL);
        const double bhi = lb_quantise(s, kind, (double)hi, cal, NULL, NULL);
        best = fabs(bhi - bits) < fabs(blo - bits) ? (double)hi : (double)lo;
    }
    got = lb_quantise(s, kind, best, cal, rk, rv);
    *param = best;
    return got;
}
