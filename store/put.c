/* put (seqkv.h): one request's new records coded and indexed hidden in
 * the writer's batch (batch.c commits them). */
#include <math.h>
#include <string.h>

#include "store_cluster.h"

/* Shortest shared start of a chunk taken from a sibling (a base), unless
 * the new record simply extends it. */
#define SKV_MIN_BASE 16

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
        rc = skv_seqbuf_init(&s, pe, nchunks * CH);
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
        rc = skv_seqbuf_init(&ctx, pe, steps * CH);
        if (!rc) {
            int mrc = mdb_txn_begin(db->env, NULL, MDB_RDONLY, &txn);
            rc = mrc ? skv_mdb_error(mrc, "begin transaction") : SKV_OK;
        }
        if (!rc) {
            dec_ctx c = {db, txn, e, pe, &ctx, skv_store_tick(db), NULL};
            rc = skv_store_decode_path(&c, path, steps, NULL, NULL, m);
            skv_centroid_free(c.cent);
        }
        if (txn)
            mdb_txn_abort(txn);
        for (size_t l = 0; !rc && l < L; l++)
            for (int k = 0; k < 2; k++)
                memcpy(s.kv[k] + l * s.stride * row, ctx.kv[k] + l * ctx.stride * row, m * row);
        skv_seqbuf_free(&ctx);
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
        q->r.checksum = skv_seqbuf_checksum(pe, &s, P + lo, P + hi);
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
        rc = skv_store_evict(db, 0, db->stored, db->o.budget, total, &res->evicted);
    if (!rc && te->budget)
        rc = skv_store_evict(db, te->id, te->used, te->budget, total, &res->evicted);
    if (rc == SKV_ERR_TOO_LARGE && steps > 0)
        *again = 1; /* the prefix itself is in the way */
    for (size_t j = 0; j < steps; j++)
        path[j].rec->evicting = 0;
    /* index the new records, hidden from readers until the batch commits
     * (later puts of the batch see them: skv_trie_match_all, pend_find) */
    if (!rc)
        rc = skv_batch_reserve(pb, nnew, steps);
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
            skv_batch_drop(db, pb, first);
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
    skv_seqbuf_free(&s);
    if (rc)
        memset(res, 0, sizeof *res);
    return rc;
}

/* One request into the batch, as if put alone: when its cached prefix is
 * in the way of the room it needs, it is put standalone instead. */
int skv_store_put_one(seqkv *db, seqkv_put_req *q, struct skv_put_batch *pb, int standalone,
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
