/* Warm big buffers (skv_base.h): blocks of SKV_WARM_MIN bytes or more that
 * their users are done with are kept, up to SKV_WARM_KEEP of them and
 * SKV_WARM_BYTES in all, and handed to the next user that needs as many
 * bytes. Fresh blocks of SKV_WARM_HUGE or more are mapped on huge pages
 * (skv_calloc_huge; a smaller one would hold no whole 2 MiB page, and
 * comes from the heap, which reuses what it has). A block of 4 KiB pages
 * that is new memory costs a page fault a page, which on this project's
 * VMs made a 64 MiB copy into it 40x slower than into memory already there
 * (160 ms against 4 ms); on 2 MiB pages the first copy takes 5-8 ms. What
 * is kept costs no faults at all. */
#include <pthread.h>
#include <string.h>

#include "skv_base.h"

typedef struct {
    void *p;
    size_t cap;
} warm_block;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static warm_block g_kept[SKV_WARM_KEEP];
static size_t g_n, g_bytes;

/* The smallest kept block of n to n + n/4 bytes (caller holds g_mu), or
 * -1: a much bigger one would sit under-used in a user that keeps it long
 * (a hot-tier entry), beyond what that user counts */
static long best_fit(size_t n)
{
    long best = -1;
    for (size_t i = 0; i < g_n; i++)
        if (g_kept[i].cap >= n && g_kept[i].cap - n <= n / 4 &&
            (best < 0 || g_kept[i].cap < g_kept[best].cap))
            best = (long)i;
    return best;
}

void *skv_warm_take(size_t n, size_t *cap)
{
    void *p = NULL;
    if (n < SKV_WARM_MIN)
        return NULL;
    pthread_mutex_lock(&g_mu);
    long i = best_fit(n);
    if (i >= 0) {
        p = g_kept[i].p;
        *cap = g_kept[i].cap;
        g_bytes -= g_kept[i].cap;
        g_kept[i] = g_kept[--g_n];
    }
    pthread_mutex_unlock(&g_mu);
    return p;
}

void *skv_warm_alloc(size_t n, size_t *cap)
{
    void *p = skv_warm_take(n, cap);
    if (p)
        return p;
    if (n < SKV_WARM_HUGE) {
        *cap = n;
        return skv_malloc(n);
    }
    *cap = skv_huge_len(n);
    return skv_calloc_huge(n);
}

/* Give a block back to the system */
static void drop_block(void *p, size_t cap)
{
    if (cap < SKV_WARM_HUGE)
        skv_free(p);
    else
        skv_free_huge(p, cap);
}

void skv_warm_free(void *p, size_t cap)
{
    if (!p)
        return;
    if (cap < SKV_WARM_MIN || cap > SKV_WARM_BYTES) {
        drop_block(p, cap);
        return;
    }
    void *drop = p;
    pthread_mutex_lock(&g_mu);
    /* full: the block makes room by pushing out smaller ones (the big ones
     * cost the most to fault in again), or goes itself */
    while (g_n && (g_n == SKV_WARM_KEEP || g_bytes + cap > SKV_WARM_BYTES)) {
        size_t s = 0;
        for (size_t i = 1; i < g_n; i++)
            if (g_kept[i].cap < g_kept[s].cap)
                s = i;
        if (g_kept[s].cap > cap)
            break;
        drop_block(g_kept[s].p, g_kept[s].cap);
        g_bytes -= g_kept[s].cap;
        g_kept[s] = g_kept[--g_n];
    }
    if (g_n < SKV_WARM_KEEP && g_bytes + cap <= SKV_WARM_BYTES) {
        g_kept[g_n++] = (warm_block){p, cap};
        g_bytes += cap;
        drop = NULL;
    }
    pthread_mutex_unlock(&g_mu);
    if (drop)
        drop_block(drop, cap);
}

void skv_warm_trim(void)
{
    pthread_mutex_lock(&g_mu);
    for (size_t i = 0; i < g_n; i++)
        drop_block(g_kept[i].p, g_kept[i].cap);
    g_n = 0;
    g_bytes = 0;
    pthread_mutex_unlock(&g_mu);
}

size_t skv_warm_bytes(void)
{
    pthread_mutex_lock(&g_mu);
    size_t b = g_bytes;
    pthread_mutex_unlock(&g_mu);
    return b;
}
