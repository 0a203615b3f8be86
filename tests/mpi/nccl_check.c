/* The NCCL communicator (src/cuda/comm_nccl.cu) between the GPUs of several
 * ranks, under mpirun (tests/e2e/emu_nccl.sh runs it on 2 ranks of the CUDA
 * emulator, tests/cudaemu/, with ST_CUDAEMU_DEVICES=2; tests/e2e/nccl_ddp.sh
 * on real GPUs). Rank r contributes values each rank can compute on its own
 * (small dyadic numbers, so sums are exact whatever the order), and every
 * result is compared, into receive buffers poisoned with NaN first:
 * all-reduce sum, avg, max and min (float32), sum of bfloat16 and float16
 * (reduced in float32), int64 sum; reduce-scatter; all-gather out of place
 * and in place; broadcast and reduce from the last rank; all-to-all;
 * barrier; an all-reduce queued right after a fill on the compute
 * stream, with no host wait between, must see the fill on every rank; and
 * 1500 reduces in flight at once, more than the pending limit.
 * `nccl_check same-device`: two ranks on one GPU are refused on every rank.
 * Skips (77, saying why) without a CUDA+NCCL build or a device per rank. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "../check.h"
#include "comm/comm.h"
#include "core/device.h"
#include "core/half.h"

enum { N = 4099 }; /* not a multiple of anything NCCL likes */

static int R, W; /* this rank, world size */

static float val(int r, size_t i) { return (float)(i % 97) * 0.25f + (float)(8 * r); }

static void *dev_poisoned(st_device *d, size_t nbytes) {
    void *p = NULL;
    CHECK_OK(st_device_alloc(d, nbytes, &p));
    if (p) CHECK_OK(st_device_fill_f32(d, p, nbytes / 4, NAN));
    return p;
}

/* Elements of got (n) that are not want(i) (NaN never equals). */
static int wrong(const float *got, size_t n, float (*want)(size_t)) {
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += !(got[i] == want(i));
    return bad;
}

static float sum_at(size_t i) {
    float s = 0;
    for (int r = 0; r < W; r++)
        s += val(r, i);
    return s;
}
static float max_at(size_t i) { return val(W - 1, i); }
static float min_at(size_t i) { return val(0, i); }
static float last_at(size_t i) { return val(W - 1, i); }
static float gathered_at(size_t i) { return val((int)(i / N), i % N); }
/* reduce-scatter: rank r's send holds W blocks, block b = val(r, b * N + i); this rank gets block R summed */
static float scattered_at(size_t i) { return sum_at((size_t)R * N + i); }
/* all-to-all: rank r sends val(r, j * N + i) as block j; this rank receives block r = val(r, R * N + i) */
static float swapped_at(size_t i) { return val((int)(i / N), (size_t)R * N + i % N); }

static void reductions(st_comm *nc, st_device *d, float *h, float *dx, float *dy) {
    for (size_t i = 0; i < N; i++)
        h[i] = val(R, i);
    CHECK_OK(st_device_upload(d, dx, h, N * 4));
    static const struct {
        st_comm_redop op;
        const char *name;
        float (*want)(size_t);
    } ops[] = {{ST_COMM_SUM, "sum", sum_at}, {ST_COMM_MAX, "max", max_at}, {ST_COMM_MIN, "min", min_at}};
    for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
        CHECK_OK(st_device_fill_f32(d, dy, N, NAN));
        CHECK_OK(st_comm_all_reduce_sync(nc, dx, dy, N, ST_COMM_F32, ops[k].op, ops[k].name));
        CHECK_OK(st_device_download(d, h, dy, N * 4));
        CHECK(wrong(h, N, ops[k].want) == 0, "rank %d: all-reduce %s: %d of %d wrong", R, ops[k].name,
              wrong(h, N, ops[k].want), N);
    }
    CHECK_OK(st_comm_all_reduce_sync(nc, dx, dy, N, ST_COMM_F32, ST_COMM_AVG, "avg"));
    CHECK_OK(st_device_download(d, h, dy, N * 4));
    int bad = 0;
    for (size_t i = 0; i < N; i++)
        bad += !(fabs(h[i] - sum_at(i) / W) <= 1e-6 * fabs(sum_at(i) / W));
    CHECK(bad == 0, "rank %d: all-reduce avg: %d of %d wrong", R, bad, N);

    /* 16-bit floats: small integers and halves, exact in both and in their sums */
    uint16_t *b = malloc(N * 2);
    for (int k = 0; k < 2 && b; k++) {
        for (size_t i = 0; i < N; i++) {
            const float v = (float)(i % 61) * (k ? 0.5f : 1.0f) + (float)R;
            b[i] = k ? st_f32_to_f16(v) : st_f32_to_bf16(v);
        }
        CHECK_OK(st_device_upload(d, dx, b, N * 2));
        CHECK_OK(st_comm_all_reduce_sync(nc, dx, dy, N, k ? ST_COMM_F16 : ST_COMM_BF16, ST_COMM_SUM,
                                         "16-bit sum"));
        CHECK_OK(st_device_download(d, b, dy, N * 2));
        bad = 0;
        for (size_t i = 0; i < N; i++) {
            const float want = (float)W * (float)(i % 61) * (k ? 0.5f : 1.0f) + (float)(W * (W - 1) / 2);
            bad += !((k ? st_f16_to_f32(b[i]) : st_bf16_to_f32(b[i])) == want);
        }
        CHECK(bad == 0, "rank %d: %s all-reduce: %d of %d wrong", R, k ? "float16" : "bfloat16", bad, N);
    }
    free(b);
    int64_t iv[N / 2];
    for (size_t i = 0; i < N / 2; i++)
        iv[i] = (int64_t)i * 1000000007LL + R;
    CHECK_OK(st_device_upload(d, dx, iv, sizeof iv));
    CHECK_OK(st_comm_all_reduce_sync(nc, dx, dy, N / 2, ST_COMM_I64, ST_COMM_SUM, "int64 sum"));
    CHECK_OK(st_device_download(d, iv, dy, sizeof iv));
    bad = 0;
    for (size_t i = 0; i < N / 2; i++)
        bad += iv[i] != (int64_t)i * 1000000007LL * W + W * (W - 1) / 2;
    CHECK(bad == 0, "rank %d: int64 all-reduce: %d of %d wrong", R, bad, N / 2);
}

static void movements(st_comm *nc, st_device *d, float *h, float *big_h, float *dx, float *big, float *big2) {
    st_comm_req *r = NULL;
    const size_t all = (size_t)W * N;
    for (size_t i = 0; i < all; i++)
        big_h[i] = val(R, i);
    CHECK_OK(st_device_upload(d, big, big_h, all * 4));
    CHECK_OK(st_device_fill_f32(d, dx, N, NAN));
    CHECK_OK(st_comm_reduce_scatter(nc, big, dx, N, ST_COMM_F32, ST_COMM_SUM, "reduce-scatter", &r));
    CHECK_OK(st_comm_wait(&r));
    CHECK_OK(st_device_download(d, h, dx, N * 4));
    CHECK(wrong(h, N, scattered_at) == 0, "rank %d: reduce-scatter: %d of %d wrong", R,
          wrong(h, N, scattered_at), N);

    for (size_t i = 0; i < N; i++)
        h[i] = val(R, i);
    CHECK_OK(st_device_upload(d, dx, h, N * 4));
    CHECK_OK(st_device_fill_f32(d, big2, all, NAN));
    CHECK_OK(st_comm_all_gather(nc, dx, big2, N, ST_COMM_F32, "all-gather", &r));
    CHECK_OK(st_comm_wait(&r));
    CHECK_OK(st_device_download(d, big_h, big2, all * 4));
    CHECK(wrong(big_h, all, gathered_at) == 0, "rank %d: all-gather: %d wrong", R,
          wrong(big_h, all, gathered_at));
    CHECK_OK(st_device_fill_f32(d, big2, all, NAN)); /* in place: this rank's block first */
    CHECK_OK(st_device_upload(d, big2 + (size_t)R * N, h, N * 4));
    CHECK_OK(st_comm_all_gather(nc, big2 + (size_t)R * N, big2, N, ST_COMM_F32, "all-gather in place", &r));
    CHECK_OK(st_comm_wait(&r));
    CHECK_OK(st_device_download(d, big_h, big2, all * 4));
    CHECK(wrong(big_h, all, gathered_at) == 0, "rank %d: in-place all-gather: %d wrong", R,
          wrong(big_h, all, gathered_at));

    CHECK_OK(st_comm_broadcast_sync(nc, dx, N, ST_COMM_F32, W - 1, "broadcast from the last rank"));
    CHECK_OK(st_device_download(d, h, dx, N * 4));
    CHECK(wrong(h, N, last_at) == 0, "rank %d: broadcast: %d of %d wrong", R, wrong(h, N, last_at), N);

    for (size_t i = 0; i < N; i++)
        h[i] = val(R, i);
    CHECK_OK(st_device_upload(d, dx, h, N * 4));
    CHECK_OK(st_device_fill_f32(d, big2, N, NAN));
    CHECK_OK(st_comm_reduce(nc, dx, big2, N, ST_COMM_F32, ST_COMM_SUM, W - 1, "reduce to the last rank", &r));
    CHECK_OK(st_comm_wait(&r));
    CHECK_OK(st_device_download(d, h, big2, N * 4));
    if (R == W - 1)
        CHECK(wrong(h, N, sum_at) == 0, "rank %d: reduce: %d of %d wrong", R, wrong(h, N, sum_at), N);
    else
        CHECK(isnan(h[0]) && isnan(h[N - 1]), "rank %d: reduce wrote into a non-root's buffer", R);

    for (size_t i = 0; i < all; i++)
        big_h[i] = val(R, i);
    CHECK_OK(st_device_upload(d, big, big_h, all * 4));
    CHECK_OK(st_device_fill_f32(d, big2, all, NAN));
    CHECK_OK(st_comm_all_to_all(nc, big, big2, N, ST_COMM_F32, "all-to-all", &r));
    CHECK_OK(st_comm_wait(&r));
    CHECK_OK(st_device_download(d, big_h, big2, all * 4));
    CHECK(wrong(big_h, all, swapped_at) == 0, "rank %d: all-to-all: %d wrong", R,
          wrong(big_h, all, swapped_at));
}

/* A fill queued on the compute stream and not waited for: the all-reduce
 * on the communication stream must see it (comm_nccl.cu's event order). */
static float fill_sum(size_t i) { return 3.5f * (float)W; }
static void ordering(st_comm *nc, st_device *d, float *h, float *dx, float *dy) {
    st_comm_req *r = NULL;
    CHECK_OK(st_device_fill_f32(d, dx, N, 3.5f));
    CHECK_OK(st_comm_all_reduce(nc, dx, dy, N, ST_COMM_F32, ST_COMM_SUM, "after a fill", &r));
    bool done = false;
    while (!done && st_test_failures == 0)
        CHECK_OK(st_comm_test(&r, &done));
    CHECK_OK(st_device_download(d, h, dy, N * 4));
    CHECK(wrong(h, N, fill_sum) == 0,
          "rank %d: the all-reduce ran before the fill it follows: %d of %d wrong", R, wrong(h, N, fill_sum),
          N);
    CHECK_OK(st_comm_barrier_sync(nc, "barrier"));
}

/* More collectives in flight than the communicator keeps unfinished (1024),
 * as ZeRO-2 on many ranks posts: a reduce of each 5-float piece of `big` to
 * rank k % W, waited for newest first. The oldest are finished to make room. */
static void many(st_comm *nc, st_device *d, float *big_h, float *big) {
    enum { K = 1500, M = 5 };
    const size_t all = (size_t)W * N;
    if (all < (size_t)K * M) return; /* (W >= 2 gives 8198) */
    st_comm_req **r = calloc(K, sizeof *r);
    if (!r) return;
    for (size_t i = 0; i < all; i++)
        big_h[i] = val(R, i);
    CHECK_OK(st_device_upload(d, big, big_h, all * 4));
    for (int k = 0; k < K; k++) {
        char name[32];
        snprintf(name, sizeof name, "piece %d", k);
        CHECK_OK(st_comm_reduce(nc, big + (size_t)k * M, big + (size_t)k * M, M, ST_COMM_F32, ST_COMM_SUM,
                                k % W, name, &r[k]));
    }
    for (int k = K - 1; k >= 0; k--)
        CHECK_OK(st_comm_wait(&r[k]));
    CHECK_OK(st_device_download(d, big_h, big, all * 4));
    int bad = 0;
    for (int k = 0; k < K; k++)
        for (size_t i = (size_t)k * M; k % W == R && i < (size_t)(k + 1) * M; i++)
            bad += !(big_h[i] == sum_at(i));
    CHECK(bad == 0, "rank %d: %d of the reduced pieces' elements wrong, %d collectives in flight", R, bad, K);
    free(r);
}

/* `nccl_check same-device`: every rank on device 0 of its node. NCCL refuses
 * two ranks on one GPU (ncclInvalidUsage, "Duplicate GPU detected"): the
 * start-up fails on every rank with the reason, and no rank waits for the
 * others (the agreement after ncclCommInitRankConfig). */
static int same_device(st_comm *boot, st_comm_config *cc) {
    st_device *d = NULL;
    st_comm *nc = NULL;
    CHECK_OK(st_device_open_cuda(0, &d));
    if (d) CHECK_FAILS(st_comm_nccl_init(boot, d, cc, &nc), ST_ERR_IO, "one GPU per rank");
    CHECK(nc == NULL, "rank %d: a communicator came out of a refusal", R);
    if (R == 0 && !st_test_failures)
        printf("nccl_check: %d ranks on one device refused: %s\n", W, st_last_error());
    st_device_free(d);
    st_comm_free(boot);
    return st_test_finish("nccl_check same-device");
}

int main(int argc, char **argv) {
    st_comm_config cc = ST_COMM_CONFIG_INIT;
    cc.backend = ST_COMM_MPI;
    cc.timeout_s = 60;
    st_comm *boot = NULL;
    if (st_comm_init(&cc, &boot) != ST_OK) {
        fprintf(stderr, "nccl_check: %s\n", st_last_error());
        return 1;
    }
    R = st_comm_rank(boot);
    W = st_comm_size(boot);
    char why[256];
    const int n = st_device_cuda_count(why, sizeof why);
    const char *skip = !st_comm_nccl_built() ? "this build has no NCCL communicator"
                       : n < st_comm_local_size(boot)
                           ? "fewer CUDA devices than ranks on this node (NCCL needs one each; the emulator: "
                             "ST_CUDAEMU_DEVICES)"
                           : NULL;
    if (argc > 1 && strcmp(argv[1], "same-device") == 0 && st_comm_nccl_built() && n > 0)
        return same_device(boot, &cc);
    if (skip) {
        st_comm_free(boot);
        return st_test_skip("nccl_check", skip);
    }
    st_device *d = NULL;
    st_comm *nc = NULL;
    CHECK_OK(st_device_open_cuda(st_comm_local_rank(boot), &d));
    if (d) CHECK_OK(st_comm_nccl_init(boot, d, &cc, &nc));
    if (nc) {
        CHECK(st_comm_rank(nc) == R && st_comm_size(nc) == W, "NCCL rank %d of %d, MPI rank %d of %d",
              st_comm_rank(nc), st_comm_size(nc), R, W);
        const size_t all = (size_t)W * N;
        float *h = malloc(N * 4), *big_h = malloc(all * 4);
        float *dx = dev_poisoned(d, N * 4), *dy = dev_poisoned(d, N * 4);
        float *big = dev_poisoned(d, all * 4), *big2 = dev_poisoned(d, all * 4);
        if (h && big_h && dx && dy && big && big2) {
            reductions(nc, d, h, dx, dy);
            movements(nc, d, h, big_h, dx, big, big2);
            ordering(nc, d, h, dx, dy);
            many(nc, d, big_h, big);
        }
        st_comm_free(nc);
        st_device_release(d, dx);
        st_device_release(d, dy);
        st_device_release(d, big);
        st_device_release(d, big2);
        free(h);
        free(big_h);
    }
    st_device_free(d);
    st_comm_free(boot);
    if (R == 0 && !st_test_failures)
        printf("nccl_check: %d ranks: every collective gave the expected values\n", W);
    return st_test_finish("nccl_check");
}
