#!/usr/bin/env bash
# A checkpoint's verification (every file's size and CRC-32, as a resume
# does first; docs/formats.md, "Resuming") on every thread against one
# thread (zlib's crc32 alone, as before core/crc.c), in the same run: the
# checkpoint of a gpt of 8 layers of 1024 (about 100 M parameters: a 385
# MiB model file and 771 MiB of AdamW state), read by `data inspect` 3
# times each way after one read to warm the page cache. Prints the median
# seconds, the GB/s and the ratio.
#   bash bench/checkpoint_verify.sh [BUILD] [THREADS]   (default build, all cores)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
threads=${2:-$(nproc)}
bin=$build/scaletrain
[ -x "$bin" ] || { echo "$bin is not built (make)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for i in $(seq 1 400); do printf 'line %010d of the benchmark text\n' "$i"; done >"$tmp/t.txt"
"$bin" data tokenize "$tmp/t.tokens" "$tmp/t.txt" >/dev/null
"$bin" train --set model.type=gpt --set model.n_layer=8 --set model.n_head=8 --set model.n_embd=1024 \
    --set model.block_size=16 --set data.type=tokens --set data.train="$tmp/t.tokens" --set data.val= \
    --set train.batch_size=2 --set train.steps=1 --set train.out_dir="$tmp/run" --quiet
ck=$tmp/run/ckpt/step-1
bytes=$(du -cb "$ck"/*.safetensors | tail -n 1 | cut -f1)
"$bin" data inspect "$ck" >/dev/null # (the page cache warm: the disk is not what is measured)
median() { # COMMAND...: the median of 3 wall times, in seconds
    local t0 i
    for i in 1 2 3; do
        t0=$(date +%s.%N)
        "$@" >/dev/null
        awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.3f\n", a - b }'
    done | sort -n | sed -n 2p
}
one=$(median env OMP_NUM_THREADS=1 "$bin" data inspect "$ck")
all=$(median env OMP_NUM_THREADS="$threads" "$bin" data inspect "$ck")
/usr/bin/python3 - "$bytes" "$one" "$all" "$threads" <<'PY'
import sys
b, one, all_, t = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
print("| threads | seconds (median of 3) | GB/s |\n|---|---|---|")
print(f"| 1 | {one:.2f} | {b / one / 1e9:.2f} |")
print(f"| {t} | {all_:.2f} | {b / all_ / 1e9:.2f} |")
print(f"verification of {b / 1e9:.2f} GB: {t} threads {one / all_:.2f}x one thread" if all_ > 0 else "too fast to time")
PY
