/* The exposition of GET /metrics (metrics.h): Prometheus's text format
 * 0.0.4 -- "# HELP" and "# TYPE" before each family, its samples together.
 * Counters end in _total, sizes in _bytes, times in _seconds; labels name
 * the tenant, the profile, the level and the command. Every figure INFO
 * has as a counter or a gauge is here, from the same sources, and the
 * commands' latency tables are histograms. */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "metrics.h"
#include "remote.h"
#include "seqkv.h"
#include "server_int.h"

typedef struct {
    const char *name, *type, *help;
    size_t off; /* of its uint64_t in the struct the table describes */
} mdef;

static void family(skv_rbuf *b, const char *name, const char *type, const char *help)
{
    skv_rbuf_fmt(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value as the format escapes it: backslash, quote, newline */
static void label_value(skv_rbuf *b, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            skv_rbuf_fmt(b, "\\%c", *v);
        else if (*v == '\n')
            skv_rbuf_raw(b, "\\n", 2);
        else
            skv_rbuf_raw(b, v, 1);
    }
}

/* name{k1="v1",k2="v2"} value -- k[i] NULL ends the labels */
static void sample(skv_rbuf *b, const char *name, const char *const *k, const char *const *v,
                   uint64_t x)
{
    skv_rbuf_fmt(b, "%s", name);
    for (int i = 0; k && k[i]; i++) {
        skv_rbuf_fmt(b, "%s%s=\"", i ? "," : "{", k[i]);
        label_value(b, v[i]);
        skv_rbuf_raw(b, "\"", 1);
    }
    skv_rbuf_fmt(b, "%s %" PRIu64 "\n", k && k[0] ? "}" : "", x);
}

static void one(skv_rbuf *b, const char *name, const char *type, const char *help, uint64_t x)
{
    family(b, name, type, help);
    sample(b, name, NULL, NULL, x);
}

static uint64_t field(const void *base, size_t off)
{
    uint64_t x;
    memcpy(&x, (const char *)base + off, sizeof x);
    return x;
}

/* ---- the process, its clients ------------------------------------------------ */

static void process(skv_server *s, skv_rbuf *b)
{
    const char *vk[] = {"version", NULL}, *vv[] = {SEQKV_VERSION};
    family(b, "seqkv_build_info", "gauge", "The seqkv version serving (always 1).");
    sample(b, "seqkv_build_info", vk, vv, 1);
    const double up = srv_now() - s->t_start;
    one(b, "process_start_time_seconds", "gauge", "Start time of the process since the epoch.",
        (uint64_t)((double)time(NULL) - up));
    one(b, "seqkv_uptime_seconds", "gauge", "Seconds since the server started.", (uint64_t)up);
    one(b, "process_resident_memory_bytes", "gauge", "Resident memory.", srv_status_bytes("VmRSS"));
    one(b, "seqkv_resident_anon_bytes", "gauge",
        "Resident anonymous memory (what the server allocated).", srv_status_bytes("RssAnon"));
    one(b, "seqkv_resident_file_bytes", "gauge",
        "Resident file pages (LMDB's map, the kernel's to drop).", srv_status_bytes("RssFile"));
    one(b, "seqkv_resident_peak_bytes", "gauge", "Peak resident memory.", srv_status_bytes("VmHWM"));
    one(b, "seqkv_worker_threads", "gauge", "Worker threads.", (uint64_t)s->nthreads);
    pthread_mutex_lock(&s->smu);
    const srv_snap sn = s->msnap;
    const uint64_t af = s->auth_failures, nb = s->batches, np = s->batched_puts;
    const uint64_t max_clients = s->cfg.max_clients;
    pthread_mutex_unlock(&s->smu);
    one(b, "seqkv_connected_clients", "gauge", "Connected clients.", sn.clients);
    one(b, "seqkv_max_clients", "gauge", "The max-clients limit.", max_clients);
    one(b, "seqkv_store_budget_bytes", "gauge", "The store's byte budget (--budget; 0: none).",
        s->o.budget);
    one(b, "seqkv_unauthenticated_clients", "gauge", "Clients not yet tied to a tenant.", sn.unauth);
    one(b, "seqkv_connections_received_total", "counter", "Connections accepted.", sn.accepted);
    one(b, "seqkv_connections_rejected_total", "counter", "Connections refused by limits.",
        sn.rejected);
    one(b, "seqkv_protocol_errors_total", "counter", "Malformed requests.", sn.proto_errors);
    one(b, "seqkv_auth_failures_total", "counter", "Failed AUTHs.", af);
    one(b, "seqkv_requests_in_flight", "gauge", "Requests being worked on.", sn.inflight);
    pthread_mutex_lock(&s->smu);
    const uint64_t rl = s->reloads, rf = s->reload_failures;
    const int last_ok = !strncmp(s->reload_last, "failed", 6) ? 0 : 1;
    pthread_mutex_unlock(&s->smu);
    family(b, "seqkv_config_reloads_total", "counter", "Config reloads (SIGHUP, KV.CONFIG RELOAD).");
    const char *rk[] = {"result", NULL}, *ok[] = {"ok"}, *bad[] = {"failed"};
    sample(b, "seqkv_config_reloads_total", rk, ok, rl);
    sample(b, "seqkv_config_reloads_total", rk, bad, rf);
    one(b, "seqkv_config_last_reload_successful", "gauge",
        "1 unless the last config reload was refused.", (uint64_t)last_ok);
    one(b, "seqkv_put_commits_total", "counter", "Group commits of PUTs.", nb);
    one(b, "seqkv_batched_puts_total", "counter", "PUTs those commits wrote.", np);
}

/* ---- per tenant: the server's counters and its blobs --------------------------- */

#define T(f) offsetof(srv_tstats, f)
static const mdef tenant_defs[] = {
    {"seqkv_lookups_total", "counter", "KV.LOOKUPs.", T(lookups)},
    {"seqkv_lookup_hits_total", "counter", "KV.LOOKUPs that found a prefix.", T(lookup_hits)},
    {"seqkv_lookup_misses_total", "counter", "KV.LOOKUPs that found nothing.", T(lookup_misses)},
    {"seqkv_gets_total", "counter", "KV.GETs.", T(gets)},
    {"seqkv_get_hits_total", "counter", "KV.GETs that returned KV.", T(get_hits)},
    {"seqkv_get_misses_total", "counter", "KV.GETs that found nothing.", T(get_misses)},
    {"seqkv_served_tokens_total", "counter", "Tokens of KV returned by KV.GET.", T(tokens_served)},
    {"seqkv_served_bytes_total", "counter", "Bytes of KV returned by KV.GET.", T(bytes_served)},
    {"seqkv_puts_total", "counter", "KV.PUTs.", T(puts)},
    {"seqkv_put_tokens_total", "counter", "Tokens KV.PUT received.", T(tokens_put)},
    {"seqkv_put_new_tokens_total", "counter", "Tokens KV.PUT stored that were not there.",
     T(new_tokens)},
    {"seqkv_put_bytes_total", "counter", "Bytes of KV KV.PUT received.", T(put_bytes)},
    {"seqkv_dels_total", "counter", "KV.DELs.", T(dels)},
    {"seqkv_deleted_tokens_total", "counter", "Tokens KV.DEL removed.", T(tokens_deleted)},
    {"seqkv_errors_total", "counter", "Requests answered with an error.", T(errors)},
    {"seqkv_blob_gets_total", "counter", "GETs and MGET keys of the string commands.",
     T(blob_gets)},
    {"seqkv_blob_get_hits_total", "counter", "Of them, keys found.", T(blob_hits)},
    {"seqkv_blob_sets_total", "counter", "SET and MSET keys.", T(blob_sets)},
    {"seqkv_blob_received_bytes_total", "counter", "Value bytes SET received.", T(blob_bytes_in)},
    {"seqkv_blob_sent_bytes_total", "counter", "Value bytes GET sent.", T(blob_bytes_out)},
    {"seqkv_tenant_connections", "gauge", "The tenant's connections.", T(conns)},
    {"seqkv_tenant_inflight_bytes", "gauge", "The tenant's request bytes in flight.",
     T(inflight_bytes)},
    {"seqkv_tenant_refused_busy_total", "counter", "Requests refused by the tenant's limits.",
     T(busy)},
};
#undef T

#define B(f) offsetof(seqkv_blob_stats, f)
static const mdef blob_defs[] = {
    {"seqkv_blob_keys", "gauge", "Keys of the string commands.", B(keys)},
    {"seqkv_blob_values", "gauge", "Distinct values stored.", B(values)},
    {"seqkv_blob_raw_bytes", "gauge", "Value bytes summed over keys.", B(raw_bytes)},
    {"seqkv_blob_value_bytes", "gauge", "Distinct values' bytes.", B(value_bytes)},
    {"seqkv_blob_stored_bytes", "gauge", "Their stored images' bytes.", B(stored_bytes)},
    {"seqkv_blob_kv_values", "gauge", "Values coded as KV.", B(kv_values)},
    {"seqkv_blob_evicted_total", "counter", "Keys removed by the budget since start.", B(evicted)},
    {"seqkv_blob_expired_total", "counter", "Keys removed at expiry since start.", B(expired)},
};
#undef B

static void tenants(skv_server *s, skv_rbuf *b)
{
    pthread_mutex_lock(&s->smu);
    const size_t n = s->cfg.ntenants;
    srv_tstats *ts = skv_malloc((n ? n : 1) * sizeof *ts);
    char(*names)[SEQKV_NAME_MAX + 1] = skv_malloc((n ? n : 1) * sizeof *names);
    seqkv_blob_stats *bs = skv_calloc(n ? n : 1, sizeof *bs);
    if (ts && names) {
        memcpy(ts, s->ts, n * sizeof *ts);
        for (size_t t = 0; t < n; t++)
            memcpy(names[t], s->cfg.tenants[t].name, sizeof names[t]);
    }
    pthread_mutex_unlock(&s->smu);
    if (!ts || !names || !bs)
        b->oom = 1;
    const size_t nt = b->oom ? 0 : n;
    for (size_t t = 0; t < nt; t++)
        seqkv_blob_stat_all(s->db, names[t], &bs[t]);
    const char *k[] = {"tenant", NULL};
    for (size_t d = 0; d < sizeof tenant_defs / sizeof *tenant_defs; d++) {
        family(b, tenant_defs[d].name, tenant_defs[d].type, tenant_defs[d].help);
        for (size_t t = 0; t < nt; t++) {
            const char *v[] = {names[t]};
            sample(b, tenant_defs[d].name, k, v, field(&ts[t], tenant_defs[d].off));
        }
    }
    for (size_t d = 0; d < sizeof blob_defs / sizeof *blob_defs; d++) {
        family(b, blob_defs[d].name, blob_defs[d].type, blob_defs[d].help);
        for (size_t t = 0; t < nt; t++) {
            const char *v[] = {names[t]};
            sample(b, blob_defs[d].name, k, v, field(&bs[t], blob_defs[d].off));
        }
    }
    skv_free(ts);
    skv_free(names);
    skv_free(bs);
}

/* ---- the store: per tenant and profile, per level -------------------------------- */

typedef struct {
    char tenant[SEQKV_NAME_MAX + 1], profile[SEQKV_NAME_MAX + 1];
    seqkv_stats st;
} ns_fig;

typedef struct {
    ns_fig *v;
    size_t n, cap;
} ns_list;

static int collect(void *ctx, const char *tenant, const char *profile, const seqkv_stats *st)
{
    ns_list *l = ctx;
    if (l->n == l->cap) {
        size_t nc = l->cap ? 2 * l->cap : 16;
        ns_fig *p = skv_realloc(l->v, nc * sizeof *p);
        if (!p)
            return SKV_ERR_NOMEM;
        l->v = p;
        l->cap = nc;
    }
    ns_fig *f = &l->v[l->n++];
    snprintf(f->tenant, sizeof f->tenant, "%s", tenant);
    snprintf(f->profile, sizeof f->profile, "%s", profile);
    f->st = *st;
    return 0;
}

#define S(f) offsetof(seqkv_stats, f)
static const mdef ns_defs[] = {
    {"seqkv_tokens", "gauge", "Unique token positions stored.", S(tokens)},
    {"seqkv_chunks", "gauge", "Chunk records stored.", S(chunks)},
    {"seqkv_raw_bytes", "gauge", "The stored tokens' KV in the profile's dtype.", S(raw_bytes)},
    {"seqkv_stored_bytes", "gauge", "Bytes of the chunk records (raw / stored: the ratio).",
     S(stored_bytes)},
    {"seqkv_coded_tokens", "gauge", "Token positions coded in records.", S(coded_tokens)},
    {"seqkv_centroid_chunks", "gauge", "Records coded against a centroid.", S(centroid_chunks)},
    {"seqkv_content_chunks", "gauge", "Of them, those whose centroid the content index found.",
     S(content_chunks)},
    {"seqkv_content_index_bytes", "gauge", "The content indexes' memory.",
     S(content_index_bytes)},
};
#undef S

static void store(skv_server *s, skv_rbuf *b)
{
    ns_list l = {0};
    if (seqkv_stat_each(s->db, collect, &l) == SKV_ERR_NOMEM)
        b->oom = 1;
    const char *k[] = {"tenant", "profile", NULL}, *kl[] = {"tenant", "profile", "level", NULL};
    for (size_t d = 0; d < sizeof ns_defs / sizeof *ns_defs; d++) {
        family(b, ns_defs[d].name, ns_defs[d].type, ns_defs[d].help);
        for (size_t i = 0; i < l.n; i++) {
            const char *v[] = {l.v[i].tenant, l.v[i].profile};
            sample(b, ns_defs[d].name, k, v, field(&l.v[i].st, ns_defs[d].off));
        }
    }
    static const char *lv[3][2] = {
        {"seqkv_level_tokens", "Token positions coded at the level (lossy: the opt-in lossy tier)."},
        {"seqkv_level_raw_bytes", "Their KV in the profile's dtype."},
        {"seqkv_level_stored_bytes", "Their records' bytes."}};
    for (int m = 0; m < 3; m++) {
        family(b, lv[m][0], "gauge", lv[m][1]);
        for (size_t i = 0; i < l.n; i++) {
            const seqkv_stats *st = &l.v[i].st;
            for (int lev = 0; lev <= SEQKV_LEVELS; lev++) {
                const int lossy = lev == SEQKV_LEVELS;
                const uint64_t x[3] = {
                    lossy ? st->lossy_tokens : st->level_tokens[lev],
                    lossy ? st->lossy_raw : st->level_raw[lev],
                    lossy ? st->lossy_stored : st->level_stored[lev]};
                if (!(lossy ? st->lossy_tokens : st->level_tokens[lev]))
                    continue;
                const char *v[] = {l.v[i].tenant, l.v[i].profile,
                                   lossy ? "lossy" : seqkv_level_name((seqkv_level)lev)};
                sample(b, lv[m][0], kl, v, x[m]);
            }
        }
    }
    skv_free(l.v);
    seqkv_stats all;
    if (seqkv_stat(s->db, NULL, &all))
        memset(&all, 0, sizeof all);
    one(b, "seqkv_evictions_total", "counter", "Records evicted since the store was made.",
        all.evictions);
    one(b, "seqkv_tenants", "gauge", "Tenants the store has.", all.tenants);
    one(b, "seqkv_profiles", "gauge", "Profiles the store has.", all.profiles);
    one(b, "seqkv_lmdb_map_used_bytes", "gauge", "LMDB pages in use.", all.map_used);
    one(b, "seqkv_lmdb_map_size_bytes", "gauge", "LMDB's map size.", all.map_size);
}

/* ---- the hot tier, the remote tier, maintenance ----------------------------------- */

#define C(f) offsetof(seqkv_cache_stats, f)
static const mdef cache_defs[] = {
    {"seqkv_cache_budget_bytes", "gauge", "The hot tier's budget.", C(budget)},
    {"seqkv_cache_bytes", "gauge", "Decoded chunks held in the hot tier.", C(bytes)},
    {"seqkv_cache_chunks", "gauge", "Chunks held in the hot tier.", C(chunks)},
    {"seqkv_cache_hits_total", "counter", "Chunk lookups the hot tier answered.", C(hits)},
    {"seqkv_cache_misses_total", "counter", "Chunk lookups it did not.", C(misses)},
    {"seqkv_cache_inserts_total", "counter", "Chunks put in the hot tier.", C(inserts)},
    {"seqkv_cache_evictions_total", "counter", "Chunks evicted by its budget.", C(evictions)},
    {"seqkv_cache_drops_total", "counter", "Chunks dropped as their records went.", C(drops)},
};
#undef C

#define R(f) offsetof(srv_remote_stats, f)
static const mdef remote_defs[] = {
    {"seqkv_remote_queued_total", "counter", "Records handed to the cluster writer.", R(queued)},
    {"seqkv_remote_queued_bytes_total", "counter", "Their bytes.", R(queued_bytes)},
    {"seqkv_remote_written_total", "counter", "Records the cluster confirmed.", R(written)},
    {"seqkv_remote_written_bytes_total", "counter", "Their bytes.", R(written_bytes)},
    {"seqkv_remote_write_failures_total", "counter", "Records given up on.", R(write_failures)},
    {"seqkv_remote_dropped_total", "counter", "Records a full backlog refused.", R(dropped)},
    {"seqkv_remote_backlog", "gauge", "Records waiting for the cluster.", R(backlog)},
    {"seqkv_remote_backlog_bytes", "gauge", "Their bytes.", R(backlog_bytes)},
    {"seqkv_remote_backlog_max_bytes", "gauge", "The backlog's budget (remote-backlog).",
     R(backlog_max)},
    {"seqkv_remote_lookups_total", "counter", "LOOKUPs that asked the cluster.", R(lookups)},
    {"seqkv_remote_lookup_tokens_total", "counter", "Tokens the cluster added to LOOKUPs.",
     R(lookup_tokens)},
    {"seqkv_remote_fills_total", "counter", "GETs that fetched from the cluster.", R(fills)},
    {"seqkv_remote_fetched_total", "counter", "Records fetched.", R(fetched)},
    {"seqkv_remote_fetched_bytes_total", "counter", "Their bytes.", R(fetched_bytes)},
    {"seqkv_remote_fetch_misses_total", "counter", "Records the cluster no longer had.",
     R(fetch_misses)},
    {"seqkv_remote_installed_total", "counter", "Fetched records installed here.", R(installed)},
    {"seqkv_remote_install_failures_total", "counter", "Fetched records refused.",
     R(install_failures)},
    {"seqkv_remote_calibrations_written_total", "counter", "Calibrations written.",
     R(calibs_written)},
    {"seqkv_remote_calibrations_fetched_total", "counter", "Calibrations fetched.",
     R(calibs_fetched)},
};
#undef R

#define M(f) offsetof(srv_mstat, f)
static const mdef maint_defs[] = {
    {"seqkv_self_calibrations_total", "counter", "Profiles that calibrated themselves.",
     M(calibrations)},
    {"seqkv_compactions_total", "counter", "Compaction passes.", M(compactions)},
    {"seqkv_records_recoded_total", "counter", "Records coded again by compaction.", M(recoded)},
    {"seqkv_records_merged_total", "counter", "Appended records merged.", M(merged)},
    {"seqkv_compaction_saved_bytes_total", "counter", "Bytes compaction saved.", M(bytes_saved)},
    {"seqkv_calibrations_deleted_total", "counter", "Retired calibrations deleted.",
     M(calibrations_deleted)},
    {"seqkv_damaged_records", "gauge",
     "Records the last pass left: failing their checks, or decoded from one that does.", M(damaged)},
    {"seqkv_compaction_done_records", "gauge", "Records the current or last pass has done.",
     M(progress_done)},
    {"seqkv_compaction_records", "gauge", "Records of the current or last pass.",
     M(progress_total)},
};
#undef M

static void table(skv_rbuf *b, const mdef *d, size_t n, const void *base)
{
    for (size_t i = 0; i < n; i++)
        one(b, d[i].name, d[i].type, d[i].help, field(base, d[i].off));
}

static void tiers(skv_server *s, skv_rbuf *b)
{
    seqkv_cache_stats c;
    seqkv_cache_stat(s->db, &c);
    table(b, cache_defs, sizeof cache_defs / sizeof *cache_defs, &c);
    srv_remote_stats r;
    srv_remote_stat(s, &r);
    one(b, "seqkv_remote_enabled", "gauge", "1 when a shared tier is configured.",
        s->remote != NULL);
    family(b, "seqkv_remote_tenants", "gauge", "Tenants shared with the fleet, and local ones.");
    const char *k[] = {"state", NULL}, *sh[] = {"shared"}, *lo[] = {"local"};
    sample(b, "seqkv_remote_tenants", k, sh, r.tenants_shared);
    sample(b, "seqkv_remote_tenants", k, lo, r.tenants_local);
    table(b, remote_defs, sizeof remote_defs / sizeof *remote_defs, &r);
    srv_mstat m;
    srv_maintain_stat(s, &m);
    table(b, maint_defs, sizeof maint_defs / sizeof *maint_defs, &m);
    one(b, "seqkv_compaction_running", "gauge", "1 while a compaction runs.", m.running != 0);
    one(b, "seqkv_self_calibration_running", "gauge", "1 while a self-calibration runs.",
        m.calibrating != 0);
}

/* ---- commands: counts and latency histograms ----------------------------------- */

/* bucket b of the server's tables holds latencies < 2^b us; the exposition's
 * buckets are cumulative, "le" in seconds, from 16 us to 2^26 us (67 s) */
#define LE_FIRST 4
#define LE_LAST 26

static void commands(skv_server *s, skv_rbuf *b)
{
    uint64_t calls[SRV_NCMD], usec[SRV_NCMD];
    uint64_t(*hh)[SRV_NBUCKETS] = skv_malloc(sizeof s->hist);
    if (!hh) {
        b->oom = 1;
        return;
    }
    pthread_mutex_lock(&s->smu);
    memcpy(calls, s->calls, sizeof calls);
    memcpy(usec, s->usec, sizeof usec);
    memcpy(hh, s->hist, sizeof s->hist);
    pthread_mutex_unlock(&s->smu);
    char lc[32], le[32];
    const char *k[] = {"command", NULL}, *kb[] = {"command", "le", NULL};
    family(b, "seqkv_commands_total", "counter", "Commands run, by command.");
    for (int i = 0; i < SRV_NCMD; i++) {
        const srv_cmd *d = srv_cmd_at(i);
        if (d && calls[i]) {
            srv_cmd_lower(d->name, lc, sizeof lc);
            const char *v[] = {lc};
            sample(b, "seqkv_commands_total", k, v, calls[i]);
        }
    }
    family(b, "seqkv_command_duration_seconds", "histogram",
           "Time from a command's parse to its reply, by command.");
    for (int i = 0; i < SRV_NCMD; i++) {
        const srv_cmd *d = srv_cmd_at(i);
        if (!d || !calls[i])
            continue;
        srv_cmd_lower(d->name, lc, sizeof lc);
        uint64_t acc = 0;
        for (int bk = 0; bk <= LE_LAST; bk++) {
            acc += hh[i][bk];
            if (bk < LE_FIRST)
                continue;
            snprintf(le, sizeof le, "%g", (double)((uint64_t)1 << bk) * 1e-6);
            const char *v[] = {lc, le};
            sample(b, "seqkv_command_duration_seconds_bucket", kb, v, acc);
        }
        const char *vi[] = {lc, "+Inf"}, *v[] = {lc};
        sample(b, "seqkv_command_duration_seconds_bucket", kb, vi, calls[i]);
        skv_rbuf_fmt(b, "seqkv_command_duration_seconds_sum{command=\"%s\"} %.6f\n", lc,
                     (double)usec[i] * 1e-6);
        sample(b, "seqkv_command_duration_seconds_count", k, v, calls[i]);
    }
    skv_free(hh);
}

int srv_metrics_render(skv_server *s, skv_rbuf *b)
{
    process(s, b);
    tenants(s, b);
    store(s, b);
    tiers(s, b);
    commands(s, b);
    return b->oom ? SKV_ERR_NOMEM : SKV_OK;
}
