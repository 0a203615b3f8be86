/* The CUDA emulator's host side (tests/cudaemu/README.md): the CUDA runtime
 * and cuBLASLt functions scaletrain's backend calls, defined against the real
 * headers' declarations and run on the CPU, and the scheduler that runs a
 * kernel's blocks with their threads as fibers.
 *
 * It exists to run the backend's own code (kernels, launch configurations,
 * the host logic around streams, events, pinned buffers and plans) where no
 * GPU is, with three checks a GPU does not make as plainly:
 *   - device memory is mapped inaccessible while host code runs, so host code
 *     that reads or writes through a device pointer stops with a message;
 *   - each device allocation ends against a guard page (to 256 bytes), so a
 *     kernel that runs past the end of an allocation stops with its name;
 *   - a copy or memset whose device side is not inside one live allocation,
 *     or whose direction does not match its pointers, is an error.
 * What it cannot show: anything about timing, concurrency between streams
 * (every operation runs when it is queued), or the real cuBLASLt's choice of
 * algorithm. Set ST_CUDAEMU_PROTECT=0 to leave device memory mapped. */
#include "emu.h" /* first: it defines what the CUDA headers then leave alone */

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cblas.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <set>
#include <vector>


static thread_local cudaError_t last_error = cudaSuccess;
static cudaError_t ret(cudaError_t e) {
    if (e != cudaSuccess) last_error = e;
    return e;
}

[[noreturn]] static void die(const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "cudaemu: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
    fflush(stderr);
    abort();
}

/* --- device memory --------------------------------------------------------- */
enum { PAGE = 4096, GUARD_ALIGN = 256 };

struct alloc {
    char *map; /* the mapping: pages, then one guard page */
    size_t map_bytes, bytes;
};

static std::mutex mem_lock;
static std::map<uintptr_t, alloc> device_mem; /* by start address */
static std::set<void *> host_mem;              /* cudaHostAlloc */
static size_t mem_total = (size_t)16 << 30, mem_used;
static int window_depth;  /* >0: device memory is accessible */
static int protect_mode = -1;
static thread_local const char *running_kernel;

static bool protecting(void) {
    if (protect_mode < 0) {
        const char *e = getenv("ST_CUDAEMU_PROTECT");
        protect_mode = !(e && strcmp(e, "0") == 0);
        const char *m = getenv("ST_CUDAEMU_MEM_MB");
        if (m && atoll(m) > 0) mem_total = (size_t)atoll(m) << 20;
    }
    return protect_mode;
}

static void set_access(const alloc &a, bool on) {
    mprotect(a.map, a.map_bytes - PAGE, on ? PROT_READ | PROT_WRITE : PROT_NONE);
}

/* Device memory readable and writable while a window is open (nested). */
void st_emu_device_window(bool open) {
    if (!protecting()) return;
    std::lock_guard<std::mutex> l(mem_lock);
    if (open ? window_depth++ == 0 : --window_depth == 0)
        for (auto &kv : device_mem) set_access(kv.second, open);
}
struct window {
    window() { st_emu_device_window(true); }
    ~window() { st_emu_device_window(false); }
};

/* The allocation holding [p, p + n), or NULL. */
static const alloc *find_alloc(const void *p, size_t n) {
    std::lock_guard<std::mutex> l(mem_lock);
    auto it = device_mem.upper_bound((uintptr_t)p);
    if (it == device_mem.begin()) return NULL;
    --it;
    const uintptr_t a = it->first, q = (uintptr_t)p;
    if (q >= a && q + n <= a + it->second.bytes) return &it->second;
    return NULL;
}

static bool is_device(const void *p) { return find_alloc(p, 0) != NULL || find_alloc(p, 1) != NULL; }

static void segv(int sig, siginfo_t *si, void *uc) {
    char msg[512];
    const uintptr_t at = (uintptr_t)si->si_addr;
    const char *what = "an address outside every device allocation";
    for (auto &kv : device_mem) {
        const alloc &a = kv.second;
        const uintptr_t lo = (uintptr_t)a.map, hi = lo + a.map_bytes;
        if (at >= lo && at < hi) {
            what = at >= hi - PAGE ? "past the end of a device allocation (its guard page)"
                                   : "device memory while no kernel or copy runs (host code used a device pointer)";
            break;
        }
    }
    int n = snprintf(msg, sizeof msg, "cudaemu: %s touched %s at %p\n",
                     running_kernel ? running_kernel : "host code", what, si->si_addr);
    if (n > 0) (void)!write(2, msg, (size_t)n);
    signal(SIGSEGV, SIG_DFL);
    raise(SIGSEGV);
}

static void install_segv(void) {
    static std::once_flag once;
    std::call_once(once, [] {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = segv;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigaction(SIGSEGV, &sa, NULL);
    });
}

static cudaError_t dev_alloc(void **out, size_t n) {
    protecting();
    install_segv();
    *out = NULL;
    const size_t padded = (n + GUARD_ALIGN - 1) / GUARD_ALIGN * GUARD_ALIGN;
    {
        std::lock_guard<std::mutex> l(mem_lock);
        if (mem_used + padded > mem_total) return cudaErrorMemoryAllocation;
    }
    const size_t pages = (padded + PAGE - 1) / PAGE * PAGE;
    alloc a;
    a.map_bytes = pages + PAGE;
    a.bytes = n;
    a.map = (char *)mmap(NULL, a.map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                         -1, 0);
    if (a.map == MAP_FAILED) return cudaErrorMemoryAllocation;
    mprotect(a.map + pages, PAGE, PROT_NONE);
    char *p = a.map + pages - padded;
    memset(p, 0xA5, padded); /* cudaMalloc's memory holds garbage, not zeros */
    std::lock_guard<std::mutex> l(mem_lock);
    if (protect_mode && window_depth == 0) set_access(a, false);
    device_mem[(uintptr_t)p] = a;
    mem_used += padded;
    *out = p;
    return cudaSuccess;
}

extern "C" cudaError_t cudaMalloc(void **p, size_t n) { return ret(dev_alloc(p, n)); }

extern "C" cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    std::lock_guard<std::mutex> l(mem_lock);
    auto it = device_mem.find((uintptr_t)p);
    if (it == device_mem.end()) return ret(cudaErrorInvalidValue);
    mem_used -= (it->second.bytes + GUARD_ALIGN - 1) / GUARD_ALIGN * GUARD_ALIGN;
    munmap(it->second.map, it->second.map_bytes);
    device_mem.erase(it);
    return cudaSuccess;
}

extern "C" cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int flags) {
    *p = NULL;
    if (posix_memalign(p, 4096, n ? n : 1) != 0) return ret(cudaErrorMemoryAllocation);
    std::lock_guard<std::mutex> l(mem_lock);
    host_mem.insert(*p);
    return cudaSuccess;
}

extern "C" cudaError_t cudaMallocHost(void **p, size_t n) { return cudaHostAlloc(p, n, 0); }

extern "C" cudaError_t cudaFreeHost(void *p) {
    if (!p) return cudaSuccess;
    {
        std::lock_guard<std::mutex> l(mem_lock);
        if (!host_mem.erase(p)) return ret(cudaErrorInvalidValue);
    }
    free(p);
    return cudaSuccess;
}

extern "C" cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total) {
    protecting();
    std::lock_guard<std::mutex> l(mem_lock);
    *total = mem_total;
    *free_b = mem_total - mem_used;
    return cudaSuccess;
}

extern "C" cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p) {
    memset(a, 0, sizeof *a);
    if (is_device(p)) {
        a->type = cudaMemoryTypeDevice;
        a->devicePointer = (void *)p;
    } else {
        std::lock_guard<std::mutex> l(mem_lock);
        a->type = host_mem.count((void *)p) ? cudaMemoryTypeHost : cudaMemoryTypeUnregistered;
        a->hostPointer = (void *)p;
    }
    a->device = 0;
    return cudaSuccess;
}

/* --- copies ----------------------------------------------------------------- */
static std::set<void *> live_streams, live_events;
static std::mutex handle_lock;

static bool stream_ok(cudaStream_t s) {
    if (!s || s == cudaStreamLegacy || s == cudaStreamPerThread) return true;
    std::lock_guard<std::mutex> l(handle_lock);
    return live_streams.count((void *)s) != 0;
}

static cudaError_t copy(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s) {
    if (!stream_ok(s)) return ret(cudaErrorInvalidResourceHandle);
    if (n == 0) return cudaSuccess;
    const bool dd = find_alloc(dst, n) != NULL, sd = find_alloc(src, n) != NULL;
    const bool dst_in_dev = is_device(dst), src_in_dev = is_device(src);
    bool ok;
    switch (kind) {
    case cudaMemcpyHostToDevice: ok = dd && !src_in_dev; break;
    case cudaMemcpyDeviceToHost: ok = sd && !dst_in_dev; break;
    case cudaMemcpyDeviceToDevice: ok = dd && sd; break;
    case cudaMemcpyHostToHost: ok = !dst_in_dev && !src_in_dev; break;
    default: ok = (dd || !dst_in_dev) && (sd || !src_in_dev); break;
    }
    if (!ok) {
        fprintf(stderr, "cudaemu: a copy of %zu bytes (kind %d) from %p to %p: %s\n", n, (int)kind, src, dst,
                dst_in_dev && !dd ? "runs past the end of the destination's device allocation"
                : src_in_dev && !sd ? "runs past the end of the source's device allocation"
                                    : "its pointers do not match its direction");
        return ret(cudaErrorInvalidValue);
    }
    window w;
    memmove(dst, src, n);
    return cudaSuccess;
}

extern "C" cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s) {
    return copy(dst, src, n, kind, s);
}
extern "C" cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
    return copy(dst, src, n, kind, 0);
}

static cudaError_t set(void *dst, int v, size_t n, cudaStream_t s) {
    if (!stream_ok(s)) return ret(cudaErrorInvalidResourceHandle);
    if (n == 0) return cudaSuccess;
    if (!find_alloc(dst, n)) {
        fprintf(stderr, "cudaemu: a memset of %zu bytes at %p is not inside one device allocation\n", n, dst);
        return ret(cudaErrorInvalidValue);
    }
    window w;
    memset(dst, v, n);
    return cudaSuccess;
}
extern "C" cudaError_t cudaMemsetAsync(void *dst, int v, size_t n, cudaStream_t s) { return set(dst, v, n, s); }
extern "C" cudaError_t cudaMemset(void *dst, int v, size_t n) { return set(dst, v, n, 0); }

/* --- devices, streams, events ---------------------------------------------- */
extern "C" cudaError_t cudaGetDeviceCount(int *n) {
    *n = 1;
    return cudaSuccess;
}
extern "C" cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : ret(cudaErrorInvalidDevice); }
extern "C" cudaError_t cudaGetDevice(int *d) {
    *d = 0;
    return cudaSuccess;
}
extern "C" cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) {
    if (d != 0) return ret(cudaErrorInvalidDevice);
    protecting();
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "scaletrain CUDA emulator (CPU)");
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 4;
    p->totalGlobalMem = mem_total;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->sharedMemPerBlock = 48 << 10;
    return cudaSuccess;
}
extern "C" cudaError_t cudaDeviceGetPCIBusId(char *id, int len, int d) {
    if (d != 0) return ret(cudaErrorInvalidDevice);
    snprintf(id, (size_t)len, "0000:00:00.0");
    return cudaSuccess;
}
extern "C" cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
extern "C" cudaError_t cudaGetLastError(void) {
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}
extern "C" cudaError_t cudaPeekAtLastError(void) { return last_error; }
extern "C" const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNotReady: return "device not ready";
    default: return "unknown error";
    }
}
extern "C" const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    default: return "cudaErrorUnknown";
    }
}

extern "C" cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    void *h = malloc(1);
    std::lock_guard<std::mutex> l(handle_lock);
    live_streams.insert(h);
    *s = (cudaStream_t)h;
    return cudaSuccess;
}
extern "C" cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
extern "C" cudaError_t cudaStreamDestroy(cudaStream_t s) {
    std::lock_guard<std::mutex> l(handle_lock);
    if (!live_streams.erase((void *)s)) return ret(cudaErrorInvalidResourceHandle);
    free((void *)s);
    return cudaSuccess;
}
extern "C" cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    return stream_ok(s) ? cudaSuccess : ret(cudaErrorInvalidResourceHandle);
}
extern "C" cudaError_t cudaStreamQuery(cudaStream_t s) {
    return stream_ok(s) ? cudaSuccess : ret(cudaErrorInvalidResourceHandle);
}

struct event {
    bool timing, recorded;
    double ms; /* host clock when recorded */
};
static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}
static event *ev_of(cudaEvent_t e) {
    std::lock_guard<std::mutex> l(handle_lock);
    return live_events.count((void *)e) ? (event *)e : NULL;
}
extern "C" cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
    event *v = (event *)calloc(1, sizeof *v);
    v->timing = !(flags & cudaEventDisableTiming);
    std::lock_guard<std::mutex> l(handle_lock);
    live_events.insert(v);
    *e = (cudaEvent_t)v;
    return cudaSuccess;
}
extern "C" cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
extern "C" cudaError_t cudaEventDestroy(cudaEvent_t e) {
    std::lock_guard<std::mutex> l(handle_lock);
    if (!live_events.erase((void *)e)) return ret(cudaErrorInvalidResourceHandle);
    free(e);
    return cudaSuccess;
}
extern "C" cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    event *v = ev_of(e);
    if (!v || !stream_ok(s)) return ret(cudaErrorInvalidResourceHandle);
    v->recorded = true;
    v->ms = now_ms();
    return cudaSuccess;
}
extern "C" cudaError_t cudaEventQuery(cudaEvent_t e) {
    return ev_of(e) ? cudaSuccess : ret(cudaErrorInvalidResourceHandle);
}
extern "C" cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    return ev_of(e) ? cudaSuccess : ret(cudaErrorInvalidResourceHandle);
}
extern "C" cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    event *x = ev_of(a), *y = ev_of(b);
    if (!x || !y) return ret(cudaErrorInvalidResourceHandle);
    if (!x->timing || !y->timing || !x->recorded || !y->recorded) return ret(cudaErrorInvalidResourceHandle);
    *ms = (float)(y->ms - x->ms);
    return cudaSuccess;
}
extern "C" cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
    return ev_of(e) && stream_ok(s) ? cudaSuccess : ret(cudaErrorInvalidResourceHandle);
}

/* --- kernels ---------------------------------------------------------------- */
/* One launch at a time, from any host thread; the launch state is global. */
static std::mutex launch_lock;
uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

/* Fibers: each thread of a block runs on its own stack; st_emu_switch saves
 * the callee-saved registers on the current stack, stores its pointer in
 * *from and continues on `to` (x86-64 System V). */
extern "C" void st_emu_switch(void **from, void *to);
asm(R"(
    .text
    .globl st_emu_switch
    .type st_emu_switch,@function
st_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size st_emu_switch,.-st_emu_switch
)");

enum { READY, AT_BLOCK, AT_WARP, DONE };
enum { STACK_BYTES = 64 << 10 }; /* each above a guard page */

struct fiber {
    void *sp;
    int state;
    uint3 tid;
};

static struct sched {
    std::vector<fiber> f;
    std::vector<uint64_t> slots; /* 32 per warp */
    std::vector<int> pred;
    char *stacks = NULL;
    size_t stack_cap = 0; /* fibers the stacks hold */
    void *main_sp = NULL;
    int cur = 0;
    bool plain = false, saw_barrier = false;
    uint64_t releases = 0, pred_epoch = ~0ull; /* block barriers passed; when pred_result was made */
    int pred_result = 0;
    void (*body)(void *) = NULL;
    void *ctx = NULL;
    const char *name = NULL;
} S;

static void fiber_entry(void) {
    S.body(S.ctx);
    S.f[(size_t)S.cur].state = DONE;
    void *dead;
    st_emu_switch(&dead, S.main_sp); /* never resumed */
    abort();
}

static void wait_at(int state) {
    S.saw_barrier = true;
    if (S.plain)
        die("%s reached a barrier or shuffle in a launch run without fibers (its earlier launches had none)%s",
            S.name, "");
    S.f[(size_t)S.cur].state = state;
    st_emu_switch(&S.f[(size_t)S.cur].sp, S.main_sp);
}

void __syncthreads(void) { wait_at(AT_BLOCK); }
void st_emu_warp_barrier(void) { wait_at(AT_WARP); }
void __syncwarp(unsigned mask) { wait_at(AT_WARP); }
void __threadfence(void) {}

static int block_pred(int pred, int op) {
    S.pred[(size_t)S.cur] = pred;
    __syncthreads();
    if (S.pred_epoch != S.releases) { /* the first thread past the barrier counts for all */
        int r = op == 1 ? 1 : 0;
        for (size_t i = 0; i < S.f.size(); i++) {
            if (op == 0) r |= S.pred[i] != 0;
            else if (op == 1) r &= S.pred[i] != 0;
            else r += S.pred[i] != 0;
        }
        S.pred_result = r;
        S.pred_epoch = S.releases;
    }
    const int r = S.pred_result;
    __syncthreads();
    return r;
}
int __syncthreads_or(int p) { return block_pred(p, 0); }
int __syncthreads_and(int p) { return block_pred(p, 1); }
int __syncthreads_count(int p) { return block_pred(p, 2); }

uint64_t *st_emu_warp_slots(int *lane) {
    *lane = S.cur & 31;
    return &S.slots[(size_t)(S.cur >> 5) * 32];
}

static void run_block(int nt) {
    const size_t per = STACK_BYTES + PAGE;
    if ((size_t)nt > S.stack_cap) {
        if (S.stacks) munmap(S.stacks, S.stack_cap * per);
        S.stacks = (char *)mmap(NULL, (size_t)nt * per, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (S.stacks == MAP_FAILED) die("no memory for %s's thread stacks%s", S.name, "");
        for (int i = 0; i < nt; i++) mprotect(S.stacks + (size_t)i * per, PAGE, PROT_NONE);
        S.stack_cap = (size_t)nt;
    }
    S.f.resize((size_t)nt);
    S.pred.assign((size_t)nt, 0);
    S.slots.assign((size_t)(nt + 31) / 32 * 32, 0);
    for (int i = 0; i < nt; i++) {
        fiber &t = S.f[(size_t)i];
        t.tid.x = (unsigned)i % blockDim.x;
        t.tid.y = (unsigned)i / blockDim.x % blockDim.y;
        t.tid.z = (unsigned)i / (blockDim.x * blockDim.y);
        t.state = READY;
        void **top = (void **)(S.stacks + (size_t)(i + 1) * per); /* 16-byte aligned */
        top[-1] = NULL;                      /* fiber_entry's return address: it never returns */
        top[-2] = (void *)&fiber_entry;      /* where st_emu_switch's ret goes */
        for (int r = 3; r <= 8; r++) top[-r] = NULL; /* rbp, rbx, r12 to r15 */
        t.sp = (void *)(top - 8);
    }
    int left = nt;
    for (;;) {
        for (int i = 0; i < nt; i++) {
            if (S.f[(size_t)i].state != READY) continue;
            S.cur = i;
            threadIdx = S.f[(size_t)i].tid;
            st_emu_switch(&S.main_sp, S.f[(size_t)i].sp);
            if (S.f[(size_t)i].state == DONE) left--;
        }
        if (left == 0) return;
        bool released = false;
        int at_block = 0;
        for (int i = 0; i < nt; i++) at_block += S.f[(size_t)i].state == AT_BLOCK;
        if (at_block && at_block == left) {
            for (int i = 0; i < nt; i++)
                if (S.f[(size_t)i].state == AT_BLOCK) S.f[(size_t)i].state = READY;
            S.releases++;
            released = true;
        }
        for (int w = 0; w < nt; w += 32) {
            int alive = 0, at_warp = 0;
            for (int i = w; i < nt && i < w + 32; i++) {
                alive += S.f[(size_t)i].state != DONE;
                at_warp += S.f[(size_t)i].state == AT_WARP;
            }
            if (at_warp && at_warp == alive) {
                for (int i = w; i < nt && i < w + 32; i++)
                    if (S.f[(size_t)i].state == AT_WARP) S.f[(size_t)i].state = READY;
                released = true;
            }
        }
        if (!released)
            die("%s: deadlock: some threads of a block wait at a barrier the others never reach%s", S.name, "");
    }
}

void st_emu_run(const st_emu_cfg &c, void (*body)(void *), void *ctx, int *site, const char *name) {
    const uint64_t nt = (uint64_t)c.block.x * c.block.y * c.block.z;
    if (!stream_ok(c.stream)) {
        ret(cudaErrorInvalidResourceHandle);
        return;
    }
    if (nt == 0 || nt > 1024 || c.block.z > 64 || c.grid.x == 0 || c.grid.y == 0 || c.grid.z == 0 ||
        c.grid.y > 65535 || c.grid.z > 65535 || c.grid.x > 2147483647u || c.smem > (48u << 10)) {
        fprintf(stderr, "cudaemu: %s: launch grid (%u, %u, %u) block (%u, %u, %u) shared %zu refused\n", name,
                c.grid.x, c.grid.y, c.grid.z, c.block.x, c.block.y, c.block.z, c.smem);
        ret(cudaErrorInvalidConfiguration);
        return;
    }
    std::lock_guard<std::mutex> one(launch_lock);
    window w;
    S.body = body;
    S.ctx = ctx;
    S.name = name;
    S.plain = *site == 1;
    S.saw_barrier = false;
    running_kernel = name;
    gridDim = c.grid;
    blockDim = c.block;
    for (unsigned z = 0; z < c.grid.z; z++)
        for (unsigned y = 0; y < c.grid.y; y++)
            for (unsigned x = 0; x < c.grid.x; x++) {
                blockIdx.x = x, blockIdx.y = y, blockIdx.z = z;
                if (S.plain) {
                    for (uint64_t i = 0; i < nt; i++) {
                        threadIdx.x = (unsigned)(i % c.block.x);
                        threadIdx.y = (unsigned)(i / c.block.x % c.block.y);
                        threadIdx.z = (unsigned)(i / ((uint64_t)c.block.x * c.block.y));
                        S.cur = (int)i;
                        body(ctx);
                    }
                } else {
                    run_block((int)nt);
                }
            }
    if (*site == 0) *site = S.saw_barrier ? 2 : 1;
    running_kernel = NULL;
}

/* For the emulated CUB: [p, p + n) lies inside one device allocation. */
bool st_emu_device_range(const void *p, size_t n) { return find_alloc(p, n) != NULL; }
