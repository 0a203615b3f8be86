#!/usr/bin/env bash
# A SLURM job's --mem, as a production cluster enforces it: the test's own
# single-node cluster (tests/slurm/cluster.sh with SLURM_MEM_CGROUP=1) puts
# each job in a memory cgroup limited to what it asked for
# (slurm_HOST/uid_0/job_N, below the hierarchy's root, where the planner
# once did not look). With --mem=512M, a small GPT whose whole batch of 64
# needs about 0.6 GiB (src/hw/cgroup.c):
#  1. `srun plan --probe` names the job's cgroup and its limit, and plans a
#     micro-batch below the 64 it plans outside the job;
#  2. `srun train` with the micro-batch left to the planner completes, its
#     header naming the limit;
#  3. the same with train.micro_batch_size 64 (and no activation
#     checkpointing, which would make it fit) is warned that it does not fit
#     (naming the limit) and the kernel ends it: SLURM records OUT_OF_MEMORY.
# tests/run.sh: serial (a SLURM test cluster at a time: a cgroup-tracking one names its cgroups after the node and its jobs from 1)
source "$(dirname "$0")/../lib/e2e.sh"
bin=$(realpath "$build/scaletrain")
e2e_need_slurm
[ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ] || grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null ||
    e2e_skip "no memory cgroup controller for SLURM's task/cgroup (/sys/fs/cgroup)"
cd "$(dirname "$0")/../.." || exit 1
source tests/slurm/cluster.sh
slurm_e2e_tmpdir

SLURM_MEM_CGROUP=1 slurm_up "$tmp/cluster"
echo "cluster up: $(sinfo -h -o '%P %a %D %T %c cpus %m MB')"

for i in $(seq 1 2000); do echo "line $i of the text the small model reads, a few words each time"; done >"$tmp/text.txt"
"$bin" data tokenize "$tmp/t.tokens" "$tmp/text.txt" >/dev/null || fail tokenize
cat >"$tmp/gpt.yaml" <<YAML
model: { type: gpt, n_layer: 2, n_head: 8, n_embd: 128, block_size: 256 }
data:  { type: tokens, train: $tmp/t.tokens, val: "", num_workers: 0 }
train: { steps: 1, batch_size: 64, device: cpu, threads: 1 }
log:   { peak_gflops: 50, progress: "off" }
YAML
job=(timeout 300 srun --mem=512M -n 1 -c 1)
micro_of() { awk '$1 == "local" { print $3 }' "$1"; }

# 1. what the planner sees, outside the job and in it
"$bin" plan "$tmp/gpt.yaml" >"$tmp/plan_out.txt" 2>&1 || fail "plan outside a job: $(cat "$tmp/plan_out.txt")"
[ "$(micro_of "$tmp/plan_out.txt")" = 64 ] || fail "outside a job plan's micro-batch is not 64: $(cat "$tmp/plan_out.txt")"
"${job[@]}" "$bin" plan --probe "$tmp/gpt.yaml" >"$tmp/plan_in.txt" 2>&1 || fail "srun plan: $(cat "$tmp/plan_in.txt")"
grep -Eq "^memory: 0.5 GiB total, .* GiB available to this process, as the memory cgroup /sys/fs/cgroup/(memory/)?slurm[^ ]*/job_[0-9]+ \(memory\.(limit_in_bytes|max)\) allows" \
    "$tmp/plan_in.txt" || fail "srun plan --probe does not name the job's limit: $(cat "$tmp/plan_in.txt")"
m=$(micro_of "$tmp/plan_in.txt")
[ -n "$m" ] && [ "$m" -lt 64 ] || fail "in the job plan's micro-batch is '$m', not less than 64: $(cat "$tmp/plan_in.txt")"

# 2. the planner's micro-batch trains in the job
"${job[@]}" "$bin" train "$tmp/gpt.yaml" --set train.out_dir="$tmp/run" >"$tmp/train.txt" 2>&1
rc=$?
[ $rc -eq 0 ] || fail "srun train exited $rc: $(tail -5 "$tmp/train.txt")"
grep -q "^memory: .* GiB available to this process, as the memory cgroup .*/job_[0-9]* " "$tmp/train.txt" ||
    fail "the run's header does not name the job's limit"
grep -Eq "^  micro_batch_size: +$m +# auto: the largest divisor of 64 samples per rank that fits" "$tmp/train.txt" ||
    fail "the run's micro-batch is not plan's $m: $(grep micro_batch_size "$tmp/train.txt")"
grep -q "^done: 1 steps" "$tmp/train.txt" || fail "no 'done:' line: $(tail -3 "$tmp/train.txt")"

# 3. the whole batch at once: warned, and the kernel ends it
jid=$(sbatch --parsable --mem=512M -n 1 -c 1 -o "$tmp/big.txt" --wrap "$bin train $tmp/gpt.yaml --set train.out_dir=$tmp/run64 --set train.micro_batch_size=64 --set train.activation_checkpointing=off") ||
    fail "sbatch refused the job"
for _ in $(seq 1 3000); do # at most ~300 s
    s=$(job_state "$jid")
    case "$s" in PENDING | RUNNING | CONFIGURING | COMPLETING | "") sleep 0.1 ;; *) break ;; esac
done
[ "$s" = OUT_OF_MEMORY ] || fail "job $jid with micro-batch 64 ended $s, not OUT_OF_MEMORY: $(tail -5 "$tmp/big.txt")"
# (the job's cgroup or its batch step's, both limited to 512M: the warning
# names the level with the least room left, and their usage differs by a
# little either way)
grep -qE "scaletrain: warning: does not fit: .* GiB needed per rank, at micro-batch 64 \(train.micro_batch_size\); .*; memory: .* as the memory cgroup .*/job_$jid(/step_batch)? " \
    "$tmp/big.txt" || fail "no warning naming the job's limit: $(grep -i warn "$tmp/big.txt")"
e2e_finish "a job's --mem bounds the planner's micro-batch; one past it is warned and recorded OUT_OF_MEMORY"
