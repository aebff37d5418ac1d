/* A row's classes packed as version 2's AVX2 paths load them (skv_v2pack,
 * stream_int.h): from the row cache's classes (pack.c's skv__v2_pack), or
 * classified eight lanes at a time straight into the pack
 * (v2_pack_rows_body, inlined by the encoder and by the decoder's paired
 * run). */
#ifndef SKV_PACK_AVX2_H
#define SKV_PACK_AVX2_H

#include "classify_avx2.h"
#include "stream_int.h"
#ifdef SKV_HAVE_CLS8

/* Room in p for rows of n scalars; 0 when memory fails. */
static inline int v2_pack_room(skv_v2pack *p, size_t n)
{
    return n <= p->cap || skv__v2_pack_grow(p, n);
}

/* The bases p's offsets are taken from: m's table block (its indexes),
 * m's bucket values, the atoms' channels */
static void v2_pack_bases(const skv_cmodel *m, skv_v2pack *p, const skv_atoms *as)
{
    p->lbase = (const uint8_t *)m->tblock[0].lut;
    p->bbase = (const uint8_t *)m->bvblock;
    p->okall = 1;
    p->anystp = 0;
    p->vals = as ? as->vals : NULL;
    p->abase = as ? (const uint8_t *)as->ch : NULL;
}

/* Scalar j's first table in p (its channel's atoms', when it has any),
 * after its class's (p->lut, p->e4) */
static inline void v2_pack_atoms(skv_v2pack *p, const skv_atoms *as, size_t j, int ok)
{
    const skv_atom_ch *a = as && as->ch[j % as->nch].k ? &as->ch[j % as->nch] : NULL;
    p->ak[j] = a ? (int32_t)a->k : 0;
    p->aoff[j] = a ? (int32_t)(a->val - as->vals) : 0;
    p->lut1[j] = !ok ? 0 : a ? (int32_t)((const uint8_t *)a->tab.lut - p->abase) : p->lut[j];
    p->e41[j] = !ok ? 0 : a ? (uint64_t)(uintptr_t)a->tab.enc << 4 : p->e4[j];
}

/* v2_pack_rows_body's group of lanes j..j+7 into p (for the encoder: its
 * e4 too), its lanes' ok, STEP and widths folded into *okacc, *sacc, *bvall
 * (sknown: s's part already in p). Returns whether the group is all
 * BUCKET with its tables built and taken (p->gb). */
static inline __attribute__((target("avx2"), always_inline)) int
v2_pack_group(const skv_v8i *K, skv_cmodel *m, skv_v2pack *p, const float *mu, const float *s, size_t j,
              int sknown, const v2_pack_for user, __m256i *okacc, __m256i *sacc, __m256i *bvall)
{
    const int bready = p->bready;
    const uint8_t *tb = (const uint8_t *)m->tblock;
    const int *rdy = m->ready, *rdyb = m->ready + N_STEP_TABS + N_BUCKET_TABS;
    const __m256i zero = _mm256_setzero_si256(), one = _mm256_set1_epi32(1);
    __m256i isS, isB, ok, ix, kv, Gv, R;
    int allb;
    for (int tries = 0;; tries++) {
        skv_v8i flag, idx, key, G, Es, sub;
        if (sknown) {
            memcpy(&Es, p->ses + j, sizeof Es);
            memcpy(&sub, p->ssub + j, sizeof sub);
            memcpy(&G, p->sg + j, sizeof G);
        } else {
            cls8_s(K, s + j, &Es, &sub, &G);
            memcpy(p->ses + j, &Es, sizeof Es);
            memcpy(p->ssub + j, &sub, sizeof sub);
            memcpy(p->sg + j, &G, sizeof G);
            skv_v8i bo = (sub * 4 + K[K_NSTEP]) * (int)sizeof(skv_ftab);
            memcpy(p->sbo + j, &bo, sizeof bo);
        }
        cls8_mu(K, mu + j, Es, sub, G, &flag, &idx, &key, user == PACK_FOR_ENCODER ? CLS8_SPLIT : CLS8_SPLIT_ALLB);
        __m256i fl = (__m256i)flag;
        ix = (__m256i)idx, kv = (__m256i)key, Gv = (__m256i)G;
        isS = _mm256_cmpeq_epi32(fl, zero), isB = _mm256_cmpeq_epi32(fl, one);
        __m256i okc = _mm256_or_si256(isS, isB);
        ix = _mm256_and_si256(ix, okc);
        allb = bready && _mm256_movemask_ps(_mm256_castsi256_ps(isB)) == 0xff;
        if (allb) {
            /* every lane BUCKET (most groups at ctx), every BUCKET table
             * built: R is theirs, without the gather (which waits on the
             * classification: the pack's longest chain) */
            R = _mm256_set1_epi32(BUCKET_R);
            ok = isB;
        } else {
            R = _mm256_mask_i32gather_epi32(zero, rdy, ix, okc, 4); /* 0: not built */
            ok = _mm256_cmpgt_epi32(R, zero);
        }
        if (!sknown) { /* every lane's width (G comes from s alone, in range), built here */
            __m256i gi = _mm256_add_epi32(Gv, _mm256_set1_epi32(BVT_G0));
            __m256i rb = _mm256_i32gather_epi32(rdyb, gi, 4);
            unsigned nb = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(rb)) ^ 0xffu;
            if (nb) {
                int32_t gs[8];
                _mm256_storeu_si256((__m256i *)gs, Gv);
                for (; nb; nb &= nb - 1)
                    skv__build_bvt(m, gs[__builtin_ctz(nb)]);
                rb = _mm256_i32gather_epi32(rdyb, gi, 4);
            }
            *bvall = _mm256_and_si256(*bvall, rb);
            ok = _mm256_and_si256(ok, _mm256_or_si256(isS, rb));
        }
        unsigned miss = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_andnot_si256(ok, okc)));
        if (!miss || tries)
            break;
        for (; miss; miss &= miss - 1) { /* build what the lane needs, then again */
            int q = __builtin_ctz(miss);
            skv_fcls c;
            if (fclassify(m, &SKV__LAT_BF16, mu[j + q], s[j + q], &c) == SKV_OK && c.bucket)
                skv__build_bvt(m, c.G);
        }
    }
    __m256i off = _mm256_and_si256(_mm256_mullo_epi32(ix, _mm256_set1_epi32((int)sizeof(skv_ftab))), ok);
    R = _mm256_and_si256(R, ok);
    __m256i nn = _mm256_add_epi32(_mm256_add_epi32(R, R), _mm256_set1_epi32(2)); /* 2R + 2 symbols */
    /* STEP: key is c's bits, the base its signed ordinal */
    __m256i neg = _mm256_sub_epi32(zero, _mm256_and_si256(_mm256_srli_epi32(kv, 15), one));
    __m256i ord = _mm256_xor_si256(_mm256_and_si256(kv, _mm256_set1_epi32(0x7fff)), neg);
    __m256i base = _mm256_and_si256(_mm256_sub_epi32(_mm256_blendv_epi8(kv, ord, isS), R), ok);
    __m256i gi = _mm256_and_si256(_mm256_add_epi32(Gv, _mm256_set1_epi32(BVT_G0)), _mm256_andnot_si256(isS, ok));
    _mm256_storeu_si256((__m256i *)(p->lut + j), off);
    _mm256_storeu_si256((__m256i *)(p->bvt + j), _mm256_slli_epi32(gi, 10)); /* 2 * BVT_K * 4 bytes */
    _mm256_storeu_si256((__m256i *)(p->base + j), base);
    _mm256_storeu_si256((__m256i *)(p->g + j), Gv);
    _mm256_storeu_si256((__m256i *)(p->nesc + j), _mm256_sub_epi32(nn, one));
    _mm256_storeu_si256((__m256i *)(p->ok + j), ok);
    _mm256_storeu_si256((__m256i *)(p->stp + j), isS);
    *okacc = _mm256_and_si256(*okacc, ok);
    *sacc = _mm256_or_si256(*sacc, _mm256_and_si256(isS, ok));
    if (user == PACK_FOR_ENCODER) {
        const long long *eb = (const long long *)(const void *)(tb + offsetof(skv_ftab, enc));
        __m256i m0 = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(ok));
        __m256i m1 = _mm256_cvtepi32_epi64(_mm256_extracti128_si256(ok, 1));
        __m256i e0 = _mm256_mask_i32gather_epi64(zero, eb, _mm256_castsi256_si128(off), m0, 1);
        __m256i e1 = _mm256_mask_i32gather_epi64(zero, eb, _mm256_extracti128_si256(off, 1), m1, 1);
        _mm256_storeu_si256((__m256i *)(p->e4 + j), _mm256_slli_epi64(e0, 4));
        _mm256_storeu_si256((__m256i *)(p->e4 + j + 4), _mm256_slli_epi64(e1, 4));
    }
    return allb && _mm256_movemask_ps(_mm256_castsi256_ps(ok)) == 0xff;
}

/* v2_pack_group for the decoder's group of lanes j..j+7 when v2_pack_rows
 * packed it last as all BUCKET, under the same s, its tables built (gb):
 * its classes then differ in their phase alone, and of its arrays only
 * lut and base change. Returns 0, with nothing stored, when mu's group is
 * not all BUCKET by its exponent alone (cls8_mu's SPLIT 2). */
static inline __attribute__((target("avx2"), always_inline)) int v2_pack_group_b(const skv_v8i *K, skv_v2pack *p,
                                                                                  const float *mu, size_t j)
{
    skv_v8i mb, emu, Y, em, G, bo;
    cls8_y(K, mu + j, &mb, &emu, &Y, &em);
    memcpy(&G, p->sg + j, sizeof G);
    if (!cls8_allb(K, emu, G))
        return 0;
    /* cls8_bucket on such lanes: em - G is below -17 (emu < G + 133, and
     * G >= -123 from s's range), so every lane is in range, kb = G - em is
     * 18 or more, the bucket Y >> kb and the phase (Y >> (kb - 2)) & 3
     * (vpsravd's shifts past 31 give the sign, as 31 does) */
    const __m256i kb = (__m256i)(G - em), Yv = (__m256i)Y;
    __m256i bi = _mm256_srav_epi32(Yv, kb);
    __m256i ph = _mm256_and_si256(_mm256_srav_epi32(Yv, _mm256_sub_epi32(kb, _mm256_set1_epi32(2))),
                                  _mm256_set1_epi32(3));
    /* the index of phase ph of the width's classes: bo + ph * sizeof */
    const __m256i phoff = _mm256_setr_epi32(0, (int)sizeof(skv_ftab), 2 * (int)sizeof(skv_ftab),
                                            3 * (int)sizeof(skv_ftab), 0, 0, 0, 0);
    memcpy(&bo, p->sbo + j, sizeof bo);
    _mm256_storeu_si256((__m256i *)(p->lut + j), _mm256_add_epi32((__m256i)bo, _mm256_permutevar8x32_epi32(phoff, ph)));
    _mm256_storeu_si256((__m256i *)(p->base + j), _mm256_sub_epi32(bi, _mm256_set1_epi32(BUCKET_R)));
    p->nb++;
    return 1;
}

/* p holding the classes of the bf16 row mu[0..n), s[0..n) (n a multiple
 * of 8), classified eight lanes at a time (skv__cls8_avx2's arithmetic)
 * straight into the pack: rows that do not repeat (ctx's, with the row
 * cache off). Tables not built yet are built on the way; a lane the
 * arithmetic flags, or whose table cannot be built, is left to the other
 * paths (p->ok 0); for the encoder its e4 as well. 0 when memory fails. */
static inline __attribute__((target("avx2"), always_inline)) int
v2_pack_rows_body(skv_cmodel *m, skv_v2pack *p, const float *mu, const float *s, size_t n, const skv_atoms *as,
               const v2_pack_for user)
{
    if (n % 8 || (as && n % as->nch) || !v2_pack_room(p, n))
        return 0;
    v2_pack_bases(m, p, as);
    p->row = NULL, p->gen = 0, p->n = n, p->as = as;
    if (!p->bready) { /* (tables once built stay: checked until they all are) */
        p->bready = 1;
        for (int t = N_STEP_TABS; t < N_STEP_TABS + N_BUCKET_TABS; t++)
            p->bready &= __atomic_load_n(&m->ready[t], __ATOMIC_ACQUIRE) == BUCKET_R;
    }
    const skv_v8i *K = cls8_k;
    __asm__("" : "+r"(K));
    __m256i okacc = _mm256_set1_epi32(-1), sacc = _mm256_setzero_si256();
    /* the bucket values' widths depend on s alone: checked again only
     * when s is not the row's of the call before (ctx: a seen-class's) */
    int sknown = p->sn == n;
    for (size_t j = 0; sknown && j < n; j += 8) /* (memcmp's bits, without its call) */
        sknown = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(
                     _mm256_loadu_si256((const __m256i *)(p->slast + j)), _mm256_loadu_si256((const __m256i *)(s + j))))) == 0xff;
    __m256i bvall = _mm256_set1_epi32(-1);
    /* the decoder's groups packed all BUCKET last time under this s */
    const int fastb = sknown && !as && user == PACK_FOR_DECODER;
    for (size_t j = 0; j < n; j += 8) {
        if (fastb && p->gb[j / 8] && v2_pack_group_b(K, p, mu, j))
            continue;
        int gb = v2_pack_group(K, m, p, mu, s, j, sknown, user, &okacc, &sacc, &bvall);
        if (user == PACK_FOR_DECODER)
            p->gb[j / 8] = (uint8_t)gb;
        for (int q = 0; as && q < 8; q++)
            v2_pack_atoms(p, as, j + (size_t)q, p->ok[j + q] != 0);
    }
    p->okall = _mm256_movemask_ps(_mm256_castsi256_ps(okacc)) == 0xff;
    p->anystp = _mm256_movemask_ps(_mm256_castsi256_ps(sacc)) != 0;
    if (!sknown && _mm256_movemask_ps(_mm256_castsi256_ps(bvall)) == 0xff) {
        /* every lane's widths checked: the next call with this s may skip it */
        memcpy(p->slast, s, n * sizeof *s);
        p->sn = n;
    }
    return 1;
}

#endif
#endif
