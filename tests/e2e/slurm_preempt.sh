#!/usr/bin/env bash
# SLURM pre-emption on a real single-node cluster (issues 4 and 6), started
# by this test (tests/slurm/cluster.sh) and stopped at the end:
# the job script `scaletrain slurm` writes (2 tasks, srun --mpi=pmix) trains
# with no periodic checkpoint; once rank 0 has written its first metrics line
# (polled, bounded), `scancel --signal=TERM --full` sends SIGTERM to the batch
# step (SLURM 22.05 signals the batch script's processes, not the other steps),
# as a pre-emption signal to the batch script does. Checked:
# - the batch shell outlived the signal and passed it on to the ranks (its
#   trap's line), srun did not turn it into SIGKILL ("forcing job
#   termination"), and the shell requeued the job;
# - the ranks finished their step and exited 143 (srun's line; docs/commands.md);
# - the checkpoint the message names is the one `latest` points to, written
#   by the stop (train.checkpoint_every is 0), with its files;
# - `--resume auto` (srun --mpi=pmix -n 2) continues from it: "resumed from
#   ... at step N", 3 more steps, exit 0, and metrics.jsonl goes on from N+1.
# The requeued job itself is cancelled (SLURM holds it ~2 minutes;
# tests/e2e/slurm.sh covers its restart). Then (pgid) a plain `scancel JOB`
# of a new job: the ranks checkpoint and the script does not requeue it. All of it twice: on a cluster that
# tracks a job's processes by process group (proctrack/pgid) and on one that
# tracks them by cgroup (proctrack/cgroup, task/cgroup: production's usual).
# tests/run.sh: serial (a SLURM test cluster at a time: a cgroup-tracking one names its cgroups after the node and its jobs from 1)
source "$(dirname "$0")/../lib/e2e.sh"
bin=$(realpath "$build/scaletrain")
e2e_need_slurm scancel
e2e_need_mpirun
cd "$(dirname "$0")/../.." || exit 1
source tests/slurm/cluster.sh
slurm_e2e_tmpdir

# preempt MODE: the whole check on a cluster that tracks processes by
# process group (pgid: srun in a session of its own keeps the batch step's
# signal) or by cgroup (cgroup: every process of the batch step gets it,
# srun too, as on most production clusters; SLURM_MEM_CGROUP=1), in
# $tmp/MODE; the cluster is stopped at the end.
preempt() {
    local mode=$1 d=$tmp/$1 jid log t0 dt stopped ck n out rc last
    mkdir -p "$d"
    if [ "$mode" = cgroup ]; then SLURM_MEM_CGROUP=1 slurm_up "$tmp/cluster"; else slurm_up "$tmp/cluster"; fi
    grep -E "^(ProctrackType|TaskPlugin)=" "$tmp/cluster/slurm.conf" | paste -sd ' '

    # (steps of about 10 ms, not the tiny gpt's 0.2: a line a step into
    # the job's output through SLURM's I/O forwarding at 4,500 lines a
    # second starved every other process of the machine, scancel's start
    # took up to a minute, and a test beside this one 4 times as long)
    slurm_tiny_gpt "$d" 1000000 0 "$bin" "type: gpt, n_layer: 2, n_head: 2, n_embd: 128, block_size: 64"

    (cd "$d" && "$bin" slurm tiny.yaml --nodes 1 --gpus-per-node 0 --tasks-per-node 2 --job-name pre) \
        >"$d/pre.sbatch" || fail "scaletrain slurm exited $?"
    jid=$(sbatch --parsable "$d/pre.sbatch") || fail "sbatch refused the script"
    log=$d/slurm-pre-$jid.out
    for _ in $(seq 1 600); do # until rank 0 has logged a step (at most ~60 s)
        [ -s "$d/run/metrics.jsonl" ] && break
        [ -z "$(job_state "$jid" | grep -E 'PENDING|RUNNING|CONFIGURING')" ] && break
        sleep 0.1
    done
    [ -s "$d/run/metrics.jsonl" ] || fail "training did not start: $(job_state "$jid"): $(cat "$log" 2>/dev/null)"
    t0=$SECONDS
    scancel --signal=TERM --full "$jid" || fail "scancel --signal=TERM --full refused"
    for _ in $(seq 1 600); do # until the script has requeued the job, or the job ended (at most ~60 s)
        grep -q "requeueing job $jid" "$log" 2>/dev/null && break
        [ -z "$(job_state "$jid" | grep -E 'RUNNING|CONFIGURING|COMPLETING')" ] && break
        sleep 0.1
    done
    dt=$((SECONDS - t0))
    stopped=$(grep -oE "stopped by SIGTERM after step [0-9]+ of 1000000, checkpoint saved to [^;]+" "$log")
    echo "$mode: SIGTERM (--full): after ${dt}s: $stopped"
    [ -n "$stopped" ] || fail "no checkpoint message: $(tail -n 20 "$log")"
    grep -q "^scaletrain: SIGTERM: passing it on to the ranks" "$log" ||
        fail "the batch shell did not get SIGTERM, or did not trap it: $(tail -n 20 "$log")"
    grep -q "srun: error: .*Exited with exit code 143" "$log" || fail "the ranks did not exit 143: $(tail -n 20 "$log")"
    ! grep -q "srun: error: .*Exited with exit code [^1]\|exit code 1$\|Killed\|forcing job termination" "$log" ||
        fail "a rank ended otherwise: $(tail -n 20 "$log")"
    grep -q "requeueing job $jid" "$log" || fail "the script did not requeue the job: $(tail -n 20 "$log")"
    ck=${stopped##* }
    n=${ck##*-}
    [ "$(cat "$d/run/ckpt/latest" 2>/dev/null)" = "step-$n" ] || fail "latest is not step-$n"
    for f in model.safetensors state.json; do [ -s "$ck/$f" ] || fail "$ck/$f is missing"; done
    [ "$(ls "$d/run/ckpt" | grep -c '^step-[0-9]*$')" -eq 1 ] || fail "more than the stop's checkpoint: $(ls "$d/run/ckpt")"
    # step lines (a checkpoint's record is a line of its own)
    steplines() { grep -vc '"checkpoint":true' "$d/run/metrics.jsonl"; }
    [ "$(steplines)" -eq "$n" ] || fail "metrics.jsonl has $(steplines) step lines, not $n"

    # The requeued job waits ~2 minutes; end it and continue by hand.
    scancel "$jid"
    for _ in $(seq 1 100); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.1; done
    out=$(cd "$d" && timeout 120 srun --mpi=pmix -n 2 "$bin" train tiny.yaml --set train.steps=$((n + 3)) \
        --resume auto --json 2>&1); rc=$?
    [ $rc -eq 0 ] || fail "--resume auto: exit $rc: $out"
    grep -q "^resumed from $ck at step $n$" <<<"$out" || fail "--resume auto did not continue from $ck: $out"
    grep -q "\"steps\":$((n + 3))," <<<"$out" && grep -q '"ranks":2' <<<"$out" || fail "--resume auto: not $((n + 3)) steps on 2 ranks: $out"
    last=$(grep -v '"checkpoint":true' "$d/run/metrics.jsonl" | tail -n 1 | grep -oE '"step":[0-9]+' | cut -d: -f2)
    [ "$last" = "$((n + 3))" ] && [ "$(steplines)" -eq $((n + 3)) ] ||
        fail "metrics.jsonl does not go on from step $((n + 1)) to $((n + 3)): last step $last"
    echo "$mode: resume: $(grep '^resumed from' <<<"$out"), exit $rc, $((n + 3)) steps"
    if [ "$mode" = pgid ]; then
        # A plain `scancel JOB` cancels: the ranks checkpoint on SLURM's
        # SIGTERM and the script does not requeue the job (it did, every time)
        jid=$(sbatch --parsable "$d/pre.sbatch") || fail "sbatch refused the script (scancel)"
        log=$d/slurm-pre-$jid.out
        local lines0
        lines0=$(wc -l <"$d/run/metrics.jsonl")
        for _ in $(seq 1 600); do # until the job has logged a step of its own (at most ~60 s)
            [ "$(wc -l <"$d/run/metrics.jsonl")" -gt "$lines0" ] && break
            [ -z "$(job_state "$jid" | grep -E 'PENDING|RUNNING|CONFIGURING')" ] && break
            sleep 0.1
        done
        scancel "$jid" || fail "scancel refused"
        for _ in $(seq 1 900); do # until the job has ended (KillWait: at most ~90 s)
            [ -z "$(job_state "$jid" | grep -E 'RUNNING|CONFIGURING|COMPLETING|PENDING|REQUEUE')" ] && break
            sleep 0.1
        done
        echo "$mode: scancel: $(job_state "$jid"): $(grep -m1 'not requeued here' "$log")"
        grep -q "SLURM is ending job $jid itself: not requeued here" "$log" && ! grep -q "requeueing job $jid" "$log" ||
            fail "scancel: the script requeued the job, or did not say: $(tail -n 12 "$log")"
        [ "$(job_state "$jid")" != PENDING ] || fail "scancel: the job is pending again"
        grep -q "checkpoint saved to" "$log" || fail "scancel: the ranks did not checkpoint: $(tail -n 12 "$log")"
    fi
    slurm_down "$tmp/cluster"
    SLURM_UP=
    rm -rf "$tmp/cluster"
}

preempt pgid
preempt cgroup
e2e_finish "all passed"
