#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

int cli_verbose;

void cli_verbose_init(void)
{
    const char *e = getenv("SEQKV_VERBOSE");
    if (e && *e && strcmp(e, "0") != 0)
        cli_verbose = 1;
}

int cli_fail(int rc, const char *what)
{
    const char *d = seqkv_error_detail();
    fprintf(stderr, "seqkv: %s: %s", what, seqkv_strerror(rc));
    if (d && *d)
        fprintf(stderr, " (%s)", d);
    if (cli_verbose) {
        const char *name = seqkv_error_name(rc), *where = seqkv_error_where();
        fprintf(stderr, " [%s%s%s]", name ? name : "?", where && *where ? " at " : "",
                where ? where : "");
    }
    fputc('\n', stderr);
    return 1;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "seqkv %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'seqkv %s --help'.\n", cmd);
    return 2;
}

int cli_parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int cli_parse_float(const char *s, float lo, float hi, float *out)
{
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        return -1;
    *out = v;
    return 0;
}

void cli_progress(const char *what, size_t done, size_t total)
{
    static double start, last;
    double now = cli_now();
    if (done <= 1 || start == 0)
        start = last = now;
    if (now - start < 2.0 || (now - last < 1.0 && done < total))
        return;
    last = now;
    int tty = isatty(2);
    fprintf(stderr, "%s%s: %zu/%zu sequences (%.0f/s)%s", tty ? "\r" : "", what, done, total,
            (double)done / (now - start), tty && done < total ? "" : "\n");
}

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double cli_cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void cli_tokens_free(cli_tokens *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->seq[i]);
    free(t->seq);
    free(t->len);
    free(t->line);
    memset(t, 0, sizeof *t);
}

int cli_tokens_read(const char *path, int vocab, cli_tokens *out)
{
    memset(out, 0, sizeof *out);
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
    if (!f)
        return skv_error(SKV_ERR_IO, "%s: %s", path, strerror(errno));
    int rc = cli_tokens_parse(f, path, vocab, out);
    if (f != stdin)
        fclose(f);
    return rc;
}

int cli_tokens_parse(FILE *f, const char *path, int vocab, cli_tokens *out)
{
    memset(out, 0, sizeof *out);
    char *line = NULL;
    size_t cap = 0, lineno = 0, seq_cap = 0;
    ssize_t got;
    int rc = SKV_OK;
    while (rc == SKV_OK && (got = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (memchr(line, 0, (size_t)got)) { /* not read as the line's end */
            rc = skv_error(SKV_ERR_FORMAT, "%s:%zu: a NUL byte in the line", path, lineno);
            break;
        }
        char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '\n' || *p == '\r' || *p == 0 || *p == '#')
            continue;
        size_t n = 0, ncap = 64;
        int32_t *ids = malloc(ncap * sizeof *ids);
        if (!ids) {
            rc = skv_error(SKV_ERR_NOMEM, "token buffer");
            break;
        }
        while (*p && *p != '\n' && *p != '\r') {
            char *end;
            errno = 0;
            long v = strtol(p, &end, 10);
            if (end == p || errno || (*end && *end != ' ' && *end != '\t' && *end != '\n' && *end != '\r')) {
                int w = (int)strcspn(p, " \t\r\n");
                rc = skv_error(SKV_ERR_FORMAT, "%s:%zu: \"%.*s\" is not a token id (a decimal number)",
                               path, lineno, w < 20 ? w : 20, p);
                break;
            }
            if (v < 0 || v >= vocab) {
                rc = skv_error(SKV_ERR_ARG, "%s:%zu: token id %ld outside the vocabulary [0, %d)",
                               path, lineno, v, vocab);
                break;
            }
            if (n == ncap) {
                int32_t *g = realloc(ids, 2 * ncap * sizeof *ids);
                if (!g) {
                    rc = skv_error(SKV_ERR_NOMEM, "token buffer");
                    break;
                }
                ids = g;
                ncap *= 2;
            }
            ids[n++] = (int32_t)v;
            p = end;
            while (*p == ' ' || *p == '\t')
                p++;
        }
        if (rc) {
            free(ids);
            break;
        }
        if (out->n == seq_cap) {
            seq_cap = seq_cap ? 2 * seq_cap : 16;
            int32_t **s = realloc(out->seq, seq_cap * sizeof *s);
            size_t *l = s ? realloc(out->len, seq_cap * sizeof *l) : NULL;
            if (s)
                out->seq = s;
            if (l)
                out->len = l;
            size_t *ln = l ? realloc(out->line, seq_cap * sizeof *ln) : NULL;
            if (!s || !l || !ln) {
                free(ids);
                rc = skv_error(SKV_ERR_NOMEM, "token sequences");
                break;
            }
            out->line = ln;
        }
        out->seq[out->n] = ids;
        out->len[out->n] = n;
        out->line[out->n] = lineno;
        out->n++;
    }
    free(line);
    if (rc == SKV_OK && ferror(f))
        rc = skv_error(SKV_ERR_IO, "%s: %s", path, strerror(errno));
    if (rc == SKV_OK && out->n == 0)
        rc = skv_error(SKV_ERR_FORMAT, "%s: no token sequences", path);
    if (rc)
        cli_tokens_free(out);
    return rc;
}

int cli_tokens_fit(const cli_tokens *t, const char *path, int max_pos)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->len[i] > (size_t)max_pos)
            return skv_error(SKV_ERR_TOO_LARGE, "%s:%zu: %zu tokens, more than the %d positions "
                             "the model takes; shorten or split the line", path, t->line[i],
                             t->len[i], max_pos);
    return SKV_OK;
}

int cli_dispatch(const char *group, const char *usage, const cli_sub *subs, size_t n, int argc,
                 char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < n; i++)
        if (strcmp(argv[1], subs[i].name) == 0)
            return subs[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "seqkv %s: unknown subcommand '%s'\n\n%s", group, argv[1], usage);
    return 2;
}
