/* The training loss summed on the device (src/cuda/cuda.h), so that the step
 * loop reads it back only on the steps that need it (src/train/loss_sum.h)
 * instead of waiting for every micro-step.
 *
 * One device struct: the open step's sum, the sum over the steps closed
 * since the last read, and the first of those steps whose sum was not
 * finite. Each update is one single-thread kernel on the compute stream,
 * after the backward that wrote the loss: the same double operations as the
 * host's sum (loss_sum.c), in the same order. Evaluation on a device
 * (src/train/eval_device.c) sums each batch's loss times its valid targets
 * the same way, read once at the end. The same struct holds the fused
 * update's guard words (cuda.h st_cuda_update_fuse.halt), so the read
 * brings them back in its one copy. Not here: averaging over ranks and the
 * NaN error (the caller's, on the host, once read). */
#include <stdlib.h>
#include <string.h>

#include "common.cuh"

typedef struct loss_acc {
    double step; /* the open step: sum of loss / divisor over its micro-steps */
    double sum;  /* closed steps since the last read */
    int64_t bad; /* the first of them whose sum was not finite, -1: none */
    int64_t halt[2]; /* the guard's: the step whose update it refused (0: none), its norm NaN; never reset */
} loss_acc;

struct st_cuda_loss {
    st_device *d;
    loss_acc *acc;  /* device */
    loss_acc *host; /* what the last read copied: pinned, or pageable when pinned memory was refused */
    bool host_pinned;
};

/* step += loss / by (training: by the micro-steps), or loss * by (evaluation: by the valid targets) */
static __global__ void loss_add_kernel(loss_acc *a, const float *loss, double by, bool times) {
    a->step += times ? (double)*loss * by : (double)*loss / by;
}

static __global__ void loss_step_end_kernel(loss_acc *a, int64_t step) {
    if (!isfinite(a->step) && a->bad < 0) a->bad = step;
    a->sum += a->step;
    a->step = 0.0;
}

/* The sum and the first bad step start again (`all`: the open step too). */
static __global__ void loss_reset_kernel(loss_acc *a, bool all) {
    if (all) a->step = 0.0;
    a->sum = 0.0;
    a->bad = -1;
}

extern "C" void st_cuda_loss_free(st_cuda_loss *l) {
    if (!l) return;
    if (l->acc) {
        (void)st_cuda_stream_sync(l->d, l->d->compute); /* queued updates may still write it */
        st_cuda_release(l->d, l->acc);
    }
    if (l->host_pinned) cudaFreeHost(l->host);
    else free(l->host);
    free(l);
}

extern "C" st_status st_cuda_loss_create(st_device *d, st_cuda_loss **out) {
    *out = NULL;
    st_cuda_loss *l = (st_cuda_loss *)calloc(1, sizeof *l);
    if (!l) return st_fail(ST_ERR_NOMEM, "out of memory for the loss sum");
    l->d = d;
    st_status s = st_cuda_alloc(d, sizeof(loss_acc), (void **)&l->acc);
    if (s == ST_OK) { /* pinned, or pageable where pinned memory is refused (the read waits either way) */
        l->host_pinned = cudaHostAlloc((void **)&l->host, sizeof(loss_acc), cudaHostAllocPortable) == cudaSuccess;
        if (!l->host_pinned) {
            cudaGetLastError(); /* not sticky: a refusal, not a device fault */
            l->host = (loss_acc *)malloc(sizeof(loss_acc));
            if (!l->host) s = st_fail(ST_ERR_NOMEM, "out of memory for the loss read-back");
        }
    }
    if (s == ST_OK) {
        loss_reset_kernel<<<1, 1, 0, d->compute>>>(l->acc, true);
        cudaError_t e = cudaGetLastError();
        if (e == cudaSuccess) e = cudaMemsetAsync(l->acc->halt, 0, sizeof l->acc->halt, d->compute);
        memset(l->host, 0, sizeof *l->host);
        if (e != cudaSuccess) s = st_cuda_fail(d, e, "clearing the loss sum", __FILE__, __LINE__);
    }
    if (s != ST_OK) {
        st_cuda_loss_free(l);
        return s;
    }
    *out = l;
    return ST_OK;
}

extern "C" st_status st_cuda_loss_add(st_cuda_loss *l, const float *loss, double divisor) {
    loss_add_kernel<<<1, 1, 0, l->d->compute>>>(l->acc, loss, divisor, false);
    ST_CUDA_TRY_D(l->d, cudaGetLastError());
    return ST_OK;
}

extern "C" st_status st_cuda_loss_add_times(st_cuda_loss *l, const float *loss, double weight) {
    loss_add_kernel<<<1, 1, 0, l->d->compute>>>(l->acc, loss, weight, true);
    ST_CUDA_TRY_D(l->d, cudaGetLastError());
    return ST_OK;
}

extern "C" st_status st_cuda_loss_step_end(st_cuda_loss *l, int64_t step) {
    loss_step_end_kernel<<<1, 1, 0, l->d->compute>>>(l->acc, step);
    ST_CUDA_TRY_D(l->d, cudaGetLastError());
    return ST_OK;
}

extern "C" st_status st_cuda_loss_read(st_cuda_loss *l, double *sum, int64_t *bad_step) {
    st_device *d = l->d;
    ST_CUDA_TRY_D(d, cudaMemcpyAsync(l->host, l->acc, sizeof *l->host, cudaMemcpyDeviceToHost, d->compute));
    loss_reset_kernel<<<1, 1, 0, d->compute>>>(l->acc, false); /* after the copy, in stream order */
    ST_CUDA_TRY_D(d, cudaGetLastError());
    /* the compute stream only (not the device): the copy and all the work before it */
    ST_CUDA_TRY_D(d, st_cuda_stream_sync(d, d->compute));
    *sum = l->host->sum;
    *bad_step = l->host->bad;
    return ST_OK;
}

extern "C" int64_t *st_cuda_loss_guard(st_cuda_loss *l) { return l->acc->halt; }

extern "C" void st_cuda_loss_halted(const st_cuda_loss *l, int64_t *step, bool *nan) {
    *step = l->host->halt[0];
    *nan = l->host->halt[1] != 0;
}

extern "C" st_status st_cuda_loss_halted_now(st_cuda_loss *l, int64_t *step, bool *nan) {
    st_device *d = l->d;
    ST_CUDA_TRY_D(d, cudaMemcpyAsync(l->host->halt, l->acc->halt, sizeof l->host->halt,
                                     cudaMemcpyDeviceToHost, d->compute));
    ST_CUDA_TRY_D(d, st_cuda_stream_sync(d, d->compute));
    st_cuda_loss_halted(l, step, nan);
    return ST_OK;
}
