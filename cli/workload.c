/* The multi-tenant chat workload shared by `seqkv bench store` and `seqkv
 * demo`: per tenant a sampled system prompt of 64-256 tokens, sessions
 * whose turns extend the previous prompt by 24-72 tokens, every fourth
 * session a near-duplicate of an earlier one (one early token changed),
 * and each session's KV (bf16) computed once by the model. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "skv_delta.h"

int cli_compute_kv(const skv_model *m, skv_pool *pool, const int32_t *tok, size_t n,
                   uint8_t **k, uint8_t **v)
{
    const skv_model_config *c = skv_model_cfg(m);
    size_t bytes = (size_t)c->n_layers * n * (size_t)c->n_kv_heads * (size_t)c->head_dim * 2;
    *k = malloc(bytes);
    *v = malloc(bytes);
    skv_kvcache *kc = NULL;
    int rc = *k && *v ? skv_kvcache_create(c, n, &kc) : skv_error(SKV_ERR_NOMEM, "KV");
    skv_forward_opts o = {.pool = pool};
    if (!rc)
        rc = skv_model_forward(m, kc, tok, n, &o);
    if (!rc)
        rc = skv_kvcache_export(kc, 0, n, SEQKV_DT_BF16, *k, *v);
    skv_kvcache_free(kc);
    return rc;
}

void cli_session_layout(const cli_session *s, size_t L, size_t row, size_t n, uint8_t *out)
{
    for (size_t l = 0; l < L; l++) {
        memcpy(out, s->k + l * s->n * row, n * row);
        out += n * row;
        memcpy(out, s->v + l * s->n * row, n * row);
        out += n * row;
    }
}

int cli_workload_make(const skv_model *m, skv_pool *pool, long tenants, long sessions,
                      long turns, long seed, const char *label, cli_session **out,
                      size_t *count)
{
    const skv_model_config *c = skv_model_cfg(m);
    const size_t ns = (size_t)(tenants * sessions);
    cli_session *S = calloc(ns ? ns : 1, sizeof *S);
    int32_t *sys = malloc(256 * sizeof(int32_t));
    *out = S;
    *count = S ? ns : 0;
    if (!S || !sys) {
        free(sys);
        return skv_error(SKV_ERR_NOMEM, "workload");
    }
    skv_rng r;
    skv_rng_seed(&r, (uint64_t)seed);
    int rc = SKV_OK;
    size_t done = 0;
    for (long t = 0; t < tenants && !rc; t++) {
        size_t Ls = 64 + skv_rng_next(&r) % 193;
        int32_t bos = c->bos_id;
        rc = skv_model_generate(m, pool, &bos, 1, Ls, 1.0f, 0.9f, &r, sys);
        for (long j = 0; j < sessions && !rc; j++) {
            cli_session *s = &S[t * sessions + j];
            if (j % 4 == 3) {
                /* a near-duplicate of an earlier session: one early token differs */
                const cli_session *o = &S[t * sessions + j - 2];
                *s = *o;
                s->dup = 1;
                s->tok = malloc(o->n * sizeof(int32_t));
                if (!s->tok) {
                    rc = skv_error(SKV_ERR_NOMEM, "workload");
                    break;
                }
                memcpy(s->tok, o->tok, o->n * sizeof(int32_t));
                size_t p = Ls + 1 + skv_rng_next(&r) % 8;
                s->tok[p] = (int32_t)((s->tok[p] + 1 +
                                       (int32_t)(skv_rng_next(&r) % (uint64_t)(c->vocab_size - 2))) %
                                      c->vocab_size);
                if (s->tok[p] == c->bos_id)
                    s->tok[p] = (s->tok[p] + 1) % c->vocab_size;
            } else {
                size_t n = Ls;
                for (long k = 0; k < turns; k++) {
                    n += 24 + skv_rng_next(&r) % 49;
                    s->turn_end[k] = n;
                }
                s->n = n;
                s->tok = malloc(n * sizeof(int32_t));
                if (!s->tok) {
                    rc = skv_error(SKV_ERR_NOMEM, "workload");
                    break;
                }
                rc = skv_model_generate(m, pool, sys, Ls, n, 1.0f, 0.9f, &r, s->tok);
            }
            s->tenant = (int)t;
            s->k = s->v = NULL;
            if (!rc)
                rc = cli_compute_kv(m, pool, s->tok, s->n, &s->k, &s->v);
            cli_progress(label, ++done, ns);
        }
    }
    free(sys);
    return rc;
}

void cli_workload_free(cli_session *S, size_t n)
{
    for (size_t i = 0; S && i < n; i++) {
        free(S[i].tok);
        free(S[i].k);
        free(S[i].v);
    }
    free(S);
}

int cli_calib_learn_writer(const skv_st_writer *w, const skv_model *m, skv_pool *pool,
                           skv_calib **out)
{
    uint8_t *img = NULL;
    size_t len;
    skv_st *st = NULL;
    *out = NULL;
    int rc = skv_stw_serialize(w, &img, &len);
    if (!rc)
        rc = skv_st_parse(img, len, &st);
    if (!rc) {
        skv_calib_opts o = {.model = m, .pool = pool, .quiet = 1};
        rc = skv_calib_learn(st, &o, out);
    }
    skv_st_free(st);
    skv_free(img);
    return rc;
}
