/* Capacity: eviction under a small budget keeps every remaining prefix
 * decodable, a tenant budget evicts only that tenant, a full map grows or
 * evicts and never fails a put; and del removes only the unshared part. */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "seqkv.h"
#include "skv_delta.h"
#include "storetest.h"
#include "storeutil.h"
#include "testutil.h"

/* ---- capacity ----------------------------------------------------------------------- */

/* Append to a message buffer of cap bytes holding *n; truncates. */
__attribute__((format(printf, 4, 5))) static void append(char *buf, size_t cap, int *n,
                                                         const char *fmt, ...)
{
    if ((size_t)*n + 1 >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + *n, cap - (size_t)*n, fmt, ap);
    va_end(ap);
    if (w > 0)
        *n = (size_t)*n + (size_t)w >= cap ? (int)cap - 1 : *n + w;
}

static void budget_case(const su_model *tm, const char *dir, int chunk, su_seq *s, int F, int PER,
                        uint64_t seed, char *fails, int *nf, size_t cap)
{
    const int N = F * PER;
    const uint64_t budget = 24 << 10;
    seqkv_options o = {.budget = budget};
    key_seed = seed;
    seqkv *db = open_store(dir, &o);
    add_profile(db, tm, "p", chunk, SEQKV_RAW, 0);
    int evicted = 0;
    /* interleave families so that LRU has real choices */
    for (int k = 0; k < N; k++) {
        int i = (k % F) * PER + k / F;
        seqkv_put_result r;
        int rc = seqkv_put(db, "t", "p", s[i].tok, s[i].n, s[i].kv, s[i].kv_len, NULL, &r);
        if (rc) {
            append(fails, cap, nf, " chunk %d key %llu put %d (%zu tokens): %s (%s);",
                            chunk, (unsigned long long)seed, k, s[i].n, seqkv_error_name(rc),
                            seqkv_error_detail());
            continue;
        }
        evicted += r.evicted;
        seqkv_stats st = stats(db, NULL);
        cr_assert_leq(st.stored_bytes, budget, "after put %d: %llu stored > budget", k,
                      (unsigned long long)st.stored_bytes);
        cr_assert_eq(lookup(db, "t", "p", s[i].tok, s[i].n), s[i].n, "the put just made is whole");
        cr_assert_eq(su_get_check(db, "t", "p", tm, &s[i], 0, NULL), 0);
        /* reuse an older one now and then: it becomes recent */
        if (k % 4 == 3) {
            int j = ((k / 4) % F) * PER;
            size_t m = lookup(db, "t", "p", s[j].tok, s[j].n);
            if (m)
                cr_assert_eq(su_get_check(db, "t", "p", tm, &s[j], m, NULL), 0);
        }
    }
    seqkv_stats st = stats(db, NULL);
    cr_assert_gt(evicted, 0, "the budget forced evictions");
    cr_assert_eq(st.evictions, (uint64_t)evicted, "stats count every eviction");
    size_t served;
    all_decodable(db, "t", tm, s, N, &served);
    cr_assert_gt(served, 0);
    seqkv_close(db);
    db = open_store(dir, &o);
    seqkv_stats st2 = stats(db, NULL);
    cr_assert_eq(st2.stored_bytes, st.stored_bytes);
    cr_assert_eq(st2.tokens, st.tokens);
    cr_assert_eq(st2.evictions, st.evictions);
    size_t served2;
    all_decodable(db, "t", tm, s, N, &served2);
    cr_assert_eq(served2, served);
    seqkv_close(db);
    key_seed = 1;
}

Test(store_evict, eviction_under_a_small_budget_keeps_every_remaining_prefix_decodable, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    enum { F = 5, PER = 6, N = F * PER };
    su_seq *s = calloc(N, sizeof *s), *s64 = calloc(N, sizeof *s);
    make_workload(&tm, F, PER, 77, s);
    make_workload_sys(&tm, F, PER, 78, 20, s64); /* system prompts >= 20 tokens */
    char fails[4096];
    int nf = 0;
    for (uint64_t seed = 1; seed <= 3; seed++) {
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/db%llu", tmp, (unsigned long long)seed);
        budget_case(&tm, dir, CHUNK, s, F, PER, seed, fails, &nf, sizeof fails);
        /* sessions branching 20+ tokens into a 64-token chunk */
        snprintf(dir, sizeof dir, "%s/db64-%llu", tmp, (unsigned long long)seed);
        if (seed <= 2)
            budget_case(&tm, dir, 64, s64, F, PER, seed, fails, &nf, sizeof fails);
    }
    cr_assert_eq(nf, 0, "puts smaller than the 24 KiB budget refused:%s", fails);
    /* a record larger than the whole budget is refused */
    seqkv_options tiny = {.budget = 2000};
    seqkv *db = open_store(tu_path(tmp, "tiny"), &tiny);
    add_profile(db, &tm, "p", CHUNK, SEQKV_RAW, 0);
    seqkv_put_result r;
    int rc = seqkv_put(db, "t", "p", s[0].tok, s[0].n, s[0].kv, s[0].kv_len, NULL, &r);
    cr_assert_eq(rc, SKV_ERR_TOO_LARGE, "%d %s", rc, seqkv_error_detail());
    cr_assert_eq(stats(db, NULL).tokens, 0);
    seqkv_close(db);
    for (int i = 0; i < N; i++) {
        su_seq_free(&s[i]);
        su_seq_free(&s64[i]);
    }
    free(s);
    free(s64);
    su_model_free(&tm);
}

/* A put smaller than the budget is never refused: eviction finds room
 * (or re-codes what it must keep). Several master keys, because keys
 * decide which of two equally good records a match or an eviction picks;
 * chunks of 16 with short system prompts, and chunks of 64 that sessions
 * leave 20+ tokens in (their records then take those tokens from a
 * sibling: a base that must not pin the tenant's whole budget). */
Test(store_evict, a_tenant_budget_evicts_only_that_tenant, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    enum { F = 3, PER = 5, N = F * PER };
    su_seq *s16 = calloc(N, sizeof *s16), *s64 = calloc(N, sizeof *s64);
    make_workload(&tm, F, PER, 99, s16);
    make_workload_sys(&tm, F, PER, 99, 20, s64);
    char fails[4096];
    int nf = 0;
    const struct {
        int chunk;
        uint64_t seed;
    } cf[] = {{16, 1}, {16, 2}, {16, 32}, {64, 1}, {64, 2}}; /* (16, 32): a put once found
                                                                 nothing evictable */
    for (size_t ci = 0; ci < sizeof cf / sizeof *cf; ci++) {
        const uint64_t seed = cf[ci].seed;
        su_seq *s = cf[ci].chunk == 16 ? s16 : s64;
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/db%d-%llu", tmp, cf[ci].chunk, (unsigned long long)seed);
        key_seed = seed;
        seqkv *db = open_store(dir, NULL);
        add_profile(db, &tm, "p", cf[ci].chunk, SEQKV_RAW, 0);
        const uint64_t tb = 16 << 10;
        seqkv_tenant_conf c = {.budget = tb};
        cr_assert_eq(seqkv_tenant_set(db, "small", &c), 0);
        int refused = 0;
        for (int i = 0; i < N; i++) {
            put(db, "big", "p", &s[i], 0);
            seqkv_put_result r;
            int rc = seqkv_put(db, "small", "p", s[i].tok, s[i].n, s[i].kv, s[i].kv_len, NULL, &r);
            if (rc) {
                refused++;
                append(fails, sizeof fails, &nf,
                               " chunk %d key %llu put %d (%zu tokens): %s (%s);", cf[ci].chunk,
                               (unsigned long long)seed, i, s[i].n, seqkv_error_name(rc),
                               seqkv_error_detail());
                continue;
            }
            cr_assert_leq(stats(db, "small").stored_bytes, tb);
            cr_assert_eq(lookup(db, "small", "p", s[i].tok, s[i].n), s[i].n);
        }
        if (!refused)
            cr_assert_gt(stats(db, NULL).evictions, 0);
        for (int i = 0; i < N; i++)
            assert_whole(db, "big", "p", &tm, &s[i], "the unlimited tenant keeps everything");
        size_t served;
        all_decodable(db, "small", &tm, s, N, &served);
        cr_assert_gt(served, 0);
        seqkv_close(db);
    }
    key_seed = 1;
    cr_assert_eq(nf, 0, "puts refused under a 16 KiB tenant budget (each is smaller):%s", fails);
    for (int i = 0; i < N; i++) {
        su_seq_free(&s16[i]);
        su_seq_free(&s64[i]);
    }
    free(s16);
    free(s64);
    su_model_free(&tm);
}

Test(store_evict, a_full_map_grows_or_evicts_and_never_fails_a_put, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    enum { F = 8, PER = 8, N = F * PER };
    su_seq *s = calloc(N, sizeof *s);
    make_workload(&tm, F, PER, 5, s);
    size_t total = 0;
    for (int i = 0; i < N; i++)
        total += s[i].kv_len;
    cr_assert_gt(total, 256 << 10);
    /* growth: a tiny initial map */
    seqkv_options g = {.map_size = 64 << 10, .map_max = 64 << 20};
    seqkv *db = open_store(tu_path(tmp, "grow"), &g);
    add_profile(db, &tm, "p", CHUNK, SEQKV_RAW, 0);
    uint64_t map0 = stats(db, NULL).map_size;
    for (int i = 0; i < N; i++)
        put(db, "t", "p", &s[i], 0);
    seqkv_stats st = stats(db, NULL);
    cr_assert_gt(st.map_size, map0, "the map grew (%llu -> %llu)", (unsigned long long)map0,
                 (unsigned long long)st.map_size);
    cr_assert_eq(st.evictions, 0);
    for (int i = 0; i < N; i++)
        assert_whole(db, "t", "p", &tm, &s[i], "grown");
    seqkv_close(db);
    /* a map limit below the data and no budget: eviction makes room */
    enum { N2 = 2 * N };
    su_seq *s2 = calloc(N2, sizeof *s2);
    make_workload(&tm, 2 * F, PER, 555, s2);
    /* (records in LMDB, also in the _vfile runs: value files take no map
     * space, so a map of their stubs would not fill) */
    seqkv_options lim = {.map_size = 128 << 10, .map_max = MAP_LIMIT, .file_min = UINT64_MAX};
    db = open_store(tu_path(tmp, "limit"), &lim);
    add_profile(db, &tm, "p", CHUNK, SEQKV_RAW, 0);
    for (int i = 0; i < N2; i++) {
        put(db, "t", "p", &s2[i], 0);
        cr_assert_eq(lookup(db, "t", "p", s2[i].tok, s2[i].n), s2[i].n);
    }
    st = stats(db, NULL);
    cr_assert_gt(st.evictions, 0);
    cr_assert_leq(st.map_size, MAP_LIMIT);
    size_t served;
    all_decodable(db, "t", &tm, s2, N2, &served);
    seqkv_close(db);
    db = open_store(tu_path(tmp, "limit"), &lim);
    all_decodable(db, "t", &tm, s2, N2, &served);
    seqkv_close(db);
    for (int i = 0; i < N2; i++)
        su_seq_free(&s2[i]);
    free(s2);
    for (int i = 0; i < N; i++)
        su_seq_free(&s[i]);
    free(s);
    su_model_free(&tm);
}

/* ---- del ------------------------------------------------------------------------------ */

Test(store_evict, del_removes_only_the_unshared_part, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    const size_t P[2] = {32, 37};
    for (int pi = 0; pi < 2; pi++) {
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/db%d", tmp, pi);
        seqkv *db = open_store(dir, NULL);
        add_profile(db, &tm, "p", CHUNK, SEQKV_RAW, 0);
        su_seq pre, a, b, other;
        su_seq_make(&tm, NULL, 0, P[pi], 40 + (uint64_t)pi, &pre);
        session(&tm, &pre, P[pi], 3, 70, 41, &a);
        session(&tm, &pre, P[pi], 4, 60, 42, &b);
        int32_t first = (pre.tok[0] + 1) % tm.c->vocab_size; /* nothing in common */
        su_seq_make(&tm, &first, 1, 30, 43, &other);
        put(db, "t", "p", &a, 0);
        put(db, "t", "p", &b, 0);
        put(db, "u", "p", &a, 0); /* another tenant's copy */
        put(db, "t", "p", &other, 0);
        seqkv_stats s0 = stats(db, "t");
        size_t removed;
        /* a prefix of a stored sequence: nothing of it is unshared */
        cr_assert_eq(seqkv_del(db, "t", "p", pre.tok, P[pi] - 3, &removed), 0);
        cr_assert_eq(removed, 0);
        cr_assert_eq(stats(db, "t").tokens, s0.tokens);
        /* a: its tail goes, the shared prefix and b stay */
        cr_assert_eq(seqkv_del(db, "t", "p", a.tok, a.n, &removed), 0, "%s", seqkv_error_detail());
        size_t m = lookup(db, "t", "p", a.tok, a.n);
        cr_assert_geq(m, P[pi], "P %zu: the shared prefix stays (%zu)", P[pi], m);
        cr_assert_lt(m, a.n, "P %zu: a's tail is gone", P[pi]);
        /* the removed tokens are no longer served, except a shared start
         * of a chunk that another record holds too */
        cr_assert_geq(removed, a.n - m, "P %zu: removed %zu, no longer served %zu", P[pi], removed,
                      a.n - m);
        cr_assert_leq(removed, a.n - P[pi] / CHUNK * CHUNK, "P %zu: removed %zu", P[pi], removed);
        if (P[pi] % CHUNK == 0)
            cr_assert_eq(m, P[pi], "a boundary-aligned prefix: exactly the unshared part goes");
        cr_assert_eq(stats(db, "t").coded_tokens, s0.coded_tokens - removed);
        cr_assert_eq(stats(db, "t").tokens, s0.tokens - (a.n - m), "unique tokens: what is no "
                     "longer served");
        cr_assert_eq(su_get_check(db, "t", "p", &tm, &a, m, NULL), 0);
        assert_whole(db, "t", "p", &tm, &b, "b after del of a");
        assert_whole(db, "t", "p", &tm, &other, "other after del of a");
        assert_whole(db, "u", "p", &tm, &a, "u's copy of a");
        /* again: nothing left to remove */
        cr_assert_eq(seqkv_del(db, "t", "p", a.tok, a.n, &removed), 0);
        cr_assert_eq(removed, 0);
        /* b: now nothing else needs the prefix: all of b goes */
        cr_assert_eq(seqkv_del(db, "t", "p", b.tok, b.n, &removed), 0);
        cr_assert_eq(lookup(db, "t", "p", b.tok, b.n), 0, "P %zu: all of b is gone", P[pi]);
        cr_assert_eq(lookup(db, "t", "p", a.tok, a.n), 0);
        assert_whole(db, "t", "p", &tm, &other, "other after del of b");
        cr_assert_eq(stats(db, "t").tokens, other.n);
        cr_assert_eq(seqkv_del(db, "nobody", "p", b.tok, b.n, &removed), SKV_ERR_NOT_FOUND);
        seqkv_close(db);
        /* durable */
        db = open_store(dir, NULL);
        cr_assert_eq(lookup(db, "t", "p", b.tok, b.n), 0);
        cr_assert_eq(stats(db, "t").tokens, other.n);
        assert_whole(db, "u", "p", &tm, &a, "u's copy after reopen");
        seqkv_close(db);
        su_seq_free(&pre);
        su_seq_free(&a);
        su_seq_free(&b);
        su_seq_free(&other);
    }
    su_model_free(&tm);
}
