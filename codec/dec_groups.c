/* The grouped layout's decoder (stream version 2): the reference group
 * (every read checked; any
 * CPU, any dtype) and the driver of a call's rows, which hands whole
 * groups to the AVX2 run (dec_groups_avx2.c) where it applies and the rest to
 * the reference group. */
#include "stream_int.h"


static uint32_t r2_sym(v2_reader *r, int lane, const skv_ftab *t)
{
    uint32_t x = r->x[lane], slot = x & 0xffffu, k = skv__find(t, slot);
    uint32_t v = (t->cum[k + 1] - t->cum[k]) * (x >> 16) + slot - t->cum[k];
    r->x[lane] = renorm_checked(v, &r->w, r->wend, &r->bad);
    return k;
}

/* nb (0..16) plain bits, least significant first */
static uint32_t r2_bits(v2_reader *r, int nb)
{
    if (r->rpos + (uint64_t)nb > r->rbits) {
        r->bad = 1;
        return 0;
    }
    uint32_t v = 0;
    for (int b = 0; b < nb; b++, r->rpos++)
        v |= (uint32_t)(r->rb[r->rpos >> 3] >> (r->rpos & 7) & 1u) << b;
    return v;
}

/* nb (0..32) plain bits, as rd_raw: the high 16 first */
static uint32_t r2_raw(v2_reader *r, int nb)
{
    uint32_t v = 0;
    if (nb > 16) {
        nb -= 16;
        v = r2_bits(r, 16) << nb;
    }
    return v | r2_bits(r, nb);
}

/* The table that follows a scalar of class c whose class symbol is sym
 * (the p_emp byte after the escape, the level after the bucket at zero),
 * or NULL */
static const skv_ftab *dec2_next(const skv_cmodel *m, const skv_fcls *c, uint32_t sym)
{
    if (sym == c->nesc)
        return &m->pemp;
    if (!c->bucket)
        return NULL;
    int64_t key = c->base + (int64_t)sym;
    return key == 0 || key == -1 ? &m->zero : NULL;
}

/* The scalar of class c whose class symbol is sym, and `next` the symbol
 * of the table dec2_next gave (dec_after's cases: the escape, a bucket
 * with its place, the bucket at zero with its level, a STEP ordinal; the
 * bucket ranges of the general path serve them all); its plain bits come
 * from the raw bit stream */
static uint32_t dec2_after(skv_decoder *d, v2_reader *r, const skv_fcls *c, uint32_t sym, uint32_t next)
{
    const skv_cmodel *m = d->m;
    const skv_lat *L = &m->lat;
    if (sym == c->nesc) {
        uint32_t lo = L->nbits > 8 ? r2_raw(r, L->nbits - 8) : 0;
        return (next << (L->nbits - 8)) | lo;
    }
    int64_t key = c->base + (int64_t)sym, neg = key >> 63;
    if (c->bucket) {
        uint64_t j = (uint64_t)(key ^ neg);
        uint32_t lo, hi;
        if (j > 0)
            fbucket_range(L, j, c->G, &lo, &hi);
        else
            fzero_range(L, c->G, (int)next, &lo, &hi);
        if (hi <= lo) {
            r->bad = 1;
            return 0;
        }
        uint32_t idx = r2_raw(r, fbits_for((uint64_t)hi - lo));
        if (idx >= hi - lo || lo + idx >= L->inf_mag) {
            r->bad = 1;
            return 0;
        }
        return (L->sign & (uint32_t)neg) | (lo + idx);
    }
    int64_t top = (int64_t)L->inf_mag - 1;
    if (key > top || key < -top - 1) {
        r->bad = 1;
        return 0;
    }
    return (uint32_t)(key ^ neg) | (L->sign & (uint32_t)neg);
}

/* The k (<= 8) scalars of the group at scalar `at`, of classes c, by the
 * reference path into x: the table symbols in rounds (each scalar's
 * first, then the second of those that have one, then the third), then
 * each scalar's value and plain bits, scalar after scalar */
void skv__dec_group_ref(skv_decoder *d, v2_reader *r, const skv_fcls *c, uint32_t at, uint32_t k, uint32_t *x)
{
    const skv_atoms *as = d->atoms;
    const skv_atom_ch *a[8];
    const skv_ftab *t[8]; /* each scalar's next table, NULL once it has none */
    uint32_t sym[8], next[8] = {0};
    int val[8]; /* an atom's value is known */
    for (uint32_t j = 0; j < k; j++) {
        a[j] = as && as->ch[(at + j) % as->nch].k ? &as->ch[(at + j) % as->nch] : NULL;
        t[j] = a[j] ? &a[j]->tab : c[j].tab;
    }
    /* round 1: the atom symbol or the class symbol */
    for (uint32_t j = 0; j < k; j++) {
        uint32_t s1 = r2_sym(r, v2_lane(at + j) & (int)(d->states - 1), t[j]);
        val[j] = a[j] && s1 < a[j]->k;
        if (val[j]) {
            x[j] = a[j]->val[s1];
            t[j] = NULL;
        } else if (a[j]) {
            t[j] = c[j].tab; /* "none": the class symbol follows */
        } else {
            sym[j] = s1;
            t[j] = dec2_next(d->m, &c[j], s1);
        }
    }
    /* rounds 2 and 3: the class symbol after "none"; a level or p_emp byte */
    for (int round = 2; round <= 3; round++)
        for (uint32_t j = 0; j < k; j++) {
            if (!t[j])
                continue;
            uint32_t s = r2_sym(r, v2_lane(at + j) & (int)(d->states - 1), t[j]);
            if (a[j] && round == 2) { /* after "none": the class symbol */
                sym[j] = s;
                t[j] = dec2_next(d->m, &c[j], s);
            } else {
                next[j] = s;
                t[j] = NULL;
            }
        }
    for (uint32_t j = 0; j < k; j++) {
        int lane = v2_lane(at + j);
        if (!val[j])
            x[j] = dec2_after(d, r, &c[j], sym[j], next[j]);
        d->acc[lane] = v2_acc(d->acc[lane], x[j]);
    }
}

/* rows rows of n scalars of version 2, each with the classes of mu, s (or
 * given), into x; after a row with a magnitude (bits under mag) above big
 * it stops. *done: the rows decoded. Set up once for all the rows (stat's
 * runs of rows with one prediction). */
int skv__dec_groups_rows(skv_decoder *d, const float *mu, const float *s, uint32_t *x, size_t n,
                     const skv_fcls *given, size_t rows, uint32_t mag, uint32_t big, size_t *done)
{
    *done = 0;
    if (n == 0 || rows == 0)
        return SKV_OK;
    if ((d->got & 7u) || ((n & 7u) && (rows > 1 || d->got + n != d->n)))
        return skv_error(SKV_ERR_ARG, "stream version 2: scalars %u..%zu do not make whole groups of 8",
                         d->got, d->got + n * rows);
    skv_cmodel *m = d->m;
    const skv_lat *L = &m->lat;
    v2_reader r = {d->x2, d->w, d->wend, d->rb, d->rpos, d->rbits, 0};
    /* the call's classes: the row cache (stat's rows repeat), else one by one */
    const skv_fcls *row = given;
    if (!row && rcache_on(&d->rc, n) && !(row = rcache_get(m, L, &d->rc, mu, s, n)))
        return skv_error(SKV_ERR_NOMEM, "codec table"); /* nothing decoded */
    int fast = 0;
#ifdef SKV_HAVE_CLS8
    /* the AVX2 path takes rows from the row cache, their classes packed
     * once, or classifies a row that does not repeat straight into the pack */
    if (d->fast2 && (!d->atoms || d->got % d->atoms->nch == 0))
        fast = row ? skv__v2_pack(d->m, &d->rc, &d->pk, row, n, d->atoms)
                   : skv__v2_pack_rows(d->m, &d->pk, mu, s, n, d->atoms, PACK_FOR_DECODER);
#endif
    int rc = SKV_OK;
    size_t i = 0, rw = 0;
#ifdef SKV_HAVE_CLS8
    if (fast && n % 8 == 0) { /* whole rows: v2_run runs across them */
        const size_t G = rows * (n / 8), gr = n / 8;
        size_t g = 0;
        int stop = 0;
        while (g < G && !r.bad && !stop) {
            size_t pi = (g % gr) * 8;
            g += skv__groups_avx2_run(d, &r, pi, d->got + (uint32_t)(8 * g), G - g, x + 8 * g, mag, big, &stop);
            if (g == G || r.bad || stop)
                break;
            pi = (g % gr) * 8;
            skv_fcls cl[8];
            for (int q = 0; q < 8 && !row && !rc; q++)
                rc = fclassify(m, L, mu[pi + q], s[pi + q], &cl[q]);
            if (rc)
                break;
            skv__dec_group_ref(d, &r, row ? row + pi : cl, d->got + (uint32_t)(8 * g), 8, x + 8 * g);
            g++;
            if (g % gr == 0 && !r.bad && big < mag && skv_any_above32(x + 8 * g - n, n, mag, big))
                stop = 1;
        }
        d->w = r.w;
        d->rpos = r.rpos;
        *done = 8 * (r.bad ? g - 1 : g) / n; /* on damage, the rows before its group */
        if (r.bad) {
            d->bad = 1;
            d->got += (uint32_t)(8 * g);
            return skv_error(SKV_ERR_CORRUPT, "stream: corrupted in the group of scalar %u", d->got - 8);
        }
        d->got += (uint32_t)(8 * g);
        if (rc) /* a table: nothing of group g was read */
            return skv_error(rc, "codec table");
        return SKV_OK;
    }
#endif
    for (; rw < rows && !r.bad && !rc; rw++) {
        uint32_t *xr = x + rw * n;
        const uint32_t at0 = d->got + (uint32_t)(rw * n);
        for (i = 0; i < n && !r.bad; i += 8) {
            uint32_t k = n - i < 8 ? (uint32_t)(n - i) : 8, at = at0 + (uint32_t)i;
            skv_fcls cl[8];
            const skv_fcls *c = row ? row + i : cl;
            for (uint32_t j = 0; j < k && !row && !rc; j++)
                rc = fclassify(m, L, mu[i + j], s[i + j], &cl[j]);
            if (rc)
                break;
#ifdef SKV_HAVE_CLS8
            if (fast && k == 8) {
                int stop = 0;
                size_t ng = skv__groups_avx2_run(d, &r, i, at, (n - i) / 8, xr + i, 0, 0, &stop);
                if (ng) {
                    i += 8 * ng - 8; /* the loop adds the last 8 */
                    continue;
                }
            }
#endif
            skv__dec_group_ref(d, &r, c, at, k, xr + i);
        }
        if (r.bad || rc)
            break;
        *done = rw + 1;
        if (big < mag && skv_any_above32(xr, n, mag, big)) {
            rw++;
            break;
        }
    }
    d->w = r.w;
    d->rpos = r.rpos;
    if (r.bad) {
        d->bad = 1;
        d->got += (uint32_t)(rw * n + i);
        return skv_error(SKV_ERR_CORRUPT, "stream: corrupted in the group of scalar %u", d->got - 8);
    }
    if (rc) { /* a table: nothing of this group was read */
        d->got += (uint32_t)(rw * n + i);
        return skv_error(rc, "codec table");
    }
    d->got += (uint32_t)(*done * n);
    return SKV_OK;
}
