#!/usr/bin/env bash
# The profiler trace's GPU timeline (docs/formats.md, "Profiler trace"), on
# the CUDA emulator (make emu): `--profile 2-3` of a small gpt on one
# emulated GPU, and on two through NCCL with small gradient buckets. Besides
# the host's tracks, each rank's trace.json has one track per device stream,
# named: the compute stream with one span per layer pass the host's track
# shows (the same category and name: every forward and backward of steps 2
# and 3) and one optimizer span per step; the copy stream with one batch
# copy per micro-step; on 2 ranks the communication stream with one span per
# gradient bucket per step (as many as the host's bucket tracks hold), and
# under zero1 one more a step, the weights' all-gather. Every
# span has ts, dur >= 0, starts no earlier than the host queued it (less a
# millisecond for the anchor's reading), and a stream's spans follow one
# another (a stream runs its work in order). Each layer pass, on the host's
# track and the GPU's, carries the same work from the cost model ("args":
# the products' FLOPs, exact for c_attn; the elements a layernorm moves).
# A fourth track holds a span per matrix product and named kernel inside a
# layer (st_trace_span), each within its layer's span. On the emulator the times are
# its own (streams run late, one at a time); a GPU session checks them on a
# device (scripts/gpu-session.sh).
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_emu
e2e_need_mpirun
e2e_tmpdir
e2e_mpi 180
for i in $(seq 1 300); do echo "a small corpus for the profiler, line $i"; done >"$tmp/text.txt"
"$bin" data tokenize "$tmp/text.tokens" "$tmp/text.txt" >/dev/null
gpt=(--set model.type=gpt --set model.n_layer=2 --set model.n_embd=32 --set model.n_head=2 --set model.block_size=32
    --set data.type=tokens --set data.train="$tmp/text.tokens" --set data.val= --set train.steps=4
    --set train.device=cuda --set precision=fp32 --set log.progress=off --profile 2-3)

check() { # FILE RANKS MICRO_STEPS_PER_STEP GATHERS (weights all-gathered per step: ZeRO)
    /usr/bin/python3 - "$@" <<'PY'
import json, sys
from collections import Counter
path, ranks, micro, gathers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
d = json.load(open(path))
ev = d["traceEvents"]
X = [e for e in ev if e.get("ph") == "X"]
names = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e.get("ph") == "M" and e["name"] == "thread_name"}
bad = []
def check(cond, what):
    if not cond: bad.append(what)
check(d["otherData"]["dropped_events"] == 0, "no event dropped")
for e in X:
    check(e["ts"] >= 0 and e["dur"] >= 0 and e["pid"] in range(ranks), f"ts and dur >= 0, pid a rank: {e}")
for r in range(ranks):
    mine = [e for e in X if e["pid"] == r]
    gpu = {t: sorted((e for e in mine if e["tid"] == t), key=lambda e: e["ts"]) for t in (2000, 2001, 2002)}
    want = {2000: "GPU: compute stream", 2002: "GPU: copy stream"}
    if ranks > 1: want[2001] = "GPU: communication stream"
    for t, n in want.items():
        check(names.get((r, t)) == n, f"rank {r}: track {t} named {n!r}, got {names.get((r, t))!r}")
    host_layers = Counter((e["cat"], e["name"]) for e in mine if e["tid"] == 0 and e["cat"] in ("forward", "backward")
                          and "(" in e["name"])
    gpu_layers = Counter((e["cat"], e["name"]) for e in gpu[2000] if e["cat"] in ("forward", "backward"))
    check(len(host_layers) > 10 and host_layers == gpu_layers,
          f"rank {r}: the compute stream's layer spans are the host's layer events: {host_layers - gpu_layers} missing, "
          f"{gpu_layers - host_layers} extra")
    check(sum(1 for e in gpu[2000] if e["cat"] == "optim") == 2, f"rank {r}: one optimizer span per traced step")
    check(len(gpu[2002]) == 2 * micro, f"rank {r}: {len(gpu[2002])} batch copies for {2 * micro} micro-steps")
    buckets = sum(1 for e in mine if 1000 <= e["tid"] < 2000)
    if ranks > 1:
        nb = sum(1 for e in gpu[2001] if e["name"].startswith("grad bucket "))
        ng = sum(1 for e in gpu[2001] if e["name"] == "parameters all-gather")
        check(buckets > 2 and nb == buckets, f"rank {r}: {nb} bucket spans for {buckets} bucket events")
        check(ng == 2 * gathers and nb + ng == len(gpu[2001]), f"rank {r}: {ng} weight all-gathers for {2 * gathers}")
    else:
        check(not gpu[2001], f"rank {r}: no communication spans on one rank")
    for t, spans in gpu.items():
        for e in spans:
            check(e["ts"] >= 0 and e["dur"] >= 0, f"rank {r}: ts and dur >= 0: {e}")
        if t != 2000:
            for a, b in zip(spans, spans[1:]):
                check(b["ts"] >= a["ts"] + a["dur"] - 0.002, f"rank {r}: {b['name']} starts before {a['name']} ends")
    # no span starts before the host queued it: each layer's span against its host event, in order
    host_seq = [e for e in sorted(mine, key=lambda e: e["ts"]) if e["tid"] == 0 and e["cat"] in ("forward", "backward") and "(" in e["name"]]
    gpu_seq = [e for e in gpu[2000] if e["cat"] in ("forward", "backward")]
    for h, g in zip(host_seq, gpu_seq):
        check(h["name"] == g["name"] and g["ts"] >= h["ts"] - 1000, f"rank {r}: {g['name']} at {g['ts']} before the host's {h['ts']}")
        check(h.get("args") == g.get("args"), f"rank {r}: {g['name']}: the span's work {g.get('args')} is not its layer's {h.get('args')}")
    # each pass carries its work: products their FLOPs, elementwise layers their elements
    lin = [e for e in gpu_seq if e["name"].endswith("(linear)")]
    ln = [e for e in gpu_seq if e["name"].endswith("(layernorm)")]
    check(lin and all(e.get("args", {}).get("flops", 0) > 0 for e in lin), f"rank {r}: linear spans carry their FLOPs")
    check(ln and all(e.get("args", {}).get("elems", 0) > 0 and e["args"]["flops"] == 0 for e in ln),
          f"rank {r}: layernorm spans carry their elements, no FLOPs")
    # the first block's attention input product, forward: 2 x rows x 32 x 96 FLOPs
    rows = 4 * 32  # a micro-batch of 4 on every rank, 32 tokens each
    qkv = [e for e in gpu_seq if e["name"] == "h.0.attn.c_attn (linear)" and e["cat"] == "forward"]
    check(qkv and all(e["args"]["flops"] == 2 * rows * 32 * 96 for e in qkv), f"rank {r}: c_attn forward FLOPs {qkv[:1]}")
    # the products and named kernels inside layers: their own track, each span inside a layer's span
    # on the same stream, the products with their FLOPs (c_attn forward's among them)
    kern = sorted((e for e in mine if e["tid"] == 2003), key=lambda e: e["ts"])
    check(names.get((r, 2003)) == "GPU: compute stream, products and kernels", f"rank {r}: track 2003 named")
    kn = Counter(e["name"] for e in kern)
    fwd = sum(kn[k] for k in ("linear forward", "linear forward with residual", "linear forward with GELU"))
    check(fwd >= 2 * 4 * micro and kn["linear dW"] >= 2 * 4 * micro,
          f"rank {r}: a span per linear product: {dict(kn)}")
    for e in kern:
        check(any(l["ts"] - 1 <= e["ts"] and e["ts"] + e["dur"] <= l["ts"] + l["dur"] + 1 for l in gpu_seq),
              f"rank {r}: {e['name']} at {e['ts']} inside no layer's span")
        # products (the named kernels among these names: the fused head's rows, a bias's column sum)
        if e["name"].split()[0] in ("linear", "linear_ce") and e["name"] not in ("linear_ce rows", "linear db"):
            check(e.get("args", {}).get("flops", 0) > 0, f"rank {r}: {e['name']} carries its FLOPs")
    check(any(e["name"] == "linear forward" and e["args"]["flops"] == 2 * rows * 32 * 96 for e in kern),
          f"rank {r}: c_attn's forward product among the spans")
check(d["otherData"].get("elem_bytes") == 4, "fp32 on the device: 4 bytes an element")
print("\n".join("FAIL: " + b for b in bad[:20]) if bad else f"{path}: GPU tracks ok on {ranks} rank(s)")
sys.exit(1 if bad else 0)
PY
}

"$bin" train "${gpt[@]}" --set train.batch_size=8 --set train.micro_batch_size=4 --set train.out_dir="$tmp/one" \
    >"$tmp/one.txt" 2>&1 || { cat "$tmp/one.txt"; fail "the 1-GPU profiled run failed"; }
check "$tmp/one/trace.json" 1 2 0 || fail "1 emulated GPU: the GPU timeline"
"${mpi[@]}" -np 2 "$bin" train "${gpt[@]}" --set train.batch_size=8 --set dist.bucket_cap_mb=0.005 \
    --set train.out_dir="$tmp/two" >"$tmp/two.txt" 2>&1 || { cat "$tmp/two.txt"; fail "the 2-GPU profiled run failed"; }
check "$tmp/two/trace.json" 2 1 0 || fail "2 emulated GPUs through NCCL: the GPU timeline"
"${mpi[@]}" -np 2 "$bin" train "${gpt[@]}" --set train.batch_size=8 --set dist.bucket_cap_mb=0.005 \
    --set dist.strategy=zero1 --set train.out_dir="$tmp/zero" >"$tmp/zero.txt" 2>&1 ||
    { cat "$tmp/zero.txt"; fail "the 2-GPU zero1 profiled run failed"; }
check "$tmp/zero/trace.json" 2 1 1 || fail "2 emulated GPUs under zero1: the GPU timeline"
# the summary the GPU session prints reads these traces
here=$(cd "$(dirname "$0")/../.." && pwd)
/usr/bin/python3 "$here/bench/trace_summary.py" "$tmp/zero/trace.json" --rank 1 >"$tmp/summary.txt" 2>&1 &&
    grep -q "^| step 3 | .* | .*% | .*% | .*% |$" "$tmp/summary.txt" &&
    grep -q "^| linear | forward | .* TFLOP/s" "$tmp/summary.txt" &&
    grep -q "^compute stream busy [0-9]*-[0-9]*% of the GPU's step; per step by layer kind: " "$tmp/summary.txt" &&
    grep -q "^| linear forward | .* | .* | .*% | .* |$" "$tmp/summary.txt" &&
    grep -q "heaviest products and kernels inside them: " "$tmp/summary.txt" ||
    { cat "$tmp/summary.txt"; fail "bench/trace_summary.py on the zero1 trace"; }
e2e_finish "the GPU timeline of the profiler trace: per-stream tracks on 1 and 2 emulated GPUs"
