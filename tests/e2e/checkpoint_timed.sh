#!/usr/bin/env bash
# train.checkpoint_every_s: a checkpoint after the first step that ends that
# many seconds after the last one (or the start), on a tiny GPT (CPU).
#  1. An interval shorter than any step (1e-9 s): a checkpoint after every
#     step (train.keep_checkpoints 0 keeps them all), with
#     train.checkpoint_every 0.
#  2. An interval longer than the run: only the last step's.
#  3. 0.3 s on a run of a few seconds: at least one checkpoint before the
#     last, and no more than the run's seconds allow (each at least 0.3 s
#     after the one before).
#  4. Two ranks under zero1 at 1e-9 s: both save after every step (every
#     checkpoint holds both ranks' optimizer shards); then `--resume auto`
#     from the step-5 checkpoint of a 10-step run ends with the weights of
#     the uninterrupted run, bit for bit.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_tmpdir
source "$(dirname "$0")/../lib/tiny_gpt.sh"
run+=(--set train.eval_every=0 --set train.keep_checkpoints=0 --set log.progress=off)
steps_of() { ls "$1/ckpt" 2>/dev/null | sed -nE 's/^step-([0-9]+)$/\1/p' | sort -n | tr '\n' ' '; }

timeout 120 "$bin" "${run[@]}" --set train.steps=6 --set train.checkpoint_every_s=1e-9 \
    --set train.out_dir="$tmp/every" >"$tmp/every.log" 2>&1 || fail "1e-9 s: exit $?: $(tail -2 "$tmp/every.log")"
[ "$(steps_of "$tmp/every")" = "1 2 3 4 5 6 " ] || fail "1e-9 s: checkpoints $(steps_of "$tmp/every"), want 1-6"

timeout 120 "$bin" "${run[@]}" --set train.steps=6 --set train.checkpoint_every_s=1e9 \
    --set train.out_dir="$tmp/never" >"$tmp/never.log" 2>&1 || fail "1e9 s: exit $?"
[ "$(steps_of "$tmp/never")" = "6 " ] || fail "1e9 s: checkpoints $(steps_of "$tmp/never"), want 6"

t0=$(date +%s.%N)
timeout 300 "$bin" "${run[@]}" --set train.steps=6000 --set train.checkpoint_every_s=0.3 \
    --set train.out_dir="$tmp/mid" --json >"$tmp/mid.log" 2>&1 || fail "0.3 s: exit $?"
wall=$(echo "$(date +%s.%N) - $t0" | bc)
trained=$(/usr/bin/python3 -c 'import json,sys; print(json.loads([l for l in open(sys.argv[1]) if l.startswith("{")][-1])["seconds"])' "$tmp/mid.log")
n=$(steps_of "$tmp/mid" | wc -w)
echo "0.3 s: checkpoints before the last: $((n - 1)), in $trained s of training ($wall s in all): steps $(steps_of "$tmp/mid")"
most=$(echo "$wall / 0.3 + 1" | bc)
if [ "$(echo "$trained >= 0.7" | bc)" = 1 ]; then
    [ "$n" -ge 2 ] || fail "0.3 s: no checkpoint before the last in $trained s of training"
else
    echo "0.3 s: the run trained only $trained s; the lower bound is not checked"
fi
[ "$n" -le "$most" ] || fail "0.3 s: $n checkpoints in $wall s, more than one per 0.3 s"

if command -v mpirun >/dev/null; then
    two=("$bin" launch -n 2 --cores-per-rank 1 "${run[@]}" --set dist.strategy=zero1 --set train.steps=10)
    timeout 300 "${two[@]}" --set train.checkpoint_every_s=1e-9 --set train.out_dir="$tmp/two" >"$tmp/two.log" 2>&1 ||
        fail "two ranks: exit $?: $(grep -i error "$tmp/two.log" | head -2)"
    [ "$(steps_of "$tmp/two")" = "1 2 3 4 5 6 7 8 9 10 " ] || fail "two ranks: checkpoints $(steps_of "$tmp/two")"
    for k in $(seq 1 10); do
        [ -f "$tmp/two/ckpt/step-$k/optim-rank0.safetensors" ] && [ -f "$tmp/two/ckpt/step-$k/optim-rank1.safetensors" ] ||
            fail "two ranks: step-$k lacks a rank's optimizer shard"
    done
    mkdir -p "$tmp/resumed/ckpt"
    cp -r "$tmp/two/ckpt/step-5" "$tmp/resumed/ckpt/" && echo step-5 >"$tmp/resumed/ckpt/latest"
    timeout 300 "${two[@]}" --set train.checkpoint_every_s=0 --set train.out_dir="$tmp/resumed" --resume auto \
        >"$tmp/resumed.log" 2>&1 || fail "resumed: exit $?: $(grep -i error "$tmp/resumed.log" | head -2)"
    cmp -s "$tmp/two/model.safetensors" "$tmp/resumed/model.safetensors" &&
        echo "two ranks: resumed from the timed checkpoint of step 5, the same weights bit for bit" ||
        fail "two ranks: resumed from step 5, other weights"
else
    echo "two ranks: skipped: mpirun is missing (apt-get install openmpi-bin libopenmpi-dev)"
fi
e2e_finish "checkpoints by time: after every step, never, about every 0.3 s; the ranks agree"
