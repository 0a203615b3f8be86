/* AdamW, SGD, schedules and clipping (see optim.h). */
#include "optim.h"

#include <math.h>
#include <string.h>

#include "core/mem.h"
#ifdef ST_HAVE_CUDA
#include "cuda/cuda.h"
#endif

st_status st_optim_init(st_optim *o, const st_config *cfg, const st_params *p) {
    return st_optim_init_range(o, cfg, p, 0, p->arena_count);
}

int64_t st_optim_state_nbytes(const st_optim *o) {
    return (o->m ? o->count : 0) * 4 + (o->v ? o->count : 0) * 4;
}

/* The state on the parameters' device, zeroed, and the fused kernels' plan.
 * The arena's tail past p->count is alignment padding, never trained: the
 * range stops at p->count there. */
static st_status init_device(st_optim *o, const st_params *p) {
    o->dev = p->dev;
    if (o->hi > p->count) o->hi = p->count;
    if (o->lo > o->hi) o->lo = o->hi;
    o->count = o->hi - o->lo;
#ifdef ST_HAVE_CUDA
    const size_t nbytes = (size_t)(o->count ? o->count : 1) * sizeof(float);
    st_status s = st_device_alloc(o->dev, nbytes, (void **)&o->m);
    if (s == ST_OK && o->kind == ST_OPTIM_ADAMW) s = st_device_alloc(o->dev, nbytes, (void **)&o->v);
    if (s == ST_OK) s = st_device_zero(o->dev, o->m, nbytes);
    if (s == ST_OK && o->v) s = st_device_zero(o->dev, o->v, nbytes);
    if (s == ST_OK) s = st_cuda_optim_create(o->dev, p, o->lo, o->hi, &o->cu);
    if (s != ST_OK) {
        st_fail_context(s, "optimizer state on %s: ", st_device_name(o->dev));
        st_optim_free(o);
    }
    return s;
#else
    st_optim_free(o);
    return st_fail(ST_ERR_UNSUPPORTED, "optimizer: the parameters are on a device but this build has no CUDA");
#endif
}

st_status st_optim_init_range(st_optim *o, const st_config *cfg, const st_params *p, int64_t lo, int64_t hi) {
    memset(o, 0, sizeof *o);
    if (lo < 0 || hi < lo || hi > p->arena_count)
        return st_fail(ST_ERR_INTERNAL, "optimizer range [%lld, %lld) is outside the arena of %lld", (long long)lo,
                       (long long)hi, (long long)p->arena_count);
    o->lo = lo;
    o->hi = hi;
    o->kind = strcmp(cfg->optim.type, "sgd") == 0 ? ST_OPTIM_SGD : ST_OPTIM_ADAMW;
    o->weight_decay = cfg->optim.weight_decay;
    o->beta1 = cfg->optim.beta1;
    o->beta2 = cfg->optim.beta2;
    o->eps = cfg->optim.eps;
    o->momentum = cfg->optim.momentum;
    o->nesterov = cfg->optim.nesterov;
    if (p->dev) return init_device(o, p);
    o->count = hi - lo;
    size_t nbytes = (size_t)(o->count ? o->count : 1) * sizeof(float);
    o->m = st_alloc_aligned(nbytes);
    if (o->kind == ST_OPTIM_ADAMW) o->v = st_alloc_aligned(nbytes);
    if (!o->m || (o->kind == ST_OPTIM_ADAMW && !o->v)) {
        st_optim_free(o);
        return st_fail(ST_ERR_NOMEM, "out of memory for optimizer state (%.1f MiB)",
                       2.0 * (double)nbytes / (1 << 20));
    }
    memset(o->m, 0, nbytes);
    if (o->v) memset(o->v, 0, nbytes);
    return ST_OK;
}

void st_optim_free(st_optim *o) {
    if (!o) return;
    if (o->dev) {
        st_device_release(o->dev, o->m);
        st_device_release(o->dev, o->v);
#ifdef ST_HAVE_CUDA
        st_cuda_optim_free(o->cu);
#endif
    } else {
        st_free_aligned(o->m);
        st_free_aligned(o->v);
    }
    memset(o, 0, sizeof *o);
}

/* w, g, m, v: (n) the elements of one tensor (or of its part in the range). */
static void adamw_tensor(const st_optim *o, const st_tensor *t, float *w, const float *g, int64_t n, float *m,
                         float *v, double lr) {
    const float b1 = (float)o->beta1, b2 = (float)o->beta2, eps = (float)o->eps;
    const double bc1 = 1.0 - pow(o->beta1, (double)o->t), bc2 = 1.0 - pow(o->beta2, (double)o->t);
    const float step = (float)(lr / bc1), rbc2 = (float)(1.0 / sqrt(bc2));
    const float decay = t->decay ? (float)(1.0 - lr * o->weight_decay) : 1.0f;
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i];
        w[i] *= decay;
        m[i] = b1 * m[i] + (1.0f - b1) * gi;
        v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
        w[i] -= step * m[i] / (sqrtf(v[i]) * rbc2 + eps);
    }
}

static void sgd_tensor(const st_optim *o, const st_tensor *t, float *w, const float *g, int64_t n, float *buf,
                       double lr) {
    const float mu = (float)o->momentum, wd = t->decay ? (float)o->weight_decay : 0.0f;
    const float flr = (float)lr;
    const bool first = o->t == 1, nesterov = o->nesterov;
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; i++) {
        float d = g[i] + wd * w[i];
        if (mu != 0.0f) {
            buf[i] = first ? d : mu * buf[i] + d;
            d = nesterov ? d + mu * buf[i] : buf[i];
        }
        w[i] -= flr * d;
    }
}

void st_optim_step(st_optim *o, st_params *p, double lr) {
    o->t++;
    for (int i = 0; i < p->n; i++) {
        st_tensor *t = p->t[i];
        if (t->kind != ST_TENSOR_PARAM) continue;
        const int64_t a = t->offset > o->lo ? t->offset : o->lo;
        const int64_t b = t->offset + t->count < o->hi ? t->offset + t->count : o->hi;
        if (a >= b) continue;
        float *w = t->data + (a - t->offset);
        const float *g = t->grad + (a - t->offset);
        if (o->kind == ST_OPTIM_ADAMW) adamw_tensor(o, t, w, g, b - a, o->m + (a - o->lo), o->v + (a - o->lo), lr);
        else sgd_tensor(o, t, w, g, b - a, o->m + (a - o->lo), lr);
    }
    st_params_touch(p); /* the bf16/fp16 compute copy is refreshed before the next forward */
}

st_status st_optim_update(st_optim *o, st_params *p, double lr) {
    if (!o->dev) {
        st_optim_step(o, p, lr);
        return ST_OK;
    }
#ifdef ST_HAVE_CUDA
    o->t++;
    st_status s;
    if (o->kind == ST_OPTIM_ADAMW) {
        const st_cuda_adamw_hp hp = {lr, o->beta1, o->beta2, o->eps, o->weight_decay, o->t};
        s = st_cuda_adamw_step(o->cu, p->data, p->grad, o->m, o->v, &hp);
    } else {
        const st_cuda_sgd_hp hp = {lr, o->momentum, o->weight_decay, o->nesterov, o->t};
        s = st_cuda_sgd_step(o->cu, p->data, p->grad, o->m, &hp);
    }
    st_params_touch(p);
    return s;
#else
    (void)p;
    (void)lr;
    return st_fail(ST_ERR_UNSUPPORTED, "optimizer: the parameters are on a device but this build has no CUDA");
#endif
}

st_status st_optim_clip(st_optim *o, st_params *p, double max_norm, double *norm, st_optim_across across,
                        void *ctx) {
    if (!o->dev) {
        if (across || o->lo != 0 || o->hi != p->count)
            return st_fail(ST_ERR_INTERNAL, "st_optim_clip: a host optimizer's shard (ZeRO clips through dist.h)");
        const double n = st_grad_norm(p);
        if (max_norm > 0 && n > max_norm) st_grad_scale(p, (float)(max_norm / (n + 1e-6)));
        if (norm) *norm = n;
        return ST_OK;
    }
#ifdef ST_HAVE_CUDA
    if (max_norm <= 0 && !norm) return ST_OK;
    /* The sum of squares stays on the device; clipping reads it there, and
     * only a logged norm comes back. */
    ST_TRY(st_cuda_grad_sumsq(o->cu, p->grad + o->lo, o->count));
    if (across) ST_TRY(across(ctx, st_cuda_optim_sumsq(o->cu)));
    if (max_norm > 0) ST_TRY(st_cuda_grad_clip(o->cu, p->grad + o->lo, o->count, max_norm));
    if (norm) ST_TRY(st_cuda_grad_norm_read(o->cu, norm));
    return ST_OK;
#else
    (void)p;
    (void)max_norm;
    (void)norm;
    (void)across;
    (void)ctx;
    return st_fail(ST_ERR_UNSUPPORTED, "optimizer: the parameters are on a device but this build has no CUDA");
#endif
}

st_status st_optim_copy_to_host(const st_optim *o, st_optim *host) {
    *host = *o;
    host->dev = NULL;
    host->cu = NULL;
    host->m = host->v = NULL;
    const size_t nbytes = (size_t)(o->count ? o->count : 1) * sizeof(float), used = (size_t)o->count * sizeof(float);
    host->m = st_alloc_aligned(nbytes);
    if (o->v) host->v = st_alloc_aligned(nbytes);
    st_status s = !host->m || (o->v && !host->v)
                      ? st_fail(ST_ERR_NOMEM, "out of memory copying the optimizer state (%.1f MiB) to the host",
                                2.0 * (double)nbytes / (1 << 20))
                      : ST_OK;
    if (s == ST_OK) s = st_device_download(o->dev, host->m, o->m, used);
    if (s == ST_OK && o->v) s = st_device_download(o->dev, host->v, o->v, used);
    if (s != ST_OK) st_optim_free(host);
    return s;
}

st_status st_optim_copy_from_host(st_optim *o, const st_optim *host) {
    if (host->kind != o->kind || host->lo != o->lo || host->hi != o->hi || (host->v == NULL) != (o->v == NULL))
        return st_fail(ST_ERR_INTERNAL, "optimizer state of another kind or range: [%lld, %lld), this one [%lld, %lld)",
                       (long long)host->lo, (long long)host->hi, (long long)o->lo, (long long)o->hi);
    const size_t used = (size_t)o->count * sizeof(float);
    ST_TRY(st_device_upload(o->dev, o->m, host->m, used));
    if (o->v) ST_TRY(st_device_upload(o->dev, o->v, host->v, used));
    o->t = host->t;
    return ST_OK;
}

double st_lr_at(const st_config *cfg, int64_t step, int64_t total) {
    const double lr = cfg->optim.lr, min_lr = cfg->optim.lr * cfg->optim.min_lr;
    const int64_t warm = cfg->optim.warmup_steps;
    if (step < warm) return lr * (double)(step + 1) / (double)warm;
    if (strcmp(cfg->optim.schedule, "constant") == 0 || total <= warm) return lr;
    double progress = (double)(step - warm) / (double)(total - warm);
    if (progress > 1.0) progress = 1.0;
    if (strcmp(cfg->optim.schedule, "linear") == 0) return lr - (lr - min_lr) * progress;
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + cos(M_PI * progress));
}

double st_grad_norm(const st_params *p) {
    double s = 0;
    const float *g = p->grad;
#pragma omp parallel for reduction(+ : s) schedule(static)
    for (int64_t i = 0; i < p->count; i++) s += (double)g[i] * g[i];
    return sqrt(s);
}

void st_grad_scale(st_params *p, float scale) {
    float *g = p->grad;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < p->count; i++) g[i] *= scale;
}
