#!/usr/bin/env bash
# The profiler trace (docs/formats.md, "Profiler trace"): `--profile 2-4` on a
# cnn (conv, batch-norm, pool layers) with a checkpoint and an evaluation
# inside the window, and on 2 ranks under mpirun (an mlp with small gradient
# buckets), writes out_dir/trace.json that parses as JSON in the Chrome trace
# format: "X" events with ts >= 0 and dur >= 0, pid = rank, exactly the steps
# 2, 3, 4 on every rank, each holding data wait, forward, backward and
# optimizer events, every layer event inside a forward or backward of its
# rank, the events of the step loop properly nested, one forward layer event
# per node, the checkpoint and eval inside step 3, and on 2 ranks one
# all-reduce track per gradient bucket and an all-reduce wait in every step.
# 600 traced steps on 2 ranks (three pieces of the gather a rank) come
# whole and in order. A trace.json that cannot be written is a warning, and
# the run finishes.
# A resumed run's trace keeps the earlier one (trace-steps-A-B.json).
# Without log.trace there is no trace.json, and a bad --profile is a usage error.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_fmnist
e2e_tmpdir
export OMP_WAIT_POLICY=PASSIVE

# check FILE RANKS NEED_COMM NEED_CKPT_EVAL
check() {
    /usr/bin/python3 - "$@" <<'PY'
import json, sys
path, ranks, need_comm, need_extra = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4] == "1"
ok = True
def check(cond, what):
    global ok
    if not cond:
        print("FAIL:", what); ok = False
try:
    d = json.load(open(path))
except ValueError as e:
    print(f"FAIL: {path} is not JSON: {e}"); sys.exit(1)
ev = d["traceEvents"]
X = [e for e in ev if e.get("ph") == "X"]
check(len(X) > 0, "complete events present")
for e in X:
    check(e["ts"] >= 0 and e["dur"] >= 0, f"ts and dur non-negative: {e}")
    check(e["pid"] in range(ranks) and isinstance(e["tid"], int), f"pid is a rank: {e}")
check(sorted({e["pid"] for e in X}) == list(range(ranks)), "every rank has events")
names = {(e["pid"], e["tid"]) for e in ev if e.get("ph") == "M" and e["name"] == "thread_name"}
check(all((e["pid"], e["tid"]) in names for e in X), "every track is named")
# layer passes carry their work (the CPU kernels' by the cost model): products FLOPs, the rest elements
layers = [e for e in X if e["cat"] in ("forward", "backward") and "(" in e["name"]]
prod = [e for e in layers if e["name"].endswith(("(linear)", "(conv2d)"))]
check(prod and all(e.get("args", {}).get("flops", 0) > 0 for e in prod), "products carry their FLOPs")
norm = [e for e in layers if e["name"].endswith(("(batchnorm)", "(relu)", "(maxpool2d)"))]
check(all(e.get("args", {}).get("elems", 0) > 0 and e["args"]["flops"] == 0 for e in norm),
      "elementwise layers carry their elements")
check(d["otherData"].get("elem_bytes") == 4, "4 bytes an element on the CPU")
EPS = 0.002  # microseconds: ts and dur are printed to 1 ns
def inside(a, b):
    return b["ts"] - EPS <= a["ts"] and a["ts"] + a["dur"] <= b["ts"] + b["dur"] + EPS
for r in range(ranks):
    loop = sorted((e for e in X if e["pid"] == r and e["tid"] == 0), key=lambda e: (e["ts"], -e["dur"]))
    steps = [e for e in loop if e["cat"] == "step" and e["name"].startswith("step ")]
    check([e["name"] for e in steps] == ["step 2", "step 3", "step 4"], f"rank {r}: steps {[e['name'] for e in steps]}")
    # proper nesting on the step loop's track
    stack = []
    for e in loop:
        while stack and not inside(e, stack[-1]) and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - EPS:
            stack.pop()
        check(not stack or inside(e, stack[-1]), f"rank {r}: {e['name']} overlaps {stack[-1]['name'] if stack else ''}")
        stack.append(e)
    for s in steps:
        kids = [e for e in loop if e is not s and inside(e, s)]
        got = {e["name"] for e in kids}
        for want in ("data wait", "forward", "backward", "optimizer"):
            check(want in got, f"rank {r} {s['name']}: a {want} event")
        if need_comm:
            check("all-reduce wait" in got, f"rank {r} {s['name']}: an all-reduce wait")
        fw = [e for e in kids if e["name"] == "forward"]
        fl = [e for e in kids if e["cat"] == "forward"]
        check(len(fw) == 1 and len(fl) >= 3 and all(inside(e, fw[0]) for e in fl),
              f"rank {r} {s['name']}: {len(fl)} layer forwards inside the forward")
        bw = [e for e in kids if e["name"] == "backward"]
        bl = [e for e in kids if e["cat"] == "backward"]
        check(len(bw) == 1 and len(bl) >= 3 and all(inside(e, bw[0]) for e in bl),
              f"rank {r} {s['name']}: {len(bl)} layer backwards inside the backward")
        if s is steps[0]:
            nodes = len(fl)
        check(len(fl) == nodes, f"rank {r} {s['name']}: the same layers every step")
    layers = [e for e in loop if e["cat"] in ("forward", "backward")]
    check(all(any(inside(e, s) for s in steps) for e in layers), f"rank {r}: every layer event inside a step")
    if need_extra and r == 0:
        s3 = [s for s in steps if s["name"] == "step 3"]
        for want in ("checkpoint", "eval"):
            check(any(e["name"] == want and inside(e, s3[0]) for e in loop), f"rank 0: {want} inside step 3")
    if need_comm:
        comm = [e for e in X if e["pid"] == r and e["tid"] >= 1000]
        check(len({e["tid"] for e in comm}) >= 2, f"rank {r}: an all-reduce track per bucket ({len(comm)} events)")
        check(all(e["cat"] == "comm" and e["name"].startswith("grad bucket") for e in comm), f"rank {r}: bucket events")
        check(len(comm) == 3 * len({e["tid"] for e in comm}), f"rank {r}: each bucket once per step")
print(f"{path}: {len(X)} events on {ranks} rank(s)" + ("" if ok else ": FAILED"))
sys.exit(0 if ok else 1)
PY
}

common=(--set train.threads=1 --set train.batch_size=16 --set log.progress=off --set data.num_workers=1)
timeout 120 "$bin" train "${common[@]}" --set model.type=cnn --set model.channels=[4,8] --set model.pool=[1,1] \
    --set train.steps=5 --set train.checkpoint_every=3 --set train.eval_every=3 --set train.eval_steps=2 \
    --set train.out_dir="$tmp/cnn" --profile 2-4 >"$tmp/cnn.out" 2>&1 || fail "cnn run: $(cat "$tmp/cnn.out")"
grep -q "wrote the trace of steps 2-4 to $tmp/cnn/trace.json" "$tmp/cnn.out" || fail "no message about the trace"
check "$tmp/cnn/trace.json" 1 0 1 || fail "the cnn trace"
# bench/trace_summary.py: host times by layer kind, the products' rates
/usr/bin/python3 "$(dirname "$0")/../../bench/trace_summary.py" "$tmp/cnn/trace.json" >"$tmp/summary.txt" 2>&1 &&
    grep -q "^| conv2d | backward | .* TFLOP/s" "$tmp/summary.txt" &&
    grep -q "^no GPU tracks (host times); per step by layer kind: " "$tmp/summary.txt" ||
    { cat "$tmp/summary.txt"; fail "bench/trace_summary.py on the cnn trace"; }

if command -v mpirun >/dev/null; then
    timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "$bin" train "${common[@]}" \
        --set model.type=mlp --set model.hidden=[256,128] --set dist.bucket_cap_mb=0.05 --set train.steps=6 \
        --set data.val= --set log.trace=true --set log.trace_steps=[2,4] --set dist.timeout_s=60 \
        --set train.out_dir="$tmp/ddp" --quiet || fail "2-rank run"
    check "$tmp/ddp/trace.json" 2 1 0 || fail "the 2-rank trace"
    # A window of 600 steps: about 9000 events a rank, which reach rank 0
    # in three pieces of 4096 each (the last one short): every step of
    # every rank there once, in order, and nothing dropped.
    timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "$bin" train "${common[@]}" \
        --set model.type=mlp --set model.hidden=[16] --set train.batch_size=8 --set data.num_workers=0 \
        --set dist.bucket_cap_mb=0.001 --set train.steps=600 --set data.val= --set log.trace=true \
        --set "log.trace_steps=[1,600]" --set dist.timeout_s=60 --set train.out_dir="$tmp/long" --quiet ||
        fail "2-rank run of 600 traced steps"
    /usr/bin/python3 - "$tmp/long/trace.json" <<'PY' || fail "the 600-step trace of 2 ranks"
import json, sys
d = json.load(open(sys.argv[1]))
X = [e for e in d["traceEvents"] if e.get("ph") == "X"]
bad = []
if d["otherData"]["dropped_events"] != 0: bad.append("dropped events: %s" % d["otherData"])
for r in (0, 1):
    mine = [e for e in X if e["pid"] == r]
    steps = [e["name"] for e in mine if e["tid"] == 0 and e["cat"] == "step" and e["name"].startswith("step ")]
    if steps != ["step %d" % k for k in range(1, 601)]: bad.append("rank %d: steps %s..%s (%d)" % (r, steps[:2], steps[-2:], len(steps)))
    if len(mine) <= 2 * 4096: bad.append("rank %d: %d events, not more than two pieces" % (r, len(mine)))
n = [sum(e["pid"] == r for e in X) for r in (0, 1)]
if n[0] != n[1]: bad.append("events per rank %s: the same run on each" % n)
# each rank's own events (their times differ), not one rank's twice
ts = [[e["ts"] for e in X if e["pid"] == r] for r in (0, 1)]
if ts[0] == ts[1]: bad.append("rank 1's events are rank 0's")
print("600 steps on 2 ranks: %s events a rank" % n + "".join("\nFAIL: " + b for b in bad))
sys.exit(1 if bad else 0)
PY
else
    echo "trace: no mpirun; the 2-rank part is skipped"
fi

# A window the run ends inside: the message names the steps traced. One
# past the run's last step: a warning at start, and no trace.json.
small=(--set model.type=mlp --set model.hidden=[16] --set data.val=)
timeout 60 "$bin" train "${common[@]}" "${small[@]}" --set train.steps=3 --set train.out_dir="$tmp/short" \
    --profile 2-9 >"$tmp/short.out" 2>&1 || fail "short run: $(cat "$tmp/short.out")"
grep -q "wrote the trace of steps 2-3 to $tmp/short/trace.json" "$tmp/short.out" ||
    fail "the window the run ended inside: $(grep trace "$tmp/short.out")"
grep -q '"otherData":{"first_step":2,"last_step":3,' "$tmp/short/trace.json" ||
    fail "trace.json does not say the steps it holds: $(head -c 120 "$tmp/short/trace.json")"
timeout 60 "$bin" train "${common[@]}" "${small[@]}" --set train.steps=3 --set train.out_dir="$tmp/past" \
    --profile 10-20 >"$tmp/past.out" 2>&1 || fail "run past its window: $(cat "$tmp/past.out")"
grep -q "log.trace_steps \[10, 20\]: this run does steps 1 to 3, so nothing will be traced" "$tmp/past.out" ||
    fail "no warning for a window past the run"
[ ! -e "$tmp/past/trace.json" ] || fail "a trace.json for a window past the run"
# The short run resumed with a window of its own: the earlier trace (steps
# 2-3) is kept beside the new one, as the run's metrics are, not replaced.
timeout 60 "$bin" train "${common[@]}" "${small[@]}" --set train.steps=6 --set train.out_dir="$tmp/short" \
    --profile 5-6 --resume auto >"$tmp/short2.out" 2>&1 || fail "short run resumed: $(cat "$tmp/short2.out")"
grep -q "wrote the trace of steps 5-6 to $tmp/short/trace.json (the earlier one kept as $tmp/short/trace-steps-2-3.json)" "$tmp/short2.out" &&
    grep -q '"otherData":{"first_step":5,"last_step":6,' "$tmp/short/trace.json" &&
    grep -q '"otherData":{"first_step":2,"last_step":3,' "$tmp/short/trace-steps-2-3.json" ||
    fail "the resumed run's trace: $(grep trace "$tmp/short2.out"); $(ls "$tmp/short")"

# trace.json that cannot be written (its file's flush fails with EIO:
# tests/lib/slowfs.c): a warning naming it, and the run trains to its end.
cc -shared -fPIC -O2 -o "$tmp/slowfs.so" tests/lib/slowfs.c -ldl || fail "cannot build the shim"
LD_PRELOAD="$tmp/slowfs.so" ST_SLOWFS_MATCH=/trace.json ST_SLOWFS_EIO_AFTER=0 timeout 60 "$bin" train "${common[@]}" \
    "${small[@]}" --set train.steps=6 --set train.out_dir="$tmp/eio" --profile 2-3 >"$tmp/eio.out" 2>&1 ||
    fail "trace.json unwritable: exit $?: $(tail -n 3 "$tmp/eio.out")"
grep -q "scaletrain: warning: $tmp/eio/trace.json.tmp.[0-9]*: cannot write: Input/output error; the run goes on without its profiler trace" \
    "$tmp/eio.out" || fail "trace.json unwritable: no warning naming it: $(grep -i trace "$tmp/eio.out")"
[ -e "$tmp/eio/model.safetensors" ] && [ ! -e "$tmp/eio/trace.json" ] || fail "trace.json unwritable: the run's files"

timeout 60 "$bin" train "${common[@]}" --set model.type=mlp --set model.hidden=[16] --set train.steps=2 \
    --set data.val= --set train.out_dir="$tmp/off" --quiet || fail "run without trace"
[ ! -e "$tmp/off/trace.json" ] || fail "a trace.json without log.trace"
"$bin" train --profile 5-2 --set train.out_dir="$tmp/bad" >/dev/null 2>&1
[ $? -eq 2 ] || fail "--profile 5-2 is not a usage error"
out=$("$bin" train --profile 5-2 --set train.out_dir="$tmp/bad" 2>&1)
grep -q "FIRST <= LAST" <<<"$out" || fail "--profile 5-2: not said: $out"
out=$("$bin" train --profile 2-4 --profile 3-5 --set train.out_dir="$tmp/bad" 2>&1)
[ $? -eq 2 ] && grep -q "given twice ('2-4' and '3-5')" <<<"$out" || fail "--profile given twice: not refused: $out"
# a window past the event limit (131072 a rank): the steps held whole are said, and are the trace's
# last_step (it said "wrote the trace of steps 1-3000", a counter in the JSON alone saying otherwise)
timeout 120 "$bin" train "${common[@]}" --set model.type=mlp --set model.hidden=[4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,4] \
    --set train.batch_size=4 --set train.steps=3000 --set data.val= --set train.out_dir="$tmp/cap" \
    --profile 1-3000 >"$tmp/cap.out" 2>&1 || fail "a window past the event limit: $(tail -n 3 "$tmp/cap.out")"
held=$(sed -nE 's/.*the trace of steps 1-3000 holds steps 1-([0-9]+) whole: a rank reached the limit of 131072 events.*/\1/p' "$tmp/cap.out")
[ -n "$held" ] && [ "$held" -lt 3000 ] && grep -q "wrote the trace of steps 1-$held to" "$tmp/cap.out" ||
    fail "a window past the event limit: $(grep -i trace "$tmp/cap.out")"
/usr/bin/python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); o = d["otherData"]; assert o["last_step"] == int(sys.argv[2]) and o["dropped_events"] > 0, o' \
    "$tmp/cap/trace.json" "$held" || fail "a window past the event limit: trace.json's otherData"

e2e_finish ok
