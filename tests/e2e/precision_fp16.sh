#!/usr/bin/env bash
# fp16 dynamic loss scaling on 2 ranks under real mpirun (docs/precision.md):
#  1. tests/mpi/scaler_check: an Inf injected into one rank's gradients skips
#     that step on every rank and halves the scale; the weights are untouched.
#  2. The trainer with a huge initial scale (2^40): every step overflows, is
#     skipped on both ranks and halves the scale; metrics.jsonl and the --json
#     line say so; the weights after 4 skipped steps equal those after 2 (bit
#     for bit), while a run at the default scale changes them.
#  3. Resume: 2 skipped steps, a checkpoint, then --resume auto to step 4 ends
#     with the scale and skip count of the uninterrupted run (state.json
#     carries the scaler). And with clean steps (loss_scale_window 3, so the
#     scale doubles at step 3, after the resume, only if the clean count was
#     restored): 2 steps + 2 resumed give the weights and scale of 4 steps in
#     one run, bit for bit (the fp16 compute copy is rebuilt from the loaded
#     masters).
#  4. 1, 2 and 3 ranks (ddp, zero1, zero2) with the same global batch and a
#     scale that doubles every 2 clean steps: the same steps overflow and
#     are skipped, at the same scales (each rank's seed is divided by the
#     ranks and the reductions sum, so its float16 gradients are one rank's
#     size; averaged after the reduction they were N times larger, and N
#     ranks skipped at an N times smaller scale).
#  5. A run whose every step is skipped says so: its done line counts them,
#     and a warning says the weights did not change.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_mpirun
e2e_need_numpy
e2e_tmpdir
export OMP_WAIT_POLICY=PASSIVE
e2e_mpi 90
mpi+=(-n 2)

"${mpi[@]}" "$build/tests/mpi/scaler_check" || fail "scaler_check on 2 ranks"

for i in $(seq 1 300); do echo "the quick brown fox $i jumps over the lazy dog $((i * 7 % 13))"; done >"$tmp/text.txt"
"$bin" data tokenize "$tmp/train.tokens" "$tmp/text.txt" >/dev/null
cat >"$tmp/gpt.yaml" <<YAML
model: { type: gpt, n_layer: 1, n_head: 2, n_embd: 32, block_size: 32 }
data: { type: tokens, train: $tmp/train.tokens, val: "", num_workers: 0 }
train: { batch_size: 8, threads: 1 }
optim: { lr: 1e-2 }
precision: fp16
dist: { timeout_s: 60 }
log: { every: 1, peak_gflops: 100 }
YAML
run() { # NAME STEPS ARGS...
    local name=$1 steps=$2; shift 2
    "${mpi[@]}" "$bin" train "$tmp/gpt.yaml" --set train.steps="$steps" --set train.out_dir="$tmp/$name" \
        --json --quiet "$@" 2> >(tee -a "$tmp/$name.err" >&2) | tail -n 1 >"$tmp/$name.json" ||
        fail "$name: the run failed"
}
huge=1099511627776 # 2^40: the scaled loss gradient overflows fp16 at once
run skip4 4 --set optim.loss_scale=$huge
run skip2 2 --set optim.loss_scale=$huge
run clean2 2
run resume 2 --set optim.loss_scale=$huge
run resume 4 --set optim.loss_scale=$huge --resume auto
# (the scale set again on the resume, the run's own: the same command line, as a restart runs it, is no
# change and not said; another one is not taken: said, where it was silence)
! grep -q "is the scale an fp16 run starts with" "$tmp/resume.err" ||
    fail "resume: a warning for the run's own optim.loss_scale: $(cat "$tmp/resume.err")"
run other 2 --set optim.loss_scale=$huge
run other 3 --set optim.loss_scale=$((2 * huge)) --resume auto
grep -q "resume: warning: optim.loss_scale ($((2 * huge)), --set) is the scale an fp16 run starts with; this resume goes on with the checkpoint's, 2.74878e+11" \
    "$tmp/other.err" || fail "resume: no warning that optim.loss_scale gave way to the checkpoint's: $(cat "$tmp/other.err")"
# (a scale below 1 shrinks the gradients fp16 stores, silently: said at the start, and once, by rank 0)
run tiny 1 --set optim.loss_scale=0.001
[ "$(grep -c "warning: optim.loss_scale 0.001 in fp16 makes the gradients smaller before fp16 stores them" "$tmp/tiny.err")" -eq 1 ] &&
    ! grep -q "warning: optim.loss_scale" "$tmp/clean2.err" ||
    fail "a loss scale below 1: not warned once: $(cat "$tmp/tiny.err")"
steady=(--set optim.loss_scale_window=3 --set optim.schedule=constant)
run whole4 4 "${steady[@]}"
run half 2 "${steady[@]}"
run half 4 "${steady[@]}" --resume auto
/usr/bin/python3 - "$tmp" <<'PY' || fail "loss scale / skipped steps"
import json, sys
tmp = sys.argv[1]
ok = True
def want(name, skipped, scale):
    global ok
    r = json.load(open(f"{tmp}/{name}.json"))
    good = r.get("skipped_steps") == skipped and r.get("loss_scale") == scale and r.get("ranks") == 2
    print(f"{name}: skipped_steps {r.get('skipped_steps')}, loss_scale {r.get('loss_scale')}, ranks {r.get('ranks')}"
          f"{'' if good else f'  FAIL: want {skipped}, {scale}, 2'}")
    ok &= good
want("skip4", 4, 2.0 ** 36)
want("skip2", 2, 2.0 ** 38)
want("clean2", 0, 65536)
want("resume", 4, 2.0 ** 36)
want("whole4", 0, 131072)
want("half", 0, 131072)
lines = [json.loads(l) for l in open(f"{tmp}/skip4/metrics.jsonl")]
steps = [(l["step"], l["skipped_steps"], l["loss_scale"]) for l in lines if "eval" not in l and "checkpoint" not in l]
expect = [(s, s, 2.0 ** (40 - s)) for s in range(1, 5)]
if steps != expect:
    print(f"skip4/metrics.jsonl: {steps}, want {expect}  FAIL")
    ok = False
# a skipped step's gradients overflowed: its line has no norm (null), not another step's
norms = [l.get("grad_norm", "absent") for l in lines if "eval" not in l and "checkpoint" not in l]
if norms != [None] * 4:
    print(f"skip4/metrics.jsonl: grad_norm {norms}, want null on every skipped step  FAIL")
    ok = False
sys.exit(0 if ok else 1)
PY
grep -q '"scale"' "$tmp"/resume/ckpt/step-2/state.json || fail "state.json of an fp16 run lacks loss_scale"
w=tests/py/weights_diff.py
/usr/bin/python3 $w "$tmp/whole4/model.safetensors" "$tmp/half/model.safetensors" 0 >/dev/null ||
    fail "fp16: 2 steps + 2 resumed differ from 4 steps in one run"
/usr/bin/python3 $w "$tmp/skip4/model.safetensors" "$tmp/skip2/model.safetensors" 0 >/dev/null ||
    fail "skipped steps changed the weights (4 skipped steps differ from 2)"
if /usr/bin/python3 $w "$tmp/clean2/model.safetensors" "$tmp/skip2/model.safetensors" 0 >/dev/null; then
    fail "clean steps left the weights as they were: the comparison above proves nothing"
fi
# 4.
M=(--set model.type=mlp --set 'model.hidden=[256,64]' --set train.batch_size=36 --set train.steps=15
   --set optim.type=sgd --set optim.lr=0.05 --set optim.grad_clip=0.5 --set model.dropout=0.1
   --set data.num_workers=0 --set data.val= --set precision=fp16 --set optim.loss_scale_window=2
   --set log.every=1 --set train.threads=1 --set log.peak_gflops=10 --quiet)
timeout 120 "$bin" train "${M[@]}" --set train.micro_batch_size=4 --set train.out_dir="$tmp/r1" ||
    fail "1 rank: the fp16 run"
e2e_mpi 120
"${mpi[@]}" -np 2 "$bin" train "${M[@]}" --set train.micro_batch_size=2 --set train.out_dir="$tmp/r2" ||
    fail "2 ranks: the fp16 run"
for s in ddp zero1 zero2; do
    "${mpi[@]}" -np 3 "$bin" train "${M[@]}" --set train.micro_batch_size=4 --set dist.strategy=$s \
        --set train.out_dir="$tmp/r3$s" || fail "3 ranks, $s: the fp16 run"
done
/usr/bin/python3 - "$tmp" <<'PY' || fail "fp16 on 1, 2 and 3 ranks: other skipped steps or scales"
import json, sys
tmp = sys.argv[1]
def trace(name):
    lines = [json.loads(l) for l in open(f"{tmp}/{name}/metrics.jsonl")]
    return [(l["step"], l["loss_scale"], l["grad_norm"] is None) for l in lines if "loss_scale" in l and "eval" not in l]
one = trace("r1")
skips = [s for s, _, k in one if k]
print(f"1 rank: skipped steps {skips}, final scale {one[-1][1]}")
ok = len(one) == 15 and len(skips) > 0
for name in ("r2", "r3ddp", "r3zero1", "r3zero2"):
    t = trace(name)
    same = t == one
    print(f"{name}: skipped steps {[s for s, _, k in t if k]}, final scale {t[-1][1] if t else None}", "ok" if same else "FAIL")
    ok &= same
sys.exit(0 if ok else 1)
PY
# every step skipped: the done line counts them and a warning says the weights did not change
# (before: a plain "done", the skips only in --json)
out=$(timeout 120 "$bin" train "$tmp/gpt.yaml" --set train.steps=3 --set train.out_dir="$tmp/allskip" \
    --set optim.loss_scale=$huge --set log.progress=off 2>&1)
grep -qE "^done: 3 steps .*, 3 of them skipped \(fp16 overflow\)" <<<"$out" &&
    grep -q "^scaletrain: warning: every one of this run's 3 steps was skipped: its fp16 gradients overflowed" <<<"$out" ||
    fail "every step skipped: no count on the done line or no warning: $(grep -E "^done|warning" <<<"$out")"
e2e_finish ok
