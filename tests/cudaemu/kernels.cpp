/* The CUDA emulator's kernels (tests/cudaemu/README.md): a launch is checked
 * as a GPU checks it and queued on its stream (streams.cpp); when it runs,
 * its blocks run one after another, each block's threads as fibers on their
 * own stacks, so __syncthreads and the warp shuffles (emu.h) mean what they
 * do on a GPU, and a barrier some threads never reach stops with the
 * kernel's name. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <mutex>
#include <vector>

enum { PAGE = 4096 };

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

/* The first fiber from index `from` on that may run, or -1. */
static int next_ready(int from) {
    const int nt = (int)S.f.size();
    for (int j = from; j < nt; j++)
        if (S.f[(size_t)j].state == READY) return j;
    return -1;
}

/* Leave the current fiber (its stack pointer into *save) for the next one
 * that may run in this round, in thread order, or for the scheduler when
 * none is left: one switch per fiber a round, not two through the
 * scheduler. */
static void run_next(void **save) {
    const int j = next_ready(S.cur + 1);
    if (j < 0) {
        st_emu_switch(save, S.main_sp);
        return;
    }
    S.cur = j;
    threadIdx = S.f[(size_t)j].tid;
    st_emu_switch(save, S.f[(size_t)j].sp);
}

static void fiber_entry(void) {
    S.body(S.ctx);
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
    *lane = S.cur & 31;
    return &S.slots[(size_t)(S.cur >> 5) * 32];
}

static void run_block(int nt) {
    const size_t per = STACK_BYTES + PAGE;
    if ((size_t)nt > S.stack_cap) {
        if (S.stacks) munmap(S.stacks, S.stack_cap * per);
        S.stacks = (char *)mmap(NULL, (size_t)nt * per, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (S.stacks == MAP_FAILED) st_emu_die("no memory for %s's thread stacks", S.name);
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
    for (;;) {
        /* a round: every fiber that may run, in thread order, each to its
         * next barrier or its end (run_next chains them) */
        const int first = next_ready(0);
        if (first >= 0) {
            S.cur = first;
            threadIdx = S.f[(size_t)first].tid;
            st_emu_switch(&S.main_sp, S.f[(size_t)first].sp);
        }
        /* one pass: each warp released when all its live fibers wait at a
         * warp barrier (that touches no count of the block's), the block's
         * live fibers and those at the block barrier counted */
        int left = 0, at_block = 0;
        bool released = false;
        fiber *f = S.f.data();
        for (int w = 0; w < nt; w += 32) {
            int alive = 0, at_warp = 0;
            const int end = nt < w + 32 ? nt : w + 32;
            for (int i = w; i < end; i++) {
                alive += f[i].state != DONE;
                at_warp += f[i].state == AT_WARP;
                at_block += f[i].state == AT_BLOCK;
            }
            left += alive;
            if (at_warp && at_warp == alive) {
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
        }
        if (!released)
            st_emu_die("%s: deadlock: some threads of a block wait at a barrier the others never reach", S.name);
    }
}

/* Run one launch now: block after block, each block's threads as fibers
 * (or as plain calls at a site whose first launch reached no barrier). */
static void run(const st_emu_cfg &c, void (*fn)(void *), void *ctx, int *site, const char *name) {
    const uint64_t nt = (uint64_t)c.block.x * c.block.y * c.block.z;
    std::lock_guard<std::mutex> one(launch_lock);
    S.body = fn;
    S.ctx = ctx;
    S.name = name;
    S.plain = *site == 1;
    S.saw_barrier = false;
    st_emu_set_running(name);
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
                   void *ctx) {
    const uint64_t nt = (uint64_t)c.block.x * c.block.y * c.block.z;
    if (!st_emu_stream_ok(c.stream)) {
        st_emu_ret(cudaErrorInvalidResourceHandle);
        drop(ctx);
        return;
    }
    if (nt == 0 || nt > 1024 || c.block.z > 64 || c.grid.x == 0 || c.grid.y == 0 || c.grid.z == 0 ||
        c.grid.y > 65535 || c.grid.z > 65535 || c.grid.x > 2147483647u || c.smem > (48u << 10)) {
        fprintf(stderr, "cudaemu: %s: launch grid (%u, %u, %u) block (%u, %u, %u) shared %zu refused\n", name,
                c.grid.x, c.grid.y, c.grid.z, c.block.x, c.block.y, c.block.z, c.smem);
        st_emu_ret(cudaErrorInvalidConfiguration);
        drop(ctx);
        return;
    }
    const st_emu_cfg cfg = c;
    st_emu_enqueue(c.stream, [cfg, fn, drop, ctx, site, name] {
        run(cfg, fn, ctx, site, name);
        drop(ctx);
    });
}
