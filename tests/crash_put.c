/* kill -9: a child process PUTs real model KV (varied lengths, shared
 * system prompts, turns that extend earlier turns, raw and coded levels,
 * three tenants) and reports each acknowledged put on a pipe; the parent
 * kills it with SIGKILL at random moments -- right after an
 * acknowledgement, in the middle of the next put, during open -- for many
 * rounds. After each round the parent reopens the store and checks that
 * every acknowledged put is present and bit-exact, that whatever else a
 * lookup reports decodes bit-exactly (no partial record is visible), that
 * the unique-token count equals the prefixes actually served, and that
 * LMDB holds exactly the records the store indexed. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "seqkv.h"
#include "storeutil.h"
#include "testutil.h"

#define CHUNK 16
#define NT 3
enum { FAM = 12, SESS = 4, TURNS = 3, NSEQ = FAM * SESS * TURNS };
static const char *const TENANT[NT] = {"t0", "t1", "t2"};

static su_model tm;
static su_seq seqs[NSEQ];
static int tenant_of[NSEQ];

static void make_seqs(void)
{
    int k = 0;
    for (int f = 0; f < FAM; f++) {
        su_seq sys;
        int32_t first = (int32_t)(f % 3 == 0 ? tm.c->bos_id : 2 + f);
        su_seq_make(&tm, &first, 1, 10 + 7 * (size_t)f, 100 + (uint64_t)f, &sys);
        for (int s = 0; s < SESS; s++) {
            int32_t p[512];
            memcpy(p, sys.tok, sys.n * sizeof(int32_t));
            p[sys.n] = (int32_t)((5 + s) % tm.c->vocab_size);
            size_t np = sys.n + 1, len = np + 6 + (size_t)((s * 11 + f * 5) % 25);
            for (int t = 0; t < TURNS; t++, k++) {
                /* each turn extends the previous one */
                su_seq_make(&tm, p, np, len, 1000 + (uint64_t)k, &seqs[k]);
                tenant_of[k] = f % NT;
                memcpy(p, seqs[k].tok, seqs[k].n * sizeof(int32_t));
                np = seqs[k].n;
                len = np + 8 + (size_t)((k * 7) % 30);
            }
        }
        su_seq_free(&sys);
    }
    cr_assert_eq(k, NSEQ);
}

/* The store's options: quiet; records in value files from
 * SEQKV_TEST_FILE_MIN bytes when set (the _vfile run) */
static seqkv_options crash_opts(void)
{
    seqkv_options o = {.quiet = 1};
    const char *fm = getenv("SEQKV_TEST_FILE_MIN");
    if (fm)
        o.file_min = strtoull(fm, NULL, 0);
    return o;
}

/* The child: put every not-yet-acknowledged sequence, starting at `start`,
 * `batch` at a time (1: seqkv_put, else seqkv_put_batch: one commit),
 * reporting each put as it begins and acknowledging it when the call has
 * returned; exits 0 when all are done. Never returns. */
static void child(const char *dir, int fd, const unsigned char *acked, int start, int batch)
{
    seqkv_options o = crash_opts();
    seqkv *db;
    if (seqkv_open(dir, &o, &db))
        _exit(10);
    seqkv_put_req req[8];
    seqkv_put_opts po[8];
    int ids[8];
    for (int j = 0; j < NSEQ;) {
        int k = 0;
        while (k < batch && j < NSEQ) {
            int i = (start + j++) % NSEQ;
            if (acked[i])
                continue;
            const su_seq *s = &seqs[i];
            memset(&po[k], 0, sizeof po[k]);
            po[k].has_level = 1;
            po[k].level = i % 2 ? SEQKV_CTX : SEQKV_RAW;
            memset(&req[k], 0, sizeof req[k]);
            req[k].tenant = TENANT[tenant_of[i]];
            req[k].profile = "p";
            req[k].tokens = s->tok;
            req[k].n = s->n;
            req[k].kv = s->kv;
            req[k].kv_len = s->kv_len;
            req[k].opts = &po[k];
            ids[k++] = i;
        }
        for (int x = 0; x < k; x++) {
            uint32_t b = (uint32_t)ids[x] | 0x80000000u; /* "put i begins" */
            if (write(fd, &b, 4) != 4)
                _exit(12);
        }
        if (k == 1)
            req[0].rc = seqkv_put(db, req[0].tenant, "p", req[0].tokens, req[0].n, req[0].kv,
                                  req[0].kv_len, req[0].opts, &req[0].res);
        else if (k > 1)
            seqkv_put_batch(db, req, (size_t)k);
        for (int x = 0; x < k; x++)
            if (req[x].rc) {
                fprintf(stderr, "child: put %d: %d %s\n", ids[x], req[x].rc,
                        k == 1 ? seqkv_error_detail() : req[x].detail);
                _exit(11);
            }
        for (int x = 0; x < k; x++) {
            uint32_t a = (uint32_t)ids[x];
            if (write(fd, &a, 4) != 4)
                _exit(12);
        }
    }
    seqkv_close(db);
    _exit(0);
}

/* Read the child's reports until `want` more acknowledgements arrived,
 * the child closed the pipe, or timeout_ms passed. inflight[i]: put i
 * begun and not acknowledged (a batch: all of its puts). */
static int read_acks(int fd, unsigned char *acked, int want, int timeout_ms, int *eof,
                     unsigned char *inflight)
{
    int got = 0;
    while (got < want && !*eof) {
        struct pollfd p = {fd, POLLIN, 0};
        int r = poll(&p, 1, timeout_ms);
        if (r <= 0)
            break;
        uint32_t x;
        ssize_t n = read(fd, &x, 4);
        if (n == 0) {
            *eof = 1;
            break;
        }
        cr_assert_eq(n, 4, "short ack read (%zd, errno %d)", n, errno);
        if (x & 0x80000000u) {
            cr_assert_lt(x & 0x7fffffffu, (uint32_t)NSEQ);
            inflight[x & 0x7fffffffu] = 1;
            continue;
        }
        cr_assert_lt(x, (uint32_t)NSEQ);
        cr_assert(inflight[x], "acknowledged what began (%u)", x);
        acked[x] = 1;
        inflight[x] = 0;
        got++;
    }
    return got;
}

/* a set of 64-bit prefix hashes, per tenant */
typedef struct {
    uint64_t *h;
    size_t cap, n;
} hset;

static void hset_add(hset *s, uint64_t h)
{
    h |= 1; /* 0 marks an empty slot */
    for (size_t i = h & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
        if (s->h[i] == h)
            return;
        if (!s->h[i]) {
            s->h[i] = h;
            s->n++;
            return;
        }
    }
}

/* The longest prefix of seq k that the stored sequences provide. */
static size_t expected(int k, const unsigned char *stored)
{
    size_t best = 0;
    for (int j = 0; j < NSEQ; j++)
        if (stored[j] && tenant_of[j] == tenant_of[k]) {
            size_t m = su_lcp(seqs[j].tok, seqs[j].n, seqs[k].tok, seqs[k].n);
            if (m > best)
                best = m;
        }
    return best;
}

/* stored: the acknowledged puts plus those committed without an
 * acknowledgement; inflight: the puts the child was in (one put, or one
 * batch), which must be all there or not there at all. Returns 1 when
 * they were there. */
static int verify(const char *dir, const unsigned char *acked, unsigned char *stored,
                  const unsigned char *inflight, int round)
{
    int committed = 0;
    seqkv_options o = crash_opts();
    seqkv *db = NULL;
    int rc = seqkv_open(dir, &o, &db);
    cr_assert_eq(rc, 0, "round %d: reopen after kill -9: %d %s", round, rc, seqkv_error_detail());
    /* committed when one of them is there in full and the stored puts do
     * not explain it; then all of them must be (checked below) */
    for (int i = 0; i < NSEQ; i++) {
        size_t m = 0;
        if (!inflight[i] || stored[i] ||
            seqkv_lookup(db, TENANT[tenant_of[i]], "p", seqs[i].tok, seqs[i].n, &m))
            continue;
        if (m == seqs[i].n && expected(i, stored) < m)
            committed = 1;
    }
    for (int i = 0; committed && i < NSEQ; i++)
        stored[i] |= inflight[i];
    hset hs[NT];
    for (int t = 0; t < NT; t++) {
        hs[t].cap = 1 << 16;
        hs[t].n = 0;
        hs[t].h = calloc(hs[t].cap, sizeof(uint64_t));
    }
    for (int i = 0; i < NSEQ; i++) {
        const su_seq *s = &seqs[i];
        size_t m = 0;
        rc = seqkv_lookup(db, TENANT[tenant_of[i]], "p", s->tok, s->n, &m);
        cr_assert(rc == 0 || (rc == SKV_ERR_NOT_FOUND && !acked[i]), "round %d seq %d: lookup %d %s",
                  round, i, rc, seqkv_error_detail());
        if (acked[i])
            cr_assert_eq(m, s->n, "round %d: acknowledged put %d (%zu tokens) is cached to %zu", round,
                         i, s->n, m);
        if (m) {
            rc = su_get_check(db, TENANT[tenant_of[i]], "p", &tm, s, m, NULL);
            cr_assert_eq(rc, 0, "round %d seq %d (acked %d): get of the %zu cached tokens: %d %s", round,
                         i, acked[i], m, rc, seqkv_error_detail());
        }
        if (acked[i] && m > 1)
            cr_assert_eq(su_get_check(db, TENANT[tenant_of[i]], "p", &tm, s, m / 2, NULL), 0);
        uint64_t h = 0xcbf29ce484222325ull;
        for (size_t j = 0; j < m; j++) {
            h = (h ^ (uint32_t)s->tok[j]) * 0x100000001b3ull;
            h ^= h >> 29;
            hset_add(&hs[tenant_of[i]], h);
        }
    }
    uint64_t chunks = 0;
    for (int t = 0; t < NT; t++) {
        seqkv_stats st;
        rc = seqkv_stat(db, TENANT[t], &st);
        if (rc == SKV_ERR_NOT_FOUND) {
            cr_assert_eq(hs[t].n, 0);
        } else {
            cr_assert_eq(rc, 0);
            cr_assert_eq(st.tokens, hs[t].n,
                         "round %d tenant %s: %llu unique tokens stored, %zu prefixes served", round,
                         TENANT[t], (unsigned long long)st.tokens, hs[t].n);
            chunks += st.chunks;
        }
        free(hs[t].h);
    }
    /* exactly what the stored puts provide: the put in flight is all or
     * nothing, nothing else appeared or vanished */
    for (int i = 0; i < NSEQ; i++) {
        size_t m = 0;
        seqkv_lookup(db, TENANT[tenant_of[i]], "p", seqs[i].tok, seqs[i].n, &m);
        size_t e = expected(i, stored);
        cr_assert_eq(m, e, "round %d seq %d%s: lookup %zu, the stored puts give %zu", round, i,
                     inflight[i] ? " (a put in flight)" : "", m, e);
    }
    seqkv_stats all;
    cr_assert_eq(seqkv_stat(db, NULL, &all), 0);
    seqkv_close(db);
    /* every value file a record's, every record's file there (the open
     * swept what the kill left half written) */
    cr_assert_eq(su_vfile_unmatched(dir), 0, "round %d: value files out of step with LMDB", round);
    /* LMDB holds exactly the records the store indexed */
    size_t nkeys;
    free(su_chunk_keys(dir, &nkeys));
    cr_assert_eq(nkeys, all.chunks, "round %d: %zu records in LMDB, %llu indexed", round, nkeys,
                 (unsigned long long)all.chunks);
    uint64_t tok = su_chunk_tokens(dir);
    cr_assert_eq(tok, all.coded_tokens,
                 "round %d: the records in LMDB code %llu positions, stats say %llu", round,
                 (unsigned long long)tok, (unsigned long long)all.coded_tokens);
    cr_assert_eq(all.chunks, chunks, "round %d: only t0..t2 hold chunks", round);
    return committed;
}

static void crash_case(int batched, int rounds)
{
    const char *tmp = tu_tmpdir();
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/db", tmp);
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    make_seqs();

    /* the profile, and a calibration so that coded levels are exercised;
     * the calibration sequences are deleted again afterwards */
    seqkv_options o = crash_opts();
    seqkv *db;
    su_master_key(dir, 1);
    cr_assert_eq(seqkv_open(dir, &o, &db), 0, "%s", seqkv_error_detail());
    seqkv_profile p = SEQKV_PROFILE_INIT;
    su_profile(&tm, "p", CHUNK, SEQKV_RAW, 0, &p);
    cr_assert_eq(seqkv_profile_set(db, &p), 0, "%s", seqkv_error_detail());
    su_seq cal[4];
    for (int i = 0; i < 4; i++) {
        int32_t first = (int32_t)(30 + i);
        su_seq_make(&tm, &first, 1, 48, 77 + (uint64_t)i, &cal[i]);
        seqkv_put_result r;
        cr_assert_eq(seqkv_put(db, "t0", "p", cal[i].tok, cal[i].n, cal[i].kv, cal[i].kv_len, NULL, &r), 0);
    }
    cr_assert_eq(seqkv_calibrate(db, "p", 0), 0, "%s", seqkv_error_detail());
    for (int i = 0; i < 4; i++) {
        size_t removed;
        cr_assert_eq(seqkv_del(db, "t0", "p", cal[i].tok, cal[i].n, &removed), 0);
        cr_assert_eq(removed, cal[i].n);
        su_seq_free(&cal[i]);
    }
    seqkv_close(db);

    unsigned char acked[NSEQ] = {0}, stored[NSEQ] = {0};
    skv_rng rng;
    skv_rng_seed(&rng, 0x6b696c6c);
    int kills = 0, total_acks = 0, mid = 0, finished = 0, inflight_kills = 0, unacked_commits = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int round = 0; round < rounds; round++) {
        int fds[2];
        cr_assert_eq(pipe(fds), 0);
        int start = (int)(skv_rng_next(&rng) % NSEQ);
        int batch = batched ? 2 + (int)(skv_rng_next(&rng) % 5) : 1;
        pid_t pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
            close(fds[0]);
            child(dir, fds[1], acked, start, batch);
        }
        close(fds[1]);
        int eof = 0, got = 0;
        unsigned char inflight[NSEQ] = {0};
        unsigned mode = (unsigned)(skv_rng_next(&rng) % 8);
        if (mode == 0) {
            /* early: during open or the first put */
            usleep((useconds_t)(skv_rng_next(&rng) % 15000));
        } else {
            /* after a few acknowledgements, a moment into the next put */
            int want = 1 + (int)(skv_rng_next(&rng) % 4);
            got = read_acks(fds[0], acked, want, 10000, &eof, inflight);
            usleep((useconds_t)(skv_rng_next(&rng) % 2500));
            mid++;
        }
        kill(pid, SIGKILL);
        int st;
        cr_assert_eq(waitpid(pid, &st, 0), pid);
        if (WIFEXITED(st)) {
            cr_assert_eq(WEXITSTATUS(st), 0, "round %d: the child failed (status %d)", round,
                         WEXITSTATUS(st));
            finished++;
        } else {
            cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
            kills++;
        }
        /* acknowledgements written before it died count too */
        got += read_acks(fds[0], acked, NSEQ, 0, &eof, inflight);
        close(fds[0]);
        total_acks += got;
        for (int i = 0; i < NSEQ; i++)
            stored[i] |= acked[i];
        int any = 0;
        for (int i = 0; i < NSEQ; i++)
            any |= inflight[i];
        inflight_kills += any;
        unacked_commits += verify(dir, acked, stored, inflight, round);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    int n_acked = 0;
    for (int i = 0; i < NSEQ; i++)
        n_acked += acked[i];
    cr_log_info("kill -9 (%s): %d rounds, %d killed (%d after acknowledgements, %d inside a put, %d of "
                "those after its commit), %d finished, %d acknowledgements, %d of %d sequences "
                "acknowledged, %.1f s",
                batched ? "batches" : "single puts", rounds, kills, mid, inflight_kills,
                unacked_commits, finished, total_acks, n_acked, NSEQ, secs);
    cr_assert_geq(inflight_kills, rounds / 4, "kills land inside puts (%d)", inflight_kills);
    cr_assert_geq(kills, rounds / 2, "most rounds end in SIGKILL (%d)", kills);
    cr_assert_gt(n_acked, NSEQ / 4, "the children made progress (%d)", n_acked);
    for (int i = 0; i < NSEQ; i++)
        su_seq_free(&seqs[i]);
    su_model_free(&tm);
}

Test(crash, every_acknowledged_put_survives_kill_9, .timeout = 240)
{
    crash_case(0, 40);
}

Test(crash, every_acknowledged_batch_survives_kill_9_and_a_batch_is_all_or_nothing, .timeout = 240)
{
    crash_case(1, 24);
}
