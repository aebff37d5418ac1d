/* The blocking C client (seqkv_client.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "seqkv_client.h"
#include "skv_base.h"

#define CBUF 65536
#define MAX_DEPTH 16
#define MAX_ELEMS (1u << 20)
#define MAX_REPLY_BULK (8ull << 30)

struct seqkv_client {
    int fd;
    uint8_t *buf;
    size_t pos, len;
    char err[512];
};

void seqkv_client_free(void *p)
{
    skv_free(p);
}

int seqkv_client_fd(const seqkv_client *c)
{
    return c->fd;
}

static int broken(seqkv_client *c, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int broken(seqkv_client *c, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
    return skv_error(rc, "%s", c->err);
}

int seqkv_client_connect(const char *path, seqkv_client **out)
{
    *out = NULL;
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof a.sun_path)
        return skv_error(SKV_ERR_ARG, "%s: socket path too long", path);
    memcpy(a.sun_path, path, strlen(path));
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return skv_error(SKV_ERR_IO, "socket: %s", strerror(errno));
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        int e = errno;
        close(fd);
        return skv_error(SKV_ERR_IO, "%s: %s", path, strerror(e));
    }
    seqkv_client *c = skv_calloc(1, sizeof *c);
    uint8_t *b = skv_malloc(CBUF);
    if (!c || !b) {
        close(fd);
        skv_free(c);
        skv_free(b);
        return SKV_ERR_NOMEM;
    }
    c->fd = fd;
    c->buf = b;
    *out = c;
    return 0;
}

void seqkv_client_close(seqkv_client *c)
{
    if (!c)
        return;
    if (c->fd >= 0)
        close(c->fd);
    skv_free(c->buf);
    skv_free(c);
}

int seqkv_client_send_raw(seqkv_client *c, const void *buf, size_t len)
{
    if (c->fd < 0)
        return skv_error(SKV_ERR_IO, "the connection is closed");
    const uint8_t *p = buf;
    while (len) {
        ssize_t w = send(c->fd, p, len, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            /* not closed here: a server that refused us may have said why,
             * and the reply reader still gets it */
            snprintf(c->err, sizeof c->err, "send: %s", strerror(errno));
            return skv_error(SKV_ERR_IO, "%s", c->err);
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* Fill the buffer with at least one more byte. */
static int fill(seqkv_client *c)
{
    if (c->fd < 0)
        return skv_error(SKV_ERR_IO, "the connection is closed");
    if (c->pos == c->len)
        c->pos = c->len = 0;
    if (c->len == CBUF) {
        memmove(c->buf, c->buf + c->pos, c->len - c->pos);
        c->len -= c->pos;
        c->pos = 0;
    }
    for (;;) {
        ssize_t r = recv(c->fd, c->buf + c->len, CBUF - c->len, 0);
        if (r > 0) {
            c->len += (size_t)r;
            return 0;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0)
            return broken(c, SKV_ERR_IO, "the server closed the connection%s%s",
                          c->err[0] ? ": " : "", c->err);
        return broken(c, SKV_ERR_IO, "recv: %s", strerror(errno));
    }
}

/* A CRLF-terminated line: *line points into the buffer (NUL-terminated in
 * place), valid until the next read. */
static int read_line(seqkv_client *c, char **line, size_t *n)
{
    for (;;) {
        uint8_t *s = c->buf + c->pos;
        size_t avail = c->len - c->pos;
        uint8_t *nl = avail ? memchr(s, '\n', avail) : NULL;
        if (nl) {
            if (nl == s || nl[-1] != '\r')
                return broken(c, SKV_ERR_FORMAT, "malformed reply line");
            nl[-1] = 0;
            *line = (char *)s;
            *n = (size_t)(nl - 1 - s);
            c->pos += (size_t)(nl - s) + 1;
            return 0;
        }
        if (avail >= CBUF / 2)
            return broken(c, SKV_ERR_FORMAT, "reply line too long");
        if (c->pos && c->len == CBUF) {
            memmove(c->buf, s, avail);
            c->pos = 0;
            c->len = avail;
        }
        int rc = fill(c);
        if (rc)
            return rc;
    }
}

/* n bytes into dst (dst NULL: discard), then CRLF. */
static int read_exact(seqkv_client *c, uint8_t *dst, size_t n)
{
    size_t have = c->len - c->pos;
    size_t k = have < n ? have : n;
    if (dst && k)
        memcpy(dst, c->buf + c->pos, k);
    c->pos += k;
    size_t done = k;
    while (done < n) {
        if (dst) {
            ssize_t r = recv(c->fd, dst + done, n - done, 0);
            if (r > 0) {
                done += (size_t)r;
                continue;
            }
            if (r < 0 && errno == EINTR)
                continue;
            return broken(c, SKV_ERR_IO, r == 0 ? "the server closed the connection" : "recv: %s",
                          strerror(errno));
        }
        int rc = fill(c);
        if (rc)
            return rc;
        have = c->len - c->pos;
        k = have < n - done ? have : n - done;
        c->pos += k;
        done += k;
    }
    while (c->len - c->pos < 2) {
        int rc = fill(c);
        if (rc)
            return rc;
    }
    if (c->buf[c->pos] != '\r' || c->buf[c->pos + 1] != '\n')
        return broken(c, SKV_ERR_FORMAT, "bulk string without its CRLF");
    c->pos += 2;
    return 0;
}

static int parse_int(const char *s, long long *v)
{
    char *end;
    errno = 0;
    *v = strtoll(s, &end, 10);
    return (end == s || *end || errno) ? -1 : 0;
}

void seqkv_reply_free(seqkv_reply *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->elements; i++)
        seqkv_reply_free(r->element[i]);
    skv_free(r->element);
    skv_free(r->str);
    skv_free(r);
}

static int read_reply(seqkv_client *c, seqkv_reply **out, int depth)
{
    *out = NULL;
    if (depth > MAX_DEPTH)
        return broken(c, SKV_ERR_FORMAT, "reply nested too deep");
    char *line;
    size_t n;
    int rc = read_line(c, &line, &n);
    if (rc)
        return rc;
    seqkv_reply *r = skv_calloc(1, sizeof *r);
    if (!r)
        return broken(c, SKV_ERR_NOMEM, "out of memory");
    long long v = 0;
    char t = line[0];
    switch (t) {
    case '+':
    case '-':
    case ',':
        r->type = t == '+' ? SEQKV_REPLY_STATUS : t == '-' ? SEQKV_REPLY_ERROR : SEQKV_REPLY_DOUBLE;
        r->len = n - 1;
        r->str = skv_malloc(n);
        if (!r->str) {
            skv_free(r);
            return broken(c, SKV_ERR_NOMEM, "out of memory");
        }
        memcpy(r->str, line + 1, n);
        if (t == ',')
            r->dval = strtod(r->str, NULL);
        break;
    case ':':
        if (parse_int(line + 1, &v))
            goto bad;
        r->type = SEQKV_REPLY_INTEGER;
        r->integer = v;
        break;
    case '#':
        r->type = SEQKV_REPLY_BOOL;
        r->integer = line[1] == 't';
        break;
    case '_':
        r->type = SEQKV_REPLY_NIL;
        break;
    case '$':
    case '=':
        if (parse_int(line + 1, &v) || v < -1 || (unsigned long long)v > MAX_REPLY_BULK)
            goto bad;
        if (v == -1) {
            r->type = SEQKV_REPLY_NIL;
            break;
        }
        r->type = SEQKV_REPLY_STRING;
        r->len = (size_t)v;
        r->str = skv_malloc((size_t)v + 1);
        if (!r->str) {
            skv_free(r);
            return broken(c, SKV_ERR_NOMEM, "out of memory");
        }
        rc = read_exact(c, (uint8_t *)r->str, (size_t)v);
        if (rc) {
            seqkv_reply_free(r);
            return rc;
        }
        r->str[v] = 0;
        break;
    case '*':
    case '%':
    case '~':
        if (parse_int(line + 1, &v) || v < -1 || v > MAX_ELEMS)
            goto bad;
        if (v == -1) {
            r->type = SEQKV_REPLY_NIL;
            break;
        }
        r->type = t == '%' ? SEQKV_REPLY_MAP : SEQKV_REPLY_ARRAY;
        r->elements = 0;
        if (t == '%')
            v *= 2;
        r->element = skv_calloc(v ? (size_t)v : 1, sizeof *r->element);
        if (!r->element) {
            skv_free(r);
            return broken(c, SKV_ERR_NOMEM, "out of memory");
        }
        for (long long i = 0; i < v; i++) {
            rc = read_reply(c, &r->element[i], depth + 1);
            if (rc) {
                seqkv_reply_free(r);
                return rc;
            }
            r->elements++;
        }
        break;
    default:
        goto bad;
    }
    *out = r;
    return 0;
bad:
    skv_free(r);
    return broken(c, SKV_ERR_FORMAT, "malformed reply");
}

int seqkv_client_read_reply(seqkv_client *c, seqkv_reply **out)
{
    return read_reply(c, out, 0);
}

static int send_cmd(seqkv_client *c, size_t argc, const void *const *argv, const size_t *argl)
{
    char hdr[48];
    int n = snprintf(hdr, sizeof hdr, "*%zu\r\n", argc);
    int rc = seqkv_client_send_raw(c, hdr, (size_t)n);
    for (size_t i = 0; rc == 0 && i < argc; i++) {
        n = snprintf(hdr, sizeof hdr, "$%zu\r\n", argl[i]);
        rc = seqkv_client_send_raw(c, hdr, (size_t)n);
        if (rc == 0)
            rc = seqkv_client_send_raw(c, argv[i], argl[i]);
        if (rc == 0)
            rc = seqkv_client_send_raw(c, "\r\n", 2);
    }
    return rc;
}

int seqkv_client_command(seqkv_client *c, size_t argc, const void *const *argv,
                         const size_t *argl, seqkv_reply **out)
{
    *out = NULL;
    c->err[0] = 0;
    int rc = send_cmd(c, argc, argv, argl);
    if (rc && c->fd < 0)
        return rc;
    /* after a failed send, a server that refused us may have said why */
    int rr = read_reply(c, out, 0);
    if (rc && rr)
        return broken(c, SKV_ERR_IO, "%s", c->err);
    return rr;
}

/* An error reply as a code (and its text in c->err). */
static int error_code(seqkv_client *c, const char *msg)
{
    snprintf(c->err, sizeof c->err, "%s", msg);
    size_t w = strcspn(msg, " ");
    struct {
        const char *word;
        int rc;
    } map[] = {{"NOTFOUND", SKV_ERR_NOT_FOUND}, {"SHAPE", SKV_ERR_SHAPE},
               {"CORRUPT", SKV_ERR_CORRUPT},    {"TOOLARGE", SKV_ERR_TOO_LARGE},
               {"NOAUTH", SKV_ERR_DENIED}, {"WRONGPASS", SKV_ERR_DENIED},
               {"NOPERM", SKV_ERR_DENIED}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (w == strlen(map[i].word) && strncmp(msg, map[i].word, w) == 0)
            return skv_error(map[i].rc, "%s", msg);
    return skv_error(SKV_ERR_SERVER, "%s", msg);
}

/* Run a command; the reply must be of type `want` (0: any non-error). */
static int run(seqkv_client *c, size_t argc, const void *const *argv, const size_t *argl,
               seqkv_reply_type want, seqkv_reply **out)
{
    seqkv_reply *r = NULL;
    *out = NULL;
    if (c->fd < 0)
        return skv_error(SKV_ERR_IO, "the connection is closed");
    int rc = seqkv_client_command(c, argc, argv, argl, &r);
    if (rc)
        return rc;
    if (r->type == SEQKV_REPLY_ERROR) {
        rc = error_code(c, r->str);
        seqkv_reply_free(r);
        return rc;
    }
    if (want && r->type != want) {
        seqkv_reply_free(r);
        return broken(c, SKV_ERR_FORMAT, "unexpected reply type");
    }
    *out = r;
    return 0;
}

static int run_int(seqkv_client *c, size_t argc, const void *const *argv, const size_t *argl,
                   size_t *v)
{
    seqkv_reply *r;
    int rc = run(c, argc, argv, argl, SEQKV_REPLY_INTEGER, &r);
    if (rc)
        return rc;
    if (v)
        *v = r->integer < 0 ? 0 : (size_t)r->integer;
    seqkv_reply_free(r);
    return 0;
}

static int run_ok(seqkv_client *c, size_t argc, const void *const *argv, const size_t *argl)
{
    seqkv_reply *r;
    int rc = run(c, argc, argv, argl, SEQKV_REPLY_STATUS, &r);
    seqkv_reply_free(r);
    return rc;
}

int seqkv_client_ping(seqkv_client *c)
{
    const void *argv[] = {"PING"};
    size_t argl[] = {4};
    return run_ok(c, 1, argv, argl);
}

int seqkv_client_auth(seqkv_client *c, const char *tenant, const char *token)
{
    const void *argv[] = {"AUTH", tenant ? tenant : token, token};
    size_t argl[] = {4, strlen(tenant ? tenant : token), strlen(token)};
    return run_ok(c, tenant ? 3 : 2, argv, argl);
}

int seqkv_client_shutdown(seqkv_client *c)
{
    const void *argv[] = {"SHUTDOWN"};
    size_t argl[] = {8};
    return run_ok(c, 1, argv, argl);
}

int seqkv_client_profile_set(seqkv_client *c, const char *name, const char *const *keyvals,
                             size_t npairs)
{
    if (npairs > 32)
        return skv_error(SKV_ERR_ARG, "too many profile keys");
    const void *argv[3 + 64];
    size_t argl[3 + 64];
    argv[0] = "KV.PROFILE";
    argv[1] = "SET";
    argv[2] = name;
    for (size_t i = 0; i < 3 + 2 * npairs; i++) {
        if (i >= 3)
            argv[i] = keyvals[i - 3];
        argl[i] = strlen(argv[i]);
    }
    return run_ok(c, 3 + 2 * npairs, argv, argl);
}

int seqkv_client_profile_get(seqkv_client *c, const char *name, seqkv_profile *out)
{
    const void *argv[] = {"KV.PROFILE", "GET", name};
    size_t argl[] = {10, 3, strlen(name)};
    seqkv_reply *r;
    size_t size = out->size ? out->size : sizeof *out;
    if (size != sizeof *out)
        return skv_error(SKV_ERR_ARG, "seqkv_profile.size is %zu (this client's is %zu): use "
                                      "SEQKV_PROFILE_INIT", out->size, sizeof *out);
    memset(out, 0, sizeof *out);
    out->size = size;
    int rc = run(c, 3, argv, argl, 0, &r);
    if (rc)
        return rc;
    if ((r->type != SEQKV_REPLY_ARRAY && r->type != SEQKV_REPLY_MAP) || r->elements % 2) {
        seqkv_reply_free(r);
        return broken(c, SKV_ERR_FORMAT, "unexpected reply type");
    }
    /* every field the table knows, through its text form (a field this
     * client does not know, from a newer server, is passed over) */
    for (size_t i = 0; i + 1 < r->elements && !rc; i += 2) {
        const seqkv_reply *k = r->element[i], *v = r->element[i + 1];
        size_t f;
        char text[SEQKV_PATH_MAX + 2];
        if (k->type != SEQKV_REPLY_STRING || seqkv_profile_field_find(k->str, &f))
            continue;
        if (v->type == SEQKV_REPLY_INTEGER)
            snprintf(text, sizeof text, "%lld", v->integer);
        else if (v->type == SEQKV_REPLY_DOUBLE)
            snprintf(text, sizeof text, "%.9g", v->dval);
        else
            snprintf(text, sizeof text, "%s", v->str ? v->str : "");
        if (seqkv_profile_field_parse(out, f, text))
            rc = broken(c, SKV_ERR_FORMAT, "profile %s: %s", name, seqkv_error_detail());
    }
    seqkv_error_clear();
    seqkv_reply_free(r);
    return rc;
}

/* tokens as little-endian u32 (malloc'd) */
static uint8_t *tok_bytes(const int32_t *t, size_t n)
{
    uint8_t *b = skv_malloc(n ? 4 * n : 1);
    if (b)
        for (size_t i = 0; i < n; i++)
            skv_store32_le(b + 4 * i, (uint32_t)t[i]);
    return b;
}

int seqkv_client_put(seqkv_client *c, const char *profile, const int32_t *tokens, size_t n,
                     const void *kv, size_t kv_len, size_t *stored)
{
    uint8_t *tb = tok_bytes(tokens, n);
    if (!tb)
        return SKV_ERR_NOMEM;
    const void *argv[] = {"KV.PUT", profile, tb, kv};
    size_t argl[] = {6, strlen(profile), 4 * n, kv_len};
    int rc = run_int(c, 4, argv, argl, stored);
    skv_free(tb);
    return rc;
}

static int tok_cmd(seqkv_client *c, const char *name, const char *profile, const int32_t *tokens,
                   size_t n, size_t *v)
{
    uint8_t *tb = tok_bytes(tokens, n);
    if (!tb)
        return SKV_ERR_NOMEM;
    const void *argv[] = {name, profile, tb};
    size_t argl[] = {strlen(name), strlen(profile), 4 * n};
    int rc = run_int(c, 3, argv, argl, v);
    skv_free(tb);
    return rc;
}

int seqkv_client_lookup(seqkv_client *c, const char *profile, const int32_t *tokens, size_t n,
                        size_t *matched)
{
    return tok_cmd(c, "KV.LOOKUP", profile, tokens, n, matched);
}

int seqkv_client_del(seqkv_client *c, const char *profile, const int32_t *tokens, size_t n,
                     size_t *removed)
{
    return tok_cmd(c, "KV.DEL", profile, tokens, n, removed);
}

/* KV.GET: reads the reply header itself so that a large bulk goes straight
 * into the caller's buffer (or one of the right size). */
static int get_common(seqkv_client *c, const char *profile, const int32_t *tokens, size_t n,
                      size_t want, void *out, size_t cap, void **alloc, size_t *len)
{
    *len = 0;
    uint8_t *tb = tok_bytes(tokens, n);
    if (!tb)
        return SKV_ERR_NOMEM;
    char nb[24];
    snprintf(nb, sizeof nb, "%zu", want);
    const void *argv[] = {"KV.GET", profile, tb, nb};
    size_t argl[] = {6, strlen(profile), 4 * n, strlen(nb)};
    c->err[0] = 0;
    if (c->fd < 0) {
        skv_free(tb);
        return skv_error(SKV_ERR_IO, "the connection is closed");
    }
    int rc = send_cmd(c, want ? 4 : 3, argv, argl);
    skv_free(tb);
    if (rc && c->fd < 0)
        return rc;
    char *line;
    size_t ln;
    rc = read_line(c, &line, &ln);
    if (rc)
        return rc;
    if (line[0] == '-')
        return error_code(c, line + 1);
    long long v;
    if (line[0] != '$' || parse_int(line + 1, &v) || v < 0 || (unsigned long long)v > MAX_REPLY_BULK)
        return broken(c, SKV_ERR_FORMAT, "KV.GET: unexpected reply");
    *len = (size_t)v;
    if (alloc) {
        *alloc = skv_malloc(v ? (size_t)v : 1);
        if (!*alloc) {
            rc = read_exact(c, NULL, (size_t)v);
            return rc ? rc : skv_error(SKV_ERR_NOMEM, "KV.GET: %lld bytes", v);
        }
        rc = read_exact(c, *alloc, (size_t)v);
        if (rc) {
            skv_free(*alloc);
            *alloc = NULL;
        }
        return rc;
    }
    if ((size_t)v > cap) {
        rc = read_exact(c, NULL, (size_t)v);
        if (rc)
            return rc;
        snprintf(c->err, sizeof c->err, "KV.GET: %lld bytes do not fit in %zu", v, cap);
        return skv_error(SKV_ERR_TOO_LARGE, "%s", c->err);
    }
    return read_exact(c, out, (size_t)v);
}

int seqkv_client_get(seqkv_client *c, const char *profile, const int32_t *tokens, size_t n,
                     size_t want, void *out, size_t cap, size_t *len)
{
    return get_common(c, profile, tokens, n, want, out, cap, NULL, len);
}

int seqkv_client_get_alloc(seqkv_client *c, const char *profile, const int32_t *tokens, size_t n,
                           size_t want, void **out, size_t *len)
{
    *out = NULL;
    return get_common(c, profile, tokens, n, want, NULL, 0, out, len);
}

int seqkv_client_calibrate(seqkv_client *c, const char *profile, size_t max_seq)
{
    char nb[24];
    snprintf(nb, sizeof nb, "%zu", max_seq);
    const void *argv[] = {"KV.CALIBRATE", profile, nb};
    size_t argl[] = {12, strlen(profile), strlen(nb)};
    return run_ok(c, max_seq ? 3 : 2, argv, argl);
}

int seqkv_client_info(seqkv_client *c, const char *section, char **text)
{
    *text = NULL;
    const void *argv[] = {"INFO", section};
    size_t argl[] = {4, section ? strlen(section) : 0};
    seqkv_reply *r;
    int rc = run(c, section ? 2 : 1, argv, argl, SEQKV_REPLY_STRING, &r);
    if (rc)
        return rc;
    *text = r->str;
    r->str = NULL;
    seqkv_reply_free(r);
    return 0;
}
