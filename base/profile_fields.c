/* seqkv_profile as text: the one table of its fields -- their names
 * (KV.PROFILE's keys, the CLI's options, the Python client's keywords),
 * what each may be, and how it reads and prints. The server, the C
 * client, the CLI and (generated from it, python/seqkv/profile_fields.py)
 * the Python client all go through it; the store checks a whole profile
 * (store/profiles.c). Levels' names live here too. */
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "skv_base.h"
#include "skv_dtype.h"

static const char *const level_names[SEQKV_LEVELS + 1] = {"raw",  "stat", "ctx",  "spec",
                                                         "full", "fast", "lossy"};

const char *seqkv_level_name(seqkv_level l)
{
    return (unsigned)l <= SEQKV_LOSSY ? level_names[l] : "?";
}

int seqkv_level_parse(const char *s, seqkv_level *out)
{
    for (int i = 0; i < SEQKV_LEVELS; i++)
        if (strcmp(s, level_names[i]) == 0) {
            *out = (seqkv_level)i;
            return SKV_OK;
        }
    return skv_error(SKV_ERR_ARG, "unknown level '%s' (raw, stat, ctx, spec, full, fast)", s);
}

/* How a field reads and prints */
/* F_COUNT: a count whose text 0 means none (-1 in the struct, where 0 is
 * the default, printed as its value) */
enum { F_NAME, F_INT, F_THETA, F_DTYPE, F_LEVEL, F_MODEL, F_COUNT, F_LOSSY, F_FLAG, F_TOKEN_BYTES,
       F_ID };

typedef struct {
    seqkv_profile_field pub;
    int how;
    size_t off;         /* offsetof(seqkv_profile, field) (unused: computed) */
    long long lo, hi;   /* an integer's bounds */
    int dflt;           /* what 0 in the struct stands for (0: itself) */
} field;

#define OFF(f) offsetof(seqkv_profile, f)
static const field fields[] = {
    {{"name", SEQKV_FIELD_TEXT, SEQKV_FIELD_SHAPE,
      "a name of 1..63 bytes"},
     F_NAME, OFF(name), 0, 0, 0},
    {{"layers", SEQKV_FIELD_INT, SEQKV_FIELD_SHAPE,
      "1..65536"},
     F_INT, OFF(layers), 1, 1 << 16, 0},
    {{"kv_heads", SEQKV_FIELD_INT, SEQKV_FIELD_SHAPE,
      "1..65536"},
     F_INT, OFF(kv_heads), 1, 1 << 16, 0},
    {{"head_dim", SEQKV_FIELD_INT, SEQKV_FIELD_SHAPE,
      "1..65536"},
     F_INT, OFF(head_dim), 1, 1 << 16, 0},
    {{"dtype", SEQKV_FIELD_TEXT, SEQKV_FIELD_SHAPE,
      "bf16, fp16, fp8 or fp32"},
     F_DTYPE, OFF(dtype), 0, 0, 0},
    {{"level", SEQKV_FIELD_TEXT, SEQKV_FIELD_CHANGE,
      "raw, stat, ctx, spec, full or fast"},
     F_LEVEL, OFF(level), 0, 0, 0},
    {{"rope_theta", SEQKV_FIELD_FLOAT, SEQKV_FIELD_SHAPE,
      "a number in [0, 1e12] (0: the model's, else 10000)"},
     F_THETA, OFF(rope_theta), 0, 0, 0},
    {{"rope_dim", SEQKV_FIELD_INT, SEQKV_FIELD_SHAPE,
      "0..65536 rotated channels a head (0: head_dim)"},
     F_INT, OFF(rope_dim), 0, 1 << 16, 0},
    {{"rope_half", SEQKV_FIELD_INT, SEQKV_FIELD_SHAPE,
      "1 (HF's half layout) or 0 (pairs)"},
     F_INT, OFF(rope_half), 0, 1, 0},
    {{"chunk", SEQKV_FIELD_INT, SEQKV_FIELD_SHAPE,
      "1..4096 tokens a chunk (default 256)"},
     F_INT, OFF(chunk), 1, SEQKV_CHUNK_MAX, SEQKV_CHUNK_DEFAULT},
    {{"vocab", SEQKV_FIELD_INT, SEQKV_FIELD_CHANGE,
      "token ids in [0, vocab): 1..2147483647 (default: the model's, else 1048576)"},
     F_INT, OFF(vocab), 1, SEQKV_VOCAB_MAX, 0},
    {{"model", SEQKV_FIELD_TEXT, SEQKV_FIELD_CHANGE | SEQKV_FIELD_ADMIN,
      "a checkpoint's path (\"\": none)"},
     F_MODEL, OFF(model), 0, 0, 0},
    {{"calibrated", SEQKV_FIELD_INT, SEQKV_FIELD_STORE,
      "1 once calibrated"},
     F_FLAG, OFF(has_calib), 0, 1, 0},
    {{"auto_calibrate", SEQKV_FIELD_INT, SEQKV_FIELD_CHANGE,
      "token positions before it calibrates itself (0: never; default 8192)"},
     F_COUNT, OFF(auto_calibrate), -1, 1 << 30, SEQKV_AUTO_CALIBRATE_DEFAULT},
    {{"lossy", SEQKV_FIELD_INT, SEQKV_FIELD_CHANGE,
      "q4, q3, q2 or off (4, 3, 2, 0)"},
     F_LOSSY, OFF(lossy), 0, 4, 0},
    {{"lossy_sink", SEQKV_FIELD_INT, SEQKV_FIELD_CHANGE,
      "first positions of a sequence kept exact (0: none; default 4)"},
     F_COUNT, OFF(lossy_sink), -1, 1 << 20, SEQKV_LOSSY_SINK_DEFAULT},
    {{"lossy_recent", SEQKV_FIELD_INT, SEQKV_FIELD_CHANGE,
      "last positions of a put kept exact (0: none; default 64)"},
     F_COUNT, OFF(lossy_recent), -1, 1 << 20, SEQKV_LOSSY_RECENT_DEFAULT},
    {{"lossy_calibrated", SEQKV_FIELD_INT, SEQKV_FIELD_STORE,
      "1 once its lossy tier is calibrated"},
     F_FLAG, OFF(has_lossy), 0, 1, 0},
    {{"token_bytes", SEQKV_FIELD_INT, SEQKV_FIELD_STORE,
      "bytes of one token's KV"},
     F_TOKEN_BYTES, 0, 0, 0, 0},
    {{"id", SEQKV_FIELD_TEXT, SEQKV_FIELD_STORE,
      "the identity hash, hex"},
     F_ID, OFF(id), 0, 0, 0},
};
#define NFIELDS (sizeof fields / sizeof fields[0])

const seqkv_profile_field *seqkv_profile_field_at(size_t i)
{
    return i < NFIELDS ? &fields[i].pub : NULL;
}

size_t seqkv_profile_field_count(void)
{
    return NFIELDS;
}

/* name and want alike, '-' and '_' the same */
static int same_name(const char *name, const char *want)
{
    for (; *name && *want; name++, want++)
        if (*name != *want && !((*name == '-' || *name == '_') && *want == '_'))
            return 0;
    return !*name && !*want;
}

int seqkv_profile_field_find(const char *name, size_t *index)
{
    for (size_t i = 0; i < NFIELDS; i++)
        if (same_name(name, fields[i].pub.name)) {
            *index = i;
            return SKV_OK;
        }
    char known[512] = "";
    for (size_t i = 0, n = 0; i < NFIELDS && n < sizeof known; i++)
        if (!(fields[i].pub.flags & SEQKV_FIELD_STORE) && i > 0)
            n += (size_t)snprintf(known + n, sizeof known - n, "%s%s", n ? ", " : "",
                                  fields[i].pub.name);
    return skv_error(SKV_ERR_ARG, "unknown profile field '%.40s' (%s)", name, known);
}

static int parse_ll(const char *v, long long lo, long long hi, long long *out)
{
    char *end;
    if (!*v || (*v == ' ' || *v == '+'))
        return -1;
    long long x = strtoll(v, &end, 10);
    if (*end || x < lo || x > hi)
        return -1;
    *out = x;
    return 0;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int wants(const field *f)
{
    return skv_error(SKV_ERR_ARG, "profile field %s wants %s", f->pub.name, f->pub.text);
}

int seqkv_profile_field_parse(seqkv_profile *p, size_t i, const char *v)
{
    if (i >= NFIELDS)
        return skv_error(SKV_ERR_ARG, "no profile field %zu", i);
    const field *f = &fields[i];
    uint8_t *at = (uint8_t *)p + f->off;
    long long x;
    switch (f->how) {
    case F_NAME:
    case F_MODEL: {
        const size_t n = strlen(v), cap = f->how == F_NAME ? SEQKV_NAME_MAX : SEQKV_PATH_MAX;
        if ((n == 0 && f->how == F_NAME) || n > cap) /* (a model "": none) */
            return wants(f);
        memcpy(at, v, n + 1);
        return SKV_OK;
    }
    case F_INT:
    case F_FLAG:
        if (parse_ll(v, f->lo, f->hi, &x))
            return wants(f);
        *(int *)at = (int)x;
        return SKV_OK;
    case F_COUNT: /* text 0 is none: -1 in the struct, where 0 is the default */
        if (parse_ll(v, f->lo, f->hi, &x))
            return wants(f);
        *(int *)at = x > 0 ? (int)x : -1;
        return SKV_OK;
    case F_LOSSY:
        if (strcmp(v, "off") == 0 || strcmp(v, "0") == 0)
            x = 0;
        else if ((v[0] == 'q' && v[1] >= '2' && v[1] <= '4' && !v[2]) ||
                 (v[0] >= '2' && v[0] <= '4' && !v[1]))
            x = v[strlen(v) - 1] - '0';
        else
            return wants(f);
        *(int *)at = (int)x;
        return SKV_OK;
    case F_THETA: {
        char *end;
        const float t = strtof(v, &end);
        if (end == v || *end || !(t >= 0.0f && t <= 1e12f))
            return wants(f);
        *(float *)at = t;
        return SKV_OK;
    }
    case F_DTYPE:
        if (skv_dtype_from_user(v, &p->dtype) || p->dtype == SEQKV_DT_I32)
            return wants(f);
        return SKV_OK;
    case F_LEVEL:
        return seqkv_level_parse(v, &p->level) ? wants(f) : SKV_OK;
    case F_TOKEN_BYTES:
        /* (computed: read, kept nowhere) */
        return parse_ll(v, 0, LLONG_MAX, &x) ? wants(f) : SKV_OK;
    case F_ID:
        if (strlen(v) != 64)
            return wants(f);
        for (int k = 0; k < 32; k++) {
            const int h = hexval(v[2 * k]), l = hexval(v[2 * k + 1]);
            if (h < 0 || l < 0)
                return wants(f);
            p->id[k] = (uint8_t)(h << 4 | l);
        }
        return SKV_OK;
    }
    return wants(f);
}

static const char *dtype_text(seqkv_dtype d)
{
    switch (d) {
    case SEQKV_DT_F32: return "fp32";
    case SEQKV_DT_BF16: return "bf16";
    case SEQKV_DT_F16: return "fp16";
    case SEQKV_DT_F8E4M3: return "fp8";
    default: return "?";
    }
}

int seqkv_profile_field_format(const seqkv_profile *p, size_t i, char *buf, size_t cap)
{
    if (i >= NFIELDS)
        return skv_error(SKV_ERR_ARG, "no profile field %zu", i);
    const field *f = &fields[i];
    const uint8_t *at = (const uint8_t *)p + f->off;
    int n = 0;
    switch (f->how) {
    case F_NAME:
    case F_MODEL: n = snprintf(buf, cap, "%s", (const char *)at); break;
    case F_INT:
    case F_FLAG:
    case F_LOSSY: {
        const int a = *(const int *)at;
        n = snprintf(buf, cap, "%d", a ? a : f->dflt);
        break;
    }
    case F_COUNT: {
        const int a = *(const int *)at;
        n = snprintf(buf, cap, "%d", a < 0 ? 0 : a ? a : f->dflt);
        break;
    }
    case F_THETA: n = snprintf(buf, cap, "%.9g", (double)*(const float *)at); break;
    case F_DTYPE: n = snprintf(buf, cap, "%s", dtype_text(p->dtype)); break;
    case F_LEVEL: n = snprintf(buf, cap, "%s", seqkv_level_name(p->level)); break;
    case F_TOKEN_BYTES:
        n = snprintf(buf, cap, "%zu", seqkv_profile_token_bytes(p));
        break;
    case F_ID:
        for (int k = 0; k < 32 && 2 * (size_t)k + 2 < cap; k++)
            snprintf(buf + 2 * k, 3, "%02x", p->id[k]);
        n = 64;
        break;
    }
    if (n < 0 || (size_t)n >= cap)
        return skv_error(SKV_ERR_TOO_LARGE, "profile field %s needs %d bytes", f->pub.name, n + 1);
    return n;
}

size_t seqkv_profile_token_bytes(const seqkv_profile *p)
{
    return (size_t)p->layers * 2 * (size_t)p->kv_heads * (size_t)p->head_dim *
           skv_dtype_size(p->dtype);
}
