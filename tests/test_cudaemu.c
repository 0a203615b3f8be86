/* The CUDA emulator's own checks (tests/cudaemu/README.md), each in a child
 * process that must die of SIGSEGV with the emulator's message on stderr:
 *   - host code writing through a device pointer;
 *   - host code reading through one;
 *   - a kernel (st_device_fill_f32's) writing past the end of an allocation
 *     by more than the 256-byte rounding;
 * and the same calls within bounds must run and leave the right values.
 * Then the streams' laziness (ST_CUDAEMU_LAZY, the default): a copy into
 * pinned memory has not happened before the host waits for it; an event's
 * first query says not ready and a second one runs the work; a read on the
 * compute stream that does not wait for the copy stream's write sees the old
 * value, and with the wait the new one. A captured graph launched after
 * its memory was freed stops the process, naming the kernel. A host pointer
 * inside a struct argument (st_fbuf) stops its launch, and a struct
 * argument's memory freed before a replay stops the replay.
 * Then the checks inside a block (tests/cudaemu/selftest.cu): shared memory
 * read before the block wrote it, and cp.async copies read before their
 * wait, are wrong in any order of the threads; reads of other warps' writes
 * with no barrier between, and a buffer refilled while other warps still
 * read it, are right in thread order (the default, blind to them) and wrong
 * under ST_CUDAEMU_SCHED=adversary for every one of 20 seeds; each kernel
 * done right is right in both orders.
 * Skips (77) in every build but the emulator's (`make emu`). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "core/device.h"
#ifdef ST_CUDA_EMU
#include "cuda/cuda.h"
#include "cudaemu/selftest.h"
#endif

#ifdef ST_CUDA_EMU
enum { N = 1000 };

/* Runs what(dev, p) in a child with stderr in a pipe; its signal and text. */
static int in_child(st_device *dev, float *p, void (*what)(st_device *, float *), char *err, size_t cap) {
    int fd[2];
    if (pipe(fd) != 0) return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        what(dev, p);
        _exit(0);
    }
    close(fd[1]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < cap && (r = read(fd[0], err + n, cap - 1 - n)) > 0) n += (size_t)r;
    err[n] = '\0';
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

static void host_write(st_device *dev, float *p) { p[3] = 1.0f; }
static void host_read(st_device *dev, float *p) {
    volatile float v = p[3];
    (void)v;
}
static void kernel_overrun(st_device *dev, float *p) {
    st_device_fill_f32(dev, p, N + 128, 2.0f); /* 512 bytes past the end */
    st_device_sync(dev);
}
static void kernel_in_bounds(st_device *dev, float *p) {
    if (st_device_fill_f32(dev, p, N + 24, 2.0f) != ST_OK) _exit(3); /* within the 256-byte rounding */
    if (st_device_sync(dev) != ST_OK) _exit(4);
}

static void expect(st_device *dev, float *p, void (*what)(st_device *, float *), const char *name,
                   const char *text) {
    char err[2048];
    const int sig = in_child(dev, p, what, err, sizeof err);
    CHECK(sig == SIGSEGV && strstr(err, text), "%s: want SIGSEGV and \"%s\", got signal %d and: %s", name, text,
          sig, err);
    if (sig == SIGSEGV) printf("%s: stopped: %s", name, err);
}

static void lazy_streams(st_device *dev, float *p) {
    float *h = NULL, *h2 = NULL;
    st_cuda_event *e = NULL;
    CHECK_OK(st_cuda_host_alloc(dev, N * sizeof(float), (void **)&h));
    CHECK_OK(st_cuda_host_alloc(dev, N * sizeof(float), (void **)&h2));
    CHECK_OK(st_cuda_event_create(dev, false, &e));
    if (!h || !h2 || !e) return;
    for (int i = 0; i < N; i++) h[i] = 7.0f, h2[i] = 9.0f;
    CHECK_OK(st_device_fill_f32(dev, p, N, 5.0f));
    CHECK_OK(st_cuda_memcpy_async(dev, h, p, N * sizeof(float), ST_CUDA_STREAM_COMPUTE));
    CHECK(h[N - 1] == 7.0f, "a copy into pinned memory ran before anything waited for it (%g)", h[N - 1]);
    bool done = true;
    CHECK_OK(st_cuda_event_record(dev, e, ST_CUDA_STREAM_COMPUTE));
    CHECK_OK(st_cuda_event_query(dev, e, &done));
    CHECK(!done, "an event's first query found its work done");
    CHECK_OK(st_cuda_event_query(dev, e, &done));
    CHECK(done && h[N - 1] == 5.0f, "the second query: done %d, value %g (want 1, 5)", done, h[N - 1]);
    /* the copy stream writes 9 into p; the compute stream reads p back */
    CHECK_OK(st_cuda_memcpy_async(dev, p, h2, N * sizeof(float), ST_CUDA_STREAM_COPY));
    CHECK_OK(st_cuda_memcpy_async(dev, h, p, N * sizeof(float), ST_CUDA_STREAM_COMPUTE));
    CHECK_OK(st_device_sync(dev));
    CHECK(h[0] == 5.0f, "a read that did not wait for the copy stream saw %g, not the old 5", h[0]);
    CHECK_OK(st_cuda_sync(dev)); /* every stream: the copy has run */
    CHECK_OK(st_device_fill_f32(dev, p, N, 5.0f));
    CHECK_OK(st_cuda_memcpy_async(dev, p, h2, N * sizeof(float), ST_CUDA_STREAM_COPY));
    CHECK_OK(st_cuda_event_record(dev, e, ST_CUDA_STREAM_COPY));
    CHECK_OK(st_cuda_stream_wait_event(dev, ST_CUDA_STREAM_COMPUTE, e));
    CHECK_OK(st_cuda_memcpy_async(dev, h, p, N * sizeof(float), ST_CUDA_STREAM_COMPUTE));
    CHECK_OK(st_device_sync(dev));
    CHECK(h[0] == 9.0f, "a read that waited for the copy stream's event saw %g, not 9", h[0]);
    printf("lazy streams: a missing wait reads the old value, the event's wait the new one\n");
    st_cuda_event_free(e);
    st_cuda_host_free(h);
    st_cuda_host_free(h2);
}

/* A captured kernel whose memory is freed before the graph is launched:
 * the launch stops the process, naming it (a GPU would fault, or write
 * into whatever took the memory). */
static void replay_freed(st_device *dev, float *p) {
    float *q = NULL;
    st_cuda_graph *g = NULL;
    if (st_device_alloc(dev, N * sizeof(float), (void **)&q) != ST_OK) _exit(3);
    if (st_cuda_capture_begin(dev) != ST_OK) _exit(4);
    if (st_device_fill_f32(dev, q, N, 1.0f) != ST_OK) _exit(5);
    if (st_cuda_capture_end(dev, &g) != ST_OK) _exit(6);
    if (st_cuda_graph_launch(dev, g) != ST_OK || st_device_sync(dev) != ST_OK) _exit(7); /* (still there) */
    st_device_release(dev, q);
    st_cuda_graph_launch(dev, g);
    _exit(0);
}

/* A host pointer inside a struct argument (an st_fbuf): the launch stops the
 * process, naming the argument, as it does for a plain pointer argument (the
 * emulator's kernels run on the CPU, where the host pointer would be read
 * without a fault). */
static float host_buf[N];
static void struct_arg_host(st_device *dev, float *p) {
    (void)p;
    st_emu_selftest_struct_arg(dev, host_buf, N);
    _exit(0);
}
/* The same struct argument captured, its memory freed, then replayed. */
static void struct_arg_replay_freed(st_device *dev, float *p) {
    float *q = NULL;
    st_cuda_graph *g = NULL;
    (void)p;
    if (st_device_alloc(dev, N * sizeof(float), (void **)&q) != ST_OK) _exit(3);
    if (st_cuda_capture_begin(dev) != ST_OK) _exit(4);
    if (st_emu_selftest_struct_arg(dev, q, N) != 0) _exit(5);
    if (st_cuda_capture_end(dev, &g) != ST_OK) _exit(6);
    st_device_release(dev, q);
    st_cuda_graph_launch(dev, g);
    _exit(0);
}
static void struct_args(st_device *dev, float *p) {
    char err[2048];
    int sig = in_child(dev, p, struct_arg_host, err, sizeof err);
    CHECK(sig == SIGABRT && strstr(err, "k_struct_arg") && strstr(err, "argument 1") &&
              strstr(err, "neither device memory nor pinned"),
          "a host pointer inside an st_fbuf argument: want SIGABRT naming argument 1, got signal %d and: %s",
          sig, err);
    if (sig == SIGABRT) printf("host pointer in a struct argument: stopped: %s", err);
    sig = in_child(dev, p, struct_arg_replay_freed, err, sizeof err);
    CHECK(sig == SIGABRT && strstr(err, "k_struct_arg") && strstr(err, "freed since the capture"),
          "a struct argument's memory freed before a replay: want SIGABRT and its message, got signal %d "
          "and: %s",
          sig, err);
    float host[N];
    CHECK(st_emu_selftest_struct_arg(dev, p, N) == 0, "a struct argument with device memory was refused");
    CHECK_OK(st_device_download(dev, host, p, sizeof host));
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += !(host[i] == 3.0f);
    CHECK(bad == 0, "a kernel with its pointer in a struct argument left %d of %d values unwritten", bad, N);
}

static void shuffle_skip(st_device *dev, float *p) { st_emu_selftest_shuffle_skip(); }

/* The block's checks (selftest.h): each fault's wrong outputs in thread
 * order and under the adversary, and none for the kernel done right. */
static void block_faults(void) {
    static const struct {
        int fault;
        const char *name;
        bool in_order; /* wrong in thread order too */
    } cases[] = {{ST_EMU_FAULT_BARRIER, "no barrier between a write and another warp's read", false},
                 {ST_EMU_FAULT_REUSE, "a buffer refilled while other warps read it", false},
                 {ST_EMU_FAULT_CP_WAIT, "cp.async read before its wait", true},
                 {ST_EMU_FAULT_UNWRITTEN, "shared memory read before the block wrote it", true}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int f = cases[i].fault;
        int least = 1 << 30;
        for (unsigned long long seed = 1; seed <= 20; seed++) {
            st_emu_sched_set(1, seed);
            const int bad = st_emu_selftest(f, 0), good = st_emu_selftest(f, 1);
            CHECK(good == 0, "%s, done right, adversary seed %llu: %d outputs wrong", cases[i].name, seed,
                  good);
            CHECK(bad > 0, "%s: the adversary (seed %llu) saw nothing (%d)", cases[i].name, seed, bad);
            if (bad < least) least = bad;
        }
        st_emu_sched_set(0, 1);
        const int bad = st_emu_selftest(f, 0), good = st_emu_selftest(f, 1);
        CHECK(good == 0, "%s, done right, thread order: %d outputs wrong", cases[i].name, good);
        if (cases[i].in_order)
            CHECK(bad > 0, "%s: thread order saw nothing (%d)", cases[i].name, bad);
        else
            CHECK(bad == 0, "%s: thread order was expected to be blind to it, and found %d wrong",
                  cases[i].name, bad);
        printf("%s: %d of 512 outputs wrong in thread order, at least %d under the adversary (20 seeds)\n",
               cases[i].name, bad, least);
    }
    /* shuffles back to back (one barrier each, the warp's two slot sets in
     * turn): every value the host's, in thread order and under the adversary */
    for (unsigned long long seed = 0; seed <= 20; seed++) {
        st_emu_sched_set(seed > 0, seed);
        const int bad = st_emu_selftest_shuffles();
        CHECK(bad == 0, "a chain of 24 shuffles, %s %llu: %d of 512 values wrong",
              seed ? "adversary seed" : "thread order", seed, bad);
    }
    st_emu_sched_set(0, 1);
    /* dynamic shared memory: 16 KiB as any kernel may; 64 KiB refused until
     * the kernel is opted in to it, then run; 228 KiB, past sm_90's 227 a
     * block, not opted in; and 0xFF bytes at each block's start */
    CHECK(st_emu_selftest_dynamic_shared(16 << 10, 0, 1) == 0,
          "16 KiB of dynamic shared memory: outputs wrong");
    int r = st_emu_selftest_dynamic_shared(64 << 10, 0, 1);
    CHECK(r == -2, "64 KiB of dynamic shared memory without the opt-in: want the launch refused, got %d", r);
    r = st_emu_selftest_dynamic_shared(64 << 10, 1, 1);
    CHECK(r == 0, "64 KiB of dynamic shared memory, opted in: %d outputs wrong", r);
    r = st_emu_selftest_dynamic_shared(228 << 10, 1, 1);
    CHECK(r == -1, "228 KiB of dynamic shared memory: want the opt-in refused, got %d", r);
    r = st_emu_selftest_dynamic_shared(64 << 10, 1, 0);
    CHECK(r == 3 * 128,
          "dynamic shared memory written by block 0 alone: want the other 3 blocks' 384 outputs "
          "wrong, got %d",
          r);
    /* lanes of a warp at a barrier after different numbers of shuffles: stopped, said */
    char err[2048];
    const int sig = in_child(NULL, NULL, shuffle_skip, err, sizeof err);
    CHECK(sig == SIGABRT && strstr(err, "k_shuffle_skip") && strstr(err, "after 0 and 1 shuffles"),
          "a shuffle half a warp skips: want SIGABRT and the kernel named, got signal %d and: %s", sig, err);
    if (sig == SIGABRT) printf("a shuffle half a warp skips: stopped: %s", err);
}
#endif

int main(void) {
#ifndef ST_CUDA_EMU
    return st_test_skip("test_cudaemu", "this is not the CUDA emulator's build (make emu)");
#else
    st_device *dev = NULL;
    CHECK_OK(st_device_open_cuda(0, &dev));
    if (!dev) return st_test_finish("test_cudaemu");
    float *p = NULL;
    CHECK_OK(st_device_alloc(dev, N * sizeof(float), (void **)&p));
    expect(dev, p, host_write, "host write", "host code touched device memory");
    expect(dev, p, host_read, "host read", "host code touched device memory");
    expect(dev, p, kernel_overrun, "kernel overrun", "fill_kernel");
    char err[2048];
    const int sig = in_child(dev, p, kernel_in_bounds, err, sizeof err);
    CHECK(sig == 0, "a fill within the allocation's rounding died of signal %d: %s", sig, err);
    float host[N];
    CHECK_OK(st_device_fill_f32(dev, p, N, 5.0f));
    CHECK_OK(st_device_download(dev, host, p, sizeof host));
    int bad = 0;
    for (int i = 0; i < N; i++) bad += !(host[i] == 5.0f);
    CHECK(bad == 0, "%d of %d values after a fill are not 5", bad, N);
    const char *lz = getenv("ST_CUDAEMU_LAZY");
    if (!lz || strcmp(lz, "0") != 0) lazy_streams(dev, p);
    struct_args(dev, p);
    char rerr[2048];
    const int rsig = in_child(dev, p, replay_freed, rerr, sizeof rerr);
    CHECK(rsig == SIGABRT && strstr(rerr, "cudaGraphLaunch: the captured fill_kernel") &&
              strstr(rerr, "freed since the capture"),
          "a graph replayed over freed memory: want SIGABRT and its message, got signal %d and: %s", rsig,
          rerr);
    if (rsig == SIGABRT) printf("a graph replayed over freed memory: stopped: %s", rerr);
    block_faults();
    st_device_release(dev, p);
    st_device_free(dev);
    return st_test_finish("test_cudaemu");
#endif
}
