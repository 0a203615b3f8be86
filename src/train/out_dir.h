/* train.out_dir, the folder a run writes: one run at a time there (its
 * run.lock), what a run before left there (an unfinished run's checkpoints
 * refused, a finished run's set aside in ckpt.previous), room for the
 * checkpoints, one folder every rank sees, and still the run's own while it
 * trains. The step loop's calls (train.c), in the order a run makes them;
 * rank 0 looks and writes, every rank returns the outcome where it says so.
 * Not the checkpoints' own format or writes (checkpoint.h). */
#ifndef ST_TRAIN_OUT_DIR_H
#define ST_TRAIN_OUT_DIR_H

#include <stdint.h>

#include "metrics.h"
#include "session.h"

/* Before anything is written: a run that will save has room for its
 * checkpoints, and (started without --resume) no unfinished run's
 * checkpoints in out_dir; every rank returns the outcome. */
st_status st_out_dir_check(st_session *ses, const st_run_opts *opts);
/* Rank 0, once the set-up is done: out_dir made and locked, looked at again
 * under the lock. */
st_status st_out_dir_take(st_session *ses, const st_run_opts *opts);
/* Rank 0's first writes: a finished run's checkpoints set aside, a resumed
 * run's own later ones, metrics.jsonl opened (the run starts after step
 * `start`). */
st_status st_out_dir_first_writes(st_session *ses, const st_run_opts *opts, int64_t start, st_metrics *met);
/* Every rank: out_dir is one folder every rank sees (ZeRO's shards). */
st_status st_out_dir_shared(st_session *ses);
/* Rank 0, before it writes a checkpoint or the final weights: its run.lock
 * is still out_dir's. */
st_status st_out_dir_held(st_session *ses);

#endif
