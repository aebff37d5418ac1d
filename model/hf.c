/* Hugging Face checkpoints: config.json + model.safetensors (or a sharded
 * model.safetensors.index.json) for the llama, qwen2 and qwen3
 * architectures, and the writer behind `seqkv model convert`. */
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "model_int.h"

/* ---- config.json -------------------------------------------------------- */

static int json_int(const skv_json *root, const char *key, int required, int def, int lo, int hi,
                    int *out)
{
    const skv_json *v = skv_json_get(root, key);
    if (!v || v->type == SKV_JSON_NULL) {
        if (required)
            return skv_error(SKV_ERR_FORMAT, "config.json: missing \"%s\"", key);
        *out = def;
        return SKV_OK;
    }
    if (v->type != SKV_JSON_NUM || !v->is_int)
        return skv_error(SKV_ERR_FORMAT, "config.json: \"%s\" must be an integer", key);
    if (v->i64 < lo || v->i64 > hi)
        return skv_error(SKV_ERR_FORMAT, "config.json: \"%s\" = %lld out of range [%d, %d]", key,
                         (long long)v->i64, lo, hi);
    *out = (int)v->i64;
    return SKV_OK;
}

static int json_num(const skv_json *root, const char *key, double def, double *out)
{
    const skv_json *v = skv_json_get(root, key);
    if (!v || v->type == SKV_JSON_NULL) {
        *out = def;
        return SKV_OK;
    }
    if (v->type != SKV_JSON_NUM)
        return skv_error(SKV_ERR_FORMAT, "config.json: \"%s\" must be a number", key);
    *out = v->num;
    return SKV_OK;
}

static int json_bool(const skv_json *root, const char *key, int def, int *out)
{
    const skv_json *v = skv_json_get(root, key);
    if (!v || v->type == SKV_JSON_NULL) {
        *out = def;
        return SKV_OK;
    }
    if (v->type != SKV_JSON_BOOL)
        return skv_error(SKV_ERR_FORMAT, "config.json: \"%s\" must be true or false", key);
    *out = v->boolean;
    return SKV_OK;
}

static int config_from_json(const skv_json *root, skv_model_config *c)
{
    memset(c, 0, sizeof *c);
    if (root->type != SKV_JSON_OBJ)
        return skv_error(SKV_ERR_FORMAT, "config.json: not a JSON object");
    const skv_json *mt = skv_json_get(root, "model_type");
    if (!mt || mt->type != SKV_JSON_STR)
        return skv_error(SKV_ERR_FORMAT, "config.json: missing \"model_type\"");
    if (strcmp(mt->str, "llama") == 0)
        c->arch = SKV_ARCH_LLAMA;
    else if (strcmp(mt->str, "qwen2") == 0)
        c->arch = SKV_ARCH_QWEN2;
    else if (strcmp(mt->str, "qwen3") == 0)
        c->arch = SKV_ARCH_QWEN3;
    else
        return skv_error(SKV_ERR_UNSUPPORTED,
                         "config.json: model_type \"%s\" (seqkv runs llama, qwen2 and qwen3)", mt->str);
    int rc;
    const int BIG = 1 << 30;
    if ((rc = json_int(root, "hidden_size", 1, 0, 1, BIG, &c->dim)) ||
        (rc = json_int(root, "intermediate_size", 1, 0, 1, BIG, &c->hidden_dim)) ||
        (rc = json_int(root, "num_hidden_layers", 1, 0, 1, BIG, &c->n_layers)) ||
        (rc = json_int(root, "num_attention_heads", 1, 0, 1, BIG, &c->n_heads)) ||
        (rc = json_int(root, "num_key_value_heads", 0, c->n_heads, 1, BIG, &c->n_kv_heads)) ||
        (rc = json_int(root, "vocab_size", 1, 0, 1, BIG, &c->vocab_size)) ||
        (rc = json_int(root, "max_position_embeddings", 0, 2048, 1, BIG, &c->max_seq)) ||
        (rc = json_int(root, "bos_token_id", 0, 1, 0, BIG, &c->bos_id)))
        return rc;
    if (c->dim % c->n_heads && !skv_json_get(root, "head_dim"))
        return skv_error(SKV_ERR_FORMAT, "config.json: hidden_size %d not divisible by %d heads",
                         c->dim, c->n_heads);
    if ((rc = json_int(root, "head_dim", 0, c->dim / c->n_heads, 1, BIG, &c->head_dim)))
        return rc;
    double theta, eps, partial;
    if ((rc = json_num(root, "rope_theta", 10000.0, &theta)) ||
        (rc = json_num(root, "rms_norm_eps", 1e-6, &eps)) ||
        (rc = json_num(root, "partial_rotary_factor", 1.0, &partial)))
        return rc;
    if (!(partial > 0.0 && partial <= 1.0))
        return skv_error(SKV_ERR_FORMAT, "config.json: partial_rotary_factor %g out of (0, 1]", partial);
    c->rope_theta = (float)theta;
    c->norm_eps = (float)eps;
    c->rope_dim = (int)((double)c->head_dim * partial);
    c->rope_dim &= ~1;
    c->rope_layout = SKV_ROPE_HALF;
    if ((rc = json_bool(root, "tie_word_embeddings", 0, &c->tied_embeddings)))
        return rc;
    int bias = 0;
    if ((rc = json_bool(root, "attention_bias", 0, &bias)))
        return rc;
    c->qkv_bias = c->arch == SKV_ARCH_QWEN2 ? 1 : bias;
    c->qk_norm = c->arch == SKV_ARCH_QWEN3;
    const skv_json *act = skv_json_get(root, "hidden_act");
    if (act && (act->type != SKV_JSON_STR || strcmp(act->str, "silu") != 0))
        return skv_error(SKV_ERR_UNSUPPORTED, "config.json: hidden_act must be \"silu\"");
    const skv_json *rs = skv_json_get(root, "rope_scaling");
    if (rs && rs->type != SKV_JSON_NULL) {
        const skv_json *t = skv_json_get(rs, "rope_type");
        if (!t)
            t = skv_json_get(rs, "type");
        if (!t || t->type != SKV_JSON_STR || strcmp(t->str, "default") != 0)
            return skv_error(SKV_ERR_UNSUPPORTED, "config.json: rope_scaling is not supported");
    }
    int sliding = 0;
    if ((rc = json_bool(root, "use_sliding_window", 0, &sliding)))
        return rc;
    if (sliding)
        return skv_error(SKV_ERR_UNSUPPORTED, "config.json: sliding-window attention is not supported");
    if (c->bos_id >= c->vocab_size)
        c->bos_id = 0;
    return skv__config_check(c);
}

int skv_model_config_from_hf(const char *json, size_t len, skv_model_config *cfg)
{
    skv_json *root;
    int rc = skv_json_parse(json, len, &root);
    if (rc)
        return rc;
    rc = config_from_json(root, cfg);
    skv_json_free(root);
    return rc;
}

/* ---- weights -------------------------------------------------------------- */

#define MAX_SHARDS 256

typedef struct {
    skv_st *shard[MAX_SHARDS];
    int n;
} shards;

static const skv_tensor *find(const shards *s, const char *name)
{
    for (int i = 0; i < s->n; i++) {
        const skv_tensor *t = skv_st_find(s->shard[i], name);
        if (t)
            return t;
    }
    return NULL;
}

static int load_vec(const shards *s, const char *name, float *dst, int64_t r, int64_t c, int two_d)
{
    const skv_tensor *t = find(s, name);
    if (!t)
        return skv_error(SKV_ERR_NOT_FOUND, "checkpoint has no tensor \"%s\"", name);
    int ok = two_d ? (t->ndim == 2 && t->shape[0] == r && t->shape[1] == c)
                   : (t->ndim == 1 && t->shape[0] == r);
    if (!ok) {
        char sh[128] = "";
        for (int i = 0; i < t->ndim && strlen(sh) < 100; i++)
            snprintf(sh + strlen(sh), sizeof sh - strlen(sh), "%s%lld", i ? ", " : "",
                     (long long)t->shape[i]);
        if (two_d)
            return skv_error(SKV_ERR_SHAPE, "tensor \"%s\" has shape [%s], expected [%lld, %lld]",
                             name, sh, (long long)r, (long long)c);
        return skv_error(SKV_ERR_SHAPE, "tensor \"%s\" has shape [%s], expected [%lld]", name, sh,
                         (long long)r);
    }
    if (t->dtype == SEQKV_DT_I32)
        return skv_error(SKV_ERR_SHAPE, "tensor \"%s\" is I32, expected a float type", name);
    return skv_cast_to_f32(t->dtype, dst, t->data, t->nelem);
}

static int load_mat(const shards *s, const char *name, skv_mat *m)
{
    return load_vec(s, name, m->f, m->rows, m->cols, 1);
}

static int dir_of(const char *path, char *dir, size_t cap)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return skv_error(SKV_ERR_IO, "%s: %s", path, strerror(errno));
    if (snprintf(dir, cap, "%s", path) >= (int)cap)
        return skv_error(SKV_ERR_ARG, "path too long");
    if (!S_ISDIR(st.st_mode)) {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s", path);
        snprintf(dir, cap, "%s", dirname(tmp));
    }
    return SKV_OK;
}

static int open_shards(const char *dir, shards *s)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    struct stat st;
    if (stat(p, &st) == 0) {
        s->n = 1;
        return skv_st_open(p, &s->shard[0]);
    }
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    uint8_t *buf;
    size_t len;
    int rc = skv_file_read(p, 64u << 20, &buf, &len);
    if (rc)
        return skv_error(rc, "%s: neither model.safetensors nor model.safetensors.index.json", dir);
    skv_json *root;
    rc = skv_json_parse((const char *)buf, len, &root);
    skv_free(buf);
    if (rc)
        return rc;
    const skv_json *wm = skv_json_get(root, "weight_map");
    if (!wm || wm->type != SKV_JSON_OBJ) {
        skv_json_free(root);
        return skv_error(SKV_ERR_FORMAT, "%s: no \"weight_map\" object", p);
    }
    /* distinct file names, in order of first appearance */
    const char *names[MAX_SHARDS];
    int n = 0;
    for (const skv_json *e = wm->child; e && rc == SKV_OK; e = e->next) {
        if (e->type != SKV_JSON_STR || strchr(e->str, '/') || e->str[0] == '.') {
            rc = skv_error(SKV_ERR_FORMAT, "%s: bad shard name for \"%s\"", p, e->key);
            break;
        }
        int seen = 0;
        for (int i = 0; i < n; i++)
            seen |= strcmp(names[i], e->str) == 0;
        if (!seen) {
            if (n == MAX_SHARDS)
                rc = skv_error(SKV_ERR_TOO_LARGE, "%s: more than %d shards", p, MAX_SHARDS);
            else
                names[n++] = e->str;
        }
    }
    for (int i = 0; rc == SKV_OK && i < n; i++) {
        char sp[4200];
        snprintf(sp, sizeof sp, "%s/%s", dir, names[i]);
        rc = skv_st_open(sp, &s->shard[s->n]);
        if (rc == SKV_OK)
            s->n++;
    }
    skv_json_free(root);
    return rc;
}

int skv__model_load_hf(const char *path, skv_model **out); /* used by weights.c */

int skv__model_load_hf(const char *path, skv_model **out)
{
    *out = NULL;
    char dir[4096];
    int rc = dir_of(path, dir, sizeof dir);
    if (rc)
        return rc;
    char cp[4200];
    snprintf(cp, sizeof cp, "%s/config.json", dir);
    uint8_t *buf;
    size_t len;
    if ((rc = skv_file_read(cp, 16u << 20, &buf, &len)))
        return rc;
    skv_model_config cfg;
    rc = skv_model_config_from_hf((const char *)buf, len, &cfg);
    skv_free(buf);
    if (rc)
        return rc;
    shards s = {.n = 0};
    skv_model *m = NULL;
    if ((rc = open_shards(dir, &s)) || (rc = skv__model_alloc(&cfg, &m)))
        goto done;
    const int64_t d = cfg.dim, hd = cfg.head_dim, nq = (int64_t)cfg.n_heads * hd,
                  nkv = (int64_t)cfg.n_kv_heads * hd;
    if ((rc = load_vec(&s, "model.embed_tokens.weight", m->tok_emb, cfg.vocab_size, d, 1)))
        goto done;
    for (int l = 0; l < cfg.n_layers && rc == SKV_OK; l++) {
        skv_layer *L = &m->layers[l];
        char n[160];
#define NAME(fmt) (snprintf(n, sizeof n, "model.layers.%d." fmt, l), n)
        if ((rc = load_vec(&s, NAME("input_layernorm.weight"), L->rms_att, d, 0, 0)) ||
            (rc = load_mat(&s, NAME("self_attn.q_proj.weight"), &L->wq)) ||
            (rc = load_mat(&s, NAME("self_attn.k_proj.weight"), &L->wk)) ||
            (rc = load_mat(&s, NAME("self_attn.v_proj.weight"), &L->wv)) ||
            (rc = load_mat(&s, NAME("self_attn.o_proj.weight"), &L->wo)) ||
            (rc = load_vec(&s, NAME("post_attention_layernorm.weight"), L->rms_ffn, d, 0, 0)) ||
            (rc = load_mat(&s, NAME("mlp.gate_proj.weight"), &L->w1)) ||
            (rc = load_mat(&s, NAME("mlp.down_proj.weight"), &L->w2)) ||
            (rc = load_mat(&s, NAME("mlp.up_proj.weight"), &L->w3)))
            break;
        if (cfg.qkv_bias &&
            ((rc = load_vec(&s, NAME("self_attn.q_proj.bias"), L->bq, nq, 0, 0)) ||
             (rc = load_vec(&s, NAME("self_attn.k_proj.bias"), L->bk, nkv, 0, 0)) ||
             (rc = load_vec(&s, NAME("self_attn.v_proj.bias"), L->bv, nkv, 0, 0))))
            break;
        if (cfg.qk_norm &&
            ((rc = load_vec(&s, NAME("self_attn.q_norm.weight"), L->q_norm, hd, 0, 0)) ||
             (rc = load_vec(&s, NAME("self_attn.k_norm.weight"), L->k_norm, hd, 0, 0))))
            break;
#undef NAME
    }
    if (rc == SKV_OK)
        rc = load_vec(&s, "model.norm.weight", m->rms_final, d, 0, 0);
    if (rc == SKV_OK && !cfg.tied_embeddings)
        rc = load_mat(&s, "lm_head.weight", &m->cls);
    if (rc == SKV_OK)
        rc = skv__model_finish(m);
done:
    for (int i = 0; i < s.n; i++)
        skv_st_free(s.shard[i]);
    if (rc) {
        skv_model_free(m);
        return rc;
    }
    *out = m;
    return SKV_OK;
}

/* ---- writer ------------------------------------------------------------- */

int skv_rope_pair_to_half(int c, int rot)
{
    if (c >= rot)
        return c;
    return (c & 1) * (rot / 2) + c / 2;
}

typedef struct {
    skv_st_writer *w;
    seqkv_dtype dt;
    uint8_t *tmp;
    float *perm;
} writer;

static int put(writer *W, const char *name, const float *src, int64_t rows, int64_t cols)
{
    size_t n = (size_t)rows * (size_t)(cols ? cols : 1);
    int rc = skv_cast_from_f32(W->dt, W->tmp, src, n);
    if (rc)
        return rc;
    int64_t shape[2] = {rows, cols};
    return skv_stw_add(W->w, name, W->dt, cols ? 2 : 1, shape, W->tmp, n * skv_dtype_size(W->dt));
}

/* Rows (or entries) of a per-head q/k quantity, reordered from the pair
 * to the half RoPE layout. */
static const float *permute_rows(writer *W, const float *src, int heads, int hd, int rot,
                                 int cols)
{
    const size_t row = (size_t)(cols ? cols : 1);
    for (int h = 0; h < heads; h++)
        for (int c = 0; c < hd; c++)
            memcpy(W->perm + ((size_t)h * hd + skv_rope_pair_to_half(c, rot)) * row,
                   src + ((size_t)h * hd + c) * row, row * sizeof(float));
    return W->perm;
}

static int write_config(const skv_model_config *c, const char *path, seqkv_dtype dt)
{
    static const char *const types[] = {"llama", "qwen2", "qwen3"};
    static const char *const archs[] = {"LlamaForCausalLM", "Qwen2ForCausalLM",
                                        "Qwen3ForCausalLM"};
    const char *tdt = dt == SEQKV_DT_BF16 ? "bfloat16" : dt == SEQKV_DT_F16 ? "float16" : "float32";
    char buf[2048];
    int n = snprintf(buf, sizeof buf,
                     "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n"
                     "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n"
                     "  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n"
                     "  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n"
                     "  \"vocab_size\": %d,\n  \"max_position_embeddings\": %d,\n"
                     "  \"rope_theta\": %.9g,\n  \"rms_norm_eps\": %.9g,\n"
                     "  \"partial_rotary_factor\": %.9g,\n"
                     "  \"tie_word_embeddings\": %s,\n  \"attention_bias\": %s,\n"
                     "  \"hidden_act\": \"silu\",\n  \"bos_token_id\": %d,\n"
                     "  \"rope_scaling\": null,\n  \"torch_dtype\": \"%s\"\n}\n",
                     archs[c->arch], types[c->arch], c->dim, c->hidden_dim, c->n_layers,
                     c->n_heads, c->n_kv_heads, c->head_dim, c->vocab_size, c->max_seq,
                     (double)c->rope_theta, (double)c->norm_eps,
                     (double)c->rope_dim / (double)c->head_dim,
                     c->tied_embeddings ? "true" : "false", c->qkv_bias ? "true" : "false",
                     c->bos_id, tdt);
    if (n < 0 || (size_t)n >= sizeof buf)
        return skv_error(SKV_ERR_ARG, "config too long");
    return skv_file_write(path, buf, (size_t)n);
}

int skv_model_save_hf(const skv_model *m, const char *dir, seqkv_dtype dtype)
{
    const skv_model_config *c = &m->cfg;
    if (m->wq != SKV_WQ_F32)
        return skv_error(SKV_ERR_ARG, "only float32 models can be saved");
    if (dtype != SEQKV_DT_F32 && dtype != SEQKV_DT_BF16 && dtype != SEQKV_DT_F16)
        return skv_error(SKV_ERR_ARG, "weights can be saved as F32, BF16 or F16, not %s",
                         skv_dtype_name(dtype));
    if (c->arch == SKV_ARCH_QWEN2 && !c->qkv_bias)
        return skv_error(SKV_ERR_UNSUPPORTED, "qwen2 checkpoints always carry q/k/v biases");
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return skv_error(SKV_ERR_IO, "%s: %s", dir, strerror(errno));
    const int d = c->dim, hd = c->head_dim, nq = c->n_heads * hd, nkv = c->n_kv_heads * hd;
    const int hid = c->hidden_dim, V = c->vocab_size;
    const int perm = c->rope_layout == SKV_ROPE_PAIR;
    size_t biggest = (size_t)V * d;
    size_t mats[] = {(size_t)nq * d, (size_t)hid * d};
    for (size_t i = 0; i < 2; i++)
        if (mats[i] > biggest)
            biggest = mats[i];
    writer W = {NULL, dtype, skv_malloc(biggest * 4), skv_malloc(biggest * sizeof(float))};
    int rc = skv_stw_create(&W.w);
    if (!W.tmp || !W.perm)
        rc = skv_error(SKV_ERR_NOMEM, "convert buffers");
    if (rc == SKV_OK)
        rc = skv_stw_meta(W.w, "format", "pt");
    if (rc == SKV_OK)
        rc = put(&W, "model.embed_tokens.weight", m->tok_emb, V, d);
    for (int l = 0; rc == SKV_OK && l < c->n_layers; l++) {
        const skv_layer *L = &m->layers[l];
        char n[160];
#define NAME(fmt) (snprintf(n, sizeof n, "model.layers.%d." fmt, l), n)
#define PQ(src, heads, cols) (perm ? permute_rows(&W, (src), (heads), hd, c->rope_dim, (cols)) : (src))
        if ((rc = put(&W, NAME("input_layernorm.weight"), L->rms_att, d, 0)) ||
            (rc = put(&W, NAME("self_attn.q_proj.weight"), PQ(L->wq.f, c->n_heads, d), nq, d)) ||
            (rc = put(&W, NAME("self_attn.k_proj.weight"), PQ(L->wk.f, c->n_kv_heads, d), nkv, d)) ||
            (rc = put(&W, NAME("self_attn.v_proj.weight"), L->wv.f, nkv, d)) ||
            (rc = put(&W, NAME("self_attn.o_proj.weight"), L->wo.f, d, nq)) ||
            (rc = put(&W, NAME("post_attention_layernorm.weight"), L->rms_ffn, d, 0)) ||
            (rc = put(&W, NAME("mlp.gate_proj.weight"), L->w1.f, hid, d)) ||
            (rc = put(&W, NAME("mlp.down_proj.weight"), L->w2.f, d, hid)) ||
            (rc = put(&W, NAME("mlp.up_proj.weight"), L->w3.f, hid, d)))
            break;
        if (L->bq && ((rc = put(&W, NAME("self_attn.q_proj.bias"), PQ(L->bq, c->n_heads, 0), nq, 0)) ||
                      (rc = put(&W, NAME("self_attn.k_proj.bias"), PQ(L->bk, c->n_kv_heads, 0), nkv, 0)) ||
                      (rc = put(&W, NAME("self_attn.v_proj.bias"), L->bv, nkv, 0))))
            break;
        if (L->q_norm && ((rc = put(&W, NAME("self_attn.q_norm.weight"), PQ(L->q_norm, 1, 0), hd, 0)) ||
                          (rc = put(&W, NAME("self_attn.k_norm.weight"), PQ(L->k_norm, 1, 0), hd, 0))))
            break;
#undef PQ
#undef NAME
    }
    if (rc == SKV_OK)
        rc = put(&W, "model.norm.weight", m->rms_final, d, 0);
    if (rc == SKV_OK && !c->tied_embeddings)
        rc = put(&W, "lm_head.weight", m->cls.f, V, d);
    char p[4200];
    if (rc == SKV_OK) {
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        rc = skv_stw_write(W.w, p);
    }
    if (rc == SKV_OK) {
        skv_model_config hc = *c;
        hc.rope_layout = SKV_ROPE_HALF;
        snprintf(p, sizeof p, "%s/config.json", dir);
        rc = write_config(&hc, p, dtype);
    }
    skv_stw_free(W.w);
    skv_free(W.tmp);
    skv_free(W.perm);
    return rc;
}
