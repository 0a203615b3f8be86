/* The time model: one optimizer step on a hardware configuration.
 *
 *   compute  = accum x (matrix FLOPs / (peak x efficiency)
 *                       + elementwise bytes / (memory bandwidth x mem_efficiency))
 *              On a GPU preset the FLOPs and bytes are the model's (cost.h:
 *              direct convolutions, as cuDNN and cuBLAS are charged). On the
 *              CPU they are what our kernels run (Winograd's products and
 *              transforms, weighted arithmetic-bound elements), forward's
 *              products at ST_TIME_CPU_FWD_EFF and backward's at
 *              ST_TIME_CPU_BWD_EFF of the calibrated sgemm rate, plus
 *              ST_TIME_CPU_PASS_S per layer pass.
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
 *              after the optimizer is exposed. ZeRO-2 reduces every
 *              micro-step's buckets: accum times the reductions and what
 *              each backward leaves exposed of them.
 *   optim    = the optimizer's bytes over memory bandwidth (host memory when
 *              offloaded, plus the PCIe copies).
 *   step     = compute + exposed + optim (+ ST_TIME_CPU_STEP_S on the CPU).
 * Efficiencies are assumptions (docs/planner.md): the fraction of the
 * datasheet peak a training step's matrix products reach; the CPU's are
 * measured on this project's machine against its calibrated sgemm rate. */
#ifndef ST_HW_TIMING_H
#define ST_HW_TIMING_H

#include <stdbool.h>
#include <stdint.h>

#include "cost.h"
#include "device.h"

/* The CPU constants (docs/planner.md, "The CPU"), fitted to profiler traces
 * of the mlp, cnn and gpt bench configs at 1 thread: the fraction of the
 * calibrated sgemm rate that forward's and backward's products reach
 * (backward's products have a transposed operand and a long reduction, which
 * OpenBLAS runs slower), the fraction of the memory bandwidth elementwise
 * loops reach, and the fixed costs of a layer pass (an OpenMP region, the
 * dispatch) and of a step (batch hand-over, loss read-back). */
#define ST_TIME_CPU_FWD_EFF 0.95
#define ST_TIME_CPU_BWD_EFF 0.85
#define ST_TIME_CPU_MEM_EFF 0.6
#define ST_TIME_CPU_PASS_S 3e-6
#define ST_TIME_CPU_STEP_S 5e-5

typedef struct st_time_opts {
    const st_hw_config *hw;
    bool mixed;        /* bf16/fp16 products at peak_bf16 */
    double efficiency; /* of the matrix peak; <= 0: the device default */
    int zero;          /* 0 DDP, 1, 2 */
    bool offload;
    int optim_states;
    double bucket_cap_mb;
    int64_t micro, accum;
    /* bytes a parameter takes on the wire (0: 4, fp32): the gradient buckets
     * (dist.grad_dtype: 4, or 2 when they travel in bf16/fp16), and ZeRO's
     * all-gather after the step (2 where bf16/fp16 shard the masters on a
     * GPU and the 16-bit copy is gathered; 4 otherwise: fp32 weights, or the
     * CPU's copy, floats holding 16-bit values) */
    int grad_bytes, gather_bytes;
} st_time_opts;

typedef struct st_time {
    double fwd_s, bwd_s; /* one micro-step */
    double compute_s;    /* all micro-steps of a step */
    double comm_s;       /* every collective of a step */
    double exposed_s;    /* the part not hidden behind backward */
    double optim_s;
    double step_s;
    double flops_per_step; /* per rank */
} st_time;

/* The matrix-product efficiency the model assumes for a device. */
double st_time_default_efficiency(const st_hw_device *d, bool mixed);

/* Time one step; `micro_cost` is the cost of the graph at the micro-batch,
 * n_params the model's trainable parameters. */
void st_time_estimate(const st_cost *micro_cost, int64_t n_params, const st_time_opts *o, st_time *out);

/* The ring all-reduce time of `bytes` over n ranks (exposed for tests). */
double st_time_allreduce(double bytes, int n, double busbw, double latency);

#endif
