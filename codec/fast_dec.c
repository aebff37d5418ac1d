/* The fast level's decoder: the header and tables checked against len,
 * then the symbols, by the scalar reference path or a SIMD path for this
 * CPU (fast_simd.c) that decodes the same values, and the end checks:
 * every word used, every state back at its start, the checksum. */
#include <stdlib.h>
#include <string.h>
#include "skv_xxh.h"

#include "fast_int.h"

int skv__fast_simd = -1;

int skv__fast_simd_pick(void)
{
    const char *e = getenv("SEQKV_SIMD");
    int v = 0;
    if ((!e || strcmp(e, "0") != 0) && __builtin_cpu_supports("avx2")) {
        v = 2;
        if ((!e || strcmp(e, "2") != 0) && __builtin_cpu_supports("avx512f") &&
            __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
            v = 3;
    }
    __atomic_store_n(&skv__fast_simd, v, __ATOMIC_RELAXED);
    return v;
}

static int fast_hdr_read(const uint8_t *src, size_t len, seqkv_dtype dt, size_t rows, size_t channels,
                         fast_hdr *h)
{
    if (len < SKV_FAST_HEADER)
        return skv_error(SKV_ERR_FORMAT, "fast stream of %zu bytes, shorter than its header", len);
    if (skv_load32_le(src) != SKV_FAST_MAGIC)
        return skv_error(SKV_ERR_FORMAT, "not a fast stream (bad magic)");
    if (src[4] > SKV_FAST_VERSION)
        return skv_error(SKV_ERR_VERSION, "fast stream version %u (this build reads %u)", src[4],
                         SKV_FAST_VERSION);
    h->refs_len = skv_load32_le(src + 28);
    if (src[4] == 0 || src[6] != FAST_LANES || (src[4] == 1) != (h->refs_len == 0))
        return skv_error(SKV_ERR_FORMAT, "fast stream: bad version, lanes or reserved field");
    h->dt = (seqkv_dtype)src[5];
    h->rows = skv_load32_le(src + 8);
    h->channels = skv_load32_le(src + 12);
    h->tables = src[7];
    if (src[5] != (unsigned)dt || h->rows != rows || h->channels != channels)
        return skv_error(SKV_ERR_FORMAT, "fast stream of %u x %u dtype %u, expected %zu x %zu dtype %d",
                         h->rows, h->channels, src[5], rows, channels, (int)dt);
    if (!skv_fast_bound(dt, rows, channels))
        return skv_error(SKV_ERR_FORMAT, "fast stream: bad dtype or shape");
    h->n = rows * channels;
    if (h->tables < 1 || h->tables > FAST_TABLES_MAX || h->tables > channels)
        return skv_error(SKV_ERR_CORRUPT, "fast stream with %u tables for %u channels", h->tables,
                         h->channels);
    h->tab_len = skv_load32_le(src + 16);
    h->word_len = skv_load32_le(src + 20);
    h->raw_len = skv_load32_le(src + 24);
    h->checksum = skv_load64_le(src + 32);
    h->tab_off = SKV_FAST_HEADER;
    h->refs_off = h->tab_off + h->tab_len;
    h->word_off = h->refs_off + h->refs_len;
    h->raw_off = h->word_off + h->word_len;
    if (h->tab_len > len || h->refs_len > len || h->word_len > len || h->raw_len > len ||
        h->raw_off + h->raw_len != len || h->raw_off < h->word_off)
        return skv_error(SKV_ERR_CORRUPT, "fast stream: sizes do not add up to its %zu bytes", len);
    h->coded_rows = rows;
    if (h->refs_len) {
        /* the bitmap's count of references: the coded scalars' number */
        const uint8_t *bm = src + h->refs_off;
        if (h->refs_len < (rows + 7) / 8)
            return skv_error(SKV_ERR_CORRUPT, "fast stream: row bitmap cut");
        size_t m = 0;
        for (size_t i = 0; i < (rows + 7) / 8; i++)
            m += (size_t)__builtin_popcount(bm[i]);
        if ((bm[0] & 1) || (rows % 8 && bm[rows / 8] >> (rows % 8)))
            return skv_error(SKV_ERR_CORRUPT, "fast stream: row 0 or a row past the last is a reference");
        h->coded_rows = rows - m;
    }
    const size_t es = skv_dtype_size(dt), nc = h->coded_rows * channels;
    if (h->raw_len != (es == 2 ? nc : 0) || h->word_len < 4 * FAST_LANES || (h->word_len & 1) ||
        h->word_len - 4 * FAST_LANES > 2 * nc)
        return skv_error(SKV_ERR_CORRUPT, "fast stream: bad word or raw sizes");
    return SKV_OK;
}

/* The row references: from[r] = the row r copies, or UINT32_MAX (every
 * read checked; the section used exactly, each varint in its shortest
 * form, each source a coded row). */
static int fast_refs_read(const uint8_t *p, size_t len, size_t rows, uint32_t *from)
{
    const uint8_t *bm = p, *q = p + (rows + 7) / 8, *end = p + len;
    for (size_t r = 0; r < rows; r++) {
        from[r] = UINT32_MAX;
        if (!(bm[r / 8] >> (r % 8) & 1))
            continue;
        uint64_t d = 0;
        for (int sh = 0;; sh += 7) {
            if (q == end || sh > 28)
                return skv_error(SKV_ERR_CORRUPT, "fast stream: row reference %zu cut or too long", r);
            const uint8_t b = *q++;
            d |= (uint64_t)(b & 0x7f) << sh;
            if (!(b & 0x80)) {
                if (b == 0 && sh)
                    return skv_error(SKV_ERR_CORRUPT, "fast stream: row reference %zu not in its shortest form", r);
                break;
            }
        }
        if (d >= r)
            return skv_error(SKV_ERR_CORRUPT, "fast stream: row %zu refers before row 0", r);
        from[r] = (uint32_t)(r - 1 - d);
        if (from[from[r]] != UINT32_MAX)
            return skv_error(SKV_ERR_CORRUPT, "fast stream: row %zu refers to a reference", r);
    }
    if (q != end)
        return skv_error(SKV_ERR_CORRUPT, "fast stream: %zu stray bytes after the row references",
                         (size_t)(end - q));
    return SKV_OK;
}

/* The coded rows, decoded at the end of dst, moved into place and the
 * references copied, front to back: a coded row never moves backwards
 * past a row not yet placed, and a reference's source is final. */
static void fast_rows_place(uint8_t *dst, size_t rows, size_t coded, size_t rb, const uint32_t *from)
{
    size_t next = rows - coded;
    for (size_t r = 0; r < rows; r++) {
        if (from[r] != UINT32_MAX)
            memcpy(dst + r * rb, dst + (size_t)from[r] * rb, rb);
        else if (next++ != r)
            memcpy(dst + r * rb, dst + (next - 1) * rb, rb);
    }
}

/* A table's FAST_M decoder entries, symbol after symbol, in blocks of
 * FILL_SLACK: a block that runs past a symbol's slots is overwritten by
 * the next symbol's, the last may run FILL_SLACK - 1 entries past e's
 * end (into the next table's, filled after, or the slack). */
#define FILL_SLACK 8
static void fast_tab_fill(const fast_tab *tab, uint32_t *e)
{
    for (int s = 0; s < 256; s++) {
        if (!tab->f[s])
            continue;
        const uint32_t v = fast_dent((uint32_t)s, tab->f[s], tab->cum[s]);
        for (uint32_t k = tab->cum[s]; k < tab->cum[s + 1]; k += FILL_SLACK)
            for (int q = 0; q < FILL_SLACK; q++)
                e[k + (uint32_t)q] = v;
    }
}

/* Scalar steps [step, steps), the last maybe partial (n scalars in all);
 * every read checked. */
static int fast_steps_ref(fast_dec *d, size_t step, size_t n, void *dst)
{
    const int wide = d->dt != SEQKV_DT_F8E4M3;
    uint8_t *out = dst;
    uint32_t c = (uint32_t)((step * FAST_LANES) % d->C);
    for (size_t i = step * FAST_LANES; i < n; i++) {
        const uint32_t l = (uint32_t)(i % FAST_LANES);
        uint32_t x = d->x[l];
        const uint32_t slot = x & (FAST_M - 1), e = d->dtab[d->chbase[c] + slot];
        const uint32_t s = e & 0xffu, f = ((e >> 8) & 0xfffu) + 1u, cum = e >> 20;
        x = f * (x >> FAST_PROB) + slot - cum;
        if (x < FAST_L) {
            if (d->wend - d->w < 2)
                return skv_error(SKV_ERR_CORRUPT, "fast stream: words end early");
            x = x << 16 | skv_load16_le(d->w);
            d->w += 2;
        }
        d->x[l] = x;
        if (wide)
            skv_store16_le(out + 2 * i, (uint16_t)fast_join16(s, d->raw[i]));
        else
            out[i] = (uint8_t)fast_join8(s);
        c = c + 1 == d->C ? 0 : c + 1;
    }
    return SKV_OK;
}

int skv_fast_decode(const uint8_t *src, size_t len, seqkv_dtype dt, size_t rows, size_t channels,
                    void *dst, size_t dst_cap)
{
    if (!src || !dst)
        return skv_error(SKV_ERR_ARG, "fast decode: no buffer");
    fast_hdr h = {0};
    int rc = fast_hdr_read(src, len, dt, rows, channels, &h);
    if (rc)
        return rc;
    const size_t es = skv_dtype_size(dt);
    if (dst_cap < h.n * es)
        return skv_error(SKV_ERR_ARG, "fast decode: %zu bytes of room for %zu", dst_cap, h.n * es);
    const uint32_t C = h.channels, T = h.tables;
    /* FILL_SLACK: fast_tab_fill writes whole blocks past a table's end */
    uint32_t *dtab = skv_malloc(((size_t)T * FAST_M + FILL_SLACK + C) * sizeof *dtab);
    if (!dtab)
        return skv_error(SKV_ERR_NOMEM, "fast decode");
    uint32_t *chbase = dtab + (size_t)T * FAST_M + FILL_SLACK, *from = NULL;
    const uint8_t *p = src + h.tab_off, *tend = src + h.refs_off;
    if (T > 1) {
        if ((size_t)(tend - p) < C) {
            rc = skv_error(SKV_ERR_CORRUPT, "fast stream: channel map past the table area");
            goto out;
        }
        for (uint32_t c = 0; c < C; c++) {
            if (p[c] >= T) {
                rc = skv_error(SKV_ERR_CORRUPT, "fast stream: channel %u on table %u of %u", c, p[c], T);
                goto out;
            }
            chbase[c] = (uint32_t)p[c] * FAST_M;
        }
        p += C;
    } else {
        memset(chbase, 0, (size_t)C * sizeof *chbase);
    }
    for (uint32_t t = 0; t < T; t++) {
        fast_tab tab;
        size_t used;
        if ((rc = skv__fast_tab_read(p, tend, &tab, &used)))
            goto out;
        p += used;
        fast_tab_fill(&tab, dtab + (size_t)t * FAST_M);
    }
    if (p != tend) {
        rc = skv_error(SKV_ERR_CORRUPT, "fast stream: %zu stray bytes after the tables", (size_t)(tend - p));
        goto out;
    }
    if (h.refs_len) {
        if (!(from = skv_malloc(rows * sizeof *from))) {
            rc = skv_error(SKV_ERR_NOMEM, "fast decode");
            goto out;
        }
        if ((rc = fast_refs_read(src + h.refs_off, h.refs_len, rows, from)))
            goto out;
    }
    /* the coded rows go to the end of dst (all of it without references) */
    const size_t rb = (size_t)C * es, nc = h.coded_rows * C;
    uint8_t *cdst = (uint8_t *)dst + (rows - h.coded_rows) * rb;
    fast_dec d;
    const uint8_t *w = src + h.word_off;
    for (int l = 0; l < FAST_LANES; l++) {
        d.x[l] = skv_load32_le(w + 4 * l);
        if (d.x[l] < FAST_L) {
            rc = skv_error(SKV_ERR_CORRUPT, "fast stream: a state below 2^16");
            goto out;
        }
    }
    d.w = w + 4 * FAST_LANES;
    d.wend = src + h.raw_off;
    d.dtab = dtab;
    d.chbase = chbase;
    d.raw = src + h.raw_off;
    d.C = C;
    d.dt = dt;
    size_t step = 0;
    const size_t full = nc / FAST_LANES;
    const int simd = fast_simd();
    if (simd >= 3)
        step = skv__fast_steps_avx512(&d, 0, full, cdst);
    else if (simd >= 2)
        step = skv__fast_steps_avx2(&d, 0, full, cdst);
    if ((rc = fast_steps_ref(&d, step, nc, cdst)))
        goto out;
    if (d.w != d.wend) {
        rc = skv_error(SKV_ERR_CORRUPT, "fast stream: %zu words left over", (size_t)(d.wend - d.w) / 2);
        goto out;
    }
    for (int l = 0; l < FAST_LANES; l++)
        if (d.x[l] != FAST_L) {
            rc = skv_error(SKV_ERR_CORRUPT, "fast stream: lane %d does not end at its start state", l);
            goto out;
        }
    if (from)
        fast_rows_place(dst, rows, h.coded_rows, rb, from);
    if (XXH3_64bits(dst, h.n * es) != h.checksum)
        rc = skv_error(SKV_ERR_CORRUPT, "fast stream: checksum mismatch");
out:
    skv_free(from);
    skv_free(dtab);
    return rc;
}
