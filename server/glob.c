/* Redis's glob match (stringmatchlen), shared by SCAN ... MATCH and the
 * config's kv-layout lines: * ? [set] [^set] [a-z] and \ escapes. */
#include "server_int.h"

static int glob_class(const uint8_t **pp, const uint8_t *pe, uint8_t c)
{
    const uint8_t *p = *pp + 1;
    int neg = p < pe && *p == '^', hit = 0;
    p += neg;
    for (; p < pe && *p != ']'; p++) {
        if (*p == '\\' && p + 1 < pe) {
            hit |= *++p == c;
        } else if (p + 2 < pe && p[1] == '-' && p[2] != ']') {
            uint8_t lo = p[0], hi = p[2];
            if (lo > hi) {
                uint8_t t = lo;
                lo = hi;
                hi = t;
            }
            hit |= c >= lo && c <= hi;
            p += 2;
        } else {
            hit |= *p == c;
        }
    }
    *pp = p < pe ? p : pe - 1; /* an unclosed set runs to the pattern's end */
    return neg ? !hit : hit;
}

int srv_glob(const uint8_t *p, size_t pl, const uint8_t *s, size_t sl)
{
    const uint8_t *pe = p + pl, *se = s + sl, *star = NULL, *mark = NULL;
    while (s < se) {
        if (p < pe && *p == '*') {
            while (p < pe && *p == '*')
                p++;
            if (p == pe)
                return 1;
            star = p;
            mark = s;
            continue;
        }
        int ok = 0;
        const uint8_t *q = p;
        if (p < pe) {
            if (*p == '?') {
                ok = 1;
            } else if (*p == '[') {
                ok = glob_class(&q, pe, *s);
            } else if (*p == '\\' && p + 1 < pe) {
                q = p + 1;
                ok = *q == *s;
            } else {
                ok = *p == *s;
            }
        }
        if (ok) {
            p = q + 1;
            s++;
        } else if (star) {
            p = star;
            s = ++mark;
        } else {
            return 0;
        }
    }
    while (p < pe && *p == '*')
        p++;
    return p == pe;
}
