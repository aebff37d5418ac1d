/* Fuzz target for lossy streams alone (skv_lossy_decode, skv_lossy_slab_decode)
 * under one fixed calibration, learned on first use from a seeded random
 * model (tests/randmodel.c, compiled in): libFuzzer's mutations all land in
 * the stream, whose header, window and symbols the decoder must distrust.
 * A stream that decodes must decode the same way twice. With
 * SKV_FUZZ_SEEDS=DIR set, the first call writes seed streams (whole, and
 * a slab of every kind) coded under that calibration into DIR. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../randmodel.h"
#include "skv_lossy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static skv_lossy_cal *cal;
static int tried;

static void write_seeds(const char *dir)
{
    enum { N = 24 };
    const size_t row = 8 * 2, half = 2 * N * row; /* 2 layers, 1 head of 8, bf16 */
    uint8_t k[2 * N * 16], v[2 * N * 16];
    skv_rng r;
    skv_rng_seed(&r, 3);
    for (size_t i = 0; i < half / 2; i++) {
        const uint16_t a = skv_f32_to_bf16(skv_rng_normal(&r)), b = skv_f32_to_bf16(skv_rng_normal(&r));
        skv_store16_le(k + 2 * i, a);
        skv_store16_le(v + 2 * i, b);
    }
    const size_t cap = skv_lossy_bound(cal, N);
    uint8_t *buf = malloc(cap);
    char path[4096];
    for (int b = 4; b >= 2; b--)
        for (int kind = 0; kind < 2; kind++) {
            size_t len;
            FILE *f;
            if (!skv_lossy_encode(cal, b, (skv_lossy_kind)kind, k, v, N, 2, N - 3, buf, cap, &len, NULL,
                                  NULL)) {
                snprintf(path, sizeof path, "%s/whole_q%d_%s.bin", dir, b, kind ? "rvq" : "pvq");
                if ((f = fopen(path, "wb")))
                    fwrite(buf, 1, len, f), fclose(f);
            }
            if (!skv_lossy_slab_encode(cal, b, (skv_lossy_kind)kind, 1, 1, v + N * row, N, 0, N, buf, cap,
                                       &len, NULL)) {
                snprintf(path, sizeof path, "%s/slab_q%d_%s.bin", dir, b, kind ? "rvq" : "pvq");
                if ((f = fopen(path, "wb")))
                    fwrite(buf, 1, len, f), fclose(f);
            }
        }
    free(buf);
}

static void init(void)
{
    tried = 1;
    rm_shape s = {0, 16, 32, 2, 2, 1, 8, 40, 64, 1, 10000.0f, 1e-5f};
    size_t len;
    uint8_t *img = rm_llama2c(&s, 9, &len);
    skv_model *m = NULL;
    if (!img || skv_model_load_llama2c_mem(img, len, &m)) {
        free(img);
        return;
    }
    free(img);
    int32_t tok[4][32];
    const int32_t *tp[4];
    size_t tl[4];
    uint32_t x = 12345;
    for (int i = 0; i < 4; i++) {
        for (int t = 0; t < 32; t++) {
            x = x * 1103515245u + 12345u;
            tok[i][t] = (int32_t)((x >> 16) % 40);
        }
        tp[i] = tok[i];
        tl[i] = 32;
    }
    skv_lossy_opts o = {SEQKV_DT_BF16, 1, 1, 0, 0, NULL, 1, 0};
    if (skv_lossy_calibrate(m, tp, tl, 4, &o, &cal))
        cal = NULL;
    skv_model_free(m);
    const char *dir = getenv("SKV_FUZZ_SEEDS");
    if (cal && dir)
        write_seeds(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!tried)
        init();
    if (!cal)
        abort(); /* the fixed calibration must be learnable */
    int bits;
    skv_lossy_kind kind;
    size_t n, lo, hi;
    if (skv_lossy_info(data, size, &bits, &kind, &n, &lo, &hi) || n > 4096)
        return 0;
    const size_t half = 2 * n * 8 * 2 + 1;
    uint8_t *k = malloc(half), *v = malloc(half), *k2 = malloc(half), *v2 = malloc(half);
    const unsigned slab = skv_load16_le(data + 46);
    if (k && v && getenv("SKV_FUZZ_VERBOSE")) /* (whether a seed decodes) */
        fprintf(stderr, "fuzz_lossy_stream: %zu bytes, part %u: %s\n", size, slab,
                (slab ? skv_lossy_slab_decode(cal, data, size, (int)(slab - 1) / 2, (int)(slab - 1) % 2, n, k)
                      : skv_lossy_decode(cal, data, size, n, k, v)) ? seqkv_error_detail() : "decodes");
    if (k && v && k2 && v2) {
        if (slab == 0 && skv_lossy_decode(cal, data, size, n, k, v) == 0 &&
            (skv_lossy_decode(cal, data, size, n, k2, v2) || memcmp(k, k2, half - 1) ||
             memcmp(v, v2, half - 1)))
            abort();
        if (slab > 0) {
            const int layer = (int)(slab - 1) / 2, kv = (int)(slab - 1) % 2;
            if (skv_lossy_slab_decode(cal, data, size, layer, kv, n, k) == 0 &&
                (skv_lossy_slab_decode(cal, data, size, layer, kv, n, k2) || memcmp(k, k2, n * 16)))
                abort();
        }
    }
    free(k), free(v), free(k2), free(v2);
    return 0;
}
