/* The distributed sampler: which samples each rank reads, micro-batch by
 * micro-batch, epoch after epoch.
 *
 * Every rank computes the same permutation of [0, n) for an epoch
 * (st_epoch_order with (seed, epoch): integer arithmetic only, so the same on
 * every machine) and reads the epoch as a sequence of global batches of
 * `batch_size` samples:
 *
 *   epoch sequence   E[i] = perm[i mod n],  i in [0, steps_per_epoch * B)
 *   global batch s   E[s*B .. (s+1)*B)                     B = batch_size
 *   rank r's slice   E[s*B + r*R .. s*B + (r+1)*R)         R = B / world = accum * mb
 *   micro-step k     E[s*B + r*R + k*mb .. + mb)           k in [0, accum)
 *
 * so the j-th micro-batch of a step over all ranks, j = r*accum + k, is the
 * j-th contiguous slice of mb samples of the global batch. N ranks with
 * micro-batch b therefore see exactly the samples that 1 rank with batch N*b
 * sees in the same step, and 1 rank accumulating N micro-batches reads them in
 * rank order (DESIGN invariant 1). With `interleave` (deterministic mode,
 * src/dist/dist.h) rank r's micro-step k reads the j-th slice with
 * j = k * world + r instead: the same samples per step, dealt round-robin, so
 * that the micro-batches of micro-step k over all ranks are consecutive
 * slices (the two orders agree when accum is 1). The parts of the ranks are disjoint, and
 * together cover the epoch.
 *
 * The tail: with drop_last, steps_per_epoch = floor(n / B) and the last
 * n mod B samples of the permutation are not read this epoch (the next
 * epoch's permutation is a new one); without it, steps_per_epoch = ceil(n / B)
 * and the last global batch is filled by wrapping around to the start of the
 * permutation (at most B - 1 samples are read twice; n < B: the permutation
 * round and round, each sample about B / n times). Either way every rank
 * runs the same number of steps and every micro-batch is full, so an uneven
 * dataset never leaves one rank waiting in a collective.
 *
 * The position (epoch, step, micro) of the next micro-batch can be saved in a
 * checkpoint and restored with st_sampler_seek; at a step boundary (micro 0)
 * it means "step*B global samples of this epoch are done", whatever the world
 * size. Not here: reading the samples (st_dataset, st_loader). */
#ifndef ST_DATA_SAMPLER_H
#define ST_DATA_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "scaletrain/status.h"

typedef struct st_sampler st_sampler;

typedef struct st_sampler_opts {
    int64_t n;           /* samples in the dataset, >= batch_size */
    int64_t batch_size;  /* global batch: samples per optimizer step over all ranks */
    int64_t micro_batch; /* samples per micro-step on one rank; batch_size % (world * micro_batch) == 0 */
    int rank, world;     /* 0 <= rank < world */
    uint64_t seed;
    bool shuffle;     /* false: the identity order every epoch */
    bool drop_last;   /* true: drop the tail; false: wrap around to fill the last batch */
    const char *name; /* the dataset's file, for error messages (may be NULL) */
    bool interleave;  /* micro-step k of rank r is slice k * world + r (see above) */
} st_sampler_opts;

#define ST_SAMPLER_OPTS_INIT                                                                                 \
    { 0, 0, 0, 0, 1, 0, true, true, NULL, false }

/* Where the sampler is: the next micro-batch is micro-step `micro` of step
 * `step` of epoch `epoch` (0 <= step < steps_per_epoch, 0 <= micro < accum). */
typedef struct st_sampler_pos {
    int64_t epoch, step, micro;
} st_sampler_pos;

/* Check the options and create a sampler at position (0, 0, 0). Errors: an
 * empty dataset, a dataset smaller than one global batch (naming opts->name),
 * a batch that ranks and micro-batches do not divide, a bad rank. */
st_status st_sampler_init(const st_sampler_opts *opts, st_sampler **out);
void st_sampler_free(st_sampler *s); /* accepts NULL */

int64_t st_sampler_steps_per_epoch(const st_sampler *s);
/* The rule it follows: the steps of an epoch of n samples in batches of
 * `batch` (drop_last: whole batches only); and train.steps auto's, the
 * steps of `epochs` of them (ceil, at least 1), which a resume also uses to
 * tell whether a checkpoint's run took its steps from its epochs. */
int64_t st_steps_per_epoch(int64_t n, int64_t batch, bool drop_last);
int64_t st_steps_of_epochs(double epochs, int64_t n, int64_t batch, bool drop_last);
int64_t st_sampler_accum(const st_sampler *s); /* micro-steps per step on each rank */
int64_t st_sampler_micro_batch(const st_sampler *s);
const st_sampler_opts *st_sampler_options(const st_sampler *s);

/* The position of the next micro-batch st_sampler_next will give. */
st_sampler_pos st_sampler_tell(const st_sampler *s);
/* Continue from a saved position; ST_ERR_ARG if it is outside the epoch. */
st_status st_sampler_seek(st_sampler *s, st_sampler_pos pos);
/* The position after `pos` (the next micro-step, step or epoch). */
st_sampler_pos st_sampler_advance(const st_sampler *s, st_sampler_pos pos);
/* A step-boundary position p (micro 0) in batches of from_batch samples as
 * a position in batches of to_batch (a resume with another global batch):
 * the same epoch, at the step of to_batch samples that holds the sample p
 * has come to (p.step x from_batch, rounded down to a whole step). *again
 * is the number of samples of this epoch, read before p, that are read
 * again from there (0 where to_batch divides p.step x from_batch). The
 * position may lie past the end of an epoch of to_batch steps (with
 * data.drop_last, whose epochs leave a remainder unread): st_sampler_seek
 * refuses it, the caller goes on at the next epoch. */
st_sampler_pos st_sampler_rebatch(st_sampler_pos p, int64_t from_batch, int64_t to_batch, int64_t *again);

/* This rank's next micro-batch: micro_batch sample indices into idx, its
 * position into *at (may be NULL); then advance. */
void st_sampler_next(st_sampler *s, int64_t *idx, st_sampler_pos *at);

/* The indices of micro-batch `pos` of rank `rank` (any rank, for tests and
 * checks), without moving the sampler. ST_ERR_ARG for a bad pos or rank. */
st_status st_sampler_indices(st_sampler *s, int rank, st_sampler_pos pos, int64_t *idx);

#endif
