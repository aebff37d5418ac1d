/* Blob values (FORMAT.md, "Blobs"): how one value of the blob namespace
 * is stored -- as is, zstd, or, when its layout is known (the setter
 * says it), as the fast level's streams -- and decoded back, checked
 * against the XXH3-64 of the bytes SET. Pure functions of their input:
 * the stored bytes do not depend on the CPU. */
#include <string.h>
#include <zstd.h>

#include "blob.h"
#include "skv_codec.h"

int skv_blob_layout_ok(const seqkv_blob_layout *lay, size_t value_len)
{
    if (!lay || !lay->streams || !lay->rows || !lay->channels)
        return 0;
    if (lay->dtype != SEQKV_DT_F16 && lay->dtype != SEQKV_DT_BF16 && lay->dtype != SEQKV_DT_F8E4M3)
        return 0;
    const uint64_t bytes =
        (uint64_t)lay->streams * lay->rows * lay->channels * skv_dtype_size(lay->dtype);
    return bytes == value_len && skv_fast_bound(lay->dtype, lay->rows, lay->channels);
}

static void hdr_write(uint8_t *b, int enc, uint64_t raw_len, uint64_t sum)
{
    memset(b, 0, SKV_BLOB_HDR);
    skv_store32_le(b, SKV_BLOB_DATA_MAGIC);
    b[4] = SKV_BLOB_DATA_VERSION;
    b[5] = (uint8_t)enc;
    skv_store64_le(b + 8, raw_len);
    skv_store64_le(b + 16, sum);
}

/* The fast level's streams of a value laid out as lay: a 16-byte
 * layout (dtype, streams, rows, channels), the streams' sizes, the
 * streams. 0 and *img, or SKV_ERR_ARG when it does not fit the layout. */
static int enc_kv(const uint8_t *v, size_t len, const seqkv_blob_layout *lay, uint64_t sum,
                  uint8_t **img, size_t *img_len)
{
    const size_t es = skv_dtype_size(lay->dtype), ns = lay->streams;
    const size_t slab = (size_t)lay->rows * lay->channels * es;
    if (!ns || ns > SKV_BLOB_MAX_STREAMS || slab * ns != len)
        return skv_error(SKV_ERR_ARG, "value of %zu bytes does not fit its layout", len);
    const size_t cap1 = skv_fast_bound(lay->dtype, lay->rows, lay->channels);
    if (!cap1)
        return skv_error(SKV_ERR_ARG, "the fast level cannot code this layout");
    const size_t head = SKV_BLOB_HDR + 16 + 4 * ns;
    size_t cap = head + cap1 * ns;
    uint8_t *b = skv_malloc(cap);
    if (!b)
        return skv_error(SKV_ERR_NOMEM, "blob coding buffer");
    hdr_write(b, SKV_BLOB_ENC_KV, len, sum);
    uint8_t *l = b + SKV_BLOB_HDR;
    l[0] = (uint8_t)lay->dtype;
    skv_store32_le(l + 4, lay->streams);
    skv_store32_le(l + 8, lay->rows);
    skv_store32_le(l + 12, lay->channels);
    size_t off = head;
    int rc = SKV_OK;
    for (size_t j = 0; j < ns && !rc; j++) {
        size_t sl = 0;
        rc = skv_fast_encode(lay->dtype, v + j * slab, lay->rows, lay->channels, b + off, cap - off,
                             &sl);
        skv_store32_le(l + 16 + 4 * j, (uint32_t)sl);
        off += sl;
    }
    if (rc) {
        skv_free(b);
        return rc;
    }
    *img = b;
    *img_len = off;
    return SKV_OK;
}

int skv_blob_encode(const uint8_t *v, size_t len, const seqkv_blob_layout *lay, int zstd,
                    uint8_t **img, size_t *img_len)
{
    *img = NULL;
    *img_len = 0;
    const uint64_t sum = XXH3_64bits(v, len);
    uint8_t *best = NULL;
    size_t best_len = SKV_BLOB_HDR + len;
    if (skv_blob_layout_ok(lay, len)) {
        uint8_t *b = NULL;
        size_t bl = 0;
        int rc = enc_kv(v, len, lay, sum, &b, &bl);
        if (rc == SKV_ERR_NOMEM)
            return rc;
        if (!rc && bl < best_len) {
            best = b;
            best_len = bl;
        } else if (!rc) {
            skv_free(b);
        }
    }
    if (!best && zstd && len >= SKV_BLOB_ZSTD_MIN) {
        const size_t cap = SKV_BLOB_HDR + ZSTD_compressBound(len);
        uint8_t *b = skv_malloc(cap);
        if (!b)
            return skv_error(SKV_ERR_NOMEM, "blob coding buffer");
        size_t z = ZSTD_compress(b + SKV_BLOB_HDR, cap - SKV_BLOB_HDR, v, len, SKV_BLOB_ZSTD_LEVEL);
        if (!ZSTD_isError(z) && SKV_BLOB_HDR + z < best_len) {
            hdr_write(b, SKV_BLOB_ENC_ZSTD, len, sum);
            best = b;
            best_len = SKV_BLOB_HDR + z;
        } else {
            skv_free(b);
        }
    }
    if (!best) {
        if (!(best = skv_malloc(SKV_BLOB_HDR + len)))
            return skv_error(SKV_ERR_NOMEM, "blob value");
        hdr_write(best, SKV_BLOB_ENC_RAW, len, sum);
        memcpy(best + SKV_BLOB_HDR, v, len);
    }
    *img = best;
    *img_len = best_len;
    return SKV_OK;
}

int skv_blob_parse(const uint8_t *img, size_t len, skv_blob_hdr *h)
{
    memset(h, 0, sizeof *h);
    if (len < SKV_BLOB_HDR || skv_load32_le(img) != SKV_BLOB_DATA_MAGIC)
        return skv_error(SKV_ERR_CORRUPT, "blob value: bad header");
    if (img[4] > SKV_BLOB_DATA_VERSION)
        return skv_error(SKV_ERR_VERSION, "blob value of a newer version (%u)", img[4]);
    if (img[4] == 0 || img[6] || img[7])
        return skv_error(SKV_ERR_CORRUPT, "blob value: bad header");
    h->enc = img[5];
    h->raw_len = skv_load64_le(img + 8);
    h->sum = skv_load64_le(img + 16);
    if (h->enc > SKV_BLOB_ENC_KV)
        return skv_error(SKV_ERR_CORRUPT, "blob value: unknown encoding %d", h->enc);
    if (h->raw_len > SKV_BLOB_MAX_VALUE)
        return skv_error(SKV_ERR_CORRUPT, "blob value: length %llu past the limit",
                         (unsigned long long)h->raw_len);
    if (h->enc == SKV_BLOB_ENC_RAW && len - SKV_BLOB_HDR != h->raw_len)
        return skv_error(SKV_ERR_CORRUPT, "blob value: %zu bytes for a raw value of %llu",
                         len - SKV_BLOB_HDR, (unsigned long long)h->raw_len);
    return SKV_OK;
}

static int dec_kv(const uint8_t *img, size_t len, uint8_t *out, uint64_t raw_len)
{
    if (len < SKV_BLOB_HDR + 16)
        return skv_error(SKV_ERR_CORRUPT, "blob value: short layout");
    const uint8_t *l = img + SKV_BLOB_HDR;
    seqkv_dtype dt = (seqkv_dtype)l[0];
    const uint32_t ns = skv_load32_le(l + 4), rows = skv_load32_le(l + 8),
                   ch = skv_load32_le(l + 12);
    const size_t es = skv_dtype_size(dt);
    if (!es || dt == SEQKV_DT_F32 || dt == SEQKV_DT_I32 || !ns || ns > SKV_BLOB_MAX_STREAMS || !rows ||
        !ch || (uint64_t)rows * ch > SKV_FAST_MAX_SCALARS)
        return skv_error(SKV_ERR_CORRUPT, "blob value: bad layout");
    const uint64_t slab = (uint64_t)rows * ch * es;
    if (slab * ns != raw_len)
        return skv_error(SKV_ERR_CORRUPT, "blob value: layout of %llu bytes for a value of %llu",
                         (unsigned long long)(slab * ns), (unsigned long long)raw_len);
    size_t off = SKV_BLOB_HDR + 16 + 4 * (size_t)ns;
    if (off > len)
        return skv_error(SKV_ERR_CORRUPT, "blob value: short stream table");
    for (uint32_t j = 0; j < ns; j++) {
        const size_t sl = skv_load32_le(l + 16 + 4 * j);
        if (sl > len - off)
            return skv_error(SKV_ERR_CORRUPT, "blob value: stream %u past the end", j);
        int rc = skv_fast_decode(img + off, sl, dt, rows, ch, out + j * slab, (size_t)slab);
        if (rc)
            return rc == SKV_ERR_NOMEM ? rc
                                       : skv_error(SKV_ERR_CORRUPT, "blob value: stream %u: %s", j,
                                                   seqkv_error_detail());
        off += sl;
    }
    if (off != len)
        return skv_error(SKV_ERR_CORRUPT, "blob value: %zu bytes after its streams", len - off);
    return SKV_OK;
}

int skv_blob_decode(const uint8_t *img, size_t len, uint8_t *out, size_t out_len)
{
    skv_blob_hdr h;
    int rc = skv_blob_parse(img, len, &h);
    if (rc)
        return rc;
    if (out_len != h.raw_len)
        return skv_error(SKV_ERR_ARG, "blob value of %llu bytes, %zu asked",
                         (unsigned long long)h.raw_len, out_len);
    switch (h.enc) {
    case SKV_BLOB_ENC_RAW:
        memcpy(out, img + SKV_BLOB_HDR, out_len);
        break;
    case SKV_BLOB_ENC_ZSTD: {
        size_t z = ZSTD_decompress(out, out_len, img + SKV_BLOB_HDR, len - SKV_BLOB_HDR);
        if (ZSTD_isError(z) || z != out_len)
            return skv_error(SKV_ERR_CORRUPT, "blob value: zstd frame damaged (%s)",
                             ZSTD_isError(z) ? ZSTD_getErrorName(z) : "short");
        break;
    }
    default:
        if ((rc = dec_kv(img, len, out, h.raw_len)))
            return rc;
    }
    if (XXH3_64bits(out, out_len) != h.sum)
        return skv_error(SKV_ERR_CORRUPT, "blob value: checksum mismatch");
    return SKV_OK;
}
