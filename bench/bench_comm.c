/* All-reduce bandwidth through the communicator, nccl-tests style: for each
 * size, the mean time per all-reduce (the slowest rank's), algorithm bandwidth
 * (bytes / time) and bus bandwidth (algbw * 2(n-1)/n, what each link carries
 * in a ring), with every result checked against values computed
 * independently. Run it under mpirun:
 *
 *   mpirun -np 2 build/bench/bench_comm [--min BYTES] [--max BYTES] [--check-every N] [--reps R]
 *
 * --check-every 0 turns the collective check off, to measure what it costs.
 * With several ranks on one node it times each size twice, through the
 * shared-memory all-reduce (src/comm/comm_shm.c, the default) and through MPI
 * (a second communicator with it off), and prints MPI's time beside it with
 * the ratio mpi/shm.
 * Each size is timed R times (default 3) and the best is reported: on a
 * shared machine the noise only ever adds time.
 * Not a test: it exits non-zero only when a result is wrong or a call fails. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define TRY(expr)                                                                                            \
    do {                                                                                                     \
        if ((expr) != ST_OK) {                                                                               \
            fprintf(stderr, "bench_comm: %s\n", st_last_error());                                            \
            goto fail;                                                                                       \
        }                                                                                                    \
    } while (0)

/* The slowest rank's best mean time per all-reduce of `count` floats. */
static st_status time_all_reduce(st_comm *c, const float *send, float *recv, size_t count, int iters,
                                 int reps, float *out) {
    for (int w = 0; w < 2; w++)
        ST_TRY(st_comm_all_reduce_sync(c, send, recv, count, ST_COMM_F32, ST_COMM_SUM, "warm-up"));
    for (int rep = 0; rep < reps; rep++) {
        ST_TRY(st_comm_barrier_sync(c, "start"));
        double t0 = now();
        for (int it = 0; it < iters; it++)
            ST_TRY(st_comm_all_reduce_sync(c, send, recv, count, ST_COMM_F32, ST_COMM_SUM, "timed"));
        float t = (float)((now() - t0) / iters);
        ST_TRY(st_comm_all_reduce_sync(c, &t, &t, 1, ST_COMM_F32, ST_COMM_MAX, "slowest time"));
        if (rep == 0 || t < *out) *out = t;
    }
    return ST_OK;
}

int main(int argc, char **argv) {
    size_t min_bytes = 1024, max_bytes = 100u << 20;
    int reps = 3;
    st_comm_config cfg = ST_COMM_CONFIG_INIT;
    cfg.timeout_s = 120;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--min"))
            min_bytes = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--max"))
            max_bytes = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--check-every"))
            cfg.check_every = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]) > 0 ? atoi(argv[i + 1]) : 1;
        else {
            fprintf(stderr, "usage: bench_comm [--min BYTES] [--max BYTES] [--check-every N] [--reps R]\n");
            return 2;
        }
    }
    st_comm *c = NULL, *cm = NULL;
    float *send = NULL, *recv = NULL;
    int wrong_total = 0;
    if (st_comm_init(&cfg, &c) != ST_OK) {
        fprintf(stderr, "bench_comm: %s\n", st_last_error());
        return 1;
    }
    int rank = st_comm_rank(c), n = st_comm_size(c);
    if (n > 1 && st_comm_local_size(c) == n) {
        st_comm_config cfg_mpi = cfg;
        cfg_mpi.backend = ST_COMM_MPI;
        cfg_mpi.shm_min_bytes = 0;
        TRY(st_comm_init(&cfg_mpi, &cm));
    }
    size_t max_count = max_bytes / sizeof(float);
    send = malloc(max_count * sizeof *send);
    recv = malloc(max_count * sizeof *recv);
    if (!send || !recv) {
        fprintf(stderr, "bench_comm: no memory for 2 x %zu bytes\n", max_bytes);
        goto fail;
    }
    /* Small integers: the sum is exact in float whatever the order. */
    for (size_t i = 0; i < max_count; i++)
        send[i] = (float)(rank + (int)(i % 7));
    if (rank == 0) {
        printf(
            "# all-reduce (sum, float32, out of place), %d rank(s), backend %s, collective check every %d\n",
            n, st_comm_backend_name(c), cfg.check_every);
        if (cm)
            printf("# time: through shared memory from %zu bytes on (or SCALETRAIN_SHM_MIN_BYTES); "
                   "mpi(us): MPI_Iallreduce alone\n",
                   getenv("SCALETRAIN_SHM_MIN_BYTES")
                       ? (size_t)strtoull(getenv("SCALETRAIN_SHM_MIN_BYTES"), NULL, 10)
                       : cfg.shm_min_bytes);
        printf("# %12s %12s %6s %12s %12s %12s %12s %8s %7s\n", "size(B)", "count", "iters", "time(us)",
               "algbw(GB/s)", "busbw(GB/s)", "mpi(us)", "mpi/shm", "#wrong");
    }
    if (rank == 0 && reps > 1) printf("# best of %d repetitions per size\n", reps);
    for (size_t bytes = min_bytes;; bytes *= 4) { /* x4 steps, then max_bytes itself */
        if (bytes > max_bytes) bytes = max_bytes;
        size_t count = bytes / sizeof(float);
        /* About 0.2 s of transfers at 1 GB/s, between 5 and 1000 iterations. */
        int iters = (int)(200e6 / (double)bytes);
        iters = iters < 5 ? 5 : iters > 1000 ? 1000 : iters;
        float dt = 0, dt_mpi = 0;
        if (cm) TRY(time_all_reduce(cm, send, recv, count, iters, reps, &dt_mpi));
        TRY(time_all_reduce(c, send, recv, count, iters, reps, &dt));
        int64_t wrong = 0;
        for (size_t i = 0; i < count; i++) {
            double want = (double)n * (n - 1) / 2.0 + (double)n * (double)(i % 7);
            if (!(recv[i] == (float)want)) wrong++;
        }
        TRY(st_comm_all_reduce_sync(c, &wrong, &wrong, 1, ST_COMM_I64, ST_COMM_SUM, "wrong results"));
        wrong_total += wrong != 0;
        double algbw = (double)bytes / dt / 1e9, busbw = algbw * 2.0 * (n - 1) / n;
        if (rank == 0)
            printf("  %12zu %12zu %6d %12.1f %12.3f %12.3f %12.1f %8.2f %7lld\n", bytes, count, iters,
                   dt * 1e6, algbw, busbw, dt_mpi * 1e6, cm ? dt_mpi / dt : 0.0, (long long)wrong);
        if (bytes == max_bytes) break;
    }
    free(send);
    free(recv);
    st_comm_free(cm); /* the second one first: the first initialized MPI */
    st_comm_free(c);
    return wrong_total ? 1 : 0;
fail:
    free(send);
    free(recv);
    st_comm_abort(c, "bench_comm failed");
    st_comm_free(cm);
    st_comm_free(c);
    return 1;
}
