#!/usr/bin/env bash
# `scaletrain slurm` on a real single-node SLURM cluster (issue 6), started by
# this test under a temporary directory (tests/slurm/cluster.sh) and stopped
# at the end whatever happens:
# (a) the script `scaletrain slurm` writes for 1 node x 2 tasks is submitted
#     with sbatch; the test polls the job's state (bounded) until it ends and
#     checks: COMPLETED with exit 0, 2 ranks, every step, a finite loss, the
#     checkpoint and weights written, and weights equal to one rank's with
#     the same global batch (the ranks agreed and averaged);
# (b) `srun --mpi=pmix -n 2 scaletrain train` with no launcher: 2 ranks;
# (c) pre-emption: `scancel --signal=TERM` on a running job: the ranks save a
#     checkpoint and exit 143, the script requeues the job, and the requeued
#     job resumes from that checkpoint (made eligible at once with
#     `scontrol update StartTime=now`: SLURM holds a requeued job ~2 minutes).
# tests/run.sh: serial (a SLURM test cluster at a time: its node is this host, as the others')
source "$(dirname "$0")/../lib/e2e.sh"
bin=$(realpath "$build/scaletrain")
e2e_need_slurm
e2e_need_mpirun
cd "$(dirname "$0")/../.." || exit 1
source tests/slurm/cluster.sh
slurm_e2e_tmpdir

slurm_up "$tmp/cluster"
echo "cluster up: $(sinfo -h -o '%P %a %D %T %c cpus')"

slurm_tiny_gpt "$tmp" 20 5 "$bin"

# wait_state JOB SECONDS STATE...: poll until the job is in one of the states.
wait_state() {
    local j=$1 n=$(($2 * 10)) s; shift 2
    for _ in $(seq 1 $n); do
        s=$(job_state "$j")
        for want in "$@"; do [ "$s" = "$want" ] && return 0; done
        sleep 0.1
    done
    echo "job $j: still $s after the wait" >&2
    return 1
}

# (a) sbatch the generated script.
(cd "$tmp" && "$bin" slurm tiny.yaml --nodes 1 --gpus-per-node 0 --tasks-per-node 2 --cpus-per-task 1 \
    --time 00:10:00 --json) >"$tmp/job.sbatch" || fail "scaletrain slurm exited $?"
grep -E '^#SBATCH|^srun' "$tmp/job.sbatch" | sed 's/^/    /'
# (srun takes no --cpus-per-task from sbatch since SLURM 22.05: the script says it again)
grep -q "^export OMP_NUM_THREADS=1 SRUN_CPUS_PER_TASK=1$" "$tmp/job.sbatch" ||
    fail "the script does not pass --cpus-per-task on to srun (SRUN_CPUS_PER_TASK)"
jid=$(sbatch --parsable "$tmp/job.sbatch") || fail "sbatch refused the script"
echo "submitted job $jid"
wait_state "$jid" 120 COMPLETED FAILED CANCELLED TIMEOUT NODE_FAIL OUT_OF_MEMORY BOOT_FAIL || fail "job $jid did not end"
info=$(scontrol show job "$jid")
log=$tmp/slurm-scaletrain-tiny-$jid.out
grep -q "JobState=COMPLETED" <<<"$info" && grep -q "ExitCode=0:0" <<<"$info" ||
    fail "job $jid: $(grep -oE 'JobState=[A-Z_]+|ExitCode=[0-9:]+' <<<"$info" | tr '\n' ' '): $(tail -n 20 "$log")"
js=$(grep '^{' "$log" | tail -n 1)
echo "job $jid: $(grep -oE 'JobState=[A-Z_]+|ExitCode=[0-9:]+' <<<"$info" | tr '\n' ' ')$js"
/usr/bin/python3 - "$js" <<'PY' || fail "job $jid: the JSON line"
import json, math, sys
r = json.loads(sys.argv[1])
assert r["ranks"] == 2 and r["steps"] == 20, r
assert math.isfinite(r["loss"]) and 0 < r["loss"] < 10, r
PY
grep -q "resume: no checkpoint in $tmp/run/ckpt; starting from step 0" "$log" || fail "job $jid: --resume auto on a fresh run"
[ "$(cat "$tmp/run/ckpt/latest" 2>/dev/null)" = "step-20" ] || fail "job $jid: the last checkpoint is not step-20"
[ -f "$tmp/run/model.safetensors" ] || fail "job $jid: no weights"
timeout 60 "$bin" train "$tmp/tiny.yaml" --set train.out_dir="$tmp/one" --quiet || fail "the 1-rank run"
echo -n "job $jid against 1 rank: "
/usr/bin/python3 tests/py/weights_diff.py "$tmp/one/model.safetensors" "$tmp/run/model.safetensors" 1e-3 ||
    fail "job $jid: 2 ranks under SLURM and 1 rank differ"

# (b) srun straight, no launcher: rank and size from PMIx.
out=$(cd "$tmp" && timeout 120 srun --mpi=pmix -n 2 "$bin" train tiny.yaml --set train.out_dir="$tmp/srun" \
    --quiet --json 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q '"ranks":2' <<<"$out" || fail "srun --mpi=pmix -n 2: exit $rc: $out"
echo "srun --mpi=pmix -n 2 scaletrain train: exit $rc, $(grep -o '"ranks":2' <<<"$out")"

# (c) pre-emption: SIGTERM to the running job's ranks.
(cd "$tmp" && "$bin" slurm tiny.yaml --nodes 1 --gpus-per-node 0 --tasks-per-node 2 --job-name pre \
    --set train.steps=1000000 --set train.out_dir="$tmp/pre") >"$tmp/pre.sbatch"
jid=$(sbatch --parsable "$tmp/pre.sbatch") || fail "sbatch refused the pre-emption script"
log=$tmp/slurm-pre-$jid.out
for _ in $(seq 1 600); do # until training has saved a checkpoint (at most ~60 s)
    [ -s "$tmp/pre/ckpt/latest" ] && [ "$(job_state "$jid")" = RUNNING ] && break
    sleep 0.1
done
[ -s "$tmp/pre/ckpt/latest" ] || fail "pre-emption: training did not start: $(cat "$log")"
scancel --signal=TERM "$jid"
wait_state "$jid" 60 PENDING || fail "pre-emption: job $jid was not requeued: $(tail -n 5 "$log")"
stopped=$(grep -oE "stopped by SIGTERM after step [0-9]+ of 1000000, checkpoint saved to [^;]+" "$log")
echo "pre-emption: $stopped"
[ -n "$stopped" ] || fail "pre-emption: no checkpoint message: $(tail -n 5 "$log")"
grep -q "srun: error: .*Exited with exit code 143" "$log" || fail "pre-emption: the ranks did not exit 143"
grep -q "requeueing job $jid" "$log" || fail "pre-emption: the script did not requeue"
ck=${stopped##* }
[ "$tmp/pre/ckpt/$(cat "$tmp/pre/ckpt/latest")" = "$ck" ] || fail "pre-emption: latest is not $ck"
# The first run's step must be gone from the node before the job runs again:
# a step that is still tearing down holds its PMIx socket, and the new step
# of the same id fails to launch ("Cannot bind() UNIX socket"). SLURM's own
# two-minute hold covers that; making it eligible at once does not.
for _ in $(seq 1 300); do
    pgrep -f "^slurmstepd: \[$jid\.0\]" >/dev/null || break
    sleep 0.1
done
scontrol update JobId="$jid" StartTime=now || fail "pre-emption: cannot make the requeued job eligible"
for _ in $(seq 1 600); do
    grep -q "^resumed from" "$log" && break
    sleep 0.1
done
grep -q "^resumed from $ck at step ${ck##*-}$" "$log" && echo "pre-emption: requeued, $(grep '^resumed from' "$log")" ||
    fail "pre-emption: the requeued job did not resume from $ck: $(tail -n 5 "$log")"
scancel "$jid"

e2e_finish "all passed"
