/*
 * lcode.c - lossy streams (FORMAT.md, "Lossy streams"): each head vector
 * of K and V is transformed, quantised by its level's books and its
 * indices coded in one symbol stream; the decoder rebuilds the same
 * floats in the same order and checks their checksum.
 */
#include <string.h>

#include "lossy_int.h"

int skv_lossy_level_parse(const char *s)
{
    if (s && s[0] == 'q' && s[1] >= '2' && s[1] <= '4' && s[2] == '\0')
        return s[1] - '0';
    return 0;
}

/* Bytes of one of K or V's exact window: positions [0, lo) and [hi, n). */
static size_t window_bytes(const skv_lossy_cal *c, size_t n, size_t lo, size_t hi)
{
    return (size_t)c->L * (n - (hi - lo)) * c->H * c->D * skv_dtype_size(c->dt);
}

size_t skv_lossy_bound(const skv_lossy_cal *c, size_t n)
{
    const size_t syms = (size_t)c->L * 2 * n * c->H * (size_t)(c->M * (1 + SKV_LOSSY_SUB) + 1);
    return SKV_LOSSY_HEADER + 2 * window_bytes(c, n, 0, 0) + skv_sym_bound(syms);
}

/* Books of the level, or NULL with the error set. */
static const lq_level *level_of(const skv_lossy_cal *c, int bits, skv_lossy_kind kind)
{
    const int li = lq_level_index(bits);
    if (li < 0 || (kind != SKV_LQ_PVQ && kind != SKV_LQ_RVQ) || !c->lv[li][kind].present) {
        skv_error(SKV_ERR_ARG, "the lossy calibration has no level q%d (%s)", bits,
                  kind == SKV_LQ_RVQ ? "residual VQ" : "product VQ");
        return NULL;
    }
    return &c->lv[li][kind];
}

/* Walk every head vector of (k, v) in stream order: for each layer, K
 * then V, position, head. Encoding appends symbols and their tables;
 * decoding reads them from the stream, each table as the symbols before
 * it say. Either way out receives the reconstruction in dtype. */
typedef struct {
    const skv_lossy_cal *c;
    const lq_level *lv;
    size_t n, lo, hi; /* positions; [lo, hi) lossy */
    const skv_symtab **tabs; /* encoding: [cap] */
    uint32_t *syms;
    size_t ns, cap;
    skv_symdec *dec; /* decoding */
} walk;

static int sym_put(walk *w, uint32_t s, const skv_symtab *t)
{
    if (w->ns == w->cap)
        return skv_error(SKV_ERR_TOO_LARGE, "lossy stream symbols");
    w->syms[w->ns] = s;
    w->tabs[w->ns++] = t;
    return SKV_OK;
}

static int walk_all(walk *w, const void *const in[2], void *const out[2])
{
    const skv_lossy_cal *c = w->c;
    const int D = c->D, M = c->M, H = c->H;
    const size_t es = skv_dtype_size(c->dt);
    float x[64], y[64], r[64];
    int rc = SKV_OK;
    for (int l = 0; l < c->L; l++)
        for (int kv = 0; kv < 2; kv++)
            for (size_t p = w->lo; p < w->hi; p++)
                for (int h = 0; h < H; h++) {
                    const size_t hd = lq_head(c, l, kv, h);
                    const size_t off = (((size_t)l * w->n + p) * H + (size_t)h) * D * es;
                    const lq_book *cb = w->lv->coarse ? &w->lv->coarse[hd] : NULL;
                    if (!w->dec) {
                        rc = skv_cast_to_f32(c->dt, x, (const uint8_t *)in[kv] + off, (size_t)D);
                        if (rc)
                            return rc;
                        lq_apply(c->t + hd * D * D, x, y, D);
                    }
                    for (int d = 0; d < D; d++)
                        r[d] = 0.0f;
                    if (cb) {
                        uint32_t k = 0;
                        if (!w->dec) {
                            k = lq_nearest(cb, y, 0.0f);
                            rc = sym_put(w, k, cb->tab);
                        } else {
                            rc = skv_symdec_get(w->dec, cb->tab, &k);
                        }
                        if (rc)
                            return rc;
                        for (int d = 0; d < D; d++)
                            r[d] = cb->c[(size_t)k * D + d];
                    }
                    for (int m = 0; m < M; m++) {
                        const lq_book *b = &w->lv->pq[hd * M + (size_t)m];
                        float *rm = r + m * SKV_LOSSY_SUB, rec[SKV_LOSSY_SUB];
                        uint32_t sym[1 + SKV_LOSSY_SUB];
                        if (!w->dec) {
                            float t[SKV_LOSSY_SUB];
                            for (int d = 0; d < SKV_LOSSY_SUB; d++)
                                t[d] = y[m * SKV_LOSSY_SUB + d] - rm[d];
                            const int ns = lq_code_sub(c, b, t, w->lv->step, sym, rec);
                            for (int i = 0; !rc && i < ns; i++)
                                rc = sym_put(w, sym[i], i ? c->esc_tab : b->tab);
                        } else {
                            rc = skv_symdec_get(w->dec, b->tab, &sym[0]);
                            if (!rc && sym[0] == b->k) {
                                for (int d = 0; !rc && d < SKV_LOSSY_SUB; d++) {
                                    rc = skv_symdec_get(w->dec, c->esc_tab, &sym[1 + d]);
                                    rec[d] = lq_esc_value(sym[1 + d], w->lv->step);
                                }
                            } else if (!rc) {
                                for (int d = 0; d < SKV_LOSSY_SUB; d++)
                                    rec[d] = b->c[(size_t)sym[0] * SKV_LOSSY_SUB + d];
                            }
                        }
                        if (rc)
                            return rc;
                        for (int d = 0; d < SKV_LOSSY_SUB; d++)
                            rm[d] = rm[d] + rec[d];
                    }
                    lq_apply(c->ti + hd * D * D, r, x, D);
                    rc = skv_cast_from_f32(c->dt, (uint8_t *)out[kv] + off, x, (size_t)D);
                    if (rc)
                        return rc;
                }
    return SKV_OK;
}

/* The most symbols n positions take: every sub-vector escaped. */
static size_t max_syms(const skv_lossy_cal *c, const lq_level *lv, size_t n)
{
    return (size_t)c->L * 2 * n * c->H * (size_t)(c->M * (1 + SKV_LOSSY_SUB) + (lv->coarse ? 1 : 0));
}

/* Pack the window of x (all n positions) into win, and copy it to full. */
static void window_pack(const skv_lossy_cal *c, size_t n, size_t lo, size_t hi, const uint8_t *x,
                        uint8_t *win, uint8_t *full)
{
    const size_t row = (size_t)c->H * c->D * skv_dtype_size(c->dt);
    size_t w = 0;
    for (int l = 0; l < c->L; l++)
        for (size_t p = 0; p < n; p++) {
            if (p >= lo && p < hi)
                continue;
            const size_t off = ((size_t)l * n + p) * row;
            memcpy(win + w, x + off, row);
            memcpy(full + off, x + off, row);
            w += row;
        }
}

/* Unpack a packed window into its places in full. */
static void window_unpack(const skv_lossy_cal *c, size_t n, size_t lo, size_t hi, const uint8_t *win,
                          uint8_t *full)
{
    const size_t row = (size_t)c->H * c->D * skv_dtype_size(c->dt);
    size_t w = 0;
    for (int l = 0; l < c->L; l++)
        for (size_t p = 0; p < n; p++) {
            if (p >= lo && p < hi)
                continue;
            memcpy(full + ((size_t)l * n + p) * row, win + w, row);
            w += row;
        }
}

int skv_lossy_encode(const skv_lossy_cal *c, int bits, skv_lossy_kind kind, const void *k,
                     const void *v, size_t n, size_t lo, size_t hi, uint8_t *dst, size_t cap,
                     size_t *len, void *recon_k, void *recon_v)
{
    const lq_level *lv = level_of(c, bits, kind);
    if (!lv)
        return SKV_ERR_ARG;
    if (n == 0 || n > UINT32_MAX)
        return skv_error(SKV_ERR_ARG, "lossy stream of %zu positions", n);
    if (cap < SKV_LOSSY_HEADER)
        return skv_error(SKV_ERR_TOO_LARGE, "lossy stream buffer of %zu bytes", cap);
    if (lo > hi || hi > n)
        return skv_error(SKV_ERR_ARG, "lossy range [%zu, %zu) of %zu positions", lo, hi, n);
    const size_t ms = max_syms(c, lv, hi - lo);
    const size_t half = (size_t)c->L * n * c->H * c->D * skv_dtype_size(c->dt);
    const size_t wb = window_bytes(c, n, lo, hi);
    if (cap < SKV_LOSSY_HEADER + 2 * wb)
        return skv_error(SKV_ERR_TOO_LARGE, "lossy stream buffer of %zu bytes", cap);
    walk w = {c, lv, n, lo, hi, skv_malloc(ms * sizeof(void *) + 1), skv_malloc(ms * sizeof(uint32_t) + 1), 0, ms, NULL};
    uint8_t *rec = skv_malloc(2 * half);
    int rc = w.tabs && w.syms && rec ? SKV_OK : skv_error(SKV_ERR_NOMEM, "lossy stream of %zu positions", n);
    const void *in[2] = {k, v};
    void *out[2] = {rec, rec + half};
    if (!rc) {
        window_pack(c, n, lo, hi, k, dst + SKV_LOSSY_HEADER, rec);
        window_pack(c, n, lo, hi, v, dst + SKV_LOSSY_HEADER + wb, rec + half);
        rc = walk_all(&w, in, out);
    }
    size_t body = 0;
    const size_t head = SKV_LOSSY_HEADER + 2 * wb;
    if (!rc)
        rc = skv_sym_encode(w.syms, w.tabs, w.ns, dst + head, cap - head, &body);
    if (!rc) {
        memset(dst, 0, SKV_LOSSY_HEADER);
        skv_store32_le(dst, SKV_LOSSY_MAGIC);
        dst[4] = SKV_LOSSY_VERSION;
        dst[5] = (uint8_t)bits;
        dst[6] = (uint8_t)kind;
        dst[7] = (uint8_t)c->dt;
        skv_store32_le(dst + 8, (uint32_t)n);
        skv_store32_le(dst + 12, (uint32_t)body);
        memcpy(dst + 16, c->id, 16);
        skv_store64_le(dst + 32, skv_checksum64(rec + half, half, skv_checksum64(rec, half, SKV_LOSSY_MAGIC)));
        skv_store16_le(dst + 40, (uint16_t)c->L);
        skv_store16_le(dst + 42, (uint16_t)c->H);
        skv_store16_le(dst + 44, (uint16_t)c->D);
        skv_store32_le(dst + 48, (uint32_t)lo);
        skv_store32_le(dst + 52, (uint32_t)hi);
        *len = head + body;
        if (recon_k)
            memcpy(recon_k, rec, half);
        if (recon_v)
            memcpy(recon_v, rec + half, half);
    }
    skv_free(w.tabs);
    skv_free(w.syms);
    skv_free(rec);
    return rc;
}

int skv_lossy_info(const uint8_t *src, size_t len, int *bits, skv_lossy_kind *kind, size_t *n,
                   size_t *lo, size_t *hi)
{
    if (len < SKV_LOSSY_HEADER || skv_load32_le(src) != SKV_LOSSY_MAGIC)
        return skv_error(SKV_ERR_FORMAT, "not a lossy stream");
    if (src[4] != SKV_LOSSY_VERSION)
        return skv_error(src[4] > SKV_LOSSY_VERSION ? SKV_ERR_VERSION : SKV_ERR_FORMAT,
                         "lossy stream version %u (this build reads %u)", src[4], SKV_LOSSY_VERSION);
    if (lq_level_index(src[5]) < 0 || src[6] > SKV_LQ_RVQ)
        return skv_error(SKV_ERR_FORMAT, "lossy stream of level %u, kind %u", src[5], src[6]);
    const size_t sn = skv_load32_le(src + 8), slo = skv_load32_le(src + 48), shi = skv_load32_le(src + 52);
    if (slo > shi || shi > sn)
        return skv_error(SKV_ERR_CORRUPT, "lossy range [%zu, %zu) of %zu positions", slo, shi, sn);
    if (skv_load32_le(src + 12) > len - SKV_LOSSY_HEADER)
        return skv_error(SKV_ERR_CORRUPT, "lossy stream of %zu bytes says more", len);
    *bits = src[5];
    *kind = (skv_lossy_kind)src[6];
    *n = sn;
    *lo = slo;
    *hi = shi;
    return SKV_OK;
}

int skv_lossy_decode(const skv_lossy_cal *c, const uint8_t *src, size_t len, size_t n, void *k,
                     void *v)
{
    int bits;
    skv_lossy_kind kind;
    size_t sn, lo, hi;
    int rc = skv_lossy_info(src, len, &bits, &kind, &sn, &lo, &hi);
    if (rc)
        return rc;
    if (sn != n || src[7] != (uint8_t)c->dt || skv_load16_le(src + 40) != c->L ||
        skv_load16_le(src + 42) != c->H || skv_load16_le(src + 44) != c->D)
        return skv_error(SKV_ERR_SHAPE, "lossy stream of %zu positions, dtype %u, shape [%u, %u, %u]; asked %zu, %u, [%d, %d, %d]",
                         sn, src[7], skv_load16_le(src + 40), skv_load16_le(src + 42),
                         skv_load16_le(src + 44), n, (unsigned)c->dt, c->L, c->H, c->D);
    if (memcmp(src + 16, c->id, 16) != 0)
        return skv_error(SKV_ERR_SHAPE, "lossy stream was coded with another calibration");
    const lq_level *lv = level_of(c, bits, kind);
    if (!lv)
        return SKV_ERR_ARG;
    const size_t half = (size_t)c->L * n * c->H * c->D * skv_dtype_size(c->dt);
    const size_t wb = window_bytes(c, n, lo, hi), head = SKV_LOSSY_HEADER + 2 * wb;
    if (len < head || skv_load32_le(src + 12) != len - head)
        return skv_error(SKV_ERR_CORRUPT, "lossy stream of %zu bytes: its parts do not add up", len);
    window_unpack(c, n, lo, hi, src + SKV_LOSSY_HEADER, k);
    window_unpack(c, n, lo, hi, src + SKV_LOSSY_HEADER + wb, v);
    skv_symdec dec;
    walk w = {c, lv, n, lo, hi, NULL, NULL, 0, 0, &dec};
    rc = skv_symdec_begin(&dec, src + head, len - head);
    void *out[2] = {k, v};
    const void *in[2] = {NULL, NULL};
    if (!rc)
        rc = walk_all(&w, in, out);
    if (!rc)
        rc = skv_symdec_end(&dec);
    if (!rc) {
        /* k's checksum seeds v's, as the encoder hashed them */
        if (skv_checksum64(v, half, skv_checksum64(k, half, SKV_LOSSY_MAGIC)) != skv_load64_le(src + 32))
            rc = skv_error(SKV_ERR_CORRUPT, "lossy stream's reconstruction fails its checksum");
    }
    return rc;
}
