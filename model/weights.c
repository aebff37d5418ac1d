/* Model weights: allocation, validation, llama2.c checkpoints, quantized
 * copies and the model fingerprint. */
#include <math.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "model_int.h"

/* ---- allocation ------------------------------------------------------- */

int skv__mat_alloc(skv_mat *m, int rows, int cols)
{
    memset(m, 0, sizeof *m);
    m->rows = rows;
    m->cols = cols;
    m->q = SKV_WQ_F32;
    m->f = skv_calloc((size_t)rows * (size_t)cols, sizeof(float));
    if (!m->f)
        return skv_error(SKV_ERR_NOMEM, "weight matrix %dx%d", rows, cols);
    return SKV_OK;
}

void skv__mat_free(skv_mat *m)
{
    skv_free(m->f);
    skv_free(m->q8);
    skv_free(m->scale);
    memset(m, 0, sizeof *m);
}

int skv__config_check(const skv_model_config *c)
{
    if (c->dim < 1 || c->dim > 65536)
        return skv_error(SKV_ERR_FORMAT, "dim %d out of range [1, 65536]", c->dim);
    if (c->hidden_dim < 1 || c->hidden_dim > (1 << 20))
        return skv_error(SKV_ERR_FORMAT, "hidden_dim %d out of range", c->hidden_dim);
    if (c->n_layers < 1 || c->n_layers > 1024)
        return skv_error(SKV_ERR_FORMAT, "n_layers %d out of range", c->n_layers);
    if (c->n_heads < 1 || c->n_heads > 4096)
        return skv_error(SKV_ERR_FORMAT, "n_heads %d out of range", c->n_heads);
    if (c->n_kv_heads < 1 || c->n_kv_heads > c->n_heads || c->n_heads % c->n_kv_heads)
        return skv_error(SKV_ERR_FORMAT, "n_kv_heads %d must divide n_heads %d", c->n_kv_heads, c->n_heads);
    if (c->head_dim < 2 || c->head_dim > 1024 || (c->head_dim & 1))
        return skv_error(SKV_ERR_FORMAT, "head_dim %d must be even and in [2, 1024]", c->head_dim);
    if ((int64_t)c->n_heads * c->head_dim > (1 << 20))
        return skv_error(SKV_ERR_FORMAT, "n_heads * head_dim too large");
    if (c->rope_dim < 2 || c->rope_dim > c->head_dim || (c->rope_dim & 1))
        return skv_error(SKV_ERR_FORMAT, "rotary dim %d must be even and <= head_dim %d",
                         c->rope_dim, c->head_dim);
    if (c->vocab_size < 1 || c->vocab_size > (1 << 22))
        return skv_error(SKV_ERR_FORMAT, "vocab_size %d out of range", c->vocab_size);
    if (c->max_seq < 1) return skv_error(SKV_ERR_FORMAT, "max_seq %d must be positive", c->max_seq);
    if (!(c->rope_theta > 1.0f) || !(c->rope_theta < 1e12f))
        return skv_error(SKV_ERR_FORMAT, "rope_theta %g out of range", (double)c->rope_theta);
    if (!(c->norm_eps > 0.0f) || !(c->norm_eps < 1.0f))
        return skv_error(SKV_ERR_FORMAT, "norm eps %g out of range", (double)c->norm_eps);
    if (c->bos_id < 0 || c->bos_id >= c->vocab_size)
        return skv_error(SKV_ERR_FORMAT, "bos id %d out of range", c->bos_id);
    /* Bound the total so every size computation below fits comfortably. */
    uint64_t per_layer = (uint64_t)c->dim * (uint64_t)c->head_dim *
                             (uint64_t)(2 * c->n_heads + 2 * c->n_kv_heads) +
                         3ull * (uint64_t)c->dim * (uint64_t)c->hidden_dim;
    uint64_t total = per_layer * (uint64_t)c->n_layers + 2ull * c->vocab_size * (uint64_t)c->dim;
    if (total > (1ull << 36)) return skv_error(SKV_ERR_FORMAT, "model has %llu parameters; the limit is 2^36",
                                  (unsigned long long)total);
    return SKV_OK;
}

int skv__model_alloc(const skv_model_config *cfg, skv_model **out)
{
    *out = NULL;
    int rc = skv__config_check(cfg);
    if (rc)
        return rc;
    skv_model *m = skv_calloc(1, sizeof *m);
    if (!m)
        return skv_error(SKV_ERR_NOMEM, "model");
    m->cfg = *cfg;
    m->wq = SKV_WQ_F32;
    const int d = cfg->dim, hd = cfg->head_dim, nq = cfg->n_heads * hd,
              nkv = cfg->n_kv_heads * hd, hid = cfg->hidden_dim;
    m->layers = skv_calloc((size_t)cfg->n_layers, sizeof *m->layers);
    m->tok_emb = skv_calloc((size_t)cfg->vocab_size * d, sizeof(float));
    m->rms_final = skv_calloc((size_t)d, sizeof(float));
    rc = (m->layers && m->tok_emb && m->rms_final) ? SKV_OK
                                                    : skv_error(SKV_ERR_NOMEM, "model");
    for (int l = 0; rc == SKV_OK && l < cfg->n_layers; l++) {
        skv_layer *L = &m->layers[l];
        if ((rc = skv__mat_alloc(&L->wq, nq, d)) || (rc = skv__mat_alloc(&L->wk, nkv, d)) ||
            (rc = skv__mat_alloc(&L->wv, nkv, d)) || (rc = skv__mat_alloc(&L->wo, d, nq)) ||
            (rc = skv__mat_alloc(&L->w1, hid, d)) || (rc = skv__mat_alloc(&L->w2, d, hid)) ||
            (rc = skv__mat_alloc(&L->w3, hid, d)))
            break;
        L->rms_att = skv_calloc((size_t)d, sizeof(float));
        L->rms_ffn = skv_calloc((size_t)d, sizeof(float));
        if (!L->rms_att || !L->rms_ffn)
            rc = skv_error(SKV_ERR_NOMEM, "model norms");
        if (rc == SKV_OK && cfg->qkv_bias) {
            L->bq = skv_calloc((size_t)nq, sizeof(float));
            L->bk = skv_calloc((size_t)nkv, sizeof(float));
            L->bv = skv_calloc((size_t)nkv, sizeof(float));
            if (!L->bq || !L->bk || !L->bv)
                rc = skv_error(SKV_ERR_NOMEM, "model biases");
        }
        if (rc == SKV_OK && cfg->qk_norm) {
            L->q_norm = skv_calloc((size_t)hd, sizeof(float));
            L->k_norm = skv_calloc((size_t)hd, sizeof(float));
            if (!L->q_norm || !L->k_norm)
                rc = skv_error(SKV_ERR_NOMEM, "model qk norms");
        }
    }
    if (rc == SKV_OK) {
        if (cfg->tied_embeddings) {
            m->cls.rows = cfg->vocab_size;
            m->cls.cols = d;
            m->cls.q = SKV_WQ_F32;
            m->cls.f = m->tok_emb;
            m->cls_borrowed = 1;
        } else {
            rc = skv__mat_alloc(&m->cls, cfg->vocab_size, d);
        }
    }
    if (rc) {
        skv_model_free(m);
        return rc;
    }
    *out = m;
    return SKV_OK;
}

void skv_model_free(skv_model *m)
{
    if (!m)
        return;
    if (m->layers) {
        for (int l = 0; l < m->cfg.n_layers; l++) {
            skv_layer *L = &m->layers[l];
            skv__mat_free(&L->wq);
            skv__mat_free(&L->wk);
            skv__mat_free(&L->wv);
            skv__mat_free(&L->wo);
            skv__mat_free(&L->w1);
            skv__mat_free(&L->w2);
            skv__mat_free(&L->w3);
            skv_free(L->rms_att);
            skv_free(L->rms_ffn);
            skv_free(L->bq);
            skv_free(L->bk);
            skv_free(L->bv);
            skv_free(L->q_norm);
            skv_free(L->k_norm);
        }
        skv_free(m->layers);
    }
    if (m->cls_borrowed)
        memset(&m->cls, 0, sizeof m->cls);
    else
        skv__mat_free(&m->cls);
    skv_free(m->tok_emb);
    skv_free(m->rms_final);
    skv_free(m->rope_inv_freq);
    skv_free(m);
}

/* ---- derived state ---------------------------------------------------- */

static void hash_floats(crypto_generichash_state *h, const float *f, size_t n)
{
    uint8_t buf[1024];
    size_t i = 0;
    while (i < n) {
        size_t k = 0;
        for (; k < sizeof buf / 4 && i < n; k++, i++)
            skv_store32_le(buf + 4 * k, skv_f32_bits(f[i]));
        crypto_generichash_update(h, buf, 4 * k);
    }
}

static void hash_mat(crypto_generichash_state *h, const skv_mat *m)
{
    uint8_t hdr[12];
    skv_store32_le(hdr, (uint32_t)m->rows);
    skv_store32_le(hdr + 4, (uint32_t)m->cols);
    skv_store32_le(hdr + 8, (uint32_t)m->q);
    crypto_generichash_update(h, hdr, sizeof hdr);
    size_t n = (size_t)m->rows * m->cols;
    if (m->q == SKV_WQ_F32) {
        hash_floats(h, m->f, n);
    } else {
        crypto_generichash_update(h, m->q8, n);
        hash_floats(h, m->scale, (size_t)m->rows);
    }
}

static void hash_opt(crypto_generichash_state *h, const float *f, size_t n)
{
    if (f)
        hash_floats(h, f, n);
}

int skv__model_finish(skv_model *m)
{
    const skv_model_config *c = &m->cfg;
    int half = c->rope_dim / 2;
    skv_free(m->rope_inv_freq);
    m->rope_inv_freq = skv_malloc((size_t)half * sizeof(float));
    if (!m->rope_inv_freq)
        return skv_error(SKV_ERR_NOMEM, "rope table");
    /* theta^(-2i/rot), rounded to float as llama2.c and HF both hold it. */
    double lt = skv_log((double)c->rope_theta);
    for (int i = 0; i < half; i++)
        m->rope_inv_freq[i] = (float)skv_exp(-lt * (double)(2 * i) / (double)c->rope_dim);

    if (sodium_init() < 0)
        return skv_error(SKV_ERR_IO, "libsodium failed to initialise");
    crypto_generichash_state h;
    crypto_generichash_init(&h, NULL, 0, 16);
    int32_t ints[] = {(int32_t)c->arch, c->dim, c->hidden_dim, c->n_layers, c->n_heads,
                      c->n_kv_heads, c->head_dim, c->vocab_size, c->rope_dim,
                      (int32_t)c->rope_layout, c->tied_embeddings, c->qkv_bias, c->qk_norm,
                      (int32_t)m->wq};
    uint8_t buf[sizeof ints + 8];
    for (size_t i = 0; i < sizeof ints / 4; i++)
        skv_store32_le(buf + 4 * i, (uint32_t)ints[i]);
    skv_store32_le(buf + sizeof ints, skv_f32_bits(c->rope_theta));
    skv_store32_le(buf + sizeof ints + 4, skv_f32_bits(c->norm_eps));
    crypto_generichash_update(&h, buf, sizeof buf);
    const size_t d = (size_t)c->dim, hd = (size_t)c->head_dim;
    hash_floats(&h, m->tok_emb, (size_t)c->vocab_size * d);
    for (int l = 0; l < c->n_layers; l++) {
        const skv_layer *L = &m->layers[l];
        hash_floats(&h, L->rms_att, d);
        hash_mat(&h, &L->wq);
        hash_mat(&h, &L->wk);
        hash_mat(&h, &L->wv);
        hash_mat(&h, &L->wo);
        hash_opt(&h, L->bq, (size_t)c->n_heads * hd);
        hash_opt(&h, L->bk, (size_t)c->n_kv_heads * hd);
        hash_opt(&h, L->bv, (size_t)c->n_kv_heads * hd);
        hash_opt(&h, L->q_norm, hd);
        hash_opt(&h, L->k_norm, hd);
        hash_floats(&h, L->rms_ffn, d);
        hash_mat(&h, &L->w1);
        hash_mat(&h, &L->w2);
        hash_mat(&h, &L->w3);
    }
    hash_floats(&h, m->rms_final, d);
    if (!m->cls_borrowed)
        hash_mat(&h, &m->cls);
    uint8_t out[16];
    crypto_generichash_final(&h, out, sizeof out);
    sodium_bin2hex(m->fingerprint, sizeof m->fingerprint, out, sizeof out);
    return SKV_OK;
}

/* ---- accessors -------------------------------------------------------- */

const skv_model_config *skv_model_cfg(const skv_model *m) { return &m->cfg; }
skv_wquant skv_model_wquant(const skv_model *m) { return m->wq; }
const char *skv_model_fingerprint(const skv_model *m) { return m->fingerprint; }

size_t skv_model_kv_per_token(const skv_model *m)
{
    return (size_t)m->cfg.n_layers * 2u * (size_t)m->cfg.n_kv_heads * (size_t)m->cfg.head_dim;
}

static size_t mat_bytes(const skv_mat *x)
{
    size_t n = (size_t)x->rows * x->cols;
    return x->q == SKV_WQ_F32 ? n * 4 : n + (size_t)x->rows * 4;
}

static size_t model_count(const skv_model *m, int bytes)
{
    const skv_model_config *c = &m->cfg;
    size_t d = (size_t)c->dim, hd = (size_t)c->head_dim, total = 0;
#define MAT(x) total += bytes ? mat_bytes(&(x)) : (size_t)(x).rows * (x).cols
#define VEC(p, n) total += (p) ? (n) * (bytes ? 4 : 1) : 0
    VEC(m->tok_emb, (size_t)c->vocab_size * d);
    for (int l = 0; l < c->n_layers; l++) {
        const skv_layer *L = &m->layers[l];
        MAT(L->wq); MAT(L->wk); MAT(L->wv); MAT(L->wo);
        MAT(L->w1); MAT(L->w2); MAT(L->w3);
        VEC(L->rms_att, d); VEC(L->rms_ffn, d);
        VEC(L->bq, c->n_heads * hd); VEC(L->bk, c->n_kv_heads * hd);
        VEC(L->bv, c->n_kv_heads * hd);
        VEC(L->q_norm, hd); VEC(L->k_norm, hd);
    }
    VEC(m->rms_final, d);
    if (!m->cls_borrowed)
        MAT(m->cls);
#undef MAT
#undef VEC
    return total;
}

size_t skv_model_params(const skv_model *m) { return model_count(m, 0); }
size_t skv_model_weight_bytes(const skv_model *m) { return model_count(m, 1); }

/* ---- quantized copies ------------------------------------------------- */

static float g_fp8_lut[256];
static pthread_once_t g_fp8_once = PTHREAD_ONCE_INIT;
static void fp8_lut_init(void)
{
    for (int i = 0; i < 256; i++)
        g_fp8_lut[i] = skv_f8e4m3_to_f32((uint8_t)i);
}

const float *skv__fp8_lut(void)
{
    pthread_once(&g_fp8_once, fp8_lut_init);
    return g_fp8_lut;
}

static int quantize_mat(const skv_mat *src, skv_wquant q, skv_mat *dst)
{
    size_t n = (size_t)src->rows * src->cols;
    memset(dst, 0, sizeof *dst);
    dst->rows = src->rows;
    dst->cols = src->cols;
    dst->q = q;
    dst->q8 = skv_malloc(n);
    dst->scale = skv_malloc((size_t)src->rows * sizeof(float));
    if (!dst->q8 || !dst->scale) {
        skv__mat_free(dst);
        return skv_error(SKV_ERR_NOMEM, "quantized matrix %dx%d", src->rows, src->cols);
    }
    const float qmax = q == SKV_WQ_INT8 ? 127.0f : 448.0f;
    for (int r = 0; r < src->rows; r++) {
        const float *w = src->f + (size_t)r * src->cols;
        float amax = 0.0f;
        for (int c = 0; c < src->cols; c++)
            amax = fmaxf(amax, fabsf(w[c]));
        float scale = amax > 0.0f ? amax / qmax : 1.0f;
        dst->scale[r] = scale;
        uint8_t *o = dst->q8 + (size_t)r * src->cols;
        for (int c = 0; c < src->cols; c++) {
            float x = w[c] / scale;
            if (q == SKV_WQ_INT8) {
                float rx = nearbyintf(x); /* ties to even (default rounding mode) */
                rx = rx > 127.0f ? 127.0f : rx < -127.0f ? -127.0f : rx;
                o[c] = (uint8_t)(int8_t)rx;
            } else {
                o[c] = skv_f32_to_f8e4m3(x);
            }
        }
    }
    return SKV_OK;
}

static float *dup_floats(const float *src, size_t n, int *rc)
{
    if (!src || *rc)
        return NULL;
    float *d = skv_malloc(n * sizeof(float));
    if (!d) {
        *rc = skv_error(SKV_ERR_NOMEM, "quantized copy");
        return NULL;
    }
    memcpy(d, src, n * sizeof(float));
    return d;
}

int skv_model_quantize(const skv_model *m, skv_wquant q, skv_model **out)
{
    *out = NULL;
    if (m->wq != SKV_WQ_F32 || (q != SKV_WQ_INT8 && q != SKV_WQ_FP8))
        return skv_error(SKV_ERR_ARG, "quantize needs a float32 model and int8 or fp8");
    const skv_model_config *c = &m->cfg;
    skv_model *x = skv_calloc(1, sizeof *x);
    if (!x)
        return skv_error(SKV_ERR_NOMEM, "model");
    x->cfg = *c;
    x->wq = q;
    int rc = SKV_OK;
    size_t d = (size_t)c->dim, hd = (size_t)c->head_dim;
    x->tok_emb = dup_floats(m->tok_emb, (size_t)c->vocab_size * d, &rc);
    x->rms_final = dup_floats(m->rms_final, d, &rc);
    x->layers = rc ? NULL : skv_calloc((size_t)c->n_layers, sizeof *x->layers);
    if (!rc && !x->layers)
        rc = skv_error(SKV_ERR_NOMEM, "model");
    for (int l = 0; rc == SKV_OK && l < c->n_layers; l++) {
        const skv_layer *S = &m->layers[l];
        skv_layer *L = &x->layers[l];
        if ((rc = quantize_mat(&S->wq, q, &L->wq)) || (rc = quantize_mat(&S->wk, q, &L->wk)) ||
            (rc = quantize_mat(&S->wv, q, &L->wv)) || (rc = quantize_mat(&S->wo, q, &L->wo)) ||
            (rc = quantize_mat(&S->w1, q, &L->w1)) || (rc = quantize_mat(&S->w2, q, &L->w2)) ||
            (rc = quantize_mat(&S->w3, q, &L->w3)))
            break;
        L->rms_att = dup_floats(S->rms_att, d, &rc);
        L->rms_ffn = dup_floats(S->rms_ffn, d, &rc);
        L->bq = dup_floats(S->bq, c->n_heads * hd, &rc);
        L->bk = dup_floats(S->bk, c->n_kv_heads * hd, &rc);
        L->bv = dup_floats(S->bv, c->n_kv_heads * hd, &rc);
        L->q_norm = dup_floats(S->q_norm, hd, &rc);
        L->k_norm = dup_floats(S->k_norm, hd, &rc);
    }
    if (rc == SKV_OK)
        rc = quantize_mat(&m->cls, q, &x->cls);
    if (rc == SKV_OK)
        rc = skv__model_finish(x);
    if (rc) {
        skv_model_free(x);
        return rc;
    }
    *out = x;
    return SKV_OK;
}

/* ---- llama2.c checkpoints -------------------------------------------- */

static void read_floats(float *dst, const uint8_t **p, size_t n)
{
    const uint8_t *s = *p;
    for (size_t i = 0; i < n; i++)
        dst[i] = skv_bits_f32(skv_load32_le(s + 4 * i));
    *p = s + 4 * n;
}

/* The seven header fields of a real checkpoint are small positive sizes
 * (vocab may be negative: untied embeddings). Anything else -- a text
 * file, a KV file, a store's data.mdb -- is no checkpoint at all, and is
 * told so before any shape check talks of a 959586353-dim model. */
static int llama2c_header_plausible(const int32_t h[7])
{
    const int64_t vocab = h[5] < 0 ? -(int64_t)h[5] : h[5];
    return h[0] >= 1 && h[0] <= (1 << 16) && h[1] >= 1 && h[1] <= (1 << 20) && h[2] >= 1 &&
           h[2] <= 1024 && h[3] >= 1 && h[3] <= 4096 && h[4] >= 1 && h[4] <= h[3] && vocab >= 1 &&
           vocab <= (1 << 22) && h[6] >= 1 && h[6] <= (1 << 24);
}

#define NOT_A_MODEL "not a llama2.c checkpoint or Hugging Face model directory"

int skv_model_load_llama2c_mem(const uint8_t *buf, size_t len, skv_model **out)
{
    *out = NULL;
    if (len < 28)
        return skv_error(SKV_ERR_FORMAT, NOT_A_MODEL ": %zu bytes, shorter than a checkpoint's "
                         "28-byte header", len);
    int32_t h[7];
    for (int i = 0; i < 7; i++)
        h[i] = (int32_t)skv_load32_le(buf + 4 * i);
    if (!llama2c_header_plausible(h))
        return skv_error(SKV_ERR_FORMAT, NOT_A_MODEL ": its first 28 bytes are no checkpoint "
                         "header");
    skv_model_config c;
    memset(&c, 0, sizeof c);
    c.arch = SKV_ARCH_LLAMA;
    c.dim = h[0];
    c.hidden_dim = h[1];
    c.n_layers = h[2];
    c.n_heads = h[3];
    c.n_kv_heads = h[4];
    c.tied_embeddings = h[5] > 0;
    c.vocab_size = h[5] > 0 ? h[5] : (h[5] == INT32_MIN ? 0 : -h[5]);
    c.max_seq = h[6];
    if (c.n_heads < 1 || c.dim < 1 || c.dim % c.n_heads)
        return skv_error(SKV_ERR_FORMAT, "llama2.c checkpoint: dim %d not divisible by n_heads %d",
                         c.dim, c.n_heads);
    c.head_dim = c.dim / c.n_heads;
    c.rope_dim = c.head_dim;
    c.rope_theta = 10000.0f;
    c.rope_layout = SKV_ROPE_PAIR;
    c.norm_eps = 1e-5f;
    c.bos_id = 1;
    int rc = skv__config_check(&c);
    if (rc)
        return rc;
    if (c.head_dim * c.n_heads != c.dim)
        return skv_error(SKV_ERR_FORMAT, "llama2.c checkpoint: head_dim mismatch");
    if (c.max_seq > (1 << 24))
        return skv_error(SKV_ERR_FORMAT, "llama2.c checkpoint: seq_len %d out of range", c.max_seq);
    const uint64_t d = (uint64_t)c.dim, L = (uint64_t)c.n_layers, kv = (uint64_t)c.n_kv_heads * c.head_dim,
                   hid = (uint64_t)c.hidden_dim, V = (uint64_t)c.vocab_size;
    uint64_t floats = V * d + L * d + L * d * d + 2 * L * kv * d + L * d * d + L * d +
                      3 * L * hid * d + d + (uint64_t)c.max_seq * (uint64_t)c.head_dim;
    if (!c.tied_embeddings)
        floats += V * d;
    uint64_t want = 28 + 4 * floats;
    if ((uint64_t)len != want)
        return skv_error(SKV_ERR_SHAPE, "llama2.c checkpoint: %zu bytes, but its header (dim %d, layers %d, vocab %d, seq_len %d) implies %llu",
                         len, c.dim, c.n_layers, c.vocab_size, c.max_seq, (unsigned long long)want);
    skv_model *m;
    if ((rc = skv__model_alloc(&c, &m)))
        return rc;
    const uint8_t *p = buf + 28;
    read_floats(m->tok_emb, &p, V * d);
    for (int l = 0; l < c.n_layers; l++) read_floats(m->layers[l].rms_att, &p, d);
    for (int l = 0; l < c.n_layers; l++) read_floats(m->layers[l].wq.f, &p, d * d);
    for (int l = 0; l < c.n_layers; l++) read_floats(m->layers[l].wk.f, &p, kv * d);
    for (int l = 0; l < c.n_layers; l++) read_floats(m->layers[l].wv.f, &p, kv * d);
    for (int l = 0; l < c.n_layers; l++) read_floats(m->layers[l].wo.f, &p, d * d);
    for (int l = 0; l < c.n_layers; l++) read_floats(m->layers[l].rms_ffn, &p, d);
    for (int l = 0; l < c.n_layers; l++) read_floats(m->layers[l].w1.f, &p, hid * d);
    for (int l = 0; l < c.n_layers; l++) read_floats(m->layers[l].w2.f, &p, d * hid);
    for (int l = 0; l < c.n_layers; l++) read_floats(m->layers[l].w3.f, &p, hid * d);
    read_floats(m->rms_final, &p, d);
    p += 4 * (uint64_t)c.max_seq * (uint64_t)c.head_dim; /* legacy RoPE tables */
    if (!c.tied_embeddings)
        read_floats(m->cls.f, &p, V * d);
    if ((rc = skv__model_finish(m))) {
        skv_model_free(m);
        return rc;
    }
    *out = m;
    return SKV_OK;
}

int skv__model_load_hf(const char *path, skv_model **out); /* hf.c */

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

int skv_model_load(const char *path, skv_model **out)
{
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0)
        return skv_error(SKV_ERR_IO, "%s: no such file or directory", path);
    if (S_ISDIR(st.st_mode) || ends_with(path, ".safetensors") || ends_with(path, ".json"))
        return skv__model_load_hf(path, out);
    uint8_t *buf;
    size_t len;
    int rc = skv_file_read(path, (size_t)1 << 38, &buf, &len);
    if (rc)
        return rc;
    rc = skv_model_load_llama2c_mem(buf, len, out);
    skv_free(buf);
    return rc;
}

int skv_model_wo(const skv_model *m, int layer, float *out)
{
    if (layer < 0 || layer >= m->cfg.n_layers)
        return skv_error(SKV_ERR_ARG, "layer %d outside [0, %d)", layer, m->cfg.n_layers);
    const skv_mat *w = &m->layers[layer].wo;
    const size_t cols = (size_t)w->cols;
    for (int r = 0; r < w->rows; r++) {
        float *o = out + (size_t)r * cols;
        if (w->q == SKV_WQ_F32) {
            memcpy(o, w->f + (size_t)r * cols, cols * sizeof(float));
        } else if (w->q == SKV_WQ_INT8) {
            const int8_t *q = (const int8_t *)w->q8 + (size_t)r * cols;
            for (size_t c = 0; c < cols; c++)
                o[c] = (float)q[c] * w->scale[r];
        } else {
            const float *lut = skv__fp8_lut();
            const uint8_t *q = w->q8 + (size_t)r * cols;
            for (size_t c = 0; c < cols; c++)
                o[c] = lut[q[c]] * w->scale[r];
        }
    }
    return SKV_OK;
}
