/* Helpers shared by the store suites (test_store_*.c, crash_put.c and the
 * others): real model KV in the store layout, profiles, verified gets, and direct access
 * to the LMDB environment of a store. None of them uses Criterion: on a
 * failure they print and abort, so they also work in forked children. */
#ifndef SKV_STOREUTIL_H
#define SKV_STOREUTIL_H
#include <stddef.h>
#include <stdint.h>

#include "seqkv.h"
#include "skv_model.h"

typedef struct {
    skv_model *m;
    const skv_model_config *c;
    char path[4096]; /* the checkpoint on disk */
    seqkv_dtype dt;
    size_t C;        /* kv_heads * head_dim */
    size_t row;      /* C * dtype size */
    int L;
} su_model;

/* A sequence: tokens and its KV in the store layout
 * [layer][k, v][token][kv_head][head_dim]. */
typedef struct {
    size_t n;
    int32_t *tok;
    uint8_t *kv;
    size_t kv_len;
} su_seq;

/* The seeded random llama2.c model of the store suites (2 layers, 2 KV
 * heads of 8 dims, vocabulary 40), written to dir/rm.bin and loaded. */
void su_random_model(su_model *tm, const char *dir, seqkv_dtype dt);
/* The checkpoint at path loaded (aborts when it cannot be). */
void su_model_load(su_model *tm, const char *path, seqkv_dtype dt);
/* ../shared/models/<name> loaded; 0, or 1 when the file is absent. */
int su_shared_model(su_model *tm, const char *name, seqkv_dtype dt);
void su_model_free(su_model *tm);

size_t su_kv_len(const su_model *tm, size_t n);
/* prompt[0..np) (np 0: BOS) continued by sampling to `total` tokens; the
 * KV of all of them from one prefill. */
void su_seq_make(const su_model *tm, const int32_t *prompt, size_t np, size_t total, uint64_t seed,
                 su_seq *s);
void su_seq_free(su_seq *s);
/* The store-layout KV of the first `want` tokens of s into out. */
void su_expect(const su_model *tm, const su_seq *s, size_t want, uint8_t *out);
/* Longest common prefix of two token arrays. */
size_t su_lcp(const int32_t *a, size_t na, const int32_t *b, size_t nb);

/* A profile for tm: shape, dtype, RoPE from the model; model path set
 * when with_model. */
void su_profile(const su_model *tm, const char *name, int chunk, seqkv_level level, int with_model,
                seqkv_profile *p);

/* seqkv_get of want tokens (0: the longest) compared with the KV that was
 * put: 0 when the call succeeds and returns exactly those bytes (and *got
 * the expected count), the call's error when it fails, 1 when it
 * succeeds with wrong bytes or count. */
int su_get_check(seqkv *db, const char *tenant, const char *profile, const su_model *tm,
                 const su_seq *s, size_t want, size_t *got);

/* Create dir (0700) and a master key file in it derived from seed (a
 * store's keys, and so the order of its in-memory tables, are then the
 * same on every run); nothing when dir/master.key exists. Master key file
 * layout: "SKVK", u32 version 1, 32-byte key, 32-byte check. */
void su_master_key(const char *dir, uint64_t seed);

/* The LMDB environment of a store directory, opened directly (maxdbs 8).
 * Returns an MDB_env * as void * so callers need not include lmdb.h. */
void *su_env_open(const char *dir, int rdonly);
void su_env_close(void *env);
/* The keys of every chunk record (32 bytes each), malloc'd; *n count. */
uint8_t *su_chunk_keys(const char *dir, size_t *n);
/* Sum over every chunk record of its own tokens (n - lo, from the record
 * headers: n at byte 164, lo at 168). */
uint64_t su_chunk_tokens(const char *dir);
/* Copy of the chunk record under key (malloc'd), or NULL. */
uint8_t *su_chunk_get(const char *dir, const uint8_t key[32], size_t *len);
/* Chunk records stored unsealed (written with sealing off: no_seal) */
size_t su_chunk_unsealed(const char *dir);
/* Calibration id's image (unsealed when sealed), malloc'd; NULL when absent */
uint8_t *su_calib_get(const char *dir, const uint8_t id[16], size_t *len);
/* Overwrite the chunk record under key (one write transaction). */
void su_chunk_put(const char *dir, const uint8_t key[32], const uint8_t *rec, size_t len);
/* Value files out of step with their stubs (store/vfile.c): stubs whose
 * file is missing or of another length, plus the difference between the
 * files in DIR/values and the stubs; 0 when every file is a stub's */
size_t su_vfile_unmatched(const char *dir);
/* Find the record of chunk index ci whose tokens equal tok[0..n): its key
 * into key; 0 found, -1 not. */
int su_chunk_find(const char *dir, uint32_t ci, const int32_t *tok, uint32_t n, uint8_t key[32]);
#endif
