/* The shared remote tier (server/remote.c): a committed PUT's records are
 * written to a Redis Cluster too, sealed as they are stored; LOOKUP and
 * GET consult it past what the local store holds. ARCHITECTURE.md
 * "The remote tier"; FORMAT.md "Remote tier". */
#ifndef SKV_SRV_REMOTE_H
#define SKV_SRV_REMOTE_H
#include <stddef.h>
#include <stdint.h>

typedef struct skv_server skv_server;
typedef struct srv_remote srv_remote;

typedef struct {
    uint64_t queued, queued_bytes;         /* records handed to the writer */
    uint64_t written, written_bytes;       /* confirmed by the cluster */
    uint64_t write_failures, dropped;      /* given up on; refused by a full backlog */
    uint64_t backlog, backlog_bytes;       /* waiting now */
    uint64_t backlog_max;                  /* the bound of backlog_bytes */
    uint64_t lookups, lookup_tokens;       /* LOOKUPs that asked it; tokens it added */
    uint64_t fills, fetched, fetched_bytes, fetch_misses, installed, install_failures;
    uint64_t calibs_written, calibs_fetched;
    size_t tenants_shared, tenants_local;
} srv_remote_stats;

/* Connect to the cluster (s->o.remote or the config's), load the fleet
 * key, join every configured tenant to the fleet, start the writer and
 * hook the store's commits. Nothing to do (0) without a remote. */
int srv_remote_start(skv_server *s);
/* A tenant added since (a config reload) joins the fleet: 1 shared, 0
 * local (or no remote tier), an error when the cluster does not answer
 * within 2 s a call (the caller is the event loop) */
int srv_remote_join(skv_server *s, const char *tenant);
/* INFO lines "remote_tenant_local_<name>:<why>" of the tenants that stay
 * local (only: that tenant's alone, NULL: all) into buf; its length */
size_t srv_remote_local_info(skv_server *s, const char *only, char *buf, size_t cap);
/* Write what is queued (up to the timeout), stop the writer, unhook */
void srv_remote_stop(skv_server *s);

/* Before a put batch: where its records will start; after it: 0 when
 * the durability asked for holds for them (replica: the cluster confirmed
 * every one on a replica), else an error code with the detail set */
uint64_t srv_remote_mark(skv_server *s);
int srv_remote_wait(skv_server *s, uint64_t mark);

/* LOOKUP: the tokens of tok[0, n) cached here (local) or in the cluster,
 * whichever is more (index entries only; no record is fetched) */
size_t srv_remote_lookup(skv_server *s, const char *tenant, const char *profile, const int32_t *tok,
                         size_t n, size_t local);
/* GET: the records of tok[0, want) (want 0: as many as there are) that
 * are not here, fetched, verified and installed, with what they need */
void srv_remote_fill(skv_server *s, const char *tenant, const char *profile, const int32_t *tok,
                     size_t n, size_t want);

void srv_remote_stat(skv_server *s, srv_remote_stats *st);
/* The cluster client's counters, as INFO lines into buf */
void srv_remote_client_info(skv_server *s, char *buf, size_t cap);
#endif
