/* Helpers shared by the Criterion suites. */
#ifndef SKV_TESTUTIL_H
#define SKV_TESTUTIL_H
#include <stddef.h>
#include <stdint.h>

/* The source tree root (SEQKV_SOURCE_ROOT, set by meson test; else "."). */
const char *tu_source_root(void);
/* Path of ../shared/models/<name> next to the source tree, or NULL when the
 * file is absent (callers cr_skip with a message). Static buffer. */
const char *tu_shared_model(const char *name);
/* A fresh directory under $TMPDIR (or /tmp); static buffer. */
const char *tu_tmpdir(void);
/* Path join into a static rotating buffer. */
const char *tu_path(const char *dir, const char *name);
/* Read a whole file (malloc'd, with a NUL after the last byte), or NULL. */
uint8_t *tu_read(const char *path, size_t *len);
/* The code named by an SKV_* identifier (as in golden EXPECTED files), or 1
 * when the name is unknown. */
int tu_err_from_name(const char *name);
/* A golden directory's EXPECTED list: one "file SKV_ERR_NAME" per line
 * ('#' comments and blank lines skipped). */
typedef struct {
    char file[256];
    char name[64];
    int code; /* tu_err_from_name(name) */
} tu_expected;
/* Read dir/EXPECTED into out[0..cap); the count, or -1 if the file is
 * missing or a line is malformed or there are more than cap entries. */
int tu_golden_expected(const char *dir, tu_expected *out, int cap);
/* The first bad_* file of dir that the list does not name, or NULL. */
const char *tu_golden_unlisted(const char *dir, const tu_expected *list, int n);
/* Deterministic test bytes: p[0..n) from seed (an xorshift). */
void tu_fill_bytes(uint8_t *p, size_t n, uint32_t seed);
#endif
