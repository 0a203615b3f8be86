/* Allocation failure for tests, loaded with LD_PRELOAD: the
 * $ST_FAILALLOC_AT-th allocation that the program's own code makes (malloc,
 * calloc, realloc, aligned_alloc, posix_memalign, strdup, strndup called
 * from the main executable, where libscaletrain is linked in) returns NULL
 * (ENOMEM), once; every other allocation, and every one the libraries make
 * for themselves (the C library's stdio, OpenBLAS, OpenMP, Open MPI, libyaml),
 * succeeds. ST_FAILALLOC_EXE=NAME limits it to the program of that name (a
 * wrapper like timeout is left alone), ST_FAILALLOC_RANK=R to the process
 * that Open MPI started as rank R. With ST_FAILALLOC_REPORT=FILE the count of the program's
 * allocations is written there at exit (the number of cases a test walks),
 * and the failed one's caller, as an offset into the executable, is written
 * to FILE.at when it happens (addr2line -e BIN names the line). With
 * ST_FAILALLOC_LOG=FILE every counted allocation's caller, as such an
 * offset, is written there, one line each in order (line N: allocation N),
 * so that a test can find the allocations a function makes and fail those.
 *
 * The CUDA runtime, which a CUDA build links into the executable
 * (libcudart_static: src/cuda/libs.h), counts as a library too: its
 * functions (named libcudart_static_*, cuda* and __cuda* in the
 * executable's symbol table, read at the first allocation) allocate for
 * themselves, before main (each kernel module's registration) and inside
 * every runtime call, and do not survive a failed allocation, which is the
 * runtime's own matter, not scaletrain's.
 *
 * It uses glibc's own entry points (__libc_malloc and friends), not dlsym,
 * which itself allocates. tests/e2e/alloc_failure.sh builds it
 * (cc -shared -fPIC ...). */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static atomic_long count;      /* the program's allocations so far */
static long fail_at;           /* the one to fail; 0: none */
static atomic_int ready;       /* fail_at and the range read */
static uintptr_t lo, hi, base; /* the executable's code, and its load address */
static int log_fd = -1;        /* ST_FAILALLOC_LOG's file, if any */

static int find_exe(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size, (void)data;
    base = info->dlpi_addr; /* the first object is the executable */
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *p = &info->dlpi_phdr[i];
        if (p->p_type != PT_LOAD || !(p->p_flags & PF_X)) continue;
        const uintptr_t a = info->dlpi_addr + p->p_vaddr, b = a + p->p_memsz;
        if (!lo || a < lo) lo = a;
        if (b > hi) hi = b;
    }
    return 1;
}

/* The CUDA runtime's functions in the executable: address ranges (loaded),
 * from its symbol table, read with open and mmap (no allocation). */
enum { MAX_RUNTIME = 8192 };
static uintptr_t rt_lo[MAX_RUNTIME], rt_hi[MAX_RUNTIME];
static int n_rt;

static int runtime_name(const char *n) {
    return !strncmp(n, "libcudart_static_", 17) || !strncmp(n, "cuda", 4) || !strncmp(n, "__cuda", 6);
}

static void find_runtime(void) {
    const int fd = open("/proc/self/exe", O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof(ElfW(Ehdr))) {
        if (fd >= 0) close(fd);
        return;
    }
    const unsigned char *f = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f == MAP_FAILED) return;
    const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)f;
    const ElfW(Shdr) *sh = (const ElfW(Shdr) *)(f + eh->e_shoff);
    for (int i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum) continue;
        const ElfW(Sym) *sym = (const ElfW(Sym) *)(f + sh[i].sh_offset);
        const char *names = (const char *)(f + sh[sh[i].sh_link].sh_offset);
        for (size_t k = 0; k < sh[i].sh_size / sizeof *sym && n_rt < MAX_RUNTIME; k++)
            if (ELF64_ST_TYPE(sym[k].st_info) == STT_FUNC && sym[k].st_size &&
                runtime_name(names + sym[k].st_name)) {
                rt_lo[n_rt] = base + sym[k].st_value;
                rt_hi[n_rt++] = base + sym[k].st_value + sym[k].st_size;
            }
    }
    munmap((void *)f, (size_t)st.st_size);
}

static int in_runtime(uintptr_t c) {
    for (int i = 0; i < n_rt; i++)
        if (c >= rt_lo[i] && c < rt_hi[i]) return 1;
    return 0;
}

/* The first allocation comes before any thread the program starts. */
static void setup(void) {
    if (atomic_load_explicit(&ready, memory_order_acquire)) return;
    const char *at = getenv("ST_FAILALLOC_AT"), *exe = getenv("ST_FAILALLOC_EXE");
    fail_at = at ? atol(at) : 0;
    const char *rank = getenv("ST_FAILALLOC_RANK"), *mine = getenv("OMPI_COMM_WORLD_RANK");
    if (exe && strcmp(exe, program_invocation_short_name) != 0)
        fail_at = -1; /* another program (timeout, env): left alone */
    else if (rank && (!mine || strcmp(rank, mine) != 0))
        fail_at = -1; /* another rank, or the launcher */
    else {
        dl_iterate_phdr(find_exe, NULL);
        find_runtime();
        const char *log = getenv("ST_FAILALLOC_LOG");
        if (log) log_fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    }
    atomic_store_explicit(&ready, 1, memory_order_release);
}

static void say_at(uintptr_t caller) {
    const char *r = getenv("ST_FAILALLOC_REPORT");
    if (!r) return;
    char path[4096], line[64];
    snprintf(path, sizeof path, "%s.at", r);
    const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return;
    const int n = snprintf(line, sizeof line, "0x%lx\n", (unsigned long)(caller - base - 1));
    if (write(fd, line, (size_t)n) < 0) {
    }
    close(fd);
}

/* true: this allocation, from caller, is the one to fail */
static int fails(void *caller) {
    setup();
    const uintptr_t c = (uintptr_t)caller;
    if (c < lo || c >= hi || in_runtime(c)) return 0;
    const long n = atomic_fetch_add(&count, 1) + 1;
    /* (one write a line, O_APPEND: whole lines, in the count's order but for threads racing) */
    if (log_fd >= 0) {
        char line[32];
        const int k = snprintf(line, sizeof line, "0x%lx\n", (unsigned long)(c - base - 1));
        if (write(log_fd, line, (size_t)k) < 0) {
        }
    }
    if (n != fail_at || fail_at <= 0) return 0;
    say_at(c);
    errno = ENOMEM;
    return 1;
}

__attribute__((destructor)) static void report(void) {
    const char *r = getenv("ST_FAILALLOC_REPORT");
    if (!r || fail_at < 0) return;
    FILE *f = fopen(r, "w");
    if (!f) return;
    fprintf(f, "%ld\n", (long)atomic_load(&count));
    fclose(f);
}

void *malloc(size_t n) {
    if (fails(__builtin_return_address(0))) return NULL;
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t m) {
    if (fails(__builtin_return_address(0))) return NULL;
    return __libc_calloc(n, m);
}

void *realloc(void *p, size_t n) {
    if (fails(__builtin_return_address(0))) return NULL;
    return __libc_realloc(p, n);
}

void *aligned_alloc(size_t a, size_t n) {
    if (fails(__builtin_return_address(0))) return NULL;
    return __libc_memalign(a, n);
}

int posix_memalign(void **out, size_t a, size_t n) {
    if (fails(__builtin_return_address(0))) return ENOMEM;
    void *p = __libc_memalign(a, n);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}

char *strdup(const char *s) {
    if (fails(__builtin_return_address(0))) return NULL;
    const size_t n = strlen(s) + 1;
    char *d = __libc_malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

char *strndup(const char *s, size_t m) {
    if (fails(__builtin_return_address(0))) return NULL;
    const size_t n = strnlen(s, m);
    char *d = __libc_malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}
