#!/usr/bin/env bash
# One run at a time in a train.out_dir (rank 0's flock of out_dir/run.lock):
#  1. while run A trains there (before its first checkpoint, where the
#     "unfinished run" check has nothing to go by), run B in the same
#     out_dir, with --resume auto or without, is refused at once: exit 1,
#     a message naming A's host and pid and the lock file, nothing written
#     (A's metrics.jsonl keeps growing, no checkpoint of B's);
#  2. the same under mpirun (2 ranks): every rank stops with it; and
#     `scaletrain check` says FAIL out_dir, naming A;
#  3. A stopped (SIGTERM: a checkpoint, exit 143): the lock went with it,
#     and B with --resume auto continues A's run to its end;
#  4. a run's out_dir removed while it trains (rm -rf after its first
#     checkpoint): at its next save the run stops, exit 1, saying so, and
#     writes nothing there (before: the save made the folder again, without
#     its lock, so a second run there was not refused and the two mixed
#     their checkpoints);
#  5. a run that finishes in another's out_dir after that one looked there
#     but before it took the lock (run L held, by tests/lib/slowfs.c, at its
#     --init's open, which comes between the two; run Q then trains there
#     to its end; L let go): L looks again under the lock, sets Q's
#     checkpoints aside in ckpt.previous, saying so, and trains (before: it
#     overwrote Q's checkpoint, metrics.jsonl and model.safetensors without
#     a word).
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_mpirun
e2e_tmpdir
e2e_cleanup() { pkill -KILL -f -- "$tmp/" 2>/dev/null; }
source "$(dirname "$0")/../lib/tiny_gpt.sh"
run+=(--set log.progress=off --set log.every=1 --set train.steps=1000000 --set train.checkpoint_every_s=0
      --set train.out_dir="$tmp/run")

timeout -k 10 120 "$bin" "${run[@]}" >"$tmp/a.log" 2>&1 &
apid=$!
for i in $(seq 1 600); do # A has its lock and trains: metrics.jsonl has lines
    [ -s "$tmp/run/metrics.jsonl" ] || ! kill -0 $apid 2>/dev/null && break
    sleep 0.1
done
[ -s "$tmp/run/metrics.jsonl" ] || fail "run A did not start: $(tail -n 3 "$tmp/a.log")"

# refused TAG ARGS...: the run exits 1 naming A (its pid) and the lock file.
refused() {
    local tag=$1
    shift
    local before out rc
    before=$(wc -l <"$tmp/run/metrics.jsonl")
    out=$(timeout -k 10 60 "$@" 2>&1)
    rc=$?
    if [ $rc -eq 1 ] && grep -qE "train\.out_dir $tmp/run is in use by another run \(a run on host [^,]+, pid [0-9]+, since [0-9T:Z-]+: it holds $tmp/run/run\.lock\)" <<<"$out" &&
        grep -q "pid $(pgrep -P $apid | head -n 1)," <<<"$out"; then
        echo "$tag: refused, naming run A"
    else
        fail "$tag: exit $rc (want 1) or no message naming run A: $(tail -n 3 <<<"$out")"
    fi
    [ ! -d "$tmp/run/ckpt" ] || fail "$tag: a checkpoint directory appeared"
    kill -0 $apid 2>/dev/null || fail "$tag: run A ended"
}
refused "B, a new run" "$bin" "${run[@]}"
refused "B, --resume auto" "$bin" "${run[@]}" --resume auto
refused "B, 2 ranks" "$bin" launch -n 2 "${run[@]}" --resume auto

# scaletrain check sees it too: a FAIL line naming A, "not ready".
out=$(timeout -k 10 120 "$bin" check "${run[@]:1}" 2>&1)
grep -qE "^FAIL +out_dir +$tmp/run is in use by another run \(a run on host [^,]+, pid $(pgrep -P $apid | head -n 1), since" <<<"$out" &&
    grep -q "^not ready" <<<"$out" && echo "check: FAIL out_dir, naming run A" ||
    fail "check: no FAIL line naming run A: $(grep -E "out_dir|ready" <<<"$out")"

# 3.
kill -TERM $apid
wait $apid; rc=$?
[ $rc -eq 143 ] && [ -s "$tmp/run/ckpt/latest" ] || fail "run A: SIGTERM: exit $rc (want 143), checkpoint '$(cat "$tmp/run/ckpt/latest" 2>/dev/null)'"
at=$(cat "$tmp/run/ckpt/latest")
timeout -k 10 120 "$bin" "${run[@]}" --set train.steps=$((${at#step-} + 5)) --resume auto >"$tmp/b.log" 2>&1 ||
    fail "run B after A: exit $?: $(tail -n 3 "$tmp/b.log")"
grep -q "^resumed from $tmp/run/ckpt/$at at step" "$tmp/b.log" && echo "B after A stopped: resumed A's $at and trained to its end" ||
    fail "run B after A: did not resume from $at: $(grep -m1 resumed "$tmp/b.log")"
# 4. (checkpoints 2000 steps apart, a second or so here: the removal, noticed up to 0.1 s after the first,
#    is over before the next save begins; 200 apart, a save could start before it and finish into the tree
#    rm was emptying, which then held its step and `latest`)
timeout -k 10 120 "$bin" "${run[@]}" --set train.checkpoint_every=2000 --set train.out_dir="$tmp/gone" \
    >"$tmp/gone.log" 2>&1 &
gpid=$!
if e2e_wait_ckpt $gpid "$tmp/gone"; then
    rm -rf "$tmp/gone"
    wait $gpid; rc=$?
    [ $rc -eq 1 ] && grep -q "error: train.out_dir $tmp/gone was removed while the run trained (the run.lock it held there is gone): nothing more is written there" "$tmp/gone.log" ||
        fail "out_dir removed: exit $rc (want 1) or no message saying so: $(tail -n 2 "$tmp/gone.log")"
    [ ! -e "$tmp/gone" ] || fail "out_dir removed: made again: $(find "$tmp/gone" | head -5)"
    [ "$fails" -ne 0 ] || echo "out_dir removed while the run trains: stopped at its next save, saying so, nothing written"
else
    fail "out_dir removed: the run did not start: $(tail -n 2 "$tmp/gone.log")"
fi
# 5.
cc -shared -fPIC -O2 -o "$tmp/slowfs.so" tests/lib/slowfs.c -ldl || fail "cannot build tests/lib/slowfs.c"
timeout -k 10 120 "$bin" "${run[@]}" --set train.steps=3 --set train.out_dir="$tmp/w" >"$tmp/w.log" 2>&1 ||
    fail "the weights for --init: exit $?: $(tail -n 2 "$tmp/w.log")"
timeout -k 10 120 env LD_PRELOAD="$tmp/slowfs.so" ST_SLOWFS_MATCH="$tmp/w/model.safetensors" ST_SLOWFS_MS=100000 \
    ST_SLOWFS_MARK="$tmp/held" ST_SLOWFS_UNTIL="$tmp/go" "$bin" "${run[@]}" --set train.steps=6 \
    --set train.out_dir="$tmp/gap" --init "$tmp/w/model.safetensors" >"$tmp/late.log" 2>&1 &
lpid=$!
for i in $(seq 1 1200); do # L at its --init's open, past its look at out_dir
    [ -e "$tmp/held" ] || ! kill -0 $lpid 2>/dev/null && break
    sleep 0.05
done
[ -e "$tmp/held" ] || fail "run L did not reach its --init: $(tail -n 2 "$tmp/late.log")"
timeout -k 10 120 "$bin" "${run[@]}" --set train.steps=4 --set train.out_dir="$tmp/gap" >"$tmp/quick.log" 2>&1 ||
    fail "run Q: exit $?: $(tail -n 2 "$tmp/quick.log")"
touch "$tmp/go"
wait $lpid; rc=$?
[ $rc -eq 0 ] && grep -q "warning: train.out_dir $tmp/gap holds a finished run (the latest checkpoint at step 4): its checkpoints are now in $tmp/gap/ckpt.previous" "$tmp/late.log" ||
    fail "run L after Q finished in its out_dir: exit $rc (want 0) or no warning setting Q's run aside: $(grep -E "warning|error" "$tmp/late.log" | head -n 3)"
[ -d "$tmp/gap/ckpt.previous/step-4" ] && [ -d "$tmp/gap/ckpt/step-6" ] && [ ! -e "$tmp/gap/ckpt/step-4" ] ||
    fail "run L: want Q's step-4 in ckpt.previous and L's step-6 in ckpt: $(cd "$tmp/gap" && find ckpt* -maxdepth 1 | sort | tr '\n' ' ')"
[ "$fails" -ne 0 ] || echo "a run that finished between another's look at out_dir and its lock: set aside by it, not overwritten"
e2e_finish "one run at a time in a train.out_dir"
