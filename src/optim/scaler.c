/* Dynamic loss scaling (see scaler.h); the update follows PyTorch's
 * _amp_update_scale_ (aten/src/ATen/native/cuda/AmpKernels.cu). */
#include "scaler.h"

#include <math.h>

void st_scaler_init(st_scaler *s, bool enabled, double init_scale, int64_t window) {
    s->enabled = enabled;
    s->scale = enabled ? (float)init_scale : 1.0f;
    s->window = window > 0 ? window : 1;
    s->good_steps = 0;
    s->skipped = 0;
}

bool st_grad_all_finite(const st_params *p, int64_t lo, int64_t hi) {
    const float *g = p->grad;
    int bad = 0;
    /* x - x is 0 for finite x and NaN for Inf and NaN: no branch in the loop. */
#pragma omp parallel for simd reduction(| : bad) schedule(static) if (hi - lo > (1 << 20))
    for (int64_t i = lo; i < hi; i++)
        bad |= (g[i] - g[i]) != 0.0f;
    return !bad;
}

float st_scaler_inverse(const st_scaler *s) {
    return (float)(1.0 / (double)s->scale); /* PyTorch: scale.double().reciprocal().float() */
}

void st_scaler_unscale(const st_scaler *s, st_params *p, int64_t lo, int64_t hi) {
    if (!s->enabled) return;
    const float inv = st_scaler_inverse(s);
    float *g = p->grad;
#pragma omp parallel for simd schedule(static) if (hi - lo > (1 << 20))
    for (int64_t i = lo; i < hi; i++)
        g[i] *= inv;
}

st_status st_scaler_check(st_scaler *s, st_params *p, int64_t host_lo, int64_t host_hi, st_comm *comm,
                          bool *skip) {
    *skip = false;
    if (!s->enabled) return ST_OK;
    /* On a device the check runs there and one flag comes back. */
    bool finite = true;
    int64_t lo, hi; /* a device's sharded gradients: this rank's shard (the flag is reduced below) */
    st_params_grad_range(p, &lo, &hi);
    if (p->dev)
        ST_TRY(st_device_all_finite(p->dev, st_params_grad(p, lo), (size_t)(hi - lo), &finite));
    else
        finite = st_grad_all_finite(p, host_lo, host_hi);
    float inf = finite ? 0.0f : 1.0f;
    if (comm && st_comm_size(comm) > 1)
        ST_TRY(st_comm_all_reduce_sync(comm, &inf, &inf, 1, ST_COMM_F32, ST_COMM_MAX, "overflow check"));
    if (inf == 0.0f) { /* by the scale this step used, before the update */
        if (p->dev)
            ST_TRY(
                st_device_scale_f32(p->dev, st_params_grad(p, lo), (size_t)(hi - lo), st_scaler_inverse(s)));
        else
            st_scaler_unscale(s, p, host_lo, host_hi);
    }
    const float was = s->scale;
    *skip = st_scaler_update(s, inf != 0.0f);
    if (*skip && s->scale == was) /* (it could not halve) */
        return st_fail(ST_ERR_NUMERIC,
                       "precision fp16: the gradients overflowed with the loss scale at its least, %g (%lld "
                       "steps skipped so far): the forward or backward pass leaves float16's range whatever "
                       "the scale; train with precision: bf16 (float32's range), or lower optim.lr or set "
                       "optim.grad_clip if the run diverged",
                       (double)was, (long long)s->skipped);
    return ST_OK;
}

bool st_scaler_update(st_scaler *s, bool found_inf) {
    if (!s->enabled) return false;
    if (found_inf) {
        /* (a scale that halves past the least, one given between it and
         * twice it, stops there: the least's overflow is the one that ends
         * the run) */
        s->scale = s->scale * 0.5f >= (float)ST_SCALER_MIN ? s->scale * 0.5f : (float)ST_SCALER_MIN;
        s->good_steps = 0;
        s->skipped++;
        return true;
    }
    if (++s->good_steps >= s->window) {
        if (isfinite(s->scale * 2.0f)) s->scale *= 2.0f;
        s->good_steps = 0;
    }
    return false;
}
