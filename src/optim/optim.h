/* Optimizers over the flat parameter arena: AdamW and SGD (momentum,
 * Nesterov), learning-rate schedules and global-norm gradient clipping.
 *
 * Each works tensor by tensor over st_params so that weight decay follows the
 * parameter's `decay` flag (matrices yes; biases and norm weights no). The
 * state is one arena per moment covering a contiguous range [lo, hi) of the
 * parameter arena: all of it, or a ZeRO shard (src/dist/zero.h), in which
 * case a step updates only the parameters in that range (a tensor cut by a
 * shard boundary is updated piecewise; the formulas are elementwise, so the
 * result is the same). Formulas follow torch.optim's (AdamW: Loshchilov &
 * Hutter 2019, Algorithm 2, with PyTorch's bias correction), so
 * trajectories can be compared step for step: the operations' order differs
 * from torch's in places, about one unit in the last place a step, so the
 * weights agree to tests/parity/torch_parity.py's tolerance, not bit for bit.
 *
 * Parameters on a CUDA device (p->dev) keep the state there too, and
 * st_optim_update and st_optim_clip run the fused kernels of
 * src/cuda/optim.cu (the same float operations, so an update matches the
 * host's bit for bit given the same gradients); st_optim_step, st_grad_norm
 * and st_grad_scale are the host's loops and only take host arenas.
 *
 * Offload (optim.offload, parameters on a device; ZeRO-Offload, Ren et al.
 * 2021): the state lives on the host (m, v host memory, `dev` NULL, so
 * checkpoints read and write it as a host optimizer's) with a pinned host
 * copy of the range's weights, the master of that range. An update records
 * an event on the compute stream (the gradients final), copies the range's
 * gradients down on the device-to-host stream in chunks, and as each chunk
 * arrives updates it on the host and queues its weights up on the copy
 * stream, which the compute stream waits for before anything after the
 * update: the host's arithmetic on one chunk overlaps the copies of the
 * others.
 * Norm and clip stay on the device (st_optim_clip). Armed for a step
 * (st_optim_offload_arm), the copies start during backward instead, chunk
 * by chunk as backward finishes them, and the clip's factor is applied by
 * the host as it reads the gradients. */
#ifndef ST_OPTIM_OPTIM_H
#define ST_OPTIM_OPTIM_H

#include "model/graph.h"
#include "scaletrain/config.h"

typedef enum st_optim_kind { ST_OPTIM_ADAMW, ST_OPTIM_SGD } st_optim_kind;

struct st_cuda_optim;
struct st_optim_offload;

typedef struct st_optim {
    st_optim_kind kind;
    double weight_decay, beta1, beta2, eps, momentum;
    bool nesterov;
    int64_t t;      /* steps taken */
    int64_t lo, hi; /* the arena range the state covers */
    int64_t count;  /* elements of each state arena: hi - lo */
    float *m, *v;   /* (count) AdamW moments / SGD momentum buffer (m); m[i] is element lo + i */
    st_device *dev; /* where m and v live: NULL = host, else the parameters' device */
    struct st_cuda_optim *cu; /* the fused kernels' chunk table (on a device); the norm's (offload) */
    struct st_optim_offload *off; /* optim.offload: the pinned copies and their events; NULL otherwise */
    double clip_pending; /* a device clip st_optim_clip left to the next update (its max_norm); 0 = none */
    int64_t *halt;       /* on a device, not offloaded: the guard's words (st_optim_update); NULL: none */
} st_optim;

st_status st_optim_init(st_optim *o, const st_config *cfg, const st_params *p);
/* State for arena elements [lo, hi) only (0 <= lo <= hi <= p->arena_count). */
st_status st_optim_init_range(st_optim *o, const st_config *cfg, const st_params *p, int64_t lo, int64_t hi);
/* Bytes of optimizer state held (measured from the allocations). */
int64_t st_optim_state_nbytes(const st_optim *o);
void st_optim_free(st_optim *o);
/* One update of every trainable parameter in [lo, hi) from its gradient, at
 * rate lr, on the host (o->dev NULL). */
void st_optim_step(st_optim *o, st_params *p, double lr);
/* The same wherever the parameters live: st_optim_step on the host, the
 * fused AdamW/SGD launch on a device (queued, no wait). On a device whose
 * range is the whole arena, a 16-bit compute copy that was current before
 * the update is written by the same launch and stays current (no refresh
 * before the next forward). `step` is the training step the update makes
 * (1-based). On a device with o->halt set (two device words,
 * src/cuda/cuda.h st_cuda_update_fuse), an update clipped by a norm
 * st_optim_clip found not finite (a gradient overflowed) is not made, nor
 * any after it, and the words say which step: the host reads them later
 * (src/train/loss_sum.h st_loss_sum_halted) and stops the run with the
 * weights of the step before, instead of queueing the wait for the norm
 * every step. */
st_status st_optim_update(st_optim *o, st_params *p, double lr, int64_t step);
/* The gradient over o's range, wherever it lives: when max_norm > 0, clip as
 * the trainer does (norm > max_norm: times max_norm / (norm + 1e-6)); when
 * norm is not NULL, the norm before clipping goes there (on a device this
 * waits for the stream: pass NULL on steps that do not log it; offloaded
 * and armed, without clipping, it is read at the end of the next
 * st_optim_update instead, after the host's update, which overlaps
 * backward). On a device
 * the range may be a ZeRO shard: `across` (when not NULL) then adds the
 * other ranks' sums of squares into the device double it is given (an
 * all-reduce, dist.h st_dist_sumsq_across) before the norm is taken, so
 * every rank clips by the global norm. On the host the range must be the
 * whole arena and `across` NULL (the host's ZeRO clips through dist.h).
 * On a device (not offloaded) the gradients are clipped by the next
 * st_optim_update as it reads them (the same values, one pass over the
 * gradients fewer): the gradient arena itself keeps the unclipped values. */
typedef st_status (*st_optim_across)(void *ctx, double *sumsq);
st_status st_optim_clip(st_optim *o, st_params *p, double max_norm, double *norm, st_optim_across across,
                        void *ctx);

/* optim.offload: the copies of the step's gradients queued during the
 * backward of g that comes next (its last micro-step's), each chunk as soon
 * as backward has written its gradients for the last time, so that the
 * copies and the host's update of the chunks backward finished first run
 * while backward goes on; st_optim_update then updates the chunks in that
 * order. For steps whose gradients need nothing between backward and the
 * update but a clip (st_optim_clip reads the norm and the host scales the
 * gradients as it reads them): one rank, no loss scaling, no deterministic
 * reduction (the caller's conditions). Sets g's backward hook (*armed)
 * unless o is not offloaded or g has a hook already (DDP's); the caller
 * clears it after backward. */
st_status st_optim_offload_arm(st_optim *o, st_params *p, st_graph *g, bool *armed);
/* Over the run so far: the fraction of chunk copies queued during backward
 * (0 when not offloaded). */
double st_optim_offload_early(const st_optim *o);

/* The parameters were written outside the optimizer (a checkpoint's weights
 * loaded): an offloaded optimizer reads its range of them from the device
 * again at its next update. Nothing for the others. */
void st_optim_params_written(st_optim *o);

/* A host copy of o's state (kind, range, t, m and v), from a device or from
 * the host (a snapshot for an asynchronous checkpoint); free with
 * st_optim_free. */
st_status st_optim_copy_to_host(const st_optim *o, st_optim *host);
/* Set o's state (t, m, v) from a host copy of the same kind and range. */
st_status st_optim_copy_from_host(st_optim *o, const st_optim *host);

/* The learning rate for step `step` (0-based) of `total`. */
double st_lr_at(const st_config *cfg, int64_t step, int64_t total);

/* L2 norm of all gradients (accumulated in double). */
double st_grad_norm(const st_params *p);
/* Multiply every gradient by `scale`. */
void st_grad_scale(st_params *p, float scale);

#endif
