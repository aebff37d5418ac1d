/* A fixed-partition thread pool. Items [0, n) are split into one
 * contiguous range per thread by index alone (thread i gets
 * [n*i/T, n*(i+1)/T)), so no result depends on scheduling; callers give
 * it independent items (rows of a matrix product, heads of attention).
 * skv_pool_run_any hands out items one at a time instead, for items whose
 * results do not depend on the thread that runs them. */
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "skv_base.h"

struct skv_pool {
    int n;
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t cv_start, cv_done;
    uint64_t gen; /* (written under mu; read spinning, atomically) */
    uint64_t pending;
    int stop;
    skv_task_fn fn;
    void *ctx;
    size_t count;
    int any;       /* skv_pool_run_any: items claimed one at a time */
    uint64_t claim; /* then: the region's generation (high 32 bits) and its next item */
    uint64_t done;  /* its items finished */
};

typedef struct {
    skv_pool *pool;
    int index;
} worker_arg;

static void run_range(skv_pool *p, int i, skv_task_fn fn, void *ctx, size_t count)
{
    size_t b = count * (size_t)i / (size_t)p->n;
    size_t e = count * (size_t)(i + 1) / (size_t)p->n;
    if (b < e)
        fn(ctx, b, e, i);
}

/* How long a thread spins for the next region, or for the workers to
 * finish one, before it sleeps on a condition variable: waking a sleeping
 * thread costs tens of microseconds on a virtual machine, about what a
 * record's region takes, and regions come back to back (a GET's records,
 * a batch's). */
#define SPIN_NS 50000

static uint64_t mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Spin until *v == x (eq), or until *v != x (!eq), or until stop when
 * given; SPIN_NS at most */
static void spin_until(const uint64_t *v, uint64_t x, int eq, const int *stop)
{
    const uint64_t t0 = mono_ns();
    for (unsigned i = 1;; i++) {
        if ((__atomic_load_n(v, __ATOMIC_ACQUIRE) == x) == eq ||
            (stop && __atomic_load_n(stop, __ATOMIC_RELAXED)))
            return;
        cpu_relax();
        if (!(i & 63) && mono_ns() - t0 > SPIN_NS)
            return;
    }
}

/* Items of the claimed region of generation gen, while it is current: a
 * thread that comes late finds it over (or another one) and touches
 * nothing of it */
static void run_any(skv_pool *p, uint32_t gen, int i, skv_task_fn fn, void *ctx, size_t count)
{
    uint64_t c = __atomic_load_n(&p->claim, __ATOMIC_ACQUIRE);
    while ((uint32_t)(c >> 32) == gen && (c & 0xffffffffu) < count) {
        if (!__atomic_compare_exchange_n(&p->claim, &c, c + 1, 1, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE))
            continue; /* (c reloaded) */
        const size_t k = (size_t)(c & 0xffffffffu);
        fn(ctx, k, k + 1, i);
        if (__atomic_add_fetch(&p->done, 1, __ATOMIC_ACQ_REL) == count) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
        c = __atomic_load_n(&p->claim, __ATOMIC_ACQUIRE);
    }
}

static void *worker_main(void *argp)
{
    worker_arg *a = argp;
    skv_pool *p = a->pool;
    int idx = a->index;
    skv_free(a);
    uint64_t seen = 0;
    for (;;) {
        spin_until(&p->gen, seen, 0, &p->stop);
        pthread_mutex_lock(&p->mu);
        while (p->gen == seen && !p->stop)
            pthread_cond_wait(&p->cv_start, &p->mu);
        if (p->stop) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        seen = p->gen;
        skv_task_fn fn = p->fn;
        void *ctx = p->ctx;
        size_t count = p->count;
        const int any = p->any;
        pthread_mutex_unlock(&p->mu);
        if (any) { /* (the caller waits for the items, not for this thread) */
            run_any(p, (uint32_t)seen, idx, fn, ctx, count);
            continue;
        }
        run_range(p, idx, fn, ctx, count);
        pthread_mutex_lock(&p->mu);
        if (__atomic_sub_fetch(&p->pending, 1, __ATOMIC_RELEASE) == 0)
            pthread_cond_signal(&p->cv_done);
        pthread_mutex_unlock(&p->mu);
    }
}

int skv_pool_create(skv_pool **out, int nthreads)
{
    *out = NULL;
    if (nthreads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        nthreads = c > 0 ? (int)c : 1;
    }
    if (nthreads > 256)
        return skv_error(SKV_ERR_ARG, "thread count %d exceeds 256", nthreads);
    skv_pool *p = skv_calloc(1, sizeof *p);
    if (!p)
        return skv_error(SKV_ERR_NOMEM, "pool");
    p->n = nthreads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_start, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    if (nthreads > 1) {
        p->th = skv_calloc((size_t)nthreads, sizeof *p->th);
        if (!p->th) {
            skv_pool_free(p);
            return skv_error(SKV_ERR_NOMEM, "pool threads");
        }
        for (int i = 1; i < nthreads; i++) {
            worker_arg *a = skv_malloc(sizeof *a);
            if (!a) {
                p->n = i;
                skv_pool_free(p);
                return skv_error(SKV_ERR_NOMEM, "pool threads");
            }
            a->pool = p;
            a->index = i;
            if (pthread_create(&p->th[i], NULL, worker_main, a) != 0) {
                skv_free(a);
                p->n = i;
                skv_pool_free(p);
                return skv_error(SKV_ERR_IO, "pthread_create failed");
            }
        }
    }
    *out = p;
    return SKV_OK;
}

void skv_pool_free(skv_pool *p)
{
    if (!p)
        return;
    if (p->th) {
        pthread_mutex_lock(&p->mu);
        __atomic_store_n(&p->stop, 1, __ATOMIC_RELAXED);
        pthread_cond_broadcast(&p->cv_start);
        pthread_mutex_unlock(&p->mu);
        for (int i = 1; i < p->n; i++)
            pthread_join(p->th[i], NULL);
        skv_free(p->th);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_start);
    pthread_cond_destroy(&p->cv_done);
    skv_free(p);
}

int skv_pool_threads(const skv_pool *p)
{
    return p ? p->n : 1;
}

static void pool_run(skv_pool *p, size_t n, skv_task_fn fn, void *ctx, int any)
{
    if (n == 0)
        return;
    if (!p || p->n == 1 || n == 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    any = any && n < 0xffffffffu;
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->count = n;
    p->any = any;
    const uint64_t gen = p->gen + 1;
    __atomic_store_n(&p->done, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&p->claim, (uint64_t)(uint32_t)gen << 32, __ATOMIC_RELEASE);
    __atomic_store_n(&p->pending, any ? 0 : (uint64_t)(p->n - 1), __ATOMIC_RELAXED);
    __atomic_store_n(&p->gen, gen, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&p->cv_start);
    pthread_mutex_unlock(&p->mu);
    if (any) {
        /* done when every item is, whichever threads ran them */
        run_any(p, (uint32_t)gen, 0, fn, ctx, n);
        spin_until(&p->done, n, 1, NULL);
        pthread_mutex_lock(&p->mu);
        while (__atomic_load_n(&p->done, __ATOMIC_ACQUIRE) != n)
            pthread_cond_wait(&p->cv_done, &p->mu);
        pthread_mutex_unlock(&p->mu);
        return;
    }
    run_range(p, 0, fn, ctx, n);
    spin_until(&p->pending, 0, 1, NULL); /* the workers finishing */
    pthread_mutex_lock(&p->mu);
    while (p->pending)
        pthread_cond_wait(&p->cv_done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void skv_pool_run(skv_pool *p, size_t n, skv_task_fn fn, void *ctx)
{
    pool_run(p, n, fn, ctx, 0);
}

void skv_pool_run_any(skv_pool *p, size_t n, skv_task_fn fn, void *ctx)
{
    pool_run(p, n, fn, ctx, 1);
}
