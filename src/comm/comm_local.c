/* The local backend: one rank, so every collective is a copy (or nothing)
 * and completes when it starts. Sequence numbers, argument checks and names
 * work as with MPI, so single-process runs take the same code path. No
 * watchdog: nothing here can wait on another process. */
#include "comm/comm_impl.h"

#include <string.h>
#include <unistd.h>

static st_status local_start(st_comm *c, st_comm_req *r) {
    size_t nbytes = r->count * st_comm_dtype_size(r->dt);
    switch (r->kind) {
    case ST_COMM_KIND_ALL_REDUCE:     /* one rank: sum, avg, min and max of one value are the value */
    case ST_COMM_KIND_REDUCE_SCATTER: /* the only shard is the whole buffer */
    case ST_COMM_KIND_ALL_GATHER:
    case ST_COMM_KIND_REDUCE:
    case ST_COMM_KIND_ALL_TO_ALL:
        if (nbytes && r->send != r->recv) memmove(r->recv, r->send, nbytes);
        break;
    default:
        break; /* broadcast from rank 0 to itself, barrier */
    }
    st_comm_req_done(c, r);
    return ST_OK;
}

static st_status local_progress(st_comm *c, bool block) { return ST_OK; }

static void local_describe_missing(st_comm *c, uint64_t seq, char *buf, size_t cap) {
    if (cap) buf[0] = '\0';
}

static void local_abort(st_comm *c, int code) {}

static const st_comm_ops local_ops = {
    .name = "local",
    .req_size = sizeof(st_comm_req),
    .start = local_start,
    .progress = local_progress,
    .describe_missing = local_describe_missing,
    .abort = local_abort,
    .free = NULL,
};

st_status st_comm_local_init(st_comm *c) {
    c->ops = &local_ops;
    c->rank = c->local_rank = 0;
    c->size = c->local_size = 1;
    if (gethostname(c->host, sizeof c->host) != 0) strcpy(c->host, "?");
    c->host[sizeof c->host - 1] = '\0';
    return ST_OK;
}
