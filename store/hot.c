/* The hot tier: decoded chunk records in memory (hot.h). */
#include <pthread.h>
#include <string.h>

#include "hot.h"
#include "skv_base.h"

#define HOT_SHARDS 16
#define HOT_HEAD 128 /* the entry struct, rounded up: kv starts cache-aligned */

typedef struct {
    pthread_mutex_t mu;
    hot_chunk **tab;
    size_t nb, count;
    hot_chunk *mru, *lru;
    uint64_t hits, misses, inserts, evictions, drops;
    char pad[64];
} hot_shard;

struct skv_hot {
    uint64_t budget;
    atomic_uint_fast64_t bytes, entries, tick;
    hot_shard sh[HOT_SHARDS];
};

_Static_assert(sizeof(hot_chunk) <= HOT_HEAD, "hot_chunk outgrew its header");

static hot_shard *shard_of(skv_hot *h, const uint8_t key[32])
{
    return &h->sh[key[0] % HOT_SHARDS];
}

static size_t bucket_of(const hot_shard *s, const uint8_t key[32])
{
    return (size_t)(skv_load64_le(key + 8) & (s->nb - 1));
}

int skv_hot_create(uint64_t budget, skv_hot **out)
{
    *out = NULL;
    skv_hot *h = skv_calloc(1, sizeof *h);
    if (!h)
        return skv_error(SKV_ERR_NOMEM, "hot tier");
    h->budget = budget;
    for (int i = 0; i < HOT_SHARDS; i++)
        pthread_mutex_init(&h->sh[i].mu, NULL);
    for (int i = 0; i < HOT_SHARDS; i++) {
        hot_shard *s = &h->sh[i];
        s->nb = 64;
        s->tab = skv_calloc(s->nb, sizeof *s->tab);
        if (!s->tab) {
            skv_hot_free(h);
            return skv_error(SKV_ERR_NOMEM, "hot tier");
        }
    }
    *out = h;
    return SKV_OK;
}

hot_chunk *skv_hot_new_bytes(const uint8_t key[32], size_t len)
{
    /* (a big entry on memory an evicted one, or a put's buffers, left warm) */
    size_t cap;
    uint8_t *m = skv_warm_alloc(HOT_HEAD + (len ? len : 1), &cap);
    if (!m)
        return NULL;
    hot_chunk *c = (hot_chunk *)m;
    memset(c, 0, sizeof *c);
    c->cap = cap;
    atomic_init(&c->refs, 1);
    memcpy(c->key, key, 32);
    c->bytes = len;
    c->kv = m + HOT_HEAD;
    return c;
}

hot_chunk *skv_hot_new(const uint8_t key[32], uint32_t n, uint32_t layers, size_t row)
{
    hot_chunk *c = skv_hot_new_bytes(key, (size_t)layers * 2 * n * row);
    if (c) {
        c->n = n;
        c->layers = layers;
        c->row = row;
    }
    return c;
}

void skv_hot_ref(hot_chunk *c)
{
    atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
}

void skv_hot_unref(hot_chunk *c)
{
    if (c && atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) == 1)
        skv_warm_free(c, c->cap);
}

/* ---- a shard's table and LRU list (its lock held) ---------------------------------- */

static void lru_unlink(hot_shard *s, hot_chunk *c)
{
    if (c->lprev)
        c->lprev->lnext = c->lnext;
    else
        s->mru = c->lnext;
    if (c->lnext)
        c->lnext->lprev = c->lprev;
    else
        s->lru = c->lprev;
    c->lprev = c->lnext = NULL;
}

static void lru_front(hot_shard *s, hot_chunk *c)
{
    c->lprev = NULL;
    c->lnext = s->mru;
    if (s->mru)
        s->mru->lprev = c;
    s->mru = c;
    if (!s->lru)
        s->lru = c;
}

static hot_chunk **tab_slot(hot_shard *s, const uint8_t key[32])
{
    hot_chunk **p = &s->tab[bucket_of(s, key)];
    while (*p && memcmp((*p)->key, key, 32) != 0)
        p = &(*p)->hnext;
    return p;
}

/* Twice the buckets once entries outnumber them (no memory: stay). */
static void tab_grow(hot_shard *s)
{
    if (s->count <= s->nb)
        return;
    size_t onb = s->nb;
    hot_chunk **nt = skv_calloc(onb * 2, sizeof *nt), **ot = s->tab;
    if (!nt)
        return;
    s->tab = nt;
    s->nb = onb * 2;
    for (size_t i = 0; i < onb; i++)
        for (hot_chunk *c = ot[i], *nx; c; c = nx) {
            nx = c->hnext;
            size_t b = bucket_of(s, c->key);
            c->hnext = nt[b];
            nt[b] = c;
        }
    skv_free(ot);
}

/* Take c (in the slot p of its shard s) out of the tier; the caller
 * lets the tier's reference go after unlocking. */
static void shard_remove(skv_hot *h, hot_shard *s, hot_chunk **p)
{
    hot_chunk *c = *p;
    *p = c->hnext;
    c->hnext = NULL;
    lru_unlink(s, c);
    c->in_tier = 0;
    s->count--;
    atomic_fetch_sub(&h->bytes, c->bytes);
    atomic_fetch_sub(&h->entries, 1);
}

/* ---- the tier ----------------------------------------------------------------------- */

hot_chunk *skv_hot_get(skv_hot *h, const uint8_t key[32])
{
    hot_shard *s = shard_of(h, key);
    pthread_mutex_lock(&s->mu);
    hot_chunk *c = *tab_slot(s, key);
    if (c) {
        skv_hot_ref(c);
        c->last = atomic_fetch_add_explicit(&h->tick, 1, memory_order_relaxed) + 1;
        if (s->mru != c) {
            lru_unlink(s, c);
            lru_front(s, c);
        }
        s->hits++;
    } else {
        s->misses++;
    }
    pthread_mutex_unlock(&s->mu);
    return c;
}

/* Evict the least recently used entry of the whole tier; 0 when empty. */
static int evict_one(skv_hot *h)
{
    int best = -1;
    uint64_t oldest = UINT64_MAX;
    for (int i = 0; i < HOT_SHARDS; i++) {
        hot_shard *s = &h->sh[i];
        pthread_mutex_lock(&s->mu);
        if (s->lru && s->lru->last < oldest) {
            oldest = s->lru->last;
            best = i;
        }
        pthread_mutex_unlock(&s->mu);
    }
    if (best < 0)
        return 0;
    hot_shard *s = &h->sh[best];
    pthread_mutex_lock(&s->mu);
    hot_chunk *c = s->lru;
    if (c) { /* touched meanwhile: still one of the oldest */
        shard_remove(h, s, tab_slot(s, c->key));
        s->evictions++;
    }
    pthread_mutex_unlock(&s->mu);
    skv_hot_unref(c);
    return 1;
}

void skv_hot_put(skv_hot *h, hot_chunk *c)
{
    if (c->bytes > h->budget)
        return;
    hot_shard *s = shard_of(h, c->key);
    pthread_mutex_lock(&s->mu);
    hot_chunk **p = tab_slot(s, c->key);
    if (*p || c->in_tier) {
        /* the same record decoded twice (two readers at once): one copy */
        pthread_mutex_unlock(&s->mu);
        return;
    }
    skv_hot_ref(c);
    c->in_tier = 1;
    c->last = atomic_fetch_add_explicit(&h->tick, 1, memory_order_relaxed) + 1;
    *p = c;
    lru_front(s, c);
    s->count++;
    s->inserts++;
    atomic_fetch_add(&h->bytes, c->bytes);
    atomic_fetch_add(&h->entries, 1);
    tab_grow(s);
    pthread_mutex_unlock(&s->mu);
    while (atomic_load(&h->bytes) > h->budget && evict_one(h))
        ;
}

void skv_hot_drop(skv_hot *h, const uint8_t key[32])
{
    hot_shard *s = shard_of(h, key);
    pthread_mutex_lock(&s->mu);
    hot_chunk **p = tab_slot(s, key), *c = *p;
    if (c) {
        shard_remove(h, s, p);
        s->drops++;
    }
    pthread_mutex_unlock(&s->mu);
    skv_hot_unref(c);
}

void skv_hot_stat(skv_hot *h, skv_hot_stats *o)
{
    memset(o, 0, sizeof *o);
    o->budget = h->budget;
    for (int i = 0; i < HOT_SHARDS; i++) {
        hot_shard *s = &h->sh[i];
        pthread_mutex_lock(&s->mu);
        o->hits += s->hits;
        o->misses += s->misses;
        o->inserts += s->inserts;
        o->evictions += s->evictions;
        o->drops += s->drops;
        pthread_mutex_unlock(&s->mu);
    }
    o->bytes = atomic_load(&h->bytes);
    o->entries = atomic_load(&h->entries);
}

void skv_hot_free(skv_hot *h)
{
    if (!h)
        return;
    for (int i = 0; i < HOT_SHARDS; i++) {
        hot_shard *s = &h->sh[i];
        for (hot_chunk *c = s->mru, *nx; c; c = nx) {
            nx = c->lnext;
            c->in_tier = 0;
            skv_hot_unref(c);
        }
        skv_free(s->tab);
        pthread_mutex_destroy(&s->mu);
    }
    skv_free(h);
}
