/*
 * sym.c - categorical symbols under static frequency tables, one rANS
 * state (FORMAT.md, "Symbol streams"). The lossy tier codes its indices
 * with it: each symbol names its own table, so one stream carries every
 * (layer, K|V, head, sub-vector) of a record in order.
 */
#include <string.h>

#include "skv_base.h"
#include "skv_codec.h"

#define SYM_M (1u << SKV_SYM_PREC)
#define SYM_L (1u << 23) /* the state's lower bound; bytes out and in */

struct skv_symtab {
    uint32_t n;
    uint16_t *freq; /* [n], each >= 1, summing to SYM_M */
    uint32_t *cum;  /* [n + 1] */
};

static int tab_alloc(uint32_t n, skv_symtab **out)
{
    if (n == 0 || n > SKV_SYM_MAX)
        return skv_error(SKV_ERR_ARG, "symbol table of %u symbols (1 to %u)", n, SKV_SYM_MAX);
    skv_symtab *t = skv_calloc(1, sizeof(*t));
    if (t) {
        t->n = n;
        t->freq = skv_malloc((size_t)n * sizeof(uint16_t));
        t->cum = skv_malloc(((size_t)n + 1) * sizeof(uint32_t));
    }
    if (!t || !t->freq || !t->cum) {
        skv_symtab_free(t);
        return skv_error(SKV_ERR_NOMEM, "symbol table of %u symbols", n);
    }
    *out = t;
    return SKV_OK;
}

static void tab_cum(skv_symtab *t)
{
    t->cum[0] = 0;
    for (uint32_t s = 0; s < t->n; s++)
        t->cum[s + 1] = t->cum[s] + t->freq[s];
}

int skv_symtab_build(const uint64_t *counts, uint32_t n, skv_symtab **out)
{
    skv_symtab *t;
    int rc = tab_alloc(n, &t);
    if (rc)
        return rc;
    /* Every symbol gets 1; the rest of M is shared in proportion to the
     * counts, by integer arithmetic only (largest remainders last). */
    uint64_t total = 0;
    for (uint32_t s = 0; s < n; s++)
        total += counts ? counts[s] : 1;
    if (total == 0)
        total = 1;
    const uint64_t spare = SYM_M - n;
    uint64_t given = 0;
    uint32_t big = 0;
    for (uint32_t s = 0; s < n; s++) {
        const uint64_t c = counts ? counts[s] : 1;
        uint64_t f = 1 + (total ? (c * spare) / total : 0);
        t->freq[s] = (uint16_t)f;
        given += f;
        if (t->freq[s] > t->freq[big])
            big = s;
    }
    /* Rounding left SYM_M - given (>= 0, < n) over: the largest takes it. */
    t->freq[big] = (uint16_t)(t->freq[big] + (SYM_M - given));
    tab_cum(t);
    *out = t;
    return SKV_OK;
}

int skv_symtab_from_freqs(const uint16_t *freq, uint32_t n, skv_symtab **out)
{
    uint64_t sum = 0;
    for (uint32_t s = 0; s < n; s++) {
        if (freq[s] == 0)
            return skv_error(SKV_ERR_CORRUPT, "symbol %u has frequency 0", s);
        sum += freq[s];
    }
    if (n == 0 || sum != SYM_M)
        return skv_error(SKV_ERR_CORRUPT, "symbol frequencies sum to %llu, not %u",
                         (unsigned long long)sum, SYM_M);
    skv_symtab *t;
    int rc = tab_alloc(n, &t);
    if (rc)
        return rc;
    memcpy(t->freq, freq, (size_t)n * sizeof(uint16_t));
    tab_cum(t);
    *out = t;
    return SKV_OK;
}

void skv_symtab_free(skv_symtab *t)
{
    if (!t)
        return;
    skv_free(t->freq);
    skv_free(t->cum);
    skv_free(t);
}

uint32_t skv_symtab_size(const skv_symtab *t) { return t->n; }
const uint16_t *skv_symtab_freqs(const skv_symtab *t) { return t->freq; }

double skv_symtab_bits(const skv_symtab *t, uint32_t s)
{
    return (double)SKV_SYM_PREC - skv_log((double)t->freq[s]) / 0.69314718055994530942;
}

size_t skv_sym_bound(size_t n) { return 8 + n * 2 + n / 8; }

int skv_sym_encode(const uint32_t *syms, const skv_symtab *const *tabs, size_t n, uint8_t *dst,
                   size_t cap, size_t *len)
{
    for (size_t i = 0; i < n; i++)
        if (syms[i] >= tabs[i]->n)
            return skv_error(SKV_ERR_ARG, "symbol %u at %zu outside its table of %u", syms[i], i,
                             tabs[i]->n);
    /* Bytes come out last symbol first; they are written from the end of
     * dst backwards, then moved to its front behind the final state. */
    if (cap < 4)
        return skv_error(SKV_ERR_TOO_LARGE, "symbol stream buffer of %zu bytes", cap);
    uint32_t x = SYM_L;
    size_t p = cap;
    for (size_t i = n; i-- > 0;) {
        const skv_symtab *t = tabs[i];
        const uint32_t f = t->freq[syms[i]], c = t->cum[syms[i]];
        const uint32_t xmax = ((SYM_L >> SKV_SYM_PREC) << 8) * f;
        while (x >= xmax) {
            if (p <= 4)
                return skv_error(SKV_ERR_TOO_LARGE, "symbol stream exceeds %zu bytes", cap);
            dst[--p] = (uint8_t)x;
            x >>= 8;
        }
        x = ((x / f) << SKV_SYM_PREC) + (x % f) + c;
    }
    const size_t body = cap - p;
    memmove(dst + 4, dst + p, body);
    skv_store32_le(dst, x);
    *len = 4 + body;
    return SKV_OK;
}

static uint32_t find_sym(const skv_symtab *t, uint32_t slot)
{
    uint32_t lo = 0, hi = t->n; /* cum[lo] <= slot < cum[hi] */
    while (hi - lo > 1) {
        const uint32_t mid = lo + (hi - lo) / 2;
        if (t->cum[mid] <= slot)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

int skv_symdec_begin(skv_symdec *d, const uint8_t *src, size_t len)
{
    if (len < 4)
        return skv_error(SKV_ERR_CORRUPT, "symbol stream of %zu bytes", len);
    d->src = src;
    d->len = len;
    d->pos = 4;
    d->x = skv_load32_le(src);
    if (d->x < SYM_L)
        return skv_error(SKV_ERR_CORRUPT, "symbol stream state out of range");
    return SKV_OK;
}

int skv_symdec_get(skv_symdec *d, const skv_symtab *t, uint32_t *sym)
{
    const uint32_t slot = d->x & (SYM_M - 1);
    const uint32_t s = find_sym(t, slot);
    uint32_t x = t->freq[s] * (d->x >> SKV_SYM_PREC) + slot - t->cum[s];
    while (x < SYM_L) {
        if (d->pos >= d->len)
            return skv_error(SKV_ERR_CORRUPT, "symbol stream ends early");
        x = (x << 8) | d->src[d->pos++];
    }
    d->x = x;
    *sym = s;
    return SKV_OK;
}

int skv_symdec_end(const skv_symdec *d)
{
    if (d->x != SYM_L || d->pos != d->len)
        return skv_error(SKV_ERR_CORRUPT, "symbol stream does not end where it should");
    return SKV_OK;
}

int skv_sym_decode(const uint8_t *src, size_t len, const skv_symtab *const *tabs, size_t n,
                   uint32_t *syms)
{
    skv_symdec d;
    int rc = skv_symdec_begin(&d, src, len);
    for (size_t i = 0; !rc && i < n; i++)
        rc = skv_symdec_get(&d, tabs[i], &syms[i]);
    return rc ? rc : skv_symdec_end(&d);
}
