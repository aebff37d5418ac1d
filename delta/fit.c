/* Fitting one level's predictor: blend weights by least squares and
 * each channel's spread s by measured code length. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "predict.h"

/* Solve the NF x NF system A w = b (A symmetric) by Gaussian elimination
 * with partial pivoting; unused features have zero rows and get w = 0. */
static void solve(double A[NF][NF], double b[NF], const int *use, float *w)
{
    double M[NF][NF + 1];
    int idx[NF], n = 0;
    for (int i = 0; i < NF; i++)
        if (use[i])
            idx[n++] = i;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++)
            M[i][j] = A[idx[i]][idx[j]] + (i == j ? 1e-6 * (A[idx[i]][idx[i]] + 1e-12) : 0);
        M[i][n] = b[idx[i]];
    }
    for (int col = 0; col < n; col++) {
        int piv = col;
        for (int r = col + 1; r < n; r++)
            if (fabs(M[r][col]) > fabs(M[piv][col]))
                piv = r;
        for (int j = 0; j <= n; j++) {
            double t = M[col][j];
            M[col][j] = M[piv][j];
            M[piv][j] = t;
        }
        if (fabs(M[col][col]) < 1e-300)
            continue;
        for (int r = 0; r < n; r++) {
            if (r == col)
                continue;
            double f = M[r][col] / M[col][col];
            for (int j = col; j <= n; j++)
                M[r][j] -= f * M[col][j];
        }
    }
    for (int i = 0; i < NF; i++)
        w[i] = 0.0f;
    for (int i = 0; i < n; i++)
        w[idx[i]] = fabs(M[i][i]) < 1e-300 ? 0.0f : (float)(M[i][n] / M[i][i]);
}

/* Total coded size (bits) of every step-th of the samples under spread s */
static double total_cost(skv_cmodel *cm, const uint32_t *x, const float *mu, size_t n, size_t step,
                         float s)
{
    double tot = 0;
    for (size_t i = 0; i < n; i += step) {
        double a;
        skv_cmodel_cost(cm, x[i], mu[i], s, &a, NULL);
        tot += a;
    }
    return tot;
}

/* s = base * 2^(u/8): the grid fit_s searches */
static float grid_s(double base, int u)
{
    return (float)(base * skv_exp(0.08664339 * u));
}

/* Choose s for one channel: the candidate with the smallest total coded
 * size over the samples (x bits, mu) on a grid of steps of 2^(1/8) from
 * 2^-20 to 2^4 times the residual RMS (three steps past either end, as the
 * sweep before it reached): a sweep by steps of 4 on at most 256 of the
 * samples (13 points: where the optimum is, which for a near-exact
 * predictor is far below the RMS), then on all of them the best point and
 * a descent by steps of 2, 2^(1/2), 2^(1/4) and 2^(1/8) (9 evaluations;
 * the code length is smooth in s near its minimum). A sweep of every
 * 2^(1/2) and a refinement took 55 evaluations of all the samples. The
 * sweep on fewer samples (64) misplaced near-exact predictors' optimum. */
static float fit_s(skv_cmodel *cm, const uint32_t *x, const float *mu, size_t n, double rms,
                   double typical)
{
    double base = rms > 0 ? rms : typical;
    if (!(base > 0))
        base = 1e-3;
    const int lo = -160, hi = 32;
    const size_t sub = n > 256 ? n / 256 : 1;
    double best = INFINITY;
    int c = 0;
    for (int u = lo; u <= hi; u += 16) {
        double tot = total_cost(cm, x, mu, n, sub, grid_s(base, u));
        if (tot < best)
            best = tot, c = u;
    }
    best = total_cost(cm, x, mu, n, 1, grid_s(base, c));
    for (int h = 8; h >= 1; h /= 2) {
        const int at = c;
        for (int sgn = -1; sgn <= 1; sgn += 2) {
            const int u = at + sgn * h;
            if (u < lo - 3 || u > hi + 3)
                continue;
            double tot = total_cost(cm, x, mu, n, 1, grid_s(base, u));
            if (tot < best)
                best = tot, c = u;
        }
    }
    return grid_s(base, c);
}

/* Calibration sample (window sq, layer l, kv, row t): its exact row into
 * cur, the previous row into prev (t > 0) and the leave-one-out codebook
 * row into cbf (self is scratch for the row before RoPE) */
static void loo_features(const skv_calib *c, const calib_data *d, size_t sq, size_t l, int kv,
                         size_t t, float *cur, float *prev, float *self, float *cbf)
{
    const size_t C = chan_count(&c->sh);
    cd_row(d, kv, sq, l, t, C, cur);
    if (t)
        cd_row(d, kv, sq, l, t - 1, C, prev);
    memcpy(self, cur, C * sizeof(float));
    if (kv == 0)
        rope_row(c, self, d->pos0[sq] + t, -1);
    cb_feature(c, (int)l, kv, d->row[sq][t], d->pos0[sq] + t, self, cbf);
}

/* The four features of channel ch of that sample, as the coder sees them:
 * model, previous position, codebook, mean. */
static inline void features(const skv_calib *c, const calib_data *d, float *const *model_pred,
                            size_t sq, size_t l, int kv, size_t t, size_t ch, const float *prev,
                            const float *cbf, float f[NF])
{
    const size_t C = chan_count(&c->sh), T = d->T[sq];
    const float *mean = c->mean + (l * 2 + (size_t)kv) * C;
    f[0] = model_pred ? model_pred[sq][(l * T + t) * C + ch] : 0.0f;
    f[1] = t ? prev[ch] : mean[ch];
    f[2] = cbf[ch];
    f[3] = mean[ch];
}

/* One parameter group of a level: (layer l, kv, head h, seen-class), with
 * the samples' buffers (xs, mus: ns samples a channel of the head) */
typedef struct {
    skv_calib *c;
    const calib_data *d;
    seqkv_level lvl;
    float *const *model_pred; /* [sq][L][T][C] of this kv, or NULL */
    size_t l, h, seen;
    int kv;
    size_t ns;
    uint32_t *xs;
    float *mus, *cbf, *self, *cur, *prev;
    double *res2, *mag;
    size_t *cnt;
} fit_group;

/* Whether sample (sq, t) is of the group's seen-class (leave-one-out:
 * "seen" means another occurrence exists) */
static int group_has(const fit_group *g, size_t sq, size_t t)
{
    return (size_t)(calib_count(g->c, g->d->row[sq][t]) > 1) == g->seen;
}

/* 1) the group's weights w by least squares (leave-one-out codebook);
 * returns the number of the group's samples */
static size_t fit_weights(const fit_group *g, const int use[NF], float *w)
{
    const skv_calib *c = g->c;
    const calib_data *d = g->d;
    const size_t D = (size_t)c->sh.head_dim;
    double A[NF][NF] = {{0}}, bvec[NF] = {0};
    size_t nsamp = 0;
    for (size_t sq = 0; sq < d->n_seq; sq++) {
        size_t T = d->T[sq];
        for (size_t t = d->first[sq]; t < T; t++) {
            if (!group_has(g, sq, t))
                continue;
            nsamp++;
            if (g->lvl == SEQKV_STAT)
                continue;
            loo_features(c, d, sq, g->l, g->kv, t, g->cur, g->prev, g->self, g->cbf);
            for (size_t dd = 0; dd < D; dd++) {
                size_t ch = g->h * D + dd;
                float f4[NF];
                features(c, d, g->model_pred, sq, g->l, g->kv, t, ch, g->prev, g->cbf, f4);
                double f[NF] = {f4[0], f4[1], f4[2], f4[3]};
                for (int i = 0; i < NF; i++) {
                    for (int j = 0; j < NF; j++)
                        A[i][j] += f[i] * f[j];
                    bvec[i] += f[i] * g->cur[ch];
                }
            }
        }
    }
    if (g->lvl == SEQKV_STAT || nsamp == 0) {
        memset(w, 0, NF * sizeof *w);
        w[3] = 1.0f;
        if (nsamp == 0 && g->lvl != SEQKV_STAT && g->seen == 1)
            memcpy(w, w - NF, NF * sizeof *w); /* no seen samples: as unseen */
    } else {
        solve(A, bvec, use, w);
    }
    return nsamp;
}

/* 2) s per channel of the group by measured code length on a subsample
 * of its nsamp samples, predicted with w */
static void fit_spreads(const fit_group *g, skv_cmodel *cm, const float *w, size_t nsamp,
                        int max_samples)
{
    const skv_calib *c = g->c;
    const calib_data *d = g->d;
    const size_t C = chan_count(&c->sh), D = (size_t)c->sh.head_dim, ns = g->ns, l = g->l;
    const int kv = g->kv;
    size_t st = nsamp > (size_t)max_samples ? (nsamp + (size_t)max_samples - 1) / (size_t)max_samples : 1;
    for (size_t dd = 0; dd < D; dd++)
        g->res2[dd] = g->mag[dd] = 0, g->cnt[dd] = 0;
    size_t n_in = 0;
    for (size_t sq = 0; sq < d->n_seq; sq++) {
        size_t T = d->T[sq];
        for (size_t t = d->first[sq]; t < T; t++) {
            if (!group_has(g, sq, t))
                continue;
            if (n_in++ % st || g->cnt[0] >= ns)
                continue;
            loo_features(c, d, sq, l, kv, t, g->cur, g->prev, g->self, g->cbf);
            for (size_t dd = 0; dd < D; dd++) {
                size_t ch = g->h * D + dd;
                float f4[NF];
                features(c, d, g->model_pred, sq, l, kv, t, ch, g->prev, g->cbf, f4);
                float mu = predict(w, f4[0], f4[1], f4[2], f4[3]);
                size_t k = g->cnt[dd]++;
                g->xs[dd * ns + k] = cd_bits(d, kv, sq, (l * T + t) * C + ch);
                g->mus[dd * ns + k] = mu;
                double e = (double)g->cur[ch] - mu;
                g->res2[dd] += e * e;
                g->mag[dd] += fabs((double)g->cur[ch]);
            }
        }
    }
    float *sv = c->s[g->lvl] + ((l * 2 + (size_t)kv) * 2 + g->seen) * C;
    for (size_t dd = 0; dd < D; dd++) {
        size_t n = g->cnt[dd], ch = g->h * D + dd;
        double rms = n ? sqrt(g->res2[dd] / (double)n) : 0;
        double typ = n ? g->mag[dd] / (double)n / 128.0 : 1e-3;
        if (n == 0 && g->seen == 1)
            sv[ch] = sv[ch - C]; /* as unseen */
        else
            sv[ch] = n ? fit_s(cm, g->xs + dd * ns, g->mus + dd * ns, n, rms, typ) : 1.0f;
    }
}

/* The groups (layer, kv, head) of a level, one at a time to whichever
 * thread of the pool is free: each fits both seen-classes of its group
 * with buffers and a coding model of its own; the groups write disjoint
 * parameters, so the result does not depend on the threads */
typedef struct {
    skv_calib *c;
    const calib_data *d;
    seqkv_level lvl;
    float *const *const *model_pred;
    const int *use;
    int max_samples;
    size_t ns;
    const int *stop;
    skv_cmodel *cm; /* (shared: its tables are made once, under its lock) */
    int *rc;        /* per group */
} fit_job;

static int fit_group_at(const fit_job *j, size_t k)
{
    skv_calib *c = j->c;
    const size_t C = chan_count(&c->sh), H = (size_t)c->sh.kv_heads, D = (size_t)c->sh.head_dim;
    if (calib_stopped(j->stop))
        return SKV_ERR_CANCELLED;
    skv_cmodel *cm = j->cm;
    int rc = SKV_OK;
    fit_group g = {.c = c, .d = j->d, .lvl = j->lvl, .ns = j->ns};
    g.xs = skv_malloc(g.ns * D * sizeof *g.xs);
    g.mus = skv_malloc(g.ns * D * sizeof *g.mus);
    g.cbf = skv_malloc(C * sizeof *g.cbf), g.self = skv_malloc(C * sizeof *g.self);
    g.cur = skv_malloc(C * sizeof *g.cur), g.prev = skv_malloc(C * sizeof *g.prev);
    g.res2 = skv_calloc(D, sizeof *g.res2), g.mag = skv_calloc(D, sizeof *g.mag);
    g.cnt = skv_calloc(D, sizeof *g.cnt);
    if (!g.xs || !g.mus || !g.cbf || !g.self || !g.cur || !g.prev || !g.res2 || !g.mag || !g.cnt)
        rc = SKV_ERR_NOMEM;
    if (!rc) {
        g.l = k / (2 * H);
        g.kv = (int)(k / H % 2);
        g.h = k % H;
        g.model_pred = j->model_pred[g.kv];
        /* Separate parameters for tokens the codebook has seen and for the
         * rest (leave-one-out: "seen" means another occurrence exists), so
         * exact codebook hits cost ~0 bits without pricing unseen tokens
         * as outliers. */
        for (g.seen = 0; g.seen < 2; g.seen++) {
            float *w = c->w[j->lvl] + (((g.l * 2 + (size_t)g.kv) * H + g.h) * 2 + g.seen) * NF;
            size_t nsamp = fit_weights(&g, j->use, w);
            fit_spreads(&g, cm, w, nsamp, j->max_samples);
        }
    }
    skv_free(g.xs);
    skv_free(g.mus);
    skv_free(g.cbf);
    skv_free(g.self);
    skv_free(g.cur);
    skv_free(g.prev);
    skv_free(g.res2);
    skv_free(g.mag);
    skv_free(g.cnt);
    return rc;
}

static void fit_task(void *ctx, size_t b, size_t e, int worker)
{
    (void)worker;
    const fit_job *j = ctx;
    for (size_t k = b; k < e; k++)
        j->rc[k] = fit_group_at(j, k);
}

int fit_level(skv_calib *c, const calib_data *d, seqkv_level lvl, float *const *model_pred[2],
              int max_samples, skv_pool *pool, const skv_calib_opts *o)
{
    const size_t L = (size_t)c->sh.layers, H = (size_t)c->sh.kv_heads;
    int use[NF] = {lvl >= SEQKV_SPEC, lvl >= SEQKV_CTX, lvl >= SEQKV_CTX, 1};
    size_t total = 0;
    for (size_t i = 0; i < d->n_seq; i++)
        total += d->T[i] - d->first[i];
    const size_t ng = L * 2 * H;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int *rcs = skv_calloc(ng, sizeof *rcs);
    if (!rcs)
        return skv_error(SKV_ERR_NOMEM, "calibration");
    fit_job j = {c, d, lvl, (float *const *const *)model_pred, use, max_samples,
                 (total < (size_t)max_samples ? total : (size_t)max_samples) + 2, o->stop, NULL, rcs};
    int rc = skv_cmodel_create(c->sh.dtype, level_mix(lvl), c->pemp, &j.cm);
    if (rc) {
        skv_free(rcs);
        return rc;
    }
    skv_pool_run_any(pool, ng, fit_task, &j);
    skv_cmodel_free(j.cm);
    for (size_t k = 0; k < ng && !rc; k++)
        rc = rcs[k];
    skv_free(rcs);
    /* (a pool thread's words are its own) */
    if (rc == SKV_ERR_NOMEM)
        rc = skv_error(SKV_ERR_NOMEM, "calibration samples");
    else if (rc == SKV_ERR_CANCELLED)
        rc = skv_error(SKV_ERR_CANCELLED, "calibration stopped: the store is being closed");
    else if (rc)
        rc = skv_error(rc, "calibration: fitting %s", seqkv_level_name(lvl));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (!rc && !o->quiet)
        fprintf(stderr, "calibrate: %s fitted (%zu layers, %zu positions, %.1f s)\n",
                seqkv_level_name(lvl), L, total,
                (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    return rc;
}
