/* INFO's report (server/README.md lists its sections): Redis-style
 * "key:value" lines under "# Section" heads, built on a worker from the
 * server's counters and the store's figures. */
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "seqkv.h"
#include "remote.h"
#include "server_int.h"

double srv_ratio(uint64_t raw, uint64_t stored)
{
    return stored ? (double)raw / (double)stored : 0.0;
}

static void human(uint64_t v, char *out, size_t cap)
{
    const char *u[] = {"B", "K", "M", "G", "T"};
    double x = (double)v;
    int i = 0;
    while (x >= 1024 && i < 4) {
        x /= 1024;
        i++;
    }
    snprintf(out, cap, "%.2f%s", x, u[i]);
}

const char *srv_cmd_lower(const char *name, char *buf, size_t cap)
{
    size_t i = 0;
    for (; name[i] && i + 1 < cap; i++)
        buf[i] = (char)tolower((unsigned char)name[i]);
    buf[i] = 0;
    return buf;
}

static int want_section(const char *sec, const char *name)
{
    return !sec || strcasecmp(sec, name) == 0 || strcasecmp(sec, "all") == 0 ||
           strcasecmp(sec, "everything") == 0 || strcasecmp(sec, "default") == 0;
}

/* Upper bound (us) of the bucket holding the p-th fraction. */
static uint64_t percentile(const uint64_t *h, uint64_t total, double p)
{
    uint64_t need = (uint64_t)ceil(p * (double)total), acc = 0;
    if (need == 0)
        need = 1;
    for (int b = 0; b < SRV_NBUCKETS; b++) {
        acc += h[b];
        if (acc >= need)
            return (uint64_t)1 << b;
    }
    return (uint64_t)1 << (SRV_NBUCKETS - 1);
}

static void info_store(skv_server *s, skv_rbuf *b, const seqkv_stats *st)
{
    skv_rbuf_fmt(b, "tokens:%" PRIu64 "\r\nchunks:%" PRIu64 "\r\nraw_bytes:%" PRIu64
            "\r\nstored_bytes:%" PRIu64 "\r\nratio:%.3f\r\ncoded_tokens:%" PRIu64
            "\r\ncentroid_chunks:%" PRIu64 "\r\ncontent_chunks:%" PRIu64 "\r\nevictions:%" PRIu64
            "\r\n",
         st->tokens, st->chunks, st->raw_bytes, st->stored_bytes,
         srv_ratio(st->raw_bytes, st->stored_bytes), st->coded_tokens, st->centroid_chunks,
         st->content_chunks, st->evictions);
    for (int l = 0; l < SEQKV_LEVELS; l++)
        skv_rbuf_fmt(b, "level_%s:tokens=%" PRIu64 ",raw_bytes=%" PRIu64 ",stored_bytes=%" PRIu64
                ",ratio=%.3f\r\n",
             seqkv_level_name((seqkv_level)l), st->level_tokens[l], st->level_raw[l],
             st->level_stored[l], srv_ratio(st->level_raw[l], st->level_stored[l]));
    /* the opt-in lossy tier, apart from the exact levels */
    skv_rbuf_fmt(b, "lossy:tokens=%" PRIu64 ",raw_bytes=%" PRIu64 ",stored_bytes=%" PRIu64
                    ",ratio=%.3f\r\n",
                 st->lossy_tokens, st->lossy_raw, st->lossy_stored,
                 srv_ratio(st->lossy_raw, st->lossy_stored));
    (void)s;
}

static void section_server(skv_server *s, srv_job *j, skv_rbuf *b)
{
    skv_rbuf_fmt(b, "# Server\r\nseqkv_version:%s\r\nprocess_id:%ld\r\nuptime_in_seconds:%.0f\r\n"
            "socket:%s\r\ntcp:%s\r\nworker_threads:%d\r\ntenant:%s\r\nadmin:%d\r\n",
         SEQKV_VERSION, (long)getpid(), srv_now() - s->t_start, s->socket_path,
         s->tcp_addr[0] ? s->tcp_addr : "none", s->nthreads,
         s->cfg.tenants[j->tenant].name, j->admin);
    pthread_mutex_lock(&s->smu);
    const uint64_t rl = s->reloads, rf = s->reload_failures;
    char last[sizeof s->reload_last];
    memcpy(last, s->reload_last, sizeof last);
    pthread_mutex_unlock(&s->smu);
    skv_rbuf_fmt(b, "config_file:%s\r\nconfig_reloads:%" PRIu64 "\r\nconfig_reload_failures:%" PRIu64
                 "\r\nconfig_last_reload:%s\r\n\r\n",
                 s->o.config ? s->o.config : "none", rl, rf, last[0] ? last : "none");
}

static void section_clients(skv_server *s, srv_job *j, skv_rbuf *b)
{
    pthread_mutex_lock(&s->smu); /* (a config reload changes the limits under it) */
    uint64_t af = s->auth_failures;
    const skv_server_config *cf = &s->cfg;
    const size_t max_unauth = cf->max_unauth, max_clients = cf->max_clients,
                 max_args = cf->max_args;
    const uint64_t unauth_timeout = cf->unauth_timeout, max_bulk = cf->max_bulk,
                   max_query = cf->max_query, max_output = cf->max_output;
    pthread_mutex_unlock(&s->smu);
    skv_rbuf_fmt(b, "# Clients\r\nwaiting_to_authenticate:%zu\r\nmax_unauth_clients:%zu\r\n"
                 "unauth_timeout_seconds:%" PRIu64 "\r\n",
                 j->snap.unauth, max_unauth, unauth_timeout);
    skv_rbuf_fmt(b, "connected_clients:%zu\r\nmax_clients:%zu\r\n"
            "total_connections_received:%" PRIu64 "\r\nrejected_connections:%" PRIu64
            "\r\nprotocol_errors:%" PRIu64 "\r\nauth_failures:%" PRIu64
            "\r\nrequests_in_flight:%zu\r\nmax_bulk:%" PRIu64 "\r\nmax_query:%" PRIu64
            "\r\nmax_output:%" PRIu64 "\r\nmax_args:%zu\r\n\r\n",
         j->snap.clients, max_clients, j->snap.accepted, j->snap.rejected,
         j->snap.proto_errors, af, j->snap.inflight, max_bulk, max_query, max_output, max_args);
}

uint64_t srv_status_bytes(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    uint64_t v = 0;
    const size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ':') {
            v = strtoull(line + n + 1, NULL, 10) * 1024;
            break;
        }
    if (f)
        fclose(f);
    return v;
}

/* The process's memory: resident, its anonymous part (what the server
 * allocated; LMDB's file pages are the rest, the kernel's to drop) and the
 * peak, beside the hot tier's budget (what bounds the rest:
 * ARCHITECTURE.md "Memory") */
static void section_memory(skv_server *s, skv_rbuf *b)
{
    char h[32];
    uint64_t rss = srv_status_bytes("VmRSS");
    human(rss, h, sizeof h);
    seqkv_cache_stats c;
    seqkv_cache_stat(s->db, &c);
    skv_rbuf_fmt(b, "# Memory\r\nused_memory_rss:%" PRIu64 "\r\nused_memory_rss_human:%s\r\n"
                 "used_memory_rss_anon:%" PRIu64 "\r\nused_memory_rss_file:%" PRIu64 "\r\n"
                 "used_memory_peak_rss:%" PRIu64 "\r\nhot_tier_budget_bytes:%" PRIu64
                 "\r\nwarm_buffer_bytes:%zu\r\nwarm_buffer_budget_bytes:%zu\r\n\r\n",
                 rss, h, srv_status_bytes("RssAnon"), srv_status_bytes("RssFile"), srv_status_bytes("VmHWM"), c.budget,
                 skv_warm_bytes(), (size_t)SKV_WARM_BYTES);
}

/* The hot tier (store-wide: its chunks are every tenant's) */
static void section_cache(skv_server *s, skv_rbuf *b)
{
    seqkv_cache_stats c;
    seqkv_cache_stat(s->db, &c);
    const uint64_t looks = c.hits + c.misses;
    skv_rbuf_fmt(b, "# Cache\r\ncache_budget_bytes:%" PRIu64 "\r\ncache_bytes:%" PRIu64
                    "\r\ncache_chunks:%" PRIu64 "\r\ncache_hits:%" PRIu64 "\r\ncache_misses:%" PRIu64
                    "\r\ncache_hit_rate:%.4f\r\ncache_inserts:%" PRIu64 "\r\ncache_evictions:%" PRIu64
                    "\r\ncache_drops:%" PRIu64 "\r\n\r\n",
                 c.budget, c.bytes, c.chunks, c.hits, c.misses,
                 looks ? (double)c.hits / (double)looks : 0.0, c.inserts, c.evictions, c.drops);
}

/* The shared tier (remote.c): what it wrote, what waits, what it found */
static void section_remote(skv_server *s, srv_job *j, skv_rbuf *b)
{
    srv_remote_stats r;
    srv_remote_stat(s, &r);
    char cl[1024], loc[4096];
    srv_remote_client_info(s, cl, sizeof cl);
    srv_remote_local_info(s, j->admin ? NULL : s->cfg.tenants[j->tenant].name, loc, sizeof loc);
    skv_rbuf_fmt(b, "# Remote\r\nremote_enabled:%d\r\n%sremote_tenants_shared:%zu\r\n"
                    "remote_tenants_local:%zu\r\n%sremote_queued:%" PRIu64 "\r\nremote_backlog:%" PRIu64
                    "\r\nremote_backlog_bytes:%" PRIu64 "\r\nremote_written:%" PRIu64
                    "\r\nremote_written_bytes:%" PRIu64 "\r\nremote_write_failures:%" PRIu64
                    "\r\nremote_dropped:%" PRIu64 "\r\nremote_calibs_written:%" PRIu64
                    "\r\nremote_lookups:%" PRIu64 "\r\nremote_lookup_tokens:%" PRIu64
                    "\r\nremote_fills:%" PRIu64 "\r\nremote_fetched:%" PRIu64
                    "\r\nremote_fetched_bytes:%" PRIu64 "\r\nremote_fetch_misses:%" PRIu64
                    "\r\nremote_installed:%" PRIu64 "\r\nremote_install_failures:%" PRIu64
                    "\r\nremote_calibs_fetched:%" PRIu64 "\r\n\r\n",
                 s->remote != NULL, s->remote ? cl : "", r.tenants_shared, r.tenants_local, loc, r.queued,
                 r.backlog, r.backlog_bytes, r.written, r.written_bytes, r.write_failures, r.dropped,
                 r.calibs_written, r.lookups, r.lookup_tokens, r.fills, r.fetched, r.fetched_bytes,
                 r.fetch_misses, r.installed, r.install_failures, r.calibs_fetched);
}

static void section_maintenance(skv_server *s, skv_rbuf *b)
{
    srv_mstat m;
    srv_maintain_stat(s, &m);
    skv_rbuf_fmt(b, "# Maintenance\r\ncompact_interval_seconds:%" PRIu64 "\r\n"
                 "self_calibrations:%" PRIu64 "\r\nself_calibration_running:%d\r\n"
                 "compactions:%" PRIu64 "\r\ncompaction_running:%d\r\ncompaction_progress:%" PRIu64 "/%" PRIu64 "\r\n"
                 "records_recoded:%" PRIu64 "\r\nrecords_merged:%" PRIu64 "\r\n"
                 "compaction_bytes_saved:%" PRIu64 "\r\ncalibrations_deleted:%" PRIu64 "\r\n"
                 "damaged_records:%" PRIu64 "\r\nlast_compaction_seconds_ago:%.0f\r\n\r\n",
                 s->cfg.compact_interval, m.calibrations, m.calibrating, m.compactions, m.running,
                 m.progress_done, m.progress_total, m.recoded, m.merged, m.bytes_saved,
                 m.calibrations_deleted, m.damaged, m.last_compact > 0 ? srv_now() - m.last_compact : -1.0);
}

/* The store's section (all tenants for an admin, else the client's); 0,
 * or the error of seqkv_stat */
static int section_store(skv_server *s, srv_job *j, skv_rbuf *b)
{
    seqkv_stats st;
    memset(&st, 0, sizeof st);
    int rc = seqkv_stat(s->db, j->admin ? NULL : s->cfg.tenants[j->tenant].name, &st);
    if (rc && rc != SKV_ERR_NOT_FOUND)
        return rc;
    if (rc)
        memset(&st, 0, sizeof st);
    skv_rbuf_fmt(b, "# Store\r\nscope:%s\r\n", j->admin ? "all tenants" : "this tenant");
    info_store(s, b, &st);
    if (j->admin) {
        seqkv_stats all = st;
        skv_rbuf_fmt(b, "tenants:%u\r\nprofiles:%u\r\nlmdb_map_used:%" PRIu64
                "\r\nlmdb_map_size:%" PRIu64 "\r\nlmdb_map_usage:%.4f\r\n",
             all.tenants, all.profiles, all.map_used, all.map_size,
             all.map_size ? (double)all.map_used / (double)all.map_size : 0.0);
        pthread_mutex_lock(&s->smu);
        uint64_t nb = s->batches, np = s->batched_puts;
        pthread_mutex_unlock(&s->smu);
        skv_rbuf_fmt(b, "put_batch_max:%d\r\nput_commits:%" PRIu64 "\r\nputs_per_commit:%.2f\r\n",
             s->put_batch, nb, nb ? (double)np / (double)nb : 0.0);
    }
    skv_rbuf_fmt(b, "\r\n");
    return 0;
}

/* The blob namespace (Redis string commands): an admin's figures cover
 * every tenant, another's its own */
static void section_blobs(skv_server *s, srv_job *j, skv_rbuf *b)
{
    seqkv_blob_stats st;
    seqkv_blob_stat_all(s->db, j->admin ? NULL : s->cfg.tenants[j->tenant].name, &st);
    srv_tstats x = {0};
    pthread_mutex_lock(&s->smu);
    for (size_t t = 0; t < s->cfg.ntenants; t++)
        if (j->admin || (int)t == j->tenant) {
            x.blob_gets += s->ts[t].blob_gets;
            x.blob_hits += s->ts[t].blob_hits;
            x.blob_sets += s->ts[t].blob_sets;
            x.blob_bytes_in += s->ts[t].blob_bytes_in;
            x.blob_bytes_out += s->ts[t].blob_bytes_out;
        }
    pthread_mutex_unlock(&s->smu);
    skv_rbuf_fmt(b, "# Blobs\r\nscope:%s\r\nkeys:%" PRIu64 "\r\nvalues:%" PRIu64
                 "\r\nraw_bytes:%" PRIu64 "\r\nvalue_bytes:%" PRIu64 "\r\nstored_bytes:%" PRIu64
                 "\r\nratio:%.3f\r\ndedup_saved_bytes:%" PRIu64 "\r\ncoding_saved_bytes:%" PRId64
                 "\r\nkv_values:%" PRIu64 "\r\nexpired_keys:%" PRIu64 "\r\nevicted_keys:%" PRIu64
                 "\r\n",
                 j->admin ? "all tenants" : "this tenant", st.keys, st.values, st.raw_bytes,
                 st.value_bytes, st.stored_bytes, srv_ratio(st.raw_bytes, st.stored_bytes),
                 st.raw_bytes - st.value_bytes, (int64_t)st.value_bytes - (int64_t)st.stored_bytes,
                 st.kv_values, st.expired, st.evicted);
    skv_rbuf_fmt(b, "gets:%" PRIu64 "\r\nget_hits:%" PRIu64 "\r\nsets:%" PRIu64
                 "\r\nbytes_in:%" PRIu64 "\r\nbytes_out:%" PRIu64 "\r\n\r\n",
                 x.blob_gets, x.blob_hits, x.blob_sets, x.blob_bytes_in, x.blob_bytes_out);
}

/* Each tenant's line (an admin sees every tenant, others their own) */
static void section_tenants(skv_server *s, srv_job *j, skv_rbuf *b)
{
    skv_rbuf_fmt(b, "# Tenants\r\n");
    pthread_mutex_lock(&s->smu); /* (a config reload adds tenants, changes limits) */
    const size_t nt = s->cfg.ntenants;
    pthread_mutex_unlock(&s->smu);
    for (size_t t = 0; t < nt; t++) {
        if (!j->admin && (int)t != j->tenant)
            continue;
        seqkv_stats st;
        memset(&st, 0, sizeof st);
        if (seqkv_stat(s->db, s->cfg.tenants[t].name, &st))
            memset(&st, 0, sizeof st);
        pthread_mutex_lock(&s->smu);
        srv_tstats x = s->ts[t];
        const skv_server_tenant tcc = s->cfg.tenants[t];
        pthread_mutex_unlock(&s->smu);
        skv_rbuf_fmt(b, "tenant_%s:lookups=%" PRIu64 ",lookup_hits=%" PRIu64 ",lookup_misses=%" PRIu64
                ",gets=%" PRIu64 ",get_hits=%" PRIu64 ",get_misses=%" PRIu64
                ",tokens_served=%" PRIu64 ",bytes_served=%" PRIu64 ",puts=%" PRIu64
                ",tokens_put=%" PRIu64 ",new_tokens=%" PRIu64 ",dels=%" PRIu64
                ",errors=%" PRIu64 ",tokens=%" PRIu64 ",raw_bytes=%" PRIu64
                ",stored_bytes=%" PRIu64 ",ratio=%.3f,evictions=%" PRIu64 "\r\n",
             s->cfg.tenants[t].name, x.lookups, x.lookup_hits, x.lookup_misses, x.gets,
             x.get_hits, x.get_misses, x.tokens_served, x.bytes_served, x.puts, x.tokens_put,
             x.new_tokens, x.dels, x.errors, st.tokens, st.raw_bytes, st.stored_bytes,
             srv_ratio(st.raw_bytes, st.stored_bytes), st.evictions);
        const skv_server_tenant *tc = &tcc;
        skv_rbuf_fmt(b, "tenant_%s_limits:connections=%" PRIu64 "/%" PRIu64 ",inflight_bytes=%" PRIu64
                     "/%" PRIu64 ",put_rate=%" PRIu64 ",refused_busy=%" PRIu64 "\r\n",
                     tc->name, x.conns, tc->max_clients, x.inflight_bytes, tc->max_inflight,
                     tc->put_rate, x.busy);
        for (int l = 0; l < SEQKV_LEVELS; l++)
            if (st.level_tokens[l])
                skv_rbuf_fmt(b, "tenant_%s_level_%s:tokens=%" PRIu64 ",raw_bytes=%" PRIu64
                        ",stored_bytes=%" PRIu64 ",ratio=%.3f\r\n",
                     s->cfg.tenants[t].name, seqkv_level_name((seqkv_level)l),
                     st.level_tokens[l], st.level_raw[l], st.level_stored[l],
                     srv_ratio(st.level_raw[l], st.level_stored[l]));
        if (st.lossy_tokens)
            skv_rbuf_fmt(b, "tenant_%s_lossy:tokens=%" PRIu64 ",raw_bytes=%" PRIu64
                            ",stored_bytes=%" PRIu64 ",ratio=%.3f\r\n",
                         s->cfg.tenants[t].name, st.lossy_tokens, st.lossy_raw, st.lossy_stored,
                         srv_ratio(st.lossy_raw, st.lossy_stored));
    }
    skv_rbuf_fmt(b, "\r\n");
}

/* Commandstats and latencystats (those of them secp asks for), from one
 * copy of the counters */
static void section_cmdstats(skv_server *s, const char *secp, skv_rbuf *b)
{
    uint64_t calls[SRV_NCMD], usec[SRV_NCMD];
    char lc[32];
    pthread_mutex_lock(&s->smu);
    memcpy(calls, s->calls, sizeof calls);
    memcpy(usec, s->usec, sizeof usec);
    uint64_t(*hh)[SRV_NBUCKETS] = skv_malloc(sizeof s->hist);
    if (hh)
        memcpy(hh, s->hist, sizeof s->hist);
    pthread_mutex_unlock(&s->smu);
    if (want_section(secp, "commandstats")) {
        skv_rbuf_fmt(b, "# Commandstats\r\n");
        for (int i = 0; i < SRV_NCMD; i++) {
            const srv_cmd *d = srv_cmd_at(i);
            if (d && calls[i])
                skv_rbuf_fmt(b, "cmdstat_%s:calls=%" PRIu64 ",usec=%" PRIu64 ",usec_per_call=%.2f\r\n",
                     srv_cmd_lower(d->name, lc, sizeof lc), calls[i], usec[i], (double)usec[i] / (double)calls[i]);
        }
        skv_rbuf_fmt(b, "\r\n");
    }
    if (want_section(secp, "latencystats") && hh) {
        skv_rbuf_fmt(b, "# Latencystats\r\n");
        for (int i = 0; i < SRV_NCMD; i++) {
            const srv_cmd *d = srv_cmd_at(i);
            if (d && calls[i])
                skv_rbuf_fmt(b, "latency_percentiles_usec_%s:p50=%" PRIu64 ",p99=%" PRIu64
                        ",p99.9=%" PRIu64 "\r\n",
                     srv_cmd_lower(d->name, lc, sizeof lc), percentile(hh[i], calls[i], 0.50),
                     percentile(hh[i], calls[i], 0.99), percentile(hh[i], calls[i], 0.999));
        }
        skv_rbuf_fmt(b, "\r\n");
    }
    skv_free(hh);
}

int srv_info_report(skv_server *s, srv_job *j, const char *secp, skv_rbuf *b)
{
    if (want_section(secp, "server"))
        section_server(s, j, b);
    if (want_section(secp, "clients"))
        section_clients(s, j, b);
    if (want_section(secp, "memory"))
        section_memory(s, b);
    if (want_section(secp, "cache"))
        section_cache(s, b);
    if (want_section(secp, "maintenance"))
        section_maintenance(s, b);
    if (want_section(secp, "store")) {
        int rc = section_store(s, j, b);
        if (rc)
            return rc;
    }
    if (want_section(secp, "blobs"))
        section_blobs(s, j, b);
    if (want_section(secp, "remote"))
        section_remote(s, j, b);
    if (want_section(secp, "tenants"))
        section_tenants(s, j, b);
    if (want_section(secp, "commandstats") || want_section(secp, "latencystats"))
        section_cmdstats(s, secp, b);
    return b->oom ? SKV_ERR_NOMEM : SKV_OK;
}
