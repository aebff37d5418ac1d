/* A sequence's coded streams, packed one after another. */
#include <string.h>

#include "delta_int.h"

void skv_streams_free(skv_streams *s)
{
    if (s->cap)
        skv_free(s->data); /* cap == 0: data is borrowed (skv_coded_read_seq) */
    skv_free(s->offs);
    memset(s, 0, sizeof *s);
}

void skv_streams_clear(skv_streams *s)
{
    s->len = 0;
    s->nstreams = 0;
    if (s->offs)
        s->offs[0] = 0;
}

int skv_streams_append(skv_streams *s, const uint8_t *p, size_t n)
{
    if (s->nstreams + 2 > s->ncap) {
        size_t nc = s->ncap ? 2 * s->ncap : 64;
        size_t *o = skv_realloc(s->offs, nc * sizeof *o);
        if (!o)
            return skv_error(SKV_ERR_NOMEM, "streams");
        s->offs = o;
        s->ncap = nc;
        if (s->nstreams == 0)
            s->offs[0] = 0;
    }
    if (s->len + n > s->cap) {
        size_t nc = s->cap ? 2 * s->cap : 65536;
        while (nc < s->len + n)
            nc *= 2;
        uint8_t *b = skv_realloc(s->data, nc);
        if (!b)
            return skv_error(SKV_ERR_NOMEM, "streams");
        s->data = b;
        s->cap = nc;
    }
    if (s->nstreams == 0)
        s->offs[0] = 0;
    memcpy(s->data + s->len, p, n);
    s->len += n;
    s->offs[++s->nstreams] = s->len;
    return SKV_OK;
}
