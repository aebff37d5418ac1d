/* The store handle and its in-memory state (private to store/). */
#ifndef SKV_STORE_PRIV_H
#define SKV_STORE_PRIV_H
#include <lmdb.h>
#include <pthread.h>

#include "skv_delta.h"
#include "skv_lossy.h"
#include "skv_model.h"
#include "content_index.h"
#include "hot.h"
#include "skv_trie.h"
#include "store_int.h"
#include "skv_tier.h"
#include "vfile.h"

/* Drift of a profile's coding (store/calibrate.c): bits per scalar of the
 * records of at least half a chunk coded under its current calibration --
 * the mean of the first SKV_DRIFT_BASE as the baseline, then a moving
 * average over about as many; drifted once that average has stayed above
 * the baseline by SKV_DRIFT_RATIO for SKV_DRIFT_BASE records in a row,
 * SKV_DRIFT_MIN records after the calibration at the earliest (a few odd
 * records do not make a drift). In memory: a restart measures again. */
#define SKV_DRIFT_BASE 16
#define SKV_DRIFT_MIN 64
#define SKV_DRIFT_RATIO 1.10
typedef struct {
    uint64_t n, over;
    double sum, base, avg;
    int drifted;
} skv_drift;

typedef struct {
    seqkv_profile p;
    size_t C;          /* kv_heads * head_dim */
    size_t es;         /* dtype bytes */
    skv_model *model;  /* loaded on first need (spec, full, surprisal) */
    int model_failed;
    uint64_t autocal_failed; /* positions held when self-calibration last failed */
    skv_drift drift;         /* coded size of its records since its calibration (writer's) */
    skv_lossy_cal *lossy;    /* its lossy calibration, loaded on first need (lossy.c) */
} prof_ent;

typedef struct {
    char name[SEQKV_NAME_MAX + 1];
    uint64_t id;
    int read_shared;
    uint64_t budget;
    uint64_t used;     /* stored bytes of its records and blobs (in memory) */
    /* its blobs (blob.c; in memory, counted at open): keys, distinct
     * values, the keys' value bytes, the values' bytes, their stored
     * images' bytes, values coded as KV */
    uint64_t bkeys, bvalues, braw, bvbytes, bstored, bkv;
    uint8_t *keys;     /* its data key and hash secret (SKV_TKEYS bytes,
                          sodium_malloc'd: locked, wiped when freed) */
} tenant_ent;

typedef struct {
    uint64_t tenant;
    uint8_t prof_id[32];
    uint8_t secret[32];
    skv_trie *trie;
    skv_cindex *cx; /* its records by content (content_index.c) */
} ns_ent;

/* Cached coders: a calibration and one skv_delta per level, reused by one
 * caller at a time. */
typedef struct coder_ent {
    uint8_t calib_id[16];
    int level;            /* seqkv_level */
    int pooled;           /* 0: no pool; 1: the writer's (db->pool); 2: the
                             readers' (db->rpool, held by one get at a time) */
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
    MDB_dbi db_blob, db_bval, db_bref; /* the blob namespace (blob.c) */
    MDB_dbi db_tkeys;                  /* tenants' keys, wrapped (tenant_keys.c) */
    pthread_mutex_t kmu;               /* the tenant table's growth, for key lookups */
    int has_blobs;                     /* its tables exist */
    uint64_t blob_evicted, blob_expired; /* keys removed since open */
    uint8_t blob_sweep[16 + 495];      /* where the next sweep starts (blob_maint.c) */
    size_t blob_sweep_len;
    uint8_t master[32];    /* mlocked, wiped at close */
    int pass_key;          /* derived from a passphrase */
    char key_file[4200];   /* the key file it came from ("": not a file) */
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
    struct skv_put_batch *batch; /* the writer's put batch (batch.c), or NULL */
    skv_tier_fn tier_fn; /* committed records (tier.c) */
    void *tier_ctx;
    skv_hot *hot;          /* the hot tier (hot.c), or NULL */
    skv_pool *rpool;       /* read_threads > 1: the gets' pool, one get at a time */
    pthread_mutex_t rpool_mu;
    int stop_bg;           /* seqkv_stop_background: calibrations and compactions stop */
    int wwait;             /* clients' writers waiting for wlock (skv_store_wlock_client) */
    skv_vf_state vf;       /* big records' value files (vfile.c) */
};

/* A record in the index: the trie's part first (skv_trie.h: key, tokens,
 * visibility), then the store's own. Every trie of the store holds these
 * (skv_trie_create with sizeof(skv_irec)). */
typedef struct skv_irec {
    skv_trie_rec tr;
    uint64_t tick;        /* last use (the store's logical clock) */
    uint64_t tick_saved;  /* tick last persisted */
    uint64_t bytes;       /* bytes of the stored record */
    uint32_t deps;        /* records needing this one */
    uint8_t level;        /* seqkv_level it was coded at */
    uint8_t has_base, has_centroid;
    uint8_t by_content; /* its centroid found by the content index */
    uint8_t evicting;     /* chosen by an eviction in progress */
    uint8_t base[32];     /* key of the sibling providing [0, lo) */
    uint8_t centroid[32]; /* key of the centroid record it was coded against */
} skv_irec;
/* The store's record of one the trie hands back */
static inline skv_irec *skv_irec_of(skv_trie_rec *r)
{
    return (skv_irec *)r;
}
static inline skv_irec *skv_irec_find(const skv_trie *t, const uint8_t key[32])
{
    return skv_irec_of(skv_trie_find(t, key));
}
/* skv_trie_foreach and skv_trie_children of the store's records (store.c) */
void skv_irec_foreach(const skv_trie *t, void (*fn)(void *ctx, skv_irec *r), void *ctx);
size_t skv_irec_children(const skv_trie *t, const uint8_t node[32], skv_irec **out, size_t cap);

int skv_mdb_error(int rc, const char *what);
/* Profile and tenant records (FORMAT.md; profiles.c packs them) */
#define SKV_PROF_MAGIC 0x50564b53u  /* "SKVP" */
/* the fields before the lossy tier's (a whole record before FORMAT 15,
 * now refused), then the lossy tier's 32 bytes */
#define SKV_PROF_BASE_SIZE (16 + 64 + 4 * 10 + 16 + 32 + SEQKV_PATH_MAX + 1)
#define SKV_PROF_SIZE (SKV_PROF_BASE_SIZE + 32)
#define SKV_TEN_MAGIC 0x54564b53u   /* "SKVT" */
#define SKV_TEN_SIZE 32
#define SKV_SHARED_ID 1 /* SEQKV_SHARED_TENANT's id */
/* A profile as its record (SKV_PROF_SIZE bytes); a record as a profile:
 * SKV_ERR_CORRUPT (or VERSION) unless every field is one a set could make */
void skv_store_prof_pack(const seqkv_profile *p, uint8_t *b);
int skv_store_prof_unpack(const uint8_t *b, size_t len, seqkv_profile *p);
void skv_store_ten_pack(const tenant_ent *t, uint8_t *b);
/* A profile, tenant or other name: 1..SEQKV_NAME_MAX bytes, no blanks or
 * control characters, '@' first only when allow_at */
int skv_store_check_name(const char *what, const char *s, int allow_at);
int skv_store_txn_begin(seqkv *db, int rdonly, MDB_txn **txn);
/* A u64 of the meta table (0 when absent); writing one */
uint64_t skv_store_meta_u64(MDB_txn *txn, MDB_dbi dbi, const char *key);
int skv_store_meta_put_u64(MDB_txn *txn, MDB_dbi dbi, const char *key, uint64_t x);
/* A caller's option struct (its size in its first field; 0: full) copied
 * into dst (full bytes), the fields it lacks zeroed; SKV_ERR_ARG when its
 * size cannot be read (what: the struct's name) */
int skv_store_opts(void *dst, size_t full, const void *src, const char *what);
prof_ent *skv_store_profile(seqkv *db, const char *name);
/* SKV_ERR_NOT_FOUND for profile name, the message listing the profiles
 * the store has (call with wlock or rw held) */
int skv_store_no_profile(seqkv *db, const char *name);
ns_ent *skv_store_ns(seqkv *db, uint64_t tenant, const uint8_t profile_id[32]);
/* The tenant named name, or NULL (caller holds wlock or rw) */
tenant_ent *skv_store_find_tenant(seqkv *db, const char *name);
/* The namespace, created (in memory) when absent; caller holds rw exclusively. */
int skv_store_namespace(seqkv *db, uint64_t tenant, const prof_ent *pe, ns_ent **out);
int skv_store_tenant(seqkv *db, const char *name, int create, tenant_ent **out);
/* A new tenant: id (0: the next free one) and keys (SKV_TKEYS bytes;
 * NULL: made) given; caller holds wlock */
int skv_store_tenant_new(seqkv *db, const char *name, uint64_t id, const uint8_t *keys,
                         tenant_ent **out);
/* The id a new tenant would get */
uint64_t skv_store_next_tenant(seqkv *db);
int skv_store_add_profile(seqkv *db, const seqkv_profile *p);
int skv_store_add_tenant(seqkv *db, const tenant_ent *t);
int skv_store_index(seqkv *db, const uint8_t key[32], const skv_rec *r, size_t bytes,
                    uint64_t tick);
void skv_store_deps(ns_ent *e, const skv_irec *r, int delta);
void skv_store_unindex(seqkv *db, ns_ent *e, skv_irec *r, int deps);
/* Delete record key and its LRU entry in txn: 0 or the LMDB error */
int skv_store_del_rec(seqkv *db, MDB_txn *txn, const uint8_t key[32]);
/* An indexed record's stored bytes are now `bytes` (the store's and its
 * tenant's counts follow). Caller holds rw exclusively. */
void skv_store_rebytes(seqkv *db, ns_ent *e, skv_irec *r, uint64_t bytes);
/* A record of `scalars` scalars coded into `bytes` of streams under the
 * profile's current calibration (caller: the writer) */
void skv_store_drift(prof_ent *pe, uint64_t bytes, uint64_t scalars);
/* The level a put asking for `asked` codes at (raw until a calibration) */
int skv_store_put_level(const prof_ent *pe, int asked);

uint64_t skv_store_tick(seqkv *db);

/* wlock for a writer a client waits on (a put batch, DEL, SET): counted
 * while it waits, so that a background loop lets it in between two steps */
void skv_store_wlock_client(seqkv *db);
/* Between two steps of a background loop (compaction, blob maintenance),
 * wlock not held: while a client's writer waits for wlock, let it take it
 * first (up to 1 s a step; a mutex alone hands it back to the loop). */
void skv_store_wlock_yield(seqkv *db);
/* ---- the one write path (write.c) ---- */
/* A write transaction's body: its puts and deletes in txn, SKV_OK or a
 * negative SKV_ERR_* (LMDB's through skv_mdb_error, so a full map reads
 * SKV_ERR_MAP_FULL). It may run again after a full map: it starts from
 * ctx afresh each time. */
typedef int (*skv_write_fn)(seqkv *db, MDB_txn *txn, void *ctx);
/* The map is full at its limit: make room (SKV_OK: the body runs again)
 * or return why not */
typedef int (*skv_full_fn)(seqkv *db, void *ctx);
/* How often one write runs its body before a full map is the answer */
#define SKV_WRITE_TRIES 40
/* The caller holds rw exclusively (readers are out while the write and
 * the index change together); full must not take rw then */
#define SKV_WRITE_RW_HELD 1u
/* Run body in a write transaction and commit it. On SKV_ERR_MAP_FULL the
 * map doubles and the body runs again; at the map's limit full (NULL:
 * none) makes room first. rw is held shared through each transaction (the
 * map grows under it exclusively) unless flags has SKV_WRITE_RW_HELD.
 * Caller is the writer (wlock, or the store is not yet shared) and holds
 * no transaction. */
int skv_store_write(seqkv *db, const char *what, skv_write_fn body, skv_full_fn full, void *ctx,
                    unsigned flags);
/* One value put through skv_store_write (MDB_NOOVERWRITE in mdb_flags:
 * a value already there is kept, and that is success) */
int skv_store_write_one(seqkv *db, MDB_dbi dbi, const void *key, size_t klen, const void *val,
                        size_t vlen, unsigned mdb_flags, const char *what);
/* Records keys[0..n) and their LRU entries deleted in one transaction
 * through skv_store_write (one already gone is no error) */
int skv_store_write_del(seqkv *db, const uint8_t (*keys)[32], size_t n, const char *what);
/* Double the map up to map_max (SKV_ERR_MAP_FULL at its limit) */
int skv_store_grow(seqkv *db);
/* A pool for a background learning (a calibration, the lossy tier's): as
 * many threads as the store's coders or its gets use, whichever is more (a
 * server's gets have every CPU) */
int skv_store_bg_pool(const seqkv *db, skv_pool **out);
int skv_store_profile_model(seqkv *db, prof_ent *pe, skv_model **out);
int skv_store_set_calib(seqkv *db, prof_ent *pe, const uint8_t id[16], const uint8_t *img,
                        size_t len);

/* Who is coding or decoding, passed down rather than kept per thread: the
 * writer (it holds wlock; its batch's pending records are visible to it,
 * its coders run on the store's pool), or a reader (rpool: the read pool
 * when this get took it, else NULL). depth counts centroid decodes nested
 * in one another (a member's centroid may itself be a member). */
typedef struct {
    int writer;
    skv_pool *rpool;
    int depth;
} skv_role;
#define SKV_WRITER ((skv_role){1, NULL, 0})
#define SKV_READER ((skv_role){0, NULL, 0})

/* A stored sequence from the root to `tip`, decoded and verified: tokens
 * (skv_free them) and K, V in the KV file layout [layers][T][C], warm
 * blocks of cap[0] and cap[1] bytes (skv_warm_free them). Caller holds rw
 * shared and a read transaction. */
int skv_store_decode_chain(seqkv *db, MDB_txn *txn, const skv_role *role, ns_ent *e, prof_ent *pe, skv_irec *tip,
                           size_t *T, int32_t **tok, uint8_t **k, uint8_t **v, size_t cap[2]);
/* Tokens and KV of positions [0, stride) in the coder's layout: K and V
 * each [layers][stride][C] dtype elements. */
typedef struct {
    size_t stride;
    int32_t *tok;
    uint8_t *kv[2];
    size_t cap[2]; /* kv's blocks (skv_warm_alloc) */
} seqbuf;
/* The positions of `tip`'s chain that coding its record again at a level
 * without a model needs (model_free: the previous position's row alone):
 * decoded into *s from the deepest raw record before its chunk on, the
 * rows before it left unwritten (*from: the first one written); with a
 * model, or with no such record, the whole chain. Layout [layers][stride]
 * [C]; the tokens before *from are 0. A fresh *s (stride: the chain's
 * chunks x chunk positions) unless tip_held: then *s (stride at least
 * that) already holds the tip's own positions, verified, and only the
 * records before it are decoded into it (or, when the tip's record is not
 * one that decodes from the row before it, it is freed and a fresh one
 * decoded). *s is freed on an error. */
int skv_store_decode_tail(seqkv *db, MDB_txn *txn, const skv_role *role, ns_ent *e, prof_ent *pe, skv_irec *tip,
                          int model_free, int tip_held, seqbuf *s, size_t *from);
/* The same for its first positions: the chunks that hold the first upto
 * (*T: all their positions, at least upto where the sequence has them) */
int skv_store_decode_prefix(seqkv *db, MDB_txn *txn, const skv_role *role, ns_ent *e, prof_ent *pe, skv_irec *tip,
                            size_t upto, size_t *T, int32_t **tok, uint8_t **k, uint8_t **v, size_t cap[2]);

/* A stored sequence: its last record (one no other record needs), its
 * namespace, and (skv_store_tips) the unkeyed hash of the record's tokens */
typedef struct {
    skv_irec *r;
    ns_ent *e;
    uint64_t h;
} skv_tip;
/* The stored sequences of profile prof_id, every tenant's, as a sample
 * and in an order that follow neither the store's keys nor the tries'
 * layout, so that what is learned from them does not depend on the master
 * key: by the hash of their last record's tokens, then tenant; *n: the
 * first max of them (0: all), or (recent) the max most recently used, in
 * that same order. Caller holds rw; skv_free(*out). */
int skv_store_tips(seqkv *db, const uint8_t prof_id[32], int recent, size_t max, skv_tip **out,
                   size_t *n);

/* The profile record written (and, with ck, a calibration entry) in one
 * transaction. Caller holds wlock. */
int skv_store_profile_write(seqkv *db, const seqkv_profile *p, MDB_val *ck, MDB_val *cv);

/* coders (store/coders.c): the writer's use the store's pool, a reader's
 * the read pool when its role holds it, the others none */
int skv_store_coder(seqkv *db, MDB_txn *txn, prof_ent *pe, const uint8_t calib_id[16], int level,
                    const skv_role *role, coder_ent **out);
void skv_store_coder_release(seqkv *db, coder_ent *c);
/* A get takes the readers' pool when it is free (its coders and unsealing
 * then split chunks over it) and gives it back: the pool, or NULL */
skv_pool *skv_store_read_pool_take(seqkv *db);
void skv_store_read_pool_give(seqkv *db, skv_pool *taken);
void skv_store_coders_free(seqkv *db);

/* ---- tenants' keys (tenant_keys.c, forget.c) --------------------------------- */
/* The format record's check value is want: a rotation that committed but
 * did not replace the key file is finished (KEY.new adopted); else
 * SKV_ERR_CORRUPT (no detail set) */
int skv_rotation_finish(seqkv *db, const uint8_t want[16]);
int skv_tkeys_alloc(tenant_ent *t);
void skv_tkeys_free(tenant_ent *t);
/* A new tenant's keys: a random data key; the hash secret from the
 * master key of the day (then kept wrapped: rotations rename nothing) */
int skv_tkeys_make(const seqkv *db, tenant_ent *t);
/* Its keys wrapped into table tkeys */
int skv_tkeys_put(seqkv *db, MDB_txn *txn, const tenant_ent *t);
/* Open table tkeys and unwrap every tenant's keys (a new store's @shared
 * gets them; any other tenant without keys: SKV_ERR_CORRUPT). After the
 * tenants load. */
int skv_tkeys_load(seqkv *db, MDB_txn *txn);
/* The tenant's data key (under kmu; no other lock needed or taken) */
int skv_store_dek(seqkv *db, uint64_t tid, uint8_t dek[32]);
/* Its hash secret (chain hashes, blob names), the same way */
int skv_store_hsec(seqkv *db, uint64_t tid, uint8_t hsec[32]);

/* ---- the store's side of sealing (seal_store.c) ------------------------------ */
/* A calibration image as stored: sealed under @shared's data key (bound
 * to its id) into *out, or (sealing off) *out NULL and img as it is */
int skv_store_calib_seal(seqkv *db, const uint8_t id[16], const uint8_t *img, size_t len,
                         uint8_t **out, size_t *out_len);
/* A stored calibration as its image: v, or opened into *owned */
int skv_store_calib_read(seqkv *db, const uint8_t id[16], const uint8_t *v, size_t len,
                         uint8_t **owned, const uint8_t **img, size_t *img_len);
/* The bytes a record image of len bytes takes stored (sealed or not) */
size_t skv_store_rec_bytes(const seqkv *db, size_t len);
/* Record image img (version 2) of key put in txn sealed, straight into the
 * space mdb_put reserves (flags: MDB_NOOVERWRITE or 0), its parts over pool
 * (the writer's, or NULL: this thread); *mrc: mdb_put's result
 * (MDB_KEYEXIST, MDB_MAP_FULL: nothing written); the writer calls it */
int skv_store_put_sealed(seqkv *db, MDB_txn *txn, const uint8_t key[32], const uint8_t *img,
                         size_t len, unsigned flags, skv_pool *pool, int *mrc);
/* Record image img (version 2) of key sealed under its tenant's data key,
 * its parts over the writer's pool: the writer calls it (wlock held) */
int skv_store_rec_seal(seqkv *db, const uint8_t key[32], const uint8_t *img, size_t len,
                       uint8_t **out, size_t *out_len);
/* A stored record value as an image (version 2): v itself, or unsealed
 * into *owned (skv_free it) */
int skv_store_rec_read(seqkv *db, const uint8_t key[32], const uint8_t *v, size_t len, skv_pool *pool,
                       uint8_t **owned, const uint8_t **img, size_t *img_len);
/* Its header and tokens (what the index needs; r->streams NULL when
 * sealed): *owned to skv_free */
int skv_store_rec_head(seqkv *db, const uint8_t key[32], const uint8_t *v, size_t len,
                       uint8_t **owned, skv_rec *r);
/* 1 when stored value v is a sealed raw record of the current version (its
 * clear header says so): skv_store_rec_head, then skv_store_rec_raw_open
 * its streams straight into their destinations */
int skv_store_rec_sealed_raw(const uint8_t *v, size_t len);
int skv_store_rec_raw_open(seqkv *db, const uint8_t key[32], const uint8_t *v, size_t len,
                           const skv_rec *r, skv_pool *pool, uint8_t *const *dst);

/* ---- access: get.c, put.c, batch.c, evict.c, del.c, decode.c ---------------- */

int skv_seqbuf_init(seqbuf *s, const prof_ent *pe, size_t stride);
void skv_seqbuf_free(seqbuf *s);
/* Checksum of positions [a, b) in stream order (layer, K then V), as a
 * record holds it (skv_rec_sum). */
uint64_t skv_seqbuf_checksum(const prof_ent *pe, const seqbuf *s, size_t a, size_t b);
/* Positions [a, b) of s coded at level into st (raw when a token is
 * outside the calibration's vocabulary); r->level, r->calib set. */
int skv_store_code_record(seqkv *db, MDB_txn *txn, prof_ent *pe, int level, const seqbuf *s,
                          size_t a, size_t b, skv_rec *r, skv_streams *st);

/* ---- the lossy tier (lossy.c) ---------------------------------------------- */
/* The profile record's lossy fields (32 bytes at SKV_PROF_BASE_SIZE) */
void skv_lossy_prof_pack(const seqkv_profile *p, uint8_t *b);
int skv_lossy_prof_unpack(const uint8_t *b, seqkv_profile *p);
/* seqkv_profile_set's checks of the lossy settings */
int skv_lossy_prof_check(const seqkv_profile *q);
/* Whether a put's new chunks are coded lossy: the profile has the
 * setting and its calibration (loaded here when needed). */
int skv_store_lossy_ready(seqkv *db, MDB_txn *txn, prof_ent *pe);
/* Record r over positions [a, b) of s (a put of n positions) coded lossy
 * into st, s's lossy positions overwritten by their reconstruction;
 * *coded 0 when [a, b) lies in the exact window (nothing coded: the
 * caller codes it at the profile's level). */
int skv_store_lossy_code(seqkv *db, MDB_txn *txn, prof_ent *pe, seqbuf *s, size_t a, size_t b,
                         size_t n, skv_rec *r, skv_streams *st, int *coded);
/* Stream j (layer j / 2, K|V) of lossy record r, rows positions, into dst */
int skv_store_lossy_stream(seqkv *db, MDB_txn *txn, prof_ent *pe, const skv_rec *r, size_t j,
                           const uint8_t *src, size_t len, size_t rows, uint8_t *dst);
/* Token positions the profile's records hold, every tenant's (calibrate.c);
 * caller holds rw */
uint64_t skv_store_profile_positions(seqkv *db, const prof_ent *pe);
/* The self-calibration's part: a profile with `lossy` and a model but no
 * lossy calibration learns one (in the background: no lock held). */
int skv_store_lossy_auto(seqkv *db, const char *profile, int *learned);

struct skv_centroid;

/* A hot-tier entry (one reference, the caller's) of the record key whose n
 * positions start at P in s; NULL without memory (view.c) */
hot_chunk *skv_store_hot_entry(const prof_ent *pe, const uint8_t key[32], size_t n,
                               const seqbuf *s, size_t P);

/* A view of h's first len bytes, taking the caller's reference to h (freed
 * with the view; NULL and h released without memory) (view.c) */
seqkv_view *skv_view_of_chunk(hot_chunk *h, size_t len);

/* seqkv_get with on_layer (get.c): each layer to fn as it is decoded */
int skv_store_get_layers(seqkv *db, const char *tenant, const char *profile, const int32_t *tokens,
                         size_t n, size_t want, unsigned flags, seqkv_layer_fn fn, void *ctx,
                         size_t *got);

/* Decoding records (decode.c) */
typedef struct {
    seqkv *db;
    MDB_txn *txn;
    ns_ent *e;
    prof_ent *pe;
    seqbuf *s;
    uint64_t tick;
    struct skv_centroid *cent; /* the last centroid decoded (members share it) */
    skv_role role;
} dec_ctx;

/* Decode the records of a matched path into s (stride >= the path's
 * extent); fn (may be NULL) gets each chunk's layers as they are done. */
typedef int (*chunk_fn)(void *ctx, const seqbuf *s, size_t a, size_t b);
int skv_store_decode_path(dec_ctx *c, const skv_trie_step *path, size_t steps, chunk_fn fn,
                          void *fctx, size_t want);
/* Load, verify and decode record t into c->s, given that every position
 * before its chunk is there already (its base first, when it has one). */
int skv_store_decode_rec(dec_ctx *c, skv_irec *t);

/* Record t's records in decode order, its bases first (out holds chunk + 1) */
int skv_store_rec_chain(const dec_ctx *c, skv_irec *t, skv_irec **out, size_t *n);

/* One record being decoded, in steps: open loads it (its trailer verified
 * unless fused, when a raw record is left for raw_copy;
 * SKV_OPEN_PLACE: such a record is then copied, or opened when sealed,
 * straight into c->s and verified, and the steps after are no-ops),
 * checks its streams' offsets, takes its coder (share's, when share is not
 * NULL and still open and its calibration and level are the same; closed
 * after x) and makes its centroid predictions; decode writes its tokens
 * into c->s and decodes it whole, given every position before it, hashing
 * its KV into *sum (skv_store_recs_layers does it a group of layers at a
 * time, when skv_store_rec_layered); check compares the checksum once
 * every layer is decoded; close releases what open took. */
typedef struct {
    skv_irec *t;
    skv_rec r;              /* pointing into img */
    const uint8_t *img;     /* the record (LMDB's map, valid while the txn lives) */
    size_t len;
    uint8_t *owned;         /* img when unsealed (freed by close) */
    size_t P;               /* its chunk's first position */
    struct coder_ent *ce;   /* coded levels' coder */
    int shared;             /* ce is another open record's (share) */
    skv_delta_aux aux;      /* a centroid member's predictions (in bufs) */
    float *bufs[3];
    skv_rec_sum *sum;       /* its decoded KV's checksum so far (the caller's) */
    size_t *offs;           /* coded levels: its streams (in) */
    skv_streams in;
    skv_delta_range *dr;    /* decoding in layer groups */
    int placed;             /* SKV_OPEN_PLACE: a raw record already in c->s, verified */
    skv_vmap vm;            /* its value file, mapped */
} rec_dec;
#define SKV_OPEN_PLACE 2 /* skv_store_rec_open's fused: raw records placed at once */
int skv_store_rec_open(dec_ctx *c, skv_irec *t, int fused, const rec_dec *share,
                       skv_rec_sum *sum, rec_dec *x);
int skv_store_rec_layered(const rec_dec *x);
int skv_store_rec_decode(dec_ctx *c, rec_dec *x);
/* Layers [l0, l1) of open records x[0, n) (layered ones, in decode
 * order), their (layer, K|V) chains -- stream j of every record in turn --
 * in parallel over pool (the coders' pool: the readers' when this thread
 * holds it); hashed into each record's sum as rec_layers does */
int skv_store_recs_layers(dec_ctx *c, rec_dec *x, size_t n, size_t l0, size_t l1, skv_pool *pool);
int skv_store_rec_check(dec_ctx *c, rec_dec *x);
void skv_store_rec_close(dec_ctx *c, rec_dec *x);

typedef struct {
    prof_ent *pe;
    ns_ent *e;        /* the namespace that matched best (NULL: none) */
    size_t matched;
    skv_trie_step *path;
    size_t steps;
} match_res;
/* The longest cached prefix of tok (get.c) */
int skv_store_match(seqkv *db, const char *tenant, const char *profile, const int32_t *tok,
                    size_t n, match_res *m);
/* The same for a get of *want tokens (0: the longest cached prefix, set
 * into *want): SKV_ERR_NOT_FOUND when fewer are cached. Caller holds rw
 * shared. */
int skv_store_match_want(seqkv *db, const char *tenant, const char *profile, const int32_t *tok,
                         size_t n, size_t *want, match_res *m);
/* SKV_ERR_NOT_FOUND, saying why, when a record of the first want tokens'
 * path (or a base of one) is lossy and flags lack SEQKV_GET_LOSSY (lossy.c) */
int skv_store_lossy_check(const match_res *m, size_t want, unsigned flags);

/* The writer's batch (db->batch, under wlock): records coded and indexed
 * hidden, their images waiting for the one commit that writes them all;
 * and the records whose recency that commit saves. */
typedef struct {
    ns_ent *e;
    uint8_t key[32];
    uint8_t *img;
    size_t len;
    skv_rec_at at;  /* a raw record's streams in the put's KV, img its image
                       less them (skv_rec_write_at); src NULL: img whole */
    hot_chunk *hot; /* its KV for the hot tier once committed, or NULL */
} pend_rec;

typedef struct {
    ns_ent *e;
    uint8_t key[32];
} pend_tick;

struct skv_put_batch {
    pend_rec *rec;
    size_t nrec, rec_cap;
    pend_tick *tick;
    size_t ntick, tick_cap;
    uint64_t bytes;
};

/* The batch's record of key, or NULL */
pend_rec *skv_batch_find(struct skv_put_batch *pb, const uint8_t key[32]);
/* p's image made whole (its streams gathered from its put's KV): every
 * use of a pending image but the batch's own sealed write needs it */
int skv_batch_whole(pend_rec *p);
/* Room for nrec more records and ntick more recency entries */
int skv_batch_reserve(struct skv_put_batch *pb, size_t nrec, size_t ntick);
/* Forget the batch's records from `from` on (batch.c) */
void skv_batch_drop(seqkv *db, struct skv_put_batch *pb, size_t from);
/* One request into the batch, as if put alone (put.c) */
int skv_store_put_one(seqkv *db, seqkv_put_req *q, struct skv_put_batch *pb, int standalone,
                      int *prefix);
/* Hand a committed batch's records (their stored bytes: sealed[j], or the
 * image) to the remote tier's hook, when one is set (tier.c) */
void skv_tier_committed(seqkv *db, const struct skv_put_batch *pb, uint8_t *const *sealed,
                        const size_t *slen);
/* Evict LRU records until need bytes fit under limit (evict.c) */
int skv_store_evict(seqkv *db, uint64_t tenant, uint64_t used, uint64_t limit, uint64_t need,
                    int *count);
/* The fast level's streams of a chunk record (store/fast_streams.c):
 * encode appends its 2 x layers streams of positions [a, b) of k and v
 * (the sequence buffer, stride positions a layer) to st; decode checks
 * and decodes a record's streams (sizes: 2 x layers u32) into k and v,
 * spread over pool when not NULL (the streams stand alone). SKV_ERR_CORRUPT
 * for any damage, the first damaged stream's. */
int skv_store_fast_encode(const prof_ent *pe, const uint8_t *k, const uint8_t *v, size_t stride,
                          size_t a, size_t b, skv_streams *st);
int skv_store_fast_decode(const prof_ent *pe, const uint8_t *streams, size_t streams_len,
                          const uint8_t *sizes, uint8_t *k, uint8_t *v, size_t stride, size_t a,
                          size_t b, skv_pool *pool);

#endif
