/*
 * skv_rcluster.h - a blocking client of a Redis Cluster, for the remote
 * tier: it keeps the cluster's slot map (CLUSTER SLOTS), one connection
 * per node (host:port, made lazily), and runs batches of commands, each
 * sent to the master serving the slot of its key, pipelined per node.
 *
 * Redirects and the cluster's passing troubles are handled inside
 * skv_rc_exec: -MOVED (the slot is updated and the whole map read again),
 * -ASK (ASKING then the command, at that node, once), -TRYAGAIN,
 * -CLUSTERDOWN, -LOADING, refused or broken connections and timeouts (the
 * connection is dropped, the map read again from any node that answers,
 * 50-100 ms between rounds) until the caller's deadline. A failover thus
 * costs the caller a slower call, not an error.
 *
 * One skv_rc may be used from several threads: the calls take one mutex
 * (a call waits for another's batch to finish). Replies are hiredis'
 * (redisReply, freed with freeReplyObject). Speaks RESP2 (hiredis 0.14).
 */
#ifndef SKV_RCLUSTER_H
#define SKV_RCLUSTER_H
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct skv_rc skv_rc;

/* One command of a batch: argc arguments (argv[0] is the command's name),
 * argv[i] of argvlen[i] bytes (binary safe; argvlen NULL: every argument
 * is a C string). `key` is the index in argv of the key whose hash slot
 * routes the command (1 for GET and SET). The strings are only read, and
 * only during skv_rc_exec. */
typedef struct skv_rc_cmd {
    int argc;
    const char *const *argv;
    const size_t *argvlen;
    int key; /* index in argv of the key whose slot routes the command */
} skv_rc_cmd;

/* Counters since skv_rc_open, and the map as it stands. */
typedef struct skv_rc_stats {
    uint64_t commands;        /* commands given to skv_rc_exec */
    uint64_t redirects_moved; /* -MOVED replies met (each command resent) */
    uint64_t redirects_ask;   /* -ASK replies met (each command sent once with ASKING) */
    uint64_t refreshes;       /* slot maps read again after the one skv_rc_open read */
    uint64_t reconnects;      /* connections made again to a node after one was dropped */
    uint64_t failures;        /* commands skv_rc_exec left without a reply (deadline, WAIT) */
    int masters;              /* masters serving at least one slot in the current map */
} skv_rc_stats;

/* Open a client of the cluster reachable through `seeds`:
 * "host:port[,host:port...]", optionally prefixed "redis-cluster://"
 * (spaces around a seed are ignored; an IPv6 address as "[::1]:7000",
 * or bare, split at its last ':'). Connects to the seeds in order and
 * reads CLUSTER SLOTS from the first that answers it; the seeds are kept
 * as places to read the map from later. timeout_ms (> 0) bounds each
 * connect and each read or write on a connection.
 *
 * Returns the client, or NULL with a message in err (errlen bytes, always
 * NUL-terminated when errlen > 0; err may be NULL) when the spec is bad
 * (empty, a host without a port, a port outside 1..65535), no seed
 * answers, or none is a cluster (cluster support disabled, no slot
 * assigned, a malformed CLUSTER SLOTS reply). Free with skv_rc_close. */
skv_rc *skv_rc_open(const char *seeds, int timeout_ms, char *err, size_t errlen);

/* Close every connection and free the client. NULL is a no-op. Not to be
 * called while another thread is inside a call on rc. */
void skv_rc_close(skv_rc *rc);

/* The cluster hash slot (0..16383) of a key: CRC16-XMODEM of the key mod
 * 16384, where a key holding "{...}" with at least one byte between the
 * first '{' and the next '}' hashes only those bytes (Redis hash tags:
 * "{user1000}.following" and "{user1000}.followers" share a slot). */
unsigned skv_rc_slot(const void *key, size_t len);

/* Run cmds[0..n-1], each at the master serving the slot of its key.
 * Commands for one node are pipelined in their order in cmds (so a SET
 * then a GET of one key see each other), nodes are served one after
 * another. replies[i] (n entries, set to NULL first) receives the reply
 * to cmds[i]; the caller frees each with freeReplyObject. Error replies
 * other than the cluster's (WRONGTYPE, a syntax error) are replies like
 * any other (REDIS_REPLY_ERROR).
 *
 * MOVED, ASK, TRYAGAIN, CLUSTERDOWN, LOADING and connection failures are
 * retried inside (see the top of this file) until deadline_ms (relative to
 * the call, at least 1) has passed; a command still unanswered then keeps
 * replies[i] NULL. A command whose connection broke before its reply came
 * is sent again: it may run twice.
 *
 * wait_replicas > 0: each node's pipeline ends with WAIT wait_replicas T
 * (T the time left to the deadline, at least 1 ms). When WAIT counts
 * fewer replicas, or its reply is lost, the pipeline's commands are not
 * confirmed: their replies are freed and left NULL (they are not sent
 * again; they may have run).
 *
 * Returns 0 when every replies[i] is non-NULL, else -1 (and the detail in
 * seqkv_error_detail()). Bad arguments (NULL rc, cmds or replies; argc < 1;
 * key outside 0..argc-1) return -1 with every reply NULL. */
int skv_rc_exec(skv_rc *rc, const skv_rc_cmd *cmds, size_t n, redisReply **replies,
                int wait_replicas, int deadline_ms);

/* Copy the counters and the number of masters of the current map. */
void skv_rc_get_stats(skv_rc *rc, skv_rc_stats *st);

/* Test hook: make every slot of the map point at one known master, so
 * that the next commands for the other masters meet -MOVED (and the map
 * is read again). */
void skv_rc_forget_slots(skv_rc *rc);

#ifdef __cplusplus
}
#endif
#endif /* SKV_RCLUSTER_H */
