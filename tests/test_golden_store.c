/* Stores written by an older seqkv stay readable: tests/golden/store/
 * holds two stores made by the build before the redesign (make_golden.sh
 * says how), one with stat and ctx chunks in stream version 2 and one in
 * version 1, with chunks at every level. Each is copied, opened, and
 * every sequence put into it is looked up and got back bit-exactly
 * against the KV its model computes now. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "seqkv.h"
#include "seqkv.h"
#include "skv_base.h"
#include "storeutil.h"
#include "testutil.h"

/* The token ids of the one-line file name in tests/golden/store */
static size_t read_tokens(const char *name, int32_t *tok, size_t cap)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/golden/store/%s", tu_source_root(), name);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    size_t n = 0;
    long v;
    while (n < cap && fscanf(f, "%ld", &v) == 1)
        tok[n++] = (int32_t)v;
    fclose(f);
    cr_assert_gt(n, 0, "%s holds tokens", path);
    return n;
}

static void copy_file(const char *from, const char *to)
{
    uint8_t *b;
    size_t len;
    cr_assert_eq(skv_file_read(from, 1u << 30, &b, &len), 0, "read %s: %s", from, seqkv_error_detail());
    cr_assert_eq(skv_file_write(to, b, len), 0, "write %s: %s", to, seqkv_error_detail());
    skv_free(b);
}

/* Every sequence of the golden store looked up whole and got bit-exactly */
static void check_all(seqkv *db, su_model *tm, const char *version)
{
    static const struct {
        const char *tenant, *file;
        int line;
    } seqs[] = {{"t_raw", "raw.txt", 0}, {"t_raw", "raw.txt", 1}, {"t_stat", "stat.txt", 0},
                {"t_ctx", "ctx.txt", 0}, {"t_ctx", "near.txt", 0}, {"t_spec", "spec.txt", 0},
                {"t_full", "full.txt", 0}};
    for (size_t i = 0; i < sizeof seqs / sizeof *seqs; i++) {
        int32_t all[512];
        size_t n = read_tokens(seqs[i].file, all, 512);
        /* raw.txt holds two lines of 96 */
        size_t len = seqs[i].line || strcmp(seqs[i].file, "raw.txt") == 0 ? n / 2 : n;
        const int32_t *tok = all + (size_t)seqs[i].line * len;
        su_seq s;
        su_seq_make(tm, tok, len, len, 0, &s);
        cr_assert_eq(memcmp(s.tok, tok, len * sizeof *tok), 0);
        size_t m = 0, got = 0;
        cr_assert_eq(seqkv_lookup(db, seqs[i].tenant, "rm", s.tok, s.n, &m), 0, "%s", seqkv_error_detail());
        cr_assert_eq(m, len, "%s store, %s line %d: %zu of %zu tokens cached", version, seqs[i].file,
                     seqs[i].line, m, len);
        int rc = su_get_check(db, seqs[i].tenant, "rm", tm, &s, len, &got);
        cr_assert_eq(rc, 0, "%s store, %s line %d: get gives other bytes (%d %s)", version, seqs[i].file,
                     seqs[i].line, rc, seqkv_error_detail());
        su_seq_free(&s);
    }
}

static void golden_store(const char *version)
{
    const char *src = tu_path(tu_source_root(), "tests/golden/store");
    const char *dir = tu_path(tu_tmpdir(), version);
    cr_assert_eq(mkdir(dir, 0700), 0, "mkdir %s", dir);
    char from[4096], to[4096];
    for (int k = 0; k < 2; k++) {
        const char *f = k ? "master.key" : "data.mdb";
        snprintf(from, sizeof from, "%s/%s/%s", src, version, f);
        snprintf(to, sizeof to, "%s/%s", dir, f);
        copy_file(from, to);
    }
    su_model tm;
    char model[1024];
    snprintf(model, sizeof model, "%s/rm.bin", tu_tmpdir());
    snprintf(from, sizeof from, "%s/rm.bin", src);
    copy_file(from, model);
    su_model_load(&tm, model, SEQKV_DT_BF16);
    seqkv_options o = {0};
    o.quiet = 1;
    seqkv *db = NULL;
    /* read-only first: a store from before blobs has no blob tables, and
     * the blob commands find nothing rather than read another table */
    o.read_only = 1;
    cr_assert_eq(seqkv_open(dir, &o, &db), 0, "open the %s golden store: %s", version, seqkv_error_detail());
    const uint8_t *bk[1] = {(const uint8_t *)"k"};
    size_t bl[1] = {1}, nb = 9;
    cr_assert_eq(seqkv_blob_exists(db, "t_raw", 1, bk, bl, &nb), 0, "%s", seqkv_error_detail());
    cr_assert_eq(nb, 0);
    seqkv_close(db);
    o.read_only = 0;
    cr_assert_eq(seqkv_open(dir, &o, &db), 0, "open the %s golden store: %s", version, seqkv_error_detail());
    /* the profile's model moved with the files */
    seqkv_profile p = SEQKV_PROFILE_INIT;
    cr_assert_eq(seqkv_profile_get(db, "rm", &p), 0, "%s", seqkv_error_detail());
    cr_assert(p.has_calib, "the golden store's profile is calibrated");
    memcpy(p.model, model, strlen(model) + 1);
    seqkv_profile_set(db, &p); /* (a level above raw: accepted) */
    seqkv_stats st;
    cr_assert_eq(seqkv_stat(db, NULL, &st), 0, "%s", seqkv_error_detail());
    const uint64_t want_tokens[SEQKV_LEVELS] = {192, 96, 192, 96, 96};
    for (int l = 0; l < SEQKV_LEVELS; l++)
        cr_assert_eq(st.level_tokens[l], want_tokens[l], "%s store: %llu %s tokens, wanted %llu", version,
                     (unsigned long long)st.level_tokens[l], seqkv_level_name((seqkv_level)l),
                     (unsigned long long)want_tokens[l]);
    check_all(db, &tm, version);
    /* the store from before sealing compacts to the new one: every
     * record sealed, every get still exact, before and after reopening */
    seqkv_compact_stats cs;
    cr_assert_eq(seqkv_compact(db, NULL, NULL, NULL, &cs), 0, "%s", seqkv_error_detail());
    cr_assert_eq(cs.damaged, 0);
    check_all(db, &tm, version);
    seqkv_close(db);
    cr_assert_eq(su_chunk_unsealed(dir), 0, "compaction sealed every record");
    cr_assert_eq(seqkv_open(dir, &o, &db), 0, "%s", seqkv_error_detail());
    check_all(db, &tm, version);
    seqkv_close(db);
    su_model_free(&tm);
}

Test(golden_store, a_store_with_version_2_streams_reads_back_bit_exactly, .timeout = 120)
{
    golden_store("v2");
}

Test(golden_store, a_store_with_version_1_streams_reads_back_bit_exactly, .timeout = 120)
{
    golden_store("v1");
}
