/* Training and evaluation runs: the step loop that `scaletrain train` and
 * `scaletrain eval` drive. Rank 0 prints; results come back in st_run_result. */
#ifndef SCALETRAIN_TRAIN_H
#define SCALETRAIN_TRAIN_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "scaletrain/config.h"
#include "scaletrain/status.h"

typedef struct st_run_opts {
    const char *init; /* weights (safetensors) to start from, or NULL */
    FILE *out;        /* where progress and the summary go (stdout when NULL) */
    bool quiet;       /* no progress or summary (the JSON line is still printed when json) */
    bool json;        /* end with one JSON object on its own line */
    bool save;        /* write out_dir/model.safetensors at the end */
    const char
        *resume; /* "auto" (latest good checkpoint in out_dir/ckpt, if any) or a checkpoint directory */
    /* Set non-zero (from a signal handler, on whichever thread it runs: a
     * lock-free atomic) to stop: the step loop saves a checkpoint after the
     * current step and returns ST_ERR_INTERRUPTED. May be NULL. */
    atomic_int *stop;
    /* Called, when not NULL, with an error that every rank of a run of
     * several returns alike (a configuration difference, a batch the ranks
     * cannot split; not ST_ERR_INTERRUPTED), before the ranks' communicator closes and with a
     * barrier after it: each rank's report is out before any rank exits (a
     * launcher ends the others when the first exits with an error). */
    void (*report_agreed_error)(st_status s);
    /* The weights file --init resolved to, and its checkpoint's step (-1: a
     * file named directly, or a run's final weights), where the command
     * resolved it already (eval, for the model the weights record): the run
     * loads that file without looking again. "" otherwise. */
    char init_weights[4096];
    int64_t init_step;
    /* A look at the configuration alone (a launcher's, st_cli_run_args): the
     * file and --set are read; --init is not, and nothing is validated (the
     * ranks do both, and say what is wrong). */
    bool config_only;
} st_run_opts;

typedef struct st_run_result {
    int64_t steps, samples, tokens;
    int64_t start_step;    /* the step a resumed run started from (0 otherwise) */
    char checkpoint[4096]; /* the last checkpoint committed ("" when none; also one whose save failed
                            * after its commit: whole, and --resume auto takes it) */
    double seconds;        /* training loop wall time, evaluation excluded */
    double samples_per_s, tokens_per_s;
    double train_loss; /* mean over the last log window */
    double first_loss; /* loss of the first step */
    bool has_eval, has_accuracy;
    double eval_loss, eval_accuracy;
    double gflops_per_s;       /* model FLOPs (3x forward) per second of training */
    double step_ms_median;     /* median wall time of one optimizer step */
    double data_wait_s;        /* time the step loop waited for batches */
    double data_wait_fraction; /* of the training time */
    /* data-parallel runs (ranks > 1) */
    int ranks, grad_buckets;
    bool stop_said; /* a stop every rank agreed on, which rank 0 says: another rank's ST_ERR_INTERRUPTED
                       need not be said again */
    int stop_signal; /* ... the signal that asked it (the largest any rank caught), or 0 where unknown */
    bool grad_zero_copy;         /* the gradient arena is in the shared segment: buckets reduce without copies
                                    (src/comm/comm_shm.c) */
    double comm_ms;              /* mean per step: waiting for gradient all-reduces after backward */
    double comm_overlap;         /* of the time from the first bucket's start to the last one's end,
                                    the part that lay behind backward (a long backward fills it whatever
                                    the later buckets do: comm_hidden is the hidden share of the all-reduces) */
    double first_bucket_lead_ms; /* mean per step: the first bucket started this long before backward ended */
    double comm_hidden;          /* of the time some bucket's collectives were in flight, the part before
                                    backward ended: the fraction of all-reduce time hidden behind backward */
    bool replicas_identical;     /* after the last step every rank's parameters had the same bits (compared
                                    by hash: st_agree_replicas; a difference fails the run) */
    int64_t grad_syncs;          /* backward passes whose buckets were reduced across the ranks: one per step
                                    (its last micro-step) for ddp and zero1, one per micro-step for zero2 */
    double activation_mib;       /* the training graph's activations and their gradients, per micro-batch */
    int fused_gelu_fwd, fused_gelu_bwd; /* the training graph's products that ran GELU in their epilogue
                                           (model.fused_gelu on a CUDA device), forward and backward */
    int fused_residual;                 /* its products that ran the residual's add (model.fused_residual) */
    int64_t attention_cudnn_calls;      /* attention forwards and backwards cuDNN ran on this rank's GPU
                                           (model.attention_kernel=cudnn), over the whole run */
    int64_t bias_grad_epilogues;        /* linear layers' bias gradients cuBLASLt's epilogue summed on this
                                           rank's GPU (model.fused_bias_grad), over the whole run */
    int64_t matmul_tuned, matmul_tune_switched; /* model.matmul_tune on this rank's GPU: matrix-product plans
                                                   whose algorithm was timed, and of them those that kept
                                                   another than cuBLASLt's heuristic's first */
    int64_t matmul_tune_restored; /* matrix-product plans that took, untimed, the algorithm an earlier run in
                                     out_dir timed (out_dir/matmul-algos-rank<R>.bin) */
    double matmul_tune_first_ms, matmul_tune_chosen_ms; /* the products that took those plans over the run, at
                                                           the times measured a call: with the heuristic's
                                                           first algorithm, and with the one kept */
    /* fp16 (has_loss_scale): the dynamic loss scale at the end and the steps
     * skipped for an overflow (over the whole run, a resumed one included) */
    bool has_loss_scale;
    double loss_scale;
    int64_t skipped_steps;
    int64_t skipped_steps_here; /* of them, this process's run's (skipped_steps less the resumed checkpoint's) */
    /* memory this rank holds (every run; measured, with the formula's prediction: docs/distributed.md) */
    char strategy[8]; /* ddp | zero1 | zero2 */
    bool deterministic;
    int64_t optim_state_bytes; /* optimizer state allocated on this rank */
    bool optim_offload;        /* ... in host memory, the parameters on a GPU (optim.offload) */
    double optim_offload_early; /* offloaded: the fraction of gradient copies queued during backward */
    int64_t optim_state_bytes_predicted;
    int64_t grad_bytes;           /* gradient bytes resident after the last step */
    int64_t grad_peak_bytes;      /* the most seen resident at a backward hook or after a step */
    int64_t grad_bytes_predicted; /* between steps */
    int64_t grad_stage_bytes; /* of grad_bytes: ZeRO-2's staging of its buckets on a device (0 elsewhere) */
    bool masters_sharded; /* ZeRO with bf16/fp16 on several ranks: each holds its shard's fp32 masters */
    int64_t master_bytes; /* fp32 master weights held (resident pages on the host) */
    int64_t master_bytes_predicted;
    /* on a CUDA device: the most device memory the run held at once (the
     * arenas and cuBLASLt's workspace, st_device_mem); 0 on the CPU */
    int64_t device_mem_peak_bytes;
    /* scaletrain eval: the batch it evaluated in (train.eval_batch_size, or the planner's: the
     * largest that fits the device beside the weights, up to train.batch_size over the ranks) */
    int64_t eval_batch_size;
    /* the last evaluation's validation samples (all, or train.eval_steps' batches); 0 without one */
    int64_t eval_samples;
    /* on a CUDA device: how many times the host waited for a whole device
     * stream inside the step loop (reading the loss and a logged gradient
     * norm, fp16's overflow check, checkpoints, evaluation: docs/cuda.md,
     * "Synchronisation in the step loop"); 0 on the CPU */
    int64_t device_stream_waits;
    /* rank 0: where its last text sample (log.sample_every) was drawn: the
     * GPU's name (st_device_name) or "cpu"; "" when it drew none */
    char sample_device[128];
} st_run_result;

/* Train as `cfg` says. The planner fills `auto` values in cfg. */
st_status st_train(st_config *cfg, const st_run_opts *opts, st_run_result *res);
/* The checkpoint `train --resume auto` would continue from: the latest good
 * one in cfg's train.out_dir/ckpt (the path goes to dir), *found false when
 * there is none. Checks checksums; reports nothing. */
st_status st_train_latest_checkpoint(const st_config *cfg, char *dir, size_t size, bool *found);
/* Evaluate opts->init (required) on the validation data. */
st_status st_evaluate(st_config *cfg, const st_run_opts *opts, st_run_result *res);

#endif
