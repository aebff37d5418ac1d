/* Concurrent readers with one writer see whole puts; put batches (group
 * commit) store what single puts store, fail bad requests alone, retry put
 * by put at a full map, are never seen before their commit, and refuse
 * nothing under a small budget that single puts store. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "seqkv.h"
#include "skv_delta.h"
#include "storetest.h"
#include "storeutil.h"
#include "testutil.h"

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

Test(store_batch, concurrent_readers_with_one_writer_see_whole_puts, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
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
    cr_assert_eq(seqkv_calibrate(db, "p", 0), 0, "calibrate: %s", seqkv_error_detail());
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

Test(store_batch, a_put_batch_stores_what_single_puts_store_and_fails_bad_requests_alone, .timeout = 180)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
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
    seqkv_profile p1 = SEQKV_PROFILE_INIT, p2 = SEQKV_PROFILE_INIT;
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
            cr_assert_eq(rc, 0, "%s", seqkv_error_detail());
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
                    cr_assert(strstr(q[j].detail, "needs") != NULL, "its detail: %s", q[j].detail);
                    continue;
                }
                const seqkv_put_result *a = &single[idx[j]], *b = &q[j].res;
                cr_assert_eq(q[j].rc, 0, "request %d: %d %s", j, q[j].rc, q[j].detail);
                cr_assert_eq(q[j].detail[0], 0);
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
    cr_assert(strstr(q[1].detail, "read-only") != NULL, "%s", q[1].detail);
    su_seq_free(&d);
    seqkv_close(bat);
    for (int i = 0; i < N; i++)
        su_seq_free(&s[i]);
    su_model_free(&tm);
}

Test(store_batch, a_full_map_at_its_limit_retries_a_batch_put_by_put, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    enum { F = 16, PER = 8, N = F * PER };
    su_seq *s = calloc(N, sizeof *s);
    make_workload(&tm, F, PER, 555, s);
    /* (records in LMDB, also in the _vfile runs: value files take no map
     * space, so a map of their stubs would not fill) */
    seqkv_options lim = {.map_size = 128 << 10, .map_max = MAP_LIMIT, .file_min = UINT64_MAX};
    seqkv *db = open_store(tu_path(tmp, "limit"), &lim);
    add_profile(db, &tm, "p", CHUNK, SEQKV_RAW, 0);
    for (int k0 = 0; k0 < N; k0 += 8) {
        seqkv_put_req q[8];
        for (int j = 0; j < 8; j++)
            req_of(&q[j], "t", &s[k0 + j], NULL);
        cr_assert_eq(seqkv_put_batch(db, q, 8), 0, "a batch at the map limit: %d %s", q[0].rc,
                     q[0].detail);
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

Test(store_batch, concurrent_readers_never_see_a_batch_before_its_commit, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
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
Test(store_batch, a_put_batch_under_a_small_budget_refuses_nothing_single_puts_store, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
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
                         q[j].detail);
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
