/* A fixed-partition thread pool. Items [0, n) are split into one
 * contiguous range per thread by index alone (thread i gets
 * [n*i/T, n*(i+1)/T)), so no result depends on scheduling; callers give
 * it independent items (rows of a matrix product, heads of attention). */
#include <pthread.h>
#include <unistd.h>

#include "skv_base.h"

struct skv_pool {
    int n;
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t cv_start, cv_done;
    uint64_t gen;
    int pending;
    int stop;
    skv_task_fn fn;
    void *ctx;
    size_t count;
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

static void *worker_main(void *argp)
{
    worker_arg *a = argp;
    skv_pool *p = a->pool;
    int idx = a->index;
    skv_free(a);
    uint64_t seen = 0;
    for (;;) {
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
        pthread_mutex_unlock(&p->mu);
        run_range(p, idx, fn, ctx, count);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0)
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
        p->stop = 1;
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

void skv_pool_run(skv_pool *p, size_t n, skv_task_fn fn, void *ctx)
{
    if (n == 0)
        return;
    if (!p || p->n == 1 || n == 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->count = n;
    p->pending = p->n - 1;
    p->gen++;
    pthread_cond_broadcast(&p->cv_start);
    pthread_mutex_unlock(&p->mu);
    run_range(p, 0, fn, ctx, n);
    pthread_mutex_lock(&p->mu);
    while (p->pending)
        pthread_cond_wait(&p->cv_done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
