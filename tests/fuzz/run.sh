#!/usr/bin/env bash
# Run every fuzz target for a bounded time each, from seed corpora written to
# a temporary directory; crashes are written to the current directory
# (crash-*, leak-*, oom-*). Usage: tests/fuzz/run.sh [SECONDS] [FUZZ_BUILD]
# (build first with `make fuzz`). Exit status: non-zero if a target failed.
set -u
secs=${1:-60}
build=${2:-build-fuzz}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/st_fuzz_XXXXXX)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 "$here/seeds.py" "$work"
status=0
for target in npy idx tokens safetensors config; do
    bin=$build/fuzz_$target
    [ -x "$bin" ] || { echo "missing $bin: run make fuzz"; status=1; continue; }
    dict=()
    [ -f "$here/$target.dict" ] && dict=(-dict="$here/$target.dict")
    [ -f "$work/$target.dict" ] && dict=(-dict="$work/$target.dict")
    echo "== fuzz_$target for ${secs}s"
    "$bin" "${dict[@]}" -max_total_time="$secs" -rss_limit_mb=2048 -malloc_limit_mb=1024 -max_len=4096 \
        -print_final_stats=1 "$work/$target" 2>&1 | grep -E "^(==|#[0-9]+ +DONE|stat::(number_of_executed_units|peak_rss_mb|new_units_added)|SUMMARY|ERROR|Done)"
    rc=${PIPESTATUS[0]}
    [ "$rc" -eq 0 ] || { echo "fuzz_$target: exit $rc"; status=1; }
done
exit $status
