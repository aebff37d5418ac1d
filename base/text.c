/* Strings: a copy on seqkv's allocator, UTF-8 well-formedness (RFC 3629),
 * and the wall clock every expiry time is read from. */
#include <string.h>
#include <time.h>

#include "skv_base.h"

char *skv_strdup(const char *s)
{
    const size_t n = strlen(s) + 1;
    char *d = skv_malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

size_t skv_utf8_seq_len(const unsigned char *p, const unsigned char *end)
{
    const unsigned c = p[0];
    size_t n;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else {
        return 0;
    }
    if ((size_t)(end - p) < n || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF)
            return 0;
    return n;
}

int skv_utf8_valid(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    while (p < end) {
        const size_t n = skv_utf8_seq_len(p, end);
        if (n == 0)
            return 0;
        p += n;
    }
    return 1;
}

int64_t skv_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
