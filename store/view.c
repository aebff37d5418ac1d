/* Gets as views (seqkv_get_view) and seqkv_get over them: the matched
 * path's chunks from the hot tier, or read, verified and decoded (and then
 * offered to the tier). */
#include <stdlib.h>
#include <string.h>

#include "store_cluster.h"

typedef struct {
    const uint8_t *p;
    size_t len;
} view_piece;

struct seqkv_view {
    size_t bytes, tokens, npieces, nchunks, hot;
    view_piece *pc;
    hot_chunk **ch;  /* per chunk: its entry, or NULL (its KV is in s) */
    seqbuf s;        /* chunks decoded without a tier to keep them */
};

size_t seqkv_view_bytes(const seqkv_view *v)
{
    return v->bytes;
}

size_t seqkv_view_pieces(const seqkv_view *v)
{
    return v->npieces;
}

const void *seqkv_view_piece(const seqkv_view *v, size_t i, size_t *len)
{
    *len = v->pc[i].len;
    return v->pc[i].p;
}

size_t seqkv_view_hot_chunks(const seqkv_view *v, size_t *chunks)
{
    if (chunks)
        *chunks = v->nchunks;
    return v->hot;
}

seqkv_view *skv_view_of_chunk(hot_chunk *h, size_t len)
{
    seqkv_view *v = skv_calloc(1, sizeof *v);
    view_piece *pc = skv_malloc(sizeof *pc);
    hot_chunk **ch = skv_malloc(sizeof *ch);
    if (!v || !pc || !ch) {
        skv_free(v);
        skv_free(pc);
        skv_free(ch);
        skv_hot_unref(h);
        return NULL;
    }
    pc[0] = (view_piece){h->kv, len};
    ch[0] = h;
    v->pc = pc;
    v->ch = ch;
    v->npieces = v->nchunks = 1;
    v->hot = h->in_tier;
    v->bytes = len;
    return v;
}

void seqkv_view_free(seqkv_view *v)
{
    if (!v)
        return;
    for (size_t j = 0; v->ch && j < v->nchunks; j++)
        skv_hot_unref(v->ch[j]);
    skv_free(v->ch);
    skv_free(v->pc);
    skv_seqbuf_free(&v->s);
    skv_free(v);
}

/* Entry j's KV into the sequence buffer (context for the chunks after) */
static void hot_to_seqbuf(const prof_ent *pe, const hot_chunk *h, size_t P, seqbuf *s)
{
    const size_t row = pe->C * pe->es;
    for (size_t l = 0; l < h->layers; l++)
        for (int kv = 0; kv < 2; kv++)
            memcpy(s->kv[kv] + (l * s->stride + P) * row, h->kv + (l * 2 + (size_t)kv) * h->n * row,
                   h->n * row);
}

hot_chunk *skv_store_hot_entry(const prof_ent *pe, const uint8_t key[32], size_t n,
                               const seqbuf *s, size_t P)
{
    const size_t row = pe->C * pe->es;
    hot_chunk *h = skv_hot_new(key, (uint32_t)n, (uint32_t)pe->p.layers, row);
    for (size_t l = 0; h && l < (size_t)pe->p.layers; l++)
        for (int kv = 0; kv < 2; kv++)
            memcpy(h->kv + (l * 2 + (size_t)kv) * n * row, s->kv[kv] + (l * s->stride + P) * row,
                   n * row);
    return h;
}

/* The chunks from the first one missing from the tier on: read and
 * decoded with the ones before as context. Caller holds rw shared. */
static int view_decode(seqkv *db, const match_res *m, seqkv_view *v, size_t first)
{
    const prof_ent *pe = m->pe;
    const size_t CH = (size_t)pe->p.chunk;
    int rc = skv_seqbuf_init(&v->s, pe, v->nchunks * CH);
    for (size_t j = 0; !rc && j < first; j++)
        hot_to_seqbuf(pe, v->ch[j], j * CH, &v->s);
    MDB_txn *txn = NULL;
    if (!rc) {
        int mrc = mdb_txn_begin(db->env, NULL, MDB_RDONLY, &txn);
        rc = mrc ? skv_mdb_error(mrc, "begin transaction") : SKV_OK;
    }
    /* the read pool, when free: this get's chunks split over it */
    dec_ctx c = {db, txn, m->e, m->pe, &v->s, skv_store_tick(db), NULL,
                 {0, skv_store_read_pool_take(db), 0}};
    for (size_t j = first; !rc && j < v->nchunks; j++) {
        skv_irec *t = skv_irec_of(m->path[j].rec);
        if (v->ch[j]) { /* hot again after a miss: context for the next */
            hot_to_seqbuf(pe, v->ch[j], j * CH, &v->s);
            continue;
        }
        if ((rc = skv_store_decode_rec(&c, t)))
            break;
        if (db->hot && (v->ch[j] = skv_store_hot_entry(pe, t->tr.key, t->tr.n, &v->s, j * CH)))
            skv_hot_put(db->hot, v->ch[j]);
    }
    skv_store_read_pool_give(db, c.role.rpool);
    skv_centroid_free(c.cent);
    if (txn)
        mdb_txn_abort(txn);
    size_t held = 0;
    for (size_t j = 0; j < v->nchunks; j++)
        held += v->ch[j] != NULL;
    if (held == v->nchunks)
        skv_seqbuf_free(&v->s); /* the tier's entries hold it all */
    return rc;
}

/* The pieces, in store KV layout: per layer, K then V, each chunk's
 * positions in order */
static int view_pieces(const match_res *m, seqkv_view *v)
{
    const prof_ent *pe = m->pe;
    const size_t CH = (size_t)pe->p.chunk, row = pe->C * pe->es, L = (size_t)pe->p.layers;
    v->pc = skv_malloc(L * 2 * v->nchunks * sizeof *v->pc);
    if (!v->pc)
        return skv_error(SKV_ERR_NOMEM, "view");
    for (size_t l = 0; l < L; l++)
        for (int kv = 0; kv < 2; kv++)
            for (size_t j = 0; j < v->nchunks; j++) {
                size_t a = j * CH, used = v->tokens - a < m->path[j].used ? v->tokens - a
                                                                            : m->path[j].used;
                const hot_chunk *h = v->ch[j];
                view_piece *p = &v->pc[v->npieces++];
                p->p = h ? h->kv + (l * 2 + (size_t)kv) * h->n * row
                         : v->s.kv[kv] + (l * v->s.stride + a) * row;
                p->len = used * row;
            }
    v->bytes = L * 2 * v->tokens * row;
    return SKV_OK;
}

/* The cold chunks of a streamed view (from chunk first on, those not in
 * the tier), decoded layer-major into v->s, whose pieces already point
 * there: records open (trailers verified), then `group` layers at a time
 * over every record in order, fn told after each group but the last; the
 * checksums once every layer is there. Caller holds rw shared. */
static int view_stream(seqkv *db, const match_res *m, seqkv_view *v, size_t first,
                       seqkv_view_fn fn, void *fctx, size_t *told)
{
    const prof_ent *pe = m->pe;
    const size_t CH = (size_t)pe->p.chunk, L = (size_t)pe->p.layers;
    size_t nrec = 0, cap = 0;
    for (size_t j = first; j < v->nchunks; j++)
        cap += v->ch[j] ? 0 : CH + 1;
    rec_dec *x = skv_calloc(cap ? cap : 1, sizeof *x);
    skv_irec **chain = skv_malloc((CH + 1) * sizeof *chain);
    /* (XXH3's state is 64-byte aligned) */
    skv_rec_sum *sums = aligned_alloc(_Alignof(skv_rec_sum), (cap ? cap : 1) * sizeof *sums);
    MDB_txn *txn = NULL;
    int rc = x && chain && sums ? SKV_OK : skv_error(SKV_ERR_NOMEM, "view");
    if (!rc) {
        int mrc = mdb_txn_begin(db->env, NULL, MDB_RDONLY, &txn);
        rc = mrc ? skv_mdb_error(mrc, "begin transaction") : SKV_OK;
    }
    dec_ctx c = {db, txn, m->e, m->pe, &v->s, skv_store_tick(db), NULL,
                 {0, skv_store_read_pool_take(db), 0}};
    int layered = 1;
    for (size_t j = first; !rc && j < v->nchunks; j++) {
        size_t k = 0;
        if (v->ch[j] || (rc = skv_store_rec_chain(&c, skv_irec_of(m->path[j].rec), chain, &k)))
            continue;
        /* a chunk of one raw record is placed as it opens (a sealed one
         * straight from its boxes); one with bases waits for their layers */
        for (size_t i = 0; !rc && i < k; i++, nrec++) {
            rc = skv_store_rec_open(&c, chain[i], k == 1 ? SKV_OPEN_PLACE : 0,
                                    nrec ? &x[nrec - 1] : NULL, &sums[nrec], &x[nrec]);
            layered &= skv_store_rec_layered(&x[nrec]);
        }
    }
    /* layers [l0, l1) of every record, the pool's threads on their chains
     * (skv_store_recs_layers): first a group of half as many layers as
     * threads (a chain per stream: the first layer goes out early), then
     * groups of as many (a chain per layer, its K and V decoded together) */
    skv_pool *pool = c.role.rpool;
    const size_t threads = pool ? (size_t)skv_pool_threads(pool) : 1;
    for (size_t l0 = 0, l1; !rc && l0 < L; l0 = l1) {
        const size_t group = !layered ? L : l0 == 0 && threads > 1 ? threads / 2 : threads;
        l1 = l0 + group < L ? l0 + group : L;
        if (layered)
            rc = skv_store_recs_layers(&c, x, nrec, l0, l1, pool);
        for (size_t i = 0; !layered && !rc && i < nrec; i++) /* (l0 0, l1 L) */
            rc = skv_store_rec_decode(&c, &x[i]);
        if (!rc && l1 < L) {
            fn(fctx, v, l1);
            *told = l1;
        }
    }
    for (size_t i = 0; !rc && i < nrec; i++)
        rc = skv_store_rec_check(&c, &x[i]);
    for (size_t i = nrec; i-- > 0;)
        skv_store_rec_close(&c, &x[i]);
    skv_store_read_pool_give(db, c.role.rpool);
    skv_centroid_free(c.cent);
    if (txn)
        mdb_txn_abort(txn);
    /* verified: the chunks enter the tier (the view keeps its own copy) */
    for (size_t j = first; !rc && db->hot && j < v->nchunks; j++) {
        hot_chunk *h = v->ch[j] ? NULL
                                : skv_store_hot_entry(pe, m->path[j].rec->key, m->path[j].rec->n,
                                                      &v->s, j * CH);
        if (h) {
            skv_hot_put(db->hot, h);
            skv_hot_unref(h);
        }
    }
    skv_free(chain);
    skv_free(x);
    free(sums);
    return rc;
}

/* seqkv_get_view, streamed to fn when fn is not NULL */
static int get_view(seqkv *db, const char *tenant, const char *profile, const int32_t *tokens,
                    size_t n, size_t want, unsigned flags, seqkv_view_fn fn, void *fctx,
                    seqkv_view **out, size_t *got)
{
    *out = NULL;
    *got = 0;
    seqkv_view *v = skv_calloc(1, sizeof *v);
    if (!v)
        return skv_error(SKV_ERR_NOMEM, "view");
    match_res m;
    pthread_rwlock_rdlock(&db->rw);
    int rc = skv_store_match_want(db, tenant, profile, tokens, n, &want, &m);
    if (!rc)
        rc = skv_store_lossy_check(&m, want, flags);
    if (!rc) {
        const size_t CH = (size_t)m.pe->p.chunk;
        v->tokens = want;
        v->nchunks = (want + CH - 1) / CH;
        v->ch = skv_calloc(v->nchunks, sizeof *v->ch);
        if (!v->ch)
            rc = skv_error(SKV_ERR_NOMEM, "view");
    }
    size_t first = v->nchunks;
    const uint64_t tick = rc ? 0 : skv_store_tick(db);
    for (size_t j = 0; !rc && db->hot && j < v->nchunks; j++) {
        if ((v->ch[j] = skv_hot_get(db->hot, m.path[j].rec->key))) {
            v->hot++;
            __atomic_store_n(&skv_irec_of(m.path[j].rec)->tick, tick, __ATOMIC_RELAXED);
        } else if (first == v->nchunks) {
            first = j;
        }
    }
    if (!rc && !db->hot)
        first = 0;
    size_t told = 0;
    const size_t L = rc ? 0 : (size_t)m.pe->p.layers;
    if (!rc && fn && first < v->nchunks) {
        /* the pieces point into the buffer the layers decode into */
        rc = skv_seqbuf_init(&v->s, m.pe, v->nchunks * (size_t)m.pe->p.chunk);
        for (size_t j = 0; !rc && j < v->nchunks; j++)
            if (v->ch[j])
                hot_to_seqbuf(m.pe, v->ch[j], j * (size_t)m.pe->p.chunk, &v->s);
        if (!rc)
            rc = view_pieces(&m, v);
        if (!rc)
            rc = view_stream(db, &m, v, first, fn, fctx, &told);
    } else {
        if (!rc && first < v->nchunks)
            rc = view_decode(db, &m, v, first);
        if (!rc)
            rc = view_pieces(&m, v);
    }
    pthread_rwlock_unlock(&db->rw);
    skv_free(m.path);
    if (rc) {
        if (told) { /* fn was told of layers: the caller frees the view */
            *out = v;
            return rc;
        }
        seqkv_view_free(v);
        return rc;
    }
    if (fn)
        fn(fctx, v, L);
    *out = v;
    *got = want;
    return SKV_OK;
}

/* A get's options, checked (in NULL: the defaults) */
static int get_opts(const seqkv_get_opts *in, seqkv_get_opts *o)
{
    *o = (seqkv_get_opts)SEQKV_GET_OPTS_INIT;
    int rc = in ? skv_store_opts(o, sizeof *o, in, "seqkv_get_opts") : SKV_OK;
    if (!rc && (o->flags & ~SEQKV_GET_LOSSY))
        rc = skv_error(SKV_ERR_ARG, "seqkv_get_opts: unknown flags %#x", o->flags);
    return rc;
}

int seqkv_get_view(seqkv *db, const char *tenant, const char *profile, const int32_t *tokens,
                   size_t n, const seqkv_get_opts *opts, seqkv_view **out, size_t *got)
{
    seqkv_get_opts o;
    *out = NULL;
    *got = 0;
    int rc = get_opts(opts, &o);
    if (!rc && o.on_layer)
        rc = skv_error(SKV_ERR_ARG, "seqkv_get_view: on_layer is seqkv_get's (a view has on_ready)");
    return rc ? rc : get_view(db, tenant, profile, tokens, n, o.want, o.flags, o.on_ready, o.ctx, out, got);
}

int seqkv_get(seqkv *db, const char *tenant, const char *profile, const int32_t *tokens, size_t n,
              const seqkv_get_opts *opts, void *out, size_t cap, size_t *got)
{
    seqkv_get_opts o;
    *got = 0;
    int rc = get_opts(opts, &o);
    if (!rc && o.on_ready)
        rc = skv_error(SKV_ERR_ARG, "seqkv_get: on_ready is seqkv_get_view's (a get has on_layer)");
    if (rc)
        return rc;
    if (o.on_layer)
        return skv_store_get_layers(db, tenant, profile, tokens, n, o.want, o.flags, o.on_layer,
                                    o.ctx, got);
    seqkv_view *v;
    rc = get_view(db, tenant, profile, tokens, n, o.want, o.flags, NULL, NULL, &v, got);
    if (rc)
        return rc;
    if (v->bytes > cap) {
        size_t need = v->bytes;
        seqkv_view_free(v);
        return skv_error(SKV_ERR_TOO_LARGE, "%zu tokens need %zu bytes, the buffer holds %zu", *got,
                         need, cap);
    }
    uint8_t *dst = out;
    for (size_t i = 0; i < v->npieces; i++) {
        memcpy(dst, v->pc[i].p, v->pc[i].len);
        dst += v->pc[i].len;
    }
    seqkv_view_free(v);
    return SKV_OK;
}

void seqkv_cache_stat(seqkv *db, seqkv_cache_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!db->hot)
        return;
    skv_hot_stats h;
    skv_hot_stat(db->hot, &h);
    *out = (seqkv_cache_stats){h.budget, h.bytes, h.entries, h.hits, h.misses, h.inserts,
                               h.evictions, h.drops};
}
