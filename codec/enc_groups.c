/* The grouped layout's encoder (stream version 2): groups of eight
 * scalars on sixteen (or eight)
 * states in lane order, their table symbols sorted into rounds, their
 * plain bits in a raw bit stream (FORMAT.md). Whole groups of bf16 take
 * the AVX2 run (v2_put_run) on a packed row (pack.c); the others queue
 * the queue's operations a group at a time (enc_queue.c), sorted here. */
#include "pack_avx2.h"
#include "stream_int.h"

/* nb plain bits of v into version 2's raw bit stream */
static inline void v2_raw(skv_encoder *e, uint32_t v, int nb)
{
    uint8_t *p = e->raw2 + (e->rbits2 >> 3);
    uint64_t cur;
    memcpy(&cur, p, 8);
    cur |= (uint64_t)(v & (uint32_t)((1ull << nb) - 1u)) << (e->rbits2 & 7);
    memcpy(p, &cur, 8); /* little-endian hosts; see skv_load64_le elsewhere */
    e->rbits2 += (uint64_t)nb;
}

/* The m scalars of the group at g0, whose version 1 operations are
 * ops[0..nops), sorted into version 2's order: the table symbols in
 * rounds, each on its scalar's state (the first of each scalar: the atom
 * symbol, or the class symbol; then the second of those that have one:
 * the class symbol after an atom "none", a zero level, a p_emp byte;
 * then the third), the plain bits to the raw bit stream in scalar order
 * (version 1's plans put nothing else after a first symbol). */
static void v2_sort_group(skv_encoder *e, uint32_t g0, uint32_t m)
{
    const skv_cmodel *cm = e->m;
    const skv_eop *z0 = cm->zero.enc, *z1 = z0 + cm->zero.n, *e0 = cm->pemp.enc, *e1 = e0 + cm->pemp.n;
    const skv_eop *t0 = skv__plain_tab, *t1 = skv__plain_tab + (2u << PLAIN_TAB_BITS);
    const skv_atoms *as = e->atoms;
    const uint64_t *ops = e->ops;
    size_t p = 0, nops = e->nops;
    uint64_t more[8][3];
    int nm[8];
    for (uint32_t j = 0; j < m; j++) {
        uint64_t lane = (uint64_t)v2_lane(g0 + j);
        uint64_t op = ops[p++];
        e->q2[e->nq2++] = op << 4 | lane;
        nm[j] = 0;
        if (as) {
            const skv_atom_ch *a = &as->ch[(g0 + j) % as->nch];
            if (a->k && op != (uint64_t)(uintptr_t)&a->tab.enc[a->k])
                continue; /* an atom: nothing follows */
            if (a->k) /* "none": the class symbol */
                more[j][nm[j]++] = ops[p++] << 4 | lane;
        }
        for (; p < nops; p++) {
            op = ops[p];
            const skv_eop *ep = (const skv_eop *)(uintptr_t)op;
            if (op & 1u) { /* wide plain bits */
                v2_raw(e, (uint32_t)(op >> 8), (int)((op >> 1) & 31u));
            } else if (ep >= t0 && ep < t1) {
                uint32_t idx = (uint32_t)(ep - t0);
                int nb = 31 - __builtin_clz(idx);
                v2_raw(e, idx - (1u << nb), nb);
            } else if ((ep >= z0 && ep < z1) || (ep >= e0 && ep < e1)) {
                more[j][nm[j]++] = op << 4 | lane;
            } else {
                break; /* the next scalar's first */
            }
        }
    }
    for (int k = 0; k < 3; k++) /* rounds 2 and up */
        for (uint32_t j = 0; j < m; j++)
            if (nm[j] > k)
                e->q2[e->nq2++] = more[j][k];
    e->nops = 0;
}

#ifdef SKV_HAVE_CLS8
/* Whole groups of bf16 scalars x (the row's scalars from i on, at stream
 * position e->n, a multiple of 8), up to ng, planned eight at a time on
 * AVX2 (enc_one's common case): each
 * group's table symbols into q2 in decoding order (version 2's rounds),
 * its plain bits into the raw bit stream at once; stops before a group
 * with a lane off that case. With V2_ATOMS, a lane on a channel with atoms
 * looks its value up among them (skv__atom_find): an atom codes its
 * symbol alone, "none" codes the class symbol in round 2 and a level in
 * round 3. Returns the groups done. */
static inline __attribute__((target("avx2"), always_inline)) size_t
v2_put_run_body(skv_encoder *e, const uint32_t *x, size_t i, size_t ng, const unsigned variant)
{
    const int with_atoms = (variant & V2_ATOMS) != 0, with_steps = (variant & V2_STEPS) != 0;
    const skv_v2pack *p = &e->pk2;
    const __m256i m7f = _mm256_set1_epi32(0x7f), one = _mm256_set1_epi32(1);
    const uint64_t zenc = (uint64_t)(uintptr_t)e->m->zero.enc << 4;
    size_t k = 0;
    for (; k < ng; k++) {
        size_t c0 = i + 8 * k;
        uint32_t at = e->n + 8 * (uint32_t)k;
        uint64_t l0 = (at >> 3 & 1u) * 8;
        __m256i xv = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + 8 * k)), _mm256_set1_epi32(0xffff));
        __m256i mag = _mm256_and_si256(xv, _mm256_set1_epi32(0x7fff)), sg = _mm256_srli_epi32(xv, 15);
        __m256i nb = _mm256_sub_epi32(_mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(p->g + c0)),
                                                       _mm256_set1_epi32(134)),
                                      _mm256_srli_epi32(mag, 7));
        __m256i normal = _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(0x80), mag),
                                             _mm256_cmpgt_epi32(_mm256_set1_epi32(0x7f80), mag));
        __m256i common = _mm256_and_si256(normal, _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_setzero_si256(), nb),
                                                                      _mm256_cmpgt_epi32(_mm256_set1_epi32(8), nb)));
        __m256i zb = _mm256_and_si256(normal, _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(8), nb),
                                                                  _mm256_cmpgt_epi32(_mm256_set1_epi32(8 + ZLEVELS), nb)));
        __m256i nbc = _mm256_and_si256(nb, _mm256_set1_epi32(7));
        __m256i j = _mm256_srlv_epi32(_mm256_or_si256(_mm256_and_si256(mag, m7f), _mm256_set1_epi32(0x80)), nbc);
        __m256i neg = _mm256_sub_epi32(_mm256_setzero_si256(), sg);
        __m256i kb = _mm256_blendv_epi8(_mm256_xor_si256(j, neg), neg, zb);
        /* STEP lanes: the signed ordinal, any finite value */
        __m256i stp = _mm256_setzero_si256();
        common = _mm256_or_si256(common, zb);
        if (with_steps) {
            stp = _mm256_loadu_si256((const __m256i *)(p->stp + c0));
            kb = _mm256_blendv_epi8(kb, _mm256_xor_si256(mag, neg), stp);
            common = _mm256_blendv_epi8(common, _mm256_cmpgt_epi32(_mm256_set1_epi32(0x7f80), mag), stp);
            zb = _mm256_andnot_si256(stp, zb);
        }
        __m256i sy = _mm256_sub_epi32(kb, _mm256_loadu_si256((const __m256i *)(p->base + c0)));
        __m256i nm1 = _mm256_sub_epi32(_mm256_loadu_si256((const __m256i *)(p->nesc + c0)), one);
        __m256i cok = _mm256_and_si256(common, _mm256_cmpeq_epi32(_mm256_min_epu32(sy, nm1), sy));
        __m256i hit = _mm256_setzero_si256(), none = hit, r1 = sy;
        if (with_atoms) {
            uint32_t xs[8], ai[8];
            _mm256_storeu_si256((__m256i *)xs, xv);
            for (int jj = 0; jj < 8; jj++)
                ai[jj] = p->ak[c0 + jj] ? skv__atom_find(&e->atoms->ch[(c0 + jj) % e->atoms->nch], xs[jj]) : 0;
            __m256i akv = _mm256_loadu_si256((const __m256i *)(p->ak + c0));
            __m256i aiv = _mm256_loadu_si256((const __m256i *)ai);
            hit = _mm256_cmpgt_epi32(akv, aiv);
            none = _mm256_andnot_si256(hit, _mm256_cmpgt_epi32(akv, _mm256_setzero_si256()));
            r1 = _mm256_blendv_epi8(sy, aiv, _mm256_or_si256(hit, none));
            cok = _mm256_or_si256(cok, hit);
            zb = _mm256_andnot_si256(hit, zb);
        }
        __m256i ok = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(p->ok + c0)), cok);
        if (_mm256_movemask_ps(_mm256_castsi256_ps(ok)) != 0xff)
            break;
        __m256i nbv = _mm256_blendv_epi8(nbc, _mm256_set1_epi32(7), zb);
        if (with_steps)
            nbv = _mm256_andnot_si256(stp, nbv);
        if (with_atoms)
            nbv = _mm256_andnot_si256(hit, nbv);
        __m256i plain = _mm256_and_si256(mag, _mm256_sub_epi32(_mm256_sllv_epi32(one, nbv), one));
        const __m256i lane0 = _mm256_setr_epi64x((long long)l0, (long long)l0 + 1, (long long)l0 + 2,
                                                 (long long)l0 + 3); /* the group's states */
        uint64_t *qo = e->q2 + e->nq2;
        const uint64_t *e1 = with_atoms ? p->e41 : p->e4; /* round 1's tables */
        __m256i q0 = _mm256_add_epi64(_mm256_loadu_si256((const __m256i *)(e1 + c0)),
                                      _mm256_slli_epi64(_mm256_cvtepu32_epi64(_mm256_castsi256_si128(r1)), 8));
        __m256i q1 = _mm256_add_epi64(_mm256_loadu_si256((const __m256i *)(e1 + c0 + 4)),
                                      _mm256_slli_epi64(_mm256_cvtepu32_epi64(_mm256_extracti128_si256(r1, 1)), 8));
        _mm256_storeu_si256((__m256i *)qo, _mm256_add_epi64(q0, lane0));
        _mm256_storeu_si256((__m256i *)(qo + 4), _mm256_add_epi64(q1, _mm256_add_epi64(lane0, _mm256_set1_epi64x(4))));
        qo += 8;
        unsigned zmask = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(zb));
        unsigned nmask = with_atoms ? (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(none)) : 0;
        if (zmask | nmask) {
            uint32_t nbs[8], sys[8];
            _mm256_storeu_si256((__m256i *)nbs, nb);
            _mm256_storeu_si256((__m256i *)sys, sy);
            /* round 2: the class symbols after "none", the levels of the
             * other lanes at zero; round 3: the levels after "none" */
            for (unsigned m = zmask | nmask; m; m &= m - 1) {
                unsigned jj = (unsigned)__builtin_ctz(m);
                *qo++ = (nmask >> jj & 1u ? p->e4[c0 + jj] + ((uint64_t)sys[jj] << 8)
                                          : zenc + ((uint64_t)(nbs[jj] - 8) << 8)) | (l0 + jj);
            }
            for (unsigned m = zmask & nmask; m; m &= m - 1) {
                unsigned jj = (unsigned)__builtin_ctz(m);
                *qo++ = (zenc + ((uint64_t)(nbs[jj] - 8) << 8)) | (l0 + jj);
            }
        }
        e->nq2 = (size_t)(qo - e->q2);
        /* plain bits: lane j's at the sum of lanes 0..j-1's, as one word */
        __m256i ps = _mm256_add_epi32(nbv, _mm256_slli_si256(nbv, 4));
        ps = _mm256_add_epi32(ps, _mm256_slli_si256(ps, 8));
        ps = _mm256_add_epi32(ps, _mm256_blend_epi32(_mm256_setzero_si256(),
                                                     _mm256_permutevar8x32_epi32(ps, _mm256_set1_epi32(3)), 0xf0));
        __m256i atb = _mm256_sub_epi32(ps, nbv);
        __m256i w0 = _mm256_sllv_epi64(_mm256_cvtepu32_epi64(_mm256_castsi256_si128(plain)),
                                       _mm256_cvtepu32_epi64(_mm256_castsi256_si128(atb)));
        __m256i w1 = _mm256_sllv_epi64(_mm256_cvtepu32_epi64(_mm256_extracti128_si256(plain, 1)),
                                       _mm256_cvtepu32_epi64(_mm256_extracti128_si256(atb, 1)));
        __m256i wo = _mm256_or_si256(w0, w1);
        __m128i h = _mm_or_si128(_mm256_castsi256_si128(wo), _mm256_extracti128_si256(wo, 1));
        uint64_t bits = (uint64_t)_mm_cvtsi128_si64(_mm_or_si128(h, _mm_unpackhi_epi64(h, h))), cur;
        uint8_t *rp = e->raw2 + (e->rbits2 >> 3);
        memcpy(&cur, rp, 8);
        cur |= bits << (e->rbits2 & 7);
        memcpy(rp, &cur, 8);
        e->rbits2 += (uint32_t)_mm256_extract_epi32(ps, 7);
        /* the checksum lanes */
        uint32_t *acc = e->acc + l0;
        __m256i A = _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)acc), xv);
        A = _mm256_mullo_epi32(_mm256_xor_si256(A, _mm256_srli_epi32(A, 15)), _mm256_set1_epi32((int)0x9e3779b1));
        _mm256_storeu_si256((__m256i *)acc, A);
    }
    e->n += 8 * (uint32_t)k;
    return k;
}

static __attribute__((target("avx2"))) size_t v2_put_run(skv_encoder *e, const uint32_t *x, size_t i,
                                                        size_t ng)
{
    if (e->pk2.anystp)
        return e->pk2.as ? v2_put_run_body(e, x, i, ng, V2_ATOMS | V2_STEPS) : v2_put_run_body(e, x, i, ng, V2_STEPS);
    return e->pk2.as ? v2_put_run_body(e, x, i, ng, V2_ATOMS) : v2_put_run_body(e, x, i, ng, 0);
}
#endif

/* Version 2: whole groups that start on a group and whose row the row
 * cache holds go by v2_put_run (bf16, AVX2, no atoms, streams without
 * their ideal cost); the rest queue version 1's operations (the same
 * paths), a group at a time, sorted by v2_sort_group when the group is
 * whole. The checksum lanes are summed as the scalars come. */
int skv__enc_groups_put(skv_encoder *e, const uint32_t *x, const float *mu, const float *s, size_t n,
                    const skv_fcls *given)
{
    const skv_lat *L = &e->m->lat;
    const uint32_t mask = L->nbits == 32 ? 0xffffffffu : ((1u << L->nbits) - 1u);
    const skv_fcls *row = given;
    int fast = 0;
#ifdef SKV_HAVE_CLS8
    if (L->dt == SEQKV_DT_BF16 && !e->ideal_now && n >= 8 && cls_simd() >= 2 &&
        (!e->atoms || e->n % e->atoms->nch == 0)) {
        if (!row && rcache_on(&e->rc, n) && !(row = rcache_get(e->m, L, &e->rc, mu, s, n)))
            return skv_error(SKV_ERR_NOMEM, "codec table");
        fast = row ? skv__v2_pack(e->m, &e->rc, &e->pk2, row, n, e->atoms)
                   : skv__v2_pack_rows(e->m, &e->pk2, mu, s, n, e->atoms, PACK_FOR_ENCODER);
    }
#endif
    size_t i = 0;
    while (i < n) {
#ifdef SKV_HAVE_CLS8
        if (fast && e->n % 8 == 0 && n - i >= 8) {
            size_t done = v2_put_run(e, x + i, i, (n - i) / 8);
            i += 8 * done;
            if (done)
                continue;
        }
#endif
        uint32_t k = 8 - e->n % 8, at = e->n;
        if (k > n - i)
            k = (uint32_t)(n - i);
        int rc = skv__enc_queue_put(e, x + i, mu + i, s + i, k, row ? row + i : NULL);
        for (uint32_t j = 0; at + j < e->n; j++)
            e->acc[v2_lane(at + j)] = v2_acc(e->acc[v2_lane(at + j)], x[i + j] & mask);
        if (rc)
            return rc;
        i += k;
        if (e->n % 8 == 0)
            v2_sort_group(e, e->n - 8, 8);
    }
    return SKV_OK;
}

/* Version 2 (FORMAT.md): per group of eight scalars, the first operation
 * of each (a table symbol) in lane order, then each scalar's other table
 * symbols, lane after lane, on the scalar's state; the plain bits in a
 * raw bit stream, scalar after scalar, least significant bit first. The
 * table symbols are sorted into that order (an operation is its skv_eop
 * address shifted left by 4, the state in the low bits), then coded last
 * to first. */
int skv__enc_groups_finish(skv_encoder *e, uint8_t *dst, size_t cap, size_t *len)
{
    if (e->n % 8 && e->nops) /* the last group, not whole (once: finish may be called again) */
        v2_sort_group(e, e->n - e->n % 8, e->n % 8);
    size_t nq = e->nq2, nraw = (size_t)((e->rbits2 + 7) / 8);
    if (e->wcap < nq + 1) {
        uint16_t *w = skv_realloc(e->words, (nq + 1) * sizeof *w);
        if (!w)
            return skv_error(SKV_ERR_NOMEM, "encoder words");
        e->words = w;
        e->wcap = nq + 1;
    }
    const uint64_t *q = e->q2;
    const uint8_t *raw = e->raw2;
    /* lane l of the queue (v2_lane) is state l mod states */
    const int ns = e->states;
    const uint64_t smask = (uint64_t)ns - 1;
    uint32_t x[SKV_V2_STATES];
    for (int l = 0; l < SKV_V2_STATES; l++)
        x[l] = RANS_L;
    uint16_t *top = e->words + nq;
    ptrdiff_t nn = 0;
    for (size_t k = nq; k-- > 0;)
        enc_eop(&x[q[k] & smask], (const skv_eop *)(uintptr_t)(q[k] >> 4), 0, top, &nn);
    size_t nw = (size_t)-nn;
    const uint16_t *words = top + nn + 1;
    size_t payload = 4 * (size_t)ns + 2 * nw + nraw;
    size_t total = SKV_STREAM_HEADER + payload;
    int rc = SKV_OK;
    if (total > cap)
        rc = skv_error(SKV_ERR_TOO_LARGE, "stream needs %zu bytes, buffer has %zu", total, cap);
    else if (payload > 0xffffffffu)
        rc = skv_error(SKV_ERR_TOO_LARGE, "stream payload over 4 GiB");
    if (rc)
        return rc;
    uint64_t h = 0x243f6a8885a308d3ull;
    for (int l = 0; l < SKV_V2_STATES; l++)
        h = mix_in(h, e->acc[l]);
    uint8_t *o = dst;
    memset(o, 0, SKV_STREAM_HEADER);
    skv_store32_le(o, SKV_STREAM_MAGIC);
    skv_store16_le(o + 4, 2);
    o[6] = (uint8_t)e->m->lat.dt;
    o[7] = ns == 8; /* 0: sixteen states, 1: eight */
    skv_store32_le(o + 8, e->n);
    skv_store32_le(o + 12, (uint32_t)payload);
    skv_store32_le(o + 16, skv_stream_model_id(e->m, e->atoms));
    skv_store32_le(o + 20, (uint32_t)nraw);
    skv_store64_le(o + 24, final_checksum(h, e->n));
    memcpy(o + 32, e->calib, 16);
    o += SKV_STREAM_HEADER;
    for (int l = 0; l < ns; l++)
        skv_store32_le(o + 4 * l, x[l]);
    o += 4 * ns;
    for (size_t k = 0; k < nw; k++)
        skv_store16_le(o + 2 * k, words[k]);
    o += 2 * nw;
    if (nraw) /* an empty stream has no raw buffer */
        memcpy(o, raw, nraw);
    *len = total;
    return SKV_OK;
}
