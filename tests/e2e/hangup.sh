#!/usr/bin/env bash
# A run whose terminal or reader goes away loses nothing:
#  1. `scaletrain train | head -n 3`: the reader leaves after three lines;
#     the run's standard output (a queue and a writer thread, core/outq.h)
#     sees EPIPE, not SIGPIPE, trains to its end, writes the uninterrupted
#     run's weights bit for bit, exits 0 and says on standard error how many
#     lines were not written (before: SIGPIPE ended it, exit 141, no
#     weights);
#  2. SIGHUP (the terminal closed) stops a run as SIGTERM does (while it
#     trains, `data inspect` of its out_dir names it, from run.lock): the step
#     ends, a checkpoint is saved, exit 129, and `--resume auto` ends with
#     the uninterrupted run's weights (before: the process died, the steps
#     since the last checkpoint lost);
#  3. under nohup (SIGHUP ignored when the run starts) SIGHUP changes
#     nothing: the run trains to its end;
#  4. `scaletrain launch`: SIGHUP to the launcher goes to the ranks, which
#     checkpoint and exit 129, not restarted;
#  5. SIGQUIT (Ctrl-\\) stops a run as SIGTERM does: a checkpoint, exit 131;
#  6. the launcher SIGKILLed (nothing passed on) takes its job with it:
#     mpirun and the ranks end, and out_dir is free for the next run
#     (before: they trained on unseen, holding its lock).
# Waits are bounded polls of the checkpoint file, and `wait`.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_mpirun
e2e_tmpdir
e2e_cleanup() { pkill -KILL -f -- "$tmp/" 2>/dev/null; } # (a failed case's processes: their arguments name $tmp)
source "$(dirname "$0")/../lib/tiny_gpt.sh"
# (1500 steps, about 2 s here: a signal sent once the first checkpoint is
# seen lands mid-run on a loaded machine too; 300 were over in 0.4 s)
run+=(--set optim.schedule=constant --set train.checkpoint_every=3 --set train.checkpoint_every_s=0
      --set log.progress=off --set log.every=1 --set train.steps=1500)
timeout -k 10 120 "$bin" "${run[@]}" --set train.out_dir="$tmp/ref" >"$tmp/ref.log" 2>&1 ||
    fail "uninterrupted: exit $?: $(tail -n 2 "$tmp/ref.log")"

# 1.
o=$tmp/head
timeout -k 10 120 "$bin" "${run[@]}" --set train.out_dir="$o" 2>"$tmp/head.err" | head -n 3 >/dev/null
rc=${PIPESTATUS[0]}
[ $rc -eq 0 ] || fail "reader gone: exit $rc (want 0; 141: SIGPIPE ended the run): $(tail -n 2 "$tmp/head.err")"
grep -qE "^scaletrain: rank 0 of 1 \(host [^,]+, pid [0-9]+\): [0-9]+ lines of standard output not written \(a write failed: Broken pipe\)$" "$tmp/head.err" ||
    fail "reader gone: no line saying what was not written: $(cat "$tmp/head.err")"
cmp -s "$tmp/ref/model.safetensors" "$o/model.safetensors" &&
    echo "reader gone: exit 0 with the uninterrupted run's weights; $(grep -oE '[0-9]+ lines' "$tmp/head.err") not written" ||
    fail "reader gone: other weights than the uninterrupted run's (or none)"

# 2.
o=$tmp/hup
timeout -k 10 120 "$bin" "${run[@]}" --set train.out_dir="$o" >"$o.log" 2>&1 &
pid=$!
if e2e_wait_ckpt $pid "$o"; then
    # (while it trains, `data inspect` of its out_dir names it: run.lock)
    "$bin" data inspect "$o" | grep -qE "^in use: a run on host [^,]+, pid $(pgrep -P $pid | head -n 1), since .*\(it holds $o/run.lock\)$" ||
        fail "data inspect: the run training in $o is not named: $("$bin" data inspect "$o" 2>&1 | head -n 3)"
    kill -HUP $pid
else
    fail "SIGHUP: training did not start: $(tail -n 2 "$o.log")"
fi
wait $pid; rc=$?
at=$(cat "$o/ckpt/latest" 2>/dev/null)
if [ $rc -eq 129 ] && grep -q "stopped by SIGHUP after step .* checkpoint saved to" "$o.log"; then
    timeout -k 10 120 "$bin" "${run[@]}" --set train.out_dir="$o" --resume auto >"$o.resume.log" 2>&1 ||
        fail "SIGHUP: resumed: exit $?: $(tail -n 2 "$o.resume.log")"
    cmp -s "$tmp/ref/model.safetensors" "$o/model.safetensors" &&
        echo "SIGHUP: exit 129 with a checkpoint at $at; --resume auto ends with the uninterrupted run's weights" ||
        fail "SIGHUP: resumed to other weights than the uninterrupted run's"
else
    fail "SIGHUP: exit $rc (want 129) or no checkpoint message: $(tail -n 3 "$o.log")"
fi

# 3. Under nohup (SIGHUP ignored from the start) the run ignores it; the
# signal goes to scaletrain itself (nohup execs it), not through timeout.
o=$tmp/nohup
timeout -k 10 120 nohup "$bin" "${run[@]}" --set train.out_dir="$o" >"$o.log" 2>&1 &
pid=$!
if ! e2e_wait_ckpt $pid "$o"; then
    fail "nohup: training did not start"
elif ! pkill -HUP -f -- "^$bin train .*train.out_dir=$o\$"; then
    fail "nohup: no scaletrain process to signal"
fi
wait $pid; rc=$?
[ $rc -eq 0 ] && cmp -s "$tmp/ref/model.safetensors" "$o/model.safetensors" &&
    echo "nohup: SIGHUP ignored, the run trained to its end" || fail "nohup: exit $rc (want 0) or other weights"

# 4.
o=$tmp/launch
timeout -k 10 120 "$bin" launch -n 2 --max-restarts 2 "${run[@]}" --set train.steps=100000 \
    --set train.out_dir="$o" >"$o.out" 2>"$o.err" &
lpid=$!
if e2e_wait_ckpt $lpid "$o"; then kill -HUP $lpid; else fail "launch: training did not start"; fi
wait $lpid; rc=$?
[ $rc -eq 129 ] && grep -q "not restarted: it was stopped by a signal" "$o.err" &&
    [ "$(grep -c "^\[rank [0-9]*\] scaletrain: stopped by SIGHUP after step .* checkpoint saved to" "$o.err")" -eq 1 ] &&
    echo "launch: SIGHUP to the launcher: the ranks saved a checkpoint at $(cat "$o/ckpt/latest"), exit 129, not restarted, said once" ||
    fail "launch: exit $rc (want 129): $(tail -n 4 "$o.err")"
# 5.
o=$tmp/quit
timeout -k 10 120 "$bin" "${run[@]}" --set train.out_dir="$o" >"$o.log" 2>&1 &
pid=$!
if e2e_wait_ckpt $pid "$o"; then kill -QUIT $pid; else fail "SIGQUIT: training did not start: $(tail -n 2 "$o.log")"; fi
wait $pid; rc=$?
[ $rc -eq 131 ] && grep -q "stopped by SIGQUIT after step .* checkpoint saved to" "$o.log" &&
    echo "SIGQUIT: exit 131 with a checkpoint at $(cat "$o/ckpt/latest")" ||
    fail "SIGQUIT: exit $rc (want 131) or no checkpoint message: $(tail -n 3 "$o.log")"

# 6.
o=$tmp/orphan
timeout -k 10 120 "$bin" launch -n 2 "${run[@]}" --set train.steps=100000 --set train.out_dir="$o" \
    >"$o.out" 2>"$o.err" &
lpid=$!
if e2e_wait_ckpt $lpid "$o"; then
    ranks=$(pgrep -f -- "train.out_dir=$o\$" | tr '\n' ' ')
    launcher=$(pgrep -P $lpid)
    kill -KILL $launcher
    wait $lpid 2>/dev/null # (timeout ends itself by its child's signal)
    left=
    for p in $ranks; do e2e_gone "$p" || e2e_gone "$p" || e2e_gone "$p" || left+=" $p"; done
    [ -z "$left" ] || fail "launcher SIGKILLed: processes$left of its job still run: $(ps -o pid,args -p ${left// /,} | tail -n +2)"
    [ -n "$ranks" ] || fail "launcher SIGKILLed: no process of its job found to watch"
    timeout -k 10 60 "$bin" "${run[@]}" --set train.steps=1 --set train.out_dir="$o" --resume auto --quiet \
        >"$o.next" 2>&1 || fail "launcher SIGKILLed: the next run in its out_dir: exit $?: $(tail -n 2 "$o.next")"
    [ "$fails" -ne 0 ] || echo "launcher SIGKILLed: its job ($(wc -w <<<"$ranks") processes) ended with it, out_dir free"
else
    fail "launcher SIGKILLed: training did not start: $(tail -n 2 "$o.err")"
fi
e2e_finish "a reader or terminal that goes away loses no work"
