/* Encryption at rest against none, in the same run: GET throughput of a
 * store whose records are sealed (the default) and of one written with
 * sealing off (seqkv_options.no_seal), cold (no hot tier: every GET opens
 * and checks its records), hot (from the hot tier) and cold streamed by
 * layer (seqkv_get_view with on_ready, what KV.GET ... LAYERS serves), at the raw level,
 * in process, the readers' pool on every CPU as the server has it; the
 * cipher's own speed (one thread over one hot part, and every CPU over
 * parts as cold as a store's: what bounds a cold sealed GET); and
 * the time of lookups of another tenant's stored prompts against lookups
 * of prompts nobody stored (percentiles of each).
 *
 * usage: bench_seal [--seconds S] [--seqs N] [--tokens T]
 * KV: a stories260K-shaped profile (5 layers, 4 KV heads of 8, bf16,
 * chunks of 256) with seeded pseudo-random bytes (raw records do not
 * depend on what the bytes are). */
#include <openssl/evp.h>
#include <pthread.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "seqkv.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t rng(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#define CHECK(x, what)                                                                   \
    do {                                                                                 \
        int rc_ = (x);                                                                   \
        if (rc_) {                                                                       \
            fprintf(stderr, "bench_seal: %s: %d %s\n", what, rc_, seqkv_error_detail());   \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

typedef struct {
    int nseq;
    size_t T;
    int32_t **tok;
    uint8_t **kv;
    size_t kv_len;
} workload;

static seqkv_profile profile(void)
{
    seqkv_profile p = SEQKV_PROFILE_INIT;
    memset(&p, 0, sizeof p);
    snprintf(p.name, sizeof p.name, "s");
    p.layers = 5;
    p.kv_heads = 4;
    p.head_dim = 8;
    p.dtype = SEQKV_DT_BF16;
    p.rope_theta = 10000;
    p.rope_dim = 8;
    p.chunk = 256;
    p.level = SEQKV_RAW;
    return p;
}

static seqkv *open_db(const char *dir, int no_seal, uint64_t cache)
{
    seqkv_options o = SEQKV_OPTIONS_INIT;
    o.no_seal = no_seal;
    o.quiet = 1;
    o.cache_bytes = cache;
    o.read_threads = (int)sysconf(_SC_NPROCESSORS_ONLN); /* as the server sets it */
    seqkv *db;
    CHECK(seqkv_open(dir, &o, &db), dir);
    return db;
}

static void fill(const char *dir, int no_seal, const workload *w)
{
    seqkv *db = open_db(dir, no_seal, 0);
    seqkv_profile p = profile();
    CHECK(seqkv_profile_set(db, &p), "profile");
    for (int i = 0; i < w->nseq; i++)
        CHECK(seqkv_put(db, "a", "s", w->tok[i], w->T, w->kv[i], w->kv_len, NULL, NULL), "put");
    seqkv_close(db);
}

/* GETs of the whole sequences, round robin, for `seconds` of GET time:
 * GETs a second. Each GET's bytes are checked, off the clock. */
static double gets(seqkv *db, const workload *w, double seconds, uint8_t *out)
{
    size_t got;
    long n = 0;
    double spent = 0;
    while (spent < seconds) {
        int i = (int)(n % w->nseq);
        const double t0 = now_s();
        CHECK(seqkv_get(db, "a", "s", w->tok[i], w->T, &(seqkv_get_opts){.want = w->T}, out, w->kv_len, &got), "get");
        spent += now_s() - t0;
        if (got != w->T || memcmp(out, w->kv[i], w->kv_len) != 0) {
            fprintf(stderr, "bench_seal: a get gave other bytes\n");
            exit(1);
        }
        n++;
    }
    return (double)n / spent;
}

/* OpenSSL's ChaCha20-Poly1305 on one part of `part` bytes, under a fixed
 * key and nonce (a bench, not a seal): sealed into c and tag, or opened
 * from them into m (its tag checked; x reused) */
static const uint8_t bench_key[32] = {1}, bench_n12[12] = {3};

static void ossl_seal(EVP_CIPHER *cc, const uint8_t *m, size_t part, uint8_t *c, uint8_t tag[16])
{
    EVP_CIPHER_CTX *x = EVP_CIPHER_CTX_new();
    uint8_t fin[16];
    int out;
    CHECK(!cc || !x || EVP_EncryptInit_ex2(x, cc, bench_key, bench_n12, NULL) != 1 ||
              EVP_EncryptUpdate(x, c, &out, m, (int)part) != 1 ||
              EVP_EncryptFinal_ex(x, fin, &out) != 1 ||
              EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_AEAD_GET_TAG, 16, tag) != 1,
          "OpenSSL seal");
    EVP_CIPHER_CTX_free(x);
}

static void ossl_open(EVP_CIPHER_CTX *x, EVP_CIPHER *cc, const uint8_t *c, size_t part,
                      const uint8_t tag[16], uint8_t *m)
{
    int out;
    CHECK(!x || EVP_DecryptInit_ex2(x, cc, bench_key, bench_n12, NULL) != 1 ||
              EVP_DecryptUpdate(x, m, &out, c, (int)part) != 1 ||
              EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_AEAD_SET_TAG, 16, (void *)tag) != 1 ||
              EVP_DecryptFinal_ex(x, m, &out) != 1,
          "OpenSSL open");
}

/* The cipher alone on one thread: bytes opened a second by libsodium's
 * XChaCha20-Poly1305 and by OpenSSL's ChaCha20-Poly1305 (what a sealed
 * raw GET uses), parts of `part` bytes */
static void cipher_rates(size_t part, double seconds, double *sodium, double *openssl)
{
    uint8_t *m = malloc(part), *c = malloc(part + 16), key[32] = {1}, n24[24] = {2};
    memset(m, 7, part);
    crypto_aead_xchacha20poly1305_ietf_encrypt(c, NULL, m, part, NULL, 0, NULL, n24, key);
    long k = 0;
    double t0 = now_s();
    for (; now_s() - t0 < seconds; k++)
        CHECK(crypto_aead_xchacha20poly1305_ietf_decrypt(m, NULL, NULL, c, part + 16, NULL, 0,
                                                         n24, key),
              "libsodium open");
    *sodium = (double)k * (double)part / (now_s() - t0);
    EVP_CIPHER *cc = EVP_CIPHER_fetch(NULL, "ChaCha20-Poly1305", NULL);
    EVP_CIPHER_CTX *x = EVP_CIPHER_CTX_new();
    uint8_t tag[16];
    ossl_seal(cc, m, part, c, tag);
    k = 0;
    t0 = now_s();
    for (; now_s() - t0 < seconds; k++)
        ossl_open(x, cc, c, part, tag, m);
    *openssl = (double)k * (double)part / (now_s() - t0);
    EVP_CIPHER_CTX_free(x);
    EVP_CIPHER_free(cc);
    free(m);
    free(c);
}

/* The cipher alone on every CPU at once over parts as cold as a cold
 * GET's: each thread opens its share of `total` bytes of sealed parts
 * (as many bytes as the store's records) one after the other, as a
 * sealed raw GET's pool does, into an output buffer of a GET's size. */
typedef struct {
    uint8_t *c, *out, tag[16];
    size_t part, nparts, out_len;
    double seconds, bytes;
    EVP_CIPHER *cc;
    pthread_barrier_t *go;
} cold_job;

static void *cold_thread(void *arg)
{
    cold_job *j = arg;
    EVP_CIPHER_CTX *x = EVP_CIPHER_CTX_new();
    pthread_barrier_wait(j->go);
    size_t k = 0, o = 0;
    const double t0 = now_s();
    while (now_s() - t0 < j->seconds) {
        for (size_t i = 0; i < j->nparts; i++, k++) {
            uint8_t *m = j->out + o;
            o = o + 2 * j->part <= j->out_len ? o + j->part : 0;
            ossl_open(x, j->cc, j->c + i * j->part, j->part, j->tag, m);
        }
    }
    j->bytes = (double)k * (double)j->part / (now_s() - t0);
    EVP_CIPHER_CTX_free(x);
    return NULL;
}

/* Bytes opened a second by `nt` threads together (every part the same
 * plaintext under the same nonce: a bench, not a seal) */
static double cold_cipher_rate(size_t part, size_t total, size_t out_len, int nt, double seconds)
{
    EVP_CIPHER *cc = EVP_CIPHER_fetch(NULL, "ChaCha20-Poly1305", NULL);
    uint8_t *m = calloc(1, part), *c0 = malloc(part), tag[16];
    CHECK(!m || !c0, "cold parts");
    ossl_seal(cc, m, part, c0, tag);
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, (unsigned)nt);
    cold_job *jobs = calloc((size_t)nt, sizeof *jobs);
    pthread_t *th = calloc((size_t)nt, sizeof *th);
    for (int t = 0; t < nt; t++) {
        cold_job *j = &jobs[t];
        j->part = part;
        j->nparts = total / (size_t)nt / part + 1;
        j->out_len = out_len / (size_t)nt > 2 * part ? out_len / (size_t)nt : 2 * part;
        j->c = malloc(j->nparts * part);
        j->out = malloc(j->out_len);
        CHECK(!j->c || !j->out, "cold parts");
        for (size_t i = 0; i < j->nparts; i++)
            memcpy(j->c + i * part, c0, part);
        memcpy(j->tag, tag, 16);
        j->seconds = seconds;
        j->cc = cc;
        j->go = &go;
    }
    for (int t = 1; t < nt; t++)
        CHECK(pthread_create(&th[t], NULL, cold_thread, &jobs[t]), "thread");
    cold_thread(&jobs[0]);
    double bytes = jobs[0].bytes;
    for (int t = 1; t < nt; t++) {
        pthread_join(th[t], NULL);
        bytes += jobs[t].bytes;
    }
    for (int t = 0; t < nt; t++) {
        free(jobs[t].c);
        free(jobs[t].out);
    }
    pthread_barrier_destroy(&go);
    free(jobs);
    free(th);
    free(m);
    free(c0);
    EVP_CIPHER_free(cc);
    return bytes;
}

static void on_layers(void *ctx, const seqkv_view *v, size_t ready)
{
    (void)ctx, (void)v, (void)ready;
}

/* The same through streamed views (KV.GET ... LAYERS): their pieces
 * checked against the KV put, off the clock */
static double streamed(seqkv *db, const workload *w, double seconds)
{
    size_t got;
    long n = 0;
    double spent = 0;
    while (spent < seconds) {
        int i = (int)(n % w->nseq);
        seqkv_view *v;
        const double t0 = now_s();
        CHECK(seqkv_get_view(db, "a", "s", w->tok[i], w->T, &(seqkv_get_opts){.want = w->T, .on_ready = on_layers, .ctx = NULL}, &v, &got),
              "streamed get");
        spent += now_s() - t0;
        size_t at = 0, len;
        for (size_t k = 0; k < seqkv_view_pieces(v); k++) {
            const void *p = seqkv_view_piece(v, k, &len);
            if (at + len > w->kv_len || memcmp(p, w->kv[i] + at, len) != 0) {
                fprintf(stderr, "bench_seal: a streamed get gave other bytes\n");
                exit(1);
            }
            at += len;
        }
        seqkv_view_free(v);
        n++;
    }
    return (double)n / spent;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void pct(const char *what, double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += v[i];
    printf("| %s | %.2f | %.2f | %.2f | %.2f | %.2f |\n", what, v[n / 10] * 1e6, v[n / 2] * 1e6,
           v[n * 9 / 10] * 1e6, v[n * 99 / 100] * 1e6, sum / n * 1e6);
}

int main(int argc, char **argv)
{
    double seconds = 2;
    workload w = {.nseq = 32, .T = 512};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--seqs") && i + 1 < argc)
            w.nseq = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc)
            w.T = (size_t)atol(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_seal [--seconds S] [--seqs N] [--tokens T]\n");
            return 2;
        }
    }
    const seqkv_profile p = profile();
    w.kv_len = (size_t)p.layers * 2 * w.T * (size_t)(p.kv_heads * p.head_dim) * 2;
    w.tok = calloc((size_t)w.nseq, sizeof *w.tok);
    w.kv = calloc((size_t)w.nseq, sizeof *w.kv);
    uint64_t s = 42;
    for (int i = 0; i < w.nseq; i++) {
        w.tok[i] = malloc(w.T * 4);
        w.kv[i] = malloc(w.kv_len);
        for (size_t t = 0; t < w.T; t++)
            w.tok[i][t] = (int32_t)(rng(&s) % 512);
        for (size_t b = 0; b < w.kv_len; b += 8) {
            uint64_t r = rng(&s);
            memcpy(w.kv[i] + b, &r, w.kv_len - b < 8 ? w.kv_len - b : 8);
        }
    }
    char tmpl[] = "/tmp/seqkv-bench-seal-XXXXXX", sealed[600], unsealed[600];
    if (!mkdtemp(tmpl))
        return 1;
    snprintf(sealed, sizeof sealed, "%s/sealed", tmpl);
    snprintf(unsealed, sizeof unsealed, "%s/unsealed", tmpl);
    fill(sealed, 0, &w);
    fill(unsealed, 1, &w);
    uint8_t *out = malloc(w.kv_len);
    printf("%d sequences of %zu tokens (%zu KiB of bf16 KV each), raw level, one caller, the "
           "readers' pool on %ld CPUs (as the server), %.1f s per figure\n\n",
           w.nseq, w.T, w.kv_len >> 10, sysconf(_SC_NPROCESSORS_ONLN), seconds);
    printf("| GET | sealed / s | unsealed / s | sealed / unsealed |\n|---|---|---|---|\n");
    /* the two stores in alternating rounds of a tenth of the time, each
     * figure the median of its rounds (shared machines drift within a run) */
    enum { ROUNDS = 15 };
    enum { COLD, HOT, STREAMED };
    for (int row = COLD; row <= STREAMED; row++) {
        seqkv *db[2];
        double r[2][ROUNDS], q[ROUNDS];
        for (int k = 0; k < 2; k++) {
            db[k] = open_db(k ? unsealed : sealed, k, row == HOT ? 1ull << 30 : 0);
            if (row == HOT)
                gets(db[k], &w, 0.2, out); /* into the tier */
        }
        for (int i = 0; i < ROUNDS; i++) {
            for (int k = 0; k < 2; k++)
                r[k][i] = row == STREAMED ? streamed(db[k], &w, seconds / ROUNDS)
                                          : gets(db[k], &w, seconds / ROUNDS, out);
            q[i] = r[0][i] / r[1][i];
        }
        for (int k = 0; k < 2; k++)
            seqkv_close(db[k]);
        qsort(r[0], ROUNDS, sizeof(double), cmp_d);
        qsort(r[1], ROUNDS, sizeof(double), cmp_d);
        qsort(q, ROUNDS, sizeof(double), cmp_d);
        printf("| %s | %.0f | %.0f | %.2f (rounds %.2f-%.2f) |\n",
               row == STREAMED ? "cold, streamed by layer"
               : row == HOT    ? "hot (hot tier)"
                               : "cold (no hot tier)",
               r[0][ROUNDS / 2], r[1][ROUNDS / 2],
               q[ROUNDS / 2], q[0], q[ROUNDS - 1]);
    }
    /* what bounds a cold sealed GET: the cipher's own speed, one thread
     * over a hot part, and every CPU over parts as cold as the store's,
     * in rounds alternating with unsealed cold GETs */
    {
        const size_t part = w.kv_len / ((w.T + 255) / 256) / 8; /* a record's part */
        const int nt = (int)sysconf(_SC_NPROCESSORS_ONLN);
        const size_t total = (size_t)w.nseq * w.kv_len;
        double so, os, cold[ROUNDS], plain[ROUNDS], q[ROUNDS];
        cipher_rates(part, 0.5, &so, &os);
        seqkv *db = open_db(unsealed, 1, 0);
        for (int i = 0; i < ROUNDS; i++) {
            plain[i] = gets(db, &w, seconds / ROUNDS, out) * (double)w.kv_len;
            cold[i] = cold_cipher_rate(part, total, w.kv_len, nt, seconds / ROUNDS);
            q[i] = cold[i] / plain[i];
        }
        seqkv_close(db);
        qsort(cold, ROUNDS, sizeof(double), cmp_d);
        qsort(plain, ROUNDS, sizeof(double), cmp_d);
        qsort(q, ROUNDS, sizeof(double), cmp_d);
        printf("\nThe cipher alone, parts of %zu bytes: one thread over one hot part, libsodium "
               "XChaCha20-Poly1305 %.2f GB/s, OpenSSL ChaCha20-Poly1305 (a sealed raw GET's) "
               "%.2f GB/s; all %d CPUs at once over %zu MiB of parts (as cold as a cold GET's), "
               "OpenSSL %.2f GB/s. An unsealed cold GET moves %.2f GB/s (same rounds): a sealed "
               "cold GET, which must open every byte it returns, can be at most %.2f of it "
               "(rounds %.2f-%.2f), before its checksum and hand-offs.\n",
               part, so / 1e9, os / 1e9, nt, total >> 20, cold[ROUNDS / 2] / 1e9,
               plain[ROUNDS / 2] / 1e9, q[ROUNDS / 2], q[0], q[ROUNDS - 1]);
    }
    /* lookups by tenant b of a's prompts against prompts nobody stored */
    seqkv *db = open_db(sealed, 0, 0);
    CHECK(seqkv_put(db, "b", "s", w.tok[0], 16, w.kv[0], w.kv_len / w.T * 16, NULL, NULL), "put b");
    enum { N = 20000 };
    double *other = malloc(N * sizeof *other), *none = malloc(N * sizeof *none);
    int32_t *fresh = malloc(w.T * 4);
    for (int i = 0; i < 2 * N; i++) {
        const int mine = i & 1;
        const int32_t *q = w.tok[(i / 2) % w.nseq];
        if (!mine) {
            for (size_t t = 0; t < w.T; t++)
                fresh[t] = (int32_t)(rng(&s) % 512);
            q = fresh;
        }
        size_t m;
        const double t0 = now_s();
        CHECK(seqkv_lookup(db, "b", "s", q, w.T, &m), "lookup");
        const double dt = now_s() - t0;
        (mine ? other : none)[i / 2] = dt;
        /* b finds only what it stored itself: a's first prompt's first 16 */
        size_t own = 0;
        while (own < 16 && q[own] == w.tok[0][own])
            own++;
        if (m != own) {
            fprintf(stderr, "bench_seal: tenant b found %zu tokens (its own: %zu)\n", m, own);
            return 1;
        }
    }
    printf("\nKV.LOOKUP by tenant b, %d each, interleaved (microseconds):\n\n", N);
    printf("| prompts | p10 | p50 | p90 | p99 | mean |\n|---|---|---|---|---|---|\n");
    pct("stored by tenant a", other, N);
    pct("stored by nobody", none, N);
    seqkv_close(db);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpl);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_seal: could not remove %s\n", tmpl);
    return 0;
}
