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

/* x[0..n) ascending by their low 8 * passes bits (the dtype's: the rest
 * are 0), tmp as scratch: a byte a pass, least significant first */
static void radix_sort(uint32_t *x, uint32_t *tmp, size_t n, int passes)
{
    for (int p = 0; p < passes; p++) {
        size_t cnt[257] = {0};
        const int sh = 8 * p;
        for (size_t i = 0; i < n; i++)
            cnt[((x[i] >> sh) & 255u) + 1]++;
        for (int b = 0; b < 256; b++)
            cnt[b + 1] += cnt[b];
        for (size_t i = 0; i < n; i++)
            tmp[cnt[(x[i] >> sh) & 255u]++] = x[i];
        memcpy(x, tmp, n * sizeof *x);
    }
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
    uint32_t *xs, *srt, *tmp, *pairs;
    double *g;
    const uint8_t *seen;
    int passes; /* bytes a scalar: radix_sort's passes */
} atom_bufs;

/* The candidate atoms of the n samples xs: (value, count) pairs in
 * pairs, by value, of the values seen at least ATOM_MIN_COUNT times (the
 * SKV_ATOMS_MAX most frequent); returns how many */
static size_t candidate_atoms(atom_bufs *b, size_t n)
{
    uint32_t *srt = b->srt, *pairs = b->pairs;
    memcpy(srt, b->xs, n * sizeof *srt);
    radix_sort(srt, b->tmp, n, b->passes);
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

/* The atoms of one (layer, k/v), its channels' in order: (value, count)
 * pairs */
typedef struct {
    uint32_t *pairs;
    size_t n, cap;
} atom_list;

static int list_add(atom_list *a, const uint32_t *pairs, size_t k)
{
    if (a->n + k > a->cap) {
        size_t nc = a->cap ? 2 * a->cap : 1024;
        while (nc < a->n + k)
            nc *= 2;
        uint32_t *p = skv_realloc(a->pairs, nc * 2 * sizeof *p);
        if (!p)
            return SKV_ERR_NOMEM;
        a->pairs = p;
        a->cap = nc;
    }
    memcpy(a->pairs + 2 * a->n, pairs, k * 2 * sizeof *pairs);
    a->n += k;
    return SKV_OK;
}

typedef struct {
    skv_calib *c;
    const calib_data *d;
    const uint8_t *seen; /* [N] every sample's seen-class, in the samples' order */
    size_t N;
    atom_list *lists;    /* [L][2] */
    skv_cmodel *cm;      /* (shared) */
    const int *stop;
    int *rc;             /* [L][2] */
} atoms_job;

/* The atoms of every channel of (layer, k/v) j */
static int atoms_of(const atoms_job *job, size_t j)
{
    skv_calib *c = job->c;
    const calib_data *d = job->d;
    const size_t C = chan_count(&c->sh), N = job->N, l = j / 2;
    const int kv = (int)(j % 2);
    if (calib_stopped(job->stop))
        return SKV_ERR_CANCELLED;
    skv_cmodel *cm = job->cm;
    int rc = SKV_OK;
    atom_bufs b = {skv_malloc((N ? N : 1) * sizeof *b.xs), skv_malloc((N ? N : 1) * sizeof *b.srt),
                   skv_malloc((N ? N : 1) * sizeof *b.tmp),
                   skv_malloc((N ? N : 1) * 2 * sizeof *b.pairs), skv_malloc((N ? N : 1) * sizeof *b.g),
                   job->seen, (int)skv_dtype_size(c->sh.dtype)};
    if (!b.xs || !b.srt || !b.tmp || !b.pairs || !b.g)
        rc = SKV_ERR_NOMEM;
    for (size_t ch = 0; ch < C && !rc; ch++) {
        const size_t idx = j * C + ch;
        size_t n = 0;
        for (size_t sq = 0; sq < d->n_seq; sq++)
            for (size_t t = d->first[sq]; t < d->T[sq]; t++)
                b.xs[n++] = cd_bits(d, kv, sq, (l * d->T[sq] + t) * C + ch);
        c->at_k[idx] = 0;
        c->at_lam[idx] = 0;
        size_t k = candidate_atoms(&b, n);
        if (k == 0)
            continue;
        const float mu = c->mean[idx];
        const float *sv = c->s[SEQKV_STAT] + (l * 2 + (size_t)kv) * 2 * C + ch;
        uint32_t lam = best_lambda(cm, &b, n, k, mu, sv, C);
        if (!lam || (rc = list_add(&job->lists[j], b.pairs, k)))
            continue;
        c->at_k[idx] = (uint32_t)k;
        c->at_lam[idx] = lam;
    }
    skv_free(b.xs);
    skv_free(b.srt);
    skv_free(b.tmp);
    skv_free(b.pairs);
    skv_free(b.g);
    return rc;
}

static void atoms_task(void *ctx, size_t b, size_t e, int worker)
{
    (void)worker;
    const atoms_job *job = ctx;
    for (size_t j = b; j < e; j++)
        job->rc[j] = atoms_of(job, j);
}

/* Atoms of stat per (layer, k/v, channel), with lambda chosen by the
 * measured code length of the calibration samples, each coded against the
 * counts of the others (leave one out): an atom symbol costs
 * -log2(lambda * (count - 1) / (sum - 1)), any other scalar -log2(1 - lambda)
 * plus its cost under the mixture; lambda = 0 (no atoms, no atom symbol)
 * when nothing beats the mixture alone. Layer 0's V is a function of the
 * token alone, so its channels take few distinct values. Each (layer,
 * k/v) on whichever thread of the pool is free; the atoms then go in in
 * channel order. */
int fit_atoms(skv_calib *c, const calib_data *d, skv_pool *pool, const int *stop)
{
    const size_t L = (size_t)c->sh.layers;
    size_t N = 0;
    for (size_t i = 0; i < d->n_seq; i++)
        N += d->T[i] - d->first[i];
    atoms_job job = {c, d, skv_malloc(N ? N : 1), N, skv_calloc(L * 2, sizeof(atom_list)), NULL,
                     stop, skv_calloc(L * 2, sizeof(int))};
    int rc = job.seen && job.lists && job.rc ? SKV_OK : SKV_ERR_NOMEM;
    if (!rc)
        rc = skv_cmodel_create(c->sh.dtype, level_mix(SEQKV_STAT), c->pemp, &job.cm);
    if (!rc) {
        uint8_t *seen = (uint8_t *)job.seen;
        size_t n = 0;
        for (size_t sq = 0; sq < d->n_seq; sq++)
            for (size_t t = d->first[sq]; t < d->T[sq]; t++)
                seen[n++] = calib_count(c, d->row[sq][t]) > 1;
        skv_pool_run_any(pool, L * 2, atoms_task, &job);
        for (size_t j = 0; j < L * 2 && !rc; j++)
            rc = job.rc[j];
    }
    size_t total = 0;
    for (size_t j = 0; !rc && j < L * 2; j++)
        total += job.lists[j].n;
    c->at_total = 0;
    if (!rc && total) {
        c->at_val = skv_malloc(total * sizeof *c->at_val);
        c->at_cnt = skv_malloc(total * sizeof *c->at_cnt);
        if (!c->at_val || !c->at_cnt)
            rc = SKV_ERR_NOMEM;
    }
    for (size_t j = 0; !rc && j < L * 2; j++)
        for (size_t k = 0; k < job.lists[j].n; k++, c->at_total++) {
            c->at_val[c->at_total] = job.lists[j].pairs[2 * k];
            c->at_cnt[c->at_total] = job.lists[j].pairs[2 * k + 1];
        }
    for (size_t j = 0; job.lists && j < L * 2; j++)
        skv_free(job.lists[j].pairs);
    skv_free((void *)job.seen);
    skv_free(job.lists);
    skv_cmodel_free(job.cm);
    skv_free(job.rc);
    if (rc == SKV_ERR_CANCELLED)
        return skv_error(rc, "calibration stopped: the store is being closed");
    return rc ? skv_error(rc, "calibration atoms") : SKV_OK;
}
