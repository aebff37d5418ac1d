/* Criterion suite for atoms: a per-channel distribution over exact values
 * in front of the mixture (skv_atoms): round trips for every dtype and
 * batch size, damage, the model id, their cost, and refused inputs. */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "codecutil.h"
#include "skv_codec.h"
#include "testutil.h"

/* ========================================================================
 * Atoms: a per-channel distribution over exact values in front of the
 * mixture (skv_atoms)
 * ====================================================================== */

static uint8_t *encode_atoms(skv_cmodel *m, const skv_atoms *a, const seq_t *q, size_t batch,
                             size_t *len, double *ideal)
{
    skv_encoder *e = NULL;
    cr_assert_eq(skv_encoder_create(m, &e), 0);
    skv_encoder_reset_atoms(e, NULL, a);
    for (size_t i = 0; i < q->n; i += batch) {
        size_t nb = q->n - i < batch ? q->n - i : batch;
        int rc = skv_encoder_put_n(e, q->x + i, q->mu + i, q->s + i, nb);
        cr_assert_eq(rc, 0, "%s", seqkv_error_detail());
    }
    if (ideal)
        *ideal = skv_encoder_ideal_bits(e);
    size_t cap = skv_encoder_bound(e);
    uint8_t *tmp = malloc(cap);
    cr_assert_eq(skv_encoder_finish(e, tmp, cap, len), 0);
    uint8_t *out = malloc(*len);
    memcpy(out, tmp, *len);
    free(tmp);
    skv_encoder_free(e);
    return out;
}

/* Decode in batches of `batch` (1: skv_decoder_get); first error or 0. */
static int decode_atoms(skv_cmodel *m, const skv_atoms *a, const uint8_t *buf, size_t len,
                        const seq_t *q, size_t batch, uint32_t *out)
{
    skv_decoder *d = NULL;
    cr_assert_eq(skv_decoder_create(m, &d), 0);
    skv_stream_info info;
    int rc = skv_decoder_begin_atoms(d, buf, len, a, &info);
    for (size_t i = 0; !rc && i < q->n; i += batch) {
        size_t nb = q->n - i < batch ? q->n - i : batch;
        if (batch == 1)
            rc = skv_decoder_get(d, q->mu[i], q->s[i], out + i);
        else
            rc = skv_decoder_get_n(d, q->mu + i, q->s + i, out + i, nb);
    }
    if (!rc)
        rc = skv_decoder_end(d);
    skv_decoder_free(d);
    return rc;
}

Test(atoms, round_trip_for_every_dtype_and_batch_size)
{
    for (int di = 0; di < 4; di++) {
        seqkv_dtype dt = DTYPES[di];
        skv_cmodel *m = model_new(dt, (skv_mix){600u, 100u}, NULL);
        skv_atoms *a = test_atoms(dt, 20000u);
        seq_t q;
        atoms_seq(&q, dt, 4001, 77 + (uint64_t)di);
        size_t batches[4] = {1, 3, AT_NCH * 7, 4001};
        uint8_t *first = NULL;
        size_t first_len = 0;
        for (int b = 0; b < 4; b++) {
            size_t len;
            double ideal;
            uint8_t *buf = encode_atoms(m, a, &q, batches[b], &len, &ideal);
            skv_stream_info info;
            cr_assert_eq(skv_stream_info_read(buf, len, &info), 0);
            cr_assert_eq(info.cmodel_id, skv_stream_model_id(m, a));
            cr_assert_neq(info.cmodel_id, skv_cmodel_id(m), "atoms change the model id");
            /* the size follows the ideal code length (payload within 1% + 64 bytes) */
            cr_assert_lt(8.0 * (double)len, ideal * 1.01 + 8.0 * 64, "%s: %zu bytes, ideal %.0f bits",
                         skv_dtype_name(dt), len, ideal);
            if (!first) {
                first = buf;
                first_len = len;
            } else {
                cr_assert_eq(len, first_len, "batching does not change the stream");
                cr_assert_eq(memcmp(buf, first, len), 0);
                free(buf);
            }
            for (int db = 0; db < 4; db++) {
                uint32_t *got = malloc(q.n * sizeof *got);
                int rc = decode_atoms(m, a, first, first_len, &q, batches[db], got);
                cr_assert_eq(rc, 0, "%s: %s", skv_dtype_name(dt), seqkv_error_detail());
                for (size_t i = 0; i < q.n; i++)
                    cr_assert_eq(got[i], q.x[i], "%s scalar %zu", skv_dtype_name(dt), i);
                free(got);
            }
        }
        /* another stream model: no atoms, or other atoms, is refused up front */
        uint32_t *got = malloc(q.n * sizeof *got);
        cr_assert_eq(decode_atoms(m, NULL, first, first_len, &q, 64, got), SKV_ERR_CORRUPT);
        skv_atoms *b2 = test_atoms(dt, 21000u);
        cr_assert_neq(skv_atoms_id(b2), skv_atoms_id(a));
        cr_assert_eq(decode_atoms(m, b2, first, first_len, &q, 64, got), SKV_ERR_CORRUPT);
        /* every payload byte flip is detected or harmless, never read past the end */
        size_t missed = 0;
        for (size_t p = SKV_STREAM_HEADER; p < first_len; p += 7) {
            uint8_t *t = malloc(first_len);
            memcpy(t, first, first_len);
            t[p] ^= (uint8_t)(1u << (p % 8));
            int rc = decode_atoms(m, a, t, first_len, &q, 64, got);
            if (rc == 0)
                missed++;
            else
                cr_assert_eq(rc, SKV_ERR_CORRUPT, "flip at %zu: %s", p, seqkv_strerror(rc));
            free(t);
        }
        cr_assert_eq(missed, 0, "%zu flips decoded as valid", missed);
        /* truncations: every shorter consistent stream fails cleanly */
        for (size_t cut = SKV_STREAM_HEADER + 16; cut < first_len; cut += 2) {
            uint8_t *t = malloc(cut);
            memcpy(t, first, cut);
            skv_store32_le(t + 12, (uint32_t)(cut - SKV_STREAM_HEADER));
            cr_assert_eq(decode_atoms(m, a, t, cut, &q, 64, got), SKV_ERR_CORRUPT, "cut %zu", cut);
            free(t);
        }
        free(got);
        free(first);
        skv_atoms_free(b2);
        skv_atoms_free(a);
        seq_free(&q);
        skv_cmodel_free(m);
    }
}

Test(atoms, all_channels_without_atoms_code_exactly_as_no_atoms_but_for_the_id)
{
    seqkv_dtype dt = SEQKV_DT_BF16;
    skv_cmodel *m = model_new(dt, SKV_MIX_DEFAULT, NULL);
    uint32_t k[2] = {2, 0}, lam[2] = {0, 0}, vals[2] = {1, 2}, cnts[2] = {3, 4};
    skv_atoms *a = NULL;
    cr_assert_eq(skv_atoms_create(dt, 2, k, lam, vals, cnts, &a), 0);
    seq_t q;
    gaussian_seq(&q, dt, 1000, 5);
    size_t l1, l2;
    uint8_t *b1 = encode_atoms(m, a, &q, 100, &l1, NULL);
    uint8_t *b2 = encode_seq(m, &q, NULL, &l2);
    cr_assert_eq(l1, l2);
    cr_assert_eq(memcmp(b1, b2, 16), 0);
    cr_assert_eq(memcmp(b1 + 20, b2 + 20, l1 - 20), 0, "the same stream but for the model id");
    free(b1);
    free(b2);
    seq_free(&q);
    skv_atoms_free(a);
    skv_cmodel_free(m);
}

Test(atoms, an_exact_atom_costs_about_log2_of_its_probability)
{
    seqkv_dtype dt = SEQKV_DT_BF16;
    skv_cmodel *m = model_new(dt, SKV_MIX_DEFAULT, NULL);
    /* one channel, atoms 1.0 (count 3) and 2.0 (count 1), lambda 1/2 */
    uint32_t k = 2, lam = 32768, vals[2] = {0x3f80, 0x4000}, cnts[2] = {3, 1};
    skv_atoms *a = NULL;
    cr_assert_eq(skv_atoms_create(dt, 1, &k, &lam, vals, cnts, &a), 0);
    seq_t q;
    seq_init(&q, dt, 4096);
    for (int i = 0; i < 4096; i++)
        seq_push(&q, i & 3 ? 0x3f80 : 0x4000, 0.0f, 1.0f);
    size_t len;
    double ideal;
    uint8_t *buf = encode_atoms(m, a, &q, 4096, &len, &ideal);
    /* 3/4 at -log2(3/8), 1/4 at -log2(1/8): 2.19 bits each */
    double want = 4096 * (0.75 * 1.415037 + 0.25 * 3.0);
    cr_assert_float_eq(ideal, want, 1.0, "ideal %.2f bits, want %.2f", ideal, want);
    cr_assert_lt((double)(len - SKV_STREAM_HEADER - 16) * 8.0, want * 1.005);
    free(buf);
    seq_free(&q);
    skv_atoms_free(a);
    skv_cmodel_free(m);
}

Test(atoms, create_rejects_unsorted_duplicate_zero_count_and_too_wide_values)
{
    skv_atoms *a = NULL;
    uint32_t k = 2, lam = 100;
    uint32_t unsorted[2] = {5, 4}, dup[2] = {4, 4}, wide[2] = {4, 0x10000}, ok[2] = {4, 5};
    uint32_t c1[2] = {1, 1}, c0[2] = {1, 0};
    cr_assert_eq(skv_atoms_create(SEQKV_DT_BF16, 1, &k, &lam, unsorted, c1, &a), SKV_ERR_ARG);
    cr_assert_eq(skv_atoms_create(SEQKV_DT_BF16, 1, &k, &lam, dup, c1, &a), SKV_ERR_ARG);
    cr_assert_eq(skv_atoms_create(SEQKV_DT_BF16, 1, &k, &lam, wide, c1, &a), SKV_ERR_ARG);
    cr_assert_eq(skv_atoms_create(SEQKV_DT_BF16, 1, &k, &lam, ok, c0, &a), SKV_ERR_ARG);
    cr_assert_eq(skv_atoms_create(SEQKV_DT_I32, 1, &k, &lam, ok, c1, &a), SKV_ERR_ARG);
    uint32_t big = SKV_ATOMS_MAX + 1, lam_big = 65536;
    cr_assert_eq(skv_atoms_create(SEQKV_DT_BF16, 1, &big, &lam, ok, c1, &a), SKV_ERR_ARG);
    cr_assert_eq(skv_atoms_create(SEQKV_DT_BF16, 1, &k, &lam_big, ok, c1, &a), SKV_ERR_ARG);
    cr_assert_null(a);
    cr_assert_eq(skv_atoms_create(SEQKV_DT_BF16, 1, &k, &lam, ok, c1, &a), 0);
    skv_cmodel *m = model_new(SEQKV_DT_F16, SKV_MIX_DEFAULT, NULL);
    skv_encoder *e = NULL;
    cr_assert_eq(skv_encoder_create(m, &e), 0);
    skv_encoder_reset_atoms(e, NULL, a);
    uint32_t x = 4;
    cr_assert_eq(skv_encoder_put(e, x, 0.0f, 1.0f), SKV_ERR_ARG, "bf16 atoms, f16 model");
    skv_encoder_free(e);
    skv_cmodel_free(m);
    skv_atoms_free(a);
    skv_atoms_free(NULL);
}
