/* libFuzzer target for the blob namespace's stored values (store/
 * blob_code.c): the image decoder, LMCache's metadata reader (server/
 * lmcache_meta.c) and any layout a setter may give.
 *
 * Input: a selector byte, then bytes. Selector 0..127: the rest is an
 * image (skv_blob_decode): any damage must be refused, and a value it
 * accepts must be as long as its header says. 128..255: the rest is
 * LMCache's RemoteMetadata (28 bytes) followed by a value; when the
 * metadata describes the value the value is coded in that layout, else as
 * bytes, and each image must decode to the value exactly, twice coded to
 * the same bytes. Any violation aborts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blob.h"
#include "fuzz_check.h"
#include "lmcache.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void decode_image(const uint8_t *img, size_t len)
{
    skv_blob_hdr h;
    if (skv_blob_parse(img, len, &h) || h.raw_len > (1u << 20))
        return;
    uint8_t *out = malloc(h.raw_len ? h.raw_len : 1);
    CHECK(out);
    int rc = skv_blob_decode(img, len, out, h.raw_len);
    CHECK(rc == 0 || rc == SKV_ERR_CORRUPT || rc == SKV_ERR_VERSION || rc == SKV_ERR_NOMEM);
    if (!rc)
        CHECK(XXH3_64bits(out, h.raw_len) == h.sum);
    free(out);
}

static void round_trip(const uint8_t *v, size_t len, const seqkv_blob_layout *lay)
{
    uint8_t *a, *b;
    size_t al, bl;
    if (skv_blob_encode(v, len, lay, 1, &a, &al))
        return; /* out of memory only */
    CHECK(skv_blob_encode(v, len, lay, 1, &b, &bl) == 0);
    CHECK(al == bl && memcmp(a, b, al) == 0);
    uint8_t *out = malloc(len ? len : 1);
    CHECK(out);
    CHECK(skv_blob_decode(a, al, out, len) == 0);
    CHECK(memcmp(out, v, len) == 0);
    free(out);
    free(a);
    free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] < 128) {
        decode_image(data + 1, size - 1);
        return 0;
    }
    if (size < 29)
        return 0;
    const uint8_t *m = data + 1, *v = data + 29;
    const size_t vl = size - 29;
    seqkv_blob_layout lay;
    if (srv_lmcache_layout(m, 28, vl, &lay))
        round_trip(v, vl, &lay);
    /* the same bytes read as a layout directly: whatever the store does not
     * code (skv_blob_layout_ok) stays bytes, never an error */
    lay = (seqkv_blob_layout){(seqkv_dtype)(m[0] % 6), skv_load32_le(m + 4) % 4096,
                              skv_load32_le(m + 8) % 4096, skv_load32_le(m + 12) % 65536};
    round_trip(v, vl, &lay);
    round_trip(v, vl, NULL);
    return 0;
}
