/* The batch feed: the loader's micro-batches into the training graph's input
 * tensors, x (the inputs) and y (the targets), one micro-step at a time.
 *
 * On the host (dev NULL) there is no copy: st_feed_next points x and y at
 * the ring slot the loader filled, and the step owns that slot until
 * st_feed_done, after backward (activation checkpointing reads x again while
 * it recomputes); then x and y point back at the graph's own memory and the
 * slot goes back to the loader. Forward may round a float x in place (bf16,
 * fp16): that writes the slot, which belongs to this micro-step alone.
 *
 * On a CUDA device the ring is pinned host memory (plain memory, with a note,
 * if pinning fails) and each batch is copied on the device's copy stream into
 * one of two device buffers (the graph's own x and y, and a second pair), so
 * the copy of micro-batch k+1 runs while k computes: an event after the copy
 * is what the compute stream waits for before forward, and an event after
 * backward is what the next copy into the same buffer waits for. The next
 * batch is taken from the loader as soon as it is ready (st_loader_try_next
 * in st_feed_next and st_feed_done), never by making the step wait for it;
 * its ring slot goes back once its copy has completed; a batch that failed
 * is reported by the st_feed_next that would have used it (st_feed_done
 * never fails on it). Nothing here waits for the whole device.
 *
 * Data wait: what st_feed_next reports is the time the step waited for its
 * batch: the host's wait in st_loader_next (when the batch was not taken
 * ahead) plus, on a device, the time the compute stream stood waiting for a
 * copy (timed by events around the wait, read once they have completed: one
 * or two micro-steps late, and the last micro-step's is not read). */
#ifndef ST_TRAIN_FEED_H
#define ST_TRAIN_FEED_H

#include <stdbool.h>

#include "core/device.h"
#include "data/loader.h"
#include "model/graph.h"

typedef struct st_feed st_feed;

/* Start a loader over d and s (borrowed, as st_loader_init; lo->max_held and
 * lo->allocator are the feed's own) feeding x and y, graph inputs of graph
 * memory on dev (NULL: the host): x (mb, ...) F32, or I32 tokens, and y (mb)
 * or (mb, T) I32, with the dataset's sizes for one micro-batch. The tensors
 * must outlive the feed, which points them back at their own memory when it
 * is freed. */
st_status st_feed_init(st_device *dev, const st_dataset *d, st_sampler *s, const st_loader_opts *lo,
                       st_tensor *x, st_tensor *y, st_feed **out);

/* Make the next micro-batch the graph's input (see above); *wait_s, when not
 * NULL, receives the seconds this micro-step waited for data. Fails with the
 * loader's error, and when the last batch was not given back by st_feed_done. */
st_status st_feed_next(st_feed *f, double *wait_s);

/* The step is done with its batch: call after backward, before the next
 * st_feed_next. */
st_status st_feed_done(st_feed *f);

/* The host batch behind the current micro-step (NULL outside one): its ring
 * slot on the host; on a device, a description of the slot it was copied
 * from, which has already gone back to the loader: its sequence number,
 * count and position, and NULL for x, xi, y and idx (the data is on the
 * device, in the graph's inputs). */
const st_batch *st_feed_batch(const st_feed *f);

/* The sampler position after the micro-batch last given by st_feed_next (not
 * after the one a device feed took ahead): what a checkpoint saves. */
st_sampler_pos st_feed_position(const st_feed *f);

/* Whether the ring is pinned host memory (a device feed whose cudaHostAlloc
 * worked); *why, when not pinned on a device, says why (else ""). */
bool st_feed_pinned(const st_feed *f, const char **why);

/* Time the batch copies on the device's copy stream in t's window (the
 * profiler trace's GPU timeline); t NULL: not. */
struct st_trace;
void st_feed_set_trace(st_feed *f, struct st_trace *t);

/* Wait for the copies in flight, point x and y back at their own memory,
 * free the loader. Accepts NULL. True when the loader left workers running
 * (st_loader_free): the dataset must not be freed. */
bool st_feed_free(st_feed *f);

#endif
