/*
 * lstats.c - the lossy tier's calibration: run the model over the
 * calibration sequences, measure how errors in each KV head's keys and
 * values reach the attention output (skv_lossy.h), make the transforms,
 * then learn each level's codebooks on the transformed vectors.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lossy_int.h"

typedef struct {
    int L, nq, kvd;
    size_t n;
    float *q, *k, *v; /* [L][n][..] */
} capture;

static void cap_q(void *ctx, int layer, size_t pos0, size_t n, const float *q)
{
    capture *c = ctx;
    memcpy(c->q + ((size_t)layer * c->n + pos0) * (size_t)c->nq, q, n * (size_t)c->nq * sizeof(float));
}

static void cap_kv(void *ctx, int layer, size_t pos0, size_t n, float *k, float *v)
{
    capture *c = ctx;
    const size_t off = ((size_t)layer * c->n + pos0) * (size_t)c->kvd;
    memcpy(c->k + off, k, n * (size_t)c->kvd * sizeof(float));
    memcpy(c->v + off, v, n * (size_t)c->kvd * sizeof(float));
}

/* What calibration accumulates. */
typedef struct {
    int L, H, D, nh, grp, sink;
    int plain_q;  /* G_K from the plain query second moment (skv_lossy_opts) */
    double *gh;   /* [L][nh][D*D]: W_h^T W_h */
    double *ak;   /* [L][H][D*D] */
    double *sv;   /* [L][nh]: sum of a^2 over (query, key) */
    double nkeys; /* keys measured (per layer and head) */
} stats;

/* One layer of one sequence: attention of every query head recomputed in
 * double from the captured q, k, v. */
static void layer_stats(stats *s, int l, const capture *c, double *sc, double *o, double *go,
                        double *gv)
{
    const int D = s->D, H = s->H, grp = s->grp, kvd = H * D;
    const size_t n = c->n;
    const double inv = 1.0 / sqrt((double)D);
    for (int h = 0; h < s->nh; h++) {
        const int g = h / grp;
        const double *G = s->gh + ((size_t)l * s->nh + (size_t)h) * (size_t)(D * D);
        double *AK = s->ak + ((size_t)l * H + (size_t)g) * (size_t)(D * D);
        const float *K = c->k + (size_t)l * n * kvd + (size_t)g * D;
        const float *V = c->v + (size_t)l * n * kvd + (size_t)g * D;
        for (size_t j = 0; j < n; j++) /* gv[j] = G v_j */
            for (int a = 0; a < D; a++) {
                double acc = 0.0;
                for (int b = 0; b < D; b++)
                    acc += G[a * D + b] * (double)V[j * kvd + b];
                gv[j * D + a] = acc;
            }
        for (size_t t = 0; t < n; t++) {
            const float *q = c->q + ((size_t)l * n + t) * (size_t)c->nq + (size_t)h * D;
            double mx = -INFINITY;
            for (size_t j = 0; j <= t; j++) {
                double d = 0.0;
                for (int a = 0; a < D; a++)
                    d += (double)q[a] * (double)K[j * kvd + a];
                sc[j] = d * inv;
                if (sc[j] > mx)
                    mx = sc[j];
            }
            double sum = 0.0;
            for (size_t j = 0; j <= t; j++) {
                sc[j] = skv_exp(sc[j] - mx);
                sum += sc[j];
            }
            for (int a = 0; a < D; a++)
                o[a] = 0.0;
            for (size_t j = 0; j <= t; j++) {
                sc[j] /= sum;
                for (int a = 0; a < D; a++)
                    o[a] += sc[j] * (double)V[j * kvd + a];
            }
            for (int a = 0; a < D; a++) {
                double acc = 0.0;
                for (int b = 0; b < D; b++)
                    acc += G[a * D + b] * o[b];
                go[a] = acc;
            }
            double ogo = 0.0;
            for (int a = 0; a < D; a++)
                ogo += o[a] * go[a];
            /* w = sum_j a_j^2 (v_j - o)^T G (v_j - o), keys past the sink */
            double w = 0.0, a2 = 0.0;
            for (size_t j = (size_t)s->sink; j <= t; j++) {
                double vgv = 0.0, vgo = 0.0;
                for (int a = 0; a < D; a++) {
                    vgv += (double)V[j * kvd + a] * gv[j * D + a];
                    vgo += (double)V[j * kvd + a] * go[a];
                }
                const double aj2 = sc[j] * sc[j];
                w += aj2 * (vgv - 2.0 * vgo + ogo);
                a2 += aj2;
            }
            s->sv[(size_t)l * s->nh + (size_t)h] += a2;
            const double wq = (s->plain_q ? 1.0 : w) / (double)D;
            for (int a = 0; a < D; a++)
                for (int b = 0; b < D; b++)
                    AK[a * D + b] += wq * (double)q[a] * (double)q[b];
        }
    }
}

/* T = G^{1/2}, Ti = G^{-1/2} (regularised), as floats. */
static int make_transform(const double *G, int D, int identity, float *t, float *ti)
{
    double tr = 0.0;
    for (int a = 0; a < D; a++)
        tr += G[a * D + a];
    if (identity || !(tr > 0.0) || !isfinite(tr)) {
        for (int a = 0; a < D * D; a++)
            t[a] = ti[a] = a % (D + 1) == 0 ? 1.0f : 0.0f;
        return SKV_OK;
    }
    double *A = skv_malloc(2 * (size_t)D * D * sizeof(double)), *U = A + (size_t)D * D;
    double w[SKV_LOSSY_DMAX];
    if (!A)
        return skv_error(SKV_ERR_NOMEM, "lossy transform");
    const double reg = LQ_EPS_REL * tr / D;
    for (int a = 0; a < D; a++)
        for (int b = 0; b < D; b++)
            A[a * D + b] = 0.5 * (G[a * D + b] + G[b * D + a]) + (a == b ? reg : 0.0);
    int rc = skv_eig_sym(A, D, w, U);
    if (rc) {
        skv_free(A);
        return rc;
    }
    for (int i = 0; i < D; i++)
        if (w[i] < reg)
            w[i] = reg;
    for (int a = 0; a < D; a++)
        for (int b = 0; b < D; b++) {
            double p = 0.0, m = 0.0;
            for (int i = 0; i < D; i++) {
                p += U[a * D + i] * sqrt(w[i]) * U[b * D + i];
                m += U[a * D + i] / sqrt(w[i]) * U[b * D + i];
            }
            t[a * D + b] = (float)p;
            ti[a * D + b] = (float)m;
        }
    skv_free(A);
    return SKV_OK;
}

/* ---- sensitivity: what an output error in each (layer, K|V) costs the
 * next-token distribution, measured on the model ---------------------------- */

typedef struct {
    const skv_lossy_cal *c;
    int layer, kv, sink;
    float eps;
    skv_rng rng;
} noise_ctx;

/* Add eps * T^-1 z, z ~ N(0, I), to the group's vectors past the sink:
 * the same expected error in every group's transformed units. */
static void add_noise(void *ctx, int layer, size_t pos0, size_t n, float *k, float *v)
{
    noise_ctx *nc = ctx;
    if (layer != nc->layer)
        return;
    const skv_lossy_cal *c = nc->c;
    const int D = c->D, kvd = c->H * D;
    float *x = nc->kv ? v : k;
    for (size_t i = 0; i < n; i++) {
        if (pos0 + i < (size_t)nc->sink)
            continue;
        for (int h = 0; h < c->H; h++) {
            float z[SKV_LOSSY_DMAX], e[SKV_LOSSY_DMAX];
            for (int d = 0; d < D; d++)
                z[d] = nc->eps * skv_rng_normal(&nc->rng);
            lq_apply(c->ti + lq_head(c, layer, nc->kv, h) * (size_t)D * D, z, e, D);
            for (int d = 0; d < D; d++)
                x[i * kvd + (size_t)h * D + d] += e[d];
        }
    }
}

static double kl_rows(const float *lp, const float *lq, size_t rows, int V)
{
    double kl = 0.0;
    for (size_t r = 0; r < rows; r++)
        for (int j = 0; j < V; j++) {
            const double a = lp[r * V + j], b = lq[r * V + j];
            kl += skv_exp(a) * (a - b);
        }
    return kl;
}

#define SENS_SEQS 4
#define SENS_EPS 0.05

/* Scale each (layer, K|V)'s transform by the square root of its measured
 * sensitivity (mean KL per unit of noise energy), relative to the mean:
 * one step everywhere then spends bits where the model's output moves. */
static int sensitivity(skv_lossy_cal *c, const skv_model *m, const int32_t *const *tok,
                       const size_t *len, size_t n_seq, skv_pool *pool, skv_kvcache *cache,
                       double rms, int quiet)
{
    const int V = skv_model_cfg(m)->vocab_size, G = c->L * 2;
    size_t maxn = 0;
    const size_t ns = n_seq < SENS_SEQS ? n_seq : SENS_SEQS;
    for (size_t i = 0; i < ns; i++)
        maxn = len[i] > maxn ? len[i] : maxn;
    float *ref = skv_malloc(ns * maxn * (size_t)V * sizeof(float));
    float *lp = skv_malloc(maxn * (size_t)V * sizeof(float));
    double *sens = skv_calloc((size_t)G, sizeof(double));
    int rc = ref && lp && sens ? SKV_OK : skv_error(SKV_ERR_NOMEM, "lossy calibration: sensitivity");
    size_t rows = 0;
    for (size_t i = 0; !rc && i < ns; i++) {
        skv_kvcache_truncate(cache, 0);
        skv_forward_opts fo = {.pool = pool, .logprobs = ref + i * maxn * V};
        rc = skv_model_forward(m, cache, tok[i], len[i], &fo);
        rows += len[i];
    }
    const float eps = (float)(SENS_EPS * rms);
    for (int g = 0; !rc && g < G; g++) {
        noise_ctx nc = {c, g / 2, g % 2, c->sink, eps, {{0}}};
        skv_rng_seed(&nc.rng, 0x5e45u + (uint64_t)g);
        for (size_t i = 0; !rc && i < ns; i++) {
            skv_kvcache_truncate(cache, 0);
            skv_forward_opts fo = {.pool = pool, .logprobs = lp, .hook = add_noise, .hook_ctx = &nc};
            rc = skv_model_forward(m, cache, tok[i], len[i], &fo);
            if (!rc)
                sens[g] += kl_rows(ref + i * maxn * V, lp, len[i], V);
        }
        sens[g] /= (double)rows * (double)eps * (double)eps;
    }
    double mean = 0.0;
    for (int g = 0; !rc && g < G; g++)
        mean += sens[g] / G;
    for (int g = 0; !rc && g < G && mean > 0.0; g++) {
        double gain = sens[g] / mean;
        gain = gain < 1e-3 ? 1e-3 : gain > 1e3 ? 1e3 : gain;
        const float up = (float)sqrt(gain), down = (float)(1.0 / sqrt(gain));
        if (!quiet)
            fprintf(stderr, "lossy calibration: layer %d %s: sensitivity x%.3g\n", g / 2, g % 2 ? "V" : "K", gain);
        for (int h = 0; h < c->H; h++) {
            float *T = c->t + lq_head(c, g / 2, g % 2, h) * (size_t)c->D * c->D;
            float *Ti = c->ti + lq_head(c, g / 2, g % 2, h) * (size_t)c->D * c->D;
            for (int a = 0; a < c->D * c->D; a++) {
                T[a] *= up;
                Ti[a] *= down;
            }
        }
    }
    skv_free(ref);
    skv_free(lp);
    skv_free(sens);
    return rc;
}

int skv_lossy_calibrate(const skv_model *m, const int32_t *const *tok, const size_t *len,
                        size_t n_seq, const skv_lossy_opts *o, skv_lossy_cal **out)
{
    const skv_model_config *cfg = skv_model_cfg(m);
    const int L = cfg->n_layers, H = cfg->n_kv_heads, D = cfg->head_dim, nh = cfg->n_heads;
    const int kvd = H * D, nq = nh * D;
    if (n_seq == 0)
        return skv_error(SKV_ERR_ARG, "lossy calibration needs at least one sequence");
    if (D % SKV_LOSSY_SUB != 0 || D > SKV_LOSSY_DMAX)
        return skv_error(SKV_ERR_UNSUPPORTED, "the lossy tier codes even head sizes up to %d, not %d",
                         SKV_LOSSY_DMAX, D);
    size_t maxn = 0, keys = 0;
    for (size_t i = 0; i < n_seq; i++) {
        if (len[i] > maxn)
            maxn = len[i];
        if (len[i] > (size_t)o->sink)
            keys += len[i] - (size_t)o->sink;
    }
    if (keys == 0)
        return skv_error(SKV_ERR_ARG, "lossy calibration sequences are no longer than the sink (%d)", o->sink);
    const size_t keep = keys < LQ_MAX_SAMPLES ? keys : LQ_MAX_SAMPLES;
    skv_lossy_cal *c;
    int rc = lq_cal_alloc(&c, L, H, D, o->dtype);
    if (rc)
        return rc;
    c->sink = o->sink;
    stats s = {L, H, D, nh, nh / H, o->sink, o->plain_q, NULL, NULL, NULL, 0.0};
    capture cp = {L, nq, kvd, maxn, NULL, NULL, NULL};
    s.gh = skv_calloc((size_t)L * nh * D * D, sizeof(double));
    s.ak = skv_calloc((size_t)L * H * D * D, sizeof(double));
    s.sv = skv_calloc((size_t)L * nh, sizeof(double));
    cp.q = skv_malloc((size_t)L * maxn * nq * sizeof(float));
    cp.k = skv_malloc((size_t)L * maxn * kvd * sizeof(float));
    cp.v = skv_malloc((size_t)L * maxn * kvd * sizeof(float));
    float *wo = skv_malloc((size_t)cfg->dim * nq * sizeof(float));
    double *scr = skv_malloc((maxn * (size_t)(D + 1) + 2 * (size_t)D) * sizeof(double));
    float *x = skv_malloc((size_t)L * 2 * kvd * keep * sizeof(float)); /* [L][2][keep][H*D] */
    float *y = skv_malloc((size_t)L * 2 * kvd * keep * sizeof(float)); /* [L*2*H][keep][D] */
    void *dtbuf = skv_malloc((size_t)kvd * 4);
    skv_kvcache *cache = NULL;
    if (!s.gh || !s.ak || !s.sv || !cp.q || !cp.k || !cp.v || !wo || !scr || !x || !y || !dtbuf)
        rc = skv_error(SKV_ERR_NOMEM, "lossy calibration buffers");
    if (!rc)
        rc = skv_kvcache_create(cfg, maxn, &cache);
    for (int l = 0; !rc && l < L; l++) {
        rc = skv_model_wo(m, l, wo);
        for (int h = 0; !rc && h < nh; h++) {
            double *G = s.gh + ((size_t)l * nh + (size_t)h) * (size_t)(D * D);
            for (int a = 0; a < D; a++)
                for (int b = 0; b < D; b++) {
                    double acc = 0.0;
                    for (int r = 0; r < cfg->dim; r++)
                        acc += (double)wo[(size_t)r * nq + (size_t)h * D + a] *
                               (double)wo[(size_t)r * nq + (size_t)h * D + b];
                    G[a * D + b] = acc;
                }
        }
    }
    size_t kept = 0;
    for (size_t i = 0; !rc && i < n_seq; i++) {
        if (!o->quiet)
            fprintf(stderr, "\rlossy calibration: sequence %zu of %zu", i + 1, n_seq);
        cp.n = len[i];
        skv_kvcache_truncate(cache, 0);
        skv_forward_opts fo = {.pool = o->pool, .hook = cap_kv, .hook_ctx = &cp, .qhook = cap_q,
                               .qhook_ctx = &cp};
        rc = skv_model_forward(m, cache, tok[i], len[i], &fo);
        if (rc)
            break;
        /* the statistics see what the store keeps: K, V in its dtype */
        for (size_t r = 0; !rc && r < (size_t)L * len[i]; r++) {
            rc = skv_cast_from_f32(o->dtype, dtbuf, cp.k + r * kvd, (size_t)kvd);
            if (!rc)
                rc = skv_cast_to_f32(o->dtype, cp.k + r * kvd, dtbuf, (size_t)kvd);
            if (!rc)
                rc = skv_cast_from_f32(o->dtype, dtbuf, cp.v + r * kvd, (size_t)kvd);
            if (!rc)
                rc = skv_cast_to_f32(o->dtype, cp.v + r * kvd, dtbuf, (size_t)kvd);
        }
        for (int l = 0; !rc && l < L; l++)
            layer_stats(&s, l, &cp, scr, scr + maxn, scr + maxn + D, scr + maxn + 2 * D);
        if (len[i] > (size_t)o->sink)
            s.nkeys += (double)(len[i] - (size_t)o->sink);
        for (size_t p = (size_t)o->sink; !rc && p < len[i] && kept < keep; p++, kept++)
            for (int l = 0; l < L; l++) {
                memcpy(x + (((size_t)l * 2 + 0) * keep + kept) * kvd,
                       cp.k + ((size_t)l * len[i] + p) * kvd, (size_t)kvd * sizeof(float));
                memcpy(x + (((size_t)l * 2 + 1) * keep + kept) * kvd,
                       cp.v + ((size_t)l * len[i] + p) * kvd, (size_t)kvd * sizeof(float));
            }
    }
    if (!o->quiet && !rc)
        fprintf(stderr, "\n");
    /* transforms */
    for (int l = 0; !rc && l < L; l++)
        for (int g = 0; !rc && g < H; g++) {
            double *GK = skv_malloc(2 * (size_t)D * D * sizeof(double)), *GV = GK ? GK + (size_t)D * D : NULL;
            if (!GK) {
                rc = skv_error(SKV_ERR_NOMEM, "lossy transforms");
                break;
            }
            const double *AK = s.ak + ((size_t)l * H + (size_t)g) * (size_t)(D * D);
            for (int a = 0; a < D * D; a++) {
                GK[a] = AK[a] / s.nkeys;
                GV[a] = 0.0;
            }
            for (int h = g * s.grp; h < (g + 1) * s.grp; h++) {
                const double wgt = s.sv[(size_t)l * nh + (size_t)h] / s.nkeys;
                const double *G = s.gh + ((size_t)l * nh + (size_t)h) * (size_t)(D * D);
                for (int a = 0; a < D * D; a++)
                    GV[a] += wgt * G[a];
            }
            const size_t dd = (size_t)D * D;
            rc = make_transform(GK, D, o->identity, c->t + lq_head(c, l, 0, g) * dd,
                                c->ti + lq_head(c, l, 0, g) * dd);
            if (!rc)
                rc = make_transform(GV, D, o->identity, c->t + lq_head(c, l, 1, g) * dd,
                                    c->ti + lq_head(c, l, 1, g) * dd);
            skv_free(GK);
        }
    /* the transforms' scale per (layer, K|V), from the model's own KL;
     * the noise is a fraction of the transformed vectors' size */
    if (!rc && !o->identity) {
        double ss = 0.0, cnt = 0.0;
        for (int l = 0; l < L; l++)
            for (int kv = 0; kv < 2; kv++)
                for (int g = 0; g < H; g++) {
                    const float *T = c->t + lq_head(c, l, kv, g) * (size_t)D * D;
                    for (size_t p = 0; p < kept; p++) {
                        float yy[SKV_LOSSY_DMAX];
                        lq_apply(T, x + (((size_t)l * 2 + (size_t)kv) * keep + p) * kvd + (size_t)g * D, yy, D);
                        for (int d = 0; d < D; d++)
                            ss += (double)yy[d] * yy[d];
                        cnt += D;
                    }
                }
        rc = sensitivity(c, m, tok, len, n_seq, o->pool, cache, sqrt(ss / cnt), o->quiet);
    }
    /* the training vectors, transformed */
    for (int l = 0; !rc && l < L; l++)
        for (int kv = 0; kv < 2; kv++)
            for (int g = 0; g < H; g++) {
                const float *T = c->t + lq_head(c, l, kv, g) * (size_t)D * D;
                float *Y = y + lq_head(c, l, kv, g) * kept * D;
                for (size_t p = 0; p < kept; p++)
                    lq_apply(T, x + (((size_t)l * 2 + (size_t)kv) * keep + p) * kvd + (size_t)g * D,
                             Y + p * D, D);
            }
    for (int b = 4; !rc && b >= 2; b--) {
        if (o->only && b != o->only)
            continue;
        rc = lq_train_level(c, b, SKV_LQ_PVQ, y, kept, o->pool, o->quiet);
        if (!rc && o->rvq)
            rc = lq_train_level(c, b, SKV_LQ_RVQ, y, kept, o->pool, o->quiet);
    }
    if (!rc)
        rc = lq_set_id(c);
    skv_kvcache_free(cache);
    skv_free(s.gh);
    skv_free(s.ak);
    skv_free(s.sv);
    skv_free(cp.q);
    skv_free(cp.k);
    skv_free(cp.v);
    skv_free(wo);
    skv_free(scr);
    skv_free(x);
    skv_free(y);
    skv_free(dtbuf);
    if (rc) {
        skv_lossy_cal_free(c);
        return rc;
    }
    *out = c;
    return SKV_OK;
}
