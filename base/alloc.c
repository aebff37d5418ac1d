/* The one heap wrapper. Fault injection: tests arm a countdown with
 * skv_alloc_fail_after() and check that every failure path returns
 * SKV_ERR_NOMEM and leaks nothing (SQLite's fault-simulation habit). */
#include <stdlib.h>

#include "skv_base.h"

static long g_fail_countdown = -1; /* -1: off */
static int g_fail_sticky;

void skv_alloc_fail_after(long n, int sticky)
{
    __atomic_store_n(&g_fail_sticky, sticky, __ATOMIC_SEQ_CST);
    __atomic_store_n(&g_fail_countdown, n < 0 ? -1 : n, __ATOMIC_SEQ_CST);
}

static int should_fail(void)
{
    long c = __atomic_load_n(&g_fail_countdown, __ATOMIC_SEQ_CST);
    if (c < 0)
        return 0;
    if (c == 0) {
        if (!__atomic_load_n(&g_fail_sticky, __ATOMIC_SEQ_CST))
            __atomic_store_n(&g_fail_countdown, -1, __ATOMIC_SEQ_CST);
        return 1;
    }
    __atomic_fetch_sub(&g_fail_countdown, 1, __ATOMIC_SEQ_CST);
    return 0;
}

void *skv_malloc(size_t n)
{
    if (should_fail())
        return NULL;
    return malloc(n ? n : 1);
}

void *skv_calloc(size_t count, size_t size)
{
    if (size && count > (size_t)-1 / size)
        return NULL;
    if (should_fail())
        return NULL;
    return calloc(count ? count : 1, size ? size : 1);
}

void *skv_realloc(void *p, size_t n)
{
    if (should_fail())
        return NULL;
    return realloc(p, n ? n : 1);
}

void skv_free(void *p)
{
    free(p);
}
