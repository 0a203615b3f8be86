/* The ranks' agreement before training: every rank must have been started
 * with the same settings, or a job would diverge silently (different
 * optimizer settings), or hang (ranks that call different collectives: a
 * ZeRO rank reducing to its shard owner while the others all-reduce).
 *
 * Two checks, both made of a min and a max all-reduce over int64 hashes (the
 * first item whose min and max differ is the first difference), then an
 * all-gather of each rank's text for that item so that the error, the same
 * on every rank, names the item, the values and the ranks:
 *   st_dist_agree_config  the run's configuration as given (before any `auto`
 *                         is resolved): called right after the communicator
 *                         starts, before anything else talks between ranks.
 *   st_ddp_agree (ddp.h)  the model built (tensor names, shapes, order) and
 *                         the data and batch settings, before the strategy is
 *                         set up.
 *
 * Not here: what a key means (src/core/config_schema.c). */
#ifndef ST_DIST_AGREE_H
#define ST_DIST_AGREE_H

#include <stdint.h>

#include "comm/comm.h"
#include "model/graph.h"
#include "scaletrain/config.h"

enum { ST_AGREE_DESC_MAX = 160 }; /* bytes of one rank's text for an item */

/* Every configuration key except those that may differ between ranks
 * (st_agree_per_rank_key), compared by value. A difference is ST_ERR_CONFIG
 * on every rank: "the ranks were started with different settings: the first
 * difference is in dist.strategy: rank 0 has ddp; rank 1 has zero1 (...)".
 * Every failure it returns is every rank's (a difference, or a rank out of
 * memory: agreed before the comparison) or the communicator's
 * (st_comm_failed). */
st_status st_dist_agree_config(st_comm *c, const st_config *cfg);

/* Keys that may differ between ranks: the model's choices of kernel (fused
 * or not, which attention kernel: the same function), file paths
 * (node-local copies; the data's sizes are compared by st_ddp_agree), and
 * per-process or rank-0-only choices (threads, loader workers, device,
 * progress bar, TensorBoard, the peak for mfu). Every other model.* key is
 * compared: a head count, the max-pools' places or the dropout change the
 * function and no tensor's shape, so the tensor check alone would pass
 * ranks that train different models. */
bool st_agree_per_rank_key(const char *key);

/* v (n items, the same n on every rank): *diff = the first index where the
 * ranks' values differ, or -1. `name` names the two all-reduces. */
st_status st_agree_first_difference(st_comm *c, const int64_t *v, int n, const char *name, int *diff);

/* Gather every rank's text `mine` for `item` and return ST_ERR_CONFIG (the
 * same message on every rank): "<what>: the first difference is in <item>:
 * rank 0 has A; ranks 1-3 have B (<hint>)". Ranks with rank 0's text are not
 * listed. */
st_status st_agree_report(st_comm *c, const char *what, const char *item, const char *mine, const char *hint);

/* Every rank on a GPU of its own (NCCL refuses two on one, and two would
 * share its memory and time). Each rank names its GPU as text unique on the
 * cluster, `mine` ("host PCI-address boot|UUID"; "" on the CPU or when the
 * address is unknown); the texts are gathered, and *a < *b are the first
 * two ranks with the same one as far as its '|' (-1 and -1 when there are
 * none, the same on every rank), gpu_a and gpu_b (n bytes each) their
 * texts. What follows a '|' is said, not compared: MIG slices of one GPU
 * have a UUID each and one PCI address, and NCCL takes a GPU by its
 * address. */
st_status st_agree_gpus(st_comm *c, const char *mine, int *a, int *b, char *gpu_a, char *gpu_b, size_t n);
/* Its comparison: `world` texts, one every `stride` bytes of `all`; *a < *b
 * the lowest rank holding a text another holds (as far as a '|') and the
 * next that holds it, -1 and -1 when none is held twice ("" is never
 * compared). */
st_status st_agree_first_shared(const char *all, int world, size_t stride, int *a, int *b);

/* Every rank's status for `what`: ST_OK everywhere, or this rank's error, or
 * ST_ERR_IO "<what> failed on another rank, rank K (its error is in its
 * output)", K the last rank that failed. For
 * work one rank (or each) does alone while the others wait on the outcome. */
st_status st_agree_status(st_comm *c, st_status mine, const char *what);
#ifdef __clang_analyzer__ /* make analyze: a failure of this rank's is never ST_OK after it */
#define st_agree_status(c, mine, what)                                                                       \
    __extension__({                                                                                          \
        const st_status st_agree_mine_ = (mine);                                                             \
        const st_status st_agree_s_ = (st_agree_status)(c, st_agree_mine_, what);                            \
        st_agree_mine_ != ST_OK &&st_agree_s_ == ST_OK ? st_agree_mine_ : st_agree_s_;                       \
    })
#endif

/* After training on several ranks (DESIGN invariant 1: the data-parallel
 * replicas stay identical): every trainable tensor's bits hashed on each rank
 * (downloaded first from a device) and compared. Buffers (batch-norm running
 * statistics) are left out: each rank's own batches move them. A difference
 * is ST_ERR_INTERNAL on every rank, naming the tensor, the step and what each
 * rank holds; it means a collective gave the ranks different results or a
 * rank skipped an update. A rank that cannot hash its weights (memory, a
 * device's download) makes every rank fail too, before the comparison.
 * *agreed: the error returned is every rank's (the ranks then need no abort
 * to stop together); false for a failed collective. */
st_status st_agree_replicas(st_comm *c, const st_params *p, int64_t step, bool *agreed);

/* Before an evaluation on several ranks (each evaluates its share of the
 * data with the weights it loaded): every parameter's bits and the buffers
 * hashed on each rank and compared. A difference is ST_ERR_CONFIG on every
 * rank: "the ranks loaded different weights: ... rank 0 has MINE; rank 1
 * has ...", `mine` naming what this rank loaded (its file and step). Not
 * for sharded masters. */
st_status st_agree_weights(st_comm *c, const st_params *p, const char *mine);

#endif
