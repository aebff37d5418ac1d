/*
 * kvfile.c - the KV file layout on top of safetensors.
 *
 * Sequence i of a KV file is three tensors:
 *   seq{i}.tokens  I32   [T]
 *   seq{i}.k       dtype [layers, T, kv_heads, head_dim]
 *   seq{i}.v       dtype [layers, T, kv_heads, head_dim]
 * with i written in canonical decimal (no leading zeros), numbered 0..n-1
 * without gaps. dtype is a storage float type (not I32); k and v share it
 * and their shape. T = 0 is a valid (empty) sequence. Other tensors may
 * share the file and are ignored, except ones named like a sequence
 * member that is not part of a complete sequence.
 *
 * skv_kvfile_add validates everything it can before adding the three
 * tensors; a later failure (out of memory, a name already added) can leave
 * part of the sequence in the writer, which should then be discarded.
 */
#include "skv_tensor.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

enum { PART_TOKENS, PART_K, PART_V, PART_NONE };

/* Classify a tensor name: "seq<digits>.<tokens|k|v>". Returns the part and
 * stores the index; PART_NONE for names outside the scheme. *canonical is
 * 0 for an index with leading zeros or too large for size_t. */
static int parse_seq_name(const char *name, size_t *idx, int *canonical)
{
    if (strncmp(name, "seq", 3) != 0)
        return PART_NONE;
    const char *p = name + 3;
    const char *digits = p;
    size_t v = 0;
    int ok = 1;
    while (*p >= '0' && *p <= '9') {
        unsigned d = (unsigned)(*p - '0');
        if (v > (SIZE_MAX - d) / 10)
            ok = 0;
        else
            v = v * 10 + d;
        p++;
    }
    size_t nd = (size_t)(p - digits);
    if (nd == 0 || *p != '.')
        return PART_NONE;
    int part;
    if (strcmp(p, ".tokens") == 0)
        part = PART_TOKENS;
    else if (strcmp(p, ".k") == 0)
        part = PART_K;
    else if (strcmp(p, ".v") == 0)
        part = PART_V;
    else
        return PART_NONE;
    if (nd > 1 && digits[0] == '0')
        ok = 0;
    *idx = v;
    *canonical = ok;
    return part;
}

static const skv_tensor *find_part(const skv_st *st, size_t i, const char *part)
{
    char name[64];
    snprintf(name, sizeof name, "seq%zu.%s", i, part);
    return skv_st_find(st, name);
}

int skv_kvfile_count(const skv_st *st, size_t *n_seq)
{
    if (!st || !n_seq)
        return skv_error(SKV_ERR_ARG, "kvfile: NULL argument");
    *n_seq = 0;
    size_t count = skv_st_count(st);
    size_t n = 0, max_idx = 0;
    for (size_t j = 0; j < count; j++) {
        const char *name = skv_st_at(st, j)->name;
        size_t idx;
        int canonical;
        int part = parse_seq_name(name, &idx, &canonical);
        if (part == PART_NONE)
            continue;
        if (!canonical)
            return skv_error(SKV_ERR_FORMAT,
                             "kvfile: tensor \"%.64s\": sequence index is not canonical "
                             "decimal",
                             name);
        if (part != PART_TOKENS)
            continue;
        n++;
        if (idx > max_idx)
            max_idx = idx;
    }
    /* Names are unique, so n distinct indices all below n are exactly
     * 0..n-1; otherwise name the first hole. */
    if (n && max_idx >= n) {
        size_t hole = 0;
        while (find_part(st, hole, "tokens"))
            hole++;
        return skv_error(SKV_ERR_FORMAT,
                         "kvfile: seq%zu.tokens is missing but seq%zu.tokens exists "
                         "(sequences must be numbered 0..n-1)",
                         hole, max_idx);
    }
    for (size_t i = 0; i < n; i++) {
        if (!find_part(st, i, "k"))
            return skv_error(SKV_ERR_FORMAT, "kvfile: sequence %zu has no seq%zu.k", i, i);
        if (!find_part(st, i, "v"))
            return skv_error(SKV_ERR_FORMAT, "kvfile: sequence %zu has no seq%zu.v", i, i);
    }
    /* A k or v past the last sequence belongs to an incomplete one. */
    for (size_t j = 0; j < count; j++) {
        const char *name = skv_st_at(st, j)->name;
        size_t idx;
        int canonical;
        int part = parse_seq_name(name, &idx, &canonical);
        if ((part == PART_K || part == PART_V) && idx >= n)
            return skv_error(SKV_ERR_FORMAT,
                             "kvfile: tensor \"%.64s\" has no seq%zu.tokens", name, idx);
    }
    *n_seq = n;
    return 0;
}

static int dim_to_int(int64_t d, int *out)
{
    if (d < 1 || d > INT_MAX)
        return -1;
    *out = (int)d;
    return 0;
}

int skv_kvfile_get(const skv_st *st, size_t i, skv_kvseq *out)
{
    if (!st || !out)
        return skv_error(SKV_ERR_ARG, "kvfile: NULL argument");
    memset(out, 0, sizeof *out);
    const skv_tensor *tok = find_part(st, i, "tokens");
    if (!tok)
        return skv_error(SKV_ERR_NOT_FOUND, "kvfile: no seq%zu.tokens", i);
    const skv_tensor *k = find_part(st, i, "k");
    const skv_tensor *v = find_part(st, i, "v");
    if (!k || !v)
        return skv_error(SKV_ERR_FORMAT, "kvfile: sequence %zu has no seq%zu.%s", i, i,
                         !k ? "k" : "v");
    if (tok->dtype != SEQKV_DT_I32 || tok->ndim != 1)
        return skv_error(SKV_ERR_SHAPE, "kvfile: seq%zu.tokens must be I32 [T] (is %s, %d dims)",
                         i, skv_dtype_name(tok->dtype), tok->ndim);
    size_t T = tok->nelem;
    if (k->dtype == SEQKV_DT_I32)
        return skv_error(SKV_ERR_SHAPE, "kvfile: seq%zu.k must be a float dtype, not I32", i);
    if (k->ndim != 4)
        return skv_error(SKV_ERR_SHAPE,
                         "kvfile: seq%zu.k must be [layers, T, kv_heads, head_dim] (has %d dims)",
                         i, k->ndim);
    if ((uint64_t)k->shape[1] != (uint64_t)T)
        return skv_error(SKV_ERR_SHAPE, "kvfile: seq%zu.k has %lld positions, tokens has %zu",
                         i, (long long)k->shape[1], T);
    if (v->dtype != k->dtype)
        return skv_error(SKV_ERR_SHAPE, "kvfile: seq%zu.v is %s but seq%zu.k is %s", i,
                         skv_dtype_name(v->dtype), i, skv_dtype_name(k->dtype));
    if (v->ndim != k->ndim || memcmp(v->shape, k->shape, 4 * sizeof k->shape[0]) != 0)
        return skv_error(SKV_ERR_SHAPE, "kvfile: seq%zu.v and seq%zu.k differ in shape", i, i);
    if (dim_to_int(k->shape[0], &out->layers) || dim_to_int(k->shape[2], &out->kv_heads) ||
        dim_to_int(k->shape[3], &out->head_dim)) {
        memset(out, 0, sizeof *out);
        return skv_error(SKV_ERR_SHAPE,
                         "kvfile: seq%zu.k: layers, kv_heads and head_dim must be in "
                         "1..INT_MAX",
                         i);
    }
    out->T = T;
    out->tokens = (const int32_t *)(const void *)tok->data;
    out->dtype = k->dtype;
    out->k = k->data;
    out->v = v->data;
    return 0;
}

int skv_kvfile_add(skv_st_writer *w, size_t i, const skv_kvseq *seq)
{
    if (!w || !seq)
        return skv_error(SKV_ERR_ARG, "kvfile: NULL argument");
    size_t esz = skv_dtype_size(seq->dtype);
    if (esz == 0 || seq->dtype == SEQKV_DT_I32)
        return skv_error(SKV_ERR_ARG, "kvfile: sequence %zu: K/V dtype must be a float type",
                         i);
    if (seq->layers < 1 || seq->kv_heads < 1 || seq->head_dim < 1)
        return skv_error(SKV_ERR_ARG,
                         "kvfile: sequence %zu: layers, kv_heads and head_dim must be >= 1", i);
    if (seq->T > (uint64_t)INT64_MAX)
        return skv_error(SKV_ERR_TOO_LARGE, "kvfile: sequence %zu: T too large", i);
    if (seq->T && (!seq->tokens || !seq->k || !seq->v))
        return skv_error(SKV_ERR_ARG, "kvfile: sequence %zu: NULL data", i);

    size_t nelem = (size_t)seq->layers;
    size_t factors[3] = {seq->T, (size_t)seq->kv_heads, (size_t)seq->head_dim};
    for (int f = 0; f < 3; f++) {
        if (factors[f] && nelem > SIZE_MAX / factors[f])
            return skv_error(SKV_ERR_TOO_LARGE, "kvfile: sequence %zu: size overflows", i);
        nelem *= factors[f];
    }
    if (nelem > SIZE_MAX / esz || seq->T > SIZE_MAX / 4)
        return skv_error(SKV_ERR_TOO_LARGE, "kvfile: sequence %zu: size overflows", i);
    size_t kv_bytes = nelem * esz;

    /* tokens are host int32; the file holds them little-endian */
    uint8_t *tok = skv_malloc(seq->T ? seq->T * 4 : 1);
    if (!tok)
        return skv_error(SKV_ERR_NOMEM, "kvfile: out of memory for %zu tokens", seq->T);
    for (size_t t = 0; t < seq->T; t++)
        skv_store32_le(tok + 4 * t, (uint32_t)seq->tokens[t]);

    char name[64];
    int64_t tshape[1] = {(int64_t)seq->T};
    int64_t kshape[4] = {seq->layers, (int64_t)seq->T, seq->kv_heads, seq->head_dim};
    snprintf(name, sizeof name, "seq%zu.tokens", i);
    int rc = skv_stw_add(w, name, SEQKV_DT_I32, 1, tshape, tok, seq->T * 4);
    skv_free(tok);
    if (rc)
        return rc;
    snprintf(name, sizeof name, "seq%zu.k", i);
    rc = skv_stw_add(w, name, seq->dtype, 4, kshape, seq->k, kv_bytes);
    if (rc)
        return rc;
    snprintf(name, sizeof name, "seq%zu.v", i);
    return skv_stw_add(w, name, seq->dtype, 4, kshape, seq->v, kv_bytes);
}
