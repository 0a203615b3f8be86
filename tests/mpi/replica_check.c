/* The replicas' agreement after training (st_agree_replicas, src/dist/agree.h)
 * under mpirun, run by tests/e2e/ddp_equivalence.sh on 2 ranks: parameters
 * made from one seed agree; one element changed on the last rank only is
 * ST_ERR_INTERNAL on every rank, naming the tensor, the step and the last
 * rank; a buffer that differs (batch-norm statistics may) is not a
 * difference. Usage: mpirun -n N replica_check (N >= 2). */
#include <math.h>

#include "../check.h"
#include "comm/comm.h"
#include "dist/agree.h"

int main(void) {
    st_comm_config cc = ST_COMM_CONFIG_INIT;
    cc.backend = ST_COMM_MPI;
    cc.timeout_s = 60;
    st_comm *c = NULL;
    if (st_comm_init(&cc, &c) != ST_OK) {
        fprintf(stderr, "replica_check: %s\n", st_last_error());
        return 1;
    }
    const int rank = st_comm_rank(c), world = st_comm_size(c);
    if (world < 2) {
        st_comm_free(c);
        return st_test_skip("replica_check", "needs 2 or more ranks (mpirun -n 2)");
    }
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    st_tensor *a = NULL, *b = NULL, *buf = NULL;
    const int64_t sa[2] = {3, 5}, sb[1] = {7};
    CHECK_OK(st_graph_param(&g, "layer.weight", 2, sa, ST_INIT_NORMAL, 1.0f, true, &a));
    CHECK_OK(st_graph_param(&g, "layer.bias", 1, sb, ST_INIT_NORMAL, 1.0f, false, &b));
    CHECK_OK(st_graph_buffer(&g, "layer.running_mean", 1, sb, ST_INIT_ZEROS, &buf));
    CHECK_OK(st_graph_finalize(&g));
    CHECK_OK(st_params_init(&p, 42));
    if (st_test_failures) return st_test_finish("replica_check");

    bool agreed = true;
    CHECK_OK(st_agree_replicas(c, &p, 7, &agreed));
    CHECK(!agreed, "rank %d: no error, yet agreed is set", rank);
    buf = st_params_find(&p, "layer.running_mean");
    if (buf && rank == 1) buf->data[3] = 0.5f; /* a buffer: not compared */
    CHECK_OK(st_agree_replicas(c, &p, 7, &agreed));
    b = st_params_find(&p, "layer.bias");
    if (b && rank == world - 1) b->data[4] = nextafterf(b->data[4], 1e30f); /* one ulp, one rank */
    char want[64];
    snprintf(want, sizeof want, "rank %d has bits hashed to", world - 1);
    CHECK_FAILS(st_agree_replicas(c, &p, 7, &agreed), ST_ERR_INTERNAL, "parameter layer.bias after step 7");
    CHECK(agreed, "rank %d: the replicas' difference is not marked as every rank's", rank);
    CHECK(strstr(st_last_error(), want) != NULL &&
              strstr(st_last_error(), "the data-parallel replicas differ"),
          "rank %d: the message names the replicas and rank %d: %s", rank, world - 1, st_last_error());
    st_graph_free(&g);
    st_params_free(&p);
    st_comm_free(c);
    if (rank == 0 && !st_test_failures)
        printf("replica_check: %d ranks: an ulp on one rank is found\n", world);
    return st_test_finish("replica_check");
}
