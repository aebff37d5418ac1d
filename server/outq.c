/* A client's unsent replies (outq.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "outq.h"
#include "skv_base.h"

#define COALESCE (64u << 10) /* replies smaller than this are copied into the tail buffer */
#define SEND_IOV 64          /* iovecs one sendmsg takes */

struct srv_oseg {
    srv_oseg *next;
    skv_rbuf buf;  /* bytes; off of them sent */
    size_t off;
    seqkv_view *view; /* or a view: iov[idx..niov) unsent, iov[idx] advanced in place */
    struct iovec *iov;
    size_t niov, idx;
    size_t avail;     /* iov[.. avail) may be sent (a streamed view: its ready layers) */
    size_t layer_iov, layer_bytes; /* per layer (a view in layers) */
    int owns;         /* the view is the segment's (freed with it) */
    char *text;       /* the views' bulk headers */
};

static void consume(srv_outq *q, size_t w);

static void seg_free(srv_oseg *g)
{
    skv_rbuf_free(&g->buf);
    if (g->owns)
        seqkv_view_free(g->view);
    skv_free(g->iov);
    skv_free(g->text);
    skv_free(g);
}

static void push(srv_outq *q, srv_oseg *g, size_t bytes)
{
    if (q->tail)
        q->tail->next = g;
    else
        q->head = g;
    q->tail = g;
    q->pending += bytes;
}

int srv_outq_rbuf(srv_outq *q, skv_rbuf *r)
{
    if (r->len == 0) {
        skv_rbuf_free(r);
        return 0;
    }
    srv_oseg *t = q->tail;
    if (t && !t->view && r->len < COALESCE) {
        size_t before = t->buf.len;
        skv_rbuf_raw(&t->buf, r->p, r->len);
        if (t->buf.oom) {
            t->buf.len = before;
            t->buf.oom = 0;
            skv_rbuf_free(r);
            return -1;
        }
        q->pending += r->len;
        skv_rbuf_free(r);
        return 0;
    }
    srv_oseg *g = skv_calloc(1, sizeof *g);
    if (!g) {
        skv_rbuf_free(r);
        return -1;
    }
    g->buf = *r;
    memset(r, 0, sizeof *r);
    push(q, g, g->buf.len);
    return 0;
}

/* A segment of view v (layers > 0: in layers, [0, ready) sendable), the
 * view the segment's when own; NULL without memory */
static srv_oseg *view_seg(seqkv_view *v, int layers, size_t ready, int own)
{
    static const char crlf[2] = {'\r', '\n'};
    const size_t np = seqkv_view_pieces(v), L = layers > 0 ? (size_t)layers : 1;
    srv_oseg *g = skv_calloc(1, sizeof *g);
    if (g) {
        g->view = v;
        g->owns = own;
        g->iov = skv_malloc((np + 2 * L) * sizeof *g->iov);
        g->text = layers > 0 ? skv_malloc(L * 24) : NULL;
    }
    if (!g || !g->iov || (layers > 0 && !g->text)) {
        if (g)
            seg_free(g);
        return NULL;
    }
    /* the pieces are layer-major, K then V: np / L of them a layer */
    const size_t per = np / L, slab = seqkv_view_bytes(v) / L;
    size_t bytes = 0;
    for (size_t l = 0; l < L; l++) {
        if (layers > 0) {
            char *h = g->text + 24 * l;
            int hl = snprintf(h, 24, "$%zu\r\n", slab);
            g->iov[g->niov++] = (struct iovec){h, (size_t)hl};
            bytes += (size_t)hl;
        }
        for (size_t i = l * per; i < (l + 1) * per; i++) {
            size_t len;
            const void *p = seqkv_view_piece(v, i, &len);
            g->iov[g->niov++] = (struct iovec){(void *)p, len};
            bytes += len;
        }
        g->iov[g->niov++] = (struct iovec){(void *)crlf, 2};
        bytes += 2;
    }
    g->layer_iov = g->niov / L;
    g->layer_bytes = bytes / L;
    g->avail = (ready < L ? ready : L) * g->layer_iov;
    return g;
}

int srv_outq_view(srv_outq *q, seqkv_view *v, int layers)
{
    srv_oseg *g = view_seg(v, layers, (size_t)(layers > 0 ? layers : 1), 1);
    if (!g) {
        seqkv_view_free(v);
        return -1;
    }
    push(q, g, g->layer_bytes * g->niov / g->layer_iov);
    return 0;
}

int srv_outq_view_stream(srv_outq *q, seqkv_view *v, int layers, size_t ready)
{
    srv_oseg *g = q->stream || layers <= 0 ? NULL : view_seg(v, layers, ready, 0);
    if (!g)
        return -1;
    const size_t L = (size_t)layers;
    push(q, g, g->layer_bytes * L);
    q->waiting += g->layer_bytes * (L - g->avail / g->layer_iov);
    q->stream = g;
    return 0;
}

void srv_outq_stream_ready(srv_outq *q, size_t ready)
{
    srv_oseg *g = q->stream;
    if (!g || ready * g->layer_iov <= g->avail)
        return;
    if (ready * g->layer_iov > g->niov)
        ready = g->niov / g->layer_iov;
    q->waiting -= g->layer_bytes * (ready - g->avail / g->layer_iov);
    g->avail = ready * g->layer_iov;
}

int srv_outq_stream_end(srv_outq *q, int whole)
{
    srv_oseg *g = q->stream;
    if (!g)
        return -1;
    if (whole) {
        srv_outq_stream_ready(q, g->niov / g->layer_iov);
    } else { /* cut: the layers not ready are never sent */
        q->pending -= q->waiting;
        q->waiting = 0;
        g->niov = g->avail;
    }
    g->owns = 1;
    q->stream = NULL;
    consume(q, 0); /* (frees a cut one with nothing left to send) */
    return 0;
}

size_t srv_outq_sendable(const srv_outq *q)
{
    return q->pending - q->waiting;
}

/* The first SEND_IOV unsent ranges */
static int gather(const srv_outq *q, struct iovec *iov)
{
    int n = 0;
    for (const srv_oseg *g = q->head; g && n < SEND_IOV; g = g->next) {
        if (!g->view) {
            iov[n++] = (struct iovec){g->buf.p + g->off, g->buf.len - g->off};
            continue;
        }
        for (size_t i = g->idx; i < g->avail && n < SEND_IOV; i++)
            iov[n++] = g->iov[i];
        if (g->avail < g->niov)
            break; /* its later layers are still decoding */
    }
    return n;
}

/* w bytes were sent: advance, freeing finished segments */
static void consume(srv_outq *q, size_t w)
{
    q->pending -= w;
    while (q->head) {
        srv_oseg *g = q->head;
        if (!g->view) {
            size_t k = g->buf.len - g->off < w ? g->buf.len - g->off : w;
            g->off += k;
            w -= k;
        } else {
            while (w > 0 && g->idx < g->avail) {
                struct iovec *v = &g->iov[g->idx];
                size_t k = v->iov_len < w ? v->iov_len : w;
                v->iov_base = (uint8_t *)v->iov_base + k;
                v->iov_len -= k;
                w -= k;
                if (v->iov_len == 0)
                    g->idx++;
            }
        }
        int done = g->view ? g->idx == g->niov : g->off == g->buf.len;
        if (!done)
            break;
        q->head = g->next;
        if (!q->head)
            q->tail = NULL;
        seg_free(g);
    }
}

int srv_outq_write(srv_outq *q, int fd)
{
    struct iovec iov[SEND_IOV];
    while (q->pending > q->waiting) {
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)gather(q, iov)};
        if (m.msg_iovlen == 0)
            return 0;
        ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            return -1;
        }
        consume(q, (size_t)w);
    }
    return 0;
}

void srv_outq_clear(srv_outq *q)
{
    for (srv_oseg *g = q->head, *n; g; g = n) {
        n = g->next;
        seg_free(g);
    }
    q->head = q->tail = NULL;
    q->pending = q->waiting = 0;
    q->stream = NULL;
}
