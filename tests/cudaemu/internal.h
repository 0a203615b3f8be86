/* What the CUDA emulator's parts (tests/cudaemu/README.md) share: errors,
 * device memory (memory.cpp), the streams' queues (streams.cpp) and running
 * a kernel (kernels.cpp). */
#ifndef ST_CUDAEMU_INTERNAL_H
#define ST_CUDAEMU_INTERNAL_H

#include "emu.h"

#include <functional>
#include <vector>

/* cudaGetLastError's error, set when e is one (returns e). */
cudaError_t st_emu_ret(cudaError_t e);
/* The device's context, lost to a fault (ST_CUDAEMU_FAULT, kernels.cpp):
 * cudaSuccess while it is not, else the sticky error every later call
 * returns, as the CUDA runtime's calls do after a kernel faults (an illegal
 * address, an uncorrectable ECC error): nothing queued runs any more. */
cudaError_t st_emu_lost(void);
void st_emu_lose(cudaError_t e);
#define ST_EMU_RETURN_IF_LOST()                                                                              \
    do {                                                                                                     \
        const cudaError_t lost_ = st_emu_lost();                                                             \
        if (lost_ != cudaSuccess) return st_emu_ret(lost_);                                                  \
    } while (0)
/* Print "cudaemu: ..." and abort: a fault no CUDA call could report. */
[[noreturn]] void st_emu_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* --- memory.cpp --- */
/* Device memory readable and writable while a window is open (nested). */
void st_emu_device_window(bool open);
struct st_emu_window {
    st_emu_window() { st_emu_device_window(true); }
    ~st_emu_window() { st_emu_device_window(false); }
};
bool st_emu_device_range(const void *p, size_t n); /* [p, p + n) inside one device allocation */
bool st_emu_is_device(const void *p);              /* p inside a device allocation's mapping */
bool st_emu_is_pinned(const void *p, size_t n);    /* [p, p + n) inside one cudaHostAlloc block */
void st_emu_set_running(const char *kernel);       /* named in a fault's message (NULL: host code) */
size_t st_emu_mem_total(void);                     /* the device's size in bytes */
extern "C" int st_emu_machine_device(int d);       /* visible device d's index on the machine (-1: none) */

/* --- streams.cpp --- */
bool st_emu_stream_ok(cudaStream_t s);
/* Queue op on stream s (checked by the caller): it runs with the device
 * window open, now (ST_CUDAEMU_LAZY=0) or when something waits for it. */
void st_emu_enqueue(cudaStream_t s, std::function<void()> op);
/* The same; `collective`: op ends a collective (nccl.cpp), which
 * ST_CUDAEMU_LAZY=2 runs as late as it may, and the stream is marked so. */
void st_emu_enqueue_on(cudaStream_t s, std::function<void()> op, bool collective);
/* st_emu_enqueue for work that reads or writes device or pinned memory at
 * `uses` (`what` names it): a capture keeps them with the op, and each
 * cudaGraphLaunch stops the process, naming the op, when one of them was
 * freed since (a graph must not outlive its memory: a GPU faults or
 * corrupts). Pointers to neither kind are left out. */
void st_emu_enqueue_uses(cudaStream_t s, std::function<void()> op, std::vector<const void *> uses,
                         const char *what);
int st_emu_lazy_mode(void); /* ST_CUDAEMU_LAZY: 0, 1 (the default) or 2 */
/* A call that waits for the device or allocates, made while this thread
 * captures a stream (cudaStreamCaptureModeThreadLocal's prohibitions):
 * says so on stderr, invalidates the capture, sets
 * cudaErrorStreamCaptureUnsupported and returns true; false (nothing done)
 * when the thread captures nothing. */
bool st_emu_capture_refuse(const char *what);
/* Work about to be queued on stream s (from any thread): cudaSuccess, or,
 * when s is capturing, the error CUDA gives it there (set for
 * cudaGetLastError too): cudaErrorStreamCaptureInvalidated once the
 * capture was invalidated; cudaErrorStreamCaptureUnsupported, invalidating
 * it, for a copy with a pageable side (`pageable`) and for all work under
 * ST_CUDAEMU_CAPTURE_FAIL=1. */
cudaError_t st_emu_capture_check(cudaStream_t s, bool pageable);
/* A launch refused on a capturing stream: the capture is invalidated. */
void st_emu_capture_invalidate(cudaStream_t s);
/* Run everything queued on every stream (a device-wide synchronisation). */
void st_emu_run_all(void);

/* --- kernels.cpp --- */
void st_emu_kernel(const st_emu_cfg &c, void (*body)(void *), void *ctx, int *site, const char *name);

#endif
