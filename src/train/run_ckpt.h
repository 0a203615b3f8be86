/* A run's checkpoints as its step loop takes them: the state one records
 * (step, sampler position, loss scale), whether the weights are whole
 * before one is saved, and the rescue: a run that fails where its state is
 * whole saves it before it stops. Not the checkpoints' format or writes
 * (checkpoint.h), nor when the loop saves (train.c). */
#ifndef ST_TRAIN_RUN_CKPT_H
#define ST_TRAIN_RUN_CKPT_H

#include <stdint.h>

#include "checkpoint.h"
#include "data/sampler.h"
#include "dist/dist.h"
#include "loss_sum.h"
#include "optim/optim.h"
#include "optim/scaler.h"
#include "session.h"

/* The remedy a run gone non-finite is told: optim.grad_clip only where it
 * is off. */
static inline const char *st_run_numeric_fix(const st_config *c) {
    return c->optim.grad_clip > 0 ? "lower optim.lr" : "lower optim.lr or set optim.grad_clip";
}

/* ck records step `step` at sampler position pos, the scaler's state and
 * whether the evaluation owed at `owed` is this step's. */
void st_run_ckpt_at(st_ckpt_state *ck, int64_t step, st_sampler_pos pos, const st_scaler *sc, int64_t owed);
/* Every rank, before the checkpoint of step `step`: an error (ST_ERR_NUMERIC)
 * where an update made a weight or a batch-norm statistic non-finite;
 * `last`: the last committed checkpoint, "" if none. */
st_status st_run_weights_finite_at(st_session *ses, int64_t step, const char *last);
/* A run failing with s: the finished steps saved where they are whole (the
 * rules in run_ckpt.c); returns s, its message saying what was saved. */
st_status st_run_rescue(st_session *ses, st_status s, st_ckpt_async **pending, int64_t whole,
                        st_sampler_pos pos, int64_t saved, st_ckpt_state *ck, const st_scaler *sc,
                        st_optim *opt, const st_ckpt_layout *lay, const st_dist *dd, st_loss_sum *ls,
                        st_run_result *r);

#endif
