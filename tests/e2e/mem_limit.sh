#!/usr/bin/env bash
# The memory a cgroup allows (src/hw/cgroup.c): a batch job's (SLURM's
# --mem) or a container's limit sits on a cgroup below the hierarchy's root,
# and the kernel ends a process past it with SIGKILL and no message. In a
# memory cgroup of the test's own, limited to 512 MiB (v1's memory
# hierarchy, else v2 with the memory controller; skipped where neither can
# be made):
#  1. plan --probe names the limit and the cgroup, and plan's micro-batch for
#     a small GPT whose whole batch needs about 0.6 GiB is smaller than the
#     64 it picks outside the cgroup;
#  2. train with the micro-batch left to the planner: the header names the
#     limit, the micro-batch is the planner's and the run completes there;
#  3. the same with train.micro_batch_size 64 (checkpointing off, which
#     would make it fit) under launch: the warning says it does not fit and
#     names the limit, a hint says the activations take the most and what
#     would shrink them, the kernel kills the rank, and launch says its
#     out-of-memory killer did (/proc/vmstat oom_kill);
#  4. page cache the group holds (a file read in it) counts as available:
#     the kernel reclaims it, active or not, before it kills.
source "$(dirname "$0")/../lib/e2e.sh"
[ -x "$bin" ] || { echo "FAIL: $bin is not built"; exit 1; }
e2e_tmpdir
export OMP_WAIT_POLICY=PASSIVE

cg= limit_file=
if [ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then
    cg=/sys/fs/cgroup/memory/scaletrain_test_$$ limit_file=memory.limit_in_bytes
elif grep -qw memory /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; then
    cg=/sys/fs/cgroup/scaletrain_test_$$ limit_file=memory.max
fi
[ -n "$cg" ] && mkdir "$cg" 2>/dev/null ||
    e2e_skip "cannot make a memory cgroup here (needs root and /sys/fs/cgroup with the memory controller, writable)"
e2e_cleanup() { rmdir "$cg" 2>/dev/null; }
echo $((512 << 20)) >"$cg/$limit_file" || fail "cannot set $cg/$limit_file"
# no swap under the limit, where the kernel offers one: a rank over it is killed, not paged out
[ ! -f "$cg/memory.memsw.limit_in_bytes" ] || echo $((512 << 20)) >"$cg/memory.memsw.limit_in_bytes" 2>/dev/null
[ ! -f "$cg/memory.swap.max" ] || echo 0 >"$cg/memory.swap.max"
# run a command in the cgroup (the shell moves itself there, then becomes the command)
inside() { bash -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cg" "$@"; }

for i in $(seq 1 2000); do echo "line $i of the text the small model reads, a few words each time"; done >"$tmp/text.txt"
"$bin" data tokenize "$tmp/t.tokens" "$tmp/text.txt" >/dev/null || fail tokenize
cat >"$tmp/gpt.yaml" <<YAML
model: { type: gpt, n_layer: 2, n_head: 8, n_embd: 128, block_size: 256 }
data:  { type: tokens, train: $tmp/t.tokens, val: "", num_workers: 0 }
train: { steps: 1, batch_size: 64, device: cpu, threads: 2 }
log:   { peak_gflops: 50 }
YAML

# 1. what plan sees, outside and inside
micro_of() { awk '$1 == "local" { print $3 }' "$1"; }
"$bin" plan "$tmp/gpt.yaml" >"$tmp/plan_out.txt" 2>&1 || fail "plan outside the cgroup: $(cat "$tmp/plan_out.txt")"
[ "$(micro_of "$tmp/plan_out.txt")" = 64 ] || fail "outside the cgroup plan's micro-batch is not 64: $(cat "$tmp/plan_out.txt")"
inside "$bin" plan --probe "$tmp/gpt.yaml" >"$tmp/plan_in.txt" 2>&1 || fail "plan in the cgroup: $(cat "$tmp/plan_in.txt")"
grep -q "^memory: 0.5 GiB total, .* GiB available to this process, as the memory cgroup $cg ($limit_file) allows (the host has" \
    "$tmp/plan_in.txt" || fail "plan --probe does not name the cgroup's limit: $(cat "$tmp/plan_in.txt")"
grep -q "^memory: .* GiB available to this process, as the memory cgroup $cg" "$tmp/plan_in.txt" ||
    fail "plan's own memory line is missing: $(cat "$tmp/plan_in.txt")"
m=$(micro_of "$tmp/plan_in.txt")
[ -n "$m" ] && [ "$m" -lt 64 ] || fail "in the cgroup plan's micro-batch is '$m', not less than 64: $(cat "$tmp/plan_in.txt")"

# 2. a run with the planner's micro-batch completes in the cgroup
inside "$bin" train "$tmp/gpt.yaml" --set train.out_dir="$tmp/run" >"$tmp/train.txt" 2>&1
rc=$?
[ $rc -eq 0 ] || fail "train in the cgroup exited $rc: $(tail -5 "$tmp/train.txt")"
grep -q "^memory: .* GiB available to this process, as the memory cgroup $cg" "$tmp/train.txt" ||
    fail "the run's header does not name the limit"
grep -Eq "^  micro_batch_size: +$m +# auto: the largest divisor of 64 samples per rank that fits" "$tmp/train.txt" ||
    fail "the run's micro-batch is not plan's $m: $(grep micro_batch_size "$tmp/train.txt")"
grep -q "^done: 1 steps" "$tmp/train.txt" || fail "no 'done:' line: $(tail -3 "$tmp/train.txt")"

# 3. the whole batch at once: warned, killed, and launch says by what
if command -v mpirun >/dev/null; then
    inside timeout 300 "$bin" launch -n 1 train "$tmp/gpt.yaml" --set train.out_dir="$tmp/run64" \
        --set train.micro_batch_size=64 --set train.activation_checkpointing=off >"$tmp/big.txt" 2>&1
    rc=$?
    [ $rc -eq 137 ] || fail "micro-batch 64 in the cgroup exited $rc, not 137 (SIGKILL): $(tail -5 "$tmp/big.txt")"
    grep -q "scaletrain: warning: does not fit: .* GiB needed per rank, at micro-batch 64 (train.micro_batch_size); .* GiB usable (memory model, docs/planner.md); memory: .* as the memory cgroup $cg" "$tmp/big.txt" ||
        fail "no warning naming the limit: $(grep -i warn "$tmp/big.txt")"
    grep -q "scaletrain: hint: of the .* GiB: model states .*, activations .*; the activations take the most: a smaller train.micro_batch_size, train.activation_checkpointing: blocks (recomputed in backward), .*the kernel ends a process with SIGKILL" "$tmp/big.txt" ||
        fail "no hint saying what takes the memory and what shrinks it: $(grep -i hint "$tmp/big.txt")"
    grep -q "^scaletrain launch: the kernel's out-of-memory killer ended [1-9][0-9]* process.* on this node while the job ran" "$tmp/big.txt" ||
        fail "launch does not name the out-of-memory killer: $(tail -4 "$tmp/big.txt")"
else
    echo "mem_limit: part 3 skipped: mpirun is missing (apt-get install openmpi-bin libopenmpi-dev)"
fi

# 4. page cache the group holds is available: a 320 MiB file written and read
# three times in the group (its pages active, charged to the group) leaves
# plan's figure near the limit, not the limit less the file (the kernel
# reclaims those pages before it kills; before, plan saw 0.18 GiB and a
# micro-batch of 8 where it is 32 without the file)
stat_of() { awk -v k="$1" '$1 == k { print $2 }' "$cg/memory.stat"; }
inside bash -c 'head -c 320M /dev/zero >"$0" && for i in 1 2 3; do cat "$0" >/dev/null; done' "$tmp/cache.bin" ||
    fail "could not write and read a file in the cgroup"
if [ -f "$cg/memory.current" ]; then k_active=active_file k_inactive=inactive_file; else k_active=total_active_file k_inactive=total_inactive_file; fi
cached=$(($(stat_of $k_active) + $(stat_of $k_inactive)))
if [ "$cached" -lt $((250 << 20)) ]; then
    echo "mem_limit: part 4 skipped: the group holds $((cached >> 20)) MiB of page cache after the reads (its folder's file system keeps files elsewhere?)"
else
    inside "$bin" plan --probe "$tmp/gpt.yaml" >"$tmp/plan_cache.txt" 2>&1 || fail "plan with the cache: $(cat "$tmp/plan_cache.txt")"
    avail=$(sed -nE 's/^memory: 0.5 GiB total, ([0-9.]+) GiB available.*/\1/p' "$tmp/plan_cache.txt")
    echo "with $((cached >> 20)) MiB of page cache in the group ($(($(stat_of $k_active) >> 20)) MiB active): ${avail:-?} GiB available"
    awk -v a="${avail:-0}" 'BEGIN { exit !(a >= 0.4) }' ||
        fail "with the group's page cache plan sees ${avail:-no} GiB available, not 0.4 or more: $(grep '^memory' "$tmp/plan_cache.txt")"
    [ "$(micro_of "$tmp/plan_cache.txt")" = "$m" ] ||
        fail "with the group's page cache plan's micro-batch is $(micro_of "$tmp/plan_cache.txt"), not $m as without it"
fi
rm -f "$tmp/cache.bin"
e2e_finish "the planner fits a cgroup's limit; a run past it is named as killed by the out-of-memory killer"
