/* The GPU monitor of a training run: every log.gpu_interval steps rank 0
 * samples its device's memory and, through NVML (src/hw/nvml.h) when the
 * driver has it, the GPU's utilisation, memory utilisation, power and
 * temperature. metrics.jsonl, TensorBoard and the progress line show what the
 * sample holds; on the CPU, or without NVML, those parts are simply absent.
 *
 * Memory comes from our own accounting (src/core/device.h: what the run's
 * arenas hold now and at their peak) and from the driver (cudaMemGetInfo:
 * the whole device, other contexts included). Nothing here fails a run: a
 * query that fails leaves its fields out. Not here: host memory
 * (metrics.c's peak_rss_mb). */
#ifndef ST_TRAIN_GPUMON_H
#define ST_TRAIN_GPUMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/device.h"
#include "hw/nvml.h"

typedef struct st_gpu_sample {
    bool has_mem; /* a CUDA device: the four sizes below, bytes */
    int64_t mem_allocated, mem_peak; /* held by this run's arenas now, and at most so far */
    int64_t mem_used, mem_total;     /* the device: total less free (cudaMemGetInfo), and total */
    bool has_nvml;                   /* NVML answered: the four below */
    double util, mem_util;           /* percent of NVML's last sample period (1/6 s to 1 s) */
    double power_w, temp_c;
    bool has_clocks;           /* NVML read the clock event reasons: */
    unsigned long long slowed; /* those that slow the GPU now (ST_NVML_CLOCKS_SLOWED bits), 0 none */
} st_gpu_sample;

typedef struct st_gpu_monitor {
    st_device *dev; /* NULL: the CPU, nothing to sample */
    st_nvml nvml;   /* nvml.lib NULL: no NVML */
    st_nvml_dev handle;
    st_nvml_events xids; /* the GPU's Xid errors, registered at open (NULL: NVML cannot) */
    char why[192]; /* why there is no NVML ("" when there is) */
} st_gpu_monitor;

/* Watch `dev` (NULL: the CPU; then every sample is empty). Loads NVML from
 * nvml_lib (NULL: "libnvidia-ml.so.1") and finds the device there by its PCI
 * address. Never fails: what is missing is left out, with the reason in why. */
void st_gpu_monitor_open(st_gpu_monitor *m, st_device *dev, const char *nvml_lib);
void st_gpu_monitor_close(st_gpu_monitor *m); /* accepts a zeroed one */

/* What the device says now; *out is all absent for the CPU. */
void st_gpu_monitor_sample(st_gpu_monitor *m, st_gpu_sample *out);

/* Only the clock event reasons that slow the GPU now (ST_NVML_CLOCKS_SLOWED
 * bits) into *slowed: false when NVML cannot say (no NVML, an older driver,
 * a GPU without them). What every rank reads of its own GPU on logged lines
 * (train.c): one slowed GPU holds back every rank of a data-parallel run. */
bool st_gpu_monitor_clocks(st_gpu_monitor *m, unsigned long long *slowed);

/* The driver's Xid errors on the GPU since the monitor opened, not yet
 * taken ("Xid 79 (the GPU has fallen off the bus)", "; "-separated) into
 * buf; their count (0: none, or NVML cannot say). Does not wait. For the
 * message of a run that failed on the GPU (train.c). */
int st_gpu_monitor_xids(st_gpu_monitor *m, char *buf, size_t n);

/* "gpu 12.3/79.6 GiB 97% 412 W 61 C" (what the sample has; " slowed" after
 * it while heat or the power supply slows the clocks) into buf, or ""
 * when it has nothing; for the progress line. */
const char *st_gpu_sample_format(const st_gpu_sample *s, char *buf, size_t n);

#endif
