/* Inside the communicator: the handle, the request, the backend table and the
 * helpers backends share (comm.c). Only src/comm/ includes this. */
#ifndef SCALETRAIN_COMM_IMPL_H
#define SCALETRAIN_COMM_IMPL_H

#include <pthread.h>

#include "comm/comm.h"

#define ST_COMM_NAME_MAX 64      /* bytes of a collective's name, with the NUL */
#define ST_COMM_MAX_PENDING 1024 /* unfinished collectives at once */
#define ST_COMM_SPARE_START 64   /* requests allocated with the communicator (st_comm_create) */
#define ST_COMM_ERR_MAX 2048

typedef enum st_comm_kind {
    ST_COMM_KIND_ALL_REDUCE = 1,
    ST_COMM_KIND_REDUCE_SCATTER,
    ST_COMM_KIND_ALL_GATHER,
    ST_COMM_KIND_BROADCAST,
    ST_COMM_KIND_BARRIER,
    ST_COMM_KIND_REDUCE,
    ST_COMM_KIND_ALL_TO_ALL,
    ST_COMM_KIND_INTERNAL, /* start-up and shutdown steps the watchdog also covers */
} st_comm_kind;

typedef enum st_comm_state {
    ST_COMM_REQ_CHECKING = 1, /* the collective check is in flight */
    ST_COMM_REQ_QUEUED,       /* checked (or unchecked), waits for earlier ones to be posted */
    ST_COMM_REQ_RUNNING,      /* posted to the engine */
    ST_COMM_REQ_DONE,
} st_comm_state;

/* One collective. The backend allocates ops->req_size bytes with this first. */
struct st_comm_req {
    st_comm *comm;
    st_comm_req *live_prev, *live_next; /* every request not yet freed */
    uint64_t seq;
    int64_t step;
    st_comm_kind kind;
    st_comm_dtype dt;
    st_comm_redop op;
    size_t count; /* all-reduce, reduce, broadcast: count; reduce-scatter: recv_count; all-gather, all-to-all:
                    per rank */
    int root;
    const void *send;
    void *recv;
    char name[ST_COMM_NAME_MAX];
    double t_start; /* st_comm_now() when started */
    double limit_s;    /* > 0: the watchdog's timeout for this one (st_comm_set_timeout) */
    const char *knob;  /* with limit_s: the setting to raise */
    st_comm_state state;
    bool averaged;    /* the backend already divided an AVG by the size (comm_shm.c) */
    st_status status; /* when DONE */
    bool released;    /* the caller let go of it; freed when DONE or at st_comm_free */
};

typedef struct st_comm_ops {
    const char *name;
    size_t req_size;
    /* The engine averages itself (NCCL's ncclAvg, on device memory): the
     * front's division on the host (st_comm_req_done) is skipped. */
    bool native_avg;
    /* Start r (already numbered and in the pending list); may complete it. */
    st_status (*start)(st_comm *c, st_comm_req *r);
    /* Complete what has finished; with `block`, wait until at least one
     * request has moved on. */
    st_status (*progress)(st_comm *c, bool block);
    /* Called by the watchdog thread: append to buf which ranks have not called
     * collective `seq` yet, as far as can be known without calling MPI. */
    void (*describe_missing)(st_comm *c, uint64_t seq, char *buf, size_t cap);
    /* End every rank (MPI_Abort); returns only where there are no other ranks. */
    void (*abort)(st_comm *c, int code);
    /* Optional (NULL: none): comm.h st_comm_shared_arena. */
    st_status (*shared_arena)(st_comm *c, size_t nbytes, void **out);
    /* Free the backend (finalize); outstanding requests are already finished. */
    void (*free)(st_comm *c);
    /* Optional (NULL: a host communicator): comm.h st_comm_device_wait for a
     * running request. */
    st_status (*device_wait)(st_comm *c, st_comm_req *r);
    /* The engine's counts are size_t (NCCL's): a collective of more than
     * INT_MAX elements (a ZeRO shard of a 5B-parameter model over 2 GPUs)
     * goes to it whole. false: MPI's int counts, the front refuses more. */
    bool large_counts;
} st_comm_ops;

typedef struct st_watchdog st_watchdog;

struct st_comm {
    const st_comm_ops *ops;
    void *impl;
    st_comm_config cfg;
    int rank, size, local_rank, local_size;
    char host[64];
    uint64_t seq;
    int64_t step;

    /* pending[] (unfinished requests in sequence order) and the fields of the
     * requests in it are shared with the watchdog thread: change them under
     * `lock`, and never call MPI while holding it. */
    pthread_mutex_t lock;
    st_comm_req *pending[ST_COMM_MAX_PENDING];
    int n_pending;

    st_comm_req *live;
    /* Finished requests kept for the next collectives (a list through
     * live_next, ops->req_size bytes each; the caller's thread alone): the
     * step loop allocates none, and cannot fail to. */
    st_comm_req *spare;
    int n_spare;
    char *spare_block; /* the first ST_COMM_SPARE_START of them, one allocation (never freed alone) */
    st_status failed; /* ST_OK until a collective fails; then every call returns it */
    char errmsg[ST_COMM_ERR_MAX];
    st_watchdog *watchdog;
    double limit_s;   /* st_comm_set_timeout: given to requests as they start */
    const char *knob;
    const void *stop; /* st_comm_set_stop_flag's atomic_int (NULL: none), read by the watchdog */
};

double st_comm_now(void); /* monotonic seconds */

const char *st_comm_kind_name(st_comm_kind k);
const char *st_comm_dtype_name(st_comm_dtype dt);
const char *st_comm_redop_name(st_comm_redop op);
size_t st_comm_dtype_size(st_comm_dtype dt);

/* "all-reduce 'bucket 3' (seq 7, step 2, 1000 x float32, sum)" */
void st_comm_describe(const st_comm_req *r, char *buf, size_t cap);

/* Record a failure of r (NULL: of the communicator) with this rank, host and
 * the collective in front of the message; the communicator is broken from
 * then on. Returns code. */
st_status st_comm_fail(st_comm *c, const st_comm_req *r, st_status code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The backend finished r: average if asked, mark it done, take it off the
 * pending list. */
void st_comm_req_done(st_comm *c, st_comm_req *r);

/* Put an internal step (start-up, shutdown) under the watchdog, and take it off. */
void st_comm_watch_begin(st_comm *c, st_comm_req *r, const char *name);
void st_comm_watch_end(st_comm *c, st_comm_req *r);

/* Allocate a communicator with configuration cfg (validated), run
 * backend_init(c, arg) on it and hand it out; on failure free what the
 * backend set up. st_comm_init uses it, and so does a backend bootstrapped
 * over another communicator (NCCL over MPI, src/cuda/comm_nccl.cu). */
st_status st_comm_create(const st_comm_config *cfg, st_status (*backend_init)(st_comm *c, void *arg), void *arg,
                         st_comm **out);

/* Backends. */
st_status st_comm_local_init(st_comm *c);
st_status st_comm_mpi_init(st_comm *c);
bool st_comm_mpi_launched(void); /* a launcher's variables are present */

/* The watchdog thread (watchdog.c); timeout_s > 0. */
st_status st_watchdog_start(st_comm *c, double timeout_s, st_watchdog **out);
void st_watchdog_stop(st_watchdog *w);

#endif
