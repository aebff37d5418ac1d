/* seqkv_stat (seqkv.h): what a store or a tenant holds, counted over the
 * in-memory tries -- unique token positions, raw and stored bytes, by
 * level -- and the LMDB map's use. */
#include <stdlib.h>
#include <string.h>

#include "store_priv.h"


typedef struct {
    seqkv_stats *s;
    size_t per_token; /* raw KV bytes per token */
    const skv_trie *t;
} stat_ctx;

static int tok_cmp(const void *a, const void *b)
{
    const skv_irec *x = *(skv_irec *const *)a, *y = *(skv_irec *const *)b;
    size_t n = x->tr.n < y->tr.n ? x->tr.n : y->tr.n;
    for (size_t i = 0; i < n; i++)
        if (x->tr.tokens[i] != y->tr.tokens[i])
            return x->tr.tokens[i] < y->tr.tokens[i] ? -1 : 1;
    return (x->tr.n > y->tr.n) - (x->tr.n < y->tr.n);
}

/* Unique token positions below one node: the siblings' token strings
 * sorted, minus the common prefix of each neighbouring pair. */
static uint64_t node_unique(const skv_trie *t, const uint8_t *node)
{
    size_t n = skv_irec_children(t, node, NULL, 0);
    skv_irec **v = skv_malloc(n * sizeof *v);
    if (!v)
        return 0;
    skv_irec_children(t, node, v, n);
    qsort(v, n, sizeof *v, tok_cmp);
    uint64_t u = 0;
    for (size_t i = 0; i < n; i++) {
        u += v[i]->tr.n;
        if (i) {
            size_t c = 0, m = v[i]->tr.n < v[i - 1]->tr.n ? v[i]->tr.n : v[i - 1]->tr.n;
            while (c < m && v[i]->tr.tokens[c] == v[i - 1]->tr.tokens[c])
                c++;
            u -= c;
        }
    }
    skv_free(v);
    return u;
}

static void stat_one(void *vctx, skv_irec *r)
{
    stat_ctx *c = vctx;
    uint64_t tok = r->tr.n - r->tr.lo;
    /* each node once: when r heads its sibling list (asked in O(1): a
     * count of the siblings for each of them made a store of many
     * prompts below one root quadratic) */
    skv_trie_rec *head = skv_trie_first_child(c->t, r->tr.parent);
    if (head && skv_irec_of(head) == r) {
        uint64_t u = node_unique(c->t, r->tr.parent);
        c->s->tokens += u;
        c->s->raw_bytes += u * c->per_token;
    }
    c->s->coded_tokens += tok;
    c->s->chunks++;
    c->s->stored_bytes += r->bytes;
    c->s->centroid_chunks += r->has_centroid;
    c->s->content_chunks += r->by_content;
    if (r->level < SEQKV_LEVELS) {
        c->s->level_tokens[r->level] += tok;
        c->s->level_raw[r->level] += tok * c->per_token;
        c->s->level_stored[r->level] += r->bytes;
    } else if (r->level == SEQKV_LOSSY) {
        c->s->lossy_tokens += tok;
        c->s->lossy_raw += tok * c->per_token;
        c->s->lossy_stored += r->bytes;
    }
}

int seqkv_stat_each(seqkv *db, seqkv_stat_fn fn, void *ctx)
{
    pthread_rwlock_rdlock(&db->rw);
    int rc = SKV_OK;
    for (size_t i = 0; !rc && i < db->nns; i++) {
        ns_ent *e = &db->ns[i];
        const prof_ent *pe = NULL;
        const char *tn = "?";
        for (size_t j = 0; j < db->nprof; j++)
            if (memcmp(db->prof[j].p.id, e->prof_id, 32) == 0)
                pe = &db->prof[j];
        for (size_t j = 0; j < db->nten; j++)
            if (db->ten[j].id == e->tenant)
                tn = db->ten[j].name;
        seqkv_stats st;
        memset(&st, 0, sizeof st);
        stat_ctx c = {&st, pe ? (size_t)pe->p.layers * 2 * pe->C * pe->es : 0, e->trie};
        skv_irec_foreach(e->trie, stat_one, &c);
        st.content_index_bytes = skv_cindex_bytes(e->cx);
        rc = fn(ctx, tn, pe ? pe->p.name : "?", &st);
    }
    pthread_rwlock_unlock(&db->rw);
    return rc;
}

int seqkv_stat(seqkv *db, const char *tenant, seqkv_stats *out)
{
    memset(out, 0, sizeof *out);
    pthread_rwlock_rdlock(&db->rw);
    int rc = SKV_OK;
    tenant_ent *t = NULL;
    if (tenant && !(t = skv_store_find_tenant(db, tenant)))
        rc = skv_error(SKV_ERR_NOT_FOUND, "unknown tenant '%s'", tenant);
    for (size_t i = 0; !rc && i < db->nns; i++) {
        ns_ent *e = &db->ns[i];
        if (t && e->tenant != t->id)
            continue;
        prof_ent *pe = NULL;
        for (size_t j = 0; j < db->nprof; j++)
            if (memcmp(db->prof[j].p.id, e->prof_id, 32) == 0)
                pe = &db->prof[j];
        stat_ctx c = {out, pe ? (size_t)pe->p.layers * 2 * pe->C * pe->es : 0, e->trie};
        skv_irec_foreach(e->trie, stat_one, &c);
        out->content_index_bytes += skv_cindex_bytes(e->cx);
    }
    out->evictions = db->evictions;
    out->tenants = (uint32_t)db->nten - (skv_store_find_tenant(db, SEQKV_SHARED_TENANT) != NULL);
    out->profiles = (uint32_t)db->nprof;
    MDB_envinfo ei;
    MDB_stat ms;
    if (!mdb_env_info(db->env, &ei) && !mdb_env_stat(db->env, &ms)) {
        out->map_size = ei.me_mapsize;
        out->map_used = (uint64_t)(ei.me_last_pgno + 1) * ms.ms_psize;
    }
    pthread_rwlock_unlock(&db->rw);
    return rc;
}

