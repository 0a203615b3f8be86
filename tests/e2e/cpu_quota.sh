#!/usr/bin/env bash
# A cgroup's CPU quota (src/hw/cgroup.c): a container's --cpus or a pod's
# CPU limit gives a process some CPUs' time each period while its affinity
# mask still shows every core of the host, so threads sized by the mask are
# throttled (each product's barrier waits for its slowest thread). In a cpu
# cgroup of the test's own with a quota of one CPU (v1's cpu hierarchy, else
# v2 with the cpu controller; skipped where neither can be made):
#  1. plan --probe: 1 CPU usable by this process, naming the quota's cgroup;
#  2. train's threads left to it: 1, the quota its reason, and its loss the
#     same as one thread asked for outside the cgroup; outside, the threads
#     are the cores the process may use.
source "$(dirname "$0")/../lib/e2e.sh"
[ -x "$bin" ] || { echo "FAIL: $bin is not built"; exit 1; }
e2e_tmpdir
cg=
if [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
    cg=/sys/fs/cgroup/cpu/scaletrain_test_$$
elif grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; then
    cg=/sys/fs/cgroup/scaletrain_test_$$
fi
[ -n "$cg" ] && mkdir "$cg" 2>/dev/null ||
    e2e_skip "cannot make a cpu cgroup here (needs root and /sys/fs/cgroup with the cpu controller, writable)"
e2e_cleanup() { rmdir "$cg" 2>/dev/null; }
if [ -f "$cg/cpu.max" ]; then
    echo "100000 100000" >"$cg/cpu.max" || fail "cannot set $cg/cpu.max"
else
    echo 100000 >"$cg/cpu.cfs_period_us" && echo 100000 >"$cg/cpu.cfs_quota_us" || fail "cannot set the quota"
fi
inside() { bash -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cg" "$@"; }
source tests/lib/tiny_gpt.sh
# tiny_gpt's run fixes train.threads=1: drop it so the run chooses
args=()
for ((i = 0; i < ${#run[@]}; i++)); do
    if [ "${run[i]}" = --set ] && [ "${run[i + 1]}" = train.threads=1 ]; then i=$((i + 1)); continue; fi
    args+=("${run[i]}")
done

inside "$bin" plan --probe "${args[@]:1}" >"$tmp/probe.txt" 2>&1 || fail "plan --probe: $(cat "$tmp/probe.txt")"
grep -q "^cpu: .*(1 usable by this process, as the CPU quota of cgroup $cg (cpu\.\(cfs_quota_us\|max\)): 1 CPU)$" \
    "$tmp/probe.txt" || fail "plan --probe does not name the quota: $(head -1 "$tmp/probe.txt")"

inside "$bin" "${args[@]}" --set train.steps=3 --set train.out_dir="$tmp/in" --json >"$tmp/in.txt" 2>&1 ||
    fail "train in the cgroup: $(tail -3 "$tmp/in.txt")"
grep -Eq "^  threads: +1 +# auto: its cgroup's CPU quota, 1 CPU \(scaletrain plan --probe\)$" "$tmp/in.txt" ||
    fail "train's threads in the cgroup: $(grep '^  threads:' "$tmp/in.txt")"
"$bin" "${args[@]}" --set train.steps=3 --set train.out_dir="$tmp/out" --json >"$tmp/out.txt" 2>&1 ||
    fail "train outside: $(tail -3 "$tmp/out.txt")"
want=$(nproc)
grep -Eq "^  threads: +$want +# auto: the cores this process may use$" "$tmp/out.txt" ||
    fail "train's threads outside the cgroup (nproc $want): $(grep '^  threads:' "$tmp/out.txt")"
"$bin" "${run[@]}" --set train.steps=3 --set train.out_dir="$tmp/one" --json >"$tmp/one.txt" 2>&1 ||
    fail "train with 1 thread: $(tail -3 "$tmp/one.txt")"
loss() { grep '^{' "$1" | tail -1 | grep -o '"loss":[^,}]*'; }
[ -n "$(loss "$tmp/in.txt")" ] && [ "$(loss "$tmp/in.txt")" = "$(loss "$tmp/one.txt")" ] ||
    fail "the quota's run and one thread's differ: $(loss "$tmp/in.txt") against $(loss "$tmp/one.txt")"
e2e_finish "a cgroup's CPU quota sizes the threads"
