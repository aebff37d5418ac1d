/* codec bench's baselines and the fast level: zstd -1, -3 and -19 on the
 * raw bytes and on byte planes, with the planes' decode speed (one
 * thread, best of reps), and the fast streams (skv_fast_*) coded two
 * ways: one stream per (layer, K|V) over the whole test set, and one per
 * (chunk, layer, K|V) as the store codes them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "cli.h"
#include "codec_baselines.h"
#include "skv_codec.h"

static size_t zstd_size(const void *src, size_t n, int level)
{
    size_t cap = ZSTD_compressBound(n);
    void *dst = malloc(cap);
    size_t r = dst ? ZSTD_compress(dst, cap, src, n, level) : 0;
    free(dst);
    return ZSTD_isError(r) ? 0 : r;
}

/* zstd of each byte plane; *dsec: the best over reps of decoding them all */
static size_t zstd_planes(const uint8_t *src, size_t n, size_t es, int level, long reps, double *dsec)
{
    uint8_t *plane = malloc(n + 1), *out = malloc(n + 1), *z[4] = {0};
    size_t zl[4] = {0}, tot = 0;
    for (size_t b = 0; b < es; b++) {
        for (size_t i = 0; i < n; i++)
            plane[i] = src[i * es + b];
        z[b] = malloc(ZSTD_compressBound(n));
        zl[b] = ZSTD_compress(z[b], ZSTD_compressBound(n), plane, n, level);
        tot += zl[b];
    }
    *dsec = 1e30;
    for (long r = 0; r < (reps > 0 ? reps : 1); r++) {
        double t0 = cli_cpu_now();
        for (size_t b = 0; b < es; b++)
            if (ZSTD_isError(ZSTD_decompress(out, n, z[b], zl[b])))
                tot = 0;
        double t = cli_cpu_now() - t0;
        *dsec = t < *dsec ? t : *dsec;
    }
    for (size_t b = 0; b < es; b++)
        free(z[b]);
    free(plane);
    free(out);
    return tot;
}

static void line(const cb_input *in, const char *name, double bps, double dsec, double esec)
{
    const double mb = (double)(in->n * in->es) / 1e6;
    if (in->json) {
        printf("{\"level\":\"%s\",\"dtype\":\"%s\",\"bits_per_scalar\":%.4f,\"ratio\":%.3f", name,
               skv_dtype_name(in->dt), bps, 8.0 * (double)in->es / bps);
        if (dsec > 0)
            printf(",\"decode_mbps\":%.1f", mb / dsec);
        if (esec > 0)
            printf(",\"encode_mbps\":%.1f", mb / esec);
        printf(",\"baseline\":%s}\n", esec > 0 || strncmp(name, "fast", 4) == 0 ? "false" : "true");
    } else {
        printf("%-22s %7.3f bits/scalar (%.2fx)", name, bps, 8.0 * (double)in->es / bps);
        if (esec > 0)
            printf(", encode %.0f MB/s", mb / esec);
        if (dsec > 0)
            printf(", decode %.0f MB/s (one thread)", mb / dsec);
        printf("\n");
    }
}

void cli_codec_baselines(const cb_input *in)
{
    static const int lv[3] = {1, 3, 19};
    char name[32];
    for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof name, "zstd-%d", lv[k]);
        line(in, name, 8.0 * (double)zstd_size(in->all, in->n * in->es, lv[k]) / (double)in->n, 0, 0);
    }
    for (int k = 0; k < 3; k++) {
        double d;
        size_t z = zstd_planes(in->all, in->n, in->es, lv[k], in->reps, &d);
        snprintf(name, sizeof name, "zstd-%d-planes", lv[k]);
        line(in, name, 8.0 * (double)z / (double)in->n, d, 0);
    }
}

/* Code the streams (rows[j] x C scalars at src[j]) reps times; sizes,
 * best encode and decode (CPU time of this thread); 0 on success. */
static int fast_streams(const cb_input *in, const uint8_t *const *src, const size_t *rows, size_t ns,
                        size_t *bytes, double *es, double *ds)
{
    size_t cap = 0, maxr = 0;
    for (size_t j = 0; j < ns; j++)
        maxr = rows[j] > maxr ? rows[j] : maxr;
    cap = skv_fast_bound(in->dt, maxr, in->C);
    uint8_t **z = calloc(ns, sizeof *z), *out = malloc(maxr * in->C * in->es + 1);
    size_t *zl = calloc(ns, sizeof *zl);
    int rc = 0;
    for (size_t j = 0; j < ns; j++)
        z[j] = malloc(cap);
    *es = *ds = 1e30;
    for (long r = 0; r < (in->reps > 0 ? in->reps : 1) && !rc; r++) {
        double t0 = cli_cpu_now();
        for (size_t j = 0; j < ns && !rc; j++)
            rc = skv_fast_encode(in->dt, src[j], rows[j], in->C, z[j], cap, &zl[j]);
        double t1 = cli_cpu_now();
        for (size_t j = 0; j < ns && !rc; j++)
            rc = skv_fast_decode(z[j], zl[j], in->dt, rows[j], in->C, out, maxr * in->C * in->es);
        double t2 = cli_cpu_now();
        *es = t1 - t0 < *es ? t1 - t0 : *es;
        *ds = t2 - t1 < *ds ? t2 - t1 : *ds;
    }
    *bytes = 0;
    for (size_t j = 0; j < ns && !rc; j++) {
        rc = skv_fast_decode(z[j], zl[j], in->dt, rows[j], in->C, out, maxr * in->C * in->es);
        if (!rc && memcmp(out, src[j], rows[j] * in->C * in->es))
            rc = SKV_ERR_CORRUPT;
        *bytes += zl[j];
    }
    for (size_t j = 0; j < ns; j++)
        free(z[j]);
    free(z);
    free(zl);
    free(out);
    return rc;
}

int cli_codec_fast(const cb_input *in)
{
    /* whole set: (layer, K|V) streams of every sequence's rows together */
    const size_t L = in->layers, C = in->C, es = in->es;
    size_t tot_rows = 0, nchunks = 0;
    for (size_t i = 0; i < in->n_seq; i++) {
        tot_rows += in->T[i];
        nchunks += (in->T[i] + in->chunk - 1) / in->chunk;
    }
    uint8_t *whole = malloc(2 * L * tot_rows * C * es + 1);
    const uint8_t **src = malloc(2 * L * (nchunks + 1) * sizeof *src);
    size_t *rows = malloc(2 * L * (nchunks + 1) * sizeof *rows);
    size_t ns = 0, o = 0;
    for (size_t j = 0; j < 2 * L; j++) {
        src[j] = whole + o;
        rows[j] = tot_rows;
        for (size_t i = 0; i < in->n_seq; i++) {
            const uint8_t *kv = j & 1 ? in->v[i] : in->k[i];
            size_t nb = in->T[i] * C * es;
            memcpy(whole + o, kv + (j / 2) * nb, nb);
            o += nb;
        }
    }
    size_t bytes;
    double esec, dsec;
    int rc = fast_streams(in, src, rows, 2 * L, &bytes, &esec, &dsec);
    if (!rc)
        line(in, "fast (whole set)", 8.0 * (double)bytes / (double)in->n, dsec, esec);
    /* per chunk, as the store codes a record */
    for (size_t i = 0; i < in->n_seq; i++)
        for (size_t p = 0; p < in->T[i]; p += in->chunk)
            for (size_t j = 0; j < 2 * L; j++) {
                const uint8_t *kv = j & 1 ? in->v[i] : in->k[i];
                src[ns] = kv + ((j / 2) * in->T[i] + p) * C * es;
                rows[ns++] = in->T[i] - p < in->chunk ? in->T[i] - p : in->chunk;
            }
    if (!rc && (rc = fast_streams(in, src, rows, ns, &bytes, &esec, &dsec)) == 0) {
        char name[40];
        snprintf(name, sizeof name, "fast (%zu chunk streams)", ns);
        line(in, name, 8.0 * (double)bytes / (double)in->n, dsec, esec);
    }
    free(whole);
    free(src);
    free(rows);
    return rc;
}
