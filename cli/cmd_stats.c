/* seqkv stats: what a store holds, raw and stored bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_store.h"

static const char stats_usage[] =
    "usage: seqkv stats --db DIR [--tenant T] [--json] [--key PATH]\n"
    "\n"
    "Print what the store holds (all tenants, or one with --tenant): unique\n"
    "tokens, chunk records, raw bytes (those tokens' KV in the profile's\n"
    "dtype), stored bytes and their ratio, figures per level, records coded\n"
    "against a cluster centroid, evictions, the LMDB map, tenants and\n"
    "profiles. --json prints one JSON object.\n";

static void print_ratio(double raw, double stored, int json)
{
    if (stored > 0)
        printf(json ? "%.6g" : "%.3fx", raw / stored);
    else
        printf(json ? "null" : "-");
}

/* On stderr, when tokens are stored raw: the profiles that have no
 * calibration yet and the command that gives them one */
static void raw_hint(seqkv *db, const char *dir, uint64_t raw_tokens)
{
    size_t n = 0;
    seqkv_profile *ps = NULL;
    if (cli_profiles(db, &ps, &n))
        return;
    size_t i = 0;
    while (i < n && ps[i].has_calib)
        i++;
    const int at = i < n ? (ps[i].auto_calibrate ? ps[i].auto_calibrate
                                                  : SEQKV_AUTO_CALIBRATE_DEFAULT) : 0;
    if (i < n && at > 0)
        fprintf(stderr, "stats: %llu tokens are stored raw; profile %s calibrates itself once it "
                "holds %d tokens ('seqkv calibrate --db %s --profile %s' now), and codes them\n",
                (unsigned long long)raw_tokens, ps[i].name, at, dir, ps[i].name);
    else if (i < n)
        fprintf(stderr, "stats: %llu tokens are stored raw; 'seqkv calibrate --db %s --profile %s' "
                "makes later puts of profile %s compress\n",
                (unsigned long long)raw_tokens, dir, ps[i].name, ps[i].name);
    else
        fprintf(stderr, "stats: %llu tokens were stored raw before their profile's calibration; "
                "'seqkv compact --db %s' codes them\n", (unsigned long long)raw_tokens, dir);
    free(ps);
}

int cmd_stats(int argc, char **argv)
{
    sargs a;
    int r = cli_store_args("stats", argc, argv, &a, stats_usage, COMMON | SA(S_JSON), 0);
    if (r)
        return r;
    const char *tenant = a.have_tenant ? a.tenant : NULL; /* NULL: every tenant */
    seqkv *db;
    if ((r = cli_store_open(&a, DB_READ, &db)))
        return r;
    seqkv_stats s;
    memset(&s, 0, sizeof s);
    int rc = seqkv_stat(db, tenant, &s);
    if (!rc && !a.json && !a.quiet && s.level_tokens[SEQKV_RAW])
        raw_hint(db, a.db, s.level_tokens[SEQKV_RAW]);
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
            cli_json_chars(tenant);
            putchar('"');
        } else {
            printf("null");
        }
        printf(",\"tokens\":%llu,\"chunks\":%llu,\"raw_bytes\":%llu,\"stored_bytes\":%llu,\"ratio\":",
               (unsigned long long)s.tokens, (unsigned long long)s.chunks,
               (unsigned long long)s.raw_bytes, (unsigned long long)s.stored_bytes);
        print_ratio((double)s.raw_bytes, (double)s.stored_bytes, 1);
        printf(",\"centroid_chunks\":%llu,\"content_chunks\":%llu,\"evictions\":%llu,"
               "\"map_used\":%llu,\"map_size\":%llu,\"tenants\":%u,\"profiles\":%u,\"levels\":{",
               (unsigned long long)s.centroid_chunks, (unsigned long long)s.content_chunks,
               (unsigned long long)s.evictions,
               (unsigned long long)s.map_used, (unsigned long long)s.map_size, s.tenants, s.profiles);
        for (int l = 0; l < SEQKV_LEVELS; l++) {
            printf("%s\"%s\":{\"tokens\":%llu,\"raw_bytes\":%llu,\"stored_bytes\":%llu,\"ratio\":",
                   l ? "," : "", seqkv_level_name((seqkv_level)l),
                   (unsigned long long)s.level_tokens[l], (unsigned long long)s.level_raw[l],
                   (unsigned long long)s.level_stored[l]);
            print_ratio((double)s.level_raw[l], (double)s.level_stored[l], 1);
            putchar('}');
        }
        printf("},\"lossy\":{\"tokens\":%llu,\"raw_bytes\":%llu,\"stored_bytes\":%llu,\"ratio\":",
               (unsigned long long)s.lossy_tokens, (unsigned long long)s.lossy_raw,
               (unsigned long long)s.lossy_stored);
        print_ratio((double)s.lossy_raw, (double)s.lossy_stored, 1);
        printf("}}\n");
        return 0;
    }
    printf("store         %s%s%s\n", a.db, tenant ? ", tenant " : " (all tenants)",
           tenant ? tenant : "");
    printf("tokens        %llu unique\n", (unsigned long long)s.tokens);
    printf("chunks        %llu (%llu coded against a centroid: %llu found by the prefix trie, "
           "%llu by content)\n", (unsigned long long)s.chunks,
           (unsigned long long)s.centroid_chunks,
           (unsigned long long)(s.centroid_chunks - s.content_chunks),
           (unsigned long long)s.content_chunks);
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
    if (s.lossy_tokens) /* the opt-in lossy tier: not in the ratio of any level */
        printf("%-6s %12llu %16llu %16llu %8.3fx  (lossy: a get asks for it)\n", "lossy",
               (unsigned long long)s.lossy_tokens, (unsigned long long)s.lossy_raw,
               (unsigned long long)s.lossy_stored,
               s.lossy_stored ? (double)s.lossy_raw / (double)s.lossy_stored : 0.0);
    return 0;
}
