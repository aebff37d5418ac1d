/* The core's clock as the benches see it, for turning M scalars/s into
 * cycles a scalar: a chain of dependent 64-bit multiplies retires one
 * every 3 cycles on every x86-64 core of the last decade (Intel since
 * Nehalem, AMD since Zen), so 3 x multiplies per second is the clock the
 * core ran at (boost included, a noisy neighbour's share excluded: best
 * of a few short runs). (A chain of `add $1` was the measure before:
 * Golden Cove and later fold immediate adds at rename and ran it at
 * several a cycle, 20 "GHz".) A figure in cycles travels between
 * machines of different clocks, a rate does not; this is what relates
 * the speed targets (M scalars/s) to a machine. 0 where it cannot be
 * measured (not x86-64 with GCC or Clang). */
#ifndef SKV_BENCH_CLOCK_H
#define SKV_BENCH_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline double skv_bench_clock_ghz(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    double best = 0;
    for (int r = 0; r < 15; r++) {
        uint64_t x = 1, n = 1000000, k = 3; /* 8M multiplies, 24M cycles, ~8 ms at 3 GHz */
        struct timespec t0, t1;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
        __asm__ volatile("1:\n\t"
                         "imul %2, %0\n\timul %2, %0\n\timul %2, %0\n\timul %2, %0\n\t"
                         "imul %2, %0\n\timul %2, %0\n\timul %2, %0\n\timul %2, %0\n\t"
                         "dec %1\n\tjnz 1b"
                         : "+r"(x), "+r"(n)
                         : "r"(k)
                         : "cc");
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
        double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
        if (s > 0 && 3.0 * 8 * 1000000 / s / 1e9 > best)
            best = 3.0 * 8 * 1000000 / s / 1e9;
    }
    return best;
#else
    return 0;
#endif
}

#endif
