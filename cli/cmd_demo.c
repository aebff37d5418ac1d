/* seqkv demo: the main job end to end. A server (this binary's `serve`,
 * forked and exec'd) on a temporary socket and store; a multi-tenant chat
 * workload made with the model (the generator of `bench store`) driven
 * through the C client, one connection per tenant, in two phases around
 * KV.CALIBRATE; every GET checked bit-exact against the model's KV; a
 * summary table, and bits per scalar by layer and level as a PNG chart. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "demo.h"
#include "seqkv_client.h"
#include "skv_delta.h"
#include "skv_lossy.h"


#ifndef SEQKV_SOURCE_DIR
#define SEQKV_SOURCE_DIR "."
#endif

static const char demo_usage[] =
    "usage: seqkv demo [--model PATH] [--tenants N] [--sessions N] [--turns N]\n"
    "                  [--level stat|ctx|spec|full|q4|q3|q2] [--chunk N] [--seed S] [--threads N]\n"
    "                  [--out DIR] [--no-replay] [--synthetic] [--keep]\n"
    "\n"
    "Starts `seqkv serve` on a temporary Unix socket and LMDB directory and\n"
    "drives a multi-tenant chat workload made with the model through the C\n"
    "client (one connection and thread per tenant): per tenant a system prompt\n"
    "of 64-256 sampled tokens, sessions of --turns turns each extending the\n"
    "previous prompt by 24-72 tokens, every fourth session a near-duplicate of\n"
    "an earlier one (one early token differs). Each request is KV.LOOKUP, a\n"
    "KV.GET of the cached prefix, KV.PUT of the whole prompt and a KV.GET of\n"
    "it; every GET is compared bit-exactly with the model's KV. The profile\n"
    "(at --level) calibrates itself in the server's background once it holds\n"
    "1024 tokens, during phase 1 (the first turns; phase 2, the rest, waits\n"
    "for it), and KV.COMPACT codes what it stored raw before. The summary:\n"
    "when the profile calibrated itself, tokens stored, raw\n"
    "vs stored bytes, ratio by level, dedup and centroid savings (the latter\n"
    "by replaying the workload in-process without the probabilistic trie;\n"
    "--no-replay skips it), hit rate, GET latency against recomputing the same\n"
    "prefixes with the model; and DIR/demo_bits.png (gnuplot): bits per scalar\n"
    "by layer and level, coded with skv_delta on the workload's sessions.\n"
    "--level q4, q3 or q2 instead prints the opt-in lossy tier's table: the level\n"
    "against baselines at the same coded bits, measured on the model.\n"
    "\n"
    "  --model PATH   default: $SEQKV_MODEL, else ../shared/models/stories260K.bin\n"
    "                 (source tree, then cwd), else a seeded synthetic model\n"
    "  --tenants N    default 4      --sessions N  per tenant, default 8\n"
    "  --turns N      default 3      --level L     default ctx\n"
    "  --chunk N      tokens per chunk record, default 256\n"
    "  --threads N    server workers and prefill threads (default: CPUs, max 8)\n"
    "  --out DIR      where the table and chart go (default demo-out)\n"
    "  --synthetic    the seeded synthetic model even when a real one exists\n"
    "  --no-replay    skip the replay that measures the centroid savings\n"
    "  --keep         keep the temporary store, socket directory and server log\n";


typedef struct {
    demo *d;
    int tenant;
    int phase;
    int rc;
    char err[512];
} dworker;

/* ------------------------------------------------------------------------
 * The model: given, found, or a seeded synthetic one.
 * ---------------------------------------------------------------------- */
static float synth_weight(skv_rng *r, float scale)
{
    float x = skv_rng_normal(r) * scale;
    if (x < 1.0f / 1024.0f && x > -1.0f / 1024.0f)
        x = 0.0f;
    return skv_bf16_to_f32(skv_f32_to_bf16(x));
}

/* A llama2.c checkpoint of stories260K's shape with seeded random weights
 * (the layout tests/randmodel.c writes). */
static int write_synthetic(const char *path, uint64_t seed)
{
    const size_t d = 64, hid = 172, L = 5, heads = 8, kvh = 4, V = 512, ms = 512;
    const size_t hd = d / heads, kv = kvh * hd;
    size_t seg[13] = {V * d, L * d, L * d * d, L * kv * d, L * kv * d, L * d * d, L * d,
                      L * hid * d, L * d * hid, L * hid * d, d, ms * hd, 0};
    const int norm[13] = {0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0};
    FILE *f = fopen(path, "wb");
    if (!f)
        return skv_error(SKV_ERR_IO, "%s: %s", path, strerror(errno));
    int32_t h[7] = {(int32_t)d, (int32_t)hid, (int32_t)L, (int32_t)heads, (int32_t)kvh,
                    (int32_t)V, (int32_t)ms};
    uint8_t b[4];
    int ok = 1;
    for (int i = 0; i < 7; i++) {
        skv_store32_le(b, (uint32_t)h[i]);
        ok &= fwrite(b, 4, 1, f) == 1;
    }
    skv_rng r;
    skv_rng_seed(&r, seed);
    for (int sg = 0; sg < 13 && ok; sg++)
        for (size_t i = 0; i < seg[sg] && ok; i++) {
            float x = norm[sg] ? 1.0f + synth_weight(&r, 0.1f) : synth_weight(&r, sg == 0 ? 0.5f : 0.25f);
            if (sg == 11)
                x = 0.0f;
            skv_store32_le(b, skv_f32_bits(x));
            ok &= fwrite(b, 4, 1, f) == 1;
        }
    ok &= fclose(f) == 0;
    return ok ? SKV_OK : skv_error(SKV_ERR_IO, "%s: write failed", path);
}

static int find_model(demo *d)
{
    const char *cand[3] = {d->a.model_arg ? d->a.model_arg : getenv("SEQKV_MODEL"), NULL, NULL};
    if (d->a.synthetic)
        cand[0] = cand[1] = cand[2] = "";
    if (cand[0] && *cand[0]) {
        if (!realpath(cand[0], d->model))
            return skv_error(SKV_ERR_IO, "model %s: %s", cand[0], strerror(errno));
        return SKV_OK;
    }
    cand[1] = SEQKV_SOURCE_DIR "/../shared/models/stories260K.bin";
    cand[2] = "../shared/models/stories260K.bin";
    for (int i = 1; i < 3 && !d->a.synthetic; i++)
        if (access(cand[i], R_OK) == 0 && realpath(cand[i], d->model))
            return SKV_OK;
    snprintf(d->model, sizeof d->model, "%s/synthetic-model.bin", d->dir);
    d->synthetic = 1;
    fprintf(stderr, "%s",
            d->a.synthetic ? "demo: WARNING: --synthetic:\n"
                           : "demo: WARNING: no model found ($SEQKV_MODEL unset, no "
                             "../shared/models/stories260K.bin):\n");
    fprintf(stderr,
            "demo: WARNING: using a seeded SYNTHETIC random model of stories260K's shape. Its KV\n"
            "demo: WARNING: is far less predictable than a trained model's; the ratios below are\n"
            "demo: WARNING: not representative. Set SEQKV_MODEL to a llama2.c .bin or HF directory.\n");
    return write_synthetic(d->model, (uint64_t)d->a.seed + 77);
}

/* ------------------------------------------------------------------------
 * The workload (the generator of `seqkv bench store`)
 * ---------------------------------------------------------------------- */
void demo_layout(const demo *d, const cli_session *s, size_t n, uint8_t *out)
{
    cli_session_layout(s, d->L, d->row, n, out);
}

static int make_workload(demo *d)
{
    return cli_workload_make(d->m, d->pool, d->a.tenants, d->a.sessions, d->a.turns, d->a.seed,
                             "demo: workload sessions (sampled, KV computed)", &d->S, &d->ns);
}

/* ------------------------------------------------------------------------
 * The server
 * ---------------------------------------------------------------------- */
static pid_t start_server(demo *d)
{
    char db[PATH_MAX + 8], cfg[PATH_MAX + 16], log[PATH_MAX + 16], th[16];
    snprintf(db, sizeof db, "%s/db", d->dir);
    snprintf(cfg, sizeof cfg, "%s/server.conf", d->dir);
    snprintf(log, sizeof log, "%s/server.log", d->dir);
    snprintf(th, sizeof th, "%ld", d->a.threads);
    FILE *f = fopen(cfg, "w");
    if (!f)
        return -1;
    fchmod(fileno(f), 0600);
    fprintf(f, "# written by seqkv demo\ntenant demo-admin uid %u\ntenant demo-admin admin\n",
            (unsigned)getuid());
    for (long t = 0; t < d->a.tenants; t++) {
        uint8_t rnd[16];
        randombytes_buf(rnd, sizeof rnd);
        sodium_bin2hex(d->tokens[t], sizeof d->tokens[t], rnd, sizeof rnd);
        fprintf(f, "tenant tenant%ld token %s\n", t, d->tokens[t]);
    }
    if (fclose(f))
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
        dup2(fd, 2);
        dup2(fd, 1);
        close(fd);
    }
    execl("/proc/self/exe", "seqkv", "serve", "--db", db, "--socket", d->sock, "--config", cfg,
          "--threads", th, (char *)NULL);
    fprintf(stderr, "exec /proc/self/exe: %s\n", strerror(errno));
    _exit(127);
}

static void server_log_tail(const demo *d)
{
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "tail -n 20 '%s/server.log' >&2", d->dir);
    fprintf(stderr, "demo: the server's log:\n");
    if (system(cmd) != 0)
        fprintf(stderr, "demo: (no log)\n");
}

static int wait_server(demo *d, pid_t pid, seqkv_client **out)
{
    for (int i = 0; i < 300; i++) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid)
            return skv_error(SKV_ERR_IO, "the server exited during start-up (status %d)",
                             WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st));
        seqkv_client *c;
        if (access(d->sock, F_OK) == 0 && seqkv_client_connect(d->sock, &c) == 0) {
            if (seqkv_client_ping(c) == 0) {
                *out = c;
                return SKV_OK;
            }
            seqkv_client_close(c);
        }
        usleep(50 * 1000);
    }
    return skv_error(SKV_ERR_IO, "the server did not answer on %s within 15 s", d->sock);
}

static void stop_server(pid_t pid, seqkv_client *admin)
{
    if (admin)
        seqkv_client_shutdown(admin);
    for (int i = 0; i < 100; i++) {
        if (waitpid(pid, NULL, WNOHANG) == pid)
            return;
        if (i == 60)
            kill(pid, SIGTERM);
        usleep(50 * 1000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* ------------------------------------------------------------------------
 * The tenants' clients
 * ---------------------------------------------------------------------- */
static int record_get(demo *d, double s, size_t n, size_t sess)
{
    pthread_mutex_lock(&d->mu);
    if (d->ngets == d->gcap) {
        size_t cap = d->gcap ? 2 * d->gcap : 1024;
        dget *g = realloc(d->gets, cap * sizeof *g);
        if (!g) {
            pthread_mutex_unlock(&d->mu);
            return skv_error(SKV_ERR_NOMEM, "latencies");
        }
        d->gets = g;
        d->gcap = cap;
    }
    d->gets[d->ngets++] = (dget){s, (uint32_t)n, (uint32_t)sess};
    d->verified++;
    pthread_mutex_unlock(&d->mu);
    return SKV_OK;
}

/* GET of the first n tokens, timed, and compared with the model's KV. */
static int checked_get(demo *d, dworker *w, seqkv_client *c, size_t si, const uint8_t *want,
                       size_t n, uint8_t *buf)
{
    const cli_session *s = &d->S[si];
    size_t len = 0, bytes = n * d->per_tok;
    double t0 = cli_now();
    int rc = seqkv_client_get(c, "demo", s->tok, n, n, buf, bytes, &len);
    double t = cli_now() - t0;
    if (rc) {
        snprintf(w->err, sizeof w->err, "KV.GET of %zu tokens: %s (%s)", n,
                 seqkv_strerror(rc), seqkv_error_detail());
        return rc;
    }
    if (len != bytes || memcmp(buf, want, bytes) != 0) {
        snprintf(w->err, sizeof w->err,
                 "KV.GET of %zu tokens (tenant %d, session %zu) returned %zu bytes that differ "
                 "from the model's KV", n, s->tenant, si, len);
        return SKV_ERR_CORRUPT;
    }
    return record_get(d, t, n, si);
}

/* Phase 1 (while the profile has no calibration): the first turns of the original
 * sessions; phase 2: the rest, so near-duplicates arrive once the profile
 * codes and can be coded against their centroid. */
int demo_phase_of(const cli_session *s, long turn)
{
    return turn == 0 && !s->dup ? 0 : 1;
}

static void *worker_main(void *arg)
{
    dworker *w = arg;
    demo *d = w->d;
    seqkv_client *c = NULL;
    size_t maxn = 0;
    for (size_t i = 0; i < d->ns; i++)
        maxn = d->S[i].n > maxn ? d->S[i].n : maxn;
    uint8_t *kv = malloc(maxn * d->per_tok), *got = malloc(maxn * d->per_tok);
    char tn[32];
    snprintf(tn, sizeof tn, "tenant%d", w->tenant);
    int rc = kv && got ? seqkv_client_connect(d->sock, &c) : SKV_ERR_NOMEM;
    if (!rc && (rc = seqkv_client_auth(c, tn, d->tokens[w->tenant])))
        snprintf(w->err, sizeof w->err, "AUTH %s: %s", tn, seqkv_error_detail());
    else if (rc)
        snprintf(w->err, sizeof w->err, "connect: %s", seqkv_error_detail());
    for (long k = 0; k < d->a.turns && !rc; k++)
        for (long j = 0; j < d->a.sessions && !rc; j++) {
            const size_t si = (size_t)(w->tenant * d->a.sessions + j);
            const cli_session *s = &d->S[si];
            if (demo_phase_of(s, k) != w->phase)
                continue;
            const size_t n = s->turn_end[k];
            size_t m = 0, stored = 0;
            demo_layout(d, s, n, kv);
            if ((rc = seqkv_client_lookup(c, "demo", s->tok, n, &m))) {
                snprintf(w->err, sizeof w->err, "KV.LOOKUP: %s (%s)", seqkv_strerror(rc),
                         seqkv_error_detail());
                break;
            }
            if (m > 0) {
                /* what a frontend does on a hit: fetch the cached prefix */
                demo_layout(d, s, m, kv);
                rc = checked_get(d, w, c, si, kv, m, got);
                demo_layout(d, s, n, kv);
                if (rc)
                    break;
            }
            if ((rc = seqkv_client_put(c, "demo", s->tok, n, kv, n * d->per_tok, &stored))) {
                snprintf(w->err, sizeof w->err, "KV.PUT of %zu tokens: %s (%s)", n,
                         seqkv_strerror(rc), seqkv_error_detail());
                break;
            }
            rc = checked_get(d, w, c, si, kv, n, got);
            pthread_mutex_lock(&d->mu);
            d->lookups++;
            d->lookup_hits += m > 0;
            d->req_tokens += n;
            d->hit_tokens += m;
            d->put_bytes += n * d->per_tok;
            pthread_mutex_unlock(&d->mu);
            atomic_fetch_add(&d->done, 1);
        }
    seqkv_client_close(c);
    free(kv);
    free(got);
    w->rc = rc;
    atomic_fetch_add(&d->finished, 1);
    return NULL;
}

static int run_phase(demo *d, const char *what, int phase)
{
    size_t total = 0;
    for (size_t i = 0; i < d->ns; i++)
        for (long k = 0; k < d->a.turns; k++)
            total += demo_phase_of(&d->S[i], k) == phase;
    d->phase_req[phase] = total;
    dworker *W = calloc((size_t)d->a.tenants, sizeof *W);
    pthread_t *T = calloc((size_t)d->a.tenants, sizeof *T);
    if (!W || !T) {
        free(W);
        free(T);
        return skv_error(SKV_ERR_NOMEM, "workers");
    }
    atomic_store(&d->done, 0);
    atomic_store(&d->finished, 0);
    long started = 0;
    for (long t = 0; t < d->a.tenants; t++) {
        W[t] = (dworker){.d = d, .tenant = (int)t, .phase = phase};
        if (pthread_create(&T[t], NULL, worker_main, &W[t]))
            break;
        started++;
    }
    size_t last = (size_t)-1;
    for (;;) {
        size_t done = atomic_load(&d->done);
        if (done != last) {
            cli_progress(what, done, total);
            last = done;
        }
        if (atomic_load(&d->finished) == started)
            break;
        usleep(100 * 1000);
    }
    for (long t = 0; t < started; t++)
        pthread_join(T[t], NULL);
    cli_progress(what, atomic_load(&d->done), total);
    int rc = started == d->a.tenants ? SKV_OK : skv_error(SKV_ERR_IO, "pthread_create");
    for (long t = 0; t < started && !rc; t++)
        if (W[t].rc) {
            rc = W[t].rc;
            skv_error(rc, "tenant%ld: %s", t, W[t].err);
        }
    free(W);
    free(T);
    return rc;
}


/* ------------------------------------------------------------------------
 * The command
 * ---------------------------------------------------------------------- */
enum { D_MODEL = 5000, D_TEN, D_SES, D_TURNS, D_LEVEL, D_CHUNK, D_SEED, D_THREADS, D_OUT,
       D_KEEP, D_NOREPLAY, D_SYNTH, D_HELP };

static int dparse(int argc, char **argv, dargs *a)
{
    static const struct option o[] = {
        {"model", required_argument, NULL, D_MODEL},   {"tenants", required_argument, NULL, D_TEN},
        {"sessions", required_argument, NULL, D_SES},  {"turns", required_argument, NULL, D_TURNS},
        {"level", required_argument, NULL, D_LEVEL},   {"chunk", required_argument, NULL, D_CHUNK},
        {"seed", required_argument, NULL, D_SEED},     {"threads", required_argument, NULL, D_THREADS},
        {"out", required_argument, NULL, D_OUT},       {"keep", no_argument, NULL, D_KEEP},
        {"no-replay", no_argument, NULL, D_NOREPLAY},  {"help", no_argument, NULL, D_HELP},
        {"synthetic", no_argument, NULL, D_SYNTH},
        {NULL, 0, NULL, 0},
    };
    memset(a, 0, sizeof *a);
    a->tenants = 4;
    a->sessions = 8;
    a->turns = 3;
    a->chunk = SEQKV_CHUNK_DEFAULT;
    a->seed = 1;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    a->threads = cpus < 1 ? 1 : cpus > 8 ? 8 : cpus;
    a->level = SEQKV_CTX;
    a->out = "demo-out";
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", o, NULL)) != -1) {
        long *num = NULL, lo = 1, hi = 1 << 20;
        switch (c) {
        case 'h':
        case D_HELP: fputs(demo_usage, stdout); exit(0);
        case '?': return cli_usage_error("demo", "unknown option '%s'", argv[optind - 1]);
        case ':': return cli_usage_error("demo", "option '%s' needs a value", argv[optind - 1]);
        case D_MODEL: a->model_arg = optarg; break;
        case D_OUT: a->out = optarg; break;
        case D_KEEP: a->keep = 1; break;
        case D_NOREPLAY: a->no_replay = 1; break;
        case D_SYNTH: a->synthetic = 1; break;
        case D_LEVEL:
            if (optarg[0] == 'q' && (a->lossy = skv_lossy_level_parse(optarg)))
                break;
            if (seqkv_level_parse(optarg, &a->level) || a->level == SEQKV_RAW)
                return cli_usage_error("demo", "--level wants stat, ctx, spec, full, or q4, q3, q2 (lossy)");
            break;
        case D_TEN: num = &a->tenants, hi = 64; break;
        case D_SES: num = &a->sessions, hi = 4096; break;
        case D_TURNS: num = &a->turns, lo = 2, hi = 16; break;
        case D_CHUNK: num = &a->chunk, hi = SEQKV_CHUNK_MAX; break;
        case D_SEED: num = &a->seed, lo = 0, hi = 1L << 40; break;
        case D_THREADS: num = &a->threads, hi = 256; break;
        }
        if (num && cli_parse_long(optarg, lo, hi, num))
            return cli_usage_error("demo", "'%s' wants an integer in [%ld, %ld]", argv[optind - 2],
                                   lo, hi);
    }
    if (optind < argc)
        return cli_usage_error("demo", "unexpected argument '%s'", argv[optind]);
    return 0;
}

static void mib(char *out, size_t cap, uint64_t b)
{
    if (b >= (1u << 20))
        snprintf(out, cap, "%.2f MiB", (double)b / (1 << 20));
    else
        snprintf(out, cap, "%.1f KiB", (double)b / 1024);
}

/* Print to stdout and to the table file. */
static void out2(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out2(FILE *f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    if (f) {
        va_start(ap, fmt);
        vfprintf(f, fmt, ap);
        va_end(ap);
    }
}

/* The model (and the pool), the header lines, the workload and its KV;
 * 0 or the exit status. */
static int demo_setup(demo *d)
{
    int rc;
    if ((rc = find_model(d)))
        return cli_fail(rc, "demo: model");
    if ((rc = skv_model_load(d->model, &d->m)))
        return cli_fail(rc, d->model);
    if (d->a.threads > 1 && (rc = skv_pool_create(&d->pool, (int)d->a.threads)))
        return cli_fail(rc, "threads");
    d->mc = skv_model_cfg(d->m);
    d->L = (size_t)d->mc->n_layers;
    d->row = (size_t)d->mc->n_kv_heads * (size_t)d->mc->head_dim * 2;
    d->per_tok = d->L * 2 * d->row;
    if (d->L > 64)
        return cli_fail(skv_error(SKV_ERR_UNSUPPORTED, "more than 64 layers"), "demo");
    printf("== seqkv demo\nmodel     %s%s: %zu layers, %d kv heads x %d, bf16 KV = %zu bytes/token\n",
           d->model, d->synthetic ? " (SYNTHETIC, seeded random weights)" : "", d->L,
           d->mc->n_kv_heads, d->mc->head_dim, d->per_tok);
    printf("workload  %ld tenants x %ld sessions x %ld turns = %ld requests (system prompts of "
           "64-256 tokens, turns +24..72 tokens, every 4th session a one-token near-duplicate)\n",
           d->a.tenants, d->a.sessions, d->a.turns, d->a.tenants * d->a.sessions * d->a.turns);
    fflush(stdout);
    double t0 = cli_now();
    if ((rc = make_workload(d)))
        return cli_fail(rc, "demo: workload");
    fprintf(stderr, "demo: workload sampled and its KV computed in %.1f s\n", cli_now() - t0);
    return 0;
}

/* The profile "demo" set on the server and checked against the model */
static int demo_profile(demo *d, seqkv_client *admin)
{
    char chunk[16];
    snprintf(chunk, sizeof chunk, "%ld", d->a.chunk);
    const char *kvs[] = {"model", d->model, "dtype", "bf16", "level",
                         seqkv_level_name(d->a.level), "chunk", chunk, "auto-calibrate",
                         DEMO_AUTOCAL};
    seqkv_profile prof = SEQKV_PROFILE_INIT;
    int rc = seqkv_client_profile_set(admin, "demo", kvs, 5);
    if (!rc)
        rc = seqkv_client_profile_get(admin, "demo", &prof);
    if (!rc && seqkv_profile_token_bytes(&prof) != d->per_tok)
        rc = skv_error(SKV_ERR_SHAPE, "the server's profile has %zu bytes a token, the model %zu",
                       seqkv_profile_token_bytes(&prof), d->per_tok);
    return rc;
}

/* Phases 1 and 2 (the profile calibrating itself in the background once it
 * holds DEMO_AUTOCAL tokens), KV.COMPACT (coding what it stored before)
 * and the store's INFO into *info1 (NULL on an error before it). */
static int demo_phases(demo *d, seqkv_client *admin, char **info1)
{
    double t0 = cli_now(), t_p[2];
    int rc = SKV_OK, cal_in = 0;
    for (int ph = 0; ph < 2 && !rc; ph++) {
        t0 = cli_now();
        rc = run_phase(d, ph ? "demo: phase 2 requests" : "demo: phase 1 requests", ph);
        t_p[ph] = cli_now() - t0;
        if (!rc)
            printf("phase %d   %s: %zu requests in %.1f s\n", ph + 1,
                   ph ? "near-duplicates and later turns" : "first turns of the original sessions",
                   d->phase_req[ph], t_p[ph]);
        /* when phase 1 stored DEMO_AUTOCAL tokens, phase 2 waits for the
         * calibration the server is learning meanwhile */
        char *is = NULL;
        const int wait = !rc && !ph && seqkv_client_info(admin, "store", &is) == 0 &&
                         demo_info_u64(is, "tokens") >= (uint64_t)atoi(DEMO_AUTOCAL);
        seqkv_client_free(is);
        for (t0 = cli_now(); wait && !demo_self_calibrated(admin) && cli_now() - t0 < 60;)
            usleep(50000);
        if (!rc && !cal_in && demo_self_calibrated(admin)) {
            cal_in = ph + 1;
            printf("calibrate the profile calibrated itself in the background once it held %s "
                   "tokens: ready %.1f s after phase %d\n", DEMO_AUTOCAL, cli_now() - t0, ph + 1);
        }
        fflush(stdout);
    }
    seqkv_reply *r = NULL;
    const void *argv[] = {"KV.COMPACT", "demo"};
    size_t argl[] = {10, 4};
    t0 = cli_now();
    if (!rc && (rc = seqkv_client_command(admin, 2, argv, argl, &r)) == 0 &&
        (r->type != SEQKV_REPLY_ARRAY || r->elements != 16))
        rc = skv_error(SKV_ERR_FORMAT, "KV.COMPACT: %s", r->type == SEQKV_REPLY_ERROR ? r->str : "?");
    if (!rc) {
        snprintf(d->cal_note, sizeof d->cal_note, "%s (the server re-coded what it had stored "
                 "raw); KV.COMPACT at the end re-coded or merged %lld records (%lld -> %lld bytes)", !cal_in ? "not in the background: at "
                 "KV.COMPACT" : cal_in == 1 ? "at " DEMO_AUTOCAL " tokens, during phase 1, in the "
                 "server's background" : "during phase 2, in the server's background",
                 r->element[5]->integer, r->element[9]->integer, r->element[11]->integer);
        printf("compact   KV.COMPACT in %.1f s: %s\n", cli_now() - t0, d->cal_note);
        fflush(stdout);
        rc = seqkv_client_info(admin, "store", info1);
        if (rc)
            skv_error(rc, "INFO store: %s", seqkv_error_detail());
        char *ic = NULL;
        if (!rc && seqkv_client_info(admin, "cache", &ic) == 0) {
            d->tier_hits = demo_info_u64(ic, "cache_hits");
            d->tier_misses = demo_info_u64(ic, "cache_misses");
        }
        seqkv_client_free(ic);
    }
    seqkv_reply_free(r);
    return rc;
}

/* The server started on the store, the profile and the phases run, and
 * the server stopped; *info1 the store's INFO (the caller frees it). 0 or
 * the exit status. */
static int demo_serve(demo *d, char **info1)
{
    int rc;
    snprintf(d->sock, sizeof d->sock, "%s/seqkv.sock", d->dir);
    pid_t pid = start_server(d);
    if (pid < 0)
        return cli_fail(skv_error(SKV_ERR_IO, "fork/config: %s", strerror(errno)), "demo: server");
    seqkv_client *admin = NULL;
    if ((rc = wait_server(d, pid, &admin))) {
        cli_fail(rc, "demo: server");
        server_log_tail(d);
        stop_server(pid, NULL);
        return 1;
    }
    printf("server    seqkv serve, pid %ld, socket %s, %ld worker threads, store %s/db\n",
           (long)pid, d->sock, d->a.threads, d->dir);
    fflush(stdout);
    rc = demo_profile(d, admin);
    if (!rc)
        rc = demo_phases(d, admin, info1);
    if (rc) {
        cli_fail(rc, "demo");
        server_log_tail(d);
        stop_server(pid, admin);
        seqkv_client_close(admin);
        seqkv_client_free(*info1);
        *info1 = NULL;
        return 1;
    }
    stop_server(pid, admin);
    seqkv_client_close(admin);
    return 0;
}

/* What the demo measures once the server has stopped: the GETs' latencies
 * (sorted), prefills of a sample of their prefixes and each one's ratio
 * to its GET (sorted), the workload replayed without the probabilistic
 * trie, and the bits per scalar by layer and level. */
typedef struct {
    double *gl, *pl, *ratio;
    double *hot_ratio, *cold_ratio; /* recompute over an in-process GET, hot and cold */
    size_t np;
    uint64_t get_tok;
    seqkv_stats alone;
    int replayed;
    double bits[SEQKV_LEVELS][65];
    int have[SEQKV_LEVELS];
} demo_figures;

static void figures_free(demo_figures *f)
{
    free(f->gl);
    free(f->pl);
    free(f->ratio);
    free(f->hot_ratio);
    free(f->cold_ratio);
}

static int demo_measure(demo *d, demo_figures *f)
{
    int rc = 0;
    double t0;
    /* recompute the same prefixes with the model */
    double *gl = malloc((d->ngets + 1) * sizeof *gl), *pl = malloc((d->ngets + 1) * sizeof *pl),
           *ratio = malloc((d->ngets + 1) * sizeof *ratio);
    size_t step = d->ngets > 2000 ? d->ngets / 2000 : 1, np = 0;
    uint32_t *sess = malloc((d->ngets + 1) * sizeof *sess), *len = malloc((d->ngets + 1) * sizeof *len);
    uint64_t get_tok = 0;
    for (size_t i = 0; i < d->ngets && !rc; i++) {
        gl[i] = d->gets[i].s;
        get_tok += d->gets[i].n;
        if (i % step)
            continue;
        rc = demo_time_prefill(d, &d->S[d->gets[i].sess], d->gets[i].n, &pl[np]);
        ratio[np] = pl[np] / (d->gets[i].s > 0 ? d->gets[i].s : 1e-9);
        sess[np] = d->gets[i].sess;
        len[np] = d->gets[i].n;
        np++;
        cli_progress("demo: recomputing the same prefixes", i + 1, d->ngets);
    }
    /* the same prefixes fetched in process, cold (no tier) and hot */
    char dbdir[PATH_MAX + 16], key[PATH_MAX + 32];
    snprintf(dbdir, sizeof dbdir, "%s/db", d->dir);
    snprintf(key, sizeof key, "%s/db/master.key", d->dir);
    f->hot_ratio = malloc((np + 1) * sizeof(double));
    f->cold_ratio = malloc((np + 1) * sizeof(double));
    if (!rc)
        rc = demo_tier_times(dbdir, key, d->S, sess, len, np, f->cold_ratio, f->hot_ratio);
    for (size_t k = 0; !rc && k < np; k++) {
        f->hot_ratio[k] = pl[k] / (f->hot_ratio[k] > 0 ? f->hot_ratio[k] : 1e-9);
        f->cold_ratio[k] = pl[k] / (f->cold_ratio[k] > 0 ? f->cold_ratio[k] : 1e-9);
    }
    free(sess);
    free(len);
    if (!rc) {
        qsort(f->hot_ratio, np, sizeof(double), demo_cmp_double);
        qsort(f->cold_ratio, np, sizeof(double), demo_cmp_double);
    }
    qsort(gl, d->ngets, sizeof *gl, demo_cmp_double);
    qsort(pl, np, sizeof *pl, demo_cmp_double);
    qsort(ratio, np, sizeof *ratio, demo_cmp_double);
    f->gl = gl;
    f->pl = pl;
    f->ratio = ratio;
    f->np = np;
    f->get_tok = get_tok;

    memset(&f->alone, 0, sizeof f->alone);
    f->replayed = 0;
    if (!rc && !d->a.no_replay) {
        t0 = cli_now();
        rc = demo_replay_alone(d, &f->alone);
        f->replayed = rc == 0;
        fprintf(stderr, "demo: replay without the probabilistic trie in %.1f s\n", cli_now() - t0);
    }
    memset(f->have, 0, sizeof f->have);
    memset(f->bits, 0, sizeof f->bits);
    if (!rc) {
        t0 = cli_now();
        rc = demo_layer_bits(d, f->bits, f->have);
        fprintf(stderr, "demo: per-layer coding of the sessions in %.1f s\n", cli_now() - t0);
    }
    return rc;
}

/* The results' store half: requests, tokens and bytes stored, each
 * level's ratio, the dedup and centroid savings, to stdout and tf. */
static void report_store(const demo *d, FILE *tf, const char *info1, const demo_figures *f)
{
    const uint64_t tokens = demo_info_u64(info1, "tokens"), raw = demo_info_u64(info1, "raw_bytes"),
                   stored = demo_info_u64(info1, "stored_bytes"), chunks = demo_info_u64(info1, "chunks"),
                   cchunks = demo_info_u64(info1, "centroid_chunks");
    const uint64_t req_raw = d->req_tokens * d->per_tok;
    char b1[32], b2[32];
    out2(tf, "\n== results (%s%s, profile level %s, chunk %ld)\n", d->model,
         d->synthetic ? ", SYNTHETIC" : "", seqkv_level_name(d->a.level), d->a.chunk);
    out2(tf, "%-34s %zu requests, %llu GETs, every one bit-exact against the model's KV\n",
         "requests", (size_t)(d->a.tenants * d->a.sessions * d->a.turns),
         (unsigned long long)d->verified);
    mib(b1, sizeof b1, req_raw);
    out2(tf, "%-34s %llu tokens (%s as raw bf16 per request)\n", "request tokens",
         (unsigned long long)d->req_tokens, b1);
    out2(tf, "%-34s %s\n", "self-calibration", d->cal_note);
    out2(tf, "%-34s %llu unique tokens in %llu chunk records\n", "tokens stored",
         (unsigned long long)tokens, (unsigned long long)chunks);
    mib(b1, sizeof b1, raw);
    mib(b2, sizeof b2, stored);
    out2(tf, "%-34s %s raw -> %s stored: %.2fx (%.2f bits/scalar)\n", "bytes (stored tokens)", b1, b2,
         stored ? (double)raw / (double)stored : 0.0,
         raw ? 16.0 * (double)stored / (double)raw : 0.0);
    out2(tf, "%-34s %.2fx (raw bf16 per request / bytes stored)\n", "overall vs raw per request",
         stored ? (double)req_raw / (double)stored : 0.0);
    for (int l = 0; l < SEQKV_LEVELS; l++) {
        uint64_t lv[3];
        demo_info_level(info1, seqkv_level_name((seqkv_level)l), lv);
        if (!lv[0])
            continue;
        mib(b1, sizeof b1, lv[1]);
        mib(b2, sizeof b2, lv[2]);
        char name[48];
        snprintf(name, sizeof name, "  level %s", seqkv_level_name((seqkv_level)l));
        out2(tf, "%-34s %llu coded tokens: %s -> %s, %.2fx (%.2f bits/scalar)\n", name,
             (unsigned long long)lv[0], b1, b2, lv[2] ? (double)lv[1] / (double)lv[2] : 0.0,
             lv[1] ? 16.0 * (double)lv[2] / (double)lv[1] : 0.0);
    }
    mib(b1, sizeof b1, req_raw > raw ? req_raw - raw : 0);
    out2(tf, "%-34s %s not stored again (%.1f%% of the request bytes): shared system prompts and "
             "earlier turns\n", "dedup savings (exact prefix trie)", b1,
         req_raw ? 100.0 * (double)(req_raw - raw) / (double)req_raw : 0.0);
    if (f->replayed) {
        mib(b1, sizeof b1, f->alone.stored_bytes);
        int64_t saved = (int64_t)f->alone.stored_bytes - (int64_t)stored;
        mib(b2, sizeof b2, (uint64_t)(saved < 0 ? -saved : saved));
        out2(tf, "%-34s %llu records coded against a centroid; the same workload without the\n"
                 "%-34s probabilistic trie stores %s: %s%s (%+.1f%%)\n",
             "centroid savings (prob. trie)", (unsigned long long)cchunks, "", b1,
             saved < 0 ? "costs " : "saves ", b2,
             f->alone.stored_bytes ? -100.0 * (double)saved / (double)f->alone.stored_bytes : 0.0);
    } else {
        out2(tf, "%-34s %llu records coded against a centroid (savings not measured: --no-replay)\n",
             "centroid savings (prob. trie)", (unsigned long long)cchunks);
    }
}

/* The results' speed half: hit rate, GET and recompute latencies, and the
 * bits per scalar by layer and level, to stdout and tf. */
static void report_speed(const demo *d, FILE *tf, const demo_figures *f)
{
    const double *gl = f->gl, *pl = f->pl, *ratio = f->ratio;
    const size_t np = f->np;
    out2(tf, "%-34s %llu of %llu lookups hit (%.1f%%); %.1f%% of request tokens were cached\n",
         "hit rate", (unsigned long long)d->lookup_hits, (unsigned long long)d->lookups,
         d->lookups ? 100.0 * (double)d->lookup_hits / (double)d->lookups : 0.0,
         d->req_tokens ? 100.0 * (double)d->hit_tokens / (double)d->req_tokens : 0.0);
    out2(tf, "%-34s p50 %.3f ms, p99 %.3f ms (%zu GETs, %.0f tokens each on average, %ld "
             "clients at once)\n", "KV.GET over the socket", 1e3 * demo_pct(gl, d->ngets, 0.5),
         1e3 * demo_pct(gl, d->ngets, 0.99), d->ngets, d->ngets ? (double)f->get_tok / (double)d->ngets : 0.0,
         d->a.tenants);
    out2(tf, "%-34s p50 %.3f ms, p99 %.3f ms (%zu prefills of the same prefixes, %ld threads)\n",
         "recompute with the model", 1e3 * demo_pct(pl, np, 0.5), 1e3 * demo_pct(pl, np, 0.99), np,
         d->a.threads);
    out2(tf, "%-34s %.2fx faster at the median (p1 %.2fx, p99 %.2fx)\n", "KV.GET vs recompute",
         demo_pct(ratio, np, 0.5), demo_pct(ratio, np, 0.01), demo_pct(ratio, np, 0.99));
    out2(tf, "%-34s %llu of %llu chunk lookups served from memory (%.1f%%)\n", "hot tier",
         (unsigned long long)d->tier_hits, (unsigned long long)(d->tier_hits + d->tier_misses),
         d->tier_hits + d->tier_misses
             ? 100.0 * (double)d->tier_hits / (double)(d->tier_hits + d->tier_misses) : 0.0);
    out2(tf, "%-34s hot %.1fx, cold %.1fx faster at the median (in process, same prefixes)\n",
         "GET vs recompute, hot and cold", f->hot_ratio ? demo_pct(f->hot_ratio, np, 0.5) : 0.0,
         f->cold_ratio ? demo_pct(f->cold_ratio, np, 0.5) : 0.0);
    out2(tf, "\nbits per scalar by layer and level (skv_delta on up to %zu original sessions' whole prompts, "
             "calibrated on their first turns; raw bf16 = 16)\n%-8s", d->ns < 16 ? d->ns : (size_t)16, "layer");
    for (int lv = SEQKV_STAT; lv < SEQKV_LEVELS; lv++)
        if (f->have[lv])
            out2(tf, " %7s", seqkv_level_name((seqkv_level)lv));
    out2(tf, "\n");
    for (size_t l = 0; l <= d->L; l++) {
        char name[16];
        snprintf(name, sizeof name, l == d->L ? "all" : "%zu", l);
        out2(tf, "%-8s", name);
        for (int lv = SEQKV_STAT; lv < SEQKV_LEVELS; lv++)
            if (f->have[lv])
                out2(tf, " %7.3f", f->bits[lv][l]);
        out2(tf, "\n");
    }
}

static int demo_run(demo *d)
{
    double t_start = cli_now();
    int r = demo_setup(d);
    if (r || d->a.lossy) /* --level q4|q3|q2: the lossy tier's table alone */
        return r ? r : demo_lossy(d->m, d->pool, d->a.lossy, d->a.seed, d->a.out);
    char *info1 = NULL;
    if ((r = demo_serve(d, &info1)))
        return r;
    demo_figures f;
    int rc = demo_measure(d, &f);
    if (rc) {
        figures_free(&f);
        seqkv_client_free(info1);
        return cli_fail(rc, "demo");
    }

    mkdir(d->a.out, 0755);
    char png[3 * PATH_MAX], tpath[PATH_MAX + 32];
    demo_write_chart(d, f.bits, f.have, png, sizeof png);
    snprintf(tpath, sizeof tpath, "%s/demo_table.txt", d->a.out);
    FILE *tf = fopen(tpath, "w");
    report_store(d, tf, info1, &f);
    report_speed(d, tf, &f);
    out2(tf, "chart: %s\n", png);
    if (tf)
        fclose(tf);
    printf("table: %s; total %.1f s\n", tpath, cli_now() - t_start);
    figures_free(&f);
    seqkv_client_free(info1);
    return 0;
}

int cmd_demo(int argc, char **argv)
{
    demo *d = calloc(1, sizeof *d);
    if (!d)
        return cli_fail(SKV_ERR_NOMEM, "demo");
    int r = dparse(argc, argv, &d->a);
    if (r) {
        free(d);
        return r;
    }
    if (sodium_init() < 0) {
        free(d);
        return cli_fail(SKV_ERR_IO, "libsodium");
    }
    signal(SIGPIPE, SIG_IGN);
    pthread_mutex_init(&d->mu, NULL);
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(d->dir, sizeof d->dir, "%s/seqkv-demo-XXXXXX", tmp);
    if (!mkdtemp(d->dir)) {
        free(d);
        return cli_fail(skv_error(SKV_ERR_IO, "mkdtemp %s: %s", d->dir, strerror(errno)), "demo");
    }
    r = demo_run(d);
    if (d->a.keep) {
        fprintf(stderr, "demo: kept %s (store, config, server.log)\n", d->dir);
    } else {
        char cmd[PATH_MAX + 32];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", d->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "demo: could not remove %s\n", d->dir);
    }
    cli_workload_free(d->S, d->ns);
    free(d->gets);
    skv_pool_free(d->pool);
    skv_model_free(d->m);
    pthread_mutex_destroy(&d->mu);
    free(d);
    return r;
}
