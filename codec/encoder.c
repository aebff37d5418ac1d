/* The encoder's public face (skv_codec.h): its life, its settings, the
 * checks and room for each put, and the choice between the stream
 * versions' encoders (serial, version 1: enc_queue.c; grouped, version
 * 2: enc_groups.c). */
#include <math.h>

#include "stream_int.h"

int skv_encoder_create(skv_cmodel *m, skv_encoder **out)
{
    *out = NULL;
    skv__plain_init();
    skv_encoder *e = skv_calloc(1, sizeof *e);
    if (!e || !rcache_grow(&e->rc, RCACHE_MIN)) {
        skv_free(e);
        return skv_error(SKV_ERR_NOMEM, "encoder");
    }
    e->m = m;
    e->ideal_on = 1;
    e->version_on = 1;
    e->states_on = SKV_V2_STATES;
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
    skv_free(e->q2);
    skv_free(e->raw2);
    skv_free(e->pk2.mem);
    rcache_free(&e->rc);
    skv_free(e);
}

const skv_rcache *skv__encoder_rcache(const skv_encoder *e)
{
    return &e->rc;
}

void skv_encoder_reset(skv_encoder *e, const uint8_t calib_id[16])
{
    skv_encoder_reset_atoms(e, calib_id, NULL);
}

void skv_encoder_reset_atoms(skv_encoder *e, const uint8_t calib_id[16], const skv_atoms *atoms)
{
    e->atoms = atoms;
    e->nops = 0;
    e->n = 0;
    e->ideal = 0;
    e->ideal_now = e->ideal_on;
    fcache_start(&e->fc, e->m->lat.dt);
    rcache_clear(&e->rc);
    e->rc.off = e->rc_off;
    e->h = 0x243f6a8885a308d3ull;
    e->version = e->version_on;
    e->states = e->states_on;
    if (e->raw2) /* the raw bit stream is ORed into zeros */
        memset(e->raw2, 0, (size_t)(e->rbits2 / 8) + 16 < e->raw2cap ? (size_t)(e->rbits2 / 8) + 16 : e->raw2cap);
    e->nq2 = 0;
    e->rbits2 = 0;
    for (int l = 0; l < SKV_V2_STATES; l++)
        e->acc[l] = V2_ACC0;
    if (calib_id)
        memcpy(e->calib, calib_id, 16);
    else
        memset(e->calib, 0, 16);
}

/* p (holding *cap elements of size sz) grown to hold need, its capacity
 * doubled from 4096: the block, or NULL when memory fails (p is then
 * unchanged, and so is *cap) */
static void *grow(void *p, size_t *cap, size_t need, size_t sz)
{
    if (need <= *cap && p)
        return p;
    size_t nc = *cap ? 2 * *cap : 4096;
    while (nc < need)
        nc *= 2;
    void *q = skv_realloc(p, nc * sz);
    if (q)
        *cap = nc;
    return q;
}

/* put_n's checks and queue room for n more scalars */
static int put_room(skv_encoder *e, size_t n)
{
    if (e->atoms && e->atoms->dt != e->m->lat.dt)
        return skv_error(SKV_ERR_ARG, "atoms of %s for a model of %s", skv_dtype_name(e->atoms->dt),
                         skv_dtype_name(e->m->lat.dt));
    if (n > SKV_STREAM_MAX_SCALARS - e->n)
        return skv_error(SKV_ERR_TOO_LARGE, "stream holds at most %u scalars", SKV_STREAM_MAX_SCALARS);
    /* version 2 queues version 1's operations for at most two partial
     * groups at a time (the one waiting and the one being put) */
    size_t nq = e->version == 2 ? 16 : n;
    uint64_t *o = grow(e->ops, &e->cap, e->nops + SKV_MAX_OPS * nq, sizeof *o);
    if (!o)
        return skv_error(SKV_ERR_NOMEM, "encoder ops");
    e->ops = o;
    if (e->version == 2) { /* at most 3 table symbols and 32 plain bits a scalar */
        uint64_t *q = grow(e->q2, &e->q2cap, e->nq2 + 3 * n + 24, sizeof *q);
        if (!q)
            return skv_error(SKV_ERR_NOMEM, "encoder ops");
        e->q2 = q;
        size_t had = e->raw2cap;
        uint8_t *r = grow(e->raw2, &e->raw2cap, (size_t)(e->rbits2 / 8) + 4 * (n + 16) + 16, 1);
        if (!r)
            return skv_error(SKV_ERR_NOMEM, "encoder ops");
        e->raw2 = r;
        if (e->raw2cap > had) /* the raw bit stream is ORed into zeros */
            memset(e->raw2 + had, 0, e->raw2cap - had);
    }
    return SKV_OK;
}

/* n scalars, with the classes of their row given (or NULL: found here) */
static int put_n_given(skv_encoder *e, const uint32_t *x, const float *mu, const float *s, size_t n,
                       const skv_fcls *given)
{
    return e->version == 2 ? skv__enc_groups_put(e, x, mu, s, n, given) : skv__enc_queue_put(e, x, mu, s, n, given);
}

int skv_encoder_put_n(skv_encoder *e, const uint32_t *x, const float *mu, const float *s, size_t n)
{
    int rc = put_room(e, n);
    return rc ? rc : put_n_given(e, x, mu, s, n, NULL);
}

int skv_encoder_put_rows(skv_encoder *e, const uint32_t *x, const float *mu, const float *s,
                         size_t n, size_t rows)
{
    if (n == 0 || rows == 0)
        return SKV_OK;
    if (rows > SKV_STREAM_MAX_SCALARS / n)
        return skv_error(SKV_ERR_TOO_LARGE, "stream holds at most %u scalars", SKV_STREAM_MAX_SCALARS);
    int rc = put_room(e, n * rows);
    if (rc)
        return rc;
    /* the row's classes once (the row cache), then every row with them */
    const skv_fcls *row = NULL;
    if (rcache_on(&e->rc, n)) {
        if (!(row = rcache_get(e->m, &e->m->lat, &e->rc, mu, s, n)))
            return skv_error(SKV_ERR_NOMEM, "codec table"); /* nothing queued */
    }
    for (size_t r = 0; r < rows && !rc; r++)
        rc = put_n_given(e, x + r * n, mu, s, n, row);
    return rc;
}

int skv_encoder_put(skv_encoder *e, uint32_t x, float mu, float s)
{
    return skv_encoder_put_n(e, &x, &mu, &s, 1);
}

double skv_encoder_ideal_bits(const skv_encoder *e)
{
    return e->ideal_now ? e->ideal : NAN;
}

void skv_encoder_set_row_cache(skv_encoder *e, int on)
{
    e->rc_off = !on;
}

void skv_encoder_set_ideal(skv_encoder *e, int on)
{
    e->ideal_on = on != 0;
}

int skv_encoder_set_version(skv_encoder *e, int version)
{
    if (version != 1 && version != 2)
        return skv_error(SKV_ERR_ARG, "stream version %d: 1 or 2", version);
    e->version_on = version;
    return SKV_OK;
}

int skv_encoder_set_states(skv_encoder *e, int states)
{
    if (states != 8 && states != 16)
        return skv_error(SKV_ERR_ARG, "stream version 2 has 8 or 16 states, not %d", states);
    e->states_on = states;
    return SKV_OK;
}

size_t skv_encoder_bound(const skv_encoder *e)
{
    if (e->version == 2) /* the states; a word a table symbol; the raw bits; a waiting group */
        return SKV_STREAM_HEADER + 4 * (size_t)e->states + 2 * e->nq2 + (size_t)(e->rbits2 / 8) + 1 +
               4 * e->nops + 8;
    return SKV_STREAM_HEADER + 16 + 2 * e->nops;
}

int skv_encoder_finish(skv_encoder *e, uint8_t *dst, size_t cap, size_t *len)
{
    *len = 0;
    return e->version == 2 ? skv__enc_groups_finish(e, dst, cap, len) : skv__enc_serial_finish(e, dst, cap, len);
}
