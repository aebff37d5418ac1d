/* Chunk records: serialisation and verified parsing (FORMAT.md, "Chunk
 * records"). The parser is the first thing that sees bytes from LMDB and
 * trusts nothing: every size is checked against the buffer before use. */
#include <string.h>

#include "skv_codec.h"
#include "store_int.h"

/* The trailer of a record's first len bytes: XXH3-128, low half first */
static void rec_trailer(const uint8_t *buf, size_t len, uint8_t out[SKV_REC_TRAILER])
{
    XXH128_hash_t h = XXH3_128bits(buf, len);
    skv_store64_le(out, h.low64);
    skv_store64_le(out + 8, h.high64);
}

void skv_rec_sum_begin(skv_rec_sum *s)
{
    XXH3_64bits_reset(&s->xx);
}

void skv_rec_sum_add(skv_rec_sum *s, const void *p, size_t len)
{
    XXH3_64bits_update(&s->xx, p, len);
}

uint64_t skv_rec_sum_end(skv_rec_sum *s)
{
    return XXH3_64bits_digest(&s->xx);
}

int skv_rec_raw_copy(const uint8_t *buf, size_t len, const skv_rec *r, uint8_t *const *dst)
{
    XXH3_state_t t, k;
    XXH3_128bits_reset(&t);
    XXH3_64bits_reset(&k);
    const size_t sz = r->nstreams ? r->streams_len / r->nstreams : 0;
    const uint8_t *p = r->streams, *end = buf + len - SKV_REC_TRAILER;
    XXH3_128bits_update(&t, buf, (size_t)(p - buf));
    for (uint32_t j = 0; j < r->nstreams; j++, p += sz) {
        XXH3_128bits_update(&t, p, sz);
        XXH3_64bits_update(&k, p, sz);
        memcpy(dst[j], p, sz);
    }
    XXH3_128bits_update(&t, p, (size_t)(end - p));
    XXH128_hash_t h = XXH3_128bits_digest(&t);
    if (skv_load64_le(end) != h.low64 || skv_load64_le(end + 8) != h.high64)
        return skv_error(SKV_ERR_CORRUPT, "chunk record checksum mismatch");
    if (XXH3_64bits_digest(&k) != r->checksum)
        return skv_error(SKV_ERR_CORRUPT, "decoded KV checksum mismatch (chunk %u)", r->chunk_index);
    return SKV_OK;
}

size_t skv_rec_size(const skv_rec *r)
{
    return SKV_REC_HEADER + (size_t)r->n * 4 + (r->surprisal ? (size_t)r->n * 4 : 0) +
           r->side_len + (size_t)r->nstreams * 4 + r->streams_len + SKV_REC_TRAILER;
}

/* r's image up to its streams into dst; the end */
static uint8_t *write_head(const skv_rec *r, uint8_t *dst)
{
    uint8_t *p = dst;
    memset(p, 0, SKV_REC_HEADER);
    skv_store32_le(p, SKV_REC_MAGIC);
    skv_store16_le(p + 4, SKV_REC_VERSION);
    p[6] = r->level;
    p[7] = (uint8_t)(r->flags | (r->surprisal ? SKV_REC_SURPRISAL : 0));
    skv_store64_le(p + 8, r->tenant);
    memcpy(p + 16, r->profile, 32);
    memcpy(p + 48, r->parent, 32);
    memcpy(p + 80, r->base, 32);
    memcpy(p + 112, r->centroid, 32);
    memcpy(p + 144, r->calib, 16);
    skv_store32_le(p + 160, r->chunk_index);
    skv_store32_le(p + 164, r->n);
    skv_store32_le(p + 168, r->lo);
    skv_store32_le(p + 172, r->nstreams);
    skv_store32_le(p + 176, r->side_len);
    skv_store64_le(p + 184, r->checksum);
    p += SKV_REC_HEADER;
    memcpy(p, r->tokens, (size_t)r->n * 4);
    p += (size_t)r->n * 4;
    if (r->surprisal) {
        memcpy(p, r->surprisal, (size_t)r->n * 4);
        p += (size_t)r->n * 4;
    }
    if (r->side_len)
        memcpy(p, r->side, r->side_len);
    p += r->side_len;
    memcpy(p, r->sizes, (size_t)r->nstreams * 4);
    return p + (size_t)r->nstreams * 4;
}

void skv_rec_write_at(const skv_rec *r, const skv_rec_at *at, uint8_t *dst)
{
    const uint8_t *end = write_head(r, dst);
    XXH3_state_t t;
    XXH3_128bits_reset(&t);
    XXH3_128bits_update(&t, dst, (size_t)(end - dst));
    for (uint32_t j = 0; j < at->nstreams; j++)
        XXH3_128bits_update(&t, at->src[j], at->sz);
    XXH128_hash_t h = XXH3_128bits_digest(&t);
    skv_store64_le(dst + (end - dst), h.low64);
    skv_store64_le(dst + (end - dst) + 8, h.high64);
}

void skv_rec_write(const skv_rec *r, uint8_t *dst)
{
    uint8_t *p = write_head(r, dst);
    if (r->streams_len)
        memcpy(p, r->streams, r->streams_len);
    p += r->streams_len;
    rec_trailer(dst, (size_t)(p - dst), p);
}

void skv_rec_seal(uint8_t *buf, size_t len)
{
    if (len >= SKV_REC_HEADER + SKV_REC_TRAILER)
        rec_trailer(buf, len - SKV_REC_TRAILER, buf + len - SKV_REC_TRAILER);
}

int skv_rec_parse(const uint8_t *buf, size_t len, skv_rec *r)
{
    return skv_rec_parse_ex(buf, len, 1, r);
}

/* A record of a version before the current one (FORMAT 7 or before):
 * refused, never read */
static int rec_old(uint16_t ver)
{
    return skv_error(SKV_ERR_VERSION, "chunk record version %u: this build reads only version %u", ver,
                     SKV_REC_VERSION);
}

/* The header's fields into r, range-checked (ver: its version bytes) */
static int rec_fields(const uint8_t *buf, uint16_t ver, skv_rec *r)
{
    if (skv_load32_le(buf) != SKV_REC_MAGIC)
        return skv_error(SKV_ERR_FORMAT, "not a chunk record (bad magic)");
    if (ver > SKV_REC_VERSION)
        return skv_error(SKV_ERR_VERSION, "chunk record version %u is newer than %u", ver,
                         SKV_REC_VERSION);
    if (ver == 0)
        return skv_error(SKV_ERR_FORMAT, "chunk record version 0");
    if (ver < SKV_REC_VERSION)
        return rec_old(ver);
    r->version = ver;
    r->level = buf[6];
    r->flags = buf[7];
    if (r->level > SEQKV_LOSSY || (r->flags & ~31u) ||
        ((r->flags & SKV_REC_CONTENT) && !(r->flags & SKV_REC_CENTROID)))
        return skv_error(SKV_ERR_FORMAT, "chunk record with level %u flags %#x", r->level, r->flags);
    r->tenant = skv_load64_le(buf + 8);
    memcpy(r->profile, buf + 16, 32);
    memcpy(r->parent, buf + 48, 32);
    memcpy(r->base, buf + 80, 32);
    memcpy(r->centroid, buf + 112, 32);
    memcpy(r->calib, buf + 144, 16);
    r->chunk_index = skv_load32_le(buf + 160);
    r->n = skv_load32_le(buf + 164);
    r->lo = skv_load32_le(buf + 168);
    r->nstreams = skv_load32_le(buf + 172);
    r->side_len = skv_load32_le(buf + 176);
    r->checksum = skv_load64_le(buf + 184);
    if (r->n == 0 || r->n > SEQKV_CHUNK_MAX || r->lo >= r->n ||
        (r->lo > 0) != !!(r->flags & SKV_REC_BASE) || r->nstreams > 2 * 4096)
        return skv_error(SKV_ERR_FORMAT, "chunk record fields out of range (n %u lo %u streams %u)",
                         r->n, r->lo, r->nstreams);
    return SKV_OK;
}

/* The body's parts from p (just after the header) into r -- tokens,
 * surprisal, side info, stream sizes -- and the streams' sizes checked to
 * add up to streams_len; r->streams: where they would start */
static int rec_body(const uint8_t *p, size_t streams_len, skv_rec *r)
{
    r->tokens = p;
    p += (size_t)r->n * 4;
    if (r->flags & SKV_REC_SURPRISAL) {
        r->surprisal = p;
        p += (size_t)r->n * 4;
    }
    r->side = r->side_len ? p : NULL;
    p += r->side_len;
    r->sizes = p;
    size_t tot = 0;
    for (uint32_t i = 0; i < r->nstreams; i++) {
        size_t s = skv_load32_le(r->sizes + 4 * (size_t)i);
        if (s > streams_len - tot)
            return skv_error(SKV_ERR_FORMAT, "chunk record stream %u overruns the record", i);
        tot += s;
    }
    if (tot != streams_len)
        return skv_error(SKV_ERR_FORMAT, "chunk record has %zu bytes after its streams",
                         streams_len - tot);
    r->streams = p + (size_t)r->nstreams * 4;
    r->streams_len = tot;
    return SKV_OK;
}

int skv_rec_parse_head(const uint8_t *buf, size_t len, size_t streams_len, skv_rec *r)
{
    memset(r, 0, sizeof *r);
    if (len < SKV_REC_HEADER)
        return skv_error(SKV_ERR_FORMAT, "chunk record head of %zu bytes is too short", len);
    int rc = rec_fields(buf, skv_load16_le(buf + 4), r);
    if (rc)
        return rc;
    size_t need = (size_t)r->n * 4 * ((r->flags & SKV_REC_SURPRISAL) ? 2 : 1) + r->side_len +
                  (size_t)r->nstreams * 4;
    if (need != len - SKV_REC_HEADER)
        return skv_error(SKV_ERR_FORMAT, "chunk record head of %zu bytes for %zu", len,
                         SKV_REC_HEADER + need);
    if ((rc = rec_body(buf + SKV_REC_HEADER, streams_len, r)))
        return rc;
    r->streams = NULL; /* (elsewhere: box 1) */
    return SKV_OK;
}

int skv_rec_parse_ex(const uint8_t *buf, size_t len, int verify, skv_rec *r)
{
    memset(r, 0, sizeof *r);
    if (len < SKV_REC_HEADER + SKV_REC_TRAILER)
        return skv_error(SKV_ERR_FORMAT, "chunk record of %zu bytes is too short", len);
    /* the checksum first: a flipped byte anywhere, magic and version
     * included, is damage (SKV_ERR_CORRUPT), not a format question -- but
     * for a record of version 1, whose trailer was another hash (BLAKE2b-
     * 128): it is refused for its version, whatever its trailer */
    uint16_t ver = skv_load16_le(buf + 4);
    if (verify) {
        uint8_t sum[SKV_REC_TRAILER];
        rec_trailer(buf, len - SKV_REC_TRAILER, sum);
        if (memcmp(sum, buf + len - SKV_REC_TRAILER, SKV_REC_TRAILER) != 0)
            return ver > 0 && ver < SKV_REC_VERSION && skv_load32_le(buf) == SKV_REC_MAGIC
                       ? rec_old(ver)
                       : skv_error(SKV_ERR_CORRUPT, "chunk record checksum mismatch");
    }
    int rc = rec_fields(buf, ver, r);
    if (rc)
        return rc;
    size_t body = len - SKV_REC_HEADER - SKV_REC_TRAILER, need = (size_t)r->n * 4;
    if (r->flags & SKV_REC_SURPRISAL)
        need += (size_t)r->n * 4;
    if (need > body || r->side_len > body - need || (size_t)r->nstreams * 4 > body - need - r->side_len)
        return skv_error(SKV_ERR_FORMAT, "chunk record sizes exceed its %zu bytes", len);
    const size_t meta = need + r->side_len + (size_t)r->nstreams * 4;
    return rec_body(buf + SKV_REC_HEADER, body - meta, r);
}
