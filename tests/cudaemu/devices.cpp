/* The CUDA emulator's devices and errors (tests/cudaemu/README.md): one
 * device, or ST_CUDAEMU_DEVICES of them (all in this process's memory, for
 * several ranks on one machine), sm_90, named as the emulator. */
#include "internal.h"
#include "machine.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static thread_local cudaError_t last_error = cudaSuccess;
static int lost = cudaSuccess; /* the context's sticky error (atomic) */

cudaError_t st_emu_lost(void) { return (cudaError_t)__atomic_load_n(&lost, __ATOMIC_ACQUIRE); }
void st_emu_lose(cudaError_t e) {
    int none = cudaSuccess;
    __atomic_compare_exchange_n(&lost, &none, (int)e, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

cudaError_t st_emu_ret(cudaError_t e) {
    if (e != cudaSuccess) last_error = e;
    return e;
}

void st_emu_die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cudaemu: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fflush(stderr);
    abort();
}

/* The machine's devices and those this process sees (machine.h). */
static int visible(int *map) { return st_emu_env_visible(map); }
static int devices(void) { return visible(NULL); }
extern "C" int st_emu_machine_device(int d) {
    int map[ST_EMU_MAX_DEVICES];
    return d >= 0 && d < visible(map) ? map[d] : -1;
}
static thread_local int current;

/* ST_CUDAEMU_HANG_OPEN=1: the first question to the driver never returns,
 * as with a GPU that stopped answering before the run began (the start-up
 * watch's test, session.c). */
extern "C" cudaError_t cudaGetDeviceCount(int *n) {
    const char *hang = getenv("ST_CUDAEMU_HANG_OPEN");
    if (hang && atoi(hang) == 1)
        for (;;)
            sleep(60);
    *n = devices();
    return *n ? cudaSuccess : st_emu_ret(cudaErrorNoDevice);
}
/* The versions a CUDA 13.0 driver and runtime report. */
extern "C" cudaError_t cudaDriverGetVersion(int *v) {
    *v = 13000;
    return cudaSuccess;
}
extern "C" cudaError_t cudaRuntimeGetVersion(int *v) {
    *v = 13000;
    return cudaSuccess;
}
extern "C" cudaError_t cudaSetDevice(int d) {
    if (d < 0 || d >= devices()) return st_emu_ret(cudaErrorInvalidDevice);
    current = d;
    return cudaSuccess;
}
extern "C" cudaError_t cudaGetDevice(int *d) {
    *d = current;
    return cudaSuccess;
}
static void capability(int *major, int *minor) { st_emu_env_capability(major, minor); }
extern "C" cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) {
    if (d < 0 || d >= devices()) return st_emu_ret(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, ST_EMU_DEVICE_NAME);
    for (int i = 0; i < 16; i++) /* one per device of the machine */
        p->uuid.bytes[i] = (char)(0x5c + i * 17 + st_emu_machine_device(d));
    capability(&p->major, &p->minor);
    p->multiProcessorCount = ST_EMU_SMS;
    p->totalGlobalMem = st_emu_mem_total();
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->sharedMemPerBlock = 48 << 10;
    return cudaSuccess;
}
extern "C" cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d) {
    if (d < 0 || d >= devices()) return st_emu_ret(cudaErrorInvalidDevice);
    switch (a) {
    case cudaDevAttrClockRate: *v = 1000000; return cudaSuccess; /* kHz */
    case cudaDevAttrMultiProcessorCount:
        *v = ST_EMU_SMS;
        return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: {
        int mn;
        capability(v, &mn);
        return cudaSuccess;
    }
    case cudaDevAttrComputeCapabilityMinor: {
        int mj;
        capability(&mj, v);
        return cudaSuccess;
    }
    case cudaDevAttrWarpSize: *v = 32; return cudaSuccess;
    case cudaDevAttrMaxThreadsPerBlock: *v = 1024; return cudaSuccess;
    default: return st_emu_ret(cudaErrorInvalidValue);
    }
}
extern "C" cudaError_t cudaDeviceGetPCIBusId(char *id, int len, int d) {
    if (d < 0 || d >= devices()) return st_emu_ret(cudaErrorInvalidDevice);
    st_emu_env_pci(id, (size_t)len, st_emu_machine_device(d));
    return cudaSuccess;
}
extern "C" cudaError_t cudaDeviceSynchronize(void) {
    if (st_emu_capture_refuse("cudaDeviceSynchronize")) return cudaErrorStreamCaptureUnsupported;
    st_emu_run_all();
    ST_EMU_RETURN_IF_LOST();
    return cudaSuccess;
}
extern "C" cudaError_t cudaGetLastError(void) { /* a lost context's error is sticky: never cleared */
    cudaError_t e = st_emu_lost() != cudaSuccess ? st_emu_lost() : last_error;
    last_error = cudaSuccess;
    return e;
}
extern "C" cudaError_t cudaPeekAtLastError(void) {
    return st_emu_lost() != cudaSuccess ? st_emu_lost() : last_error;
}
extern "C" const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorIllegalAddress:
        return "an illegal memory access was encountered";
    case cudaErrorMisalignedAddress:
        return "misaligned address";
    case cudaErrorStreamCaptureUnsupported:
        return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
        return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureWrongThread:
        return "attempt to terminate a thread-local capture sequence from another thread";
    case cudaErrorIllegalState:
        return "the resource is in an illegal state";
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
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorIllegalAddress:
        return "cudaErrorIllegalAddress";
    case cudaErrorMisalignedAddress:
        return "cudaErrorMisalignedAddress";
    case cudaErrorStreamCaptureUnsupported:
        return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated:
        return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureWrongThread:
        return "cudaErrorStreamCaptureWrongThread";
    case cudaErrorIllegalState:
        return "cudaErrorIllegalState";
    default: return "cudaErrorUnknown";
    }
}

