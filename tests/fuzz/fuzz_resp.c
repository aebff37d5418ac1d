/* libFuzzer target for the server's RESP request parser (server/resp.c).
 *
 * The input is fed twice, the way the server feeds it: through a bounded
 * read buffer (a partial line stays at its front), receiving straight into
 * a bulk's buffer when the parser offers one. Once in pieces of sizes
 * taken from the input's first byte, once in pieces as large as the buffer
 * allows. Both runs must yield the same commands and the same verdict:
 * the parser may not depend on how the bytes arrive. Every command is
 * checked against the limits (argument count, bulk size, query size, NUL
 * after each argument), then written back as RESP and parsed again in one
 * go, which must give it back unchanged; and each argument is read as the
 * TOKENS text form of token ids (skv_resp_token_text), whose ids must
 * print back to a text that reads as the same ids, and whose refusals must
 * point inside the argument. Any violation aborts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "resp.h"
#include "skv_base.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const skv_resp_limits LIM = {4096, 16, 8192, 256};
#define BUFCAP (256 + 64)

static void serialise(const skv_resp_cmd *c, skv_rbuf *out)
{
    skv_rbuf_array(out, c->argc);
    for (size_t i = 0; i < c->argc; i++)
        skv_rbuf_bulk(out, c->argv[i], c->argl[i]);
}

/* One argument as the TOKENS text of token ids */
static void check_token_text(const uint8_t *a, size_t len)
{
    const size_t max = 64, cap = len / 2 + 1 < max ? len / 2 + 1 : max;
    int32_t ids[64], back[64];
    size_t n = 0, bad = 0, blen = 0;
    int rc = skv_resp_token_text(a, len, max, ids, &n, &bad, &blen);
    if (rc == SKV_ERR_FORMAT) {
        CHECK(n >= 1 && blen >= 1 && bad + blen <= len);
        return;
    }
    if (rc) {
        CHECK(rc == SKV_ERR_TOO_LARGE);
        return;
    }
    CHECK(n <= cap);
    char text[64 * 12 + 1];
    size_t tl = 0;
    for (size_t i = 0; i < n; i++) {
        CHECK(ids[i] >= 0);
        tl += (size_t)snprintf(text + tl, sizeof text - tl, i ? " %d" : "%d", ids[i]);
    }
    size_t m = 0;
    CHECK(skv_resp_token_text((const uint8_t *)text, tl, max, back, &m, &bad, &blen) == 0);
    CHECK(m == n && memcmp(back, ids, n * sizeof *ids) == 0);
}

static void check_cmd(const skv_resp_cmd *c)
{
    CHECK(c->argc >= 1 && c->argc <= LIM.max_args);
    size_t total = 0;
    for (size_t i = 0; i < c->argc; i++) {
        CHECK(c->argl[i] <= LIM.max_bulk);
        CHECK(c->argv[i][c->argl[i]] == 0);
        total += c->argl[i];
        check_token_text(c->argv[i], c->argl[i]);
    }
    CHECK(total <= LIM.max_query);
    /* written back and parsed in one go: the same command */
    skv_rbuf b = {0};
    serialise(c, &b);
    CHECK(!b.oom);
    skv_resp_parser p;
    skv_resp_limits big = {1u << 20, 1024, 1u << 22, 1u << 16};
    skv_resp_init(&p, &big);
    skv_resp_cmd d;
    size_t used;
    CHECK(skv_resp_feed(&p, b.p, b.len, &used, &d) == SKV_RESP_CMD);
    CHECK(used == b.len);
    CHECK(d.argc == c->argc);
    for (size_t i = 0; i < c->argc; i++)
        CHECK(d.argl[i] == c->argl[i] && memcmp(d.argv[i], c->argv[i], c->argl[i]) == 0);
    skv_resp_cmd_free(&d);
    skv_resp_reset(&p);
    skv_rbuf_free(&b);
}

/* Run the whole input; the commands serialised into out; the verdict. */
static int run(const uint8_t *data, size_t size, int piece, skv_rbuf *out)
{
    skv_resp_parser p;
    skv_resp_init(&p, &LIM);
    uint8_t buf[BUFCAP];
    size_t blen = 0, pos = 0;
    int verdict = 0, step = 0;
    while (pos < size || blen) {
        size_t want = piece ? (size_t)(1 + ((piece * 7 + step++ * 13) % 97)) : BUFCAP;
        size_t room;
        uint8_t *d = blen == 0 ? skv_resp_direct(&p, &room) : NULL;
        size_t got = 0;
        if (d) {
            CHECK(room > 0);
            got = want < room ? want : room;
            if (got > size - pos)
                got = size - pos;
            memcpy(d, data + pos, got);
            pos += got;
            skv_resp_direct_done(&p, got);
        } else {
            got = want < BUFCAP - blen ? want : BUFCAP - blen;
            if (got > size - pos)
                got = size - pos;
            memcpy(buf + blen, data + pos, got);
            blen += got;
            pos += got;
        }
        /* parse what is buffered */
        for (;;) {
            size_t used = 0;
            skv_resp_cmd c;
            int rc = skv_resp_feed(&p, buf, blen, &used, &c);
            CHECK(used <= blen);
            memmove(buf, buf + used, blen - used);
            blen -= used;
            if (rc == SKV_RESP_ERROR) {
                CHECK(p.err[0] != 0);
                verdict = -1;
                break;
            }
            if (rc == SKV_RESP_CMD) {
                check_cmd(&c);
                serialise(&c, out);
                skv_resp_cmd_free(&c);
                continue;
            }
            if (used == 0)
                break;
        }
        if (verdict)
            break;
        CHECK(!(got == 0 && blen == BUFCAP)); /* a full buffer is always taken */
        if (got == 0 && pos == size) {
            /* no more input: a full buffer the parser does not take is
             * a line past the limit, which it must have reported */
            CHECK(blen < BUFCAP);
            break;
        }
    }
    skv_resp_reset(&p);
    return verdict;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    skv_rbuf a = {0}, b = {0};
    int piece = size ? 1 + data[0] % 31 : 1;
    int va = run(data, size, piece, &a);
    int vb = run(data, size, 0, &b);
    CHECK(va == vb);
    CHECK(a.len == b.len && (a.len == 0 || memcmp(a.p, b.p, a.len) == 0));
    skv_rbuf_free(&a);
    skv_rbuf_free(&b);
    return 0;
}
