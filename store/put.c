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
    skv_rec_at at; /* a raw record's streams left in the put's KV (src NULL: none) */
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
int skv_store_put_level(const prof_ent *pe, int asked)
{
    int l = asked;
    if (seqkv_level_predictive(l) && !pe->p.has_calib)
        return SEQKV_RAW;
    if ((l == SEQKV_SPEC || l == SEQKV_FULL) && !pe->p.model[0])
        l = SEQKV_CTX;
    return l;
}

int skv_store_code_record(seqkv *db, MDB_txn *txn, prof_ent *pe, int level, const seqbuf *s,
                          size_t a, size_t b, skv_rec *r, skv_streams *st)
{
    const size_t L = (size_t)pe->p.layers, row = pe->C * pe->es;
    int rc = SKV_OK;
    coder_ent *ce = NULL;
    const skv_role writer = SKV_WRITER; /* (coding is the writer's: it holds wlock) */
    if (seqkv_level_predictive(level)) {
        if ((rc = skv_store_coder(db, txn, pe, pe->p.calib_id, level, &writer, &ce)))
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
    r->level = (uint8_t)level;
    if (level == SEQKV_RAW) {
        for (size_t l = 0; l < L && !rc; l++)
            for (int kv = 0; kv < 2 && !rc; kv++)
                rc = skv_streams_append(st, s->kv[kv] + (l * s->stride + a) * row, (b - a) * row);
    } else if (level == SEQKV_FAST) {
        rc = skv_store_fast_encode(pe, s->kv[0], s->kv[1], s->stride, a, b, st);
    } else {
        rc = skv_delta_encode_range(ce->d, s->tok, a, b, s->stride, s->kv[0], s->kv[1], NULL, st);
        skv_store_coder_release(db, ce);
        memcpy(r->calib, pe->p.calib_id, 16);
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
    const skv_role writer = SKV_WRITER;
    int rc = skv_store_coder(db, txn, pe, q->r.calib, q->r.level, &writer, &ce);
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
            q->r.flags |= SKV_REC_CENTROID | (cent->by_content ? SKV_REC_CONTENT : 0);
            memcpy(q->r.centroid, cent->tip_key, 32);
            *used = 1;
        }
    }
    skv_streams_free(&st2);
    skv_free(buf);
    return rc;
}

/* One attempt at a put (put_prepare): what its steps share */
typedef struct {
    seqkv *db;
    seqkv_put_req *req;
    seqkv_put_opts opts;  /* the request's, or the defaults */
    struct skv_put_batch *pb;
    prof_ent *pe;
    tenant_ent *te;
    ns_ent *e;
    size_t L, row, CH, nchunks;
    int level;            /* of the new records (put_level) */
    int lossy;            /* they are coded lossy where outside the exact window */
    int ctx_stored;       /* s's positions [0, m) hold the stored KV (put_context) */
    skv_trie_step *path;  /* the cached prefix: steps records, m tokens */
    size_t steps, m;
    newrec *nr;           /* the new records: nnew of nchunks */
    size_t nnew;
    seqbuf s;             /* the put's tokens and KV in the coder layout */
    float *sur;           /* per-token surprisal, or NULL */
    uint64_t total;       /* the new records' bytes */
} put_ctx;

/* The request's checks: a writable store, its length, the profile, the
 * KV's size against the profile's shape and the token ids */
static int put_check(seqkv *db, const seqkv_put_req *req, prof_ent **out)
{
    const char *profile = req->profile;
    const int32_t *tokens = req->tokens;
    const size_t n = req->n;
    if (db->o.read_only)
        return skv_error(SKV_ERR_ARG, "store opened read-only");
    if (n == 0)
        return skv_error(SKV_ERR_ARG, "put of no tokens");
    if (n > SEQKV_MAX_TOKENS)
        return skv_error(SKV_ERR_TOO_LARGE, "%zu tokens (at most %u)", n, SEQKV_MAX_TOKENS);
    prof_ent *pe = profile ? skv_store_profile(db, profile) : NULL;
    if (!pe)
        return skv_store_no_profile(db, profile);
    const size_t L = (size_t)pe->p.layers, row = pe->C * pe->es;
    if (req->kv_len != L * 2 * n * row)
        return skv_error(SKV_ERR_SHAPE,
                         "KV of %zu bytes for %zu tokens; profile %s needs %zu (%d layers x K,V x %zu "
                         "tokens x %d heads x %d dims x %zu bytes)",
                         req->kv_len, n, pe->p.name, L * 2 * n * row, pe->p.layers, n, pe->p.kv_heads,
                         pe->p.head_dim, pe->es);
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0)
            return skv_error(SKV_ERR_ARG, "negative token id at %zu", i);
    /* token ids are bounded by the profile: by its model's vocabulary,
     * else by its vocab setting */
    int vocab = pe->p.vocab > 0 ? pe->p.vocab : SEQKV_VOCAB_DEFAULT;
    const char *what = "the profile's vocab bound";
    if (pe->p.model[0]) {
        skv_model *mm;
        int rc = skv_store_profile_model(db, pe, &mm);
        if (rc)
            return rc;
        vocab = skv_model_cfg(mm)->vocab_size;
        what = "the model's vocabulary";
    }
    for (size_t i = 0; i < n; i++)
        if (tokens[i] >= vocab)
            return skv_error(SKV_ERR_ARG, "token id %d at %zu outside %s (ids in [0, %d))", tokens[i],
                             i, what, vocab);
    *out = pe;
    return SKV_OK;
}

/* The tenant (the shared one for a shared put) and its namespace of the
 * profile, made when absent */
static int put_namespace(put_ctx *pc)
{
    seqkv *db = pc->db;
    const char *tname = pc->opts.shared ? SEQKV_SHARED_TENANT : pc->req->tenant;
    int rc = skv_store_tenant(db, tname ? tname : "", 1, &pc->te);
    if (rc)
        return rc;
    pthread_rwlock_wrlock(&db->rw);
    rc = skv_store_namespace(db, pc->te->id, pc->pe, &pc->e);
    pthread_rwlock_unlock(&db->rw);
    return rc;
}

/* The level of the new records and the cached prefix (none when
 * standalone), its records made recent */
static int put_match(put_ctx *pc, int standalone, int *prefix)
{
    const size_t n = pc->req->n;
    pc->L = (size_t)pc->pe->p.layers;
    pc->row = pc->pe->C * pc->pe->es;
    pc->CH = (size_t)pc->pe->p.chunk;
    pc->level = skv_store_put_level(pc->pe, (int)(pc->opts.has_level ? pc->opts.level : pc->pe->p.level));
    pc->nchunks = (n + pc->CH - 1) / pc->CH;
    pc->path = skv_malloc((pc->nchunks + 1) * sizeof *pc->path);
    pc->nr = skv_calloc(pc->nchunks, sizeof *pc->nr);
    if (!pc->path || !pc->nr)
        return skv_error(SKV_ERR_NOMEM, "put");
    pc->m = standalone ? 0
                       : skv_trie_match_all(pc->e->trie, pc->req->tokens, n, pc->path, pc->nchunks + 1,
                                            &pc->steps);
    if (!standalone)
        *prefix = pc->steps > 0;
    for (size_t j = 0; j < pc->steps; j++)
        skv_irec_of(pc->path[j].rec)->tick = skv_store_tick(pc->db);
    pc->req->res.cached_tokens = pc->m;
    return SKV_OK;
}

/* the client's KV into the coder layout */
static int put_load(put_ctx *pc)
{
    const size_t n = pc->req->n, row = pc->row;
    int rc = skv_seqbuf_init(&pc->s, pc->pe, pc->nchunks * pc->CH);
    if (rc)
        return rc;
    const uint8_t *in = pc->req->kv;
    for (size_t l = 0; l < pc->L; l++)
        for (int k = 0; k < 2; k++, in += n * row)
            memcpy(pc->s.kv[k] + l * pc->s.stride * row, in, n * row);
    memcpy(pc->s.tok, pc->req->tokens, n * sizeof(int32_t));
    return SKV_OK;
}

/* context: the cached prefix as stored (the decoder will see it, not
 * the client's copy) whenever the level reads earlier positions */
static int put_context(put_ctx *pc)
{
    if (pc->m == 0 || !seqkv_level_predictive(pc->level) || pc->level < SEQKV_CTX)
        return SKV_OK;
    seqkv *db = pc->db;
    const size_t row = pc->row;
    seqbuf ctx;
    MDB_txn *txn = NULL;
    int rc = skv_seqbuf_init(&ctx, pc->pe, pc->steps * pc->CH);
    if (rc)
        return rc;
    int mrc = mdb_txn_begin(db->env, NULL, MDB_RDONLY, &txn);
    rc = mrc ? skv_mdb_error(mrc, "begin transaction") : SKV_OK;
    if (!rc) {
        dec_ctx c = {db, txn, pc->e, pc->pe, &ctx, skv_store_tick(db), NULL, SKV_WRITER};
        rc = skv_store_decode_path(&c, pc->path, pc->steps, NULL, NULL, pc->m);
        skv_centroid_free(c.cent);
    }
    if (txn)
        mdb_txn_abort(txn);
    for (size_t l = 0; !rc && l < pc->L; l++)
        for (int k = 0; k < 2; k++)
            memcpy(pc->s.kv[k] + l * pc->s.stride * row, ctx.kv[k] + l * ctx.stride * row, pc->m * row);
    skv_seqbuf_free(&ctx);
    pc->ctx_stored = rc == SKV_OK;
    return rc;
}

/* raw records are never coded against a centroid: no model pass for
 * them unless the client sends its surprisal */
static int put_surprisal(put_ctx *pc)
{
    const float *given = pc->opts.surprisal;
    const size_t m = pc->m, CH = pc->CH;
    if (!(seqkv_level_predictive(pc->level) || given))
        return SKV_OK;
    int rc = surprisal(pc->db, pc->pe, pc->req->tokens, pc->req->n, m, &pc->s, given, &pc->sur);
    if (rc)
        return rc;
    if (pc->sur && !given && m % CH) {
        /* the first new record repeats its base's tokens [P, m) */
        const skv_irec *b = skv_irec_of(pc->path[m / CH].rec);
        for (size_t t = 0; t < m % CH; t++)
            pc->sur[(m / CH) * CH + t] = b->tr.surprisal ? b->tr.surprisal[t] : 16.0f;
    }
    return SKV_OK;
}

/* The header of new record q, chunk i of hi tokens: its parent, its base
 * (if any) and key; returns lo, its first position of its own */
static size_t record_header(put_ctx *pc, size_t i, size_t hi, newrec *q)
{
    const size_t CH = pc->CH, P = i * CH, m = pc->m;
    const ns_ent *e = pc->e;
    size_t lo = i == m / CH ? m - P : 0;
    const uint8_t *parent;
    if (i == 0)
        parent = skv_trie_root(e->trie);
    else if (pc->nnew > 0)
        parent = pc->nr[pc->nnew - 1].key;
    else
        parent = pc->path[i - 1].rec->key;
    memset(&q->r, 0, sizeof q->r);
    memcpy(q->r.parent, parent, 32);
    /* positions [P, P + lo) come from the record that matched them when
     * the new one extends it or shares a good part of it; a short
     * shared start (a BOS) is coded again rather than tying the two
     * records together (a base can go only after its dependants) */
    if (lo > 0 && lo < SKV_MIN_BASE && lo < pc->path[i].rec->n)
        lo = 0;
    if (lo > 0) {
        memcpy(q->r.base, pc->path[i].rec->key, 32);
        q->r.flags |= SKV_REC_BASE;
    }
    skv_chain_next(e->secret, parent, pc->req->tokens + P, hi, q->key);
    q->r.tenant = pc->te->id;
    memcpy(q->r.profile, pc->pe->p.id, 32);
    q->r.chunk_index = (uint32_t)i;
    q->r.n = (uint32_t)hi;
    q->r.lo = (uint32_t)lo;
    if (hi == CH)
        q->r.flags |= SKV_REC_FULL;
    return lo;
}

/* The image of new record q (positions [P, P + hi), streams st; or,
 * when q->at.src, streams that stay where they are: its image less them) */
static int record_image(put_ctx *pc, newrec *q, const skv_streams *st, size_t P, size_t hi)
{
    const int32_t *tokens = pc->req->tokens;
    const float *sur = pc->sur;
    int rc = SKV_OK;
    const size_t ns = q->at.src ? q->at.nstreams : st->nstreams;
    uint8_t *tb = skv_malloc(hi * 4), *sb = sur ? skv_malloc(hi * 4) : NULL, *sz = skv_malloc(ns * 4 + 4);
    if (!tb || (sur && !sb) || !sz)
        rc = skv_error(SKV_ERR_NOMEM, "record");
    if (!rc) {
        for (size_t t = 0; t < hi; t++) {
            skv_store32_le(tb + 4 * t, (uint32_t)tokens[P + t]);
            if (sb)
                skv_store32_le(sb + 4 * t, skv_f32_bits(sur[P + t]));
        }
        for (size_t j = 0; j < ns; j++)
            skv_store32_le(sz + 4 * j, (uint32_t)(q->at.src ? q->at.sz : st->offs[j + 1] - st->offs[j]));
        q->r.tokens = tb;
        q->r.surprisal = sb;
        q->r.nstreams = (uint32_t)ns;
        q->r.sizes = sz;
        q->r.streams = q->at.src ? NULL : st->data;
        q->r.streams_len = q->at.src ? ns * q->at.sz : st->len;
        q->len = skv_rec_size(&q->r);
        q->at.head_len = q->len - q->r.streams_len - SKV_REC_TRAILER;
        q->img = skv_malloc(q->at.src ? q->at.head_len + SKV_REC_TRAILER : q->len);
        if (!q->img)
            rc = skv_error(SKV_ERR_NOMEM, "record");
        else if (q->at.src)
            skv_rec_write_at(&q->r, &q->at, q->img);
        else
            skv_rec_write(&q->r, q->img);
        pc->total += skv_store_rec_bytes(pc->db, q->len);
    }
    skv_free(tb);
    skv_free(sb);
    skv_free(sz);
    return rc;
}

size_t skv_put_in_place;

/* A raw record of positions [a, b) whose streams stay in the put's KV
 * until the batch commits, where they are sealed straight into its value
 * file (vfile.c): no copy of them into streams and an image first. Only
 * for positions the put brought (its bytes are the ones stored), and for
 * a record bound sealed for a file (else the batch gathers it again). */
static int raw_in_place(put_ctx *pc, size_t a, size_t b, newrec *q)
{
    const seqkv *db = pc->db;
    const size_t L = pc->L, n = pc->req->n, row = pc->row, ns = 2 * L;
    if (pc->level != SEQKV_RAW || pc->lossy || a < pc->m || db->o.no_seal || db->tier_fn ||
        db->vf.dir_fd < 0 || ns * (b - a) * row < db->vf.min)
        return SKV_OK;
    const uint8_t **src = skv_malloc(ns * sizeof *src);
    if (!src)
        return skv_error(SKV_ERR_NOMEM, "record");
    /* the put's KV: [layers][K, V][n][row] */
    for (size_t j = 0; j < ns; j++)
        src[j] = (const uint8_t *)pc->req->kv + (j * n + a) * row;
    q->at = (skv_rec_at){src, (b - a) * row, (uint32_t)ns, 0};
    q->r.level = SEQKV_RAW;
    __atomic_fetch_add(&skv_put_in_place, 1, __ATOMIC_RELAXED);
    return SKV_OK;
}

/* New record nr[nnew], chunk i: coded (against the centroid cent when
 * that is smaller) into its image */
static int put_chunk(put_ctx *pc, MDB_txn *rtxn, const skv_centroid *cent, size_t i)
{
    seqkv_put_result *res = &pc->req->res;
    newrec *q = &pc->nr[pc->nnew];
    const size_t P = i * pc->CH, hi = (pc->req->n - P < pc->CH ? pc->req->n - P : pc->CH);
    const size_t lo = record_header(pc, i, hi, q);
    skv_streams st = {0};
    int rc = SKV_OK, lossy = 0;
    q->at = (skv_rec_at){0};
    if (pc->lossy)
        rc = skv_store_lossy_code(pc->db, rtxn, pc->pe, &pc->s, P + lo, P + hi, pc->req->n, &q->r, &st,
                                  &lossy);
    if (!rc && !lossy)
        rc = raw_in_place(pc, P + lo, P + hi, q);
    if (!rc && !lossy && !q->at.src)
        rc = skv_store_code_record(pc->db, rtxn, pc->pe, pc->level, &pc->s, P + lo, P + hi, &q->r, &st);
    /* the checksum of what a get decodes: after coding, as a lossy record
     * leaves its reconstruction in s */
    q->r.checksum = skv_seqbuf_checksum(pc->pe, &pc->s, P + lo, P + hi);
    uint8_t *side = NULL;
    size_t side_len = 0;
    int used = 0;
    if (!rc && cent && seqkv_level_predictive(q->r.level))
        rc = try_centroid(pc->db, rtxn, pc->pe, cent, &pc->s, P + lo, P + hi, q, &st, &side, &side_len,
                          &used);
    if (used)
        res->centroid_tokens += hi - lo;
    q->r.side = side;
    q->r.side_len = (uint32_t)side_len;
    /* (a record of at least half a chunk: a short one's headers are most of it) */
    if (!rc && !used && seqkv_level_predictive(q->r.level) && 2 * (hi - lo) >= pc->CH)
        skv_store_drift(pc->pe, st.len, (hi - lo) * 2 * (uint64_t)pc->pe->p.layers * pc->pe->C);
    if (!rc)
        rc = record_image(pc, q, &st, P, hi);
    skv_free(side);
    skv_streams_free(&st);
    if (!rc && q->at.src) /* (what the index needs: the head) */
        rc = skv_rec_parse_head(q->img, q->at.head_len, q->r.streams_len, &q->r);
    else if (!rc) /* keep what the index needs; the image holds the rest */
        skv_rec_parse(q->img, q->len, &q->r);
    res->new_tokens += hi - lo;
    return rc;
}

/* code the new records: chunk i0 from m on, then whole chunks */
static int put_code(put_ctx *pc)
{
    seqkv *db = pc->db;
    MDB_txn *rtxn = NULL;
    int rc = SKV_OK;
    if (seqkv_level_predictive(pc->level) || pc->pe->p.lossy) {
        int mrc = mdb_txn_begin(db->env, NULL, MDB_RDONLY, &rtxn);
        rc = mrc ? skv_mdb_error(mrc, "begin transaction") : SKV_OK;
    }
    /* the opt-in lossy tier, once the profile has its calibration (a
     * put that names its level codes exactly at it) */
    pc->lossy = !rc && pc->pe->p.lossy && !pc->opts.has_level && skv_store_lossy_ready(db, rtxn, pc->pe);
    skv_centroid *cent = NULL;
    if (!rc && seqkv_level_predictive(pc->level) && !db->o.no_centroids && !pc->lossy)
        rc = skv_cluster_find(db, rtxn, pc->e, pc->pe, pc->req->tokens, pc->req->n, pc->m, pc->path,
                              pc->steps, &cent);
    for (size_t i = pc->m / pc->CH; !rc && i < pc->nchunks; i++, pc->nnew++)
        rc = put_chunk(pc, rtxn, cent, i);
    skv_centroid_free(cent);
    if (rtxn)
        mdb_txn_abort(rtxn);
    return rc;
}

/* The new records, coded: the put's KV in the coder layout with the
 * cached prefix's context, its surprisal, then each chunk */
static int put_new_records(put_ctx *pc)
{
    int rc;
    if ((rc = put_load(pc)) || (rc = put_context(pc)) || (rc = put_surprisal(pc)))
        return rc;
    return put_code(pc);
}

/* room: the budgets first (protect the path the new records need) */
static int put_room(put_ctx *pc)
{
    seqkv *db = pc->db;
    seqkv_put_result *res = &pc->req->res;
    int rc = SKV_OK;
    for (size_t j = 0; j < pc->steps; j++)
        skv_irec_of(pc->path[j].rec)->evicting = 1;
    if (db->o.budget)
        rc = skv_store_evict(db, 0, db->stored, db->o.budget, pc->total, &res->evicted);
    if (!rc && pc->te->budget)
        rc = skv_store_evict(db, pc->te->id, pc->te->used, pc->te->budget, pc->total, &res->evicted);
    for (size_t j = 0; j < pc->steps; j++)
        skv_irec_of(pc->path[j].rec)->evicting = 0;
    return rc;
}

/* The hot tier's copy of new record q: the put's own KV of its chunk,
 * which is what a get of it returns -- but positions [0, lo), from a base
 * record, only when the put's buffer holds the stored KV there (a level
 * with context decoded it; else the put's bytes may differ from the
 * base's); NULL without a tier or memory (the first get decodes it) */
static hot_chunk *put_hot(put_ctx *pc, const newrec *q)
{
    if (!pc->db->hot || (q->r.lo > 0 && !pc->ctx_stored))
        return NULL;
    return skv_store_hot_entry(pc->pe, q->key, q->r.n, &pc->s,
                               (size_t)q->r.chunk_index * pc->CH);
}

/* the path's recency, which goes out with the batch's commit (the remote
 * tier hears of the records reused: tier.c); room reserved */
static void put_ticks(put_ctx *pc)
{
    struct skv_put_batch *pb = pc->pb;
    for (size_t j = 0; j < pc->steps; j++) {
        pend_tick *p = &pb->tick[pb->ntick++];
        p->e = pc->e;
        memcpy(p->key, pc->path[j].rec->key, 32);
    }
}

/* index the new records, hidden from readers until the batch commits
 * (later puts of the batch see them: skv_trie_match_all, skv_batch_find),
 * and the path's recency, which goes out with them */
static int put_index(put_ctx *pc)
{
    seqkv *db = pc->db;
    struct skv_put_batch *pb = pc->pb;
    seqkv_put_result *res = &pc->req->res;
    ns_ent *e = pc->e;
    int rc = skv_batch_reserve(pb, pc->nnew, pc->steps);
    if (rc)
        return rc;
    const size_t first = pb->nrec;
    pthread_rwlock_wrlock(&db->rw);
    const uint64_t tk = skv_store_tick(db);
    for (size_t j = 0; j < pc->nnew && !rc; j++) {
        newrec *q = &pc->nr[j];
        if (skv_irec_find(e->trie, q->key))
            continue; /* the same tokens under the same key: stored already */
        rc = skv_store_index(db, q->key, &q->r, skv_store_rec_bytes(db, q->len), tk);
        skv_irec *t = rc ? NULL : skv_irec_find(e->trie, q->key);
        if (!t)
            break;
        t->tr.hidden = 1;
        skv_store_deps(e, t, +1);
        pend_rec *p = &pb->rec[pb->nrec++];
        p->e = e;
        memcpy(p->key, q->key, 32);
        p->img = q->img;
        p->len = q->len;
        p->at = q->at;
        p->hot = put_hot(pc, q);
        q->img = NULL;
        q->at.src = NULL;
        pb->bytes += skv_store_rec_bytes(db, p->len);
        res->chunks++;
        res->bytes += skv_store_rec_bytes(db, p->len);
    }
    pthread_rwlock_unlock(&db->rw);
    if (rc) {
        skv_batch_drop(db, pb, first);
        return rc;
    }
    put_ticks(pc);
    return SKV_OK;
}

/* One attempt at a put, into the writer's batch: its new records coded
 * and indexed hidden (batch_commit writes them). standalone: ignore the cached prefix (code the
 * whole sequence, depend on nothing), for when the budget cannot hold the
 * new records next to the prefix they would depend on; *again asks for
 * that retry. */
static int put_prepare(seqkv *db, seqkv_put_req *req, int standalone, int *again, int *prefix,
                       struct skv_put_batch *pb)
{
    seqkv_put_result *res = &req->res;
    memset(res, 0, sizeof *res);
    put_ctx pc = {.db = db, .req = req, .opts = SEQKV_PUT_OPTS_INIT, .pb = pb};
    int rc = req->opts ? skv_store_opts(&pc.opts, sizeof pc.opts, req->opts, "seqkv_put_opts") : SKV_OK;
    if (!rc)
        rc = put_check(db, req, &pc.pe);
    if (!rc)
        rc = put_namespace(&pc);
    if (rc)
        return rc;
    rc = put_match(&pc, standalone, prefix);
    if (!rc && pc.m == req->n && !(rc = skv_batch_reserve(pb, 0, pc.steps)))
        put_ticks(&pc); /* everything is cached already: its path is used */
    if (rc || pc.m == req->n)
        goto done;
    rc = put_new_records(&pc);
    if (!rc)
        rc = put_room(&pc);
    if (rc == SKV_ERR_TOO_LARGE && pc.steps > 0)
        *again = 1; /* the prefix itself is in the way */
    if (!rc)
        rc = put_index(&pc);
done:
    for (size_t j = 0; j < pc.nchunks && pc.nr; j++) {
        skv_free(pc.nr[j].img);
        skv_free((void *)pc.nr[j].at.src);
    }
    skv_free(pc.nr);
    skv_free(pc.path);
    skv_free(pc.sur);
    skv_seqbuf_free(&pc.s);
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
