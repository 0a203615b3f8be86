#!/usr/bin/env bash
# A GPU the driver sees and this build cannot use (a machine without the
# CUDA libraries, a driver older than the runtime): the probe sees it, the
# CUDA runtime does not (tests/lib/one_gpu_driver.c as libcuda.so.1 on
# LD_LIBRARY_PATH shows one "Fake GPU" to the probe and lacks what the
# runtime needs).
#  1. check's cuda line is a FAIL naming the GPU and the runtime's reason,
#     its nccl line says there is no usable GPU, and check says not ready;
#  2. train with train.device auto trains on the CPU, the effective
#     configuration giving the runtime's reason, and plan plans "local" on
#     the CPU (fp32), saying why, where it planned the GPU the probe saw;
#  3. without the fake driver check's cuda line is a skip again (no driver).
# Skips, saying why, in builds without CUDA.
source "$(dirname "$0")/../lib/e2e.sh"
[ -x "$bin" ] || { echo "FAIL: $bin is not built"; exit 1; }
e2e_need_fmnist
e2e_tmpdir
export OMP_WAIT_POLICY=PASSIVE
mkdir -p "$tmp/driver"
cc -shared -fPIC -O2 -o "$tmp/driver/libcuda.so.1" tests/lib/one_gpu_driver.c ||
    { echo "FAIL: cannot build the one-GPU driver"; exit 1; }
probe=$(LD_LIBRARY_PATH="$tmp/driver" "$bin" plan --probe --set model.type=mlp 2>&1)
grep -q "^  gpu 0: Fake GPU, 80.0 GiB, compute capability 9.0" <<<"$probe" ||
    fail "the probe does not see the fake GPU: $probe"
LD_LIBRARY_PATH="$tmp/driver" "$bin" train --set train.steps=1 --set train.out_dir="$tmp/probe-run" >"$tmp/dev.txt" 2>&1
! grep -q "device: *cpu *# auto: this scaletrain was built without CUDA" "$tmp/dev.txt" || e2e_skip "this build has no CUDA"

# 1. check: a FAIL naming the GPU and why
out=$(LD_LIBRARY_PATH="$tmp/driver" timeout 600 "$bin" check --set train.out_dir="$tmp/check" 2>&1); rc=$?
grep -E "^(ok|skip|FAIL) +(cuda|nccl|cudnn) " <<<"$out"
[ $rc -eq 1 ] || fail "check exited $rc, not 1"
grep -qE "^FAIL +cuda +the driver sees 1 GPU \(Fake GPU\), and this build cannot use it: no CUDA device: .+; training runs on the CPU$" <<<"$out" ||
    fail "check's cuda line: $(grep cuda <<<"$out")"
! grep -qE "^ok +nccl " <<<"$out" || fail "check's nccl line is ok without a usable GPU"
! grep -qE "^[a-zA-Z]+ +cudnn " <<<"$out" || fail "a cudnn line without a usable GPU"
[ "$(tail -n 1 <<<"$out")" = "not ready: 1 check failed" ] || fail "check's last line: $(tail -n 1 <<<"$out")"

# 2. train, device auto: the CPU, saying why
grep -q "device: *cpu *# auto: no CUDA device: " "$tmp/dev.txt" ||
    fail "the effective configuration does not say why the CPU: $(grep device: "$tmp/dev.txt")"
grep -q "^done: 1 steps" "$tmp/dev.txt" || fail "the run did not finish: $(tail -3 "$tmp/dev.txt")"

out=$(LD_LIBRARY_PATH="$tmp/driver" timeout 300 "$bin" plan --set log.peak_gflops=50 2>&1)
grep -qE "^cuda: the driver sees 1 GPU \(Fake GPU\), and this build cannot use it: no CUDA device: .+; local is planned on the CPU$" <<<"$out" ||
    fail "plan does not say why local is the CPU: $out"
grep -qE "^local +1 +[0-9]+ +[0-9]+ +ddp +fp32 " <<<"$out" || fail "plan's local row is not the CPU's: $(grep ^local <<<"$out")"

# 3. without it
out=$(timeout 600 "$bin" check --set train.out_dir="$tmp/check2" 2>&1)
grep -qE "^skip +cuda " <<<"$out" || fail "check's cuda line without the fake driver: $(grep cuda <<<"$out")"
e2e_finish "a GPU the driver sees and the build cannot use fails check, naming it and why; training takes the CPU"
