/* What a run holds: data, model, graphs and the chosen sizes. Shared by the
 * train and eval paths (train.c, eval.c). Internal to src/train. */
#ifndef ST_TRAIN_SESSION_H
#define ST_TRAIN_SESSION_H

#include <stdio.h>

#include "comm/comm.h"
#include "data/dataset.h"
#include "model/model.h"
#include "progress.h"
#include "scaletrain/train.h"

typedef struct st_eval_dev st_eval_dev; /* eval_device.h */

typedef struct st_session {
    st_config *cfg;
    st_dataset train, val;
    bool has_train, has_val;
    st_model *model;
    st_model_graph eval_graph;
    st_eval_dev *eval_dev; /* device evaluation's pinned buffers, events and loss sum (eval_device.h) */
    st_device *dev; /* train.device: NULL = the CPU, else this rank's GPU (model and graphs live there) */
    FILE *out;
    int threads;
    st_comm *comm; /* one per process; local (world 1) without a launcher */
    st_comm *dcomm; /* NCCL between the ranks' GPUs (gradients, parameters), or NULL (see uses_nccl) */
    int rank, world;
    bool agreed_error; /* the failure is one every rank saw (no abort needed) */
    bool save;         /* the run saves (--no-save not given): every rank knows, rank 0 writes */
} st_session;

/* Start the communicator (rank and world), open the device (train.device),
 * open data (train unless eval_only), fill `auto` values, create the model
 * (on the device). */
st_status st_session_open(st_session *s, st_config *cfg, const st_run_opts *opts, bool eval_only);
void st_session_close(st_session *s);

/* Evaluate on the validation set (or its first cfg->train.eval_steps batches). */
st_status st_session_evaluate(st_session *s, double *loss, double *accuracy, bool *has_accuracy);

double st_now(void);

/* The run's gradients go through NCCL: a CUDA device and several ranks (or
 * dist.comm nccl). */
bool st_session_uses_nccl(const st_session *s);

#endif
