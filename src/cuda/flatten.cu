/* CUDA twin of src/layers/flatten.c: (B, H, W, C) -> (B, C*H*W) in PyTorch's
 * (C, H, W) order (a per-sample (HW, C) -> (C, HW) transpose), or a plain
 * reshape (a device copy) for any other input. Backward is the inverse
 * transpose (or the identity), written or added as in_acc says. Not tuned:
 * one thread per element, no shared-memory tiles. */
#include "common.cuh"

enum { THREADS = 256 };

/* y[b, c*HW + s] = x[b, s, c] */
static __global__ void to_chw_kernel(const float *x, float *y, int64_t B, int64_t HW, int64_t C) {
    const int64_t n = B * HW * C;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t s = i % HW, c = (i / HW) % C, b = i / (HW * C);
        y[i] = x[(b * HW + s) * C + c];
    }
}

/* dx[b, s, c] (+)= dy[b, c*HW + s] */
static __global__ void from_chw_kernel(const float *dy, float *dx, int64_t B, int64_t HW, int64_t C,
                                       bool acc) {
    const int64_t n = B * HW * C;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = i % C, s = (i / C) % HW, b = i / (HW * C);
        const float v = dy[(b * C + c) * HW + s];
        dx[i] = acc ? dx[i] + v : v;
    }
}

static __global__ void add_into_kernel(float *dx, const float *dy, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dx[i] += dy[i];
}

static st_status flatten_forward(st_node *n, st_graph *g) {
    cudaStream_t st = st_cuda_stream(g);
    const int64_t N = n->out->count;
    if (!n->args.i[ST_FLATTEN_IMAGE]) {
        ST_CUDA_TRY(cudaMemcpyAsync(n->out->data, n->in[0]->data, (size_t)N * sizeof(float),
                                    cudaMemcpyDeviceToDevice, st));
        return ST_OK;
    }
    const int64_t B = n->args.i[ST_FLATTEN_B], HW = n->args.i[ST_FLATTEN_H] * n->args.i[ST_FLATTEN_W];
    to_chw_kernel<<<st_cuda_blocks(N, THREADS), THREADS, 0, st>>>(n->in[0]->data, n->out->data, B, HW,
                                                                  n->args.i[ST_FLATTEN_C]);
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

static st_status flatten_backward(st_node *n, st_graph *g) {
    float *dx = n->in[0]->grad;
    if (!dx) return ST_OK;
    cudaStream_t st = st_cuda_stream(g);
    const float *dy = n->out->grad;
    const bool acc = n->in_acc[0];
    const int64_t N = n->out->count;
    if (!n->args.i[ST_FLATTEN_IMAGE]) {
        if (!acc) {
            ST_CUDA_TRY(cudaMemcpyAsync(dx, dy, (size_t)N * sizeof(float), cudaMemcpyDeviceToDevice, st));
            return ST_OK;
        }
        add_into_kernel<<<st_cuda_blocks(N, THREADS), THREADS, 0, st>>>(dx, dy, N);
        ST_CUDA_LAUNCHED();
        return ST_OK;
    }
    const int64_t B = n->args.i[ST_FLATTEN_B], HW = n->args.i[ST_FLATTEN_H] * n->args.i[ST_FLATTEN_W];
    from_chw_kernel<<<st_cuda_blocks(N, THREADS), THREADS, 0, st>>>(dy, dx, B, HW, n->args.i[ST_FLATTEN_C],
                                                                    acc);
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

extern "C" const st_layer_ops st_cuda_flatten_ops = {"flatten", flatten_forward, flatten_backward, NULL};
