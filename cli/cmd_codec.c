/* seqkv codec calibrate|encode|decode|bench */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "lossy_bench.h"
#include "codec_baselines.h"
#include "skv_delta.h"

static const char codec_usage[] =
    "usage: seqkv codec <calibrate|encode|decode|bench> [options]\n"
    "Run 'seqkv codec <subcommand> --help' for each one's options.\n";

static const char calibrate_usage[] =
    "usage: seqkv codec calibrate --calib CAL.safetensors [--model PATH] --out C.cal\n"
    "                             [--sample N|all] [--fit-samples N]\n"
    "\n"
    "Learn the predictors' calibration from the sequences of a KV file:\n"
    "per-channel means and spreads (s chosen by measured code length), the\n"
    "per-(layer, token) codebook, least-squares blend weights and the dtype's\n"
    "empirical marginal. With --model the spec (int8 copy) and full levels are\n"
    "calibrated too. Progress on stderr.\n"
    "\n"
    "  --sample N|all    positions learned from, a window of each sequence (default:\n"
    "                    at most 16384 and 256 MiB of KV, as a store's self-calibration)\n"
    "  --fit-samples N   samples a channel for fitting its spread (default: 4096 for\n"
    "                    a narrow shape, down to 256 for a wide one)\n";

static const char encode_usage[] =
    "usage: seqkv codec encode --cal C.cal --kv KV.safetensors --out OUT.skv\n"
    "                          [--level stat|ctx|spec|full] [--model PATH] [--chunk N]\n"
    "\n"
    "Code every sequence of a KV file losslessly (default level ctx, chunks of\n"
    "256 tokens; spec and full need the model the calibration was made with).\n";

static const char decode_usage[] =
    "usage: seqkv codec decode --cal C.cal --in IN.skv --out KV.safetensors [--model PATH]\n"
    "\n"
    "Decode a coded file back to the exact KV file layout.\n";

static const char bench_usage[] =
    "usage: seqkv codec bench --calib CAL.safetensors --test TEST.safetensors\n"
    "                         [--model PATH] [--level stat|ctx|spec|full|fast|all] [--json]\n"
    "                         [--chunk N] [--cal C.cal] [--reps N] [--no-zstd]\n"
    "       seqkv codec bench --calib CAL --test TEST --model PATH --level q4,q3,q2\n"
    "                         [--sink N] [--recent N] [--json]\n"
    "\n"
    "Calibrate on CAL (or load --cal), then code TEST at each level: actual and\n"
    "ideal bits per scalar (overall, per layer and k/v), encode and decode\n"
    "M scalars/s on one thread (spec/full also tokens/s), a bit-exact round\n"
    "trip check, and in the same run zstd -1, -3 and -19 on the raw bytes and\n"
    "on byte planes (the planes' decode speed too, one thread; --no-zstd\n"
    "leaves them out). fast (no calibration) is coded whole-set and per chunk\n"
    "stream, in MB/s. Rates are the best of N passes over the test set\n"
    "(default 3; the first builds the coding tables), timed on the thread's\n"
    "CPU clock (the\n"
    "decode on all cores on the wall clock); output buffers are allocated and\n"
    "the round trip compared outside the timed part. Timed encodes run as the\n"
    "store's do, without adding up the ideal code length; one more pass, not\n"
    "timed, measures it.\n"
    "\n"
    "The lossy levels (q4, q3, q2: coded bits a scalar, comma-separated) are\n"
    "calibrated on CAL's sequences run through the model, then TEST (made by\n"
    "the same model: its K/V are checked) is coded at each level and by the\n"
    "baselines at the same coded bits: scalar quantisation in the same\n"
    "transformed domain (-sq), product VQ without the transform (-vq),\n"
    "per-channel round-to-nearest (-rtn) and KIVI (-kivi). Each row: bits per\n"
    "lossy scalar, relative error of the attention output (after W_O, mean\n"
    "over layers; per layer in --json), KL divergence (nats) of the next-token\n"
    "distribution when the model attends over the reconstruction, and greedy\n"
    "next-token agreement. The first --sink (default 4) and last --recent\n"
    "(default 0) positions of each sequence stay exact.\n";

enum {
    O_CALIB = 2000, O_MODEL, O_OUT, O_CAL, O_KV, O_IN, O_LEVEL, O_CHUNK, O_TEST, O_JSON, O_REPS,
    O_SINK, O_RECENT, O_SAMPLE, O_FITS, O_NOZSTD, O_HELP
};
static const struct option opts[] = {
    {"calib", required_argument, NULL, O_CALIB}, {"model", required_argument, NULL, O_MODEL},
    {"out", required_argument, NULL, O_OUT},     {"cal", required_argument, NULL, O_CAL},
    {"kv", required_argument, NULL, O_KV},       {"in", required_argument, NULL, O_IN},
    {"level", required_argument, NULL, O_LEVEL}, {"chunk", required_argument, NULL, O_CHUNK},
    {"test", required_argument, NULL, O_TEST},   {"json", no_argument, NULL, O_JSON},
    {"reps", required_argument, NULL, O_REPS},   {"help", no_argument, NULL, O_HELP},
    {"sink", required_argument, NULL, O_SINK},   {"recent", required_argument, NULL, O_RECENT},
    {"sample", required_argument, NULL, O_SAMPLE}, {"fit-samples", required_argument, NULL, O_FITS},
    {"no-zstd", no_argument, NULL, O_NOZSTD},
    {NULL, 0, NULL, 0},
};

typedef struct {
    const char *calib, *model, *out, *cal, *kv, *in, *level, *test;
    long chunk, reps, sink, recent, fit_samples;
    size_t sample;
    int json, no_zstd;
} cargs;

static int cparse(const char *cmd, int argc, char **argv, cargs *a, const char *usage,
                  unsigned allowed)
{
    memset(a, 0, sizeof *a);
    a->chunk = 256;
    a->reps = 3;
    a->sink = 4;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        if (c == 'h' || c == O_HELP) {
            fputs(usage, stdout);
            exit(0);
        }
        if (c == '?')
            return cli_usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
        if (c == ':')
            return cli_usage_error(cmd, "option '%s' needs a value", argv[optind - 1]);
        if (!(allowed & (1u << (c - O_CALIB))))
            return cli_usage_error(cmd, "option '%s' does not apply here", argv[optind - 1]);
        switch (c) {
        case O_CALIB: a->calib = optarg; break;
        case O_MODEL: a->model = optarg; break;
        case O_OUT: a->out = optarg; break;
        case O_CAL: a->cal = optarg; break;
        case O_KV: a->kv = optarg; break;
        case O_IN: a->in = optarg; break;
        case O_LEVEL: a->level = optarg; break;
        case O_TEST: a->test = optarg; break;
        case O_JSON: a->json = 1; break;
        case O_NOZSTD: a->no_zstd = 1; break;
        case O_CHUNK:
            if (cli_parse_long(optarg, 1, 1 << 20, &a->chunk))
                return cli_usage_error(cmd, "--chunk wants a positive integer");
            break;
        case O_REPS:
            if (cli_parse_long(optarg, 1, 100, &a->reps))
                return cli_usage_error(cmd, "--reps wants an integer from 1 to 100");
            break;
        case O_SAMPLE:
            if (strcmp(optarg, "all") == 0) {
                a->sample = SIZE_MAX;
            } else {
                long n;
                if (cli_parse_long(optarg, 1, 1L << 40, &n))
                    return cli_usage_error(cmd, "--sample wants a positive integer or 'all'");
                a->sample = (size_t)n;
            }
            break;
        case O_FITS:
            if (cli_parse_long(optarg, 16, 1 << 20, &a->fit_samples))
                return cli_usage_error(cmd, "--fit-samples wants an integer from 16 to 1048576");
            break;
        case O_SINK:
        case O_RECENT:
            if (cli_parse_long(optarg, 0, 1 << 20, c == O_SINK ? &a->sink : &a->recent))
                return cli_usage_error(cmd, "%s wants an integer >= 0", argv[optind - 2]);
            break;
        }
    }
    if (optind < argc)
        return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
    return 0;
}
#define A(o) (1u << ((o) - O_CALIB))

static int open_model(const char *path, skv_model **m)
{
    *m = NULL;
    if (!path)
        return 0;
    int rc = skv_model_load(path, m);
    return rc ? cli_fail(rc, path) : 0;
}

/* The calibration and (optional) model every coding command starts from. */
static int open_cal_model(const char *cal, const char *model, skv_calib **c, skv_model **m)
{
    int rc = skv_calib_load(cal, c);
    if (rc)
        return cli_fail(rc, cal);
    int r = open_model(model, m);
    if (r) {
        skv_calib_free(*c);
        *c = NULL;
    }
    return r;
}

static int learn(const char *calib_path, skv_model *m, skv_pool *pool, int quiet, const cargs *a,
                 skv_calib **out)
{
    skv_st *st;
    int rc = skv_st_open(calib_path, &st);
    if (rc)
        return cli_fail(rc, calib_path);
    skv_calib_opts o = {.model = m, .pool = pool, .quiet = quiet, .sample_positions = a->sample,
                        .max_fit_samples = (int)a->fit_samples};
    rc = skv_calib_learn(st, &o, out);
    skv_st_free(st);
    return rc ? cli_fail(rc, "calibrate") : 0;
}

static int do_calibrate(int argc, char **argv)
{
    cargs a;
    int r = cparse("codec calibrate", argc, argv, &a, calibrate_usage, A(O_CALIB) | A(O_MODEL) | A(O_OUT) |
                                                                      A(O_SAMPLE) | A(O_FITS));
    if (r)
        return r;
    if (!a.calib || !a.out)
        return cli_usage_error("codec calibrate", "--calib and --out are required");
    skv_model *m;
    skv_pool *pool = NULL;
    if ((r = open_model(a.model, &m)))
        return r;
    skv_pool_create(&pool, 0);
    skv_calib *c = NULL;
    double t0 = cli_now();
    r = learn(a.calib, m, pool, 0, &a, &c);
    if (!r) {
        int rc = skv_calib_save(c, a.out);
        if (rc)
            r = cli_fail(rc, a.out);
        else
            fprintf(stderr, "calibrate: wrote %s (levels:%s%s%s%s) in %.1f s\n", a.out,
                    skv_calib_has_level(c, SEQKV_STAT) ? " stat" : "",
                    skv_calib_has_level(c, SEQKV_CTX) ? " ctx" : "",
                    skv_calib_has_level(c, SEQKV_SPEC) ? " spec" : "",
                    skv_calib_has_level(c, SEQKV_FULL) ? " full" : "", cli_now() - t0);
    }
    skv_calib_free(c);
    skv_pool_free(pool);
    skv_model_free(m);
    return r;
}

/* ---- coded files (format: skv_delta.h, FORMAT.md) ---------------------- */

static void put32(FILE *f, uint32_t v)
{
    uint8_t b[4];
    skv_store32_le(b, v);
    fwrite(b, 1, 4, f);
}

static int do_encode(int argc, char **argv)
{
    cargs a;
    int r = cparse("codec encode", argc, argv, &a, encode_usage,
                   A(O_CAL) | A(O_KV) | A(O_OUT) | A(O_LEVEL) | A(O_MODEL) | A(O_CHUNK));
    if (r)
        return r;
    if (!a.cal || !a.kv || !a.out)
        return cli_usage_error("codec encode", "--cal, --kv and --out are required");
    seqkv_level lvl = SEQKV_CTX;
    if (a.level && (seqkv_level_parse(a.level, &lvl) || lvl == SEQKV_RAW))
        return cli_usage_error("codec encode", "--level wants stat, ctx, spec or full");
    skv_calib *c;
    skv_model *m;
    if ((r = open_cal_model(a.cal, a.model, &c, &m)))
        return r;
    int rc;
    skv_st *st = NULL;
    skv_delta *d = NULL;
    skv_streams s = {0};
    FILE *f = NULL;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", a.out);
    size_t n_seq = 0, raw = 0;
    rc = skv_st_open(a.kv, &st);
    if (!rc)
        rc = skv_kvfile_count(st, &n_seq);
    if (!rc)
        rc = skv_delta_create(c, lvl, m, NULL, &d);
    if (!rc && !(f = fopen(tmp, "wb")))
        rc = skv_error(SKV_ERR_IO, "%s: cannot create", tmp);
    if (!rc) {
        uint8_t h[SKV_CODED_HEADER];
        skv_coded_info ci = {lvl, skv_calib_shape(c)->dtype, (uint32_t)n_seq, (uint32_t)a.chunk, {0}};
        memcpy(ci.calib_id, skv_calib_id(c), 16);
        skv_coded_write_header(h, &ci);
        fwrite(h, 1, sizeof h, f);
    }
    for (size_t i = 0; i < n_seq && !rc; i++) {
        skv_kvseq q;
        if ((rc = skv_kvfile_get(st, i, &q)))
            break;
        const skv_kvshape *sh = skv_calib_shape(c);
        if (q.layers != sh->layers || q.kv_heads != sh->kv_heads || q.head_dim != sh->head_dim ||
            q.dtype != sh->dtype) {
            rc = skv_error(SKV_ERR_SHAPE,
                           "sequence %zu is %s [%d layers, %d kv heads, head_dim %d]; the calibration is for %s [%d, %d, %d]",
                           i, skv_dtype_name(q.dtype), q.layers, q.kv_heads, q.head_dim,
                           skv_dtype_name(sh->dtype), sh->layers, sh->kv_heads, sh->head_dim);
            break;
        }
        int32_t *tok = malloc((q.T ? q.T : 1) * sizeof *tok);
        size_t nb = (size_t)q.layers * q.T * q.kv_heads * q.head_dim * skv_dtype_size(q.dtype);
        uint8_t *k = malloc(nb ? nb : 1), *v = malloc(nb ? nb : 1);
        if (!tok || !k || !v) {
            rc = skv_error(SKV_ERR_NOMEM, "sequence %zu", i);
        } else {
            for (size_t t = 0; t < q.T; t++)
                tok[t] = (int32_t)skv_load32_le((const uint8_t *)q.tokens + 4 * t);
            memcpy(k, q.k, nb);
            memcpy(v, q.v, nb);
            s.len = 0;
            s.nstreams = 0;
            rc = skv_delta_encode(d, tok, q.T, k, v, (size_t)a.chunk, &s);
            raw += 2 * nb;
            cli_progress("encode", i + 1, n_seq);
        }
        if (!rc) {
            put32(f, (uint32_t)q.T);
            for (size_t t = 0; t < q.T; t++)
                put32(f, (uint32_t)tok[t]);
            put32(f, (uint32_t)s.nstreams);
            for (size_t j = 0; j < s.nstreams; j++)
                put32(f, (uint32_t)(s.offs[j + 1] - s.offs[j]));
            fwrite(s.data, 1, s.len, f);
        }
        free(tok);
        free(k);
        free(v);
    }
    if (f) {
        if (fflush(f) || ferror(f))
            rc = rc ? rc : skv_error(SKV_ERR_IO, "%s: write failed", tmp);
        long sz = ftell(f);
        fclose(f);
        if (!rc && rename(tmp, a.out) != 0)
            rc = skv_error(SKV_ERR_IO, "rename %s", tmp);
        if (rc)
            remove(tmp);
        else
            fprintf(stderr, "encode: %zu sequences, %zu raw bytes -> %ld bytes (%.3f bits/scalar, level %s)\n",
                    n_seq, raw, sz, raw ? 8.0 * (double)sz / ((double)raw / skv_dtype_size(skv_calib_shape(c)->dtype)) : 0.0,
                    seqkv_level_name(lvl));
    }
    skv_streams_free(&s);
    skv_delta_free(d);
    skv_st_free(st);
    skv_model_free(m);
    skv_calib_free(c);
    return rc ? cli_fail(rc, "encode") : 0;
}

static int do_decode(int argc, char **argv)
{
    cargs a;
    int r = cparse("codec decode", argc, argv, &a, decode_usage, A(O_CAL) | A(O_IN) | A(O_OUT) | A(O_MODEL));
    if (r)
        return r;
    if (!a.cal || !a.in || !a.out)
        return cli_usage_error("codec decode", "--cal, --in and --out are required");
    skv_calib *c;
    skv_model *m;
    if ((r = open_cal_model(a.cal, a.model, &c, &m)))
        return r;
    int rc;
    uint8_t *buf = NULL;
    size_t len = 0;
    skv_delta *d = NULL;
    skv_st_writer *w = NULL;
    rc = skv_file_read(a.in, (size_t)1 << 40, &buf, &len);
    const skv_kvshape *sh = skv_calib_shape(c);
    skv_coded_info ci = {SEQKV_STAT, SEQKV_DT_F32, 0, 0, {0}};
    if (!rc)
        rc = skv_coded_read_header(buf, len, &ci);
    if (!rc && ci.dtype != sh->dtype)
        rc = skv_error(SKV_ERR_SHAPE, "%s holds %s, the calibration is for %s", a.in,
                       skv_dtype_name(ci.dtype), skv_dtype_name(sh->dtype));
    if (!rc && memcmp(ci.calib_id, skv_calib_id(c), 16) != 0)
        rc = skv_error(SKV_ERR_ARG, "%s was coded with another calibration than %s", a.in, a.cal);
    if (!rc)
        rc = skv_delta_create(c, ci.level, m, NULL, &d);
    if (!rc)
        rc = skv_stw_create(&w);
    skv_streams s = {0};
    size_t p = SKV_CODED_HEADER;
    for (size_t i = 0; i < ci.n_seq && !rc; i++) {
        uint32_t T;
        const uint8_t *tb;
        if ((rc = skv_coded_read_seq(buf, len, &p, &T, &tb, &s)))
            break;
        size_t nb = (size_t)sh->layers * T * sh->kv_heads * sh->head_dim * skv_dtype_size(sh->dtype);
        int32_t *tok = malloc(((size_t)T + 1) * sizeof *tok);
        uint8_t *k = malloc(nb ? nb : 1), *v = malloc(nb ? nb : 1);
        if (!tok || !k || !v)
            rc = skv_error(SKV_ERR_NOMEM, "sequence %zu", i);
        for (size_t t = 0; !rc && t < T; t++)
            tok[t] = (int32_t)skv_load32_le(tb + 4 * t);
        if (!rc)
            rc = skv_delta_decode(d, tok, T, &s, 0, ci.chunk, k, v);
        if (!rc) {
            skv_kvseq q = {T, tok, sh->dtype, sh->layers, sh->kv_heads, sh->head_dim, k, v};
            rc = skv_kvfile_add(w, i, &q);
            cli_progress("decode", i + 1, ci.n_seq);
        }
        free(tok);
        free(k);
        free(v);
    }
    skv_streams_free(&s);
    if (!rc && p != len)
        rc = skv_error(SKV_ERR_FORMAT, "%s: %zu trailing bytes", a.in, len - p);
    if (!rc)
        rc = skv_stw_write(w, a.out);
    if (!rc)
        fprintf(stderr, "decode: %u sequences -> %s\n", ci.n_seq, a.out);
    skv_stw_free(w);
    skv_delta_free(d);
    skv_free(buf);
    skv_model_free(m);
    skv_calib_free(c);
    return rc ? cli_fail(rc, "decode") : 0;
}

/* ---- bench ------------------------------------------------------------------ */

/* The test set as codec bench decodes it, with one output buffer pair
 * for the largest sequence. */
typedef struct {
    const skv_kvshape *sh;
    size_t n;
    int32_t *const *toks;
    const skv_kvseq *seqs;
    const skv_streams *ss;
    size_t chunk;
    uint8_t *kb, *vb;
    long reps;
} bench_set;

/* bytes of one of K or V of a sequence of T tokens */
static size_t seq_bytes(const skv_kvshape *sh, size_t T)
{
    return (size_t)sh->layers * T * sh->kv_heads * sh->head_dim * skv_dtype_size(sh->dtype);
}

/* The least time over reps decodes of every sequence on clock clk (the
 * thread's CPU clock, or the wall clock for a coder on a pool), the
 * round trip compared outside it; *ok = 0 where a sequence differs. */
static int best_decode(skv_delta *d, const bench_set *b, double (*clk)(void), double *best, int *ok)
{
    int rc = SKV_OK;
    *best = 1e30;
    for (long rep = 0; rep < b->reps && !rc; rep++) {
        double t = 0;
        for (size_t i = 0; i < b->n && !rc; i++) {
            size_t nb = seq_bytes(b->sh, b->seqs[i].T);
            double t0 = clk();
            rc = skv_delta_decode(d, b->toks[i], b->seqs[i].T, &b->ss[i], 0, b->chunk, b->kb, b->vb);
            t += clk() - t0;
            if (!rc && (memcmp(b->kb, b->seqs[i].k, nb) || memcmp(b->vb, b->seqs[i].v, nb)))
                *ok = 0;
        }
        *best = t < *best ? t : *best;
    }
    return rc;
}

/* What codec bench measures: its options, the calibration and model, and
 * the test set (tokens and raw K/V per sequence) with its totals. */
typedef struct {
    const cargs *a;
    skv_model *m;
    skv_pool *pool;
    skv_calib *c;
    const skv_kvshape *sh;
    size_t es; /* bytes per scalar */
    size_t n_seq, tot_tok, tot_sc;
    skv_kvseq *seqs;
    int32_t **toks;
} bench_run;

/* One level's times: the best encode, the best decode on one thread and
 * on the pool's threads (0: not measured), and whether every round trip
 * was exact. */
typedef struct {
    double te, td, tp;
    int threads, ok;
} bench_times;

/* --level into want[0..SEQKV_LEVELS) (every coded level unless one is named) */
static int bench_levels(const char *level, int *want)
{
    if (!level || strcmp(level, "all") == 0)
        return 0;
    seqkv_level l;
    if (seqkv_level_parse(level, &l) || l == SEQKV_RAW)
        return cli_usage_error("codec bench", "--level wants stat, ctx, spec, full, fast or all");
    memset(want, 0, SEQKV_LEVELS * sizeof *want);
    want[l] = 1;
    return 0;
}

/* Gather the test set of st: tokens and raw K/V per sequence, each of the
 * calibration's shape, and their totals. */
static int bench_gather(bench_run *b, skv_st *st)
{
    const skv_kvshape *sh = b->sh;
    int rc = SKV_OK;
    b->seqs = calloc(b->n_seq, sizeof *b->seqs);
    b->toks = calloc(b->n_seq, sizeof *b->toks);
    for (size_t i = 0; i < b->n_seq && !rc; i++) {
        skv_kvseq *q = &b->seqs[i];
        rc = skv_kvfile_get(st, i, q);
        if (!rc && (q->layers != sh->layers || q->kv_heads != sh->kv_heads ||
                    q->head_dim != sh->head_dim || q->dtype != sh->dtype))
            rc = skv_error(SKV_ERR_SHAPE, "test sequence %zu does not match the calibration", i);
        if (rc)
            break;
        b->toks[i] = malloc((q->T + 1) * sizeof(int32_t));
        for (size_t t = 0; t < q->T; t++)
            b->toks[i][t] = (int32_t)skv_load32_le((const uint8_t *)q->tokens + 4 * t);
        b->tot_tok += q->T;
        b->tot_sc += 2 * (size_t)sh->layers * q->T * sh->kv_heads * sh->head_dim;
    }
    return rc;
}

/* The baselines (zstd on raw bytes and byte planes) and, when asked, the
 * fast level (cli/codec_baselines.c), on the same test set. */
static int bench_baselines(const bench_run *b, int fast)
{
    const size_t es = b->es;
    uint8_t *all = malloc(b->tot_sc * es + 1);
    size_t *T = malloc((b->n_seq + 1) * sizeof *T);
    const uint8_t **k = malloc((b->n_seq + 1) * sizeof *k), **v = malloc((b->n_seq + 1) * sizeof *v);
    size_t o = 0;
    for (size_t i = 0; i < b->n_seq; i++) {
        size_t nb = b->tot_sc ? seq_bytes(b->sh, b->seqs[i].T) : 0;
        memcpy(all + o, b->seqs[i].k, nb);
        memcpy(all + o + nb, b->seqs[i].v, nb);
        o += 2 * nb;
        T[i] = b->seqs[i].T;
        k[i] = b->seqs[i].k;
        v[i] = b->seqs[i].v;
    }
    const cb_input in = {all, b->tot_sc, es, b->sh->dtype, (size_t)b->sh->layers,
                         (size_t)b->sh->kv_heads * (size_t)b->sh->head_dim, (size_t)b->a->chunk,
                         b->n_seq, T, k, v, b->a->reps, b->a->json};
    if (!b->a->no_zstd)
        cli_codec_baselines(&in);
    int rc = fast ? cli_codec_fast(&in) : SKV_OK;
    free(all);
    free(T);
    free(k);
    free(v);
    return rc;
}

/* Time level lv's coder d on the test set, its streams into ss (n_seq of
 * them, NULL when they could not be had): the best of reps passes as the
 * store encodes (without the ideal code length), then one pass, not
 * timed, that also adds it up: its costs and streams are the ones
 * reported (every pass writes the same bytes); the best decode on this
 * thread and, for stat and ctx, on every core. */
static int bench_time(const bench_run *b, int lv, skv_delta *d, skv_streams *ss, bench_times *t)
{
    const cargs *a = b->a;
    int rc = SKV_OK;
    /* output buffers for the largest sequence, allocated before any clock */
    size_t nbmax = 0;
    for (size_t i = 0; i < b->n_seq; i++) {
        size_t nb = seq_bytes(b->sh, b->seqs[i].T);
        nbmax = nb > nbmax ? nb : nbmax;
    }
    uint8_t *kb = malloc(nbmax + 1), *vb = malloc(nbmax + 1);
    if (!ss || !kb || !vb)
        rc = skv_error(SKV_ERR_NOMEM, "bench buffers");
    const bench_set bs = {b->sh, b->n_seq, b->toks, b->seqs, ss, (size_t)a->chunk, kb, vb, a->reps};
    t->te = 1e30;
    t->td = 1e30;
    t->tp = 0;
    t->ok = 1;
    for (long rep = 0; rep <= a->reps && !rc; rep++) {
        const int timed = rep < a->reps;
        skv_delta_set_ideal(d, !timed);
        skv_delta_reset_costs(d);
        double tt = 0;
        for (size_t i = 0; i < b->n_seq && !rc; i++) {
            skv_streams_free(&ss[i]);
            double t0 = cli_cpu_now();
            rc = skv_delta_encode(d, b->toks[i], b->seqs[i].T, b->seqs[i].k, b->seqs[i].v,
                                  (size_t)a->chunk, &ss[i]);
            tt += cli_cpu_now() - t0;
        }
        if (timed)
            t->te = tt < t->te ? tt : t->te;
    }
    if (!rc)
        rc = best_decode(d, &bs, cli_cpu_now, &t->td, &t->ok);
    /* stat and ctx streams are independent per (layer, k/v): decode them
     * again on every core, as a GET would (wall clock) */
    t->threads = skv_pool_threads(b->pool);
    if (!rc && lv <= SEQKV_CTX && t->threads > 1) {
        skv_delta *dp;
        if ((rc = skv_delta_create(b->c, (seqkv_level)lv, b->m, b->pool, &dp)) == SKV_OK) {
            rc = best_decode(dp, &bs, cli_now, &t->tp, &t->ok);
            skv_delta_free(dp);
        }
    }
    free(kb);
    free(vb);
    return rc;
}

/* Level lv's line (or JSON object): its size against the ideal code
 * length and the payload, the streams, the speeds and the round trip, and
 * the size of each layer's K and V. */
static void bench_report(const bench_run *b, int lv, const skv_delta *d, const skv_streams *ss,
                         const bench_times *t)
{
    const skv_kvshape *sh = b->sh;
    const double *ideal, *bytes;
    const uint64_t *nsc;
    skv_delta_costs(d, &ideal, &bytes, &nsc);
    double ti = 0, tb = 0;
    uint64_t tn = 0;
    for (int j = 0; j < 2 * sh->layers; j++) {
        ti += ideal[j];
        tb += bytes[j];
        tn += nsc[j];
    }
    size_t nstreams = 0;
    for (size_t i = 0; i < b->n_seq; i++)
        nstreams += ss[i].nstreams;
    /* the coder's own output, without the fixed 64 bytes per stream of
     * header and final rANS states */
    double pbps = 8.0 * (tb - (double)nstreams * (SKV_STREAM_HEADER + 16)) / (double)tn;
    double bps = 8.0 * tb / (double)tn, ibps = ti / (double)tn;
    const double tot_tok = (double)b->tot_tok;
    if (b->a->json) {
        printf("{\"level\":\"%s\",\"dtype\":\"%s\",\"bits_per_scalar\":%.4f,\"ideal_bits_per_scalar\":%.4f,"
               "\"payload_bits_per_scalar\":%.4f,\"streams\":%zu,\"encode_msps\":%.2f,\"decode_msps\":%.2f,\"encode_tokens_per_s\":%.0f,"
               "\"decode_tokens_per_s\":%.0f,\"decode_msps_all_cores\":%.2f,\"roundtrip\":\"%s\",\"per_layer\":[",
               seqkv_level_name((seqkv_level)lv), skv_dtype_name(sh->dtype), bps, ibps, pbps, nstreams,
               (double)tn / t->te / 1e6, (double)tn / t->td / 1e6, tot_tok / t->te,
               tot_tok / t->td, t->tp > 0 ? (double)tn / t->tp / 1e6 : 0.0, t->ok ? "ok" : "MISMATCH");
        for (int j = 0; j < 2 * sh->layers; j++)
            printf("%s{\"layer\":%d,\"kv\":\"%s\",\"bits_per_scalar\":%.4f,\"ideal_bits_per_scalar\":%.4f}",
                   j ? "," : "", j / 2, j & 1 ? "v" : "k", 8.0 * bytes[j] / (double)nsc[j],
                   ideal[j] / (double)nsc[j]);
        printf("]}\n");
    } else {
        printf("%-15s %7.3f bits/scalar (%.2fx), ideal %.3f; payload %.3f (%+.2f%% of ideal) + %zu stream "
               "headers; encode %.1f M/s, decode %.1f M/s (%.0f / %.0f tokens/s); round trip %s\n",
               seqkv_level_name((seqkv_level)lv), bps, 8.0 * b->es / bps, ibps, pbps, 100.0 * (pbps / ibps - 1),
               nstreams,
               (double)tn / t->te / 1e6, (double)tn / t->td / 1e6, tot_tok / t->te,
               tot_tok / t->td, t->ok ? "ok" : "MISMATCH");
        if (t->tp > 0)
            printf("    decode on %d threads (layers in parallel): %.1f M/s\n", t->threads, (double)tn / t->tp / 1e6);
        printf("    per layer k/v:");
        for (int j = 0; j < 2 * sh->layers; j++)
            printf(" L%d%s %.2f", j / 2, j & 1 ? "v" : "k", 8.0 * bytes[j] / (double)nsc[j]);
        printf("\n");
    }
}

/* Level lv measured and reported; a round trip that differs is an error. */
static int bench_level(const bench_run *b, int lv)
{
    skv_delta *d;
    int rc = skv_delta_create(b->c, (seqkv_level)lv, b->m, NULL, &d);
    if (rc)
        return rc;
    skv_streams *ss = calloc(b->n_seq, sizeof *ss);
    bench_times t;
    rc = bench_time(b, lv, d, ss, &t);
    if (!rc) {
        bench_report(b, lv, d, ss, &t);
        if (!t.ok)
            rc = skv_error(SKV_ERR_CORRUPT, "round trip mismatch at level %s", seqkv_level_name((seqkv_level)lv));
    }
    for (size_t i = 0; i < b->n_seq && ss; i++)
        skv_streams_free(&ss[i]);
    free(ss);
    skv_delta_free(d);
    return rc;
}

static int bench_lossy(const cargs *a);

static int do_bench(int argc, char **argv)
{
    cargs a;
    int r = cparse("codec bench", argc, argv, &a, bench_usage,
                   A(O_CALIB) | A(O_TEST) | A(O_MODEL) | A(O_LEVEL) | A(O_JSON) | A(O_CHUNK) | A(O_CAL) |
                       A(O_REPS) | A(O_SINK) | A(O_RECENT) | A(O_NOZSTD));
    if (r)
        return r;
    if (a.level && a.level[0] == 'q')
        return bench_lossy(&a);
    if (a.sink != 4 || a.recent)
        return cli_usage_error("codec bench", "--sink and --recent apply to the lossy levels (q4, q3, q2)");
    if ((!a.calib && !a.cal) || !a.test)
        return cli_usage_error("codec bench", "--calib (or --cal) and --test are required");
    int want[SEQKV_LEVELS] = {0, 1, 1, 1, 1, 1}; /* (raw has no predictor) */
    if ((r = bench_levels(a.level, want)))
        return r;
    bench_run b = {.a = &a};
    if ((r = open_model(a.model, &b.m)))
        return r;
    skv_pool_create(&b.pool, 0);
    int rc = SKV_OK;
    double tc = cli_now();
    if (a.cal) {
        rc = skv_calib_load(a.cal, &b.c);
        r = rc ? cli_fail(rc, a.cal) : 0;
    } else {
        /* fast alone needs only the shape: no model passes (spec, full) */
        const int fast_only = want[SEQKV_FAST] && !want[SEQKV_STAT] && !want[SEQKV_CTX] &&
                              !want[SEQKV_SPEC] && !want[SEQKV_FULL];
        r = learn(a.calib, fast_only ? NULL : b.m, b.pool, a.json, &a, &b.c);
    }
    if (r) {
        skv_pool_free(b.pool);
        skv_model_free(b.m);
        return r;
    }
    tc = cli_now() - tc;
    skv_st *st = NULL;
    rc = skv_st_open(a.test, &st);
    if (!rc)
        rc = skv_kvfile_count(st, &b.n_seq);
    if (rc) {
        skv_calib_free(b.c);
        skv_pool_free(b.pool);
        skv_model_free(b.m);
        return cli_fail(rc, a.test);
    }
    b.sh = skv_calib_shape(b.c);
    b.es = skv_dtype_size(b.sh->dtype);
    rc = bench_gather(&b, st);
    if (!a.json && !rc)
        printf("codec bench: %zu test sequences, %zu tokens, %zu scalars of %s; calibration %.1f s\n",
               b.n_seq, b.tot_tok, b.tot_sc, skv_dtype_name(b.sh->dtype), tc);
    if (!rc)
        rc = bench_baselines(&b, want[SEQKV_FAST]);
    for (int lv = SEQKV_STAT; lv <= SEQKV_FULL && !rc; lv++) {
        if (!want[lv])
            continue;
        if (!skv_calib_has_level(b.c, (seqkv_level)lv)) {
            if (!a.json)
                printf("%-15s (not calibrated%s)\n", seqkv_level_name((seqkv_level)lv),
                       lv >= SEQKV_SPEC ? ": give --model" : "");
            continue;
        }
        rc = bench_level(&b, lv);
    }
    for (size_t i = 0; i < b.n_seq; i++)
        free(b.toks ? b.toks[i] : NULL);
    free(b.toks);
    free(b.seqs);
    skv_st_free(st);
    skv_calib_free(b.c);
    skv_pool_free(b.pool);
    skv_model_free(b.m);
    return rc ? cli_fail(rc, "bench") : 0;
}

/* The sequences of a KV file: tokens, K and V as stored. */
typedef struct {
    skv_st *st;
    size_t n;
    seqkv_dtype dt;
    int32_t **tok;
    size_t *len;
    const uint8_t **k, **v;
} kv_set;

static int kv_set_open(const char *path, kv_set *s)
{
    memset(s, 0, sizeof *s);
    int rc = skv_st_open(path, &s->st);
    if (!rc)
        rc = skv_kvfile_count(s->st, &s->n);
    if (!rc && s->n == 0)
        rc = skv_error(SKV_ERR_FORMAT, "no sequences");
    if (rc)
        return rc;
    s->tok = calloc(s->n, sizeof *s->tok);
    s->len = calloc(s->n, sizeof *s->len);
    s->k = calloc(s->n, sizeof *s->k);
    s->v = calloc(s->n, sizeof *s->v);
    if (!s->tok || !s->len || !s->k || !s->v)
        return SKV_ERR_NOMEM;
    for (size_t i = 0; i < s->n && !rc; i++) {
        skv_kvseq q;
        rc = skv_kvfile_get(s->st, i, &q);
        if (rc)
            break;
        if (i && q.dtype != s->dt)
            return skv_error(SKV_ERR_SHAPE, "sequence %zu has another dtype", i);
        s->dt = q.dtype;
        s->len[i] = q.T;
        s->k[i] = q.k;
        s->v[i] = q.v;
        s->tok[i] = malloc((q.T + 1) * sizeof(int32_t));
        if (!s->tok[i])
            return SKV_ERR_NOMEM;
        for (size_t t = 0; t < q.T; t++)
            s->tok[i][t] = (int32_t)skv_load32_le((const uint8_t *)q.tokens + 4 * t);
    }
    return rc;
}

static void kv_set_free(kv_set *s)
{
    for (size_t i = 0; s->tok && i < s->n; i++)
        free(s->tok[i]);
    free(s->tok), free(s->len), free(s->k), free(s->v);
    skv_st_free(s->st);
}

/* codec bench --level q4,q3,q2 (cli/lossy_bench.c) */
static int bench_lossy(const cargs *a)
{
    lossy_bench_in in = {.sink = (int)a->sink, .recent = (int)a->recent, .json = a->json, .quiet = a->json};
    char buf[64];
    if (strlen(a->level) >= sizeof buf)
        return cli_usage_error("codec bench", "--level wants q4, q3, q2 or a comma-separated list of them");
    strcpy(buf, a->level);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        const int b = skv_lossy_level_parse(t);
        if (!b)
            return cli_usage_error("codec bench", "'%s' is not a lossy level (q4, q3, q2)", t);
        in.want[b] = 1;
    }
    if (!a->calib || !a->test || !a->model)
        return cli_usage_error("codec bench", "the lossy levels need --calib, --test and --model");
    if (a->cal)
        return cli_usage_error("codec bench", "--cal applies to the exact levels");
    skv_model *m = NULL;
    int r = open_model(a->model, &m);
    if (r)
        return r;
    kv_set cal, test;
    int rc = kv_set_open(a->calib, &cal);
    if (rc) {
        kv_set_free(&cal);
        skv_model_free(m);
        return cli_fail(rc, a->calib);
    }
    rc = kv_set_open(a->test, &test);
    if (rc) {
        kv_set_free(&cal);
        kv_set_free(&test);
        skv_model_free(m);
        return cli_fail(rc, a->test);
    }
    skv_pool *pool = NULL;
    skv_pool_create(&pool, 0);
    in.m = m;
    in.pool = pool;
    in.dt = test.dt;
    in.n_cal = cal.n;
    in.cal_tok = (const int32_t *const *)cal.tok;
    in.cal_len = cal.len;
    in.n_test = test.n;
    in.test_tok = (const int32_t *const *)test.tok;
    in.test_len = test.len;
    in.test_k = test.k;
    in.test_v = test.v;
    rc = lossy_bench_run(&in, stdout);
    skv_pool_free(pool);
    kv_set_free(&cal);
    kv_set_free(&test);
    skv_model_free(m);
    return rc ? cli_fail(rc, "lossy bench") : 0;
}

int cmd_codec(int argc, char **argv)
{
    static const cli_sub subs[] = {
        {"calibrate", do_calibrate},
        {"encode", do_encode},
        {"decode", do_decode},
        {"bench", do_bench},
    };
    return cli_dispatch("codec", codec_usage, subs, sizeof subs / sizeof subs[0], argc, argv);
}
