/* A CUDA driver whose GPU stopped answering, for tests: built as
 * libcuda.so.1 into a folder put first on LD_LIBRARY_PATH, where the
 * hardware probe (src/hw/probe.c) loads the driver with dlopen. cuInit never
 * returns, as on a GPU that fell off the bus (nvidia-smi then hangs the
 * same way); the other functions the probe looks up are there and are never
 * reached. tests/e2e/gpu_probe_hang.sh builds it. */
#include <unistd.h>

int cuInit(unsigned flags) {
    (void)flags;
    for (;;)
        pause();
}
int cuDriverGetVersion(int *v) { return *v = 0, 1; }
int cuDeviceGetCount(int *n) { return *n = 0, 1; }
int cuDeviceGet(int *d, int i) { return *d = i, 1; }
int cuDeviceGetName(char *name, int len, int d) { return (void)name, (void)len, (void)d, 1; }
int cuDeviceTotalMem_v2(unsigned long *bytes, int d) { return *bytes = 0, (void)d, 1; }
int cuDeviceGetAttribute(int *v, int attr, int d) { return *v = 0, (void)attr, (void)d, 1; }
int cuGetErrorString(int e, const char **s) { return *s = "hung", (void)e, 0; }
