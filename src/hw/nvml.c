/* The NVML loader (see nvml.h). */
#include "nvml.h"

#include "core/text.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

/* *slot = dlsym(lib, name); the first missing required name goes to *missing. */
static void resolve(void *lib, const char *name, void **slot, bool required, const char **missing) {
    *slot = dlsym(lib, name);
    if (!*slot && required && !*missing) *missing = name;
}

bool st_nvml_open(st_nvml *n, const char *lib_name, char *why, size_t why_len) {
    memset(n, 0, sizeof *n);
    if (!lib_name) lib_name = "libnvidia-ml.so.1";
    void *lib = dlopen(lib_name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(why, why_len, "%s", e ? e : lib_name);
        return false;
    }
    st_nvml v = {.lib = lib};
    const char *missing = NULL;
    resolve(lib, "nvmlInit_v2", (void **)&v.init, true, &missing);
    resolve(lib, "nvmlShutdown", (void **)&v.shutdown, true, &missing);
    resolve(lib, "nvmlDeviceGetCount_v2", (void **)&v.count, true, &missing);
    resolve(lib, "nvmlDeviceGetHandleByIndex_v2", (void **)&v.handle, true, &missing);
    resolve(lib, "nvmlDeviceGetHandleByPciBusId_v2", (void **)&v.handle_by_pci, true, &missing);
    resolve(lib, "nvmlDeviceGetName", (void **)&v.name, true, &missing);
    resolve(lib, "nvmlDeviceGetMemoryInfo", (void **)&v.memory, true, &missing);
    resolve(lib, "nvmlDeviceGetNvLinkState", (void **)&v.nvlink_state, true, &missing);
    resolve(lib, "nvmlDeviceGetTopologyCommonAncestor", (void **)&v.common_ancestor, true, &missing);
    resolve(lib, "nvmlDeviceGetP2PStatus", (void **)&v.p2p_status, false, &missing);
    resolve(lib, "nvmlDeviceGetComputeRunningProcesses_v3", (void **)&v.procs, false, &missing);
    resolve(lib, "nvmlDeviceGetUtilizationRates", (void **)&v.utilization, true, &missing);
    resolve(lib, "nvmlDeviceGetPowerUsage", (void **)&v.power, true, &missing);
    resolve(lib, "nvmlDeviceGetTemperature", (void **)&v.temperature, true, &missing);
    resolve(lib, "nvmlDeviceGetRemappedRows", (void **)&v.remapped_rows, false, &missing);
    resolve(lib, "nvmlDeviceGetTotalEccErrors", (void **)&v.ecc_errors, false, &missing);
    resolve(lib, "nvmlDeviceGetCurrentClocksEventReasons", (void **)&v.clock_events, false, &missing);
    if (!v.clock_events)
        resolve(lib, "nvmlDeviceGetCurrentClocksThrottleReasons", (void **)&v.clock_events, false, &missing);
    resolve(lib, "nvmlEventSetCreate", (void **)&v.event_set_create, false, &missing);
    resolve(lib, "nvmlDeviceRegisterEvents", (void **)&v.register_events, false, &missing);
    resolve(lib, "nvmlEventSetWait_v2", (void **)&v.event_wait, false, &missing);
    resolve(lib, "nvmlEventSetFree", (void **)&v.event_set_free, false, &missing);
    if (!v.event_set_create || !v.register_events || !v.event_wait || !v.event_set_free)
        v.event_set_create = NULL, v.register_events = NULL, v.event_wait = NULL, v.event_set_free = NULL;
    resolve(lib, "nvmlErrorString", (void **)&v.error_string, true, &missing);
    if (missing) {
        snprintf(why, why_len, "%s lacks %s (not NVML, or a driver too old)", lib_name, missing);
        dlclose(lib);
        return false;
    }
    st_nvml_ret r = v.init();
    if (r != 0) {
        const char *e = v.error_string(r);
        snprintf(why, why_len, "nvmlInit: %s (error %d)", e ? e : "unknown", r);
        dlclose(lib);
        return false;
    }
    *n = v;
    if (why_len) why[0] = '\0';
    return true;
}

const char *st_nvml_slowdown_names(unsigned long long reasons, char *buf, size_t n) {
    static const struct {
        unsigned long long bit;
        const char *name;
    } names[] = {{ST_NVML_CLOCKS_HW_SLOWDOWN, "HW slowdown"},
                 {ST_NVML_CLOCKS_HW_THERMAL, "HW thermal slowdown"},
                 {ST_NVML_CLOCKS_SW_THERMAL, "SW thermal slowdown"},
                 {ST_NVML_CLOCKS_HW_POWER_BRAKE, "HW power brake"}};
    size_t at = 0;
    if (n) buf[0] = '\0';
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (reasons & names[k].bit) st_appendf(buf, n, &at, "%s%s", at ? ", " : "", names[k].name);
    return buf;
}

const char *st_nvml_xid_meaning(unsigned long long xid) {
    switch (xid) { /* NVIDIA's Xid catalogue */
    case 13:
        return "a graphics engine exception: a kernel's fault, such as an out-of-range access";
    case 31:
        return "a GPU memory page fault: a kernel's illegal address";
    case 43:
        return "the GPU stopped the faulting process's work";
    case 45:
        return "the driver ended the process's work on the GPU";
    case 48:
        return "a double-bit ECC error in the GPU's memory";
    case 63:
        return "a memory row remapping (or page retirement) was recorded";
    case 64:
        return "a memory row remapping failed";
    case 74:
        return "an NVLink error";
    case 79:
        return "the GPU has fallen off the bus";
    case 92:
        return "a high rate of single-bit ECC errors";
    case 94:
        return "a contained ECC error: the processes using that memory were ended";
    case 95:
        return "an uncontained ECC error: the GPU needs a reset";
    case 109:
        return "a context switch timed out";
    case 119:
    case 120:
        return "the GPU's system processor (GSP) stopped answering";
    default:
        return "";
    }
}

void st_nvml_close(st_nvml *n) {
    if (!n || !n->lib) return;
    n->shutdown();
    dlclose(n->lib);
    memset(n, 0, sizeof *n);
}
