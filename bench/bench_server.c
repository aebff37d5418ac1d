/* bench_server: the server's KV.LOOKUP and KV.GET of a 1k-token prefix of
 * stories260K (latency p50/p99 and throughput with 1, 16 and 64 clients,
 * each its own connection and thread), and in the same run redis-server
 * serving the same raw bytes with GET over a Unix socket (no persistence;
 * RESP spoken here, no hiredis). Every reply is checked bit-exact. The
 * reads run twice: with the server's hot tier, then with the server
 * restarted with --cache-bytes 0 (cold: every GET decodes); KV.GET ...
 * LAYERS rows time the first layer's arrival. Then
 * KV.PUT of new sequences with group commit (--put-batch 64) against a
 * commit per put (--put-batch 1), each on a fresh store, same clients;
 * every put must report its tokens new (but for a few leading ones another
 * random sequence may share) and each client's last put is looked up
 * whole.
 *
 * usage: bench_server [--model PATH] [--seqkv PATH] [--seconds S]
 *                     [--tokens N] [--threads N]
 * Model: --model, $SEQKV_MODEL, else ../shared/models/stories260K.bin next
 * to the source tree (absent: a message and exit 0). redis-server absent:
 * the redis rows are skipped with a message. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "seqkv_client.h"
#include "skv_model.h"

#ifndef SEQKV_BIN_PATH
#define SEQKV_BIN_PATH "seqkv"
#endif
#ifndef SEQKV_SOURCE_DIR
#define SEQKV_SOURCE_DIR "."
#endif

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* the servers spawn() started and stop() has not stopped: die() kills
 * them, so a failed run leaves nothing listening */
static pid_t children[16];

static void die(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "bench_server: ");
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
    for (size_t i = 0; i < sizeof children / sizeof children[0]; i++)
        if (children[i] > 0)
            kill(children[i], SIGKILL);
    exit(1);
}

static void child_track(pid_t pid, int on)
{
    for (size_t i = 0; i < sizeof children / sizeof children[0]; i++)
        if (on ? children[i] <= 0 : children[i] == pid) {
            children[i] = on ? pid : 0;
            return;
        }
}

/* ------------------------------------------------------------------------
 * A minimal RESP client for redis-server (blocking, one reply at a time)
 * ---------------------------------------------------------------------- */
typedef struct {
    int fd;
    uint8_t *buf;
    size_t len, pos, cap;
} rconn;

static int unix_connect(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

static int r_send(rconn *c, int argc, const void *const *argv, const size_t *argl)
{
    char hdr[64];
    int n = snprintf(hdr, sizeof hdr, "*%d\r\n", argc);
    if (write(c->fd, hdr, (size_t)n) != n)
        return -1;
    for (int i = 0; i < argc; i++) {
        n = snprintf(hdr, sizeof hdr, "$%zu\r\n", argl[i]);
        if (write(c->fd, hdr, (size_t)n) != n)
            return -1;
        size_t off = 0;
        while (off < argl[i]) {
            ssize_t w = write(c->fd, (const uint8_t *)argv[i] + off, argl[i] - off);
            if (w <= 0)
                return -1;
            off += (size_t)w;
        }
        if (write(c->fd, "\r\n", 2) != 2)
            return -1;
    }
    return 0;
}

static int r_fill(rconn *c, size_t need)
{
    if (c->pos > 0 && c->pos == c->len)
        c->pos = c->len = 0;
    while (c->len - c->pos < need) {
        if (c->pos + need > c->cap) {
            if (c->pos) {
                memmove(c->buf, c->buf + c->pos, c->len - c->pos);
                c->len -= c->pos;
                c->pos = 0;
            }
            if (need > c->cap) {
                uint8_t *b = realloc(c->buf, need + 65536);
                if (!b)
                    return -1;
                c->buf = b;
                c->cap = need + 65536;
            }
        }
        ssize_t r = read(c->fd, c->buf + c->len, c->cap - c->len);
        if (r <= 0)
            return -1;
        c->len += (size_t)r;
    }
    return 0;
}

/* One reply: its first line's type and integer; for a bulk, *data points
 * at its bytes (valid until the next call). */
static int r_reply(rconn *c, char *type, long long *num, const uint8_t **data)
{
    for (size_t scan = 0;; scan = c->len - c->pos) {
        if (r_fill(c, scan + 1))
            return -1;
        uint8_t *nl = memchr(c->buf + c->pos, '\n', c->len - c->pos);
        if (!nl)
            continue;
        *type = (char)c->buf[c->pos];
        *num = strtoll((const char *)c->buf + c->pos + 1, NULL, 10);
        c->pos = (size_t)(nl - c->buf) + 1;
        break;
    }
    if (*type == '$' && *num >= 0) {
        if (r_fill(c, (size_t)*num + 2))
            return -1;
        *data = c->buf + c->pos;
        c->pos += (size_t)*num + 2;
    }
    return 0;
}

/* ------------------------------------------------------------------------
 * Client threads
 * ---------------------------------------------------------------------- */
typedef enum { OP_LOOKUP, OP_GET, OP_RGET, OP_REXISTS, OP_PUT, OP_LAYERS } op_kind;

typedef struct {
    op_kind op;
    const char *path, *profile;
    const int32_t *tok;
    size_t n;
    const uint8_t *kv;
    size_t kv_len;
    double seconds;
    atomic_int go, bad;
    int vocab; /* OP_PUT: tokens drawn from [1, vocab) */
} bench_cfg;

typedef struct {
    bench_cfg *cfg;
    double *lat;
    size_t nlat, cap;
    char err[256];
} bench_thr;

static void *thr_main(void *arg)
{
    bench_thr *t = arg;
    bench_cfg *g = t->cfg;
    seqkv_client *sc = NULL;
    rconn rc = {.fd = -1};
    uint8_t *buf = malloc(g->kv_len);
    int redis = g->op == OP_RGET || g->op == OP_REXISTS || g->op == OP_LAYERS;
    if (redis) {
        rc.fd = unix_connect(g->path);
        if (rc.fd < 0)
            snprintf(t->err, sizeof t->err, "connect %s: %s", g->path, strerror(errno));
    } else if (seqkv_client_connect(g->path, &sc)) {
        snprintf(t->err, sizeof t->err, "connect %s", g->path);
    }
    while (!atomic_load(&g->go))
        usleep(1000);
    double end = now_s() + g->seconds;
    int32_t *ptok = g->op == OP_PUT ? malloc(g->n * sizeof *ptok) : NULL;
    /* a seed no other client of this run had: a client's address may be
     * an earlier row's client's, whose sequences are stored by now */
    static atomic_ulong clients_seeded;
    uint64_t seed = (uint64_t)(atomic_fetch_add(&clients_seeded, 1) + 1) * 0x9e3779b97f4a7c15ull,
             puts = 0;
    while (!t->err[0] && now_s() < end) {
        if (ptok) /* a sequence nobody stored: random tokens */
            for (size_t i = 0; i < g->n; i++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                ptok[i] = 1 + (int32_t)((seed >> 33) % (uint64_t)(g->vocab - 1));
            }
        double t0 = now_s(), t_first = -1;
        int ok = 0;
        if (g->op == OP_PUT) {
            size_t stored = 0;
            /* new but for a few leading tokens another put may share */
            ok = seqkv_client_put(sc, g->profile, ptok, g->n, g->kv, g->kv_len, &stored) == 0 &&
                 stored + 8 > g->n && stored <= g->n;
            puts++;
        } else if (g->op == OP_LOOKUP) {
            size_t m = 0;
            ok = seqkv_client_lookup(sc, g->profile, g->tok, g->n, &m) == 0 && m == g->n;
        } else if (g->op == OP_GET) {
            size_t len = 0;
            ok = seqkv_client_get(sc, g->profile, g->tok, g->n, g->n, buf, g->kv_len, &len) == 0 &&
                 len == g->kv_len && memcmp(buf, g->kv, len) == 0;
        } else if (g->op == OP_LAYERS) {
            /* KV.GET ... LAYERS spoken here: the time is the first layer's */
            const void *argv[4] = {"KV.GET", g->profile, g->tok, "LAYERS"};
            size_t argl[4] = {6, strlen(g->profile), g->n * 4, 6};
            char type;
            long long num;
            const uint8_t *data = NULL;
            ok = r_send(&rc, 4, argv, argl) == 0 && r_reply(&rc, &type, &num, &data) == 0 &&
                 type == '*' && num > 0;
            const long long L = ok ? num : 0;
            const size_t slab = L ? g->kv_len / (size_t)L : 0;
            for (long long l = 0; ok && l < L; l++) {
                ok = r_reply(&rc, &type, &num, &data) == 0 && type == '$' && (size_t)num == slab &&
                     memcmp(data, g->kv + (size_t)l * slab, slab) == 0;
                if (l == 0)
                    t_first = now_s() - t0;
            }
        } else {
            const char *cmd = g->op == OP_RGET ? "GET" : "EXISTS";
            const void *argv[2] = {cmd, "kv1k"};
            size_t argl[2] = {strlen(cmd), 4};
            char type;
            long long num;
            const uint8_t *data = NULL;
            ok = r_send(&rc, 2, argv, argl) == 0 && r_reply(&rc, &type, &num, &data) == 0;
            if (g->op == OP_RGET)
                ok = ok && type == '$' && (size_t)num == g->kv_len &&
                     memcmp(data, g->kv, g->kv_len) == 0;
            else
                ok = ok && type == ':' && num == 1;
        }
        double dt = t_first >= 0 ? t_first : now_s() - t0;
        if (!ok) {
            snprintf(t->err, sizeof t->err, "a request failed or returned other bytes (%s)",
                     sc ? seqkv_error_detail() : "redis");
            atomic_store(&g->bad, 1);
            break;
        }
        if (t->nlat == t->cap) {
            t->cap = t->cap ? 2 * t->cap : 4096;
            t->lat = realloc(t->lat, t->cap * sizeof *t->lat);
        }
        t->lat[t->nlat++] = dt;
    }
    if (ptok && puts && !t->err[0]) {
        /* the last put is there, whole */
        size_t m = 0;
        if (seqkv_client_lookup(sc, g->profile, ptok, g->n, &m) || m != g->n)
            snprintf(t->err, sizeof t->err, "an acknowledged put is not cached (%zu of %zu)", m, g->n);
    }
    free(ptok);
    seqkv_client_close(sc);
    if (rc.fd >= 0)
        close(rc.fd);
    free(rc.buf);
    free(buf);
    return NULL;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    double p50, p99, ops;
} result;

static result run(bench_cfg *g, int clients)
{
    pthread_t th[64];
    bench_thr *t = calloc((size_t)clients, sizeof *t);
    atomic_store(&g->go, 0);
    atomic_store(&g->bad, 0);
    for (int i = 0; i < clients; i++) {
        t[i].cfg = g;
        pthread_create(&th[i], NULL, thr_main, &t[i]);
    }
    usleep(100 * 1000);
    double t0 = now_s();
    atomic_store(&g->go, 1);
    for (int i = 0; i < clients; i++)
        pthread_join(th[i], NULL);
    double wall = now_s() - t0;
    size_t n = 0;
    for (int i = 0; i < clients; i++) {
        if (t[i].err[0])
            die("client failed: %s%s", t[i].err, "");
        n += t[i].nlat;
    }
    double *all = malloc((n + 1) * sizeof *all);
    size_t k = 0;
    for (int i = 0; i < clients; i++) {
        memcpy(all + k, t[i].lat, t[i].nlat * sizeof *all);
        k += t[i].nlat;
        free(t[i].lat);
    }
    qsort(all, n, sizeof *all, cmp_d);
    result r = {n ? all[n / 2] : 0, n ? all[(size_t)(0.99 * (double)(n - 1))] : 0,
                (double)n / wall};
    free(all);
    free(t);
    return r;
}

/* ------------------------------------------------------------------------
 * Servers
 * ---------------------------------------------------------------------- */
static pid_t spawn(char *const argv[], const char *sock)
{
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) {
            dup2(fd, 1);
            close(fd);
        }
        execvp(argv[0], argv);
        fprintf(stderr, "bench_server: exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    if (pid > 0)
        child_track(pid, 1);
    for (int i = 0; i < 400; i++) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            child_track(pid, 0);
            return -1;
        }
        int fd = unix_connect(sock);
        if (fd >= 0) {
            close(fd);
            return pid;
        }
        usleep(25 * 1000);
    }
    child_track(pid, 0);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

static void stop(pid_t pid)
{
    child_track(pid, 0);
    kill(pid, SIGTERM);
    for (int i = 0; i < 200; i++) {
        if (waitpid(pid, NULL, WNOHANG) == pid)
            return;
        usleep(25 * 1000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static int in_path(const char *prog)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", prog);
    return system(cmd) == 0;
}

/* The KV of tokens in the store layout [layer][k, v][token][C], bf16. */
static uint8_t *store_kv(const skv_model *m, const int32_t *tok, size_t n, size_t *len)
{
    const skv_model_config *c = skv_model_cfg(m);
    size_t row = (size_t)c->n_kv_heads * (size_t)c->head_dim * 2, L = (size_t)c->n_layers;
    uint8_t *k = malloc(L * n * row), *v = malloc(L * n * row), *out = malloc(2 * L * n * row);
    skv_kvcache *kc = NULL;
    skv_forward_opts o = {0};
    if (skv_kvcache_create(c, n, &kc) || skv_model_forward(m, kc, tok, n, &o) ||
        skv_kvcache_export(kc, 0, n, SEQKV_DT_BF16, k, v))
        die("model forward failed: %s%s", seqkv_error_detail(), "");
    skv_kvcache_free(kc);
    uint8_t *p = out;
    for (size_t l = 0; l < L; l++) {
        memcpy(p, k + l * n * row, n * row);
        p += n * row;
        memcpy(p, v + l * n * row, n * row);
        p += n * row;
    }
    free(k);
    free(v);
    *len = 2 * L * n * row;
    return out;
}

/* ------------------------------------------------------------------------
 * The benchmark
 * ---------------------------------------------------------------------- */

/* The clients at once of each row */
static const int counts[3] = {1, 16, 64};

/* What every part of the benchmark shares: the options, the model, the
 * prefix and its KV, the scratch directory, the servers' sockets. */
typedef struct {
    const char *model, *seqkv;
    double seconds;
    long ntok, threads;
    skv_model *m;
    const skv_model_config *c;
    skv_rng r;
    int32_t *tok, bos;
    uint8_t *kv;
    size_t kv_len;
    char dir[32], sock[128], db[128], rsock[128], th[24], mpath[4096];
    const char *praw[6], *pctx[6];
    pid_t rpid;
    char rver[64];
} bench_env;

/* The options into e; 0, or 2 after the usage line */
static int parse_args(int argc, char **argv, bench_env *e)
{
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--model") == 0)
            e->model = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--seqkv") == 0)
            e->seqkv = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--seconds") == 0)
            e->seconds = atof(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--tokens") == 0)
            e->ntok = atol(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--threads") == 0)
            e->threads = atol(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_server [--model PATH] [--seqkv PATH] [--seconds S] "
                            "[--tokens N] [--threads N]\n");
            return 2;
        }
    }
    return 0;
}

/* The model loaded and an ntok-token prefix sampled from it, with its KV */
static void make_prefix(bench_env *e)
{
    if (skv_model_load(e->model, &e->m))
        die("%s: %s", e->model, seqkv_error_detail());
    e->c = skv_model_cfg(e->m);
    e->tok = malloc((size_t)e->ntok * sizeof *e->tok);
    e->bos = e->c->bos_id;
    skv_rng_seed(&e->r, 7);
    if (skv_model_generate(e->m, NULL, &e->bos, 1, (size_t)e->ntok, 1.0f, 0.9f, &e->r, e->tok))
        die("generate: %s%s", seqkv_error_detail(), "");
    e->kv = store_kv(e->m, e->tok, (size_t)e->ntok, &e->kv_len);
}

/* seqkv serve started on e->sock, the profiles raw and ctx set, the
 * prefix put in both (ctx calibrated first on 8 other sampled sequences);
 * the admin connection into *adm, the server's pid returned */
static pid_t start_seqkv(bench_env *e, seqkv_client **adm, const char *cache)
{
    snprintf(e->sock, sizeof e->sock, "%s/seqkv.sock", e->dir);
    snprintf(e->db, sizeof e->db, "%s/db", e->dir);
    snprintf(e->rsock, sizeof e->rsock, "%s/redis.sock", e->dir);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(e->th, sizeof e->th, "%ld", e->threads > 0 ? e->threads : cpus < 1 ? 1 : cpus > 8 ? 8 : cpus);
    char *sargv[] = {(char *)e->seqkv, "serve", "--db", e->db, "--socket", e->sock, "--threads", e->th,
                     "--quiet", cache ? "--cache-bytes" : NULL, (char *)cache, NULL};
    pid_t spid = spawn(sargv, e->sock);
    if (spid < 0)
        die("could not start %s serve%s", e->seqkv, "");
    if (cache) { /* a restart on the store the first start set up */
        if (seqkv_client_connect(e->sock, adm))
            die("connect %s%s", e->sock, "");
        return spid;
    }
    if (!realpath(e->model, e->mpath))
        die("realpath %s%s", e->model, "");
    const char *praw[] = {"model", e->mpath, "dtype", "bf16", "level", "raw"};
    const char *pctx[] = {"model", e->mpath, "dtype", "bf16", "level", "ctx"};
    const char *pfast[] = {"model", e->mpath, "dtype", "bf16", "level", "fast"};
    memcpy(e->praw, praw, sizeof praw);
    memcpy(e->pctx, pctx, sizeof pctx);
    if (seqkv_client_connect(e->sock, adm) || seqkv_client_profile_set(*adm, "raw", e->praw, 3) ||
        seqkv_client_profile_set(*adm, "ctx", e->pctx, 3) ||
        seqkv_client_put(*adm, "raw", e->tok, (size_t)e->ntok, e->kv, e->kv_len, NULL) ||
        seqkv_client_profile_set(*adm, "fast", pfast, 3) ||
        seqkv_client_put(*adm, "fast", e->tok, (size_t)e->ntok, e->kv, e->kv_len, NULL))
        die("set-up: %s%s", *adm ? seqkv_error_detail() : "connect", "");
    /* ctx: calibrate on 8 other sampled sequences, then store the prefix */
    fprintf(stderr, "bench_server: calibrating the ctx profile...\n");
    for (int i = 0; i < 8; i++) {
        int32_t t2[256];
        size_t l2;
        if (skv_model_generate(e->m, NULL, &e->bos, 1, 256, 1.0f, 0.9f, &e->r, t2))
            die("generate%s%s", "", "");
        uint8_t *k2 = store_kv(e->m, t2, 256, &l2);
        if (seqkv_client_put(*adm, "ctx", t2, 256, k2, l2, NULL))
            die("put: %s%s", seqkv_error_detail(), "");
        free(k2);
    }
    if (seqkv_client_calibrate(*adm, "ctx", 0) ||
        seqkv_client_put(*adm, "ctx", e->tok, (size_t)e->ntok, e->kv, e->kv_len, NULL))
        die("calibrate/put ctx: %s%s", seqkv_error_detail(), "");
    return spid;
}

/* redis-server started on e->rsock (when installed) holding the prefix's
 * KV under kv1k: e->rpid (-1 without it) and e->rver */
static void start_redis(bench_env *e)
{
    e->rpid = -1;
    e->rver[0] = 0;
    if (!in_path("redis-server")) {
        printf("bench_server: redis-server not found (Debian: apt-get install redis-server): "
               "the redis rows are skipped\n");
        return;
    }
    char *rargv[] = {"redis-server", "--port", "0", "--unixsocket", e->rsock, "--save", "",
                     "--appendonly", "no", "--dir", e->dir, NULL};
    e->rpid = spawn(rargv, e->rsock);
    char *rver = e->rver;
    FILE *p = popen("redis-server --version", "r");
    if (p) {
        if (fgets(rver, sizeof e->rver, p)) {
            char *v = strstr(rver, "v=");
            memmove(rver, v ? v + 2 : rver, strlen(v ? v + 2 : rver) + 1);
            rver[strcspn(rver, " \n")] = 0;
        }
        pclose(p);
    }
    rconn rc = {.fd = unix_connect(e->rsock)};
    const void *av[3] = {"SET", "kv1k", e->kv};
    size_t al[3] = {3, 4, e->kv_len};
    char type;
    long long num;
    const uint8_t *data;
    if (e->rpid < 0 || rc.fd < 0 || r_send(&rc, 3, av, al) || r_reply(&rc, &type, &num, &data) ||
        type != '+')
        die("redis-server SET failed%s%s", "", "");
    close(rc.fd);
    free(rc.buf);
}

/* The read rows for each count of clients. Hot pass (the server's hot
 * tier on, the prefix served from memory): KV.LOOKUP, KV.GET at raw and
 * ctx, the first layer of KV.GET ... LAYERS, redis GET and EXISTS, with
 * their ratios; the redis rows are kept in red[ci] ({GET, EXISTS}) for the
 * cold pass (the server restarted with --cache-bytes 0: every GET reads
 * and decodes the records), which prints GET raw/ctx and the first layer
 * again. */
static void bench_reads(const bench_env *e, int cold, result red[3][2])
{
    if (!cold)
        printf("bench_server: %ld-token prefix of %s, bf16 KV = %zu bytes; seqkv serve (%s worker "
               "threads)%s%s; %.1f s per row, every reply checked bit-exact\n",
               e->ntok, e->model, e->kv_len, e->th, e->rpid > 0 ? " vs redis-server " : "", e->rver,
               e->seconds);
    printf("\n%s\n", cold ? "cold: seqkv serve --cache-bytes 0 (every GET reads, verifies and decodes)"
                          : "hot: seqkv serve with its hot tier (default size; the prefix in memory)");
    printf("%-28s %7s %10s %10s %11s %10s\n", "command", "clients", "p50 us", "p99 us", "ops/s",
           "MB/s");
    struct {
        const char *name;
        op_kind op;
        const char *prof;
        int redis, in_cold;
    } rows[] = {
        {"seqkv KV.LOOKUP", OP_LOOKUP, "raw", 0, 0},
        {"seqkv KV.GET (raw)", OP_GET, "raw", 0, 1},
        {"seqkv KV.GET (ctx)", OP_GET, "ctx", 0, 1},
        {"seqkv KV.GET (fast)", OP_GET, "fast", 0, 1},
        {"KV.GET LAYERS 1st layer (raw)", OP_LAYERS, "raw", 0, 1},
        {"KV.GET LAYERS 1st layer (ctx)", OP_LAYERS, "ctx", 0, 1},
        {"KV.GET LAYERS 1st layer(fast)", OP_LAYERS, "fast", 0, 1},
        {"redis GET", OP_RGET, NULL, 1, 0},
        {"redis EXISTS", OP_REXISTS, NULL, 1, 0},
    };
    enum { NR = sizeof rows / sizeof rows[0] };
    for (int ci = 0; ci < 3; ci++) {
        int nc = counts[ci];
        result res[NR];
        memset(res, 0, sizeof res);
        for (int ri = 0; ri < NR; ri++) {
            if ((rows[ri].redis && e->rpid <= 0) || (cold && !rows[ri].in_cold))
                continue;
            bench_cfg g = {.op = rows[ri].op, .path = rows[ri].redis ? e->rsock : e->sock,
                           .profile = rows[ri].prof, .tok = e->tok, .n = (size_t)e->ntok, .kv = e->kv,
                           .kv_len = e->kv_len, .seconds = e->seconds};
            res[ri] = run(&g, nc);
            int get = rows[ri].op == OP_GET || rows[ri].op == OP_RGET || rows[ri].op == OP_LAYERS;
            printf("%-28s %7d %10.1f %10.1f %11.0f %10.1f\n", rows[ri].name, nc, 1e6 * res[ri].p50,
                   1e6 * res[ri].p99, res[ri].ops,
                   get ? res[ri].ops * (double)e->kv_len / 1e6 : 0.0);
            fflush(stdout);
        }
        if (!cold) {
            red[ci][0] = res[7];
            red[ci][1] = res[8];
        }
        printf("  %-26s %7d first layer / whole GET, p50: raw %.2f, ctx %.2f, fast %.2f\n",
               "KV.GET LAYERS", nc, res[4].p50 / res[1].p50, res[5].p50 / res[2].p50,
               res[6].p50 / res[3].p50);
        if (e->rpid <= 0)
            continue;
        const result *rg = &red[ci][0];
        if (!cold)
            printf("  %-26s %7d hot GET raw/redis GET: throughput %.2fx, p50 %.2fx, p99 %.2fx; "
                   "ctx: throughput %.2fx, p99 %.2fx; fast: throughput %.2fx; LOOKUP/EXISTS: p50 "
                   "%.2fx, throughput %.2fx\n",
                   "seqkv vs redis", nc, res[1].ops / rg->ops, res[1].p50 / rg->p50,
                   res[1].p99 / rg->p99, res[2].ops / rg->ops, res[2].p99 / rg->p99,
                   res[3].ops / rg->ops,
                   res[0].p50 / red[ci][1].p50, res[0].ops / red[ci][1].ops);
        else
            printf("  %-26s %7d cold GET raw/redis GET: throughput %.2fx, p50 %.2fx; ctx: "
                   "throughput %.2fx, p50 %.2fx; fast: throughput %.2fx, p50 %.2fx\n",
                   "seqkv vs redis", nc, res[1].ops / rg->ops, res[1].p50 / rg->p50,
                   res[2].ops / rg->ops, res[2].p50 / rg->p50, res[3].ops / rg->ops,
                   res[3].p50 / rg->p50);
    }
}

/* The puts a commit took over a run: from the store's INFO before and after */
static double puts_per_commit(const char *before, const char *after)
{
    double per = 0;
    const char *x = after ? strstr(after, "put_commits:") : NULL;
    const char *y = before ? strstr(before, "put_commits:") : NULL;
    const char *xp = after ? strstr(after, "puts_per_commit:") : NULL;
    const char *yp = before ? strstr(before, "puts_per_commit:") : NULL;
    if (x && y && xp && yp) {
        double c1 = atof(x + 12), c0 = atof(y + 12);
        double p1 = atof(xp + 16) * c1, p0 = atof(yp + 16) * c0;
        per = c1 > c0 ? (p1 - p0) / (c1 - c0) : 0;
    }
    return per;
}

/* KV.PUT rows of one server on a fresh store with --put-batch pb: pn-token
 * new sequences of pkv bytes, for each count of clients, into pr[0..3) */
static void bench_put_server(const bench_env *e, const char *pb, size_t pn, size_t pkv, result *pr)
{
    char pdb[160], psock[160];
    snprintf(pdb, sizeof pdb, "%s/db-put%s", e->dir, pb);
    snprintf(psock, sizeof psock, "%s/put%s.sock", e->dir, pb);
    char *pargv[] = {(char *)e->seqkv, "serve", "--db", pdb, "--socket", psock, "--threads", (char *)e->th,
                     "--put-batch", (char *)pb, "--quiet", NULL};
    pid_t ppid = spawn(pargv, psock);
    seqkv_client *pa = NULL;
    if (ppid < 0 || seqkv_client_connect(psock, &pa) ||
        seqkv_client_profile_set(pa, "raw", e->praw, 3))
        die("put server set-up: %s%s", pa ? seqkv_error_detail() : "start/connect", "");
    for (int ci = 0; ci < 3; ci++) {
        char *before = NULL, *after = NULL;
        seqkv_client_info(pa, "store", &before);
        bench_cfg g = {.op = OP_PUT, .path = psock, .profile = "raw", .n = pn, .kv = e->kv,
                       .kv_len = pkv, .seconds = e->seconds, .vocab = e->c->vocab_size};
        pr[ci] = run(&g, counts[ci]);
        seqkv_client_info(pa, "store", &after);
        double per = puts_per_commit(before, after);
        seqkv_client_free(before);
        seqkv_client_free(after);
        char name[40];
        snprintf(name, sizeof name, "seqkv --put-batch %s", pb);
        printf("%-22s %7d %10.1f %10.1f %11.0f %10.1f %8.1f\n", name, counts[ci],
               1e6 * pr[ci].p50, 1e6 * pr[ci].p99, pr[ci].ops,
               pr[ci].ops * (double)pkv / 1e6, per);
        fflush(stdout);
    }
    seqkv_client_shutdown(pa);
    seqkv_client_close(pa);
    stop(ppid);
}

/* KV.PUT: group commit against a commit per put, each on a fresh
 * store; every put a new sequence (random tokens; raw level, so the
 * cost is the write and its fsync) */
static void bench_puts(const bench_env *e)
{
    const size_t pn = 128;
    const size_t pkv = e->kv_len / (size_t)e->ntok * pn;
    if ((size_t)e->ntok < pn)
        return;
    printf("\nKV.PUT of %zu-token new sequences (raw, %zu bytes each), durable (fsync) commits:\n",
           pn, pkv);
    printf("%-22s %7s %10s %10s %11s %10s %8s\n", "server", "clients", "p50 us", "p99 us",
           "puts/s", "MB/s", "puts/commit");
    result pr[2][3];
    static const char *const pbs[2] = {"1", "64"};
    for (int bi = 0; bi < 2; bi++)
        bench_put_server(e, pbs[bi], pn, pkv, pr[bi]);
    for (int ci = 0; ci < 3; ci++)
        printf("%-22s %7d   group commit vs a commit per put: throughput %.2fx, p50 %.2fx\n",
               "  batched vs single", counts[ci], pr[1][ci].ops / pr[0][ci].ops,
               pr[1][ci].p50 / pr[0][ci].p50);
}

int main(int argc, char **argv)
{
    static bench_env e = {.seqkv = SEQKV_BIN_PATH, .seconds = 1.0, .ntok = 1024, .threads = 0};
    e.model = getenv("SEQKV_MODEL");
    int r = parse_args(argc, argv, &e);
    if (r)
        return r;
    if (!e.model || !*e.model)
        e.model = SEQKV_SOURCE_DIR "/../shared/models/stories260K.bin";
    if (access(e.model, R_OK) != 0) {
        printf("bench_server: skipped: no model at %s (set SEQKV_MODEL or --model)\n", e.model);
        return 0;
    }
    if (e.seconds <= 0 || e.ntok < 1 || e.ntok > 65536)
        die("bad --seconds or --tokens%s%s", "", "");
    signal(SIGPIPE, SIG_IGN);
    make_prefix(&e);

    snprintf(e.dir, sizeof e.dir, "%s", "/tmp/seqkv-bench-srv-XXXXXX");
    if (!mkdtemp(e.dir))
        die("mkdtemp: %s%s", strerror(errno), "");
    seqkv_client *adm = NULL;
    pid_t spid = start_seqkv(&e, &adm, NULL);
    start_redis(&e);
    static result red[3][2];
    bench_reads(&e, 0, red);
    seqkv_client_shutdown(adm);
    seqkv_client_close(adm);
    stop(spid);
    spid = start_seqkv(&e, &adm, "0");
    bench_reads(&e, 1, red);
    seqkv_client_shutdown(adm);
    seqkv_client_close(adm);
    stop(spid);

    bench_puts(&e);
    if (e.rpid > 0)
        stop(e.rpid);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", e.dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_server: could not remove %s\n", e.dir);
    free(e.tok);
    free(e.kv);
    skv_model_free(e.m);
    return 0;
}
