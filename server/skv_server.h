/*
 * skv_server.h - seqkvd: the store served over RESP on a Unix socket
 * (server/README.md documents the commands and the config file).
 *
 * One thread runs an epoll loop that only moves bytes, parses requests
 * and queues them; the store work of every KV.* command and INFO runs on a
 * pool of worker threads, whose replies come back to the loop through an
 * eventfd. Readers run concurrently (the seqkv handle allows it); the
 * store serialises writers.
 *
 * Tenants come from the kernel: SO_PEERCRED's uid/gid map to a tenant
 * through the config file, or AUTH with a tenant's token selects it.
 * Without a config file, only peers with the server's own uid are
 * admitted, as tenant "default", with admin rights.
 */
#ifndef SKV_SERVER_H
#define SKV_SERVER_H
#include <stddef.h>
#include <stdint.h>

#include "seqkv.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Defaults of the limits (each can be set in the config file). */
#define SKV_SERVER_MAX_CLIENTS 1024
#define SKV_SERVER_MAX_UNAUTH 64 /* connections not yet tied to a tenant */
#define SKV_SERVER_MAX_BULK (512ull << 20)   /* one argument, bytes */
#define SKV_SERVER_MAX_ARGS 1024             /* arguments of a command */
#define SKV_SERVER_MAX_QUERY (1024ull << 20) /* all arguments of a command */
#define SKV_SERVER_MAX_OUTPUT (1024ull << 20) /* unsent replies of a client */
#define SKV_SERVER_MAX_INLINE (16u << 10)    /* an inline command line */
#define SKV_SERVER_MAX_TENANTS 256
#define SKV_SERVER_PUT_BATCH 64               /* KV.PUTs sharing one commit */
#define SKV_SERVER_PUT_BATCH_BYTES (256ull << 20) /* their KV bytes, at most */
#define SKV_SERVER_REMOTE_BACKLOG (256ull << 20) /* records waiting for the cluster, bytes */
#define SKV_SERVER_REMOTE_TIMEOUT_MS 30000
#define SKV_SERVER_CACHE_SHARE 8 /* default hot tier: 1/8 of physical memory */

typedef struct skv_server skv_server;

typedef struct {
    const char *db;          /* the store directory (created if needed) */
    const char *socket_path; /* the Unix socket to create */
    const char *config;      /* config file, or NULL */
    const char *master_key;  /* NULL: DIR/master.key */
    int threads;             /* worker threads (0: online CPUs, at most 8) */
    int put_batch;           /* most KV.PUTs per commit (0: the config's,
                                else SKV_SERVER_PUT_BATCH; 1: one each) */
    int no_sync;             /* the store's no_sync (NOT durable) */
    uint64_t budget;         /* the store's byte budget (0: none) */
    int has_cache_bytes;     /* cache_bytes given (else the config's, else
                                SKV_SERVER_CACHE_SHARE of physical memory) */
    uint64_t cache_bytes;    /* the hot tier's budget (0: no tier) */
    int handle_signals;      /* block SIGTERM/SIGINT (in the calling thread,
                                before the workers start, so they inherit
                                the mask) and stop gracefully on them */
    int quiet;               /* no log lines on stderr */
    const char *remote;      /* the shared tier: "redis-cluster://HOST:PORT[,...]" (NULL:
                                the config's, else none) */
    const char *remote_key;  /* the fleet key's source (NULL: the config's) */
    int remote_durability;   /* 0: the config's; 1 local; 2 replica (a PUT is acknowledged
                                once the cluster has its records on a replica) */
    int port;                /* RESP on loopback TCP too, on this port (0: the config's,
                                else none); its peers must AUTH */
    const char *bind;        /* the TCP address (NULL: the config's, else 127.0.0.1);
                                loopback only (127.0.0.0/8, ::1) */
    const char *metrics;     /* Prometheus's GET /metrics on ADDR:PORT (loopback only;
                                NULL: the config's, else none) */
} skv_server_options;

/* Read the config, open the store, create the socket (mode 0600; a stale
 * socket file is removed only when it is a socket nobody answers on; any
 * other file there is an error) and start the workers. Errors:
 * SKV_ERR_FORMAT (config file, line named in the detail), SKV_ERR_ARG (a
 * live server on the socket, a non-socket file there, a path too long),
 * SKV_ERR_IO, and seqkv_open's errors. */
int skv_server_create(const skv_server_options *o, skv_server **out);
/* Serve until SHUTDOWN by an admin, skv_server_stop, or (handle_signals)
 * SIGTERM/SIGINT; then stop accepting and reading, finish the requests in
 * flight, flush their replies (5 s at most) and return 0. */
int skv_server_run(skv_server *s);
/* Ask a running server to stop (any thread; async-signal-safe). */
void skv_server_stop(skv_server *s);
/* Join the workers, close the store, remove the socket file. NULL is a
 * no-op. */
void skv_server_free(skv_server *s);

/* ------------------------------------------------------------------------
 * The config file (server/README.md, "Config file"), exposed for tests.
 * ---------------------------------------------------------------------- */
typedef struct {
    char name[SEQKV_NAME_MAX + 1];
    int admin;
    int has_token;
    uint8_t token_hash[32]; /* BLAKE2b-256 of the token */
    /* its limits (0: none): connections, bytes of requests in flight,
     * PUT bytes a second (KV.PUT, SET, MSET; a second's worth of burst) */
    uint64_t max_clients, max_inflight, put_rate;
} skv_server_tenant;

typedef enum { SKV_RULE_UID = 0, SKV_RULE_GID = 1 } skv_server_rule_kind;
typedef struct {
    skv_server_rule_kind kind;
    uint32_t id;
    int tenant; /* index into tenants */
} skv_server_rule;

/* kv-layout: values under keys matching a glob are KV of this shape, as
 * an engine ships a chunk (LMCache's KV_2LTD [2, layers, tokens, kv_heads
 * x head_dim], or MLA's [layers, tokens, head_dim]); a value whose length
 * is not a whole number of tokens of it (at most chunk_tokens when set)
 * stays bytes. */
#define SKV_SERVER_MAX_KV_LAYOUTS 32
typedef struct {
    char pattern[256];
    seqkv_dtype dtype;
    uint32_t layers, kv_heads, head_dim, chunk_tokens;
    int mla;
} skv_server_kv_layout;

typedef struct {
    skv_server_tenant tenants[SKV_SERVER_MAX_TENANTS];
    size_t ntenants;
    skv_server_rule rules[SKV_SERVER_MAX_TENANTS * 4];
    size_t nrules;
    uint32_t admin_uids[64];
    size_t nadmin_uids;
    size_t max_clients, max_args;
    uint64_t max_bulk, max_query, max_output;
    int threads;   /* 0: not set */
    int put_batch; /* 0: not set */
    int has_cache_bytes;
    uint64_t cache_bytes;
    uint64_t value_file_min;   /* records of this many stored bytes on in files of
                                  their own (0: the store's default, 8 MiB) */
    uint64_t compact_interval; /* seconds between background compactions (0: none but
                                  after a self-calibration; default 60) */
    size_t max_unauth;         /* connections not yet tied to a tenant (default 64) */
    uint64_t unauth_timeout;   /* seconds such a one may stay so (default 10) */
    /* the remote tier (server/remote.h): seeds, the fleet key's source,
     * durability (1 local, 2 replica), the writer's backlog bound in
     * bytes, each cluster call's deadline */
    char remote[1024], remote_key[1024];
    int remote_durability;
    uint64_t remote_backlog;
    int remote_timeout_ms;
    int port;       /* loopback TCP (0: none) */
    char bind[64];  /* its address ("" : 127.0.0.1) */
    char metrics[80]; /* the metrics endpoint's ADDR:PORT ("": none) */
    unsigned socket_mode; /* the Unix socket's mode: 0600 (default), 0660 or 0666 */
    skv_server_kv_layout kv_layouts[SKV_SERVER_MAX_KV_LAYOUTS];
    size_t nkv_layouts;
} skv_server_config;

/* Defaults, then the config text's lines applied. SKV_ERR_FORMAT with the
 * line number and reason in the detail. */
int skv_server_config_parse(const char *text, size_t len, skv_server_config *out);
void skv_server_config_default(skv_server_config *out);
/* "ADDR:PORT", "[V6]:PORT" or "PORT" (127.0.0.1) split into host and port;
 * -1 when it is none of them (the address is checked when bound) */
int skv_server_split_addr(const char *spec, char *host, size_t cap, int *port);

#ifdef __cplusplus
}
#endif
#endif /* SKV_SERVER_H */
