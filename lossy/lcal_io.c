/*
 * lcal_io.c - the lossy calibration: its memory, its accessors and its
 * serialized form (FORMAT.md, "Lossy calibrations"), whose BLAKE2b-128
 * is its id.
 */
#include <math.h>
#include <sodium.h>
#include <string.h>

#include "lossy_int.h"

#define LCAL_MAGIC 0x434c4b53u /* "SKLC" */
#define LCAL_VERSION 1

int lq_cal_alloc(skv_lossy_cal **out, int L, int H, int D, seqkv_dtype dt)
{
    if (L <= 0 || H <= 0 || D <= 0 || D > SKV_LOSSY_DMAX || D % SKV_LOSSY_SUB || L > 4096 || H > 4096)
        return skv_error(SKV_ERR_SHAPE, "lossy calibration of shape [%d, %d, %d]", L, H, D);
    skv_lossy_cal *c = skv_calloc(1, sizeof(*c));
    if (!c)
        return skv_error(SKV_ERR_NOMEM, "lossy calibration");
    c->L = L;
    c->H = H;
    c->D = D;
    c->M = D / SKV_LOSSY_SUB;
    c->dt = dt;
    const size_t tn = (size_t)L * 2 * H * D * D;
    c->t = skv_calloc(tn, sizeof(float));
    c->ti = skv_calloc(tn, sizeof(float));
    int rc = skv_symtab_build(NULL, 2 * LQ_ESC_MAX + 1, &c->esc_tab);
    if (rc) {
        skv_lossy_cal_free(c);
        return rc;
    }
    if (!c->t || !c->ti) {
        skv_lossy_cal_free(c);
        return skv_error(SKV_ERR_NOMEM, "lossy calibration transforms");
    }
    *out = c;
    return SKV_OK;
}

void skv_lossy_cal_free(skv_lossy_cal *c)
{
    if (!c)
        return;
    const size_t heads = (size_t)c->L * 2 * c->H;
    for (int i = 0; i < SKV_LOSSY_LEVELS; i++)
        for (int k = 0; k < 2; k++) {
            lq_level *lv = &c->lv[i][k];
            for (size_t h = 0; lv->coarse && h < heads; h++)
                lq_book_clear(&lv->coarse[h]);
            for (size_t b = 0; lv->pq && b < heads * c->M; b++)
                lq_book_clear(&lv->pq[b]);
            skv_free(lv->coarse);
            skv_free(lv->pq);
        }
    skv_free(c->t);
    skv_free(c->ti);
    skv_symtab_free(c->esc_tab);
    skv_free(c);
}

void skv_lossy_cal_shape(const skv_lossy_cal *c, int *layers, int *kv_heads, int *head_dim)
{
    *layers = c->L;
    *kv_heads = c->H;
    *head_dim = c->D;
}
seqkv_dtype skv_lossy_cal_dtype(const skv_lossy_cal *c) { return c->dt; }
const uint8_t *skv_lossy_cal_id(const skv_lossy_cal *c) { return c->id; }

int skv_lossy_cal_has(const skv_lossy_cal *c, int bits, skv_lossy_kind kind)
{
    const int li = lq_level_index(bits);
    return li >= 0 && (kind == SKV_LQ_PVQ || kind == SKV_LQ_RVQ) && c->lv[li][kind].present;
}

double skv_lossy_cal_step(const skv_lossy_cal *c, int bits, skv_lossy_kind kind)
{
    return skv_lossy_cal_has(c, bits, kind) ? c->lv[lq_level_index(bits)][kind].step : 0.0;
}

const float *skv_lossy_transform(const skv_lossy_cal *c, int layer, int kv, int head, int inverse)
{
    return (inverse ? c->ti : c->t) + lq_head(c, layer, kv, head) * (size_t)c->D * c->D;
}

/* ---- serialized form ----------------------------------------------------- */

typedef struct {
    uint8_t *p;
    size_t len, cap;
    int err;
} wbuf;

static void put(wbuf *w, const void *src, size_t n)
{
    if (w->err)
        return;
    if (w->len + n > w->cap) {
        size_t nc = w->cap ? w->cap * 2 : 4096;
        while (nc < w->len + n)
            nc *= 2;
        uint8_t *np = skv_realloc(w->p, nc);
        if (!np) {
            w->err = 1;
            return;
        }
        w->p = np;
        w->cap = nc;
    }
    memcpy(w->p + w->len, src, n);
    w->len += n;
}
static void put32(wbuf *w, uint32_t v)
{
    uint8_t b[4];
    skv_store32_le(b, v);
    put(w, b, 4);
}
static void putf(wbuf *w, const float *f, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &f[i], 4);
        put32(w, u);
    }
}
static void put_book(wbuf *w, const lq_book *b)
{
    put32(w, b->k);
    put32(w, (uint32_t)b->dim | (b->esc ? 0x100u : 0u));
    putf(w, b->c, (size_t)b->k * b->dim);
    const uint16_t *f = skv_symtab_freqs(b->tab);
    for (uint32_t k = 0; k < b->k + (uint32_t)b->esc; k++) {
        uint8_t x[2];
        skv_store16_le(x, f[k]);
        put(w, x, 2);
    }
}

static int serialize(const skv_lossy_cal *c, wbuf *w)
{
    const size_t heads = (size_t)c->L * 2 * c->H;
    put32(w, LCAL_MAGIC);
    put32(w, LCAL_VERSION);
    put32(w, (uint32_t)c->L);
    put32(w, (uint32_t)c->H);
    put32(w, (uint32_t)c->D);
    put32(w, (uint32_t)c->dt);
    put32(w, (uint32_t)c->sink);
    putf(w, c->t, heads * c->D * c->D);
    putf(w, c->ti, heads * c->D * c->D);
    for (int i = 0; i < SKV_LOSSY_LEVELS; i++)
        for (int k = 0; k < 2; k++) {
            const lq_level *lv = &c->lv[i][k];
            uint32_t flags = (uint32_t)lv->present | (lv->coarse ? 2u : 0u);
            put32(w, flags);
            if (!lv->present)
                continue;
            uint8_t st[8];
            uint64_t u;
            memcpy(&u, &lv->step, 8);
            skv_store64_le(st, u);
            put(w, st, 8);
            for (size_t h = 0; lv->coarse && h < heads; h++)
                put_book(w, &lv->coarse[h]);
            for (size_t b = 0; b < heads * c->M; b++)
                put_book(w, &lv->pq[b]);
        }
    return w->err ? skv_error(SKV_ERR_NOMEM, "serializing a lossy calibration") : SKV_OK;
}

int lq_set_id(skv_lossy_cal *c)
{
    wbuf w = {0};
    int rc = serialize(c, &w);
    if (!rc)
        crypto_generichash(c->id, 16, w.p, w.len, NULL, 0);
    skv_free(w.p);
    return rc;
}

int skv_lossy_cal_save(const skv_lossy_cal *c, uint8_t **out, size_t *len)
{
    wbuf w = {0};
    int rc = serialize(c, &w);
    if (rc) {
        skv_free(w.p);
        return rc;
    }
    *out = w.p;
    *len = w.len;
    return SKV_OK;
}

typedef struct {
    const uint8_t *p;
    size_t len, off;
} rbuf;

static int get(rbuf *r, void *dst, size_t n)
{
    if (n > r->len - r->off)
        return skv_error(SKV_ERR_CORRUPT, "lossy calibration ends early (at byte %zu of %zu)", r->off, r->len);
    memcpy(dst, r->p + r->off, n);
    r->off += n;
    return SKV_OK;
}
static int get32(rbuf *r, uint32_t *v)
{
    uint8_t b[4] = {0};
    int rc = get(r, b, 4);
    *v = rc ? 0 : skv_load32_le(b);
    return rc;
}
static int getf(rbuf *r, float *f, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        int rc = get32(r, &u);
        if (rc)
            return rc;
        memcpy(&f[i], &u, 4);
        if (!isfinite(f[i]))
            return skv_error(SKV_ERR_CORRUPT, "lossy calibration holds a value that is not finite");
    }
    return SKV_OK;
}
static int get_book(rbuf *r, lq_book *b, int dim, int esc)
{
    uint32_t k, d;
    int rc = get32(r, &k);
    if (!rc)
        rc = get32(r, &d);
    if (rc)
        return rc;
    if (k == 0 || k + (uint32_t)esc > SKV_SYM_MAX || d != ((uint32_t)dim | (esc ? 0x100u : 0u)))
        return skv_error(SKV_ERR_CORRUPT, "lossy codebook of %u x %u (want up to %u of %d)", k, d,
                         SKV_SYM_MAX, dim);
    if ((size_t)k * (dim * 4 + 2) > r->len - r->off)
        return skv_error(SKV_ERR_CORRUPT, "lossy calibration ends early");
    const uint32_t ns = k + (uint32_t)esc;
    b->k = k;
    b->dim = dim;
    b->esc = esc;
    b->c = skv_malloc((size_t)k * dim * sizeof(float));
    b->bits = skv_malloc((size_t)ns * sizeof(float));
    uint16_t *f = skv_malloc((size_t)ns * sizeof(uint16_t));
    rc = b->c && b->bits && f ? SKV_OK : skv_error(SKV_ERR_NOMEM, "lossy codebook");
    if (!rc)
        rc = getf(r, b->c, (size_t)k * dim);
    for (uint32_t i = 0; !rc && i < ns; i++) {
        uint8_t x[2] = {0};
        rc = get(r, x, 2);
        f[i] = skv_load16_le(x);
    }
    if (!rc)
        rc = skv_symtab_from_freqs(f, ns, &b->tab);
    for (uint32_t i = 0; !rc && i < ns; i++)
        b->bits[i] = (float)skv_symtab_bits(b->tab, i);
    skv_free(f);
    return rc;
}

int skv_lossy_cal_load(const uint8_t *buf, size_t len, skv_lossy_cal **out)
{
    rbuf r = {buf, len, 0};
    uint32_t hd[7];
    for (int i = 0; i < 7; i++)
        if (get32(&r, &hd[i]))
            return skv_error(SKV_ERR_FORMAT, "not a lossy calibration (%zu bytes)", len);
    if (hd[0] != LCAL_MAGIC)
        return skv_error(SKV_ERR_FORMAT, "not a lossy calibration");
    if (hd[1] != LCAL_VERSION)
        return skv_error(hd[1] > LCAL_VERSION ? SKV_ERR_VERSION : SKV_ERR_FORMAT,
                         "lossy calibration version %u (this build reads %u)", hd[1], LCAL_VERSION);
    if (hd[5] > 255 || skv_dtype_size((seqkv_dtype)hd[5]) == 0 || hd[2] > 4096 || hd[3] > 4096 ||
        hd[4] > SKV_LOSSY_DMAX || hd[6] > (1u << 20))
        return skv_error(SKV_ERR_CORRUPT, "lossy calibration header out of range");
    skv_lossy_cal *c;
    int rc = lq_cal_alloc(&c, (int)hd[2], (int)hd[3], (int)hd[4], (seqkv_dtype)hd[5]);
    if (rc)
        return rc == SKV_ERR_SHAPE ? skv_error(SKV_ERR_CORRUPT, "lossy calibration of a shape it cannot have") : rc;
    c->sink = (int)hd[6];
    const size_t heads = (size_t)c->L * 2 * c->H;
    if (heads * c->D * c->D * 8 > len - r.off)
        rc = skv_error(SKV_ERR_CORRUPT, "lossy calibration ends early");
    if (!rc)
        rc = getf(&r, c->t, heads * c->D * c->D);
    if (!rc)
        rc = getf(&r, c->ti, heads * c->D * c->D);
    for (int i = 0; !rc && i < SKV_LOSSY_LEVELS; i++)
        for (int k = 0; !rc && k < 2; k++) {
            lq_level *lv = &c->lv[i][k];
            uint32_t flags;
            rc = get32(&r, &flags);
            if (rc || !flags)
                continue;
            if (flags > 3 || !(flags & 1) || ((flags & 2) != 0) != (k == SKV_LQ_RVQ)) {
                rc = skv_error(SKV_ERR_CORRUPT, "lossy calibration level flags %u", flags);
                break;
            }
            uint8_t st[8] = {0};
            rc = get(&r, st, 8);
            uint64_t u = skv_load64_le(st);
            memcpy(&lv->step, &u, 8);
            if (!rc && !(lv->step > 0.0 && isfinite(lv->step)))
                rc = skv_error(SKV_ERR_CORRUPT, "lossy calibration step out of range");
            if (!rc && (flags & 2)) {
                lv->coarse = skv_calloc(heads, sizeof(lq_book));
                if (!lv->coarse)
                    rc = skv_error(SKV_ERR_NOMEM, "lossy calibration");
                for (size_t h = 0; !rc && h < heads; h++)
                    rc = get_book(&r, &lv->coarse[h], c->D, 0);
            }
            if (!rc) {
                lv->pq = skv_calloc(heads * c->M, sizeof(lq_book));
                if (!lv->pq)
                    rc = skv_error(SKV_ERR_NOMEM, "lossy calibration");
            }
            for (size_t b = 0; !rc && b < heads * c->M; b++)
                rc = get_book(&r, &lv->pq[b], SKV_LOSSY_SUB, 1);
            if (!rc)
                lv->present = 1;
        }
    if (!rc && r.off != len)
        rc = skv_error(SKV_ERR_CORRUPT, "lossy calibration has %zu bytes after its end", len - r.off);
    if (!rc)
        crypto_generichash(c->id, 16, buf, len, NULL, 0);
    if (rc) {
        skv_lossy_cal_free(c);
        return rc;
    }
    *out = c;
    return SKV_OK;
}
