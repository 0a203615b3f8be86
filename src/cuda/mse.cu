/* CUDA twin of src/layers/mse.c: loss = mean((pred - target)^2).
 * Forward sums squares in double over the CPU's fixed chunks (one block per
 * chunk, then one block adds the chunks), so the loss matches the CPU's to
 * double rounding and does not depend on the device. Backward reads dloss
 * from the device: no host round trip. pred, target and their gradients in
 * either storage (src/layers/half_io.h); the loss stays fp32. */
#include "kernels.cuh"

enum { MSE_CHUNK = 4096 }; /* as src/layers/mse.c */

static __global__ void mse_partial_kernel(st_fbuf p, st_fbuf t, int64_t n, double *part) {
    __shared__ double sh[32];
    const int64_t i0 = (int64_t)blockIdx.x * MSE_CHUNK, i1 = i0 + MSE_CHUNK < n ? i0 + MSE_CHUNK : n;
    double s = 0.0;
    for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
        const double d = (double)st_ld(p, i) - st_ld(t, i);
        s += d * d;
    }
    s = st_block_sum(s, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

static __global__ void mse_total_kernel(const double *part, int64_t k, int64_t n, float *loss) {
    __shared__ double sh[32];
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < k; i += blockDim.x)
        s += part[i];
    s = st_block_sum(s, sh);
    if (threadIdx.x == 0) loss[0] = (float)(s / (double)n);
}

/* dpred = 2 (pred - target) dloss / N; dtarget = -dpred (sign -1). */
static __global__ void mse_backward_kernel(st_fbuf p, st_fbuf t, const float *dloss, st_fbuf dx, int64_t n,
                                           float sign, bool acc) {
    const float scale = 2.0f * dloss[0] / (float)n;
    const float sk = sign > 0.0f ? scale : -scale;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float d = sk * (st_ld(p, i) - st_ld(t, i));
        st_st(dx, i, acc ? st_ld(dx, i) + d : d);
    }
}

static st_status mse_forward(st_node *n, st_graph *g) {
    const int64_t N = n->args.i[ST_MSE_N], K = (N + MSE_CHUNK - 1) / MSE_CHUNK;
    double *part = (double *)g->work; /* (K): the CPU's work_count, 2 floats each */
    mse_partial_kernel<<<(unsigned)K, 256, 0, st_cuda_stream(g)>>>(st_data(n->in[0]), st_data(n->in[1]), N,
                                                                   part);
    ST_CUDA_LAUNCHED();
    mse_total_kernel<<<1, 1024, 0, st_cuda_stream(g)>>>(part, K, N, n->out->data);
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

static st_status mse_backward(st_node *n, st_graph *g) {
    const int64_t N = n->args.i[ST_MSE_N];
    for (int k = 0; k < 2; k++) {
        if (!n->in[k]->grad) continue;
        mse_backward_kernel<<<st_cuda_blocks(N, 256), 256, 0, st_cuda_stream(g)>>>(
            st_data(n->in[0]), st_data(n->in[1]), n->out->grad, st_grad(n->in[k]), N, k == 0 ? 1.0f : -1.0f,
            n->in_acc[k]);
        ST_CUDA_LAUNCHED();
    }
    return ST_OK;
}

extern "C" const st_layer_ops st_cuda_mse_ops = {"mse", mse_forward, mse_backward, NULL, false,
                                                 true,  false,       false,        0};
