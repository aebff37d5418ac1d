/* The server under load (issue 5, "Must show"): 64 clients, each its own
 * thread and connection, mix KV.PUT, KV.LOOKUP and KV.GET against a live
 * `seqkv serve` for a bounded time, every GET compared bit-exactly with the
 * model's KV; then the same load again, kill -9 of the server in the middle
 * of it, a restart on the same store, and every acknowledged PUT must be
 * there, exact.
 *
 * Sequences come from a seeded random model written to a temporary file
 * (no ../shared needed): 8 prompts, 6 continuations each, so clients share
 * prefixes and race on the same paths. Since KV is causal, the expected KV
 * of any prefix is the model's, whoever stored it.
 *
 * Environment: SEQKV_BIN (the seqkv binary; meson sets it), SEQKV_LOAD_SECONDS
 * (the first phase, default 3). Exit 0 on success, 1 with a message. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "seqkv_client.h"
#include "storeutil.h"
#include "testutil.h"

#define NCLIENTS 64
#define NROOTS 8
#define NCHILD 6
#define NSEQ (NROOTS * NCHILD)

static su_model tm;
static su_seq seqs[NSEQ];
static char sock[4200], dbdir[4200];
static const char *seqkv_bin;

static atomic_int stop_flag, failed;
static atomic_long n_put, n_lookup, n_get, n_get_bytes;

/* Acknowledged PUTs: the longest acknowledged prefix per sequence. */
static pthread_mutex_t ack_mu = PTHREAD_MUTEX_INITIALIZER;
static size_t acked[NSEQ];
static long n_acked;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "test_load: FAIL: " __VA_ARGS__);                                          \
        fputc('\n', stderr);                                                                       \
        atomic_store(&failed, 1);                                                                  \
    } while (0)

static pid_t start_server(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        execl(seqkv_bin, "seqkv", "serve", "--db", dbdir, "--socket", sock, "--threads", "2",
              "--quiet", (char *)NULL);
        fprintf(stderr, "exec %s: %s\n", seqkv_bin, strerror(errno));
        _exit(127);
    }
    for (int i = 0; i < 400; i++) {
        seqkv_client *c;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            FAIL("the server exited at start-up (status %d)", st);
            return -1;
        }
        if (seqkv_client_connect(sock, &c) == 0) {
            int rc = seqkv_client_ping(c);
            seqkv_client_close(c);
            if (rc == 0)
                return pid;
        }
        usleep(25 * 1000);
    }
    FAIL("the server did not answer on %s", sock);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

/* GET of want tokens (0: the longest cached prefix) checked against the
 * model's KV. 0 ok, else the client's code (after FAIL for a mismatch). */
static int get_check(seqkv_client *c, const su_seq *s, size_t want, uint8_t *buf, uint8_t *exp,
                     size_t *got_tokens)
{
    size_t len = 0;
    int rc = seqkv_client_get(c, "load", s->tok, s->n, want, buf, su_kv_len(&tm, s->n), &len);
    if (rc)
        return rc;
    size_t tb = su_kv_len(&tm, 1);
    size_t got = len / tb;
    if (len % tb || got == 0 || got > s->n || (want && got != want)) {
        FAIL("KV.GET of %zu tokens returned %zu bytes (%zu a token)", want, len, tb);
        return 1;
    }
    su_expect(&tm, s, got, exp);
    if (memcmp(buf, exp, len) != 0) {
        FAIL("KV.GET of %zu tokens returned bytes that differ from the model's KV", got);
        return 1;
    }
    atomic_fetch_add(&n_get, 1);
    atomic_fetch_add(&n_get_bytes, (long)len);
    if (got_tokens)
        *got_tokens = got;
    return 0;
}

typedef struct {
    int id;
    int expect_kill; /* the server dies under us: SKV_ERR_IO ends the client */
} client_arg;

static void *client_main(void *arg)
{
    const client_arg *a = arg;
    uint64_t r = 0x9e3779b97f4a7c15ull * (uint64_t)(a->id + 1) + (uint64_t)a->expect_kill;
    size_t maxn = 0;
    for (int i = 0; i < NSEQ; i++)
        maxn = seqs[i].n > maxn ? seqs[i].n : maxn;
    uint8_t *buf = malloc(su_kv_len(&tm, maxn)), *exp = malloc(su_kv_len(&tm, maxn));
    seqkv_client *c = NULL;
    int rc = seqkv_client_connect(sock, &c);
    if (rc) {
        if (!a->expect_kill)
            FAIL("client %d: connect: %s", a->id, seqkv_error_detail());
        goto out;
    }
    while (!atomic_load(&stop_flag) && !atomic_load(&failed)) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        const su_seq *s = &seqs[(r >> 33) % NSEQ];
        size_t n = 1 + (size_t)((r >> 13) % s->n), m = 0;
        int op = (int)((r >> 45) % 10);
        if (op < 4) { /* PUT of a prefix */
            su_expect(&tm, s, n, buf);
            size_t stored = 0;
            rc = seqkv_client_put(c, "load", s->tok, n, buf, su_kv_len(&tm, n), &stored);
            if (rc == 0) {
                atomic_fetch_add(&n_put, 1);
                pthread_mutex_lock(&ack_mu);
                size_t i = (size_t)(s - seqs);
                if (n > acked[i])
                    acked[i] = n;
                n_acked++;
                pthread_mutex_unlock(&ack_mu);
            }
        } else if (op < 7) { /* LOOKUP, then GET what it found */
            rc = seqkv_client_lookup(c, "load", s->tok, n, &m);
            if (rc == 0) {
                atomic_fetch_add(&n_lookup, 1);
                if (m > n) {
                    FAIL("KV.LOOKUP of %zu tokens said %zu", n, m);
                    break;
                }
                if (m)
                    rc = get_check(c, s, m, buf, exp, NULL);
            }
        } else { /* GET of the longest cached prefix */
            rc = get_check(c, s, 0, buf, exp, NULL);
            if (rc == SKV_ERR_NOT_FOUND)
                rc = 0;
        }
        if (rc == SKV_ERR_IO && a->expect_kill)
            break; /* the server was killed */
        if (rc) {
            if (rc != 1)
                FAIL("client %d: op %d of %zu tokens: %s (%s)", a->id, op, n,
                     seqkv_strerror(rc), seqkv_error_detail());
            break;
        }
    }
out:
    seqkv_client_close(c);
    free(buf);
    free(exp);
    return NULL;
}

static int run_clients(double seconds, int expect_kill, pid_t server)
{
    pthread_t th[NCLIENTS];
    client_arg args[NCLIENTS];
    atomic_store(&stop_flag, 0);
    for (int i = 0; i < NCLIENTS; i++) {
        args[i] = (client_arg){i, expect_kill};
        if (pthread_create(&th[i], NULL, client_main, &args[i])) {
            FAIL("pthread_create");
            return 1;
        }
    }
    double t0 = now_s();
    while (now_s() - t0 < seconds && !atomic_load(&failed))
        usleep(20 * 1000);
    if (expect_kill) {
        kill(server, SIGKILL); /* mid-load: requests in flight */
        waitpid(server, NULL, 0);
    }
    atomic_store(&stop_flag, 1);
    for (int i = 0; i < NCLIENTS; i++)
        pthread_join(th[i], NULL);
    return atomic_load(&failed);
}

int main(void)
{
    seqkv_bin = getenv("SEQKV_BIN");
    if (!seqkv_bin || access(seqkv_bin, X_OK) != 0) {
        fprintf(stderr, "test_load: SEQKV_BIN must name the seqkv binary\n");
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    double seconds = getenv("SEQKV_LOAD_SECONDS") ? atof(getenv("SEQKV_LOAD_SECONDS")) : 3.0;
    const char *dir = tu_tmpdir();
    snprintf(sock, sizeof sock, "%s/s.sock", dir);
    snprintf(dbdir, sizeof dbdir, "%s/db", dir);
    su_random_model(&tm, dir, SEQKV_DT_BF16);
    for (int r = 0; r < NROOTS; r++) {
        su_seq root;
        su_seq_make(&tm, NULL, 0, 24 + (size_t)(r * 7) % 40, 1000 + (uint64_t)r, &root);
        for (int k = 0; k < NCHILD; k++)
            su_seq_make(&tm, root.tok, root.n, root.n + 16 + (size_t)((r * 13 + k * 29) % 96),
                        (uint64_t)(r * 100 + k), &seqs[r * NCHILD + k]);
        su_seq_free(&root);
    }
    pid_t pid = start_server();
    if (pid < 0)
        return 1;
    /* the profile, and a calibration so that PUTs are coded (ctx) */
    seqkv_client *c;
    int rc = seqkv_client_connect(sock, &c);
    char L[16], H[16], D[16];
    snprintf(L, sizeof L, "%d", tm.L);
    snprintf(H, sizeof H, "%d", tm.c->n_kv_heads);
    snprintf(D, sizeof D, "%d", tm.c->head_dim);
    const char *kv[] = {"model", tm.path, "dtype", "bf16", "level", "ctx", "chunk", "32"};
    if (!rc)
        rc = seqkv_client_profile_set(c, "load", kv, 4);
    for (int i = 0; i < NSEQ && !rc; i += NCHILD + 1)
        rc = seqkv_client_put(c, "load", seqs[i].tok, seqs[i].n, seqs[i].kv, seqs[i].kv_len, NULL);
    if (!rc)
        rc = seqkv_client_calibrate(c, "load", 0);
    if (rc) {
        fprintf(stderr, "test_load: FAIL: set-up: %s (%s)\n", seqkv_strerror(rc),
                c ? seqkv_error_detail() : seqkv_error_detail());
        kill(pid, SIGKILL);
        return 1;
    }
    seqkv_client_close(c);

    /* 1: load for a bounded time, every GET verified */
    double t0 = now_s();
    if (run_clients(seconds, 0, pid)) {
        kill(pid, SIGKILL);
        return 1;
    }
    double dt = now_s() - t0;
    printf("load: %d clients, %.1f s: %ld PUT, %ld LOOKUP, %ld GET (%.1f MiB, every one "
           "bit-exact) = %.0f requests/s\n",
           NCLIENTS, dt, atomic_load(&n_put), atomic_load(&n_lookup), atomic_load(&n_get),
           (double)atomic_load(&n_get_bytes) / (1 << 20),
           (double)(atomic_load(&n_put) + atomic_load(&n_lookup) + atomic_load(&n_get)) / dt);

    /* 2: load again, kill -9 in the middle of it */
    long puts_before = atomic_load(&n_put);
    if (run_clients(seconds / 2 > 1 ? seconds / 2 : 1, 1, pid))
        return 1;
    printf("kill -9: the server died under %d clients after %ld more acknowledged PUTs\n",
           NCLIENTS, atomic_load(&n_put) - puts_before);

    /* 3: restart on the same store: every acknowledged PUT is there, exact */
    pid = start_server();
    if (pid < 0)
        return 1;
    rc = seqkv_client_connect(sock, &c);
    size_t maxn = 0;
    for (int i = 0; i < NSEQ; i++)
        maxn = seqs[i].n > maxn ? seqs[i].n : maxn;
    uint8_t *buf = malloc(su_kv_len(&tm, maxn)), *exp = malloc(su_kv_len(&tm, maxn));
    int checked = 0;
    for (int i = 0; i < NSEQ && !rc && !atomic_load(&failed); i++) {
        if (!acked[i])
            continue;
        size_t m = 0;
        rc = seqkv_client_lookup(c, "load", seqs[i].tok, acked[i], &m);
        if (!rc && m != acked[i])
            FAIL("after restart: sequence %d: %zu tokens acknowledged, lookup finds %zu", i,
                 acked[i], m);
        if (!rc && !atomic_load(&failed))
            rc = get_check(c, &seqs[i], acked[i], buf, exp, NULL);
        checked++;
    }
    if (rc && rc != 1)
        FAIL("after restart: %s (%s)", seqkv_strerror(rc), c ? seqkv_error_detail() : "");
    if (!atomic_load(&failed))
        printf("restart: %ld acknowledged PUTs, the longest of each of %d sequences present and "
               "bit-exact\n", n_acked, checked);
    if (c)
        seqkv_client_shutdown(c);
    seqkv_client_close(c);
    int st;
    for (int i = 0; i < 200 && waitpid(pid, &st, WNOHANG) != pid; i++)
        usleep(25 * 1000);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    free(buf);
    free(exp);
    for (int i = 0; i < NSEQ; i++)
        su_seq_free(&seqs[i]);
    su_model_free(&tm);
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "test_load: could not remove %s\n", dir);
    return atomic_load(&failed) ? 1 : 0;
}
