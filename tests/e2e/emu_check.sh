#!/usr/bin/env bash
# `scaletrain check` on a machine with GPUs: the CUDA emulator's build (make
# emu) with two emulated devices, then one. tests/run.sh passes it the
# emulator's build folder; given any other build it skips.
#  1. Two devices: the `gpu ddp` line (2 ranks through the launcher with
#     train.device cuda, their weights against 1 CPU rank's with the same
#     global batch) and the `gpu comm` line (a 64 MiB all-reduce of device
#     memory through NCCL on both, every element checked; the emulator has
#     no NVML, so no link to compare with, and the allreduce line points at
#     no comparison) are ok, and check says ready. The driver probe sees the
#     devices (the emulator's libcuda.so.1): the cuda line names them, and
#     the memory line plans the run on a device; `plan` plans local on 2 of
#     them, and on the CPU with train.device cpu, as the run does.
#  2. One device: `gpu ddp` runs a single GPU rank; no `gpu comm` line;
#     the `cudnn` line says the emulator has none (a build with cuDNN
#     names its version there; on a machine without GPUs there is no line).
#  3. A GPU self-test that fails is a FAIL line and exit 1: the emulator's
#     device memory cut to 1 MiB (ST_CUDAEMU_MEM_MB), too small for the run;
#     with train.device cpu the GPUs are not checked, and check says ready.
# tests/run.sh: long (one of the suite's longest: started before the others)
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_mpirun
e2e_need_emu
e2e_tmpdir
export OMP_WAIT_POLICY=PASSIVE
cfg=(--set train.out_dir="$tmp/out" --set data.val=)

out=$(ST_CUDAEMU_DEVICES=2 timeout 600 "$bin" check "${cfg[@]}" 2>&1); rc=$?
echo "$out" | grep -E "^(ok|FAIL|warn|skip) +gpu "
[ $rc -eq 0 ] || fail "two devices: exit $rc: $(grep -E '^FAIL' <<<"$out")"
grep -qE "^ok +gpu ddp +2 ranks on 2 GPUs x 10 steps of a tiny gpt: the weights equal 1 CPU rank's \(relative difference [0-9.e+-]+, tolerance 0.001\)$" <<<"$out" ||
    fail "two devices: the gpu ddp line"
grep -qE "^ok +gpu comm +2 GPUs, 64 MiB through NCCL: [0-9.]+ ms, bus bandwidth [0-9.]+ GB/s, every element right \(the link between the GPUs was not probed, NVML is not available: no comparison\)$" <<<"$out" ||
    fail "two devices: the gpu comm line: $(grep "gpu comm" <<<"$out")"
grep -qE "^(ok|warn) +allreduce " <<<"$out" && ! grep -E "^(ok|warn) +allreduce " <<<"$out" | grep -q "gpu comm" ||
    fail "two devices: the allreduce line points at a gpu comm comparison that is not made: $(grep allreduce <<<"$out")"
grep -qE "^ok +cuda +2 devices, the first scaletrain CUDA emulator \(CPU\) \(16 GiB\)$" <<<"$out" ||
    fail "two devices: the cuda line: $(grep -E "^[a-zA-Z]+ +cuda " <<<"$out")"
grep -qE "^ok +memory +micro-batch [0-9]+ \(accumulating [0-9]+\) needs [0-9.]+ GiB per device of [0-9.]+ GiB usable$" <<<"$out" ||
    fail "two devices: the memory line does not plan a device: $(grep memory <<<"$out")"
out=$(ST_CUDAEMU_DEVICES=2 timeout 600 "$bin" plan --set log.peak_gflops=10 2>&1); rc=$?
[ $rc -eq 0 ] && grep -qE "^local +2 +[0-9]+ +[0-9]+ ddp +bf16 " <<<"$out" ||
    fail "two devices: plan: exit $rc: $(grep -E "^local" <<<"$out")"
out=$(ST_CUDAEMU_DEVICES=2 timeout 600 "$bin" plan --set log.peak_gflops=10 --set train.device=cpu 2>&1); rc=$?
[ $rc -eq 0 ] && grep -qE "^local +1 +[0-9]+ +[0-9]+ ddp +fp32 " <<<"$out" &&
    grep -qx "cuda: train.device cpu: the GPUs are left alone; local is planned on the CPU" <<<"$out" ||
    fail "two devices, train.device cpu: plan: exit $rc: $(grep -E "^(cuda|local)" <<<"$out")"

out=$(ST_CUDAEMU_DEVICES=1 timeout 600 "$bin" check "${cfg[@]}" 2>&1); rc=$?
[ $rc -eq 0 ] || fail "one device: exit $rc: $(grep -E '^FAIL' <<<"$out")"
grep -qE "^ok +gpu ddp +1 rank on 1 GPU x 10 steps" <<<"$out" || fail "one device: the gpu ddp line"
! grep -q "gpu comm" <<<"$out" || fail "one device: a gpu comm line"
grep -qE "^skip +cudnn +the CUDA emulator has no cuDNN: a gpt's attention runs on scaletrain's flash kernels$" <<<"$out" ||
    fail "one device: the cudnn line: $(grep cudnn <<<"$out")"

# (the memory line fails too, planned on the 1 MiB device as the run would plan it, its hint naming
# what takes it: the backend's own, which a GPU with more free memory holds; with train.device cpu
# the GPUs are not checked at all: that run trains on the CPU, a broken GPU is not its to fail)
out=$(ST_CUDAEMU_DEVICES=1 ST_CUDAEMU_MEM_MB=1 timeout 600 "$bin" check "${cfg[@]}" 2>&1); rc=$?
echo "$out" | grep -E "^FAIL +(gpu|memory) " | cut -c1-160
[ $rc -eq 1 ] && grep -qE "^FAIL +gpu ddp +1 rank on the GPU \(train.device cuda\) exited" <<<"$out" ||
    fail "a GPU too small: exit $rc, $(grep -E 'gpu' <<<"$out")"
grep -qE "^FAIL +memory +does not fit: [0-9.]+ GiB needed per device, at micro-batch 1, the smallest; .*the GPU backend's own \(cuBLASLt's workspace, the 16-bit operand scratch\) takes the most" <<<"$out" ||
    fail "a GPU too small: the memory line: $(grep memory <<<"$out")"
out=$(ST_CUDAEMU_DEVICES=1 ST_CUDAEMU_MEM_MB=1 timeout 600 "$bin" check "${cfg[@]}" --set train.device=cpu 2>&1); rc=$?
[ $rc -eq 0 ] && ! grep -qE "^FAIL" <<<"$out" && grep -qE "^skip +cuda +train.device cpu" <<<"$out" ||
    fail "train.device cpu beside a GPU too small: exit $rc, $(grep -E '^(FAIL|skip)' <<<"$out")"
grep -qE "^ok +memory +micro-batch [0-9]+ \(accumulating [0-9]+\) needs [0-9.]+ GiB per rank of" <<<"$out" ||
    fail "train.device cpu: the memory line does not plan the CPU: $(grep memory <<<"$out")"

# 3b. Two devices and no mpirun on PATH: mpi FAIL, ddp skipped, and the
#     GPU self-test still runs one rank on the first GPU, its line saying
#     the GPUs as ranks need MPI (it was left out without a line before).
mkdir -p "$tmp/nompi"
out=$(ST_CUDAEMU_DEVICES=2 timeout 600 env PATH="$tmp/nompi" "$bin" check "${cfg[@]}" 2>&1); rc=$?
echo "$out" | grep -E "^(ok|FAIL|warn|skip) +(mpi|ddp|gpu ddp) " | cut -c1-200
[ $rc -eq 1 ] && grep -qE "^FAIL +mpi +mpirun is not on PATH" <<<"$out" && grep -qE "^skip +ddp " <<<"$out" ||
    fail "no mpirun: exit $rc: $(grep -E '^(FAIL|skip)' <<<"$out")"
grep -qE "^ok +gpu ddp +1 rank on 1 GPU x 10 steps of a tiny gpt: the weights equal 1 CPU rank's \(relative difference [0-9.e+-]+, tolerance 0.001\); the 2 GPUs as ranks \(NCCL between them\) need MPI \(above\)$" <<<"$out" ||
    fail "no mpirun: the gpu ddp line: $(grep 'gpu ddp' <<<"$out")"

# 4. A GPU older than the kernels (compute capability 7.5, ST_CUDAEMU_CC):
#    train.device cuda is an error naming it and the fix; auto trains on the
#    CPU and the effective config says why. As the run takes it, so do the
#    others (the device count has no usable device): check FAILs the cuda
#    line with the reason, runs no GPU self-test and plans the memory of a
#    CPU rank; plan plans local on the CPU, saying why; launch -n auto
#    starts one rank. (check had said "ok cuda", FAILed its GPU self-test
#    and planned the GPU; plan planned it; launch started a rank per GPU.)
tr=(train --set train.steps=1 --set train.eval_every=0 --set data.val= --set data.num_workers=0)
out=$(ST_CUDAEMU_CC=75 timeout 120 "$bin" "${tr[@]}" --set train.device=cuda --set train.out_dir="$tmp/cc-cuda" 2>&1)
rc=$?
[ $rc -ne 0 ] && grep -q "has compute capability 7.5: scaletrain's CUDA kernels need 8.0 or later" <<<"$out" &&
    grep -q "use train.device: cpu (or auto)" <<<"$out" || fail "compute capability 7.5, train.device cuda: exit $rc: $out"
out=$(ST_CUDAEMU_CC=75 timeout 120 "$bin" "${tr[@]}" --set train.out_dir="$tmp/cc-auto" 2>&1)
rc=$?
[ $rc -eq 0 ] && grep -qE "device: +cpu +# auto: .*compute capability 7.5" <<<"$out" ||
    fail "compute capability 7.5, train.device auto: exit $rc: $(grep -i device <<<"$out")"
# (the reason whole, with its fix, in a note: the effective config's note is cut at 96 bytes)
grep -qE "^scaletrain: note: train.device auto: this run trains on the CPU: no CUDA device usable: .*compute capability 7.5: .* \(bf16 tensor cores: A100, A10, L4, L40S, H100 and newer\)$" <<<"$out" ||
    fail "compute capability 7.5, train.device auto: no note with the whole reason: $(grep -i note <<<"$out")"
old="no CUDA device usable: cuda:0 (scaletrain CUDA emulator (CPU)) has compute capability 7.5: scaletrain's CUDA kernels need 8.0 or later"
out=$(ST_CUDAEMU_CC=75 timeout 600 "$bin" check "${cfg[@]}" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -qF "FAIL  cuda      the driver sees 2 GPUs (scaletrain CUDA emulator (CPU)), and this build cannot use them: $old" <<<"$out" &&
    ! grep -q "gpu ddp" <<<"$out" && [ "$(grep -c "^FAIL" <<<"$out")" -eq 1 ] ||
    fail "compute capability 7.5: check: exit $rc: $(grep -E "^(FAIL|[a-z]+ +(cuda|gpu))" <<<"$out")"
grep -qE "^ok +memory +micro-batch [0-9]+ \(accumulating [0-9]+\) needs [0-9.]+ GiB per rank of" <<<"$out" ||
    fail "compute capability 7.5: check plans a device: $(grep memory <<<"$out")"
out=$(ST_CUDAEMU_CC=75 timeout 600 "$bin" plan --set log.peak_gflops=10 2>&1); rc=$?
[ $rc -eq 0 ] && grep -qF "$old" <<<"$out" && grep -q "; local is planned on the CPU$" <<<"$out" &&
    grep -qE "^local +1 +[0-9]+ +[0-9]+ ddp +fp32 " <<<"$out" ||
    fail "compute capability 7.5: plan: exit $rc: $(grep -E "^(cuda|local)" <<<"$out")"
out=$(ST_CUDAEMU_CC=75 timeout 120 "$bin" launch -n auto sh -c 'echo "world $OMPI_COMM_WORLD_SIZE"' 2>&1); rc=$?
[ $rc -eq 0 ] && grep -qx "world 1" <<<"$out" ||
    fail "compute capability 7.5: launch -n auto: exit $rc: $out"

# 5. model.attention_kernel=cudnn where it cannot run, an error naming why
#    and the fix before any step: an fp32 run (cuDNN's attention is bf16),
#    and the emulator, which has no cuDNN; on rank 0 of two alone, every
#    rank ends. On the CPU the setting is ignored.
for i in $(seq 1 50); do echo "the quick brown fox $i jumps over the lazy dog"; done >"$tmp/text.txt"
"$bin" data tokenize "$tmp/t.tokens" "$tmp/text.txt" >/dev/null || fail tokenize
gpt=(--set model.type=gpt --set data.type=tokens --set data.train="$tmp/t.tokens" --set model.n_layer=1
     --set model.n_embd=32 --set model.n_head=2 --set model.block_size=16 --set train.batch_size=2)
out=$(ST_CUDAEMU_DEVICES=1 timeout 120 "$bin" "${tr[@]}" "${gpt[@]}" --set train.device=cuda \
    --set model.attention_kernel=cudnn --set train.out_dir="$tmp/cudnn" 2>&1)
rc=$?
[ $rc -ne 0 ] && grep -q "model.attention_kernel=cudnn: the CUDA emulator has no cuDNN; set model.attention_kernel: flash" <<<"$out" ||
    fail "attention_kernel cudnn on the emulator: exit $rc: $out"
out=$(ST_CUDAEMU_DEVICES=1 timeout 120 "$bin" "${tr[@]}" "${gpt[@]}" --set train.device=cuda --set precision=fp32 \
    --set model.attention_kernel=cudnn --set train.out_dir="$tmp/cudnn32" 2>&1)
rc=$?
[ $rc -ne 0 ] && grep -q "model.attention_kernel=cudnn needs precision bf16 (scaletrain runs cuDNN's fused attention on bf16 tensors) and this run is fp32: set precision: bf16, or model.attention_kernel: flash" <<<"$out" ||
    fail "attention_kernel cudnn in fp32: exit $rc: $out"
# two ranks, rank 0 alone set to cudnn (model.attention_kernel may differ
# between ranks; cuDNN is each node's): rank 0 names its error, rank 1 that
# it failed on another rank, and both end before any step (rank 0 took the
# error for every rank's and waited in the error report while rank 1 went on
# to the planner: "collectives out of step")
e2e_mpi 120
out=$(ST_CUDAEMU_DEVICES=2 "${mpi[@]}" -x ST_CUDAEMU_DEVICES -np 1 "$bin" "${tr[@]}" "${gpt[@]}" --set train.device=cuda \
    --set model.attention_kernel=cudnn --set train.out_dir="$tmp/cudnn2" : -np 1 "$bin" "${tr[@]}" "${gpt[@]}" \
    --set train.device=cuda --set model.attention_kernel=flash --set train.out_dir="$tmp/cudnn2" 2>&1)
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "rank 0.*model.attention_kernel=cudnn: the CUDA emulator has no cuDNN" <<<"$out" &&
    grep -q "rank 1.*model.attention_kernel=cudnn failed on another rank" <<<"$out" &&
    ! grep -q "out of step" <<<"$out" && ! grep -q "^step " <<<"$out" ||
    fail "attention_kernel cudnn on rank 0 alone: exit $rc: $out"
out=$(timeout 120 "$bin" "${tr[@]}" "${gpt[@]}" --set train.device=cpu --set model.attention_kernel=cudnn \
    --set train.out_dir="$tmp/cudnn-cpu" 2>&1)
rc=$?
[ $rc -eq 0 ] || fail "attention_kernel cudnn on the CPU: exit $rc: $out"
# model.attention_kernel auto: cuDNN's in bf16 from compute capability 9.0
#    where this build and node have it; else the flash kernels, the
#    effective config saying why (here: the emulator has no cuDNN; fp32; an
#    sm_80 GPU)
out=$(ST_CUDAEMU_DEVICES=1 timeout 120 "$bin" "${tr[@]}" "${gpt[@]}" --set train.device=cuda \
    --set train.out_dir="$tmp/ak-auto" 2>&1)
rc=$?
[ $rc -eq 0 ] && grep -qE "attention_kernel: +flash +# auto: no cuDNN attention here \(.scaletrain check. says why\)" <<<"$out" ||
    fail "attention_kernel auto on the emulator: exit $rc: $(grep attention_kernel <<<"$out")"
out=$(ST_CUDAEMU_DEVICES=1 timeout 120 "$bin" "${tr[@]}" "${gpt[@]}" --set train.device=cuda --set precision=fp32 \
    --set train.out_dir="$tmp/ak-fp32" 2>&1)
rc=$?
[ $rc -eq 0 ] && grep -qE "attention_kernel: +flash +# auto: cuDNN's attention takes bf16 and this run is fp32" <<<"$out" ||
    fail "attention_kernel auto in fp32: exit $rc: $(grep attention_kernel <<<"$out")"
out=$(ST_CUDAEMU_CC=80 ST_CUDAEMU_DEVICES=1 timeout 120 "$bin" "${tr[@]}" "${gpt[@]}" --set train.device=cuda \
    --set train.out_dir="$tmp/ak-sm80" 2>&1)
rc=$?
[ $rc -eq 0 ] && grep -qE "attention_kernel: +flash +# auto: cuDNN's is the default from sm_90 \(measured there\); this GPU is sm_80" <<<"$out" ||
    fail "attention_kernel auto on sm_80: exit $rc: $(grep attention_kernel <<<"$out")"
# 6. train.device cuda:N: GPU N of the node's (the run's header names it);
#    a number past the node's GPUs is an error naming those there are; with
#    two ranks on the node cuda:N is an error saying to use cuda.
#    One rank with train.device cuda on a node of 2 GPUs trains on cuda:0
#    and notes that `launch -n 2` would use both (an evaluation, that
#    `launch -n 2 eval` would share it); cuda:1 (a GPU chosen) and 2 ranks
#    have no such note.
out=$(ST_CUDAEMU_DEVICES=2 timeout 120 "$bin" "${tr[@]}" --set train.device=cuda:1 --set train.out_dir="$tmp/dev1" 2>&1)
rc=$?
[ $rc -eq 0 ] && grep -qE "^device: cuda:1 \(" <<<"$out" || fail "train.device cuda:1: exit $rc: $(grep -i device <<<"$out")"
! grep -q "scaletrain: note: this run trains on" <<<"$out" || fail "train.device cuda:1: a note about the other GPU"
out=$(ST_CUDAEMU_DEVICES=2 timeout 120 "$bin" "${tr[@]}" --set train.device=cuda --set train.out_dir="$tmp/devc" 2>&1)
rc=$?
[ $rc -eq 0 ] && grep -qE "^scaletrain: note: this run trains on cuda:0 \(.*\) alone, one of this node's 2 GPUs; \`scaletrain launch -n 2 train ...\` trains on all of them" <<<"$out" ||
    fail "train.device cuda, 1 rank, 2 GPUs: exit $rc, no note about launch -n 2: $out"
# (an evaluation's note says so and names eval)
out=$(ST_CUDAEMU_DEVICES=2 timeout 120 "$bin" eval --init "$tmp/devc" --set train.device=cuda --set data.num_workers=0 \
    --set train.eval_steps=1 --json 2>&1)
rc=$?
[ $rc -eq 0 ] && grep -qE "^scaletrain: note: this evaluation runs on cuda:0 \(.*\) alone, one of this node's 2 GPUs; \`scaletrain launch -n 2 eval ...\` shares it among all of them" <<<"$out" ||
    fail "eval, train.device cuda, 1 rank, 2 GPUs: exit $rc, no note about launch -n 2: $out"
tail -1 <<<"$out" | grep -qE '"eval_batch_size":[1-9]' || fail "eval --json: no eval_batch_size: $(tail -1 <<<"$out")"
out=$(ST_CUDAEMU_DEVICES=2 timeout 120 "$bin" launch -n 2 "${tr[@]}" --set train.device=cuda --set train.batch_size=4 \
    --set train.out_dir="$tmp/devc2" 2>&1)
rc=$?
[ $rc -eq 0 ] && ! grep -q "note: this run trains on" <<<"$out" || fail "train.device cuda on 2 ranks: exit $rc: $out"
# 7. launch -n auto: a rank per GPU of the node (2 emulated), and says so.
out=$(ST_CUDAEMU_DEVICES=2 timeout 60 "$bin" launch -n auto sh -c 'echo "size $OMPI_COMM_WORLD_SIZE"' 2>&1)
rc=$?
[ $rc -eq 0 ] && [ "$(grep -c "size 2$" <<<"$out")" -eq 2 ] &&
    grep -q "^scaletrain launch: -n auto: 2 ranks, one per GPU of this node" <<<"$out" ||
    fail "launch -n auto on 2 emulated GPUs: exit $rc: $out"
out=$(ST_CUDAEMU_DEVICES=2 timeout 120 "$bin" "${tr[@]}" --set train.device=cuda:2 --set train.out_dir="$tmp/dev2" 2>&1)
rc=$?
[ $rc -ne 0 ] && grep -q "train.device cuda:2: this node has 2 CUDA device(s), cuda:0 to cuda:1" <<<"$out" ||
    fail "train.device cuda:2 with 2 GPUs: exit $rc: $out"
out=$(ST_CUDAEMU_DEVICES=2 timeout 120 "$bin" launch -n 2 "${tr[@]}" --set train.device=cuda:0 \
    --set train.out_dir="$tmp/dev0x2" 2>&1)
rc=$?
[ $rc -ne 0 ] && grep -q "train.device cuda:0 names one GPU, and 2 ranks run on this node" <<<"$out" &&
    grep -q "use train.device: cuda, which gives each rank the GPU of its rank on the node" <<<"$out" ||
    fail "train.device cuda:0 with 2 ranks on the node: exit $rc: $out"

# 7. bench over more ranks than GPUs: the 2-rank run trains on the CPU, the 1-rank one on the GPU;
#    the speed-up between them compares devices, and bench says so (on stderr and in bench.md; it
#    gave a speed-up of 25 as scaling, without a word)
printf 'model: { type: mlp, hidden: [64] }\ndata: { num_workers: 0 }\n' >"$tmp/bench.yaml"
out=$(ST_CUDAEMU_DEVICES=1 timeout 600 "$bin" bench -n 1,2 "$tmp/bench.yaml" --steps 3 --warmup 1 --out "$tmp/bench" 2>&1); rc=$?
want="the 1-rank run trained on unknown: scaletrain CUDA emulator (CPU), and 2 ranks on cpu: the speed-up and efficiency against it compare devices, not scaling"
[ $rc -eq 0 ] && grep -qF "scaletrain bench: warning: $want" <<<"$out" && grep -qF "**Warning:** $want" "$tmp/bench/bench.md" ||
    fail "bench on 1 GPU and the CPU: exit $rc: $(grep -i warn <<<"$out")"
e2e_finish "gpu ddp and gpu comm lines on 2 and 1 emulated GPUs; a failing GPU self-test is a FAIL; without mpirun one GPU rank, saying so; a GPU older than 8.0 is refused (cuda) or left for the CPU (auto); attention_kernel cudnn refused in fp32 and without cuDNN, ignored on the CPU, auto flash there saying why; train.device cuda:N picks GPU N, refuses a GPU the node lacks and several ranks on the node; one rank of a 2-GPU node notes launch -n 2; launch -n auto starts a rank per GPU"
