/* The hardware probe (see probe.h): /proc for the CPU and memory, the CUDA
 * driver API and NVML (nvml.h) through dlopen, the launcher's environment
 * for MPI. The few driver prototypes are declared here (cuda.h is not needed
 * to build): their signatures are the documented C ABI of libcuda.so.1. */
#include "probe.h"

#include "core/launcher.h"
#include "core/rng.h"
#include "core/text.h"
#include "nvml.h"

#include <dlfcn.h>
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* --- CUDA driver API (cuda.h, CUDA Driver API reference) ----------------- */
typedef int CUresult; /* CUDA_SUCCESS = 0 */
typedef int CUdevice;
enum {
    CU_ATTR_MULTIPROCESSOR_COUNT = 16,
    CU_ATTR_CC_MAJOR = 75,
    CU_ATTR_CC_MINOR = 76,
};
typedef struct cuda_api {
    CUresult (*init)(unsigned int);
    CUresult (*driver_version)(int *);
    CUresult (*count)(int *);
    CUresult (*get)(CUdevice *, int);
    CUresult (*name)(char *, int, CUdevice);
    CUresult (*total_mem)(size_t *, CUdevice);
    CUresult (*attr)(int *, int, CUdevice);
    CUresult (*error_string)(CUresult, const char **);
    CUresult (*pci)(char *, int, CUdevice); /* (NULL: unknown; NVML then goes by index) */
} cuda_api;

static void *sym(void *lib, const char *name, bool *ok) {
    void *p = dlsym(lib, name);
    if (!p) *ok = false;
    return p;
}

static void trim(char *s) {
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == ' ' || s[n - 1] == '\t')) s[--n] = '\0';
    size_t i = 0;
    while (s[i] == ' ' || s[i] == '\t') i++;
    if (i) memmove(s, s + i, n - i + 1);
}

int st_hw_quota_threads(double cpus) {
    const int n = (int)ceil(cpus - 1e-6);
    return n > 1 ? n : 1;
}

void st_hw_rank_cpus_get(const char *host, st_hw_rank_cpus *out) {
    memset(out, 0, sizeof *out);
    out->host = st_hash_str(host);
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return; /* (an empty mask: shared with the like) */
    for (int i = 0; i < 1024 && i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, &set)) out->mask[i / 64] |= (uint64_t)1 << (i % 64);
}

int st_hw_cpus_sharing(const st_hw_rank_cpus *all, int n, int me) {
    int k = 0;
    for (int r = 0; r < n; r++)
        k += all[r].host == all[me].host && memcmp(all[r].mask, all[me].mask, sizeof all[me].mask) == 0;
    return k > 0 ? k : 1;
}

/* st_hw_allowed_cpus, and in `by` (n > 0) the quota when it set the count
 * ("" otherwise). */
static int allowed_cpus(char *by, size_t n) {
    cpu_set_t set;
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    const int mask = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                     : online > 0                                ? (int)online
                                                                 : 1;
    st_hw_cpu_quota q;
    st_hw_cpu_quota_get(&q);
    if (n) by[0] = '\0';
    if (!(q.cpus > 0 && st_hw_quota_threads(q.cpus) < mask)) return mask;
    if (n) snprintf(by, n, "%s: %.3g CPU%s", q.by, q.cpus, q.cpus == 1 ? "" : "s");
    return st_hw_quota_threads(q.cpus);
}

/* An arm64 core's name from its MIDR fields (/proc/cpuinfo has no "model
 * name" there): the implementer's, and the part's where it is listed. */
void st_hw_arm_cpu_name(unsigned implementer, unsigned part, char *buf, size_t n) {
    static const struct {
        unsigned id;
        const char *name;
    } vendors[] = {{0x41, "Arm"},       {0x42, "Broadcom"}, {0x43, "Cavium"}, {0x46, "Fujitsu"},
                   {0x48, "HiSilicon"}, {0x4e, "NVIDIA"},   {0x50, "APM"},    {0x51, "Qualcomm"},
                   {0x61, "Apple"},     {0xc0, "Ampere"}};
    static const struct {
        unsigned implementer, part;
        const char *name;
    } parts[] = {
        {0x41, 0xd03, "Cortex-A53"},  {0x41, 0xd05, "Cortex-A55"},  {0x41, 0xd07, "Cortex-A57"},
        {0x41, 0xd08, "Cortex-A72"},  {0x41, 0xd09, "Cortex-A73"},  {0x41, 0xd0b, "Cortex-A76"},
        {0x41, 0xd0c, "Neoverse N1"}, {0x41, 0xd40, "Neoverse V1"}, {0x41, 0xd49, "Neoverse N2"},
        {0x41, 0xd4f, "Neoverse V2"}, {0x41, 0xd84, "Neoverse V3"}, {0x41, 0xd8e, "Neoverse N3"},
        {0x43, 0x0af, "ThunderX2"},   {0x46, 0x001, "A64FX"},       {0x48, 0xd01, "Kunpeng 920"},
        {0xc0, 0xac3, "AmpereOne"},
    };
    const char *vendor = NULL;
    for (size_t i = 0; i < sizeof vendors / sizeof vendors[0]; i++)
        if (vendors[i].id == implementer) vendor = vendors[i].name;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        if (parts[i].implementer == implementer && parts[i].part == part) {
            snprintf(buf, n, "%s %s", vendor, parts[i].name);
            return;
        }
    if (vendor)
        snprintf(buf, n, "%s arm64 CPU (part 0x%03x)", vendor, part);
    else
        snprintf(buf, n, "arm64 CPU (implementer 0x%02x, part 0x%03x)", implementer, part);
}

void st_hw_cpuinfo_parse(FILE *f, st_hw_info *h) {
    snprintf(h->cpu_model, sizeof h->cpu_model, "unknown CPU");
    int phys = -1, core = -1, n_pairs = 0;
    long implementer = -1, part = -1; /* arm64's first CPU's */
    bool named = false;
    long pairs[1024];
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon) continue;
        *colon = '\0';
        char *key = line, *val = colon + 1;
        trim(key);
        trim(val);
        if (strcmp(key, "model name") == 0) {
            snprintf(h->cpu_model, sizeof h->cpu_model, "%s", val);
            named = true;
        } else if (strcmp(key, "physical id") == 0) {
            phys = atoi(val);
        } else if (strcmp(key, "core id") == 0) {
            core = atoi(val);
        } else if (strcmp(key, "CPU implementer") == 0 && implementer < 0) {
            implementer = strtol(val, NULL, 0);
        } else if (strcmp(key, "CPU part") == 0 && part < 0) {
            part = strtol(val, NULL, 0);
        }
        if (phys >= 0 && core >= 0) { /* one (socket, core) pair per logical CPU */
            long pair = (long)phys * 100000 + core;
            bool seen = false;
            for (int i = 0; i < n_pairs && !seen; i++) seen = pairs[i] == pair;
            if (!seen && n_pairs < 1024) pairs[n_pairs++] = pair;
            phys = core = -1;
        }
    }
    if (!named && implementer >= 0 && part >= 0)
        st_hw_arm_cpu_name((unsigned)implementer, (unsigned)part, h->cpu_model, sizeof h->cpu_model);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    h->threads = online > 0 ? (int)online : 1;
    h->cores = n_pairs > 0 ? n_pairs : h->threads; /* VMs without topology, arm64: count threads */
}

static void probe_cpu(st_hw_info *h) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    st_hw_cpuinfo_parse(f, h);
    if (f) fclose(f);
    h->allowed = allowed_cpus(h->cpu_limit_by, sizeof h->cpu_limit_by);
}

int st_hw_allowed_cpus(void) { return allowed_cpus(NULL, 0); }

static st_status probe_memory(st_hw_info *h) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return st_fail(ST_ERR_IO, "/proc/meminfo: cannot open; the probe needs Linux /proc");
    char line[256];
    long long kb;
    h->mem_avail = -1;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemTotal: %lld kB", &kb) == 1) h->mem_total = kb * 1024;
        else if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) h->mem_avail = kb * 1024;
    }
    fclose(f);
    if (h->mem_avail < 0) h->mem_avail = h->mem_total;
    h->host_mem_total = h->mem_total;
    st_hw_mem_limit l;
    st_hw_mem_limit_get(&l);
    h->mem_shared = h->mem_avail;
    h->proc_room = l.proc_room < 0 ? 0 : l.proc_room > 0 ? l.proc_room : 1;
    /* (the cgroup's part, shared by the node's ranks; the address space is each one's) */
    if (l.shared_headroom >= 0 && l.shared_headroom < h->mem_shared) h->mem_shared = l.shared_headroom;
    if (l.headroom >= 0 && l.headroom < h->mem_avail) {
        h->mem_avail = l.headroom;
        snprintf(h->mem_limit_by, sizeof h->mem_limit_by, "%s", l.by);
    }
    if (l.smallest >= 0 && l.smallest < h->mem_total) h->mem_total = l.smallest;
    return ST_OK;
}

static void probe_cuda(st_hw_info *h) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(h->cuda_why, sizeof h->cuda_why, "no NVIDIA driver: %s", dlerror());
        return;
    }
    cuda_api c;
    bool ok = true;
    *(void **)&c.init = sym(lib, "cuInit", &ok);
    *(void **)&c.driver_version = sym(lib, "cuDriverGetVersion", &ok);
    *(void **)&c.count = sym(lib, "cuDeviceGetCount", &ok);
    *(void **)&c.get = sym(lib, "cuDeviceGet", &ok);
    *(void **)&c.name = sym(lib, "cuDeviceGetName", &ok);
    *(void **)&c.total_mem = sym(lib, "cuDeviceTotalMem_v2", &ok);
    *(void **)&c.attr = sym(lib, "cuDeviceGetAttribute", &ok);
    *(void **)&c.error_string = sym(lib, "cuGetErrorString", &ok);
    *(void **)&c.pci = dlsym(lib, "cuDeviceGetPCIBusId");
    if (!ok) {
        snprintf(h->cuda_why, sizeof h->cuda_why, "libcuda.so.1 lacks a driver API function (driver too old)");
        dlclose(lib);
        return;
    }
    CUresult r = c.init(0);
    const bool initialised = r == 0;
    int n = 0;
    if (r == 0) r = c.count(&n);
    if (r != 0) {
        const char *msg = NULL;
        c.error_string(r, &msg);
        snprintf(h->cuda_why, sizeof h->cuda_why, "%s: %s (error %d)",
                 initialised ? "cuDeviceGetCount" : "cuInit", msg ? msg : "unknown", r);
        if (!initialised) dlclose(lib); /* (after a cuInit that succeeded it stays: below) */
        return;
    }
    c.driver_version(&h->cuda_driver);
    if (n == 0) snprintf(h->cuda_why, sizeof h->cuda_why, "the driver sees no device (CUDA_VISIBLE_DEVICES?)");
    if (n > ST_HW_MAX_GPUS) n = ST_HW_MAX_GPUS;
    for (int i = 0; i < n; i++) {
        st_hw_gpu *g = &h->gpu[i];
        CUdevice d;
        size_t total = 0;
        if (c.get(&d, i) != 0) continue;
        c.name(g->name, (int)sizeof g->name, d);
        if (!c.pci || c.pci(g->pci, (int)sizeof g->pci, d) != 0) g->pci[0] = '\0';
        c.total_mem(&total, d);
        g->mem_total = (int64_t)total;
        g->mem_free = -1;
        c.attr(&g->cc_major, CU_ATTR_CC_MAJOR, d);
        c.attr(&g->cc_minor, CU_ATTR_CC_MINOR, d);
        c.attr(&g->sms, CU_ATTR_MULTIPROCESSOR_COUNT, d);
        g->nvlinks = g->procs = -1;
        g->remap_pending = g->remap_failed = -1;
        g->ecc_uncorrected = g->clock_events = -1;
    }
    h->n_gpus = n;
    /* The library stays loaded: unloading the driver after cuInit is unsafe. */
}

static st_hw_link link_from_ancestor(int level) {
    switch (level) { /* nvmlGpuTopologyLevel_t */
    case 0: return ST_LINK_SELF;
    case 10: case 20: return ST_LINK_PCIE_SWITCH;
    case 30: case 40: return ST_LINK_PCIE_HOST;
    case 50: return ST_LINK_SYSTEM;
    default: return ST_LINK_UNKNOWN;
    }
}

/* NVML's handle for CUDA device i: by its PCI bus id, as NVML numbers every
 * GPU of the machine while CUDA numbers those CUDA_VISIBLE_DEVICES shows, in
 * its order; by index only where neither the id nor that variable says
 * otherwise (NULL: not found, its readings stay unknown). */
static st_nvml_dev nvml_handle(const st_nvml *v, const st_hw_gpu *g, unsigned int i, unsigned int n) {
    st_nvml_dev d = NULL;
    if (g->pci[0]) return v->handle_by_pci(g->pci, &d) == 0 ? d : NULL;
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if ((vis && *vis) || i >= n || v->handle(i, &d) != 0) return NULL;
    return d;
}

static void probe_nvml(st_hw_info *h) {
    st_nvml v;
    if (!st_nvml_open(&v, NULL, h->nvml_why, sizeof h->nvml_why)) return;
    unsigned int n = 0;
    v.count(&n);
    if ((int)n > ST_HW_MAX_GPUS) n = ST_HW_MAX_GPUS;
    st_nvml_dev dev[ST_HW_MAX_GPUS]; /* by CUDA's index */
    for (int i = 0; i < h->n_gpus; i++) {
        dev[i] = nvml_handle(&v, &h->gpu[i], (unsigned int)i, n);
        if (!dev[i]) continue;
        st_hw_gpu *g = &h->gpu[i];
        st_nvml_memory m;
        if (v.memory(dev[i], &m) == 0) g->mem_free = (int64_t)m.free;
        g->nvlinks = 0;
        for (unsigned int l = 0; l < ST_NVML_NVLINK_MAX_LINKS; l++) {
            int active = 0;
            if (v.nvlink_state(dev[i], l, &active) == 0 && active) g->nvlinks++;
        }
        unsigned int corr, unc, pending, failed;
        if (v.remapped_rows && v.remapped_rows(dev[i], &corr, &unc, &pending, &failed) == 0) {
            g->remap_pending = pending != 0;
            g->remap_failed = failed != 0;
        }
        unsigned long long count, reasons;
        if (v.ecc_errors &&
            v.ecc_errors(dev[i], ST_NVML_MEMORY_ERROR_UNCORRECTED, ST_NVML_VOLATILE_ECC, &count) == 0)
            g->ecc_uncorrected = (int64_t)count;
        if (v.clock_events && v.clock_events(dev[i], &reasons) == 0) g->clock_events = (int64_t)reasons;
        st_nvml_process procs[64];
        unsigned int np = 64;
        if (v.procs && v.procs(dev[i], &np, procs) == 0) {
            g->procs = (int)np;
            g->procs_mem = 0;
            for (unsigned int k = 0; k < np; k++) g->procs_mem += (int64_t)procs[k].used;
        }
    }
    /* NVLink between a pair: NVML's peer-to-peer status over NVLink (two
     * GPUs each with links up may have them to others: bridged pairs, 0-1 and
     * 2-3); a driver without it, or that does not answer it, both ends with
     * active links. */
    for (int i = 0; i < h->n_gpus; i++)
        for (int j = 0; j < h->n_gpus; j++) {
            int level = -1, p2p = -1;
            const bool both = dev[i] && dev[j];
            const bool asked =
                i != j && both && v.p2p_status && v.p2p_status(dev[i], dev[j], ST_NVML_P2P_NVLINK, &p2p) == 0;
            if (i == j) h->link[i][j] = ST_LINK_SELF;
            else if (both && (asked ? p2p == ST_NVML_P2P_OK : h->gpu[i].nvlinks > 0 && h->gpu[j].nvlinks > 0))
                h->link[i][j] = ST_LINK_NVLINK;
            else if (both && v.common_ancestor(dev[i], dev[j], &level) == 0)
                h->link[i][j] = link_from_ancestor(level);
        }
    h->nvml = true;
    st_nvml_close(&v);
}

static void probe_launcher(st_hw_info *h) {
#ifdef ST_NO_MPI
    h->mpi_built = false;
#else
    h->mpi_built = true;
#endif
    const st_launcher l = st_launcher_get();
    snprintf(h->launcher, sizeof h->launcher, "%s", l.name);
    h->world = l.size > 1 ? (int)l.size : 1;
    h->local_ranks = l.local_size > 1 ? (int)l.local_size : 1;
}

static void probe_nccl(st_hw_info *h) {
    const char *names[] = {"libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2"};
    void *lib = NULL;
    for (int i = 0; i < 2 && !lib; i++) lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(h->nccl_why, sizeof h->nccl_why, "%s", dlerror());
        return;
    }
    int (*version)(int *);
    *(void **)&version = dlsym(lib, "ncclGetVersion");
    if (version && version(&h->nccl_version) == 0) h->nccl = true;
    else snprintf(h->nccl_why, sizeof h->nccl_why, "libnccl.so.2 has no working ncclGetVersion");
    dlclose(lib);
}

st_status st_hw_probe(st_hw_info *out) {
    memset(out, 0, sizeof *out);
    probe_cpu(out);
    ST_TRY(probe_memory(out));
    probe_cuda(out);
    if (out->n_gpus > 0) probe_nvml(out);
    else snprintf(out->nvml_why, sizeof out->nvml_why, "not probed: no CUDA device");
    probe_launcher(out);
    probe_nccl(out);
    return ST_OK;
}

st_status st_hw_probe_host(st_hw_info *out) {
    memset(out, 0, sizeof *out);
    probe_cpu(out);
    ST_TRY(probe_memory(out));
    snprintf(out->cuda_why, sizeof out->cuda_why, "not probed");
    probe_launcher(out);
    return ST_OK;
}

const char *st_hw_mem_note(const st_hw_info *h, char *buf, size_t n) {
    if (!h->mem_limit_by[0]) return NULL;
    const double gib = 1024.0 * 1024 * 1024;
    snprintf(buf, n, "%.2f GiB available to this process, as %s allows (the host has %.1f GiB)",
             (double)h->mem_avail / gib, h->mem_limit_by, (double)h->host_mem_total / gib);
    return buf;
}

const char *st_hw_link_name(st_hw_link l) {
    switch (l) {
    case ST_LINK_SELF: return "self";
    case ST_LINK_NVLINK: return "NVLink";
    case ST_LINK_PCIE_SWITCH: return "PCIe (same switch)";
    case ST_LINK_PCIE_HOST: return "PCIe (through the host bridge)";
    case ST_LINK_SYSTEM: return "PCIe (across CPU sockets)";
    default: return "unknown";
    }
}

void st_hw_print(const st_hw_info *h, FILE *out) {
    const double gib = 1024.0 * 1024 * 1024;
    fprintf(out, "cpu:    %s, %d physical cores, %d threads (%d usable by this process%s%s)\n", h->cpu_model,
            h->cores, h->threads, h->allowed, h->cpu_limit_by[0] ? ", as " : "", h->cpu_limit_by);
    char note[320];
    if (st_hw_mem_note(h, note, sizeof note))
        fprintf(out, "memory: %.1f GiB total, %s\n", (double)h->mem_total / gib, note);
    else
        fprintf(out, "memory: %.1f GiB total, %.1f GiB available\n", (double)h->mem_total / gib,
                (double)h->mem_avail / gib);
    if (h->n_gpus == 0) {
        fprintf(out, "cuda:   no CUDA device (%s)\n", h->cuda_why);
    } else {
        fprintf(out, "cuda:   %d device%s, driver %d.%d\n", h->n_gpus, h->n_gpus == 1 ? "" : "s",
                h->cuda_driver / 1000, h->cuda_driver % 1000 / 10);
        for (int i = 0; i < h->n_gpus; i++) {
            const st_hw_gpu *g = &h->gpu[i];
            fprintf(out, "  gpu %d: %s, %.1f GiB", i, g->name, (double)g->mem_total / gib);
            if (g->mem_free >= 0) fprintf(out, " (%.1f GiB free)", (double)g->mem_free / gib);
            fprintf(out, ", compute capability %d.%d, %d SMs", g->cc_major, g->cc_minor, g->sms);
            if (g->nvlinks > 0) fprintf(out, ", %d NVLinks", g->nvlinks);
            if (g->procs > 0)
                fprintf(out, ", %d process%s already hold %.1f GiB", g->procs, g->procs == 1 ? "" : "es",
                        (double)g->procs_mem / gib);
            fputc('\n', out);
            char why[1024];
            if (st_hw_gpu_health(g, why, sizeof why) > 0) fprintf(out, "    health: %s\n", why);
        }
        if (!h->nvml) fprintf(out, "nvml:   not available (%s): no free memory or links\n", h->nvml_why);
        else if (h->n_gpus > 1) {
            fprintf(out, "links:\n");
            for (int i = 0; i < h->n_gpus; i++)
                for (int j = i + 1; j < h->n_gpus; j++)
                    fprintf(out, "  gpu %d - gpu %d: %s\n", i, j, st_hw_link_name(h->link[i][j]));
        }
    }
    fprintf(out, "mpi:    %s; launcher: %s", h->mpi_built ? "built in" : "not built in (no mpicc at build time)",
            h->launcher);
    if (strcmp(h->launcher, "none") != 0)
        fprintf(out, " (%d rank%s, %d on this node)", h->world, h->world == 1 ? "" : "s", h->local_ranks);
    fputc('\n', out);
    char v[16];
    if (h->nccl)
        fprintf(out, "nccl:   %s\n", st_hw_nccl_version(h->nccl_version, v));
    else fprintf(out, "nccl:   not available (%s)\n", h->nccl_why);
}

int st_hw_gpu_health(const st_hw_gpu *g, char *why, size_t why_len) {
    size_t at = 0;
    int worst = -1;
#define SAY(level, ...)                                                                                      \
    do {                                                                                                     \
        st_appendf(why, why_len, &at, "%s", at ? "; " : "");                                                 \
        st_appendf(why, why_len, &at, __VA_ARGS__);                                                          \
        worst = worst > (level) ? worst : (level);                                                           \
    } while (0)
    if (why_len) why[0] = '\0';
    if (g->remap_failed == 1)
        SAY(2,
            "a memory row remapping failed: the GPU's memory needs service (nvidia-smi -q -d ROW_REMAPPER; "
            "ask the machine's administrators to replace it)");
    else if (g->remap_pending == 1)
        SAY(1, "a memory row remap is pending: it takes effect when the GPU is next reset (nvidia-smi -r, or "
               "a reboot); until then the driver keeps the bad row out of use");
    if (g->ecc_uncorrected > 0)
        SAY(1,
            "%lld uncorrectable ECC error%s since the driver loaded (each ends a process then using the GPU; "
            "nvidia-smi -q -d ECC, the kernel log's Xid 48/63/94)",
            (long long)g->ecc_uncorrected, g->ecc_uncorrected == 1 ? "" : "s");
    if (g->clock_events >= 0 && ((uint64_t)g->clock_events & ST_NVML_CLOCKS_SLOWED)) {
        char by[128];
        st_nvml_slowdown_names((unsigned long long)g->clock_events, by, sizeof by);
        SAY(1,
            "its clocks are slowed now (%s): a data-parallel step waits for the slowest GPU (nvidia-smi -q "
            "-d PERFORMANCE,TEMPERATURE; the cooling, or the power supply)",
            by);
    }
#undef SAY
    if (worst < 0 && (g->remap_failed >= 0 || g->ecc_uncorrected >= 0 || g->clock_events >= 0)) worst = 0;
    return worst;
}

const char *st_hw_nccl_version(int code, char buf[16]) {
    snprintf(buf, 16, "%d.%d.%d", code / 10000, code / 100 % 100, code % 100);
    return buf;
}
