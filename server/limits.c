/* Per-tenant limits (server/README.md, "Tenants and the config file"):
 * each tenant's connections, bytes of requests in flight and PUT bytes a
 * second, and the count of connections not yet tied to a tenant. Loop
 * thread; the counts live in the tenants' statistics under smu, where
 * INFO reads them. */
#include <stdio.h>

#include "server_int.h"

/* The client is tenant t now (-1: none): counts follow (loop thread) */
void srv_set_tenant(skv_server *s, srv_client *c, int t)
{
    pthread_mutex_lock(&s->smu);
    if (c->tenant >= 0)
        s->ts[c->tenant].conns--;
    else
        s->nunauth--;
    if (t >= 0)
        s->ts[t].conns++;
    else
        s->nunauth++;
    pthread_mutex_unlock(&s->smu);
    c->tenant = t;
}

/* 1 when tenant t has all the connections it may (refusals counted) */
int srv_tenant_full(skv_server *s, int t)
{
    const uint64_t lim = s->cfg.tenants[t].max_clients;
    pthread_mutex_lock(&s->smu);
    int full = lim && s->ts[t].conns >= lim;
    s->ts[t].busy += full;
    pthread_mutex_unlock(&s->smu);
    return full;
}

/* The tenant's limits on a request about to run: its bytes in flight (a
 * request larger than the limit is -TOOLARGE, one that would pass it with
 * the others -BUSY) and, for KV.PUT, SET and MSET, its PUT bytes a second
 * (a bucket a second deep); 1 when it is refused, with the reply's code
 * and message */
int srv_over_limits(skv_server *s, srv_client *c, const srv_cmd *def, const skv_resp_cmd *cmd,
                    char code[16], char *msg, size_t cap)
{
    const skv_server_tenant *tc = &s->cfg.tenants[c->tenant];
    if (s->tgone[c->tenant]) { /* a reload took it out of the config */
        snprintf(code, 16, "NOPERM");
        snprintf(msg, cap, "tenant %s is no longer in the config: AUTH as another tenant",
                 tc->name);
        return 1;
    }
    uint64_t bytes = 0;
    for (size_t i = 1; i < cmd->argc; i++)
        bytes += cmd->argl[i];
    const int put = (def->flags & SRV_F_BATCH) != 0;
    int refuse = 0;
    pthread_mutex_lock(&s->smu);
    srv_tstats *ts = &s->ts[c->tenant];
    if (tc->max_inflight && bytes > tc->max_inflight)
        refuse = 1;
    else if (tc->max_inflight && ts->inflight_bytes + bytes > tc->max_inflight)
        refuse = 2;
    if (!refuse && put && tc->put_rate) {
        const double now = srv_now(), rate = (double)tc->put_rate;
        double *tok = &s->put_tokens[c->tenant], *at = &s->put_at[c->tenant];
        *tok = *at == 0 ? rate : *tok + (now - *at) * rate;
        if (*tok > rate)
            *tok = rate;
        *at = now;
        if (*tok <= 0)
            refuse = 3;
        else
            *tok -= (double)bytes; /* (may go below 0: what follows waits it out) */
    }
    if (refuse) {
        ts->busy++;
    } else {
        ts->inflight_bytes += bytes;
        c->req_bytes = bytes;
    }
    const uint64_t inflight = ts->inflight_bytes;
    pthread_mutex_unlock(&s->smu);
    snprintf(code, 16, "%s", refuse == 1 ? "TOOLARGE" : "BUSY");
    if (refuse == 1)
        snprintf(msg, cap, "a request of %llu bytes is over tenant %s's max-inflight (%llu)",
                 (unsigned long long)bytes, tc->name, (unsigned long long)tc->max_inflight);
    else if (refuse == 2)
        snprintf(msg, cap, "tenant %s has %llu bytes of requests in flight (max-inflight %llu): "
                 "try again", tc->name, (unsigned long long)inflight,
                 (unsigned long long)tc->max_inflight);
    else if (refuse == 3)
        snprintf(msg, cap, "tenant %s is over its put-rate (%llu bytes a second): try again",
                 tc->name, (unsigned long long)tc->put_rate);
    return refuse != 0;
}

