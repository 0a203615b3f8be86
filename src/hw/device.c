/* Device presets and hardware configurations (see device.h).
 *
 * Peak figures are NVIDIA's datasheets, dense (the datasheets' starred
 * figures are with 2:4 sparsity, twice these):
 *   L40S (L40S datasheet, 2023): FP32 91.6 TFLOPS; BF16/FP16 tensor 362.05
 *     TFLOPS; 48 GB GDDR6 at 864 GB/s; PCIe Gen4 x16 (64 GB/s both ways),
 *     no NVLink; compute capability 8.9.
 *   L4 (L4 datasheet, 2023): FP32 30.3 TFLOPS; BF16/FP16 tensor 121 TFLOPS
 *     (242 with sparsity); 24 GB GDDR6 at 300 GB/s; PCIe Gen4 x16, no
 *     NVLink; 58 SMs; compute capability 8.9; 72 W. Eight to a server (a
 *     cloud's 8-GPU L4 machine: 100 Gb/s Ethernet for the eight).
 *   A100 SXM4 (A100 datasheet, 2021): FP32 19.5 TFLOPS; BF16/FP16 tensor 312
 *     TFLOPS; 40 GB HBM2 at 1,555 GB/s or 80 GB HBM2e at 2,039 GB/s; NVLink 3
 *     600 GB/s (both ways); compute capability 8.0.
 *   H100 SXM5 (H100 datasheet, 2023): FP32 67 TFLOPS; BF16/FP16 tensor 989.4
 *     TFLOPS (1,979 with sparsity); 80 GB HBM3 at 3.35 TB/s; NVLink 4 900 GB/s
 *     (both ways); PCIe Gen5; compute capability 9.0.
 *   H100 PCIe (H100 datasheet, 2023): FP32 51 TFLOPS; BF16/FP16 tensor 756
 *     TFLOPS (1,513 with sparsity); 80 GB HBM2e at 2 TB/s; PCIe Gen5 x16
 *     (64 GB/s each way), NVLink only by a bridge between two cards; 114
 *     SMs; compute capability 9.0.
 *   H100 NVL (H100 NVL datasheet, 2024): FP32 60 TFLOPS; BF16/FP16 tensor
 *     835 TFLOPS (1,671 with sparsity); 94 GB HBM3 at 3.9 TB/s (the card
 *     reports 95,330 MiB); PCIe Gen5 x16, NVLink bridges between pairs
 *     only; 132 SMs, as the SXM5's, at lower clocks; compute capability 9.0.
 *   H200 SXM (H200 datasheet, 2024): compute as H100 SXM; 141 GB HBM3e at
 *     4.8 TB/s; NVLink 4 900 GB/s; compute capability 9.0.
 *   GH200 Grace Hopper Superchip (GH200 datasheet, 2024): the H100's compute
 *     (same die, 132 SMs) with 96 GB HBM3 at 4 TB/s, or 144 GB HBM3e at
 *     4.9 TB/s (GH200-144GB); joined to its own 72-core Grace CPU by
 *     NVLink-C2C, 900 GB/s both ways, and Grace's LPDDR5X at up to 512 GB/s.
 *     Between superchips: NVLink 4 in a node of four (all to all), one
 *     network port of 200 Gb/s per superchip (Alps' Slingshot, JUPITER's
 *     NDR200 InfiniBand).
 * Link figures are the all-reduce bus bandwidth one can expect, which is not
 * a datasheet number: 80% of the one-way link bandwidth (NVLink 3: 300 GB/s,
 * NVLink 4: 450 GB/s, PCIe Gen4 x16: 32 GB/s less host-bridge hops, taken as
 * 20 GB/s, Gen5 x16 by the same ratio 40 GB/s; an H100 NVL's bridges join
 * pairs, so a ring over more goes through PCIe), in line with what
 * nccl-tests report on DGX A100/H100 and on PCIe servers. Between nodes:
 * one 200 Gb/s HDR InfiniBand NIC per GPU on DGX A100 (25 GB/s), one
 * 400 Gb/s NDR NIC per GPU on DGX H100/H200 (50 GB/s), one 200 Gb/s port
 * per GPU taken for PCIe H100 servers (25 GB/s), two 200 Gb/s NICs per
 * 4-GPU L40S server (12.5 GB/s per GPU), 100 Gb/s per 8-GPU L4 server
 * (1.56 GB/s per GPU); 80% of it.
 * Host copies (offload): PCIe at about 80% of one way (Gen4 x16 25 GB/s,
 * Gen5 50 GB/s); NVLink-C2C 80% of its 450 GB/s one way. An offloaded
 * update streams host memory: a PCIe server's is shared by its GPUs
 * (timing.c), a GH200's Grace is its own, taken at about 60% of its
 * 512 GB/s, as a streaming pass reaches. */
#include "device.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/blas.h"
#include "core/mem.h"

#define T 1e12
#define G 1e9
#define GIB (1024LL * 1024 * 1024)
#define MIB (1024LL * 1024)

/* Memory is what the card reports (nvidia-smi's total, in MiB), not the
 * datasheet's round GB: an L40S's 48 GB is 46,068 MiB with ECC on (45.0
 * GiB, not 48), an L4's 24 GB 23,034 MiB, an H100's 80 GB 81,559 MiB (the
 * PCIe card's taken as the SXM5's: not seen), an H100 NVL's 94 GB 95,330
 * MiB, an H200's 141 GB 143,771 MiB; an A100's 40 and 80 GB are 40 and 80
 * GiB. The GH200s' are their datasheets' GB as GiB, not measured. */

static const struct preset {
    const char *name, *alias;
    st_hw_device d;
} presets[] = {
    {"L40S",
     "L40S-48GB",
     {"L40S", true, 362.05 * T, 91.6 * T, 864 * G, 46068 * MIB, 8, 9, "PCIe 4.0 x16", 20 * G, 10e-6,
      "2x HDR IB per 4 GPUs", 0.8 * 12.5 * G, 10e-6, 25 * G, 0, 0, false, 0}},
    {"L4",
     "L4-24GB",
     {"L4", true, 121 * T, 30.3 * T, 300 * G, 23034 * MIB, 8, 9, "PCIe 4.0 x16", 20 * G, 10e-6,
      "100 GbE per 8 GPUs", 0.8 * 12.5 / 8 * G, 20e-6, 25 * G, 0, 0, false, 0}},
    {"A100-40GB",
     "A100",
     {"A100-40GB", true, 312 * T, 19.5 * T, 1555 * G, 40 * GIB, 8, 0, "NVLink 3", 0.8 * 300 * G, 5e-6,
      "HDR IB per GPU", 0.8 * 25 * G, 10e-6, 25 * G, 0, 0, false, 0}},
    {"A100-80GB",
     NULL,
     {"A100-80GB", true, 312 * T, 19.5 * T, 2039 * G, 80 * GIB, 8, 0, "NVLink 3", 0.8 * 300 * G, 5e-6,
      "HDR IB per GPU", 0.8 * 25 * G, 10e-6, 25 * G, 0, 0, false, 0}},
    {"H100-80GB",
     "H100",
     {"H100-80GB", true, 989.4 * T, 67 * T, 3350 * G, 81559 * MIB, 9, 0, "NVLink 4", 0.8 * 450 * G, 5e-6,
      "NDR IB per GPU", 0.8 * 50 * G, 10e-6, 50 * G, 0, 0, false, 0}},
    {"H100-PCIe",
     "H100-PCIe-80GB",
     {"H100-PCIe", true, 756 * T, 51 * T, 2000 * G, 81559 * MIB, 9, 0, "PCIe 5.0 x16", 40 * G, 10e-6,
      "200 Gb/s per GPU", 0.8 * 25 * G, 10e-6, 50 * G, 0, 0, false, 0}},
    {"H100-NVL",
     "H100-NVL-94GB",
     {"H100-NVL", true, 835 * T, 60 * T, 3900 * G, 95330 * MIB, 9, 0, "PCIe 5.0 x16", 40 * G, 10e-6,
      "200 Gb/s per GPU", 0.8 * 25 * G, 10e-6, 50 * G, 0, 0, false, 0}},
    {"H200",
     "H200-141GB",
     {"H200", true, 989.4 * T, 67 * T, 4800 * G, 143771 * MIB, 9, 0, "NVLink 4", 0.8 * 450 * G, 5e-6,
      "NDR IB per GPU", 0.8 * 50 * G, 10e-6, 50 * G, 0, 0, false, 0}},
    {"GH200",
     "GH200-96GB",
     {"GH200", true, 989.4 * T, 67 * T, 4000 * G, 96 * GIB, 9, 0, "NVLink 4", 0.8 * 450 * G, 5e-6,
      "200 Gb/s per superchip", 0.8 * 25 * G, 10e-6, 0.8 * 450 * G, 0, 0.6 * 512 * G, false, 0}},
    {"GH200-144GB",
     NULL,
     {"GH200-144GB", true, 989.4 * T, 67 * T, 4900 * G, 144 * GIB, 9, 0, "NVLink 4", 0.8 * 450 * G, 5e-6,
      "200 Gb/s per superchip", 0.8 * 25 * G, 10e-6, 0.8 * 450 * G, 0, 0.6 * 512 * G, false, 0}},
    /* The CPU: placeholders until measured (st_device_local). Memory
     * bandwidth and the shared-memory MPI all-reduce are this machine kind's
     * measured orders of magnitude (docs/planner.md), not a datasheet. */
    {"cpu",
     NULL,
     {"cpu", false, 50 * G, 50 * G, 20 * G, 8 * GIB, 0, 0, "shared memory", 2 * G, 20e-6, "10 GbE TCP",
      1.1 * G, 50e-6, 20 * G, 0, 0, false, 0}},
};
enum { N_PRESETS = sizeof presets / sizeof presets[0] };

bool st_device_preset(const char *name, st_hw_device *out) {
    for (int i = 0; i < N_PRESETS; i++)
        if (strcasecmp(name, presets[i].name) == 0 || (presets[i].alias && strcasecmp(name, presets[i].alias) == 0)) {
            *out = presets[i].d;
            return true;
        }
    return false;
}

const char *st_device_names(void) {
    return "L40S, L4, A100-40GB (A100), A100-80GB, H100-80GB (H100), H100-PCIe, H100-NVL, H200, "
           "GH200 (GH200-96GB), GH200-144GB, cpu, local";
}

/* Whether a GPU's name holds the model `key` whole: not followed by a
 * digit ("NVIDIA L4" holds L4; "NVIDIA L40" and "NVIDIA L40S" do not). */
static bool model_in(const char *name, const char *key) {
    for (const char *at = strstr(name, key); at; at = strstr(at + 1, key)) {
        const char next = at[strlen(key)];
        if (!(next >= '0' && next <= '9')) return true;
    }
    return false;
}

/* Dense FLOP per clock per multiprocessor: 16-bit tensor-core products with
 * fp32 accumulation, and fp32 FMA on the CUDA cores (2 x cores). From the
 * architecture whitepapers (Volta, Ampere GA100/GA102, Ada, Hopper,
 * Blackwell); GeForce parts of 8.6 and 8.9 accumulate fp32 at half rate. */
static int per_sm_clock(int major, int minor, bool tensor16, bool geforce) {
    const int v = major * 10 + minor;
    if (!tensor16) return v >= 86 ? 256 : v >= 70 ? 128 : 0;
    if (v >= 100 && v < 110) return 8192;
    if (v == 90) return 4096;
    if (v == 80) return 2048;
    if (v == 86 || v == 87 || v == 89) return geforce ? 512 : 1024;
    if (v == 70 || v == 72 || v == 75) return 1024;
    return 0;
}

double st_gpu_peak(const char *name, int cc_major, int cc_minor, int sms, int clock_khz, bool tensor16, char *why,
                   size_t why_len) {
    static const struct {
        const char *key, *preset, *what;
        int sms;
    } sheets[] = {{"GH200", "GH200", "GH200", 132}, /* before H200, which its name holds */
                  {"H200", "H200", "H200 SXM", 132},
                  {"H100 NVL", "H100-NVL", "H100 NVL", 132}, /* before H100, which its name holds */
                  {"H100 PCIe", "H100-PCIe", "H100 PCIe", 114},
                  {"H100", "H100-80GB", "H100 SXM", 132},
                  {"A100", "A100-80GB", "A100", 108},
                  {"L40S", "L40S", "L40S", 142},
                  {"L4", "L4", "L4", 58}};
    for (size_t i = 0; i < sizeof sheets / sizeof sheets[0]; i++) {
        st_hw_device d;
        if (model_in(name, sheets[i].key) && sms == sheets[i].sms && st_device_preset(sheets[i].preset, &d)) {
            const double f = tensor16 ? d.peak_bf16 : d.peak_fp32;
            snprintf(why, why_len, "datasheet: %s, %.1f TFLOPS %s dense", sheets[i].what, f / T,
                     tensor16 ? "bf16/fp16 tensor" : "fp32");
            return f;
        }
    }
    const int per = per_sm_clock(cc_major, cc_minor, tensor16, strstr(name, "GeForce") != NULL);
    if (per == 0 || sms <= 0 || clock_khz <= 0) {
        snprintf(why, why_len, "unknown for compute capability %d.%d (%d SMs at %d kHz): set log.peak_gflops",
                 cc_major, cc_minor, sms, clock_khz);
        return 0;
    }
    const double f = (double)sms * clock_khz * 1e3 * per;
    snprintf(why, why_len, "%d SMs x %.2f GHz x %d FLOP/clock (sm_%d%d %s, dense)", sms, clock_khz / 1e6, per,
             cc_major, cc_minor, tensor16 ? "bf16/fp16 tensor cores" : "fp32 cores");
    return f;
}

st_status st_device_calibrate_cpu(double *flops_per_s, int *n_out) {
    const int threads = openblas_get_num_threads();
    int k = 4; /* 4 x the cube root of the threads, rounded up, in integers (8 threads: exactly 8) */
    while (k < 16 && k * k * k < 64 * threads)
        k++;
    const int N = 128 * k;
    if (n_out) *n_out = N;
    const size_t count = (size_t)N * N;
    float *a = st_alloc_aligned(3 * count * sizeof *a);
    if (!a) return st_fail(ST_ERR_NOMEM, "out of memory for the CPU calibration sgemm");
    float *b = a + count, *c = b + count;
    for (size_t i = 0; i < 2 * count; i++) a[i] = (float)((i * 7919u) % 17u) / 17.0f - 0.5f;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N); /* warm */
    /* The fastest repetition: other processes on a shared machine only ever
     * slow one down, and a step is planned for the machine, not its load. */
    struct timespec t0, t1, r0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    double dt, best = 1e30;
    int reps = 0;
    do {
        clock_gettime(CLOCK_MONOTONIC, &r0);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        const double rep = (double)(t1.tv_sec - r0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - r0.tv_nsec);
        if (rep < best) best = rep;
        dt = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    } while (++reps < 3 || dt < 0.03);
    st_free_aligned(a);
    *flops_per_s = 2.0 * N * N * (double)N / best;
    return ST_OK;
}

/* A node whose GPUs the probe saw joined without NVLink somewhere along
 * the ring (A100 PCIe cards, which take the SXM4's preset by their name;
 * GPUs of bridged pairs): the all-reduce goes at PCIe's rate, the link of
 * a PCIe preset of its generation (the L40S's Gen4 for compute capability
 * 8.x, the H100 PCIe's Gen5 from 9.0). A link NVML did not tell keeps the
 * preset's. */
static void local_link(const st_hw_info *h, st_hw_device *out) {
    if (h->n_gpus < 2 || strncmp(out->link, "NVLink", 6) != 0) return;
    for (int i = 0; i < h->n_gpus && i < ST_HW_MAX_GPUS; i++) {
        const st_hw_link l = h->link[i][(i + 1) % h->n_gpus];
        if (l == ST_LINK_UNKNOWN || l == ST_LINK_NVLINK || l == ST_LINK_SELF) continue;
        st_hw_device pcie;
        st_device_preset(out->cc_major >= 9 ? "H100-PCIe" : "L40S", &pcie);
        snprintf(out->link, sizeof out->link, "%s", pcie.link);
        out->link_bw = pcie.link_bw;
        out->link_lat = pcie.link_lat;
        return;
    }
}

void st_device_local(const st_hw_info *h, double cpu_flops, st_hw_device *out) {
    if (h->n_gpus > 0) {
        /* A known GPU by its name ("NVIDIA H100 80GB HBM3" holds "H100";
         * "NVIDIA GH200 480GB" holds "H200" too, so GH200 is looked for
         * first). Parts sold with two memory sizes by their memory. */
        const int64_t mem = h->gpu[0].mem_total;
        const char *keys[][2] = {{"GH200", mem > 100 * GIB ? "GH200-144GB" : "GH200"},
                                 {"H200", "H200"},
                                 {"H100 NVL", "H100-NVL"}, /* ("NVIDIA H100 NVL", "NVIDIA H100 PCIe") */
                                 {"H100 PCIe", "H100-PCIe"},
                                 {"H100", "H100-80GB"},
                                 {"L40S", "L40S"},
                                 {"L4", "L4"}, /* ("NVIDIA L4"; an L40's name holds "L4" too: model_in) */
                                 {"A100", mem > 48 * GIB ? "A100-80GB" : "A100-40GB"}};
        bool found = false;
        for (size_t i = 0; i < sizeof keys / sizeof keys[0] && !found; i++)
            if (model_in(h->gpu[0].name, keys[i][0])) found = st_device_preset(keys[i][1], out);
        if (!found) { /* an unknown GPU: A100-class rates, its own memory; say so */
            st_device_preset("A100-40GB", out);
        }
        snprintf(out->name, sizeof out->name, "%s%s", found ? "" : "unknown: ", h->gpu[0].name);
        /* What is free now (NVML), as a starting run plans against (session.c):
         * a GPU that another process holds is planned as the run will find it. */
        out->mem_bytes = h->gpu[0].mem_free >= 0 && h->gpu[0].mem_free < h->gpu[0].mem_total
                             ? h->gpu[0].mem_free
                             : h->gpu[0].mem_total;
        out->cc_major = h->gpu[0].cc_major;
        out->cc_minor = h->gpu[0].cc_minor;
        local_link(h, out);
        out->host_mem_bytes = h->mem_shared;
        out->proc_limited = h->proc_room > 0;
        out->proc_mem_bytes = h->proc_room;
        return;
    }
    st_device_preset("cpu", out);
    if (cpu_flops > 0) out->peak_fp32 = out->peak_bf16 = cpu_flops;
    out->mem_bytes = h->mem_shared;
    out->proc_limited = h->proc_room > 0;
    out->proc_mem_bytes = h->proc_room;
}

int st_hw_ranks(const st_hw_config *hw) { return hw->ranks > 0 ? hw->ranks : hw->per_node * hw->nodes; }

st_status st_hw_config_parse(const char *spec, const st_hw_device *local, const st_hw_device *cpu, st_hw_config *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->label, sizeof out->label, "%s", spec);
    long nodes = 1, per_node = 1; /* checked before they become ints (sscanf saturates at LONG_MAX) */
    int used = 0;
    const char *name = spec;
    if (sscanf(spec, "%ldx%ldx%n", &nodes, &per_node, &used) == 2 && used > 0) {
        out->nodes_given = true;
        name = spec + used;
    } else if (sscanf(spec, "%ldx%n", &per_node, &used) == 1 && used > 0) {
        nodes = 1;
        name = spec + used;
    } else {
        nodes = per_node = 1;
    }
    if (nodes < 1 || per_node < 1 || nodes > 100000 || per_node > 1024)
        return st_fail(
            ST_ERR_CONFIG,
            "--hw %s: 1 to 1024 devices per node and 1 to 100000 nodes (e.g. 8xH100, or 2x8xH100 for "
            "2 nodes)",
            spec);
    out->nodes = (int)nodes;
    out->per_node = (int)per_node;
    if (strcasecmp(name, "local") == 0) {
        if (!local) return st_fail(ST_ERR_CONFIG, "--hw %s: the local machine was not probed", spec);
        out->dev = *local;
        return ST_OK;
    }
    if (strcasecmp(name, "cpu") == 0 && cpu) {
        out->dev = *cpu;
        return ST_OK;
    }
    if (!st_device_preset(name, &out->dev))
        return st_fail(ST_ERR_CONFIG, "--hw %s: unknown hardware '%s'; known: %s (as N x NAME, e.g. 8xH100)", spec,
                       name, st_device_names());
    return ST_OK;
}
