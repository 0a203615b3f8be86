/* An NVML with one GPU whose health readings a test sets, for tests: built
 * as libnvidia-ml.so.1 into a folder put first on LD_LIBRARY_PATH next to
 * tests/lib/one_gpu_driver.c's libcuda.so.1, so that the hardware probe
 * (src/hw/probe.c) finds one GPU and reads it through this. The readings
 * come from the environment: ST_FAKE_NVML_REMAP (pending, failed; unset:
 * neither), ST_FAKE_NVML_ECC (uncorrectable errors since the driver loaded;
 * unset 0), ST_FAKE_NVML_CLOCKS (the clock event reasons' mask; unset 0x1,
 * idle; a list, one value a reading: below); the value "unsupported" makes that reading
 * NVML_ERROR_NOT_SUPPORTED (a GPU without ECC, a pre-Ampere GPU); ST_FAKE_NVML_XID, the driver's Xid errors
 * (below). Built with -DST_FAKE_NVML_OLD it lacks the health and event functions, as a driver older than them
 * does. tests/e2e/gpu_health.sh builds it, and tests/e2e/emu_gpu_slowdown.sh for the CUDA emulator's GPUs,
 * which the training run's GPU monitor finds in it by their PCI address.
 * ST_FAKE_NVML_BUSY_FIRST=1: NVML numbers another GPU first, 79 of its 80
 * GiB held, as on a machine where CUDA_VISIBLE_DEVICES hides it from CUDA;
 * the test's GPU is NVML's second, found by one_gpu_driver.c's PCI bus id.
 * ST_FAKE_GPUS=N (as one_gpu_driver.c's): N GPUs, found by their PCI bus ids
 * (3B, 3C, ...), each pair behind the host bridge unless
 * ST_FAKE_NVML_NVLINK_PAIRS ("0-1,2-3") joins it by NVLink (peer-to-peer
 * over NVLink OK; each GPU of a pair with active links). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void *dev;
enum { OK = 0, NOT_SUPPORTED = 3 };
enum { NOT_FOUND = 6 };
static dev the_gpu = (dev)0x1, busy_gpu = (dev)0x3;
static int busy_first(void) {
    const char *e = getenv("ST_FAKE_NVML_BUSY_FIRST");
    return e && *e == '1';
}

int nvmlInit_v2(void) { return OK; }
int nvmlShutdown(void) { return OK; }
int nvmlDeviceGetCount_v2(unsigned *n) { return *n = busy_first() ? 2 : 1, OK; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, dev *d) {
    dev *order[2] = {busy_first() ? &busy_gpu : &the_gpu, busy_first() ? &the_gpu : NULL};
    *d = i < 2 && order[i] ? *order[i] : 0;
    return *d ? OK : 2;
}
/* ST_FAKE_GPUS's GPU k: handle 0x10 + k (k 0 is the_gpu) */
static int fake_gpus(void) {
    const char *e = getenv("ST_FAKE_GPUS");
    return e ? atoi(e) : 1;
}
static int index_of(dev d) { return d == the_gpu ? 0 : (int)((char *)d - (char *)0x10); }
int nvmlDeviceGetHandleByPciBusId_v2(const char *pci, dev *d) {
    if (busy_first() && strcmp(pci, "0000:3B:00.0") != 0) return *d = 0, NOT_FOUND;
    unsigned bus = 0;
    const int k = sscanf(pci, "%*x:%x:", &bus) == 1 ? (int)bus - 0x3B : 0;
    if (k > 0 && k < fake_gpus()) return *d = (dev)((char *)0x10 + k), OK;
    return *d = the_gpu, OK;
}
/* whether ST_FAKE_NVML_NVLINK_PAIRS joins GPUs a and b (b < 0: a to any) */
static int joined(int a, int b) {
    const char *e = getenv("ST_FAKE_NVML_NVLINK_PAIRS");
    int x, y, n;
    while (e && sscanf(e, "%d-%d%n", &x, &y, &n) == 2) {
        if ((x == a && (b < 0 || y == b)) || (y == a && (b < 0 || x == b))) return 1;
        e += n;
        e += *e == ',';
    }
    return 0;
}
int nvmlDeviceGetP2PStatus(dev a, dev b, int caps, int *status) {
    if (caps != 2) return NOT_SUPPORTED;                /* (NVML_P2P_CAPS_INDEX_NVLINK only) */
    *status = joined(index_of(a), index_of(b)) ? 0 : 5; /* NVML_P2P_STATUS_OK, or a reason it is not */
    return OK;
}
int nvmlDeviceGetName(dev d, char *name, unsigned len) {
    (void)d;
    if (len > 0) strncpy(name, "Fake GPU", len - 1)[len - 1] = '\0';
    return OK;
}
struct memory { unsigned long long total, free, used; };
int nvmlDeviceGetMemoryInfo(dev d, struct memory *m) {
    m->total = 80ull << 30;
    m->used = d == busy_gpu ? 79ull << 30 : 1ull << 30;
    m->free = m->total - m->used;
    return OK;
}
int nvmlDeviceGetNvLinkState(dev d, unsigned l, int *s) {
    if (l < 4 && joined(index_of(d), -1)) return *s = 1, OK; /* (four links up) */
    return *s = 0, NOT_SUPPORTED;
}
/* (NVML_TOPOLOGY_INTERNAL for a GPU and itself, else _HOSTBRIDGE) */
int nvmlDeviceGetTopologyCommonAncestor(dev a, dev b, int *t) { return *t = a == b ? 0 : 30, OK; }
struct util { unsigned gpu, memory; };
int nvmlDeviceGetUtilizationRates(dev d, struct util *u) { return (void)d, u->gpu = u->memory = 0, OK; }
int nvmlDeviceGetPowerUsage(dev d, unsigned *mw) { return (void)d, *mw = 70000, OK; }
int nvmlDeviceGetTemperature(dev d, int sensor, unsigned *t) { return (void)d, (void)sensor, *t = 35, OK; }
const char *nvmlErrorString(int r) { return r == NOT_SUPPORTED ? "Not Supported" : "the test's NVML"; }

#ifndef ST_FAKE_NVML_OLD
static int reading(const char *name, unsigned long long unset, unsigned long long *v) {
    const char *e = getenv(name);
    if (e && !strcmp(e, "unsupported")) return NOT_SUPPORTED;
    *v = e ? strtoull(e, NULL, 0) : unset;
    return OK;
}
int nvmlDeviceGetRemappedRows(dev d, unsigned *corr, unsigned *unc, unsigned *pending, unsigned *failed) {
    (void)d;
    const char *e = getenv("ST_FAKE_NVML_REMAP");
    if (e && !strcmp(e, "unsupported")) return NOT_SUPPORTED;
    *corr = *unc = 0;
    *pending = e && !strcmp(e, "pending");
    *failed = e && !strcmp(e, "failed");
    return OK;
}
int nvmlDeviceGetTotalEccErrors(dev d, int type, int counter, unsigned long long *n) {
    (void)d;
    if (type != 1 || counter != 0) return *n = 0, OK; /* the test sets the volatile uncorrected count */
    return reading("ST_FAKE_NVML_ECC", 0, n);
}
/* ST_FAKE_NVML_CLOCKS may be a list, "0x1,0x40,0x1": the k-th reading of
 * this process is its k-th value, the last one from there on */
int nvmlDeviceGetCurrentClocksEventReasons(dev d, unsigned long long *r) {
    (void)d;
    static int calls;
    const char *e = getenv("ST_FAKE_NVML_CLOCKS");
    if (!e || !strcmp(e, "unsupported")) return reading("ST_FAKE_NVML_CLOCKS", 0x1, r);
    int k = calls++;
    char *end;
    for (;;) {
        *r = strtoull(e, &end, 0);
        if (k-- == 0 || *end != ',') return OK;
        e = end + 1;
    }
}

/* Xid events: ST_FAKE_NVML_XID, a list ("13,31"), each waited for once in
 * order, then none (NVML_ERROR_TIMEOUT); "lost": NVML_ERROR_GPU_IS_LOST */
struct event {
    dev device;
    unsigned long long type, data;
    unsigned gi, ci;
};
int nvmlEventSetCreate(void **set) { return *set = (void *)0x2, OK; }
int nvmlDeviceRegisterEvents(dev d, unsigned long long types, void *set) {
    return (void)d, (void)set, types == 0x8 ? OK : NOT_SUPPORTED;
}
int nvmlEventSetWait_v2(void *set, struct event *e, unsigned ms) {
    (void)set, (void)ms;
    static int taken;
    const char *x = getenv("ST_FAKE_NVML_XID");
    if (!x) return 10;
    if (!strcmp(x, "lost")) return 15;
    for (int k = 0; *x; k++) {
        char *end;
        const unsigned long long v = strtoull(x, &end, 10);
        if (k == taken) {
            taken++;
            memset(e, 0, sizeof *e);
            e->device = the_gpu, e->type = 0x8, e->data = v;
            return OK;
        }
        x = *end == ',' ? end + 1 : end;
    }
    return 10; /* NVML_ERROR_TIMEOUT */
}
int nvmlEventSetFree(void *set) { return (void)set, OK; }
#endif
