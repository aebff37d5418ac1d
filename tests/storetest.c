/* Criterion-side helpers of the store suites (test_store_*.c): see
 * storetest.h. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "seqkv.h"
#include "storetest.h"
#include "storeutil.h"

/* Stores are made with master keys derived from this seed, so that every
 * run is the same run (keys decide the order of the store's tables). */
uint64_t key_seed = 1;

uint64_t test_cache_bytes = 64 << 10;

seqkv *open_store(const char *dir, const seqkv_options *o)
{
    if (!o || !o->read_only)
        su_master_key(dir, key_seed);
    seqkv_options d = {0};
    if (o)
        d = *o;
    d.quiet = 1;
    /* SEQKV_TEST_FILE_MIN: the suites run again with every record of that
     * many bytes in a value file (tests/meson.build's _vfile runs) */
    const char *fm = getenv("SEQKV_TEST_FILE_MIN");
    if (!d.file_min && fm)
        d.file_min = strtoull(fm, NULL, 0);
    const char *env = getenv("SEQKV_TEST_CACHE");
    if (!d.cache_bytes && test_cache_bytes)
        d.cache_bytes = env ? strtoull(env, NULL, 0) : test_cache_bytes;
    if (!d.read_threads)
        d.read_threads = 2; /* gets decode over the readers' pool when it is free */
    seqkv *db = NULL;
    int rc = seqkv_open(dir, &d, &db);
    cr_assert_eq(rc, 0, "open %s: %d %s", dir, rc, seqkv_error_detail());
    cr_assert_not_null(db);
    return db;
}

void add_profile(seqkv *db, const su_model *tm, const char *name, int chunk,
                 seqkv_level level, int with_model)
{
    seqkv_profile p = SEQKV_PROFILE_INIT;
    su_profile(tm, name, chunk, level, with_model, &p);
    cr_assert_eq(seqkv_profile_set(db, &p), 0, "profile %s: %s", name, seqkv_error_detail());
    seqkv_profile q = SEQKV_PROFILE_INIT;
    cr_assert_eq(seqkv_profile_get(db, name, &q), 0);
    cr_assert_eq(q.chunk, chunk);
    cr_assert_eq(q.layers, tm->L);
}

seqkv_put_result put(seqkv *db, const char *tenant, const char *prof, const su_seq *s,
                     int level)
{
    seqkv_put_result r;
    seqkv_put_opts o = {.has_level = level > 0, .level = (seqkv_level)(level > 0 ? level - 1 : 0)};
    int rc = seqkv_put(db, tenant, prof, s->tok, s->n, s->kv, s->kv_len, &o, &r);
    cr_assert_eq(rc, 0, "put of %zu tokens: %d %s", s->n, rc, seqkv_error_detail());
    return r;
}

size_t lookup(seqkv *db, const char *tenant, const char *prof, const int32_t *tok, size_t n)
{
    size_t m = 12345;
    int rc = seqkv_lookup(db, tenant, prof, tok, n, &m);
    cr_assert_eq(rc, 0, "lookup: %d %s", rc, seqkv_error_detail());
    return m;
}

/* lookup == full length and get of every token bit-exact */
void assert_whole(seqkv *db, const char *tenant, const char *prof, const su_model *tm,
                  const su_seq *s, const char *what)
{
    cr_assert_eq(lookup(db, tenant, prof, s->tok, s->n), s->n, "%s: lookup", what);
    size_t got;
    int rc = su_get_check(db, tenant, prof, tm, s, s->n, &got);
    cr_assert_eq(rc, 0, "%s: get of %zu tokens: %d %s", what, s->n, rc, seqkv_error_detail());
    cr_assert_eq(su_get_check(db, tenant, prof, tm, s, 0, &got), 0, "%s: get of the longest", what);
    cr_assert_eq(got, s->n);
}

seqkv_stats stats(seqkv *db, const char *tenant)
{
    seqkv_stats st;
    int rc = seqkv_stat(db, tenant, &st);
    cr_assert_eq(rc, 0, "stat: %d %s", rc, seqkv_error_detail());
    return st;
}

/* A session: prefix[0..np) + one token that no other session of the set
 * has at that position (div), continued by sampling to n tokens. */
void session(const su_model *tm, const su_seq *prefix, size_t np, int32_t div, size_t n,
             uint64_t seed, su_seq *s)
{
    int32_t p[512];
    memcpy(p, prefix->tok, np * sizeof(int32_t));
    p[np] = div;
    su_seq_make(tm, p, np + 1, n, seed, s);
}

/* The tokens a put of n tokens whose longest cached prefix is m stores:
 * the tail n - m; when m ends inside a chunk, the store may code the
 * chunk's shared start again instead of taking it from the sibling record
 * (store/put.c: a shared start shorter than SKV_MIN_BASE = 16 tokens
 * that the new record does not simply extend), so up to m mod chunk more. */
void assert_new(size_t got, size_t n, size_t m, size_t chunk, const char *what)
{
    size_t lo = n - m, hi = n - m / chunk * chunk;
    if (m % chunk >= 16)
        hi = lo;
    cr_assert(got >= lo && got <= hi, "%s: put stored %zu new tokens; the tail is %zu (at most %zu)",
              what, got, lo, hi);
}

int on_layer(void *vctx, size_t pos0, size_t n, int layer, const void *k, const void *v)
{
    layer_acc *a = vctx;
    const size_t row = a->tm->row;
    if (layer < 0 || layer >= a->tm->L || pos0 + n > a->want || n == 0) {
        a->bad++;
        return 0;
    }
    for (size_t p = pos0; p < pos0 + n; p++)
        a->bad += a->seen[(size_t)layer * a->want + p]++ != 0;
    memcpy(a->out + ((size_t)layer * 2 * a->want + pos0) * row, k, n * row);
    memcpy(a->out + (((size_t)layer * 2 + 1) * a->want + pos0) * row, v, n * row);
    a->calls++;
    return 0;
}

/* Families of sessions: each family shares a system prompt (sys0 + 9f
 * tokens), sessions differ after it. */
void make_workload_sys(const su_model *tm, int fams, int per, uint64_t seed, size_t sys0,
                       su_seq *out)
{
    for (int f = 0; f < fams; f++) {
        su_seq sys;
        su_seq_make(tm, NULL, 0, sys0 + 9 * (size_t)f, seed + 977 * (uint64_t)f, &sys);
        for (int i = 0; i < per; i++)
            session(tm, &sys, sys.n, (int32_t)((3 + i) % tm->c->vocab_size),
                    sys.n + 8 + (size_t)((i * 13 + f * 7) % 40), seed + 31 * (uint64_t)(f * per + i),
                    &out[f * per + i]);
        su_seq_free(&sys);
    }
}

void make_workload(const su_model *tm, int fams, int per, uint64_t seed, su_seq *out)
{
    make_workload_sys(tm, fams, per, seed, 12, out);
}

void all_decodable(seqkv *db, const char *tenant, const su_model *tm, const su_seq *s, int n,
                   size_t *served)
{
    *served = 0;
    for (int i = 0; i < n; i++) {
        size_t m = lookup(db, tenant, "p", s[i].tok, s[i].n);
        if (!m)
            continue;
        *served += m;
        size_t ws[3] = {m, (m + 1) / 2, 1};
        for (int w = 0; w < 3; w++) {
            int rc = su_get_check(db, tenant, "p", tm, &s[i], ws[w], NULL);
            cr_assert_eq(rc, 0, "seq %d: lookup %zu, get of %zu: %d %s", i, m, ws[w], rc,
                         seqkv_error_detail());
        }
    }
}

seqkv *store_at_level(const char *dir, const seqkv_options *o, const su_model *tm,
                      seqkv_level level, int with_model, int chunk)
{
    seqkv *db = open_store(dir, o);
    add_profile(db, tm, "p", chunk, level, with_model);
    if (seqkv_level_predictive(level)) {
        for (int i = 0; i < 4; i++) {
            su_seq c;
            su_seq_make(tm, NULL, 0, 40, 30 + (uint64_t)i, &c);
            put(db, "cal", "p", &c, 0);
            su_seq_free(&c);
        }
        cr_assert_eq(seqkv_calibrate(db, "p", 0), 0, "%s", seqkv_error_detail());
    }
    return db;
}

void put_prefix(seqkv *db, const su_model *tm, const su_seq *s, size_t n)
{
    su_seq part = *s;
    part.n = n;
    part.kv = malloc(su_kv_len(tm, n));
    su_expect(tm, s, n, part.kv);
    part.kv_len = su_kv_len(tm, n);
    put(db, "t", "p", &part, 0);
    free(part.kv);
}
