#!/usr/bin/env bash
# What synchronised batch-norm costs (dist.sync_batchnorm: each batch-norm
# layer's statistics all-reduced over the ranks, three small all-reduces a
# layer and micro-step) against each rank's own statistics, in the same run:
# the cnn with batch-norm (channels 32, 64, each pooled) on Fashion-MNIST, 2 ranks under
# mpirun, batch 256 (128 a rank), 1 thread a rank, 25 steps, alternating
# off and on REPEATS times. Prints, per run: step ms (median), samples/s,
# the data-parallel wait (comm_ms a step) and the final loss; then the
# ratio of the medians.
#   bash bench/sync_batchnorm.sh [BUILD] [REPEATS] [DEVICE]   (default build, 3, cpu)
# DEVICE cuda trains on the node's GPUs (a rank each: 2 GPUs at least; the
# statistics then go through NCCL in the compute stream's order).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
repeats=${2:-3}
device=${3:-cpu}
bin=$build/scaletrain
[ -x "$bin" ] || { echo "$bin is not built (make)"; exit 1; }
command -v mpirun >/dev/null || { echo "no mpirun (apt-get install openmpi-bin)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(--set model.type=cnn --set model.channels=[32,64] --set model.pool=[1,1] --set model.batchnorm=true --set train.batch_size=256
      --set train.steps=25 --set train.threads=1 --set data.num_workers=1 --set data.val= --set log.progress=off
      --set train.device="$device" --json --quiet)
export OMP_WAIT_POLICY=PASSIVE
printf '| dist.sync_batchnorm | step ms | samples/s | comm ms a step | final loss |\n|---|---|---|---|---|\n'
for r in $(seq 1 "$repeats"); do
    for sync in false true; do
        out=$tmp/$sync-$r
        mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "$bin" train "${args[@]}" \
            --set dist.sync_batchnorm=$sync --set train.out_dir="$out" >"$out.json"
        /usr/bin/python3 - "$out.json" "$sync" <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][-1]
comm = r.get("comm_ms", float("nan"))
print(f"| {sys.argv[2]} | {r['step_ms_median']:.1f} | {r['samples_per_s']:.0f} | {comm:.2f} | {r['loss']:.6f} |")
open(sys.argv[1] + ".sum", "w").write(f"{r['step_ms_median']} {r['samples_per_s']}\n")
PY
    done
done
/usr/bin/python3 - "$tmp" "$repeats" <<'PY'
import statistics, sys
def med(sync, k):
    return statistics.median(float(open(f"{sys.argv[1]}/{sync}-{r}.json.sum").read().split()[k])
                             for r in range(1, int(sys.argv[2]) + 1))
print(f"sync/local: step time {med('true', 0) / med('false', 0):.3f}x, samples/s {med('true', 1) / med('false', 1):.3f}x")
PY
