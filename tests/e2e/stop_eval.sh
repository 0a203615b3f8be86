#!/usr/bin/env bash
# A stop (SIGTERM) during an evaluation ends it at its next batch, where the
# run waited for the whole validation set first (a pre-emption's grace time
# lost to it). Each run is held inside the evaluation by
# SCALETRAIN_TEST_EVAL_MARK=FILE:B (train/session.h: FILE made at batch B,
# the evaluation waiting there for the stop), so the signal comes during it:
# (a) the evaluation at step 2 of 4, 1 rank: exit 143, the checkpoint of
#     step 2 saved, the message naming SIGTERM and the evaluation; no eval
#     line for step 2 in the output or metrics.jsonl.
# (b) a stop during the resumed run's first evaluation (the one (a) cut
#     short, made before step 3): nothing trained or saved, the checkpoint
#     of step 2 as it was.
# (c) resumed again to step 4: the evaluation of step 2 is made first, once,
#     with the bits of an uninterrupted run's (its metrics line the same
#     loss), then step 4's.
# (i) (a)'s checkpoint resumed into another out_dir (--resume DIR/ckpt/step-2),
#     whose metrics.jsonl starts anew: its state.json says the evaluation
#     was cut short, and the resumed run makes it first, with the same bits;
#     one that says nothing (step 2's of a run whose evaluation there
#     ended) has none made first.
# (d) the final evaluation, after the last step: the weights are written
#     all the same, exit 143 (again in the resumed run's evaluation of it);
#     --resume auto makes the evaluation, exit 0.
# (e) 2 ranks under launch, the stop passed to both during their shares of
#     the step-2 evaluation: exit 143, said once, checkpoint of step 2; the
#     resumed run makes that evaluation first.
# (h) 2 ranks, the stop reaching rank 1 alone (one node's, say), held at
#     batch 3 of its share: rank 0, not signalled, ends its share at the
#     ranks' next agreement (every 8 batches), not at its end (it is marked
#     at its batch 40, which it must not reach); exit 143, step 2 saved.
# (f) with a progress bar (log.progress on), an evaluation of a second or
#     more draws "eval: N/M batches" in place and erases it before its line.
# (g) `scaletrain eval` stopped: at its next batch, exit 143, said once, on
#     1 rank and on 2 under launch (it died of the signal, without a word).
# tests/e2e/emu_stop_eval.sh runs them with the model on the emulated GPU
# (train/eval_device.c's loop).
# tests/run.sh: light (it mostly waits on the held evaluations)
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_fmnist
e2e_tmpdir
export OMP_WAIT_POLICY=PASSIVE
args=(train --set train.threads=1 --set log.every=1 --set log.progress=off --set model.type=mlp
    --set model.hidden=[32] --set train.batch_size=16 --set data.num_workers=0 --set train.eval_batch_size=100
    --set log.peak_gflops=10 --set train.device="${ST_STOP_EVAL_DEVICE:-cpu}")

# held NAME CMD...: CMD in the background with the mark at evaluation batch 3, output in $tmp/NAME.log;
# returns once it waits there ($pid)
held() {
    local name=$1
    shift
    SCALETRAIN_TEST_EVAL_MARK="$tmp/$name.mark:3" timeout -k 10 120 "$@" >"$tmp/$name.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 1200); do # (up to 60 s)
        [ -e "$tmp/$name.mark" ] && return 0
        kill -0 $pid 2>/dev/null || break
        sleep 0.05
    done
    fail "$name: the run never reached its evaluation's batch 3: $(tail -n 3 "$tmp/$name.log")"
    kill -KILL $pid 2>/dev/null
    return 1
}
# evals FILE: the steps of metrics.jsonl's evaluation lines, and their losses
evals() {
    /usr/bin/python3 -c 'import json,sys
ev=[r for r in map(json.loads, open(sys.argv[1])) if r.get("eval")]
print(" ".join("%d:%r" % (r["step"], r["loss"]) for r in ev))' "$1"
}

# (a)
if held a "$bin" "${args[@]}" --set train.steps=4 --set train.eval_every=2 --set train.out_dir="$tmp/a"; then
    kill -TERM $pid
    wait $pid; rc=$?
    [ $rc -eq 143 ] &&
        grep -q "^scaletrain: stopped by SIGTERM after step 2 of 4 (during its evaluation, which the resumed run makes first), checkpoint saved to $tmp/a/ckpt/step-2; continue with --resume auto" "$tmp/a.log" &&
        ! grep -q "^eval at step 2" "$tmp/a.log" && [ "$(cat "$tmp/a/ckpt/latest" 2>/dev/null)" = step-2 ] &&
        [ -z "$(evals "$tmp/a/metrics.jsonl")" ] ||
        fail "(a) a stop during the evaluation at step 2: exit $rc: $(grep -E "^eval|stopped|error" "$tmp/a.log") latest: $(cat "$tmp/a/ckpt/latest" 2>/dev/null) evals: $(evals "$tmp/a/metrics.jsonl")"
    [ "$fails" -ne 0 ] || echo "(a) a stop during the evaluation at step 2: exit 143, step 2's checkpoint, no evaluation line"
fi

# (b)
cp -r "$tmp/a" "$tmp/b"
if held b "$bin" "${args[@]}" --set train.steps=4 --set train.eval_every=2 --set train.out_dir="$tmp/b" --resume auto; then
    kill -TERM $pid
    wait $pid; rc=$?
    [ $rc -eq 143 ] && grep -q "^resume: the evaluation due at step 2 is not in metrics.jsonl" "$tmp/b.log" &&
        grep -q "^scaletrain: stopped by SIGTERM before step 3 (during the evaluation of step 2's weights): nothing was trained or saved (the checkpoint it resumed from is as it was)" "$tmp/b.log" &&
        [ "$(ls "$tmp/b/ckpt" | grep -c '^step-')" -eq 1 ] && ! grep -q "^step 3/" "$tmp/b.log" ||
        fail "(b) a stop during the resumed run's first evaluation: exit $rc: $(grep -E "^resume|^step|stopped|error" "$tmp/b.log") ckpt: $(ls "$tmp/b/ckpt")"
    [ "$fails" -ne 0 ] || echo "(b) a stop during the resumed run's evaluation of step 2: exit 143, nothing trained or saved"
fi

# (c)
timeout 120 "$bin" "${args[@]}" --set train.steps=4 --set train.eval_every=2 --set train.out_dir="$tmp/ref" \
    >"$tmp/ref.log" 2>&1 || fail "(c) the uninterrupted run: $(tail -n 2 "$tmp/ref.log")"
timeout 120 "$bin" "${args[@]}" --set train.steps=4 --set train.eval_every=2 --set train.out_dir="$tmp/b" --resume auto \
    >"$tmp/c.log" 2>&1; rc=$?
want=$(evals "$tmp/ref/metrics.jsonl")
got=$(evals "$tmp/b/metrics.jsonl")
[ $rc -eq 0 ] && grep -q "^resume: the evaluation due at step 2 is not in metrics.jsonl" "$tmp/c.log" &&
    [ "$(grep -c "^eval at step 2:" "$tmp/c.log")" -eq 1 ] && [ -n "$want" ] && [ "$got" = "$want" ] ||
    fail "(c) the resumed run: exit $rc: $(grep -E "^resume|^eval|error" "$tmp/c.log"); evaluations $got, uninterrupted $want"
[ "$fails" -ne 0 ] || echo "(c) resumed: step 2's evaluation made first, its bits the uninterrupted run's ($got)"

# (i)
if [ -d "$tmp/a/ckpt/step-2" ]; then
    timeout 120 "$bin" "${args[@]}" --set train.steps=4 --set train.eval_every=2 --set train.out_dir="$tmp/i" \
        --resume "$tmp/a/ckpt/step-2" >"$tmp/i.log" 2>&1; rc=$?
    got=$(evals "$tmp/i/metrics.jsonl")
    [ $rc -eq 0 ] && grep -qE '"eval_owed":[[:space:]]*true' "$tmp/a/ckpt/step-2/state.json" &&
        grep -q "^resume: the evaluation due at step 2 was cut short in the run that saved its checkpoint: made first" "$tmp/i.log" &&
        "$bin" data inspect "$tmp/a/ckpt/step-2" | grep -q "^  the evaluation of step 2 was cut short" &&
        [ "$(grep -c "^eval at step 2:" "$tmp/i.log")" -eq 1 ] && [ -n "$want" ] && [ "$got" = "$want" ] ||
        fail "(i) resumed into another out_dir: exit $rc: $(grep -E "^resume|^eval|error" "$tmp/i.log"); evaluations $got, uninterrupted $want"
    timeout 120 "$bin" "${args[@]}" --set train.steps=4 --set train.eval_every=2 --set train.checkpoint_every=2 \
        --set train.out_dir="$tmp/i0" >"$tmp/i0.log" 2>&1 || fail "(i) the run of 4 steps: $(tail -n 2 "$tmp/i0.log")"
    timeout 120 "$bin" "${args[@]}" --set train.steps=4 --set train.eval_every=2 --set train.out_dir="$tmp/i2" \
        --resume "$tmp/i0/ckpt/step-2" >"$tmp/i2.log" 2>&1; rc=$?
    got2=$(evals "$tmp/i2/metrics.jsonl")
    [ $rc -eq 0 ] && ! grep -q "eval_owed" "$tmp/i0/ckpt/step-2/state.json" && ! grep -q "made first" "$tmp/i2.log" &&
        [ "${got2%%:*}" = 4 ] && [ "$(echo "$got2" | wc -w)" -eq 1 ] ||
        fail "(i) a checkpoint whose evaluation was not cut, resumed elsewhere: exit $rc: $(grep -E "^resume|^eval|error" "$tmp/i2.log"); evaluations $got2"
    [ "$fails" -ne 0 ] || echo "(i) resumed into another out_dir: the cut evaluation made first ($got); none where it was not cut"
fi

# (d)
if held d "$bin" "${args[@]}" --set train.steps=3 --set train.out_dir="$tmp/d"; then
    kill -TERM $pid
    wait $pid; rc=$?
    [ $rc -eq 143 ] &&
        grep -q "^scaletrain: stopped by SIGTERM during the final evaluation, after the last step (3); the final weights were written to $tmp/d/model.safetensors; --resume auto makes the evaluation" "$tmp/d.log" &&
        [ -s "$tmp/d/model.safetensors" ] && [ -z "$(evals "$tmp/d/metrics.jsonl")" ] ||
        fail "(d) a stop during the final evaluation: exit $rc: $(grep -E "^eval|stopped|saved|error" "$tmp/d.log")"
    # (stopped again, in the resumed run's evaluation of its last step: the same hint)
    if held d1 "$bin" "${args[@]}" --set train.steps=3 --set train.out_dir="$tmp/d" --resume auto; then
        kill -TERM $pid
        wait $pid; rc=$?
        [ $rc -eq 143 ] && grep -q "^scaletrain: stopped by SIGTERM during the final evaluation, after the last step (3); the final weights were written to $tmp/d/model.safetensors; --resume auto makes the evaluation" "$tmp/d1.log" ||
            fail "(d) a stop during the resumed run's final evaluation: exit $rc: $(grep -E "^eval|stopped|error" "$tmp/d1.log")"
    fi
    timeout 120 "$bin" "${args[@]}" --set train.steps=3 --set train.out_dir="$tmp/d" --resume auto >"$tmp/d2.log" 2>&1; rc=$?
    [ $rc -eq 0 ] && grep -q "^eval at step 3:" "$tmp/d2.log" && [ "$(evals "$tmp/d/metrics.jsonl" | wc -w)" -eq 1 ] ||
        fail "(d) --resume auto after it: exit $rc: $(tail -n 3 "$tmp/d2.log") evals: $(evals "$tmp/d/metrics.jsonl")"
    [ "$fails" -ne 0 ] || echo "(d) a stop during the final evaluation: the weights written, exit 143; --resume auto evaluated them"
fi

# (e)
if command -v mpirun >/dev/null 2>&1; then
    if held e "$bin" launch -n 2 "${args[@]}" --set train.steps=20 --set train.eval_every=2 --set train.out_dir="$tmp/e"; then
        kill -TERM $pid
        wait $pid; rc=$?
        [ $rc -eq 143 ] &&
            [ "$(grep -c "stopped by SIGTERM after step 2 of 20 (during its evaluation, which the resumed run makes first), checkpoint saved to $tmp/e/ckpt/step-2" "$tmp/e.log")" -eq 1 ] &&
            [ "$(cat "$tmp/e/ckpt/latest" 2>/dev/null)" = step-2 ] ||
            fail "(e) 2 ranks, a stop during the evaluation at step 2: exit $rc: $(grep -E "stopped|error" "$tmp/e.log")"
        timeout 120 "$bin" launch -n 2 "${args[@]}" --set train.steps=4 --set train.eval_every=2 --set train.out_dir="$tmp/e" \
            --resume auto >"$tmp/e2.log" 2>&1; rc=$?
        [ $rc -eq 0 ] && [ "$(evals "$tmp/e/metrics.jsonl" | wc -w)" -eq 2 ] &&
            [ "$(grep -c "^eval at step 2:" "$tmp/e2.log")" -eq 1 ] ||
            fail "(e) 2 ranks resumed: exit $rc: $(grep -E "^resume|^eval|error" "$tmp/e2.log") evals: $(evals "$tmp/e/metrics.jsonl")"
        [ "$fails" -ne 0 ] || echo "(e) 2 ranks: stopped during their shares of step 2's evaluation, exit 143; resumed, it was made first"
    fi
else
    echo "(e) skipped: no mpirun"
fi
# (h)
if command -v mpirun >/dev/null 2>&1; then
    SCALETRAIN_TEST_EVAL_MARK="$tmp/h.mark:3:1,$tmp/h.ahead:40:0" timeout -k 10 120 "$bin" launch -n 2 "${args[@]}" \
        --set train.steps=20 --set train.eval_every=2 --set train.out_dir="$tmp/h" >"$tmp/h.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 1200); do [ -e "$tmp/h.mark" ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.05; done
    r1=$(cat "$tmp/h.mark" 2>/dev/null) # (the pid of the rank that made it: rank 1)
    if [ -e "$tmp/h.mark" ] && [ -n "$r1" ]; then
        kill -TERM "$r1"
        wait $pid; rc=$?
        [ $rc -eq 143 ] && [ ! -e "$tmp/h.ahead" ] &&
            [ "$(grep -c "stopped by SIGTERM after step 2 of 20 (during its evaluation, which the resumed run makes first), checkpoint saved to $tmp/h/ckpt/step-2" "$tmp/h.log")" -eq 1 ] &&
            [ "$(cat "$tmp/h/ckpt/latest" 2>/dev/null)" = step-2 ] ||
            fail "(h) a stop of rank 1 alone during the evaluation: exit $rc, rank 0 at its batch 40: $([ -e "$tmp/h.ahead" ] && echo yes || echo no): $(grep -E "stopped|error" "$tmp/h.log")"
        [ "$fails" -ne 0 ] || echo "(h) a stop of rank 1 alone: rank 0 ended its share at their next agreement; exit 143, step 2 saved"
    else
        fail "(h) rank 1 never reached its evaluation's batch 3 (pid '$r1'): $(tail -n 3 "$tmp/h.log")"
        kill -KILL $pid 2>/dev/null
        wait $pid
    fi
fi

# (f) (on the emulated GPU a batch takes about 60 ms: 40 of them)
fb=1000
[ "${ST_STOP_EVAL_DEVICE:-cpu}" = cpu ] || fb=40
timeout 120 "$bin" train --set train.threads=1 --set data.num_workers=0 --set train.batch_size=8 --set train.steps=1 \
    --set train.eval_batch_size=4 --set train.eval_steps=$fb --set log.progress=on \
    --set train.device="${ST_STOP_EVAL_DEVICE:-cpu}" --set train.out_dir="$tmp/f" >"$tmp/f.log" 2>&1; rc=$?
tr '\r' '\n' <"$tmp/f.log" >"$tmp/f.lines"
[ $rc -eq 0 ] && grep -qE "^eval: [0-9]+/$fb batches \| [0-9]+:[0-9]{2}<[0-9]+:[0-9]{2}.\[K$" "$tmp/f.lines" &&
    grep -qE "^.\[Keval at step 1: loss [0-9.]+, accuracy [0-9.]+% \($((4 * fb)) of 10000 validation samples\)$" "$tmp/f.lines" ||
    fail "(f) an evaluation's progress: exit $rc: $(grep -a -E "eval" "$tmp/f.lines" | tail -n 3 | cat -v)"
[ "$fails" -ne 0 ] || echo "(f) an evaluation's progress on the bar: $(grep -c "^eval: " "$tmp/f.lines") redraws, erased before its line"
# (g)
ev=(eval "${args[@]:1}" --init "$tmp/ref/model.safetensors")
for n in 1 2; do
    if [ $n -eq 2 ] && ! command -v mpirun >/dev/null 2>&1; then echo "(g) 2 ranks skipped: no mpirun"; continue; fi
    if [ $n -eq 1 ]; then cmd=("$bin" "${ev[@]}"); else cmd=("$bin" launch -n 2 "${ev[@]}"); fi
    if held "g$n" "${cmd[@]}"; then
        kill -TERM $pid
        wait $pid; rc=$?
        [ $rc -eq 143 ] && [ "$(grep -c "scaletrain: stopped by SIGTERM during the evaluation (an evaluation writes nothing)$" "$tmp/g$n.log")" -eq 1 ] &&
            ! grep -q "^eval" "$tmp/g$n.log" ||
            fail "(g) eval on $n rank(s) stopped: exit $rc: $(tail -n 3 "$tmp/g$n.log")"
    fi
done
[ "$fails" -ne 0 ] || echo "(g) scaletrain eval stopped at its next batch, on 1 and 2 ranks: exit 143, said once"
e2e_finish "a stop during an evaluation ends it at its next batch; the resumed run makes it"
