/* CUDA twin of src/layers/linear.c: y = x W^T + b through cuBLASLt.
 *
 * Math mode: fp32 inputs with fp32 compute (CUBLAS_COMPUTE_32F), so parity
 * with the CPU holds to fp32 rounding (matmul.cuh st_graph_matmul).
 *
 * bf16 and fp16 runs (g->params->precision, docs/precision.md): every operand
 * of every product here holds 16-bit values (the graph rounds node outputs,
 * graph inputs, activation gradients and the parameters' compute copy), and
 * the products run on tensor cores with fp32 accumulation
 * (CUBLAS_COMPUTE_32F, A/B CUDA_R_16BF or CUDA_R_16F): products of 16-bit
 * values are exact in fp32, so the result is the fp32 path's up to the order
 * of the fp32 sums. The weights come from the parameters' 16-bit compute copy;
 * an activation or gradient stored in 16 bits (src/layers/half_io.h) is read
 * as it is, one stored as floats is converted exactly into the scratch. The
 * output y and the input gradient dx, when stored in 16 bits, get the fp32 result
 * (bias and, for an accumulated dx, the old value added in fp32) rounded
 * once, as the graph would round a float one. Should cuBLASLt offer no
 * 16-bit algorithm for a layout, matmul.cu takes the fp32 path or its plain
 * kernel (the same values).
 *
 * Row-major to column-major. cuBLASLt is column-major: a row-major (R, C)
 * matrix with leading dimension C is, in the same memory, a column-major
 * (C, R) matrix with leading dimension C, i.e. its transpose. So every
 * row-major product P = A B is computed as the column-major P^T = B^T A^T,
 * with each operand passed as the buffer it already is:
 *
 *   forward  y (M,N) = x W^T      ->  y^T (N x M) = op(w) x^T
 *            W (N,K): w is col-major (K x N) = W^T, op = T    [m=N n=M k=K]
 *            W (K,N) (in_out): w is col-major (N x K) = W_io^T, which
 *                     is the operand itself, op = N           [m=N n=M k=K]
 *            bias (N) = one value per row of y^T: CUBLASLT_EPILOGUE_BIAS.
 *   dW (N,K) += dy^T x  ->  dW^T (K x N) = x^T dy:  A = x (K x M, N),
 *            B = dy (N x M, T), beta 1                        [m=K n=N k=M]
 *   dW (K,N) += x^T dy  ->  dW^T (N x K) = dy^T x:  A = dy (N x M, N),
 *            B = x (K x M, T), beta 1                         [m=N n=K k=M]
 *   dx (M,K) = dy W     ->  dx^T (K x M) = W^T dy^T: A = w (K x N, N),
 *            B = dy (N x M, N), beta 0 or 1 (in_acc)          [m=K n=M k=N]
 *   dx (M,K) = dy W_io^T -> dx^T = W_io dy^T:        A = w (N x K, T),
 *            B = dy (N x M, N)                                [m=K n=M k=N]
 *
 * The bias gradient db (N) += sum over rows of dy: a deterministic column
 * sum (kernels.cuh) by default. With g->fuse_bias_grad (model.fused_bias_grad)
 * the dW product sums it in its epilogue instead, from the dy it reads
 * anyway: BGRADB (dy is B, op T: its columns over k = M) or, in_out, BGRADA
 * (dy is A, op N: its rows over k). The epilogue writes the sums (of dW's
 * type, fp32) rather than adding them, so they go to the graph's scratch
 * and one small kernel adds them to db, where gradients accumulate over
 * micro-steps. Should cuBLASLt offer no algorithm with the epilogue, the
 * plain product and the column sum run.
 *
 * Every product goes through st_cuda_matmul (matmul.cuh), the backend's one
 * cuBLASLt path: its descriptors, layouts and the heuristic's choice are made
 * once per shape and layout and kept in the device, so a step makes none. */
#include "kernels.cuh"
#include "matmul.cuh"

/* y[i, :] = b: the bias for a product with beta 1 (the CPU's way). */
static __global__ void bias_rows_kernel(st_fbuf b, st_fbuf y, int64_t M, int64_t N) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < M * N;
         i += (int64_t)gridDim.x * blockDim.x)
        st_st(y, i, st_ld(b, i % N));
}

/* GELU in the epilogue (graph.c fuse_gelu): forward, the next node is a
 * GELU of this output, whose output the product writes (GELU_AUX_BIAS; this
 * output, GELU's input, is the epilogue's aux); backward, this input is a
 * GELU's output, and the input-gradient product writes GELU's input
 * gradient (DGELU, aux = GELU's input; beta 0: that gradient has no other
 * writer). When cuBLASLt offers no algorithm for the epilogue, the
 * unfused products run and then the GELU layer's own kernel.
 *
 * The residual in the product (graph.c fuse_gelu, fuse_residual): forward,
 * the next node adds this output to a residual; the product takes the
 * residual as its C (beta 1) and writes the add's output, bias epilogue
 * as usual, so this output is never written (nothing reads it). Without
 * an algorithm for that, this product, then the add layer's kernel. */
static st_status linear_forward(st_node *n, st_graph *g) {
    const int64_t M = n->args.i[ST_LINEAR_M], K = n->args.i[ST_LINEAR_K], N = n->args.i[ST_LINEAR_N];
    const bool io = n->args.i[ST_LINEAR_IN_OUT];
    const st_fbuf x = st_data(n->in[0]);     /* (M, K) */
    const st_fbuf w = st_data(n->params[0]); /* (N, K), or (K, N) when in_out: 16-bit in bf16/fp16 */
    const st_fbuf y = st_data(n->out);       /* (M, N) */
    const st_tensor *bt = n->args.i[ST_LINEAR_BIAS] ? n->params[1] : NULL;
    /* the epilogue's bias is of y's storage: a 16-bit bias (a bf16 or fp16
     * run) with a float y (the logits) takes the bias-rows way below */
    const st_fbuf bb = bt ? st_data(bt) : st_fbuf{NULL, ST_PREC_FP32};
    /* ... and 16-byte aligned: no preference tells cuBLASLt's heuristic the
     * bias vector's alignment, and its kernels may load it 16 bytes at a
     * time (a misaligned address, the context lost); the packed arena puts
     * a bias wherever the tensors before it end (an mlp of hidden width 50:
     * 8 bytes) */
    const void *b = bt && bb.t == y.t && (uintptr_t)bb.p % 16 == 0 ? bb.p : NULL;
    st_status s = ST_ERR_UNSUPPORTED;
    if (n->fwd_fuses_next) {
        st_node *next = &g->nodes[n->id + 1];
        if (st_node_fuses(g, n, "add") && (b || !bt)) {
            const st_tensor *res = next->in[0] == n->out ? next->in[1] : next->in[0];
            s = st_graph_matmul_ep(g, !io, false, N, M, K, w, io ? N : K, x, K, 1.0f, st_data(next->out), N,
                                   b ? ST_MATMUL_EP_BIAS : ST_MATMUL_EP_NONE, b, NULL, res->data,
                                   "linear forward with residual");
        } else if (st_node_fuses(g, n, "gelu") && (b || !bt)) {
            s = st_graph_matmul_ep(g, !io, false, N, M, K, w, io ? N : K, x, K, 0.0f, st_data(next->out), N,
                                   b ? ST_MATMUL_EP_GELU_AUX_BIAS : ST_MATMUL_EP_GELU_AUX, b, y.p, NULL,
                                   "linear forward with GELU");
        }
        if (s == ST_OK) n->fwd_fused_ran = true;
        if (s != ST_ERR_UNSUPPORTED) return s;
        st_clear_error(); /* this product, then the next layer's kernel */
        n->fwd_fuses_next = false;
        s = linear_forward(n, g);
        n->fwd_fuses_next = true;
        return s == ST_OK ? next->ops->forward(next, g) : s;
    }
    if (b || !bt) s = st_graph_matmul(g, !io, false, N, M, K, w, io ? N : K, x, K, 0.0f, y, N, b, "linear forward");
    if (s != ST_ERR_UNSUPPORTED || !bt) return s;
    /* No algorithm takes this bias pointer (e.g. its alignment in the packed
     * arena) in the epilogue, or the bias is 16-bit and y fp32: write the
     * bias rows, then add the product (one rounding of a 16-bit y still: the
     * bias is a 16-bit value). */
    if (s != ST_OK) st_clear_error();
    bias_rows_kernel<<<st_cuda_blocks(M * N, 256), 256, 0, st_cuda_stream(g)>>>(bb, y, M, N);
    ST_CUDA_LAUNCHED();
    return st_graph_matmul(g, !io, false, N, M, K, w, io ? N : K, x, K, 1.0f, y, N, NULL, "linear forward");
}

/* dW += dy^T x (or x^T dy, in_out; see above); with `sums`, also the bias
 * gradient's column sums of dy written there by the product's epilogue. */
static st_status linear_dw(st_graph *g, const st_node *n, float *sums) {
    const int64_t M = n->args.i[ST_LINEAR_M], K = n->args.i[ST_LINEAR_K], N = n->args.i[ST_LINEAR_N];
    const bool io = n->args.i[ST_LINEAR_IN_OUT];
    const st_fbuf x = st_data(n->in[0]);                   /* (M, K) */
    const st_fbuf dy = st_grad(n->out);                    /* (M, N) */
    const st_fbuf dw = {n->params[0]->grad, ST_PREC_FP32}; /* like w: fp32 gradients */
    const char *what = sums ? "linear dW with db" : "linear dW";
    if (io)
        return st_graph_matmul_bgrad(g, false, true, N, K, M, dy, N, x, K, 1.0f, dw, N,
                                     sums ? ST_MATMUL_EP_BGRADA : ST_MATMUL_EP_NONE, sums, what);
    return st_graph_matmul_bgrad(g, false, true, K, N, M, x, K, dy, N, 1.0f, dw, K,
                                 sums ? ST_MATMUL_EP_BGRADB : ST_MATMUL_EP_NONE, sums, what);
}

static st_status linear_backward(st_node *n, st_graph *g) {
    const int64_t M = n->args.i[ST_LINEAR_M], K = n->args.i[ST_LINEAR_K], N = n->args.i[ST_LINEAR_N];
    const bool io = n->args.i[ST_LINEAR_IN_OUT];
    const st_fbuf w = st_data(n->params[0]);               /* (N, K) or (K, N) */
    const st_fbuf dy = st_grad(n->out);                    /* (M, N) */
    const st_fbuf dw = {n->params[0]->grad, ST_PREC_FP32}; /* like w: fp32 gradients */
    float *db = n->args.i[ST_LINEAR_BIAS] ? n->params[1]->grad : NULL;
    bool fused = false;                    /* db summed by dW's product */
    if (dw.p && db && g->fuse_bias_grad) { /* db in dW's epilogue, into the scratch, then added */
        const st_status s = linear_dw(g, n, g->work);
        if (s == ST_OK) {
            st_graph_span(g, "linear db add", false, 0);
            ST_TRY(st_grad_pass_cuda(g, st_fbuf{db, ST_PREC_FP32}, st_fbuf{g->work, ST_PREC_FP32}, N, true));
            st_graph_span(g, "linear db add", true, 0);
            g->dev->bgrad_calls++;
            fused = true;
        } else if (s == ST_ERR_UNSUPPORTED) {
            st_clear_error(); /* below: the plain product and the column sum */
        } else {
            return s;
        }
    }
    if (dw.p && !fused) ST_TRY(linear_dw(g, n, NULL));
    if (db && !fused) {
        st_graph_span(g, "linear db", false, 0);
        ST_TRY(st_colsum(g, st_colsum_act{dy, N}, M, N, g->work, db));
        st_graph_span(g, "linear db", true, 0);
    }
    st_node *gelu = n->bwd_fuses_prev ? &g->nodes[n->id - 1] : NULL;
    if (n->in[0]->grad && gelu) { /* GELU's input gradient, (M, K) */
        const st_status s =
            st_graph_matmul_ep(g, io, false, K, M, N, w, io ? N : K, dy, N, 0.0f, st_grad(gelu->in[0]), K,
                               ST_MATMUL_EP_DGELU, NULL, st_data(gelu->in[0]).p, NULL, "linear dx with GELU");
        if (s == ST_OK) n->bwd_fused_ran = true;
        if (s != ST_ERR_UNSUPPORTED) return s;
        st_clear_error(); /* below: dx, then GELU's kernel */
    }
    if (n->in[0]->grad) { /* (M, K) */
        const st_fbuf dx = st_grad(n->in[0]);
        const float beta = n->in_acc[0] ? 1.0f : 0.0f;
        if (io)
            ST_TRY(st_graph_matmul(g, true, false, K, M, N, w, N, dy, N, beta, dx, K, NULL, "linear dx"));
        else
            ST_TRY(st_graph_matmul(g, false, false, K, M, N, w, K, dy, N, beta, dx, K, NULL, "linear dx"));
    }
    /* the DGELU epilogue refused: dx went into GELU's output gradient (no
     * other writer: beta 0), which shares its input gradient's memory
     * (graph.c place_grads); GELU's kernel reads each element before it
     * writes that element's input gradient */
    if (gelu && n->in[0]->grad) return gelu->ops->backward(gelu, g);
    return ST_OK;
}

static st_status linear_prepare(st_node *n, st_graph *g) {
    if (n->args.i[ST_LINEAR_BIAS]) { /* the column sum's chunks, or the epilogue's sums */
        const int64_t N = n->args.i[ST_LINEAR_N], w = st_colsum_work(n->args.i[ST_LINEAR_M], N);
        st_need_work(n, g->fuse_bias_grad && w < N ? N : w);
    }
    return ST_OK;
}

extern "C" const st_layer_ops st_cuda_linear_ops = {
    "linear", linear_forward, linear_backward, linear_prepare, false, true, false, false, 0};
