/* The store's records damaged (flipped bytes of raw and coded records,
 * the version byte, damage while closed): get fails with CORRUPT, never
 * returns wrong KV; a record of an older version fails with VERSION. */
#include <criterion/criterion.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "seqkv.h"
#include "skv_delta.h"
#include "store_int.h"
#include "storetest.h"
#include "storeutil.h"
#include "testutil.h"

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
    skv_rec_seal(rec, len);
}

/* A store in a temporary directory (its path in dirc) with profile "p"
 * of a random bf16 model at `level`, chunks of CHUNK */
static seqkv *fresh_store(char *dirc, size_t cap, su_model *tm, seqkv_level level)
{
    const char *tmp = tu_tmpdir();
    snprintf(dirc, cap, "%s", tu_path(tmp, "db"));
    su_random_model(tm, tmp, SEQKV_DT_BF16);
    seqkv *db = open_store(dirc, NULL);
    add_profile(db, tm, "p", CHUNK, level, 0);
    return db;
}

enum { LIVE, VERSION_BYTE, REOPENED, OLD_VERSION };

/* Store a and b at `level`, then damage the record of a's chunk 2
 * (positions 32..47): LIVE, bytes flipped one at a time while the store is
 * open (written by another process); VERSION_BYTE, the record's version
 * byte; REOPENED, damaged while the store is closed, then reopened;
 * OLD_VERSION, replaced by the same record as version 1 wrote it (its
 * trailer BLAKE2b-128), which is refused, not read. */
static void corruption_on(seqkv_level level, int part)
{
    /* no hot tier: each get reads the record again (test_store_hot checks
     * that damage is caught on the read into the tier) */
    test_cache_bytes = 0;
    char dirc[4200];
    su_model tm;
    seqkv *db = fresh_store(dirc, sizeof dirc, &tm, SEQKV_RAW);
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
        cr_assert_eq(seqkv_calibrate(db, "p", 0), 0, "%s", seqkv_error_detail());
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
            int rc = seqkv_get(db, "t", "p", a.tok, a.n, &(seqkv_get_opts){.want = a.n}, out, cap, &got);
            cr_assert_eq(rc, SKV_ERR_CORRUPT, "%s: flipped byte %zu of %zu: get returned %s (%s)",
                         seqkv_level_name(level), offs[i], len, seqkv_error_name(rc),
                         seqkv_error_detail());
            cr_assert_eq(got, 0);
            cr_assert_eq(seqkv_get(db, "t", "p", a.tok, a.n, NULL, out, cap, &got), SKV_ERR_CORRUPT);
            layer_acc acc = {&tm, a.n, calloc(1, cap), calloc((size_t)tm.L, a.n), 0, 0};
            cr_assert_eq(seqkv_get(db, "t", "p", a.tok, a.n, &(seqkv_get_opts){.want = a.n, .on_layer = on_layer, .ctx = &acc}, NULL, 0, &got),
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
            int rc = seqkv_get(db, "t", "p", a.tok, a.n, &(seqkv_get_opts){.want = a.n}, out, cap, &got);
            cr_assert_eq(rc, SKV_ERR_CORRUPT, "%s: stream byte %zu changed under a valid record "
                         "checksum: get returned %s (%s)", seqkv_level_name(level), soffs[i],
                         seqkv_error_name(rc), seqkv_error_detail());
        }
        /* restored: served again */
        put_from_child(dirc, key, orig, len);
        assert_whole(db, "t", "p", &tm, &a, "restored");
        seqkv_close(db);
    } else if (part == OLD_VERSION) {
        memcpy(bad, orig, len);
        skv_store16_le(bad + 4, 1);
        crypto_generichash(bad + len - 16, 16, bad, len - 16, NULL, 0);
        skv_rec r;
        cr_assert_eq(skv_rec_parse(bad, len, &r), SKV_ERR_VERSION, "%s", seqkv_error_detail());
        refresh_trailer(bad, len); /* (an XXH3 trailer: the same refusal) */
        cr_assert_eq(skv_rec_parse(bad, len, &r), SKV_ERR_VERSION, "%s", seqkv_error_detail());
        crypto_generichash(bad + len - 16, 16, bad, len - 16, NULL, 0);
        put_from_child(dirc, key, bad, len);
        int rc = seqkv_get(db, "t", "p", a.tok, a.n, &(seqkv_get_opts){.want = a.n}, out, cap, &got);
        cr_assert_eq(rc, SKV_ERR_VERSION, "%s: a version 1 record: get returned %s (%s)",
                     seqkv_level_name(level), seqkv_error_name(rc), seqkv_error_detail());
        cr_assert(strstr(seqkv_error_detail(), "chunk record version 1: this build reads only version 2"),
                  "%s", seqkv_error_detail());
        cr_assert_eq(got, 0);
        cr_assert_eq(su_get_check(db, "t", "p", &tm, &a, 32, NULL), 0, "the records before it are exact");
        seqkv_close(db);
    } else if (part == VERSION_BYTE) {
        memcpy(bad, orig, len);
        bad[4] ^= 0x24; /* the record's version: damage, not a newer writer */
        put_from_child(dirc, key, bad, len);
        int rc = seqkv_get(db, "t", "p", a.tok, a.n, &(seqkv_get_opts){.want = a.n}, out, cap, &got);
        cr_assert_neq(rc, 0, "never wrong KV");
        cr_assert_eq(rc, SKV_ERR_CORRUPT, "%s: a flipped version byte in a record (its checksum "
                     "no longer matches): get returned %s (%s)", seqkv_level_name(level),
                     seqkv_error_name(rc), seqkv_error_detail());
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
        int rc = seqkv_get(db, "t", "p", a.tok, a.n, &(seqkv_get_opts){.want = a.n}, out, cap, &got);
        cr_assert_eq(rc, SKV_ERR_CORRUPT, "after reopen: %s (%s)", seqkv_error_name(rc),
                     seqkv_error_detail());
        seqkv_close(db);
        /* a flip the record checksum sees */
        memcpy(bad, orig, len);
        bad[len / 2] ^= 0x10;
        su_chunk_put(dirc, key, bad, len);
        db = open_store(dirc, NULL);
        rc = seqkv_get(db, "t", "p", a.tok, a.n, &(seqkv_get_opts){.want = a.n}, out, cap, &got);
        char detail[512];
        snprintf(detail, sizeof detail, "%s", seqkv_error_detail());
        cr_assert(rc == SKV_ERR_CORRUPT || rc == SKV_ERR_NOT_FOUND,
                  "after reopen, a damaged record: never wrong KV (%s, %s)", seqkv_error_name(rc), detail);
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
                     seqkv_level_name(level), seqkv_error_name(rc), detail, m, a.n);
    }
    free(out);
    free(bad);
    free(orig);
    su_seq_free(&a);
    su_seq_free(&b);
    su_model_free(&tm);
}

Test(store_corrupt, flipped_bytes_of_a_raw_record_fail_get_with_corrupt, .timeout = 120)
{
    corruption_on(SEQKV_RAW, LIVE);
}

Test(store_corrupt, flipped_bytes_of_a_coded_record_fail_get_with_corrupt, .timeout = 120)
{
    corruption_on(SEQKV_CTX, LIVE);
}

Test(store_corrupt, flipped_bytes_of_a_fast_record_fail_get_with_corrupt, .timeout = 120)
{
    /* its 2L streams decode over the readers' pool: the error is still the
     * first damaged stream's, and nothing of the chunk is served */
    corruption_on(SEQKV_FAST, LIVE);
}

Test(store_corrupt, a_flipped_record_version_byte_is_corruption, .timeout = 120)
{
    corruption_on(SEQKV_RAW, VERSION_BYTE);
}

Test(store_corrupt, a_record_of_version_1_is_refused_with_version, .timeout = 120)
{
    corruption_on(SEQKV_RAW, OLD_VERSION);
}

Test(store_corrupt, a_coded_record_of_version_1_is_refused_with_version, .timeout = 120)
{
    corruption_on(SEQKV_CTX, OLD_VERSION);
}

Test(store_corrupt, a_record_damaged_while_closed_fails_get_with_corrupt_after_reopen, .timeout = 120)
{
    corruption_on(SEQKV_RAW, REOPENED);
}

Test(store_corrupt, a_coded_record_damaged_while_closed_fails_get_with_corrupt_after_reopen, .timeout = 120)
{
    corruption_on(SEQKV_CTX, REOPENED);
}

/* Compaction meets a damaged raw record: it leaves it as it is (counted
 * damaged, its gets still fail), codes the others again, and loses
 * nothing. The record's tags are checked where compaction decodes it. */
Test(store_corrupt, compaction_leaves_a_damaged_record_and_codes_the_others, .timeout = 120)
{
    test_cache_bytes = 0;
    char dirc[4200];
    su_model tm;
    seqkv *db = fresh_store(dirc, sizeof dirc, &tm, SEQKV_CTX);
    su_seq a, b, c[4];
    su_seq_make(&tm, NULL, 0, 60, 21, &a);
    int32_t first = (a.tok[0] + 1) % tm.c->vocab_size;
    su_seq_make(&tm, &first, 1, 40, 22, &b);
    put(db, "t", "p", &a, SEQKV_RAW + 1);
    put(db, "t", "p", &b, SEQKV_RAW + 1);
    for (int i = 0; i < 4; i++) {
        su_seq_make(&tm, NULL, 0, 40, 30 + (uint64_t)i, &c[i]);
        put(db, "cal", "p", &c[i], SEQKV_RAW + 1);
        su_seq_free(&c[i]);
    }
    cr_assert_eq(seqkv_calibrate(db, "p", 0), 0, "%s", seqkv_error_detail());
    uint8_t key[32];
    cr_assert_eq(su_chunk_find(dirc, 2, a.tok + 32, CHUNK, key), 0, "chunk 2 of a in LMDB");
    size_t len;
    uint8_t *orig = su_chunk_get(dirc, key, &len);
    cr_assert_not_null(orig);
    orig[len / 2] ^= 0x24;
    put_from_child(dirc, key, orig, len);
    seqkv_compact_stats cs;
    cr_assert_eq(seqkv_compact(db, "p", NULL, NULL, &cs), 0, "%s", seqkv_error_detail());
    /* it, and chunk 3, whose coding starts from chunk 2's last row */
    cr_assert_eq(cs.damaged, 2, "the damaged record and the one after it (%llu)",
                 (unsigned long long)cs.damaged);
    cr_assert_geq(cs.recoded, 2, "the others are coded again (%llu)", (unsigned long long)cs.recoded);
    size_t len2;
    uint8_t *now = su_chunk_get(dirc, key, &len2);
    cr_assert(now && len2 == len && !memcmp(now, orig, len), "the damaged record is left as it is");
    free(now);
    seqkv_stats st = stats(db, "t");
    cr_assert_gt(st.level_tokens[SEQKV_CTX], 0, "records of t were coded at ctx");
    assert_whole(db, "t", "p", &tm, &b, "b after compaction");
    cr_assert_eq(su_get_check(db, "t", "p", &tm, &a, 32, NULL), 0, "a's first 32 tokens are exact");
    cr_assert_eq(su_get_check(db, "t", "p", &tm, &a, a.n, NULL), SKV_ERR_CORRUPT,
                 "a GET that needs the damaged record still fails");
    seqkv_close(db);
    free(orig);
    su_seq_free(&a);
    su_seq_free(&b);
    su_model_free(&tm);
}
