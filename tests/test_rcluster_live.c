/* remote/ against a real Redis Cluster of 6 redis-server processes
 * (tests/rcluster.sh, 3 masters with a replica each, started once for the
 * run by the PRE_ALL hook and stopped by POST_ALL however the cases end,
 * or by the script's watchdog should the runner itself be killed): binary
 * values over every master, -MOVED, -ASK during a slot migration, WAIT,
 * and a master killed with SIGKILL under load. Without redis-server on the
 * PATH these cases skip with a message. Run with -j1: they share one
 * cluster and move its slots and masters. */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

#include "rc_int.h"
#include "rctest.h"
#include "skv_rcluster.h"

/* ------------------------------------------------------------------------
 * The cluster, one for the run.
 * ---------------------------------------------------------------------- */
static char cluster_dir[PATH_MAX];

static const char *script_path(void)
{
    static char path[PATH_MAX];
    const char *root = getenv("SEQKV_SOURCE_ROOT");
    snprintf(path, sizeof path, "%s/tests/rcluster.sh", root ? root : ".");
    return path;
}

ReportHook(PRE_ALL)(CR_UNUSED struct criterion_test_set *set)
{
    if (system("command -v redis-server >/dev/null 2>&1") != 0) {
        setenv("SKV_RC_TEST_SKIP", "redis-server not on the PATH (Debian: redis-server)", 1);
        return;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(cluster_dir, sizeof cluster_dir, "%s/skv_rcluster_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(cluster_dir)) {
        setenv("SKV_RC_TEST_ERROR", "mkdtemp failed", 1);
        cluster_dir[0] = '\0';
        return;
    }
    char cmd[2 * PATH_MAX + 128];
    /* SKV_RCLUSTER_OWNER: should this runner be killed (a timeout), the
     * script's watchdog stops the cluster */
    snprintf(cmd, sizeof cmd, "SKV_RCLUSTER_OWNER=%ld '%s' start '%s'", (long)getpid(),
             script_path(), cluster_dir);
    double t0 = now_s();
    FILE *f = popen(cmd, "r");
    char seeds[512] = "";
    if (f) {
        if (!fgets(seeds, sizeof seeds, f))
            seeds[0] = '\0';
        seeds[strcspn(seeds, "\n")] = '\0';
    }
    int st = f ? pclose(f) : -1;
    if (st != 0 || !seeds[0]) {
        setenv("SKV_RC_TEST_ERROR", "tests/rcluster.sh start failed (its messages are above)", 1);
        return;
    }
    fprintf(stderr, "test_rcluster: cluster %s in %s, up in %.1f s\n", seeds, cluster_dir,
            now_s() - t0);
    setenv("SKV_RC_TEST_SEEDS", seeds, 1);
    setenv("SKV_RC_TEST_DIR", cluster_dir, 1);
}

ReportHook(POST_ALL)(CR_UNUSED struct criterion_global_stats *stats)
{
    if (!cluster_dir[0])
        return;
    char cmd[2 * PATH_MAX + 128];
    snprintf(cmd, sizeof cmd, "'%s' stop '%s'", script_path(), cluster_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "test_rcluster: stopping the cluster in %s failed\n", cluster_dir);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cluster_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "test_rcluster: %s failed\n", cmd);
}

/* The seeds, or skip (no redis-server) or fail (the cluster did not start). */
static const char *cluster_seeds(void)
{
    const char *skip = getenv("SKV_RC_TEST_SKIP");
    if (skip)
        cr_skip_test("%s", skip);
    const char *e = getenv("SKV_RC_TEST_ERROR");
    cr_assert_null(e, "%s", e);
    const char *s = getenv("SKV_RC_TEST_SEEDS");
    cr_assert(s, "no cluster: the PRE_ALL hook did not run");
    return s;
}

static int cluster_ports(int *ports)
{
    const char *s = cluster_seeds();
    int n = 0;
    for (const char *p = s; p && *p && n < 6; n++) {
        const char *c = strchr(p, ':');
        cr_assert(c);
        ports[n] = atoi(c + 1);
        p = strchr(c, ',');
        p = p ? p + 1 : NULL;
    }
    cr_assert_eq(n, 6, "%s", s);
    return n;
}

static int run_script(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run_script(const char *fmt, ...)
{
    char args[512], cmd[PATH_MAX + 600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "'%s' %s", script_path(), args);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A command on one node over a plain hiredis connection. */
static redisReply *node_cmd(int port, const char *fmt, ...)
{
    redisContext *c = redisConnect("127.0.0.1", port);
    cr_assert(c && !c->err, "node %d: %s", port, c ? c->errstr : "no memory");
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    cr_assert(r, "node %d: %s", port, c->errstr);
    redisFree(c);
    return r;
}

static void node_ok(int port, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void node_ok(int port, const char *fmt, ...)
{
    char cmd[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    redisReply *r = node_cmd(port, cmd);
    cr_assert(r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0, "node %d: %s: %s",
              port, cmd, r->str ? r->str : "(not a status)");
    freeReplyObject(r);
}

static int node_is_master(int port)
{
    redisReply *r = node_cmd(port, "ROLE");
    cr_assert(r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
              r->element[0]->type == REDIS_REPLY_STRING);
    int m = strcmp(r->element[0]->str, "master") == 0;
    freeReplyObject(r);
    return m;
}

static void node_id(int port, char id[64])
{
    redisReply *r = node_cmd(port, "CLUSTER MYID");
    cr_assert(r->type == REDIS_REPLY_STRING && r->len < 64);
    memcpy(id, r->str, r->len + 1);
    freeReplyObject(r);
}

/* The map as the node on port sees it (parsed by the client's parser). */
static skv_rc_map *node_map(int port)
{
    redisReply *r = node_cmd(port, "CLUSTER SLOTS");
    skv_rc_map *m = malloc(sizeof *m);
    cr_assert(m);
    cr_assert_eq(skv_rc_parse_slots(r, "127.0.0.1", m), 0, "%s", seqkv_error_detail());
    freeReplyObject(r);
    return m;
}

/* a node of the cluster that answers (a case may have killed one) */
static int live_port(const int *ports)
{
    for (int i = 0; i < 6; i++) {
        redisContext *c = redisConnect("127.0.0.1", ports[i]);
        int up = c && !c->err;
        redisFree(c);
        if (up)
            return ports[i];
    }
    cr_assert_fail("no node of the cluster answers");
    return -1;
}

static int slot_owner_port(const int *ports, unsigned slot)
{
    skv_rc_map *m = node_map(live_port(ports));
    int32_t o = m->owner[slot];
    cr_assert_geq(o, 0, "slot %u has no master", slot);
    int port = m->node[o].addr.port;
    skv_rc_map_free(m);
    free(m);
    return port;
}

/* Wait (up to 30 s) until the cluster has settled after a failover: three
 * nodes answer ROLE master, and each of them names the same owner of slot
 * (a node that was killed and came back may speak as a master of its old
 * slots for a moment before it learns it was replaced, and its map, as a
 * replica, may still name itself): that owner's port. */
static int wait_settled(const int *ports, unsigned slot)
{
    for (int tries = 0; tries < 300; tries++) {
        int masters = 0, owner = -1, agree = 1;
        for (int i = 0; i < 6; i++) {
            redisContext *c = redisConnect("127.0.0.1", ports[i]);
            if (!c || c->err) {
                redisFree(c);
                continue;
            }
            redisFree(c);
            if (!node_is_master(ports[i]))
                continue;
            masters++;
            skv_rc_map *m = node_map(ports[i]);
            const int32_t o = m->owner[slot];
            const int port = o >= 0 ? m->node[o].addr.port : -1;
            skv_rc_map_free(m);
            free(m);
            if (owner < 0)
                owner = port;
            agree &= port >= 0 && port == owner;
        }
        if (masters == 3 && agree && owner > 0 && node_is_master(owner))
            return owner;
        usleep(100 * 1000);
    }
    cr_assert_fail("the cluster did not settle: 3 masters agreeing on slot %u's owner", slot);
    return -1;
}

static skv_rc *open_cluster(void)
{
    char err[256];
    skv_rc *rc = skv_rc_open(cluster_seeds(), 2000, err, sizeof err);
    cr_assert(rc, "skv_rc_open: %s", err);
    return rc;
}

/* A batch of GET and SET commands over caller-owned keys and values. */
typedef struct batch {
    skv_rc_cmd *cmd;
    const char **argv; /* 3 per command */
    size_t *len;       /* 3 per command */
    redisReply **reply;
    size_t n, cap;
} batch;

static void batch_init(batch *b, size_t cap)
{
    b->cmd = calloc(cap, sizeof *b->cmd);
    b->argv = calloc(3 * cap, sizeof *b->argv);
    b->len = calloc(3 * cap, sizeof *b->len);
    b->reply = calloc(cap, sizeof *b->reply);
    cr_assert(b->cmd && b->argv && b->len && b->reply);
    b->n = 0;
    b->cap = cap;
}

static void batch_add(batch *b, const char *name, const char *key, size_t klen, const void *val,
                      size_t vlen)
{
    cr_assert_lt(b->n, b->cap);
    const char **a = b->argv + 3 * b->n;
    size_t *l = b->len + 3 * b->n;
    a[0] = name;
    l[0] = strlen(name);
    a[1] = key;
    l[1] = klen;
    a[2] = val;
    l[2] = vlen;
    b->cmd[b->n] = (skv_rc_cmd){.argc = val ? 3 : 2, .argv = a, .argvlen = l, .key = 1};
    b->n++;
}

static int batch_exec(skv_rc *rc, batch *b, int wait_replicas, int deadline_ms)
{
    return skv_rc_exec(rc, b->cmd, b->n, b->reply, wait_replicas, deadline_ms);
}

static void batch_free_replies(batch *b)
{
    for (size_t i = 0; i < b->n; i++) {
        freeReplyObject(b->reply[i]);
        b->reply[i] = NULL;
    }
}

static void batch_free(batch *b)
{
    batch_free_replies(b);
    free(b->cmd);
    free(b->argv);
    free(b->len);
    free(b->reply);
}

static void expect_ok(const redisReply *r, const char *what)
{
    cr_assert(r, "%s: no reply", what);
    cr_assert(r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0, "%s: %s", what,
              r->str ? r->str : "(not a status)");
}

static void expect_bytes(const redisReply *r, const void *v, size_t len, const char *what)
{
    cr_assert(r, "%s: no reply", what);
    cr_assert_eq(r->type, REDIS_REPLY_STRING, "%s: reply type %d (%s)", what, r->type,
                 r->str ? r->str : "");
    cr_assert_eq(r->len, len, "%s: %zu bytes, wanted %zu", what, r->len, len);
    cr_assert(memcmp(r->str, v, len) == 0, "%s: bytes differ", what);
}

/* value i: 1..400 bytes, with NUL bytes inside */
#define VAL_MAX 400
static size_t value_of(unsigned i, unsigned salt, uint8_t *v)
{
    size_t len = 1 + (i * 37u + salt) % VAL_MAX;
    for (size_t j = 0; j < len; j++)
        v[j] = (uint8_t)((i * 131u + j * 17u + salt) & 0xff);
    v[len / 2] = 0;
    return len;
}

/* ------------------------------------------------------------------------
 * Cases against the cluster.
 * ---------------------------------------------------------------------- */
#define NKEYS 2000

Test(rc_cluster, set_then_get_2000_binary_values_over_every_master, .timeout = 120)
{
    int ports[6];
    cluster_ports(ports);
    skv_rc *rc = open_cluster();
    static char key[NKEYS][32];
    static uint8_t val[NKEYS][VAL_MAX];
    size_t vlen[NKEYS];
    batch b;
    batch_init(&b, 2 * NKEYS);
    for (unsigned i = 0; i < NKEYS; i++) {
        snprintf(key[i], sizeof key[i], "rc:bin:%u", i);
        vlen[i] = value_of(i, 1, val[i]);
        batch_add(&b, "SET", key[i], strlen(key[i]), val[i], vlen[i]);
    }
    for (unsigned i = 0; i < NKEYS; i++)
        batch_add(&b, "GET", key[i], strlen(key[i]), NULL, 0);
    cr_assert_eq(batch_exec(rc, &b, 0, 10000), 0, "%s", seqkv_error_detail());
    for (unsigned i = 0; i < NKEYS; i++) {
        expect_ok(b.reply[i], key[i]);
        expect_bytes(b.reply[NKEYS + i], val[i], vlen[i], key[i]);
    }
    skv_rc_stats st;
    skv_rc_get_stats(rc, &st);
    cr_assert_eq(st.masters, 3);
    cr_assert_eq(st.commands, 2 * NKEYS);
    cr_assert_eq(st.failures, 0);
    cr_assert_eq(st.redirects_moved, 0, "a fresh map meets no MOVED");
    /* the keys lie on every master, as the cluster's own map says */
    skv_rc_map *m = node_map(live_port(ports));
    int on[SKV_RC_MAX_NODES] = {0};
    for (unsigned i = 0; i < NKEYS; i++)
        on[m->owner[slot_of(key[i])]]++;
    int masters_hit = 0;
    for (size_t j = 0; j < m->nnodes; j++)
        masters_hit += on[j] > 0;
    cr_assert_eq(masters_hit, 3);
    skv_rc_map_free(m);
    free(m);
    batch_free(&b);
    skv_rc_close(rc);
}

Test(rc_cluster, a_dead_first_seed_and_spaced_seeds_still_open, .timeout = 60)
{
    int ports[6];
    cluster_ports(ports);
    char spec[256], err[256];
    snprintf(spec, sizeof spec, "redis-cluster://127.0.0.1:%d, 127.0.0.1:%d ,127.0.0.1:%d",
             dead_port(), ports[4], ports[5]);
    skv_rc *rc = skv_rc_open(spec, 2000, err, sizeof err);
    cr_assert(rc, "%s: %s", spec, err);
    skv_rc_stats st;
    skv_rc_get_stats(rc, &st);
    cr_assert_eq(st.masters, 3);
    skv_rc_close(rc);
}

Test(rc_cluster, error_replies_are_returned_not_retried, .timeout = 60)
{
    skv_rc *rc = open_cluster();
    batch b;
    batch_init(&b, 3);
    const char *k = "rc:list";
    static const char *del[] = {"DEL", "rc:list"};
    static const char *push[] = {"LPUSH", "rc:list", "x"};
    b.cmd[0] = (skv_rc_cmd){.argc = 2, .argv = del, .key = 1};
    b.cmd[1] = (skv_rc_cmd){.argc = 3, .argv = push, .key = 1};
    b.n = 2;
    batch_add(&b, "GET", k, strlen(k), NULL, 0);
    cr_assert_eq(batch_exec(rc, &b, 0, 5000), 0, "%s", seqkv_error_detail());
    cr_assert_eq(b.reply[1]->type, REDIS_REPLY_INTEGER);
    cr_assert_eq(b.reply[1]->integer, 1);
    cr_assert_eq(b.reply[2]->type, REDIS_REPLY_ERROR);
    cr_assert(strncmp(b.reply[2]->str, "WRONGTYPE", 9) == 0, "%s", b.reply[2]->str);
    batch_free(&b);
    /* bad commands are refused before anything is sent */
    redisReply *r[1] = {(redisReply *)1};
    skv_rc_cmd bad = {.argc = 2, .argv = del, .key = 2};
    cr_assert_eq(skv_rc_exec(rc, &bad, 1, r, 0, 1000), -1);
    cr_assert_null(r[0]);
    skv_rc_close(rc);
}

Test(rc_cluster, moved_after_forgetting_the_map_still_answers_everything, .timeout = 60)
{
    skv_rc *rc = open_cluster();
    enum { N = 600 };
    static char key[N][32];
    static uint8_t val[N][VAL_MAX];
    size_t vlen[N];
    batch b;
    batch_init(&b, 2 * N);
    for (unsigned i = 0; i < N; i++) {
        snprintf(key[i], sizeof key[i], "rc:moved:%u", i);
        vlen[i] = value_of(i, 2, val[i]);
        batch_add(&b, "SET", key[i], strlen(key[i]), val[i], vlen[i]);
    }
    for (unsigned i = 0; i < N; i++)
        batch_add(&b, "GET", key[i], strlen(key[i]), NULL, 0);
    skv_rc_forget_slots(rc);
    skv_rc_stats st0, st;
    skv_rc_get_stats(rc, &st0);
    cr_assert_eq(st0.masters, 1, "after forgetting, one master serves every slot");
    cr_assert_eq(batch_exec(rc, &b, 0, 10000), 0, "%s", seqkv_error_detail());
    for (unsigned i = 0; i < N; i++) {
        expect_ok(b.reply[i], key[i]);
        expect_bytes(b.reply[N + i], val[i], vlen[i], key[i]);
    }
    skv_rc_get_stats(rc, &st);
    cr_assert_gt(st.redirects_moved, 0);
    cr_assert_geq(st.refreshes, 1);
    cr_assert_eq(st.masters, 3, "the map was read again");
    /* the map read again routes right: no more MOVED */
    batch_free_replies(&b);
    cr_assert_eq(batch_exec(rc, &b, 0, 10000), 0, "%s", seqkv_error_detail());
    skv_rc_stats st2;
    skv_rc_get_stats(rc, &st2);
    cr_assert_eq(st2.redirects_moved, st.redirects_moved);
    batch_free(&b);
    skv_rc_close(rc);
}

Test(rc_cluster, ask_during_a_slot_migration_reaches_both_keys, .timeout = 60)
{
    int ports[6];
    cluster_ports(ports);
    const char *ka = "{rc:ask}a", *kb = "{rc:ask}b";
    const char *va = "value\0a", *vb = "value\0bb";
    const size_t la = 7, lb = 8;
    const unsigned slot = slot_of(ka);
    cr_assert_eq(slot_of(kb), slot);
    /* (an earlier case fails a master over: the owner as the masters see it) */
    const int src = wait_settled(ports, slot);
    skv_rc *rc = open_cluster();
    batch b;
    batch_init(&b, 2);
    batch_add(&b, "SET", ka, strlen(ka), va, la);
    batch_add(&b, "SET", kb, strlen(kb), vb, lb);
    cr_assert_eq(batch_exec(rc, &b, 0, 5000), 0, "%s", seqkv_error_detail());
    batch_free_replies(&b);

    int dst = -1;
    for (int i = 0; i < 6 && dst < 0; i++)
        if (ports[i] != src && node_is_master(ports[i]))
            dst = ports[i];
    cr_assert_gt(dst, 0, "no second master");
    char src_id[64], dst_id[64];
    node_id(src, src_id);
    node_id(dst, dst_id);
    /* by hand, as redis-cli --cluster reshard does it: importing at the
     * destination, migrating at the source, then one of the two keys */
    node_ok(dst, "CLUSTER SETSLOT %u IMPORTING %s", slot, src_id);
    node_ok(src, "CLUSTER SETSLOT %u MIGRATING %s", slot, dst_id);
    node_ok(src, "MIGRATE 127.0.0.1 %d %s 0 5000", dst, ka);

    b.n = 0;
    batch_add(&b, "GET", ka, strlen(ka), NULL, 0);
    batch_add(&b, "GET", kb, strlen(kb), NULL, 0);
    skv_rc_stats st0, st;
    skv_rc_get_stats(rc, &st0);
    cr_assert_eq(batch_exec(rc, &b, 0, 5000), 0, "%s", seqkv_error_detail());
    expect_bytes(b.reply[0], va, la, "the migrated key (ASK)");
    expect_bytes(b.reply[1], vb, lb, "the key not yet migrated");
    skv_rc_get_stats(rc, &st);
    cr_assert_geq(st.redirects_ask, st0.redirects_ask + 1);
    cr_assert_eq(st.redirects_moved, st0.redirects_moved, "ASK changes no map");
    batch_free_replies(&b);

    /* finish as `redis-cli --cluster reshard` does: every key left in the
     * slot (the other one, and the failover case's, which stores a key in
     * every slot), then the slot to its new master everywhere. A source
     * still holding keys refuses SETSLOT NODE unless gossip from the
     * destination got there first. */
    for (size_t nk = 1; nk;) {
        redisReply *r = node_cmd(src, "CLUSTER GETKEYSINSLOT %u 100", slot);
        cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
        nk = r->elements;
        for (size_t i = 0; i < nk; i++)
            node_ok(src, "MIGRATE 127.0.0.1 %d %s 0 5000", dst, r->element[i]->str);
        freeReplyObject(r);
    }
    node_ok(dst, "CLUSTER SETSLOT %u NODE %s", slot, dst_id);
    node_ok(src, "CLUSTER SETSLOT %u NODE %s", slot, dst_id);
    for (int i = 0; i < 6; i++)
        if (ports[i] != src && ports[i] != dst && node_is_master(ports[i]))
            node_ok(ports[i], "CLUSTER SETSLOT %u NODE %s", slot, dst_id);
    cr_assert_eq(batch_exec(rc, &b, 0, 10000), 0, "%s", seqkv_error_detail());
    expect_bytes(b.reply[0], va, la, "after the migration");
    expect_bytes(b.reply[1], vb, lb, "after the migration");
    skv_rc_get_stats(rc, &st0);
    cr_assert_geq(st0.redirects_moved, st.redirects_moved + 1, "the stale map met MOVED");
    batch_free(&b);
    skv_rc_close(rc);
    cr_assert_eq(run_script("wait-ok '%s'", getenv("SKV_RC_TEST_DIR")), 0);
}

Test(rc_cluster, wait_confirms_with_one_replica_and_not_with_two, .timeout = 60)
{
    skv_rc *rc = open_cluster();
    enum { N = 300 };
    static char key[N][32];
    static uint8_t val[N][VAL_MAX];
    batch b;
    batch_init(&b, N);
    for (unsigned i = 0; i < N; i++) {
        snprintf(key[i], sizeof key[i], "rc:wait:%u", i);
        size_t l = value_of(i, 3, val[i]);
        batch_add(&b, "SET", key[i], strlen(key[i]), val[i], l);
    }
    cr_assert_eq(batch_exec(rc, &b, 1, 10000), 0, "%s", seqkv_error_detail());
    for (unsigned i = 0; i < N; i++)
        expect_ok(b.reply[i], key[i]);
    batch_free_replies(&b);
    skv_rc_stats st0, st;
    skv_rc_get_stats(rc, &st0);
    /* each master has one replica: WAIT 2 counts too few, nothing is
     * confirmed, and the commands are not sent again */
    double t0 = now_s();
    cr_assert_eq(batch_exec(rc, &b, 2, 300), -1);
    double took = now_s() - t0;
    for (unsigned i = 0; i < N; i++)
        cr_assert_null(b.reply[i], "%s was confirmed by 2 replicas", key[i]);
    skv_rc_get_stats(rc, &st);
    cr_assert_eq(st.failures, st0.failures + N);
    cr_assert_lt(took, 5.0, "the deadline bounds WAIT (took %.2f s)", took);
    batch_free(&b);
    skv_rc_close(rc);
}

typedef struct mt_arg {
    skv_rc *rc;
    unsigned id;
    int failed;
} mt_arg;

static void *mt_worker(void *p)
{
    mt_arg *a = p;
    enum { N = 200 };
    char key[N][32];
    uint8_t val[N][16];
    const char *argv[2 * N][3];
    size_t len[2 * N][3];
    skv_rc_cmd cmd[2 * N];
    redisReply *rep[2 * N];
    for (unsigned i = 0; i < N; i++) {
        snprintf(key[i], sizeof key[i], "rc:mt:%u:%u", a->id, i);
        memset(val[i], (int)(a->id * 7 + i), sizeof val[i]);
        argv[i][0] = "SET";
        argv[i][1] = key[i];
        argv[i][2] = (const char *)val[i];
        len[i][0] = 3;
        len[i][1] = strlen(key[i]);
        len[i][2] = sizeof val[i];
        cmd[i] = (skv_rc_cmd){.argc = 3, .argv = argv[i], .argvlen = len[i], .key = 1};
        argv[N + i][0] = "GET";
        argv[N + i][1] = key[i];
        len[N + i][0] = 3;
        len[N + i][1] = len[i][1];
        cmd[N + i] = (skv_rc_cmd){.argc = 2, .argv = argv[N + i], .argvlen = len[N + i], .key = 1};
    }
    for (int round = 0; round < 5 && !a->failed; round++) {
        if (skv_rc_exec(a->rc, cmd, 2 * N, rep, 0, 10000) != 0)
            a->failed = 1;
        for (unsigned i = 0; i < N && !a->failed; i++)
            if (rep[N + i]->type != REDIS_REPLY_STRING || rep[N + i]->len != sizeof val[i] ||
                memcmp(rep[N + i]->str, val[i], sizeof val[i]) != 0)
                a->failed = 2;
        for (unsigned i = 0; i < 2 * N; i++)
            freeReplyObject(rep[i]);
    }
    return NULL;
}

Test(rc_cluster, one_client_serves_several_threads, .timeout = 60)
{
    skv_rc *rc = open_cluster();
    enum { T = 4 };
    pthread_t th[T];
    mt_arg arg[T];
    for (unsigned t = 0; t < T; t++) {
        arg[t] = (mt_arg){.rc = rc, .id = t};
        cr_assert_eq(pthread_create(&th[t], NULL, mt_worker, &arg[t]), 0);
    }
    for (unsigned t = 0; t < T; t++)
        pthread_join(th[t], NULL);
    for (unsigned t = 0; t < T; t++)
        cr_assert_eq(arg[t].failed, 0, "thread %u: %d", t, arg[t].failed);
    skv_rc_stats st;
    skv_rc_get_stats(rc, &st);
    cr_assert_eq(st.commands, (uint64_t)T * 5 * 400);
    skv_rc_close(rc);
}

/* tag[s]: a short string whose slot is s, for keys "{tag}..." on every slot */
static void tags_for_every_slot(char (*tag)[8])
{
    unsigned left = SKV_RC_SLOTS;
    for (unsigned s = 0; s < SKV_RC_SLOTS; s++)
        tag[s][0] = '\0';
    for (unsigned i = 0; left; i++) {
        char t[8];
        snprintf(t, sizeof t, "%u", i);
        unsigned s = slot_of(t);
        if (!tag[s][0]) {
            memcpy(tag[s], t, sizeof t);
            left--;
        }
    }
}

Test(rc_cluster, a_master_killed_fails_over_and_confirmed_values_survive, .timeout = 120)
{
    int ports[6];
    cluster_ports(ports);
    const char *dir = getenv("SKV_RC_TEST_DIR");
    cr_assert(dir);
    static char tag[SKV_RC_SLOTS][8];
    tags_for_every_slot(tag);
    static char kold[SKV_RC_SLOTS][24], knew[SKV_RC_SLOTS][24];
    static uint8_t vold[SKV_RC_SLOTS][VAL_MAX], vnew[SKV_RC_SLOTS][VAL_MAX];
    static size_t lold[SKV_RC_SLOTS], lnew[SKV_RC_SLOTS];
    skv_rc *rc = open_cluster();
    batch b;
    batch_init(&b, 2 * SKV_RC_SLOTS);
    for (unsigned s = 0; s < SKV_RC_SLOTS; s++) {
        snprintf(kold[s], sizeof kold[s], "{%s}rc:fo:old", tag[s]);
        snprintf(knew[s], sizeof knew[s], "{%s}rc:fo:new", tag[s]);
        cr_assert_eq(slot_of(kold[s]), s);
        lold[s] = value_of(s, 4, vold[s]);
        lnew[s] = value_of(s, 5, vnew[s]);
        batch_add(&b, "SET", kold[s], strlen(kold[s]), vold[s], lold[s]);
    }
    /* confirmed by the replicas before the kill */
    cr_assert_eq(batch_exec(rc, &b, 1, 20000), 0, "%s", seqkv_error_detail());
    batch_free_replies(&b);

    int victim = slot_owner_port(ports, 0);
    char pidfile[PATH_MAX];
    snprintf(pidfile, sizeof pidfile, "%s/%d/redis.pid", dir, victim);
    FILE *f = fopen(pidfile, "r");
    cr_assert(f, "%s: %s", pidfile, strerror(errno));
    int pid = 0;
    cr_assert_eq(fscanf(f, "%d", &pid), 1);
    fclose(f);
    cr_assert_eq(kill(pid, SIGKILL), 0, "kill %d: %s", pid, strerror(errno));
    for (int i = 0; i < 200 && kill(pid, 0) == 0; i++)
        sleep_ms(10);

    b.n = 0;
    for (unsigned s = 0; s < SKV_RC_SLOTS; s++)
        batch_add(&b, "GET", kold[s], strlen(kold[s]), NULL, 0);
    for (unsigned s = 0; s < SKV_RC_SLOTS; s++)
        batch_add(&b, "SET", knew[s], strlen(knew[s]), vnew[s], lnew[s]);
    skv_rc_stats st0, st;
    skv_rc_get_stats(rc, &st0);
    double t0 = now_s();
    int erc = batch_exec(rc, &b, 0, 20000);
    double took = now_s() - t0;
    cr_assert_eq(erc, 0, "after %.1f s: %s", took, seqkv_error_detail());
    for (unsigned s = 0; s < SKV_RC_SLOTS; s++) {
        expect_bytes(b.reply[s], vold[s], lold[s], kold[s]);
        expect_ok(b.reply[SKV_RC_SLOTS + s], knew[s]);
    }
    skv_rc_get_stats(rc, &st);
    fprintf(stderr,
            "test_rcluster: failover of %d answered in %.1f s (refreshes %llu, moved %llu, "
            "reconnects %llu)\n",
            victim, took, (unsigned long long)(st.refreshes - st0.refreshes),
            (unsigned long long)(st.redirects_moved - st0.redirects_moved),
            (unsigned long long)(st.reconnects - st0.reconnects));
    cr_assert_gt(st.refreshes, st0.refreshes);
    cr_assert_eq(st.masters, 3, "a replica took over the dead master's slots");
    /* every live node learns of the new master (gossip may lag the client) */
    int owner = victim;
    for (int i = 0; i < 100 && owner == victim; i++) {
        owner = slot_owner_port(ports, 0);
        if (owner == victim)
            sleep_ms(50);
    }
    cr_assert_neq(owner, victim);
    batch_free_replies(&b);

    /* the killed node comes back with its config, as a replica */
    cr_assert_eq(run_script("restart '%s' %d", dir, victim), 0);
    cr_assert_eq(run_script("wait-ok '%s'", dir), 0);
    cr_assert_not(node_is_master(victim), "the old master came back as a replica");
    /* and the client still reads everything */
    b.n = 0;
    for (unsigned s = 0; s < SKV_RC_SLOTS; s += 7)
        batch_add(&b, "GET", knew[s], strlen(knew[s]), NULL, 0);
    cr_assert_eq(batch_exec(rc, &b, 0, 20000), 0, "%s", seqkv_error_detail());
    for (unsigned s = 0, i = 0; s < SKV_RC_SLOTS; s += 7, i++)
        expect_bytes(b.reply[i], vnew[s], lnew[s], knew[s]);
    batch_free(&b);
    skv_rc_close(rc);
}
