/* ZeRO sharding of the flat parameter arena (Rajbhandari et al. 2020,
 * "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models"):
 * the shard plan, the padded page-aligned arenas, the whole weights from
 * sharded masters (pages given back and counted: src/core/pages.h).
 *
 * Shards. The arena holds P = p->count elements. Each of the N ranks owns the
 * contiguous range [r*S, (r+1)*S) with S = ceil(P / N) rounded up to
 * ST_SHARD_ALIGN elements (4 KiB: a page, so shard boundaries are page
 * boundaries). The parameter and gradient arenas are padded with zeros to
 * N*S elements so that the parameter all-gather is one in-place collective of
 * equal pieces; the real elements of rank r's shard are [r*S, min((r+1)*S, P)),
 * so the last ranks' shards are shorter (partly or wholly padding), and the
 * optimizer state of rank r covers only its real elements.
 *
 * The same shards serve the deterministic reduction (dist.h): each rank folds
 * the gradients of its shard, and the global gradient norm is the in-order
 * sum of the sums of squares of every block of ST_SHARD_ALIGN elements
 * (st_device_block_sumsq), which gives the same bits whatever the number of
 * ranks and threads. Not here: the step sequence (dist.c), the bucket
 * collectives (ddp.c). */
#ifndef ST_DIST_ZERO_H
#define ST_DIST_ZERO_H

#include <stdint.h>

#include "comm/comm.h"
#include "core/pages.h"
#include "model/graph.h"
#include "model/model.h"

typedef struct st_shard {
    int rank, world;
    int64_t count;  /* P: real elements of the arena */
    int64_t shard;  /* S: elements per shard, a multiple of ST_SHARD_ALIGN */
    int64_t padded; /* N * S: elements of the padded arenas */
    int64_t lo, hi; /* this rank's real elements: [lo, hi), hi - lo <= S (may be empty) */
} st_shard;

void st_shard_plan(st_shard *s, int64_t count, int rank, int world);

/* Reallocate p's parameter and gradient arenas page-aligned with at least
 * `padded` elements (the new tail zero), keeping their contents, and point
 * every parameter tensor into them. */
st_status st_zero_pad_arenas(st_params *p, int64_t padded);

/* st_model_copy_arenas (src/model/model.h) for every rank, whether or not
 * the masters are sharded: host copies of the whole fp32 weights and the
 * buffers; collective when they are (through comm: host buffers, so the
 * MPI or local communicator, never NCCL's). Free both with st_free_aligned. */
st_status st_zero_copy_arenas(const st_model *m, st_comm *comm, float **data, float **buffers);

#endif
