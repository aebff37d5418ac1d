/* The little HTTP the metrics endpoint speaks (server/http.c): one
 * request head parsed, nothing of its body read (GET and HEAD have none). */
#ifndef SKV_SRV_HTTP_H
#define SKV_SRV_HTTP_H
#include <stddef.h>

#define SRV_HTTP_HEAD_MAX 8192 /* a request head past this is refused (431) */

enum { SRV_HTTP_GET = 1, SRV_HTTP_HEAD = 2, SRV_HTTP_OTHER = 3 };

typedef struct {
    int method;      /* SRV_HTTP_* */
    char path[256];  /* the target's path, without its query */
    int minor;       /* HTTP/1.<minor> */
} srv_http_req;

/* The request head at buf[0, len): its length through the blank line (and
 * *out), 0 while it is incomplete, or -1 when it is not HTTP/1.x (a bad
 * request line or header line, a target that is not a path or too long,
 * a NUL byte). Bytes after the head are not looked at. */
int srv_http_parse(const char *buf, size_t len, srv_http_req *out);
#endif
