/* Shared by the two halves of the MPI backend: comm_mpi.c (start-up,
 * collectives, progress) and comm_mpi_diag.c (the collective check, the
 * desync report and the per-node status board the watchdog reads).
 * Includes mpi.h: only src/comm/comm_mpi*.c include this. */
#ifndef SCALETRAIN_COMM_MPI_H
#define SCALETRAIN_COMM_MPI_H

#include <mpi.h>
#include <stdatomic.h>

#include "comm/comm_impl.h"

/* One rank's line on its node's status board (shared memory, 64 bytes):
 * written by its owner only, read by the other ranks' watchdogs without MPI. */
typedef struct st_mpi_slot {
    _Atomic uint64_t started_seq; /* sequence number of the last collective this rank called */
    _Atomic int64_t step;
    _Atomic int pid;
    _Atomic int world_rank;
    char pad[40];
} st_mpi_slot;

typedef struct st_mpi_req {
    st_comm_req base;
    bool shm;      /* posted to the node's shared segment (comm_shm.c), not MPI */
    bool shm_done; /* its data moved; it completes once its check has passed */
    MPI_Request check;            /* the collective check's all-reduce, or MPI_REQUEST_NULL */
    MPI_Request data;             /* the collective itself */
    uint64_t fp_in[2], fp_out[2]; /* (hash, ~hash) and its minimum over ranks */
} st_mpi_req;

typedef struct st_shm st_shm; /* comm_shm.c */

typedef struct st_mpi_comm {
    MPI_Comm data;  /* the callers' collectives, in sequence order */
    MPI_Comm check; /* the collective checks: their order may run ahead of data */
    MPI_Comm diag;  /* the desync report, after a check failed */
    MPI_Comm node;  /* the ranks on this node */
    MPI_Op sum_bf16, sum_f16; /* user-defined sums of 16-bit floats (MPI has none) */
    bool own_mpi;   /* st_comm_init called MPI_Init_thread */
    MPI_Win win;
    st_mpi_slot *slots; /* (local_size) the node's board, NULL when unavailable */
    st_shm *shm;        /* the shared-memory all-reduce, NULL when off or not on one node */
    /* Scratch for progress: one entry per active MPI request. */
    MPI_Request *reqs;
    st_mpi_req **owner;
    bool *is_check;
    int *idx;
    MPI_Status *statuses;
} st_mpi_comm;

/* An MPI error code as a status: "rank r of n (host h): <collective>: <call> failed: <MPI's words>". */
st_status st_mpi_fail(st_comm *c, const st_comm_req *r, int rc, const char *call);

/* comm_mpi_diag.c */
void st_mpi_check_start_values(const st_comm_req *r, uint64_t fp_in[2]);
st_status st_mpi_check_result(st_comm *c, st_mpi_req *q); /* after the check's all-reduce finished */
void st_mpi_board_open(st_comm *c); /* collective over the node; failure leaves no board */
void st_mpi_board_close(st_comm *c);
void st_mpi_board_note(st_comm *c, uint64_t seq, int64_t step);
void st_mpi_describe_missing(st_comm *c, uint64_t seq, char *buf, size_t cap);

/* comm_shm.c: the shared-memory all-reduce for ranks on one node. */
st_status st_mpi_shm_open(st_comm *c); /* collective over the node, after the board; off leaves m->shm NULL */
void st_mpi_shm_close(st_comm *c);
/* The zero-copy arena (comm.h st_comm_shared_arena): collective over the
 * node; *out NULL without the shared-memory all-reduce or when it cannot be
 * had (said once on rank 0). */
st_status st_mpi_shm_arena(st_comm *c, size_t nbytes, void **out);
bool st_shm_takes(const st_shm *s, const st_comm_req *r); /* float32 sum/avg all-reduce, large enough */
void st_shm_post(st_shm *s, st_comm_req *r);              /* in sequence order, after its check */
bool st_shm_busy(const st_shm *s);
/* Do what the segment's counters allow; completes finished requests
 * (st_comm_req_done) and returns how many; *moved when anything advanced. */
int st_shm_progress(st_shm *s, st_comm *c, bool *moved);
void st_shm_relax(int spins); /* a pause, then sched_yield */
/* "rank 0 3/3/2, rank 1 4/2/2": each rank's last piece copied in / reduced / copied out. */
bool st_shm_describe(const st_shm *s, char *buf, size_t cap); /* false: no rank is behind another */

#endif
