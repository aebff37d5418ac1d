/* Criterion suite for the KV file layout (skv_kvfile): sequences round
 * trip exactly, an empty file, malformed layouts and bad sequences are
 * rejected. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "skv_tensor.h"
#include "testutil.h"

/* ========================================================================
 * KV files
 * ====================================================================== */

typedef struct {
    size_t T;
    int32_t tokens[16];
    uint8_t *k, *v;
} kv_fixture;

enum { KV_L = 2, KV_H = 3, KV_D = 4 };

static void kv_fixture_init(kv_fixture *f, size_t T, uint32_t seed)
{
    f->T = T;
    for (size_t t = 0; t < T; t++)
        f->tokens[t] = (int32_t)(seed * 1000 + t) * (t % 2 ? -1 : 1);
    size_t nb = (size_t)KV_L * T * KV_H * KV_D * 2;
    f->k = malloc(nb ? nb : 1);
    f->v = malloc(nb ? nb : 1);
    tu_fill_bytes(f->k, nb, seed * 2);
    tu_fill_bytes(f->v, nb, seed * 2 + 1);
}

static skv_kvseq kv_view(const kv_fixture *f)
{
    skv_kvseq s = {0};
    s.T = f->T;
    s.tokens = f->T ? f->tokens : NULL;
    s.dtype = SEQKV_DT_BF16;
    s.layers = KV_L;
    s.kv_heads = KV_H;
    s.head_dim = KV_D;
    s.k = f->T ? f->k : NULL;
    s.v = f->T ? f->v : NULL;
    return s;
}

static skv_st *reparse(skv_st_writer *w, uint8_t **buf)
{
    size_t len;
    cr_assert_eq(skv_stw_serialize(w, buf, &len), 0);
    skv_st *st = NULL;
    cr_assert_eq(skv_st_parse(*buf, len, &st), 0, "%s", seqkv_error_detail());
    return st;
}

Test(kvfile, three_sequences_round_trip_exactly)
{
    kv_fixture f[3];
    const size_t Ts[3] = {5, 0, 3};
    skv_st_writer *w;
    cr_assert_eq(skv_stw_create(&w), 0);
    for (int i = 0; i < 3; i++) {
        kv_fixture_init(&f[i], Ts[i], (uint32_t)i + 1);
        skv_kvseq s = kv_view(&f[i]);
        cr_assert_eq(skv_kvfile_add(w, (size_t)i, &s), 0, "%s", seqkv_error_detail());
    }
    cr_assert_eq(skv_stw_meta(w, "seqkv.kind", "kv"), 0);
    uint8_t *buf;
    skv_st *st = reparse(w, &buf);
    skv_stw_free(w);

    size_t n = 99;
    cr_assert_eq(skv_kvfile_count(st, &n), 0, "%s", seqkv_error_detail());
    cr_assert_eq(n, 3);
    for (int i = 0; i < 3; i++) {
        skv_kvseq s;
        cr_assert_eq(skv_kvfile_get(st, (size_t)i, &s), 0, "%s", seqkv_error_detail());
        cr_expect_eq(s.T, Ts[i]);
        cr_expect_eq(s.dtype, SEQKV_DT_BF16);
        cr_expect_eq(s.layers, KV_L);
        cr_expect_eq(s.kv_heads, KV_H);
        cr_expect_eq(s.head_dim, KV_D);
        for (size_t t = 0; t < s.T; t++)
            cr_expect_eq((int32_t)skv_load32_le(&s.tokens[t]), f[i].tokens[t]);
        size_t nb = (size_t)KV_L * s.T * KV_H * KV_D * 2;
        cr_expect_eq(memcmp(s.k, f[i].k, nb), 0);
        cr_expect_eq(memcmp(s.v, f[i].v, nb), 0);
        /* the shapes on disk are [layers, T, kv_heads, head_dim] */
        char name[32];
        snprintf(name, sizeof name, "seq%d.k", i);
        const skv_tensor *t = skv_st_find(st, name);
        cr_assert_not_null(t);
        cr_expect_eq(t->ndim, 4);
        cr_expect_eq(t->shape[0], KV_L);
        cr_expect_eq(t->shape[1], (int64_t)Ts[i]);
        cr_expect_eq(t->shape[2], KV_H);
        cr_expect_eq(t->shape[3], KV_D);
        snprintf(name, sizeof name, "seq%d.tokens", i);
        t = skv_st_find(st, name);
        cr_assert_not_null(t);
        cr_expect_eq(t->dtype, SEQKV_DT_I32);
        cr_expect_eq(t->ndim, 1);
    }
    skv_kvseq s;
    cr_expect_eq(skv_kvfile_get(st, 3, &s), SKV_ERR_NOT_FOUND);
    skv_st_free(st);
    skv_free(buf);
    for (int i = 0; i < 3; i++) {
        free(f[i].k);
        free(f[i].v);
    }
}

Test(kvfile, a_file_without_sequences_counts_zero)
{
    skv_st_writer *w;
    cr_assert_eq(skv_stw_create(&w), 0);
    int32_t x = 1;
    int64_t one[1] = {1};
    cr_assert_eq(skv_stw_add(w, "other", SEQKV_DT_I32, 1, one, &x, 4), 0);
    cr_assert_eq(skv_stw_add(w, "seq.tokens", SEQKV_DT_I32, 1, one, &x, 4), 0);
    cr_assert_eq(skv_stw_add(w, "seq0.tokensx", SEQKV_DT_I32, 1, one, &x, 4), 0);
    uint8_t *buf;
    skv_st *st = reparse(w, &buf);
    skv_stw_free(w);
    size_t n = 7;
    cr_expect_eq(skv_kvfile_count(st, &n), 0, "%s", seqkv_error_detail());
    cr_expect_eq(n, 0);
    skv_st_free(st);
    skv_free(buf);
}

/* Build a file from raw tensors: name, dtype, 4 dims (ndim given). */
typedef struct {
    const char *name;
    seqkv_dtype dt;
    int ndim;
    int64_t shape[4];
} raw_t;

static int kv_raw(const raw_t *ts, size_t n, int want_count_rc, int want_get_rc)
{
    skv_st_writer *w;
    cr_assert_eq(skv_stw_create(&w), 0);
    static uint8_t zeros[4096];
    for (size_t i = 0; i < n; i++) {
        size_t nb = skv_dtype_size(ts[i].dt);
        for (int d = 0; d < ts[i].ndim; d++)
            nb *= (size_t)ts[i].shape[d];
        cr_assert_leq(nb, sizeof zeros);
        cr_assert_eq(skv_stw_add(w, ts[i].name, ts[i].dt, ts[i].ndim, ts[i].shape, zeros, nb),
                     0);
    }
    uint8_t *buf;
    skv_st *st = reparse(w, &buf);
    skv_stw_free(w);
    size_t cnt;
    int rc = skv_kvfile_count(st, &cnt);
    cr_expect_eq(rc, want_count_rc, "count: expected %s, got %s (%s)",
                 seqkv_strerror(want_count_rc), seqkv_strerror(rc), seqkv_error_detail());
    skv_kvseq s;
    int grc = skv_kvfile_get(st, 0, &s);
    cr_expect_eq(grc, want_get_rc, "get(0): expected %s, got %s (%s)",
                 seqkv_strerror(want_get_rc), seqkv_strerror(grc), seqkv_error_detail());
    skv_st_free(st);
    skv_free(buf);
    return rc;
}

#define TOK(i, T) {"seq" #i ".tokens", SEQKV_DT_I32, 1, {T}}
#define KV(i, which, dt, T) {"seq" #i "." which, dt, 4, {2, T, 1, 4}}

Test(kvfile, malformed_layouts_are_rejected)
{
    /* a gap in the numbering */
    const raw_t gap[] = {TOK(0, 1), KV(0, "k", SEQKV_DT_BF16, 1), KV(0, "v", SEQKV_DT_BF16, 1),
                         TOK(2, 1), KV(2, "k", SEQKV_DT_BF16, 1), KV(2, "v", SEQKV_DT_BF16, 1)};
    kv_raw(gap, 6, SKV_ERR_FORMAT, 0);
    cr_expect(strstr(seqkv_error_detail(), "seq1.tokens") != NULL, "%s", seqkv_error_detail());
    /* numbering that does not start at 0 */
    const raw_t from1[] = {TOK(1, 1), KV(1, "k", SEQKV_DT_BF16, 1), KV(1, "v", SEQKV_DT_BF16, 1)};
    kv_raw(from1, 3, SKV_ERR_FORMAT, SKV_ERR_NOT_FOUND);
    /* a missing .v */
    const raw_t nov[] = {TOK(0, 1), KV(0, "k", SEQKV_DT_BF16, 1)};
    kv_raw(nov, 2, SKV_ERR_FORMAT, SKV_ERR_FORMAT);
    cr_expect(strstr(seqkv_error_detail(), "seq0.v") != NULL, "%s", seqkv_error_detail());
    /* a missing .k */
    const raw_t nok[] = {TOK(0, 1), KV(0, "v", SEQKV_DT_BF16, 1)};
    kv_raw(nok, 2, SKV_ERR_FORMAT, SKV_ERR_FORMAT);
    /* k and v of a sequence without tokens */
    const raw_t stray[] = {TOK(0, 1), KV(0, "k", SEQKV_DT_BF16, 1), KV(0, "v", SEQKV_DT_BF16, 1),
                           KV(1, "k", SEQKV_DT_BF16, 1)};
    kv_raw(stray, 4, SKV_ERR_FORMAT, 0);
    /* non-canonical index */
    const raw_t lead[] = {TOK(0, 1), KV(0, "k", SEQKV_DT_BF16, 1), KV(0, "v", SEQKV_DT_BF16, 1),
                          TOK(01, 1)};
    kv_raw(lead, 4, SKV_ERR_FORMAT, 0);
    /* T of k differs from tokens */
    const raw_t badT[] = {TOK(0, 2), KV(0, "k", SEQKV_DT_BF16, 3), KV(0, "v", SEQKV_DT_BF16, 3)};
    kv_raw(badT, 3, 0, SKV_ERR_SHAPE);
    /* v shape differs from k */
    const raw_t badv[] = {TOK(0, 2), KV(0, "k", SEQKV_DT_BF16, 2), KV(0, "v", SEQKV_DT_BF16, 1)};
    kv_raw(badv, 3, 0, SKV_ERR_SHAPE);
    /* I32 K/V */
    const raw_t ik[] = {TOK(0, 1), KV(0, "k", SEQKV_DT_I32, 1), KV(0, "v", SEQKV_DT_I32, 1)};
    kv_raw(ik, 3, 0, SKV_ERR_SHAPE);
    /* k and v of different dtypes */
    const raw_t mixed[] = {TOK(0, 1), KV(0, "k", SEQKV_DT_BF16, 1), KV(0, "v", SEQKV_DT_F16, 1)};
    kv_raw(mixed, 3, 0, SKV_ERR_SHAPE);
    /* tokens not I32 or not rank 1 */
    const raw_t ftok[] = {{"seq0.tokens", SEQKV_DT_F32, 1, {1}}, KV(0, "k", SEQKV_DT_BF16, 1),
                          KV(0, "v", SEQKV_DT_BF16, 1)};
    kv_raw(ftok, 3, 0, SKV_ERR_SHAPE);
    const raw_t tok2[] = {{"seq0.tokens", SEQKV_DT_I32, 2, {1, 1}}, KV(0, "k", SEQKV_DT_BF16, 1),
                          KV(0, "v", SEQKV_DT_BF16, 1)};
    kv_raw(tok2, 3, 0, SKV_ERR_SHAPE);
    /* k of the wrong rank */
    const raw_t k3[] = {TOK(0, 1), {"seq0.k", SEQKV_DT_BF16, 3, {2, 1, 4}},
                        {"seq0.v", SEQKV_DT_BF16, 3, {2, 1, 4}}};
    kv_raw(k3, 3, 0, SKV_ERR_SHAPE);
    /* a zero layer count */
    const raw_t l0[] = {TOK(0, 1), {"seq0.k", SEQKV_DT_BF16, 4, {0, 1, 1, 4}},
                        {"seq0.v", SEQKV_DT_BF16, 4, {0, 1, 1, 4}}};
    kv_raw(l0, 3, 0, SKV_ERR_SHAPE);
}

Test(kvfile, add_rejects_bad_sequences)
{
    skv_st_writer *w;
    cr_assert_eq(skv_stw_create(&w), 0);
    kv_fixture f;
    kv_fixture_init(&f, 2, 9);
    skv_kvseq s = kv_view(&f);
    s.dtype = SEQKV_DT_I32;
    cr_expect_eq(skv_kvfile_add(w, 0, &s), SKV_ERR_ARG);
    s = kv_view(&f);
    s.layers = 0;
    cr_expect_eq(skv_kvfile_add(w, 0, &s), SKV_ERR_ARG);
    s = kv_view(&f);
    s.k = NULL;
    cr_expect_eq(skv_kvfile_add(w, 0, &s), SKV_ERR_ARG);
    cr_expect_eq(skv_kvfile_add(w, 0, NULL), SKV_ERR_ARG);
    s = kv_view(&f);
    cr_expect_eq(skv_kvfile_add(w, 0, &s), 0);
    cr_expect_eq(skv_kvfile_add(w, 0, &s), SKV_ERR_ARG, "sequence 0 added twice");
    skv_stw_free(w);
    free(f.k);
    free(f.v);
}
