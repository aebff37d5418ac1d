/* Tenant isolation: tenant b cannot look up or get tenant a's sequences,
 * and the shared namespace is visible only to tenants that opted in. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "seqkv.h"
#include "skv_delta.h"
#include "storetest.h"
#include "storeutil.h"
#include "testutil.h"

/* ---- tenants ---------------------------------------------------------------------- */

static int has_key(const uint8_t *keys, size_t n, const uint8_t *k)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(keys + 32 * i, k, 32) == 0)
            return 1;
    return 0;
}

Test(store_tenants, tenant_b_cannot_look_up_or_get_tenant_a_sequences, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    const char *dir = tu_path(tmp, "db");
    char dirc[4200];
    snprintf(dirc, sizeof dirc, "%s", dir);
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    seqkv *db = open_store(dirc, NULL);
    add_profile(db, &tm, "p", CHUNK, SEQKV_RAW, 0);
    su_seq a, x;
    su_seq_make(&tm, NULL, 0, 50, 1, &a);
    int32_t first = (a.tok[0] + 1) % tm.c->vocab_size; /* nothing in common with a */
    su_seq_make(&tm, &first, 1, 30, 2, &x);
    put(db, "alice", "p", &a, 0);
    size_t m, got;
    uint8_t *out = malloc(su_kv_len(&tm, a.n));
    /* bob does not exist yet */
    cr_assert_eq(seqkv_lookup(db, "bob", "p", a.tok, a.n, &m), SKV_ERR_NOT_FOUND);
    cr_assert_eq(m, 0);
    cr_assert_eq(seqkv_get(db, "bob", "p", a.tok, a.n, NULL, out, su_kv_len(&tm, a.n), &got),
                 SKV_ERR_NOT_FOUND);
    cr_assert_eq(seqkv_stat(db, "bob", &(seqkv_stats){0}), SKV_ERR_NOT_FOUND);
    /* bob exists, stores something else: still nothing of alice's */
    put(db, "bob", "p", &x, 0);
    cr_assert_eq(lookup(db, "bob", "p", a.tok, a.n), 0);
    for (size_t k = 1; k <= a.n; k += 7)
        cr_assert_eq(seqkv_get(db, "bob", "p", a.tok, a.n, &(seqkv_get_opts){.want = k}, out, su_kv_len(&tm, a.n), &got),
                     SKV_ERR_NOT_FOUND);
    cr_assert_eq(lookup(db, "alice", "p", x.tok, x.n), 0, "nor the other way");
    size_t removed = 99;
    cr_assert_eq(seqkv_del(db, "bob", "p", a.tok, a.n, &removed), 0);
    cr_assert_eq(removed, 0, "bob cannot delete alice's KV");
    assert_whole(db, "alice", "p", &tm, &a, "alice after bob's del");
    seqkv_stats sa = stats(db, "alice"), sb = stats(db, "bob");
    cr_assert_eq(sa.tokens, a.n);
    cr_assert_eq(sb.tokens, x.n);
    seqkv_close(db);

    size_t n1;
    uint8_t *k1 = su_chunk_keys(dirc, &n1);
    /* the same tokens under bob: stored again (no cross-tenant dedup),
     * under keys unrelated to alice's */
    db = open_store(dirc, NULL);
    seqkv_put_result r = put(db, "bob", "p", &a, 0);
    cr_assert_eq(r.new_tokens, a.n, "no dedup across tenants (%zu)", r.new_tokens);
    assert_whole(db, "bob", "p", &tm, &a, "bob's copy");
    assert_whole(db, "alice", "p", &tm, &a, "alice's copy");
    seqkv_close(db);
    size_t n2;
    uint8_t *k2 = su_chunk_keys(dirc, &n2);
    cr_assert_eq(n2, n1 + r.chunks);
    size_t fresh = 0;
    for (size_t i = 0; i < n2; i++)
        fresh += !has_key(k1, n1, k2 + 32 * i);
    cr_assert_eq(fresh, r.chunks, "bob's records have keys of their own");
    free(k1);
    free(k2);
    free(out);
    su_seq_free(&a);
    su_seq_free(&x);
    su_model_free(&tm);
}

Test(store_tenants, the_shared_namespace_is_visible_only_to_tenants_that_opted_in, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    const char *dir = tu_path(tmp, "db");
    char dirc[4200];
    snprintf(dirc, sizeof dirc, "%s", dir);
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    seqkv *db = open_store(dirc, NULL);
    add_profile(db, &tm, "p", CHUNK, SEQKV_RAW, 0);
    su_seq sys, own, ext;
    su_seq_make(&tm, NULL, 0, 40, 5, &sys); /* a public system prompt */
    int32_t first = (sys.tok[0] + 1) % tm.c->vocab_size; /* nothing in common with sys */
    su_seq_make(&tm, &first, 1, 20, 6, &own);
    su_seq_make(&tm, sys.tok, 40, 55, 7, &ext); /* a turn after it */
    seqkv_put_opts so = {.shared = 1};
    seqkv_put_result r;
    cr_assert_eq(seqkv_put(db, "publisher", "p", sys.tok, sys.n, sys.kv, sys.kv_len, &so, &r), 0,
                 "%s", seqkv_error_detail());
    cr_assert_eq(r.new_tokens, sys.n);
    put(db, "plain", "p", &own, 0);
    seqkv_tenant_conf yes = {.read_shared = 1};
    cr_assert_eq(seqkv_tenant_set(db, "reader", &yes), 0, "%s", seqkv_error_detail());
    for (int round = 0; round < 2; round++) {
        cr_assert_eq(lookup(db, "plain", "p", sys.tok, sys.n), 0, "round %d: not opted in", round);
        size_t got;
        uint8_t *out = malloc(su_kv_len(&tm, sys.n));
        cr_assert_eq(seqkv_get(db, "plain", "p", sys.tok, sys.n, NULL, out, su_kv_len(&tm, sys.n), &got),
                     SKV_ERR_NOT_FOUND);
        free(out);
        assert_whole(db, "reader", "p", &tm, &sys, "opted in");
        cr_assert_eq(lookup(db, "reader", "p", ext.tok, ext.n), sys.n);
        cr_assert_eq(su_get_check(db, "reader", "p", &tm, &ext, sys.n, NULL), 0);
        seqkv_close(db);
        db = open_store(dirc, NULL);
    }
    /* a reader's delete does not touch the shared namespace */
    size_t removed = 7;
    cr_assert_eq(seqkv_del(db, "reader", "p", sys.tok, sys.n, &removed), 0);
    cr_assert_eq(removed, 0);
    assert_whole(db, "reader", "p", &tm, &sys, "after the reader's del");
    /* opting out hides it again */
    seqkv_tenant_conf no = {.read_shared = 0};
    cr_assert_eq(seqkv_tenant_set(db, "reader", &no), 0);
    cr_assert_eq(lookup(db, "reader", "p", sys.tok, sys.n), 0);
    /* names starting with '@' are reserved */
    cr_assert_eq(seqkv_put(db, "@other", "p", own.tok, own.n, own.kv, own.kv_len, NULL, &r),
                 SKV_ERR_ARG);
    seqkv_close(db);
    su_seq_free(&sys);
    su_seq_free(&own);
    su_seq_free(&ext);
    su_model_free(&tm);
}
