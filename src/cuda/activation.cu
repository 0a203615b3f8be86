/* CUDA twin of src/layers/activation.c: GELU (tanh form) and ReLU, element
 * by element; nothing is saved (GELU's backward reads the input, ReLU's the
 * output).
 * GELU's tanh is CUDA's tanhf (2 ulp) where the CPU uses core/fastmath.h's
 * (1e-7 absolute): the two agree to fp32 rounding, not bits. Either storage
 * for input and output (src/layers/half_io.h). */
#include "kernels.cuh"

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

__device__ __forceinline__ float gelu_fwd(float v) {
    return 0.5f * v * (1.0f + tanhf(GELU_K * (v + GELU_A * v * v * v)));
}

/* 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2), t = tanh(u) */
__device__ __forceinline__ float gelu_grad(float v) {
    const float t = tanhf(GELU_K * (v + GELU_A * v * v * v));
    return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_A * v * v);
}

/* RELU selects the activation: 0 GELU, 1 ReLU (derivative 0 at 0, a NaN kept
 * and its dy passed on, as PyTorch and the CPU twin). */
template <int RELU> static __global__ void act_forward_kernel(st_fbuf x, st_fbuf y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float v = st_ld(x, i);
        st_st(y, i, RELU ? (!(v <= 0.0f) ? v : 0.0f) : gelu_fwd(v));
    }
}

/* dx = f'(x) dy, written (never read: a stale NaN is overwritten) or added.
 * v is GELU's input, ReLU's output (y <= 0 exactly where x <= 0; as the CPU
 * twin, so that ReLU's input need not outlive forward). */
template <int RELU>
static __global__ void act_backward_kernel(st_fbuf v_in, st_fbuf dy, st_fbuf dx, int64_t n, bool acc) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float v = st_ld(v_in, i), g = st_ld(dy, i);
        const float d = RELU ? (v <= 0.0f ? 0.0f : g) : gelu_grad(v) * g;
        st_st(dx, i, acc ? st_ld(dx, i) + d : d);
    }
}

template <int RELU> static st_status act_forward(st_node *n, st_graph *g) {
    const int64_t N = n->out->count;
    act_forward_kernel<RELU>
        <<<st_cuda_blocks(N, 256), 256, 0, st_cuda_stream(g)>>>(st_data(n->in[0]), st_data(n->out), N);
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

template <int RELU> static st_status act_backward(st_node *n, st_graph *g) {
    const int64_t N = n->out->count;
    if (!n->in[0]->grad) return ST_OK;
    act_backward_kernel<RELU><<<st_cuda_blocks(N, 256), 256, 0, st_cuda_stream(g)>>>(
        RELU ? st_data(n->out) : st_data(n->in[0]), st_grad(n->out), st_grad(n->in[0]), N, n->in_acc[0]);
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

extern "C" const st_layer_ops st_cuda_gelu_ops = {
    "gelu", act_forward<0>, act_backward<0>, NULL, false, true, false, true, 0};
extern "C" const st_layer_ops st_cuda_relu_ops = {
    "relu", act_forward<1>, act_backward<1>, NULL, false, false, true, true, 0};
