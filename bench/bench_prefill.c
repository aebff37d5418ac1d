/* Prefill throughput of the float32, int8 and fp8 engines, 1 and 2
 * threads, in one run. Prints tokens/s and each configuration's ratio to
 * the float32 single-thread baseline measured in the same process (these
 * machines are noisy: read the ratios).
 *
 * usage: bench_prefill [MODEL] [--seqs N] [--len T] [--reps R]
 *   MODEL defaults to $SEQKV_MODEL or ../shared/models/stories260K.bin. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "skv_model.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    const char *path = getenv("SEQKV_MODEL");
    long seqs = 8, len = 256, reps = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seqs") && i + 1 < argc)
            seqs = atol(argv[++i]);
        else if (!strcmp(argv[i], "--len") && i + 1 < argc)
            len = atol(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atol(argv[++i]);
        else if (!strcmp(argv[i], "--help")) {
            printf("usage: bench_prefill [MODEL] [--seqs N] [--len T] [--reps R]\n");
            return 0;
        } else
            path = argv[i];
    }
    if (!path)
        path = "../shared/models/stories260K.bin";
    if (seqs < 1 || len < 2 || reps < 1) {
        fprintf(stderr, "bench_prefill: bad arguments\n");
        return 2;
    }
    skv_model *m[3] = {NULL, NULL, NULL};
    int rc = skv_model_load(path, &m[0]);
    if (!rc)
        rc = skv_model_quantize(m[0], SKV_WQ_INT8, &m[1]);
    if (!rc)
        rc = skv_model_quantize(m[0], SKV_WQ_FP8, &m[2]);
    if (rc) {
        fprintf(stderr, "bench_prefill: %s: %s (%s)\n", path, seqkv_strerror(rc), seqkv_error_detail());
        return 1;
    }
    const skv_model_config *c = skv_model_cfg(m[0]);
    /* Token sequences sampled from the model itself, seeded. */
    int32_t *toks = malloc((size_t)(seqs * len) * sizeof *toks);
    for (long s = 0; s < seqs; s++) {
        skv_rng rng;
        skv_rng_seed(&rng, 1000 + (uint64_t)s);
        int32_t bos = c->bos_id;
        rc = skv_model_generate(m[0], NULL, &bos, 1, (size_t)len, 1.0f, 0.9f, &rng, toks + s * len);
        if (rc) {
            fprintf(stderr, "bench_prefill: sampling failed: %s\n", seqkv_error_detail());
            return 1;
        }
    }
    skv_kvcache *cache;
    if (skv_kvcache_create(c, (size_t)len, &cache)) {
        fprintf(stderr, "bench_prefill: no memory\n");
        return 1;
    }
    static const char *names[3] = {"fp32", "int8", "fp8"};
    printf("bench_prefill: %s, %ld sequences x %ld tokens, best of %ld\n", path, seqs, len, reps);
    printf("%-6s %-8s %14s %10s\n", "engine", "threads", "tokens/s", "vs fp32x1");
    double base = 0.0;
    for (int e = 0; e < 3; e++) {
        for (int th = 1; th <= 2; th++) {
            skv_pool *pool;
            skv_pool_create(&pool, th);
            double best = 1e30;
            for (long r = 0; r < reps; r++) {
                double t0 = now();
                for (long s = 0; s < seqs; s++) {
                    skv_kvcache_truncate(cache, 0);
                    skv_forward_opts o = {.pool = pool};
                    if (skv_model_forward(m[e], cache, toks + s * len, (size_t)len, &o)) {
                        fprintf(stderr, "bench_prefill: %s\n", seqkv_error_detail());
                        return 1;
                    }
                }
                double dt = now() - t0;
                if (dt < best)
                    best = dt;
            }
            double tps = (double)(seqs * len) / best;
            if (e == 0 && th == 1)
                base = tps;
            printf("%-6s %-8d %14.0f %9.2fx\n", names[e], th, tps, tps / base);
            skv_pool_free(pool);
        }
    }
    skv_kvcache_free(cache);
    free(toks);
    for (int e = 0; e < 3; e++)
        skv_model_free(m[e]);
    return 0;
}
