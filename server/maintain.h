/* The server's background maintenance (server/maintain.c): self-calibration
 * and compaction on a thread of their own. */
#ifndef SKV_SERVER_MAINTAIN_H
#define SKV_SERVER_MAINTAIN_H
#include <stdint.h>

typedef struct skv_server skv_server;

/* INFO's maintenance figures */
typedef struct {
    uint64_t calibrations;         /* profiles that calibrated themselves */
    uint64_t compactions;          /* compaction passes */
    uint64_t recoded, merged;      /* records coded again; appended ones merged */
    uint64_t bytes_saved;
    uint64_t calibrations_deleted;
    uint64_t damaged;              /* records the last pass left (they fail their checks) */
    uint64_t progress_done, progress_total; /* of the pass running or last run */
    int running;                   /* a compaction */
    int calibrating;               /* a pass of seqkv_auto_calibrate (learning, when one is due) */
    double last_compact;           /* srv_now() of the last pass's end, 0: none */
} srv_mstat;

/* Start the thread (config compact-interval: seconds between compaction
 * passes, 0: only after a self-calibration) */
int srv_maintain_start(skv_server *s);
/* Puts were committed: see whether a profile crossed its threshold */
void srv_maintain_kick(skv_server *s);
/* Stop after the current step (a compaction stops between records) */
void srv_maintain_stop(skv_server *s);
void srv_maintain_stat(skv_server *s, srv_mstat *out);
#endif
