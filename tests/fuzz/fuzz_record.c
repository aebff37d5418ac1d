/* Fuzz target for the store's chunk records, their centroid side info and
 * the raw records' one-pass check and copy (skv_rec_raw_copy). The record
 * trailer (XXH3-128) covers everything before
 * it, so random bytes would stop at it: the target appends the right
 * trailer to the input, reaching every field check behind it (a second
 * run with the trailer flipped checks that it is refused). */
#include <sodium.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store_cluster.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int init;
    if (!init) {
        if (sodium_init() < 0)
            abort();
        init = 1;
    }
    if (size > (1u << 22))
        return 0;
    uint8_t *buf = malloc(size + SKV_REC_TRAILER);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    skv_rec_seal(buf, size + SKV_REC_TRAILER); /* short inputs: parse refuses them first */
    skv_rec r;
    if (skv_rec_parse(buf, size + SKV_REC_TRAILER, &r) == 0) {
        /* every range the parser hands out lies inside the buffer */
        const uint8_t *end = buf + size;
        volatile uint32_t sink = 0;
        for (uint32_t i = 0; i < r.n; i++)
            sink ^= skv_load32_le(r.tokens + 4 * (size_t)i);
        if (r.surprisal && r.surprisal + 4 * (size_t)r.n > end)
            abort();
        size_t tot = 0;
        for (uint32_t i = 0; i < r.nstreams; i++)
            tot += skv_load32_le(r.sizes + 4 * (size_t)i);
        if (tot != r.streams_len || r.streams + r.streams_len > end)
            abort();
        if (r.side_len) {
            /* side info against the profile shape its size implies */
            size_t count = r.n - r.lo, rest = r.side_len >= 12 + 4 * (size_t)count
                                                  ? r.side_len - 12 - 4 * (size_t)count : 0;
            prof_ent pe;
            memset(&pe, 0, sizeof pe);
            pe.p.layers = 1;
            pe.p.kv_heads = (int)(rest / 24 ? rest / 24 : 1);
            pe.p.head_dim = 4;
            pe.C = (size_t)pe.p.kv_heads * 4;
            pe.es = 2;
            float *w = malloc((size_t)pe.p.kv_heads * 6 * sizeof(float));
            int32_t *al = malloc(count * sizeof *al + 1);
            uint32_t nc;
            if (al && w)
                (void)skv_side_read(&pe, r.side, r.side_len, count, &nc, al, w,
                                    w + 4 * (size_t)pe.p.kv_heads);
            free(al);
            free(w);
        }
        (void)sink;
        /* a record whose streams are of one size, as a raw record's
         * are: checked and copied in one pass, it copies exactly its
         * streams and agrees with a one-shot checksum of them */
        if (r.version != SKV_REC_VERSION)
            abort(); /* (no other version is read) */
        int raw = r.nstreams > 0 && r.nstreams <= 64;
        for (uint32_t i = 0; raw && i < r.nstreams; i++)
            raw = (size_t)skv_load32_le(r.sizes + 4 * (size_t)i) * r.nstreams == r.streams_len;
        uint8_t *out = raw ? malloc(r.streams_len + 1) : NULL;
        uint8_t *dst[64];
        const size_t sz = raw ? r.streams_len / r.nstreams : 0;
        for (uint32_t i = 0; out && i < r.nstreams; i++)
            dst[i] = out + i * sz;
        if (out) {
            int rc = skv_rec_raw_copy(buf, size + SKV_REC_TRAILER, &r, dst);
            int want = XXH3_64bits(r.streams, r.streams_len) == r.checksum ? 0 : SKV_ERR_CORRUPT;
            if (rc != want || memcmp(out, r.streams, r.streams_len) != 0)
                abort();
        }
        /* the same bytes with a wrong trailer are refused */
        buf[size] ^= 1;
        if (out && skv_rec_raw_copy(buf, size + SKV_REC_TRAILER, &r, dst) != SKV_ERR_CORRUPT)
            abort();
        free(out);
        if (skv_rec_parse(buf, size + SKV_REC_TRAILER, &r) != SKV_ERR_CORRUPT)
            abort();
    }
    free(buf);
    return 0;
}
