#!/usr/bin/env bash
# OpenBLAS's kernels (src/core/blas.h, st_blas_core_check). OpenBLAS picks
# them as it loads, by the CPU's model; on a CPU newer than the library it
# falls back to its SSE3 ones (Prescott), and scaletrain starts itself
# again with the CPU's own (OPENBLAS_CORETYPE). tests/run.sh sets
# OPENBLAS_CORETYPE for every test (no process starts twice); this test
# clears it and checks, with OpenBLAS's own report (OPENBLAS_VERBOSE=2:
# "Core: NAME" as it loads):
#  1. the kernels scaletrain runs: OpenBLAS's choice when that has AVX2 or
#     better or the CPU has neither AVX2 nor AVX-512 (one load, no "blas:"
#     line); else the best of Cooperlake (AVX-512 with BF16), SkylakeX
#     (AVX-512) and Haswell (AVX2 and FMA) the CPU runs, loaded second, and
#     the "blas:" line of a train run's header and of plan names both;
#  2. OPENBLAS_CORETYPE set by the user is kept (one load, those kernels);
#  3. two ranks under launch and under mpirun directly (each rank starting
#     itself again) train to the same loss as with the variable set.
source "$(dirname "$0")/../lib/e2e.sh"
[ -x "$bin" ] || { echo "FAIL: $bin is not built"; exit 1; }
e2e_tmpdir
unset OPENBLAS_CORETYPE ST_BLAS_CORE_WAS
source tests/lib/tiny_gpt.sh
case "$(uname -m)" in x86_64) ;; *) e2e_skip "the kernels are chosen on x86-64 only" ;; esac

cores=$(OPENBLAS_VERBOSE=2 "$bin" help 2>&1 >/dev/null | sed -n 's/^Core: //p')
own=$(head -1 <<<"$cores") ran=$(tail -1 <<<"$cores")
[ -n "$own" ] || fail "OPENBLAS_VERBOSE=2 printed no 'Core:' line"
flags=$(grep -m1 '^flags' /proc/cpuinfo)
has() { grep -qw "$1" <<<"$flags"; }
want=
if has avx512f && has avx512vl && has avx512bw && has avx512dq; then
    want=SkylakeX
    ! has avx512_bf16 || want=Cooperlake
elif has avx2 && has fma; then
    want=Haswell
fi
case "${own,,}" in
prescott | core2 | penryn | dunnington | nehalem | atom | opteron | opteron_sse3 | barcelona | bobcat | nano | \
    sandybridge | bulldozer | piledriver | steamroller | excavator) low=1 ;;
*) low= ;;
esac
"$bin" "${run[@]}" --set train.steps=2 --set train.out_dir="$tmp/one" >"$tmp/one.log" 2>&1 || fail "train: $(tail -2 "$tmp/one.log")"
if [ -n "$low" ] && [ -n "$want" ]; then
    echo "OpenBLAS chose $own on a CPU that runs $want: scaletrain runs $ran"
    [ "$(wc -l <<<"$cores")" -eq 2 ] && [ "$ran" = "$want" ] || fail "loaded: $(paste -sd' ' <<<"$cores"), not $own then $want"
    grep -q "^blas: OpenBLAS took this CPU (family [0-9]*, model [0-9]*) for a $own; its $want kernels run instead" \
        "$tmp/one.log" || fail "no 'blas:' line naming $own and $want: $(grep blas "$tmp/one.log")"
    "$bin" plan "${run[@]:1}" >"$tmp/plan.log" 2>&1 || fail "plan: $(tail -2 "$tmp/plan.log")"
    grep -q "^blas: OpenBLAS took this CPU .* for a $own; its $want kernels" "$tmp/plan.log" ||
        fail "plan: no 'blas:' line under its cpu line: $(grep -E '^(cpu|blas)' "$tmp/plan.log")"
else
    echo "OpenBLAS chose $own (the CPU runs ${want:-neither AVX2 nor AVX-512}): kept"
    [ "$(wc -l <<<"$cores")" -eq 1 ] || fail "loaded twice: $(paste -sd' ' <<<"$cores")"
    ! grep -q "^blas:" "$tmp/one.log" || fail "a 'blas:' line: $(grep '^blas:' "$tmp/one.log")"
fi

# 2. the user's choice
cores=$(OPENBLAS_CORETYPE=Prescott OPENBLAS_VERBOSE=2 "$bin" help 2>&1 >/dev/null | sed -n 's/^Core: //p')
[ "$cores" = Prescott ] || fail "OPENBLAS_CORETYPE=Prescott: loaded $(paste -sd' ' <<<"$cores")"

# 3. ranks: the loss of step 4 the same as with the variable set
loss() { sed -nE 's/^step 4\/4 .*\| loss ([0-9.]+) .*/\1/p' "$1" | head -1; }
if command -v mpirun >/dev/null; then
    e2e_mpi 120
    r=("${run[@]}" --set train.steps=4 --set log.every=1 --set log.progress=off)
    OPENBLAS_CORETYPE=$ran timeout 120 "$bin" launch -n 2 "${r[@]}" --set train.out_dir="$tmp/set" >"$tmp/set.log" 2>&1 ||
        fail "launch, OPENBLAS_CORETYPE=$ran: $(tail -2 "$tmp/set.log")"
    timeout 120 "$bin" launch -n 2 "${r[@]}" --set train.out_dir="$tmp/launch" >"$tmp/launch.log" 2>&1 ||
        fail "launch: $(tail -2 "$tmp/launch.log")"
    "${mpi[@]}" -np 2 "$bin" "${r[@]}" --set train.out_dir="$tmp/mpirun" >"$tmp/mpirun.log" 2>&1 ||
        fail "mpirun: $(tail -2 "$tmp/mpirun.log")"
    want_loss=$(loss "$tmp/set.log")
    [ -n "$want_loss" ] || fail "no step 4 loss with OPENBLAS_CORETYPE set: $(tail -2 "$tmp/set.log")"
    for w in launch mpirun; do
        [ "$(loss "$tmp/$w.log")" = "$want_loss" ] || fail "$w: step 4's loss $(loss "$tmp/$w.log"), not $want_loss"
    done
    echo "two ranks under launch and mpirun: step 4's loss $want_loss, as with OPENBLAS_CORETYPE=$ran"
else
    echo "ranks: skipped: mpirun is missing (apt-get install openmpi-bin libopenmpi-dev)"
fi
e2e_finish "OpenBLAS's kernels: the CPU's own, the user's when set"
