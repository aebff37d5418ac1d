/* A client's unsent replies (server/outq.c): a queue of segments, each
 * either bytes (small replies coalesce into one buffer; a large one is
 * moved in, not copied) or a store view whose pieces are sent straight
 * from the hot tier's memory with sendmsg -- a GET's KV is never copied
 * into a reply buffer. Loop thread only. */
#ifndef SKV_SERVER_OUTQ_H
#define SKV_SERVER_OUTQ_H
#include <stddef.h>

#include "resp.h"
#include "seqkv.h"

typedef struct srv_oseg srv_oseg;

typedef struct {
    srv_oseg *head, *tail;
    size_t pending; /* unsent bytes */
    size_t waiting; /* of them, a streamed view's layers not yet decoded */
    srv_oseg *stream; /* that view's segment, while it streams */
} srv_outq;

/* Queue the bytes of r (taking its buffer; r is emptied). -1 without
 * memory (nothing queued). */
int srv_outq_rbuf(srv_outq *q, skv_rbuf *r);
/* Queue view v (taking it: it is freed once sent or dropped) as the
 * payload of a bulk string whose header was queued before it, followed by
 * its CRLF; layers > 0: as that many bulk strings, one per layer (the
 * array header queued before), each with its own header. -1 without
 * memory (v is freed). */
int srv_outq_view(srv_outq *q, seqkv_view *v, int layers);
/* Queue view v as srv_outq_view does with layers > 0, but streamed: only
 * its layers [0, ready) may be sent yet, and v stays the caller's (the
 * decoder still writes its later layers) until srv_outq_stream_end. -1
 * without memory (nothing queued). One streamed view at a time. */
int srv_outq_view_stream(srv_outq *q, seqkv_view *v, int layers, size_t ready);
/* The streamed view's layers [0, ready) may be sent (none: a no-op) */
void srv_outq_stream_ready(srv_outq *q, size_t ready);
/* The streamed view is done: whole, every layer may be sent; else the
 * reply is cut after the layers already ready (the caller closes the
 * connection once they are sent). The queue takes the view (freed once
 * sent or dropped): 0, or -1 when its segment was dropped meanwhile (the
 * view stays the caller's). */
int srv_outq_stream_end(srv_outq *q, int whole);
/* Bytes that can be sent now (pending, less the layers still decoding) */
size_t srv_outq_sendable(const srv_outq *q);
/* Send what the socket takes: 0, or -1 on a socket error (errno). */
int srv_outq_write(srv_outq *q, int fd);
/* Drop everything unsent. */
void srv_outq_clear(srv_outq *q);
#endif
