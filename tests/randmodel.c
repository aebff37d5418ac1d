#include "randmodel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "skv_tensor.h"

static float rnd(skv_rng *r, float scale)
{
    float x = skv_rng_normal(r) * scale;
    if (fabsf(x) < 1.0f / 1024.0f)
        x = 0.0f;
    return skv_bf16_to_f32(skv_f32_to_bf16(x));
}

static float *rvec(skv_rng *r, size_t n, float scale, float offset)
{
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = skv_bf16_to_f32(skv_f32_to_bf16(offset + rnd(r, scale)));
    return v;
}

uint8_t *rm_llama2c(const rm_shape *s, uint64_t seed, size_t *len)
{
    skv_rng r;
    skv_rng_seed(&r, seed);
    const size_t d = (size_t)s->dim, L = (size_t)s->layers, hd = (size_t)(s->dim / s->heads);
    const size_t kv = (size_t)s->kv_heads * hd, hid = (size_t)s->hidden, V = (size_t)s->vocab;
    size_t floats = V * d + L * d + L * d * d + 2 * L * kv * d + L * d * d + L * d +
                    3 * L * hid * d + d + (size_t)s->max_seq * hd + (s->tied ? 0 : V * d);
    *len = 28 + 4 * floats;
    uint8_t *buf = malloc(*len);
    int32_t h[7] = {s->dim, s->hidden, s->layers, s->heads, s->kv_heads,
                    s->tied ? s->vocab : -s->vocab, s->max_seq};
    for (int i = 0; i < 7; i++)
        skv_store32_le(buf + 4 * i, (uint32_t)h[i]);
    uint8_t *p = buf + 28;
    /* segment sizes in file order, and whether they are norms (around 1) */
    size_t seg[13] = {V * d, L * d, L * d * d, L * kv * d, L * kv * d, L * d * d, L * d,
                      L * hid * d, L * d * hid, L * hid * d, d, (size_t)s->max_seq * hd,
                      s->tied ? 0 : V * d};
    int norm[13] = {0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0};
    for (int sg = 0; sg < 13; sg++) {
        for (size_t i = 0; i < seg[sg]; i++) {
            float x = norm[sg] ? 1.0f + rnd(&r, 0.1f) : rnd(&r, sg == 0 ? 0.5f : 0.25f);
            if (sg == 11)
                x = 0.0f; /* legacy RoPE tables: ignored by readers */
            skv_store32_le(p, skv_f32_bits(x));
            p += 4;
        }
    }
    return buf;
}

rm_hf *rm_hf_new(const rm_shape *s, uint64_t seed)
{
    skv_rng r;
    skv_rng_seed(&r, seed);
    rm_hf *m = calloc(1, sizeof *m);
    m->s = *s;
    const size_t d = (size_t)s->dim, hd = (size_t)s->head_dim, nq = (size_t)s->heads * hd,
                 nkv = (size_t)s->kv_heads * hd, hid = (size_t)s->hidden, V = (size_t)s->vocab;
    m->emb = rvec(&r, V * d, 0.5f, 0.0f);
    m->norm = rvec(&r, d, 0.1f, 1.0f);
    m->lm_head = s->tied ? NULL : rvec(&r, V * d, 0.25f, 0.0f);
    m->L = calloc((size_t)s->layers, sizeof *m->L);
    for (int l = 0; l < s->layers; l++) {
        m->L[l].in_norm = rvec(&r, d, 0.1f, 1.0f);
        m->L[l].q = rvec(&r, nq * d, 0.25f, 0.0f);
        m->L[l].k = rvec(&r, nkv * d, 0.25f, 0.0f);
        m->L[l].v = rvec(&r, nkv * d, 0.25f, 0.0f);
        m->L[l].o = rvec(&r, d * nq, 0.25f, 0.0f);
        if (s->arch == 1) {
            m->L[l].bq = rvec(&r, nq, 0.2f, 0.0f);
            m->L[l].bk = rvec(&r, nkv, 0.2f, 0.0f);
            m->L[l].bv = rvec(&r, nkv, 0.2f, 0.0f);
        }
        if (s->arch == 2) {
            m->L[l].qn = rvec(&r, hd, 0.1f, 1.0f);
            m->L[l].kn = rvec(&r, hd, 0.1f, 1.0f);
        }
        m->L[l].post_norm = rvec(&r, d, 0.1f, 1.0f);
        m->L[l].gate = rvec(&r, hid * d, 0.25f, 0.0f);
        m->L[l].up = rvec(&r, hid * d, 0.25f, 0.0f);
        m->L[l].down = rvec(&r, d * hid, 0.25f, 0.0f);
    }
    return m;
}

void rm_hf_free(rm_hf *m)
{
    if (!m)
        return;
    for (int l = 0; l < m->s.layers; l++) {
        free(m->L[l].in_norm); free(m->L[l].q); free(m->L[l].k); free(m->L[l].v);
        free(m->L[l].o); free(m->L[l].bq); free(m->L[l].bk); free(m->L[l].bv);
        free(m->L[l].qn); free(m->L[l].kn); free(m->L[l].post_norm); free(m->L[l].gate);
        free(m->L[l].up); free(m->L[l].down);
    }
    free(m->L);
    free(m->emb);
    free(m->norm);
    free(m->lm_head);
    free(m);
}

static void add(skv_st_writer *w, seqkv_dtype dt, const char *name, const float *x, int64_t r, int64_t c)
{
    size_t n = (size_t)r * (size_t)(c ? c : 1);
    uint8_t *buf = malloc(n * 4);
    skv_cast_from_f32(dt, buf, x, n);
    int64_t shape[2] = {r, c};
    int rc = skv_stw_add(w, name, dt, c ? 2 : 1, shape, buf, n * skv_dtype_size(dt));
    if (rc) {
        fprintf(stderr, "rm_hf_write: %s: %s\n", name, seqkv_error_detail());
        abort();
    }
    free(buf);
}

int rm_hf_write(const rm_hf *m, const char *dir, seqkv_dtype dt, int shards)
{
    const rm_shape *s = &m->s;
    mkdir(dir, 0755);
    static const char *const types[] = {"llama", "qwen2", "qwen3"};
    char path[4096], cfg[2048];
    snprintf(cfg, sizeof cfg,
             "{\"model_type\": \"%s\", \"hidden_size\": %d, \"intermediate_size\": %d, "
             "\"num_hidden_layers\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, "
             "\"head_dim\": %d, \"vocab_size\": %d, \"max_position_embeddings\": %d, "
             "\"rope_theta\": %.9g, \"rms_norm_eps\": %.9g, \"tie_word_embeddings\": %s, "
             "\"hidden_act\": \"silu\", \"bos_token_id\": 1, \"rope_scaling\": null}",
             types[s->arch], s->dim, s->hidden, s->layers, s->heads, s->kv_heads, s->head_dim,
             s->vocab, s->max_seq, (double)s->theta, (double)s->eps, s->tied ? "true" : "false");
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (skv_file_write(path, cfg, strlen(cfg)))
        return -1;
    const int64_t d = s->dim, hd = s->head_dim, nq = (int64_t)s->heads * hd,
                  nkv = (int64_t)s->kv_heads * hd, hid = s->hidden;
    skv_st_writer *w[2];
    skv_stw_create(&w[0]);
    skv_stw_create(&w[1]);
    char idx[65536];
    size_t il = (size_t)snprintf(idx, sizeof idx, "{\"metadata\": {}, \"weight_map\": {");
    int first = 1;
#define ADD(sh, name, x, r, c)                                                                   \
    do {                                                                                         \
        add(w[(sh) % 2], dt, (name), (x), (r), (c));                                             \
        il += (size_t)snprintf(idx + il, sizeof idx - il, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"", \
                               first ? "" : ", ", (name), (sh) % 2 + 1);                           \
        first = 0;                                                                               \
    } while (0)
    ADD(0, "model.embed_tokens.weight", m->emb, s->vocab, d);
    for (int l = 0; l < s->layers; l++) {
        char n[128];
        int sh = shards == 2 ? l : 0;
#define N(x) (snprintf(n, sizeof n, "model.layers.%d.%s", l, x), n)
        ADD(sh, N("input_layernorm.weight"), m->L[l].in_norm, d, 0);
        ADD(sh, N("self_attn.q_proj.weight"), m->L[l].q, nq, d);
        ADD(sh, N("self_attn.k_proj.weight"), m->L[l].k, nkv, d);
        ADD(sh, N("self_attn.v_proj.weight"), m->L[l].v, nkv, d);
        ADD(sh, N("self_attn.o_proj.weight"), m->L[l].o, d, nq);
        if (m->L[l].bq) {
            ADD(sh, N("self_attn.q_proj.bias"), m->L[l].bq, nq, 0);
            ADD(sh, N("self_attn.k_proj.bias"), m->L[l].bk, nkv, 0);
            ADD(sh, N("self_attn.v_proj.bias"), m->L[l].bv, nkv, 0);
        }
        if (m->L[l].qn) {
            ADD(sh, N("self_attn.q_norm.weight"), m->L[l].qn, hd, 0);
            ADD(sh, N("self_attn.k_norm.weight"), m->L[l].kn, hd, 0);
        }
        ADD(sh, N("post_attention_layernorm.weight"), m->L[l].post_norm, d, 0);
        ADD(sh, N("mlp.gate_proj.weight"), m->L[l].gate, hid, d);
        ADD(sh, N("mlp.up_proj.weight"), m->L[l].up, hid, d);
        ADD(sh, N("mlp.down_proj.weight"), m->L[l].down, d, hid);
#undef N
    }
    ADD(shards == 2 ? 1 : 0, "model.norm.weight", m->norm, d, 0);
    if (m->lm_head)
        ADD(0, "lm_head.weight", m->lm_head, s->vocab, d);
#undef ADD
    int rc;
    if (shards == 2) {
        il += (size_t)snprintf(idx + il, sizeof idx - il, "}}");
        snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", dir);
        rc = skv_stw_write(w[0], path);
        snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
        rc = rc ? rc : skv_stw_write(w[1], path);
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        rc = rc ? rc : skv_file_write(path, idx, il);
    } else {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        rc = skv_stw_write(w[0], path);
    }
    skv_stw_free(w[0]);
    skv_stw_free(w[1]);
    return rc;
}

/* ---- reference forward, written for clarity, in double ---- */

static void rms(double *o, const double *x, const float *w, int n, double eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    double inv = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++)
        o[i] = w[i] * (x[i] * inv);
}

static void lin(double *o, const float *W, const float *b, const double *x, int rows, int cols)
{
    for (int r = 0; r < rows; r++) {
        double s = b ? b[r] : 0.0;
        for (int c = 0; c < cols; c++)
            s += (double)W[(size_t)r * cols + c] * x[c];
        o[r] = s;
    }
}

static void rope_half(double *v, int hd, int pos, double theta)
{
    int half = hd / 2;
    for (int i = 0; i < half; i++) {
        double ang = pos * pow(theta, -2.0 * i / hd);
        double c = cos(ang), s = sin(ang), a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
    }
}

void rm_hf_reference(const rm_hf *m, const int32_t *tokens, int n, float *logits, float *kout, float *vout)
{
    const rm_shape *s = &m->s;
    const int d = s->dim, hd = s->head_dim, nh = s->heads, nkv = s->kv_heads, hid = s->hidden;
    const int nq = nh * hd, kvd = nkv * hd;
    double *x = calloc((size_t)n * d, sizeof *x), *xb = malloc((size_t)d * sizeof *xb);
    double *q = malloc((size_t)n * nq * sizeof *q), *K = malloc((size_t)n * kvd * sizeof *K);
    double *Vv = malloc((size_t)n * kvd * sizeof *Vv), *att = malloc((size_t)nq * sizeof *att);
    double *o = malloc((size_t)d * sizeof *o), *g = malloc((size_t)hid * sizeof *g);
    double *u = malloc((size_t)hid * sizeof *u), *sc = malloc((size_t)n * sizeof *sc);
    for (int t = 0; t < n; t++)
        for (int j = 0; j < d; j++)
            x[(size_t)t * d + j] = m->emb[(size_t)tokens[t] * d + j];
    for (int l = 0; l < s->layers; l++) {
        for (int t = 0; t < n; t++) {
            rms(xb, x + (size_t)t * d, m->L[l].in_norm, d, s->eps);
            lin(q + (size_t)t * nq, m->L[l].q, m->L[l].bq, xb, nq, d);
            lin(K + (size_t)t * kvd, m->L[l].k, m->L[l].bk, xb, kvd, d);
            lin(Vv + (size_t)t * kvd, m->L[l].v, m->L[l].bv, xb, kvd, d);
            for (int h = 0; h < nh; h++) {
                double *qh = q + (size_t)t * nq + h * hd;
                if (m->L[l].qn) {
                    double tmp[1024];
                    memcpy(tmp, qh, (size_t)hd * sizeof *tmp);
                    rms(qh, tmp, m->L[l].qn, hd, s->eps);
                }
                rope_half(qh, hd, t, s->theta);
            }
            for (int h = 0; h < nkv; h++) {
                double *kh = K + (size_t)t * kvd + h * hd;
                if (m->L[l].kn) {
                    double tmp[1024];
                    memcpy(tmp, kh, (size_t)hd * sizeof *tmp);
                    rms(kh, tmp, m->L[l].kn, hd, s->eps);
                }
                rope_half(kh, hd, t, s->theta);
            }
        }
        for (int t = 0; t < n; t++)
            for (int j = 0; j < kvd; j++) {
                kout[((size_t)l * n + t) * kvd + j] = (float)K[(size_t)t * kvd + j];
                vout[((size_t)l * n + t) * kvd + j] = (float)Vv[(size_t)t * kvd + j];
            }
        double *xn = malloc((size_t)n * d * sizeof *xn);
        for (int t = 0; t < n; t++) {
            for (int h = 0; h < nh; h++) {
                int kh = h / (nh / nkv);
                double mx = -1e300, sum = 0;
                for (int p = 0; p <= t; p++) {
                    double dd = 0;
                    for (int j = 0; j < hd; j++)
                        dd += q[(size_t)t * nq + h * hd + j] * K[(size_t)p * kvd + kh * hd + j];
                    sc[p] = dd / sqrt((double)hd);
                    if (sc[p] > mx)
                        mx = sc[p];
                }
                for (int p = 0; p <= t; p++)
                    sum += (sc[p] = exp(sc[p] - mx));
                for (int j = 0; j < hd; j++) {
                    double a = 0;
                    for (int p = 0; p <= t; p++)
                        a += sc[p] / sum * Vv[(size_t)p * kvd + kh * hd + j];
                    att[h * hd + j] = a;
                }
            }
            lin(o, m->L[l].o, NULL, att, d, nq);
            for (int j = 0; j < d; j++)
                xn[(size_t)t * d + j] = x[(size_t)t * d + j] + o[j];
        }
        for (int t = 0; t < n; t++) {
            double *xt = xn + (size_t)t * d;
            rms(xb, xt, m->L[l].post_norm, d, s->eps);
            lin(g, m->L[l].gate, NULL, xb, hid, d);
            lin(u, m->L[l].up, NULL, xb, hid, d);
            for (int j = 0; j < hid; j++)
                g[j] = g[j] / (1.0 + exp(-g[j])) * u[j];
            lin(o, m->L[l].down, NULL, g, d, hid);
            for (int j = 0; j < d; j++)
                x[(size_t)t * d + j] = xt[j] + o[j];
        }
        free(xn);
    }
    const float *cls = m->lm_head ? m->lm_head : m->emb;
    for (int t = 0; t < n; t++) {
        rms(xb, x + (size_t)t * d, m->norm, d, s->eps);
        for (int v = 0; v < s->vocab; v++) {
            double acc = 0;
            for (int j = 0; j < d; j++)
                acc += (double)cls[(size_t)v * d + j] * xb[j];
            logits[(size_t)t * s->vocab + v] = (float)acc;
        }
    }
    free(x); free(xb); free(q); free(K); free(Vv); free(att); free(o); free(g); free(u); free(sc);
}
