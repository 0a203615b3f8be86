/* Whole-model CUDA parity: the mlp, the cnn (with batch norm + ReLU and
 * with conv bias + ReLU) and a small GPT, created once on the host and once
 * on a CUDA device (st_model_create_on), given the same weights and batch:
 * one training forward + backward, then logits, loss, every parameter
 * gradient and every buffer (batch-norm running statistics) must agree, then
 * an eval forward's logits and loss. Also: st_model_init_weights on the
 * device makes the host's values, and weights saved from the device load
 * back into a host model unchanged. Skips without a CUDA device, after
 * running every case host against host (which checks the test itself).
 *
 * Tolerance, per tensor, scale-aware because gradients of a deep chain are
 * small next to the tensor's largest entry:
 *   |dev - host| <= RTOL |host| + ATOL max|host|,  RTOL = 1e-3, ATOL = 1e-4,
 * for logits, gradients and buffers (fp32 on both sides, different summation
 * orders through up to ~10 layers); the loss within 1e-5 relative. The
 * device's activation and gradient arenas are NaN before the run, so an
 * unwritten element fails, and the activations no backward reads (the
 * arena's transient section) are NaN again between forward and backward,
 * on both sides, so a backward reading one fails.
 *
 * bf16 and fp16 (docs/precision.md): the mlp, two cnns (conv bias + ReLU,
 * and batch norm + ReLU, both without max-pooling: see cnn_nopool) and the
 * GPT again with precision bf16 and fp16 on both sides, the host emulating
 * the device's rounding; fp16's backward starts from a loss scale of 1024.
 * The bf16 GPT runs once more with model.attention_kernel=cudnn (cuDNN's
 * fused attention, which must have run where the build has cuDNN) under
 * the same bounds: its P, rounded to bf16 before P V, is one more rounding
 * of the kind below.
 * Every activation is rounded to 16 bits on both sides, so where the two
 * fp32 sums before a rounding fall on either side of a 16-bit boundary the
 * values differ by a unit in the last place (2^-8 to 2^-7 relative in bf16,
 * 2^-11 to 2^-10 in fp16), and later layers carry that on; sums of rounded
 * gradients that nearly cancel (bias and batch-norm gradients) turn such
 * units into large relative differences of the sum. So:
 *   - logits: RTOL 3e-2 and ATOL 1e-2 (bf16), 4e-3 and 2e-3 (fp16), of the
 *     scale-aware form above; the loss within 5e-3 / 1e-3 relative;
 *   - parameter gradients and buffers: per tensor ||dev - host|| / ||host||
 *     <= 3e-2 / 1e-2 (mlp, gpt), 0.1 / 0.05 (bias cnn), 0.15 / 0.06
 *     (batch-norm cnn).
 * Measured on the CPU with two emulated runs whose non-elementwise node
 * outputs and gradients were perturbed by up to 3e-6 relative before each
 * rounding (standing in for the device's summation orders), 20 seeds: at
 * most 0.0075 / 0.00092 for the logits, 0.007 / 0.0009 (gpt), 0.025 / 0.02
 * (bias cnn), 0.035 / 0.033 (batch-norm cnn) for the gradients. These bounds
 * are loose next to one rounding error but not next to a missing rounding
 * point, so the rounding itself is checked exactly: the device's logits are
 * 16-bit values and its compute copy of the weights is the host's, bit for
 * bit. Each case prints its largest differences.
 *
 * Kinks: where a ReLU's input is within 1e-6 of its tensor's largest |value|
 * from 0, or a max-pool window's two largest values are that close (but not
 * both exactly 0), the device's and the host's summation orders may take
 * different sides, and the gradients then differ by far more than any
 * tolerance (one draw in several hundred did, CP_SEED=1795754457: 4% in the
 * fp32 batch-norm cnn's conv.2.weight, on the emulator too). The fp32
 * cases look for such a point in the host's forward and draw again (another
 * seed, said so, up to 8 times) before comparing anything; the 16-bit
 * cases, whose layers' inputs already differ by roundings, look for a ReLU
 * that took the other side on the device near 0 (relu_flipped). */
#include <unistd.h>

#include "core/mem.h"
#include "cuda_parity.h"
#include "layers/args.h"
#include "model/model.h"
#ifdef ST_HAVE_CUDA
#include "cuda/cuda.h"
#endif

#define RTOL 1e-3
#define ATOL 1e-4
#define L2_BF16 3e-2
#define L2_FP16 1e-2
#define L2_CNN_BF16 0.1
#define L2_CNN_FP16 0.05
#define L2_BN_BF16 0.15
#define L2_BN_FP16 0.06

typedef struct model_case {
    const char *label;
    const char *type;
    int64_t batch;
    void (*tweak)(st_config *c, st_model_input *in);
    const char *precision; /* NULL: fp32 */
    double l2;             /* bf16/fp16: the gradients' and buffers' tolerance; 0: L2_BF16 or L2_FP16 */
    unsigned kv;           /* the device graph's kernel variants (st_kernel_variant; the same bits) */
    bool tune;             /* model.matmul_tune on for the case: the device's new plans time algorithms */
} model_case;

static void mlp(st_config *c, st_model_input *in) {
    c->model.hidden.n = 2;
    c->model.hidden.v[0] = 100;
    c->model.hidden.v[1] = 37;
    *in = (st_model_input){.height = 28, .width = 28, .channels = 1, .num_classes = 10};
}

static void cnn_bn(st_config *c, st_model_input *in) {
    c->model.channels.n = 3;
    c->model.channels.v[0] = 8;
    c->model.channels.v[1] = 16;
    c->model.channels.v[2] = 12;
    c->model.pool.n = 3;
    c->model.pool.v[0] = 0;
    c->model.pool.v[1] = 1;
    c->model.pool.v[2] = 1;
    c->model.kernel = 3;
    c->model.batchnorm = true;
    *in = (st_model_input){.height = 28, .width = 28, .channels = 1, .num_classes = 10};
}

/* The batch-norm cnn without max-pooling, for bf16 and fp16: a pooling
 * window whose two largest inputs are one 16-bit unit apart picks the other
 * one when a rounding goes the other way, and routes a whole gradient
 * elsewhere (max-pool itself is checked on equal inputs in
 * test_cuda_layers_b). */
static void cnn_nopool(st_config *c, st_model_input *in) {
    cnn_bn(c, in);
    c->model.pool.v[1] = 0;
    c->model.pool.v[2] = 0;
    *in = (st_model_input){.height = 12, .width = 12, .channels = 1, .num_classes = 10};
}

static void cnn_bias(st_config *c, st_model_input *in) {
    cnn_bn(c, in);
    c->model.batchnorm = false;
    c->model.kernel = 5;
    *in = (st_model_input){.height = 15, .width = 13, .channels = 3, .num_classes = 7};
}

static void cnn_bias_nopool(st_config *c, st_model_input *in) {
    cnn_bias(c, in);
    c->model.pool.v[1] = 0;
    c->model.pool.v[2] = 0;
}

static void cnn_ckpt(st_config *c, st_model_input *in) {
    cnn_bn(c, in);
    snprintf(c->train.activation_checkpointing, sizeof c->train.activation_checkpointing, "blocks");
}

static void gpt(st_config *c, st_model_input *in) {
    c->model.n_layer = 2;
    c->model.n_head = 4;
    c->model.n_embd = 64;
    c->model.block_size = 32;
    *in = (st_model_input){.vocab_size = 96, .seq_len = 29};
    c->model.vocab_size = in->vocab_size;
}

/* Selective checkpointing: the norms' and GELUs' outputs recomputed in
 * backward (graph.c place_transients), on both sides. */
static void gpt_selective(st_config *c, st_model_input *in) {
    gpt(c, in);
    snprintf(c->train.activation_checkpointing, sizeof c->train.activation_checkpointing, "selective");
}

/* Block checkpointing: each block's forward runs again in backward, its
 * fused products (GELU's, the residual's) with it (graph.c recompute_block). */
static void gpt_blocks(st_config *c, st_model_input *in) {
    gpt(c, in);
    snprintf(c->train.activation_checkpointing, sizeof c->train.activation_checkpointing, "blocks");
}

/* GELU as its own layer on the device too (model.fused_gelu off; auto is on
 * from compute capability 9.0, which the emulator reports). */
static void gpt_gelu_layer(st_config *c, st_model_input *in) {
    gpt(c, in);
    snprintf(c->model.fused_gelu, sizeof c->model.fused_gelu, "off");
}

/* GELU and the residual fused, but cuBLASLt (the emulator, told so) offers
 * no algorithm with GELU's epilogues, and refuses a bias with the residual
 * as C when it runs: the products, GELU's and the add's kernels run
 * instead (linear.cu). Batch 2: shapes no earlier case has a plan for. */
static void gpt_gelu_refused(st_config *c, st_model_input *in) {
    gpt(c, in);
    snprintf(c->model.fused_gelu, sizeof c->model.fused_gelu, "on");
    snprintf(c->model.fused_bias_grad, sizeof c->model.fused_bias_grad,
             "on"); /* (refused too: column sums) */
}

/* The linear layers' bias gradients in their dW products' epilogues
 * (model.fused_bias_grad on; auto is off): the gradients start non-zero
 * (run_case), so an epilogue's sums written over them, not added, fail. */
static void gpt_bgrad(st_config *c, st_model_input *in) {
    gpt(c, in);
    snprintf(c->model.fused_bias_grad, sizeof c->model.fused_bias_grad, "on");
}
static void mlp_bgrad(st_config *c, st_model_input *in) {
    mlp(c, in);
    snprintf(c->model.fused_bias_grad, sizeof c->model.fused_bias_grad, "on");
}

/* The residual adds as layers of their own on the device too
 * (model.fused_residual off; auto is on). */
static void gpt_add_layer(st_config *c, st_model_input *in) {
    gpt(c, in);
    snprintf(c->model.fused_residual, sizeof c->model.fused_residual, "off");
}

/* The output layer and loss fused (linear_ce): 87 rows in 8 chunks, the
 * logits never kept; the loss, the eval loss and every gradient compared. */
static void gpt_fused(st_config *c, st_model_input *in) {
    gpt(c, in);
    snprintf(c->model.fused_head, sizeof c->model.fused_head, "on");
}

/* The fused head with the bias gradients in dW's epilogue, for the case
 * with model.matmul_tune on (batch 4: shapes no earlier case has a plan
 * for, so every product of the step is timed first: GELU's epilogues, the
 * residual as C, the head's chunks, dW added to). */
static void gpt_fused_bgrad(st_config *c, st_model_input *in) {
    gpt_fused(c, in);
    snprintf(c->model.fused_bias_grad, sizeof c->model.fused_bias_grad, "on");
}

/* Attention on cuDNN's fused kernels (model.attention_kernel=cudnn, bf16
 * runs; docs/cuda.md): forward and backward of both layers there, the rest
 * as the bf16 case. In a build without cuDNN (the emulator's) the device
 * runs the flash kernels and the case says so. */
static void gpt_cudnn(st_config *c, st_model_input *in) {
    gpt(c, in);
    snprintf(c->model.attention_kernel, sizeof c->model.attention_kernel, "cudnn");
}

/* The case's largest |dev - host| / max|host| over the tensors compared,
 * printed after each case (what the tolerances are measured against). */
static double worst_scaled;
static char worst_what[ST_NAME_MAX + 16];

/* Compare n floats of device memory with the host's, scale-aware. */
/* dptr's n floats, or with t the tensor's data in whatever storage it has */
static int compare(const char *label, const char *what, st_device *dev, const st_tensor *t, const float *dptr,
                   const float *h, int64_t n, double rtol, double atol) {
    float *d = cp_download_as(label, what, dev, dptr, n, t, false);
    if (!d) return 1;
    double mx = 0;
    for (int64_t i = 0; i < n; i++)
        if (fabs((double)h[i]) > mx) mx = fabs((double)h[i]);
    int bad = cp_compare(label, what, d, h, n, rtol, atol * mx);
    for (int64_t i = 0; i < n && mx > 0; i++) {
        const double e = fabs((double)d[i] - (double)h[i]) / mx;
        if (!(e <= worst_scaled)) {
            worst_scaled = e;
            snprintf(worst_what, sizeof worst_what, "%s", what);
        }
    }
    free(d);
    return bad;
}

/* Low precision: n floats of device memory against the host's by the
 * relative error of the whole tensor, ||dev - host|| / ||host|| <= tol (2-norms;
 * NaN fails). Isolated large differences (a max-pool window or a ReLU whose
 * choice flips on a one-unit difference in a 16-bit input, routing a whole
 * gradient elsewhere) weigh by their share of the tensor. */
static double worst_l2;
static char worst_l2_what[ST_NAME_MAX + 16];

static int compare_l2(const char *label, const char *what, st_device *dev, const float *dptr, const float *h,
                      int64_t n, double tol) {
    float *d = cp_download(label, what, dev, dptr, n);
    if (!d) return 1;
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        const double e = (double)d[i] - (double)h[i];
        num += e * e;
        den += (double)h[i] * (double)h[i];
    }
    free(d);
    const double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    if (!(rel <= worst_l2)) {
        worst_l2 = rel;
        snprintf(worst_l2_what, sizeof worst_l2_what, "%s", what);
    }
    if (rel <= tol) return 0;
    fprintf(stderr, "FAIL %s: %s: ||dev - host|| / ||host|| = %.3g > %.3g\n", label, what, rel, tol);
    st_test_failures++;
    return 1;
}

static void fill_inputs(st_model_graph *mg, const st_model_input *in, st_rng *r) {
    st_tensor *x = mg->x, *y = mg->y;
    if (x->dtype == ST_F32)
        for (int64_t j = 0; j < x->count; j++)
            x->data[j] = 2.0f * st_rng_uniform(r) - 1.0f;
    else
        for (int64_t j = 0; j < x->count; j++)
            x->idata[j] = (int32_t)(st_rng_uniform(r) * (float)in->vocab_size);
    const int64_t classes = x->dtype == ST_F32 ? in->num_classes : in->vocab_size;
    for (int64_t j = 0; j < y->count; j++) {
        int32_t v = (int32_t)(st_rng_uniform(r) * (float)classes);
        y->idata[j] = v < classes ? v : (int32_t)classes - 1;
    }
    if (x->dtype != ST_F32)
        for (int64_t j = 0; j < x->count; j++)
            if (x->idata[j] >= in->vocab_size) x->idata[j] = (int32_t)in->vocab_size - 1;
}

static st_status upload_inputs(st_device *dev, const st_model_graph *h, st_model_graph *d) {
    ST_TRY(st_device_upload(dev, d->x->dtype == ST_F32 ? (void *)d->x->data : (void *)d->x->idata,
                            h->x->dtype == ST_F32 ? (const void *)h->x->data : (const void *)h->x->idata,
                            (size_t)h->x->count * 4));
    return st_device_upload(dev, d->y->idata, h->y->idata, (size_t)h->y->count * 4);
}

#define KINK_EPS 1e-6

static float max_abs(const float *x, int64_t n) {
    float m = 0;
    for (int64_t i = 0; i < n; i++)
        m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m;
}

/* A point of the host's forward where the device may take the other side
 * of a kink (above), described into `where`; false when there is none. */
static bool near_kink(const st_graph *g, char *where, size_t size) {
    for (int i = 0; i < g->n_nodes; i++) {
        const st_node *n = &g->nodes[i];
        const st_tensor *xt = n->in[0];
        const float *x = xt->data;
        if (strcmp(n->ops->name, "relu") == 0) {
            const float eps = (float)KINK_EPS * max_abs(x, xt->count);
            for (int64_t j = 0; j < xt->count; j++)
                if (x[j] != 0 && fabsf(x[j]) < eps) {
                    snprintf(where, size, "%s's input %lld is %.3g", n->out->name, (long long)j, x[j]);
                    return true;
                }
        } else if (strcmp(n->ops->name, "maxpool2d") == 0) { /* NHWC, k x k windows, no padding */
            const int64_t B = xt->shape[0], H = xt->shape[1], W = xt->shape[2], C = xt->shape[3];
            const int64_t Ho = n->out->shape[1], Wo = n->out->shape[2];
            const int64_t k = n->args.i[ST_POOL_K], st = n->args.i[ST_POOL_STRIDE];
            const float eps = (float)KINK_EPS * max_abs(x, xt->count);
            for (int64_t b = 0; b < B; b++)
                for (int64_t oh = 0; oh < Ho; oh++)
                    for (int64_t ow = 0; ow < Wo; ow++)
                        for (int64_t c = 0; c < C; c++) {
                            float top = -INFINITY, second = -INFINITY;
                            for (int64_t kh = 0; kh < k; kh++)
                                for (int64_t kw = 0; kw < k; kw++) {
                                    const float v = x[((b * H + oh * st + kh) * W + ow * st + kw) * C + c];
                                    if (v > top)
                                        second = top, top = v;
                                    else if (v > second)
                                        second = v;
                                }
                            if (top - second < eps && !(top == 0 && second == 0)) {
                                snprintf(where, size, "%s's window (%lld, %lld, %lld, %lld): %.9g and %.9g",
                                         n->out->name, (long long)b, (long long)oh, (long long)ow,
                                         (long long)c, top, second);
                                return true;
                            }
                        }
        }
    }
    return false;
}

/* 16-bit runs: a ReLU of the device's whose output is 0 where the host's is
 * not, or the other way round, at an input within KINK_EPS_16 of its
 * tensor's largest |value| from 0, described into `where`: there the two
 * sides' sums differ by more than their orders (each layer's input went
 * through 16-bit roundings that may differ by a unit), so a gradient then
 * differs by a whole term (1.5% in the fp16 mlp's d fc.0.bias on an H200,
 * CP_SEED=1796385439). A flip at a larger input is no kink: the
 * comparisons fail it. */
#define KINK_EPS_16 1e-2
static bool relu_flipped(const st_graph *hg, const st_graph *dg, st_device *dev, const char *label,
                         char *where, size_t size) {
    bool found = false;
    for (int i = 0; i < hg->n_nodes && !found; i++) {
        const st_node *n = &hg->nodes[i];
        if (strcmp(n->ops->name, "relu") != 0) continue;
        const st_tensor *d = NULL;
        for (int k = 0; k < dg->n_nodes && !d; k++)
            if (strcmp(dg->nodes[k].ops->name, "relu") == 0 &&
                strcmp(dg->nodes[k].out->name, n->out->name) == 0)
                d = dg->nodes[k].out;
        if (!d || d->count != n->out->count) continue;
        float *y = cp_download_as(label, n->out->name, dev, NULL, d->count, d, false);
        if (!y) return false;
        const float *x = n->in[0]->data, *hy = n->out->data;
        const float eps = (float)KINK_EPS_16 * max_abs(x, n->in[0]->count);
        for (int64_t j = 0; j < d->count && !found; j++)
            if ((y[j] == 0) != (hy[j] == 0) && fabsf(x[j]) < eps) {
                snprintf(where, size, "%s's input %lld (%.3g) on the other side of 0 on the device",
                         n->out->name, (long long)j, x[j]);
                found = true;
            }
        free(y);
    }
    return found;
}

/* n bytes of two arrays, each on the device (dev) or the host (NULL), the same bits? */
static bool same_bytes(st_device *dev, const void *a, bool a_dev, const void *b, bool b_dev, size_t n) {
    char *x = malloc(n ? n : 1), *y = malloc(n ? n : 1);
    bool same = x && y;
    if (same && a_dev) same = st_device_download(dev, x, a, n) == ST_OK;
    if (same && !a_dev) memcpy(x, a, n);
    if (same && b_dev) same = st_device_download(dev, y, b, n) == ST_OK;
    if (same && !b_dev) memcpy(y, b, n);
    same = same && memcmp(x, y, n) == 0;
    free(x), free(y);
    return same;
}

/* An evaluation on forward-only graphs (st_model_graph_build_forward, a
 * run's evaluation graph) against the same on the full graphs just run in
 * eval mode, on each side: the same loss and logits bit for bit (the same
 * kernels, other memory), from arenas of NaN (a transient read after its
 * memory was reused, or an output written where another still lives,
 * fails), no activation gradients and no larger an arena. */
static int fused_count(const st_graph *g) {
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++)
        n += g->nodes[i].fwd_fuses_next;
    return n;
}

/* Activations of g sharing memory only when their lives do not meet,
 * re-derived from the nodes: a tensor lives from the step its producer's
 * kernel writes it to the last step a kernel reads it (graph inputs from
 * the start; a node whose forward the node before runs, fwd_fuses_next,
 * reads and writes at that node's step). The count of clashing pairs. */
static int memory_clashes(const char *label, const st_graph *g) {
    const int na = g->n_acts;
    int *from = malloc((size_t)(na ? na : 1) * sizeof *from),
        *to = malloc((size_t)(na ? na : 1) * sizeof *to);
    int clashes = 0;
    if (!from || !to) {
        free(from), free(to);
        return 1;
    }
    for (int a = 0; a < na; a++)
        from[a] = -1, to[a] = g->acts[a]->kind == ST_TENSOR_INPUT ? -1 : -2;
    for (int i = 0; i < g->n_nodes; i++) {
        const st_node *n = &g->nodes[i];
        const int step = i > 0 && g->nodes[i - 1].fwd_fuses_next ? i - 1 : i;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k]->kind != ST_TENSOR_PARAM && n->in[k]->kind != ST_TENSOR_BUFFER) {
                const int a = n->in[k]->index;
                if (step > to[a]) to[a] = step;
            }
        const int a = n->out->index;
        from[a] = step;
        if (to[a] < step) to[a] = step;
    }
    for (int a = 0; a < na; a++)
        for (int b = a + 1; b < na; b++) {
            const st_tensor *x = g->acts[a], *y = g->acts[b];
            if (x->dtype != ST_F32 || y->dtype != ST_F32) continue;
            const char *x0 = (const char *)x->data, *y0 = (const char *)y->data;
            const char *x1 = x0 + x->count * (x->store == ST_PREC_FP32 ? 4 : 2),
                       *y1 = y0 + y->count * (y->store == ST_PREC_FP32 ? 4 : 2);
            if (x0 >= y1 || y0 >= x1) continue;               /* apart in memory */
            if (to[a] < from[b] || to[b] < from[a]) continue; /* apart in time */
            if (clashes++ < 3)
                fprintf(stderr, "FAIL %s: activations %d (steps %d..%d) and %d (steps %d..%d) share memory\n",
                        label, a, from[a], to[a], b, from[b], to[b]);
        }
    free(from), free(to);
    return clashes;
}

static int forward_only_check(const char *label, st_device *dev, st_model *hm, st_model *dm,
                              st_model_graph *hg, st_model_graph *dg, double ltol) {
    int bad = 0;
    st_model_graph hf = {0}, df = {0};
    const bool on_dev = dg->g.dev != NULL;
    if (st_model_graph_build_forward(hm, hg->batch, &hf) != ST_OK ||
        st_model_graph_build_forward(dm, dg->batch, &df) != ST_OK) {
        fprintf(stderr, "FAIL %s: building the forward-only graphs: %s\n", label, st_last_error());
        bad++;
        goto done;
    }
    bad += memory_clashes(label, &hf.g) + memory_clashes(label, &df.g);
    /* (without a device, ST_CP_SELFTEST: both sides are the host's) */
    for (st_model_graph *f = &hf; f; f = f == &hf && !on_dev ? &df : NULL) {
        for (int64_t i = 0; i < f->g.act_count; i++)
            f->g.act_arena[i] = NAN;
        memcpy(f->x->dtype == ST_F32 ? (void *)f->x->data : (void *)f->x->idata,
               hg->x->dtype == ST_F32 ? (const void *)hg->x->data : (const void *)hg->x->idata,
               (size_t)hg->x->count * 4);
        memcpy(f->y->idata, hg->y->idata, (size_t)hg->y->count * 4);
    }
    if (on_dev && (cp_poison(dev, df.g.act_arena, df.g.act_count) != ST_OK ||
                   cp_poison(dev, df.g.work, df.g.work_count) != ST_OK)) {
        fprintf(stderr, "FAIL %s: poisoning: %s\n", label, st_last_error());
        bad++;
        goto done;
    }
    if (on_dev && upload_inputs(dev, hg, &df) != ST_OK) {
        fprintf(stderr, "FAIL %s: uploading: %s\n", label, st_last_error());
        bad++;
        goto done;
    }
    hf.g.training = df.g.training = false;
    if (st_graph_forward(&hf.g) != ST_OK || st_graph_forward(&df.g) != ST_OK ||
        st_device_sync(dev) != ST_OK) {
        fprintf(stderr, "FAIL %s: forward-only forward: %s\n", label, st_last_error());
        bad++;
        goto done;
    }
    const struct {
        const char *side;
        st_model_graph *full, *fwd;
        bool d;
    } sides[2] = {{"host", hg, &hf, false}, {"device", dg, &df, on_dev}};
    for (int k = 0; k < 2; k++) {
        st_model_graph *a = sides[k].full, *b = sides[k].fwd;
        const bool d = sides[k].d;
        if (fused_count(&a->g) != fused_count(&b->g)) {
            /* selective checkpointing keeps GELU out of forward's epilogues
             * (recomputed alone); the forward-only graph, with nothing to
             * recompute, fuses it: one rounding fewer, within the loss's
             * tolerance */
            float la = 0, lb = 0;
            if (d ? st_device_download(dev, &la, a->loss->data, 4) != ST_OK ||
                        st_device_download(dev, &lb, b->loss->data, 4) != ST_OK
                  : (la = *a->loss->data, lb = *b->loss->data, false)) {
                fprintf(stderr, "FAIL %s: reading the losses: %s\n", label, st_last_error());
                bad++;
            } else if (!(fabs((double)la - lb) <= ltol * fabs((double)la))) {
                fprintf(stderr,
                        "FAIL %s: the %s's forward-only loss %.9g (%d fused products), its full graph's "
                        "%.9g (%d)\n",
                        label, sides[k].side, (double)lb, fused_count(&b->g), (double)la, fused_count(&a->g));
                bad++;
            }
        } else if (!same_bytes(dev, a->loss->data, d, b->loss->data, d, sizeof(float))) {
            fprintf(stderr, "FAIL %s: the %s's forward-only loss differs from its full graph's\n", label,
                    sides[k].side);
            bad++;
        }
        if (a->logits && fused_count(&a->g) == fused_count(&b->g) &&
            (!b->logits || a->logits->store != b->logits->store ||
             !same_bytes(dev, a->logits->data, d, b->logits->data, d,
                         (size_t)a->logits->count * (a->logits->store == ST_PREC_FP32 ? 4 : 2)))) {
            fprintf(stderr, "FAIL %s: the %s's forward-only logits differ from its full graph's\n", label,
                    sides[k].side);
            bad++;
        }
        if (b->g.grad_count != 0 || b->g.act_count > a->g.act_count) {
            fprintf(stderr,
                    "FAIL %s: the %s's forward-only graph holds %lld gradient and %lld activation floats "
                    "(the full graph %lld and %lld)\n",
                    label, sides[k].side, (long long)b->g.grad_count, (long long)b->g.act_count,
                    (long long)a->g.grad_count, (long long)a->g.act_count);
            bad++;
        }
    }
    printf("     %s: forward-only evaluation %s; its arena %.2f of the full graph's (device)\n", label,
           fused_count(&dg->g) == fused_count(&df.g) ? "the same bits"
                                                     : "within the loss's tolerance (GELU fused)",
           (double)df.g.act_count / (double)(dg->g.act_count + dg->g.grad_count));
done:
    st_model_graph_free(&df);
    st_model_graph_free(&hf);
    return bad;
}

/* -1: the draw has a kink (nothing compared; draw again). */
static int run_case(const model_case *mc, st_device *dev, uint64_t seed) {
    int bad = 0;
    st_config c;
    st_config_defaults(&c);
    snprintf(c.model.type, sizeof c.model.type, "%s", mc->type);
    if (mc->precision) snprintf(c.precision, sizeof c.precision, "%s", mc->precision);
    const st_precision prec = st_precision_from_name(c.precision);
    const double rtol = prec == ST_PREC_BF16 ? 3e-2 : prec == ST_PREC_FP16 ? 4e-3 : RTOL;
    const double atol = prec == ST_PREC_BF16 ? 1e-2 : prec == ST_PREC_FP16 ? 2e-3 : ATOL;
    const double ltol = prec == ST_PREC_BF16 ? 5e-3 : prec == ST_PREC_FP16 ? 1e-3 : 1e-5;
    const double l2tol = mc->l2 > 0 ? mc->l2 : prec == ST_PREC_BF16 ? L2_BF16 : L2_FP16;
    worst_scaled = 0;
    worst_what[0] = 0;
    worst_l2 = 0;
    worst_l2_what[0] = 0;
    st_model_input in;
    mc->tweak(&c, &in);
    st_model *hm = NULL, *dm = NULL;
    st_model_graph hg = {0}, dg = {0};
    char path[] = "/tmp/st_cuda_models_XXXXXX";
    int fd = -1;
#define T_TRY(expr)                                                                                          \
    do {                                                                                                     \
        if ((expr) != ST_OK) {                                                                               \
            fprintf(stderr, "FAIL %s: %s: %s\n", mc->label, #expr, st_last_error());                         \
            bad++;                                                                                           \
            goto done;                                                                                       \
        }                                                                                                    \
    } while (0)
    T_TRY(st_model_create(&c, &in, &hm));
    T_TRY(st_model_create_on(&c, &in, dev, &dm));
    st_params *hp = &hm->params, *dp = &dm->params;
    /* seeded initialisation on the device makes the host's values */
    CHECK_OK(st_model_init_weights(hm, seed));
    CHECK_OK(st_model_init_weights(dm, seed));
    for (int i = 0; i < hp->n; i++)
        bad +=
            cp_check(mc->label, hp->t[i]->name, dev, dp->t[i]->data, hp->t[i]->data, hp->t[i]->count, 0, 0);
    T_TRY(st_model_graph_build(hm, mc->batch, &hg));
    T_TRY(st_model_graph_build(dm, mc->batch, &dg));
    dg.g.kernel_variants = mc->kv;
    if (prec != ST_PREC_FP32 && dg.g.dev) { /* not the host against itself (no device) */
        /* the activations between layers are stored in 16 bits on the device
         * (src/layers/half_io.h; not an image model's logits, which the host
         * reads): a smaller activation arena than the host's fp32 one */
        int n16 = 0;
        for (int i = 0; i < dg.g.n_acts; i++)
            n16 += dg.g.acts[i]->store == prec;
        if (n16 == 0 || dg.g.act_count >= hg.g.act_count) {
            fprintf(stderr,
                    "FAIL %s: %d activations stored in 16 bits, activation arena %lld floats (host %lld)\n",
                    mc->label, n16, (long long)dg.g.act_count, (long long)hg.g.act_count);
            bad++;
        } else {
            printf("     %s: %d of %d activations stored in 16 bits; activation arena %.2f of the host's\n",
                   mc->label, n16, dg.g.n_acts, (double)dg.g.act_count / (double)hg.g.act_count);
        }
    }
    if (dg.g.dev && strcmp(mc->type, "gpt") == 0) { /* GELU in the MLP's epilogues (graph.c fuse_gelu) */
        int fwd = 0, bwd = 0, res = 0;
        for (int i = 0; i < dg.g.n_nodes; i++) {
            fwd += st_node_fuses(&dg.g, &dg.g.nodes[i], "gelu"), bwd += dg.g.nodes[i].bwd_fuses_prev;
            res += st_node_fuses(&dg.g, &dg.g.nodes[i], "add");
        }
        const int want_res = strcmp(c.model.fused_residual, "off") != 0 ? 2 * (int)c.model.n_layer : 0;
        if (res != want_res) {
            fprintf(stderr, "FAIL %s: the residual added by %d products, wanted %d\n", mc->label, res,
                    want_res);
            bad++;
        } else {
            printf("     %s: the residual added by %d products\n", mc->label, res);
        }
        const int want = dm->fused_gelu ? (int)c.model.n_layer : 0;
        const bool selective = strcmp(c.train.activation_checkpointing, "selective") == 0;
        if (fwd != (selective ? 0 : want) || bwd != want) {
            fprintf(stderr,
                    "FAIL %s: GELU fused into %d forward and %d backward products, wanted %d and %d\n",
                    mc->label, fwd, bwd, selective ? 0 : want, want);
            bad++;
        } else {
            printf("     %s: GELU in the epilogues of %d forward and %d backward products\n", mc->label, fwd,
                   bwd);
        }
    }
    st_rng r = st_rng_make(seed, 99);
    fill_inputs(&hg, &in, &r);
    /* poison first: float inputs live in the activation arena */
    T_TRY(cp_poison(dev, dg.g.act_arena, dg.g.act_count));
    T_TRY(cp_poison(dev, dg.g.grad_arena, dg.g.grad_count));
    T_TRY(cp_poison(dev, dg.g.work, dg.g.work_count)); /* scratch: undefined contents */
    T_TRY(upload_inputs(dev, &hg, &dg));
    /* parameter gradients accumulate (micro-steps): both sides start from
     * the same small non-zero gradients, so a layer that writes instead of
     * adding (or adds twice) fails the comparison */
    for (int64_t i = 0; i < hp->count; i++)
        hp->grad[i] = 1e-3f * (2.0f * st_rng_uniform(&r) - 1.0f);
    T_TRY(st_device_upload(dev, dp->grad, hp->grad, (size_t)hp->count * sizeof(float)));
    hg.g.training = dg.g.training = true;
    T_TRY(st_graph_forward(&hg.g));
    T_TRY(st_graph_forward(&dg.g));
    char kink[256];
    if (prec == ST_PREC_FP32 ? near_kink(&hg.g, kink, sizeof kink)
                             : relu_flipped(&hg.g, &dg.g, dev, mc->label, kink, sizeof kink)) {
        printf("     %s: seed %llu puts %s, at a kink: drawing again\n", mc->label, (unsigned long long)seed,
               kink);
        bad = -1;
        goto done;
    }
    /* NaN over the activations no backward reads (graph.c place_transients),
     * on both sides: a backward that reads one (a wrong st_layer_ops flag)
     * fails the gradients' comparison */
    T_TRY(cp_poison(dev, dg.g.act_arena + (dg.g.act_count - dg.g.transient_act_count),
                    dg.g.transient_act_count));
    for (int64_t i = hg.g.act_count - hg.g.transient_act_count; i < hg.g.act_count; i++)
        hg.g.act_arena[i] = NAN;
    if (strcmp(mc->type, "cnn") != 0 && !(dg.g.transient_act_count > 0 && hg.g.transient_act_count > 0)) {
        fprintf(stderr, "FAIL %s: no transient activations (%lld floats on the device, %lld on the host)\n",
                mc->label, (long long)dg.g.transient_act_count, (long long)hg.g.transient_act_count);
        bad++;
    }
    /* fp16 backward starts from a loss scale, as training does (below 2^-14
     * fp16 keeps only a few significant bits) */
    const float seed_grad = prec == ST_PREC_FP16 ? 1024.0f : 1.0f;
    T_TRY(st_graph_backward(&hg.g, seed_grad));
    T_TRY(st_graph_backward(&dg.g, seed_grad));
    T_TRY(st_device_sync(dev));
    bad += cp_check(mc->label, "loss", dev, dg.loss->data, hg.loss->data, 1, ltol, 0);
    if (hg.logits) /* (none with a fused head: linear_ce) */
        bad +=
            compare(mc->label, "logits", dev, dg.logits, NULL, hg.logits->data, hg.logits->count, rtol, atol);
    if (prec != ST_PREC_FP32) {
        if (hg.logits)
            bad += cp_check_16_src(mc->label, "logits", dev, NULL, dg.logits, false, hg.logits->count, prec);
        bad += cp_check_compute(mc->label, dev, dp, hp);
    }
    char what[ST_NAME_MAX + 8];
    for (int i = 0; i < hp->n; i++) {
        const st_tensor *h = hp->t[i], *d = dp->t[i];
        if (h->kind == ST_TENSOR_PARAM) {
            snprintf(what, sizeof what, "d %s", h->name);
            bad += prec == ST_PREC_FP32
                       ? compare(mc->label, what, dev, NULL, d->grad, h->grad, h->count, rtol, atol)
                       : compare_l2(mc->label, what, dev, d->grad, h->grad, h->count, l2tol);
        } else {
            bad += prec == ST_PREC_FP32
                       ? compare(mc->label, h->name, dev, NULL, d->data, h->data, h->count, rtol, atol)
                       : compare_l2(mc->label, h->name, dev, d->data, h->data, h->count, l2tol);
        }
    }
    /* eval: running statistics, no dropout */
    hg.g.training = dg.g.training = false;
    T_TRY(st_graph_forward(&hg.g));
    T_TRY(st_graph_forward(&dg.g));
    bad += cp_check(mc->label, "eval loss", dev, dg.loss->data, hg.loss->data, 1, ltol, 0);
    if (hg.logits)
        bad += compare(mc->label, "eval logits", dev, dg.logits, NULL, hg.logits->data, hg.logits->count,
                       rtol, atol);
    bad += forward_only_check(mc->label, dev, hm, dm, &hg, &dg, ltol);
    /* weights saved from the device load into a fresh host model unchanged */
    fd = mkstemp(path);
    if (fd < 0) {
        fprintf(stderr, "FAIL %s: mkstemp\n", mc->label);
        bad++;
        goto done;
    }
    close(fd);
    T_TRY(st_model_save(dm, path));
    st_model_graph_free(&hg);
    st_model_free(hm);
    hm = NULL;
    T_TRY(st_model_create(&c, &in, &hm));
    T_TRY(st_model_load(hm, path));
    for (int i = 0; i < hm->params.n; i++) {
        const st_tensor *h = hm->params.t[i], *d = dp->t[i];
        snprintf(what, sizeof what, "saved %s", h->name);
        bad += cp_check(mc->label, what, dev, d->data, h->data, h->count, 0, 0);
    }
    /* and load back onto the device */
    T_TRY(st_device_fill_f32(dev, dp->data, (size_t)dp->arena_count, NAN));
    T_TRY(st_model_load(dm, path));
    for (int i = 0; i < hm->params.n; i++) {
        const st_tensor *h = hm->params.t[i], *d = dp->t[i];
        snprintf(what, sizeof what, "loaded %s", h->name);
        bad += cp_check(mc->label, what, dev, d->data, h->data, h->count, 0, 0);
    }
#undef T_TRY
done:
    if (fd >= 0) unlink(path);
    st_model_graph_free(&dg);
    st_model_graph_free(&hg);
    st_model_free(dm);
    st_model_free(hm);
    if (bad < 0) return bad;
    if (prec == ST_PREC_FP32)
        printf("%s %s (largest |dev - host| / max|host|: %.3g, %s)\n", bad ? "FAIL" : "ok  ", mc->label,
               worst_scaled, worst_what);
    else
        printf("%s %s (logits: largest |dev - host| / max|host| %.3g; largest ||dev - host|| / ||host|| "
               "%.3g, %s)\n",
               bad ? "FAIL" : "ok  ", mc->label, worst_scaled, worst_l2, worst_l2_what);
    return bad;
}

/* Cached decoding (model.h st_model_graph_build_decode, generation's
 * path): a gpt on the host and on the device, the same weights, 2
 * sequences through decode graphs in the case's steps (chunks of
 * positions, then one at a time, to the cache's end): every row's logits
 * within the fp32 bounds (RTOL, ATOL scaled), the device's cache and
 * activations NaN before, so an unwritten element fails; the host's rows
 * are the exact-length forward's (the same model without a cache over the
 * cache's positions) to 1e-4 scaled; and a step past the cache is an
 * error naming its positions (`past`). The second case takes the device
 * kernel's several tiles of 128 positions and its heads wider than its
 * 128 threads (192 channels); the third a head wider than a block's 512
 * channels (640: two blocks a head, the second's channels partly past it). */
/* mg's forward on its tokens x (B, n) at its g.pos; on a device its
 * activations NaN first */
static st_status decode_run(st_device *dev, st_model_graph *mg, const int32_t *x) {
    ST_TRY(st_device_upload(dev, mg->x->idata, x, (size_t)mg->x->count * sizeof *x));
    if (dev) ST_TRY(cp_poison(dev, mg->g.act_arena, mg->g.act_count));
    return st_graph_forward(&mg->g);
}

typedef struct decode_spec {
    const char *label;
    int64_t L, H, C, block, V, cap;
    int64_t steps[6][2]; /* (pos, n), n 0 ends */
    const char *past;    /* the error of positions cap - n + 1 .. cap with the last step's n */
} decode_spec;

static int decode_case(st_device *dev, uint64_t seed, const decode_spec *sp) {
    const char *label = sp->label;
    int bad = 0;
    st_config c;
    st_config_defaults(&c);
    snprintf(c.model.type, sizeof c.model.type, "gpt");
    snprintf(c.precision, sizeof c.precision, "fp32");
    snprintf(c.model.fused_head, sizeof c.model.fused_head, "off");
    c.model.n_layer = sp->L, c.model.n_head = sp->H, c.model.n_embd = sp->C, c.model.block_size = sp->block;
    c.model.vocab_size = sp->V;
    st_model_input in = {.vocab_size = sp->V, .seq_len = sp->block};
    const int64_t B = 2, V = sp->V, T = sp->cap;
    st_model *hm = NULL, *dm = NULL;
    st_kv_cache *hk = NULL, *dk = NULL;
    st_model_graph hg = {0}, dg = {0}, wg = {0}, lg = {0};
    int32_t *tok = malloc((size_t)(B * T) * sizeof *tok), *x = malloc((size_t)(B * T) * sizeof *x);
    float *hl = malloc((size_t)(B * T * V) * sizeof(float)); /* the host's decoded rows, (B, T, V) */
    int nsteps = 0;
#undef T_TRY
#define T_TRY(expr)                                                                                          \
    do {                                                                                                     \
        if ((expr) != ST_OK) {                                                                               \
            fprintf(stderr, "FAIL %s: %s: %s\n", label, #expr, st_last_error());                             \
            bad++;                                                                                           \
            goto done;                                                                                       \
        }                                                                                                    \
    } while (0)
    if (!tok || !x || !hl) {
        fprintf(stderr, "FAIL %s: out of memory\n", label);
        bad++;
        goto done;
    }
    st_rng r = st_rng_make(seed, 17);
    for (int64_t i = 0; i < B * T; i++)
        tok[i] = (int32_t)st_rng_below(&r, (uint64_t)V);
    T_TRY(st_model_create(&c, &in, &hm));
    T_TRY(st_model_create_on(&c, &in, dev, &dm));
    T_TRY(st_model_init_weights(hm, seed));
    T_TRY(st_model_init_weights(dm, seed));
    T_TRY(st_kv_cache_create(hm, B, T, &hk));
    T_TRY(st_kv_cache_create(dm, B, T, &dk));
    if (dev) {
        T_TRY(cp_poison(dev, dk->k, dk->L * B * T * dk->C));
        T_TRY(cp_poison(dev, dk->v, dk->L * B * T * dk->C));
    }
    for (; nsteps < 6 && sp->steps[nsteps][1] > 0; nsteps++) {
        const int64_t pos = sp->steps[nsteps][0], n = sp->steps[nsteps][1];
        for (int64_t b = 0; b < B; b++)
            memcpy(x + b * n, tok + b * T + pos, (size_t)n * sizeof *x);
        if (hg.seq_len != n) {
            st_model_graph_free(&hg);
            st_model_graph_free(&dg);
            T_TRY(st_model_graph_build_decode(hm, B, n, hk, false, &hg));
            T_TRY(st_model_graph_build_decode(dm, B, n, dk, false, &dg));
        }
        hg.g.pos = dg.g.pos = pos;
        T_TRY(decode_run(NULL, &hg, x));
        T_TRY(decode_run(dev, &dg, x));
        char what[64];
        snprintf(what, sizeof what, "logits at positions %lld..%lld", (long long)pos,
                 (long long)(pos + n - 1));
        bad += compare(label, what, dev, NULL, dg.logits->data, hg.logits->data, B * n * V, RTOL, ATOL);
        for (int64_t b = 0; b < B; b++)
            memcpy(hl + (b * T + pos) * V, hg.logits->data + b * n * V, (size_t)(n * V) * sizeof *hl);
    }
    { /* the last step again on the device with its head over the last rows alone (last_only, as
       * generation builds it; the cache's rows written again, the same values) */
        const int64_t pos = sp->steps[nsteps - 1][0], n = sp->steps[nsteps - 1][1];
        T_TRY(st_model_graph_build_decode(dm, B, n, dk, true, &lg));
        lg.g.pos = pos;
        T_TRY(decode_run(dev, &lg, x));
        float last[2 * 96]; /* (V <= 96 in every case) */
        for (int64_t b = 0; b < B; b++)
            memcpy(last + b * V, hl + (b * T + pos + n - 1) * V, (size_t)V * sizeof *last);
        bad += compare(label, "the last rows' logits (last_only)", dev, NULL, lg.logits->data, last, B * V,
                       RTOL, ATOL);
    }
    /* the host's decoded rows against one forward of the whole sequences */
    T_TRY(st_model_graph_build_forward_len(hm, B, T, &wg));
    wg.g.training = false;
    memcpy(wg.x->idata, tok, (size_t)(B * T) * sizeof *tok);
    memset(wg.y->idata, 0, (size_t)(B * T) * sizeof *tok);
    T_TRY(st_graph_forward(&wg.g));
    {
        double mx = 0;
        for (int64_t i = 0; i < B * T * V; i++)
            mx = fabs((double)wg.logits->data[i]) > mx ? fabs((double)wg.logits->data[i]) : mx;
        bad += cp_compare(label, "the host's decoded logits against its whole forward's", hl, wg.logits->data,
                          B * T * V, 1e-4, 1e-4 * mx);
    }
    /* past the cache: an error naming the positions, nothing run */
    hg.g.pos = dg.g.pos = T - hg.seq_len + 1;
    CHECK_FAILS(st_graph_forward(&hg.g), ST_ERR_ARG, sp->past);
    CHECK_FAILS(st_graph_forward(&dg.g), ST_ERR_ARG, sp->past);
done:
    if (bad == 0)
        printf("ok %s: %d steps of 2 sequences to %lld positions, the device's logits the host's (largest "
               "difference %.3g of the largest |logit|), the host's the whole forward's\n",
               label, nsteps, (long long)T, worst_scaled);
    st_model_graph_free(&hg);
    st_model_graph_free(&dg);
    st_model_graph_free(&wg);
    st_model_graph_free(&lg);
    if (hm) st_kv_cache_free(hm, hk);
    if (dm) st_kv_cache_free(dm, dk);
    st_model_free(hm);
    st_model_free(dm);
    free(hl);
    free(tok);
    free(x);
    return bad;
}

int main(void) {
    st_device *dev = NULL;
    /* Without a device (or with ST_CP_SELFTEST set) the cases run the host
     * against itself: a check of the test's own graphs and fills, not of the
     * kernels; the test still reports the skip when there is no device. */
    const bool self = getenv("ST_CP_SELFTEST") != NULL;
    const int rc = self ? 0 : cp_open(&dev);
    if (rc && rc != 77) return rc;
    const uint64_t seed = cp_seed();
    const model_case cases[] = {
        {"mlp 784-100-37-10, batch 16", "mlp", 16, mlp, NULL, 0, 0, false},
        {"cnn 8-16-12 k3 batchnorm+relu, pools, batch 8", "cnn", 8, cnn_bn, NULL, 0, 0, false},
        {"cnn 8-16-12 k5 bias+relu on 15x13x3, batch 5", "cnn", 5, cnn_bias, NULL, 0, 0, false},
        {"cnn checkpointed", "cnn", 8, cnn_ckpt, NULL, 0, 0, false},
        {"gpt 2 layers, 4 heads, C 64, T 29, V 96, batch 3", "gpt", 3, gpt, NULL, 0, 0, false},
        {"bf16 mlp 784-100-37-10, batch 16", "mlp", 16, mlp, "bf16", 0, 0, false},
        {"bf16 cnn 8-16-12 k5 bias+relu on 15x13x3, no pooling, batch 5", "cnn", 5, cnn_bias_nopool, "bf16",
         L2_CNN_BF16, 0, false},
        {"bf16 cnn 8-16-12 k3 batchnorm+relu on 12x12, no pooling, batch 8", "cnn", 8, cnn_nopool, "bf16",
         L2_BN_BF16, 0, false},
        {"gpt selective checkpointing", "gpt", 3, gpt_selective, NULL, 0, 0, false},
        {"bf16 gpt 2 layers, batch 3", "gpt", 3, gpt, "bf16", 0, 0, false},
        {"bf16 gpt selective checkpointing", "gpt", 3, gpt_selective, "bf16", 0, 0, false},
        {"gpt block checkpointing", "gpt", 3, gpt_blocks, NULL, 0, 0, false},
        {"bf16 gpt block checkpointing", "gpt", 3, gpt_blocks, "bf16", 0, 0, false},
        {"gpt fused head", "gpt", 3, gpt_fused, NULL, 0, 0, false},
        {"bf16 gpt fused head", "gpt", 3, gpt_fused, "bf16", 0, 0, false},
        {"fp16 gpt fused head", "gpt", 3, gpt_fused, "fp16", 0, 0, false},
        /* every kernel variant at once: layernorm's packed backward, the
         * head's rows loaded ahead (each the default's values) */
        {"bf16 gpt fused head, kernel variants", "gpt", 3, gpt_fused, "bf16", 0,
         ST_KV_LAYERNORM_PACKED | ST_KV_CE_ROWS_PREFETCH, false},
        {"fp16 gpt fused head, kernel variants", "gpt", 3, gpt_fused, "fp16", 0,
         ST_KV_LAYERNORM_PACKED | ST_KV_CE_ROWS_PREFETCH, false},
        /* the head's rows kept in shared memory between their two walks */
        {"bf16 gpt fused head, rows in shared memory", "gpt", 3, gpt_fused, "bf16", 0, ST_KV_CE_ROWS_SHARED,
         false},
        {"fp16 gpt fused head, rows in shared memory", "gpt", 3, gpt_fused, "fp16", 0, ST_KV_CE_ROWS_SHARED,
         false},
        {"fp16 mlp 784-100-37-10, batch 16", "mlp", 16, mlp, "fp16", 0, 0, false},
        {"fp16 cnn 8-16-12 k5 bias+relu on 15x13x3, no pooling, batch 5", "cnn", 5, cnn_bias_nopool, "fp16",
         L2_CNN_FP16, 0, false},
        {"fp16 cnn 8-16-12 k3 batchnorm+relu on 12x12, no pooling, batch 8", "cnn", 8, cnn_nopool, "fp16",
         L2_BN_FP16, 0, false},
        {"fp16 gpt 2 layers, batch 3", "gpt", 3, gpt, "fp16", 0, 0, false},
        {"gpt GELU as a layer", "gpt", 3, gpt_gelu_layer, NULL, 0, 0, false},
        {"bf16 gpt GELU as a layer", "gpt", 3, gpt_gelu_layer, "bf16", 0, 0, false},
        {"gpt GELU epilogues refused, batch 2", "gpt", 2, gpt_gelu_refused, NULL, 0, 0, false},
        {"bf16 gpt GELU epilogues refused, batch 2", "gpt", 2, gpt_gelu_refused, "bf16", 0, 0, false},
        {"gpt residual add as a layer", "gpt", 3, gpt_add_layer, NULL, 0, 0, false},
        {"bf16 gpt residual add as a layer", "gpt", 3, gpt_add_layer, "bf16", 0, 0, false},
        {"bf16 gpt cuDNN attention", "gpt", 3, gpt_cudnn, "bf16", 0, 0, false},
        {"gpt bias gradients in dW's epilogue", "gpt", 3, gpt_bgrad, NULL, 0, 0, false},
        {"bf16 gpt bias gradients in dW's epilogue", "gpt", 3, gpt_bgrad, "bf16", 0, 0, false},
        {"bf16 mlp bias gradients in dW's epilogue", "mlp", 16, mlp_bgrad, "bf16", 0, 0, false},
        {"bf16 gpt fused head, db in dW's epilogue, algorithms timed, batch 4", "gpt", 4, gpt_fused_bgrad,
         "bf16", 0, 0, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int tries = 0;
        const bool refuse =
            cases[i].tweak == gpt_gelu_refused; /* (the emulator reads it; a GPU ignores it) */
        if (refuse) setenv("ST_CUDAEMU_NO_FUSED_EPILOGUES", "1", 1);
#ifdef ST_HAVE_CUDA
        const int64_t cudnn_calls = dev ? st_cuda_cudnn_calls(dev) : 0;
        const int64_t bgrads = cp_bgrad_count(dev);
        const int64_t kept = dev ? st_cuda_kept_rows_calls(dev) : 0;
        st_cuda_tune_stats t0 = {0};
        if (dev) st_cuda_matmul_tune_stats(dev, &t0);
        if (dev && cases[i].tune) st_cuda_set_matmul_tune(dev, true);
#endif
        const int failures = st_test_failures;
        int r;
        while ((r = run_case(&cases[i], dev, seed + i + 7919 * (uint64_t)tries)) < 0 && ++tries < 8) {
        }
        /* (the comparisons count their own failures; the case's other
         * checks are in r alone) */
        if (r > 0 && st_test_failures == failures) st_test_failures += r;
        if (refuse) unsetenv("ST_CUDAEMU_NO_FUSED_EPILOGUES");
        CHECK(tries < 8, "%s: 8 draws, each with a kink", cases[i].label);
#ifdef ST_HAVE_CUDA
        char no_cudnn[256];
        if (cases[i].tweak == gpt_cudnn && dev) {
            if (st_cuda_cudnn_built(no_cudnn, sizeof no_cudnn))
                CHECK(st_cuda_cudnn_calls(dev) > cudnn_calls, "%s: cuDNN ran no attention", cases[i].label);
            else
                printf("     %s: ran the flash kernels: %s\n", cases[i].label, no_cudnn);
        }
        /* the epilogue summed the bias gradients (none where told to refuse) */
        if (cases[i].tweak == gpt_bgrad || cases[i].tweak == mlp_bgrad || refuse)
            cp_check_bgrad(dev, bgrads, refuse, cases[i].label);
        if (dev && (cases[i].kv & ST_KV_CE_ROWS_SHARED)) /* (its own kernel ran, not the default's) */
            CHECK(st_cuda_kept_rows_calls(dev) > kept, "%s: no rows kernel kept its row in shared memory",
                  cases[i].label);
        if (dev && cases[i].tune) { /* its products' plans were timed (each computed as without: above) */
            st_cuda_set_matmul_tune(dev, false);
            st_cuda_tune_stats t1;
            st_cuda_matmul_tune_stats(dev, &t1);
            CHECK(t1.tuned > t0.tuned, "%s: no plan timed its algorithms", cases[i].label);
            printf("     %s: %lld plans timed, %lld kept another algorithm\n", cases[i].label,
                   (long long)(t1.tuned - t0.tuned), (long long)(t1.switched - t0.switched));
        }
#endif
    }
    const decode_spec decodes[] = {
        {"gpt cached decoding, 2 layers, 4 heads, C 64, V 96, block 48",
         2,
         4,
         64,
         48,
         96,
         48,
         {{0, 29}, {29, 1}, {30, 1}, {31, 1}, {32, 16}},
         "positions 33 to 48"},
        {"gpt cached decoding, 1 layer, 1 head of 192 channels, block 320, cache 300",
         1,
         1,
         192,
         320,
         64,
         300,
         {{0, 260}, {260, 1}, {261, 39}},
         "positions 262 to 300, past the cache's 300"},
        {"gpt cached decoding, 1 layer, 1 head of 640 channels (two blocks of channels), block 96",
         1,
         1,
         640,
         96,
         64,
         96,
         {{0, 70}, {70, 1}, {71, 25}},
         "positions 72 to 96"},
    };
    for (size_t i = 0; i < sizeof decodes / sizeof decodes[0]; i++) {
        worst_scaled = 0;
        const int failures = st_test_failures, r = decode_case(dev, seed + 31 * i, &decodes[i]);
        if (r > 0 && st_test_failures == failures) st_test_failures += r; /* (its setup's failures) */
    }
    st_device_free(dev);
    if (rc == 77 && st_test_failures == 0) {
        printf("the host against itself: ok (the kernels were not run)\n");
        return 77;
    }
    return st_test_finish("cuda models");
}
