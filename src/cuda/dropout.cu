/* CUDA twin of src/layers/dropout.c: inverted dropout in training (a dropped
 * element times 0, so that a NaN or inf stays NaN, as PyTorch), identity
 * in eval (or p = 0). Element i is kept when st_cuda_rng_at(dropout_seed,
 * node id, dropout_micro x n + i) >= p, the same draw as the CPU's st_rng_at, so the masks are
 * equal element for element and backward recomputes rather than stores them.
 * Activations in either storage (src/layers/half_io.h). */
#include "kernels.cuh"

static __global__ void dropout_forward_kernel(st_fbuf x, st_fbuf y, int64_t n, uint64_t seed, uint64_t id,
                                              uint64_t off, float p, float scale) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        st_st(y, i, st_ld(x, i) * (st_cuda_rng_at(seed, id, off + (uint64_t)i) >= p ? scale : 0.0f));
}

static __global__ void dropout_backward_kernel(st_fbuf dy, st_fbuf dx, int64_t n, uint64_t seed, uint64_t id,
                                               uint64_t off, float p, float scale, bool acc) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float d = st_ld(dy, i) * (st_cuda_rng_at(seed, id, off + (uint64_t)i) >= p ? scale : 0.0f);
        st_st(dx, i, acc ? st_ld(dx, i) + d : d);
    }
}

static st_status dropout_forward(st_node *n, st_graph *g) {
    const int64_t N = n->out->count;
    const float p = n->args.f[ST_DROPOUT_F_P];
    if (!g->training || p == 0.0f) return st_grad_pass_cuda(g, st_data(n->out), st_data(n->in[0]), N, false);
    const float scale = 1.0f / (1.0f - p);
    dropout_forward_kernel<<<st_cuda_blocks(N, 256), 256, 0, st_cuda_stream(g)>>>(
        st_data(n->in[0]), st_data(n->out), N, g->dropout_seed, (uint64_t)n->id,
        g->dropout_micro * (uint64_t)N, p, scale);
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

static st_status dropout_backward(st_node *n, st_graph *g) {
    const int64_t N = n->out->count;
    const float p = n->args.f[ST_DROPOUT_F_P];
    if (!n->in[0]->grad) return ST_OK;
    const st_fbuf dx = st_grad(n->in[0]), dy = st_grad(n->out);
    if (!g->training || p == 0.0f) return st_grad_pass_cuda(g, dx, dy, N, n->in_acc[0]);
    const float scale = 1.0f / (1.0f - p);
    dropout_backward_kernel<<<st_cuda_blocks(N, 256), 256, 0, st_cuda_stream(g)>>>(
        dy, dx, N, g->dropout_seed, (uint64_t)n->id, g->dropout_micro * (uint64_t)N, p, scale, n->in_acc[0]);
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

extern "C" const st_layer_ops st_cuda_dropout_ops = {
    "dropout", dropout_forward, dropout_backward, NULL, false, true, true, false, 0};
