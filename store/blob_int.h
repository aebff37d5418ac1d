/* The blob namespace's internals shared by store/blob.c, store/blob_maint.c
 * and store.c (not a public header; FORMAT.md, "Blobs", has the layouts). */
#ifndef SKV_BLOB_INT_H
#define SKV_BLOB_INT_H
#include <sodium.h>

#include "blob.h"
#include "store_priv.h"

#define ENT_MAGIC 0x4e564b53u /* "SKVN" */
#define ENT_SIZE 48           /* an entry of table blobs */
#define KPFX 16               /* blobs' key: tenant and name hash, then the name */
#define VKEY 24               /* blobvals' and blobrefs' key: tenant and content id */

/* A key's entry */
typedef struct {
    int64_t expire_at, set_at; /* ms since the epoch; expire_at 0: none */
    uint64_t len;              /* the value's bytes */
    uint8_t cid[16];           /* its content id */
} blob_ent;

/* The tenant's blob keys: SipHash's (names) and XXH3's seed (contents),
 * derived from its secret */
typedef struct {
    uint64_t tid;
    uint8_t sip[crypto_shorthash_KEYBYTES];
    uint64_t seed;
} bkeys;

/* What a transaction changed in the in-memory counts, applied once it
 * commits (a transaction retried after the map grew starts again). */
typedef struct {
    int64_t keys, values, raw, vbytes, stored, kv;
    uint64_t evicted, expired;
    uint64_t tid; /* the tenant changed, when the caller did not know it (a sweep) */
} bdelta;

/* A committed transaction's counts into the tenant's and the store's */
void skvb_delta_apply(seqkv *db, uint64_t tid, const bdelta *d);
void skvb_keys(seqkv *db, uint64_t tid, bkeys *k);
/* blobs' key of name into b (KPFX + len bytes); its length */
size_t skvb_ent_key(const bkeys *k, const uint8_t *name, size_t len, uint8_t *b);
void skvb_val_key(uint64_t tid, const uint8_t cid[16], uint8_t b[VKEY]);
/* The hot tier's key of a decoded value */
void skvb_hot_key(uint64_t tid, const uint8_t cid[16], uint8_t b[32]);
void skvb_ent_pack(const blob_ent *e, uint8_t b[ENT_SIZE]);
int skvb_ent_unpack(const MDB_val *v, blob_ent *e);
int skvb_expired(const blob_ent *e, int64_t now);
/* SKV_ERR_ARG unless 1..SEQKV_BLOB_KEY_MAX bytes */
int skvb_key_ok(const uint8_t *key, size_t len);
/* The tenant's id for a read (0: no such tenant, or no blob tables) */
uint64_t skvb_tenant_id(seqkv *db, const char *tenant);
/* Caller holds rw */
tenant_ent *skvb_tenant(seqkv *db, uint64_t id);
/* A stored value's encoding and length (sealed or not, from its clear
 * header); -1 / an error when damaged */
int skvb_enc_of(const MDB_val *v);
int skvb_val_info(const MDB_val *v, skv_blob_hdr *h);
/* Store a value image under vk: sealed under the tenant's data key (bound
 * to vk) unless sealing is off; *stored: the bytes it takes */
int skvb_val_put(seqkv *db, MDB_txn *txn, const uint8_t vk[VKEY], const uint8_t *img, size_t len,
                 size_t *stored);
/* A stored value as its image (v, or opened into *owned) */
int skvb_val_read(seqkv *db, const uint8_t vk[VKEY], const MDB_val *v, uint8_t **owned,
                  const uint8_t **img, size_t *len);
/* ... decoded into out (out_len: its raw length), checked */
int skvb_val_decode(seqkv *db, const uint8_t vk[VKEY], const MDB_val *v, uint8_t *out,
                    size_t out_len);
/* One entry fewer names value cid: its image goes with the last one */
int skvb_unref(seqkv *db, MDB_txn *txn, uint64_t tid, const uint8_t cid[16], bdelta *d);
/* Delete the entry at key k (its value e) */
int skvb_ent_del(seqkv *db, MDB_txn *txn, uint64_t tid, MDB_val *k, const blob_ent *e, bdelta *d);
/* Run fn through skv_store_write (caller holds wlock; fn may run again
 * after a full map, its counts afresh); the counts applied (to d->tid,
 * else tid) after the commit. */
typedef int (*txn_fn)(seqkv *db, MDB_txn *txn, void *ctx, bdelta *d);
int skvb_txn(seqkv *db, uint64_t tid, txn_fn fn, void *ctx);
/* The n keys' sizes checked, then the tenant's blob keys (bk->tid 0: no
 * such tenant) and, unless write, a read transaction (*txn NULL when the
 * tenant does not exist); write refuses a read-only store */
int skvb_begin(seqkv *db, const char *tenant, size_t n, const uint8_t *const *keys,
               const size_t *lens, int write, bkeys *bk, MDB_txn **txn);
/* Key's entry in txn; *found 0 when absent or expired */
int skvb_live(seqkv *db, MDB_txn *txn, const bkeys *bk, const uint8_t *key, size_t len,
              int64_t now, blob_ent *e, int *found);

/* Open the blob tables in txn (created unless read-only; a read-only
 * store without them has no blobs) and count each tenant's blobs. */
int skv_blob_load(seqkv *db, MDB_txn *txn);
/* Remove the tenant's oldest blobs (by set time) until `over` stored
 * bytes are gone or none is left. Caller holds wlock. */
int skv_blob_evict(seqkv *db, uint64_t tid, uint64_t over);
#endif
