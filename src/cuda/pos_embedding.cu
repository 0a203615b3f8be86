/* CUDA twin of src/layers/pos_embedding.c: y[b, t, :] = x[b, t, :] + weight[pos + t, :]
 * (pos = g->pos: 0 but in cached decoding).
 * Backward: dweight[t, c] += sum over b of dy[b, t, c], a deterministic
 * column sum (kernels.cuh) of dy seen as (B, T*C); dx = dy (or += dy).
 * Activations and the weight in either storage (src/layers/half_io.h). */
#include "kernels.cuh"

extern "C" st_status st_pos_embedding_check(const st_node *n, const st_graph *g); /* (layers.h) */

/* (the first row's position: *posp when not NULL, else pos; cached
 * decoding's, whose launches may be replayed with posp's new value) */
static __global__ void posemb_forward_kernel(st_fbuf x, st_fbuf w, st_fbuf y, int64_t n, int64_t TC,
                                             int64_t C, int64_t pos, const int64_t *posp) {
    const int64_t w0 = (posp ? *posp : pos) * C;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        st_st(y, i, st_ld(x, i) + st_ld(w, w0 + i % TC));
}

static st_status pos_embedding_forward(st_node *n, st_graph *g) {
    const int64_t B = n->args.i[ST_POSEMB_B], T = n->args.i[ST_POSEMB_T], C = n->args.i[ST_POSEMB_C];
    ST_TRY(st_pos_embedding_check(n, g));
    posemb_forward_kernel<<<st_cuda_blocks(B * T * C, 256), 256, 0, st_cuda_stream(g)>>>(
        st_data(n->in[0]), st_data(n->params[0]), st_data(n->out), B * T * C, T * C, C, g->pos, g->pos_dev);
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

static st_status pos_embedding_backward(st_node *n, st_graph *g) {
    const int64_t B = n->args.i[ST_POSEMB_B], T = n->args.i[ST_POSEMB_T], C = n->args.i[ST_POSEMB_C];
    const st_fbuf dy = st_grad(n->out); /* (B, T, C) */
    float *dw = n->params[0]->grad;     /* (max_len, C): rows pos..pos+T-1, forward's */
    if (dw) ST_TRY(st_colsum(g, st_colsum_act{dy, T * C}, B, T * C, g->work, dw + g->pos * C));
    if (n->in[0]->grad)
        ST_TRY(st_grad_pass_cuda(g, st_grad(n->in[0]), st_grad(n->out), B * T * C, n->in_acc[0]));
    return ST_OK;
}

static st_status pos_embedding_prepare(st_node *n, st_graph *g) {
    st_need_work(n, st_colsum_work(n->args.i[ST_POSEMB_B], n->args.i[ST_POSEMB_T] * n->args.i[ST_POSEMB_C]));
    return ST_OK;
}

extern "C" const st_layer_ops st_cuda_pos_embedding_ops = {"pos_embedding",
                                                           pos_embedding_forward,
                                                           pos_embedding_backward,
                                                           pos_embedding_prepare,
                                                           false,
                                                           true,
                                                           true,
                                                           false,
                                                           1};
