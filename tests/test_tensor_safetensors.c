/* Criterion suite for safetensors read and write (skv_st): round trips
 * of every dtype, many tensors, bad arguments, truncation, header checks,
 * malformed headers and the format's edges; the golden and known-bad
 * files of tests/golden/safetensors; allocation failure on every path. */
#include <criterion/criterion.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "skv_tensor.h"
#include "testutil.h"

/* A safetensors image from a header string (padded to 8 with spaces) and
 * a data region of `data_len` bytes holding 0, 1, 2, ... (malloc'd). */
static uint8_t *st_image(const char *header, size_t data_len, size_t *len)
{
    size_t h = strlen(header);
    size_t hp = (h + 7) & ~(size_t)7;
    *len = 8 + hp + data_len;
    uint8_t *b = malloc(*len);
    cr_assert_not_null(b);
    skv_store64_le(b, hp);
    memcpy(b + 8, header, h);
    memset(b + 8 + h, ' ', hp - h);
    for (size_t i = 0; i < data_len; i++)
        b[8 + hp + i] = (uint8_t)i;
    return b;
}

static int st_rc(const char *header, size_t data_len)
{
    size_t len;
    uint8_t *b = st_image(header, data_len, &len);
    skv_st *st = NULL;
    int rc = skv_st_parse(b, len, &st);
    if (rc == 0)
        skv_st_free(st);
    else
        cr_assert_null(st);
    free(b);
    return rc;
}

static const char *golden_dir(void)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/tests/golden/safetensors", tu_source_root());
    return buf;
}

static int contains(const uint8_t *hay, size_t n, const char *needle)
{
    return memmem(hay, n, needle, strlen(needle)) != NULL;
}

/* ========================================================================
 * safetensors: writer -> reader round trips
 * ====================================================================== */

typedef struct {
    const char *name;
    seqkv_dtype dt;
    int ndim;
    int64_t shape[SKV_ST_MAX_DIMS];
} tspec;

static const tspec round_trip_specs[] = {
    {"w.f32", SEQKV_DT_F32, 2, {3, 5}},
    {"layers.0.attn \"q\"\\\n\t/\xc3\xa9", SEQKV_DT_BF16, 3, {2, 3, 4}},
    {"h16", SEQKV_DT_F16, 1, {7}},
    {"fp8", SEQKV_DT_F8E4M3, 4, {1, 2, 3, 5}},
    {"ids", SEQKV_DT_I32, 1, {9}},
    {"empty", SEQKV_DT_BF16, 2, {0, 16}},
    {"scalar", SEQKV_DT_F32, 0, {0}},
    {"rank8", SEQKV_DT_F8E4M3, 8, {1, 2, 1, 2, 1, 3, 1, 1}},
    {"\x01\x1f", SEQKV_DT_I32, 2, {1, 1}},
};
#define N_SPECS (sizeof round_trip_specs / sizeof round_trip_specs[0])

static size_t spec_bytes(const tspec *s)
{
    size_t n = skv_dtype_size(s->dt);
    for (int d = 0; d < s->ndim; d++)
        n *= (size_t)s->shape[d];
    return n;
}

static skv_st_writer *make_writer(uint8_t **datas)
{
    skv_st_writer *w = NULL;
    cr_assert_eq(skv_stw_create(&w), 0);
    for (size_t i = 0; i < N_SPECS; i++) {
        const tspec *s = &round_trip_specs[i];
        size_t nb = spec_bytes(s);
        datas[i] = malloc(nb ? nb : 1);
        tu_fill_bytes(datas[i], nb, (uint32_t)i + 1);
        int rc = skv_stw_add(w, s->name, s->dt, s->ndim, s->shape, datas[i], nb);
        cr_assert_eq(rc, 0, "%s: %s", s->name, seqkv_error_detail());
    }
    cr_assert_eq(skv_stw_meta(w, "format", "pt"), 0);
    cr_assert_eq(skv_stw_meta(w, "quote\"key", "line\nbreak \xe2\x82\xac \\ end"), 0);
    cr_assert_eq(skv_stw_meta(w, "", "empty key"), 0);
    return w;
}

static void check_round_trip(const skv_st *st, uint8_t **datas)
{
    cr_assert_eq(skv_st_count(st), N_SPECS);
    for (size_t i = 0; i < N_SPECS; i++) {
        const tspec *s = &round_trip_specs[i];
        const skv_tensor *t = skv_st_find(st, s->name);
        cr_assert_not_null(t, "%s missing", s->name);
        cr_expect_str_eq(t->name, s->name);
        cr_expect_eq(t->dtype, s->dt, "%s", s->name);
        cr_expect_eq(t->ndim, s->ndim, "%s", s->name);
        size_t nelem = 1;
        for (int d = 0; d < s->ndim; d++) {
            cr_expect_eq(t->shape[d], s->shape[d], "%s dim %d", s->name, d);
            nelem *= (size_t)s->shape[d];
        }
        cr_expect_eq(t->nelem, nelem, "%s", s->name);
        cr_assert_eq(t->nbytes, spec_bytes(s), "%s", s->name);
        cr_expect_eq(memcmp(t->data, datas[i], t->nbytes), 0, "%s data", s->name);
        /* insertion order with contiguous offsets == data-offset order here */
        cr_expect_eq(skv_st_at(st, i), t, "%s order", s->name);
    }
    cr_expect_null(skv_st_at(st, N_SPECS));
    cr_expect_null(skv_st_find(st, "nope"));
    cr_expect_null(skv_st_find(st, "w.f3"));
    cr_expect_str_eq(skv_st_meta(st, "format"), "pt");
    cr_expect_str_eq(skv_st_meta(st, "quote\"key"), "line\nbreak \xe2\x82\xac \\ end");
    cr_expect_str_eq(skv_st_meta(st, ""), "empty key");
    cr_expect_null(skv_st_meta(st, "missing"));
}

Test(safetensors, round_trip_of_every_dtype_is_exact)
{
    uint8_t *datas[N_SPECS];
    skv_st_writer *w = make_writer(datas);
    uint8_t *buf = NULL;
    size_t len = 0;
    cr_assert_eq(skv_stw_serialize(w, &buf, &len), 0, "%s", seqkv_error_detail());
    skv_stw_free(w);

    /* Python-compatible layout: compact JSON, __metadata__ first, header
     * padded with spaces to 8 bytes */
    uint64_t n = skv_load64_le(buf);
    cr_expect_eq(n % 8, 0);
    cr_expect_eq(memcmp(buf + 8, "{\"__metadata__\":{\"format\":\"pt\",", 31), 0);
    size_t close = 8 + (size_t)n;
    while (buf[close - 1] == ' ')
        close--;
    cr_expect_eq(buf[close - 1], '}');
    cr_expect_lt(8 + (size_t)n - close, 8);
    cr_expect(contains(buf + 8, (size_t)n,
                       "\"w.f32\":{\"dtype\":\"F32\",\"shape\":[3,5],\"data_offsets\":[0,60]}"));
    cr_expect(contains(buf + 8, (size_t)n, "\"\\u0001\\u001f\""));
    cr_expect(contains(buf + 8, (size_t)n, "\"scalar\":{\"dtype\":\"F32\",\"shape\":[],"));

    skv_st *st = NULL;
    cr_assert_eq(skv_st_parse(buf, len, &st), 0, "%s", seqkv_error_detail());
    check_round_trip(st, datas);
    skv_st_free(st);
    skv_free(buf);
    for (size_t i = 0; i < N_SPECS; i++)
        free(datas[i]);
}

Test(safetensors, file_write_and_open_round_trip)
{
    uint8_t *datas[N_SPECS];
    skv_st_writer *w = make_writer(datas);
    const char *dir = tu_tmpdir();
    char path[4200];
    snprintf(path, sizeof path, "%s/rt.safetensors", dir);
    cr_assert_eq(skv_stw_write(w, path), 0, "%s", seqkv_error_detail());
    skv_stw_free(w);
    skv_st *st = NULL;
    cr_assert_eq(skv_st_open(path, &st), 0, "%s", seqkv_error_detail());
    check_round_trip(st, datas);
    skv_st_free(st);
    for (size_t i = 0; i < N_SPECS; i++)
        free(datas[i]);
    remove(path);
    remove(dir);

    cr_expect_eq(skv_st_open("/nonexistent/x.safetensors", &st), SKV_ERR_IO);
    cr_expect_null(st);
}

Test(safetensors, empty_writer_gives_an_empty_valid_file)
{
    skv_st_writer *w = NULL;
    cr_assert_eq(skv_stw_create(&w), 0);
    uint8_t *buf;
    size_t len;
    cr_assert_eq(skv_stw_serialize(w, &buf, &len), 0);
    cr_expect_eq(len, 16);
    cr_expect_eq(memcmp(buf + 8, "{}      ", 8), 0);
    skv_st *st;
    cr_assert_eq(skv_st_parse(buf, len, &st), 0);
    cr_expect_eq(skv_st_count(st), 0);
    cr_expect_null(skv_st_at(st, 0));
    cr_expect_null(skv_st_find(st, "x"));
    cr_expect_null(skv_st_meta(st, "x"));
    skv_st_free(st);
    skv_free(buf);
    skv_stw_free(w);
    skv_stw_free(NULL);
    skv_st_free(NULL);
}

Test(safetensors, thousands_of_tensors_are_found_by_name)
{
    enum { N = 5000 };
    skv_st_writer *w = NULL;
    cr_assert_eq(skv_stw_create(&w), 0);
    char name[64];
    for (int i = 0; i < N; i++) {
        int32_t v = i * 7;
        int64_t shape[1] = {1};
        snprintf(name, sizeof name, "model.layers.%d.weight", i);
        cr_assert_eq(skv_stw_add(w, name, SEQKV_DT_I32, 1, shape, &v, 4), 0);
    }
    int64_t shape[1] = {1};
    int32_t v = 0;
    cr_expect_eq(skv_stw_add(w, "model.layers.77.weight", SEQKV_DT_I32, 1, shape, &v, 4),
                 SKV_ERR_ARG);
    uint8_t *buf;
    size_t len;
    cr_assert_eq(skv_stw_serialize(w, &buf, &len), 0);
    skv_stw_free(w);
    skv_st *st;
    cr_assert_eq(skv_st_parse(buf, len, &st), 0, "%s", seqkv_error_detail());
    cr_assert_eq(skv_st_count(st), N);
    for (int i = N - 1; i >= 0; i--) {
        snprintf(name, sizeof name, "model.layers.%d.weight", i);
        const skv_tensor *t = skv_st_find(st, name);
        cr_assert_not_null(t, "%s", name);
        cr_assert_eq((int32_t)skv_load32_le(t->data), i * 7);
        cr_assert_eq(skv_st_at(st, (size_t)i), t);
    }
    skv_st_free(st);
    skv_free(buf);
}

Test(safetensors, writer_rejects_bad_arguments)
{
    skv_st_writer *w = NULL;
    cr_assert_eq(skv_stw_create(&w), 0);
    uint8_t d[64] = {0};
    int64_t s2[2] = {2, 2};
    int64_t neg[1] = {-1};
    int64_t s9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    int64_t huge[2] = {INT64_MAX, INT64_MAX};
    cr_expect_eq(skv_stw_add(w, "a", SEQKV_DT_F32, 2, s2, d, 16), 0);
    cr_expect_eq(skv_stw_add(w, "a", SEQKV_DT_F32, 2, s2, d, 16), SKV_ERR_ARG, "duplicate");
    cr_expect_eq(skv_stw_add(w, "b", SEQKV_DT_F32, 2, s2, d, 15), SKV_ERR_SHAPE);
    cr_expect_eq(skv_stw_add(w, "b", SEQKV_DT_BF16, 2, s2, d, 16), SKV_ERR_SHAPE);
    cr_expect_eq(skv_stw_add(w, "b", SEQKV_DT_F32, 2, huge, d, 16), SKV_ERR_SHAPE);
    cr_expect_eq(skv_stw_add(w, "b", SEQKV_DT_F32, 1, neg, d, 0), SKV_ERR_ARG);
    cr_expect_eq(skv_stw_add(w, "b", SEQKV_DT_F32, 9, s9, d, 4), SKV_ERR_ARG);
    cr_expect_eq(skv_stw_add(w, "b", SEQKV_DT_F32, -1, s2, d, 4), SKV_ERR_ARG);
    cr_expect_eq(skv_stw_add(w, "b", (seqkv_dtype)99, 2, s2, d, 16), SKV_ERR_ARG);
    cr_expect_eq(skv_stw_add(w, "", SEQKV_DT_F32, 2, s2, d, 16), SKV_ERR_ARG);
    cr_expect_eq(skv_stw_add(w, "__metadata__", SEQKV_DT_F32, 2, s2, d, 16), SKV_ERR_ARG);
    cr_expect_eq(skv_stw_add(w, "bad\xff", SEQKV_DT_F32, 2, s2, d, 16), SKV_ERR_ARG);
    cr_expect_eq(skv_stw_add(w, "bad\xed\xa0\x80", SEQKV_DT_F32, 2, s2, d, 16), SKV_ERR_ARG);
    cr_expect_eq(skv_stw_add(w, "b", SEQKV_DT_F32, 2, s2, NULL, 16), SKV_ERR_ARG);
    cr_expect_eq(skv_stw_add(w, NULL, SEQKV_DT_F32, 2, s2, d, 16), SKV_ERR_ARG);
    cr_expect_eq(skv_stw_meta(w, "k", "v"), 0);
    cr_expect_eq(skv_stw_meta(w, "k", "w"), SKV_ERR_ARG, "duplicate metadata key");
    cr_expect_eq(skv_stw_meta(w, "x", "\xc0\x80"), SKV_ERR_ARG);
    cr_expect_eq(skv_stw_meta(w, NULL, "v"), SKV_ERR_ARG);
    /* the failures left the writer as it was */
    uint8_t *buf;
    size_t len;
    cr_assert_eq(skv_stw_serialize(w, &buf, &len), 0);
    skv_st *st;
    cr_assert_eq(skv_st_parse(buf, len, &st), 0);
    cr_expect_eq(skv_st_count(st), 1);
    cr_expect_str_eq(skv_st_meta(st, "k"), "v");
    skv_st_free(st);
    skv_free(buf);
    skv_stw_free(w);
}

/* ========================================================================
 * safetensors: the reader rejects malformed files
 * ====================================================================== */

Test(safetensors, every_truncation_of_a_valid_file_fails)
{
    uint8_t *datas[N_SPECS];
    skv_st_writer *w = make_writer(datas);
    uint8_t *buf;
    size_t len;
    cr_assert_eq(skv_stw_serialize(w, &buf, &len), 0);
    skv_stw_free(w);
    for (size_t cut = 0; cut < len; cut++) {
        /* an exact-size copy so ASan sees any read past the prefix */
        uint8_t *p = malloc(cut ? cut : 1);
        memcpy(p, buf, cut);
        skv_st *st = NULL;
        int rc = skv_st_parse(p, cut, &st);
        cr_assert(rc == SKV_ERR_FORMAT || rc == SKV_ERR_RANGE,
                  "prefix %zu of %zu: %s (%s)", cut, len, seqkv_strerror(rc),
                  seqkv_error_detail());
        cr_assert_null(st);
        free(p);
    }
    skv_free(buf);
    for (size_t i = 0; i < N_SPECS; i++)
        free(datas[i]);
}

Test(safetensors, header_length_checks)
{
    uint8_t b[16] = {0};
    skv_st *st = NULL;
    cr_expect_eq(skv_st_parse(b, 0, &st), SKV_ERR_FORMAT);
    cr_expect_eq(skv_st_parse(b, 7, &st), SKV_ERR_FORMAT);
    cr_expect_eq(skv_st_parse(b, 8, &st), SKV_ERR_FORMAT, "empty header is not JSON");
    skv_store64_le(b, 9);
    cr_expect_eq(skv_st_parse(b, 16, &st), SKV_ERR_RANGE);
    skv_store64_le(b, (uint64_t)SKV_ST_MAX_HEADER + 1);
    cr_expect_eq(skv_st_parse(b, 16, &st), SKV_ERR_TOO_LARGE);
    skv_store64_le(b, UINT64_MAX);
    cr_expect_eq(skv_st_parse(b, 16, &st), SKV_ERR_TOO_LARGE);
    skv_store64_le(b, 8);
    memcpy(b + 8, "{}      ", 8);
    cr_expect_eq(skv_st_parse(b, 16, &st), 0);
    skv_st_free(st);
    cr_expect_eq(skv_st_parse(NULL, 16, &st), SKV_ERR_ARG);
}

#define T1(dt, shape, off) "{\"t\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":" off "}}"

Test(safetensors, malformed_headers_fail_with_the_documented_error)
{
    static const struct {
        const char *header;
        size_t data_len;
        int rc;
    } cases[] = {
        /* header is not an object */
        {"[]", 0, SKV_ERR_FORMAT},
        {"\"t\"", 0, SKV_ERR_FORMAT},
        {"null", 0, SKV_ERR_FORMAT},
        {"{\"t\":1}", 0, SKV_ERR_FORMAT},
        {"{\"t\":[]}", 0, SKV_ERR_FORMAT},
        {"{", 0, SKV_ERR_FORMAT},
        {"{}x", 0, SKV_ERR_FORMAT},
        /* dtype */
        {T1("F33", "[2]", "[0,8]"), 8, SKV_ERR_FORMAT},
        {T1("f32", "[2]", "[0,8]"), 8, SKV_ERR_FORMAT},
        {T1("", "[2]", "[0,8]"), 8, SKV_ERR_FORMAT},
        {T1("F64", "[1]", "[0,8]"), 8, SKV_ERR_UNSUPPORTED},
        {T1("I64", "[1]", "[0,8]"), 8, SKV_ERR_UNSUPPORTED},
        {T1("U8", "[8]", "[0,8]"), 8, SKV_ERR_UNSUPPORTED},
        {T1("BOOL", "[8]", "[0,8]"), 8, SKV_ERR_UNSUPPORTED},
        {"{\"t\":{\"dtype\":32,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, SKV_ERR_FORMAT},
        /* shape */
        {T1("F32", "[3]", "[0,8]"), 8, SKV_ERR_SHAPE},
        {T1("F32", "[]", "[0,8]"), 8, SKV_ERR_SHAPE},
        {T1("F32", "[2,0]", "[0,8]"), 8, SKV_ERR_SHAPE},
        {T1("F32", "[-2]", "[0,8]"), 8, SKV_ERR_FORMAT},
        {T1("F32", "[2.0]", "[0,8]"), 8, SKV_ERR_FORMAT},
        {T1("F32", "[2e0]", "[0,8]"), 8, SKV_ERR_FORMAT},
        {T1("F32", "[\"2\"]", "[0,8]"), 8, SKV_ERR_FORMAT},
        {T1("F32", "2", "[0,8]"), 8, SKV_ERR_FORMAT},
        {T1("F32", "[1,1,1,1,1,1,1,1,2]", "[0,8]"), 8, SKV_ERR_TOO_LARGE},
        {T1("F32", "[4611686018427387904,4611686018427387904]", "[0,8]"), 8, SKV_ERR_SHAPE},
        {T1("F32", "[4611686018427387904]", "[0,8]"), 8, SKV_ERR_SHAPE},
        {T1("F32", "[99999999999999999999]", "[0,8]"), 8, SKV_ERR_SHAPE},
        /* data_offsets */
        {T1("F32", "[4]", "[0,16]"), 8, SKV_ERR_RANGE},
        {T1("F32", "[2]", "[8,16]"), 8, SKV_ERR_RANGE},
        {T1("F32", "[0]", "[9,9]"), 8, SKV_ERR_RANGE},
        {T1("F32", "[2]", "[8,0]"), 16, SKV_ERR_RANGE},
        {T1("F32", "[2]", "[-8,0]"), 16, SKV_ERR_RANGE},
        {T1("F32", "[2]", "[0,1e30]"), 16, SKV_ERR_RANGE},
        {T1("F32", "[2]", "[0,18446744073709551616]"), 16, SKV_ERR_RANGE},
        {T1("F32", "[2]", "[0,8.0]"), 8, SKV_ERR_FORMAT},
        {T1("F32", "[2]", "[0]"), 8, SKV_ERR_FORMAT},
        {T1("F32", "[2]", "[0,8,8]"), 8, SKV_ERR_FORMAT},
        {T1("F32", "[2]", "{}"), 8, SKV_ERR_FORMAT},
        {T1("F32", "[2]", "[null,8]"), 8, SKV_ERR_FORMAT},
        {T1("F32", "[2]", "[0,4]"), 8, SKV_ERR_SHAPE},
        /* fields */
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, SKV_ERR_FORMAT},
        {"{\"t\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, SKV_ERR_FORMAT},
        {"{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, SKV_ERR_FORMAT},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8,
         SKV_ERR_FORMAT},
        {"{\"t\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
         8, SKV_ERR_FORMAT},
        {"{\"\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, SKV_ERR_FORMAT},
        /* overlap and duplicates */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
         16, SKV_ERR_RANGE},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         16, SKV_ERR_RANGE},
        {"{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
         16, SKV_ERR_RANGE},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
         16, SKV_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
         16, SKV_ERR_FORMAT},
        /* metadata */
        {"{\"__metadata__\":{\"a\":1}}", 0, SKV_ERR_FORMAT},
        {"{\"__metadata__\":{\"a\":null}}", 0, SKV_ERR_FORMAT},
        {"{\"__metadata__\":{\"a\":{\"b\":\"c\"}}}", 0, SKV_ERR_FORMAT},
        {"{\"__metadata__\":[]}", 0, SKV_ERR_FORMAT},
        {"{\"__metadata__\":\"x\"}", 0, SKV_ERR_FORMAT},
        {"{\"__metadata__\":{\"a\":\"b\",\"a\":\"c\"}}", 0, SKV_ERR_FORMAT},
        {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, SKV_ERR_FORMAT},
        /* JSON-level failures inside the header */
        {"{\"t\\ud800\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
         SKV_ERR_FORMAT},
        {"{\"__metadata__\":{\"a\":\"\\u0000\"}}", 0, SKV_ERR_FORMAT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = st_rc(cases[i].header, cases[i].data_len);
        cr_expect_eq(rc, cases[i].rc, "#%zu %s: expected %s, got %s (%s)", i,
                     cases[i].header, seqkv_strerror(cases[i].rc), seqkv_strerror(rc),
                     seqkv_error_detail());
    }
}

Test(safetensors, accepts_the_edges_of_the_format)
{
    static const struct {
        const char *header;
        size_t data_len;
        size_t count;
    } cases[] = {
        {"{}", 0, 0},
        {"  \n{ }\t", 0, 0},
        {"{\"__metadata__\":{}}", 0, 0},
        /* gaps and trailing data are allowed */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 32, 1},
        /* zero-size tensors may sit anywhere, even inside another */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
         "\"e\":{\"dtype\":\"BF16\",\"shape\":[0,3],\"data_offsets\":[8,8]},"
         "\"f\":{\"dtype\":\"I32\",\"shape\":[0],\"data_offsets\":[16,16]}}",
         16, 3},
        /* fields in any order, shape dims of zero next to huge ones */
        {"{\"a\":{\"data_offsets\":[0,0],\"shape\":[0,4611686018427387904],\"dtype\":\"F16\"}}",
         0, 1},
        /* adjacent, not overlapping; listed out of order */
        {"{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
         8, 2},
        /* any non-empty name, including one that looks like a key */
        {"{\"dtype\":{\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[0,1]},"
         "\"\\u00e9 \\\"x\\\"\":{\"dtype\":\"I32\",\"shape\":[1,1],\"data_offsets\":[4,8]}}",
         8, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len;
        uint8_t *b = st_image(cases[i].header, cases[i].data_len, &len);
        skv_st *st = NULL;
        int rc = skv_st_parse(b, len, &st);
        cr_expect_eq(rc, 0, "#%zu %s: %s", i, cases[i].header, seqkv_error_detail());
        if (rc == 0) {
            cr_expect_eq(skv_st_count(st), cases[i].count, "#%zu", i);
            skv_st_free(st);
        }
        free(b);
    }
}

Test(safetensors, tensors_are_listed_in_data_offset_order)
{
    const char *h = "{\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]},"
                    "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]},"
                    "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
                    "\"b\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,8]}}";
    size_t len;
    uint8_t *b = st_image(h, 16, &len);
    skv_st *st;
    cr_assert_eq(skv_st_parse(b, len, &st), 0, "%s", seqkv_error_detail());
    const char *order[] = {"z", "b", "c", "a"};
    for (size_t i = 0; i < 4; i++)
        cr_expect_str_eq(skv_st_at(st, i)->name, order[i]);
    const skv_tensor *t = skv_st_find(st, "a");
    cr_expect_eq(t->data, b + len - 4);
    cr_expect_eq(t->data[0], 12);
    cr_expect_eq(skv_st_find(st, "b")->nelem, 4);
    skv_st_free(st);
    free(b);
}

/* ========================================================================
 * Golden files
 * ====================================================================== */

Test(golden, good_v1_decodes_to_the_known_tensors)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/good_v1.safetensors", golden_dir());
    skv_st *st = NULL;
    int rc = skv_st_open(path, &st);
    cr_assert_eq(rc, 0, "%s: %s", path, seqkv_error_detail());
    cr_assert_eq(skv_st_count(st), 7);
    cr_expect_str_eq(skv_st_meta(st, "format"), "pt");
    cr_expect_str_eq(skv_st_meta(st, "seqkv"), "golden v1");
    cr_expect_str_eq(skv_st_meta(st, "note"), "\xc3\xa9\"q\"");

    const char *order[] = {"a.f32", "b.bf16", "c.f16", "d.f8", "e.i32", "z.empty", "s.scalar"};
    for (size_t i = 0; i < 7; i++)
        cr_expect_str_eq(skv_st_at(st, i)->name, order[i]);

    const skv_tensor *t = skv_st_find(st, "a.f32");
    cr_assert_not_null(t);
    cr_expect_eq(t->dtype, SEQKV_DT_F32);
    cr_expect_eq(t->ndim, 2);
    cr_expect_eq(t->shape[0], 2);
    cr_expect_eq(t->shape[1], 3);
    cr_expect_eq(t->nelem, 6);
    const float fw[6] = {-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f};
    for (int i = 0; i < 6; i++)
        cr_expect_eq(skv_bits_f32(skv_load32_le(t->data + 4 * i)), fw[i]);

    t = skv_st_find(st, "b.bf16");
    cr_assert_not_null(t);
    cr_expect_eq(t->dtype, SEQKV_DT_BF16);
    const uint16_t bw[4] = {0x3F80, 0xC000, 0x7F80, 0x0001};
    cr_assert_eq(t->nbytes, 8);
    for (int i = 0; i < 4; i++)
        cr_expect_eq(skv_load16_le(t->data + 2 * i), bw[i]);

    t = skv_st_find(st, "c.f16");
    cr_assert_not_null(t);
    cr_expect_eq(t->dtype, SEQKV_DT_F16);
    cr_expect_eq(t->ndim, 2);
    const uint16_t hw[4] = {0x3C00, 0xBC00, 0x7BFF, 0x0001};
    for (int i = 0; i < 4; i++)
        cr_expect_eq(skv_load16_le(t->data + 2 * i), hw[i]);

    t = skv_st_find(st, "d.f8");
    cr_assert_not_null(t);
    cr_expect_eq(t->dtype, SEQKV_DT_F8E4M3);
    cr_assert_eq(t->nbytes, 3);
    cr_expect_eq(t->data[0], 0x38);
    cr_expect_eq(t->data[1], 0xB8);
    cr_expect_eq(t->data[2], 0x7E);

    t = skv_st_find(st, "e.i32");
    cr_assert_not_null(t);
    cr_expect_eq(t->dtype, SEQKV_DT_I32);
    cr_expect_eq((int32_t)skv_load32_le(t->data), -1);
    cr_expect_eq((int32_t)skv_load32_le(t->data + 4), 0);
    cr_expect_eq((int32_t)skv_load32_le(t->data + 8), INT32_MAX);

    t = skv_st_find(st, "z.empty");
    cr_assert_not_null(t);
    cr_expect_eq(t->ndim, 2);
    cr_expect_eq(t->shape[0], 0);
    cr_expect_eq(t->shape[1], 4);
    cr_expect_eq(t->nelem, 0);
    cr_expect_eq(t->nbytes, 0);

    t = skv_st_find(st, "s.scalar");
    cr_assert_not_null(t);
    cr_expect_eq(t->ndim, 0);
    cr_expect_eq(t->nelem, 1);
    cr_expect_eq(skv_bits_f32(skv_load32_le(t->data)), 3.25f);
    skv_st_free(st);
}

Test(golden, good_v1_survives_a_rewrite_through_the_writer)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/good_v1.safetensors", golden_dir());
    skv_st *st = NULL;
    cr_assert_eq(skv_st_open(path, &st), 0);
    skv_st_writer *w;
    cr_assert_eq(skv_stw_create(&w), 0);
    const char *keys[] = {"format", "seqkv", "note"};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(skv_stw_meta(w, keys[i], skv_st_meta(st, keys[i])), 0);
    for (size_t i = 0; i < skv_st_count(st); i++) {
        const skv_tensor *t = skv_st_at(st, i);
        cr_assert_eq(skv_stw_add(w, t->name, t->dtype, t->ndim, t->shape, t->data, t->nbytes),
                     0);
    }
    uint8_t *buf;
    size_t len;
    cr_assert_eq(skv_stw_serialize(w, &buf, &len), 0);
    skv_stw_free(w);
    /* Python's json module and our writer agree byte for byte */
    size_t glen;
    uint8_t *gold = tu_read(path, &glen);
    cr_assert_not_null(gold);
    cr_expect_eq(len, glen);
    cr_expect_eq(memcmp(buf, gold, len < glen ? len : glen), 0);
    free(gold);
    skv_free(buf);
    skv_st_free(st);
}

Test(golden, bad_files_fail_with_the_expected_error)
{
    static tu_expected ex[128];
    int n = tu_golden_expected(golden_dir(), ex, 128);
    cr_assert_gt(n, 15, "EXPECTED missing or malformed in %s", golden_dir());
    for (int i = 0; i < n; i++) {
        const char *fname = ex[i].file, *ename = ex[i].name;
        int want = ex[i].code;
        cr_assert_neq(want, 1, "unknown error name %s", ename);
        const char *fpath = tu_path(golden_dir(), fname);
        skv_st *st = NULL;
        int rc = skv_st_open(fpath, &st);
        cr_expect_eq(rc, want, "%s: expected %s, got %s (%s)", fname, ename,
                     seqkv_strerror(rc), seqkv_error_detail());
        if (rc == 0)
            skv_st_free(st);
        /* the same bytes through skv_st_parse give the same answer */
        size_t len;
        uint8_t *b = tu_read(fpath, &len);
        cr_assert_not_null(b);
        rc = skv_st_parse(b, len, &st);
        cr_expect_eq(rc, want, "%s via parse", fname);
        if (rc == 0)
            skv_st_free(st);
        free(b);
    }
    const char *unlisted = tu_golden_unlisted(golden_dir(), ex, n);
    cr_expect_null(unlisted, "%s is not listed in EXPECTED", unlisted);
}

/* ========================================================================
 * Allocation failure
 * ====================================================================== */

Test(alloc_failure, parsing_a_valid_file_fails_cleanly_at_every_allocation)
{
    uint8_t *datas[N_SPECS];
    skv_st_writer *w = make_writer(datas);
    uint8_t *buf;
    size_t len;
    cr_assert_eq(skv_stw_serialize(w, &buf, &len), 0);
    skv_stw_free(w);
    long fails = 0;
    for (long k = 0;; k++) {
        skv_st *st = NULL;
        skv_alloc_fail_after(k, 0);
        int rc = skv_st_parse(buf, len, &st);
        skv_alloc_fail_after(-1, 0);
        if (rc == 0) {
            check_round_trip(st, datas);
            skv_st_free(st);
            break;
        }
        cr_assert_eq(rc, SKV_ERR_NOMEM, "allocation %ld: %s", k, seqkv_strerror(rc));
        cr_assert_null(st);
        fails++;
        cr_assert_lt(k, 1000);
    }
    cr_expect_geq(fails, 5);
    skv_free(buf);
    for (size_t i = 0; i < N_SPECS; i++)
        free(datas[i]);
}

Test(alloc_failure, opening_the_golden_file_fails_cleanly_at_every_allocation)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/good_v1.safetensors", golden_dir());
    for (long k = 0;; k++) {
        skv_st *st = NULL;
        skv_alloc_fail_after(k, 0);
        int rc = skv_st_open(path, &st);
        skv_alloc_fail_after(-1, 0);
        if (rc == 0) {
            cr_expect_eq(skv_st_count(st), 7);
            skv_st_free(st);
            break;
        }
        cr_assert_eq(rc, SKV_ERR_NOMEM, "allocation %ld: %s", k, seqkv_strerror(rc));
        cr_assert_null(st);
        cr_assert_lt(k, 1000);
    }
}

Test(alloc_failure, writing_fails_cleanly_at_every_allocation)
{
    uint8_t *datas[N_SPECS];
    for (size_t i = 0; i < N_SPECS; i++) {
        size_t nb = spec_bytes(&round_trip_specs[i]);
        datas[i] = malloc(nb ? nb : 1);
        tu_fill_bytes(datas[i], nb, (uint32_t)i + 1);
    }
    for (long k = 0;; k++) {
        skv_st_writer *w = NULL;
        uint8_t *buf = NULL;
        size_t len = 0;
        skv_alloc_fail_after(k, 0);
        int rc = skv_stw_create(&w);
        for (size_t i = 0; rc == 0 && i < N_SPECS; i++) {
            const tspec *s = &round_trip_specs[i];
            rc = skv_stw_add(w, s->name, s->dt, s->ndim, s->shape, datas[i], spec_bytes(s));
        }
        if (rc == 0)
            rc = skv_stw_meta(w, "format", "pt");
        if (rc == 0)
            rc = skv_stw_meta(w, "quote\"key", "line\nbreak \xe2\x82\xac \\ end");
        if (rc == 0)
            rc = skv_stw_meta(w, "", "empty key");
        if (rc == 0)
            rc = skv_stw_serialize(w, &buf, &len);
        skv_alloc_fail_after(-1, 0);
        skv_stw_free(w);
        if (rc == 0) {
            skv_st *st;
            cr_assert_eq(skv_st_parse(buf, len, &st), 0);
            check_round_trip(st, datas);
            skv_st_free(st);
            skv_free(buf);
            break;
        }
        cr_assert_eq(rc, SKV_ERR_NOMEM, "allocation %ld: %s", k, seqkv_strerror(rc));
        cr_assert_null(buf);
        cr_assert_lt(k, 1000);
    }
    for (size_t i = 0; i < N_SPECS; i++)
        free(datas[i]);
}
