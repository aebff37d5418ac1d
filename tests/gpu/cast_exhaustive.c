/* cast_exhaustive: every one of the 2^32 float32 bit patterns cast to each
 * storage dtype on the GPU and on the CPU, compared byte for byte. Needs a
 * CUDA device; exits 77 (skip) without one. Run by scripts/gpu_check.sh.
 *
 *   cast_exhaustive [LOG2_CHUNK]    (default 26: 64 Mi patterns a launch) */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "skv_base.h"

typedef struct {
    seqkv_dtype dt;
    uint8_t *dst;
    const float *src;
    size_t n;
} job;

static void *cpu_cast(void *p)
{
    job *j = p;
    skv_cast_from_f32(j->dt, j->dst, j->src, j->n);
    return NULL;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
    int lg = argc > 1 ? atoi(argv[1]) : 26;
    if (lg < 10 || lg > 30) {
        fprintf(stderr, "usage: cast_exhaustive [LOG2_CHUNK in 10..30]\n");
        return 2;
    }
    if (!skv_gpu_available()) {
        printf("skip: %s\n", skv_gpu_describe());
        return 77;
    }
    printf("device: %s\n", skv_gpu_describe());
    size_t n = (size_t)1 << lg;
    uint64_t chunks = ((uint64_t)1 << 32) >> lg;
    float *src = malloc(n * sizeof(float));
    uint8_t *a = malloc(n * 4), *b = malloc(n * 4);
    if (!src || !a || !b) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    long nt = sysconf(_SC_NPROCESSORS_ONLN);
    if (nt < 1)
        nt = 1;
    if (nt > 64)
        nt = 64;
    pthread_t th[64];
    job jobs[64];
    int bad = 0;
    for (int dt = SEQKV_DT_F32; dt <= SEQKV_DT_F8E4M3; dt++) {
        size_t es = skv_dtype_size((seqkv_dtype)dt);
        uint64_t diff = 0;
        double tg = 0, tc = 0;
        for (uint64_t c = 0; c < chunks; c++) {
            for (size_t i = 0; i < n; i++) {
                uint32_t u = (uint32_t)(c * n + i);
                memcpy(&src[i], &u, 4);
            }
            double t0 = now();
            int rc = skv_gpu_cast_from_f32((seqkv_dtype)dt, b, src, n);
            double t1 = now();
            if (rc != 0) {
                fprintf(stderr, "GPU cast failed: %s: %s\n", seqkv_strerror(rc), seqkv_error_detail());
                return 1;
            }
            size_t per = (n + (size_t)nt - 1) / (size_t)nt;
            for (long t = 0; t < nt; t++) {
                size_t lo = (size_t)t * per, hi = lo + per > n ? n : lo + per;
                jobs[t] = (job){(seqkv_dtype)dt, a + lo * es, src + lo, hi - lo};
                pthread_create(&th[t], NULL, cpu_cast, &jobs[t]);
            }
            for (long t = 0; t < nt; t++)
                pthread_join(th[t], NULL);
            tg += t1 - t0;
            tc += now() - t1;
            if (memcmp(a, b, n * es) != 0)
                for (size_t i = 0; i < n; i++)
                    if (memcmp(a + i * es, b + i * es, es) != 0) {
                        if (diff++ < 5) {
                            uint32_t u;
                            memcpy(&u, &src[i], 4);
                            printf("  %s: 0x%08" PRIx32 " cpu %02x.. gpu %02x..\n",
                                   skv_dtype_name((seqkv_dtype)dt), u, a[i * es], b[i * es]);
                        }
                    }
        }
        printf("%-7s all 2^32 patterns: %" PRIu64 " differ (gpu %.2f s incl. copies, cpu %.2f s on %ld threads)\n",
               skv_dtype_name((seqkv_dtype)dt), diff, tg, tc, nt);
        bad |= diff != 0;
    }
    free(src);
    free(a);
    free(b);
    printf(bad ? "FAIL\n" : "OK: GPU and CPU casts agree on every float32\n");
    return bad;
}
