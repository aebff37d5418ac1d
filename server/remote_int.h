/* The remote tier's private state and the helpers its files share
 * (remote.c: tenants, start, stop, figures; remote_write.c: the writer;
 * remote_read.c: LOOKUP and GET). FORMAT.md "Remote tier". */
#ifndef SKV_SRV_REMOTE_INT_H
#define SKV_SRV_REMOTE_INT_H
#include <hiredis/hiredis.h>
#include <pthread.h>

#include "remote.h"
#include "skv_tier.h"
#include "server_int.h"
#include "skv_rcluster.h"

#define RHEAD 40              /* "SKVW", version, 3 zero, the centroid chain's tag */
#define RMAGIC "SKVW"
#define RQ_BATCH 128          /* records a cluster round trip carries */
#define RQ_BATCH_BYTES (64u << 20)
#define RQ_FAILS 256          /* failed seq ranges remembered for waiters */
#define FETCH_MAX 4096        /* records one GET may fetch */
#define WRITE_TRIES 3         /* (durability local) rounds before a batch is given up */
#define READ_DEADLINE_MS 1000 /* a LOOKUP's or GET's cluster calls: past it, a miss */
#define STOP_DEADLINE_MS 2000 /* a write batch's deadline once the server stops */
#define UNCONF_MAX (1u << 20) /* unconfirmed records remembered */
#define SRV_RELOAD_JOIN_MS 2000 /* a reload's tenant joins, each cluster call */

typedef struct rq_item {
    struct rq_item *next;
    uint64_t seq;
    uint8_t tag[32];
    uint8_t key[32], parent[32], calib[16];
    uint32_t n;
    uint8_t *val;
    size_t len;
} rq_item;

struct srv_remote {
    skv_server *s;
    skv_rc *rc;
    uint8_t *fkey; /* the fleet key (sodium_malloc'd) */
    int replica, timeout_ms;
    int join_ms; /* a tenant join's calls (a reload's: SRV_RELOAD_JOIN_MS at most) */
    uint64_t backlog_max;
    pthread_t thr;
    int started, stop;
    pthread_mutex_t mu;
    pthread_cond_t cv, dcv;
    rq_item *head, *tail;
    uint64_t next_seq;
    uint64_t fly_a, fly_b; /* the batch being written: seqs [fly_a, fly_b) */
    uint64_t fail_a[RQ_FAILS], fail_b[RQ_FAILS];
    size_t nfail;
    uint8_t (*cals)[16]; /* calibrations the cluster has */
    size_t ncals, cals_cap;
    /* records whose write failed or was dropped: a later put that reuses
     * one writes it again with its own (open addressing, zero = empty) */
    uint8_t (*unconf)[32];
    size_t nunconf, unconf_cap;
    /* tenants whose records are shared, and those that stay local with
     * why (under tmu: a config reload joins tenants while workers read) */
    pthread_mutex_t tmu;
    char shared[SKV_SERVER_MAX_TENANTS][SEQKV_NAME_MAX + 1];
    size_t nshared;
    char local[SKV_SERVER_MAX_TENANTS][SEQKV_NAME_MAX + 1];
    char local_why[SKV_SERVER_MAX_TENANTS][400];
    size_t nlocal;
    srv_remote_stats st;
};

/* The cluster keys of a record, of a node's index, of a calibration */
void srv_rkey(const uint8_t tag[32], const uint8_t key[32], char out[96]);
void srv_ckey(const uint8_t tag[32], const uint8_t node[32], char out[96]);
void srv_calkey(const uint8_t id[16], char out[48]);
/* One command (key at argv[1]): its reply, or NULL after deadline_ms */
redisReply *srv_rexec1(srv_remote *r, int argc, const char **argv, const size_t *len,
                       int deadline_ms);
/* Whether the tenant's records are shared (it joined the fleet) */
int srv_rshared(srv_remote *r, const char *tenant);
/* Records this host holds that no write of its own confirmed on a
 * replica (fetched ones): a put that reuses one writes it (remote_write.c) */
void srv_remote_unconfirmed(srv_remote *r, const uint8_t (*keys)[32], size_t n);
/* The store's commit hook, and the writer thread (remote_write.c) */
void srv_remote_on_commit(void *ctx, const skv_tier_rec *recs, size_t n);
void *srv_remote_writer(void *arg);
#endif
