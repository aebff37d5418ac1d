/* The store commands' options, helpers and dispatch (cmd_store.h); each
 * group of commands has its file: cmd_put.c, cmd_query.c (lookup, get,
 * del), cmd_stats.c, cmd_profile.c (calibrate, profile), cmd_tenant.c.
 *
 * The store takes and returns KV in its wire layout [layer][k, v][token]
 * [kv_head][head_dim]; KV files (skv_tensor.h) keep k and v apart as
 * [layer][token][kv_head][head_dim]. The two converters below are the only
 * place that knows both. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd_store.h"
#include "skv_lossy.h"

static const struct option sopts[] = {
    {"db", required_argument, NULL, S_DB},
    {"tenant", required_argument, NULL, S_TENANT},
    {"profile", required_argument, NULL, S_PROFILE},
    {"kv", required_argument, NULL, S_KV},
    {"model", required_argument, NULL, S_MODEL},
    {"tokens", required_argument, NULL, S_TOKENS},
    {"level", required_argument, NULL, S_LEVEL},
    {"calib", required_argument, NULL, S_CALIB},
    {"chunk", required_argument, NULL, S_CHUNK},
    {"shared", no_argument, NULL, S_SHARED},
    {"no-sync", no_argument, NULL, S_NOSYNC},
    {"budget", required_argument, NULL, S_BUDGET},
    {"quiet", no_argument, NULL, S_QUIET},
    {"dtype", required_argument, NULL, S_DTYPE},
    {"out", required_argument, NULL, S_OUT},
    {"n", required_argument, NULL, S_N},
    {"json", no_argument, NULL, S_JSON},
    {"max-seq", required_argument, NULL, S_MAXSEQ},
    {"key", required_argument, NULL, S_KEY},
    {"threads", required_argument, NULL, S_THREADS},
    {"verbose", no_argument, NULL, S_VERBOSE},
    {"read-shared", no_argument, NULL, S_READSHARED},
    {"no-centroids", no_argument, NULL, S_NOCENT},
    {"vocab", required_argument, NULL, S_VOCAB},
    {"auto-calibrate", required_argument, NULL, S_AUTOCAL},
    {"lossy", required_argument, NULL, S_LOSSY},
    {"lossy-sink", required_argument, NULL, S_LSINK},
    {"lossy-recent", required_argument, NULL, S_LRECENT},
    {"help", no_argument, NULL, S_HELP},
    {NULL, 0, NULL, 0},
};

/* A byte count: an integer with an optional binary suffix K, M, G or T
 * (64K, 64KiB and 64KB all mean 65536; fractions are refused). */
static int parse_bytes(const char *s, uint64_t *out)
{
    char *end;
    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || errno)
        return -1;
    int shift = 0;
    switch (*end) {
    case 0: break;
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: return -1;
    }
    if (shift && (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0))
        end += strlen(end);
    else if (!shift && strcmp(end, "B") == 0)
        end++;
    if (*end || (shift && v > (UINT64_MAX >> shift)))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

/* Parse argv; `positional` allows one NAME argument (a->name). */
/* A profile field's option (--NAME VALUE) read through the profile table;
 * the scalars other commands read kept beside it */
static int field_opt(sargs *a, const char *cmd, const char *name, const char *v)
{
    size_t f;
    if (seqkv_profile_field_find(name, &f) || seqkv_profile_field_parse(&a->pf, f, v))
        return cli_usage_error(cmd, "--%s: %s", name, seqkv_error_detail());
    a->pf_given |= 1u << f;
    if (strcmp(name, "level") == 0)
        a->level = a->pf.level, a->have_level = 1;
    else if (strcmp(name, "dtype") == 0)
        a->dtype = a->pf.dtype, a->have_dtype = 1;
    else if (strcmp(name, "chunk") == 0)
        a->chunk = a->pf.chunk ? a->pf.chunk : SEQKV_CHUNK_DEFAULT, a->have_chunk = 1;
    else if (strcmp(name, "lossy") == 0)
        a->lossy = a->pf.lossy;
    return 0;
}

int cli_store_args(const char *cmd, int argc, char **argv, sargs *a, const char *usage,
                   unsigned allowed, int positional)
{
    memset(a, 0, sizeof *a);
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", sopts, NULL)) != -1) {
        if (c == 'h' || c == S_HELP) {
            fputs(usage, stdout);
            exit(0);
        }
        if (c == '?')
            return cli_usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
        if (c == ':')
            return cli_usage_error(cmd, "option '%s' needs a value", argv[optind - 1]);
        if (!(allowed & SA(c)))
            return cli_usage_error(cmd, "option '%s' does not apply here", argv[optind - 1]);
        switch (c) {
        case S_DB: a->db = optarg; break;
        case S_TENANT: a->tenant = optarg; a->have_tenant = 1; break;
        case S_PROFILE: a->profile = optarg; break;
        case S_KV: a->kv = optarg; break;
        case S_MODEL: a->model = optarg; break;
        case S_TOKENS: a->tokens = optarg; break;
        case S_CALIB: a->calib = optarg; break;
        case S_KEY: a->key = optarg; break;
        case S_OUT: a->out = optarg; break;
        case S_SHARED: a->shared = 1; break;
        case S_NOSYNC: a->no_sync = 1; break;
        case S_QUIET: a->quiet = 1; break;
        case S_JSON: a->json = 1; break;
        case S_VERBOSE: a->verbose = 1; break;
        case S_READSHARED: a->read_shared = 1; break;
        case S_NOCENT: a->no_centroids = 1; break;
        case S_LEVEL:
        case S_DTYPE:
        case S_CHUNK:
        case S_VOCAB:
        case S_AUTOCAL:
        case S_LSINK:
        case S_LRECENT:
            if (field_opt(a, cmd, argv[optind - 2] + 2, optarg))
                return 2;
            break;
        case S_LOSSY:
            /* (get: "on" accepts a lossy prefix's reconstruction) */
            a->have_lossy = 1;
            if (strcmp(optarg, "on") == 0)
                a->lossy = -1;
            else if (field_opt(a, cmd, "lossy", optarg))
                return 2;
            break;
        case S_N:
            if (cli_parse_long(optarg, 1, SEQKV_MAX_TOKENS, &a->n))
                return cli_usage_error(cmd, "--n wants an integer in [1, %u]", SEQKV_MAX_TOKENS);
            a->have_n = 1;
            break;
        case S_MAXSEQ:
            if (cli_parse_long(optarg, 1, 1L << 30, &a->max_seq))
                return cli_usage_error(cmd, "--max-seq wants a positive integer");
            break;
        case S_THREADS:
            if (cli_parse_long(optarg, 1, 256, &a->threads))
                return cli_usage_error(cmd, "--threads wants an integer in [1, 256]");
            break;
        case S_BUDGET:
            if (parse_bytes(optarg, &a->budget))
                return cli_usage_error(cmd, "--budget wants a byte count (suffix K, M, G or T)");
            a->have_budget = 1;
            break;
        }
    }
    if (positional && optind < argc)
        a->name = argv[optind++];
    if (optind < argc)
        return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
    if ((allowed & SA(S_DB)) && !a->db)
        return cli_usage_error(cmd, "--db DIR is required");
    if (!a->tenant)
        a->tenant = "default";
    if (!*a->tenant || strlen(a->tenant) > SEQKV_NAME_MAX)
        return cli_usage_error(cmd, "--tenant wants a name of 1 to %d bytes", SEQKV_NAME_MAX);
    if (a->profile && (!*a->profile || strlen(a->profile) > SEQKV_NAME_MAX))
        return cli_usage_error(cmd, "--profile wants a name of 1 to %d bytes", SEQKV_NAME_MAX);
    return 0;
}

int cli_store_open(const sargs *a, int mode, seqkv **db)
{
    *db = NULL;
    if (mode != DB_WRITE) {
        /* Only put, profile set and tenant set make a store where there is none. */
        char path[4200];
        snprintf(path, sizeof path, "%s/data.mdb", a->db);
        struct stat sb;
        if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) {
            if (stat(a->db, &sb) == 0 && !S_ISDIR(sb.st_mode))
                fprintf(stderr, "seqkv: %s: a file, not a store directory (--db names the "
                        "directory a put created)\n", a->db);
            else
                fprintf(stderr, "seqkv: %s: no store there (put creates one)\n", a->db);
            return 1;
        }
    }
    const int read_only = mode == DB_READ;
    seqkv_options o = SEQKV_OPTIONS_INIT;
    o.master_key = a->key;
    o.budget = a->budget;
    o.no_sync = a->no_sync;
    o.threads = (int)a->threads;
    o.read_only = read_only;
    o.quiet = a->quiet;
    o.no_centroids = a->no_centroids;
    int rc = seqkv_open(a->db, &o, db);
    if (rc == SKV_ERR_BUSY && mode == DB_READ_RECENT) { /* a server has it: read beside it */
        o.read_only = 1;
        rc = seqkv_open(a->db, &o, db);
    }
    return rc ? cli_fail(rc, a->db) : 0;
}

int cli_profiles(seqkv *db, seqkv_profile **ps, size_t *n)
{
    *ps = NULL;
    int rc = seqkv_profile_list(db, NULL, 0, n);
    if (rc || *n == 0)
        return rc;
    if (!(*ps = calloc(*n, sizeof **ps)))
        return skv_error(SKV_ERR_NOMEM, "profile list");
    size_t cap = *n;
    rc = seqkv_profile_list(db, *ps, cap, n);
    if (*n > cap) /* (one made since the count: not in this list) */
        *n = cap;
    return rc;
}

/* A profile name from a model or KV file path: the file name without its
 * extension (a Hugging Face directory: its name; a file inside one, such
 * as model.safetensors or config.json: the directory's), with bytes other
 * than [A-Za-z0-9._-] replaced by '_'. */
void cli_name_from_path(const char *path, char out[SEQKV_NAME_MAX + 1])
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    size_t len = strlen(buf);
    while (len > 1 && buf[len - 1] == '/')
        buf[--len] = 0;
    struct stat sb;
    int is_dir = stat(buf, &sb) == 0 && S_ISDIR(sb.st_mode);
    char *base = strrchr(buf, '/');
    base = base ? base + 1 : buf;
    if (!is_dir && base != buf &&
        (strcmp(base, "config.json") == 0 || strcmp(base, "model.safetensors") == 0 ||
         strcmp(base, "model.safetensors.index.json") == 0)) {
        base[-1] = 0;
        char *up = strrchr(buf, '/');
        base = up ? up + 1 : buf;
        is_dir = 1;
    }
    if (!is_dir) {
        char *dot = strrchr(base, '.');
        if (dot && dot != base)
            *dot = 0;
    }
    size_t n = 0;
    for (const char *p = base; *p && n < SEQKV_NAME_MAX; p++) {
        char ch = *p;
        int okc = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                  ch == '.' || ch == '_' || ch == '-';
        out[n++] = okc ? ch : '_';
    }
    out[n] = 0;
    if (n == 0)
        snprintf(out, SEQKV_NAME_MAX + 1, "model");
}

/* The profile a lookup/get/del names: --profile, else from --model. */
static int profile_name(const char *cmd, const sargs *a, char out[SEQKV_NAME_MAX + 1])
{
    if (a->profile)
        snprintf(out, SEQKV_NAME_MAX + 1, "%s", a->profile);
    else if (a->model)
        cli_name_from_path(a->model, out);
    else
        return cli_usage_error(cmd, "--profile NAME (or --model PATH) is required");
    return 0;
}

/* Bytes of one token's KV (K and V, every layer). */
size_t cli_token_bytes(const seqkv_profile *p)
{
    return (size_t)p->layers * 2 * (size_t)p->kv_heads * (size_t)p->head_dim *
           skv_dtype_size(p->dtype);
}

/* KV file layout (k, v: [layer][T][row]) -> store layout [layer][k, v][T][row]. */
void cli_to_store(const seqkv_profile *p, size_t T, const uint8_t *k, const uint8_t *v,
                  uint8_t *out)
{
    size_t blk = T * (size_t)p->kv_heads * (size_t)p->head_dim * skv_dtype_size(p->dtype);
    for (int l = 0; l < p->layers; l++) {
        memcpy(out + (2 * (size_t)l) * blk, k + (size_t)l * blk, blk);
        memcpy(out + (2 * (size_t)l + 1) * blk, v + (size_t)l * blk, blk);
    }
}

/* The inverse. */
void cli_from_store(const seqkv_profile *p, size_t T, const uint8_t *in, uint8_t *k,
                    uint8_t *v)
{
    size_t blk = T * (size_t)p->kv_heads * (size_t)p->head_dim * skv_dtype_size(p->dtype);
    for (int l = 0; l < p->layers; l++) {
        memcpy(k + (size_t)l * blk, in + (2 * (size_t)l) * blk, blk);
        memcpy(v + (size_t)l * blk, in + (2 * (size_t)l + 1) * blk, blk);
    }
}

void cli_describe_shape(const seqkv_profile *p, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s [%d layers, %d kv heads, head_dim %d]", skv_dtype_name(p->dtype),
             p->layers, p->kv_heads, p->head_dim);
}

/* The model path a profile records: absolute, so that the store finds the
 * model whatever directory a later command runs in. */
void cli_model_path(const char *path, char out[SEQKV_PATH_MAX + 1])
{
    char *abs = realpath(path, NULL);
    snprintf(out, SEQKV_PATH_MAX + 1, "%s", abs ? abs : path);
    free(abs);
}

/* The profile's shape and RoPE from a model (dtype chosen by the caller). */
void cli_shape_from_model(const skv_model *m, seqkv_dtype dt, seqkv_profile *p)
{
    const skv_model_config *c = skv_model_cfg(m);
    p->layers = c->n_layers;
    p->kv_heads = c->n_kv_heads;
    p->head_dim = c->head_dim;
    p->dtype = dt;
    p->rope_theta = c->rope_theta;
    p->rope_dim = c->rope_dim;
    p->rope_half = c->rope_layout == SKV_ROPE_HALF;
}

/* The shape of a KV file's sequence and the RoPE its metadata records
 * (seqkv.rope_*, as 'seqkv model kv' writes them; absent: 0, which the
 * store reads as "the model's, else the default"). */
static int shape_from_kvfile(const skv_st *st, const skv_kvseq *q, seqkv_profile *p)
{
    p->layers = q->layers;
    p->kv_heads = q->kv_heads;
    p->head_dim = q->head_dim;
    p->dtype = q->dtype;
    const char *lay = skv_st_meta(st, "seqkv.rope_layout");
    const char *th = skv_st_meta(st, "seqkv.rope_theta");
    const char *rd = skv_st_meta(st, "seqkv.rope_dim");
    float theta = 0;
    long dim = 0;
    if ((th && cli_parse_float(th, 0.0f, 1e12f, &theta)) ||
        (rd && cli_parse_long(rd, 0, q->head_dim, &dim)) ||
        (lay && strcmp(lay, "pair") != 0 && strcmp(lay, "half") != 0))
        return skv_error(SKV_ERR_FORMAT, "the KV file's seqkv.rope_* metadata is malformed");
    p->rope_theta = theta;
    p->rope_dim = (int)dim;
    p->rope_half = lay && strcmp(lay, "half") == 0;
    return 0;
}

int cli_same_shape(const seqkv_profile *a, const seqkv_profile *b)
{
    return a->layers == b->layers && a->kv_heads == b->kv_heads && a->head_dim == b->head_dim &&
           a->dtype == b->dtype;
}

/* Find the profile `name` or create it from `want` (shape, dtype, RoPE,
 * model). Imports --calib. A new profile's level is --level, else ctx
 * when a calibration was given (as calibrating raises a raw profile to),
 * else raw. *p receives the profile. */
/* Option field f, when given, into p: 1 when that changed p's */
static int apply_field(const sargs *a, size_t f, seqkv_profile *p)
{
    char v[SEQKV_PATH_MAX + 2], was[SEQKV_PATH_MAX + 2];
    if (f >= 32 || !(a->pf_given >> f & 1) || seqkv_profile_field_format(&a->pf, f, v, sizeof v) < 0)
        return 0;
    const int known = seqkv_profile_field_format(p, f, was, sizeof was) >= 0;
    return !seqkv_profile_field_parse(p, f, v) && (!known || strcmp(v, was) != 0);
}

void cli_profile_fields(const sargs *a, seqkv_profile *p)
{
    for (size_t f = 0; f < seqkv_profile_field_count(); f++)
        apply_field(a, f, p);
}

int cli_ensure_profile(seqkv *db, const sargs *a, const char *cmd, const char *name,
                       const seqkv_profile *want, seqkv_profile *p, int *created)
{
    char s1[128], s2[128];
    *created = 0;
    int rc = seqkv_profile_get(db, name, p);
    if (rc == SKV_ERR_NOT_FOUND) {
        *p = *want;
        snprintf(p->name, sizeof p->name, "%s", name);
        /* ctx unless asked: raw records until the profile calibrates
         * itself (or --calib gives it a calibration) */
        p->level = SEQKV_CTX;
        cli_profile_fields(a, p);
        rc = seqkv_profile_set(db, p);
        if (rc)
            return cli_fail(rc, "profile");
        *created = 1;
    } else if (rc) {
        return cli_fail(rc, "profile");
    } else {
        if (!cli_same_shape(p, want)) {
            cli_describe_shape(p, s1, sizeof s1);
            cli_describe_shape(want, s2, sizeof s2);
            fprintf(stderr, "seqkv %s: profile %s is %s; this KV is %s (choose another --profile)\n",
                    cmd, name, s1, s2);
            return 1;
        }
        /* RoPE is part of the identity; 0 in either means "not recorded". */
        if (p->rope_half != want->rope_half ||
            (p->rope_theta > 0 && want->rope_theta > 0 && p->rope_theta != want->rope_theta) ||
            (p->rope_dim && want->rope_dim && p->rope_dim != want->rope_dim)) {
            fprintf(stderr, "seqkv %s: profile %s has RoPE theta %g, %d channels, %s layout; this "
                    "KV has theta %g, %d channels, %s layout (choose another --profile)\n", cmd,
                    name, (double)p->rope_theta, p->rope_dim, p->rope_half ? "half" : "pair",
                    (double)want->rope_theta, want->rope_dim, want->rope_half ? "half" : "pair");
            return 1;
        }
        int chunk = p->chunk ? p->chunk : SEQKV_CHUNK_DEFAULT;
        if (a->have_chunk && a->chunk != chunk) {
            fprintf(stderr, "seqkv %s: profile %s has chunks of %d tokens, not %ld (a new "
                    "chunk length is a new profile)\n", cmd, name, chunk, a->chunk);
            return 1;
        }
        int change = 0;
        if (want->model[0] && !p->model[0]) {
            snprintf(p->model, sizeof p->model, "%s", want->model);
            change = 1;
        }
        size_t f;
        if (!seqkv_profile_field_find("auto_calibrate", &f) && apply_field(a, f, p))
            change = 1;
        if (change && (rc = seqkv_profile_set(db, p)))
            return cli_fail(rc, "profile");
    }
    if (a->calib) {
        rc = seqkv_calibrate_import(db, name, a->calib);
        if (rc)
            return cli_fail(rc, a->calib);
    }
    if (*created && (a->calib || a->have_level)) {
        seqkv_level lvl = a->have_level ? a->level : SEQKV_CTX;
        if ((rc = seqkv_profile_get(db, name, p)))
            return cli_fail(rc, "profile");
        if (p->level != lvl) {
            p->level = lvl;
            if ((rc = seqkv_profile_set(db, p)))
                return cli_fail(rc, "profile");
        }
    }
    if ((rc = seqkv_profile_get(db, name, p)))
        return cli_fail(rc, "profile");
    seqkv_level eff = a->have_level ? a->level : p->level;
    if (seqkv_level_predictive(eff) && !p->has_calib && !a->quiet)
        fprintf(stderr, "%s: note: profile %s has no calibration: level %s codes raw until "
                "'seqkv calibrate' (or --calib) gives it one\n", cmd, name, seqkv_level_name(eff));
    if (*created && !a->quiet) {
        cli_describe_shape(p, s1, sizeof s1);
        fprintf(stderr, "%s: created profile %s: %s, chunks of %d tokens, level %s%s\n", cmd, name,
                s1, p->chunk ? p->chunk : SEQKV_CHUNK_DEFAULT, seqkv_level_name(p->level),
                p->has_calib ? ", calibrated" : "");
    }
    return 0;
}

/* Open a KV file and read its first sequence's shape; 0 or an exit status. */
int cli_open_kvfile(const char *path, skv_st **st, size_t *n_seq, seqkv_profile *shape)
{
    skv_kvseq q;
    *st = NULL;
    memset(shape, 0, sizeof *shape);
    int rc = skv_st_open(path, st);
    if (!rc)
        rc = skv_kvfile_count(*st, n_seq);
    if (!rc && *n_seq == 0)
        rc = skv_error(SKV_ERR_FORMAT, "no sequences in the file");
    if (!rc)
        rc = skv_kvfile_get(*st, 0, &q);
    if (!rc)
        rc = shape_from_kvfile(*st, &q, shape);
    if (rc) {
        skv_st_free(*st);
        *st = NULL;
        return cli_fail(rc, path);
    }
    return 0;
}

/* What lookup, get and del share: the store, the profile, the token lines. */
int cli_open_query(const char *cmd, const sargs *a, int mode, seqkv **db,
                   seqkv_profile *p, cli_tokens *toks)
{
    char name[SEQKV_NAME_MAX + 1];
    int r = profile_name(cmd, a, name);
    if (r)
        return r;
    if (!a->tokens)
        return cli_usage_error(cmd, "--tokens FILE is required");
    int rc = cli_tokens_read(a->tokens, INT_MAX, toks);
    if (rc)
        return cli_fail(rc, a->tokens);
    if ((r = cli_store_open(a, mode, db))) {
        cli_tokens_free(toks);
        return r;
    }
    rc = seqkv_profile_get(*db, name, p);
    if (rc) {
        if (rc == SKV_ERR_NOT_FOUND)
            fprintf(stderr, "seqkv %s: %s: %s\n", cmd, a->db, seqkv_error_detail());
        else
            cli_fail(rc, "profile");
        seqkv_close(*db);
        cli_tokens_free(toks);
        return 1;
    }
    return 0;
}

int cli_per_line(const char *cmd, int argc, char **argv, const char *usage, unsigned extra,
                 per_line_fn fn)
{
    sargs a;
    int r = cli_store_args(cmd, argc, argv, &a, usage,
                   COMMON | SA(S_PROFILE) | SA(S_MODEL) | SA(S_TOKENS) | extra, 0);
    if (r)
        return r;
    seqkv *db;
    seqkv_profile p = SEQKV_PROFILE_INIT;
    cli_tokens toks;
    /* lookup reads: it works beside a server that holds the store */
    if ((r = cli_open_query(cmd, &a, fn == seqkv_lookup ? DB_READ_RECENT : DB_USE, &db, &p, &toks)))
        return r;
    for (size_t i = 0; i < toks.n && !r; i++) {
        size_t x = 0;
        int rc = fn(db, a.tenant, p.name, toks.seq[i], toks.len[i], &x);
        if (rc) {
            char what[64];
            snprintf(what, sizeof what, "%s of line %zu", cmd, toks.line[i]);
            r = cli_fail(rc, what);
        } else {
            printf("%zu\n", x);
        }
    }
    seqkv_close(db);
    cli_tokens_free(&toks);
    return r;
}

/* s to stdout as the characters of a JSON string (no quotes) */
void cli_json_chars(const char *s)
{
    for (const char *c = s; *c; c++) {
        if (*c == '"' || *c == '\\')
            printf("\\%c", *c);
        else if ((unsigned char)*c < 0x20)
            printf("\\u%04x", (unsigned char)*c);
        else
            putchar(*c);
    }
}

int cmd_store(int argc, char **argv)
{
    static const cli_sub subs[] = {
        {"put", cmd_put},           {"lookup", cmd_lookup},       {"get", cmd_get},
        {"del", cmd_del},           {"stats", cmd_stats},         {"calibrate", cmd_calibrate},
        {"profile", cmd_profile},   {"tenant", cmd_tenant},       {"compact", cmd_compact},
    };
    /* argv[0] is the command itself: dispatch on it as a one-level group. */
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
        if (strcmp(argv[0], subs[i].name) == 0)
            return subs[i].fn(argc, argv);
    fprintf(stderr, "seqkv: unknown store command '%s'\n", argv[0]);
    return 2;
}

