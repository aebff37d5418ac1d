/*
 * rc_int.h - inside remote/: the slot map of a Redis Cluster, the parsers
 * of what the cluster sends about it (CLUSTER SLOTS, -MOVED and -ASK) and
 * of seed addresses (rc_slots.c). Used by the client (rcluster.c), its
 * tests and the fuzz target of CLUSTER SLOTS replies
 * (tests/fuzz/fuzz_rcluster_slots.c).
 *
 * Everything here reads bytes that came off the network: every length,
 * port and slot number is checked before use, and anything malformed is
 * an error (SKV_ERR_FORMAT, SKV_ERR_RANGE, SKV_ERR_TOO_LARGE), never a
 * crash.
 */
#ifndef SKV_RC_INT_H
#define SKV_RC_INT_H
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "skv_base.h"

#define SKV_RC_SLOTS 16384
/* the longest host name or address kept, bytes (a DNS name's limit) */
#define SKV_RC_HOST_MAX 255
/* distinct nodes one map may list: a reply naming more is refused */
#define SKV_RC_MAX_NODES 4096
/* buckets of a map's index of nodes by address (twice the nodes) */
#define SKV_RC_INDEX_SIZE (2 * SKV_RC_MAX_NODES)
/* elements one array of a reply may announce: the reader refuses more
 * before hiredis allocates the element vector (a hostile "*2000000000"
 * would otherwise cost 16 GB of calloc) */
#define SKV_RC_MAX_ELEMENTS (1 << 24)

typedef struct skv_rc_addr {
    char host[SKV_RC_HOST_MAX + 1]; /* NUL-terminated, no NUL inside */
    int port;                       /* 1..65535 */
} skv_rc_addr;

typedef struct skv_rc_node {
    skv_rc_addr addr;
    int master; /* listed as the master of some slot range */
} skv_rc_node;

/* Who serves each slot. node lists every node of the reply, masters and
 * replicas, once each (by host and port). */
typedef struct skv_rc_map {
    int32_t owner[SKV_RC_SLOTS]; /* index into node of the slot's master; -1: none known */
    skv_rc_node *node;           /* nnodes entries, skv_malloc'd */
    int32_t *index;              /* SKV_RC_INDEX_SIZE buckets: node index or -1 (by address) */
    size_t nnodes, cap;
} skv_rc_map;

/* CRC16-XMODEM (polynomial 0x1021, initial 0, no reflection), the hash of
 * Redis Cluster keys: "123456789" gives 0x31C3. */
uint16_t skv_rc_crc16(const void *p, size_t len);

/* An empty map: no node, every owner -1. */
void skv_rc_map_init(skv_rc_map *m);
/* Free the nodes and leave m empty (as skv_rc_map_init). */
void skv_rc_map_free(skv_rc_map *m);
/* Index of the node a in m, added when absent; `master` marks it as a
 * master (a node once marked stays marked). SKV_ERR_TOO_LARGE past
 * SKV_RC_MAX_NODES, SKV_ERR_NOMEM. */
int skv_rc_map_add(skv_rc_map *m, const skv_rc_addr *a, int master);
/* Masters that serve at least one slot. */
int skv_rc_map_masters(const skv_rc_map *m);

/* Parse a CLUSTER SLOTS reply into out, whose previous contents are
 * dropped without being freed (pass an empty or freed map). The reply:
 * an array of ranges, each [start, end, master, replica...], a node being
 * [host, port, id?, ...]. A node whose host is empty or nil is at
 * asked_host (the node that sent the reply, per Redis' docs); one whose
 * host is "?" (unknown endpoint) is skipped, and a range whose master is
 * skipped stays without owner. Returns 0, or SKV_ERR_FORMAT (not an
 * array, a range or node of the wrong shape or types, a host with a NUL
 * byte or too long, no slot served), SKV_ERR_RANGE (a slot outside
 * 0..16383, start > end, a port outside 1..65535, a slot listed twice),
 * SKV_ERR_TOO_LARGE or SKV_ERR_NOMEM; on error out is left empty. */
int skv_rc_parse_slots(const redisReply *r, const char *asked_host, skv_rc_map *out);

/* Parse "host:port" (len bytes; the last ':' splits; "[v6]:port" has its
 * brackets removed). An empty host is default_host (refused when
 * default_host is NULL). Returns 0, SKV_ERR_FORMAT or SKV_ERR_RANGE. */
int skv_rc_parse_addr(const char *s, size_t len, const char *default_host, skv_rc_addr *out);

/* The redirect in an error reply's text ("MOVED 3999 127.0.0.1:6381",
 * "ASK 3999 :6381"; an empty host is from_host): 1 for MOVED, 2 for ASK,
 * with *slot and *to set; 0 when the text is not a redirect;
 * SKV_ERR_FORMAT or SKV_ERR_RANGE when it is one but malformed. */
enum { SKV_RC_REDIRECT_MOVED = 1, SKV_RC_REDIRECT_ASK = 2 };
int skv_rc_parse_redirect(const char *msg, size_t len, const char *from_host, int *slot,
                          skv_rc_addr *to);

/* Make reader r refuse (with a protocol error) any array announcing more
 * than SKV_RC_MAX_ELEMENTS elements. r's other behaviour is unchanged. */
void skv_rc_reader_cap(redisReader *r);

#endif /* SKV_RC_INT_H */
