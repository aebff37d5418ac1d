/* The store suites (test_store_*.c) test the store (seqkv.h) on real model
 * KV -- a seeded random llama2.c model always, stories260K when present.
 * Lossless means bit-exact: every GET is compared byte for byte with the
 * KV that was PUT. The kill -9 test is in crash_put.c.
 *
 * Their Criterion-side helpers: stores
 * opened with seeded master keys, profiles, puts, lookups and stats
 * asserted to succeed, whole-sequence checks, sessions and workloads of
 * sessions sharing prefixes. They assert with Criterion: call them from a
 * test (storeutil.h holds the ones that also work in forked children). */
#ifndef SKV_STORETEST_H
#define SKV_STORETEST_H
#include <stddef.h>
#include <stdint.h>

#include "seqkv.h"
#include "storeutil.h"

#define CHUNK 16

/* the map size of the full-map tests */
#ifndef MAP_LIMIT
#define MAP_LIMIT (1 << 20)
#endif

/* Stores are made with master keys derived from this seed, so that every
 * run is the same run (keys decide the order of the store's tables). */
extern uint64_t key_seed;

/* The hot tier of the stores open_store makes when their options name
 * none: 64 KiB (small, so that it evicts), $SEQKV_TEST_CACHE when set (0:
 * no tier); a suite may set it to 0 (no tier, whatever the environment). */
extern uint64_t test_cache_bytes;
/* seqkv_open of dir (quiet; a master key from key_seed unless read-only) */
seqkv *open_store(const char *dir, const seqkv_options *o);
/* su_profile set on db, read back and checked */
void add_profile(seqkv *db, const su_model *tm, const char *name, int chunk, seqkv_level level,
                 int with_model);
seqkv_put_result put(seqkv *db, const char *tenant, const char *prof, const su_seq *s, int level);
/* A store with profile "p" of chunk tokens at level (the model's file
 * named when with_model), calibrated on four other sequences of 40 tokens
 * (tenant "cal") when the level predicts */
seqkv *store_at_level(const char *dir, const seqkv_options *o, const su_model *tm,
                      seqkv_level level, int with_model, int chunk);
/* A put of s's first n tokens (tenant "t", profile "p") */
void put_prefix(seqkv *db, const su_model *tm, const su_seq *s, size_t n);
size_t lookup(seqkv *db, const char *tenant, const char *prof, const int32_t *tok, size_t n);
/* lookup == full length and get of every token bit-exact */
void assert_whole(seqkv *db, const char *tenant, const char *prof, const su_model *tm,
                  const su_seq *s, const char *what);
seqkv_stats stats(seqkv *db, const char *tenant);
/* A session: prefix[0..np) + one token that no other session of the set
 * has at that position (div), continued by sampling to n tokens. */
void session(const su_model *tm, const su_seq *prefix, size_t np, int32_t div, size_t n,
             uint64_t seed, su_seq *s);
/* The tokens a put of n tokens whose longest cached prefix is m stores:
 * the tail n - m, or up to m mod chunk more (see storetest.c). */
void assert_new(size_t got, size_t n, size_t m, size_t chunk, const char *what);

/* What a get's layer callback (on_layer) gathered: the KV of want tokens
 * in the store layout, each (layer, position) seen once */
typedef struct {
    const su_model *tm;
    size_t want;
    uint8_t *out;
    uint8_t *seen; /* [layer][pos] */
    int calls, bad;
} layer_acc;
int on_layer(void *vctx, size_t pos0, size_t n, int layer, const void *k, const void *v);

/* Families of sessions: each family shares a system prompt (sys0 + 9f
 * tokens), sessions differ after it. */
void make_workload_sys(const su_model *tm, int fams, int per, uint64_t seed, size_t sys0,
                       su_seq *out);
/* make_workload_sys with system prompts from 12 tokens */
void make_workload(const su_model *tm, int fams, int per, uint64_t seed, su_seq *out);
/* Every sequence of s[0..n) that tenant's profile "p" serves a prefix of
 * decodes bit-exact at three lengths; *served the tokens served. */
void all_decodable(seqkv *db, const char *tenant, const su_model *tm, const su_seq *s, int n,
                   size_t *served);
#endif
