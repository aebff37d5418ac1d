/* Coding the 2L streams (layer, k/v) of one chunk, row by row. */
#include <string.h>

#include "codec_tune.h"
#include "predict.h"
#include "rows.h"

/* Begin dec on stream (layer l, kv) of the current chunk (stream
 * first_stream + chunk_index * 2L + 2l + kv), checking its size and
 * calibration */
static int begin_stream(const seq_ctx *q, skv_decoder *dec, int l, int kv, const skv_atoms *atoms)
{
    const skv_calib *c = q->d->cal;
    const size_t C = chan_count(&c->sh), L = (size_t)c->sh.layers;
    size_t si = q->first_stream + q->chunk_index * 2 * L + (size_t)l * 2 + (size_t)kv;
    if (si >= q->in->nstreams)
        return skv_error(SKV_ERR_FORMAT, "missing stream for layer %d %s", l, kv ? "V" : "K");
    size_t a = q->in->offs[si], b = q->in->offs[si + 1];
    skv_stream_info info;
    int rc = skv_decoder_begin_atoms(dec, q->in->data + a, b - a, atoms, &info);
    if (rc)
        return rc;
    if (info.n != (q->t1 - q->t0) * C)
        return skv_error(SKV_ERR_CORRUPT, "stream holds %u scalars, the chunk has %zu", info.n,
                         (q->t1 - q->t0) * C);
    if (memcmp(info.calib_id, c->id, 16) != 0)
        return skv_error(SKV_ERR_CORRUPT, "stream was coded with another calibration");
    return SKV_OK;
}

/* Each channel's weights, per seen-class (predict_row's wc), from W's per
 * (head, seen-class) */
static void channel_weights(const float *W, size_t H, size_t D, float *wc)
{
    const size_t C = H * D;
    for (size_t seen = 0; seen < 2; seen++)
        for (size_t f = 0; f < NF; f++)
            for (size_t h = 0; h < H; h++)
                for (size_t dd = 0; dd < D; dd++)
                    wc[(seen * NF + f) * C + h * D + dd] = W[(h * 2 + seen) * NF + f];
}

/* Whether code_pair decodes layer l's two streams: a bf16 model-free
 * level whose rows of both are predict_row's (no constant rows, as
 * code_stream would code stat's), without a second prediction */
static int pair_rows(const seq_ctx *q, int l)
{
    const skv_delta *d = q->d;
    const skv_calib *c = d->cal;
    const size_t C = chan_count(&c->sh), H = (size_t)c->sh.kv_heads;
    if (q->mode != CODE_DECODE || d->model || q->aux || d->plain || c->sh.dtype != SEQKV_DT_BF16 ||
        C % 8)
        return 0;
    for (size_t kv = 0; kv < 2; kv++) {
        const float *W = c->w[d->level] + ((size_t)l * 2 + kv) * H * 2 * NF;
        if (all_small(c->mean + ((size_t)l * 2 + kv) * C, C) && (mean_only(W, H, 0) || mean_only(W, H, 1)))
            return 0;
    }
    return 1;
}

/* Decode layer l's K and V streams of the current chunk together, a row
 * of each at a time through skv_decoder_get_n2 (their groups in turn):
 * the same predictions as code_stream's, the same values. */
static int code_pair(seq_ctx *q, struct coder_ws *ws, int l)
{
    const skv_calib *c = q->d->cal;
    const size_t C = chan_count(&c->sh), H = (size_t)c->sh.kv_heads, D = (size_t)c->sh.head_dim,
                 half = (size_t)(c->sh.rope_dim / 2);
    skv_decoder *const dec[2] = {ws->dec, ws->dec2};
    /* each stream's weights (predict_row's), mu, decoded row and its floats
     * (the row before and this one, in turn: predictions read nothing
     * older, and the floats of the whole sequence would only crowd the
     * cache) */
    const size_t per = (2 * NF + 3) * C * sizeof(float) + C * sizeof(uint32_t);
    if (2 * per > ws->paircap) {
        void *b = skv_malloc(2 * per);
        if (!b)
            return skv_error(SKV_ERR_NOMEM, "row buffers");
        skv_free(ws->pair);
        ws->pair = b;
        ws->paircap = 2 * per;
    }
    float *wc[2], *mu[2], *X[2];
    uint32_t *x[2];
    for (int kv = 0; kv < 2; kv++) {
        wc[kv] = (float *)(void *)((uint8_t *)ws->pair + (size_t)kv * per);
        mu[kv] = wc[kv] + 2 * NF * C;
        X[kv] = mu[kv] + C; /* row t at X + (t & 1) * C */
        x[kv] = (uint32_t *)(void *)(X[kv] + 2 * C);
    }
    const float *mean[2], *S[2];
    uint8_t *B[2];
    for (int kv = 0; kv < 2; kv++) {
        const size_t lk = (size_t)l * 2 + (size_t)kv;
        mean[kv] = c->mean + lk * C;
        S[kv] = c->s[q->d->level] + lk * 2 * C;
        B[kv] = q->kvb[kv] + (size_t)l * q->stride * C * 2;
        channel_weights(c->w[q->d->level] + lk * H * 2 * NF, H, D, wc[kv]);
        skv_decoder_set_row_cache(dec[kv], 0);
        int rc = begin_stream(q, dec[kv], l, kv, NULL);
        if (rc)
            return rc;
        if (q->t0) /* the row before, from its bytes (code_stream makes rows lazily) */
            skv_cast_to_f32(SEQKV_DT_BF16, X[kv] + ((q->t0 - 1) & 1) * C, B[kv] + (q->t0 - 1) * C * 2, C);
    }
    for (size_t t = q->t0; t < q->t1; t++) {
        const int32_t row = q->row[t];
        const size_t seen = row >= 0;
        if (t + 1 < q->t1 && q->row[t + 1] >= 0) /* the next codebook rows (code_stream's fetch_cb) */
            for (size_t kv = 0; kv < 2; kv++)
                for (size_t o = 0; o < C * sizeof(float); o += 64)
                    __builtin_prefetch((const char *)(c->cb + (((size_t)l * c->n_tok + (size_t)q->row[t + 1]) * 2 + kv) * C) + o);
        for (int kv = 0; kv < 2; kv++) {
            /* cb_feature_sc's row: V's and an unseen token's read where they lie */
            const float *fc = !seen ? mean[kv] : c->cb + (((size_t)l * c->n_tok + (size_t)row) * 2 + (size_t)kv) * C;
            if (seen && kv == 0) {
                cb_feature_sc(c, l, kv, row, t, NULL, q->rope_sc ? q->rope_sc + t * half * 2 : NULL,
                              q->rope_cs ? q->rope_cs + t * half * 4 : NULL, ws->cbf);
                fc = ws->cbf;
            }
            predict_row(wc[kv] + seen * NF * C, C, NULL, t ? X[kv] + ((t - 1) & 1) * C : mean[kv], fc, mean[kv],
                        mu[kv]);
        }
        const float *const m2[2] = {mu[0], mu[1]}, *const s2[2] = {S[0] + seen * C, S[1] + seen * C};
        uint32_t *const x2[2] = {x[0], x[1]};
        int rc = skv_decoder_get_n2(dec, m2, s2, x2, C);
        if (rc)
            return rc;
        for (int kv = 0; kv < 2; kv++)
            bf16_row_store(B[kv] + t * C * 2, X[kv] + (t & 1) * C, x[kv], C);
    }
    int rc = skv_decoder_end(dec[0]);
    return rc ? rc : skv_decoder_end(dec[1]);
}

/* ---- one stream, row by row (code_stream) -------------------------------------- */

/* The row buffers of code_stream: on the stack up to 512 channels (256
 * for the weights), else on the heap */
typedef struct {
    float mu[512], s[512], wc[2 * NF * 256];
    uint32_t x[512];
    float muc[2][512];
    float ring[2 * 512];
} row_stack;

/* The stream (layer l, kv) of the current chunk: its slice of the
 * calibration, its rows and the buffers that code them. Set once before
 * the rows (stream_rows_open), read-only through them. */
typedef struct {
    int l, kv;
    size_t C, H, D, es;
    seqkv_dtype dt;
    const float *mean;       /* [C] */
    const float *S;          /* [2][C]: s per seen-class */
    const float *W;          /* [H][2][NF]: weights per (head, seen-class) */
    float *X;                /* exact floats: [T][C] with a model, else
                                the row before and this one (row t at
                                X + (t & 1) * C): predictions read nothing
                                older, and the floats of the whole range
                                would be fresh memory each call */
    uint8_t *B;              /* dtype bytes [stride][C] */
    const float *model_pred; /* the model's rows of the chunk, or NULL */
    /* range coding: an optional second prediction (a centroid) blended per
     * head; CODE_PREDICT hands mu back (into mo) instead of coding */
    const float *apred, *aw, *as;
    float *mo;
    /* one position row at a time through the codec's batch calls: the row's
     * predictions depend only on earlier rows */
    float *mu_row, *s_row, *wc; /* wc: channel_weights of W */
    uint32_t *x_row;
    /* stat: mu is a constant row per seen-class (mean_only), computed once;
     * rows whose features are not all finite take the general path */
    float *muc[2];
    /* without a model: a row of X is made from the bytes (the input, or
     * what was decoded) when a prediction first reads it, as the previous
     * row (code_seq); stat's runs of constant rows store only bytes */
    int lazy_x;
    /* the codebook row of the next position, fetched a row ahead: its
     * token picks it from the whole vocabulary, so it is seldom in L1 (not
     * at stat, whose constant rows mostly skip it) */
    const float *cb_lk;
    int fetch_cb;
} stream_rows;

/* Make ready to decode stream (l, kv) (begin_stream), or set the encoder
 * up for it; predicting alone needs neither */
static int begin_coding(const seq_ctx *q, struct coder_ws *ws, int l, int kv, const skv_atoms *atoms)
{
    const skv_delta *d = q->d;
    if (q->mode == CODE_DECODE) {
        skv_decoder_set_row_cache(ws->dec, d->level == SEQKV_STAT);
        return begin_stream(q, ws->dec, l, kv, atoms);
    }
    if (q->mode == CODE_ENCODE) {
        skv_encoder_set_ideal(ws->enc, d->ideal_on);
        skv_encoder_set_version(ws->enc, d->version);
        skv_encoder_set_states(ws->enc, level_states(d->level));
        /* rows predicted from the row before never repeat (stat's do) */
        skv_encoder_set_row_cache(ws->enc, d->level == SEQKV_STAT);
        skv_encoder_reset_atoms(ws->enc, d->cal->id, atoms);
    }
    return SKV_OK;
}

/* stat's constant rows (r->muc) for the seen-classes whose weights are
 * mean_only, when nothing else enters the prediction */
static inline __attribute__((always_inline)) int const_rows_init(const seq_ctx *q, stream_rows *r,
                                                                 row_stack *stk)
{
    const size_t C = r->C, H = r->H, D = r->D;
    if (r->model_pred || !all_small(r->mean, C) || q->d->plain)
        return SKV_OK;
    for (size_t seen = 0; seen < 2; seen++) {
        if (!mean_only(r->W, H, seen))
            continue;
        if (C <= 512)
            r->muc[seen] = stk->muc[seen];
        else if (!(r->muc[seen] = skv_malloc(C * sizeof(float))))
            return skv_error(SKV_ERR_NOMEM, "row buffers");
        for (size_t h = 0; h < H; h++)
            for (size_t dd = 0; dd < D; dd++)
                r->muc[seen][h * D + dd] =
                    predict(r->W + (h * 2 + seen) * NF, 0.0f, 0.0f, 0.0f, r->mean[h * D + dd]);
    }
    return SKV_OK;
}

/* Set r up for stream (l, kv) of the current chunk; stream_rows_close
 * frees what it holds, whether or not this succeeded */
static inline __attribute__((always_inline)) int stream_rows_open(const seq_ctx *q, int l, int kv,
                                                                  const float *model_pred,
                                                                  row_stack *stk, stream_rows *r)
{
    const skv_delta *d = q->d;
    const skv_calib *c = d->cal;
    const size_t C = chan_count(&c->sh), H = (size_t)c->sh.kv_heads, lk = (size_t)l * 2 + (size_t)kv;
    const size_t es = skv_dtype_size(c->sh.dtype), naux = q->T - q->start;
    *r = (stream_rows){.l = l, .kv = kv, .C = C, .H = H, .D = (size_t)c->sh.head_dim, .es = es,
                       .dt = c->sh.dtype, .model_pred = model_pred, .lazy_x = !d->model};
    r->mean = c->mean + lk * C;
    r->S = c->s[d->level] + lk * 2 * C;
    r->W = c->w[d->level] + lk * H * 2 * NF;
    r->X = r->lazy_x ? stk->ring : q->kvf[kv] + (size_t)l * q->T * C;
    r->B = q->kvb[kv] + (size_t)l * q->stride * C * es;
    r->apred = q->aux ? q->aux->pred[kv] + (size_t)l * naux * C : NULL;
    r->aw = q->aux ? q->aux->w + lk * H * 2 : NULL;
    r->as = q->aux ? q->aux->sscale + lk * H : NULL;
    r->mo = q->mode == CODE_PREDICT ? q->mu_out[kv] + (size_t)l * naux * C : NULL;
    r->cb_lk = c->cb + (size_t)l * c->n_tok * 2 * C + (size_t)kv * C;
    r->mu_row = stk->mu, r->s_row = stk->s, r->wc = stk->wc, r->x_row = stk->x;
    if (C > 512) {
        r->mu_row = skv_malloc(C * sizeof *r->mu_row);
        r->s_row = skv_malloc(C * sizeof *r->s_row);
        r->x_row = skv_malloc(C * sizeof *r->x_row);
        if (r->lazy_x)
            r->X = skv_malloc(2 * C * sizeof *r->X);
        if (!r->mu_row || !r->s_row || !r->x_row || !r->X)
            return skv_error(SKV_ERR_NOMEM, "row buffers");
    }
    if (C > 256 && !(r->wc = skv_malloc(2 * NF * C * sizeof *r->wc)))
        return skv_error(SKV_ERR_NOMEM, "row buffers");
    channel_weights(r->W, H, r->D, r->wc);
    int rc = const_rows_init(q, r, stk);
    r->fetch_cb = !(r->muc[0] && r->muc[1]);
    return rc;
}

static inline __attribute__((always_inline)) void stream_rows_close(stream_rows *r, row_stack *stk)
{
    for (int k = 0; k < 2; k++)
        if (r->muc[k] != stk->muc[k])
            skv_free(r->muc[k]);
    if (r->mu_row != stk->mu) {
        skv_free(r->mu_row);
        skv_free(r->s_row);
        skv_free(r->x_row);
        if (r->lazy_x)
            skv_free(r->X);
    }
    if (r->wc != stk->wc)
        skv_free(r->wc);
}

/* Row t's floats in X */
static inline __attribute__((always_inline)) float *x_row_at(const stream_rows *r, size_t t)
{
    return r->X + (r->lazy_x ? t & 1 : t) * r->C;
}

/* Row t's floats in X, from its bytes */
static inline __attribute__((always_inline)) void make_row(const stream_rows *r, size_t t)
{
    skv_cast_to_f32(r->dt, x_row_at(r, t), r->B + t * r->C * r->es, r->C);
}

/* Decode k rows of the constant prediction muc[seen] from row t (at
 * least one: *done, and *small whether the last is all_small) */
static inline __attribute__((always_inline)) int decode_const_run(struct coder_ws *ws, const stream_rows *r,
                                                                  size_t t, size_t k, size_t seen,
                                                                  size_t *done, int *small)
{
    const size_t C = r->C, es = r->es;
    uint8_t *p = r->B + t * C * es;
    size_t n = 0;
    int sm = 1;
    int rc = skv_decoder_get_rows(ws->dec, r->muc[seen], r->S + seen * C, C, k, small_mag(r->dt), ws->xb, &n);
    for (size_t j = 0; j < n; j++)
        sm = r->lazy_x ? store_row_bytes(r->dt, p + j * C * es, ws->xb + j * C, C)
                       : store_row(r->dt, p + j * C * es, r->X + (t + j) * C, ws->xb + j * C, C);
    *done = n;
    *small = sm;
    return rc;
}

/* Encode up to k rows of the constant prediction muc[seen] from row t,
 * ending after the first that is not all_small (*done rows, *small
 * whether the last is) */
static inline __attribute__((always_inline)) int encode_const_run(struct coder_ws *ws, const stream_rows *r,
                                                                  size_t t, size_t k, size_t seen,
                                                                  size_t *done, int *small)
{
    const size_t C = r->C, es = r->es;
    const uint8_t *p = r->B + t * C * es;
    size_t n = 0;
    int sm = 1;
    while (n < k && sm)
        sm = load_row(r->dt, ws->xb + n * C, p + n * C * es, C), n++;
    *done = n;
    *small = sm;
    return skv_encoder_put_rows(ws->enc, ws->xb, r->muc[seen], r->S + seen * C, C, n);
}

/* A run of rows from t whose predictions are the constant row
 * muc[seen]: while the tokens keep its seen-class and codebook test, and
 * each row before is all_small (known as it is loaded or decoded) */
static inline __attribute__((always_inline)) int code_const_run(const seq_ctx *q, struct coder_ws *ws,
                                                                const stream_rows *r, size_t t,
                                                                size_t seen, size_t *done, int *small)
{
    const skv_calib *c = q->d->cal;
    size_t k = 1, kmax = batch_rows(r->C);
    while (k < kmax && t + k < q->t1) {
        const int32_t rk = q->row[t + k];
        if ((size_t)(rk >= 0) != seen || !calib_cb_ok(c, r->l, rk, r->kv))
            break;
        k++;
    }
    if (q->mode == CODE_DECODE)
        return decode_const_run(ws, r, t, k, seen, done, small);
    return encode_const_run(ws, r, t, k, seen, done, small);
}

/* Row t's prediction into mu_row from its features: the codebook row,
 * the row before (prev) and the model's (predict() per scalar on the
 * plain path) */
static inline __attribute__((always_inline)) void predict_mu(const seq_ctx *q, struct coder_ws *ws,
                                                             const stream_rows *r, size_t t, size_t seen,
                                                             const float *prev)
{
    const skv_calib *c = q->d->cal;
    const size_t C = r->C, H = r->H, D = r->D, half = (size_t)(c->sh.rope_dim / 2);
    const float *fm_row = r->model_pred ? r->model_pred + (t - q->t0) * C : NULL;
    float *cbf = ws->cbf;
    cb_feature_sc(c, r->l, r->kv, q->row[t], t, NULL, q->rope_sc ? q->rope_sc + t * half * 2 : NULL,
                  q->rope_cs ? q->rope_cs + t * half * 4 : NULL, cbf);
    if (!q->d->plain) {
        predict_row(r->wc + seen * NF * C, C, fm_row, prev, cbf, r->mean, r->mu_row);
        return;
    }
    for (size_t h = 0; h < H; h++)
        for (size_t dd = 0; dd < D; dd++) {
            size_t ch = h * D + dd;
            r->mu_row[ch] = predict(r->W + (h * 2 + seen) * NF, fm_row ? fm_row[ch] : 0.0f, prev[ch],
                                    cbf[ch], r->mean[ch]);
        }
}

/* Range coding's centroid blended into row i (of the range) of the
 * prediction mu and spread sv, per head, into mu_row and s_row */
static inline __attribute__((always_inline)) void blend_centroid(const stream_rows *r, size_t i,
                                                                 const float *mu, const float *sv)
{
    const float *ar = r->apred + i * r->C;
    for (size_t h = 0; h < r->H; h++)
        for (size_t dd = 0; dd < r->D; dd++) {
            size_t ch = h * r->D + dd;
            float a = ar[ch];
            r->s_row[ch] = sv[ch];
            r->mu_row[ch] = mu[ch];
            if (a == a) { /* NaN: no aligned position */
                r->mu_row[ch] = r->aw[h * 2] * r->mu_row[ch] + r->aw[h * 2 + 1] * a;
                r->s_row[ch] *= r->as[h];
            }
        }
}

/* Decode row t under (mu, sv) into its bytes and floats; *small: whether
 * it is all_small */
static inline __attribute__((always_inline)) int decode_row(struct coder_ws *ws, const stream_rows *r, size_t t,
                                                            const float *mu, const float *sv, int *small)
{
    int rc = skv_decoder_get_n(ws->dec, mu, sv, r->x_row, r->C);
    if (rc)
        return rc;
    *small = store_row(r->dt, r->B + t * r->C * r->es, x_row_at(r, t), r->x_row, r->C);
    return SKV_OK;
}

/* Encode row t, from its bytes, under (mu, sv); *small: whether it is
 * all_small */
static inline __attribute__((always_inline)) int encode_row(struct coder_ws *ws, const stream_rows *r, size_t t,
                                                            const float *mu, const float *sv, int *small)
{
    *small = load_row(r->dt, r->x_row, r->B + t * r->C * r->es, r->C);
    return skv_encoder_put_n(ws->enc, r->x_row, mu, sv, r->C);
}

/* The rows [t0, t1) of the stream, each predicted from earlier ones and
 * then decoded, encoded or handed back (CODE_PREDICT) */
static inline __attribute__((always_inline)) int code_rows(const seq_ctx *q, struct coder_ws *ws,
                                                           const stream_rows *r)
{
    const skv_calib *c = q->d->cal;
    const size_t C = r->C;
    /* stat: whether row t - 1 is all_small, found as it was coded (-1: not
     * known here, as at a chunk's first row: test it) */
    int prev_small = -1;
    /* whether row t - 1's floats were made as it was decoded */
    int xmade = 0;
    for (size_t t = q->t0; t < q->t1; t++) {
        const int32_t row = q->row[t];
        if (r->fetch_cb && t + 1 < q->t1 && q->row[t + 1] >= 0)
            for (size_t o = 0; o < C * sizeof(float); o += 64)
                __builtin_prefetch((const char *)(r->cb_lk + (size_t)q->row[t + 1] * 2 * C) + o);
        const size_t seen = row >= 0;
        const float *sv = r->S + seen * C;
        const float *prev = t ? x_row_at(r, t - 1) : r->mean;
        const int ps = prev_small;
        prev_small = -1;
        /* (prev and the codebook row: finite, with a margin) */
        int cst = r->muc[seen] && calib_cb_ok(c, r->l, row, r->kv);
        int made = !r->lazy_x || !t || xmade; /* prev's floats are there */
        xmade = 0;
        if (cst && t && ps < 0) {
            if (!made)
                make_row(r, t - 1);
            made = 1;
            cst = all_small(prev, C);
        } else if (cst && t) {
            cst = ps;
        }
        int rc;
        if (cst && !r->mo && !r->apred) {
            size_t done;
            if ((rc = code_const_run(q, ws, r, t, seen, &done, &prev_small)))
                return rc;
            t += done - 1; /* done >= 1: the loop adds the last one */
            continue;
        }
        const float *mu = r->mu_row;
        if (cst) {
            mu = r->muc[seen];
        } else {
            if (!made)
                make_row(r, t - 1);
            predict_mu(q, ws, r, t, seen, prev);
        }
        if (r->mo) {
            memcpy(r->mo + (t - q->start) * C, mu, C * sizeof(float));
            continue;
        }
        if (r->apred) {
            blend_centroid(r, t - q->start, mu, sv);
            sv = r->s_row;
            mu = r->mu_row;
        }
        if (q->mode == CODE_DECODE) {
            if ((rc = decode_row(ws, r, t, mu, sv, &prev_small)))
                return rc;
            xmade = 1;
        } else if ((rc = encode_row(ws, r, t, mu, sv, &prev_small))) {
            return rc;
        }
    }
    return SKV_OK;
}

/* The end of stream (l, kv): the decoder's check that it was all read,
 * or the encoder's finished stream into *out_buf (skv_free it) and its
 * costs */
static int end_stream(seq_ctx *q, struct coder_ws *ws, int l, int kv, uint8_t **out_buf, size_t *out_len)
{
    skv_delta *d = q->d;
    if (q->mode == CODE_DECODE)
        return skv_decoder_end(ws->dec);
    if (q->mode == CODE_PREDICT)
        return SKV_OK;
    size_t need = skv_encoder_bound(ws->enc), len;
    uint8_t *buf = skv_malloc(need);
    if (!buf)
        return skv_error(SKV_ERR_NOMEM, "stream buffer");
    int rc = skv_encoder_finish(ws->enc, buf, need, &len);
    if (rc) {
        skv_free(buf);
        return rc;
    }
    const size_t idx = (size_t)l * 2 + (size_t)kv;
    d->ideal[idx] += skv_encoder_ideal_bits(ws->enc);
    d->bytes[idx] += (double)len;
    d->nsc[idx] += (q->t1 - q->t0) * chan_count(&d->cal->sh);
    *out_buf = buf;
    *out_len = len;
    return SKV_OK;
}

/* Code the stream of (layer l, kv) for the current chunk with workspace ws.
 * Decoding reads stream first_stream + chunk_index * 2L + 2l + kv;
 * encoding returns the finished stream in *out_buf (skv_free it). Streams
 * of different (l, kv) touch disjoint data, so they may run in parallel. */
static int code_stream(seq_ctx *q, struct coder_ws *ws, int l, int kv, const float *model_pred,
                       uint8_t **out_buf, size_t *out_len)
{
    const skv_delta *d = q->d;
    const skv_atoms *atoms = d->atoms ? d->atoms[(size_t)l * 2 + (size_t)kv] : NULL;
    int rc = begin_coding(q, ws, l, kv, atoms);
    if (rc)
        return rc;
    row_stack stk;
    stream_rows r;
    rc = stream_rows_open(q, l, kv, model_pred, &stk, &r);
    if (!rc)
        rc = code_rows(q, ws, &r);
    stream_rows_close(&r, &stk);
    return rc ? rc : end_stream(q, ws, l, kv, out_buf, out_len);
}

/* Code stream (l, kv) and, when encoding, append it to the output. */
static int code_and_append(seq_ctx *q, struct coder_ws *ws, int l, int kv, const float *model_pred)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = code_stream(q, ws, l, kv, model_pred, &buf, &len);
    if (!rc && q->mode == CODE_ENCODE)
        rc = skv_streams_append(q->out, buf, len);
    skv_free(buf);
    return rc;
}

int code_one_stream(seq_ctx *q, int worker, int l, int kv)
{
    struct coder_ws *ws = &q->d->ws[worker];
    if (kv >= 0)
        return code_stream(q, ws, l, kv, NULL, NULL, NULL);
    if (pair_rows(q, l))
        return code_pair(q, ws, l);
    int rc = code_stream(q, ws, l, 0, NULL, NULL, NULL);
    return rc ? rc : code_stream(q, ws, l, 1, NULL, NULL, NULL);
}

/* The streams of one chunk of a model-free level, in parallel over its
 * layers (a layer's K and V stream together: code_pair decodes them in one
 * pass), handed out one at a time so that a thread held up elsewhere does
 * not hold up the chunk (each stream's bytes are the same whichever thread
 * codes it); encoded streams are appended afterwards in order. */
typedef struct {
    seq_ctx *q;
    uint8_t **bufs;
    size_t *lens;
    int *rcs;
} par_ctx;

static void par_task(void *vctx, size_t b, size_t e, int worker)
{
    par_ctx *p = vctx;
    struct coder_ws *ws = &p->q->d->ws[worker];
    for (size_t l = b; l < e; l++) {
        const size_t j = 2 * l;
        if (pair_rows(p->q, (int)l)) {
            p->rcs[j] = p->rcs[j + 1] = code_pair(p->q, ws, (int)l);
            continue;
        }
        for (int kv = 0; kv < 2; kv++)
            p->rcs[j + kv] = code_stream(p->q, ws, (int)l, kv, NULL, &p->bufs[j + kv], &p->lens[j + kv]);
    }
}

int code_chunk_parallel(seq_ctx *q)
{
    const size_t n = (size_t)q->d->cal->sh.layers * 2;
    par_ctx p = {q, skv_calloc(n, sizeof(uint8_t *)), skv_calloc(n, sizeof(size_t)),
                 skv_calloc(n, sizeof(int))};
    int rc = (p.bufs && p.lens && p.rcs) ? SKV_OK : skv_error(SKV_ERR_NOMEM, "chunk jobs");
    if (!rc)
        skv_pool_run_any(q->d->nws > 1 ? q->d->pool : NULL, n / 2, par_task, &p);
    for (size_t j = 0; !rc && j < n; j++)
        rc = p.rcs[j];
    for (size_t j = 0; !rc && q->mode == CODE_ENCODE && j < n; j++)
        rc = skv_streams_append(q->out, p.bufs[j], p.lens[j]);
    for (size_t j = 0; p.bufs && j < n; j++)
        skv_free(p.bufs[j]);
    skv_free(p.bufs);
    skv_free(p.lens);
    skv_free(p.rcs);
    return rc;
}

/* KV hook: code layer l of the chunk with the model's predictions; for
 * spec, then hand the exact values to the engine. full is the recompute
 * end: the float32 model runs on its own KV, so on KV from seqkv's own
 * engine its predictions are the original values. */
void coder_hook(void *vctx, int layer, size_t pos0, size_t n, float *k, float *v)
{
    seq_ctx *q = vctx;
    const size_t C = chan_count(&q->d->cal->sh), T = q->T;
    (void)pos0;
    if (q->rc)
        return;
    for (int kv = 0; kv < 2 && !q->rc; kv++) {
        float *x = kv ? v : k;
        q->rc = code_and_append(q, &q->d->ws[0], layer, kv, x);
        /* spec attends over the exact KV; full recomputes on its own */
        if (!q->rc && q->d->level == SEQKV_SPEC)
            memcpy(x, q->kvf[kv] + ((size_t)layer * T + q->t0) * C, n * C * sizeof(float));
    }
}
