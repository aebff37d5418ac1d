/* Decoding chunk records into a sequence buffer: a matched path, or a
 * whole stored chain (calibration, centroids). */
#include <string.h>

#include "store_cluster.h"

void skv_seqbuf_free(seqbuf *s)
{
    skv_free(s->tok);
    skv_warm_free(s->kv[0], s->cap[0]);
    skv_warm_free(s->kv[1], s->cap[1]);
    memset(s, 0, sizeof *s);
}

int skv_seqbuf_init(seqbuf *s, const prof_ent *pe, size_t stride)
{
    memset(s, 0, sizeof *s);
    size_t bytes = (size_t)pe->p.layers * (stride ? stride : 1) * pe->C * pe->es;
    s->stride = stride;
    s->tok = skv_calloc(stride ? stride : 1, sizeof(int32_t));
    /* (warm blocks: a big put's or get's buffers are the last one's) */
    s->kv[0] = skv_warm_alloc(bytes, &s->cap[0]);
    s->kv[1] = skv_warm_alloc(bytes, &s->cap[1]);
    if (!s->tok || !s->kv[0] || !s->kv[1]) {
        skv_seqbuf_free(s);
        return skv_error(SKV_ERR_NOMEM, "KV buffers for %zu tokens", stride);
    }
    return SKV_OK;
}

/* Checksum of positions [a, b) in stream order (layer, K then V). */
uint64_t skv_seqbuf_checksum(const prof_ent *pe, const seqbuf *s, size_t a, size_t b)
{
    const size_t row = pe->C * pe->es;
    skv_rec_sum h;
    skv_rec_sum_begin(&h);
    for (int l = 0; l < pe->p.layers; l++)
        for (int kv = 0; kv < 2; kv++)
            skv_rec_sum_add(&h, s->kv[kv] + ((size_t)l * s->stride + a) * row, (b - a) * row);
    return skv_rec_sum_end(&h);
}

/* Build the centroid predictions of a member record's positions [a, b). */
static int member_aux(dec_ctx *c, const skv_rec *r, skv_delta *d, size_t a, size_t b,
                      skv_delta_aux *aux, float **bufs)
{
    const prof_ent *pe = c->pe;
    const size_t n = b - a, L = (size_t)pe->p.layers, nw = L * 2 * (size_t)pe->p.kv_heads;
    skv_irec *tip = skv_irec_find(c->e->trie, r->centroid);
    if (!tip)
        return skv_error(SKV_ERR_CORRUPT, "a member record's centroid is missing");
    int rc = SKV_OK;
    if (!c->cent || memcmp(c->cent->tip_key, r->centroid, 32) != 0) {
        skv_centroid_free(c->cent);
        c->cent = skv_calloc(1, sizeof *c->cent);
        if (!c->cent)
            return skv_error(SKV_ERR_NOMEM, "centroid");
        skv_role inner = c->role;
        if (++inner.depth > 16)
            rc = skv_error(SKV_ERR_CORRUPT, "centroid references nest too deep");
        else
            rc = skv_store_decode_chain(c->db, c->txn, &inner, c->e, c->pe, tip, &c->cent->nc,
                                        &c->cent->tok, &c->cent->k, &c->cent->v, c->cent->cap);
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

static int rec_stream(dec_ctx *c, rec_dec *x, size_t j, int worker);

/* Record x's streams into positions [P + lo, P + n) */
static int decode_streams(dec_ctx *c, rec_dec *x)
{
    const prof_ent *pe = c->pe;
    const skv_rec *r = &x->r;
    seqbuf *s = c->s;
    const size_t L = (size_t)pe->p.layers, a = x->P + r->lo, b = x->P + r->n;
    int rc = SKV_OK;
    if (r->level == SEQKV_RAW || r->level == SEQKV_LOSSY) {
        for (size_t j = 0; j < 2 * L && !rc; j++)
            rc = rec_stream(c, x, j, 0);
        return rc;
    }
    if (r->level == SEQKV_FAST)
        return skv_store_fast_decode(pe, r->streams, r->streams_len, r->sizes, s->kv[0], s->kv[1],
                                     s->stride, a, b, c->role.rpool);
    const skv_delta_aux *aux = (r->flags & SKV_REC_CENTROID) ? &x->aux : NULL;
    return skv_delta_decode_range(x->ce->d, s->tok, a, b, s->stride, &x->in, 0, aux, s->kv[0],
                                  s->kv[1]);
}

/* A raw record (XXH3 trailer and checksum over the same stream bytes)
 * is verified as it is copied, in one pass */
static int raw_fused(const skv_rec *r)
{
    return r->level == SEQKV_RAW;
}

/* Record t from LMDB (or the writer's batch), its trailer verified -- but,
 * when fused, a raw record's, which raw_copy verifies as
 * it copies -- and its fields checked against its index entry; r and *img (the
 * record's *len bytes) point into LMDB's map, valid while c->txn lives. */
static int load_rec(const dec_ctx *c, const skv_irec *t, int fused, skv_rec *r,
                    const uint8_t **img, size_t *len, uint8_t **owned, skv_vmap *vm)
{
    MDB_val k = {32, (void *)t->tr.key}, v;
    if (t->tr.hidden) {
        /* the writer's own uncommitted record, from an earlier put of its
         * batch; readers never reach one (skv_trie_match skips them) */
        pend_rec *p = c->role.writer ? skv_batch_find(c->db->batch, t->tr.key) : NULL;
        if (!p)
            return skv_error(SKV_ERR_CORRUPT, "a reader reached an uncommitted record");
        int wrc = skv_batch_whole(p); /* (a raw one's streams gathered from its put) */
        if (wrc)
            return wrc;
        v.mv_data = p->img;
        v.mv_size = p->len;
    } else {
        int mrc = mdb_get(c->txn, c->db->db_chunk, &k, &v);
        if (mrc == MDB_NOTFOUND)
            return skv_error(SKV_ERR_CORRUPT, "an indexed chunk record is missing from LMDB");
        if (mrc)
            return skv_mdb_error(mrc, "read chunk");
        /* (a value file's bytes mapped, until the record closes) */
        int rc = skv_vf_resolve(c->db, t->tr.key, &v, 1, vm);
        if (rc)
            return rc;
    }
    int rc;
    if (fused && skv_store_rec_sealed_raw(v.mv_data, v.mv_size)) {
        /* a sealed raw record: box 0 (header, tokens, sizes) now, its
         * streams straight into the output by raw_copy; *img stays the
         * sealed value (r's header is the clear one the test read) */
        *img = v.mv_data;
        *len = v.mv_size;
        rc = skv_store_rec_head(c->db, t->tr.key, v.mv_data, v.mv_size, owned, r);
    } else {
        /* a sealed record opens into a buffer of its own (its boxes' tags
         * are checked as it does), else its image is LMDB's */
        if ((rc = skv_store_rec_read(c->db, t->tr.key, v.mv_data, v.mv_size, c->role.rpool, owned, img, len)))
            return rc;
        rc = skv_rec_parse_ex(*img, *len, 0, r);
        /* (a parse error is damage or a newer writer: the trailer tells) */
        if (rc || !fused || !raw_fused(r))
            rc = skv_rec_parse(*img, *len, r);
    }
    if (rc)
        return rc == SKV_ERR_FORMAT ? skv_error(SKV_ERR_CORRUPT, "damaged chunk record: %s",
                                                seqkv_error_detail())
                                    : rc;
    if (r->tenant != c->e->tenant || memcmp(r->profile, c->pe->p.id, 32) != 0 || r->n != t->tr.n ||
        r->lo != t->tr.lo || r->chunk_index != t->tr.chunk_index)
        return skv_error(SKV_ERR_CORRUPT, "chunk record does not match its index entry");
    for (uint32_t i = 0; i < r->n; i++)
        if ((int32_t)skv_load32_le(r->tokens + 4 * (size_t)i) != t->tr.tokens[i])
            return skv_error(SKV_ERR_CORRUPT, "chunk record tokens differ from its index entry");
    return SKV_OK;
}

/* Raw record r of record t, version 2 on (raw_fused): its streams are
 * the KV, verified (trailer and checksum) and copied in one pass */
static int raw_copy(dec_ctx *c, skv_irec *t, const skv_rec *r, const uint8_t *img, size_t len,
                    size_t P)
{
    const prof_ent *pe = c->pe;
    const size_t L = (size_t)pe->p.layers, row = pe->C * pe->es, a = P + r->lo, b = P + r->n;
    int rc;
    if (r->nstreams != 2 * L)
        return skv_error(SKV_ERR_CORRUPT, "chunk record has %u streams for %zu layers", r->nstreams, L);
    uint8_t *dst[2 * 4096];
    for (size_t j = 0; j < 2 * L; j++) {
        size_t sz = skv_load32_le(r->sizes + 4 * j);
        if (sz != (b - a) * row)
            return skv_error(SKV_ERR_CORRUPT, "raw stream of %zu bytes, expected %zu", sz, (b - a) * row);
        dst[j] = c->s->kv[j & 1] + ((j / 2) * c->s->stride + a) * row;
    }
    if (!skv_store_rec_sealed_raw(img, len)) {
        if ((rc = skv_rec_raw_copy(img, len, r, dst)))
            return rc;
    } else {
        /* opened straight into place (the tags stand for the image's
         * trailer); the KV's own checksum still checked, end to end */
        if ((rc = skv_store_rec_raw_open(c->db, t->tr.key, img, len, r, c->role.rpool, dst)))
            return rc;
        if (skv_seqbuf_checksum(pe, c->s, a, b) != r->checksum)
            return skv_error(SKV_ERR_CORRUPT, "decoded KV checksum mismatch (chunk %u)",
                             r->chunk_index);
    }
    memcpy(c->s->tok + P, t->tr.tokens, r->n * sizeof(int32_t));
    __atomic_store_n(&t->tick, c->tick, __ATOMIC_RELAXED);
    return SKV_OK;
}

int skv_store_rec_chain(const dec_ctx *c, skv_irec *t, skv_irec **out, size_t *n)
{
    const size_t CH = (size_t)c->pe->p.chunk, P = (size_t)t->tr.chunk_index * CH;
    size_t k = 0;
    for (skv_irec *x = t;;) {
        if (k > CH)
            return skv_error(SKV_ERR_CORRUPT, "base records form a cycle");
        if (P + x->tr.n > c->s->stride)
            return skv_error(SKV_ERR_CORRUPT, "record past the decoded range");
        out[k++] = x;
        if (!x->has_base)
            break;
        skv_irec *b = skv_irec_find(c->e->trie, x->base);
        if (!b || b->tr.chunk_index != x->tr.chunk_index || b->tr.n < x->tr.lo ||
            memcmp(b->tr.parent, x->tr.parent, 32) != 0)
            return skv_error(SKV_ERR_CORRUPT, "record's base is missing or does not fit");
        x = b;
    }
    for (size_t i = 0; i < k / 2; i++) { /* base first */
        skv_irec *y = out[i];
        out[i] = out[k - 1 - i];
        out[k - 1 - i] = y;
    }
    *n = k;
    return SKV_OK;
}

int skv_store_rec_open(dec_ctx *c, skv_irec *t, int fused, const rec_dec *share,
                       skv_rec_sum *sum, rec_dec *x)
{
    memset(x, 0, sizeof *x);
    x->t = t;
    x->sum = sum;
    x->P = (size_t)t->tr.chunk_index * (size_t)c->pe->p.chunk;
    int rc = load_rec(c, t, fused, &x->r, &x->img, &x->len, &x->owned, &x->vm);
    if (rc)
        return rc;
    const skv_rec *r = &x->r;
    if (r->nstreams != 2 * (size_t)c->pe->p.layers)
        return skv_error(SKV_ERR_CORRUPT, "chunk record has %u streams for %d layers", r->nstreams,
                         c->pe->p.layers);
    if (fused && raw_fused(r)) {
        /* (raw_copy checks its streams and their checksum itself) */
        if (fused != SKV_OPEN_PLACE)
            return SKV_OK;
        x->placed = 1;
        return raw_copy(c, t, r, x->img, x->len, x->P);
    }
    skv_rec_sum_begin(sum);
    /* its streams' offsets, checked */
    const size_t L = (size_t)c->pe->p.layers;
    if (!(x->offs = skv_malloc((2 * L + 1) * sizeof *x->offs)))
        return skv_error(SKV_ERR_NOMEM, "record streams");
    x->offs[0] = 0;
    for (size_t j = 0; j < 2 * L; j++) {
        const size_t sz = skv_load32_le(r->sizes + 4 * j);
        if (sz > r->streams_len - x->offs[j])
            return skv_error(SKV_ERR_CORRUPT, "stream %zu past the record's streams", j);
        x->offs[j + 1] = x->offs[j] + sz;
    }
    x->in = (skv_streams){(uint8_t *)r->streams, r->streams_len, 0, x->offs, 2 * L, 0};
    if (r->level == SEQKV_RAW || r->level == SEQKV_FAST || r->level == SEQKV_LOSSY)
        return SKV_OK;
    if (!(r->flags & SKV_REC_CENTROID) && r->side_len)
        return skv_error(SKV_ERR_CORRUPT, "side info in a record without a centroid");

    if (share && share->ce && share->r.level == r->level && memcmp(share->r.calib, r->calib, 16) == 0) {
        x->ce = share->ce; /* (a coder is one decode's at a time: the records share it) */
        x->shared = 1;
    } else {
        rc = skv_store_coder(c->db, c->txn, c->pe, r->calib, r->level, &c->role, &x->ce);
    }
    if (!rc && (r->flags & SKV_REC_CENTROID))
        rc = member_aux(c, r, x->ce->d, x->P + r->lo, x->P + r->n, &x->aux, x->bufs);
    return rc;
}

int skv_store_rec_layered(const rec_dec *x)
{
    return x->r.level != SEQKV_SPEC && x->r.level != SEQKV_FULL;
}

/* Record x's tokens into c->s (a record based on it writes others over
 * the later ones: they are written just before x's are read) */
static void rec_tokens(dec_ctx *c, const rec_dec *x)
{
    memcpy(c->s->tok + x->P, x->t->tr.tokens, x->r.n * sizeof(int32_t));
}

int skv_store_rec_decode(dec_ctx *c, rec_dec *x)
{
    if (x->placed)
        return SKV_OK;
    rec_tokens(c, x);
    int rc = decode_streams(c, x);
    if (rc)
        return rc == SKV_ERR_FORMAT ? skv_error(SKV_ERR_CORRUPT, "damaged coded stream: %s",
                                                seqkv_error_detail())
                                    : rc;
    const size_t row = c->pe->C * c->pe->es, a = x->P + x->r.lo, b = x->P + x->r.n;
    for (size_t l = 0; l < (size_t)c->pe->p.layers; l++)
        for (int kv = 0; kv < 2; kv++)
            skv_rec_sum_add(x->sum, c->s->kv[kv] + (l * c->s->stride + a) * row, (b - a) * row);
    return SKV_OK;
}

/* Chain link k of record x: stream j0 + k when chains are streams, else
 * both streams of layer j0 / 2 + k */
static int rec_link(dec_ctx *c, rec_dec *x, size_t j0, size_t k, int layers, int worker)
{
    if (x->placed)
        return SKV_OK;
    if (!layers)
        return rec_stream(c, x, j0 + k, worker);
    const size_t l = j0 / 2 + k;
    int rc;
    if (x->dr) {
        rc = skv_delta_range_stream(x->dr, l, -1, worker);
        return rc == SKV_ERR_FORMAT ? skv_error(SKV_ERR_CORRUPT, "damaged coded stream: %s",
                                                seqkv_error_detail())
                                    : rc;
    }
    rc = rec_stream(c, x, 2 * l, worker);
    return rc ? rc : rec_stream(c, x, 2 * l + 1, worker);
}

/* Stream j (layer j / 2, K|V) of record x into c->s with the pool
 * worker's workspace (the streams before it in its chain decoded) */
static int rec_stream(dec_ctx *c, rec_dec *x, size_t j, int worker)
{
    const prof_ent *pe = c->pe;
    const skv_rec *r = &x->r;
    const size_t row = pe->C * pe->es, a = x->P + r->lo, rows = r->n - r->lo;
    const size_t sz = x->offs[j + 1] - x->offs[j];
    uint8_t *dst = c->s->kv[j & 1] + ((j / 2) * c->s->stride + a) * row;
    if (r->level == SEQKV_RAW) {
        if (sz != rows * row)
            return skv_error(SKV_ERR_CORRUPT, "raw stream of %zu bytes, expected %zu", sz, rows * row);
        memcpy(dst, r->streams + x->offs[j], sz);
        return SKV_OK;
    }
    if (r->level == SEQKV_LOSSY)
        return skv_store_lossy_stream(c->db, c->txn, (prof_ent *)pe, r, j, r->streams + x->offs[j], sz,
                                      rows, dst);
    if (r->level == SEQKV_FAST) {
        int rc = skv_fast_decode(r->streams + x->offs[j], sz, pe->p.dtype, rows, pe->C, dst,
                                 rows * row);
        return rc == SKV_ERR_FORMAT ? skv_error(SKV_ERR_CORRUPT, "fast stream %zu: %s", j,
                                                seqkv_error_detail())
                                    : rc;
    }
    int rc = skv_delta_range_stream(x->dr, j / 2, (int)(j & 1), worker);
    return rc == SKV_ERR_FORMAT ? skv_error(SKV_ERR_CORRUPT, "damaged coded stream: %s",
                                            seqkv_error_detail())
                                : rc;
}

/* One group's chains: chain k is link k (rec_link) of records [i0, i1]
 * in order */
typedef struct {
    dec_ctx *c;
    rec_dec *x;
    size_t i0, i1, j0;
    int layers;
    int *rc;    /* per chain */
    size_t *at; /* per chain: the record it failed at */
} chains_job;

static void chains_task(void *ctx, size_t b, size_t e, int worker)
{
    chains_job *g = ctx;
    for (size_t k = b; k < e; k++) {
        g->rc[k] = SKV_OK;
        for (size_t i = g->i0; i <= g->i1 && !g->rc[k]; i++)
            if ((g->rc[k] = rec_link(g->c, &g->x[i], g->j0, k, g->layers, worker)))
                g->at[k] = i;
    }
}

int skv_store_recs_layers(dec_ctx *c, rec_dec *x, size_t n, size_t l0, size_t l1, skv_pool *pool)
{
    /* a chain per layer (its K and V together) when there are as many
     * layers as threads, else per stream */
    const int layers = l1 - l0 >= (size_t)skv_pool_threads(pool);
    const size_t row = c->pe->C * c->pe->es, m = (layers ? 1 : 2) * (l1 - l0);
    int rcs[2 * 4096];
    size_t at[2 * 4096];
    for (size_t i0 = 0, i1; i0 < n; i0 = i1 + 1) {
        /* a segment ends at a base record: the record after it overwrites
         * its later positions, so its layers are hashed before */
        for (i1 = i0; i1 + 1 < n && x[i1 + 1].t->tr.chunk_index != x[i1].t->tr.chunk_index; i1++)
            ;
        int rc = SKV_OK;
        for (size_t i = i0; i <= i1 && !rc; i++) {
            if (x[i].dr || x[i].r.level == SEQKV_RAW || x[i].r.level == SEQKV_FAST ||
                x[i].r.level == SEQKV_LOSSY)
                continue;
            rec_tokens(c, &x[i]); /* (read by the range's open only) */
            rc = skv_delta_range_open(x[i].ce->d, c->s->tok, x[i].P + x[i].r.lo, x[i].P + x[i].r.n,
                                      c->s->stride, &x[i].in, 0,
                                      (x[i].r.flags & SKV_REC_CENTROID) ? &x[i].aux : NULL,
                                      c->s->kv[0], c->s->kv[1], &x[i].dr);
        }
        if (rc)
            return rc;
        /* records placed as they opened have no chains: a segment of only
         * those needs no pool region */
        size_t unplaced = 0;
        for (size_t i = i0; i <= i1; i++)
            unplaced += !x[i].placed;
        if (!unplaced)
            continue;
        chains_job g = {c, x, i0, i1, 2 * l0, layers, rcs, at};
        skv_pool_run(pool, m, chains_task, &g);
        for (size_t k = 0; k < m; k++) {
            if (!rcs[k])
                continue;
            /* again here, for the error's words (a pool thread's are its own) */
            rc = pool ? rec_link(c, &x[at[k]], 2 * l0, k, layers, 0) : rcs[k];
            return rc ? rc : skv_error(SKV_ERR_CORRUPT, "a stream failed on a pool thread only");
        }
        for (size_t i = i0; i <= i1; i++) {
            if (x[i].placed)
                continue;
            const size_t a = x[i].P + x[i].r.lo, b = x[i].P + x[i].r.n;
            for (size_t l = l0; l < l1; l++)
                for (int kv = 0; kv < 2; kv++)
                    skv_rec_sum_add(x[i].sum, c->s->kv[kv] + (l * c->s->stride + a) * row,
                                    (b - a) * row);
        }
    }
    return SKV_OK;
}

int skv_store_rec_check(dec_ctx *c, rec_dec *x)
{
    if (x->placed)
        return SKV_OK; /* (raw_copy checked it, and recorded its use) */
    const skv_rec *r = &x->r;
    if (skv_rec_sum_end(x->sum) != r->checksum)
        return skv_error(SKV_ERR_CORRUPT, "decoded KV checksum mismatch (chunk %u)", r->chunk_index);
    __atomic_store_n(&x->t->tick, c->tick, __ATOMIC_RELAXED);
    return SKV_OK;
}

void skv_store_rec_close(dec_ctx *c, rec_dec *x)
{
    skv_free(x->owned);
    skv_vf_release(&x->vm);
    skv_delta_range_free(x->dr);
    skv_free(x->offs);
    if (x->ce && !x->shared)
        skv_store_coder_release(c->db, x->ce);
    for (int i = 0; i < 3; i++)
        skv_free(x->bufs[i]);
    memset(x, 0, sizeof *x);
}

/* Load, verify and decode record t (and first its bases), given that
 * positions before its chunk are already decoded. */
static int decode_rec(dec_ctx *c, skv_irec *t)
{
    skv_irec *one[8], **chain = one;
    size_t n = 0;
    if (t->has_base && !(chain = skv_malloc(((size_t)c->pe->p.chunk + 1) * sizeof *chain)))
        return skv_error(SKV_ERR_NOMEM, "base records");
    int rc = skv_store_rec_chain(c, t, chain, &n);
    for (size_t i = 0; !rc && i < n; i++) {
        rec_dec x;
        skv_rec_sum sum;
        rc = skv_store_rec_open(c, chain[i], 1, NULL, &sum, &x);
        if (!rc && raw_fused(&x.r))
            rc = raw_copy(c, chain[i], &x.r, x.img, x.len, x.P);
        else if (!rc && !(rc = skv_store_rec_decode(c, &x)))
            rc = skv_store_rec_check(c, &x);
        skv_store_rec_close(c, &x);
    }
    if (chain != one)
        skv_free(chain);
    return rc;
}

int skv_store_decode_rec(dec_ctx *c, skv_irec *t)
{
    return decode_rec(c, t);
}

/* Decode the records of a matched path into s (stride >= the path's
 * extent); fn (may be NULL) gets each chunk's layers as they are done. */
typedef int (*chunk_fn)(void *ctx, const seqbuf *s, size_t a, size_t b);
int skv_store_decode_path(dec_ctx *c, const skv_trie_step *path, size_t steps, chunk_fn fn,
                       void *fctx, size_t want)
{
    const size_t CH = (size_t)c->pe->p.chunk;
    for (size_t j = 0; j < steps; j++) {
        int rc = decode_rec(c, skv_irec_of(path[j].rec));
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

/* ---- whole stored sequences (calibration, centroids) ------------------------- */

/* The records from the root to tip, one a chunk, into *path (skv_free
 * it): tip->chunk_index + 1 of them */
static int chain_path(ns_ent *e, skv_irec *tip, skv_trie_step **path)
{
    const size_t nst = (size_t)tip->tr.chunk_index + 1;
    skv_trie_step *p = skv_malloc(nst * sizeof *p);
    if (!p)
        return skv_error(SKV_ERR_NOMEM, "chain");
    skv_irec *r = tip;
    for (size_t j = nst; j-- > 0;) {
        if (!r || r->tr.chunk_index != j) {
            skv_free(p);
            return skv_error(SKV_ERR_CORRUPT, "broken chain of chunk records");
        }
        p[j].rec = &r->tr;
        p[j].used = r->tr.n;
        if (j > 0)
            r = skv_irec_find(e->trie, r->tr.parent);
    }
    *path = p;
    return SKV_OK;
}

int skv_store_decode_prefix(seqkv *db, MDB_txn *txn, const skv_role *role, ns_ent *e, prof_ent *pe, skv_irec *tip,
                            size_t upto, size_t *T, int32_t **tok, uint8_t **k, uint8_t **v, size_t cap[2])
{
    *T = 0;
    *tok = NULL;
    *k = *v = NULL;
    cap[0] = cap[1] = 0;
    const size_t CH = (size_t)pe->p.chunk, nst = (size_t)tip->tr.chunk_index + 1;
    skv_trie_step *path = NULL;
    int rc = chain_path(e, tip, &path);
    if (rc)
        return rc;
    /* the chunks that hold the first upto positions */
    const size_t nd = upto / CH < nst ? (upto + CH - 1) / CH : nst;
    const size_t n = nd ? (nd - 1) * CH + path[nd - 1].used : 0;
    seqbuf s = {0};
    rc = skv_seqbuf_init(&s, pe, (nd ? nd : 1) * CH);
    if (!rc && nd) {
        dec_ctx c = {db, txn, e, pe, &s, skv_store_tick(db), NULL, *role};
        rc = skv_store_decode_path(&c, path, nd, NULL, NULL, n);
        skv_centroid_free(c.cent);
    }
    skv_free(path);
    if (rc) {
        skv_seqbuf_free(&s);
        return rc;
    }
    const size_t row = pe->C * pe->es, L = (size_t)pe->p.layers;
    /* compact to stride n: [layers][n][C] */
    for (int x = 0; x < 2; x++)
        for (size_t l = 1; l < L; l++)
            memmove(s.kv[x] + l * n * row, s.kv[x] + l * s.stride * row, n * row);
    *T = n;
    *tok = s.tok;
    *k = s.kv[0];
    *v = s.kv[1];
    cap[0] = s.cap[0];
    cap[1] = s.cap[1];
    return SKV_OK;
}

/* Whether a record decodes from the previous position alone (stat, ctx)
 * or from nothing before it (raw): no model reads the whole prefix, and no
 * base or centroid is decoded first */
static int prev_row_only(const skv_irec *r)
{
    return !r->has_centroid && !r->has_base &&
           (r->level == SEQKV_RAW || r->level == SEQKV_STAT || r->level == SEQKV_CTX);
}

int skv_store_decode_tail(seqkv *db, MDB_txn *txn, const skv_role *role, ns_ent *e, prof_ent *pe, skv_irec *tip,
                          int model_free, int tip_held, seqbuf *s, size_t *from)
{
    const size_t CH = (size_t)pe->p.chunk, nst = (size_t)tip->tr.chunk_index + 1;
    *from = 0;
    if (tip_held && (!model_free || !prev_row_only(tip) || !s->tok || s->stride < nst * CH)) {
        skv_seqbuf_free(s); /* (decoded whole instead) */
        tip_held = 0;
    }
    skv_trie_step *path = NULL;
    int rc = chain_path(e, tip, &path);
    if (rc) {
        skv_seqbuf_free(s);
        return rc;
    }
    /* the first step to decode: the deepest raw record, with no base, before
     * the tip's chunk when every record after it decodes from the position
     * before it alone (and the coder that reads them does: model_free) */
    size_t f = 0;
    for (size_t j = nst - 1; model_free && j-- > 0;) {
        if (!prev_row_only(skv_irec_of(path[j + 1].rec)))
            break;
        if (skv_irec_of(path[j].rec)->level == SEQKV_RAW && prev_row_only(skv_irec_of(path[j].rec))) {
            f = j;
            break;
        }
    }
    /* (a tip's rows held from the step before: only the records before it) */
    const size_t steps = nst - f - (tip_held ? 1 : 0);
    if (!tip_held)
        rc = skv_seqbuf_init(s, pe, nst * CH); /* (the rows before step f stay untouched) */
    if (!rc && steps) {
        dec_ctx c = {db, txn, e, pe, s, skv_store_tick(db), NULL, *role};
        rc = skv_store_decode_path(&c, path + f, steps, NULL, NULL, SIZE_MAX);
        skv_centroid_free(c.cent);
    }
    skv_free(path);
    if (rc) {
        skv_seqbuf_free(s);
        return rc;
    }
    *from = f * CH;
    return SKV_OK;
}

int skv_store_decode_chain(seqkv *db, MDB_txn *txn, const skv_role *role, ns_ent *e, prof_ent *pe, skv_irec *tip,
                           size_t *T, int32_t **tok, uint8_t **k, uint8_t **v, size_t cap[2])
{
    return skv_store_decode_prefix(db, txn, role, e, pe, tip, SIZE_MAX, T, tok, k, v, cap);
}
