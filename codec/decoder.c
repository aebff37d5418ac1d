/* The decoder's public face (skv_codec.h): its life, a stream's begin and
 * end checks, and the choice between the stream versions' decoders
 * (dec_serial.c, dec_groups.c, dec_groups_avx2.c). */
#include "stream_int.h"

int skv_decoder_create(skv_cmodel *m, skv_decoder **out)
{
    *out = NULL;
    skv_decoder *d = skv_calloc(1, sizeof *d);
    if (!d || !rcache_grow(&d->rc, RCACHE_MIN)) {
        skv_free(d);
        return skv_error(SKV_ERR_NOMEM, "decoder");
    }
    d->m = m;
    *out = d;
    return SKV_OK;
}

const skv_rcache *skv__decoder_rcache(const skv_decoder *d)
{
    return &d->rc;
}

uint64_t skv__decoder_fast_groups(const skv_decoder *d)
{
    return d->nfast;
}

uint64_t skv__decoder_phase_groups(const skv_decoder *d)
{
#ifdef SKV_HAVE_CLS8
    return d->pk.nb;
#else
    (void)d;
    return 0;
#endif
}

void skv_decoder_free(skv_decoder *d)
{
    if (d) {
        rcache_free(&d->rc);
        skv_free(d->pk.mem);
    }
    skv_free(d);
}

void skv_decoder_set_row_cache(skv_decoder *d, int on)
{
    d->rc_off = !on;
}

int skv_decoder_begin(skv_decoder *d, const uint8_t *src, size_t len, skv_stream_info *info)
{
    return skv_decoder_begin_atoms(d, src, len, NULL, info);
}

int skv_decoder_begin_atoms(skv_decoder *d, const uint8_t *src, size_t len, const skv_atoms *atoms,
                            skv_stream_info *info)
{
    skv_stream_info tmp;
    if (!info)
        info = &tmp;
    d->pairok = 0;
    int rc = skv_stream_info_read(src, len, info);
    if (rc)
        return rc;
    if (info->dtype != d->m->lat.dt)
        return skv_error(SKV_ERR_SHAPE, "stream holds %s, the model codes %s",
                         skv_dtype_name(info->dtype), skv_dtype_name(d->m->lat.dt));
    if (atoms && atoms->dt != d->m->lat.dt)
        return skv_error(SKV_ERR_ARG, "atoms of %s for a model of %s", skv_dtype_name(atoms->dt),
                         skv_dtype_name(d->m->lat.dt));
    uint32_t want_id = skv_stream_model_id(d->m, atoms);
    if (info->cmodel_id != want_id)
        return skv_error(SKV_ERR_CORRUPT, "stream was coded with tables %08x, these are %08x",
                         info->cmodel_id, want_id);
    d->atoms = atoms;
    const uint8_t *p = src + SKV_STREAM_HEADER;
    d->version = info->version;
    if (info->version == 2) {
        d->states = info->states;
        for (int l = 0; l < SKV_V2_STATES; l++) { /* eight states: the second bank mirrors the first */
            d->x2[l] = skv_load32_le(p + 4 * (l & (int)(d->states - 1)));
            d->acc[l] = V2_ACC0;
            if (d->x2[l] < RANS_L)
                return skv_error(SKV_ERR_CORRUPT, "stream: rANS state %d out of range", l);
        }
        d->w = p + 4 * d->states;
        d->wend = p + info->payload - info->raw;
        d->rb = d->wend;
        d->rpos = 0;
        d->rbits = 8 * (uint64_t)info->raw;
        d->fast2 = skv__groups_avx2_ok(d->m);
        d->pk.row = NULL; /* the row cache starts empty */
    } else {
        for (int k = 0; k < 4; k++) {
            d->x[k] = skv_load32_le(p + 4 * k);
            if (d->x[k] < RANS_L)
                return skv_error(SKV_ERR_CORRUPT, "stream: rANS state %d out of range", k);
        }
        d->w = p + 16;
        d->wend = p + info->payload;
    }
    d->n = info->n;
    d->got = 0;
    d->h = 0x243f6a8885a308d3ull;
    d->want = info->checksum;
    d->bad = 0;
    fcache_start(&d->fc, d->m->lat.dt);
    rcache_clear(&d->rc);
    d->rc.off = d->rc_off;
    /* get_pair_v2's streams: version 2 on the AVX2 path, eight states, no
     * atoms, the row cache off (the rows are packed as they come) */
    d->pairok = d->version == 2 && d->fast2 && !d->atoms && d->states == 8 && d->rc_off;
    return SKV_OK;
}

static int get_n_given(skv_decoder *d, const float *mu, const float *s, uint32_t *x, size_t n,
                       const skv_fcls *given)
{
    if (d->version == 2) {
        size_t done;
        return skv__dec_groups_rows(d, mu, s, x, n, given, 1, 0, 0, &done);
    }
    return skv__dec_serial_get(d, mu, s, x, n, given);
}

int skv_decoder_get_n(skv_decoder *d, const float *mu, const float *s, uint32_t *x, size_t n)
{
    if (n > d->n - d->got)
        return skv_error(SKV_ERR_ARG, "stream holds %u scalars; asked for %zu more after %u", d->n,
                         n, d->got);
    if (d->bad)
        return skv_error(SKV_ERR_CORRUPT, "stream: corrupted at scalar %u", d->got);
    return get_n_given(d, mu, s, x, n, NULL);
}

int skv_decoder_get_n2(skv_decoder *const d[2], const float *const mu[2], const float *const s[2],
                       uint32_t *const x[2], size_t n)
{
    for (int k = 0; k < 2; k++) {
        if (n > d[k]->n - d[k]->got)
            return skv_error(SKV_ERR_ARG, "stream holds %u scalars; asked for %zu more after %u", d[k]->n, n,
                             d[k]->got);
        if (d[k]->bad)
            return skv_error(SKV_ERR_CORRUPT, "stream: corrupted at scalar %u", d[k]->got);
    }
#ifdef SKV_HAVE_CLS8
    if (skv__groups_avx2_pair_ok(d, n)) {
        int rc = skv__groups_avx2_get_pair(d, mu, s, x, n);
        if (rc != 1)
            return rc; /* (else one stream after the other) */
    }
#endif
    int rc = get_n_given(d[0], mu[0], s[0], x[0], n, NULL);
    return rc ? rc : get_n_given(d[1], mu[1], s[1], x[1], n, NULL);
}

int skv_decoder_get_rows(skv_decoder *d, const float *mu, const float *s, size_t n, size_t rows,
                         uint32_t big, uint32_t *x, size_t *done)
{
    *done = 0;
    if (n == 0 || rows == 0)
        return SKV_OK;
    if (rows > (d->n - d->got) / n)
        return skv_error(SKV_ERR_ARG, "stream holds %u scalars; asked for %zu rows of %zu after %u",
                         d->n, rows, n, d->got);
    if (d->bad)
        return skv_error(SKV_ERR_CORRUPT, "stream: corrupted at scalar %u", d->got);
    const skv_fcls *row = NULL;
    if (rcache_on(&d->rc, n) && !(row = rcache_get(d->m, &d->m->lat, &d->rc, mu, s, n)))
        return skv_error(SKV_ERR_NOMEM, "codec table"); /* nothing decoded */
    const uint32_t mag = d->m->lat.sign - 1u; /* a magnitude's bits; none is above it */
    if (d->version == 2 && n % 8 == 0)
        return skv__dec_groups_rows(d, mu, s, x, n, row, rows, mag, big, done);
    for (size_t r = 0; r < rows; r++) {
        uint32_t *xr = x + r * n;
        int rc = get_n_given(d, mu, s, xr, n, row);
        if (rc)
            return rc;
        *done = r + 1;
        if (big < mag && skv_any_above32(xr, n, mag, big))
            break;
    }
    return SKV_OK;
}

int skv_decoder_get(skv_decoder *d, float mu, float s, uint32_t *out)
{
    return skv_decoder_get_n(d, &mu, &s, out, 1);
}

int skv_decoder_end(skv_decoder *d)
{
    if (d->got != d->n)
        return skv_error(SKV_ERR_ARG, "stream: %u of %u scalars decoded", d->got, d->n);
    if (d->version == 2) {
        if (d->bad || d->w != d->wend)
            return skv_error(SKV_ERR_CORRUPT, "stream: %td payload bytes left over",
                             (ptrdiff_t)(d->wend - d->w));
        /* the raw bit stream: consumed but for the zero bits of its last byte */
        if (d->rbits - d->rpos >= 8 || (d->rpos < d->rbits && (d->rb[d->rpos >> 3] >> (d->rpos & 7))))
            return skv_error(SKV_ERR_CORRUPT, "stream: raw bits left over");
        for (uint32_t l = 0; l < d->states; l++)
            if (d->x2[l] != RANS_L)
                return skv_error(SKV_ERR_CORRUPT, "stream: rANS state %u did not return to its start", l);
        uint64_t h = 0x243f6a8885a308d3ull;
        for (int l = 0; l < SKV_V2_STATES; l++)
            h = mix_in(h, d->acc[l]);
        if (final_checksum(h, d->n) != d->want)
            return skv_error(SKV_ERR_CORRUPT, "stream: checksum of the decoded scalars does not match");
        return SKV_OK;
    }
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
