/* Data-parallel training over the communicator (DDP): the start-of-run
 * agreement (parameters broadcast from rank 0, a check that every rank built
 * the same model and batch settings) and the gradient all-reduce in buckets,
 * each started from the backward walk as soon as its gradients are final.
 *
 * Buckets are contiguous ranges of the gradient arena of about
 * dist.bucket_cap_mb, formed from the end of the arena (where backward
 * produces gradients first) towards its start. A parameter's gradient is
 * final once backward has run the earliest node (in forward order) that uses
 * it; a tied weight used by the first and last nodes is final only at the end.
 *
 * Under ZeRO (dist.h) the same buckets are reduced instead of all-reduced:
 * the piece of a bucket that falls in rank r's shard goes to rank r (one
 * MPI_Ireduce per piece, in place at the owner), so a bucket costs one
 * collective per shard it touches and overlaps backward as DDP's does. With
 * `release` (stage 2) the parts of a bucket outside this rank's shard are
 * given back to the system as soon as its reductions have completed: they
 * are not needed any more (their owners hold the sums), so between steps a
 * rank holds only its shard of gradients, and during backward only its shard
 * plus the buckets whose reductions are still in flight.
 *
 * A device cannot give pages back, so ZeRO-2 there stages instead
 * (ST_DDP_GRADS_STAGED): the rank keeps only its shard of gradients
 * (graph.h grads_sharded), and backward writes each bucket into a region of
 * one staging buffer, zeroed just before the bucket's first gradient is
 * written. The bucket is reduced there, in place, and this rank's piece of
 * the sums is added into the shard (the running sum over micro-steps) once
 * the reduction has ended. Regions are reused within a backward: a bucket
 * whose writes begin after another's reduction has started, and the next
 * bucket's after it (slack for it to finish), may take its place; the
 * compute stream then waits for that reduction on the device (comm.h
 * st_comm_device_wait), never the host, before it adds the piece and zeroes
 * the region. The buffer is as large as the buckets live at once need: on
 * a transformer with tied embeddings, the embedding's bucket (written first
 * by the head, last by the embedding) plus a few others.
 *
 * Used by dist.c. Not here: sync batch-norm (src/layers/batchnorm.c, through
 * the graph's allreduce_sum hook that train.c sets). */
#ifndef ST_DIST_DDP_H
#define ST_DIST_DDP_H

#include <stdbool.h>
#include <stdint.h>

#include "comm/comm.h"
#include "model/graph.h"
#include "train/trace.h"

/* Where gradients live under the buckets (see above). */
typedef enum st_ddp_grads {
    ST_DDP_GRADS_WHOLE = 0, /* every rank's whole arena: DDP, ZeRO-1 */
    ST_DDP_GRADS_RELEASE,   /* ZeRO-2 on the host: non-owned pages given back once reduced */
    ST_DDP_GRADS_STAGED,    /* ZeRO-2 on a device: buckets staged, the shard kept */
} st_ddp_grads;

typedef struct st_ddp_bucket {
    int64_t offset, count; /* elements of the gradient arena: [offset, offset + count) */
    int ready_at;          /* backward may start it after this node (the earliest user of its params) */
    int written_from;      /* backward writes it first at this node (the latest user of its params) */
    bool started, done, released;
    /* staged: its region of the staging buffer, the earlier buckets whose
     * regions it overlaps (folded before it is zeroed), and this
     * micro-step's progress */
    int64_t stage;
    int n_prev;
    int *prev;
    bool prepared, folded;
    double t_start;    /* st_now() when its first collective started */
    double t_done;     /* when this rank saw its collectives complete (a backward hook's test, or the wait) */
    st_trace_mark mark; /* its phase in the trace and NVTX, from the start to the wait that finished it */
    int n_req;         /* collectives: 1 all-reduce, or one reduce per shard the bucket touches */
    int first_owner;   /* ZeRO: the rank owning the bucket's first element */
    st_comm_req **req; /* (n_req) */
    char name[32]; /* "grad bucket 3": the same on every rank and every step */
} st_ddp_bucket;

typedef struct st_ddp {
    st_comm *comm;
    st_params *p;
    st_ddp_bucket *b; /* b[0] holds the end of the arena: the first gradients backward produces */
    int n_buckets;
    /* ZeRO: shard > 0 elements per rank; each bucket's pieces are reduced
     * with `op` to their owners, and with `release` the non-owned parts are
     * given back once reduced. 0: all-reduce (average), DDP. */
    int64_t shard;
    st_comm_redop op;
    /* The gradients were divided by the ranks already (st_dist's `presum`):
     * DDP's all-reduce and 16-bit buckets sum them, without the division. */
    bool presum;
    st_ddp_grads grads;
    int64_t peak_resident; /* with release: the most gradient bytes resident at a backward hook */
    float *stage;          /* staged: the staging buffer (stage_count floats) on the device */
    int64_t stage_count;
    int *prep;     /* staged: the buckets in the order they are prepared (first written) */
    int next_prep; /* this micro-step's next to prepare */
    /* dist.grad_dtype: bf16/fp16 buckets travel as 16-bit copies in `half`
     * (same layout as p->grad); fp32 (the default): in place in p->grad */
    st_precision grad_dtype;
    uint16_t *half;
    /* timings of the current step and their sums over the run: wait_s after
     * backward; hidden_s from the first bucket's start to the end of
     * backward, span_s to the last bucket's end (their ratio is the part of
     * that window behind backward, which a long backward fills whatever the
     * buckets do); busy_s the time some bucket was in flight (the union of
     * the buckets' [t_start, t_done]) and busy_hidden_s its part before the
     * end of backward: their ratio is the fraction of all-reduce time hidden
     * behind backward. */
    double t_first_start, t_backward_end; /* st_dist_now() */
    double wait_s, hidden_s, span_s, busy_s, busy_hidden_s;
    int64_t syncs;
    st_trace *trace; /* NULL, or where bucket all-reduces and the wait are recorded */
} st_ddp;

/* Plan the buckets for graph g (built on p); cap_mb is dist.bucket_cap_mb.
 * shard, op, grads: see st_ddp (shard 0 for DDP). Staged: p's gradients
 * must be sharded (st_params_shard_grads) and the parameter tensors' `grad`
 * are pointed into the staging buffer. */
st_status st_ddp_init(st_ddp *d, st_comm *comm, st_params *p, const st_graph *g, double cap_mb, int64_t shard,
                      st_comm_redop op, st_ddp_grads grads);
/* Floats of the staging buffer ST_DDP_GRADS_STAGED would allocate for graph
 * g over p (a layout is enough: the memory model's). */
st_status st_ddp_stage_count(const st_params *p, const st_graph *g, double cap_mb, int64_t *count);
void st_ddp_free(st_ddp *d); /* accepts a zeroed st_ddp */

/* dist.grad_dtype bf16 or fp16: each bucket is divided by the world size in
 * fp32, rounded to 16 bits, summed over the ranks with fp32 additions
 * (ST_COMM_BF16/F16 in comm.h) and widened back into p->grad. */
st_status st_ddp_set_grad_dtype(st_ddp *d, st_precision dt);
/* Monotonic seconds (the clock of the timings above). */
double st_dist_now(void);

/* Before the first step and before the strategy is set up (st_dist_init),
 * on every rank: compare a signature of the model (tensor count, each name +
 * shape in order) and of the data settings (batch, micro-batch, the training
 * and validation sets' sizes; val_samples -1: no validation set)
 * with int64 min/max all-reduces (agree.h); a difference is
 * ST_ERR_CONFIG naming the first differing item and what each rank has (every
 * rank returns the same error). Then, with send, broadcast parameters and
 * buffers from rank 0 over pcomm: comm itself for host arenas, the NCCL
 * communicator for arenas on a CUDA device (the comparisons stay on the host
 * communicator). Where the masters were laid out sharded (graph.h
 * st_params_layout: no rank holds them whole) the parameters are not sent:
 * the hashes of the whole weights each rank set are compared instead
 * (st_params.set_hash; a difference is ST_ERR_CONFIG naming the tensor).
 * Without send (every rank loads the same checkpoint next) nothing is sent.
 * Every failure it returns is every rank's (a difference, or a rank out of
 * memory: agreed) or the communicator's (st_comm_failed). */
st_status st_ddp_agree(st_comm *comm, st_comm *pcomm, st_params *p, int64_t batch, int64_t micro,
                       int64_t n_samples, int64_t val_samples, bool send);

/* Arm g's backward hook for the next backward (DDP and ZeRO-1: the last
 * micro-step of a step; ZeRO-2: every micro-step): buckets start as their
 * gradients become final. */
st_status st_ddp_arm(st_ddp *d, st_graph *g);
/* After that backward: start what is left, wait for every bucket (gradients
 * are then averaged over ranks, or reduced into their owners' shards),
 * disarm the hook and record the timings. */
st_status st_ddp_finish(st_ddp *d, st_graph *g);

#endif
