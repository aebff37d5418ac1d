#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "skv_base.h"

static __thread char g_detail[1024];
static __thread char g_where[96];

const char *seqkv_strerror(int err)
{
    switch (err) {
    case SKV_OK: return "success";
    case SKV_ERR_NOMEM: return "out of memory";
    case SKV_ERR_IO: return "I/O error";
    case SKV_ERR_ARG: return "invalid argument";
    case SKV_ERR_FORMAT: return "malformed input";
    case SKV_ERR_VERSION: return "written by a newer format version";
    case SKV_ERR_RANGE: return "offset or size out of range";
    case SKV_ERR_SHAPE: return "shape, dtype or size mismatch";
    case SKV_ERR_UNSUPPORTED: return "unsupported";
    case SKV_ERR_NOT_FOUND: return "not found";
    case SKV_ERR_CORRUPT: return "corrupted data (checksum mismatch)";
    case SKV_ERR_TOO_LARGE: return "input exceeds a limit";
    case SKV_ERR_NO_DEVICE: return "no usable GPU";
    case SKV_ERR_DENIED: return "denied by the server (authentication or permission)";
    case SKV_ERR_SERVER: return "error reply from the server";
    case SKV_ERR_BUSY: return "the store is held by another writer";
    case SKV_ERR_CANCELLED: return "stopped on request";
    case SKV_ERR_MAP_FULL: return "the store's map is full";
    case SKV_ERR_LOSSY: return "stored lossy (ask for a lossy read)";
    default: return "unknown error";
    }
}

const char *seqkv_error_name(int err)
{
    static const char *const names[] = {
        "SKV_OK", "SKV_ERR_NOMEM", "SKV_ERR_IO", "SKV_ERR_ARG", "SKV_ERR_FORMAT",
        "SKV_ERR_VERSION", "SKV_ERR_RANGE", "SKV_ERR_SHAPE", "SKV_ERR_UNSUPPORTED",
        "SKV_ERR_NOT_FOUND", "SKV_ERR_CORRUPT", "SKV_ERR_TOO_LARGE", "SKV_ERR_NO_DEVICE",
        "SKV_ERR_DENIED", "SKV_ERR_SERVER", "SKV_ERR_BUSY", "SKV_ERR_CANCELLED",
        "SKV_ERR_MAP_FULL", "SKV_ERR_LOSSY",
    };
    _Static_assert(sizeof names / sizeof *names == 1 - SKV_ERR_MIN_, "a name for every code");
    return err <= 0 && err >= SKV_ERR_MIN_ ? names[-err] : NULL;
}

int skv_error_at(int err, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    char d[sizeof g_detail]; /* the arguments may hold the last detail itself */
    va_start(ap, fmt);
    vsnprintf(d, sizeof d, fmt, ap);
    va_end(ap);
    memcpy(g_detail, d, sizeof d);
    g_where[0] = 0;
    if (file) {
        const char *base = strrchr(file, '/');
        snprintf(g_where, sizeof g_where, "%s:%d", base ? base + 1 : file, line);
    }
    return err;
}

const char *seqkv_error_detail(void)
{
    return g_detail;
}

const char *seqkv_error_where(void)
{
    return g_where;
}

void seqkv_error_clear(void)
{
    g_detail[0] = 0;
    g_where[0] = 0;
}
