/* Calibration files: a safetensors image, written and read back. */
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "delta_int.h"

/* The codebook: its rows, their counts and their tokens */
static int add_codebook(skv_st_writer *w, const skv_calib *c)
{
    const size_t L = (size_t)c->sh.layers, C = chan_count(&c->sh), NT = c->n_tok;
    const int64_t sh_cb[4] = {(int64_t)L, (int64_t)NT, 2, (int64_t)C}, sh_v[1] = {(int64_t)NT};
    int rc = skv_stw_add(w, "codebook", SEQKV_DT_F32, 4, sh_cb, c->cb, L * NT * 2 * C * 4);
    if (!rc)
        rc = skv_stw_add(w, "codebook.count", SEQKV_DT_I32, 1, sh_v, c->cb_n, NT * 4);
    if (!rc)
        rc = skv_stw_add(w, "codebook.tokens", SEQKV_DT_I32, 1, sh_v, c->cb_tok, NT * 4);
    return rc;
}

static int calib_writer(const skv_calib *c, skv_st_writer **out)
{
    *out = NULL;
    const int64_t L = c->sh.layers, C = (int64_t)chan_count(&c->sh), H = c->sh.kv_heads;
    skv_st_writer *w;
    int rc = skv_stw_create(&w);
    if (rc)
        return rc;
    char buf[64], hex[33];
#define META(k, fmt, ...) (snprintf(buf, sizeof buf, fmt, __VA_ARGS__), rc = rc ? rc : skv_stw_meta(w, k, buf))
    META("seqkv.kind", "%s", "calibration");
    META("seqkv.calib_version", "%d", SKV_CALIB_VERSION);
    META("seqkv.dtype", "%s", skv_dtype_name(c->sh.dtype));
    META("seqkv.rope_theta", "%.9g", (double)c->sh.rope_theta);
    META("seqkv.rope_dim", "%d", c->sh.rope_dim);
    META("seqkv.rope_layout", "%s", c->sh.rope_layout == SKV_ROPE_HALF ? "half" : "pair");
    META("seqkv.levels", "%u", c->levels);
    META("seqkv.model", "%s", c->model_fp[0] ? c->model_fp : "-");
    sodium_bin2hex(hex, sizeof hex, c->id, 16);
    META("seqkv.calib_id", "%s", hex);
    META("seqkv.vocab", "%d", c->sh.vocab);
#undef META
    int64_t sh_mean[3] = {L, 2, C}, sh_s[4] = {L, 2, 2, C}, sh_w[5] = {L, 2, H, 2, NF},
            sh_p[1] = {256};
    if (!rc)
        rc = skv_stw_add(w, "mean", SEQKV_DT_F32, 3, sh_mean, c->mean, (size_t)(L * 2 * C) * 4);
    for (int l = SEQKV_STAT; l <= SEQKV_FULL && !rc; l++) {
        char n[32];
        snprintf(n, sizeof n, "s.%s", seqkv_level_name((seqkv_level)l));
        rc = skv_stw_add(w, n, SEQKV_DT_F32, 4, sh_s, c->s[l], (size_t)(L * 2 * 2 * C) * 4);
        snprintf(n, sizeof n, "w.%s", seqkv_level_name((seqkv_level)l));
        if (!rc)
            rc = skv_stw_add(w, n, SEQKV_DT_F32, 5, sh_w, c->w[l], (size_t)(L * 2 * H * 2 * NF) * 4);
    }
    if (!rc)
        rc = add_codebook(w, c);
    if (!rc)
        rc = skv_stw_add(w, "pemp", SEQKV_DT_I32, 1, sh_p, c->pemp, 256 * 4);
    if (!rc) {
        int64_t sh_a[1] = {(int64_t)c->at_total};
        rc = skv_stw_add(w, "atoms.k", SEQKV_DT_I32, 3, sh_mean, c->at_k, (size_t)(L * 2 * C) * 4);
        if (!rc)
            rc = skv_stw_add(w, "atoms.lambda", SEQKV_DT_I32, 3, sh_mean, c->at_lam, (size_t)(L * 2 * C) * 4);
        if (!rc)
            rc = skv_stw_add(w, "atoms.value", SEQKV_DT_I32, 1, sh_a, c->at_val, c->at_total * 4);
        if (!rc)
            rc = skv_stw_add(w, "atoms.count", SEQKV_DT_I32, 1, sh_a, c->at_cnt, c->at_total * 4);
    }
    if (rc) {
        skv_stw_free(w);
        return rc;
    }
    *out = w;
    return SKV_OK;
}

int skv_calib_save(const skv_calib *c, const char *path)
{
    skv_st_writer *w;
    int rc = calib_writer(c, &w);
    if (rc)
        return rc;
    rc = skv_stw_write(w, path);
    skv_stw_free(w);
    return rc;
}

int skv_calib_serialize(const skv_calib *c, uint8_t **out, size_t *len)
{
    skv_st_writer *w;
    int rc = calib_writer(c, &w);
    if (rc)
        return rc;
    rc = skv_stw_serialize(w, out, len);
    skv_stw_free(w);
    return rc;
}

static int get_f32(const skv_st *st, const char *name, float *dst, size_t n)
{
    const skv_tensor *t = skv_st_find(st, name);
    if (!t)
        return skv_error(SKV_ERR_FORMAT, "calibration: no tensor \"%s\"", name);
    if ((t->dtype != SEQKV_DT_F32 && t->dtype != SEQKV_DT_I32) || t->nelem != n)
        return skv_error(SKV_ERR_SHAPE, "calibration: tensor \"%s\" has the wrong shape", name);
    for (size_t i = 0; i < n; i++)
        skv_store32_le(&dst[i], skv_load32_le(t->data + 4 * i));
    return SKV_OK;
}

/* Stat's atoms: per-channel counts and lambdas, then
 * values and counts that skv_atoms_create accepts (checked here, so a bad
 * file fails at load, not when a coder is made). */
static int get_atoms(const skv_st *st, const char *path, skv_calib *c)
{
    const size_t LC = (size_t)c->sh.layers * 2 * chan_count(&c->sh);
    int rc = get_f32(st, "atoms.k", (float *)c->at_k, LC);
    if (!rc)
        rc = get_f32(st, "atoms.lambda", (float *)c->at_lam, LC);
    if (rc)
        return rc;
    uint64_t total = 0;
    for (size_t i = 0; i < LC; i++) {
        if (c->at_k[i] > SKV_ATOMS_MAX || c->at_lam[i] > 65535u)
            return skv_error(SKV_ERR_FORMAT, "%s: atoms of channel %zu out of range", path, i);
        total += c->at_k[i];
    }
    const skv_tensor *tv = skv_st_find(st, "atoms.value");
    if (!tv || tv->nelem != total)
        return skv_error(SKV_ERR_FORMAT, "%s: atoms.value does not hold the %llu atoms counted", path,
                         (unsigned long long)total);
    c->at_total = (size_t)total;
    c->at_val = skv_malloc((total ? total : 1) * sizeof *c->at_val);
    c->at_cnt = skv_malloc((total ? total : 1) * sizeof *c->at_cnt);
    if (!c->at_val || !c->at_cnt)
        return skv_error(SKV_ERR_NOMEM, "calibration atoms");
    rc = get_f32(st, "atoms.value", (float *)c->at_val, total);
    if (!rc)
        rc = get_f32(st, "atoms.count", (float *)c->at_cnt, total);
    return rc;
}

/* After the content hash: atoms that skv_atoms_create accepts (a file with
 * a valid hash and invalid atoms was crafted, not damaged). */
static int check_atoms(const char *path, const skv_calib *c)
{
    const size_t LC = (size_t)c->sh.layers * 2 * chan_count(&c->sh);
    const uint32_t mask = c->sh.dtype == SEQKV_DT_F32 ? 0xffffffffu : c->sh.dtype == SEQKV_DT_F8E4M3 ? 0xffu : 0xffffu;
    for (size_t i = 0, off = 0; i < LC; off += c->at_k[i], i++)
        for (size_t j = 0; j < c->at_k[i]; j++) {
            const uint32_t v = c->at_val[off + j];
            if ((v & ~mask) || c->at_cnt[off + j] == 0 || (j && v <= c->at_val[off + j - 1]))
                return skv_error(SKV_ERR_FORMAT, "%s: atoms of channel %zu are not distinct "
                                 "values in increasing order with counts >= 1", path, i);
        }
    return SKV_OK;
}

/* The codebook's rows (n_tok) and vocabulary (sh.vocab) of a file with
 * the tensor cb: the rows of the tokens its calibration saw */
static int codebook_shape(const skv_st *st, const char *path, const skv_tensor *cb, skv_calib *c)
{
    const skv_tensor *n = skv_st_find(st, "codebook.count");
    if (!n || n->dtype != SEQKV_DT_I32 || n->nelem != (size_t)cb->shape[1])
        return skv_error(SKV_ERR_FORMAT, "%s: codebook.count does not match the codebook", path);
    const char *vs = skv_st_meta(st, "seqkv.vocab");
    char *end = NULL;
    long long vv = vs ? strtoll(vs, &end, 10) : 0;
    if (!vs || end == vs || *end || vv < 1 || vv > INT32_MAX)
        return skv_error(SKV_ERR_FORMAT, "%s: no vocabulary (seqkv.vocab) in [1, 2^31 - 1]", path);
    c->sh.vocab = (int)vv;
    c->n_tok = (size_t)cb->shape[1];
    return SKV_OK;
}

/* The codebook into c (allocated for n_tok rows): its rows, their counts
 * >= 1 and tokens ascending below the vocabulary */
static int get_codebook(const skv_st *st, const char *path, skv_calib *c)
{
    const size_t L = (size_t)c->sh.layers, C = chan_count(&c->sh);
    const skv_tensor *cb = skv_st_find(st, "codebook");
    if (cb->dtype != SEQKV_DT_F32 || cb->nelem != L * (size_t)cb->shape[1] * 2 * C)
        return skv_error(SKV_ERR_SHAPE, "calibration: tensor \"codebook\" has the wrong shape");
    int rc = get_f32(st, "codebook", c->cb, L * c->n_tok * 2 * C);
    if (!rc)
        rc = get_f32(st, "codebook.count", (float *)c->cb_n, c->n_tok);
    if (!rc)
        rc = get_f32(st, "codebook.tokens", (float *)c->cb_tok, c->n_tok);
    for (size_t r = 0; r < c->n_tok && !rc; r++)
        if (c->cb_n[r] < 1 || c->cb_tok[r] < 0 || c->cb_tok[r] >= c->sh.vocab ||
            (r && c->cb_tok[r] <= c->cb_tok[r - 1]))
            rc = skv_error(SKV_ERR_FORMAT, "%s: codebook row %zu: count %d, token %d (counts >= 1, "
                           "tokens ascending below %d)", path, r, c->cb_n[r], c->cb_tok[r], c->sh.vocab);
    return rc;
}

/* Build a calibration from a parsed safetensors image; `path` names it in
 * errors. Does not take ownership of st. */
static int calib_from_st(const skv_st *st, const char *path, skv_calib **out)
{
    *out = NULL;
    int rc;
    skv_calib *c = skv_calloc(1, sizeof *c);
    if (!c)
        return skv_error(SKV_ERR_NOMEM, "calibration");
    const char *kind = skv_st_meta(st, "seqkv.kind"), *ver = skv_st_meta(st, "seqkv.calib_version");
    const char *dt = skv_st_meta(st, "seqkv.dtype"), *lay = skv_st_meta(st, "seqkv.rope_layout");
    const char *lv = skv_st_meta(st, "seqkv.levels"), *mfp = skv_st_meta(st, "seqkv.model");
    const char *idh = skv_st_meta(st, "seqkv.calib_id");
    const skv_tensor *cb = skv_st_find(st, "codebook"), *mean = skv_st_find(st, "mean");
    if (!kind || strcmp(kind, "calibration") || !ver || !dt || !lay || !lv || !mfp || !idh || !cb ||
        !mean || cb->ndim != 4 || mean->ndim != 3) {
        rc = skv_error(SKV_ERR_FORMAT, "%s: not a seqkv calibration file", path);
        goto fail;
    }
    const int version = atoi(ver);
    if (version < 1) {
        rc = skv_error(SKV_ERR_FORMAT, "%s: calibration version %s", path, ver);
        goto fail;
    }
    if (version != SKV_CALIB_VERSION) { /* (1 and 2, FORMAT 5 and before: dense codebooks) */
        rc = skv_error(SKV_ERR_VERSION, "%s: calibration version %s: this build reads only version %d", path,
                       ver, SKV_CALIB_VERSION);
        goto fail;
    }
    if ((rc = skv_dtype_from_name(dt, strlen(dt), &c->sh.dtype)))
        goto fail;
    c->sh.layers = (int)cb->shape[0];
    int64_t C = cb->shape[3];
    const skv_tensor *wt = skv_st_find(st, "w.stat");
    if (!wt || wt->ndim != 5 || wt->shape[2] < 1 || C < 1 || C % wt->shape[2] || cb->shape[2] != 2 ||
        cb->shape[0] < 1 || cb->shape[0] > 4096 || cb->shape[1] < 1 || cb->shape[1] > (1 << 24) ||
        C > (1 << 20)) {
        rc = skv_error(SKV_ERR_FORMAT, "%s: inconsistent calibration shapes", path);
        goto fail;
    }
    c->sh.kv_heads = (int)wt->shape[2];
    c->sh.head_dim = (int)(C / wt->shape[2]);
    float th, rd;
    if (parse_float_meta(st, "seqkv.rope_theta", &th) || parse_float_meta(st, "seqkv.rope_dim", &rd)) {
        rc = skv_error(SKV_ERR_FORMAT, "%s: bad RoPE metadata", path);
        goto fail;
    }
    c->sh.rope_theta = th;
    c->sh.rope_dim = (int)rd;
    if (c->sh.rope_dim < 0 || c->sh.rope_dim > c->sh.head_dim || (c->sh.rope_dim & 1)) {
        rc = skv_error(SKV_ERR_FORMAT, "%s: bad rotary dim", path);
        goto fail;
    }
    c->sh.rope_layout = strcmp(lay, "half") == 0 ? SKV_ROPE_HALF : SKV_ROPE_PAIR;
    c->levels = (unsigned)atoi(lv) & 15u;
    snprintf(c->model_fp, sizeof c->model_fp, "%s", strcmp(mfp, "-") ? mfp : "");
    if ((rc = codebook_shape(st, path, cb, c)) || (rc = calib_alloc(c)))
        goto fail;
    rope_init(c);
    const size_t L = (size_t)c->sh.layers, H = (size_t)c->sh.kv_heads;
    rc = get_f32(st, "mean", c->mean, L * 2 * (size_t)C);
    for (int l = SEQKV_STAT; l <= SEQKV_FULL && !rc; l++) {
        char n[32];
        snprintf(n, sizeof n, "s.%s", seqkv_level_name((seqkv_level)l));
        rc = get_f32(st, n, c->s[l], L * 2 * 2 * (size_t)C);
        snprintf(n, sizeof n, "w.%s", seqkv_level_name((seqkv_level)l));
        if (!rc)
            rc = get_f32(st, n, c->w[l], L * 2 * H * 2 * NF);
    }
    if (!rc)
        rc = get_codebook(st, path, c);
    if (!rc)
        rc = get_f32(st, "pemp", (float *)c->pemp, 256);
    if (!rc)
        rc = get_atoms(st, path, c);
    if (rc)
        goto fail;
    compute_id(c);
    char hex[33];
    sodium_bin2hex(hex, sizeof hex, c->id, 16);
    if (strcmp(hex, idh) != 0) {
        rc = skv_error(SKV_ERR_CORRUPT, "%s: content hash %s does not match the recorded id %s", path, hex, idh);
        goto fail;
    }
    if ((rc = check_atoms(path, c)))
        goto fail;
    if ((rc = calib_index(c)))
        goto fail;
    *out = c;
    return SKV_OK;
fail:
    skv_calib_free(c);
    return rc;
}

int skv_calib_parse(const uint8_t *buf, size_t len, skv_calib **out)
{
    *out = NULL;
    skv_st *st;
    int rc = skv_st_parse(buf, len, &st);
    if (rc)
        return rc;
    rc = calib_from_st(st, "calibration", out);
    skv_st_free(st);
    return rc;
}

int skv_calib_load(const char *path, skv_calib **out)
{
    *out = NULL;
    skv_st *st;
    int rc = skv_st_open(path, &st);
    if (rc)
        return rc;
    rc = calib_from_st(st, path, out);
    skv_st_free(st);
    return rc;
}
