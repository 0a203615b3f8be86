/* CUDA twin of src/layers/last_row.c: y[b] = x[b, n - 1] (cached decoding,
 * forward alone, fp32 activations). */
#include "kernels.cuh"

static __global__ void last_row_kernel(const float *x, float *y, int64_t N, int64_t C, int64_t total) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = x[(i / C * N + N - 1) * C + i % C];
}

static st_status last_row_forward(st_node *n, st_graph *g) {
    const int64_t B = n->args.i[ST_LASTROW_B], N = n->args.i[ST_LASTROW_N], C = n->args.i[ST_LASTROW_C];
    if (n->in[0]->store != ST_PREC_FP32 || n->out->store != ST_PREC_FP32)
        return st_fail(ST_ERR_ARG, "last_row %s: runs on fp32 activations", n->out->name);
    last_row_kernel<<<st_cuda_blocks(B * C, 256), 256, 0, st_cuda_stream(g)>>>(n->in[0]->data, n->out->data, N,
                                                                               C, B * C);
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

static st_status last_row_backward(st_node *n, st_graph *g) {
    (void)g;
    return st_fail(ST_ERR_INTERNAL, "last_row %s: no backward (cached decoding runs forward alone)",
                   n->out->name);
}

extern "C" const st_layer_ops st_cuda_last_row_ops = {
    "last_row", last_row_forward, last_row_backward, NULL, false, true, true, false, 0};
