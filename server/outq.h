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
/* Send what the socket takes: 0, or -1 on a socket error (errno). */
int srv_outq_write(srv_outq *q, int fd);
/* Drop everything unsent. */
void srv_outq_clear(srv_outq *q);
#endif
