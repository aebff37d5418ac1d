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
    fprintf(stderr, "bench_delta: %s: %s (%s)\n", what, seqkv_strerror(rc), seqkv_error_detail());
    return 1;
}

/* The first sequences of a KV file, their tokens and streams, and output
 * buffers for their decodes */
typedef struct {
    size_t n_seq, total; /* total: scalars, K and V */
    skv_kvseq *sq;
    int32_t **tok;
    skv_streams *ss;
    uint8_t **ko, **vo;
    size_t *nbs; /* bytes of one of K or V */
} bench_set;

/* The first n_seq sequences of st; 0, or the exit status */
static int load_set(skv_st *st, bench_set *b)
{
    int rc;
    const size_t n_seq = b->n_seq;
    b->sq = calloc(n_seq + 1, sizeof *b->sq);
    b->tok = calloc(n_seq + 1, sizeof *b->tok);
    b->ss = calloc(n_seq + 1, sizeof *b->ss);
    b->total = 0;
    for (size_t i = 0; i < n_seq; i++) {
        skv_kvseq *q = &b->sq[i];
        if ((rc = skv_kvfile_get(st, i, q)))
            return fail("kv file", rc);
        b->tok[i] = malloc(q->T * sizeof(int32_t) + 1);
        memcpy(b->tok[i], q->tokens, q->T * sizeof(int32_t));
        b->total += 2 * (size_t)q->layers * q->T * (size_t)q->kv_heads * (size_t)q->head_dim;
    }
    /* output buffers allocated before the clock runs, poisoned before each
     * round (the round must write them again); the round trip is checked
     * after the clock stops */
    b->ko = calloc(n_seq + 1, sizeof *b->ko);
    b->vo = calloc(n_seq + 1, sizeof *b->vo);
    b->nbs = calloc(n_seq + 1, sizeof *b->nbs);
    if (!b->ko || !b->vo || !b->nbs)
        return fail("buffers", SKV_ERR_NOMEM);
    for (size_t i = 0; i < n_seq; i++) {
        const skv_kvseq *q = &b->sq[i];
        b->nbs[i] = (size_t)q->layers * q->T * (size_t)q->kv_heads * (size_t)q->head_dim *
                    skv_dtype_size(q->dtype);
        b->ko[i] = malloc(b->nbs[i] + 1);
        b->vo[i] = malloc(b->nbs[i] + 1);
        if (!b->ko[i] || !b->vo[i])
            return fail("buffers", SKV_ERR_NOMEM);
    }
    return 0;
}

/* One round at stream version ver: encode every sequence, decode them
 * `decodes` times, check the round trip; the best speeds so far (M/s) in
 * *best_e and *best_d, the streams' bytes in *bytes. 0, or the exit
 * status. */
static int run_round(skv_delta *d, bench_set *b, int ver, int decodes, double *best_e, double *best_d,
                     size_t *bytes)
{
    int rc;
    const size_t n_seq = b->n_seq, total = b->total;
    if ((rc = skv_delta_set_stream_version(d, ver)))
        return fail("stream version", rc);
    for (size_t i = 0; i < n_seq; i++) {
        memset(b->ko[i], 0xa5, b->nbs[i]);
        memset(b->vo[i], 0xa5, b->nbs[i]);
    }
    double t0 = now();
    for (size_t i = 0; i < n_seq; i++) {
        skv_streams_free(&b->ss[i]);
        if ((rc = skv_delta_encode(d, b->tok[i], b->sq[i].T, b->sq[i].k, b->sq[i].v, 256, &b->ss[i])))
            return fail("encode", rc);
    }
    double t1 = now();
    for (int dr = 0; dr < decodes; dr++)
        for (size_t i = 0; i < n_seq; i++)
            if ((rc = skv_delta_decode(d, b->tok[i], b->sq[i].T, &b->ss[i], 0, 256, b->ko[i], b->vo[i])))
                return fail("decode", rc);
    double t2 = now();
    *bytes = 0;
    for (size_t i = 0; i < n_seq; i++) {
        if (memcmp(b->ko[i], b->sq[i].k, b->nbs[i]) || memcmp(b->vo[i], b->sq[i].v, b->nbs[i])) {
            fprintf(stderr, "bench_delta: round trip differs (stream version %d)\n", ver);
            return 1;
        }
        *bytes += b->ss[i].len;
    }
    if ((double)total / (t1 - t0) / 1e6 > *best_e)
        *best_e = (double)total / (t1 - t0) / 1e6;
    if ((double)total / (t2 - t1) / 1e6 > *best_d)
        *best_d = (double)total * decodes / (t2 - t1) / 1e6;
    return 0;
}

static void free_set(bench_set *b)
{
    for (size_t i = 0; i < b->n_seq; i++) {
        skv_streams_free(&b->ss[i]);
        free(b->tok[i]);
    }
    free(b->ss);
    free(b->tok);
    free(b->sq);
}

static void free_outputs(bench_set *b)
{
    for (size_t i = 0; i < b->n_seq; i++) {
        free(b->ko[i]);
        free(b->vo[i]);
    }
    free(b->ko);
    free(b->vo);
    free(b->nbs);
}

/* The lines of each stream version timed, and the two against each other */
static void report(seqkv_level lv, const int *vers, int nv, const bench_set *b, int reps, const double *best_e,
                   const double *best_d, const size_t *bytes)
{
    double ghz = skv_bench_clock_ghz();
    for (int vi = 0; vi < nv; vi++) {
        printf("bench_delta %s: stream version %d: %zu sequences, %zu scalars, best of %d: encode %.1f M/s, "
               "decode %.1f M/s, %.3f bits a scalar\n",
               seqkv_level_name(lv), vers[vi], b->n_seq, b->total, reps, best_e[vi], best_d[vi],
               8.0 * (double)bytes[vi] / (double)b->total);
        if (ghz > 0 && best_e[vi] > 0 && best_d[vi] > 0)
            printf("bench_delta %s: stream version %d at the core's %.2f GHz (bench/clock.h): encode %.1f "
                   "cycles a scalar, decode %.1f (100 M/s is %.1f, 150 M/s is %.1f)\n",
                   seqkv_level_name(lv), vers[vi], ghz, ghz * 1e3 / best_e[vi], ghz * 1e3 / best_d[vi],
                   ghz * 10, ghz * 1e3 / 150);
    }
    if (nv == 2)
        printf("bench_delta %s: version %d against version 1: encode %.2fx, decode %.2fx\n",
               seqkv_level_name(lv), vers[0], best_e[0] / best_e[1], best_d[0] / best_d[1]);
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
    bench_set b = {.n_seq = want < n_seq ? want : n_seq};
    int r = load_set(st, &b);
    if (r)
        return r;
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
    for (int rep = 0; rep < reps; rep++)
        for (int vi = 0; vi < nv; vi++)
            if ((r = run_round(d, &b, vers[vi], decodes, &best_e[vi], &best_d[vi], &bytes[vi])))
                return r;
    free_outputs(&b);
    report(lv, vers, nv, &b, reps, best_e, best_d, bytes);
    free_set(&b);
    skv_delta_free(d);
    skv_st_free(st);
    skv_calib_free(c);
    return 0;
}
