/*
 * lcode.c - lossy streams (FORMAT.md, "Lossy streams"): each head vector
 * of K and V is transformed, quantised by its level's books and its
 * indices coded in one symbol stream; the decoder rebuilds the same
 * floats in the same order and checks their checksum. A stream holds
 * every layer's K and V, or one (layer, K|V) slab: the store's records
 * keep one stream a slab, as its other levels do.
 */
#include <string.h>

#include "lossy_int.h"

int skv_lossy_level_parse(const char *s)
{
    if (s && s[0] == 'q' && s[1] >= '2' && s[1] <= '4' && s[2] == '\0')
        return s[1] - '0';
    return 0;
}

/* What a stream covers: layers [l0, l0 + nl), K|V [kv0, kv0 + nkv), n
 * positions of which [lo, hi) are lossy. Its arrays, one per K|V, are
 * [nl][n][H][D] in the dtype. */
typedef struct {
    int l0, nl, kv0, nkv;
    size_t n, lo, hi;
    uint16_t slab; /* header's 46: 0 whole, 1 + layer * 2 + kv */
} part;

static size_t row_bytes(const skv_lossy_cal *c) { return (size_t)c->H * c->D * skv_dtype_size(c->dt); }

/* Bytes of one array's exact window: positions [0, lo) and [hi, n). */
static size_t window_bytes(const skv_lossy_cal *c, const part *p)
{
    return (size_t)p->nl * (p->n - (p->hi - p->lo)) * row_bytes(c);
}

static size_t part_bound(const skv_lossy_cal *c, const part *p)
{
    const size_t syms = (size_t)p->nl * p->nkv * p->n * c->H * (size_t)(c->M * (1 + SKV_LOSSY_SUB) + 1);
    return SKV_LOSSY_HEADER + (size_t)p->nkv * window_bytes(c, p) + skv_sym_bound(syms);
}

size_t skv_lossy_bound(const skv_lossy_cal *c, size_t n)
{
    const part p = {0, c->L, 0, 2, n, 0, 0, 0};
    return part_bound(c, &p);
}

size_t skv_lossy_slab_bound(const skv_lossy_cal *c, size_t n)
{
    const part p = {0, 1, 0, 1, n, 0, 0, 1};
    return part_bound(c, &p);
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

/* Walk every head vector of the part in stream order: for each layer,
 * K then V, position of [lo, hi), head. Encoding appends symbols and
 * their tables; decoding reads them from the stream, each table as the
 * symbols before it say. Either way out receives the reconstruction. */
typedef struct {
    const skv_lossy_cal *c;
    const lq_level *lv;
    const part *p;
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

/* One sub-vector: its symbols out or in, its reconstruction into rec. */
static int walk_sub(walk *w, const lq_book *b, const float *t, float *rec)
{
    const skv_lossy_cal *c = w->c;
    uint32_t sym[1 + SKV_LOSSY_SUB];
    int rc = SKV_OK;
    if (!w->dec) {
        const int ns = lq_code_sub(c, b, t, w->lv->step, sym, rec);
        for (int i = 0; !rc && i < ns; i++)
            rc = sym_put(w, sym[i], i ? c->esc_tab : b->tab);
        return rc;
    }
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
    return rc;
}

static int walk_all(walk *w, const void *const in[2], void *const out[2])
{
    const skv_lossy_cal *c = w->c;
    const part *pt = w->p;
    const int D = c->D, M = c->M, H = c->H;
    const size_t es = skv_dtype_size(c->dt);
    float x[SKV_LOSSY_DMAX], y[SKV_LOSSY_DMAX], r[SKV_LOSSY_DMAX];
    int rc = SKV_OK;
    for (int l = pt->l0; l < pt->l0 + pt->nl; l++)
        for (int kv = pt->kv0; kv < pt->kv0 + pt->nkv; kv++)
            for (size_t p = pt->lo; p < pt->hi; p++)
                for (int h = 0; h < H; h++) {
                    const size_t hd = lq_head(c, l, kv, h);
                    const size_t off = (((size_t)(l - pt->l0) * pt->n + p) * H + (size_t)h) * D * es;
                    const int a = kv - pt->kv0;
                    const lq_book *cb = w->lv->coarse ? &w->lv->coarse[hd] : NULL;
                    if (!w->dec) {
                        if ((rc = skv_cast_to_f32(c->dt, x, (const uint8_t *)in[a] + off, (size_t)D)))
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
                        float *rm = r + m * SKV_LOSSY_SUB, rec[SKV_LOSSY_SUB], t[SKV_LOSSY_SUB];
                        for (int d = 0; d < SKV_LOSSY_SUB && !w->dec; d++)
                            t[d] = y[m * SKV_LOSSY_SUB + d] - rm[d];
                        if ((rc = walk_sub(w, &w->lv->pq[hd * M + (size_t)m], t, rec)))
                            return rc;
                        for (int d = 0; d < SKV_LOSSY_SUB; d++)
                            rm[d] = rm[d] + rec[d];
                    }
                    lq_apply(c->ti + hd * D * D, r, x, D);
                    if ((rc = skv_cast_from_f32(c->dt, (uint8_t *)out[a] + off, x, (size_t)D)))
                        return rc;
                }
    return SKV_OK;
}

/* The window of one array of the part, packed in win: with x, packed
 * from x (and copied to its places in full); without, unpacked from win
 * into its places in full. */
static void window_move(const skv_lossy_cal *c, const part *pt, const uint8_t *x, uint8_t *win,
                        const uint8_t *packed, uint8_t *full)
{
    const size_t row = row_bytes(c);
    size_t w = 0;
    for (int l = 0; l < pt->nl; l++)
        for (size_t p = 0; p < pt->n; p++) {
            if (p >= pt->lo && p < pt->hi)
                continue;
            const size_t off = ((size_t)l * pt->n + p) * row;
            if (x)
                memcpy(win + w, x + off, row);
            memcpy(full + off, x ? x + off : packed + w, row);
            w += row;
        }
}

static uint64_t part_sum(const part *pt, const void *const a[2], size_t bytes)
{
    uint64_t h = SKV_LOSSY_MAGIC;
    for (int i = 0; i < pt->nkv; i++)
        h = skv_checksum64(a[i], bytes, h);
    return h;
}

static int part_encode(const skv_lossy_cal *c, int bits, skv_lossy_kind kind, const part *pt,
                       const void *const in[2], uint8_t *dst, size_t cap, size_t *len,
                       void *const recon[2])
{
    const lq_level *lv = level_of(c, bits, kind);
    if (!lv)
        return SKV_ERR_ARG;
    if (pt->n == 0 || pt->n > UINT32_MAX)
        return skv_error(SKV_ERR_ARG, "lossy stream of %zu positions", pt->n);
    if (pt->lo > pt->hi || pt->hi > pt->n)
        return skv_error(SKV_ERR_ARG, "lossy range [%zu, %zu) of %zu positions", pt->lo, pt->hi, pt->n);
    const size_t ms = (size_t)pt->nl * pt->nkv * (pt->hi - pt->lo) * c->H *
                      (size_t)(c->M * (1 + SKV_LOSSY_SUB) + (lv->coarse ? 1 : 0));
    const size_t bytes = (size_t)pt->nl * pt->n * row_bytes(c), wb = window_bytes(c, pt);
    const size_t head = SKV_LOSSY_HEADER + (size_t)pt->nkv * wb;
    if (cap < head)
        return skv_error(SKV_ERR_TOO_LARGE, "lossy stream buffer of %zu bytes", cap);
    walk w = {c, lv, pt, skv_malloc(ms * sizeof(void *) + 1), skv_malloc(ms * sizeof(uint32_t) + 1), 0, ms, NULL};
    uint8_t *rec = skv_malloc((size_t)pt->nkv * bytes + 1);
    int rc = w.tabs && w.syms && rec ? SKV_OK : skv_error(SKV_ERR_NOMEM, "lossy stream of %zu positions", pt->n);
    void *out[2] = {rec, rec + bytes};
    for (int i = 0; !rc && i < pt->nkv; i++)
        window_move(c, pt, in[i], dst + SKV_LOSSY_HEADER + (size_t)i * wb, NULL, out[i]);
    if (!rc)
        rc = walk_all(&w, in, out);
    size_t body = 0;
    if (!rc)
        rc = skv_sym_encode(w.syms, w.tabs, w.ns, dst + head, cap - head, &body);
    if (!rc) {
        memset(dst, 0, SKV_LOSSY_HEADER);
        skv_store32_le(dst, SKV_LOSSY_MAGIC);
        dst[4] = SKV_LOSSY_VERSION;
        dst[5] = (uint8_t)bits;
        dst[6] = (uint8_t)kind;
        dst[7] = (uint8_t)c->dt;
        skv_store32_le(dst + 8, (uint32_t)pt->n);
        skv_store32_le(dst + 12, (uint32_t)body);
        memcpy(dst + 16, c->id, 16);
        skv_store64_le(dst + 32, part_sum(pt, (const void *const *)out, bytes));
        skv_store16_le(dst + 40, (uint16_t)c->L);
        skv_store16_le(dst + 42, (uint16_t)c->H);
        skv_store16_le(dst + 44, (uint16_t)c->D);
        skv_store16_le(dst + 46, pt->slab);
        skv_store32_le(dst + 48, (uint32_t)pt->lo);
        skv_store32_le(dst + 52, (uint32_t)pt->hi);
        *len = head + body;
        for (int i = 0; i < pt->nkv; i++)
            if (recon[i])
                memcpy(recon[i], out[i], bytes);
    }
    skv_free(w.tabs);
    skv_free(w.syms);
    skv_free(rec);
    return rc;
}

int skv_lossy_encode(const skv_lossy_cal *c, int bits, skv_lossy_kind kind, const void *k,
                     const void *v, size_t n, size_t lo, size_t hi, uint8_t *dst, size_t cap,
                     size_t *len, void *recon_k, void *recon_v)
{
    const part pt = {0, c->L, 0, 2, n, lo, hi, 0};
    const void *in[2] = {k, v};
    void *rec[2] = {recon_k, recon_v};
    return part_encode(c, bits, kind, &pt, in, dst, cap, len, rec);
}

int skv_lossy_slab_encode(const skv_lossy_cal *c, int bits, skv_lossy_kind kind, int layer, int kv,
                          const void *x, size_t n, size_t lo, size_t hi, uint8_t *dst, size_t cap,
                          size_t *len, void *recon)
{
    if (layer < 0 || layer >= c->L || kv < 0 || kv > 1)
        return skv_error(SKV_ERR_ARG, "lossy slab (%d, %d) of %d layers", layer, kv, c->L);
    const part pt = {layer, 1, kv, 1, n, lo, hi, (uint16_t)(1 + layer * 2 + kv)};
    const void *in[2] = {x, NULL};
    void *rec[2] = {recon, NULL};
    return part_encode(c, bits, kind, &pt, in, dst, cap, len, rec);
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

static int part_decode(const skv_lossy_cal *c, part *pt, const uint8_t *src, size_t len, void *const out[2])
{
    int bits;
    skv_lossy_kind kind;
    size_t sn;
    int rc = skv_lossy_info(src, len, &bits, &kind, &sn, &pt->lo, &pt->hi);
    if (rc)
        return rc;
    if (sn != pt->n || src[7] != (uint8_t)c->dt || skv_load16_le(src + 40) != c->L ||
        skv_load16_le(src + 42) != c->H || skv_load16_le(src + 44) != c->D ||
        skv_load16_le(src + 46) != pt->slab)
        return skv_error(SKV_ERR_SHAPE, "lossy stream of %zu positions, dtype %u, shape [%u, %u, %u], part %u; asked %zu, %u, [%d, %d, %d], part %u",
                         sn, src[7], skv_load16_le(src + 40), skv_load16_le(src + 42),
                         skv_load16_le(src + 44), skv_load16_le(src + 46), pt->n, (unsigned)c->dt,
                         c->L, c->H, c->D, pt->slab);
    if (memcmp(src + 16, c->id, 16) != 0)
        return skv_error(SKV_ERR_SHAPE, "lossy stream was coded with another calibration");
    const lq_level *lv = level_of(c, bits, kind);
    if (!lv)
        return SKV_ERR_ARG;
    const size_t bytes = (size_t)pt->nl * pt->n * row_bytes(c), wb = window_bytes(c, pt);
    const size_t head = SKV_LOSSY_HEADER + (size_t)pt->nkv * wb;
    if (len < head || skv_load32_le(src + 12) != len - head)
        return skv_error(SKV_ERR_CORRUPT, "lossy stream of %zu bytes: its parts do not add up", len);
    for (int i = 0; i < pt->nkv; i++)
        window_move(c, pt, NULL, NULL, src + SKV_LOSSY_HEADER + (size_t)i * wb, out[i]);
    skv_symdec dec;
    walk w = {c, lv, pt, NULL, NULL, 0, 0, &dec};
    const void *in[2] = {NULL, NULL};
    rc = skv_symdec_begin(&dec, src + head, len - head);
    if (!rc)
        rc = walk_all(&w, in, out);
    if (!rc)
        rc = skv_symdec_end(&dec);
    if (!rc && part_sum(pt, (const void *const *)out, bytes) != skv_load64_le(src + 32))
        rc = skv_error(SKV_ERR_CORRUPT, "lossy stream's reconstruction fails its checksum");
    return rc;
}

int skv_lossy_decode(const skv_lossy_cal *c, const uint8_t *src, size_t len, size_t n, void *k,
                     void *v)
{
    part pt = {0, c->L, 0, 2, n, 0, 0, 0};
    void *out[2] = {k, v};
    return part_decode(c, &pt, src, len, out);
}

int skv_lossy_slab_decode(const skv_lossy_cal *c, const uint8_t *src, size_t len, int layer, int kv,
                          size_t n, void *x)
{
    if (layer < 0 || layer >= c->L || kv < 0 || kv > 1)
        return skv_error(SKV_ERR_ARG, "lossy slab (%d, %d) of %d layers", layer, kv, c->L);
    part pt = {layer, 1, kv, 1, n, 0, 0, (uint16_t)(1 + layer * 2 + kv)};
    void *out[2] = {x, NULL};
    return part_decode(c, &pt, src, len, out);
}
