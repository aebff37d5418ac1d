/* Coding a sequence, or a range of one, chunk after chunk. */
#include <string.h>

#include "rope.h"

/* What coding positions [q->start, T) needs whatever the chunking: its
 * tokens checked, the exact floats, each token's codebook row, RoPE
 * angles; seq_end frees them (also after a failure here). */
static int seq_begin(seq_ctx *q)
{
    skv_delta *d = q->d;
    const skv_calib *c = d->cal;
    const size_t L = (size_t)c->sh.layers, C = chan_count(&c->sh), T = q->T;
    if (q->start > T || q->stride < T)
        return skv_error(SKV_ERR_ARG, "range [%zu, %zu) with stride %zu", q->start, T, q->stride);
    /* (a model also reads the context's tokens) */
    for (size_t t = d->model ? 0 : q->start; t < T; t++)
        if (q->tok[t] < 0 || q->tok[t] >= c->sh.vocab)
            return skv_error(SKV_ERR_ARG, "token id %d at %zu outside the calibration's vocabulary [0, %d)",
                             q->tok[t], t, c->sh.vocab);
    /* the exact floats of every position, for a model's hook (without
     * one, a stream keeps its last two rows: code_stream, code_pair) */
    for (int kv = 0; kv < 2 && d->model; kv++)
        if (!(q->kvf[kv] = skv_malloc((L * T * C > 0 ? L * T * C : 1) * sizeof(float))))
            return skv_error(SKV_ERR_NOMEM, "sequence buffers");
    /* each token's codebook row, looked up once for every layer's stream */
    q->row = skv_malloc((T ? T : 1) * sizeof *q->row);
    if (!q->row)
        return skv_error(SKV_ERR_NOMEM, "sequence buffers");
    for (size_t t = q->start; t < T; t++)
        q->row[t] = calib_row(c, q->tok[t]);
    /* the codebook feature's RoPE angles, once per position rather than
     * per layer (stat's constant rows seldom need them) */
    if (c->rope_known && T && (d->level != SEQKV_STAT || d->plain)) {
        const size_t half = (size_t)c->sh.rope_dim / 2;
        if (!(q->rope_sc = skv_malloc(T * half * 2 * sizeof(float))))
            return skv_error(SKV_ERR_NOMEM, "sequence buffers");
        for (size_t t = q->start; t < T; t++)
            for (size_t i = 0; i < half; i++)
                rope_angles(c, t, (int)i, &q->rope_sc[(t * half + i) * 2],
                            &q->rope_sc[(t * half + i) * 2 + 1]);
        if (rope_lanes(c) && !d->plain) {
            if (!(q->rope_cs = skv_malloc(T * half * 4 * sizeof(float))))
                return skv_error(SKV_ERR_NOMEM, "sequence buffers");
            for (size_t t = q->start; t < T; t++)
                rope_cs(c, q->rope_sc + t * half * 2, +1, q->rope_cs + t * half * 4);
        }
    }
    return SKV_OK;
}

static void seq_end(seq_ctx *q)
{
    skv_free(q->kvf[0]);
    skv_free(q->kvf[1]);
    skv_free(q->row);
    skv_free(q->rope_sc);
    skv_free(q->rope_cs);
    q->kvf[0] = q->kvf[1] = NULL;
    q->row = NULL;
    q->rope_sc = q->rope_cs = NULL;
}

/* Code positions [q->start, T) in chunks of `chunk` tokens; positions
 * before q->start are exact context (their bytes are in kvb). */
static int code_seq(seq_ctx *q, size_t chunk)
{
    skv_delta *d = q->d;
    const skv_calib *c = d->cal;
    const size_t L = (size_t)c->sh.layers, C = chan_count(&c->sh), T = q->T;
    const size_t es = skv_dtype_size(c->sh.dtype);
    if (chunk == 0)
        return skv_error(SKV_ERR_ARG, "chunk length 0");
    uint8_t *pre[2] = {NULL, NULL};
    skv_kvcache *cache = NULL;
    int rc = seq_begin(q);
    if (rc)
        goto done;
    /* exact floats, for a model: the context when decoding, everything
     * when encoding (its hook reads whole chunks); without one,
     * code_stream makes each row from the bytes when a prediction first
     * reads it (stat's constant rows seldom do) */
    const size_t pre_rows = !d->model ? 0 : q->mode == CODE_DECODE ? q->start : T;
    for (int kv = 0; kv < 2 && pre_rows; kv++)
        for (size_t l = 0; l < L; l++)
            skv_cast_to_f32(c->sh.dtype, q->kvf[kv] + l * T * C, q->kvb[kv] + l * q->stride * C * es,
                            pre_rows * C);
    if (d->model && T && (rc = skv_kvcache_create(skv_model_cfg(d->model), T, &cache)))
        goto done;
    if (cache && q->start && d->level == SEQKV_FULL) {
        /* full is the recompute end: the model runs on its own KV of the
         * context, as it does across the chunks of a whole sequence */
        skv_forward_opts o = {.pool = d->pool};
        rc = skv_model_forward(d->model, cache, q->tok, q->start, &o);
    } else if (cache && q->start) {
        /* the predictor attends over the exact context */
        for (int kv = 0; kv < 2 && !rc; kv++) {
            pre[kv] = skv_malloc(L * q->start * C * es);
            if (!pre[kv])
                rc = skv_error(SKV_ERR_NOMEM, "context buffers");
            for (size_t l = 0; !rc && l < L; l++)
                memcpy(pre[kv] + l * q->start * C * es, q->kvb[kv] + l * q->stride * C * es,
                       q->start * C * es);
        }
        if (!rc)
            rc = skv_kvcache_append(cache, c->sh.dtype, pre[0], pre[1], q->start);
    }
    for (q->t0 = q->start, q->chunk_index = 0; q->t0 < T && !rc; q->t0 = q->t1, q->chunk_index++) {
        q->t1 = q->t0 + chunk < T ? q->t0 + chunk : T;
        if (d->model) {
            q->rc = SKV_OK;
            skv_forward_opts o = {.pool = d->pool, .hook = coder_hook, .hook_ctx = q};
            rc = skv_model_forward(d->model, cache, q->tok + q->t0, q->t1 - q->t0, &o);
            if (!rc)
                rc = q->rc;
        } else {
            rc = code_chunk_parallel(q);
        }
    }
done:
    skv_kvcache_free(cache);
    skv_free(pre[0]);
    skv_free(pre[1]);
    seq_end(q);
    return rc;
}

/* q for coding tokens [0, T) in mode, k and v holding T positions a
 * layer */
static void seq_init(seq_ctx *q, skv_delta *d, code_mode mode, const int32_t *tokens, size_t T,
                     const void *k, const void *v)
{
    memset(q, 0, sizeof *q);
    q->d = d;
    q->mode = mode;
    q->tok = tokens;
    q->T = T;
    q->stride = T;
    q->kvb[0] = (uint8_t *)k;
    q->kvb[1] = (uint8_t *)v;
}

/* q for coding positions [start, end) of tokens in mode, after the exact
 * context [0, start), k and v holding stride positions a layer, with the
 * second prediction aux (or NULL) */
static int range_init(seq_ctx *q, skv_delta *d, code_mode mode, const int32_t *tokens, size_t start,
                      size_t end, size_t stride, const void *k, const void *v, const skv_delta_aux *aux)
{
    if (start >= end)
        return skv_error(SKV_ERR_ARG, "empty range [%zu, %zu)", start, end);
    seq_init(q, d, mode, tokens, end, k, v);
    q->start = start;
    q->stride = stride;
    q->aux = aux;
    return SKV_OK;
}

int skv_delta_encode(skv_delta *d, const int32_t *tokens, size_t T, const void *k, const void *v,
                     size_t chunk, skv_streams *out)
{
    seq_ctx q;
    seq_init(&q, d, CODE_ENCODE, tokens, T, k, v);
    q.out = out;
    return code_seq(&q, chunk);
}

int skv_delta_decode(skv_delta *d, const int32_t *tokens, size_t T, const skv_streams *in,
                     size_t first_stream, size_t chunk, void *k, void *v)
{
    seq_ctx q;
    seq_init(&q, d, CODE_DECODE, tokens, T, k, v);
    q.in = in;
    q.first_stream = first_stream;
    return code_seq(&q, chunk);
}

int skv_delta_encode_range(skv_delta *d, const int32_t *tokens, size_t start, size_t end,
                           size_t stride, const void *k, const void *v, const skv_delta_aux *aux,
                           skv_streams *out)
{
    seq_ctx q;
    int rc = range_init(&q, d, CODE_ENCODE, tokens, start, end, stride, k, v, aux);
    if (rc)
        return rc;
    q.out = out;
    return code_seq(&q, end - start);
}

int skv_delta_decode_range(skv_delta *d, const int32_t *tokens, size_t start, size_t end,
                           size_t stride, const skv_streams *in, size_t first_stream,
                           const skv_delta_aux *aux, void *k, void *v)
{
    seq_ctx q;
    int rc = range_init(&q, d, CODE_DECODE, tokens, start, end, stride, k, v, aux);
    if (rc)
        return rc;
    q.in = in;
    q.first_stream = first_stream;
    return code_seq(&q, end - start);
}

int skv_delta_predict_range(skv_delta *d, const int32_t *tokens, size_t start, size_t end,
                            size_t stride, const void *k, const void *v, float *mu_k, float *mu_v)
{
    seq_ctx q;
    int rc = range_init(&q, d, CODE_PREDICT, tokens, start, end, stride, k, v, NULL);
    if (rc)
        return rc;
    q.mu_out[0] = mu_k;
    q.mu_out[1] = mu_v;
    return code_seq(&q, end - start);
}

struct skv_delta_range {
    seq_ctx q;
};

int skv_delta_range_open(skv_delta *d, const int32_t *tokens, size_t start, size_t end,
                         size_t stride, const skv_streams *in, size_t first_stream,
                         const skv_delta_aux *aux, void *k, void *v, skv_delta_range **out)
{
    *out = NULL;
    if (d->model)
        return skv_error(SKV_ERR_ARG, "a level with a model decodes a chunk's layers together");
    skv_delta_range *r = skv_calloc(1, sizeof *r);
    if (!r)
        return skv_error(SKV_ERR_NOMEM, "range");
    int rc = range_init(&r->q, d, CODE_DECODE, tokens, start, end, stride, k, v, aux);
    if (!rc) {
        r->q.in = in;
        r->q.first_stream = first_stream;
        rc = seq_begin(&r->q);
        r->q.tok = NULL; /* (read by seq_begin only: the caller's may change after) */
        r->q.t0 = start; /* the one chunk (skv_delta_range_stream's calls only read q) */
        r->q.t1 = end;
    }
    if (rc) {
        skv_delta_range_free(r);
        return rc;
    }
    *out = r;
    return SKV_OK;
}

int skv_delta_range_stream(skv_delta_range *r, size_t l, int kv, int worker)
{
    seq_ctx *q = &r->q;
    if (l >= (size_t)q->d->cal->sh.layers || kv < -1 || kv > 1 || worker < 0 ||
        worker >= q->d->nws)
        return skv_error(SKV_ERR_ARG, "stream %zu of %d layers, worker %d of %d", l,
                         q->d->cal->sh.layers, worker, q->d->nws);
    return code_one_stream(q, worker, (int)l, kv);
}

void skv_delta_range_free(skv_delta_range *r)
{
    if (!r)
        return;
    seq_end(&r->q);
    skv_free(r);
}
