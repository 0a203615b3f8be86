/* An NVML whose GPU stopped answering its readings, for tests: built as
 * libnvidia-ml.so.1 into a folder put first on LD_LIBRARY_PATH, where the
 * GPU monitor (src/train/gpumon.c) loads NVML with dlopen. It finds any
 * device by its PCI address, and nvmlDeviceGetUtilizationRates, the
 * monitor's first reading in the step loop, never returns (as nvidia-smi
 * hangs on such a GPU); it knows no device by index, so the hardware probe
 * finds none through it. tests/e2e/emu_device_watch.sh builds it. */
#include <unistd.h>

typedef void *dev;
int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
int nvmlDeviceGetCount_v2(unsigned *n) { return *n = 0, 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, dev *d) { return (void)i, *d = 0, 2; }
int nvmlDeviceGetHandleByPciBusId_v2(const char *pci, dev *d) { return (void)pci, *d = (dev)1, 0; }
int nvmlDeviceGetName(dev d, char *name, unsigned len) { return (void)d, (void)name, (void)len, 3; }
int nvmlDeviceGetMemoryInfo(dev d, void *m) { return (void)d, (void)m, 3; }
int nvmlDeviceGetNvLinkState(dev d, unsigned l, int *s) { return (void)d, (void)l, *s = 0, 3; }
int nvmlDeviceGetTopologyCommonAncestor(dev a, dev b, int *t) { return (void)a, (void)b, *t = 0, 3; }
int nvmlDeviceGetUtilizationRates(dev d, void *u) {
    (void)d;
    (void)u;
    for (;;)
        pause();
}
int nvmlDeviceGetPowerUsage(dev d, unsigned *mw) { return (void)d, *mw = 0, 0; }
int nvmlDeviceGetTemperature(dev d, int sensor, unsigned *t) { return (void)d, (void)sensor, *t = 0, 0; }
const char *nvmlErrorString(int r) { return (void)r, "the test's NVML"; }
