#!/usr/bin/env bash
# The issue's fault tests for the training command under real mpirun (2 ranks,
# a tiny gpt on a token file, dist.timeout_s=T). Every run is bounded by an
# outer `timeout`, so a hang fails instead of hanging; the script waits only
# by polling files in bounded loops and by `wait`.
# (a) a rank killed with SIGKILL mid-run: mpirun exits non-zero within T + 10 s
#     of the kill, naming the dead rank, and no rank is left; then the same
#     with mpirun's own abort turned off, so that rank 0's watchdog must end
#     the job, naming rank 1 as gone;
# (b) a rank stopped with SIGSTOP mid-run: the other rank's watchdog ends the
#     job within T + 10 s, naming the collective, its sequence number and the
#     step; no rank is left (leftovers get SIGCONT + SIGKILL);
# (b') a stop asked while a rank is stopped: rank 0 says what it waits on,
#     5 s into the wait, naming rank 1;
# (c) ranks with different train.batch_size, then different training sets
#     (MPMD mpirun): an error before training that names the difference;
# (d) a training set that is not a multiple of the global batch, 3 epochs,
#     with data.drop_last true and false: both ranks finish the same steps
#     (the job exits 0: a rank that ran fewer steps would leave the other in a
#     collective until its watchdog fails the job).
# tests/run.sh: light (it mostly waits: on mpirun, or on the timeouts it provokes)
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_mpirun
[ -x "$bin" ] || { echo "FAIL: $bin is not built"; exit 1; }
e2e_tmpdir
pids=() # every rank pid seen, killed at the end if still there
extra=() # more train arguments for start
e2e_cleanup() {
    for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
}
e2e_mpi
export OMP_WAIT_POLICY=PASSIVE
T=5

# A token file of N samples of block_size 16: (count - 1) / 16 samples.
mk_tokens() { # FILE N_SAMPLES
    local i
    for i in $(seq 1 "$2"); do printf 'line %010d\n' $((i * 7919 % 100003)); done >"$tmp/$(basename "$1").txt"
    "$bin" data tokenize "$1" "$tmp/$(basename "$1").txt" >/dev/null || fail "tokenize $1"
}
mk_tokens "$tmp/big.tokens" 400
mk_tokens "$tmp/small.tokens" 300
mk_tokens "$tmp/uneven.tokens" 37
gpt=(--set model.type=gpt --set data.type=tokens --set data.val= --set model.n_layer=1 --set model.n_head=2
     --set model.n_embd=16 --set model.block_size=16 --set train.threads=1 --set data.num_workers=0
     --set dist.bucket_cap_mb=0.001 --set dist.timeout_s=$T --set optim.lr=1e-3 --json --quiet)

# start NAME [MPIRUN_ARGS...]: starts a long 2-rank run in the background
# (under `timeout 60`), polls until rank 0 has written its first checkpoint
# (training has started), and sets tpid (timeout's pid) and r0, r1 (the ranks' pids).
start() {
    local name=$1 d=$tmp/$1
    shift
    mkdir -p "$d"
    timeout 60 "${mpi[@]}" "$@" -np 2 "$bin" train "${gpt[@]}" "${extra[@]}" --set data.train="$tmp/big.tokens" \
        --set train.batch_size=8 --set train.steps=1000000 --set train.checkpoint_every=3 \
        --set train.out_dir="$d/out" >"$d/log" 2>&1 &
    tpid=$!
    r0='' r1=''
    local i mp p
    for i in $(seq 1 600); do # at most ~60 s
        e2e_alive "$tpid" || break
        if [ -z "$r1" ]; then
            mp=$(pgrep -P "$tpid" | head -n 1)
            for p in ${mp:+$(pgrep -P "$mp")}; do
                case "$(tr '\0' '\n' </proc/"$p"/environ 2>/dev/null | grep '^OMPI_COMM_WORLD_RANK=')" in
                    *=0) r0=$p ;; *=1) r1=$p ;;
                esac
            done
            [ -n "$r0" ] && pids+=("$r0")
            [ -n "$r1" ] && pids+=("$r1")
        fi
        [ -n "$r1" ] && [ -n "$(ls -A "$d/out/ckpt" 2>/dev/null)" ] && return 0
        sleep 0.1
    done
    fail "$name: training did not start: $(cat "$d/log")"
    return 1
}

# finish NAME: waits for the run (bounded by its `timeout`), checks exit status,
# the bound of T + 10 s since the fault, and that no rank is left.
finish() {
    local name=$1 t0=$2
    wait "$tpid"; rc=$?
    local dt=$((SECONDS - t0))
    out=$(cat "$tmp/$name/log")
    echo "--- $name: exit $rc, ${dt}s after the fault (bound $((T + 10))s); the messages:"
    grep -E "scaletrain:|mpirun noticed|MPI_ABORT was invoked|timed out" <<<"$out" | sed 's/^/    /'
    if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then fail "$name: exit $rc (0 = not stopped, 124 = hung)"; fi
    [ "$dt" -le $((T + 10)) ] || fail "$name: took ${dt}s after the fault"
    local p
    for p in $r0 $r1; do
        if ! e2e_gone "$p"; then
            fail "$name: rank pid $p is still there"
            kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null
        fi
    done
}

# (a) SIGKILL one rank mid-run.
if start kill; then
    kill -KILL "$r1"; t0=$SECONDS
    finish kill "$t0"
    grep -qE "process rank 1 .*signal 9|rank 1 .*(gone|killed|died)" <<<"$out" || fail "kill: rank 1 is not named: $out"
fi

# (a') the same with mpirun told not to end the job: rank 0's watchdog must.
if start kill-watchdog --mca orte_abort_on_non_zero_status 0; then
    kill -KILL "$r1"; t0=$SECONDS
    finish kill-watchdog "$t0"
    for re in "collective timed out: (all-reduce|broadcast|all-gather|reduce-scatter) '[^']+' \(seq [0-9]+, step [0-9]+" \
        "rank 1 \(pid $r1.*gone"; do
        grep -qE -- "$re" <<<"$out" || fail "kill-watchdog: no /$re/ in: $out"
    done
fi

# (b) SIGSTOP one rank mid-run: rank 0's watchdog must end the job.
if start stop; then
    kill -STOP "$r1"; t0=$SECONDS
    finish stop "$t0"
    for re in "collective timed out: (all-reduce|broadcast|all-gather|reduce-scatter) '[^']+' \(seq [0-9]+, step [0-9]+" \
        "rank 1 \(pid $r1"; do
        grep -qE -- "$re" <<<"$out" || fail "stop: no /$re/ in: $out"
    done
    # The stopped rank, resumed for its end, must not blame the others: its
    # watchdog does not count its own stop.
    ! grep -qE "rank 1 of [0-9]+ \(host [^)]*\): collective timed out" <<<"$out" ||
        fail "stop: the stopped rank 1 reported a timeout of its own: $out"
fi

# (b') a stop asked while a rank does not answer (SLURM's --kill-on-bad-exit
# sends SIGTERM to the others when one dies): rank 0 says, 5 s into the
# wait, that it waits on the others, naming rank 1, where it waited in
# silence until it was killed or timed out; rank 1 resumed, the job stops.
extra=(--set dist.timeout_s=40)
if start stopwait; then
    kill -STOP "$r1"
    kill -TERM "$r0"; t0=$SECONDS
    for i in $(seq 1 200); do # at most ~20 s
        grep -q "asked to stop (SIGTERM), but" "$tmp/stopwait/log" && break
        sleep 0.1
    done
    kill -CONT "$r1"
    wait "$tpid"; rc=$?
    out=$(cat "$tmp/stopwait/log")
    echo "--- stopwait: exit $rc, $((SECONDS - t0))s after the stop; the messages:"
    grep -E "scaletrain:" <<<"$out" | sed 's/^/    /'
    grep -qE "scaletrain: rank 0 of 2 \(host [^)]*\): asked to stop \(SIGTERM\), but (all-reduce|broadcast|all-gather|reduce-scatter) '[^']+' \(seq [0-9]+, step [0-9]+.* has waited [0-9]+ s for the other ranks: a rank may have ended" <<<"$out" &&
        grep -qE "rank 0: rank 1 \(pid $r1, this node\)" <<<"$out" || fail "stopwait: the wait is not said: $out"
    [ "$rc" -ne 124 ] || fail "stopwait: the job hung after rank 1 resumed"
    for p in $r0 $r1; do e2e_gone "$p" || fail "stopwait: rank pid $p is still there"; done
fi
extra=()

# (c) ranks that disagree on the batch size, then on the training set.
mismatch() { # NAME NEEDLES... -- RANK0_ARGS... : RANK1_ARGS...
    local name=$1; shift
    local needles=()
    while [ "$1" != "--" ]; do needles+=("$1"); shift; done
    shift
    local a0=() a1=()
    while [ "$1" != ":" ]; do a0+=("$1"); shift; done
    shift
    a1=("$@")
    local o=(--set train.steps=5 --set train.out_dir="$tmp/$name")
    out=$(timeout 40 "${mpi[@]}" -np 1 "$bin" train "${gpt[@]}" "${o[@]}" "${a0[@]}" : \
        -np 1 "$bin" train "${gpt[@]}" "${o[@]}" "${a1[@]}" 2>&1); rc=$?
    echo "--- $name: exit $rc: $(grep -m1 'scaletrain: error' <<<"$out")"
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "$name: exit $rc"
    local n
    for n in "${needles[@]}"; do grep -qF -- "$n" <<<"$out" || fail "$name: no '$n' in: $out"; done
    [ ! -e "$tmp/$name/model.safetensors" ] || fail "$name: weights were saved"
}
mismatch batch "first difference is in train.batch_size" "rank 0 has 8" "rank 1 has 16" -- \
    --set data.train="$tmp/big.tokens" --set train.batch_size=8 : \
    --set data.train="$tmp/big.tokens" --set train.batch_size=16
mismatch dataset "first difference is in training samples" "rank 0 has 399" "rank 1 has 299" -- \
    --set data.train="$tmp/big.tokens" --set train.batch_size=8 : \
    --set data.train="$tmp/small.tokens" --set train.batch_size=8

declare -A loss
# (d) 36 samples, global batch 8: 4 full batches + 4 left over; 14 steps cross
# 3 epoch boundaries with either drop_last.
for dl in true false; do
    d=$tmp/uneven-$dl
    out=$(timeout 40 "${mpi[@]}" -np 2 "$bin" train "${gpt[@]}" --set data.train="$tmp/uneven.tokens" \
        --set train.batch_size=8 --set train.steps=14 --set data.drop_last=$dl \
        --set train.out_dir="$d" 2>&1); rc=$?
    echo "--- uneven drop_last=$dl: exit $rc: $(tail -n 1 <<<"$out")"
    [ $rc -eq 0 ] || fail "uneven drop_last=$dl: exit $rc: $out"
    grep -q '"steps":14' <<<"$out" || fail "uneven drop_last=$dl: not 14 steps: $out"
    [ -f "$d/model.safetensors" ] || fail "uneven drop_last=$dl: no weights"
    loss[$dl]=$(grep -o '"loss":[^,]*' <<<"$out")
done
# The two runs saw different batches (4 or 5 steps an epoch), so they differ.
[ "${loss[true]}" != "${loss[false]}" ] || fail "uneven: drop_last made no difference (${loss[true]})"

e2e_finish
