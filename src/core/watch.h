/* A stall watch: while the caller's thread is inside a wait that may never
 * return (a read or write of storage that stopped answering: a hung network
 * file system; a device whose queued work never ends), a ticker
 * (core/ticker.h) ends the process once the wait passes its limit, less any
 * time the process was stopped, with one line on standard error naming who
 * waited, for what, how long, the setting that sets the limit and the
 * likely cause. Nothing else can end such a wait: the thread is inside the
 * kernel or the driver and returns no status; under mpirun the other ranks
 * are ended with the process.
 *
 * Used by the checkpoint's writes (train/checkpoint.c:
 * train.checkpoint_timeout_s), the run's other reads and writes of
 * train.out_dir and its weights (train/train.c's store watch: metrics
 * lines, the final weights, --resume and --init reads; the same key), and
 * the step loop's own data reads (data.timeout_s: a loader with 0 workers,
 * the evaluations), and the host's waits for a GPU and its readings of it
 * (cuda/device.cu, train/gpumon.c: train.device_timeout_s). */
#ifndef ST_CORE_WATCH_H
#define ST_CORE_WATCH_H

#include "scaletrain/status.h"

typedef struct st_watch st_watch;

/* The cause a storage wait's line gives; a wait for a GPU's driver. */
#define ST_WATCH_STORAGE "the storage stopped answering (a hung network file system?)"
#define ST_WATCH_GPU                                                                                         \
    "a GPU that stopped answering (the kernel log, dmesg, names the driver's Xid errors; nvidia-smi would "  \
    "wait the same way)"

/* A watch with this limit (> 0). who: the line's start ("rank 0 of 2 (host
 * h, pid p)"); knob: the setting, named in the line; cause: what likely
 * holds the wait (ST_WATCH_STORAGE); after: what the line says after it
 * (where the work stands). Copied. */
st_status st_watch_start(double limit_s, const char *who, const char *knob, const char *cause,
                         const char *after, st_watch **out);
/* The caller waits from now on, for `what` (copied: "reading validation
 * batch 3"), or since t0 (st_ticker_now's clock; st_watch_begin_at). NULL
 * watch: nothing. */
void st_watch_begin(st_watch *w, const char *what);
void st_watch_begin_at(st_watch *w, const char *what, double t0);
/* As st_watch_begin, with this wait's own limit (> 0; the ticker's period
 * stays the watch's: set by its smallest limit). */
void st_watch_begin_limit(st_watch *w, const char *what, double limit_s);
void st_watch_end(st_watch *w);
/* A watch for one wait, begun at once (as st_watch_start, then
 * st_watch_begin(what)); stopped with st_watch_stop when the wait ends.
 * NULL, the error cleared, when limit_s <= 0 or it cannot start: the wait
 * goes on unwatched. */
st_watch *st_watch_one(double limit_s, const char *who, const char *knob, const char *cause,
                       const char *after, const char *what);
/* Stop and join the ticker; NULL is fine. */
void st_watch_stop(st_watch *w);

#endif
