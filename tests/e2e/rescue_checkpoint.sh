#!/usr/bin/env bash
# A run that fails with its weights whole saves them first: a tiny GPT (CPU,
# on 1 rank, on 2 under ddp and on 2 under ZeRO-2; emu_rescue_checkpoint.sh:
# on an emulated GPU) trains on a token file that is shortened under it
# (rewritten in place) once its progress reaches step 50; on 1 rank and on 2
# under ddp also its validation file, which the next evaluation reads (the
# body: tests/lib/rescue_checkpoint.sh).
#  1. The run stops with the data error, naming the file, and says it saved
#     (with 2 ranks: that one of them saved) the weights and optimizer state
#     after step N (train.checkpoint_every 0,
#     train.checkpoint_every_s 0: no other checkpoint); ckpt/latest is step N.
#  2. With the file written back, `--resume auto` to step N + 20 ends with the
#     weights of an uninterrupted run of N + 20 steps, bit for bit: nothing
#     was lost and the data order went on where it stopped.
#  (2 ranks under ddp again on a file system without locks, every flock
#  failing: tests/lib/vanish.c; the rank that makes the lock file first
#  saves, the other waits for its save.)
#  4. (1 rank) The final evaluation's metrics line fails: the final weights
#     are written all the same, and the error says so. metrics.jsonl's close
#     fails: exit 0, a warning.
#  3. On 2 ranks under ZeRO-2, rank 0's metrics write fails (EIO, from
#     tests/lib/slowfs.c) after a step: every rank stops after it (rank 1
#     naming rank 0), they save together, and resumed to N + 20 the run
#     ends with the uninterrupted run's weights.
#  5. On 2 ranks under ZeRO-2, rank 0's line for a checkpoint fails (the
#     first write of metrics.jsonl, the checkpoint of step 4 of 6, written
#     or committed asynchronously; the third, the checkpoint of the last
#     step): the ranks stop together after the next step (or at the run's
#     end), rank 1 naming rank 0, none aborting
#     the others, and the steps trained are saved (before, rank 0 ended
#     every rank at once).
# (The file is read in order, far past its first page when it is shortened:
# a read within the page that holds the new end would see zeros, not fail.)
source "$(dirname "$0")/../lib/e2e.sh"
e2e_tmpdir
dev=(--set train.device=cpu) launch=() label=cpu victim=train
source "$(dirname "$0")/../lib/rescue_checkpoint.sh"
label=val victim=val
source "$(dirname "$0")/../lib/rescue_checkpoint.sh"
# 4. The final evaluation's metrics line fails (EIO: the 4th write of
# metrics.jsonl, after steps 2 and 4 and the checkpoint's): the final weights
# are written all the same, and the error says so (before, none were)
d=$tmp/final
mkdir -p "$d"
cc -shared -fPIC -O2 -o "$d/slowfs.so" tests/lib/slowfs.c -ldl || fail "cannot build the shim"
out=$(LD_PRELOAD="$d/slowfs.so" ST_SLOWFS_MATCH=/metrics.jsonl ST_SLOWFS_EIO_AFTER=3 timeout 120 "$bin" "${run[@]}" \
    --set train.eval_every=0 --set train.steps=4 --set log.every=2 --set train.out_dir="$d/o" 2>&1); rc=$?
[ $rc -eq 1 ] && [ -s "$d/o/model.safetensors" ] &&
    grep -q "metrics.jsonl: write failed: Input/output error (the final weights were written all the same, to $d/o/model.safetensors)" <<<"$out" ||
    fail "the final evaluation's metrics line failed: exit $rc, $(ls "$d/o"): $(grep error <<<"$out")"
[ "$fails" -ne 0 ] || echo "the final evaluation's metrics line failed: the final weights written all the same, said"
# ... and metrics.jsonl's close failing (a network file system's write-back):
# the run, whole, exits 0 with a warning that its last lines may be lost
out=$(LD_PRELOAD="$d/slowfs.so" ST_SLOWFS_MATCH=/metrics.jsonl ST_SLOWFS_CLOSE_EIO=1 timeout 120 "$bin" "${run[@]}" \
    --set train.eval_every=0 --set train.steps=4 --set log.every=2 --set train.out_dir="$d/c" 2>&1); rc=$?
[ $rc -eq 0 ] && [ -s "$d/c/model.safetensors" ] &&
    grep -q "^scaletrain: warning: metrics.jsonl: closing it failed: Input/output error (its last lines may not have reached the storage)" <<<"$out" ||
    fail "metrics.jsonl's close failed: exit $rc: $(grep -E "error|warning" <<<"$out")"
[ "$fails" -ne 0 ] || echo "metrics.jsonl's close failed: exit 0, a warning says its last lines may be lost"
if command -v mpirun >/dev/null; then
    echo "2 ranks (ddp; both read the file, one of them saves):"
    e2e_mpi
    launch=("${mpi[@]}" -np 2) label=two victim=train
    source "$(dirname "$0")/../lib/rescue_checkpoint.sh"
    echo "2 ranks (ddp; a file system without locks: the rank that makes the lock file first saves, the other waits for it):"
    cc -shared -fPIC -O2 -o "$tmp/vanish.so" tests/lib/vanish.c -ldl || fail "cannot build tests/lib/vanish.c"
    launch=(env LD_PRELOAD="$tmp/vanish.so" ST_VANISH_NOFLOCK=1 "${mpi[@]}" -np 2) label=two-noflock victim=train
    source "$(dirname "$0")/../lib/rescue_checkpoint.sh"
    echo "2 ranks (ddp; the validation file: the shared evaluation's ranks save together):"
    label=two-val victim=val
    source "$(dirname "$0")/../lib/rescue_checkpoint.sh"
    echo "2 ranks (ZeRO-2: the ranks agree on each micro-batch's read and save their shards together):"
    dev=(--set train.device=cpu --set dist.strategy=zero2) label=zero2 victim=train
    source "$(dirname "$0")/../lib/rescue_checkpoint.sh"
    # 3. Rank 0 alone fails after a step (its metrics line: the file's
    # fflush fails with EIO from the 4th on, tests/lib/slowfs.c), under
    # ZeRO-2, where rank 0 alone cannot save: every rank stops after that
    # step and they save together; resumed, the uninterrupted run's weights.
    echo "2 ranks (ZeRO-2; rank 0's metrics write fails: every rank stops after the step, and they save together):"
    d=$tmp/metrics
    mkdir -p "$d"
    cc -shared -fPIC -O2 -o "$d/slowfs.so" tests/lib/slowfs.c -ldl || fail "cannot build the shim"
    # run: the ZeRO-2 case's settings, as the body left them (its training file written back whole)
    out=$(LD_PRELOAD="$d/slowfs.so" ST_SLOWFS_MATCH=/metrics.jsonl ST_SLOWFS_EIO_AFTER=3 timeout 300 "${mpi[@]}" \
        -x LD_PRELOAD -x ST_SLOWFS_MATCH -x ST_SLOWFS_EIO_AFTER -np 2 "$bin" "${run[@]}" --set train.steps=200 \
        --set train.out_dir="$d/o" 2>&1); rc=$?
    [ $rc -eq 1 ] || fail "metrics: exit $rc (want 1): $(tail -n 3 <<<"$out")"
    grep -q "metrics.jsonl: write failed: Input/output error" <<<"$out" || fail "metrics: rank 0's error not named: $out"
    grep -q "rank 0 met an error after step [0-9]* (a metrics write, or its GPU during the text sample: its own message says which), so every rank stopped there" \
        <<<"$out" || fail "metrics: rank 1 does not name rank 0's failure: $out"
    n=$(sed -nE 's/.*the weights and optimizer state after step ([0-9]+) were saved first.*/\1/p' <<<"$out" | head -n 1)
    if [ -n "$n" ] && [ "$(cat "$d/o/ckpt/latest" 2>/dev/null)" = "step-$n" ]; then
        timeout 300 "${mpi[@]}" -np 2 "$bin" "${run[@]}" --set train.steps=$((n + 20)) --set train.out_dir="$d/o" \
            --resume auto >"$d/resumed.log" 2>&1 || fail "metrics: resumed: exit $?: $(tail -n 2 "$d/resumed.log")"
        timeout 300 "${mpi[@]}" -np 2 "$bin" "${run[@]}" --set train.steps=$((n + 20)) --set train.out_dir="$d/ref" \
            >"$d/ref.log" 2>&1 || fail "metrics: uninterrupted: exit $?: $(tail -n 2 "$d/ref.log")"
        cmp -s "$d/ref/model.safetensors" "$d/o/model.safetensors" &&
            echo "metrics write failed after step $n: saved together; resumed to $((n + 20)): the uninterrupted run's weights bit for bit" ||
            fail "metrics: resumed from step $n: other weights than the uninterrupted run's"
    else
        fail "metrics: no checkpoint saved and named: $(grep -i "error\|saved" <<<"$out" | head -n 4)"
    fi
    # 5. Rank 0's checkpoint line fails: a checkpoint's (k=0, step 4 of 6)
    # or the last one's (k=2, step 6, after which no stop all-reduce comes)
    echo "2 ranks (ZeRO-2; rank 0's metrics line for a checkpoint fails):"
    mlp=(--set model.type=mlp --set 'model.hidden=[32]' --set train.batch_size=8 --set data.val= --set log.progress=off
         --set log.peak_gflops=10 --set log.every=100 --set train.checkpoint_every=4 --set dist.timeout_s=60
         --set train.threads=1 --set dist.strategy=zero2 --set train.steps=6)
    # (k want async: async, the step-4 checkpoint's line comes at its commit,
    # after step 5's stop all-reduce: they stop at the run's end)
    for c in "0 5 false" "2 6 false" "0 6 true"; do
        read -r k want async <<<"$c"
        out=$(LD_PRELOAD="$d/slowfs.so" ST_SLOWFS_MATCH=/metrics.jsonl ST_SLOWFS_EIO_AFTER=$k timeout 120 "${mpi[@]}" \
            -x LD_PRELOAD -x ST_SLOWFS_MATCH -x ST_SLOWFS_EIO_AFTER -np 2 "$bin" train "${mlp[@]}" \
            --set train.checkpoint_async=$async --set train.out_dir="$d/ck$k$async" 2>&1); rc=$?
        k="$k (async $async)"
        [ $rc -eq 1 ] || fail "checkpoint line $k: exit $rc (want 1): $(tail -n 3 <<<"$out")"
        ! grep -q "aborting every rank" <<<"$out" || fail "checkpoint line $k: rank 0 ended the others: $(grep -m1 aborting <<<"$out")"
        grep -q "error (rank 0): metrics.jsonl: write failed: Input/output error" <<<"$out" ||
            fail "checkpoint line $k: rank 0's error not said: $(grep -m2 error <<<"$out")"
        grep -q "error (rank 1): rank 0 met an error after step $want (a metrics write" <<<"$out" ||
            fail "checkpoint line $k: rank 1 does not name rank 0's failure after step $want: $(grep -m2 error <<<"$out")"
        latest=$(cat "$d/ck${k%% *}$async/ckpt/latest" 2>/dev/null)
        [ "$latest" = "step-$want" ] || fail "checkpoint line $k: latest is '$latest', not step-$want"
    done
    echo "rank 0's checkpoint line failed (step 4 of 6, sync and async, and the last): every rank stopped together and saved"
else
    echo "2 ranks: skipped: mpirun is missing (apt-get install openmpi-bin libopenmpi-dev)"
fi
e2e_finish "a run whose data fails under it saves its steps first (1 rank: training or validation data; 2 ranks: ddp, its evaluation, ZeRO-2, rank 0's metrics under ZeRO-2), and resumes on the same trajectory"
