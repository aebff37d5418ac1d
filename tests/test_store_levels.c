/* The store's coding: every level the build can do round-trips on random
 * model KV and stories260K, an imported calibration codes and a foreign
 * one is refused, and near duplicates are coded against a centroid (the
 * probabilistic trie). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "seqkv.h"
#include "skv_delta.h"
#include "storetest.h"
#include "storeutil.h"
#include "testutil.h"

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

    cr_assert_eq(seqkv_calibrate(db, "p", 4), 0, "calibrate: %s", seqkv_error_detail());
    seqkv_profile pr = SEQKV_PROFILE_INIT;
    cr_assert_eq(seqkv_profile_get(db, "p", &pr), 0);
    cr_assert(pr.has_calib);
    for (int l = SEQKV_STAT; l < SEQKV_LEVELS; l++)
        level_case(db, tm, &L, (seqkv_level)l, count, len, 1000 + 100 * (uint64_t)l);
    /* the profile's level as the default */
    pr.level = SEQKV_CTX;
    cr_assert_eq(seqkv_profile_set(db, &pr), 0, "%s", seqkv_error_detail());
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

Test(store_levels, every_level_round_trips_on_random_model_kv, .timeout = 300)
{
    su_model tm;
    su_random_model(&tm, tu_tmpdir(), SEQKV_DT_BF16);
    levels_on(&tm, 2, 40, 0);
    su_model_free(&tm);
}

Test(store_levels, every_level_round_trips_on_stories260k, .timeout = 300)
{
    su_model tm;
    if (su_shared_model(&tm, "stories260K.bin", SEQKV_DT_BF16))
        cr_skip("../shared/models/stories260K.bin not present");
    levels_on(&tm, 1, 64, 1);
    su_model_free(&tm);
}

Test(store_levels, an_imported_calibration_codes_and_a_foreign_one_is_refused, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
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
    cr_assert_eq(skv_calib_learn(st, &co, &c), 0, "%s", seqkv_error_detail());
    const char *cpath = tu_path(tmp, "c.cal");
    cr_assert_eq(skv_calib_save(c, cpath), 0);
    skv_calib_free(c);
    skv_st_free(st);
    free(img);

    seqkv *db = open_store(tu_path(tmp, "db"), NULL);
    add_profile(db, &tm, "p", CHUNK, SEQKV_CTX, 0);
    cr_assert_eq(seqkv_calibrate_import(db, "nope", cpath), SKV_ERR_NOT_FOUND);
    cr_assert_eq(seqkv_calibrate_import(db, "p", cpath), 0, "%s", seqkv_error_detail());
    seqkv_profile pr = SEQKV_PROFILE_INIT;
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
    t16.dt = SEQKV_DT_F16;
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
        if (su_shared_model(&tm, "stories260K.bin", SEQKV_DT_BF16))
            cr_skip("../shared/models/stories260K.bin not present");
    } else {
        su_random_model(&tm, tmp, SEQKV_DT_BF16);
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
    cr_assert_eq(seqkv_calibrate(db, "p", 0), 0, "%s", seqkv_error_detail());
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
    cr_assert_eq(seqkv_del(db, "t", "p", base.tok, base.n, &removed), 0, "%s", seqkv_error_detail());
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
                             "member %d after eviction: %s", j, seqkv_error_detail());
        }
    }
    cr_assert_gt(stats(db, NULL).evictions, 0);
    seqkv_close(db);
    su_seq_free(&base);
    for (int i = 0; i < M; i++)
        su_seq_free(&mem[i]);
    su_model_free(&tm);
}

Test(store_levels, near_duplicates_coded_against_a_centroid_round_trip, .timeout = 120)
{
    centroid_case(0, SEQKV_CTX);
    centroid_case(0, SEQKV_SPEC);
}

Test(store_levels, stories260k_near_duplicates_are_coded_against_their_centroid, .timeout = 120)
{
    centroid_case(1, SEQKV_CTX);
}

/* A profile without a model whose tenants put ids spread over [0, 2^31 - 1)
 * (vocab at its maximum): the calibration's codebook holds the tokens
 * seen, so its memory follows the calibration data, not the largest id.
 * Measured in a forked child (ru_maxrss of this process alone), then the
 * calibration codes new sequences with those ids and they come back
 * bit-exactly. Exit codes: 0 ok, 1.. the failing step. */
static int spread_ids_child(const char *tmp, long *grew_kib)
{
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    seqkv *db = open_store(tu_path(tmp, "db"), NULL);
    seqkv_profile p = SEQKV_PROFILE_INIT;
    su_profile(&tm, "p", 64, SEQKV_CTX, 0, &p);
    p.vocab = SEQKV_VOCAB_MAX;
    if (seqkv_profile_set(db, &p))
        return 1;
    enum { NS = 32, T = 256 };
    su_seq s[NS];
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < NS; i++) {
        su_seq_make(&tm, NULL, 0, T, (uint64_t)i + 1, &s[i]);
        for (size_t t = 0; t < T; t++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            s[i].tok[t] = (int32_t)((x >> 33) % (uint64_t)SEQKV_VOCAB_MAX);
        }
        seqkv_put_result r;
        if (seqkv_put(db, "t", "p", s[i].tok, s[i].n, s[i].kv, s[i].kv_len, NULL, &r))
            return 2;
    }
    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    if (seqkv_calibrate(db, "p", NS)) {
        fprintf(stderr, "calibrate: %s\n", seqkv_error_detail());
        return 3;
    }
    getrusage(RUSAGE_SELF, &ru1);
    *grew_kib = ru1.ru_maxrss - ru0.ru_maxrss;
    /* new tenant: coded at ctx with the new calibration, back bit-exactly */
    for (int i = 0; i < NS; i++) {
        seqkv_put_result r;
        if (seqkv_put(db, "u", "p", s[i].tok, s[i].n, s[i].kv, s[i].kv_len, NULL, &r) ||
            r.new_tokens != T)
            return 4;
        uint8_t *out = malloc(s[i].kv_len);
        size_t got = 0;
        int rc = seqkv_get(db, "u", "p", s[i].tok, s[i].n, NULL, out, s[i].kv_len, &got);
        int same = rc == 0 && got == T && memcmp(out, s[i].kv, s[i].kv_len) == 0;
        free(out);
        if (!same)
            return 5;
    }
    seqkv_stats st = stats(db, "u");
    if (st.level_tokens[SEQKV_CTX] != (uint64_t)NS * T)
        return 6;
    for (int i = 0; i < NS; i++)
        su_seq_free(&s[i]);
    seqkv_close(db);
    su_model_free(&tm);
    return 0;
}

Test(store_levels, calibration_of_ids_spread_over_2_31_has_bounded_memory_and_round_trips,
     .timeout = 300)
{
    const char *tmp = tu_tmpdir();
    int fd[2];
    cr_assert_eq(pipe(fd), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        long grew = -1;
        int code = spread_ids_child(tmp, &grew);
        ssize_t w = write(fd[1], &grew, sizeof grew);
        _exit(w == (ssize_t)sizeof grew ? code : 10);
    }
    long grew = -1;
    cr_assert_eq(read(fd[0], &grew, sizeof grew), (ssize_t)sizeof grew);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status), "child died");
    cr_assert_eq(WEXITSTATUS(status), 0, "child failed at step %d", WEXITSTATUS(status));
    cr_log_info("peak RSS grew %ld KiB over seqkv_calibrate (ids over [0, 2^31 - 1))", grew);
    cr_assert_lt(grew, 256L * 1024, "calibration grew peak RSS by %ld KiB", grew);
    close(fd[0]);
    close(fd[1]);
}

/* ---- the fast level ------------------------------------------------------------- */

/* A profile at level fast codes without a calibration, round-trips
 * bit-exactly, stays fast when calibrated, and decodes after reopen. */
static void fast_on(su_model *tm, size_t len, int check_ratio)
{
    const char *dir = tu_path(tu_tmpdir(), "dbfast");
    seqkv *db = open_store(dir, NULL);
    add_profile(db, tm, "p", CHUNK, SEQKV_FAST, 1);
    su_seq s[3];
    for (int i = 0; i < 3; i++) {
        su_seq_make(tm, NULL, 0, len + (size_t)(7 * i), 4000 + (uint64_t)i, &s[i]);
        seqkv_put_result r = put(db, "t", "p", &s[i], 0);
        cr_assert_gt(r.new_tokens, 0);
        assert_whole(db, "t", "p", tm, &s[i], "fast");
    }
    seqkv_stats a = stats(db, NULL);
    cr_assert_eq(a.level_tokens[SEQKV_FAST], a.coded_tokens, "coded at fast (%llu of %llu)",
                 (unsigned long long)a.level_tokens[SEQKV_FAST], (unsigned long long)a.coded_tokens);
    if (check_ratio)
        cr_assert_lt(a.level_stored[SEQKV_FAST], a.level_raw[SEQKV_FAST]);
    cr_log_info("fast: %llu raw bytes stored in %llu", (unsigned long long)a.level_raw[SEQKV_FAST],
                (unsigned long long)a.level_stored[SEQKV_FAST]);
    cr_assert_eq(seqkv_calibrate(db, "p", 2), 0, "calibrate: %s", seqkv_error_detail());
    seqkv_profile pr = SEQKV_PROFILE_INIT;
    cr_assert_eq(seqkv_profile_get(db, "p", &pr), 0);
    cr_assert_eq(pr.level, SEQKV_FAST, "calibrating leaves a fast profile fast");
    seqkv_close(db);
    db = open_store(dir, NULL);
    for (int i = 0; i < 3; i++)
        assert_whole(db, "t", "p", tm, &s[i], "fast, reopened");
    seqkv_close(db);
    for (int i = 0; i < 3; i++)
        su_seq_free(&s[i]);
}

Test(store_levels, level_fast_round_trips_on_random_model_kv, .timeout = 120)
{
    su_model tm;
    su_random_model(&tm, tu_tmpdir(), SEQKV_DT_BF16);
    fast_on(&tm, 300, 0);
    su_model_free(&tm);
}

Test(store_levels, level_fast_round_trips_on_stories260k, .timeout = 120)
{
    su_model tm;
    if (su_shared_model(&tm, "stories260K.bin", SEQKV_DT_BF16)) {
        cr_log_info("../shared/models/stories260K.bin not present: skipped");
        cr_skip("../shared/models/stories260K.bin not present");
    }
    fast_on(&tm, 300, 1);
    su_model_free(&tm);
}
