/* The planner: for a run configuration and a hardware configuration, the
 * values a run would use (micro-batch, accumulation, precision, strategy),
 * the memory each device would hold and the predicted step time, with the
 * reason for each value chosen and a warning where it does not fit.
 *
 * Rules (each `auto` value; an explicit value always wins, with a warning
 * when the model predicts it will not fit):
 *   precision  fp32 on the CPU; bf16 from compute capability 8.0; fp16 with
 *              loss scaling below.
 *   strategy   DDP when the model states and one sample fit; else ZeRO-2
 *              (more than one rank); else (with checkpointing auto) the
 *              same recomputing activations; else ZeRO-2 with offload.
 *   micro      the largest divisor of batch_size / ranks that fits the
 *              device's memory with headroom; accumulation makes up the rest
 *              (micro x accum x ranks == batch_size).
 *   train.activation_checkpointing
 *              the first of off, selective (norms' and GELUs' outputs
 *              recomputed: a few element-wise passes) and blocks (a forward
 *              pass more, which the predicted step time includes) with which
 *              the micro-batch fits; with micro auto, recomputing only when
 *              not even a micro-batch of 1 fits without it (then the largest
 *              that fits with the first level that lets one fit), since
 *              accumulation is the cheaper way to a large batch. For the
 *              strategy, ZeRO-2 comes before checkpointing (no more traffic
 *              than DDP) and checkpointing before offload (PCIe copies every
 *              step).
 * An evaluation alone (eval_only) holds the weights and one forward graph:
 * no gradients, optimizer state or strategy, nothing recomputed; with
 * train.eval_batch_size and train.micro_batch_size auto its batch (the
 * micro-batch, which eval_batch_size auto follows) is the largest up to
 * train.batch_size over the ranks (and the validation samples over them)
 * that fits, or with train.eval_steps a training run's micro-batch (the
 * same samples as its evaluations); no step time is predicted.
 * Memory available: a GPU's memory less 10% and 1 GiB (context, NCCL and
 * allocator reserve); on the CPU, 85% of the memory available over the ranks
 * on the node. */
#ifndef ST_HW_PLANNER_H
#define ST_HW_PLANNER_H

#include "device.h"
#include "memory.h"
#include "model/model.h"
#include "scaletrain/config.h"
#include "timing.h"

typedef struct st_plan_input {
    const st_config *cfg; /* values still `auto` are chosen */
    st_model *model;      /* st_model_create_layout (or a real model) */
    int64_t seq_len;      /* tokens per sample; 0 for images */
    int64_t sample_in_bytes, sample_out_bytes; /* one sample in a loader buffer */
    int64_t data_bytes;   /* dataset held in host memory (counted on the CPU) */
    /* token files to be mapped (none yet): no memory a rank holds, but
     * address space, which an address-space limit (ulimit -v) counts; 0 in a
     * starting run, whose limit's room was read with them mapped */
    int64_t mapped_bytes;
    bool has_eval;        /* the run keeps an evaluation graph */
    bool eval_only;       /* an evaluation alone (scaletrain eval): plan_eval in planner.c */
    int64_t eval_samples; /* the validation samples (0: unknown), a bound on the evaluation's batch */
    int cores_per_rank;   /* for data.num_workers auto (the CPU) */
    double efficiency;    /* <= 0: the device default (timing.h) */
} st_plan_input;

/* train.activation_checkpointing, from least memory saved to most */
enum { ST_CKPT_OFF, ST_CKPT_SELECTIVE, ST_CKPT_BLOCKS };
const char *st_ckpt_name(int level); /* "off", "selective", "blocks" */
int st_ckpt_level(const char *name); /* ST_CKPT_OFF for anything else ("auto") */

typedef struct st_plan {
    st_hw_config hw;
    int ranks;
    bool ok; /* false: no plan (the warning says why) */
    int64_t micro, accum;
    char precision[8];
    char strategy[8]; /* ddp | zero1 | zero2 */
    bool offload;
    int checkpointing; /* activation checkpointing, as chosen or given: ST_CKPT_* */
    bool fused_gelu;   /* model.fused_gelu, as chosen or given (st_model_fused_gelu) */
    char micro_why[96], precision_why[96], strategy_why[160], checkpointing_why[96], fused_gelu_why[96];
    st_mem mem;
    int64_t mem_limit; /* bytes usable per device */
    bool fits;
    st_time time;
    double samples_per_s, tokens_per_s;
    double scaling; /* samples/s over ranks x one device's samples/s (same batch) */
    char warning[256];
    char fit_hint[512]; /* where the warning says it does not fit: what takes the memory and what would shrink
                           it */
    char micro_hint[192]; /* a micro-batch auto held small by a per-rank batch of few divisors: the batch that
                             runs larger ones */
} st_plan;

st_status st_plan_make(const st_plan_input *in, const st_hw_config *hw, st_plan *out);

/* The verdict on p's choices as they stand now (after the ranks agreed
 * on the most cautious of theirs, which may not be this rank's own plan):
 * p->mem, fits, warning and fit_hint recomputed for this rank's hardware,
 * the choices left as they are. in: the input p was made from. */
st_status st_plan_refit(const st_plan_input *in, st_plan *p);

/* Write the plan's choices into every `auto` key of cfg (micro-batch,
 * precision, strategy, activation checkpointing, the fused GELU), each
 * marked with its reason. */
void st_plan_apply(const st_plan *p, st_config *cfg);

/* "zero2+offload" etc. */
const char *st_plan_strategy_label(const st_plan *p, char *buf, int n);

#endif
