/* A CUDA driver that shows the hardware probe one GPU and nothing more, for
 * tests: built as libcuda.so.1 into a folder put first on LD_LIBRARY_PATH,
 * where the probe (src/hw/probe.c) loads the driver with dlopen. It has the
 * driver API functions the probe looks up (one "Fake GPU", compute
 * capability 9.0, 132 SMs, 80 GiB) and none of those the CUDA runtime needs
 * (cuGetProcAddress first), so the runtime finds no device it can use: a
 * GPU the driver sees and the run cannot, as one without the CUDA libraries
 * or with a runtime newer than the driver is. tests/e2e/gpu_unusable.sh
 * builds it. ST_FAKE_GPUS=N shows N such GPUs (1 to 8), on PCI buses 3B,
 * 3C, ... (sick_nvml.c finds them there). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int gpus(void) {
    const char *e = getenv("ST_FAKE_GPUS");
    const int n = e ? atoi(e) : 1;
    return n < 1 ? 1 : n > 8 ? 8 : n;
}

int cuInit(unsigned flags) { return (void)flags, 0; }
int cuDriverGetVersion(int *v) { return *v = 13000, 0; }
int cuDeviceGetCount(int *n) { return *n = gpus(), 0; }
int cuDeviceGet(int *d, int i) { return *d = i, 0; }
int cuDeviceGetName(char *name, int len, int d) {
    (void)d;
    if (len > 0) strncpy(name, "Fake GPU", (size_t)len - 1)[len - 1] = '\0';
    return 0;
}
int cuDeviceTotalMem_v2(unsigned long *bytes, int d) { return (void)d, *bytes = 80ul << 30, 0; }
/* 75, 76: compute capability major and minor; 16: multiprocessors */
int cuDeviceGetAttribute(int *v, int attr, int d) {
    (void)d;
    *v = attr == 75 ? 9 : attr == 76 ? 0 : attr == 16 ? 132 : 0;
    return 0;
}
int cuGetErrorString(int e, const char **s) { return (void)e, *s = "no error", 0; }
/* (by which NVML finds it: sick_nvml.c) */
int cuDeviceGetPCIBusId(char *pci, int len, int d) {
    if (len > 0) snprintf(pci, (size_t)len, "0000:%02X:00.0", 0x3B + d);
    return 0;
}
