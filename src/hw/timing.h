/* The time model: one optimizer step on a hardware configuration.
 *
 *   compute  = accum x (matrix FLOPs / (peak x efficiency)
 *                       + elementwise bytes / (memory bandwidth x mem_efficiency))
 *   comm     = ring collectives over the gradient buckets: an all-reduce of X
 *              bytes over n ranks moves 2(n-1)/n X per rank and takes 2(n-1)
 *              steps (Patarasuk & Yuan 2009; NCCL's "bus bandwidth"
 *              convention), so t = 2(n-1)/n X / busbw + 2(n-1) latency;
 *              ZeRO reduce-scatters gradients and all-gathers weights, half of
 *              that each. Across nodes the ring runs at the network's share
 *              of a device when that is the slower link.
 *   exposed  = the last bucket (the first layers' gradients, ready only when
 *              backward ends) plus whatever of the other buckets backward of
 *              the last micro-step cannot hide; ZeRO's weight all-gather
 *              after the optimizer is exposed.
 *   optim    = the optimizer's bytes over memory bandwidth (host memory when
 *              offloaded, plus the PCIe copies).
 *   step     = compute + exposed + optim.
 * Efficiencies are assumptions (docs/planner.md): the fraction of the
 * datasheet peak a training step's matrix products reach. */
#ifndef ST_HW_TIMING_H
#define ST_HW_TIMING_H

#include <stdbool.h>
#include <stdint.h>

#include "cost.h"
#include "device.h"

typedef struct st_time_opts {
    const st_hw_config *hw;
    bool mixed;         /* bf16/fp16 products at peak_bf16 */
    double efficiency;  /* of the matrix peak; <= 0: the device default */
    int zero;           /* 0 DDP, 1, 2 */
    bool offload;
    int optim_states;
    double bucket_cap_mb;
    int64_t micro, accum;
} st_time_opts;

typedef struct st_time {
    double fwd_s, bwd_s;      /* one micro-step */
    double compute_s;         /* all micro-steps of a step */
    double comm_s;            /* every collective of a step */
    double exposed_s;         /* the part not hidden behind backward */
    double optim_s;
    double step_s;
    double flops_per_step;    /* per rank */
} st_time;

/* The matrix-product efficiency the model assumes for a device. */
double st_time_default_efficiency(const st_device *d, bool mixed);

/* Time one step; `micro_cost` is the cost of the graph at the micro-batch,
 * n_params the model's trainable parameters. */
void st_time_estimate(const st_cost *micro_cost, int64_t n_params, const st_time_opts *o, st_time *out);

/* The ring all-reduce time of `bytes` over n ranks (exposed for tests). */
double st_time_allreduce(double bytes, int n, double busbw, double latency);

#endif
