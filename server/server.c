/* seqkvd: the epoll loop, clients and the worker pool
 * (skv_server.h). The commands are in commands.c; accepting, AUTH and the
 * socket in accept.c.
 *
 * Threads. The loop thread owns every client: it accepts, reads, parses
 * (resp.c), dispatches and writes. A command that touches the store is a
 * job on the work queue; a worker runs it, builds its whole reply in the
 * job and hands the job back through the done queue and the eventfd. A
 * client has at most one job in flight and is never freed while it has
 * one (a client that goes away meanwhile is marked dead, its socket closed
 * at once, its memory freed when the job comes back). */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "metrics.h"
#include "remote.h"
#include "server_int.h"

#define OUT_PAUSE (1u << 20)   /* stop parsing while more output is unsent */
#define MAX_AUTH_FAILS 3
#define STOP_FLUSH_S 5.0

double srv_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void srv_log(skv_server *s, const char *fmt, ...)
{
    if (s->o.quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("seqkv serve: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ------------------------------------------------------------------------
 * Clients
 * ---------------------------------------------------------------------- */
static size_t pending_out(const srv_client *c)
{
    return c->out.pending;
}

static void client_events(skv_server *s, srv_client *c)
{
    if (c->fd < 0)
        return;
    uint32_t ev = 0;
    if (!c->busy && !c->closing && !s->stopping && pending_out(c) < OUT_PAUSE)
        ev |= EPOLLIN;
    if (srv_outq_sendable(&c->out)) /* (not a streamed view's layers still decoding) */
        ev |= EPOLLOUT;
    if (ev == c->ev)
        return;
    struct epoll_event e = {.events = ev, .data.ptr = c};
    epoll_ctl(s->epfd, EPOLL_CTL_MOD, c->fd, &e);
    c->ev = ev;
}

void srv_client_free(skv_server *s, srv_client *c)
{
    if (c->fd >= 0) {
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
        c->fd = -1;
    }
    if (c->busy) { /* freed when its job comes back */
        c->dead = 1;
        return;
    }
    if (c->prev)
        c->prev->next = c->next;
    else
        s->clients = c->next;
    if (c->next)
        c->next->prev = c->prev;
    s->nclients--;
    srv_set_tenant(s, c, -1); /* its tenant's count down ... */
    s->nunauth--;         /* ... and it is gone, not waiting to authenticate */
    skv_resp_reset(&c->rp);
    srv_outq_clear(&c->out);
    skv_free(c->in);
    c->in = NULL;
    c->next = s->freed; /* released after the batch of events (release_freed) */
    s->freed = c;
}

void srv_snap_take(const skv_server *s, srv_snap *out)
{
    *out = (srv_snap){.clients = s->nclients, .inflight = s->inflight, .unauth = s->nunauth,
                      .accepted = s->accepted, .rejected = s->rejected,
                      .proto_errors = s->proto_errors};
}

static void release_freed(skv_server *s)
{
    for (srv_client *c = s->freed, *n; c; c = n) {
        n = c->next;
        skv_free(c);
    }
    s->freed = NULL;
}

/* Send what is pending; 0, or -1 when the client was freed. */
static int client_write(skv_server *s, srv_client *c)
{
    if (srv_outq_write(&c->out, c->fd) != 0) {
        srv_client_free(s, c);
        return -1;
    }
    if (!pending_out(c) && c->closing) {
        srv_client_free(s, c);
        return -1;
    }
    return 0;
}

/* Queue a reply (taking its buffer, then its view when v is not NULL);
 * closes the client past max_output. */
static void client_reply_view(skv_server *s, srv_client *c, skv_rbuf *r, seqkv_view *v,
                              int layers)
{
    size_t add = r->len + (v ? seqkv_view_bytes(v) + 32 * (size_t)(layers + 1) : 0);
    if (r->oom) {
        skv_rbuf_free(r);
        seqkv_view_free(v);
        c->closing = 1;
        return;
    }
    if (pending_out(c) + add > s->cfg.max_output) {
        srv_log(s, "client %llu: output buffer limit reached, closing",
                (unsigned long long)c->id);
        skv_rbuf_free(r);
        seqkv_view_free(v);
        c->closing = 1;
        srv_outq_clear(&c->out); /* drop what is pending */
        return;
    }
    int rc = srv_outq_rbuf(&c->out, r);
    if (rc)
        seqkv_view_free(v);
    else if (v)
        rc = srv_outq_view(&c->out, v, layers); /* frees v when it fails */
    if (rc) { /* no memory: the reply cannot go out whole, so the client goes */
        c->closing = 1;
        srv_outq_clear(&c->out);
    }
}

static void client_reply(skv_server *s, srv_client *c, skv_rbuf *r)
{
    client_reply_view(s, c, r, NULL, 0);
}

static void job_free(srv_job *j)
{
    skv_resp_cmd_free(&j->cmd);
    skv_rbuf_free(&j->reply);
    seqkv_view_free(j->view);
    skv_free(j);
}

static int client_process(skv_server *s, srv_client *c);

void srv_stream_told(skv_server *s, srv_job *j, const seqkv_view *v, size_t ready)
{
    pthread_mutex_lock(&s->dmu);
    j->stream_view = (seqkv_view *)v;
    j->stream_ready = ready;
    j->stream_told = 1;
    if (!j->stream_posted) {
        j->stream_posted = 1;
        j->told_next = s->told;
        s->told = j;
    }
    pthread_mutex_unlock(&s->dmu);
    uint64_t one = 1;
    ssize_t w = write(s->evfd, &one, sizeof one);
    (void)w;
}

/* Layers [0, j->stream_seen) of a streamed get are decoded (loop thread):
 * the first time, the array header and the view go into the client's
 * queue, its later layers held back until they are told too. The job is
 * still the worker's; its client is busy, so it stays. */
static void stream_layers(skv_server *s, srv_job *j)
{
    srv_client *c = j->c;
    if (c->dead || c->fd < 0)
        return;
    if (!j->stream_open) {
        if (c->closing)
            return; /* (job_complete drops the reply) */
        skv_rbuf h = {0};
        skv_rbuf_array(&h, (size_t)j->stream_layers);
        size_t add = h.len + seqkv_view_bytes(j->stream_view) + 32 * (size_t)(j->stream_layers + 1);
        if (h.oom || pending_out(c) + add > s->cfg.max_output ||
            srv_outq_rbuf(&c->out, &h) != 0 ||
            srv_outq_view_stream(&c->out, j->stream_view, j->stream_layers, j->stream_seen) != 0) {
            skv_rbuf_free(&h);
            srv_log(s, "client %llu: a streamed reply does not fit its output buffer, closing",
                    (unsigned long long)c->id);
            c->closing = 1;
            srv_outq_clear(&c->out);
            return;
        }
        j->stream_open = 1;
    } else {
        srv_outq_stream_ready(&c->out, j->stream_seen);
    }
    if (client_write(s, c) == 0)
        client_events(s, c);
}

/* The end of a streamed get whose layers the loop was told of: the view
 * goes out whole, or, when the get failed after, the reply is cut and the
 * connection closed -- the client never receives a whole reply with bytes
 * that failed verification. */
static void stream_end(skv_server *s, srv_job *j)
{
    srv_client *c = j->c;
    if (j->stream_open && srv_outq_stream_end(&c->out, !j->stream_failed) == 0)
        j->view = NULL; /* the queue's now */
    if (j->stream_failed || !j->stream_open) {
        if (j->stream_failed)
            srv_log(s, "client %llu: a streamed KV.GET failed after %zu layers were sent: %.*s",
                    (unsigned long long)c->id, j->stream_seen, (int)(j->reply.len > 2 ? j->reply.len - 2 : 0),
                    j->reply.p ? (const char *)j->reply.p : "");
        c->closing = 1;
        if (!j->stream_open)
            srv_outq_clear(&c->out);
    }
    skv_rbuf_free(&j->reply); /* the header went out with the first layers */
}

/* A job's reply reaches its client (loop thread). An inline job (run by
 * dispatch) only queues its reply: client_process goes on and writes. */
static void job_complete(skv_server *s, srv_job *j)
{
    srv_client *c = j->c;
    double dt = srv_now() - j->t0;
    srv_stat_latency(s, j->def, dt);
    int inl = j->inline_;
    if (!inl)
        s->inflight--;
    if (c->req_bytes && j->tenant >= 0) {
        pthread_mutex_lock(&s->smu);
        s->ts[j->tenant].inflight_bytes -= c->req_bytes;
        pthread_mutex_unlock(&s->smu);
    }
    c->req_bytes = 0;
    c->busy = 0;
    if (c->dead) {
        srv_client_free(s, c);
        job_free(j);
        return;
    }
    if (j->stream_told) {
        stream_end(s, j);
    } else {
        client_reply_view(s, c, &j->reply, j->view, j->view_layers);
        j->view = NULL;
    }
    if (j->close_after)
        c->closing = 1;
    job_free(j);
    if (inl)
        return;
    if (client_process(s, c))
        return;
    client_events(s, c);
}

static void queue_push(skv_server *s, srv_job *j)
{
    pthread_mutex_lock(&s->qmu);
    j->next = NULL;
    if (s->qtail)
        s->qtail->next = j;
    else
        s->qhead = j;
    s->qtail = j;
    pthread_cond_signal(&s->qcv);
    pthread_mutex_unlock(&s->qmu);
}

/* A worker's job is done: hand it to the loop. */
static void job_done(skv_server *s, srv_job *j)
{
    pthread_mutex_lock(&s->dmu);
    j->next = NULL;
    if (s->dtail)
        s->dtail->next = j;
    else
        s->dhead = j;
    s->dtail = j;
    pthread_mutex_unlock(&s->dmu);
    uint64_t one = 1;
    ssize_t w = write(s->evfd, &one, sizeof one);
    (void)w; /* an eventfd write only fails when the counter is full: then it is set */
}

/* KV.PUT, SET and MSET: group commit. A worker queues its put; when no batch is being
 * written it becomes the committer: it takes every queued put (up to
 * put_batch of them and SKV_SERVER_PUT_BATCH_BYTES of KV) into one
 * seqkv_put_batch -- one durable commit -- replies to them all, and
 * repeats while puts are waiting. Puts that arrive while a batch is being
 * coded and written form the next one, so under load every commit
 * carries many puts and one put alone is not delayed. */
static void put_submit(skv_server *s, srv_job *j)
{
    pthread_mutex_lock(&s->pmu);
    j->next = NULL;
    if (s->ptail)
        s->ptail->next = j;
    else
        s->phead = j;
    s->ptail = j;
    if (s->pactive) {
        pthread_mutex_unlock(&s->pmu);
        return;
    }
    s->pactive = 1;
    srv_job *one, **b = skv_malloc((size_t)s->put_batch * sizeof *b);
    const size_t cap = b ? (size_t)s->put_batch : 1;
    if (!b)
        b = &one; /* no memory for a list: one put at a time */
    for (;;) {
        size_t n = 0;
        uint64_t bytes = 0;
        while (s->phead && n < cap &&
               (n == 0 || bytes + srv_put_kv_len(s->phead) <= SKV_SERVER_PUT_BATCH_BYTES)) {
            srv_job *x = s->phead;
            s->phead = x->next;
            if (!s->phead)
                s->ptail = NULL;
            bytes += srv_put_kv_len(x);
            b[n++] = x;
        }
        if (n == 0)
            break;
        pthread_mutex_unlock(&s->pmu);
        /* KV.PUTs first, then SET/MSETs: each kind one commit */
        size_t nput = 0;
        for (size_t i = 0; i < n; i++)
            if (b[i]->def->fn != srv_cmd_set && b[i]->def->fn != srv_cmd_mset) {
                srv_job *t = b[nput];
                b[nput++] = b[i];
                b[i] = t;
            }
        if (nput)
            srv_put_batch(s, b, nput);
        if (n > nput)
            srv_blob_batch(s, b + nput, n - nput);
        for (size_t i = 0; i < n; i++)
            job_done(s, b[i]);
        srv_maintain_kick(s); /* a profile may have crossed its auto-calibrate threshold */
        pthread_mutex_lock(&s->pmu);
    }
    s->pactive = 0;
    pthread_mutex_unlock(&s->pmu);
    if (b != &one)
        skv_free(b);
}

static void *worker_main(void *arg)
{
    skv_server *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->qmu);
        while (!s->qhead && !s->qstop)
            pthread_cond_wait(&s->qcv, &s->qmu);
        srv_job *j = s->qhead;
        if (!j) {
            pthread_mutex_unlock(&s->qmu);
            break;
        }
        s->qhead = j->next;
        if (!s->qhead)
            s->qtail = NULL;
        pthread_mutex_unlock(&s->qmu);

        if (j->def->flags & SRV_F_BATCH) {
            put_submit(s, j); /* replied to by whichever worker commits it */
            continue;
        }
        j->def->fn(s, j);
        job_done(s, j);
    }
    return NULL;
}

static void reply_now(skv_server *s, srv_client *c, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void reply_now(skv_server *s, srv_client *c, const char *code, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    skv_rbuf r = {0};
    skv_rbuf_error(&r, code, "%s", msg);
    client_reply(s, c, &r);
}

/* Check and run (or queue) one command. */
static void dispatch(skv_server *s, srv_client *c, skv_resp_cmd *cmd)
{
    const srv_cmd *def = srv_cmd_find(cmd->argv[0], cmd->argl[0]);
    char name[40];
    size_t nl = cmd->argl[0] < sizeof name - 1 ? cmd->argl[0] : sizeof name - 1;
    for (size_t i = 0; i < nl; i++) {
        uint8_t ch = cmd->argv[0][i];
        name[i] = ch >= 0x20 && ch < 0x7f && ch != '\'' ? (char)ch : '?';
    }
    name[nl] = 0;
    if (!def) {
        reply_now(s, c, "ERR", "unknown command '%s'", name);
        skv_resp_cmd_free(cmd);
        return;
    }
    if ((int)cmd->argc < def->min_args || (def->max_args >= 0 && (int)cmd->argc > def->max_args)) {
        reply_now(s, c, "ERR", "wrong number of arguments for '%s' command", def->name);
        skv_resp_cmd_free(cmd);
        return;
    }
    if (c->tenant < 0 && !(def->flags & SRV_F_NOAUTH)) {
        reply_now(s, c, "NOAUTH", "Authentication required.");
        skv_resp_cmd_free(cmd);
        return;
    }
    if ((def->flags & SRV_F_ADMIN) && !c->admin) {
        reply_now(s, c, "NOPERM", "'%s' needs an admin tenant", def->name);
        skv_resp_cmd_free(cmd);
        return;
    }
    char lcode[16], lmsg[200];
    if (!(def->flags & SRV_F_LOOP) && c->tenant >= 0 &&
        srv_over_limits(s, c, def, cmd, lcode, lmsg, sizeof lmsg)) {
        reply_now(s, c, lcode, "%s", lmsg);
        skv_resp_cmd_free(cmd);
        return;
    }
    srv_job *j = skv_calloc(1, sizeof *j);
    if (!j) {
        reply_now(s, c, "ERR", "out of memory");
        c->closing = 1;
        skv_resp_cmd_free(cmd);
        return;
    }
    j->c = c;
    j->def = def;
    j->cmd = *cmd;
    memset(cmd, 0, sizeof *cmd);
    j->tenant = c->tenant;
    j->admin = c->admin;
    j->proto = c->proto;
    j->t0 = srv_now();
    srv_snap_take(s, &j->snap);
    if (def->flags & (SRV_F_LOOP | SRV_F_HOT)) {
        j->inline_ = 1;
        j->on_loop = !(def->flags & SRV_F_LOOP);
        c->busy = 1;
        def->fn(s, j);
        if (!j->declined) {
            job_complete(s, j);
            return;
        }
        j->inline_ = j->on_loop = 0; /* a worker's after all */
        j->reply.len = 0;
    }
    c->busy = 1;
    s->inflight++;
    queue_push(s, j);
}

/* Parse and dispatch what the client has sent, while it may, then send
 * what is pending. -1 when the client was freed. */
static int client_process(skv_server *s, srv_client *c)
{
again:
    while (!c->busy && !c->closing && !s->stopping && c->in_len > 0 &&
           pending_out(c) < OUT_PAUSE) {
        size_t used = 0;
        skv_resp_cmd cmd;
        int rc = skv_resp_feed(&c->rp, c->in, c->in_len, &used, &cmd);
        if (used) {
            memmove(c->in, c->in + used, c->in_len - used);
            c->in_len -= used;
        }
        if (rc == SKV_RESP_ERROR) {
            reply_now(s, c, "ERR", "%s", c->rp.err);
            c->closing = 1;
            s->proto_errors++;
            break;
        }
        if (rc == SKV_RESP_NEED) {
            if (used == 0) {
                if (c->in_len == RBUF_CAP) { /* cannot happen: the parser caps lines */
                    reply_now(s, c, "ERR", "Protocol error: request line too long");
                    c->closing = 1;
                    s->proto_errors++;
                }
                break;
            }
            continue;
        }
        dispatch(s, c, &cmd);
    }
    /* parsing paused for the output may go on once a write drains it: no
     * event would come for requests already buffered */
    const int paused = !c->busy && c->in_len > 0 && pending_out(c) >= OUT_PAUSE;
    if (client_write(s, c))
        return -1;
    if (paused && pending_out(c) < OUT_PAUSE)
        goto again;
    return 0;
}

static void client_read(skv_server *s, srv_client *c)
{
    for (int round = 0; round < 16; round++) {
        ssize_t r;
        size_t room = 0;
        uint8_t *d = c->in_len == 0 ? skv_resp_direct(&c->rp, &room) : NULL;
        if (d) {
            r = recv(c->fd, d, room, 0);
            if (r > 0)
                skv_resp_direct_done(&c->rp, (size_t)r);
        } else if (c->rp.err[0]) {
            reply_now(s, c, "ERR", "%s", c->rp.err);
            c->closing = 1;
            s->proto_errors++;
            if (client_write(s, c) == 0)
                client_events(s, c);
            return;
        } else {
            if (c->in_len == RBUF_CAP)
                break;
            r = recv(c->fd, c->in + c->in_len, RBUF_CAP - c->in_len, 0);
            if (r > 0)
                c->in_len += (size_t)r;
        }
        if (r == 0) {
            srv_client_free(s, c);
            return;
        }
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                srv_client_free(s, c);
            else
                client_events(s, c);
            return;
        }
        if (client_process(s, c))
            return;
        if (c->fd < 0)
            return;
        if (c->busy || c->closing || s->stopping)
            break;
    }
    client_events(s, c);
}

/* ------------------------------------------------------------------------
 * Create, run, stop, free
 * ---------------------------------------------------------------------- */
/* SKV_SERVER_CACHE_SHARE of physical memory (64 MiB when unknown) */
static uint64_t default_cache_bytes(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || psz <= 0)
        return 64u << 20;
    return (uint64_t)pages * (uint64_t)psz / SKV_SERVER_CACHE_SHARE;
}

int skv_server_create(const skv_server_options *o, skv_server **out)
{
    *out = NULL;
    if (!o || !o->db || !o->socket_path)
        return skv_error(SKV_ERR_ARG, "a store directory and a socket path are required");
    if (sodium_init() < 0)
        return skv_error(SKV_ERR_IO, "libsodium failed to initialise");
    skv_server *s = skv_calloc(1, sizeof *s);
    if (!s)
        return SKV_ERR_NOMEM;
    s->o = *o;
    s->lfd = s->tfd = s->epfd = s->evfd = s->sigfd = -1;
    pthread_mutex_init(&s->qmu, NULL);
    pthread_cond_init(&s->qcv, NULL);
    pthread_mutex_init(&s->dmu, NULL);
    pthread_mutex_init(&s->pmu, NULL);
    pthread_mutex_init(&s->smu, NULL);
    s->t_start = srv_now();
    s->own_uid = (uint32_t)getuid();
    int rc = 0;
    s->socket_path = skv_strdup(o->socket_path);
    s->o.socket_path = s->socket_path;
    if (!s->socket_path) {
        rc = SKV_ERR_NOMEM;
        goto fail;
    }
    if (o->config) {
        rc = srv_read_config(o->config, &s->cfg);
        if (rc)
            goto fail;
    } else {
        /* no config: the server's own uid, as tenant "default", admin */
        skv_server_config_default(&s->cfg);
        snprintf(s->cfg.tenants[0].name, sizeof s->cfg.tenants[0].name, "default");
        s->cfg.tenants[0].admin = 1;
        s->cfg.ntenants = 1;
        s->cfg.rules[0] = (skv_server_rule){SKV_RULE_UID, s->own_uid, 0};
        s->cfg.nrules = 1;
    }
    for (size_t i = 0; i < s->cfg.ntenants; i++)
        s->have_tokens |= s->cfg.tenants[i].has_token;
    s->ts = skv_calloc(SKV_SERVER_MAX_TENANTS, sizeof *s->ts); /* (a reload adds tenants) */
    if (!s->ts) {
        rc = SKV_ERR_NOMEM;
        goto fail;
    }
    s->nthreads = o->threads > 0 ? o->threads : s->cfg.threads;
    if (s->nthreads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        s->nthreads = n < 1 ? 1 : n > 8 ? 8 : (int)n;
    }

    s->put_batch = o->put_batch > 0 ? o->put_batch : s->cfg.put_batch;
    if (s->put_batch <= 0)
        s->put_batch = SKV_SERVER_PUT_BATCH;

    if (o->handle_signals) {
        /* before any thread starts (the store's read pool, the workers):
         * they inherit the mask, and the loop's signalfd alone sees them */
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGHUP); /* a config reload */
        pthread_sigmask(SIG_BLOCK, &set, NULL);
    }
    /* A cold GET decodes into buffers of its reply's size and frees them
     * once sent: keep such blocks in the heap for the next GET rather than
     * returning them to the kernel and faulting their pages in again. */
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    seqkv_options so;
    memset(&so, 0, sizeof so);
    so.cache_bytes = o->has_cache_bytes ? o->cache_bytes
                   : s->cfg.has_cache_bytes ? s->cfg.cache_bytes : default_cache_bytes();
    so.master_key = o->master_key;
    so.file_min = s->cfg.value_file_min;
    so.no_sync = o->no_sync;
    so.budget = o->budget;
    /* the writer (one at a time: a group commit's puts, a compaction step)
     * codes a record's streams on every core, and a get alone decodes on
     * every core */
    so.threads = s->nthreads;
    so.read_threads = s->nthreads;
    so.quiet = 1;
    rc = seqkv_open(o->db, &so, &s->db);
    if (rc)
        goto fail;

    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    s->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->epfd < 0 || s->evfd < 0) {
        rc = skv_error(SKV_ERR_IO, "epoll/eventfd: %s", strerror(errno));
        goto fail;
    }
    if (o->handle_signals) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGHUP);
        s->sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
        if (s->sigfd < 0) {
            rc = skv_error(SKV_ERR_IO, "signalfd: %s", strerror(errno));
            goto fail;
        }
    }
    rc = srv_listen(s, o->socket_path);
    if (rc)
        goto fail;
    const int port = o->port ? o->port : s->cfg.port;
    if (port && !s->have_tokens) {
        rc = skv_error(SKV_ERR_ARG, "TCP port %d: a TCP peer has no uid, so it must AUTH, and "
                       "no tenant has a token (config: tenant NAME token SECRET)", port);
        goto fail;
    }
    if (port && (rc = srv_listen_tcp(s, o->bind ? o->bind : s->cfg.bind[0] ? s->cfg.bind
                                                                           : "127.0.0.1", port)))
        goto fail;
    struct epoll_event e = {.events = EPOLLIN, .data.ptr = &s->lfd};
    epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->lfd, &e);
    e.data.ptr = &s->tfd;
    if (s->tfd >= 0)
        epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->tfd, &e);
    e.data.ptr = &s->evfd;
    epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->evfd, &e);
    if (s->sigfd >= 0) {
        e.data.ptr = &s->sigfd;
        epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->sigfd, &e);
    }

    s->thr = skv_calloc((size_t)s->nthreads, sizeof *s->thr);
    if (!s->thr) {
        rc = SKV_ERR_NOMEM;
        goto fail;
    }
    for (int i = 0; i < s->nthreads; i++) {
        if (pthread_create(&s->thr[i], NULL, worker_main, s) != 0) {
            rc = skv_error(SKV_ERR_IO, "pthread_create failed");
            goto fail;
        }
        s->started++;
    }
    if ((rc = srv_maintain_start(s)) || (rc = srv_remote_start(s)) || (rc = srv_metrics_start(s)))
        goto fail;
    srv_log(s, "listening on %s%s%s (store %s, %d worker threads, %zu tenants, max %zu clients, "
            "hot tier %llu MiB)", o->socket_path, s->tfd >= 0 ? " and TCP " : "", s->tcp_addr,
            o->db, s->nthreads, s->cfg.ntenants,
            s->cfg.max_clients, (unsigned long long)(so.cache_bytes >> 20));
    *out = s;
    return 0;
fail:
    skv_server_free(s);
    return rc;
}

void skv_server_stop(skv_server *s)
{
    atomic_store(&s->stop_req, 1);
    uint64_t one = 1;
    ssize_t w = write(s->evfd, &one, sizeof one);
    (void)w;
}

static void begin_stop(skv_server *s)
{
    if (s->stopping)
        return;
    s->stopping = 1;
    s->stop_at = srv_now();
    srv_log(s, "stopping: %zu requests in flight", s->inflight);
    /* a calibration or compaction, in the background or a request's, stops
     * now rather than after the drain */
    seqkv_stop_background(s->db);
    if (s->tfd >= 0) {
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, s->tfd, NULL);
        close(s->tfd);
        s->tfd = -1;
    }
    if (s->lfd >= 0) {
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, s->lfd, NULL);
        close(s->lfd);
        s->lfd = -1;
    }
    for (srv_client *c = s->clients, *n; c; c = n) {
        n = c->next;
        if (c->fd < 0)
            continue;
        if (!c->busy && !pending_out(c))
            srv_client_free(s, c);
        else
            client_events(s, c);
    }
}

static int all_flushed(skv_server *s)
{
    for (srv_client *c = s->clients; c; c = c->next)
        if (c->fd >= 0 && pending_out(c))
            return 0;
    return 1;
}


int skv_server_run(skv_server *s)
{
    struct epoll_event ev[64];
    for (;;) {
        if (atomic_load(&s->stop_req))
            begin_stop(s);
        if (s->stopping && s->inflight == 0 &&
            (all_flushed(s) || srv_now() - s->stop_at > STOP_FLUSH_S))
            break;
        int n = epoll_wait(s->epfd, ev, 64, s->stopping ? 50 : s->nunauth ? 1000 : -1);
        if (s->nunauth && srv_now() - s->last_sweep >= 1.0)
            srv_sweep_unauth(s);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return skv_error(SKV_ERR_IO, "epoll_wait: %s", strerror(errno));
        }
        for (int i = 0; i < n; i++) {
            void *p = ev[i].data.ptr;
            if (p == &s->lfd || p == &s->tfd) {
                if (*(int *)p >= 0)
                    srv_accept(s, *(int *)p, p == &s->tfd);
            } else if (p == &s->evfd) {
                uint64_t cnt;
                ssize_t r = read(s->evfd, &cnt, sizeof cnt);
                (void)r;
                pthread_mutex_lock(&s->dmu);
                srv_job *j = s->dhead, *t = s->told;
                s->dhead = s->dtail = NULL;
                s->told = NULL;
                for (srv_job *x = t; x; x = x->told_next) {
                    x->loop_next = x->told_next;
                    x->stream_seen = x->stream_ready;
                    x->stream_posted = 0;
                }
                pthread_mutex_unlock(&s->dmu);
                /* layers first: a job done in this batch was told of them before */
                for (srv_job *next; t; t = next) {
                    next = t->loop_next;
                    stream_layers(s, t);
                }
                while (j) {
                    srv_job *next = j->next;
                    job_complete(s, j);
                    j = next;
                }
            } else if (p == &s->sigfd) {
                struct signalfd_siginfo si;
                while (read(s->sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
                    srv_log(s, "signal %u", si.ssi_signo);
                    if (si.ssi_signo == SIGHUP)
                        srv_reload(s); /* (logs what it did or why not) */
                    else
                        atomic_store(&s->stop_req, 1);
                }
            } else {
                srv_client *c = p;
                if (c->fd < 0)
                    continue;
                if (ev[i].events & (EPOLLERR | EPOLLHUP) && !(ev[i].events & EPOLLIN)) {
                    srv_client_free(s, c);
                    continue;
                }
                if (ev[i].events & EPOLLOUT) {
                    if (client_write(s, c))
                        continue;
                    if (client_process(s, c))
                        continue;
                    if (c->fd < 0)
                        continue;
                    client_events(s, c);
                }
                if ((ev[i].events & EPOLLIN) && c->fd >= 0 && !c->busy && !c->closing)
                    client_read(s, c);
            }
        }
        release_freed(s);
        srv_metrics_publish(s);
    }
    for (srv_client *c = s->clients, *n; c; c = n) {
        n = c->next;
        if (c->fd >= 0)
            srv_client_free(s, c);
    }
    release_freed(s);
    srv_log(s, "stopped");
    return 0;
}

void skv_server_free(skv_server *s)
{
    if (!s)
        return;
    srv_maintain_stop(s);
    pthread_mutex_lock(&s->qmu);
    s->qstop = 1;
    pthread_cond_broadcast(&s->qcv);
    pthread_mutex_unlock(&s->qmu);
    for (int i = 0; i < s->started; i++)
        pthread_join(s->thr[i], NULL);
    srv_metrics_stop(s);
    srv_remote_stop(s); /* what it queued is written first */
    /* jobs still queued or done (a run that ended early) */
    for (srv_job *j = s->qhead, *n; j; j = n) {
        n = j->next;
        j->c->busy = 0;
        job_free(j);
    }
    for (srv_job *j = s->dhead, *n; j; j = n) {
        n = j->next;
        j->c->busy = 0;
        job_free(j);
    }
    while (s->clients) {
        s->clients->busy = 0;
        srv_client_free(s, s->clients);
    }
    release_freed(s);
    if (s->lfd >= 0)
        close(s->lfd);
    if (s->tfd >= 0)
        close(s->tfd);
    if (s->socket_path && s->sock_ino) {
        struct stat st;
        if (lstat(s->socket_path, &st) == 0 && st.st_ino == s->sock_ino &&
            st.st_dev == s->sock_dev && S_ISSOCK(st.st_mode))
            unlink(s->socket_path);
    }
    if (s->epfd >= 0)
        close(s->epfd);
    if (s->evfd >= 0)
        close(s->evfd);
    if (s->sigfd >= 0)
        close(s->sigfd);
    seqkv_close(s->db);
    pthread_mutex_destroy(&s->qmu);
    pthread_cond_destroy(&s->qcv);
    pthread_mutex_destroy(&s->dmu);
    pthread_mutex_destroy(&s->pmu);
    pthread_mutex_destroy(&s->smu);
    sodium_memzero(&s->cfg, sizeof s->cfg);
    skv_free(s->thr);
    skv_free(s->ts);
    skv_free(s->socket_path);
    skv_free(s);
}
