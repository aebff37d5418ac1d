/* seqkv model info|greedy|sample|kv|convert */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static const char model_usage[] =
    "usage: seqkv model <info|greedy|sample|kv|convert> --model PATH [options]\n"
    "\n"
    "PATH is a llama2.c checkpoint (.bin) or a Hugging Face directory with\n"
    "config.json and model.safetensors (llama, qwen2, qwen3).\n"
    "Run 'seqkv model <subcommand> --help' for each one's options.\n";

static const char info_usage[] =
    "usage: seqkv model info --model PATH [--json]\n"
    "\n"
    "Print the model's shape, RoPE settings, parameter count, KV scalars per\n"
    "token and fingerprint (BLAKE2b-128 of config and weights).\n";

static const char greedy_usage[] =
    "usage: seqkv model greedy --model PATH [--steps N] [--threads N]\n"
    "\n"
    "Greedy (argmax) decoding after BOS; prints the N generated ids (default\n"
    "256) on one line, space-separated.\n";

static const char sample_usage[] =
    "usage: seqkv model sample --model PATH --n-seq N --len T --seed S\n"
    "                          [--temp 1.0] [--top-p 0.9] [--threads N]\n"
    "\n"
    "Sample N sequences of T tokens each (BOS included) and print one per\n"
    "line. Sequence i draws from its own RNG stream derived from S and i, so\n"
    "it does not depend on --n-seq. --temp 0 is greedy.\n";

static const char kv_usage[] =
    "usage: seqkv model kv --model PATH --tokens FILE --dtype bf16|fp16|fp8|fp32\n"
    "                      --out OUT.safetensors [--threads N] [--quiet]\n"
    "\n"
    "Run a prefill over each token sequence of FILE (one sequence of\n"
    "whitespace-separated ids per line; '-' reads stdin) and write their KV\n"
    "caches in the seqkv KV file layout: seq{i}.tokens I32 [T], seq{i}.k and\n"
    "seq{i}.v [layers, T, kv_heads, head_dim] in the chosen dtype (K after\n"
    "RoPE). Progress goes to stderr.\n";

static const char convert_usage[] =
    "usage: seqkv model convert --model PATH --out DIR [--dtype fp32|bf16|fp16]\n"
    "\n"
    "Write the model as a Hugging Face llama-family checkpoint: DIR/config.json\n"
    "and DIR/model.safetensors (weights in fp32 by default: exact). llama2.c\n"
    "checkpoints get their q/k rows permuted to the HF RoPE layout, as HF's\n"
    "converter does: the model computes the same function, and its K channels\n"
    "come out in HF order.\n";

enum { OPT_MODEL = 1000, OPT_STEPS, OPT_THREADS, OPT_NSEQ, OPT_LEN, OPT_SEED, OPT_TEMP, OPT_TOPP,
       OPT_TOKENS, OPT_DTYPE, OPT_OUT, OPT_JSON, OPT_QUIET, OPT_HELP };

static const struct option long_opts[] = {
    {"model", required_argument, NULL, OPT_MODEL},
    {"steps", required_argument, NULL, OPT_STEPS},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"n-seq", required_argument, NULL, OPT_NSEQ},
    {"len", required_argument, NULL, OPT_LEN},
    {"seed", required_argument, NULL, OPT_SEED},
    {"temp", required_argument, NULL, OPT_TEMP},
    {"top-p", required_argument, NULL, OPT_TOPP},
    {"tokens", required_argument, NULL, OPT_TOKENS},
    {"dtype", required_argument, NULL, OPT_DTYPE},
    {"out", required_argument, NULL, OPT_OUT},
    {"json", no_argument, NULL, OPT_JSON},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

typedef struct {
    const char *model, *tokens, *out, *dtype;
    long steps, threads, n_seq, len, seed;
    int have_nseq, have_len, have_seed, json, quiet;
    float temp, top_p;
    unsigned allowed; /* bitmask of OPT_* - OPT_MODEL */
} args;

#define ALLOW(o) (1u << ((o) - OPT_MODEL))

static int parse(const char *cmd, int argc, char **argv, args *a, const char *usage)
{
    unsigned allowed = a->allowed;
    memset(a, 0, sizeof *a);
    a->allowed = allowed;
    a->steps = 256;
    a->threads = 0;
    a->temp = 1.0f;
    a->top_p = 0.9f;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", long_opts, NULL)) != -1) {
        if (c == 'h' || c == OPT_HELP) {
            fputs(usage, stdout);
            exit(0);
        }
        if (c == '?')
            return cli_usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
        if (c == ':')
            return cli_usage_error(cmd, "option '%s' needs a value", argv[optind - 1]);
        if (!(a->allowed & ALLOW(c)))
            return cli_usage_error(cmd, "option '%s' does not apply here", argv[optind - 1]);
        switch (c) {
        case OPT_MODEL: a->model = optarg; break;
        case OPT_TOKENS: a->tokens = optarg; break;
        case OPT_OUT: a->out = optarg; break;
        case OPT_DTYPE: a->dtype = optarg; break;
        case OPT_JSON: a->json = 1; break;
        case OPT_QUIET: a->quiet = 1; break;
        case OPT_STEPS:
            if (cli_parse_long(optarg, 0, 1 << 24, &a->steps))
                return cli_usage_error(cmd, "--steps wants an integer in [0, 2^24]");
            break;
        case OPT_THREADS:
            if (cli_parse_long(optarg, 1, 256, &a->threads))
                return cli_usage_error(cmd, "--threads wants an integer in [1, 256]");
            break;
        case OPT_NSEQ:
            if (cli_parse_long(optarg, 1, 1 << 24, &a->n_seq))
                return cli_usage_error(cmd, "--n-seq wants a positive integer");
            a->have_nseq = 1;
            break;
        case OPT_LEN:
            if (cli_parse_long(optarg, 1, 1 << 24, &a->len))
                return cli_usage_error(cmd, "--len wants a positive integer");
            a->have_len = 1;
            break;
        case OPT_SEED:
            if (cli_parse_long(optarg, 0, 0x7fffffffffffffffL, &a->seed))
                return cli_usage_error(cmd, "--seed wants a non-negative integer");
            a->have_seed = 1;
            break;
        case OPT_TEMP:
            if (cli_parse_float(optarg, 0.0f, 100.0f, &a->temp))
                return cli_usage_error(cmd, "--temp wants a number in [0, 100]");
            break;
        case OPT_TOPP:
            if (cli_parse_float(optarg, 0.0f, 1.0f, &a->top_p) || !(a->top_p > 0.0f))
                return cli_usage_error(cmd, "--top-p wants a number in (0, 1]");
            break;
        }
    }
    if (optind < argc)
        return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
    if (!a->model)
        return cli_usage_error(cmd, "--model PATH is required");
    return 0;
}

static int load(const char *path, skv_model **m)
{
    int rc = skv_model_load(path, m);
    return rc ? cli_fail(rc, path) : 0;
}

static int pool_for(long threads, skv_pool **pool)
{
    int rc = skv_pool_create(pool, (int)threads);
    return rc ? cli_fail(rc, "threads") : 0;
}

static const char *arch_name(skv_arch a)
{
    return a == SKV_ARCH_QWEN2 ? "qwen2" : a == SKV_ARCH_QWEN3 ? "qwen3" : "llama";
}

static int do_info(int argc, char **argv)
{
    args a;
    memset(&a, 0, sizeof a);
    a.allowed = ALLOW(OPT_MODEL) | ALLOW(OPT_JSON);
    int r = parse("model info", argc, argv, &a, info_usage);
    if (r)
        return r;
    skv_model *m;
    if ((r = load(a.model, &m)))
        return r;
    const skv_model_config *c = skv_model_cfg(m);
    if (a.json) {
        printf("{\"arch\":\"%s\",\"dim\":%d,\"hidden_dim\":%d,\"layers\":%d,\"heads\":%d,"
               "\"kv_heads\":%d,\"head_dim\":%d,\"vocab\":%d,\"max_seq\":%d,\"rope_theta\":%.9g,"
               "\"rope_dim\":%d,\"rope_layout\":\"%s\",\"norm_eps\":%.9g,\"tied\":%s,"
               "\"params\":%zu,\"kv_scalars_per_token\":%zu,\"fingerprint\":\"%s\"}\n",
               arch_name(c->arch), c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads,
               c->head_dim, c->vocab_size, c->max_seq, (double)c->rope_theta, c->rope_dim,
               c->rope_layout == SKV_ROPE_PAIR ? "pair" : "half", (double)c->norm_eps,
               c->tied_embeddings ? "true" : "false", skv_model_params(m),
               skv_model_kv_per_token(m), skv_model_fingerprint(m));
    } else {
        printf("model        %s\n", a.model);
        printf("arch         %s%s%s\n", arch_name(c->arch), c->qkv_bias ? " +qkv-bias" : "",
               c->qk_norm ? " +qk-norm" : "");
        printf("dim          %d (ffn %d)\n", c->dim, c->hidden_dim);
        printf("layers       %d\n", c->n_layers);
        printf("heads        %d query, %d kv, head_dim %d\n", c->n_heads, c->n_kv_heads, c->head_dim);
        printf("vocab        %d (bos %d, %s embeddings)\n", c->vocab_size, c->bos_id,
               c->tied_embeddings ? "tied" : "separate");
        printf("rope         theta %g, %d of %d channels, %s layout\n", (double)c->rope_theta,
               c->rope_dim, c->head_dim, c->rope_layout == SKV_ROPE_PAIR ? "pair" : "half");
        printf("norm eps     %g\n", (double)c->norm_eps);
        printf("max seq      %d\n", c->max_seq);
        printf("params       %zu (%.2f MiB as float32)\n", skv_model_params(m),
               (double)skv_model_weight_bytes(m) / 1048576.0);
        printf("kv/token     %zu scalars\n", skv_model_kv_per_token(m));
        printf("fingerprint  %s\n", skv_model_fingerprint(m));
    }
    skv_model_free(m);
    return 0;
}

static int do_greedy(int argc, char **argv)
{
    args a;
    memset(&a, 0, sizeof a);
    a.allowed = ALLOW(OPT_MODEL) | ALLOW(OPT_STEPS) | ALLOW(OPT_THREADS);
    int r = parse("model greedy", argc, argv, &a, greedy_usage);
    if (r)
        return r;
    skv_model *m;
    skv_pool *pool;
    if ((r = load(a.model, &m)))
        return r;
    if ((r = pool_for(a.threads, &pool))) {
        skv_model_free(m);
        return r;
    }
    size_t total = (size_t)a.steps + 1;
    const int max_pos = skv_model_cfg(m)->max_seq;
    if (total > (size_t)max_pos) {
        skv_pool_free(pool);
        skv_model_free(m);
        return cli_fail(skv_error(SKV_ERR_TOO_LARGE, "--steps %ld needs %zu positions, more than "
                                  "the %d the model takes; use --steps %d or less",
                                  a.steps, total, max_pos, max_pos - 1), "greedy");
    }
    int32_t *out = malloc(total * sizeof *out);
    int32_t bos = skv_model_cfg(m)->bos_id;
    skv_rng rng;
    skv_rng_seed(&rng, 0);
    int rc = out ? skv_model_generate(m, pool, &bos, 1, total, 0.0f, 1.0f, &rng, out)
                 : skv_error(SKV_ERR_NOMEM, "output");
    if (rc == SKV_OK) {
        for (size_t i = 1; i < total; i++)
            printf("%d ", out[i]);
        printf("\n");
    }
    free(out);
    skv_pool_free(pool);
    skv_model_free(m);
    return rc ? cli_fail(rc, "greedy") : 0;
}

static int do_sample(int argc, char **argv)
{
    args a;
    memset(&a, 0, sizeof a);
    a.allowed = ALLOW(OPT_MODEL) | ALLOW(OPT_THREADS) | ALLOW(OPT_NSEQ) | ALLOW(OPT_LEN) |
                ALLOW(OPT_SEED) | ALLOW(OPT_TEMP) | ALLOW(OPT_TOPP);
    int r = parse("model sample", argc, argv, &a, sample_usage);
    if (r)
        return r;
    if (!a.have_nseq || !a.have_len || !a.have_seed)
        return cli_usage_error("model sample", "--n-seq, --len and --seed are required");
    skv_model *m;
    skv_pool *pool;
    if ((r = load(a.model, &m)))
        return r;
    if ((r = pool_for(a.threads, &pool))) {
        skv_model_free(m);
        return r;
    }
    const int max_pos = skv_model_cfg(m)->max_seq;
    if (a.len > max_pos) {
        skv_pool_free(pool);
        skv_model_free(m);
        return cli_fail(skv_error(SKV_ERR_TOO_LARGE, "--len %ld is more than the %d positions "
                                  "the model takes; use --len %d or less", a.len, max_pos,
                                  max_pos), "sample");
    }
    int32_t *out = malloc((size_t)a.len * sizeof *out);
    int32_t bos = skv_model_cfg(m)->bos_id;
    int rc = out ? SKV_OK : skv_error(SKV_ERR_NOMEM, "output");
    for (long i = 0; rc == SKV_OK && i < a.n_seq; i++) {
        skv_rng rng;
        skv_rng_seed(&rng, (uint64_t)a.seed ^ ((uint64_t)i * 0x9e3779b97f4a7c15ull));
        rc = skv_model_generate(m, pool, &bos, 1, (size_t)a.len, a.temp, a.top_p, &rng, out);
        if (rc == SKV_OK) {
            for (long t = 0; t < a.len; t++)
                printf(t ? " %d" : "%d", out[t]);
            printf("\n");
        }
    }
    free(out);
    skv_pool_free(pool);
    skv_model_free(m);
    return rc ? cli_fail(rc, "sample") : 0;
}

static int do_kv(int argc, char **argv)
{
    args a;
    memset(&a, 0, sizeof a);
    a.allowed = ALLOW(OPT_MODEL) | ALLOW(OPT_THREADS) | ALLOW(OPT_TOKENS) | ALLOW(OPT_DTYPE) |
                ALLOW(OPT_OUT) | ALLOW(OPT_QUIET);
    int r = parse("model kv", argc, argv, &a, kv_usage);
    if (r)
        return r;
    if (!a.tokens || !a.out || !a.dtype)
        return cli_usage_error("model kv", "--tokens, --dtype and --out are required");
    seqkv_dtype dt;
    if (skv_dtype_from_user(a.dtype, &dt) != SKV_OK || dt == SEQKV_DT_I32)
        return cli_usage_error("model kv", "--dtype wants bf16, fp16, fp8 or fp32");
    skv_model *m;
    skv_pool *pool;
    if ((r = load(a.model, &m)))
        return r;
    const skv_model_config *c = skv_model_cfg(m);
    cli_tokens toks;
    int rc = cli_tokens_read(a.tokens, c->vocab_size, &toks);
    if (rc == SKV_OK && (rc = cli_tokens_fit(&toks, a.tokens, c->max_seq)))
        cli_tokens_free(&toks);
    if (rc) {
        skv_model_free(m);
        return cli_fail(rc, a.tokens);
    }
    if ((r = pool_for(a.threads, &pool))) {
        cli_tokens_free(&toks);
        skv_model_free(m);
        return r;
    }
    size_t total = 0, longest = 0;
    for (size_t i = 0; i < toks.n; i++) {
        total += toks.len[i];
        if (toks.len[i] > longest)
            longest = toks.len[i];
    }
    const size_t per_tok = skv_model_kv_per_token(m) / 2, es = skv_dtype_size(dt);
    skv_st_writer *w = NULL;
    skv_kvcache *cache = NULL;
    uint8_t *kb = malloc(longest * per_tok * es), *vb = malloc(longest * per_tok * es);
    if (!kb || !vb)
        rc = skv_error(SKV_ERR_NOMEM, "KV buffers for %zu tokens", longest);
    if (rc == SKV_OK)
        rc = skv_stw_create(&w);
    if (rc == SKV_OK)
        rc = skv_kvcache_create(c, longest, &cache);
    const int show = !a.quiet && total >= 2048;
    const int tty = isatty(2);
    double t0 = cli_now(), last = t0;
    size_t done_tok = 0;
    for (size_t i = 0; rc == SKV_OK && i < toks.n; i++) {
        skv_kvcache_truncate(cache, 0);
        skv_forward_opts o = {.pool = pool};
        rc = skv_model_forward(m, cache, toks.seq[i], toks.len[i], &o);
        if (rc == SKV_OK)
            rc = skv_kvcache_export(cache, 0, toks.len[i], dt, kb, vb);
        if (rc == SKV_OK) {
            skv_kvseq s = {toks.len[i], toks.seq[i], dt, c->n_layers, c->n_kv_heads, c->head_dim, kb, vb};
            rc = skv_kvfile_add(w, i, &s);
        }
        done_tok += toks.len[i];
        double now = cli_now();
        if (show && rc == SKV_OK && (now - last > 1.0 || i + 1 == toks.n)) {
            fprintf(stderr, "%skv: %zu/%zu sequences, %zu/%zu tokens, %.0f tokens/s%s",
                    tty ? "\r" : "", i + 1, toks.n, done_tok, total, (double)done_tok / (now - t0),
                    tty ? "" : "\n");
            last = now;
        }
    }
    if (show && tty)
        fputc('\n', stderr);
    if (rc == SKV_OK) {
        char buf[64];
        rc = skv_stw_meta(w, "seqkv.kind", "kv");
        if (!rc)
            rc = skv_stw_meta(w, "seqkv.model", skv_model_fingerprint(m));
        char mname[64]; /* what put --kv names its profile after */
        cli_name_from_path(a.model, mname);
        if (!rc)
            rc = skv_stw_meta(w, "seqkv.model_name", mname);
        snprintf(buf, sizeof buf, "%s", skv_dtype_name(dt));
        if (!rc)
            rc = skv_stw_meta(w, "seqkv.dtype", buf);
        snprintf(buf, sizeof buf, "%s", c->rope_layout == SKV_ROPE_PAIR ? "pair" : "half");
        if (!rc)
            rc = skv_stw_meta(w, "seqkv.rope_layout", buf);
        snprintf(buf, sizeof buf, "%.9g", (double)c->rope_theta);
        if (!rc)
            rc = skv_stw_meta(w, "seqkv.rope_theta", buf);
        snprintf(buf, sizeof buf, "%d", c->rope_dim);
        if (!rc)
            rc = skv_stw_meta(w, "seqkv.rope_dim", buf);
        snprintf(buf, sizeof buf, "%d", c->vocab_size);
        if (!rc)
            rc = skv_stw_meta(w, "seqkv.vocab", buf);
        if (!rc)
            rc = skv_stw_write(w, a.out);
    }
    double secs = cli_now() - t0;
    if (rc == SKV_OK && !a.quiet)
        fprintf(stderr,
                "kv: wrote %zu sequences, %zu tokens, %zu KV scalars (%.2f MiB %s) to %s in %.2f s "
                "(%.0f tokens/s, %d threads)\n",
                toks.n, total, total * per_tok * 2, (double)(total * per_tok * 2 * es) / 1048576.0,
                skv_dtype_name(dt), a.out, secs, (double)total / (secs > 0 ? secs : 1e-9),
                skv_pool_threads(pool));
    free(kb);
    free(vb);
    skv_kvcache_free(cache);
    skv_stw_free(w);
    skv_pool_free(pool);
    cli_tokens_free(&toks);
    skv_model_free(m);
    return rc ? cli_fail(rc, "kv") : 0;
}

static int do_convert(int argc, char **argv)
{
    args a;
    memset(&a, 0, sizeof a);
    a.allowed = ALLOW(OPT_MODEL) | ALLOW(OPT_OUT) | ALLOW(OPT_DTYPE);
    int r = parse("model convert", argc, argv, &a, convert_usage);
    if (r)
        return r;
    if (!a.out)
        return cli_usage_error("model convert", "--out DIR is required");
    seqkv_dtype dt = SEQKV_DT_F32;
    if (a.dtype && (skv_dtype_from_user(a.dtype, &dt) != SKV_OK ||
                    (dt != SEQKV_DT_F32 && dt != SEQKV_DT_BF16 && dt != SEQKV_DT_F16)))
        return cli_usage_error("model convert", "--dtype wants fp32, bf16 or fp16");
    skv_model *m;
    if ((r = load(a.model, &m)))
        return r;
    int rc = skv_model_save_hf(m, a.out, dt);
    if (rc == SKV_OK)
        fprintf(stderr, "convert: wrote %s/config.json and %s/model.safetensors (%s weights)\n",
                a.out, a.out, skv_dtype_name(dt));
    skv_model_free(m);
    return rc ? cli_fail(rc, "convert") : 0;
}

int cmd_model(int argc, char **argv)
{
    static const cli_sub subs[] = {
        {"info", do_info},
        {"greedy", do_greedy},
        {"sample", do_sample},
        {"kv", do_kv},
        {"convert", do_convert},
    };
    return cli_dispatch("model", model_usage, subs, sizeof subs / sizeof subs[0], argc, argv);
}
