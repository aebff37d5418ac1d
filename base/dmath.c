/* Deterministic elementary functions. libm's expf/logf/sinf/cosf are not
 * specified to the last bit and differ between libm versions; a predictor
 * whose output feeds an entropy coder must give the same bits on every
 * machine, so the engine uses these instead. They are built from IEEE
 * basic operations (+ - * /), floor and ldexp/frexp (all exact), in double
 * precision, so they are bit-reproducible wherever IEEE-754 holds (and
 * FMA contraction is off: -ffp-contract=off). */
#include <math.h>
#include <stdint.h>

#include "skv_base.h"

static const double LN2_HI = 6.93147180369123816490e-01; /* 0x3fe62e42fee00000 */
static const double LN2_LO = 1.90821492927058770002e-10;
static const double LOG2E = 1.44269504088896338700e+00;

static inline double pow2i(int k) /* 2^k for -1022 <= k <= 1023 */
{
    union { double d; uint64_t u; } c;
    c.u = (uint64_t)(k + 1023) << 52;
    return c.d;
}

double skv_exp(double x)
{
    if (x != x)
        return x;
    if (x > 709.78)
        return HUGE_VAL;
    if (x < -745.2)
        return 0.0;
    /* k = x/ln2 rounded half away from zero (|k| < 1100: exact in int) */
    double kd = x * LOG2E;
    int ki = kd >= 0 ? (int)(kd + 0.5) : -(int)(0.5 - kd);
    double k = (double)ki;
    double r = (x - k * LN2_HI) - k * LN2_LO; /* |r| <= ~0.347 */
    /* Taylor to r^13 / 13!: truncation < 5e-18 relative. */
    double p = 1.0 / 6227020800.0;
    p = p * r + 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    /* scale by 2^k with exact power-of-two factors built from bits */
    if (ki >= -1022 && ki <= 1023)
        return p * pow2i(ki);
    if (ki > 1023)
        return (p * pow2i(1023)) * pow2i(ki - 1023);
    return (p * pow2i(ki + 1000)) * pow2i(-1000);
}

double skv_log(double x)
{
    if (x != x || x < 0)
        return NAN;
    if (x == 0)
        return -HUGE_VAL;
    if (isinf(x))
        return x;
    int e;
    double m = frexp(x, &e); /* x = m * 2^e, m in [0.5, 1) */
    if (m < 0.70710678118654752440) {
        m *= 2.0;
        e -= 1;
    }
    double s = (m - 1.0) / (m + 1.0); /* |s| <= 0.1716 */
    double s2 = s * s;
    /* log(m) = 2 atanh(s) = 2 (s + s^3/3 + ... + s^21/21) */
    double p = 1.0 / 21.0;
    for (int k = 19; k >= 1; k -= 2)
        p = p * s2 + 1.0 / (double)k;
    double lm = 2.0 * s * p;
    return (double)e * LN2_HI + (lm + (double)e * LN2_LO);
}

void skv_sincos(double x, double *sn, double *cs)
{
    /* Cody-Waite reduction by pi/2 in three parts (fdlibm's constants):
     * accurate for |x| up to ~2^20 * pi/2, far past any RoPE angle. */
    static const double INVPIO2 = 6.36619772367581382433e-01;
    static const double PIO2_1 = 1.57079632673412561417e+00;
    static const double PIO2_2 = 6.07710050630396597660e-11;
    static const double PIO2_3 = 2.02226624871116645580e-21;
    if (x != x || isinf(x)) {
        *sn = *cs = NAN;
        return;
    }
    double k = floor(x * INVPIO2 + 0.5);
    double r = ((x - k * PIO2_1) - k * PIO2_2) - k * PIO2_3;
    double r2 = r * r;
    /* sin r to r^19/19!, cos r to r^20/20!; |r| <= pi/4 */
    double ps = -1.0 / 121645100408832000.0;
    ps = ps * r2 + 1.0 / 355687428096000.0;
    ps = ps * r2 - 1.0 / 1307674368000.0;
    ps = ps * r2 + 1.0 / 6227020800.0;
    ps = ps * r2 - 1.0 / 39916800.0;
    ps = ps * r2 + 1.0 / 362880.0;
    ps = ps * r2 - 1.0 / 5040.0;
    ps = ps * r2 + 1.0 / 120.0;
    ps = ps * r2 - 1.0 / 6.0;
    double s = r + r * r2 * ps;
    double pc = 1.0 / 2432902008176640000.0;
    pc = pc * r2 - 1.0 / 6402373705728000.0;
    pc = pc * r2 + 1.0 / 20922789888000.0;
    pc = pc * r2 - 1.0 / 87178291200.0;
    pc = pc * r2 + 1.0 / 479001600.0;
    pc = pc * r2 - 1.0 / 3628800.0;
    pc = pc * r2 + 1.0 / 40320.0;
    pc = pc * r2 - 1.0 / 720.0;
    pc = pc * r2 + 1.0 / 24.0;
    pc = pc * r2 - 0.5;
    double c = 1.0 + r2 * pc;
    long q = (long)k & 3;
    switch (q) {
    case 0: *sn = s; *cs = c; break;
    case 1: *sn = c; *cs = -s; break;
    case 2: *sn = -s; *cs = -c; break;
    default: *sn = -c; *cs = s; break;
    }
}

/* Phi(z) = erfc(-z / sqrt 2) / 2 with the Chebyshev-fitted erfc of
 * Numerical Recipes (fractional error < 1.2e-7 everywhere), evaluated with
 * skv_exp so the result is reproducible to the bit. */
double skv_normal_cdf(double z)
{
    double x = -z * 0.70710678118654752440;
    double ax = x < 0 ? -x : x;
    double t = 1.0 / (1.0 + 0.5 * ax);
    double p = -ax * ax - 1.26551223 +
               t * (1.00002368 +
                    t * (0.37409196 +
                         t * (0.09678418 +
                              t * (-0.18628806 +
                                   t * (0.27886807 +
                                        t * (-1.13520398 +
                                             t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
    double erfc_ax = t * skv_exp(p);
    double erfc_x = x >= 0 ? erfc_ax : 2.0 - erfc_ax;
    return 0.5 * erfc_x;
}
