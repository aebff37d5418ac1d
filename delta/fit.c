/* Fitting one level's predictor: blend weights by least squares and
 * each channel's spread s by measured code length. */
#include <math.h>
#include <stdio.h>
#include <string.h>
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

/* Total coded size (bits) of the samples under spread s. */
static double total_cost(skv_cmodel *cm, const uint32_t *x, const float *mu, size_t n, float s)
{
    double tot = 0;
    for (size_t i = 0; i < n; i++) {
        double a;
        skv_cmodel_cost(cm, x[i], mu[i], s, &a, NULL);
        tot += a;
    }
    return tot;
}

/* Choose s for one channel: the candidate with the smallest total coded
 * size over the samples (x bits, mu): a coarse sweep by 2^(1/2) over
 * 2^-20..2^4 times the residual RMS, then steps of 2^(1/8) around the best. */
static float fit_s(skv_cmodel *cm, const uint32_t *x, const float *mu, size_t n, double rms,
                   double typical)
{
    double base = rms > 0 ? rms : typical;
    if (!(base > 0))
        base = 1e-3;
    double best = INFINITY;
    float best_s = (float)base;
    for (int k = -40; k <= 8; k++) {
        float s = (float)(base * skv_exp(0.34657359 * k));
        double tot = total_cost(cm, x, mu, n, s);
        if (tot < best) {
            best = tot;
            best_s = s;
        }
    }
    const float center = best_s;
    for (int k = -3; k <= 3; k++) {
        float s = (float)((double)center * skv_exp(0.08664339 * k));
        double tot = k ? total_cost(cm, x, mu, n, s) : INFINITY;
        if (tot < best) {
            best = tot;
            best_s = s;
        }
    }
    return best_s;
}

/* Calibration sample (sequence sq, layer l, kv, position t): its exact row
 * (returned) and the leave-one-out codebook row (into cbf; self is
 * scratch for the row before RoPE). */
static const float *loo_features(const skv_calib *c, const calib_data *d, size_t sq, size_t l,
                                 int kv, size_t t, float *self, float *cbf)
{
    const size_t C = chan_count(&c->sh), T = d->T[sq];
    const float *row = d->kv[kv][sq] + (l * T + t) * C;
    memcpy(self, row, C * sizeof(float));
    if (kv == 0)
        rope_row(c, self, t, -1);
    cb_feature(c, (int)l, kv, d->row[sq][t], t, self, cbf);
    return row;
}

/* The four features of channel ch of that sample, as the coder sees them:
 * model, previous position, codebook, mean. */
static inline void features(const skv_calib *c, const calib_data *d, float *const *model_pred,
                            size_t sq, size_t l, int kv, size_t t, size_t ch, const float *cbf,
                            float f[NF])
{
    const size_t C = chan_count(&c->sh), T = d->T[sq];
    const float *mean = c->mean + (l * 2 + (size_t)kv) * C;
    f[0] = model_pred ? model_pred[sq][(l * T + t) * C + ch] : 0.0f;
    f[1] = t ? d->kv[kv][sq][(l * T + t - 1) * C + ch] : mean[ch];
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
    float *mus, *cbf, *self;
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
        for (size_t t = 0; t < T; t++) {
            if (!group_has(g, sq, t))
                continue;
            nsamp++;
            if (g->lvl == SEQKV_STAT)
                continue;
            const float *row = loo_features(c, d, sq, g->l, g->kv, t, g->self, g->cbf);
            for (size_t dd = 0; dd < D; dd++) {
                size_t ch = g->h * D + dd;
                float f4[NF];
                features(c, d, g->model_pred, sq, g->l, g->kv, t, ch, g->cbf, f4);
                double f[NF] = {f4[0], f4[1], f4[2], f4[3]};
                for (int i = 0; i < NF; i++) {
                    for (int j = 0; j < NF; j++)
                        A[i][j] += f[i] * f[j];
                    bvec[i] += f[i] * row[ch];
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
        for (size_t t = 0; t < T; t++) {
            if (!group_has(g, sq, t))
                continue;
            if (n_in++ % st || g->cnt[0] >= ns)
                continue;
            const float *row = loo_features(c, d, sq, l, kv, t, g->self, g->cbf);
            for (size_t dd = 0; dd < D; dd++) {
                size_t ch = g->h * D + dd;
                float f4[NF];
                features(c, d, g->model_pred, sq, l, kv, t, ch, g->cbf, f4);
                float mu = predict(w, f4[0], f4[1], f4[2], f4[3]);
                size_t k = g->cnt[dd]++;
                g->xs[dd * ns + k] = d->bits[kv][sq][(l * T + t) * C + ch];
                g->mus[dd * ns + k] = mu;
                double e = (double)row[ch] - mu;
                g->res2[dd] += e * e;
                g->mag[dd] += fabs((double)row[ch]);
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

/* The groups (layer, kv, head) of a level, split over a pool: each task
 * fits both seen-classes of its groups with buffers and a coding model of
 * its own; the groups write disjoint parameters, so the result does not
 * depend on the split */
typedef struct {
    skv_calib *c;
    const calib_data *d;
    seqkv_level lvl;
    float *const *const *model_pred;
    const int *use;
    int max_samples;
    size_t ns;
    int *rc; /* per group */
} fit_job;

static int fit_groups(const fit_job *j, size_t b, size_t e)
{
    skv_calib *c = j->c;
    const size_t C = chan_count(&c->sh), H = (size_t)c->sh.kv_heads, D = (size_t)c->sh.head_dim;
    skv_cmodel *cm;
    int rc = skv_cmodel_create(c->sh.dtype, level_mix(j->lvl), c->pemp, &cm);
    if (rc)
        return rc;
    fit_group g = {.c = c, .d = j->d, .lvl = j->lvl, .ns = j->ns};
    g.xs = skv_malloc(g.ns * D * sizeof *g.xs);
    g.mus = skv_malloc(g.ns * D * sizeof *g.mus);
    g.cbf = skv_malloc(C * sizeof *g.cbf), g.self = skv_malloc(C * sizeof *g.self);
    g.res2 = skv_calloc(D, sizeof *g.res2), g.mag = skv_calloc(D, sizeof *g.mag);
    g.cnt = skv_calloc(D, sizeof *g.cnt);
    if (!g.xs || !g.mus || !g.cbf || !g.self || !g.res2 || !g.mag || !g.cnt)
        rc = skv_error(SKV_ERR_NOMEM, "calibration samples");
    for (size_t k = b; !rc && k < e; k++) {
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
    skv_free(g.res2);
    skv_free(g.mag);
    skv_free(g.cnt);
    skv_cmodel_free(cm);
    return rc;
}

static void fit_task(void *ctx, size_t b, size_t e, int worker)
{
    (void)worker;
    const fit_job *j = ctx;
    if (b < e)
        j->rc[b] = fit_groups(j, b, e);
}

int fit_level(skv_calib *c, const calib_data *d, seqkv_level lvl, float *const *model_pred[2],
              int max_samples, skv_pool *pool, int quiet)
{
    const size_t L = (size_t)c->sh.layers, H = (size_t)c->sh.kv_heads;
    int use[NF] = {lvl >= SEQKV_SPEC, lvl >= SEQKV_CTX, lvl >= SEQKV_CTX, 1};
    size_t total = 0;
    for (size_t i = 0; i < d->n_seq; i++)
        total += d->T[i];
    const size_t ng = L * 2 * H;
    int *rcs = skv_calloc(ng, sizeof *rcs);
    if (!rcs)
        return skv_error(SKV_ERR_NOMEM, "calibration");
    fit_job j = {c, d, lvl, (float *const *const *)model_pred, use, max_samples,
                 (total < (size_t)max_samples ? total : (size_t)max_samples) + 2, rcs};
    skv_pool_run(pool, ng, fit_task, &j);
    int rc = SKV_OK;
    for (size_t k = 0; k < ng && !rc; k++)
        rc = rcs[k];
    skv_free(rcs);
    if (rc == SKV_ERR_NOMEM) /* (a pool thread's words are its own) */
        rc = skv_error(SKV_ERR_NOMEM, "calibration samples");
    if (!rc && !quiet)
        fprintf(stderr, "calibrate: %s fitted (%zu layers)\n", seqkv_level_name(lvl), L);
    return rc;
}
