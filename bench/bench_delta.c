/* The per-sequence coder on real KV at one model-free level, without the
 * zstd baselines and calibration of `seqkv codec bench`: encode and decode
 * the first N sequences of a KV file with a saved calibration, checking
 * the round trip, best of REPS runs of the thread's CPU time (these
 * machines are shared), encoding as the store does (no ideal code
 * length). Short enough to run under callgrind.
 * At stat it times its default stream version against version 1 in the
 * same rounds; VERSION (1 or 2; 0: the level's default) times that one
 * alone. BENCH_DECODES=k decodes k times a round (a profile of decode).
 * usage: bench_delta CAL.cal TEST.safetensors [stat|ctx] [N_SEQ] [REPS] [VERSION] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "skv_delta.h"
#include "skv_tensor.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(const char *what, int rc)
{
    fprintf(stderr, "bench_delta: %s: %s (%s)\n", what, skv_strerror(rc), skv_error_detail());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_delta CAL.cal TEST.safetensors [stat|ctx] [N_SEQ] [REPS] [VERSION]\n");
        return 2;
    }
    seqkv_level lv = argc > 3 && strcmp(argv[3], "ctx") == 0 ? SEQKV_CTX : SEQKV_STAT;
    size_t want = argc > 4 ? (size_t)atol(argv[4]) : 8;
    int reps = argc > 5 ? atoi(argv[5]) : 3;
    skv_calib *c = NULL;
    skv_st *st = NULL;
    skv_delta *d = NULL;
    size_t n_seq = 0;
    int rc = skv_calib_load(argv[1], &c);
    if (rc)
        return fail(argv[1], rc);
    if ((rc = skv_st_open(argv[2], &st)) || (rc = skv_kvfile_count(st, &n_seq)))
        return fail(argv[2], rc);
    if ((rc = skv_delta_create(c, lv, NULL, NULL, &d)))
        return fail("delta", rc);
    skv_delta_set_ideal(d, 0); /* as the store encodes: bytes only */
    n_seq = want < n_seq ? want : n_seq;
    skv_kvseq *sq = calloc(n_seq + 1, sizeof *sq);
    int32_t **tok = calloc(n_seq + 1, sizeof *tok);
    skv_streams *ss = calloc(n_seq + 1, sizeof *ss);
    size_t total = 0;
    for (size_t i = 0; i < n_seq; i++) {
        if ((rc = skv_kvfile_get(st, i, &sq[i])))
            return fail("kv file", rc);
        tok[i] = malloc(sq[i].T * sizeof(int32_t) + 1);
        memcpy(tok[i], sq[i].tokens, sq[i].T * sizeof(int32_t));
        total += 2 * (size_t)sq[i].layers * sq[i].T * (size_t)sq[i].kv_heads * (size_t)sq[i].head_dim;
    }
    /* output buffers allocated before the clock runs, poisoned before each
     * round (the round must write them again); the round trip is checked
     * after the clock stops */
    uint8_t **ko = calloc(n_seq + 1, sizeof *ko), **vo = calloc(n_seq + 1, sizeof *vo);
    size_t *nbs = calloc(n_seq + 1, sizeof *nbs);
    if (!ko || !vo || !nbs)
        return fail("buffers", SKV_ERR_NOMEM);
    for (size_t i = 0; i < n_seq; i++) {
        nbs[i] = (size_t)sq[i].layers * sq[i].T * (size_t)sq[i].kv_heads * (size_t)sq[i].head_dim *
                 skv_dtype_size(sq[i].dtype);
        ko[i] = malloc(nbs[i] + 1);
        vo[i] = malloc(nbs[i] + 1);
        if (!ko[i] || !vo[i])
            return fail("buffers", SKV_ERR_NOMEM);
    }
    /* stat: its default stream version and version 1 as the baseline,
     * alternated round by round; ctx: version 1 only */
    if (argc > 6 && (rc = skv_delta_set_stream_version(d, atoi(argv[6]))))
        return fail("stream version", rc);
    const int v_def = skv_delta_stream_version(d);
    const int nv = argc <= 6 && v_def == 2 ? 2 : 1, vers[2] = {v_def, 1};
    /* BENCH_DECODES=k: each round decodes k times (a profile of decode) */
    const char *de = getenv("BENCH_DECODES");
    const int decodes = de && atoi(de) > 0 ? atoi(de) : 1;
    double best_e[2] = {0, 0}, best_d[2] = {0, 0};
    size_t bytes[2] = {0, 0};
    for (int r = 0; r < reps; r++)
        for (int vi = 0; vi < nv; vi++) {
            if ((rc = skv_delta_set_stream_version(d, vers[vi])))
                return fail("stream version", rc);
            for (size_t i = 0; i < n_seq; i++) {
                memset(ko[i], 0xa5, nbs[i]);
                memset(vo[i], 0xa5, nbs[i]);
            }
            double t0 = now();
            for (size_t i = 0; i < n_seq; i++) {
                skv_streams_free(&ss[i]);
                if ((rc = skv_delta_encode(d, tok[i], sq[i].T, sq[i].k, sq[i].v, 256, &ss[i])))
                    return fail("encode", rc);
            }
            double t1 = now();
            for (int dr = 0; dr < decodes; dr++)
                for (size_t i = 0; i < n_seq; i++)
                    if ((rc = skv_delta_decode(d, tok[i], sq[i].T, &ss[i], 0, 256, ko[i], vo[i])))
                        return fail("decode", rc);
            double t2 = now();
            bytes[vi] = 0;
            for (size_t i = 0; i < n_seq; i++) {
                if (memcmp(ko[i], sq[i].k, nbs[i]) || memcmp(vo[i], sq[i].v, nbs[i])) {
                    fprintf(stderr, "bench_delta: round trip differs (stream version %d)\n", vers[vi]);
                    return 1;
                }
                bytes[vi] += ss[i].len;
            }
            if ((double)total / (t1 - t0) / 1e6 > best_e[vi])
                best_e[vi] = (double)total / (t1 - t0) / 1e6;
            if ((double)total / (t2 - t1) / 1e6 > best_d[vi])
                best_d[vi] = (double)total * decodes / (t2 - t1) / 1e6;
        }
    for (size_t i = 0; i < n_seq; i++) {
        free(ko[i]);
        free(vo[i]);
    }
    free(ko);
    free(vo);
    free(nbs);
    double ghz = skv_bench_clock_ghz();
    for (int vi = 0; vi < nv; vi++) {
        printf("bench_delta %s: stream version %d: %zu sequences, %zu scalars, best of %d: encode %.1f M/s, "
               "decode %.1f M/s, %.3f bits a scalar\n",
               seqkv_level_name(lv), vers[vi], n_seq, total, reps, best_e[vi], best_d[vi],
               8.0 * (double)bytes[vi] / (double)total);
        if (ghz > 0 && best_e[vi] > 0 && best_d[vi] > 0)
            printf("bench_delta %s: stream version %d at the core's %.2f GHz (bench/clock.h): encode %.1f "
                   "cycles a scalar, decode %.1f (100 M/s is %.1f, 150 M/s is %.1f)\n",
                   seqkv_level_name(lv), vers[vi], ghz, ghz * 1e3 / best_e[vi], ghz * 1e3 / best_d[vi],
                   ghz * 10, ghz * 1e3 / 150);
    }
    if (nv == 2)
        printf("bench_delta %s: version %d against version 1: encode %.2fx, decode %.2fx\n",
               seqkv_level_name(lv), vers[0], best_e[0] / best_e[1], best_d[0] / best_d[1]);
    for (size_t i = 0; i < n_seq; i++) {
        skv_streams_free(&ss[i]);
        free(tok[i]);
    }
    free(ss);
    free(tok);
    free(sq);
    skv_delta_free(d);
    skv_st_free(st);
    skv_calib_free(c);
    return 0;
}
