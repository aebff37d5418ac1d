/* The config file read at start and re-read on SIGHUP or KV.CONFIG RELOAD
 * (server/README.md "Reloading the config"), on the loop thread.
 *
 * A reload parses the whole file first: a file that does not parse is
 * refused whole (the line named) and the server keeps what it has. Then it
 * applies what can change under connected clients -- tenants, tokens,
 * uid/gid rules, admins and the limits -- for new connections and
 * requests: a tenant keeps its slot (its index in s->ts, the clients tied
 * to it) by name, a new one joins the fleet (or the reload is refused)
 * and takes a free slot, one no
 * longer in the file is refused (NOPERM) until it is back, and connected
 * clients are never closed. What the server was built around (threads,
 * the hot tier, the sockets, the remote tier, kv-layout) is logged as
 * changed and waits for a restart. */
#include <stdio.h>
#include <string.h>

#include <sodium.h>

#include "remote.h"
#include "server_int.h"

int srv_read_config(const char *path, skv_server_config *cfg)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = skv_file_read(path, 1u << 20, &buf, &len);
    if (!rc && (rc = skv_server_config_parse((const char *)buf, len, cfg)))
        rc = skv_error(rc, "%s: %s", path, seqkv_error_detail());
    if (buf)
        sodium_memzero(buf, len); /* (tokens) */
    skv_free(buf);
    return rc;
}

/* The settings a reload does not apply, named into out when they differ */
static void restart_only(const skv_server_config *a, const skv_server_config *b, char *out,
                         size_t cap)
{
    struct {
        const char *name;
        int differs;
    } f[] = {
        {"threads", a->threads != b->threads},
        {"put-batch", a->put_batch != b->put_batch},
        {"cache-bytes", a->has_cache_bytes != b->has_cache_bytes || a->cache_bytes != b->cache_bytes},
        {"compact-interval", a->compact_interval != b->compact_interval},
        {"value-file-min", a->value_file_min != b->value_file_min},
        {"remote", strcmp(a->remote, b->remote) != 0 || strcmp(a->remote_key, b->remote_key) != 0 ||
                       a->remote_durability != b->remote_durability ||
                       a->remote_backlog != b->remote_backlog ||
                       a->remote_timeout_ms != b->remote_timeout_ms},
        {"port", a->port != b->port || strcmp(a->bind, b->bind) != 0},
        {"metrics", strcmp(a->metrics, b->metrics) != 0},
        {"socket-mode", a->socket_mode != b->socket_mode},
        {"kv-layout", a->nkv_layouts != b->nkv_layouts ||
                          memcmp(a->kv_layouts, b->kv_layouts,
                                 a->nkv_layouts * sizeof a->kv_layouts[0]) != 0},
    };
    size_t n = 0;
    out[0] = 0;
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].differs && n < cap) {
            int w = snprintf(out + n, cap - n, "%s%s", n ? ", " : "", f[i].name);
            n = w < 0 || (size_t)w >= cap - n ? cap : n + (size_t)w;
        }
}

static int slot_of(const skv_server *s, const char *name)
{
    for (size_t t = 0; t < s->cfg.ntenants; t++)
        if (strcmp(s->cfg.tenants[t].name, name) == 0)
            return (int)t;
    return -1;
}

/* Where each of the new file's tenants will live (map[i]: its slot, new
 * ones past the current ones); -1 when the slots run out */
static int plan_slots(const skv_server *s, const skv_server_config *nc, int *map)
{
    size_t next = s->cfg.ntenants;
    for (size_t i = 0; i < nc->ntenants; i++) {
        map[i] = slot_of(s, nc->tenants[i].name);
        if (map[i] < 0) {
            if (next >= SKV_SERVER_MAX_TENANTS)
                return -1;
            map[i] = (int)next++;
        }
    }
    return 0;
}

static int uid_admin(const skv_server_config *c, uint32_t uid)
{
    for (size_t i = 0; i < c->nadmin_uids; i++)
        if (c->admin_uids[i] == uid)
            return 1;
    return 0;
}

/* nc applied (map from plan_slots); the counts of what changed */
static void apply(skv_server *s, const skv_server_config *nc, const int *map, size_t *added,
                  size_t *removed, size_t *changed)
{
    unsigned char keep[SKV_SERVER_MAX_TENANTS] = {0};
    const size_t old_n = s->cfg.ntenants;
    pthread_mutex_lock(&s->smu); /* (INFO and the metrics read what changes under it) */
    for (size_t i = 0; i < nc->ntenants; i++) {
        const int t = map[i];
        skv_server_tenant *d = &s->cfg.tenants[t];
        if ((size_t)t >= old_n) {
            memset(&s->ts[t], 0, sizeof s->ts[t]);
            s->put_tokens[t] = s->put_at[t] = 0;
            (*added)++;
        } else if (s->tgone[t] || memcmp(d, &nc->tenants[i], sizeof *d) != 0) {
            (*changed)++;
        }
        /* field by field: workers read the name of a slot in use */
        if ((size_t)t >= old_n)
            memcpy(d->name, nc->tenants[i].name, sizeof d->name);
        d->admin = nc->tenants[i].admin;
        d->has_token = nc->tenants[i].has_token;
        memcpy(d->token_hash, nc->tenants[i].token_hash, sizeof d->token_hash);
        d->max_clients = nc->tenants[i].max_clients;
        d->max_inflight = nc->tenants[i].max_inflight;
        d->put_rate = nc->tenants[i].put_rate;
        keep[t] = 1;
        s->tgone[t] = 0;
        if ((size_t)t >= s->cfg.ntenants)
            s->cfg.ntenants = (size_t)t + 1;
    }
    for (size_t t = 0; t < old_n; t++)
        if (!keep[t] && !s->tgone[t]) {
            /* its name and figures stay; nothing reaches it any more */
            skv_server_tenant *d = &s->cfg.tenants[t];
            d->has_token = d->admin = 0;
            sodium_memzero(d->token_hash, sizeof d->token_hash);
            s->tgone[t] = 1;
            (*removed)++;
        }
    s->cfg.nrules = nc->nrules;
    for (size_t i = 0; i < nc->nrules; i++) {
        s->cfg.rules[i] = nc->rules[i];
        s->cfg.rules[i].tenant = map[nc->rules[i].tenant];
    }
    memcpy(s->cfg.admin_uids, nc->admin_uids, sizeof s->cfg.admin_uids);
    s->cfg.nadmin_uids = nc->nadmin_uids;
    s->cfg.max_clients = nc->max_clients;
    s->cfg.max_args = nc->max_args;
    s->cfg.max_query = nc->max_query;
    /* (read by workers: KV.GET's reply size check) */
    __atomic_store_n(&s->cfg.max_bulk, nc->max_bulk, __ATOMIC_RELAXED);
    __atomic_store_n(&s->cfg.max_output, nc->max_output, __ATOMIC_RELAXED);
    s->cfg.max_unauth = nc->max_unauth;
    s->cfg.unauth_timeout = nc->unauth_timeout;
    pthread_mutex_unlock(&s->smu);
    s->have_tokens = 0;
    for (size_t t = 0; t < s->cfg.ntenants; t++)
        s->have_tokens |= s->cfg.tenants[t].has_token;
    /* admin rights follow the file for the clients' next requests */
    for (srv_client *c = s->clients; c; c = c->next)
        if (c->fd >= 0 && c->tenant >= 0)
            c->admin = s->cfg.tenants[c->tenant].admin ||
                       (c->uid != SRV_NO_UID && uid_admin(&s->cfg, c->uid));
}

static void outcome(skv_server *s, int ok, const char *what)
{
    pthread_mutex_lock(&s->smu);
    if (ok)
        s->reloads++;
    else
        s->reload_failures++;
    snprintf(s->reload_last, sizeof s->reload_last, "%s", what);
    pthread_mutex_unlock(&s->smu);
}

int srv_reload(skv_server *s)
{
    const char *path = s->o.config;
    if (!path) {
        outcome(s, 0, "failed: the server started without --config");
        return skv_error(SKV_ERR_ARG, "the server started without --config: no file to re-read");
    }
    skv_server_config *nc = skv_malloc(sizeof *nc);
    int *map = skv_malloc(SKV_SERVER_MAX_TENANTS * sizeof *map);
    int rc = nc && map ? srv_read_config(path, nc) : SKV_ERR_NOMEM;
    if (!rc && plan_slots(s, nc, map))
        rc = skv_error(SKV_ERR_ARG, "%s: more than %d tenants counting those removed since start",
                       path, SKV_SERVER_MAX_TENANTS);
    int has_tokens = 0;
    for (size_t i = 0; !rc && i < nc->ntenants; i++)
        has_tokens |= nc->tenants[i].has_token;
    if (!rc && s->tfd >= 0 && !has_tokens)
        rc = skv_error(SKV_ERR_ARG, "%s: no tenant has a token, and TCP peers must AUTH", path);
    /* new tenants join the fleet first: one the cluster cannot take now
     * refuses the reload, rather than a tenant served here that the fleet
     * does not know */
    for (size_t i = 0; !rc && i < nc->ntenants; i++)
        if ((size_t)map[i] >= s->cfg.ntenants && srv_remote_join(s, nc->tenants[i].name) < 0)
            rc = skv_error(SKV_ERR_IO, "tenant '%s' could not join the fleet (%s)",
                           nc->tenants[i].name, seqkv_error_detail());
    if (rc) {
        char why[300];
        snprintf(why, sizeof why, "failed: %s", seqkv_error_detail());
        srv_log(s, "config reload refused, the config in force stays: %s", seqkv_error_detail());
        outcome(s, 0, why);
        rc = skv_error(rc, "%s", why + 8);
    } else {
        char later[200], msg[300];
        size_t added = 0, removed = 0, changed = 0;
        restart_only(&s->cfg, nc, later, sizeof later);
        apply(s, nc, map, &added, &removed, &changed);
        snprintf(msg, sizeof msg, "ok: %zu tenants (%zu added, %zu removed, %zu changed)",
                 nc->ntenants, added, removed, changed);
        srv_log(s, "config reloaded from %s: %s%s%s%s", path, msg + 4, later[0] ? "; " : "",
                later, later[0] ? " changed: they take effect at restart" : "");
        outcome(s, 1, msg);
    }
    if (nc)
        sodium_memzero(nc, sizeof *nc);
    skv_free(nc);
    skv_free(map);
    return rc;
}

/* KV.CONFIG RELOAD (admin; on the loop thread, as SIGHUP) */
void srv_cmd_config(skv_server *s, srv_job *j)
{
    if (!srv_arg_is(j, 1, "RELOAD")) {
        skv_rbuf_error(&j->reply, "ERR", "KV.CONFIG RELOAD");
        return;
    }
    srv_log(s, "KV.CONFIG RELOAD by client %llu (tenant %s)", (unsigned long long)j->c->id,
            srv_tenant_name(s, j));
    if (srv_reload(s))
        skv_rbuf_error(&j->reply, "ERR", "config reload refused, the config in force stays: %s",
                       seqkv_error_detail());
    else
        skv_rbuf_simple(&j->reply, "OK");
}
