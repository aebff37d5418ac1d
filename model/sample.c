/* Sampling and generation. Deterministic for a given RNG state: the
 * candidate order is fixed (probability, then lower id), and all
 * arithmetic uses the engine's own exp. */
#include <stdlib.h>
#include <string.h>

#include "model_int.h"

int skv_sample_argmax(const float *logits, int vocab)
{
    int best = 0;
    for (int i = 1; i < vocab; i++)
        if (logits[i] > logits[best])
            best = i;
    return best;
}

typedef struct {
    float p;
    int id;
} cand;

static int cand_cmp(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->p != y->p)
        return x->p > y->p ? -1 : 1;
    return x->id - y->id;
}

int skv_sample_top_p(const float *logits, int vocab, float temp, float top_p, skv_rng *rng,
                     void *scratch)
{
    if (!(temp > 0.0f))
        return skv_sample_argmax(logits, vocab);
    cand *c = scratch;
    cand *own = NULL;
    if (!c) {
        own = c = skv_malloc((size_t)vocab * sizeof *c);
        if (!c) /* no memory: fall back to the deterministic choice */
            return skv_sample_argmax(logits, vocab);
    }
    float mx = logits[0];
    for (int i = 1; i < vocab; i++)
        if (logits[i] > mx)
            mx = logits[i];
    double sum = 0.0;
    for (int i = 0; i < vocab; i++) {
        c[i].p = skv_expf((logits[i] - mx) / temp);
        c[i].id = i;
        sum += c[i].p;
    }
    qsort(c, (size_t)vocab, sizeof *c, cand_cmp);
    /* smallest prefix whose mass reaches top_p */
    double keep = 0.0;
    int n = 0;
    const double target = (top_p > 0.0f && top_p < 1.0f ? (double)top_p : 1.0) * sum;
    while (n < vocab) {
        keep += c[n].p;
        n++;
        if (keep >= target)
            break;
    }
    double r = (double)skv_rng_uniform(rng) * keep;
    double acc = 0.0;
    int pick = c[n - 1].id;
    for (int i = 0; i < n; i++) {
        acc += c[i].p;
        if (r < acc) {
            pick = c[i].id;
            break;
        }
    }
    skv_free(own);
    return pick;
}

int skv_model_generate(const skv_model *m, skv_pool *pool, const int32_t *prompt, size_t n_prompt,
                       size_t total, float temp, float top_p, skv_rng *rng, int32_t *out)
{
    if (n_prompt == 0 || total < n_prompt)
        return skv_error(SKV_ERR_ARG, "generate needs 1 <= prompt length (%zu) <= total (%zu)",
                         n_prompt, total);
    const int V = m->cfg.vocab_size;
    memcpy(out, prompt, n_prompt * sizeof *out);
    if (total == n_prompt)
        return SKV_OK;
    skv_kvcache *cache = NULL;
    int rc = skv_kvcache_create(&m->cfg, total, &cache);
    if (rc)
        return rc;
    float *logits = skv_malloc((size_t)V * sizeof(float));
    cand *scratch = skv_malloc((size_t)V * sizeof(cand));
    if (!logits || !scratch) {
        rc = skv_error(SKV_ERR_NOMEM, "generation buffers");
        goto done;
    }
    skv_forward_opts o = {.pool = pool, .logits = logits, .last_only = 1};
    rc = skv_model_forward(m, cache, out, n_prompt, &o);
    for (size_t t = n_prompt; rc == SKV_OK && t < total; t++) {
        out[t] = skv_sample_top_p(logits, V, temp, top_p, rng, scratch);
        if (t + 1 < total)
            rc = skv_model_forward(m, cache, out + t, 1, &o);
    }
done:
    skv_free(logits);
    skv_free(scratch);
    skv_kvcache_free(cache);
    return rc;
}
