/* The calibration sample: which positions of which sequences a
 * calibration learns from, and their KV, copied one sequence at a time
 * (skv_delta.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "delta_int.h"

size_t skv_calib_sample_default(const skv_kvshape *sh)
{
    const size_t per = 2 * (size_t)sh->layers * chan_count(sh) * skv_dtype_size(sh->dtype);
    size_t n = per ? SKV_CALIB_SAMPLE_BYTES / per : SKV_CALIB_SAMPLE_POSITIONS;
    if (n > SKV_CALIB_SAMPLE_POSITIONS)
        n = SKV_CALIB_SAMPLE_POSITIONS;
    return n ? n : 1;
}

void skv_calib_sample_free(skv_calib_sample *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n_seq; i++) {
        if (s->tok)
            skv_free(s->tok[i]);
        if (s->row)
            skv_free(s->row[i]);
        for (int k = 0; k < 2; k++)
            if (s->kv[k])
                skv_free(s->kv[k][i]);
    }
    skv_free(s->want);
    skv_free(s->start);
    skv_free(s->T);
    skv_free(s->pos0);
    skv_free(s->first);
    skv_free(s->tok);
    skv_free(s->row);
    skv_free(s->kv[0]);
    skv_free(s->kv[1]);
    skv_free(s);
}

/* (lengths ascending, then index: the order the positions are shared in) */
typedef struct {
    size_t T, i;
} len_ix;

static int by_len(const void *pa, const void *pb)
{
    const len_ix *a = pa, *b = pb;
    if (a->T != b->T)
        return a->T < b->T ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

/* Each of the first n sequences' share of max positions: the shortest take
 * all they have while that is below an even share of what is left, the
 * rest an even share (what an integer division leaves over stays unused) */
static int share(skv_calib_sample *s, const size_t *T, size_t n, size_t maxp)
{
    len_ix *o = skv_malloc((n ? n : 1) * sizeof *o);
    if (!o)
        return skv_error(SKV_ERR_NOMEM, "calibration sample");
    for (size_t i = 0; i < n; i++)
        o[i] = (len_ix){T[i], i};
    qsort(o, n, sizeof *o, by_len);
    size_t left = maxp;
    for (size_t j = 0; j < n; j++) {
        const size_t even = left / (n - j), take = o[j].T < even ? o[j].T : even;
        s->want[o[j].i] = take;
        left -= take;
    }
    skv_free(o);
    return SKV_OK;
}

int skv_calib_sample_create(const skv_kvshape *sh, size_t n, const size_t *T, const uint64_t *h,
                            size_t max_positions, int prefix, skv_calib_sample **out)
{
    *out = NULL;
    if (n == 0)
        return skv_error(SKV_ERR_ARG, "calibration data holds no sequences");
    if (sh->layers < 1 || sh->kv_heads < 1 || sh->head_dim < 1 || !skv_dtype_size(sh->dtype) ||
        sh->dtype == SEQKV_DT_I32)
        return skv_error(SKV_ERR_ARG, "calibration sample: a KV shape and float dtype are needed");
    skv_calib_sample *s = skv_calloc(1, sizeof *s);
    if (!s)
        return skv_error(SKV_ERR_NOMEM, "calibration sample");
    s->sh = *sh;
    s->n_seq = n;
    s->es = skv_dtype_size(sh->dtype);
    s->want = skv_calloc(n, sizeof *s->want);
    s->start = skv_calloc(n, sizeof *s->start);
    s->T = skv_calloc(n, sizeof *s->T);
    s->pos0 = skv_calloc(n, sizeof *s->pos0);
    s->first = skv_calloc(n, 1);
    s->tok = skv_calloc(n, sizeof *s->tok);
    s->row = skv_calloc(n, sizeof *s->row);
    s->kv[0] = skv_calloc(n, sizeof *s->kv[0]);
    s->kv[1] = skv_calloc(n, sizeof *s->kv[1]);
    int rc = s->want && s->start && s->T && s->pos0 && s->first && s->tok && s->row && s->kv[0] &&
                     s->kv[1]
                 ? SKV_OK
                 : skv_error(SKV_ERR_NOMEM, "calibration sample");
    /* windows of SKV_CALIB_WINDOW_MIN positions at least: the sample reads
     * a bounded number of sequences, the first in the caller's order, each
     * decoded from its start, however many are stored */
    const size_t maxp = max_positions ? max_positions : skv_calib_sample_default(sh),
                 most = maxp / SKV_CALIB_WINDOW_MIN ? maxp / SKV_CALIB_WINDOW_MIN : 1;
    if (!rc)
        rc = share(s, T, n < most ? n : most, maxp);
    for (size_t i = 0; i < n && !rc; i++) {
        /* a window inside its sequence starts after position 0, so the
         * position before it is there to predict its first sample from */
        const size_t w = s->want[i];
        s->start[i] = prefix || w == 0 || w >= T[i] ? 0 : 1 + (size_t)(h[i] % (uint64_t)(T[i] - w));
    }
    if (rc) {
        skv_calib_sample_free(s);
        return rc;
    }
    *out = s;
    return SKV_OK;
}

size_t skv_calib_sample_end(const skv_calib_sample *s, size_t i)
{
    return i < s->n_seq ? s->start[i] + s->want[i] : 0;
}

int skv_calib_sample_add(skv_calib_sample *s, size_t i, const skv_kvseq *q)
{
    if (i >= s->n_seq || s->tok[i])
        return skv_error(SKV_ERR_ARG, "calibration sample: sequence %zu is not one it waits for", i);
    if (q->layers != s->sh.layers || q->kv_heads != s->sh.kv_heads ||
        q->head_dim != s->sh.head_dim || q->dtype != s->sh.dtype)
        return skv_error(SKV_ERR_SHAPE, "sequence %zu has another shape or dtype than the "
                                        "calibration's", i);
    const size_t end = s->start[i] + s->want[i];
    if (q->T < end)
        return skv_error(SKV_ERR_SHAPE, "sequence %zu holds %zu positions, its window ends at %zu",
                         i, q->T, end);
    const size_t L = (size_t)s->sh.layers, C = chan_count(&s->sh), es = s->es;
    const size_t r0 = s->start[i] ? s->start[i] - 1 : 0, T = end - r0;
    if (end == 0) { /* not in the sample (its KV may be NULL) */
        s->tok[i] = skv_malloc(sizeof(int32_t));
        s->kv[0][i] = skv_malloc(1);
        s->kv[1][i] = skv_malloc(1);
        if (!s->tok[i] || !s->kv[0][i] || !s->kv[1][i])
            return skv_error(SKV_ERR_NOMEM, "calibration sample");
        s->added++;
        return SKV_OK;
    }
    s->pos0[i] = r0;
    s->first[i] = s->start[i] ? 1 : 0;
    s->T[i] = T;
    s->tok[i] = skv_malloc((end ? end : 1) * sizeof(int32_t));
    const size_t bytes = L * T * C * es;
    for (int k = 0; k < 2; k++)
        s->kv[k][i] = skv_malloc(bytes ? bytes : 1);
    if (!s->tok[i] || !s->kv[0][i] || !s->kv[1][i])
        return skv_error(SKV_ERR_NOMEM, "calibration sample");
    /* the tokens of the whole prefix (a model's forward pass reads them),
     * then the window's rows, layer by layer */
    for (size_t t = 0; t < end; t++) {
        const int32_t x = (int32_t)skv_load32_le((const uint8_t *)q->tokens + 4 * t);
        if (x < 0 || x == INT32_MAX)
            return skv_error(SKV_ERR_FORMAT, "sequence %zu: token id %d at %zu outside [0, 2^31 - 1)",
                             i, x, t);
        s->tok[i][t] = x;
    }
    for (int k = 0; k < 2; k++) {
        const uint8_t *src = k ? q->v : q->k;
        for (size_t l = 0; l < L; l++)
            memcpy(s->kv[k][i] + l * T * C * es, src + (l * q->T + r0) * C * es, T * C * es);
    }
    s->added++;
    return SKV_OK;
}
