/* Criterion suite for the tensor module: strict JSON, safetensors read and
 * write (golden and known-bad files), the KV file layout, and allocation
 * failure on every path. */
#include <criterion/criterion.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "skv_tensor.h"
#include "testutil.h"

/* ========================================================================
 * Helpers
 * ====================================================================== */

static int json_rc(const char *text, size_t len)
{
    skv_json *j = NULL;
    int rc = skv_json_parse(text, len, &j);
    if (rc == 0)
        skv_json_free(j);
    else
        cr_assert_null(j);
    return rc;
}

static skv_json *json_ok(const char *text)
{
    skv_json *j = NULL;
    int rc = skv_json_parse(text, strlen(text), &j);
    cr_assert_eq(rc, 0, "parse of %s failed: %s (%s)", text, skv_strerror(rc),
                 skv_error_detail());
    return j;
}

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

/* Deterministic test bytes. */
static void fill_bytes(uint8_t *p, size_t n, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (uint8_t)(x >> 7);
    }
}

/* ========================================================================
 * JSON
 * ====================================================================== */

Test(json, accepts_valid_documents)
{
    static const char *const good[] = {
        "0", "-0", "1", "-1", "123", "1.5", "-0.25", "1e10", "1E+2", "1e-2", "0.0e0",
        "true", "false", "null", "\"\"", "\"abc\"", "[]", "{}", "[[]]", "[{}]",
        " \t\r\n[ 1 , 2 ,3 ] \n", "{\"a\":1,\"b\":[true,false,null],\"c\":{\"d\":\"e\"}}",
        "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"\\u0041\\u00e9\\u20ac\"", "\"\\ud83d\\ude00\"",
        "\"\\u0001\"", "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"", "\"\x7f\"",
        "{\"\":0}", "{\"a\":1,\"a\":2}", "[\"\\uDBFF\\uDFFF\"]", "1e400",
        "123456789012345678901234567890",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        int rc = json_rc(good[i], strlen(good[i]));
        cr_expect_eq(rc, 0, "rejected valid #%zu %s: %s", i, good[i], skv_error_detail());
    }
}

Test(json, rejects_invalid_documents_with_format_error)
{
    static const char *const bad[] = {
        "", " ", "[", "{", "]", "}", "[1,]", "[,1]", "[1,,2]", "{\"a\":1,}", "{,}",
        "[1 2]", "{\"a\" 1}", "{\"a\":}", "{1:2}", "{a:1}", "{'a':1}", "01", "-01", "00",
        "+1", ".5", "1.", "-", "-.5", "1e", "1e+", "1.e5", "0x10", "NaN", "Infinity",
        "-Infinity", "nul", "tru", "fals", "True", "NULL", "\"abc", "\"\\\"", "\"\\x\"",
        "\"\\u12\"", "\"\\u12g4\"", "\"\\U0041\"", "\"\\ud800\"", "\"\\udc00\"",
        "\"\\ud800\\u0041\"", "\"\\ud800x\"", "\"\\udbff\\ud800\"", "\"\\u0000\"",
        "\"a\tb\"", "\"a\nb\"", "\"\x01\"", "\"\x1f\"", "\"\xff\"", "\"\x80\"",
        "\"\xc0\xaf\"", "\"\xc1\xbf\"", "\"\xe0\x80\xaf\"", "\"\xed\xa0\x80\"",
        "\"\xf4\x90\x80\x80\"", "\"\xf5\x80\x80\x80\"", "\"\xe2\x82\"", "\"\xe2\x82",
        "\"\xf0\x9f\x98\"", "[1]x", "{} {}", "1 2", "[1]]", "/* c */1", "1 // c",
        "\xef\xbb\xbf{}", "[1,2", "{\"a\":1", "'a'", "[\x0b]",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = json_rc(bad[i], strlen(bad[i]));
        cr_expect_eq(rc, SKV_ERR_FORMAT, "#%zu %s: expected FORMAT, got %s", i, bad[i],
                     skv_strerror(rc));
    }
    /* a NUL byte inside the given length is never valid JSON */
    cr_expect_eq(json_rc("[1]\0", 4), SKV_ERR_FORMAT);
    cr_expect_eq(json_rc("\"a\0b\"", 5), SKV_ERR_FORMAT);
}

static char *nested(int depth, char open, char close)
{
    char *s = malloc((size_t)depth * 2 + 1);
    cr_assert_not_null(s);
    memset(s, open, (size_t)depth);
    memset(s + depth, close, (size_t)depth);
    s[depth * 2] = 0;
    return s;
}

Test(json, nesting_up_to_the_depth_cap_is_accepted_and_beyond_is_too_large)
{
    char *ok = nested(SKV_JSON_MAX_DEPTH, '[', ']');
    cr_expect_eq(json_rc(ok, strlen(ok)), 0, "%s", skv_error_detail());
    free(ok);
    char *deep = nested(SKV_JSON_MAX_DEPTH + 1, '[', ']');
    cr_expect_eq(json_rc(deep, strlen(deep)), SKV_ERR_TOO_LARGE);
    free(deep);
    char *very = nested(100000, '[', ']');
    cr_expect_eq(json_rc(very, strlen(very)), SKV_ERR_TOO_LARGE);
    free(very);

    /* objects count as well */
    char buf[SKV_JSON_MAX_DEPTH * 6 + 8];
    size_t n = 0;
    for (int i = 0; i < SKV_JSON_MAX_DEPTH + 1; i++)
        n += (size_t)sprintf(buf + n, "{\"a\":");
    n += (size_t)sprintf(buf + n, "1");
    for (int i = 0; i < SKV_JSON_MAX_DEPTH + 1; i++)
        buf[n++] = '}';
    cr_expect_eq(json_rc(buf, n), SKV_ERR_TOO_LARGE);
    /* unterminated deep nesting: the cap is hit before the end of input */
    char *open_only = nested(SKV_JSON_MAX_DEPTH + 5, '[', ']');
    cr_expect_eq(json_rc(open_only, SKV_JSON_MAX_DEPTH + 5), SKV_ERR_TOO_LARGE);
    free(open_only);
}

Test(json, integers_are_exact_within_int64)
{
    static const struct {
        const char *text;
        int64_t v;
    } ints[] = {
        {"0", 0},
        {"7", 7},
        {"-42", -42},
        {"9007199254740993", 9007199254740993LL}, /* not a double */
        {"9223372036854775807", INT64_MAX},
        {"-9223372036854775808", INT64_MIN},
        {"-9223372036854775807", -INT64_MAX},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        skv_json *j = json_ok(ints[i].text);
        cr_expect_eq(j->type, SKV_JSON_NUM);
        cr_expect_eq(j->is_int, 1, "%s", ints[i].text);
        cr_expect_eq(j->i64, ints[i].v, "%s: %lld", ints[i].text, (long long)j->i64);
        cr_expect_eq(j->num, (double)ints[i].v);
        skv_json_free(j);
    }
}

Test(json, numbers_outside_int64_or_with_fraction_are_not_int)
{
    static const struct {
        const char *text;
        double v;
    } nums[] = {
        {"9223372036854775808", 9223372036854775808.0},
        {"-9223372036854775809", -9223372036854775809.0},
        {"18446744073709551616", 18446744073709551616.0},
        {"123456789012345678901234567890", 123456789012345678901234567890.0},
        {"1.0", 1.0},
        {"1e2", 100.0},
        {"2.5E-3", 2.5e-3},
        {"-0.0", -0.0},
        {"1e400", INFINITY},
    };
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        skv_json *j = json_ok(nums[i].text);
        cr_expect_eq(j->type, SKV_JSON_NUM);
        cr_expect_eq(j->is_int, 0, "%s", nums[i].text);
        cr_expect_eq(j->num, nums[i].v, "%s: %.17g", nums[i].text, j->num);
        skv_json_free(j);
    }
    /* -0 is an integer zero whose double keeps the sign */
    skv_json *j = json_ok("-0");
    cr_expect_eq(j->is_int, 1);
    cr_expect_eq(j->i64, 0);
    cr_expect(signbit(j->num));
    skv_json_free(j);

    /* a very long literal goes through the heap copy for strtod */
    char big[260];
    big[0] = '1';
    memset(big + 1, '0', 200);
    big[201] = 0;
    j = json_ok(big);
    cr_expect_eq(j->is_int, 0);
    cr_expect_eq(j->num, 1e200);
    skv_json_free(j);
}

Test(json, number_parsing_stops_at_the_given_length)
{
    skv_json *j = NULL;
    cr_assert_eq(skv_json_parse("12345", 2, &j), 0);
    cr_expect_eq(j->i64, 12);
    cr_expect_eq(j->num, 12.0);
    skv_json_free(j);
    cr_assert_eq(skv_json_parse("1.5e3", 3, &j), 0);
    cr_expect_eq(j->num, 1.5);
    skv_json_free(j);
}

Test(json, strings_decode_escapes_and_surrogate_pairs_to_utf8)
{
    skv_json *j = json_ok("\"a\\u00e9\\u20ac\\ud83d\\ude00\\n\\\"\\/\\\\z\"");
    cr_assert_eq(j->type, SKV_JSON_STR);
    const char *want = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\n\"/\\z";
    cr_expect_eq(j->str_len, strlen(want));
    cr_expect_str_eq(j->str, want);
    skv_json_free(j);

    j = json_ok("\"\xf0\x9f\x98\x80 raw\"");
    cr_expect_str_eq(j->str, "\xf0\x9f\x98\x80 raw");
    cr_expect_eq(j->str_len, 8);
    skv_json_free(j);
}

Test(json, objects_and_arrays_expose_members_in_order)
{
    skv_json *j = json_ok("{\"k\\u0031\":[10,\"x\",{\"z\":null}],\"b\":true,\"k1\":false}");
    cr_assert_eq(j->type, SKV_JSON_OBJ);
    cr_expect_eq(j->count, 3);
    const skv_json *a = skv_json_get(j, "k1");
    cr_assert_not_null(a);
    cr_expect_eq(a->type, SKV_JSON_ARR, "first match wins for repeated keys");
    cr_expect_eq(a->key_len, 2);
    cr_expect_eq(a->count, 3);
    cr_expect_eq(skv_json_at(a, 0)->i64, 10);
    cr_expect_str_eq(skv_json_at(a, 1)->str, "x");
    cr_expect_eq(skv_json_get(skv_json_at(a, 2), "z")->type, SKV_JSON_NULL);
    cr_expect_null(skv_json_at(a, 3));
    cr_expect_null(skv_json_at(j, 0), "at() is for arrays");
    cr_expect_null(skv_json_get(a, "k1"), "get() is for objects");
    cr_expect_eq(skv_json_get(j, "b")->boolean, 1);
    cr_expect_null(skv_json_get(j, "missing"));
    cr_expect_null(skv_json_get(NULL, "b"));
    /* siblings are linked in document order */
    const skv_json *c = j->child;
    cr_expect_str_eq(c->key, "k1");
    cr_expect_str_eq(c->next->key, "b");
    cr_expect_str_eq(c->next->next->key, "k1");
    cr_expect_null(c->next->next->next);
    skv_json_free(j);
    skv_json_free(NULL);
}

Test(json, error_detail_names_the_byte_offset)
{
    cr_assert_eq(json_rc("[1, 2, 03]", 10), SKV_ERR_FORMAT);
    cr_expect(strstr(skv_error_detail(), "byte 7") != NULL, "%s", skv_error_detail());
    cr_assert_eq(json_rc("{\"a\": \"\\q\"}", 11), SKV_ERR_FORMAT);
    cr_expect(strstr(skv_error_detail(), "byte 7") != NULL, "%s", skv_error_detail());
    cr_assert_eq(json_rc("[true] x", 8), SKV_ERR_FORMAT);
    cr_expect(strstr(skv_error_detail(), "byte 7") != NULL, "%s", skv_error_detail());
}

Test(json, large_documents_span_arena_chunks)
{
    /* 20000 members: many arena chunks; every value must survive */
    size_t cap = 20000 * 40 + 16, n = 0;
    char *s = malloc(cap);
    cr_assert_not_null(s);
    s[n++] = '{';
    for (int i = 0; i < 20000; i++)
        n += (size_t)snprintf(s + n, cap - n, "%s\"key%d\":[%d,\"v%d\"]", i ? "," : "", i, i, i);
    s[n++] = '}';
    skv_json *j = NULL;
    cr_assert_eq(skv_json_parse(s, n, &j), 0, "%s", skv_error_detail());
    cr_expect_eq(j->count, 20000);
    int i = 0;
    char want[32];
    for (const skv_json *m = j->child; m; m = m->next, i++) {
        snprintf(want, sizeof want, "key%d", i);
        cr_assert_str_eq(m->key, want);
        cr_assert_eq(m->child->i64, i);
        snprintf(want, sizeof want, "v%d", i);
        cr_assert_str_eq(m->child->next->str, want);
    }
    cr_expect_eq(i, 20000);
    skv_json_free(j);
    free(s);
}

Test(json, every_allocation_failure_returns_nomem)
{
    char doc[20000];
    size_t n = (size_t)snprintf(doc, sizeof doc, "{\"s\":\"%s\",\"n\":1.5,\"a\":[", "\\u00e9x");
    for (int i = 0; i < 600; i++)
        n += (size_t)snprintf(doc + n, sizeof doc - n, "%s{\"k%d\":%d}", i ? "," : "", i, i);
    n += (size_t)snprintf(doc + n, sizeof doc - n, "],\"big\":1%0200d}", 0);
    long fails = 0;
    for (long k = 0;; k++) {
        skv_json *j = NULL;
        skv_alloc_fail_after(k, 0);
        int rc = skv_json_parse(doc, n, &j);
        skv_alloc_fail_after(-1, 0);
        if (rc == 0) {
            cr_expect_eq(skv_json_get(j, "a")->count, 600);
            skv_json_free(j);
            break;
        }
        cr_assert_eq(rc, SKV_ERR_NOMEM, "failure at allocation %ld gave %s", k,
                     skv_strerror(rc));
        cr_assert_null(j);
        fails++;
        cr_assert_lt(k, 1000, "parse never succeeds");
    }
    cr_expect_gt(fails, 2, "the document should need several allocations");
}

/* ========================================================================
 * safetensors: writer -> reader round trips
 * ====================================================================== */

typedef struct {
    const char *name;
    skv_dtype dt;
    int ndim;
    int64_t shape[SKV_ST_MAX_DIMS];
} tspec;

static const tspec round_trip_specs[] = {
    {"w.f32", SKV_DT_F32, 2, {3, 5}},
    {"layers.0.attn \"q\"\\\n\t/\xc3\xa9", SKV_DT_BF16, 3, {2, 3, 4}},
    {"h16", SKV_DT_F16, 1, {7}},
    {"fp8", SKV_DT_F8E4M3, 4, {1, 2, 3, 5}},
    {"ids", SKV_DT_I32, 1, {9}},
    {"empty", SKV_DT_BF16, 2, {0, 16}},
    {"scalar", SKV_DT_F32, 0, {0}},
    {"rank8", SKV_DT_F8E4M3, 8, {1, 2, 1, 2, 1, 3, 1, 1}},
    {"\x01\x1f", SKV_DT_I32, 2, {1, 1}},
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
        fill_bytes(datas[i], nb, (uint32_t)i + 1);
        int rc = skv_stw_add(w, s->name, s->dt, s->ndim, s->shape, datas[i], nb);
        cr_assert_eq(rc, 0, "%s: %s", s->name, skv_error_detail());
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
    cr_assert_eq(skv_stw_serialize(w, &buf, &len), 0, "%s", skv_error_detail());
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
    cr_assert_eq(skv_st_parse(buf, len, &st), 0, "%s", skv_error_detail());
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
    cr_assert_eq(skv_stw_write(w, path), 0, "%s", skv_error_detail());
    skv_stw_free(w);
    skv_st *st = NULL;
    cr_assert_eq(skv_st_open(path, &st), 0, "%s", skv_error_detail());
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
        cr_assert_eq(skv_stw_add(w, name, SKV_DT_I32, 1, shape, &v, 4), 0);
    }
    int64_t shape[1] = {1};
    int32_t v = 0;
    cr_expect_eq(skv_stw_add(w, "model.layers.77.weight", SKV_DT_I32, 1, shape, &v, 4),
                 SKV_ERR_ARG);
    uint8_t *buf;
    size_t len;
    cr_assert_eq(skv_stw_serialize(w, &buf, &len), 0);
    skv_stw_free(w);
    skv_st *st;
    cr_assert_eq(skv_st_parse(buf, len, &st), 0, "%s", skv_error_detail());
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
    cr_expect_eq(skv_stw_add(w, "a", SKV_DT_F32, 2, s2, d, 16), 0);
    cr_expect_eq(skv_stw_add(w, "a", SKV_DT_F32, 2, s2, d, 16), SKV_ERR_ARG, "duplicate");
    cr_expect_eq(skv_stw_add(w, "b", SKV_DT_F32, 2, s2, d, 15), SKV_ERR_SHAPE);
    cr_expect_eq(skv_stw_add(w, "b", SKV_DT_BF16, 2, s2, d, 16), SKV_ERR_SHAPE);
    cr_expect_eq(skv_stw_add(w, "b", SKV_DT_F32, 2, huge, d, 16), SKV_ERR_SHAPE);
    cr_expect_eq(skv_stw_add(w, "b", SKV_DT_F32, 1, neg, d, 0), SKV_ERR_ARG);
    cr_expect_eq(skv_stw_add(w, "b", SKV_DT_F32, 9, s9, d, 4), SKV_ERR_ARG);
    cr_expect_eq(skv_stw_add(w, "b", SKV_DT_F32, -1, s2, d, 4), SKV_ERR_ARG);
    cr_expect_eq(skv_stw_add(w, "b", (skv_dtype)99, 2, s2, d, 16), SKV_ERR_ARG);
    cr_expect_eq(skv_stw_add(w, "", SKV_DT_F32, 2, s2, d, 16), SKV_ERR_ARG);
    cr_expect_eq(skv_stw_add(w, "__metadata__", SKV_DT_F32, 2, s2, d, 16), SKV_ERR_ARG);
    cr_expect_eq(skv_stw_add(w, "bad\xff", SKV_DT_F32, 2, s2, d, 16), SKV_ERR_ARG);
    cr_expect_eq(skv_stw_add(w, "bad\xed\xa0\x80", SKV_DT_F32, 2, s2, d, 16), SKV_ERR_ARG);
    cr_expect_eq(skv_stw_add(w, "b", SKV_DT_F32, 2, s2, NULL, 16), SKV_ERR_ARG);
    cr_expect_eq(skv_stw_add(w, NULL, SKV_DT_F32, 2, s2, d, 16), SKV_ERR_ARG);
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
                  "prefix %zu of %zu: %s (%s)", cut, len, skv_strerror(rc),
                  skv_error_detail());
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
                     cases[i].header, skv_strerror(cases[i].rc), skv_strerror(rc),
                     skv_error_detail());
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
        cr_expect_eq(rc, 0, "#%zu %s: %s", i, cases[i].header, skv_error_detail());
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
    cr_assert_eq(skv_st_parse(b, len, &st), 0, "%s", skv_error_detail());
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
    cr_assert_eq(rc, 0, "%s: %s", path, skv_error_detail());
    cr_assert_eq(skv_st_count(st), 7);
    cr_expect_str_eq(skv_st_meta(st, "format"), "pt");
    cr_expect_str_eq(skv_st_meta(st, "seqkv"), "golden v1");
    cr_expect_str_eq(skv_st_meta(st, "note"), "\xc3\xa9\"q\"");

    const char *order[] = {"a.f32", "b.bf16", "c.f16", "d.f8", "e.i32", "z.empty", "s.scalar"};
    for (size_t i = 0; i < 7; i++)
        cr_expect_str_eq(skv_st_at(st, i)->name, order[i]);

    const skv_tensor *t = skv_st_find(st, "a.f32");
    cr_assert_not_null(t);
    cr_expect_eq(t->dtype, SKV_DT_F32);
    cr_expect_eq(t->ndim, 2);
    cr_expect_eq(t->shape[0], 2);
    cr_expect_eq(t->shape[1], 3);
    cr_expect_eq(t->nelem, 6);
    const float fw[6] = {-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f};
    for (int i = 0; i < 6; i++)
        cr_expect_eq(skv_bits_f32(skv_load32_le(t->data + 4 * i)), fw[i]);

    t = skv_st_find(st, "b.bf16");
    cr_assert_not_null(t);
    cr_expect_eq(t->dtype, SKV_DT_BF16);
    const uint16_t bw[4] = {0x3F80, 0xC000, 0x7F80, 0x0001};
    cr_assert_eq(t->nbytes, 8);
    for (int i = 0; i < 4; i++)
        cr_expect_eq(skv_load16_le(t->data + 2 * i), bw[i]);

    t = skv_st_find(st, "c.f16");
    cr_assert_not_null(t);
    cr_expect_eq(t->dtype, SKV_DT_F16);
    cr_expect_eq(t->ndim, 2);
    const uint16_t hw[4] = {0x3C00, 0xBC00, 0x7BFF, 0x0001};
    for (int i = 0; i < 4; i++)
        cr_expect_eq(skv_load16_le(t->data + 2 * i), hw[i]);

    t = skv_st_find(st, "d.f8");
    cr_assert_not_null(t);
    cr_expect_eq(t->dtype, SKV_DT_F8E4M3);
    cr_assert_eq(t->nbytes, 3);
    cr_expect_eq(t->data[0], 0x38);
    cr_expect_eq(t->data[1], 0xB8);
    cr_expect_eq(t->data[2], 0x7E);

    t = skv_st_find(st, "e.i32");
    cr_assert_not_null(t);
    cr_expect_eq(t->dtype, SKV_DT_I32);
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
                     skv_strerror(rc), skv_error_detail());
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
        cr_assert_eq(rc, SKV_ERR_NOMEM, "allocation %ld: %s", k, skv_strerror(rc));
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
        cr_assert_eq(rc, SKV_ERR_NOMEM, "allocation %ld: %s", k, skv_strerror(rc));
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
        fill_bytes(datas[i], nb, (uint32_t)i + 1);
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
        cr_assert_eq(rc, SKV_ERR_NOMEM, "allocation %ld: %s", k, skv_strerror(rc));
        cr_assert_null(buf);
        cr_assert_lt(k, 1000);
    }
    for (size_t i = 0; i < N_SPECS; i++)
        free(datas[i]);
}

/* ========================================================================
 * KV files
 * ====================================================================== */

typedef struct {
    size_t T;
    int32_t tokens[16];
    uint8_t *k, *v;
} kv_fixture;

enum { KV_L = 2, KV_H = 3, KV_D = 4 };

static void kv_fixture_init(kv_fixture *f, size_t T, uint32_t seed)
{
    f->T = T;
    for (size_t t = 0; t < T; t++)
        f->tokens[t] = (int32_t)(seed * 1000 + t) * (t % 2 ? -1 : 1);
    size_t nb = (size_t)KV_L * T * KV_H * KV_D * 2;
    f->k = malloc(nb ? nb : 1);
    f->v = malloc(nb ? nb : 1);
    fill_bytes(f->k, nb, seed * 2);
    fill_bytes(f->v, nb, seed * 2 + 1);
}

static skv_kvseq kv_view(const kv_fixture *f)
{
    skv_kvseq s = {0};
    s.T = f->T;
    s.tokens = f->T ? f->tokens : NULL;
    s.dtype = SKV_DT_BF16;
    s.layers = KV_L;
    s.kv_heads = KV_H;
    s.head_dim = KV_D;
    s.k = f->T ? f->k : NULL;
    s.v = f->T ? f->v : NULL;
    return s;
}

static skv_st *reparse(skv_st_writer *w, uint8_t **buf)
{
    size_t len;
    cr_assert_eq(skv_stw_serialize(w, buf, &len), 0);
    skv_st *st = NULL;
    cr_assert_eq(skv_st_parse(*buf, len, &st), 0, "%s", skv_error_detail());
    return st;
}

Test(kvfile, three_sequences_round_trip_exactly)
{
    kv_fixture f[3];
    const size_t Ts[3] = {5, 0, 3};
    skv_st_writer *w;
    cr_assert_eq(skv_stw_create(&w), 0);
    for (int i = 0; i < 3; i++) {
        kv_fixture_init(&f[i], Ts[i], (uint32_t)i + 1);
        skv_kvseq s = kv_view(&f[i]);
        cr_assert_eq(skv_kvfile_add(w, (size_t)i, &s), 0, "%s", skv_error_detail());
    }
    cr_assert_eq(skv_stw_meta(w, "seqkv.kind", "kv"), 0);
    uint8_t *buf;
    skv_st *st = reparse(w, &buf);
    skv_stw_free(w);

    size_t n = 99;
    cr_assert_eq(skv_kvfile_count(st, &n), 0, "%s", skv_error_detail());
    cr_assert_eq(n, 3);
    for (int i = 0; i < 3; i++) {
        skv_kvseq s;
        cr_assert_eq(skv_kvfile_get(st, (size_t)i, &s), 0, "%s", skv_error_detail());
        cr_expect_eq(s.T, Ts[i]);
        cr_expect_eq(s.dtype, SKV_DT_BF16);
        cr_expect_eq(s.layers, KV_L);
        cr_expect_eq(s.kv_heads, KV_H);
        cr_expect_eq(s.head_dim, KV_D);
        for (size_t t = 0; t < s.T; t++)
            cr_expect_eq((int32_t)skv_load32_le(&s.tokens[t]), f[i].tokens[t]);
        size_t nb = (size_t)KV_L * s.T * KV_H * KV_D * 2;
        cr_expect_eq(memcmp(s.k, f[i].k, nb), 0);
        cr_expect_eq(memcmp(s.v, f[i].v, nb), 0);
        /* the shapes on disk are [layers, T, kv_heads, head_dim] */
        char name[32];
        snprintf(name, sizeof name, "seq%d.k", i);
        const skv_tensor *t = skv_st_find(st, name);
        cr_assert_not_null(t);
        cr_expect_eq(t->ndim, 4);
        cr_expect_eq(t->shape[0], KV_L);
        cr_expect_eq(t->shape[1], (int64_t)Ts[i]);
        cr_expect_eq(t->shape[2], KV_H);
        cr_expect_eq(t->shape[3], KV_D);
        snprintf(name, sizeof name, "seq%d.tokens", i);
        t = skv_st_find(st, name);
        cr_assert_not_null(t);
        cr_expect_eq(t->dtype, SKV_DT_I32);
        cr_expect_eq(t->ndim, 1);
    }
    skv_kvseq s;
    cr_expect_eq(skv_kvfile_get(st, 3, &s), SKV_ERR_NOT_FOUND);
    skv_st_free(st);
    skv_free(buf);
    for (int i = 0; i < 3; i++) {
        free(f[i].k);
        free(f[i].v);
    }
}

Test(kvfile, a_file_without_sequences_counts_zero)
{
    skv_st_writer *w;
    cr_assert_eq(skv_stw_create(&w), 0);
    int32_t x = 1;
    int64_t one[1] = {1};
    cr_assert_eq(skv_stw_add(w, "other", SKV_DT_I32, 1, one, &x, 4), 0);
    cr_assert_eq(skv_stw_add(w, "seq.tokens", SKV_DT_I32, 1, one, &x, 4), 0);
    cr_assert_eq(skv_stw_add(w, "seq0.tokensx", SKV_DT_I32, 1, one, &x, 4), 0);
    uint8_t *buf;
    skv_st *st = reparse(w, &buf);
    skv_stw_free(w);
    size_t n = 7;
    cr_expect_eq(skv_kvfile_count(st, &n), 0, "%s", skv_error_detail());
    cr_expect_eq(n, 0);
    skv_st_free(st);
    skv_free(buf);
}

/* Build a file from raw tensors: name, dtype, 4 dims (ndim given). */
typedef struct {
    const char *name;
    skv_dtype dt;
    int ndim;
    int64_t shape[4];
} raw_t;

static int kv_raw(const raw_t *ts, size_t n, int want_count_rc, int want_get_rc)
{
    skv_st_writer *w;
    cr_assert_eq(skv_stw_create(&w), 0);
    static uint8_t zeros[4096];
    for (size_t i = 0; i < n; i++) {
        size_t nb = skv_dtype_size(ts[i].dt);
        for (int d = 0; d < ts[i].ndim; d++)
            nb *= (size_t)ts[i].shape[d];
        cr_assert_leq(nb, sizeof zeros);
        cr_assert_eq(skv_stw_add(w, ts[i].name, ts[i].dt, ts[i].ndim, ts[i].shape, zeros, nb),
                     0);
    }
    uint8_t *buf;
    skv_st *st = reparse(w, &buf);
    skv_stw_free(w);
    size_t cnt;
    int rc = skv_kvfile_count(st, &cnt);
    cr_expect_eq(rc, want_count_rc, "count: expected %s, got %s (%s)",
                 skv_strerror(want_count_rc), skv_strerror(rc), skv_error_detail());
    skv_kvseq s;
    int grc = skv_kvfile_get(st, 0, &s);
    cr_expect_eq(grc, want_get_rc, "get(0): expected %s, got %s (%s)",
                 skv_strerror(want_get_rc), skv_strerror(grc), skv_error_detail());
    skv_st_free(st);
    skv_free(buf);
    return rc;
}

#define TOK(i, T) {"seq" #i ".tokens", SKV_DT_I32, 1, {T}}
#define KV(i, which, dt, T) {"seq" #i "." which, dt, 4, {2, T, 1, 4}}

Test(kvfile, malformed_layouts_are_rejected)
{
    /* a gap in the numbering */
    const raw_t gap[] = {TOK(0, 1), KV(0, "k", SKV_DT_BF16, 1), KV(0, "v", SKV_DT_BF16, 1),
                         TOK(2, 1), KV(2, "k", SKV_DT_BF16, 1), KV(2, "v", SKV_DT_BF16, 1)};
    kv_raw(gap, 6, SKV_ERR_FORMAT, 0);
    cr_expect(strstr(skv_error_detail(), "seq1.tokens") != NULL, "%s", skv_error_detail());
    /* numbering that does not start at 0 */
    const raw_t from1[] = {TOK(1, 1), KV(1, "k", SKV_DT_BF16, 1), KV(1, "v", SKV_DT_BF16, 1)};
    kv_raw(from1, 3, SKV_ERR_FORMAT, SKV_ERR_NOT_FOUND);
    /* a missing .v */
    const raw_t nov[] = {TOK(0, 1), KV(0, "k", SKV_DT_BF16, 1)};
    kv_raw(nov, 2, SKV_ERR_FORMAT, SKV_ERR_FORMAT);
    cr_expect(strstr(skv_error_detail(), "seq0.v") != NULL, "%s", skv_error_detail());
    /* a missing .k */
    const raw_t nok[] = {TOK(0, 1), KV(0, "v", SKV_DT_BF16, 1)};
    kv_raw(nok, 2, SKV_ERR_FORMAT, SKV_ERR_FORMAT);
    /* k and v of a sequence without tokens */
    const raw_t stray[] = {TOK(0, 1), KV(0, "k", SKV_DT_BF16, 1), KV(0, "v", SKV_DT_BF16, 1),
                           KV(1, "k", SKV_DT_BF16, 1)};
    kv_raw(stray, 4, SKV_ERR_FORMAT, 0);
    /* non-canonical index */
    const raw_t lead[] = {TOK(0, 1), KV(0, "k", SKV_DT_BF16, 1), KV(0, "v", SKV_DT_BF16, 1),
                          TOK(01, 1)};
    kv_raw(lead, 4, SKV_ERR_FORMAT, 0);
    /* T of k differs from tokens */
    const raw_t badT[] = {TOK(0, 2), KV(0, "k", SKV_DT_BF16, 3), KV(0, "v", SKV_DT_BF16, 3)};
    kv_raw(badT, 3, 0, SKV_ERR_SHAPE);
    /* v shape differs from k */
    const raw_t badv[] = {TOK(0, 2), KV(0, "k", SKV_DT_BF16, 2), KV(0, "v", SKV_DT_BF16, 1)};
    kv_raw(badv, 3, 0, SKV_ERR_SHAPE);
    /* I32 K/V */
    const raw_t ik[] = {TOK(0, 1), KV(0, "k", SKV_DT_I32, 1), KV(0, "v", SKV_DT_I32, 1)};
    kv_raw(ik, 3, 0, SKV_ERR_SHAPE);
    /* k and v of different dtypes */
    const raw_t mixed[] = {TOK(0, 1), KV(0, "k", SKV_DT_BF16, 1), KV(0, "v", SKV_DT_F16, 1)};
    kv_raw(mixed, 3, 0, SKV_ERR_SHAPE);
    /* tokens not I32 or not rank 1 */
    const raw_t ftok[] = {{"seq0.tokens", SKV_DT_F32, 1, {1}}, KV(0, "k", SKV_DT_BF16, 1),
                          KV(0, "v", SKV_DT_BF16, 1)};
    kv_raw(ftok, 3, 0, SKV_ERR_SHAPE);
    const raw_t tok2[] = {{"seq0.tokens", SKV_DT_I32, 2, {1, 1}}, KV(0, "k", SKV_DT_BF16, 1),
                          KV(0, "v", SKV_DT_BF16, 1)};
    kv_raw(tok2, 3, 0, SKV_ERR_SHAPE);
    /* k of the wrong rank */
    const raw_t k3[] = {TOK(0, 1), {"seq0.k", SKV_DT_BF16, 3, {2, 1, 4}},
                        {"seq0.v", SKV_DT_BF16, 3, {2, 1, 4}}};
    kv_raw(k3, 3, 0, SKV_ERR_SHAPE);
    /* a zero layer count */
    const raw_t l0[] = {TOK(0, 1), {"seq0.k", SKV_DT_BF16, 4, {0, 1, 1, 4}},
                        {"seq0.v", SKV_DT_BF16, 4, {0, 1, 1, 4}}};
    kv_raw(l0, 3, 0, SKV_ERR_SHAPE);
}

Test(kvfile, add_rejects_bad_sequences)
{
    skv_st_writer *w;
    cr_assert_eq(skv_stw_create(&w), 0);
    kv_fixture f;
    kv_fixture_init(&f, 2, 9);
    skv_kvseq s = kv_view(&f);
    s.dtype = SKV_DT_I32;
    cr_expect_eq(skv_kvfile_add(w, 0, &s), SKV_ERR_ARG);
    s = kv_view(&f);
    s.layers = 0;
    cr_expect_eq(skv_kvfile_add(w, 0, &s), SKV_ERR_ARG);
    s = kv_view(&f);
    s.k = NULL;
    cr_expect_eq(skv_kvfile_add(w, 0, &s), SKV_ERR_ARG);
    cr_expect_eq(skv_kvfile_add(w, 0, NULL), SKV_ERR_ARG);
    s = kv_view(&f);
    cr_expect_eq(skv_kvfile_add(w, 0, &s), 0);
    cr_expect_eq(skv_kvfile_add(w, 0, &s), SKV_ERR_ARG, "sequence 0 added twice");
    skv_stw_free(w);
    free(f.k);
    free(f.v);
}

Test(json, value_count_is_bounded)
{
    /* 2^21 + 1 zeros in one array: refused before it can claim ~200 MB */
    size_t n = (1u << 21) + 1, len = 2 * n + 1;
    char *t = malloc(len + 1);
    t[0] = '[';
    for (size_t i = 0; i < n; i++) {
        t[1 + 2 * i] = '0';
        t[2 + 2 * i] = i + 1 < n ? ',' : ']';
    }
    skv_json *j = NULL;
    cr_assert_eq(skv_json_parse(t, len, &j), SKV_ERR_TOO_LARGE);
    cr_assert_null(j);
    /* one fewer value parses */
    t[2 * (n - 1)] = ']';
    cr_assert_eq(skv_json_parse(t, 2 * (n - 1) + 1, &j), 0, "%s", skv_error_detail());
    cr_assert_eq(j->count, n - 1);
    skv_json_free(j);
    free(t);
}
