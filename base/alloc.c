/* The one heap wrapper. Fault injection: tests arm a countdown with
 * skv_alloc_fail_after() and check that every failure path returns
 * SKV_ERR_NOMEM and leaks nothing (SQLite's fault-simulation habit). */
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

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

#define HUGE_PAGE ((size_t)2 << 20)
#define SMALL_PAGE ((size_t)4096)
#if defined(__SANITIZE_ADDRESS__)
#define HUGE_PLAIN 1 /* the sanitizer's checks of the heap rather than pages of its own */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HUGE_PLAIN 1
#endif
#endif

void *skv_calloc_huge(size_t n)
{
    if (n > (size_t)-1 / 2 - 2 * HUGE_PAGE)
        return NULL;
#ifdef HUGE_PLAIN
    return skv_calloc(1, n);
#else
    if (should_fail())
        return NULL;
    /* a mapping 2 MiB longer, trimmed to start on a 2 MiB boundary and to
     * end at its last 4 KiB page (anonymous mappings are zero): the whole
     * 2 MiB spans inside take huge pages, the tail ordinary ones, so the
     * block costs no more than its pages */
    const size_t len = skv_huge_len(n);
    uint8_t *raw = mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    uint8_t *p = (uint8_t *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (p > raw)
        munmap(raw, (size_t)(p - raw));
    if (raw + HUGE_PAGE > p)
        munmap(p + len, (size_t)(raw + HUGE_PAGE - p));
#ifdef MADV_HUGEPAGE
    (void)madvise(p, len, MADV_HUGEPAGE); /* (without them: ordinary pages) */
#endif
    return p;
#endif
}

void skv_free_huge(void *p, size_t n)
{
#ifdef HUGE_PLAIN
    (void)n;
    skv_free(p);
#else
    if (p)
        munmap(p, skv_huge_len(n));
#endif
}

size_t skv_huge_len(size_t n)
{
#ifdef HUGE_PLAIN
    return n ? n : 1;
#else
    return ((n ? n : 1) + SMALL_PAGE - 1) & ~(SMALL_PAGE - 1);
#endif
}
