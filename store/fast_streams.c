/* A chunk record's streams at the fast level: 2 x layers fast streams
 * (skv_fast_*, FORMAT.md "Fast streams"), layer-major, K before V, each
 * positions [a, b) x C channels of the sequence buffer. No calibration,
 * no context: each stream stands alone. */
#include "store_priv.h"

int skv_store_fast_encode(const prof_ent *pe, const uint8_t *k, const uint8_t *v, size_t stride,
                          size_t a, size_t b, skv_streams *st)
{
    const size_t L = (size_t)pe->p.layers, row = pe->C * pe->es, rows = b - a;
    const size_t cap = skv_fast_bound(pe->p.dtype, rows, pe->C);
    if (!cap)
        return skv_error(SKV_ERR_ARG, "level fast codes bf16, f16 and f8e4m3 profiles only, not %s",
                         skv_dtype_name(pe->p.dtype));
    uint8_t *buf = skv_malloc(cap);
    if (!buf)
        return skv_error(SKV_ERR_NOMEM, "fast stream buffer");
    int rc = SKV_OK;
    for (size_t j = 0; j < 2 * L && !rc; j++) {
        const uint8_t *src = (j & 1 ? v : k) + ((j / 2) * stride + a) * row;
        size_t len;
        rc = skv_fast_encode(pe->p.dtype, src, rows, pe->C, buf, cap, &len);
        if (!rc)
            rc = skv_streams_append(st, buf, len);
    }
    skv_free(buf);
    return rc;
}

/* One get's streams, decoded by index over a pool */
typedef struct {
    const prof_ent *pe;
    const uint8_t *streams;
    const size_t *off;
    uint8_t *k, *v;
    size_t stride, a, rows;
    int *rc; /* per stream */
} rec_streams_job;

static int fast_one(const rec_streams_job *f, size_t j)
{
    const size_t row = f->pe->C * f->pe->es;
    uint8_t *dst = (j & 1 ? f->v : f->k) + ((j / 2) * f->stride + f->a) * row;
    return skv_fast_decode(f->streams + f->off[j], f->off[j + 1] - f->off[j], f->pe->p.dtype,
                           f->rows, f->pe->C, dst, f->rows * row);
}

static void fast_task(void *ctx, size_t begin, size_t end, int worker)
{
    (void)worker;
    const rec_streams_job *f = ctx;
    for (size_t j = begin; j < end; j++)
        f->rc[j] = fast_one(f, j);
}

int skv_store_fast_decode(const prof_ent *pe, const uint8_t *streams, size_t streams_len,
                          const uint8_t *sizes, uint8_t *k, uint8_t *v, size_t stride, size_t a,
                          size_t b, skv_pool *pool)
{
    const size_t L = (size_t)pe->p.layers;
    size_t off[2 * 4096 + 1];
    int rcs[2 * 4096];
    off[0] = 0;
    for (size_t j = 0; j < 2 * L; j++) {
        const size_t sz = skv_load32_le(sizes + 4 * j);
        if (sz > streams_len - off[j])
            return skv_error(SKV_ERR_CORRUPT, "fast stream %zu past the record's streams", j);
        off[j + 1] = off[j] + sz;
    }
    if (off[2 * L] != streams_len)
        return skv_error(SKV_ERR_CORRUPT, "fast streams leave %zu bytes of the record",
                         streams_len - off[2 * L]);
    rec_streams_job f = {pe, streams, off, k, v, stride, a, b - a, rcs};
    skv_pool_run(pool, 2 * L, fast_task, &f);
    for (size_t j = 0; j < 2 * L; j++) {
        if (!rcs[j])
            continue;
        /* again on this thread, for the error's words (a pool thread's
         * detail is its own) */
        int rc = pool ? fast_one(&f, j) : rcs[j];
        if (!rc)
            rc = skv_error(SKV_ERR_CORRUPT, "fast stream %zu failed on a pool thread only", j);
        return rc == SKV_ERR_FORMAT ? skv_error(SKV_ERR_CORRUPT, "fast stream %zu: %s", j,
                                                seqkv_error_detail())
                                    : rc;
    }
    return SKV_OK;
}
