/* Synchronised batch-norm on real MPI against one batch-norm over the whole
 * batch, run by tests/e2e/sync_batchnorm.sh on 2 and 3 ranks: the global
 * batch of Btot images is dealt out in contiguous slices (unequal when the
 * world does not divide Btot; one row per rank in the (B, C) case), each rank
 * runs batch-norm on its slice with the graph's allreduce_sum hook set to a
 * float64 all-reduce, and every rank also runs batch-norm on the whole batch
 * without it. Its rows of y and dx, the statistics it normalised with, the
 * running statistics and the rank-summed dweight and dbias must match the
 * whole batch's; the hook runs twice in a training forward, once in backward
 * and never in eval. One case puts the channel means at 3e4 with spreads of
 * 0.06 to 0.3, where E[x^2] - E[x]^2 in double loses about 3 digits of the variance:
 * the check of rstd to 2e-6 fails without the shifted, pairwise combination.
 * Usage: mpirun -n N sync_bn_check. */
#include <stdint.h>

#include "../check.h"
#include "comm/comm.h"
#include "layers/layers.h"
#include "model/graph.h"

enum { C = 5 };

typedef struct hook_ctx {
    st_comm *comm;
    int calls;
} hook_ctx;

static st_status hook(void *ctx, double *buf, int64_t n, const char *name) {
    hook_ctx *h = ctx;
    h->calls++;
    return st_comm_all_reduce_sync(h->comm, buf, buf, (size_t)n, ST_COMM_F64, ST_COMM_SUM, name);
}

static float hashu(int64_t row, int64_t c, uint32_t salt) { /* [-0.5, 0.5) */
    uint32_t h = (uint32_t)row * 2654435761u ^ ((uint32_t)c + salt) * 40503u;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    return (float)(h % 10007u) / 10007.0f - 0.5f;
}

static float xval(int64_t row, int64_t c, float offset) {
    if (offset != 0.0f) return offset + 0.2f * (float)(c + 1) * hashu(row, c, 1);
    return hashu(row, c, 1) * (0.5f + 0.3f * (float)c) + 0.4f * (float)c - 0.2f;
}

typedef struct net {
    st_params p;
    st_graph g;
    st_tensor *x, *y, *w, *b, *rm, *rv;
} net;

/* Batch-norm over images [row0 / hw, row0 / hw + B) of the global batch: (B, hw, 1, C), or (B, C) when hw
 * is 1. */
static void build(net *n, int64_t B, int64_t hw, int64_t row0, bool relu, float offset, bool training) {
    memset(n, 0, sizeof *n);
    st_graph_init(&n->g, &n->p);
    const int64_t s4[4] = {B, hw, 1, C}, s2[2] = {B, C};
    CHECK_OK(st_graph_param(&n->g, "x", hw > 1 ? 4 : 2, hw > 1 ? s4 : s2, ST_INIT_ZEROS, 0.0f, false, &n->x));
    if (relu)
        CHECK_OK(st_batchnorm_relu(&n->g, "bn", n->x, 1e-5f, 0.1f, &n->y));
    else
        CHECK_OK(st_batchnorm(&n->g, "bn", n->x, 1e-5f, 0.1f, &n->y));
    CHECK_OK(st_graph_finalize(&n->g));
    st_params_init(&n->p, 1);
    n->w = st_params_find(&n->p, "bn.weight");
    n->b = st_params_find(&n->p, "bn.bias");
    n->rm = st_params_find(&n->p, "bn.running_mean");
    n->rv = st_params_find(&n->p, "bn.running_var");
    for (int64_t i = 0; i < B * hw; i++)
        for (int64_t c = 0; c < C; c++)
            n->x->data[i * C + c] = xval(row0 + i, c, offset);
    for (int64_t c = 0; c < C; c++) {
        n->w->data[c] = 1.0f + 0.1f * (float)c;
        n->b->data[c] = 0.05f * (float)c - 0.1f;
        n->rm->data[c] = 0.1f * (float)c + (offset != 0.0f ? offset : 0.0f);
        n->rv->data[c] = 1.0f + 0.2f * (float)c;
    }
    n->g.training = training;
}

static void net_free(net *n) {
    st_graph_free(&n->g);
    st_params_free(&n->p);
}

/* |a - b| <= atol + rtol |b| element-wise. */
static void cmp(const char *label, const char *what, const float *a, const float *b, int64_t n, double rtol,
                double atol) {
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (!(fabs((double)a[i] - (double)b[i]) <= atol + rtol * fabs((double)b[i]))) {
            if (bad < 3)
                fprintf(stderr, "FAIL %s: %s[%lld] = %.9g, whole batch %.9g\n", label, what, (long long)i,
                        (double)a[i], (double)b[i]);
            bad++;
        }
    st_test_failures += bad;
}

static void run_case(st_comm *comm, int64_t Btot, int64_t hw, bool relu, float offset, bool training) {
    const int rank = st_comm_rank(comm), world = st_comm_size(comm);
    const int64_t B = Btot / world + (rank < Btot % world ? 1 : 0);
    int64_t img0 = 0;
    for (int q = 0; q < rank; q++)
        img0 += Btot / world + (q < Btot % world ? 1 : 0);
    const int64_t row0 = img0 * hw, M = B * hw;
    char label[160];
    snprintf(label, sizeof label, "rank %d of %d: %lld images of %lld (rows %lld..%lld)%s%s, offset %g, %s",
             rank, world, (long long)B, (long long)Btot, (long long)row0, (long long)(row0 + M - 1),
             hw > 1 ? ", NHWC" : "", relu ? ", fused ReLU" : "", (double)offset, training ? "train" : "eval");
    net full, part;
    build(&full, Btot, hw, 0, relu, offset, training);
    build(&part, B, hw, row0, relu, offset, training);
    hook_ctx hc = {comm, 0};
    part.g.allreduce_sum = hook;
    part.g.allreduce_ctx = &hc;
    CHECK_OK(st_graph_forward(&full.g));
    CHECK_OK(st_graph_forward(&part.g));
    CHECK(hc.calls == (training ? 2 : 0), "%s: %d reductions in forward", label, hc.calls);
    const float *fs = full.g.nodes[0].saved, *ps = part.g.nodes[0].saved; /* mean (C), rstd (C) */
    cmp(label, "mean", ps, fs, C, 2.5e-7, 1e-7);
    cmp(label, "rstd", ps + C, fs + C, C, 2e-6, 0);
    cmp(label, "running_mean", part.rm->data, full.rm->data, C, 2.5e-7, 1e-7);
    cmp(label, "running_var", part.rv->data, full.rv->data, C, 2e-6, 0);
    /* y: with the means at 3e4 one float ulp of the mean moves y by ~0.1; the
     * statistics above are the check there. */
    if (offset == 0.0f) cmp(label, "y", part.y->data, full.y->data + row0 * C, M * C, 1e-5, 1e-5);

    for (int64_t i = 0; i < Btot * hw; i++)
        for (int64_t c = 0; c < C; c++) {
            const float d = hashu(i, c, 7);
            full.y->grad[i * C + c] = d;
            if (i >= row0 && i < row0 + M) part.y->grad[(i - row0) * C + c] = d;
        }
    memset(full.p.grad, 0, (size_t)full.p.arena_count * sizeof(float));
    memset(part.p.grad, 0, (size_t)part.p.arena_count * sizeof(float));
    hc.calls = 0;
    CHECK_OK(full.g.nodes[0].ops->backward(&full.g.nodes[0], &full.g));
    CHECK_OK(part.g.nodes[0].ops->backward(&part.g.nodes[0], &part.g));
    CHECK(hc.calls == (training ? 1 : 0), "%s: %d reductions in backward", label, hc.calls);
    if (offset == 0.0f) cmp(label, "dx", part.x->grad, full.x->grad + row0 * C, M * C, 1e-4, 2e-5);
    float dwb[2 * C];
    memcpy(dwb, part.w->grad, C * sizeof(float));
    memcpy(dwb + C, part.b->grad, C * sizeof(float));
    CHECK_OK(st_comm_all_reduce_sync(comm, dwb, dwb, 2 * C, ST_COMM_F32, ST_COMM_SUM, "dweight, dbias"));
    if (offset == 0.0f) {
        cmp(label, "dweight (summed over ranks)", dwb, full.w->grad, C, 1e-5, 1e-5);
        cmp(label, "dbias (summed over ranks)", dwb + C, full.b->grad, C, 1e-5, 1e-5);
    }
    net_free(&full);
    net_free(&part);
}

int main(void) {
    st_comm_config cc = ST_COMM_CONFIG_INIT;
    cc.backend = ST_COMM_MPI;
    cc.timeout_s = 30;
    st_comm *comm = NULL;
    CHECK_OK(st_comm_init(&cc, &comm));
    if (!comm) return 1;
    for (int relu = 0; relu < 2; relu++) {
        run_case(comm, 7, 6, relu, 0.0f, true); /* NHWC, unequal slices */
        run_case(comm, 8, 6, relu, 0.0f, false);
    }
    if (st_comm_size(comm) > 1) /* (B, C), one row per rank */
        run_case(comm, st_comm_size(comm), 1, false, 0.0f, true);
    run_case(comm, 9, 1, false, 0.0f, true);
    run_case(comm, 6, 6, false, 3e4f, true); /* means far from 0 */
    printf("rank %d: sync batch-norm ok\n", st_comm_rank(comm));
    st_comm_free(comm);
    return st_test_failures ? 1 : 0;
}
