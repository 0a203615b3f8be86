/* Max pooling on NHWC images: k x k windows, a stride, no padding.
 *
 * Forward keeps, per output element, the flat index into x of the element it
 * took (int32 in the node's saved state); backward scatters dy through it.
 * Ties go to the first element of the window in (kh, kw) order and NaN wins,
 * as in PyTorch. Not here: padding, dilation, ceil mode. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "layers.h"


static st_status maxpool2d_forward(st_node *n, st_graph *g) {
    const st_tensor *xt = n->in[0];
    const int64_t H = xt->shape[1], W = xt->shape[2], C = xt->shape[3];
    const int64_t Ho = n->out->shape[1], Wo = n->out->shape[2];
    const int64_t k = n->args.i[ST_POOL_K], s = n->args.i[ST_POOL_STRIDE];
    const float *x = xt->data;          /* (B, H, W, C) */
    float *y = n->out->data;            /* (B, Ho, Wo, C) */
    int32_t *arg = (int32_t *)n->saved; /* (B, Ho, Wo, C) flat indices into x */
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < xt->shape[0] * Ho; r++) {
        const int64_t b = r / Ho, oh = r % Ho;
        for (int64_t ow = 0; ow < Wo; ow++) {
            float *yo = y + (r * Wo + ow) * C;
            int32_t *ao = arg + (r * Wo + ow) * C;
            for (int64_t kh = 0; kh < k; kh++)
                for (int64_t kw = 0; kw < k; kw++) {
                    const int64_t base = ((b * H + oh * s + kh) * W + ow * s + kw) * C;
                    const float *xi = x + base;
                    if (kh == 0 && kw == 0) {
                        for (int64_t c = 0; c < C; c++) {
                            yo[c] = xi[c];
                            ao[c] = (int32_t)(base + c);
                        }
                        continue;
                    }
                    for (int64_t c = 0; c < C; c++) {
                        const float v = xi[c];
                        if (v > yo[c] || v != v) {
                            yo[c] = v;
                            ao[c] = (int32_t)(base + c);
                        }
                    }
                }
        }
    }
    return ST_OK;
}

static st_status maxpool2d_backward(st_node *n, st_graph *g) {
    float *dx = n->in[0]->grad; /* (B, H, W, C) */
    if (!dx) return ST_OK;
    const int64_t B = n->in[0]->shape[0];
    const int64_t per_in = n->in[0]->count / B, per_out = n->out->count / B;
    const float *dy = n->out->grad; /* (B, Ho, Wo, C) */
    const int32_t *arg = (const int32_t *)n->saved;
    const bool acc = n->in_acc[0];
    /* Windows never leave their image, so images are independent. */
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < B; b++) {
        if (!acc) memset(dx + b * per_in, 0, (size_t)per_in * sizeof(float));
        for (int64_t i = b * per_out; i < (b + 1) * per_out; i++)
            dx[arg[i]] += dy[i];
    }
    return ST_OK;
}

static const st_layer_ops maxpool2d_cpu = {
    "maxpool2d", maxpool2d_forward, maxpool2d_backward, NULL, false, true, true, false, 0};

st_status st_maxpool2d(st_graph *g, const char *name, st_tensor *x, int64_t kernel, int64_t stride,
                       st_tensor **y) {
    if (x->dtype != ST_F32 || x->ndim != 4)
        return st_fail(ST_ERR_SHAPE, "maxpool2d %s: needs a float NHWC input (B, H, W, C), got %d dimensions",
                       name, x->ndim);
    if (kernel <= 0 || stride <= 0)
        return st_fail(ST_ERR_SHAPE, "maxpool2d %s: kernel %lld and stride %lld must be positive", name,
                       (long long)kernel, (long long)stride);
    if (kernel > x->shape[1] || kernel > x->shape[2])
        return st_fail(ST_ERR_SHAPE, "maxpool2d %s: kernel %lld is larger than the input %lldx%lld", name,
                       (long long)kernel, (long long)x->shape[1], (long long)x->shape[2]);
    if (x->count > INT32_MAX)
        return st_fail(ST_ERR_SHAPE,
                       "maxpool2d %s: %lld input elements exceed the int32 argmax; "
                       "lower the micro-batch size",
                       name, (long long)x->count);
    int64_t shape[4] = {x->shape[0], (x->shape[1] - kernel) / stride + 1, (x->shape[2] - kernel) / stride + 1,
                        x->shape[3]};
    char oname[ST_NAME_MAX];
    snprintf(oname, sizeof oname, "%s.out", name);
    st_tensor *out;
    ST_TRY(st_graph_act(g, oname, 4, shape, &out));
    st_node *node;
    ST_TRY(st_graph_node(g, &maxpool2d_cpu, &x, 1, NULL, 0, out, &node));
    node->args.i[ST_POOL_K] = kernel;
    node->args.i[ST_POOL_STRIDE] = stride;
    node->saved_count = out->count; /* int32 argmax, one per output (same size as a float) */
    *y = out;
    return ST_OK;
}
