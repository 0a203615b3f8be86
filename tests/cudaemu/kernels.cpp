/* The CUDA emulator's kernels (tests/cudaemu/README.md): a launch is checked
 * as a GPU checks it and queued on its stream (streams.cpp); when it runs,
 * its blocks run one after another, each block's threads as fibers on their
 * own stacks, so __syncthreads and the warp shuffles (emu.h) mean what they
 * do on a GPU, and a barrier some threads never reach stops with the
 * kernel's name. Each block starts with its shared memory full of 0xFF
 * bytes; cp.async copies land at their wait. ST_CUDAEMU_SCHED=adversary
 * runs the fibers of each round in a random order and, between two block
 * barriers, holds one warp back or lets one run ahead, so that a missing
 * barrier changes the results. */
#include "internal.h"

#include "selftest.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
/* A fiber's stack is reused by the next block's fiber, and the stacks'
 * mapping by later mappings: the frames a fiber left (it never returns) stay
 * poisoned in AddressSanitizer's shadow until cleared. */
#define FIBER_STACK_CLEAN(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define FIBER_STACK_CLEAN(p, n) ((void)0)
#endif

enum { PAGE = 4096 };
/* what shared memory and a cp.async's destination hold before they are
 * written: a NaN in every float type */
enum { POISON = 0xFF };

/* a grid's or block's linear index (x fastest) as its (x, y, z) */
static uint3 unflatten(uint64_t i, dim3 d) {
    uint3 u;
    u.x = (unsigned)(i % d.x);
    u.y = (unsigned)(i / d.x % d.y);
    u.z = (unsigned)(i / ((uint64_t)d.x * d.y));
    return u;
}

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

/* A cp.async copy not yet landed: its bytes (read at the issue) and its
 * group (the thread's commits before it). */
struct pending_copy {
    void *dst;
    unsigned char bytes[16];
    int n;
    int group;
};

struct fiber {
    void *sp;
    int state;
    uint3 tid;
    std::vector<pending_copy> copies;
    int commits;
    unsigned exchanges; /* warp exchanges made: its next one's slot set (st_emu_warp_slots) */
};

/* The fibers' order (ST_CUDAEMU_SCHED): thread order, or the adversary's. */
enum { SCHED_ORDER, SCHED_ADVERSARY };
enum { HOLD_NONE, HOLD_BACK, HOLD_AHEAD }; /* what the adversary does to one warp between block barriers */

static struct sched {
    std::vector<fiber> f;
    std::vector<uint64_t> slots; /* 2 x 32 per warp */
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
    int sched = -1;         /* SCHED_*; -1 until read from the environment */
    uint64_t rng = 0;       /* the adversary's draws (ST_CUDAEMU_SCHED_SEED) */
    int hold = HOLD_NONE;   /* between two block barriers: */
    int hold_warp = 0;      /* the warp held back or let run ahead */
    std::vector<int> order; /* the adversary's round */
    size_t pos = 0;         /* the running fiber's place in it */
    std::vector<uint4> dyn; /* the launch's dynamic shared memory (extern __shared__), 16-byte aligned */
    size_t dyn_bytes = 0;   /* what the launch asked for */
} S;

static uint64_t draw(void) { /* splitmix64 */
    uint64_t x = (S.rng += 0x9e3779b97f4a7c15ULL);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static void sched_from_env(void) {
    if (S.sched >= 0) return;
    const char *m = getenv("ST_CUDAEMU_SCHED"), *seed = getenv("ST_CUDAEMU_SCHED_SEED");
    if (!m || !*m || strcmp(m, "order") == 0)
        S.sched = SCHED_ORDER;
    else if (strcmp(m, "adversary") == 0)
        S.sched = SCHED_ADVERSARY;
    else
        st_emu_die("ST_CUDAEMU_SCHED=%s: use order (the default) or adversary", m);
    S.rng = seed && *seed ? strtoull(seed, NULL, 0) : 1;
}

extern "C" void st_emu_sched_set(int adversary, unsigned long long seed) {
    std::lock_guard<std::mutex> one(launch_lock);
    S.sched = adversary ? SCHED_ADVERSARY : SCHED_ORDER;
    S.rng = seed;
}

/* The adversary's choice for the stretch to the next block barrier. */
static void new_phase(int nt) {
    const int warps = (nt + 31) / 32;
    const uint64_t r = draw();
    S.hold = warps > 1 ? (int)(r % 3) : HOLD_NONE;
    S.hold_warp = (int)((r >> 8) % (uint64_t)warps);
}

/* The adversary's round: the fibers that may run, shuffled; of them, only
 * the held warp's when it runs ahead and has any, only the others' when it
 * is held back and they have any. Returns the first, or -1. */
static int adversary_round(void) {
    const int nt = (int)S.f.size();
    S.order.clear();
    for (int pass = 0; pass < 2 && S.order.empty(); pass++)
        for (int j = 0; j < nt; j++) {
            if (S.f[(size_t)j].state != READY) continue;
            const bool held = j / 32 == S.hold_warp;
            if (pass == 0 && ((S.hold == HOLD_AHEAD && !held) || (S.hold == HOLD_BACK && held))) continue;
            S.order.push_back(j);
        }
    for (size_t i = S.order.size(); i > 1; i--)
        std::swap(S.order[i - 1], S.order[(size_t)(draw() % i)]);
    S.pos = 0;
    return S.order.empty() ? -1 : S.order[0];
}

/* The first fiber from index `from` on that may run, or -1. */
static int next_ready(int from) {
    const int nt = (int)S.f.size();
    for (int j = from; j < nt; j++)
        if (S.f[(size_t)j].state == READY) return j;
    return -1;
}

/* Leave the current fiber (its stack pointer into *save) for the next one
 * that may run in this round, in thread order (or the adversary's), or for
 * the scheduler when none is left: one switch per fiber a round, not two
 * through the scheduler. */
static void run_next(void **save) {
    const int j =
        S.sched == SCHED_ADVERSARY ? (++S.pos < S.order.size() ? S.order[S.pos] : -1) : next_ready(S.cur + 1);
    if (j < 0) {
        st_emu_switch(save, S.main_sp);
        return;
    }
    S.cur = j;
    threadIdx = S.f[(size_t)j].tid;
    st_emu_switch(save, S.f[(size_t)j].sp);
}

/* Land the copies of fiber t whose group is at most `upto`. */
static void land(fiber &t, int upto) {
    size_t k = 0;
    for (size_t i = 0; i < t.copies.size(); i++) {
        pending_copy &c = t.copies[i];
        if (c.group <= upto)
            memcpy(c.dst, c.bytes, (size_t)c.n);
        else
            t.copies[k++] = c;
    }
    t.copies.resize(k);
}

void st_emu_cp_async(void *dst, const void *src, int n, bool ok) {
    pending_copy c;
    c.dst = dst;
    c.n = n;
    if (ok)
        memcpy(c.bytes, src, (size_t)n);
    else
        memset(c.bytes, 0, (size_t)n);
    if (S.plain) { /* a launch without fibers: no one to read early */
        memcpy(dst, c.bytes, (size_t)n);
        return;
    }
    fiber &t = S.f[(size_t)S.cur];
    c.group = t.commits;
    memset(dst, POISON, (size_t)n); /* not there yet */
    t.copies.push_back(c);
}
void st_emu_cp_async_commit(void) {
    if (!S.plain) S.f[(size_t)S.cur].commits++;
}
void st_emu_cp_async_wait(int n) {
    if (S.plain) return;
    fiber &t = S.f[(size_t)S.cur];
    land(t, t.commits - 1 - n); /* the groups before the newest n committed ones */
}

static void fiber_entry(void) {
    S.body(S.ctx);
    land(S.f[(size_t)S.cur], INT32_MAX); /* a GPU lands them all before the block ends */
    S.f[(size_t)S.cur].state = DONE;
    void *dead;
    run_next(&dead); /* never resumed */
    abort();
}

static void wait_at(int state) {
    S.saw_barrier = true;
    if (S.plain)
        st_emu_die("%s reached a barrier or shuffle in a launch run without fibers (its earlier launches had none)",
                   S.name);
    S.f[(size_t)S.cur].state = state;
    run_next(&S.f[(size_t)S.cur].sp);
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
    if (S.plain) wait_at(AT_WARP); /* (which stops the process, saying why) */
    *lane = S.cur & 31;
    const unsigned set = S.f[(size_t)S.cur].exchanges++ & 1;
    return &S.slots[((size_t)(S.cur >> 5) * 2 + set) * 32];
}

/* The block's shared arrays poisoned so far: (address, the block's number) */
static std::vector<std::pair<void *, uint64_t>> shared_seen;
static uint64_t block_no = 0;

void st_emu_shared(void *p, size_t n) {
    for (auto &a : shared_seen)
        if (a.first == p) {
            if (a.second == block_no) return;
            a.second = block_no;
            memset(p, POISON, n);
            return;
        }
    shared_seen.push_back({p, block_no});
    memset(p, POISON, n);
}

/* extern __shared__ (rewrite.py): the launch's dynamic shared memory,
 * poisoned at each block's start; NULL when the launch asked for none (a
 * GPU's access there is out of range). */
void *st_emu_dynamic_shared(void) { return S.dyn_bytes ? S.dyn.data() : NULL; }

/* The most dynamic shared memory a launch may ask for beyond the 48 KiB
 * every kernel has: what cudaFuncSetAttribute(...,
 * cudaFuncAttributeMaxDynamicSharedMemorySize, ...) opted in to, for any
 * kernel (a GPU keeps it per kernel; the emulator cannot tell a launch's
 * kernel from another's address), up to sm_90's 227 KiB a block. */
enum { DYN_DEFAULT = 48 << 10, DYN_OPTIN_MAX = 227 << 10 };
static std::atomic<int> dyn_optin{DYN_DEFAULT};

extern "C" cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value) {
    if (!func) return st_emu_ret(cudaErrorInvalidDeviceFunction);
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || value > DYN_OPTIN_MAX) return st_emu_ret(cudaErrorInvalidValue);
        int have = dyn_optin.load();
        while (value > have && !dyn_optin.compare_exchange_weak(have, value)) {
        }
    }
    return cudaSuccess; /* (the carve-out and the others: hints, nothing to do here) */
}

static void run_block(int nt) {
    const size_t per = STACK_BYTES + PAGE;
    if ((size_t)nt > S.stack_cap) {
        if (S.stacks) {
            FIBER_STACK_CLEAN(S.stacks,
                              S.stack_cap * per); /* the range may be mapped again, as device memory */
            munmap(S.stacks, S.stack_cap * per);
        }
        S.stacks = (char *)mmap(NULL, (size_t)nt * per, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (S.stacks == MAP_FAILED) st_emu_die("no memory for %s's thread stacks", S.name);
        for (int i = 0; i < nt; i++) mprotect(S.stacks + (size_t)i * per, PAGE, PROT_NONE);
        S.stack_cap = (size_t)nt;
    }
    S.f.resize((size_t)nt);
    S.pred.assign((size_t)nt, 0);
    S.slots.assign((size_t)(nt + 31) / 32 * 64, 0);
    for (int i = 0; i < nt; i++) {
        fiber &t = S.f[(size_t)i];
        t.tid = unflatten((uint64_t)i, blockDim);
        t.state = READY;
        t.copies.clear();
        t.commits = 0;
        t.exchanges = 0;
        FIBER_STACK_CLEAN(S.stacks + (size_t)i * per + PAGE, STACK_BYTES);
        void **top = (void **)(S.stacks + (size_t)(i + 1) * per); /* 16-byte aligned */
        top[-1] = NULL;                      /* fiber_entry's return address: it never returns */
        top[-2] = (void *)&fiber_entry;      /* where st_emu_switch's ret goes */
        for (int r = 3; r <= 8; r++) top[-r] = NULL; /* rbp, rbx, r12 to r15 */
        t.sp = (void *)(top - 8);
    }
    const bool adversary = S.sched == SCHED_ADVERSARY;
    if (adversary) new_phase(nt);
    for (;;) {
        /* a round: every fiber that may run, in thread order (or the
         * adversary's), each to its next barrier or its end (run_next
         * chains them) */
        const int first = adversary ? adversary_round() : next_ready(0);
        if (first >= 0) {
            S.cur = first;
            threadIdx = S.f[(size_t)first].tid;
            st_emu_switch(&S.main_sp, S.f[(size_t)first].sp);
        }
        /* one pass: each warp released when all its live fibers wait at a
         * warp barrier (that touches no count of the block's), the block's
         * live fibers and those at the block barrier counted */
        int left = 0, at_block = 0, ready = 0; /* ready: fibers the adversary held out of the round */
        bool released = false;
        fiber *f = S.f.data();
        for (int w = 0; w < nt; w += 32) {
            int alive = 0, at_warp = 0;
            const int end = nt < w + 32 ? nt : w + 32;
            for (int i = w; i < end; i++) {
                alive += f[i].state != DONE;
                at_warp += f[i].state == AT_WARP;
                at_block += f[i].state == AT_BLOCK;
                ready += f[i].state == READY;
            }
            left += alive;
            if (at_warp && at_warp == alive) {
                /* every lane at the same exchange: lanes whose exchanges
                 * differ in number (a shuffle some lanes skip, or meet at a
                 * __syncwarp) would take each other's slot sets from then on */
                unsigned x = 0;
                bool first = true;
                for (int i = w; i < end; i++) {
                    if (f[i].state != AT_WARP) continue;
                    if (!first && f[i].exchanges != x)
                        st_emu_die(
                            "%s: lanes of warp %d reach a warp barrier after %u and %u shuffles: a shuffle "
                            "some lanes of the warp skip (its mask names lanes that do not take part)",
                            S.name, w / 32, x, f[i].exchanges);
                    x = f[i].exchanges;
                    first = false;
                }
                for (int i = w; i < end; i++)
                    if (f[i].state == AT_WARP) f[i].state = READY;
                released = true;
            }
        }
        if (left == 0) return;
        if (at_block && at_block == left) {
            for (int i = 0; i < nt; i++)
                if (f[i].state == AT_BLOCK) f[i].state = READY;
            S.releases++;
            released = true;
            if (adversary) new_phase(nt);
        }
        if (!released && !ready)
            st_emu_die("%s: deadlock: some threads of a block wait at a barrier the others never reach", S.name);
    }
}

/* An order of 0 .. n-1: i itself, or (a i + b) mod n with a prime to n
 * (the adversary's). */
struct order_map {
    uint64_t n, a, b;
    uint64_t at(uint64_t i) const { return (uint64_t)(((unsigned __int128)a * i + b) % n); }
};
static uint64_t gcd(uint64_t a, uint64_t b) {
    while (b) {
        const uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}
static order_map order_for(uint64_t n) {
    order_map m = {n ? n : 1, 1, 0};
    if (S.sched != SCHED_ADVERSARY || n < 2) return m;
    m.a = 1 + draw() % (n - 1);
    while (gcd(m.a, n) != 1)
        m.a = m.a % (n - 1) + 1;
    m.b = draw() % n;
    return m;
}

/* ST_CUDAEMU_FAULT=K[:R]: the K-th kernel this process runs faults (as on
 * an illegal address, or an uncorrectable ECC error, Xid 13/31/48 in the
 * driver's log): it does not run, the context is lost, and every later CUDA
 * call returns the sticky error (devices.cpp). With :R, only in the process
 * of MPI rank R (OMPI_COMM_WORLD_RANK). ST_CUDAEMU_FAULT_ONCE=FILE: only in
 * the first process to create FILE, so that a job restarted after the
 * fault runs clean. */
static long fault_at(void) {
    const char *e = getenv("ST_CUDAEMU_FAULT"), *r = getenv("OMPI_COMM_WORLD_RANK");
    if (!e) return 0;
    char *end;
    const long k = strtol(e, &end, 10);
    if (*end == ':' && atol(end + 1) != (r ? atol(r) : 0)) return 0;
    return k;
}
static long kernels_run, fault_k = -1;
static void fault_missed(void) { /* (a test that asked for a fault learns how many kernels ran) */
    if (kernels_run < fault_k)
        fprintf(stderr, "cudaemu: ST_CUDAEMU_FAULT=%ld: no fault, %ld kernels ran\n", fault_k, kernels_run);
}
static bool faults(const char *name) {
    if (fault_k < 0) {
        fault_k = fault_at();
        if (fault_k > 0) atexit(fault_missed);
    }
    if (fault_k <= 0 || ++kernels_run != fault_k) return false;
    const char *once = getenv("ST_CUDAEMU_FAULT_ONCE");
    if (once) {
        const int fd = open(once, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
        if (fd < 0) return false; /* a process before this one faulted */
        close(fd);
    }
    fprintf(stderr,
            "cudaemu: %s faulted (ST_CUDAEMU_FAULT=%ld): an illegal memory access; the context is lost\n",
            name, fault_k);
    st_emu_lose(cudaErrorIllegalAddress);
    return true;
}

/* Run one launch now: block after block, each block's threads as fibers
 * (or as plain calls at a site whose first launch reached no barrier). */
static void run(const st_emu_cfg &c, void (*fn)(void *), void *ctx, int *site, const char *name) {
    const uint64_t nt = (uint64_t)c.block.x * c.block.y * c.block.z;
    std::lock_guard<std::mutex> one(launch_lock);
    if (st_emu_lost() != cudaSuccess || faults(name)) return; /* a lost context runs nothing */
    S.body = fn;
    S.ctx = ctx;
    S.name = name;
    S.plain = *site == 1;
    S.saw_barrier = false;
    sched_from_env();
    st_emu_set_running(name);
    gridDim = c.grid;
    blockDim = c.block;
    /* the adversary runs the blocks, and the threads of a launch without
     * fibers, in an order of its own */
    const uint64_t nb = (uint64_t)c.grid.x * c.grid.y * c.grid.z;
    const order_map blocks = order_for(nb), threads = order_for(nt);
    S.dyn_bytes = c.smem;
    if (S.dyn.size() * sizeof(uint4) < c.smem) S.dyn.resize((c.smem + sizeof(uint4) - 1) / sizeof(uint4));
    for (uint64_t bi = 0; bi < nb; bi++) {
        const uint64_t b = blocks.at(bi);
        blockIdx = unflatten(b, c.grid);
        block_no++;
        if (c.smem) memset(S.dyn.data(), POISON, c.smem);
        if (S.plain && threads.a == 1 && threads.b == 0) { /* in order: x fastest, no division a thread */
            int i = 0;
            for (unsigned z = 0; z < c.block.z; z++)
                for (unsigned y = 0; y < c.block.y; y++)
                    for (unsigned x = 0; x < c.block.x; x++) {
                        threadIdx = uint3{x, y, z};
                        S.cur = i++;
                        fn(ctx);
                    }
        } else if (S.plain) {
            for (uint64_t k = 0; k < nt; k++) {
                const uint64_t i = threads.at(k);
                threadIdx = unflatten(i, c.block);
                S.cur = (int)i;
                fn(ctx);
            }
        } else {
            run_block((int)nt);
        }
    }
    if (*site == 0) *site = S.saw_barrier ? 2 : 1;
    st_emu_set_running(NULL);
}

void st_emu_check_pointer(const char *name, int index, const void *p) {
    if (!st_emu_is_device(p) && !st_emu_is_pinned(p, 1))
        st_emu_die("%s: argument %d is %p, which is neither device memory nor pinned host memory (a host pointer, "
                   "or a freed block, that a GPU would fault on)",
                   name, index + 1, p);
}

void st_emu_submit(const st_emu_cfg &c, const char *name, int *site, void (*fn)(void *), void (*drop)(void *),
                   void *ctx, const void *const *ptrs, int nptrs) {
    const uint64_t nt = (uint64_t)c.block.x * c.block.y * c.block.z;
    if (st_emu_lost() != cudaSuccess) { /* the launch's error: the sticky one */
        st_emu_ret(st_emu_lost());
        drop(ctx);
        return;
    }
    if (!st_emu_stream_ok(c.stream)) {
        st_emu_ret(cudaErrorInvalidResourceHandle);
        drop(ctx);
        return;
    }
    if (nt == 0 || nt > 1024 || c.block.z > 64 || c.grid.x == 0 || c.grid.y == 0 || c.grid.z == 0 ||
        c.grid.y > 65535 || c.grid.z > 65535 || c.grid.x > 2147483647u || c.smem > (size_t)dyn_optin.load()) {
        fprintf(stderr, "cudaemu: %s: launch grid (%u, %u, %u) block (%u, %u, %u) shared %zu refused\n", name,
                c.grid.x, c.grid.y, c.grid.z, c.block.x, c.block.y, c.block.z, c.smem);
        st_emu_ret(cudaErrorInvalidConfiguration);
        st_emu_capture_invalidate(c.stream); /* (a capture that lost a launch is invalid, as CUDA's) */
        drop(ctx);
        return;
    }
    if (st_emu_capture_check(c.stream, false) != cudaSuccess) { /* (its error set) */
        drop(ctx);
        return;
    }
    const st_emu_cfg cfg = c;
    /* the arguments go with the last copy of the op: after it runs, or
     * with a captured graph (which runs it at each launch) */
    std::shared_ptr<void> args(ctx, drop);
    st_emu_enqueue_uses(
        c.stream, [cfg, fn, args, site, name] { run(cfg, fn, args.get(), site, name); },
        std::vector<const void *>(ptrs, ptrs + nptrs), name);
}
