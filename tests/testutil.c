#include "testutil.h"

#include "skv_base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *tu_source_root(void)
{
    const char *r = getenv("SEQKV_SOURCE_ROOT");
    return r && *r ? r : ".";
}

const char *tu_shared_model(const char *name)
{
    static char buf[4096];
    const char *env = getenv("SEQKV_SHARED_MODELS");
    if (env && *env)
        snprintf(buf, sizeof buf, "%s/%s", env, name);
    else
        snprintf(buf, sizeof buf, "%s/../shared/models/%s", tu_source_root(), name);
    return access(buf, R_OK) == 0 ? buf : NULL;
}

const char *tu_tmpdir(void)
{
    static char buf[4096];
    const char *t = getenv("TMPDIR");
    snprintf(buf, sizeof buf, "%s/seqkv-test-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(buf)) {
        perror("mkdtemp");
        abort();
    }
    return buf;
}

const char *tu_path(const char *dir, const char *name)
{
    static char bufs[4][4096];
    static int next;
    char *b = bufs[next++ & 3];
    snprintf(b, 4096, "%s/%s", dir, name);
    return b;
}

uint8_t *tu_read(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(n > 0 ? (size_t)n + 1 : 1);
    if (b)
        b[n > 0 ? n : 0] = 0; /* NUL-terminated for text files */
    if (b && n > 0 && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b && len)
        *len = (size_t)n;
    return b;
}

int tu_err_from_name(const char *name)
{
    for (int e = 0; e >= SKV_ERR_MIN_; e--)
        if (strcmp(skv_error_name(e), name) == 0)
            return e;
    return 1;
}
