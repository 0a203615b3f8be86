#!/usr/bin/env bash
# model.matmul_tune (docs/cuda.md, "Choosing cuBLASLt's algorithm"), on the
# CUDA emulator (make emu), whose heuristic offers three algorithms that
# compute alike, the third refusing when it runs:
#  1. auto is off, the effective configuration saying why, and the run's
#     summary counts no plan timed;
#  2. on: a bf16 gpt with the fused head, its bias gradients in the dW
#     products' epilogues and two micro-steps a step (dW added to: the
#     timing keeps what the product adds to on the host) trains to the same
#     bits as with it off, and the summary counts the plans timed
#     (matmul_tuned > 0, matmul_tune_switched at most that) and their
#     products' time at the timed speeds (matmul_tune_first_ms > 0, the
#     kept algorithms' matmul_tune_chosen_ms no more);
#  3. on 2 emulated GPUs under ZeRO-2 (NCCL's reduce-scatter and
#     all-gather queued beside the timing's waits for the compute stream):
#     the same bits as with it off, each rank's plans timed;
#  4. the algorithms kept in out_dir (matmul-algos-rank<R>.bin): a run
#     resumed there takes every plan's algorithm from the file, timing none
#     (matmul_tune_restored > 0, matmul_tuned 0), to the bits of the run
#     that never stopped; a damaged file, or one timed on another kind of
#     GPU (the emulator told it is sm_80), is said and passed over: the
#     plans are timed again.
#  5. the fusions a run reports (fused_gelu_fwd/bwd, fused_residual) are
#     those its products ran, none where cuBLASLt has no algorithm for them.
# On the emulator every algorithm computes alike, so any difference in the
# weights is the timing's own writes left behind.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_emu
e2e_need_numpy
e2e_need_mpirun
e2e_tmpdir
e2e_mpi 180
source tests/lib/tiny_gpt.sh # (the token file and run=(train ...): 32 wide, batches of 4 x 16)
gpt=("${run[@]}" --set model.n_layer=2 --set model.fused_head=on --set model.fused_bias_grad=on
     --set precision=bf16 --set train.micro_batch_size=2 --set train.steps=3 --set train.device=cuda
     --set optim.schedule=constant --set optim.warmup_steps=1 --set log.progress=off --json)

run() { # NAME ARGS...: train into $tmp/NAME on one emulated GPU, output in $tmp/NAME.out
    local name=$1
    shift
    ST_CUDAEMU_DEVICES=1 timeout 120 "$bin" "${gpt[@]}" --set train.out_dir="$tmp/$name" "$@" >"$tmp/$name.out" 2>&1 ||
        fail "$name: $(tail -n 3 "$tmp/$name.out")"
}
run2() { # NAME ARGS...: the same on 2 ranks, an emulated GPU each, under ZeRO-2
    local name=$1
    shift
    "${mpi[@]}" -np 2 "$bin" "${gpt[@]}" --set dist.strategy=zero2 --set train.out_dir="$tmp/$name" "$@" \
        >"$tmp/$name.out" 2>&1 || fail "$name: $(tail -n 3 "$tmp/$name.out")"
}
field() { grep -o "\"$2\":[0-9]*" "$tmp/$1.out" | tail -1 | cut -d: -f2; }

run auto
run on --set model.matmul_tune=on
grep -qE "matmul_tune: +off +# auto: off: cuBLASLt's heuristic, untimed" "$tmp/auto.out" ||
    fail "auto: the effective configuration does not say off and why: $(grep matmul_tune "$tmp/auto.out")"
[ "$(field auto matmul_tuned)" = 0 ] || fail "auto: $(field auto matmul_tuned) plans timed, want 0"
tuned=$(field on matmul_tuned)
switched=$(field on matmul_tune_switched)
[ -n "$tuned" ] && [ "$tuned" -gt 0 ] && [ "$switched" -le "$tuned" ] ||
    fail "on: ${tuned:-no} plans timed, ${switched:-no} switched (want some timed, at most that many switched)"
[ "$(field on bias_grad_epilogues)" -gt 0 ] || fail "on: no bias gradient summed in an epilogue"
/usr/bin/python3 - "$tmp/on.out" <<'PY' || fail "on: the timed products' times: $(grep -o '"matmul_tune_[a-z]*_ms":[^,]*' "$tmp/on.out")"
import json, sys
j = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][-1]
sys.exit(0 if 0 < j["matmul_tune_chosen_ms"] <= j["matmul_tune_first_ms"] else 1)
PY
echo -n "model.matmul_tune on against auto (off): "
/usr/bin/python3 tests/py/weights_diff.py "$tmp/auto/model.safetensors" "$tmp/on/model.safetensors" 0 ||
    fail "the weights trained with the timing differ from those without"

run2 z2-off
run2 z2-on --set model.matmul_tune=on
[ "$(field z2-on matmul_tuned)" -gt 0 ] 2>/dev/null || fail "zero2 on: $(field z2-on matmul_tuned) plans timed"
echo -n "model.matmul_tune on against off, 2 ranks under ZeRO-2: "
/usr/bin/python3 tests/py/weights_diff.py "$tmp/z2-off/model.safetensors" "$tmp/z2-on/model.safetensors" 0 ||
    fail "2 ranks: the weights trained with the timing differ from those without"

# 4. a resume takes the kept algorithms
run r6 --set model.matmul_tune=on --set train.steps=6
run r3 --set model.matmul_tune=on --set train.steps=3
[ -s "$tmp/r3/matmul-algos-rank0.bin" ] || fail "no matmul-algos-rank0.bin in the tuned run's out_dir: $(ls "$tmp/r3")"
cp -r "$tmp/r3" "$tmp/r3-bad"
cp -r "$tmp/r3" "$tmp/r3-sm80"
run r3 --set model.matmul_tune=on --set train.steps=6 --resume auto
[ "$(field r3 matmul_tune_restored)" -gt 0 ] 2>/dev/null && [ "$(field r3 matmul_tuned)" = 0 ] ||
    fail "resumed: $(field r3 matmul_tune_restored) plans restored, $(field r3 matmul_tuned) timed (want some, none)"
echo -n "model.matmul_tune, 3 steps + 3 resumed against 6: "
/usr/bin/python3 tests/py/weights_diff.py "$tmp/r6/model.safetensors" "$tmp/r3/model.safetensors" 0 ||
    fail "the resumed run's weights differ from the uninterrupted run's"
printf '\x55' | dd of="$tmp/r3-bad/matmul-algos-rank0.bin" bs=1 seek=40 conv=notrunc status=none
run r3-bad --set model.matmul_tune=on --set train.steps=6 --resume auto
grep -q "note: $tmp/r3-bad/matmul-algos-rank0.bin: damaged (its CRC-32 does not match its bytes); model.matmul_tune times the matrix products' algorithms again" "$tmp/r3-bad.out" &&
    [ "$(field r3-bad matmul_tuned)" -gt 0 ] && [ "$(field r3-bad matmul_tune_restored)" = 0 ] ||
    fail "a damaged file: not said, or not timed again: $(grep -i "matmul" "$tmp/r3-bad.out" | head -3)"
ST_CUDAEMU_CC=80 run r3-sm80 --set model.matmul_tune=on --set train.steps=6 --resume auto
grep -q "matmul-algos-rank0.bin: timed with cuBLASLt 130000 on .* (sm_90), and this run has cuBLASLt 130000 on .*; model.matmul_tune times" "$tmp/r3-sm80.out" &&
    [ "$(field r3-sm80 matmul_tuned)" -gt 0 ] ||
    fail "a file of another GPU kind: not said, or not timed again: $(grep -i "matmul" "$tmp/r3-sm80.out" | head -3)"

# the fusions a run reports are those its products ran: GELU and the residual in the epilogues on the
# emulator's sm_90 (fused_gelu_fwd/bwd one a layer, fused_residual two), none where cuBLASLt offers no
# algorithm for them (ST_CUDAEMU_NO_FUSED_EPILOGUES): it counted the graph's marks, and said fused
run fused --set model.fused_gelu=on --set model.fused_residual=on
ST_CUDAEMU_NO_FUSED_EPILOGUES=1 run unfused --set model.fused_gelu=on --set model.fused_residual=on
[ "$(field fused fused_gelu_fwd)" = 2 ] && [ "$(field fused fused_gelu_bwd)" = 2 ] &&
    [ "$(field fused fused_residual)" = 4 ] || fail "fused: $(grep -o '"fused_[a-z_]*":[a-z0-9]*' "$tmp/fused.out" | tr '\n' ' ')"
[ "$(field unfused fused_gelu_fwd)" = 0 ] && [ "$(field unfused fused_gelu_bwd)" = 0 ] &&
    [ "$(field unfused fused_residual)" = 0 ] && grep -q '"fused_gelu":false' "$tmp/unfused.out" ||
    fail "no fused epilogue: $(grep -o '"fused_[a-z_]*":[a-z0-9]*' "$tmp/unfused.out" | tr '\n' ' ')"
e2e_finish "model.matmul_tune: auto is off and says why; on timed $tuned plans ($switched kept another algorithm) and trained to the same bits, on one GPU and on 2 under ZeRO-2; a resume takes the kept algorithms, and passes over a damaged file or another GPU's"
