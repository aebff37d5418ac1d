/*
 * skv_base.h - the bottom of seqkv, internal to it: error recording (the
 * codes are seqkv.h's), the heap wrapper, byte-order access,
 * storage dtypes (seqkv_dtype.h), a fixed-partition thread pool, a seeded
 * RNG, deterministic elementary functions and files.
 *
 * Every other module depends on this one; it depends on nothing but libc,
 * libm and pthreads.
 */
#ifndef SKV_BASE_H
#define SKV_BASE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "skv_dtype.h"
#include "seqkv.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Errors (seqkv.h): internal code records a failure's detail with
 * skv_error and returns its code. */
/* Record `err` with a printf-style detail for this thread; returns err so
 * callers can write `return skv_error(SKV_ERR_FORMAT, "...")`. */
int skv_error_at(int err, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#ifdef NDEBUG
#define skv_error(err, ...) skv_error_at((err), NULL, 0, __VA_ARGS__)
#else
#define skv_error(err, ...) skv_error_at((err), __FILE__, __LINE__, __VA_ARGS__)
#endif
/* ------------------------------------------------------------------------
 * Heap. All seqkv heap use goes through these so tests can make the n-th
 * allocation fail. skv_free(NULL) is a no-op. Sizes that overflow fail.
 * ---------------------------------------------------------------------- */
void *skv_malloc(size_t n);
void *skv_calloc(size_t count, size_t size);
void *skv_realloc(void *p, size_t n);
void skv_free(void *p);
/* n zeroed bytes on pages of 2 MiB where the kernel gives them
 * (transparent huge pages; the tail past the last whole 2 MiB on 4 KiB
 * pages): a block that gathers read at random (the codec's tables) then
 * takes a few TLB entries instead of hundreds, and a big buffer written
 * for the first time takes a page fault every 2 MiB instead of every
 * 4 KiB (on this project's VMs, 20x faster for 64 MiB). Each 2 MiB
 * touched costs 2 MiB. Freed by skv_free_huge with the same n (or
 * skv_huge_len(n)). skv_huge_len: the bytes the block takes. */
void *skv_calloc_huge(size_t n);
void skv_free_huge(void *p, size_t n);
size_t skv_huge_len(size_t n);
/* Warm big buffers (base/warm.c): a fresh block of SKV_WARM_HUGE bytes or
 * more is a skv_calloc_huge block, a smaller one skv_malloc's; a block of
 * SKV_WARM_MIN or more given back with skv_warm_free is kept
 * (SKV_WARM_KEEP blocks and SKV_WARM_BYTES at most) for the next
 * skv_warm_alloc of as many bytes, whose pages are then already there.
 * skv_warm_alloc: a kept block of n to n + n/4 bytes (the smallest), else
 * a fresh one; *cap its size (the pages it takes), which skv_warm_free
 * wants back. A block of SKV_WARM_MIN or more given to skv_warm_free must
 * come from skv_warm_alloc or skv_warm_take; a smaller one may come from
 * skv_malloc. skv_warm_take: a kept block only (NULL when none fits).
 * skv_warm_trim gives every kept block back to the system (when the
 * server is idle). Thread-safe. */
#define SKV_WARM_MIN ((size_t)1 << 20)
#define SKV_WARM_HUGE ((size_t)2 << 20)
#define SKV_WARM_KEEP 8
#define SKV_WARM_BYTES ((size_t)256 << 20)
void *skv_warm_alloc(size_t n, size_t *cap);
void *skv_warm_take(size_t n, size_t *cap);
void skv_warm_free(void *p, size_t cap);
void skv_warm_trim(void);
size_t skv_warm_bytes(void);
/* Make the allocation `n` calls from now fail (n = 0: the next one), and
 * every later one while `sticky` is set; n < 0 turns injection off. */
void skv_alloc_fail_after(long n, int sticky);

/* ------------------------------------------------------------------------
 * Byte order. Formats are read and written through these, never
 * by copying structs.
 * ---------------------------------------------------------------------- */
static inline uint16_t skv_load16_le(const void *p)
{
    const uint8_t *b = (const uint8_t *)p;
    return (uint16_t)(b[0] | (b[1] << 8));
}
static inline uint32_t skv_load32_le(const void *p)
{
    const uint8_t *b = (const uint8_t *)p;
    return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) |
           ((uint32_t)b[3] << 24);
}
static inline uint64_t skv_load64_le(const void *p)
{
    const uint8_t *b = (const uint8_t *)p;
    return (uint64_t)skv_load32_le(b) | ((uint64_t)skv_load32_le(b + 4) << 32);
}
static inline void skv_store16_le(void *p, uint16_t v)
{
    uint8_t *b = (uint8_t *)p;
    b[0] = (uint8_t)v;
    b[1] = (uint8_t)(v >> 8);
}
static inline void skv_store32_le(void *p, uint32_t v)
{
    uint8_t *b = (uint8_t *)p;
    b[0] = (uint8_t)v;
    b[1] = (uint8_t)(v >> 8);
    b[2] = (uint8_t)(v >> 16);
    b[3] = (uint8_t)(v >> 24);
}
static inline void skv_store64_le(void *p, uint64_t v)
{
    skv_store32_le(p, (uint32_t)v);
    skv_store32_le((uint8_t *)p + 4, (uint32_t)(v >> 32));
}
/* Big-endian: keys whose byte order is their sort order (LMDB's) */
static inline void skv_store64_be(void *p, uint64_t v)
{
    uint8_t *b = (uint8_t *)p;
    for (int i = 7; i >= 0; i--, v >>= 8)
        b[i] = (uint8_t)v;
}
static inline uint64_t skv_load64_be(const void *p)
{
    const uint8_t *b = (const uint8_t *)p;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | b[i];
    return v;
}
static inline uint32_t skv_f32_bits(float f)
{
    union { float f; uint32_t u; } c;
    c.f = f;
    return c.u;
}
static inline float skv_bits_f32(uint32_t u)
{
    union { float f; uint32_t u; } c;
    c.u = u;
    return c.f;
}

/* Whether some 32-bit word p[i] (i < n, native order) has (p[i] & mask) >
 * lim; mask and lim below 2^31 (the words are compared as signed), four
 * at a time. For floats: magnitude bits against a bound. */
static inline int skv_any_above32(const void *p, size_t n, uint32_t mask, uint32_t lim)
{
    typedef int32_t v4i __attribute__((vector_size(16)));
    const uint8_t *b = (const uint8_t *)p;
    const v4i m = {(int32_t)mask, (int32_t)mask, (int32_t)mask, (int32_t)mask},
              l = {(int32_t)lim, (int32_t)lim, (int32_t)lim, (int32_t)lim};
    v4i over = {0, 0, 0, 0};
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        v4i v;
        memcpy(&v, b + 4 * i, sizeof v);
        over |= (v & m) > l;
    }
    int any = over[0] | over[1] | over[2] | over[3];
    for (; i < n; i++) {
        uint32_t u;
        memcpy(&u, b + 4 * i, sizeof u);
        any |= (u & mask) > lim;
    }
    return any;
}

/* ------------------------------------------------------------------------
 * Optional GPU (CUDA). Present only when built with -Dcuda and a device is
 * usable at run time; every call otherwise returns SKV_ERR_NO_DEVICE.
 * ---------------------------------------------------------------------- */
/* 1 if this build has CUDA code and a device answers, else 0. */
int skv_gpu_available(void);
/* Human-readable device name or reason it is unavailable. */
const char *skv_gpu_describe(void);
/* Same contract and bit-identical results as skv_cast_from_f32. */
int skv_gpu_cast_from_f32(seqkv_dtype dt, void *dst, const float *src, size_t n);

/* ------------------------------------------------------------------------
 * Thread pool with a fixed partition: skv_pool_run(pool, n, fn, ctx)
 * splits [0, n) into one contiguous range per thread, by index only, so
 * which thread computes an item never depends on timing. Work items must
 * be independent; results then do not depend on the thread count.
 * ---------------------------------------------------------------------- */
typedef struct skv_pool skv_pool;
/* `worker` is the index (0..threads-1) of the thread running the range,
 * for per-thread scratch; results must not depend on it. */
typedef void (*skv_task_fn)(void *ctx, size_t begin, size_t end, int worker);

/* nthreads <= 0: use the number of online CPUs. */
int skv_pool_create(skv_pool **out, int nthreads);
void skv_pool_free(skv_pool *pool);
int skv_pool_threads(const skv_pool *pool);
/* Run fn over [0, n) and wait. pool may be NULL (runs inline). A pool runs
 * one region at a time: do not call skv_pool_run on the same pool from two
 * threads at once, or from inside fn. */
void skv_pool_run(skv_pool *pool, size_t n, skv_task_fn fn, void *ctx);
/* The same for items that are independent of one another and of which
 * thread runs them: each thread, the caller first, claims the next item
 * (fn(ctx, k, k + 1, worker)), so a worker that wakes late takes fewer;
 * it returns once every item is done, without waiting for a worker that
 * has not woken. */
void skv_pool_run_any(skv_pool *pool, size_t n, skv_task_fn fn, void *ctx);

/* ------------------------------------------------------------------------
 * Seeded RNG: xoshiro256** seeded by splitmix64. Same seed, same stream,
 * on every machine.
 * ---------------------------------------------------------------------- */
typedef struct {
    uint64_t s[4];
} skv_rng;
void skv_rng_seed(skv_rng *rng, uint64_t seed);
uint64_t skv_rng_next(skv_rng *rng);
/* Uniform in [0, 1) with 24 random bits. */
float skv_rng_uniform(skv_rng *rng);
/* Standard normal (Box-Muller on two uniforms; uses libm). */
float skv_rng_normal(skv_rng *rng);

/* ------------------------------------------------------------------------
 * Deterministic elementary functions in double precision, built from IEEE
 * basic operations and exact scaling only: the same bits on every IEEE-754
 * machine (libm's differ between versions). Relative error ~1e-16.
 * ---------------------------------------------------------------------- */
double skv_exp(double x);
double skv_log(double x);
void skv_sincos(double x, double *s, double *c);
/* Standard normal CDF, from skv_exp (relative error < 2e-7 in the tails). */
double skv_normal_cdf(double z);

/* ------------------------------------------------------------------------
 * Strings and the clock (text.c).
 * ---------------------------------------------------------------------- */
/* A copy of s on seqkv's allocator (skv_free it); NULL without memory. */
char *skv_strdup(const char *s);
/* Length of the well-formed UTF-8 sequence at p (< end), or 0 when it is
 * not one: overlong forms, surrogates and code points past U+10FFFF are
 * rejected (RFC 3629's table). */
size_t skv_utf8_seq_len(const unsigned char *p, const unsigned char *end);
/* 1 when s[0..len) is well-formed UTF-8 */
int skv_utf8_valid(const char *s, size_t len);
/* Wall-clock milliseconds since the epoch (expiry times, as Redis's) */
int64_t skv_now_ms(void);

/* ------------------------------------------------------------------------
 * Files.
 * ---------------------------------------------------------------------- */
/* Read a whole file into a fresh buffer (skv_free it); refuses files over
 * max_len bytes with SKV_ERR_TOO_LARGE. */
int skv_file_read(const char *path, size_t max_len, uint8_t **out, size_t *out_len);
/* Write atomically: to path.tmp, fsync, rename over path. A path that
 * exists and is not a regular file (a device, a directory, a symlink) is
 * refused with SKV_ERR_ARG. */
int skv_file_write(const char *path, const void *data, size_t len);
/* All n bytes of b written to fd at off (EINTR retried): 0, or the errno */
int skv_pwrite_all(int fd, const void *b, size_t n, long long off);

#ifdef __cplusplus
}
#endif
#endif /* SKV_BASE_H */
