/* lookup and get (seqkv.h): the longest cached prefix, and its KV. */
#include <string.h>

#include "store_cluster.h"

/* Longest prefix over the tenant's namespace and, when it opted in, the
 * shared one. Caller holds rw (shared). */
int skv_store_match(seqkv *db, const char *tenant, const char *profile, const int32_t *tok,
                        size_t n, match_res *m)
{
    memset(m, 0, sizeof *m);
    if (n > SEQKV_MAX_TOKENS)
        return skv_error(SKV_ERR_TOO_LARGE, "%zu tokens (at most %u)", n, SEQKV_MAX_TOKENS);
    m->pe = profile ? skv_store_profile(db, profile) : NULL;
    if (!m->pe)
        return skv_store_no_profile(db, profile);
    tenant_ent *t = NULL;
    for (size_t i = 0; tenant && i < db->nten; i++)
        if (strcmp(db->ten[i].name, tenant) == 0)
            t = &db->ten[i];
    if (!t)
        return skv_error(SKV_ERR_NOT_FOUND, "unknown tenant '%s'", tenant ? tenant : "");
    const size_t cap = n / (size_t)m->pe->p.chunk + 2;
    m->path = skv_malloc(cap * sizeof *m->path);
    skv_trie_step *tmp = skv_malloc(cap * sizeof *tmp);
    if (!m->path || !tmp) {
        skv_free(tmp);
        return skv_error(SKV_ERR_NOMEM, "match path");
    }
    uint64_t ids[2] = {t->id, t->read_shared ? 1u : 0u};
    for (int k = 0; k < 2; k++) {
        if (!ids[k] || (k == 1 && ids[0] == 1))
            continue;
        ns_ent *e = skv_store_ns(db, ids[k], m->pe->p.id);
        if (!e)
            continue;
        size_t steps;
        size_t got = skv_trie_match(e->trie, tok, n, tmp, cap, &steps);
        if (got > m->matched) {
            m->matched = got;
            m->e = e;
            m->steps = steps;
            memcpy(m->path, tmp, steps * sizeof *tmp);
        }
    }
    skv_free(tmp);
    return SKV_OK;
}

int seqkv_lookup(seqkv *db, const char *tenant, const char *profile, const int32_t *tokens,
                 size_t n, size_t *matched)
{
    *matched = 0;
    match_res m;
    pthread_rwlock_rdlock(&db->rw);
    int rc = skv_store_match(db, tenant, profile, tokens, n, &m);
    if (!rc)
        *matched = m.matched;
    pthread_rwlock_unlock(&db->rw);
    skv_free(m.path);
    return rc;
}

/* ---- get ---------------------------------------------------------------------------- */

typedef struct {
    const prof_ent *pe;
    seqkv_layer_fn fn;
    void *ctx;
} layer_ctx;

static int layer_cb(void *vctx, const seqbuf *s, size_t a, size_t b)
{
    layer_ctx *c = vctx;
    const size_t row = c->pe->C * c->pe->es;
    for (int l = 0; l < c->pe->p.layers; l++) {
        int rc = c->fn(c->ctx, a, b - a, l, s->kv[0] + ((size_t)l * s->stride + a) * row,
                       s->kv[1] + ((size_t)l * s->stride + a) * row);
        if (rc)
            return rc;
    }
    return SKV_OK;
}

int skv_store_match_want(seqkv *db, const char *tenant, const char *profile, const int32_t *tok,
                         size_t n, size_t *want, match_res *m)
{
    int rc = skv_store_match(db, tenant, profile, tok, n, m);
    if (!rc && *want == 0)
        *want = m->matched;
    if (!rc && (*want > m->matched || *want == 0))
        rc = skv_error(SKV_ERR_NOT_FOUND, "only %zu of the %zu tokens asked for are cached",
                       m->matched, *want ? *want : n);
    return rc;
}

static int get_common(seqkv *db, const char *tenant, const char *profile, const int32_t *tokens,
                      size_t n, size_t want, unsigned flags, chunk_fn fn, void *fctx, seqbuf *s,
                      size_t *got,
                      prof_ent **pe_out)
{
    *got = 0;
    match_res m;
    memset(s, 0, sizeof *s);
    pthread_rwlock_rdlock(&db->rw);
    int rc = skv_store_match_want(db, tenant, profile, tokens, n, &want, &m);
    if (!rc)
        rc = skv_store_lossy_check(&m, want, flags);
    if (!rc)
        rc = skv_seqbuf_init(s, m.pe, m.steps * (size_t)m.pe->p.chunk);
    MDB_txn *txn = NULL;
    if (!rc) {
        int mrc = mdb_txn_begin(db->env, NULL, MDB_RDONLY, &txn);
        rc = mrc ? skv_mdb_error(mrc, "begin transaction") : SKV_OK;
    }
    if (!rc) {
        dec_ctx c = {db, txn, m.e, m.pe, s, skv_store_tick(db), NULL, SKV_READER};
        rc = skv_store_decode_path(&c, m.path, m.steps, fn, fctx, want);
        skv_centroid_free(c.cent);
    }
    if (txn)
        mdb_txn_abort(txn);
    pthread_rwlock_unlock(&db->rw);
    skv_free(m.path);
    if (!rc) {
        *got = want;
        *pe_out = m.pe;
    } else {
        skv_seqbuf_free(s);
    }
    return rc;
}

int skv_store_get_layers(seqkv *db, const char *tenant, const char *profile, const int32_t *tokens,
                         size_t n, size_t want, unsigned flags, seqkv_layer_fn fn, void *ctx,
                         size_t *got)
{
    seqbuf s;
    prof_ent *pe = NULL;
    layer_ctx lc = {NULL, fn, ctx};
    /* the profile is needed by the callback before get_common returns */
    pthread_rwlock_rdlock(&db->rw);
    lc.pe = profile ? skv_store_profile(db, profile) : NULL;
    int rc0 = lc.pe ? SKV_OK : skv_store_no_profile(db, profile);
    pthread_rwlock_unlock(&db->rw);
    if (rc0)
        return rc0;
    int rc = get_common(db, tenant, profile, tokens, n, want, flags, layer_cb, &lc, &s, got, &pe);
    skv_seqbuf_free(&s);
    return rc;
}
