/* libFuzzer target for what a Redis Cluster node tells the cluster client
 * about the cluster (remote/rc_slots.c): CLUSTER SLOTS replies, -MOVED /
 * -ASK redirects and host:port addresses.
 *
 * Input: RESP bytes, fed to a hiredis reader capped as the client caps
 * its connections' readers; every complete reply goes to
 * skv_rc_parse_slots, twice (the two maps must be equal). An accepted map
 * must be consistent: every owner a listed master, ports in 1..65535,
 * hosts NUL-terminated and short enough, some slot served; a refused one
 * empty. The input as text also goes to the redirect and address parsers,
 * whose results must be in range. Any violation aborts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rc_int.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* replies of one input given to the parser, at most */
#define MAX_REPLIES 16

static void check_addr(const skv_rc_addr *a)
{
    CHECK(a->port >= 1 && a->port <= 65535);
    CHECK(memchr(a->host, '\0', sizeof a->host) != NULL);
    CHECK(strlen(a->host) <= SKV_RC_HOST_MAX);
}

static void check_map(const skv_rc_map *m)
{
    CHECK(m->nnodes <= SKV_RC_MAX_NODES && m->nnodes <= m->cap);
    int served = 0;
    for (size_t s = 0; s < SKV_RC_SLOTS; s++) {
        int32_t o = m->owner[s];
        CHECK(o >= -1 && o < (int32_t)m->nnodes);
        if (o >= 0) {
            CHECK(m->node[o].master);
            served = 1;
        }
    }
    CHECK(served);
    CHECK(skv_rc_map_masters(m) >= 1);
    for (size_t j = 0; j < m->nnodes; j++) {
        check_addr(&m->node[j].addr);
        for (size_t k = 0; k < j; k++) /* each node once */
            CHECK(m->node[k].addr.port != m->node[j].addr.port ||
                  strcmp(m->node[k].addr.host, m->node[j].addr.host) != 0);
    }
}

static void parse_twice(const redisReply *r)
{
    skv_rc_map *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    CHECK(a && b);
    int ra = skv_rc_parse_slots(r, "127.0.0.1", a);
    int rb = skv_rc_parse_slots(r, "127.0.0.1", b);
    CHECK(ra == rb);
    CHECK(ra == 0 || ra == SKV_ERR_FORMAT || ra == SKV_ERR_RANGE || ra == SKV_ERR_TOO_LARGE ||
          ra == SKV_ERR_NOMEM);
    if (ra == 0) {
        check_map(a);
        CHECK(a->nnodes == b->nnodes);
        CHECK(memcmp(a->owner, b->owner, sizeof a->owner) == 0);
        for (size_t j = 0; j < a->nnodes; j++) {
            CHECK(a->node[j].addr.port == b->node[j].addr.port);
            CHECK(strcmp(a->node[j].addr.host, b->node[j].addr.host) == 0);
            CHECK(a->node[j].master == b->node[j].master);
        }
    } else {
        CHECK(a->nnodes == 0 && a->node == NULL && a->owner[0] == -1);
    }
    skv_rc_map_free(a);
    skv_rc_map_free(b);
    free(a);
    free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    redisReader *rd = redisReaderCreate();
    CHECK(rd);
    skv_rc_reader_cap(rd);
    if (redisReaderFeed(rd, (const char *)data, size) == REDIS_OK) {
        for (int n = 0; n < MAX_REPLIES; n++) {
            void *reply = NULL;
            if (redisReaderGetReply(rd, &reply) != REDIS_OK || !reply)
                break;
            parse_twice(reply);
            freeReplyObject(reply);
        }
    }
    redisReaderFree(rd);

    /* the same bytes as an error reply's text and as an address */
    int slot = -1;
    skv_rc_addr to;
    int k = skv_rc_parse_redirect((const char *)data, size, "10.1.2.3", &slot, &to);
    CHECK(k == 0 || k == SKV_RC_REDIRECT_MOVED || k == SKV_RC_REDIRECT_ASK || k < 0);
    if (k > 0) {
        CHECK(slot >= 0 && slot < SKV_RC_SLOTS);
        check_addr(&to);
    }
    skv_rc_addr a;
    if (skv_rc_parse_addr((const char *)data, size, "10.1.2.3", &a) == 0)
        check_addr(&a);
    return 0;
}
