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

int skv_store_fast_decode(const prof_ent *pe, const uint8_t *streams, size_t streams_len,
                          const uint8_t *sizes, uint8_t *k, uint8_t *v, size_t stride, size_t a,
                          size_t b)
{
    const size_t L = (size_t)pe->p.layers, row = pe->C * pe->es, rows = b - a;
    size_t off = 0;
    for (size_t j = 0; j < 2 * L; j++) {
        const size_t sz = skv_load32_le(sizes + 4 * j);
        if (sz > streams_len - off)
            return skv_error(SKV_ERR_CORRUPT, "fast stream %zu past the record's streams", j);
        uint8_t *dst = (j & 1 ? v : k) + ((j / 2) * stride + a) * row;
        int rc = skv_fast_decode(streams + off, sz, pe->p.dtype, rows, pe->C, dst, rows * row);
        if (rc)
            return rc == SKV_ERR_FORMAT ? skv_error(SKV_ERR_CORRUPT, "fast stream %zu: %s", j,
                                                    skv_error_detail())
                                        : rc;
        off += sz;
    }
    if (off != streams_len)
        return skv_error(SKV_ERR_CORRUPT, "fast streams leave %zu bytes of the record", streams_len - off);
    return SKV_OK;
}
