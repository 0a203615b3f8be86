/* The batch feed on a CUDA device (src/train/feed.h): the ring is pinned,
 * and micro-batches arrive in the graph's device inputs with the bits the
 * host assembles (st_dataset_batch in the sampler's order), in order, over
 * more micro-batches than the ring has slots and into a second epoch, for
 * features and tokens, with 0 and 2 loader workers.
 *
 * The host never waits for the device inside the loop: each micro-step
 * queues a long fill kernel on the compute stream (so the next batch's copy
 * has compute to overlap, and the host runs ahead of the GPU), then copies x
 * and y, on the compute stream, into a history on the device, and gives the
 * batch back. Only the events order the copies with compute, so a copy that
 * overwrote a buffer still to be read, or a read before its copy landed,
 * shows in the history, which is read back and compared at the end. Skips
 * (77) without a GPU. */
#include <math.h>
#include <unistd.h>

#include "feed_fixture.h"
#include "train/feed.h"
#ifdef ST_HAVE_CUDA
#include "cuda/cuda.h"
#endif

#ifdef ST_HAVE_CUDA
static char dir[64];
#ifdef ST_CUDA_EMU /* the CUDA emulator runs everything in queue order: busy work shows nothing there */
enum { BUSY_FLOATS = 1 << 12 };
#else
enum { BUSY_FLOATS = 1 << 24 }; /* 64 MiB filled a few times per micro-step */
#endif

static void run(st_device *dev, float *busy, const st_dataset *d, const char *what, int workers) {
    const int64_t count = 40; /* the ring: prefetch 3 + 2 slots; an epoch is 24 micro-batches */
    size_t per = 0;
    uint8_t *ref = fd_reference(d, count, &per), *got = calloc((size_t)count, per);
    st_tensor x, y;
    CHECK_OK(fd_tensors(dev, d, &x, &y));
    void *own_x = fd_x(&x), *own_y = y.idata, *hist = NULL, *bufs[2] = {NULL, NULL};
    const size_t xb = (size_t)x.count * 4, yb = per - xb;
    CHECK_OK(st_device_alloc(dev, per * (size_t)count, &hist));
    st_sampler *s = fd_sampler(d);
    st_loader_opts lo = ST_LOADER_OPTS_INIT;
    lo.num_workers = workers;
    lo.prefetch = 3;
    st_feed *f = NULL;
    if (s && hist) CHECK_OK(st_feed_init(dev, d, s, &lo, &x, &y, &f));
    const char *why = "";
    CHECK(!f || st_feed_pinned(f, &why), "%s: the ring is not pinned: %s", what, why);
    int bad_order = 0, bad_buf = 0, bad_wait = 0;
    double waited = 0;
    for (int64_t k = 0; f && k < count; k++) {
        double w = -1;
        st_status st = st_feed_next(f, &w);
        CHECK_OK(st);
        if (st != ST_OK) break;
        const st_batch *b = st_feed_batch(f);
        bad_order += !b || b->seq != k;
        bad_wait += !(w >= 0 && w < 60);
        waited += w;
        void *px = fd_x(&x);
        if (k < 2)
            bufs[k] = px; /* two device buffers, taken in turn */
        else
            bad_buf += px != bufs[k % 2] || px == bufs[1 - k % 2];
        for (int r = 0; r < 4; r++)
            CHECK_OK(st_device_fill_f32(dev, busy, BUSY_FLOATS, (float)k));
        uint8_t *h = (uint8_t *)hist + per * (size_t)k;
        CHECK_OK(st_cuda_memcpy_async(dev, h, px, xb, ST_CUDA_STREAM_COMPUTE));
        CHECK_OK(st_cuda_memcpy_async(dev, h + xb, y.idata, yb, ST_CUDA_STREAM_COMPUTE));
        CHECK_OK(st_feed_done(f));
    }
    st_feed_free(f); /* waits for the copies in flight */
    CHECK(fd_x(&x) == own_x && y.idata == own_y, "%s: x, y do not point back at their memory", what);
    CHECK(bufs[0] == own_x, "%s: the first micro-batch should use the tensor's own memory", what);
    if (hist && got) CHECK_OK(st_device_download(dev, got, hist, per * (size_t)count));
    int bad_bits = 0;
    for (int64_t k = 0; ref && got && k < count; k++) {
        const int differ = memcmp(got + per * (size_t)k, ref + per * (size_t)k, per) != 0;
        if (differ && bad_bits < 4)
            fprintf(stderr, "%s, %d workers: micro-batch %lld differs\n", what, workers, (long long)k);
        bad_bits += differ;
    }
    CHECK(bad_bits == 0, "%s, %d workers: %d of %lld micro-batches reached the device with other bits", what,
          workers, bad_bits, (long long)count);
    CHECK(bad_order == 0, "%s, %d workers: %d micro-batches out of order", what, workers, bad_order);
    CHECK(bad_buf == 0, "%s, %d workers: the device buffers did not alternate %d times", what, workers,
          bad_buf);
    CHECK(bad_wait == 0, "%s, %d workers: %d waits not in [0, 60) s", what, workers, bad_wait);
    printf("%s, %d workers: %lld micro-batches, same bits, data wait %.3f ms in all\n", what, workers,
           (long long)count, 1e3 * waited);
    st_sampler_free(s);
    st_device_release(dev, hist);
    st_device_release(dev, own_x);
    st_device_release(dev, own_y);
    free(ref);
    free(got);
}
#endif

int main(void) {
#ifndef ST_HAVE_CUDA
    return st_test_skip("test_cuda_feed", "this build has no CUDA");
#else
    char why[256] = "";
    if (st_device_cuda_count(why, sizeof why) == 0) return st_test_skip("test_cuda_feed", why);
    st_device *dev = NULL;
    CHECK_OK(st_device_open_cuda(0, &dev));
    snprintf(dir, sizeof dir, "/tmp/st_cuda_feed_XXXXXX");
    if (!dev || !mkdtemp(dir)) return st_test_finish("test_cuda_feed");
    float *busy = NULL;
    CHECK_OK(st_device_alloc(dev, (size_t)BUSY_FLOATS * sizeof(float), (void **)&busy));
    for (int tokens = 0; busy && tokens <= 1; tokens++) {
        st_dataset d;
        st_status s = fd_open(dir, tokens, &d);
        CHECK_OK(s);
        if (s != ST_OK) continue;
        for (int w = 0; w <= 2; w += 2)
            run(dev, busy, &d, tokens ? "tokens" : "features", w);
        st_dataset_free(&d);
    }
    st_device_release(dev, busy);
    st_device_free(dev);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return st_test_finish("test_cuda_feed");
#endif
}
