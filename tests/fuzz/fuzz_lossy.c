/* Fuzz target for the lossy tier's parsers: a lossy calibration
 * (skv_lossy_cal_load) and a lossy stream decoded under it
 * (skv_lossy_decode). Input: u32 LE length of the calibration, the
 * calibration, then the stream. A calibration that loads is saved and
 * loaded again and must keep its id; a stream that decodes must decode
 * the same way twice. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "skv_lossy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    const size_t cl = skv_load32_le(data);
    if (cl > size - 4)
        return 0;
    skv_lossy_cal *c = NULL;
    if (skv_lossy_cal_load(data + 4, cl, &c) != 0)
        return 0;
    uint8_t *img = NULL;
    size_t ilen = 0;
    if (skv_lossy_cal_save(c, &img, &ilen) != 0 || ilen != cl || memcmp(img, data + 4, cl) != 0)
        abort();
    free(img);
    const uint8_t *st = data + 4 + cl;
    const size_t sl = size - 4 - cl;
    int bits;
    skv_lossy_kind kind;
    size_t n, lo, hi;
    int L, H, D;
    skv_lossy_cal_shape(c, &L, &H, &D);
    if (skv_lossy_info(st, sl, &bits, &kind, &n, &lo, &hi) == 0 && n <= 4096 &&
        (size_t)L * n * H * D <= (1u << 20)) {
        const size_t half = (size_t)L * n * H * D * skv_dtype_size(skv_lossy_cal_dtype(c));
        uint8_t *k = malloc(half + 1), *v = malloc(half + 1), *k2 = malloc(half + 1), *v2 = malloc(half + 1);
        /* a whole stream, or one (layer, K|V) slab as the store keeps them */
        const unsigned slab = skv_load16_le(st + 46);
        if (k && v && k2 && v2 && slab == 0 && skv_lossy_decode(c, st, sl, n, k, v) == 0) {
            if (skv_lossy_decode(c, st, sl, n, k2, v2) != 0 || memcmp(k, k2, half) || memcmp(v, v2, half))
                abort();
        }
        if (k && k2 && slab > 0) {
            const int layer = (int)(slab - 1) / 2, kv = (int)(slab - 1) % 2;
            if (skv_lossy_slab_decode(c, st, sl, layer, kv, n, k) == 0 &&
                (skv_lossy_slab_decode(c, st, sl, layer, kv, n, k2) != 0 || memcmp(k, k2, half / (size_t)L)))
                abort();
        }
        free(k), free(v), free(k2), free(v2);
    }
    skv_lossy_cal_free(c);
    return 0;
}
