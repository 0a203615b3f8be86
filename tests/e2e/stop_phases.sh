#!/usr/bin/env bash
# A stop (SIGTERM) at the two points of a run where it did more than asked,
# each held there by tests/lib/slowfs.c (its UNTIL/MARK: the process waits
# at the call until the test lets it go, no timing):
# (a) during the set-up, held at the open of its training data: the run
#     ends before its first step, exit 143, saying nothing was trained or
#     saved, and writes no checkpoint; a run started again in its out_dir
#     is not refused as an unfinished run's. (It trained step 1 and saved
#     it, and that checkpoint made the corrected run refuse the folder.)
# (b) during a periodic checkpoint's write (step 2 of checkpoint_every 2),
#     held at its weights file: the run stops after that step, its
#     checkpoint the stop's, exit 143. (It trained step 3 and saved it too,
#     twice the time to stop.)
# tests/run.sh: light (it mostly waits on the held calls)
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_fmnist
e2e_tmpdir
export OMP_WAIT_POLICY=PASSIVE
cc -shared -fPIC -O2 -o "$tmp/slowfs.so" tests/lib/slowfs.c -ldl || { echo "FAIL: cannot build the shim"; exit 1; }
fm=/usr/share/datasets/fashion-mnist
cp "$fm/train-images-idx3-ubyte.gz" "$tmp/held-images.gz"
args=(train --set train.threads=1 --set data.val= --set log.every=1 --set log.progress=off --set model.type=mlp
    --set model.hidden=[32] --set train.batch_size=16 --set data.num_workers=0 --set train.steps=20
    --set log.peak_gflops=10)

# held NAME MATCH EXTRA...: the run in the background, held at its first call on a path holding MATCH
# until $tmp/NAME.go exists; returns once it waits there ($pid: the run, $bound: its bound)
held() {
    local name=$1 match=$2
    shift 2
    timeout --foreground -s KILL 120 env LD_PRELOAD="$tmp/slowfs.so" ST_SLOWFS_MATCH="$match" ST_SLOWFS_MS=100000 \
        ST_SLOWFS_UNTIL="$tmp/$name.go" ST_SLOWFS_MARK="$tmp/$name.held" \
        "$bin" "${args[@]}" --set train.out_dir="$tmp/$name" "$@" >"$tmp/$name.log" 2>&1 &
    bound=$!
    pid=""
    for _ in $(seq 1 100); do
        pid=$(pgrep -P $bound) && break
        sleep 0.01
    done
    for _ in $(seq 1 1200); do # (up to 60 s)
        [ -e "$tmp/$name.held" ] && return 0
        kill -0 $bound 2>/dev/null || break
        sleep 0.05
    done
    fail "$name: the run was not held at $match: $(tail -n 3 "$tmp/$name.log")"
    kill -KILL $bound $pid 2>/dev/null
    return 1
}

# (a)
if held setup held-images --set data.train="$tmp/held-images.gz"; then
    kill -TERM $pid
    touch "$tmp/setup.go"
    wait $bound; rc=$?
    [ $rc -eq 143 ] && grep -q "stopped by SIGTERM before step 1: nothing was trained or saved" "$tmp/setup.log" &&
        ! grep -q "^step " "$tmp/setup.log" && [ -z "$(ls "$tmp/setup/ckpt" 2>/dev/null)" ] ||
        fail "(a) a stop during the set-up: exit $rc: $(grep -E "^step|stopped|saved" "$tmp/setup.log") ckpt: $(ls "$tmp/setup/ckpt" 2>/dev/null)"
    timeout 120 "$bin" "${args[@]}" --set train.steps=2 --set train.out_dir="$tmp/setup" --quiet >"$tmp/setup2.log" 2>&1 ||
        fail "(a) a run started again in its out_dir: $(tail -n 2 "$tmp/setup2.log")"
    [ "$fails" -ne 0 ] || echo "(a) a stop during the set-up: exit 143, nothing trained or saved; the folder takes a new run"
fi

# (b)
if held ckpt step-2.tmp --set train.checkpoint_every=2; then
    kill -TERM $pid
    touch "$tmp/ckpt.go"
    wait $bound; rc=$?
    [ $rc -eq 143 ] && grep -q "stopped by SIGTERM after step 2 of 20, checkpoint saved to $tmp/ckpt/ckpt/step-2" "$tmp/ckpt.log" &&
        [ "$(cat "$tmp/ckpt/ckpt/latest" 2>/dev/null)" = step-2 ] && [ ! -e "$tmp/ckpt/ckpt/step-3" ] &&
        ! grep -q "^step 3/" "$tmp/ckpt.log" ||
        fail "(b) a stop during a checkpoint's write: exit $rc: $(grep -E "^step|stopped|saved" "$tmp/ckpt.log") ckpt: $(ls "$tmp/ckpt/ckpt")"
    # its metrics reach the stop's step, as a stop's do
    tail -n 2 "$tmp/ckpt/metrics.jsonl" | grep -q '"step":2[,}]' || fail "(b) metrics.jsonl: $(tail -n 2 "$tmp/ckpt/metrics.jsonl")"
    [ "$fails" -ne 0 ] || echo "(b) a stop during a checkpoint's write: that checkpoint is the stop's (step 2), exit 143"
fi
e2e_finish "a stop during the set-up saves nothing; one during a checkpoint's write stops there"
