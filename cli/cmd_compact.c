/* seqkv compact, and what put does when a profile calibrates itself. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cmd_store.h"

static const char compact_usage[] =
    "usage: seqkv compact --db DIR [--profile NAME] [options]\n"
    "\n"
    "Code again what a store holds worse than its profile can code it now:\n"
    "raw records stored before the profile had a calibration, records at\n"
    "another level or under an older calibration; and merge the records an\n"
    "appending session left in a chunk (each a few tokens more than the one\n"
    "before) into one. Each record is its own durable transaction: stopping\n"
    "or killing it at any point loses nothing, and a server may be reading\n"
    "meanwhile (but not writing: the store has one writer). Calibrations\n"
    "that no record or profile uses any more are deleted. A profile above\n"
    "raw with no calibration learns one first when it holds enough tokens\n"
    "(its auto-calibrate setting). Progress on stderr.\n"
    "\n" COMMON_OPTS
    "  --profile NAME    this profile only (default: every profile)\n"
    "  --no-sync         no fsync: NOT durable, a power loss loses the last steps\n"
    "  --threads N       coder threads (default: every CPU, as the server's\n"
    "                    compaction codes on all of them)\n"
    "  --quiet           no progress or summary\n";

typedef struct {
    const char *cmd;
    double t0;
    int quiet;
} prog;

static int on_progress(void *ctx, uint64_t done, uint64_t total)
{
    const prog *g = ctx;
    if (!g->quiet && (done == total || done % 64 == 0))
        cli_progress(g->cmd, (size_t)done, (size_t)total);
    return 0;
}

int cli_compact(seqkv *db, const sargs *a, const char *profile, const char *cmd)
{
    prog g = {cmd, cli_now(), a->quiet};
    seqkv_compact_stats st;
    int rc = seqkv_compact(db, profile, on_progress, &g, &st);
    if (rc)
        return cli_fail(rc, cmd);
    if (!a->quiet) {
        fprintf(stderr, "%s: %llu of %llu records coded again", cmd,
                (unsigned long long)st.recoded, (unsigned long long)st.records);
        if (st.merged)
            fprintf(stderr, " (%llu appended records merged into them)",
                    (unsigned long long)st.merged);
        if (st.recoded)
            fprintf(stderr, ", %llu -> %llu bytes", (unsigned long long)st.bytes_before,
                    (unsigned long long)st.bytes_after);
        if (st.calibrations_deleted)
            fprintf(stderr, ", %llu unused calibrations deleted",
                    (unsigned long long)st.calibrations_deleted);
        if (st.damaged)
            fprintf(stderr, "; %llu damaged records left as they are (their gets fail)",
                    (unsigned long long)st.damaged);
        fprintf(stderr, " (%.1f s)\n", cli_now() - g.t0);
    }
    return 0;
}

int cli_put_calibrate(seqkv *db, const sargs *a, seqkv_profile *p, size_t seqs)
{
    if (p->has_calib || !seqkv_level_predictive(p->level))
        return 0;
    double t0 = cli_now();
    int learned = 0;
    int rc = seqkv_auto_calibrate(db, p->name, &learned);
    if (!rc)
        rc = seqkv_profile_get(db, p->name, p);
    if (rc) {
        cli_fail(rc, "self-calibration");
        return 0;
    }
    if (learned && !a->quiet)
        fprintf(stderr, "put: profile %s calibrated itself after %zu sequences (%.1f s); the "
                "rest are coded at %s\n", p->name, seqs, cli_now() - t0, seqkv_level_name(p->level));
    return learned;
}

int cmd_compact(int argc, char **argv)
{
    sargs a;
    int r = cli_store_args("compact", argc, argv, &a, compact_usage,
                           SA(S_DB) | SA(S_KEY) | SA(S_PROFILE) | SA(S_NOSYNC) | SA(S_QUIET) |
                               SA(S_THREADS), 0);
    if (r)
        return r;
    if (!a.threads) {
        const long n = sysconf(_SC_NPROCESSORS_ONLN);
        a.threads = n < 1 ? 1 : n > 256 ? 256 : n;
    }
    seqkv *db;
    if ((r = cli_store_open(&a, DB_USE, &db)))
        return r;
    int learned = 0, rc = seqkv_auto_calibrate(db, a.profile, &learned);
    if (rc) /* (said; the compaction goes on without it) */
        cli_fail(rc, "self-calibration");
    if (!r && learned && !a.quiet)
        fprintf(stderr, "compact: %d profile%s calibrated %s\n", learned, learned > 1 ? "s" : "",
                learned > 1 ? "themselves" : "itself");
    if (!r)
        r = cli_compact(db, &a, a.profile, "compact");
    seqkv_close(db);
    return r;
}
