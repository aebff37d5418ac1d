/* The store (seqkv.h) on real model KV -- a seeded random llama2.c model
 * always, stories260K when present. Lossless means bit-exact: every GET is
 * compared byte for byte with the KV that was PUT.
 *
 * Sharing (N sessions store a shared prefix once; extensions store only
 * the tail), the longest prefix at token granularity, reopen, every level
 * the build can do, corruption (never wrong KV), tenant isolation and the
 * opt-in shared namespace, refused inputs, eviction under a budget, map
 * growth, del, the format-version record, concurrent readers. The kill -9
 * test is in crash_put.c. */
#include <criterion/criterion.h>
#include <lmdb.h>
#include <pthread.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "seqkv.h"
#include "skv_delta.h"
#include "storeutil.h"
#include "testutil.h"

#define CHUNK 16

/* Stores are made with master keys derived from this seed, so that every
 * run is the same run (keys decide the order of the store's tables). */
static uint64_t key_seed = 1;

static seqkv *open_store(const char *dir, const seqkv_options *o)
{
    if (!o || !o->read_only)
        su_master_key(dir, key_seed);
    seqkv_options d = {0};
    if (o)
        d = *o;
    d.quiet = 1;
    seqkv *db = NULL;
    int rc = seqkv_open(dir, &d, &db);
    cr_assert_eq(rc, 0, "open %s: %d %s", dir, rc, skv_error_detail());
    cr_assert_not_null(db);
    return db;
}

static void add_profile(seqkv *db, const su_model *tm, const char *name, int chunk,
                        seqkv_level level, int with_model)
{
    seqkv_profile p;
    su_profile(tm, name, chunk, level, with_model, &p);
    cr_assert_eq(seqkv_profile_set(db, &p), 0, "profile %s: %s", name, skv_error_detail());
    seqkv_profile q;
    cr_assert_eq(seqkv_profile_get(db, name, &q), 0);
    cr_assert_eq(q.chunk, chunk);
    cr_assert_eq(q.layers, tm->L);
}

/* level: 0 the profile's, else 1 + a seqkv_level */
static seqkv_put_result put(seqkv *db, const char *tenant, const char *prof, const su_seq *s,
                            int level)
{
    seqkv_put_result r;
    seqkv_put_opts o = {.has_level = level > 0, .level = (seqkv_level)(level > 0 ? level - 1 : 0)};
    int rc = seqkv_put(db, tenant, prof, s->tok, s->n, s->kv, s->kv_len, &o, &r);
    cr_assert_eq(rc, 0, "put of %zu tokens: %d %s", s->n, rc, skv_error_detail());
    return r;
}

static size_t lookup(seqkv *db, const char *tenant, const char *prof, const int32_t *tok, size_t n)
{
    size_t m = 12345;
    int rc = seqkv_lookup(db, tenant, prof, tok, n, &m);
    cr_assert_eq(rc, 0, "lookup: %d %s", rc, skv_error_detail());
    return m;
}

/* lookup == full length and get of every token bit-exact */
static void assert_whole(seqkv *db, const char *tenant, const char *prof, const su_model *tm,
                         const su_seq *s, const char *what)
{
    cr_assert_eq(lookup(db, tenant, prof, s->tok, s->n), s->n, "%s: lookup", what);
    size_t got;
    int rc = su_get_check(db, tenant, prof, tm, s, s->n, &got);
    cr_assert_eq(rc, 0, "%s: get of %zu tokens: %d %s", what, s->n, rc, skv_error_detail());
    cr_assert_eq(su_get_check(db, tenant, prof, tm, s, 0, &got), 0, "%s: get of the longest", what);
    cr_assert_eq(got, s->n);
}

static seqkv_stats stats(seqkv *db, const char *tenant)
{
    seqkv_stats st;
    int rc = seqkv_stat(db, tenant, &st);
    cr_assert_eq(rc, 0, "stat: %d %s", rc, skv_error_detail());
    return st;
}

/* A session: prefix[0..np) + one token that no other session of the set
 * has at that position (div), continued by sampling to n tokens. */
static void session(const su_model *tm, const su_seq *prefix, size_t np, int32_t div, size_t n,
                    uint64_t seed, su_seq *s)
{
    int32_t p[512];
    memcpy(p, prefix->tok, np * sizeof(int32_t));
    p[np] = div;
    su_seq_make(tm, p, np + 1, n, seed, s);
}

/* The tokens a put of n tokens whose longest cached prefix is m stores:
 * the tail n - m; when m ends inside a chunk, the store may code the
 * chunk's shared start again instead of taking it from the sibling record
 * (store/put.c: a shared start shorter than SKV_MIN_BASE = 16 tokens
 * that the new record does not simply extend), so up to m mod chunk more. */
static void assert_new(size_t got, size_t n, size_t m, size_t chunk, const char *what)
{
    size_t lo = n - m, hi = n - m / chunk * chunk;
    if (m % chunk >= 16)
        hi = lo;
    cr_assert(got >= lo && got <= hi, "%s: put stored %zu new tokens; the tail is %zu (at most %zu)",
              what, got, lo, hi);
}

/* ---- sharing ------------------------------------------------------------ */

Test(store, sessions_sharing_a_prefix_store_it_once, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SKV_DT_BF16);
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

typedef struct {
    const su_model *tm;
    size_t want;
    uint8_t *out;
    uint8_t *seen; /* [layer][pos] */
    int calls, bad;
} layer_acc;

static int on_layer(void *vctx, size_t pos0, size_t n, int layer, const void *k, const void *v)
{
    layer_acc *a = vctx;
    const size_t row = a->tm->row;
    if (layer < 0 || layer >= a->tm->L || pos0 + n > a->want || n == 0) {
        a->bad++;
        return 0;
    }
    for (size_t p = pos0; p < pos0 + n; p++)
        a->bad += a->seen[(size_t)layer * a->want + p]++ != 0;
    memcpy(a->out + ((size_t)layer * 2 * a->want + pos0) * row, k, n * row);
    memcpy(a->out + (((size_t)layer * 2 + 1) * a->want + pos0) * row, v, n * row);
    a->calls++;
    return 0;
}

static int stop_at_first(void *vctx, size_t pos0, size_t n, int layer, const void *k, const void *v)
{
    (*(int *)vctx)++;
    return 4242;
}

Test(store, longest_prefix_at_token_granularity_inside_and_across_chunks, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SKV_DT_BF16);
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
    cr_assert_eq(seqkv_get(db, "t", "rm", q, 80, 0, out, cap, &got), 0, "%s", skv_error_detail());
    cr_assert_eq(got, a.n);
    su_expect(&tm, &a, a.n, exp);
    cr_assert_eq(memcmp(out, exp, su_kv_len(&tm, a.n)), 0);
    /* more than cached: NOT_FOUND; a buffer too small: TOO_LARGE with the count */
    cr_assert_eq(seqkv_get(db, "t", "rm", q, 80, 51, out, cap, &got), SKV_ERR_NOT_FOUND);
    cr_assert_eq(seqkv_get(db, "t", "rm", a.tok, a.n, 20, out, su_kv_len(&tm, 20) - 1, &got),
                 SKV_ERR_TOO_LARGE);
    cr_assert_eq(got, 20);
    /* a query matching nothing */
    int32_t z[3] = {(a.tok[0] + 1) % tm.c->vocab_size, 1, 2};
    cr_assert_eq(lookup(db, "t", "rm", z, 3), 0);
    cr_assert_eq(seqkv_get(db, "t", "rm", z, 3, 0, out, cap, &got), SKV_ERR_NOT_FOUND);

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
        cr_assert_eq(seqkv_get_layers(db, "t", "rm", s->tok, s->n, want, on_layer, &acc, &got), 0,
                     "%s", skv_error_detail());
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
    cr_assert_eq(seqkv_get_layers(db, "t", "rm", a.tok, a.n, 0, stop_at_first, &calls, &got), 4242,
                 "the callback's non-zero return is returned");
    cr_assert_eq(calls, 1);
    free(out);
    free(exp);
    seqkv_close(db);
    su_seq_free(&a);
    su_seq_free(&b);
    su_model_free(&tm);
}

Test(store, a_put_extending_a_cached_sequence_stores_only_the_tail, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SKV_DT_BF16);
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

Test(store, reopen_after_close_returns_every_entry_bit_exactly, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    const char *dir = tu_path(tmp, "db");
    su_model tm;
    su_random_model(&tm, tmp, SKV_DT_BF16);
    seqkv *db = open_store(dir, NULL);
    add_profile(db, &tm, "rm", CHUNK, SEQKV_RAW, 0);
    add_profile(db, &tm, "rm8", 8, SEQKV_RAW, 0);
    seqkv_profile p1;
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
        seqkv_profile p2;
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

/* ---- levels ----------------------------------------------------------------- */

typedef struct {
    su_seq s[64];
    int n;
} seqlist;

/* The longest prefix of s that the stored sequences provide. */
static size_t cached_of(const seqlist *L, const su_seq *s)
{
    size_t best = 0;
    for (int i = 0; i < L->n; i++) {
        size_t m = su_lcp(L->s[i].tok, L->s[i].n, s->tok, s->n);
        if (m > best)
            best = m;
    }
    return best;
}

/* Put `count` new sequences at level l (opts.level = l + 1) and check that
 * they are coded at that level and come back bit-exactly. */
static void level_case(seqkv *db, const su_model *tm, seqlist *L, seqkv_level l, int count,
                       size_t len, uint64_t seed)
{
    for (int i = 0; i < count; i++) {
        su_seq *s = &L->s[L->n];
        su_seq_make(tm, NULL, 0, len + (size_t)(5 * i), seed + (uint64_t)i, s);
        size_t m = cached_of(L, s);
        seqkv_stats b = stats(db, NULL);
        seqkv_put_result r = put(db, "t", "p", s, (int)l + 1);
        L->n++;
        seqkv_stats a = stats(db, NULL);
        assert_new(r.new_tokens, s->n, m, CHUNK, seqkv_level_name(l));
        size_t want_new = r.new_tokens;
        cr_assert_eq(a.level_tokens[l] - b.level_tokens[l], want_new,
                     "%s: the new tokens are coded at the level asked for (%llu of %zu)",
                     seqkv_level_name(l),
                     (unsigned long long)(a.level_tokens[l] - b.level_tokens[l]), want_new);
        assert_whole(db, "t", "p", tm, s, seqkv_level_name(l));
    }
}

static void levels_on(su_model *tm, int count, size_t len, int check_ratio)
{
    const char *tmp = tu_tmpdir();
    const char *dir = tu_path(tmp, "db");
    seqkv *db = open_store(dir, NULL);
    add_profile(db, tm, "p", CHUNK, SEQKV_RAW, 1);
    static seqlist L;
    memset(&L, 0, sizeof L);
    /* raw: always; a level above raw before any calibration codes raw */
    level_case(db, tm, &L, SEQKV_RAW, 6, len, 100);
    su_seq *s = &L.s[L.n];
    su_seq_make(tm, NULL, 0, len, 150, s);
    size_t m = cached_of(&L, s);
    seqkv_stats b = stats(db, NULL);
    size_t nw = put(db, "t", "p", s, SEQKV_CTX + 1).new_tokens;
    assert_new(nw, s->n, m, CHUNK, "ctx before calibration");
    L.n++;
    cr_assert_eq(stats(db, NULL).level_tokens[SEQKV_RAW] - b.level_tokens[SEQKV_RAW], nw,
                 "no calibration yet: coded raw");
    assert_whole(db, "t", "p", tm, s, "ctx before calibration");

    cr_assert_eq(seqkv_calibrate(db, "p", 4), 0, "calibrate: %s", skv_error_detail());
    seqkv_profile pr;
    cr_assert_eq(seqkv_profile_get(db, "p", &pr), 0);
    cr_assert(pr.has_calib);
    for (int l = SEQKV_STAT; l < SEQKV_LEVELS; l++)
        level_case(db, tm, &L, (seqkv_level)l, count, len, 1000 + 100 * (uint64_t)l);
    /* the profile's level as the default */
    pr.level = SEQKV_CTX;
    cr_assert_eq(seqkv_profile_set(db, &pr), 0, "%s", skv_error_detail());
    s = &L.s[L.n];
    su_seq_make(tm, NULL, 0, len, 9000, s);
    m = cached_of(&L, s);
    b = stats(db, NULL);
    nw = put(db, "t", "p", s, 0).new_tokens;
    assert_new(nw, s->n, m, CHUNK, "the profile's level");
    L.n++;
    cr_assert_eq(stats(db, NULL).level_tokens[SEQKV_CTX] - b.level_tokens[SEQKV_CTX], nw);
    seqkv_stats all = stats(db, NULL);
    if (check_ratio)
        for (int l = SEQKV_CTX; l < SEQKV_LEVELS; l++)
            cr_assert_lt(all.level_stored[l], all.level_raw[l], "%s stores less than raw (%llu/%llu)",
                         seqkv_level_name((seqkv_level)l), (unsigned long long)all.level_stored[l],
                         (unsigned long long)all.level_raw[l]);
    seqkv_close(db);
    /* every level decodes after reopen (coders rebuilt from LMDB) */
    db = open_store(dir, NULL);
    for (int i = 0; i < L.n; i++)
        assert_whole(db, "t", "p", tm, &L.s[i], "reopened");
    seqkv_close(db);
    for (int i = 0; i < L.n; i++)
        su_seq_free(&L.s[i]);
}

Test(store, every_level_round_trips_on_random_model_kv, .timeout = 300)
{
    su_model tm;
    su_random_model(&tm, tu_tmpdir(), SKV_DT_BF16);
    levels_on(&tm, 2, 40, 0);
    su_model_free(&tm);
}

Test(store, every_level_round_trips_on_stories260k, .timeout = 300)
{
    su_model tm;
    if (su_shared_model(&tm, "stories260K.bin", SKV_DT_BF16))
        cr_skip("../shared/models/stories260K.bin not present");
    levels_on(&tm, 1, 64, 1);
    su_model_free(&tm);
}

Test(store, an_imported_calibration_codes_and_a_foreign_one_is_refused, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SKV_DT_BF16);
    /* learn a calibration outside the store, from a KV file */
    skv_st_writer *w;
    cr_assert_eq(skv_stw_create(&w), 0);
    su_seq cal[6];
    for (int i = 0; i < 6; i++) {
        su_seq_make(&tm, NULL, 0, 48, 300 + (uint64_t)i, &cal[i]);
        /* back to the KV file layout [layers][T][C] for K and V */
        size_t blk = cal[i].n * tm.row;
        uint8_t *k = malloc((size_t)tm.L * blk), *v = malloc((size_t)tm.L * blk);
        for (int l = 0; l < tm.L; l++) {
            memcpy(k + (size_t)l * blk, cal[i].kv + 2 * (size_t)l * blk, blk);
            memcpy(v + (size_t)l * blk, cal[i].kv + (2 * (size_t)l + 1) * blk, blk);
        }
        skv_kvseq q = {cal[i].n, cal[i].tok, tm.dt, tm.L, tm.c->n_kv_heads, tm.c->head_dim, k, v};
        cr_assert_eq(skv_kvfile_add(w, (size_t)i, &q), 0);
        free(k);
        free(v);
    }
    uint8_t *img;
    size_t len;
    cr_assert_eq(skv_stw_serialize(w, &img, &len), 0);
    skv_stw_free(w);
    skv_st *st;
    cr_assert_eq(skv_st_parse(img, len, &st), 0);
    skv_calib *c;
    skv_calib_opts co = {.model = NULL, .max_fit_samples = 128, .quiet = 1};
    cr_assert_eq(skv_calib_learn(st, &co, &c), 0, "%s", skv_error_detail());
    const char *cpath = tu_path(tmp, "c.cal");
    cr_assert_eq(skv_calib_save(c, cpath), 0);
    skv_calib_free(c);
    skv_st_free(st);
    free(img);

    seqkv *db = open_store(tu_path(tmp, "db"), NULL);
    add_profile(db, &tm, "p", CHUNK, SEQKV_CTX, 0);
    cr_assert_eq(seqkv_calibrate_import(db, "nope", cpath), SKV_ERR_NOT_FOUND);
    cr_assert_eq(seqkv_calibrate_import(db, "p", cpath), 0, "%s", skv_error_detail());
    seqkv_profile pr;
    cr_assert_eq(seqkv_profile_get(db, "p", &pr), 0);
    cr_assert(pr.has_calib);
    for (int i = 0; i < 6; i++) {
        seqkv_put_result r = put(db, "t", "p", &cal[i], 0);
        cr_assert_gt(r.new_tokens, 0);
        assert_whole(db, "t", "p", &tm, &cal[i], "imported ctx");
    }
    seqkv_stats sa = stats(db, NULL);
    cr_assert_eq(sa.level_tokens[SEQKV_CTX], sa.coded_tokens, "coded at ctx (%llu of %llu)",
                 (unsigned long long)sa.level_tokens[SEQKV_CTX], (unsigned long long)sa.coded_tokens);
    /* the same calibration for an fp16 profile: another dtype, refused */
    su_model t16 = tm;
    t16.dt = SKV_DT_F16;
    t16.row = tm.C * 2;
    add_profile(db, &t16, "p16", CHUNK, SEQKV_CTX, 0);
    cr_assert_eq(seqkv_calibrate_import(db, "p16", cpath), SKV_ERR_SHAPE);
    cr_assert_eq(seqkv_profile_get(db, "p16", &pr), 0);
    cr_assert(!pr.has_calib);
    seqkv_close(db);
    for (int i = 0; i < 6; i++)
        su_seq_free(&cal[i]);
    su_model_free(&tm);
}

/* ---- corruption ---------------------------------------------------------------- */

/* Write rec under key from another process while the store is open. */
static void put_from_child(const char *dir, const uint8_t key[32], const uint8_t *rec, size_t len)
{
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        su_chunk_put(dir, key, rec, len);
        _exit(0);
    }
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child writer failed");
}

static void refresh_trailer(uint8_t *rec, size_t len)
{
    crypto_generichash(rec + len - 16, 16, rec, len - 16, NULL, 0);
}

enum { LIVE, VERSION_BYTE, REOPENED };

/* Store a and b at `level`, then damage the record of a's chunk 2
 * (positions 32..47): LIVE, bytes flipped one at a time while the store is
 * open (written by another process); VERSION_BYTE, the record's version
 * byte; REOPENED, damaged while the store is closed, then reopened. */
static void corruption_on(seqkv_level level, int part)
{
    const char *tmp = tu_tmpdir();
    const char *dir = tu_path(tmp, "db");
    char dirc[4200];
    snprintf(dirc, sizeof dirc, "%s", dir);
    su_model tm;
    su_random_model(&tm, tmp, SKV_DT_BF16);
    seqkv *db = open_store(dirc, NULL);
    add_profile(db, &tm, "p", CHUNK, SEQKV_RAW, 0);
    su_seq a, b;
    su_seq_make(&tm, NULL, 0, 60, 21, &a);
    int32_t first = (a.tok[0] + 1) % tm.c->vocab_size; /* b shares nothing with a */
    su_seq_make(&tm, &first, 1, 40, 22, &b);
    if (level > SEQKV_RAW) {
        su_seq c[4];
        for (int i = 0; i < 4; i++) {
            su_seq_make(&tm, NULL, 0, 40, 30 + (uint64_t)i, &c[i]);
            put(db, "cal", "p", &c[i], 0);
            su_seq_free(&c[i]);
        }
        cr_assert_eq(seqkv_calibrate(db, "p", 0), 0, "%s", skv_error_detail());
    }
    put(db, "t", "p", &a, (int)level + 1);
    put(db, "t", "p", &b, (int)level + 1);
    assert_whole(db, "t", "p", &tm, &a, "before");
    seqkv_stats st = stats(db, "t");
    cr_assert_eq(st.level_tokens[level], st.coded_tokens, "coded at %s", seqkv_level_name(level));
    uint8_t key[32];
    cr_assert_eq(su_chunk_find(dirc, 2, a.tok + 32, CHUNK, key), 0, "chunk 2 of a in LMDB");
    size_t len;
    uint8_t *orig = su_chunk_get(dirc, key, &len);
    cr_assert_not_null(orig);
    uint8_t *bad = malloc(len);
    size_t cap = su_kv_len(&tm, a.n), got;
    uint8_t *out = malloc(cap);
    if (part == LIVE) {
        /* header fields, tokens, sizes, streams, trailer */
        size_t offs[] = {0, 6, 7, 8, 20, 50, 90, 150, 160, 164, 168, 172, 176, 186, 192, 196,
                         192 + 4 * CHUNK + 3, len / 2, len - 40, len - 17, len - 16, len - 1};
        for (size_t i = 0; i < sizeof offs / sizeof *offs; i++) {
            memcpy(bad, orig, len);
            bad[offs[i]] ^= 0x24;
            put_from_child(dirc, key, bad, len);
            int rc = seqkv_get(db, "t", "p", a.tok, a.n, a.n, out, cap, &got);
            cr_assert_eq(rc, SKV_ERR_CORRUPT, "%s: flipped byte %zu of %zu: get returned %s (%s)",
                         seqkv_level_name(level), offs[i], len, skv_error_name(rc),
                         skv_error_detail());
            cr_assert_eq(got, 0);
            cr_assert_eq(seqkv_get(db, "t", "p", a.tok, a.n, 0, out, cap, &got), SKV_ERR_CORRUPT);
            layer_acc acc = {&tm, a.n, calloc(1, cap), calloc((size_t)tm.L, a.n), 0, 0};
            cr_assert_eq(seqkv_get_layers(db, "t", "p", a.tok, a.n, a.n, on_layer, &acc, &got),
                         SKV_ERR_CORRUPT, "layer by layer too");
            for (size_t p = 32; p < 48; p++)
                cr_assert_eq(acc.seen[p], 0, "nothing of the damaged chunk is delivered");
            free(acc.out);
            free(acc.seen);
            /* what does not need the damaged record is still served */
            cr_assert_eq(lookup(db, "t", "p", a.tok, a.n), a.n);
            cr_assert_eq(su_get_check(db, "t", "p", &tm, &a, 32, NULL), 0);
            assert_whole(db, "t", "p", &tm, &b, "b is intact");
        }
        /* a stream byte changed and the record checksum recomputed: the
         * checksum of the decoded bytes catches it */
        size_t soffs[] = {len - 17, len - 30, len - 100};
        for (size_t i = 0; i < sizeof soffs / sizeof *soffs; i++) {
            memcpy(bad, orig, len);
            bad[soffs[i]] ^= 0x01;
            refresh_trailer(bad, len);
            put_from_child(dirc, key, bad, len);
            int rc = seqkv_get(db, "t", "p", a.tok, a.n, a.n, out, cap, &got);
            cr_assert_eq(rc, SKV_ERR_CORRUPT, "%s: stream byte %zu changed under a valid record "
                         "checksum: get returned %s (%s)", seqkv_level_name(level), soffs[i],
                         skv_error_name(rc), skv_error_detail());
        }
        /* restored: served again */
        put_from_child(dirc, key, orig, len);
        assert_whole(db, "t", "p", &tm, &a, "restored");
        seqkv_close(db);
    } else if (part == VERSION_BYTE) {
        memcpy(bad, orig, len);
        bad[4] ^= 0x24; /* the record's version: damage, not a newer writer */
        put_from_child(dirc, key, bad, len);
        int rc = seqkv_get(db, "t", "p", a.tok, a.n, a.n, out, cap, &got);
        cr_assert_neq(rc, 0, "never wrong KV");
        cr_assert_eq(rc, SKV_ERR_CORRUPT, "%s: a flipped version byte in a record (its checksum "
                     "no longer matches): get returned %s (%s)", seqkv_level_name(level),
                     skv_error_name(rc), skv_error_detail());
        seqkv_close(db);
    } else {
        seqkv_close(db);
        /* a stream change under a valid record checksum: indexed at open,
         * caught by GET */
        memcpy(bad, orig, len);
        bad[len - 30] ^= 0x10;
        refresh_trailer(bad, len);
        su_chunk_put(dirc, key, bad, len);
        db = open_store(dirc, NULL);
        cr_assert_eq(lookup(db, "t", "p", a.tok, a.n), a.n);
        int rc = seqkv_get(db, "t", "p", a.tok, a.n, a.n, out, cap, &got);
        cr_assert_eq(rc, SKV_ERR_CORRUPT, "after reopen: %s (%s)", skv_error_name(rc),
                     skv_error_detail());
        seqkv_close(db);
        /* a flip the record checksum sees */
        memcpy(bad, orig, len);
        bad[len / 2] ^= 0x10;
        su_chunk_put(dirc, key, bad, len);
        db = open_store(dirc, NULL);
        rc = seqkv_get(db, "t", "p", a.tok, a.n, a.n, out, cap, &got);
        char detail[512];
        snprintf(detail, sizeof detail, "%s", skv_error_detail());
        cr_assert(rc == SKV_ERR_CORRUPT || rc == SKV_ERR_NOT_FOUND,
                  "after reopen, a damaged record: never wrong KV (%s, %s)", skv_error_name(rc), detail);
        size_t m = lookup(db, "t", "p", a.tok, a.n);
        /* what does not need the damaged record is exact; what does fails */
        if (m > 32)
            cr_assert_eq(su_get_check(db, "t", "p", &tm, &a, m, NULL), SKV_ERR_CORRUPT,
                         "lookup %zu reaches the damaged record", m);
        cr_assert_geq(m, 32, "the records before the damaged one are still found");
        cr_assert_eq(su_get_check(db, "t", "p", &tm, &a, 32, NULL), 0, "the first 32 tokens are exact");
        assert_whole(db, "t", "p", &tm, &b, "b after reopen");
        seqkv_close(db);
        cr_assert_eq(rc, SKV_ERR_CORRUPT,
                     "%s: damaged while closed, reopened: a GET that needs the record should fail "
                     "with a checksum error; got %s (%s), lookup now %zu of %zu",
                     seqkv_level_name(level), skv_error_name(rc), detail, m, a.n);
    }
    free(out);
    free(bad);
    free(orig);
    su_seq_free(&a);
    su_seq_free(&b);
    su_model_free(&tm);
}

Test(store, flipped_bytes_of_a_raw_record_fail_get_with_corrupt, .timeout = 120)
{
    corruption_on(SEQKV_RAW, LIVE);
}

Test(store, flipped_bytes_of_a_coded_record_fail_get_with_corrupt, .timeout = 120)
{
    corruption_on(SEQKV_CTX, LIVE);
}

Test(store, a_flipped_record_version_byte_is_corruption, .timeout = 120)
{
    corruption_on(SEQKV_RAW, VERSION_BYTE);
}

Test(store, a_record_damaged_while_closed_fails_get_with_corrupt_after_reopen, .timeout = 120)
{
    corruption_on(SEQKV_RAW, REOPENED);
}

Test(store, a_coded_record_damaged_while_closed_fails_get_with_corrupt_after_reopen, .timeout = 120)
{
    corruption_on(SEQKV_CTX, REOPENED);
}

/* ---- the probabilistic trie ------------------------------------------------------ */

/* base with token `at` replaced (the rest of the tokens kept), KV recomputed */
static void near_dup(const su_model *tm, const su_seq *base, size_t at, int32_t tok, su_seq *s)
{
    int32_t p[512];
    memcpy(p, base->tok, base->n * sizeof(int32_t));
    p[at] = tok;
    su_seq_make(tm, p, base->n, base->n, 0, s);
}

/* A session and near-duplicates of it (one early token differs, after
 * enough shared code length to cluster) at `level`: bit-exact always;
 * with a real model the members must be coded against the centroid. Then
 * the centroid is deleted (its members must stay whole), the store is
 * reopened under a budget smaller than what it holds and unrelated
 * sessions push it: whatever remains decodes bit-exactly. */
static void centroid_case(int real, seqkv_level level)
{
    const char *tmp = tu_tmpdir();
    const char *dir = tu_path(tmp, "db");
    char dirc[4200];
    snprintf(dirc, sizeof dirc, "%s", dir);
    su_model tm;
    if (real) {
        if (su_shared_model(&tm, "stories260K.bin", SKV_DT_BF16))
            cr_skip("../shared/models/stories260K.bin not present");
    } else {
        su_random_model(&tm, tmp, SKV_DT_BF16);
    }
    seqkv *db = open_store(dirc, NULL);
    add_profile(db, &tm, "p", CHUNK, SEQKV_RAW, 1);
    su_seq c[4];
    for (int i = 0; i < 4; i++) {
        int32_t first = (int32_t)(20 + i);
        su_seq_make(&tm, &first, 1, 64, 60 + (uint64_t)i, &c[i]);
        put(db, "cal", "p", &c[i], 0);
        su_seq_free(&c[i]);
    }
    cr_assert_eq(seqkv_calibrate(db, "p", 0), 0, "%s", skv_error_detail());
    enum { M = 4 };
    su_seq base, mem[M];
    su_seq_make(&tm, NULL, 0, 80, 123, &base);
    put(db, "t", "p", &base, (int)level + 1);
    size_t cent_tokens = 0;
    for (int i = 0; i < M; i++) {
        size_t at = 14 + (size_t)i; /* one early token differs (>= 32 bits shared) */
        near_dup(&tm, &base, at, (base.tok[at] + 1 + i) % tm.c->vocab_size, &mem[i]);
        seqkv_put_result r = put(db, "t", "p", &mem[i], (int)level + 1);
        assert_new(r.new_tokens, mem[i].n, at, CHUNK, "member");
        cent_tokens += r.centroid_tokens;
        assert_whole(db, "t", "p", &tm, &mem[i], "member");
        assert_whole(db, "t", "p", &tm, &base, "centroid");
    }
    seqkv_stats st = stats(db, NULL);
    cr_log_info("%s %s: %zu member tokens coded against the centroid, %llu centroid records",
                real ? "stories260K" : "random model", seqkv_level_name(level), cent_tokens,
                (unsigned long long)st.centroid_chunks);
    if (real) {
        cr_assert_gt(cent_tokens, 0, "%s: near-duplicates are coded against a centroid",
                     seqkv_level_name(level));
        cr_assert_gt(st.centroid_chunks, 0);
    }
    /* the centroid is needed by its members: deleting it must not break
     * them (it stays, or they are re-coded) */
    size_t removed;
    cr_assert_eq(seqkv_del(db, "t", "p", base.tok, base.n, &removed), 0, "%s", skv_error_detail());
    size_t m = lookup(db, "t", "p", base.tok, base.n);
    if (m)
        cr_assert_eq(su_get_check(db, "t", "p", &tm, &base, m, NULL), 0);
    for (int i = 0; i < M; i++)
        assert_whole(db, "t", "p", &tm, &mem[i], "member after the centroid's del");
    st = stats(db, NULL);
    seqkv_close(db);
    db = open_store(dirc, NULL);
    for (int i = 0; i < M; i++)
        assert_whole(db, "t", "p", &tm, &mem[i], "member after reopen");
    seqkv_close(db);
    /* under a budget: unrelated sessions push out what LRU picks */
    seqkv_options o = {.budget = st.stored_bytes * 3 / 4};
    db = open_store(dirc, &o);
    for (int i = 0; i < 6; i++) {
        su_seq x;
        int32_t first = (int32_t)(25 + i);
        su_seq_make(&tm, &first, 1, 50, 900 + (uint64_t)i, &x);
        put(db, "t", "p", &x, (int)level + 1);
        cr_assert_leq(stats(db, NULL).stored_bytes, o.budget);
        su_seq_free(&x);
        for (int j = 0; j < M; j++) {
            m = lookup(db, "t", "p", mem[j].tok, mem[j].n);
            if (m)
                cr_assert_eq(su_get_check(db, "t", "p", &tm, &mem[j], m, NULL), 0,
                             "member %d after eviction: %s", j, skv_error_detail());
        }
    }
    cr_assert_gt(stats(db, NULL).evictions, 0);
    seqkv_close(db);
    su_seq_free(&base);
    for (int i = 0; i < M; i++)
        su_seq_free(&mem[i]);
    su_model_free(&tm);
}

Test(store, near_duplicates_coded_against_a_centroid_round_trip, .timeout = 120)
{
    centroid_case(0, SEQKV_CTX);
    centroid_case(0, SEQKV_SPEC);
}

Test(store, stories260k_near_duplicates_are_coded_against_their_centroid, .timeout = 120)
{
    centroid_case(1, SEQKV_CTX);
}

/* ---- tenants ---------------------------------------------------------------------- */

static int has_key(const uint8_t *keys, size_t n, const uint8_t *k)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(keys + 32 * i, k, 32) == 0)
            return 1;
    return 0;
}

Test(store, tenant_b_cannot_look_up_or_get_tenant_a_sequences, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    const char *dir = tu_path(tmp, "db");
    char dirc[4200];
    snprintf(dirc, sizeof dirc, "%s", dir);
    su_model tm;
    su_random_model(&tm, tmp, SKV_DT_BF16);
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
    cr_assert_eq(seqkv_get(db, "bob", "p", a.tok, a.n, 0, out, su_kv_len(&tm, a.n), &got),
                 SKV_ERR_NOT_FOUND);
    cr_assert_eq(seqkv_stat(db, "bob", &(seqkv_stats){0}), SKV_ERR_NOT_FOUND);
    /* bob exists, stores something else: still nothing of alice's */
    put(db, "bob", "p", &x, 0);
    cr_assert_eq(lookup(db, "bob", "p", a.tok, a.n), 0);
    for (size_t k = 1; k <= a.n; k += 7)
        cr_assert_eq(seqkv_get(db, "bob", "p", a.tok, a.n, k, out, su_kv_len(&tm, a.n), &got),
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

Test(store, the_shared_namespace_is_visible_only_to_tenants_that_opted_in, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    const char *dir = tu_path(tmp, "db");
    char dirc[4200];
    snprintf(dirc, sizeof dirc, "%s", dir);
    su_model tm;
    su_random_model(&tm, tmp, SKV_DT_BF16);
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
                 "%s", skv_error_detail());
    cr_assert_eq(r.new_tokens, sys.n);
    put(db, "plain", "p", &own, 0);
    seqkv_tenant_conf yes = {.read_shared = 1};
    cr_assert_eq(seqkv_tenant_set(db, "reader", &yes), 0, "%s", skv_error_detail());
    for (int round = 0; round < 2; round++) {
        cr_assert_eq(lookup(db, "plain", "p", sys.tok, sys.n), 0, "round %d: not opted in", round);
        size_t got;
        uint8_t *out = malloc(su_kv_len(&tm, sys.n));
        cr_assert_eq(seqkv_get(db, "plain", "p", sys.tok, sys.n, 0, out, su_kv_len(&tm, sys.n), &got),
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

/* ---- refused inputs ----------------------------------------------------------------- */

Test(store, shape_mismatch_unknown_profile_and_bad_arguments_are_refused, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SKV_DT_BF16);
    seqkv *db = open_store(tu_path(tmp, "db"), NULL);
    add_profile(db, &tm, "p", CHUNK, SEQKV_RAW, 0);
    su_seq a;
    su_seq_make(&tm, NULL, 0, 30, 1, &a);
    seqkv_put_result r;
    size_t lens[] = {a.kv_len - 1, a.kv_len + 1, a.kv_len - tm.row, a.kv_len + su_kv_len(&tm, 1),
                     a.kv_len / 2, 0};
    for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
        int rc = seqkv_put(db, "t", "p", a.tok, a.n, a.kv, lens[i], NULL, &r);
        cr_assert_eq(rc, SKV_ERR_SHAPE, "kv_len %zu for %zu: %d", lens[i], a.kv_len, rc);
        cr_assert_eq(r.new_tokens, 0);
    }
    /* KV of one token fewer with the tokens of all */
    cr_assert_eq(seqkv_put(db, "t", "p", a.tok, a.n, a.kv, su_kv_len(&tm, a.n - 1), NULL, &r),
                 SKV_ERR_SHAPE);
    seqkv_stats st = stats(db, NULL);
    cr_assert_eq(st.tokens, 0, "nothing stored");
    cr_assert_eq(st.chunks, 0);
    cr_assert_eq(st.stored_bytes, 0);
    size_t m = 5;
    int rc = seqkv_lookup(db, "t", "p", a.tok, a.n, &m);
    cr_assert(rc == SKV_ERR_NOT_FOUND || (rc == 0 && m == 0), "%d %zu", rc, m);
    /* n == 0, negative token */
    cr_assert_eq(seqkv_put(db, "t", "p", a.tok, 0, a.kv, 0, NULL, &r), SKV_ERR_ARG);
    int32_t neg[30];
    memcpy(neg, a.tok, sizeof neg);
    neg[3] = -1;
    cr_assert_eq(seqkv_put(db, "t", "p", neg, a.n, a.kv, a.kv_len, NULL, &r), SKV_ERR_ARG);
    /* unknown profile everywhere */
    size_t got;
    uint8_t *out = malloc(a.kv_len);
    cr_assert_eq(seqkv_put(db, "t", "nope", a.tok, a.n, a.kv, a.kv_len, NULL, &r), SKV_ERR_NOT_FOUND);
    put(db, "t", "p", &a, 0);
    cr_assert_eq(seqkv_lookup(db, "t", "nope", a.tok, a.n, &m), SKV_ERR_NOT_FOUND);
    cr_assert_eq(seqkv_get(db, "t", "nope", a.tok, a.n, 0, out, a.kv_len, &got), SKV_ERR_NOT_FOUND);
    cr_assert_eq(seqkv_del(db, "t", "nope", a.tok, a.n, &got), SKV_ERR_NOT_FOUND);
    cr_assert_eq(seqkv_calibrate(db, "nope", 0), SKV_ERR_NOT_FOUND);
    seqkv_profile pr;
    cr_assert_eq(seqkv_profile_get(db, "nope", &pr), SKV_ERR_NOT_FOUND);
    /* an existing name with another shape, dtype or chunk */
    seqkv_profile q;
    su_profile(&tm, "p", CHUNK, SEQKV_RAW, 0, &q);
    q.head_dim = 16;
    cr_assert_eq(seqkv_profile_set(db, &q), SKV_ERR_SHAPE);
    su_profile(&tm, "p", CHUNK, SEQKV_RAW, 0, &q);
    q.dtype = SKV_DT_F16;
    cr_assert_eq(seqkv_profile_set(db, &q), SKV_ERR_SHAPE);
    su_profile(&tm, "p", 32, SEQKV_RAW, 0, &q);
    cr_assert_eq(seqkv_profile_set(db, &q), SKV_ERR_SHAPE);
    /* a model that does not match the shape */
    su_profile(&tm, "p2", CHUNK, SEQKV_RAW, 1, &q);
    q.kv_heads = 4;
    cr_assert_eq(seqkv_profile_set(db, &q), SKV_ERR_SHAPE);
    /* the level may change; the identity does not */
    seqkv_profile before;
    cr_assert_eq(seqkv_profile_get(db, "p", &before), 0);
    su_profile(&tm, "p", CHUNK, SEQKV_STAT, 0, &q);
    cr_assert_eq(seqkv_profile_set(db, &q), 0, "%s", skv_error_detail());
    cr_assert_eq(seqkv_profile_get(db, "p", &pr), 0);
    cr_assert_eq(pr.level, SEQKV_STAT);
    cr_assert_eq(memcmp(pr.id, before.id, 32), 0);
    assert_whole(db, "t", "p", &tm, &a, "after the profile update");
    /* bad names */
    su_profile(&tm, "", CHUNK, SEQKV_RAW, 0, &q);
    cr_assert_eq(seqkv_profile_set(db, &q), SKV_ERR_ARG);
    su_profile(&tm, "a b", CHUNK, SEQKV_RAW, 0, &q);
    cr_assert_eq(seqkv_profile_set(db, &q), SKV_ERR_ARG);
    cr_assert_eq(seqkv_put(db, "bad name", "p", a.tok, a.n, a.kv, a.kv_len, NULL, &r), SKV_ERR_ARG);
    /* nothing to calibrate from */
    su_profile(&tm, "pm", CHUNK, SEQKV_RAW, 1, &q);
    cr_assert_eq(seqkv_profile_set(db, &q), 0, "%s", skv_error_detail());
    cr_assert_eq(seqkv_calibrate(db, "pm", 0), SKV_ERR_ARG);
    /* level names */
    seqkv_level l;
    cr_assert_eq(seqkv_level_parse("ctx", &l), 0);
    cr_assert_eq(l, SEQKV_CTX);
    cr_assert_eq(seqkv_level_parse("bogus", &l), SKV_ERR_ARG);
    cr_assert_str_eq(seqkv_level_name(SEQKV_FULL), "full");
    free(out);
    seqkv_close(db);
    su_seq_free(&a);
    su_model_free(&tm);
}

/* seqkv.h: SKV_ERR_ARG for "a token outside the model/calibration
 * vocabulary" -- at every level, raw included. */
Test(store, a_token_outside_the_models_vocabulary_is_refused, .timeout = 60)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SKV_DT_BF16);
    seqkv *db = open_store(tu_path(tmp, "db"), NULL);
    add_profile(db, &tm, "pm", CHUNK, SEQKV_RAW, 1);
    su_seq c[3];
    for (int i = 0; i < 3; i++) {
        su_seq_make(&tm, NULL, 0, 40, 10 + (uint64_t)i, &c[i]);
        put(db, "cal", "pm", &c[i], 0);
    }
    cr_assert_eq(seqkv_calibrate(db, "pm", 0), 0, "%s", skv_error_detail());
    su_seq a;
    int32_t first = (c[0].tok[0] + 1) % tm.c->vocab_size;
    su_seq_make(&tm, &first, 1, 30, 1, &a);
    seqkv_stats b = stats(db, NULL);
    int32_t big[30];
    memcpy(big, a.tok, sizeof big);
    big[10] = tm.c->vocab_size;
    char fails[512];
    int nf = 0;
    for (int l = SEQKV_LEVELS - 1; l >= SEQKV_RAW; l--) {
        seqkv_put_opts o = {.has_level = 1, .level = (seqkv_level)l};
        seqkv_put_result r;
        int rc = seqkv_put(db, "t", "pm", big, a.n, a.kv, a.kv_len, &o, &r);
        if (rc != SKV_ERR_ARG)
            nf += snprintf(fails + nf, sizeof fails - (size_t)nf, " %s: %s;",
                           seqkv_level_name((seqkv_level)l), rc ? skv_error_name(rc) : "stored");
        if (nf > 400)
            break;
    }
    cr_assert_eq(nf, 0, "token %d (vocabulary %d) accepted or refused otherwise:%s", tm.c->vocab_size,
                 tm.c->vocab_size, fails);
    cr_assert_eq(stats(db, NULL).tokens, b.tokens, "nothing stored");
    seqkv_close(db);
    for (int i = 0; i < 3; i++)
        su_seq_free(&c[i]);
    su_seq_free(&a);
    su_model_free(&tm);
}

/* ---- the format record and the master key ------------------------------------------ */

static void format_edit(const char *dir, int off, uint32_t xor_with)
{
    MDB_env *env = su_env_open(dir, 0);
    MDB_txn *txn;
    cr_assert_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
    MDB_dbi dbi;
    cr_assert_eq(mdb_dbi_open(txn, "meta", 0, &dbi), 0);
    MDB_val k = {6, "format"}, v;
    cr_assert_eq(mdb_get(txn, dbi, &k, &v), 0, "the format record");
    cr_assert_geq(v.mv_size, 8);
    uint8_t b[256];
    cr_assert_leq(v.mv_size, sizeof b);
    memcpy(b, v.mv_data, v.mv_size);
    if (off == 4)
        skv_store32_le(b + 4, skv_load32_le(b + 4) + xor_with); /* a newer version */
    else
        skv_store32_le(b + off, skv_load32_le(b + off) ^ xor_with);
    MDB_val nv = {v.mv_size, b};
    cr_assert_eq(mdb_put(txn, dbi, &k, &nv, 0), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    su_env_close(env);
}

Test(store, a_newer_format_version_refuses_to_open, .timeout = 60)
{
    const char *tmp = tu_tmpdir();
    const char *dir = tu_path(tmp, "db");
    char dirc[4200];
    snprintf(dirc, sizeof dirc, "%s", dir);
    su_model tm;
    su_random_model(&tm, tmp, SKV_DT_BF16);
    seqkv *db = open_store(dirc, NULL);
    add_profile(db, &tm, "p", CHUNK, SEQKV_RAW, 0);
    su_seq a;
    su_seq_make(&tm, NULL, 0, 20, 1, &a);
    put(db, "t", "p", &a, 0);
    seqkv_close(db);
    seqkv_options o = {.quiet = 1};
    format_edit(dirc, 4, 1);
    db = (seqkv *)1;
    cr_assert_eq(seqkv_open(dirc, &o, &db), SKV_ERR_VERSION, "%s", skv_error_detail());
    cr_assert_null(db);
    o.read_only = 1;
    cr_assert_eq(seqkv_open(dirc, &o, &db), SKV_ERR_VERSION);
    o.read_only = 0;
    format_edit(dirc, 4, (uint32_t)-1); /* back */
    db = open_store(dirc, NULL);
    assert_whole(db, "t", "p", &tm, &a, "version restored");
    seqkv_close(db);
    /* a bad magic: not a seqkv store */
    format_edit(dirc, 0, 0x01010101);
    cr_assert_eq(seqkv_open(dirc, &o, &db), SKV_ERR_FORMAT, "%s", skv_error_detail());
    format_edit(dirc, 0, 0x01010101);
    /* another store's master key */
    key_seed = 2;
    seqkv *other = open_store(tu_path(tmp, "other"), NULL);
    seqkv_close(other);
    key_seed = 1;
    o.master_key = tu_path(tu_path(tmp, "other"), "master.key");
    cr_assert_eq(seqkv_open(dirc, &o, &db), SKV_ERR_CORRUPT, "%s", skv_error_detail());
    o.master_key = NULL;
    /* a key file the store makes is private */
    seqkv *fresh = NULL;
    cr_assert_eq(seqkv_open(tu_path(tmp, "fresh"), &o, &fresh), 0, "%s", skv_error_detail());
    seqkv_close(fresh);
    struct stat ks;
    cr_assert_eq(stat(tu_path(tu_path(tmp, "fresh"), "master.key"), &ks), 0);
    cr_assert_eq(ks.st_mode & 0077, 0, "master.key mode %o", ks.st_mode & 0777);
    db = open_store(dirc, NULL);
    assert_whole(db, "t", "p", &tm, &a, "finally");
    seqkv_close(db);
    su_seq_free(&a);
    su_model_free(&tm);
}

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

/* Families of sessions: each family shares a system prompt (sys0 + 9f
 * tokens), sessions differ after it. */
static void make_workload_sys(const su_model *tm, int fams, int per, uint64_t seed, size_t sys0,
                              su_seq *out)
{
    for (int f = 0; f < fams; f++) {
        su_seq sys;
        su_seq_make(tm, NULL, 0, sys0 + 9 * (size_t)f, seed + 977 * (uint64_t)f, &sys);
        for (int i = 0; i < per; i++)
            session(tm, &sys, sys.n, (int32_t)((3 + i) % tm->c->vocab_size),
                    sys.n + 8 + (size_t)((i * 13 + f * 7) % 40), seed + 31 * (uint64_t)(f * per + i),
                    &out[f * per + i]);
        su_seq_free(&sys);
    }
}

static void make_workload(const su_model *tm, int fams, int per, uint64_t seed, su_seq *out)
{
    make_workload_sys(tm, fams, per, seed, 12, out);
}

static void all_decodable(seqkv *db, const char *tenant, const su_model *tm, const su_seq *s, int n,
                          size_t *served)
{
    *served = 0;
    for (int i = 0; i < n; i++) {
        size_t m = lookup(db, tenant, "p", s[i].tok, s[i].n);
        if (!m)
            continue;
        *served += m;
        size_t ws[3] = {m, (m + 1) / 2, 1};
        for (int w = 0; w < 3; w++) {
            int rc = su_get_check(db, tenant, "p", tm, &s[i], ws[w], NULL);
            cr_assert_eq(rc, 0, "seq %d: lookup %zu, get of %zu: %d %s", i, m, ws[w], rc,
                         skv_error_detail());
        }
    }
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
                            chunk, (unsigned long long)seed, k, s[i].n, skv_error_name(rc),
                            skv_error_detail());
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

Test(store, eviction_under_a_small_budget_keeps_every_remaining_prefix_decodable, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SKV_DT_BF16);
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
    cr_assert_eq(rc, SKV_ERR_TOO_LARGE, "%d %s", rc, skv_error_detail());
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
Test(store, a_tenant_budget_evicts_only_that_tenant, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SKV_DT_BF16);
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
                               (unsigned long long)seed, i, s[i].n, skv_error_name(rc),
                               skv_error_detail());
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

#ifndef MAP_LIMIT
#define MAP_LIMIT (1 << 20)
#endif
Test(store, a_full_map_grows_or_evicts_and_never_fails_a_put, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SKV_DT_BF16);
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
    seqkv_options lim = {.map_size = 128 << 10, .map_max = MAP_LIMIT};
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

Test(store, del_removes_only_the_unshared_part, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SKV_DT_BF16);
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
        cr_assert_eq(seqkv_del(db, "t", "p", a.tok, a.n, &removed), 0, "%s", skv_error_detail());
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

/* ---- threads ------------------------------------------------------------------------- */

typedef struct {
    seqkv *db;
    const su_model *tm;
    su_seq *s;
    int n;
    int published; /* puts acknowledged so far (atomic) */
    int done;
    int errors;
    long reads;
} mt_ctx;

static void *reader(void *v)
{
    mt_ctx *c = v;
    unsigned seed = (unsigned)(uintptr_t)&seed;
    while (!__atomic_load_n(&c->done, __ATOMIC_ACQUIRE)) {
        int p = __atomic_load_n(&c->published, __ATOMIC_ACQUIRE);
        if (!p)
            continue;
        int i = (int)(rand_r(&seed) % (unsigned)p);
        size_t m;
        if (seqkv_lookup(c->db, "t", "p", c->s[i].tok, c->s[i].n, &m) || m != c->s[i].n ||
            su_get_check(c->db, "t", "p", c->tm, &c->s[i], 0, NULL))
            __atomic_add_fetch(&c->errors, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&c->reads, 1, __ATOMIC_RELAXED);
        usleep(200); /* readers that never pause starve the writer: see the report */
    }
    return NULL;
}

Test(store, concurrent_readers_with_one_writer_see_whole_puts, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SKV_DT_BF16);
    enum { F = 4, PER = 6, N = F * PER };
    su_seq *s = calloc(N, sizeof *s);
    make_workload(&tm, F, PER, 3, s);
    seqkv_options o = {.map_size = 256 << 10}; /* growth under readers too */
    seqkv *db = open_store(tu_path(tmp, "db"), &o);
    add_profile(db, &tm, "p", CHUNK, SEQKV_RAW, 0);
    mt_ctx c = {db, &tm, s, N, 0, 0, 0, 0};
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&th[i], NULL, reader, &c);
    int perr = 0;
    for (int i = 0; i < N; i++) {
        seqkv_put_result r;
        if (seqkv_put(db, "t", "p", s[i].tok, s[i].n, s[i].kv, s[i].kv_len, NULL, &r))
            perr++;
        __atomic_store_n(&c.published, i + 1, __ATOMIC_RELEASE);
    }
    usleep(100000);
    __atomic_store_n(&c.done, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    cr_assert_eq(perr, 0);
    cr_assert_eq(c.errors, 0, "%d of %ld reads saw a missing or wrong sequence", c.errors, c.reads);
    cr_assert_gt(c.reads, 0);
    seqkv_close(db);
    for (int i = 0; i < N; i++)
        su_seq_free(&s[i]);
    free(s);
    su_model_free(&tm);
}

/* ---- put batches (group commit) ------------------------------------------------ */

/* A store with profile "p" (chunk CHUNK, model attached) calibrated from
 * four sequences of its own; the same on every call (seeded keys). */
static seqkv *calibrated_store(const su_model *tm, const char *dir)
{
    seqkv *db = open_store(dir, NULL);
    add_profile(db, tm, "p", CHUNK, SEQKV_RAW, 1);
    for (int i = 0; i < 4; i++) {
        su_seq c;
        int32_t first = (int32_t)(20 + i);
        su_seq_make(tm, &first, 1, 48, 300 + (uint64_t)i, &c);
        put(db, "cal", "p", &c, 0);
        su_seq_free(&c);
    }
    cr_assert_eq(seqkv_calibrate(db, "p", 0), 0, "calibrate: %s", skv_error_detail());
    return db;
}

static void req_of(seqkv_put_req *q, const char *tenant, const su_seq *s, const seqkv_put_opts *o)
{
    memset(q, 0, sizeof *q);
    q->tenant = tenant;
    q->profile = "p";
    q->tokens = s->tok;
    q->n = s->n;
    q->kv = s->kv;
    q->kv_len = s->kv_len;
    q->opts = o;
}

Test(store, a_put_batch_stores_what_single_puts_store_and_fails_bad_requests_alone, .timeout = 180)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SKV_DT_BF16);
    /* families sharing system prompts; each session also extended by a
     * second turn, so that a batch holds puts that extend each other */
    enum { F = 3, PER = 4, N1 = F * PER, N = 2 * N1 };
    su_seq s[N];
    make_workload(&tm, F, PER, 41, s);
    for (int i = 0; i < N1; i++)
        su_seq_make(&tm, s[i].tok, s[i].n, s[i].n + 21, 700 + (uint64_t)i, &s[N1 + i]);
    /* interleave: session i, then (two requests later) its extension */
    int order[N];
    for (int i = 0, k = 0; i < N1; i++) {
        order[k++] = i;
        if (i >= 2)
            order[k++] = N1 + i - 2;
        if (i == N1 - 1) {
            order[k++] = N1 + N1 - 2;
            order[k++] = N1 + N1 - 1;
        }
    }
    seqkv *one = calibrated_store(&tm, tu_path(tmp, "one"));
    seqkv *bat = calibrated_store(&tm, tu_path(tmp, "batch"));
    seqkv_profile p1, p2;
    cr_assert_eq(seqkv_profile_get(one, "p", &p1), 0);
    cr_assert_eq(seqkv_profile_get(bat, "p", &p2), 0);
    cr_assert_eq(memcmp(p1.calib_id, p2.calib_id, 16), 0, "calibration is deterministic");
    for (int lv = SEQKV_RAW; lv <= SEQKV_CTX; lv += SEQKV_CTX - SEQKV_RAW) {
        const char *tenant = lv == SEQKV_RAW ? "r" : "c";
        seqkv_put_opts o = {.has_level = 1, .level = (seqkv_level)lv};
        seqkv_put_result single[N];
        for (int k = 0; k < N; k++) {
            int rc = seqkv_put(one, tenant, "p", s[order[k]].tok, s[order[k]].n, s[order[k]].kv,
                               s[order[k]].kv_len, &o, &single[k]);
            cr_assert_eq(rc, 0, "%s", skv_error_detail());
        }
        /* the same puts in batches of 7, each with a bad request inside
         * (a KV one byte short) that must fail alone */
        su_seq bad;
        su_seq_make(&tm, NULL, 0, 30, 999, &bad);
        for (int k0 = 0; k0 < N; k0 += 6) {
            seqkv_put_req q[7];
            int idx[7], nq = 0;
            for (int k = k0; k < k0 + 6 && k < N; k++) {
                if (k == k0 + 2) {
                    req_of(&q[nq], tenant, &bad, &o);
                    q[nq].kv_len--;
                    idx[nq++] = -1;
                }
                req_of(&q[nq], tenant, &s[order[k]], &o);
                idx[nq++] = k;
            }
            size_t failed = seqkv_put_batch(bat, q, (size_t)nq);
            cr_assert_eq(failed, (size_t)(nq > 2), "only the bad request fails");
            for (int j = 0; j < nq; j++) {
                if (idx[j] < 0) {
                    cr_assert_eq(q[j].rc, SKV_ERR_SHAPE, "bad request: %d", q[j].rc);
                    cr_assert(strstr(q[j].error, "needs") != NULL, "its detail: %s", q[j].error);
                    continue;
                }
                const seqkv_put_result *a = &single[idx[j]], *b = &q[j].res;
                cr_assert_eq(q[j].rc, 0, "request %d: %d %s", j, q[j].rc, q[j].error);
                cr_assert_eq(q[j].error[0], 0);
                cr_assert_eq(b->cached_tokens, a->cached_tokens, "%s put %d: cached %zu vs %zu",
                             tenant, idx[j], b->cached_tokens, a->cached_tokens);
                cr_assert_eq(b->new_tokens, a->new_tokens);
                cr_assert_eq(b->chunks, a->chunks);
                cr_assert_eq(b->bytes, a->bytes, "%s put %d: %zu bytes vs %zu alone", tenant,
                             idx[j], b->bytes, a->bytes);
                cr_assert_eq(b->centroid_tokens, a->centroid_tokens);
            }
        }
        su_seq_free(&bad);
        seqkv_stats x = stats(one, tenant), y = stats(bat, tenant);
        cr_assert_eq(y.stored_bytes, x.stored_bytes, "%s: batches store %llu bytes, single puts %llu",
                     tenant, (unsigned long long)y.stored_bytes, (unsigned long long)x.stored_bytes);
        cr_assert_eq(y.tokens, x.tokens);
        cr_assert_eq(y.chunks, x.chunks);
        cr_assert_gt(y.level_tokens[lv], 0);
        for (int i = 0; i < N; i++)
            assert_whole(bat, tenant, "p", &tm, &s[i], "batched");
    }
    seqkv_close(one);
    seqkv_close(bat);
    bat = open_store(tu_path(tmp, "batch"), NULL);
    for (int i = 0; i < N; i++) {
        assert_whole(bat, "r", "p", &tm, &s[i], "batched, reopened");
        assert_whole(bat, "c", "p", &tm, &s[i], "batched, reopened");
    }
    /* a batch of one sequence twice: the second finds the first cached */
    su_seq d;
    su_seq_make(&tm, NULL, 0, 40, 4242, &d);
    seqkv_put_req q[2];
    req_of(&q[0], "r", &d, NULL);
    req_of(&q[1], "r", &d, NULL);
    cr_assert_eq(seqkv_put_batch(bat, q, 2), 0);
    cr_assert_lt(q[0].res.cached_tokens, d.n);
    cr_assert_gt(q[0].res.chunks, 0);
    cr_assert_eq(q[1].res.cached_tokens, d.n);
    cr_assert_eq(q[1].res.chunks, 0);
    assert_whole(bat, "r", "p", &tm, &d, "twice in one batch");
    cr_assert_eq(seqkv_put_batch(bat, q, 0), 0, "an empty batch");
    su_seq_free(&d);
    seqkv_close(bat);
    /* read-only: every request fails */
    seqkv_options ro = {.read_only = 1};
    bat = open_store(tu_path(tmp, "batch"), &ro);
    su_seq_make(&tm, NULL, 0, 20, 4343, &d);
    req_of(&q[0], "r", &d, NULL);
    req_of(&q[1], "c", &d, NULL);
    cr_assert_eq(seqkv_put_batch(bat, q, 2), 2);
    cr_assert_eq(q[0].rc, SKV_ERR_ARG);
    cr_assert(strstr(q[1].error, "read-only") != NULL, "%s", q[1].error);
    su_seq_free(&d);
    seqkv_close(bat);
    for (int i = 0; i < N; i++)
        su_seq_free(&s[i]);
    su_model_free(&tm);
}

Test(store, a_full_map_at_its_limit_retries_a_batch_put_by_put, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SKV_DT_BF16);
    enum { F = 16, PER = 8, N = F * PER };
    su_seq *s = calloc(N, sizeof *s);
    make_workload(&tm, F, PER, 555, s);
    seqkv_options lim = {.map_size = 128 << 10, .map_max = MAP_LIMIT};
    seqkv *db = open_store(tu_path(tmp, "limit"), &lim);
    add_profile(db, &tm, "p", CHUNK, SEQKV_RAW, 0);
    for (int k0 = 0; k0 < N; k0 += 8) {
        seqkv_put_req q[8];
        for (int j = 0; j < 8; j++)
            req_of(&q[j], "t", &s[k0 + j], NULL);
        cr_assert_eq(seqkv_put_batch(db, q, 8), 0, "a batch at the map limit: %d %s", q[0].rc,
                     q[0].error);
        /* the batch's last put is whole (earlier ones may have made room
         * for later ones) */
        cr_assert_eq(lookup(db, "t", "p", s[k0 + 7].tok, s[k0 + 7].n), s[k0 + 7].n);
    }
    seqkv_stats st = stats(db, NULL);
    cr_assert_gt(st.evictions, 0);
    cr_assert_leq(st.map_size, MAP_LIMIT);
    size_t served;
    all_decodable(db, "t", &tm, s, N, &served);
    cr_assert_gt(served, 0);
    seqkv_close(db);
    db = open_store(tu_path(tmp, "limit"), &lim);
    all_decodable(db, "t", &tm, s, N, &served);
    seqkv_close(db);
    for (int i = 0; i < N; i++)
        su_seq_free(&s[i]);
    free(s);
    su_model_free(&tm);
}

/* Readers probe every sequence, put or not yet: whatever a lookup finds
 * must decode (a record of a batch shown before its commit would not be
 * in LMDB yet), and every acknowledged one is whole. */
static void *batch_reader(void *v)
{
    mt_ctx *c = v;
    unsigned seed = (unsigned)(uintptr_t)&seed;
    while (!__atomic_load_n(&c->done, __ATOMIC_ACQUIRE)) {
        int p = __atomic_load_n(&c->published, __ATOMIC_ACQUIRE);
        int i = (int)(rand_r(&seed) % (unsigned)c->n);
        size_t m = 0;
        int rc = seqkv_lookup(c->db, "t", "p", c->s[i].tok, c->s[i].n, &m);
        if ((rc && rc != SKV_ERR_NOT_FOUND) || (i < p && m != c->s[i].n) ||
            (m && su_get_check(c->db, "t", "p", c->tm, &c->s[i], m, NULL)))
            __atomic_add_fetch(&c->errors, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&c->reads, 1, __ATOMIC_RELAXED);
        usleep(100);
    }
    return NULL;
}

Test(store, concurrent_readers_never_see_a_batch_before_its_commit, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SKV_DT_BF16);
    enum { F = 4, PER = 8, N = F * PER, B = 4 };
    su_seq *s = calloc(N, sizeof *s);
    make_workload(&tm, F, PER, 13, s);
    seqkv *db = calibrated_store(&tm, tu_path(tmp, "db"));
    mt_ctx c = {db, &tm, s, N, 0, 0, 0, 0};
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&th[i], NULL, batch_reader, &c);
    size_t failed = 0;
    seqkv_put_opts o = {.has_level = 1, .level = SEQKV_CTX};
    for (int k0 = 0; k0 < N; k0 += B) {
        seqkv_put_req q[B];
        for (int j = 0; j < B; j++)
            req_of(&q[j], "t", &s[k0 + j], &o);
        failed += seqkv_put_batch(db, q, B);
        __atomic_store_n(&c.published, k0 + B, __ATOMIC_RELEASE);
    }
    usleep(100000);
    __atomic_store_n(&c.done, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    cr_assert_eq(failed, 0);
    cr_assert_eq(c.errors, 0, "%d of %ld reads saw a missing, partial or wrong sequence", c.errors,
                 c.reads);
    cr_assert_gt(c.reads, 0);
    seqkv_close(db);
    for (int i = 0; i < N; i++)
        su_seq_free(&s[i]);
    free(s);
    su_model_free(&tm);
}

/* The budget case with batches of 8: hidden records of a batch cannot be
 * evicted, so when a request needs room they would take, the batch commits
 * what it has first -- no request that single puts would store is refused. */
Test(store, a_put_batch_under_a_small_budget_refuses_nothing_single_puts_store, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SKV_DT_BF16);
    enum { F = 5, PER = 6, N = F * PER, B = 8 };
    su_seq *s = calloc(N, sizeof *s);
    make_workload(&tm, F, PER, 77, s);
    const uint64_t budget = 24 << 10;
    size_t total = 0;
    for (int i = 0; i < B; i++)
        total += s[i].kv_len;
    cr_assert_gt(total, budget, "a batch holds more than the budget");
    seqkv_options o = {.budget = budget};
    seqkv *db = open_store(tu_path(tmp, "db"), &o);
    add_profile(db, &tm, "p", CHUNK, SEQKV_RAW, 0);
    int evicted = 0;
    for (int k0 = 0; k0 < N; k0 += B) {
        seqkv_put_req q[B];
        int nq = 0, idx[B];
        for (int k = k0; k < k0 + B && k < N; k++) {
            int i = (k % F) * PER + k / F;
            req_of(&q[nq], "t", &s[i], NULL);
            idx[nq++] = i;
        }
        size_t failed = seqkv_put_batch(db, q, (size_t)nq);
        for (int j = 0; j < nq; j++) {
            cr_assert_eq(q[j].rc, 0, "batch at %d, request %d (%zu tokens): %s", k0, j, s[idx[j]].n,
                         q[j].error);
            evicted += q[j].res.evicted;
        }
        cr_assert_eq(failed, 0);
        cr_assert_leq(stats(db, NULL).stored_bytes, budget);
        const su_seq *last = &s[idx[nq - 1]];
        cr_assert_eq(lookup(db, "t", "p", last->tok, last->n), last->n, "the batch's last put is whole");
    }
    cr_assert_gt(evicted, 0);
    cr_assert_eq(stats(db, NULL).evictions, (uint64_t)evicted, "every eviction is reported");
    size_t served;
    all_decodable(db, "t", &tm, s, N, &served);
    cr_assert_gt(served, 0);
    seqkv_close(db);
    for (int i = 0; i < N; i++)
        su_seq_free(&s[i]);
    free(s);
    su_model_free(&tm);
}
