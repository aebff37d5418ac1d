/* The forward pass and the KV cache.
 *
 * Determinism: every output element (a matrix-product entry, an attention
 * output for one (position, head)) is computed start to finish by one
 * thread with the fixed-order dot product below; threads only split the
 * index space. Nothing depends on how many positions are processed at
 * once, so a prefill and the equivalent one-token steps give the same
 * bits, and so do 1 and N threads. */
#include <math.h>
#include <string.h>

#include "model_int.h"

struct skv_kvcache {
    int n_layers, kv_dim;
    size_t cap, len;
    float *k, *v; /* [layer][cap][kv_dim] */
};

float skv_expf(float x)
{
    return skv__expf(x);
}

/* ---- fixed-order dot products ------------------------------------------
 * Eight lanes: lane j sums elements j, j+8, j+16, ... in order (the tail
 * goes to lanes 0..); the lanes are then added as ((0+1)+(2+3))+((4+5)+
 * (6+7)). Written with 4-wide vectors, each lane's arithmetic is plain
 * IEEE float, so scalar and SIMD code give the same bits. */
typedef float v4f __attribute__((vector_size(16)));

static inline v4f ld4(const float *p)
{
    v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline float lanes_sum(v4f a, v4f b, const float *tail_a, const float *tail_b, int tail)
{
    float s[8];
    memcpy(s, &a, 16);
    memcpy(s + 4, &b, 16);
    for (int j = 0; j < tail; j++)
        s[j] += tail_a[j] * tail_b[j];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

static float dot_f32(const float *a, const float *b, int n)
{
    v4f s0 = {0, 0, 0, 0}, s1 = {0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        s0 += ld4(a + i) * ld4(b + i);
        s1 += ld4(a + i + 4) * ld4(b + i + 4);
    }
    return lanes_sum(s0, s1, a + i, b + i, n - i);
}

/* dot_f32 of four vectors x0..x3 (stride ldx) with the same w: each
 * result is computed exactly as dot_f32 computes it (same lanes, same
 * order); sharing the loads of w is the only difference. */
static void dot_f32_x4(const float *x, size_t ldx, const float *w, int n, float *out)
{
    const float *x0 = x, *x1 = x + ldx, *x2 = x + 2 * ldx, *x3 = x + 3 * ldx;
    v4f a0 = {0, 0, 0, 0}, b0 = a0, a1 = a0, b1 = a0, a2 = a0, b2 = a0, a3 = a0, b3 = a0;
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const v4f w0 = ld4(w + i), w1 = ld4(w + i + 4);
        a0 += ld4(x0 + i) * w0;
        b0 += ld4(x0 + i + 4) * w1;
        a1 += ld4(x1 + i) * w0;
        b1 += ld4(x1 + i + 4) * w1;
        a2 += ld4(x2 + i) * w0;
        b2 += ld4(x2 + i + 4) * w1;
        a3 += ld4(x3 + i) * w0;
        b3 += ld4(x3 + i + 4) * w1;
    }
    out[0] = lanes_sum(a0, b0, x0 + i, w + i, n - i);
    out[1] = lanes_sum(a1, b1, x1 + i, w + i, n - i);
    out[2] = lanes_sum(a2, b2, x2 + i, w + i, n - i);
    out[3] = lanes_sum(a3, b3, x3 + i, w + i, n - i);
}

/* ---- KV cache ----------------------------------------------------------- */

int skv_kvcache_create(const skv_model_config *cfg, size_t capacity, skv_kvcache **out)
{
    *out = NULL;
    if (capacity == 0 || capacity > ((size_t)1 << 24))
        return skv_error(SKV_ERR_ARG, "KV cache capacity %zu out of range [1, 2^24]", capacity);
    skv_kvcache *c = skv_calloc(1, sizeof *c);
    if (!c)
        return skv_error(SKV_ERR_NOMEM, "KV cache");
    c->n_layers = cfg->n_layers;
    c->kv_dim = cfg->n_kv_heads * cfg->head_dim;
    c->cap = capacity;
    size_t n = (size_t)c->n_layers * capacity * (size_t)c->kv_dim;
    c->k = skv_malloc(n * sizeof(float));
    c->v = skv_malloc(n * sizeof(float));
    if (!c->k || !c->v) {
        skv_kvcache_free(c);
        return skv_error(SKV_ERR_NOMEM, "KV cache of %zu positions", capacity);
    }
    *out = c;
    return SKV_OK;
}

void skv_kvcache_free(skv_kvcache *c)
{
    if (!c)
        return;
    skv_free(c->k);
    skv_free(c->v);
    skv_free(c);
}

size_t skv_kvcache_len(const skv_kvcache *c) { return c->len; }
size_t skv_kvcache_capacity(const skv_kvcache *c) { return c->cap; }

int skv_kvcache_truncate(skv_kvcache *c, size_t len)
{
    if (len > c->len)
        return skv_error(SKV_ERR_ARG, "truncate to %zu beyond length %zu", len, c->len);
    c->len = len;
    return SKV_OK;
}

float *skv_kvcache_k(skv_kvcache *c, int layer, size_t pos)
{
    return c->k + ((size_t)layer * c->cap + pos) * (size_t)c->kv_dim;
}

float *skv_kvcache_v(skv_kvcache *c, int layer, size_t pos)
{
    return c->v + ((size_t)layer * c->cap + pos) * (size_t)c->kv_dim;
}

int skv_kvcache_append(skv_kvcache *c, seqkv_dtype dtype, const void *k, const void *v, size_t n)
{
    size_t es = skv_dtype_size(dtype);
    if (dtype == SEQKV_DT_I32 || es == 0)
        return skv_error(SKV_ERR_ARG, "KV dtype %s is not a float type", skv_dtype_name(dtype));
    if (n > c->cap - c->len)
        return skv_error(SKV_ERR_TOO_LARGE, "appending %zu positions to a cache holding %zu of %zu",
                         n, c->len, c->cap);
    const uint8_t *kb = k, *vb = v;
    size_t row = (size_t)c->kv_dim;
    for (int l = 0; l < c->n_layers; l++) {
        size_t off = (size_t)l * n * row * es;
        int rc = skv_cast_to_f32(dtype, skv_kvcache_k(c, l, c->len), kb + off, n * row);
        if (!rc)
            rc = skv_cast_to_f32(dtype, skv_kvcache_v(c, l, c->len), vb + off, n * row);
        if (rc)
            return rc;
    }
    c->len += n;
    return SKV_OK;
}

int skv_kvcache_export(const skv_kvcache *c, size_t p0, size_t n, seqkv_dtype dtype, void *k_out,
                       void *v_out)
{
    size_t es = skv_dtype_size(dtype);
    if (dtype == SEQKV_DT_I32 || es == 0)
        return skv_error(SKV_ERR_ARG, "KV dtype %s is not a float type", skv_dtype_name(dtype));
    if (p0 > c->len || n > c->len - p0)
        return skv_error(SKV_ERR_ARG, "export of positions [%zu, %zu) beyond length %zu", p0,
                         p0 + n, c->len);
    size_t row = (size_t)c->kv_dim;
    for (int l = 0; l < c->n_layers; l++) {
        size_t off = (size_t)l * n * row * es;
        const float *ks = c->k + ((size_t)l * c->cap + p0) * row;
        const float *vs = c->v + ((size_t)l * c->cap + p0) * row;
        int rc = skv_cast_from_f32(dtype, (uint8_t *)k_out + off, ks, n * row);
        if (!rc)
            rc = skv_cast_from_f32(dtype, (uint8_t *)v_out + off, vs, n * row);
        if (rc)
            return rc;
    }
    return SKV_OK;
}

/* ---- building blocks --------------------------------------------------- */

/* y[i][r] = W[r] . x[i] (* scale[r]) (+ bias[r]) for i < n, rows split
 * across threads. */
/* Below this many multiply-adds a parallel region is not worth waking. */
#define SMALL_WORK ((size_t)1 << 17)

typedef struct {
    const skv_mat *W;
    const float *x;
    float *y;
    const float *bias;
    float *rowbuf; /* [threads][widest]: a dequantized row, reused over tokens */
    size_t widest;
    size_t n;
    int ldx, ldy;
} matmul_ctx;

static inline void store_out(const matmul_ctx *c, size_t i, size_t r, float y, float scale)
{
    if (c->W->q != SKV_WQ_F32)
        y *= scale;
    if (c->bias)
        y += c->bias[r];
    c->y[i * (size_t)c->ldy + r] = y;
}

static void matmul_task(void *vctx, size_t r0, size_t r1, int worker)
{
    const matmul_ctx *c = vctx;
    const skv_mat *W = c->W;
    const int cols = W->cols;
    const float *lut = W->q == SKV_WQ_FP8 ? skv__fp8_lut() : NULL;
    float *tmp = c->rowbuf + (size_t)worker * c->widest;
    for (size_t r = r0; r < r1; r++) {
        const size_t off = r * (size_t)cols;
        const float *w = W->f + off;
        float scale = 1.0f;
        if (W->q != SKV_WQ_F32) {
            /* Exact dequantization (int8 and fp8 values are floats), the
             * scale applied after the dot product. */
            const uint8_t *q = W->q8 + off;
            if (W->q == SKV_WQ_INT8)
                for (int j = 0; j < cols; j++)
                    tmp[j] = (float)(int8_t)q[j];
            else
                for (int j = 0; j < cols; j++)
                    tmp[j] = lut[q[j]];
            w = tmp;
            scale = W->scale[r];
        }
        size_t i = 0;
        float y4[4];
        for (; i + 4 <= c->n; i += 4) {
            dot_f32_x4(c->x + i * (size_t)c->ldx, (size_t)c->ldx, w, cols, y4);
            for (int k = 0; k < 4; k++)
                store_out(c, i + (size_t)k, r, y4[k], scale);
        }
        for (; i < c->n; i++)
            store_out(c, i, r, dot_f32(c->x + i * (size_t)c->ldx, w, cols), scale);
    }
}

static void matmul(skv_pool *pool, float *rowbuf, size_t widest, const skv_mat *W,
                   const float *bias, const float *x, int ldx,
                   float *y, int ldy, size_t n)
{
    matmul_ctx c = {W, x, y, bias, rowbuf, widest, n, ldx, ldy};
    /* Waking the pool costs more than a small product; which thread runs
     * a row never changes its result, so small ones run inline. */
    if ((size_t)W->rows * (size_t)W->cols * n < SMALL_WORK)
        pool = NULL;
    skv_pool_run(pool, (size_t)W->rows, matmul_task, &c);
}

static void rmsnorm(float *o, const float *x, const float *w, int n, float eps)
{
    float ss = dot_f32(x, x, n);
    ss = ss / (float)n + eps;
    float inv = 1.0f / sqrtf(ss);
    for (int j = 0; j < n; j++)
        o[j] = w[j] * (inv * x[j]);
}

/* cos/sin of every (position, frequency) of this call, computed once and
 * shared by all heads and layers. tab: [n][half] cos then [n][half] sin. */
static void rope_table(float *tab, const float *inv_freq, int half, size_t pos0, size_t n)
{
    float *cs = tab, *sn = tab + n * (size_t)half;
    for (size_t i = 0; i < n; i++) {
        for (int j = 0; j < half; j++) {
            float ang = (float)(pos0 + i) * inv_freq[j];
            double sd, cd;
            skv_sincos((double)ang, &sd, &cd);
            cs[i * (size_t)half + j] = (float)cd;
            sn[i * (size_t)half + j] = (float)sd;
        }
    }
}

/* Rotate one head's first 2*half channels with one position's row of the
 * table. */
static void rope(float *v, const float *cs, const float *sn, int half, skv_rope_layout layout)
{
    for (int i = 0; i < half; i++) {
        const float s = sn[i], c = cs[i];
        const int a = layout == SKV_ROPE_PAIR ? 2 * i : i;
        const int b = layout == SKV_ROPE_PAIR ? 2 * i + 1 : i + half;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
    }
}

typedef struct {
    const skv_model *m;
    skv_kvcache *cache;
    int layer;
    size_t pos0, n;
    const float *q; /* [n][nh*hd] */
    float *out;     /* [n][nh*hd] */
    float *scores;  /* [threads][ctx] */
    size_t ctx;
} attn_ctx;

static void attn_task(void *vctx, size_t b, size_t e, int worker)
{
    const attn_ctx *a = vctx;
    const skv_model_config *cfg = &a->m->cfg;
    const int hd = cfg->head_dim, nh = cfg->n_heads, grp = nh / cfg->n_kv_heads;
    const int kv_dim = cfg->n_kv_heads * hd;
    const float scale = sqrtf((float)hd);
    float *sc = a->scores + (size_t)worker * a->ctx;
    for (size_t item = b; item < e; item++) {
        /* Zigzag over positions (0, n-1, 1, n-2, ...) so that contiguous
         * ranges of items carry equal attention work. */
        const size_t zz = item / (size_t)nh;
        const size_t i = (zz & 1) ? a->n - 1 - (zz >> 1) : (zz >> 1);
        const int h = (int)(item % (size_t)nh), kh = h / grp;
        const size_t upto = a->pos0 + i + 1;
        const float *q = a->q + i * (size_t)(nh * hd) + (size_t)h * hd;
        const float *K = skv_kvcache_k(a->cache, a->layer, 0) + (size_t)kh * hd;
        const float *V = skv_kvcache_v(a->cache, a->layer, 0) + (size_t)kh * hd;
        float mx = -INFINITY;
        for (size_t t = 0; t < upto; t++) {
            float s = dot_f32(q, K + t * (size_t)kv_dim, hd) / scale;
            sc[t] = s;
            if (s > mx)
                mx = s;
        }
        float sum = 0.0f;
        for (size_t t = 0; t < upto; t++) {
            sc[t] = skv__expf(sc[t] - mx);
            sum += sc[t];
        }
        float *o = a->out + i * (size_t)(nh * hd) + (size_t)h * hd;
        for (int d = 0; d < hd; d++)
            o[d] = 0.0f;
        for (size_t t = 0; t < upto; t++) {
            const float w = sc[t] / sum;
            const float *v = V + t * (size_t)kv_dim;
            for (int d = 0; d < hd; d++)
                o[d] += w * v[d];
        }
    }
}

void skv_log_softmax(float *out, const float *logits, size_t n, int vocab)
{
    for (size_t i = 0; i < n; i++) {
        const float *x = logits + i * (size_t)vocab;
        float *o = out + i * (size_t)vocab;
        float mx = x[0];
        for (int j = 1; j < vocab; j++)
            if (x[j] > mx)
                mx = x[j];
        double s = 0.0;
        for (int j = 0; j < vocab; j++)
            s += skv_exp((double)x[j] - (double)mx);
        const double lse = (double)mx + skv_log(s);
        for (int j = 0; j < vocab; j++)
            o[j] = (float)((double)x[j] - lse);
    }
}

static float silu(float x)
{
    return x / (1.0f + skv__expf(-x));
}

/* ---- the forward pass --------------------------------------------------- */

int skv_model_forward(const skv_model *m, skv_kvcache *cache, const int32_t *tokens, size_t n,
                      const skv_forward_opts *opts)
{
    static const skv_forward_opts none;
    if (!opts)
        opts = &none;
    const skv_model_config *cfg = &m->cfg;
    const int d = cfg->dim, hd = cfg->head_dim, nh = cfg->n_heads, nkv = cfg->n_kv_heads;
    const int nq = nh * hd, kv_dim = nkv * hd, hid = cfg->hidden_dim, V = cfg->vocab_size;
    if (n == 0)
        return skv_error(SKV_ERR_ARG, "forward of zero tokens");
    if (cache->n_layers != cfg->n_layers || cache->kv_dim != kv_dim)
        return skv_error(SKV_ERR_ARG, "KV cache shape does not match the model");
    if (n > cache->cap - cache->len)
        return skv_error(SKV_ERR_TOO_LARGE, "%zu tokens do not fit: cache holds %zu of %zu positions",
                         n, cache->len, cache->cap);
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return skv_error(SKV_ERR_ARG, "token id %d at index %zu outside the vocabulary [0, %d)",
                             tokens[i], i, V);
    const size_t pos0 = cache->len, ctx = pos0 + n;
    const int threads = skv_pool_threads(opts->pool);
    const size_t half = (size_t)cfg->rope_dim / 2;
    size_t widest = (size_t)(d > nq ? d : nq);
    if ((size_t)hid > widest)
        widest = (size_t)hid;
    size_t nf = n * (size_t)(2 * d + 2 * nq + 2 * kv_dim + 2 * hid) + (size_t)threads * ctx +
                2 * n * half + (size_t)threads * widest;
    float *buf = skv_malloc(nf * sizeof(float));
    if (!buf)
        return skv_error(SKV_ERR_NOMEM, "forward scratch for %zu tokens", n);
    float *x = buf, *xb = x + n * d, *q = xb + n * d, *att = q + n * nq;
    float *k = att + n * nq, *v = k + n * kv_dim, *h1 = v + n * kv_dim, *h3 = h1 + n * hid;
    float *scores = h3 + n * hid;
    float *rcs = scores + (size_t)threads * ctx, *rsn = rcs + n * half;
    float *rowbuf = rsn + n * half;
    rope_table(rcs, m->rope_inv_freq, (int)half, pos0, n);

    for (size_t i = 0; i < n; i++)
        memcpy(x + i * d, m->tok_emb + (size_t)tokens[i] * d, (size_t)d * sizeof(float));

    for (int l = 0; l < cfg->n_layers; l++) {
        const skv_layer *L = &m->layers[l];
        for (size_t i = 0; i < n; i++)
            rmsnorm(xb + i * d, x + i * d, L->rms_att, d, cfg->norm_eps);
        matmul(opts->pool, rowbuf, widest, &L->wq, L->bq, xb, d, q, nq, n);
        matmul(opts->pool, rowbuf, widest, &L->wk, L->bk, xb, d, k, kv_dim, n);
        matmul(opts->pool, rowbuf, widest, &L->wv, L->bv, xb, d, v, kv_dim, n);
        for (size_t i = 0; i < n; i++) {
            for (int h = 0; h < nh; h++) {
                float *qh = q + i * nq + (size_t)h * hd;
                if (L->q_norm)
                    rmsnorm(qh, qh, L->q_norm, hd, cfg->norm_eps);
                rope(qh, rcs + i * half, rsn + i * half, half, cfg->rope_layout);
            }
            for (int h = 0; h < nkv; h++) {
                float *kh = k + i * kv_dim + (size_t)h * hd;
                if (L->k_norm)
                    rmsnorm(kh, kh, L->k_norm, hd, cfg->norm_eps);
                rope(kh, rcs + i * half, rsn + i * half, half, cfg->rope_layout);
            }
        }
        if (opts->qhook)
            opts->qhook(opts->qhook_ctx, l, pos0, n, q);
        if (opts->hook)
            opts->hook(opts->hook_ctx, l, pos0, n, k, v);
        memcpy(skv_kvcache_k(cache, l, pos0), k, n * kv_dim * sizeof(float));
        memcpy(skv_kvcache_v(cache, l, pos0), v, n * kv_dim * sizeof(float));

        attn_ctx ac = {m, cache, l, pos0, n, q, att, scores, ctx};
        skv_pool_run(n * (size_t)nh * ctx * (size_t)hd < SMALL_WORK ? NULL : opts->pool,
                     n * (size_t)nh, attn_task, &ac);
        matmul(opts->pool, rowbuf, widest, &L->wo, NULL, att, nq, xb, d, n);
        for (size_t j = 0; j < n * (size_t)d; j++)
            x[j] += xb[j];

        for (size_t i = 0; i < n; i++)
            rmsnorm(xb + i * d, x + i * d, L->rms_ffn, d, cfg->norm_eps);
        matmul(opts->pool, rowbuf, widest, &L->w1, NULL, xb, d, h1, hid, n);
        matmul(opts->pool, rowbuf, widest, &L->w3, NULL, xb, d, h3, hid, n);
        for (size_t j = 0; j < n * (size_t)hid; j++)
            h1[j] = silu(h1[j]) * h3[j];
        matmul(opts->pool, rowbuf, widest, &L->w2, NULL, h1, hid, xb, d, n);
        for (size_t j = 0; j < n * (size_t)d; j++)
            x[j] += xb[j];
    }
    cache->len += n;

    if (opts->logits || opts->logprobs) {
        const size_t first = opts->last_only ? n - 1 : 0, rows = n - first;
        for (size_t i = first; i < n; i++)
            rmsnorm(xb + i * d, x + i * d, m->rms_final, d, cfg->norm_eps);
        float *lg = opts->logits;
        float *tmp = NULL;
        if (!lg) {
            tmp = skv_malloc(rows * (size_t)V * sizeof(float));
            if (!tmp) {
                skv_free(buf);
                return skv_error(SKV_ERR_NOMEM, "logits for %zu tokens", rows);
            }
            lg = tmp;
        }
        matmul(opts->pool, rowbuf, widest, &m->cls, NULL, xb + first * d, d, lg, V, rows);
        if (opts->logprobs)
            skv_log_softmax(opts->logprobs, lg, rows, V);
        skv_free(tmp);
    }
    skv_free(buf);
    return SKV_OK;
}
