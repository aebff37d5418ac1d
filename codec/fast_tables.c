/* The fast level's static tables: normalising a histogram to 12-bit
 * frequencies, choosing how many tables a stream carries and which
 * channels share one, and the tables' compact serial form (FORMAT.md,
 * "Fast streams"). Integer arithmetic only: the choice, and so the bytes,
 * are the same on every machine. */
#include <stdlib.h>
#include <string.h>

#include "fast_int.h"

void skv__fast_normalise(const uint32_t *h, uint64_t n, fast_tab *t)
{
    int32_t f[256];
    int64_t sum = 0;
    int big = 0;
    for (int s = 0; s < 256; s++) {
        f[s] = 0;
        if (h[s]) {
            uint64_t q = ((uint64_t)h[s] * FAST_M + n / 2) / n;
            f[s] = q ? (int32_t)q : 1;
        }
        sum += f[s];
        if (h[s] > h[big])
            big = s;
    }
    int64_t diff = (int64_t)FAST_M - sum;
    if (diff > 0)
        f[big] += (int32_t)diff;
    while (diff < 0) {
        /* take from the largest frequency (the cheapest bit to lose) */
        int m = 0;
        for (int s = 1; s < 256; s++)
            if (f[s] > f[m])
                m = s;
        int32_t take = f[m] - 1 < -diff ? f[m] - 1 : (int32_t)-diff;
        if (take > (f[m] >> 4) + 1)
            take = (f[m] >> 4) + 1;
        f[m] -= take;
        diff += take;
    }
    uint32_t c = 0;
    for (int s = 0; s < 256; s++) {
        t->f[s] = (uint16_t)f[s];
        t->cum[s] = (uint16_t)c;
        c += (uint32_t)f[s];
    }
    t->cum[256] = (uint16_t)c;
}

/* log2(f) in Q16 for 1 <= f <= 4096, by repeated squaring (exact integer
 * steps: no libm, the same value everywhere). */
static uint32_t log2_q16(uint32_t f)
{
    uint32_t k = 31u - (uint32_t)__builtin_clz(f), r = k << 16;
    uint64_t m = (uint64_t)f << (30 - k); /* in [2^30, 2^31) */
    for (int i = 15; i >= 0; i--) {
        m = (m * m) >> 30;
        if (m >= (1ull << 31)) {
            m >>= 1;
            r |= 1u << i;
        }
    }
    return r;
}

size_t skv__fast_tab_size(const fast_tab *t)
{
    int lo = 0, hi = 255;
    while (!t->f[lo])
        lo++;
    while (!t->f[hi])
        hi--;
    size_t z = 2;
    for (int s = lo; s <= hi; s++)
        z += t->f[s] < 128 ? 1 : 2;
    return z;
}

uint8_t *skv__fast_tab_write(const fast_tab *t, uint8_t *p)
{
    int lo = 0, hi = 255;
    while (!t->f[lo])
        lo++;
    while (!t->f[hi])
        hi--;
    *p++ = (uint8_t)lo;
    *p++ = (uint8_t)(hi - lo);
    for (int s = lo; s <= hi; s++) {
        uint32_t f = t->f[s];
        if (f < 128) {
            *p++ = (uint8_t)f;
        } else {
            *p++ = (uint8_t)(0x80u | (f >> 8));
            *p++ = (uint8_t)f;
        }
    }
    return p;
}

int skv__fast_tab_read(const uint8_t *p, const uint8_t *end, fast_tab *t, size_t *used)
{
    const uint8_t *q = p;
    if (end - q < 2)
        return skv_error(SKV_ERR_CORRUPT, "fast stream: table past the table area");
    uint32_t lo = q[0], cnt = (uint32_t)q[1] + 1u;
    q += 2;
    if (lo + cnt > 256)
        return skv_error(SKV_ERR_CORRUPT, "fast stream: table symbols past 255");
    memset(t->f, 0, sizeof t->f);
    uint32_t sum = 0;
    for (uint32_t s = lo; s < lo + cnt; s++) {
        if (q >= end)
            return skv_error(SKV_ERR_CORRUPT, "fast stream: table past the table area");
        uint32_t f = *q++;
        if (f & 0x80u) {
            if (q >= end)
                return skv_error(SKV_ERR_CORRUPT, "fast stream: table past the table area");
            f = (f & 0x7fu) << 8 | *q++;
            if (f < 128)
                return skv_error(SKV_ERR_CORRUPT, "fast stream: frequency not in its shortest form");
        }
        sum += f;
        if (sum > FAST_M)
            return skv_error(SKV_ERR_CORRUPT, "fast stream: frequencies above 4096");
        t->f[s] = (uint16_t)f;
    }
    if (sum != FAST_M || !t->f[lo] || !t->f[lo + cnt - 1])
        return skv_error(SKV_ERR_CORRUPT, "fast stream: table does not sum to 4096");
    uint32_t c = 0;
    for (int s = 0; s < 256; s++) {
        t->cum[s] = (uint16_t)c;
        c += t->f[s];
    }
    t->cum[256] = (uint16_t)c;
    *used = (size_t)(q - p);
    return SKV_OK;
}

typedef struct {
    uint64_t key;
    uint32_t c;
} chkey;

static int chkey_cmp(const void *a, const void *b)
{
    const chkey *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->c < y->c ? -1 : x->c > y->c;
}

/* Cost, in 1/65536 bits, of a group's histogram under its table. */
static uint64_t group_bits(const uint32_t *h, const fast_tab *t)
{
    uint64_t b = 0;
    for (int s = 0; s < 256; s++)
        if (h[s])
            b += (uint64_t)h[s] * ((uint64_t)FAST_PROB * 65536u - log2_q16(t->f[s]));
    return b;
}

/* Channels sorted by mean symbol (their scale); candidate table counts
 * 1, 2, 4, ... up to FAST_TABLES_MAX and C, each grouping consecutive
 * channels of that order; the cheapest in table bytes plus coded bits
 * wins (the smaller count on a tie). */
int skv__fast_choose(const uint32_t *hist, uint32_t C, uint8_t *map, fast_tab *tabs, uint32_t *T)
{
    chkey *ord = skv_malloc((size_t)C * sizeof *ord);
    uint32_t *gh = skv_malloc((size_t)FAST_TABLES_MAX * 256 * sizeof *gh);
    fast_tab *tt = skv_malloc((size_t)FAST_TABLES_MAX * sizeof *tt);
    uint8_t *tm = skv_malloc(C);
    if (!ord || !gh || !tt || !tm) {
        skv_free(ord);
        skv_free(gh);
        skv_free(tt);
        skv_free(tm);
        return skv_error(SKV_ERR_NOMEM, "fast tables");
    }
    for (uint32_t c = 0; c < C; c++) {
        uint64_t k = 0, n = 0;
        for (int s = 0; s < 256; s++) {
            k += (uint64_t)s * hist[(size_t)c * 256 + s];
            n += hist[(size_t)c * 256 + s];
        }
        ord[c].key = n ? (k << 16) / n : 0;
        ord[c].c = c;
    }
    qsort(ord, C, sizeof *ord, chkey_cmp);
    uint64_t best = UINT64_MAX;
    for (uint32_t g = 1; g <= FAST_TABLES_MAX && g <= C; g *= 2) {
        memset(gh, 0, (size_t)g * 256 * sizeof *gh);
        for (uint32_t r = 0; r < C; r++) {
            uint32_t grp = (uint32_t)(((uint64_t)r * g) / C), c = ord[r].c;
            tm[c] = (uint8_t)grp;
            for (int s = 0; s < 256; s++)
                gh[(size_t)grp * 256 + s] += hist[(size_t)c * 256 + s];
        }
        uint64_t cost = g > 1 ? (uint64_t)C * 8 * 65536 : 0;
        for (uint32_t t = 0; t < g; t++) {
            uint64_t n = 0;
            for (int s = 0; s < 256; s++)
                n += gh[(size_t)t * 256 + s];
            skv__fast_normalise(gh + (size_t)t * 256, n, &tt[t]);
            cost += (uint64_t)skv__fast_tab_size(&tt[t]) * 8 * 65536 + group_bits(gh + (size_t)t * 256, &tt[t]);
        }
        if (cost < best) {
            best = cost;
            *T = g;
            memcpy(map, tm, C);
            memcpy(tabs, tt, (size_t)g * sizeof *tt);
        }
    }
    skv_free(ord);
    skv_free(gh);
    skv_free(tt);
    skv_free(tm);
    return SKV_OK;
}
