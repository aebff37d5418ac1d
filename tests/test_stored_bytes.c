/* The bytes a store writes depend on what was put and on the profile,
 * never on the CPU: the same puts, at every level, write the same LMDB
 * contents (every record of every table, byte for byte) whichever
 * classification and coding path runs -- the scalar one (SEQKV_SIMD=0),
 * AVX2 alone (SEQKV_SIMD=2) and the best this CPU has (AVX-512 where it
 * is there). On stories260K when ../shared/models has it, else on the
 * store suites' random model. */
#include <criterion/criterion.h>

#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../codec/cfast.h" /* skv__cls_simd: the path the codec takes */
#include "../codec/fast_int.h" /* skv__fast_simd: the fast level's decoder path */
#include "seqkv.h"
#include "storeutil.h"
#include "testutil.h"

enum { CHUNK = 32, NSEQ = 4 };

/* Every table of the store in dir, each entry as (table, key, value), into
 * one buffer (*len bytes); *entries counts them. */
static uint8_t *dump_store(const char *dir, size_t *len, size_t *entries)
{
    static const char *const tables[] = {"meta", "profiles", "calibrations", "tenants", "chunks", "evict"};
    MDB_env *env = su_env_open(dir, 1);
    MDB_txn *txn;
    cr_assert_eq(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
    size_t cap = 1 << 20, n = 0;
    uint8_t *buf = malloc(cap);
    *entries = 0;
    for (size_t t = 0; t < sizeof tables / sizeof *tables; t++) {
        MDB_dbi dbi;
        cr_assert_eq(mdb_dbi_open(txn, tables[t], 0, &dbi), 0, "table %s", tables[t]);
        MDB_cursor *c;
        cr_assert_eq(mdb_cursor_open(txn, dbi, &c), 0);
        MDB_val k, v;
        for (int rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0; rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
            /* sealed records and calibrations as their images: their
             * nonces are random, what they seal must not depend on the CPU */
            uint8_t *img = NULL;
            size_t ilen = 0;
            if ((t == 4 && (img = su_chunk_get(dir, k.mv_data, &ilen))) ||
                (t == 2 && k.mv_size == 16 && (img = su_calib_get(dir, k.mv_data, &ilen))))
                v = (MDB_val){ilen, img};
            size_t need = n + 24 + k.mv_size + v.mv_size;
            while (need > cap)
                buf = realloc(buf, cap *= 2);
            uint64_t hdr[3] = {t, k.mv_size, v.mv_size};
            memcpy(buf + n, hdr, sizeof hdr);
            memcpy(buf + n + 24, k.mv_data, k.mv_size);
            memcpy(buf + n + 24 + k.mv_size, v.mv_data, v.mv_size);
            n = need;
            (*entries)++;
            free(img);
        }
        mdb_cursor_close(c);
    }
    mdb_txn_abort(txn);
    su_env_close(env);
    *len = n;
    return buf;
}

/* The same puts into a new store at dir, on codec path simd: raw, then a
 * calibration from them, then a sequence at every coded level. */
static void fill_store(const char *dir, const su_model *tm, const su_seq *s, int simd)
{
    skv__cls_simd = simd;
    skv__fast_simd = simd;
    su_master_key(dir, 77);
    seqkv_options o = {0};
    o.quiet = 1;
    seqkv *db = NULL;
    cr_assert_eq(seqkv_open(dir, &o, &db), 0, "%s", seqkv_error_detail());
    seqkv_profile p = SEQKV_PROFILE_INIT;
    su_profile(tm, "p", CHUNK, SEQKV_RAW, 1, &p);
    cr_assert_eq(seqkv_profile_set(db, &p), 0, "%s", seqkv_error_detail());
    seqkv_put_result r;
    for (int i = 0; i < 2; i++)
        cr_assert_eq(seqkv_put(db, "t", "p", s[i].tok, s[i].n, s[i].kv, s[i].kv_len, NULL, &r), 0, "%s",
                     seqkv_error_detail());
    cr_assert_eq(seqkv_calibrate(db, "p", 2), 0, "%s", seqkv_error_detail());
    for (int l = SEQKV_STAT; l < SEQKV_LEVELS; l++) {
        const su_seq *q = &s[2 + (l - SEQKV_STAT) % (NSEQ - 2)];
        seqkv_put_opts po = {.has_level = 1, .level = (seqkv_level)l};
        /* a new tenant each level: the same tokens are new to it */
        char ten[8];
        snprintf(ten, sizeof ten, "l%d", l);
        cr_assert_eq(seqkv_put(db, ten, "p", q->tok, q->n, q->kv, q->kv_len, &po, &r), 0, "%s",
                     seqkv_error_detail());
        cr_assert_gt(r.chunks, 0);
    }
    seqkv_close(db);
}

static void same_bytes_on_every_path(su_model *tm, size_t len)
{
    su_seq s[NSEQ];
    for (int i = 0; i < NSEQ; i++)
        su_seq_make(tm, NULL, 0, len + (size_t)(8 * i), 500 + (uint64_t)i, &s[i]);
    const int saved = skv__cls_simd;
    int paths[3] = {0, 2, skv__cls_simd_pick()}, np = paths[2] >= 2 ? 3 : 1;
    if (np == 1)
        cr_log_info("no AVX2 here: the scalar path is the only one to check");
    if (paths[2] == 2)
        np = 2; /* AVX2 is the best path: no third */
    const char *tmp = tu_tmpdir();
    uint8_t *ref = NULL;
    size_t rlen = 0, rent = 0;
    for (int k = 0; k < np; k++) {
        char name[16];
        snprintf(name, sizeof name, "db%d", paths[k]);
        const char *dir = tu_path(tmp, name);
        fill_store(dir, tm, s, paths[k]);
        size_t len2, ent;
        uint8_t *b = dump_store(dir, &len2, &ent);
        if (!ref) {
            ref = b, rlen = len2, rent = ent;
            cr_assert_gt(ent, 10, "the store holds records (%zu entries)", ent);
            continue;
        }
        cr_assert_eq(ent, rent, "path %d: %zu entries, path %d: %zu", paths[k], ent, paths[0], rent);
        cr_assert_eq(len2, rlen, "path %d wrote %zu bytes, path %d %zu", paths[k], len2, paths[0], rlen);
        cr_assert_eq(memcmp(b, ref, rlen), 0, "path %d wrote other bytes than path %d", paths[k], paths[0]);
        free(b);
    }
    free(ref);
    skv__cls_simd = saved;
    for (int i = 0; i < NSEQ; i++)
        su_seq_free(&s[i]);
}

Test(stored_bytes, do_not_depend_on_the_cpu_path_on_random_model_kv, .timeout = 300)
{
    su_model tm;
    su_random_model(&tm, tu_tmpdir(), SEQKV_DT_BF16);
    same_bytes_on_every_path(&tm, 80);
    su_model_free(&tm);
}

Test(stored_bytes, do_not_depend_on_the_cpu_path_on_stories260k, .timeout = 300)
{
    su_model tm;
    if (su_shared_model(&tm, "stories260K.bin", SEQKV_DT_BF16))
        cr_skip("../shared/models/stories260K.bin not present");
    same_bytes_on_every_path(&tm, 200);
    su_model_free(&tm);
}
