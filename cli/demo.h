/* What seqkv demo's files share (cmd_demo.c runs it; demo_measure.c
 * measures beside the server). */
#ifndef SEQKV_CLI_DEMO_H
#define SEQKV_CLI_DEMO_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>

#include "cli.h"
#include "seqkv.h"
#include "skv_model.h"

#define DEMO_AUTOCAL "1024" /* the profile calibrates itself at (a workload: some 5k) */


typedef struct {
    double s;
    uint32_t n;
    uint32_t sess;
} dget;

typedef struct {
    const char *model_arg, *out;
    long tenants, sessions, turns, chunk, seed, threads;
    seqkv_level level;
    int keep, no_replay, synthetic, lossy;
} dargs;

typedef struct {
    dargs a;
    char model[PATH_MAX];
    int synthetic;
    skv_model *m;
    skv_pool *pool;
    const skv_model_config *mc;
    size_t L, row, per_tok; /* layers, bytes of one (layer, token) row, bytes per token */
    cli_session *S;
    size_t ns;
    char dir[1024], sock[1024 + 16];
    char tokens[64][65];
    atomic_size_t done;
    atomic_int finished;
    size_t phase_req[2];
    char cal_note[256]; /* when the profile calibrated itself, what KV.COMPACT did */
    /* results */
    dget *gets;
    size_t ngets, gcap;
    uint64_t req_tokens, hit_tokens, lookups, lookup_hits, verified, put_bytes;
    uint64_t tier_hits, tier_misses; /* the server's hot tier (INFO cache) */
    pthread_mutex_t mu;
} demo;

/* The KV of session s's first n tokens in the store's layout */
void demo_layout(const demo *d, const cli_session *s, size_t n, uint8_t *out);
/* 0 for the requests of phase 1 (a session's first turn, not a
 * near-duplicate), 1 for phase 2's */
int demo_phase_of(const cli_session *s, long turn);

/* Measurements beside the server (demo_measure.c) */
int demo_cmp_double(const void *a, const void *b);
/* The p-quantile of n sorted values */
double demo_pct(const double *sorted, size_t n, double p);
/* Seconds to recompute session s's first n tokens with the model */
int demo_time_prefill(demo *d, const cli_session *s, size_t n, double *sec);
/* The workload replayed in process without the probabilistic trie: its
 * stats (the centroid savings) */
int demo_replay_alone(demo *d, seqkv_stats *st);
/* Bits per scalar by layer and level of the workload's sessions */
int demo_layer_bits(demo *d, double (*bits)[65], int *have);
/* The chart of those into d->a.out; where it went (or why not) in png */
void demo_write_chart(const demo *d, double (*bits)[65], const int *have, char *png, size_t cap);

#endif
