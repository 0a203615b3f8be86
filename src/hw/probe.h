/* The hardware probe: what this machine has for training, found at run time.
 *
 * CPU (model, physical cores, logical threads, the cores this process may
 * use), memory (total and available, capped by a cgroup limit), CUDA devices
 * through the driver API loaded with dlopen("libcuda.so.1") (count, name,
 * memory, compute capability, multiprocessors), and through NVML loaded with
 * dlopen("libnvidia-ml.so.1") when present: free memory, the links between
 * GPUs (NVLink or PCIe) and processes already holding GPU memory. MPI (built
 * in? launched by mpirun or srun?) and NCCL (dlopen("libnccl.so.2")).
 *
 * Nothing here links CUDA, NVML or NCCL, and nothing fails for what is
 * missing: every absence is recorded with its reason ("no CUDA device
 * (libcuda.so.1: cannot open shared object file)"). Not here: benchmarks
 * (scaletrain check), the cost models (memory.h, timing.h). */
#ifndef ST_HW_PROBE_H
#define ST_HW_PROBE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "scaletrain/status.h"

#define ST_HW_MAX_GPUS 16
#define ST_HW_REASON 192

typedef enum st_hw_link {
    ST_LINK_UNKNOWN = 0,
    ST_LINK_SELF,
    ST_LINK_NVLINK,      /* peer-to-peer over NVLink (NVSwitch or direct; a driver without NVML's P2P status:
                            both ends have active NVLinks) */
    ST_LINK_PCIE_SWITCH, /* same PCIe switch (NVML SINGLE/MULTIPLE) */
    ST_LINK_PCIE_HOST,   /* through a host bridge or CPU (NVML HOSTBRIDGE/NODE) */
    ST_LINK_SYSTEM,      /* across CPU sockets (NVML SYSTEM) */
} st_hw_link;

typedef struct st_hw_gpu {
    char name[96];
    char pci[32]; /* the CUDA device's PCI bus id ("0000:3B:00.0"), by which NVML finds it; "" unknown */
    int64_t mem_total, mem_free; /* bytes; mem_free < 0 when unknown (no NVML) */
    int cc_major, cc_minor;
    int sms;         /* multiprocessors */
    int nvlinks;     /* active NVLinks (NVML), -1 unknown */
    int procs;       /* compute processes holding memory on it (NVML), -1 unknown */
    int64_t procs_mem; /* bytes those processes hold */
    /* Health (NVML; -1 unknown: no NVML, or not on this GPU or driver) */
    int remap_pending, remap_failed; /* memory row remapping (Ampere and later): 1 yes, 0 no */
    int64_t ecc_uncorrected;         /* uncorrectable ECC errors since the driver loaded */
    int64_t clock_events;            /* NVML's clock event reasons now, a mask (nvml.h) */
} st_hw_gpu;

typedef struct st_hw_info {
    /* CPU and memory */
    char cpu_model[128];
    int cores;   /* physical cores (distinct socket/core pairs) */
    int threads; /* logical CPUs online */
    int allowed; /* CPUs this process may use: its affinity mask's, fewer where its cgroup's CPU quota
                  * allows less (st_hw_cpu_quota, rounded up: st_hw_quota_threads) */
    char cpu_limit_by[224];       /* the quota, when it set `allowed` ("" otherwise) */
    int64_t mem_total, mem_avail; /* bytes (MemTotal, MemAvailable; a tighter limit applied) */
    int64_t mem_shared;           /* mem_avail without the address-space limit: what the node's ranks share */
    int64_t proc_room;            /* what the address-space limit (ulimit -v) leaves each process, at least 1;
                                   * 0: no such limit */
    int64_t host_mem_total;       /* MemTotal itself */
    char mem_limit_by[224];       /* what set mem_avail when not the host's memory ("" when it did) */
    /* CUDA */
    int n_gpus;
    st_hw_gpu gpu[ST_HW_MAX_GPUS];
    int cuda_driver; /* e.g. 12040; 0 when none */
    char cuda_why[ST_HW_REASON]; /* why there is no device ("" when there are) */
    bool nvml;
    char nvml_why[ST_HW_REASON];
    st_hw_link link[ST_HW_MAX_GPUS][ST_HW_MAX_GPUS]; /* NVML index order */
    /* MPI and NCCL */
    bool mpi_built;      /* this build has the MPI backend */
    char launcher[32];   /* st_launcher's name: "mpirun", "srun", "mpiexec", "pmix", or "none" */
    int world, local_ranks; /* as the launcher says; 1 without one */
    bool nccl;
    int nccl_version; /* e.g. 22809 */
    char nccl_why[ST_HW_REASON];
} st_hw_info;

/* What the health readings of g say: 0 nothing wrong, 1 a warning (a row
 * remap pending, uncorrectable ECC errors since the driver loaded, clocks
 * slowed by heat or the power supply now), 2 a failure (row remapping
 * failed: the GPU's memory needs service), -1 nothing known; `why` says
 * which and what to do ("" for 0 and -1). */
int st_hw_gpu_health(const st_hw_gpu *g, char *why, size_t why_len);

/* Fill *out. Never fails for missing hardware or libraries (see the *_why
 * fields); fails only if /proc cannot be read. */
st_status st_hw_probe(st_hw_info *out);

/* Only the CPU, memory and launcher (no libraries loaded): what a starting
 * run needs to plan on the CPU. */
st_status st_hw_probe_host(st_hw_info *out);

/* The CPU's name and cores from /proc/cpuinfo's text (f; NULL: none): x86's
 * "model name", arm64's implementer and part named (st_hw_arm_cpu_name);
 * cores are the distinct (physical id, core id) pairs, else the CPUs
 * online. */
void st_hw_cpuinfo_parse(FILE *f, st_hw_info *h);
void st_hw_arm_cpu_name(unsigned implementer, unsigned part, char *buf, size_t n);

/* The memory limit on this process besides the host's own that binds
 * first (cgroup.c): its memory cgroup's (v2 memory.max, v1
 * memory.limit_in_bytes), read along its path from /proc/self/cgroup up to
 * the hierarchy's mount (a job's or a container's limit sits below the
 * root), or its address-space limit (ulimit -v). */
typedef struct st_hw_mem_limit {
    int64_t limit;    /* bytes: the binding one's; -1: none */
    int64_t smallest; /* bytes: the smallest limit met (a level above may bind first); -1: none */
    int64_t headroom; /* bytes it still leaves: the limit less what is held under it (page cache,
                       * active and inactive, counted free), or less the address space mapped; -1: none */
    int64_t proc_room; /* bytes the address-space limit alone leaves this process (each process has its
                        * own, where a cgroup's is shared by the node's ranks); -1: none */
    int64_t shared_headroom; /* bytes the cgroup's limits alone leave (the node's ranks share them); -1:
                              * none (st_hw_mem_limit_get) */
    char by[224];     /* what sets it, for messages */
} st_hw_mem_limit;

void st_hw_mem_limit_get(st_hw_mem_limit *out);

/* This boot of this machine, as a number: a hash of the kernel's boot_id
 * (that of "" where it cannot be read, as in containers that hide
 * /proc/sys). With the host name it tells hosts apart as NCCL does: two
 * machines may share a name. */
uint32_t st_hw_boot_hash(void);

/* This process's address-space limit (ulimit -v) and the address space it
 * has mapped now, in bytes; false (and -1s) when there is no limit. */
bool st_hw_address_space(int64_t *limit, int64_t *mapped);
/* What a run maps beyond what it uses, which an address-space limit counts:
 * `buffers` of OpenBLAS's (about 129 MiB each, mapped at its first
 * products) and each of `threads` threads' malloc arena (64 MiB reserved)
 * and stack (8 MiB). */
int64_t st_hw_unused_mappings(int threads, int buffers);

/* The cgroup part alone, from these files in place of /proc/self/cgroup and
 * /proc/self/mountinfo (tests); *out's fields start at -1 and "". */
void st_hw_mem_limit_cgroup(const char *proc_cgroup, const char *mountinfo, st_hw_mem_limit *out);

/* The CPU time this process's cgroup allows (cgroup.c): the smallest quota
 * along its path, v2 cpu.max or v1 cpu.cfs_quota_us over the period, in
 * CPUs (2.5: two and a half CPUs' time each period). A container's --cpus,
 * a pod's CPU limit; SLURM confines with an affinity mask instead. */
typedef struct st_hw_cpu_quota {
    double cpus;  /* -1: none */
    char by[224]; /* what sets it, for messages */
} st_hw_cpu_quota;

void st_hw_cpu_quota_get(st_hw_cpu_quota *out);

/* Threads for a quota of `cpus` CPUs' time: the quota rounded up, at least
 * one. Measured on 2 cores (the default cnn, 30 steps): at a quota of 1 CPU
 * one thread beat two by 1.23x (two throttled threads hold up each other's
 * barriers), at 1.25 and 1.5 CPUs two beat one by 1.17x and 1.3x (the
 * fraction is time a second thread uses). */
int st_hw_quota_threads(double cpus);

/* A rank's CPUs, as the node's ranks compare theirs (train.threads auto):
 * its host and its affinity mask (CPUs 0..1023). */
typedef struct st_hw_rank_cpus {
    uint64_t host; /* st_hash_str of the host name */
    uint64_t mask[16];
} st_hw_rank_cpus;
void st_hw_rank_cpus_get(const char *host, st_hw_rank_cpus *out);
/* How many of the n ranks in all[] run on rank me's CPUs: the same host and
 * the same mask, itself included. Ranks bound a core each share with none;
 * ranks unbound, or bound a socket (mpirun's default past 2 ranks) or a
 * cgroup's cpuset at a time, with the others so bound. */
int st_hw_cpus_sharing(const st_hw_rank_cpus *all, int n, int me);

/* The same from other files (tests); *out starts at -1 and "". */
void st_hw_cpu_quota_cgroup(const char *proc_cgroup, const char *mountinfo, st_hw_cpu_quota *out);

/* For an out-of-memory message: what this process holds (VmRSS) and how much
 * more it may take and what says so (the host's MemAvailable, else the
 * binding limit above); "" (0) when /proc cannot be read. */
size_t st_hw_mem_state(char *buf, size_t n);

/* "X GiB available to this process, as LIMIT allows (the host has Y GiB)"
 * when a limit set mem_avail (plan, the probe's report, a run's header), in
 * buf; else NULL. */
const char *st_hw_mem_note(const st_hw_info *h, char *buf, size_t n);

/* A human-readable report (the `scaletrain plan --probe` output). */
void st_hw_print(const st_hw_info *h, FILE *out);

/* The CPUs this process may use (its affinity mask, else the online ones;
 * fewer where its cgroup's CPU quota allows less): st_hw_info.allowed
 * without the rest of the probe. */
int st_hw_allowed_cpus(void);

/* "NVLink", "PCIe (same switch)", ... */
const char *st_hw_link_name(st_hw_link l);

/* NCCL's version code as people write it: 22809 -> "2.28.9"; buf returned. */
const char *st_hw_nccl_version(int code, char buf[16]);

#endif
