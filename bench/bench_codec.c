/* Entropy-stage throughput on one thread: encode and decode M scalars/s of
 * bf16 data for three prediction regimes (a wide "stat"-like spread, a
 * medium "ctx"-like one, and a tight "spec"-like one), with the memcpy of
 * the same bytes as the in-process baseline. Timings vary on these shared
 * machines: compare ratios. usage: bench_codec [N_MILLIONS] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "skv_codec.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    size_t n = (size_t)((argc > 1 ? atof(argv[1]) : 2.0) * 1e6);
    if (n < 1000)
        n = 1000;
    static const struct { const char *name; float spread; } regimes[] = {
        {"wide (stat-like)", 1.0f}, {"medium (ctx-like)", 0.2f}, {"tight (spec-like)", 0.02f}};
    uint32_t *x = malloc(n * 4), *y = malloc(n * 4);
    float *mu = malloc(n * 4), *s = malloc(n * 4);
    skv_cmodel *m;
    if (!x || !y || !mu || !s || skv_cmodel_create(SKV_DT_BF16, SKV_MIX_DEFAULT, NULL, &m)) {
        fprintf(stderr, "bench_codec: setup failed\n");
        return 1;
    }
    skv_encoder *e;
    skv_decoder *d;
    skv_encoder_create(m, &e);
    skv_decoder_create(m, &d);
    printf("bench_codec: %zu bf16 scalars per regime, one thread\n", n);
    printf("%-20s %10s %12s %12s %12s\n", "regime", "bits", "enc M/s", "dec M/s", "memcpy M/s");
    for (size_t r = 0; r < sizeof regimes / sizeof regimes[0]; r++) {
        skv_rng rng;
        skv_rng_seed(&rng, 17 + r);
        for (size_t i = 0; i < n; i++) {
            float chan_mean = (float)(i % 32) * 0.05f - 0.8f, chan_sd = 0.5f + (float)(i % 7) * 0.2f;
            float v = chan_mean + chan_sd * skv_rng_normal(&rng);
            x[i] = skv_f32_to_bf16(v);
            float vv = skv_bf16_to_f32((uint16_t)x[i]);
            float sp = regimes[r].spread * chan_sd;
            mu[i] = r == 0 ? chan_mean : vv + sp * skv_rng_normal(&rng);
            s[i] = r == 0 ? chan_sd : sp;
        }
        double t0 = now();
        skv_encoder_reset(e, NULL);
        for (size_t i = 0; i < n; i++)
            skv_encoder_put(e, x[i], mu[i], s[i]);
        size_t cap = skv_encoder_bound(e), len;
        uint8_t *buf = malloc(cap);
        skv_encoder_finish(e, buf, cap, &len);
        double te = now() - t0;
        t0 = now();
        int rc = skv_decoder_begin(d, buf, len, NULL);
        for (size_t i = 0; i < n && !rc; i++)
            rc = skv_decoder_get(d, mu[i], s[i], &y[i]);
        if (!rc)
            rc = skv_decoder_end(d);
        double td = now() - t0;
        if (rc || memcmp(x, y, n * 4)) {
            fprintf(stderr, "bench_codec: round trip failed\n");
            return 1;
        }
        t0 = now();
        for (int k = 0; k < 10; k++) {
            memcpy(y, x, n * 4);
            __asm__ volatile("" ::: "memory");
        }
        double tm = (now() - t0) / 10;
        printf("%-20s %10.3f %12.1f %12.1f %12.0f\n", regimes[r].name, 8.0 * (double)len / (double)n,
               (double)n / te / 1e6, (double)n / td / 1e6, (double)n / tm / 1e6);
        free(buf);
    }
    skv_encoder_free(e);
    skv_decoder_free(d);
    skv_cmodel_free(m);
    free(x);
    free(y);
    free(mu);
    free(s);
    return 0;
}
