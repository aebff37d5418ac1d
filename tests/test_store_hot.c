/* The hot tier (seqkv_options.cache_bytes): a chunk served twice is
 * decoded once and served bit-exact; the tier stays within its budget and
 * evicts the least recently used chunk; a deleted or evicted prefix is
 * never served from it, even under concurrent gets, puts and dels; damage
 * on disk is caught on the read that would bring a chunk into it; a get
 * racing a delete or an eviction is exact or a miss, never an error. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "seqkv.h"
#include "storetest.h"
#include "storeutil.h"
#include "testutil.h"

static seqkv_cache_stats cache(seqkv *db)
{
    seqkv_cache_stats c;
    seqkv_cache_stat(db, &c);
    return c;
}

/* A view of s's first want tokens: its bytes compared with s's; returns
 * its hot chunks (of *chunks). */
static size_t view_check(seqkv *db, const su_model *tm, const su_seq *s, size_t want,
                         size_t *chunks, const char *what)
{
    seqkv_view *v;
    size_t got;
    int rc = seqkv_get_view(db, "t", "p", s->tok, s->n, &(seqkv_get_opts){.want = want}, &v, &got);
    cr_assert_eq(rc, 0, "%s: view: %s (%s)", what, seqkv_error_name(rc), seqkv_error_detail());
    cr_assert_eq(got, want);
    uint8_t *exp = malloc(su_kv_len(tm, want)), *cat = malloc(su_kv_len(tm, want));
    su_expect(tm, s, want, exp);
    cr_assert_eq(seqkv_view_bytes(v), su_kv_len(tm, want));
    size_t off = 0;
    for (size_t i = 0; i < seqkv_view_pieces(v); i++) {
        size_t len;
        const void *p = seqkv_view_piece(v, i, &len);
        cr_assert_gt(len, 0);
        cr_assert_leq(off + len, su_kv_len(tm, want));
        memcpy(cat + off, p, len);
        off += len;
    }
    cr_assert_eq(off, su_kv_len(tm, want));
    cr_assert_eq(memcmp(cat, exp, off), 0, "%s: the view's bytes are the KV put", what);
    size_t hot = seqkv_view_hot_chunks(v, chunks);
    seqkv_view_free(v);
    free(exp);
    free(cat);
    return hot;
}

static void served_twice(seqkv_level level)
{
    const char *tmp = tu_tmpdir(), *dir = tu_path(tmp, "db");
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    seqkv_options o = {.cache_bytes = 1 << 20};
    seqkv *db = store_at_level(dir, &o, &tm, level, 0, CHUNK);
    su_seq a;
    su_seq_make(&tm, NULL, 0, 70, 21, &a); /* 5 chunks, the last partial */
    put(db, "t", "p", &a, (int)level + 1);
    cr_assert_eq(stats(db, "t").level_tokens[level], stats(db, "t").coded_tokens);
    size_t ch;
    /* just put: the put's own chunks are hot */
    cr_assert_eq(view_check(db, &tm, &a, a.n, &ch, "after the put"), 5);
    seqkv_close(db);

    db = open_store(dir, &o); /* an empty tier */
    cr_assert_eq(view_check(db, &tm, &a, 40, &ch, "cold"), 0);
    cr_assert_eq(ch, 3);
    cr_assert_eq(view_check(db, &tm, &a, a.n, &ch, "longer"), 3, "the first three from the tier");
    cr_assert_eq(ch, 5);
    cr_assert_eq(view_check(db, &tm, &a, a.n, &ch, "hot"), 5);
    cr_assert_eq(view_check(db, &tm, &a, 17, &ch, "a part of the second chunk"), 2);
    cr_assert_eq(su_get_check(db, "t", "p", &tm, &a, 0, NULL), 0, "seqkv_get over the tier");
    seqkv_cache_stats c = cache(db);
    cr_assert_eq(c.inserts, 5);
    cr_assert_eq(c.chunks, 5);
    cr_assert_eq(c.misses, 3 + 2, "all three on the cold get, then chunks 3 and 4");
    cr_assert_eq(c.hits, 3 + 5 + 2 + 5);
    cr_assert_eq(c.bytes, (size_t)tm.L * 2 * a.n * tm.row, "each record whole, the last of 6 tokens");
    seqkv_close(db);
    su_seq_free(&a);
    su_model_free(&tm);
}

Test(hot, a_chunk_served_twice_is_decoded_once_raw)
{
    served_twice(SEQKV_RAW);
}

Test(hot, a_chunk_served_twice_is_decoded_once_ctx, .timeout = 60)
{
    served_twice(SEQKV_CTX);
}

/* A put whose cached prefix's KV it sends differently: the tier's entry of
 * its record based on the stored one holds the stored KV there (the get
 * returns it), at ctx, where the put decodes its context, from the put;
 * at raw, from the first get. */
static void based_entry(seqkv_level level)
{
    const char *tmp = tu_tmpdir(), *dir = tu_path(tmp, "db");
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    seqkv_options o = {.cache_bytes = 1 << 20};
    seqkv *db = store_at_level(dir, &o, &tm, level, 0, CHUNK);
    su_seq a, b;
    su_seq_make(&tm, NULL, 0, 40, 5, &a);      /* chunks of 16, 16 and 8 */
    su_seq_make(&tm, a.tok, 40, 60, 6, &b);    /* a, then 20 more */
    uint8_t *want = malloc(b.kv_len), *ea = malloc(a.kv_len);
    su_expect(&tm, &a, a.n, ea);
    su_expect(&tm, &b, b.n, want);
    for (size_t x = 0; x < 2 * (size_t)tm.L; x++) /* a's bytes at positions [0, 40) */
        memcpy(want + x * b.n * tm.row, ea + x * a.n * tm.row, a.n * tm.row);
    /* b's KV for a's positions sent with other bytes */
    for (size_t x = 0; x < 2 * (size_t)tm.L; x++)
        for (size_t i = 0; i < a.n * tm.row; i++)
            b.kv[x * b.n * tm.row + i] ^= 0x01;
    put(db, "t", "p", &a, (int)level + 1);
    put(db, "t", "p", &b, (int)level + 1);
    seqkv_view *v;
    size_t got;
    cr_assert_eq(seqkv_get_view(db, "t", "p", b.tok, b.n, NULL, &v, &got), 0);
    cr_assert_eq(got, b.n);
    size_t chunks, hot = seqkv_view_hot_chunks(v, &chunks);
    cr_assert_eq(chunks, 4);
    cr_assert_eq(hot, level == SEQKV_RAW ? 3u : 4u, "%s: %zu of 4 chunks hot after the puts",
                 seqkv_level_name(level), hot);
    uint8_t *cat = malloc(b.kv_len);
    size_t off = 0;
    for (size_t i = 0; i < seqkv_view_pieces(v); i++) {
        size_t len;
        const void *p = seqkv_view_piece(v, i, &len);
        memcpy(cat + off, p, len);
        off += len;
    }
    cr_assert_eq(off, b.kv_len);
    cr_assert_eq(memcmp(cat, want, off), 0, "%s: the stored KV of the shared positions",
                 seqkv_level_name(level));
    seqkv_view_free(v);
    seqkv_close(db);
    free(cat);
    free(want);
    free(ea);
    su_seq_free(&a);
    su_seq_free(&b);
    su_model_free(&tm);
}

Test(hot, an_entry_based_on_a_stored_record_holds_the_stored_kv_raw)
{
    based_entry(SEQKV_RAW);
}

Test(hot, an_entry_based_on_a_stored_record_holds_the_stored_kv_ctx, .timeout = 60)
{
    based_entry(SEQKV_CTX);
}

/* Four one-chunk sequences with nothing in common */
static void four_chunks(const su_model *tm, su_seq s[4])
{
    for (int i = 0; i < 4; i++) {
        int32_t first = 3 + i;
        su_seq_make(tm, &first, 1, CHUNK, 40 + (uint64_t)i, &s[i]);
    }
}

Test(hot, the_tier_keeps_its_budget_and_evicts_the_least_recently_used)
{
    const char *tmp = tu_tmpdir(), *dir = tu_path(tmp, "db");
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    const size_t E = (size_t)tm.L * 2 * CHUNK * tm.row;
    seqkv_options o = {.cache_bytes = 3 * E + E / 2};
    seqkv *db = open_store(dir, &o);
    add_profile(db, &tm, "p", CHUNK, SEQKV_RAW, 0);
    su_seq s[4];
    four_chunks(&tm, s);
    for (int i = 0; i < 4; i++)
        put(db, "t", "p", &s[i], 0);
    cr_assert_leq(cache(db).bytes, o.cache_bytes);
    seqkv_close(db);

    db = open_store(dir, &o);
    size_t ch;
    for (int i = 0; i < 3; i++)
        cr_assert_eq(view_check(db, &tm, &s[i], CHUNK, &ch, "fill"), 0);
    cr_assert_eq(view_check(db, &tm, &s[0], CHUNK, &ch, "A again"), 1);
    cr_assert_eq(view_check(db, &tm, &s[3], CHUNK, &ch, "D"), 0); /* evicts B */
    seqkv_cache_stats c = cache(db);
    cr_assert_eq(c.evictions, 1);
    cr_assert_eq(c.chunks, 3);
    cr_assert_eq(c.bytes, 3 * E);
    cr_assert_eq(view_check(db, &tm, &s[2], CHUNK, &ch, "C"), 1, "C stayed");
    cr_assert_eq(view_check(db, &tm, &s[0], CHUNK, &ch, "A"), 1, "A stayed");
    cr_assert_eq(view_check(db, &tm, &s[1], CHUNK, &ch, "B"), 0, "B was the one evicted");
    cr_assert_eq(view_check(db, &tm, &s[3], CHUNK, &ch, "D"), 0, "B's return evicted D");
    c = cache(db);
    cr_assert_eq(c.evictions, 3);
    cr_assert_leq(c.bytes, o.cache_bytes);
    seqkv_close(db);

    /* a budget smaller than one chunk: nothing is kept, all is served */
    seqkv_options tiny = {.cache_bytes = E - 1};
    db = open_store(dir, &tiny);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(view_check(db, &tm, &s[i], CHUNK, &ch, "tiny"), 0);
    cr_assert_eq(cache(db).chunks, 0);
    cr_assert_eq(cache(db).inserts, 0);
    seqkv_close(db);
    for (int i = 0; i < 4; i++)
        su_seq_free(&s[i]);
    su_model_free(&tm);
}

/* s with other KV bytes (the same tokens) */
static void other_kv(const su_seq *s, su_seq *o)
{
    *o = *s;
    o->kv = malloc(s->kv_len);
    for (size_t i = 0; i < s->kv_len; i++)
        o->kv[i] = (uint8_t)(s->kv[i] ^ (i & 1 ? 0x01 : 0x00));
}

Test(hot, a_deleted_or_evicted_prefix_is_never_served_from_the_tier)
{
    const char *tmp = tu_tmpdir(), *dir = tu_path(tmp, "db");
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    seqkv_options o = {.cache_bytes = 1 << 20};
    seqkv *db = store_at_level(dir, &o, &tm, SEQKV_RAW, 0, CHUNK);
    su_seq a, b;
    su_seq_make(&tm, NULL, 0, 40, 5, &a);
    other_kv(&a, &b);
    put(db, "t", "p", &a, 0);
    size_t ch, removed, got;
    cr_assert_eq(view_check(db, &tm, &a, a.n, &ch, "a"), 3);
    cr_assert_eq(seqkv_del(db, "t", "p", a.tok, a.n, &removed), 0);
    cr_assert_eq(removed, a.n);
    seqkv_view *v = NULL;
    cr_assert_eq(seqkv_get_view(db, "t", "p", a.tok, a.n, NULL, &v, &got), SKV_ERR_NOT_FOUND);
    cr_assert_null(v);
    cr_assert_eq(cache(db).chunks, 0, "del dropped the tier's entries");
    cr_assert_eq(cache(db).drops, 3);
    /* the same tokens, other KV: served as put now, never the old bytes */
    put(db, "t", "p", &b, 0);
    cr_assert_eq(view_check(db, &tm, &b, b.n, &ch, "b"), 3);
    seqkv_close(db);

    /* the store's budget evicts the older of two sequences: gone from the
     * tier too */
    const char *dir2 = tu_path(tmp, "db2");
    seqkv_options ob = {.cache_bytes = 1 << 20, .budget = su_kv_len(&tm, 40) + 2048};
    db = open_store(dir2, &ob);
    add_profile(db, &tm, "p", CHUNK, SEQKV_RAW, 0);
    su_seq c;
    int32_t first = (a.tok[0] + 1) % tm.c->vocab_size;
    su_seq_make(&tm, &first, 1, 40, 6, &c);
    put(db, "t", "p", &a, 0);
    cr_assert_eq(view_check(db, &tm, &a, a.n, &ch, "a hot"), 3);
    seqkv_put_result r = put(db, "t", "p", &c, 0);
    cr_assert_gt(r.evicted, 0, "the budget evicted a");
    cr_assert_lt(lookup(db, "t", "p", a.tok, a.n), a.n);
    cr_assert_eq(seqkv_get_view(db, "t", "p", a.tok, a.n, &(seqkv_get_opts){.want = a.n}, &v, &got), SKV_ERR_NOT_FOUND);
    cr_assert_eq(cache(db).drops, (uint64_t)r.evicted);
    cr_assert_eq(view_check(db, &tm, &c, c.n, &ch, "c"), 3);
    seqkv_close(db);
    free(b.kv);
    su_seq_free(&a);
    su_seq_free(&c);
    su_model_free(&tm);
}

Test(hot, damage_on_disk_is_caught_on_the_read_into_the_tier)
{
    const char *tmp = tu_tmpdir(), *dir = tu_path(tmp, "db");
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    seqkv_options o = {.cache_bytes = 1 << 20};
    seqkv *db = store_at_level(dir, &o, &tm, SEQKV_RAW, 0, CHUNK);
    su_seq a;
    su_seq_make(&tm, NULL, 0, 40, 5, &a);
    put(db, "t", "p", &a, 0);
    seqkv_close(db);
    uint8_t key[32];
    cr_assert_eq(su_chunk_find(dir, 1, a.tok + CHUNK, CHUNK, key), 0);
    size_t len, got;
    uint8_t *orig = su_chunk_get(dir, key, &len), *bad = malloc(len);
    memcpy(bad, orig, len);
    bad[len / 2] ^= 0x10; /* a stream byte */
    su_chunk_put(dir, key, bad, len);
    db = open_store(dir, &o);
    seqkv_view *v = NULL;
    for (int i = 0; i < 2; i++) {
        int rc = seqkv_get_view(db, "t", "p", a.tok, a.n, NULL, &v, &got);
        cr_assert_eq(rc, SKV_ERR_CORRUPT, "get %d: %s (%s)", i, seqkv_error_name(rc),
                     seqkv_error_detail());
        cr_assert_null(v);
    }
    seqkv_cache_stats c = cache(db);
    cr_assert_eq(c.inserts, 1, "chunk 0 only: it was read and verified before the damaged one");
    cr_assert_eq(c.chunks, 1);
    size_t ch;
    cr_assert_eq(view_check(db, &tm, &a, CHUNK, &ch, "the undamaged first chunk"), 1);
    seqkv_close(db);
    su_chunk_put(dir, key, orig, len);
    db = open_store(dir, &o);
    cr_assert_eq(view_check(db, &tm, &a, a.n, &ch, "restored"), 0);
    cr_assert_eq(view_check(db, &tm, &a, a.n, &ch, "restored, hot"), 3);
    seqkv_close(db);
    free(orig);
    free(bad);
    su_seq_free(&a);
    su_model_free(&tm);
}

/* ---- concurrency -------------------------------------------------------------------- */

typedef struct {
    seqkv *db;
    const su_model *tm;
    su_seq *a, *b, *others;
    int nothers;
    uint8_t *ea, *eb; /* a's and b's expected bytes */
    atomic_int stop;
    atomic_int wrong, errors, served_a, served_b, missed;
} conc;

static void *reader(void *arg)
{
    conc *c = arg;
    const size_t len = c->a->kv_len;
    uint8_t *out = malloc(len);
    for (unsigned it = 0; !atomic_load(&c->stop); it++) {
        size_t got;
        int rc = seqkv_get(c->db, "t", "p", c->a->tok, c->a->n, NULL, out, len, &got);
        if (rc == SKV_ERR_NOT_FOUND) {
            atomic_fetch_add(&c->missed, 1);
        } else if (rc) {
            if (atomic_fetch_add(&c->errors, 1) < 3)
                cr_log_info("reader: %s (%s)", seqkv_error_name(rc), seqkv_error_detail());
        } else if (got == c->a->n && memcmp(out, c->ea, len) == 0) {
            atomic_fetch_add(&c->served_a, 1);
        } else if (got == c->a->n && memcmp(out, c->eb, len) == 0) {
            atomic_fetch_add(&c->served_b, 1);
        } else if (got < c->a->n) {
            /* a prefix while a put or del is half way: a's or b's bytes */
            uint8_t *x = malloc(len), *y = malloc(len);
            su_expect(c->tm, c->a, got, x);
            su_expect(c->tm, c->b, got, y);
            size_t gl = su_kv_len(c->tm, got);
            if (memcmp(out, x, gl) != 0 && memcmp(out, y, gl) != 0)
                atomic_fetch_add(&c->wrong, 1);
            free(x);
            free(y);
        } else {
            atomic_fetch_add(&c->wrong, 1);
        }
        /* churn: other sequences push the small tier to evict */
        const su_seq *o = &c->others[it % (unsigned)c->nothers];
        if (su_get_check(c->db, "t", "p", c->tm, o, 0, NULL) != 0)
            atomic_fetch_add(&c->wrong, 1);
    }
    free(out);
    return NULL;
}

Test(hot, concurrent_gets_puts_and_dels_never_serve_stale_or_mixed_bytes, .timeout = 120)
{
    const char *tmp = tu_tmpdir(), *dir = tu_path(tmp, "db");
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    const size_t E = (size_t)tm.L * 2 * CHUNK * tm.row;
    seqkv_options o = {.cache_bytes = 6 * E, .no_sync = 1};
    seqkv *db = open_store(dir, &o);
    add_profile(db, &tm, "p", CHUNK, SEQKV_RAW, 0);
    su_seq a, b, others[6];
    su_seq_make(&tm, NULL, 0, 48, 5, &a);
    other_kv(&a, &b);
    for (int i = 0; i < 6; i++) {
        int32_t first = (a.tok[0] + 1 + i) % tm.c->vocab_size;
        su_seq_make(&tm, &first, 1, 40, 60 + (uint64_t)i, &others[i]);
        put(db, "t", "p", &others[i], 0);
    }
    conc c = {.db = db, .tm = &tm, .a = &a, .b = &b, .others = others, .nothers = 6};
    c.ea = malloc(a.kv_len);
    c.eb = malloc(a.kv_len);
    su_expect(&tm, &a, a.n, c.ea);
    su_expect(&tm, &b, b.n, c.eb);
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&th[i], NULL, reader, &c);
    uint8_t *out = malloc(a.kv_len);
    for (int round = 0; round < 150; round++) {
        const su_seq *s = round & 1 ? &b : &a;
        const uint8_t *e = round & 1 ? c.eb : c.ea;
        seqkv_put_result r;
        cr_assert_eq(seqkv_put(db, "t", "p", s->tok, s->n, s->kv, s->kv_len, NULL, &r), 0);
        size_t got, removed;
        cr_assert_eq(seqkv_get(db, "t", "p", s->tok, s->n, NULL, out, a.kv_len, &got), 0);
        cr_assert_eq(got, s->n);
        cr_assert_eq(memcmp(out, e, a.kv_len), 0, "round %d: a get after the put returns its bytes",
                     round);
        cr_assert_eq(seqkv_del(db, "t", "p", s->tok, s->n, &removed), 0);
        cr_assert_eq(removed, s->n);
        cr_assert_eq(seqkv_get(db, "t", "p", s->tok, s->n, NULL, out, a.kv_len, &got),
                     SKV_ERR_NOT_FOUND, "round %d: a get after the del finds nothing", round);
    }
    atomic_store(&c.stop, 1);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    cr_assert_eq(atomic_load(&c.wrong), 0, "a reader got bytes that were never put");
    cr_assert_eq(atomic_load(&c.errors), 0);
    cr_log_info("readers: %d gets of a, %d of b, %d misses; tier: %llu evictions, %llu drops",
                atomic_load(&c.served_a), atomic_load(&c.served_b), atomic_load(&c.missed),
                (unsigned long long)cache(db).evictions, (unsigned long long)cache(db).drops);
    cr_assert_gt(cache(db).evictions, 0, "the churn made the tier evict");
    cr_assert_leq(cache(db).bytes, o.cache_bytes);
    seqkv_close(db);
    free(out);
    free(c.ea);
    free(c.eb);
    free(b.kv);
    su_seq_free(&a);
    for (int i = 0; i < 6; i++)
        su_seq_free(&others[i]);
    su_model_free(&tm);
}

/* Readers of sequences that a writer's puts keep evicting (a small store
 * budget): each get is the exact KV of what it returns, or a miss; an
 * evicted record is never an error. */
typedef struct {
    seqkv *db;
    const su_model *tm;
    const su_seq *s;
    int n;
    atomic_int stop, wrong, errors, served, missed;
} evict_conc;

static void *evict_reader(void *arg)
{
    evict_conc *c = arg;
    for (unsigned it = 0; !atomic_load(&c->stop); it++) {
        const su_seq *s = &c->s[it % (unsigned)c->n];
        size_t got;
        int rc = su_get_check(c->db, "t", "p", c->tm, s, 0, &got);
        if (rc == SKV_ERR_NOT_FOUND) {
            atomic_fetch_add(&c->missed, 1);
        } else if (rc == 1) {
            atomic_fetch_add(&c->wrong, 1);
        } else if (rc) {
            if (atomic_fetch_add(&c->errors, 1) < 3)
                cr_log_info("reader: %s (%s)", seqkv_error_name(rc), seqkv_error_detail());
        } else {
            atomic_fetch_add(&c->served, 1);
        }
    }
    return NULL;
}

Test(hot, gets_during_evicting_puts_are_exact_or_misses, .timeout = 120)
{
    const char *tmp = tu_tmpdir(), *dir = tu_path(tmp, "db");
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    enum { NS = 12 };
    su_seq s[NS];
    for (int i = 0; i < NS; i++) {
        int32_t first = (int32_t)(i + 1) % tm.c->vocab_size;
        su_seq_make(&tm, &first, 1, 40, 90 + (uint64_t)i, &s[i]);
    }
    /* room for about four of the twelve in the store, and no tier: every
     * get reads LMDB */
    test_cache_bytes = 0;
    seqkv_options o = {.budget = 4 * s[0].kv_len, .no_sync = 1};
    seqkv *db = open_store(dir, &o);
    add_profile(db, &tm, "p", CHUNK, SEQKV_RAW, 0);
    evict_conc c = {.db = db, .tm = &tm, .s = s, .n = NS};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, evict_reader, &c);
    for (int round = 0; round < 120; round++)
        put(db, "t", "p", &s[round % NS], 0);
    atomic_store(&c.stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    cr_log_info("readers: %d exact gets, %d misses; %llu evictions", atomic_load(&c.served),
                atomic_load(&c.missed), (unsigned long long)stats(db, NULL).evictions);
    cr_assert_eq(atomic_load(&c.wrong), 0, "a reader got bytes that were never put");
    cr_assert_eq(atomic_load(&c.errors), 0, "an evicted record made a get fail");
    cr_assert_gt(stats(db, NULL).evictions, 0, "the puts evicted");
    seqkv_close(db);
    for (int i = 0; i < NS; i++)
        su_seq_free(&s[i]);
    su_model_free(&tm);
}
