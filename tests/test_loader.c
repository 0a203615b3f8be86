/* The threaded loader over synthetic IDX and token files written to /tmp:
 * 0, 1 and 4 workers give the same bits in the same order, equal to
 * st_dataset_batch on the sampler's indices, over more than an epoch; no
 * batch is lost or repeated; crop and flip are the same whatever the worker
 * count; stopping mid-epoch (workers busy, batches held) frees everything
 * (run under AddressSanitizer); a resumed loader continues exactly; a worker's
 * error reaches the consumer with its message; the wait counter is
 * non-negative and grows; st_loader_try_next never waits and keeps the order. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "data/idx.h"
#include "data/loader.h"
#include "data/tokens.h"

static char dir[64];

/* One loader run: `count` batches, copied out in order (x or xi, then y). */
typedef struct run {
    uint8_t *bytes;
    size_t per; /* bytes per batch */
    int64_t count;
} run;

static st_sampler *make_sampler(const st_dataset *d, int64_t batch, int64_t mb, bool drop_last) {
    st_sampler_opts o = ST_SAMPLER_OPTS_INIT;
    o.n = d->n;
    o.batch_size = batch;
    o.micro_batch = mb;
    o.seed = 42;
    o.drop_last = drop_last;
    st_sampler *s = NULL;
    CHECK_OK(st_sampler_init(&o, &s));
    return s;
}

static run load(const st_dataset *d, st_sampler *s, const st_loader_opts *o, int64_t count) {
    run r = {0};
    st_loader *l = NULL;
    CHECK_OK(st_loader_init(d, s, o, &l));
    if (!l) return r;
    double total = 0;
    int order_bad = 0, wait_bad = 0;
    for (int64_t k = 0; k < count; k++) {
        st_batch *b = NULL;
        CHECK_OK(st_loader_next(l, &b));
        if (!b) break;
        if (!r.bytes) {
            r.per = b->x_nbytes + b->y_nbytes + (size_t)b->size * sizeof(int64_t);
            r.bytes = malloc(r.per * (size_t)count);
        }
        uint8_t *dst = r.bytes + r.per * (size_t)k;
        memcpy(dst, b->x ? (void *)b->x : (void *)b->xi, b->x_nbytes);
        memcpy(dst + b->x_nbytes, b->y, b->y_nbytes);
        memcpy(dst + b->x_nbytes + b->y_nbytes, b->idx, (size_t)b->size * sizeof(int64_t));
        order_bad += b->seq != k;
        double t = st_loader_wait_total(l);
        wait_bad += !(b->wait_s >= 0) || !(t >= total);
        total = t;
        r.count++;
        st_loader_release(l, b);
    }
    CHECK(order_bad == 0, "%d batches out of order", order_bad);
    CHECK(wait_bad == 0, "the wait counter went negative or backwards %d times", wait_bad);
    CHECK(!(o && o->num_workers == 0) || st_loader_wait_total(l) > 0, "0 workers: no time spent in next");
    st_loader_free(l);
    return r;
}

/* Reference: the sampler's sequence assembled by st_dataset_batch. */
static run reference(const st_dataset *d, int64_t batch, int64_t mb, bool drop_last, int64_t count) {
    st_sampler *s = make_sampler(d, batch, mb, drop_last);
    const int64_t in = st_dataset_input_count(d), tg = st_dataset_target_count(d);
    const size_t xb = (size_t)(mb * in) * 4, yb = (size_t)(mb * tg) * 4, ib = (size_t)mb * 8;
    run r = {malloc((xb + yb + ib) * (size_t)count), xb + yb + ib, count};
    float *x = malloc(xb);
    int32_t *xi = malloc(xb), *y = malloc(yb);
    for (int64_t k = 0; s && k < count; k++) {
        uint8_t *dst = r.bytes + r.per * (size_t)k;
        int64_t *idx = (int64_t *)(void *)(dst + xb + yb);
        st_sampler_next(s, idx, NULL);
        CHECK_OK(st_dataset_batch(d, idx, mb, mb, -100, x, xi, y));
        memcpy(dst, d->kind == ST_DATA_TOKENS ? (void *)xi : (void *)x, xb);
        memcpy(dst + xb, y, yb);
    }
    free(x);
    free(xi);
    free(y);
    st_sampler_free(s);
    return r;
}

static bool same(const run *a, const run *b) {
    return a->bytes && b->bytes && a->count == b->count && a->per == b->per &&
           memcmp(a->bytes, b->bytes, a->per * (size_t)a->count) == 0;
}

/* Every sample of the epoch, in the sampler's order; nothing lost or doubled. */
static void workers_agree(const st_dataset *d, const char *what, int64_t batch, int64_t mb, bool drop_last) {
    st_sampler *tmp = make_sampler(d, batch, mb, drop_last);
    if (!tmp) return;
    const int64_t per_epoch = st_sampler_steps_per_epoch(tmp) * st_sampler_accum(tmp);
    st_sampler_free(tmp);
    const int64_t count = per_epoch + 3; /* into the next epoch */
    run ref = reference(d, batch, mb, drop_last, count);
    const int workers[] = {0, 1, 4};
    for (int w = 0; w < 3; w++) {
        st_sampler *s = make_sampler(d, batch, mb, drop_last);
        st_loader_opts o = ST_LOADER_OPTS_INIT;
        o.num_workers = workers[w];
        o.prefetch = 3;
        run r = load(d, s, &o, count);
        CHECK(same(&r, &ref), "%s: %d workers differ from st_dataset_batch on the sampler's order", what,
              workers[w]);
        if (r.bytes && w == 0) { /* the epoch's indices: each sample exactly once with drop_last */
            int64_t *seen = calloc((size_t)d->n, sizeof *seen), twice = 0, read = 0;
            for (int64_t k = 0; k < per_epoch; k++) {
                const int64_t *idx = (const int64_t *)(void *)(r.bytes + r.per * (size_t)(k + 1) -
                                                               (size_t)mb * sizeof(int64_t));
                for (int64_t j = 0; j < mb; j++) {
                    twice += seen[idx[j]]++ > 0;
                    read++;
                }
            }
            CHECK(read == per_epoch * mb && (!drop_last || twice == 0) &&
                      (drop_last || twice == per_epoch * mb - d->n),
                  "%s: %lld samples read in an epoch, %lld twice", what, (long long)read, (long long)twice);
            free(seen);
        }
        free(r.bytes);
        st_sampler_free(s);
    }
    free(ref.bytes);
}

static void augmentation(const st_dataset *d) {
    st_loader_opts o = ST_LOADER_OPTS_INIT;
    o.crop_pad = 2;
    o.flip = true;
    o.aug_seed = 5;
    run runs[3];
    const int workers[] = {0, 1, 4};
    for (int w = 0; w < 3; w++) {
        st_sampler *s = make_sampler(d, 8, 4, true);
        o.num_workers = workers[w];
        runs[w] = load(d, s, &o, 40);
        st_sampler_free(s);
    }
    CHECK(same(&runs[0], &runs[1]) && same(&runs[0], &runs[2]),
          "augmented batches depend on the worker count");
    run plain = reference(d, 8, 4, true, 40);
    CHECK(!same(&runs[0], &plain), "crop and flip changed nothing");
    /* flip only: every image is the reference or its mirror, and both occur */
    o.crop_pad = 0;
    o.num_workers = 2;
    st_sampler *s = make_sampler(d, 8, 4, true);
    run fl = load(d, s, &o, 40);
    st_sampler_free(s);
    const int64_t W = d->w, C = d->c, HWC = d->h * W * C;
    int flipped = 0, kept = 0, neither = 0;
    for (int64_t k = 0; fl.bytes && plain.bytes && k < 40; k++)
        for (int64_t j = 0; j < 4; j++) {
            const float *a = (const float *)(void *)(fl.bytes + fl.per * (size_t)k) + j * HWC;
            const float *b = (const float *)(void *)(plain.bytes + plain.per * (size_t)k) + j * HWC;
            bool eq = memcmp(a, b, (size_t)HWC * sizeof(float)) == 0, mirror = true;
            for (int64_t p = 0; p < HWC; p++) {
                int64_t y = p / (W * C), x = p / C % W, c = p % C;
                mirror = mirror && a[p] == b[(y * W + (W - 1 - x)) * C + c];
            }
            flipped += mirror && !eq;
            kept += eq;
            neither += !eq && !mirror;
        }
    CHECK(neither == 0 && flipped > 10 && kept > 10, "flip: %d flipped, %d kept, %d neither", flipped, kept,
          neither);
    for (int w = 0; w < 3; w++)
        free(runs[w].bytes);
    free(plain.bytes);
    free(fl.bytes);
    /* st_dataset_sample's crop against the definition */
    float out[6 * 5 * 3], ref[6 * 5 * 3];
    int32_t y;
    st_image_aug a = {2, 1, 3, true};
    CHECK_OK(st_dataset_sample(d, 7, &a, out, NULL, &y));
    CHECK_OK(st_dataset_sample(d, 7, NULL, ref, NULL, &y));
    const float zero = 0.0f * (1.0f / (255.0f * d->std)) - d->mean / d->std;
    int bad = 0;
    for (int64_t yy = 0; yy < 6; yy++)
        for (int64_t xx = 0; xx < 5; xx++)
            for (int64_t c = 0; c < 3; c++) {
                int64_t sy = yy + 3 - 2, sx = (4 - xx) + 1 - 2;
                float want = sy < 0 || sy >= 6 || sx < 0 || sx >= 5 ? zero : ref[(sy * 5 + sx) * 3 + c];
                bad += out[(yy * 5 + xx) * 3 + c] != want;
            }
    CHECK(bad == 0, "crop (pad 2, dx 1, dy 3) and flip: %d values wrong", bad);
}

/* The algebra of the augmentation: a crop with padding 0, or centred (dx = dy
 * = pad), is the identity, and so is flipping a flipped image (checked by
 * flipping st_dataset_sample's output again through a float dataset with
 * mean 0 and std 1, which copies values exactly); the loader with
 * crop_pad 0 and no flip gives the plain batches. */
static void augmentation_algebra(const st_dataset *d) {
    enum { HWC = 6 * 5 * 3 };
    float plain[HWC], out[HWC], back[HWC];
    int32_t y;
    int bad_id = 0, bad_centre = 0, bad_twice = 0, moved = 0;
    for (int64_t i = 0; i < 20; i++) {
        CHECK_OK(st_dataset_sample(d, i, NULL, plain, NULL, &y));
        const st_image_aug id = {0, 0, 0, false}, centre = {3, 3, 3, false}, flip = {0, 0, 0, true};
        CHECK_OK(st_dataset_sample(d, i, &id, out, NULL, &y));
        bad_id += memcmp(out, plain, sizeof out) != 0;
        CHECK_OK(st_dataset_sample(d, i, &centre, out, NULL, &y));
        bad_centre += memcmp(out, plain, sizeof out) != 0;
        CHECK_OK(st_dataset_sample(d, i, &flip, out, NULL, &y));
        moved += memcmp(out, plain, sizeof out) != 0;
        st_dataset f = {0};
        f.kind = ST_DATA_IMAGES;
        f.n = 1;
        f.h = d->h;
        f.w = d->w;
        f.c = d->c;
        f.num_classes = d->num_classes;
        f.values = out;
        f.labels = &y;
        f.mean = 0.0f;
        f.std = 1.0f;
        CHECK_OK(st_dataset_sample(&f, 0, &flip, back, NULL, &y));
        bad_twice += memcmp(back, plain, sizeof back) != 0;
    }
    CHECK(bad_id == 0 && bad_centre == 0, "crop with pad 0 or centred is not the identity: %d, %d", bad_id,
          bad_centre);
    CHECK(bad_twice == 0 && moved == 20, "flip twice: %d differ from the image; flip once moved %d of 20", bad_twice,
          moved);
    st_loader_opts o = ST_LOADER_OPTS_INIT;
    o.num_workers = 2;
    o.aug_seed = 9; /* crop_pad 0, flip false: nothing to draw */
    st_sampler *s = make_sampler(d, 8, 4, true);
    run r = load(d, s, &o, 10);
    st_sampler_free(s);
    run plain_run = reference(d, 8, 4, true, 10);
    CHECK(same(&r, &plain_run), "crop_pad 0 without flip changed the batches");
    free(r.bytes);
    free(plain_run.bytes);
}

/* Stop with workers busy and batches held; ASan reports any leak or race on
 * freed memory. Then resume from the saved position. */
static void stop_and_resume(const st_dataset *d) {
    st_loader_opts o = ST_LOADER_OPTS_INIT;
    o.num_workers = 4;
    o.prefetch = 6;
    o.max_held = 2;
    st_sampler *s = make_sampler(d, 12, 4, false);
    st_loader *l = NULL;
    CHECK_OK(st_loader_init(d, s, &o, &l)); /* freed at once: workers are starting or busy */
    st_loader_free(l);
    st_loader_free(NULL);
    st_sampler_free(s);

    const int64_t total = 60, cut = 17;
    run ref = reference(d, 12, 4, false, total);
    s = make_sampler(d, 12, 4, false);
    l = NULL;
    CHECK_OK(st_loader_init(d, s, &o, &l));
    if (!l) return;
    st_batch *b = NULL, *held = NULL;
    for (int64_t k = 0; k < cut; k++) {
        CHECK_OK(st_loader_next(l, &b));
        if (!b) return;
        if (k == cut - 5)
            held = b; /* hold one across the next ones: release in any order */
        else
            st_loader_release(l, b);
    }
    CHECK_OK(st_loader_next(l, &b)); /* the 2nd held */
    st_batch *c = NULL;
    CHECK_FAILS(st_loader_next(l, &c), ST_ERR_ARG, "call st_loader_release first");
    st_loader_release(l, held);
    st_sampler_pos p = st_loader_position(l);
    st_loader_free(l); /* one batch still held, workers filling the ring */

    st_sampler *t = make_sampler(d, 12, 4, false);
    CHECK_OK(st_sampler_seek(t, p));
    o.num_workers = 1;
    run rest = load(d, t, &o, total - cut - 1);
    CHECK(rest.bytes && ref.bytes &&
              memcmp(rest.bytes, ref.bytes + ref.per * (size_t)(cut + 1),
                     ref.per * (size_t)(total - cut - 1)) == 0,
          "the resumed loader does not continue where the first stopped");
    free(rest.bytes);
    free(ref.bytes);
    st_sampler_free(s);
    st_sampler_free(t);
}

/* A custom allocator (the CUDA build's pinned ring): every buffer it gives is
 * given back. */
typedef struct counter {
    int64_t allocs, frees;
} counter;
static void *count_alloc(void *ctx, size_t n) {
    ((counter *)ctx)->allocs++;
    return aligned_alloc(64, (n + 63) / 64 * 64);
}
static void count_free(void *ctx, void *p) {
    ((counter *)ctx)->frees++;
    free(p);
}

static void allocator_and_errors(const st_dataset *img, const st_dataset *tok) {
    counter cnt = {0, 0};
    st_loader_allocator al = {count_alloc, count_free, &cnt};
    st_loader_opts o = ST_LOADER_OPTS_INIT;
    o.allocator = &al;
    o.num_workers = 2;
    st_sampler *s = make_sampler(img, 8, 4, true);
    st_loader *l = NULL;
    CHECK_OK(st_loader_init(img, s, &o, &l));
    st_batch *b = NULL;
    if (l) CHECK_OK(st_loader_next(l, &b));
    st_loader_free(l);
    CHECK(cnt.allocs == 2 * 3 && cnt.frees == cnt.allocs, "allocator: %lld allocs, %lld frees",
          (long long)cnt.allocs, (long long)cnt.frees);

    o = (st_loader_opts)ST_LOADER_OPTS_INIT;
    o.flip = true;
    st_sampler *ts = make_sampler(tok, 4, 2, true);
    CHECK_FAILS(st_loader_init(tok, ts, &o, &l), ST_ERR_CONFIG, "not to tokens");
    o.flip = false;
    o.prefetch = 0;
    CHECK_FAILS(st_loader_init(tok, ts, &o, &l), ST_ERR_CONFIG, "prefetch 0");
    o.prefetch = 2;
    o.num_workers = -1;
    CHECK_FAILS(st_loader_init(tok, ts, &o, &l), ST_ERR_CONFIG, "-1 workers");
    CHECK_FAILS(st_loader_init(tok, s, NULL, &l), ST_ERR_ARG, "the sampler covers");
    st_sampler_free(s);
    st_sampler_free(ts);
    CHECK(st_loader_auto_workers(1) == 1 && st_loader_auto_workers(2) == 1 &&
              st_loader_auto_workers(16) == 4 && st_loader_auto_workers(128) == 8,
          "auto workers");
}

/* A loader over d (batches of `batch` samples in order, micro-batches of mb,
 * `workers` threads) gives `good` batches, then fails with `code`, a
 * message holding `needle` and `file`, and keeps failing. */
static void fails_after(const st_dataset *d, int64_t batch, int64_t mb, int workers, int good, st_status code,
                        const char *needle, const char *file) {
    st_sampler_opts so = ST_SAMPLER_OPTS_INIT;
    so.n = d->n, so.batch_size = batch, so.micro_batch = mb, so.shuffle = false;
    st_sampler *s = NULL;
    CHECK_OK(st_sampler_init(&so, &s));
    st_loader_opts o = ST_LOADER_OPTS_INIT;
    o.num_workers = workers;
    st_loader *l = NULL;
    CHECK_OK(st_loader_init(d, s, &o, &l));
    st_batch *b = NULL;
    for (int k = 0; l && k < good; k++) {
        CHECK_OK(st_loader_next(l, &b));
        st_loader_release(l, b);
    }
    if (l) {
        CHECK_FAILS(st_loader_next(l, &b), code, needle);
        CHECK(strstr(st_last_error(), file) != NULL, "%d workers: the message does not name %s: %s", workers,
              file, st_last_error());
        CHECK_FAILS(st_loader_next(l, &b), code, needle);
    }
    st_loader_free(l);
    st_sampler_free(s);
}

/* A token above INT32_MAX (vocabulary 2^32, 4-byte tokens) cannot be an
 * input: the worker's error reaches the consumer, with the file's name, at
 * the batch that holds it, and sticks. */
static void worker_error(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/big.tokens", dir);
    uint32_t tok[41];
    for (int i = 0; i < 41; i++)
        tok[i] = (uint32_t)i;
    tok[37] = 3000000000u;
    CHECK_OK(st_tokens_write(path, tok, 41, (uint64_t)1 << 32));
    st_dataset d;
    CHECK_OK(st_dataset_open_tokens(path, 4, &d)); /* 10 windows; window 9 holds token 37 */
    for (int workers = 0; workers <= 3; workers += 3)
        fails_after(&d, 10, 1, workers, 9, ST_ERR_FORMAT, "too large for int32", "big.tokens");
    st_dataset_free(&d);
}

/* A token file shortened while training reads it (rewritten in place): the
 * batch past its new end is an error naming the file, from a worker thread
 * as from the consumer's, not the SIGBUS that ends the process. */
static void shortened_file(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/shrinks.tokens", dir);
    enum { N = 8192 }; /* 2-byte tokens: 5 pages with the header */
    static uint32_t tok[N];
    for (int i = 0; i < N; i++)
        tok[i] = (uint32_t)(i % 1000);
    for (int workers = 0; workers <= 3; workers += 3) {
        CHECK_OK(st_tokens_write(path, tok, N, 1000));
        st_dataset d;
        CHECK_OK(st_dataset_open_tokens(path, 16, &d)); /* 511 windows of 16 tokens */
        CHECK(truncate(path, 64 + 2 * 100) == 0, "cannot shorten %s", path);
        /* batches 0-6 (tokens below 2016) lie in the first page, which stays */
        fails_after(&d, 16, 16, workers, 7, ST_ERR_IO, "was shortened while it was read", "shrinks.tokens");
        st_dataset_free(&d);
    }
}

/* A worker stuck in its assembly (dataset.h's test_stall, as behind a read
 * of a hung network file system: sample 20, in micro-batch 5):
 * st_loader_next waits timeout_s for that batch, then fails naming it, and
 * keeps failing; st_loader_free returns, saying so (the stuck worker is not
 * joined); when the read comes back after all, the worker does not read the
 * caller's dataset struct, which may be gone by then.
 * The batches before it come as usual. */
static st_loader *volatile abandoned;
static void stalled_worker(const char *tokens) {
    setenv("SCALETRAIN_TEST_DATA_STALL", "train.tokens:20", 1);
    static st_dataset d; /* never freed: the stuck worker may still read it */
    CHECK_OK(st_dataset_open_tokens(tokens, 16, &d));
    unsetenv("SCALETRAIN_TEST_DATA_STALL");
    CHECK(d.test_stall == 21, "the test knob set test_stall %lld, not 21", (long long)d.test_stall);
    st_sampler_opts so = ST_SAMPLER_OPTS_INIT;
    so.n = d.n, so.batch_size = 24, so.micro_batch = 4, so.shuffle = false;
    st_sampler *s = NULL;
    CHECK_OK(st_sampler_init(&so, &s));
    st_loader_opts o = ST_LOADER_OPTS_INIT;
    o.num_workers = 2;
    o.timeout_s = 0.2;
    st_loader *l = NULL;
    CHECK_OK(st_loader_init(&d, s, &o, &l));
    st_batch *b = NULL;
    for (int k = 0; l && k < 5; k++) {
        CHECK_OK(st_loader_next(l, &b));
        CHECK(b && b->seq == k, "batch %d: got %lld", k, b ? (long long)b->seq : -1LL);
        st_loader_release(l, b);
    }
    if (l) {
        CHECK_FAILS(st_loader_next(l, &b), ST_ERR_IO,
                    "batch 5 is not ready after 0.2 s (data.timeout_s)");
        CHECK(strstr(st_last_error(), "a worker has been assembling it (samples 20,"),
              "the message does not say why: %s", st_last_error());
        CHECK_FAILS(st_loader_next(l, &b), ST_ERR_IO, "batch 5 is not ready"); /* and stays failed */
    }
    /* returns, saying the stuck worker was left alone: the dataset it reads must stay */
    CHECK(st_loader_free(l), "a loader whose worker never answered did not say it left it running");
    abandoned = l; /* (left to the process's end by design: kept reachable, not a leak to LeakSanitizer) */
    st_sampler_free(s);
    /* The caller's dataset struct may go (it lived in a stack frame, now
     * reused) while the memory it points to stays: the worker, its read
     * come back, reads through the loader's own copy and passes */
    const st_dataset keep = d;
    memset(&d, 0xa5, sizeof d);
    st_dataset_test_unstall();
    d = keep;
}

/* st_loader_try_next never waits: with 0 workers it gives nothing; with
 * workers, taking each batch with it when it is ready and with
 * st_loader_next otherwise (two held at once, as the device feed does) gives
 * the same sequence as st_loader_next alone, whatever the timing; it refuses
 * a third batch as st_loader_next does. */
static void try_next(const st_dataset *d) {
    const int64_t count = 30;
    run ref = reference(d, 24, 4, true, count);
    for (int workers = 0; workers <= 2; workers += 2) {
        st_sampler *s = make_sampler(d, 24, 4, true);
        st_loader_opts o = ST_LOADER_OPTS_INIT;
        o.num_workers = workers;
        o.max_held = 2;
        st_loader *l = NULL;
        CHECK_OK(st_loader_init(d, s, &o, &l));
        st_batch *prev = NULL, *b = NULL;
        int64_t tried = 0, bad = 0;
        for (int64_t k = 0; l && ref.bytes && k < count; k++) {
            CHECK_OK(st_loader_try_next(l, &b));
            if (b) tried++;
            else CHECK_OK(st_loader_next(l, &b));
            if (!b) break;
            uint8_t *want = ref.bytes + ref.per * (size_t)k;
            bad += b->seq != k || memcmp(b->x, want, b->x_nbytes) != 0 ||
                   memcmp(b->y, want + b->x_nbytes, b->y_nbytes) != 0;
            if (k == 5) {
                st_batch *third = NULL;
                CHECK_FAILS(st_loader_try_next(l, &third), ST_ERR_ARG, "are held");
            }
            st_loader_release(l, prev);
            prev = b;
        }
        CHECK(bad == 0, "try_next, %d workers: %lld batches out of order or with other bits", workers,
              (long long)bad);
        CHECK(workers > 0 || tried == 0, "try_next with 0 workers gave %lld batches", (long long)tried);
        st_loader_free(l);
        st_sampler_free(s);
    }
    free(ref.bytes);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/st_loader_XXXXXX");
    if (!mkdtemp(dir)) return st_test_skip("test_loader", "cannot create a directory in /tmp");
    char images[128], labels[128], tokens[128];
    snprintf(images, sizeof images, "%s/images.idx", dir);
    snprintf(labels, sizeof labels, "%s/labels.idx", dir);
    snprintf(tokens, sizeof tokens, "%s/train.tokens", dir);
    enum { N = 103, H = 6, W = 5, C = 3, NT = 2000 };
    static uint8_t px[N * H * W * C], lb[N];
    for (int i = 0; i < N * H * W * C; i++)
        px[i] = (uint8_t)((i * 2654435761u) >> 13);
    for (int i = 0; i < N; i++)
        lb[i] = (uint8_t)(i % 10);
    int64_t dims[4] = {N, H, W, C}, ldims[1] = {N};
    CHECK_OK(st_idx_write(images, 4, dims, px, true));
    CHECK_OK(st_idx_write(labels, 1, ldims, lb, false));
    static uint32_t tok[NT];
    for (int i = 0; i < NT; i++)
        tok[i] = (uint32_t)((i * 7919u) % 1000);
    CHECK_OK(st_tokens_write(tokens, tok, NT, 1000));

    st_dataset img, tk;
    CHECK_OK(st_dataset_open_images(images, labels, &img));
    st_dataset_pixel_stats(&img, &img.mean, &img.std);
    CHECK_OK(st_dataset_open_tokens(tokens, 16, &tk)); /* 124 windows */
    if (st_test_failures) return st_test_finish("test_loader");

    workers_agree(&img, "images", 24, 4, true);
    workers_agree(&img, "images, wrap", 24, 4, false);
    workers_agree(&tk, "tokens", 12, 3, true);
    workers_agree(&tk, "tokens, wrap", 10, 5, false);
    augmentation(&img);
    augmentation_algebra(&img);
    stop_and_resume(&img);
    stop_and_resume(&tk);
    try_next(&img);
    allocator_and_errors(&img, &tk);
    worker_error();
    shortened_file();
    stalled_worker(tokens);

    st_dataset_free(&img);
    st_dataset_free(&tk);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return st_test_finish("test_loader");
}
