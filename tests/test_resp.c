/* The RESP parser's bulk buffers (server/resp.c): a big body lands in one
 * block of its whole length, whatever pieces it arrives in, and a client
 * that announces a big body and sends part of it holds memory for the
 * part only. (Frames of every shape: the fuzz target and its corpus.) */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "resp.h"
#include "skv_base.h"

static const skv_resp_limits LIM = {(size_t)512 << 20, 16, (size_t)1 << 30, 4096};

/* Feed the header of a SET whose value is len bytes; the parser is then
 * inside the value's body */
static void start_set(skv_resp_parser *p, size_t len)
{
    char head[96];
    int n = snprintf(head, sizeof head, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%zu\r\n", len);
    skv_resp_cmd cmd;
    size_t used;
    cr_assert_eq(skv_resp_feed(p, (const uint8_t *)head, (size_t)n, &used, &cmd), SKV_RESP_NEED);
    cr_assert_eq(used, (size_t)n);
}

/* The value's bytes: position i's */
static uint8_t byte_at(size_t i)
{
    return (uint8_t)(i * 2654435761u >> 13);
}

Test(resp, a_big_body_lands_in_one_block_of_its_whole_length)
{
    const size_t len = ((size_t)3 << 20) + 17;
    uint8_t *val = malloc(len + 2);
    cr_assert_not_null(val);
    for (size_t i = 0; i < len; i++)
        val[i] = byte_at(i);
    memcpy(val + len, "\r\n", 2);
    /* twice: through skv_resp_feed in odd pieces, and received straight
     * into the parser's buffer as the server does */
    for (int direct = 0; direct < 2; direct++) {
        skv_resp_parser p;
        skv_resp_init(&p, &LIM);
        start_set(&p, len);
        size_t at = 0, piece = 4093, grew_at = 0;
        skv_resp_cmd cmd;
        memset(&cmd, 0, sizeof cmd);
        int rc = SKV_RESP_NEED;
        while (rc == SKV_RESP_NEED) {
            size_t room = 0;
            uint8_t *dst = direct ? skv_resp_direct(&p, &room) : NULL;
            if (dst) {
                size_t k = room < piece ? room : piece;
                memcpy(dst, val + at, k);
                skv_resp_direct_done(&p, k);
                at += k;
            } else {
                size_t used, k = len + 2 - at < piece ? len + 2 - at : piece;
                rc = skv_resp_feed(&p, val + at, k, &used, &cmd);
                at += used;
            }
            /* the block: doubled while small, then the whole body's */
            if (!grew_at && p.bulk_cap >= len + 1)
                grew_at = at;
            cr_assert(p.bulk_cap == 0 || p.bulk_cap < SKV_WARM_MIN || p.bulk_cap >= len + 1,
                      "a block of %zu bytes for a body of %zu", p.bulk_cap, len);
            piece = piece * 3 % 65521 + 1;
        }
        cr_assert_eq(rc, SKV_RESP_CMD, "%s", p.err);
        cr_assert_eq(at, len + 2);
        cr_assert(grew_at > 0 && grew_at <= SKV_WARM_MIN, "the whole block came at byte %zu", grew_at);
        cr_assert_eq(cmd.argc, 3);
        cr_assert_eq(cmd.argl[2], len);
        cr_assert_eq(cmd.argcap[2], skv_huge_len(len + 1));
        cr_assert_eq(memcmp(cmd.argv[2], val, len), 0, "the value arrives exact");
        cr_assert_eq(cmd.argv[2][len], 0);
        skv_resp_cmd_free(&cmd);
        skv_resp_reset(&p);
    }
    free(val);
    skv_warm_trim();
}

/* RssAnon of this process in KiB */
static long rss_anon_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "RssAnon:", 8))
            v = strtol(line + 8, NULL, 10);
    if (f)
        fclose(f);
    return v;
}

Test(resp, a_body_cut_short_holds_memory_for_what_arrived_only)
{
    skv_warm_trim();
    const size_t len = (size_t)256 << 20, sent = (size_t)3 << 20;
    uint8_t *piece = malloc(65536);
    cr_assert_not_null(piece);
    memset(piece, 0x5a, 65536);
    long before = rss_anon_kib();
    skv_resp_parser p;
    skv_resp_init(&p, &LIM);
    start_set(&p, len);
    for (size_t at = 0; at < sent; at += 65536) {
        skv_resp_cmd cmd;
        size_t used;
        cr_assert_eq(skv_resp_feed(&p, piece, 65536, &used, &cmd), SKV_RESP_NEED);
        cr_assert_eq(used, 65536);
    }
    cr_assert_eq(p.bulk_have, sent);
    long during = rss_anon_kib();
#if !defined(__SANITIZE_ADDRESS__)
    /* 256 MiB announced, 3 MiB sent: a few MiB more (2 MiB pages), not 256 */
    cr_expect(during - before < 16 * 1024, "RssAnon %ld KiB before, %ld KiB with 3 MiB of a 256 MiB body",
              before, during);
#else
    (void)during, (void)before;
#endif
    /* the client goes: everything it held is freed (LeakSanitizer) */
    skv_resp_reset(&p);
    free(piece);
    skv_warm_trim();
}
