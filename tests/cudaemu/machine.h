/* The emulated machine as the environment describes it (tests/cudaemu/
 * README.md), read the same way by the emulator's runtime (devices.cpp,
 * memory.cpp) and by its driver library (driver/libcuda.cpp), which the
 * hardware probe loads as libcuda.so.1: how many devices, which of them
 * this process sees, their compute capability, name and size. */
#ifndef ST_CUDAEMU_MACHINE_H
#define ST_CUDAEMU_MACHINE_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#define ST_EMU_DEVICE_NAME "scaletrain CUDA emulator (CPU)"
enum { ST_EMU_MAX_DEVICES = 16, ST_EMU_SMS = 4 };

/* The machine's devices (ST_CUDAEMU_DEVICES, default 1). */
static inline int st_emu_env_machine_devices(void) {
    const char *e = getenv("ST_CUDAEMU_DEVICES");
    const int n = e ? atoi(e) : 1;
    return n >= 0 && n <= ST_EMU_MAX_DEVICES ? n : 1;
}

/* Those this process sees: CUDA_VISIBLE_DEVICES as the CUDA runtime reads
 * it, the listed indices in that order up to the first that is not a
 * device (a UUID, a number past the last); unset, all. What each rank sees
 * where a launcher gives ranks GPUs of their own (srun --gpus-per-task, a
 * per-rank wrapper). map[d] (when given) is the machine's index of visible
 * device d. */
static inline int st_emu_env_visible(int *map) {
    const int all = st_emu_env_machine_devices();
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    int n = 0;
    if (!v) {
        for (; n < all; n++)
            if (map) map[n] = n;
        return n;
    }
    for (const char *p = v; *p && n < ST_EMU_MAX_DEVICES;) {
        char *end;
        const long i = strtol(p, &end, 10);
        if (end == p || i < 0 || i >= all || (*end && *end != ',')) break;
        if (map) map[n] = (int)i;
        n++;
        p = *end ? end + 1 : end;
    }
    return n;
}

/* ST_CUDAEMU_CC (e.g. 75): the compute capability the devices report
 * (default 90), to try how a GPU too old for the kernels is refused. */
static inline void st_emu_env_capability(int *major, int *minor) {
    const char *e = getenv("ST_CUDAEMU_CC");
    const int cc = e && *e ? atoi(e) : 90;
    *major = cc / 10;
    *minor = cc % 10;
}

/* ST_CUDAEMU_MEM_MB: each device's size (default 16 GiB). */
static inline size_t st_emu_env_mem_total(void) {
    const char *m = getenv("ST_CUDAEMU_MEM_MB");
    return m && atoll(m) > 0 ? (size_t)atoll(m) << 20 : (size_t)16 << 30;
}

/* Machine device m's PCI bus id; ST_CUDAEMU_MIG=1: the devices are MIG
 * slices of one GPU, its address theirs (their UUIDs their own). */
static inline void st_emu_env_pci(char *id, size_t len, int m) {
    const char *mig = getenv("ST_CUDAEMU_MIG");
    snprintf(id, len, "0000:%02x:00.0", mig && atoi(mig) == 1 ? 0 : m);
}

#endif
