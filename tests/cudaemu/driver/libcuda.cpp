/* The CUDA emulator's driver (tests/cudaemu/README.md): the part of
 * libcuda.so.1's driver API that scaletrain's hardware probe calls
 * (src/hw/probe.c: cuInit, the device count, each device's name, PCI bus
 * id, memory and attributes), built as build-emu/driver/libcuda.so.1, where
 * the emulator's binaries find it (their run path). So `check`, `plan` and
 * `bench` see the emulated devices as the driver would show them, as
 * training does through the runtime (devices.cpp), and plan for them. The
 * same environment describes both (machine.h). Signatures: the documented C
 * ABI of the driver API, as probe.c declares them (no cuda.h needed). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../machine.h"

typedef int CUresult;
typedef int CUdevice;
enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
};
enum { ATTR_MULTIPROCESSOR_COUNT = 16, ATTR_CC_MAJOR = 75, ATTR_CC_MINOR = 76 };

static bool initialised;

#define ST_EMU_API extern "C" __attribute__((visibility("default")))

/* ST_CUDAEMU_HANG_OPEN=1: never returns, as the runtime's first call
 * (devices.cpp), for the probe's watch (train.device_timeout_s). */
ST_EMU_API CUresult cuInit(unsigned int flags) {
    const char *hang = getenv("ST_CUDAEMU_HANG_OPEN");
    if (hang && atoi(hang) == 1)
        for (;;)
            sleep(60);
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    initialised = true;
    return CUDA_SUCCESS;
}
/* (the version a CUDA 13.0 driver reports, as the runtime's cudaDriverGetVersion) */
ST_EMU_API CUresult cuDriverGetVersion(int *v) {
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    *v = 13000;
    return CUDA_SUCCESS;
}
ST_EMU_API CUresult cuDeviceGetCount(int *n) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (!n) return CUDA_ERROR_INVALID_VALUE;
    *n = st_emu_env_visible(NULL);
    return CUDA_SUCCESS;
}
static bool valid(CUdevice d) { return initialised && d >= 0 && d < st_emu_env_visible(NULL); }
ST_EMU_API CUresult cuDeviceGet(CUdevice *d, int ordinal) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (!d || ordinal < 0 || ordinal >= st_emu_env_visible(NULL)) return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}
ST_EMU_API CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
    if (!valid(d)) return CUDA_ERROR_INVALID_DEVICE;
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", ST_EMU_DEVICE_NAME);
    return CUDA_SUCCESS;
}
ST_EMU_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) {
    if (!valid(d)) return CUDA_ERROR_INVALID_DEVICE;
    *bytes = st_emu_env_mem_total();
    return CUDA_SUCCESS;
}
ST_EMU_API CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
    if (!valid(d)) return CUDA_ERROR_INVALID_DEVICE;
    int major, minor;
    st_emu_env_capability(&major, &minor);
    switch (attr) {
    case ATTR_MULTIPROCESSOR_COUNT:
        *v = ST_EMU_SMS;
        return CUDA_SUCCESS;
    case ATTR_CC_MAJOR:
        *v = major;
        return CUDA_SUCCESS;
    case ATTR_CC_MINOR:
        *v = minor;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}
ST_EMU_API CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice d) {
    if (!valid(d)) return CUDA_ERROR_INVALID_DEVICE;
    if (!id || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    int map[ST_EMU_MAX_DEVICES];
    st_emu_env_visible(map);
    st_emu_env_pci(id, (size_t)len, map[d]);
    return CUDA_SUCCESS;
}
ST_EMU_API CUresult cuGetErrorString(CUresult e, const char **s) {
    switch (e) {
    case CUDA_SUCCESS:
        *s = "no error";
        return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_VALUE:
        *s = "invalid argument";
        return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_INITIALIZED:
        *s = "initialization error";
        return CUDA_SUCCESS;
    case CUDA_ERROR_NO_DEVICE:
        *s = "no CUDA-capable device is detected";
        return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_DEVICE:
        *s = "invalid device ordinal";
        return CUDA_SUCCESS;
    default:
        *s = NULL;
        return CUDA_ERROR_INVALID_VALUE;
    }
}
