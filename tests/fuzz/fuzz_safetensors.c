/* libFuzzer target for the safetensors reader and writer.
 *
 * On success it checks every tensor (name, find(), size arithmetic, data
 * inside the input, offset order), touches every data byte, reads every
 * __metadata__ entry back through skv_st_meta, then writes the parsed file
 * again through the writer, parses that, and requires identical names,
 * dtypes, shapes, bytes and metadata; serialising twice must give the same
 * bytes. Any violation aborts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "skv_tensor.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint8_t g_sink;

static void check_tensors(const skv_st *st, const uint8_t *buf, size_t size)
{
    const uint8_t *prev = NULL;
    for (size_t i = 0; i < skv_st_count(st); i++) {
        const skv_tensor *t = skv_st_at(st, i);
        CHECK(t != NULL);
        CHECK(t->name != NULL && t->name[0] != '\0');
        CHECK(skv_st_find(st, t->name) == t);
        CHECK(t->ndim >= 0 && t->ndim <= SKV_ST_MAX_DIMS);
        size_t esz = skv_dtype_size(t->dtype);
        CHECK(esz != 0);
        CHECK(t->nbytes == t->nelem * esz);
        CHECK(t->data >= buf + 8 && t->data <= buf + size);
        CHECK(t->nbytes <= (size_t)(buf + size - t->data));
        CHECK(prev == NULL || t->data >= prev);
        prev = t->data;
        uint8_t acc = 0;
        for (size_t k = 0; k < t->nbytes; k++)
            acc ^= t->data[k];
        g_sink ^= acc;
    }
    CHECK(skv_st_at(st, skv_st_count(st)) == NULL);
}

/* The metadata keys come from the header JSON itself (the skv_st API
 * looks keys up but does not list them). */
static const skv_json *meta_of(const uint8_t *buf, skv_json **hdr)
{
    uint64_t n = skv_load64_le(buf);
    CHECK(skv_json_parse((const char *)buf + 8, (size_t)n, hdr) == 0);
    return skv_json_get(*hdr, "__metadata__");
}

static void same_tensors(const skv_st *a, const skv_st *b)
{
    CHECK(skv_st_count(a) == skv_st_count(b));
    for (size_t i = 0; i < skv_st_count(a); i++) {
        const skv_tensor *x = skv_st_at(a, i);
        const skv_tensor *y = skv_st_find(b, x->name);
        CHECK(y != NULL);
        CHECK(strcmp(x->name, y->name) == 0);
        CHECK(x->dtype == y->dtype);
        CHECK(x->ndim == y->ndim);
        CHECK(memcmp(x->shape, y->shape, (size_t)x->ndim * sizeof x->shape[0]) == 0);
        CHECK(x->nelem == y->nelem);
        CHECK(x->nbytes == y->nbytes);
        CHECK(x->nbytes == 0 || memcmp(x->data, y->data, x->nbytes) == 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    CHECK(buf != NULL);
    if (size)
        memcpy(buf, data, size);
    skv_st *st = NULL;
    int rc = skv_st_parse(buf, size, &st);
    if (rc != 0) {
        CHECK(st == NULL);
        CHECK(rc == SKV_ERR_FORMAT || rc == SKV_ERR_RANGE || rc == SKV_ERR_SHAPE ||
              rc == SKV_ERR_UNSUPPORTED || rc == SKV_ERR_TOO_LARGE);
        free(buf);
        return 0;
    }
    check_tensors(st, buf, size);

    skv_json *hdr = NULL;
    const skv_json *meta = meta_of(buf, &hdr);

    skv_st_writer *w = NULL;
    CHECK(skv_stw_create(&w) == 0);
    if (meta)
        for (const skv_json *kv = meta->child; kv; kv = kv->next) {
            const char *v = skv_st_meta(st, kv->key);
            CHECK(v != NULL && strcmp(v, kv->str) == 0);
            CHECK(skv_stw_meta(w, kv->key, kv->str) == 0);
        }
    for (size_t i = 0; i < skv_st_count(st); i++) {
        const skv_tensor *t = skv_st_at(st, i);
        CHECK(skv_stw_add(w, t->name, t->dtype, t->ndim, t->shape, t->data, t->nbytes) == 0);
    }
    uint8_t *out = NULL, *out2 = NULL;
    size_t out_len = 0, out2_len = 0;
    CHECK(skv_stw_serialize(w, &out, &out_len) == 0);
    CHECK(skv_stw_serialize(w, &out2, &out2_len) == 0);
    CHECK(out_len == out2_len && memcmp(out, out2, out_len) == 0);
    CHECK(skv_load64_le(out) % 8 == 0);

    skv_st *st2 = NULL;
    CHECK(skv_st_parse(out, out_len, &st2) == 0);
    check_tensors(st2, out, out_len);
    same_tensors(st, st2);
    same_tensors(st2, st);
    if (meta)
        for (const skv_json *kv = meta->child; kv; kv = kv->next) {
            const char *v = skv_st_meta(st2, kv->key);
            CHECK(v != NULL && strcmp(v, kv->str) == 0);
        }

    /* the KV view must never misbehave on a parsed file either */
    size_t nseq = 0;
    if (skv_kvfile_count(st, &nseq) == 0)
        for (size_t i = 0; i < nseq; i++) {
            skv_kvseq s;
            if (skv_kvfile_get(st, i, &s) == 0) {
                size_t n = (size_t)s.layers * s.T * (size_t)s.kv_heads * (size_t)s.head_dim *
                           skv_dtype_size(s.dtype);
                uint8_t acc = 0;
                for (size_t k = 0; k < s.T; k++)
                    acc ^= (uint8_t)skv_load32_le(&s.tokens[k]);
                for (size_t k = 0; k < n; k++)
                    acc ^= s.k[k] ^ s.v[k];
                g_sink ^= acc;
            }
        }

    skv_st_free(st2);
    skv_free(out);
    skv_free(out2);
    skv_stw_free(w);
    skv_json_free(hdr);
    skv_st_free(st);
    free(buf);
    return 0;
}
