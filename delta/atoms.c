/* Fitting stat's atoms. */
#include <stdlib.h>
#include <string.h>

#include "delta_int.h"

/* ---- stat's atoms -------------------------------------------------------------- */

/* A value is an atom of its channel when calibration saw it at least
 * ATOM_MIN_COUNT times (at most SKV_ATOMS_MAX per channel, the most frequent). */
#define ATOM_MIN_COUNT 2

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* (value, count) pairs: by count descending, then value */
static int cmp_by_count(const void *a, const void *b)
{
    const uint32_t *x = a, *y = b;
    if (x[1] != y[1])
        return x[1] > y[1] ? -1 : 1;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Atoms of stat per (layer, k/v, channel), with lambda chosen by the
 * measured code length of the calibration samples, each coded against the
 * counts of the others (leave one out): an atom symbol costs
 * -log2(lambda * (count - 1) / (sum - 1)), any other scalar -log2(1 - lambda)
 * plus its cost under the mixture; lambda = 0 (no atoms, no atom symbol)
 * when nothing beats the mixture alone. Layer 0's V is a function of the
 * token alone, so its channels take few distinct values. */
int fit_atoms(skv_calib *c, const calib_data *d)
{
    const size_t L = (size_t)c->sh.layers, C = chan_count(&c->sh);
    size_t N = 0;
    for (size_t i = 0; i < d->n_seq; i++)
        N += d->T[i];
    skv_cmodel *cm;
    int rc = skv_cmodel_create(c->sh.dtype, level_mix(SKV_LEVEL_STAT), c->pemp, &cm);
    if (rc)
        return rc;
    uint32_t *xs = skv_malloc((N ? N : 1) * sizeof *xs), *srt = skv_malloc((N ? N : 1) * sizeof *srt);
    uint32_t *pairs = skv_malloc((N ? N : 1) * 2 * sizeof *pairs);
    double *g = skv_malloc((N ? N : 1) * sizeof *g);
    uint8_t *seen = skv_malloc(N ? N : 1);
    size_t cap = 0;
    if (!xs || !srt || !pairs || !g || !seen)
        rc = skv_error(SKV_ERR_NOMEM, "calibration atoms");
    /* lambda candidates, 2^-16 units: j/16, then 1 - 2^-j */
    uint32_t lams[21];
    int nl = 0;
    for (int j = 1; j < 16; j++)
        lams[nl++] = (uint32_t)j << 12;
    for (int j = 5; j <= 10; j++)
        lams[nl++] = 65536u - (65536u >> j);
    c->at_total = 0;
    for (size_t l = 0; l < L && !rc; l++)
        for (int kv = 0; kv < 2 && !rc; kv++)
            for (size_t ch = 0; ch < C && !rc; ch++) {
                size_t idx = (l * 2 + (size_t)kv) * C + ch, n = 0;
                for (size_t sq = 0; sq < d->n_seq; sq++)
                    for (size_t t = 0; t < d->T[sq]; t++) {
                        seen[n] = c->cb_n[d->tok[sq][t]] > 1;
                        xs[n++] = d->bits[kv][sq][(l * d->T[sq] + t) * C + ch];
                    }
                memcpy(srt, xs, n * sizeof *srt);
                qsort(srt, n, sizeof *srt, cmp_u32);
                size_t k = 0;
                for (size_t i = 0; i < n;) {
                    size_t j = i;
                    while (j < n && srt[j] == srt[i])
                        j++;
                    if (j - i >= ATOM_MIN_COUNT) {
                        pairs[2 * k] = srt[i];
                        pairs[2 * k + 1] = (uint32_t)(j - i);
                        k++;
                    }
                    i = j;
                }
                c->at_k[idx] = 0;
                c->at_lam[idx] = 0;
                if (k == 0)
                    continue;
                if (k > SKV_ATOMS_MAX) {
                    qsort(pairs, k, 2 * sizeof *pairs, cmp_by_count);
                    k = SKV_ATOMS_MAX;
                }
                qsort(pairs, k, 2 * sizeof *pairs, cmp_u32); /* by value */
                uint64_t sum = 0;
                for (size_t j = 0; j < k; j++)
                    sum += pairs[2 * j + 1];
                const float mu = c->mean[(l * 2 + (size_t)kv) * C + ch];
                const float *sv = c->s[SKV_LEVEL_STAT] + (l * 2 + (size_t)kv) * 2 * C + ch;
                double base = 0, gsum_none = 0;
                size_t n_atom = 0;
                double atom_bits = 0; /* sum of -log2((count - 1) / (sum - 1)) */
                for (size_t i = 0; i < n; i++) {
                    skv_cmodel_cost(cm, xs[i], mu, sv[seen[i] ? C : 0], &g[i], NULL);
                    base += g[i];
                    size_t lo = 0, hi = k; /* the value's atom, if any */
                    while (lo < hi) {
                        size_t mid = (lo + hi) / 2;
                        if (pairs[2 * mid] < xs[i])
                            lo = mid + 1;
                        else
                            hi = mid;
                    }
                    uint32_t cnt = lo < k && pairs[2 * lo] == xs[i] ? pairs[2 * lo + 1] : 0;
                    if (cnt > ATOM_MIN_COUNT) { /* still an atom without this sample */
                        n_atom++;
                        atom_bits -= skv_log((double)(cnt - 1) / (double)(sum - 1)) / 0.69314718055994530942;
                    } else {
                        gsum_none += g[i];
                    }
                }
                double best = base;
                uint32_t best_lam = 0;
                for (int j = 0; j < nl; j++) {
                    double lam = (double)lams[j] / 65536.0;
                    double tot = atom_bits - (double)n_atom * skv_log(lam) / 0.69314718055994530942 +
                                 gsum_none - (double)(n - n_atom) * skv_log(1.0 - lam) / 0.69314718055994530942;
                    if (tot < best) {
                        best = tot;
                        best_lam = lams[j];
                    }
                }
                if (!best_lam)
                    continue;
                if (c->at_total + k > cap) {
                    size_t nc = cap ? 2 * cap : 4096;
                    while (nc < c->at_total + k)
                        nc *= 2;
                    uint32_t *v = skv_realloc(c->at_val, nc * sizeof *v);
                    if (v)
                        c->at_val = v;
                    uint32_t *q = skv_realloc(c->at_cnt, nc * sizeof *q);
                    if (q)
                        c->at_cnt = q;
                    if (!v || !q) {
                        rc = skv_error(SKV_ERR_NOMEM, "calibration atoms");
                        break;
                    }
                    cap = nc;
                }
                for (size_t j = 0; j < k; j++) {
                    c->at_val[c->at_total + j] = pairs[2 * j];
                    c->at_cnt[c->at_total + j] = pairs[2 * j + 1];
                }
                c->at_total += k;
                c->at_k[idx] = (uint32_t)k;
                c->at_lam[idx] = best_lam;
            }
    skv_free(xs);
    skv_free(srt);
    skv_free(pairs);
    skv_free(g);
    skv_free(seen);
    skv_cmodel_free(cm);
    return rc;
}
