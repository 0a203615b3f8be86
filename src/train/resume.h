/* --resume: the checkpoint found, verified and loaded into the model and
 * optimizer, and this run's settings set against the checkpoint's run's:
 * what changed is said (a warning per change that alters the trajectory:
 * batch size, seed, data order, learning rate, schedule, data), and what
 * cannot change is refused. Every rank, together. Not the checkpoint's
 * format or search (checkpoint.h). */
#ifndef ST_TRAIN_RESUME_H
#define ST_TRAIN_RESUME_H

#include <stdbool.h>
#include <stdint.h>

#include "checkpoint.h"
#include "optim/optim.h"
#include "optim/scaler.h"
#include "session.h"

/* With --resume: *ck (this run's seed, rate, batch and data fingerprint
 * set) becomes the checkpoint's state, its sampler position counted in this
 * run's batches; the scaler's state and *resumed_owed (the checkpoint's
 * step owes its evaluation) come from it; with none found, step 0 (said).
 * data_crc: rank 0's fingerprint of the training data (0 elsewhere).
 * Without --resume nothing is done. Every rank resumes at the same step or
 * every rank fails. */
st_status st_run_resume(st_session *ses, const st_run_opts *opts, st_optim *opt, const st_ckpt_layout *lay,
                        st_scaler *sc, st_ckpt_state *ck, bool *resumed_owed, uint32_t data_crc);

#endif
