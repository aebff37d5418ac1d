/* An HTTP/1.x request head (http.h), as RFC 9112 writes it: a request line
 * "METHOD SP TARGET SP HTTP/1.D", header lines "name: value", a blank line.
 * Line ends are CRLF or a bare LF. */
#include <string.h>

#include "http.h"

/* RFC 9110's tchar: what a method or a header name is made of */
static int tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* The end of the line starting at p (its '\n'), or NULL */
static const char *line_end(const char *p, const char *end)
{
    const char *n = memchr(p, '\n', (size_t)(end - p));
    return n;
}

static int request_line(const char *p, const char *e, srv_http_req *out)
{
    if (e > p && e[-1] == '\r')
        e--;
    const char *sp = memchr(p, ' ', (size_t)(e - p));
    if (!sp || sp == p || sp - p > 16)
        return -1;
    for (const char *q = p; q < sp; q++)
        if (!tchar((unsigned char)*q))
            return -1;
    const size_t ml = (size_t)(sp - p);
    out->method = ml == 3 && !memcmp(p, "GET", 3)    ? SRV_HTTP_GET
                  : ml == 4 && !memcmp(p, "HEAD", 4) ? SRV_HTTP_HEAD
                                                     : SRV_HTTP_OTHER;
    const char *t = sp + 1, *sp2 = memchr(t, ' ', (size_t)(e - t));
    if (!sp2 || sp2 == t || e - sp2 != 9 || memcmp(sp2 + 1, "HTTP/1.", 7) != 0 ||
        sp2[8] < '0' || sp2[8] > '9')
        return -1;
    out->minor = sp2[8] - '0';
    if (*t != '/') /* origin-form only (no proxy's absolute-form, no '*') */
        return -1;
    size_t n = 0;
    for (const char *q = t; q < sp2 && *q != '?'; q++, n++) {
        if ((unsigned char)*q <= 0x20 || (unsigned char)*q >= 0x7f || n + 1 >= sizeof out->path)
            return -1;
        out->path[n] = *q;
    }
    out->path[n] = 0;
    for (const char *q = t; q < sp2; q++)
        if ((unsigned char)*q <= 0x20 || (unsigned char)*q >= 0x7f)
            return -1;
    return 0;
}

static int header_line(const char *p, const char *e)
{
    if (e > p && e[-1] == '\r')
        e--;
    const char *colon = memchr(p, ':', (size_t)(e - p));
    if (!colon || colon == p)
        return -1;
    for (const char *q = p; q < colon; q++)
        if (!tchar((unsigned char)*q))
            return -1;
    for (const char *q = colon + 1; q < e; q++)
        if ((unsigned char)*q < 0x20 && *q != '\t')
            return -1;
    return 0;
}

int srv_http_parse(const char *buf, size_t len, srv_http_req *out)
{
    const char *p = buf, *end = buf + len;
    if (memchr(buf, 0, len))
        return -1;
    const char *e = line_end(p, end);
    if (!e)
        return 0;
    memset(out, 0, sizeof *out);
    if (request_line(p, e, out))
        return -1;
    for (p = e + 1; (e = line_end(p, end)); p = e + 1) {
        if (e == p || (e == p + 1 && *p == '\r'))
            return (int)(e + 1 - buf);
        if (header_line(p, e))
            return -1;
    }
    return 0;
}
