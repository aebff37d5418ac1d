/* A store of the current formats stays readable: tests/golden/store/
 * current holds a store written once (make_golden.sh says how), with
 * chunks at every level (stat and ctx in codec stream version 2, spec and
 * full in version 1, fast in SKVQ streams), sealed. It is copied, opened,
 * and every sequence put into it is looked up and got back bit-exactly
 * against the KV its model computes now. The same store with its format
 * record or a profile record made older is refused with SKV_ERR_VERSION,
 * never read. */
#include <criterion/criterion.h>

#include <lmdb.h>

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

/* Every sequence of the golden store looked up whole and got bit-exactly
 * (with_model 0: those the model-free levels hold; spec and full read the
 * model at the path the profile records, where make_golden.sh ran) */
static void check_all(seqkv *db, su_model *tm, const char *version, int with_model)
{
    static const struct {
        const char *tenant, *file;
        int line;
    } seqs[] = {{"t_raw", "raw.txt", 0}, {"t_raw", "raw.txt", 1}, {"t_stat", "stat.txt", 0},
                {"t_ctx", "ctx.txt", 0}, {"t_ctx", "near.txt", 0}, {"t_spec", "spec.txt", 0},
                {"t_full", "full.txt", 0}, {"t_fast", "fast.txt", 0}};
    for (size_t i = 0; i < sizeof seqs / sizeof *seqs; i++) {
        if (!with_model && (!strcmp(seqs[i].tenant, "t_spec") || !strcmp(seqs[i].tenant, "t_full")))
            continue;
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

/* A copy of the golden store (its directory) */
static const char *golden_copy(void)
{
    const char *src = tu_path(tu_source_root(), "tests/golden/store");
    const char *dir = tu_path(tu_tmpdir(), "current");
    cr_assert_eq(mkdir(dir, 0700), 0, "mkdir %s", dir);
    char from[4096], to[4096];
    for (int k = 0; k < 2; k++) {
        const char *f = k ? "master.key" : "data.mdb";
        snprintf(from, sizeof from, "%s/current/%s", src, f);
        snprintf(to, sizeof to, "%s/%s", dir, f);
        copy_file(from, to);
    }
    return dir;
}

static void golden_store(void)
{
    const char *version = "current";
    const char *src = tu_path(tu_source_root(), "tests/golden/store");
    const char *dir = golden_copy();
    char from[4096];
    su_model tm;
    char model[1024];
    snprintf(model, sizeof model, "%s/rm.bin", tu_tmpdir());
    snprintf(from, sizeof from, "%s/rm.bin", src);
    copy_file(from, model);
    su_model_load(&tm, model, SEQKV_DT_BF16);
    seqkv_options o = {0};
    o.quiet = 1;
    seqkv *db = NULL;
    /* read-only first: everything is there to read */
    o.read_only = 1;
    cr_assert_eq(seqkv_open(dir, &o, &db), 0, "open the %s golden store: %s", version, seqkv_error_detail());
    const uint8_t *bk[1] = {(const uint8_t *)"k"};
    size_t bl[1] = {1}, nb = 9;
    cr_assert_eq(seqkv_blob_exists(db, "t_raw", 1, bk, bl, &nb), 0, "%s", seqkv_error_detail());
    cr_assert_eq(nb, 0);
    check_all(db, &tm, version, 0);
    seqkv_close(db);
    cr_assert_eq(su_chunk_unsealed(dir), 0, "every record of the golden store is sealed");
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
    const uint64_t want_tokens[SEQKV_LEVELS] = {192, 96, 192, 96, 96, 96};
    for (int l = 0; l < SEQKV_LEVELS; l++)
        cr_assert_eq(st.level_tokens[l], want_tokens[l], "%s store: %llu %s tokens, wanted %llu", version,
                     (unsigned long long)st.level_tokens[l], seqkv_level_name((seqkv_level)l),
                     (unsigned long long)want_tokens[l]);
    check_all(db, &tm, version, 1);
    /* compaction finds nothing damaged and keeps every get exact, before
     * and after reopening */
    seqkv_compact_stats cs;
    cr_assert_eq(seqkv_compact(db, NULL, NULL, NULL, &cs), 0, "%s", seqkv_error_detail());
    cr_assert_eq(cs.damaged, 0);
    check_all(db, &tm, version, 1);
    seqkv_close(db);
    cr_assert_eq(su_chunk_unsealed(dir), 0, "compaction leaves every record sealed");
    cr_assert_eq(seqkv_open(dir, &o, &db), 0, "%s", seqkv_error_detail());
    check_all(db, &tm, version, 1);
    seqkv_close(db);
    su_model_free(&tm);
}

Test(golden_store, a_store_of_the_current_formats_reads_back_bit_exactly, .timeout = 120)
{
    golden_store();
}

/* The golden store's meta entry `format` or profile record `rm` replaced
 * by what set(v, len) makes of it */
static void golden_patch(const char *dir, const char *table, const char *key,
                         void (*set)(uint8_t *v, size_t *len))
{
    MDB_env *env = su_env_open(dir, 0);
    MDB_txn *txn;
    MDB_dbi dbi;
    cr_assert_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
    cr_assert_eq(mdb_dbi_open(txn, table, 0, &dbi), 0, "table %s", table);
    MDB_val k = {strlen(key), (void *)key}, v;
    cr_assert_eq(mdb_get(txn, dbi, &k, &v), 0, "%s: %s", table, key);
    uint8_t b[4096];
    size_t len = v.mv_size;
    cr_assert_leq(len, sizeof b);
    memcpy(b, v.mv_data, len);
    set(b, &len);
    MDB_val nv = {len, b};
    cr_assert_eq(mdb_put(txn, dbi, &k, &nv, 0), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    su_env_close(env);
}

static void format_version_1(uint8_t *v, size_t *len)
{
    cr_assert_geq(*len, 8);
    cr_assert_eq(skv_load32_le(v + 4), 2, "the golden store is of format version 2");
    skv_store32_le(v + 4, 1);
}

static void profile_before_the_lossy_tier(uint8_t *v, size_t *len)
{
    cr_assert_eq(*len, 1224, "the golden store's profile record has 1224 bytes");
    *len = 1192;
    (void)v;
}

static void refused(const char *dir, const char *want)
{
    seqkv_options o = {0};
    o.quiet = 1;
    for (int ro = 1; ro >= 0; ro--) {
        o.read_only = ro;
        seqkv *db = NULL;
        int rc = seqkv_open(dir, &o, &db);
        cr_assert_eq(rc, SKV_ERR_VERSION, "open (read_only %d): %s (%s)", ro, seqkv_error_name(rc),
                     seqkv_error_detail());
        cr_assert_null(db);
        cr_assert(strstr(seqkv_error_detail(), want) != NULL, "%s", seqkv_error_detail());
    }
}

/* A store of format version 1 (from before sealing: its records unsealed,
 * its tenants without keys) is refused at open, read-only or not, and
 * left as it was */
Test(golden_store, a_store_of_format_version_1_is_refused, .timeout = 60)
{
    const char *dir = golden_copy();
    golden_patch(dir, "meta", "format", format_version_1);
    refused(dir, "store of format version 1: this build reads only version 2");
    refused(dir, "store of format version 1"); /* (unchanged by the first refusal) */
}

/* A profile record of the 1192 bytes before FORMAT 15 is refused */
Test(golden_store, a_profile_record_from_before_the_lossy_tier_is_refused, .timeout = 60)
{
    const char *dir = golden_copy();
    golden_patch(dir, "profiles", "rm", profile_before_the_lossy_tier);
    refused(dir, "profile record of 1192 bytes (FORMAT 14 or before): this build reads only the 1224-byte");
}
