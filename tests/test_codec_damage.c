/* Criterion suite for damaged codec streams: truncation and corruption
 * of every byte, random garbage, header errors (each malformation its own
 * error) and allocation failure (every failure NOMEM, everything freed). */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "codecutil.h"
#include "skv_codec.h"
#include "testutil.h"

/* ========================================================================
 * Damaged streams
 * ====================================================================== */

static uint8_t *gold_stream(skv_cmodel **m, seq_t *q, int di, size_t *len)
{
    *m = model_new(GOLD_DT[di], SKV_MIX_DEFAULT, NULL);
    gold_seq(q, di, N_GOLD);
    return encode_seq(*m, q, GOLD_CALIB, len);
}

Test(damage, every_truncated_prefix_fails)
{
    for (int di = 0; di < 4; di++) {
        skv_cmodel *m;
        seq_t q;
        size_t len;
        uint8_t *full = gold_stream(&m, &q, di, &len);
        skv_decoder *d = NULL;
        cr_assert_eq(skv_decoder_create(m, &d), 0);
        for (size_t k = 0; k < len; k++) {
            uint8_t *b = malloc(k ? k : 1); /* exact size: ASan sees any over-read */
            memcpy(b, full, k);
            int rc = decode_with(d, b, k, &q, NULL, NULL);
            cr_assert_lt(rc, 0, "%s: a %zu-byte prefix of %zu decoded", skv_dtype_name(q.dt), k, len);
            cr_expect(rc == (k < SKV_STREAM_HEADER ? SKV_ERR_FORMAT : SKV_ERR_RANGE),
                      "prefix %zu: %s", k, seqkv_strerror(rc));
            free(b);
        }
        cr_assert_eq(decode_with(d, full, len, &q, NULL, NULL), 0);
        skv_decoder_free(d);
        free(full);
        seq_free(&q);
        skv_cmodel_free(m);
    }
}

/* Flip each byte of [lo, hi) with several masks; returns how many of the
 * `tried` variants were detected. */
static size_t flip_sweep(skv_cmodel *m, const seq_t *q, const uint8_t *full, size_t len,
                         size_t lo, size_t hi, size_t *tried, size_t *first_missed)
{
    static const uint8_t masks[] = {0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80, 0xff, 0x5a};
    skv_decoder *d = NULL;
    cr_assert_eq(skv_decoder_create(m, &d), 0);
    size_t caught = 0;
    *tried = 0;
    *first_missed = (size_t)-1;
    uint8_t *b = malloc(len);
    cr_assert_not_null(b);
    for (size_t i = lo; i < hi; i++)
        for (size_t k = 0; k < sizeof masks; k++) {
            memcpy(b, full, len);
            b[i] ^= masks[k];
            int rc = decode_with(d, b, len, q, NULL, NULL);
            (*tried)++;
            if (rc < 0)
                caught++;
            else if (*first_missed == (size_t)-1)
                *first_missed = i;
        }
    free(b);
    skv_decoder_free(d);
    return caught;
}

Test(damage, every_payload_byte_flip_is_detected)
{
    for (int di = 0; di < 4; di++) {
        skv_cmodel *m;
        seq_t q;
        size_t len;
        uint8_t *full = gold_stream(&m, &q, di, &len);
        size_t tried, missed_at;
        size_t caught = flip_sweep(m, &q, full, len, SKV_STREAM_HEADER, len, &tried, &missed_at);
        cr_expect_geq(caught, tried - tried / 100, "%s: %zu of %zu flips detected",
                      skv_dtype_name(q.dt), caught, tried);
        cr_expect_eq(caught, tried, "%s: %zu of %zu payload flips undetected, first at byte %zu",
                     skv_dtype_name(q.dt), tried - caught, tried, missed_at);
        free(full);
        seq_free(&q);
        skv_cmodel_free(m);
    }
}

Test(damage, every_header_byte_flip_is_detected_or_visible)
{
    for (int di = 0; di < 4; di++) {
        skv_cmodel *m;
        seq_t q;
        size_t len;
        uint8_t *full = gold_stream(&m, &q, di, &len);
        /* bytes 0..31: magic, version, dtype, reserved, n, payload, cmodel
         * id, reserved, checksum: every change is an error */
        size_t tried, missed_at;
        size_t caught = flip_sweep(m, &q, full, len, 0, 32, &tried, &missed_at);
        cr_expect_eq(caught, tried, "%s: %zu header flips undetected, first at byte %zu",
                     skv_dtype_name(q.dt), tried - caught, missed_at);
        /* bytes 32..47: calib_id is opaque to the codec, not covered by the
         * checksum; it is handed back exactly so the caller can check it */
        for (size_t i = 32; i < SKV_STREAM_HEADER; i++) {
            uint8_t *b = malloc(len);
            memcpy(b, full, len);
            b[i] ^= 0x20;
            skv_stream_info info;
            cr_expect_eq(decode_seq(m, b, len, &q, NULL, &info), 0);
            cr_expect_eq(info.calib_id[i - 32], GOLD_CALIB[i - 32] ^ 0x20);
            free(b);
        }
        free(full);
        seq_free(&q);
        skv_cmodel_free(m);
    }
}

Test(damage, random_garbage_after_a_valid_header_is_rejected)
{
    skv_rng r;
    skv_rng_seed(&r, 2024);
    for (int di = 0; di < 4; di++) {
        skv_cmodel *m;
        seq_t q;
        size_t len;
        uint8_t *full = gold_stream(&m, &q, di, &len);
        uint8_t *b = malloc(len);
        for (int t = 0; t < 300; t++) {
            memcpy(b, full, len);
            /* keep the header; overwrite a random span (or everything) of the payload */
            size_t from = SKV_STREAM_HEADER + (size_t)(skv_rng_next(&r) % (len - SKV_STREAM_HEADER));
            size_t to = t % 3 == 0 ? len : from + 1 + (size_t)(skv_rng_next(&r) % 8);
            if (to > len)
                to = len;
            int changed = 0;
            for (size_t i = from; i < to; i++) {
                uint8_t v = (uint8_t)skv_rng_next(&r);
                changed |= v != b[i];
                b[i] = v;
            }
            if (!changed)
                continue;
            cr_expect_lt(decode_seq(m, b, len, &q, NULL, NULL), 0, "%s trial %d",
                         skv_dtype_name(q.dt), t);
        }
        free(b);
        free(full);
        seq_free(&q);
        skv_cmodel_free(m);
    }
}

/* ========================================================================
 * Header errors
 * ====================================================================== */

Test(header, each_malformation_has_its_own_error)
{
    skv_cmodel *m;
    seq_t q;
    size_t len;
    uint8_t *full = gold_stream(&m, &q, 0, &len);
    uint8_t *b = malloc(len + 8);
    skv_stream_info info;

    cr_assert_eq(skv_stream_info_read(full, len, &info), 0);
    cr_expect_eq(info.dtype, SEQKV_DT_BF16);
    cr_expect_eq(info.n, N_GOLD);
    cr_expect_eq(info.payload + SKV_STREAM_HEADER, len);
    cr_expect_eq(info.cmodel_id, skv_cmodel_id(m));
    cr_expect_eq(memcmp(info.calib_id, GOLD_CALIB, 16), 0);
    cr_expect_eq(skv_load32_le(full), SKV_STREAM_MAGIC);
    cr_expect_eq(memcmp(full, "SKVR", 4), 0);
    cr_expect_eq(skv_load16_le(full + 4), SKV_STREAM_VERSION);

    memcpy(b, full, len);
    b[3] = 'Q';
    cr_expect_eq(decode_seq(m, b, len, &q, NULL, NULL), SKV_ERR_FORMAT, "bad magic");
    memcpy(b, full, len);
    skv_store16_le(b + 4, 2); /* a version 1 body read as version 2 */
    cr_expect_eq(decode_seq(m, b, len, &q, NULL, NULL), SKV_ERR_CORRUPT, "version 2");
    skv_store16_le(b + 4, 3);
    cr_expect_eq(decode_seq(m, b, len, &q, NULL, NULL), SKV_ERR_VERSION, "version 3");
    skv_store16_le(b + 4, 0xffff);
    cr_expect_eq(decode_seq(m, b, len, &q, NULL, NULL), SKV_ERR_VERSION, "version 65535");
    memcpy(b, full, len);
    b[6] = SEQKV_DT_F32;
    cr_expect_eq(decode_seq(m, b, len, &q, NULL, NULL), SKV_ERR_SHAPE, "f32 stream, bf16 model");
    b[6] = 200;
    cr_expect_eq(decode_seq(m, b, len, &q, NULL, NULL), SKV_ERR_FORMAT, "dtype 200");
    memcpy(b, full, len);
    skv_store32_le(b + 12, (uint32_t)(len - SKV_STREAM_HEADER + 2));
    cr_expect_eq(decode_seq(m, b, len, &q, NULL, NULL), SKV_ERR_RANGE, "payload past the end");
    skv_store32_le(b + 12, 0xfffffffeu);
    cr_expect_eq(decode_seq(m, b, len, &q, NULL, NULL), SKV_ERR_RANGE, "payload 4 GiB");

    /* another model's stream */
    skv_cmodel *other = model_new(SEQKV_DT_BF16, (skv_mix){1966u, 1312u}, NULL);
    cr_expect_eq(decode_seq(other, full, len, &q, NULL, NULL), SKV_ERR_CORRUPT, "cmodel id");
    skv_cmodel_free(other);

    /* a stream inside a larger buffer: only header + payload are read */
    memcpy(b, full, len);
    memset(b + len, 0xa5, 8);
    cr_expect_eq(decode_seq(m, b, len + 8, &q, NULL, NULL), 0, "%s", seqkv_error_detail());

    /* more scalars than n, and end before all of them */
    skv_decoder *d = NULL;
    cr_assert_eq(skv_decoder_create(m, &d), 0);
    cr_assert_eq(decode_with(d, full, len, &q, NULL, NULL), 0);
    uint32_t x;
    cr_expect_eq(skv_decoder_get(d, 0.0f, 1.0f, &x), SKV_ERR_ARG, "scalar n+1");
    cr_assert_eq(skv_decoder_begin(d, full, len, NULL), 0);
    for (uint32_t i = 0; i < 10; i++) {
        float mu, s;
        seq_param(&q, i, &mu, &s);
        cr_assert_eq(skv_decoder_get(d, mu, s, &x), 0);
        cr_expect_eq(x, q.x[i]);
    }
    int rc = skv_decoder_end(d);
    cr_expect_lt(rc, 0, "end after 10 of %d scalars", N_GOLD);
    cr_expect_eq(rc, SKV_ERR_ARG);
    /* a decoder is reusable after an error */
    cr_expect_eq(decode_with(d, full, len, &q, NULL, NULL), 0);
    skv_decoder_free(d);
    skv_decoder_free(NULL);
    skv_encoder_free(NULL);

    free(b);
    free(full);
    seq_free(&q);
    skv_cmodel_free(m);
}

Test(header, finish_reports_a_buffer_that_is_too_small)
{
    skv_cmodel *m = model_new(SEQKV_DT_BF16, SKV_MIX_DEFAULT, NULL);
    seq_t q;
    gold_seq(&q, 0, N_GOLD);
    skv_encoder *e = NULL;
    cr_assert_eq(skv_encoder_create(m, &e), 0);
    size_t len;
    uint8_t *full = encode_with(e, &q, NULL, &len);
    uint8_t *b = malloc(len);
    size_t got = 123;
    cr_expect_eq(skv_encoder_finish(e, b, len - 1, &got), SKV_ERR_TOO_LARGE);
    cr_expect_eq(got, 0);
    cr_expect_eq(skv_encoder_finish(e, b, len, &got), 0, "finishing again after a failure");
    cr_expect_eq(got, len);
    cr_expect_eq(memcmp(b, full, len), 0);
    free(b);
    free(full);
    skv_encoder_free(e);
    seq_free(&q);
    skv_cmodel_free(m);
}

/* ========================================================================
 * Allocation failure
 * ====================================================================== */

/* Create a model, an encoder, code q, decode it with a fresh model and
 * decoder, one scalar at a time (batch 1) or in put_n/get_n batches; the
 * first error, or 0 (and the round trip checked). */
static int alloc_pass(const seq_t *q, size_t batch)
{
    skv_cmodel *m = NULL, *m2 = NULL;
    skv_encoder *e = NULL;
    skv_decoder *d = NULL;
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = skv_cmodel_create(q->dt, SKV_MIX_DEFAULT, NULL, &m);
    if (rc) {
        cr_expect_null(m);
        goto out;
    }
    if ((rc = skv_encoder_create(m, &e))) {
        cr_expect_null(e);
        goto out;
    }
    skv_encoder_reset(e, NULL);
    for (size_t i = 0; i < q->n; i += batch) {
        size_t nb = q->n - i < batch ? q->n - i : batch;
        if ((rc = batch == 1 ? skv_encoder_put(e, q->x[i], q->mu[i], q->s[i])
                             : skv_encoder_put_n(e, q->x + i, q->mu + i, q->s + i, nb)))
            goto out;
    }
    size_t cap = skv_encoder_bound(e);
    buf = malloc(cap);
    if ((rc = skv_encoder_finish(e, buf, cap, &len)))
        goto out;
    if ((rc = skv_cmodel_create(q->dt, SKV_MIX_DEFAULT, NULL, &m2)))
        goto out;
    if ((rc = skv_decoder_create(m2, &d))) {
        cr_expect_null(d);
        goto out;
    }
    if ((rc = skv_decoder_begin(d, buf, len, NULL)))
        goto out;
    uint32_t x[64];
    for (size_t i = 0; i < q->n; i += batch) {
        size_t nb = q->n - i < batch ? q->n - i : batch;
        if ((rc = batch == 1 ? skv_decoder_get(d, q->mu[i], q->s[i], x)
                             : skv_decoder_get_n(d, q->mu + i, q->s + i, x, nb)))
            goto out;
        for (size_t k = 0; k < nb; k++)
            cr_assert_eq(x[k], q->x[i + k]);
    }
    rc = skv_decoder_end(d);
out:
    free(buf);
    skv_decoder_free(d);
    skv_encoder_free(e);
    skv_cmodel_free(m);
    skv_cmodel_free(m2);
    return rc;
}

Test(alloc_failure, every_failure_is_nomem_and_frees_everything)
{
    /* enough scalars to grow the op queue past its first 4096 entries,
     * with few distinct s so the table count stays small; mu varies, so
     * that rows of the batch paths do not repeat (a row cache hit would
     * skip the per-scalar classes), and the second half brings new s, so
     * that tables are first needed after the row cache has turned off */
    seq_t q;
    seq_init(&q, SEQKV_DT_BF16, 5000);
    skv_rng r;
    skv_rng_seed(&r, 5);
    const float ss[2][3] = {{0.01f, 0.5f, 1e-6f}, {0.03f, 0.75f, 3e-6f}};
    for (size_t i = 0; i < q.cap; i++) {
        float mu = 1.0f + (float)(skv_rng_next(&r) % 1024) / 256.0f;
        float s = ss[2 * i >= q.cap][i % 3];
        float v = i % 97 == 0 ? 1e30f : mu + s * skv_rng_normal(&r);
        seq_push(&q, skv_f32_to_bf16(v), mu, s);
    }
    /* one at a time, and in rows of 61 (they do not repeat: the batch
     * paths, with bf16's eight-lane classes and encoder planning where the
     * CPU has AVX2, meet tables not built yet in STEP and BUCKET lanes) */
    const size_t batches[2] = {1, 61};
    for (int b = 0; b < 2; b++) {
        long fails = 0;
        for (long k = 0;; k++) {
            skv_alloc_fail_after(k, 0);
            int rc = alloc_pass(&q, batches[b]);
            skv_alloc_fail_after(-1, 0);
            if (rc == 0)
                break;
            cr_assert_eq(rc, SKV_ERR_NOMEM, "batch %zu, allocation %ld: %s (%s)", batches[b], k,
                         seqkv_strerror(rc), seqkv_error_detail());
            fails++;
            cr_assert_lt(k, 2000);
        }
        cr_expect_geq(fails, 10, "batch %zu: %ld injected failures", batches[b], fails);
        /* sticky failure from some point on: still NOMEM, never a crash */
        for (long k = 0; k < fails; k += 3) {
            skv_alloc_fail_after(k, 1);
            int rc = alloc_pass(&q, batches[b]);
            skv_alloc_fail_after(-1, 0);
            cr_expect_eq(rc, SKV_ERR_NOMEM, "batch %zu, sticky from %ld: %s", batches[b], k,
                         seqkv_strerror(rc));
        }
        /* and everything works again afterwards */
        cr_expect_eq(alloc_pass(&q, batches[b]), 0);
    }
    seq_free(&q);
}
