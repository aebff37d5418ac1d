/* The store (seqkv.h) on real model KV, sharing: N sessions store a shared
 * prefix once, extensions store only the tail, the longest prefix at token
 * granularity inside and across chunks, and reopen after close (every
 * entry bit-exact). */
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

/* ---- sharing ------------------------------------------------------------ */

Test(store_sharing, sessions_sharing_a_prefix_store_it_once, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    const size_t per = su_kv_len(&tm, 1);
    /* a prefix ending on a chunk boundary; one ending 37 tokens into a
     * chunk (the sessions' records take those from the first one's); one
     * ending 5 tokens into a chunk (which the store may code again) */
    const struct {
        int chunk;
        size_t P;
        int exact;
    } cf[3] = {{16, 32, 1}, {64, 37, 1}, {16, 37, 0}};
    for (int pi = 0; pi < 3; pi++) {
        const size_t CH = (size_t)cf[pi].chunk, P = cf[pi].P;
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/db%d", tmp, pi);
        seqkv *db = open_store(dir, NULL);
        add_profile(db, &tm, "rm", (int)CH, SEQKV_RAW, 0);
        su_seq pre;
        su_seq_make(&tm, NULL, 0, P, 100 + (uint64_t)pi, &pre);
        enum { N = 6 };
        su_seq s[N];
        seqkv_stats before = stats(db, NULL);
        cr_assert_eq(before.tokens, 0);
        size_t unique = 0;
        for (int i = 0; i < N; i++) {
            int32_t div = (int32_t)((7 + i) % tm.c->vocab_size);
            session(&tm, &pre, P, div, P + 1 + 10 + 7 * (size_t)i, 1000 + (uint64_t)i, &s[i]);
            seqkv_put_result r = put(db, "alice", "rm", &s[i], 0);
            seqkv_stats st = stats(db, NULL);
            size_t tail = i == 0 ? s[i].n : s[i].n - P;
            char what[64];
            snprintf(what, sizeof what, "chunk %zu P %zu session %d", CH, P, i);
            if (cf[pi].exact || i == 0)
                cr_assert_eq(r.new_tokens, tail, "%s: new_tokens %zu, tail %zu", what, r.new_tokens,
                             tail);
            else
                assert_new(r.new_tokens, s[i].n, P, CH, what);
            unique += tail;
            cr_assert_eq(st.tokens - before.tokens, tail, "%s: unique tokens grow by the tail only",
                         what);
            cr_assert_eq(st.coded_tokens - before.coded_tokens, r.new_tokens,
                         "%s: coded tokens grow by what the put stored", what);
            cr_assert_eq(st.raw_bytes - before.raw_bytes, tail * per);
            cr_assert_eq(st.chunks - before.chunks, r.chunks);
            cr_assert_eq(st.stored_bytes - before.stored_bytes, r.bytes);
            size_t first = i == 0 ? 0 : P / CH, last = (s[i].n + CH - 1) / CH;
            cr_assert_eq(r.chunks, last - first, "%s: %zu records for chunks %zu..%zu", what, r.chunks,
                         first, last);
            if (i > 0) {
                /* the shared prefix is not stored again: what this put
                 * wrote is less than the whole session's raw KV */
                cr_assert_lt(r.bytes, s[i].n * per, "%s wrote %zu bytes", what, r.bytes);
                cr_assert_lt(r.bytes, (s[i].n - P / CH * CH) * per + r.chunks * 1024);
            }
            cr_assert_eq(st.level_tokens[SEQKV_RAW], st.coded_tokens);
            cr_assert_geq(st.coded_tokens, st.tokens);
            before = st;
            /* the same put again stores nothing */
            r = put(db, "alice", "rm", &s[i], 0);
            cr_assert_eq(r.new_tokens, 0);
            cr_assert_eq(r.chunks, 0);
            cr_assert_eq(r.bytes, 0);
            st = stats(db, NULL);
            cr_assert_eq(st.tokens, before.tokens);
            cr_assert_eq(st.coded_tokens, before.coded_tokens);
            cr_assert_eq(st.stored_bytes, before.stored_bytes);
        }
        if (cf[pi].exact) {
            size_t once = s[0].n;
            for (int i = 1; i < N; i++)
                once += s[i].n - P;
            cr_assert_eq(stats(db, NULL).coded_tokens, once,
                         "chunk %zu P %zu: the prefix is coded once", CH, P);
        }
        cr_assert_eq(stats(db, NULL).tokens, unique);
        for (int i = 0; i < N; i++)
            assert_whole(db, "alice", "rm", &tm, &s[i], "session");
        /* the shared prefix alone, and each session's prefix one past it */
        cr_assert_eq(lookup(db, "alice", "rm", pre.tok, P), P);
        for (int i = 0; i < N; i++)
            cr_assert_eq(su_get_check(db, "alice", "rm", &tm, &s[i], P + 1, NULL), 0);
        seqkv_close(db);
        for (int i = 0; i < N; i++)
            su_seq_free(&s[i]);
        su_seq_free(&pre);
    }
    su_model_free(&tm);
}

static int stop_at_first(void *vctx, size_t pos0, size_t n, int layer, const void *k, const void *v)
{
    (*(int *)vctx)++;
    return 4242;
}

Test(store_sharing, longest_prefix_at_token_granularity_inside_and_across_chunks, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    seqkv *db = open_store(tu_path(tmp, "db"), NULL);
    add_profile(db, &tm, "rm", CHUNK, SEQKV_RAW, 0);
    su_seq a;
    su_seq_make(&tm, NULL, 0, 50, 7, &a);
    put(db, "t", "rm", &a, 0);
    int32_t q[80];
    for (size_t k = 1; k <= a.n; k++)
        cr_assert_eq(lookup(db, "t", "rm", a.tok, k), k, "prefix %zu", k);
    /* diverge at every position: inside chunks and on their boundaries */
    for (size_t k = 0; k < a.n; k++) {
        memcpy(q, a.tok, a.n * sizeof(int32_t));
        q[k] = (q[k] + 1) % tm.c->vocab_size;
        cr_assert_eq(lookup(db, "t", "rm", q, a.n), k, "diverge at %zu", k);
    }
    /* a longer query: the whole cached sequence */
    memcpy(q, a.tok, a.n * sizeof(int32_t));
    for (size_t i = a.n; i < 80; i++)
        q[i] = 3;
    cr_assert_eq(lookup(db, "t", "rm", q, 80), a.n);
    /* gets of prefixes that end inside chunks and on boundaries */
    size_t wants[] = {1, 5, 15, 16, 17, 31, 32, 33, 49, 50};
    for (size_t i = 0; i < sizeof wants / sizeof *wants; i++)
        cr_assert_eq(su_get_check(db, "t", "rm", &tm, &a, wants[i], NULL), 0, "want %zu", wants[i]);
    /* want 0 on a longer query: the longest cached prefix */
    size_t cap = su_kv_len(&tm, 80), got = 0;
    uint8_t *out = malloc(cap), *exp = malloc(cap);
    cr_assert_eq(seqkv_get(db, "t", "rm", q, 80, NULL, out, cap, &got), 0, "%s", seqkv_error_detail());
    cr_assert_eq(got, a.n);
    su_expect(&tm, &a, a.n, exp);
    cr_assert_eq(memcmp(out, exp, su_kv_len(&tm, a.n)), 0);
    /* more than cached: NOT_FOUND; a buffer too small: TOO_LARGE with the count */
    cr_assert_eq(seqkv_get(db, "t", "rm", q, 80, &(seqkv_get_opts){.want = 51}, out, cap, &got), SKV_ERR_NOT_FOUND);
    cr_assert_eq(seqkv_get(db, "t", "rm", a.tok, a.n, &(seqkv_get_opts){.want = 20}, out, su_kv_len(&tm, 20) - 1, &got),
                 SKV_ERR_TOO_LARGE);
    cr_assert_eq(got, 20);
    /* a query matching nothing */
    int32_t z[3] = {(a.tok[0] + 1) % tm.c->vocab_size, 1, 2};
    cr_assert_eq(lookup(db, "t", "rm", z, 3), 0);
    cr_assert_eq(seqkv_get(db, "t", "rm", z, 3, NULL, out, cap, &got), SKV_ERR_NOT_FOUND);

    /* a second sequence branching inside chunk 1 (position 20) */
    su_seq b;
    int32_t p[21];
    memcpy(p, a.tok, 20 * sizeof(int32_t));
    p[20] = (a.tok[20] + 5) % tm.c->vocab_size;
    su_seq_make(&tm, p, 21, 45, 8, &b);
    seqkv_put_result r = put(db, "t", "rm", &b, 0);
    assert_new(r.new_tokens, b.n, 20, CHUNK, "a branch inside chunk 1");
    for (size_t k = 1; k <= b.n; k++)
        cr_assert_eq(lookup(db, "t", "rm", b.tok, k), k, "branch prefix %zu", k);
    for (size_t k = 1; k <= a.n; k++)
        cr_assert_eq(lookup(db, "t", "rm", a.tok, k), k, "first sequence still, prefix %zu", k);
    size_t bw[] = {20, 21, 31, 32, 33, 45};
    for (size_t i = 0; i < sizeof bw / sizeof *bw; i++)
        cr_assert_eq(su_get_check(db, "t", "rm", &tm, &b, bw[i], NULL), 0, "branch want %zu", bw[i]);
    assert_whole(db, "t", "rm", &tm, &a, "a");

    /* layer by layer: every (layer, position) exactly once, same bytes */
    for (int which = 0; which < 2; which++) {
        const su_seq *s = which ? &b : &a;
        size_t want = which ? 37 : 50;
        layer_acc acc = {&tm, want, calloc(1, su_kv_len(&tm, want)), calloc((size_t)tm.L, want), 0, 0};
        cr_assert_eq(seqkv_get(db, "t", "rm", s->tok, s->n, &(seqkv_get_opts){.want = want, .on_layer = on_layer, .ctx = &acc}, NULL, 0, &got), 0,
                     "%s", seqkv_error_detail());
        cr_assert_eq(got, want);
        cr_assert_eq(acc.bad, 0);
        for (size_t i = 0; i < (size_t)tm.L * want; i++)
            cr_assert_eq(acc.seen[i], 1, "layer/position %zu delivered once", i);
        su_expect(&tm, s, want, exp);
        cr_assert_eq(memcmp(acc.out, exp, su_kv_len(&tm, want)), 0, "layer-by-layer bytes");
        free(acc.out);
        free(acc.seen);
    }
    int calls = 0;
    cr_assert_eq(seqkv_get(db, "t", "rm", a.tok, a.n, &(seqkv_get_opts){.on_layer = stop_at_first, .ctx = &calls}, NULL, 0, &got), 4242,
                 "the callback's non-zero return is returned");
    cr_assert_eq(calls, 1);
    free(out);
    free(exp);
    seqkv_close(db);
    su_seq_free(&a);
    su_seq_free(&b);
    su_model_free(&tm);
}

Test(store_sharing, a_put_extending_a_cached_sequence_stores_only_the_tail, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    seqkv *db = open_store(tu_path(tmp, "db"), NULL);
    add_profile(db, &tm, "rm", CHUNK, SEQKV_RAW, 0);
    su_seq full;
    su_seq_make(&tm, NULL, 0, 90, 11, &full);
    /* turns: each extends the previous prompt, cut at in-chunk and
     * boundary positions */
    size_t cuts[] = {5, 16, 30, 31, 48, 70, 90};
    size_t prev = 0;
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        su_seq t;
        su_seq_make(&tm, full.tok, cuts[i], cuts[i], 0, &t);
        seqkv_stats b = stats(db, NULL);
        seqkv_put_result r = put(db, "t", "rm", &t, 0);
        cr_assert_eq(r.new_tokens, cuts[i] - prev, "turn %zu: new %zu, want %zu", i, r.new_tokens,
                     cuts[i] - prev);
        seqkv_stats a = stats(db, NULL);
        cr_assert_eq(a.tokens - b.tokens, cuts[i] - prev);
        cr_assert_eq(a.tokens, cuts[i]);
        cr_assert_eq(a.stored_bytes - b.stored_bytes, r.bytes);
        /* every earlier turn is still served whole */
        for (size_t j = 0; j <= i; j++)
            cr_assert_eq(su_get_check(db, "t", "rm", &tm, &full, cuts[j], NULL), 0, "turn %zu, cut %zu",
                         i, cuts[j]);
        prev = cuts[i];
        su_seq_free(&t);
    }
    /* a prefix of what is cached stores nothing */
    su_seq t;
    su_seq_make(&tm, full.tok, 40, 40, 0, &t);
    seqkv_put_result r = put(db, "t", "rm", &t, 0);
    cr_assert_eq(r.new_tokens, 0);
    cr_assert_eq(r.chunks, 0);
    cr_assert_eq(stats(db, NULL).tokens, 90);
    assert_whole(db, "t", "rm", &tm, &full, "full");
    su_seq_free(&t);
    seqkv_close(db);
    su_seq_free(&full);
    su_model_free(&tm);
}

/* ---- persistence ---------------------------------------------------------- */

Test(store_sharing, reopen_after_close_returns_every_entry_bit_exactly, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    const char *dir = tu_path(tmp, "db");
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    seqkv *db = open_store(dir, NULL);
    add_profile(db, &tm, "rm", CHUNK, SEQKV_RAW, 0);
    add_profile(db, &tm, "rm8", 8, SEQKV_RAW, 0);
    seqkv_profile p1 = SEQKV_PROFILE_INIT;
    cr_assert_eq(seqkv_profile_get(db, "rm", &p1), 0);
    enum { NT = 3, NS = 5 };
    const char *tenants[NT] = {"alice", "bob", "carol"};
    su_seq s[NT][NS];
    su_seq base;
    su_seq_make(&tm, NULL, 0, 24, 500, &base);
    for (int t = 0; t < NT; t++)
        for (int i = 0; i < NS; i++) {
            /* half of them share a 24-token prefix, the rest are free */
            if (i % 2)
                session(&tm, &base, 24, (int32_t)(i + 3 * t) % tm.c->vocab_size, 30 + 9 * (size_t)i,
                        (uint64_t)(100 * t + i), &s[t][i]);
            else
                su_seq_make(&tm, NULL, 0, 20 + 13 * (size_t)i + (size_t)t, (uint64_t)(7000 + 100 * t + i),
                            &s[t][i]);
            put(db, tenants[t], i == 4 ? "rm8" : "rm", &s[t][i], 0);
        }
    seqkv_stats before = stats(db, NULL), bt = stats(db, "bob");
    seqkv_close(db);

    for (int round = 0; round < 2; round++) {
        seqkv_options o = {.read_only = round == 1};
        db = open_store(dir, &o);
        seqkv_profile p2 = SEQKV_PROFILE_INIT;
        cr_assert_eq(seqkv_profile_get(db, "rm", &p2), 0);
        cr_assert_eq(memcmp(p1.id, p2.id, 32), 0, "profile identity survives");
        cr_assert_eq(p2.chunk, CHUNK);
        for (int t = 0; t < NT; t++)
            for (int i = 0; i < NS; i++)
                assert_whole(db, tenants[t], i == 4 ? "rm8" : "rm", &tm, &s[t][i],
                             round ? "after reopen read-only" : "after reopen");
        seqkv_stats after = stats(db, NULL), at = stats(db, "bob");
        cr_assert_eq(after.tokens, before.tokens);
        cr_assert_eq(after.coded_tokens, before.coded_tokens);
        cr_assert_eq(after.chunks, before.chunks);
        cr_assert_eq(after.raw_bytes, before.raw_bytes);
        cr_assert_eq(after.stored_bytes, before.stored_bytes);
        cr_assert_eq(after.tenants, before.tenants);
        cr_assert_eq(after.profiles, 2);
        cr_assert_eq(at.tokens, bt.tokens);
        cr_assert_eq(at.stored_bytes, bt.stored_bytes);
        if (round == 1) {
            seqkv_put_result r;
            su_seq x;
            su_seq_make(&tm, NULL, 0, 10, 1, &x);
            cr_assert_neq(seqkv_put(db, "alice", "rm", x.tok, x.n, x.kv, x.kv_len, NULL, &r), 0,
                          "a read-only store refuses puts");
            su_seq_free(&x);
        }
        seqkv_close(db);
    }
    for (int t = 0; t < NT; t++)
        for (int i = 0; i < NS; i++)
            su_seq_free(&s[t][i]);
    su_seq_free(&base);
    su_model_free(&tm);
}
