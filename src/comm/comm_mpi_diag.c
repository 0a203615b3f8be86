/* What the MPI backend does so that a wrong or stuck job says what is wrong:
 *
 * - The collective check: before a collective, the ranks all-reduce (MIN) the
 *   pair (h, ~h), h a hash of (sequence number, kind, type, reduction, count,
 *   root, name). The result gives the minimum and the maximum of h at once;
 *   they differ exactly when some rank is calling something else. Then every
 *   rank (all of them saw the same result) gathers the others' descriptions on
 *   a third communicator and the error names both collectives and the ranks.
 * - The node's status board: one shared-memory line per rank on this node
 *   (MPI_Win_allocate_shared) with the last sequence number it called and its
 *   pid; the watchdog reads it without calling MPI to say which ranks have not
 *   arrived and whether their process is stopped or gone. Ranks on other nodes
 *   are reported by their own node's watchdogs. */
#ifndef ST_NO_MPI
#include "comm/comm_mpi.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- The collective check ------------------------------------------------------ */

/* What the ranks compare. The step is carried for the message, not compared. */
typedef struct op_desc {
    uint64_t seq;
    int64_t step;
    uint64_t count;
    int32_t kind, dt, op, root;
    char name[ST_COMM_NAME_MAX];
} op_desc;

static void desc_of(const st_comm_req *r, op_desc *d) {
    memset(d, 0, sizeof *d);
    d->seq = r->seq;
    d->step = r->step;
    d->count = r->count;
    d->kind = (int32_t)r->kind;
    d->dt = (int32_t)r->dt;
    d->op = (int32_t)r->op;
    d->root = r->root;
    snprintf(d->name, sizeof d->name, "%s", r->name);
}

static bool desc_same(const op_desc *a, const op_desc *b) {
    return a->seq == b->seq && a->count == b->count && a->kind == b->kind && a->dt == b->dt &&
           a->op == b->op && a->root == b->root && strcmp(a->name, b->name) == 0;
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}

void st_mpi_check_start_values(const st_comm_req *r, uint64_t fp_in[2]) {
    op_desc d;
    desc_of(r, &d);
    d.step = 0;
    uint64_t h = fnv1a(14695981039346656037ull, &d, sizeof d);
    fp_in[0] = h;
    fp_in[1] = ~h;
}

/* "0-2,5" */
static void rank_list(const op_desc *all, int n, const op_desc *like, char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && len + 24 < cap; i++) {
        if (!desc_same(&all[i], like)) continue;
        int j = i;
        while (j + 1 < n && desc_same(&all[j + 1], like))
            j++;
        int w = j > i ? snprintf(buf + len, cap - len, "%s%d-%d", len ? "," : "", i, j)
                      : snprintf(buf + len, cap - len, "%s%d", len ? "," : "", i);
        if (w > 0) len += (size_t)w;
        i = j;
    }
}

static st_status desync_report(st_comm *c, st_mpi_req *q) {
    st_mpi_comm *m = c->impl;
    const st_comm_req *r = &q->base;
    char mine[256];
    st_comm_describe(r, mine, sizeof mine);
    op_desc me, *all = calloc((size_t)c->size, sizeof *all);
    desc_of(r, &me);
    int rc = all ? MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, m->diag)
                 : MPI_SUCCESS;
    if (!all || rc != MPI_SUCCESS) {
        free(all);
        return st_comm_fail(
            c, NULL, ST_ERR_INTERNAL,
            "collectives out of step: this rank called %s, and at least one other rank called a "
            "different collective as its number %llu (the ranks' descriptions could not be "
            "gathered); every rank must call the same collectives in the same order",
            mine, (unsigned long long)r->seq);
    }
    char groups[1400] = "";
    size_t len = 0;
    int shown = 0;
    for (int i = 0; i < c->size && shown < 6; i++) {
        bool first = true;
        for (int k = 0; k < i; k++)
            if (desc_same(&all[k], &all[i])) first = false;
        if (!first) continue;
        char ranks[160], what[256];
        rank_list(all, c->size, &all[i], ranks, sizeof ranks);
        st_comm_req tmp = {.seq = all[i].seq,
                           .step = all[i].step,
                           .count = all[i].count,
                           .kind = (st_comm_kind)all[i].kind,
                           .dt = (st_comm_dtype)all[i].dt,
                           .op = (st_comm_redop)all[i].op,
                           .root = all[i].root};
        snprintf(tmp.name, sizeof tmp.name, "%s", all[i].name);
        st_comm_describe(&tmp, what, sizeof what);
        int w = snprintf(groups + len, sizeof groups - len, "%s%s %s called %s", shown ? "; " : "",
                         strchr(ranks, ',') || strchr(ranks, '-') ? "ranks" : "rank", ranks, what);
        if (w > 0) len += (size_t)w;
        if (len >= sizeof groups) break;
        shown++;
    }
    free(all);
    return st_comm_fail(
        c, NULL, ST_ERR_INTERNAL,
        "collectives out of step at collective number %llu: %s; every rank must call the same "
        "collectives in the same order, with the same counts and names",
        (unsigned long long)r->seq, groups);
}

st_status st_mpi_check_result(st_comm *c, st_mpi_req *q) {
    if (q->fp_out[0] == ~q->fp_out[1]) return ST_OK; /* min(h) == max(h) */
    return desync_report(c, q);
}

/* ---- The node's status board ---------------------------------------------------- */

void st_mpi_board_open(st_comm *c) {
    st_mpi_comm *m = c->impl;
    st_mpi_slot *mine = NULL;
    int rc = MPI_Win_allocate_shared((MPI_Aint)sizeof(st_mpi_slot), (int)sizeof(st_mpi_slot), MPI_INFO_NULL,
                                     m->node, &mine, &m->win);
    if (rc != MPI_SUCCESS) {
        m->win = MPI_WIN_NULL;
        return; /* the watchdog then cannot name the missing ranks on this node */
    }
    MPI_Win_set_errhandler(m->win, MPI_ERRORS_RETURN);
    MPI_Aint size = 0;
    int disp = 0;
    st_mpi_slot *base = NULL;
    const bool read = MPI_Win_shared_query(m->win, 0, &size, &disp, &base) == MPI_SUCCESS && base;
    atomic_store(&mine->started_seq, 0);
    atomic_store(&mine->step, c->step);
    atomic_store(&mine->pid, (int)getpid());
    atomic_store(&mine->world_rank, c->rank);
    MPI_Barrier(m->node); /* every line is filled before anyone reads it (every rank: the others wait in it) */
    if (read) m->slots = base; /* (else this rank's watchdog cannot name the node's missing ranks) */
}

void st_mpi_board_close(st_comm *c) {
    st_mpi_comm *m = c->impl;
    pthread_mutex_lock(&c->lock); /* the watchdog reads the board under it */
    m->slots = NULL;
    pthread_mutex_unlock(&c->lock);
    if (m->win != MPI_WIN_NULL) MPI_Win_free(&m->win);
}

void st_mpi_board_note(st_comm *c, uint64_t seq, int64_t step) {
    st_mpi_comm *m = c->impl;
    if (!m->slots) return;
    st_mpi_slot *s = &m->slots[c->local_rank];
    atomic_store(&s->step, step);
    atomic_store(&s->started_seq, seq);
}

/* The state letter of a process from /proc/PID/stat (Linux): 'T' stopped,
 * 'Z' zombie, 'R' running, ...; 'X' when it is gone, '?' when unknown. */
static char process_state(int pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return kill(pid, 0) == 0 ? '?' : 'X';
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    return p && p[1] == ' ' ? p[2] : '?';
}

static bool state_bad(char st) { return st == 'T' || st == 't' || st == 'Z' || st == 'X'; }

static const char *state_words(char st) {
    switch (st) {
    case 'T':
        return "stopped (SIGSTOP or a terminal stop)";
    case 't':
        return "stopped by a debugger";
    case 'Z':
        return "gone (a zombie: it has exited)";
    case 'X':
        return "gone (it has exited or been killed)";
    case 'D':
        return "in uninterruptible sleep (I/O?)";
    case 'R':
        return "running";
    case 'S':
        return "sleeping";
    default:
        return "in an unknown state";
    }
}

void st_mpi_describe_missing(st_comm *c, uint64_t seq, char *buf, size_t cap) {
    st_mpi_comm *m = c->impl;
    size_t len = 0;
    buf[0] = '\0';
#define ADD(...)                                                                                             \
    do {                                                                                                     \
        int w_ = snprintf(buf + len, cap - len, __VA_ARGS__);                                                \
        if (w_ > 0) len += (size_t)w_;                                                                       \
        if (len >= cap) return;                                                                              \
    } while (0)
    if (!m || !m->slots) {
        ADD("scaletrain: rank %d: which ranks have not called it is not known (no shared-memory status "
            "board)\n",
            c->rank);
        return;
    }
    int missing = 0;
    for (int i = 0; i < c->local_size; i++) {
        if (i == c->local_rank) continue;
        st_mpi_slot *s = &m->slots[i];
        uint64_t started = atomic_load(&s->started_seq);
        int pid = atomic_load(&s->pid);
        char st = process_state(pid);
        if (started >= seq && !state_bad(st)) continue;
        if (started < seq)
            ADD("scaletrain: rank %d: rank %d (pid %d, this node) has not called it: the last collective it "
                "called "
                "is number %llu, at step %lld; its process is %s\n",
                c->rank, atomic_load(&s->world_rank), pid, (unsigned long long)started,
                (long long)atomic_load(&s->step), state_words(st));
        else
            ADD("scaletrain: rank %d: rank %d (pid %d, this node) has called it (its last is number %llu, at "
                "step "
                "%lld), but its process is %s\n",
                c->rank, atomic_load(&s->world_rank), pid, (unsigned long long)started,
                (long long)atomic_load(&s->step), state_words(st));
        missing++;
    }
    if (!missing)
        ADD("scaletrain: rank %d: every rank on this node has called it and is alive (%d of %d ranks)\n",
            c->rank, c->local_size, c->size);
    if (c->size > c->local_size)
        ADD("scaletrain: rank %d: the %d ranks on other nodes are not visible from here; their nodes' "
            "watchdogs "
            "name the missing ones there\n",
            c->rank, c->size - c->local_size);
#undef ADD
}
#endif
