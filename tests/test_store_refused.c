/* What the store refuses: shape mismatches, unknown profiles, bad
 * arguments, tokens outside the model's vocabulary, and a newer format
 * version (or another master key) at open. */
#include <criterion/criterion.h>
#include <math.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "seqkv.h"
#include "skv_delta.h"
#include "storetest.h"
#include "storeutil.h"
#include "testutil.h"

/* ---- refused inputs ----------------------------------------------------------------- */

Test(store_refused, shape_mismatch_unknown_profile_and_bad_arguments_are_refused, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
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
    cr_assert_eq(seqkv_get(db, "t", "nope", a.tok, a.n, NULL, out, a.kv_len, &got), SKV_ERR_NOT_FOUND);
    cr_assert_eq(seqkv_del(db, "t", "nope", a.tok, a.n, &got), SKV_ERR_NOT_FOUND);
    cr_assert_eq(seqkv_calibrate(db, "nope", 0), SKV_ERR_NOT_FOUND);
    seqkv_profile pr = SEQKV_PROFILE_INIT;
    cr_assert_eq(seqkv_profile_get(db, "nope", &pr), SKV_ERR_NOT_FOUND);
    /* an existing name with another shape, dtype or chunk */
    seqkv_profile q = SEQKV_PROFILE_INIT;
    su_profile(&tm, "p", CHUNK, SEQKV_RAW, 0, &q);
    q.head_dim = 16;
    cr_assert_eq(seqkv_profile_set(db, &q), SKV_ERR_SHAPE);
    su_profile(&tm, "p", CHUNK, SEQKV_RAW, 0, &q);
    q.dtype = SEQKV_DT_F16;
    cr_assert_eq(seqkv_profile_set(db, &q), SKV_ERR_SHAPE);
    su_profile(&tm, "p", 32, SEQKV_RAW, 0, &q);
    cr_assert_eq(seqkv_profile_set(db, &q), SKV_ERR_SHAPE);
    /* a model that does not match the shape */
    su_profile(&tm, "p2", CHUNK, SEQKV_RAW, 1, &q);
    q.kv_heads = 4;
    cr_assert_eq(seqkv_profile_set(db, &q), SKV_ERR_SHAPE);
    /* the level may change; the identity does not */
    seqkv_profile before = SEQKV_PROFILE_INIT;
    cr_assert_eq(seqkv_profile_get(db, "p", &before), 0);
    su_profile(&tm, "p", CHUNK, SEQKV_STAT, 0, &q);
    cr_assert_eq(seqkv_profile_set(db, &q), 0, "%s", seqkv_error_detail());
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
    /* fields a reader would refuse as damaged are refused here, so no store
     * holds a profile it cannot open again */
    const float thetas[] = {-1.0f, NAN, INFINITY};
    for (size_t i = 0; i < sizeof thetas / sizeof *thetas; i++) {
        su_profile(&tm, "pt", CHUNK, SEQKV_RAW, 0, &q);
        q.rope_theta = thetas[i];
        cr_assert_eq(seqkv_profile_set(db, &q), SKV_ERR_ARG, "rope_theta %g", (double)thetas[i]);
        cr_assert(strstr(seqkv_error_detail(), "rope_theta"), "%s", seqkv_error_detail());
    }
    su_profile(&tm, "pt", CHUNK, SEQKV_RAW, 0, &q);
    q.rope_half = 2;
    cr_assert_eq(seqkv_profile_set(db, &q), SKV_ERR_ARG);
    q.rope_half = 0;
    q.dtype = SEQKV_DT_I32;
    cr_assert_eq(seqkv_profile_set(db, &q), SKV_ERR_ARG);
    /* nothing to calibrate from */
    su_profile(&tm, "pm", CHUNK, SEQKV_RAW, 1, &q);
    cr_assert_eq(seqkv_profile_set(db, &q), 0, "%s", seqkv_error_detail());
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
Test(store_refused, a_token_outside_the_models_vocabulary_is_refused, .timeout = 60)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    seqkv *db = open_store(tu_path(tmp, "db"), NULL);
    add_profile(db, &tm, "pm", CHUNK, SEQKV_RAW, 1);
    su_seq c[3];
    for (int i = 0; i < 3; i++) {
        su_seq_make(&tm, NULL, 0, 40, 10 + (uint64_t)i, &c[i]);
        put(db, "cal", "pm", &c[i], 0);
    }
    cr_assert_eq(seqkv_calibrate(db, "pm", 0), 0, "%s", seqkv_error_detail());
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
                           seqkv_level_name((seqkv_level)l), rc ? seqkv_error_name(rc) : "stored");
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

Test(store_refused, a_newer_format_version_refuses_to_open, .timeout = 60)
{
    const char *tmp = tu_tmpdir();
    const char *dir = tu_path(tmp, "db");
    char dirc[4200];
    snprintf(dirc, sizeof dirc, "%s", dir);
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    seqkv *db = open_store(dirc, NULL);
    add_profile(db, &tm, "p", CHUNK, SEQKV_RAW, 0);
    su_seq a;
    su_seq_make(&tm, NULL, 0, 20, 1, &a);
    put(db, "t", "p", &a, 0);
    seqkv_close(db);
    seqkv_options o = {.quiet = 1};
    format_edit(dirc, 4, 1);
    db = (seqkv *)1;
    cr_assert_eq(seqkv_open(dirc, &o, &db), SKV_ERR_VERSION, "%s", seqkv_error_detail());
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
    cr_assert_eq(seqkv_open(dirc, &o, &db), SKV_ERR_FORMAT, "%s", seqkv_error_detail());
    format_edit(dirc, 0, 0x01010101);
    /* another store's master key */
    key_seed = 2;
    seqkv *other = open_store(tu_path(tmp, "other"), NULL);
    seqkv_close(other);
    key_seed = 1;
    o.master_key = tu_path(tu_path(tmp, "other"), "master.key");
    cr_assert_eq(seqkv_open(dirc, &o, &db), SKV_ERR_CORRUPT, "%s", seqkv_error_detail());
    o.master_key = NULL;
    /* a key file the store makes is private */
    seqkv *fresh = NULL;
    cr_assert_eq(seqkv_open(tu_path(tmp, "fresh"), &o, &fresh), 0, "%s", seqkv_error_detail());
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

/* ---- the vocab bound on token ids ----------------------------------------------------- */

Test(store_refused, token_ids_at_or_above_the_profile_vocab_are_refused_and_vocab_survives_a_reopen,
     .timeout = 120)
{
    const char *tmp = tu_tmpdir(), *dir = tu_path(tmp, "db");
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    seqkv *db = open_store(dir, NULL);
    seqkv_profile p = SEQKV_PROFILE_INIT;
    su_profile(&tm, "p", CHUNK, SEQKV_RAW, 0, &p);
    p.vocab = 1000;
    cr_assert_eq(seqkv_profile_set(db, &p), 0, "%s", seqkv_error_detail());
    cr_assert_eq(p.vocab, 1000);
    su_seq a;
    su_seq_make(&tm, NULL, 0, 30, 1, &a);
    for (size_t i = 0; i < a.n; i++)
        a.tok[i] = (int32_t)((i * 37) % 1000);
    seqkv_put_result r;
    a.tok[5] = 1000;
    cr_assert_eq(seqkv_put(db, "t", "p", a.tok, a.n, a.kv, a.kv_len, NULL, &r), SKV_ERR_ARG);
    cr_assert(strstr(seqkv_error_detail(), "token id 1000 at 5") && strstr(seqkv_error_detail(), "1000)"),
              "%s", seqkv_error_detail());
    a.tok[5] = 2147483647;
    cr_assert_eq(seqkv_put(db, "t", "p", a.tok, a.n, a.kv, a.kv_len, NULL, &r), SKV_ERR_ARG);
    cr_assert_eq(stats(db, NULL).tokens, 0, "nothing stored");
    a.tok[5] = 999;
    cr_assert_eq(seqkv_put(db, "t", "p", a.tok, a.n, a.kv, a.kv_len, NULL, &r), 0, "%s",
                 seqkv_error_detail());
    cr_assert_eq(r.new_tokens, 30);
    seqkv_close(db);
    db = open_store(dir, NULL);
    seqkv_profile q = SEQKV_PROFILE_INIT;
    cr_assert_eq(seqkv_profile_get(db, "p", &q), 0);
    cr_assert_eq(q.vocab, 1000, "vocab survives a reopen");
    /* 0 is the default; the maximum is 2^31 - 1; a model's vocabulary rules */
    p.vocab = 0;
    cr_assert_eq(seqkv_profile_set(db, &p), 0);
    cr_assert_eq(p.vocab, SEQKV_VOCAB_DEFAULT);
    p.vocab = SEQKV_VOCAB_MAX;
    cr_assert_eq(seqkv_profile_set(db, &p), 0);
    cr_assert_eq(seqkv_profile_get(db, "p", &q), 0);
    cr_assert_eq(q.vocab, SEQKV_VOCAB_MAX);
    p.vocab = -1;
    cr_assert_eq(seqkv_profile_set(db, &p), SKV_ERR_ARG);
    su_profile(&tm, "m", CHUNK, SEQKV_RAW, 1, &p);
    cr_assert_eq(seqkv_profile_set(db, &p), 0, "%s", seqkv_error_detail());
    cr_assert_eq(p.vocab, tm.c->vocab_size, "a model's profile takes its vocabulary");
    p.vocab = tm.c->vocab_size + 1;
    cr_assert_eq(seqkv_profile_set(db, &p), SKV_ERR_ARG);
    seqkv_close(db);
    su_seq_free(&a);
    su_model_free(&tm);
}
