#!/usr/bin/env bash
# A gpt's output layer and loss fused (model.fused_head: on, linear_ce)
# against the plain pair (off: the logits kept) in the same run, on the CPU:
# a gpt of 2 layers of 256 with GPT-2's vocabulary (50257), 8 x 256 tokens,
# 2 threads, 12 steps, alternating off and on REPEATS times. Prints, per run:
# step ms (median), activations with their gradients (MiB, the graph's),
# peak RSS (MiB) and the final loss; then the ratios of the medians.
#   bash bench/fused_head.sh [BUILD] [REPEATS]     (default build, 2)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
repeats=${2:-2}
bin=$build/scaletrain
[ -x "$bin" ] || { echo "$bin is not built (make)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for i in $(seq 1 20000); do printf 'line %010d of the benchmark text\n' $((i * 7919 % 100003)); done >"$tmp/t.txt"
"$bin" data tokenize "$tmp/t.tokens" "$tmp/t.txt" >/dev/null
args=(--set model.type=gpt --set model.n_layer=2 --set model.n_head=4 --set model.n_embd=256
      --set model.block_size=256 --set model.vocab_size=50257 --set data.type=tokens --set data.val=
      --set data.train="$tmp/t.tokens" --set train.batch_size=8 --set train.steps=12 --set train.threads=2
      --set data.num_workers=0 --set log.progress=off --json --quiet)
printf '| model.fused_head | step ms | activations MiB | peak RSS MiB | final loss |\n|---|---|---|---|---|\n'
for r in $(seq 1 "$repeats"); do
    for fh in off on; do
        out=$tmp/$fh-$r
        /usr/bin/time -f '%M' -o "$out.rss" "$bin" train "${args[@]}" --set model.fused_head=$fh \
            --set train.out_dir="$out" >"$out.json"
        /usr/bin/python3 - "$out.json" "$out.rss" "$fh" <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][-1]
rss = int(open(sys.argv[2]).read().split()[-1]) / 1024
print(f"| {sys.argv[3]} | {r['step_ms_median']:.1f} | {r['activation_mib']:.1f} | {rss:.0f} | {r['loss']:.6f} |")
open(sys.argv[1] + ".sum", "w").write(f"{r['step_ms_median']} {r['activation_mib']} {rss}\n")
PY
    done
done
/usr/bin/python3 - "$tmp" "$repeats" <<'PY'
import statistics, sys
def med(fh, k):
    return statistics.median(float(open(f"{sys.argv[1]}/{fh}-{r}.json.sum").read().split()[k])
                             for r in range(1, int(sys.argv[2]) + 1))
print(f"fused/plain: step time {med('on', 0) / med('off', 0):.3f}x, activations {med('on', 1) / med('off', 1):.3f}x, "
      f"peak RSS {med('on', 2) / med('off', 2):.3f}x")
PY
