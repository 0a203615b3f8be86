/* Device descriptions for the cost models: datasheet presets for the GPUs the
 * planner compares (L40S, A100-40GB, A100-80GB, H100-80GB SXM, H200, GH200) and the
 * CPU (peaks measured by a short calibration), and the hardware
 * configurations `scaletrain plan --hw` names ("8xH100", "cpu", "2x4xL40S").
 *
 * Peaks are dense (no structured sparsity); the figures and their sources
 * are in device.c. What a device reaches of its peak is an efficiency the
 * time model applies (timing.h), not part of the preset. */
#ifndef ST_HW_DEVICE_H
#define ST_HW_DEVICE_H

#include <stdbool.h>
#include <stdint.h>

#include "probe.h"
#include "scaletrain/status.h"

typedef struct st_hw_device {
    char name[48];
    bool gpu;
    double peak_bf16;  /* dense FLOP/s with low-precision (bf16/fp16) matrix products */
    double peak_fp32;  /* dense FLOP/s in fp32 (no TF32) */
    double mem_bw;     /* bytes/s of device memory */
    int64_t mem_bytes; /* device memory (the CPU: what one node's ranks share) */
    int cc_major, cc_minor; /* compute capability (0 for the CPU) */
    /* the links inside a node, for the ring all-reduce */
    char link[24];  /* "NVLink 4", "PCIe 4.0 x16", "shared memory" */
    double link_bw; /* bytes/s of all-reduce bus bandwidth the link reaches */
    double link_lat; /* seconds per ring step */
    /* between nodes: the network share of one device */
    char net[32];
    double net_bw, net_lat;
    double host_bw; /* bytes/s between host and device (offload), per device */
    int64_t host_mem_bytes; /* a GPU node's host memory available to its ranks (this machine's); 0: unknown */
    /* bytes/s of host memory an offloaded optimizer step streams, per device;
     * 0: the node's (ST_TIME_HOST_MEM_BW) shared by its devices */
    double host_mem_bw;
    /* this machine under an address-space limit (ulimit -v): what it leaves
     * each process, apart from the memory the node's ranks share */
    bool proc_limited;
    int64_t proc_mem_bytes;
} st_hw_device;

/* A hardware configuration: `per_node` devices of one kind on each of `nodes` nodes. */
typedef struct st_hw_config {
    char label[64]; /* as written: "8xH100", "cpu" */
    st_hw_device dev;
    int per_node, nodes;
    bool nodes_given; /* the spec named the nodes ("2x8xH100") */
    /* > 0: the ranks in all, where nodes hold different numbers of them (a
     * starting run: its world size; per_node is then this node's); 0:
     * per_node x nodes (st_hw_ranks) */
    int ranks;
} st_hw_config;

/* The ranks a configuration runs: hw->ranks when set, else per_node x nodes. */
int st_hw_ranks(const st_hw_config *hw);

/* The preset called `name` (case-insensitive; aliases such as "H100" for
 * "H100-80GB"); false when unknown. "cpu" gives the CPU preset with
 * placeholder peaks: st_device_local fills measured ones. */
bool st_device_preset(const char *name, st_hw_device *out);
/* Every preset name, comma-separated, for error messages. */
const char *st_device_names(void);

/* This machine as a device: the first CUDA device when there is one (its
 * preset by name, with the probed memory), else the CPU with its memory
 * available and peaks measured by st_device_calibrate_cpu (gflops > 0) or a
 * conservative default when gflops <= 0. */
void st_device_local(const st_hw_info *h, double cpu_gflops, st_hw_device *out);

/* A CUDA device's dense peak, FLOP/s, for mfu: 16-bit matrix products on
 * tensor cores with fp32 accumulation (tensor16), or fp32 on the CUDA cores
 * (no TF32). The datasheet figure when the name and multiprocessor count
 * are a preset's (H100/H200 SXM, A100, L40S); otherwise multiprocessors x
 * clock x the architecture's FLOP per clock per multiprocessor (compute
 * capability 7.0 to 10.x). 0 when the architecture is unknown. `why` says
 * which (at least 128 bytes). */
double st_gpu_peak(const char *name, int cc_major, int cc_minor, int sms, int clock_khz, bool tensor16, char *why,
                   size_t why_len);

/* Measure the CPU's fp32 matrix-product rate: the fastest of n^3 sgemms
 * repeated for at least 0.03 s and 3 times on the current thread pool (load
 * only slows a repetition down, so the fastest is the machine's own rate).
 * n grows with the pool, 512 x the cube root of its threads, a multiple of
 * 128 up to 2048, so that every thread has a product as large as one
 * thread's 512^3: at 1 and 2 threads 512^3 ran at 1024^3's rate, and a
 * 1024^3 left 64 threads short of theirs. *n_out (may be NULL): n. */
st_status st_device_calibrate_cpu(double *flops_per_s, int *n_out);

/* Parse "4xL40S", "8xA100-80GB", "2x8xH100" (nodes x per-node x device) or a
 * bare device name (1 device). Unknown names are ST_ERR_CONFIG listing the
 * known ones. `local` is what "local" means and `cpu` what "cpu" means (this
 * machine's CPU, measured); either may be NULL: "local" is then an error and
 * "cpu" the preset's placeholder peaks. For the CPU, N x cpu is N ranks
 * sharing one node's cores and memory. */
st_status st_hw_config_parse(const char *spec, const st_hw_device *local, const st_hw_device *cpu, st_hw_config *out);

#endif
