/*
 * lossy_bench.c - what the lossy tier costs the model: for each level
 * and each baseline at the same coded bits, the relative error of every
 * layer's attention output (after W_O, under the exact queries), the KL
 * divergence of the next-token distribution when the model attends over
 * the reconstructed cache instead of the exact one, and greedy next-token
 * agreement, on test sequences disjoint from the calibration.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "lossy_bench.h"

/* ---- the reference: exact (dtype) K/V, queries and logits --------------- */

typedef struct {
    lb_seq *s;
    int kvd, nq;
} ref_ctx;

static void ref_q(void *ctx, int layer, size_t pos0, size_t n, const float *q)
{
    ref_ctx *r = ctx;
    memcpy(r->s->q + ((size_t)layer * r->s->n + pos0) * r->nq, q, n * r->nq * sizeof(float));
}

/* The first pass keeps the model's own K, V (float32). */
static void ref_kv(void *ctx, int layer, size_t pos0, size_t n, float *k, float *v)
{
    ref_ctx *r = ctx;
    const size_t off = ((size_t)layer * r->s->n + pos0) * r->kvd;
    memcpy(r->s->k + off, k, n * r->kvd * sizeof(float));
    memcpy(r->s->v + off, v, n * r->kvd * sizeof(float));
}

/* ---- evaluation of a reconstruction ---------------------------------------- */

typedef struct {
    const skv_model *m;
    const lb_set *set;
    const float *wo; /* [L][dim][nq] */
    float **rk, **rv;
    double *err, *ref; /* [threads][L]: |dO|^2, |O|^2 */
    double *kl, *agree, *pos; /* [threads] */
    int *rc;
} eval_ctx;

typedef struct {
    const float *k, *v;
    size_t n;
    int kvd;
} sub_ctx;

static void sub_kv(void *ctx, int layer, size_t pos0, size_t n, float *k, float *v)
{
    const sub_ctx *s = ctx;
    const size_t off = ((size_t)layer * s->n + pos0) * s->kvd;
    memcpy(k, s->k + off, n * s->kvd * sizeof(float));
    memcpy(v, s->v + off, n * s->kvd * sizeof(float));
}

/* Attention of head h at position t over K, V ([n][kvd] of one layer). */
static void attend(const float *q, const float *K, const float *V, size_t t, int kvd, int g, int D,
                   double *sc, double *o)
{
    const double inv = 1.0 / sqrt((double)D);
    double mx = -INFINITY, sum = 0.0;
    for (size_t j = 0; j <= t; j++) {
        double d = 0.0;
        for (int a = 0; a < D; a++)
            d += (double)q[a] * K[j * kvd + (size_t)g * D + a];
        sc[j] = d * inv;
        mx = sc[j] > mx ? sc[j] : mx;
    }
    for (size_t j = 0; j <= t; j++) {
        sc[j] = exp(sc[j] - mx);
        sum += sc[j];
    }
    for (int a = 0; a < D; a++)
        o[a] = 0.0;
    for (size_t j = 0; j <= t; j++)
        for (int a = 0; a < D; a++)
            o[a] += sc[j] / sum * V[j * kvd + (size_t)g * D + a];
}

static void eval_task(void *vctx, size_t b, size_t e, int worker)
{
    const eval_ctx *c = vctx;
    const skv_model_config *cfg = skv_model_cfg(c->m);
    const int L = cfg->n_layers, D = cfg->head_dim, nh = cfg->n_heads, kvd = cfg->n_kv_heads * D;
    const int nq = nh * D, dim = cfg->dim, V = cfg->vocab_size, grp = nh / cfg->n_kv_heads;
    for (size_t i = b; i < e; i++) {
        const lb_seq *s = &c->set->seq[i];
        const size_t n = s->n;
        double *sc = malloc(n * sizeof(double));
        double *o1 = malloc((size_t)nq * 2 * sizeof(double)), *o2 = o1 + nq;
        float *lg = malloc(n * (size_t)V * sizeof(float));
        skv_kvcache *cache = NULL;
        if (!sc || !o1 || !lg || skv_kvcache_create(cfg, n, &cache)) {
            c->rc[worker] = SKV_ERR_NOMEM;
            free(sc), free(o1), free(lg);
            return;
        }
        for (int l = 0; l < L; l++) {
            const float *K = s->k + (size_t)l * n * kvd, *Vv = s->v + (size_t)l * n * kvd;
            const float *Kh = c->rk[i] + (size_t)l * n * kvd, *Vh = c->rv[i] + (size_t)l * n * kvd;
            const float *W = c->wo + (size_t)l * dim * nq;
            for (size_t t = 0; t < n; t++) {
                for (int h = 0; h < nh; h++) {
                    const float *q = s->q + ((size_t)l * n + t) * nq + (size_t)h * D;
                    attend(q, K, Vv, t, kvd, h / grp, D, sc, o1 + h * D);
                    attend(q, Kh, Vh, t, kvd, h / grp, D, sc, o2 + h * D);
                }
                for (int r = 0; r < dim; r++) {
                    double a = 0.0, d = 0.0;
                    for (int j = 0; j < nq; j++) {
                        a += (double)W[(size_t)r * nq + j] * o1[j];
                        d += (double)W[(size_t)r * nq + j] * (o2[j] - o1[j]);
                    }
                    c->ref[(size_t)worker * L + l] += a * a;
                    c->err[(size_t)worker * L + l] += d * d;
                }
            }
        }
        sub_ctx sx = {c->rk[i], c->rv[i], n, kvd};
        skv_forward_opts fo = {.logits = lg, .hook = sub_kv, .hook_ctx = &sx};
        int rc = skv_model_forward(c->m, cache, s->tok, n, &fo);
        if (rc)
            c->rc[worker] = rc;
        for (size_t t = 0; !rc && t < n; t++) {
            const float *p = s->logits + t * V, *qh = lg + t * V;
            double mp = -INFINITY, mq = -INFINITY, zp = 0.0, zq = 0.0, kl = 0.0;
            int ap = 0, aq = 0;
            for (int j = 0; j < V; j++) {
                if (p[j] > mp)
                    mp = p[j], ap = j;
                if (qh[j] > mq)
                    mq = qh[j], aq = j;
            }
            for (int j = 0; j < V; j++) {
                zp += exp(p[j] - mp);
                zq += exp(qh[j] - mq);
            }
            for (int j = 0; j < V; j++) {
                const double lp = p[j] - mp - log(zp), lq = qh[j] - mq - log(zq);
                kl += exp(lp) * (lp - lq);
            }
            c->kl[worker] += kl;
            c->agree[worker] += ap == aq;
            c->pos[worker] += 1.0;
        }
        skv_kvcache_free(cache);
        free(sc), free(o1), free(lg);
    }
}

typedef struct {
    char name[24];
    double bits, param;
    double err[64], err_mean, kl, agree, pos;
} row;

static int evaluate(const lossy_bench_in *in, const lb_set *set, const float *wo, float **rk,
                    float **rv, row *r)
{
    const int L = set->L, th = skv_pool_threads(in->pool);
    eval_ctx c = {in->m, set, wo, rk, rv, calloc((size_t)th * L, sizeof(double)),
                  calloc((size_t)th * L, sizeof(double)), calloc((size_t)th, sizeof(double)),
                  calloc((size_t)th, sizeof(double)), calloc((size_t)th, sizeof(double)),
                  calloc((size_t)th, sizeof(int))};
    int rc = c.err && c.ref && c.kl && c.agree && c.pos && c.rc ? SKV_OK : SKV_ERR_NOMEM;
    if (!rc)
        skv_pool_run(in->pool, set->n_seq, eval_task, &c);
    for (int w = 0; !rc && w < th; w++)
        rc = c.rc[w];
    if (!rc) {
        r->err_mean = 0.0;
        for (int l = 0; l < L && l < 64; l++) {
            double e = 0.0, f = 0.0;
            for (int w = 0; w < th; w++) {
                e += c.err[(size_t)w * L + l];
                f += c.ref[(size_t)w * L + l];
            }
            r->err[l] = f > 0.0 ? sqrt(e / f) : 0.0;
            r->err_mean += r->err[l] / L;
        }
        double kl = 0.0, ag = 0.0, pos = 0.0;
        for (int w = 0; w < th; w++) {
            kl += c.kl[w];
            ag += c.agree[w];
            pos += c.pos[w];
        }
        r->kl = kl / pos;
        r->agree = ag / pos;
        r->pos = pos;
    }
    free(c.err), free(c.ref), free(c.kl), free(c.agree), free(c.pos), free(c.rc);
    return rc;
}

/* ---- the levels' own coding -------------------------------------------------- */

/* Code every test sequence's lossy positions at (bits, kind) and decode
 * them back (checking the decoder rebuilds what the encoder promised);
 * rk/rv get the reconstruction with the window exact. Bits per lossy
 * scalar, the streams' whole size. */
static int level_code(const lb_set *set, const skv_lossy_cal *cal, int bits, skv_lossy_kind kind,
                      float **rk, float **rv, double *bps)
{
    const int L = set->L, kvd = set->H * set->D;
    const size_t es = skv_dtype_size(set->dt);
    double bytes = 0.0, scalars = 0.0;
    int rc = SKV_OK;
    for (size_t i = 0; !rc && i < set->n_seq; i++) {
        const lb_seq *s = &set->seq[i];
        const size_t n = s->n, lo = lb_lo(set, n), hi = lb_hi(set, n), all = (size_t)L * n * kvd;
        const size_t half = all * es, cap = skv_lossy_bound(cal, n);
        uint8_t *k = malloc(half), *v = malloc(half), *ek = malloc(half), *ev = malloc(half);
        uint8_t *dk = malloc(half), *dv = malloc(half), *st = malloc(cap);
        rc = k && v && ek && ev && dk && dv && st ? SKV_OK : SKV_ERR_NOMEM;
        if (!rc)
            rc = skv_cast_from_f32(set->dt, k, s->k, all);
        if (!rc)
            rc = skv_cast_from_f32(set->dt, v, s->v, all);
        size_t len = 0;
        if (!rc)
            rc = skv_lossy_encode(cal, bits, kind, k, v, n, lo, hi, st, cap, &len, ek, ev);
        if (!rc)
            rc = skv_lossy_decode(cal, st, len, n, dk, dv);
        if (!rc && (memcmp(dk, ek, half) || memcmp(dv, ev, half)))
            rc = skv_error(SKV_ERR_CORRUPT, "the decoder did not rebuild the encoder's reconstruction");
        if (!rc)
            rc = skv_cast_to_f32(set->dt, rk[i], dk, all);
        if (!rc)
            rc = skv_cast_to_f32(set->dt, rv[i], dv, all);
        /* the stream's bytes less the window it carries as it is */
        bytes += (double)len - (double)(n - (hi - lo)) * L * 2 * kvd * es;
        scalars += (double)(hi - lo) * L * 2 * kvd;
        free(k), free(v), free(ek), free(ev), free(dk), free(dv), free(st);
    }
    *bps = scalars > 0 ? 8.0 * bytes / scalars : 0.0;
    return rc;
}

/* ---- the run ------------------------------------------------------------------ */

static void print_row(const lossy_bench_in *in, FILE *out, const row *r, int L, const char *what)
{
    if (in->json) {
        fprintf(out, "{\"level\":\"%s\",\"method\":\"%s\",\"bits_per_scalar\":%.4f,\"kl\":%.6g,"
                     "\"attn_rel_err\":%.6g,\"attn_rel_err_layers\":[",
                r->name, what, r->bits, r->kl, r->err_mean);
        for (int l = 0; l < L; l++)
            fprintf(out, "%s%.6g", l ? "," : "", r->err[l]);
        fprintf(out, "],\"greedy_agree\":%.4f,\"positions\":%.0f,\"sink\":%d,\"recent\":%d}\n",
                r->agree, r->pos, in->sink, in->recent);
    } else {
        fprintf(out, "%-10s %-34s %8.3f %12.5f %12.6f %9.4f\n", r->name, what, r->bits, r->err_mean,
                r->kl, r->agree);
    }
    fflush(out);
}

int lossy_bench_run(const lossy_bench_in *in, FILE *out)
{
    const skv_model_config *cfg = skv_model_cfg(in->m);
    const int L = cfg->n_layers, H = cfg->n_kv_heads, D = cfg->head_dim, kvd = H * D;
    const int nq = cfg->n_heads * D, V = cfg->vocab_size;
    if (L > 64)
        return skv_error(SKV_ERR_UNSUPPORTED, "the lossy bench reports up to 64 layers");
    skv_lossy_cal *cal = NULL, *cal_id = NULL, *cal_q = NULL;
    double t0 = cli_now();
    /* one level asked: its books alone */
    const int only = in->want[2] + in->want[3] + in->want[4] == 1 ? (in->want[2] ? 2 : in->want[3] ? 3 : 4) : 0;
    skv_lossy_opts o = {in->dt, in->sink, 1, 0, only, in->pool, in->quiet, 0};
    int rc = skv_lossy_calibrate(in->m, in->cal_tok, in->cal_len, in->n_cal, &o, &cal);
    const double tcal = cli_now() - t0;
    if (!in->quiet)
        fprintf(stderr, "lossy calibration: %.1f s\n", tcal);
    skv_lossy_opts oi = {in->dt, in->sink, 0, 1, only, in->pool, 1, 0};
    if (!rc)
        rc = skv_lossy_calibrate(in->m, in->cal_tok, in->cal_len, in->n_cal, &oi, &cal_id);
    skv_lossy_opts oq = {in->dt, in->sink, 0, 0, only, in->pool, 1, 1};
    if (!rc)
        rc = skv_lossy_calibrate(in->m, in->cal_tok, in->cal_len, in->n_cal, &oq, &cal_q);
    lb_set set = {calloc(in->n_test, sizeof(lb_seq)), in->n_test, L, H, D, in->sink, in->recent, in->dt};
    float **rk = calloc(in->n_test, sizeof(float *)), **rv = calloc(in->n_test, sizeof(float *));
    float *wo = malloc((size_t)L * cfg->dim * nq * sizeof(float));
    if (!rc && (!set.seq || !rk || !rv || !wo))
        rc = skv_error(SKV_ERR_NOMEM, "lossy bench");
    for (int l = 0; !rc && l < L; l++)
        rc = skv_model_wo(in->m, l, wo + (size_t)l * cfg->dim * nq);
    /* the reference pass of every test sequence */
    for (size_t i = 0; !rc && i < in->n_test; i++) {
        lb_seq *s = &set.seq[i];
        s->tok = in->test_tok[i];
        s->n = in->test_len[i];
        const size_t kv = (size_t)L * s->n * kvd;
        s->k = malloc(kv * sizeof(float));
        s->v = malloc(kv * sizeof(float));
        s->q = malloc((size_t)L * s->n * nq * sizeof(float));
        s->logits = malloc(s->n * (size_t)V * sizeof(float));
        rk[i] = malloc(kv * sizeof(float));
        rv[i] = malloc(kv * sizeof(float));
        skv_kvcache *cache = NULL;
        if (!s->k || !s->v || !s->q || !s->logits || !rk[i] || !rv[i])
            rc = skv_error(SKV_ERR_NOMEM, "lossy bench: test sequence %zu", i);
        if (!rc)
            rc = skv_kvcache_create(cfg, s->n, &cache);
        /* pass 1: the model's K, V, as the store keeps them (dtype) */
        ref_ctx r = {s, kvd, nq};
        skv_forward_opts f1 = {.pool = in->pool, .hook = ref_kv, .hook_ctx = &r};
        if (!rc)
            rc = skv_model_forward(in->m, cache, s->tok, s->n, &f1);
        const size_t es = skv_dtype_size(in->dt);
        uint8_t *b = rc ? NULL : malloc(2 * kv * es);
        if (!rc && !b)
            rc = SKV_ERR_NOMEM;
        if (!rc)
            rc = skv_cast_from_f32(in->dt, b, s->k, kv);
        if (!rc)
            rc = skv_cast_from_f32(in->dt, b + kv * es, s->v, kv);
        if (!rc)
            rc = skv_cast_to_f32(in->dt, s->k, b, kv);
        if (!rc)
            rc = skv_cast_to_f32(in->dt, s->v, b + kv * es, kv);
        if (!rc && in->test_k && (memcmp(b, in->test_k[i], kv * es) || memcmp(b + kv * es, in->test_v[i], kv * es)))
            rc = skv_error(SKV_ERR_ARG, "test sequence %zu's K/V are not what the model computes for its tokens: "
                                        "was the file made with this model?", i);
        free(b);
        /* pass 2: the model attending over them; its queries and logits */
        sub_ctx sx = {s->k, s->v, s->n, kvd};
        skv_forward_opts f2 = {.pool = in->pool, .logits = s->logits, .hook = sub_kv, .hook_ctx = &sx,
                               .qhook = ref_q, .qhook_ctx = &r};
        if (!rc)
            rc = skv_kvcache_truncate(cache, 0);
        if (!rc)
            rc = skv_model_forward(in->m, cache, s->tok, s->n, &f2);
        skv_kvcache_free(cache);
    }
    if (!rc && !in->json) {
        fprintf(out, "lossy bench: %zu calibration and %zu test sequences, %s, exact window: first %d and last %d positions; "
                     "calibration %.1f s\n", in->n_cal, in->n_test, skv_dtype_name(in->dt), in->sink, in->recent, tcal);
        fprintf(out, "%-10s %-34s %8s %12s %12s %9s\n", "level", "method", "bits", "attn err", "KL (nats)",
                "greedy");
    }
    static const struct {
        const char *suffix, *what;
    } kinds[] = {
        {"", "transform + product VQ"},
        {"-rvq", "transform + residual VQ"},
        {"-sq", "transform + scalar"},
        {"-vq", "product VQ, no transform"},
        {"-sigq", "T_K from plain E[qq^T], product VQ"},
        {"-rtn", "per-channel round-to-nearest"},
        {"-kivi", "KIVI (K per channel, V per token)"},
    };
    for (int b = 4; !rc && b >= 2; b--) {
        if (!in->want[b])
            continue;
        double target = 0.0;
        for (int k = 0; !rc && k < 7; k++) {
            row r;
            memset(&r, 0, sizeof r);
            snprintf(r.name, sizeof r.name, "q%d%s", b, kinds[k].suffix);
            switch (k) {
            case 0: rc = level_code(&set, cal, b, SKV_LQ_PVQ, rk, rv, &r.bits); target = r.bits; break;
            case 1: rc = level_code(&set, cal, b, SKV_LQ_RVQ, rk, rv, &r.bits); break;
            case 2: r.bits = lb_match(&set, LB_SQ, target, cal, rk, rv, &r.param); break;
            case 3: rc = level_code(&set, cal_id, b, SKV_LQ_PVQ, rk, rv, &r.bits); break;
            case 4: rc = level_code(&set, cal_q, b, SKV_LQ_PVQ, rk, rv, &r.bits); break;
            case 5: r.bits = lb_match(&set, LB_RTN, target, cal, rk, rv, &r.param); break;
            case 6: r.bits = lb_match(&set, LB_KIVI, target, cal, rk, rv, &r.param); break;
            }
            if (!rc && r.bits < 0)
                rc = skv_error(SKV_ERR_NOMEM, "lossy bench baseline");
            if (!rc)
                rc = evaluate(in, &set, wo, rk, rv, &r);
            if (!rc)
                print_row(in, out, &r, L, kinds[k].what);
        }
    }
    for (size_t i = 0; set.seq && i < in->n_test; i++) {
        free(set.seq[i].k), free(set.seq[i].v), free(set.seq[i].q), free(set.seq[i].logits);
        free(rk[i]), free(rv[i]);
    }
    free(set.seq), free(rk), free(rv), free(wo);
    skv_lossy_cal_free(cal);
    skv_lossy_cal_free(cal_id);
    skv_lossy_cal_free(cal_q);
    return rc;
}
