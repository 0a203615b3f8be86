/* cuDNN's fused attention graphs (src/cuda/attention_cudnn.cpp,
 * model.attention_kernel=cudnn) as cudnn-frontend checks them without a
 * GPU: for Ampere (sm_80) and Hopper (sm_90), both graphs of each shape the
 * GPU parity cases run (tests/test_cuda_layers_b.c) and GPT-2 124M's at
 * batch 16 must pass the frontend's validation (tensor dims, strides and
 * types, the causal band, the stats' layout), and the shapes cuDNN does
 * not take must be refused with its reason: a head size that is not a
 * multiple of 8 (the twin keeps such heads off cuDNN: only multiples of 16
 * reach it) and one query and key (T = 1, the backward), which the twin
 * then runs on its flash kernels. Whether an engine runs each shape is for
 * a GPU (test_cuda_layers_b's cuDNN cases). On a GPU, also the workspace
 * cuDNN asks for each training shape against the planner's figure for it
 * (st_attention_cudnn_bytes, docs/planner.md), which may fall short of it
 * by 8 MiB at most (both printed): a planner that counts less than the run
 * takes plans batches that do not fit; the term that grows, dP with B T^2,
 * is what the figure models. Skips, saying why, in builds without cuDNN
 * and where its library does not load. */
#include "check.h"
#include "core/device.h"
#include "layers/attention_layout.h"
#ifdef ST_HAVE_CUDNN
#include "cuda/attention_cudnn.h"
#include "cuda/cuda.h"
#endif

int main(void) {
#ifndef ST_HAVE_CUDNN
    return st_test_skip("cudnn graphs", "this build has no cuDNN attention (CUDNN=0: no cuDNN headers, or no "
                                        "cudnn-frontend headers in .tools/cudnn-frontend: scripts/deps.sh)");
#else
    char no_cudnn[512];
    if (!st_cuda_cudnn_built(no_cudnn, sizeof no_cudnn)) /* its library did not load (src/cuda/libs.h) */
        return st_test_skip("cudnn graphs", no_cudnn);
    printf("cuDNN %lld\n", (long long)st_cudnn_version());
    const st_cudnn_sdpa ok[] = {{16, 1024, 12, 64, 0.125f}, {2, 64, 12, 64, 0.125f},
                                {2, 37, 4, 16, 0.25f},      {1, 130, 2, 64, 0.125f},
                                {1, 70, 2, 128, 0.0884f},   {3, 1000, 8, 32, 0.1768f},
                                {1, 70, 2, 80, 0.1118f}};
    for (int sm = 80; sm <= 90; sm += 10)
        for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
            const st_cudnn_sdpa *s = &ok[i];
            const st_status r = st_cudnn_sdpa_validate(s, sm);
            CHECK(r == ST_OK, "sm_%d, B %lld T %lld heads %lld of %lld: %s", sm, (long long)s->B,
                  (long long)s->T, (long long)s->nh, (long long)s->hs, st_last_error());
            if (r == ST_OK)
                printf("ok   sm_%d B %lld T %lld, %lld heads of %lld: forward and backward graphs valid\n",
                       sm, (long long)s->B, (long long)s->T, (long long)s->nh, (long long)s->hs);
        }
    const st_cudnn_sdpa odd = {2, 64, 4, 100, 0.1f}, one = {2, 1, 2, 32, 0.1768f};
    CHECK_FAILS(st_cudnn_sdpa_validate(&odd, 90), ST_ERR_UNSUPPORTED, "multiple of 8");
    CHECK_FAILS(st_cudnn_sdpa_validate(&one, 90), ST_ERR_UNSUPPORTED, "backward graph for B 2, T 1");

    char why[256] = "";
    st_device *dev = NULL;
    st_cudnn *c = NULL;
    if (st_device_cuda_count(why, sizeof why) == 0) {
        printf("skipped: cuDNN's workspace against the planner's figure: %s\n", why);
    } else if (st_device_open_cuda(0, &dev) != ST_OK || st_cudnn_create("cuda:0", &c) != ST_OK) {
        CHECK(false, "opening cuda:0 and a cuDNN handle on it: %s", st_last_error());
    } else {
        const st_cudnn_sdpa shapes[] = {{16, 1024, 12, 64, 0.125f},
                                        {4, 2048, 16, 64, 0.125f},
                                        {1, 130, 2, 64, 0.125f},
                                        {3, 1000, 8, 32, 0.1768f}};
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            const st_cudnn_sdpa *s = &shapes[i];
            int64_t fwd = -1, both = -1;
            const st_status rf = st_cudnn_sdpa_plan(c, s, false, &fwd);
            const st_status rb = rf == ST_OK ? st_cudnn_sdpa_plan(c, s, true, &both) : rf;
            CHECK(rb == ST_OK, "B %lld T %lld heads %lld of %lld: %s", (long long)s->B, (long long)s->T,
                  (long long)s->nh, (long long)s->hs, st_last_error());
            if (rb != ST_OK) continue;
            const int64_t pf = st_attention_cudnn_bytes(s->B, s->T, s->nh, false),
                          pb = st_attention_cudnn_bytes(s->B, s->T, s->nh, true);
            const int64_t slack = 8 << 20;
            const bool fits = fwd <= pf + slack && both <= pb + slack;
            printf("%s  B %lld T %lld, %lld heads of %lld: cuDNN's workspace %lld bytes forward, %lld with "
                   "backward; the planner's %lld and %lld\n",
                   fits ? "ok  " : "FAIL", (long long)s->B, (long long)s->T, (long long)s->nh,
                   (long long)s->hs, (long long)fwd, (long long)both, (long long)pf, (long long)pb);
            CHECK(fits, "the planner counts less than cuDNN takes (B %lld T %lld)", (long long)s->B,
                  (long long)s->T);
        }
    }
    st_cudnn_destroy(c);
    st_device_free(dev);
    return st_test_finish("cudnn graphs");
#endif
}
