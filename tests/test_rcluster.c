/* remote/: the Redis Cluster client. Slots and the parsers of what the
 * cluster sends, checked against Redis' documented examples and against
 * hand-made replies; seed specs refused. The cases against a real cluster
 * are test_rcluster_live.c's (the same executable). */
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
 * Helpers.
 * ---------------------------------------------------------------------- */
double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* the reference CRC16-XMODEM, bit by bit, beside rc_slots.c's table */
static uint16_t crc16_bitwise(const uint8_t *p, size_t len)
{
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)(p[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    return crc;
}

unsigned slot_of(const char *key)
{
    return skv_rc_slot(key, strlen(key));
}

/* One complete reply from RESP bytes, through hiredis' reader. */
static redisReply *resp(const char *bytes, size_t len)
{
    redisReader *r = redisReaderCreate();
    cr_assert(r);
    cr_assert_eq(redisReaderFeed(r, bytes, len), REDIS_OK);
    void *reply = NULL;
    cr_assert_eq(redisReaderGetReply(r, &reply), REDIS_OK, "%s", r->errstr);
    cr_assert(reply, "incomplete RESP in the test");
    redisReaderFree(r);
    return reply;
}

/* The slots reply of a 3-master / 3-replica cluster, as a Redis 7.0 node
 * sent it (captured from tests/rcluster.sh's cluster). */
static const char real_slots[] =
    "*3\r\n"
    "*4\r\n:0\r\n:5460\r\n"
    "*4\r\n$9\r\n127.0.0.1\r\n:23308\r\n$40\r\n753ace7328912832882c5e6b839445f5cbedf169\r\n*0\r\n"
    "*4\r\n$9\r\n127.0.0.1\r\n:23312\r\n$40\r\nb06e2da08739aa339ea05cc041b8daf76c31bc3e\r\n*0\r\n"
    "*4\r\n:5461\r\n:10922\r\n"
    "*4\r\n$9\r\n127.0.0.1\r\n:23309\r\n$40\r\n3e8bb41bf7b17db385c0efb6643b997441ced667\r\n*0\r\n"
    "*4\r\n$9\r\n127.0.0.1\r\n:23313\r\n$40\r\n4d635654afd99e55d8e6c9e34b67e7fcde618bdb\r\n*0\r\n"
    "*4\r\n:10923\r\n:16383\r\n"
    "*4\r\n$9\r\n127.0.0.1\r\n:23310\r\n$40\r\n75d1a4e9542b473bd85af479bf8d724178ce0a17\r\n*0\r\n"
    "*4\r\n$9\r\n127.0.0.1\r\n:23311\r\n$40\r\naa04538c2f50593470fc044895aee05b11f514ac\r\n*0\r\n";

/* skv_rc_parse_slots of RESP bytes: its return code (the map freed) */
static int parse_resp(const char *bytes)
{
    redisReply *r = resp(bytes, strlen(bytes));
    skv_rc_map *m = malloc(sizeof *m);
    cr_assert(m);
    int rc = skv_rc_parse_slots(r, "10.0.0.9", m);
    if (rc) {
        cr_expect_eq(m->nnodes, 0, "a refused reply leaves the map empty");
        cr_expect_eq(m->owner[0], -1);
    }
    skv_rc_map_free(m);
    free(m);
    freeReplyObject(r);
    return rc;
}

/* ------------------------------------------------------------------------
 * Slots and parsers.
 * ---------------------------------------------------------------------- */
Test(rc_slot, crc16_matches_xmodem_and_the_bitwise_reference)
{
    cr_assert_eq(skv_rc_crc16("123456789", 9), 0x31C3);
    cr_assert_eq(skv_rc_crc16("", 0), 0);
    uint8_t buf[512];
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t len = 0; len <= sizeof buf; len += 7) {
        for (size_t i = 0; i < len; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            buf[i] = (uint8_t)(x >> 56);
        }
        cr_assert_eq(skv_rc_crc16(buf, len), crc16_bitwise(buf, len), "length %zu", len);
    }
}

Test(rc_slot, hash_tags_follow_redis_documented_examples)
{
    cr_assert_eq(slot_of("foo"), 12182);
    cr_assert_eq(slot_of("123456789"), 0x31C3 & 16383);
    cr_assert_eq(slot_of("{user1000}.following"), slot_of("{user1000}.followers"));
    cr_assert_eq(slot_of("{user1000}.following"), slot_of("user1000"));
    /* an empty tag: the whole key */
    cr_assert_eq(slot_of("foo{}{bar}"), skv_rc_crc16("foo{}{bar}", 10) & 16383);
    cr_assert_neq(slot_of("foo{}{bar}"), slot_of("bar"));
    /* from the first '{' to the first '}' after it */
    cr_assert_eq(slot_of("foo{{bar}}zap"), slot_of("{bar"));
    cr_assert_eq(slot_of("foo{bar}{zap}"), slot_of("bar"));
    /* no closing brace: the whole key */
    cr_assert_eq(slot_of("foo{bar"), skv_rc_crc16("foo{bar", 7) & 16383);
    cr_assert_eq(skv_rc_slot("", 0), 0);
    /* binary keys: a NUL is a byte like another */
    cr_assert_eq(skv_rc_slot("a\0{b}", 5), slot_of("b"));
    cr_assert_eq(skv_rc_slot("a\0b", 3), skv_rc_crc16("a\0b", 3) & 16383);
}

Test(rc_slot, redirects_parse_and_malformed_ones_are_refused)
{
    skv_rc_addr a;
    int slot = -1;
    const char *m = "MOVED 3999 127.0.0.1:6381";
    cr_assert_eq(skv_rc_parse_redirect(m, strlen(m), "10.0.0.1", &slot, &a), SKV_RC_REDIRECT_MOVED);
    cr_assert_eq(slot, 3999);
    cr_assert_str_eq(a.host, "127.0.0.1");
    cr_assert_eq(a.port, 6381);
    m = "ASK 16383 :7000"; /* Redis 7: an unknown endpoint is the node asked */
    cr_assert_eq(skv_rc_parse_redirect(m, strlen(m), "10.0.0.1", &slot, &a), SKV_RC_REDIRECT_ASK);
    cr_assert_eq(slot, 16383);
    cr_assert_str_eq(a.host, "10.0.0.1");
    cr_assert_eq(a.port, 7000);
    m = "MOVED 12 ::1:7001"; /* IPv6: the last ':' splits */
    cr_assert_eq(skv_rc_parse_redirect(m, strlen(m), "x", &slot, &a), SKV_RC_REDIRECT_MOVED);
    cr_assert_str_eq(a.host, "::1");
    cr_assert_eq(a.port, 7001);
    const char *other[] = {"WRONGTYPE Operation against a key", "ERR unknown", "MOVEDX 1 a:1", ""};
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
        cr_assert_eq(skv_rc_parse_redirect(other[i], strlen(other[i]), "x", &slot, &a), 0, "%s",
                     other[i]);
    const char *bad[] = {"MOVED 16384 a:1", "MOVED -1 a:1",  "MOVED 1 a:0",    "MOVED 1 a:65536",
                         "ASK 1 a",         "ASK 1",         "MOVED x a:1",    "MOVED 1 a:1x",
                         "MOVED  1 a:1",    "ASK 1 a:99999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_lt(skv_rc_parse_redirect(bad[i], strlen(bad[i]), "x", &slot, &a), 0, "%s",
                     bad[i]);
}

Test(rc_slot, a_real_cluster_slots_reply_parses_to_its_map)
{
    redisReply *r = resp(real_slots, sizeof real_slots - 1);
    skv_rc_map *m = malloc(sizeof *m);
    cr_assert(m);
    cr_assert_eq(skv_rc_parse_slots(r, "10.0.0.9", m), 0, "%s", seqkv_error_detail());
    freeReplyObject(r);
    cr_assert_eq(m->nnodes, 6);
    cr_assert_eq(skv_rc_map_masters(m), 3);
    const int first[] = {0, 5461, 10923}, last[] = {5460, 10922, 16383},
              port[] = {23308, 23309, 23310};
    for (int k = 0; k < 3; k++) {
        int32_t o = m->owner[first[k]];
        cr_assert_geq(o, 0);
        cr_assert_eq(m->owner[last[k]], o);
        cr_assert_eq(m->node[o].addr.port, port[k]);
        cr_assert_str_eq(m->node[o].addr.host, "127.0.0.1");
        cr_assert(m->node[o].master);
    }
    int replicas = 0;
    for (size_t j = 0; j < m->nnodes; j++)
        replicas += !m->node[j].master;
    cr_assert_eq(replicas, 3);
    skv_rc_map_free(m);
    free(m);
}

Test(rc_slot, malformed_cluster_slots_replies_are_refused)
{
    /* host nil or empty: the node asked; "?" skipped */
    cr_assert_eq(parse_resp("*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$-1\r\n:7000\r\n"), 0);
    cr_assert_eq(parse_resp("*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$0\r\n\r\n:7000\r\n"), 0);
    cr_assert_eq(parse_resp("*2\r\n*3\r\n:0\r\n:10\r\n*2\r\n$1\r\n?\r\n:7000\r\n"
                            "*3\r\n:11\r\n:16383\r\n*2\r\n$1\r\nh\r\n:7001\r\n"),
                 0);
#define RESP(s) s, sizeof(s) - 1
    const struct {
        const char *resp;
        size_t len;
        int err;
    } bad[] = {
        {RESP("$5\r\nhello\r\n"), SKV_ERR_FORMAT}, /* not an array */
        {RESP("-ERR This instance has cluster support disabled\r\n"), SKV_ERR_FORMAT},
        {RESP("*0\r\n"), SKV_ERR_FORMAT},  /* no slot served */
        {RESP("*-1\r\n"), SKV_ERR_FORMAT}, /* nil */
        {RESP("*1\r\n:1\r\n"), SKV_ERR_FORMAT}, /* a range not an array */
        {RESP("*1\r\n*2\r\n:0\r\n:1\r\n"), SKV_ERR_FORMAT}, /* no master */
        {RESP("*1\r\n*3\r\n$1\r\n0\r\n:1\r\n*2\r\n$1\r\nh\r\n:1\r\n"), SKV_ERR_FORMAT},
        {RESP("*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\nh\r\n:1\r\n"), SKV_ERR_RANGE},
        {RESP("*1\r\n*3\r\n:-1\r\n:5\r\n*2\r\n$1\r\nh\r\n:1\r\n"), SKV_ERR_RANGE},
        {RESP("*1\r\n*3\r\n:9\r\n:5\r\n*2\r\n$1\r\nh\r\n:1\r\n"), SKV_ERR_RANGE}, /* reversed */
        {RESP("*1\r\n*3\r\n:0\r\n:5\r\n*2\r\n$1\r\nh\r\n:0\r\n"), SKV_ERR_RANGE}, /* port 0 */
        {RESP("*1\r\n*3\r\n:0\r\n:5\r\n*2\r\n$1\r\nh\r\n:65536\r\n"), SKV_ERR_RANGE},
        {RESP("*1\r\n*3\r\n:0\r\n:5\r\n*2\r\n$1\r\nh\r\n$4\r\n7000\r\n"), SKV_ERR_FORMAT},
        {RESP("*1\r\n*3\r\n:0\r\n:5\r\n*1\r\n$1\r\nh\r\n"), SKV_ERR_FORMAT}, /* no port */
        {RESP("*1\r\n*3\r\n:0\r\n:5\r\n*2\r\n:1\r\n:1\r\n"), SKV_ERR_FORMAT}, /* int host */
        {RESP("*1\r\n*3\r\n:0\r\n:5\r\n*2\r\n$3\r\na\0b\r\n:1\r\n"), SKV_ERR_FORMAT},
        {RESP("*2\r\n*3\r\n:0\r\n:5\r\n*2\r\n$1\r\nh\r\n:1\r\n"
              "*3\r\n:5\r\n:9\r\n*2\r\n$1\r\nh\r\n:2\r\n"),
         SKV_ERR_RANGE}, /* slot 5 twice */
        /* every master unknown: nothing served */
        {RESP("*1\r\n*3\r\n:0\r\n:5\r\n*2\r\n$1\r\n?\r\n:1\r\n"), SKV_ERR_FORMAT},
    };
#undef RESP
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        redisReply *r = resp(bad[i].resp, bad[i].len);
        skv_rc_map *m = malloc(sizeof *m);
        cr_assert(m);
        int rc = skv_rc_parse_slots(r, "x", m);
        cr_expect_eq(rc, bad[i].err, "case %zu: %d (%s)", i, rc, seqkv_error_detail());
        cr_expect_eq(m->nnodes, 0);
        skv_rc_map_free(m);
        free(m);
        freeReplyObject(r);
    }
    /* a host over 255 bytes */
    char big[600];
    int n = snprintf(big, sizeof big, "*1\r\n*3\r\n:0\r\n:5\r\n*2\r\n$256\r\n");
    memset(big + n, 'h', 256);
    n += 256;
    n += snprintf(big + n, sizeof big - (size_t)n, "\r\n:1\r\n");
    cr_assert_eq(parse_resp(big), SKV_ERR_FORMAT);
}

Test(rc_slot, the_reader_refuses_huge_arrays_before_allocating)
{
    redisReader *r = redisReaderCreate();
    cr_assert(r);
    skv_rc_reader_cap(r);
    const char *huge = "*2000000000\r\n";
    cr_assert_eq(redisReaderFeed(r, huge, strlen(huge)), REDIS_OK);
    void *reply = NULL;
    cr_assert_eq(redisReaderGetReply(r, &reply), REDIS_ERR);
    cr_assert_null(reply);
    redisReaderFree(r);
    /* a capped reader still reads ordinary replies */
    r = redisReaderCreate();
    skv_rc_reader_cap(r);
    cr_assert_eq(redisReaderFeed(r, real_slots, sizeof real_slots - 1), REDIS_OK);
    cr_assert_eq(redisReaderGetReply(r, &reply), REDIS_OK);
    cr_assert(reply);
    cr_assert_eq(((redisReply *)reply)->elements, 3);
    freeReplyObject(reply);
    redisReaderFree(r);
}

/* ------------------------------------------------------------------------
 * Opening.
 * ---------------------------------------------------------------------- */
Test(rc_open, bad_seed_specs_are_refused_with_a_message)
{
    const struct {
        const char *spec, *says;
    } bad[] = {
        {"", "no seed"},
        {"redis-cluster://", "no seed"},
        {"127.0.0.1", "no ':port'"},
        {"127.0.0.1:0", "bad port"},
        {"127.0.0.1:65536", "bad port"},
        {"127.0.0.1:99999999999", "bad port"},
        {"127.0.0.1:7000x", "bad port"},
        {"127.0.0.1:", "bad port"},
        {":7000", "no host"},
        {"127.0.0.1:7000,", "seed 2"},
        {",127.0.0.1:7000", "seed 1"},
        {"127.0.0.1:7000,,127.0.0.1:7001", "seed 2"},
        {"127.0.0.1:7000, ,127.0.0.1:7001", "seed 2"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[256] = "untouched";
        skv_rc *rc = skv_rc_open(bad[i].spec, 500, err, sizeof err);
        cr_expect_null(rc, "'%s' was accepted", bad[i].spec);
        skv_rc_close(rc);
        cr_expect(strstr(err, bad[i].says), "'%s': message '%s' lacks '%s'", bad[i].spec, err,
                  bad[i].says);
    }
    char err[256];
    cr_expect_null(skv_rc_open("127.0.0.1:7000", 0, err, sizeof err));
    cr_expect(strstr(err, "timeout"), "%s", err);
    cr_expect_null(skv_rc_open(NULL, 100, err, sizeof err));
    cr_expect_null(skv_rc_open("", 100, NULL, 0)); /* no room for a message: still NULL */
    char tiny[4];
    cr_expect_null(skv_rc_open("nope", 100, tiny, sizeof tiny));
    cr_expect_eq(strlen(tiny), 3, "the message is cut to the buffer");
}

/* a loopback port where nothing listens (bound, then closed) */
int dead_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    socklen_t sl = sizeof sa;
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    close(fd);
    return ntohs(sa.sin_port);
}

Test(rc_open, no_seed_answering_is_an_error_naming_the_last_failure)
{
    char spec[64], err[256];
    snprintf(spec, sizeof spec, "redis-cluster://127.0.0.1:%d", dead_port());
    skv_rc *rc = skv_rc_open(spec, 500, err, sizeof err);
    cr_assert_null(rc);
    cr_assert(strstr(err, "no seed"), "%s", err);
    cr_assert(strstr(err, "refused"), "%s", err);
}

Test(rc_open, a_redis_without_cluster_support_is_refused)
{
    if (system("command -v redis-server >/dev/null 2>&1") != 0)
        cr_skip_test("redis-server not on the PATH (Debian: redis-server)");
    int port = dead_port();
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        execlp("redis-server", "redis-server", "--port", ps, "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--loglevel", "warning", (char *)NULL);
        _exit(127);
    }
    redisContext *c = NULL;
    for (int i = 0; i < 100; i++) {
        c = redisConnect("127.0.0.1", port);
        if (c && !c->err)
            break;
        redisFree(c);
        c = NULL;
        sleep_ms(50);
    }
    char spec[64], err[256] = "";
    snprintf(spec, sizeof spec, "127.0.0.1:%d", port);
    skv_rc *rc = c ? skv_rc_open(spec, 1000, err, sizeof err) : NULL;
    redisFree(c);
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    cr_assert(c, "the standalone redis-server did not start");
    cr_assert_null(rc);
    cr_assert(strstr(err, "cluster support disabled"), "%s", err);
}
