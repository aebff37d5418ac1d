#include "testutil.h"

#include "skv_base.h"

#include <dirent.h>
#include <ftw.h>
#include <sys/stat.h>
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

/* The directories tu_tmpdir made, removed with all they hold when the
 * process that made them exits (a test's worker; a child forked from it
 * that exits leaves them alone) */
enum { TU_DIRS_MAX = 64 };
static char tu_dirs[TU_DIRS_MAX][4096];
static int tu_ndirs;
static pid_t tu_dirs_pid;

static int tu_rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

static void tu_rm_dirs(void)
{
    if (getpid() != tu_dirs_pid)
        return;
    for (int i = 0; i < tu_ndirs; i++)
        nftw(tu_dirs[i], tu_rm_one, 16, FTW_DEPTH | FTW_PHYS);
    tu_ndirs = 0;
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
    if (tu_dirs_pid != getpid()) { /* (a forked child starts its own list) */
        tu_dirs_pid = getpid();
        tu_ndirs = 0;
        atexit(tu_rm_dirs);
    }
    if (tu_ndirs < TU_DIRS_MAX)
        snprintf(tu_dirs[tu_ndirs++], sizeof tu_dirs[0], "%s", buf);
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
        if (strcmp(seqkv_error_name(e), name) == 0)
            return e;
    return 1;
}

int tu_golden_expected(const char *dir, tu_expected *out, int cap)
{
    FILE *f = fopen(tu_path(dir, "EXPECTED"), "r");
    if (!f)
        return -1;
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n')
            continue;
        if (n == cap || sscanf(line, "%255s %63s", out[n].file, out[n].name) != 2) {
            fclose(f);
            return -1;
        }
        out[n].code = tu_err_from_name(out[n].name);
        n++;
    }
    fclose(f);
    return n;
}

const char *tu_golden_unlisted(const char *dir, const tu_expected *list, int n)
{
    static char name[256];
    DIR *d = opendir(dir);
    if (!d)
        return dir;
    struct dirent *e;
    const char *missing = NULL;
    while (!missing && (e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "bad_", 4) != 0)
            continue;
        int found = 0;
        for (int i = 0; i < n; i++)
            found |= strcmp(list[i].file, e->d_name) == 0;
        if (!found) {
            snprintf(name, sizeof name, "%s", e->d_name);
            missing = name;
        }
    }
    closedir(d);
    return missing;
}

void tu_fill_bytes(uint8_t *p, size_t n, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (uint8_t)(x >> 7);
    }
}
