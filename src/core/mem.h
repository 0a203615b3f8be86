/* Aligned host allocations (64 bytes: one cache line, one AVX-512 vector). */
#ifndef ST_CORE_MEM_H
#define ST_CORE_MEM_H

#include <stdlib.h>

static inline void *st_alloc_aligned(size_t nbytes) {
    void *p = NULL;
    if (nbytes == 0) nbytes = 64;
    nbytes = (nbytes + 63) / 64 * 64;
    if (posix_memalign(&p, 64, nbytes) != 0) return NULL;
    return p;
}

static inline void st_free_aligned(void *p) { free(p); }

#endif
