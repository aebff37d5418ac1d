/* The hot tier (store/hot.c): decoded, verified chunk records -- and
 * decoded blob values (store/blob.c) -- kept in memory under a byte
 * budget, shared by every reader of the store.
 *
 * An entry is the whole decoded KV of one chunk record (positions [0, n)
 * of its chunk, its base's positions included) in reply order:
 * [layers][K, V][n][kv_heads * head_dim] elements. Entries are immutable
 * and reference counted: a reader that found one may use its bytes after
 * the tier evicted or dropped it, until it lets its reference go.
 *
 * Sharded by key (a record key is a keyed hash, so uniform): each shard
 * has its own lock, hash table and LRU list, and a hit locks only its
 * shard. Eviction takes the least recently used entry over all shards
 * (every touch stamps a global tick), so the tier is one LRU. */
#ifndef SKV_STORE_HOT_H
#define SKV_STORE_HOT_H
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct hot_chunk {
    struct hot_chunk *hnext, *lprev, *lnext; /* under its shard's lock */
    atomic_uint refs;
    int in_tier;
    uint64_t last;      /* tick of the last touch */
    uint8_t key[32];
    uint32_t n;         /* positions */
    uint32_t layers;
    size_t row;         /* bytes of one position of one of K, V */
    size_t bytes;       /* layers * 2 * n * row */
    size_t cap;         /* the block it lives in (skv_warm_alloc) */
    uint8_t *kv;        /* [layers][2][n][row] */
} hot_chunk;

typedef struct skv_hot skv_hot;

typedef struct {
    uint64_t budget, bytes, entries;
    uint64_t hits, misses, inserts, evictions, drops;
} skv_hot_stats;

/* A tier of at most budget bytes of entries; NULL (and SKV_ERR_NOMEM) when
 * it cannot be made. */
int skv_hot_create(uint64_t budget, skv_hot **out);
/* Frees the tier and its references (entries still referenced elsewhere
 * live until those go). NULL is a no-op. */
void skv_hot_free(skv_hot *h);

/* A new entry (one reference, the caller's; not in any tier) for n
 * positions of layers x 2 x row bytes; NULL without memory. */
hot_chunk *skv_hot_new(const uint8_t key[32], uint32_t n, uint32_t layers, size_t row);
/* The same for len bytes of anything else (a blob's value: n and layers 0) */
hot_chunk *skv_hot_new_bytes(const uint8_t key[32], size_t len);
void skv_hot_ref(hot_chunk *c);
/* Let one reference go; the last frees the entry. NULL is a no-op. */
void skv_hot_unref(hot_chunk *c);

/* The entry of key with a reference for the caller (counted as a hit,
 * made the most recent), or NULL (a miss). */
hot_chunk *skv_hot_get(skv_hot *h, const uint8_t key[32]);
/* Offer c (the caller keeps its own reference): the tier takes one of its
 * own unless c is larger than the budget or key is there already, then
 * evicts least recently used entries until it fits the budget. */
void skv_hot_put(skv_hot *h, hot_chunk *c);
/* Forget key's entry (its record was deleted or evicted from the store);
 * readers holding it keep their reference. */
void skv_hot_drop(skv_hot *h, const uint8_t key[32]);
void skv_hot_stat(skv_hot *h, skv_hot_stats *out);
#endif
