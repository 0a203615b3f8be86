/* CUDA twin of src/layers/flatten.c: (B, H, W, C) -> (B, C*H*W) in PyTorch's
 * (C, H, W) order (a per-sample (HW, C) -> (C, HW) transpose), or a plain
 * reshape (a device copy) for any other input. Backward is the inverse
 * transpose (or the identity), written or added as in_acc says. Not tuned:
 * one thread per element, no shared-memory tiles. Either storage on each
 * side (src/layers/half_io.h). */
#include "kernels.cuh"

enum { THREADS = 256 };

/* y[b, c*HW + s] = x[b, s, c] */
static __global__ void to_chw_kernel(st_fbuf x, st_fbuf y, int64_t B, int64_t HW, int64_t C) {
    const int64_t n = B * HW * C;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t s = i % HW, c = (i / HW) % C, b = i / (HW * C);
        st_st(y, i, st_ld(x, (b * HW + s) * C + c));
    }
}

/* dx[b, s, c] (+)= dy[b, c*HW + s] */
static __global__ void from_chw_kernel(st_fbuf dy, st_fbuf dx, int64_t B, int64_t HW, int64_t C, bool acc) {
    const int64_t n = B * HW * C;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = i % C, s = (i / C) % HW, b = i / (HW * C);
        const float v = st_ld(dy, (b * C + c) * HW + s);
        st_st(dx, i, acc ? st_ld(dx, i) + v : v);
    }
}

static st_status flatten_forward(st_node *n, st_graph *g) {
    cudaStream_t st = st_cuda_stream(g);
    const int64_t N = n->out->count;
    if (!n->args.i[ST_FLATTEN_IMAGE])
        return st_grad_pass_cuda(g, st_data(n->out), st_data(n->in[0]), N, false);
    const int64_t B = n->args.i[ST_FLATTEN_B], HW = n->args.i[ST_FLATTEN_H] * n->args.i[ST_FLATTEN_W];
    to_chw_kernel<<<st_cuda_blocks(N, THREADS), THREADS, 0, st>>>(st_data(n->in[0]), st_data(n->out), B, HW,
                                                                  n->args.i[ST_FLATTEN_C]);
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

static st_status flatten_backward(st_node *n, st_graph *g) {
    if (!n->in[0]->grad) return ST_OK;
    cudaStream_t st = st_cuda_stream(g);
    const st_fbuf dx = st_grad(n->in[0]), dy = st_grad(n->out);
    const bool acc = n->in_acc[0];
    const int64_t N = n->out->count;
    if (!n->args.i[ST_FLATTEN_IMAGE]) return st_grad_pass_cuda(g, dx, dy, N, acc);
    const int64_t B = n->args.i[ST_FLATTEN_B], HW = n->args.i[ST_FLATTEN_H] * n->args.i[ST_FLATTEN_W];
    from_chw_kernel<<<st_cuda_blocks(N, THREADS), THREADS, 0, st>>>(dy, dx, B, HW, n->args.i[ST_FLATTEN_C],
                                                                    acc);
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

extern "C" const st_layer_ops st_cuda_flatten_ops = {
    "flatten", flatten_forward, flatten_backward, NULL, false, true, true, false, 0};
