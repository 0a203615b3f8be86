#!/usr/bin/env bash
# bench/bench_cuda_kernels (the GPU session's timing of a layer's kernel
# variants, scripts/gpu-session.sh) on the CUDA emulator (make emu), at 64
# rows: it runs each layernorm case, times both kernels and finds their dx,
# dweight and dbias bit for bit the same; then, given a bad argument, it
# says how to call it. Its times here are the emulator's (CPU) and not
# checked: the program is, so that it cannot rot between GPU sessions.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_emu
bench=$build/bench/bench_cuda_kernels
[ -x "$bench" ] || { echo "FAIL: $bench is not built (make emu builds it)"; exit 1; }
out=$("$bench" 1 64 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "bench_cuda_kernels 1 64: exit $rc"
for c in "64x768 bf16, dx added to" "64x768 bf16, dx written" "64x1024 bf16, dx added to"; do
    grep -qE "^layernorm backward $c: floats [0-9.]+ us \([0-9.]+ TB/s\), packed [0-9.]+ us \([0-9.]+ TB/s\): packed/floats [0-9.]+x; dx, dweight, dbias bit-equal: yes$" <<<"$out" ||
        fail "no line for layernorm $c with both kernels timed and bit-equal"
done
out=$("$bench" 0 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -q "^usage: bench_cuda_kernels \[rounds, at least 1" <<<"$out" ||
    fail "bench_cuda_kernels 0: exit $rc, wanted 2 and its usage: $out"
e2e_finish "bench_cuda_kernels times both layernorm kernels, and they agree bit for bit"
