/*
 * seqkv_blob.h - the blob namespace: a tenant's named byte strings, what the
 * server's plain Redis string commands (GET, SET, MGET, ...) serve, so that
 * clients written for Redis (LMCache's remote backend, SGLang HiCache
 * backends) store KV chunks in seqkv unchanged.
 *
 * Each tenant has its own keys (a key names nothing of another tenant).
 * Values are stored once per tenant however many keys hold them
 * (deduplicated by content), durably in LMDB (one write transaction a
 * call), and compressed: a value LMCache describes with a sibling
 * `<key>metadata` key (its RemoteMetadata: shape, dtype, format) is coded
 * by the model-free fast level in that layout; any other value is stored
 * zstd-compressed when that is smaller, else as it is. A get returns the
 * exact bytes set, checked against their XXH3-64. Keys expire at an
 * absolute time (milliseconds since the epoch); an expired key reads as
 * absent and is removed by the next write that meets it or by
 * seqkv_blob_sweep. A tenant's blobs count against its budget with its
 * chunk records; a set past the budget removes the tenant's oldest blobs
 * first (by the time they were set).
 */
#ifndef SEQKV_BLOB_H
#define SEQKV_BLOB_H
#include "seqkv.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SEQKV_BLOB_KEY_MAX 495 /* bytes of a key (LMDB's key limit less 16) */

typedef struct {
    const uint8_t *key;
    size_t key_len;
    const uint8_t *val;
    size_t val_len;
} seqkv_blob_item;

enum {
    SEQKV_BLOB_NX = 1,      /* write only if no key of the call exists */
    SEQKV_BLOB_XX = 2,      /* write only if every key of the call exists */
    SEQKV_BLOB_KEEPTTL = 4, /* keep each key's expiry time */
};

/* Set n keys (all or none, one write transaction). expire_at: ms since the
 * epoch, 0 for none (ignored with KEEPTTL). *written: 1, or 0 when NX or XX
 * stopped it. The tenant is created by its first set. Errors: SKV_ERR_ARG
 * (a key empty or longer than SEQKV_BLOB_KEY_MAX, n == 0),
 * SKV_ERR_TOO_LARGE (a value past 4 GiB, or the tenant's budget too small
 * even after removing its older blobs). */
int seqkv_blob_set(seqkv *db, const char *tenant, const seqkv_blob_item *items, size_t n,
                   unsigned flags, int64_t expire_at, int *written);

/* Several sets as one write transaction (the server's group commit of SET
 * and MSET): each request as seqkv_blob_set would do it alone, in order,
 * each seeing the ones before; its outcome in written, rc (0 or its error)
 * and detail (the error's words). A request that fails fails alone (when
 * one fails the shared transaction, each is committed on its own). 0, or
 * SKV_ERR_NOMEM before any was tried. */
typedef struct {
    const char *tenant;
    const seqkv_blob_item *items;
    size_t n;
    unsigned flags;
    int64_t expire_at;
    int written;      /* out */
    int rc;           /* out */
    char detail[240]; /* out */
} seqkv_blob_set_req;
int seqkv_blob_set_batch(seqkv *db, seqkv_blob_set_req *reqs, size_t n);

/* Get n keys in one read transaction. For each, in order, fn is called:
 * found 0 (absent or expired; len 0) -- its return is ignored -- or found 1
 * with the value's length, returning where to write its len bytes (NULL:
 * out of memory, SKV_ERR_NOMEM). The value is decoded into that buffer and
 * checked before the next call. Errors: SKV_ERR_CORRUPT (a damaged value:
 * the buffer holds garbage; nothing after it is called). */
typedef void *(*seqkv_blob_fn)(void *ctx, size_t i, int found, size_t len);
int seqkv_blob_get(seqkv *db, const char *tenant, size_t n, const uint8_t *const *keys,
                   const size_t *key_lens, seqkv_blob_fn fn, void *ctx);

typedef struct {
    int found;
    uint64_t len;      /* the value's bytes */
    int64_t expire_at; /* ms since the epoch, 0: none */
} seqkv_blob_info;
/* One key's length and expiry (found 0 when absent or expired). */
int seqkv_blob_stat(seqkv *db, const char *tenant, const uint8_t *key, size_t key_len,
                    seqkv_blob_info *out);
/* How many of the n keys exist (a key named twice counts twice). */
int seqkv_blob_exists(seqkv *db, const char *tenant, size_t n, const uint8_t *const *keys,
                      const size_t *key_lens, size_t *count);
/* Delete n keys (one write transaction); *deleted: how many existed. */
int seqkv_blob_del(seqkv *db, const char *tenant, size_t n, const uint8_t *const *keys,
                   const size_t *key_lens, size_t *deleted);

enum {
    SEQKV_EXPIRE_NX = 1, /* only when the key has no expiry */
    SEQKV_EXPIRE_XX = 2, /* only when it has one */
    SEQKV_EXPIRE_GT = 4, /* only when the new time is later (none counts as infinite) */
    SEQKV_EXPIRE_LT = 8, /* only when it is earlier */
};
/* Set a key's expiry: expire_at ms since the epoch (at or before now: the
 * key is deleted), or -1 to remove its expiry (PERSIST: *changed 0 when it
 * had none). *changed: 1 when the key exists and the condition held. */
int seqkv_blob_expire(seqkv *db, const char *tenant, const uint8_t *key, size_t key_len,
                      int64_t expire_at, unsigned cond, int *changed);

/* Iterate a tenant's keys from cursor (0: the start), about count of them
 * (keys are ordered by a keyed hash of their name, so a key present for a
 * whole iteration is returned exactly once however keys come and go);
 * fn gets each unexpired key; *next: the cursor to go on from, 0 at the
 * end. fn returns nonzero to stop early (the error is returned). */
typedef int (*seqkv_blob_key_fn)(void *ctx, const uint8_t *key, size_t key_len);
int seqkv_blob_scan(seqkv *db, const char *tenant, uint64_t cursor, size_t count,
                    seqkv_blob_key_fn fn, void *ctx, uint64_t *next);

typedef struct {
    uint64_t keys;         /* keys (expired ones not yet removed included) */
    uint64_t values;       /* distinct values stored */
    uint64_t raw_bytes;    /* the values' bytes summed over keys */
    uint64_t value_bytes;  /* the distinct values' bytes (after deduplication) */
    uint64_t stored_bytes; /* their stored images */
    uint64_t kv_values;    /* values coded by the fast level as KV */
    uint64_t evicted;      /* keys removed by the budget since open */
    uint64_t expired;      /* keys removed at their expiry since open */
} seqkv_blob_stats;
/* For one tenant (NULL: all); an unknown tenant has none. */
int seqkv_blob_stat_all(seqkv *db, const char *tenant, seqkv_blob_stats *out);

/* Delete all of a tenant's keys, in bounded write transactions. */
int seqkv_blob_flush(seqkv *db, const char *tenant, uint64_t *deleted);
/* Remove expired keys of every tenant, at most max of them (a call goes
 * on where the last one stopped); *removed may be NULL. */
int seqkv_blob_sweep(seqkv *db, size_t max, size_t *removed);

#ifdef __cplusplus
}
#endif
#endif /* SEQKV_BLOB_H */
