/* The NCCL communicator (src/cuda/comm_nccl.cu) on this process's GPU, one
 * rank (world size 1, started over the local communicator):
 *   - all-reduce (sum, avg; float32, bfloat16, float16, float64, int64),
 *     reduce-scatter, all-gather (out of place and in place), broadcast,
 *     reduce, all-to-all and barrier give exactly the expected values, into
 *     receive buffers poisoned with NaN first;
 *   - a collective reads what the compute stream wrote just before it, with
 *     no host wait in between (the event ordering);
 *   - a host pointer is refused with a message that says why; st_comm_abort
 *     (ncclCommAbort) leaves a communicator that refuses further work;
 *   - the trainer with dist.comm nccl (DDP's gradient buckets all-reduced
 *     through NCCL on the communication stream during backward, the
 *     parameters broadcast through it) against the plain single-GPU run:
 *     the same losses and the same bits of every weight after 8 steps (one
 *     rank's average is the gradient itself, so nothing may differ); and
 *     the same under dist.strategy zero1 and zero2 (one rank's shard is the
 *     whole arena, padded on the device), and under zero1 with the
 *     optimizer offloaded to the host (optim.offload);
 *   - on a GPU with 18 GiB free, collectives of more than INT_MAX elements.
 * On every machine first: a missing device, or dist.comm nccl on the CPU, is
 * refused with the reason (and, in a build without NCCL, the communicator
 * itself). Then skips, saying why, without a GPU or NCCL (`--built`:
 * exit 0 when the build has NCCL, for scripts). CP_SMALL set (the memcheck
 * run of scripts/gpu-session.sh) leaves out the training. Two or more
 * ranks need a GPU each (NCCL refuses two ranks on one GPU):
 * tests/e2e/nccl_ddp.sh runs them where there are enough, and
 * tests/e2e/emu_nccl.sh on two devices of the CUDA emulator. */
#include <stdint.h>
#include <unistd.h>

#include <signal.h>
#include <sys/wait.h>

#include "comm/comm.h"
#include "core/device.h"
#include "core/half.h"
#include "train_fixture.h"

enum { N = 4099 }; /* not a multiple of anything NCCL likes */

static char root[] = "/tmp/test_cuda_nccl.XXXXXX";

static void remove_root(void) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
}

/* Device buffer of `nbytes` poisoned with NaN (0xff bytes for other types). */
static void *dev_poisoned(st_device *d, size_t nbytes) {
    void *p = NULL;
    CHECK_OK(st_device_alloc(d, nbytes, &p));
    if (p) CHECK_OK(st_device_fill_f32(d, p, nbytes / 4, NAN));
    return p;
}

static int count_diff_f32(const float *a, const float *b, size_t n) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += !(a[i] == b[i]);
    return bad;
}

static void collectives(st_comm *nc, st_device *d) {
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    for (int i = 0; i < N; i++) x[i] = (float)i * 0.37f - 512.25f;
    float *dx = dev_poisoned(d, N * 4), *dy = dev_poisoned(d, N * 4);
    if (!dx || !dy) return;
    CHECK_OK(st_device_upload(d, dx, x, N * 4));

    static const struct {
        st_comm_redop op;
        const char *name;
    } ops[] = {{ST_COMM_SUM, "sum"}, {ST_COMM_AVG, "avg"}, {ST_COMM_MIN, "min"}, {ST_COMM_MAX, "max"}};
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) { /* one rank: every reduction is the value */
        CHECK_OK(st_device_fill_f32(d, dy, N, NAN));
        CHECK_OK(st_comm_all_reduce_sync(nc, dx, dy, N, ST_COMM_F32, ops[k].op, ops[k].name));
        CHECK_OK(st_device_download(d, y, dy, N * 4));
        CHECK(count_diff_f32(y, x, N) == 0, "all-reduce %s: %d elements differ", ops[k].name,
              count_diff_f32(y, x, N));
    }
    st_comm_req *r = NULL;
    CHECK_OK(st_device_fill_f32(d, dy, N, NAN));
    CHECK_OK(st_comm_reduce_scatter(nc, dx, dy, N, ST_COMM_F32, ST_COMM_AVG, "reduce-scatter", &r));
    CHECK_OK(st_comm_wait(&r));
    CHECK_OK(st_device_download(d, y, dy, N * 4));
    CHECK(count_diff_f32(y, x, N) == 0, "reduce-scatter: %d elements differ", count_diff_f32(y, x, N));

    CHECK_OK(st_device_fill_f32(d, dy, N, NAN));
    CHECK_OK(st_comm_all_gather(nc, dx, dy, N, ST_COMM_F32, "all-gather", &r));
    CHECK_OK(st_comm_wait(&r));
    CHECK_OK(st_device_download(d, y, dy, N * 4));
    CHECK(count_diff_f32(y, x, N) == 0, "all-gather: %d elements differ", count_diff_f32(y, x, N));

    CHECK_OK(st_comm_all_gather(nc, dx, dx, N, ST_COMM_F32, "all-gather in place", &r)); /* rank 0: send == recv */
    CHECK_OK(st_comm_wait(&r));
    CHECK_OK(st_comm_broadcast_sync(nc, dx, N, ST_COMM_F32, 0, "broadcast"));
    CHECK_OK(st_device_download(d, y, dx, N * 4));
    CHECK(count_diff_f32(y, x, N) == 0, "in-place all-gather, broadcast: %d elements differ", count_diff_f32(y, x, N));

    CHECK_OK(st_device_fill_f32(d, dy, N, NAN));
    CHECK_OK(st_comm_reduce(nc, dx, dy, N, ST_COMM_F32, ST_COMM_SUM, 0, "reduce", &r));
    CHECK_OK(st_comm_wait(&r));
    CHECK_OK(st_device_download(d, y, dy, N * 4));
    CHECK(count_diff_f32(y, x, N) == 0, "reduce: %d elements differ", count_diff_f32(y, x, N));

    CHECK_OK(st_device_fill_f32(d, dy, N, NAN));
    CHECK_OK(st_comm_all_to_all(nc, dx, dy, N, ST_COMM_F32, "all-to-all", &r));
    CHECK_OK(st_comm_wait(&r));
    CHECK_OK(st_device_download(d, y, dy, N * 4));
    CHECK(count_diff_f32(y, x, N) == 0, "all-to-all: %d elements differ", count_diff_f32(y, x, N));

    /* Ordering: the fill is queued on the compute stream and not waited for;
     * the all-reduce on the communication stream must see it. */
    CHECK_OK(st_device_fill_f32(d, dx, N, 3.5f));
    CHECK_OK(st_comm_all_reduce(nc, dx, dy, N, ST_COMM_F32, ST_COMM_SUM, "after a fill", &r));
    bool done = false;
    while (!done && st_test_failures == 0) CHECK_OK(st_comm_test(&r, &done)); /* test drives it to the end */
    CHECK_OK(st_device_download(d, y, dy, N * 4));
    int wrong = 0;
    for (int i = 0; i < N; i++) wrong += !(y[i] == 3.5f);
    CHECK(wrong == 0, "the all-reduce ran before the fill it follows: %d of %d elements are not 3.5", wrong, N);

    /* 16-bit floats (their bits), float64 and int64: the same bits back. */
    uint16_t *h = malloc(N * 2), *h2 = malloc(N * 2);
    for (int i = 0; i < N; i++) h[i] = st_f32_to_bf16(x[i]);
    const st_comm_dtype hts[] = {ST_COMM_BF16, ST_COMM_F16};
    for (int k = 0; k < 2; k++) {
        if (k == 1)
            for (int i = 0; i < N; i++) h[i] = st_f32_to_f16(x[i] / 64);
        CHECK_OK(st_device_upload(d, dx, h, N * 2));
        CHECK_OK(st_device_fill_f32(d, dy, N, NAN));
        CHECK_OK(st_comm_all_reduce_sync(nc, dx, dy, N, hts[k], ST_COMM_SUM, "16-bit sum"));
        CHECK_OK(st_device_download(d, h2, dy, N * 2));
        CHECK(memcmp(h, h2, N * 2) == 0, "%s all-reduce changed the bits", k ? "float16" : "bfloat16");
    }
    double dv[N / 2];
    int64_t iv[N / 2];
    for (int i = 0; i < N / 2; i++) dv[i] = 1e300 / (i + 1), iv[i] = (int64_t)i * 1000000007LL - 3;
    double dv2[N / 2];
    int64_t iv2[N / 2];
    CHECK_OK(st_device_upload(d, dx, dv, sizeof dv));
    CHECK_OK(st_comm_all_reduce_sync(nc, dx, dy, N / 2, ST_COMM_F64, ST_COMM_SUM, "float64 sum"));
    CHECK_OK(st_device_download(d, dv2, dy, sizeof dv2));
    CHECK(memcmp(dv, dv2, sizeof dv) == 0, "float64 all-reduce changed the values");
    CHECK_OK(st_device_upload(d, dx, iv, sizeof iv));
    CHECK_OK(st_comm_all_reduce_sync(nc, dx, dy, N / 2, ST_COMM_I64, ST_COMM_MAX, "int64 max"));
    CHECK_OK(st_device_download(d, iv2, dy, sizeof iv2));
    CHECK(memcmp(iv, iv2, sizeof iv) == 0, "int64 all-reduce changed the values");

    CHECK_OK(st_comm_barrier_sync(nc, "barrier"));
    CHECK(st_comm_seq(nc) > 10, "sequence numbers: %llu", (unsigned long long)st_comm_seq(nc));
    CHECK(strcmp(st_comm_backend_name(nc), "nccl") == 0, "backend %s", st_comm_backend_name(nc));
    free(h);
    free(h2);
    free(x);
    free(y);
    st_device_release(d, dx);
    st_device_release(d, dy);
}

/* More than INT_MAX elements in one collective (a ZeRO shard of a
 * 5B-parameter model over 2 GPUs): NCCL's counts are size_t, and the front
 * passes them on whole (MPI's are refused). An all-reduce and a
 * reduce-scatter of 2^31 + 1024 floats into buffers poisoned with NaN: the
 * first and last 4096 elements checked. On a GPU with 18 GiB free (the
 * emulator's NCCL works through MPI's int counts: not there). */
static void large_count(st_comm *nc, st_device *d) {
#ifdef ST_CUDA_EMU
    printf("large counts: skipped: the emulator's NCCL goes through MPI's int counts\n");
#else
    const size_t n = ((size_t)1 << 31) + 1024, edge = 4096;
    st_device_mem m;
    CHECK_OK(st_device_memory(d, &m));
    if (m.total - m.used < ((int64_t)18 << 30)) {
        printf("large counts: skipped: %.1f GiB free on the GPU, 18 needed\n",
               (double)(m.total - m.used) / (1 << 30));
        return;
    }
    float *dx = NULL, *dy = NULL, *h = malloc(edge * sizeof *h);
    CHECK_OK(st_device_alloc(d, n * 4, (void **)&dx));
    CHECK_OK(st_device_alloc(d, n * 4, (void **)&dy));
    if (dx && dy && h) {
        CHECK_OK(st_device_fill_f32(d, dx, n, 1.5f));
        for (int k = 0; k < 2; k++) {
            CHECK_OK(st_device_fill_f32(d, dy, n, NAN));
            st_comm_req *r = NULL;
            if (k == 0)
                CHECK_OK(st_comm_all_reduce_sync(nc, dx, dy, n, ST_COMM_F32, ST_COMM_SUM,
                                                 "2^31 + 1024 all-reduce"));
            else
                CHECK_OK(st_comm_reduce_scatter(nc, dx, dy, n, ST_COMM_F32, ST_COMM_SUM,
                                                "2^31 + 1024 reduce-scatter", &r));
            if (r) CHECK_OK(st_comm_wait(&r));
            for (int end = 0; end < 2; end++) {
                CHECK_OK(st_device_download(d, h, dy + (end ? n - edge : 0), edge * 4));
                int wrong = 0;
                for (size_t i = 0; i < edge; i++)
                    wrong += !(h[i] == 1.5f);
                CHECK(wrong == 0, "%s of 2^31 + 1024 floats: %d of the %s %zu elements are not 1.5",
                      k ? "reduce-scatter" : "all-reduce", wrong, end ? "last" : "first", edge);
            }
        }
        printf("large counts: an all-reduce and a reduce-scatter of 2^31 + 1024 floats\n");
    }
    free(h);
    if (dx) st_device_release(d, dx);
    if (dy) st_device_release(d, dy);
#endif
}

/* A host buffer and an abort, each on a communicator of its own (a failure
 * breaks the communicator for good). */
static void refusals(st_comm *boot, st_device *d) {
    st_comm *nc = NULL;
    float host[16] = {0};
    CHECK_OK(st_comm_nccl_init(boot, d, NULL, &nc));
    if (!nc) return;
    CHECK_FAILS(st_comm_all_reduce_sync(nc, host, host, 16, ST_COMM_F32, ST_COMM_SUM, "host buffer"), ST_ERR_ARG,
                "device pointers");
    CHECK(strstr(st_last_error(), "rank 0 of 1 (host ") != NULL, "the error names the rank and host: %s",
          st_last_error());
    st_comm_free(nc);
    CHECK_OK(st_comm_nccl_init(boot, d, NULL, &nc));
    if (!nc) return;
    st_comm_abort(nc, "a test of the abort");
    CHECK_FAILS(st_comm_barrier_sync(nc, "after abort"), ST_ERR_INTERNAL, "a test of the abort");
    st_comm_free(nc);
}

#ifdef ST_CUDA_EMU
#include "cudaemu/selftest.h"
/* A peer lost in a collective (the emulator's st_emu_nccl_lose_next: NCCL's
 * asynchronous error, and its kernel on the stream until an abort): the
 * collective fails naming it, and the clean-up after it, which frees device
 * memory and so waits for the device, ends: the failed communicator was
 * aborted at once. Before, the abort came only with st_comm_free, after the
 * frees, which waited for good. In a child, under an alarm: a hang fails. */
static void lost_peer(st_comm *boot) {
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        alarm(30);
        st_device *d = NULL;
        st_comm *nc = NULL;
        float *buf = NULL;
        if (st_device_open_cuda(0, &d) != ST_OK || st_comm_nccl_init(boot, d, NULL, &nc) != ST_OK ||
            st_device_alloc(d, 64 * sizeof(float), (void **)&buf) != ST_OK)
            _exit(3);
        st_emu_nccl_lose_next();
        const st_status s = st_comm_all_reduce_sync(nc, buf, buf, 64, ST_COMM_F32, ST_COMM_SUM, "lost peer");
        if (s != ST_ERR_IO || !strstr(st_last_error(), "another rank may have died")) {
            fprintf(stderr, "lost peer: status %d: %s\n", (int)s, st_last_error());
            _exit(4);
        }
        st_device_release(d, buf); /* (waits for the device: the lost collective's end) */
        st_comm_free(nc);
        st_device_free(d);
        _exit(0);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid, "lost peer: the child did not run");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "lost peer: the clean-up after the failed collective %s (status %d)",
          WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM ? "hung (30 s)" : "failed",
          WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status));
    if (!st_test_failures)
        printf("ok a peer lost in a collective: its error named, the clean-up after it ends\n");
}
#endif

/* The trainer on the GPU, with and without NCCL's buckets: the same bits. */
static void training(void) {
    st_config c;
    st_run_result plain, nccl;
    const char *extra[] = {"train.steps=8", "train.device=cuda", "optim.type=adamw", "optim.grad_clip=1.0",
                           "dist.bucket_cap_mb=0.002", NULL};
    CHECK_OK(tf_config(&c, root, "plain", extra));
    CHECK_OK(tf_train(&c, NULL, &plain));
    CHECK_OK(tf_config(&c, root, "nccl", extra));
    CHECK_OK(st_config_set(&c, "dist.comm=nccl"));
    CHECK_OK(tf_train(&c, NULL, &nccl));
    if (st_test_failures) return;
    printf("losses: plain %.9g -> %.9g, through NCCL %.9g -> %.9g\n", plain.first_loss, plain.train_loss,
           nccl.first_loss, nccl.train_loss);
    CHECK(nccl.steps == 8 && nccl.train_loss < nccl.first_loss, "the NCCL run learns: %g -> %g", nccl.first_loss,
          nccl.train_loss);
    CHECK(nccl.first_loss == plain.first_loss && nccl.train_loss == plain.train_loss &&
              nccl.eval_loss == plain.eval_loss,
          "losses differ: first %.9g vs %.9g, last %.9g vs %.9g, eval %.9g vs %.9g", nccl.first_loss,
          plain.first_loss, nccl.train_loss, plain.train_loss, nccl.eval_loss, plain.eval_loss);
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/nccl/model.safetensors", root);
    snprintf(b, sizeof b, "%s/plain/model.safetensors", root);
    tf_compare_weights("nccl vs plain", a, b, 0, 0); /* exactly: every difference fails */
    /* ZeRO through NCCL on one rank: the arenas padded to a whole shard on
     * the device, each bucket reduced to its owner (itself), the norm over
     * the shard, the update over the shard, the all-gather in place: one
     * rank's shard is the whole arena, so again the same bits; and with the
     * optimizer offloaded to the host (its AdamW is the fused kernel's float
     * for float). */
    const char *variants[][2] = {{"zero1", NULL}, {"zero2", NULL}, {"zero1", "optim.offload=true"}};
    for (int i = 0; i < 3; i++) {
        st_run_result z;
        char name[32], set[32];
        snprintf(name, sizeof name, "nccl-%s%s", variants[i][0], variants[i][1] ? "-offload" : "");
        snprintf(set, sizeof set, "dist.strategy=%s", variants[i][0]);
        CHECK_OK(tf_config(&c, root, name, extra));
        CHECK_OK(st_config_set(&c, "dist.comm=nccl"));
        CHECK_OK(st_config_set(&c, set));
        if (variants[i][1]) CHECK_OK(st_config_set(&c, variants[i][1]));
        CHECK_OK(tf_train(&c, NULL, &z));
        if (st_test_failures) return;
        CHECK(strcmp(z.strategy, variants[i][0]) == 0 && z.optim_offload == (variants[i][1] != NULL) &&
                  z.train_loss == plain.train_loss,
              "%s: %s, offload %d, last loss %.9g vs %.9g", name, z.strategy, z.optim_offload, z.train_loss,
              plain.train_loss);
        snprintf(a, sizeof a, "%s/%s/model.safetensors", root, name);
        tf_compare_weights(name, a, b, 0, 0);
    }
}

/* On any machine: what is refused, and why. */
static void refused_anywhere(st_comm *boot) {
    st_comm *nc = NULL;
    if (!st_comm_nccl_built()) {
        CHECK_FAILS(st_comm_nccl_init(boot, NULL, NULL, &nc), ST_ERR_UNSUPPORTED, "without");
        CHECK(nc == NULL, "no communicator out of a refusal");
    } else {
        CHECK_FAILS(st_comm_nccl_init(boot, NULL, NULL, &nc), ST_ERR_ARG, "the device");
    }
    st_config c;
    st_run_result r;
    const char *on_cpu[] = {"train.steps=1", "train.device=cpu", "dist.comm=nccl", NULL};
    CHECK_OK(tf_config(&c, root, "refused", on_cpu));
    CHECK_FAILS(tf_train(&c, NULL, &r), ST_ERR_CONFIG, "needs a GPU, and this rank trains on the CPU");
}

int main(int argc, char **argv) {
    char why[256];
    if (argc > 1 && strcmp(argv[1], "--built") == 0) return st_comm_nccl_built() ? 0 : 1; /* (for tests/e2e) */
    st_comm_config cc = ST_COMM_CONFIG_INIT;
    cc.backend = ST_COMM_LOCAL;
    cc.timeout_s = 120;
    st_comm *boot = NULL;
    st_device *d = NULL;
    st_comm *nc = NULL;
    CHECK_OK(st_comm_init(&cc, &boot));
    if (!mkdtemp(root)) return st_test_skip("test_cuda_nccl", "cannot create a temporary directory");
    CHECK_OK(tf_make_data(root));
    refused_anywhere(boot);
    if (st_test_failures) return st_test_finish("test_cuda_nccl");
    const char *skip = NULL;
    if (!st_comm_nccl_built())
        skip = "this build has no NCCL communicator (CUDA=0, or nccl.h not found under NCCL_HOME); its refusals "
               "were checked";
    else if (st_device_cuda_count(why, sizeof why) == 0)
        skip = why;
    if (skip) {
        st_comm_free(boot);
        remove_root();
        return st_test_skip("test_cuda_nccl", skip);
    }
    CHECK_OK(st_device_open_cuda(0, &d));
    if (boot && d) CHECK_OK(st_comm_nccl_init(boot, d, &cc, &nc));
    if (nc) {
        printf("device: %s; NCCL communicator: rank %d of %d on host %s\n", st_device_name(d), st_comm_rank(nc),
               st_comm_size(nc), st_comm_host(nc));
        collectives(nc, d);
        if (!getenv("CP_SMALL")) large_count(nc, d);
        st_comm_free(nc);
        refusals(boot, d);
#ifdef ST_CUDA_EMU
        lost_peer(boot);
#endif
    }
    st_device_free(d);
    st_comm_free(boot);
    if (getenv("CP_SMALL")) /* (compute-sanitizer's run: the trainer's kernels have their own tests) */
        printf("CP_SMALL: the training comparison is left out\n");
    else if (!st_test_failures)
        training();
    remove_root();
    return st_test_finish("test_cuda_nccl");
}
