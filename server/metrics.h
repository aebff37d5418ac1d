/* Prometheus's view of the server (server/metrics*.c): GET /metrics on a
 * loopback address, in the text exposition format (version 0.0.4), served
 * by a thread of its own so that a scrape never waits on the event loop
 * nor delays it. The endpoint shows every tenant's figures: it is the
 * operator's (server/README.md "Metrics"). */
#ifndef SKV_SRV_METRICS_H
#define SKV_SRV_METRICS_H
#include "resp.h"

typedef struct skv_server skv_server;
typedef struct srv_metrics srv_metrics;

/* Listen on the options' or the config's metrics address and start the
 * thread (nothing to do without one): 0, SKV_ERR_ARG (not loopback, a bad
 * address) or SKV_ERR_IO */
int srv_metrics_start(skv_server *s);
/* Stop the thread, close the socket; NULL-safe */
void srv_metrics_stop(skv_server *s);
/* The loop's figures copied where the thread reads them (loop thread,
 * after each batch of events) */
void srv_metrics_publish(skv_server *s);
/* The exposition (metrics.c) into b; SKV_ERR_NOMEM when b ran out */
int srv_metrics_render(skv_server *s, skv_rbuf *b);
#endif
