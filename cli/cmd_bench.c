/* seqkv bench store: a multi-tenant chat workload made with the real model,
 * stored at every level with and without the probabilistic trie, against
 * raw bf16 per request and 256-token exact-chunk dedup of raw chunks. */
#include <getopt.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "seqkv.h"
#include "skv_delta.h"

static const char bench_usage[] =
    "usage: seqkv bench store --model PATH [--json] [--tenants N] [--sessions N]\n"
    "                         [--turns N] [--levels raw,stat,ctx,spec,full] [--chunk N]\n"
    "                         [--seed S] [--threads N] [--keep DIR] [--no-content-index]\n"
    "\n"
    "A multi-tenant chat workload made with the model: per tenant a system\n"
    "prompt of 64-256 sampled tokens, sessions of --turns turns (each turn's\n"
    "prompt extends the previous one by 24-72 tokens), and every fourth\n"
    "session a near-duplicate of an earlier one that differs in one early\n"
    "token. Every request is LOOKUP, PUT, then GET of the whole prompt (checked\n"
    "bit-exact against the model's KV). Reported per level, with and without\n"
    "the probabilistic trie: bytes stored against (a) raw bf16 per request\n"
    "and (b) exact 256-token chunk dedup with raw chunks (LMCache-style), the\n"
    "near-duplicate members' bytes coded against their centroid vs alone, and\n"
    "PUT / LOOKUP / GET rates. Defaults: 8 tenants x 32 sessions x 4 turns.\n"
    "Calibration: 32 separately sampled sequences of 256 tokens. With\n"
    "--no-content-index, centroids come from the prefix rule alone (the content\n"
    "index's cost and gain: run both, compare). The content index's memory a\n"
    "record is printed with each configuration that keeps one.\n";

typedef struct {
    const char *model, *levels, *keep;
    long tenants, sessions, turns, chunk, seed, threads;
    int json, no_cx;
} bargs;

enum { B_MODEL = 3000, B_JSON, B_TEN, B_SES, B_TURNS, B_LEVELS, B_CHUNK, B_SEED, B_THREADS,
       B_KEEP, B_HELP, B_NOCX };

static int bparse(int argc, char **argv, bargs *a)
{
    static const struct option o[] = {
        {"model", required_argument, NULL, B_MODEL},   {"json", no_argument, NULL, B_JSON},
        {"tenants", required_argument, NULL, B_TEN},   {"sessions", required_argument, NULL, B_SES},
        {"turns", required_argument, NULL, B_TURNS},   {"levels", required_argument, NULL, B_LEVELS},
        {"chunk", required_argument, NULL, B_CHUNK},   {"seed", required_argument, NULL, B_SEED},
        {"threads", required_argument, NULL, B_THREADS}, {"keep", required_argument, NULL, B_KEEP},
        {"help", no_argument, NULL, B_HELP},           {"no-content-index", no_argument, NULL, B_NOCX},
        {NULL, 0, NULL, 0},
    };
    memset(a, 0, sizeof *a);
    a->tenants = 8;
    a->sessions = 32;
    a->turns = 4;
    a->chunk = 256;
    a->seed = 1;
    a->threads = 1;
    a->levels = "raw,stat,ctx,spec,full";
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", o, NULL)) != -1) {
        long *num = NULL, lo = 1, hi = 1 << 20;
        switch (c) {
        case 'h':
        case B_HELP: fputs(bench_usage, stdout); exit(0);
        case '?': return cli_usage_error("bench store", "unknown option '%s'", argv[optind - 1]);
        case ':': return cli_usage_error("bench store", "option '%s' needs a value", argv[optind - 1]);
        case B_MODEL: a->model = optarg; break;
        case B_JSON: a->json = 1; break;
        case B_LEVELS: a->levels = optarg; break;
        case B_KEEP: a->keep = optarg; break;
        case B_NOCX: a->no_cx = 1; break;
        case B_TEN: num = &a->tenants, hi = 1024; break;
        case B_SES: num = &a->sessions, hi = 4096; break;
        case B_TURNS: num = &a->turns, hi = 16; break;
        case B_CHUNK: num = &a->chunk, hi = SEQKV_CHUNK_MAX; break;
        case B_SEED: num = &a->seed, lo = 0, hi = 1L << 40; break;
        case B_THREADS: num = &a->threads, hi = 256; break;
        }
        if (num && cli_parse_long(optarg, lo, hi, num))
            return cli_usage_error("bench store", "'%s' wants an integer in [%ld, %ld]",
                                   argv[optind - 2], lo, hi);
    }
    if (optind < argc)
        return cli_usage_error("bench store", "unexpected argument '%s'", argv[optind]);
    if (!a->model)
        return cli_usage_error("bench store", "--model is required");
    return 0;
}

static int make_calib(const skv_model *m, skv_pool *pool, long seed, const char *path)
{
    const skv_model_config *c = skv_model_cfg(m);
    skv_st_writer *w;
    int rc = skv_stw_create(&w);
    if (rc)
        return rc;
    skv_rng r;
    skv_rng_seed(&r, (uint64_t)seed + 1000003);
    int32_t tok[256], bos = c->bos_id;
    for (size_t i = 0; i < 32 && !rc; i++) {
        uint8_t *k = NULL, *v = NULL;
        rc = skv_model_generate(m, pool, &bos, 1, 256, 1.0f, 0.9f, &r, tok);
        if (!rc)
            rc = cli_compute_kv(m, pool, tok, 256, &k, &v);
        if (!rc) {
            skv_kvseq q = {256, tok, SEQKV_DT_BF16, c->n_layers, c->n_kv_heads, c->head_dim, k, v};
            rc = skv_kvfile_add(w, i, &q);
        }
        free(k);
        free(v);
    }
    skv_calib *cal = NULL;
    if (!rc)
        rc = cli_calib_learn_writer(w, m, pool, &cal);
    if (!rc)
        rc = skv_calib_save(cal, path);
    skv_calib_free(cal);
    skv_stw_free(w);
    return rc;
}

typedef struct {
    seqkv_level level;
    int centroids;
    seqkv_stats st;
    uint64_t member_bytes, member_tokens, centroid_tokens;
    double put_s, lookup_s, get_s;
    size_t requests, get_tokens, put_tokens;
} run_res;

static int run_config(const bargs *a, const char *dir, const char *cal_path, cli_session *S,
                      size_t ns, const skv_model_config *mc, run_res *rr)
{
    seqkv_options o = {0};
    o.quiet = 1;
    o.no_centroids = !rr->centroids;
    o.no_content_index = a->no_cx;
    o.threads = (int)a->threads;
    seqkv *db;
    int rc = seqkv_open(dir, &o, &db);
    if (rc)
        return rc;
    seqkv_profile p = SEQKV_PROFILE_INIT;
    memset(&p, 0, sizeof p);
    snprintf(p.name, sizeof p.name, "bench");
    snprintf(p.model, sizeof p.model, "%s", a->model);
    p.dtype = SEQKV_DT_BF16;
    p.chunk = (int)a->chunk;
    p.level = rr->level;
    rc = seqkv_profile_set(db, &p);
    if (!rc && seqkv_level_predictive(rr->level))
        rc = seqkv_calibrate_import(db, "bench", cal_path);
    const size_t L = (size_t)mc->n_layers, row = (size_t)mc->n_kv_heads * (size_t)mc->head_dim * 2;
    size_t maxn = 0;
    for (size_t i = 0; i < ns; i++)
        maxn = S[i].n > maxn ? S[i].n : maxn;
    uint8_t *kv = malloc(L * 2 * maxn * row), *got = malloc(L * 2 * maxn * row);
    if (!rc && (!kv || !got))
        rc = skv_error(SKV_ERR_NOMEM, "bench buffers");
    const size_t total = ns * (size_t)a->turns;
    for (long k = 0; k < a->turns && !rc; k++)
        for (size_t i = 0; i < ns && !rc; i++) {
            cli_session *s = &S[i];
            char tn[32];
            snprintf(tn, sizeof tn, "tenant%d", s->tenant);
            size_t n = s->turn_end[k], m, g;
            cli_session_layout(s, L, row, n, kv);
            double t0 = cli_now();
            rc = seqkv_lookup(db, tn, "bench", s->tok, n, &m);
            if (rc == SKV_ERR_NOT_FOUND && k == 0)
                rc = SKV_OK; /* a tenant's first request */
            double t1 = cli_now();
            seqkv_put_result res;
            if (!rc)
                rc = seqkv_put(db, tn, "bench", s->tok, n, kv, L * 2 * n * row, NULL, &res);
            double t2 = cli_now();
            if (!rc)
                rc = seqkv_get(db, tn, "bench", s->tok, n, &(seqkv_get_opts){.want = n}, got, L * 2 * n * row, &g);
            double t3 = cli_now();
            if (!rc && (g != n || memcmp(got, kv, L * 2 * n * row) != 0))
                rc = skv_error(SKV_ERR_CORRUPT, "GET returned other bytes than the PUT (level %s)",
                               seqkv_level_name(rr->level));
            rr->lookup_s += t1 - t0;
            rr->put_s += t2 - t1;
            rr->get_s += t3 - t2;
            rr->requests++;
            rr->get_tokens += n;
            rr->put_tokens += n;
            if (!rc && s->dup) {
                rr->member_bytes += res.bytes;
                rr->member_tokens += res.new_tokens;
            }
            if (!rc)
                rr->centroid_tokens += res.centroid_tokens;
            if (!a->json || isatty(2)) {
                char what[64];
                snprintf(what, sizeof what, "bench store: %s%s requests", seqkv_level_name(rr->level),
                         rr->centroids ? "+trie" : "");
                cli_progress(what, rr->requests, total);
            }
        }
    if (!rc)
        rc = seqkv_stat(db, NULL, &rr->st);
    free(kv);
    free(got);
    seqkv_close(db);
    return rc;
}

static int rm_tree(const char *dir)
{
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd);
}

/* --levels (comma-separated level names) into levels[0..*nl) */
static int parse_levels(const char *arg, int *levels, int *nl)
{
    char lv[128];
    snprintf(lv, sizeof lv, "%s", arg);
    *nl = 0;
    for (char *tok = strtok(lv, ","); tok; tok = strtok(NULL, ",")) {
        seqkv_level l;
        if (seqkv_level_parse(tok, &l) || *nl == SEQKV_LEVELS)
            return cli_usage_error("bench store", "--levels: unknown or repeated level '%s'", tok);
        levels[(*nl)++] = (int)l;
    }
    return 0;
}

/* The baselines, from the request stream itself: every request's KV raw,
 * and 256-token chunks stored raw once each */
typedef struct {
    uint64_t raw_req, req_tokens, chunk_bytes;
} baselines;

static int make_baselines(const bargs *a, const cli_session *S, size_t ns, size_t per_tok, baselines *b)
{
    int rc = SKV_OK;
    size_t cap = 1 << 16, nkeys = 0;
    uint8_t(*keys)[16] = malloc(cap * 16);
    if (!keys)
        rc = skv_error(SKV_ERR_NOMEM, "chunk keys");
    for (long k = 0; k < a->turns && !rc; k++)
        for (size_t i = 0; i < ns && !rc; i++) {
            const cli_session *s = &S[i];
            size_t n = s->turn_end[k];
            b->raw_req += n * per_tok;
            b->req_tokens += n;
            /* 256-token chunks keyed by (tenant, prefix through the chunk);
             * the last, partial one too */
            for (size_t c0 = 0; c0 < n; c0 += 256) {
                size_t c1 = c0 + 256 < n ? c0 + 256 : n;
                uint8_t key[16];
                crypto_generichash_state h;
                crypto_generichash_init(&h, NULL, 0, 16);
                crypto_generichash_update(&h, (const uint8_t *)&s->tenant, sizeof s->tenant);
                crypto_generichash_update(&h, (const uint8_t *)s->tok, c1 * 4);
                crypto_generichash_final(&h, key, 16);
                size_t j = 0;
                while (j < nkeys && memcmp(keys[j], key, 16) != 0)
                    j++;
                if (j == nkeys) {
                    if (nkeys == cap) {
                        uint8_t(*more)[16] = realloc(keys, cap * 2 * 16);
                        if (!more) {
                            rc = skv_error(SKV_ERR_NOMEM, "chunk keys");
                            break;
                        }
                        keys = more;
                        cap *= 2;
                    }
                    memcpy(keys[nkeys++], key, 16);
                    b->chunk_bytes += (c1 - c0) * per_tok;
                }
            }
        }
    free(keys);
    return rc;
}

/* The workload's line and the baselines' (the table's head) */
static void report_baselines(const bargs *a, size_t ns, const baselines *b)
{
    if (a->json) {
        printf("{\"kind\":\"workload\",\"tenants\":%ld,\"sessions\":%ld,\"turns\":%ld,\"requests\":%llu,"
               "\"request_tokens\":%llu,\"chunk\":%ld}\n",
               a->tenants, a->sessions, a->turns, (unsigned long long)(ns * (size_t)a->turns),
               (unsigned long long)b->req_tokens, a->chunk);
        printf("{\"kind\":\"baseline\",\"name\":\"raw_bf16_per_request\",\"bytes\":%llu}\n",
               (unsigned long long)b->raw_req);
        printf("{\"kind\":\"baseline\",\"name\":\"chunk256_exact_dedup_raw\",\"bytes\":%llu,"
               "\"ratio_vs_raw\":%.3f}\n",
               (unsigned long long)b->chunk_bytes, (double)b->raw_req / (double)b->chunk_bytes);
    } else {
        printf("workload: %ld tenants x %ld sessions x %ld turns = %zu requests, %llu request tokens "
               "(every 4th session a one-token near-duplicate)\n",
               a->tenants, a->sessions, a->turns, ns * (size_t)a->turns, (unsigned long long)b->req_tokens);
        printf("%-28s %14s %9s %9s %8s %9s %9s %9s\n", "store", "bytes", "x raw", "x chunk",
               "bits/sc", "put/s", "lookup/s", "get/s");
        printf("%-28s %14llu %9.2f %9s %8.2f\n", "raw bf16 per request", (unsigned long long)b->raw_req,
               1.0, "", 16.0);
        printf("%-28s %14llu %9.2f %9.2f %8.2f\n", "256-token chunk dedup, raw",
               (unsigned long long)b->chunk_bytes, (double)b->raw_req / (double)b->chunk_bytes, 1.0, 16.0);
    }
}

/* One configuration's line: rr, with centroids (cen) or not, against the
 * baselines and (its members' bytes) the same level without centroids, al */
static void report_run(const bargs *a, const run_res *rr, int cen, const run_res *al, const baselines *b,
                       double scalars_per_tok)
{
    const uint64_t raw_req = b->raw_req, chunk_bytes = b->chunk_bytes;
    const double bits = 8.0 * (double)rr->st.stored_bytes / ((double)rr->st.tokens * scalars_per_tok);
    double member_ratio = cen && al->member_bytes ? (double)rr->member_bytes / (double)al->member_bytes : 1.0;
    if (a->json) {
        printf("{\"kind\":\"store\",\"level\":\"%s\",\"centroids\":%s,\"stored_bytes\":%llu,"
               "\"unique_tokens\":%llu,\"chunks\":%llu,\"bits_per_scalar\":%.4f,"
               "\"ratio_vs_raw\":%.3f,\"ratio_vs_chunk_dedup\":%.3f,"
               "\"member_bytes\":%llu,\"member_tokens\":%llu,\"centroid_tokens\":%llu,"
               "\"member_bytes_vs_alone\":%.4f,\"put_per_s\":%.1f,\"lookup_per_s\":%.1f,"
               "\"get_per_s\":%.1f,\"get_tokens_per_s\":%.0f,\"content_chunks\":%llu,"
               "\"content_index_bytes\":%llu,\"roundtrip\":\"ok\"}\n",
               seqkv_level_name(rr->level), cen ? "true" : "false",
               (unsigned long long)rr->st.stored_bytes, (unsigned long long)rr->st.tokens,
               (unsigned long long)rr->st.chunks, bits,
               (double)raw_req / (double)rr->st.stored_bytes,
               (double)chunk_bytes / (double)rr->st.stored_bytes,
               (unsigned long long)rr->member_bytes, (unsigned long long)rr->member_tokens,
               (unsigned long long)rr->centroid_tokens, member_ratio,
               (double)rr->requests / rr->put_s, (double)rr->requests / rr->lookup_s,
               (double)rr->requests / rr->get_s, (double)rr->get_tokens / rr->get_s,
               (unsigned long long)rr->st.content_chunks,
               (unsigned long long)rr->st.content_index_bytes);
    } else {
        char name[64];
        snprintf(name, sizeof name, "seqkv %s%s", seqkv_level_name(rr->level),
                 cen ? " + prob. trie" : (rr->level == SEQKV_RAW ? " (exact trie)" : ""));
        printf("%-28s %14llu %9.2f %9.2f %8.2f %9.1f %9.0f %9.1f\n", name,
               (unsigned long long)rr->st.stored_bytes,
               (double)raw_req / (double)rr->st.stored_bytes,
               (double)chunk_bytes / (double)rr->st.stored_bytes, bits,
               (double)rr->requests / rr->put_s, (double)rr->requests / rr->lookup_s,
               (double)rr->requests / rr->get_s);
        if (cen)
            printf("%-28s near-duplicate members: %llu bytes vs %llu alone (%+.1f%%), %llu of "
                   "%llu new tokens against a centroid\n",
                   "", (unsigned long long)rr->member_bytes,
                   (unsigned long long)al->member_bytes, 100.0 * (member_ratio - 1.0),
                   (unsigned long long)rr->centroid_tokens,
                   (unsigned long long)rr->st.tokens);
        if (cen && rr->st.chunks)
            printf("%-28s %llu of %llu centroid-coded records found by content; the content "
                   "index: %llu bytes, %.0f a record\n",
                   "", (unsigned long long)rr->st.content_chunks,
                   (unsigned long long)rr->st.centroid_chunks,
                   (unsigned long long)rr->st.content_index_bytes,
                   (double)rr->st.content_index_bytes / (double)rr->st.chunks);
        fflush(stdout);
    }
}

static int bench_store(int argc, char **argv)
{
    bargs a;
    int r = bparse(argc, argv, &a);
    if (r)
        return r;
    if (sodium_init() < 0)
        return cli_fail(SKV_ERR_IO, "libsodium");
    int levels[SEQKV_LEVELS], nl = 0;
    if ((r = parse_levels(a.levels, levels, &nl)))
        return r;
    skv_model *m;
    int rc = skv_model_load(a.model, &m);
    if (rc)
        return cli_fail(rc, a.model);
    skv_pool *pool = NULL;
    if (a.threads > 1 && (rc = skv_pool_create(&pool, (int)a.threads)))
        return cli_fail(rc, "threads");
    const skv_model_config *mc = skv_model_cfg(m);
    char tmp[4096];
    if (a.keep)
        snprintf(tmp, sizeof tmp, "%s", a.keep);
    else
        snprintf(tmp, sizeof tmp, "%s/seqkv-bench-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!a.keep && !mkdtemp(tmp))
        return cli_fail(skv_error(SKV_ERR_IO, "mkdtemp %s", tmp), "bench store");
    if (a.keep)
        mkdir(tmp, 0700);
    cli_session *S = NULL;
    size_t ns = 0;
    double t0 = cli_now();
    rc = cli_workload_make(m, pool, a.tenants, a.sessions, a.turns, a.seed,
                           "bench store: workload sessions", &S, &ns);
    char cal_path[4200];
    snprintf(cal_path, sizeof cal_path, "%s/bench.cal", tmp);
    if (!rc)
        rc = make_calib(m, pool, a.seed, cal_path);
    if (rc) {
        rm_tree(tmp);
        return cli_fail(rc, "bench store: workload");
    }
    if (!a.json)
        fprintf(stderr, "bench store: workload and calibration made in %.1f s\n", cli_now() - t0);
    const size_t L = (size_t)mc->n_layers, row = (size_t)mc->n_kv_heads * (size_t)mc->head_dim * 2,
                 per_tok = L * 2 * row;
    baselines b = {0, 0, 0};
    rc = make_baselines(&a, S, ns, per_tok, &b);
    if (rc) {
        cli_workload_free(S, ns);
        if (!a.keep)
            rm_tree(tmp);
        skv_pool_free(pool);
        skv_model_free(m);
        return cli_fail(rc, "bench store: baselines");
    }
    const double scalars_per_tok = (double)(L * 2 * row / 2);
    report_baselines(&a, ns, &b);
    run_res alone[SEQKV_LEVELS];
    memset(alone, 0, sizeof alone);
    for (int li = 0; li < nl && !rc; li++)
        for (int cen = 0; cen < 2 && !rc; cen++) {
            if (levels[li] == SEQKV_RAW && cen)
                continue; /* raw codes nothing against anything */
            run_res rr;
            memset(&rr, 0, sizeof rr);
            rr.level = (seqkv_level)levels[li];
            rr.centroids = cen;
            char dir[4300];
            snprintf(dir, sizeof dir, "%s/store-%s-%d", tmp, seqkv_level_name(rr.level), cen);
            rc = run_config(&a, dir, cal_path, S, ns, mc, &rr);
            if (!a.keep)
                rm_tree(dir);
            if (rc)
                break;
            if (!cen)
                alone[levels[li]] = rr;
            report_run(&a, &rr, cen, &alone[levels[li]], &b, scalars_per_tok);
        }
    cli_workload_free(S, ns);
    if (!a.keep)
        rm_tree(tmp);
    skv_pool_free(pool);
    skv_model_free(m);
    return rc ? cli_fail(rc, "bench store") : 0;
}

int cmd_bench(int argc, char **argv)
{
    static const char usage[] = "usage: seqkv bench store [options]\n"
                                "Run 'seqkv bench store --help' for its options.\n";
    static const cli_sub subs[] = {{"store", bench_store}};
    return cli_dispatch("bench", usage, subs, sizeof subs / sizeof subs[0], argc, argv);
}
