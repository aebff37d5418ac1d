/* Streamed views (seqkv_get_view with on_ready): the chunks missing from the hot
 * tier decode layer by layer, and each time the function hears that
 * layers [0, ready) are done, those layers' pieces already hold exactly
 * the KV put -- at every model-free level, with hot chunks before and
 * between the cold ones and records based on others; a model level
 * decodes whole (told once). The last layer is told only after every
 * chunk's checksum: damage is an error before it, never a complete
 * view. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "seqkv.h"
#include "storetest.h"
#include "storeutil.h"
#include "testutil.h"
#include "store_int.h"

/* What the function saw: each call's ready, each layer compared as told */
typedef struct {
    const su_model *tm;
    const uint8_t *exp; /* the expected KV of want tokens, store layout */
    size_t want;
    size_t ready[64];
    int calls, wrong;
} seen;

static void on_ready(void *ctx, const seqkv_view *v, size_t ready)
{
    seen *s = ctx;
    const size_t L = (size_t)s->tm->L, per = seqkv_view_pieces(v) / L;
    const size_t slab = 2 * s->want * s->tm->row; /* one layer: K then V */
    const size_t from = s->calls ? s->ready[s->calls - 1] : 0;
    if (s->calls < 64)
        s->ready[s->calls] = ready;
    s->calls++;
    if (ready <= from || ready > L) {
        s->wrong++;
        return;
    }
    for (size_t l = from; l < ready; l++) {
        size_t off = 0;
        for (size_t i = l * per; i < (l + 1) * per; i++) {
            size_t len;
            const uint8_t *p = seqkv_view_piece(v, i, &len);
            if (off + len > slab || memcmp(p, s->exp + l * slab + off, len) != 0)
                s->wrong++;
            off += len;
        }
        if (off != slab)
            s->wrong++;
    }
}

/* A streamed view of s's first want tokens: every call checked, the
 * calls returned */
static int stream_check(seqkv *db, const su_model *tm, const su_seq *s, size_t want,
                        const char *what)
{
    uint8_t *exp = malloc(su_kv_len(tm, want));
    su_expect(tm, s, want, exp);
    seen sn = {tm, exp, want, {0}, 0, 0};
    seqkv_view *v = NULL;
    size_t got = 0;
    int rc = seqkv_get_view(db, "t", "p", s->tok, s->n, &(seqkv_get_opts){.want = want, .on_ready = on_ready, .ctx = &sn}, &v, &got);
    cr_assert_eq(rc, 0, "%s: %s (%s)", what, seqkv_error_name(rc), seqkv_error_detail());
    cr_assert_eq(got, want);
    cr_assert_eq(sn.wrong, 0, "%s: every layer holds the KV put when it is told", what);
    cr_assert_gt(sn.calls, 0);
    cr_assert_eq(sn.ready[sn.calls - 1], (size_t)tm->L, "%s: the last call tells every layer", what);
    seqkv_view_free(v);
    free(exp);
    return sn.calls;
}

/* Chunks of 64: a (5 chunks) and b (a's first 150 tokens and 50 more: its
 * chunk 2 is a record based on a's, whose later positions it overwrites);
 * cold, then with chunk 0 hot, then a's first chunks hot and the rest
 * cold */
#define SCH 64
static void streamed_on(seqkv_level level, int with_model, int read_threads)
{
    const char *tmp = tu_tmpdir(), *dir = tu_path(tmp, "db");
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    cr_assert_geq(tm.L, 2, "a model of several layers");
    seqkv_options o = {.cache_bytes = 1 << 20, .read_threads = read_threads};
    seqkv *db = store_at_level(dir, &o, &tm, level, with_model, SCH);
    su_seq a, b;
    su_seq_make(&tm, NULL, 0, 300, 21, &a);
    su_seq_make(&tm, a.tok, 150, 200, 22, &b);
    put(db, "t", "p", &a, (int)level + 1);
    put(db, "t", "p", &b, (int)level + 1);
    uint8_t key[32];
    cr_assert_eq(su_chunk_find(dir, 2, b.tok + 2 * SCH, SCH, key), 0);
    size_t len;
    uint8_t *img = su_chunk_get(dir, key, &len);
    skv_rec r;
    cr_assert_eq(skv_rec_parse(img, len, &r), 0);
    cr_assert(r.flags & SKV_REC_BASE, "b's chunk 2 is based on a's");
    free(img);
    seqkv_close(db);
    const int layered = level != SEQKV_SPEC && level != SEQKV_FULL;
    const char *name = seqkv_level_name(level);

    db = open_store(dir, &o); /* an empty tier */
    int calls = stream_check(db, &tm, &b, b.n, name);
    cr_assert_eq(calls, layered ? tm.L : 1, "%s, cold: %d calls", name, calls);
    cr_assert_eq(stream_check(db, &tm, &b, b.n, name), 1, "%s, hot: told once", name);
    seqkv_close(db);

    db = open_store(dir, &o);
    seqkv_view *v;
    size_t got;
    cr_assert_eq(seqkv_get_view(db, "t", "p", b.tok, b.n, &(seqkv_get_opts){.want = SCH}, &v, &got), 0); /* chunk 0 */
    seqkv_view_free(v);
    calls = stream_check(db, &tm, &b, b.n, name);
    cr_assert_eq(calls, layered ? tm.L : 1, "%s, chunk 0 hot: %d calls", name, calls);
    seqkv_close(db);

    db = open_store(dir, &o);
    cr_assert_eq(stream_check(db, &tm, &a, 137, name), layered ? tm.L : 1, "%s: a part", name);
    /* chunks 0-2 of a hot, 3 and 4 cold after them */
    cr_assert_eq(stream_check(db, &tm, &a, a.n, name), layered ? tm.L : 1, "%s: the rest", name);
    /* seqkv_get over the entries the streamed views made */
    cr_assert_eq(su_get_check(db, "t", "p", &tm, &a, 0, NULL), 0);
    cr_assert_eq(su_get_check(db, "t", "p", &tm, &b, 0, NULL), 0);
    seqkv_close(db);
    su_seq_free(&a);
    su_seq_free(&b);
    su_model_free(&tm);
}

/* one read thread, and a pool of three (the chains of a layer group in
 * parallel) */
static void streamed(seqkv_level level, int with_model)
{
    streamed_on(level, with_model, 1);
    streamed_on(level, with_model, 3);
}

Test(stream, raw_decodes_layer_by_layer)
{
    streamed(SEQKV_RAW, 0);
}

Test(stream, stat_decodes_layer_by_layer, .timeout = 60)
{
    streamed(SEQKV_STAT, 0);
}

Test(stream, ctx_decodes_layer_by_layer, .timeout = 60)
{
    streamed(SEQKV_CTX, 0);
}

Test(stream, fast_decodes_layer_by_layer)
{
    streamed(SEQKV_FAST, 0);
}

Test(stream, spec_decodes_whole, .timeout = 120)
{
    streamed(SEQKV_SPEC, 1);
}

/* Near-duplicates of a sequence, coded against it (stories260K, where
 * they cluster): streamed members are exact */
Test(stream, centroid_members_stream_exactly, .timeout = 120)
{
    const char *tmp = tu_tmpdir(), *dir = tu_path(tmp, "db");
    su_model tm;
    if (su_shared_model(&tm, "stories260K.bin", SEQKV_DT_BF16))
        cr_skip("../shared/models/stories260K.bin not present");
    seqkv_options o = {.cache_bytes = 0};
    seqkv *db = open_store(dir, &o);
    add_profile(db, &tm, "p", CHUNK, SEQKV_RAW, 1);
    for (int i = 0; i < 4; i++) {
        su_seq c;
        int32_t first = (int32_t)(20 + i);
        su_seq_make(&tm, &first, 1, 64, 60 + (uint64_t)i, &c);
        put(db, "cal", "p", &c, 0);
        su_seq_free(&c);
    }
    cr_assert_eq(seqkv_calibrate(db, "p", 0), 0, "%s", seqkv_error_detail());
    su_seq base, mem[3];
    su_seq_make(&tm, NULL, 0, 80, 123, &base);
    put(db, "t", "p", &base, SEQKV_CTX + 1);
    size_t cent = 0;
    for (int i = 0; i < 3; i++) {
        int32_t p[80];
        memcpy(p, base.tok, sizeof p);
        p[14 + i] = (base.tok[14 + i] + 1 + i) % tm.c->vocab_size;
        su_seq_make(&tm, p, base.n, base.n, 0, &mem[i]);
        cent += put(db, "t", "p", &mem[i], SEQKV_CTX + 1).centroid_tokens;
    }
    cr_assert_gt(cent, 0, "members coded against the centroid");
    for (int i = 0; i < 3; i++) { /* (groups of layers as the readers' pool has threads) */
        int calls = stream_check(db, &tm, &mem[i], mem[i].n, "member");
        cr_assert(calls > 1 && calls <= tm.L, "%d calls", calls);
    }
    cr_assert_gt(stream_check(db, &tm, &base, base.n, "centroid"), 1);
    seqkv_close(db);
    su_seq_free(&base);
    for (int i = 0; i < 3; i++)
        su_seq_free(&mem[i]);
    su_model_free(&tm);
}

/* ctx record of a's chunk 2 damaged: a stream byte under a valid trailer
 * (the decoded checksum catches it) and one the trailer catches. The view
 * fails; the last layer is never told. */
static int told_all;
static void count_ready(void *ctx, const seqkv_view *v, size_t ready)
{
    (void)v;
    *(size_t *)ctx = ready;
    told_all |= ready == 2;
}

/* A damaged record of the view's third chunk, its trailer right or not:
 * the view fails before its last layer (a raw record, placed as it opens
 * -- a sealed one straight from its boxes -- before its first) */
static void damage_case(seqkv_level level, int threads)
{
    const char *tmp = tu_tmpdir(), *dir = tu_path(tmp, "db");
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    cr_assert_eq(tm.L, 2);
    seqkv_options o = {.cache_bytes = 0, .read_threads = threads};
    seqkv *db = store_at_level(dir, &o, &tm, level, 0, CHUNK);
    su_seq a;
    su_seq_make(&tm, NULL, 0, 60, 21, &a);
    put(db, "t", "p", &a, (int)level + 1);
    seqkv_close(db);
    uint8_t key[32];
    cr_assert_eq(su_chunk_find(dir, 2, a.tok + 2 * CHUNK, CHUNK, key), 0);
    size_t len;
    uint8_t *orig = su_chunk_get(dir, key, &len), *bad = malloc(len);
    for (int trailer = 0; trailer < 2; trailer++) {
        for (size_t off = len - 100; off < len - 16; off += 7) {
            memcpy(bad, orig, len);
            bad[off] ^= 0x04;
            if (!trailer)
                skv_rec_seal(bad, len);
            su_chunk_put(dir, key, bad, len);
            db = open_store(dir, &o);
            size_t ready = 0, got = 0;
            told_all = 0;
            seqkv_view *v = NULL;
            int rc = seqkv_get_view(db, "t", "p", a.tok, a.n, &(seqkv_get_opts){.want = a.n, .on_ready = count_ready, .ctx = &ready}, &v,
                                           &got);
            cr_assert_eq(rc, SKV_ERR_CORRUPT, "byte %zu%s: %s (%s)", off,
                         trailer ? "" : " under a valid trailer", seqkv_error_name(rc),
                         seqkv_error_detail());
            cr_assert_eq(told_all, 0, "byte %zu: the last layer is never told", off);
            if (trailer || level == SEQKV_RAW)
                cr_assert_eq(ready, 0, "the record fails before any layer is told");
            cr_assert_eq(v != NULL, ready > 0, "the view comes back when layers were told");
            seqkv_view_free(v);
            seqkv_close(db);
        }
    }
    su_chunk_put(dir, key, orig, len);
    db = open_store(dir, &o);
    cr_assert_eq(stream_check(db, &tm, &a, a.n, "restored"), tm.L);
    seqkv_close(db);
    free(orig);
    free(bad);
    su_seq_free(&a);
    su_model_free(&tm);
}

Test(stream, damage_fails_the_view_before_its_last_layer, .timeout = 60)
{
    damage_case(SEQKV_CTX, 1);
}

Test(stream, damage_to_a_raw_record_fails_the_view_before_any_layer, .timeout = 60)
{
    damage_case(SEQKV_RAW, 1);
    damage_case(SEQKV_RAW, 2);
}
