/* The grouped layout's AVX2 decoder (stream version 2): a group of
 * eight bf16 scalars in the common
 * case (v2_group), runs of groups on one stream (v2_run) and on a
 * layer's K and V streams in turn (v2_run2), built once for AVX2 and once
 * for AVX-512VL from one body. */
#include <pthread.h>

#include "lanes.h"
#include "pack_avx2.h"
#include "stream_int.h"

#ifdef SKV_HAVE_CLS8
_Static_assert(SKV_CUM_PAD >= LANES_CUM_PAD, "the codec's tables have the entries lanes_search loads");
static pthread_once_t lanes_once = PTHREAD_ONCE_INIT;

/* Whether m's zero table is the one lanes_zero decodes in closed form */
int skv__groups_avx2_ok(const skv_cmodel *m)
{
    if (m->lat.dt != SEQKV_DT_BF16 || cls_simd() < 2)
        return 0;
    for (uint32_t t = 0; t <= ZLEVELS; t++)
        if (m->zero.cum[t] != (t == 0 ? 0 : t <= 16 ? 65528u - (1u << (16 - t)) : 65511u + t))
            return 0;
    pthread_once(&lanes_once, lanes_init);
    return 1;
}

/* lanes_search on the lanes of mb, each table found from its index's
 * offset (lutv: from p->abase on the lanes of ma, else p->lbase) */
static inline __attribute__((target("avx2"), always_inline)) void v2_search(const skv_v2pack *p, __m256i lutv, int ma,
                                                              __m256i slot, __m256i *st, __m256i *en,
                                                              __m256i *k, int mb)
{
    int32_t off[8];
    const uint32_t *cm[8] = {NULL};
    _mm256_storeu_si256((__m256i *)off, lutv);
    for (int m = mb; m; m &= m - 1) {
        int j = __builtin_ctz((unsigned)m);
        const uint8_t *b = (ma >> j & 1) ? p->abase : p->lbase;
        cm[j] = ((const skv_ftab *)(const void *)(b + off[j] - offsetof(skv_ftab, lut)))->cum;
    }
    lanes_search(slot, st, en, k, mb, cm);
}

/* The table symbol k of every lane from the tables whose indexes lie at
 * byte offsets lutv from p->lbase, or from p->abase on the lanes of ma
 * (a movemask; A the same lanes as a mask), and the states after it,
 * before their renormalisation (*nx); the lanes of act are searched when
 * their slot lies in a run where several symbols start */
static inline __attribute__((target("avx2,popcnt"), always_inline)) __m256i
v2_sym(const skv_v2pack *p, __m256i lutv, __m256i sh, __m256i X, int act, int ma, __m256i A, __m256i *nx)
{
    const __m256i m16 = _mm256_set1_epi32(0xffff), one = _mm256_set1_epi32(1);
    __m256i slot = _mm256_and_si256(X, m16);
    /* the run's entry (runs of 1 << sh slots: the table's lsh): skv_lut's
     * start | bm1 << 16 at +0, c2m1 | k << 16 at +4 */
    __m256i ix = _mm256_add_epi32(lutv, _mm256_slli_epi32(_mm256_srlv_epi32(slot, sh), 3));
    __m256i e0, e1;
    if (ma == 0 || ma == 0xff) {
        const uint8_t *tb = ma ? p->abase : p->lbase;
        e0 = _mm256_i32gather_epi32((const int *)(const void *)tb, ix, 1);
        e1 = _mm256_i32gather_epi32((const int *)(const void *)(tb + 4), ix, 1);
    } else { /* some lanes from each */
        const __m256i z = _mm256_setzero_si256(), L = _mm256_xor_si256(A, _mm256_set1_epi32(-1));
        e0 = _mm256_mask_i32gather_epi32(z, (const int *)(const void *)p->lbase, ix, L, 1);
        e1 = _mm256_mask_i32gather_epi32(z, (const int *)(const void *)(p->lbase + 4), ix, L, 1);
        e0 = _mm256_mask_i32gather_epi32(e0, (const int *)(const void *)p->abase, ix, A, 1);
        e1 = _mm256_mask_i32gather_epi32(e1, (const int *)(const void *)(p->abase + 4), ix, A, 1);
    }
    __m256i start = _mm256_and_si256(e0, m16), bm1 = _mm256_srli_epi32(e0, 16);
    __m256i c2m1 = _mm256_and_si256(e1, m16), k = _mm256_srli_epi32(e1, 16);
    __m256i up = _mm256_cmpgt_epi32(slot, bm1);
    __m256i b = _mm256_add_epi32(bm1, one);
    __m256i st = _mm256_blendv_epi8(start, b, up);
    __m256i en = _mm256_blendv_epi8(b, _mm256_add_epi32(c2m1, one), up);
    k = _mm256_sub_epi32(k, up);
    int mb = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(slot, c2m1))) & act;
    if (__builtin_expect(mb != 0, 0)) /* runs where several symbols start */
        v2_search(p, lutv, ma, slot, &st, &en, &k, mb);
    *nx = _mm256_add_epi32(_mm256_mullo_epi32(_mm256_sub_epi32(en, st), _mm256_srli_epi32(X, 16)),
                           _mm256_sub_epi32(slot, st));
    return k;
}

/* A STEP lane's value from its signed ordinal key (bf16 bits: sign and
 * magnitude) into *v; the lanes whose key is not finite ([-0x7f80,
 * 0x7f7f]) as the mask returned */
static inline __attribute__((target("avx2"), always_inline)) __m256i v2_step_value(__m256i key, __m256i *v)
{
    __m256i sn = _mm256_srai_epi32(key, 31);
    *v = _mm256_or_si256(_mm256_xor_si256(key, sn), _mm256_and_si256(sn, _mm256_set1_epi32(0x8000)));
    __m256i ko = _mm256_add_epi32(key, _mm256_set1_epi32(0x7f80));
    return _mm256_cmpeq_epi32(_mm256_min_epu32(ko, _mm256_set1_epi32(0xff00)), _mm256_set1_epi32(0xff00));
}

/* The lanes whose class symbol k is the bucket at zero (key 0 or -1) */
static inline __attribute__((target("avx2"), always_inline)) __m256i v2_atzero(const int32_t *base, __m256i k)
{
    __m256i key = _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)base), k);
    __m256i k1 = _mm256_add_epi32(key, _mm256_set1_epi32(1)); /* 0 or 1 */
    return _mm256_cmpeq_epi32(_mm256_min_epu32(k1, _mm256_set1_epi32(1)), k1);
}

/* One group of bf16 scalars in the common case on AVX2, classes from p at
 * scalar i of the row in
 * version 2's rounds: every lane's first table symbol from its table's
 * index (32-bit gathers from one base): with V2_ATOMS, a lane on a channel
 * with atoms reads the atom symbol first, an atom's value by a gather,
 * and for "none" its class symbol in round 2; a bucket's value from the
 * bucket values of its width; the levels of the lanes at zero in closed
 * form, in the round after their class symbol; the plain bits from one
 * 64-bit load, folded into the checksum lanes *A. Returns nonzero, with
 * nothing stored to x or *A (but *X and *w moved), when a lane leaves
 * that case (an escape, a bucket the values send to the general path, a
 * level off the normal binades). */
static inline __attribute__((target("avx2,popcnt"), always_inline)) int
v2_group(const skv_v2pack *p, size_t i, __m256i *X, __m256i *A, const uint16_t **w, uint64_t *pos,
         const uint8_t *rb, uint32_t *x, const unsigned variant)
{
    const int with_atoms = (variant & V2_ATOMS) != 0, with_steps = (variant & V2_STEPS) != 0;
    const __m256i ones = _mm256_set1_epi32(-1);
    const int32_t *base = p->base + i;
    __m256i nx, k, hit = _mm256_setzero_si256(), none = hit, av = hit, zA = hit, t = hit;
    int mn = 0;
    /* the class tables' index shifts: STEP's LUT_SHIFT_STEP, else LUT_SHIFT */
    const __m256i stp = with_steps ? _mm256_loadu_si256((const __m256i *)(p->stp + i)) : _mm256_setzero_si256();
    const __m256i shc = with_steps ? _mm256_add_epi32(_mm256_set1_epi32(LUT_SHIFT),
                                                 _mm256_and_si256(stp, _mm256_set1_epi32(LUT_SHIFT_STEP - LUT_SHIFT)))
                              : _mm256_set1_epi32(LUT_SHIFT);
    _Static_assert(((LUT_SHIFT_STEP - LUT_SHIFT) & (LUT_SHIFT_STEP - LUT_SHIFT - 1)) == 0, "a one-bit mask of stp");
    /* round 1 */
    if (with_atoms) {
        __m256i akv = _mm256_loadu_si256((const __m256i *)(p->ak + i));
        __m256i am = _mm256_cmpgt_epi32(akv, _mm256_setzero_si256());
        /* (an atom table's shift is LUT_SHIFT) */
        __m256i sh1 = with_steps ? _mm256_blendv_epi8(shc, _mm256_set1_epi32(LUT_SHIFT), am) : shc;
        k = v2_sym(p, _mm256_loadu_si256((const __m256i *)(p->lut1 + i)), sh1, *X, 0xff,
                   _mm256_movemask_ps(_mm256_castsi256_ps(am)), am, &nx);
        lanes_renorm(X, nx, ones, w);
        hit = _mm256_cmpgt_epi32(akv, k);
        none = _mm256_andnot_si256(hit, am);
        if (_mm256_movemask_ps(_mm256_castsi256_ps(hit)))
            av = _mm256_mask_i32gather_epi32(
                av, (const int *)(const void *)p->vals,
                _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(p->aoff + i)), k), hit, 4);
        mn = _mm256_movemask_ps(_mm256_castsi256_ps(none));
        if (_mm256_movemask_ps(_mm256_castsi256_ps(hit)) == 0xff) { /* every lane an atom */
            _mm256_storeu_si256((__m256i *)x, av);
            lanes_acc(A, av);
            return 0;
        }
        if (mn) { /* round 2: the class symbols after "none", the levels of lanes at zero */
            zA = _mm256_andnot_si256(_mm256_or_si256(hit, none), v2_atzero(base, k));
            if (with_steps)
                zA = _mm256_andnot_si256(stp, zA);
            __m256i k2 = v2_sym(p, _mm256_loadu_si256((const __m256i *)(p->lut + i)), shc, *X, mn, 0,
                                hit, &nx);
            if (_mm256_movemask_ps(_mm256_castsi256_ps(zA))) {
                __m256i nz;
                t = lanes_zero_step(*X, &nz);
                nx = _mm256_blendv_epi8(nx, nz, zA);
            }
            lanes_renorm(X, nx, _mm256_or_si256(none, zA), w);
            k = _mm256_blendv_epi8(k, k2, none);
        }
    } else {
        k = v2_sym(p, _mm256_loadu_si256((const __m256i *)(p->lut + i)), shc, *X, 0xff, 0, hit, &nx);
        lanes_renorm(X, nx, ones, w);
    }
    __m256i key = _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)base), k);
    if (with_steps && !with_atoms && _mm256_movemask_ps(_mm256_castsi256_ps(stp)) == 0xff) {
        /* every lane STEP (a fifth of ctx's groups): the signed ordinal
         * keys, finite ([-0x7f80, 0x7f7f]), no plain bits */
        __m256i sv, bad = _mm256_or_si256(_mm256_cmpeq_epi32(k, _mm256_loadu_si256((const __m256i *)(p->nesc + i))),
                                          v2_step_value(key, &sv));
        if (_mm256_movemask_ps(_mm256_castsi256_ps(bad)))
            return 1;
        _mm256_storeu_si256((__m256i *)x, sv);
        lanes_acc(A, sv);
        return 0;
    }
    /* the bucket's value: entry key + BVT_K of the width's values */
    const __m256i stpv = with_atoms && with_steps ? _mm256_andnot_si256(hit, stp) : stp;
    __m256i kp = _mm256_add_epi32(key, _mm256_set1_epi32(BVT_K));
    __m256i bad = _mm256_or_si256(_mm256_cmpeq_epi32(k, _mm256_loadu_si256((const __m256i *)(p->nesc + i))),
                                  _mm256_andnot_si256(stpv, _mm256_cmpgt_epi32(_mm256_min_epu32(kp, _mm256_set1_epi32(2 * BVT_K)),
                                                                              _mm256_set1_epi32(2 * BVT_K - 1))));
    kp = _mm256_and_si256(kp, _mm256_set1_epi32(2 * BVT_K - 1));
    __m256i ent = _mm256_i32gather_epi32(
        (const int *)(const void *)p->bbase,
        _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(p->bvt + i)), _mm256_slli_epi32(kp, 2)), 1);
    __m256i nb = _mm256_srli_epi32(ent, 24), first = _mm256_and_si256(ent, _mm256_set1_epi32(0xffffff));
    __m256i neg = _mm256_cmpeq_epi32(kp, _mm256_set1_epi32(BVT_K - 1));
    __m256i zm = _mm256_andnot_si256(stpv, _mm256_or_si256(_mm256_cmpeq_epi32(kp, _mm256_set1_epi32(BVT_K)), neg));
    bad = _mm256_or_si256(bad, _mm256_andnot_si256(_mm256_or_si256(zm, stpv),
                                                   _mm256_cmpeq_epi32(nb, _mm256_setzero_si256())));
    if (with_steps && _mm256_movemask_ps(_mm256_castsi256_ps(stpv))) {
        __m256i sv;
        bad = _mm256_or_si256(bad, _mm256_and_si256(stpv, v2_step_value(key, &sv)));
        first = _mm256_blendv_epi8(first, sv, stpv);
        nb = _mm256_andnot_si256(stpv, nb);
    }
    if (with_atoms) {
        bad = _mm256_andnot_si256(hit, bad);
        zm = _mm256_andnot_si256(hit, zm);
    }
    if (_mm256_movemask_ps(_mm256_castsi256_ps(zm))) {
        /* the levels not read in round 2: a third round, or the second */
        __m256i zB = with_atoms && mn ? _mm256_and_si256(zm, none) : zm;
        if (!with_atoms || !mn || _mm256_movemask_ps(_mm256_castsi256_ps(zB)))
            t = with_atoms ? _mm256_blendv_epi8(t, lanes_zero(X, w, zB), zB) : lanes_zero(X, w, zB);
        /* the binade 2^(G - t - 1): exponent field 126 + G - t, normal */
        __m256i E = _mm256_sub_epi32(_mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(p->g + i)),
                                                      _mm256_set1_epi32(126)), t);
        __m256i off = _mm256_or_si256(_mm256_cmpgt_epi32(t, _mm256_set1_epi32(ZLEVELS - 1)),
                                      _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(1), E),
                                                      _mm256_cmpgt_epi32(E, _mm256_set1_epi32(254))));
        bad = _mm256_or_si256(bad, _mm256_and_si256(zm, off));
        __m256i zf = _mm256_or_si256(_mm256_and_si256(neg, _mm256_set1_epi32(0x8000)), _mm256_slli_epi32(E, 7));
        first = _mm256_blendv_epi8(first, zf, zm);
        nb = _mm256_blendv_epi8(nb, _mm256_set1_epi32(7), zm);
    }
    if (_mm256_movemask_ps(_mm256_castsi256_ps(bad)))
        return 1;
    if (with_atoms) {
        first = _mm256_blendv_epi8(first, av, hit);
        nb = _mm256_andnot_si256(hit, nb);
    }
    lanes_bits(first, nb, rb, pos, x, A);
    return 0;
}

/* A stream's words and raw bits as a run reads them. A group reads at
 * most 24 words (8 a round; with atoms, 32: 3 rounds and a load 8 words
 * ahead) and at most 63 raw bits by one 8-byte load. Near either end the
 * groups read from a zero-padded copy of the stream's last words or bytes
 * (v2_tail) instead: wreal is then the real word of tw[0], and pos from
 * rgo on reads the copy, where bit0 is the real position of trb[0]; a
 * group that consumes past the real end marks the stream corrupt. The
 * copies live apart from the cursor so that the cursor, whose address is
 * never taken (every function here is inlined), stays in registers. */
typedef struct {
    const uint16_t *w, *wend, *wreal;
    const uint8_t *rb;
    uint64_t pos, rbytes, rgo, bit0, rend;
    int tail_w, tail_r, bad;
} v2_side;

typedef struct {
    uint16_t tw[64];
    uint8_t trb[32];
} v2_tail;

SKV_ALWAYS_INLINE void side_open(v2_side *sd, const v2_reader *r)
{
    sd->w = (const uint16_t *)(const void *)r->w;
    sd->wend = (const uint16_t *)(const void *)r->wend;
    sd->wreal = NULL;
    sd->rb = r->rb;
    sd->pos = r->rpos;
    sd->rbytes = r->rbits >> 3;
    sd->rgo = sd->rbytes >= 8 ? 8 * (sd->rbytes - 8) + 1 : 0;
    sd->bit0 = sd->rend = 0;
    sd->tail_w = sd->tail_r = sd->bad = 0;
}

/* The words from here on copied into the padded tail */
SKV_ALWAYS_INLINE void side_tail_words(v2_side *sd, v2_tail *t)
{
    size_t nw = (size_t)(sd->wend - sd->w);
    memset(t->tw, 0, sizeof t->tw);
    memcpy(t->tw, sd->w, nw * 2);
    sd->wreal = sd->w, sd->w = t->tw, sd->wend = t->tw + nw, sd->tail_w = 1;
}

/* The last raw bytes copied into the padded tail */
SKV_ALWAYS_INLINE void side_tail_raw(v2_side *sd, v2_tail *t)
{
    size_t nb = sd->rbytes < 16 ? (size_t)sd->rbytes : 16;
    memset(t->trb, 0, sizeof t->trb);
    memcpy(t->trb, sd->rb + (sd->rbytes - nb), nb);
    sd->bit0 = 8 * (sd->rbytes - nb), sd->pos -= sd->bit0, sd->rb = t->trb, sd->rend = 8 * nb;
    sd->rgo = 0, sd->tail_r = 1;
}

/* The checks before a group that reads at most margin words: 0 when it
 * may run, 1 (the stream marked corrupt) when the stream has been read
 * past its end */
SKV_ALWAYS_INLINE int side_room(v2_side *sd, v2_tail *t, ptrdiff_t margin)
{
    if (__builtin_expect(sd->wend - sd->w < margin, 0)) {
        if (sd->w > sd->wend)
            return sd->bad = 1;
        if (!sd->tail_w)
            side_tail_words(sd, t);
    }
    if (__builtin_expect(sd->pos >= sd->rgo, 0)) {
        if (!sd->tail_r)
            side_tail_raw(sd, t);
        if (sd->pos > sd->rend)
            return sd->bad = 1;
    }
    return 0;
}

/* The groups from here that side_room(sd, t, 24) would pass without a
 * look: a group of no atoms reads at most 16 words (two rounds) and 56 raw
 * bits (bf16's plain bits are at most 7 a lane) */
SKV_ALWAYS_INLINE size_t side_safe(const v2_side *sd)
{
    size_t gw = sd->wend - sd->w < 24 ? 0 : (size_t)(sd->wend - sd->w - 24) / 16 + 1;
    size_t gr = sd->pos >= sd->rgo ? 0 : (size_t)((sd->rgo - sd->pos + 55) / 56);
    return gw < gr ? gw : gr;
}

/* The cursor back into r, from the tail copies to the real stream */
SKV_ALWAYS_INLINE void side_close(v2_side *sd, const v2_tail *t, v2_reader *r)
{
    if (sd->tail_w) {
        sd->bad |= sd->w > sd->wend;
        sd->w = sd->wreal + (sd->w - t->tw);
    }
    if (sd->tail_r) {
        sd->bad |= sd->pos > sd->rend;
        sd->pos += sd->bit0;
    }
    r->w = (const uint8_t *)(const void *)sd->w;
    r->rpos = sd->pos;
    r->bad |= sd->bad;
}

/* Where a run on one stream stands (v2_run_body): the pack and scalar i
 * of its row, the groups done (k) of ng, their output x (group k's at
 * x + 8 k), the row's first scalar x0, and the row check (mag, big, stop) */
typedef struct {
    const skv_v2pack *p;
    size_t i, k, ng, n;
    int okall;
    uint32_t *x;
    const uint32_t *x0;
    uint32_t mag, big;
    int *stop;
} v2_run_at;

/* One group of a run on the states *X and checksum lanes *A: 0 to go
 * on; 1 when the run stops before it (ng done, a lane the pack does not
 * pass, a group off the common case, a stream read past its end) or after
 * it (a row with a magnitude above big: *stop) */
static inline __attribute__((target("avx2,popcnt"), always_inline)) int
v2_run_step(v2_run_at *q, v2_side *sd, v2_tail *t, __m256i *X, __m256i *A, const unsigned variant)
{
    const skv_v2pack *p = q->p;
    if (q->k == q->ng ||
        (!q->okall && _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)(p->ok + q->i)))) != 0xff))
        return 1;
    if (side_room(sd, t, (variant & V2_ATOMS) ? 32 : 24))
        return 1;
    __m256i Xs = *X;
    const uint16_t *ws = sd->w;
    if (v2_group(p, q->i, X, A, &sd->w, &sd->pos, sd->rb, q->x + 8 * q->k, variant)) {
        *X = Xs, sd->w = ws;
        return 1;
    }
    q->k++;
    if ((q->i += 8) == q->n) { /* a row done: the next from the pack's start */
        q->i = 0;
        if (q->big < q->mag && lanes_any_above(q->x0, q->n, q->mag, q->big)) {
            *q->stop = 1;
            return 1;
        }
        q->x0 += q->n;
    }
    return 0;
}

/* Whole groups from scalar i of d->pk's row on (at: its index in the
 * stream), up to ng of them, rows after rows of the same classes, by
 * v2_group with the states and checksum lanes in registers; stops before
 * a group that leaves the common case or that d->pk does not pass, and
 * (setting *stop) after a row with a magnitude (bits under mag) above big.
 * Returns the groups done (their state kept in d and r); a group that
 * reads past the end of the words or raw bits sets r->bad. The two banks
 * of sixteen states take groups in turn; with V2_ONE_BANK (eight states)
 * every group is on the first, and only the checksum lanes alternate. */
static inline __attribute__((target("avx2,popcnt"), always_inline)) size_t
v2_run_body(skv_decoder *d, v2_reader *r, size_t i, uint32_t at, size_t ng, uint32_t *x, uint32_t mag, uint32_t big,
            int *stop, const unsigned variant)
{
    const skv_v2pack *p = &d->pk;
    v2_run_at q = {p, i, 0, ng, p->n, p->okall, x, x - i, mag, big, stop};
    __m256i X0 = _mm256_loadu_si256((const __m256i *)r->x), X1 = _mm256_loadu_si256((const __m256i *)(r->x + 8));
    __m256i A0 = _mm256_loadu_si256((const __m256i *)d->acc), A1 = _mm256_loadu_si256((const __m256i *)(d->acc + 8));
    v2_side sd;
    v2_tail t;
    side_open(&sd, r);
    __m256i *const Xodd = (variant & V2_ONE_BANK) ? &X0 : &X1; /* the odd groups' states */
    int end = (at >> 3 & 1u) && v2_run_step(&q, &sd, &t, Xodd, &A1, variant);
    while (!end)
        end = v2_run_step(&q, &sd, &t, &X0, &A0, variant) || v2_run_step(&q, &sd, &t, Xodd, &A1, variant);
    side_close(&sd, &t, r);
    _mm256_storeu_si256((__m256i *)r->x, X0), _mm256_storeu_si256((__m256i *)(r->x + 8), X1);
    _mm256_storeu_si256((__m256i *)d->acc, A0), _mm256_storeu_si256((__m256i *)(d->acc + 8), A1);
    d->nfast += q.k;
    return q.k;
}

__attribute__((target("avx2,popcnt"))) size_t skv__groups_avx2_run(skv_decoder *d, v2_reader *r, size_t i, uint32_t at,
                                                         size_t ng, uint32_t *x, uint32_t mag, uint32_t big,
                                                         int *stop)
{
    unsigned v = d->pk.as ? V2_ATOMS : 0;
    if (d->states == 8) /* (the STEP variant takes packs without STEP lanes too) */
        v |= V2_STEPS | V2_ONE_BANK;
    else if (d->pk.anystp)
        v |= V2_STEPS;
    switch (v) { /* each variant its own copy of the body */
    case V2_ATOMS | V2_STEPS | V2_ONE_BANK:
        return v2_run_body(d, r, i, at, ng, x, mag, big, stop, V2_ATOMS | V2_STEPS | V2_ONE_BANK);
    case V2_STEPS | V2_ONE_BANK: return v2_run_body(d, r, i, at, ng, x, mag, big, stop, V2_STEPS | V2_ONE_BANK);
    case V2_ATOMS | V2_STEPS: return v2_run_body(d, r, i, at, ng, x, mag, big, stop, V2_ATOMS | V2_STEPS);
    case V2_STEPS: return v2_run_body(d, r, i, at, ng, x, mag, big, stop, V2_STEPS);
    case V2_ATOMS: return v2_run_body(d, r, i, at, ng, x, mag, big, stop, V2_ATOMS);
    default: return v2_run_body(d, r, i, at, ng, x, mag, big, stop, 0);
    }
}

/* Two streams of eight states (K and V of a layer), their groups taken in
 * turn: group k of d[0], then group k of d[1], from scalar i of their
 * packs' rows (the same n; at: both streams' index of scalar i), up to ng
 * groups each, into x[0] and x[1]. Each group is v2_run_body's (no atoms);
 * the two state chains do not wait on each other, so one stream's group
 * runs while the other's waits on its loads. Stops before a group that
 * leaves the common case or a pack does not pass; done[s]: stream s's
 * groups (done[1] is done[0] or done[0] - 1). */
static inline __attribute__((target("avx2,popcnt"), always_inline)) void
v2_run2_body(skv_decoder *const d[2], v2_reader *const r[2], size_t i, uint32_t at, size_t ng, uint32_t *const x[2],
             size_t done[2])
{
    const skv_v2pack *p0 = &d[0]->pk, *p1 = &d[1]->pk;
    const size_t n = p0->n;
    const int okall = p0->okall && p1->okall;
    __m256i X0 = _mm256_loadu_si256((const __m256i *)r[0]->x), X1 = _mm256_loadu_si256((const __m256i *)r[1]->x);
    /* each stream's checksum lanes of even and odd groups: A*0 holds the next group's */
    __m256i A00 = _mm256_loadu_si256((const __m256i *)d[0]->acc), A01 = _mm256_loadu_si256((const __m256i *)(d[0]->acc + 8));
    __m256i A10 = _mm256_loadu_si256((const __m256i *)d[1]->acc), A11 = _mm256_loadu_si256((const __m256i *)(d[1]->acc + 8));
    const int odd = at >> 3 & 1u;
    if (odd) {
        __m256i t = A00;
        A00 = A01, A01 = t, t = A10, A10 = A11, A11 = t;
    }
    v2_side s0, s1;
    v2_tail t0, t1;
    side_open(&s0, r[0]);
    side_open(&s1, r[1]);
    size_t k0 = 0, k1 = 0;
    const size_t safe0 = side_safe(&s0), safe1 = side_safe(&s1), safe = safe0 < safe1 ? safe0 : safe1;
    while (k0 < ng) {
        if (!okall && (_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)(p0->ok + i)))) != 0xff ||
                       _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)(p1->ok + i)))) != 0xff))
            break;
        if (k0 >= safe && (side_room(&s0, &t0, 24) || side_room(&s1, &t1, 24))) /* near an end: the checks */
            break;
        __m256i Xs = X0;
        const uint16_t *ws = s0.w;
        if (v2_group(p0, i, &X0, &A00, &s0.w, &s0.pos, s0.rb, x[0] + 8 * k0, V2_STEPS)) {
            X0 = Xs, s0.w = ws;
            break;
        }
        k0++;
        Xs = X1, ws = s1.w;
        if (v2_group(p1, i, &X1, &A10, &s1.w, &s1.pos, s1.rb, x[1] + 8 * k1, V2_STEPS)) {
            X1 = Xs, s1.w = ws;
            break;
        }
        k1++;
        __m256i t = A00;
        A00 = A01, A01 = t, t = A10, A10 = A11, A11 = t;
        if ((i += 8) == n)
            i = 0;
    }
    if ((odd + k1) & 1u) { /* back in place: [0, 8) the even groups' (stream 0's A00 holds group
                            * k1's lanes whether or not it decoded that group) */
        __m256i t = A00;
        A00 = A01, A01 = t, t = A10, A10 = A11, A11 = t;
    }
    side_close(&s0, &t0, r[0]);
    side_close(&s1, &t1, r[1]);
    _mm256_storeu_si256((__m256i *)r[0]->x, X0), _mm256_storeu_si256((__m256i *)r[1]->x, X1);
    _mm256_storeu_si256((__m256i *)d[0]->acc, A00), _mm256_storeu_si256((__m256i *)(d[0]->acc + 8), A01);
    _mm256_storeu_si256((__m256i *)d[1]->acc, A10), _mm256_storeu_si256((__m256i *)(d[1]->acc + 8), A11);
    d[0]->nfast += k0;
    d[1]->nfast += k1;
    done[0] = k0, done[1] = k1;
}

#else
int skv__groups_avx2_ok(const skv_cmodel *m)
{
    (void)m;
    return 0;
}
#endif

#ifdef SKV_HAVE_CLS8
/* Whether skv_decoder_get_n2 takes d's rows of n scalars two streams at a
 * time (v2_run2_body): streams that may (pairok), whole groups at the same
 * index in both */
int skv__groups_avx2_pair_ok(skv_decoder *const d[2], size_t n)
{
    return d[0]->pairok & d[1]->pairok & (d[0]->got == d[1]->got) & ((d[0]->got | n) % 8 == 0);
}

/* skv_decoder_get_n2 on pair_fast's streams: their groups in turn
 * (v2_run2_body); a group either stream cannot take there takes that
 * stream's own paths (v2_run, else v2_group_ref on fclassify's classes).
 * 1, with nothing decoded, when there is no room to pack the rows. */
static inline __attribute__((target("avx2,popcnt"), always_inline)) int
v2_get_pair_body(skv_decoder *const d[2], const float *const mu[2], const float *const s[2], uint32_t *const x[2],
              size_t n)
{
    for (int k = 0; k < 2; k++)
        if (!v2_pack_rows_body(d[k]->m, &d[k]->pk, mu[k], s[k], n, NULL, PACK_FOR_DECODER))
            return 1; /* no room: nothing decoded */
    v2_reader rr[2];
    v2_reader *const r[2] = {&rr[0], &rr[1]};
    for (int k = 0; k < 2; k++)
        rr[k] = (v2_reader){d[k]->x2, d[k]->w, d[k]->wend, d[k]->rb, d[k]->rpos, d[k]->rbits, 0};
    const size_t G = n / 8;
    size_t g[2] = {0, 0};
    int rc = SKV_OK;
    while ((g[0] < G || g[1] < G) && !rr[0].bad && !rr[1].bad && !rc) {
        if (g[0] == g[1]) {
            size_t done[2];
            uint32_t *const xx[2] = {x[0] + 8 * g[0], x[1] + 8 * g[1]};
            v2_run2_body(d, r, 8 * g[0], d[0]->got + (uint32_t)(8 * g[0]), G - g[0], xx, done);
            g[0] += done[0], g[1] += done[1];
            if ((g[0] == G && g[1] == G) || rr[0].bad || rr[1].bad)
                break;
        }
        /* the stream(s) behind: one group on their own */
        const size_t lo = g[0] < g[1] ? g[0] : g[1];
        for (int k = 0; k < 2 && !rc && !rr[0].bad && !rr[1].bad; k++) {
            if (g[k] != lo)
                continue;
            const size_t pi = 8 * g[k];
            const uint32_t at = d[k]->got + (uint32_t)pi;
            int stop = 0;
            if (!skv__groups_avx2_run(d[k], r[k], pi, at, 1, x[k] + pi, 0, 0, &stop) && !rr[k].bad) {
                skv_fcls cl[8];
                for (int q = 0; q < 8 && !rc; q++)
                    rc = fclassify(d[k]->m, &d[k]->m->lat, mu[k][pi + q], s[k][pi + q], &cl[q]);
                if (rc)
                    break;
                skv__dec_group_ref(d[k], r[k], cl, at, 8, x[k] + pi);
            }
            g[k]++;
        }
    }
    int bad = 0;
    for (int k = 0; k < 2; k++) {
        d[k]->w = rr[k].w;
        d[k]->rpos = rr[k].rpos;
        d[k]->got += (uint32_t)(8 * g[k]);
        if (rr[k].bad) {
            d[k]->bad = 1;
            if (!bad)
                bad = skv_error(SKV_ERR_CORRUPT, "stream: corrupted in the group of scalar %u", d[k]->got - 8);
        }
    }
    if (bad)
        return bad;
    if (rc) /* a table: nothing of that group was read */
        return skv_error(rc, "codec table");
    return SKV_OK;
}

/* The body with the packs and the paired run inlined, built for AVX2 and
 * for AVX-512VL */
static __attribute__((target("avx2,popcnt"))) int v2_get_pair_avx2(skv_decoder *const d[2], const float *const mu[2],
                                                                  const float *const s[2], uint32_t *const x[2],
                                                                  size_t n)
{
    return v2_get_pair_body(d, mu, s, x, n);
}

static __attribute__((target(T512))) int v2_get_pair_avx512(skv_decoder *const d[2], const float *const mu[2],
                                                           const float *const s[2], uint32_t *const x[2], size_t n)
{
    return v2_get_pair_body(d, mu, s, x, n);
}

int skv__groups_avx2_get_pair(skv_decoder *const d[2], const float *const mu[2], const float *const s[2],
                     uint32_t *const x[2], size_t n)
{
    return cls_simd() == 3 ? v2_get_pair_avx512(d, mu, s, x, n) : v2_get_pair_avx2(d, mu, s, x, n);
}
#endif
