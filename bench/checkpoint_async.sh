#!/usr/bin/env bash
# Asynchronous against synchronous checkpoints in the same run
# (train.checkpoint_async; docs/formats.md, "Checkpoints"): a gpt of 4 layers
# of 256 on 2 ranks (zero1, real mpirun), 60 steps with a checkpoint every
# 10, once each way, on the local disk and on a disk whose every fsync of
# model.safetensors takes SLOW_MS more (tests/lib/slowfs.c, standing in for a
# network filesystem). Prints, per case: the step loop's seconds, tokens/s,
# the time it stalled for checkpoints (metrics.jsonl stall_s, summed) and
# rank 0's write time (write_s), and the ratio of the stalls.
#   bash bench/checkpoint_async.sh [BUILD] [SLOW_MS]     (default build, 300)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
slow_ms=${2:-300}
bin=$build/scaletrain
[ -x "$bin" ] || { echo "$bin is not built (make)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -shared -fPIC -O2 -o "$tmp/slowfs.so" tests/lib/slowfs.c -ldl
for i in $(seq 1 3000); do printf 'line %010d of the benchmark text\n' $((i * 7919 % 100003)); done >"$tmp/t.txt"
"$bin" data tokenize "$tmp/t.tokens" "$tmp/t.txt" >/dev/null
args=(--set model.type=gpt --set data.type=tokens --set data.val= --set model.n_layer=4 --set model.n_head=4
      --set model.n_embd=256 --set model.block_size=32 --set train.threads=1 --set data.num_workers=0
      --set data.train="$tmp/t.tokens" --set train.batch_size=8 --set log.progress=off --set dist.strategy=zero1
      --set train.checkpoint_every=10 --set train.steps=60 --set train.keep_checkpoints=2 --json --quiet)
printf '| disk | checkpoints | step loop s | tokens/s | stalled s | written s (rank 0) |\n|---|---|---|---|---|---|\n'
for disk in local slow; do
    env=()
    [ "$disk" = slow ] && env=(-x LD_PRELOAD="$tmp/slowfs.so" -x ST_SLOWFS_MATCH=model.safetensors -x ST_SLOWFS_MS="$slow_ms")
    for async in false true; do
        out=$tmp/$disk-$async
        mpirun --allow-run-as-root --oversubscribe --bind-to none "${env[@]}" -np 2 "$bin" train "${args[@]}" \
            --set train.checkpoint_async=$async --set train.out_dir="$out" >"$out.json"
        /usr/bin/python3 - "$out.json" "$out/metrics.jsonl" "$disk" "$async" "$slow_ms" <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][-1]
ck = [m for m in map(json.loads, open(sys.argv[2])) if m.get("checkpoint")]
stall, write = sum(c["stall_s"] for c in ck), sum(c["write_s"] for c in ck)
disk = sys.argv[3] if sys.argv[3] == "local" else f"fsync +{sys.argv[5]} ms"
kind = "async" if sys.argv[4] == "true" else "sync"
print(f"| {disk} | {kind} ({len(ck)}) | {r['seconds']:.2f} | {r['tokens_per_s']:,.0f} | {stall:.3f} | {write:.3f} |")
open(f"{sys.argv[1]}.stall", "w").write(f"{stall}\n")
PY
    done
    s=$(cat "$tmp/$disk-false.json.stall") a=$(cat "$tmp/$disk-true.json.stall")
    /usr/bin/python3 -c "import sys; s, a = float(sys.argv[1]), float(sys.argv[2]); print(f'{sys.argv[3]}: async stalls {a:.3f} s against sync {s:.3f} s: {s / a if a > 0 else float(\"inf\"):.1f}x less')" "$s" "$a" "$disk" >&2
done
