#!/usr/bin/env bash
# Ctrl-C (SIGINT) to `scaletrain train`, while the stop's checkpoint is
# being written (its weights file slowed by tests/lib/slowfs.c, 2 s a call):
#  1. twice 0.2 s apart, as `timeout -s INT` sends it (to its child, then to
#     its process group): one request. The run finishes the checkpoint, says
#     where it stopped and exits 130; ckpt/latest names the checkpoint.
#     (A second SIGINT used to end the process at once however soon it came:
#     no checkpoint.)
#  2. twice 1.5 s apart (Ctrl-C, then Ctrl-C again): the second ends the
#     process at once, by SIGINT, mid-save; no checkpoint committed, nor the
#     line that says one was.
# tests/run.sh: light (it mostly waits on the slowed writes)
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_fmnist
e2e_tmpdir
export OMP_WAIT_POLICY=PASSIVE
cc -shared -fPIC -O2 -o "$tmp/slowfs.so" tests/lib/slowfs.c -ldl || { echo "FAIL: cannot build the shim"; exit 1; }
args=(train --set train.threads=1 --set data.val= --set log.every=1 --set log.progress=off --set model.type=mlp
    --set model.hidden=[32] --set train.batch_size=16 --set data.num_workers=0 --set train.steps=1000000
    --set train.checkpoint_every=0)

# start NAME: the run in the background, under `timeout -s KILL 90` (its
# pid: wait on it), so that a stop that does not end it fails rather than
# hangs; pid: the run's own process, which the signals go to; once it has
# logged step 3
start() {
    timeout --foreground -s KILL 90 env LD_PRELOAD="$tmp/slowfs.so" ST_SLOWFS_MATCH=model.safetensors \
        ST_SLOWFS_MS=2000 "$bin" "${args[@]}" --set train.out_dir="$tmp/$1" >"$tmp/$1.log" 2>&1 &
    bound=$!
    pid=""
    for _ in $(seq 1 100); do # (its child, env become scaletrain: at once)
        pid=$(pgrep -P $bound) && break
        sleep 0.01
    done
    for _ in $(seq 1 600); do # (up to 30 s)
        grep -q "^step 3/" "$tmp/$1.log" 2>/dev/null && return 0
        kill -0 $bound 2>/dev/null || break
        sleep 0.05
    done
    fail "$1: the run did not log step 3: $(tail -n 3 "$tmp/$1.log")"
    kill -KILL $bound $pid 2>/dev/null
    return 1
}

# 1. twice within a second: one stop, a checkpoint
if start twice; then
    kill -INT $pid
    sleep 0.2
    kill -INT $pid
    wait $bound; rc=$?
    latest=$(cat "$tmp/twice/ckpt/latest" 2>/dev/null)
    [ $rc -eq 130 ] && grep -q "stopped by SIGINT after step [0-9]*.*checkpoint saved to $tmp/twice/ckpt/$latest" \
        "$tmp/twice.log" && [ -f "$tmp/twice/ckpt/$latest/state.json" ] ||
        fail "SIGINT twice within a second: exit $rc, latest '$latest': $(tail -n 2 "$tmp/twice.log")"
    # (the first Ctrl-C is heard at once: said once, where nothing showed until the checkpoint's end)
    [ "$(grep -c "^scaletrain: stopping at the end of this step (or evaluation batch), saving what was trained; Ctrl-C again, a second from now, ends the run at once without saving$" "$tmp/twice.log")" -eq 1 ] ||
        fail "SIGINT: not acknowledged once: $(grep -c stopping "$tmp/twice.log")"
    echo "SIGINT twice within a second: exit $rc, checkpoint $latest"
fi

# 2. twice, 1.5 s apart: the second ends it mid-save
if start again; then
    kill -INT $pid
    sleep 1.5
    kill -INT $pid
    wait $bound; rc=$?
    [ $rc -eq 130 ] && ! grep -q "stopped by" "$tmp/again.log" && [ ! -e "$tmp/again/ckpt/latest" ] ||
        fail "SIGINT again after 1.5 s: exit $rc, ckpt/latest $(cat "$tmp/again/ckpt/latest" 2>&1): $(tail -n 2 "$tmp/again.log")"
    echo "SIGINT again 1.5 s later: exit $rc, no checkpoint committed, none said"
fi
e2e_finish ok
