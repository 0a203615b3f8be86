/* The distributed sampler (see sampler.h): the epoch permutation is computed
 * once per epoch and kept; a micro-batch is a contiguous run of the epoch
 * sequence, read modulo n so that the wrap-around tail needs no copy. */
#include "data/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/dataset.h"

struct st_sampler {
    st_sampler_opts o;
    int64_t accum, steps; /* micro-steps per step; steps per epoch */
    st_sampler_pos pos;   /* of the next micro-batch */
    int64_t *perm;        /* (n) the permutation of perm_epoch */
    int64_t perm_epoch;   /* -1: none yet */
};

st_status st_sampler_init(const st_sampler_opts *o, st_sampler **out) {
    *out = NULL;
    const char *name = o->name ? o->name : "the dataset";
    if (o->world < 1 || o->rank < 0 || o->rank >= o->world)
        return st_fail(ST_ERR_ARG, "sampler: rank %d is not in [0, world size %d)", o->rank, o->world);
    if (o->micro_batch < 1 || o->batch_size < 1)
        return st_fail(ST_ERR_ARG, "sampler: batch size %lld and micro-batch %lld must be at least 1",
                       (long long)o->batch_size, (long long)o->micro_batch);
    if (o->batch_size % ((int64_t)o->world * o->micro_batch) != 0)
        return st_fail(ST_ERR_CONFIG,
                       "the global batch of %lld samples cannot be split into %d rank(s) x micro-batches of "
                       "%lld; make train.batch_size a multiple of ranks x train.micro_batch_size",
                       (long long)o->batch_size, o->world, (long long)o->micro_batch);
    if (o->n < 1) return st_fail(ST_ERR_FORMAT, "%s: the dataset is empty", name);
    if (o->n < o->batch_size && o->drop_last)
        return st_fail(ST_ERR_CONFIG,
                       "%s has %lld samples, fewer than one global batch of %lld (train.batch_size), and "
                       "data.drop_last drops the partial batch: use a smaller batch, more data, or "
                       "data.drop_last: false (each step's batch then repeats samples to fill it)",
                       name, (long long)o->n, (long long)o->batch_size);
    st_sampler *s = calloc(1, sizeof *s);
    if (!s) return st_fail(ST_ERR_NOMEM, "out of memory for the sampler");
    s->perm = malloc((size_t)o->n * sizeof *s->perm);
    if (!s->perm) {
        free(s);
        return st_fail(ST_ERR_NOMEM, "out of memory for the sample order of %s (%lld samples)", name,
                       (long long)o->n);
    }
    s->o = *o;
    s->accum = o->batch_size / ((int64_t)o->world * o->micro_batch);
    s->steps = st_steps_per_epoch(o->n, o->batch_size, o->drop_last);
    s->perm_epoch = -1;
    *out = s;
    return ST_OK;
}

void st_sampler_free(st_sampler *s) {
    if (!s) return;
    free(s->perm);
    free(s);
}

int64_t st_sampler_steps_per_epoch(const st_sampler *s) { return s->steps; }

int64_t st_steps_per_epoch(int64_t n, int64_t batch, bool drop_last) {
    return drop_last ? n / batch : (n + batch - 1) / batch;
}

int64_t st_steps_of_epochs(double epochs, int64_t n, int64_t batch, bool drop_last) {
    /* A whole number of steps that the decimal epochs only miss in binary
     * (1.08 x 1875 is 2025.0000000000002) is that number, not one more. */
    const double x = epochs * (double)st_steps_per_epoch(n, batch, drop_last), r = round(x);
    const int64_t steps = (int64_t)(fabs(x - r) <= 1e-9 * fmax(1.0, x) ? r : ceil(x));
    return steps < 1 ? 1 : steps;
}
int64_t st_sampler_accum(const st_sampler *s) { return s->accum; }
int64_t st_sampler_micro_batch(const st_sampler *s) { return s->o.micro_batch; }
const st_sampler_opts *st_sampler_options(const st_sampler *s) { return &s->o; }
st_sampler_pos st_sampler_tell(const st_sampler *s) { return s->pos; }

static bool pos_ok(const st_sampler *s, st_sampler_pos p) {
    return p.epoch >= 0 && p.step >= 0 && p.step < s->steps && p.micro >= 0 && p.micro < s->accum;
}

st_status st_sampler_seek(st_sampler *s, st_sampler_pos p) {
    if (!pos_ok(s, p))
        return st_fail(
            ST_ERR_ARG,
            "sampler position (epoch %lld, step %lld, micro-step %lld) is outside an epoch of %lld "
            "steps of %lld micro-steps; was the checkpoint made with another batch size or dataset?",
            (long long)p.epoch, (long long)p.step, (long long)p.micro, (long long)s->steps,
            (long long)s->accum);
    s->pos = p;
    return ST_OK;
}

st_sampler_pos st_sampler_advance(const st_sampler *s, st_sampler_pos p) {
    if (++p.micro < s->accum) return p;
    p.micro = 0;
    if (++p.step < s->steps) return p;
    p.step = 0;
    p.epoch++;
    return p;
}

static void fill(st_sampler *s, int rank, st_sampler_pos p, int64_t *idx) {
    if (s->perm_epoch != p.epoch) {
        st_epoch_order(s->o.n, s->o.seed, p.epoch, s->o.shuffle, s->perm);
        s->perm_epoch = p.epoch;
    }
    const int64_t n = s->o.n, mb = s->o.micro_batch;
    const int64_t slice = s->o.interleave ? p.micro * s->o.world + rank : (int64_t)rank * s->accum + p.micro;
    int64_t i = p.step * s->o.batch_size + slice * mb;
    i %= n; /* the wrapped tail (several times round when n < B) */
    for (int64_t j = 0; j < mb; j++) {
        idx[j] = s->perm[i];
        if (++i == n) i = 0;
    }
}

st_sampler_pos st_sampler_rebatch(st_sampler_pos p, int64_t from_batch, int64_t to_batch, int64_t *again) {
    const int64_t done = p.step * from_batch; /* (an epoch's steps x their batch: within int64) */
    p.step = done / to_batch;
    p.micro = 0;
    if (again) *again = done - p.step * to_batch;
    return p;
}

void st_sampler_next(st_sampler *s, int64_t *idx, st_sampler_pos *at) {
    fill(s, s->o.rank, s->pos, idx);
    if (at) *at = s->pos;
    s->pos = st_sampler_advance(s, s->pos);
}

st_status st_sampler_indices(st_sampler *s, int rank, st_sampler_pos p, int64_t *idx) {
    if (rank < 0 || rank >= s->o.world || !pos_ok(s, p))
        return st_fail(ST_ERR_ARG,
                       "sampler: no micro-batch at rank %d, epoch %lld, step %lld, micro-step %lld", rank,
                       (long long)p.epoch, (long long)p.step, (long long)p.micro);
    fill(s, rank, p, idx);
    return ST_OK;
}
