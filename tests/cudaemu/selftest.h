/* The CUDA emulator's own kernels with known faults (selftest.cu), for
 * tests/test_cudaemu.c: each shows a check of kernels.cpp firing. Built in
 * the emulator's build only. */
#ifndef ST_CUDAEMU_SELFTEST_H
#define ST_CUDAEMU_SELFTEST_H

#ifdef __cplusplus
extern "C" {
#endif

/* The fibers' order from now on: thread order (0), or the adversary's
 * (ST_CUDAEMU_SCHED=adversary) with its draws from `seed`. */
void st_emu_sched_set(int adversary, unsigned long long seed);

enum {
    ST_EMU_FAULT_BARRIER,  /* threads read other warps' writes with no barrier between */
    ST_EMU_FAULT_REUSE,    /* a buffer written again while other warps still read it (the
                            * double-buffered loop's second barrier left out) */
    ST_EMU_FAULT_CP_WAIT,  /* cp.async copies read after the barrier but before their wait */
    ST_EMU_FAULT_UNWRITTEN /* shared memory read before the block wrote it */
};

/* Runs the kernel with `fault` (or, with fixed, the same kernel done
 * right) on 4 blocks of 128 threads; returns how many of its outputs are
 * wrong, or -1 when a CUDA call failed. */
int st_emu_selftest(int fault, int fixed);

/* Runs a chain of 24 warp shuffles of every kind (xor, down, up, from a
 * lane), each lane's value feeding its next, on 4 blocks of 128 threads;
 * returns how many outputs differ from the host's chain, or -1 when a CUDA
 * call failed. */
int st_emu_selftest_shuffles(void);

/* A warp whose lanes meet at a warp barrier after different numbers of
 * shuffles (half at __syncwarp, half in a shuffle): the emulator stops the
 * process (SIGABRT), naming the kernel; returns only if it did not. */
int st_emu_selftest_shuffle_skip(void);

/* Fills p's first n floats with 3 through a kernel that takes p inside a
 * struct argument (an st_fbuf), on d's compute stream; returns 0, or -1
 * when a CUDA call failed. A p that is not device memory stops the process
 * at the launch, as a pointer argument does. */
struct st_device;
int st_emu_selftest_struct_arg(struct st_device *d, void *p, int n);

/* Dynamic shared memory (extern __shared__) of `bytes` (a multiple of
 * 512), on 4 blocks of 128 threads: each thread writes its ints there,
 * then reads those of thread 127 - t; with every_block 0, block 0 alone
 * writes (the others then read what a GPU's shared memory holds at a
 * block's start). With optin, the kernel is first opted in to `bytes`
 * (cudaFuncSetAttribute, cudaFuncAttributeMaxDynamicSharedMemorySize).
 * Returns how many outputs are wrong, -1 when a CUDA call failed, or -2
 * when the launch was refused. */
int st_emu_selftest_dynamic_shared(int bytes, int optin, int every_block);

/* The next NCCL collective of this process loses its peer, as a rank that
 * died or a broken link: ncclCommGetAsyncError says ncclRemoteError from its
 * call on, and its end on the stream never comes until the communicator is
 * aborted (NCCL's kernel spins until then): a clean-up that frees device
 * memory, which waits for the device, hangs unless it was aborted first
 * (under ST_CUDAEMU_LAZY=0, which runs work inside the call that queues it,
 * the end is dropped at once instead). */
void st_emu_nccl_lose_next(void);

#ifdef __cplusplus
}
#endif

#endif
