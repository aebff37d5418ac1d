/* Self-calibration and compaction: a profile learns its calibration once
 * it holds auto_calibrate positions (never before, never when -1), and
 * seqkv_compact codes the raw records stored before at the profile's
 * level, re-codes records of an older calibration (which is then deleted)
 * and merges an appending session's records -- every GET exact throughout
 * and after a reopen, and a kill -9 at any point of a compaction loses
 * nothing. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "seqkv.h"
#include "store_priv.h"
#include "storetest.h"
#include "storeutil.h"
#include "testutil.h"

static seqkv_compact_stats compact(seqkv *db, const char *profile)
{
    seqkv_compact_stats st;
    int rc = seqkv_compact(db, profile, NULL, NULL, &st);
    cr_assert_eq(rc, 0, "compact: %s (%s)", seqkv_error_name(rc), seqkv_error_detail());
    cr_assert_eq(st.damaged, 0);
    return st;
}

static void set_auto(seqkv *db, int n)
{
    seqkv_profile p = SEQKV_PROFILE_INIT;
    cr_assert_eq(seqkv_profile_get(db, "p", &p), 0);
    p.auto_calibrate = n;
    cr_assert_eq(seqkv_profile_set(db, &p), 0, "%s", seqkv_error_detail());
    cr_assert_eq(seqkv_profile_get(db, "p", &p), 0);
    cr_assert_eq(p.auto_calibrate, n, "the setting is kept");
}

static int has_calib(seqkv *db)
{
    seqkv_profile p = SEQKV_PROFILE_INIT;
    cr_assert_eq(seqkv_profile_get(db, "p", &p), 0);
    return p.has_calib;
}

/* behind_min: skv_compact_behind_min for the compactions (0: every record
 * written behind, while the next is coded) */
static void calibrates_and_recodes(size_t behind_min)
{
    const size_t was = skv_compact_behind_min;
    skv_compact_behind_min = behind_min;
    const char *tmp = tu_tmpdir(), *dir = tu_path(tmp, "db");
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    seqkv *db = open_store(dir, NULL);
    add_profile(db, &tm, "p", CHUNK, SEQKV_CTX, 0);
    set_auto(db, 300);
    enum { N = 10 };
    su_seq s[N];
    int learned_at = -1;
    for (int i = 0; i < N; i++) {
        su_seq_make(&tm, NULL, 0, 48, 100 + (uint64_t)i, &s[i]);
        put(db, "t", "p", &s[i], 0);
        int learned = 0;
        cr_assert_eq(seqkv_auto_calibrate(db, NULL, &learned), 0, "%s", seqkv_error_detail());
        if (learned) {
            cr_assert_eq(learned_at, -1, "learned once");
            learned_at = i;
        }
        cr_assert_eq(has_calib(db), learned_at >= 0);
    }
    /* 48 new positions a put (their first tokens may repeat another's) */
    cr_assert(learned_at >= 5 && learned_at <= 7, "learned at put %d, past 300 positions",
              learned_at);
    seqkv_stats before = stats(db, "t");
    cr_assert_gt(before.level_tokens[SEQKV_RAW], 0, "the puts before it stored raw");
    cr_assert_gt(before.level_tokens[SEQKV_CTX], 0, "the puts after it coded at ctx");
    seqkv_compact_stats cs = compact(db, "p");
    seqkv_stats after = stats(db, "t");
    cr_assert_eq(after.level_tokens[SEQKV_RAW], 0, "every raw record re-coded");
    cr_assert_eq(after.level_tokens[SEQKV_CTX], after.coded_tokens);
    cr_assert_gt(cs.recoded, 0);
    cr_assert_lt(after.stored_bytes, before.stored_bytes);
    cr_assert_eq(cs.bytes_before - cs.bytes_after, before.stored_bytes - after.stored_bytes,
                 "the stats count what changed");
    for (int i = 0; i < N; i++)
        assert_whole(db, "t", "p", &tm, &s[i], "after compaction");
    /* nothing left to do */
    cs = compact(db, "p");
    cr_assert_eq(cs.recoded, 0);
    seqkv_close(db);
    db = open_store(dir, NULL);
    for (int i = 0; i < N; i++)
        assert_whole(db, "t", "p", &tm, &s[i], "after reopen");
    cr_assert_eq(stats(db, "t").stored_bytes, after.stored_bytes);
    seqkv_close(db);
    for (int i = 0; i < N; i++)
        su_seq_free(&s[i]);
    su_model_free(&tm);
    skv_compact_behind_min = was;
}

Test(compact, a_profile_calibrates_itself_at_its_threshold_and_raw_records_are_recoded,
     .timeout = 120)
{
    calibrates_and_recodes((size_t)-1);
}

Test(compact, written_behind_every_record_is_recoded_the_same, .timeout = 120)
{
    calibrates_and_recodes(0);
}

/* A store in a temporary directory (*dir) with profile "p" at ctx, n
 * sequences s of 48 tokens (seeds seed0, seed0 + 1, ...; the last `spare`
 * made but not put) put raw by tenant t, and a calibration learned */
static seqkv *raw_and_calibrated_o(const char **dir, su_model *tm, su_seq *s, int n, int spare,
                                   uint64_t seed0, const seqkv_options *o)
{
    const char *tmp = tu_tmpdir();
    *dir = tu_path(tmp, "db");
    su_random_model(tm, tmp, SEQKV_DT_BF16);
    seqkv *db = open_store(*dir, o);
    add_profile(db, tm, "p", CHUNK, SEQKV_CTX, 0);
    for (int i = 0; i < n + spare; i++)
        su_seq_make(tm, NULL, 0, 48, seed0 + (uint64_t)i, &s[i]);
    for (int i = 0; i < n; i++)
        put(db, "t", "p", &s[i], SEQKV_RAW + 1);
    cr_assert_eq(seqkv_calibrate(db, "p", 0), 0, "%s", seqkv_error_detail());
    return db;
}

static seqkv *raw_and_calibrated(const char **dir, su_model *tm, su_seq *s, int n, int spare,
                                 uint64_t seed0)
{
    return raw_and_calibrated_o(dir, tm, s, n, spare, seed0, NULL);
}

static int del_all_once(void *vctx, uint64_t done, uint64_t total)
{
    void **c = vctx;
    seqkv *db = c[0];
    const su_seq *s = c[1];
    int *n = c[2];
    (void)total;
    if (done == 1) /* the first step's record waits to be written */
        for (int i = 0; i < *n; i++) {
            size_t removed = 0;
            cr_assert_eq(seqkv_del(db, "t", "p", s[i].tok, s[i].n, &removed), 0, "%s",
                         seqkv_error_detail());
            cr_assert_eq(removed, s[i].n);
        }
    return 0;
}

/* Every sequence deleted between the first step and the second, as a DEL
 * between two of a server's steps would: the record the first step coded,
 * waiting to be written behind, is not written back (nor is anything
 * else), so the store is empty, before and after a reopen */
Test(compact, a_record_deleted_before_its_write_behind_is_not_written_back, .timeout = 120)
{
    const size_t was = skv_compact_behind_min;
    skv_compact_behind_min = 0;
    const char *dir;
    su_model tm;
    enum { N = 6 };
    su_seq s[N];
    seqkv *db = raw_and_calibrated(&dir, &tm, s, N, 0, 300);
    cr_assert_gt(stats(db, "t").chunks, 0);
    int n = N;
    void *c[3] = {db, s, &n};
    seqkv_compact_stats cs;
    cr_assert_eq(seqkv_compact(db, "p", del_all_once, c, &cs), 0, "%s", seqkv_error_detail());
    cr_assert_eq(cs.recoded, 0, "nothing written back (%llu)", (unsigned long long)cs.recoded);
    seqkv_stats st = stats(db, "t");
    cr_assert_eq(st.chunks, 0);
    cr_assert_eq(st.stored_bytes, 0);
    seqkv_close(db);
    db = open_store(dir, NULL);
    st = stats(db, "t");
    cr_assert_eq(st.chunks, 0, "no record came back at the reopen (%llu)", (unsigned long long)st.chunks);
    for (int i = 0; i < N; i++)
        cr_assert_eq(lookup(db, "t", "p", s[i].tok, s[i].n), 0);
    seqkv_close(db);
    for (int i = 0; i < N; i++)
        su_seq_free(&s[i]);
    su_model_free(&tm);
    skv_compact_behind_min = was;
}

/* A chain's records come one after another, the deepest first, and a step
 * codes its record from the rows the step before decoded (held): the same
 * records and bytes as a compaction whose every step decodes afresh, and
 * every GET exact */
Test(compact, a_chains_records_coded_from_held_rows_are_the_same, .timeout = 120)
{
    enum { N = 6 };
    uint64_t recoded[2], bytes[2];
    size_t held[2];
    for (int k = 0; k < 2; k++) {
        const char *dir;
        su_model tm;
        su_seq s[N];
        seqkv *db = raw_and_calibrated(&dir, &tm, s, N, 0, 300);
        skv_compact_hold = k == 0;
        const size_t h0 = skv_compact_held;
        seqkv_compact_stats cs = compact(db, "p");
        held[k] = skv_compact_held - h0;
        recoded[k] = cs.recoded;
        bytes[k] = stats(db, "t").stored_bytes;
        cr_assert_eq(stats(db, "t").level_tokens[SEQKV_RAW], 0);
        for (int i = 0; i < N; i++)
            assert_whole(db, "t", "p", &tm, &s[i], k ? "decoded afresh" : "from held rows");
        seqkv_close(db);
        for (int i = 0; i < N; i++)
            su_seq_free(&s[i]);
        su_model_free(&tm);
    }
    skv_compact_hold = 1;
    /* 3 records a sequence: the last two of each from held rows */
    cr_assert_geq(held[0], N, "steps coded from held rows: %zu", held[0]);
    cr_assert_eq(held[1], 0);
    cr_assert_eq(recoded[0], recoded[1]);
    cr_assert_eq(bytes[0], bytes[1], "%llu bytes against %llu", (unsigned long long)bytes[0],
                 (unsigned long long)bytes[1]);
}

/* From the progress callback after the first step: every sequence
 * deleted and put again raw with other KV in its second chunk (the last
 * bit of each scalar flipped) */
static int put_again_once(void *vctx, uint64_t done, uint64_t total)
{
    void **c = vctx;
    seqkv *db = c[0];
    su_seq *s = c[1];
    const su_model *tm = c[2];
    (void)total;
    if (done == 1)
        for (int i = 0; i < 6; i++) {
            size_t removed = 0;
            cr_assert_eq(seqkv_del(db, "t", "p", s[i].tok, s[i].n, &removed), 0, "%s",
                         seqkv_error_detail());
            for (size_t b = 0; b < 2 * (size_t)tm->L; b++)
                for (size_t x = CHUNK * tm->row; x < 2 * CHUNK * tm->row; x += 2)
                    s[i].kv[b * s[i].n * tm->row + x] ^= 1;
            put(db, "t", "p", &s[i], SEQKV_RAW + 1);
        }
    return 0;
}

/* The rows a step holds for the next, and a record written behind, are
 * used only when the record they came from (or replace) is still the one
 * the step read: a sequence put again between two steps, with other KV of
 * the same size, is decoded again and not overwritten, and every GET
 * returns the KV put last -- sealed (a value's nonce differs) and unsealed
 * (its KV checksum does) */
static void put_again_between_steps(int no_seal, size_t behind_min)
{
    const size_t was = skv_compact_behind_min;
    skv_compact_behind_min = behind_min;
    const char *dir;
    su_model tm;
    enum { N = 6 };
    su_seq s[N];
    seqkv_options o = SEQKV_OPTIONS_INIT;
    o.no_seal = no_seal;
    seqkv *db = raw_and_calibrated_o(&dir, &tm, s, N, 0, 300, &o);
    void *c[3] = {db, s, &tm};
    const size_t h0 = skv_compact_held;
    seqkv_compact_stats cs;
    cr_assert_eq(seqkv_compact(db, "p", put_again_once, c, &cs), 0, "%s", seqkv_error_detail());
    cr_assert_eq(cs.damaged, 0);
    cr_assert_gt(skv_compact_held - h0, 0, "rows were held in the steps after the puts");
    for (int i = 0; i < N; i++)
        assert_whole(db, "t", "p", &tm, &s[i], "the KV put again");
    seqkv_close(db);
    db = open_store(dir, &o);
    for (int i = 0; i < N; i++)
        assert_whole(db, "t", "p", &tm, &s[i], "the KV put again, after a reopen");
    seqkv_close(db);
    for (int i = 0; i < N; i++)
        su_seq_free(&s[i]);
    su_model_free(&tm);
    skv_compact_behind_min = was;
}

Test(compact, rows_held_from_a_record_put_again_between_two_steps_are_not_used, .timeout = 120)
{
    put_again_between_steps(0, (size_t)-1);
}

Test(compact, unsealed_rows_held_from_a_record_put_again_are_not_used, .timeout = 120)
{
    put_again_between_steps(1, (size_t)-1);
}

Test(compact, a_record_put_again_before_its_write_behind_is_not_overwritten, .timeout = 120)
{
    put_again_between_steps(0, 0);
    put_again_between_steps(1, 0);
}

/* What a profile learns from its stored sequences, and so what its records
 * code to, follows what was stored, not the master key (whose keyed hashes
 * name the records and order the tries): two stores under two keys, the
 * same puts from two tenants, the same calibration and the same bytes --
 * from all their positions, or (sample) from windows of them. */
static void learn_under_two_keys(size_t sample, uint8_t calib_id[16])
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    enum { N = 10 };
    su_seq s[N];
    for (int i = 0; i < N; i++)
        su_seq_make(&tm, NULL, 0, 48, 300 + (uint64_t)i, &s[i]);
    seqkv_profile got[2] = {SEQKV_PROFILE_INIT, SEQKV_PROFILE_INIT};
    seqkv_stats st[2];
    for (int k = 0; k < 2; k++) {
        const char *dir = tu_path(tmp, k ? "db1" : "db0");
        su_master_key(dir, 11 + (uint64_t)k);
        seqkv_options o = SEQKV_OPTIONS_INIT;
        o.calib_sample = sample;
        seqkv *db = open_store(dir, &o);
        add_profile(db, &tm, "p", CHUNK, SEQKV_CTX, 0);
        set_auto(db, 300);
        for (int i = 0; i < N; i++) {
            put(db, i % 2 ? "u" : "t", "p", &s[i], 0);
            cr_assert_eq(seqkv_auto_calibrate(db, NULL, NULL), 0, "%s", seqkv_error_detail());
        }
        compact(db, "p");
        cr_assert_eq(seqkv_profile_get(db, "p", &got[k]), 0);
        cr_assert(got[k].has_calib, "the profile calibrated itself");
        st[k] = stats(db, NULL);
        for (int i = 0; i < N; i++)
            assert_whole(db, i % 2 ? "u" : "t", "p", &tm, &s[i], "coded under the calibration");
        seqkv_close(db);
    }
    cr_assert_eq(memcmp(got[0].calib_id, got[1].calib_id, 16), 0,
                 "the same calibration under either key");
    cr_assert_eq(st[0].level_tokens[SEQKV_RAW], 0);
    cr_assert_eq(st[0].coded_tokens, st[1].coded_tokens);
    cr_assert_eq(st[0].stored_bytes, st[1].stored_bytes, "%llu bytes under one key, %llu under the other",
                 (unsigned long long)st[0].stored_bytes, (unsigned long long)st[1].stored_bytes);
    memcpy(calib_id, got[0].calib_id, 16);
    for (int i = 0; i < N; i++)
        su_seq_free(&s[i]);
    su_model_free(&tm);
}

Test(compact, what_a_profile_learns_does_not_depend_on_the_master_key, .timeout = 120)
{
    uint8_t all[16], sampled[16];
    learn_under_two_keys(0, all);
    /* 300 of the 300-odd positions the calibration sees: windows of the
     * first two sequences in hash order, placed by their tokens' hash */
    learn_under_two_keys(300, sampled);
    cr_assert_neq(memcmp(all, sampled, 16), 0, "a sample of 300 positions learns another calibration");
}

Test(compact, never_when_off_and_not_below_the_threshold, .timeout = 60)
{
    const char *tmp = tu_tmpdir(), *dir = tu_path(tmp, "db");
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    seqkv *db = open_store(dir, NULL);
    add_profile(db, &tm, "p", CHUNK, SEQKV_CTX, 0);
    seqkv_profile p = SEQKV_PROFILE_INIT;
    cr_assert_eq(seqkv_profile_get(db, "p", &p), 0);
    cr_assert_eq(p.auto_calibrate, 0, "the default");
    su_seq s;
    su_seq_make(&tm, NULL, 0, 200, 5, &s);
    put(db, "t", "p", &s, 0);
    int learned = 1;
    cr_assert_eq(seqkv_auto_calibrate(db, "p", &learned), 0);
    cr_assert_eq(learned, 0, "200 positions are fewer than the default 8192");
    set_auto(db, -1);
    set_auto(db, -1);
    cr_assert_eq(seqkv_auto_calibrate(db, NULL, &learned), 0);
    cr_assert_eq(learned, 0);
    p.auto_calibrate = -2;
    cr_assert_eq(seqkv_profile_set(db, &p), SKV_ERR_ARG);
    set_auto(db, 100);
    cr_assert_eq(seqkv_auto_calibrate(db, NULL, &learned), 0);
    cr_assert_eq(learned, 1);
    cr_assert(has_calib(db));
    seqkv_close(db);
    su_seq_free(&s);
    su_model_free(&tm);
}

typedef struct {
    seqkv *db;
    su_seq *s;
    uint64_t step;      /* the compaction's last step done */
    uint64_t wait_from; /* the step after which the put began to wait */
    uint64_t put_after; /* the step after which the put returned */
    pthread_t th;
    int started;
} fair_ctx;

static void *fair_put(void *v)
{
    fair_ctx *f = v;
    /* (while a step holds the writer lock: the put then waits for it) */
    while (pthread_mutex_trylock(&f->db->wlock) == 0) {
        pthread_mutex_unlock(&f->db->wlock);
        sched_yield();
    }
    __atomic_store_n(&f->wait_from, __atomic_load_n(&f->step, __ATOMIC_ACQUIRE), __ATOMIC_RELEASE);
    put(f->db, "t", "p", f->s, 0);
    __atomic_store_n(&f->put_after, __atomic_load_n(&f->step, __ATOMIC_ACQUIRE), __ATOMIC_RELEASE);
    return NULL;
}

/* After the first step, a client's put that waits for the writer lock */
static int fair_step(void *vctx, uint64_t done, uint64_t total)
{
    fair_ctx *f = vctx;
    (void)total;
    __atomic_store_n(&f->step, done, __ATOMIC_RELEASE);
    if (done == 1) {
        cr_assert_eq(pthread_create(&f->th, NULL, fair_put, f), 0);
        f->started = 1;
    }
    return 0;
}

/* A client's writer waiting for the writer lock gets it between two steps
 * of a compaction, not after the last (the loop lets it in first: a mutex
 * alone hands the lock back to the thread that just let it go) */
Test(compact, a_put_waiting_for_the_writer_lock_goes_between_two_steps, .timeout = 120)
{
    const char *dir;
    su_model tm;
    enum { N = 8 };
    su_seq s[N + 1];
    seqkv *db = raw_and_calibrated(&dir, &tm, s, N, 1, 500);
    fair_ctx f = {db, &s[N], 0, 0, 0, 0, 0};
    seqkv_compact_stats cs;
    cr_assert_eq(seqkv_compact(db, "p", fair_step, &f, &cs), 0, "%s", seqkv_error_detail());
    cr_assert(f.started);
    pthread_join(f.th, NULL);
    cr_assert_geq(cs.records, 3 * N, "a compaction of many steps (%llu)", (unsigned long long)cs.records);
    /* (the step it waited in, or the next when the lock came free before it
     * was counted as waiting) */
    cr_assert_leq(f.put_after, f.wait_from + 2,
                  "the put waited from step %llu and returned after step %llu of %llu",
                  (unsigned long long)f.wait_from, (unsigned long long)f.put_after,
                  (unsigned long long)cs.records);
    for (int i = 0; i <= N; i++)
        assert_whole(db, "t", "p", &tm, &s[i], "after the compaction");
    seqkv_close(db);
    for (int i = 0; i <= N; i++)
        su_seq_free(&s[i]);
    su_model_free(&tm);
}

/* seqkv_stop_background (a shutdown): a calibration after it stores
 * nothing and says SKV_ERR_CANCELLED, at once or from self-calibration; a
 * compaction stops after its first record; gets and puts go on, exact */
Test(compact, a_stop_cancels_calibrations_and_compactions, .timeout = 60)
{
    const char *tmp = tu_tmpdir(), *dir = tu_path(tmp, "db");
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    seqkv *db = open_store(dir, NULL);
    add_profile(db, &tm, "p", CHUNK, SEQKV_CTX, 0);
    enum { N = 4 };
    su_seq s[N];
    for (int i = 0; i < N; i++) {
        su_seq_make(&tm, NULL, 0, 200, 40 + (uint64_t)i, &s[i]);
        put(db, "t", "p", &s[i], 0);
    }
    seqkv_stop_background(db);
    cr_assert_eq(seqkv_calibrate(db, "p", 0), SKV_ERR_CANCELLED, "%s", seqkv_error_detail());
    cr_assert_not(has_calib(db), "nothing stored");
    set_auto(db, 100);
    int learned = 1;
    cr_assert_eq(seqkv_auto_calibrate(db, NULL, &learned), SKV_ERR_CANCELLED);
    cr_assert_eq(learned, 0);
    cr_assert_not(has_calib(db));
    seqkv_compact_stats st;
    cr_assert_eq(seqkv_compact(db, "p", NULL, NULL, &st), SKV_OK, "what it did stays done");
    cr_assert_eq(st.recoded, 0, "raw records: nothing to code again without a calibration");
    for (int i = 0; i < N; i++)
        assert_whole(db, "t", "p", &tm, &s[i], "after the stop");
    su_seq more;
    su_seq_make(&tm, NULL, 0, 120, 99, &more);
    put(db, "t", "p", &more, 0);
    assert_whole(db, "t", "p", &tm, &more, "a put after the stop");
    seqkv_close(db);
    /* a new handle is not stopped: it learns */
    db = open_store(dir, NULL);
    cr_assert_eq(seqkv_calibrate(db, "p", 0), SKV_OK, "%s", seqkv_error_detail());
    cr_assert(has_calib(db));
    compact(db, "p");
    for (int i = 0; i < N; i++)
        assert_whole(db, "t", "p", &tm, &s[i], "coded after a new open");
    seqkv_close(db);
    for (int i = 0; i < N; i++)
        su_seq_free(&s[i]);
    su_seq_free(&more);
    su_model_free(&tm);
}

/* A second calibration: compaction re-codes the records of the first and
 * deletes it */
Test(compact, records_of_an_older_calibration_are_recoded_and_it_is_deleted, .timeout = 120)
{
    const char *tmp = tu_tmpdir(), *dir = tu_path(tmp, "db");
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    seqkv *db = open_store(dir, NULL);
    add_profile(db, &tm, "p", CHUNK, SEQKV_CTX, 0);
    su_seq a[4], b[4];
    for (int i = 0; i < 4; i++) {
        su_seq_make(&tm, NULL, 0, 40, 10 + (uint64_t)i, &a[i]);
        put(db, "t", "p", &a[i], 0);
    }
    cr_assert_eq(seqkv_calibrate(db, "p", 0), 0, "%s", seqkv_error_detail());
    seqkv_profile p1 = SEQKV_PROFILE_INIT;
    cr_assert_eq(seqkv_profile_get(db, "p", &p1), 0);
    for (int i = 0; i < 4; i++) {
        su_seq_make(&tm, NULL, 0, 40, 20 + (uint64_t)i, &b[i]);
        put(db, "t", "p", &b[i], 0);
    }
    cr_assert_eq(seqkv_calibrate(db, "p", 2), 0, "%s", seqkv_error_detail());
    seqkv_profile p2 = SEQKV_PROFILE_INIT;
    cr_assert_eq(seqkv_profile_get(db, "p", &p2), 0);
    cr_assert_neq(memcmp(p1.calib_id, p2.calib_id, 16), 0, "another calibration");
    seqkv_compact_stats cs = compact(db, NULL);
    cr_assert_geq(cs.recoded, 4 * 3, "b's ctx records (and a's raw ones)");
    cr_assert_eq(cs.calibrations_deleted, 1, "the first calibration");
    for (int i = 0; i < 4; i++) {
        assert_whole(db, "t", "p", &tm, &a[i], "a");
        assert_whole(db, "t", "p", &tm, &b[i], "b");
    }
    seqkv_close(db);
    db = open_store(dir, NULL);
    for (int i = 0; i < 4; i++) {
        assert_whole(db, "t", "p", &tm, &a[i], "a, reopened");
        assert_whole(db, "t", "p", &tm, &b[i], "b, reopened");
        su_seq_free(&a[i]);
        su_seq_free(&b[i]);
    }
    cr_assert_eq(compact(db, NULL).calibrations_deleted, 0);
    seqkv_close(db);
    su_model_free(&tm);
}

/* An agent appending 2 tokens a put: after compaction, one record a chunk,
 * within 10% of the bytes of one put of the whole sequence */
Test(compact, appends_merge_into_one_record_a_chunk, .timeout = 120)
{
    const char *tmp = tu_tmpdir(), *dir = tu_path(tmp, "db"), *one = tu_path(tmp, "one");
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    su_seq s;
    su_seq_make(&tm, NULL, 0, 100, 3, &s);
    seqkv *db = open_store(dir, NULL), *ref = open_store(one, NULL);
    add_profile(db, &tm, "p", CHUNK, SEQKV_CTX, 0);
    add_profile(ref, &tm, "p", CHUNK, SEQKV_CTX, 0);
    for (int i = 0; i < 4; i++) { /* a calibration for both */
        su_seq c;
        su_seq_make(&tm, NULL, 0, 40, 60 + (uint64_t)i, &c);
        put(db, "cal", "p", &c, 0);
        put(ref, "cal", "p", &c, 0);
        su_seq_free(&c);
    }
    cr_assert_eq(seqkv_calibrate(db, "p", 0), 0);
    cr_assert_eq(seqkv_calibrate(ref, "p", 0), 0);
    put(ref, "t", "p", &s, 0);
    for (size_t n = 2; n <= s.n; n += 2)
        put_prefix(db, &tm, &s, n);
    seqkv_stats before = stats(db, "t"), whole = stats(ref, "t");
    cr_assert_gt(before.chunks, 40, "an append a record");
    seqkv_compact_stats cs = compact(db, "p");
    seqkv_stats after = stats(db, "t");
    const uint64_t chunks = (s.n + CHUNK - 1) / CHUNK;
    cr_assert_eq(after.chunks, chunks, "%llu records for %llu chunks (%llu merged)",
                 (unsigned long long)after.chunks, (unsigned long long)chunks,
                 (unsigned long long)cs.merged);
    cr_log_info("appends: %llu bytes in %llu records, compacted %llu, one put %llu",
                (unsigned long long)before.stored_bytes, (unsigned long long)before.chunks,
                (unsigned long long)after.stored_bytes, (unsigned long long)whole.stored_bytes);
    cr_assert_leq(after.stored_bytes * 10, whole.stored_bytes * 11,
                  "within 10%% of one put: %llu against %llu bytes",
                  (unsigned long long)after.stored_bytes, (unsigned long long)whole.stored_bytes);
    assert_whole(db, "t", "p", &tm, &s, "after compaction");
    for (size_t n = 1; n <= s.n; n += 7)
        cr_assert_eq(su_get_check(db, "t", "p", &tm, &s, n, NULL), 0, "a prefix of %zu", n);
    seqkv_close(db);
    db = open_store(dir, NULL);
    assert_whole(db, "t", "p", &tm, &s, "after reopen");
    cr_assert_eq(stats(db, "t").chunks, chunks);
    seqkv_close(db);
    seqkv_close(ref);
    su_seq_free(&s);
    su_model_free(&tm);
}

/* A compaction's progress: kill -9 of its own process after step *at */
static int kill_at_step(void *vctx, uint64_t done, uint64_t total)
{
    (void)total;
    if (done == *(const uint64_t *)vctx)
        kill(getpid(), SIGKILL);
    return 0;
}

/* kill -9 at random moments of a compaction, many rounds: every sequence
 * exact after each, no record lost or duplicated. Odd rounds kill from
 * outside after a random wait (within a step, or after the end when the
 * compaction was quicker), even ones from the compaction's progress after
 * a random step (between two steps, so some kills land whatever this
 * machine's speed) */
Test(compact, kill_9_during_compaction_loses_nothing, .timeout = 240)
{
    const char *tmp = tu_tmpdir(), *dir = tu_path(tmp, "db");
    char dirc[4200];
    snprintf(dirc, sizeof dirc, "%s", dir);
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    seqkv *db = open_store(dirc, NULL);
    add_profile(db, &tm, "p", CHUNK, SEQKV_CTX, 0);
    enum { N = 12 };
    su_seq s[N];
    for (int i = 0; i < N; i++) {
        su_seq_make(&tm, NULL, 0, 64, 300 + (uint64_t)i, &s[i]);
        put(db, "t", "p", &s[i], 0);
    }
    su_seq g;
    su_seq_make(&tm, NULL, 0, 60, 7, &g); /* an appending session */
    for (size_t n = 3; n <= g.n; n += 3)
        put_prefix(db, &tm, &g, n);
    cr_assert_eq(seqkv_calibrate(db, "p", 0), 0);
    const uint64_t tokens = stats(db, "t").tokens;
    seqkv_close(db);
    srand(12345);
    int done = 0, killed = 0;
    for (int round = 0; round < 40 && !done; round++) {
        const uint64_t at = round % 2 ? 0 : 1 + (uint64_t)(rand() % 6);
        pid_t pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
            seqkv_options o = SEQKV_OPTIONS_INIT;
            o.quiet = 1;
            seqkv *c;
            if (seqkv_open(dirc, &o, &c))
                _exit(2);
            seqkv_compact_stats st;
            int rc = seqkv_compact(c, "p", at ? kill_at_step : NULL, (void *)&at, &st);
            _exit(rc ? 3 : st.recoded ? 0 : 10);
        }
        if (!at) {
            struct timespec ts = {0, (long)(rand() % 40000) * 1000L};
            nanosleep(&ts, NULL);
            kill(pid, SIGKILL);
        }
        int wst;
        cr_assert_eq(waitpid(pid, &wst, 0), pid);
        killed += WIFSIGNALED(wst);
        if (WIFEXITED(wst)) {
            cr_assert(WEXITSTATUS(wst) == 0 || WEXITSTATUS(wst) == 10, "child exit %d",
                      WEXITSTATUS(wst));
            done = WEXITSTATUS(wst) == 10; /* nothing left to compact */
        }
        db = open_store(dirc, NULL);
        for (int i = 0; i < N; i++)
            assert_whole(db, "t", "p", &tm, &s[i], "after a kill");
        assert_whole(db, "t", "p", &tm, &g, "the appended session after a kill");
        cr_assert_eq(stats(db, "t").tokens, tokens, "no position lost or added");
        seqkv_close(db);
    }
    cr_log_info("compaction killed in %d rounds; %s", killed, done ? "then finished" : "unfinished");
    cr_assert_geq(killed, 3, "kills that landed mid-compaction");
    db = open_store(dirc, NULL);
    compact(db, "p");
    seqkv_stats st = stats(db, "t");
    cr_assert_eq(st.level_tokens[SEQKV_RAW], 0, "all coded in the end");
    cr_assert_eq(st.chunks, (uint64_t)N * 4 + (g.n + CHUNK - 1) / CHUNK);
    for (int i = 0; i < N; i++) {
        assert_whole(db, "t", "p", &tm, &s[i], "at the end");
        su_seq_free(&s[i]);
    }
    assert_whole(db, "t", "p", &tm, &g, "the appended session at the end");
    seqkv_close(db);
    su_seq_free(&g);
    su_model_free(&tm);
}

/* Sessions sharing a system prompt, each appended to twice: merging keeps
 * every position coded once (a merged record starts where the bases it
 * replaces started, on the base the other sessions share) */
Test(compact, merges_keep_each_position_coded_once, .timeout = 60)
{
    const char *tmp = tu_tmpdir(), *dir = tu_path(tmp, "db");
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    seqkv *db = open_store(dir, NULL);
    add_profile(db, &tm, "p", 256, SEQKV_CTX, 0);
    su_seq sys, s[3];
    su_seq_make(&tm, NULL, 0, 100, 1, &sys);
    for (int i = 0; i < 3; i++)
        su_seq_make(&tm, sys.tok, 100, 220, 10 + (uint64_t)i, &s[i]);
    for (size_t n = 140; n <= 220; n += 40)
        for (int i = 0; i < 3; i++)
            put_prefix(db, &tm, &s[i], n);
    seqkv_stats before = stats(db, "t");
    cr_assert_eq(before.chunks, 9);
    cr_assert_eq(seqkv_calibrate(db, "p", 0), 0);
    seqkv_compact_stats cs = compact(db, "p");
    seqkv_stats after = stats(db, "t");
    cr_assert_eq(cs.merged, 5, "two bases of each session but the one the others share");
    cr_assert_eq(after.chunks, 4, "the shared first record and one a session");
    cr_assert_eq(after.coded_tokens, after.tokens, "each position coded once");
    cr_assert_eq(after.tokens, before.tokens);
    for (int i = 0; i < 3; i++) {
        assert_whole(db, "t", "p", &tm, &s[i], "after merging");
        for (size_t n = 90; n <= 220; n += 13)
            cr_assert_eq(su_get_check(db, "t", "p", &tm, &s[i], n, NULL), 0, "prefix %zu", n);
    }
    seqkv_close(db);
    db = open_store(dir, NULL);
    cr_assert_eq(stats(db, "t").coded_tokens, after.tokens);
    for (int i = 0; i < 3; i++) {
        assert_whole(db, "t", "p", &tm, &s[i], "reopened");
        su_seq_free(&s[i]);
    }
    seqkv_close(db);
    su_seq_free(&sys);
    su_model_free(&tm);
}

/* Drift: a profile whose new chunks cost 10% more bits than after its
 * calibration learns a new one from its most recent sequences; what the
 * old one coded is re-coded by compaction, and the old one deleted. Data
 * of the same kind does not trigger it. */
static void scaled(su_seq *s) /* every bf16 value x 64: another distribution */
{
    for (size_t i = 0; i + 1 < s->kv_len; i += 2) {
        uint16_t x = (uint16_t)(s->kv[i] | s->kv[i + 1] << 8);
        const unsigned ex = (x >> 7) & 0xff;
        if (ex && ex < 0xf0)
            x = (uint16_t)(x + (6u << 7));
        s->kv[i] = (uint8_t)x;
        s->kv[i + 1] = (uint8_t)(x >> 8);
    }
}

Test(compact, a_drifting_profile_calibrates_itself_again, .timeout = 180)
{
    const char *tmp = tu_tmpdir(), *dir = tu_path(tmp, "db");
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    seqkv *db = open_store(dir, NULL);
    add_profile(db, &tm, "p", CHUNK, SEQKV_CTX, 0);
    enum { A = 28, B = 24 };
    su_seq a[A], b[B];
    for (int i = 0; i < A; i++) {
        su_seq_make(&tm, NULL, 0, 64, 700 + (uint64_t)i, &a[i]);
        put(db, "t", "p", &a[i], 0);
        if (i == 7)
            cr_assert_eq(seqkv_calibrate(db, "p", 0), 0, "%s", seqkv_error_detail());
    }
    seqkv_profile p1 = SEQKV_PROFILE_INIT, p2 = SEQKV_PROFILE_INIT;
    cr_assert_eq(seqkv_profile_get(db, "p", &p1), 0);
    int learned = 0;
    cr_assert_eq(seqkv_auto_calibrate(db, NULL, &learned), 0, "%s", seqkv_error_detail());
    cr_assert_eq(learned, 0, "80 chunks like the calibration's: no drift");
    int at = -1;
    for (int i = 0; i < B; i++) {
        int32_t first = (int32_t)(2 + i); /* (no prefix shared with a, whose KV is other) */
        su_seq_make(&tm, &first, 1, 64, 900 + (uint64_t)i, &b[i]);
        scaled(&b[i]);
        put(db, "t", "p", &b[i], 0);
        cr_assert_eq(seqkv_auto_calibrate(db, NULL, &learned), 0, "%s", seqkv_error_detail());
        if (learned && at < 0)
            at = i;
    }
    cr_assert_geq(at, 3, "not on the first few chunks of another kind (%d)", at);
    cr_log_info("drift: a new calibration after %d sequences of the other kind", at + 1);
    cr_assert_eq(seqkv_profile_get(db, "p", &p2), 0);
    cr_assert_neq(memcmp(p1.calib_id, p2.calib_id, 16), 0, "another calibration");
    seqkv_compact_stats cs = compact(db, "p");
    cr_assert_geq(cs.calibrations_deleted, 1, "the first calibration, once nothing uses it");
    for (int i = 0; i < A; i++)
        assert_whole(db, "t", "p", &tm, &a[i], "a");
    for (int i = 0; i < B; i++)
        assert_whole(db, "t", "p", &tm, &b[i], "b");
    seqkv_close(db);
    db = open_store(dir, NULL);
    for (int i = 0; i < A; i++) {
        assert_whole(db, "t", "p", &tm, &a[i], "a, reopened");
        su_seq_free(&a[i]);
    }
    for (int i = 0; i < B; i++) {
        assert_whole(db, "t", "p", &tm, &b[i], "b, reopened");
        su_seq_free(&b[i]);
    }
    seqkv_close(db);
    su_model_free(&tm);
}
