/* The NVTX ranges a CUDA build emits (src/train/trace.h), seen the way Nsight
 * Systems sees them: this program is its own NVTX tool. NVTX3 asks a
 * statically linked tool for its callbacks through the (weak) symbol
 * InitializeInjectionNvtx2_fnptr (nvtxDetail/nvtxInit.h) at the first NVTX
 * call; main sets it before any, and the tool records every push, pop, start
 * and end. No GPU needed (NVTX is host-side); a CUDA=0
 * build compiles NVTX out, and this test skips there.
 *
 * A 3-step CPU run (batch 32 in micro-batches of 16) must push "step 1..3"
 * around "data wait", "forward" and "backward" twice each, "optimizer" once
 * and "checkpoint" at the end, pop as many as it pushed, and nest at most two
 * deep; with the profiler window on step 2 the layers nest inside forward
 * and backward. An async mark (a bucket's all-reduce) is a start/end range. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "train_fixture.h"

#ifndef ST_HAVE_CUDA
int main(void) {
    printf("skipped: NVTX is compiled out of a CUDA=0 build\n");
    return 77;
}
#else
#include "train/trace.h"

#include <nvtx3/nvToolsExt.h>

enum { MAX_NAMES = 4096 };
typedef struct nvtx_log {
    int pushes, pops, starts, ends, depth, max_depth, negative;
    uint64_t last_id, ended_id;
    int n;
    char names[MAX_NAMES][48]; /* pushed and started, in order */
} nvtx_log;
static nvtx_log g_log; /* the tool's callbacks carry no context */

static void note(const nvtxEventAttributes_t *a) {
    if (g_log.n < MAX_NAMES)
        snprintf(g_log.names[g_log.n++], sizeof g_log.names[0], "%s",
                 a->messageType == NVTX_MESSAGE_TYPE_ASCII ? a->message.ascii : "?");
}
static int push_ex(const nvtxEventAttributes_t *a) {
    note(a);
    g_log.pushes++;
    if (++g_log.depth > g_log.max_depth) g_log.max_depth = g_log.depth;
    return g_log.depth - 1;
}
static int pop(void) {
    g_log.pops++;
    if (--g_log.depth < 0) g_log.negative++;
    return g_log.depth;
}
static nvtxRangeId_t start_ex(const nvtxEventAttributes_t *a) {
    note(a);
    g_log.starts++;
    return ++g_log.last_id;
}
static void end(nvtxRangeId_t id) {
    g_log.ends++;
    g_log.ended_id = id;
}

static int init_tool(NvtxGetExportTableFunc_t get) {
    const NvtxExportTableCallbacks *cb = (const NvtxExportTableCallbacks *)get(NVTX_ETID_CALLBACKS);
    NvtxFunctionTable table = NULL;
    unsigned int size = 0;
    if (!cb || !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size) || size <= NVTX_CBID_CORE_RangePop)
        return 0;
    *table[NVTX_CBID_CORE_RangePushEx] = (NvtxFunctionPointer)push_ex;
    *table[NVTX_CBID_CORE_RangePop] = (NvtxFunctionPointer)pop;
    *table[NVTX_CBID_CORE_RangeStartEx] = (NvtxFunctionPointer)start_ex;
    *table[NVTX_CBID_CORE_RangeEnd] = (NvtxFunctionPointer)end;
    return 1;
}

static int count(const char *name) {
    int k = 0;
    for (int i = 0; i < g_log.n; i++) k += strcmp(g_log.names[i], name) == 0;
    return k;
}

static int first(const char *name) {
    for (int i = 0; i < g_log.n; i++)
        if (strcmp(g_log.names[i], name) == 0) return i;
    return -1;
}

static char root[] = "/tmp/test_nvtx.XXXXXX";

static void run(const char *label, const char *const *extra) {
    st_config c;
    st_run_result r;
    memset(&g_log, 0, sizeof g_log);
    CHECK_OK(tf_config(&c, root, label, extra));
    CHECK_OK(tf_train(&c, NULL, &r));
    CHECK(r.steps == 3, "%s: %lld steps", label, (long long)r.steps);
}

int main(void) {
    InitializeInjectionNvtx2_fnptr = init_tool; /* before the first NVTX call */
    if (!mkdtemp(root)) {
        printf("cannot make a temporary directory\n");
        return 1;
    }
    CHECK_OK(tf_make_data(root));

    const char *plain[] = {"train.device=cpu", "train.steps=3", NULL};
    run("plain", plain);
    printf("plain run: %d pushes, %d pops, depth %d; step 1 = %d, data wait %d, forward %d, backward %d, "
           "optimizer %d, checkpoint %d\n",
           g_log.pushes, g_log.pops, g_log.max_depth, count("step 1"), count("data wait"), count("forward"),
           count("backward"), count("optimizer"), count("checkpoint"));
    CHECK(g_log.pushes > 0, "no NVTX range reached the tool");
    CHECK(g_log.pushes == g_log.pops && g_log.depth == 0 && !g_log.negative, "pushes %d, pops %d", g_log.pushes,
          g_log.pops);
    CHECK(g_log.max_depth == 2, "nesting %d, expected step > phase", g_log.max_depth);
    CHECK(count("step 1") == 1 && count("step 2") == 1 && count("step 3") == 1, "one range per step");
    CHECK(count("data wait") == 6 && count("forward") == 6 && count("backward") == 6,
          "per micro-batch: data wait %d, forward %d, backward %d", count("data wait"), count("forward"),
          count("backward"));
    CHECK(count("optimizer") == 3 && count("checkpoint") == 1, "optimizer %d, checkpoint %d", count("optimizer"),
          count("checkpoint"));
    CHECK(first("step 1") == 0 && first("data wait") == 1 && first("forward") == 2 && first("backward") == 3,
          "order: step 1 at %d, data wait %d, forward %d, backward %d", first("step 1"), first("data wait"),
          first("forward"), first("backward"));

    /* the profiler window on step 2: each layer nests inside forward/backward */
    const char *traced[] = {"train.device=cpu", "train.steps=3", "log.trace=true", "log.trace_steps=[2,2]", NULL};
    run("traced", traced);
    CHECK(g_log.pushes == g_log.pops && !g_log.negative, "traced: pushes %d, pops %d", g_log.pushes, g_log.pops);
    CHECK(g_log.max_depth == 3, "traced: nesting %d, expected step > forward > layer", g_log.max_depth);
    CHECK(count("fc.0 (linear)") == 4, "traced: layer fc.0 %d times (2 micro-batches x forward and backward)",
          count("fc.0 (linear)"));

    /* async marks: start/end ranges, not pushes */
    memset(&g_log, 0, sizeof g_log);
    st_trace_mark b = st_trace_begin_async(NULL, ST_TRACE_TID_BUCKET, "comm", "grad bucket 0");
    st_trace_mark s = st_trace_begin(NULL, ST_TRACE_TID_STEP, "step", "backward");
    st_trace_end(NULL, &s);
    st_trace_end(NULL, &b);
    CHECK(g_log.starts == 1 && g_log.ends == 1 && g_log.ended_id == b.range && g_log.pushes == 1 && g_log.pops == 1,
          "async: %d starts, %d ends (id %llu of %llu), %d pushes", g_log.starts, g_log.ends,
          (unsigned long long)g_log.ended_id, (unsigned long long)b.range, g_log.pushes);

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return st_test_finish("test_nvtx");
}
#endif
