/* Optimizer-state files: save by tensor or by shard, load any range (see
 * ckpt_optim.h). */
#include "ckpt_optim.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/safetensors.h"
#include "core/text.h"

#define PATH_CAP 4096

void st_ckpt_optim_name(int k, char *buf, size_t size) { snprintf(buf, size, "optim-rank%d.safetensors", k); }

static const char *kind_name(st_optim_kind k) { return k == ST_OPTIM_ADAMW ? "adamw" : "sgd"; }

st_status st_ckpt_optim_save_tensors(const st_optim *o, const st_params *p, const char *path) {
    if (o->lo != 0 || o->hi < p->count)
        return st_fail(ST_ERR_INTERNAL, "%s: the optimizer holds [%lld, %lld), not every parameter", path,
                       (long long)o->lo, (long long)o->hi);
    const int per = o->v ? 2 : 1;
    const int n = p->n_params * per;
    st_safetensors_tensor *t = calloc((size_t)(n ? n : 1), sizeof *t);
    char(*names)[ST_NAME_MAX + 4] = calloc((size_t)(n ? n : 1), sizeof *names);
    if (!t || !names) {
        free(t);
        free(names);
        return st_fail(ST_ERR_NOMEM, "out of memory saving %s", path);
    }
    int j = 0;
    for (int i = 0; i < p->n; i++) {
        const st_tensor *pt = p->t[i];
        if (pt->kind != ST_TENSOR_PARAM) continue;
        for (int k = 0; k < per && j < n; k++, j++) {
            snprintf(names[j], sizeof names[j], "%s.%s", k ? "v" : "m", pt->name);
            t[j].name = names[j];
            t[j].dtype = "F32";
            t[j].ndim = pt->ndim;
            t[j].shape = pt->shape;
            t[j].data = (k ? o->v : o->m) + pt->offset;
        }
    }
    char steps[32];
    snprintf(steps, sizeof steps, "%lld", (long long)o->t);
    const char *meta[] = {"format", "scaletrain-optim", "optimizer", kind_name(o->kind), "t", steps};
    st_status s =
        j == n ? st_safetensors_write(path, t, n, meta, 3)
               : st_fail(ST_ERR_INTERNAL, "%s: %d parameters, expected %d", path, j / per, p->n_params);
    free(t);
    free(names);
    return s;
}

st_status st_ckpt_optim_save_shard(const st_optim *o, const char *path) {
    const int64_t shape[1] = {o->count};
    st_safetensors_tensor t[2] = {{"m", "F32", 1, shape, o->m}, {"v", "F32", 1, shape, o->v}};
    char steps[32], lo[32], hi[32];
    snprintf(steps, sizeof steps, "%lld", (long long)o->t);
    snprintf(lo, sizeof lo, "%lld", (long long)o->lo);
    snprintf(hi, sizeof hi, "%lld", (long long)o->hi);
    const char *meta[] = {"format", "scaletrain-optim-shard", "optimizer", kind_name(o->kind), "t", steps,
                          "lo",     lo,                       "hi",        hi};
    return st_safetensors_write(path, t, o->v ? 2 : 1, meta, 5);
}

/* Open path and check the optimizer kind; *t from the metadata: a whole
 * number of updates, at most the checkpoint's steps (a skipped fp16 step
 * counts a step and no update). A t read as 0 restarted AdamW's bias
 * correction without a word. */
static st_status open_checked(const char *path, const st_optim *o, int64_t steps, st_safetensors **f,
                              int64_t *t) {
    ST_TRY(st_safetensors_open(path, f));
    const char *kind = st_safetensors_metadata(*f, "optimizer"), *ts = st_safetensors_metadata(*f, "t");
    st_status s = ST_OK;
    if (!kind || !ts)
        s = st_fail(ST_ERR_FORMAT, "%s: no optimizer or t in the metadata", path);
    else if (strcmp(kind, kind_name(o->kind)) != 0)
        s = st_fail(ST_ERR_CONFIG, "%s: holds %s state but optim.type is %s; resume with the same optim.type",
                    path, kind, kind_name(o->kind));
    char *end = NULL;
    errno = 0;
    const long long v = s == ST_OK ? strtoll(ts, &end, 10) : 0;
    if (s == ST_OK && (end == ts || *end || errno || v < 0 || v > steps))
        s = st_fail(ST_ERR_FORMAT,
                    "%s: the optimizer's update count t \"%.40s\" is not a whole number from 0 to the "
                    "checkpoint's %lld steps (damaged checkpoint)",
                    path, ts, (long long)steps);
    if (s != ST_OK) {
        st_safetensors_close(*f);
        *f = NULL;
        return s;
    }
    *t = v;
    return ST_OK;
}

/* Optimizer state that is not finite, or a negative second moment (a
 * damaged or hand-made file): refused, naming the tensor and element;
 * loaded, it showed up only as a NaN loss blamed on the learning rate. */
static st_status state_values(const float *x, int64_t n, bool second, const char *path, const char *name,
                              int64_t first) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]) || (second && x[i] < 0))
            return st_fail(ST_ERR_FORMAT,
                           "%s: %s element %lld is %g: optimizer state %s (damaged checkpoint); resume from "
                           "another checkpoint",
                           path, name, (long long)(first + i), (double)x[i],
                           isfinite(x[i]) ? "holds a negative second moment" : "that is not finite");
    return ST_OK;
}

/* Read tensor `name` of n elements, whose first element is arena element
 * `base`, and copy its overlap with o's range into state arena dst (its
 * values checked: state_values; second: v). */
static st_status read_overlap(const st_safetensors *f, const char *name, int64_t base, int64_t n,
                              const st_optim *o, bool second, float *dst, float *tmp) {
    const int64_t a = base > o->lo ? base : o->lo, e = base + n < o->hi ? base + n : o->hi;
    if (a >= e) return ST_OK;
    ST_TRY(st_safetensors_read_f32(f, name, tmp, n));
    ST_TRY(state_values(tmp + (a - base), e - a, second, st_safetensors_path(f), name, a - base));
    memcpy(dst + (a - o->lo), tmp + (a - base), (size_t)(e - a) * sizeof(float));
    return ST_OK;
}

/* The state of parameter pt in f under name: the parameter's shape (the
 * element count alone let a transposed [16, 10] load as [10, 16]). */
static st_status same_shape(const st_safetensors *f, const char *name, const st_tensor *pt) {
    const st_safetensors_entry *e = st_safetensors_find(f, name);
    if (!e) return ST_OK; /* (the read says it is missing) */
    bool same = e->ndim == pt->ndim;
    for (int d = 0; same && d < e->ndim; d++)
        same = e->shape[d] == pt->shape[d];
    if (same) return ST_OK;
    char a[128] = "", b[128] = "";
    size_t at = 0, bt = 0;
    for (int d = 0; d < e->ndim; d++)
        st_appendf(a, sizeof a, &at, "%s%lld", d ? ", " : "", (long long)e->shape[d]);
    for (int d = 0; d < pt->ndim; d++)
        st_appendf(b, sizeof b, &bt, "%s%lld", d ? ", " : "", (long long)pt->shape[d]);
    return st_fail(ST_ERR_FORMAT,
                   "%s: %s has shape [%s], the parameter %s [%s]: this optimizer state is not this model's "
                   "(damaged checkpoint, or written for another model)",
                   st_safetensors_path(f), name, a, pt->name, b);
}

static st_status load_tensors(const char *path, int64_t steps, const st_params *p, st_optim *o) {
    st_safetensors *f = NULL;
    int64_t t;
    ST_TRY(open_checked(path, o, steps, &f, &t));
    int64_t most = 1;
    for (int i = 0; i < p->n; i++)
        if (p->t[i]->kind == ST_TENSOR_PARAM && p->t[i]->count > most) most = p->t[i]->count;
    float *tmp = malloc((size_t)most * sizeof *tmp);
    st_status s = tmp ? ST_OK : st_fail(ST_ERR_NOMEM, "out of memory reading %s", path);
    char name[ST_NAME_MAX + 4];
    for (int i = 0; i < p->n && s == ST_OK; i++) {
        const st_tensor *pt = p->t[i];
        if (pt->kind != ST_TENSOR_PARAM) continue;
        snprintf(name, sizeof name, "m.%s", pt->name);
        s = same_shape(f, name, pt);
        if (s == ST_OK) s = read_overlap(f, name, pt->offset, pt->count, o, false, o->m, tmp);
        if (s == ST_OK && o->v) {
            snprintf(name, sizeof name, "v.%s", pt->name);
            s = same_shape(f, name, pt);
            if (s == ST_OK) s = read_overlap(f, name, pt->offset, pt->count, o, true, o->v, tmp);
        }
    }
    if (s != ST_OK && !strstr(st_last_error(), path)) /* (the safetensors reader names it already) */
        st_fail_context(s, "%s: ", path);
    if (s == ST_OK) o->t = t;
    free(tmp);
    st_safetensors_close(f);
    return s;
}

static st_status load_shards(const char *dir, const st_ckpt_state *st, st_optim *o) {
    const int64_t S = st->optim_shard, P = st->optim_count;
    float *tmp = malloc((size_t)(S > 0 ? S : 1) * sizeof *tmp);
    if (!tmp) return st_fail(ST_ERR_NOMEM, "out of memory reading optimizer shards");
    st_status s = ST_OK;
    char path[PATH_CAP], name[64];
    int64_t t_all = -1;
    for (int k = 0; k < st->optim_world && s == ST_OK; k++) {
        const int64_t lo = k * S < P ? k * S : P, hi = lo + S < P ? lo + S : P;
        if (hi <= o->lo || lo >= o->hi || hi <= lo) continue; /* nothing of this run's range */
        st_ckpt_optim_name(k, name, sizeof name);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        st_safetensors *f = NULL;
        int64_t t;
        if ((s = open_checked(path, o, st->step, &f, &t)) != ST_OK) break;
        const char *mlo = st_safetensors_metadata(f, "lo"), *mhi = st_safetensors_metadata(f, "hi");
        if (!mlo || !mhi || strtoll(mlo, NULL, 10) != lo || strtoll(mhi, NULL, 10) != hi)
            s = st_fail(ST_ERR_FORMAT, "%s: holds elements [%s, %s), state.json's layout says [%lld, %lld)", path,
                        mlo ? mlo : "?", mhi ? mhi : "?", (long long)lo, (long long)hi);
        else if (t_all >= 0 && t != t_all)
            s = st_fail(ST_ERR_FORMAT, "%s: step count t = %lld, other shards have %lld", path, (long long)t,
                        (long long)t_all);
        if (s == ST_OK) s = read_overlap(f, "m", lo, hi - lo, o, false, o->m, tmp);
        if (s == ST_OK && o->v) s = read_overlap(f, "v", lo, hi - lo, o, true, o->v, tmp);
        if (s != ST_OK && !strstr(st_last_error(), path)) st_fail_context(s, "%s: ", path);
        t_all = t;
        st_safetensors_close(f);
    }
    free(tmp);
    if (s == ST_OK && t_all >= 0) o->t = t_all;
    return s;
}

st_status st_ckpt_optim_load(const char *dir, const st_ckpt_state *state, const st_params *p, st_optim *o) {
    if (state->optim_sharded) {
        if (state->optim_count != p->count)
            return st_fail(ST_ERR_FORMAT, "%s: the optimizer shards hold %lld parameters, this model has %lld", dir,
                           (long long)state->optim_count, (long long)p->count);
        st_status s = load_shards(dir, state, o);
        /* A range that no shard covered (an empty one) keeps t from the file of rank 0. */
        if (s == ST_OK && o->count == 0) {
            char path[PATH_CAP], name[64];
            st_ckpt_optim_name(0, name, sizeof name);
            snprintf(path, sizeof path, "%s/%s", dir, name);
            st_safetensors *f = NULL;
            int64_t t;
            ST_TRY(open_checked(path, o, state->step, &f, &t));
            st_safetensors_close(f);
            o->t = t;
        }
        return s;
    }
    char path[PATH_CAP], name[64];
    st_ckpt_optim_name(0, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return load_tensors(path, state->step, p, o);
}
