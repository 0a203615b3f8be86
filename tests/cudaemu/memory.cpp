/* The CUDA emulator's device memory (tests/cudaemu/README.md): cudaMalloc'd
 * blocks each in their own mapping, ending against a guard page (to 256
 * bytes) and mapped inaccessible while host code runs, so a kernel running
 * past an allocation or host code using a device pointer stops with a
 * message naming it (SIGSEGV); pinned host blocks listed, so copies can tell
 * them from pageable memory. ST_CUDAEMU_PROTECT=0 leaves device memory
 * mapped; ST_CUDAEMU_MEM_MB sets the device's size (default 16 GiB),
 * ST_CUDAEMU_HELD_MB how much of it another process holds (default 0). */
#include "internal.h"
#include "machine.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <map>
#include <mutex>

/* --- device memory --------------------------------------------------------- */
enum { PAGE = 4096, GUARD_ALIGN = 256 };

struct alloc {
    char *map; /* the mapping: pages, then one guard page */
    size_t map_bytes, bytes;
};

static std::mutex mem_lock;
static std::map<uintptr_t, alloc> device_mem; /* by start address */
static std::map<uintptr_t, size_t> host_mem;   /* cudaHostAlloc: start, bytes */
static size_t mem_total, mem_used;
static int window_depth;  /* >0: device memory is accessible */
static int protect_mode = -1;
static thread_local const char *running_kernel;
void st_emu_set_running(const char *kernel) { running_kernel = kernel; }

static bool protecting(void) {
    if (protect_mode < 0) {
        const char *e = getenv("ST_CUDAEMU_PROTECT");
        protect_mode = !(e && strcmp(e, "0") == 0);
        mem_total = st_emu_env_mem_total();
        /* memory another process holds on the device: never free here */
        const char *h = getenv("ST_CUDAEMU_HELD_MB");
        const size_t held = h && atoll(h) > 0 ? (size_t)atoll(h) << 20 : 0;
        if (held) mem_used = held < mem_total ? held : mem_total;
    }
    return protect_mode;
}

size_t st_emu_mem_total(void) {
    protecting();
    return mem_total;
}

static void set_access(const alloc &a, bool on) {
    mprotect(a.map, a.map_bytes - PAGE, on ? PROT_READ | PROT_WRITE : PROT_NONE);
}

/* Device memory readable and writable while a window is open (nested). */
void st_emu_device_window(bool open) {
    if (!protecting()) return;
    std::lock_guard<std::mutex> l(mem_lock);
    if (open ? window_depth++ == 0 : --window_depth == 0)
        for (auto &kv : device_mem) set_access(kv.second, open);
}

/* The allocation holding [p, p + n), or NULL. */
static const alloc *find_alloc(const void *p, size_t n) {
    std::lock_guard<std::mutex> l(mem_lock);
    auto it = device_mem.upper_bound((uintptr_t)p);
    if (it == device_mem.begin()) return NULL;
    --it;
    const uintptr_t a = it->first, q = (uintptr_t)p;
    if (q >= a && q + n <= a + it->second.bytes) return &it->second;
    return NULL;
}

bool st_emu_device_range(const void *p, size_t n) { return find_alloc(p, n) != NULL; }

bool st_emu_is_device(const void *p) {
    std::lock_guard<std::mutex> l(mem_lock);
    auto it = device_mem.upper_bound((uintptr_t)p);
    if (it == device_mem.begin()) return false;
    --it;
    const alloc &a = it->second;
    return (uintptr_t)p >= (uintptr_t)a.map && (uintptr_t)p < (uintptr_t)a.map + a.map_bytes;
}

bool st_emu_is_pinned(const void *p, size_t n) {
    std::lock_guard<std::mutex> l(mem_lock);
    auto it = host_mem.upper_bound((uintptr_t)p);
    if (it == host_mem.begin()) return false;
    --it;
    return (uintptr_t)p >= it->first && (uintptr_t)p + n <= it->first + it->second;
}

static void segv(int sig, siginfo_t *si, void *uc) {
    char msg[512];
    const uintptr_t at = (uintptr_t)si->si_addr;
    const char *what = "an address outside every device allocation";
    for (auto &kv : device_mem) {
        const alloc &a = kv.second;
        const uintptr_t lo = (uintptr_t)a.map, hi = lo + a.map_bytes;
        if (at >= lo && at < hi) {
            what = at >= hi - PAGE ? "past the end of a device allocation (its guard page)"
                                   : "device memory while no kernel or copy runs (host code used a device pointer)";
            break;
        }
    }
    int n = snprintf(msg, sizeof msg, "cudaemu: %s touched %s at %p\n",
                     running_kernel ? running_kernel : "host code", what, si->si_addr);
    if (n > 0) (void)!write(2, msg, (size_t)n);
    signal(SIGSEGV, SIG_DFL);
    raise(SIGSEGV);
}

static void install_segv(void) {
    static std::once_flag once;
    std::call_once(once, [] {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = segv;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigaction(SIGSEGV, &sa, NULL);
    });
}

static cudaError_t dev_alloc(void **out, size_t n) {
    protecting();
    install_segv();
    *out = NULL;
    const size_t padded = (n + GUARD_ALIGN - 1) / GUARD_ALIGN * GUARD_ALIGN;
    {
        std::lock_guard<std::mutex> l(mem_lock);
        if (mem_used + padded > mem_total) return cudaErrorMemoryAllocation;
    }
    const size_t pages = (padded + PAGE - 1) / PAGE * PAGE;
    alloc a;
    a.map_bytes = pages + PAGE;
    a.bytes = n;
    a.map = (char *)mmap(NULL, a.map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                         -1, 0);
    if (a.map == MAP_FAILED) return cudaErrorMemoryAllocation;
    mprotect(a.map + pages, PAGE, PROT_NONE);
    /* Huge pages where the kernel gives them: every window toggles every
     * allocation's access, and mprotect's cost is in the page table entries
     * it rewrites (a 32 MiB workspace: 8192 of them, or 16) */
    madvise(a.map, pages, MADV_HUGEPAGE);
    char *p = a.map + pages - padded;
    memset(p, 0xA5, padded); /* cudaMalloc's memory holds garbage, not zeros */
    std::lock_guard<std::mutex> l(mem_lock);
    if (protect_mode && window_depth == 0) set_access(a, false);
    device_mem[(uintptr_t)p] = a;
    mem_used += padded;
    *out = p;
    return cudaSuccess;
}

extern "C" cudaError_t cudaMalloc(void **p, size_t n) {
    ST_EMU_RETURN_IF_LOST();
    if (st_emu_capture_refuse("cudaMalloc")) return cudaErrorStreamCaptureUnsupported;
    return st_emu_ret(dev_alloc(p, n));
}

extern "C" cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    if (st_emu_capture_refuse("cudaFree")) return cudaErrorStreamCaptureUnsupported;
    st_emu_run_all(); /* as CUDA: freeing waits for the device */
    std::lock_guard<std::mutex> l(mem_lock);
    auto it = device_mem.find((uintptr_t)p);
    if (it == device_mem.end()) return st_emu_ret(cudaErrorInvalidValue);
    mem_used -= (it->second.bytes + GUARD_ALIGN - 1) / GUARD_ALIGN * GUARD_ALIGN;
    munmap(it->second.map, it->second.map_bytes);
    device_mem.erase(it);
    ST_EMU_RETURN_IF_LOST(); /* (freed all the same: the process goes on) */
    return cudaSuccess;
}

/* ST_CUDAEMU_PINNED_MB: how much host memory cudaHostAlloc may lock in all
 * (unset: no limit), as a machine with a low locked-memory limit refuses
 * more; 0 refuses every request, for the callers' pageable fallbacks. */
static size_t pinned_used;

static bool pinned_fits(size_t n) {
    static long long limit_mb = -2;
    if (limit_mb == -2) {
        const char *e = getenv("ST_CUDAEMU_PINNED_MB");
        limit_mb = e && *e ? atoll(e) : -1;
    }
    return limit_mb < 0 || pinned_used + n <= (size_t)limit_mb << 20;
}

extern "C" cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int flags) {
    *p = NULL;
    if (st_emu_capture_refuse("cudaHostAlloc")) return cudaErrorStreamCaptureUnsupported;
    std::lock_guard<std::mutex> l(mem_lock);
    if (!pinned_fits(n) || posix_memalign(p, 4096, n ? n : 1) != 0) {
        *p = NULL;
        return st_emu_ret(cudaErrorMemoryAllocation);
    }
    host_mem[(uintptr_t)*p] = n;
    pinned_used += n;
    return cudaSuccess;
}

extern "C" cudaError_t cudaMallocHost(void **p, size_t n) { return cudaHostAlloc(p, n, 0); }

extern "C" cudaError_t cudaFreeHost(void *p) {
    if (!p) return cudaSuccess;
    if (st_emu_capture_refuse("cudaFreeHost")) return cudaErrorStreamCaptureUnsupported;
    st_emu_run_all(); /* as CUDA: freeing waits for the device */
    {
        std::lock_guard<std::mutex> l(mem_lock);
        auto it = host_mem.find((uintptr_t)p);
        if (it == host_mem.end()) return st_emu_ret(cudaErrorInvalidValue);
        pinned_used -= it->second;
        host_mem.erase(it);
    }
    free(p);
    return cudaSuccess;
}

extern "C" cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total) {
    ST_EMU_RETURN_IF_LOST();
    protecting();
    std::lock_guard<std::mutex> l(mem_lock);
    *total = mem_total;
    *free_b = mem_total - mem_used;
    return cudaSuccess;
}

extern "C" cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p) {
    memset(a, 0, sizeof *a);
    if (st_emu_is_device(p)) {
        a->type = cudaMemoryTypeDevice;
        a->devicePointer = (void *)p;
    } else {
        std::lock_guard<std::mutex> l(mem_lock);
        a->type = host_mem.count((uintptr_t)p) ? cudaMemoryTypeHost : cudaMemoryTypeUnregistered;
        a->hostPointer = (void *)p;
    }
    a->device = 0;
    return cudaSuccess;
}

