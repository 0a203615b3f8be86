#!/usr/bin/env bash
# bench/bench_cuda_kernels (the GPU session's timing of the kernel variants
# against their layers' defaults, scripts/gpu-session.sh) on the CUDA
# emulator (make emu), at 64 rows and, for the fused head, a vocabulary of
# 1000 (its two variants: a group loaded ahead, the row kept in shared
# memory): it runs each case, times both sides and finds their outputs bit for
# bit the same, and times the embedding's backward on uniform and on Zipf
# tokens; then, given a bad argument, it says how to call it. Its
# times here are the emulator's (CPU) and not checked: the program is, so
# that it cannot rot between GPU sessions.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_emu
bench=$build/bench/bench_cuda_kernels
[ -x "$bench" ] || { echo "FAIL: $bench is not built (make emu builds it)"; exit 1; }
out=$("$bench" 1 64 1000 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "bench_cuda_kernels 1 64 1000: exit $rc"
times='default [0-9.]+ us \([0-9.]+ TB/s\), ([a-z]+) [0-9.]+ us \([0-9.]+ TB/s\): \1/default [0-9.]+x; outputs bit-equal: yes$'
for c in "layernorm backward 64x768 bf16, dx added to" "layernorm backward 64x768 bf16, dx written" \
    "layernorm backward 64x1024 bf16, dx added to"; do
    grep -qE "^$c: $times" <<<"$out" || fail "no line for $c with both sides timed and bit-equal"
done
head="fused head forward 64x768 into 1000 bf16 \(the rows kernel's bytes\)"
for v in prefetch shared; do
    grep -E "^$head: $times" <<<"$out" | grep -q " $v [0-9.]* us" ||
        fail "no line for the fused head's $v variant with both sides timed and bit-equal"
done
grep -qE "^embedding backward 64 tokens into 1000x768, bf16 gradient: uniform tokens \(the most frequent [0-9]+ times\) [0-9.]+ us, Zipf s=1 \([0-9]+ times\) [0-9.]+ us: Zipf/uniform [0-9.]+x$" <<<"$out" ||
    fail "no line for the embedding's backward on uniform and Zipf tokens"
out=$("$bench" 0 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -q "^usage: bench_cuda_kernels \[rounds, at least 1" <<<"$out" ||
    fail "bench_cuda_kernels 0: exit $rc, wanted 2 and its usage: $out"
e2e_finish "bench_cuda_kernels times each kernel variant against its default, and they agree bit for bit"
