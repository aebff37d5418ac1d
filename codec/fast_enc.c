/* The fast level's encoder: per-channel histograms, the table choice
 * (fast_tables.c), then interleaved rANS over the symbols in reverse and
 * the raw bytes (FORMAT.md, "Fast streams"). One path on every CPU. */
#include <string.h>
#include "skv_xxh.h"

#include "fast_int.h"

static int fast_dtype_ok(seqkv_dtype dt)
{
    return dt == SEQKV_DT_BF16 || dt == SEQKV_DT_F16 || dt == SEQKV_DT_F8E4M3;
}

size_t skv_fast_bound(seqkv_dtype dt, size_t rows, size_t channels)
{
    if (!fast_dtype_ok(dt) || !rows || !channels || channels > SKV_FAST_MAX_SCALARS ||
        rows > SKV_FAST_MAX_SCALARS / channels)
        return 0;
    const size_t n = rows * channels, es = skv_dtype_size(dt);
    const size_t T = channels < FAST_TABLES_MAX ? channels : FAST_TABLES_MAX;
    return SKV_FAST_HEADER + channels + T * (2 + 2 * 256) + 4 * FAST_LANES + 2 * n + (es - 1) * n;
}

static inline uint32_t fast_load(const uint8_t *p, size_t i, int wide)
{
    return wide ? skv_load16_le(p + 2 * i) : p[i];
}

/* Rows equal to an earlier row (FORMAT.md, "Fast streams", row
 * references): src[r] = the first row with the same bytes, or -1;
 * returns how many rows have one. The first, so that a stream has one
 * form: a reference's source is a coded row, and no two coded rows are
 * equal. A hash table of (XXH3-64, row),
 * every hit confirmed by comparing the bytes. */
static int64_t fast_rows_match(const uint8_t *in, size_t rows, size_t rb, int64_t *src)
{
    size_t cap = 16;
    while (cap < 2 * rows)
        cap *= 2;
    uint64_t *hv = skv_malloc(cap * sizeof *hv);
    int64_t *hr = skv_malloc(cap * sizeof *hr);
    if (!hv || !hr) {
        skv_free(hv);
        skv_free(hr);
        return -1;
    }
    for (size_t i = 0; i < cap; i++)
        hr[i] = -1;
    int64_t m = 0;
    for (size_t r = 0; r < rows; r++) {
        const uint8_t *row = in + r * rb;
        const uint64_t h = XXH3_64bits(row, rb);
        size_t i = (size_t)h & (cap - 1);
        src[r] = -1;
        for (; hr[i] >= 0; i = (i + 1) & (cap - 1))
            if (hv[i] == h && memcmp(in + (size_t)hr[i] * rb, row, rb) == 0) {
                src[r] = hr[i];
                m++;
                break;
            }
        if (src[r] < 0) {
            hv[i] = h;
            hr[i] = (int64_t)r;
        }
    }
    skv_free(hv);
    skv_free(hr);
    return m;
}

/* The row references' section: a bitmap of the rows that copy an earlier
 * one, then per such row, in order, LEB128 of its distance - 1. Its
 * length, or 0 when it does not pay (fewer bytes than one per scalar it
 * saves, per two for 8-bit dtypes; skv_fast_bound relies on this). */
static size_t fast_refs_write(const int64_t *src, size_t rows, int64_t m, size_t C, size_t es,
                              uint8_t *out)
{
    size_t len = (rows + 7) / 8;
    memset(out, 0, len);
    for (size_t r = 0; r < rows; r++) {
        if (src[r] < 0)
            continue;
        out[r / 8] |= (uint8_t)(1u << (r % 8));
        uint64_t d = r - (uint64_t)src[r] - 1;
        do {
            out[len++] = (uint8_t)((d & 0x7f) | (d >= 0x80 ? 0x80 : 0));
            d >>= 7;
        } while (d);
    }
    return m > 0 && len * (es == 1 ? 2 : 1) < (size_t)m * C ? len : 0;
}

typedef struct {
    seqkv_dtype dt;
    const uint8_t *in; /* the coded rows, back to back */
    size_t rows, C;    /* coded rows */
    size_t all_rows;   /* rows of the stream */
    const uint8_t *refs;
    size_t refs_len;
    uint64_t checksum; /* of all rows */
} fast_job;

/* Tables, words and raw bytes of the coded rows, then the stream. */
static int fast_encode_rows(const fast_job *j, uint8_t *dst, size_t cap, size_t *len)
{
    const uint8_t *in = j->in;
    const size_t n = j->rows * j->C;
    const uint32_t C = (uint32_t)j->C;
    const int wide = skv_dtype_size(j->dt) == 2;

    uint32_t *hist = skv_calloc((size_t)C * 256, sizeof *hist);
    uint8_t *words = skv_malloc(2 * n + 2);
    uint8_t *map = skv_malloc(C);
    fast_tab *tabs = skv_malloc(FAST_TABLES_MAX * sizeof *tabs);
    int rc = SKV_OK;
    if (!hist || !words || !map || !tabs) {
        rc = skv_error(SKV_ERR_NOMEM, "fast encode");
        goto out;
    }
    for (size_t r = 0, i = 0; r < j->rows; r++)
        for (uint32_t c = 0; c < C; c++, i++) {
            uint32_t x = fast_load(in, i, wide);
            hist[(size_t)c * 256 + (wide ? fast_sym16(x) : fast_sym8(x))]++;
        }
    uint32_t T = 1;
    if ((rc = skv__fast_choose(hist, C, map, tabs, &T)))
        goto out;

    /* rANS, last scalar first: words are written downwards from the end,
     * so the decoder reads them forwards in lane order. */
    uint32_t x[FAST_LANES];
    for (int l = 0; l < FAST_LANES; l++)
        x[l] = FAST_L;
    uint8_t *wp = words + 2 * n;
    uint32_t c = (uint32_t)((n - 1) % C);
    for (size_t i = n; i-- > 0;) {
        const uint32_t v = fast_load(in, i, wide), s = wide ? fast_sym16(v) : fast_sym8(v);
        const fast_tab *t = &tabs[map[c]];
        const uint32_t f = t->f[s], l = (uint32_t)(i % FAST_LANES);
        uint32_t st = x[l];
        if ((uint64_t)st >= (uint64_t)f << (32 - FAST_PROB)) {
            wp -= 2;
            skv_store16_le(wp, (uint16_t)st);
            st >>= 16;
        }
        x[l] = ((st / f) << FAST_PROB) + st % f + t->cum[s];
        c = c ? c - 1 : C - 1;
    }
    const size_t wlen = (size_t)(words + 2 * n - wp);

    size_t tab_len = T > 1 ? C : 0;
    for (uint32_t t = 0; t < T; t++)
        tab_len += skv__fast_tab_size(&tabs[t]);
    const size_t word_len = 4 * FAST_LANES + wlen, raw_len = wide ? n : 0;
    const size_t total = SKV_FAST_HEADER + tab_len + j->refs_len + word_len + raw_len;
    if (total > cap) {
        rc = skv_error(SKV_ERR_TOO_LARGE, "fast encode: %zu bytes, room for %zu", total, cap);
        goto out;
    }
    uint8_t *p = dst;
    skv_store32_le(p, SKV_FAST_MAGIC);
    p[4] = j->refs_len ? 2 : 1; /* version 1 when no row is a reference */
    p[5] = (uint8_t)j->dt;
    p[6] = FAST_LANES;
    p[7] = (uint8_t)T;
    skv_store32_le(p + 8, (uint32_t)j->all_rows);
    skv_store32_le(p + 12, C);
    skv_store32_le(p + 16, (uint32_t)tab_len);
    skv_store32_le(p + 20, (uint32_t)word_len);
    skv_store32_le(p + 24, (uint32_t)raw_len);
    skv_store32_le(p + 28, (uint32_t)j->refs_len);
    skv_store64_le(p + 32, j->checksum);
    p += SKV_FAST_HEADER;
    if (T > 1) {
        memcpy(p, map, C);
        p += C;
    }
    for (uint32_t t = 0; t < T; t++)
        p = skv__fast_tab_write(&tabs[t], p);
    if (j->refs_len) {
        memcpy(p, j->refs, j->refs_len);
        p += j->refs_len;
    }
    for (int l = 0; l < FAST_LANES; l++, p += 4)
        skv_store32_le(p, x[l]);
    memcpy(p, wp, wlen);
    p += wlen;
    if (wide)
        for (size_t i = 0; i < n; i++)
            *p++ = (uint8_t)fast_raw16(skv_load16_le(in + 2 * i));
    *len = total;
out:
    skv_free(hist);
    skv_free(words);
    skv_free(map);
    skv_free(tabs);
    return rc;
}

int skv_fast_encode(seqkv_dtype dt, const void *src, size_t rows, size_t channels, uint8_t *dst,
                    size_t cap, size_t *len)
{
    if (!fast_dtype_ok(dt))
        return skv_error(SKV_ERR_ARG, "the fast level codes bf16, f16 and f8e4m3 only, not %s",
                         skv_dtype_name(dt));
    if (!src || !dst || !len || !rows || !channels)
        return skv_error(SKV_ERR_ARG, "fast encode: no data");
    if (!skv_fast_bound(dt, rows, channels))
        return skv_error(SKV_ERR_TOO_LARGE, "fast encode: %zu x %zu scalars", rows, channels);
    const size_t es = skv_dtype_size(dt), rb = channels * es;
    fast_job j = {dt, src, rows, channels, rows, NULL, 0, XXH3_64bits(src, rows * rb)};
    int64_t *from = skv_malloc(rows * sizeof *from);
    uint8_t *refs = skv_malloc((rows + 7) / 8 + 10 * rows), *coded = NULL;
    int64_t m = from && refs ? fast_rows_match(src, rows, rb, from) : -1;
    if (m < 0) {
        skv_free(from);
        skv_free(refs);
        return skv_error(SKV_ERR_NOMEM, "fast encode");
    }
    j.refs_len = fast_refs_write(from, rows, m, channels, es, refs);
    if (j.refs_len) {
        /* the rows that are not references, back to back */
        if (!(coded = skv_malloc((rows - (size_t)m) * rb))) {
            skv_free(from);
            skv_free(refs);
            return skv_error(SKV_ERR_NOMEM, "fast encode");
        }
        size_t k = 0;
        for (size_t r = 0; r < rows; r++)
            if (from[r] < 0)
                memcpy(coded + k++ * rb, (const uint8_t *)src + r * rb, rb);
        j.in = coded;
        j.rows = k;
        j.refs = refs;
    }
    int rc = fast_encode_rows(&j, dst, cap, len);
    skv_free(from);
    skv_free(refs);
    skv_free(coded);
    return rc;
}
