/* src/hw's time model on the CPU: the work the CPU kernels do against the
 * model's FLOPs (the default cnn's Winograd convolutions counted exactly, by
 * hand), which of the two each device is charged with, and the predicted
 * step of the three bench configs at a fixed calibration against the step
 * times measured on this machine kind (docs/planner.md). No timing here: a
 * cost model that went back to charging the CPU direct convolutions (2x
 * pessimistic for the cnn) fails the exact counts and the cnn's bracket. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "hw/planner.h"

/* per sample: 2 x pixels x Cout x K for a direct convolution */
#define DIRECT(hw, cout, k) (2.0 * (hw) * (cout) * (k))
/* per sample: 16 transform points x 2 x tiles x Cin x Cout */
#define WINO(tiles, cin, cout) (32.0 * (tiles) * (cin) * (cout))

static st_model *cnn_layout(st_config *c) {
    st_config_defaults(c); /* the default cnn: conv32-bn, conv64-bn-pool, conv128-bn-pool, linear 10 */
    c->model.dropout = 0;
    st_model_input in = {.height = 28, .width = 28, .channels = 1, .num_classes = 10};
    st_model *m = NULL;
    CHECK_OK(st_model_create_layout(c, &in, &m));
    return m;
}

/* The default cnn on 28x28x1 (bench/configs/cnn.yaml): conv.0 (Cin 1) runs
 * im2col; conv.1 (32 -> 64 at 28x28, 196 tiles) and conv.2 (64 -> 128 at
 * 14x14, 49 tiles) run Winograd F(2x2, 3x3); the head is 6272 -> 10. conv.0's
 * input is data, so its backward is the weight gradient alone. */
static void test_cnn_work(void) {
    st_config c;
    st_model *m = cnn_layout(&c);
    if (!m) return;
    const double B = 4;
    st_model_graph mg;
    CHECK_OK(st_model_graph_layout(m, (int64_t)B, &mg));
    const st_cost k = st_graph_cost(&mg.g);
    st_model_graph_free(&mg);
    const double c0 = DIRECT(784, 32, 9), head = 2.0 * 6272 * 10;
    const double c1 = DIRECT(784, 64, 288), c2 = DIRECT(196, 128, 576);
    const double w1 = WINO(196, 32, 64), w2 = WINO(49, 64, 128);
    /* the model's FLOPs: direct convolutions, as MFU and GFLOP/s count them */
    CHECK_CLOSE(k.fwd_flops, B * (c0 + c1 + c2 + head), 0);
    CHECK_CLOSE(k.bwd_flops, B * (c0 + 2 * (c1 + c2 + head)), 0);
    /* what the CPU runs: 2.25x fewer multiply-adds in conv.1 and conv.2 */
    CHECK_CLOSE(w1 * 2.25, c1, 0);
    CHECK_CLOSE(w2 * 2.25, c2, 0);
    CHECK_CLOSE(k.cpu.fwd_flops, B * (c0 + w1 + w2 + head), 0);
    CHECK_CLOSE(k.cpu.bwd_flops, B * (c0 + 2 * (w1 + w2 + head)), 0);
    CHECK_CLOSE(st_cost_wino_flops(4, 28, 28, 32, 64), B * w1, 0);
    /* odd sizes pad to whole tiles: 7x7 is 4x4 tiles */
    CHECK_CLOSE(st_cost_wino_flops(1, 7, 7, 8, 8), 32.0 * 16 * 8 * 8, 0);
    /* 11 nodes (3 conv, 3 bn, 2 pool, flatten, head, loss), each with a
     * backward (conv.0's weight gradient included) */
    CHECK_CLOSE(k.fwd_passes, 11, 0);
    CHECK_CLOSE(k.bwd_passes, 11, 0);
    printf("cnn per sample: model %.1f MFLOP, CPU kernels %.1f MFLOP (%.2fx fewer)\n",
           (k.fwd_flops + k.bwd_flops) / B / 1e6, (k.cpu.fwd_flops + k.cpu.bwd_flops) / B / 1e6,
           (k.fwd_flops + k.bwd_flops) / (k.cpu.fwd_flops + k.cpu.bwd_flops));
    st_model_free(m);
}

/* The CPU is charged with its kernels' work, a GPU preset with the model's;
 * both report the model's FLOPs per step (MFU). */
static void test_device_charges(void) {
    st_cost c;
    memset(&c, 0, sizeof c);
    c.fwd_flops = 9e9, c.bwd_flops = 18e9; /* the model's */
    c.cpu.fwd_flops = 4e9, c.cpu.bwd_flops = 8e9;
    c.fwd_passes = c.bwd_passes = 10;
    st_hw_config cpu, gpu;
    CHECK_OK(st_hw_config_parse("cpu", NULL, NULL, &cpu));
    CHECK_OK(st_hw_config_parse("A100-40GB", NULL, NULL, &gpu));
    cpu.dev.peak_fp32 = cpu.dev.peak_bf16 = 100e9;
    st_time_opts o = {.hw = &cpu, .optim_states = 2, .bucket_cap_mb = 25, .micro = 1, .accum = 2};
    st_time t;
    st_time_estimate(&c, 0, &o, &t);
    CHECK_CLOSE(t.fwd_s, 4e9 / (100e9 * ST_TIME_CPU_FWD_EFF) + 10 * ST_TIME_CPU_PASS_S, 1e-12);
    CHECK_CLOSE(t.bwd_s, 8e9 / (100e9 * ST_TIME_CPU_BWD_EFF) + 10 * ST_TIME_CPU_PASS_S, 1e-12);
    CHECK_CLOSE(t.step_s, 2 * (t.fwd_s + t.bwd_s) + ST_TIME_CPU_STEP_S, 1e-12);
    CHECK_CLOSE(t.flops_per_step, 2 * 27e9, 0);
    o.efficiency = 0.5; /* --efficiency: one figure for both passes */
    st_time_estimate(&c, 0, &o, &t);
    CHECK_CLOSE(t.bwd_s, 8e9 / (100e9 * 0.5) + 10 * ST_TIME_CPU_PASS_S, 1e-12);
    o.hw = &gpu;
    o.efficiency = 0;
    st_time_estimate(&c, 0, &o, &t);
    const double peak = gpu.dev.peak_fp32 * st_time_default_efficiency(&gpu.dev, false);
    CHECK_CLOSE(t.fwd_s, 9e9 / peak, 1e-15);
    CHECK_CLOSE(t.bwd_s, 18e9 / peak, 1e-15);
    CHECK_CLOSE(t.flops_per_step, 2 * 27e9, 0);
}

/* The bench configs at 1 thread, planned for a CPU calibrated at 117
 * GFLOP/s, against the steps measured on this machine kind at that
 * calibration (docs/planner.md, "The CPU"): mlp about 29 ms, cnn about 190
 * ms, gpt about 530 ms. The brackets are +-30%: wide enough for the model's
 * constants to move, narrow enough that a cnn charged its direct FLOPs and
 * im2col's traffic again (about 360 ms, as before Winograd was counted)
 * fails. */
static double plan_ms(st_config *c, const st_model_input *mi, int64_t batch) {
    c->train.batch_size = c->train.micro_batch_size = batch;
    c->model.dropout = 0;
    st_model *m = NULL;
    CHECK_OK(st_model_create_layout(c, mi, &m));
    if (!m) return 0;
    st_plan_input in = {.cfg = c, .model = m, .seq_len = mi->seq_len};
    st_hw_config hw;
    CHECK_OK(st_hw_config_parse("cpu", NULL, NULL, &hw));
    hw.dev.peak_fp32 = hw.dev.peak_bf16 = 117e9;
    hw.dev.mem_bytes = 8LL << 30;
    st_plan p;
    CHECK_OK(st_plan_make(&in, &hw, &p));
    CHECK(p.ok && p.micro == batch && p.accum == 1, "%s: %s", c->model.type, p.warning);
    st_model_free(m);
    return 1e3 * p.time.step_s;
}

static void test_bench_configs(void) {
    st_config c;
    const st_model_input img = {.height = 28, .width = 28, .channels = 1, .num_classes = 10};
    st_config_defaults(&c);
    snprintf(c.model.type, sizeof c.model.type, "mlp");
    CHECK_OK(st_config_set(&c, "model.hidden=[1024,1024]"));
    const double mlp = plan_ms(&c, &img, 256);
    st_config_defaults(&c);
    const double cnn = plan_ms(&c, &img, 128);
    st_config_defaults(&c);
    snprintf(c.model.type, sizeof c.model.type, "gpt");
    snprintf(c.data.type, sizeof c.data.type, "tokens");
    c.model.n_layer = 4, c.model.n_head = 4, c.model.n_embd = 256;
    c.model.vocab_size = 256, c.model.block_size = 256;
    const st_model_input tok = {.vocab_size = 256, .seq_len = 256};
    const double gpt = plan_ms(&c, &tok, 8);
    printf("predicted at 117 GFLOP/s: mlp %.1f ms, cnn %.1f ms, gpt %.1f ms\n", mlp, cnn, gpt);
    CHECK(mlp >= 29 * 0.7 && mlp <= 29 * 1.3, "mlp %.1f ms", mlp);
    CHECK(cnn >= 190 * 0.7 && cnn <= 190 * 1.3, "cnn %.1f ms", cnn);
    CHECK(gpt >= 530 * 0.7 && gpt <= 530 * 1.3, "gpt %.1f ms", gpt);
}

/* Bytes on the wire: gradients travel as the engine holds them (fp32, 4
 * bytes, unless dist.grad_dtype makes them 16-bit) whatever the compute
 * precision, and ZeRO's all-gather after the step moves 2 bytes a parameter
 * where a GPU's bf16/fp16 run shards the masters (the 16-bit copy), 4
 * otherwise. The ring (2 (n-1)/n bytes / busbw + latency, half that for an
 * all-gather): with the same buckets, 2 bytes fewer a parameter take
 * 2 (n-1)/n 2P / busbw off DDP's step and (n-1)/n 2P / busbw off the
 * all-gather. */
/* The communication tests' step: 1 + 2 TFLOP of products, no elementwise
 * work, on 8 A100s (1e9 parameters, 25 MB buckets, mixed AdamW). */
static st_cost comm_case(st_hw_config *hw) {
    st_cost c;
    memset(&c, 0, sizeof c);
    c.fwd_flops = 1e12, c.bwd_flops = 2e12;
    CHECK_OK(st_hw_config_parse("8xA100-80GB", NULL, NULL, hw));
    return c;
}

static void test_wire_bytes(void) {
    st_hw_config hw;
    const st_cost c = comm_case(&hw);
    const double n = 8, P = 1e9, bw = hw.dev.link_bw;
    st_time_opts o = {
        .hw = &hw, .mixed = true, .optim_states = 2, .bucket_cap_mb = 25, .micro = 1, .accum = 1};
    st_time t4, t2, z4, z2;
    st_time_estimate(&c, (int64_t)P, &o, &t4); /* grad_bytes 0: fp32 */
    o.grad_bytes = 2;
    st_time_estimate(&c, (int64_t)P, &o, &t2);
    CHECK_CLOSE(t4.comm_s - t2.comm_s, 2 * (n - 1) / n * 2 * P / bw, 1e-9);
    o.grad_bytes = 4;
    o.zero = 1;
    o.gather_bytes = 4;
    st_time_estimate(&c, (int64_t)P, &o, &z4);
    o.gather_bytes = 2;
    st_time_estimate(&c, (int64_t)P, &o, &z2);
    CHECK_CLOSE(z4.comm_s - z2.comm_s, (n - 1) / n * 2 * P / bw, 1e-9);
    CHECK_CLOSE(z4.exposed_s - z2.exposed_s, (n - 1) / n * 2 * P / bw, 1e-9); /* after the step: not hidden */
}

/* ZeRO-2 reduces every micro-step's gradients (dist.h): with 4 micro-steps
 * its reductions and their exposed part are 4 times ZeRO-1's, which reduces
 * once a step; the weights' all-gather is once a step for both; with one
 * micro-step they are the same. */
static void test_zero2_every_micro_step(void) {
    st_hw_config hw;
    const st_cost c = comm_case(&hw);
    const double n = 8, P = 1e9, bw = hw.dev.link_bw, lat = hw.dev.link_lat;
    st_time_opts o = {.hw = &hw, .mixed = true, .optim_states = 2, .bucket_cap_mb = 25, .micro = 1, .accum = 4,
                      .zero = 1, .gather_bytes = 2};
    st_time z1, z2, z2a1, z1a1;
    st_time_estimate(&c, (int64_t)P, &o, &z1);
    o.zero = 2;
    st_time_estimate(&c, (int64_t)P, &o, &z2);
    o.accum = 1;
    st_time_estimate(&c, (int64_t)P, &o, &z2a1);
    o.zero = 1;
    st_time_estimate(&c, (int64_t)P, &o, &z1a1);
    const double ag = (n - 1) / n * 2 * P / bw + (n - 1) * lat; /* the all-gather, once a step */
    CHECK_CLOSE(z2.comm_s - ag, 4 * (z1.comm_s - ag), 1e-9);
    CHECK_CLOSE(z2.exposed_s - ag, 4 * (z1.exposed_s - ag), 1e-9);
    CHECK(z2.exposed_s > z1.exposed_s, "zero2 %g s exposed, zero1 %g s", z2.exposed_s, z1.exposed_s);
    CHECK_CLOSE(z2a1.comm_s, z1a1.comm_s, 1e-12);
    CHECK_CLOSE(z2a1.step_s, z1a1.step_s, 1e-12);
}

/* An offloaded optimizer step: the update streams host memory (a PCIe
 * server's shared by its GPUs, a GH200's Grace its own) and the fp32
 * gradients go down and the weights up over the host link (PCIe, or
 * GH200's NVLink-C2C): shard * (4 (3 + 2 states) + 2) bytes / host memory
 * + shard * 8 / host link. */
static void test_offload_host(void) {
    const double P = 1e9, ob = 4.0 * (3 + 2 * 2) + 2;
    st_cost c;
    memset(&c, 0, sizeof c);
    c.fwd_flops = 1e12, c.bwd_flops = 2e12;
    st_hw_config h100, gh200;
    CHECK_OK(st_hw_config_parse("4xH100", NULL, NULL, &h100));
    CHECK_OK(st_hw_config_parse("4xGH200", NULL, NULL, &gh200));
    st_time_opts o = {.hw = &h100,
                      .mixed = true,
                      .optim_states = 2,
                      .bucket_cap_mb = 25,
                      .micro = 1,
                      .accum = 1,
                      .zero = 2,
                      .offload = true,
                      .gather_bytes = 2};
    st_time th, tg;
    st_time_estimate(&c, (int64_t)P, &o, &th);
    o.hw = &gh200;
    st_time_estimate(&c, (int64_t)P, &o, &tg);
    const double shard = P / 4;
    CHECK_CLOSE(th.optim_s, shard * ob / (100e9 / 4) + shard * 8 / h100.dev.host_bw, 1e-9);
    CHECK_CLOSE(tg.optim_s, shard * ob / gh200.dev.host_mem_bw + shard * 8 / gh200.dev.host_bw, 1e-9);
    CHECK(tg.optim_s < th.optim_s / 5, "offload on 4 GH200 %.1f ms, on 4 H100 %.1f ms", 1e3 * tg.optim_s,
          1e3 * th.optim_s);
}

int main(void) {
    test_offload_host();
    test_wire_bytes();
    test_zero2_every_micro_step();
    test_cnn_work();
    test_device_charges();
    test_bench_configs();
    return st_test_finish("test_hw_time");
}
