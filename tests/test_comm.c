/* The communicator with the local backend (one rank): every collective is an
 * identity or a copy, sequence numbers count every call, requests complete at
 * once, and bad arguments are errors that name the rank, the collective, its
 * sequence number and the step. The MPI backend is tested with several ranks
 * by tests/e2e/comm_mpi.sh (tests/mpi/comm_check.c). Also which GPU a rank
 * opens and how two ranks on one GPU are found (the emulator's ranks do both
 * in tests/e2e/emu_gpus_per_task.sh). */
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "comm/comm.h"
#include "core/device.h"
#include "dist/agree.h"

#define GUARD 12345.0f

static st_comm *open_local(void) {
    st_comm_config cfg = ST_COMM_CONFIG_INIT;
    cfg.backend = ST_COMM_LOCAL;
    st_comm *c = NULL;
    CHECK_OK(st_comm_init(&cfg, &c));
    return c;
}

static void test_identity(void) {
    st_comm *c = open_local();
    if (!c) return;
    CHECK(st_comm_rank(c) == 0 && st_comm_size(c) == 1, "rank %d size %d", st_comm_rank(c), st_comm_size(c));
    CHECK(st_comm_local_rank(c) == 0 && st_comm_local_size(c) == 1, "local %d/%d", st_comm_local_rank(c),
          st_comm_local_size(c));
    CHECK(strcmp(st_comm_backend_name(c), "local") == 0, "backend %s", st_comm_backend_name(c));
    CHECK(st_comm_host(c)[0] != '\0', "a host name");
    CHECK(st_comm_seq(c) == 0, "no collective yet: seq %llu", (unsigned long long)st_comm_seq(c));

    enum { N = 37 };
    float x[N], y[N + 1];
    for (int i = 0; i < N; i++)
        x[i] = (float)i * 0.5f - 3.0f;
    const st_comm_redop ops[] = {ST_COMM_SUM, ST_COMM_AVG, ST_COMM_MIN, ST_COMM_MAX};
    for (int k = 0; k < 4; k++) {
        for (int i = 0; i < N; i++)
            y[i] = -1.0f;
        y[N] = GUARD;
        CHECK_OK(st_comm_all_reduce_sync(c, x, y, N, ST_COMM_F32, ops[k], "all-reduce test"));
        for (int i = 0; i < N; i++)
            CHECK(y[i] == x[i], "op %d: y[%d] = %g, want %g", k, i, y[i], x[i]);
        CHECK(y[N] == GUARD, "op %d wrote past the end", k);
    }
    CHECK(st_comm_seq(c) == 4, "four collectives: seq %llu", (unsigned long long)st_comm_seq(c));

    /* In place, asynchronous: done at once, and the handle is released. */
    float z[N];
    memcpy(z, x, sizeof z);
    st_comm_req *r = NULL;
    CHECK_OK(st_comm_all_reduce(c, z, z, N, ST_COMM_F32, ST_COMM_AVG, "in place", &r));
    CHECK(r != NULL, "a request handle");
    bool done = false;
    CHECK_OK(st_comm_test(&r, &done));
    CHECK(done && r == NULL, "test: done %d, handle cleared %d", done, r == NULL);
    CHECK(memcmp(z, x, sizeof z) == 0, "in-place average over one rank is the identity");
    CHECK_OK(st_comm_wait(&r)); /* NULL handle: returns at once */
    CHECK_OK(st_comm_test(&r, &done));
    CHECK(done, "a NULL handle is done");

    /* int64: what signature checks use. */
    int64_t sig[3] = {INT64_MIN, 0, INT64_MAX}, lo[3], hi[3];
    CHECK_OK(st_comm_all_reduce_sync(c, sig, lo, 3, ST_COMM_I64, ST_COMM_MIN, "signature min"));
    CHECK_OK(st_comm_all_reduce_sync(c, sig, hi, 3, ST_COMM_I64, ST_COMM_MAX, "signature max"));
    CHECK(memcmp(lo, sig, sizeof sig) == 0 && memcmp(hi, sig, sizeof sig) == 0, "int64 min/max");

    /* Reduce-scatter: the only shard is everything; the padded shard size. */
    CHECK(st_comm_shard_count(10, 3) == 4, "ceil(10/3) = %zu", st_comm_shard_count(10, 3));
    CHECK(st_comm_shard_count(9, 3) == 3, "9/3 = %zu", st_comm_shard_count(9, 3));
    CHECK(st_comm_shard_count(0, 4) == 0, "0/4 = %zu", st_comm_shard_count(0, 4));
    CHECK(st_comm_shard_count(1, 4) == 1, "ceil(1/4) = %zu", st_comm_shard_count(1, 4));
    for (int i = 0; i <= N; i++)
        y[i] = GUARD;
    CHECK_OK(st_comm_reduce_scatter(c, x, y, N, ST_COMM_F32, ST_COMM_SUM, "reduce-scatter", &r));
    CHECK_OK(st_comm_wait(&r));
    CHECK(memcmp(y, x, sizeof x) == 0 && y[N] == GUARD, "reduce-scatter over one rank copies");
    memcpy(z, x, sizeof z);
    CHECK_OK(st_comm_reduce_scatter(c, z, z, N, ST_COMM_F32, ST_COMM_AVG, "reduce-scatter in place", &r));
    CHECK_OK(st_comm_wait(&r));
    CHECK(memcmp(z, x, sizeof z) == 0, "in-place reduce-scatter");

    /* All-gather of bytes, out of place and in place. */
    uint8_t b[5] = {1, 2, 3, 4, 5}, g[6] = {0, 0, 0, 0, 0, 99};
    CHECK_OK(st_comm_all_gather(c, b, g, 5, ST_COMM_U8, "gather bytes", &r));
    CHECK_OK(st_comm_wait(&r));
    CHECK(memcmp(g, b, 5) == 0 && g[5] == 99, "all-gather copies");
    CHECK_OK(st_comm_all_gather(c, g, g, 5, ST_COMM_U8, "gather in place", &r));
    CHECK_OK(st_comm_wait(&r));
    CHECK(memcmp(g, b, 5) == 0, "in-place all-gather");

    memcpy(z, x, sizeof z);
    CHECK_OK(st_comm_broadcast_sync(c, z, N, ST_COMM_F32, 0, "broadcast"));
    CHECK(memcmp(z, x, sizeof z) == 0, "broadcast from rank 0 to itself");
    CHECK_OK(st_comm_barrier_sync(c, "barrier"));
    CHECK_OK(st_comm_progress(c));
    CHECK_OK(st_comm_wait_all(c));
    CHECK(st_comm_seq(c) == 13, "13 collectives: seq %llu", (unsigned long long)st_comm_seq(c));
    st_comm_free(c);
}

static void test_bad_args(void) {
    st_comm *c = open_local();
    if (!c) return;
    float x[8] = {0}, y[8];
    st_comm_req *r = (st_comm_req *)&x; /* must be overwritten with NULL on failure */
    st_comm_set_step(c, 7);
    CHECK_FAILS(st_comm_all_reduce(NULL, x, y, 8, ST_COMM_F32, ST_COMM_SUM, "x", &r), ST_ERR_ARG, "NULL");
    CHECK(r == NULL, "a failed start leaves no handle");
    CHECK_FAILS(st_comm_all_reduce(c, x, y, 8, ST_COMM_F32, ST_COMM_SUM, "x", NULL), ST_ERR_ARG,
                "req is NULL");
    CHECK_FAILS(st_comm_all_reduce(c, NULL, y, 8, ST_COMM_F32, ST_COMM_SUM, "grads", &r), ST_ERR_ARG,
                "rank 0 of 1");
    CHECK_FAILS(st_comm_all_reduce(c, NULL, y, 8, ST_COMM_F32, ST_COMM_SUM, "grads", &r), ST_ERR_ARG,
                "all-reduce 'grads' (seq 1, step 7");
    CHECK_FAILS(st_comm_all_reduce(c, NULL, y, 8, ST_COMM_F32, ST_COMM_SUM, "grads", &r), ST_ERR_ARG,
                "send buffer is NULL");
    CHECK_FAILS(st_comm_all_reduce(c, x, NULL, 8, ST_COMM_F32, ST_COMM_SUM, "grads", &r), ST_ERR_ARG,
                "receive buffer is NULL");
    CHECK_FAILS(st_comm_all_reduce(c, x, y, 8, ST_COMM_I64, ST_COMM_AVG, "ints", &r), ST_ERR_ARG,
                "avg needs float32");
    CHECK_FAILS(st_comm_all_reduce(c, x, y, 8, ST_COMM_U8, ST_COMM_SUM, "bytes", &r), ST_ERR_ARG, "wrap");
    CHECK_FAILS(st_comm_all_reduce(c, x, y, 8, (st_comm_dtype)9, ST_COMM_SUM, "t", &r), ST_ERR_ARG,
                "unknown element type");
    CHECK_FAILS(st_comm_all_reduce(c, x, y, 8, ST_COMM_F32, (st_comm_redop)9, "t", &r), ST_ERR_ARG,
                "unknown reduction");
    CHECK_FAILS(st_comm_all_reduce(c, x, x + 1, 4, ST_COMM_F32, ST_COMM_SUM, "overlap", &r), ST_ERR_ARG,
                "overlap");
    CHECK_FAILS(st_comm_all_reduce(c, x, y, (size_t)INT_MAX + 1, ST_COMM_F32, ST_COMM_SUM, "huge", &r),
                ST_ERR_ARG, "split the buffer");
    CHECK_FAILS(st_comm_broadcast(c, x, 8, ST_COMM_F32, 1, "params", &r), ST_ERR_ARG, "root 1 is not a rank");
    CHECK_FAILS(st_comm_broadcast(c, x, 8, ST_COMM_F32, -1, "params", &r), ST_ERR_ARG,
                "broadcast 'params' (seq 1, step 7, 8 x float32 from rank -1)");
    CHECK_FAILS(st_comm_progress(NULL), ST_ERR_ARG, "NULL");
    CHECK_FAILS(st_comm_wait(NULL), ST_ERR_ARG, "NULL");
    bool done;
    CHECK_FAILS(st_comm_test(NULL, &done), ST_ERR_ARG, "NULL");
    CHECK(st_comm_seq(c) == 0, "rejected calls take no sequence number: %llu",
          (unsigned long long)st_comm_seq(c));
    /* A NULL name is the collective's kind. Zero elements are fine. */
    CHECK_OK(st_comm_all_reduce_sync(c, NULL, NULL, 0, ST_COMM_F32, ST_COMM_SUM, NULL));
    CHECK(st_comm_seq(c) == 1, "seq %llu", (unsigned long long)st_comm_seq(c));

    /* After an abort the local communicator is broken, and says so. */
    st_comm_abort(c, "test abort");
    CHECK_FAILS(st_comm_all_reduce_sync(c, x, y, 8, ST_COMM_F32, ST_COMM_SUM, "after"), ST_ERR_INTERNAL,
                "aborted: test abort");
    CHECK_FAILS(st_comm_progress(c), ST_ERR_INTERNAL, "rank 0 of 1");
    st_comm_free(c);
    st_comm_free(NULL);
}

static void test_bad_config(void) {
    st_comm *c = (st_comm *)&c;
    st_comm_config cfg = ST_COMM_CONFIG_INIT;
    cfg.timeout_s = -1;
    CHECK_FAILS(st_comm_init(&cfg, &c), ST_ERR_ARG, "timeout_s");
    CHECK(c == NULL, "no handle after a failed init");
    cfg = (st_comm_config)ST_COMM_CONFIG_INIT;
    cfg.check_every = -2;
    CHECK_FAILS(st_comm_init(&cfg, &c), ST_ERR_ARG, "check_every");
    cfg = (st_comm_config)ST_COMM_CONFIG_INIT;
    cfg.backend = (st_comm_backend)42;
    CHECK_FAILS(st_comm_init(&cfg, &c), ST_ERR_ARG, "backend");
    CHECK_FAILS(st_comm_init(NULL, NULL), ST_ERR_ARG, "out is NULL");
}

/* With no launcher around, the automatic choice is local and calls no MPI. */
static void test_auto(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "SLURM_STEP_ID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) {
            printf("test_comm: automatic backend not checked: %s is set\n", vars[i]);
            return;
        }
    st_comm *c = NULL;
    CHECK_OK(st_comm_init(NULL, &c));
    CHECK(c && strcmp(st_comm_backend_name(c), "local") == 0, "auto without a launcher: %s",
          st_comm_backend_name(c));
    st_comm_free(c);
}

/* A rank's GPU among those its process sees: its rank on the node while
 * there are that many (every rank sees the node's GPUs), else modulo their
 * number (one each: its one). Two ranks on one GPU: the lowest rank whose
 * GPU another holds, and the next that holds it, found among thousands of
 * ranks; "" (a rank on the CPU) never matches. */
static void test_gpu_placement(void) {
    CHECK(st_device_rank_ordinal(3, 8) == 3 && st_device_rank_ordinal(0, 1) == 0, "ranks seeing every GPU");
    CHECK(st_device_rank_ordinal(5, 1) == 0 && st_device_rank_ordinal(7, 1) == 0, "one GPU each: its one");
    CHECK(st_device_rank_ordinal(3, 2) == 1 && st_device_rank_ordinal(2, 2) == 0, "two each: %d %d",
          st_device_rank_ordinal(3, 2), st_device_rank_ordinal(2, 2));
    enum { W = 4096, S = 32 };
    static char all[W * S];
    for (int r = 0; r < W; r++) /* every rank its own GPU: 8 a node */
        snprintf(all + r * S, S, "node%04d 0000:%02x:00.0", r / 8, r % 8);
    int a, b;
    CHECK_OK(st_agree_first_shared(all, W, S, &a, &b));
    CHECK(a == -1 && b == -1, "each on its own GPU: %d %d", a, b);
    memcpy(all + 3001 * S, all + 2050 * S, S); /* 3001 on 2050's GPU */
    memcpy(all + 1503 * S, all + 3998 * S, S); /* 1503 on 3998's */
    memcpy(all + 2051 * S, all + 2050 * S, S); /* and 2051 too */
    CHECK_OK(st_agree_first_shared(all, W, S, &a, &b));
    CHECK(a == 1503 && b == 3998, "the lowest rank sharing its GPU: %d and %d", a, b);
    snprintf(all + 1503 * S, S, "node0187 0000:07:00.0"); /* its own again */
    CHECK_OK(st_agree_first_shared(all, W, S, &a, &b));
    CHECK(a == 2050 && b == 2051, "three on one GPU: the two lowest, %d and %d", a, b);
    for (int r = 0; r < W; r++) /* a UUID each after '|': said, not compared */
        snprintf(all + r * S, S, "node%04d 0000:%02x:00.0|GPU-%04d", r / 8, r % 8, r);
    CHECK_OK(st_agree_first_shared(all, W, S, &a, &b));
    CHECK(a == -1 && b == -1, "each on its own GPU, with UUIDs: %d %d", a, b);
    snprintf(all + 77 * S, S, "node0009 0000:03:00.0|MIG-77"); /* a MIG slice of 75's GPU */
    CHECK_OK(st_agree_first_shared(all, W, S, &a, &b));
    CHECK(a == 75 && b == 77, "MIG slices of one GPU (one address, two UUIDs): %d and %d", a, b);
    for (int r = 0; r < W; r++) /* on the CPU */
        all[r * S] = '\0';
    CHECK_OK(st_agree_first_shared(all, W, S, &a, &b));
    CHECK(a == -1, "ranks on the CPU share no GPU: %d %d", a, b);
    st_comm *c = open_local();
    char gpu[64], gpu_b[64];
    CHECK_OK(st_agree_gpus(c, "host 0000:01:00.0|GPU-1", &a, &b, gpu, gpu_b, sizeof gpu));
    CHECK(a == -1 && b == -1 && !gpu[0] && !gpu_b[0], "one rank: %d %d %s", a, b, gpu);
    st_comm_free(c);
}

int main(void) {
    test_gpu_placement();
    test_identity();
    test_bad_args();
    test_bad_config();
    test_auto();
    return st_test_finish("test_comm");
}
