/* put, lookup, get, del and eviction (seqkv.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_cluster.h"

/* Shortest shared start of a chunk taken from a sibling (a base), unless
 * the new record simply extends it. */
#define SKV_MIN_BASE 16

/* A put batch commits early once its records reach this many bytes. */
#define SKV_BATCH_BYTES (64u << 20)

/* ---- a sequence being coded or decoded ------------------------------------------ */

/* Tokens and KV of positions [0, stride) in the coder's layout: K and V
 * each [layers][stride][C] dtype elements. */
typedef struct {
    size_t stride;
    int32_t *tok;
    uint8_t *kv[2];
} seqbuf;

static void seqbuf_free(seqbuf *s)
{
    skv_free(s->tok);
    skv_free(s->kv[0]);
    skv_free(s->kv[1]);
    memset(s, 0, sizeof *s);
}

static int seqbuf_init(seqbuf *s, const prof_ent *pe, size_t stride)
{
    memset(s, 0, sizeof *s);
    size_t bytes = (size_t)pe->p.layers * (stride ? stride : 1) * pe->C * pe->es;
    s->stride = stride;
    s->tok = skv_calloc(stride ? stride : 1, sizeof(int32_t));
    s->kv[0] = skv_malloc(bytes);
    s->kv[1] = skv_malloc(bytes);
    if (!s->tok || !s->kv[0] || !s->kv[1]) {
        seqbuf_free(s);
        return skv_error(SKV_ERR_NOMEM, "KV buffers for %zu tokens", stride);
    }
    return SKV_OK;
}

/* Checksum of positions [a, b) in stream order (layer, K then V). */
static uint64_t kv_checksum(const prof_ent *pe, const seqbuf *s, size_t a, size_t b)
{
    const size_t row = pe->C * pe->es;
    uint64_t h = 0;
    for (int l = 0; l < pe->p.layers; l++)
        for (int kv = 0; kv < 2; kv++)
            h = skv_checksum64(s->kv[kv] + ((size_t)l * s->stride + a) * row, (b - a) * row, h);
    return h;
}

/* ---- decoding records ---------------------------------------------------------- */

typedef struct {
    seqkv *db;
    MDB_txn *txn;
    ns_ent *e;
    prof_ent *pe;
    seqbuf *s;
    uint64_t tick;
    skv_centroid *cent; /* the last centroid decoded (members share it) */
} dec_ctx;

static __thread int centroid_depth;

/* ---- put batches ------------------------------------------------------------------ */

/* The writer's batch (db->batch, under wlock): records coded and indexed
 * hidden, their images waiting for the one commit that writes them all;
 * and the records whose recency that commit saves. */
typedef struct {
    ns_ent *e;
    uint8_t key[32];
    uint8_t *img;
    size_t len;
} pend_rec;

typedef struct {
    ns_ent *e;
    uint8_t key[32];
} pend_tick;

struct skv_put_batch {
    pend_rec *rec;
    size_t nrec, rec_cap;
    pend_tick *tick;
    size_t ntick, tick_cap;
    uint64_t bytes;
};

static const pend_rec *pend_find(const struct skv_put_batch *pb, const uint8_t key[32])
{
    for (size_t i = pb ? pb->nrec : 0; i-- > 0;)
        if (memcmp(pb->rec[i].key, key, 32) == 0)
            return &pb->rec[i];
    return NULL;
}

static int batch_reserve(struct skv_put_batch *pb, size_t nrec, size_t ntick)
{
    if (pb->nrec + nrec > pb->rec_cap) {
        size_t cap = (pb->nrec + nrec) * 2;
        pend_rec *r = skv_realloc(pb->rec, cap * sizeof *r);
        if (!r)
            return skv_error(SKV_ERR_NOMEM, "put batch");
        pb->rec = r;
        pb->rec_cap = cap;
    }
    if (pb->ntick + ntick > pb->tick_cap) {
        size_t cap = (pb->ntick + ntick) * 2;
        pend_tick *t = skv_realloc(pb->tick, cap * sizeof *t);
        if (!t)
            return skv_error(SKV_ERR_NOMEM, "put batch");
        pb->tick = t;
        pb->tick_cap = cap;
    }
    return SKV_OK;
}

/* Forget the batch's records from `from` on (never written): out of the
 * index, newest first, and their images freed. */
static void batch_drop(seqkv *db, struct skv_put_batch *pb, size_t from)
{
    pthread_rwlock_wrlock(&db->rw);
    while (pb->nrec > from) {
        pend_rec *p = &pb->rec[--pb->nrec];
        skv_trie_rec *t = skv_trie_find(p->e->trie, p->key);
        if (t && t->hidden)
            skv_store_unindex(db, p->e, t, 1);
        pb->bytes -= p->len;
        skv_free(p->img);
    }
    if (from == 0)
        pb->ntick = 0;
    pthread_rwlock_unlock(&db->rw);
}

/* Build the centroid predictions of a member record's positions [a, b). */
static int member_aux(dec_ctx *c, const skv_rec *r, skv_delta *d, size_t a, size_t b,
                      skv_delta_aux *aux, float **bufs)
{
    const prof_ent *pe = c->pe;
    const size_t n = b - a, L = (size_t)pe->p.layers, nw = L * 2 * (size_t)pe->p.kv_heads;
    skv_trie_rec *tip = skv_trie_find(c->e->trie, r->centroid);
    if (!tip)
        return skv_error(SKV_ERR_CORRUPT, "a member record's centroid is missing");
    int rc = SKV_OK;
    if (!c->cent || memcmp(c->cent->tip_key, r->centroid, 32) != 0) {
        skv_centroid_free(c->cent);
        c->cent = skv_calloc(1, sizeof *c->cent);
        if (!c->cent)
            return skv_error(SKV_ERR_NOMEM, "centroid");
        if (++centroid_depth > 16)
            rc = skv_error(SKV_ERR_CORRUPT, "centroid references nest too deep");
        else
            rc = skv_store_decode_chain(c->db, c->txn, c->e, c->pe, tip, &c->cent->nc,
                                        &c->cent->tok, &c->cent->k, &c->cent->v);
        centroid_depth--;
        if (rc) {
            skv_centroid_free(c->cent);
            c->cent = NULL;
            return rc;
        }
        memcpy(c->cent->tip_key, r->centroid, 32);
    }
    int32_t *al = skv_malloc(n * sizeof *al);
    bufs[0] = skv_malloc(L * n * pe->C * sizeof(float));
    bufs[1] = skv_malloc(L * n * pe->C * sizeof(float));
    bufs[2] = skv_malloc(nw * 3 * sizeof(float));
    if (!al || !bufs[0] || !bufs[1] || !bufs[2])
        rc = skv_error(SKV_ERR_NOMEM, "centroid predictions");
    uint32_t nc = 0;
    if (!rc)
        rc = skv_side_read(pe, r->side, r->side_len, n, &nc, al, bufs[2], bufs[2] + 2 * nw);
    if (!rc && nc != c->cent->nc)
        rc = skv_error(SKV_ERR_CORRUPT, "centroid length differs from the member's record");
    if (!rc)
        rc = skv_centroid_pred(pe, d, c->cent->tok, c->cent->k, c->cent->v, c->cent->nc, al, a, b,
                               bufs[0], bufs[1]);
    skv_free(al);
    aux->pred[0] = bufs[0];
    aux->pred[1] = bufs[1];
    aux->w = bufs[2];
    aux->sscale = bufs[2] + 2 * nw;
    return rc;
}

static int decode_rec(dec_ctx *c, skv_trie_rec *t, int depth);

/* Decode the streams of a parsed record into positions [P + lo, P + n). */
static int decode_streams(dec_ctx *c, const skv_rec *r, size_t P)
{
    const prof_ent *pe = c->pe;
    seqbuf *s = c->s;
    const size_t L = (size_t)pe->p.layers, row = pe->C * pe->es, a = P + r->lo, b = P + r->n;
    if (r->nstreams != 2 * L)
        return skv_error(SKV_ERR_CORRUPT, "chunk record has %u streams for %zu layers", r->nstreams, L);
    if (r->level == SEQKV_RAW) {
        const uint8_t *p = r->streams;
        for (size_t j = 0; j < 2 * L; j++) {
            size_t sz = skv_load32_le(r->sizes + 4 * j);
            if (sz != (b - a) * row)
                return skv_error(SKV_ERR_CORRUPT, "raw stream of %zu bytes, expected %zu", sz,
                                 (b - a) * row);
            memcpy(s->kv[j & 1] + ((j / 2) * s->stride + a) * row, p, sz);
            p += sz;
        }
        return SKV_OK;
    }
    size_t offs[2 * 4096 + 1];
    offs[0] = 0;
    for (size_t j = 0; j < 2 * L; j++)
        offs[j + 1] = offs[j] + skv_load32_le(r->sizes + 4 * j);
    skv_streams in = {(uint8_t *)r->streams, r->streams_len, 0, offs, 2 * L, 0};
    skv_delta_aux aux;
    float *bufs[3] = {NULL, NULL, NULL};
    int rc = SKV_OK;
    coder_ent *ce = NULL;
    if (!(r->flags & SKV_REC_CENTROID) && r->side_len)
        rc = skv_error(SKV_ERR_CORRUPT, "side info in a record without a centroid");
    if (!rc)
        rc = skv_store_coder(c->db, c->txn, c->pe, r->calib, r->level, &ce);
    if (!rc && (r->flags & SKV_REC_CENTROID))
        rc = member_aux(c, r, ce->d, a, b, &aux, bufs);
    if (!rc)
        rc = skv_delta_decode_range(ce->d, s->tok, a, b, s->stride, &in, 0,
                                    (r->flags & SKV_REC_CENTROID) ? &aux : NULL, s->kv[0],
                                    s->kv[1]);
    if (ce)
        skv_store_coder_release(c->db, ce);
    for (int i = 0; i < 3; i++)
        skv_free(bufs[i]);
    return rc;
}

/* Load, verify and decode record t (and first its base), given that
 * positions before its chunk are already decoded. */
static int decode_rec(dec_ctx *c, skv_trie_rec *t, int depth)
{
    const size_t CH = (size_t)c->pe->p.chunk, P = (size_t)t->chunk_index * CH;
    if (depth > (int)CH)
        return skv_error(SKV_ERR_CORRUPT, "base records form a cycle");
    if (P + t->n > c->s->stride)
        return skv_error(SKV_ERR_CORRUPT, "record past the decoded range");
    int rc;
    if (t->has_base) {
        skv_trie_rec *b = skv_trie_find(c->e->trie, t->base);
        if (!b || b->chunk_index != t->chunk_index || b->n < t->lo ||
            memcmp(b->parent, t->parent, 32) != 0)
            return skv_error(SKV_ERR_CORRUPT, "record's base is missing or does not fit");
        if ((rc = decode_rec(c, b, depth + 1)))
            return rc;
    }
    MDB_val k = {32, t->key}, v;
    if (t->hidden) {
        /* the writer's own uncommitted record, from an earlier put of its
         * batch; readers never reach one (skv_trie_match skips them) */
        const pend_rec *p = skv_store_is_writer() ? pend_find(c->db->batch, t->key) : NULL;
        if (!p)
            return skv_error(SKV_ERR_CORRUPT, "a reader reached an uncommitted record");
        v.mv_data = p->img;
        v.mv_size = p->len;
    } else {
        int mrc = mdb_get(c->txn, c->db->db_chunk, &k, &v);
        if (mrc == MDB_NOTFOUND)
            return skv_error(SKV_ERR_CORRUPT, "an indexed chunk record is missing from LMDB");
        if (mrc)
            return skv_mdb_error(mrc, "read chunk");
    }
    skv_rec r;
    if ((rc = skv_rec_parse(v.mv_data, v.mv_size, &r)))
        return rc == SKV_ERR_FORMAT ? skv_error(SKV_ERR_CORRUPT, "damaged chunk record: %s",
                                                skv_error_detail())
                                    : rc;
    if (r.tenant != c->e->tenant || memcmp(r.profile, c->pe->p.id, 32) != 0 || r.n != t->n ||
        r.lo != t->lo || r.chunk_index != t->chunk_index)
        return skv_error(SKV_ERR_CORRUPT, "chunk record does not match its index entry");
    for (uint32_t i = 0; i < r.n; i++) {
        int32_t tk = (int32_t)skv_load32_le(r.tokens + 4 * (size_t)i);
        if (tk != t->tokens[i])
            return skv_error(SKV_ERR_CORRUPT, "chunk record tokens differ from its index entry");
        c->s->tok[P + i] = tk;
    }
    if ((rc = decode_streams(c, &r, P)))
        return rc == SKV_ERR_FORMAT ? skv_error(SKV_ERR_CORRUPT, "damaged coded stream: %s",
                                                skv_error_detail())
                                    : rc;
    if (kv_checksum(c->pe, c->s, P + r.lo, P + r.n) != r.checksum)
        return skv_error(SKV_ERR_CORRUPT, "decoded KV checksum mismatch (chunk %u)", r.chunk_index);
    __atomic_store_n(&t->tick, c->tick, __ATOMIC_RELAXED);
    return SKV_OK;
}

/* Decode the records of a matched path into s (stride >= the path's
 * extent); fn (may be NULL) gets each chunk's layers as they are done. */
typedef int (*chunk_fn)(void *ctx, const seqbuf *s, size_t a, size_t b);

static int decode_path(dec_ctx *c, const skv_trie_step *path, size_t steps, chunk_fn fn,
                       void *fctx, size_t want)
{
    const size_t CH = (size_t)c->pe->p.chunk;
    for (size_t j = 0; j < steps; j++) {
        int rc = decode_rec(c, path[j].rec, 0);
        if (rc)
            return rc;
        size_t a = j * CH, b = a + path[j].used;
        if (b > want)
            b = want;
        if (fn && a < b && (rc = fn(fctx, c->s, a, b)))
            return rc;
        if (b >= want)
            break;
    }
    return SKV_OK;
}

/* ---- namespaces of a call ------------------------------------------------------- */

typedef struct {
    prof_ent *pe;
    ns_ent *e;        /* the namespace that matched best (NULL: none) */
    size_t matched;
    skv_trie_step *path;
    size_t steps;
} match_res;

/* Longest prefix over the tenant's namespace and, when it opted in, the
 * shared one. Caller holds rw (shared). */
static int match_tokens(seqkv *db, const char *tenant, const char *profile, const int32_t *tok,
                        size_t n, match_res *m)
{
    memset(m, 0, sizeof *m);
    if (n > SEQKV_MAX_TOKENS)
        return skv_error(SKV_ERR_TOO_LARGE, "%zu tokens (at most %u)", n, SEQKV_MAX_TOKENS);
    m->pe = profile ? skv_store_profile(db, profile) : NULL;
    if (!m->pe)
        return skv_error(SKV_ERR_NOT_FOUND, "no profile '%s'", profile ? profile : "");
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
    int rc = match_tokens(db, tenant, profile, tokens, n, &m);
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

static int get_common(seqkv *db, const char *tenant, const char *profile, const int32_t *tokens,
                      size_t n, size_t want, chunk_fn fn, void *fctx, seqbuf *s, size_t *got,
                      prof_ent **pe_out)
{
    *got = 0;
    match_res m;
    memset(s, 0, sizeof *s);
    pthread_rwlock_rdlock(&db->rw);
    int rc = match_tokens(db, tenant, profile, tokens, n, &m);
    if (!rc && want == 0)
        want = m.matched;
    if (!rc && (want > m.matched || want == 0))
        rc = skv_error(SKV_ERR_NOT_FOUND, "only %zu of the %zu tokens asked for are cached", m.matched,
                       want ? want : n);
    if (!rc)
        rc = seqbuf_init(s, m.pe, m.steps * (size_t)m.pe->p.chunk);
    MDB_txn *txn = NULL;
    if (!rc) {
        int mrc = mdb_txn_begin(db->env, NULL, MDB_RDONLY, &txn);
        rc = mrc ? skv_mdb_error(mrc, "begin transaction") : SKV_OK;
    }
    if (!rc) {
        dec_ctx c = {db, txn, m.e, m.pe, s, skv_store_tick(db), NULL};
        rc = decode_path(&c, m.path, m.steps, fn, fctx, want);
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
        seqbuf_free(s);
    }
    return rc;
}

int seqkv_get(seqkv *db, const char *tenant, const char *profile, const int32_t *tokens, size_t n,
              size_t want, void *out, size_t cap, size_t *got)
{
    seqbuf s;
    prof_ent *pe;
    size_t g;
    int rc = get_common(db, tenant, profile, tokens, n, want, NULL, NULL, &s, &g, &pe);
    if (rc) {
        *got = 0;
        return rc;
    }
    const size_t row = pe->C * pe->es, need = (size_t)pe->p.layers * 2 * g * row;
    *got = g;
    if (need > cap) {
        seqbuf_free(&s);
        return skv_error(SKV_ERR_TOO_LARGE, "%zu tokens need %zu bytes, the buffer holds %zu", g,
                         need, cap);
    }
    uint8_t *o = out;
    for (int l = 0; l < pe->p.layers; l++)
        for (int kv = 0; kv < 2; kv++) {
            memcpy(o, s.kv[kv] + (size_t)l * s.stride * row, g * row);
            o += g * row;
        }
    seqbuf_free(&s);
    return SKV_OK;
}

int seqkv_get_layers(seqkv *db, const char *tenant, const char *profile, const int32_t *tokens,
                     size_t n, size_t want, seqkv_layer_fn fn, void *ctx, size_t *got)
{
    seqbuf s;
    prof_ent *pe = NULL;
    layer_ctx lc = {NULL, fn, ctx};
    /* the profile is needed by the callback before get_common returns */
    pthread_rwlock_rdlock(&db->rw);
    lc.pe = profile ? skv_store_profile(db, profile) : NULL;
    pthread_rwlock_unlock(&db->rw);
    if (!lc.pe)
        return skv_error(SKV_ERR_NOT_FOUND, "no profile '%s'", profile ? profile : "");
    int rc = get_common(db, tenant, profile, tokens, n, want, layer_cb, &lc, &s, got, &pe);
    seqbuf_free(&s);
    return rc;
}

/* ---- eviction ---------------------------------------------------------------------- */

typedef struct {
    seqkv *db;
    uint64_t tenant; /* 0: any */
    skv_trie_rec *best;
    ns_ent *best_ns;
    ns_ent *cur;
} pick_ctx;

static void pick_one(void *vctx, skv_trie_rec *r)
{
    pick_ctx *c = vctx;
    if (r->deps || r->evicting || r->hidden)
        return;
    if (!c->best || r->tick < c->best->tick)
        c->best = r, c->best_ns = c->cur;
}

typedef struct {
    skv_trie_rec *r;
    ns_ent *e;
} victim;

/* Evict least-recently-used records that nothing depends on until `need`
 * bytes are free under the limit (tenant 0: the store's budget, else the
 * tenant's). Records marked `evicting` beforehand are protected. */
static int evict(seqkv *db, uint64_t tenant, uint64_t used, uint64_t limit, uint64_t need,
                 int *count)
{
    victim *v = NULL;
    size_t nv = 0, cap = 0;
    uint64_t freed = 0;
    int rc = SKV_OK;
    while (used - freed + need > limit) {
        pick_ctx pc = {db, tenant, NULL, NULL, NULL};
        for (size_t i = 0; i < db->nns; i++) {
            if (tenant && db->ns[i].tenant != tenant)
                continue;
            pc.cur = &db->ns[i];
            skv_trie_foreach(db->ns[i].trie, pick_one, &pc);
        }
        if (!pc.best)
            break;
        if (nv == cap) {
            cap = cap ? cap * 2 : 16;
            victim *nvv = skv_realloc(v, cap * sizeof *v);
            if (!nvv) {
                rc = skv_error(SKV_ERR_NOMEM, "eviction list");
                break;
            }
            v = nvv;
        }
        v[nv].r = pc.best;
        v[nv++].e = pc.best_ns;
        pc.best->evicting = 1;
        skv_store_deps(pc.best_ns, pc.best, -1);
        freed += pc.best->bytes;
    }
    if (!rc && used - freed + need > limit)
        rc = skv_error(SKV_ERR_TOO_LARGE,
                       "%llu bytes do not fit in the budget of %llu (everything evictable is gone)",
                       (unsigned long long)need, (unsigned long long)limit);
    /* deleting needs a few fresh pages too (copy-on-write): on
     * MDB_MAP_FULL grow the map, or delete one record per transaction */
    size_t done = 0, batch = nv;
    for (int attempt = 0; !rc && done < nv && attempt < 64;) {
        size_t end = done + batch < nv ? done + batch : nv;
        MDB_txn *txn = NULL;
        int mrc = mdb_txn_begin(db->env, NULL, 0, &txn);
        for (size_t i = done; !mrc && i < end; i++) {
            MDB_val k = {32, v[i].r->key};
            mrc = mdb_del(txn, db->db_chunk, &k, NULL);
            if (!mrc) {
                mrc = mdb_del(txn, db->db_evict, &k, NULL);
                if (mrc == MDB_NOTFOUND)
                    mrc = 0;
            }
        }
        if (!mrc) {
            uint8_t b8[8];
            MDB_val mk = {9, "evictions"}, mv = {8, b8};
            skv_store64_le(b8, db->evictions + end);
            mrc = mdb_put(txn, db->db_meta, &mk, &mv, 0);
        }
        if (!mrc)
            mrc = mdb_txn_commit(txn);
        else if (txn)
            mdb_txn_abort(txn);
        if (!mrc) {
            done = end;
            continue;
        }
        attempt++;
        if (mrc != MDB_MAP_FULL)
            rc = skv_mdb_error(mrc, "evict");
        else if (skv_store_grow(db) != SKV_OK) {
            if (batch == 1)
                rc = skv_error(SKV_ERR_TOO_LARGE, "LMDB map full at its limit; nothing can be freed");
            batch = 1;
        }
    }
    if (rc && done) {
        /* what was deleted is gone: keep the index true to it, and give
         * the rest back */
        for (size_t i = done; i < nv; i++) {
            v[i].r->evicting = 0;
            skv_store_deps(v[i].e, v[i].r, +1);
        }
        nv = done;
    }
    int keep_rc = rc;
    if (rc && done)
        rc = SKV_OK;
    if (rc) {
        for (size_t i = 0; i < nv; i++) {
            v[i].r->evicting = 0;
            skv_store_deps(v[i].e, v[i].r, +1);
        }
    } else if (nv) {
        pthread_rwlock_wrlock(&db->rw);
        for (size_t i = 0; i < nv; i++)
            skv_store_unindex(db, v[i].e, v[i].r, 0);
        db->evictions += nv;
        pthread_rwlock_unlock(&db->rw);
    }
    if (count)
        *count += (int)nv;
    skv_free(v);
    if (keep_rc)
        return keep_rc;
    return rc;
}

/* ---- put ------------------------------------------------------------------------------ */

typedef struct {
    uint8_t key[32];
    skv_rec r;
    uint8_t *img;
    size_t len;
    float *sur;
} newrec;

/* Per-token surprisal in bits: the client's, else the profile model's
 * log-probabilities, else NULL (readers count 16 bits a token). The model
 * runs only over the new positions >= from, reading the earlier positions'
 * KV from the put itself (sb, the coder layout), so a long cached prefix
 * costs nothing; the caller fills cached positions from their records. */
static int surprisal(seqkv *db, prof_ent *pe, const int32_t *tok, size_t n, size_t from,
                     const seqbuf *sb, const float *given, float **out)
{
    *out = NULL;
    float *s = skv_calloc(n, sizeof(float));
    if (!s)
        return skv_error(SKV_ERR_NOMEM, "surprisal");
    if (given) {
        for (size_t i = 0; i < n; i++)
            s[i] = given[i] >= 0 && given[i] < 1e6f ? given[i] : 0.0f;
        *out = s;
        return SKV_OK;
    }
    skv_model *m = NULL;
    if (!pe->p.model[0] || skv_store_profile_model(db, pe, &m) || !m) {
        skv_free(s);
        return SKV_OK;
    }
    const skv_model_config *c = skv_model_cfg(m);
    const size_t ctx = from > 0 ? from - 1 : 0, run = n - ctx, L = (size_t)pe->p.layers,
                 row = pe->C * pe->es;
    float *lp = skv_malloc(run * (size_t)c->vocab_size * sizeof(float));
    uint8_t *pk = ctx ? skv_malloc(L * ctx * row) : NULL, *pv = ctx ? skv_malloc(L * ctx * row) : NULL;
    skv_kvcache *kc = NULL;
    int rc = lp && (!ctx || (pk && pv)) ? skv_kvcache_create(c, n, &kc)
                                        : skv_error(SKV_ERR_NOMEM, "surprisal");
    if (!rc && ctx) {
        for (size_t l = 0; l < L; l++) {
            memcpy(pk + l * ctx * row, sb->kv[0] + l * sb->stride * row, ctx * row);
            memcpy(pv + l * ctx * row, sb->kv[1] + l * sb->stride * row, ctx * row);
        }
        rc = skv_kvcache_append(kc, pe->p.dtype, pk, pv, ctx);
    }
    if (!rc) {
        skv_forward_opts o = {.pool = db->pool, .logprobs = lp};
        rc = skv_model_forward(m, kc, tok + ctx, run, &o);
    }
    if (!rc) {
        if (ctx == 0)
            s[0] = tok[0] == c->bos_id ? 0.0f : (float)(log((double)c->vocab_size) / log(2.0));
        for (size_t i = ctx + 1; i < n; i++)
            s[i] = -lp[(i - 1 - ctx) * (size_t)c->vocab_size + (size_t)tok[i]] / 0.69314718f;
    }
    skv_kvcache_free(kc);
    skv_free(lp);
    skv_free(pk);
    skv_free(pv);
    if (rc) {
        skv_free(s);
        return rc;
    }
    *out = s;
    return SKV_OK;
}

/* Effective level for new chunks: the asked one if the profile's
 * calibration (and model) allow it, else the best one below. */
static int put_level(prof_ent *pe, int asked)
{
    int l = asked;
    if (l > SEQKV_RAW && !pe->p.has_calib)
        return SEQKV_RAW;
    if (l >= SEQKV_SPEC && !pe->p.model[0])
        l = SEQKV_CTX;
    return l;
}

static int code_record(seqkv *db, MDB_txn *txn, prof_ent *pe, int level, const seqbuf *s,
                       size_t a, size_t b, newrec *nr, skv_streams *st)
{
    const size_t L = (size_t)pe->p.layers, row = pe->C * pe->es;
    int rc = SKV_OK;
    coder_ent *ce = NULL;
    if (level > SEQKV_RAW) {
        if ((rc = skv_store_coder(db, txn, pe, pe->p.calib_id, level, &ce)))
            return rc;
        /* a token the calibration has never seen (its vocabulary came from
         * the data, no model) cannot be predicted: this record stays raw */
        const int vocab = skv_calib_shape(ce->cal)->vocab;
        for (size_t t = 0; t < b; t++)
            if (s->tok[t] >= vocab) {
                if (level >= SEQKV_SPEC) {
                    skv_store_coder_release(db, ce);
                    return skv_error(SKV_ERR_ARG, "token id %d outside the model's vocabulary (%d)",
                                     s->tok[t], vocab);
                }
                level = SEQKV_RAW;
                break;
            }
        if (level == SEQKV_RAW) {
            skv_store_coder_release(db, ce);
            ce = NULL;
        }
    }
    nr->r.level = (uint8_t)level;
    if (level == SEQKV_RAW) {
        for (size_t l = 0; l < L && !rc; l++)
            for (int kv = 0; kv < 2 && !rc; kv++)
                rc = skv_streams_append(st, s->kv[kv] + (l * s->stride + a) * row, (b - a) * row);
    } else {
        rc = skv_delta_encode_range(ce->d, s->tok, a, b, s->stride, s->kv[0], s->kv[1], NULL, st);
        skv_store_coder_release(db, ce);
        memcpy(nr->r.calib, pe->p.calib_id, 16);
    }
    return rc;
}

/* Code positions [a, b) of a record again against the centroid; keep it
 * (streams swapped into *st, side info out) when it is smaller. */
static int try_centroid(seqkv *db, MDB_txn *txn, prof_ent *pe, const skv_centroid *cent,
                        const seqbuf *s, size_t a, size_t b, newrec *q, skv_streams *st,
                        uint8_t **side, size_t *side_len, int *used)
{
    *used = 0;
    const int32_t *al = cent->align + a;
    const size_t n = b - a, L = (size_t)pe->p.layers, C = pe->C,
                 nw = L * 2 * (size_t)pe->p.kv_heads;
    size_t aligned = 0;
    for (size_t t = 0; t < n; t++)
        aligned += al[t] >= 0;
    if (!aligned)
        return SKV_OK;
    float *buf = skv_malloc((6 * L * n * C + 3 * nw) * sizeof(float));
    if (!buf)
        return skv_error(SKV_ERR_NOMEM, "centroid coding");
    float *mu[2] = {buf, buf + L * n * C}, *ap[2] = {buf + 2 * L * n * C, buf + 3 * L * n * C},
          *x[2] = {buf + 4 * L * n * C, buf + 5 * L * n * C}, *w = buf + 6 * L * n * C,
          *ss = w + 2 * nw;
    coder_ent *ce;
    skv_streams st2 = {0};
    int rc = skv_store_coder(db, txn, pe, q->r.calib, q->r.level, &ce);
    if (rc) {
        skv_free(buf);
        return rc;
    }
    rc = skv_delta_predict_range(ce->d, s->tok, a, b, s->stride, s->kv[0], s->kv[1], mu[0], mu[1]);
    if (!rc)
        rc = skv_centroid_pred(pe, ce->d, cent->tok, cent->k, cent->v, cent->nc, al, a, b, ap[0], ap[1]);
    if (!rc) {
        for (int kv = 0; kv < 2; kv++)
            for (size_t l = 0; l < L; l++)
                skv_cast_to_f32(pe->p.dtype, x[kv] + l * n * C,
                                s->kv[kv] + (l * s->stride + a) * C * pe->es, n * C);
        skv_centroid_fit(pe, (const float **)x, (const float **)mu, (const float **)ap, n, w, ss);
        skv_delta_aux aux = {{ap[0], ap[1]}, w, ss};
        rc = skv_delta_encode_range(ce->d, s->tok, a, b, s->stride, s->kv[0], s->kv[1], &aux, &st2);
    }
    skv_store_coder_release(db, ce);
    const size_t sl = skv_side_size(pe, n);
    if (!rc && st2.len + sl < st->len) {
        uint8_t *sd = skv_malloc(sl);
        if (!sd) {
            rc = skv_error(SKV_ERR_NOMEM, "side info");
        } else {
            skv_side_write(pe, (uint32_t)cent->nc, al, n, w, ss, sd);
            skv_streams t = *st;
            *st = st2;
            st2 = t;
            *side = sd;
            *side_len = sl;
            q->r.flags |= SKV_REC_CENTROID;
            memcpy(q->r.centroid, cent->tip_key, 32);
            *used = 1;
        }
    }
    skv_streams_free(&st2);
    skv_free(buf);
    return rc;
}

/* One attempt at a put, into the writer's batch: its new records coded
 * and indexed hidden (batch_commit writes them). standalone: ignore the cached prefix (code the
 * whole sequence, depend on nothing), for when the budget cannot hold the
 * new records next to the prefix they would depend on; *again asks for
 * that retry. */
static int put_prepare(seqkv *db, seqkv_put_req *req, int standalone, int *again, int *prefix,
                       struct skv_put_batch *pb)
{
    const char *tenant = req->tenant, *profile = req->profile;
    const int32_t *tokens = req->tokens;
    const size_t n = req->n, kv_len = req->kv_len;
    const void *kv = req->kv;
    const seqkv_put_opts *opts = req->opts;
    seqkv_put_result *res = &req->res;
    memset(res, 0, sizeof *res);
    if (db->o.read_only)
        return skv_error(SKV_ERR_ARG, "store opened read-only");
    if (n == 0)
        return skv_error(SKV_ERR_ARG, "put of no tokens");
    if (n > SEQKV_MAX_TOKENS)
        return skv_error(SKV_ERR_TOO_LARGE, "%zu tokens (at most %u)", n, SEQKV_MAX_TOKENS);
    const char *tname = opts && opts->shared ? SEQKV_SHARED_TENANT : tenant;
    prof_ent *pe = profile ? skv_store_profile(db, profile) : NULL;
    tenant_ent *te = NULL;
    int rc = pe ? SKV_OK : skv_error(SKV_ERR_NOT_FOUND, "no profile '%s'", profile ? profile : "");
    const size_t L = pe ? (size_t)pe->p.layers : 0, row = pe ? pe->C * pe->es : 0;
    if (!rc && kv_len != L * 2 * n * row)
        rc = skv_error(SKV_ERR_SHAPE,
                       "KV of %zu bytes for %zu tokens; profile %s needs %zu (%d layers x K,V x %zu "
                       "tokens x %d heads x %d dims x %zu bytes)",
                       kv_len, n, pe->p.name, L * 2 * n * row, pe->p.layers, n, pe->p.kv_heads,
                       pe->p.head_dim, pe->es);
    for (size_t i = 0; !rc && i < n; i++)
        if (tokens[i] < 0)
            rc = skv_error(SKV_ERR_ARG, "negative token id at %zu", i);
    if (!rc && pe->p.model[0]) {
        /* a profile with a model knows its vocabulary, at every level */
        skv_model *mm;
        if (!(rc = skv_store_profile_model(db, pe, &mm))) {
            const int vocab = skv_model_cfg(mm)->vocab_size;
            for (size_t i = 0; !rc && i < n; i++)
                if (tokens[i] >= vocab)
                    rc = skv_error(SKV_ERR_ARG, "token id %d at %zu outside the model's vocabulary (%d)",
                                   tokens[i], i, vocab);
        }
    }
    if (!rc)
        rc = skv_store_tenant(db, tname ? tname : "", 1, &te);
    ns_ent *e = NULL;
    if (!rc) {
        pthread_rwlock_wrlock(&db->rw);
        rc = skv_store_namespace(db, te->id, pe, &e);
        pthread_rwlock_unlock(&db->rw);
    }
    if (rc)
        return rc;
    const size_t CH = (size_t)pe->p.chunk;
    int level = put_level(pe, opts && opts->level > 0 ? opts->level - 1 : (int)pe->p.level);
    const size_t nchunks = (n + CH - 1) / CH;
    skv_trie_step *path = skv_malloc((nchunks + 1) * sizeof *path);
    newrec *nr = skv_calloc(nchunks, sizeof *nr);
    seqbuf s = {0}, ctx = {0};
    float *sur = NULL;
    size_t steps = 0, m = 0, nnew = 0;
    if (!path || !nr)
        rc = skv_error(SKV_ERR_NOMEM, "put");
    if (!rc) {
        m = standalone ? 0 : skv_trie_match_all(e->trie, tokens, n, path, nchunks + 1, &steps);
        if (!standalone)
            *prefix = steps > 0;
        for (size_t j = 0; j < steps; j++)
            path[j].rec->tick = skv_store_tick(db);
    }
    res->cached_tokens = m;
    if (!rc && m == n)
        goto done; /* everything is cached already */
    if (!rc)
        rc = seqbuf_init(&s, pe, nchunks * CH);
    if (!rc) {
        /* the client's KV into the coder layout */
        const uint8_t *in = kv;
        for (size_t l = 0; l < L; l++)
            for (int k = 0; k < 2; k++, in += n * row)
                memcpy(s.kv[k] + l * s.stride * row, in, n * row);
        memcpy(s.tok, tokens, n * sizeof(int32_t));
    }
    /* context: the cached prefix as stored (the decoder will see it, not
     * the client's copy) whenever the level reads earlier positions */
    if (!rc && m > 0 && level >= SEQKV_CTX) {
        MDB_txn *txn = NULL;
        rc = seqbuf_init(&ctx, pe, steps * CH);
        if (!rc) {
            int mrc = mdb_txn_begin(db->env, NULL, MDB_RDONLY, &txn);
            rc = mrc ? skv_mdb_error(mrc, "begin transaction") : SKV_OK;
        }
        if (!rc) {
            dec_ctx c = {db, txn, e, pe, &ctx, skv_store_tick(db), NULL};
            rc = decode_path(&c, path, steps, NULL, NULL, m);
            skv_centroid_free(c.cent);
        }
        if (txn)
            mdb_txn_abort(txn);
        for (size_t l = 0; !rc && l < L; l++)
            for (int k = 0; k < 2; k++)
                memcpy(s.kv[k] + l * s.stride * row, ctx.kv[k] + l * ctx.stride * row, m * row);
        seqbuf_free(&ctx);
    }
    /* raw records are never coded against a centroid: no model pass for
     * them unless the client sends its surprisal */
    if (!rc && (level > SEQKV_RAW || (opts && opts->surprisal)))
        rc = surprisal(db, pe, tokens, n, m, &s, opts ? opts->surprisal : NULL, &sur);
    if (!rc && sur && !(opts && opts->surprisal) && m % CH) {
        /* the first new record repeats its base's tokens [P, m) */
        const skv_trie_rec *b = path[m / CH].rec;
        for (size_t t = 0; t < m % CH; t++)
            sur[(m / CH) * CH + t] = b->surprisal ? b->surprisal[t] : 16.0f;
    }
    /* code the new records: chunk i0 from m on, then whole chunks */
    MDB_txn *rtxn = NULL;
    if (!rc && level > SEQKV_RAW) {
        int mrc = mdb_txn_begin(db->env, NULL, MDB_RDONLY, &rtxn);
        rc = mrc ? skv_mdb_error(mrc, "begin transaction") : SKV_OK;
    }
    skv_centroid *cent = NULL;
    if (!rc && level > SEQKV_RAW && m > 0 && !db->o.no_centroids)
        rc = skv_cluster_find(db, rtxn, e, pe, tokens, n, m, path, steps, &cent);
    uint64_t total = 0;
    for (size_t i = m / CH; !rc && i < nchunks; i++, nnew++) {
        newrec *q = &nr[nnew];
        const size_t P = i * CH, hi = (n - P < CH ? n - P : CH);
        size_t lo = i == m / CH ? m - P : 0;
        const uint8_t *parent;
        if (i == 0)
            parent = skv_trie_root(e->trie);
        else if (nnew > 0)
            parent = nr[nnew - 1].key;
        else
            parent = path[i - 1].rec->key;
        memset(&q->r, 0, sizeof q->r);
        memcpy(q->r.parent, parent, 32);
        /* positions [P, P + lo) come from the record that matched them when
         * the new one extends it or shares a good part of it; a short
         * shared start (a BOS) is coded again rather than tying the two
         * records together (a base can go only after its dependants) */
        if (lo > 0 && lo < SKV_MIN_BASE && lo < path[i].rec->n)
            lo = 0;
        if (lo > 0) {
            memcpy(q->r.base, path[i].rec->key, 32);
            q->r.flags |= SKV_REC_BASE;
        }
        skv_chain_next(e->secret, parent, tokens + P, hi, q->key);
        q->r.tenant = te->id;
        memcpy(q->r.profile, pe->p.id, 32);
        q->r.chunk_index = (uint32_t)i;
        q->r.n = (uint32_t)hi;
        q->r.lo = (uint32_t)lo;
        if (hi == CH)
            q->r.flags |= SKV_REC_FULL;
        q->r.checksum = kv_checksum(pe, &s, P + lo, P + hi);
        skv_streams st = {0};
        rc = code_record(db, rtxn, pe, level, &s, P + lo, P + hi, q, &st);
        uint8_t *tb = NULL, *sb = NULL, *sz = NULL, *side = NULL;
        size_t side_len = 0;
        int used = 0;
        if (!rc && cent && q->r.level > SEQKV_RAW)
            rc = try_centroid(db, rtxn, pe, cent, &s, P + lo, P + hi, q, &st, &side, &side_len, &used);
        if (used)
            res->centroid_tokens += hi - lo;
        q->r.side = side;
        q->r.side_len = (uint32_t)side_len;
        if (!rc) {
            tb = skv_malloc(hi * 4);
            sb = sur ? skv_malloc(hi * 4) : NULL;
            sz = skv_malloc(st.nstreams * 4 + 4);
            if (!tb || (sur && !sb) || !sz)
                rc = skv_error(SKV_ERR_NOMEM, "record");
        }
        if (!rc) {
            for (size_t t = 0; t < hi; t++) {
                skv_store32_le(tb + 4 * t, (uint32_t)tokens[P + t]);
                if (sb)
                    skv_store32_le(sb + 4 * t, skv_f32_bits(sur[P + t]));
            }
            for (size_t j = 0; j < st.nstreams; j++)
                skv_store32_le(sz + 4 * j, (uint32_t)(st.offs[j + 1] - st.offs[j]));
            q->r.tokens = tb;
            q->r.surprisal = sb;
            q->r.nstreams = (uint32_t)st.nstreams;
            q->r.sizes = sz;
            q->r.streams = st.data;
            q->r.streams_len = st.len;
            q->len = skv_rec_size(&q->r);
            q->img = skv_malloc(q->len);
            if (!q->img)
                rc = skv_error(SKV_ERR_NOMEM, "record");
            else
                skv_rec_write(&q->r, q->img);
            total += q->len;
        }
        skv_free(tb);
        skv_free(sb);
        skv_free(sz);
        skv_free(side);
        skv_streams_free(&st);
        if (!rc) {
            /* keep what the index needs; the image holds the rest */
            skv_rec_parse(q->img, q->len, &q->r);
        }
        res->new_tokens += hi - lo;
    }
    skv_centroid_free(cent);
    if (rtxn)
        mdb_txn_abort(rtxn);
    /* room: the budgets first (protect the path the new records need) */
    for (size_t j = 0; j < steps; j++)
        path[j].rec->evicting = 1;
    if (!rc && db->o.budget)
        rc = evict(db, 0, db->stored, db->o.budget, total, &res->evicted);
    if (!rc && te->budget)
        rc = evict(db, te->id, te->used, te->budget, total, &res->evicted);
    if (rc == SKV_ERR_TOO_LARGE && steps > 0)
        *again = 1; /* the prefix itself is in the way */
    for (size_t j = 0; j < steps; j++)
        path[j].rec->evicting = 0;
    /* index the new records, hidden from readers until the batch commits
     * (later puts of the batch see them: skv_trie_match_all, pend_find) */
    if (!rc)
        rc = batch_reserve(pb, nnew, steps);
    if (!rc) {
        const size_t first = pb->nrec;
        pthread_rwlock_wrlock(&db->rw);
        const uint64_t tk = skv_store_tick(db);
        for (size_t j = 0; j < nnew && !rc; j++) {
            if (skv_trie_find(e->trie, nr[j].key))
                continue; /* the same tokens under the same key: stored already */
            rc = skv_store_index(db, nr[j].key, &nr[j].r, nr[j].len, tk);
            skv_trie_rec *t = rc ? NULL : skv_trie_find(e->trie, nr[j].key);
            if (!t)
                break;
            t->hidden = 1;
            skv_store_deps(e, t, +1);
            pend_rec *p = &pb->rec[pb->nrec++];
            p->e = e;
            memcpy(p->key, nr[j].key, 32);
            p->img = nr[j].img;
            p->len = nr[j].len;
            nr[j].img = NULL;
            pb->bytes += p->len;
            res->chunks++;
            res->bytes += p->len;
        }
        pthread_rwlock_unlock(&db->rw);
        if (rc)
            batch_drop(db, pb, first);
    }
    /* the path's recency goes out with the records */
    for (size_t j = 0; !rc && j < steps; j++) {
        pend_tick *p = &pb->tick[pb->ntick++];
        p->e = e;
        memcpy(p->key, path[j].rec->key, 32);
    }
done:
    for (size_t j = 0; j < nchunks && nr; j++)
        skv_free(nr[j].img);
    skv_free(nr);
    skv_free(path);
    skv_free(sur);
    seqbuf_free(&s);
    if (rc)
        memset(res, 0, sizeof *res);
    return rc;
}

/* Write the batch's records (and its paths' recency) in one transaction,
 * then show them to readers. MDB_MAP_FULL grows the map, or at its limit
 * evicts a quarter of what is evictable, and retries; anything else fails
 * the batch (the caller drops it). */
static int batch_commit(seqkv *db, struct skv_put_batch *pb, int *evicted)
{
    if (pb->nrec == 0) {
        pb->ntick = 0; /* a put of cached tokens only: recency goes out later */
        return SKV_OK;
    }
    for (int attempt = 0;; attempt++) {
        MDB_txn *txn;
        pthread_rwlock_rdlock(&db->rw);
        int mrc = mdb_txn_begin(db->env, NULL, 0, &txn);
        for (size_t j = 0; !mrc && j < pb->nrec; j++) {
            const pend_rec *p = &pb->rec[j];
            const skv_trie_rec *t = skv_trie_find(p->e->trie, p->key);
            MDB_val k = {32, (void *)p->key}, v = {p->len, p->img};
            mrc = mdb_put(txn, db->db_chunk, &k, &v, MDB_NOOVERWRITE);
            if (mrc == MDB_KEYEXIST)
                mrc = 0; /* the same tokens under the same key: already stored */
            uint8_t b[8];
            skv_store64_le(b, t ? t->tick : skv_store_tick(db));
            MDB_val tv = {8, b};
            if (!mrc)
                mrc = mdb_put(txn, db->db_evict, &k, &tv, 0);
        }
        for (size_t j = 0; !mrc && j < pb->ntick; j++) {
            const skv_trie_rec *t = skv_trie_find(pb->tick[j].e->trie, pb->tick[j].key);
            if (!t || t->hidden)
                continue; /* evicted since, or one of the batch's own */
            uint8_t b[8];
            skv_store64_le(b, t->tick);
            MDB_val k = {32, (void *)t->key}, tv = {8, b};
            mrc = mdb_put(txn, db->db_evict, &k, &tv, 0);
        }
        if (!mrc)
            mrc = mdb_txn_commit(txn);
        else
            mdb_txn_abort(txn);
        pthread_rwlock_unlock(&db->rw);
        if (!mrc) {
            pthread_rwlock_wrlock(&db->rw);
            for (size_t j = 0; j < pb->nrec; j++) {
                skv_trie_rec *t = skv_trie_find(pb->rec[j].e->trie, pb->rec[j].key);
                if (t) {
                    t->hidden = 0;
                    t->tick_saved = t->tick;
                }
                skv_free(pb->rec[j].img);
            }
            for (size_t j = 0; j < pb->ntick; j++) {
                skv_trie_rec *t = skv_trie_find(pb->tick[j].e->trie, pb->tick[j].key);
                if (t)
                    t->tick_saved = t->tick;
            }
            pthread_rwlock_unlock(&db->rw);
            pb->nrec = pb->ntick = 0;
            pb->bytes = 0;
            return SKV_OK;
        }
        if (mrc != MDB_MAP_FULL || attempt > 40)
            return skv_mdb_error(mrc, "write chunks");
        int rc = skv_store_grow(db);
        if (rc == SKV_ERR_TOO_LARGE)
            rc = evict(db, 0, db->stored, db->stored * 3 / 4, 0, evicted);
        if (rc)
            return rc;
    }
}

/* One request into the batch, as if put alone: when its cached prefix is
 * in the way of the room it needs, it is put standalone instead. */
static int put_one(seqkv *db, seqkv_put_req *q, struct skv_put_batch *pb, int standalone,
                   int *prefix)
{
    int again = 0;
    memset(&q->res, 0, sizeof q->res);
    int rc = put_prepare(db, q, standalone, &again, prefix, pb);
    if (rc && again && !standalone) {
        int evicted = q->res.evicted;
        rc = put_prepare(db, q, 1, &again, prefix, pb);
        q->res.evicted += evicted;
    }
    return rc;
}

static void req_error(seqkv_put_req *q, int rc)
{
    q->rc = rc;
    snprintf(q->error, sizeof q->error, "%s", rc ? skv_error_detail() : "");
    if (rc)
        memset(&q->res, 0, sizeof q->res);
}

/* One request alone: prepared and committed by itself; its records are
 * dropped again when that fails. */
static int put_alone(seqkv *db, struct skv_put_batch *pb, seqkv_put_req *q, int standalone,
                     int *prefix)
{
    int rc = put_one(db, q, pb, standalone, prefix);
    if (!rc)
        rc = batch_commit(db, pb, &q->res.evicted);
    if (rc)
        batch_drop(db, pb, 0);
    return rc;
}

/* A group's commit failed (its records are dropped): put its requests
 * again one by one, each with its own commit, standalone when its prefix
 * is in the way (at the map limit). */
static void group_retry(seqkv *db, struct skv_put_batch *pb, seqkv_put_req *req, size_t n,
                        const int *prefix, int rc0)
{
    size_t ok = 0;
    for (size_t i = 0; i < n; i++)
        ok += req[i].rc == 0;
    for (size_t i = 0; i < n; i++) {
        if (req[i].rc)
            continue;
        int rc = rc0, pf = prefix[i], tried = 0;
        if (ok > 1) {
            tried = 1;
            rc = put_alone(db, pb, &req[i], 0, &pf);
        }
        if (rc == SKV_ERR_TOO_LARGE && pf) {
            tried = 1;
            rc = put_alone(db, pb, &req[i], 1, &pf);
        }
        if (tried) {
            req_error(&req[i], rc);
        } else { /* the group's own failure: its detail is in error already */
            req[i].rc = rc;
            memset(&req[i].res, 0, sizeof req[i].res);
        }
    }
}

/* Commit the batch's records: those of requests [first, end). */
static void commit_group(seqkv *db, struct skv_put_batch *pb, seqkv_put_req *req, size_t first,
                         size_t end, const int *prefix)
{
    int ev = 0, rc = batch_commit(db, pb, &ev);
    if (rc) {
        char why[sizeof req->error];
        snprintf(why, sizeof why, "%s", skv_error_detail());
        batch_drop(db, pb, 0);
        for (size_t k = first; k < end; k++)
            if (!req[k].rc)
                snprintf(req[k].error, sizeof req[k].error, "%s", why);
        group_retry(db, pb, req + first, end - first, prefix + first, rc);
        return;
    }
    for (size_t k = end; k-- > first;)
        if (!req[k].rc) {
            req[k].res.evicted += ev;
            break;
        }
}

size_t seqkv_put_batch(seqkv *db, seqkv_put_req *req, size_t n)
{
    size_t failed = 0;
    for (size_t i = 0; i < n; i++) {
        req[i].rc = 0;
        req[i].error[0] = 0;
        memset(&req[i].res, 0, sizeof req[i].res);
    }
    if (n == 0)
        return 0;
    int *prefix = skv_calloc(n, sizeof *prefix);
    if (db->o.read_only || !prefix) {
        int rc = prefix ? skv_error(SKV_ERR_ARG, "store opened read-only")
                        : skv_error(SKV_ERR_NOMEM, "put batch");
        for (size_t i = 0; i < n; i++)
            req_error(&req[i], rc);
        skv_free(prefix);
        return n;
    }
    pthread_mutex_lock(&db->wlock);
    skv_store_writer(1);
    struct skv_put_batch pb = {0};
    db->batch = &pb;
    size_t first = 0;
    for (size_t i = 0; i < n; i++) {
        int rc = put_one(db, &req[i], &pb, 0, &prefix[i]);
        if (rc == SKV_ERR_TOO_LARGE && pb.nrec > 0) {
            /* the batch's hidden records cannot be evicted: when they are
             * in the way of the room this put needs, commit them first */
            commit_group(db, &pb, req, first, i, prefix);
            first = i;
            rc = put_one(db, &req[i], &pb, 0, &prefix[i]);
        }
        req_error(&req[i], rc);
        if (pb.bytes < SKV_BATCH_BYTES && i + 1 < n)
            continue;
        commit_group(db, &pb, req, first, i + 1, prefix);
        first = i + 1;
    }
    db->batch = NULL;
    skv_free(pb.rec);
    skv_free(pb.tick);
    skv_store_writer(0);
    pthread_mutex_unlock(&db->wlock);
    skv_free(prefix);
    for (size_t i = 0; i < n; i++)
        failed += req[i].rc != 0;
    return failed;
}

int seqkv_put(seqkv *db, const char *tenant, const char *profile, const int32_t *tokens,
              size_t n, const void *kv, size_t kv_len, const seqkv_put_opts *opts,
              seqkv_put_result *res)
{
    seqkv_put_req q;
    memset(&q, 0, sizeof q);
    q.tenant = tenant;
    q.profile = profile;
    q.tokens = tokens;
    q.n = n;
    q.kv = kv;
    q.kv_len = kv_len;
    q.opts = opts;
    seqkv_put_batch(db, &q, 1);
    if (res)
        *res = q.res;
    if (q.rc)
        return skv_error_at(q.rc, NULL, 0, "%s", q.error);
    return SKV_OK;
}

/* ---- del ------------------------------------------------------------------------------ */

int seqkv_del(seqkv *db, const char *tenant, const char *profile, const int32_t *tokens,
              size_t n, size_t *removed)
{
    *removed = 0;
    pthread_mutex_lock(&db->wlock);
    match_res m;
    pthread_rwlock_rdlock(&db->rw);
    int rc = match_tokens(db, tenant, profile, tokens, n, &m);
    pthread_rwlock_unlock(&db->rw);
    tenant_ent *te = NULL;
    if (!rc)
        rc = skv_store_tenant(db, tenant, 0, &te);
    /* only the tenant's own namespace: the shared one is not the tenant's
     * to delete */
    if (!rc && m.e && m.e->tenant != te->id)
        m.steps = 0;
    /* from the deepest record up, while nothing else needs it and the
     * query covers all its tokens */
    size_t k = m.steps;
    while (!rc && k > 0) {
        skv_trie_rec *r = m.path[k - 1].rec;
        if (r->deps || m.path[k - 1].used != r->n)
            break;
        MDB_txn *txn;
        int mrc = mdb_txn_begin(db->env, NULL, 0, &txn);
        MDB_val key = {32, r->key};
        if (!mrc)
            mrc = mdb_del(txn, db->db_chunk, &key, NULL);
        if (!mrc) {
            int x = mdb_del(txn, db->db_evict, &key, NULL);
            if (x && x != MDB_NOTFOUND)
                mrc = x;
        }
        if (!mrc)
            mrc = mdb_txn_commit(txn);
        else if (txn)
            mdb_txn_abort(txn);
        if (mrc) {
            rc = skv_mdb_error(mrc, "delete");
            break;
        }
        *removed += r->n - r->lo;
        pthread_rwlock_wrlock(&db->rw);
        skv_store_unindex(db, m.e, r, 1);
        pthread_rwlock_unlock(&db->rw);
        k--;
    }
    skv_free(m.path);
    pthread_mutex_unlock(&db->wlock);
    return rc;
}

/* ---- whole stored sequences (calibration, centroids) ------------------------- */

int skv_store_decode_chain(seqkv *db, MDB_txn *txn, ns_ent *e, prof_ent *pe, skv_trie_rec *tip,
                           size_t *T, int32_t **tok, uint8_t **k, uint8_t **v)
{
    *T = 0;
    *tok = NULL;
    *k = *v = NULL;
    const size_t CH = (size_t)pe->p.chunk, nst = (size_t)tip->chunk_index + 1;
    skv_trie_step *path = skv_malloc(nst * sizeof *path);
    if (!path)
        return skv_error(SKV_ERR_NOMEM, "chain");
    skv_trie_rec *r = tip;
    int rc = SKV_OK;
    for (size_t j = nst; j-- > 0;) {
        if (!r || r->chunk_index != j) {
            rc = skv_error(SKV_ERR_CORRUPT, "broken chain of chunk records");
            break;
        }
        path[j].rec = r;
        path[j].used = r->n;
        if (j > 0)
            r = skv_trie_find(e->trie, r->parent);
    }
    seqbuf s = {0};
    if (!rc)
        rc = seqbuf_init(&s, pe, nst * CH);
    if (!rc) {
        dec_ctx c = {db, txn, e, pe, &s, skv_store_tick(db), NULL};
        rc = decode_path(&c, path, nst, NULL, NULL, (nst - 1) * CH + tip->n);
        skv_centroid_free(c.cent);
    }
    skv_free(path);
    if (rc) {
        seqbuf_free(&s);
        return rc;
    }
    const size_t n = (nst - 1) * CH + tip->n, row = pe->C * pe->es, L = (size_t)pe->p.layers;
    /* compact to stride n: [layers][n][C] */
    for (int x = 0; x < 2; x++)
        for (size_t l = 1; l < L; l++)
            memmove(s.kv[x] + l * n * row, s.kv[x] + l * s.stride * row, n * row);
    *T = n;
    *tok = s.tok;
    *k = s.kv[0];
    *v = s.kv[1];
    return SKV_OK;
}
