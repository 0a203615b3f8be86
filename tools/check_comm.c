/* The all-reduce bandwidth part of `scaletrain check`: `scaletrain check
 * --allreduce-worker [--nccl]` runs under `scaletrain launch -n N` (it is not
 * meant to be typed), all-reduces a float buffer through the communicator a
 * few times, checks every element of every result against the sum computed
 * independently, and rank 0 prints one JSON line: the best time, algorithm
 * bandwidth (bytes / time) and bus bandwidth (algbw x 2(n-1)/n, what each
 * link carries in a ring, as nccl-tests report it).
 *
 * Without --nccl: 16 MiB of host memory through MPI (the CPU ranks' path).
 * With --nccl: 64 MiB of device memory on each rank's GPU (the one a
 * training run opens, st_device_rank_ordinal) through NCCL, bootstrapped
 * over MPI: the path a run's gradients take between GPUs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "comm/comm.h"
#include "core/device.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int st_check_allreduce_worker(bool nccl) {
    enum { REPS = 5 };
    const int64_t count = nccl ? 16 << 20 : 4 << 20; /* floats: 64 MiB, 16 MiB */
    st_comm_config cc = ST_COMM_CONFIG_INIT;
    cc.backend = ST_COMM_MPI;
    cc.timeout_s = 60;
    st_comm *boot = NULL, *c = NULL;
    st_device *dev = NULL;
    float *dbuf = NULL;                               /* --nccl: the buffer on the device */
    float *buf = malloc((size_t)count * sizeof *buf); /* (count) */
    st_status s = buf ? st_comm_init(&cc, &boot) : st_fail(ST_ERR_NOMEM, "out of memory for the buffer");
    if (s == ST_OK && nccl) {
        s = st_device_open_cuda(
            st_device_rank_ordinal(st_comm_local_rank(boot), st_device_cuda_count(NULL, 0)), &dev);
        if (s == ST_OK) s = st_comm_nccl_init(boot, dev, &cc, &c);
        if (s == ST_OK) s = st_device_alloc(dev, (size_t)count * sizeof *buf, (void **)&dbuf);
    } else if (s == ST_OK) {
        c = boot;
    }
    if (s != ST_OK) {
        if (c != boot) st_comm_free(c);
        st_device_release(dev, dbuf);
        st_device_free(dev);
        st_comm_free(boot);
        free(buf);
        return st_cli_error(s);
    }
    const int rank = st_comm_rank(c), n = st_comm_size(c);
    float *io = nccl ? dbuf : buf;
    double best = INFINITY;
    long long wrong = 0;
    for (int rep = 0; rep < REPS + 1 && s == ST_OK; rep++) {
        /* rank r holds (i % 97) + r: the sum is n (i % 97) + n(n-1)/2, exact in floats */
        for (int64_t i = 0; i < count; i++)
            buf[i] = (float)(i % 97 + rank);
        if (nccl) s = st_device_upload(dev, dbuf, buf, (size_t)count * sizeof *buf);
        if (s == ST_OK && nccl) s = st_device_sync(dev);
        if (s == ST_OK) s = st_comm_barrier_sync(boot, "allreduce test");
        const double t0 = now_s();
        if (s == ST_OK)
            s = st_comm_all_reduce_sync(c, io, io, (size_t)count, ST_COMM_F32, ST_COMM_SUM, "allreduce test");
        const double dt = now_s() - t0;
        if (rep > 0 && dt < best) best = dt; /* the first is warm-up */
        if (s == ST_OK && nccl) s = st_device_download(dev, buf, dbuf, (size_t)count * sizeof *buf);
        for (int64_t i = 0; i < count && s == ST_OK; i++)
            wrong += buf[i] != (float)(n * (i % 97) + n * (n - 1) / 2);
    }
    /* the slowest rank's best time, and every rank's errors (over MPI: host values) */
    float t = (float)best, w = (float)wrong;
    if (s == ST_OK) s = st_comm_all_reduce_sync(boot, &t, &t, 1, ST_COMM_F32, ST_COMM_MAX, "allreduce time");
    if (s == ST_OK)
        s = st_comm_all_reduce_sync(boot, &w, &w, 1, ST_COMM_F32, ST_COMM_SUM, "allreduce errors");
    if (s == ST_OK && rank == 0) {
        const double bytes = (double)count * sizeof(float), algbw = bytes / t / 1e9;
        printf("{\"ranks\":%d,\"backend\":\"%s\",\"bytes\":%.0f,\"ms\":%.3f,\"algbw_gbs\":%.3f,\"busbw_gbs\":"
               "%.3f,"
               "\"wrong\":%.0f}\n",
               n, st_comm_backend_name(c), bytes, 1e3 * t, algbw, algbw * 2.0 * (n - 1) / n, w);
    }
    if (c != boot) st_comm_free(c);
    st_device_release(dev, dbuf);
    st_device_free(dev);
    st_comm_free(boot);
    free(buf);
    if (s != ST_OK) return st_cli_error(s);
    return w == 0 ? ST_EXIT_OK : ST_EXIT_FAIL;
}
