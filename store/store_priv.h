/* The store handle and its in-memory state (private to store/). */
#ifndef SKV_STORE_PRIV_H
#define SKV_STORE_PRIV_H
#include <lmdb.h>
#include <pthread.h>

#include "skv_delta.h"
#include "skv_model.h"
#include "skv_trie.h"
#include "store_int.h"

typedef struct {
    seqkv_profile p;
    size_t C;          /* kv_heads * head_dim */
    size_t es;         /* dtype bytes */
    skv_model *model;  /* loaded on first need (spec, full, surprisal) */
    int model_failed;
} prof_ent;

typedef struct {
    char name[SEQKV_NAME_MAX + 1];
    uint64_t id;
    int read_shared;
    uint64_t budget;
    uint64_t used;     /* stored bytes of its records (in memory) */
} tenant_ent;

typedef struct {
    uint64_t tenant;
    uint8_t prof_id[32];
    uint8_t secret[32];
    skv_trie *trie;
} ns_ent;

/* Cached coders: a calibration and one skv_delta per level, reused by one
 * caller at a time. */
typedef struct coder_ent {
    uint8_t calib_id[16];
    int level;            /* seqkv_level */
    int pooled;           /* uses the store's thread pool (writer only) */
    skv_calib *cal;       /* owned by the first entry of an id */
    int owns_cal;
    skv_delta *d;
    int busy;
} coder_ent;

struct seqkv {
    char dir[4096];
    seqkv_options o;
    MDB_env *env;
    MDB_dbi db_meta, db_prof, db_calib, db_ten, db_chunk, db_evict;
    uint8_t master[32];
    pthread_mutex_t wlock;
    pthread_rwlock_t rw;
    pthread_mutex_t clock; /* coder cache and model loading */
    prof_ent *prof;
    size_t nprof, prof_cap;
    tenant_ent *ten;
    size_t nten, ten_cap;
    ns_ent *ns;
    size_t nns, ns_cap;
    coder_ent *coders;
    size_t ncoders, coders_cap;
    uint64_t tick, evictions, stored;
    uint64_t map_size;
    size_t bad_records;
    int lock_fd;           /* flock of DIR/seqkv.lock (writers) */
    skv_pool *pool;
    struct skv_put_batch *batch; /* the writer's put batch (access.c), or NULL */
};

int skv_mdb_error(int rc, const char *what);
prof_ent *skv_store_profile(seqkv *db, const char *name);
ns_ent *skv_store_ns(seqkv *db, uint64_t tenant, const uint8_t profile_id[32]);
/* The namespace, created (in memory) when absent; caller holds rw exclusively. */
int skv_store_namespace(seqkv *db, uint64_t tenant, const prof_ent *pe, ns_ent **out);
int skv_store_tenant(seqkv *db, const char *name, int create, tenant_ent **out);
int skv_store_add_profile(seqkv *db, const seqkv_profile *p);
int skv_store_add_tenant(seqkv *db, const tenant_ent *t);
int skv_store_index(seqkv *db, const uint8_t key[32], const skv_rec *r, size_t bytes,
                    uint64_t tick);
void skv_store_deps(ns_ent *e, const skv_trie_rec *r, int delta);
void skv_store_unindex(seqkv *db, ns_ent *e, skv_trie_rec *r, int deps);
uint64_t skv_store_tick(seqkv *db);
int skv_store_grow(seqkv *db);
int skv_store_profile_model(seqkv *db, prof_ent *pe, skv_model **out);
int skv_store_set_calib(seqkv *db, prof_ent *pe, const uint8_t id[16], const uint8_t *img,
                        size_t len);

/* A stored sequence from the root to `tip`, decoded and verified: tokens
 * and K, V in the KV file layout [layers][T][C] (skv_free them). Caller
 * holds rw shared and a read transaction. */
int skv_store_decode_chain(seqkv *db, MDB_txn *txn, ns_ent *e, prof_ent *pe, skv_trie_rec *tip,
                           size_t *T, int32_t **tok, uint8_t **k, uint8_t **v);

/* coders (store/coders.c) */
int skv_store_coder(seqkv *db, MDB_txn *txn, prof_ent *pe, const uint8_t calib_id[16], int level,
                    coder_ent **out);
void skv_store_coder_release(seqkv *db, coder_ent *c);
/* Mark the calling thread as the writer (holding wlock) or not. */
void skv_store_writer(int on);
int skv_store_is_writer(void);
void skv_store_coders_free(seqkv *db);
#endif
