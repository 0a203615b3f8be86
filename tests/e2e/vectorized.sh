#!/usr/bin/env bash
# The element-wise hot loops that call core/fastmath.h (GELU's tanh, the
# cross-entropy layers' and attention's exp) compile to packed
# (vectorized) arithmetic in the built binary. A performance property
# checked without timing anything: gcc leaves such a loop scalar when one
# of its operations stops being if-convertible (as the clamps before rintf
# were without -fno-trapping-math, which made GELU 17% of a small GPT's step
# instead of 4% and went unnoticed within the benchmark's noise). Reads the
# disassembly of each loop's OpenMP body: packed single-precision adds,
# multiplies, divides or FMAs (…ps) must appear, scalar ones (…ss) are what
# a scalar loop has.
source "$(dirname "$0")/../lib/e2e.sh"
command -v objdump >/dev/null || e2e_skip "objdump is missing (apt-get install binutils)"
[ "$(uname -m)" = x86_64 ] || e2e_skip "the check reads x86-64 instructions; this is $(uname -m)"
e2e_tmpdir
objdump -d --no-show-raw-insn "$bin" >"$tmp/dis.txt" || fail "objdump $bin"
for fn in gelu_forward._omp_fn.0 gelu_backward._omp_fn.0 gelu_backward._omp_fn.1 \
    softmax_ce_forward._omp_fn.0 softmax_ce_backward._omp_fn.0 attention_forward._omp_fn.0 \
    linear_ce_forward._omp_fn.0; do
    body=$(awk -v f="<$fn>:" '$2 == f {p = 1; next} p && /^$/ {p = 0} p' "$tmp/dis.txt")
    [ -n "$body" ] || { fail "$fn: not in $bin (renamed, inlined or stripped?)"; continue; }
    packed=$(grep -cE '\s(v?(add|sub|mul|div)ps|vfn?m(add|sub)[0-9]+ps)\s' <<<"$body")
    scalar=$(grep -cE '\s(v?(add|sub|mul|div)ss|vfn?m(add|sub)[0-9]+ss)\s' <<<"$body")
    if [ "$packed" -ge 8 ]; then
        echo "$fn: $packed packed arithmetic instructions ($scalar scalar)"
    else
        fail "$fn: $packed packed arithmetic instructions, $scalar scalar: the loop is not vectorized"
    fi
done
e2e_finish ok
