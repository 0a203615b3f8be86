/* The fp16 loss scaler across ranks, run by tests/e2e/precision_fp16.sh under
 * mpirun: an Inf injected into the gradients of ONE rank (the last) at step 2
 * must make every rank skip step 2 (st_scaler_check reduces the flag) and
 * halve its scale, with the weights untouched by that step; steps 1 and 3
 * are clean and update them. Gradients are not all-reduced here, so only the
 * flag's reduction can tell rank 0 about the overflow.
 * Usage: mpirun -n N scaler_check. Exit 0 when every check passes on this rank. */
#include <string.h>

#include "../check.h"
#include "comm/comm.h"
#include "model/graph.h"
#include "optim/scaler.h"

int main(void) {
    st_comm_config cc = ST_COMM_CONFIG_INIT;
    cc.backend = ST_COMM_MPI;
    cc.timeout_s = 30;
    st_comm *comm = NULL;
    CHECK_OK(st_comm_init(&cc, &comm));
    if (!comm) return 1;
    const int rank = st_comm_rank(comm), world = st_comm_size(comm);
    st_params p;
    st_graph g;
    memset(&p, 0, sizeof p);
    st_graph_init(&g, &p);
    int64_t shape[1] = {1000};
    st_tensor *w;
    CHECK_OK(st_graph_param(&g, "w", 1, shape, ST_INIT_ONES, 0, true, &w));
    g.params_only = true;
    CHECK_OK(st_graph_finalize(&g));
    st_params_init(&p, 1);
    st_scaler s;
    st_scaler_init(&s, true, 65536.0, 2000);
    float *before = malloc((size_t)p.count * sizeof *before);
    for (int step = 1; step <= 3; step++) {
        st_comm_set_step(comm, step);
        for (int64_t i = 0; i < p.count; i++) /* a scaled gradient of 0.01 * (rank + 1) */
            p.grad[i] = s.scale * 0.01f * (float)(rank + 1);
        if (step == 2 && rank == world - 1) p.grad[123] = INFINITY;
        memcpy(before, p.data, (size_t)p.count * sizeof *before);
        const float scale_before = s.scale;
        bool skip = false;
        CHECK_OK(st_scaler_check(&s, &p, 0, p.count, comm, &skip));
        if (!skip)
            for (int64_t i = 0; i < p.count; i++) /* plain SGD, lr 1 */
                p.data[i] -= p.grad[i];
        const bool want_skip = step == 2;
        CHECK(skip == want_skip, "rank %d step %d: skip %d, want %d", rank, step, skip, want_skip);
        CHECK(s.scale == (want_skip ? 0.5f * scale_before : scale_before),
              "rank %d step %d: scale %g after %g", rank, step, (double)s.scale, (double)scale_before);
        CHECK(s.skipped == (step >= 2 ? 1 : 0), "rank %d step %d: %lld skipped", rank, step,
              (long long)s.skipped);
        const bool same = memcmp(before, p.data, (size_t)p.count * sizeof *before) == 0;
        CHECK(same == want_skip, "rank %d step %d: weights %s", rank, step, same ? "unchanged" : "changed");
        /* clean steps unscale exactly: 1 - 0.01 * (rank + 1) per step */
        if (!want_skip && !(fabsf(p.data[7] - before[7] + 0.01f * (float)(rank + 1)) <= 1e-7f))
            CHECK(0, "rank %d step %d: update %g", rank, step, (double)(p.data[7] - before[7]));
        printf("rank %d step %d: %s, loss scale %g\n", rank, step, skip ? "skipped" : "updated",
               (double)s.scale);
    }
    free(before);
    st_graph_free(&g);
    st_params_free(&p);
    st_comm_free(comm);
    return st_test_failures ? 1 : 0;
}
