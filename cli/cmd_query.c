/* seqkv lookup|get|del: store calls over the token sequences of a file,
 * one a line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cmd_store.h"

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
    "  --lossy on        accept a prefix the profile's lossy tier stored: its\n"
    "                    reconstruction (else such a line is an error)\n"
    "  --quiet           no summary\n";

static const char del_usage[] =
    "usage: seqkv del --db DIR (--profile NAME | --model PATH) --tokens FILE [options]\n"
    "\n"
    "Delete the cached KV of each line of FILE that no other stored sequence\n"
    "needs, and print the number of tokens removed per line on stdout.\n"
    "\n" COMMON_OPTS
    "  --no-sync         no fsync (NOT durable)\n";

int cmd_lookup(int argc, char **argv)
{
    return cli_per_line("lookup", argc, argv, lookup_usage, 0, seqkv_lookup);
}

/* With --model: whether its KV has the profile's shape (0), else a
 * message and 1 */
static int get_check_model(const skv_model *m, const seqkv_profile *p)
{
    seqkv_profile mp = SEQKV_PROFILE_INIT;
    memset(&mp, 0, sizeof mp);
    cli_shape_from_model(m, p->dtype, &mp);
    if (cli_same_shape(&mp, p))
        return 0;
    char s1[128], s2[128];
    cli_describe_shape(p, s1, sizeof s1);
    cli_describe_shape(&mp, s2, sizeof s2);
    fprintf(stderr, "seqkv get: profile %s is %s; the model's KV is %s\n", p->name, s1, s2);
    return 1;
}

/* What get_one reads and writes: the store, the profile, the token lines
 * and a KV buffer in each layout */
typedef struct {
    seqkv *db;
    const sargs *a;
    const seqkv_profile *p;
    const cli_tokens *toks;
    uint8_t *buf, *kb, *vb;
} get_ctx;

/* Sequence i's cached KV (*got tokens) into kb and vb, the KV file
 * layout; 0, or 1 after a message */
static int get_one(const get_ctx *g, size_t i, size_t *got)
{
    const sargs *a = g->a;
    const seqkv_profile *p = g->p;
    const cli_tokens *toks = g->toks;
    size_t want = a->have_n ? (size_t)a->n : 0;
    *got = 0;
    if (want > toks->len[i]) {
        fprintf(stderr, "seqkv get: line %zu has %zu tokens, fewer than --n %zu\n", toks->line[i],
                toks->len[i], want);
        return 1;
    }
    int rc;
    if (a->have_lossy && a->lossy < 0) { /* --lossy on */
        seqkv_view *v = NULL;
        rc = seqkv_get_view(g->db, a->tenant, p->name, toks->seq[i], toks->len[i], &(seqkv_get_opts){.want = want, .flags = SEQKV_GET_LOSSY}, &v, got);
        uint8_t *o = g->buf;
        for (size_t k = 0; !rc && k < seqkv_view_pieces(v); k++) {
            size_t len;
            const void *pc = seqkv_view_piece(v, k, &len);
            memcpy(o, pc, len);
            o += len;
        }
        seqkv_view_free(v);
    } else {
        rc = seqkv_get(g->db, a->tenant, p->name, toks->seq[i], toks->len[i], &(seqkv_get_opts){.want = want}, g->buf,
                       toks->len[i] * cli_token_bytes(p), got);
    }
    if (rc == SKV_ERR_LOSSY) {
        fprintf(stderr, "seqkv get: line %zu: %s (here: --lossy on)\n", toks->line[i],
                seqkv_error_detail());
        return 1;
    }
    if (rc == SKV_ERR_NOT_FOUND && want) {
        size_t have = 0;
        seqkv_lookup(g->db, a->tenant, p->name, toks->seq[i], toks->len[i], &have);
        fprintf(stderr, "seqkv get: line %zu: only %zu of the %zu tokens asked for are "
                "cached\n", toks->line[i], have, want);
        return 1;
    }
    if (rc == SKV_ERR_NOT_FOUND) {
        /* An unknown tenant, or nothing cached: both mean no KV here. */
        size_t have = 0;
        if (seqkv_lookup(g->db, a->tenant, p->name, toks->seq[i], toks->len[i], &have) != 0 ||
            have == 0)
            rc = 0, *got = 0;
    }
    if (rc) {
        char what[64];
        snprintf(what, sizeof what, "get of line %zu", toks->line[i]);
        return cli_fail(rc, what);
    }
    if (*got == 0) {
        fprintf(stderr, "seqkv get: line %zu: nothing cached for it\n", toks->line[i]);
        return 1;
    }
    if (*got > toks->len[i] || (want && *got != want)) {
        fprintf(stderr, "seqkv get: line %zu: the store returned %zu tokens for %zu asked "
                "(a store bug)\n", toks->line[i], *got, want ? want : toks->len[i]);
        return 1;
    }
    cli_from_store(p, *got, g->buf, g->kb, g->vb);
    return 0;
}

/* The metadata 'seqkv model kv' writes, in its order, then the file */
static int get_write(skv_st_writer *w, const seqkv_profile *p, const skv_model *m, const char *model_path,
                     const char *out)
{
    char b[64];
    const int rope_dim = p->rope_dim ? p->rope_dim : p->head_dim;
    int rc = skv_stw_meta(w, "seqkv.kind", "kv");
    if (!rc && m)
        rc = skv_stw_meta(w, "seqkv.model", skv_model_fingerprint(m));
    if (!rc && m) {
        cli_name_from_path(model_path, b);
        rc = skv_stw_meta(w, "seqkv.model_name", b);
    }
    if (!rc)
        rc = skv_stw_meta(w, "seqkv.dtype", skv_dtype_name(p->dtype));
    if (!rc)
        rc = skv_stw_meta(w, "seqkv.rope_layout", p->rope_half ? "half" : "pair");
    float theta = p->rope_theta > 0 ? p->rope_theta : m ? skv_model_cfg(m)->rope_theta : 10000.0f;
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
        rc = skv_stw_write(w, out);
    return rc ? cli_fail(rc, out) : 0;
}

int cmd_get(int argc, char **argv)
{
    sargs a;
    int r = cli_store_args("get", argc, argv, &a, get_usage,
                           COMMON | SA(S_PROFILE) | SA(S_MODEL) | SA(S_TOKENS) | SA(S_OUT) | SA(S_N) |
                               SA(S_QUIET) | SA(S_LOSSY),
                           0);
    if (r)
        return r;
    if (!a.out)
        return cli_usage_error("get", "--out OUT.safetensors is required");
    if (a.have_lossy && a.lossy >= 0)
        return cli_usage_error("get", "--lossy on is what get takes");
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
    seqkv_profile p = SEQKV_PROFILE_INIT;
    cli_tokens toks;
    if ((r = cli_open_query("get", &a, DB_READ_RECENT, &db, &p, &toks))) {
        skv_model_free(m);
        return r;
    }
    if (m)
        r = get_check_model(m, &p);
    const size_t tb = cli_token_bytes(&p);
    size_t longest = 0, total = 0;
    for (size_t i = 0; i < toks.n; i++)
        if (toks.len[i] > longest)
            longest = toks.len[i];
    skv_st_writer *w = NULL;
    get_ctx g = {db, &a, &p, &toks, malloc(longest * tb), malloc(longest * tb / 2),
                 malloc(longest * tb / 2)};
    int rc = g.buf && g.kb && g.vb ? SKV_OK : skv_error(SKV_ERR_NOMEM, "KV buffers for %zu tokens", longest);
    if (!rc)
        rc = skv_stw_create(&w);
    if (rc && !r)
        r = cli_fail(rc, "get");
    double t0 = cli_now();
    for (size_t i = 0; i < toks.n && !r; i++) {
        size_t got;
        if ((r = get_one(&g, i, &got)))
            break;
        skv_kvseq s = {got, toks.seq[i], p.dtype, p.layers, p.kv_heads, p.head_dim, g.kb, g.vb};
        if ((rc = skv_kvfile_add(w, i, &s)))
            r = cli_fail(rc, "get");
        total += got;
        if (!a.quiet)
            cli_progress("get", i + 1, toks.n);
    }
    if (!r)
        r = get_write(w, &p, m, a.model, a.out);
    if (!r && !a.quiet) {
        double secs = cli_now() - t0;
        fprintf(stderr, "get: wrote %zu sequences, %zu tokens (%.2f MiB %s) to %s in %.2f s (%.0f "
                "tokens/s)\n", toks.n, total, (double)(total * tb) / 1048576.0,
                skv_dtype_name(p.dtype), a.out, secs, (double)total / (secs > 0 ? secs : 1e-9));
    }
    free(g.buf);
    free(g.kb);
    free(g.vb);
    skv_stw_free(w);
    seqkv_close(db);
    cli_tokens_free(&toks);
    skv_model_free(m);
    return r;
}

int cmd_del(int argc, char **argv)
{
    return cli_per_line("del", argc, argv, del_usage, SA(S_NOSYNC), seqkv_del);
}
