/* seqkv put|lookup|get|del|stats|calibrate|profile|tenant: the store from
 * the command line, through include/seqkv.h only.
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

#include "cli.h"
#include "seqkv.h"
#include "skv_tensor.h"

#define COMMON_OPTS                                                                       \
    "  --db DIR          the store (a directory; put creates it)\n"                      \
    "  --tenant T        tenant namespace (default \"default\")\n"                       \
    "  --key PATH        master key file (default DIR/master.key)\n"

static const char put_usage[] =
    "usage: seqkv put --db DIR (--kv FILE | --model PATH --tokens FILE) [options]\n"
    "\n"
    "Store KV caches. With --kv, every sequence of a KV file (seq{i}.tokens,\n"
    "seq{i}.k, seq{i}.v, as 'seqkv model kv' writes them) is put as it is;\n"
    "with --model and --tokens the model computes the KV of each line of FILE\n"
    "(whitespace-separated token ids; '-' reads stdin). Only the part of a\n"
    "sequence after its longest cached prefix is coded and stored, and each\n"
    "sequence is one durable transaction. A summary goes to stderr.\n"
    "\n" COMMON_OPTS
    "  --profile NAME    model profile (default: the model's or KV file's name\n"
    "                    without extension), created on first use with the\n"
    "                    shape of the model or the KV file\n"
    "  --dtype D         dtype of the KV --model computes: bf16 (default for a new\n"
    "                    profile), fp16, fp8 or fp32; an existing profile's own\n"
    "  --level L         raw, stat, ctx, spec or full: a new profile's level\n"
    "                    (default stat when a calibration exists or --calib is\n"
    "                    given, else raw), else the level of this put only\n"
    "  --calib FILE.cal  import a calibration ('seqkv codec calibrate') into the\n"
    "                    profile first\n"
    "  --chunk N         tokens per chunk of a new profile (default 256)\n"
    "  --shared          write into the shared namespace (" SEQKV_SHARED_TENANT ")\n"
    "  --no-sync         no fsync: NOT durable, a power loss loses the last puts\n"
    "  --budget BYTES    keep the store at most BYTES (suffix K, M, G, T) during\n"
    "                    this put, evicting what was least recently put or got;\n"
    "                    the store does not keep it (a tenant's own budget it\n"
    "                    does: 'seqkv tenant set')\n"
    "  --threads N       model and coder threads (default: all CPUs for the model)\n"
    "  --no-centroids    exact trie only: never code against a cluster centroid\n"
    "  --verbose         one line per sequence on stdout: index, tokens given,\n"
    "                    new tokens, chunks, bytes\n"
    "  --quiet           no progress, notes or summary\n";

static const char lookup_usage[] =
    "usage: seqkv lookup --db DIR (--profile NAME | --model PATH) --tokens FILE [options]\n"
    "\n"
    "Print, for each line of FILE, the length in tokens of its longest cached\n"
    "prefix (0 when nothing is cached), one number per line on stdout.\n"
    "--model PATH only names the profile (its file name without extension).\n"
    "\n" COMMON_OPTS;

static const char get_usage[] =
    "usage: seqkv get --db DIR (--profile NAME | --model PATH) --tokens FILE\n"
    "                 --out OUT.safetensors [--n N] [options]\n"
    "\n"
    "Write the cached KV of each line of FILE in the KV file layout: seq{i}\n"
    "holds the longest cached prefix of line i (or its first N tokens with\n"
    "--n), its tokens and K/V [layers, T, kv_heads, head_dim] in the\n"
    "profile's dtype. A line with nothing cached (or fewer than N tokens) is\n"
    "an error and no file is written. Every record is verified before its KV\n"
    "is returned. With --model the output's metadata also names the model's\n"
    "fingerprint and vocabulary, as 'seqkv model kv' writes them (the files\n"
    "are then byte-identical).\n"
    "\n" COMMON_OPTS
    "  --n N             the first N tokens of each line (default: the longest\n"
    "                    cached prefix)\n"
    "  --quiet           no summary\n";

static const char del_usage[] =
    "usage: seqkv del --db DIR (--profile NAME | --model PATH) --tokens FILE [options]\n"
    "\n"
    "Delete the cached KV of each line of FILE that no other stored sequence\n"
    "needs, and print the number of tokens removed per line on stdout.\n"
    "\n" COMMON_OPTS
    "  --no-sync         no fsync (NOT durable)\n";

static const char stats_usage[] =
    "usage: seqkv stats --db DIR [--tenant T] [--json] [--key PATH]\n"
    "\n"
    "Print what the store holds (all tenants, or one with --tenant): unique\n"
    "tokens, chunk records, raw bytes (those tokens' KV in the profile's\n"
    "dtype), stored bytes and their ratio, figures per level, records coded\n"
    "against a cluster centroid, evictions, the LMDB map, tenants and\n"
    "profiles. --json prints one JSON object.\n";

static const char calibrate_usage[] =
    "usage: seqkv calibrate --db DIR --profile NAME [--max-seq N | --calib FILE.cal]\n"
    "\n"
    "Learn a calibration for the profile from up to N (default 64) of its\n"
    "stored sequences of every tenant, or import one from a calibration file\n"
    "('seqkv codec calibrate'); it becomes the profile's current one. New\n"
    "chunks are coded with it; stored ones keep theirs.\n"
    "\n"
    "  --db DIR, --key PATH, --no-sync as for put\n";

static const char profile_usage[] =
    "usage: seqkv profile <get|set> --db DIR NAME [options]\n"
    "\n"
    "  get NAME [--json]     print a profile\n"
    "  set NAME [--model PATH | --kv FILE] [--level L] [--dtype D] [--chunk N]\n"
    "                        create a profile (shape from the model or the KV\n"
    "                        file) or change an existing one's level and model\n"
    "Run 'seqkv profile <get|set> --help' for details.\n";

static const char profile_get_usage[] =
    "usage: seqkv profile get --db DIR NAME [--json] [--key PATH]\n"
    "\n"
    "Print the profile: shape, dtype, RoPE, chunk length, level, model,\n"
    "calibration and identity hash.\n";

static const char profile_set_usage[] =
    "usage: seqkv profile set --db DIR NAME [--model PATH | --kv FILE] [--level L]\n"
    "                         [--dtype D] [--chunk N] [--calib FILE.cal] [--key PATH]\n"
    "\n"
    "Create a profile, its shape taken from --model (dtype --dtype, default\n"
    "bf16) or from the first sequence of a KV file; or update an existing\n"
    "profile's level and model; --calib imports a calibration file. The shape,\n"
    "dtype, RoPE and chunk length of an existing profile cannot change (that\n"
    "is a new profile).\n";

static const char tenant_usage[] =
    "usage: seqkv tenant set --db DIR NAME [--budget BYTES] [--read-shared] [--key PATH]\n"
    "\n"
    "Configure a tenant: a byte budget of its own (0 or absent: only the\n"
    "store's) and whether its lookups and gets also consult the shared\n"
    "namespace (" SEQKV_SHARED_TENANT "). Both settings are written each time.\n";

enum { S_DB = 3000, S_TENANT, S_PROFILE, S_KV, S_MODEL, S_TOKENS, S_LEVEL, S_CALIB, S_CHUNK,
       S_SHARED, S_NOSYNC, S_BUDGET, S_QUIET, S_DTYPE, S_OUT, S_N, S_JSON, S_MAXSEQ, S_KEY,
       S_THREADS, S_VERBOSE, S_READSHARED, S_NOCENT, S_HELP };

/* The allowed-options masks are one bit per option. */
_Static_assert(S_HELP - S_DB < 32, "too many store options for an unsigned mask");

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
    {"help", no_argument, NULL, S_HELP},
    {NULL, 0, NULL, 0},
};
#define SA(o) (1u << ((o) - S_DB))
#define COMMON (SA(S_DB) | SA(S_TENANT) | SA(S_KEY))

typedef struct {
    const char *db, *tenant, *profile, *kv, *model, *tokens, *calib, *key, *out, *name;
    long chunk, n, max_seq, threads;
    uint64_t budget;
    int shared, no_sync, quiet, json, verbose, read_shared, no_centroids;
    int have_level, have_dtype, have_chunk, have_n, have_budget, have_tenant;
    seqkv_level level;
    skv_dtype dtype;
} sargs;

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
static int sparse(const char *cmd, int argc, char **argv, sargs *a, const char *usage,
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
            if (seqkv_level_parse(optarg, &a->level))
                return cli_usage_error(cmd, "--level wants raw, stat, ctx, spec or full");
            a->have_level = 1;
            break;
        case S_DTYPE:
            if (skv_dtype_from_user(optarg, &a->dtype) || a->dtype == SKV_DT_I32)
                return cli_usage_error(cmd, "--dtype wants bf16, fp16, fp8 or fp32");
            a->have_dtype = 1;
            break;
        case S_CHUNK:
            if (cli_parse_long(optarg, 1, SEQKV_CHUNK_MAX, &a->chunk))
                return cli_usage_error(cmd, "--chunk wants an integer in [1, %d]", SEQKV_CHUNK_MAX);
            a->have_chunk = 1;
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

/* mode: 0 write (put creates the store), 1 use (lookup, get: the store
 * must exist; opened for writing so that the store persists the recency
 * these uses give, which LRU eviction follows), 2 read only (stats,
 * profile get). */
enum { DB_WRITE = 0, DB_USE = 1, DB_READ = 2 };

static int open_db(const sargs *a, int mode, seqkv **db)
{
    *db = NULL;
    if (mode != DB_WRITE) {
        /* Only put, profile set and tenant set make a store where there is none. */
        char path[4200];
        snprintf(path, sizeof path, "%s/data.mdb", a->db);
        struct stat sb;
        if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) {
            fprintf(stderr, "seqkv: %s: no store there (put creates one)\n", a->db);
            return 1;
        }
    }
    const int read_only = mode == DB_READ;
    seqkv_options o;
    memset(&o, 0, sizeof o);
    o.master_key = a->key;
    o.budget = a->budget;
    o.no_sync = a->no_sync;
    o.threads = (int)a->threads;
    o.read_only = read_only;
    o.quiet = a->quiet;
    o.no_centroids = a->no_centroids;
    int rc = seqkv_open(a->db, &o, db);
    return rc ? cli_fail(rc, a->db) : 0;
}

/* A profile name from a model or KV file path: the file name without its
 * extension (a Hugging Face directory: its name; a file inside one, such
 * as model.safetensors or config.json: the directory's), with bytes other
 * than [A-Za-z0-9._-] replaced by '_'. */
static void name_from_path(const char *path, char out[SEQKV_NAME_MAX + 1])
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
        name_from_path(a->model, out);
    else
        return cli_usage_error(cmd, "--profile NAME (or --model PATH) is required");
    return 0;
}

static void hex(const uint8_t *b, size_t n, char *out)
{
    static const char d[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = d[b[i] >> 4];
        out[2 * i + 1] = d[b[i] & 15];
    }
    out[2 * n] = 0;
}

/* Bytes of one token's KV (K and V, every layer). */
static size_t token_bytes(const seqkv_profile *p)
{
    return (size_t)p->layers * 2 * (size_t)p->kv_heads * (size_t)p->head_dim *
           skv_dtype_size(p->dtype);
}

/* KV file layout (k, v: [layer][T][row]) -> store layout [layer][k, v][T][row]. */
static void to_store(const seqkv_profile *p, size_t T, const uint8_t *k, const uint8_t *v,
                     uint8_t *out)
{
    size_t blk = T * (size_t)p->kv_heads * (size_t)p->head_dim * skv_dtype_size(p->dtype);
    for (int l = 0; l < p->layers; l++) {
        memcpy(out + (2 * (size_t)l) * blk, k + (size_t)l * blk, blk);
        memcpy(out + (2 * (size_t)l + 1) * blk, v + (size_t)l * blk, blk);
    }
}

/* The inverse. */
static void from_store(const seqkv_profile *p, size_t T, const uint8_t *in, uint8_t *k,
                       uint8_t *v)
{
    size_t blk = T * (size_t)p->kv_heads * (size_t)p->head_dim * skv_dtype_size(p->dtype);
    for (int l = 0; l < p->layers; l++) {
        memcpy(k + (size_t)l * blk, in + (2 * (size_t)l) * blk, blk);
        memcpy(v + (size_t)l * blk, in + (2 * (size_t)l + 1) * blk, blk);
    }
}

static void describe_shape(const seqkv_profile *p, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s [%d layers, %d kv heads, head_dim %d]", skv_dtype_name(p->dtype),
             p->layers, p->kv_heads, p->head_dim);
}

/* The model path a profile records: absolute, so that the store finds the
 * model whatever directory a later command runs in. */
static void model_path(const char *path, char out[SEQKV_PATH_MAX + 1])
{
    char *abs = realpath(path, NULL);
    snprintf(out, SEQKV_PATH_MAX + 1, "%s", abs ? abs : path);
    free(abs);
}

/* The profile's shape and RoPE from a model (dtype chosen by the caller). */
static void shape_from_model(const skv_model *m, skv_dtype dt, seqkv_profile *p)
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

static int same_shape(const seqkv_profile *a, const seqkv_profile *b)
{
    return a->layers == b->layers && a->kv_heads == b->kv_heads && a->head_dim == b->head_dim &&
           a->dtype == b->dtype;
}

/* Find the profile `name` or create it from `want` (shape, dtype, RoPE,
 * model). Imports --calib. A new profile's level is --level, else stat
 * when a calibration was given, else raw. *p receives the profile. */
static int ensure_profile(seqkv *db, const sargs *a, const char *cmd, const char *name,
                          const seqkv_profile *want, seqkv_profile *p, int *created)
{
    char s1[128], s2[128];
    *created = 0;
    int rc = seqkv_profile_get(db, name, p);
    if (rc == SKV_ERR_NOT_FOUND) {
        *p = *want;
        snprintf(p->name, sizeof p->name, "%s", name);
        p->chunk = a->have_chunk ? (int)a->chunk : 0;
        /* Made at raw: a higher level is set once the calibration is in. */
        p->level = a->have_level && !a->calib ? a->level : SEQKV_RAW;
        rc = seqkv_profile_set(db, p);
        if (rc == SKV_ERR_UNSUPPORTED) /* accepted, codes raw until calibrated: noted below */
            rc = 0;
        if (rc)
            return cli_fail(rc, "profile");
        *created = 1;
    } else if (rc) {
        return cli_fail(rc, "profile");
    } else {
        if (!same_shape(p, want)) {
            describe_shape(p, s1, sizeof s1);
            describe_shape(want, s2, sizeof s2);
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
        if (want->model[0] && !p->model[0]) {
            snprintf(p->model, sizeof p->model, "%s", want->model);
            rc = seqkv_profile_set(db, p);
            if (rc && rc != SKV_ERR_UNSUPPORTED)
                return cli_fail(rc, "profile");
        }
    }
    if (a->calib) {
        rc = seqkv_calibrate_import(db, name, a->calib);
        if (rc)
            return cli_fail(rc, a->calib);
    }
    if (*created && (a->calib || a->have_level)) {
        seqkv_level lvl = a->have_level ? a->level : SEQKV_STAT;
        if ((rc = seqkv_profile_get(db, name, p)))
            return cli_fail(rc, "profile");
        if (p->level != lvl) {
            p->level = lvl;
            rc = seqkv_profile_set(db, p);
            if (rc && rc != SKV_ERR_UNSUPPORTED)
                return cli_fail(rc, "profile");
        }
    }
    if ((rc = seqkv_profile_get(db, name, p)))
        return cli_fail(rc, "profile");
    seqkv_level eff = a->have_level ? a->level : p->level;
    if (eff != SEQKV_RAW && !p->has_calib && !a->quiet)
        fprintf(stderr, "%s: note: profile %s has no calibration: level %s codes raw until "
                "'seqkv calibrate' (or --calib) gives it one\n", cmd, name, seqkv_level_name(eff));
    if (*created && !a->quiet) {
        describe_shape(p, s1, sizeof s1);
        fprintf(stderr, "%s: created profile %s: %s, chunks of %d tokens, level %s%s\n", cmd, name,
                s1, p->chunk ? p->chunk : SEQKV_CHUNK_DEFAULT, seqkv_level_name(p->level),
                p->has_calib ? ", calibrated" : "");
    }
    return 0;
}

/* ---- put ---------------------------------------------------------------- */

typedef struct {
    size_t seqs, given, fresh, chunks, bytes, centroid;
    long evicted;
    double t0;
} put_totals;

static int put_one(seqkv *db, const sargs *a, const seqkv_profile *p, size_t idx,
                   const int32_t *tok, size_t T, const void *kv, size_t kv_len, put_totals *tot)
{
    seqkv_put_opts o;
    memset(&o, 0, sizeof o);
    o.shared = a->shared;
    o.level = a->have_level ? (int)a->level + 1 : 0;
    seqkv_put_result r;
    memset(&r, 0, sizeof r);
    int rc = seqkv_put(db, a->tenant, p->name, tok, T, kv, kv_len, &o, &r);
    if (rc) {
        char what[64];
        snprintf(what, sizeof what, "put of sequence %zu", idx);
        return cli_fail(rc, what);
    }
    if (a->verbose)
        printf("%zu %zu %zu %zu %zu\n", idx, T, r.new_tokens, r.chunks, r.bytes);
    tot->seqs++;
    tot->given += T;
    tot->fresh += r.new_tokens;
    tot->chunks += r.chunks;
    tot->bytes += r.bytes;
    tot->centroid += r.centroid_tokens;
    tot->evicted += r.evicted;
    return 0;
}

static void put_summary(const sargs *a, const seqkv_profile *p, const put_totals *t, int failed)
{
    if (failed) {
        /* Each put is its own transaction: say what did get in. */
        if (t->seqs)
            fprintf(stderr, "put: sequences 0 to %zu were stored before the failure\n", t->seqs - 1);
        return;
    }
    if (a->quiet)
        return;
    double secs = cli_now() - t->t0;
    double raw = (double)t->fresh * (double)token_bytes(p);
    fprintf(stderr,
            "put: %zu sequences, %zu tokens given, %zu new tokens stored in %zu chunks, %zu bytes",
            t->seqs, t->given, t->fresh, t->chunks, t->bytes);
    if (t->bytes)
        fprintf(stderr, " (%s size / stored = %.2f)", skv_dtype_name(p->dtype), raw / (double)t->bytes);
    fprintf(stderr, ", %.0f tokens/s", (double)t->given / (secs > 0 ? secs : 1e-9));
    if (t->centroid)
        fprintf(stderr, ", %zu tokens coded against a centroid", t->centroid);
    if (t->evicted)
        fprintf(stderr, ", %ld records evicted", t->evicted);
    fputc('\n', stderr);
}

/* Open a KV file and read its first sequence's shape; 0 or an exit status. */
static int open_kvfile(const char *path, skv_st **st, size_t *n_seq, seqkv_profile *shape)
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

static int put_kvfile(const sargs *a, skv_model *m, seqkv *db, const char *name, skv_st *st,
                      size_t n_seq, const seqkv_profile *kvshape)
{
    int rc;
    skv_kvseq q;
    seqkv_profile want = *kvshape, p;
    if (m) {
        seqkv_profile mp;
        memset(&mp, 0, sizeof mp);
        shape_from_model(m, kvshape->dtype, &mp);
        if (!same_shape(&mp, &want)) {
            char s1[128], s2[128];
            describe_shape(&want, s1, sizeof s1);
            describe_shape(&mp, s2, sizeof s2);
            fprintf(stderr, "seqkv put: %s holds %s KV; the model's is %s\n", a->kv, s1, s2);
            return 1;
        }
        want = mp;
        model_path(a->model, want.model);
    }
    int created;
    int r = ensure_profile(db, a, "put", name, &want, &p, &created);
    if (r)
        return r;
    put_totals tot = {.t0 = cli_now()};
    const size_t tb = token_bytes(&p);
    for (size_t i = 0; i < n_seq && !r; i++) {
        if ((rc = skv_kvfile_get(st, i, &q))) {
            r = cli_fail(rc, a->kv);
            break;
        }
        seqkv_profile qs = p;
        qs.layers = q.layers;
        qs.kv_heads = q.kv_heads;
        qs.head_dim = q.head_dim;
        qs.dtype = q.dtype;
        if (!same_shape(&qs, &p)) {
            char s1[128], s2[128];
            describe_shape(&qs, s1, sizeof s1);
            describe_shape(&p, s2, sizeof s2);
            fprintf(stderr, "seqkv put: %s: sequence %zu is %s; profile %s is %s\n", a->kv, i, s1,
                    p.name, s2);
            r = 1;
            break;
        }
        if (q.T == 0) {
            fprintf(stderr, "seqkv put: %s: sequence %zu is empty\n", a->kv, i);
            r = 1;
            break;
        }
        int32_t *tok = malloc(q.T * sizeof *tok);
        uint8_t *kv = malloc(q.T * tb);
        if (!tok || !kv) {
            r = cli_fail(skv_error(SKV_ERR_NOMEM, "sequence %zu (%zu tokens)", i, q.T), "put");
        } else {
            for (size_t t = 0; t < q.T; t++)
                tok[t] = (int32_t)skv_load32_le((const uint8_t *)q.tokens + 4 * t);
            to_store(&p, q.T, q.k, q.v, kv);
            r = put_one(db, a, &p, i, tok, q.T, kv, q.T * tb, &tot);
            if (!r && !a->quiet)
                cli_progress("put", i + 1, n_seq);
        }
        free(tok);
        free(kv);
    }
    put_summary(a, &p, &tot, r);
    return r;
}

static int put_model(const sargs *a, skv_model *m, seqkv *db, const char *name,
                     const cli_tokens *toks)
{
    const skv_model_config *c = skv_model_cfg(m);
    seqkv_profile want, p;
    memset(&want, 0, sizeof want);
    shape_from_model(m, a->have_dtype ? a->dtype : SKV_DT_BF16, &want);
    model_path(a->model, want.model);
    /* An existing profile fixes the dtype; --dtype must then agree. */
    seqkv_profile have;
    if (!a->have_dtype && seqkv_profile_get(db, name, &have) == 0)
        want.dtype = have.dtype;
    int created;
    int r = ensure_profile(db, a, "put", name, &want, &p, &created);
    if (r)
        return r;
    int rc = 0;
    size_t longest = 0;
    for (size_t i = 0; i < toks->n; i++)
        if (toks->len[i] > longest)
            longest = toks->len[i];
    const size_t tb = token_bytes(&p);
    skv_pool *pool = NULL;
    skv_kvcache *cache = NULL;
    uint8_t *kb = malloc(longest * tb / 2), *vb = malloc(longest * tb / 2), *kv = malloc(longest * tb);
    if (!kb || !vb || !kv)
        rc = skv_error(SKV_ERR_NOMEM, "KV buffers for %zu tokens", longest);
    if (!rc)
        rc = skv_pool_create(&pool, (int)a->threads);
    if (!rc)
        rc = skv_kvcache_create(c, longest, &cache);
    if (rc)
        r = cli_fail(rc, "put");
    put_totals tot = {.t0 = cli_now()};
    for (size_t i = 0; i < toks->n && !r; i++) {
        skv_kvcache_truncate(cache, 0);
        skv_forward_opts o = {.pool = pool};
        rc = skv_model_forward(m, cache, toks->seq[i], toks->len[i], &o);
        if (!rc)
            rc = skv_kvcache_export(cache, 0, toks->len[i], p.dtype, kb, vb);
        if (rc) {
            char what[64];
            snprintf(what, sizeof what, "KV of sequence %zu", i);
            r = cli_fail(rc, what);
            break;
        }
        to_store(&p, toks->len[i], kb, vb, kv);
        r = put_one(db, a, &p, i, toks->seq[i], toks->len[i], kv, toks->len[i] * tb, &tot);
        if (!r && !a->quiet)
            cli_progress("put", i + 1, toks->n);
    }
    put_summary(a, &p, &tot, r);
    free(kb);
    free(vb);
    free(kv);
    skv_kvcache_free(cache);
    skv_pool_free(pool);
    return r;
}

static int do_put(int argc, char **argv)
{
    sargs a;
    int r = sparse("put", argc, argv, &a, put_usage,
                   COMMON | SA(S_PROFILE) | SA(S_KV) | SA(S_MODEL) | SA(S_TOKENS) | SA(S_LEVEL) |
                       SA(S_CALIB) | SA(S_CHUNK) | SA(S_SHARED) | SA(S_NOSYNC) | SA(S_BUDGET) |
                       SA(S_QUIET) | SA(S_DTYPE) | SA(S_THREADS) | SA(S_VERBOSE) | SA(S_NOCENT),
                   0);
    if (r)
        return r;
    if (!!a.kv == !!a.tokens)
        return cli_usage_error("put", "give either --kv FILE or --model PATH --tokens FILE");
    if (a.tokens && !a.model)
        return cli_usage_error("put", "--tokens needs --model PATH to compute the KV");
    char name[SEQKV_NAME_MAX + 1];
    if (a.profile)
        snprintf(name, sizeof name, "%s", a.profile);
    else
        name_from_path(a.kv ? a.kv : a.model, name);
    /* Everything read before the store is opened (and perhaps created). */
    skv_model *m = NULL;
    if (a.model) {
        int rc = skv_model_load(a.model, &m);
        if (rc)
            return cli_fail(rc, a.model);
    }
    cli_tokens toks;
    memset(&toks, 0, sizeof toks);
    skv_st *st = NULL;
    size_t n_seq = 0;
    seqkv_profile kvshape;
    if (a.tokens) {
        int rc = cli_tokens_read(a.tokens, skv_model_cfg(m)->vocab_size, &toks);
        if (rc)
            r = cli_fail(rc, a.tokens);
    } else {
        r = open_kvfile(a.kv, &st, &n_seq, &kvshape);
        if (!r && a.have_dtype && a.dtype != kvshape.dtype)
            r = cli_usage_error("put", "--dtype %s does not match the KV file's %s",
                                skv_dtype_name(a.dtype), skv_dtype_name(kvshape.dtype));
    }
    seqkv *db = NULL;
    if (!r)
        r = open_db(&a, DB_WRITE, &db);
    if (!r)
        r = a.kv ? put_kvfile(&a, m, db, name, st, n_seq, &kvshape)
                 : put_model(&a, m, db, name, &toks);
    seqkv_close(db);
    skv_st_free(st);
    cli_tokens_free(&toks);
    skv_model_free(m);
    return r;
}

/* ---- lookup, get, del ----------------------------------------------------- */

/* What lookup, get and del share: the store, the profile, the token lines. */
static int open_query(const char *cmd, const sargs *a, int mode, seqkv **db,
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
    if ((r = open_db(a, mode, db))) {
        cli_tokens_free(toks);
        return r;
    }
    rc = seqkv_profile_get(*db, name, p);
    if (rc) {
        if (rc == SKV_ERR_NOT_FOUND)
            fprintf(stderr, "seqkv %s: %s has no profile named %s\n", cmd, a->db, name);
        else
            cli_fail(rc, "profile");
        seqkv_close(*db);
        cli_tokens_free(toks);
        return 1;
    }
    return 0;
}

/* lookup and del: one number per line of the token file, from a store call
 * of the same shape. */
typedef int (*per_line_fn)(seqkv *db, const char *tenant, const char *profile,
                           const int32_t *tokens, size_t n, size_t *out);

static int per_line(const char *cmd, int argc, char **argv, const char *usage, unsigned extra,
                    per_line_fn fn)
{
    sargs a;
    int r = sparse(cmd, argc, argv, &a, usage,
                   COMMON | SA(S_PROFILE) | SA(S_MODEL) | SA(S_TOKENS) | extra, 0);
    if (r)
        return r;
    seqkv *db;
    seqkv_profile p;
    cli_tokens toks;
    if ((r = open_query(cmd, &a, DB_USE, &db, &p, &toks)))
        return r;
    for (size_t i = 0; i < toks.n && !r; i++) {
        size_t x = 0;
        int rc = fn(db, a.tenant, p.name, toks.seq[i], toks.len[i], &x);
        if (rc) {
            char what[64];
            snprintf(what, sizeof what, "%s of sequence %zu", cmd, i);
            r = cli_fail(rc, what);
        } else {
            printf("%zu\n", x);
        }
    }
    seqkv_close(db);
    cli_tokens_free(&toks);
    return r;
}

static int do_lookup(int argc, char **argv)
{
    return per_line("lookup", argc, argv, lookup_usage, 0, seqkv_lookup);
}

static int do_get(int argc, char **argv)
{
    sargs a;
    int r = sparse("get", argc, argv, &a, get_usage,
                   COMMON | SA(S_PROFILE) | SA(S_MODEL) | SA(S_TOKENS) | SA(S_OUT) | SA(S_N) |
                       SA(S_QUIET),
                   0);
    if (r)
        return r;
    if (!a.out)
        return cli_usage_error("get", "--out OUT.safetensors is required");
    /* The file is written to OUT.tmp and renamed over OUT: never over a
     * device or anything else that is not a plain file. */
    struct stat sb;
    if (lstat(a.out, &sb) == 0 && !S_ISREG(sb.st_mode))
        return cli_usage_error("get", "--out %s exists and is not a regular file", a.out);
    skv_model *m = NULL;
    if (a.model) {
        int rc = skv_model_load(a.model, &m);
        if (rc)
            return cli_fail(rc, a.model);
    }
    seqkv *db;
    seqkv_profile p;
    cli_tokens toks;
    if ((r = open_query("get", &a, DB_USE, &db, &p, &toks))) {
        skv_model_free(m);
        return r;
    }
    if (m) {
        seqkv_profile mp;
        memset(&mp, 0, sizeof mp);
        shape_from_model(m, p.dtype, &mp);
        if (!same_shape(&mp, &p)) {
            char s1[128], s2[128];
            describe_shape(&p, s1, sizeof s1);
            describe_shape(&mp, s2, sizeof s2);
            fprintf(stderr, "seqkv get: profile %s is %s; the model's KV is %s\n", p.name, s1, s2);
            r = 1;
        }
    }
    const size_t tb = token_bytes(&p);
    size_t longest = 0, total = 0;
    for (size_t i = 0; i < toks.n; i++)
        if (toks.len[i] > longest)
            longest = toks.len[i];
    skv_st_writer *w = NULL;
    uint8_t *buf = malloc(longest * tb), *kb = malloc(longest * tb / 2), *vb = malloc(longest * tb / 2);
    int rc = buf && kb && vb ? SKV_OK : skv_error(SKV_ERR_NOMEM, "KV buffers for %zu tokens", longest);
    if (!rc)
        rc = skv_stw_create(&w);
    if (rc && !r)
        r = cli_fail(rc, "get");
    double t0 = cli_now();
    for (size_t i = 0; i < toks.n && !r; i++) {
        size_t want = a.have_n ? (size_t)a.n : 0, got = 0;
        if (want > toks.len[i]) {
            fprintf(stderr, "seqkv get: sequence %zu has %zu tokens, fewer than --n %zu\n", i,
                    toks.len[i], want);
            r = 1;
            break;
        }
        rc = seqkv_get(db, a.tenant, p.name, toks.seq[i], toks.len[i], want, buf,
                       toks.len[i] * tb, &got);
        if (rc == SKV_ERR_NOT_FOUND && want) {
            size_t have = 0;
            seqkv_lookup(db, a.tenant, p.name, toks.seq[i], toks.len[i], &have);
            fprintf(stderr, "seqkv get: sequence %zu: only %zu of the %zu tokens asked for are "
                    "cached\n", i, have, want);
            r = 1;
            break;
        }
        if (rc == SKV_ERR_NOT_FOUND) {
            /* An unknown tenant, or nothing cached: both mean no KV here. */
            size_t have = 0;
            if (seqkv_lookup(db, a.tenant, p.name, toks.seq[i], toks.len[i], &have) != 0 ||
                have == 0)
                rc = 0, got = 0;
        }
        if (rc) {
            char what[64];
            snprintf(what, sizeof what, "get of sequence %zu", i);
            r = cli_fail(rc, what);
            break;
        }
        if (got == 0) {
            fprintf(stderr, "seqkv get: sequence %zu: nothing cached for it\n", i);
            r = 1;
            break;
        }
        if (got > toks.len[i] || (want && got != want)) {
            fprintf(stderr, "seqkv get: sequence %zu: the store returned %zu tokens for %zu asked "
                    "(a store bug)\n", i, got, want ? want : toks.len[i]);
            r = 1;
            break;
        }
        from_store(&p, got, buf, kb, vb);
        skv_kvseq s = {got, toks.seq[i], p.dtype, p.layers, p.kv_heads, p.head_dim, kb, vb};
        if ((rc = skv_kvfile_add(w, i, &s)))
            r = cli_fail(rc, "get");
        total += got;
        if (!a.quiet)
            cli_progress("get", i + 1, toks.n);
    }
    /* The metadata 'seqkv model kv' writes, in its order. */
    if (!r) {
        char b[64];
        const int rope_dim = p.rope_dim ? p.rope_dim : p.head_dim;
        rc = skv_stw_meta(w, "seqkv.kind", "kv");
        if (!rc && m)
            rc = skv_stw_meta(w, "seqkv.model", skv_model_fingerprint(m));
        if (!rc)
            rc = skv_stw_meta(w, "seqkv.dtype", skv_dtype_name(p.dtype));
        if (!rc)
            rc = skv_stw_meta(w, "seqkv.rope_layout", p.rope_half ? "half" : "pair");
        float theta = p.rope_theta > 0 ? p.rope_theta : m ? skv_model_cfg(m)->rope_theta : 10000.0f;
        snprintf(b, sizeof b, "%.9g", (double)theta);
        if (!rc)
            rc = skv_stw_meta(w, "seqkv.rope_theta", b);
        snprintf(b, sizeof b, "%d", rope_dim);
        if (!rc)
            rc = skv_stw_meta(w, "seqkv.rope_dim", b);
        snprintf(b, sizeof b, "%d", m ? skv_model_cfg(m)->vocab_size : 0);
        if (!rc && m)
            rc = skv_stw_meta(w, "seqkv.vocab", b);
        if (!rc)
            rc = skv_stw_write(w, a.out);
        if (rc)
            r = cli_fail(rc, a.out);
    }
    if (!r && !a.quiet) {
        double secs = cli_now() - t0;
        fprintf(stderr, "get: wrote %zu sequences, %zu tokens (%.2f MiB %s) to %s in %.2f s (%.0f "
                "tokens/s)\n", toks.n, total, (double)(total * tb) / 1048576.0,
                skv_dtype_name(p.dtype), a.out, secs, (double)total / (secs > 0 ? secs : 1e-9));
    }
    free(buf);
    free(kb);
    free(vb);
    skv_stw_free(w);
    seqkv_close(db);
    cli_tokens_free(&toks);
    skv_model_free(m);
    return r;
}

static int do_del(int argc, char **argv)
{
    return per_line("del", argc, argv, del_usage, SA(S_NOSYNC), seqkv_del);
}

/* ---- stats ----------------------------------------------------------------- */

static void print_ratio(double raw, double stored, int json)
{
    if (stored > 0)
        printf(json ? "%.6g" : "%.3fx", raw / stored);
    else
        printf(json ? "null" : "-");
}

static int do_stats(int argc, char **argv)
{
    sargs a;
    int r = sparse("stats", argc, argv, &a, stats_usage, COMMON | SA(S_JSON), 0);
    if (r)
        return r;
    const char *tenant = a.have_tenant ? a.tenant : NULL; /* NULL: every tenant */
    seqkv *db;
    if ((r = open_db(&a, DB_READ, &db)))
        return r;
    seqkv_stats s;
    memset(&s, 0, sizeof s);
    int rc = seqkv_stat(db, tenant, &s);
    seqkv_close(db);
    if (rc) {
        if (rc == SKV_ERR_NOT_FOUND && tenant) {
            fprintf(stderr, "seqkv stats: %s has no tenant named %s\n", a.db, tenant);
            return 1;
        }
        return cli_fail(rc, "stats");
    }
    if (a.json) {
        printf("{\"tenant\":");
        if (tenant) {
            putchar('"');
            for (const char *c = tenant; *c; c++) {
                if (*c == '"' || *c == '\\')
                    printf("\\%c", *c);
                else if ((unsigned char)*c < 0x20)
                    printf("\\u%04x", (unsigned char)*c);
                else
                    putchar(*c);
            }
            putchar('"');
        } else {
            printf("null");
        }
        printf(",\"tokens\":%llu,\"chunks\":%llu,\"raw_bytes\":%llu,\"stored_bytes\":%llu,\"ratio\":",
               (unsigned long long)s.tokens, (unsigned long long)s.chunks,
               (unsigned long long)s.raw_bytes, (unsigned long long)s.stored_bytes);
        print_ratio((double)s.raw_bytes, (double)s.stored_bytes, 1);
        printf(",\"centroid_chunks\":%llu,\"evictions\":%llu,\"map_used\":%llu,\"map_size\":%llu,"
               "\"tenants\":%u,\"profiles\":%u,\"levels\":{",
               (unsigned long long)s.centroid_chunks, (unsigned long long)s.evictions,
               (unsigned long long)s.map_used, (unsigned long long)s.map_size, s.tenants, s.profiles);
        for (int l = 0; l < SEQKV_LEVELS; l++) {
            printf("%s\"%s\":{\"tokens\":%llu,\"raw_bytes\":%llu,\"stored_bytes\":%llu,\"ratio\":",
                   l ? "," : "", seqkv_level_name((seqkv_level)l),
                   (unsigned long long)s.level_tokens[l], (unsigned long long)s.level_raw[l],
                   (unsigned long long)s.level_stored[l]);
            print_ratio((double)s.level_raw[l], (double)s.level_stored[l], 1);
            putchar('}');
        }
        printf("}}\n");
        return 0;
    }
    printf("store         %s%s%s\n", a.db, tenant ? ", tenant " : " (all tenants)",
           tenant ? tenant : "");
    printf("tokens        %llu unique\n", (unsigned long long)s.tokens);
    printf("chunks        %llu (%llu coded against a centroid)\n", (unsigned long long)s.chunks,
           (unsigned long long)s.centroid_chunks);
    printf("raw bytes     %llu (%.2f MiB)\n", (unsigned long long)s.raw_bytes,
           (double)s.raw_bytes / 1048576.0);
    printf("stored bytes  %llu (%.2f MiB)\n", (unsigned long long)s.stored_bytes,
           (double)s.stored_bytes / 1048576.0);
    printf("ratio         ");
    print_ratio((double)s.raw_bytes, (double)s.stored_bytes, 0);
    printf("\n");
    printf("evictions     %llu\n", (unsigned long long)s.evictions);
    printf("map           %.2f of %.2f MiB in use\n", (double)s.map_used / 1048576.0,
           (double)s.map_size / 1048576.0);
    printf("tenants       %u\nprofiles      %u\n", s.tenants, s.profiles);
    printf("\nlevel  %12s %16s %16s %9s\n", "tokens", "raw bytes", "stored bytes", "ratio");
    for (int l = 0; l < SEQKV_LEVELS; l++) {
        if (!s.level_tokens[l] && !s.level_stored[l])
            continue;
        char ratio[32] = "-";
        if (s.level_stored[l])
            snprintf(ratio, sizeof ratio, "%.3fx", (double)s.level_raw[l] / (double)s.level_stored[l]);
        printf("%-6s %12llu %16llu %16llu %9s\n", seqkv_level_name((seqkv_level)l),
               (unsigned long long)s.level_tokens[l], (unsigned long long)s.level_raw[l],
               (unsigned long long)s.level_stored[l], ratio);
    }
    return 0;
}

/* ---- calibrate, profile, tenant ------------------------------------------ */

static int do_calibrate(int argc, char **argv)
{
    sargs a;
    int r = sparse("calibrate", argc, argv, &a, calibrate_usage,
                   SA(S_DB) | SA(S_KEY) | SA(S_PROFILE) | SA(S_MAXSEQ) | SA(S_CALIB) |
                       SA(S_NOSYNC) | SA(S_QUIET),
                   0);
    if (r)
        return r;
    if (!a.profile)
        return cli_usage_error("calibrate", "--profile NAME is required");
    if (a.calib && a.max_seq)
        return cli_usage_error("calibrate", "--max-seq and --calib exclude each other");
    seqkv *db;
    if ((r = open_db(&a, DB_USE, &db)))
        return r;
    double t0 = cli_now();
    int rc = a.calib ? seqkv_calibrate_import(db, a.profile, a.calib)
                     : seqkv_calibrate(db, a.profile, (size_t)a.max_seq);
    seqkv_profile p;
    if (!rc)
        rc = seqkv_profile_get(db, a.profile, &p);
    seqkv_close(db);
    if (rc)
        return cli_fail(rc, a.calib ? a.calib : "calibrate");
    char id[33];
    hex(p.calib_id, 16, id);
    if (!a.quiet)
        fprintf(stderr, "calibrate: profile %s now uses calibration %s (%.1f s)\n", p.name, id,
                cli_now() - t0);
    return 0;
}

static void print_profile(const seqkv_profile *p, int json)
{
    char id[65], cid[33];
    hex(p->id, 32, id);
    hex(p->calib_id, 16, cid);
    int chunk = p->chunk ? p->chunk : SEQKV_CHUNK_DEFAULT;
    if (json) {
        printf("{\"name\":\"%s\",\"layers\":%d,\"kv_heads\":%d,\"head_dim\":%d,\"dtype\":\"%s\","
               "\"rope_theta\":%.9g,\"rope_dim\":%d,\"rope_layout\":\"%s\",\"chunk\":%d,"
               "\"level\":\"%s\",\"model\":\"",
               p->name, p->layers, p->kv_heads, p->head_dim, skv_dtype_name(p->dtype),
               (double)p->rope_theta, p->rope_dim, p->rope_half ? "half" : "pair", chunk,
               seqkv_level_name(p->level));
        for (const char *c = p->model; *c; c++) {
            if (*c == '"' || *c == '\\')
                printf("\\%c", *c);
            else if ((unsigned char)*c < 0x20)
                printf("\\u%04x", (unsigned char)*c);
            else
                putchar(*c);
        }
        printf("\",\"calibration\":");
        if (p->has_calib)
            printf("\"%s\"", cid);
        else
            printf("null");
        printf(",\"id\":\"%s\"}\n", id);
        return;
    }
    printf("profile      %s\n", p->name);
    printf("shape        %d layers, %d kv heads, head_dim %d, %s\n", p->layers, p->kv_heads,
           p->head_dim, skv_dtype_name(p->dtype));
    printf("rope         theta %g, %d channels, %s layout\n", (double)p->rope_theta,
           p->rope_dim ? p->rope_dim : p->head_dim, p->rope_half ? "half" : "pair");
    printf("chunk        %d tokens\n", chunk);
    printf("level        %s\n", seqkv_level_name(p->level));
    printf("model        %s\n", p->model[0] ? p->model : "(none)");
    printf("calibration  %s\n", p->has_calib ? cid : "(none)");
    printf("id           %s\n", id);
}

static int do_profile_get(int argc, char **argv)
{
    sargs a;
    int r = sparse("profile get", argc, argv, &a, profile_get_usage,
                   SA(S_DB) | SA(S_KEY) | SA(S_JSON) | SA(S_PROFILE), 1);
    if (r)
        return r;
    const char *name = a.name ? a.name : a.profile;
    if (!name)
        return cli_usage_error("profile get", "the profile NAME is required");
    seqkv *db;
    if ((r = open_db(&a, DB_READ, &db)))
        return r;
    seqkv_profile p;
    int rc = seqkv_profile_get(db, name, &p);
    seqkv_close(db);
    if (rc == SKV_ERR_NOT_FOUND) {
        fprintf(stderr, "seqkv profile get: %s has no profile named %s\n", a.db, name);
        return 1;
    }
    if (rc)
        return cli_fail(rc, "profile");
    print_profile(&p, a.json);
    return 0;
}

static int do_profile_set(int argc, char **argv)
{
    sargs a;
    int r = sparse("profile set", argc, argv, &a, profile_set_usage,
                   SA(S_DB) | SA(S_KEY) | SA(S_PROFILE) | SA(S_MODEL) | SA(S_KV) | SA(S_LEVEL) |
                       SA(S_DTYPE) | SA(S_CHUNK) | SA(S_CALIB) | SA(S_QUIET),
                   1);
    if (r)
        return r;
    const char *name = a.name ? a.name : a.profile;
    if (!name)
        return cli_usage_error("profile set", "the profile NAME is required");
    if (!*name || strlen(name) > SEQKV_NAME_MAX)
        return cli_usage_error("profile set", "a profile name has 1 to %d bytes", SEQKV_NAME_MAX);
    if (a.model && a.kv)
        return cli_usage_error("profile set", "give --model or --kv, not both");
    seqkv_profile want;
    memset(&want, 0, sizeof want);
    skv_model *m = NULL;
    int rc = 0;
    if (a.model) {
        if ((rc = skv_model_load(a.model, &m)))
            return cli_fail(rc, a.model);
        shape_from_model(m, a.have_dtype ? a.dtype : SKV_DT_BF16, &want);
        model_path(a.model, want.model);
        skv_model_free(m);
    } else if (a.kv) {
        skv_st *st;
        size_t n;
        if ((r = open_kvfile(a.kv, &st, &n, &want)))
            return r;
        skv_st_free(st);
        if (a.have_dtype && a.dtype != want.dtype)
            return cli_usage_error("profile set", "--dtype %s, but %s holds %s",
                                   skv_dtype_name(a.dtype), a.kv, skv_dtype_name(want.dtype));
    }
    seqkv *db;
    if ((r = open_db(&a, DB_WRITE, &db)))
        return r;
    seqkv_profile p;
    int created = 0; /* ensure_profile() prints its own notes */
    rc = seqkv_profile_get(db, name, &p);
    if (rc == SKV_ERR_NOT_FOUND) {
        if (!a.model && !a.kv) {
            seqkv_close(db);
            fprintf(stderr, "seqkv profile set: %s has no profile %s: give --model or --kv for its "
                    "shape\n", a.db, name);
            return 1;
        }
        r = ensure_profile(db, &a, "profile set", name, &want, &p, &created);
    } else if (rc) {
        r = cli_fail(rc, "profile");
    } else {
        /* Existing: level and model may change; anything else given must
         * agree (profile_set refuses a changed identity). */
        if (a.have_dtype)
            p.dtype = a.dtype;
        if (a.have_chunk)
            p.chunk = (int)a.chunk;
        if (a.model && !a.have_dtype)
            want.dtype = p.dtype; /* a model computes KV in any dtype */
        if ((a.model || a.kv) && !same_shape(&p, &want)) {
            char s1[128], s2[128];
            describe_shape(&p, s1, sizeof s1);
            describe_shape(&want, s2, sizeof s2);
            fprintf(stderr, "seqkv profile set: profile %s is %s, not %s\n", name, s1, s2);
            r = 1;
        }
        if (a.model)
            model_path(a.model, p.model);
        if (a.have_level)
            p.level = a.level;
        if (!r) {
            rc = seqkv_profile_set(db, &p);
            if (rc == SKV_ERR_UNSUPPORTED) /* accepted: noted below */
                rc = 0;
            if (rc)
                r = cli_fail(rc, "profile set");
        }
        if (!r && a.calib && (rc = seqkv_calibrate_import(db, name, a.calib)))
            r = cli_fail(rc, a.calib);
    }
    if (!r && (rc = seqkv_profile_get(db, name, &p)))
        r = cli_fail(rc, "profile");
    seqkv_close(db);
    if (!r && !a.quiet) {
        print_profile(&p, 0);
        if (!created && p.level != SEQKV_RAW && !p.has_calib)
            fprintf(stderr, "profile set: note: %s has no calibration: level %s codes raw until "
                    "'seqkv calibrate' (or --calib) gives it one\n", name, seqkv_level_name(p.level));
    }
    return r;
}

static int do_profile(int argc, char **argv)
{
    static const cli_sub subs[] = {
        {"get", do_profile_get},
        {"set", do_profile_set},
    };
    return cli_dispatch("profile", profile_usage, subs, sizeof subs / sizeof subs[0], argc, argv);
}

static int do_tenant_set(int argc, char **argv)
{
    sargs a;
    int r = sparse("tenant set", argc, argv, &a, tenant_usage,
                   SA(S_DB) | SA(S_KEY) | SA(S_TENANT) | SA(S_BUDGET) | SA(S_READSHARED), 1);
    if (r)
        return r;
    const char *name = a.name ? a.name : a.have_tenant ? a.tenant : NULL;
    if (!name)
        return cli_usage_error("tenant set", "the tenant NAME is required");
    seqkv_tenant_conf c = {.budget = a.budget, .read_shared = a.read_shared};
    a.budget = 0; /* the tenant's, not the store's */
    seqkv *db;
    if ((r = open_db(&a, DB_WRITE, &db)))
        return r;
    int rc = seqkv_tenant_set(db, name, &c);
    seqkv_close(db);
    return rc ? cli_fail(rc, "tenant set") : 0;
}

static int do_tenant(int argc, char **argv)
{
    static const cli_sub subs[] = {
        {"set", do_tenant_set},
    };
    return cli_dispatch("tenant", tenant_usage, subs, sizeof subs / sizeof subs[0], argc, argv);
}

int cmd_store(int argc, char **argv)
{
    static const cli_sub subs[] = {
        {"put", do_put},           {"lookup", do_lookup},       {"get", do_get},
        {"del", do_del},           {"stats", do_stats},         {"calibrate", do_calibrate},
        {"profile", do_profile},   {"tenant", do_tenant},
    };
    /* argv[0] is the command itself: dispatch on it as a one-level group. */
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
        if (strcmp(argv[0], subs[i].name) == 0)
            return subs[i].fn(argc, argv);
    fprintf(stderr, "seqkv: unknown store command '%s'\n", argv[0]);
    return 2;
}
