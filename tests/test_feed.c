/* The batch feed on the host (src/train/feed.h): no copy. For features and
 * tokens, with 0 and 2 loader workers, over more micro-batches than the ring
 * has slots and into a second epoch: during each micro-step the graph's
 * inputs x and y are the ring slot's own memory (the same data pointers),
 * holding the bits st_dataset_batch makes for the sampler's order; after
 * st_feed_done they point back at the tensors' memory; the position after a
 * micro-batch is the sampler's; asking for the next batch before giving the
 * last back fails; freeing the feed mid-step gives the pointers back; inputs
 * that do not hold a micro-batch are refused. (The GPU path is
 * test_cuda_feed.c; whole runs train the same bits as before through the
 * e2e tests loader_workers.sh and activation_checkpointing.sh.) */
#include <math.h>
#include <unistd.h>

#include "feed_fixture.h"
#include "train/feed.h"

static char dir[64];

static void run(const st_dataset *d, const char *what, int workers) {
    const int64_t count = 40; /* ring: prefetch + 1 <= 5 slots; an epoch is 24 micro-batches */
    size_t per = 0;
    uint8_t *ref = fd_reference(d, count, &per);
    st_tensor x, y;
    CHECK_OK(fd_tensors(NULL, d, &x, &y));
    void *own_x = fd_x(&x), *own_y = y.idata;
    st_sampler *s = fd_sampler(d), *walk = fd_sampler(d);
    st_loader_opts lo = ST_LOADER_OPTS_INIT;
    lo.num_workers = workers;
    lo.prefetch = 4;
    st_feed *f = NULL;
    if (s && walk) CHECK_OK(st_feed_init(NULL, d, s, &lo, &x, &y, &f));
    CHECK(!f || !st_feed_pinned(f, NULL), "%s: a host feed is not pinned", what);
    int bad_ptr = 0, bad_bits = 0, bad_pos = 0, bad_back = 0, bad_wait = 0;
    const size_t xb = (size_t)x.count * 4;
    for (int64_t k = 0; f && ref && k < count; k++) {
        double w = -1;
        st_status st = st_feed_next(f, &w);
        CHECK_OK(st);
        if (st != ST_OK) break;
        const st_batch *b = st_feed_batch(f);
        bad_ptr += !b || b->seq != k || fd_x(&x) != (b->x ? (void *)b->x : (void *)b->xi) || y.idata != b->y;
        bad_bits += memcmp(fd_x(&x), ref + per * (size_t)k, xb) != 0 ||
                    memcmp(y.idata, ref + per * (size_t)k + xb, per - xb) != 0;
        bad_wait += !(w >= 0 && w < 60);
        st_sampler_pos want;
        st_sampler_next(walk, (int64_t[FD_MB]){0}, &want);
        want = st_sampler_advance(walk, want);
        const st_sampler_pos got = st_feed_position(f);
        bad_pos += got.epoch != want.epoch || got.step != want.step || got.micro != want.micro;
        if (k == 3) CHECK_FAILS(st_feed_next(f, &w), ST_ERR_INTERNAL, "was not given back");
        CHECK_OK(st_feed_done(f));
        bad_back += fd_x(&x) != own_x || y.idata != own_y || st_feed_batch(f) != NULL;
    }
    CHECK(bad_ptr == 0,
          "%s, %d workers: %d micro-batches where x, y were not the ring slot (or out of order)", what,
          workers, bad_ptr);
    CHECK(bad_bits == 0, "%s, %d workers: %d micro-batches differ from st_dataset_batch", what, workers,
          bad_bits);
    CHECK(bad_pos == 0, "%s, %d workers: the position was not the sampler's %d times", what, workers,
          bad_pos);
    CHECK(bad_back == 0, "%s, %d workers: x, y did not point back after st_feed_done %d times", what, workers,
          bad_back);
    CHECK(bad_wait == 0, "%s, %d workers: %d waits not in [0, 60) s", what, workers, bad_wait);
    /* Stopped in the middle of a micro-step: the tensors get their memory back. */
    if (f) CHECK_OK(st_feed_next(f, NULL));
    st_feed_free(f);
    CHECK(fd_x(&x) == own_x && y.idata == own_y, "%s: st_feed_free mid-step left x, y on the ring", what);
    st_sampler_free(s);
    st_sampler_free(walk);
    st_device_release(NULL, own_x);
    st_device_release(NULL, own_y);
    free(ref);
}

static void refused(const st_dataset *d) {
    st_tensor x, y;
    CHECK_OK(fd_tensors(NULL, d, &x, &y));
    st_sampler *s = fd_sampler(d);
    st_feed *f = NULL;
    x.count--;
    if (s) CHECK_FAILS(st_feed_init(NULL, d, s, NULL, &x, &y, &f), ST_ERR_ARG, "do not hold a micro-batch");
    x.count++;
    y.dtype = ST_F32;
    if (s) CHECK_FAILS(st_feed_init(NULL, d, s, NULL, &x, &y, &f), ST_ERR_ARG, "do not hold a micro-batch");
    CHECK(f == NULL, "a refused feed was made");
    st_sampler_free(s);
    st_device_release(NULL, fd_x(&x));
    st_device_release(NULL, y.idata);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/st_feed_XXXXXX");
    if (!mkdtemp(dir)) return st_test_skip("test_feed", "cannot create a directory in /tmp");
    for (int tokens = 0; tokens <= 1; tokens++) {
        st_dataset d;
        st_status s = fd_open(dir, tokens, &d);
        CHECK_OK(s);
        if (s != ST_OK) continue;
        for (int w = 0; w <= 2; w += 2)
            run(&d, tokens ? "tokens" : "features", w);
        if (!tokens) refused(&d);
        st_dataset_free(&d);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return st_test_finish("test_feed");
}
