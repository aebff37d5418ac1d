/* Value files (store/vfile.c): records of at least file_min stored bytes
 * live in DIR/values, one file each, LMDB holding a stub that names it.
 * Every get is exact, sealed and not, across a reopen; the files are
 * exactly the ones the stubs name after puts, DEL, eviction and
 * compaction; the same bytes are counted as stored as when the records are
 * in LMDB; files no stub names are removed at open, other files left
 * alone; a missing or cut file is SKV_ERR_CORRUPT naming it, and the
 * other sequences stay exact. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "seqkv.h"
#include "storetest.h"
#include "storeutil.h"
#include "testutil.h"
#include "seal.h"
#include "vfile.h"

#define NSEQ 6
#define LEN 90

/* The names in DIR/values (up to cap of them into names, 96 bytes each) */
static size_t value_files(const char *dir, char (*names)[96], size_t cap)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/values", dir);
    DIR *d = opendir(path);
    cr_assert_not_null(d, "%s exists", path);
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        if (n < cap)
            snprintf(names[n], 96, "%.95s", e->d_name);
        n++;
    }
    closedir(d);
    return n;
}

/* The stubs in table chunks (the names they give, as value_files has them) */
static size_t stubs(const char *dir, char (*names)[96], size_t cap, size_t *records)
{
    void *env = su_env_open(dir, 1);
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_cursor *cur;
    cr_assert_eq(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
    cr_assert_eq(mdb_dbi_open(txn, "chunks", 0, &dbi), 0);
    cr_assert_eq(mdb_cursor_open(txn, dbi, &cur), 0);
    MDB_val k, v;
    size_t n = 0;
    *records = 0;
    while (!mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        ++*records;
        if (!skv_vf_is_stub(v.mv_data, v.mv_size))
            continue;
        const uint8_t *key = k.mv_data;
        if (n < cap) {
            for (int i = 0; i < 32; i++)
                snprintf(names[n] + 2 * i, 3, "%02x", key[i]);
            snprintf(names[n] + 64, 32, "-%016llx",
                     (unsigned long long)skv_load64_le((const uint8_t *)v.mv_data + 8));
        }
        n++;
    }
    mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    su_env_close(env);
    return n;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(a, b);
}

/* The files are exactly the ones the stubs name; their count */
static size_t files_match_stubs(const char *dir, const char *when)
{
    static char f[1024][96], s[1024][96];
    size_t records;
    const size_t nf = value_files(dir, f, 1024), ns = stubs(dir, s, 1024, &records);
    cr_assert_leq(nf, 1024);
    cr_assert_eq(nf, ns, "%s: %zu value files, %zu stubs", when, nf, ns);
    qsort(f, nf, 96, by_name);
    qsort(s, ns, 96, by_name);
    for (size_t i = 0; i < nf; i++)
        cr_assert_str_eq(f[i], s[i], "%s: file %zu is the one its stub names", when, i);
    return nf;
}

typedef struct {
    su_model tm;
    su_seq s[NSEQ];
} fixture;

static void fixture_make(fixture *x)
{
    su_random_model(&x->tm, tu_tmpdir(), SEQKV_DT_BF16);
    for (int i = 0; i < NSEQ; i++)
        su_seq_make(&x->tm, NULL, 0, LEN, 700 + (uint64_t)i, &x->s[i]);
}

static void fixture_free(fixture *x)
{
    for (int i = 0; i < NSEQ; i++)
        su_seq_free(&x->s[i]);
    su_model_free(&x->tm);
}

/* A store of the six sequences at level, records from file_min bytes in files */
static seqkv *filled(const char *dir, fixture *x, seqkv_level level, uint64_t file_min, int no_seal)
{
    seqkv_options o = {.file_min = file_min, .no_seal = no_seal};
    seqkv *db = store_at_level(dir, &o, &x->tm, level, 0, CHUNK);
    for (int i = 0; i < NSEQ; i++)
        put(db, "t", "p", &x->s[i], -1);
    return db;
}

static void all_exact(seqkv *db, fixture *x, const char *what)
{
    for (int i = 0; i < NSEQ; i++)
        assert_whole(db, "t", "p", &x->tm, &x->s[i], what);
}

static void round_trip(seqkv_level level, int no_seal)
{
    fixture x;
    fixture_make(&x);
    const char *dir = tu_path(tu_tmpdir(), "db"), *ref = tu_path(tu_tmpdir(), "ref");
    const size_t in_place = skv_put_in_place;
    seqkv *db = filled(dir, &x, level, 1, no_seal);
    /* (a sealed raw record is sealed into its file from the put's own KV;
     * an unsealed one is written whole) */
    if (level == SEQKV_RAW && !no_seal)
        cr_assert_gt(skv_put_in_place, in_place, "raw records sealed from where they lie");
    else if (level == SEQKV_RAW)
        cr_assert_eq(skv_put_in_place, in_place);
    all_exact(db, &x, "records in value files");
    seqkv_stats st = stats(db, NULL);
    seqkv_close(db);
    const size_t n = files_match_stubs(dir, "after the puts");
    size_t records;
    static char s[256][96];
    stubs(dir, s, 256, &records);
    cr_assert_eq(n, records, "every record (%zu) is in a value file (%zu)", records, n);
    cr_assert_gt(n, (size_t)NSEQ, "several records a sequence: %zu", n);
    /* the same records in LMDB: the same bytes counted as stored */
    seqkv *rb = filled(ref, &x, level, UINT64_MAX, no_seal);
    seqkv_stats rs = stats(rb, NULL);
    cr_assert_eq(files_match_stubs(ref, "no value files"), 0);
    seqkv_close(rb);
    cr_assert_eq(st.chunks, rs.chunks);
    cr_assert_eq(st.stored_bytes, rs.stored_bytes, "stored bytes %llu, in LMDB %llu",
                 (unsigned long long)st.stored_bytes, (unsigned long long)rs.stored_bytes);
    /* reopened: indexed from the files' heads, every get exact */
    db = open_store(dir, NULL);
    all_exact(db, &x, "value files after a reopen");
    seqkv_stats st2 = stats(db, NULL);
    cr_assert_eq(st2.stored_bytes, st.stored_bytes);
    cr_assert_eq(st2.tokens, st.tokens);
    seqkv_close(db);
    fixture_free(&x);
}

Test(vfile, sealed_raw_records_in_value_files_get_back_exact, .timeout = 120)
{
    round_trip(SEQKV_RAW, 0);
}

Test(vfile, unsealed_records_in_value_files_get_back_exact, .timeout = 120)
{
    round_trip(SEQKV_RAW, 1);
}

Test(vfile, coded_records_in_value_files_get_back_exact, .timeout = 120)
{
    round_trip(SEQKV_CTX, 0);
}

Test(vfile, a_threshold_puts_only_the_big_records_in_files, .timeout = 120)
{
    fixture x;
    fixture_make(&x);
    const char *dir = tu_path(tu_tmpdir(), "db");
    /* a raw record of a whole chunk has CHUNK rows; a shorter last one fewer */
    const uint64_t row = su_kv_len(&x.tm, 1);
    seqkv *db = filled(dir, &x, SEQKV_RAW, row * CHUNK, 0);
    all_exact(db, &x, "a threshold");
    seqkv_close(db);
    size_t records;
    static char s[256][96];
    const size_t n = stubs(dir, s, 256, &records);
    /* 90 tokens: five whole chunks and one of 10 a sequence */
    cr_assert_eq(records, (size_t)NSEQ * 6);
    cr_assert_eq(n, (size_t)NSEQ * 5, "the whole chunks' records in files: %zu of %zu", n, records);
    files_match_stubs(dir, "a threshold");
    fixture_free(&x);
}

Test(vfile, del_and_eviction_take_their_records_files_with_them, .timeout = 120)
{
    fixture x;
    fixture_make(&x);
    const char *dir = tu_path(tu_tmpdir(), "db");
    seqkv *db = filled(dir, &x, SEQKV_RAW, 1, 0);
    size_t removed;
    cr_assert_eq(seqkv_del(db, "t", "p", x.s[0].tok, x.s[0].n, &removed), 0, "%s", seqkv_error_detail());
    cr_assert_eq(removed, (size_t)LEN);
    seqkv_close(db);
    const size_t after_del = files_match_stubs(dir, "after a DEL");
    cr_assert_eq(after_del, (size_t)(NSEQ - 1) * 6);
    /* a budget that holds about half of them: the eviction deletes files */
    db = open_store(dir, NULL);
    const uint64_t all = stats(db, NULL).stored_bytes;
    seqkv_close(db);
    seqkv_options o = {.file_min = 1, .budget = all / 2};
    db = open_store(dir, &o);
    put(db, "t", "p", &x.s[0], -1); /* a put makes room */
    seqkv_stats st = stats(db, NULL);
    cr_assert_leq(st.stored_bytes, all / 2);
    cr_assert_eq(lookup(db, "t", "p", x.s[0].tok, x.s[0].n), (size_t)LEN);
    assert_whole(db, "t", "p", &x.tm, &x.s[0], "put after an eviction");
    for (int i = 1; i < NSEQ; i++) {
        const size_t left = lookup(db, "t", "p", x.s[i].tok, x.s[i].n);
        if (left)
            cr_assert_eq(su_get_check(db, "t", "p", &x.tm, &x.s[i], left, NULL), 0,
                         "what the eviction left of %d (%zu tokens): %s", i, left, seqkv_error_detail());
    }
    seqkv_close(db);
    const size_t left = files_match_stubs(dir, "after an eviction");
    cr_assert_lt(left, after_del + 6, "the eviction removed files (%zu left)", left);
    fixture_free(&x);
}

Test(vfile, compaction_replaces_the_raw_records_files, .timeout = 120)
{
    fixture x;
    fixture_make(&x);
    const char *dir = tu_path(tu_tmpdir(), "db");
    /* a profile at ctx with no calibration yet stores raw records */
    seqkv_options o = {.file_min = 1};
    seqkv *db = open_store(dir, &o);
    add_profile(db, &x.tm, "p", CHUNK, SEQKV_CTX, 0);
    for (int i = 0; i < NSEQ; i++)
        put(db, "t", "p", &x.s[i], -1);
    const uint64_t raw = stats(db, NULL).stored_bytes;
    seqkv_close(db);
    static char before[256][96];
    const size_t nb = value_files(dir, before, 256);
    cr_assert_gt(nb, (size_t)NSEQ);
    db = open_store(dir, &o);
    cr_assert_eq(seqkv_calibrate(db, "p", 0), 0, "%s", seqkv_error_detail());
    seqkv_compact_stats cs;
    cr_assert_eq(seqkv_compact(db, "p", NULL, NULL, &cs), 0, "%s", seqkv_error_detail());
    const uint64_t coded = stats(db, NULL).stored_bytes;
    cr_assert_lt(coded, raw, "compaction shrank the store: %llu -> %llu", (unsigned long long)raw,
                 (unsigned long long)coded);
    all_exact(db, &x, "compacted into value files");
    seqkv_close(db);
    files_match_stubs(dir, "after compaction");
    /* no file of before is left: every record was written again */
    static char after[256][96];
    const size_t na = value_files(dir, after, 256);
    for (size_t i = 0; i < nb; i++)
        for (size_t j = 0; j < na; j++)
            cr_assert_str_neq(before[i], after[j], "raw record's file %s outlived its compaction",
                              before[i]);
    db = open_store(dir, NULL);
    all_exact(db, &x, "compacted, reopened");
    seqkv_close(db);
    fixture_free(&x);
}

static void touch(const char *dir, const char *name, const char *text)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/values/%s", dir, name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

Test(vfile, files_no_record_names_are_removed_at_open_and_others_left, .timeout = 120)
{
    fixture x;
    fixture_make(&x);
    const char *dir = tu_path(tu_tmpdir(), "db");
    seqkv *db = filled(dir, &x, SEQKV_RAW, 1, 0);
    seqkv_close(db);
    static char s[256][96];
    size_t records;
    const size_t n = stubs(dir, s, 256, &records);
    cr_assert_gt(n, 0);
    /* what a crash leaves: a file written whose stub never committed (a
     * key no record has), and one of a record written again (its old
     * generation); and a file that is not a value file's */
    char orphan[96], old[96];
    snprintf(orphan, sizeof orphan, "%.64s-%016llx",
             "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff", 5ull);
    snprintf(old, sizeof old, "%.64s-%016llx", s[0], 7ull);
    if (!strcmp(old, s[0]))
        old[80] = '8';
    touch(dir, orphan, "half a record");
    touch(dir, old, "an older generation");
    touch(dir, "notes.txt", "not ours");
    db = open_store(dir, NULL);
    all_exact(db, &x, "after the sweep");
    seqkv_close(db);
    static char f[256][96];
    const size_t nf = value_files(dir, f, 256);
    cr_assert_eq(nf, n + 1, "the two orphans removed, the other file kept: %zu files", nf);
    char path[4200];
    snprintf(path, sizeof path, "%s/values/notes.txt", dir);
    cr_assert_eq(access(path, F_OK), 0, "a file not named as a value file is left alone");
    cr_assert_eq(unlink(path), 0);
    files_match_stubs(dir, "after the sweep");
    fixture_free(&x);
}

Test(vfile, a_missing_or_cut_value_file_is_a_clear_error_and_nothing_else_is_lost, .timeout = 120)
{
    fixture x;
    fixture_make(&x);
    const char *dir = tu_path(tu_tmpdir(), "db");
    seqkv *db = filled(dir, &x, SEQKV_RAW, 1, 0);
    seqkv_close(db);
    /* the file of sequence 0's last record, cut while the store is open */
    uint8_t key[32];
    cr_assert_eq(su_chunk_find(dir, 5, x.s[0].tok + 5 * CHUNK, LEN - 5 * CHUNK, key), 0);
    static char s[256][96];
    size_t records;
    const size_t n = stubs(dir, s, 256, &records);
    char hex[65];
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", key[i]);
    const char *name = NULL;
    for (size_t i = 0; i < n && !name; i++)
        if (!strncmp(s[i], hex, 64))
            name = s[i];
    cr_assert_not_null(name, "the record is in a value file");
    char path[4200];
    snprintf(path, sizeof path, "%s/values/%s", dir, name);
    db = open_store(dir, NULL);
    cr_assert_eq(truncate(path, 100), 0);
    const size_t len = su_kv_len(&x.tm, LEN);
    uint8_t *out = malloc(len);
    size_t got;
    int rc = seqkv_get(db, "t", "p", x.s[0].tok, LEN, NULL, out, len, &got);
    cr_assert_eq(rc, SKV_ERR_CORRUPT, "a cut file: %s (%s)", seqkv_error_name(rc), seqkv_error_detail());
    cr_assert(strstr(seqkv_error_detail(), "value file"), "the error names it: %s", seqkv_error_detail());
    for (int i = 1; i < NSEQ; i++)
        assert_whole(db, "t", "p", &x.tm, &x.s[i], "beside a cut file");
    /* missing: the same error */
    cr_assert_eq(unlink(path), 0);
    rc = seqkv_get(db, "t", "p", x.s[0].tok, LEN, NULL, out, len, &got);
    cr_assert_eq(rc, SKV_ERR_CORRUPT, "a missing file: %s", seqkv_error_name(rc));
    cr_assert(strstr(seqkv_error_detail(), name), "the error names the file: %s", seqkv_error_detail());
    seqkv_close(db);
    /* reopened: its record is not indexed (its header is in the file), the
     * prefix before it still served, the rest exact */
    db = open_store(dir, NULL);
    cr_assert_eq(lookup(db, "t", "p", x.s[0].tok, LEN), (size_t)5 * CHUNK);
    cr_assert_eq(su_get_check(db, "t", "p", &x.tm, &x.s[0], 5 * CHUNK, NULL), 0,
                 "the prefix before a missing file: %s", seqkv_error_detail());
    for (int i = 1; i < NSEQ; i++)
        assert_whole(db, "t", "p", &x.tm, &x.s[i], "beside a missing file");
    seqkv_close(db);
    free(out);
    fixture_free(&x);
}

/* ---- a raw record sealed from its streams where they lie ---------------------- */

/* A raw record of ns streams of sz bytes, whole (*img) and less its
 * streams (*head), the streams at src */
static void raw_record(uint32_t ns, size_t sz, uint64_t seed, uint8_t **whole, size_t *len,
                       uint8_t **head, skv_rec_at *at, uint8_t **body)
{
    skv_rng g;
    skv_rng_seed(&g, seed);
    *body = malloc(ns * sz + 1);
    for (size_t i = 0; i < ns * sz; i++)
        (*body)[i] = (uint8_t)skv_rng_next(&g);
    static uint8_t tok[4 * 40], sizes[4 * 64];
    skv_rec r = {.level = SEQKV_RAW, .tenant = 3, .chunk_index = 2, .n = 40, .checksum = 77};
    for (int i = 0; i < 40; i++)
        skv_store32_le(tok + 4 * i, (uint32_t)(i * 7));
    for (uint32_t j = 0; j < ns; j++)
        skv_store32_le(sizes + 4 * j, (uint32_t)sz);
    r.tokens = tok;
    r.nstreams = ns;
    r.sizes = sizes;
    r.streams = *body;
    r.streams_len = ns * sz;
    *len = skv_rec_size(&r);
    *whole = malloc(*len);
    skv_rec_write(&r, *whole);
    /* the streams elsewhere, in reverse order of memory (as a put's KV
     * need not keep them in a row) */
    const uint8_t **src = malloc(ns * sizeof *src);
    uint8_t *far = malloc(ns * sz + 1);
    for (uint32_t j = 0; j < ns; j++) {
        memcpy(far + (ns - 1 - j) * sz, *body + j * sz, sz);
        src[j] = far + (ns - 1 - j) * sz;
    }
    free(*body);
    *body = far;
    *at = (skv_rec_at){src, sz, ns, *len - ns * sz - SKV_REC_TRAILER};
    *head = malloc(at->head_len + SKV_REC_TRAILER);
    skv_rec_write_at(&r, at, *head);
}

Test(vfile, an_image_written_less_its_streams_is_the_image_written_whole)
{
    uint8_t *whole, *head, *body;
    size_t len;
    skv_rec_at at;
    raw_record(64, 1000, 5, &whole, &len, &head, &at, &body);
    uint8_t *g = skv_rec_gather(head, len, &at);
    cr_assert_not_null(g);
    cr_assert_eq(memcmp(g, whole, len), 0, "gathered, it is the same image, trailer and all");
    skv_rec r;
    cr_assert_eq(skv_rec_parse(g, len, &r), 0, "it verifies: %s", seqkv_error_detail());
    skv_free(g);
    free(whole);
    free(head);
    free(body);
    free((void *)at.src);
}

/* The sealed file of a record (at: from its streams where they lie) */
static uint8_t *sealed_file(const uint8_t *key, const uint8_t *dek, const uint8_t *img, size_t len,
                            const skv_rec_at *at, size_t piece, size_t *flen)
{
    skv_rec r;
    cr_assert_eq(at ? skv_rec_parse_head(img, at->head_len, (size_t)at->nstreams * at->sz, &r)
                    : skv_rec_parse_ex(img, len, 0, &r),
                 0);
    char path[4200];
    snprintf(path, sizeof path, "%s/sealed-%d", tu_tmpdir(), at != NULL);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    cr_assert_geq(fd, 0);
    uint8_t *bufs[2] = {malloc(piece), malloc(piece)};
    cr_assert_eq(skv_rec_seal_to_fd(key, dek, &r, img, len, at, fd, NULL, bufs, piece), 0, "%s",
                 seqkv_error_detail());
    close(fd);
    free(bufs[0]);
    free(bufs[1]);
    uint8_t *b = tu_read(path, flen);
    cr_assert_not_null(b);
    unlink(path);
    return b;
}

Test(vfile, a_record_sealed_into_a_file_from_its_streams_opens_to_the_same_image)
{
    uint8_t *whole, *head, *body, key[32], dek[32];
    size_t len;
    skv_rec_at at;
    /* pieces that end inside streams and parts, streams that span parts */
    raw_record(24, 70001, 9, &whole, &len, &head, &at, &body);
    for (int i = 0; i < 32; i++)
        key[i] = (uint8_t)i, dek[i] = (uint8_t)(100 + i);
    const size_t pieces[] = {4093, 1 << 20};
    for (int p = 0; p < 2; p++) {
        size_t l1, l2;
        uint8_t *f1 = sealed_file(key, dek, whole, len, NULL, pieces[p], &l1);
        uint8_t *f2 = sealed_file(key, dek, head, len, &at, pieces[p], &l2);
        cr_assert_eq(l1, len + SKV_SEAL_OVERHEAD);
        cr_assert_eq(l2, l1);
        for (int k = 0; k < 2; k++) {
            uint8_t *img;
            size_t il;
            cr_assert_eq(skv_rec_unseal(key, dek, k ? f2 : f1, l1, NULL, &img, &il), 0, "%s",
                         seqkv_error_detail());
            cr_assert_eq(il, len);
            cr_assert_eq(memcmp(img, whole, len), 0, "%s file opens to the image",
                         k ? "in place" : "whole");
            skv_free(img);
        }
        /* a byte changed in a part's ciphertext: it does not open */
        f2[l2 / 2] ^= 1;
        uint8_t *img;
        size_t il;
        cr_assert_eq(skv_rec_unseal(key, dek, f2, l2, NULL, &img, &il), SKV_ERR_CORRUPT);
        free(f1);
        free(f2);
    }
    free(whole);
    free(head);
    free(body);
    free((void *)at.src);
}

/* ---- a put that fails takes its files with it ------------------------------------ */

Test(vfile, a_put_failing_anywhere_leaves_no_file_behind_and_loses_nothing, .timeout = 240)
{
    su_model tm;
    su_random_model(&tm, tu_tmpdir(), SEQKV_DT_BF16);
    const char *dir = tu_path(tu_tmpdir(), "db");
    seqkv_options o = {.file_min = 1};
    seqkv *db = open_store(dir, &o);
    add_profile(db, &tm, "p", CHUNK, SEQKV_RAW, 0);
    static char f[256][96];
    enum { N = 160 };
    su_seq *s = calloc(N, sizeof *s);
    int ok[N] = {0}, failed = 0;
    /* put n makes the n-th allocation from its start fail (a new sequence
     * each time, so that no put is cut short by an earlier one's success):
     * before, while or after its files are written, the store keeps what
     * committed and no other file */
    for (int n = 0; n < N; n++) {
        su_seq_make(&tm, NULL, 0, 2 * CHUNK + 3, 5000 + (uint64_t)n, &s[n]);
        skv_alloc_fail_after(n, 0);
        seqkv_put_result r;
        int rc = seqkv_put(db, "t", "p", s[n].tok, s[n].n, s[n].kv, s[n].kv_len, NULL, &r);
        skv_alloc_fail_after(-1, 0);
        if (rc) {
            cr_assert(rc == SKV_ERR_NOMEM || rc == SKV_ERR_IO, "put %d: %s (%s)", n, seqkv_error_name(rc),
                      seqkv_error_detail());
            failed++;
        }
        ok[n] = rc == 0;
        const uint64_t chunks = stats(db, NULL).chunks;
        const size_t files = value_files(dir, f, 256);
        cr_assert_eq(files, (size_t)chunks, "put %d (rc %d): %zu value files for %llu records", n, rc,
                     files, (unsigned long long)chunks);
    }
    cr_assert_gt(failed, 20, "allocations failed in many places: %d", failed);
    cr_assert_lt(failed, N, "and past the last one the puts succeed");
    for (int n = 0; n < N; n++) {
        size_t m = lookup(db, "t", "p", s[n].tok, s[n].n);
        cr_assert_eq(m, ok[n] ? s[n].n : m, "put %d", n);
        if (ok[n])
            assert_whole(db, "t", "p", &tm, &s[n], "a put that succeeded");
    }
    seqkv_close(db);
    files_match_stubs(dir, "after the failed puts");
    for (int n = 0; n < N; n++)
        su_seq_free(&s[n]);
    free(s);
    su_model_free(&tm);
}
