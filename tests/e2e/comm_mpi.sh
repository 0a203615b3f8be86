#!/usr/bin/env bash
# The communicator on 2, 3 and 4 ranks under real mpirun (tests/mpi/comm_check.c),
# then the faults, each bounded by `timeout` so that a hang fails instead of
# hanging: a rank killed mid-step (SIGKILL), with mpirun's own abort and with
# it turned off so that the watchdog must end the job; a rank stopped
# (SIGSTOP) before a collective; ranks that call different collectives or
# counts (desync). After each fault every rank's process must be gone.
# tests/run.sh: light (it mostly waits: on mpirun, or on the timeouts it provokes)
source "$(dirname "$0")/../lib/e2e.sh"
bin=$build/tests/mpi/comm_check
e2e_need_mpirun
[ -x "$bin" ] || { echo "FAIL: $bin is not built (make tests)"; exit 1; }
e2e_tmpdir
e2e_cleanup() { # kill what a failed fault test may have left behind: our own ranks, by pid
    for f in "$tmp"/*/*.pid; do [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null; done
}
e2e_mpi

for n in 2 3 4; do
    out=$(timeout 60 "${mpi[@]}" -np "$n" "$bin" ops 2>&1); rc=$?
    echo "$out" | grep -v '^ *$' | sed "s/^/[np $n] /"
    [ $rc -eq 0 ] && grep -q "comm_check: ok ($n rank(s), backend mpi)" <<<"$out" || fail "ops on $n ranks: exit $rc"
done
# The same with the shared-memory all-reduce off: large all-reduces through MPI too.
out=$(SCALETRAIN_SHM_MIN_BYTES=0 timeout 60 "${mpi[@]}" -np 3 "$bin" ops 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "comm_check: ok (3 rank(s), backend mpi)" <<<"$out" || fail "ops on 3 ranks, shm off: exit $rc"
# One process without a launcher: the local backend; and MPI as a singleton.
out=$(timeout 60 "$bin" ops 2>&1) && grep -q "backend local" <<<"$out" || fail "ops without mpirun: $out"
out=$(timeout 60 "$bin" ops --backend mpi 2>&1) && grep -q "1 rank(s), backend mpi" <<<"$out" ||
    fail "ops on an MPI singleton: $out"

# srun without an MPI plugin starts singletons that would each train alone: an error.
out=$(SLURM_STEP_ID=0 SLURM_STEP_NUM_TASKS=2 timeout 60 "$bin" ops 2>&1)
[ $? -ne 0 ] && grep -q "srun --mpi=pmix" <<<"$out" || fail "srun without PMI was not caught: $out"

# fault NAME BOUND_S EXPECTED_NEEDLES... -- MPIRUN_ARGS...: runs under `timeout BOUND_S`,
# wants a non-zero exit that is not timeout's, every needle in the output, no rank left.
fault() {
    local name=$1 bound=$2; shift 2
    local needles=()
    while [ "$1" != "--" ]; do needles+=("$1"); shift; done
    shift
    mkdir -p "$tmp/$name"
    local t0=$SECONDS
    local out; out=$(timeout "$bound" "${mpi[@]}" "$@" --pids "$tmp/$name" 2>&1); local rc=$?
    local dt=$((SECONDS - t0))
    echo "--- $name: exit $rc after ${dt}s (bound ${bound}s); the messages:"
    grep -E "scaletrain:|comm_check:|mpirun noticed|MPI_ABORT was invoked" <<<"$out" | sed 's/^/    /'
    if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then fail "$name: exit $rc (0 = not stopped, 124 = hung past ${bound}s)"; fi
    for needle in "${needles[@]}"; do grep -qF -- "$needle" <<<"$out" || fail "$name: no '$needle' in the output"; done
    local n=0
    for f in "$tmp/$name"/*.pid; do
        [ -f "$f" ] || continue
        n=$((n + 1))
        if ! e2e_gone "$(cat "$f")"; then # mpirun may return before the kernel has ended a rank it killed
            fail "$name: rank $(basename "$f" .pid) (pid $(cat "$f")) is still there"
        fi
    done
    [ $n -gt 0 ] || fail "$name: no rank wrote its pid"
}
T=3 # the watchdog's timeout_s in these tests; the bound (T + 30 s) is from mpirun's start, on a loaded machine
# (a) SIGKILL mid-step: mpirun sees the death and ends the job, naming the rank.
fault kill $((T + 30)) "process rank 1" "signal 9" -- -np 3 "$bin" kill --rank 1 --step 3 --timeout $T
# (a') the same with mpirun told not to end the job: the watchdog must.
fault kill-watchdog $((T + 30)) "collective timed out: all-reduce 'grad bucket 0' (seq 8, step 3" \
    "rank 1 (pid" "gone" -- --mca orte_abort_on_non_zero_status 0 -np 3 "$bin" kill --rank 1 --step 3 --timeout $T
# (b) SIGSTOP before the step's collectives: the others time out and name it.
fault stop $((T + 30)) "collective timed out: all-reduce 'grad bucket 0' (seq 8, step 3" \
    "rank 1 (pid" "has not called it" "number 7, at step 2" "stopped" -- \
    -np 3 "$bin" stop --rank 1 --step 3 --timeout $T
# (c) desync: a broadcast against an all-reduce, and a different count.
fault desync $((T + 30)) "collectives out of step at collective number 9" \
    "ranks 0,2 called all-reduce 'grad bucket 1' (seq 9, step 3, 1000 x float32, avg)" \
    "rank 1 called broadcast 'params' (seq 9, step 3, 10 x float32 from rank 0)" -- \
    -np 3 "$bin" desync --rank 1 --step 3 --timeout $T
fault count $((T + 30)) "collectives out of step at collective number 5" \
    "rank 0 called all-reduce 'grad bucket 1' (seq 5, step 1, 1000 x float32, avg)" \
    "rank 1 called all-reduce 'grad bucket 1' (seq 5, step 1, 999 x float32, avg)" -- \
    -np 2 "$bin" count --rank 1 --step 1 --timeout $T
# The faults again with the gradient all-reduces (4000 bytes) going through the
# shared-memory all-reduce (comm_shm.c): its waits spin under the same watchdog,
# and it moves data while its collective check is in flight but completes only
# after the check has passed (a desync is reported, not hung on).
export SCALETRAIN_SHM_MIN_BYTES=1024
# (the killed rank copied its bucket 0 in before dying: whether the others
# could finish bucket 0 with it depends on whether it also reduced its slice
# first, so they time out in bucket 0 or in bucket 1)
fault shm-kill-watchdog $((T + 30)) "collective timed out: all-reduce 'grad bucket " "step 3, 1000 x float32" \
    "rank 1 (pid" "gone" -- --mca orte_abort_on_non_zero_status 0 -np 3 "$bin" kill --rank 1 --step 3 --timeout $T
fault shm-stop $((T + 30)) "collective timed out: all-reduce 'grad bucket 0' (seq 8, step 3" \
    "rank 1 (pid" "has not called it" "number 7, at step 2" "stopped" -- \
    -np 3 "$bin" stop --rank 1 --step 3 --timeout $T
fault shm-desync $((T + 30)) "collectives out of step at collective number 9" \
    "ranks 0,2 called all-reduce 'grad bucket 1' (seq 9, step 3, 1000 x float32, avg)" \
    "rank 1 called broadcast 'params' (seq 9, step 3, 10 x float32 from rank 0)" -- \
    -np 3 "$bin" desync --rank 1 --step 3 --timeout $T
fault shm-count $((T + 30)) "collectives out of step at collective number 5" \
    "rank 0 called all-reduce 'grad bucket 1' (seq 5, step 1, 1000 x float32, avg)" \
    "rank 1 called all-reduce 'grad bucket 1' (seq 5, step 1, 999 x float32, avg)" -- \
    -np 2 "$bin" count --rank 1 --step 1 --timeout $T
unset SCALETRAIN_SHM_MIN_BYTES
e2e_finish
