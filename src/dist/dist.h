/* The data-parallel step on N ranks, whatever the strategy: what happens to
 * gradients around each micro-step's backward, the global gradient norm and
 * clipping, and the parameters after the optimizer. The trainer (train.c)
 * calls, per optimizer step:
 *
 *   st_dist_step_begin                      zero the gradients this rank holds
 *   for each micro-step k < accum:
 *       forward; st_dist_micro_begin; backward(seed st_dist_backward_seed); st_dist_micro_end
 *   st_dist_grad_norm, st_dist_grad_scale   global norm; clipping
 *   optimizer over [st_dist_range)          this rank's shard (all of it for DDP)
 *   st_dist_step_end                        all-gather the parameters (ZeRO)
 *
 * Strategies (dist.strategy):
 *   ddp    every rank holds every gradient and the whole optimizer state;
 *          buckets are all-reduced (averaged) during the last micro-step's
 *          backward (ddp.h).
 *   zero1  the optimizer state is sharded (zero.h): rank r holds the moments
 *          of its shard only, 1/N of them. The full gradient is still
 *          accumulated on every rank; in the last micro-step's backward each
 *          bucket's pieces are reduced (averaged) to their owners, each rank
 *          updates its shard, and the parameters are all-gathered.
 *   zero2  the gradients are sharded too: every micro-step's buckets are
 *          reduced (summed) to their owners during backward and each rank
 *          then gives back the parts outside its shard (their owners hold
 *          the sums), so between steps a rank holds 1/N of the gradients;
 *          the owner's shard keeps the running sum, and the next micro-step's
 *          backward adds into it (the others add into zero pages), so the
 *          next reduction yields the new running sum. Divided by N after the
 *          last micro-step, as DDP's average.
 *
 * Deterministic mode (dist.deterministic): the same bits as one rank
 * accumulating the same micro-batches, whatever N. Each micro-step's
 * gradient is computed into a zeroed arena (backward seed 1/(N*accum)) and
 * folded into an accumulator in global micro-batch order: rank r owns its
 * shard, receives every rank's gradient of that shard with an all-to-all,
 * and adds them in rank order. The sampler interleaves micro-batches (rank
 * r's micro-step k is global micro-batch k*N + r), so the fold order is
 * micro-batch 0, 1, 2, ... of the global batch, as on one rank. DDP then
 * all-gathers the folded shards; ZeRO keeps them. The gradient norm is a sum
 * of per-block sums in block order (zero.h), also independent of N. What
 * gives identical bits is stated in docs/distributed.md.
 *
 * Parameters on a CUDA device (p->dev): `comm` is then the NCCL communicator
 * (st_comm_nccl_init) when there are several ranks, and the buckets are
 * all-reduced (DDP) or reduced to their owners (ZeRO) on the device (ddp.h);
 * ZeRO's arenas are padded there and its parameters all-gathered there.
 * ZeRO-2 on several devices keeps only its shard of gradients (graph.h
 * grads_sharded) and stages its buckets (ddp.h ST_DDP_GRADS_STAGED): the
 * host's arithmetic, the running sum in the shard, without its page
 * release (docs/distributed.md). Deterministic
 * mode is not written for a device (an error). The step zeroes the gradients
 * there and the trainer takes the norm and clips through st_optim_clip over
 * the optimizer's range, with st_dist_sumsq_across adding the shards' sums
 * (st_dist_grad_norm and st_dist_grad_scale take host arenas).
 *
 * Not here: the bucket plan (ddp.c); sync batch-norm (dist.sync_batchnorm:
 * the layer reduces its statistics through the graph's allreduce_sum hook,
 * which train.c points at the communicator; src/layers/batchnorm.c). */
#ifndef ST_DIST_DIST_H
#define ST_DIST_DIST_H

#include "comm/comm.h"
#include "ddp.h"
#include "model/graph.h"
#include "scaletrain/config.h"
#include "zero.h"

typedef enum st_dist_mode { ST_DIST_DDP = 0, ST_DIST_ZERO1, ST_DIST_ZERO2 } st_dist_mode;

typedef struct st_dist {
    st_comm *comm;
    st_params *p;
    int rank, world;
    st_dist_mode mode;
    bool deterministic;
    /* fp16 on several ranks (not deterministic): backward's seed divided by
     * the ranks too, as deterministic mode does, and the reductions sum:
     * each rank's float16 gradients are then the size of one rank's with
     * the whole batch, so N ranks overflow (and skip steps) where one rank
     * does, at the same loss scale, where averaging after the reduction
     * made them N times larger */
    bool presum;
    /* Micro-step k of rank r is the step's global micro-batch k (slice
     * k * world + r, as the sampler's `interleave`): deterministic mode's
     * fold order, and dist.sync_batchnorm's, whose statistics over the ranks'
     * micro-batches k are then those of one rank's micro-batch k with the
     * whole batch, also when they accumulate */
    bool interleave;
    int64_t accum; /* micro-steps per step on each rank */
    st_shard sh;   /* ZeRO and deterministic: the shards */
    st_ddp ddp;    /* the buckets (world > 1, not deterministic) */
    bool buckets;
    float *acc;               /* deterministic: (S) this rank's folded shard */
    float *recv;              /* deterministic: (N * S) every rank's micro-gradient of this shard */
    double *blocks;           /* (N * S / ST_SHARD_ALIGN) block sums of squares for the norm (host) */
    double *dblocks;          /* deterministic mode on a device: the same there */
    int64_t grad_peak_nbytes; /* the most gradient bytes resident (measured) */
} st_dist;

/* Parse dist.strategy (auto must have been resolved). */
st_status st_dist_mode_parse(const char *strategy, st_dist_mode *mode);
const char *st_dist_mode_name(st_dist_mode mode);

/* Pad p's arenas to N*S elements (zero.h; on a device only for ZeRO and
 * deterministic mode) and, for ZeRO with bf16/fp16 on several ranks, shard
 * the fp32 masters (st_params_shard_masters: rank r keeps [r*S, (r+1)*S)).
 * The trainer calls it before it builds the training graph, so that the
 * whole masters are given back before the activations take their memory;
 * st_dist_init calls it too (a no-op the second time, and on a device where
 * the model was laid out so: st_dist_layout). */
st_status st_dist_shard_params(st_comm *comm, const st_config *cfg, st_params *p);

/* How rank `rank` of `world` lays out a training model's arenas (graph.h
 * st_params_layout; all zero: whole): on a device, padded where
 * st_dist_shard_params would pad them, and sharded where it would shard
 * them, so that it has nothing to copy or give back (the set-up held the
 * whole fp32 weights and gradients beside the shards). On the host they
 * are laid out whole, padded and given back by pages there (the copies
 * make them page-aligned for the pages ZeRO gives back). */
st_params_layout st_dist_layout(const st_config *cfg, bool on_device, int world, int rank);

/* Set up for model parameters p and the training graph g:
 * st_dist_shard_params, the buckets, the deterministic buffers. */
st_status st_dist_init(st_dist *d, st_comm *comm, const st_config *cfg, st_params *p, const st_graph *g,
                       int64_t accum);
void st_dist_free(st_dist *d); /* accepts a zeroed st_dist */

/* The arena range this rank's optimizer updates: [0, P) for DDP, its shard for ZeRO. */
void st_dist_range(const st_dist *d, int64_t *lo, int64_t *hi);

/* The global index (within the step) of this rank's micro-step k. */
int64_t st_dist_micro_index(const st_dist *d, int64_t k);

st_status st_dist_step_begin(st_dist *d);
float st_dist_backward_seed(const st_dist *d);
st_status st_dist_micro_begin(st_dist *d, st_graph *g, int64_t k);
st_status st_dist_micro_end(st_dist *d, st_graph *g, int64_t k);
/* The L2 norm of the whole step's gradient (every rank gets the same value). */
st_status st_dist_grad_norm(st_dist *d, double *norm);
/* st_optim_across for a device's st_optim_clip (ctx the st_dist): under
 * ZeRO with several ranks, all-reduce the device double `sumsq` (this
 * shard's sum of squares) over the communicator, so that it holds the whole
 * gradient's; otherwise nothing (each rank holds the whole gradient). */
st_status st_dist_sumsq_across(void *ctx, double *sumsq);
/* Multiply the gradients this rank updates from by s. */
st_status st_dist_grad_scale(st_dist *d, float s);
st_status st_dist_step_end(st_dist *d);

/* Bytes this rank holds for gradients now (resident pages of the gradient
 * arena, plus the deterministic buffers), and what the formula predicts
 * between steps: 4 B x (P for ddp and zero1, S for zero2) plus, in
 * deterministic mode, 4 B x (S + N*S). */
int64_t st_dist_grad_nbytes(const st_dist *d);
int64_t st_dist_grad_nbytes_predicted(const st_dist *d);

#endif
