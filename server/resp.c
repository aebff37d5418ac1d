/* RESP request parser and reply writer (resp.h). */
#include "resp.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "skv_base.h"

enum { ST_IDLE = 0, ST_BULK_HDR, ST_BULK_BODY, ST_BULK_CRLF };

#define HDR_MAX 32          /* "$" + 20 digits + CRLF, with room */
#define BULK_FIRST (64 * 1024)

void skv_resp_cmd_free(skv_resp_cmd *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->argc; i++)
        skv_warm_free(c->argv[i], c->argcap ? c->argcap[i] : 0);
    skv_free(c->argv);
    skv_free(c->argl);
    skv_free(c->argcap);
    memset(c, 0, sizeof *c);
}

void skv_resp_init(skv_resp_parser *p, const skv_resp_limits *lim)
{
    memset(p, 0, sizeof *p);
    p->lim = *lim;
}

void skv_resp_reset(skv_resp_parser *p)
{
    skv_resp_limits lim = p->lim;
    /* a bulk being received sits one past the counted arguments (the
     * table is zeroed, so the slot is NULL otherwise) */
    if (p->cmd.argv && p->cmd.argc < p->want)
        skv_warm_free(p->cmd.argv[p->cmd.argc], p->bulk_cap);
    skv_resp_cmd_free(&p->cmd);
    skv_resp_init(p, &lim);
}

static int fail(skv_resp_parser *p, const char *msg)
{
    snprintf(p->err, sizeof p->err, "Protocol error: %s", msg);
    return SKV_RESP_ERROR;
}

/* A strict decimal integer of buf[0..n) (optional '-'), at most 18
 * digits; -1 on anything else. */
static int parse_num(const uint8_t *s, size_t n, long long *out)
{
    int neg = 0;
    if (n && s[0] == '-') {
        neg = 1;
        s++;
        n--;
    }
    if (n == 0 || n > 18)
        return -1;
    long long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = neg ? -v : v;
    return 0;
}

/* The end of the line starting at buf (index of '\r' of "\r\n", or of '\n'
 * for inline commands), or -1 when not there yet. */
static long find_eol(const uint8_t *buf, size_t len, size_t max, int lf_ok)
{
    size_t lim = len < max + 2 ? len : max + 2;
    const uint8_t *nl = memchr(buf, '\n', lim);
    if (!nl)
        return -1;
    size_t i = (size_t)(nl - buf);
    if (i > 0 && buf[i - 1] == '\r')
        return (long)(i - 1);
    return lf_ok ? (long)i : -2; /* a bare LF in a header line */
}

static int start_cmd(skv_resp_parser *p, size_t argc)
{
    p->cmd.argv = skv_calloc(argc, sizeof *p->cmd.argv);
    p->cmd.argl = skv_calloc(argc, sizeof *p->cmd.argl);
    p->cmd.argcap = skv_calloc(argc, sizeof *p->cmd.argcap);
    if (!p->cmd.argv || !p->cmd.argl || !p->cmd.argcap) {
        skv_resp_cmd_free(&p->cmd);
        return fail(p, "out of memory");
    }
    p->cmd.argc = 0;
    p->want = argc;
    p->query = 0;
    return 0;
}

static int finish(skv_resp_parser *p, skv_resp_cmd *out)
{
    *out = p->cmd;
    memset(&p->cmd, 0, sizeof p->cmd);
    p->state = ST_IDLE;
    p->want = 0;
    p->query = 0;
    return SKV_RESP_CMD;
}

/* An inline command: line[0..n) split on blanks. */
static int parse_inline(skv_resp_parser *p, const uint8_t *line, size_t n, skv_resp_cmd *out)
{
    size_t argc = 0;
    for (size_t i = 0; i < n;) {
        while (i < n && (line[i] == ' ' || line[i] == '\t'))
            i++;
        if (i == n)
            break;
        argc++;
        while (i < n && line[i] != ' ' && line[i] != '\t')
            i++;
    }
    if (argc == 0)
        return SKV_RESP_NEED; /* an empty line: skipped */
    if (argc > p->lim.max_args)
        return fail(p, "too many arguments");
    if (start_cmd(p, argc))
        return SKV_RESP_ERROR;
    for (size_t i = 0; i < n;) {
        while (i < n && (line[i] == ' ' || line[i] == '\t'))
            i++;
        if (i == n)
            break;
        size_t s = i;
        while (i < n && line[i] != ' ' && line[i] != '\t')
            i++;
        uint8_t *a = skv_malloc(i - s + 1);
        if (!a)
            return fail(p, "out of memory");
        memcpy(a, line + s, i - s);
        a[i - s] = 0;
        p->cmd.argv[p->cmd.argc] = a;
        p->cmd.argl[p->cmd.argc++] = i - s;
    }
    return finish(p, out);
}

/* Make sure the bulk buffer has room for at least one more byte of the
 * body (and always for the final NUL). It doubles as the body arrives (a
 * client that announces a length and sends nothing holds nothing) until
 * it would reach SKV_WARM_MIN; a big body then moves at once into a warm
 * block of its whole length: one kept already (no pages to fault in), or a
 * fresh one, whose pages are made only as the body arrives (on 2 MiB pages
 * from SKV_WARM_HUGE on) -- so no more doublings to copy, and still no
 * memory for bytes not sent. */
static int bulk_grow(skv_resp_parser *p)
{
    size_t idx = p->cmd.argc;
    if (p->bulk_have < p->bulk_cap - 1 || p->bulk_cap >= p->bulk_len + 1)
        return 0;
    size_t ncap = p->bulk_cap * 2;
    if (ncap > p->bulk_len + 1 || ncap < p->bulk_cap)
        ncap = p->bulk_len + 1;
    if (ncap >= SKV_WARM_MIN) {
        size_t wcap;
        uint8_t *w = skv_warm_alloc(p->bulk_len + 1, &wcap);
        if (!w)
            return fail(p, "out of memory");
        memcpy(w, p->cmd.argv[idx], p->bulk_have);
        skv_warm_free(p->cmd.argv[idx], p->bulk_cap);
        p->cmd.argv[idx] = w;
        p->bulk_cap = wcap;
        return 0;
    }
    uint8_t *np = skv_realloc(p->cmd.argv[idx], ncap);
    if (!np)
        return fail(p, "out of memory");
    p->cmd.argv[idx] = np;
    p->bulk_cap = ncap;
    return 0;
}

int skv_resp_feed(skv_resp_parser *p, const uint8_t *buf, size_t len, size_t *used,
                  skv_resp_cmd *out)
{
    size_t pos = 0;
    int rc = SKV_RESP_NEED;
    memset(out, 0, sizeof *out);
    if (p->err[0])
        return SKV_RESP_ERROR;
    while (pos < len) {
        const uint8_t *b = buf + pos;
        size_t n = len - pos;
        if (p->state == ST_IDLE) {
            if (b[0] != '*') {
                long e = find_eol(b, n, p->lim.max_inline, 1);
                if (e < 0) {
                    /* no LF in max_inline + 2 bytes: the line is longer */
                    if (n >= p->lim.max_inline + 2)
                        rc = fail(p, "too big inline request");
                    break;
                }
                if ((size_t)e > p->lim.max_inline) {
                    rc = fail(p, "too big inline request");
                    break;
                }
                size_t adv = (size_t)e + (b[e] == '\r' ? 2 : 1);
                rc = parse_inline(p, b, (size_t)e, out);
                if (rc == SKV_RESP_ERROR)
                    break;
                pos += adv;
                if (rc == SKV_RESP_CMD)
                    break;
                continue;
            }
            long e = find_eol(b, n, HDR_MAX, 0);
            if (e == -2 || (e == -1 && n >= HDR_MAX + 2) || e > HDR_MAX) {
                rc = fail(p, "invalid multibulk length");
                break;
            }
            if (e == -1)
                break;
            long long v;
            if (parse_num(b + 1, (size_t)e - 1, &v)) {
                rc = fail(p, "invalid multibulk length");
                break;
            }
            pos += (size_t)e + 2;
            if (v <= 0)
                continue; /* "*0", "*-1": nothing to do */
            if ((unsigned long long)v > p->lim.max_args) {
                rc = fail(p, "too many arguments");
                break;
            }
            if (start_cmd(p, (size_t)v)) {
                rc = SKV_RESP_ERROR;
                break;
            }
            p->state = ST_BULK_HDR;
        } else if (p->state == ST_BULK_HDR) {
            if (b[0] != '$') {
                char msg[48];
                snprintf(msg, sizeof msg, "expected '$', got '%c'",
                         b[0] >= 0x20 && b[0] < 0x7f ? b[0] : '?');
                rc = fail(p, msg);
                break;
            }
            long e = find_eol(b, n, HDR_MAX, 0);
            if (e == -2 || (e == -1 && n >= HDR_MAX + 2) || e > HDR_MAX) {
                rc = fail(p, "invalid bulk length");
                break;
            }
            if (e == -1)
                break;
            long long v;
            if (parse_num(b + 1, (size_t)e - 1, &v) || v < 0) {
                rc = fail(p, "invalid bulk length");
                break;
            }
            if ((unsigned long long)v > p->lim.max_bulk) {
                rc = fail(p, "bulk length exceeds the server's limit");
                break;
            }
            if ((unsigned long long)v > p->lim.max_query - p->query) {
                rc = fail(p, "request exceeds the query buffer limit");
                break;
            }
            pos += (size_t)e + 2;
            size_t first = (size_t)v + 1;
            if (first > BULK_FIRST)
                first = BULK_FIRST;
            uint8_t *a = skv_malloc(first);
            if (!a) {
                rc = fail(p, "out of memory");
                break;
            }
            p->cmd.argv[p->cmd.argc] = a;
            p->bulk_len = (size_t)v;
            p->bulk_have = 0;
            p->bulk_cap = first;
            p->query += (size_t)v;
            p->state = ST_BULK_BODY;
        } else if (p->state == ST_BULK_BODY) {
            if (p->bulk_have == p->bulk_len) {
                p->state = ST_BULK_CRLF;
                p->crlf = 0;
                continue;
            }
            if (bulk_grow(p)) {
                rc = SKV_RESP_ERROR;
                break;
            }
            size_t room = p->bulk_cap - 1 - p->bulk_have;
            if (room > p->bulk_len - p->bulk_have)
                room = p->bulk_len - p->bulk_have;
            size_t k = n < room ? n : room;
            memcpy(p->cmd.argv[p->cmd.argc] + p->bulk_have, b, k);
            p->bulk_have += k;
            pos += k;
        } else { /* ST_BULK_CRLF */
            const char want = p->crlf == 0 ? '\r' : '\n';
            if (b[0] != want) {
                rc = fail(p, "expected CRLF after a bulk string");
                break;
            }
            pos++;
            if (++p->crlf < 2)
                continue;
            size_t idx = p->cmd.argc;
            p->cmd.argv[idx][p->bulk_len] = 0;
            p->cmd.argl[idx] = p->bulk_len;
            p->cmd.argcap[idx] = p->bulk_cap;
            p->cmd.argc++;
            p->bulk_len = p->bulk_have = p->bulk_cap = 0;
            if (p->cmd.argc == p->want) {
                rc = finish(p, out);
                break;
            }
            p->state = ST_BULK_HDR;
        }
    }
    /* a completed body whose CRLF has not arrived yet moves on at once */
    if (rc == SKV_RESP_NEED && p->state == ST_BULK_BODY && p->bulk_have == p->bulk_len) {
        p->state = ST_BULK_CRLF;
        p->crlf = 0;
    }
    *used = pos;
    return rc;
}

uint8_t *skv_resp_direct(skv_resp_parser *p, size_t *room)
{
    *room = 0;
    if (p->err[0] || p->state != ST_BULK_BODY || p->bulk_have == p->bulk_len)
        return NULL;
    if (bulk_grow(p))
        return NULL;
    size_t r = p->bulk_cap - 1 - p->bulk_have;
    if (r > p->bulk_len - p->bulk_have)
        r = p->bulk_len - p->bulk_have;
    *room = r;
    return p->cmd.argv[p->cmd.argc] + p->bulk_have;
}

void skv_resp_direct_done(skv_resp_parser *p, size_t n)
{
    p->bulk_have += n;
    if (p->bulk_have == p->bulk_len) {
        p->state = ST_BULK_CRLF;
        p->crlf = 0;
    }
}

int skv_resp_token_text(const uint8_t *a, size_t len, size_t max, int32_t *out, size_t *n, size_t *bad,
                        size_t *bad_len)
{
    size_t k = 0, i = 0;
    *n = 0;
    for (;;) {
        while (i < len && (a[i] == ' ' || a[i] == '\t'))
            i++;
        if (i == len)
            break;
        size_t b = i;
        long long v = 0;
        while (i < len && a[i] >= '0' && a[i] <= '9' && v <= INT32_MAX)
            v = v * 10 + (a[i++] - '0');
        if (i == b || v > INT32_MAX || (i < len && a[i] != ' ' && a[i] != '\t')) {
            while (i < len && a[i] != ' ' && a[i] != '\t')
                i++;
            *n = k + 1, *bad = b, *bad_len = i - b;
            return SKV_ERR_FORMAT;
        }
        if (k == max)
            return SKV_ERR_TOO_LARGE;
        out[k++] = (int32_t)v;
    }
    *n = k;
    return SKV_OK;
}

/* ------------------------------------------------------------------------
 * Replies
 * ---------------------------------------------------------------------- */
void skv_rbuf_free(skv_rbuf *b)
{
    skv_free(b->p);
    memset(b, 0, sizeof *b);
}

uint8_t *skv_rbuf_reserve(skv_rbuf *b, size_t n)
{
    if (b->oom)
        return NULL;
    if (b->cap - b->len < n) {
        size_t want = b->len + n;
        if (want < b->len) {
            b->oom = 1;
            return NULL;
        }
        /* doubling for small appends; a large one (a KV bulk) gets exactly
         * what it asks for */
        size_t ncap = b->cap ? b->cap * 2 : 256;
        if (ncap < want || ncap < b->cap)
            ncap = want;
        uint8_t *np = skv_realloc(b->p, ncap);
        if (!np) {
            b->oom = 1;
            return NULL;
        }
        b->p = np;
        b->cap = ncap;
    }
    uint8_t *r = b->p + b->len;
    b->len += n;
    return r;
}

void skv_rbuf_raw(skv_rbuf *b, const void *s, size_t n)
{
    uint8_t *d = skv_rbuf_reserve(b, n);
    if (d && n)
        memcpy(d, s, n);
}

void skv_rbuf_fmt(skv_rbuf *b, const char *fmt, ...)
{
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0)
        skv_rbuf_raw(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

void skv_rbuf_simple(skv_rbuf *b, const char *s)
{
    skv_rbuf_raw(b, "+", 1);
    skv_rbuf_raw(b, s, strlen(s));
    skv_rbuf_raw(b, "\r\n", 2);
}

void skv_rbuf_error(skv_rbuf *b, const char *code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof msg)
        n = sizeof msg - 1;
    for (int i = 0; i < n; i++)
        if (msg[i] == '\r' || msg[i] == '\n')
            msg[i] = ' ';
    skv_rbuf_raw(b, "-", 1);
    skv_rbuf_raw(b, code, strlen(code));
    if (n) {
        skv_rbuf_raw(b, " ", 1);
        skv_rbuf_raw(b, msg, (size_t)n);
    }
    skv_rbuf_raw(b, "\r\n", 2);
}

size_t skv_resp_head(uint8_t out[SKV_RESP_HEAD_MAX], char type, int neg, uint64_t n)
{
    char digits[20];
    size_t nd = 0, len = 0;
    do
        digits[nd++] = (char)('0' + n % 10);
    while ((n /= 10) != 0);
    out[len++] = (uint8_t)type;
    if (neg)
        out[len++] = '-';
    while (nd)
        out[len++] = (uint8_t)digits[--nd];
    out[len++] = '\r';
    out[len++] = '\n';
    return len;
}

void skv_rbuf_int(skv_rbuf *b, long long v)
{
    uint8_t h[SKV_RESP_HEAD_MAX];
    skv_rbuf_raw(b, h, skv_resp_head(h, ':', v < 0, v < 0 ? 0 - (uint64_t)v : (uint64_t)v));
}

void skv_rbuf_bulk(skv_rbuf *b, const void *s, size_t n)
{
    uint8_t h[SKV_RESP_HEAD_MAX];
    const size_t hl = skv_resp_head(h, '$', 0, n);
    uint8_t *d = skv_rbuf_reserve(b, hl + n + 2);
    if (!d)
        return;
    memcpy(d, h, hl);
    if (n)
        memcpy(d + hl, s, n);
    memcpy(d + hl + n, "\r\n", 2);
}

void skv_rbuf_bulk_str(skv_rbuf *b, const char *s)
{
    skv_rbuf_bulk(b, s, strlen(s));
}

void skv_rbuf_array(skv_rbuf *b, size_t n)
{
    uint8_t h[SKV_RESP_HEAD_MAX];
    skv_rbuf_raw(b, h, skv_resp_head(h, '*', 0, n));
}

void skv_rbuf_map(skv_rbuf *b, int proto, size_t n)
{
    if (proto >= 3)
        skv_rbuf_fmt(b, "%%%zu\r\n", n);
    else
        skv_rbuf_fmt(b, "*%zu\r\n", 2 * n);
}

void skv_rbuf_null(skv_rbuf *b, int proto)
{
    if (proto >= 3)
        skv_rbuf_raw(b, "_\r\n", 3);
    else
        skv_rbuf_raw(b, "$-1\r\n", 5);
}

void skv_rbuf_double(skv_rbuf *b, int proto, double v)
{
    char tmp[48];
    int n = snprintf(tmp, sizeof tmp, "%.17g", v);
    if (proto >= 3) {
        skv_rbuf_raw(b, ",", 1);
        skv_rbuf_raw(b, tmp, (size_t)n);
        skv_rbuf_raw(b, "\r\n", 2);
    } else {
        skv_rbuf_bulk(b, tmp, (size_t)n);
    }
}
