/* Helpers shared by the codec suites (test_codec_*.c): see codecutil.h. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codecutil.h"
#include "skv_codec.h"

const seqkv_dtype DTYPES[4] = {SEQKV_DT_BF16, SEQKV_DT_F16, SEQKV_DT_F8E4M3, SEQKV_DT_F32};

int nbits(seqkv_dtype dt)
{
    return dt == SEQKV_DT_F32 ? 32 : dt == SEQKV_DT_F8E4M3 ? 8 : 16;
}

uint32_t width_mask(seqkv_dtype dt)
{
    return dt == SEQKV_DT_F32 ? 0xffffffffu : (1u << nbits(dt)) - 1u;
}

/* first magnitude code that is not finite (fp8: the NaN 0x7f) */
uint32_t inf_mag(seqkv_dtype dt)
{
    switch (dt) {
    case SEQKV_DT_BF16: return 0x7f80;
    case SEQKV_DT_F16: return 0x7c00;
    case SEQKV_DT_F8E4M3: return 0x7f;
    default: return 0x7f800000u;
    }
}

int is_finite_bits(seqkv_dtype dt, uint32_t x)
{
    uint32_t sign = 1u << (nbits(dt) - 1);
    return (x & (sign - 1u)) < inf_mag(dt);
}

uint32_t to_dt(seqkv_dtype dt, float v)
{
    switch (dt) {
    case SEQKV_DT_BF16: return skv_f32_to_bf16(v);
    case SEQKV_DT_F16: return skv_f32_to_f16(v);
    case SEQKV_DT_F8E4M3: return skv_f32_to_f8e4m3(v);
    default: return skv_f32_bits(v);
    }
}

float from_dt(seqkv_dtype dt, uint32_t x)
{
    switch (dt) {
    case SEQKV_DT_BF16: return skv_bf16_to_f32((uint16_t)x);
    case SEQKV_DT_F16: return skv_f16_to_f32((uint16_t)x);
    case SEQKV_DT_F8E4M3: return skv_f8e4m3_to_f32((uint8_t)x);
    default: return skv_bits_f32(x);
    }
}

skv_cmodel *model_new(seqkv_dtype dt, skv_mix mix, const uint32_t *hist)
{
    skv_cmodel *m = NULL;
    int rc = skv_cmodel_create(dt, mix, hist, &m);
    cr_assert_eq(rc, 0, "cmodel_create(%s): %s (%s)", skv_dtype_name(dt), seqkv_strerror(rc),
                 seqkv_error_detail());
    cr_assert_not_null(m);
    cr_assert_eq(skv_cmodel_dtype(m), dt);
    return m;
}

void seq_init(seq_t *q, seqkv_dtype dt, size_t cap)
{
    q->dt = dt;
    q->n = 0;
    q->cap = cap ? cap : 1;
    q->x = malloc(q->cap * sizeof *q->x);
    q->mu = malloc(q->cap * sizeof *q->mu);
    q->s = malloc(q->cap * sizeof *q->s);
    cr_assert(q->x && q->mu && q->s);
}

void seq_push(seq_t *q, uint32_t x, float mu, float s)
{
    cr_assert_lt(q->n, q->cap);
    q->x[q->n] = x & width_mask(q->dt);
    q->mu[q->n] = mu;
    q->s[q->n] = s;
    q->n++;
}

void seq_free(seq_t *q)
{
    free(q->x);
    free(q->mu);
    free(q->s);
}

/* (mu, s) of scalar i; past the end (a damaged n) the sequence repeats. */
void seq_param(const seq_t *q, size_t i, float *mu, float *s)
{
    if (q->n == 0) {
        *mu = 0.0f;
        *s = 1.0f;
        return;
    }
    *mu = q->mu[i % q->n];
    *s = q->s[i % q->n];
}

/* Encode q with a fresh encoder; returns an exact-size malloc'd copy so
 * that ASan sees any read past the end of the stream. */
uint8_t *encode_with(skv_encoder *e, const seq_t *q, const uint8_t *calib, size_t *len)
{
    skv_encoder_reset(e, calib);
    for (size_t i = 0; i < q->n; i++) {
        int rc = skv_encoder_put(e, q->x[i], q->mu[i], q->s[i]);
        cr_assert_eq(rc, 0, "put #%zu: %s (%s)", i, seqkv_strerror(rc), seqkv_error_detail());
    }
    size_t cap = skv_encoder_bound(e);
    uint8_t *tmp = malloc(cap);
    cr_assert_not_null(tmp);
    int rc = skv_encoder_finish(e, tmp, cap, len);
    cr_assert_eq(rc, 0, "finish: %s (%s)", seqkv_strerror(rc), seqkv_error_detail());
    cr_assert_leq(*len, cap, "stream of %zu bytes exceeds its bound %zu", *len, cap);
    uint8_t *out = malloc(*len);
    cr_assert_not_null(out);
    memcpy(out, tmp, *len);
    free(tmp);
    return out;
}

uint8_t *encode_seq(skv_cmodel *m, const seq_t *q, const uint8_t *calib, size_t *len)
{
    skv_encoder *e = NULL;
    cr_assert_eq(skv_encoder_create(m, &e), 0);
    uint8_t *out = encode_with(e, q, calib, len);
    skv_encoder_free(e);
    return out;
}

/* Decode with q's (mu, s): the first error of begin, get (i < n; version
 * 2: get_n of each group of eight) and end, or 0. Scalars i < q->n land in out (if not NULL). Never asks for more
 * than max_get scalars (a damaged n), in which case end reports. */
int decode_with(skv_decoder *d, const uint8_t *buf, size_t len, const seq_t *q,
                uint32_t *out, skv_stream_info *info_out)
{
    const uint32_t max_get = 1u << 22;
    skv_stream_info info;
    memset(&info, 0, sizeof info);
    int rc = skv_decoder_begin(d, buf, len, &info);
    if (info_out)
        *info_out = info;
    if (rc)
        return rc;
    for (uint32_t i = 0; i < info.n && i < max_get; i += info.version == 2 ? 8 : 1) {
        /* version 2: a group of eight at a time */
        uint32_t k = info.version == 2 && info.n - i > 1 ? (info.n - i < 8 ? info.n - i : 8) : 1;
        float mu[8], s[8];
        uint32_t x[8];
        for (uint32_t j = 0; j < k; j++)
            seq_param(q, i + j, &mu[j], &s[j]);
        rc = k == 1 ? skv_decoder_get(d, mu[0], s[0], x) : skv_decoder_get_n(d, mu, s, x, k);
        if (rc)
            return rc;
        for (uint32_t j = 0; j < k; j++)
            if (out && i + j < q->n)
                out[i + j] = x[j];
    }
    return skv_decoder_end(d);
}

int decode_seq(skv_cmodel *m, const uint8_t *buf, size_t len, const seq_t *q,
               uint32_t *out, skv_stream_info *info)
{
    skv_decoder *d = NULL;
    cr_assert_eq(skv_decoder_create(m, &d), 0);
    int rc = decode_with(d, buf, len, q, out, info);
    skv_decoder_free(d);
    return rc;
}

/* Encode, decode, compare every scalar's bits. Returns the stream size. */
size_t assert_round_trip(skv_cmodel *m, const seq_t *q, const char *what)
{
    size_t len;
    uint8_t *buf = encode_seq(m, q, NULL, &len);
    uint32_t *got = malloc((q->n ? q->n : 1) * sizeof *got);
    cr_assert_not_null(got);
    skv_stream_info info;
    int rc = decode_seq(m, buf, len, q, got, &info);
    cr_assert_eq(rc, 0, "%s %s: decode failed: %s (%s)", skv_dtype_name(q->dt), what,
                 seqkv_strerror(rc), seqkv_error_detail());
    cr_assert_eq(info.n, q->n);
    cr_assert_eq(info.dtype, q->dt);
    cr_assert_eq(info.cmodel_id, skv_cmodel_id(m));
    cr_assert_eq((size_t)info.payload + SKV_STREAM_HEADER, len);
    for (size_t i = 0; i < q->n; i++)
        cr_assert_eq(got[i], q->x[i],
                     "%s %s: scalar %zu: coded 0x%x, decoded 0x%x (mu %a = %g, s %a = %g)",
                     skv_dtype_name(q->dt), what, i, q->x[i], got[i], (double)q->mu[i],
                     (double)q->mu[i], (double)q->s[i], (double)q->s[i]);
    free(got);
    free(buf);
    return len;
}

/* Log-uniform in [10^lo, 10^hi). */
float log_uniform(skv_rng *r, float lo, float hi)
{
    return powf(10.0f, lo + (hi - lo) * skv_rng_uniform(r));
}

void gold_hist(uint32_t *hist)
{
    for (uint32_t b = 0; b < 256; b++)
        hist[b] = ((37u * b) % 256u) * 16u;
}

void gold_seq(seq_t *q, int di, size_t n)
{
    seq_init(q, GOLD_DT[di], n);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t x;
        float mu, s;
        gold_input(di, i, &x, &mu, &s);
        seq_push(q, x, mu, s);
    }
}

/* Gaussian scalars around mu with s from 1e-8 to 1e4 and |mu| from 1e-10 to
 * 1e6 (and 0); one in five drawn far from mu, a few hundred-fold outliers. */
void gaussian_seq(seq_t *q, seqkv_dtype dt, size_t n, uint64_t seed)
{
    skv_rng r;
    skv_rng_seed(&r, seed);
    seq_init(q, dt, n);
    for (size_t i = 0; i < n; i++) {
        float s = log_uniform(&r, -8.0f, 4.0f);
        float mu = log_uniform(&r, -10.0f, 6.0f);
        uint64_t k = skv_rng_next(&r);
        if (k & 1)
            mu = -mu;
        if ((k >> 1) % 16 == 0)
            mu = 0.0f;
        float z = skv_rng_normal(&r);
        float v;
        switch ((k >> 8) % 10) {
        case 0: v = mu + s * z * 1000.0f; break;                  /* far: escapes */
        case 1: v = log_uniform(&r, -12.0f, 8.0f) * (z < 0 ? -1.0f : 1.0f); break; /* unrelated */
        default: v = mu + s * z; break;                           /* near */
        }
        seq_push(q, to_dt(dt, v), mu, s);
    }
}

/* Edge values per dtype (dtype bits). */
size_t edge_values(seqkv_dtype dt, uint32_t *v)
{
    static const uint32_t bf16[] = {
        0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x807f, 0x0080, 0x8080, 0x7f7f, 0xff7f,
        0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7fc5, 0x7f81, 0xff81, 0x7fff, 0xffff, 0x3f80, 0xbf80,
    };
    static const uint32_t f16[] = {
        0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x83ff, 0x0400, 0x8400, 0x7bff, 0xfbff,
        0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7e05, 0x7c01, 0xfd55, 0x7fff, 0xffff, 0x3c00, 0xbc00,
    };
    static const uint32_t f8[] = {
        0x00, 0x80, 0x01, 0x81, 0x07, 0x87, 0x08, 0x88, 0x7e, 0xfe, 0x7f, 0xff, 0x38, 0xb8,
    };
    static const uint32_t f32[] = {
        0x00000000u, 0x80000000u, 0x00000001u, 0x80000001u, 0x007fffffu, 0x807fffffu,
        0x00800000u, 0x80800000u, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u,
        0x7fc00000u, 0xffc00000u, 0x7fc12345u, 0x7f800001u, 0xff80beefu, 0x7fffffffu,
        0xffffffffu, 0x3f800000u, 0xbf800000u,
    };
    const uint32_t *src;
    size_t n;
    switch (dt) {
    case SEQKV_DT_BF16: src = bf16; n = sizeof bf16 / sizeof *bf16; break;
    case SEQKV_DT_F16: src = f16; n = sizeof f16 / sizeof *f16; break;
    case SEQKV_DT_F8E4M3: src = f8; n = sizeof f8 / sizeof *f8; break;
    default: src = f32; n = sizeof f32 / sizeof *f32; break;
    }
    memcpy(v, src, n * sizeof *v);
    return n;
}

/* hostile and model-like (mu, s): any float bits, values near the
 * lattices' edges, tiny and huge spreads */
void random_mu_s(skv_rng *r, seqkv_dtype dt, float *mu, float *s)
{
    uint64_t k = skv_rng_next(r);
    switch (k % 8) {
    case 0:
        *mu = skv_bits_f32((uint32_t)skv_rng_next(r));
        *s = skv_bits_f32((uint32_t)skv_rng_next(r));
        break;
    case 1: { /* on or next to a lattice point, s a few steps or far below */
        uint32_t x = (uint32_t)skv_rng_next(r) & width_mask(dt);
        float v = from_dt(dt, x);
        *mu = isfinite(v) ? v * (1.0f + (float)((int)(k >> 8) % 5 - 2) * 0x1p-12f) : 1.0f;
        *s = log_uniform(r, -40.0f, 1.0f) * (isfinite(v) ? fabsf(v) + 1e-38f : 1.0f);
        break;
    }
    case 2: /* subnormal floats */
        *mu = skv_bits_f32((uint32_t)skv_rng_next(r) & 0x807fffffu);
        *s = log_uniform(r, -44.0f, -30.0f);
        break;
    default:
        *mu = log_uniform(r, -12.0f, 8.0f) * ((k >> 4) & 1 ? -1.0f : 1.0f);
        if ((k >> 5) % 16 == 0)
            *mu = (k >> 9) & 1 ? -0.0f : 0.0f;
        *s = log_uniform(r, -10.0f, 6.0f);
        break;
    }
}

int cmp_u32_test(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Atoms for AT_NCH channels of dt: channel 0 none, channel 3 atoms with
 * lambda 0 (off), the others a few of the edge values plus values near
 * 1.0, with counts. Returns the atoms; *vals_out gets channel 1's values. */
skv_atoms *test_atoms(seqkv_dtype dt, uint32_t lambda_scale)
{
    uint32_t ev[32];
    size_t ne = edge_values(dt, ev);
    uint32_t k[AT_NCH] = {0}, lam[AT_NCH] = {0}, vals[4 * 64], cnts[4 * 64];
    size_t off = 0;
    for (int c = 1; c < AT_NCH; c++) {
        uint32_t tmp[64];
        size_t n = 0;
        for (size_t i = (size_t)c; i < ne; i += 2) /* every other edge value */
            tmp[n++] = ev[i];
        for (int j = 0; j < 6 * c; j++) /* a run of values near 1.0 */
            tmp[n++] = (to_dt(dt, 1.0f) + (uint32_t)j) & width_mask(dt);
        qsort(tmp, n, sizeof *tmp, cmp_u32_test);
        size_t u = 0;
        for (size_t i = 0; i < n; i++)
            if (u == 0 || tmp[i] != tmp[u - 1])
                tmp[u++] = tmp[i];
        for (size_t i = 0; i < u; i++) {
            vals[off + i] = tmp[i];
            cnts[off + i] = 1 + (uint32_t)((i * 7 + (size_t)c) % 13);
        }
        k[c] = (uint32_t)u;
        lam[c] = c == 3 ? 0 : (uint32_t)(lambda_scale * (uint32_t)c) % 65536u;
        off += u;
    }
    skv_atoms *a = NULL;
    int rc = skv_atoms_create(dt, AT_NCH, k, lam, vals, cnts, &a);
    cr_assert_eq(rc, 0, "%s", seqkv_error_detail());
    return a;
}

/* Scalars for the atoms channels: atoms, edge values, near values. */
void atoms_seq(seq_t *q, seqkv_dtype dt, size_t n, uint64_t seed)
{
    seq_t g;
    gaussian_seq(&g, dt, n, seed);
    uint32_t ev[32];
    size_t ne = edge_values(dt, ev);
    skv_rng r;
    skv_rng_seed(&r, seed ^ 0xa70);
    seq_init(q, dt, n);
    for (size_t i = 0; i < n; i++) {
        uint64_t k = skv_rng_next(&r);
        uint32_t x = g.x[i];
        if (k % 3 == 0)
            x = ev[(k >> 8) % ne];
        else if (k % 3 == 1)
            x = (to_dt(dt, 1.0f) + (uint32_t)((k >> 8) % 40)) & width_mask(dt);
        seq_push(q, x, g.mu[i], g.s[i]);
    }
    seq_free(&g);
}

uint8_t *finish_copy(skv_encoder *e, size_t *len)
{
    size_t cap = skv_encoder_bound(e);
    uint8_t *buf = malloc(cap);
    cr_assert_not_null(buf);
    cr_assert_eq(skv_encoder_finish(e, buf, cap, len), 0, "%s", seqkv_error_detail());
    return buf;
}
