/* The calibration object: allocation, accessors, content id and the
 * index the coder reads. */
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "delta_int.h"

const skv_kvshape *skv_calib_shape(const skv_calib *c) { return &c->sh; }
const uint8_t *skv_calib_id(const skv_calib *c) { return c->id; }
int skv_calib_has_level(const skv_calib *c, seqkv_level l)
{
    return seqkv_level_predictive(l) && (c->levels & level_bit(l)) != 0;
}
const char *skv_calib_model(const skv_calib *c) { return c->model_fp; }

/* The codebook's bytes (L x NT x 2 x C floats; one float for a shape
 * without any), 0 when that overflows */
static size_t cb_bytes(const skv_calib *c)
{
    size_t n = sizeof(float);
    const size_t f[4] = {(size_t)c->sh.layers, c->n_tok, 2, chan_count(&c->sh)};
    for (int i = 0; i < 4; i++)
        if (__builtin_mul_overflow(n, f[i], &n))
            return 0;
    return n ? n : sizeof(float);
}

int32_t calib_row(const skv_calib *c, int32_t tok)
{
    size_t lo = 0, hi = c->n_tok;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->cb_tok[mid] < tok)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < c->n_tok && c->cb_tok[lo] == tok ? (int32_t)lo : -1;
}

void skv_calib_free(skv_calib *c)
{
    if (!c)
        return;
    skv_free(c->mean);
    for (int i = SEQKV_STAT; i <= SEQKV_FULL; i++) {
        skv_free(c->s[i]);
        skv_free(c->w[i]);
    }
    skv_free_huge(c->cb, cb_bytes(c));
    skv_free(c->cb_n);
    skv_free(c->cb_tok);
    skv_free(c->cb_ok);
    skv_free(c->inv_freq);
    skv_free(c->at_k);
    skv_free(c->at_lam);
    skv_free(c->at_val);
    skv_free(c->at_cnt);
    skv_free(c);
}

/* Everything but the atoms, for c->n_tok codebook rows; refuses a
 * codebook over SKV_CALIB_ROWS_MAX rows or whose size overflows */
int calib_alloc(skv_calib *c)
{
    const size_t L = (size_t)c->sh.layers, C = chan_count(&c->sh), H = (size_t)c->sh.kv_heads,
                 NT = c->n_tok;
    if (NT > SKV_CALIB_ROWS_MAX || !cb_bytes(c))
        return skv_error(SKV_ERR_TOO_LARGE, "calibration: a codebook of %zu distinct tokens "
                         "(%zu layers x %zu channels) is over the bound of %d rows", NT, L, C,
                         SKV_CALIB_ROWS_MAX);
    c->mean = skv_calloc(L * 2 * C, sizeof(float));
    for (int i = SEQKV_STAT; i <= SEQKV_FULL; i++) {
        c->s[i] = skv_calloc(L * 2 * 2 * C, sizeof(float));
        c->w[i] = skv_calloc(L * 2 * H * 2 * NF, sizeof(float));
        if (!c->s[i] || !c->w[i])
            return skv_error(SKV_ERR_NOMEM, "calibration");
    }
    /* (read a row a position at random: on huge pages, where they are) */
    c->cb = skv_calloc_huge(cb_bytes(c));
    c->cb_n = skv_calloc(NT ? NT : 1, sizeof(int32_t));
    c->cb_tok = skv_calloc(NT ? NT : 1, sizeof(int32_t));
    c->inv_freq = skv_calloc((size_t)(c->sh.rope_dim > 0 ? c->sh.rope_dim : 2), sizeof(float));
    c->at_k = skv_calloc(L * 2 * C, sizeof(uint32_t));
    c->at_lam = skv_calloc(L * 2 * C, sizeof(uint32_t));
    if (!c->at_k || !c->at_lam)
        return skv_error(SKV_ERR_NOMEM, "calibration");
    if (!c->mean || !c->cb || !c->cb_n || !c->cb_tok || !c->inv_freq)
        return skv_error(SKV_ERR_NOMEM, "calibration (codebook of %zu tokens)", NT);
    return SKV_OK;
}

void rope_init(skv_calib *c)
{
    c->rope_known = c->sh.rope_dim >= 2 && c->sh.rope_theta > 1.0f;
    if (!c->rope_known)
        return;
    double lt = skv_log((double)c->sh.rope_theta);
    for (int i = 0; i < c->sh.rope_dim / 2; i++)
        c->inv_freq[i] = (float)skv_exp(-lt * (double)(2 * i) / (double)c->sh.rope_dim);
}

/* n floats' bits into the hash, four bytes little-endian each */
static void hash_floats(crypto_generichash_state *st, const float *p, size_t n)
{
    uint8_t b[4];
    for (size_t i = 0; i < n; i++) {
        skv_store32_le(b, skv_f32_bits(p[i]));
        crypto_generichash_update(st, b, 4);
    }
}

/* n words into the hash, four bytes little-endian each */
static void hash_u32s(crypto_generichash_state *st, const uint32_t *p, size_t n)
{
    uint8_t b[4];
    for (size_t i = 0; i < n; i++) {
        skv_store32_le(b, p[i]);
        crypto_generichash_update(st, b, 4);
    }
}

/* The calibration's id: BLAKE2b-128 of its version, shape, every
 * parameter and the model's fingerprint; the codebook as its rows: their
 * count, the seen ids, the rows and the counts; then stat's atoms. */
void compute_id(skv_calib *c)
{
    const size_t L = (size_t)c->sh.layers, C = chan_count(&c->sh), H = (size_t)c->sh.kv_heads;
    crypto_generichash_state st;
    crypto_generichash_init(&st, NULL, 0, 16);
    const uint32_t hdr[] = {(uint32_t)SKV_CALIB_VERSION, (uint32_t)c->sh.layers, (uint32_t)c->sh.kv_heads,
                            (uint32_t)c->sh.head_dim, (uint32_t)c->sh.vocab, (uint32_t)c->sh.dtype,
                            (uint32_t)c->sh.rope_dim, (uint32_t)c->sh.rope_layout, (uint32_t)c->levels,
                            (uint32_t)c->rope_known};
    hash_u32s(&st, hdr, sizeof hdr / sizeof hdr[0]);
    hash_floats(&st, &c->sh.rope_theta, 1);
    hash_floats(&st, c->mean, L * 2 * C);
    for (int l = SEQKV_STAT; l <= SEQKV_FULL; l++) {
        hash_floats(&st, c->s[l], L * 2 * 2 * C);
        hash_floats(&st, c->w[l], L * 2 * H * 2 * NF);
    }
    const uint32_t nt = (uint32_t)c->n_tok;
    hash_u32s(&st, &nt, 1);
    hash_u32s(&st, (const uint32_t *)c->cb_tok, c->n_tok);
    hash_floats(&st, c->cb, L * c->n_tok * 2 * C);
    hash_u32s(&st, (const uint32_t *)c->cb_n, c->n_tok);
    hash_u32s(&st, c->pemp, 256);
    crypto_generichash_update(&st, (const uint8_t *)c->model_fp, 32);
    hash_u32s(&st, c->at_k, L * 2 * C); /* stat's atoms */
    hash_u32s(&st, c->at_lam, L * 2 * C);
    hash_u32s(&st, c->at_val, c->at_total);
    hash_u32s(&st, c->at_cnt, c->at_total);
    crypto_generichash_final(&st, c->id, 16);
}

/* The coder's per-row test of the codebook feature (stat's constant rows
 * need it finite, with all_small's margin) is a constant of the
 * calibration: worked out once when a calibration is made or loaded. */
int calib_index(skv_calib *c)
{
    const size_t L = (size_t)c->sh.layers, C = chan_count(&c->sh), NT = c->n_tok;
    skv_free(c->cb_ok);
    if (!(c->cb_ok = skv_malloc(L * NT > 0 ? L * NT * 2 : 1)))
        return skv_error(SKV_ERR_NOMEM, "calibration (codebook index of %zu tokens)", NT);
    for (size_t j = 0; j < L * NT * 2; j++)
        c->cb_ok[j] = (uint8_t)all_small(c->cb + j * C, C);
    return SKV_OK;
}

int parse_float_meta(const skv_st *st, const char *key, float *out)
{
    const char *v = skv_st_meta(st, key);
    if (!v)
        return -1;
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end)
        return -1;
    *out = (float)x;
    return 0;
}
