/* server/ internals shared by server.c (loop, clients, workers) and
 * commands.c (the commands, INFO, statistics). */
#ifndef SKV_SERVER_INT_H
#define SKV_SERVER_INT_H
#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "maintain.h"
#include "outq.h"
#include "resp.h"
#include "seqkv.h"
#include "skv_base.h"
#include "skv_server.h"

typedef struct skv_server skv_server;
typedef struct srv_job srv_job;

enum {
    SRV_F_LOOP = 1,   /* runs on the loop thread (no store work) */
    SRV_F_NOAUTH = 2, /* allowed before a tenant is known */
    SRV_F_ADMIN = 4,  /* admin tenants only */
    SRV_F_BATCH = 8,  /* KV.PUT, SET, MSET: join the group commit (srv_put_batch,
                         srv_blob_batch) */
    SRV_F_HOT = 16,   /* a small read (GET, EXISTS, ...): run on the loop thread,
                         where a hand-off to a worker would cost more than the
                         work, unless it declines (srv_job.declined: values past
                         SRV_LOOP_BYTES go to a worker) */
};

/* the most value bytes a read answers on the loop thread */
#define SRV_LOOP_BYTES (64u << 10)

typedef struct srv_cmd {
    const char *name;
    int min_args, max_args; /* argc including the name; max -1: any */
    unsigned flags;
    void (*fn)(skv_server *s, srv_job *j);
    int idx; /* into the latency tables */
} srv_cmd;

#define SRV_NCMD 48
#define SRV_NBUCKETS 32 /* bucket b: latency < 2^b microseconds */

/* Case-insensitive; NULL when unknown. */
const srv_cmd *srv_cmd_find(const uint8_t *name, size_t len);
const srv_cmd *srv_cmd_at(int idx);

typedef struct srv_client {
    struct srv_client *prev, *next;
    int fd;
    uint64_t id;
    uint32_t uid, gid;
    int32_t pid;
    int tenant; /* -1: not authenticated yet */
    int tcp;    /* came by TCP (uid and gid SRV_NO_UID) */
    int admin;
    int proto;  /* 2 or 3 */
    int auth_fails;
    skv_resp_parser rp;
    uint8_t *in;
    size_t in_len;
    srv_outq out; /* unsent replies */
    int busy, closing, dead;
    uint32_t ev;
    double since;       /* when it connected (the AUTH timeout) */
    uint64_t req_bytes; /* its request in flight, counted against its tenant */
} srv_client;

/* Loop-side figures copied into a job when it is made (INFO reads these,
 * so that workers never read the loop's state). */
typedef struct {
    size_t clients, inflight, unauth;
    uint64_t accepted, rejected, proto_errors;
} srv_snap;

struct srv_job {
    srv_job *next;
    srv_client *c;
    const srv_cmd *def;
    skv_resp_cmd cmd;
    int tenant, admin, proto;
    skv_rbuf reply;
    seqkv_view *view;  /* sent after reply, from the store's memory (outq.h) */
    int view_layers;   /* > 0: the view as that many bulk strings */
    /* KV.GET ... LAYERS streamed as its layers decode (srv_stream_told):
     * the worker tells the loop, which sends them */
    seqkv_view *stream_view; /* the view being decoded (under dmu) */
    size_t stream_ready;     /* its layers decoded (under dmu) */
    int stream_layers;       /* all its layers */
    int stream_told;         /* the loop was told of layers (under dmu) */
    int stream_posted;       /* in s->told, not yet seen by the loop (under dmu) */
    int stream_failed;       /* the get failed after the loop was told */
    srv_job *told_next;      /* s->told's link (under dmu) */
    srv_job *loop_next;      /* the loop's copy of it */
    size_t stream_seen;      /* the loop's copy of stream_ready */
    int stream_open;         /* loop: the array header and the view are queued */
    double t0;
    int inline_;
    int on_loop;  /* an SRV_F_HOT command tried on the loop thread */
    int declined; /* ... which left it to a worker (its reply is dropped) */
    int close_after;
    srv_snap snap;
};

typedef struct {
    uint64_t lookups, lookup_hits, lookup_misses;
    uint64_t gets, get_hits, get_misses, tokens_served, bytes_served;
    uint64_t puts, tokens_put, new_tokens, put_bytes, evictions;
    uint64_t dels, tokens_deleted, errors;
    uint64_t blob_gets, blob_hits, blob_sets, blob_bytes_in, blob_bytes_out;
    /* its use against its limits (the loop's, copied here under smu) */
    uint64_t conns, inflight_bytes, busy;
} srv_tstats;

struct skv_server {
    skv_server_options o;
    skv_server_config cfg;
    char *socket_path;
    seqkv *db;
    int lfd, epfd, evfd, sigfd;
    int tfd;           /* loopback TCP (-1: none) */
    char tcp_addr[80]; /* its address and port */
    dev_t sock_dev;
    ino_t sock_ino;
    uint32_t own_uid;
    int have_tokens;
    int nthreads, started;
    pthread_t *thr;
    pthread_mutex_t qmu;
    pthread_cond_t qcv;
    srv_job *qhead, *qtail;
    int qstop;
    pthread_mutex_t dmu;
    srv_job *dhead, *dtail;
    srv_job *told; /* jobs whose streamed views have layers the loop has not seen, under dmu */
    /* KV.PUTs waiting for the group commit, under pmu */
    pthread_mutex_t pmu;
    srv_job *phead, *ptail;
    int pactive, put_batch;
    uint64_t batches, batched_puts; /* under smu */
    /* loop thread only */
    size_t nunauth;                 /* clients not tied to a tenant */
    double put_tokens[SKV_SERVER_MAX_TENANTS]; /* each tenant's PUT byte bucket */
    double put_at[SKV_SERVER_MAX_TENANTS];
    double last_sweep;              /* of clients past the AUTH timeout */
    srv_client *clients;
    /* clients freed during one batch of epoll events, released after it:
     * a later event of the same batch may still name one (its fd is then
     * -1, and the loop skips it) */
    srv_client *freed;
    size_t nclients, inflight;
    uint64_t next_id, accepted, rejected, proto_errors;
    int stopping;
    double stop_at;
    atomic_int stop_req;
    /* background maintenance (maintain.c), under mmu */
    pthread_mutex_t mmu;
    pthread_cond_t mcv;
    pthread_t mthr;
    int mstarted, mstop, mkick;
    srv_mstat mstat;
    /* statistics, under smu */
    pthread_mutex_t smu;
    srv_tstats *ts; /* per tenant */
    uint64_t auth_failures;
    uint64_t calls[SRV_NCMD], usec[SRV_NCMD], hist[SRV_NCMD][SRV_NBUCKETS];
    double t_start;
    struct srv_remote *remote; /* the shared tier (remote.c), or NULL */
    struct srv_metrics *metrics; /* GET /metrics (metrics_http.c), or NULL */
    /* config reloads (reload.c): tenants no longer in the file (loop
     * thread), the outcomes (under smu) */
    unsigned char tgone[SKV_SERVER_MAX_TENANTS];
    uint64_t reloads, reload_failures;
    char reload_last[320];
    srv_snap msnap;              /* the loop's figures for it, under smu */
};

/* A client's input buffer: a line or a bulk header fits it whole */
#define RBUF_CAP (SKV_SERVER_MAX_INLINE + 256)

double srv_now(void);
void srv_log(skv_server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Close and free a client (its memory later when a job of it is in flight;
 * loop thread) */
void srv_client_free(skv_server *s, srv_client *c);
/* Who may connect (accept.c, loop thread): bind the socket at path (0600;
 * a stale one removed, a live one refused), accept what is pending, close
 * connections that have not authenticated within unauth-timeout */
int srv_listen(skv_server *s, const char *path);
/* RESP on TCP at addr:port too (SKV_ERR_ARG unless addr is loopback) */
int srv_listen_tcp(skv_server *s, const char *addr, int port);
/* A non-blocking listening TCP socket on loopback addr:port (*fd, and its
 * "addr:port" in name), or SKV_ERR_ARG (not loopback) / SKV_ERR_IO */
int srv_loopback_listen(const char *addr, int port, int *fd, char *name, size_t cap);
/* accept what is pending on lfd (tcp: the TCP socket, whose peers are nobody
 * until they AUTH) */
#define SRV_NO_UID UINT32_MAX
void srv_accept(skv_server *s, int lfd, int tcp);
void srv_sweep_unauth(skv_server *s);
/* AUTH: user NULL matches any tenant with that token. 0 and the client's
 * tenant/admin set, or -1. */
int srv_auth(skv_server *s, srv_client *c, const uint8_t *user, size_t ulen, const uint8_t *tok,
             size_t tlen);
/* (-2: the token's tenant has all the connections its max-clients allows) */

/* Limits (limits.c, loop thread): the client is tenant t now (-1: none),
 * the counts follow; tenant t has all the connections it may (a refusal
 * counted); a request over its tenant's limits (1, with the reply's code
 * and message; else its bytes counted in flight until it completes) */
void srv_set_tenant(skv_server *s, srv_client *c, int t);
int srv_tenant_full(skv_server *s, int t);
int srv_over_limits(skv_server *s, srv_client *c, const srv_cmd *def, const skv_resp_cmd *cmd,
                    char code[16], char *msg, size_t cap);
void srv_stat_latency(skv_server *s, const srv_cmd *def, double seconds);
/* Run n KV.PUT jobs as one seqkv_put_batch (one commit) and fill their
 * replies. */
void srv_put_batch(skv_server *s, srv_job **jobs, size_t n);
/* A worker's streamed get (job j, view v) has layers [0, ready) decoded:
 * the loop is woken to send them. */
void srv_stream_told(skv_server *s, srv_job *j, const seqkv_view *v, size_t ready);
/* The bytes of a group-committed job's arguments (a KV.PUT's KV and
 * tokens, a SET's or MSET's keys and values) */
size_t srv_put_kv_len(const srv_job *j);
/* INFO's report for section secp (NULL: all) into b (info.c); 0, the
 * error of seqkv_stat, or SKV_ERR_NOMEM when b ran out of memory. */
int srv_info_report(skv_server *s, srv_job *j, const char *secp, skv_rbuf *b);
/* Argument i is s (any case); the job's tenant's name (commands.c) */
int srv_arg_is(const srv_job *j, size_t i, const char *s);
const char *srv_tenant_name(const skv_server *s, const srv_job *j);
/* A store error as a reply: NOTFOUND, SHAPE, CORRUPT, TOOLARGE, else ERR
 * (commands.c); logged, and counted against the tenant */
void srv_store_err(skv_server *s, srv_job *j, int rc, const char *what);
/* An error reply with code (commands.c) */
void srv_err_reply(srv_job *j, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A decimal argument in [lo, hi]: 0, or -1 (no reply) */
int srv_parse_ll(const uint8_t *a, size_t len, long long lo, long long hi, long long *out);
/* A profile name argument; replies and returns -1 when it is not one */
int srv_name_arg(srv_job *j, size_t i, char out[SEQKV_NAME_MAX + 1]);
/* KV.PROFILE SET|GET (cmd_profile.c) */
void srv_cmd_profile(skv_server *s, srv_job *j);
/* The Redis string commands over the blob namespace (cmd_blob.c) */
void srv_cmd_bget(skv_server *s, srv_job *j);
void srv_cmd_mget(skv_server *s, srv_job *j);
void srv_cmd_set(skv_server *s, srv_job *j);
void srv_cmd_mset(skv_server *s, srv_job *j);
/* n SET/MSET jobs as one seqkv_blob_set_batch (one commit); replies filled */
/* LMCache's kv_bytes/metadata pairs (lmcache.c): a set's `<key>kv_bytes`
 * items given the layout of their metadata (in the set, else stored;
 * lay[i] holds item i's) or marked layout_later; after a set, the values
 * its `<key>metadata` items describe coded in their layout */
void srv_lmcache_layouts(skv_server *s, const char *tenant, seqkv_blob_item *it, size_t n,
                         seqkv_blob_layout *lay);
void srv_lmcache_relayout(skv_server *s, const char *tenant, const seqkv_blob_item *it, size_t n);
/* The config's kv-layout lines (kv_layout.c): the layout the first line
 * whose glob matches key gives a value of val_len bytes (1 and *out), or 0
 * (no line matches, or the length is not whole tokens of the first that
 * does); items with no layout yet given theirs (lay[i] holds item i's) */
int srv_kv_layout_of(const skv_server_kv_layout *k, size_t n, const uint8_t *key, size_t key_len,
                     size_t val_len, seqkv_blob_layout *out);
void srv_kv_layouts(const skv_server *s, seqkv_blob_item *it, size_t n, seqkv_blob_layout *lay);
void srv_blob_batch(skv_server *s, srv_job **jobs, size_t n);
void srv_cmd_exists(skv_server *s, srv_job *j);
void srv_cmd_bdel(skv_server *s, srv_job *j);
void srv_cmd_strlen(skv_server *s, srv_job *j);
void srv_cmd_type(skv_server *s, srv_job *j);
void srv_cmd_ttl(skv_server *s, srv_job *j);
void srv_cmd_expire(skv_server *s, srv_job *j);
void srv_cmd_scan(skv_server *s, srv_job *j);
void srv_cmd_dbsize(skv_server *s, srv_job *j);
void srv_cmd_flushdb(skv_server *s, srv_job *j);
/* The config file at path parsed into cfg (reload.c): SKV_ERR_FORMAT
 * naming the file and the line, or the file's read error */
int srv_read_config(const char *path, skv_server_config *cfg);
/* Re-read s->o.config and apply it (loop thread; SIGHUP, KV.CONFIG
 * RELOAD): 0, or the error (the detail says why) with nothing changed */
int srv_reload(skv_server *s);
void srv_cmd_config(skv_server *s, srv_job *j);
/* KV.TENANT FORGET <tenant> (cmd_tenant.c) */
void srv_cmd_tenant(skv_server *s, srv_job *j);
/* Redis's glob match (SCAN ... MATCH) of s against pattern p */
int srv_glob(const uint8_t *p, size_t pl, const uint8_t *s, size_t sl);
/* raw / stored, 0 when nothing is stored */
double srv_ratio(uint64_t raw, uint64_t stored);
/* A "Key:   N kB" line of /proc/self/status in bytes, 0 when absent; a
 * command's name in lower case, as Redis writes it (info.c) */
uint64_t srv_status_bytes(const char *key);
const char *srv_cmd_lower(const char *name, char *buf, size_t cap);
/* The loop's figures a job or the metrics copy (server.c, loop thread) */
void srv_snap_take(const skv_server *s, srv_snap *out);
#endif
