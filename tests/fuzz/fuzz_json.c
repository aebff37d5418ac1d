/* libFuzzer target for the strict JSON parser.
 *
 * On success it walks the whole tree checking the DOM invariants (counts
 * match the sibling lists, strings are NUL-terminated at their length,
 * get()/at() find every member), then re-serialises the tree, parses that
 * again and requires an identical tree: every accepted document must mean
 * exactly one thing. Any violation aborts. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "skv_tensor.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
    char *p;
    size_t len, cap;
} obuf;

static void put(obuf *b, const char *s, size_t n)
{
    if (b->cap - b->len < n + 1) {
        size_t ncap = (b->cap + n + 1) * 2;
        char *np = realloc(b->p, ncap);
        CHECK(np != NULL);
        b->p = np;
        b->cap = ncap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void put_str(obuf *b, const char *s, size_t n)
{
    put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        if (c < 0x20 || c == '"' || c == '\\') {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            put(b, esc, 6);
        } else {
            put(b, (const char *)&s[i], 1);
        }
    }
    put(b, "\"", 1);
}

static void serialise(obuf *b, const skv_json *j)
{
    char tmp[64];
    switch (j->type) {
    case SKV_JSON_NULL: put(b, "null", 4); break;
    case SKV_JSON_BOOL: j->boolean ? put(b, "true", 4) : put(b, "false", 5); break;
    case SKV_JSON_NUM:
        if (j->is_int) {
            put(b, tmp, (size_t)snprintf(tmp, sizeof tmp, "%lld", (long long)j->i64));
            /* keep the sign of -0 */
            if (j->i64 == 0 && signbit(j->num)) {
                b->len--;
                put(b, "-0", 2);
            }
        } else if (isinf(j->num)) {
            put(b, j->num < 0 ? "-1e999" : "1e999", j->num < 0 ? 6 : 5);
        } else {
            int n = snprintf(tmp, sizeof tmp, "%.17g", j->num);
            put(b, tmp, (size_t)n);
            if (!strpbrk(tmp, ".e"))
                put(b, ".0", 2);
        }
        break;
    case SKV_JSON_STR: put_str(b, j->str, j->str_len); break;
    case SKV_JSON_ARR:
    case SKV_JSON_OBJ:
        put(b, j->type == SKV_JSON_ARR ? "[" : "{", 1);
        for (const skv_json *c = j->child; c; c = c->next) {
            if (c != j->child)
                put(b, ",", 1);
            if (j->type == SKV_JSON_OBJ) {
                put_str(b, c->key, c->key_len);
                put(b, ":", 1);
            }
            serialise(b, c);
        }
        put(b, j->type == SKV_JSON_ARR ? "]" : "}", 1);
        break;
    }
}

static void walk(const skv_json *j, int depth)
{
    CHECK(depth <= SKV_JSON_MAX_DEPTH);
    switch (j->type) {
    case SKV_JSON_NULL: break;
    case SKV_JSON_BOOL: CHECK(j->boolean == 0 || j->boolean == 1); break;
    case SKV_JSON_NUM:
        CHECK(!isnan(j->num));
        if (j->is_int)
            CHECK((double)j->i64 == j->num);
        break;
    case SKV_JSON_STR:
        CHECK(j->str != NULL);
        CHECK(strlen(j->str) == j->str_len);
        break;
    case SKV_JSON_ARR:
    case SKV_JSON_OBJ: {
        size_t n = 0;
        for (const skv_json *c = j->child; c; c = c->next, n++) {
            if (j->type == SKV_JSON_OBJ) {
                CHECK(c->key != NULL);
                CHECK(strlen(c->key) == c->key_len);
                const skv_json *g = skv_json_get(j, c->key);
                CHECK(g != NULL && g->key_len == c->key_len);
            } else if (n < 64) {
                CHECK(skv_json_at(j, n) == c);
            }
            walk(c, depth + 1);
        }
        CHECK(n == j->count);
        CHECK((n == 0) == (j->child == NULL));
        if (j->type == SKV_JSON_ARR)
            CHECK(skv_json_at(j, n) == NULL);
        break;
    }
    default: CHECK(0);
    }
}

static void same(const skv_json *a, const skv_json *b)
{
    CHECK(a->type == b->type);
    CHECK(a->key_len == b->key_len);
    if (a->key_len)
        CHECK(memcmp(a->key, b->key, a->key_len) == 0);
    switch (a->type) {
    case SKV_JSON_BOOL: CHECK(a->boolean == b->boolean); break;
    case SKV_JSON_NUM:
        CHECK(a->is_int == b->is_int);
        CHECK(memcmp(&a->num, &b->num, sizeof a->num) == 0);
        if (a->is_int)
            CHECK(a->i64 == b->i64);
        break;
    case SKV_JSON_STR:
        CHECK(a->str_len == b->str_len);
        CHECK(memcmp(a->str, b->str, a->str_len) == 0);
        break;
    case SKV_JSON_ARR:
    case SKV_JSON_OBJ: {
        CHECK(a->count == b->count);
        const skv_json *x = a->child, *y = b->child;
        for (; x && y; x = x->next, y = y->next)
            same(x, y);
        CHECK(!x && !y);
        break;
    }
    default: break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* exact-size copy: ASan then catches any read past the input */
    char *text = malloc(size ? size : 1);
    CHECK(text != NULL);
    if (size)
        memcpy(text, data, size);
    skv_json *j = NULL;
    int rc = skv_json_parse(text, size, &j);
    if (rc != 0) {
        CHECK(j == NULL);
        CHECK(rc == SKV_ERR_FORMAT || rc == SKV_ERR_TOO_LARGE);
        free(text);
        return 0;
    }
    walk(j, 0);

    obuf b = {0};
    serialise(&b, j);
    skv_json *j2 = NULL;
    rc = skv_json_parse(b.p, b.len, &j2);
    if (rc != 0) {
        fprintf(stderr, "fuzz_json: re-serialised text rejected: %s\n%.*s\n",
                seqkv_error_detail(), (int)(b.len > 400 ? 400 : b.len), b.p);
        abort();
    }
    same(j, j2);
    skv_json_free(j2);
    skv_json_free(j);
    free(b.p);
    free(text);
    return 0;
}
