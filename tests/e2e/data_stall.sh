#!/usr/bin/env bash
# Data reads that never return (dataset.h's test knob SCALETRAIN_TEST_DATA_STALL
# =FILE:K: the read of sample K of that token file stops for good, as on a
# hung network file system) do not hang the run. A tiny GPT (CPU, in order,
# micro-batch 4, data.timeout_s 1):
#  1. 1 loader thread stuck in micro-batch 40 (sample 160): exit 1 with a
#     message naming the batch, the wait and the key; its 40 steps whole,
#     the run saves them first (no other checkpoint: train.checkpoint_every
#     0); the stuck thread does not keep the process from ending. Resumed
#     without the stall to step 60, the weights are an uninterrupted 60-step
#     run's, bit for bit.
#     The same with train.out_dir moved away at step 10: the save writes
#     nothing where it was (another run may be there now), saying so.
#  2. 0 loader threads (the step loop reads, and is the one stuck): the
#     stall watch ends the process after the 1 s wait, naming the rank, the
#     batch and the key; resumed from its step-40 checkpoint, the same
#     weights as 1.
#  3. The validation file stuck in the evaluation at step 20: the watch ends
#     the process, naming the validation read.
#  4. 2 ranks under ZeRO-2, rank 1's loader thread stuck in batch 40 (sample
#     162): the ranks agree on each micro-batch's read, so both stop at step
#     41, rank 1 naming its batch and rank 0 naming rank 1, and save their
#     shards of step 40 together; resumed, an uninterrupted 2-rank run's
#     weights bit for bit.
#  5. 2 ranks under DDP with asynchronous checkpoints, rank 1 stuck the
#     same way while step 40's checkpoint is being written: rank 1 drops it
#     (its commit needs both ranks) and saves step 40 itself.
#     The same with every flock failing (a file system without locks,
#     tests/lib/vanish.c): rank 1 saves step 40 all the same.
#  6. A stop (SIGTERM, sent once step 40's checkpoint is saved, so while the
#     step loop waits on the stuck batch 40) with data.timeout_s 0 (wait
#     for ever): the wait ends ST_LOADER_STOP_GRACE_S (5 s) after the stop,
#     the run says so and exits 143, step 40 whole; resumed, the
#     uninterrupted run's weights. (With 0 loader threads the step loop
#     itself is stuck in the read: data.timeout_s alone ends it, case 2.)
#  7. A run of 40 steps whose loader thread is stuck in batch 40, taken
#     ahead and never used: the run ends, exit 0, its weights saved, a
#     warning naming the batch after data.timeout_s (before, it waited on
#     the thread at exit for ever).
#  8. 2 ranks under ZeRO-2, rank 1's loader thread stuck in batch 40 with
#     data.timeout_s 0, SIGTERM to both ranks once step 40 is saved: rank
#     1's wait ends with the stop, rank 0's batch came; both
#     stop (exit 143, each saying why), none waits for the other (before,
#     rank 0 took rank 1's stop for a read error and waited in the error
#     report's barrier, which rank 1 never joined).
# tests/run.sh: light (it mostly waits: on the reads it stalls and the timeouts they meet)
source "$(dirname "$0")/../lib/e2e.sh"
e2e_tmpdir
export OMP_WAIT_POLICY=PASSIVE
for i in $(seq 1 2000); do echo "the quick brown fox $i jumps over the lazy dog"; done >"$tmp/text.txt"
"$bin" data tokenize "$tmp/t.tokens" "$tmp/text.txt" >/dev/null || fail tokenize
head -n 200 "$tmp/text.txt" >"$tmp/val.txt"
"$bin" data tokenize "$tmp/v.tokens" "$tmp/val.txt" >/dev/null || fail tokenize
run=(train --set model.type=gpt --set data.type=tokens --set data.train="$tmp/t.tokens" --set data.val=
     --set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 --set model.block_size=16
     --set train.batch_size=4 --set train.device=cpu --set train.threads=1 --set data.shuffle=false
     --set optim.schedule=constant --set train.eval_every=0 --set train.checkpoint_every=0
     --set train.checkpoint_every_s=0 --set log.progress=off --set data.timeout_s=1 --set train.steps=60)
timeout 120 "$bin" "${run[@]}" --set data.num_workers=1 --set train.out_dir="$tmp/ref" >"$tmp/ref.log" 2>&1 ||
    fail "uninterrupted: exit $?: $(tail -2 "$tmp/ref.log")"

# resumed WHAT DIR [SETTINGS...]: resume DIR without the stall and compare with the uninterrupted run
resumed() {
    local what=$1 o=$2
    shift 2
    timeout 120 "$bin" "${run[@]}" "$@" --set train.out_dir="$o" --resume auto >"$o.log" 2>&1 ||
        fail "$what: resumed: exit $?: $(grep -i error "$o.log" | head -2)"
    cmp -s "$tmp/ref/model.safetensors" "$o/model.safetensors" &&
        echo "$what: resumed from step 40 to 60: the uninterrupted run's weights bit for bit" ||
        fail "$what: resumed from step 40: other weights than the uninterrupted run's"
}

out=$(SCALETRAIN_TEST_DATA_STALL=t.tokens:160 timeout -k 10 120 "$bin" "${run[@]}" --set data.num_workers=1 \
    --set train.out_dir="$tmp/w1" 2>&1); rc=$?
err=$(grep "error:" <<<"$out")
[ $rc -eq 1 ] || fail "1 worker: exit $rc (want 1): $(tail -n 3 <<<"$out")"
grep -qF "data loader: batch 40 is not ready after 1 s (data.timeout_s): a worker has been assembling it (samples 160, ..., from $tmp/t.tokens)" <<<"$err" ||
    fail "1 worker: no message naming the batch, the file, the wait and the key: $err"
grep -q "the weights and optimizer state after step 40 were saved first, to $tmp/w1/ckpt/step-40" <<<"$err" ||
    fail "1 worker: the 40 steps were not saved first: $err"
if [ "$fails" -eq 0 ]; then
    echo "1 worker stuck in batch 40: exit 1 after the 1 s wait, its 40 steps saved"
    resumed "1 worker" "$tmp/w1" --set data.num_workers=1
fi
# ... with its train.out_dir moved away at step 10 (another run may be there
# now): the save of the 40 steps writes nothing there, saying why
o=$tmp/mv
mkfifo "$o.fifo"
SCALETRAIN_TEST_DATA_STALL=t.tokens:160 timeout -k 10 120 "$bin" "${run[@]}" --set data.num_workers=1 \
    --set train.out_dir="$o" >"$o.fifo" 2>&1 &
pid=$!
while IFS= read -r l; do
    echo "$l" >>"$o.log"
    case "$l" in "step 10/"*) mv "$o" "$o.moved" ;; esac # (the run then waits 1 s on batch 40 at least)
done <"$o.fifo"
wait $pid
rc=$?
[ $rc -eq 1 ] && [ ! -e "$o" ] && [ ! -e "$o.moved/ckpt/step-40" ] &&
    grep -q "a checkpoint of step 40 could not be saved either: train.out_dir $o was removed while the run trained" "$o.log" ||
    fail "out_dir moved, then batch 40 stuck: exit $rc, $(ls -d "$o" "$o.moved/ckpt/"* 2>&1 | tr '\n' ' '): $(grep error "$o.log")"
[ "$fails" -ne 0 ] || echo "out_dir moved away, then batch 40 stuck: nothing saved where the folder was, said"

out=$(SCALETRAIN_TEST_DATA_STALL=t.tokens:160 timeout -k 10 120 "$bin" "${run[@]}" --set data.num_workers=0 \
    --set train.checkpoint_every=10 --set train.out_dir="$tmp/w0" 2>&1); rc=$?
line=$(grep "has not finished after" <<<"$out")
[ $rc -eq 1 ] || fail "0 workers: exit $rc (want 1): $(tail -n 3 <<<"$out")"
grep -qE "^scaletrain: rank 0 of 1 \(host [^,]+, pid [0-9]+\): reading training batch 40 from $tmp/t.tokens has not finished after 1 s \(data\.timeout_s: 1 s\): the storage stopped answering" <<<"$line" ||
    fail "0 workers: no message naming the rank, the batch, the file and the key: $out"
[ "$(cat "$tmp/w0/ckpt/latest" 2>/dev/null)" = step-40 ] || fail "0 workers: the latest checkpoint is not step 40"
if [ "$fails" -eq 0 ]; then
    echo "0 workers, the step loop stuck in batch 40: ended after the 1 s wait"
    resumed "0 workers" "$tmp/w0" --set data.num_workers=0 --set train.checkpoint_every=10
fi

out=$(SCALETRAIN_TEST_DATA_STALL=v.tokens:5 timeout -k 10 120 "$bin" "${run[@]}" --set data.val="$tmp/v.tokens" \
    --set train.eval_every=20 --set data.num_workers=1 --set train.out_dir="$tmp/val" 2>&1); rc=$?
line=$(grep "has not finished after" <<<"$out")
[ $rc -eq 1 ] || fail "validation: exit $rc (want 1): $(tail -n 3 <<<"$out")"
grep -qE "^scaletrain: rank 0 of 1 \(.*\): reading a validation batch has not finished after 1 s \(data\.timeout_s: 1 s\)" <<<"$line" ||
    fail "validation: no message naming the read: $out"
[ "$fails" -ne 0 ] || echo "the validation file stuck in the step-20 evaluation: ended after the 1 s wait"

o=$tmp/term
# (signalled once the step loop waits on batch 40, SCALETRAIN_TEST_WAIT_MARK: a stop that comes right
# after step 40's checkpoint is taken there, before the wait)
SCALETRAIN_TEST_DATA_STALL=t.tokens:160 SCALETRAIN_TEST_WAIT_MARK="$o.waiting:40" timeout -k 10 60 "$bin" \
    "${run[@]}" --set data.num_workers=1 --set data.timeout_s=0 --set train.checkpoint_every=40 \
    --set train.out_dir="$o" >"$o.log" 2>&1 &
pid=$!
t0=
for _ in $(seq 1200); do [ -e "$o.waiting" ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.05; done
if [ -e "$o.waiting" ] && grep -qx "saved checkpoint $o/ckpt/step-40" "$o.log"; then
    t0=$SECONDS
    kill -TERM $pid # (timeout passes the signal on to the run)
fi
wait $pid
rc=$?
[ -n "$t0" ] || fail "a stop while waiting: step 40's checkpoint was never saved: $(tail -n 3 "$o.log")"
[ $rc -eq 143 ] || fail "a stop while waiting on the stuck batch: exit $rc (want 143; 124: it waited on): $(tail -n 3 "$o.log")"
grep -qE "^scaletrain: stopped by SIGTERM while waiting [0-9]+ s for training batch 40 \(a worker is still reading it: its storage is slow or stopped answering\)" "$o.log" ||
    fail "a stop while waiting: no message saying so: $(tail -n 3 "$o.log")"
[ "$(cat "$o/ckpt/latest" 2>/dev/null)" = step-40 ] || fail "a stop while waiting: the latest checkpoint is not step 40"
if [ "$fails" -eq 0 ]; then
    echo "a stop while the step loop waits on the stuck batch (data.timeout_s 0): exit 143 after $((SECONDS - t0)) s"
    resumed "a stop while waiting" "$o" --set data.num_workers=1 --set data.timeout_s=0 --set train.checkpoint_every=40
fi

out=$(SCALETRAIN_TEST_DATA_STALL=t.tokens:160 timeout -k 10 120 "$bin" "${run[@]}" --set data.num_workers=1 \
    --set train.steps=40 --set train.out_dir="$tmp/ahead" 2>&1); rc=$?
[ $rc -eq 0 ] || fail "a stuck batch taken ahead: exit $rc (want 0; 124: it waited on the thread): $(tail -n 3 <<<"$out")"
[ -s "$tmp/ahead/model.safetensors" ] || fail "a stuck batch taken ahead: no weights saved"
grep -q "^scaletrain: warning: data loader: a worker has been reading batch 40, taken ahead and never used, for 1 s after the loader was done with (data.timeout_s)" <<<"$out" ||
    fail "a stuck batch taken ahead: no warning naming it: $(grep -i warn <<<"$out")"
[ "$fails" -ne 0 ] || echo "a loader thread stuck in a batch taken ahead: the 40-step run ends, exit 0, saying so"

if command -v mpirun >/dev/null; then
    e2e_mpi 120
    z=("${mpi[@]}" -np 2 "$bin" "${run[@]}" --set dist.strategy=zero2 --set data.num_workers=1)
    "${z[@]}" --set train.out_dir="$tmp/zref" >"$tmp/zref.log" 2>&1 || fail "ZeRO-2 uninterrupted: exit $?: $(tail -2 "$tmp/zref.log")"
    out=$(SCALETRAIN_TEST_DATA_STALL=t.tokens:162 "${z[@]}" --set train.out_dir="$tmp/z" 2>&1); rc=$?
    err=$(grep "error (rank" <<<"$out")
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "ZeRO-2: exit $rc (want the ranks' 1): $(tail -n 3 <<<"$out")"
    grep -q "error (rank 1): data loader: batch 40 is not ready after 1 s" <<<"$err" ||
        fail "ZeRO-2: rank 1 does not name its stuck batch: $err"
    grep -q "error (rank 0): rank 1 could not read its training batch of step 41 (its own message says why), so every rank stopped there" <<<"$err" ||
        fail "ZeRO-2: rank 0 does not name rank 1: $err"
    [ "$(grep -c "the weights and optimizer state after step 40 were saved first, to $tmp/z/ckpt/step-40" <<<"$err")" = 2 ] ||
        fail "ZeRO-2: the ranks do not both say that the 40 steps were saved: $err"
    if [ "$fails" -eq 0 ]; then
        echo "ZeRO-2, rank 1's loader stuck in batch 40: both ranks stopped, their shards of step 40 saved together"
        "${z[@]}" --set train.out_dir="$tmp/z" --resume auto >"$tmp/z.log" 2>&1 ||
            fail "ZeRO-2: resumed: exit $?: $(grep -i error "$tmp/z.log" | head -2)"
        cmp -s "$tmp/zref/model.safetensors" "$tmp/z/model.safetensors" &&
            echo "ZeRO-2: resumed from step 40 to 60: the uninterrupted run's weights bit for bit" ||
            fail "ZeRO-2: resumed from step 40: other weights than the uninterrupted run's"
    fi
    # DDP with asynchronous checkpoints (step 20's committed, step 40's being
    # written when rank 1 fails alone): that commit needs both ranks, so rank
    # 1 drops it and saves step 40 itself (before, the mark of the dropped
    # one kept it from saving: latest stayed at step 20, 20 steps lost)
    out=$(SCALETRAIN_TEST_DATA_STALL=t.tokens:162 "${mpi[@]}" -np 2 "$bin" "${run[@]}" --set dist.strategy=ddp \
        --set data.num_workers=1 --set train.checkpoint_every=20 --set train.checkpoint_async=true \
        --set train.out_dir="$tmp/da" 2>&1); rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(cat "$tmp/da/ckpt/latest" 2>/dev/null)" = step-40 ] &&
        grep -q "rank 1 of 2 (host [^)]*): aborting every rank: data loader: batch 40 .*the checkpoint of step 40 being written needs every rank to commit: dropped; rank 1 saved the weights and optimizer state after step 40 first, to $tmp/da/ckpt/step-40" <<<"$out" ||
        fail "DDP, asynchronous checkpoints: exit $rc, latest $(cat "$tmp/da/ckpt/latest" 2>/dev/null): $(grep "aborting" <<<"$out")"
    [ "$fails" -ne 0 ] || echo "DDP, asynchronous checkpoints, rank 1 stuck in batch 40: the uncommitted step 40 saved by rank 1"
    # ... on a file system without locks (every flock fails): rank 1 still
    # saves, its rescue's lock the file it made first (before, a rank but 0
    # left the save to rank 0, which waited in a collective: 10 steps lost)
    cc -shared -fPIC -O2 -o "$tmp/vanish.so" tests/lib/vanish.c -ldl || fail "cannot build tests/lib/vanish.c"
    out=$(LD_PRELOAD="$tmp/vanish.so" ST_VANISH_NOFLOCK=1 SCALETRAIN_TEST_DATA_STALL=t.tokens:162 "${mpi[@]}" -np 2 \
        "$bin" "${run[@]}" --set dist.strategy=ddp --set data.num_workers=1 --set train.checkpoint_every=30 \
        --set train.out_dir="$tmp/nl" 2>&1); rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(cat "$tmp/nl/ckpt/latest" 2>/dev/null)" = step-40 ] &&
        grep -q "rank 1 saved the weights and optimizer state after step 40 first, to $tmp/nl/ckpt/step-40" <<<"$out" ||
        fail "DDP without file locks: exit $rc, latest $(cat "$tmp/nl/ckpt/latest" 2>/dev/null): $(grep -E "aborting|warning" <<<"$out")"
    [ "$fails" -ne 0 ] || echo "DDP on a file system without locks, rank 1 stuck in batch 40: step 40 saved by rank 1"
    # 8. a stop while rank 1 waits on its stuck batch, under agreed reads
    o=$tmp/zterm
    mkfifo "$o.fifo"
    SCALETRAIN_TEST_DATA_STALL=t.tokens:162 timeout -k 10 60 mpirun --allow-run-as-root --oversubscribe \
        --bind-to none -np 2 "$bin" "${run[@]}" --set dist.strategy=zero2 --set data.num_workers=1 \
        --set data.timeout_s=0 --set train.checkpoint_every=40 --set train.out_dir="$o" >"$o.fifo" 2>&1 &
    pid=$!
    t0=
    while IFS= read -r l; do
        echo "$l" >>"$o.log"
        if [ -z "$t0" ] && [ "$l" = "saved checkpoint $o/ckpt/step-40" ]; then
            t0=$SECONDS
            kill -TERM $(pgrep -P "$(pgrep -P $pid | head -n 1)") # (both ranks: mpirun's children)
        fi
    done <"$o.fifo"
    wait $pid
    rc=$?
    [ -n "$t0" ] || fail "ZeRO-2, a stop while rank 1 waits: step 40 never saved: $(tail -n 3 "$o.log")"
    [ $rc -eq 143 ] || fail "ZeRO-2, a stop while rank 1 waits: exit $rc (want 143; 124: a rank waited on): $(grep -E "error|stopped" "$o.log")"
    grep -qE "stopped by SIGTERM while waiting [0-9]+ s for training batch 40" "$o.log" &&
        grep -q "stopped by SIGTERM while rank 1 waited for its training batch of step 41" "$o.log" ||
        fail "ZeRO-2, a stop while rank 1 waits: the ranks do not say so: $(grep -E "error|stopped" "$o.log")"
    [ "$(cat "$o/ckpt/latest" 2>/dev/null)" = step-40 ] || fail "ZeRO-2, a stop while rank 1 waits: latest is not step 40"
    [ "$fails" -ne 0 ] ||
        echo "ZeRO-2, a stop while rank 1 waits on its stuck batch: both ranks stop, exit 143 after $((SECONDS - t0)) s"
else
    echo "ZeRO-2 on 2 ranks: skipped: mpirun is missing (apt-get install openmpi-bin libopenmpi-dev)"
fi
e2e_finish "data reads that never return end the run after data.timeout_s, naming them; the run resumes on its trajectory"
