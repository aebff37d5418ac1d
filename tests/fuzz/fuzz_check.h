/* The fuzz targets' check: a condition that must hold, else the target
 * names it (its file and line, and the last error's detail) and aborts,
 * which libFuzzer reports as a crash and the corpus replay as a failure. */
#ifndef SEQKV_FUZZ_CHECK_H
#define SEQKV_FUZZ_CHECK_H
#include <stdio.h>
#include <stdlib.h>

#include "seqkv.h"

__attribute__((noreturn)) static inline void fuzz_check_failed(const char *what, const char *file,
                                                                 int line)
{
    fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", file, line, what,
            seqkv_error_detail());
    abort();
}

#define CHECK(c)                                            \
    do {                                                    \
        if (!(c))                                           \
            fuzz_check_failed(#c, __FILE__, __LINE__);      \
    } while (0)

#endif
