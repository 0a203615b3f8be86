/* Host arenas that hold only part of their elements: the pages outside the
 * part are given back to the system (madvise MADV_DONTNEED: they read as
 * zeros and take memory again only when written), and the pages resident are
 * counted (mincore). ZeRO-2's gradient arena (src/dist/) and sharded fp32
 * masters (src/model/graph.h) use them. The arenas must be page-aligned. */
#ifndef ST_CORE_PAGES_H
#define ST_CORE_PAGES_H

#include <stdint.h>

/* Give back the whole pages of base[a, e) and zero the partial pages at its
 * ends, so that the range reads as zeros either way. */
void st_pages_release(float *base, int64_t a, int64_t e);

/* Host allocations of ST_PAGES_OWN_MAP bytes and more (arenas, optimizer
 * state, batch rings) as mappings of their own, given back to the system when
 * freed. glibc's default raises its mapping threshold to the size of any
 * mapped block freed (up to 32 MiB), after which blocks below it come from
 * the heap, where a freed block stays resident while anything above it
 * lives. A run calls this first (st_session_open) so that its memory is that
 * of its live allocations, which is what the memory model counts. */
enum { ST_PAGES_OWN_MAP = 1 << 20 };
void st_pages_own_mappings(void);

/* Bytes of [p, p + nbytes) resident in memory now (nbytes if unknown). */
int64_t st_pages_resident(const void *p, int64_t nbytes);

#endif
