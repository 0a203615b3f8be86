/* Dynamic loss scaling for fp16 training, with the semantics of PyTorch's
 * torch.cuda.amp.GradScaler: the loss gradient is multiplied by the scale,
 * gradients are unscaled (times 1/scale) before clipping and the optimizer,
 * a step whose gradients hold an Inf or NaN is skipped and halves the scale,
 * and `window` clean steps in a row (2000 by default) double it.
 *
 * The scaler only keeps the state machine and does the gradient arithmetic;
 * the trainer reduces the overflow flag over the ranks (so every rank skips
 * the same steps) and saves the state in checkpoints. bf16 and fp32 runs use
 * a disabled scaler: scale 1, never a skip (bf16 has fp32's range). */
#ifndef ST_OPTIM_SCALER_H
#define ST_OPTIM_SCALER_H

#include <stdbool.h>
#include <stdint.h>

#include "comm/comm.h"
#include "model/graph.h"

typedef struct st_scaler {
    bool enabled;
    float scale;        /* the current loss scale (1 when disabled); fp32 as in PyTorch */
    int64_t window;     /* clean steps in a row that double the scale */
    int64_t good_steps; /* clean steps since the last change of the scale */
    int64_t skipped;    /* steps skipped over the run (a resumed run continues the count) */
} st_scaler;

/* The least loss scale: float16's least subnormal, 2^-24. A step that
 * overflows at it overflows at any scale (the forward pass itself leaves
 * float16's range), and below it 1/scale soon leaves float's: unscaling
 * zero gradients by an infinite inverse would make them NaN, unseen. */
#define ST_SCALER_MIN 0x1p-24

/* enabled: fp16; init_scale >= ST_SCALER_MIN (optim.loss_scale), window >= 1
 * (optim.loss_scale_window). */
void st_scaler_init(st_scaler *s, bool enabled, double init_scale, int64_t window);

/* True when every gradient of p's arena [lo, hi) is finite (one pass,
 * threaded; host arenas). */
bool st_grad_all_finite(const st_params *p, int64_t lo, int64_t hi);

/* 1/scale as the unscaling multiplies by it (fp32 of the double reciprocal). */
float st_scaler_inverse(const st_scaler *s);

/* Multiply the gradients of [lo, hi) by 1/scale (a no-op when disabled;
 * host arenas). */
void st_scaler_unscale(const st_scaler *s, st_params *p, int64_t lo, int64_t hi);

/* Advance the state machine after a step whose gradients (over every rank)
 * were finite or not. Returns true when the optimizer step must be skipped
 * (found_inf and enabled): the scale halves, or goes to ST_SCALER_MIN where
 * half would be less, and the clean count restarts.
 * Otherwise the clean count grows, and at `window` the scale doubles (unless
 * that would overflow fp32) and the count restarts. */
bool st_scaler_update(st_scaler *s, bool found_inf);

/* The step's check, after the gradients are final (all-reduced): look for an
 * Inf or NaN in this rank's gradients, reduce the flag over comm (a MAX
 * all-reduce named "overflow check"; comm may be NULL or one rank) so every
 * rank decides alike (ZeRO ranks each hold only a shard), unscale when clean,
 * then st_scaler_update. *skip: skip the optimizer step. An overflow with
 * the scale too small to halve (ST_SCALER_MIN) is ST_ERR_NUMERIC: no scale
 * helps, and the run would skip every step from then on. Disabled: *skip is
 * false and nothing else happens. Arenas on a CUDA device (p->dev): the check
 * and the unscale run there, and one flag is read back. On the host they
 * cover the arena's [host_lo, host_hi) (st_dist_range: under ZeRO this
 * rank's shard, whose gradients are the reduced ones; ZeRO-2 released the
 * other regions' pages, which a write would bring back). */
st_status st_scaler_check(st_scaler *s, st_params *p, int64_t host_lo, int64_t host_hi, st_comm *comm,
                          bool *skip);

#endif
