/*
 * test_store_lossy.c - the opt-in lossy tier in the store: a profile with
 * `lossy` stores exactly until it has its lossy calibration (learned from
 * its stored sequences and its model), then codes new chunks lossy; a get
 * that does not ask for it is refused (SKV_ERR_LOSSY, saying why),
 * one that does gets the reconstruction with the exact window bit-exact;
 * the same bytes from a store on 1 and on 2 threads and after reopening;
 * compaction leaves the lossy records lossy; the exact trie and tenants
 * work as for exact records. On a seeded random model, and on
 * stories260K's KV when ../shared/models has it.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storetest.h"
#include "testutil.h"

#define LCHUNK 32
#define SINK 3
#define RECENT 8

static seqkv *lossy_store(const char *dir, const su_model *tm, int threads, int bits)
{
    seqkv_options o = SEQKV_OPTIONS_INIT;
    o.threads = threads;
    seqkv *db = open_store(dir, &o);
    seqkv_profile p = SEQKV_PROFILE_INIT;
    su_profile(tm, "p", LCHUNK, SEQKV_CTX, 1, &p);
    p.lossy = bits;
    p.lossy_sink = SINK;
    p.lossy_recent = RECENT;
    p.auto_calibrate = -1;
    cr_assert_eq(seqkv_profile_set(db, &p), 0, "%s", seqkv_error_detail());
    return db;
}

/* A get accepting lossy: the view's bytes (store layout) */
static uint8_t *get_lossy(seqkv *db, const char *tenant, const su_seq *s, size_t want)
{
    seqkv_view *v = NULL;
    size_t got = 0;
    cr_assert_eq(seqkv_get_view(db, tenant, "p", s->tok, s->n, &(seqkv_get_opts){.want = want, .flags = SEQKV_GET_LOSSY}, &v, &got),
                 0, "%s", seqkv_error_detail());
    cr_assert_eq(got, want);
    uint8_t *out = malloc(seqkv_view_bytes(v)), *o = out;
    for (size_t i = 0; i < seqkv_view_pieces(v); i++) {
        size_t len;
        const void *pc = seqkv_view_piece(v, i, &len);
        memcpy(o, pc, len);
        o += len;
    }
    seqkv_view_free(v);
    return out;
}

/* Positions of the put of s outside [SINK, n - RECENT) equal s's KV;
 * those inside differ somewhere; returns the relative error there. */
static double check_window(const su_model *tm, const su_seq *s, const uint8_t *got)
{
    const size_t n = s->n, row = tm->row;
    double e = 0.0, x2 = 0.0;
    int differs = 0;
    for (int l = 0; l < tm->L; l++)
        for (int kv = 0; kv < 2; kv++)
            for (size_t p = 0; p < n; p++) {
                const size_t off = (((size_t)l * 2 + (size_t)kv) * n + p) * row;
                if (p < SINK || p >= n - RECENT) {
                    cr_assert_arr_eq(got + off, s->kv + off, row, "window position %zu (layer %d, %s) exact", p,
                                     l, kv ? "V" : "K");
                    continue;
                }
                differs |= memcmp(got + off, s->kv + off, row) != 0;
                for (size_t i = 0; i < tm->C; i++) {
                    const float a = skv_bf16_to_f32(skv_load16_le(s->kv + off + 2 * i));
                    const float b = skv_bf16_to_f32(skv_load16_le(got + off + 2 * i));
                    e += (double)(a - b) * (a - b);
                    x2 += (double)a * a;
                }
            }
    cr_assert(differs, "the lossy positions are lossy");
    return sqrt(e / x2);
}

static void lossy_case(const su_model *tm, const char *tmp, const char *what, size_t len)
{
    char d1[4200], d2[4200];
    snprintf(d1, sizeof d1, "%s/%s-1", tmp, what);
    snprintf(d2, sizeof d2, "%s/%s-2", tmp, what);
    seqkv *a = lossy_store(d1, tm, 1, 3), *b = lossy_store(d2, tm, 2, 3);
    /* before its calibration, a lossy profile stores exactly */
    su_seq cal[6];
    for (int i = 0; i < 6; i++) {
        su_seq_make(tm, NULL, 0, len, 100 + (uint64_t)i, &cal[i]);
        put(a, "cal", "p", &cal[i], -1);
        put(b, "cal", "p", &cal[i], -1);
    }
    assert_whole(a, "cal", "p", tm, &cal[0], "exact before the lossy calibration");
    cr_assert_eq(stats(a, NULL).lossy_tokens, 0);
    cr_assert_eq(seqkv_lossy_calibrate(a, "p", 0), 0, "%s", seqkv_error_detail());
    cr_assert_eq(seqkv_lossy_calibrate(b, "p", 0), 0, "%s", seqkv_error_detail());
    cr_assert_eq(seqkv_lossy_calibrate(a, "p", 0), SKV_ERR_ARG, "learned once");
    seqkv_profile pa = SEQKV_PROFILE_INIT, pb = SEQKV_PROFILE_INIT;
    cr_assert_eq(seqkv_profile_get(a, "p", &pa), 0);
    cr_assert_eq(seqkv_profile_get(b, "p", &pb), 0);
    cr_assert(pa.has_lossy && pb.has_lossy);
    cr_assert_arr_eq(pa.lossy_id, pb.lossy_id, 16, "the same lossy calibration on 1 and 2 threads");

    su_seq s, u;
    su_seq_make(tm, NULL, 0, len, 500, &s);
    seqkv_put_result r = put(a, "t", "p", &s, -1);
    put(b, "t", "p", &s, -1);
    cr_assert_eq(r.new_tokens, len);
    const seqkv_stats st = stats(a, "t");
    cr_assert_gt(st.lossy_tokens, 0, "new chunks are lossy");
    /* (chunks of 32, the window, record heads and a calibration of six
     * sequences: well above q3's 3 bits, well below bf16's 16) */
    cr_assert_lt(st.lossy_stored, st.lossy_raw / 2, "q3 stores less than half of bf16 (%llu of %llu)",
                 (unsigned long long)st.lossy_stored, (unsigned long long)st.lossy_raw);
    /* the exact trie: the whole prompt is cached, for this tenant only */
    cr_assert_eq(lookup(a, "t", "p", s.tok, s.n), s.n);
    cr_assert_lt(lookup(a, "cal", "p", s.tok, s.n), s.n, "another tenant has none of it");
    seqkv_put_result again = put(a, "t", "p", &s, -1);
    cr_assert_eq(again.cached_tokens, s.n, "a lossy prefix is cached like an exact one");
    cr_assert_eq(again.new_tokens, 0);

    /* without the flag: refused, saying why */
    uint8_t *buf = malloc(s.kv_len);
    size_t got = 7;
    cr_assert_eq(seqkv_get(a, "t", "p", s.tok, s.n, &(seqkv_get_opts){.want = s.n}, buf, s.kv_len, &got), SKV_ERR_LOSSY);
    cr_assert(strstr(seqkv_error_detail(), "lossy"), "the refusal says why: %s", seqkv_error_detail());
    seqkv_view *v = NULL;
    cr_assert_eq(seqkv_get_view(a, "t", "p", s.tok, s.n, NULL, &v, &got), SKV_ERR_LOSSY);
    cr_assert_null(v);
    layer_acc acc = {tm, s.n, malloc(s.kv_len), calloc((size_t)tm->L * s.n, 1), 0, 0};
    cr_assert_eq(seqkv_get(a, "t", "p", s.tok, s.n, &(seqkv_get_opts){.want = s.n, .on_layer = on_layer, .ctx = &acc}, NULL, 0, &got), SKV_ERR_LOSSY);
    free(acc.out), free(acc.seen);
    /* an exact prefix (before the calibration) needs no flag */
    assert_whole(a, "cal", "p", tm, &cal[1], "exact records stay exact");

    /* with it: the window bit-exact, the rest close; the same bytes from
     * the other store, after a reopen, and after compaction */
    uint8_t *g1 = get_lossy(a, "t", &s, s.n), *g2 = get_lossy(b, "t", &s, s.n);
    cr_assert_arr_eq(g1, g2, s.kv_len, "the same reconstruction on 1 and 2 threads");
    const double rel = check_window(tm, &s, g1);
    cr_log_info("%s: q3 relative error %.4f, %.2f bits a lossy scalar", what, rel,
                8.0 * (double)st.lossy_stored / ((double)st.lossy_tokens * tm->L * 2 * tm->C));
    cr_assert_lt(rel, 0.6, "%s: q3 relative error %.3f", what, rel);
    /* a shorter prefix is the same bytes */
    const size_t half = s.n / 2;
    uint8_t *gh = get_lossy(a, "t", &s, half);
    for (int l = 0; l < tm->L; l++)
        for (int kv = 0; kv < 2; kv++)
            cr_assert_arr_eq(gh + ((size_t)l * 2 + (size_t)kv) * half * tm->row,
                             g1 + ((size_t)l * 2 + (size_t)kv) * s.n * tm->row, half * tm->row);
    free(gh);
    /* a longer put on top: its new part is coded after the reconstruction,
     * and its get is again the reconstruction then its own */
    su_seq_make(tm, s.tok, s.n, s.n + 40, 501, &u);
    r = put(a, "t", "p", &u, -1);
    cr_assert_eq(r.cached_tokens, s.n);
    uint8_t *gu = get_lossy(a, "t", &u, u.n);
    for (int l = 0; l < tm->L; l++)
        for (int kv = 0; kv < 2; kv++)
            for (size_t p = 0; p < s.n; p++)
                cr_assert_arr_eq(gu + (((size_t)l * 2 + (size_t)kv) * u.n + p) * tm->row,
                                 g1 + (((size_t)l * 2 + (size_t)kv) * s.n + p) * tm->row, tm->row,
                                 "the cached part: the same reconstruction");
    const seqkv_stats before = stats(a, "t");
    seqkv_compact_stats cs;
    cr_assert_eq(seqkv_compact(a, NULL, NULL, NULL, &cs), 0, "%s", seqkv_error_detail());
    seqkv_close(a);
    a = open_store(d1, NULL);
    uint8_t *g3 = get_lossy(a, "t", &s, s.n);
    cr_assert_arr_eq(g1, g3, s.kv_len, "the same after compaction and a reopen");
    cr_assert_eq(seqkv_get(a, "t", "p", s.tok, s.n, &(seqkv_get_opts){.want = s.n}, buf, s.kv_len, &got), SKV_ERR_LOSSY,
                 "still refused without the flag");
    const seqkv_stats after = stats(a, "t");
    cr_assert_eq(after.lossy_tokens, before.lossy_tokens, "compaction leaves lossy records lossy");
    cr_assert_eq(after.lossy_stored, before.lossy_stored);
    free(g1), free(g2), free(g3), free(gu), free(buf);
    su_seq_free(&s), su_seq_free(&u);
    for (int i = 0; i < 6; i++)
        su_seq_free(&cal[i]);
    seqkv_close(a);
    seqkv_close(b);
}

Test(store_lossy, random_model, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    lossy_case(&tm, tmp, "random", 3 * LCHUNK + 5);
    su_model_free(&tm);
}

Test(store_lossy, stories260k, .timeout = 300)
{
    su_model tm;
    if (su_shared_model(&tm, "stories260K.bin", SEQKV_DT_BF16))
        cr_skip("../shared/models/stories260K.bin not present");
    lossy_case(&tm, tu_tmpdir(), "stories260K", 4 * LCHUNK + 9);
    su_model_free(&tm);
}

Test(store_lossy, settings_refused_without_a_model_or_out_of_range)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/db", tmp);
    seqkv *db = open_store(dir, NULL);
    seqkv_profile p = SEQKV_PROFILE_INIT;
    su_profile(&tm, "p", LCHUNK, SEQKV_CTX, 0, &p);
    p.lossy = 3;
    cr_assert_eq(seqkv_profile_set(db, &p), SKV_ERR_ARG, "no model");
    su_profile(&tm, "p", LCHUNK, SEQKV_CTX, 1, &p);
    p.lossy = 5;
    cr_assert_eq(seqkv_profile_set(db, &p), SKV_ERR_ARG, "q5");
    p.lossy = 2;
    p.lossy_sink = -2;
    cr_assert_eq(seqkv_profile_set(db, &p), SKV_ERR_ARG, "sink -2");
    p.lossy_sink = 0;
    cr_assert_eq(seqkv_profile_set(db, &p), 0, "%s", seqkv_error_detail());
    cr_assert_eq(seqkv_lossy_calibrate(db, "p", 0), SKV_ERR_ARG, "nothing stored to learn from");
    seqkv_close(db);
    su_model_free(&tm);
}

Test(store_lossy, self_calibration_learns_the_lossy_tier, .timeout = 120)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/db", tmp);
    seqkv *db = lossy_store(dir, &tm, 1, 4);
    seqkv_profile p = SEQKV_PROFILE_INIT;
    cr_assert_eq(seqkv_profile_get(db, "p", &p), 0);
    p.auto_calibrate = 200;
    cr_assert_eq(seqkv_profile_set(db, &p), 0, "%s", seqkv_error_detail());
    su_seq s[4];
    int learned = 0;
    su_seq_make(&tm, NULL, 0, 90, 700, &s[0]);
    put(db, "t", "p", &s[0], -1);
    cr_assert_eq(seqkv_auto_calibrate(db, NULL, &learned), 0, "%s", seqkv_error_detail());
    cr_assert_eq(learned, 0, "90 positions: not yet");
    for (int i = 1; i < 3; i++) {
        su_seq_make(&tm, NULL, 0, 90, 700 + (uint64_t)i, &s[i]);
        put(db, "t", "p", &s[i], -1);
    }
    cr_assert_eq(seqkv_auto_calibrate(db, NULL, &learned), 0, "%s", seqkv_error_detail());
    cr_assert_eq(learned, 2, "270 positions: the exact calibration and the lossy tier's");
    cr_assert_eq(seqkv_profile_get(db, "p", &p), 0);
    cr_assert(p.has_calib && p.has_lossy);
    su_seq_make(&tm, NULL, 0, 90, 710, &s[3]);
    put(db, "t", "p", &s[3], -1);
    cr_assert_gt(stats(db, "t").lossy_tokens, 0, "then new chunks are lossy");
    assert_whole(db, "t", "p", &tm, &s[0], "what came before stays exact");
    for (int i = 0; i < 4; i++)
        su_seq_free(&s[i]);
    seqkv_close(db);
    su_model_free(&tm);
}
