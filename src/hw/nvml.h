/* NVML, loaded at run time: one loader for the hardware probe (free memory,
 * the links between GPUs, processes holding memory) and the training run's
 * GPU monitor (utilisation, power, temperature; src/train/gpumon.h).
 *
 * libnvidia-ml.so.1 comes with the NVIDIA driver, not the toolkit, and there
 * is no nvml.h here: the few functions used are declared below with the
 * documented C ABI of the NVML API reference, and resolved with dlsym.
 * Nothing links NVML and nothing fails without it: st_nvml_open says why it
 * is absent. Not here: the CUDA driver API (probe.c) or runtime (src/cuda/). */
#ifndef ST_HW_NVML_H
#define ST_HW_NVML_H

#include <stdbool.h>
#include <stddef.h>

typedef int st_nvml_ret; /* nvmlReturn_t: NVML_SUCCESS = 0 */
typedef void *st_nvml_dev; /* nvmlDevice_t */
typedef void *st_nvml_events; /* nvmlEventSet_t */

typedef struct st_nvml_event { /* nvmlEventData_t */
    st_nvml_dev device;
    unsigned long long type, data; /* data: the Xid, for an Xid event */
    unsigned int gpu_instance, compute_instance;
} st_nvml_event;

typedef struct st_nvml_memory { /* nvmlMemory_t, bytes */
    unsigned long long total, free, used;
} st_nvml_memory;

typedef struct st_nvml_process { /* nvmlProcessInfo_t (v2), filled by ..._v3 */
    unsigned int pid;
    unsigned long long used;
    unsigned int gpu_instance, compute_instance;
} st_nvml_process;

typedef struct st_nvml_util { /* nvmlUtilization_t: percent of the last sample period */
    unsigned int gpu, memory;
} st_nvml_util;

enum {
    ST_NVML_NVLINK_MAX_LINKS = 18,
    ST_NVML_P2P_NVLINK = 2,               /* NVML_P2P_CAPS_INDEX_NVLINK */
    ST_NVML_P2P_OK = 0,                   /* NVML_P2P_STATUS_OK */
    ST_NVML_TEMPERATURE_GPU = 0,          /* nvmlTemperatureSensors_t */
    ST_NVML_MEMORY_ERROR_UNCORRECTED = 1, /* nvmlMemoryErrorType_t */
    ST_NVML_VOLATILE_ECC = 0,             /* nvmlEccCounterType_t: since the driver loaded */
    ST_NVML_ERROR_TIMEOUT = 10,           /* nvmlReturn_t: no event within the wait */
    ST_NVML_ERROR_GPU_IS_LOST = 15,       /* fallen off the bus, or otherwise gone */
};
#define ST_NVML_EVENT_XID 0x8ull /* nvmlEventTypeXidCriticalError */

/* nvmlClocksEventReasons: why the clocks are below their maximum now. The
 * ones that make a GPU slower than its peers while it trains (a data-
 * parallel step waits for the slowest): */
#define ST_NVML_CLOCKS_HW_SLOWDOWN 0x8ull /* a factor of 2 or more: heat, the power supply's brake */
#define ST_NVML_CLOCKS_SW_THERMAL 0x20ull /* the driver holds the temperature down */
#define ST_NVML_CLOCKS_HW_THERMAL 0x40ull
#define ST_NVML_CLOCKS_HW_POWER_BRAKE 0x80ull
#define ST_NVML_CLOCKS_SLOWED                                                                                \
    (ST_NVML_CLOCKS_HW_SLOWDOWN | ST_NVML_CLOCKS_SW_THERMAL | ST_NVML_CLOCKS_HW_THERMAL |                    \
     ST_NVML_CLOCKS_HW_POWER_BRAKE)

/* The library and its functions; every pointer is set when st_nvml_open
 * succeeds, except `procs` (drivers before 510 lack the _v3 call) and the
 * health readings. */
typedef struct st_nvml {
    void *lib; /* NULL: not open */
    st_nvml_ret (*init)(void);
    st_nvml_ret (*shutdown)(void);
    st_nvml_ret (*count)(unsigned int *);
    st_nvml_ret (*handle)(unsigned int, st_nvml_dev *);
    st_nvml_ret (*handle_by_pci)(const char *, st_nvml_dev *);
    st_nvml_ret (*name)(st_nvml_dev, char *, unsigned int);
    st_nvml_ret (*memory)(st_nvml_dev, st_nvml_memory *);
    st_nvml_ret (*nvlink_state)(st_nvml_dev, unsigned int, int *);
    st_nvml_ret (*common_ancestor)(st_nvml_dev, st_nvml_dev, int *);
    /* peer-to-peer between two GPUs over one capability (ST_NVML_P2P_NVLINK):
     * status ST_NVML_P2P_OK or why not; NULL where the driver lacks it */
    st_nvml_ret (*p2p_status)(st_nvml_dev, st_nvml_dev, int, int *);
    st_nvml_ret (*procs)(st_nvml_dev, unsigned int *, st_nvml_process *);
    st_nvml_ret (*utilization)(st_nvml_dev, st_nvml_util *);
    st_nvml_ret (*power)(st_nvml_dev, unsigned int *);                    /* milliwatts */
    st_nvml_ret (*temperature)(st_nvml_dev, int, unsigned int *);         /* degrees C */
    /* Health, each NULL where the driver lacks it: row remapping (Ampere and
     * later: corrected, uncorrected, pending, failed), ECC error counts, and
     * the clock event reasons (...ThrottleReasons before driver 535). */
    st_nvml_ret (*remapped_rows)(st_nvml_dev, unsigned int *, unsigned int *, unsigned int *, unsigned int *);
    st_nvml_ret (*ecc_errors)(st_nvml_dev, int, int, unsigned long long *);
    st_nvml_ret (*clock_events)(st_nvml_dev, unsigned long long *);
    /* The driver's Xid errors as events (all four, or none) */
    st_nvml_ret (*event_set_create)(st_nvml_events *);
    st_nvml_ret (*register_events)(st_nvml_dev, unsigned long long, st_nvml_events);
    st_nvml_ret (*event_wait)(st_nvml_events, st_nvml_event *, unsigned int); /* ms */
    st_nvml_ret (*event_set_free)(st_nvml_events);
    const char *(*error_string)(st_nvml_ret);
} st_nvml;

/* Load `lib_name` (NULL: "libnvidia-ml.so.1"), resolve the functions and
 * nvmlInit. False, with *n zeroed and the reason in why (e.g. "libnvidia-ml.so.1:
 * cannot open shared object file", "... lacks nvmlInit_v2 (driver too old?)",
 * "nvmlInit: Driver Not Loaded"), when NVML cannot be used. */
bool st_nvml_open(st_nvml *n, const char *lib_name, char *why, size_t why_len);

/* "HW slowdown, HW thermal slowdown" for the ST_NVML_CLOCKS_SLOWED bits of
 * `reasons` (those bits only; "" when none), into buf. */
const char *st_nvml_slowdown_names(unsigned long long reasons, char *buf, size_t n);

/* What Xid `xid` means, in a few words ("the GPU has fallen off the bus"),
 * for the ones a training run meets; "" for others. */
const char *st_nvml_xid_meaning(unsigned long long xid);

/* nvmlShutdown and unload; accepts a zeroed or already closed st_nvml. */
void st_nvml_close(st_nvml *n);

#endif
