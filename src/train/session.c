/* Run set-up shared by training and evaluation: threads, data, the values
 * left `auto`, the model; the evaluation itself is evaluate.c. */
#include "session.h"
#include "core/ticker.h"

#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/atomic_file.h"
#include "core/blas.h"
#include "core/outq.h"
#include "core/pages.h"
#include "data/loader.h"
#include "data/tokens.h"
#include "dist/agree.h"
#include "dist/dist.h"
#include "dist/zero.h"
#include "eval_device.h"
#include "hw/planner.h"
#include "layers/layers.h"
#include "matmul_algos.h"
#ifdef ST_HAVE_CUDA
#include "cuda/cuda.h"
#endif

double st_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* How many of this node's ranks run on this rank's very CPUs (itself
 * included): an all-gather of every rank's host and affinity mask. */
static st_status ranks_sharing_cpus(st_session *s, int *out) {
    *out = 1;
    if (s->world <= 1) return ST_OK;
    st_hw_rank_cpus *all = malloc((size_t)s->world * sizeof *all), mine;
    if (!all) return st_fail(ST_ERR_NOMEM, "out of memory comparing the ranks' CPUs");
    st_hw_rank_cpus_get(st_comm_host(s->comm), &mine);
    st_comm_req *req = NULL;
    st_status st = st_comm_all_gather(s->comm, &mine, all, sizeof mine, ST_COMM_U8, "ranks' CPUs", &req);
    if (st == ST_OK) st = st_comm_wait(&req);
    if (st == ST_OK) *out = st_hw_cpus_sharing(all, s->world, s->rank);
    free(all);
    const int local = st_comm_local_size(s->comm);
    if (*out > local) *out = local; /* (two nodes of one host name) */
    return st;
}

static st_status setup_threads(st_session *s) {
    st_config *c = s->cfg;
    /* The all-gather runs on every rank, whatever its train.threads: a rank's
     * own key (st_agree_per_rank_key), auto on one rank beside a number on
     * another. */
    int sharing = 1;
    ST_TRY(ranks_sharing_cpus(s, &sharing));
    if (c->train.threads == ST_AUTO) {
        /* A rank's CPUs are its own where no other rank of the node has the
         * same mask (mpirun --bind-to core); ranks with the same mask share
         * its cores: unbound, bound a socket at a time (mpirun's default past
         * 2 ranks), or confined to a cgroup's cpuset together. */
        const int local = st_comm_local_size(s->comm), mine = omp_get_num_procs();
        const long online = sysconf(_SC_NPROCESSORS_ONLN);
        const bool bound = online > 0 && mine < online;
        int64_t t = mine / sharing;
        char swhy[96];
        snprintf(swhy, sizeof swhy, "the %s cores over the %d ranks of this node that share them",
                 bound ? "rank's" : "node's", sharing);
        const char *why = sharing > 1 ? swhy
                          : bound     ? "the cores this rank is bound to"
                                      : "the cores this process may use";
        /* A cgroup's CPU quota (a container's --cpus) is time the node's
         * ranks share, whatever cores their affinity shows. */
        st_hw_cpu_quota q;
        st_hw_cpu_quota_get(&q);
        char qwhy[96];
        if (q.cpus > 0 && st_hw_quota_threads(q.cpus / (local > 1 ? local : 1)) < t) {
            t = st_hw_quota_threads(q.cpus / (local > 1 ? local : 1));
            snprintf(qwhy, sizeof qwhy, "its cgroup's CPU quota, %.3g CPU%s%s (scaletrain plan --probe)",
                     q.cpus, q.cpus == 1 ? "" : "s", local > 1 ? ", over the node's ranks" : "");
            why = qwhy;
        }
        c->train.threads = t > 0 ? t : 1;
        st_config_mark_auto(c, "train.threads", why);
    }
    s->threads = (int)c->train.threads;
    omp_set_num_threads(s->threads);
    openblas_set_num_threads(s->threads);
    return ST_OK;
}

/* Under an address-space limit (ulimit -v) what a process maps counts, used
 * or not, and OpenBLAS maps its buffers (about 129 MiB each: one per thread
 * computing) at its first products, which then wait for ever where they do
 * not fit (its allocation retries; seen: 100% CPU in malloc, no message).
 * A limit that leaves no room for them is refused here, naming it; the
 * memory model keeps room for them out of what it plans with
 * (st_hw_mem_limit_get). */
static st_status address_space_check(const st_session *s) {
    int64_t lim, vm;
    if (!st_hw_address_space(&lim, &vm)) return ST_OK;
    /* a buffer for each computing thread and the main one, at the least */
    const int64_t mib = 1 << 20, need = st_hw_unused_mappings(s->threads, s->threads + 1);
    if (lim - vm < need)
        return st_fail(ST_ERR_NOMEM,
                       "this process's address-space limit (ulimit -v %lld) leaves %lld MiB to map, and "
                       "OpenBLAS and the %d compute thread%s map about %lld MiB before any model memory "
                       "(mapped, not used): raise ulimit -v (or lift it, and limit memory with a cgroup, "
                       "which counts what is used), or lower train.threads",
                       (long long)(lim / 1024), (long long)((lim - vm) / mib), s->threads,
                       s->threads == 1 ? "" : "s", (long long)(need / mib));
    return ST_OK;
}

bool st_session_uses_nccl(const st_session *s) {
    return s->dev && (s->world > 1 || strcmp(s->cfg->dist.comm, "nccl") == 0);
}

/* Whether something keeps this configuration off a CUDA device, and what
 * (into why). */
static bool device_blocked(const st_session *s, char *why, size_t n) {
    const st_config *c = s->cfg;
    if (s->world > 1 || strcmp(c->dist.comm, "nccl") == 0) { /* the gradients go through NCCL (dist.c) */
        char nw[512];
        if (!st_comm_nccl_usable(nw, sizeof nw)) {
            snprintf(why, n, "data-parallel training on GPUs needs the NCCL communicator: %s", nw);
            return true;
        }
    }
    return false;
}

/* train.device: this rank's GPU (by its rank on the node), GPU N (cuda:N,
 * the node's one rank) or the CPU. auto takes the GPU when there is one and
 * the configuration can run there, and says why not otherwise; cuda and
 * cuda:N insist, and an obstacle is an error. */
static st_status setup_device(st_session *s) {
    st_config *c = s->cfg;
    const bool auto_ = strcmp(c->train.device, "auto") == 0;
    char why[256], note[ST_CFG_NOTE];
    if (strcmp(c->train.device, "cpu") == 0) return ST_OK;
    const int want = strncmp(c->train.device, "cuda:", 5) == 0 ? atoi(c->train.device + 5) : -1;
    const int on_node = st_comm_local_size(s->comm);
    if (want >= 0 && on_node > 1)
        return st_fail(
            ST_ERR_CONFIG,
            "train.device %s names one GPU, and %d ranks run on this node (rank %d among them): use "
            "train.device: cuda, which gives each rank the GPU of its rank on the node, and "
            "CUDA_VISIBLE_DEVICES to choose which GPUs the node's ranks see",
            c->train.device, on_node, s->rank);
    const int n = st_device_cuda_count(why, sizeof why), local = st_comm_local_rank(s->comm);
    /* (more ranks on the node than GPUs seen: st_device_rank_ordinal, then agree_device) */
    const int ordinal = want >= 0 ? want : st_device_rank_ordinal(local, n);
    if (n > 0 && device_blocked(s, why, sizeof why)) {
        /* why says what */
    } else if (n > 0 && want >= n) {
        snprintf(why, sizeof why, "this node has %d CUDA device(s), cuda:0 to cuda:%d", n, n - 1);
    } else if (n > 0) {
        const st_status o = st_device_open_cuda(ordinal, &s->dev);
        if (o == ST_ERR_UNSUPPORTED) { /* a GPU the kernels cannot use: auto takes the CPU, saying why */
            snprintf(why, sizeof why, "%s", st_last_error());
            goto no_gpu;
        }
        ST_TRY(o);
        if (s->world == 1 && want < 0 && n > 1) /* (cuda:N chose its one GPU) */
            st_ticker_sayf("scaletrain: note: this %s on %s alone, one of this node's %d GPUs; `scaletrain "
                           "launch -n %d %s ...` %s all of them (a rank each)\n",
                           s->eval_only ? "evaluation runs" : "run trains", st_device_name(s->dev), n, n,
                           s->eval_only ? "eval" : "train", s->eval_only ? "shares it among" : "trains on");
        if (auto_) {
            snprintf(c->train.device, sizeof c->train.device, "cuda");
            snprintf(note, sizeof note, "%s", st_device_name(s->dev));
            st_config_mark_auto(c, "train.device", note);
        }
        return ST_OK;
    }
no_gpu:
    if (!auto_)
        return st_fail(ST_ERR_UNSUPPORTED, "train.device %s: %s; use train.device: cpu (or auto)",
                       c->train.device, why);
    snprintf(c->train.device, sizeof c->train.device, "cpu");
    snprintf(note, sizeof note, "%s", why);
    st_config_mark_auto(c, "train.device", note);
    /* (a GPU this run could not take: the reason whole, which the effective config's note cuts at
     * ST_CFG_NOTE, its fix with it; no GPU at all, a CPU machine's usual case, is left to the note) */
    if (s->rank == 0 && (n > 0 || !strncmp(why, "no CUDA device usable", 21)))
        st_ticker_sayf("scaletrain: note: train.device auto: this run trains on the CPU: %s\n", why);
    return ST_OK;
}

/* Several ranks: every one on a GPU of its own or none on a GPU (NCCL needs
 * them all, each on its own GPU, and the ranks of one run compute alike).
 * With auto, a rank without a usable GPU, a rank set to the CPU (set_cpu:
 * train.device cpu, a per-rank key), or two ranks on one GPU (more ranks
 * on a node than GPUs), send every rank to the CPU, saying why; where a
 * rank insists (train.device cuda), every rank fails, each saying why.
 * Every rank calls it. */
static st_status agree_device(st_session *s, bool auto_, bool set_cpu) {
    if (s->world == 1) return ST_OK;
    /* the fewest: 2 a GPU, 1 none usable, 0 train.device cpu (a per-rank key);
     * and -1 when a rank insists on its GPU (train.device cuda) */
    int64_t v[2] = {s->dev ? 2 : set_cpu ? 0 : 1, auto_ || set_cpu ? 0 : -1};
    ST_TRY(st_comm_all_reduce_sync(s->comm, v, v, 2, ST_COMM_I64, ST_COMM_MIN, "device agreement"));
    const int64_t all = v[0];
    const bool strict = v[1] < 0; /* (then every rank fails alike: none goes on alone) */
    char why[512] = "another rank has no usable CUDA device (its message says why)";
    char note[ST_CFG_NOTE] = "another rank has no usable CUDA device: every rank trains on the CPU";
    if (all == 0) {
        snprintf(why, sizeof why, "another rank is set to train on the CPU (train.device cpu)");
        snprintf(note, sizeof note,
                 "another rank is set to train on the CPU (train.device cpu): every rank does");
    }
    if (all == 2) { /* every rank on a GPU: each on its own? */
        /* host (its name and boot, as NCCL tells hosts apart: two machines
         * may share a name) and PCI address, compared; the UUID, said: MIG
         * slices of one GPU have a UUID each and its address, by which NCCL
         * takes a GPU (it refuses two ranks at one address of a host:
         * "Duplicate GPU") */
        char mine[ST_AGREE_DESC_MAX] = "", gpu_a[ST_AGREE_DESC_MAX], gpu_b[ST_AGREE_DESC_MAX];
        const char *pci = st_device_pci_bus_id(s->dev);
        if (pci[0])
            snprintf(mine, sizeof mine, "%s %s %08x|%s", st_comm_host(s->comm), pci,
                     (unsigned)st_hw_boot_hash(), st_device_uuid(s->dev));
        int a, b;
        ST_TRY(st_agree_gpus(s->comm, mine, &a, &b, gpu_a, gpu_b, sizeof gpu_a));
        if (a < 0) return ST_OK;
        char host[ST_AGREE_DESC_MAX] = "?", at[ST_AGREE_DESC_MAX] = "?";
        sscanf(gpu_a, "%159s %159s", host, at); /* (the host, the PCI address) */
        const char *ua = strchr(gpu_a, '|'), *ub = strchr(gpu_b, '|');
        ua = ua ? ua + 1 : "";
        ub = ub ? ub + 1 : "";
        if (ua[0] && ub[0] && strcmp(ua, ub) != 0) /* two MIG slices of one GPU */
            snprintf(
                why, sizeof why,
                "ranks %d and %d would train on two MIG slices (%s and %s) of the GPU at %s of host %s: NCCL "
                "connects one rank per physical GPU (it takes a GPU by its PCI address, which the slices "
                "share): run one rank on this GPU, or give each rank a GPU of its own (scaletrain launch -n "
                "auto, srun --gpus-per-task=1)",
                a, b, ua, ub, at, host);
        else
            snprintf(
                why, sizeof why,
                "ranks %d and %d would both train on the GPU at %s%s%s%s of host %s (a rank takes the GPU "
                "of its rank on its node among those it sees, modulo their number): run as many ranks on "
                "a node as it has GPUs (scaletrain launch -n auto), or give each rank its own (srun "
                "--gpus-per-task=1, or CUDA_VISIBLE_DEVICES set per rank)",
                a, b, at, ua[0] ? " (" : "", ua, ua[0] ? ")" : "", host);
        snprintf(note, sizeof note, "ranks %d and %d would share a GPU: every rank trains on the CPU", a, b);
        if (!strict && s->rank == 0) st_ticker_sayf("scaletrain: note: %s; training on the CPU\n", why);
    } else if (!strict && !s->dev) {
        return ST_OK;
    }
    if (strict) {
        s->agreed_error = true; /* every rank comes to this error */
        if (!auto_ && !set_cpu)
            return st_fail(ST_ERR_UNSUPPORTED, "train.device cuda: %s; every rank needs a GPU of its own",
                           why);
        return st_fail(ST_ERR_UNSUPPORTED,
                       "another rank is set to train.device cuda, and %s: every rank needs a GPU of its own "
                       "(or set train.device alike on every rank)",
                       set_cpu  ? "this rank is set to train on the CPU (train.device cpu)"
                       : s->dev ? why
                                : "this rank has no usable CUDA device (said above)");
    }
    st_device_free(s->dev);
    s->dev = NULL;
    snprintf(s->cfg->train.device, sizeof s->cfg->train.device, "cpu");
    st_config_mark_auto(s->cfg, "train.device", note);
    return ST_OK;
}

/* The files of a token stream, as (device, inode) pairs: n, or 0. */
static int file_ids(const st_tokens *t, uint64_t (*ids)[2], int cap) {
    int n = 0;
    struct stat b;
    for (int i = 0; t && i < st_tokens_shards(t) && n < cap; i++)
        if (stat(st_tokens_shard_path(t, i), &b) == 0)
            ids[n][0] = (uint64_t)b.st_dev, ids[n++][1] = (uint64_t)b.st_ino;
    return n;
}

/* data.val naming a file of data.train (token files compared shard by
 * shard): the evaluation would measure the training data as held-out data,
 * without a word. Rank 0 warns. */
static void same_data(const st_session *s) {
    const st_config *c = s->cfg;
    if (s->rank != 0 || !s->has_train || !s->has_val || c->data.val_split > 0) return;
    bool same = st_path_same(c->data.train, c->data.val);
    /* token files read as one stream (a pattern, a folder): any of theirs */
    const int cap = s->train.tokens && s->val.tokens && !same ? ST_TOKENS_MAX_SHARDS : 0;
    uint64_t(*a)[2] = cap ? malloc(2 * (size_t)cap * sizeof *a) : NULL, (*b)[2] = a ? a + cap : NULL;
    const int nt = a ? file_ids(s->train.tokens, a, cap) : 0, nv = a ? file_ids(s->val.tokens, b, cap) : 0;
    for (int i = 0; i < nt && !same && (int64_t)nt * nv <= 100000000; i++) /* (a bound: a moment at most) */
        for (int j = 0; j < nv && !same; j++)
            same = a[i][0] == b[j][0] && a[i][1] == b[j][1];
    free(a);
    if (same)
        st_ticker_sayf(
            "scaletrain: warning: data.val (%s) is (or holds) a file of data.train: the evaluation "
            "measures the data the model trains on, not held-out data; set data.val to other data "
            "(or \"\": no evaluation)\n",
            c->data.val);
}

/* A stream of shards read in name order where the names' numbers, not
 * zero-padded, put them out of number order (x-10 before x-2): said, as
 * the stream's order is the data's (data.val_split holds out its end).
 * Rank 0's. */
static void shard_order(const st_session *s, const st_dataset *d, const char *key, const char *spec) {
    if (s->rank != 0 || !d->tokens) return;
    for (int k = 1; k < st_tokens_shards(d->tokens); k++) {
        const char *a = st_tokens_shard_path(d->tokens, k - 1), *b = st_tokens_shard_path(d->tokens, k);
        if (strverscmp(a, b) > 0) {
            st_ticker_sayf(
                "scaletrain: warning: %s %s: its files are read in name order, which puts %s before "
                "%s; where their numbers are the order, zero-pad them (x-0002) to read them so\n",
                key, spec, a, b);
            return;
        }
    }
}

/* A stream that reads X.tokens and shards named from it (X-000000.tokens,
 * ...): one text tokenized whole and in shards, read twice (and a split's
 * held-out end trained on in the other copy). Where the shards hold as
 * many tokens as the file, refused by every rank; else warned by rank 0. */
static st_status read_twice(const st_session *s, const st_dataset *d, const char *key, const char *spec) {
    st_tokens_twice tw;
    if (!d->tokens || !st_tokens_read_twice(d->tokens, &tw)) return ST_OK;
    const char *file = st_tokens_shard_path(d->tokens, tw.file);
    const int stem = (int)strlen(file) - 7; /* (less ".tokens") */
    char what[3 * 4096];
    if (st_tokens_twice_what(d->tokens, &tw, what, sizeof what))
        return st_fail(ST_ERR_ARG,
                       "%s %s: reads %s: one text tokenized whole and in shards, which would be trained on "
                       "twice; move one of them out of the folder, or name one (%s: %s, or '%.*s-*.tokens')",
                       key, spec, what, key, file, stem, file);
    if (s->rank == 0)
        st_ticker_sayf(
            "scaletrain: warning: %s %s: reads %s; if one text was tokenized twice, it is read twice: "
            "name the files to read (%s: %s, or '%.*s-*.tokens')\n",
            key, spec, what, key, file, stem, file);
    return ST_OK;
}

static st_status open_data(st_session *s, bool eval_only) {
    st_config *c = s->cfg;
    const bool tokens = strcmp(c->data.type, "tokens") == 0, split = c->data.val_split > 0;
    if (split) { /* the validation data is held out of data.train (data.val at its default, or "") */
        char why[128];
        snprintf(why, sizeof why, "data.val_split %g holds it out of data.train", c->data.val_split);
        c->data.val[0] = c->data.val_labels[0] = '\0';
        st_config_mark_auto(c, "data.val", why);
        st_config_mark_auto(c, "data.val_labels", why);
    }
    /* Before any file is read: an evaluation of tokens opens no training set,
     * and the model's checks below would otherwise see no data at all. */
    if (eval_only && !split) ST_TRY(st_config_validate_eval(c));
    if (tokens) {
        if (!eval_only || split) {
            ST_TRY(st_data_key(st_dataset_open_tokens(c->data.train, c->model.block_size, &s->train),
                               c->data.train, "data.train"));
            s->has_train = true;
            shard_order(s, &s->train, "data.train", c->data.train);
            ST_TRY(read_twice(s, &s->train, "data.train", c->data.train));
        }
        if (split) {
            ST_TRY(st_dataset_split(&s->train, c->data.val_split, (uint64_t)c->data.val_split_seed,
                                    "data.val_split", &s->val));
            s->has_val = true;
        }
        if (c->data.val[0]) {
            ST_TRY(st_data_key(st_dataset_open_tokens(c->data.val, c->model.block_size, &s->val), c->data.val,
                               "data.val"));
            s->has_val = true;
            shard_order(s, &s->val, "data.val", c->data.val);
            ST_TRY(read_twice(s, &s->val, "data.val", c->data.val));
        }
        same_data(s);
        return ST_OK;
    }
    /* Images are normalised with the training set's statistics, so evaluation
     * reads the training set's stats too (cheap next to a run). */
    /* labelled images or features, IDX or NPY (model.num_classes auto, -1: the labels' own range) */
    ST_TRY(st_dataset_open_pair(c->data.type, c->data.train, c->data.train_labels, c->model.num_classes,
                                "data.train", &s->train));
    s->has_train = true;
    if (split) {
        ST_TRY(st_dataset_split(&s->train, c->data.val_split, (uint64_t)c->data.val_split_seed,
                                "data.val_split", &s->val));
        s->has_val = true;
    }
    st_dataset_pixel_stats(&s->train, &s->train.mean, &s->train.std);
    if (split) s->val.mean = s->train.mean, s->val.std = s->train.std;
    /* NumPy arrays from PyTorch are (n, c, h, w): read channels last, they
     * train on images c pixels high, without a word. Told by a height of at
     * most 4 (RGB's 3, RGBA's 4), or by square images read as a width equal
     * to the channels (13 bands of 16x16: 13 high, 16 wide, 16 channels) */
    const st_dataset *t = &s->train;
    if (s->rank == 0 && strcmp(c->data.type, "npy") == 0 && !t->flat && t->c > 4 &&
        (t->h <= 4 || (t->w == t->c && t->h < t->w)))
        st_ticker_sayf(
            "scaletrain: warning: data.train %s holds %lld images %lldx%lldx%lld read as (n, height, "
            "width, channels), channels last: %lld pixels high, %lld wide, with %lld channels. If the "
            "array is (n, channels, height, width), PyTorch's layout, save it channels last: "
            "numpy.save(path, x.transpose(0, 2, 3, 1))\n",
            c->data.train, (long long)t->n, (long long)t->h, (long long)t->w, (long long)t->c,
            (long long)t->h, (long long)t->w, (long long)t->c);
    if (c->data.val[0]) {
        ST_TRY(st_dataset_open_pair(c->data.type, c->data.val, c->data.val_labels, c->model.num_classes,
                                    "data.val", &s->val));
        s->has_val = true;
        s->val.mean = s->train.mean;
        s->val.std = s->train.std;
        if (s->val.h != s->train.h || s->val.w != s->train.w || s->val.c != s->train.c)
            return st_fail(
                ST_ERR_FORMAT,
                "data.val (%s) holds %lldx%lldx%lld images but data.train (%s) holds %lldx%lldx%lld: "
                "validation images must have the training images' height, width and channels",
                c->data.val, (long long)s->val.h, (long long)s->val.w, (long long)s->val.c, c->data.train,
                (long long)s->train.h, (long long)s->train.w, (long long)s->train.c);
        /* Bytes are read as value/255 and floats as they are, then both
         * normalised with the training set's statistics: mixed, one of the
         * two would be scaled wrong by 255 and evaluate to nonsense. */
        if (!s->val.pixels != !s->train.pixels)
            return st_fail(ST_ERR_FORMAT,
                           "%s holds %s but %s holds %s: bytes are read as value/255 and floats as they "
                           "are, so the two would be scaled differently; save both with the same dtype",
                           c->data.val, s->val.pixels ? "bytes (uint8)" : "floats", c->data.train,
                           s->train.pixels ? "bytes (uint8)" : "floats");
        same_data(s);
    }
    return ST_OK;
}

/* model.attention_kernel auto for a gpt on a GPU (st_model_attention_cudnn),
 * with this build's and node's cuDNN, saying why. */
static void pick_attention(st_session *s) {
    st_config *c = s->cfg;
    char why[ST_CFG_NOTE], lib[256] = "";
    st_device_props dp = {0};
    if (st_device_props_get(s->dev, &dp) != ST_OK) st_clear_error();
#ifdef ST_HAVE_CUDA
    /* (asked only where it would be taken: it loads the library) */
    if (strcmp(c->precision, "bf16") == 0 && dp.cc_major >= 9 && !st_cuda_cudnn_built(lib, sizeof lib))
        lib[0] = '\0';
#endif
    const bool cudnn = st_model_attention_cudnn(c->precision, dp.cc_major, dp.cc_minor, lib, why, sizeof why);
    snprintf(c->model.attention_kernel, sizeof c->model.attention_kernel, "%s", cudnn ? "cudnn" : "flash");
    st_config_mark_auto(c, "model.attention_kernel", why);
}

/* The planner's choices for the values left `auto` (micro-batch, precision,
 * strategy, activation checkpointing) on this machine: on the CPU, whose
 * memory available is shared by the node's ranks, or on this rank's GPU,
 * whose free memory (and what the run already holds there) is its own. An
 * explicit value that the memory model predicts will not fit is kept, with a
 * warning from rank 0. */
static st_status autoconfigure(st_session *s, const st_model_input *mi) {
    st_config *c = s->cfg;
    st_plan_input pi = {0};
    pi.cfg = c;
    pi.seq_len = mi->seq_len;
    const st_dataset *d = s->has_train ? &s->train : &s->val;
    pi.sample_in_bytes = 4 * st_dataset_input_count(d);
    pi.sample_out_bytes = 4 * st_dataset_target_count(d);
    pi.has_eval = s->has_val;
    pi.eval_only = s->eval_only; /* (the weights and a forward: no training's memory) */
    pi.eval_samples = s->has_val ? s->val.n : 0;
    pi.cores_per_rank = s->threads;
    /* the data is already loaded, so MemAvailable no longer counts it */
    st_hw_info h;
    ST_TRY(st_hw_probe_host(&h));
    st_hw_config hw = {.per_node = st_comm_local_size(s->comm), .nodes = 1};
    snprintf(hw.label, sizeof hw.label, "this machine");
    st_device_local(&h, 0, &hw.dev);
    st_device_mem dm; /* a GPU run plans against what its device can give it */
    if (s->dev && st_device_memory(s->dev, &dm) == ST_OK) {
        hw.dev.gpu = true;
        hw.dev.mem_bytes = dm.total - dm.used + dm.allocated;
        hw.dev.host_mem_bytes = h.mem_shared; /* (the offloaded state, pinned rings and copies live there) */
        snprintf(hw.dev.name, sizeof hw.dev.name, "%s", st_device_name(s->dev));
        st_device_props dp; /* (the probe above reads /proc only) */
        if (st_device_props_get(s->dev, &dp) == ST_OK) {
            hw.dev.cc_major = dp.cc_major;
            hw.dev.cc_minor = dp.cc_minor;
        }
        st_clear_error();
    }
    if (hw.per_node < 1) hw.per_node = 1;
    hw.nodes = (s->world + hw.per_node - 1) / hw.per_node;
    hw.ranks = s->world; /* (nodes may hold different numbers of ranks: srun -N2 -n3) */
    /* (also a GPU run's: its host memory holds the offloaded state, the pinned buffers) */
    if (!st_hw_mem_note(&h, s->mem_note, sizeof s->mem_note)) s->mem_note[0] = '\0';
    ST_TRY(st_model_create_layout(c, mi, &pi.model));
    st_plan *p = malloc(sizeof *p);
    st_status st = p ? st_plan_make(&pi, &hw, p) : st_fail(ST_ERR_NOMEM, "out of memory planning the run");
    if (st != ST_OK) {
        st_model_free(pi.model);
        free(p);
        return st;
    }
    /* Ranks read the memory available at slightly different moments: they
     * agree on the smallest micro-batch (a divisor of the per-rank batch
     * whenever each one is), the most sharded strategy, the most activation
     * checkpointing and offload when any rank needs them, and no plan when
     * any rank has none. Every rank joins, with or without a plan of its own.
     * Each then judges the agreed plan against its own memory (st_plan_refit:
     * another rank's sharding or offload may make it fit where its own plan
     * did not). Rank 0 says the warning; another rank says its own only where
     * it does not fit and rank 0's does (this rank's memory is the short one):
     * a second all-reduce tells them. */
    /* (a value given is the same on every rank, as is what follows from it:
     * the minimum leaves it as it is) */
    bool rank0_short = false; /* rank 0's plan does not fit (it says so) */
    if (s->world > 1) {
        const int64_t zero = strcmp(p->strategy, "zero2") == 0 ? 2 : strcmp(p->strategy, "zero1") == 0 ? 1 : 0;
        int64_t v[5] = {p->ok ? p->micro : INT64_MAX, -zero, -(int64_t)p->checkpointing, -(int64_t)p->offload,
                        p->ok ? 0 : -1}; /* (min: any rank's need) */
        st = st_comm_all_reduce_sync(s->comm, v, v, 5, ST_COMM_I64, ST_COMM_MIN, "planner agreement");
        /* (no plan: a batch the ranks do not split, which st_config_validate_world
         * refused before; the run would keep its values on every rank) */
        if (st == ST_OK && v[4] < 0) p->ok = false;
        if (st == ST_OK && p->ok && v[0] != p->micro) {
            p->micro = v[0];
            p->accum = c->train.batch_size / (s->world * v[0]);
            snprintf(p->micro_why, sizeof p->micro_why, "the smallest any rank's memory allows");
        }
        if (st == ST_OK && p->ok && -v[1] != zero)
            snprintf(p->strategy, sizeof p->strategy, "zero%lld", (long long)-v[1]);
        if (st == ST_OK && p->ok && -v[2] != (int64_t)p->checkpointing) {
            p->checkpointing = (int)-v[2];
            snprintf(p->checkpointing_why, sizeof p->checkpointing_why, "%s: another rank's memory needs it",
                     st_ckpt_name(p->checkpointing));
        }
        if (st == ST_OK && p->ok && v[3] < 0 && !p->offload) {
            p->offload = true;
            snprintf(p->strategy_why, sizeof p->strategy_why,
                     "%s with offload: another rank's memory needs it", p->strategy);
        }
        if (st == ST_OK) { /* (every rank whose agreement did not fail joins the second) */
            const st_status rf = st_plan_refit(&pi, p);
            char why[1024] = "";
            if (rf != ST_OK) snprintf(why, sizeof why, "%s", st_last_error());
            int64_t short0 = rf == ST_OK && s->rank == 0 && p->ok && !p->fits ? -1 : 0;
            st = st_comm_all_reduce_sync(s->comm, &short0, &short0, 1, ST_COMM_I64, ST_COMM_MIN,
                                         "whether rank 0's plan fits");
            rank0_short = st == ST_OK && short0 < 0;
            if (rf != ST_OK) st = st_fail(rf, "%s", why);
        }
    }
    st_model_free(pi.model);
    if (st == ST_OK && p->ok) st_plan_apply(p, c);
    const bool say = st == ST_OK && p->ok && (s->rank == 0 || (!p->fits && !rank0_short));
    char who[112] = "";
    if (s->rank != 0) snprintf(who, sizeof who, "rank %d (host %s): ", s->rank, st_comm_host(s->comm));
    if (say && p->warning[0])
        st_ticker_sayf("scaletrain: warning: %s%s (memory model, docs/planner.md)%s%s\n", who, p->warning,
                       s->mem_note[0] ? "; memory: " : "", s->mem_note);
    if (say && p->fit_hint[0]) st_ticker_sayf("scaletrain: hint: %s%s\n", who, p->fit_hint);
    if (say && s->rank == 0 && p->micro_hint[0]) st_ticker_sayf("scaletrain: hint: %s\n", p->micro_hint);
    free(p);
    return st;
}

/* The model's input from the data, and the data against the model's
 * settings (the vocabulary, the classes, the attention's length): the part
 * of the plan that `scaletrain check` makes too (st_session_check_data). */
static st_status model_input(st_session *s, st_model_input *in) {
    st_config *c = s->cfg;
    char why[128];
    const st_dataset *d = s->has_train ? &s->train : &s->val;
    memset(in, 0, sizeof *in);
    /* An evaluation batch past the validation set evaluates the same (the
     * whole set, in one batch) with a graph, and memory, of the batch asked */
    if (s->has_val && c->train.eval_batch_size != ST_AUTO && c->train.eval_batch_size > s->val.n) {
        snprintf(why, sizeof why, "the whole validation set (train.eval_batch_size %lld asked for more)",
                 (long long)c->train.eval_batch_size);
        c->train.eval_batch_size = s->val.n;
        st_config_mark_auto(c, "train.eval_batch_size", why);
    }
    if (d->kind == ST_DATA_TOKENS) {
        if (strcmp(c->model.type, "gpt") != 0)
            return st_fail(ST_ERR_CONFIG, "data.type tokens needs model.type gpt (model.type is %s)",
                           c->model.type);
        const char *data = d == &s->train ? c->data.train : c->data.val; /* (an evaluation's: data.val) */
        if (c->model.vocab_size == ST_AUTO && d->vocab_size > INT32_MAX) /* (token ids are int32) */
            return st_fail(ST_ERR_FORMAT,
                           "%s says its vocabulary is %lld tokens, past the %d a model's embedding takes "
                           "(token ids are 32-bit): write it with its tokenizer's vocabulary size in the "
                           "header (docs/formats.md, \"Token files\")",
                           data, (long long)d->vocab_size, INT32_MAX);
        if (c->model.vocab_size == ST_AUTO) {
            c->model.vocab_size = d->vocab_size;
            snprintf(why, sizeof why, "the vocabulary of %s", data);
            st_config_mark_auto(c, "model.vocab_size", why);
        } else if (c->model.vocab_size < d->vocab_size) {
            char a[ST_CFG_STR + 4200];
            st_config_describe(c, "model.vocab_size", a, sizeof a);
            /* (auto before the data is read: the weights' own, their metadata's, which no setting changes) */
            if (st_config_source(c, "model.vocab_size") == ST_SRC_AUTO)
                return st_fail(
                    ST_ERR_CONFIG,
                    "%s is smaller than the vocabulary of %s (%lld): the weights have no embedding "
                    "row for its tokens from %lld on; give data tokenized with their vocabulary",
                    a, data, (long long)d->vocab_size, (long long)c->model.vocab_size);
            return st_fail(ST_ERR_CONFIG,
                           "%s is smaller than the vocabulary of %s (%lld): its tokens would index past the "
                           "embedding; set model.vocab_size to %lld or more, or auto (the data's)",
                           a, data, (long long)d->vocab_size, (long long)d->vocab_size);
        }
        /* The validation tokens index the same embedding: another vocabulary
         * is another tokenizer's (its loss would mean nothing, or its first
         * evaluation would fail after the whole run). */
        if (s->has_train && s->has_val && s->val.vocab_size != s->train.vocab_size)
            return st_fail(ST_ERR_CONFIG,
                           "data.val %s has vocab_size %lld but data.train %s has %lld: they were made by "
                           "different tokenizers; tokenize both the same way",
                           c->data.val, (long long)s->val.vocab_size, c->data.train,
                           (long long)s->train.vocab_size);
        in->vocab_size = c->model.vocab_size;
        in->seq_len = c->model.block_size;
    } else {
        if (strcmp(c->model.type, "gpt") == 0)
            return st_fail(ST_ERR_CONFIG, "model.type gpt needs data.type tokens");
        const bool val_more = s->has_val && s->has_train && s->val.num_classes > s->train.num_classes;
        const int64_t classes = val_more ? s->val.num_classes : s->train.num_classes;
        const char *key = val_more ? "data.val_labels" : "data.train_labels",
                   *file = val_more ? c->data.val_labels : c->data.train_labels;
        if (c->model.num_classes == ST_AUTO && classes < 2)
            return st_fail(ST_ERR_CONFIG,
                           "%s (%s) holds only label 0: a classifier needs at least 2 classes (check the "
                           "label file, or set model.num_classes)",
                           key, file);
        if (c->model.num_classes == ST_AUTO) {
            c->model.num_classes = classes;
            snprintf(why, sizeof why, "labels 0..%lld in the data", (long long)classes - 1);
            st_config_mark_auto(c, "model.num_classes", why);
            if (val_more && s->rank == 0) /* (a head for classes no training sample has) */
                st_ticker_sayf(
                    "scaletrain: warning: %s (%s) holds labels up to %lld, but data.train_labels (%s) "
                    "only up to %lld: classes %lld..%lld have no training sample, and "
                    "model.num_classes auto makes %lld outputs; check that the two label files "
                    "number the classes alike\n",
                    key, file, (long long)classes - 1, c->data.train_labels,
                    (long long)s->train.num_classes - 1, (long long)s->train.num_classes,
                    (long long)classes - 1, (long long)classes);
        } else if (c->model.num_classes < classes) {
            char nc[ST_CFG_STR + 4200];
            st_config_describe(c, "model.num_classes", nc, sizeof nc);
            /* (auto before the data is read: the weights' own, their metadata's, which no setting changes) */
            if (st_config_source(c, "model.num_classes") == ST_SRC_AUTO)
                return st_fail(ST_ERR_CONFIG,
                               "%s is too small: the labels of %s (%s) go up to %lld; the weights have %lld "
                               "outputs, so this is other data than they were trained on: give them data of "
                               "their classes (and inputs)",
                               nc, key, file, (long long)classes - 1, (long long)c->model.num_classes);
            return st_fail(
                ST_ERR_CONFIG,
                "%s is too small: the labels of %s (%s) go up to %lld; set model.num_classes to %lld "
                "or more (or auto)",
                nc, key, file, (long long)classes - 1, (long long)classes);
        }
        /* (the loader refuses it too, but only once the model is built:
         * here `check` and every rank's start see it) */
        if (d->flat && (c->data.augment_crop_pad > 0 || c->data.augment_flip)) {
            char a[ST_CFG_STR + 96], b[ST_CFG_STR + 96];
            return st_fail(ST_ERR_CONFIG,
                           "%s and %s are image augmentations, and %s %s holds flat (n, d) features; set them "
                           "to 0 and false, or give images: an (n, h, w) or (n, h, w, c) array (channels last)",
                           st_config_describe(c, "data.augment_crop_pad", a, sizeof a),
                           st_config_describe(c, "data.augment_flip", b, sizeof b),
                           d == &s->train ? "data.train" : "data.val", d == &s->train ? c->data.train : c->data.val);
        }
        if (d->flat && !strcmp(c->model.type, "cnn") && s->rank == 0 && !s->warned_flat_cnn) {
            s->warned_flat_cnn = true; /* (model_input runs again for the plan) */
            st_ticker_sayf("scaletrain: warning: model.type cnn on %s %s, flat (n, %lld) features: each sample is "
                           "a 1 x %lld image of one channel, convolved along its row alone; save (n, h, w) or "
                           "(n, h, w, c) arrays (channels last) for 2-D convolutions, or use model.type mlp\n",
                           d == &s->train ? "data.train" : "data.val", d == &s->train ? c->data.train : c->data.val,
                           (long long)d->w, (long long)d->w);
        }
        in->height = d->h;
        in->width = d->w;
        in->channels = d->c;
        in->num_classes = c->model.num_classes;
    }
    return ST_OK;
}

st_status st_session_check_data(const st_config *cfg) {
    st_config c = *cfg;
    st_session s;
    memset(&s, 0, sizeof s);
    s.cfg = &c;
    s.world = 1;
    st_model_input in;
    st_status st = open_data(&s, false);
    if (st == ST_OK) st = model_input(&s, &in);
    st_dataset_free(&s.train);
    st_dataset_free(&s.val);
    return st;
}

static st_status plan(st_session *s, st_model_input *in) {
    st_config *c = s->cfg;
    char why[128];
    ST_TRY(model_input(s, in));
    /* These two follow from settings every rank has agreed on (and, for the
     * micro-batch, one given, not chosen from this node's memory): every rank
     * fails the same way and returns, with no MPI_Abort (train.c). */
    char where[sizeof c->path + 8] = "";
    if (c->path[0]) snprintf(where, sizeof where, "%s: ", c->path);
    if (!s->eval_only) { /* (an evaluation alone does not split the batch) */
        const st_status v = st_config_validate_world(c, s->world);
        s->agreed_error = v != ST_OK;
        ST_TRY(v);
    }
    if (s->dev && strcmp(c->precision, "auto") == 0) { /* before the planner, which plans for the CPU */
        snprintf(c->precision, sizeof c->precision, "bf16");
        st_config_mark_auto(c, "precision", "bf16 on a CUDA device (compute capability 8.0 or later)");
    }
#ifdef ST_HAVE_CUDA
    /* model.attention_kernel may differ between ranks, and cuDNN is each
     * node's library: every rank on a GPU (agree_device: all or none) joins
     * the agreement, so that a refusal on some ranks is every rank's */
    if (s->dev) {
        st_status v = ST_OK;
        char no_cudnn[512];
        const bool cudnn = !strcmp(c->model.type, "gpt") && !strcmp(c->model.attention_kernel, "cudnn");
        if (cudnn && strcmp(c->precision, "bf16") != 0)
            v = st_fail(ST_ERR_CONFIG,
                        "%smodel.attention_kernel=cudnn needs precision bf16 (scaletrain runs cuDNN's fused "
                        "attention on bf16 tensors) and this run is %s: set precision: bf16, or "
                        "model.attention_kernel: flash",
                        where, c->precision);
        else if (cudnn && !st_cuda_cudnn_built(no_cudnn, sizeof no_cudnn))
            v = st_fail(ST_ERR_CONFIG,
                        "%smodel.attention_kernel=cudnn: %s; set model.attention_kernel: flash (scaletrain's "
                        "own kernels)",
                        where, no_cudnn);
        if (s->world > 1) v = st_agree_status(s->comm, v, "model.attention_kernel=cudnn");
        s->agreed_error = v != ST_OK && !st_comm_failed(s->comm);
        ST_TRY(v);
    }
#endif
    if (s->dev && strcmp(c->model.type, "gpt") == 0 && strcmp(c->model.attention_kernel, "auto") == 0)
        pick_attention(s); /* (before the planner, which counts cuDNN's workspace) */
    else if (!s->dev && strcmp(c->model.type, "gpt") == 0 && strcmp(c->model.attention_kernel, "auto") == 0)
        st_config_mark_auto(c, "model.attention_kernel", ST_ATTENTION_CPU_WHY);
    ST_TRY(autoconfigure(s, in));
    if (s->rank == 0 && !s->eval_only) { /* (precision resolved: fp16's keys are read or not) */
        char unused[4096];
        st_config_unused(c, s->world, unused, sizeof unused);
        if (unused[0]) st_ticker_sayf("%s", unused);
    }
    if (!s->eval_only) { /* the micro-batch the planner chose divides the batch: a check */
        const st_status v = st_config_validate_world(c, s->world);
        s->agreed_error = v != ST_OK && st_config_source(c, "train.micro_batch_size") != ST_SRC_AUTO;
        ST_TRY(v);
    }
    /* Goyal et al. 2017 (linear) or Krizhevsky 2014 (sqrt): the rate grows
     * with the global batch when each rank keeps its micro-batch. optim.lr
     * stays as given, so that the configuration printed and recorded runs
     * the same again (rescaled on that run's ranks). */
    c->optim.lr_run = c->optim.lr;
    if (strcmp(c->optim.lr_scaling, "none") != 0) {
        const bool lin = strcmp(c->optim.lr_scaling, "linear") == 0;
        const double f = lin ? (double)s->world : sqrt((double)s->world);
        c->optim.lr_run = c->optim.lr * f;
        snprintf(why, sizeof why,
                 lin ? "the run's lr is %g = optim.lr x %d rank%s"
                     : "the run's lr is %g = optim.lr x sqrt(%d rank%s)",
                 c->optim.lr_run, s->world, s->world == 1 ? "" : "s");
        st_config_annotate(c, "optim.lr_scaling", why);
    }
    const bool eval_auto = c->train.eval_batch_size == ST_AUTO;
    if (c->train.eval_batch_size == ST_AUTO && c->train.micro_batch_size >= 1) {
        c->train.eval_batch_size = c->train.micro_batch_size;
        st_config_mark_auto(c, "train.eval_batch_size", "the micro-batch size");
    } else if (c->train.eval_batch_size ==
               ST_AUTO) { /* an evaluation on ranks that do not divide the batch */
        c->train.eval_batch_size = (c->train.batch_size + s->world - 1) / s->world;
        st_config_mark_auto(c, "train.eval_batch_size", "train.batch_size over the ranks, rounded up");
    }
    /* train.eval_steps with eval_batch_size auto counts training batches,
     * train.batch_size samples each, evaluated a micro-batch at a time: the
     * same samples on any number of ranks and any micro-batch (it counted
     * each rank's micro-batches, which grew with the ranks where the
     * micro-batch was set). Made the total of eval batches here, so that the
     * effective configuration, whose eval_batch_size is now a number,
     * evaluates the same samples when run again (st_session_eval_count
     * takes eval_steps batches in all). (Where the eval batch does not
     * divide the batch, `eval` on ranks that do not split it: rounded up.) */
    const int64_t per_batch = (c->train.batch_size + c->train.eval_batch_size - 1) / c->train.eval_batch_size;
    if (eval_auto && c->train.eval_steps > 0 && per_batch > 1 &&
        c->train.eval_steps <= INT64_MAX / per_batch) {
        /* (its source stays the user's: the note says what became of it) */
        snprintf(why, sizeof why,
                 "%lld batches of train.batch_size %lld, as %lld of train.eval_batch_size %lld",
                 (long long)c->train.eval_steps, (long long)c->train.batch_size,
                 (long long)(c->train.eval_steps * per_batch), (long long)c->train.eval_batch_size);
        c->train.eval_steps *= per_batch;
        st_config_annotate(c, "train.eval_steps", why);
    }
    if (s->has_train && !s->eval_only) { /* (an evaluation trains nothing) */
        char held[96] = "";
        if (c->data.val_split > 0)
            snprintf(held, sizeof held, " after data.val_split %g held out %lld", c->data.val_split,
                     (long long)s->val.n);
        if (s->train.n < c->train.batch_size && c->data.drop_last) {
            /* (the batch that fits, split over the ranks: 5 samples on 2 ranks is 4, where "5 or less" was
             * then refused as not a multiple of 2) */
            const int64_t fits = s->train.n / s->world * s->world;
            char set[160];
            if (fits >= s->world && s->world > 1)
                snprintf(set, sizeof set,
                         "set train.batch_size to %lld or less (a multiple of the %d ranks), ",
                         (long long)fits, s->world);
            else if (fits >= 1)
                snprintf(set, sizeof set, "set train.batch_size to %lld or less, ", (long long)fits);
            else
                snprintf(set, sizeof set, "(fewer than the %d ranks: one sample each at least) ", s->world);
            return st_fail(
                ST_ERR_CONFIG,
                "%s has %lld samples%s%s, fewer than one batch (train.batch_size %lld): %strain on "
                "more data, or set data.drop_last: false (each step's batch then repeats samples to "
                "fill it)",
                c->data.train, (long long)s->train.n,
                s->train.kind == ST_DATA_TOKENS ? " of model.block_size tokens" : "", held,
                (long long)c->train.batch_size, set);
        }
        if (c->train.steps == ST_AUTO) {
            const int64_t B = c->train.batch_size,
                          per_epoch = st_steps_per_epoch(s->train.n, B, c->data.drop_last);
            c->train.steps = st_steps_of_epochs(c->train.epochs, s->train.n, B, c->data.drop_last);
            snprintf(why, sizeof why, "%g epoch(s) of %lld steps", c->train.epochs, (long long)per_epoch);
            st_config_mark_auto(c, "train.steps", why);
            if (c->optim.warmup_steps > c->train.steps) { /* (st_config_validate's check, now it can be made) */
                char a[ST_CFG_STR + 96], b[ST_CFG_STR + 96];
                return st_fail(ST_ERR_CONFIG,
                               "%s is longer than %s: the run would end before its learning rate peaks; "
                               "shorten the warmup or train longer (train.epochs or train.steps)",
                               st_config_describe(c, "optim.warmup_steps", a, sizeof a),
                               st_config_describe(c, "train.steps", b, sizeof b));
            }
        } else if (st_config_source(c, "train.epochs") != ST_SRC_DEFAULT && s->rank == 0 &&
                   /* (a run's config.yaml: the steps its epochs gave, written out with them) */
                   c->train.steps != st_steps_of_epochs(c->train.epochs, s->train.n, c->train.batch_size,
                                                        c->data.drop_last)) {
            char a[ST_CFG_STR + 96], b[ST_CFG_STR + 96];
            st_ticker_sayf(
                "scaletrain: warning: %s is not used: %s sets the run's length (train.epochs counts "
                "only with train.steps: auto)\n",
                st_config_describe(c, "train.epochs", a, sizeof a),
                st_config_describe(c, "train.steps", b, sizeof b));
        }
    }
    if (c->data.num_workers == ST_AUTO) {
        c->data.num_workers = st_loader_auto_workers(s->threads);
        st_config_mark_auto(c, "data.num_workers", "from the cores this rank has");
    }
    if (strcmp(c->train.activation_checkpointing, "auto") == 0) {
        snprintf(c->train.activation_checkpointing, sizeof c->train.activation_checkpointing, "off");
        st_config_mark_auto(c, "train.activation_checkpointing",
                            "off: recomputing costs a forward pass and nothing here asks for the memory");
    }
    if (strcmp(c->dist.strategy, "auto") == 0) { /* when the planner could not choose */
        snprintf(c->dist.strategy, sizeof c->dist.strategy, "ddp");
        st_config_mark_auto(c, "dist.strategy",
                            "ddp on the CPU: a rank holds the whole state; zero1/zero2 shard it");
    }
    if (strcmp(c->precision, "auto") == 0) {
        /* The CPU backend computes in fp32 either way: bf16 and fp16 only add
         * the GPU's rounding (to test its numerics), which costs time and
         * accuracy and saves no memory here (docs/precision.md). */
        snprintf(c->precision, sizeof c->precision, "fp32");
        st_config_mark_auto(c, "precision", "fp32 on the CPU: bf16/fp16 here only emulate a GPU's rounding");
    }
    return ST_OK;
}

/* A gpt's kernel choices left auto, as its training graph takes them,
 * printed with why: model.fused_head (the logits of a micro-batch against
 * the fused head's chunks: st_linear_ce_saves_memory), and on a GPU
 * model.attention_kernel. (The model keeps its own copy of the
 * configuration: its graphs decide as before.) */
static st_status resolve_kernels(st_session *s) {
    st_config *c = s->cfg;
    if (s->model->kind != ST_MODEL_GPT) return ST_OK;
    if (strcmp(c->model.fused_head, "auto") == 0) {
        st_model_graph mg;
        const int64_t micro = c->train.micro_batch_size > 0 ? c->train.micro_batch_size : c->train.batch_size;
        ST_TRY(s->dev ? st_model_graph_layout_device(s->model, micro, &mg)
                      : st_model_graph_layout(s->model, micro, &mg));
        const bool fused = mg.logits == NULL;
        st_model_graph_free(&mg);
        char why[ST_CFG_NOTE];
        st_model_fused_head_why(fused, micro, s->model->in.seq_len, c->model.vocab_size, why, sizeof why);
        snprintf(c->model.fused_head, sizeof c->model.fused_head, "%s", fused ? "on" : "off");
        st_config_mark_auto(c, "model.fused_head", why);
    }
    return ST_OK;
}

/* The gradient arena's hook (graph.h st_arena_hook): the communicator's
 * zero-copy arena, with room for the padding of dist/zero.c (the shard plan
 * of the arena), so that the arena stays in place. Under ddp only: ZeRO-2
 * releases gradient pages (madvise), which a shared mapping would not zero. */
static st_status grad_arena(void *ctx, size_t nbytes, void **out, size_t *cap_bytes) {
    st_session *s = ctx;
    st_shard sh;
    st_shard_plan(&sh, (int64_t)(nbytes / sizeof(float)), s->rank, s->world);
    size_t want = (size_t)sh.padded * sizeof(float);
    if (want < nbytes) want = nbytes;
    ST_TRY(st_comm_shared_arena(s->comm, want, out));
    *cap_bytes = *out ? want : 0;
    return ST_OK;
}

st_status st_session_open(st_session *s, st_config *cfg, const st_run_opts *opts, bool eval_only) {
    memset(s, 0, sizeof *s);
    s->out_lock_fd = -1;
    st_pages_own_mappings(); /* freed arenas leave nothing resident */
    s->cfg = cfg;
    s->stop = opts ? opts->stop : NULL;
    s->out = opts && opts->out ? opts->out : stdout;
    s->out_tty = isatty(fileno(s->out)) == 1;
    /* Standard output through a queue and a writer thread: an output that
     * takes no bytes (a job's output file on a hung network file system, a
     * pipe nobody reads, a paused terminal) or whose reader went away (EPIPE:
     * `| head`, a tee that died) holds or ends the run no longer; the run
     * trains on, and st_session_close says what was not written. */
    if (s->out == stdout) {
        fflush(stdout);
        s->outq = st_outq_start(STDOUT_FILENO, "standard output", "scaletrain: ", (size_t)64 << 20);
        st_outq_set_stop(s->outq, opts ? opts->stop : NULL); /* (a stopping run waits 2 s at most on it) */
        FILE *f = st_outq_file(s->outq);
        if (f) s->out = f;
    }
    st_comm_config cc = ST_COMM_CONFIG_INIT;
    cc.timeout_s = (double)cfg->dist.timeout_s;
    if (!cfg->dist.shm_allreduce) cc.shm_min_bytes = 0; /* MPI for every collective, whatever the environment */
    ST_TRY(st_comm_init(&cc, &s->comm));
    if (opts) st_comm_set_stop_flag(s->comm, opts->stop); /* (a stop that waits on a rank is said) */
    s->rank = st_comm_rank(s->comm);
    s->world = st_comm_size(s->comm);
    s->eval_bar = s->rank == 0 && !(opts && opts->quiet) &&
                  (!strcmp(cfg->log.progress, "on") || (!strcmp(cfg->log.progress, "auto") && s->out_tty));
    if (s->world > 1) { /* before anything else talks between ranks (dist/agree.h) */
        st_status st = st_dist_agree_config(s->comm, cfg);
        /* (every rank's failure, or the communicator's, which end_failed_ranks sees) */
        s->agreed_error = st != ST_OK;
        ST_TRY(st);
    }
    ST_TRY(setup_threads(s));
    ST_TRY(address_space_check(s));
    const bool dev_auto = strcmp(cfg->train.device, "auto") == 0, dev_cpu = strcmp(cfg->train.device, "cpu") == 0;
    /* A GPU that stopped answering before the run began (the driver's first
     * call never returns) is watched as its later waits are (st_device_watch,
     * below: train.device_timeout_s). */
    snprintf(s->who, sizeof s->who, "rank %d of %d (host %s, pid %d)", s->rank, s->world,
             st_comm_host(s->comm), (int)getpid());
    st_watch *open_watch =
        dev_cpu
            ? NULL
            : st_watch_one((double)cfg->train.device_timeout_s, s->who, "train.device_timeout_s",
                           ST_WATCH_GPU, "nothing was written", "finding and opening the GPU (train.device)");
    s->eval_only = eval_only; /* (setup_device's note and the device's memory advice speak of it) */
    const st_status sd = setup_device(s);
    st_watch_stop(open_watch);
    ST_TRY(sd);
    ST_TRY(agree_device(s, dev_auto, dev_cpu)); /* (every rank: train.device is per-rank) */
    if (s->dev) /* a wait for the GPU that never ends ends the process, saying so */
        ST_TRY(st_device_watch(s->dev, (double)cfg->train.device_timeout_s, s->who));
    if (s->dev && eval_only) /* (training's remedies are no evaluation's) */
        st_device_set_oom_advice(s->dev, "An evaluation holds the weights and one batch's forward: lower "
                                         "train.eval_batch_size (--set train.eval_batch_size=N), or free the "
                                         "GPU of other processes");
    if (!s->dev && strcmp(cfg->dist.comm, "nccl") == 0) {
        char d[ST_CFG_STR + 96], e[ST_CFG_STR + 96];
        /* (the ranks agreed on the device just now: none has one, each comes to this error and reports
         * it with the others, none aborting them) */
        s->agreed_error = s->world > 1;
        return st_fail(ST_ERR_CONFIG,
                       "%s needs a GPU, and this rank trains on the CPU (%s); set dist.comm: auto",
                       st_config_describe(cfg, "dist.comm", d, sizeof d),
                       st_config_describe(cfg, "train.device", e, sizeof e));
    }
    if (st_session_uses_nccl(s)) ST_TRY(st_comm_nccl_init(s->comm, s->dev, &cc, &s->dcomm));
    ST_TRY(open_data(s, eval_only));
    st_model_input in;
    ST_TRY(plan(s, &in));
    const bool tune = strcmp(cfg->model.matmul_tune, "on") == 0; /* (auto resolved by plan) */
    st_device_set_matmul_tune(s->dev, tune);
    /* the algorithms an earlier run in out_dir timed (a resumed run's: the same bits) */
    if (tune && !eval_only) ST_TRY(st_matmul_algos_read(s->dev, cfg->train.out_dir, s->rank, true));
    /* A CPU rank under MPI on one node: the gradients in the shared segment,
     * reduced between the ranks without copies (comm.h st_comm_shared_arena;
     * every rank takes the same decision: the device and the settings are
     * agreed, and the arena itself is agreed over MPI). */
    const st_arena_hook grad = {grad_arena, s};
    const bool zc = !s->dev && s->world > 1 && cfg->dist.shm_allreduce && strcmp(cfg->dist.strategy, "ddp") == 0;
    /* On a GPU the arenas laid out padded and sharded as training would pad
     * and shard them by copies (st_dist_layout). (An evaluation: no gradient
     * arena, half the parameters' memory.) */
    const st_params_layout lay = st_dist_layout(cfg, s->dev != NULL, s->world, s->rank);
    ST_TRY(eval_only ? st_model_create_inference(cfg, &in, s->dev, &s->model)
                     : st_model_create_hooked(cfg, &in, s->dev, zc ? &grad : NULL, &lay, &s->model));
    s->model->val_split = cfg->data.val_split;             /* (saved with the weights) */
    s->model->val_split_seed = cfg->data.val_split_seed;
    if (s->has_train && s->train.kind == ST_DATA_IMAGES) { /* (saved with the weights) */
        s->model->has_norm = true;
        s->model->norm_mean = s->train.mean;
        s->model->norm_std = s->train.std;
    }
    ST_TRY(resolve_kernels(s));
    if (s->has_val) {
        const st_status e =
            st_model_graph_build_forward(s->model, cfg->train.eval_batch_size, &s->eval_graph);
        if (e == ST_ERR_NOMEM) /* (the device's advice is a training run's: this graph is the evaluation's) */
            return st_fail_context(e, "the evaluation's graph at train.eval_batch_size %lld (lower it): ",
                                   (long long)cfg->train.eval_batch_size);
        ST_TRY(e);
    }
    if (cfg->data.timeout_s > 0) { /* the reads in this thread (a loader's own have its timed wait) */
        ST_TRY(st_watch_start(cfg->data.timeout_s, s->who, "data.timeout_s", ST_WATCH_STORAGE,
                              "--resume auto continues from the latest checkpoint", &s->read_watch));
    }
    return ST_OK;
}

void st_session_take_norm(st_session *s, const char *path, bool their_data) {
    st_model *m = s->model;
    const double split = s->cfg->data.val_split;
    /* A resumed run trains on: another split (or seed) than theirs mixes
     * the two sets, either way. An evaluation only evaluates: the held-out
     * part is the tail of a seeded permutation of data.train (of the
     * stream, for tokens), so a smaller one of the same seed lies within
     * theirs, and one of data.val (split 0) holds no sample of theirs:
     * nothing to say of those. */
    const double theirs = m->val_split_loaded;
    const bool seeds = theirs > 0 && s->has_train && s->train.kind == ST_DATA_IMAGES &&
                       m->val_split_seed_loaded >= 0 &&
                       m->val_split_seed_loaded != s->cfg->data.val_split_seed;
    if (!their_data || s->rank != 0) {
        /* (nothing to say: weights given to start from, or not rank 0) */
    } else if (!s->eval_only) { /* a resumed run */
        if (theirs >= 0 && theirs != split)
            st_ticker_sayf(
                "scaletrain: warning: the weights %s were trained with data.val_split %g, and this run "
                "has %g: %s; set data.val_split: %g to hold out what they held out\n",
                path, theirs, split,
                theirs > 0 && split > 0
                    ? "the two held-out sets differ, so this one holds samples they trained on, "
                      "or they held out samples this run trains on"
                : split > 0 ? "this run holds out samples they trained on"
                            : "this run trains on samples they held out",
                theirs);
        else if (split > 0 && seeds)
            st_ticker_sayf(
                "scaletrain: warning: the weights %s were trained with data.val_split_seed %lld, and this "
                "run has %lld: the two held-out subsets differ, so this one holds samples they trained on; "
                "set data.val_split_seed: %lld to hold out what they held out\n",
                path, (long long)m->val_split_seed_loaded, (long long)s->cfg->data.val_split_seed,
                (long long)m->val_split_seed_loaded);
    } else if (split > 0 && theirs == 0) { /* an evaluation */
        st_ticker_sayf(
            "scaletrain: warning: the weights %s were trained on all of data.train (data.val_split "
            "0), and this evaluation holds out %g of it: samples they trained on; evaluate held-out "
            "data (data.val, with data.val_split: 0)\n",
            path, split);
    } else if (split > 0 && theirs > 0 && (split > theirs || seeds)) {
        char a[48] = "", b[48] = "", seed[64] = ""; /* (the seeds, where they differ: a token stream's tail
                                                     * has none) */
        if (seeds) {
            snprintf(a, sizeof a, " (seed %lld)", (long long)m->val_split_seed_loaded);
            snprintf(b, sizeof b, " (seed %lld)", (long long)s->cfg->data.val_split_seed);
            snprintf(seed, sizeof seed, " and data.val_split_seed: %lld",
                     (long long)m->val_split_seed_loaded);
        }
        st_ticker_sayf("scaletrain: warning: the weights %s were trained with data.val_split %g%s, and this "
                       "evaluation holds out %g%s: %s, so it evaluates samples they trained on; set "
                       "data.val_split: %g%s to evaluate what they held out\n",
                       path, theirs, a, split, b, split > theirs ? "more than they did" : "another subset",
                       theirs, seed);
    }
    if (!m->norm_loaded || !s->has_train || s->train.kind != ST_DATA_IMAGES) return;
    const float mean = m->norm_mean, std = m->norm_std;
    /* (a relative 1e-5: the same data gives the same float sums; where their
     * statistics left out another held-out part of data.train, 2%: a tenth
     * held out moved Fashion-MNIST's by 0.1%, and other data, MNIST's, by 50%) */
    const bool same_split = theirs < 0 || (theirs == split && !seeds);
    const float tol = same_split ? 1e-5f : 2e-2f;
    const bool other =
        fabsf(s->train.mean - mean) > tol * fmaxf(fabsf(mean), std) || fabsf(s->train.std - std) > tol * std;
    if (other && s->rank == 0)
        st_ticker_sayf(
            "scaletrain: warning: data.train (%s) has mean %.6g and standard deviation %.6g, but the "
            "weights %s were trained on inputs normalised with mean %.6g and standard deviation "
            "%.6g, which they record: the run normalises with those, as the weights expect (other "
            "data than they were trained on, or data changed since)\n",
            s->cfg->data.train, (double)s->train.mean, (double)s->train.std, path, (double)mean, (double)std);
    s->train.mean = s->val.mean = mean;
    s->train.std = s->val.std = std;
    m->has_norm = true; /* (what its checkpoints and final weights record in turn) */
}

st_status st_session_close(st_session *s) {
    st_status ret = ST_OK;
    st_watch_stop(s->read_watch);
    st_watch_stop(s->store_watch);
    st_eval_device_free(s->eval_dev); /* before the device */
    st_model_graph_free(&s->eval_graph);
    st_model_free(s->model);
    st_model_free(s->sampler);
    st_comm_free(s->dcomm); /* NCCL: before its device and its host communicator */
    st_device_free(s->dev); /* after everything that lives there */
    if (!s->train_in_use) st_dataset_free(&s->train);
    st_dataset_free(&s->val);
    st_comm_free(s->comm);
    if (s->out_lock_fd >= 0) close(s->out_lock_fd); /* (the lock goes with it) */
    if (s->outq) { /* the end waits on a write of standard output as long as the store's */
        const st_config *c = s->cfg;
        const double limit = c->train.checkpoint_timeout_s > 0 ? (double)c->train.checkpoint_timeout_s
                                                               : (double)c->dist.timeout_s;
        st_outq_report r;
        const bool whole = st_outq_end(s->outq, limit, &r);
        if (!whole && r.oom && !r.stuck && !r.error) { /* not the reader's doing: the command failed */
            ret = st_fail(ST_ERR_NOMEM, "%s: out of memory: %ld line%s of standard output not written",
                          s->who, r.lost_lines, r.lost_lines == 1 ? "" : "s");
        } else if (!whole && s->json && r.error) { /* (--json: the result a script reads is what was lost) */
            ret = st_fail(
                ST_ERR_IO,
                "%s: the --json result was not written whole: %ld line%s of standard output not written "
                "(%s)%s",
                s->who, r.lost_lines, r.lost_lines == 1 ? "" : "s", r.why,
                s->eval_only ? "" : "; the run's checkpoints and final weights are whole");
        } else if (!whole) {
            st_ticker_sayf(
                "scaletrain: %s: %ld line%s of standard output not written (%s%s)\n", s->who, r.lost_lines,
                r.lost_lines == 1 ? "" : "s", r.why,
                !r.stuck    ? ""
                : r.stopped ? ": a hung file system, a paused terminal or a reader that stopped?"
                            : ": a hung file system, a paused terminal or a reader that stopped? "
                              "(train.checkpoint_timeout_s sets how long the run waits for it at its end)");
        }
    }
    memset(s, 0, sizeof *s);
    return ret;
}

/* This rank's outcome s made every rank's (st_agree_status; one rank:
 * its own), a failure then marked agreed: every rank returns one, and they
 * report it together (train.c end_failed_ranks), none aborting the others. */
st_status st_session_agree_outcome(st_session *ses, st_status s, const char *what) {
    if (ses->world < 2) return s;
    s = st_agree_status(ses->comm, s, what);
    if (s != ST_OK) ses->agreed_error = true;
    return s;
}
