/* The node-local all-reduce of the MPI backend: when every rank of the job is
 * on one node, float32 sum and average all-reduces of at least
 * shm_min_bytes go through one shared segment (a /dev/shm file that rank 0
 * creates and names to the others over MPI at start-up, unlinked once all
 * have mapped it) instead of MPI_Iallreduce, whose copy-in/copy-out FIFOs
 * cost several ms of CPU for a gradient bucket and move only while a rank is
 * inside MPI.
 *
 * A buffer goes in pieces of at most piece_bytes; piece k (numbered 1, 2, ...
 * over the communicator's life, in the collectives' sequence order, so the
 * same on every rank) uses buffer k % NBUF of the segment, which holds one
 * slot per rank. A piece is cut into N slices (64-byte aligned); rank r owns
 * slice r. Per piece, each rank:
 *   1. copy-in: copies every slice but its own into its slot (no one else
 *      reads its own slice of its data);
 *   2. reduce: once every rank has copied in, sums slice r over ranks 0, 1,
 *      ..., N-1 in that order (its own data from its send buffer; an average
 *      divided by N), and writes it to slice r of its own slot and of its
 *      receive buffer. The order
 *      is fixed: every rank gets the same bits, run after run; with 2 ranks
 *      they are MPI's (a + b == b + a);
 *   3. copy-out: once every rank has reduced, copies slice j of rank j's slot
 *      into its receive buffer, for every j but itself.
 * Each rank publishes the last piece it finished in each phase in its own
 * cache line of the segment (C11 atomics, release after the data, acquire
 * before reading it). A phase waits for counters only: copy-in of piece k
 * waits until every rank has copied out piece k - NBUF, the last use of the
 * buffer (pieces differ in length, so their slices do not line up: any
 * byte of a slot may have been read in either phase), reduce until every
 * rank has copied in piece k, copy-out until every rank has reduced it. The
 * waits point only to earlier phases or pieces: no cycle, no deadlock while
 * every rank drives progress.
 *
 * The MPI backend posts a collective here in sequence order as soon as its
 * collective check is started (the data move while the check is in flight)
 * and completes it only when the check has passed (comm_mpi.c, post_ready).
 * Nothing here blocks: st_shm_progress does what the counters allow and
 * returns; the MPI backend calls it from st_comm_progress and spins on it in
 * st_comm_wait (with a pause, then sched_yield), under the same watchdog as
 * MPI's collectives, so a dead or stopped peer ends in the watchdog's error
 * naming the collective, its sequence number, step and the missing rank.
 *
 * Zero-copy (st_mpi_shm_arena): a second segment holds one region per rank,
 * all of the same size (agreed over MPI; a mismatch or a segment that cannot
 * be made leaves it off, said once by rank 0), and the session puts each
 * rank's gradient arena in its own region (graph.h st_arena_hook). An
 * all-reduce taken here whose buffer is in place (send == recv) and inside
 * this rank's region is at the same offset of every rank's region (the ranks
 * agreed on the model, so on the arena and its buckets), and its pieces skip
 * the copies; the same counters and phases, per piece:
 *   1. ready: publish "in" at once (the caller's data is final; no slot is
 *      used, so no wait for an earlier piece's copy-out);
 *   2. reduce: once every rank is ready, sum slice r reading every rank's
 *      region directly, in rank order, with the same additions and division
 *      as the copying reduce (the same bits, tests/mpi/shm_check.c compares
 *      them), and write it to slice r of every rank's region;
 *   3. done: once every rank has reduced, publish "out"; the op completes.
 * Slices are disjoint, so no two ranks touch the same bytes in a phase, and
 * no rank reads or writes another's region after publishing its reduce: the
 * owner may reuse its buffer as soon as its request completes. At 2 ranks a
 * rank moves about half the bytes of the copying path per piece (reads both
 * halves of its slice, writes two) and no slot traffic.
 * Not here: other types or reductions, several nodes (MPI does those). */
#ifndef ST_NO_MPI
#include "comm/comm_mpi.h"
#include "core/ticker.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

enum {
    NBUF = 8,        /* pieces in flight */
    SLICE_ALIGN = 16 /* floats: slices start on their own cache line */
};

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "the segment's counters must be lock-free across processes");

typedef struct shm_line {
    _Atomic uint64_t v;
    char pad[56];
} shm_line;

typedef struct shm_op {
    st_comm_req *r;
    uint64_t first, n; /* its pieces: first .. first + n - 1 */
    size_t zc_off;     /* zero-copy: its buffer's offset (floats) in every rank's arena region */
    bool zc;
} shm_op;

struct st_shm {
    int rank, size;
    size_t min_bytes, piece_count; /* piece_count: floats per piece */
    shm_line *in, *red, *out;      /* (size) each: the last piece each rank copied in, reduced, copied out */
    float *data;                   /* (NBUF, size, piece_count) */
    uint64_t posted;               /* the last piece handed out */
    uint64_t next_in, next_red, next_out;
    shm_op ops[ST_COMM_MAX_PENDING]; /* posted, unfinished, in order: a ring */
    int head, n_ops;
    void *map;
    size_t map_bytes;
    /* The zero-copy arena (st_mpi_shm_arena): rank j's region at arena + j *
     * region_count floats; NULL when none. */
    float *arena;
    size_t region_count, arena_bytes;
};

static size_t header_bytes(int size) {
    size_t h = 3 * (size_t)size * sizeof(shm_line);
    return (h + 4095) / 4096 * 4096;
}

static size_t segment_bytes(int size, size_t piece_bytes) {
    return header_bytes(size) + (size_t)NBUF * (size_t)size * piece_bytes;
}

static uint64_t min_of(const shm_line *l, int n) {
    uint64_t m = UINT64_MAX;
    for (int j = 0; j < n; j++) {
        uint64_t v = atomic_load_explicit(&l[j].v, memory_order_acquire);
        if (v < m) m = v;
    }
    return m;
}

static void publish(shm_line *l, uint64_t k) { atomic_store_explicit(&l->v, k, memory_order_release); }

static st_status shm_attach(void *base, int rank, int size, size_t min_bytes, size_t piece_bytes,
                            st_shm **out) {
    *out = NULL;
    st_shm *s = calloc(1, sizeof *s);
    if (!s) return st_fail(ST_ERR_NOMEM, "rank %d: no memory for the shared-memory all-reduce", rank);
    s->rank = rank;
    s->size = size;
    s->min_bytes = min_bytes;
    s->piece_count = piece_bytes / sizeof(float);
    shm_line *lines = base;
    s->in = lines;
    s->red = lines + size;
    s->out = lines + 2 * size;
    s->data = (float *)((char *)base + header_bytes(size));
    s->next_in = s->next_red = s->next_out = 1;
    *out = s;
    return ST_OK;
}

bool st_shm_takes(const st_shm *s, const st_comm_req *r) {
    return s && r->kind == ST_COMM_KIND_ALL_REDUCE && r->dt == ST_COMM_F32 &&
           (r->op == ST_COMM_SUM || r->op == ST_COMM_AVG) && r->count * sizeof(float) >= s->min_bytes &&
           r->count > 0;
}

bool st_shm_busy(const st_shm *s) { return s && s->n_ops > 0; }

/* In place, wholly inside this rank's arena region: every rank's buffer is
 * at the same offset of its own region (the ranks agreed on the model, so
 * the arenas and the gradient buckets are the same). */
static bool zero_copy(const st_shm *s, const st_comm_req *r, size_t *off) {
    if (!s->arena || r->send != r->recv) return false;
    const float *mine = s->arena + (size_t)s->rank * s->region_count, *x = r->recv;
    if (x < mine || x >= mine + s->region_count) return false;
    *off = (size_t)(x - mine);
    return r->count <= s->region_count - *off;
}

void st_shm_post(st_shm *s, st_comm_req *r) {
    shm_op *o = &s->ops[(s->head + s->n_ops++) % ST_COMM_MAX_PENDING];
    o->r = r;
    o->zc = zero_copy(s, r, &o->zc_off);
    o->first = s->posted + 1;
    o->n = (r->count + s->piece_count - 1) / s->piece_count;
    s->posted += o->n;
}

/* Where piece k lies: its op, its first element there and its length. */
typedef struct piece {
    shm_op *o;
    size_t off, len;
    float *buf; /* (size, piece_count): the slots of its buffer */
} piece;

static piece piece_of(st_shm *s, uint64_t k) {
    piece p = {0};
    for (int i = 0; i < s->n_ops; i++) {
        shm_op *o = &s->ops[(s->head + i) % ST_COMM_MAX_PENDING];
        if (k < o->first || k >= o->first + o->n) continue;
        p.o = o;
        p.off = (size_t)(k - o->first) * s->piece_count;
        p.len = o->r->count - p.off < s->piece_count ? o->r->count - p.off : s->piece_count;
        break;
    }
    /* every piece from next_out to posted belongs to an op in the ring:
     * st_shm_post appends each op's pieces, and an op leaves only with its
     * last piece copied out */
    ST_INVARIANT(p.o, "shared-memory all-reduce: a posted piece belongs to no op in the ring");
    p.buf = s->data + (size_t)(k % NBUF) * (size_t)s->size * s->piece_count;
    return p;
}

/* Rank j's slice of a piece of len floats: [*lo, *hi). */
static void slice(const st_shm *s, size_t len, int j, size_t *lo, size_t *hi) {
    size_t chunk = (len + (size_t)s->size - 1) / (size_t)s->size;
    chunk = (chunk + SLICE_ALIGN - 1) / SLICE_ALIGN * SLICE_ALIGN;
    *lo = (size_t)j * chunk < len ? (size_t)j * chunk : len;
    *hi = *lo + chunk < len ? *lo + chunk : len;
}

static float *slot(const st_shm *s, const piece *p, int j) { return p->buf + (size_t)j * s->piece_count; }

static void copy_in(st_shm *s, const piece *p) {
    const float *x = (const float *)p->o->r->send + p->off; /* (len) */
    float *mine = slot(s, p, s->rank);
    for (int j = 0; j < s->size; j++) {
        if (j == s->rank) continue;
        size_t lo, hi;
        slice(s, p->len, j, &lo, &hi);
        memcpy(mine + lo, x + lo, (hi - lo) * sizeof(float));
    }
}

/* Slice r of the sum, ranks added in order 0, 1, ..., N-1; an average is
 * divided here (the same division as comm.c's, one pass less over the
 * buffer). */
/* Elements [lo, hi) of the sum of src[0], src[1], ... (in that order, so
 * every rank gets the same bits), divided by the rank count for an average,
 * written to each of dst[0..ndst). */
static void sum_slice(const float *const *src, int nsrc, float *const *dst, int ndst, size_t lo, size_t hi,
                      bool avg) {
    enum { BLOCK = 1024 };
    float acc[BLOCK];
    const float n_ranks = (float)nsrc;
    for (size_t b = lo; b < hi; b += BLOCK) {
        size_t n = hi - b < BLOCK ? hi - b : BLOCK;
        memcpy(acc, src[0] + b, n * sizeof(float));
        for (int j = 1; j < nsrc; j++)
            for (size_t i = 0; i < n; i++)
                acc[i] += src[j][b + i];
        if (avg)
            for (size_t i = 0; i < n; i++)
                acc[i] /= n_ranks;
        for (int j = 0; j < ndst; j++)
            memcpy(dst[j] + b, acc, n * sizeof(float));
    }
}

/* Slice r of the sum over ranks (this rank's own data from its send buffer,
 * the others' from their slots), written to slice r of this rank's slot
 * (for the others' copy-out) and of its receive buffer. */
static void reduce(st_shm *s, const piece *p) {
    ST_INVARIANT(s->size >= 2, "shared-memory all-reduce on fewer than 2 ranks"); /* st_mpi_shm_open */
    const float *src[s->size];
    for (int j = 0; j < s->size; j++)
        src[j] = j == s->rank ? (const float *)p->o->r->send + p->off : slot(s, p, j);
    float *const dst[2] = {slot(s, p, s->rank), (float *)p->o->r->recv + p->off};
    size_t lo, hi;
    slice(s, p->len, s->rank, &lo, &hi);
    sum_slice(src, s->size, dst, 2, lo, hi, p->o->r->op == ST_COMM_AVG);
}

/* Zero-copy: slice r of the sum, read from every rank's region in rank order
 * (the same additions and division as reduce(), so the same bits), written to
 * slice r of every rank's region. Only this rank touches these bytes now. */
static void reduce_in_place(st_shm *s, const piece *p) {
    const size_t at = p->o->zc_off + p->off;
    ST_INVARIANT(s->size >= 2, "shared-memory all-reduce on fewer than 2 ranks"); /* st_mpi_shm_open */
    float *region[s->size];
    for (int j = 0; j < s->size; j++)
        region[j] = s->arena + (size_t)j * s->region_count + at;
    size_t lo, hi;
    slice(s, p->len, s->rank, &lo, &hi);
    sum_slice((const float *const *)region, s->size, region, s->size, lo, hi, p->o->r->op == ST_COMM_AVG);
}

static void copy_out(st_shm *s, const piece *p) {
    float *y = (float *)p->o->r->recv + p->off;
    for (int j = 0; j < s->size; j++) {
        if (j == s->rank) continue;
        size_t lo, hi;
        slice(s, p->len, j, &lo, &hi);
        memcpy(y + lo, slot(s, p, j) + lo, (hi - lo) * sizeof(float));
    }
}

int st_shm_progress(st_shm *s, st_comm *c, bool *moved) {
    int done = 0;
    const int me = s->rank;
    for (;;) {
        bool any = false;
        while (s->next_in <= s->posted) {
            uint64_t k = s->next_in;
            piece p = piece_of(s, k);
            if (!p.o->zc) { /* zero-copy: the data is final, "ready" is all there is to say */
                if (k > NBUF && min_of(s->out, s->size) < k - NBUF) break;
                copy_in(s, &p);
            }
            publish(&s->in[me], k);
            s->next_in++;
            any = true;
        }
        while (s->next_red < s->next_in) {
            uint64_t k = s->next_red;
            if (min_of(s->in, s->size) < k) break;
            piece p = piece_of(s, k);
            if (p.o->zc)
                reduce_in_place(s, &p);
            else
                reduce(s, &p);
            publish(&s->red[me], k);
            s->next_red++;
            any = true;
        }
        while (s->next_out < s->next_red) {
            uint64_t k = s->next_out;
            if (min_of(s->red, s->size) < k) break;
            piece p = piece_of(s, k);
            if (!p.o->zc) copy_out(s, &p); /* zero-copy: every rank wrote its slice everywhere */
            publish(&s->out[me], k);
            s->next_out++;
            any = true;
            if (k == p.o->first + p.o->n - 1) { /* its last piece: the op is done, the oldest one */
                st_comm_req *r = p.o->r;
                s->head = (s->head + 1) % ST_COMM_MAX_PENDING;
                s->n_ops--;
                ((st_mpi_req *)r)->shm_done = true;
                r->averaged = r->op == ST_COMM_AVG;
                if (r->state == ST_COMM_REQ_RUNNING) { /* else its check has not passed yet */
                    r->status = ST_OK;
                    st_comm_req_done(c, r);
                    done++;
                }
            }
        }
        if (!any) break;
        *moved = true;
    }
    return done;
}

void st_shm_relax(int spins) {
    if (spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        __asm__ __volatile__("yield");
#endif
    } else {
        sched_yield(); /* more ranks than cores: let the one we wait for run */
    }
}

bool st_shm_describe(const st_shm *s, char *buf, size_t cap) {
    size_t len = 0;
    bool differ = false;
    buf[0] = '\0';
    uint64_t first = atomic_load(&s->out[0].v);
    for (int j = 0; j < s->size && len < cap; j++) {
        uint64_t in = atomic_load(&s->in[j].v), red = atomic_load(&s->red[j].v),
                 out = atomic_load(&s->out[j].v);
        differ = differ || in != first || red != first || out != first;
        int w = snprintf(buf + len, cap - len, "%srank %d %llu/%llu/%llu", j ? ", " : "", j,
                         (unsigned long long)in, (unsigned long long)red, (unsigned long long)out);
        if (w > 0) len += (size_t)w;
    }
    return differ;
}

/* ---- Set-up over MPI ------------------------------------------------------------ */

/* An environment variable that overrides a size setting: digits only. */
static st_status env_bytes(st_comm *c, const char *name, size_t *v) {
    const char *e = getenv(name);
    if (!e || !*e) return ST_OK;
    char *end = NULL;
    errno = 0;
    unsigned long long x = strtoull(e, &end, 10);
    if (errno || *end || *e == '-')
        return st_comm_fail(c, NULL, ST_ERR_CONFIG,
                            "%s=%s is not a number of bytes (0 turns the shared-memory "
                            "all-reduce off)",
                            name, e);
    *v = (size_t)x;
    return ST_OK;
}

/* Rank 0 creates the segment in /dev/shm and names it to the others; each
 * maps it; once everyone has tried, rank 0 unlinks the name, so nothing is
 * left behind however the job ends. Rank 0 reserves the whole segment
 * (posix_fallocate): a tmpfs extends a file past its free space without a
 * word (ftruncate), MAP_POPULATE ignores pages it cannot get, and the first
 * touch of one is a SIGBUS; a /dev/shm too small must be an error here, so
 * that every rank takes the path without it. */
static void *map_segment(st_comm *c, MPI_Comm node, size_t bytes, char *why, size_t cap) {
    char name[96] = "";
    void *p = NULL;
    int ok = 1;
    int fd = -1;
    if (c->rank == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        snprintf(name, sizeof name, "/scaletrain-allreduce-%d-%lld", (int)getpid(), (long long)ts.tv_nsec);
        fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
        const int err = fd < 0 ? errno : posix_fallocate(fd, 0, (off_t)bytes);
        if (err != 0) {
            snprintf(why, cap, "rank 0: cannot reserve %zu bytes for %s in /dev/shm: %s", bytes, name,
                     strerror(err));
            ok = 0;
        }
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, node); /* the others open the name after rank 0 made it */
    MPI_Bcast(name, (int)sizeof name, MPI_CHAR, 0, node);
    if (c->rank != 0 && ok) {
        fd = shm_open(name, O_RDWR, 0600);
        if (fd < 0) {
            snprintf(why, cap, "rank %d: shm_open %s: %s", c->rank, name, strerror(errno));
            ok = 0;
        }
    }
    if (ok) {
        /* Populated now: no page faults in the first training step. */
        p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
        if (p == MAP_FAILED) {
            snprintf(why, cap, "rank %d: mmap of %s (%zu bytes): %s", c->rank, name, bytes, strerror(errno));
            p = NULL;
            ok = 0;
        }
    }
    if (fd >= 0) close(fd);
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, node);
    if (c->rank == 0 && fd >= 0) shm_unlink(name);
    if (!all && p) {
        munmap(p, bytes);
        p = NULL;
    }
    if (!all && ok) snprintf(why, cap, "another rank could not map the segment");
    return p;
}

st_status st_mpi_shm_open(st_comm *c) {
    st_mpi_comm *m = c->impl;
    size_t v[2] = {c->cfg.shm_min_bytes, c->cfg.shm_piece_bytes};
    st_status bad = ST_OK;
    /* Rank 0's settings are everyone's: ranks that chose different paths for
     * the same collective would wait for each other forever. The environment
     * overrides the config, except a config that turned it off. */
    if (c->rank == 0 && v[0] > 0 && (bad = env_bytes(c, "SCALETRAIN_SHM_MIN_BYTES", &v[0])) == ST_OK)
        bad = env_bytes(c, "SCALETRAIN_SHM_PIECE_BYTES", &v[1]);
    uint64_t w[3] = {v[0], v[1], bad != ST_OK};
    int rc = MPI_Bcast(w, 3, MPI_UINT64_T, 0, m->diag);
    if (rc != MPI_SUCCESS) return st_mpi_fail(c, NULL, rc, "MPI_Bcast (shared-memory all-reduce settings)");
    if (bad) return bad;
    if (w[2]) {
        /* The same environment here (mpirun passes it on): name the bad value
         * as rank 0 does, which mpirun may stop before it has printed. */
        size_t own[2] = {v[0], v[1]};
        st_status mine = env_bytes(c, "SCALETRAIN_SHM_MIN_BYTES", &own[0]);
        if (mine == ST_OK) mine = env_bytes(c, "SCALETRAIN_SHM_PIECE_BYTES", &own[1]);
        if (mine != ST_OK) return mine;
        return st_comm_fail(c, NULL, ST_ERR_CONFIG,
                            "rank 0's SCALETRAIN_SHM_* settings are invalid (its "
                            "message says which)");
    }
    if (w[0] == 0 || c->size < 2 || c->local_size != c->size) return ST_OK;
    size_t piece_bytes = (size_t)w[1];
    piece_bytes = piece_bytes < 4096                ? 4096
                  : piece_bytes > ((size_t)1 << 30) ? (size_t)1 << 30
                                                    : piece_bytes / 64 * 64;
    size_t bytes = segment_bytes(c->size, piece_bytes);
    char why[256] = "";
    void *base = map_segment(c, m->node, bytes, why, sizeof why);
    if (!base) {
        if (c->rank == 0)
            st_ticker_sayf(
                "scaletrain: warning: no shared-memory all-reduce (%s); all-reduces go through MPI\n", why);
        return ST_OK;
    }
    st_status s = shm_attach(base, c->rank, c->size, (size_t)w[0], piece_bytes, &m->shm);
    if (s != ST_OK) {
        munmap(base, bytes);
        return s;
    }
    m->shm->map = base;
    m->shm->map_bytes = bytes;
    return ST_OK;
}

static st_status shm_arena(st_comm *c, size_t nbytes, void **out) {
    st_mpi_comm *m = c->impl;
    *out = NULL;
    /* Every rank decides the same way: m->shm is there on all or none (rank
     * 0's settings, and its segment mapped by all or none), and the one
     * input of this rank's own, the size, goes through the agreement below
     * (an empty arena too: a rank that returned before it would leave the
     * others in MPI_Allreduce), then the mapping. */
    if (!m->shm || m->shm->arena) return ST_OK;
    st_shm *s = m->shm;
    uint64_t mine[2] = {nbytes, ~(uint64_t)nbytes}, all[2];
    int rc = MPI_Allreduce(mine, all, 2, MPI_UINT64_T, MPI_MIN, m->node);
    if (rc != MPI_SUCCESS) return st_mpi_fail(c, NULL, rc, "MPI_Allreduce (zero-copy arena size)");
    if (all[0] == 0 && ~all[1] == 0) return ST_OK; /* no gradients anywhere */
    if (all[0] != ~all[1]) { /* min != max */
        if (c->rank == 0)
            st_ticker_sayf(
                "scaletrain: warning: no zero-copy gradient all-reduce (the ranks' gradient arenas "
                "differ in size: %llu to %llu bytes); gradients are copied through the shared segment\n",
                (unsigned long long)all[0], (unsigned long long)~all[1]);
        return ST_OK;
    }
    const size_t region = (nbytes + 4095) / 4096 * 4096, bytes = region * (size_t)c->size;
    char why[256] = "";
    void *base = map_segment(c, m->node, bytes, why, sizeof why);
    if (!base) {
        if (c->rank == 0)
            st_ticker_sayf("scaletrain: warning: no zero-copy gradient all-reduce (%s); gradients are copied "
                           "through the shared segment\n",
                           why);
        return ST_OK;
    }
    s->arena = base;
    s->arena_bytes = bytes;
    s->region_count = region / sizeof(float);
    *out = s->arena + (size_t)c->rank * s->region_count;
    return ST_OK;
}

st_status st_mpi_shm_arena(st_comm *c, size_t nbytes, void **out) {
    /* its MPI calls block: watched as the start-up's are (a rank that dies
     * or stalls before it would leave the others in them for good) */
    st_comm_req watch;
    st_comm_watch_begin(c, &watch,
                        "the zero-copy gradient arena's set-up (MPI_Allreduce, MPI_Bcast, shm_open)");
    const st_status s = shm_arena(c, nbytes, out);
    st_comm_watch_end(c, &watch);
    return s;
}

void st_mpi_shm_close(st_comm *c) {
    st_mpi_comm *m = c->impl;
    if (!m->shm) return;
    if (m->shm->arena) munmap(m->shm->arena, m->shm->arena_bytes);
    munmap(m->shm->map, m->shm->map_bytes);
    free(m->shm);
    m->shm = NULL;
}
#endif
