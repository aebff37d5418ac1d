/* Fuzz target for sealed chunk records, sealed values and wrapped tenant
 * keys (store/seal.c). A box's tag stops random bytes, so besides feeding
 * the input to every opener as it is (each must refuse it cleanly), the
 * target takes the input as a record image -- with the right trailer
 * appended, as fuzz_record does -- and, when it parses, seals it under a
 * fixed key: it must open back to the same image, its head alone must
 * parse to the same fields, and with one byte flipped (chosen by the
 * input) it must not open. Any violation aborts. */
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "seal.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint8_t KEY[32] = {1, 2, 3}, DEK[32] = {9, 8, 7}, MASTER[32] = {5};

static void open_as_is(const uint8_t *d, size_t n)
{
    uint8_t *img = NULL, *head = NULL, *v = NULL, keys[SKV_TKEYS];
    size_t len;
    skv_rec r;
    CHECK(skv_rec_unseal(KEY, DEK, d, n, NULL, &img, &len) != 0 && !img);
    CHECK(skv_rec_unseal_head(KEY, DEK, d, n, &head, &r) != 0 && !head);
    CHECK(skv_sv_open(DEK, KEY, 32, d, n, &v, &len) != 0 && !v);
    CHECK(skv_tkeys_unwrap(MASTER, 7, d, n, keys) != 0);
}

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
    open_as_is(data, size);
    uint8_t *buf = malloc(size + SKV_REC_TRAILER);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    skv_rec_seal(buf, size + SKV_REC_TRAILER);
    const size_t len = size + SKV_REC_TRAILER;
    skv_rec r;
    if (skv_rec_parse(buf, len, &r) == 0) {
        const size_t sl = skv_rec_sealed_size(&r, len);
        uint8_t *s = malloc(sl), *img = NULL, *head = NULL;
        CHECK(s);
        skv_rec_seal_into(KEY, DEK, &r, buf, len, s);
        size_t il;
        CHECK(skv_rec_unseal(KEY, DEK, s, sl, NULL, &img, &il) == 0);
        CHECK(il == len && memcmp(img, buf, len) == 0);
        skv_rec h;
        CHECK(skv_rec_unseal_head(KEY, DEK, s, sl, &head, &h) == 0);
        CHECK(h.n == r.n && h.lo == r.lo && h.nstreams == r.nstreams &&
              h.streams_len == r.streams_len && h.checksum == r.checksum &&
              memcmp(h.tokens, r.tokens, (size_t)r.n * 4) == 0);
        skv_free(img);
        /* streams of one size open straight into their destinations, as
         * a raw record's GET does */
        const size_t sz = r.nstreams ? r.streams_len / r.nstreams : 0;
        uint8_t *flat = NULL, *dst[64];
        const int raw = r.nstreams <= 64 && r.streams_len == (size_t)r.nstreams * sz;
        if (raw) {
            CHECK((flat = malloc(r.streams_len + 1)));
            for (uint32_t j = 0; j < r.nstreams; j++)
                dst[j] = flat + (size_t)(r.nstreams - 1 - j) * sz; /* scattered: reversed */
            CHECK(skv_rec_unseal_raw(KEY, DEK, s, sl, &h, NULL, dst) == 0);
            for (uint32_t j = 0; j < r.nstreams; j++)
                CHECK(memcmp(dst[j], r.streams + (size_t)j * sz, sz) == 0);
        }
        skv_free(head);
        /* one byte flipped (the header's reserved bytes and all) */
        const size_t at = (size ? data[0] * 131u + data[size - 1] : 0) % sl;
        s[at] ^= 0x40;
        img = NULL;
        CHECK(skv_rec_unseal(KEY, DEK, s, sl, NULL, &img, &il) != 0 && !img);
        if (raw) { /* box 0 by the head's opener, the rest by the raw one */
            head = NULL;
            const int bad_head = skv_rec_unseal_head(KEY, DEK, s, sl, &head, &h) != 0;
            skv_free(head);
            CHECK(bad_head || skv_rec_unseal_raw(KEY, DEK, s, sl, &r, NULL, dst) != 0);
            free(flat);
        }
        /* another key */
        s[at] ^= 0x40;
        uint8_t other[32];
        memcpy(other, KEY, 32);
        other[31] ^= 1;
        CHECK(skv_rec_unseal(other, DEK, s, sl, NULL, &img, &il) != 0);
        free(s);
    }
    free(buf);
    return 0;
}
