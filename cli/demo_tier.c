/* The demo's hot and cold GETs (cli.h, demo_tier_times): the same
 * prefixes fetched in process from the store the demo's server left, once
 * with no hot tier (every GET reads, verifies and decodes its records) and
 * once from a tier a first pass filled. */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "seqkv.h"

int demo_tier_times(const char *dir, const char *key, const cli_session *S, const uint32_t *sess,
                    const uint32_t *len, size_t count, double *cold, double *hot)
{
    int rc = 0;
    for (int pass = 0; pass < 2 && !rc; pass++) {
        seqkv_options o = SEQKV_OPTIONS_INIT;
        o.quiet = 1;
        o.read_only = 1;
        o.master_key = key;
        o.cache_bytes = pass ? 4ull << 30 : 0;
        seqkv *db;
        if ((rc = seqkv_open(dir, &o, &db)))
            return rc;
        for (size_t i = 0; i < count && !rc; i++) {
            const cli_session *s = &S[sess[i]];
            char tn[32];
            snprintf(tn, sizeof tn, "tenant%d", s->tenant);
            seqkv_view *v = NULL;
            size_t got;
            /* a first get, untimed, sizes the buffer (and fills the tier in
             * the hot pass); the timed one copies the KV out, as a GET does */
            rc = seqkv_get_view(db, tn, "demo", s->tok, len[i], &(seqkv_get_opts){.want = len[i]}, &v, &got);
            size_t bytes = rc ? 0 : seqkv_view_bytes(v);
            seqkv_view_free(v);
            void *buf = rc ? NULL : malloc(bytes);
            if (!rc && !buf)
                rc = SKV_ERR_NOMEM;
            double t0 = cli_now();
            if (!rc)
                rc = seqkv_get(db, tn, "demo", s->tok, len[i], &(seqkv_get_opts){.want = len[i]}, buf, bytes, &got);
            (pass ? hot : cold)[i] = cli_now() - t0;
            free(buf);
            cli_progress(pass ? "demo: hot GETs" : "demo: cold GETs", i + 1, count);
        }
        seqkv_close(db);
    }
    return rc;
}
