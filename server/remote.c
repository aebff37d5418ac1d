/* The shared remote tier on a Redis Cluster (remote.h). One writer thread
 * drains a bounded queue of committed records into the cluster, so the
 * event loop and the committer never wait on the network (with
 * `remote-durability replica` the committing worker waits for its own
 * records' WAIT, the loop still does not). Reads run on the workers.
 *
 * Cluster keys (FORMAT.md "Remote tier"); T is the chain's tag -- the key
 * of the first full chunk on the record's path, or the root for a partial
 * chunk 0 -- as 16 hex digits, so a prompt's chain is one shard's:
 *   skv:r:{T}:<record key>   a record as stored here, after a 40-byte head
 *   skv:c:{T}:<node>         HASH: record key (32 bytes) -> u32 LE tokens, the records below node
 *   skv:cal:<id>             a calibration, sealed under the fleet key
 *   skv:t:<name hash>        a tenant's fleet entry; skv:next_tenant its ids */
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "remote_int.h"

void srv_rkey(const uint8_t tag[32], const uint8_t key[32], char out[96])
{
    char t[17], k[65];
    sodium_bin2hex(t, sizeof t, tag, 8);
    sodium_bin2hex(k, sizeof k, key, 32);
    snprintf(out, 96, "skv:r:{%s}:%s", t, k);
}

void srv_ckey(const uint8_t tag[32], const uint8_t node[32], char out[96])
{
    char t[17], k[65];
    sodium_bin2hex(t, sizeof t, tag, 8);
    sodium_bin2hex(k, sizeof k, node, 32);
    snprintf(out, 96, "skv:c:{%s}:%s", t, k);
}

void srv_calkey(const uint8_t id[16], char out[48])
{
    char h[33];
    sodium_bin2hex(h, sizeof h, id, 16);
    snprintf(out, 48, "skv:cal:%s", h);
}

/* One command at a time (tenants, calibrations, an index): its reply or
 * NULL after deadline_ms */
redisReply *srv_rexec1(srv_remote *r, int argc, const char **argv, const size_t *len,
                         int deadline_ms)
{
    skv_rc_cmd c = {argc, argv, len, 1};
    redisReply *rep = NULL;
    skv_rc_exec(r->rc, &c, 1, &rep, 0, deadline_ms);
    return rep;
}

int srv_rshared(srv_remote *r, const char *tenant)
{
    int yes = 0;
    pthread_mutex_lock(&r->tmu);
    for (size_t i = 0; i < r->nshared && !yes; i++)
        yes = strcmp(r->shared[i], tenant) == 0;
    pthread_mutex_unlock(&r->tmu);
    return yes;
}

/* ---- tenants ---------------------------------------------------------------- */

/* The fleet's entry of a tenant (1 and out), none (0), or -1: the cluster
 * did not answer */
static int entry_get(srv_remote *r, const char *k, uint8_t out[SEQKV_TIER_TENANT_BYTES])
{
    const char *get[2] = {"GET", k};
    redisReply *g = srv_rexec1(r, 2, get, NULL, r->join_ms);
    int rc = !g ? -1 : g->type == REDIS_REPLY_NIL ? 0 : 1;
    if (rc == 1 && (g->type != REDIS_REPLY_STRING || g->len != SEQKV_TIER_TENANT_BYTES))
        rc = 2; /* another shape: import says so */
    if (rc == 1)
        memcpy(out, g->str, SEQKV_TIER_TENANT_BYTES);
    if (g)
        freeReplyObject(g);
    return rc;
}

/* A new entry offered for a tenant absent here: an id from the fleet's
 * counter (moved past every id of this store), fresh keys, nothing stored */
static int tenant_offer(srv_remote *r, const char *name, uint8_t mine[SEQKV_TIER_TENANT_BYTES])
{
    seqkv *db = r->s->db;
    const uint64_t want = skv_tier_next_tenant(db);
    const char *incr[2] = {"INCR", "skv:next_tenant"};
    redisReply *x = srv_rexec1(r, 2, incr, NULL, r->join_ms);
    long long id = x && x->type == REDIS_REPLY_INTEGER ? x->integer : -1;
    if (x)
        freeReplyObject(x);
    if (id > 0 && (uint64_t)id < want) { /* past every id of this store */
        char by[24];
        snprintf(by, sizeof by, "%llu", (unsigned long long)(want - (uint64_t)id));
        const char *ib[3] = {"INCRBY", "skv:next_tenant", by};
        x = srv_rexec1(r, 3, ib, NULL, r->join_ms);
        id = x && x->type == REDIS_REPLY_INTEGER ? x->integer : -1;
        if (x)
            freeReplyObject(x);
    }
    if (id <= 0)
        return skv_error(SKV_ERR_IO, "remote: no tenant id from the cluster");
    return skv_tier_tenant_mint(db, name, (uint64_t)id, r->fkey, mine);
}

/* Why a tenant this store had before it joined cannot take the fleet's
 * keys: what it holds here under its own */
static void held_here(srv_remote *r, const char *name, char *why, size_t cap)
{
    seqkv_stats st;
    seqkv_blob_stats bs;
    memset(&st, 0, sizeof st);
    memset(&bs, 0, sizeof bs);
    if (seqkv_stat(r->s->db, name, &st))
        memset(&st, 0, sizeof st);
    seqkv_blob_stat_all(r->s->db, name, &bs);
    snprintf(why, cap,
             "it was made here before this host shared it and holds %llu tokens and %llu values "
             "under keys other than the fleet's (KV.TENANT FORGET it, then restart, to share it)",
             (unsigned long long)st.tokens, (unsigned long long)bs.keys);
}

static void note_local(srv_remote *r, const char *name, const char *why)
{
    pthread_mutex_lock(&r->tmu);
    size_t i = 0;
    while (i < r->nlocal && strcmp(r->local[i], name) != 0)
        i++;
    if (i < SKV_SERVER_MAX_TENANTS) {
        memcpy(r->local[i], name, SEQKV_NAME_MAX + 1);
        snprintf(r->local_why[i], sizeof r->local_why[i], "%s", why);
        r->nlocal += i == r->nlocal;
    }
    pthread_mutex_unlock(&r->tmu);
}

/* Tenant name joins the fleet: 1 when its records are shared, 0 when it
 * stays local (logged, and said in INFO), or an error when the cluster
 * cannot be reached. A tenant this store has offers its own keys; one it
 * lacks takes the fleet's entry, or offers a new one -- and nothing is made
 * here until SET NX has told which entry the fleet keeps, so hosts that
 * start at the same moment all take the winner's. */
static int tenant_join(srv_remote *r, const char *name)
{
    uint8_t nh[16], mine[SEQKV_TIER_TENANT_BYTES], theirs[SEQKV_TIER_TENANT_BYTES];
    char hx[33], k[48], why[400] = "";
    if (srv_rshared(r, name))
        return 1;
    skv_tier_tenant_name(r->fkey, name, nh);
    sodium_bin2hex(hx, sizeof hx, nh, 16);
    snprintf(k, sizeof k, "skv:t:%s", hx);
    int rc = skv_tier_tenant_export(r->s->db, name, r->fkey, mine);
    const int had = rc == SKV_OK;
    int fleet = 0; /* 1: the fleet's entry is in theirs */
    if (rc == SKV_ERR_NOT_FOUND) {
        fleet = entry_get(r, k, theirs);
        rc = fleet < 0 ? skv_error(SKV_ERR_IO, "remote: cluster unreachable (%s)",
                                   seqkv_error_detail())
             : fleet ? SKV_OK
                     : tenant_offer(r, name, mine);
    }
    if (!rc && !fleet) {
        const char *set[4] = {"SET", k, (const char *)mine, "NX"};
        const size_t len[4] = {3, strlen(k), sizeof mine, 2};
        redisReply *x = srv_rexec1(r, 4, set, len, r->join_ms);
        const int won = x && x->type == REDIS_REPLY_STATUS;
        const int lost = x && x->type == REDIS_REPLY_NIL;
        if (x)
            freeReplyObject(x);
        if (!won && !lost)
            return skv_error(SKV_ERR_IO, "remote: cluster unreachable (%s)", seqkv_error_detail());
        if (won) {
            memcpy(theirs, mine, sizeof mine);
            fleet = 1;
        } else if ((fleet = entry_get(r, k, theirs)) <= 0) {
            return skv_error(SKV_ERR_IO, "remote: the cluster did not give the fleet's entry of "
                                         "'%s' (%s)", name, seqkv_error_detail());
        }
    }
    if (rc == SKV_ERR_IO)
        return rc;
    if (!rc)
        rc = fleet == 2 ? skv_error(SKV_ERR_CORRUPT, "remote: tenant entry of another shape")
                        : skv_tier_tenant_import(r->s->db, name, r->fkey, theirs);
    if (rc) {
        if (had && rc == SKV_ERR_ARG)
            held_here(r, name, why, sizeof why);
        else
            snprintf(why, sizeof why, "%s", seqkv_error_detail());
        srv_log(r->s, "remote: tenant '%s' stays local: %s", name, why);
        note_local(r, name, why);
        pthread_mutex_lock(&r->mu);
        r->st.tenants_local++;
        pthread_mutex_unlock(&r->mu);
        return 0;
    }
    pthread_mutex_lock(&r->tmu);
    memcpy(r->shared[r->nshared++], name, SEQKV_NAME_MAX + 1);
    pthread_mutex_unlock(&r->tmu);
    pthread_mutex_lock(&r->mu);
    r->st.tenants_shared++;
    pthread_mutex_unlock(&r->mu);
    return 1;
}

int srv_remote_join(skv_server *s, const char *tenant)
{
    srv_remote *r = s->remote;
    if (!r)
        return 0;
    /* (on the loop thread: a cluster that does not answer stalls it no
     * longer than this a call) */
    r->join_ms = r->timeout_ms < SRV_RELOAD_JOIN_MS ? r->timeout_ms : SRV_RELOAD_JOIN_MS;
    const int rc = tenant_join(r, tenant);
    r->join_ms = r->timeout_ms;
    return rc;
}

size_t srv_remote_local_info(skv_server *s, const char *only, char *buf, size_t cap)
{
    srv_remote *r = s->remote;
    size_t n = 0;
    if (cap)
        buf[0] = 0;
    if (!r)
        return 0;
    pthread_mutex_lock(&r->tmu);
    for (size_t i = 0; i < r->nlocal && n < cap; i++)
        if (!only || strcmp(only, r->local[i]) == 0) {
            int w = snprintf(buf + n, cap - n, "remote_tenant_local_%s:%s\r\n", r->local[i],
                             r->local_why[i]);
            n = w < 0 || (size_t)w >= cap - n ? n : n + (size_t)w;
        }
    pthread_mutex_unlock(&r->tmu);
    return n;
}

/* ---- start, stop, figures ----------------------------------------------------- */

int srv_remote_start(skv_server *s)
{
    const char *seeds = s->o.remote ? s->o.remote : (s->cfg.remote[0] ? s->cfg.remote : NULL);
    if (!seeds)
        return SKV_OK;
    const char *ks = s->o.remote_key ? s->o.remote_key
                                     : (s->cfg.remote_key[0] ? s->cfg.remote_key : NULL);
    if (!ks)
        return skv_error(SKV_ERR_ARG, "--remote needs --remote-key (the fleet's shared key: a key "
                                      "file, fd:N or env:VAR; every host gives the same)");
    srv_remote *r = skv_calloc(1, sizeof *r);
    if (!r)
        return SKV_ERR_NOMEM;
    r->s = s;
    r->replica = s->o.remote_durability ? s->o.remote_durability == 2
                                        : s->cfg.remote_durability == 2;
    r->timeout_ms = r->join_ms = s->cfg.remote_timeout_ms;
    r->backlog_max = s->cfg.remote_backlog;
    r->next_seq = 1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->tmu, NULL);
    pthread_cond_init(&r->cv, NULL);
    pthread_cond_init(&r->dcv, NULL);
    s->remote = r;
    int rc = (r->fkey = sodium_malloc(32)) ? skv_tier_key_load(ks, r->fkey) : SKV_ERR_NOMEM;
    if (rc)
        return rc;
    char err[256];
    if (!(r->rc = skv_rc_open(seeds, r->timeout_ms < 5000 ? r->timeout_ms : 5000, err, sizeof err)))
        return skv_error(SKV_ERR_IO, "remote %s: %s", seeds, err);
    for (size_t t = 0; t < s->cfg.ntenants; t++)
        if ((rc = tenant_join(r, s->cfg.tenants[t].name)) < 0)
            return rc;
    if (pthread_create(&r->thr, NULL, srv_remote_writer, r) != 0)
        return skv_error(SKV_ERR_IO, "pthread_create failed");
    r->started = 1;
    skv_tier_on_commit(s->db, srv_remote_on_commit, r);
    srv_log(s, "remote tier %s: %zu tenants shared, %zu local, durability %s", seeds,
            r->st.tenants_shared, r->st.tenants_local, r->replica ? "replica" : "local");
    return SKV_OK;
}

void srv_remote_stop(skv_server *s)
{
    srv_remote *r = s->remote;
    if (!r)
        return;
    if (s->db)
        skv_tier_on_commit(s->db, NULL, NULL);
    if (r->started) {
        pthread_mutex_lock(&r->mu);
        r->stop = 1;
        pthread_cond_broadcast(&r->cv);
        pthread_cond_broadcast(&r->dcv);
        pthread_mutex_unlock(&r->mu);
        pthread_join(r->thr, NULL);
    }
    for (rq_item *it = r->head, *nx; it; it = nx) {
        nx = it->next;
        skv_free(it->val);
        skv_free(it);
    }
    skv_rc_close(r->rc);
    if (r->fkey)
        sodium_free(r->fkey);
    skv_free(r->cals);
    skv_free(r->unconf);
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->tmu);
    pthread_cond_destroy(&r->cv);
    pthread_cond_destroy(&r->dcv);
    skv_free(r);
    s->remote = NULL;
}

void srv_remote_stat(skv_server *s, srv_remote_stats *st)
{
    srv_remote *r = s->remote;
    memset(st, 0, sizeof *st);
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    *st = r->st;
    st->backlog_max = r->backlog_max;
    pthread_mutex_unlock(&r->mu);
}

void srv_remote_client_info(skv_server *s, char *buf, size_t cap)
{
    srv_remote *r = s->remote;
    skv_rc_stats c;
    memset(&c, 0, sizeof c);
    if (r && r->rc)
        skv_rc_get_stats(r->rc, &c);
    snprintf(buf, cap,
             "remote_durability:%s\r\nremote_backlog_max:%llu\r\nremote_masters:%d\r\n"
             "remote_commands:%llu\r\nremote_moved:%llu\r\nremote_ask:%llu\r\n"
             "remote_refreshes:%llu\r\nremote_reconnects:%llu\r\nremote_client_failures:%llu\r\n",
             r && r->replica ? "replica" : "local", (unsigned long long)(r ? r->backlog_max : 0),
             c.masters, (unsigned long long)c.commands, (unsigned long long)c.redirects_moved,
             (unsigned long long)c.redirects_ask, (unsigned long long)c.refreshes,
             (unsigned long long)c.reconnects, (unsigned long long)c.failures);
}
