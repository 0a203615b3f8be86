/* The loader: worker threads that assemble micro-batches ahead of the step
 * loop into a ring of batch buffers, and hand them out in order.
 *
 * The loader takes a sampler (sampler.h) and yields exactly its sequence of
 * micro-batches: batch k (k = 0, 1, ... since st_loader_init) holds the
 * samples of the sampler's k-th micro-batch, and its bits do not depend on the
 * number of workers or on timing, because each batch is a pure function of its
 * sample indices and (aug_seed, epoch, sample). Workers claim batch numbers in
 * order under a lock, take the sampler's next indices, assemble outside the
 * lock (gather, normalise, crop and flip, next-token shift: st_dataset_sample)
 * and mark the buffer ready; the consumer waits on a condition variable for
 * batch k, and only for batch k.
 *
 * The ring has prefetch + max_held buffers: up to `prefetch` batches are
 * assembled ahead while the consumer holds up to `max_held`. With 0 workers
 * st_loader_next assembles the batch itself, in the caller's thread. The time
 * st_loader_next spends waiting (or assembling, with 0 workers) is measured
 * per call and in total, for the data-wait figure of the run's metrics.
 *
 * Buffers come from an allocator hook (default: 64-byte aligned host memory),
 * so a CUDA build can make the ring pinned (cudaHostAlloc) and copy a batch to
 * the device on its own stream before releasing it (src/train/feed.h does
 * both). Not here: the device copy,
 * the choice of `auto` workers (the caller's; st_loader_auto_workers is a
 * default), evaluation batches with padding (st_dataset_batch does those). */
#ifndef ST_DATA_LOADER_H
#define ST_DATA_LOADER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/watch.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "scaletrain/status.h"

typedef struct st_loader st_loader;

/* Where batch buffers come from. alloc returns nbytes aligned to at least 64
 * bytes, or NULL; free gives them back. */
typedef struct st_loader_allocator {
    void *(*alloc)(void *ctx, size_t nbytes);
    void (*free)(void *ctx, void *p);
    void *ctx;
} st_loader_allocator;

typedef struct st_loader_opts {
    int num_workers; /* threads; 0 = assemble in st_loader_next */
    int prefetch;    /* batches assembled ahead, >= 1 */
    int max_held;    /* batches the consumer may hold at once, >= 1 */
    /* image augmentation, drawn per (aug_seed, epoch, sample) */
    int crop_pad; /* random crop with this zero padding; 0 = none */
    bool flip;    /* random horizontal flip with probability 1/2 */
    uint64_t aug_seed;
    const st_loader_allocator *allocator; /* NULL: aligned host memory */
    /* Seconds st_loader_next waits for a worker's batch before it fails
     * (data.timeout_s); 0 = for ever. Not with 0 workers (the caller's own
     * thread reads, and would be the one stuck). */
    double timeout_s;
    /* With 0 workers: the stall watch over the caller's own reads (core/
     * watch.h), or NULL. */
    st_watch *watch;
    /* A stop asked for (the run's flag, nonzero: a signal), or NULL: with
     * workers, st_loader_next waiting on a batch that does not come gives
     * up ST_LOADER_STOP_GRACE_S after the stop was seen, with
     * ST_ERR_INTERRUPTED, where it would wait out timeout_s (or for ever);
     * a batch that comes within that grace is returned, and the step loop
     * stops where it stops anyway, after the step. */
    const atomic_int *stop;
} st_loader_opts;

#define ST_LOADER_OPTS_INIT                                                                                  \
    { 0, 2, 1, 0, false, 0, NULL, 0, NULL, NULL }

/* Seconds a stop waits on a batch before st_loader_next gives up (no
 * healthy read takes that long, so a run of several ranks stops together,
 * after the step, as before). */
#define ST_LOADER_STOP_GRACE_S 5.0

/* One micro-batch in a ring buffer. The loader owns it; the consumer reads it
 * between st_loader_next and st_loader_release. */
typedef struct st_batch {
    float *x;           /* (mb, h, w, c) or (mb, d) normalised inputs; NULL for tokens */
    int32_t *xi;        /* (mb, T) token ids; NULL for images */
    int32_t *y;         /* (mb) labels or (mb, T) next tokens */
    int64_t *idx;       /* (mb) the sample indices */
    int64_t size;       /* mb: samples (every batch is full) */
    size_t x_nbytes;    /* bytes of x or xi */
    size_t y_nbytes;    /* bytes of y */
    int64_t seq;        /* k: the batch's number since st_loader_init */
    st_sampler_pos pos; /* the sampler position it comes from */
    double wait_s;      /* seconds st_loader_next waited for it */
} st_batch;

/* Workers for `auto`: a quarter of the cores each rank has, between 1 and
 * 8 (assembly is memory-bound and light; on a single core the one worker
 * costs nothing measurable, and a read that hangs is then the worker's,
 * bounded by timeout_s and a stop, not the step loop's). */
int st_loader_auto_workers(int cores_per_rank);

/* Start a loader over dataset d and sampler s, both borrowed: they must
 * outlive the loader, and the sampler must not be used by anyone else while
 * the loader lives (seek it before st_loader_init to resume). Crop and flip
 * need an image dataset that is not flat. */
st_status st_loader_init(const st_dataset *d, st_sampler *s, const st_loader_opts *opts, st_loader **out);

/* The next batch, in order: *out points at a filled buffer until
 * st_loader_release. Fails with the assembling worker's message if its
 * batch could not be assembled (and keeps failing after that), with
 * ST_ERR_ARG when the consumer already holds max_held batches, and with
 * ST_ERR_IO when a worker has not finished it after timeout_s (its storage
 * stopped answering: a hung network file system). Such a worker is never
 * joined: st_loader_free then leaves the loader's memory to the process's
 * end, where the worker may still return to it.
 * (dataset.h's test_stall makes such a read for tests). With 0 workers
 * the caller's thread reads, under `watch` when one is given. */
st_status st_loader_next(st_loader *l, st_batch **out);

/* The same without waiting: *out is NULL when batch k is not assembled yet
 * (always with 0 workers, which assemble only in st_loader_next). The
 * device feed (src/train/feed.h) takes the next batch early with it, to start
 * its copy while the step computes, without holding up the step. */
st_status st_loader_try_next(st_loader *l, st_batch **out);

/* Give a batch back to the ring (any order). */
void st_loader_release(st_loader *l, st_batch *b);

/* The sampler position after the last batch st_loader_next handed out: what a
 * checkpoint saves, so that a resumed run (st_sampler_seek, then
 * st_loader_init) reads exactly the batches this run had not. */
st_sampler_pos st_loader_position(const st_loader *l);

/* Seconds spent waiting inside st_loader_next, over all calls. */
double st_loader_wait_total(const st_loader *l);

/* Stop the workers (they finish the batch in hand), join them and free every
 * buffer; batches still held become invalid. A loader whose wait timed out
 * is stopped but neither joined nor freed (above), and true is returned:
 * its workers may still read the dataset, which must then stay as it is
 * (not freed) to the process's end. So too when a worker is still reading
 * a batch taken ahead (which nobody waited for) timeout_s after the stop
 * (ST_LOADER_STOP_GRACE_S when a stop was asked; 0: waited for ever): a
 * warning says so, and the process ends without it. Accepts NULL. */
bool st_loader_free(st_loader *l);

#endif
