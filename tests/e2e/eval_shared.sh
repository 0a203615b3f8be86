#!/usr/bin/env bash
# Evaluation shared by the ranks (docs/distributed.md, "Evaluation"): each
# rank evaluates a contiguous share of the validation batches and the sums
# are added up, under real mpirun.
# (a) mlp, 2 ranks, evaluating at step 10 and at the end: the run's final
#     evaluation equals `scaletrain eval` of its weights on 1 rank (accuracy
#     exactly, loss to 1e-12 relative: only the order of the sums differs),
#     and `eval` on 2 and 3 ranks (an uneven split of the batches) equals it too;
#     train.batch_size 32 does not split over 3 ranks, which `eval` ignores
#     (it evaluates in train.eval_batch_size batches).
# (b) cnn (batch-norm, whose running statistics each rank moves with its own
#     batches): the 2-rank run's final evaluation equals `eval` of the saved
#     weights (rank 0's statistics) on 1 rank; without rank 0's statistics
#     sent first, rank 1's share would be evaluated with its own.
# (c) a rank that cannot open its validation data ends every rank at once,
#     its message naming the file (not every rank waiting for dist.timeout_s).
# (d) train.eval_steps with eval_batch_size auto: the same samples on 1 and
#     2 ranks, with the micro-batch auto or set (it counted each rank's
#     micro-batches, so a set one evaluated twice the samples on 2 ranks);
#     `eval` on ranks that do not divide train.batch_size runs.
# (e) ranks that loaded different weights (each its own --init), or read
#     validation sets of different sizes, are refused, naming both, where
#     their shares were summed into a figure of neither.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_mpirun
e2e_need_fmnist
[ -x "$bin" ] || { echo "FAIL: $bin is not built"; exit 1; }
e2e_tmpdir
e2e_mpi 120
export OMP_WAIT_POLICY=PASSIVE
common=(--set train.threads=1 --set data.num_workers=0 --set log.progress=off --quiet --json
        --set train.eval_batch_size=256)

# last_json FILE KEY: the last JSON line's KEY
# same NAME FILE_A FILE_B: loss within 1e-12 relative, accuracy exactly
same() {
    /usr/bin/python3 - "$@" <<'PY'
import json, sys
name, a, b = sys.argv[1:4]
ra = [json.loads(l) for l in open(a) if l.startswith("{")][-1]
rb = [json.loads(l) for l in open(b) if l.startswith("{")][-1]
la, lb = ra["loss"], rb["loss"]
ok = abs(la - lb) <= 1e-12 * abs(lb) and ra["accuracy"] == rb["accuracy"] and la == la
print(f"{name}: loss {la!r} vs {lb!r}, accuracy {ra['accuracy']!r} vs {rb['accuracy']!r}", "ok" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
}

mlp=(--set model.type=mlp --set model.hidden=[64] --set train.batch_size=32 --set train.steps=20
     --set train.eval_every=10)
"${mpi[@]}" -np 2 "$bin" train "${common[@]}" "${mlp[@]}" --set train.out_dir="$tmp/mlp" >"$tmp/mlp.json" ||
    fail "mlp: the 2-rank run"
/usr/bin/python3 - "$tmp/mlp/metrics.jsonl" <<'PY' || fail "mlp: the evaluations in metrics.jsonl"
import json, math, sys
ev = [r for r in map(json.loads, open(sys.argv[1])) if r.get("eval")]
print("evaluations at steps", [r["step"] for r in ev], "losses", [r["loss"] for r in ev])
sys.exit(0 if [r["step"] for r in ev] == [10, 20] and all(math.isfinite(r["loss"]) for r in ev) else 1)
PY
for n in 1 2 3; do
    if [ "$n" -eq 1 ]; then
        timeout 60 "$bin" eval "${common[@]}" "${mlp[@]}" --init "$tmp/mlp/model.safetensors" >"$tmp/eval1.json"
    else
        "${mpi[@]}" -np "$n" "$bin" eval "${common[@]}" "${mlp[@]}" --init "$tmp/mlp/model.safetensors" \
            >"$tmp/eval$n.json"
    fi || fail "mlp: eval on $n rank(s)"
done
same "mlp: the 2-rank run's final evaluation vs eval on 1 rank" "$tmp/mlp.json" "$tmp/eval1.json" || fail "mlp: run vs eval"
same "mlp: eval on 2 ranks vs 1" "$tmp/eval2.json" "$tmp/eval1.json" || fail "mlp: eval on 2 ranks"
same "mlp: eval on 3 ranks vs 1" "$tmp/eval3.json" "$tmp/eval1.json" || fail "mlp: eval on 3 ranks"
# (d) train.eval_batch_size auto (the micro-batch: 16 on 2 ranks, 32 on 1)
# with train.eval_steps 3: the 2-rank run's last evaluation and `eval` on 1
# rank cover the same 96 samples (3 batches on each rank), where the run
# covered half; `eval` on 3 ranks, which do not divide train.batch_size 32,
# runs (its eval batch 11: batch_size over the ranks, rounded up), where it
# failed with "model graph: batch size -1"
auto=(--set train.threads=1 --set data.num_workers=0 --set log.progress=off --quiet --json --set train.eval_steps=3)
"${mpi[@]}" -np 2 "$bin" train "${auto[@]}" "${mlp[@]}" --set train.out_dir="$tmp/mlpa" >"$tmp/mlpa.json" ||
    fail "eval_steps: the 2-rank run"
timeout 60 "$bin" eval "${auto[@]}" "${mlp[@]}" --init "$tmp/mlpa/model.safetensors" >"$tmp/evala1.json" ||
    fail "eval_steps: eval on 1 rank"
# (batches of 16 against 32: each batch's mean loss is a float32, so the loss to 1e-6)
/usr/bin/python3 - "$tmp/mlpa.json" "$tmp/evala1.json" <<'PY' || fail "eval_steps: run vs eval"
import json, sys
a, b = ([json.loads(l) for l in open(f) if l.startswith("{")][-1] for f in sys.argv[1:3])
ok = abs(a["loss"] - b["loss"]) <= 1e-6 * abs(b["loss"]) and a["accuracy"] == b["accuracy"]
print("eval_steps 3, eval_batch_size auto: the 2-rank run's final evaluation vs eval on 1 rank:",
      a["loss"], b["loss"], a["accuracy"], b["accuracy"], "ok" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
"${mpi[@]}" -np 3 "$bin" eval "${auto[@]}" "${mlp[@]}" --init "$tmp/mlpa/model.safetensors" >"$tmp/evala3.json" 2>&1 ||
    fail "eval_steps: eval on 3 ranks: $(tail -n 2 "$tmp/evala3.json")"
# (in batches of 11, where they were batches of 1: 9 samples for 3 steps on 3 ranks, said nowhere)
grep -q '"eval_batch_size":11[,}]' "$tmp/evala3.json" ||
    fail "eval_steps: eval on 3 ranks not in batches of 11: $(grep -o '"eval_batch_size":[0-9]*' "$tmp/evala3.json")"
# The effective configuration of the 2-rank run gives eval_steps as the
# total (6 batches of 16), and evaluated so, on 2 ranks, the same samples
"${mpi[@]}" -np 2 "$bin" train "${auto[@]:0:6}" "${mlp[@]}" --set train.eval_steps=3 --set train.steps=1 \
    --set train.out_dir="$tmp/mlpc" >"$tmp/mlpc.log" 2>&1 || fail "eval_steps: the printed configuration's run"
# (its source the user's, --set, not auto)
grep -qE "^  eval_steps: +6 +# --set; 3 batches of train.batch_size 32, as 6 of train.eval_batch_size 16$" "$tmp/mlpc.log" ||
    fail "eval_steps: printed as $(grep -E '^  eval_steps:' "$tmp/mlpc.log")"
"${mpi[@]}" -np 2 "$bin" eval "${auto[@]}" "${mlp[@]}" --set train.eval_batch_size=16 --set train.eval_steps=6 \
    --init "$tmp/mlpa/model.safetensors" >"$tmp/evalx2.json" || fail "eval_steps: eval as printed, on 2 ranks"
same "eval_steps as the effective configuration prints them (16 x 6) vs the auto run's, on 2 ranks" \
    "$tmp/evalx2.json" "$tmp/mlpa.json" || fail "eval_steps: as printed"

# a micro-batch set (8, batch 32): eval_steps 3 is 3 batches of 32 on 1 rank and on 2, 12 of 8 in all
for n in 1 2; do
    "${mpi[@]}" -np $n "$bin" eval "${auto[@]}" "${mlp[@]}" --set train.micro_batch_size=8 \
        --init "$tmp/mlpa/model.safetensors" >"$tmp/evalm$n.json" || fail "eval_steps, micro-batch 8: eval on $n"
done
same "eval_steps 3, micro-batch 8: eval on 2 ranks vs 1" "$tmp/evalm2.json" "$tmp/evalm1.json" ||
    fail "eval_steps with a micro-batch set: 2 ranks vs 1"
grep -q '"eval_samples":96[,}]' "$tmp/evalm1.json" && grep -q '"eval_samples":96[,}]' "$tmp/evalm2.json" ||
    fail "eval_steps with a micro-batch set: not 96 samples: $(grep -ho '"eval_samples":[0-9]*' "$tmp"/evalm?.json)"

cnn=(--set model.type=cnn --set train.batch_size=16 --set train.steps=6 --set train.eval_steps=8)
"${mpi[@]}" -np 2 "$bin" train "${common[@]}" "${cnn[@]}" --set train.out_dir="$tmp/cnn" >"$tmp/cnn.json" ||
    fail "cnn: the 2-rank run"
timeout 60 "$bin" eval "${common[@]}" "${cnn[@]}" --init "$tmp/cnn/model.safetensors" >"$tmp/cnn-eval1.json" ||
    fail "cnn: eval on 1 rank"
same "cnn (batch-norm): the 2-rank run's final evaluation vs eval on 1 rank" "$tmp/cnn.json" "$tmp/cnn-eval1.json" ||
    fail "cnn: run vs eval"

# (c) one rank cannot open its validation data (data.val may differ by rank:
# node-local copies): every rank ends within seconds, not dist.timeout_s,
# and that rank's message names the file.
t0=$SECONDS
out=$("${mpi[@]}" -np 1 "$bin" eval "${common[@]}" "${cnn[@]}" --init "$tmp/cnn/model.safetensors" \
    --set dist.timeout_s=60 : -np 1 "$bin" eval "${common[@]}" "${cnn[@]}" --init "$tmp/cnn/model.safetensors" \
    --set dist.timeout_s=60 --set data.val="$tmp/missing/t10k-images-idx3-ubyte.gz" 2>&1) && fail "eval with rank 1's data missing passed"
[ $((SECONDS - t0)) -lt 30 ] || fail "eval with rank 1's data missing took $((SECONDS - t0)) s: the ranks waited for the timeout"
grep -q "rank 1 of 2 .*: aborting every rank: data.val: $tmp/missing/t10k-images-idx3-ubyte.gz: cannot open" <<<"$out" ||
    fail "eval with rank 1's data missing: rank 1's reason not given: $(grep scaletrain <<<"$out" | head -3)"

# (e) different weights, different validation data
timeout 60 "$bin" train "${common[@]}" "${mlp[@]}" --set train.seed=7 --set train.eval_every=0 \
    --set train.out_dir="$tmp/mlp7" >/dev/null || fail "the run of seed 7"
out=$("${mpi[@]}" -np 1 "$bin" eval "${common[@]}" "${mlp[@]}" --init "$tmp/mlp/model.safetensors" : \
    -np 1 "$bin" eval "${common[@]}" "${mlp[@]}" --init "$tmp/mlp7/model.safetensors" 2>&1) && fail "eval of different weights passed"
[ "$(grep -cF "the ranks loaded different weights: the first difference is in the weights (--init): rank 0 has $tmp/mlp/model.safetensors; rank 1 has $tmp/mlp7/model.safetensors" <<<"$out")" -eq 2 ] ||
    fail "eval of different weights: not one error from each rank naming both: $(grep scaletrain <<<"$out" | head -3)"
out=$("${mpi[@]}" -np 1 "$bin" eval "${common[@]}" "${mlp[@]}" --init "$tmp/mlp/model.safetensors" : \
    -np 1 "$bin" eval "${common[@]}" "${mlp[@]}" --init "$tmp/mlp/model.safetensors" \
    --set data.val="/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz" --set data.val_labels="/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz" 2>&1) &&
    fail "eval of different validation sets passed"
[ "$(grep -cF "the ranks read different validation data: the first difference is in validation samples (data.val): rank 0 has 10000; rank 1 has 60000" <<<"$out")" -eq 2 ] ||
    fail "eval of different validation sets: not one error from each rank: $(grep scaletrain <<<"$out" | head -3)"
# (f) weights whose outputs overflow (every weight scaled by 1e30): "loss not finite", not "-nan"
/usr/bin/python3 - "$tmp/mlp/model.safetensors" "$tmp/huge.safetensors" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack_from("<Q", b)[0]
h = json.loads(b[8:8 + n])
data = bytearray(b[8 + n:])
for name in (k for k in h if k != "__metadata__" and h[k]["dtype"] == "F32"):
    lo, hi = h[name]["data_offsets"]
    vals = struct.unpack_from("<%df" % ((hi - lo) // 4), data, lo)
    struct.pack_into("<%df" % len(vals), data, lo, *[v * 1e30 for v in vals])
open(sys.argv[2], "wb").write(b[:8 + n] + bytes(data))
PY
out=$(timeout 60 "$bin" eval --set train.threads=1 --set data.num_workers=0 --set log.progress=off "${mlp[@]}" \
    --init "$tmp/huge.safetensors" 2>&1)
grep -qE "^eval: loss not finite \((NaN|infinite): the model's outputs overflow on this data\)" <<<"$out" && ! grep -qi "nan," <<<"$out" ||
    fail "eval of weights whose outputs overflow: $(grep -E "^eval|error" <<<"$out")"
e2e_finish "every rank evaluates its share; the results equal one rank's"
