/* The content index of a namespace (store/content_index.c): which stored
 * records share most of a chunk's tokens, in any order of edits. */
#ifndef SKV_CONTENT_INDEX_H
#define SKV_CONTENT_INDEX_H
#include <stddef.h>
#include <stdint.h>

/* Anchors a record keeps: the smallest hashes of its token 4-grams */
#define SKV_CX_ANCHORS 16
/* A candidate shares at least this many of a query's anchors */
#define SKV_CX_MIN_SHARED 8
/* Postings read for one anchor at most (the newest): an anchor common to
 * many records says little, and a query's work stays bounded */
#define SKV_CX_MAX_POSTINGS 64

typedef struct skv_cindex skv_cindex;

/* An empty index (one a namespace: a tenant's puts never meet another's
 * records). Its hashes are unkeyed, so which record a put is coded
 * against follows the tokens only, never the master key. */
int skv_cindex_create(skv_cindex **out);
void skv_cindex_free(skv_cindex *x);
/* A record's tokens in (a key already there is left as it is); a record
 * with fewer than 4 tokens has no anchors and is not indexed */
int skv_cindex_add(skv_cindex *x, const uint8_t key[32], const int32_t *tok, size_t n);
/* A record out (no-op when absent) */
void skv_cindex_remove(skv_cindex *x, const uint8_t key[32]);
/* Up to max records sharing the most anchors with tok[0..n) (at least
 * SKV_CX_MIN_SHARED), best first, their keys into keys: how many. Work
 * bounded by SKV_CX_ANCHORS x SKV_CX_MAX_POSTINGS, whatever is stored. */
size_t skv_cindex_query(const skv_cindex *x, const int32_t *tok, size_t n, uint8_t (*keys)[32],
                        unsigned *shared, size_t max);
/* Records indexed, and the index's bytes */
size_t skv_cindex_records(const skv_cindex *x);
size_t skv_cindex_bytes(const skv_cindex *x);
#endif
