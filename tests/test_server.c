/* The server end to end: a real `seqkv serve` process (SEQKV_BIN, set by
 * meson) on a temporary socket, driven by the C client library and by raw
 * RESP bytes. KV comes from the seeded random model of the store suites,
 * so every GET is compared bit-exactly with the KV that was PUT. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "seqkv_client.h"
#include "skv_server.h"
#include "storeutil.h"
#include "testutil.h"

#include "srvtest.h"

/* ------------------------------------------------------------------------ */

Test(server, put_lookup_get_del_bit_exact, .timeout = 120)
{
    srv s;
    srv_start(&s, NULL);
    su_model tm;
    su_random_model(&tm, s.dir, SEQKV_DT_BF16);
    seqkv_client *c = conn(&s);
    cr_assert_eq(seqkv_client_ping(c), 0);

    /* no config: own uid, tenant default, admin: a profile from the model */
    const char *kv[] = {"model", tm.path, "chunk", "16"};
    cr_assert_eq(seqkv_client_profile_set(c, "rm", kv, 2), 0, "%s", seqkv_error_detail());
    seqkv_profile p = SEQKV_PROFILE_INIT;
    cr_assert_eq(seqkv_client_profile_get(c, "rm", &p), 0);
    cr_assert_eq(p.layers, tm.c->n_layers);
    cr_assert_eq(p.kv_heads, tm.c->n_kv_heads);
    cr_assert_eq(p.head_dim, tm.c->head_dim);
    cr_assert_eq(p.chunk, 16);
    cr_assert_eq(p.dtype, SEQKV_DT_BF16);
    cr_assert_eq(seqkv_profile_token_bytes(&p), su_kv_len(&tm, 1));

    su_seq a, b, x;
    su_seq_make(&tm, NULL, 0, 40, 1, &a);
    su_seq_make(&tm, a.tok, 20, 50, 2, &b);
    su_seq_make(&tm, NULL, 0, 30, 3, &x);
    size_t stored = 0, m = 0;
    cr_assert_eq(seqkv_client_put(c, "rm", a.tok, a.n, a.kv, a.kv_len, &stored), 0, "%s",
                 seqkv_error_detail());
    cr_assert_eq(stored, 40);
    size_t shared = su_lcp(a.tok, a.n, b.tok, b.n);
    cr_assert_eq(seqkv_client_put(c, "rm", b.tok, b.n, b.kv, b.kv_len, &stored), 0);
    /* the reply counts the tokens that were not cached */
    cr_assert_eq(stored, b.n - shared, "stored %zu of %zu (shared %zu)", stored, b.n, shared);

    cr_assert_eq(seqkv_client_lookup(c, "rm", b.tok, b.n, &m), 0);
    cr_assert_eq(m, 50);
    cr_assert_eq(seqkv_client_lookup(c, "rm", b.tok, 25, &m), 0);
    cr_assert_eq(m, 25);
    expect_get(c, "rm", &tm, &a, 0);
    expect_get(c, "rm", &tm, &b, 0);
    expect_get(c, "rm", &tm, &b, 23);

    /* a prefix nobody stored */
    cr_assert_eq(seqkv_client_lookup(c, "rm", x.tok, x.n, &m), 0);
    size_t xl = su_lcp(x.tok, x.n, a.tok, a.n);
    size_t xl2 = su_lcp(x.tok, x.n, b.tok, b.n);
    cr_assert_eq(m, xl > xl2 ? xl : xl2);
    uint8_t small[16];
    size_t len = 0;
    cr_assert_eq(seqkv_client_get(c, "rm", x.tok, x.n, x.n, small, sizeof small, &len),
                 SKV_ERR_NOT_FOUND);

    /* a buffer too small: TOO_LARGE, the connection stays usable */
    cr_assert_eq(seqkv_client_get(c, "rm", a.tok, a.n, 0, small, sizeof small, &len),
                 SKV_ERR_TOO_LARGE);
    cr_assert_eq(len, a.kv_len);
    cr_assert_eq(seqkv_client_ping(c), 0);
    void *buf = NULL;
    cr_assert_eq(seqkv_client_get_alloc(c, "rm", a.tok, a.n, 0, &buf, &len), 0);
    cr_assert_eq(len, a.kv_len);
    cr_assert(memcmp(buf, a.kv, len) == 0);
    seqkv_client_free(buf);

    /* layer by layer: one bulk per layer, [k, v][token][kv_head][head_dim] */
    {
        uint8_t tb[4 * 40];
        for (size_t i = 0; i < a.n; i++)
            skv_store32_le(tb + 4 * i, (uint32_t)a.tok[i]);
        const void *argv[] = {"KV.GET", "rm", tb, "LAYERS"};
        size_t argl[] = {6, 2, 4 * a.n, 6};
        seqkv_reply *r;
        cr_assert_eq(seqkv_client_command(c, 4, argv, argl, &r), 0);
        cr_assert_eq(r->type, SEQKV_REPLY_ARRAY);
        cr_assert_eq(r->elements, (size_t)tm.L);
        size_t slab = a.kv_len / (size_t)tm.L;
        for (int l = 0; l < tm.L; l++) {
            cr_assert_eq(r->element[l]->len, slab);
            cr_assert(memcmp(r->element[l]->str, a.kv + (size_t)l * slab, slab) == 0);
        }
        seqkv_reply_free(r);
    }

    /* unknown profile */
    cr_assert_eq(seqkv_client_lookup(c, "nope", a.tok, a.n, &m), SKV_ERR_NOT_FOUND);
    cr_assert_eq(seqkv_client_put(c, "nope", a.tok, a.n, a.kv, a.kv_len, &stored),
                 SKV_ERR_NOT_FOUND);

    /* KV.STATS and INFO count what happened */
    seqkv_reply *r = CMD(c, "KV.STATS");
    cr_assert_eq(r->type, SEQKV_REPLY_ARRAY);
    cr_assert_str_eq(r->element[0]->str, "tenant");
    cr_assert_str_eq(r->element[1]->str, "default");
    cr_assert_str_eq(r->element[2]->str, "tokens");
    cr_assert_geq(r->element[3]->integer, 50);
    seqkv_reply_free(r);
    char *info = NULL;
    cr_assert_eq(seqkv_client_info(c, NULL, &info), 0);
    cr_assert(strstr(info, "tenant_default:lookups=") != NULL, "%s", info);
    cr_assert(strstr(info, "latency_percentiles_usec_kv.get:p50=") != NULL, "%s", info);
    cr_assert(strstr(info, "lmdb_map_used:") != NULL);
    cr_assert(strstr(info, "used_memory_rss:") != NULL);
    cr_assert(strstr(info, "level_raw:tokens=") != NULL);
    seqkv_client_free(info);
    /* the process's memory: its anonymous part within the resident, a peak
     * at least as high, and the hot tier's budget beside them */
    const uint64_t rss = srv_info_num(c, "memory", "used_memory_rss"),
                   anon = srv_info_num(c, "memory", "used_memory_rss_anon"),
                   peak = srv_info_num(c, "memory", "used_memory_peak_rss");
    cr_assert(anon > 0 && anon <= rss && peak + (1u << 20) >= rss, "rss %llu anon %llu peak %llu",
              (unsigned long long)rss, (unsigned long long)anon, (unsigned long long)peak);
    cr_assert_eq(srv_info_num(c, "memory", "hot_tier_budget_bytes"),
                 srv_info_num(c, "cache", "cache_budget_bytes"));
    /* big buffers kept warm for the next put, within their budget */
    cr_assert_leq(srv_info_num(c, "memory", "warm_buffer_bytes"),
                  srv_info_num(c, "memory", "warm_buffer_budget_bytes"));
    cr_assert_gt(srv_info_num(c, "memory", "warm_buffer_budget_bytes"), 0);
    cr_assert_eq(seqkv_client_info(c, "clients", &info), 0);
    cr_assert(strstr(info, "# Clients") && !strstr(info, "# Server"), "%s", info);
    seqkv_client_free(info);
    /* the hot tier served the repeated gets */
    cr_assert_eq(seqkv_client_info(c, "cache", &info), 0);
    const char *hits = strstr(info, "cache_hits:");
    cr_assert(hits && strtoull(hits + 11, NULL, 10) > 0, "%s", info);
    cr_assert(strstr(info, "cache_budget_bytes:") != NULL, "%s", info);
    seqkv_client_free(info);

    /* del b: its own tail goes, a stays whole */
    size_t removed = 0;
    cr_assert_eq(seqkv_client_del(c, "rm", b.tok, b.n, &removed), 0);
    cr_assert_gt(removed, 0);
    cr_assert_eq(seqkv_client_lookup(c, "rm", b.tok, b.n, &m), 0);
    cr_assert_lt(m, 50);
    expect_get(c, "rm", &tm, &a, 0);

    seqkv_client_close(c);
    cr_assert_eq(srv_stop(&s), 0);
    struct stat st;
    cr_assert(lstat(s.sock, &st) != 0, "the socket file is removed at exit");
    su_seq_free(&a);
    su_seq_free(&b);
    su_seq_free(&x);
    su_model_free(&tm);
}

Test(server, profiles_and_shapes, .timeout = 60)
{
    srv s;
    srv_start(&s, NULL);
    su_model tm;
    su_random_model(&tm, s.dir, SEQKV_DT_BF16);
    seqkv_client *c = conn(&s);
    make_profile(c, &tm, "p", 8);
    make_profile(c, &tm, "p", 8); /* the same again: fine */
    const char *other[] = {"layers", "3", "kv_heads", "2", "head_dim", "8"};
    cr_assert_eq(seqkv_client_profile_set(c, "p", other, 3), SKV_ERR_SHAPE);
    cr_assert(strncmp(seqkv_error_detail(), "SHAPE", 5) == 0);
    const char *bad[] = {"colour", "blue"};
    cr_assert_eq(seqkv_client_profile_set(c, "q", bad, 1), SKV_ERR_SERVER);
    const char *noshape[] = {"dtype", "bf16"};
    cr_assert_eq(seqkv_client_profile_set(c, "q", noshape, 1), SKV_ERR_SERVER);
    const char *lvl[] = {"level", "stat"};
    cr_assert_eq(seqkv_client_profile_set(c, "p", lvl, 1), 0); /* admin may change it */
    seqkv_profile p = SEQKV_PROFILE_INIT;
    cr_assert_eq(seqkv_client_profile_get(c, "p", &p), 0);
    cr_assert_eq(p.level, SEQKV_STAT);
    cr_assert_str_eq(p.name, "p");
    cr_assert_eq(seqkv_client_profile_get(c, "missing", &p), SKV_ERR_NOT_FOUND);

    /* KV whose size is not the profile's shape */
    su_seq a;
    su_seq_make(&tm, NULL, 0, 12, 5, &a);
    size_t stored;
    cr_assert_eq(seqkv_client_put(c, "p", a.tok, a.n, a.kv, a.kv_len - 1, &stored), SKV_ERR_SHAPE);
    cr_assert_eq(seqkv_client_put(c, "p", a.tok, a.n - 1, a.kv, a.kv_len, &stored), SKV_ERR_SHAPE);
    /* tokens that are not whole u32 */
    const void *argv[] = {"KV.LOOKUP", "p", "abcde"};
    size_t argl[] = {9, 1, 5};
    seqkv_reply *r;
    cr_assert_eq(seqkv_client_command(c, 3, argv, argl, &r), 0);
    expect_error(r, "ERR tokens are");
    cr_assert_eq(seqkv_client_put(c, "p", a.tok, a.n, a.kv, a.kv_len, &stored), 0);
    cr_assert_eq(stored, 12);
    expect_get(c, "p", &tm, &a, 0);
    /* calibration from the stored sequences (admin) */
    cr_assert_eq(seqkv_client_calibrate(c, "p", 0), 0, "%s", seqkv_error_detail());
    cr_assert_eq(seqkv_client_profile_get(c, "p", &p), 0);
    cr_assert_eq(p.has_calib, 1);
    expect_get(c, "p", &tm, &a, 0);
    seqkv_client_close(c);
    cr_assert_eq(srv_stop(&s), 0);
    su_seq_free(&a);
    su_model_free(&tm);
}

/* ids as decimal text, space-separated (TOKENS "<ids>") */
static char *ids_text(const int32_t *tok, size_t n)
{
    char *t = malloc(12 * n + 1);
    cr_assert(t);
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
        len += (size_t)sprintf(t + len, i ? " %d" : "%d", tok[i]);
    t[len] = 0;
    return t;
}

static long long int_reply(seqkv_reply *r)
{
    cr_assert_eq(r->type, SEQKV_REPLY_INTEGER, "wanted an integer, got '%s'", r->str ? r->str : "");
    long long v = r->integer;
    seqkv_reply_free(r);
    return v;
}

/* TOKENS "<ids>" in place of the binary tokens of KV.PUT, KV.LOOKUP,
 * KV.GET and KV.DEL: the same results as the binary form; bad text gets
 * an error reply and the connection stays usable. */
Test(server, tokens_as_text_match_the_binary_form, .timeout = 60)
{
    srv s;
    srv_start(&s, NULL);
    su_model tm;
    su_random_model(&tm, s.dir, SEQKV_DT_BF16);
    seqkv_client *c = conn(&s);
    make_profile(c, &tm, "p", 8);
    su_seq a;
    su_seq_make(&tm, NULL, 0, 12, 7, &a);
    char *txt = ids_text(a.tok, a.n);
    const void *put[] = {"KV.PUT", "p", "TOKENS", txt, a.kv};
    size_t putl[] = {6, 1, 6, strlen(txt), a.kv_len};
    seqkv_reply *r;
    cr_assert_eq(seqkv_client_command(c, 5, put, putl, &r), 0);
    cr_assert_eq(int_reply(r), 12);
    size_t m = 0;
    cr_assert_eq(seqkv_client_lookup(c, "p", a.tok, a.n, &m), 0);
    cr_assert_eq(m, 12, "a text put is found by a binary lookup");
    expect_get(c, "p", &tm, &a, 0);
    expect_get(c, "p", &tm, &a, 5);
    cr_assert_eq(int_reply(CMD(c, "KV.LOOKUP", "p", "TOKENS", txt)), 12);
    char longer[600], spaced[600];
    snprintf(longer, sizeof longer, "%s 3 4", txt);
    snprintf(spaced, sizeof spaced, "  %s\t ", txt);
    cr_assert_eq(int_reply(CMD(c, "KV.LOOKUP", "p", "tokens", longer)), 12);
    cr_assert_eq(int_reply(CMD(c, "KV.LOOKUP", "p", "TOKENS", spaced)), 12);
    /* KV.GET: the same bytes as the binary form, with n and LAYERS */
    size_t bytes = su_kv_len(&tm, a.n);
    uint8_t *bin_kv = malloc(bytes);
    size_t len = 0;
    cr_assert_eq(seqkv_client_get(c, "p", a.tok, a.n, 0, bin_kv, bytes, &len), 0);
    r = CMD(c, "KV.GET", "p", "TOKENS", longer);
    cr_assert_eq(r->type, SEQKV_REPLY_STRING);
    cr_assert_eq(r->len, bytes);
    cr_assert(memcmp(r->str, bin_kv, bytes) == 0, "KV.GET TOKENS differs from the binary form");
    seqkv_reply_free(r);
    r = CMD(c, "KV.GET", "p", "TOKENS", txt, "5");
    cr_assert_eq(r->type, SEQKV_REPLY_STRING);
    cr_assert_eq(r->len, su_kv_len(&tm, 5));
    seqkv_reply_free(r);
    r = CMD(c, "KV.GET", "p", "TOKENS", txt, "5", "LAYERS");
    cr_assert_eq(r->type, SEQKV_REPLY_ARRAY);
    cr_assert_eq(r->elements, (size_t)tm.c->n_layers);
    seqkv_reply_free(r);
    free(bin_kv);
    /* bad text: an error reply, the connection goes on */
    expect_error(CMD(c, "KV.LOOKUP", "p", "TOKENS", "1 x 3"), "ERR TOKENS: id 2, \"x\", is not a token id");
    expect_error(CMD(c, "KV.LOOKUP", "p", "TOKENS", "1 -5"), "ERR TOKENS: id 2, \"-5\", is not");
    expect_error(CMD(c, "KV.LOOKUP", "p", "TOKENS", "7,8"), "ERR TOKENS: id 1, \"7,8\"");
    expect_error(CMD(c, "KV.LOOKUP", "p", "TOKENS", "2147483648"), "ERR TOKENS: id 1");
    expect_error(CMD(c, "KV.LOOKUP", "p", "TOKENS", "  "), "ERR TOKENS: no token ids");
    expect_error(CMD(c, "KV.LOOKUP", "p", "TOKENS"), "ERR TOKENS wants one argument");
    expect_error(CMD(c, "KV.DEL", "p", "TOKENS", "1 2", "3"), "ERR wrong number of arguments");
    expect_error(CMD(c, "KV.GET", "p", "TOKENS", "1 2", "x"), "ERR KV.GET <profile>");
    size_t many = SEQKV_MAX_TOKENS + 1;
    char *big = malloc(2 * many);
    for (size_t i = 0; i < many; i++)
        memcpy(big + 2 * i, "0 ", 2);
    big[2 * many - 1] = 0;
    expect_error(CMD(c, "KV.LOOKUP", "p", "TOKENS", big), "TOOLARGE TOKENS: more than");
    free(big);
    const void *badput[] = {"KV.PUT", "p", "TOKENS", "1 2 z", a.kv};
    size_t badputl[] = {6, 1, 6, 5, a.kv_len};
    cr_assert_eq(seqkv_client_command(c, 5, badput, badputl, &r), 0);
    expect_error(r, "ERR TOKENS: id 3");
    cr_assert_eq(seqkv_client_ping(c), 0, "the connection stays usable");
    /* the binary form is unchanged, and KV.DEL takes text too */
    cr_assert_eq(int_reply(CMD(c, "KV.DEL", "p", "TOKENS", txt)), 12);
    cr_assert_eq(seqkv_client_lookup(c, "p", a.tok, a.n, &m), 0);
    cr_assert_eq(m, 0);
    free(txt);
    seqkv_client_close(c);
    cr_assert_eq(srv_stop(&s), 0);
    su_seq_free(&a);
    su_model_free(&tm);
}

Test(server, unknown_commands_arity_inline_pipelining, .timeout = 60)
{
    srv s;
    srv_start(&s, NULL);
    seqkv_client *c = conn(&s);
    expect_error(CMD(c, "FLUSHALL"), "ERR unknown command 'FLUSHALL'");
    expect_error(CMD(c, "KV.PUT", "p"), "ERR wrong number of arguments");
    expect_error(CMD(c, "KV.PROFILE", "DROP", "p"), "ERR KV.PROFILE SET|GET");
    seqkv_reply *r = CMD(c, "PING", "hello");
    cr_assert_eq(r->type, SEQKV_REPLY_STRING);
    cr_assert_str_eq(r->str, "hello");
    seqkv_reply_free(r);
    /* inline commands and three pipelined requests in one write */
    const char raw[] = "PING\r\n*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nPING\r\n$2\r\nhi\r\n";
    cr_assert_eq(seqkv_client_send_raw(c, raw, sizeof raw - 1), 0);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(seqkv_client_read_reply(c, &r), 0);
        cr_assert_str_eq(r->str, i < 2 ? "PONG" : "hi");
        seqkv_reply_free(r);
    }
    /* RESP3 after HELLO 3 */
    expect_error(CMD(c, "HELLO", "4"), "NOPROTO");
    r = CMD(c, "HELLO", "3");
    cr_assert_eq(r->type, SEQKV_REPLY_MAP);
    seqkv_reply_free(r);
    r = CMD(c, "KV.STATS");
    cr_assert_eq(r->type, SEQKV_REPLY_MAP);
    seqkv_reply_free(r);
    seqkv_client_close(c);
    cr_assert_eq(srv_stop(&s), 0);
}

/* Each malformed frame gets "-ERR Protocol error ..." and its connection is
 * closed; a client alongside keeps working. */
Test(server, malformed_frames_close_only_their_client, .timeout = 60)
{
    srv s;
    srv_start(&s, NULL);
    seqkv_client *ok = conn(&s);
    static const char *const frames[] = {
        "*2\r\n$4\r\nPING\r\n:12\r\n",        /* not a bulk */
        "*x\r\n",                             /* bad count */
        "*1\r\n$4\r\nPINGxx",                 /* no CRLF after the bulk */
        "*1\r\n$-3\r\n",                      /* negative length */
        "*99999999\r\n",                      /* too many arguments */
        "*1\r\n$99999999999\r\n",             /* bulk over the cap */
        "*1\r\n$12345678901234567890123456789012345678\r\n",
        "*1\n",                               /* bare LF in a header */
    };
    for (size_t i = 0; i < sizeof frames / sizeof frames[0]; i++) {
        seqkv_client *c = conn(&s);
        cr_assert_eq(seqkv_client_send_raw(c, frames[i], strlen(frames[i])), 0);
        seqkv_reply *r;
        cr_assert_eq(seqkv_client_read_reply(c, &r), 0, "frame %zu: no reply", i);
        expect_error(r, "ERR Protocol error");
        cr_assert_eq(seqkv_client_read_reply(c, &r), SKV_ERR_IO, "frame %zu: not closed", i);
        seqkv_client_close(c);
        cr_assert_eq(seqkv_client_ping(ok), 0);
    }
    /* an inline line longer than the cap */
    seqkv_client *c = conn(&s);
    size_t big = SKV_SERVER_MAX_INLINE + 100;
    char *line = malloc(big);
    memset(line, 'a', big);
    seqkv_client_send_raw(c, line, big);
    free(line);
    seqkv_reply *r;
    cr_assert_eq(seqkv_client_read_reply(c, &r), 0);
    expect_error(r, "ERR Protocol error: too big inline");
    seqkv_client_close(c);
    cr_assert_eq(seqkv_client_ping(ok), 0);
    char *info;
    cr_assert_eq(seqkv_client_info(ok, "clients", &info), 0);
    cr_assert(strstr(info, "protocol_errors:9"), "%s", info);
    seqkv_client_free(info);
    seqkv_client_close(ok);
    cr_assert_eq(srv_stop(&s), 0);
}

Test(server, oversized_bulk_is_refused_before_reading_it, .timeout = 60)
{
    char cfg[256];
    snprintf(cfg, sizeof cfg, "tenant me uid %u\ntenant me admin\nmax-bulk 64K\nmax-query 128K\n",
             (unsigned)getuid());
    srv s;
    srv_start(&s, cfg);
    su_model tm;
    su_random_model(&tm, s.dir, SEQKV_DT_BF16);
    seqkv_client *ok = conn(&s);
    make_profile(ok, &tm, "p", 16);
    su_seq a, big;
    su_seq_make(&tm, NULL, 0, 20, 7, &a);
    /* 64K of KV is 64K / token_bytes tokens: a bit more is over the cap */
    size_t nbig = 65536 / su_kv_len(&tm, 1) + 8;
    su_seq_make(&tm, NULL, 0, nbig, 8, &big);
    cr_assert_gt(big.kv_len, 65536);
    seqkv_client *c = conn(&s);
    size_t stored;
    int rc = seqkv_client_put(c, "p", big.tok, big.n, big.kv, big.kv_len, &stored);
    cr_assert_eq(rc, SKV_ERR_SERVER, "rc %d: %s", rc, seqkv_error_detail());
    cr_assert(strstr(seqkv_error_detail(), "bulk length exceeds"), "%s", seqkv_error_detail());
    cr_assert_eq(seqkv_client_ping(c), SKV_ERR_IO);
    seqkv_client_close(c);
    /* others are undisturbed */
    cr_assert_eq(seqkv_client_put(ok, "p", a.tok, a.n, a.kv, a.kv_len, &stored), 0);
    expect_get(ok, "p", &tm, &a, 0);
    seqkv_client_close(ok);
    cr_assert_eq(srv_stop(&s), 0);
    su_seq_free(&a);
    su_seq_free(&big);
    su_model_free(&tm);
}

/* A client sends half a bulk and goes away; another leaves with its
 * request in flight; the rest keep working. */
/* KV.GET replies are sent from the store's memory in pieces: pipelined
 * large replies to a client that does not read for a while arrive whole
 * and in order, and other clients are served meanwhile; with the tier off
 * (config cache-bytes 0) the same bytes come back. */
static void slow_reader(const char *cfg)
{
    srv s;
    srv_start(&s, cfg);
    su_model tm;
    su_random_model(&tm, s.dir, SEQKV_DT_BF16);
    seqkv_client *c = conn(&s), *other = conn(&s);
    make_profile(c, &tm, "p", 64);
    su_seq a;
    su_seq_make(&tm, NULL, 0, 3000, 7, &a); /* 375 KiB of KV: more than a socket buffer */
    size_t stored;
    cr_assert_eq(seqkv_client_put(c, "p", a.tok, a.n, a.kv, a.kv_len, &stored), 0);
    uint8_t *tb = malloc(4 * a.n);
    for (size_t i = 0; i < a.n; i++)
        skv_store32_le(tb + 4 * i, (uint32_t)a.tok[i]);
    enum { K = 6 };
    for (int k = 0; k < K; k++) {
        char hdr[96];
        int layers = k & 1;
        int n = snprintf(hdr, sizeof hdr, "*%d\r\n$6\r\nKV.GET\r\n$1\r\np\r\n$%zu\r\n",
                         3 + layers, 4 * a.n);
        cr_assert_eq(seqkv_client_send_raw(c, hdr, (size_t)n), 0);
        cr_assert_eq(seqkv_client_send_raw(c, tb, 4 * a.n), 0);
        cr_assert_eq(seqkv_client_send_raw(c, layers ? "\r\n$6\r\nLAYERS\r\n" : "\r\n",
                                           layers ? 14 : 2), 0);
    }
    sleep_ms(200);
    for (int i = 0; i < 20; i++)
        cr_assert_eq(seqkv_client_ping(other), 0, "another client is served meanwhile");
    const size_t slab = a.kv_len / (size_t)tm.L;
    for (int k = 0; k < K; k++) {
        seqkv_reply *r = NULL;
        cr_assert_eq(seqkv_client_read_reply(c, &r), 0, "reply %d", k);
        if (k & 1) {
            cr_assert_eq(r->type, SEQKV_REPLY_ARRAY);
            cr_assert_eq(r->elements, (size_t)tm.L);
            for (int l = 0; l < tm.L; l++) {
                cr_assert_eq(r->element[l]->len, slab);
                cr_assert(memcmp(r->element[l]->str, a.kv + (size_t)l * slab, slab) == 0,
                          "reply %d layer %d", k, l);
            }
        } else {
            cr_assert_eq(r->type, SEQKV_REPLY_STRING);
            cr_assert_eq(r->len, a.kv_len);
            cr_assert(memcmp(r->str, a.kv, a.kv_len) == 0, "reply %d is bit-exact", k);
        }
        seqkv_reply_free(r);
    }
    char *info = NULL;
    cr_assert_eq(seqkv_client_info(other, "cache", &info), 0);
    cr_assert(strstr(info, cfg ? "cache_budget_bytes:0\r\n" : "cache_hits:") != NULL, "%s", info);
    seqkv_client_free(info);
    free(tb);
    seqkv_client_close(c);
    seqkv_client_close(other);
    cr_assert_eq(srv_stop(&s), 0);
    su_seq_free(&a);
    su_model_free(&tm);
}

Test(server, large_replies_to_a_slow_reader_arrive_whole, .timeout = 90)
{
    slow_reader(NULL);
}

Test(server, large_replies_without_a_hot_tier, .timeout = 90)
{
    char cfg[128];
    snprintf(cfg, sizeof cfg, "tenant default uid %u\ntenant default admin\ncache-bytes 0\n",
             (unsigned)getuid());
    slow_reader(cfg);
}

Test(server, clients_leaving_mid_request, .timeout = 90)
{
    srv s;
    srv_start(&s, NULL);
    su_model tm;
    su_random_model(&tm, s.dir, SEQKV_DT_BF16);
    seqkv_client *ok = conn(&s);
    make_profile(ok, &tm, "p", 16);
    su_seq a, b;
    su_seq_make(&tm, NULL, 0, 64, 11, &a);
    su_seq_make(&tm, NULL, 0, 48, 12, &b);
    for (int round = 0; round < 5; round++) {
        seqkv_client *h = conn(&s);
        char hdr[128];
        int n = snprintf(hdr, sizeof hdr, "*4\r\n$6\r\nKV.PUT\r\n$1\r\np\r\n$%zu\r\n", 4 * a.n);
        seqkv_client_send_raw(h, hdr, (size_t)n);
        uint8_t *tb = malloc(4 * a.n);
        for (size_t i = 0; i < a.n; i++)
            skv_store32_le(tb + 4 * i, (uint32_t)a.tok[i]);
        seqkv_client_send_raw(h, tb, 4 * a.n);
        free(tb);
        n = snprintf(hdr, sizeof hdr, "\r\n$%zu\r\n", a.kv_len);
        seqkv_client_send_raw(h, hdr, (size_t)n);
        seqkv_client_send_raw(h, a.kv, a.kv_len / 2 + (size_t)round);
        seqkv_client_close(h);
        cr_assert_eq(seqkv_client_ping(ok), 0);
    }
    size_t m;
    cr_assert_eq(seqkv_client_lookup(ok, "p", a.tok, a.n, &m), 0);
    cr_assert_eq(m, 0, "a half-sent PUT stored nothing");
    /* a whole request whose client leaves before the reply */
    for (int round = 0; round < 3; round++) {
        seqkv_client *h = conn(&s);
        uint8_t *tb = malloc(4 * b.n);
        for (size_t i = 0; i < b.n; i++)
            skv_store32_le(tb + 4 * i, (uint32_t)b.tok[i]);
        const void *argv[] = {"KV.GET", "p", tb};
        size_t argl[] = {6, 1, 4 * b.n};
        char hdr[64];
        /* send without reading: build the frame by hand */
        int n = snprintf(hdr, sizeof hdr, "*3\r\n$%zu\r\n", argl[0]);
        seqkv_client_send_raw(h, hdr, (size_t)n);
        seqkv_client_send_raw(h, argv[0], argl[0]);
        n = snprintf(hdr, sizeof hdr, "\r\n$%zu\r\n", argl[1]);
        seqkv_client_send_raw(h, hdr, (size_t)n);
        seqkv_client_send_raw(h, argv[1], argl[1]);
        n = snprintf(hdr, sizeof hdr, "\r\n$%zu\r\n", argl[2]);
        seqkv_client_send_raw(h, hdr, (size_t)n);
        seqkv_client_send_raw(h, tb, argl[2]);
        seqkv_client_send_raw(h, "\r\n", 2);
        free(tb);
        seqkv_client_close(h);
        size_t stored;
        if (round == 0) {
            cr_assert_eq(seqkv_client_put(ok, "p", b.tok, b.n, b.kv, b.kv_len, &stored), 0);
        }
    }
    expect_get(ok, "p", &tm, &b, 0);
    size_t stored;
    cr_assert_eq(seqkv_client_put(ok, "p", a.tok, a.n, a.kv, a.kv_len, &stored), 0);
    expect_get(ok, "p", &tm, &a, 0);
    /* every departed client is gone from the server */
    char *info = NULL;
    for (int i = 0; i < 100; i++) {
        seqkv_client_free(info);
        cr_assert_eq(seqkv_client_info(ok, "clients", &info), 0);
        if (strstr(info, "connected_clients:1\r\n"))
            break;
        sleep_ms(20);
    }
    cr_assert(strstr(info, "connected_clients:1\r\n"), "%s", info);
    seqkv_client_free(info);
    seqkv_client_close(ok);
    cr_assert_eq(srv_stop(&s), 0);
    su_seq_free(&a);
    su_seq_free(&b);
    su_model_free(&tm);
}

enum { NSEQ = 4 };
typedef struct {
    const srv *s;
    su_seq q[NSEQ]; /* made by the main thread: the model is not shared */
    int fails;
} worker_arg;

static void *concurrent_worker(void *p)
{
    worker_arg *w = p;
    seqkv_client *c = NULL;
    if (seqkv_client_connect(w->s->sock, &c)) {
        w->fails++;
        return NULL;
    }
    for (int i = 0; i < NSEQ; i++) {
        const su_seq *q = &w->q[i];
        size_t stored, m, len;
        void *buf = NULL;
        if (seqkv_client_put(c, "p", q->tok, q->n, q->kv, q->kv_len, &stored) ||
            seqkv_client_lookup(c, "p", q->tok, q->n, &m) || m != q->n ||
            seqkv_client_get_alloc(c, "p", q->tok, q->n, 0, &buf, &len) || len != q->kv_len ||
            memcmp(buf, q->kv, len) != 0)
            w->fails++;
        seqkv_client_free(buf);
    }
    seqkv_client_close(c);
    return NULL;
}

Test(server, concurrent_clients_verified, .timeout = 120)
{
    srv s;
    srv_start(&s, NULL);
    su_model tm;
    su_random_model(&tm, s.dir, SEQKV_DT_BF16);
    seqkv_client *c = conn(&s);
    make_profile(c, &tm, "p", 16);
    enum { N = 8 };
    pthread_t th[N];
    worker_arg wa[N];
    for (int i = 0; i < N; i++) {
        wa[i].s = &s;
        wa[i].fails = 0;
        for (int k = 0; k < NSEQ; k++)
            su_seq_make(&tm, NULL, 0, 24 + (size_t)(i * 3 + k), 100 + (uint64_t)(i * 10 + k),
                        &wa[i].q[k]);
    }
    for (int i = 0; i < N; i++)
        pthread_create(&th[i], NULL, concurrent_worker, &wa[i]);
    int fails = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        fails += wa[i].fails;
        for (int k = 0; k < NSEQ; k++)
            su_seq_free(&wa[i].q[k]);
    }
    cr_assert_eq(fails, 0);
    seqkv_client_close(c);
    cr_assert_eq(srv_stop(&s), 0);
    su_model_free(&tm);
}

/* Group commit: 16 clients put at once (so their PUTs share commits),
 * one of every client's PUTs in a few clients has a short KV and must fail
 * alone; every other PUT is whole and exact afterwards. */
enum { BSEQ = 5 };
typedef struct {
    const srv *s;
    su_seq q[BSEQ];
    int bad; /* index of the short-KV put, or -1 */
    int fails, shape_errors;
} batch_arg;

static void *batch_worker(void *p)
{
    batch_arg *w = p;
    seqkv_client *c = NULL;
    if (seqkv_client_connect(w->s->sock, &c)) {
        w->fails++;
        return NULL;
    }
    for (int i = 0; i < BSEQ; i++) {
        const su_seq *q = &w->q[i];
        size_t stored = 0;
        int rc = seqkv_client_put(c, "p", q->tok, q->n, q->kv, q->kv_len - (i == w->bad ? 2 : 0),
                                  &stored);
        if (i == w->bad)
            w->shape_errors += rc == SKV_ERR_SHAPE && strstr(seqkv_error_detail(), "SHAPE");
        else if (rc || stored == 0 || stored > q->n)
            w->fails++;
    }
    seqkv_client_close(c);
    return NULL;
}

Test(server, concurrent_puts_share_commits_and_a_bad_put_fails_alone, .timeout = 120)
{
    srv s;
    srv_start(&s, NULL);
    su_model tm;
    su_random_model(&tm, s.dir, SEQKV_DT_BF16);
    seqkv_client *c = conn(&s);
    make_profile(c, &tm, "p", 16);
    enum { N = 16 };
    pthread_t th[N];
    batch_arg *wa = calloc(N, sizeof *wa);
    su_seq sys;
    su_seq_make(&tm, NULL, 0, 20, 5, &sys);
    for (int i = 0; i < N; i++) {
        wa[i].s = &s;
        wa[i].bad = i % 5 == 0 ? i % BSEQ : -1;
        /* sessions of a shared system prompt, each turn extending the last */
        int32_t pr[256];
        memcpy(pr, sys.tok, sys.n * sizeof(int32_t));
        pr[sys.n] = (int32_t)(3 + i % 20);
        size_t np = sys.n + 1;
        for (int k = 0; k < BSEQ; k++) {
            su_seq_make(&tm, pr, np, np + 7 + (size_t)((i + k) % 9), 900 + (uint64_t)(i * 10 + k),
                        &wa[i].q[k]);
            memcpy(pr, wa[i].q[k].tok, wa[i].q[k].n * sizeof(int32_t));
            np = wa[i].q[k].n;
        }
    }
    for (int i = 0; i < N; i++)
        pthread_create(&th[i], NULL, batch_worker, &wa[i]);
    int fails = 0, shape = 0, bad = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        fails += wa[i].fails;
        shape += wa[i].shape_errors;
        bad += wa[i].bad >= 0;
    }
    cr_assert_eq(fails, 0, "%d good puts failed", fails);
    cr_assert_eq(shape, bad, "each short KV got -SHAPE (%d of %d)", shape, bad);
    for (int i = 0; i < N; i++)
        for (int k = 0; k < BSEQ; k++) {
            if (k == wa[i].bad)
                continue;
            size_t m = 0;
            cr_assert_eq(seqkv_client_lookup(c, "p", wa[i].q[k].tok, wa[i].q[k].n, &m), 0);
            cr_assert_eq(m, wa[i].q[k].n, "client %d put %d is cached whole", i, k);
            expect_get(c, "p", &tm, &wa[i].q[k], 0);
        }
    char *info = NULL;
    cr_assert_eq(seqkv_client_info(c, "store", &info), 0);
    const char *pc = strstr(info, "put_commits:"), *pp = strstr(info, "puts_per_commit:");
    cr_assert(pc && pp, "INFO store reports the group commit:\n%s", info);
    long commits = atol(pc + 12);
    double per = atof(pp + 16);
    cr_assert(commits >= 1 && commits <= N * BSEQ, "%ld commits", commits);
    cr_assert_geq(per, 1.0);
    cr_log_info("group commit: %d PUTs in %ld commits (%.2f a commit)", N * BSEQ, commits, per);
    seqkv_client_free(info);
    for (int i = 0; i < N; i++)
        for (int k = 0; k < BSEQ; k++)
            su_seq_free(&wa[i].q[k]);
    free(wa);
    su_seq_free(&sys);
    seqkv_client_close(c);
    cr_assert_eq(srv_stop(&s), 0);
    su_model_free(&tm);
}

/* SIGTERM while a request runs: its reply still arrives, then exit 0 (a
 * calibration stops at a shutdown: its reply is +OK when it ended before
 * the signal, else the error that says it stopped). */
Test(server, sigterm_finishes_requests_in_flight, .timeout = 120)
{
    srv s;
    srv_start(&s, NULL);
    su_model tm;
    su_random_model(&tm, s.dir, SEQKV_DT_BF16);
    seqkv_client *a = conn(&s), *b = conn(&s);
    make_profile(a, &tm, "p", 16);
    for (int i = 0; i < 8; i++) {
        su_seq q;
        su_seq_make(&tm, NULL, 0, 96, 300 + (uint64_t)i, &q);
        size_t stored;
        cr_assert_eq(seqkv_client_put(a, "p", q.tok, q.n, q.kv, q.kv_len, &stored), 0);
        su_seq_free(&q);
    }
    int seen = 0;
    for (int attempt = 0; attempt < 5 && !seen; attempt++) {
        const char req[] = "*2\r\n$12\r\nKV.CALIBRATE\r\n$1\r\np\r\n";
        cr_assert_eq(seqkv_client_send_raw(a, req, sizeof req - 1), 0);
        for (int i = 0; i < 200 && !seen; i++) {
            char *info;
            cr_assert_eq(seqkv_client_info(b, "clients", &info), 0);
            seen = strstr(info, "requests_in_flight:1\r\n") != NULL;
            seqkv_client_free(info);
        }
        if (seen)
            kill(s.pid, SIGTERM);
        seqkv_reply *r;
        cr_assert_eq(seqkv_client_read_reply(a, &r), 0, "the reply in flight arrives");
        if (r->type == SEQKV_REPLY_ERROR)
            cr_assert(seen && strstr(r->str, "stopped on request"), "%s", r->str);
        else
            cr_assert_eq(r->type, SEQKV_REPLY_STATUS, "%s", r->str);
        seqkv_reply_free(r);
    }
    int st;
    if (seen) {
        cr_assert_eq(waitpid(s.pid, &st, 0), s.pid);
        s.pid = 0;
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    } else {
        cr_log_info("KV.CALIBRATE never seen in flight: the signal part was not exercised");
        cr_assert_eq(srv_stop(&s), 0);
    }
    seqkv_client_close(a);
    seqkv_client_close(b);
    su_model_free(&tm);
}

/* Background maintenance: a profile set to calibrate itself at 300 tokens
 * does so after the puts that cross it, and the compaction that follows
 * codes what was stored raw; GETs are exact before, during and after. */
static uint64_t info_num(seqkv_client *c, const char *key)
{
    return srv_info_num(c, "maintenance", key);
}

Test(server, profiles_calibrate_themselves_and_compact_in_the_background, .timeout = 120)
{
    srv s;
    char cfg[192];
    snprintf(cfg, sizeof cfg, "tenant default uid %u\ntenant default admin\ncompact-interval 3600\n",
             (unsigned)getuid());
    srv_start(&s, cfg);
    su_model tm;
    su_random_model(&tm, s.dir, SEQKV_DT_BF16);
    seqkv_client *c = conn(&s);
    make_profile(c, &tm, "p", 16);
    seqkv_reply *r = CMD(c, "KV.PROFILE", "SET", "p", "auto-calibrate", "300");
    cr_assert_eq(r->type, SEQKV_REPLY_STATUS, "%s", r->str);
    seqkv_reply_free(r);
    r = CMD(c, "KV.PROFILE", "GET", "p");
    int seen = 0;
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (!strcmp(r->element[i]->str, "auto_calibrate"))
            seen = r->element[i + 1]->integer == 300;
    cr_assert(seen, "KV.PROFILE GET shows auto_calibrate 300");
    seqkv_reply_free(r);
    enum { N = 10 };
    su_seq a[N];
    size_t stored;
    for (int i = 0; i < N; i++) {
        su_seq_make(&tm, NULL, 0, 48, 500 + (uint64_t)i, &a[i]);
        cr_assert_eq(seqkv_client_put(c, "p", a[i].tok, a[i].n, a[i].kv, a[i].kv_len, &stored), 0);
        expect_get(c, "p", &tm, &a[i], 0);
    }
    /* learned and compacted in the background, gets going on meanwhile */
    int k = 0;
    for (; k < 400 && (info_num(c, "self_calibrations") < 1 || info_num(c, "compactions") < 1); k++) {
        expect_get(c, "p", &tm, &a[k % N], 0);
        sleep_ms(25);
    }
    cr_assert_eq(info_num(c, "self_calibrations"), 1, "the profile calibrated itself");
    cr_assert_geq(info_num(c, "compactions"), 1);
    cr_assert_gt(info_num(c, "records_recoded"), 0, "the raw records were coded again");
    r = CMD(c, "KV.PROFILE", "GET", "p");
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (!strcmp(r->element[i]->str, "calibrated"))
            cr_assert_eq(r->element[i + 1]->integer, 1);
    seqkv_reply_free(r);
    for (int i = 0; i < N; i++)
        expect_get(c, "p", &tm, &a[i], 0);
    /* KV.COMPACT now: nothing left to code */
    r = CMD(c, "KV.COMPACT", "p");
    cr_assert_eq(r->type, SEQKV_REPLY_ARRAY, "%s", r->type == SEQKV_REPLY_ERROR ? r->str : "");
    cr_assert_eq(r->elements, 16);
    cr_assert_str_eq(r->element[4]->str, "recoded");
    cr_assert_eq(r->element[5]->integer, 0);
    cr_assert_gt(r->element[3]->integer, 0, "records looked at");
    seqkv_reply_free(r);
    seqkv_client_close(c);
    cr_assert_eq(srv_stop(&s), 0);
    for (int i = 0; i < N; i++)
        su_seq_free(&a[i]);
    su_model_free(&tm);
}

/* value-file-min: records from that size on in files of their own
 * (DIR/values), served exact by the server that wrote them, with no hot
 * tier to answer for them, and after a restart */
Test(server, value_file_min_puts_records_in_files_and_gets_stay_exact, .timeout = 120)
{
    srv s;
    char cfg[160];
    snprintf(cfg, sizeof cfg, "tenant default uid %u\ntenant default admin\ncache-bytes 0\n"
                              "value-file-min 1K\n", (unsigned)getuid());
    srv_start(&s, cfg);
    su_model tm;
    su_random_model(&tm, s.dir, SEQKV_DT_BF16);
    seqkv_client *c = conn(&s);
    make_profile(c, &tm, "p", 16);
    su_seq q[3];
    for (int i = 0; i < 3; i++) {
        su_seq_make(&tm, NULL, 0, 70, 40 + (uint64_t)i, &q[i]);
        size_t stored = 0;
        cr_assert_eq(seqkv_client_put(c, "p", q[i].tok, q[i].n, q[i].kv, q[i].kv_len, &stored), 0, "%s",
                     seqkv_error_detail());
        cr_assert_gt(stored, 0);
        expect_get(c, "p", &tm, &q[i], 0);
    }
    char values[700];
    snprintf(values, sizeof values, "%s/db/values", s.dir);
    DIR *d = opendir(values);
    cr_assert_not_null(d, "%s", values);
    size_t files = 0;
    for (struct dirent *e; (e = readdir(d));)
        files += e->d_name[0] != '.';
    closedir(d);
    /* a whole chunk's raw record is 16 rows (over 1K for the random model) */
    cr_assert_geq(files, 3 * 4, "%zu value files", files);
    seqkv_client_close(c);
    cr_assert_eq(srv_stop(&s), 0);
    char dir[512];
    snprintf(dir, sizeof dir, "%s", s.dir);
    srv_start_in(&s, dir, cfg);
    c = conn(&s);
    for (int i = 0; i < 3; i++) {
        expect_get(c, "p", &tm, &q[i], 0);
        su_seq_free(&q[i]);
    }
    seqkv_client_close(c);
    cr_assert_eq(srv_stop(&s), 0);
    su_model_free(&tm);
}
