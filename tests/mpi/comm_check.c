/* The communicator on several ranks, run by tests/e2e/comm_mpi.sh under
 * mpirun. Every result is compared with values each rank computes on its own
 * (rank r contributes r * 1000 + i at index i).
 *
 *   comm_check ops      every collective (reduce to each root and all-to-all too), sums,
 *                       averages, uneven counts padded
 *                       per comm.h, in place, non-zero roots, async order, more in
 *                       flight than the pending limit, progress, a long small wait's CPU
 *   comm_check kill     --rank R --step S: rank R SIGKILLs itself mid-step
 *   comm_check stop     --rank R --step S: rank R SIGSTOPs itself before the step's collectives
 *   comm_check desync   --rank R --step S: rank R broadcasts where the others all-reduce
 *   comm_check count    --rank R --step S: rank R all-reduces a different count
 * Options: --timeout S (watchdog, default 600), --pids DIR (each rank writes
 * DIR/RANK.pid), --backend mpi|local|auto.
 * The fault modes run a training-like loop: per step, compute, then the
 * all-reduces "grad bucket 0" and "grad bucket 1" (after one broadcast
 * "params" at start, so bucket b of step s is collective number 2 + 2s + b). */
#include <signal.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "../check.h"
#include "comm/comm.h"

static int R, N; /* this rank, world size */

static float val(int r, size_t i) { return (float)(r * 1000) + (float)i; }

/* The sum over ranks of val(r, i), computed without the communicator. */
static double val_sum(size_t i) { return 1000.0 * N * (N - 1) / 2.0 + (double)N * (double)i; }

static volatile double sink;

/* `n` times a few tens of microseconds of arithmetic that does not touch MPI. */
static void compute(int n) {
    double a = sink;
    for (int k = 0; k < n; k++)
        for (int i = 0; i < 20000; i++)
            a = a * 0.999999 + 1e-9 * i;
    sink = a;
}

static void test_all_reduce(st_comm *c, size_t n) {
    float *x = malloc((n + 1) * sizeof *x), *y = malloc((n + 1) * sizeof *y);
    int64_t *xi = malloc((n + 1) * sizeof *xi);
    for (size_t i = 0; i < n; i++)
        x[i] = val(R, i);
    y[n] = x[n] = -7.0f;
    CHECK_OK(st_comm_all_reduce_sync(c, x, y, n, ST_COMM_F32, ST_COMM_SUM, "sum"));
    for (size_t i = 0; i < n; i++)
        if (!(y[i] == (float)val_sum(i))) {
            CHECK(0, "n %zu: sum[%zu] = %.9g, want %.9g", n, i, y[i], val_sum(i));
            break;
        }
    CHECK(y[n] == -7.0f, "n %zu: sum wrote past the end", n);
    CHECK_OK(st_comm_all_reduce_sync(c, x, x, n, ST_COMM_F32, ST_COMM_AVG, "avg in place"));
    for (size_t i = 0; i < n; i++)
        if (!(x[i] == (float)(val_sum(i) / N))) {
            CHECK(0, "n %zu: avg[%zu] = %.9g, want %.9g", n, i, x[i], val_sum(i) / N);
            break;
        }
    for (size_t i = 0; i < n; i++)
        x[i] = val(R, i);
    CHECK_OK(st_comm_all_reduce_sync(c, x, y, n, ST_COMM_F32, ST_COMM_MAX, "max"));
    for (size_t i = 0; i < n; i++)
        if (!(y[i] == val(N - 1, i))) {
            CHECK(0, "n %zu: max[%zu] = %g", n, i, y[i]);
            break;
        }
    for (size_t i = 0; i < n; i++)
        xi[i] = (int64_t)R * 1000000000000LL + (int64_t)i;
    CHECK_OK(st_comm_all_reduce_sync(c, xi, xi, n, ST_COMM_I64, ST_COMM_SUM, "int64 sum"));
    for (size_t i = 0; i < n; i++)
        if (xi[i] != 1000000000000LL * N * (N - 1) / 2 + (int64_t)N * (int64_t)i) {
            CHECK(0, "n %zu: int64 sum[%zu] = %lld", n, i, (long long)xi[i]);
            break;
        }
    free(x);
    free(y);
    free(xi);
}

/* n real elements padded to shard * N (comm.h's rule); rank R's shard. */
static void test_reduce_scatter(st_comm *c, size_t n, bool in_place) {
    size_t k = st_comm_shard_count(n, N), padded = k * (size_t)N;
    float *x = calloc(padded + 1, sizeof *x), *y = malloc((k + 1) * sizeof *y);
    for (size_t i = 0; i < n; i++)
        x[i] = val(R, i);
    y[k] = -7.0f;
    float *out = in_place ? x + (size_t)R * k : y;
    st_comm_req *r;
    CHECK_OK(st_comm_reduce_scatter(c, x, out, k, ST_COMM_F32, ST_COMM_AVG, "reduce-scatter", &r));
    CHECK_OK(st_comm_wait(&r));
    for (size_t j = 0; j < k; j++) {
        size_t g = (size_t)R * k + j;
        double want = g < n ? val_sum(g) / N : 0.0;
        if (!(out[j] == (float)want)) {
            CHECK(0, "n %zu%s: shard[%zu] (element %zu) = %.9g, want %.9g", n, in_place ? " in place" : "", j,
                  g, out[j], want);
            break;
        }
    }
    CHECK(y[k] == -7.0f, "reduce-scatter wrote past the shard");
    free(x);
    free(y);
}

/* The ZeRO parameter gather: each rank owns a shard of n padded elements. */
static void test_all_gather(st_comm *c, size_t n, bool in_place) {
    size_t k = st_comm_shard_count(n, N), padded = k * (size_t)N;
    float *all = malloc((padded + 1) * sizeof *all), *mine = malloc((k + 1) * sizeof *mine);
    for (size_t i = 0; i < padded; i++)
        all[i] = -1.0f;
    all[padded] = -7.0f;
    for (size_t j = 0; j < k; j++)
        mine[j] = (size_t)R * k + j < n ? val(0, (size_t)R * k + j) : 0.0f;
    float *send = mine;
    if (in_place) {
        memcpy(all + (size_t)R * k, mine, k * sizeof *mine);
        send = all + (size_t)R * k;
    }
    st_comm_req *r;
    CHECK_OK(st_comm_all_gather(c, send, all, k, ST_COMM_F32, "all-gather", &r));
    CHECK_OK(st_comm_wait(&r));
    for (size_t i = 0; i < n; i++)
        if (!(all[i] == val(0, i))) {
            CHECK(0, "n %zu%s: gathered[%zu] = %g", n, in_place ? " in place" : "", i, all[i]);
            break;
        }
    CHECK(all[padded] == -7.0f, "all-gather wrote past the end");
    free(all);
    free(mine);
}

/* Reduce to every root in turn (in place at the root), then all-to-all:
 * rank j's block r must arrive as block j on rank r. */
static void test_reduce_all_to_all(st_comm *c, size_t n) {
    float *x = malloc((n + 1) * N * sizeof *x), *y = malloc((n + 1) * N * sizeof *y);
    for (int root = 0; root < N; root++) {
        for (size_t i = 0; i < n; i++)
            x[i] = val(R, i);
        x[n] = -7.0f;
        st_comm_req *req = NULL;
        CHECK_OK(st_comm_reduce(c, x, R == root ? x : NULL, n, ST_COMM_F32, ST_COMM_SUM, root, "reduce", &req));
        CHECK_OK(st_comm_wait(&req));
        for (size_t i = 0; R == root && i < n; i++)
            if (!(x[i] == (float)val_sum(i))) {
                CHECK(0, "n %zu root %d: reduce[%zu] = %.9g, want %.9g", n, root, i, x[i], val_sum(i));
                break;
            }
        CHECK(x[n] == -7.0f, "n %zu: reduce wrote past the end", n);
    }
    for (int r = 0; r < N; r++)
        for (size_t i = 0; i < n; i++)
            x[(size_t)r * n + i] = (float)(R * 100 + r) + (float)i * 1e-3f;
    y[(size_t)N * n] = -7.0f;
    st_comm_req *req = NULL;
    CHECK_OK(st_comm_all_to_all(c, x, y, n, ST_COMM_F32, "all-to-all", &req));
    CHECK_OK(st_comm_wait(&req));
    for (int j = 0; j < N; j++)
        for (size_t i = 0; i < n; i++)
            if (!(y[(size_t)j * n + i] == (float)(j * 100 + R) + (float)i * 1e-3f)) {
                CHECK(0, "n %zu: all-to-all block %d [%zu] = %.9g", n, j, i, y[(size_t)j * n + i]);
                j = N;
                break;
            }
    CHECK(y[(size_t)N * n] == -7.0f, "n %zu: all-to-all wrote past the end", n);
    free(x);
    free(y);
}

static void test_broadcast(st_comm *c) {
    int root = N - 1;
    float x[1000];
    for (int i = 0; i < 1000; i++)
        x[i] = R == root ? val(root, (size_t)i) : -1.0f;
    CHECK_OK(st_comm_broadcast_sync(c, x, 1000, ST_COMM_F32, root, "params"));
    for (int i = 0; i < 1000; i++)
        if (!(x[i] == val(root, (size_t)i))) {
            CHECK(0, "broadcast from %d: x[%d] = %g", root, i, x[i]);
            break;
        }
    char msg[32] = "";
    if (R == root) snprintf(msg, sizeof msg, "hello from rank %d", root);
    CHECK_OK(st_comm_broadcast_sync(c, msg, sizeof msg, ST_COMM_U8, root, "bytes"));
    char want[32];
    snprintf(want, sizeof want, "hello from rank %d", root);
    CHECK(strcmp(msg, want) == 0, "bytes broadcast: '%s'", msg);
}

/* Several collectives in flight at once, waited for in reverse order. */
static void test_async(st_comm *c) {
    enum { K = 4, M = 50000 };
    float *b[K];
    st_comm_req *r[K];
    for (int k = 0; k < K; k++) {
        b[k] = malloc(M * sizeof(float));
        for (size_t i = 0; i < M; i++)
            b[k][i] = val(R, i) + (float)k;
        char name[32];
        snprintf(name, sizeof name, "bucket %d", k);
        CHECK_OK(st_comm_all_reduce(c, b[k], b[k], M, ST_COMM_F32, ST_COMM_SUM, name, &r[k]));
    }
    for (int k = K - 1; k >= 0; k--)
        CHECK_OK(st_comm_wait(&r[k]));
    for (int k = 0; k < K; k++) {
        for (size_t i = 0; i < M; i++)
            if (!(b[k][i] == (float)(val_sum(i) + N * k))) {
                CHECK(0, "bucket %d [%zu] = %g", k, i, b[k][i]);
                break;
            }
        free(b[k]);
    }
}

/* A large all-reduce started before a compute loop that calls the progress
 * engine between chunks (as backward will between layers) finishes during the
 * loop, before anyone waits for it: the event "done" comes before the event
 * "loop over". The loop is ~20 times longer than the all-reduce takes here.
 * For contrast, the same loop without progress calls, and how much was left
 * of the same all-reduce when it ended (printed, not asserted: it depends on
 * the MPI library having no progress thread). */
static void test_progress(st_comm *c) {
    enum { M = 1 << 21, CHUNKS = 2000 };
    float *x = malloc(M * sizeof *x);
    for (size_t i = 0; i < M; i++)
        x[i] = 1.0f;
    st_comm_req *r;
    CHECK_OK(st_comm_all_reduce(c, x, x, M, ST_COMM_F32, ST_COMM_SUM, "overlapped", &r));
    int done_at = -1;
    for (int k = 0; k < CHUNKS; k++) {
        compute(1);
        CHECK_OK(st_comm_progress(c));
        bool done = false;
        if (done_at < 0) CHECK_OK(st_comm_test(&r, &done));
        if (done) done_at = k;
    }
    CHECK(done_at >= 0, "the all-reduce had not finished after %d chunks of compute with progress driven",
          CHUNKS);
    CHECK_OK(st_comm_wait(&r));
    CHECK(x[M - 1] == (float)N, "overlapped all-reduce: %g", x[M - 1]);

    for (size_t i = 0; i < M; i++)
        x[i] = 1.0f;
    CHECK_OK(st_comm_all_reduce(c, x, x, M, ST_COMM_F32, ST_COMM_SUM, "not progressed", &r));
    compute(CHUNKS);
    int tests = 0;
    bool done = false;
    while (!done) {
        CHECK_OK(st_comm_test(&r, &done));
        tests++;
    }
    CHECK(x[M - 1] == (float)N, "all-reduce without progress: %g", x[M - 1]);
    if (R == 0)
        printf("progress: all-reduce of %d floats during %d chunks of compute: with st_comm_progress between "
               "chunks it finished after chunk %d; without, it was %s when the loop ended (%d test call(s) "
               "to finish)\n",
               M, CHUNKS, done_at + 1, tests > 1 ? "unfinished" : "finished", tests);
    free(x);
}

/* More collectives in flight than the communicator keeps unfinished at once
 * (1024): as ZeRO-2 on many ranks posts, one reduction per shard owner of a
 * bucket. The oldest are finished to make room; the handles stay valid, and
 * waiting for them newest first still gives every sum. Every 100th is a
 * large all-reduce, which may take the shared-memory path. */
static void test_many(st_comm *c) {
    enum { K = 3000, M = 5, BIG = 70000 };
    float **b = calloc(K, sizeof *b);
    st_comm_req **r = calloc(K, sizeof *r);
    for (int k = 0; k < K; k++) {
        const bool big = k % 100 == 0;
        const size_t m = big ? BIG : M;
        b[k] = malloc(m * sizeof(float));
        for (size_t i = 0; i < m; i++)
            b[k][i] = val(R, i) + (float)k;
        char name[32];
        snprintf(name, sizeof name, "piece %d", k);
        if (big)
            CHECK_OK(st_comm_all_reduce(c, b[k], b[k], m, ST_COMM_F32, ST_COMM_SUM, name, &r[k]));
        else
            CHECK_OK(st_comm_reduce(c, b[k], b[k], m, ST_COMM_F32, ST_COMM_SUM, k % N, name, &r[k]));
    }
    for (int k = K - 1; k >= 0; k--)
        CHECK_OK(st_comm_wait(&r[k]));
    int wrong = 0;
    for (int k = 0; k < K; k++) {
        const bool big = k % 100 == 0;
        if (big || k % N == R)
            for (size_t i = 0; i < (big ? BIG : M); i++)
                if (!(b[k][i] == (float)(val_sum(i) + N * k)) && wrong++ < 3)
                    CHECK(0, "piece %d [%zu] = %g, want %g", k, i, b[k][i], val_sum(i) + N * k);
        free(b[k]);
    }
    CHECK(wrong == 0, "%d wrong element(s) among %d collectives in flight", wrong, K);
    free(b);
    free(r);
}

/* Ranks waiting half a second for rank 0 in a small all-reduce (as for its
 * evaluation or checkpoint) sleep between polls: their CPU time is a small
 * part of the wait, where a polling wait took all of it. */
static void test_patient(st_comm *c) {
    if (N < 2) return;
    CHECK_OK(st_comm_barrier_sync(c, "before the patient wait"));
    if (R == 0) {
        struct timespec d = {0, 500000000};
        nanosleep(&d, NULL);
    }
    struct timespec w0, w1, c0, c1;
    clock_gettime(CLOCK_MONOTONIC, &w0);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    int64_t v = R, sum = -1;
    CHECK_OK(st_comm_all_reduce_sync(c, &v, &sum, 1, ST_COMM_I64, ST_COMM_SUM, "patient"));
    clock_gettime(CLOCK_MONOTONIC, &w1);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    const double wall = (double)(w1.tv_sec - w0.tv_sec) + 1e-9 * (double)(w1.tv_nsec - w0.tv_nsec);
    const double cpu = (double)(c1.tv_sec - c0.tv_sec) + 1e-9 * (double)(c1.tv_nsec - c0.tv_nsec);
    CHECK(sum == (int64_t)N * (N - 1) / 2, "patient all-reduce: %lld", (long long)sum);
    if (R == 1) {
        CHECK(wall > 0.3 && cpu < 0.25 * wall,
              "rank 1 waited %.3f s for rank 0 and spent %.3f s of CPU on it", wall, cpu);
        printf(
            "patient wait: rank 1 waited %.3f s for rank 0 in a small all-reduce, %.3f s of CPU (%.1f%%)\n",
            wall, cpu, 100.0 * cpu / wall);
    }
}

static int run_ops(st_comm *c) {
    CHECK(st_comm_local_size(c) == N && st_comm_local_rank(c) == R, "one node: local %d/%d",
          st_comm_local_rank(c), st_comm_local_size(c));
    st_comm_set_step(c, 1);
    const size_t counts[] = {0, 1, 7, 1000, 1001, 65537, 1u << 20};
    for (size_t t = 0; t < sizeof counts / sizeof counts[0]; t++) {
        test_all_reduce(c, counts[t]);
        test_reduce_scatter(c, counts[t], false);
        test_reduce_scatter(c, counts[t], true);
        test_all_gather(c, counts[t], false);
        test_all_gather(c, counts[t], true);
        test_reduce_all_to_all(c, counts[t]);
    }
    test_broadcast(c);
    test_async(c);
    test_many(c);
    test_progress(c);
    test_patient(c);
    CHECK_OK(st_comm_barrier_sync(c, "barrier"));
    /* Every rank numbered the same collectives. */
    int64_t seq[2] = {(int64_t)st_comm_seq(c), -(int64_t)st_comm_seq(c)};
    CHECK_OK(st_comm_all_reduce_sync(c, seq, seq, 2, ST_COMM_I64, ST_COMM_MIN, "sequence numbers"));
    CHECK(seq[0] == -seq[1], "ranks disagree on sequence numbers: min %lld, max %lld", (long long)seq[0],
          (long long)-seq[1]);
    return 0;
}

/* A training-like loop with a fault injected on one rank. */
static int run_faulty(st_comm *c, const char *mode, int bad_rank, int bad_step) {
    enum { M = 1000 };
    float params[M], grads[2][M];
    for (int i = 0; i < M; i++)
        params[i] = R == 0 ? 1.0f : 0.0f;
    st_status s = st_comm_broadcast_sync(c, params, M, ST_COMM_F32, 0, "params");
    for (int step = 0; step < 8 && s == ST_OK; step++) {
        st_comm_set_step(c, step);
        bool here = R == bad_rank && step == bad_step;
        if (here && strcmp(mode, "stop") == 0) raise(SIGSTOP);
        compute(5);
        st_comm_req *r0 = NULL, *r1 = NULL;
        for (int i = 0; i < M; i++)
            grads[0][i] = grads[1][i] = (float)R;
        s = st_comm_all_reduce(c, grads[0], grads[0], M, ST_COMM_F32, ST_COMM_AVG, "grad bucket 0", &r0);
        compute(2);
        if (s == ST_OK && here && strcmp(mode, "kill") == 0) raise(SIGKILL);
        if (s == ST_OK && here && strcmp(mode, "desync") == 0)
            s = st_comm_broadcast(c, params, 10, ST_COMM_F32, 0, "params", &r1);
        else if (s == ST_OK && here && strcmp(mode, "count") == 0)
            s = st_comm_all_reduce(c, grads[1], grads[1], M - 1, ST_COMM_F32, ST_COMM_AVG, "grad bucket 1",
                                   &r1);
        else if (s == ST_OK)
            s = st_comm_all_reduce(c, grads[1], grads[1], M, ST_COMM_F32, ST_COMM_AVG, "grad bucket 1", &r1);
        if (s == ST_OK) s = st_comm_wait(&r0);
        if (s == ST_OK) s = st_comm_wait(&r1);
    }
    if (s != ST_OK) {
        fprintf(stderr, "comm_check: rank %d: error: %s\n", R, st_last_error());
        return 1;
    }
    fprintf(stderr, "comm_check: rank %d: the %s fault did not stop the run\n", R, mode);
    return 3;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "ops", *pids = NULL;
    st_comm_config cfg = ST_COMM_CONFIG_INIT;
    int bad_rank = 1, bad_step = 3;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--timeout"))
            cfg.timeout_s = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--rank"))
            bad_rank = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--step"))
            bad_step = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--pids"))
            pids = argv[i + 1];
        else if (!strcmp(argv[i], "--backend"))
            cfg.backend = !strcmp(argv[i + 1], "mpi")     ? ST_COMM_MPI
                          : !strcmp(argv[i + 1], "local") ? ST_COMM_LOCAL
                                                          : ST_COMM_AUTO;
        else {
            fprintf(stderr, "comm_check: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    st_comm *c = NULL;
    if (st_comm_init(&cfg, &c) != ST_OK) {
        fprintf(stderr, "comm_check: %s\n", st_last_error());
        return 1;
    }
    R = st_comm_rank(c);
    N = st_comm_size(c);
    if (pids) {
        char path[512];
        snprintf(path, sizeof path, "%s/%d.pid", pids, R);
        FILE *f = fopen(path, "w");
        if (f) {
            fprintf(f, "%d\n", (int)getpid());
            fclose(f);
        }
    }
    int rc;
    if (!strcmp(mode, "ops")) {
        run_ops(c);
        rc = st_test_failures ? 1 : 0;
        if (st_test_failures)
            fprintf(stderr, "comm_check: rank %d: %d check(s) failed\n", R, st_test_failures);
        else if (R == 0)
            printf("comm_check: ok (%d rank(s), backend %s)\n", N, st_comm_backend_name(c));
    } else {
        rc = run_faulty(c, mode, bad_rank, bad_step);
    }
    st_comm_free(c);
    return rc;
}
