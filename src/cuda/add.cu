/* CUDA twin of src/layers/add.c: y = a + b, same shapes. Backward passes dy
 * to each input in order, so when a and b are one tensor the second pass
 * (in_acc[1] set) adds onto what the first wrote, as on the CPU. Either
 * storage for each tensor (src/layers/half_io.h). */
#include "kernels.cuh"

/* VW elements a thread: 8 (16-byte accesses, st_ldv) when the three arrays
 * are 16-byte aligned and n a multiple of 8. */
template <int VW> static __global__ void add_kernel(st_fbuf a, st_fbuf b, st_fbuf y, int64_t n) {
    for (int64_t i = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) * VW; i < n;
         i += (int64_t)gridDim.x * blockDim.x * VW) {
        float av[VW], bv[VW];
        st_ldv<VW>(a, i, av);
        st_ldv<VW>(b, i, bv);
#pragma unroll
        for (int k = 0; k < VW; k++)
            av[k] += bv[k];
        st_stv<VW>(y, i, av);
    }
}

static st_status add_forward(st_node *n, st_graph *g) {
    const int64_t N = n->out->count;
    const st_fbuf a = st_data(n->in[0]), b = st_data(n->in[1]), y = st_data(n->out);
    if (st_fbuf_aligned8(a, N) && st_fbuf_aligned8(b, N) && st_fbuf_aligned8(y, N))
        add_kernel<8><<<st_cuda_blocks(N / 8, 256), 256, 0, st_cuda_stream(g)>>>(a, b, y, N);
    else
        add_kernel<1><<<st_cuda_blocks(N, 256), 256, 0, st_cuda_stream(g)>>>(a, b, y, N);
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

static st_status add_backward(st_node *n, st_graph *g) {
    for (int k = 0; k < 2; k++)
        if (n->in[k]->grad)
            ST_TRY(st_grad_pass_cuda(g, st_grad(n->in[k]), st_grad(n->out), n->out->count, n->in_acc[k]));
    return ST_OK;
}

extern "C" const st_layer_ops st_cuda_add_ops = {"add", add_forward, add_backward, NULL, false,
                                                 true,  true,        false,        3};
