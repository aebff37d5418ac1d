/* GET /metrics over HTTP/1.x on a loopback address (metrics.h): one thread
 * that accepts a connection, reads one request head (SRV_HTTP_HEAD_MAX
 * bytes, within 2 s), answers it and closes -- Prometheus scrapes every
 * few seconds, so one at a time is plenty, and nothing here touches the
 * event loop's state: the loop publishes its few figures (srv_snap) under
 * smu, the rest comes from the store and the counters' own locks. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "http.h"
#include "metrics.h"
#include "server_int.h"

#define IO_TIMEOUT_S 5   /* sending the reply */
#define HEAD_DEADLINE_S 2.0 /* the whole request head, however it trickles in: one
                               slow client holds the endpoint no longer */

struct srv_metrics {
    int fd;
    char addr[80];
    pthread_t thr;
    int started;
    atomic_int stop;
};

static int send_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static void reply(int fd, const char *status, const char *ctype, const char *extra,
                  const void *body, size_t len, int head_only)
{
    char h[512];
    int n = snprintf(h, sizeof h,
                     "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
                     "Connection: close\r\n\r\n",
                     status, ctype, len, extra);
    if (n > 0 && (size_t)n < sizeof h && send_all(fd, h, (size_t)n) == 0 && !head_only && len)
        send_all(fd, body, len);
}

static void plain(int fd, const char *status, const char *extra, const char *text)
{
    reply(fd, status, "text/plain; charset=utf-8", extra, text, strlen(text), 0);
}

/* One connection: its request read and answered */
static void serve_one(skv_server *s, int fd)
{
    struct timeval tv = {IO_TIMEOUT_S, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    char buf[SRV_HTTP_HEAD_MAX];
    size_t len = 0;
    srv_http_req q;
    int rc = 0;
    const double deadline = srv_now() + HEAD_DEADLINE_S;
    while (rc == 0) {
        if (len == sizeof buf) {
            plain(fd, "431 Request Header Fields Too Large", "", "request head too large\n");
            return;
        }
        const double left = deadline - srv_now();
        struct pollfd p = {fd, POLLIN, 0};
        if (left <= 0 || poll(&p, 1, (int)(left * 1000) + 1) <= 0)
            return; /* silent, or trickling, past the deadline */
        ssize_t r = recv(fd, buf + len, sizeof buf - len, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return; /* gone, or silent past the timeout */
        len += (size_t)r;
        rc = srv_http_parse(buf, len, &q);
    }
    if (rc < 0) {
        plain(fd, "400 Bad Request", "", "not an HTTP/1.x request\n");
        return;
    }
    if (q.method == SRV_HTTP_OTHER) {
        plain(fd, "405 Method Not Allowed", "Allow: GET, HEAD\r\n", "GET /metrics\n");
        return;
    }
    if (strcmp(q.path, "/metrics") != 0) {
        plain(fd, "404 Not Found", "", "seqkv serves GET /metrics here\n");
        return;
    }
    skv_rbuf b = {0};
    if (srv_metrics_render(s, &b))
        plain(fd, "503 Service Unavailable", "", "out of memory rendering the metrics\n");
    else
        reply(fd, "200 OK", "text/plain; version=0.0.4; charset=utf-8", "", b.p, b.len,
              q.method == SRV_HTTP_HEAD);
    skv_rbuf_free(&b);
}

static void *metrics_thread(void *arg)
{
    skv_server *s = arg;
    srv_metrics *m = s->metrics;
    while (!atomic_load(&m->stop)) {
        struct pollfd p = {m->fd, POLLIN, 0};
        if (poll(&p, 1, 200) <= 0)
            continue;
        int c = accept4(m->fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            continue;
        serve_one(s, c);
        shutdown(c, SHUT_WR);
        close(c);
    }
    return NULL;
}

int srv_metrics_start(skv_server *s)
{
    const char *spec = s->o.metrics ? s->o.metrics : s->cfg.metrics[0] ? s->cfg.metrics : NULL;
    char host[64];
    int port;
    if (!spec)
        return SKV_OK;
    if (skv_server_split_addr(spec, host, sizeof host, &port))
        return skv_error(SKV_ERR_ARG, "metrics %s: not ADDR:PORT", spec);
    srv_metrics *m = skv_calloc(1, sizeof *m);
    if (!m)
        return SKV_ERR_NOMEM;
    int rc = srv_loopback_listen(host, port, &m->fd, m->addr, sizeof m->addr);
    if (rc) {
        skv_free(m);
        return rc;
    }
    s->metrics = m;
    srv_metrics_publish(s);
    if (pthread_create(&m->thr, NULL, metrics_thread, s) != 0)
        return skv_error(SKV_ERR_IO, "pthread_create failed");
    m->started = 1;
    srv_log(s, "metrics on http://%s/metrics", m->addr);
    return SKV_OK;
}

void srv_metrics_stop(skv_server *s)
{
    srv_metrics *m = s->metrics;
    if (!m)
        return;
    atomic_store(&m->stop, 1);
    if (m->started)
        pthread_join(m->thr, NULL);
    close(m->fd);
    skv_free(m);
    s->metrics = NULL;
}

void srv_metrics_publish(skv_server *s)
{
    if (!s->metrics)
        return;
    srv_snap sn;
    srv_snap_take(s, &sn);
    pthread_mutex_lock(&s->smu);
    s->msnap = sn;
    pthread_mutex_unlock(&s->smu);
}
