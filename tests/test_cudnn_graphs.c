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
 * a GPU (test_cuda_layers_b's cuDNN cases). Skips, saying why, in builds
 * without cuDNN. */
#include "check.h"
#ifdef ST_HAVE_CUDNN
#include "cuda/attention_cudnn.h"
#endif

int main(void) {
#ifndef ST_HAVE_CUDNN
    return st_test_skip("cudnn graphs", "this build has no cuDNN attention (CUDNN=0: no cuDNN headers, or no "
                                        "cudnn-frontend headers in .tools/cudnn-frontend: scripts/deps.sh)");
#else
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
    return st_test_finish("cudnn graphs");
#endif
}
