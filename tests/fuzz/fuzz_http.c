/* libFuzzer target for the metrics endpoint's HTTP request head parser
 * (server/http.c).
 *
 * A head it accepts ends at a line feed inside the input and holds only
 * what the parser promises: a method of GET, HEAD or another, a path
 * starting with '/' of printable ASCII without '?' (the query cut off),
 * NUL-ended inside its buffer, HTTP/1.<digit>. The same bytes give the
 * same answer again, the head alone gives the same head, and any input
 * with a NUL byte is refused. Any violation aborts. */
#include <stdint.h>
#include <string.h>

#include "http.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > SRV_HTTP_HEAD_MAX)
        size = SRV_HTTP_HEAD_MAX; /* the endpoint reads no more */
    const char *buf = (const char *)data;
    srv_http_req q, q2;
    const int rc = srv_http_parse(buf, size, &q);
    CHECK(rc >= -1 && rc <= (int)size);
    CHECK(srv_http_parse(buf, size, &q2) == rc);
    if (memchr(buf, 0, size))
        CHECK(rc == -1);
    if (rc <= 0)
        return 0;
    CHECK(buf[rc - 1] == '\n');
    CHECK(q.method >= SRV_HTTP_GET && q.method <= SRV_HTTP_OTHER);
    CHECK(q.minor >= 0 && q.minor <= 9);
    const size_t pl = strnlen(q.path, sizeof q.path);
    CHECK(pl > 0 && pl < sizeof q.path && q.path[0] == '/');
    for (size_t i = 0; i < pl; i++)
        CHECK((unsigned char)q.path[i] > 0x20 && (unsigned char)q.path[i] < 0x7f &&
              q.path[i] != '?');
    CHECK(memcmp(&q, &q2, sizeof q) == 0);
    CHECK(srv_http_parse(buf, (size_t)rc, &q2) == rc);
    CHECK(memcmp(&q, &q2, sizeof q) == 0);
    return 0;
}
