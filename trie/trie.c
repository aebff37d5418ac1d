/* The in-memory radix trie of one namespace (skv_trie.h): two open-
 * addressing hash tables keyed by 32-byte hashes (whose first 8 bytes are
 * already uniformly distributed), one from record key to record, one from
 * node to the list of records hanging below it. */
#include <string.h>

#include "skv_trie.h"

typedef struct {
    const uint8_t *k; /* points into the record (key or parent) */
    skv_trie_rec *r;  /* records: the record; nodes: head of the sibling list */
} slot;

typedef struct {
    slot *s;
    size_t cap, n, tomb;
} table;

struct skv_trie {
    uint8_t root[32];
    uint32_t chunk;
    size_t rec_size; /* an owner's record, beginning with an skv_trie_rec */
    table recs, nodes;
};

static const uint8_t tomb_key[1];
#define TOMB ((const uint8_t *)tomb_key)

static inline size_t h64(const uint8_t *k)
{
    uint64_t x;
    memcpy(&x, k, 8);
    return (size_t)x;
}

static slot *tab_find(const table *t, const uint8_t *k)
{
    if (!t->cap)
        return NULL;
    for (size_t i = h64(k) & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
        slot *s = &t->s[i];
        if (!s->k)
            return NULL;
        if (s->k != TOMB && memcmp(s->k, k, 32) == 0)
            return s;
    }
}

static int tab_grow(table *t)
{
    if ((t->n + t->tomb + 1) * 4 < t->cap * 3)
        return SKV_OK;
    size_t nc = t->cap ? t->cap : 64;
    while ((t->n + 1) * 2 > nc)
        nc *= 2;
    slot *ns = skv_calloc(nc, sizeof *ns);
    if (!ns)
        return skv_error(SKV_ERR_NOMEM, "trie table");
    for (size_t i = 0; i < t->cap; i++) {
        slot *s = &t->s[i];
        if (!s->k || s->k == TOMB)
            continue;
        size_t j = h64(s->k) & (nc - 1);
        while (ns[j].k)
            j = (j + 1) & (nc - 1);
        ns[j] = *s;
    }
    skv_free(t->s);
    t->s = ns;
    t->cap = nc;
    t->tomb = 0;
    return SKV_OK;
}

/* Insert k (must be absent). */
static int tab_put(table *t, const uint8_t *k, skv_trie_rec *r)
{
    int rc = tab_grow(t);
    if (rc)
        return rc;
    size_t i = h64(k) & (t->cap - 1);
    while (t->s[i].k && t->s[i].k != TOMB)
        i = (i + 1) & (t->cap - 1);
    if (t->s[i].k == TOMB)
        t->tomb--;
    t->s[i].k = k;
    t->s[i].r = r;
    t->n++;
    return SKV_OK;
}

static void tab_del(table *t, slot *s)
{
    s->k = TOMB;
    s->r = NULL;
    t->n--;
    t->tomb++;
}

int skv_trie_create(const uint8_t root[32], uint32_t chunk, size_t rec_size, skv_trie **out)
{
    *out = NULL;
    if (chunk == 0)
        return skv_error(SKV_ERR_ARG, "chunk length 0");
    if (rec_size < sizeof(skv_trie_rec))
        return skv_error(SKV_ERR_ARG, "records of %zu bytes hold no skv_trie_rec", rec_size);
    skv_trie *t = skv_calloc(1, sizeof *t);
    if (!t)
        return skv_error(SKV_ERR_NOMEM, "trie");
    memcpy(t->root, root, 32);
    t->chunk = chunk;
    t->rec_size = rec_size;
    *out = t;
    return SKV_OK;
}

static void rec_free(skv_trie_rec *r)
{
    if (!r)
        return;
    skv_free(r->tokens);
    skv_free(r->surprisal);
    skv_free(r);
}

void skv_trie_free(skv_trie *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->recs.cap; i++)
        if (t->recs.s[i].k && t->recs.s[i].k != TOMB)
            rec_free(t->recs.s[i].r);
    skv_free(t->recs.s);
    skv_free(t->nodes.s);
    skv_free(t);
}

const uint8_t *skv_trie_root(const skv_trie *t) { return t->root; }
uint32_t skv_trie_chunk(const skv_trie *t) { return t->chunk; }
size_t skv_trie_count(const skv_trie *t) { return t->recs.n; }

skv_trie_rec *skv_trie_find(const skv_trie *t, const uint8_t key[32])
{
    slot *s = tab_find(&t->recs, key);
    return s ? s->r : NULL;
}

int skv_trie_insert(skv_trie *t, const skv_trie_rec *r, skv_trie_rec **out)
{
    if (out)
        *out = NULL;
    if (r->n == 0 || r->n > t->chunk)
        return skv_error(SKV_ERR_ARG, "record of %u tokens (chunk %u)", r->n, t->chunk);
    if (r->lo > r->n)
        return skv_error(SKV_ERR_ARG, "record base length %u past its %u tokens", r->lo, r->n);
    if (tab_find(&t->recs, r->key))
        return skv_error(SKV_ERR_ARG, "record already indexed");
    skv_trie_rec *c = skv_malloc(t->rec_size);
    if (!c)
        return skv_error(SKV_ERR_NOMEM, "trie record");
    memcpy(c, r, t->rec_size);
    c->next_sib = NULL;
    c->tokens = skv_malloc(r->n * sizeof(int32_t));
    c->surprisal = r->surprisal ? skv_malloc(r->n * sizeof(float)) : NULL;
    if (!c->tokens || (r->surprisal && !c->surprisal)) {
        c->surprisal = r->surprisal ? c->surprisal : NULL;
        rec_free(c);
        return skv_error(SKV_ERR_NOMEM, "trie record");
    }
    memcpy(c->tokens, r->tokens, r->n * sizeof(int32_t));
    if (r->surprisal)
        memcpy(c->surprisal, r->surprisal, r->n * sizeof(float));
    int rc = tab_put(&t->recs, c->key, c);
    if (rc) {
        rec_free(c);
        return rc;
    }
    slot *ns = tab_find(&t->nodes, c->parent);
    if (ns) {
        c->next_sib = ns->r;
        ns->r = c;
    } else if ((rc = tab_put(&t->nodes, c->parent, c))) {
        tab_del(&t->recs, tab_find(&t->recs, c->key));
        rec_free(c);
        return rc;
    }
    if (out)
        *out = c;
    return SKV_OK;
}

int skv_trie_remove(skv_trie *t, const uint8_t key[32])
{
    slot *s = tab_find(&t->recs, key);
    if (!s)
        return skv_error(SKV_ERR_NOT_FOUND, "record not indexed");
    skv_trie_rec *r = s->r;
    tab_del(&t->recs, s);
    slot *ns = tab_find(&t->nodes, r->parent);
    /* the node's slot key points into its head record: re-point it */
    if (ns) {
        skv_trie_rec **pp = &ns->r;
        while (*pp && *pp != r)
            pp = &(*pp)->next_sib;
        if (*pp)
            *pp = r->next_sib;
        if (!ns->r)
            tab_del(&t->nodes, ns);
        else
            ns->k = ns->r->parent;
    }
    rec_free(r);
    return SKV_OK;
}

static size_t common(const int32_t *a, const int32_t *b, size_t n)
{
    size_t i = 0;
    while (i < n && a[i] == b[i])
        i++;
    return i;
}

static size_t match(const skv_trie *t, const int32_t *tokens, size_t n, skv_trie_step *path,
                    size_t cap, size_t *steps, int all)
{
    const uint8_t *node = t->root;
    size_t pos = 0, k = 0;
    while (pos < n) {
        slot *ns = tab_find(&t->nodes, node);
        if (!ns)
            break;
        skv_trie_rec *best = NULL;
        size_t bm = 0;
        size_t lim = n - pos < t->chunk ? n - pos : t->chunk;
        for (skv_trie_rec *r = ns->r; r; r = r->next_sib) {
            if (r->hidden && !all)
                continue;
            size_t m = common(r->tokens, tokens + pos, r->n < lim ? r->n : lim);
            if (m == 0)
                continue;
            if (!best || m > bm || (m == bm && r->n > best->n) ||
                (m == bm && r->n == best->n && memcmp(r->key, best->key, 32) < 0)) {
                best = r;
                bm = m;
            }
        }
        if (!best)
            break;
        if (path && k < cap) {
            path[k].rec = best;
            path[k].used = (uint32_t)bm;
        }
        k++;
        pos += bm;
        if (bm < t->chunk || best->n < t->chunk)
            break;
        node = best->key;
    }
    if (steps)
        *steps = k;
    return pos;
}

size_t skv_trie_match(const skv_trie *t, const int32_t *tokens, size_t n, skv_trie_step *path,
                      size_t cap, size_t *steps)
{
    return match(t, tokens, n, path, cap, steps, 0);
}

size_t skv_trie_match_all(const skv_trie *t, const int32_t *tokens, size_t n, skv_trie_step *path,
                          size_t cap, size_t *steps)
{
    return match(t, tokens, n, path, cap, steps, 1);
}

size_t skv_trie_children(const skv_trie *t, const uint8_t node[32], skv_trie_rec **out,
                         size_t cap)
{
    slot *ns = tab_find(&t->nodes, node);
    size_t k = 0;
    for (skv_trie_rec *r = ns ? ns->r : NULL; r; r = r->next_sib, k++)
        if (out && k < cap)
            out[k] = r;
    return k;
}

skv_trie_rec *skv_trie_first_child(const skv_trie *t, const uint8_t node[32])
{
    slot *ns = tab_find(&t->nodes, node);
    return ns ? ns->r : NULL;
}

void skv_trie_foreach(const skv_trie *t, void (*fn)(void *ctx, skv_trie_rec *r), void *ctx)
{
    for (size_t i = 0; i < t->recs.cap; i++)
        if (t->recs.s[i].k && t->recs.s[i].k != TOMB)
            fn(ctx, t->recs.s[i].r);
}
