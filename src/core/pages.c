/* Giving host memory back page by page, and counting what is resident (see
 * pages.h). */
#include "pages.h"

#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGE 4096

void st_pages_release(float *base, int64_t a, int64_t e) {
    if (e <= a) return;
    char *lo = (char *)(base + a), *hi = (char *)(base + e);
    char *plo = (char *)(((uintptr_t)lo + PAGE - 1) / PAGE * PAGE),
         *phi = (char *)((uintptr_t)hi / PAGE * PAGE);
    if (plo >= phi || madvise(plo, (size_t)(phi - plo), MADV_DONTNEED) != 0) {
        memset(lo, 0, (size_t)(hi - lo)); /* no whole page, or madvise refused: clear in place */
        return;
    }
    memset(lo, 0, (size_t)(plo - lo));
    memset(phi, 0, (size_t)(hi - phi));
}

void st_pages_own_mappings(void) {
    /* Setting the threshold also stops its adjustment, and that of the trim
     * threshold, which stays at its default. Idempotent. */
    mallopt(M_MMAP_THRESHOLD, ST_PAGES_OWN_MAP);
}

int64_t st_pages_resident(const void *p, int64_t nbytes) {
    const size_t pages = ((size_t)nbytes + PAGE - 1) / PAGE;
    unsigned char *vec = malloc(pages ? pages : 1);
    if (!vec || mincore((void *)p, (size_t)nbytes, vec) != 0) {
        free(vec);
        return nbytes; /* unknown: count it all */
    }
    int64_t n = 0;
    for (size_t i = 0; i < pages; i++)
        n += vec[i] & 1;
    free(vec);
    return n * PAGE < nbytes ? n * PAGE : nbytes;
}
