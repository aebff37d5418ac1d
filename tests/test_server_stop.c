/* Criterion suite: a server asked to stop while its background thread
 * learns a calibration or compacts, at a shape wide enough that either
 * takes seconds (8 layers x 8 kv heads x 128: 32 KiB a token). The
 * process exits 0 without waiting for the work to end, and the store opens
 * clean afterwards: every sequence put before is there, bit-exact. No
 * timing is asserted: a server that waited for the learning would still
 * pass, but only after it, and the suite's timeout would say so. */
#include <criterion/criterion.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "srvtest.h"
#include "testutil.h"

enum { LAYERS = 8, HEADS = 8, DIM = 128, T = 512, NSEQ = 8 };
#define TOKEN_BYTES ((size_t)LAYERS * 2 * HEADS * DIM * 2)

/* Sequence i: its tokens and KV (bf16 of moderate magnitude, seeded) */
static void make_seq(int i, int32_t *tok, uint8_t *kv)
{
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
    for (int t = 0; t < T; t++)
        tok[t] = 1000 * (i + 1) + t;
    for (size_t j = 0; j < T * TOKEN_BYTES / 2; j++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const uint16_t v = (uint16_t)(0x3c00u | (x & 0x03ffu) | ((x >> 20) & 0x8000u));
        kv[2 * j] = (uint8_t)v, kv[2 * j + 1] = (uint8_t)(v >> 8);
    }
}

static uint64_t maint(seqkv_client *c, const char *key)
{
    return srv_info_num(c, "maintenance", key);
}

/* Puts NSEQ sequences (128 MiB) to a profile that calibrates itself after
 * the last, then compacts what it stored raw; waits until the background
 * thread is at the calibration (or the compaction), stops the server; then
 * a new server on the same store serves them all exactly. */
static void stop_during(int compaction)
{
    srv s;
    char cfg[192];
    snprintf(cfg, sizeof cfg, "tenant default uid %u\ntenant default admin\ncompact-interval 0\n",
             (unsigned)getuid());
    srv_start(&s, cfg);
    seqkv_client *c = conn(&s);
    char autocal[32];
    snprintf(autocal, sizeof autocal, "%d", NSEQ * T);
    seqkv_reply *r = CMD(c, "KV.PROFILE", "SET", "w", "layers", "8", "kv_heads", "8", "head_dim",
                         "128", "dtype", "bf16", "level", "ctx", "auto-calibrate", autocal);
    cr_assert_eq(r->type, SEQKV_REPLY_STATUS, "%s", r->str);
    seqkv_reply_free(r);
    int32_t *tok = malloc(NSEQ * T * sizeof *tok);
    uint8_t *kv = malloc(NSEQ * T * TOKEN_BYTES);
    cr_assert(tok && kv);
    int busy = 0;
    for (int i = 0; i < NSEQ; i++) {
        make_seq(i, tok + i * T, kv + (size_t)i * T * TOKEN_BYTES);
        size_t stored;
        cr_assert_eq(seqkv_client_put(c, "w", tok + i * T, T, kv + (size_t)i * T * TOKEN_BYTES,
                                      T * TOKEN_BYTES, &stored), 0, "%s", seqkv_error_detail());
    }
    const char *key = compaction ? "compaction_running" : "self_calibration_running";
    for (int k = 0; compaction && k < 60000 && maint(c, "self_calibrations") < 1; k++)
        sleep_ms(1);
    for (int k = 0; k < 4000 && !busy; k++) {
        busy = maint(c, key) == 1;
        if (!busy)
            sleep_ms(2);
    }
    seqkv_client_close(c);
    if (!busy)
        cr_log_info("%s was never seen at 1: the stop did not meet the work", key);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cr_assert_eq(srv_stop(&s), 0, "exit 0");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    cr_log_info("%s: the server stopped in %.2f s", key,
                (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    /* the store opens clean, with everything put */
    srv s2;
    srv_start_in(&s2, s.dir, cfg);
    c = conn(&s2);
    for (int i = 0; i < NSEQ; i++) {
        void *got;
        size_t len;
        cr_assert_eq(seqkv_client_get_alloc(c, "w", tok + i * T, T, 0, &got, &len), 0, "%s",
                     seqkv_error_detail());
        cr_assert_eq(len, T * TOKEN_BYTES);
        cr_assert_eq(memcmp(got, kv + (size_t)i * T * TOKEN_BYTES, len), 0, "sequence %d exact", i);
        seqkv_client_free(got);
    }
    seqkv_client_close(c);
    cr_assert_eq(srv_stop(&s2), 0);
    free(tok);
    free(kv);
}

Test(server_stop, sigterm_during_a_self_calibration, .timeout = 120)
{
    stop_during(0);
}

Test(server_stop, sigterm_during_a_compaction, .timeout = 120)
{
    stop_during(1);
}
