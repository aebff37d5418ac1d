/* The seqkv command line: shared helpers of the subcommands. */
#ifndef SKV_CLI_H
#define SKV_CLI_H
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "skv_model.h"
#include "skv_tensor.h"

/* Print "seqkv: <what>: <strerror> (<detail>)" to stderr, one line;
 * returns 1. With cli_verbose the line ends with the code's name and, in
 * debug builds, where in the source the error was detected:
 * " [SKV_ERR_IO at weights.c:503]". */
int cli_fail(int rc, const char *what);
/* Set by `seqkv --verbose CMD ...` or SEQKV_VERBOSE=1 (not 0/empty). */
extern int cli_verbose;
void cli_verbose_init(void);
/* Print a usage error and a pointer to --help; returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Strict number parsing; 0 on success. */
int cli_parse_long(const char *s, long lo, long hi, long *out);
int cli_parse_float(const char *s, float lo, float hi, float *out);
/* "what: done/total sequences" on stderr at most once a second, and at the
 * end, when there is more than a moment of work; a terminal gets one line
 * rewritten in place. */
void cli_progress(const char *what, size_t done, size_t total);
/* Monotonic seconds. */
double cli_now(void);
/* Seconds of this thread's CPU time (single-thread rates on a shared
 * machine: time the thread was not running does not count). */
double cli_cpu_now(void);

/* Token sequences: one per non-empty line of whitespace-separated ids
 * ('#' starts a comment line). */
typedef struct {
    size_t n;
    int32_t **seq;
    size_t *len;
    size_t *line; /* 1-based line of the file each sequence is on */
} cli_tokens;
int cli_tokens_read(const char *path, int vocab, cli_tokens *out);
/* The same from an open stream; path names it in errors. A line with a
 * NUL byte, or an id that is not a decimal number in [0, vocab), is an
 * error naming the line. */
int cli_tokens_parse(FILE *f, const char *path, int vocab, cli_tokens *out);
void cli_tokens_free(cli_tokens *t);
/* SKV_ERR_TOO_LARGE, naming the line, when a sequence is longer than the
 * max_pos positions a model takes (its max_seq); else 0. */
int cli_tokens_fit(const cli_tokens *t, const char *path, int max_pos);

/* Subcommand dispatch: argv[1] names one of subs (called with argc - 1,
 * argv + 1); no name or --help prints usage (to stderr with status 2 when
 * missing), an unknown name is status 2. */
typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
} cli_sub;
int cli_dispatch(const char *group, const char *usage, const cli_sub *subs, size_t n, int argc,
                 char **argv);

/* The multi-tenant chat workload of `bench store` and `demo` (workload.c):
 * tenants x sessions sessions of up to 16 turns; every fourth session is a
 * near-duplicate (dup) of the one two before it, one early token changed. */
typedef struct {
    int32_t *tok;
    size_t n;
    size_t turn_end[16]; /* prompt length after each turn */
    int tenant;
    int dup;
    uint8_t *k, *v;      /* bf16 KV, [layers][n][kv_heads * head_dim] */
} cli_session;

/* The demo server's INFO (demo_info.c): a key:value line's number (0:
 * none), a level_<name> line's tokens, raw and stored bytes, and whether
 * the server's profile has calibrated itself yet */
uint64_t demo_info_u64(const char *text, const char *key);
/* `demo --level q4|q3|q2` (demo_lossy.c): the lossy tier's table; 0 or the
 * exit status. */
int demo_lossy(const skv_model *m, skv_pool *pool, int bits, long seed, const char *out_dir);
void demo_info_level(const char *text, const char *name, uint64_t out[3]);
struct seqkv_client;
int demo_self_calibrated(struct seqkv_client *admin);
/* The demo's GETs of sessions sess[i]'s first len[i] tokens, timed in
 * process on the store dir (read-only; its master key file key): cold[i]
 * with no hot tier, hot[i] from a tier a first untimed pass filled
 * (demo_tier.c). 0 or the store's error. */
int demo_tier_times(const char *dir, const char *key, const cli_session *S, const uint32_t *sess,
                    const uint32_t *len, size_t count, double *cold, double *hot);
int cli_workload_make(const skv_model *m, skv_pool *pool, long tenants, long sessions,
                      long turns, long seed, const char *label, cli_session **out,
                      size_t *count);
void cli_workload_free(cli_session *S, size_t n);
/* The bf16 KV of tok[0..n) ([layers][n][C] for K and V; free them). */
int cli_compute_kv(const skv_model *m, skv_pool *pool, const int32_t *tok, size_t n,
                   uint8_t **k, uint8_t **v);
/* A session's first n positions in the store layout [layer][k, v][n][C]
 * (row: bytes of one position's C channels). */
void cli_session_layout(const cli_session *s, size_t L, size_t row, size_t n, uint8_t *out);
/* Learn a calibration (quietly) from the KV file a writer holds. */
struct skv_calib;
int cli_calib_learn_writer(const skv_st_writer *w, const skv_model *m, skv_pool *pool,
                           struct skv_calib **out);

int cmd_model(int argc, char **argv);
int cmd_codec(int argc, char **argv);
/* put, lookup, get, del, stats, calibrate, profile, tenant: argv[0] names
 * the command (cmd_store.c). */
int cmd_store(int argc, char **argv);
/* seqkv bench store (cmd_bench.c). */
int cmd_bench(int argc, char **argv);
/* seqkv serve (cmd_serve.c). */
int cmd_serve(int argc, char **argv);
/* seqkv demo: server + client end to end (cmd_demo.c). */
int cmd_demo(int argc, char **argv);
/* A profile name from a model or KV file path (cmd_store.c says how):
 * out holds at most 63 bytes and its NUL. */
void cli_name_from_path(const char *path, char out[64]);

#endif
