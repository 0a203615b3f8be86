/* The all-reduce bandwidth part of `scaletrain check`: `scaletrain check
 * --allreduce-worker` runs under `scaletrain launch -n 2` (it is not meant to
 * be typed), all-reduces a 16 MiB float buffer through the communicator a
 * few times, checks every element of every result against the sum computed
 * independently, and rank 0 prints one JSON line: the best time, algorithm
 * bandwidth (bytes / time) and bus bandwidth (algbw x 2(n-1)/n, what each
 * link carries in a ring, as nccl-tests report it). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "comm/comm.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int st_check_allreduce_worker(void) {
    enum { COUNT = 4 << 20, REPS = 5 };
    st_comm_config cc = ST_COMM_CONFIG_INIT;
    cc.backend = ST_COMM_MPI;
    cc.timeout_s = 60;
    st_comm *c = NULL;
    float *buf = malloc((size_t)COUNT * sizeof *buf); /* (COUNT) */
    st_status s = buf ? st_comm_init(&cc, &c) : st_fail(ST_ERR_NOMEM, "out of memory for 16 MiB");
    if (s != ST_OK) {
        free(buf);
        return st_cli_error(s);
    }
    const int rank = st_comm_rank(c), n = st_comm_size(c);
    double best = INFINITY;
    long long wrong = 0;
    for (int rep = 0; rep < REPS + 1 && s == ST_OK; rep++) {
        /* rank r holds (i % 97) + r: the sum is n (i % 97) + n(n-1)/2, exact in floats */
        for (int64_t i = 0; i < COUNT; i++)
            buf[i] = (float)(i % 97 + rank);
        s = st_comm_barrier_sync(c, "allreduce test");
        const double t0 = now_s();
        if (s == ST_OK)
            s = st_comm_all_reduce_sync(c, buf, buf, COUNT, ST_COMM_F32, ST_COMM_SUM, "allreduce test");
        const double dt = now_s() - t0;
        if (rep > 0 && dt < best) best = dt; /* the first is warm-up */
        for (int64_t i = 0; i < COUNT && s == ST_OK; i++)
            wrong += buf[i] != (float)(n * (i % 97) + n * (n - 1) / 2);
    }
    /* the slowest rank's best time, and every rank's errors */
    float t = (float)best, w = (float)wrong;
    if (s == ST_OK) s = st_comm_all_reduce_sync(c, &t, &t, 1, ST_COMM_F32, ST_COMM_MAX, "allreduce time");
    if (s == ST_OK) s = st_comm_all_reduce_sync(c, &w, &w, 1, ST_COMM_F32, ST_COMM_SUM, "allreduce errors");
    if (s == ST_OK && rank == 0) {
        const double bytes = (double)COUNT * sizeof(float), algbw = bytes / t / 1e9;
        printf("{\"ranks\":%d,\"bytes\":%.0f,\"ms\":%.3f,\"algbw_gbs\":%.3f,\"busbw_gbs\":%.3f,\"wrong\":%."
               "0f}\n",
               n, bytes, 1e3 * t, algbw, algbw * 2.0 * (n - 1) / n, w);
    }
    st_comm_free(c);
    free(buf);
    if (s != ST_OK) return st_cli_error(s);
    return w == 0 ? ST_EXIT_OK : ST_EXIT_FAIL;
}
