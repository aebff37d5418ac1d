/* The store commands (put, lookup, get, del, stats, calibrate, profile,
 * tenant, compact): their options and the helpers they share (cmd_store.c). */
#ifndef SKV_CLI_CMD_STORE_H
#define SKV_CLI_CMD_STORE_H
#include <stddef.h>
#include <stdint.h>

#include "cli.h"
#include "seqkv.h"
#include "skv_tensor.h"

#define COMMON_OPTS                                                                       \
    "  --db DIR          the store (a directory; put creates it)\n"                      \
    "  --tenant T        tenant namespace (default \"default\")\n"                       \
    "  --key SPEC        the master key: a key file (default DIR/master.key),\n"    \
    "                    fd:N (from descriptor N), env:VAR (64 hex digits),\n"     \
    "                    passphrase-env:VAR or passphrase-file:PATH\n"

enum { S_DB = 3000, S_TENANT, S_PROFILE, S_KV, S_MODEL, S_TOKENS, S_LEVEL, S_CALIB, S_CHUNK,
       S_SHARED, S_NOSYNC, S_BUDGET, S_QUIET, S_DTYPE, S_OUT, S_N, S_JSON, S_MAXSEQ, S_KEY,
       S_THREADS, S_VERBOSE, S_READSHARED, S_NOCENT, S_VOCAB, S_AUTOCAL, S_LOSSY, S_LSINK, S_LRECENT,
       S_HELP };

/* The allowed-options masks are one bit per option. */
_Static_assert(S_HELP - S_DB < 32, "too many store options for an unsigned mask");

#define SA(o) (1u << ((o) - S_DB))
#define COMMON (SA(S_DB) | SA(S_TENANT) | SA(S_KEY))

typedef struct {
    const char *db, *tenant, *profile, *kv, *model, *tokens, *calib, *key, *out, *name;
    long chunk, n, max_seq, threads;
    uint64_t budget;
    int shared, no_sync, quiet, json, verbose, read_shared, no_centroids;
    int have_level, have_dtype, have_chunk, have_n, have_budget, have_tenant, have_lossy;
    int lossy;                  /* --lossy: 0 off, 2..4, -1 on (get: accept lossy) */
    seqkv_level level;
    seqkv_dtype dtype;
    /* the profile fields given as options (--level, --dtype, --chunk,
     * --vocab, --auto-calibrate, --lossy, --lossy-sink, --lossy-recent),
     * read through the profile table: pf_given has bit i for field i */
    seqkv_profile pf;
    uint32_t pf_given;
} sargs;

/* Parse argv; `positional` allows one NAME argument (a->name). */
int cli_store_args(const char *cmd, int argc, char **argv, sargs *a, const char *usage,
                   unsigned allowed, int positional);

/* mode: DB_WRITE (put, profile set, tenant set: creates the store),
 * DB_USE (calibrate, del: the store must exist, opened for writing),
 * DB_READ (stats, profile get|list: read-only, no write lock, so they work
 * beside a server or another writer), DB_READ_RECENT (lookup, get: for
 * writing, so that what they read becomes recent for LRU eviction, or
 * read-only when another process holds the store). */
enum { DB_WRITE = 0, DB_USE = 1, DB_READ = 2, DB_READ_RECENT = 3 };

int cli_store_open(const sargs *a, int mode, seqkv **db);
/* Every profile of the store, by name, in *ps (free it; NULL when none) */
int cli_profiles(seqkv *db, seqkv_profile **ps, size_t *n);
/* Bytes of one token's KV (K and V, every layer). */
size_t cli_token_bytes(const seqkv_profile *p);
/* KV file layout (k, v: [layer][T][row]) <-> store layout [layer][k, v][T][row]. */
void cli_to_store(const seqkv_profile *p, size_t T, const uint8_t *k, const uint8_t *v, uint8_t *out);
void cli_from_store(const seqkv_profile *p, size_t T, const uint8_t *in, uint8_t *k, uint8_t *v);
void cli_describe_shape(const seqkv_profile *p, char *buf, size_t cap);
/* The model path a profile records: absolute. */
void cli_model_path(const char *path, char out[SEQKV_PATH_MAX + 1]);
/* The profile's shape and RoPE from a model (dtype chosen by the caller). */
void cli_shape_from_model(const skv_model *m, seqkv_dtype dt, seqkv_profile *p);
int cli_same_shape(const seqkv_profile *a, const seqkv_profile *b);
/* The profile fields given as options into p (through the profile table) */
void cli_profile_fields(const sargs *a, seqkv_profile *p);
/* Find the profile `name` or create it from `want` (cmd_store.c). */
int cli_ensure_profile(seqkv *db, const sargs *a, const char *cmd, const char *name,
                       const seqkv_profile *want, seqkv_profile *p, int *created);
/* A KV file, its sequence count and its shape (cmd_store.c). */
int cli_open_kvfile(const char *path, skv_st **st, size_t *n_seq, seqkv_profile *shape);
/* What lookup, get and del share: the store, the profile, the token lines. */
int cli_open_query(const char *cmd, const sargs *a, int mode, seqkv **db, seqkv_profile *p,
                   cli_tokens *toks);
/* lookup and del: one number per line of the token file, from a store call
 * of the same shape. */
typedef int (*per_line_fn)(seqkv *db, const char *tenant, const char *profile,
                           const int32_t *tokens, size_t n, size_t *out);
int cli_per_line(const char *cmd, int argc, char **argv, const char *usage, unsigned extra,
                 per_line_fn fn);
/* s to stdout as the characters of a JSON string (no quotes) */
void cli_json_chars(const char *s);

/* The commands: argv[0] names the command */
int cmd_put(int argc, char **argv);
int cmd_lookup(int argc, char **argv);
int cmd_get(int argc, char **argv);
int cmd_del(int argc, char **argv);
int cmd_stats(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);
int cmd_profile(int argc, char **argv);
int cmd_tenant(int argc, char **argv);
int cmd_compact(int argc, char **argv);
/* After a put: a profile that crossed its auto-calibrate threshold learns
 * its calibration (*p refreshed); 1 when it did (cmd_compact.c) */
int cli_put_calibrate(seqkv *db, const sargs *a, seqkv_profile *p, size_t seqs);
/* The profile's records coded again at its level, progress on stderr */
int cli_compact(seqkv *db, const sargs *a, const char *profile, const char *cmd);
#endif
