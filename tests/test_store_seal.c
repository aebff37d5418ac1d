/* Encryption at rest (store/seal.c, store/tenant_keys.c): after puts of
 * known KV -- raw records, which are the KV bytes themselves, and coded
 * ones -- and blobs holding KV, no 64-byte window of any of that KV and no
 * 16-token window of any token sequence occurs in any file of the data
 * directory (the same check finds them in an unsealed store, so it can
 * fail); a sealed record copied under another key, or with its tenant
 * changed, does not open; another master key is refused; gets stay exact. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <lmdb.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "seal.h"
#include "seqkv.h"
#include "storetest.h"
#include "storeutil.h"
#include "testutil.h"

#define WIN 64

/* A set of 64-byte windows by their XXH3-64 (open addressing) */
typedef struct {
    uint64_t *h;
    size_t cap, n;
} winset;

static void ws_add(winset *w, uint64_t h)
{
    h |= 1;
    if (2 * (w->n + 1) > w->cap) {
        winset g = {calloc(w->cap ? 2 * w->cap : 1 << 16, 8), w->cap ? 2 * w->cap : 1 << 16, 0};
        for (size_t i = 0; i < w->cap; i++)
            if (w->h[i])
                ws_add(&g, w->h[i]);
        free(w->h);
        *w = g;
    }
    size_t i = h & (w->cap - 1);
    while (w->h[i] && w->h[i] != h)
        i = (i + 1) & (w->cap - 1);
    if (!w->h[i]) {
        w->h[i] = h;
        w->n++;
    }
}

static int ws_has(const winset *w, uint64_t h)
{
    h |= 1;
    size_t i = h & (w->cap - 1);
    while (w->h[i]) {
        if (w->h[i] == h)
            return 1;
        i = (i + 1) & (w->cap - 1);
    }
    return 0;
}

/* Every window of b that is not one repeated byte (zero runs occur in any
 * file and say nothing) */
static void ws_add_all(winset *w, const uint8_t *b, size_t len)
{
    for (size_t i = 0; i + WIN <= len; i++) {
        int flat = 1;
        for (size_t j = 1; j < WIN && flat; j++)
            flat = b[i + j] == b[i];
        if (!flat)
            ws_add(w, XXH3_64bits(b + i, WIN));
    }
}

/* How many windows of the data directory's files are in w (its
 * directories' too: DIR/values holds the value files) */
static size_t found_in_dir(const char *dir, const winset *w)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    size_t hits = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        size_t len;
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
            hits += found_in_dir(path, w);
            continue;
        }
        uint8_t *b = tu_read(path, &len);
        for (size_t i = 0; b && i + WIN <= len; i++)
            hits += ws_has(w, XXH3_64bits(b + i, WIN));
        free(b);
    }
    closedir(d);
    return hits;
}

/* Puts of KV at raw and at ctx, blobs holding KV; the windows of it all */
static void fill(const char *dir, int no_seal, uint64_t file_min, winset *w)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    seqkv_options o = {0};
    o.no_seal = no_seal;
    o.file_min = file_min;
    seqkv *db = store_at_level(dir, &o, &tm, SEQKV_CTX, 0, CHUNK);
    seqkv_profile p = SEQKV_PROFILE_INIT;
    su_profile(&tm, "r", CHUNK, SEQKV_RAW, 0, &p);
    cr_assert_eq(seqkv_profile_set(db, &p), 0, "%s", seqkv_error_detail());
    for (int i = 0; i < 6; i++) {
        su_seq s;
        su_seq_make(&tm, NULL, 0, 90, 900 + (uint64_t)i, &s);
        put(db, "t", i % 2 ? "p" : "r", &s, -1);
        ws_add_all(w, s.kv, s.kv_len);
        /* token windows: 16 ids as the store writes them (u32 LE) */
        uint8_t tb[90 * 4];
        for (size_t k = 0; k < s.n; k++)
            skv_store32_le(tb + 4 * k, (uint32_t)s.tok[k]);
        ws_add_all(w, tb, s.n * 4);
        char key[16];
        snprintf(key, sizeof key, "kv%d", i);
        seqkv_blob_item it = {(const uint8_t *)key, strlen(key), s.kv, s.kv_len, NULL, 0};
        int written;
        cr_assert_eq(seqkv_blob_set(db, "t", &it, 1, 0, 0, &written), 0, "%s", seqkv_error_detail());
        assert_whole(db, "t", i % 2 ? "p" : "r", &tm, &s, "sealed");
        su_seq_free(&s);
    }
    seqkv_close(db);
    su_model_free(&tm);
}

static void no_window(uint64_t file_min)
{
    const char *tmp = tu_tmpdir();
    char *sealed = strdup(tu_path(tmp, "sealed")), *open = strdup(tu_path(tmp, "open"));
    winset w = {0}, w2 = {0};
    fill(sealed, 0, file_min, &w);
    cr_assert_gt(w.n, 10000, "%zu windows", w.n);
    size_t hits = found_in_dir(sealed, &w);
    cr_assert_eq(hits, 0, "%zu windows of the KV or tokens are in the sealed store's files", hits);
    /* the check finds them where nothing is sealed */
    fill(open, 1, file_min, &w2);
    hits = found_in_dir(open, &w2);
    cr_assert_gt(hits, 1000, "an unsealed store shows its KV (%zu windows found)", hits);
    if (file_min) { /* ... in its value files */
        char values[4200];
        snprintf(values, sizeof values, "%s/values", open);
        hits = found_in_dir(values, &w2);
        cr_assert_gt(hits, 1000, "unsealed value files show their KV (%zu windows found)", hits);
    }
    free(w.h);
    free(w2.h);
    free(sealed);
    free(open);
}

Test(seal, no_window_of_the_kv_or_tokens_is_in_the_data_directory, .timeout = 120)
{
    no_window(0);
}

Test(seal, no_window_of_the_kv_or_tokens_is_in_the_value_files_either, .timeout = 120)
{
    no_window(1); /* every record in a value file of its own */
}

Test(seal, a_record_moved_to_another_key_or_tenant_does_not_open, .timeout = 60)
{
    const char *tmp = tu_tmpdir();
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/db", tmp);
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    seqkv *db = store_at_level(dir, NULL, &tm, SEQKV_RAW, 0, CHUNK);
    su_seq a, b;
    su_seq_make(&tm, NULL, 0, 2 * CHUNK, 11, &a);
    su_seq_make(&tm, NULL, 0, 2 * CHUNK, 12, &b);
    put(db, "t", "p", &a, -1);
    put(db, "u", "p", &b, -1);
    seqkv_close(db);
    uint8_t ka[32], kb[32];
    cr_assert_eq(su_chunk_find(dir, 0, a.tok, CHUNK, ka), 0);
    cr_assert_eq(su_chunk_find(dir, 0, b.tok, CHUNK, kb), 0);
    /* the stored bytes of a's first record, copied under b's key */
    void *env = su_env_open(dir, 0);
    MDB_txn *txn;
    MDB_dbi dbi;
    cr_assert_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
    cr_assert_eq(mdb_dbi_open(txn, "chunks", 0, &dbi), 0);
    MDB_val k = {32, ka}, v;
    cr_assert_eq(mdb_get(txn, dbi, &k, &v), 0);
    cr_assert(skv_rec_is_sealed(v.mv_data, v.mv_size), "records are sealed");
    uint8_t *copy = malloc(v.mv_size);
    memcpy(copy, v.mv_data, v.mv_size);
    size_t len = v.mv_size;
    /* its tenant field changed to u's: does not open under its own key either */
    uint8_t *moved = malloc(len);
    memcpy(moved, copy, len);
    const uint64_t ut = skv_rec_sealed_tenant(v.mv_data, v.mv_size) + 1;
    skv_store64_le(moved + 8 + SKV_SEAL_NONCE + 8, ut);
    MDB_val kk = {32, kb}, cv = {len, copy}, mv = {len, moved};
    cr_assert_eq(mdb_put(txn, dbi, &kk, &cv, 0), 0);
    cr_assert_eq(mdb_put(txn, dbi, &k, &mv, 0), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    su_env_close(env);
    db = open_store(dir, NULL);
    uint8_t *out = malloc(su_kv_len(&tm, 2 * CHUNK));
    size_t got;
    /* box 0 (the tokens) does not open: the record is not indexed, so
     * the prefix is a miss -- nothing of the moved bytes is served */
    int rc = seqkv_get(db, "u", "p", b.tok, b.n, NULL, out, su_kv_len(&tm, 2 * CHUNK), &got);
    cr_assert(rc == SKV_ERR_NOT_FOUND || rc == SKV_ERR_CORRUPT,
              "a record under another key does not open (%d)", rc);
    rc = seqkv_get(db, "t", "p", a.tok, a.n, NULL, out, su_kv_len(&tm, 2 * CHUNK), &got);
    cr_assert(rc == SKV_ERR_NOT_FOUND || rc == SKV_ERR_CORRUPT,
              "a record with another tenant does not open (%d)", rc);
    size_t m = 0;
    cr_assert_eq(seqkv_lookup(db, "u", "p", b.tok, b.n, &m), 0);
    cr_assert_eq(m, 0, "the moved record is not indexed");
    seqkv_close(db);
    free(out);
    free(copy);
    free(moved);
    su_seq_free(&a);
    su_seq_free(&b);
    su_model_free(&tm);
}

static int open_with(const char *dir, const char *spec, seqkv **db)
{
    seqkv_options o = {0};
    o.quiet = 1;
    o.master_key = spec;
    *db = NULL;
    return seqkv_open(dir, &o, db);
}

Test(seal, master_keys_from_env_fd_and_passphrase_and_wrong_ones_refused, .timeout = 60)
{
    const char *tmp = tu_tmpdir();
    char dir[4200], pw[4200], spec[4300];
    seqkv *db;
    /* a key in the environment */
    snprintf(dir, sizeof dir, "%s/env", tmp);
    setenv("SEQKV_TEST_KEY", "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff", 1);
    cr_assert_eq(open_with(dir, "env:SEQKV_TEST_KEY", &db), 0, "%s", seqkv_error_detail());
    seqkv_blob_item it = {(const uint8_t *)"k", 1, (const uint8_t *)"secret value", 12, NULL, 0};
    int w;
    cr_assert_eq(seqkv_blob_set(db, "t", &it, 1, 0, 0, &w), 0);
    seqkv_close(db);
    cr_assert_eq(access(tu_path(dir, "master.key"), F_OK), -1, "no key file in the directory");
    /* the same key from a descriptor */
    int p[2];
    cr_assert_eq(pipe(p), 0);
    cr_assert_eq(write(p[1], getenv("SEQKV_TEST_KEY"), 64), 64);
    close(p[1]);
    snprintf(spec, sizeof spec, "fd:%d", p[0]);
    cr_assert_eq(open_with(dir, spec, &db), 0, "%s", seqkv_error_detail());
    close(p[0]);
    seqkv_close(db);
    /* another key */
    setenv("SEQKV_TEST_KEY", "10112233445566778899aabbccddeeff00112233445566778899aabbccddeeff", 1);
    cr_assert_eq(open_with(dir, "env:SEQKV_TEST_KEY", &db), SKV_ERR_CORRUPT);
    cr_assert(strstr(seqkv_error_detail(), "master key does not belong"), "%s", seqkv_error_detail());
    setenv("SEQKV_TEST_KEY", "not hex", 1);
    cr_assert_eq(open_with(dir, "env:SEQKV_TEST_KEY", &db), SKV_ERR_ARG);
    /* a passphrase: its salt beside the store, a wrong one refused */
    snprintf(dir, sizeof dir, "%s/pass", tmp);
    snprintf(pw, sizeof pw, "%s/pw", tmp);
    FILE *f = fopen(pw, "w");
    fputs("correct horse battery staple\n", f);
    fclose(f);
    snprintf(spec, sizeof spec, "passphrase-file:%s", pw);
    cr_assert_eq(open_with(dir, spec, &db), 0, "%s", seqkv_error_detail());
    cr_assert_eq(seqkv_blob_set(db, "t", &it, 1, 0, 0, &w), 0);
    seqkv_close(db);
    cr_assert_eq(access(tu_path(dir, "passphrase.kdf"), F_OK), 0);
    setenv("SEQKV_TEST_PASS", "correct horse battery staple", 1);
    cr_assert_eq(open_with(dir, "passphrase-env:SEQKV_TEST_PASS", &db), 0, "%s",
                 seqkv_error_detail());
    seqkv_close(db);
    setenv("SEQKV_TEST_PASS", "correct horse battery stapler", 1);
    cr_assert_eq(open_with(dir, "passphrase-env:SEQKV_TEST_PASS", &db), SKV_ERR_CORRUPT);
    cr_assert(strstr(seqkv_error_detail(), "passphrase does not belong"), "%s", seqkv_error_detail());
    /* a passphrase file longer than the 1024 bytes read is refused, not cut */
    f = fopen(pw, "w");
    for (int i = 0; i < 1025; i++)
        fputc('a' + i % 26, f);
    fclose(f);
    cr_assert_eq(open_with(dir, spec, &db), SKV_ERR_ARG);
    cr_assert(strstr(seqkv_error_detail(), "at most 1024 bytes"), "%s", seqkv_error_detail());
    unsetenv("SEQKV_TEST_KEY");
    unsetenv("SEQKV_TEST_PASS");
}

static void copy_file(const char *from, const char *to)
{
    size_t len;
    uint8_t *b = tu_read(from, &len);
    cr_assert_not_null(b, "read %s", from);
    FILE *f = fopen(to, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(b, 1, len, f), len);
    fclose(f);
    free(b);
}

/* Nothing of the tenant's prefix is found (an unknown tenant, or 0) */
static void assert_gone(seqkv *db, const char *tenant, const su_seq *s)
{
    size_t m = 0;
    int rc = seqkv_lookup(db, tenant, "p", s->tok, s->n, &m);
    cr_assert(rc == SKV_ERR_NOT_FOUND || (rc == 0 && m == 0), "%s: %d, %zu tokens", tenant, rc, m);
}

static uint8_t *blob_of(seqkv *db, const char *tenant, const char *key, size_t *len)
{
    seqkv_blob_info in;
    cr_assert_eq(seqkv_blob_stat(db, tenant, (const uint8_t *)key, strlen(key), &in), 0);
    *len = in.len;
    return in.found ? malloc(1) : NULL; /* (found or not is what these checks need) */
}

Test(seal, a_forgotten_tenant_opens_nowhere_not_even_from_a_copy_taken_before, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    char dir[4200], copy[4200], key[4200], path[4300], path2[4300];
    snprintf(dir, sizeof dir, "%s/db", tmp);
    snprintf(copy, sizeof copy, "%s/copy", tmp);
    snprintf(key, sizeof key, "%s/outside.key", tmp); /* not in the data directory */
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    seqkv_options o = {0};
    o.master_key = key;
    seqkv *db = store_at_level(dir, &o, &tm, SEQKV_CTX, 0, CHUNK);
    su_seq a, b;
    su_seq_make(&tm, NULL, 0, 3 * CHUNK, 21, &a);
    su_seq_make(&tm, NULL, 0, 3 * CHUNK, 22, &b);
    put(db, "alice", "p", &a, -1);
    put(db, "bob", "p", &b, -1);
    seqkv_blob_item ia = {(const uint8_t *)"k", 1, a.kv, a.kv_len, NULL, 0}, ib = {(const uint8_t *)"k", 1,
                                                                        b.kv, b.kv_len, NULL, 0};
    int w;
    cr_assert_eq(seqkv_blob_set(db, "alice", &ia, 1, 0, 0, &w), 0);
    cr_assert_eq(seqkv_blob_set(db, "bob", &ib, 1, 0, 0, &w), 0);
    seqkv_close(db);
    /* a copy of the data directory, and the key of that day */
    cr_assert_eq(mkdir(copy, 0700), 0);
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    snprintf(path2, sizeof path2, "%s/data.mdb", copy);
    copy_file(path, path2);
    size_t klen;
    uint8_t *old_key = tu_read(key, &klen);
    db = open_store(dir, &o);
    seqkv_forget_stats fs;
    cr_assert_eq(seqkv_tenant_forget(db, "alice", &fs), 0, "%s", seqkv_error_detail());
    cr_assert(fs.rotated);
    cr_assert_gt(fs.records, 0);
    cr_assert_eq(fs.blobs, 1);
    assert_gone(db, "alice", &a);
    size_t len;
    cr_assert_null(blob_of(db, "alice", "k", &len), "alice's blob is gone");
    assert_whole(db, "bob", "p", &tm, &b, "bob after alice is forgotten");
    uint8_t *bb = blob_of(db, "bob", "k", &len);
    cr_assert(bb && len == b.kv_len);
    free(bb);
    cr_assert_eq(seqkv_tenant_forget(db, "alice", &fs), SKV_ERR_NOT_FOUND);
    seqkv_close(db);
    size_t nlen;
    uint8_t *new_key = tu_read(key, &nlen);
    cr_assert(nlen == klen && memcmp(new_key, old_key, klen) != 0, "the key file was rotated");
    /* reopened with the key of now: bob exact, alice nowhere */
    db = open_store(dir, &o);
    assert_whole(db, "bob", "p", &tm, &b, "bob reopened");
    assert_gone(db, "alice", &a);
    seqkv_close(db);
    /* the copy taken before: the key of now opens nothing of it ... */
    seqkv *c = NULL;
    o.quiet = 1;
    cr_assert_eq(seqkv_open(copy, &o, &c), SKV_ERR_CORRUPT, "the copy is not the new key's");
    /* ... and alice's wrapped keys in it do not unwrap under it */
    uint8_t nm[32], keys[SKV_TKEYS];
    cr_assert_eq(skv_master_key(key, 0, nm), 0);
    void *env = su_env_open(copy, 1);
    MDB_txn *txn;
    MDB_dbi kd, td;
    cr_assert_eq(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
    cr_assert_eq(mdb_dbi_open(txn, "tkeys", 0, &kd), 0);
    cr_assert_eq(mdb_dbi_open(txn, "tenants", 0, &td), 0);
    MDB_val tk = {5, "alice"}, tv, kv;
    cr_assert_eq(mdb_get(txn, td, &tk, &tv), 0);
    const uint64_t aid = skv_load64_le((const uint8_t *)tv.mv_data + 8);
    uint8_t k8[8];
    for (int i = 0; i < 8; i++)
        k8[i] = (uint8_t)(aid >> (56 - 8 * i));
    MDB_val kk = {8, k8};
    cr_assert_eq(mdb_get(txn, kd, &kk, &kv), 0);
    cr_assert_eq(skv_tkeys_unwrap(nm, aid, kv.mv_data, kv.mv_size, keys), SKV_ERR_CORRUPT,
                 "alice's keys in the old copy do not open with the new master key");
    mdb_txn_abort(txn);
    su_env_close(env);
    /* a rotation that committed but stopped before its rename: the next
     * open finishes it */
    snprintf(path, sizeof path, "%s.new", key);
    cr_assert_eq(rename(key, path), 0);
    FILE *f = fopen(key, "wb");
    fwrite(old_key, 1, klen, f);
    fclose(f);
    chmod(key, 0600);
    db = open_store(dir, &o);
    assert_whole(db, "bob", "p", &tm, &b, "after an interrupted rotation");
    seqkv_close(db);
    cr_assert_eq(access(path, F_OK), -1, "KEY.new adopted");
    free(old_key);
    free(new_key);
    su_seq_free(&a);
    su_seq_free(&b);
    su_model_free(&tm);
}

/* Box 1's parts, sealed and opened by OpenSSL's ChaCha20-Poly1305 under
 * libsodium's HChaCha20 subkey, are XChaCha20-Poly1305 boxes as FORMAT.md
 * gives them: libsodium opens each; a raw record's streams opened
 * straight into place (skv_rec_unseal_raw) and the whole image
 * (skv_rec_unseal) are the bytes sealed, for stream sizes that split the
 * parts anywhere; any flipped byte of the streams' boxes is refused, and a
 * refused part leaves zeros, never unchecked bytes. */
Test(seal, raw_streams_open_in_place_as_libsodium_opens_them, .timeout = 60)
{
    static const uint8_t key[32] = {4, 5, 6}, dek[32] = {7, 1, 9};
    const uint32_t shapes[][2] = {{2, 1}, {10, 64}, {10, 1000}, {6, 4096}, {16, 333}, {40, 16384}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const uint32_t ns = shapes[s][0], sz = shapes[s][1], n = 3;
        uint8_t *streams = malloc((size_t)ns * sz), sizes[4 * 40];
        int32_t tokens[3] = {5, 6, 7};
        uint8_t tok_le[12];
        for (uint32_t i = 0; i < n; i++)
            memcpy(tok_le + 4 * i, &tokens[i], 4);
        for (size_t i = 0; i < (size_t)ns * sz; i++)
            streams[i] = (uint8_t)(i * 2654435761u >> 13);
        for (uint32_t j = 0; j < ns; j++)
            memcpy(sizes + 4 * j, &sz, 4);
        skv_rec r = {0};
        r.level = SEQKV_RAW;
        r.tenant = 3;
        r.n = n;
        r.nstreams = ns;
        r.tokens = tok_le;
        r.sizes = sizes;
        r.streams = streams;
        r.streams_len = (size_t)ns * sz;
        r.checksum = 77;
        const size_t len = skv_rec_size(&r);
        uint8_t *img = malloc(len);
        skv_rec_write(&r, img);
        skv_rec pr;
        cr_assert_eq(skv_rec_parse(img, len, &pr), 0, "%s", seqkv_error_detail());
        const size_t sl = skv_rec_sealed_size(&pr, len);
        uint8_t *v = malloc(sl), *head, *out = malloc((size_t)ns * sz), *dst[40];
        skv_rec_seal_into(key, dek, &pr, img, len, v);
        /* FORMAT.md's boxes, opened by libsodium itself: box i is
         * XChaCha20-Poly1305 under nonce N with its last byte XORed with i,
         * bound to key || the clear bytes || i */
        {
            const size_t b1 = (size_t)ns * sz + SKV_REC_TRAILER, q = (b1 + SKV_SEAL_SEGS - 1) /
                                                                     SKV_SEAL_SEGS;
            size_t p = sl - b1 - SKV_SEAL_SEGS * SKV_SEAL_TAG;
            uint8_t ad[32 + SKV_SEAL_HEAD + 1], nonce[SKV_SEAL_NONCE], *m = malloc(q + 1);
            memcpy(ad, key, 32);
            memcpy(ad + 32, v, SKV_SEAL_HEAD);
            for (int k = 0; k < SKV_SEAL_SEGS; k++) {
                const size_t a = (size_t)k * q < b1 ? (size_t)k * q : b1,
                             pn = a + q < b1 ? q : b1 - a;
                ad[sizeof ad - 1] = (uint8_t)(1 + k);
                memcpy(nonce, v + 8, SKV_SEAL_NONCE);
                nonce[SKV_SEAL_NONCE - 1] ^= (uint8_t)(1 + k);
                cr_assert_eq(crypto_aead_xchacha20poly1305_ietf_decrypt(
                                 m, NULL, NULL, v + p, pn + SKV_SEAL_TAG, ad, sizeof ad, nonce, dek),
                             0, "shape %zu: box %d opens with libsodium", s, 1 + k);
                cr_assert_eq(memcmp(m, img + len - b1 + a, pn), 0, "shape %zu box %d", s, 1 + k);
                p += pn + SKV_SEAL_TAG;
            }
            free(m);
        }
        skv_rec h;
        cr_assert_eq(skv_rec_unseal_head(key, dek, v, sl, &head, &h), 0);
        for (uint32_t j = 0; j < ns; j++) /* scattered: the streams in reverse */
            dst[j] = out + (size_t)(ns - 1 - j) * sz;
        cr_assert_eq(skv_rec_unseal_raw(key, dek, v, sl, &h, NULL, dst), 0, "%s",
                     seqkv_error_detail());
        uint8_t *back;
        size_t bl;
        cr_assert_eq(skv_rec_unseal(key, dek, v, sl, NULL, &back, &bl), 0);
        cr_assert_eq(bl, len);
        cr_assert_eq(memcmp(back, img, len), 0, "libsodium opens the image whole");
        for (uint32_t j = 0; j < ns; j++)
            cr_assert_eq(memcmp(dst[j], streams + (size_t)j * sz, sz), 0, "shape %zu stream %u",
                         s, j);
        skv_free(back);
        /* bytes of box 1 (streams, trailer, tags) flipped one at a time */
        const size_t box1 = sl - ((size_t)ns * sz + SKV_REC_TRAILER + SKV_SEAL_SEGS * SKV_SEAL_TAG);
        for (size_t at = box1; at < sl; at += 1 + (sl - box1) / 37) {
            v[at] ^= 0x20;
            memset(out, 0xa5, (size_t)ns * sz);
            cr_assert_eq(skv_rec_unseal_raw(key, dek, v, sl, &h, NULL, dst), SKV_ERR_CORRUPT,
                         "shape %zu, byte %zu flipped", s, at);
            size_t zeroed = 0; /* every byte its own or zero, never unchecked */
            for (uint32_t j = 0; j < ns; j++)
                for (size_t i = 0; i < sz; i++) {
                    const uint8_t want = streams[(size_t)j * sz + i];
                    cr_assert(dst[j][i] == want || dst[j][i] == 0, "shape %zu, byte %zu", s, at);
                    zeroed += dst[j][i] != want;
                }
            /* the part the byte is in (its ciphertext, then its tag) */
            const size_t b1 = (size_t)ns * sz + SKV_REC_TRAILER, q = (b1 + SKV_SEAL_SEGS - 1) /
                                                                     SKV_SEAL_SEGS;
            size_t first = 0;
            for (size_t k = 0, p = box1; k < SKV_SEAL_SEGS; k++) {
                const size_t a = k * q < b1 ? k * q : b1, m = a + q < b1 ? q : b1 - a;
                if (at < p + m + SKV_SEAL_TAG) {
                    first = a;
                    break;
                }
                p += m + SKV_SEAL_TAG;
            }
            cr_assert(zeroed > 0 || first >= (size_t)ns * sz,
                      "shape %zu: a refused part of streams zeroed (byte %zu)", s, at);
            v[at] ^= 0x20;
        }
        skv_free(head);
        free(streams);
        free(img);
        free(v);
        free(out);
    }
}
