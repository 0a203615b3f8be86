/* Fused optimizers, gradient norm and scaling on the device (src/cuda/cuda.h).
 *
 * One launch updates every trainable element of a slice of the flat arena:
 * the slice is cut into chunks of at most OPT_CHUNK elements, each inside one
 * tensor, and a device table gives each block its chunk's start, length and
 * the tensor's decay flag. The element formulas are src/optim/optim.c's,
 * operation by operation, with the round-to-nearest intrinsics (__fmul_rn,
 * __fadd_rn, ...) so that nvcc cannot fuse them into FMAs: the CPU build
 * (ISO C, -ffp-contract=off) does not either, so the updates match the CPU's
 * bit for bit, sqrt and division being correctly rounded on both.
 * Not here: the choice of optimizer and the step counter (src/optim/), and
 * the all-reduce of the norm under ZeRO (the caller's, through
 * st_cuda_optim_sumsq). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.cuh"

enum {
    OPT_CHUNK = 4096, /* elements per block of the update */
    OPT_THREADS = 256,
    NORM_BLOCKS =
        1024, /* at most; the count sets the grid, so the partial sums do not depend on the device */
    NORM_THREADS = 256,
};

typedef struct opt_chunk {
    int64_t start; /* arena element */
    int32_t count;
    int32_t decay;
} opt_chunk;

struct st_cuda_optim {
    st_device *d;
    int64_t lo, hi;
    opt_chunk *chunks; /* device */
    int64_t n_chunks;
    double *part;  /* device, NORM_BLOCKS partial sums */
    double *sumsq; /* device, one */
};

extern "C" void st_cuda_optim_free(st_cuda_optim *o) {
    if (!o) return;
    if (o->chunks) cudaFree(o->chunks);
    if (o->part) cudaFree(o->part);
    if (o->sumsq) cudaFree(o->sumsq);
    free(o);
}

extern "C" st_status st_cuda_optim_create(st_device *d, const st_params *p, int64_t lo, int64_t hi,
                                          st_cuda_optim **out) {
    *out = NULL;
    if (!d || p->dev != d)
        return st_fail(ST_ERR_ARG, "fused optimizer: the parameters are not on %s",
                       d ? d->name : "a CUDA device");
    if (lo < 0 || hi > p->count || lo > hi)
        return st_fail(ST_ERR_ARG,
                       "fused optimizer: slice [%lld, %lld) is outside the arena of %lld elements",
                       (long long)lo, (long long)hi, (long long)p->count);
    int64_t n = 0;
    for (int pass = 0; pass < 2; pass++) { /* count, then fill */
        opt_chunk *h = NULL;
        if (pass == 1) {
            h = (opt_chunk *)malloc((size_t)(n ? n : 1) * sizeof *h);
            if (!h) return st_fail(ST_ERR_NOMEM, "out of memory planning the fused optimizer");
        }
        int64_t k = 0;
        for (int i = 0; i < p->n; i++) {
            const st_tensor *t = p->t[i];
            if (t->kind != ST_TENSOR_PARAM) continue;
            int64_t a = t->offset > lo ? t->offset : lo,
                    b = t->offset + t->count < hi ? t->offset + t->count : hi;
            for (; a < b; a += OPT_CHUNK, k++)
                if (h)
                    h[k] = opt_chunk{a, (int32_t)(b - a < (int64_t)OPT_CHUNK ? b - a : (int64_t)OPT_CHUNK),
                                     t->decay ? 1 : 0};
        }
        if (pass == 0) {
            n = k;
            continue;
        }
        st_cuda_optim *o = (st_cuda_optim *)calloc(1, sizeof *o);
        if (!o) {
            free(h);
            return st_fail(ST_ERR_NOMEM, "out of memory planning the fused optimizer");
        }
        o->d = d;
        o->lo = lo;
        o->hi = hi;
        o->n_chunks = n;
        cudaError_t e = cudaMalloc(&o->chunks, (size_t)(n ? n : 1) * sizeof *h);
        if (e == cudaSuccess) e = cudaMalloc(&o->part, NORM_BLOCKS * sizeof(double));
        if (e == cudaSuccess) e = cudaMalloc(&o->sumsq, sizeof(double));
        /* On the compute stream, which does not wait for the legacy default stream. */
        if (e == cudaSuccess && n)
            e = cudaMemcpyAsync(o->chunks, h, (size_t)n * sizeof *h, cudaMemcpyHostToDevice, d->compute);
        if (e == cudaSuccess) e = cudaMemsetAsync(o->sumsq, 0, sizeof(double), d->compute);
        if (e == cudaSuccess) e = st_cuda_stream_sync(d, d->compute); /* h is freed next */
        free(h);
        if (e != cudaSuccess) {
            st_status s = st_cuda_fail(d, e, "allocating the fused optimizer's table", __FILE__, __LINE__);
            st_cuda_optim_free(o);
            return s;
        }
        *out = o;
    }
    return ST_OK;
}

/* The fused extras of st_cuda_update_fuse as a kernel takes them: the
 * clip's factor (found by each block from the device sum of squares, as
 * clip_kernel below does) and the 16-bit copy. */
struct opt_fuse {
    const double *clip_sumsq;
    double max_norm;
    st_fbuf w16;   /* p NULL: none */
    int64_t *halt; /* NULL: no guard */
    int64_t step;
};
#ifdef ST_CUDA_EMU
static inline int st_emu_pointers(const opt_fuse &f, const void **out) {
    return st_emu_pointers_of(out, {f.clip_sumsq, f.w16.p, f.halt});
}
#endif

static opt_fuse fuse_args(const st_cuda_update_fuse *fx) {
    opt_fuse f = {NULL, 0.0, st_fbuf{NULL, ST_PREC_FP32}, NULL, 0};
    if (fx)
        f = opt_fuse{fx->clip_sumsq, fx->max_norm, st_fbuf{(void *)fx->w16, fx->prec16}, fx->halt, fx->step};
    return f;
}

/* The guard (cuda.h st_cuda_update_fuse.halt): true when this block makes
 * no update, an earlier step's halt or this one's norm not finite. Every
 * block of a launch reads the same sum of squares, so they all agree; a
 * block that reads halt[0] already set by another block of this launch
 * returns as that one did. */
static __device__ __forceinline__ bool halted(const opt_fuse &f) {
    if (!f.halt) return false;
    if (*(volatile const int64_t *)f.halt != 0) return true;
    if (!f.clip_sumsq) return false;
    const double s = *f.clip_sumsq;
    if (isfinite(s)) return false;
    if (threadIdx.x == 0) {
        f.halt[1] = isnan(s) ? 1 : 0;
        f.halt[0] = f.step;
    }
    return true;
}

/* The clip's factor, or 1 with *clip false: clip_kernel's test and value. */
static __device__ __forceinline__ float clip_factor(const opt_fuse &f, bool *clip) {
    *clip = false;
    if (!f.clip_sumsq) return 1.0f;
    const double norm = sqrt(*f.clip_sumsq);
    if (!(norm > f.max_norm)) return 1.0f; /* (a NaN norm is left alone, as clip_kernel) */
    *clip = true;
    return (float)(f.max_norm / (norm + 1e-6));
}

/* optim.c's adamw_tensor, per element:
 *   w *= decay; m = b1 m + omb1 g; v = b2 v + omb2 g g (omb: 1 - beta in double, rounded);
 *   w -= step m / (sqrt(v) rbc2 + eps)
 * with g clipped as read and w's 16-bit copy stored when f asks. */
static __global__ void adamw_kernel(const opt_chunk *chunks, int64_t lo, float *w, const float *g, float *m,
                                    float *v, float b1, float b2, float omb1, float omb2, float eps,
                                    float step, float rbc2, float decay, opt_fuse f) {
    if (halted(f)) return;
    const opt_chunk c = chunks[blockIdx.x];
    const float dk = c.decay ? decay : 1.0f;
    bool clip;
    const float cs = clip_factor(f, &clip);
    for (int64_t i = c.start + threadIdx.x; i < c.start + c.count; i += blockDim.x) {
        const int64_t s = i - lo;
        const float gi = clip ? __fmul_rn(g[s], cs) : g[s];
        float wi = __fmul_rn(w[s], dk);
        const float mi = __fadd_rn(__fmul_rn(b1, m[s]), __fmul_rn(omb1, gi));
        const float vi = __fadd_rn(__fmul_rn(b2, v[s]), __fmul_rn(__fmul_rn(omb2, gi), gi));
        wi = __fsub_rn(wi, __fdiv_rn(__fmul_rn(step, mi), __fadd_rn(__fmul_rn(__fsqrt_rn(vi), rbc2), eps)));
        m[s] = mi;
        v[s] = vi;
        w[s] = wi;
        if (f.w16.p) st_st(f.w16, s, wi);
    }
}

/* optim.c's sgd_tensor, per element:
 *   d = g + wd w; with momentum: buf = first ? d : mu buf + d,
 *   d = nesterov ? d + mu buf : buf; w -= lr d
 * with g clipped and the 16-bit copy as adamw_kernel. */
static __global__ void sgd_kernel(const opt_chunk *chunks, int64_t lo, float *w, const float *g, float *buf,
                                  float mu, float wd, float lr, bool first, bool nesterov, opt_fuse f) {
    if (halted(f)) return;
    const opt_chunk c = chunks[blockIdx.x];
    const float wdk = c.decay ? wd : 0.0f;
    bool clip;
    const float cs = clip_factor(f, &clip);
    for (int64_t i = c.start + threadIdx.x; i < c.start + c.count; i += blockDim.x) {
        const int64_t s = i - lo;
        const float wi = w[s];
        const float gi = clip ? __fmul_rn(g[s], cs) : g[s];
        float d = __fadd_rn(gi, __fmul_rn(wdk, wi));
        if (mu != 0.0f) {
            const float b = first ? d : __fadd_rn(__fmul_rn(mu, buf[s]), d);
            buf[s] = b;
            d = nesterov ? __fadd_rn(d, __fmul_rn(mu, b)) : b;
        }
        const float wn = __fsub_rn(wi, __fmul_rn(lr, d));
        w[s] = wn;
        if (f.w16.p) st_st(f.w16, s, wn);
    }
}

extern "C" st_status st_cuda_adamw_step(st_cuda_optim *o, float *w, const float *g, float *m, float *v,
                                        const st_cuda_adamw_hp *hp, const st_cuda_update_fuse *fx) {
    if (!o->n_chunks) return ST_OK;
    /* The scalars exactly as optim.c makes them (double, then rounded once). */
    const double bc1 = 1.0 - pow(hp->beta1, (double)hp->t), bc2 = 1.0 - pow(hp->beta2, (double)hp->t);
    const float step = (float)(hp->lr / bc1), rbc2 = (float)(1.0 / sqrt(bc2));
    const float decay = (float)(1.0 - hp->lr * hp->weight_decay);
    adamw_kernel<<<(unsigned)o->n_chunks, OPT_THREADS, 0, o->d->compute>>>(
        o->chunks, o->lo, w, g, m, v, (float)hp->beta1, (float)hp->beta2, (float)(1.0 - hp->beta1),
        (float)(1.0 - hp->beta2), (float)hp->eps, step, rbc2, decay, fuse_args(fx));
    ST_CUDA_TRY_D(o->d, cudaGetLastError());
    return ST_OK;
}

extern "C" st_status st_cuda_sgd_step(st_cuda_optim *o, float *w, const float *g, float *buf,
                                      const st_cuda_sgd_hp *hp, const st_cuda_update_fuse *fx) {
    if (!o->n_chunks) return ST_OK;
    sgd_kernel<<<(unsigned)o->n_chunks, OPT_THREADS, 0, o->d->compute>>>(
        o->chunks, o->lo, w, g, buf, (float)hp->momentum, (float)hp->weight_decay, (float)hp->lr, hp->t == 1,
        hp->nesterov, fuse_args(fx));
    ST_CUDA_TRY_D(o->d, cudaGetLastError());
    return ST_OK;
}

/* Pass 1: block b sums the squares of its grid-stride share in double. */
static __global__ void sumsq_partial_kernel(const float *g, int64_t n, double *part) {
    __shared__ double sh[32];
    double s = 0.0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        s += (double)g[i] * g[i];
    s = st_block_sum(s, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

/* Pass 2: one block adds the partials. */
static __global__ void sumsq_total_kernel(const double *part, int nparts, double *out) {
    __shared__ double sh[32];
    double s = 0.0;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x)
        s += part[i];
    s = st_block_sum(s, sh);
    if (threadIdx.x == 0) *out = s;
}

extern "C" st_status st_cuda_grad_sumsq(st_cuda_optim *o, const float *g, int64_t count) {
    /* One block per NORM_THREADS elements up to NORM_BLOCKS: the order of the
     * sums depends on the count alone, never on the device; a small range
     * does not start a thousand idle blocks. */
    const int64_t want = (count + NORM_THREADS - 1) / NORM_THREADS;
    const int blocks = want < 1 ? 1 : want > NORM_BLOCKS ? NORM_BLOCKS : (int)want;
    sumsq_partial_kernel<<<blocks, NORM_THREADS, 0, o->d->compute>>>(g, count, o->part);
    ST_CUDA_TRY_D(o->d, cudaGetLastError());
    sumsq_total_kernel<<<1, 1024, 0, o->d->compute>>>(o->part, blocks, o->sumsq);
    ST_CUDA_TRY_D(o->d, cudaGetLastError());
    return ST_OK;
}

extern "C" double *st_cuda_optim_sumsq(st_cuda_optim *o) { return o->sumsq; }

static __global__ void clip_kernel(float *g, int64_t n, const double *sumsq, double max_norm) {
    const double norm = sqrt(*sumsq);
    if (!(norm > max_norm)) return; /* as train.c: clip only above the limit (a NaN norm is left alone) */
    const float scale = (float)(max_norm / (norm + 1e-6));
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        g[i] *= scale;
}

extern "C" st_status st_cuda_grad_clip(st_cuda_optim *o, float *g, int64_t count, double max_norm) {
    if (count <= 0) return ST_OK;
    clip_kernel<<<st_cuda_blocks(count, 256), 256, 0, o->d->compute>>>(g, count, o->sumsq, max_norm);
    ST_CUDA_TRY_D(o->d, cudaGetLastError());
    return ST_OK;
}

extern "C" st_status st_cuda_grad_norm_read(st_cuda_optim *o, double *norm) {
    double s = 0.0;
    ST_CUDA_TRY_D(o->d, cudaMemcpyAsync(&s, o->sumsq, sizeof s, cudaMemcpyDeviceToHost, o->d->compute));
    ST_CUDA_TRY_D(o->d, st_cuda_stream_sync(o->d, o->d->compute));
    *norm = sqrt(s);
    return ST_OK;
}

static __global__ void scale_kernel(float *g, int64_t n, float scale) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        g[i] *= scale;
}

extern "C" st_status st_cuda_grad_scale(st_device *d, float *g, int64_t count, float scale) {
    if (count <= 0) return ST_OK;
    scale_kernel<<<st_cuda_blocks(count, 256), 256, 0, d->compute>>>(g, count, scale);
    ST_CUDA_TRY_D(d, cudaGetLastError());
    return ST_OK;
}
