/* Criterion suite for the tensor module's strict JSON (skv_json): valid
 * and invalid documents, the depth cap, exact integers, numbers, strings
 * and escapes, members in order, error offsets, large documents, the value
 * cap and allocation failure. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "skv_tensor.h"
#include "testutil.h"

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
    cr_assert_eq(rc, 0, "parse of %s failed: %s (%s)", text, seqkv_strerror(rc),
                 seqkv_error_detail());
    return j;
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
        cr_expect_eq(rc, 0, "rejected valid #%zu %s: %s", i, good[i], seqkv_error_detail());
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
                     seqkv_strerror(rc));
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
    cr_expect_eq(json_rc(ok, strlen(ok)), 0, "%s", seqkv_error_detail());
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
    cr_expect(strstr(seqkv_error_detail(), "byte 7") != NULL, "%s", seqkv_error_detail());
    cr_assert_eq(json_rc("{\"a\": \"\\q\"}", 11), SKV_ERR_FORMAT);
    cr_expect(strstr(seqkv_error_detail(), "byte 7") != NULL, "%s", seqkv_error_detail());
    cr_assert_eq(json_rc("[true] x", 8), SKV_ERR_FORMAT);
    cr_expect(strstr(seqkv_error_detail(), "byte 7") != NULL, "%s", seqkv_error_detail());
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
    cr_assert_eq(skv_json_parse(s, n, &j), 0, "%s", seqkv_error_detail());
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
                     seqkv_strerror(rc));
        cr_assert_null(j);
        fails++;
        cr_assert_lt(k, 1000, "parse never succeeds");
    }
    cr_expect_gt(fails, 2, "the document should need several allocations");
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
    cr_assert_eq(skv_json_parse(t, 2 * (n - 1) + 1, &j), 0, "%s", seqkv_error_detail());
    cr_assert_eq(j->count, n - 1);
    skv_json_free(j);
    free(t);
}
