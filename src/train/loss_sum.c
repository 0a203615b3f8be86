/* The training loss summed on the host or a device (see loss_sum.h). */
#include "loss_sum.h"

#include <math.h>
#include <string.h>

#ifdef ST_HAVE_CUDA
#include "cuda/cuda.h"
#endif

st_status st_loss_sum_init(st_loss_sum *l, st_device *dev, int64_t accum) {
    memset(l, 0, sizeof *l);
    l->dev = dev;
    l->divisor = (double)accum;
    l->bad = -1;
    if (!dev) return ST_OK;
#ifdef ST_HAVE_CUDA
    return st_cuda_loss_create(dev, &l->cu);
#else
    return st_fail(ST_ERR_UNSUPPORTED, "the loss sum on a device: this scaletrain was built without CUDA");
#endif
}

void st_loss_sum_free(st_loss_sum *l) {
#ifdef ST_HAVE_CUDA
    st_cuda_loss_free(l->cu);
#endif
    l->cu = NULL;
}

st_status st_loss_sum_add(st_loss_sum *l, const float *loss) {
#ifdef ST_HAVE_CUDA
    if (l->cu) return st_cuda_loss_add(l->cu, loss, l->divisor);
#endif
    l->step += *loss / l->divisor;
    return ST_OK;
}

st_status st_loss_sum_step_end(st_loss_sum *l, int64_t step) {
    if (l->steps++ == 0) l->first = step;
#ifdef ST_HAVE_CUDA
    if (l->cu) return st_cuda_loss_step_end(l->cu, step);
#endif
    if (!isfinite(l->step) && l->bad < 0) l->bad = step;
    l->sum += l->step;
    l->step = 0;
    return ST_OK;
}

st_status st_loss_sum_read(st_loss_sum *l, double *sum, int64_t *steps, int64_t *first, int64_t *bad) {
    *steps = l->steps;
    *first = l->first;
    l->steps = 0;
#ifdef ST_HAVE_CUDA
    if (l->cu) return st_cuda_loss_read(l->cu, sum, bad);
#endif
    *sum = l->sum;
    *bad = l->bad;
    l->sum = 0;
    l->bad = -1;
    return ST_OK;
}

int64_t *st_loss_sum_guard(st_loss_sum *l) {
#ifdef ST_HAVE_CUDA
    if (l->cu) return st_cuda_loss_guard(l->cu);
#endif
    (void)l;
    return NULL;
}

void st_loss_sum_halted(const st_loss_sum *l, int64_t *step, bool *nan) {
    *step = 0;
    *nan = false;
#ifdef ST_HAVE_CUDA
    if (l->cu) st_cuda_loss_halted(l->cu, step, nan);
#endif
}

st_status st_loss_sum_halted_now(st_loss_sum *l, int64_t *step, bool *nan) {
    *step = 0;
    *nan = false;
#ifdef ST_HAVE_CUDA
    if (l->cu) return st_cuda_loss_halted_now(l->cu, step, nan);
#endif
    return ST_OK;
}
