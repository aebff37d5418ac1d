/* The Redis Cluster client (skv_rcluster.h): one connection per node, the
 * slot map kept current, and skv_rc_exec's rounds.
 *
 * A round sends every command still unanswered to the node its slot (or
 * an -ASK) points at, one pipeline per node, nodes one after another, and
 * sorts the replies: a final reply is kept; -MOVED moves the slot in the
 * map; -ASK sends the command once more to the node named, after ASKING;
 * -TRYAGAIN, -CLUSTERDOWN, -LOADING and broken connections are "trouble".
 * Rounds repeat until every command is answered or the deadline passes;
 * after trouble the client pauses 50-100 ms and reads the map again (from
 * the masters first, then the replicas, then the seeds), after a -MOVED
 * it reads the map at once. Sleeping while holding the mutex is deliberate:
 * callers of one client queue behind a failover anyway. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rc_int.h"
#include "skv_rcluster.h"

#define RC_SCHEME "redis-cluster://"
/* connections kept at most: the map's nodes, the seeds, redirect targets */
#define RC_MAX_CONNS (2 * SKV_RC_MAX_NODES)
/* the pause after a round that met trouble: 50 ms + up to 50 ms of jitter */
#define RC_PAUSE_MS 50
#define RC_PAUSE_JITTER_MS 50
/* rounds of -MOVED only, before the client pauses between them too (a node
 * and the map disagreeing for a while, as during a failover) */
#define RC_MOVED_ROUNDS_UNPAUSED 3

typedef struct rc_conn {
    skv_rc_addr addr;
    redisContext *ctx; /* NULL until needed, and after a failure */
    int used;          /* connected once: the next connection is a reconnect */
    int seed;          /* listed in skv_rc_open's seeds */
    uint64_t tried;    /* the refresh that last asked it for the map */
} rc_conn;

struct skv_rc {
    pthread_mutex_t mu;
    int timeout_ms;
    skv_rc_map *map;
    int32_t *map_conn; /* per map node: the index of its connection, or -1 */
    size_t map_conn_cap;
    rc_conn *conn;
    size_t nconn, conn_cap;
    uint64_t refresh_epoch;
    skv_rng rng; /* the jitter of the pause between rounds */
    skv_rc_stats st;
    char last_err[192]; /* the last connection or map failure, for messages */
};

/* One command of skv_rc_exec on its way. */
typedef struct rc_pend {
    int32_t next;   /* the next command of this round's pipeline to the same node */
    int32_t ask;    /* connection to send it to once, after ASKING; -1: none */
    uint16_t slot;
    uint8_t done;   /* answered, or given up (WAIT counted too few replicas) */
    uint8_t asking; /* this round: ASKING goes before it */
    uint8_t fresh;  /* answered in this round's pipeline (WAIT confirms these) */
} rc_pend;

/* What one round met, deciding what comes before the next. */
typedef struct rc_round {
    int trouble; /* a node failed or asked to wait: pause, then read the map */
    int moved;   /* a -MOVED: read the map */
} rc_round;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct timeval ms_tv(int64_t ms)
{
    if (ms < 1)
        ms = 1;
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000};
    return tv;
}

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void note(skv_rc *rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(skv_rc *rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rc->last_err, sizeof rc->last_err, fmt, ap);
    va_end(ap);
}

/* hiredis (0.14) writes with write(2): a node that died under a pipeline
 * makes the kernel raise SIGPIPE, which kills a process that did not
 * ignore it. The calls that write block SIGPIPE in their own thread, and
 * before restoring the mask take away the one they raised (none of the
 * process' other signals are touched). */
typedef struct rc_sigpipe {
    sigset_t old;
    int was_pending;
} rc_sigpipe;

static void sigpipe_block(rc_sigpipe *s)
{
    sigset_t pipe, pending;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    sigemptyset(&pending);
    sigpending(&pending);
    s->was_pending = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe, &s->old);
}

static void sigpipe_restore(const rc_sigpipe *s)
{
    sigset_t pipe, pending;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    sigemptyset(&pending);
    if (!s->was_pending && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
        const struct timespec zero = {0, 0};
        sigtimedwait(&pipe, NULL, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &s->old, NULL);
}

/* ------------------------------------------------------------------------
 * Connections, one per node address, made lazily.
 * ---------------------------------------------------------------------- */
/* The index of the connection to a, added (not connected) when absent; -1
 * past RC_MAX_CONNS or out of memory. */
static int32_t conn_index(skv_rc *rc, const skv_rc_addr *a)
{
    for (size_t i = 0; i < rc->nconn; i++)
        if (rc->conn[i].addr.port == a->port && strcmp(rc->conn[i].addr.host, a->host) == 0)
            return (int32_t)i;
    if (rc->nconn >= RC_MAX_CONNS)
        return -1;
    if (rc->nconn == rc->conn_cap) {
        size_t cap = rc->conn_cap ? 2 * rc->conn_cap : 8;
        rc_conn *c = skv_realloc(rc->conn, cap * sizeof *c);
        if (!c)
            return -1;
        rc->conn = c;
        rc->conn_cap = cap;
    }
    rc_conn *c = &rc->conn[rc->nconn];
    memset(c, 0, sizeof *c);
    c->addr = *a;
    return (int32_t)rc->nconn++;
}

static void conn_drop(skv_rc *rc, int32_t ci)
{
    redisFree(rc->conn[ci].ctx);
    rc->conn[ci].ctx = NULL;
}

/* The connection ci, made when missing, with io_ms as its read and write
 * timeout; NULL (and last_err) when it cannot be made. */
static redisContext *conn_get(skv_rc *rc, int32_t ci, int64_t io_ms)
{
    rc_conn *c = &rc->conn[ci];
    if (c->ctx && c->ctx->err)
        conn_drop(rc, ci);
    if (!c->ctx) {
        redisContext *ctx = redisConnectWithTimeout(c->addr.host, c->addr.port, ms_tv(io_ms));
        if (!ctx || ctx->err) {
            note(rc, "%s:%d: %s", c->addr.host, c->addr.port, ctx ? ctx->errstr : "out of memory");
            redisFree(ctx);
            return NULL;
        }
        skv_rc_reader_cap(ctx->reader);
        if (c->used)
            rc->st.reconnects++;
        c->used = 1;
        c->ctx = ctx;
    }
    if (redisSetTimeout(c->ctx, ms_tv(io_ms)) != REDIS_OK) {
        note(rc, "%s:%d: %s", c->addr.host, c->addr.port, c->ctx->errstr);
        conn_drop(rc, ci);
        return NULL;
    }
    return c->ctx;
}

/* ------------------------------------------------------------------------
 * The map.
 * ---------------------------------------------------------------------- */
/* Make m the map (the client takes its nodes; m is left empty), with a
 * connection for each of its nodes. */
static int map_install(skv_rc *rc, skv_rc_map *m)
{
    size_t cap = m->cap ? m->cap : 1;
    int32_t *mc = skv_malloc(cap * sizeof *mc);
    if (!mc) {
        skv_rc_map_free(m);
        return skv_error(SKV_ERR_NOMEM, "cluster map");
    }
    for (size_t j = 0; j < m->nnodes; j++)
        mc[j] = conn_index(rc, &m->node[j].addr);
    skv_rc_map old = *rc->map;
    *rc->map = *m;
    skv_rc_map_init(m);
    skv_rc_map_free(&old);
    skv_free(rc->map_conn);
    rc->map_conn = mc;
    rc->map_conn_cap = cap;
    return 0;
}

/* Ask connection ci for CLUSTER SLOTS and install the map it gives. */
static int map_read(skv_rc *rc, int32_t ci, int64_t io_ms)
{
    redisContext *ctx = conn_get(rc, ci, io_ms);
    if (!ctx)
        return -1;
    const rc_conn *c = &rc->conn[ci];
    redisReply *r = redisCommand(ctx, "CLUSTER SLOTS");
    if (!r) {
        note(rc, "%s:%d: %s", c->addr.host, c->addr.port, ctx->errstr);
        conn_drop(rc, ci);
        return -1;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        note(rc, "%s:%d: %.*s", c->addr.host, c->addr.port, (int)(r->len > 120 ? 120 : r->len),
             r->str ? r->str : "");
        freeReplyObject(r);
        return -1;
    }
    skv_rc_map *m = skv_malloc(sizeof *m);
    if (!m) {
        freeReplyObject(r);
        note(rc, "out of memory");
        return -1;
    }
    int err = skv_rc_parse_slots(r, c->addr.host, m);
    freeReplyObject(r);
    if (err) {
        note(rc, "%s:%d: bad CLUSTER SLOTS reply: %s", rc->conn[ci].addr.host,
             rc->conn[ci].addr.port, seqkv_error_detail());
        skv_free(m);
        return -1;
    }
    err = map_install(rc, m);
    skv_free(m);
    return err ? -1 : 0;
}

/* Read the map again from any node that answers: the map's masters, then
 * its replicas, then the seeds, each asked once, before the deadline. */
static int map_refresh(skv_rc *rc, int64_t deadline)
{
    uint64_t epoch = ++rc->refresh_epoch;
    for (int pass = 0; pass < 3; pass++) {
        size_t count = pass < 2 ? rc->map->nnodes : rc->nconn;
        for (size_t k = 0; k < count; k++) {
            int32_t ci;
            if (pass < 2) {
                if (rc->map->node[k].master != (pass == 0))
                    continue;
                ci = rc->map_conn[k];
            } else {
                ci = rc->conn[k].seed ? (int32_t)k : -1;
            }
            if (ci < 0 || rc->conn[ci].tried == epoch)
                continue;
            rc->conn[ci].tried = epoch;
            int64_t left = deadline - now_ms();
            if (left <= 0)
                return -1;
            if (map_read(rc, ci, left < rc->timeout_ms ? left : rc->timeout_ms) == 0) {
                rc->st.refreshes++;
                return 0;
            }
        }
    }
    return -1;
}

/* -MOVED slot to: the slot's master is now `to`. */
static void map_move(skv_rc *rc, int slot, const skv_rc_addr *to)
{
    /* room for one more node's connection index first: once added to the
     * map, a node cannot be taken out again */
    if (rc->map_conn_cap < rc->map->nnodes + 1) {
        size_t cap = 2 * rc->map_conn_cap + 1;
        int32_t *mc = skv_realloc(rc->map_conn, cap * sizeof *mc);
        if (!mc)
            return;
        rc->map_conn = mc;
        rc->map_conn_cap = cap;
    }
    size_t before = rc->map->nnodes;
    int j = skv_rc_map_add(rc->map, to, 1);
    if (j < 0)
        return;
    if (rc->map->nnodes > before)
        rc->map_conn[j] = conn_index(rc, to);
    rc->map->owner[slot] = j;
}

/* ------------------------------------------------------------------------
 * Open and close.
 * ---------------------------------------------------------------------- */
static skv_rc *open_fail(skv_rc *rc, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static skv_rc *open_fail(skv_rc *rc, char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    skv_rc_close(rc);
    return NULL;
}

skv_rc *skv_rc_open(const char *seeds, int timeout_ms, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (!seeds)
        return open_fail(NULL, err, errlen, "no seeds given");
    if (timeout_ms <= 0)
        return open_fail(NULL, err, errlen, "timeout of %d ms (must be > 0)", timeout_ms);
    skv_rc *rc = skv_calloc(1, sizeof *rc);
    if (!rc)
        return open_fail(NULL, err, errlen, "out of memory");
    rc->map = skv_malloc(sizeof *rc->map);
    if (!rc->map) {
        skv_free(rc);
        return open_fail(NULL, err, errlen, "out of memory");
    }
    skv_rc_map_init(rc->map);
    pthread_mutex_init(&rc->mu, NULL);
    rc->timeout_ms = timeout_ms;
    skv_rng_seed(&rc->rng, (uint64_t)now_ms() ^ ((uint64_t)getpid() << 32) ^ (uintptr_t)rc);

    const char *s = seeds;
    if (strncmp(s, RC_SCHEME, strlen(RC_SCHEME)) == 0)
        s += strlen(RC_SCHEME);
    if (!*s)
        return open_fail(rc, err, errlen, "'%s': no seed address", seeds);
    for (int k = 1;; k++) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        const char *item = s;
        /* spaces around a seed: "a:1, b:2" */
        while (len && *item == ' ') {
            item++;
            len--;
        }
        while (len && item[len - 1] == ' ')
            len--;
        skv_rc_addr a;
        if (len == 0)
            return open_fail(rc, err, errlen, "seed %d of '%s' is empty", k, seeds);
        if (skv_rc_parse_addr(item, len, NULL, &a))
            return open_fail(rc, err, errlen, "seed %d of '%s': %s", k, seeds,
                             seqkv_error_detail());
        int32_t ci = conn_index(rc, &a);
        if (ci < 0)
            return open_fail(rc, err, errlen, "too many seeds");
        rc->conn[ci].seed = 1;
        if (!e)
            break;
        s = e + 1;
    }
    /* the seeds in order; the first to give a map wins */
    rc_sigpipe sp;
    sigpipe_block(&sp);
    int found = 0;
    for (size_t i = 0; i < rc->nconn && !found; i++)
        found = rc->conn[i].seed && map_read(rc, (int32_t)i, timeout_ms) == 0;
    sigpipe_restore(&sp);
    if (found)
        return rc;
    return open_fail(rc, err, errlen, "no seed of '%s' gave a cluster map (last: %s)", seeds,
                     rc->last_err);
}

void skv_rc_close(skv_rc *rc)
{
    if (!rc)
        return;
    for (size_t i = 0; i < rc->nconn; i++)
        redisFree(rc->conn[i].ctx);
    skv_free(rc->conn);
    if (rc->map)
        skv_rc_map_free(rc->map);
    skv_free(rc->map);
    skv_free(rc->map_conn);
    pthread_mutex_destroy(&rc->mu);
    skv_free(rc);
}

/* ------------------------------------------------------------------------
 * Exec.
 * ---------------------------------------------------------------------- */
/* -TRYAGAIN, -CLUSTERDOWN, -LOADING: the node asks to be asked again */
static int transient(const redisReply *r)
{
    static const char *const codes[] = {"TRYAGAIN", "CLUSTERDOWN", "LOADING"};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        size_t l = strlen(codes[i]);
        if (r->len >= l && memcmp(r->str, codes[i], l) == 0 && (r->len == l || r->str[l] == ' '))
            return 1;
    }
    return 0;
}

/* Sort the reply r to command i, from connection ci. */
static void take_reply(skv_rc *rc, int32_t ci, rc_pend *p, redisReply **slot_of_reply,
                       redisReply *r, rc_round *rd)
{
    if (r->type == REDIS_REPLY_ERROR && r->str) {
        int slot;
        skv_rc_addr to;
        int kind = skv_rc_parse_redirect(r->str, r->len, rc->conn[ci].addr.host, &slot, &to);
        if (kind == SKV_RC_REDIRECT_MOVED) {
            rc->st.redirects_moved++;
            map_move(rc, slot, &to);
            rd->moved = 1;
            freeReplyObject(r);
            return;
        }
        if (kind == SKV_RC_REDIRECT_ASK) {
            rc->st.redirects_ask++;
            p->ask = conn_index(rc, &to);
            rd->trouble |= p->ask < 0;
            freeReplyObject(r);
            return;
        }
        if (kind < 0 || transient(r)) {
            /* a malformed redirect is a confused node: ask again later */
            note(rc, "%s:%d: %.*s", rc->conn[ci].addr.host, rc->conn[ci].addr.port,
                 (int)(r->len > 120 ? 120 : r->len), r->str);
            rd->trouble = 1;
            freeReplyObject(r);
            return;
        }
    }
    *slot_of_reply = r;
    p->done = 1;
    p->fresh = 1;
}

/* WAIT counted too few replicas, or its reply was lost: the commands this
 * pipeline answered are not confirmed. */
static void unconfirm(rc_pend *p, int32_t head, redisReply **replies)
{
    for (int32_t i = head; i >= 0; i = p[i].next) {
        if (p[i].fresh) {
            freeReplyObject(replies[i]);
            replies[i] = NULL;
            p[i].fresh = 0;
        }
    }
}

/* Send the commands listed from head to connection ci, pipelined, and
 * sort their replies. */
static void run_pipeline(skv_rc *rc, int32_t ci, int32_t head, const skv_rc_cmd *cmds,
                         rc_pend *p, redisReply **replies, int wait_replicas, int64_t deadline,
                         rc_round *rd)
{
    int64_t left = deadline - now_ms();
    if (left <= 0) {
        rd->trouble = 1;
        return;
    }
    redisContext *ctx = conn_get(rc, ci, left < rc->timeout_ms ? left : rc->timeout_ms);
    if (!ctx) {
        rd->trouble = 1;
        return;
    }
    for (int32_t i = head; i >= 0; i = p[i].next) {
        if (p[i].asking && redisAppendCommand(ctx, "ASKING") != REDIS_OK)
            goto broken;
        if (redisAppendCommandArgv(ctx, cmds[i].argc, (const char **)cmds[i].argv,
                                   cmds[i].argvlen) != REDIS_OK)
            goto broken;
    }
    if (wait_replicas > 0 &&
        redisAppendCommand(ctx, "WAIT %d %lld", wait_replicas, (long long)left) != REDIS_OK)
        goto broken;
    for (int32_t i = head; i >= 0; i = p[i].next) {
        void *r;
        if (p[i].asking) {
            if (redisGetReply(ctx, &r) != REDIS_OK)
                goto broken;
            freeReplyObject(r); /* +OK */
        }
        if (redisGetReply(ctx, &r) != REDIS_OK)
            goto broken;
        take_reply(rc, ci, &p[i], &replies[i], r, rd);
    }
    if (wait_replicas > 0) {
        /* WAIT may block for all of `left`: its reply gets that long and
         * the usual timeout besides */
        void *w;
        if (redisSetTimeout(ctx, ms_tv(left + rc->timeout_ms)) != REDIS_OK ||
            redisGetReply(ctx, &w) != REDIS_OK)
            goto broken;
        const redisReply *wr = w;
        int confirmed = wr->type == REDIS_REPLY_INTEGER && wr->integer >= wait_replicas;
        if (!confirmed)
            note(rc, "%s:%d: WAIT %d: %lld replicas", rc->conn[ci].addr.host,
                 rc->conn[ci].addr.port, wait_replicas,
                 wr->type == REDIS_REPLY_INTEGER ? wr->integer : -1);
        freeReplyObject(w);
        if (!confirmed)
            unconfirm(p, head, replies);
    }
    return;
broken:
    /* the commands without a reply stay pending and go out again */
    note(rc, "%s:%d: %s", rc->conn[ci].addr.host, rc->conn[ci].addr.port,
         ctx->errstr[0] ? ctx->errstr : "connection failed");
    conn_drop(rc, ci);
    rd->trouble = 1;
    if (wait_replicas > 0)
        unconfirm(p, head, replies);
}

/* One round over every pending command; the number still pending. */
static size_t run_round(skv_rc *rc, const skv_rc_cmd *cmds, size_t n, rc_pend *p,
                        redisReply **replies, int wait_replicas, int64_t deadline, rc_round *rd)
{
    size_t nconn = rc->nconn;
    int32_t *head = skv_malloc(2 * (nconn ? nconn : 1) * sizeof *head);
    if (!head) {
        note(rc, "out of memory");
        rd->trouble = 1;
        return n;
    }
    int32_t *tail = head + nconn;
    for (size_t c = 0; c < nconn; c++)
        head[c] = tail[c] = -1;
    for (size_t i = 0; i < n; i++) {
        if (p[i].done)
            continue;
        int32_t ci = -1;
        p[i].asking = p[i].ask >= 0;
        p[i].fresh = 0;
        if (p[i].asking) {
            ci = p[i].ask;
            p[i].ask = -1; /* once */
        } else {
            int32_t o = rc->map->owner[p[i].slot];
            if (o >= 0)
                ci = rc->map_conn[o];
        }
        if (ci < 0 || (size_t)ci >= nconn) {
            note(rc, "slot %u: no master known", p[i].slot);
            rd->trouble = 1;
            continue;
        }
        p[i].next = -1;
        if (tail[ci] < 0)
            head[ci] = (int32_t)i;
        else
            p[tail[ci]].next = (int32_t)i;
        tail[ci] = (int32_t)i;
    }
    for (size_t c = 0; c < nconn; c++)
        if (head[c] >= 0)
            run_pipeline(rc, (int32_t)c, head[c], cmds, p, replies, wait_replicas, deadline, rd);
    skv_free(head);
    size_t pending = 0;
    for (size_t i = 0; i < n; i++)
        pending += !p[i].done;
    return pending;
}

static int check_cmds(const skv_rc_cmd *cmds, size_t n)
{
    if (n > INT32_MAX)
        return skv_error(SKV_ERR_ARG, "%zu commands in one call", n);
    for (size_t i = 0; i < n; i++) {
        const skv_rc_cmd *c = &cmds[i];
        if (c->argc < 1 || !c->argv || c->key < 0 || c->key >= c->argc || !c->argv[c->key])
            return skv_error(SKV_ERR_ARG, "command %zu: argc %d, key index %d", i, c->argc,
                             c->key);
    }
    return 0;
}

int skv_rc_exec(skv_rc *rc, const skv_rc_cmd *cmds, size_t n, redisReply **replies,
                int wait_replicas, int deadline_ms)
{
    if (!replies)
        return skv_error(SKV_ERR_ARG, "no reply array"), -1;
    for (size_t i = 0; i < n; i++)
        replies[i] = NULL;
    if (!rc || (n && !cmds))
        return skv_error(SKV_ERR_ARG, "no client or no commands"), -1;
    if (check_cmds(cmds, n))
        return -1;
    if (n == 0)
        return 0;
    rc_pend *p = skv_malloc(n * sizeof *p);
    if (!p)
        return skv_error(SKV_ERR_NOMEM, "%zu commands", n), -1;
    for (size_t i = 0; i < n; i++) {
        const skv_rc_cmd *c = &cmds[i];
        size_t kl = c->argvlen ? c->argvlen[c->key] : strlen(c->argv[c->key]);
        p[i] = (rc_pend){.next = -1, .ask = -1, .slot = (uint16_t)skv_rc_slot(c->argv[c->key], kl)};
    }
    int64_t deadline = now_ms() + (deadline_ms < 1 ? 1 : deadline_ms);

    rc_sigpipe sp;
    sigpipe_block(&sp);
    pthread_mutex_lock(&rc->mu);
    rc->st.commands += n;
    size_t pending = n;
    for (int round = 1;; round++) {
        rc_round rd = {0, 0};
        pending = run_round(rc, cmds, n, p, replies, wait_replicas, deadline, &rd);
        if (!pending)
            break;
        int64_t left = deadline - now_ms();
        if (left <= 0)
            break;
        if (rd.trouble || (rd.moved && round > RC_MOVED_ROUNDS_UNPAUSED)) {
            int64_t pause = RC_PAUSE_MS + (int64_t)(skv_rng_next(&rc->rng) %
                                                    (RC_PAUSE_JITTER_MS + 1));
            sleep_ms(pause < left ? pause : left);
        }
        if (rd.trouble || rd.moved)
            map_refresh(rc, deadline);
    }
    size_t missing = 0;
    for (size_t i = 0; i < n; i++)
        missing += replies[i] == NULL;
    rc->st.failures += missing;
    if (missing)
        skv_error(SKV_ERR_IO, "%zu of %zu commands without a reply (%s; last failure: %s)",
                  missing, n, pending ? "deadline passed" : "WAIT did not confirm them",
                  rc->last_err[0] ? rc->last_err : "none");
    pthread_mutex_unlock(&rc->mu);
    sigpipe_restore(&sp);
    skv_free(p);
    return missing ? -1 : 0;
}

void skv_rc_get_stats(skv_rc *rc, skv_rc_stats *st)
{
    memset(st, 0, sizeof *st);
    if (!rc)
        return;
    pthread_mutex_lock(&rc->mu);
    *st = rc->st;
    st->masters = skv_rc_map_masters(rc->map);
    pthread_mutex_unlock(&rc->mu);
}

void skv_rc_forget_slots(skv_rc *rc)
{
    if (!rc)
        return;
    pthread_mutex_lock(&rc->mu);
    int32_t any = -1;
    for (size_t s = 0; s < SKV_RC_SLOTS && any < 0; s++)
        any = rc->map->owner[s];
    if (any >= 0)
        for (size_t s = 0; s < SKV_RC_SLOTS; s++)
            rc->map->owner[s] = any;
    pthread_mutex_unlock(&rc->mu);
}
