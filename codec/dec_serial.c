/* The serial layout's decoder (stream version 1; frozen: no encoder
 * change may alter what it
 * reads): four interleaved states read in operation order, every scalar's
 * class from its prediction, the common BUCKET case through the bucket
 * values of its width (dec_run), the rest through dec_after. */
#include "stream_int.h"

/* The reader of a batch: s0 is the state of the next operation, s1..s3
 * the ones after it (a rotation replaces "op mod 4" indexing, so the
 * states stay in registers; the decoder keeps them in the same order).
 * Checked readers test every word read against the end; the scalars of a
 * batch for which the payload left holds SKV_MAX_OPS words each run
 * unchecked (an operation reads at most one). */
/* Whether a reader tests every word it reads against the end (the scalars
 * near a payload's end), or runs unchecked where the payload left cannot
 * run out (get_n_split) */
typedef enum { RD_UNCHECKED = 0, RD_CHECKED = 1 } rd_check;

typedef struct {
    uint32_t s0, s1, s2, s3;
    const uint8_t *w, *wend;
    int bad;
} v1_reader;

/* The reader's state to and from the decoder (batch boundaries, and the
 * out-of-line paths, which run on the decoder so that the hot loop keeps
 * its state in registers). */
SKV_ALWAYS_INLINE void rd_save(skv_decoder *d, const v1_reader *r)
{
    d->x[0] = r->s0;
    d->x[1] = r->s1;
    d->x[2] = r->s2;
    d->x[3] = r->s3;
    d->w = r->w;
    d->bad = r->bad;
}

SKV_ALWAYS_INLINE void rd_load(const skv_decoder *d, v1_reader *r)
{
    r->s0 = d->x[0];
    r->s1 = d->x[1];
    r->s2 = d->x[2];
    r->s3 = d->x[3];
    r->w = d->w;
    r->wend = d->wend;
    r->bad = d->bad;
}

SKV_ALWAYS_INLINE void rd_next(v1_reader *r, uint32_t v, const rd_check checked)
{
    if (checked) {
        v = renorm_checked(v, &r->w, r->wend, &r->bad);
    } else { /* branch-free (the test is a coin flip): a word is there to read either way */
        uint32_t nv = (v << 16) | skv_load16_le(r->w);
#if defined(__x86_64__) && defined(__GNUC__)
        /* one compare feeds both moves (GCC makes a 0/1 of it otherwise) */
        const uint8_t *wn = r->w + 2;
        __asm__("cmpl %[lim], %[v]\n\tcmovb %[nv], %[v]\n\tcmovb %[wn], %[w]"
                : [v] "+&r"(v), [w] "+r"(r->w)
                : [nv] "r"(nv), [wn] "r"(wn), [lim] "i"(RANS_L)
                : "cc");
#else
        uint32_t need = v < RANS_L;
        v = fsel(need, nv, v);
        r->w += 2 * need;
#endif
    }
    r->s0 = r->s1;
    r->s1 = r->s2;
    r->s2 = r->s3;
    r->s3 = v;
}

static __attribute__((noinline)) uint32_t find_multi(const skv_ftab *t, uint32_t slot, uint32_t k)
{
    while (t->cum[k + 1] <= slot)
        k++;
    return k;
}

SKV_ALWAYS_INLINE uint32_t rd_sym(v1_reader *r, const skv_ftab *t, const rd_check checked)
{
    uint32_t x = r->s0, slot = x & 0xffffu;
    const skv_lut *e = &t->lut[slot >> t->lsh];
    uint32_t k = e->k, start, end, bm1 = e->bm1, c2m1 = e->c2m1;
    /* Below cum[k + 2] the symbol is k or k + 1, in any run: always when
     * at most one more symbol starts inside it, and for about half the
     * operations of runs where several do */
    if (__builtin_expect(slot <= c2m1, 1)) {
        /* k or k + 1: a coin flip near the boundary, so conditional moves */
        uint32_t b = bm1 + 1, c2 = c2m1 + 1;
        start = e->start;
        end = b;
#if defined(__x86_64__) && defined(__GNUC__)
        /* slot > bm1 (CF of bm1 - slot): start = b, end = c2, k + 1 */
        __asm__("cmpl %[slot], %[bm1]\n\tcmovb %[b], %[start]\n\tcmovb %[c2], %[end]\n\t"
                "adcl $0, %[k]"
                : [start] "+&r"(start), [end] "+&r"(end), [k] "+&r"(k)
                : [b] "r"(b), [c2] "r"(c2), [bm1] "r"(bm1), [slot] "r"(slot)
                : "cc");
#else
        uint32_t up = slot > bm1;
        start = fsel(up, b, start);
        end = fsel(up, c2, end);
        k += up;
#endif
    } else {
        k = find_multi(t, slot, k + 2);
        start = t->cum[k];
        end = t->cum[k + 1];
    }
    rd_next(r, (end - start) * (x >> 16) + slot - start, checked);
    return k;
}

/* nb plain bits, 1 <= nb <= 16 */
SKV_ALWAYS_INLINE uint32_t rd_bits(v1_reader *r, int nb, const rd_check checked)
{
    uint32_t x = r->s0;
    rd_next(r, x >> nb, checked);
    return x & ((1u << nb) - 1u);
}

/* nb plain bits, 0 <= nb <= 32, high 16 first */
SKV_ALWAYS_INLINE uint32_t rd_raw(v1_reader *r, int nb, const rd_check checked)
{
    uint32_t v = 0;
    if (__builtin_expect(nb > 16, 0)) {
        nb -= 16;
        v = rd_bits(r, 16, checked) << nb;
    }
    if (nb > 0)
        v |= rd_bits(r, nb, checked);
    return v;
}

/* The escape: x's high byte under p_emp, the rest as plain bits. */
static __attribute__((noinline)) uint32_t dec_escape(skv_decoder *d)
{
    const skv_lat *L = &d->m->lat;
    v1_reader r;
    rd_load(d, &r);
    uint32_t hi = rd_sym(&r, &d->m->pemp, RD_CHECKED);
    uint32_t lo = L->nbits > 8 ? rd_raw(&r, L->nbits - 8, RD_CHECKED) : 0;
    rd_save(d, &r);
    return (hi << (L->nbits - 8)) | lo;
}

/* BUCKET mode off the common case (the zero bucket, buckets below one
 * lattice step or in subnormals, impossible buckets) */
static __attribute__((noinline)) uint32_t dec_bucket_slow(skv_decoder *d, const skv_fcls *c,
                                                          int64_t key, int lvl)
{
    const skv_lat *L = &d->m->lat;
    int64_t neg = key >> 63; /* bucket -1 - j holds -x for x in bucket j */
    uint32_t sign = L->sign & (uint32_t)neg, x = 0;
    uint64_t j = (uint64_t)(key ^ neg);
    uint32_t lo, hi;
    v1_reader r;
    rd_load(d, &r);
    if (j > 0) {
        fbucket_range(L, j, c->G, &lo, &hi);
    } else {
        if (lvl < 0) /* not read yet */
            lvl = (int)rd_sym(&r, &d->m->zero, RD_CHECKED);
        fzero_range(L, c->G, lvl, &lo, &hi);
    }
    if (hi <= lo) {
        r.bad = 1;
    } else {
        uint32_t idx = rd_raw(&r, fbits_for((uint64_t)hi - lo), RD_CHECKED);
        if (idx >= hi - lo || lo + idx >= L->inf_mag)
            r.bad = 1;
        else
            x = sign | (lo + idx);
    }
    rd_save(d, &r);
    return x;
}

/* One scalar of class c; the result counts when r->bad stays 0. The
 * common case mirrors enc_one: bucket j >= 1 with 2^nb lattice points
 * inside a normal binade, x = (exponent, j's low bits, nb plain bits). */
SKV_ALWAYS_INLINE uint32_t dec_after(skv_decoder *d, const skv_lat *L, v1_reader *r, const skv_fcls *c,
                                     uint32_t sym, const rd_check checked)
{
    int64_t key = c->base + (int64_t)sym;
    if (__builtin_expect(sym == c->nesc, 0)) {
        rd_save(d, r);
        uint32_t x = dec_escape(d);
        rd_load(d, r);
        return x;
    }
    if (c->bucket) {
        int64_t neg = key >> 63;
        uint64_t j = (uint64_t)(key ^ neg);
        /* 1 <= j < 2^(mbits + 1) (k <= mbits), exponent k + G normal */
        int k = 63 - __builtin_clzll(j | 1u), e = k + c->G, nb = L->mbits - k;
        uint32_t lo = ((uint32_t)(e + L->bias - 1) << L->mbits) + (uint32_t)(j << (nb & 31));
        if (__builtin_expect(j - 1u < (2ull << L->mbits) - 1u &&
                                 (unsigned)(e - lat_emin(L)) <= (unsigned)(lat_emax(L) - lat_emin(L)) &&
                                 (L->dt != SEQKV_DT_F8E4M3 || lo + (1u << nb) <= L->inf_mag),
                             1)) {
            uint32_t idx = 0;
            if (L->mbits > 16) /* f32: up to 23 bits, as 16 + the rest */
                idx = rd_raw(r, nb, checked);
            else if (__builtin_expect(nb > 0, 1))
                idx = rd_bits(r, nb, checked);
            return (L->sign & (uint32_t)neg) | (lo + idx);
        }
        int lvl = -1;
        if (j == 0) {
            /* the bucket at zero: level lvl is the binade [2^e, 2^(e+1)),
             * e = G - lvl - 1, of 2^mbits points when it is normal */
            lvl = (int)rd_sym(r, &d->m->zero, checked);
            e = c->G - lvl - 1;
            if (__builtin_expect(lvl < ZLEVELS && e >= lat_emin(L) &&
                                     e <= lat_emax(L) - (L->dt == SEQKV_DT_F8E4M3),
                                 1)) {
                uint32_t idx = rd_raw(r, L->mbits, checked);
                return (L->sign & (uint32_t)neg) | (((uint32_t)(e + L->bias) << L->mbits) + idx);
            }
        }
        rd_save(d, r);
        uint32_t x = dec_bucket_slow(d, c, key, lvl);
        rd_load(d, r);
        return x;
    }
    int64_t top = (int64_t)L->inf_mag - 1, neg = key >> 63;
    if (key > top || key < -top - 1) {
        r->bad = 1;
        return 0;
    }
    return (uint32_t)(key ^ neg) | (L->sign & (uint32_t)neg); /* the signed ordinal to bits */
}

SKV_ALWAYS_INLINE uint32_t dec_one(skv_decoder *d, const skv_lat *L, v1_reader *r, const skv_fcls *c,
                                   const rd_check checked)
{
    return dec_after(d, L, r, c, rd_sym(r, c->tab, checked), checked);
}

/* Unchecked decoding of the scalars cb[0..n) into out for the dtypes of
 * at most 16 mantissa bits, the hot loop with its reader in locals: a
 * common BUCKET scalar from the bucket values of its width (one load
 * where dec_after's closed form needs a bit scan and five checks on the
 * way to the plain bits), everything else through dec_after. Same
 * operations, same results as dec_one; returns the scalars done (all of
 * them unless r->bad). */
SKV_ALWAYS_INLINE size_t dec_run(skv_decoder *d, const skv_lat *L, v1_reader *r, const skv_fcls *cb,
                                 size_t n, uint32_t *out, uint64_t *hp)
{
    v1_reader st = {r->s0, r->s1, r->s2, r->s3, r->w, r->wend, 0};
    uint64_t h = *hp;
    const skv_fcls *c = cb, *cend = cb + n;
    const uint32_t **bvt = d->m->bvt + BVT_G0; /* indexed by G */
    uint32_t *o = out;
    for (; c < cend; c++) {
        uint32_t sym = rd_sym(&st, c->tab, RD_UNCHECKED), x;
        int64_t key = c->base + (int64_t)sym;
        uint32_t ent = 0;
        const uint32_t *vt = NULL;
        if (c->bucket) {
            /* skv__bvt_none is all 0: its entries take dec_after */
            vt = __atomic_load_n(&bvt[c->G], __ATOMIC_ACQUIRE);
            if (__builtin_expect((uint64_t)(key + BVT_K) < 2 * BVT_K, 1))
                ent = vt[key + BVT_K];
        }
        if (__builtin_expect((ent >> 24) != 0 && sym != 2 * BUCKET_R + 1, 1)) {
            x = (ent & 0xffffffu) + rd_bits(&st, (int)(ent >> 24), RD_UNCHECKED);
        } else {
            if (__builtin_expect(vt == skv__bvt_none, 0))
                skv__build_bvt(d->m, c->G); /* the next scalar of this width uses them */
            x = dec_after(d, L, &st, c, sym, RD_UNCHECKED);
            if (__builtin_expect(st.bad, 0)) {
                r->bad = 1;
                break;
            }
        }
        h = mix_in(h, x);
        *o++ = x;
    }
    r->s0 = st.s0, r->s1 = st.s1, r->s2 = st.s2, r->s3 = st.s3, r->w = st.w;
    *hp = h;
    return (size_t)(o - out);
}

SKV_ALWAYS_INLINE int get_n_impl(skv_decoder *d, const skv_lat *L, const float *mu, const float *s,
                                 uint32_t *out, size_t n, const rd_check checked, const skv_fcls *given)
{
    skv_cmodel *m = d->m;
    v1_reader r;
    rd_load(d, &r); /* d->bad is 0 here */
    uint64_t h = d->h;
    int rc = SKV_OK;
    size_t i = 0;
    skv_fcls cls[SKV_BLOCK];
    const skv_fcls *row = given;
    if (!row && rcache_on(&d->rc, n) && !(row = rcache_get(m, L, &d->rc, mu, s, n)))
        rc = SKV_ERR_NOMEM;
    while (i < n && !rc && !r.bad) {
        size_t nb = n - i < SKV_BLOCK ? n - i : SKV_BLOCK;
        const skv_fcls *cb = cls;
        if (row) { /* repeating rows: the whole row at once */
            cb = row + i;
            nb = n - i;
        } else if (!d->fc.off) { /* repeating (mu, s) */
            uint32_t hits = 0;
            for (size_t k = 0; k < nb; k++) {
                const skv_fcls *c = fcache_get(m, L, &d->fc, mu[i + k], s[i + k], &hits);
                if (__builtin_expect(!c, 0)) {
                    rc = SKV_ERR_NOMEM;
                    nb = k;
                    break;
                }
                cls[k] = *c;
            }
            fcache_count(&d->fc, (uint32_t)nb, hits);
        } else {
            rc = fclassify_block(m, L, mu + i, s + i, nb, cls, &nb);
        }
        if (!checked && L->mbits <= 16) {
            size_t got = dec_run(d, L, &r, cb, nb, out + i, &h);
            i += got;
            continue;
        }
        for (size_t k = 0; k < nb; k++, i++) {
            /* The next scalar's table operation will most likely use s2
             * (BUCKET: two operations now) or s1 (STEP: one), already
             * final: fetch its index entry while this one decodes. */
            if (k + 1 < nb)
                __builtin_prefetch(&cb[k + 1].tab->lut[((cb[k].bucket ? r.s2 : r.s1) & 0xffffu) >>
                                                       cb[k + 1].tab->lsh]);
            uint32_t x = dec_one(d, L, &r, &cb[k], checked);
            if (__builtin_expect(r.bad, 0))
                break;
            h = mix_in(h, x);
            out[i] = x;
        }
    }
    rd_save(d, &r);
    d->h = h;
    d->got += (uint32_t)i;
    if (r.bad)
        return skv_error(SKV_ERR_CORRUPT, "stream: corrupted at scalar %u", d->got);
    if (rc)
        return skv_error(rc, "codec table");
    return SKV_OK;
}

/* With atoms (put_n_atoms_impl): one scalar at a time, the channel's atom
 * symbol first. */
SKV_ALWAYS_INLINE int get_n_atoms_impl(skv_decoder *d, const skv_lat *L, const float *mu,
                                       const float *s, uint32_t *out, size_t n, const rd_check checked,
                                       const skv_fcls *given)
{
    skv_cmodel *m = d->m;
    const skv_atoms *as = d->atoms;
    v1_reader r;
    rd_load(d, &r);
    uint64_t h = d->h;
    int rc = SKV_OK;
    size_t i = 0;
    uint32_t ch = d->got % as->nch, hits = 0, looks = 0;
    const skv_fcls *row = given;
    if (!row && rcache_on(&d->rc, n) && !(row = rcache_get(m, L, &d->rc, mu, s, n))) {
        rd_save(d, &r);
        return skv_error(SKV_ERR_NOMEM, "codec table"); /* nothing consumed */
    }
    for (; i < n; i++) {
        const skv_atom_ch *a = &as->ch[ch];
        if (++ch == as->nch)
            ch = 0;
        uint32_t x;
        if (a->k) {
            uint32_t j = rd_sym(&r, &a->tab, checked);
            if (j < a->k) {
                if (__builtin_expect(r.bad, 0))
                    break;
                x = a->val[j];
                h = mix_in(h, x);
                out[i] = x;
                continue;
            }
        }
        skv_fcls cl;
        const skv_fcls *c = cls_one(m, L, row, &d->fc, i, mu, s, &cl, &hits, &looks);
        if (__builtin_expect(!c, 0)) {
            rc = SKV_ERR_NOMEM;
            break;
        }
        x = dec_one(d, L, &r, c, checked);
        if (__builtin_expect(r.bad, 0))
            break;
        h = mix_in(h, x);
        out[i] = x;
    }
    if (looks)
        fcache_count(&d->fc, looks, hits);
    rd_save(d, &r);
    d->h = h;
    d->got += (uint32_t)i;
    if (r.bad)
        return skv_error(SKV_ERR_CORRUPT, "stream: corrupted at scalar %u", d->got);
    if (rc) {
        d->bad = 1; /* the atom symbol of scalar i is consumed: no way back */
        return skv_error(rc, "codec table");
    }
    return SKV_OK;
}

/* get_n_split's row cache lookup for a row it splits: SKV_ERR_NOMEM (set)
 * when a table cannot be built */
static __attribute__((noinline)) int split_row(skv_decoder *d, const float *mu, const float *s,
                                               size_t n, const skv_fcls **row)
{
    if (rcache_on(&d->rc, n) && !(*row = rcache_get(d->m, &d->m->lat, &d->rc, mu, s, n)))
        return skv_error(SKV_ERR_NOMEM, "codec table");
    return SKV_OK;
}

/* The scalars that cannot reach the end of the payload (an operation reads
 * at most one word) run unchecked, the rest checked; given: the classes
 * of the row (NULL: found here). A row split in two (near a stream's end)
 * takes its classes from the row cache once, for both parts. */
SKV_ALWAYS_INLINE int get_n_split(skv_decoder *d, const skv_lat *L, const float *mu,
                                  const float *s, uint32_t *x, size_t n, const skv_fcls *given)
{
    size_t safe = (size_t)(d->wend - d->w) / (2 * SKV_MAX_OPS), fast = safe < n ? safe : n;
    if (__builtin_expect(!given && fast - 1 < n - 1, 0) && split_row(d, mu, s, n, &given))
        return SKV_ERR_NOMEM; /* nothing decoded */
    const skv_fcls *rest = given ? given + fast : NULL;
    int rc;
    if (d->atoms) {
        rc = fast ? get_n_atoms_impl(d, L, mu, s, x, fast, RD_UNCHECKED, given) : SKV_OK;
        if (!rc && fast < n)
            rc = get_n_atoms_impl(d, L, mu + fast, s + fast, x + fast, n - fast, RD_CHECKED, rest);
        return rc;
    }
    rc = fast ? get_n_impl(d, L, mu, s, x, fast, RD_UNCHECKED, given) : SKV_OK;
    if (!rc && fast < n)
        rc = get_n_impl(d, L, mu + fast, s + fast, x + fast, n - fast, RD_CHECKED, rest);
    return rc;
}

int skv__dec_serial_get(skv_decoder *d, const float *mu, const float *s, uint32_t *x, size_t n,
                    const skv_fcls *given)
{
    switch (d->m->lat.dt) {
    case SEQKV_DT_BF16: return get_n_split(d, &SKV__LAT_BF16, mu, s, x, n, given);
    case SEQKV_DT_F16: return get_n_split(d, &SKV__LAT_F16, mu, s, x, n, given);
    case SEQKV_DT_F8E4M3: return get_n_split(d, &SKV__LAT_F8, mu, s, x, n, given);
    default: return get_n_split(d, &SKV__LAT_F32, mu, s, x, n, given);
    }
}
