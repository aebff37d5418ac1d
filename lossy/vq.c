/*
 * vq.c - codebooks: entropy-constrained Lloyd iterations (distortion +
 * lambda * bits) for the product VQ's sub-vectors, started from the
 * step's lattice; plain k-means for residual VQ's coarse books; and the
 * search for the step that gives a level its coded rate.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lossy_int.h"

/* seqkv's own log and exp: the same books on every CPU */
static double lg2(double x) { return skv_log(x) / LQ_LN2; }
static double ex2(double x) { return skv_exp(x * LQ_LN2); }

void lq_apply(const float *t, const float *x, float *y, int d)
{
    for (int a = 0; a < d; a++) {
        float acc = 0.0f;
        for (int b = 0; b < d; b++)
            acc += t[a * d + b] * x[b];
        y[a] = acc;
    }
}

uint32_t lq_nearest(const lq_book *b, const float *y, float lambda)
{
    uint32_t best = 0;
    float bj = INFINITY;
    for (uint32_t k = 0; k < b->k; k++) {
        const float *c = b->c + (size_t)k * b->dim;
        float d = 0.0f;
        for (int i = 0; i < b->dim; i++) {
            const float e = y[i] - c[i];
            d += e * e;
        }
        const float j = d + lambda * b->bits[k];
        if (j < bj) {
            bj = j;
            best = k;
        }
    }
    return best;
}

int lq_code_sub(const skv_lossy_cal *c, const lq_book *b, const float *y, double step,
                uint32_t *sym, float *rec)
{
    const float lambda = lq_lambda(step);
    const uint32_t k = lq_nearest(b, y, lambda);
    float d = 0.0f;
    for (int i = 0; i < b->dim; i++) {
        const float e = y[i] - b->c[(size_t)k * b->dim + i];
        d += e * e;
    }
    const float jk = d + lambda * b->bits[k];
    if (b->esc) {
        float de = 0.0f, eb = b->bits[b->k], q[SKV_LOSSY_SUB];
        uint32_t qs[SKV_LOSSY_SUB];
        for (int i = 0; i < b->dim; i++) {
            double t = floor((double)y[i] / step + 0.5);
            t = t < -LQ_ESC_MAX ? -LQ_ESC_MAX : t > LQ_ESC_MAX ? LQ_ESC_MAX : t;
            qs[i] = (uint32_t)((int)t + LQ_ESC_MAX);
            q[i] = lq_esc_value(qs[i], step);
            const float e = y[i] - q[i];
            de += e * e;
            eb += (float)skv_symtab_bits(c->esc_tab, qs[i]);
        }
        if (de + lambda * eb < jk) {
            sym[0] = b->k;
            for (int i = 0; i < b->dim; i++) {
                sym[1 + i] = qs[i];
                rec[i] = q[i];
            }
            return 1 + b->dim;
        }
    }
    sym[0] = k;
    for (int i = 0; i < b->dim; i++)
        rec[i] = b->c[(size_t)k * b->dim + i];
    return 1;
}

void lq_book_clear(lq_book *b)
{
    skv_free(b->c);
    skv_free(b->bits);
    skv_symtab_free(b->tab);
    memset(b, 0, sizeof(*b));
}

int lq_book_finish(lq_book *b, const uint64_t *counts)
{
    skv_symtab_free(b->tab);
    b->tab = NULL;
    int rc = skv_symtab_build(counts, b->k + (uint32_t)b->esc, &b->tab);
    if (rc)
        return rc;
    for (uint32_t k = 0; k < b->k + (uint32_t)b->esc; k++)
        b->bits[k] = (float)skv_symtab_bits(b->tab, k);
    return SKV_OK;
}

/* Samples of one book: n vectors of dim floats, stride floats apart. */
typedef struct {
    const float *s;
    size_t n, stride;
    int dim;
} samples;

static int cell_cmp(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Lloyd iterations from b's codewords: assign under lambda, move each
 * codeword to its mean, drop the empty ones, price each by its share. */
static int lloyd(const skv_lossy_cal *c, lq_book *b, const samples *S, double step, float lambda,
                 int iters)
{
    const int dim = b->dim;
    double *sum = skv_malloc((size_t)b->k * dim * sizeof(double));
    uint64_t *cnt = skv_malloc(((size_t)b->k + 1) * sizeof(uint64_t));
    if (!sum || !cnt) {
        skv_free(sum);
        skv_free(cnt);
        return skv_error(SKV_ERR_NOMEM, "codebook training");
    }
    for (int it = 0; it <= iters; it++) {
        memset(sum, 0, (size_t)b->k * dim * sizeof(double));
        memset(cnt, 0, (size_t)b->k * sizeof(uint64_t));
        for (size_t i = 0; i < S->n; i++) {
            const float *y = S->s + i * S->stride;
            const uint32_t k = lq_nearest(b, y, lambda);
            cnt[k]++;
            for (int d = 0; d < dim; d++)
                sum[(size_t)k * dim + d] += y[d];
        }
        if (it == iters)
            break;
        uint32_t w = 0;
        for (uint32_t k = 0; k < b->k; k++) {
            if (!cnt[k])
                continue;
            for (int d = 0; d < dim; d++)
                b->c[(size_t)w * dim + d] = (float)(sum[(size_t)k * dim + d] / (double)cnt[k]);
            b->bits[w] = (float)(-lg2((double)cnt[k] / (double)S->n));
            w++;
        }
        b->k = w ? w : 1;
    }
    if (b->esc) {
        /* the escape is priced as what the book missed at calibration,
         * at least once; then who takes it under that price is counted */
        cnt[b->k] = 1;
        b->bits = skv_realloc(b->bits, ((size_t)b->k + 1) * sizeof(float));
        if (!b->bits) {
            skv_free(sum);
            skv_free(cnt);
            return skv_error(SKV_ERR_NOMEM, "codebook training");
        }
        int rc = lq_book_finish(b, cnt);
        memset(cnt, 0, ((size_t)b->k + 1) * sizeof(uint64_t));
        for (size_t i = 0; !rc && i < S->n; i++) {
            uint32_t sym[1 + SKV_LOSSY_SUB];
            float rec[SKV_LOSSY_SUB];
            lq_code_sub(c, b, S->s + i * S->stride, step, sym, rec);
            cnt[sym[0]]++;
        }
        if (cnt[b->k] == 0)
            cnt[b->k] = 1;
        if (rc) {
            skv_free(sum);
            skv_free(cnt);
            return rc;
        }
    }
    int rc = lq_book_finish(b, cnt);
    skv_free(sum);
    skv_free(cnt);
    return rc;
}

static int book_alloc(lq_book *b, uint32_t k, int dim)
{
    memset(b, 0, sizeof(*b));
    b->k = k;
    b->dim = dim;
    b->c = skv_malloc((size_t)k * dim * sizeof(float));
    b->bits = skv_malloc((size_t)k * sizeof(float));
    if (!b->c || !b->bits) {
        lq_book_clear(b);
        return skv_error(SKV_ERR_NOMEM, "codebook of %u", k);
    }
    return SKV_OK;
}

/* Entropy-constrained product-VQ book at step: from the occupied cells
 * of the step's lattice. */
static int train_ecvq(const skv_lossy_cal *c, lq_book *b, const samples *S, double step)
{
    const int dim = S->dim;
    uint64_t *cells = skv_malloc(S->n * sizeof(uint64_t));
    if (!cells)
        return skv_error(SKV_ERR_NOMEM, "codebook training");
    for (size_t i = 0; i < S->n; i++) {
        uint64_t key = 0;
        for (int d = 0; d < dim; d++) {
            double q = floor((double)S->s[i * S->stride + d] / step + 0.5);
            if (q < -32767)
                q = -32767;
            if (q > 32767)
                q = 32767;
            key = (key << 16) | (uint16_t)((int)q + 32768);
        }
        cells[i] = key;
    }
    qsort(cells, S->n, sizeof(uint64_t), cell_cmp);
    uint32_t k = 0;
    for (size_t i = 0; i < S->n; i++)
        if (i == 0 || cells[i] != cells[i - 1])
            k++;
    if (k > SKV_SYM_MAX)
        k = SKV_SYM_MAX;
    int rc = book_alloc(b, k, dim);
    if (rc) {
        skv_free(cells);
        return rc;
    }
    uint32_t w = 0;
    size_t run = 0;
    for (size_t i = 0; i < S->n && w < k; i++) {
        run++;
        if (i + 1 < S->n && cells[i + 1] == cells[i])
            continue;
        for (int d = 0; d < dim; d++) {
            const int q = (int)((cells[i] >> (16 * (dim - 1 - d))) & 0xffff) - 32768;
            b->c[(size_t)w * dim + d] = (float)(q * step);
        }
        b->bits[w] = (float)(-lg2((double)run / (double)S->n));
        w++;
        run = 0;
    }
    b->k = w;
    b->esc = 1;
    skv_free(cells);
    return lloyd(c, b, S, step, lq_lambda(step), LQ_ITERS);
}

/* Plain k-means of k codewords, started from evenly spaced samples. */
static int train_kmeans(lq_book *b, const samples *S, uint32_t k)
{
    if (k > S->n)
        k = (uint32_t)S->n;
    int rc = book_alloc(b, k, S->dim);
    if (rc)
        return rc;
    for (uint32_t i = 0; i < k; i++) {
        memcpy(b->c + (size_t)i * S->dim, S->s + (i * S->n / k) * S->stride, (size_t)S->dim * sizeof(float));
        b->bits[i] = 0.0f;
    }
    return lloyd(NULL, b, S, 1.0, 0.0f, LQ_ITERS);
}

/* ---- a level ------------------------------------------------------------ */

typedef struct {
    skv_lossy_cal *c;
    lq_level *lv;
    const float *src; /* [heads][n][D] */
    size_t n;
    double step;
    int *rc;
} train_ctx;

static void train_pq_task(void *vctx, size_t b, size_t e, int worker)
{
    const train_ctx *t = vctx;
    const int D = t->c->D, M = t->c->M;
    for (size_t i = b; i < e; i++) {
        const size_t head = i / (size_t)M, m = i % (size_t)M;
        samples S = {t->src + head * t->n * D + m * SKV_LOSSY_SUB, t->n, (size_t)D, SKV_LOSSY_SUB};
        lq_book_clear(&t->lv->pq[i]);
        t->rc[i] = train_ecvq(t->c, &t->lv->pq[i], &S, t->step);
    }
}

/* Coded bits per scalar of src under the level's product books. */
static double pq_rate(const skv_lossy_cal *c, const lq_level *lv, const float *src, size_t n)
{
    const int D = c->D, M = c->M;
    const size_t heads = (size_t)c->L * 2 * c->H;
    double bits = 0.0;
    for (size_t h = 0; h < heads; h++)
        for (size_t p = 0; p < n; p++)
            for (int m = 0; m < M; m++) {
                const lq_book *b = &lv->pq[h * M + m];
                uint32_t sym[1 + SKV_LOSSY_SUB];
                float rec[SKV_LOSSY_SUB];
                const int ns = lq_code_sub(c, b, src + (h * n + p) * D + m * SKV_LOSSY_SUB, lv->step, sym, rec);
                bits += b->bits[sym[0]];
                for (int i = 1; i < ns; i++)
                    bits += skv_symtab_bits(c->esc_tab, sym[i]);
            }
    return bits / ((double)heads * (double)n * D);
}

/* Bits per scalar of entropy-coded scalar quantisation at step: where
 * the search for the step starts. */
static double sq_rate(const float *src, size_t heads, size_t n, int D, double step)
{
    double bits = 0.0;
    uint32_t *hist = skv_calloc(65536, sizeof(uint32_t));
    if (!hist)
        return 0.0;
    for (size_t h = 0; h < heads; h++)
        for (int d = 0; d < D; d++) {
            memset(hist, 0, 65536 * sizeof(uint32_t));
            for (size_t p = 0; p < n; p++) {
                double q = floor((double)src[(h * n + p) * D + d] / step + 0.5);
                q = q < -32767 ? -32767 : q > 32767 ? 32767 : q;
                hist[(int)q + 32768]++;
            }
            for (int i = 0; i < 65536; i++)
                if (hist[i])
                    bits -= (double)hist[i] * lg2((double)hist[i] / (double)n);
        }
    skv_free(hist);
    return bits / ((double)heads * (double)n * D);
}

int lq_train_level(skv_lossy_cal *c, int bits, skv_lossy_kind kind, const float *y, size_t n,
                   skv_pool *pool, int quiet)
{
    const int li = lq_level_index(bits), D = c->D, M = c->M;
    if (li < 0 || n == 0)
        return skv_error(SKV_ERR_ARG, "lossy level q%d", bits);
    lq_level *lv = &c->lv[li][kind];
    const size_t heads = (size_t)c->L * 2 * c->H, books = heads * M;
    lv->pq = skv_calloc(books, sizeof(lq_book));
    int *rcs = skv_calloc(books, sizeof(int));
    float *res = NULL;
    int rc = lv->pq && rcs ? SKV_OK : skv_error(SKV_ERR_NOMEM, "level q%d", bits);
    const float *src = y;
    double target = bits, coarse_rate = 0.0;
    if (!rc && kind == SKV_LQ_RVQ) {
        lv->coarse = skv_calloc(heads, sizeof(lq_book));
        res = skv_malloc(heads * n * D * sizeof(float));
        if (!lv->coarse || !res)
            rc = skv_error(SKV_ERR_NOMEM, "level q%d", bits);
        for (size_t h = 0; !rc && h < heads; h++) {
            samples S = {y + h * n * D, n, (size_t)D, D};
            rc = train_kmeans(&lv->coarse[h], &S, SKV_LOSSY_RVQ_K1);
            for (size_t p = 0; !rc && p < n; p++) {
                const float *v = y + (h * n + p) * D;
                const uint32_t k = lq_nearest(&lv->coarse[h], v, 0.0f);
                coarse_rate += lv->coarse[h].bits[k];
                for (int d = 0; d < D; d++)
                    res[(h * n + p) * D + d] = v[d] - lv->coarse[h].c[(size_t)k * D + d];
            }
        }
        coarse_rate /= (double)heads * (double)n * D;
        target = bits - coarse_rate;
        if (target < 0.25)
            target = 0.25;
        src = res;
    }
    /* the step: scalar quantisation's first, then the books' own */
    double lo = -30.0, hi = 30.0;
    for (int it = 0; !rc && it < 60; it++) {
        const double mid = 0.5 * (lo + hi);
        if (sq_rate(src, heads, n, D, ex2(mid)) > target)
            lo = mid;
        else
            hi = mid;
    }
    /* The books' step stays within a factor 2 of scalar quantisation's:
     * with few training vectors a book can learn each of them, its rate
     * saturates, and an unbounded search would run the step to nothing. */
    const double sq_step = ex2(0.5 * (lo + hi));
    double step = sq_step, prev_step = 0.0, prev_rate = 0.0, rate = 0.0;
    for (int round = 0; !rc && round < 5; round++) {
        train_ctx t = {c, lv, src, n, step, rcs};
        lv->step = step;
        skv_pool_run(pool, books, train_pq_task, &t);
        for (size_t i = 0; !rc && i < books; i++)
            rc = rcs[i];
        if (rc)
            break;
        rate = pq_rate(c, lv, src, n);
        if (!quiet)
            fprintf(stderr, "lossy calibration: q%d %s step %.4g: %.3f bits a scalar\n", bits,
                    kind == SKV_LQ_RVQ ? "rvq" : "pvq", step, rate + coarse_rate);
        if (fabs(rate - target) < 0.02)
            break;
        double next;
        if (prev_step > 0.0 && fabs(rate - prev_rate) > 1e-6) {
            const double slope = (lg2(step) - lg2(prev_step)) / (rate - prev_rate);
            next = lg2(step) + slope * (target - rate);
        } else {
            next = lg2(step) + (rate - target);
        }
        prev_step = step;
        prev_rate = rate;
        step = ex2(next);
        step = step < 0.5 * sq_step ? 0.5 * sq_step : step > 2.0 * sq_step ? 2.0 * sq_step : step;
        if (step == prev_step)
            break;
    }
    if (!rc)
        lv->present = 1;
    skv_free(rcs);
    skv_free(res);
    return rc;
}
