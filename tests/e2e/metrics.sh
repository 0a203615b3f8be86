#!/usr/bin/env bash
# metrics.jsonl (docs/formats.md, "Metrics"): an mlp run of 7 steps with
# log.every=2 and evaluation every 4 steps writes one JSON object per line:
# step lines at 2, 4, 6 and 7 with finite losses, 0 < mfu < 20 and
# peak_rss_mb > 0, no gpu_* fields (the CPU), eval lines at 4 and 7, and a
# checkpoint line at 7 (synchronous, committed at its step). A run that stops at a checkpoint
# and is resumed with --resume auto appends the remaining steps to the file;
# lines past the checkpoint it resumes from, and a last line cut short, are
# dropped first, reading only the file's tail (a 400k-line file resumes
# within a 1 s storage limit); killed writers' temporary files are removed.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_fmnist
e2e_tmpdir
export OMP_WAIT_POLICY=PASSIVE
base=(--set model.type=mlp --set model.hidden=[64,32] --set train.batch_size=16 --set train.threads=1
    --set log.every=2 --set log.progress=off --set train.eval_steps=4)
common=("${base[@]}" --quiet)

# check FILE EXPECTED_STEPS EXPECTED_EVALS: the lines of FILE against the lists.
check() {
    /usr/bin/python3 - "$@" <<'PY'
import json, math, sys
path, want_steps, want_evals = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
want_ckpts = json.loads(sys.argv[4]) if len(sys.argv) > 4 else None
ok = True
def check(cond, what):
    global ok
    if not cond:
        print("FAIL:", what); ok = False
steps, evals, ckpts = [], [], []
for i, text in enumerate(open(path), 1):
    try:
        o = json.loads(text)
    except ValueError as e:
        check(False, f"line {i} is not JSON: {e}: {text!r}"); continue
    if o.get("checkpoint"):
        ckpts.append(o["step"])
        check(o.get("async") is False and o.get("committed_step") == o["step"], f"line {i}: a synchronous checkpoint")
        check(all(math.isfinite(o.get(k, -1)) and o.get(k, -1) >= 0 for k in ("write_s", "stall_s", "time")),
              f"line {i}: checkpoint write_s, stall_s, time")
        continue
    if o.get("eval"):
        evals.append(o["step"])
        check(math.isfinite(o["loss"]) and 0 <= o["accuracy"] <= 1, f"line {i}: eval loss and accuracy")
        # train.eval_steps 4 batches of the micro-batch, 16 (eval_batch_size auto)
        check(o.get("samples") == 64, f"line {i}: eval samples {o.get('samples')}, expected 64")
        continue
    steps.append(o["step"])
    for k in ("epoch", "loss", "lr", "grad_norm", "samples_per_s", "step_ms", "mfu", "data_wait_ms",
              "data_wait_fraction", "peak_rss_mb", "skipped_steps", "time"):
        check(k in o and math.isfinite(o[k]), f"line {i}: {k} present and finite")
    # MFU is against the peak measured at start: on a loaded machine that
    # calibration can land low and the ratio pass 1; the bound catches unit
    # errors (x1000), not speed.
    check(0 < o.get("mfu", 0) < 20, f"line {i}: mfu {o.get('mfu')} in (0, 20)")
    check(o.get("peak_rss_mb", 0) > 0, f"line {i}: peak_rss_mb > 0")
    check(o.get("grad_norm", 0) > 0 and o.get("samples_per_s", 0) > 0, f"line {i}: grad_norm, samples_per_s > 0")
    check(0 <= o.get("data_wait_fraction", -1) <= 1, f"line {i}: data_wait_fraction in [0, 1]")
    check(o.get("skipped_steps") == 0, f"line {i}: skipped_steps 0")
    check("comm_ms" not in o, f"line {i}: no comm_ms on one rank")
    # a CPU run has no GPU to sample (log.gpu_interval): those fields are absent
    check(not [k for k in o if k.startswith("gpu_")], f"line {i}: GPU fields on a CPU run")
check(steps == want_steps, f"step lines {steps}, expected {want_steps}")
check(evals == want_evals, f"eval lines {evals}, expected {want_evals}")
check(want_ckpts is None or ckpts == want_ckpts, f"checkpoint lines {ckpts}, expected {want_ckpts}")
print(f"{path}: {len(steps)} step lines {steps}, eval lines {evals}, checkpoint lines {ckpts}" + ("" if ok else ": FAILED"))
sys.exit(0 if ok else 1)
PY
}

timeout 60 "$bin" train "${common[@]}" --set train.steps=7 --set train.eval_every=4 \
    --set train.out_dir="$tmp/a" || fail "the 7-step run"
check "$tmp/a/metrics.jsonl" "[2, 4, 6, 7]" "[4, 7]" "[7]" || fail "metrics.jsonl of the 7-step run"
# Resumed at its last step (nothing to train): its evaluation is printed,
# not written again (a second eval line at 7, and a TensorBoard point)
cp -r "$tmp/a" "$tmp/again"
timeout 60 "$bin" train "${base[@]}" --set train.steps=7 --set train.eval_every=4 \
    --set train.out_dir="$tmp/again" --resume auto >"$tmp/again.out" 2>&1 || fail "resumed at the last step"
# (the printed line says what the evaluation covered, when not all of it)
grep -q "^eval at step 7: loss [0-9.]*, accuracy [0-9.]*% (64 of 10000 validation samples)$" "$tmp/again.out" ||
    fail "the eval line: $(grep eval "$tmp/again.out")"
check "$tmp/again/metrics.jsonl" "[2, 4, 6, 7]" "[4, 7]" "[7]" || fail "metrics.jsonl after a resume at the last step"

# No data.val: no eval lines. A second run into the same directory starts afresh.
timeout 60 "$bin" train "${common[@]}" --set train.steps=4 --set data.val= --set train.out_dir="$tmp/a" ||
    fail "the run without data.val"
check "$tmp/a/metrics.jsonl" "[2, 4]" "[]" "[4]" || fail "metrics.jsonl without data.val (a new run truncates)"

# Resume: 4 steps (checkpoint at 4), then --resume auto to 8 appends 6 and 8.
timeout 60 "$bin" train "${common[@]}" --set train.steps=4 --set data.val= --set train.checkpoint_every=2 \
    --set train.out_dir="$tmp/r" || fail "the run before resuming"
# (and a line cut short, as by a run killed mid-write: dropped on resume, not
# joined to the resumed run's first line)
printf '{"step":5,"epoch":0.1,"lo' >>"$tmp/r/metrics.jsonl"
timeout 60 "$bin" train "${common[@]}" --set train.steps=8 --set data.val= --set train.checkpoint_every=2 \
    --set train.out_dir="$tmp/r" --resume auto || fail "the resumed run"
check "$tmp/r/metrics.jsonl" "[2, 4, 6, 8]" "[]" "[2, 4, 6, 8]" || fail "metrics.jsonl of the resumed run appends"

# A run that logged past its last good checkpoint (the one at 6 is damaged, so
# --resume auto falls back to 4): the lines after 4 are dropped, not repeated.
timeout 60 "$bin" train "${common[@]}" --set train.steps=6 --set data.val= --set train.checkpoint_every=4 \
    --set train.out_dir="$tmp/d" || fail "the run before the damaged checkpoint"
: >"$tmp/d/ckpt/step-6/model.safetensors"
timeout 60 "$bin" train "${base[@]}" --set train.steps=8 --set data.val= --set train.checkpoint_every=4 \
    --set train.out_dir="$tmp/d" --resume auto >"$tmp/d.out" 2>&1 || fail "the run resumed from the checkpoint before"
grep -q "resumed from .*step-4 at step 4" "$tmp/d.out" || fail "did not resume from step 4: $(cat "$tmp/d.out")"
check "$tmp/d/metrics.jsonl" "[2, 4, 6, 8]" "[]" || fail "metrics.jsonl drops the lines after the resumed step"

# A long metrics.jsonl (a run of days: 400k lines) resumed: only its tail is
# read and cut, within a 1 s storage limit (it was rewritten whole, about 5 us
# a line, under that limit); and what writers killed mid-write left (the
# temporary files of the weights, the metrics and `latest`) is removed.
timeout 60 "$bin" train "${common[@]}" --set train.steps=4 --set data.val= --set train.checkpoint_every=2 \
    --set train.out_dir="$tmp/l" || fail "the run before the long resume"
/usr/bin/python3 - "$tmp/l/metrics.jsonl" <<'PY'
import sys
p = sys.argv[1]
old = open(p).read()
with open(p, "w") as f:
    f.write('{"step":0,"padding":true}\n' * 400000 + old + '{"step":5,"loss":1}\n{"step":6,"loss":1}\n')
PY
touch "$tmp/l/model.safetensors.tmp.99999" "$tmp/l/metrics.jsonl.tmp.99999" "$tmp/l/ckpt/latest.tmp.99999"
timeout 60 "$bin" train "${common[@]}" --set train.steps=8 --set data.val= --set train.checkpoint_every=2 \
    --set train.checkpoint_timeout_s=1 --set train.out_dir="$tmp/l" --resume auto ||
    fail "a long metrics.jsonl, resumed within a 1 s storage limit"
/usr/bin/python3 - "$tmp/l/metrics.jsonl" <<'PY' || fail "the long metrics.jsonl after the resume"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
pad = sum(1 for l in lines if l.get("padding"))
steps = [l["step"] for l in lines if not l.get("padding") and "loss" in l and "eval" not in l and "checkpoint" not in l]
print(f"long metrics.jsonl resumed: {pad} padding lines kept, step lines {steps}")
sys.exit(0 if pad == 400000 and steps == [2, 4, 6, 8] else 1)
PY
[ -z "$(find "$tmp/l" -name '*.tmp.*')" ] || fail "leftover temporary files: $(find "$tmp/l" -name '*.tmp.*')"

# A datasheet peak instead of the measured one: mfu scales with it.
timeout 60 "$bin" train "${common[@]}" --set train.steps=2 --set data.val= --set log.peak_gflops=1e9 \
    --set train.out_dir="$tmp/p" || fail "the run with log.peak_gflops"
/usr/bin/python3 -c 'import json,sys; m=json.loads(open(sys.argv[1]).readline())["mfu"]; sys.exit(0 if 0 < m < 1e-3 else 1)' \
    "$tmp/p/metrics.jsonl" || fail "log.peak_gflops=1e9 gives a tiny mfu"

e2e_finish ok
