/*
 * skv_tensor.h - tensor files: a small strict JSON parser, safetensors
 * read/write, and the KV file layout every seqkv command uses.
 *
 * Depends on skv_base only. Everything read is untrusted: the parsers
 * check every length against an end pointer and fail with a clear
 * skv_error() detail instead of reading out of bounds.
 */
#ifndef SKV_TENSOR_H
#define SKV_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "skv_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
 * JSON (RFC 8259, strict: no comments, no trailing commas, no NaN; depth
 * at most SKV_JSON_MAX_DEPTH). Strings are decoded to UTF-8 (\u escapes,
 * surrogate pairs checked) and NUL-terminated; a string holding U+0000 is
 * rejected. Numbers keep their double value and, when written without a
 * fraction or exponent and within int64, their exact integer value.
 * ---------------------------------------------------------------------- */
#define SKV_JSON_MAX_DEPTH 64
/* At most this many values per document (SKV_ERR_TOO_LARGE beyond): bounds
 * the memory a hostile input can claim (~100 bytes a value) whatever its
 * length. A safetensors header needs about 10 per tensor. */
#define SKV_JSON_MAX_NODES (1u << 21)

typedef enum {
    SKV_JSON_NULL,
    SKV_JSON_BOOL,
    SKV_JSON_NUM,
    SKV_JSON_STR,
    SKV_JSON_ARR,
    SKV_JSON_OBJ,
} skv_json_type;

typedef struct skv_json skv_json;
struct skv_json {
    skv_json_type type;
    int boolean;          /* BOOL */
    double num;           /* NUM */
    int is_int;           /* NUM: written as an integer that fits int64 */
    int64_t i64;          /* NUM when is_int */
    const char *str;      /* STR: decoded, NUL-terminated */
    size_t str_len;
    const char *key;      /* member of an OBJ: its decoded key */
    size_t key_len;
    skv_json *child;      /* ARR/OBJ: first element/member */
    skv_json *next;       /* next sibling */
    size_t count;         /* ARR/OBJ: number of children */
};

/* Parse text[0..len). On success *out owns every node (one allocation
 * arena); free with skv_json_free. Errors: SKV_ERR_FORMAT (with the byte
 * offset in the detail), SKV_ERR_TOO_LARGE (nesting deeper than
 * SKV_JSON_MAX_DEPTH or more than SKV_JSON_MAX_NODES values), SKV_ERR_NOMEM. */
int skv_json_parse(const char *text, size_t len, skv_json **out);
void skv_json_free(skv_json *root);
/* Member of an object by key (first match), or NULL. */
const skv_json *skv_json_get(const skv_json *obj, const char *key);
/* i-th element of an array, or NULL. */
const skv_json *skv_json_at(const skv_json *arr, size_t i);

/* ------------------------------------------------------------------------
 * safetensors: u64 LE header length N, N bytes of JSON header
 *   {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [b, e]}, ...,
 *    "__metadata__": {"k": "v", ...}}
 * then the data region; offsets are relative to its start.
 * The reader rejects: N > SKV_ST_MAX_HEADER or beyond the file, a header
 * that is not a JSON object, unknown/missing fields, unsupported dtypes,
 * shapes whose byte size differs from e - b (or overflows), offsets past
 * the data region, overlapping tensors, and duplicate names.
 * ---------------------------------------------------------------------- */
/* Header cap: a hostile header costs up to ~48x its size in JSON nodes. */
#define SKV_ST_MAX_HEADER (16u << 20)
#define SKV_ST_MAX_DIMS 8

typedef struct {
    const char *name;           /* NUL-terminated */
    seqkv_dtype dtype;
    int ndim;
    int64_t shape[SKV_ST_MAX_DIMS];
    size_t nelem;
    const uint8_t *data;        /* into the file buffer; not aligned */
    size_t nbytes;
} skv_tensor;

typedef struct skv_st skv_st;

/* Parse a safetensors image. The buffer is borrowed and must outlive *out
 * (tensor data points into it). */
int skv_st_parse(const uint8_t *buf, size_t len, skv_st **out);
/* Read and parse a file; *out owns the file bytes. */
int skv_st_open(const char *path, skv_st **out);
void skv_st_free(skv_st *st);
size_t skv_st_count(const skv_st *st);
/* Tensors in data-offset order. */
const skv_tensor *skv_st_at(const skv_st *st, size_t i);
const skv_tensor *skv_st_find(const skv_st *st, const char *name);
/* __metadata__ string value, or NULL. */
const char *skv_st_meta(const skv_st *st, const char *key);

typedef struct skv_st_writer skv_st_writer;
int skv_stw_create(skv_st_writer **out);
void skv_stw_free(skv_st_writer *w);
/* Add a tensor; the data is copied. nbytes must equal
 * prod(shape) * skv_dtype_size(dtype) (else SKV_ERR_SHAPE); duplicate names
 * are SKV_ERR_ARG. */
int skv_stw_add(skv_st_writer *w, const char *name, seqkv_dtype dtype, int ndim,
                const int64_t *shape, const void *data, size_t nbytes);
/* Add a __metadata__ string entry (JSON-escaped on output). */
int skv_stw_meta(skv_st_writer *w, const char *key, const char *value);
/* Serialise to a fresh buffer (skv_free it). Header is padded with spaces
 * to a multiple of 8 bytes; tensors are laid out in insertion order. */
int skv_stw_serialize(const skv_st_writer *w, uint8_t **out, size_t *out_len);
/* Serialise and write atomically (temp file, fsync, rename). */
int skv_stw_write(const skv_st_writer *w, const char *path);

/* ------------------------------------------------------------------------
 * KV files. Sequence i is three tensors:
 *   seq{i}.tokens  I32   [T]
 *   seq{i}.k       dtype [layers, T, kv_heads, head_dim]   (K after RoPE)
 *   seq{i}.v       dtype [layers, T, kv_heads, head_dim]
 * with i = 0, 1, ... contiguous. k and v share dtype and shape.
 * ---------------------------------------------------------------------- */
typedef struct {
    size_t T;
    const int32_t *tokens;  /* reader: may be unaligned; use skv_load32_le */
    seqkv_dtype dtype;
    int layers, kv_heads, head_dim;
    const uint8_t *k;       /* layers*T*kv_heads*head_dim elements, LE */
    const uint8_t *v;
} skv_kvseq;

/* Number of sequences (seq0.. contiguous); SKV_ERR_FORMAT if a sequence
 * is incomplete or numbering has gaps. */
int skv_kvfile_count(const skv_st *st, size_t *n_seq);
/* View sequence i; checks names, dtypes and that shapes agree. */
int skv_kvfile_get(const skv_st *st, size_t i, skv_kvseq *out);
/* Append sequence i (tokens are host int32, written LE). */
int skv_kvfile_add(skv_st_writer *w, size_t i, const skv_kvseq *seq);

#ifdef __cplusplus
}
#endif
#endif /* SKV_TENSOR_H */
