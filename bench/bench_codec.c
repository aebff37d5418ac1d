/* Entropy-stage throughput on one thread: encode and decode M scalars/s of
 * bf16 data for five prediction regimes (stat's rows, whose (mu, s) repeat
 * row after row so the row cache serves them; a wide "stat"-like spread
 * out of row step; a medium "ctx"-like one; a tight "spec"-like one;
 * "bucket rows", repeating rows where every scalar is the decoder's
 * common case),
 * through the batch API (rows of ROW scalars, as the delta coder calls
 * it) and the one-scalar API, with the memcpy of the same bytes as the
 * in-process baseline. The scalars are coded as streams of STREAM scalars each
 * (default 8192: a 256-token chunk of one stories260K layer's K or V, the
 * streams the sequence coder writes; a stream's queue and tables then
 * stay in cache as they do there). Encode includes skv_encoder_finish.
 * These machines are shared: every figure is the best of REPS runs of the
 * thread's CPU time, and the ratios matter more than the absolute numbers.
 * usage: bench_codec [N_MILLIONS] [STREAM] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "skv_base.h"
#include "skv_codec.h"

#define ROW 32 /* scalars per batch: one position of stories260K (4 heads x 8) */
#define REPS 5

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    skv_encoder *e;
    skv_decoder *d;
    const uint32_t *x;
    uint32_t *y;
    const float *mu, *s;
    size_t n, slen, cap, len;
    uint8_t *buf;
    size_t *end; /* stream k's bytes end at buf + end[k] */
} job;

/* scalars [a, b) of one stream, in rows of row (1: the one-scalar API) */
static int encode_stream(job *j, size_t a, size_t b, size_t row, size_t *at)
{
    skv_encoder_reset(j->e, NULL);
    int rc = 0;
    for (size_t i = a; i < b && !rc; i += row) {
        size_t k = b - i < row ? b - i : row;
        rc = row == 1 ? skv_encoder_put(j->e, j->x[i], j->mu[i], j->s[i])
                      : skv_encoder_put_n(j->e, j->x + i, j->mu + i, j->s + i, k);
    }
    size_t len = 0;
    if (!rc)
        rc = skv_encoder_finish(j->e, j->buf + *at, j->cap - *at, &len);
    *at += len;
    return rc;
}

static int encode(job *j, size_t row)
{
    int rc = 0;
    j->len = 0;
    for (size_t a = 0, k = 0; a < j->n && !rc; a += j->slen, k++) {
        rc = encode_stream(j, a, a + j->slen < j->n ? a + j->slen : j->n, row, &j->len);
        j->end[k] = j->len;
    }
    return rc;
}

static int decode(job *j, size_t row)
{
    int rc = 0;
    for (size_t a = 0, k = 0; a < j->n && !rc; a += j->slen, k++) {
        size_t b = a + j->slen < j->n ? a + j->slen : j->n, from = k ? j->end[k - 1] : 0;
        rc = skv_decoder_begin(j->d, j->buf + from, j->end[k] - from, NULL);
        for (size_t i = a; i < b && !rc; i += row) {
            size_t c = b - i < row ? b - i : row;
            rc = row == 1 ? skv_decoder_get(j->d, j->mu[i], j->s[i], &j->y[i])
                          : skv_decoder_get_n(j->d, j->mu + i, j->s + i, j->y + i, c);
        }
        if (!rc)
            rc = skv_decoder_end(j->d);
    }
    return rc;
}

/* best M scalars/s of REPS runs; -1 on a failed or inexact run */
static double best(job *j, int (*f)(job *, size_t), size_t row, int check)
{
    double b = 0;
    for (int r = 0; r < REPS; r++) {
        if (check)
            memset(j->y, 0, j->n * sizeof *j->y);
        double t0 = now();
        int rc = f(j, row);
        double t = now() - t0;
        if (rc || (check && memcmp(j->x, j->y, j->n * sizeof *j->y)))
            return -1;
        if ((double)j->n / t / 1e6 > b)
            b = (double)j->n / t / 1e6;
    }
    return b;
}

int main(int argc, char **argv)
{
    size_t n = (size_t)((argc > 1 ? atof(argv[1]) : 2.0) * 1e6);
    if (n < 1000)
        n = 1000;
    size_t slen = argc > 2 ? (size_t)atol(argv[2]) : 8192;
    if (slen < ROW || slen > n)
        slen = slen < ROW ? ROW : n;
    /* spread < 0: mu and s are the channel's mean and sd, the same every
     * row (stat's case: the row cache serves every row after the first);
     * -2: such rows with means far from 0 in units of the sd, so every
     * scalar is the decoder's common case (a BUCKET scalar inside a
     * binade: no zero bucket, no STEP), the real decoder's floor;
     * 0: the same per channel but out of row step (a classification per
     * scalar); > 0: mu drawn around the value with sd spread * the
     * channel's */
    static const struct { const char *name; float spread; } regimes[] = {
        {"rows (stat)", -1.0f},
        {"wide (stat-like)", 0.0f},
        {"medium (ctx-like)", 0.2f},
        {"tight (spec-like)", 0.02f},
        {"bucket rows", -2.0f}};
    uint32_t *x = malloc(n * 4), *y = malloc(n * 4);
    float *mu = malloc(n * 4), *s = malloc(n * 4);
    size_t *end = malloc((n / slen + 1) * sizeof *end);
    skv_cmodel *m;
    if (!x || !y || !mu || !s || !end || skv_cmodel_create(SEQKV_DT_BF16, SKV_MIX_DEFAULT, NULL, &m)) {
        fprintf(stderr, "bench_codec: setup failed\n");
        return 1;
    }
    job j = {NULL, NULL, x, y, mu, s, n, slen, 0, 0, NULL, end};
    skv_encoder_create(m, &j.e);
    skv_decoder_create(m, &j.d);
    printf("bench_codec: %zu bf16 scalars per regime in streams of %zu, one thread, best of %d "
           "(thread CPU time)\n",
           n, slen, REPS);
    printf("batch: put_n/get_n in rows of %d; scalar: put/get one at a time; M scalars/s\n", ROW);
    printf("%-20s %7s %9s %9s %9s %9s %9s\n", "regime", "bits", "enc", "dec", "enc(sc)", "dec(sc)",
           "memcpy");
    for (size_t r = 0; r < sizeof regimes / sizeof regimes[0]; r++) {
        skv_rng rng;
        skv_rng_seed(&rng, 17 + r);
        for (size_t i = 0; i < n; i++) {
            const float sp0 = regimes[r].spread;
            float chan_mean = (float)(i % 32) * 0.05f - 0.8f,
                  chan_sd = 0.5f + (float)((sp0 < 0 ? i % 32 : i % 7) % 7) * 0.2f;
            if (sp0 < -1.5f)
                chan_mean = 1.0f + 0.1f * (float)(i % 32), chan_sd = 0.05f * (1.0f + 0.05f * (float)(i % 32));
            float v = chan_mean + chan_sd * skv_rng_normal(&rng);
            x[i] = skv_f32_to_bf16(v);
            float vv = skv_bf16_to_f32((uint16_t)x[i]);
            float sp = sp0 * chan_sd;
            mu[i] = sp0 <= 0 ? chan_mean : vv + sp * skv_rng_normal(&rng);
            s[i] = sp0 <= 0 ? chan_sd : sp;
        }
        /* the reference streams from the one-scalar API; the batch API
         * must write the same bytes (room: each stream's bound) */
        j.cap = 0;
        for (size_t a = 0; a < n; a += slen) {
            skv_encoder_reset(j.e, NULL);
            for (size_t i = a; i < a + slen && i < n; i++)
                skv_encoder_put(j.e, x[i], mu[i], s[i]);
            j.cap += skv_encoder_bound(j.e);
        }
        uint8_t *ref = malloc(j.cap);
        j.buf = ref;
        if (!ref || encode(&j, 1)) {
            fprintf(stderr, "bench_codec: encode failed\n");
            return 1;
        }
        size_t rlen = j.len;
        j.buf = malloc(j.cap);
        if (!j.buf) {
            fprintf(stderr, "bench_codec: encode failed\n");
            return 1;
        }
        double enc_sc = best(&j, encode, 1, 0), enc = best(&j, encode, ROW, 0);
        if (enc < 0 || j.len != rlen || memcmp(j.buf, ref, rlen)) {
            fprintf(stderr, "bench_codec: batch and scalar encoders disagree\n");
            return 1;
        }
        double dec_sc = best(&j, decode, 1, 1), dec = best(&j, decode, ROW, 1);
        if (dec < 0 || dec_sc < 0) {
            fprintf(stderr, "bench_codec: round trip failed\n");
            return 1;
        }
        double tm = 1e30;
        for (int k = 0; k < 10; k++) {
            double t0 = now();
            memcpy(y, x, n * 4);
            __asm__ volatile("" ::: "memory");
            double t = now() - t0;
            tm = t < tm ? t : tm;
        }
        printf("%-20s %7.3f %9.1f %9.1f %9.1f %9.1f %9.0f\n", regimes[r].name,
               8.0 * (double)rlen / (double)n, enc, dec, enc_sc, dec_sc, (double)n / tm / 1e6);
        free(ref);
        free(j.buf);
    }
    skv_encoder_free(j.e);
    skv_decoder_free(j.d);
    skv_cmodel_free(m);
    free(x);
    free(y);
    free(mu);
    free(s);
    free(end);
    return 0;
}
