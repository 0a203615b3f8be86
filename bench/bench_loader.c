/* Loader throughput: how many samples per second the data pipeline hands to
 * the step loop when the step loop does nothing else.
 *
 * It opens a dataset with the library's own readers (an IDX image/label pair
 * or a token file), builds the sampler and the loader the way a training run
 * does (src/train/train.c: one rank, shuffled, drop_last, prefetch 2 x workers,
 * images normalised with the training set's mean and std), takes K warm-up
 * micro-batches, then times N more (st_loader_next + st_loader_release) and
 * prints one JSON line:
 *
 *   {"samples_per_s", "batches", "workers", "batch", "seconds", "wait_s",
 *    "kind", "n", "block", "mean", "std", "checksum"}
 *
 * mean and std are the normalisation statistics (images), so a harness can
 * check them against its own; checksum is the sum of the targets of the timed
 * batches (the consumer reads one array per batch, as a step would). Usage:
 *
 *   bench_loader (--images F --labels F | --tokens F [--block T]) [--workers W]
 *                [--batch B] [--batches N] [--warmup K] [--prefetch P] [--seed S]
 *
 * Not here: device copies (a CPU run has none), augmentation, PyTorch
 * (bench/loader_vs_torch.py runs both sides). Exit: 0 ok, 1 failure, 2 usage. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data/dataset.h"
#include "data/loader.h"
#include "data/sampler.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct bench_opts {
    const char *images, *labels, *tokens;
    int64_t block, batch, batches, warmup;
    int workers, prefetch;
    uint64_t seed;
} bench_opts;

static int usage(const char *why) {
    if (why) fprintf(stderr, "bench_loader: %s\n", why);
    fprintf(stderr, "usage: bench_loader (--images F --labels F | --tokens F [--block T]) [--workers W] "
                    "[--batch B] [--batches N] [--warmup K] [--prefetch P] [--seed S]\n");
    return 2;
}

/* A whole positive (or, with zero_ok, non-negative) number, or -1. */
static int64_t parse_count(const char *v, int zero_ok) {
    char *end = NULL;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || x < (zero_ok ? 0 : 1)) return -1;
    return (int64_t)x;
}

static int parse(int argc, char **argv, bench_opts *o) {
    *o = (bench_opts){NULL, NULL, NULL, 256, 128, 200, 20, 1, -1, 1};
    for (int i = 1; i < argc; i += 2) {
        const char *k = argv[i];
        if (i + 1 >= argc) return usage("an option lacks its value");
        const char *v = argv[i + 1];
        int64_t x = 0;
        if (!strcmp(k, "--images"))
            o->images = v;
        else if (!strcmp(k, "--labels"))
            o->labels = v;
        else if (!strcmp(k, "--tokens"))
            o->tokens = v;
        else if (!strcmp(k, "--seed") && (x = parse_count(v, 1)) >= 0)
            o->seed = (uint64_t)x;
        else if (!strcmp(k, "--workers") && (x = parse_count(v, 1)) >= 0 && x <= 256)
            o->workers = (int)x;
        else if (!strcmp(k, "--prefetch") && (x = parse_count(v, 0)) > 0 && x <= 4096)
            o->prefetch = (int)x;
        else if (!strcmp(k, "--warmup") && (x = parse_count(v, 1)) >= 0)
            o->warmup = x;
        else if ((!strcmp(k, "--block") || !strcmp(k, "--batch") || !strcmp(k, "--batches")) &&
                 (x = parse_count(v, 0)) > 0)
            *(!strcmp(k, "--block") ? &o->block : !strcmp(k, "--batch") ? &o->batch : &o->batches) = x;
        else {
            fprintf(stderr, "bench_loader: %s %s: unknown option or bad value\n", k, v);
            return usage(NULL);
        }
    }
    if (!o->tokens == !o->images) return usage("give either --images and --labels, or --tokens");
    if (o->images && !o->labels) return usage("--images needs --labels");
    if (o->prefetch < 0) o->prefetch = o->workers > 0 ? 2 * o->workers : 1; /* as train.c sets it */
    return 0;
}

int main(int argc, char **argv) {
    bench_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc;
    st_dataset d = {0};
    st_sampler *smp = NULL;
    st_loader *ld = NULL;
    rc = 1;
    st_status s = o.tokens ? st_dataset_open_tokens(o.tokens, o.block, &d)
                           : st_dataset_open_images(o.images, o.labels, &d);
    if (s != ST_OK) goto fail;
    if (d.kind == ST_DATA_IMAGES) st_dataset_pixel_stats(&d, &d.mean, &d.std); /* as session.c does */

    st_sampler_opts so = ST_SAMPLER_OPTS_INIT;
    so.n = d.n;
    so.batch_size = o.batch;
    so.micro_batch = o.batch;
    so.seed = o.seed;
    so.name = o.tokens ? o.tokens : o.images;
    if ((s = st_sampler_init(&so, &smp)) != ST_OK) goto fail;
    st_loader_opts lo = ST_LOADER_OPTS_INIT;
    lo.num_workers = o.workers;
    lo.prefetch = o.prefetch;
    lo.aug_seed = o.seed;
    if ((s = st_loader_init(&d, smp, &lo, &ld)) != ST_OK) goto fail;

    /* The consumer reads the targets of each batch (a checksum), standing in
     * for a step that uses the batch; the inputs are left to the step. */
    const int64_t per_y = st_dataset_target_count(&d) * o.batch;
    int64_t checksum = 0;
    double t0 = 0, wait0 = 0;
    for (int64_t k = 0; k < o.warmup + o.batches; k++) {
        if (k == o.warmup) {
            t0 = now();
            wait0 = st_loader_wait_total(ld);
        }
        st_batch *b = NULL;
        if ((s = st_loader_next(ld, &b)) != ST_OK) goto fail;
        if (k >= o.warmup)
            for (int64_t j = 0; j < per_y; j++)
                checksum += b->y[j];
        st_loader_release(ld, b);
    }
    const double secs = now() - t0, wait_s = st_loader_wait_total(ld) - wait0;
    printf(
        "{\"samples_per_s\": %.1f, \"batches\": %lld, \"workers\": %d, \"batch\": %lld, \"seconds\": %.6f, "
        "\"wait_s\": %.6f, \"prefetch\": %d, \"warmup\": %lld, \"kind\": \"%s\", \"n\": %lld, "
        "\"block\": %lld, \"mean\": %.7f, \"std\": %.7f, \"checksum\": %lld}\n",
        secs > 0 ? (double)(o.batches * o.batch) / secs : 0.0, (long long)o.batches, o.workers,
        (long long)o.batch, secs, wait_s, o.prefetch, (long long)o.warmup,
        d.kind == ST_DATA_IMAGES ? "images" : "tokens", (long long)d.n, (long long)(o.tokens ? o.block : 0),
        (double)d.mean, (double)d.std, (long long)checksum);
    rc = 0;
fail:
    if (rc) fprintf(stderr, "bench_loader: %s\n", st_last_error());
    st_loader_free(ld);
    st_sampler_free(smp);
    st_dataset_free(&d);
    return rc;
}
