/* The server's background maintenance (one thread of its own): a profile
 * that crosses its auto-calibrate threshold learns its calibration, and
 * the store is compacted (seqkv_compact) after a calibration and every
 * compact-interval seconds. Neither holds up a get: learning holds no
 * lock, and a compaction step takes the writer lock for one record (puts
 * wait at most that long) and the readers' lock only to swap it in.
 * Every second it also removes a bounded batch of expired blobs. */
#include <malloc.h>
#include <time.h>

#include "maintain.h"
#include "seqkv.h"
#include "server_int.h"

/* compaction progress into INFO's figures; stops when the server does */
static int on_progress(void *ctx, uint64_t done, uint64_t total)
{
    skv_server *s = ctx;
    pthread_mutex_lock(&s->mmu);
    s->mstat.progress_done = done;
    s->mstat.progress_total = total;
    const int stop = s->mstop;
    pthread_mutex_unlock(&s->mmu);
    return stop;
}

static void run_once(skv_server *s, int compact)
{
    int learned = 0;
    pthread_mutex_lock(&s->mmu);
    s->mstat.calibrating = 1;
    pthread_mutex_unlock(&s->mmu);
    int rc = seqkv_auto_calibrate(s->db, NULL, &learned);
    if (rc == SKV_ERR_CANCELLED)
        srv_log(s, "self-calibration stopped (the server is stopping)");
    else if (rc)
        srv_log(s, "self-calibration: %s", seqkv_error_detail());
    pthread_mutex_lock(&s->mmu);
    s->mstat.calibrating = 0;
    s->mstat.calibrations += (uint64_t)learned;
    const int stop = s->mstop;
    if (learned || compact)
        s->mstat.running = 1;
    pthread_mutex_unlock(&s->mmu);
    if (learned)
        srv_log(s, "%d profile%s calibrated %s", learned, learned > 1 ? "s" : "",
                learned > 1 ? "themselves" : "itself");
    /* the learning's memory (its sample, hundreds of MiB at a real
     * model's shape) back to the system, not kept in the allocator's
     * arenas -- but not after a kick that learned nothing: the memory the
     * puts just freed is what the next put reuses warm (a fresh page costs
     * ~15x a warm one here), and it goes back once puts pause
     * (SRV_IDLE_TRIM) */
    if (learned)
        malloc_trim(0);
    if (stop || !(learned || compact))
        return;
    seqkv_compact_stats st;
    double t0 = srv_now();
    rc = seqkv_compact(s->db, NULL, on_progress, s, &st);
    skv_warm_trim();
    malloc_trim(0);
    pthread_mutex_lock(&s->mmu);
    s->mstat.running = 0;
    s->mstat.compactions++;
    s->mstat.last_compact = srv_now();
    if (!rc) {
        s->mstat.recoded += st.recoded;
        s->mstat.merged += st.merged;
        s->mstat.bytes_saved += st.bytes_before - st.bytes_after;
        s->mstat.calibrations_deleted += st.calibrations_deleted;
        s->mstat.damaged = st.damaged;
    }
    pthread_mutex_unlock(&s->mmu);
    if (rc)
        srv_log(s, "compaction: %s", seqkv_error_detail());
    else if (st.recoded || st.calibrations_deleted)
        srv_log(s, "compaction: %llu records coded again (%llu appended ones merged), %llu -> %llu "
                "bytes, %llu calibrations deleted (%.1f s)", (unsigned long long)st.recoded,
                (unsigned long long)st.merged, (unsigned long long)st.bytes_before,
                (unsigned long long)st.bytes_after, (unsigned long long)st.calibrations_deleted,
                srv_now() - t0);
}

#define SRV_SWEEP_EVERY 1.0 /* seconds between sweeps of expired blobs */
#define SRV_IDLE_TRIM 5.0   /* seconds without puts before their freed memory goes back */
#define SRV_SWEEP_MAX 1000  /* keys a sweep removes at most */

static void *maintain_main(void *arg)
{
    skv_server *s = arg;
    const double every = (double)s->cfg.compact_interval;
    double next = srv_now() + every, next_sweep = srv_now() + SRV_SWEEP_EVERY, last_put = 0;
    int untrimmed = 0; /* puts came since the last malloc_trim */
    pthread_mutex_lock(&s->mmu);
    while (!s->mstop) {
        if (!s->mkick) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            double wait = every > 0 ? next - srv_now() : 3600.0;
            if (wait > next_sweep - srv_now())
                wait = next_sweep - srv_now();
            if (wait < 0)
                wait = 0;
            ts.tv_sec += (time_t)wait;
            ts.tv_nsec += (long)((wait - (double)(time_t)wait) * 1e9);
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&s->mcv, &s->mmu, &ts);
        }
        if (s->mstop)
            break;
        if (srv_now() >= next_sweep) {
            /* expired blobs, a bounded batch a second */
            pthread_mutex_unlock(&s->mmu);
            size_t removed = 0;
            if (seqkv_blob_sweep(s->db, SRV_SWEEP_MAX, &removed))
                srv_log(s, "expiry sweep: %s", seqkv_error_detail());
            next_sweep = srv_now() + SRV_SWEEP_EVERY;
            if (untrimmed && srv_now() - last_put >= SRV_IDLE_TRIM) {
                skv_warm_trim(); /* (the big buffers kept warm for the next put) */
                malloc_trim(0);
                untrimmed = 0;
            }
            pthread_mutex_lock(&s->mmu);
            continue;
        }
        const int compact = every > 0 && srv_now() >= next;
        if (!s->mkick && !compact)
            continue;
        if (s->mkick) {
            untrimmed = 1;
            last_put = srv_now();
        }
        s->mkick = 0;
        pthread_mutex_unlock(&s->mmu);
        run_once(s, compact);
        if (compact)
            next = srv_now() + every;
        pthread_mutex_lock(&s->mmu);
    }
    pthread_mutex_unlock(&s->mmu);
    return NULL;
}

int srv_maintain_start(skv_server *s)
{
    pthread_mutex_init(&s->mmu, NULL);
    pthread_cond_init(&s->mcv, NULL);
    s->mstarted = pthread_create(&s->mthr, NULL, maintain_main, s) == 0;
    return s->mstarted ? 0 : skv_error(SKV_ERR_IO, "pthread_create failed");
}

void srv_maintain_kick(skv_server *s)
{
    if (!s->mstarted)
        return;
    pthread_mutex_lock(&s->mmu);
    s->mkick = 1;
    pthread_cond_signal(&s->mcv);
    pthread_mutex_unlock(&s->mmu);
}

void srv_maintain_stop(skv_server *s)
{
    if (!s->mstarted)
        return;
    seqkv_stop_background(s->db); /* (a calibration under way stops within a second) */
    pthread_mutex_lock(&s->mmu);
    s->mstop = 1;
    pthread_cond_signal(&s->mcv);
    pthread_mutex_unlock(&s->mmu);
    pthread_join(s->mthr, NULL);
    s->mstarted = 0;
}

void srv_maintain_stat(skv_server *s, srv_mstat *out)
{
    if (!s->mstarted) {
        *out = (srv_mstat){0};
        return;
    }
    pthread_mutex_lock(&s->mmu);
    *out = s->mstat;
    pthread_mutex_unlock(&s->mmu);
}
