/* seqkv put: KV caches into the store, from a KV file or computed by a
 * model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_store.h"

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
    "  --level L         raw, stat, ctx, spec, full or fast: a new profile's level\n"
    "                    (default ctx: its chunks are stored raw until it has a\n"
    "                    calibration), else the level of this put only\n"
    "  --auto-calibrate N  the profile learns its calibration once it holds N\n"
    "                    tokens (default 8192; 0: never), inside the put that\n"
    "                    crosses it, and codes what it stored raw before\n"
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

typedef struct {
    size_t seqs, given, fresh, chunks, bytes, centroid;
    long evicted;
    int calibrated; /* the profile calibrated itself during this put */
    double t0;
} put_totals;

/* label names the sequence in an error: "line 3" of a tokens file,
 * "sequence 2 of FILE" of a KV file; idx is --verbose's 0-based index */
static int put_one(seqkv *db, const sargs *a, const seqkv_profile *p, size_t idx,
                   const char *label, const int32_t *tok, size_t T, const void *kv, size_t kv_len, put_totals *tot)
{
    seqkv_put_opts o = SEQKV_PUT_OPTS_INIT;
    o.shared = a->shared;
    o.has_level = a->have_level;
    o.level = a->level;
    seqkv_put_result r;
    memset(&r, 0, sizeof r);
    int rc = seqkv_put(db, a->tenant, p->name, tok, T, kv, kv_len, &o, &r);
    if (rc) {
        char what[300];
        snprintf(what, sizeof what, "put of %s", label);
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
    double raw = (double)t->fresh * (double)cli_token_bytes(p);
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
    if (t->fresh && !p->has_calib && seqkv_level_predictive(p->level)) {
        const int at = p->auto_calibrate ? p->auto_calibrate : SEQKV_AUTO_CALIBRATE_DEFAULT;
        if (at > 0)
            fprintf(stderr, "put: stored raw: profile %s has no calibration yet; it learns one "
                    "once it holds %d tokens (--auto-calibrate), and codes what it holds then\n",
                    p->name, at);
        else
            fprintf(stderr, "put: stored raw: profile %s has no calibration (auto-calibrate is "
                    "off); 'seqkv calibrate --db %s --profile %s' learns one\n", p->name, a->db,
                    p->name);
    }
}

static int put_kvfile(const sargs *a, skv_model *m, seqkv *db, const char *name, skv_st *st,
                      size_t n_seq, const seqkv_profile *kvshape)
{
    int rc;
    skv_kvseq q;
    seqkv_profile want = *kvshape, p = SEQKV_PROFILE_INIT;
    if (m) {
        seqkv_profile mp = SEQKV_PROFILE_INIT;
        memset(&mp, 0, sizeof mp);
        cli_shape_from_model(m, kvshape->dtype, &mp);
        if (!cli_same_shape(&mp, &want)) {
            char s1[128], s2[128];
            cli_describe_shape(&want, s1, sizeof s1);
            cli_describe_shape(&mp, s2, sizeof s2);
            fprintf(stderr, "seqkv put: %s holds %s KV; the model's is %s\n", a->kv, s1, s2);
            return 1;
        }
        want = mp;
        cli_model_path(a->model, want.model);
    }
    int created;
    int r = cli_ensure_profile(db, a, "put", name, &want, &p, &created);
    if (r)
        return r;
    put_totals tot = {.t0 = cli_now()};
    const size_t tb = cli_token_bytes(&p);
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
        if (!cli_same_shape(&qs, &p)) {
            char s1[128], s2[128];
            cli_describe_shape(&qs, s1, sizeof s1);
            cli_describe_shape(&p, s2, sizeof s2);
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
            cli_to_store(&p, q.T, q.k, q.v, kv);
            char label[300];
            snprintf(label, sizeof label, "sequence %zu of %s", i, a->kv);
            r = put_one(db, a, &p, i, label, tok, q.T, kv, q.T * tb, &tot);
            if (!r)
                tot.calibrated |= cli_put_calibrate(db, a, &p, i + 1);
            if (!r && !a->quiet)
                cli_progress("put", i + 1, n_seq);
        }
        free(tok);
        free(kv);
    }
    put_summary(a, &p, &tot, r);
    if (!r && tot.calibrated) /* what was stored raw before, coded now */
        r = cli_compact(db, a, p.name, "put");
    return r;
}

static int put_model(const sargs *a, skv_model *m, seqkv *db, const char *name,
                     const cli_tokens *toks)
{
    const skv_model_config *c = skv_model_cfg(m);
    seqkv_profile want = SEQKV_PROFILE_INIT, p = SEQKV_PROFILE_INIT;
    memset(&want, 0, sizeof want);
    cli_shape_from_model(m, a->have_dtype ? a->dtype : SEQKV_DT_BF16, &want);
    cli_model_path(a->model, want.model);
    /* An existing profile fixes the dtype; --dtype must then agree. */
    seqkv_profile have = SEQKV_PROFILE_INIT;
    if (!a->have_dtype && seqkv_profile_get(db, name, &have) == 0)
        want.dtype = have.dtype;
    int created;
    int r = cli_ensure_profile(db, a, "put", name, &want, &p, &created);
    if (r)
        return r;
    int rc = 0;
    size_t longest = 0;
    for (size_t i = 0; i < toks->n; i++)
        if (toks->len[i] > longest)
            longest = toks->len[i];
    const size_t tb = cli_token_bytes(&p);
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
            snprintf(what, sizeof what, "KV of line %zu", toks->line[i]);
            r = cli_fail(rc, what);
            break;
        }
        cli_to_store(&p, toks->len[i], kb, vb, kv);
        char label[32];
        snprintf(label, sizeof label, "line %zu", toks->line[i]);
        r = put_one(db, a, &p, i, label, toks->seq[i], toks->len[i], kv, toks->len[i] * tb, &tot);
        if (!r)
            tot.calibrated |= cli_put_calibrate(db, a, &p, i + 1);
        if (!r && !a->quiet)
            cli_progress("put", i + 1, toks->n);
    }
    put_summary(a, &p, &tot, r);
    if (!r && tot.calibrated) /* what was stored raw before, coded now */
        r = cli_compact(db, a, p.name, "put");
    free(kb);
    free(vb);
    free(kv);
    skv_kvcache_free(cache);
    skv_pool_free(pool);
    return r;
}

int cmd_put(int argc, char **argv)
{
    sargs a;
    int r = cli_store_args("put", argc, argv, &a, put_usage,
                   COMMON | SA(S_PROFILE) | SA(S_KV) | SA(S_MODEL) | SA(S_TOKENS) | SA(S_LEVEL) |
                       SA(S_CALIB) | SA(S_CHUNK) | SA(S_SHARED) | SA(S_NOSYNC) | SA(S_BUDGET) |
                       SA(S_QUIET) | SA(S_DTYPE) | SA(S_THREADS) | SA(S_VERBOSE) | SA(S_NOCENT) |
                       SA(S_AUTOCAL),
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
        cli_name_from_path(a.kv ? a.kv : a.model, name);
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
    seqkv_profile kvshape = SEQKV_PROFILE_INIT;
    if (a.tokens) {
        int rc = cli_tokens_read(a.tokens, skv_model_cfg(m)->vocab_size, &toks);
        if (rc == SKV_OK && (rc = cli_tokens_fit(&toks, a.tokens, skv_model_cfg(m)->max_seq)))
            cli_tokens_free(&toks);
        if (rc)
            r = cli_fail(rc, a.tokens);
    } else {
        r = cli_open_kvfile(a.kv, &st, &n_seq, &kvshape);
        /* a KV file that records its model's name (seqkv model kv) names
         * the profile after the model, as put --model does */
        const char *mn = st ? skv_st_meta(st, "seqkv.model_name") : NULL;
        if (!r && !a.profile && mn && *mn && strlen(mn) <= SEQKV_NAME_MAX)
            snprintf(name, sizeof name, "%s", mn);
        if (!r && a.have_dtype && a.dtype != kvshape.dtype)
            r = cli_usage_error("put", "--dtype %s does not match the KV file's %s",
                                skv_dtype_name(a.dtype), skv_dtype_name(kvshape.dtype));
    }
    seqkv *db = NULL;
    if (!r)
        r = cli_store_open(&a, DB_WRITE, &db);
    if (!r)
        r = a.kv ? put_kvfile(&a, m, db, name, st, n_seq, &kvshape)
                 : put_model(&a, m, db, name, &toks);
    seqkv_close(db);
    skv_st_free(st);
    cli_tokens_free(&toks);
    skv_model_free(m);
    return r;
}
