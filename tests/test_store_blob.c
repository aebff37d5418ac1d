/* The blob namespace (seqkv.h, "the blob namespace"): exact values, deduplication by
 * content within a tenant, values with a KV layout coded as KV
 * (model KV in LMCache's KV_2LTD layout, either order of the two keys),
 * NX/XX/KEEPTTL, expiry and the sweep, SCAN's cursor, tenants kept apart,
 * budgets, FLUSHDB, reopening, and damaged values refused. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "blob.h"
#include "seqkv.h"
#include "storetest.h"
#include "storeutil.h"
#include "testutil.h"

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void set1(seqkv *db, const char *t, const char *k, const void *v, size_t n, unsigned fl,
                 int64_t at, int want)
{
    seqkv_blob_item it = {(const uint8_t *)k, strlen(k), v, n, NULL, 0};
    int w = -1;
    cr_assert_eq(seqkv_blob_set(db, t, &it, 1, fl, at, &w), 0, "set %s: %s", k, seqkv_error_detail());
    cr_assert_eq(w, want, "set %s written %d, expected %d", k, w, want);
}

typedef struct {
    uint8_t *buf[8];
    size_t len[8];
    int found[8];
} got_t;

static void *got_fn(void *ctx, size_t i, int found, size_t len)
{
    got_t *g = ctx;
    g->found[i] = found;
    g->len[i] = len;
    if (!found)
        return NULL;
    g->buf[i] = malloc(len ? len : 1);
    return g->buf[i];
}

/* 1 and the value in *out (malloc'd), or 0 when absent */
static int get1(seqkv *db, const char *t, const char *k, uint8_t **out, size_t *len)
{
    got_t g = {0};
    const uint8_t *keys[1] = {(const uint8_t *)k};
    size_t kl[1] = {strlen(k)};
    cr_assert_eq(seqkv_blob_get(db, t, 1, keys, kl, got_fn, &g), 0, "get %s: %s", k,
                 seqkv_error_detail());
    *out = g.buf[0];
    *len = g.len[0];
    return g.found[0];
}

static void assert_value(seqkv *db, const char *t, const char *k, const void *v, size_t n)
{
    uint8_t *got;
    size_t len;
    cr_assert(get1(db, t, k, &got, &len), "%s absent", k);
    cr_assert_eq(len, n, "%s: %zu bytes, expected %zu", k, len, n);
    cr_assert(memcmp(got, v, n) == 0, "%s: bytes differ", k);
    free(got);
}

static void assert_absent(seqkv *db, const char *t, const char *k)
{
    uint8_t *got = NULL;
    size_t len;
    cr_assert_not(get1(db, t, k, &got, &len), "%s present", k);
}

static seqkv_blob_stats bstats(seqkv *db, const char *t)
{
    seqkv_blob_stats st;
    cr_assert_eq(seqkv_blob_stat_all(db, t, &st), 0);
    return st;
}

/* LMCache's RemoteMetadata of a KV_2LTD chunk */
/* A model's KV of n tokens in LMCache's KV_2LTD layout [2][L][T][C] */
static uint8_t *kv_2ltd(const su_model *tm, const su_seq *s, size_t n, size_t *len)
{
    const size_t L = (size_t)tm->L, row = tm->row;
    uint8_t *st = malloc(su_kv_len(tm, n)), *out = malloc(2 * L * n * row);
    su_expect(tm, s, n, st); /* [layer][k, v][token][C] */
    for (size_t kv = 0; kv < 2; kv++)
        for (size_t l = 0; l < L; l++)
            memcpy(out + ((kv * L + l) * n) * row, st + ((l * 2 + kv) * n) * row, n * row);
    free(st);
    *len = 2 * L * n * row;
    return out;
}

Test(blob, values_are_exact_and_stored_once_per_tenant, .timeout = 60)
{
    const char *dir = tu_path(tu_tmpdir(), "db");
    seqkv *db = open_store(dir, NULL);
    uint8_t big[5000];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (uint8_t)(i * 7 / 13); /* compressible */
    set1(db, "a", "k1", big, sizeof big, 0, 0, 1);
    set1(db, "a", "k2", big, sizeof big, 0, 0, 1);
    set1(db, "a", "empty", "", 0, 0, 0, 1);
    assert_value(db, "a", "k1", big, sizeof big);
    assert_value(db, "a", "k2", big, sizeof big);
    assert_value(db, "a", "empty", "", 0);
    seqkv_blob_stats st = bstats(db, "a");
    cr_assert_eq(st.keys, 3);
    cr_assert_eq(st.values, 2, "one value for two keys holding the same bytes: %llu",
                 (unsigned long long)st.values);
    cr_assert_eq(st.raw_bytes, 2 * sizeof big);
    cr_assert_eq(st.value_bytes, sizeof big);
    cr_assert_lt(st.stored_bytes, sizeof big / 2, "zstd should shrink it: %llu",
                 (unsigned long long)st.stored_bytes);
    /* another tenant: its own copy, and none of a's keys */
    set1(db, "b", "k1", big, sizeof big, 0, 0, 1);
    cr_assert_eq(bstats(db, "b").values, 1);
    assert_absent(db, "b", "k2");
    assert_absent(db, "nobody", "k1");
    /* overwrite, then delete: the value goes with its last key */
    set1(db, "a", "k1", "short", 5, 0, 0, 1);
    assert_value(db, "a", "k1", "short", 5);
    assert_value(db, "a", "k2", big, sizeof big);
    const uint8_t *keys[3] = {(const uint8_t *)"k2", (const uint8_t *)"nope",
                              (const uint8_t *)"k2"};
    size_t kl[3] = {2, 4, 2}, n = 0;
    cr_assert_eq(seqkv_blob_exists(db, "a", 3, keys, kl, &n), 0);
    cr_assert_eq(n, 2, "EXISTS counts a key named twice twice");
    cr_assert_eq(seqkv_blob_del(db, "a", 3, keys, kl, &n), 0);
    cr_assert_eq(n, 1);
    st = bstats(db, "a");
    cr_assert_eq(st.keys, 2);
    cr_assert_eq(st.values, 2);
    cr_assert_eq(st.value_bytes, 5);
    seqkv_close(db);
    /* reopened: the same counts, the same bytes */
    db = open_store(dir, NULL);
    seqkv_blob_stats st2 = bstats(db, "a");
    cr_assert(memcmp(&st, &st2, sizeof st) == 0, "counts differ after reopening");
    assert_value(db, "a", "k1", "short", 5);
    assert_value(db, "b", "k1", big, sizeof big);
    seqkv_close(db);
}

Test(blob, nx_xx_and_keepttl, .timeout = 60)
{
    seqkv *db = open_store(tu_path(tu_tmpdir(), "db"), NULL);
    set1(db, "a", "k", "1", 1, SEQKV_BLOB_XX, 0, 0);
    assert_absent(db, "a", "k");
    set1(db, "a", "k", "1", 1, SEQKV_BLOB_NX, 0, 1);
    set1(db, "a", "k", "2", 1, SEQKV_BLOB_NX, 0, 0);
    assert_value(db, "a", "k", "1", 1);
    const int64_t later = now_ms() + 3600 * 1000;
    set1(db, "a", "k", "3", 1, SEQKV_BLOB_XX, later, 1);
    seqkv_blob_info in;
    cr_assert_eq(seqkv_blob_stat(db, "a", (const uint8_t *)"k", 1, &in), 0);
    cr_assert(in.found && in.len == 1 && in.expire_at == later);
    set1(db, "a", "k", "4", 1, SEQKV_BLOB_KEEPTTL, 0, 1);
    cr_assert_eq(seqkv_blob_stat(db, "a", (const uint8_t *)"k", 1, &in), 0);
    cr_assert_eq(in.expire_at, later, "KEEPTTL keeps the expiry");
    set1(db, "a", "k", "5", 1, 0, 0, 1);
    cr_assert_eq(seqkv_blob_stat(db, "a", (const uint8_t *)"k", 1, &in), 0);
    cr_assert_eq(in.expire_at, 0, "a plain SET clears the expiry");
    /* MSET-style: NX over several keys is all or nothing */
    seqkv_blob_item it[2] = {{(const uint8_t *)"x", 1, (const uint8_t *)"1", 1, NULL, 0},
                             {(const uint8_t *)"k", 1, (const uint8_t *)"1", 1, NULL, 0}};
    int w;
    cr_assert_eq(seqkv_blob_set(db, "a", it, 2, SEQKV_BLOB_NX, 0, &w), 0);
    cr_assert_eq(w, 0);
    assert_absent(db, "a", "x");
    /* keys of the wrong size */
    seqkv_blob_item bad = {(const uint8_t *)"", 0, (const uint8_t *)"1", 1, NULL, 0};
    cr_assert_eq(seqkv_blob_set(db, "a", &bad, 1, 0, 0, &w), SKV_ERR_ARG);
    seqkv_close(db);
}

Test(blob, expiry_and_the_sweep, .timeout = 60)
{
    seqkv *db = open_store(tu_path(tu_tmpdir(), "db"), NULL);
    const int64_t now = now_ms();
    set1(db, "a", "soon", "v", 1, 0, now + 150, 1);
    set1(db, "a", "later", "v", 1, 0, now + 3600 * 1000, 1);
    set1(db, "a", "never", "w", 1, 0, 0, 1);
    int ch;
    cr_assert_eq(seqkv_blob_expire(db, "a", (const uint8_t *)"never", 5, now + 1000,
                                   SEQKV_EXPIRE_XX, &ch), 0);
    cr_assert_eq(ch, 0, "XX: it has no expiry");
    cr_assert_eq(seqkv_blob_expire(db, "a", (const uint8_t *)"later", 5, now + 1000,
                                   SEQKV_EXPIRE_GT, &ch), 0);
    cr_assert_eq(ch, 0, "GT: earlier than its expiry");
    cr_assert_eq(seqkv_blob_expire(db, "a", (const uint8_t *)"later", 5, -1, 0, &ch), 0);
    cr_assert_eq(ch, 1, "PERSIST");
    usleep(300 * 1000);
    assert_absent(db, "a", "soon");
    assert_value(db, "a", "later", "v", 1);
    cr_assert_eq(bstats(db, "a").keys, 3, "not removed yet");
    size_t removed = 0;
    cr_assert_eq(seqkv_blob_sweep(db, 100, &removed), 0);
    cr_assert_eq(removed, 1);
    seqkv_blob_stats st = bstats(db, "a");
    cr_assert_eq(st.keys, 2);
    cr_assert_eq(st.expired, 1);
    /* an expiry in the past deletes */
    cr_assert_eq(seqkv_blob_expire(db, "a", (const uint8_t *)"never", 5, 1, 0, &ch), 0);
    cr_assert_eq(ch, 1);
    assert_absent(db, "a", "never");
    seqkv_close(db);
}

typedef struct {
    int *seen;
    int nkeys;
} scan_t;

static int scan_fn(void *ctx, const uint8_t *key, size_t len)
{
    scan_t *s = ctx;
    char b[32];
    cr_assert_lt(len, sizeof b);
    memcpy(b, key, len);
    b[len] = 0;
    int i = atoi(b + 4);
    cr_assert(i >= 0 && i < s->nkeys, "scan returned %s", b);
    s->seen[i]++;
    return 0;
}

Test(blob, scan_returns_every_key_once_while_others_come_and_go, .timeout = 60)
{
    seqkv *db = open_store(tu_path(tu_tmpdir(), "db"), NULL);
    enum { N = 600 };
    char k[32];
    for (int i = 0; i < N; i++) {
        snprintf(k, sizeof k, "key-%d", i);
        set1(db, "a", k, k, strlen(k), 0, 0, 1);
    }
    set1(db, "b", "key-1", "x", 1, 0, 0, 1);
    int seen[N + 100] = {0};
    scan_t s = {seen, N + 100};
    uint64_t cur = 0;
    int rounds = 0, added = 0;
    do {
        cr_assert_eq(seqkv_blob_scan(db, "a", cur, 7, scan_fn, &s, &cur), 0);
        /* keys added and deleted during the iteration */
        if (added < 100) {
            snprintf(k, sizeof k, "key-%d", N + added++);
            set1(db, "a", k, "n", 1, 0, 0, 1);
        }
        rounds++;
    } while (cur && rounds < 10000);
    cr_assert_eq(cur, 0);
    cr_assert_gt(rounds, N / 7 - 1);
    for (int i = 0; i < N; i++)
        cr_assert_eq(seen[i], 1, "key-%d returned %d times", i, seen[i]);
    for (int i = N; i < N + 100; i++)
        cr_assert_leq(seen[i], 1);
    seqkv_close(db);
}

/* A value set with its KV layout is coded as KV (the fast level) and
 * stays exact; one whose layout comes later is kept as it is until
 * seqkv_blob_relayout codes it (LMCache's order: kv_bytes, then metadata,
 * paired by the server: lmcache_redis_test.py); a layout that does not
 * describe the value leaves it bytes */
static void layout_given(int later)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    int real = !su_shared_model(&tm, "stories260K.bin", SEQKV_DT_BF16);
    if (!real)
        su_random_model(&tm, tmp, SEQKV_DT_BF16);
    else
        cr_log_info("stories260K KV");
    su_seq s;
    su_seq_make(&tm, NULL, 0, 256, 7, &s);
    size_t len;
    uint8_t *kv = kv_2ltd(&tm, &s, 256, &len);
    const seqkv_blob_layout lay = {SEQKV_DT_BF16, 2 * (uint32_t)tm.L, 256, (uint32_t)tm.C};
    seqkv *db = open_store(tu_path(tmp, "db"), NULL);
    const char *key = "stories@1@0@5f3akv_bytes";
    seqkv_blob_item it = {(const uint8_t *)key, strlen(key), kv, len, later ? NULL : &lay, later};
    int w = 0, recoded = -1;
    cr_assert_eq(seqkv_blob_set(db, "lm", &it, 1, 0, 0, &w), 0, "%s", seqkv_error_detail());
    if (later) {
        seqkv_blob_stats st0 = bstats(db, "lm");
        cr_assert_eq(st0.kv_values, 0);
        cr_assert_geq(st0.stored_bytes, len, "a value awaiting its layout is kept as it is");
        cr_assert_eq(seqkv_blob_relayout(db, "lm", it.key, it.key_len, &lay, &recoded), 0, "%s",
                     seqkv_error_detail());
        cr_assert_eq(recoded, 1);
        cr_assert_eq(seqkv_blob_relayout(db, "lm", it.key, it.key_len, &lay, &recoded), 0);
        cr_assert_eq(recoded, 0, "coded already: nothing to do");
    }
    assert_value(db, "lm", key, kv, len);
    seqkv_blob_stats st = bstats(db, "lm");
    cr_assert_eq(st.kv_values, 1, "coded as KV");
    cr_assert_lt(st.stored_bytes, len * 95 / 100, "KV coded: %llu of %zu bytes",
                 (unsigned long long)st.stored_bytes, len);
    cr_log_info("KV_2LTD chunk of %zu bytes stored in %llu (layout %s)", len,
                (unsigned long long)st.stored_bytes, later ? "later" : "with the value");
    /* a layout that does not describe the value (another length, a dtype
     * the fast level does not code) leaves it bytes, and is no error */
    const seqkv_blob_layout off = {SEQKV_DT_BF16, 2 * (uint32_t)tm.L, 255, (uint32_t)tm.C},
                            f32 = {SEQKV_DT_F32, 2 * (uint32_t)tm.L, 128, (uint32_t)tm.C};
    kv[0] ^= 1; /* another value */
    seqkv_blob_item i2 = {(const uint8_t *)"other", 5, kv, len, &off, 0};
    cr_assert_eq(seqkv_blob_set(db, "lm", &i2, 1, 0, 0, &w), 0);
    cr_assert_eq(seqkv_blob_relayout(db, "lm", i2.key, i2.key_len, &f32, &recoded), 0);
    cr_assert_eq(recoded, 0);
    cr_assert_eq(seqkv_blob_relayout(db, "nobody", i2.key, i2.key_len, &lay, &recoded), 0,
                 "an unknown tenant has no such key");
    cr_assert_eq(recoded, 0);
    assert_value(db, "lm", "other", kv, len);
    cr_assert_eq(bstats(db, "lm").kv_values, 1);
    seqkv_close(db);
    free(kv);
    su_seq_free(&s);
    su_model_free(&tm);
}

Test(blob, a_value_set_with_its_layout_is_coded_as_kv, .timeout = 120)
{
    layout_given(0);
}

Test(blob, a_layout_given_later_codes_the_value_as_kv, .timeout = 120)
{
    layout_given(1);
}

Test(blob, a_budget_removes_the_oldest_blobs, .timeout = 60)
{
    seqkv *db = open_store(tu_path(tu_tmpdir(), "db"), NULL);
    seqkv_tenant_conf tc = SEQKV_TENANT_CONF_INIT;
    tc.budget = 40000;
    cr_assert_eq(seqkv_tenant_set(db, "a", &tc), 0);
    uint8_t v[10000];
    char k[16];
    for (int i = 0; i < 8; i++) {
        tu_fill_bytes(v, sizeof v, (uint32_t)i + 1); /* incompressible */
        snprintf(k, sizeof k, "k%d", i);
        set1(db, "a", k, v, sizeof v, 0, 0, 1);
        usleep(2000); /* distinct set times */
    }
    seqkv_blob_stats st = bstats(db, "a");
    cr_assert_leq(st.stored_bytes, 40000);
    cr_assert_gt(st.evicted, 0);
    assert_absent(db, "a", "k0");
    tu_fill_bytes(v, sizeof v, 8);
    assert_value(db, "a", "k7", v, sizeof v);
    /* a value past the budget on its own */
    uint8_t *huge = malloc(50000);
    tu_fill_bytes(huge, 50000, 99);
    seqkv_blob_item it = {(const uint8_t *)"huge", 4, huge, 50000, NULL, 0};
    int w;
    cr_assert_eq(seqkv_blob_set(db, "a", &it, 1, 0, 0, &w), SKV_ERR_TOO_LARGE);
    free(huge);
    seqkv_close(db);
}

Test(blob, flush_deletes_only_the_tenants_keys, .timeout = 60)
{
    seqkv *db = open_store(tu_path(tu_tmpdir(), "db"), NULL);
    char k[16];
    for (int i = 0; i < 3000; i++) {
        snprintf(k, sizeof k, "k%d", i);
        set1(db, "a", k, k, strlen(k), 0, 0, 1);
    }
    set1(db, "b", "k1", "b", 1, 0, 0, 1);
    uint64_t n = 0;
    cr_assert_eq(seqkv_blob_flush(db, "a", &n), 0);
    cr_assert_eq(n, 3000);
    seqkv_blob_stats st = bstats(db, "a");
    cr_assert(st.keys == 0 && st.values == 0 && st.stored_bytes == 0);
    assert_value(db, "b", "k1", "b", 1);
    seqkv_close(db);
}

Test(blob, damaged_values_are_refused, .timeout = 60)
{
    uint8_t v[4096];
    for (size_t i = 0; i < sizeof v; i++)
        v[i] = (uint8_t)(i % 17);
    seqkv_blob_layout lay = {SEQKV_DT_BF16, 2, 32, 32};
    for (int enc = 0; enc < 3; enc++) {
        uint8_t *img;
        size_t len;
        cr_assert_eq(skv_blob_encode(v, enc == 0 ? 40 : sizeof v, enc == 2 ? &lay : NULL, 1, &img,
                                     &len),
                     0);
        skv_blob_hdr h;
        cr_assert_eq(skv_blob_parse(img, len, &h), 0);
        cr_assert_eq(h.enc, enc, "encoding %d chosen, %d expected", h.enc, enc);
        uint8_t out[4096];
        cr_assert_eq(skv_blob_decode(img, len, out, h.raw_len), 0);
        cr_assert(memcmp(out, v, h.raw_len) == 0);
        for (size_t at = 0; at < len; at += 1 + len / 97) {
            img[at] ^= 0x10;
            /* refused, or (damage the format does not read, e.g. a zstd
             * frame's flags) decoded exactly: never other bytes */
            memset(out, 0xee, sizeof out);
            int rc = skv_blob_decode(img, len, out, h.raw_len);
            cr_assert(rc == SKV_ERR_CORRUPT || rc == SKV_ERR_VERSION || rc == SKV_ERR_ARG ||
                          (rc == 0 && memcmp(out, v, h.raw_len) == 0),
                      "damage at %zu of %zu (encoding %d) decoded to other bytes (%d)", at, len,
                      enc, rc);
            img[at] ^= 0x10;
        }
        free(img);
    }
}

/* seqkv_blob_get_view: the value's exact bytes as one piece, straight from
 * the hot tier when it holds it; max_cold leaves a larger value it does not
 * hold undecoded; absent and empty values have no view */
Test(blob, a_value_as_a_view, .timeout = 60)
{
    seqkv_options o = {.cache_bytes = 64u << 20};
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", tu_path(tu_tmpdir(), "db"));
    seqkv *db = open_store(dir, &o);
    static uint8_t text[300000], noise[70000];
    for (size_t i = 0; i < sizeof text; i++)
        text[i] = (uint8_t)("seqkv blob view "[i % 16]);
    uint64_t x = 7;
    for (size_t i = 0; i < sizeof noise; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        noise[i] = (uint8_t)(x >> 56);
    }
    const struct {
        const char *k;
        const uint8_t *v;
        size_t n;
    } kv[] = {{"text", text, sizeof text}, {"noise", noise, sizeof noise}, {"empty", text, 0}};
    for (size_t i = 0; i < 3; i++) {
        seqkv_blob_item it = {(const uint8_t *)kv[i].k, strlen(kv[i].k), kv[i].v, kv[i].n, NULL, 0};
        cr_assert_eq(seqkv_blob_set(db, "t", &it, 1, 0, 0, NULL), 0, "%s", seqkv_error_detail());
    }
    seqkv_close(db);
    db = open_store(dir, &o); /* a cold tier */
    for (size_t i = 0; i < 3; i++) {
        const uint8_t *k = (const uint8_t *)kv[i].k;
        seqkv_view *v = NULL;
        int found = -1;
        /* nothing decoded yet: max_cold 0 (or under the value) gives no view */
        cr_assert_eq(seqkv_blob_get_view(db, "t", k, strlen(kv[i].k), 0, &v, &found), 0);
        cr_assert(found == 1 && v == NULL, "%s: hot only, cold", kv[i].k);
        if (kv[i].n > 1) {
            cr_assert_eq(seqkv_blob_get_view(db, "t", k, strlen(kv[i].k), kv[i].n - 1, &v, &found), 0);
            cr_assert(found == 1 && v == NULL, "%s: one byte over max_cold", kv[i].k);
        }
        cr_assert_eq(seqkv_blob_get_view(db, "t", k, strlen(kv[i].k), SIZE_MAX, &v, &found), 0);
        cr_assert_eq(found, 1);
        if (kv[i].n == 0) {
            cr_assert_null(v, "an empty value has no view");
            continue;
        }
        cr_assert_not_null(v);
        size_t len = 0;
        cr_assert_eq(seqkv_view_pieces(v), 1);
        const void *p = seqkv_view_piece(v, 0, &len);
        cr_assert(len == kv[i].n && memcmp(p, kv[i].v, len) == 0, "%s: the exact bytes", kv[i].k);
        seqkv_view_free(v);
        /* decoded: a coded value is in the tier now, a raw one never is */
        cr_assert_eq(seqkv_blob_get_view(db, "t", k, strlen(kv[i].k), 0, &v, &found), 0);
        if (kv[i].v == text) {
            cr_assert_not_null(v, "the coded value is hot after its first get");
            p = seqkv_view_piece(v, 0, &len);
            cr_assert(len == kv[i].n && memcmp(p, kv[i].v, len) == 0);
            /* the view outlives the key */
            size_t del = 0;
            cr_assert_eq(seqkv_blob_del(db, "t", 1, &k, (size_t[]){strlen(kv[i].k)}, &del), 0);
            cr_assert_eq(del, 1);
            cr_assert_eq(memcmp(seqkv_view_piece(v, 0, &len), kv[i].v, len), 0);
            seqkv_view_free(v);
        }
    }
    seqkv_view *v = NULL;
    int found = -1;
    cr_assert_eq(seqkv_blob_get_view(db, "t", (const uint8_t *)"nope", 4, SIZE_MAX, &v, &found), 0);
    cr_assert(found == 0 && v == NULL);
    cr_assert_eq(seqkv_blob_get_view(db, "nobody", (const uint8_t *)"text", 4, SIZE_MAX, &v, &found), 0);
    cr_assert(found == 0 && v == NULL);
    seqkv_close(db);
}
