/* Opening a CUDA device and its memory (src/cuda/cuda.h, src/core/device.h).
 * A binary built with CUDA runs on a machine without a GPU or driver: the
 * count is 0 with the reason, and the caller stays on the CPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.cuh"
#include "libs.h"
#ifdef ST_HAVE_CUDNN
#include "attention_cudnn.h"
#endif

/* The errors after which the CUDA runtime says "the process must be
 * terminated and relaunched": a kernel faulted, and every later call
 * returns the same error. The call that reports one is where the host
 * noticed, usually a later wait, not the kernel that faulted. */
static bool context_lost(cudaError_t e) {
    switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorECCUncorrectable:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
        return true;
    default:
        break;
    }
    /* by number: names that older toolkits' headers lack */
    switch ((int)e) {
    case 226: /* cudaErrorContained: an error the GPU contained (an ECC error in this process's memory) */
    case 721: /* cudaErrorTensorMemoryLeak: a kernel exited holding tensor memory */
    case 810: /* cudaErrorMpsClientTerminated: MPS ended this client after a fault */
    case 911: /* cudaErrorExternalDevice: a fault on a device reached through this GPU */
        return true;
    default:
        return false;
    }
}

extern "C" const char *st_cuda_lost_hint(cudaError_t e) {
    if (e == cudaSuccess) e = cudaPeekAtLastError();
    return context_lost(e)
               ? ": a kernel faulted and this process can no longer use the GPU (a fault shows at "
                 "the host's next wait, not where it happened); the kernel log (dmesg) names the "
                 "driver's Xid: a hardware fault (ECC, a GPU off the bus) is the node's to fix, a "
                 "kernel's own bug shows under compute-sanitizer; --resume auto continues from the "
                 "latest checkpoint"
               : "";
}

extern "C" st_status st_cuda_fail(const st_device *d, cudaError_t e, const char *what, const char *file,
                                  int line) {
    char host[64] = "?";
    if (d)
        snprintf(host, sizeof host, "%s", d->host);
    else
        gethostname(host, sizeof host - 1);
    return st_fail(e == cudaErrorMemoryAllocation ? ST_ERR_NOMEM : ST_ERR_INTERNAL,
                   "%s:%d: %s failed: %s (%s) on host %s, cuda:%d%s", file, line, what, cudaGetErrorString(e),
                   cudaGetErrorName(e), host, d ? d->ordinal : -1, st_cuda_lost_hint(e));
}

extern "C" st_status st_cublas_fail(const st_device *d, cublasStatus_t e, const char *what, const char *file,
                                    int line) {
    return st_fail(e == CUBLAS_STATUS_ALLOC_FAILED ? ST_ERR_NOMEM : ST_ERR_INTERNAL,
                   "%s:%d: %s failed: cuBLAS status %d on host %s, cuda:%d%s", file, line, what, (int)e,
                   d ? d->host : "?", d ? d->ordinal : -1, st_cuda_lost_hint(cudaSuccess));
}

/* Why cudaGetDeviceCount found no device, in the user's terms: the runtime
 * says "driver version is insufficient" both when there is no driver and
 * when the driver is older than the runtime, and only the second is fixed
 * by updating it. */
static void no_device_why(cudaError_t e, char *why, size_t len) {
    int drv = 0, rt = 0;
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (e == cudaErrorInsufficientDriver && cudaDriverGetVersion(&drv) == cudaSuccess && drv == 0) {
        snprintf(why, len, "no CUDA device: no NVIDIA driver on this machine (libcuda.so.1 not found)");
    } else if (e == cudaErrorInsufficientDriver && cudaRuntimeGetVersion(&rt) == cudaSuccess) {
        snprintf(
            why, len,
            "no CUDA device: the NVIDIA driver runs CUDA up to %d.%d, and this build's runtime is %d.%d; "
            "update the driver",
            drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
    } else if (e == cudaErrorNoDevice || e == cudaSuccess) {
        snprintf(why, len, "no CUDA device: the driver sees no GPU%s%s%s",
                 vis ? " (CUDA_VISIBLE_DEVICES=" : "", vis ? vis : "", vis ? ")" : "");
    } else {
        snprintf(why, len, "no CUDA device: %s", cudaGetErrorString(e));
    }
}

/* Why a device of compute capability major.minor cannot run the kernels:
 * their bf16 tensor-core products (mma.sync, cuBLASLt's bf16 paths) exist
 * from compute capability 8.0; the build carries sm_80 and sm_90 code and
 * sm_90 PTX that newer GPUs compile at load. false where it can. */
static bool too_old(const char *name, int major, int minor, char *why, size_t len) {
    if (major >= 8) return false;
    if (why && len)
        snprintf(why, len,
                 "%s has compute capability %d.%d: scaletrain's CUDA kernels need 8.0 or later (bf16 tensor "
                 "cores: A100, A10, L4, L40S, H100 and newer)",
                 name, major, minor);
    return true;
}

extern "C" int st_cuda_device_count(char *why, size_t why_len) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        if (why && why_len) no_device_why(e, why, why_len);
        cudaGetLastError(); /* clear the sticky-free error so later calls start clean */
        return 0;
    }
    /* cuBLASLt only now: a CPU run never maps it (about 150 MiB of its
     * pages resident once loaded); no device is usable without it */
    char lib[400];
    if (!st_cuda_lib_ready(ST_CUDA_LIB_CUBLASLT, lib, sizeof lib)) {
        if (why && why_len) snprintf(why, why_len, "no CUDA device usable: %s", lib);
        return 0;
    }
    /* Devices older than the kernels: where every one is, none is usable
     * (auto trains on the CPU, saying why; launch -n auto starts one rank);
     * one among newer ones is refused as it opens (st_device_open_cuda). */
    char first[400] = "";
    int old = 0;
    for (int i = 0; i < n; i++) {
        cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess) {
            cudaGetLastError();
            continue;
        }
        char name[300];
        snprintf(name, sizeof name, "cuda:%d (%s)", i, p.name);
        if (too_old(name, p.major, p.minor, old ? NULL : first, sizeof first)) old++;
    }
    if (old == n) {
        if (why && why_len) snprintf(why, why_len, "no CUDA device usable: %s", first);
        return 0;
    }
    return n;
}

/* ---- the stall watch ----------------------------------------------------- */

/* The host's waits for the device (a stream, an event) under core/watch.h:
 * a wait past train.device_timeout_s (less the time this process was
 * stopped) ends the process, naming the device, what it waited on and the
 * step. Nothing else can: the thread is inside the driver and returns no
 * status; under mpirun the other ranks are ended with it. */
extern "C" void st_cuda_call_begin(st_device *d, const char *what) {
    if (!d->watch) return;
    char w[512], at[48] = "";
    const int64_t step = __atomic_load_n(&d->step, __ATOMIC_RELAXED);
    if (step > 0) snprintf(at, sizeof at, " at step %lld", (long long)step);
    snprintf(w, sizeof w, "%s%s", what, at);
    st_watch_begin(d->watch, w);
}

void st_cuda_wait_begin(st_device *d, const char *what) {
    if (!d->watch) return;
    char w[400];
    snprintf(w, sizeof w, "what %s has queued on %s", d->name, what);
    st_cuda_call_begin(d, w);
}

extern "C" void st_cuda_call_end(st_device *d) { st_watch_end(d->watch); }

extern "C" st_status st_cuda_watch(st_device *d, double limit_s, const char *who) {
    if (d->watch || !(limit_s > 0)) return ST_OK;
    return st_watch_start(
        limit_s, who, "train.device_timeout_s",
        "a kernel that does not end, or a GPU that stopped answering (the kernel log, dmesg, "
        "names the driver's Xid errors)",
        "--resume auto continues from the latest checkpoint, if the run wrote one", &d->watch);
}

extern "C" void st_cuda_set_step(st_device *d, int64_t step) {
    __atomic_store_n(&d->step, step, __ATOMIC_RELAXED);
}

extern "C" void st_cuda_free(st_device *d) {
    if (!d) return;
    st_watch_stop(d->watch); /* first: nothing below is watched */
    d->watch = NULL;
    cudaSetDevice(d->ordinal);
    st_cuda_plans_free(d);
#ifdef ST_HAVE_CUDNN
    st_cudnn_destroy(d->cudnn);
#endif
    if (d->lt) cublasLtDestroy(d->lt);
    if (d->lt_ws) cudaFree(d->lt_ws);
    if (d->flag) cudaFree(d->flag);
    if (d->scratch) cudaFree(d->scratch);
    if (d->d2h) cudaStreamDestroy(d->d2h);
    if (d->copy) cudaStreamDestroy(d->copy);
    if (d->comm) cudaStreamDestroy(d->comm);
    if (d->compute) cudaStreamDestroy(d->compute);
    free(d->blocks);
    free(d);
}

/* A failed cudaMalloc of nbytes: what the device has, what this run holds
 * there, what is held outside it (another process on the GPU shows here),
 * and where to look for a run that fits. */
static st_status out_of_memory(st_device *d, size_t nbytes) {
    size_t free_b = 0, total_b = 0;
    cudaGetLastError();
    cudaMemGetInfo(&free_b, &total_b);
    const double mib = 1 << 20, outside = (double)total_b - (double)free_b - (double)d->allocated;
    char held[200] = "";
    if (outside >= 1024 * mib) /* (more than this process's CUDA context takes) */
        snprintf(held, sizeof held,
                 "; other processes and this one's CUDA context hold %.1f GiB: nvidia-smi lists them",
                 outside / (1024 * mib));
    return st_fail(
        ST_ERR_NOMEM,
        "%s: out of device memory allocating %.1f MiB (%.1f of %.1f MiB free; this run holds %.1f MiB%s). %s",
        d->name, (double)nbytes / mib, (double)free_b / mib, (double)total_b / mib,
        (double)d->allocated / mib, held,
        d->oom_advice[0] ? d->oom_advice
                         : "Lower train.micro_batch_size, or set train.activation_checkpointing, "
                           "optim.offload, or dist.strategy zero2 over more GPUs; `scaletrain plan` "
                           "with the run's config shows what fits a whole GPU");
}

/* An allocation while the device opens (cuBLASLt's workspace, the halt
 * flag), before the run has any memory of its own: no setting of the run
 * shrinks it, so the advice is about the device (the run's own is
 * out_of_memory's). */
static st_status open_out_of_memory(st_device *d, size_t nbytes, const char *what) {
    size_t free_b = 0, total_b = 0;
    cudaGetLastError();
    cudaMemGetInfo(&free_b, &total_b);
    const double mib = 1 << 20;
    char size[32], held[96] = "";
    if (nbytes < (1 << 20))
        snprintf(size, sizeof size, "%zu bytes", nbytes);
    else
        snprintf(size, sizeof size, "%.1f MiB", (double)nbytes / mib);
    if (d->allocated > 0)
        snprintf(held, sizeof held, "; cuBLASLt's workspace holds %.1f MiB", d->allocated / mib);
    return st_fail(
        ST_ERR_NOMEM,
        "%s: out of device memory allocating %s (%s) as it opens (%.1f of %.1f MiB free%s), before "
        "the run's own memory: other processes hold the device (nvidia-smi lists them), or it is "
        "too small; free it, or choose another (train.device cuda:N, CUDA_VISIBLE_DEVICES)",
        d->name, what, size, (double)free_b / mib, (double)total_b / mib, held);
}

extern "C" bool st_cuda_lost(st_device *d) {
    cudaSetDevice(d->ordinal);
    st_cuda_wait_begin(d, "checking the GPU after an error");
    cudaError_t e = cudaStreamSynchronize(d->compute);
    st_cuda_call_end(d);
    if (e == cudaSuccess) e = cudaPeekAtLastError();
    return context_lost(e);
}

extern "C" void st_cuda_set_oom_advice(st_device *d, const char *advice) {
    snprintf(d->oom_advice, sizeof d->oom_advice, "%s", advice ? advice : "");
}

static st_status open_device(st_device *d, int ordinal) {
    ST_CUDA_TRY_D(d, cudaSetDevice(ordinal));
    cudaDeviceProp prop;
    ST_CUDA_TRY_D(d, cudaGetDeviceProperties(&prop, ordinal));
    d->cc_major = prop.major;
    d->cc_minor = prop.minor;
    d->sm_count = prop.multiProcessorCount;
    const unsigned char *u = (const unsigned char *)prop.uuid.bytes;
    snprintf(d->uuid, sizeof d->uuid,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2],
             u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    const double gib = (double)prop.totalGlobalMem / (1 << 30);
    snprintf(d->name, sizeof d->name, "cuda:%d (%s, sm_%d%d, %.*f GiB)", ordinal, prop.name, prop.major,
             prop.minor, st_gib_digits(gib), gib);
    char old[600];
    if (too_old(d->name, prop.major, prop.minor, old, sizeof old))
        return st_fail(ST_ERR_UNSUPPORTED, "%s", old);
    ST_CUDA_TRY_D(d, cudaStreamCreateWithFlags(&d->compute, cudaStreamNonBlocking));
    ST_CUDA_TRY_D(d, cudaStreamCreateWithFlags(&d->comm, cudaStreamNonBlocking));
    ST_CUDA_TRY_D(d, cudaStreamCreateWithFlags(&d->copy, cudaStreamNonBlocking));
    ST_CUDA_TRY_D(d, cudaStreamCreateWithFlags(&d->d2h, cudaStreamNonBlocking));
    ST_CUBLAS_TRY_D(d, cublasLtCreate(&d->lt));
    d->lt_ws_bytes = (size_t)ST_CUDA_LT_WORKSPACE_BYTES;
    cudaError_t e = cudaMalloc(&d->lt_ws, d->lt_ws_bytes);
    if (e == cudaErrorMemoryAllocation) return open_out_of_memory(d, d->lt_ws_bytes, "cuBLASLt's workspace");
    ST_CUDA_TRY_D(d, e);
    d->allocated = d->peak = (int64_t)d->lt_ws_bytes;
    if (cudaDeviceGetPCIBusId(d->pci_bus_id, (int)sizeof d->pci_bus_id, ordinal) != cudaSuccess) {
        cudaGetLastError(); /* only NVML's lookup needs it */
        d->pci_bus_id[0] = '\0';
    }
    e = cudaMalloc((void **)&d->flag, sizeof *d->flag);
    if (e == cudaErrorMemoryAllocation) return open_out_of_memory(d, sizeof *d->flag, "the halt flag");
    ST_CUDA_TRY_D(d, e);
    return ST_OK;
}

extern "C" st_status st_cuda_open(int ordinal, st_device **out) {
    *out = NULL;
    char why[256];
    int n = st_cuda_device_count(why, sizeof why);
    if (n == 0) return st_fail(ST_ERR_UNSUPPORTED, "cuda:%d: %s", ordinal, why);
    if (ordinal < 0 || ordinal >= n)
        return st_fail(ST_ERR_ARG, "cuda:%d: there are %d CUDA device(s) (0 to %d)", ordinal, n, n - 1);
    st_device *d = (st_device *)calloc(1, sizeof *d);
    if (!d) return st_fail(ST_ERR_NOMEM, "cuda:%d: out of host memory opening the device", ordinal);
    d->ordinal = ordinal;
    gethostname(d->host, sizeof d->host - 1);
    st_status s = open_device(d, ordinal);
    if (s != ST_OK) {
        st_cuda_free(d);
        return s;
    }
    *out = d;
    return ST_OK;
}

extern "C" const char *st_cuda_name(const st_device *d) { return d->name; }

extern "C" int64_t st_cuda_stream_waits(const st_device *d) { return d->stream_waits; }

extern "C" int64_t st_cuda_cudnn_calls(const st_device *d) { return d->cudnn_calls; }

extern "C" int64_t st_cuda_bias_grad_epilogues(const st_device *d) { return d->bgrad_calls; }
extern "C" int64_t st_cuda_kept_rows_calls(const st_device *d) { return d->kept_rows_calls; }

extern "C" bool st_cuda_cudnn_built(char *why, size_t n) {
#if defined(ST_CUDA_EMU)
    snprintf(why, n, "the CUDA emulator has no cuDNN");
    return false;
#elif defined(ST_HAVE_CUDNN)
    if (!st_cuda_lib_ready(ST_CUDA_LIB_CUDNN, why, n)) return false;
    const long long v = (long long)st_cudnn_version(); /* 91900: 9.19.0 */
    snprintf(why, n, "cuDNN %lld.%lld.%lld", v / 10000, v / 100 % 100, v % 100);
    return true;
#else
    snprintf(why, n,
             "this build has no cuDNN attention (built without cuDNN's headers or cudnn-frontend's: "
             "scripts/deps.sh fetches the frontend, then rebuild)");
    return false;
#endif
}

extern "C" st_status st_cuda_alloc(st_device *d, size_t nbytes, void **out) {
    *out = NULL;
    if (d->n_blocks == d->cap_blocks) { /* room to list it first: a block is never lost to the count */
        const int cap = d->cap_blocks ? 2 * d->cap_blocks : 32;
        void *b = realloc(d->blocks, (size_t)cap * sizeof *d->blocks);
        if (!b) return st_fail(ST_ERR_NOMEM, "out of host memory listing device blocks");
        d->blocks = (struct st_device::st_cuda_block *)b;
        d->cap_blocks = cap;
    }
    if (!nbytes) nbytes = 256;
    cudaError_t e = cudaMalloc(out, nbytes);
    if (e == cudaErrorMemoryAllocation) return out_of_memory(d, nbytes);
    /* (another error is no room's: a kernel's fault, sticky, answers every later call; its
     * remedies are not a smaller batch's) */
    if (e != cudaSuccess) return st_cuda_fail(d, e, "cudaMalloc", __FILE__, __LINE__);
    d->blocks[d->n_blocks].p = *out;
    d->blocks[d->n_blocks].nbytes = nbytes;
    d->n_blocks++;
    d->allocated += (int64_t)nbytes;
    if (d->allocated > d->peak) d->peak = d->allocated;
    return ST_OK;
}

extern "C" void st_cuda_release(st_device *d, void *p) {
    if (!p) return;
    for (int i = 0; i < d->n_blocks; i++)
        if (d->blocks[i].p == p) {
            d->allocated -= (int64_t)d->blocks[i].nbytes;
            d->blocks[i] = d->blocks[--d->n_blocks];
            break;
        }
    cudaFree(p);
}

extern "C" st_status st_cuda_memory(st_device *d, st_device_mem *out) {
    size_t free_b = 0, total_b = 0;
    ST_CUDA_TRY_D(d, cudaSetDevice(d->ordinal));
    ST_CUDA_TRY_D(d, cudaMemGetInfo(&free_b, &total_b));
    out->allocated = d->allocated;
    out->peak = d->peak;
    out->used = (int64_t)(total_b - free_b);
    out->total = (int64_t)total_b;
    return ST_OK;
}

extern "C" st_status st_cuda_props(st_device *d, st_device_props *out) {
    cudaDeviceProp prop;
    ST_CUDA_TRY_D(d, cudaGetDeviceProperties(&prop, d->ordinal));
    snprintf(out->name, sizeof out->name, "%s", prop.name);
    out->cc_major = d->cc_major;
    out->cc_minor = d->cc_minor;
    out->sms = d->sm_count;
    ST_CUDA_TRY_D(d, cudaDeviceGetAttribute(&out->clock_khz, cudaDevAttrClockRate, d->ordinal));
    return ST_OK;
}

extern "C" const char *st_cuda_pci_bus_id(const st_device *d) { return d->pci_bus_id; }
extern "C" const char *st_cuda_uuid(const st_device *d) { return d->uuid; }

extern "C" st_status st_cuda_zero(st_device *d, void *p, size_t nbytes) {
    if (nbytes) ST_CUDA_TRY_D(d, cudaMemsetAsync(p, 0, nbytes, d->compute));
    return ST_OK;
}

static __global__ void fill_kernel(float *p, size_t n, float v) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = v;
}

extern "C" st_status st_cuda_fill_f32(st_device *d, float *p, size_t count, float value) {
    if (!count) return ST_OK;
    fill_kernel<<<st_cuda_blocks((int64_t)count, 256), 256, 0, d->compute>>>(p, count, value);
    ST_CUDA_TRY_D(d, cudaGetLastError());
    return ST_OK;
}

/* Pageable host memory: the copy is staged by the driver and returns when the
 * host buffer may be reused. The batch path uses pinned memory on the copy
 * stream instead (src/data/ with a CUDA device). */
extern "C" st_status st_cuda_upload(st_device *d, void *dst, const void *src, size_t nbytes) {
    if (!nbytes) return ST_OK;
    ST_CUDA_TRY_D(d, cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, d->compute));
    ST_CUDA_TRY_D(d, st_cuda_stream_sync(d, d->compute));
    return ST_OK;
}

extern "C" st_status st_cuda_download(st_device *d, void *dst, const void *src, size_t nbytes) {
    if (!nbytes) return ST_OK;
    ST_CUDA_TRY_D(d, cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, d->compute));
    ST_CUDA_TRY_D(d, st_cuda_stream_sync(d, d->compute));
    return ST_OK;
}

extern "C" st_status st_cuda_sync(st_device *d) {
    ST_CUDA_TRY_D(d, st_cuda_stream_sync(d, d->compute));
    ST_CUDA_TRY_D(d, st_cuda_stream_sync(d, d->comm));
    ST_CUDA_TRY_D(d, st_cuda_stream_sync(d, d->copy));
    ST_CUDA_TRY_D(d, st_cuda_stream_sync(d, d->d2h));
    return ST_OK;
}
