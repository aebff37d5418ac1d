/* The packs of version 2's AVX2 paths (pack_avx2.h): their memory, a row
 * from the row cache packed, and the row classified into the pack in its
 * AVX2 and AVX-512 builds. */
#include "pack_avx2.h"

#ifdef SKV_HAVE_CLS8
/* v2_pack_room when p has less room than n */
int skv__v2_pack_grow(skv_v2pack *p, size_t n)
{
    size_t per = 2 * sizeof(uint64_t) + 15 * sizeof(int32_t);
    void *mem = skv_malloc(n * per + n / 8 + 64);
    if (!mem)
        return 0;
    skv_free(p->mem);
    p->mem = mem;
    p->cap = n;
    p->sn = 0; /* (slast is new) */
    p->e4 = mem;
    p->e41 = p->e4 + n;
    int32_t **arr[] = {&p->lut, &p->bvt, &p->base, &p->g,   &p->nesc, &p->ok,  &p->stp,
                       &p->lut1, &p->ak, &p->aoff, &p->ses, &p->ssub, &p->sg, &p->sbo};
    int32_t *q = (int32_t *)(void *)(p->e41 + n);
    for (size_t k = 0; k < sizeof arr / sizeof *arr; k++, q += n)
        *arr[k] = q;
    p->slast = (float *)(void *)q; /* 14 arrays of int32_t and this one: per above */
    p->gb = (uint8_t *)(void *)(p->slast + n);
    return 1;
}

/* p holding row (n scalars, an array of the row cache rc) as it is now:
 * packed unless it already is; 0 when memory fails. The bucket values
 * of the row's widths are built here. */
int skv__v2_pack(skv_cmodel *m, const skv_rcache *rc, skv_v2pack *p, const skv_fcls *row, size_t n,
                   const skv_atoms *as)
{
    if (as && n % as->nch) /* (its dtype is the model's: begin and put_room check) */
        return 0;
    uint32_t gen = 0;
    for (int k = 0; k < RCACHE_SLOTS; k++)
        if (rc->cls[k] == row) {
            if (p->row == row && p->n == n && p->gen == rc->gen[k] && rc->n[k] == n && p->as == as)
                return 1;
            gen = rc->gen[k];
        }
    if (!v2_pack_room(p, n))
        return 0;
    v2_pack_bases(m, p, as);
    p->sn = 0; /* (v2_pack_rows's groups of gb are overwritten) */
    for (size_t j = 0; j < n; j++) {
        const skv_fcls *c = &row[j];
        int ok = c->tab >= m->tblock && c->tab < m->tblock + N_STEP_TABS + N_BUCKET_TABS &&
                 c->tab->enc && c->base > -(1 << 30) && c->base < (1 << 30);
        if (c->bucket && ok && __atomic_load_n(&m->bvt[c->G + BVT_G0], __ATOMIC_ACQUIRE) == skv__bvt_none)
            skv__build_bvt(m, c->G);
        ok = ok && (!c->bucket || __atomic_load_n(&m->bvt[c->G + BVT_G0], __ATOMIC_ACQUIRE) != skv__bvt_none);
        const int32_t lo = ok ? (int32_t)((c->tab - m->tblock) * (ptrdiff_t)sizeof(skv_ftab)) : 0;
        p->ok[j] = ok ? -1 : 0;
        p->okall &= ok;
        p->stp[j] = c->bucket ? 0 : -1;
        p->anystp |= !c->bucket;
        p->lut[j] = lo;
        p->bvt[j] = ok && c->bucket ? (c->G + BVT_G0) * 2 * BVT_K * 4 : 0;
        p->e4[j] = ok ? (uint64_t)(uintptr_t)c->tab->enc << 4 : 0;
        p->base[j] = ok ? (int32_t)c->base : 0;
        p->g[j] = c->G;
        p->nesc[j] = (int32_t)c->nesc;
        v2_pack_atoms(p, as, j, ok);
    }
    p->row = row;
    p->n = n;
    p->gen = gen;
    p->as = as;
    return 1;
}

/* The body built for AVX2 and for AVX-512VL, each for both users */
static __attribute__((target("avx2"))) int v2_pack_rows_avx2(skv_cmodel *m, skv_v2pack *p, const float *mu,
                                                           const float *s, size_t n, const skv_atoms *as,
                                                           v2_pack_for user)
{
    return user == PACK_FOR_ENCODER ? v2_pack_rows_body(m, p, mu, s, n, as, PACK_FOR_ENCODER)
                                    : v2_pack_rows_body(m, p, mu, s, n, as, PACK_FOR_DECODER);
}

static __attribute__((target(T512))) int v2_pack_rows_avx512(skv_cmodel *m, skv_v2pack *p, const float *mu,
                                                           const float *s, size_t n, const skv_atoms *as,
                                                           v2_pack_for user)
{
    return user == PACK_FOR_ENCODER ? v2_pack_rows_body(m, p, mu, s, n, as, PACK_FOR_ENCODER)
                                    : v2_pack_rows_body(m, p, mu, s, n, as, PACK_FOR_DECODER);
}

int skv__v2_pack_rows(skv_cmodel *m, skv_v2pack *p, const float *mu, const float *s, size_t n,
                      const skv_atoms *as, v2_pack_for user)
{
    return cls_simd() == 3 ? v2_pack_rows_avx512(m, p, mu, s, n, as, user)
                           : v2_pack_rows_avx2(m, p, mu, s, n, as, user);
}
#endif
