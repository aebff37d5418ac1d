/*
 * safetensors.c - read and write the safetensors container.
 *
 * Layout (all offsets from the start of the file):
 *   0      8   N, the header length, u64 little-endian
 *   8      N   JSON object, UTF-8, optionally padded with trailing spaces
 *   8+N    ..  data region; each tensor's data_offsets are relative to it
 *
 * The reader treats the file as hostile: N is capped before anything is
 * allocated, the header goes through the strict JSON parser, and every
 * tensor entry is checked field by field (exact key set, known dtype,
 * bounded rank, overflow-checked sizes, offsets inside the data region, no
 * overlap, unique names) before any pointer into the data is handed out.
 * Tensor names and metadata strings point into the parsed JSON document,
 * which the skv_st owns.
 */
#include "skv_tensor.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* skv_st_open refuses files larger than this. */
#define ST_MAX_FILE ((uint64_t)64 << 30)

#define META_KEY "__metadata__"

/* ---- string hash table ------------------------------------------------ */
/*
 * Open addressing over an external array of records, each holding a
 * NUL-terminated `const char *` key at a fixed stride; slots store
 * record index + 1 (0 = empty). Used for tensor names and metadata keys in
 * the reader and for duplicate detection in the writer: files can hold
 * thousands of tensors, so neither lookup nor the duplicate check may be
 * quadratic.
 */
typedef struct {
    size_t *slots;
    size_t mask; /* capacity - 1; capacity is a power of two */
    size_t used;
} strtab;

static uint64_t str_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

static const char *rec_key(const void *base, size_t stride, size_t i)
{
    const char *const *k = (const char *const *)(const void *)((const char *)base + i * stride);
    return *k;
}

/* Slot index holding `key`, or of the empty slot where it would go. */
static size_t strtab_slot(const strtab *t, const void *base, size_t stride,
                          const char *key)
{
    size_t i = (size_t)str_hash(key) & t->mask;
    for (;;) {
        size_t s = t->slots[i];
        if (s == 0 || strcmp(rec_key(base, stride, s - 1), key) == 0)
            return i;
        i = (i + 1) & t->mask;
    }
}

/* Record index of `key`, or SIZE_MAX. */
static size_t strtab_find(const strtab *t, const void *base, size_t stride,
                          const char *key)
{
    if (!t->slots)
        return SIZE_MAX;
    size_t s = t->slots[strtab_slot(t, base, stride, key)];
    return s ? s - 1 : SIZE_MAX;
}

/* Make room for `want` keys at load <= 1/2, rehashing records [0, n). */
static int strtab_reserve(strtab *t, const void *base, size_t stride, size_t n,
                          size_t want)
{
    size_t cap = t->slots ? t->mask + 1 : 0;
    if (want <= cap / 2)
        return 0;
    size_t ncap = 16;
    while (ncap / 2 < want) {
        if (ncap > SIZE_MAX / 4)
            return SKV_ERR_NOMEM;
        ncap *= 2;
    }
    size_t *slots = skv_calloc(ncap, sizeof *slots);
    if (!slots)
        return SKV_ERR_NOMEM;
    skv_free(t->slots);
    t->slots = slots;
    t->mask = ncap - 1;
    t->used = 0;
    for (size_t i = 0; i < n; i++) {
        size_t s = strtab_slot(t, base, stride, rec_key(base, stride, i));
        t->slots[s] = i + 1;
        t->used++;
    }
    return 0;
}

/* Insert record i (room reserved). Returns the index of an existing record
 * with the same key, or SIZE_MAX when inserted. */
static size_t strtab_insert(strtab *t, const void *base, size_t stride, size_t i)
{
    size_t s = strtab_slot(t, base, stride, rec_key(base, stride, i));
    if (t->slots[s])
        return t->slots[s] - 1;
    t->slots[s] = i + 1;
    t->used++;
    return SIZE_MAX;
}

/* ---- shape arithmetic -------------------------------------------------- */

/* Element count of a shape with non-negative dims; -1 on size_t overflow.
 * A zero dim makes the product zero whatever the other dims are. */
static int shape_nelem(int ndim, const int64_t *shape, size_t *out)
{
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        if (shape[i] == 0) {
            *out = 0;
            return 0;
        }
    for (int i = 0; i < ndim; i++) {
        uint64_t d = (uint64_t)shape[i];
        if (d > SIZE_MAX || (d && n > SIZE_MAX / (size_t)d))
            return -1;
        n *= (size_t)d;
    }
    *out = n;
    return 0;
}

/* ========================================================================
 * Reader
 * ====================================================================== */

typedef struct {
    skv_tensor t;   /* must stay first: rec_key reads t.name at offset 0 */
    size_t begin;
    size_t end;
} st_entry;

typedef struct {
    const char *key; /* first: rec_key */
    const char *value;
} st_meta;

struct skv_st {
    uint8_t *owned;     /* file bytes when opened by skv_st_open */
    skv_json *hdr;      /* owns every name and metadata string */
    st_entry *e;        /* in data-offset order */
    size_t n;
    strtab names;
    st_meta *meta;
    size_t nmeta;
    strtab mkeys;
};

/* Copy the nested detail so it survives the rewrap. */
static int rewrap(int rc, const char *what)
{
    char saved[512];
    snprintf(saved, sizeof saved, "%s", seqkv_error_detail());
    return skv_error(rc, "safetensors: %s: %s", what, saved);
}

/* An integer field: a JSON integer within int64. Integral values too big
 * for int64 are reported as `big_err` (they are out of any range we can
 * hold); anything else is a format error. */
static int get_int(const skv_json *j, int64_t *out, int big_err, const char *tname,
                   const char *field)
{
    if (j->type == SKV_JSON_NUM && j->is_int) {
        *out = j->i64;
        return 0;
    }
    if (j->type == SKV_JSON_NUM && isfinite(j->num) && j->num == trunc(j->num) &&
        fabs(j->num) >= 9223372036854775808.0)
        return skv_error(big_err, "safetensors: tensor \"%.64s\": %s value %g is too large",
                         tname, field, j->num);
    return skv_error(SKV_ERR_FORMAT,
                     "safetensors: tensor \"%.64s\": %s must hold integers", tname, field);
}

static int parse_entry(const skv_json *m, const uint8_t *data, size_t data_len,
                       st_entry *e)
{
    const char *name = m->key;
    if (m->key_len == 0)
        return skv_error(SKV_ERR_FORMAT, "safetensors: a tensor has an empty name");
    if (m->type != SKV_JSON_OBJ)
        return skv_error(SKV_ERR_FORMAT,
                         "safetensors: tensor \"%.64s\": entry is not an object", name);
    const skv_json *jdt = NULL, *jshape = NULL, *joff = NULL;
    for (const skv_json *f = m->child; f; f = f->next) {
        const skv_json **slot;
        if (strcmp(f->key, "dtype") == 0 && f->key_len == 5)
            slot = &jdt;
        else if (strcmp(f->key, "shape") == 0 && f->key_len == 5)
            slot = &jshape;
        else if (strcmp(f->key, "data_offsets") == 0 && f->key_len == 12)
            slot = &joff;
        else
            return skv_error(SKV_ERR_FORMAT,
                             "safetensors: tensor \"%.64s\": unknown field \"%.32s\"",
                             name, f->key);
        if (*slot)
            return skv_error(SKV_ERR_FORMAT,
                             "safetensors: tensor \"%.64s\": field \"%s\" repeated",
                             name, f->key);
        *slot = f;
    }
    if (!jdt || !jshape || !joff)
        return skv_error(SKV_ERR_FORMAT, "safetensors: tensor \"%.64s\": missing \"%s\"",
                         name, !jdt ? "dtype" : !jshape ? "shape" : "data_offsets");

    /* dtype */
    if (jdt->type != SKV_JSON_STR)
        return skv_error(SKV_ERR_FORMAT,
                         "safetensors: tensor \"%.64s\": dtype is not a string", name);
    int rc = skv_dtype_from_name(jdt->str, jdt->str_len, &e->t.dtype);
    if (rc == SKV_ERR_UNSUPPORTED)
        return skv_error(SKV_ERR_UNSUPPORTED,
                         "safetensors: tensor \"%.64s\": dtype %.16s is not supported",
                         name, jdt->str);
    if (rc)
        return skv_error(SKV_ERR_FORMAT,
                         "safetensors: tensor \"%.64s\": unknown dtype \"%.16s\"", name,
                         jdt->str);

    /* shape */
    if (jshape->type != SKV_JSON_ARR)
        return skv_error(SKV_ERR_FORMAT,
                         "safetensors: tensor \"%.64s\": shape is not an array", name);
    if (jshape->count > SKV_ST_MAX_DIMS)
        return skv_error(SKV_ERR_TOO_LARGE,
                         "safetensors: tensor \"%.64s\": %zu dims (at most %d)", name,
                         jshape->count, SKV_ST_MAX_DIMS);
    e->t.ndim = (int)jshape->count;
    int d = 0;
    for (const skv_json *v = jshape->child; v; v = v->next, d++) {
        rc = get_int(v, &e->t.shape[d], SKV_ERR_SHAPE, name, "shape");
        if (rc)
            return rc;
        if (e->t.shape[d] < 0)
            return skv_error(SKV_ERR_FORMAT,
                             "safetensors: tensor \"%.64s\": negative dim %" PRId64, name,
                             e->t.shape[d]);
    }
    size_t esz = skv_dtype_size(e->t.dtype);
    if (shape_nelem(e->t.ndim, e->t.shape, &e->t.nelem) != 0 ||
        e->t.nelem > SIZE_MAX / esz)
        return skv_error(SKV_ERR_SHAPE,
                         "safetensors: tensor \"%.64s\": shape size overflows", name);

    /* data_offsets */
    if (joff->type != SKV_JSON_ARR || joff->count != 2)
        return skv_error(SKV_ERR_FORMAT,
                         "safetensors: tensor \"%.64s\": data_offsets must be [begin, end]",
                         name);
    int64_t be[2];
    rc = get_int(joff->child, &be[0], SKV_ERR_RANGE, name, "data_offsets");
    if (rc)
        return rc;
    rc = get_int(joff->child->next, &be[1], SKV_ERR_RANGE, name, "data_offsets");
    if (rc)
        return rc;
    if (be[0] < 0 || be[1] < be[0] || (uint64_t)be[1] > (uint64_t)data_len)
        return skv_error(SKV_ERR_RANGE,
                         "safetensors: tensor \"%.64s\": data_offsets [%" PRId64 ", %" PRId64
                         "] outside the %zu-byte data region",
                         name, be[0], be[1], data_len);
    e->begin = (size_t)be[0];
    e->end = (size_t)be[1];
    e->t.nbytes = e->end - e->begin;
    if (e->t.nbytes != e->t.nelem * esz)
        return skv_error(SKV_ERR_SHAPE,
                         "safetensors: tensor \"%.64s\": %zu bytes of data for %zu %s "
                         "elements (%zu bytes)",
                         name, e->t.nbytes, e->t.nelem, skv_dtype_name(e->t.dtype),
                         e->t.nelem * esz);
    e->t.name = name;
    e->t.data = data + e->begin;
    return 0;
}

static int cmp_entry(const void *a, const void *b)
{
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return strcmp(x->t.name, y->t.name);
}

static int parse_meta(skv_st *st, const skv_json *m)
{
    if (m->type != SKV_JSON_OBJ)
        return skv_error(SKV_ERR_FORMAT, "safetensors: __metadata__ is not an object");
    st->meta = skv_calloc(m->count ? m->count : 1, sizeof *st->meta);
    if (!st->meta)
        return skv_error(SKV_ERR_NOMEM, "safetensors: out of memory for metadata");
    if (strtab_reserve(&st->mkeys, st->meta, sizeof *st->meta, 0, m->count) != 0)
        return skv_error(SKV_ERR_NOMEM, "safetensors: out of memory for metadata");
    for (const skv_json *kv = m->child; kv; kv = kv->next) {
        if (kv->type != SKV_JSON_STR)
            return skv_error(SKV_ERR_FORMAT,
                             "safetensors: __metadata__ value of \"%.64s\" is not a string",
                             kv->key);
        st->meta[st->nmeta].key = kv->key;
        st->meta[st->nmeta].value = kv->str;
        if (strtab_insert(&st->mkeys, st->meta, sizeof *st->meta, st->nmeta) != SIZE_MAX)
            return skv_error(SKV_ERR_FORMAT,
                             "safetensors: __metadata__ key \"%.64s\" repeated", kv->key);
        st->nmeta++;
    }
    return 0;
}

static int st_parse(skv_st *st, const uint8_t *buf, size_t len)
{
    if (len < 8)
        return skv_error(SKV_ERR_FORMAT,
                         "safetensors: %zu bytes is too short for the header length", len);
    uint64_t hlen = skv_load64_le(buf);
    if (hlen > SKV_ST_MAX_HEADER)
        return skv_error(SKV_ERR_TOO_LARGE,
                         "safetensors: header length %" PRIu64 " exceeds the limit of %u%s",
                         hlen, SKV_ST_MAX_HEADER,
                         hlen > len - 8 ? " and the file (not a safetensors file?)" : "");
    if (hlen > len - 8)
        return skv_error(SKV_ERR_RANGE,
                         "safetensors: header length %" PRIu64 " runs past the end of the "
                         "%zu-byte file",
                         hlen, len);
    const uint8_t *data = buf + 8 + hlen;
    size_t data_len = len - 8 - (size_t)hlen;

    int rc = skv_json_parse((const char *)buf + 8, (size_t)hlen, &st->hdr);
    if (rc)
        return rewrap(rc, "header JSON (offsets count from file byte 8)");
    const skv_json *root = st->hdr;
    if (root->type != SKV_JSON_OBJ)
        return skv_error(SKV_ERR_FORMAT, "safetensors: header is not a JSON object");

    const skv_json *meta = NULL;
    for (const skv_json *m = root->child; m; m = m->next) {
        if (strcmp(m->key, META_KEY) == 0 && m->key_len == sizeof META_KEY - 1) {
            if (meta)
                return skv_error(SKV_ERR_FORMAT, "safetensors: __metadata__ repeated");
            meta = m;
        }
    }
    if (meta) {
        rc = parse_meta(st, meta);
        if (rc)
            return rc;
    }

    size_t ntensors = root->count - (meta ? 1 : 0);
    st->e = skv_calloc(ntensors ? ntensors : 1, sizeof *st->e);
    if (!st->e)
        return skv_error(SKV_ERR_NOMEM, "safetensors: out of memory for %zu tensors",
                         ntensors);
    for (const skv_json *m = root->child; m; m = m->next) {
        if (m == meta)
            continue;
        rc = parse_entry(m, data, data_len, &st->e[st->n]);
        if (rc)
            return rc;
        st->n++;
    }
    qsort(st->e, st->n, sizeof *st->e, cmp_entry);

    if (strtab_reserve(&st->names, st->e, sizeof *st->e, 0, st->n) != 0)
        return skv_error(SKV_ERR_NOMEM, "safetensors: out of memory for the name index");
    for (size_t i = 0; i < st->n; i++)
        if (strtab_insert(&st->names, st->e, sizeof *st->e, i) != SIZE_MAX)
            return skv_error(SKV_ERR_FORMAT, "safetensors: tensor name \"%.64s\" repeated",
                             st->e[i].t.name);

    /* Sorted by begin: a non-empty tensor overlaps an earlier one iff it
     * starts before the furthest end seen so far. Empty tensors occupy no
     * bytes and may sit anywhere. */
    size_t max_end = 0;
    const char *max_name = NULL;
    for (size_t i = 0; i < st->n; i++) {
        const st_entry *e = &st->e[i];
        if (e->begin == e->end)
            continue;
        if (e->begin < max_end)
            return skv_error(SKV_ERR_RANGE,
                             "safetensors: tensors \"%.64s\" and \"%.64s\" overlap", max_name,
                             e->t.name);
        max_end = e->end;
        max_name = e->t.name;
    }
    return 0;
}

int skv_st_parse(const uint8_t *buf, size_t len, skv_st **out)
{
    if (!out || (!buf && len))
        return skv_error(SKV_ERR_ARG, "safetensors: NULL argument");
    *out = NULL;
    skv_st *st = skv_calloc(1, sizeof *st);
    if (!st)
        return skv_error(SKV_ERR_NOMEM, "safetensors: out of memory");
    int rc = st_parse(st, buf, len);
    if (rc) {
        skv_st_free(st);
        return rc;
    }
    *out = st;
    return 0;
}

int skv_st_open(const char *path, skv_st **out)
{
    if (!path || !out)
        return skv_error(SKV_ERR_ARG, "safetensors: NULL argument");
    *out = NULL;
    size_t cap = (uint64_t)SIZE_MAX < ST_MAX_FILE ? SIZE_MAX : (size_t)ST_MAX_FILE;
    uint8_t *buf;
    size_t len;
    int rc = skv_file_read(path, cap, &buf, &len);
    if (rc)
        return rc;
    skv_st *st;
    rc = skv_st_parse(buf, len, &st);
    if (rc) {
        char saved[512];
        snprintf(saved, sizeof saved, "%s", seqkv_error_detail());
        skv_free(buf);
        return skv_error(rc, "%s: %s", path, saved);
    }
    st->owned = buf;
    *out = st;
    return 0;
}

void skv_st_free(skv_st *st)
{
    if (!st)
        return;
    skv_free(st->names.slots);
    skv_free(st->mkeys.slots);
    skv_free(st->meta);
    skv_free(st->e);
    if (st->hdr)
        skv_json_free(st->hdr);
    skv_free(st->owned);
    skv_free(st);
}

size_t skv_st_count(const skv_st *st)
{
    return st ? st->n : 0;
}

const skv_tensor *skv_st_at(const skv_st *st, size_t i)
{
    return st && i < st->n ? &st->e[i].t : NULL;
}

const skv_tensor *skv_st_find(const skv_st *st, const char *name)
{
    if (!st || !name)
        return NULL;
    size_t i = strtab_find(&st->names, st->e, sizeof *st->e, name);
    return i == SIZE_MAX ? NULL : &st->e[i].t;
}

const char *skv_st_meta(const skv_st *st, const char *key)
{
    if (!st || !key)
        return NULL;
    size_t i = strtab_find(&st->mkeys, st->meta, sizeof *st->meta, key);
    return i == SIZE_MAX ? NULL : st->meta[i].value;
}

/* ========================================================================
 * Writer
 * ====================================================================== */

typedef struct {
    char *name; /* first: rec_key */
    seqkv_dtype dtype;
    int ndim;
    int64_t shape[SKV_ST_MAX_DIMS];
    uint8_t *data;
    size_t nbytes;
} stw_entry;

typedef struct {
    char *key; /* first: rec_key */
    char *value;
} stw_meta;

struct skv_st_writer {
    stw_entry *e;
    size_t n, cap;
    strtab names;
    stw_meta *m;
    size_t nm, mcap;
    strtab mkeys;
};

int skv_stw_create(skv_st_writer **out)
{
    if (!out)
        return skv_error(SKV_ERR_ARG, "safetensors writer: NULL argument");
    *out = skv_calloc(1, sizeof **out);
    if (!*out)
        return skv_error(SKV_ERR_NOMEM, "safetensors writer: out of memory");
    return 0;
}

void skv_stw_free(skv_st_writer *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n; i++) {
        skv_free(w->e[i].name);
        skv_free(w->e[i].data);
    }
    for (size_t i = 0; i < w->nm; i++) {
        skv_free(w->m[i].key);
        skv_free(w->m[i].value);
    }
    skv_free(w->e);
    skv_free(w->m);
    skv_free(w->names.slots);
    skv_free(w->mkeys.slots);
    skv_free(w);
}

/* Grow *arr (elements of `size`) so it holds at least n + 1. */
static int grow(void **arr, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 16;
    if (ncap > SIZE_MAX / size)
        return SKV_ERR_NOMEM;
    void *p = skv_realloc(*arr, ncap * size);
    if (!p)
        return SKV_ERR_NOMEM;
    *arr = p;
    *cap = ncap;
    return 0;
}

int skv_stw_add(skv_st_writer *w, const char *name, seqkv_dtype dtype, int ndim,
                const int64_t *shape, const void *data, size_t nbytes)
{
    if (!w || !name || (ndim > 0 && !shape) || (!data && nbytes))
        return skv_error(SKV_ERR_ARG, "safetensors writer: NULL argument");
    if (!name[0])
        return skv_error(SKV_ERR_ARG, "safetensors writer: empty tensor name");
    if (strcmp(name, META_KEY) == 0)
        return skv_error(SKV_ERR_ARG, "safetensors writer: \"%s\" is reserved", META_KEY);
    if (!skv_utf8_valid(name, strlen(name)))
        return skv_error(SKV_ERR_ARG, "safetensors writer: tensor name is not valid UTF-8");
    size_t esz = skv_dtype_size(dtype);
    if (esz == 0)
        return skv_error(SKV_ERR_ARG, "safetensors writer: tensor \"%.64s\": bad dtype %d",
                         name, (int)dtype);
    if (ndim < 0 || ndim > SKV_ST_MAX_DIMS)
        return skv_error(SKV_ERR_ARG, "safetensors writer: tensor \"%.64s\": %d dims", name,
                         ndim);
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0)
            return skv_error(SKV_ERR_ARG,
                             "safetensors writer: tensor \"%.64s\": negative dim", name);
    size_t nelem;
    if (shape_nelem(ndim, shape, &nelem) != 0 || nelem > SIZE_MAX / esz)
        return skv_error(SKV_ERR_SHAPE,
                         "safetensors writer: tensor \"%.64s\": shape size overflows", name);
    if (nelem * esz != nbytes)
        return skv_error(SKV_ERR_SHAPE,
                         "safetensors writer: tensor \"%.64s\": %zu bytes given, shape needs "
                         "%zu",
                         name, nbytes, nelem * esz);
    if (strtab_find(&w->names, w->e, sizeof *w->e, name) != SIZE_MAX)
        return skv_error(SKV_ERR_ARG, "safetensors writer: tensor \"%.64s\" added twice",
                         name);

    if (grow((void **)&w->e, &w->cap, w->n, sizeof *w->e) != 0 ||
        strtab_reserve(&w->names, w->e, sizeof *w->e, w->n, w->n + 1) != 0)
        return skv_error(SKV_ERR_NOMEM, "safetensors writer: out of memory");
    stw_entry *e = &w->e[w->n];
    memset(e, 0, sizeof *e);
    e->name = skv_strdup(name);
    e->data = nbytes ? skv_malloc(nbytes) : NULL;
    if (!e->name || (nbytes && !e->data)) {
        skv_free(e->name);
        skv_free(e->data);
        return skv_error(SKV_ERR_NOMEM,
                         "safetensors writer: out of memory for %zu bytes of \"%.64s\"",
                         nbytes, name);
    }
    if (nbytes)
        memcpy(e->data, data, nbytes);
    e->dtype = dtype;
    e->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        e->shape[i] = shape[i];
    e->nbytes = nbytes;
    strtab_insert(&w->names, w->e, sizeof *w->e, w->n);
    w->n++;
    return 0;
}

int skv_stw_meta(skv_st_writer *w, const char *key, const char *value)
{
    if (!w || !key || !value)
        return skv_error(SKV_ERR_ARG, "safetensors writer: NULL argument");
    if (!skv_utf8_valid(key, strlen(key)) || !skv_utf8_valid(value, strlen(value)))
        return skv_error(SKV_ERR_ARG, "safetensors writer: metadata is not valid UTF-8");
    if (strtab_find(&w->mkeys, w->m, sizeof *w->m, key) != SIZE_MAX)
        return skv_error(SKV_ERR_ARG, "safetensors writer: metadata key \"%.64s\" set twice",
                         key);
    if (grow((void **)&w->m, &w->mcap, w->nm, sizeof *w->m) != 0 ||
        strtab_reserve(&w->mkeys, w->m, sizeof *w->m, w->nm, w->nm + 1) != 0)
        return skv_error(SKV_ERR_NOMEM, "safetensors writer: out of memory");
    stw_meta *m = &w->m[w->nm];
    m->key = skv_strdup(key);
    m->value = skv_strdup(value);
    if (!m->key || !m->value) {
        skv_free(m->key);
        skv_free(m->value);
        return skv_error(SKV_ERR_NOMEM, "safetensors writer: out of memory");
    }
    strtab_insert(&w->mkeys, w->m, sizeof *w->m, w->nm);
    w->nm++;
    return 0;
}

/* Growable text buffer; the first failure sticks and is reported once. */
typedef struct {
    char *p;
    size_t len, cap;
    int err;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->err || n == 0)
        return;
    if (b->cap - b->len < n) {
        size_t ncap = b->cap ? b->cap : 256;
        while (ncap - b->len < n) {
            if (ncap > SIZE_MAX / 2) {
                b->err = SKV_ERR_NOMEM;
                return;
            }
            ncap *= 2;
        }
        char *np = skv_realloc(b->p, ncap);
        if (!np) {
            b->err = SKV_ERR_NOMEM;
            return;
        }
        b->p = np;
        b->cap = ncap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void sb_puts(sbuf *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

static void sb_int(sbuf *b, uint64_t v)
{
    char tmp[24];
    int n = snprintf(tmp, sizeof tmp, "%" PRIu64, v);
    sb_put(b, tmp, (size_t)n);
}

/* A JSON string literal; s is valid UTF-8, passed through unescaped
 * except for '"', '\\' and control characters. */
static void sb_jstr(sbuf *b, const char *s)
{
    sb_put(b, "\"", 1);
    const char *run = s;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        sb_put(b, run, (size_t)(s - run));
        run = s + 1;
        char esc[8];
        switch (c) {
        case '"': sb_put(b, "\\\"", 2); break;
        case '\\': sb_put(b, "\\\\", 2); break;
        case '\b': sb_put(b, "\\b", 2); break;
        case '\f': sb_put(b, "\\f", 2); break;
        case '\n': sb_put(b, "\\n", 2); break;
        case '\r': sb_put(b, "\\r", 2); break;
        case '\t': sb_put(b, "\\t", 2); break;
        default:
            snprintf(esc, sizeof esc, "\\u%04x", c);
            sb_put(b, esc, 6);
            break;
        }
    }
    sb_put(b, run, (size_t)(s - run));
    sb_put(b, "\"", 1);
}

int skv_stw_serialize(const skv_st_writer *w, uint8_t **out, size_t *out_len)
{
    if (!w || !out || !out_len)
        return skv_error(SKV_ERR_ARG, "safetensors writer: NULL argument");
    *out = NULL;
    *out_len = 0;

    /* Compact JSON as the Python library writes it: __metadata__ first,
     * then the tensors in insertion order with contiguous offsets. */
    sbuf hb = {0};
    sb_put(&hb, "{", 1);
    int first = 1;
    if (w->nm) {
        sb_puts(&hb, "\"" META_KEY "\":{");
        for (size_t i = 0; i < w->nm; i++) {
            if (i)
                sb_put(&hb, ",", 1);
            sb_jstr(&hb, w->m[i].key);
            sb_put(&hb, ":", 1);
            sb_jstr(&hb, w->m[i].value);
        }
        sb_put(&hb, "}", 1);
        first = 0;
    }
    size_t off = 0;
    for (size_t i = 0; i < w->n; i++) {
        const stw_entry *e = &w->e[i];
        if (!first)
            sb_put(&hb, ",", 1);
        first = 0;
        sb_jstr(&hb, e->name);
        sb_puts(&hb, ":{\"dtype\":");
        sb_jstr(&hb, skv_dtype_name(e->dtype));
        sb_puts(&hb, ",\"shape\":[");
        for (int d = 0; d < e->ndim; d++) {
            if (d)
                sb_put(&hb, ",", 1);
            sb_int(&hb, (uint64_t)e->shape[d]);
        }
        sb_puts(&hb, "],\"data_offsets\":[");
        if (e->nbytes > SIZE_MAX - off) {
            skv_free(hb.p);
            return skv_error(SKV_ERR_TOO_LARGE, "safetensors writer: data size overflows");
        }
        sb_int(&hb, off);
        sb_put(&hb, ",", 1);
        off += e->nbytes;
        sb_int(&hb, off);
        sb_puts(&hb, "]}");
    }
    sb_put(&hb, "}", 1);
    /* pad with spaces so the data region starts 8-byte aligned */
    while (!hb.err && hb.len % 8)
        sb_put(&hb, " ", 1);
    if (hb.err) {
        skv_free(hb.p);
        return skv_error(SKV_ERR_NOMEM, "safetensors writer: out of memory for the header");
    }
    if (hb.len > SKV_ST_MAX_HEADER) {
        skv_free(hb.p);
        return skv_error(SKV_ERR_TOO_LARGE,
                         "safetensors writer: header of %zu bytes exceeds the limit of %u",
                         hb.len, SKV_ST_MAX_HEADER);
    }
    if (off > SIZE_MAX - 8 - hb.len) {
        skv_free(hb.p);
        return skv_error(SKV_ERR_TOO_LARGE, "safetensors writer: file size overflows");
    }
    size_t total = 8 + hb.len + off;
    uint8_t *buf = skv_malloc(total);
    if (!buf) {
        skv_free(hb.p);
        return skv_error(SKV_ERR_NOMEM, "safetensors writer: out of memory for %zu bytes",
                         total);
    }
    skv_store64_le(buf, (uint64_t)hb.len);
    memcpy(buf + 8, hb.p, hb.len);
    skv_free(hb.p);
    uint8_t *p = buf + 8 + hb.len;
    for (size_t i = 0; i < w->n; i++) {
        if (w->e[i].nbytes)
            memcpy(p, w->e[i].data, w->e[i].nbytes);
        p += w->e[i].nbytes;
    }
    *out = buf;
    *out_len = total;
    return 0;
}

int skv_stw_write(const skv_st_writer *w, const char *path)
{
    if (!w || !path)
        return skv_error(SKV_ERR_ARG, "safetensors writer: NULL argument");
    uint8_t *buf;
    size_t len;
    int rc = skv_stw_serialize(w, &buf, &len);
    if (rc)
        return rc;
    rc = skv_file_write(path, buf, len);
    skv_free(buf);
    return rc;
}
