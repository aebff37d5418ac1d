/* eig.c - symmetric eigen-decomposition (cyclic Jacobi, double). */
#include <math.h>
#include <string.h>

#include "lossy_int.h"

int skv_eig_sym(const double *a_in, int n, double *w, double *v)
{
    double a[64 * 64];
    double *A = a;
    double *big = NULL;
    if ((size_t)n * (size_t)n > sizeof(a) / sizeof(a[0])) {
        big = skv_malloc((size_t)n * (size_t)n * sizeof(double));
        if (!big)
            return skv_error(SKV_ERR_NOMEM, "eigen-decomposition of %d x %d", n, n);
        A = big;
    }
    memcpy(A, a_in, (size_t)n * (size_t)n * sizeof(double));
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            v[i * n + j] = i == j ? 1.0 : 0.0;
    for (int sweep = 0; sweep < 64; sweep++) {
        double off = 0.0, diag = 0.0;
        for (int i = 0; i < n; i++) {
            diag += A[i * n + i] * A[i * n + i];
            for (int j = i + 1; j < n; j++)
                off += A[i * n + j] * A[i * n + j];
        }
        if (off <= 1e-30 * diag || off == 0.0)
            break;
        for (int p = 0; p < n; p++) {
            for (int q = p + 1; q < n; q++) {
                const double apq = A[p * n + q];
                if (apq == 0.0)
                    continue;
                const double theta = (A[q * n + q] - A[p * n + p]) / (2.0 * apq);
                const double t = (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1.0));
                const double c = 1.0 / sqrt(t * t + 1.0), s = t * c;
                for (int k = 0; k < n; k++) { /* columns p, q */
                    const double akp = A[k * n + p], akq = A[k * n + q];
                    A[k * n + p] = c * akp - s * akq;
                    A[k * n + q] = s * akp + c * akq;
                }
                for (int k = 0; k < n; k++) { /* rows p, q */
                    const double apk = A[p * n + k], aqk = A[q * n + k];
                    A[p * n + k] = c * apk - s * aqk;
                    A[q * n + k] = s * apk + c * aqk;
                }
                for (int k = 0; k < n; k++) {
                    const double vkp = v[k * n + p], vkq = v[k * n + q];
                    v[k * n + p] = c * vkp - s * vkq;
                    v[k * n + q] = s * vkp + c * vkq;
                }
            }
        }
    }
    for (int i = 0; i < n; i++)
        w[i] = A[i * n + i];
    /* ascending, vectors with them (selection sort: n is a head's size) */
    for (int i = 0; i < n; i++) {
        int m = i;
        for (int j = i + 1; j < n; j++)
            if (w[j] < w[m])
                m = j;
        if (m != i) {
            const double tw = w[i];
            w[i] = w[m];
            w[m] = tw;
            for (int k = 0; k < n; k++) {
                const double tv = v[k * n + i];
                v[k * n + i] = v[k * n + m];
                v[k * n + m] = tv;
            }
        }
    }
    skv_free(big);
    return SKV_OK;
}
