/* Coded streams: the interleaved rANS coder and the stream container.
 *
 * rANS with 32-bit states, 16-bit renormalisation words and four states
 * used round-robin by operation index (op i uses state i mod 4). The
 * encoder queues every scalar's operations, then codes them in reverse;
 * the decoder reads the four final states and then the words in order,
 * checking every read against the end of the payload. */
#include <string.h>

#include "codec_int.h"

#define RANS_L (1u << 16)

/* ---- checksums ----------------------------------------------------------- */

static inline uint64_t mix_in(uint64_t h, uint64_t v)
{
    h = (h + v + 1) * 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 29);
}

uint64_t skv_checksum64(const void *data, size_t len, uint64_t seed)
{
    const uint8_t *p = data;
    uint64_t h = seed ^ 0x243f6a8885a308d3ull;
    size_t i = 0;
    for (; i + 8 <= len; i += 8)
        h = mix_in(h, skv_load64_le(p + i));
    uint64_t t = 0;
    for (size_t k = 0; i < len; i++, k++)
        t |= (uint64_t)p[i] << (8 * k);
    h = mix_in(h, t ^ ((uint64_t)len << 56));
    return h ^ (h >> 32);
}

/* ---- encoder ----------------------------------------------------------------- */

struct skv_encoder {
    skv_cmodel *m;
    skv_op *ops;
    size_t nops, cap;
    uint32_t n;
    uint64_t h;
    double ideal;
    uint8_t calib[16];
    uint16_t *words;
    size_t wcap;
    skv_cls_cache cc;
};

int skv_encoder_create(skv_cmodel *m, skv_encoder **out)
{
    *out = NULL;
    skv_encoder *e = skv_calloc(1, sizeof *e);
    if (!e)
        return skv_error(SKV_ERR_NOMEM, "encoder");
    e->m = m;
    skv_encoder_reset(e, NULL);
    *out = e;
    return SKV_OK;
}

void skv_encoder_free(skv_encoder *e)
{
    if (!e)
        return;
    skv_free(e->ops);
    skv_free(e->words);
    skv_free(e);
}

void skv_encoder_reset(skv_encoder *e, const uint8_t calib_id[16])
{
    e->nops = 0;
    e->n = 0;
    skv__cls_cache_clear(&e->cc);
    e->ideal = 0;
    e->h = 0x243f6a8885a308d3ull;
    if (calib_id)
        memcpy(e->calib, calib_id, 16);
    else
        memset(e->calib, 0, 16);
}

int skv_encoder_put(skv_encoder *e, uint32_t x, float mu, float s)
{
    if (e->n >= SKV_STREAM_MAX_SCALARS)
        return skv_error(SKV_ERR_TOO_LARGE, "stream holds at most %u scalars", SKV_STREAM_MAX_SCALARS);
    if (e->nops + SKV_MAX_OPS > e->cap) {
        size_t nc = e->cap ? 2 * e->cap : 4096;
        skv_op *o = skv_realloc(e->ops, nc * sizeof *o);
        if (!o)
            return skv_error(SKV_ERR_NOMEM, "encoder ops");
        e->ops = o;
        e->cap = nc;
    }
    x &= e->m->lat.nbits == 32 ? 0xffffffffu : ((1u << e->m->lat.nbits) - 1u);
    skv_cls c;
    int rc = skv__classify_cached(e->m, &e->cc, mu, s, &c);
    if (rc)
        return rc;
    int k = skv__plan(e->m, &c, x, e->ops + e->nops);
    for (int i = 0; i < k; i++)
        e->ideal += (double)e->ops[e->nops + (size_t)i].lp;
    e->nops += (size_t)k;
    e->h = mix_in(e->h, x);
    e->n++;
    return SKV_OK;
}

double skv_encoder_ideal_bits(const skv_encoder *e)
{
    return e->ideal;
}

size_t skv_encoder_bound(const skv_encoder *e)
{
    return SKV_STREAM_HEADER + 16 + 2 * e->nops;
}

static uint64_t final_checksum(uint64_t h, uint32_t n)
{
    h = mix_in(h, n);
    return h ^ (h >> 32);
}

int skv_encoder_finish(skv_encoder *e, uint8_t *dst, size_t cap, size_t *len)
{
    *len = 0;
    if (e->wcap < e->nops + 1) {
        uint16_t *w = skv_realloc(e->words, (e->nops + 1) * sizeof *w);
        if (!w)
            return skv_error(SKV_ERR_NOMEM, "encoder words");
        e->words = w;
        e->wcap = e->nops + 1;
    }
    uint32_t x[4] = {RANS_L, RANS_L, RANS_L, RANS_L};
    size_t nw = 0;
    for (size_t i = e->nops; i-- > 0;) {
        const skv_op *o = &e->ops[i];
        uint32_t *s = &x[i & 3];
        uint64_t xmax = (uint64_t)o->freq << (32 - o->bits);
        if ((uint64_t)*s >= xmax) {
            e->words[nw++] = (uint16_t)*s;
            *s >>= 16;
        }
        *s = ((*s / o->freq) << o->bits) + (*s % o->freq) + o->start;
    }
    size_t payload = 16 + 2 * nw;
    size_t total = SKV_STREAM_HEADER + payload;
    if (total > cap)
        return skv_error(SKV_ERR_TOO_LARGE, "stream needs %zu bytes, buffer has %zu", total, cap);
    if (payload > 0xffffffffu)
        return skv_error(SKV_ERR_TOO_LARGE, "stream payload over 4 GiB");
    uint8_t *p = dst;
    memset(p, 0, SKV_STREAM_HEADER);
    skv_store32_le(p, SKV_STREAM_MAGIC);
    skv_store16_le(p + 4, SKV_STREAM_VERSION);
    p[6] = (uint8_t)e->m->lat.dt;
    skv_store32_le(p + 8, e->n);
    skv_store32_le(p + 12, (uint32_t)payload);
    skv_store32_le(p + 16, e->m->id);
    skv_store64_le(p + 24, final_checksum(e->h, e->n));
    memcpy(p + 32, e->calib, 16);
    p += SKV_STREAM_HEADER;
    for (int k = 0; k < 4; k++)
        skv_store32_le(p + 4 * k, x[k]);
    p += 16;
    for (size_t i = 0; i < nw; i++)
        skv_store16_le(p + 2 * i, e->words[nw - 1 - i]);
    *len = total;
    return SKV_OK;
}

/* ---- container ------------------------------------------------------------- */

int skv_stream_info_read(const uint8_t *src, size_t len, skv_stream_info *info)
{
    if (len < SKV_STREAM_HEADER)
        return skv_error(SKV_ERR_FORMAT, "stream: %zu bytes, shorter than its %d-byte header", len,
                         SKV_STREAM_HEADER);
    if (skv_load32_le(src) != SKV_STREAM_MAGIC)
        return skv_error(SKV_ERR_FORMAT, "stream: bad magic 0x%08x", skv_load32_le(src));
    unsigned ver = skv_load16_le(src + 4);
    if (ver > SKV_STREAM_VERSION)
        return skv_error(SKV_ERR_VERSION, "stream: version %u, this build reads up to %d", ver,
                         SKV_STREAM_VERSION);
    if (ver == 0)
        return skv_error(SKV_ERR_FORMAT, "stream: version 0");
    skv_lat L;
    if (src[6] > SKV_DT_F8E4M3 || skv__lat_init(&L, (skv_dtype)src[6]))
        return skv_error(SKV_ERR_FORMAT, "stream: bad dtype %u", src[6]);
    if (src[7] != 0 || skv_load32_le(src + 20) != 0)
        return skv_error(SKV_ERR_FORMAT, "stream: reserved header fields are not zero");
    info->dtype = (skv_dtype)src[6];
    info->n = skv_load32_le(src + 8);
    info->payload = skv_load32_le(src + 12);
    info->cmodel_id = skv_load32_le(src + 16);
    info->checksum = skv_load64_le(src + 24);
    memcpy(info->calib_id, src + 32, 16);
    if (info->n > SKV_STREAM_MAX_SCALARS)
        return skv_error(SKV_ERR_TOO_LARGE, "stream: %u scalars exceeds the limit", info->n);
    if (info->payload < 16 || (info->payload & 1))
        return skv_error(SKV_ERR_FORMAT, "stream: payload size %u is impossible", info->payload);
    if ((uint64_t)SKV_STREAM_HEADER + info->payload > len)
        return skv_error(SKV_ERR_RANGE, "stream: truncated: header says %u payload bytes, %zu present",
                         info->payload, len - SKV_STREAM_HEADER);
    return SKV_OK;
}

/* ---- decoder ------------------------------------------------------------------ */

struct skv_decoder {
    skv_cmodel *m;
    const uint8_t *w, *wend; /* 16-bit words */
    uint32_t x[4];
    size_t op;               /* operations decoded so far */
    uint32_t n, got;
    uint64_t h, want;
    int bad;                 /* sticky: a read past the end or an impossible symbol */
    skv_cls_cache cc;
};

int skv_decoder_create(skv_cmodel *m, skv_decoder **out)
{
    *out = skv_calloc(1, sizeof **out);
    if (!*out)
        return skv_error(SKV_ERR_NOMEM, "decoder");
    (*out)->m = m;
    return SKV_OK;
}

void skv_decoder_free(skv_decoder *d)
{
    skv_free(d);
}

int skv_decoder_begin(skv_decoder *d, const uint8_t *src, size_t len, skv_stream_info *info)
{
    skv_stream_info tmp;
    if (!info)
        info = &tmp;
    int rc = skv_stream_info_read(src, len, info);
    if (rc)
        return rc;
    if (info->dtype != d->m->lat.dt)
        return skv_error(SKV_ERR_SHAPE, "stream holds %s, the model codes %s",
                         skv_dtype_name(info->dtype), skv_dtype_name(d->m->lat.dt));
    if (info->cmodel_id != d->m->id)
        return skv_error(SKV_ERR_CORRUPT, "stream was coded with tables %08x, these are %08x",
                         info->cmodel_id, d->m->id);
    const uint8_t *p = src + SKV_STREAM_HEADER;
    for (int k = 0; k < 4; k++) {
        d->x[k] = skv_load32_le(p + 4 * k);
        if (d->x[k] < RANS_L)
            return skv_error(SKV_ERR_CORRUPT, "stream: rANS state %d out of range", k);
    }
    d->w = p + 16;
    d->wend = p + info->payload;
    d->op = 0;
    d->n = info->n;
    d->got = 0;
    d->h = 0x243f6a8885a308d3ull;
    d->want = info->checksum;
    d->bad = 0;
    skv__cls_cache_clear(&d->cc);
    return SKV_OK;
}

/* Decode one operation of 2^bits total; returns the slot and lets the
 * caller map it to (start, freq). */
static inline uint32_t peek(skv_decoder *d, int bits)
{
    return d->x[d->op & 3] & ((1u << bits) - 1u);
}

static inline void advance(skv_decoder *d, uint32_t start, uint32_t freq, int bits)
{
    uint32_t *s = &d->x[d->op & 3];
    uint32_t slot = *s & ((1u << bits) - 1u);
    *s = freq * (*s >> bits) + slot - start;
    if (*s < RANS_L) {
        if (d->w + 2 > d->wend) {
            d->bad = 1;
            *s = RANS_L; /* keep going safely; the error is reported */
        } else {
            *s = (*s << 16) | skv_load16_le(d->w);
            d->w += 2;
        }
    }
    d->op++;
}

static inline uint32_t get_sym(skv_decoder *d, const skv_ftab *t)
{
    uint32_t slot = peek(d, SKV_CODEC_PREC);
    uint32_t sym = skv__find(t, slot);
    advance(d, t->cum[sym], t->cum[sym + 1] - t->cum[sym], SKV_CODEC_PREC);
    return sym;
}

static inline uint32_t get_raw(skv_decoder *d, int nb)
{
    uint32_t v = 0;
    while (nb > 0) {
        int b = nb > 16 ? 16 : nb;
        nb -= b;
        uint32_t slot = peek(d, b);
        advance(d, slot, 1, b);
        v |= slot << nb;
    }
    return v;
}

int skv_decoder_get(skv_decoder *d, float mu, float s, uint32_t *out)
{
    if (d->got >= d->n)
        return skv_error(SKV_ERR_ARG, "stream holds %u scalars; asked for more", d->n);
    skv_cmodel *m = d->m;
    const skv_lat *L = &m->lat;
    skv_cls c;
    int rc = skv__classify_cached(m, &d->cc, mu, s, &c);
    if (rc)
        return rc;
    const skv_ftab *t = c.tab;
    uint32_t sym = get_sym(d, t), x = 0;
    if (sym == t->n - 1) {
        uint32_t hi = get_sym(d, &m->pemp);
        uint32_t lo = L->nbits > 8 ? get_raw(d, L->nbits - 8) : 0;
        x = (hi << (L->nbits - 8)) | lo;
    } else if (!c.bucket) {
        int64_t o = skv__ordinal(L, c.c) + (int64_t)sym - t->R;
        int64_t top = (int64_t)L->inf_mag - 1;
        if (o > top || o < -top - 1)
            d->bad = 1;
        else
            x = skv__from_ordinal(L, o);
    } else {
        int64_t kb = c.b0 + (int64_t)sym - t->R;
        uint32_t sign = kb < 0 ? L->sign : 0;
        uint64_t j = kb < 0 ? (uint64_t)(-1 - kb) : (uint64_t)kb;
        uint32_t lo, hi;
        if (j > 0) {
            lo = skv__ceil_lat(L, j, c.G);
            hi = skv__ceil_lat(L, j + 1, c.G);
        } else {
            uint32_t lvl = get_sym(d, &m->zero);
            skv__zero_range(L, c.G, (int)lvl, &lo, &hi);
        }
        if (hi <= lo) {
            d->bad = 1;
        } else {
            uint32_t idx = get_raw(d, skv__bits_for((uint64_t)hi - lo));
            if (idx >= hi - lo || lo + idx >= L->inf_mag)
                d->bad = 1;
            else
                x = sign | (lo + idx);
        }
    }
    if (d->bad)
        return skv_error(SKV_ERR_CORRUPT, "stream: corrupted at scalar %u", d->got);
    d->h = mix_in(d->h, x);
    d->got++;
    *out = x;
    return SKV_OK;
}

int skv_decoder_end(skv_decoder *d)
{
    if (d->got != d->n)
        return skv_error(SKV_ERR_ARG, "stream: %u of %u scalars decoded", d->got, d->n);
    if (d->bad || d->w != d->wend)
        return skv_error(SKV_ERR_CORRUPT, "stream: %td payload bytes left over",
                         (ptrdiff_t)(d->wend - d->w));
    for (int k = 0; k < 4; k++)
        if (d->x[k] != RANS_L)
            return skv_error(SKV_ERR_CORRUPT, "stream: rANS state %d did not return to its start", k);
    if (final_checksum(d->h, d->n) != d->want)
        return skv_error(SKV_ERR_CORRUPT, "stream: checksum of the decoded scalars does not match");
    return SKV_OK;
}
