/*
 * skv_trie.h - the in-memory index of one namespace (tenant, profile): a
 * radix trie over token ids whose edges are chunk records.
 *
 * A node is a chain hash: the root is h0 = H_k(profile id); the node after
 * a full chunk record is that record's key (= its chain hash h_i). A
 * record hangs below its parent node and labels its edge with n <= chunk
 * tokens; records of one node may share a token prefix (a record can
 * extend or branch off a sibling inside the chunk: it then codes only the
 * positions after the shared part, taking the rest from that sibling, its
 * "base"). KV is causal, so a record serves any prefix of its tokens: the
 * longest cached prefix is found at token granularity.
 *
 * The probabilistic trie: each record may carry the surprisal
 * -log2 P(token | prefix) of its tokens, so the code length of any cached
 * prefix, d = -log2 P(prefix), is a sum along the path.
 *
 * Not thread-safe; the store guards it. Depends on skv_base only.
 */
#ifndef SKV_TRIE_H
#define SKV_TRIE_H
#include <stddef.h>
#include <stdint.h>

#include "skv_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A record as the trie sees it: where it hangs, its tokens, whether it is
 * visible. An owner keeps its own fields beside these: its records begin
 * with an skv_trie_rec and are rec_size bytes (skv_trie_create), which
 * the trie copies, keeps and frees without reading past this part (the
 * store's: store_priv.h's skv_irec). */
typedef struct skv_trie_rec {
    uint8_t key[32];     /* record key (LMDB) */
    uint8_t parent[32];  /* node it hangs below */
    uint32_t chunk_index;
    uint32_t n;          /* tokens on the edge */
    uint32_t lo;         /* positions [0, lo) come from another record (its base) */
    int32_t *tokens;     /* owned copy [n] */
    float *surprisal;    /* owned copy [n], or NULL when unknown */
    uint8_t hidden;      /* not visible: skv_trie_match skips it (the
                            store's uncommitted records of a put batch, and
                            records whose delete is committing) */
    struct skv_trie_rec *next_sib; /* internal */
} skv_trie_rec;

typedef struct skv_trie skv_trie;

/* A trie whose records are rec_size bytes (>= sizeof(skv_trie_rec)),
 * each beginning with an skv_trie_rec */
int skv_trie_create(const uint8_t root[32], uint32_t chunk, size_t rec_size, skv_trie **out);
void skv_trie_free(skv_trie *t);
const uint8_t *skv_trie_root(const skv_trie *t);
uint32_t skv_trie_chunk(const skv_trie *t);
size_t skv_trie_count(const skv_trie *t);

/* Insert a copy of r (rec_size bytes; tokens and surprisal copied). SKV_ERR_ARG if the key
 * exists or n is 0 or above the chunk length. *out (may be NULL) points at
 * the stored record, valid until it is removed. */
int skv_trie_insert(skv_trie *t, const skv_trie_rec *r, skv_trie_rec **out);
skv_trie_rec *skv_trie_find(const skv_trie *t, const uint8_t key[32]);
/* Remove and free a record (SKV_ERR_NOT_FOUND if absent). */
int skv_trie_remove(skv_trie *t, const uint8_t key[32]);

/* One step of a matched path: the record serving chunk i and how many of
 * its tokens matched. */
typedef struct {
    skv_trie_rec *rec;
    uint32_t used;
} skv_trie_step;
/* Longest cached prefix of tokens[0..n): the matched length. path (may be
 * NULL) receives up to cap steps, one per chunk touched; *steps their
 * number. Among siblings, the one matching most tokens serves (ties: the
 * longer record, then the smaller key). */
size_t skv_trie_match(const skv_trie *t, const int32_t *tokens, size_t n, skv_trie_step *path,
                      size_t cap, size_t *steps);
/* The same, also through hidden records (the writer's own view). */
size_t skv_trie_match_all(const skv_trie *t, const int32_t *tokens, size_t n, skv_trie_step *path,
                          size_t cap, size_t *steps);
/* Records hanging below node: up to cap into out; returns their number. */
size_t skv_trie_children(const skv_trie *t, const uint8_t node[32], skv_trie_rec **out,
                         size_t cap);
/* The first of them (the head of node's sibling list), or NULL: O(1) */
skv_trie_rec *skv_trie_first_child(const skv_trie *t, const uint8_t node[32]);
/* Every record, in no particular order; fn may not insert or remove. */
void skv_trie_foreach(const skv_trie *t, void (*fn)(void *ctx, skv_trie_rec *r), void *ctx);

#ifdef __cplusplus
}
#endif
#endif /* SKV_TRIE_H */
