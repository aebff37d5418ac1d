/* The content index of a namespace: near-duplicates found by their
 * tokens, wherever the edit is.
 *
 * Each record keeps SKV_CX_ANCHORS anchors: the smallest hashes of the
 * 4-grams of its tokens (a bottom-k MinHash sketch, so two records that
 * share most of their 4-grams share most of their anchors, whatever
 * moved where). A chained hash table maps an anchor to the records that
 * hold it, newest first. A query sketches a chunk of a put the same way
 * and counts, per record, the anchors it shares, reading at most
 * SKV_CX_MAX_POSTINGS postings an anchor; records sharing at least
 * SKV_CX_MIN_SHARED are candidates. Memory: a slot, SKV_CX_ANCHORS
 * postings and their share of the buckets a record. The store adds a
 * record when it indexes it and removes it when it leaves the index (DEL,
 * eviction, compaction, a forgotten tenant), so a candidate is always a
 * live record of the same namespace. */
#include <string.h>

#include "content_index.h"
#include "skv_base.h"

#define NGRAM 4
#define NIL UINT32_MAX

typedef struct {
    uint8_t key[32];
    uint64_t anchor[SKV_CX_ANCHORS];
    uint32_t nanchor;
    uint32_t next_free; /* NIL while live */
} cx_rec;

typedef struct {
    uint64_t h;
    uint32_t rec, next;
} cx_post;

struct skv_cindex {
    cx_rec *recs;
    size_t nrecs, cap_recs, live;
    uint32_t free_rec;
    cx_post *posts;
    size_t nposts, cap_posts;
    uint32_t free_post;
    uint32_t *bucket; /* heads of postings chains */
    size_t nbuckets;  /* a power of two */
    uint32_t *by_key; /* open addressing on the record key: rec index or NIL */
    size_t nkeys;     /* its slots, a power of two */
};

static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t gram_hash(const int32_t *t)
{
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < NGRAM; i++)
        h = mix(h ^ (uint32_t)t[i]);
    return h;
}

/* The k smallest distinct 4-gram hashes of tok[0..n), ascending */
static uint32_t sketch(const int32_t *tok, size_t n, uint64_t out[SKV_CX_ANCHORS])
{
    uint32_t k = 0;
    for (size_t i = 0; i + NGRAM <= n; i++) {
        const uint64_t h = gram_hash(tok + i);
        if (k == SKV_CX_ANCHORS && h >= out[k - 1])
            continue;
        uint32_t j = k < SKV_CX_ANCHORS ? k : k - 1;
        int dup = 0;
        for (uint32_t x = 0; x < k && !dup; x++)
            dup = out[x] == h;
        if (dup)
            continue;
        while (j > 0 && out[j - 1] > h) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = h;
        if (k < SKV_CX_ANCHORS)
            k++;
    }
    return k;
}

static uint64_t key_hash(const uint8_t key[32])
{
    return skv_load64_le(key); /* (record keys are BLAKE2b outputs) */
}

int skv_cindex_create(skv_cindex **out)
{
    skv_cindex *x = skv_calloc(1, sizeof *x);
    if (!x)
        return skv_error(SKV_ERR_NOMEM, "content index");
    x->free_rec = x->free_post = NIL;
    *out = x;
    return SKV_OK;
}

void skv_cindex_free(skv_cindex *x)
{
    if (!x)
        return;
    skv_free(x->recs);
    skv_free(x->posts);
    skv_free(x->bucket);
    skv_free(x->by_key);
    skv_free(x);
}

static uint32_t *key_slot(const skv_cindex *x, const uint8_t key[32])
{
    if (!x->nkeys)
        return NULL;
    for (size_t i = key_hash(key) & (x->nkeys - 1);; i = (i + 1) & (x->nkeys - 1)) {
        uint32_t r = x->by_key[i];
        if (r == NIL || memcmp(x->recs[r].key, key, 32) == 0)
            return &x->by_key[i];
    }
}

/* Room for one more record: the key table at most half full, the buckets
 * about one per posting */
static int grow(skv_cindex *x)
{
    if (2 * (x->live + 1) > x->nkeys) {
        size_t nk = x->nkeys ? 2 * x->nkeys : 64;
        uint32_t *t = skv_malloc(nk * sizeof *t);
        if (!t)
            return skv_error(SKV_ERR_NOMEM, "content index");
        for (size_t i = 0; i < nk; i++)
            t[i] = NIL;
        for (size_t i = 0; i < x->nkeys; i++) {
            uint32_t r = x->by_key[i];
            if (r == NIL)
                continue;
            size_t j = key_hash(x->recs[r].key) & (nk - 1);
            while (t[j] != NIL)
                j = (j + 1) & (nk - 1);
            t[j] = r;
        }
        skv_free(x->by_key);
        x->by_key = t;
        x->nkeys = nk;
    }
    const size_t want = (x->live + 1) * SKV_CX_ANCHORS;
    if (want > x->nbuckets) {
        size_t nb = x->nbuckets ? 2 * x->nbuckets : 1024;
        while (nb < want)
            nb *= 2;
        uint32_t *b = skv_malloc(nb * sizeof *b);
        if (!b)
            return skv_error(SKV_ERR_NOMEM, "content index");
        for (size_t i = 0; i < nb; i++)
            b[i] = NIL;
        /* rechain the live postings (free ones keep their free-list links);
         * pushed at the head in slot order: about newest first */
        for (size_t p = 0; p < x->nposts; p++) {
            cx_post *q = &x->posts[p];
            if (q->rec == NIL)
                continue;
            const size_t i = q->h & (nb - 1);
            q->next = b[i];
            b[i] = (uint32_t)p;
        }
        skv_free(x->bucket);
        x->bucket = b;
        x->nbuckets = nb;
    }
    return SKV_OK;
}

static uint32_t take_post(skv_cindex *x)
{
    if (x->free_post != NIL) {
        uint32_t p = x->free_post;
        x->free_post = x->posts[p].next;
        return p;
    }
    if (x->nposts == x->cap_posts) {
        size_t nc = x->cap_posts ? 2 * x->cap_posts : 1024;
        cx_post *n = skv_realloc(x->posts, nc * sizeof *n);
        if (!n)
            return NIL;
        x->posts = n;
        x->cap_posts = nc;
    }
    return (uint32_t)x->nposts++;
}

int skv_cindex_add(skv_cindex *x, const uint8_t key[32], const int32_t *tok, size_t n)
{
    uint64_t a[SKV_CX_ANCHORS];
    const uint32_t k = sketch(tok, n, a);
    if (!k)
        return SKV_OK;
    uint32_t *slot = key_slot(x, key);
    if (slot && *slot != NIL)
        return SKV_OK;
    int rc = grow(x);
    if (rc)
        return rc;
    /* postings first: a record is in only once all of them are */
    if (x->cap_posts - x->nposts < k) {
        size_t nc = x->cap_posts ? 2 * x->cap_posts : 1024;
        while (nc - x->nposts < k)
            nc *= 2;
        cx_post *np = skv_realloc(x->posts, nc * sizeof *np);
        if (!np)
            return skv_error(SKV_ERR_NOMEM, "content index");
        x->posts = np;
        x->cap_posts = nc;
    }
    uint32_t r;
    if (x->free_rec != NIL) {
        r = x->free_rec;
        x->free_rec = x->recs[r].next_free;
    } else {
        if (x->nrecs == x->cap_recs) {
            size_t nc = x->cap_recs ? 2 * x->cap_recs : 64;
            cx_rec *nr = skv_realloc(x->recs, nc * sizeof *nr);
            if (!nr)
                return skv_error(SKV_ERR_NOMEM, "content index");
            x->recs = nr;
            x->cap_recs = nc;
        }
        r = (uint32_t)x->nrecs++;
    }
    cx_rec *R = &x->recs[r];
    memcpy(R->key, key, 32);
    memcpy(R->anchor, a, k * sizeof *a);
    R->nanchor = k;
    R->next_free = NIL;
    for (uint32_t i = 0; i < k; i++) {
        uint32_t p = take_post(x); /* (room was made above) */
        const size_t b = a[i] & (x->nbuckets - 1);
        x->posts[p] = (cx_post){a[i], r, x->bucket[b]};
        x->bucket[b] = p;
    }
    *key_slot(x, key) = r;
    x->live++;
    return SKV_OK;
}

void skv_cindex_remove(skv_cindex *x, const uint8_t key[32])
{
    uint32_t *slot = key_slot(x, key);
    if (!slot || *slot == NIL)
        return;
    const uint32_t r = *slot;
    cx_rec *R = &x->recs[r];
    for (uint32_t i = 0; i < R->nanchor; i++) {
        uint32_t *pp = &x->bucket[R->anchor[i] & (x->nbuckets - 1)];
        while (*pp != NIL && x->posts[*pp].rec != r)
            pp = &x->posts[*pp].next;
        if (*pp == NIL)
            continue;
        const uint32_t p = *pp;
        *pp = x->posts[p].next;
        x->posts[p].rec = NIL;
        x->posts[p].next = x->free_post;
        x->free_post = p;
    }
    /* out of the key table: re-place the run after the hole */
    size_t i = (size_t)(slot - x->by_key);
    x->by_key[i] = NIL;
    for (size_t j = (i + 1) & (x->nkeys - 1); x->by_key[j] != NIL; j = (j + 1) & (x->nkeys - 1)) {
        const uint32_t m = x->by_key[j];
        x->by_key[j] = NIL;
        *key_slot(x, x->recs[m].key) = m;
    }
    R->nanchor = 0;
    R->next_free = x->free_rec;
    x->free_rec = r;
    x->live--;
}

/* record a ranks before b among equals: by their anchors (their tokens),
 * then by key */
static int before(const skv_cindex *x, uint32_t a, uint32_t b)
{
    const cx_rec *A = &x->recs[a], *B = &x->recs[b];
    for (uint32_t i = 0; i < A->nanchor && i < B->nanchor; i++)
        if (A->anchor[i] != B->anchor[i])
            return A->anchor[i] < B->anchor[i];
    if (A->nanchor != B->nanchor)
        return A->nanchor < B->nanchor;
    return memcmp(A->key, B->key, 32) < 0;
}

size_t skv_cindex_query(const skv_cindex *x, const int32_t *tok, size_t n, uint8_t (*keys)[32],
                        unsigned *shared, size_t max)
{
    uint64_t a[SKV_CX_ANCHORS];
    const uint32_t k = x->live ? sketch(tok, n, a) : 0;
    /* the records met and their counts (at most k x postings of them) */
    uint32_t seen[SKV_CX_ANCHORS * SKV_CX_MAX_POSTINGS];
    unsigned cnt[SKV_CX_ANCHORS * SKV_CX_MAX_POSTINGS];
    size_t ns = 0;
    for (uint32_t i = 0; i < k; i++) {
        unsigned read = 0;
        for (uint32_t p = x->bucket[a[i] & (x->nbuckets - 1)]; p != NIL && read < SKV_CX_MAX_POSTINGS;
             p = x->posts[p].next) {
            if (x->posts[p].h != a[i])
                continue;
            read++;
            const uint32_t r = x->posts[p].rec;
            size_t j = 0;
            while (j < ns && seen[j] != r)
                j++;
            if (j == ns) {
                seen[ns] = r;
                cnt[ns++] = 0;
            }
            cnt[j]++;
        }
    }
    /* the best max, by count, ties to the lower anchors, then the lower
     * key: the choice follows the tokens stored, not the master key that
     * named their records (nor the order they came in) */
    size_t out = 0;
    while (out < max) {
        size_t b = ns;
        for (size_t j = 0; j < ns; j++) {
            if (cnt[j] < SKV_CX_MIN_SHARED)
                continue;
            if (b == ns || cnt[j] > cnt[b] || (cnt[j] == cnt[b] && before(x, seen[j], seen[b])))
                b = j;
        }
        if (b == ns)
            break;
        memcpy(keys[out], x->recs[seen[b]].key, 32);
        if (shared)
            shared[out] = cnt[b];
        out++;
        cnt[b] = 0;
    }
    return out;
}

size_t skv_cindex_records(const skv_cindex *x)
{
    return x ? x->live : 0;
}

size_t skv_cindex_bytes(const skv_cindex *x)
{
    if (!x)
        return 0;
    return sizeof *x + x->cap_recs * sizeof(cx_rec) + x->cap_posts * sizeof(cx_post) +
           x->nbuckets * sizeof(uint32_t) + x->nkeys * sizeof(uint32_t);
}
