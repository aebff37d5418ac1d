/* seqkv demo's measurements beside the server: recomputing a prefix with
 * the model, the workload replayed without the probabilistic trie (what the
 * centroids saved), bits per scalar by layer and level, and their chart. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demo.h"
#include "skv_delta.h"

int demo_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double demo_pct(const double *sorted, size_t n, double p)
{
    if (!n)
        return 0;
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return sorted[i < n ? i : n - 1];
}

/* A prefill of the same prefix: the time a frontend spends without the
 * cache (forward pass only; the cache is allocated beforehand). */
int demo_time_prefill(demo *d, const cli_session *s, size_t n, double *sec)
{
    skv_kvcache *kc = NULL;
    int rc = skv_kvcache_create(d->mc, n, &kc);
    skv_forward_opts o = {.pool = d->pool};
    double t0 = cli_now();
    if (!rc)
        rc = skv_model_forward(d->m, kc, s->tok, n, &o);
    *sec = cli_now() - t0;
    skv_kvcache_free(kc);
    return rc;
}


/* The same workload through the embedded store, centroids off: what the
 * probabilistic trie saved. Same master key, tenant names, order of puts
 * per tenant and calibration procedure as the server's run. */
int demo_replay_alone(demo *d, seqkv_stats *st)
{
    char dir[PATH_MAX + 16], key[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/replay", d->dir);
    snprintf(key, sizeof key, "%s/db/master.key", d->dir);
    seqkv_options o = {0};
    o.quiet = 1;
    o.no_centroids = 1;
    o.no_sync = 1; /* a scratch store: durability is not what is measured */
    o.master_key = key;
    o.threads = (int)d->a.threads;
    seqkv *db;
    int rc = seqkv_open(dir, &o, &db);
    if (rc)
        return rc;
    seqkv_profile p = SEQKV_PROFILE_INIT;
    memset(&p, 0, sizeof p);
    snprintf(p.name, sizeof p.name, "demo");
    p.dtype = SEQKV_DT_BF16;
    p.chunk = (int)d->a.chunk;
    p.level = d->a.level;
    p.auto_calibrate = atoi(DEMO_AUTOCAL);
    if (strlen(d->model) >= sizeof p.model)
        rc = skv_error(SKV_ERR_TOO_LARGE, "model path longer than %zu bytes", sizeof p.model - 1);
    else {
        memcpy(p.model, d->model, strlen(d->model) + 1);
        rc = seqkv_profile_set(db, &p);
    }
    size_t maxn = 0;
    for (size_t i = 0; i < d->ns; i++)
        maxn = d->S[i].n > maxn ? d->S[i].n : maxn;
    uint8_t *kv = malloc(maxn * d->per_tok);
    if (!rc && !kv)
        rc = skv_error(SKV_ERR_NOMEM, "replay");
    const size_t total = d->ns * (size_t)d->a.turns;
    size_t done = 0;
    for (int phase = 0; phase < 2 && !rc; phase++) {
        for (long t = 0; t < d->a.tenants && !rc; t++) {
            char tn[32];
            snprintf(tn, sizeof tn, "tenant%ld", t);
            for (long k = 0; k < d->a.turns && !rc; k++)
                for (long j = 0; j < d->a.sessions && !rc; j++) {
                    const cli_session *s = &d->S[t * d->a.sessions + j];
                    if (demo_phase_of(s, k) != phase)
                        continue;
                    size_t n = s->turn_end[k];
                    demo_layout(d, s, n, kv);
                    rc = seqkv_put(db, tn, "demo", s->tok, n, kv, n * d->per_tok, NULL, NULL);
                    if (!rc) /* as the server does in the background */
                        rc = seqkv_auto_calibrate(db, "demo", NULL);
                    cli_progress("demo: replay without the probabilistic trie", ++done, total);
                }
        }
    }
    if (!rc)
        rc = seqkv_compact(db, "demo", NULL, NULL, NULL);
    if (!rc)
        rc = seqkv_stat(db, NULL, st);
    free(kv);
    seqkv_close(db);
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "demo: could not remove %s\n", dir);
    return rc;
}

/* Bits per scalar by layer (K and V together) at every skv_delta level:
 * a calibration learned from the first turns (what KV.CALIBRATE saw),
 * every session's whole prompt coded at each level. bits[lv][layer];
 * bits[lv][L] is the whole. */
int demo_layer_bits(demo *d, double (*bits)[65], int *have)
{
    skv_st_writer *w;
    int rc = skv_stw_create(&w);
    if (rc)
        return rc;
    size_t ncal = d->ns < 64 ? d->ns : 64;
    for (size_t i = 0; i < ncal && !rc; i++) {
        const cli_session *s = &d->S[i * d->ns / ncal];
        size_t n = s->turn_end[0], nb = d->L * n * d->row;
        uint8_t *k = malloc(nb), *v = malloc(nb);
        if (!k || !v) {
            rc = skv_error(SKV_ERR_NOMEM, "calibration set");
        } else {
            for (size_t l = 0; l < d->L; l++) {
                memcpy(k + l * n * d->row, s->k + l * s->n * d->row, n * d->row);
                memcpy(v + l * n * d->row, s->v + l * s->n * d->row, n * d->row);
            }
            skv_kvseq q = {n, s->tok, SEQKV_DT_BF16, (int)d->L, d->mc->n_kv_heads, d->mc->head_dim,
                           k, v};
            rc = skv_kvfile_add(w, i, &q);
        }
        free(k);
        free(v);
    }
    skv_calib *cal = NULL;
    if (!rc)
        rc = cli_calib_learn_writer(w, d->m, d->pool, &cal);
    for (int lv = SEQKV_STAT; lv < SEQKV_LEVELS && !rc; lv++) {
        have[lv] = skv_calib_has_level(cal, (seqkv_level)lv);
        if (!have[lv])
            continue;
        skv_delta *dl;
        if ((rc = skv_delta_create(cal, (seqkv_level)lv, d->m, d->pool, &dl)))
            break;
        size_t coded = 0;
        for (size_t i = 0; i < d->ns && coded < 16 && !rc; i++) {
            if (d->S[i].dup)
                continue;
            coded++;
            skv_streams ss;
            memset(&ss, 0, sizeof ss);
            rc = skv_delta_encode(dl, d->S[i].tok, d->S[i].n, d->S[i].k, d->S[i].v,
                                  (size_t)d->a.chunk, &ss);
            skv_streams_free(&ss);
            char what[64];
            snprintf(what, sizeof what, "demo: coding the sessions at %s", seqkv_level_name((seqkv_level)lv));
            cli_progress(what, coded, 16);
        }
        if (!rc) {
            const double *ideal, *bytes;
            const uint64_t *nsc;
            skv_delta_costs(dl, &ideal, &bytes, &nsc);
            double tb = 0, tn = 0;
            for (size_t l = 0; l < d->L; l++) {
                double b = bytes[2 * l] + bytes[2 * l + 1];
                double n = (double)nsc[2 * l] + (double)nsc[2 * l + 1];
                bits[lv][l] = n > 0 ? 8.0 * b / n : 0;
                tb += b;
                tn += n;
            }
            bits[lv][d->L] = tn > 0 ? 8.0 * tb / tn : 0;
        }
        skv_delta_free(dl);
    }
    skv_calib_free(cal);
    skv_stw_free(w);
    return rc;
}

void demo_write_chart(const demo *d, double (*bits)[65], const int *have, char *png, size_t cap)
{
    char dat[PATH_MAX + 32], gp[PATH_MAX + 32];
    snprintf(dat, sizeof dat, "%s/demo_bits.dat", d->a.out);
    snprintf(gp, sizeof gp, "%s/demo_bits.gp", d->a.out);
    snprintf(png, cap, "%s/demo_bits.png", d->a.out);
    FILE *f = fopen(dat, "w");
    if (!f) {
        snprintf(png, cap, "(not written: %s: %s)", dat, strerror(errno));
        return;
    }
    fprintf(f, "# layer raw");
    for (int lv = SEQKV_STAT; lv < SEQKV_LEVELS; lv++)
        fprintf(f, " %s", seqkv_level_name((seqkv_level)lv));
    fprintf(f, "\n");
    for (size_t l = 0; l < d->L; l++) {
        fprintf(f, "%zu 16", l);
        for (int lv = SEQKV_STAT; lv < SEQKV_LEVELS; lv++)
            fprintf(f, " %.4f", have[lv] ? bits[lv][l] : 0.0 / 0.0);
        fprintf(f, "\n");
    }
    fclose(f);
    f = fopen(gp, "w");
    if (!f) {
        snprintf(png, cap, "(not written: %s: %s)", gp, strerror(errno));
        return;
    }
    const char *base = strrchr(d->model, '/');
    fprintf(f,
            "set terminal pngcairo size 900,540 noenhanced font ',11'\n"
            "set output '%s'\n"
            "set title 'seqkv: bits per scalar by layer and level (bf16 KV of %s%s; raw = 16)'\n"
            "set xlabel 'layer'\nset ylabel 'bits per scalar (K and V)'\n"
            "set xtics 1\nset yrange [0:*]\nset key outside right\nset grid ytics\n"
            "set datafile missing 'nan'\n"
            "plot '%s' using 1:2 with linespoints lw 2 title 'raw bf16'",
            png, base ? base + 1 : d->model, d->synthetic ? ", SYNTHETIC model" : "", dat);
    for (int lv = SEQKV_STAT; lv < SEQKV_LEVELS; lv++)
        if (have[lv])
            fprintf(f, ", '' using 1:%d with linespoints lw 2 title '%s'", lv + 3,
                    seqkv_level_name((seqkv_level)lv));
    fprintf(f, "\n");
    fclose(f);
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "command -v gnuplot >/dev/null 2>&1 && gnuplot '%s' 2>/dev/null", gp);
    if (system(cmd) != 0) {
        /* pngcairo is in gnuplot-nox; the plain png terminal is older */
        snprintf(cmd, sizeof cmd,
                 "command -v gnuplot >/dev/null 2>&1 && sed 's/pngcairo/png/' '%s' | gnuplot "
                 "2>/dev/null",
                 gp);
        if (system(cmd) != 0)
            snprintf(png, cap, "(not drawn: gnuplot is missing -- apt-get install gnuplot-nox; "
                               "data in %s, script %s)", dat, gp);
    }
}
