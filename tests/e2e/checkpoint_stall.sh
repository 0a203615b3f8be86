#!/usr/bin/env bash
# The checkpoint's write watch: a checkpoint write that never returns (the
# slow file system of tests/lib/slowfs.c, LD_PRELOAD, with a delay of 11 days:
# each fsync in step 10's temporary checkpoint directory, as on a hung
# network file system) does not hang the run.
# A tiny GPT (CPU, one rank, a checkpoint every 5 steps,
# train.checkpoint_timeout_s 1), written synchronously and then on the
# writer's own thread (train.checkpoint_async):
#  1. exits 1 with a message naming the checkpoint's step, its temporary
#     directory, the wait and the key; the step-5 checkpoint is whole and
#     latest;
#  2. `--resume auto` without the stall continues from step 5 and ends with
#     the weights of an uninterrupted 20-step run, bit for bit; its save of
#     step 10 removed the stalled write's temporary directory.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_tmpdir memory # (tests/lib/e2e.sh: storage limits of 1 s)
source "$(dirname "$0")/../lib/slowfs.sh"
timeout 120 "$bin" "${run[@]}" --set train.out_dir="$tmp/ref" >"$tmp/ref.log" 2>&1 ||
    fail "uninterrupted: exit $?: $(tail -2 "$tmp/ref.log")"

for async in false true; do
    o=$tmp/async-$async
    out=$(timeout -k 10 120 env LD_PRELOAD="$tmp/slowfs.so" ST_SLOWFS_MATCH=/step-10.tmp ST_SLOWFS_MS=1000000000 "$bin" \
        "${run[@]}" --set train.checkpoint_async=$async --set train.out_dir="$o" 2>&1); rc=$?
    line=$(grep "has not finished after" <<<"$out")
    [ $rc -eq 1 ] || fail "async $async: a stalled write: exit $rc (want 1): $(tail -n 3 <<<"$out")"
    grep -qE "^scaletrain: rank 0 \(pid [0-9]+\): writing the checkpoint of step 10.* to $o/ckpt/step-10\.tmp\.[0-9]+ has not finished after 1 s \(train\.checkpoint_timeout_s: 1 s\): the storage stopped answering" <<<"$line" ||
        fail "async $async: no message naming the step, the directory, the wait and the key: $out"
    [ "$(cat "$o/ckpt/latest" 2>/dev/null)" = step-5 ] && [ -f "$o/ckpt/step-5/state.json" ] ||
        fail "async $async: step-5 is not the latest whole checkpoint: $(ls "$o/ckpt" 2>/dev/null | tr '\n' ' ')"
    [ "$fails" -ne 0 ] || echo "async $async: exit 1 after the 1 s wait, naming step 10's checkpoint; step 5 whole"
    if [ "$fails" -eq 0 ]; then
        timeout 120 "$bin" "${run[@]}" --set train.checkpoint_async=$async --set train.out_dir="$o" --resume auto \
            >"$o.log" 2>&1 || fail "async $async: resumed: exit $?: $(grep -i error "$o.log" | head -2)"
        grep -q "resumed from .*step-5 at step 5" "$o.log" || fail "async $async: not resumed from step 5"
        ls "$o/ckpt" | grep -q '\.tmp' && fail "async $async: the stalled write's temporary directory is left: $(ls "$o/ckpt" | tr '\n' ' ')"
        cmp -s "$tmp/ref/model.safetensors" "$o/model.safetensors" &&
            echo "async $async: resumed from step 5: the uninterrupted run's weights bit for bit" ||
            fail "async $async: resumed from step 5: other weights than the uninterrupted run's"
    fi
done
e2e_finish "a checkpoint write that never returns ends the run after train.checkpoint_timeout_s, naming it; the run resumes from the one before"
