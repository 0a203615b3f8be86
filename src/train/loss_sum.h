/* The training loss, summed where the model computes it, and read back only
 * when the step loop needs it (train.c).
 *
 * Each micro-step adds the graph's loss divided by the micro-steps of a step
 * to the open step's sum; closing the step adds that to the sum since the
 * last read and notes the first step whose sum was not finite. On the host
 * this is plain arithmetic on the loss the graph left in host memory, and
 * the loop reads every step (nothing to wait for). On a CUDA device the sums
 * live on the device (src/cuda/loss.cu): adding and closing are kernels
 * queued on the compute stream after backward, so a micro-step never waits
 * for the GPU; a read waits for the compute stream, once, on the steps that
 * need the value (train.c says which). */
#ifndef ST_TRAIN_LOSS_SUM_H
#define ST_TRAIN_LOSS_SUM_H

#include <stdbool.h>
#include <stdint.h>

#include "core/device.h"

typedef struct st_loss_sum {
    st_device *dev;
    double divisor; /* micro-steps per step */
    /* host */
    double step, sum;
    int64_t bad;
    /* a device's sums (struct st_cuda_loss, src/cuda/cuda.h) */
    struct st_cuda_loss *cu;
    /* steps closed since the last read, and the first of them */
    int64_t steps, first;
} st_loss_sum;

/* Sums for the model on dev (NULL: the host), `accum` micro-steps a step.
 * *l must be zeroed before (st_loss_sum_free of a zeroed one is fine). */
st_status st_loss_sum_init(st_loss_sum *l, st_device *dev, int64_t accum);
void st_loss_sum_free(st_loss_sum *l);

/* Add a micro-step's loss: `loss` is the graph's one-float loss output, in
 * the model's memory (device memory on a device). Queued there, no wait. */
st_status st_loss_sum_add(st_loss_sum *l, const float *loss);

/* Close step `step` (1-based, what messages call it). */
st_status st_loss_sum_step_end(st_loss_sum *l, int64_t step);

/* The sum of the steps' losses closed since the last read, how many steps
 * that is and the first of them, and the first whose loss was not finite
 * (-1: none); then they start again. On a device this waits for the compute
 * stream. */
st_status st_loss_sum_read(st_loss_sum *l, double *sum, int64_t *steps, int64_t *first, int64_t *bad);

/* On a device: the words of the fused update's guard (optim.h
 * st_optim_update), kept with the sums so that each read brings them back;
 * NULL on the host (its norm is checked before the update, on the host). */
int64_t *st_loss_sum_guard(st_loss_sum *l);
/* As of the last read: the first step whose update the guard refused (0:
 * none), and whether its gradients' norm was NaN (else inf). */
void st_loss_sum_halted(const st_loss_sum *l, int64_t *step, bool *nan);
/* The same as of now (on a device: a wait for the compute stream). */
st_status st_loss_sum_halted_now(st_loss_sum *l, int64_t *step, bool *nan);

#endif
