/* Fitting stat's atoms: per (layer, k/v, channel), the values calibration
 * saw often enough, with the lambda that codes them shortest. */
#include <stdlib.h>
#include <string.h>

#include "delta_int.h"

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

/* The scratch of fit_atoms: a channel's N samples (xs, their seen-class
 * in seen, sorted copy srt, cost g) and its candidate atoms (pairs) */
typedef struct {
    uint32_t *xs, *srt, *pairs;
    double *g;
    uint8_t *seen;
    size_t cap; /* of c->at_val and c->at_cnt */
} atom_bufs;

/* The candidate atoms of the n samples xs: (value, count) pairs in
 * pairs, by value, of the values seen at least ATOM_MIN_COUNT times (the
 * SKV_ATOMS_MAX most frequent); returns how many */
static size_t candidate_atoms(atom_bufs *b, size_t n)
{
    uint32_t *srt = b->srt, *pairs = b->pairs;
    memcpy(srt, b->xs, n * sizeof *srt);
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
    if (k == 0)
        return 0;
    if (k > SKV_ATOMS_MAX) {
        qsort(pairs, k, 2 * sizeof *pairs, cmp_by_count);
        k = SKV_ATOMS_MAX;
    }
    qsort(pairs, k, 2 * sizeof *pairs, cmp_u32); /* by value */
    return k;
}

/* The lambda (2^-16 units) of the k atoms that codes the channel's n
 * samples shortest, each under the mixture at (mu, sv[seen-class]) or
 * as an atom; 0 when nothing beats the mixture alone */
static uint32_t best_lambda(skv_cmodel *cm, atom_bufs *b, size_t n, size_t k, float mu,
                            const float *sv, size_t C)
{
    /* lambda candidates, 2^-16 units: j/16, then 1 - 2^-j */
    uint32_t lams[21];
    int nl = 0;
    for (int j = 1; j < 16; j++)
        lams[nl++] = (uint32_t)j << 12;
    for (int j = 5; j <= 10; j++)
        lams[nl++] = 65536u - (65536u >> j);
    const uint32_t *pairs = b->pairs, *xs = b->xs;
    uint64_t sum = 0;
    for (size_t j = 0; j < k; j++)
        sum += pairs[2 * j + 1];
    double base = 0, gsum_none = 0;
    size_t n_atom = 0;
    double atom_bits = 0; /* sum of -log2((count - 1) / (sum - 1)) */
    for (size_t i = 0; i < n; i++) {
        skv_cmodel_cost(cm, xs[i], mu, sv[b->seen[i] ? C : 0], &b->g[i], NULL);
        base += b->g[i];
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
            gsum_none += b->g[i];
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
    return best_lam;
}

/* Append the k atoms of b->pairs to c's values and counts */
static int append_atoms(skv_calib *c, atom_bufs *b, size_t k)
{
    if (c->at_total + k > b->cap) {
        size_t nc = b->cap ? 2 * b->cap : 4096;
        while (nc < c->at_total + k)
            nc *= 2;
        uint32_t *v = skv_realloc(c->at_val, nc * sizeof *v);
        if (v)
            c->at_val = v;
        uint32_t *q = skv_realloc(c->at_cnt, nc * sizeof *q);
        if (q)
            c->at_cnt = q;
        if (!v || !q)
            return skv_error(SKV_ERR_NOMEM, "calibration atoms");
        b->cap = nc;
    }
    for (size_t j = 0; j < k; j++) {
        c->at_val[c->at_total + j] = b->pairs[2 * j];
        c->at_cnt[c->at_total + j] = b->pairs[2 * j + 1];
    }
    c->at_total += k;
    return SKV_OK;
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
    int rc = skv_cmodel_create(c->sh.dtype, level_mix(SEQKV_STAT), c->pemp, &cm);
    if (rc)
        return rc;
    atom_bufs b = {skv_malloc((N ? N : 1) * sizeof *b.xs), skv_malloc((N ? N : 1) * sizeof *b.srt),
                   skv_malloc((N ? N : 1) * 2 * sizeof *b.pairs), skv_malloc((N ? N : 1) * sizeof *b.g),
                   skv_malloc(N ? N : 1), 0};
    if (!b.xs || !b.srt || !b.pairs || !b.g || !b.seen)
        rc = skv_error(SKV_ERR_NOMEM, "calibration atoms");
    c->at_total = 0;
    for (size_t l = 0; l < L && !rc; l++)
        for (int kv = 0; kv < 2 && !rc; kv++)
            for (size_t ch = 0; ch < C && !rc; ch++) {
                size_t idx = (l * 2 + (size_t)kv) * C + ch, n = 0;
                for (size_t sq = 0; sq < d->n_seq; sq++)
                    for (size_t t = 0; t < d->T[sq]; t++) {
                        b.seen[n] = calib_count(c, d->row[sq][t]) > 1;
                        b.xs[n++] = d->bits[kv][sq][(l * d->T[sq] + t) * C + ch];
                    }
                c->at_k[idx] = 0;
                c->at_lam[idx] = 0;
                size_t k = candidate_atoms(&b, n);
                if (k == 0)
                    continue;
                const float mu = c->mean[(l * 2 + (size_t)kv) * C + ch];
                const float *sv = c->s[SEQKV_STAT] + (l * 2 + (size_t)kv) * 2 * C + ch;
                uint32_t lam = best_lambda(cm, &b, n, k, mu, sv, C);
                if (!lam || (rc = append_atoms(c, &b, k)))
                    continue;
                c->at_k[idx] = (uint32_t)k;
                c->at_lam[idx] = lam;
            }
    skv_free(b.xs);
    skv_free(b.srt);
    skv_free(b.pairs);
    skv_free(b.g);
    skv_free(b.seen);
    skv_cmodel_free(cm);
    return rc;
}
