#!/usr/bin/env bash
# Checkpoint and resume (DESIGN invariant 4), on one rank and on 2 (mpirun):
# - N steps (started with --resume auto and nothing to resume), then
#   --resume auto for N more (whose weights are not made before the
#   checkpoint's load), saves the same bytes as 2N steps in one go, for the
#   mlp (AdamW, dropout) and the cnn with batch-norm (SGD momentum, dropout,
#   loader threads). The schedule is constant with warmup
#   because a run of N steps has a different cosine schedule from one of 2N;
#   the SIGTERM case below checks a cosine run stopped in the middle.
# - train.keep_checkpoints deletes the older checkpoints; a leftover
#   temporary directory (a crash while saving) is ignored.
# - A damaged latest checkpoint (a truncated model.safetensors): --resume auto
#   falls back to the one before and says so; --resume DIR fails naming the file;
#   every checkpoint damaged, --resume auto fails and writes nothing.
# - Resumed at its last step: "done: nothing to train", exit 0, and --json
#   says "steps_run": 0 with null losses, rates and times (a resumed run that
#   trained says how many steps it ran).
# - SIGTERM mid-run: the run saves a checkpoint and exits 143; --resume auto
#   finishes it, with the same bytes as an uninterrupted run. Under mpirun,
#   SIGTERM to one rank stops both after the same step, with the same result;
#   started again without --resume, it is refused, nothing written.
# - The checkpoints moved away while a resume starts (after its first look,
#   which spared it the first weights), or there and unreadable (EIO): an
#   error, nothing written; a new run there with the folder unreadable
#   too; on one rank of two, every rank names it. --init with --resume: the
#   checkpoint's weights, --init not read (said).
# - A resume with train.seed, the data order or the optimizer's schedule
#   and decay changed says so with both values.
# - A resume from another folder's checkpoint into an out_dir holding a
#   third run's checkpoints: refused when that run is unfinished; a finished
#   one's set aside in ckpt.previous, its metrics not kept. A run that
#   finishes in out_dir while another sets up there (paused by
#   SCALETRAIN_TEST_PAUSE before it takes out_dir) is set aside too, under
#   the lock; where that one's --init lies in ckpt.previous, refused.
# - A new run in the out_dir of a finished one sets that run's checkpoints
#   aside in ckpt.previous (good, and resumable from there), saying so; a
#   run refused before it writes (its --init does not load, or its set-up
#   refuses its configuration) moves nothing.
# tests/run.sh: long (one of the suite's longest: started before the others)
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_fmnist
e2e_tmpdir
export OMP_WAIT_POLICY=PASSIVE
common=(--set train.threads=1 --set data.val= --set log.every=1 --set log.progress=off)
const=(--set optim.schedule=constant --set optim.warmup_steps=2)

# same NAME N ARGS...: 2N steps against N + resume N.
same() {
    local name=$1 n=$2; shift 2
    local d=$tmp/$name args=("${common[@]}" "${const[@]}" "$@" --quiet)
    timeout 60 "$bin" train "${args[@]}" --set train.steps=$((2 * n)) --set train.out_dir="$d/full" ||
        fail "$name: the 2N-step run"
    # (--resume auto with nothing to resume: the seed's weights, as without it)
    timeout 60 "$bin" train "${args[@]}" --set train.steps="$n" --set train.out_dir="$d/half" --resume auto ||
        fail "$name: the N-step run"
    timeout 60 "$bin" train "${args[@]}" --set train.steps=$((2 * n)) --set train.out_dir="$d/half" \
        --resume auto || fail "$name: the resumed run"
    if cmp "$d/full/model.safetensors" "$d/half/model.safetensors"; then
        echo "$name: N + resume N saves the same bytes as 2N steps"
    else
        fail "$name: resumed weights differ from the uninterrupted run"
    fi
}
mlp6=(--set model.type=mlp --set model.hidden=[64,32] --set model.dropout=0.1 --set train.batch_size=16
    --set data.num_workers=0)
same mlp 6 "${mlp6[@]}"
# another train.steps under a decaying schedule (cosine, the default): the
# rate at the checkpoint's step changes, said with both rates; a run that
# ended, extended, and one interrupted at step 3 of 6 resumed as 12; the
# constant schedule's resumes above said nothing
d=$tmp/decay
timeout 60 "$bin" train "${common[@]}" "${mlp6[@]}" --set train.steps=6 --set train.out_dir="$d" --quiet ||
    fail "decay: the 6-step run"
out=$(timeout 60 "$bin" train "${common[@]}" "${mlp6[@]}" --set train.steps=12 --set train.out_dir="$d" --resume auto \
    --quiet 2>&1) || fail "decay: resumed to 12: $out"
grep -qF "resume: warning: the checkpoint's run ended at step 6, its train.steps; optim.schedule cosine decays over this run's 12, so the learning rate goes from 0, where that run ended, to 0.0005 at step 6 (optim.schedule: constant trains on at one rate)" <<<"$out" ||
    fail "decay: a finished run extended: $out"
timeout 60 "$bin" train "${common[@]}" "${mlp6[@]}" --set train.steps=6 --set train.checkpoint_every=3 \
    --set train.out_dir="$d/cut" --quiet >/dev/null 2>&1 || fail "decay: the run to cut"
rm -rf "$d/cut/ckpt/step-6" && echo step-3 >"$d/cut/ckpt/latest"
out=$(timeout 60 "$bin" train "${common[@]}" "${mlp6[@]}" --set train.steps=12 --set train.out_dir="$d/cut" --resume auto \
    --quiet 2>&1) || fail "decay: resumed at 3 to 12: $out"
grep -qF "resume: warning: the checkpoint's run was set to 6 steps and this one to 12 (train.steps): optim.schedule cosine decays over train.steps, so the learning rate goes on from step 3 at 0.000853553, where that run's plan had 0.0005 (to follow its plan, resume with train.steps: 6; to train on at one rate, optim.schedule: constant)" <<<"$out" ||
    fail "decay: resumed at step 3 of 6 as 12: $out"
# (train.steps auto and train.epochs changed: said as the epochs, whose
# value follows the plan; 10 steps an epoch of batch 6000)
ep=(--set model.type=mlp --set model.hidden=[8] --set train.batch_size=6000 --set data.num_workers=0
    --set train.checkpoint_every=2)
# epochs_resume NAME STEPS CKPT WANT ADVICE: a run of train.steps STEPS (auto: its epoch) in $d/NAME,
# resumed from its ckpt/CKPT with train.epochs 2 into another out_dir: its warning holds WANT and ADVICE
epochs_resume() {
    local name=$1 steps=$2 from=$3 want=$4 advice=$5
    timeout 120 "$bin" train "${common[@]}" "${ep[@]}" --set train.steps="$steps" --set train.out_dir="$d/$name" \
        --quiet || fail "decay: the run $name"
    out=$(timeout 120 "$bin" train "${common[@]}" "${ep[@]}" --set train.epochs=2 --set train.out_dir="$d/$name.2" \
        --resume "$d/$name/ckpt/$from" --quiet 2>&1) || fail "decay: $name resumed with train.epochs 2: $out"
    grep -qF "$want" <<<"$out" && grep -qF "$advice" <<<"$out" || fail "decay: $name resumed with train.epochs 2: $out"
}
epochs_resume ep auto step-6 "resume: warning: the checkpoint's run was set to 10 steps (train.epochs 1) and this one to 20 (train.epochs 2, train.steps auto): optim.schedule cosine decays over train.steps, so the learning rate goes on from step 6 at" \
    "(to follow its plan, resume with train.epochs: 1; to train on at one rate, optim.schedule: constant)"
# (that run's train.steps set by hand, 12: the advice is its steps, not its epochs' 10)
epochs_resume ep12 12 step-10 "resume: warning: the checkpoint's run was set to 12 steps and this one to 20 (train.steps): " \
    "(to follow its plan, resume with train.steps: 12;"
# `latest` naming a step not there (the folder removed by hand): said so, not
# "damaged", and the newest good checkpoint taken
cp -r "$d/cut" "$d/stale" && echo step-50 >"$d/stale/ckpt/latest"
out=$(timeout 60 "$bin" train "${common[@]}" "${mlp6[@]}" --set train.steps=12 --set train.out_dir="$d/stale" --resume auto \
    2>&1) || fail "latest naming a step not there: $out"
grep -q "^resume: latest names step-50, which is not there" <<<"$out" &&
    grep -q "^resume: falling back to $d/stale/ckpt/step-12$" <<<"$out" ||
    fail "latest naming a step not there: $(grep -E "^resume" <<<"$out")"
# a checkpoint folder renamed by hand (step-012), `latest` naming it: every
# reader looks for a checkpoint by its step (step-12), so that is no
# checkpoint's name; said, with the name to give it, rather than a run
# started over beside it (or inspect calling step-12 damaged)
cp -r "$d/stale" "$d/zero" && mv "$d/zero/ckpt/step-12" "$d/zero/ckpt/step-012" && rm -rf "$d/zero/ckpt/step-"[0-9] &&
    echo step-012 >"$d/zero/ckpt/latest"
out=$(timeout 60 "$bin" train "${common[@]}" "${mlp6[@]}" --set train.steps=14 --set train.out_dir="$d/zero" --resume auto \
    2>&1) && fail "latest naming step-012 ran: $out"
grep -qF "error: $d/zero/ckpt/latest names step-012, which is not a checkpoint's name (step-N, N as scaletrain writes it: no sign or leading zero): rename that folder step-12 and write that name into $d/zero/ckpt/latest (nothing was written)" <<<"$out" &&
    [ "$(ls "$d/zero/ckpt")" = "$(printf 'latest\nstep-012')" ] || fail "latest naming step-012: $out; $(ls "$d/zero/ckpt")"
# (a new run there, without --resume: the same refusal, where it would have
# trained beside the folder and overwritten latest)
out=$(timeout 60 "$bin" train "${common[@]}" "${mlp6[@]}" --set train.steps=14 --set train.out_dir="$d/zero" 2>&1) &&
    fail "a new run over latest naming step-012 ran: $out"
grep -qF "error: $d/zero/ckpt/latest names step-012, which is not a checkpoint's name" <<<"$out" &&
    [ "$(ls "$d/zero/ckpt")" = "$(printf 'latest\nstep-012')" ] && [ "$(cat "$d/zero/ckpt/latest")" = step-012 ] ||
    fail "a new run over latest naming step-012: $out; $(ls "$d/zero/ckpt")"
out=$("$bin" data inspect "$d/zero" 2>&1)
grep -q "0 checkpoint(s), newest first; latest -> step-012" <<<"$out" && ! grep -q "step-12 " <<<"$out" ||
    fail "inspect of a folder named step-012: $out"
# (with --quiet, a resume with nothing to train says so on standard error: its weights are the checkpoint's)
out=$(timeout 60 "$bin" train "${common[@]}" "${mlp6[@]}" --set train.steps=6 --set train.out_dir="$d/stale" --resume auto \
    --quiet 2>&1 >/dev/null) || fail "nothing to train, quiet: $out"
grep -qx "scaletrain: note: nothing to train: the checkpoint is at step 12 of train.steps 6 (raise train.steps to train on); model.safetensors holds its weights" <<<"$out" ||
    fail "nothing to train, quiet: $out"
# (inspect of good checkpoints whose `latest` names one in a form --resume and --init refuse: refused
# there too, exit 1, where it said they "take the newest good one"; a `latest` naming a folder that is
# not there: said, and the one they fall back to named)
cp -r "$d/stale" "$d/badlatest" && cp -r "$d/badlatest/ckpt/step-12" "$d/badlatest/ckpt/step-012" &&
    echo step-012 >"$d/badlatest/ckpt/latest"
out=$("$bin" data inspect "$d/badlatest/ckpt" 2>&1) && fail "inspect of latest naming step-012 beside good checkpoints: exit 0: $out"
grep -qF "error: --resume and --init refuse this folder: $d/badlatest/ckpt/latest names step-012, which is not a checkpoint's name" <<<"$out" ||
    fail "inspect of latest naming step-012 beside good checkpoints: $out"
rm -r "$d/badlatest/ckpt/step-012" && echo step-999 >"$d/badlatest/ckpt/latest"
out=$("$bin" data inspect "$d/badlatest/ckpt" 2>&1) && grep -q "latest -> step-999 (not there)$" <<<"$out" &&
    grep -qx "  --resume auto and --init take $d/badlatest/ckpt/step-12" <<<"$out" ||
    fail "inspect of latest naming a folder that is not there: $out"
# (final weights cut short beside good checkpoints: inspect said the out_dir was whole, --init of it
# failed on them; now DAMAGED, exit 1, and the checkpoint folder to give --init instead)
echo step-12 >"$d/badlatest/ckpt/latest" && truncate -s 100 "$d/badlatest/model.safetensors"
out=$("$bin" data inspect "$d/badlatest" 2>&1) && fail "inspect of damaged final weights: exit 0: $out"
grep -qF "error: the final weights are DAMAGED: $d/badlatest/model.safetensors: " <<<"$out" &&
    grep -qF "give --init $d/badlatest/ckpt (its latest good checkpoint) instead" <<<"$out" ||
    fail "inspect of damaged final weights: $out"
# --resume naming a run's out_dir, its checkpoint folder or `latest` (another
# run's, into a new out_dir): that run's latest good checkpoint, as auto takes
# its own; the same bytes as 12 steps in one go.
args=("${common[@]}" "${const[@]}" "${mlp6[@]}")
timeout 60 "$bin" train "${args[@]}" --quiet --set train.steps=6 --set train.out_dir="$tmp/from" || fail "from: 6 steps"
for from in "$tmp/from" "$tmp/from/ckpt" "$tmp/from/ckpt/latest"; do
    rm -rf "$tmp/into"
    out=$(timeout 60 "$bin" train "${args[@]}" --set train.steps=12 --set train.out_dir="$tmp/into" \
        --resume "$from" 2>&1) || fail "--resume $from: $out"
    grep -q "resumed from $tmp/from/ckpt/step-6 at step 6" <<<"$out" || fail "--resume $from: not from step-6"
    ! grep -q "resume: warning" <<<"$out" || fail "--resume $from: a warning with nothing changed: $out"
    cmp -s "$tmp/mlp/full/model.safetensors" "$tmp/into/model.safetensors" &&
        echo "--resume $from: 6 + 6 steps into a new out_dir, the same bytes as 12" ||
        fail "--resume $from: the weights differ from 12 steps in one go"
done
# a newest checkpoint written by a newer scaletrain (its state.json's format_version past this build's):
# not damage. --resume auto stops at it, nothing moved or written (it was passed over for the one before
# and set aside as abandoned: an older build rewound a newer build's run)
cp -r "$tmp/from" "$tmp/newer"
/usr/bin/python3 -c 'import json, sys; p = sys.argv[1]; d = json.load(open(p)); d["format_version"] += 1; json.dump(d, open(p, "w"))' \
    "$tmp/newer/ckpt/step-6/state.json"
before=$(cd "$tmp/newer" && find . | sort)
out=$(timeout 60 "$bin" train "${args[@]}" --set train.steps=12 --set train.out_dir="$tmp/newer" --resume auto 2>&1) &&
    fail "--resume auto past a newer build's checkpoint ran"
grep -qF "step-6 is not passed over (nothing was moved or written): $tmp/newer/ckpt/step-6/state.json: format_version" <<<"$out" &&
    grep -qF "written by a newer scaletrain" <<<"$out" || fail "a newer build's checkpoint: $out"
[ "$(cd "$tmp/newer" && find . | sort)" = "$before" ] || fail "a newer build's checkpoint: moved $(ls -R "$tmp/newer")"
# a save's temporary folder named by hand (step-N.tmp.PID, never committed): taken, with a warning, by
# --resume, --init and data inspect (they said nothing)
cp -r "$tmp/from/ckpt/step-6" "$tmp/from/ckpt/step-6.tmp.999"
rm -rf "$tmp/tmpfrom"
out=$(timeout 60 "$bin" train "${args[@]}" --set train.steps=12 --set train.out_dir="$tmp/tmpfrom" \
    --resume "$tmp/from/ckpt/step-6.tmp.999" 2>&1) || fail "--resume of a temporary folder: $out"
grep -qF "resume: warning: $tmp/from/ckpt/step-6.tmp.999 is a save that was never committed" <<<"$out" ||
    fail "--resume of a temporary folder: no warning: $out"
"$bin" data inspect "$tmp/from/ckpt/step-6.tmp.999" 2>&1 >/dev/null | grep -qF "is a save that was never committed" ||
    fail "data inspect of a temporary folder: no warning"
rm -rf "$tmp/from/ckpt/step-6.tmp.999"
# ckpt/latest a folder (made by hand): refused at the start (the run trained, then failed at its first save)
cp -r "$tmp/from" "$tmp/latestdir" && rm "$tmp/latestdir/ckpt/latest" && mkdir "$tmp/latestdir/ckpt/latest"
out=$(timeout 60 "$bin" train "${args[@]}" --set train.steps=12 --set train.out_dir="$tmp/latestdir" --resume auto 2>&1) &&
    fail "a folder as ckpt/latest: the run went on"
grep -qF "error: $tmp/latestdir/ckpt/latest is a folder, where scaletrain keeps a file naming the latest checkpoint" <<<"$out" &&
    ! grep -q "^step " <<<"$out" || fail "a folder as ckpt/latest: $out"
# --resume naming another folder's checkpoint, into an out_dir that holds a
# third run's checkpoints: those are not the resumed run's. An unfinished
# run's refuse it, naming both, nothing written; a finished run's are set
# aside in ckpt.previous as for a new run (not moved to ckpt.abandoned as the
# resumed run's own later steps, with `latest` removed), and its
# metrics.jsonl is not kept as the resumed run's first steps.
timeout 60 "$bin" train "${args[@]}" --quiet --set train.steps=4 --set train.checkpoint_every=2 \
    --set train.out_dir="$tmp/third" || fail "third: 4 steps"
rm -r "$tmp/third/ckpt/step-4" && echo step-2 >"$tmp/third/ckpt/latest" # (stopped at step 2 of 4)
tree() { (cd "$1" && find . | sort && find . -type f -exec md5sum {} + | sort); }
before=$(tree "$tmp/third")
out=$(timeout 60 "$bin" train "${args[@]}" --set train.steps=12 --set train.out_dir="$tmp/third" \
    --resume "$tmp/from/ckpt/step-6" 2>&1) && fail "--resume into an out_dir holding another, unfinished run ran"
grep -qF "error: --resume continues the run of $tmp/from/ckpt, but train.out_dir $tmp/third holds another, unfinished run: its latest good checkpoint, $tmp/third/ckpt/step-2, is at step 2 of 4, and the two runs' checkpoints would mix. Give the resumed run another train.out_dir; or continue that run with --resume auto, or remove $tmp/third/ckpt (nothing was written)" <<<"$out" ||
    fail "--resume into an out_dir holding another, unfinished run: no clear refusal: $out"
[ "$(tree "$tmp/third")" = "$before" ] ||
    fail "--resume into an out_dir holding another, unfinished run changed it: $(ls -R "$tmp/third")"
cp -r "$tmp/mlp/full" "$tmp/done" # (12 steps, finished; its metrics from step 1)
out=$(timeout 60 "$bin" train "${args[@]}" --set train.steps=12 --set train.out_dir="$tmp/done" \
    --resume "$tmp/from" 2>&1) || fail "--resume into a finished run's out_dir: $out"
grep -qF "scaletrain: warning: train.out_dir $tmp/done holds a finished run (the latest checkpoint at step 12): its checkpoints are now in $tmp/done/ckpt.previous (replacing any there before); this run starts from step 6" <<<"$out" ||
    fail "--resume into a finished run's out_dir: its checkpoints not set aside, said: $out"
! grep -q "abandoned" <<<"$out" && [ ! -e "$tmp/done/ckpt.abandoned" ] && [ -d "$tmp/done/ckpt.previous/step-12" ] &&
    [ "$(cat "$tmp/done/ckpt/latest")" = step-12 ] || fail "--resume into a finished run's out_dir: $(ls -R "$tmp/done")"
first=$(head -1 "$tmp/done/metrics.jsonl" | /usr/bin/python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["step"])')
[ "$first" = 7 ] || fail "--resume into a finished run's out_dir: its metrics.jsonl starts at step $first, not 7"
cmp -s "$tmp/mlp/full/model.safetensors" "$tmp/done/model.safetensors" &&
    echo "--resume from another folder into a third run's out_dir: an unfinished one refuses it; a finished one's checkpoints set aside, its metrics not kept" ||
    fail "--resume into a finished run's out_dir: the weights differ from 12 steps in one go"
# (from its own ckpt.previous, with a finished run in ckpt: setting that one
# aside would replace the checkpoint resumed from)
before=$(tree "$tmp/done")
out=$(timeout 60 "$bin" train "${args[@]}" --set train.steps=14 --set train.out_dir="$tmp/done" \
    --resume "$tmp/done/ckpt.previous" 2>&1) && fail "--resume from ckpt.previous over a finished run ran"
grep -qF "error: --resume $tmp/done/ckpt.previous names a checkpoint in $tmp/done/ckpt.previous, but train.out_dir $tmp/done holds a finished run's checkpoints (in $tmp/done/ckpt), which would be set aside there in its place, removing it: move $tmp/done/ckpt.previous elsewhere and name it there, or give this run another train.out_dir (nothing was written)" <<<"$out" &&
    [ "$(tree "$tmp/done")" = "$before" ] || fail "--resume from ckpt.previous over a finished run: $out"
# (--init of a checkpoint there, which a new run would remove as it set the
# finished run aside: the same refusal, where it read it and removed it)
out=$(timeout 60 "$bin" train "${args[@]}" --set train.steps=14 --set train.out_dir="$tmp/done" \
    --init "$tmp/done/ckpt.previous/step-12/" 2>&1) && fail "--init from ckpt.previous over a finished run ran"
grep -qF "error: --init $tmp/done/ckpt.previous/step-12/ names a checkpoint in $tmp/done/ckpt.previous, but train.out_dir $tmp/done holds a finished run's checkpoints (in $tmp/done/ckpt)" <<<"$out" &&
    [ "$(tree "$tmp/done")" = "$before" ] || fail "--init from ckpt.previous over a finished run: $out"
# A run that finishes in out_dir while another sets up there (before that
# one holds run.lock: SCALETRAIN_TEST_PAUSE stops it just before it takes
# out_dir, until the first is done): looked at again under the lock, its
# checkpoints set aside in ckpt.previous with the usual warning; and where
# the waiting run's --init lies in ckpt.previous, the same refusal as above.
# gap NAME INIT...: the paused run in $tmp/NAME (output $tmp/NAME.log, exit $rc), with a
# 2-step run finished there while it waited
gap() {
    local name=$1
    shift
    SCALETRAIN_TEST_PAUSE="out_dir:$tmp/$name.mark" timeout -k 10 120 "$bin" train "${args[@]}" \
        --set train.steps=2 --set train.out_dir="$tmp/$name" "$@" >"$tmp/$name.log" 2>&1 &
    local w=$! p=""
    for _ in $(seq 1 1200); do [ -e "$tmp/$name.mark" ] && break; kill -0 $w 2>/dev/null || break; sleep 0.05; done
    p=$(cat "$tmp/$name.mark" 2>/dev/null)
    [ -n "$p" ] || fail "gap $name: the run never reached its pause: $(tail -n 3 "$tmp/$name.log")"
    timeout 60 "$bin" train "${args[@]}" --set train.steps=2 --set train.out_dir="$tmp/$name" --quiet \
        >"$tmp/$name.other" 2>&1 || fail "gap $name: the run between: $(tail -n 3 "$tmp/$name.other")"
    [ -n "$p" ] && kill -CONT "$p"
    wait $w
    rc=$?
}
mkdir -p "$tmp/gap1"
gap gap1
[ $rc -eq 0 ] && grep -q "warning: train.out_dir $tmp/gap1 holds a finished run (the latest checkpoint at step 2): its checkpoints are now in $tmp/gap1/ckpt.previous" "$tmp/gap1.log" &&
    [ -d "$tmp/gap1/ckpt.previous/step-2" ] && [ -d "$tmp/gap1/ckpt/step-2" ] ||
    fail "a run finished in out_dir while another set up: exit $rc: $(grep -E "warning|error" "$tmp/gap1.log"); $(ls "$tmp/gap1" "$tmp/gap1/ckpt.previous" 2>&1 | tr '\n' ' ')"
mkdir -p "$tmp/gap2/ckpt.previous"
cp -r "$tmp/done/ckpt.previous/step-12" "$tmp/gap2/ckpt.previous/"
gap gap2 --init "$tmp/gap2/ckpt.previous/step-12/"
[ $rc -eq 1 ] && grep -qF "error: --init $tmp/gap2/ckpt.previous/step-12/ names a checkpoint in $tmp/gap2/ckpt.previous, but train.out_dir $tmp/gap2 holds a finished run's checkpoints (in $tmp/gap2/ckpt)" "$tmp/gap2.log" &&
    [ -d "$tmp/gap2/ckpt.previous/step-12" ] && [ -d "$tmp/gap2/ckpt/step-2" ] ||
    fail "--init from ckpt.previous while a run finished in out_dir: exit $rc: $(grep -E "warning|error" "$tmp/gap2.log"); $(ls "$tmp/gap2/ckpt.previous" 2>&1)"
[ "$fails" -ne 0 ] || echo "a run that finished in out_dir while another set up: set aside under the lock; --init from ckpt.previous then refused"
# --init of a run's out_dir: its final weights, unless a checkpoint there is
# newer (a later run, resumed past the end and stopped, or started over it
# and not finished: final weights older than it, made so here by their mtime)
ev=(--set data.val=/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz --set train.eval_steps=1)
out=$(timeout 60 "$bin" eval "${args[@]}" "${ev[@]}" --init "$tmp/from" 2>&1) || fail "eval --init from: $out"
grep -q "^weights: $tmp/from/model.safetensors" <<<"$out" || fail "eval --init from: $(grep weights <<<"$out")"
cp -r "$tmp/from" "$tmp/stale" && touch -d '1 hour ago' "$tmp/stale/model.safetensors"
out=$(timeout 60 "$bin" eval "${args[@]}" "${ev[@]}" --init "$tmp/stale" 2>&1) || fail "eval --init stale: $out"
grep -q "^--init: $tmp/stale/model.safetensors is older than the checkpoint $tmp/stale/ckpt/step-6 (a later run there): taking the checkpoint" <<<"$out" &&
    grep -q "^weights: $tmp/stale/ckpt/step-6/model.safetensors" <<<"$out" ||
    fail "eval --init of an out_dir whose final weights are older than its checkpoint: $out"
# (final weights cut short by the storage: the latest checkpoint, said; it was an error)
cp -r "$tmp/from" "$tmp/cut" && truncate -s 1000 "$tmp/cut/model.safetensors"
out=$(timeout 60 "$bin" eval "${args[@]}" "${ev[@]}" --init "$tmp/cut" 2>&1) || fail "eval --init cut: $out"
grep -q "^--init: the final weights are damaged ($tmp/cut/model.safetensors: .*): taking the latest checkpoint, $tmp/cut/ckpt/step-6$" <<<"$out" &&
    grep -q "^weights: $tmp/cut/ckpt/step-6/model.safetensors" <<<"$out" ||
    fail "eval --init of an out_dir whose final weights are cut short: $out"
[ "$fails" -ne 0 ] || echo "--init of an out_dir: its final weights, or a newer checkpoint there, or one where they are damaged"

# The data order changed on resume (train.seed, data.shuffle,
# data.drop_last): the position counts batches of the old order, so the run
# says so; its own checkpoints record its values, and resuming from them
# with the same values says nothing.
rm -rf "$tmp/into"
changed=(--set data.shuffle=false --set train.seed=5)
out=$(timeout 60 "$bin" train "${args[@]}" --set train.steps=8 --set train.out_dir="$tmp/into" \
    --resume "$tmp/from" "${changed[@]}" 2>&1) || fail "--resume with data.shuffle changed: $out"
grep -q "resume: warning: the checkpoint was written with data.shuffle true and data.drop_last true; this run has false and true: .*resume with the same values to continue it" <<<"$out" &&
    grep -q "resume: warning: the checkpoint was written with train.seed 1; this run has 5" <<<"$out" ||
    fail "--resume with data.shuffle and train.seed changed: no warnings: $out"
out=$(timeout 60 "$bin" train "${args[@]}" --set train.steps=10 --set train.out_dir="$tmp/into" \
    --resume auto "${changed[@]}" 2>&1) || fail "--resume of the changed run: $out"
! grep -q "resume: warning" <<<"$out" || fail "--resume of the changed run with its own values warned: $out"
echo "--resume with data.shuffle and train.seed changed: said; the run's checkpoints record its values"
# The rest of what shapes the trajectory (the schedule's warmup, the
# optimizer's decay, ...) changed on resume: said with both values (a
# warmup raised past the step put the run back into warmup unsaid)
rm -rf "$tmp/into"
out=$(timeout 60 "$bin" train "${args[@]}" --set train.steps=8 --set train.out_dir="$tmp/into" --resume "$tmp/from" \
    --set optim.warmup_steps=7 --set optim.weight_decay=0.05 --set data.augment_flip=true 2>&1) ||
    fail "--resume with the warmup changed: $out"
grep -qF "resume: warning: the checkpoint's run trained with other settings (its value -> this run's): optim.warmup_steps 2 -> 7; optim.weight_decay 0 -> 0.05; data.augment_flip false -> true; from step 6 on this run trains differently from the interrupted one (resume with its values to continue it)" <<<"$out" ||
    fail "--resume with optim.warmup_steps, optim.weight_decay and data.augment_flip changed: $out"
# In deterministic mode another micro-batch is said too (its bits are the
# mode's promise, and auto picks it by the rank count: 48 on 1 rank, 16 on
# 3); elsewhere it only rounds otherwise, and is not
for det in true false; do
    rm -rf "$tmp/det"
    timeout 60 "$bin" train "${args[@]}" --quiet --set dist.deterministic=$det --set train.batch_size=16 \
        --set train.steps=4 --set train.checkpoint_every=2 --set train.out_dir="$tmp/det" || fail "deterministic $det: the run"
    out=$(timeout 60 "$bin" train "${args[@]}" --set dist.deterministic=$det --set train.batch_size=16 \
        --set train.micro_batch_size=8 --set train.steps=4 --set train.out_dir="$tmp/det" --resume "$tmp/det/ckpt/step-2" 2>&1) ||
        fail "deterministic $det: the resume: $out"
    if [ $det = true ]; then
        grep -qF "(its value -> this run's): train.micro_batch_size 16 -> 8; from step 2 on" <<<"$out" ||
            fail "deterministic: another micro-batch on resume not said: $out"
    else
        ! grep -q "train.micro_batch_size 16 -> 8" <<<"$out" || fail "not deterministic: another micro-batch said: $out"
    fi
done
out=$(timeout 60 "$bin" train "${args[@]}" --quiet --set train.steps=12 --set train.out_dir="$tmp/into" \
    --resume "$tmp" 2>&1) && fail "--resume of a directory without checkpoints ran"
grep -q "not a checkpoint: --resume takes auto" <<<"$out" || fail "--resume $tmp: no clear error: $out"
out=$(timeout 60 "$bin" train "${args[@]}" --quiet --set train.steps=12 --set train.out_dir="$tmp/into" \
    --resume "$tmp/no-such-run" 2>&1) && fail "--resume of a path that does not exist ran"
grep -qF "$tmp/no-such-run: does not exist: --resume takes auto" <<<"$out" || fail "--resume of a missing path: $out"
same cnn 4 --set model.type=cnn --set model.channels=[4,8] --set model.pool=[1,1] --set model.dropout=0.1 \
    --set optim.type=sgd --set train.batch_size=8 --set data.num_workers=2

# Under DDP (2 ranks, rank 0 saves, both load): the same bytes as well.
if command -v mpirun >/dev/null; then
    d=$tmp/ddp
    e2e_mpi 60
    mpi+=(-np 2)
    args=("${common[@]}" "${const[@]}" --quiet --set model.type=mlp --set model.hidden=[64,32] --set model.dropout=0.1
        --set train.batch_size=16 --set data.num_workers=0 --set dist.timeout_s=30)
    "${mpi[@]}" "$bin" train "${args[@]}" --set train.steps=8 --set train.out_dir="$d/full" || fail "ddp: 8 steps"
    "${mpi[@]}" "$bin" train "${args[@]}" --set train.steps=4 --set train.out_dir="$d/half" || fail "ddp: 4 steps"
    "${mpi[@]}" "$bin" train "${args[@]}" --set train.steps=8 --set train.out_dir="$d/half" --resume auto ||
        fail "ddp: the resumed run"
    cmp "$d/full/model.safetensors" "$d/half/model.safetensors" && echo "ddp: 4 + resume 4 = 8 steps, same bytes" ||
        fail "ddp: resumed weights differ"
    # SIGTERM to one rank only: both stop after the same step (the flag is
    # all-reduced), rank 0 saves, and a 2-rank resume gives the same bytes.
    big=("${common[@]}" --set model.type=mlp --set model.hidden=[256,256] --set train.batch_size=16
        --set data.num_workers=0 --set model.dropout=0.1 --set train.steps=1500 --set dist.timeout_s=30)
    "${mpi[@]}" "$bin" train "${big[@]}" --quiet --set train.out_dir="$d/tfull" || fail "ddp: the full cosine run"
    "${mpi[@]}" "$bin" train "${big[@]}" --set train.out_dir="$d/term" >"$d.term.log" 2>&1 &
    pid=$! # timeout, whose child is mpirun, whose children are the ranks
    for _ in $(seq 1 600); do
        grep -q "^step 5/" "$d.term.log" 2>/dev/null && break
        kill -0 $pid 2>/dev/null || break
        sleep 0.05
    done
    one=$(pgrep -P "$(pgrep -P $pid | head -n 1)" | tail -n 1) # the last rank started
    [ -n "$one" ] && kill -TERM "$one"
    wait $pid; rc=$?
    [ $rc -eq 143 ] || fail "ddp: SIGTERM to one rank: mpirun exit $rc, expected 143"
    latest=$(cat "$d/term/ckpt/latest" 2>/dev/null)
    [ -n "$latest" ] || fail "ddp: SIGTERM left no checkpoint"
    "${mpi[@]}" "$bin" train "${big[@]}" --quiet --set train.out_dir="$d/term" --resume auto ||
        fail "ddp: resume after SIGTERM"
    cmp "$d/tfull/model.safetensors" "$d/term/model.safetensors" &&
        echo "ddp: SIGTERM to one rank at $latest + resume: same bytes" || fail "ddp: SIGTERM + resume differs"
else
    echo "ddp part skipped: mpirun is missing"
fi

# The checkpoints moved away after the run's first look, which spared it
# the first weights, and before its read (tests/lib/vanish.c renames ckpt as
# `latest` is opened): an error, nothing written in out_dir (starting over
# would set them aside once they are back).
cc -shared -fPIC -O2 -o "$tmp/vanish.so" tests/lib/vanish.c -ldl || fail "cannot build tests/lib/vanish.c"
d=$tmp/vanish
args=("${common[@]}" "${const[@]}" "${mlp6[@]}" --quiet --set train.steps=6)
loud=()
for a in "${args[@]}"; do [ "$a" = --quiet ] || loud+=("$a"); done
timeout 60 "$bin" train "${args[@]}" --set train.steps=3 --set train.out_dir="$d/run" || fail "vanish: 3 steps"
cp "$d/run/model.safetensors" "$d/run.safetensors"
cp "$d/run/metrics.jsonl" "$d/run.metrics.jsonl"
out=$(LD_PRELOAD="$tmp/vanish.so" ST_VANISH_MATCH=/ckpt/latest timeout 60 "$bin" train "${args[@]}" \
    --set train.out_dir="$d/run" --resume auto 2>&1) && fail "vanish: the resume went on: $out"
grep -q "^vanish: moved $d/run/ckpt to" <<<"$out" || fail "vanish: the shim moved nothing: $out"
grep -q "error: resume: --resume auto named a checkpoint in $d/run/ckpt when the run started, and none is there now (moved or removed since, or the folder could not be listed); nothing was written" <<<"$out" ||
    fail "vanish: the resume did not say the checkpoint went away: $out"
cmp -s "$d/run/model.safetensors" "$d/run.safetensors" && cmp -s "$d/run/metrics.jsonl" "$d/run.metrics.jsonl" &&
    [ ! -e "$d/run/ckpt" ] || fail "vanish: the failed resume wrote in out_dir: $(ls "$d/run")"
echo "checkpoints gone between the first look and the read: an error, nothing written"
# The checkpoint folder there but unreadable (opendir fails with EIO): an
# error naming it, nothing written, where it was taken for an empty folder
# and the run started over.
mv "$d/run/ckpt.gone" "$d/run/ckpt"
out=$(LD_PRELOAD="$tmp/vanish.so" ST_VANISH_EIO=/run/ckpt timeout 60 "$bin" train "${args[@]}" \
    --set train.out_dir="$d/run" --resume auto 2>&1) && fail "eio: the resume went on: $out"
grep -q "cannot list the checkpoint folder $d/run/ckpt: Input/output error" <<<"$out" ||
    fail "eio: the error does not name the folder: $out"
cmp -s "$d/run/model.safetensors" "$d/run.safetensors" && cmp -s "$d/run/metrics.jsonl" "$d/run.metrics.jsonl" &&
    [ "$(ls "$d/run/ckpt")" = "$(printf 'latest\nstep-3')" ] || fail "eio: the failed resume wrote in out_dir"
# A new run there (no --resume) cannot see them either: the same error,
# where it took the folder for empty, saved beside the checkpoints there
# and would prune them as its own once the folder listed again.
out=$(LD_PRELOAD="$tmp/vanish.so" ST_VANISH_EIO=/run/ckpt timeout 60 "$bin" train "${args[@]}" \
    --set train.out_dir="$d/run" 2>&1) && fail "eio: the new run went on: $out"
grep -q "cannot list the checkpoint folder $d/run/ckpt: Input/output error (check its permissions and its file system, then try again)\. A new run in train.out_dir $d/run would save beside the checkpoints there that it cannot see, and prune them as its own (nothing was written)" <<<"$out" ||
    fail "eio: the new run's error does not name the folder and why: $out"
cmp -s "$d/run/model.safetensors" "$d/run.safetensors" && cmp -s "$d/run/metrics.jsonl" "$d/run.metrics.jsonl" &&
    [ "$(ls "$d/run/ckpt")" = "$(printf 'latest\nstep-3')" ] && [ ! -e "$d/run/ckpt.previous" ] ||
    fail "eio: the refused new run wrote in out_dir: $(ls "$d/run")"
echo "a checkpoint folder that cannot be listed: an error naming it for a resume and a new run, nothing written"
# ... on one rank of two: every rank names that rank and its error (the
# others, which listed it, said the ranks looked at different checkpoints,
# and sent the user to a shared folder that was fine), each its own line,
# agreed (the ranks ended by MPI_Abort before 41ca76b)
if command -v mpirun >/dev/null && [ -d "$tmp/ddp/half/ckpt" ]; then
    e2e_mpi 60
    out=$(LD_PRELOAD="$tmp/vanish.so" ST_VANISH_EIO=/half/ckpt ST_VANISH_RANK=1 "${mpi[@]}" -np 2 "$bin" train \
        "${common[@]}" "${const[@]}" --quiet --set model.type=mlp --set model.hidden=[64,32] --set model.dropout=0.1 \
        --set train.batch_size=16 --set data.num_workers=0 --set dist.timeout_s=30 --set train.steps=8 \
        --set train.out_dir="$tmp/ddp/half" --resume auto 2>&1) && fail "eio on rank 1: the resume went on: $out"
    grep -q "error (rank 0): .*rank 1: cannot list the checkpoint folder $tmp/ddp/half/ckpt: Input/output error" <<<"$out" &&
        grep -q "error (rank 1): cannot list the checkpoint folder $tmp/ddp/half/ckpt: Input/output error" <<<"$out" &&
        ! grep -q "do not look at the same checkpoint\|MPI_ABORT\|aborting every rank" <<<"$out" ||
        fail "eio on rank 1: the ranks do not name rank 1's error: $out"
    echo "a checkpoint folder that rank 1 alone cannot list: every rank names rank 1's error"
fi
# The newest checkpoint there but its file unread by the storage (open fails
# with EIO): an error naming it, not passed over for the older one (which
# resumed 2 steps back and moved the newest aside as abandoned); nothing
# moved or written, and the resume once the file reads takes it. A new run
# there is refused the same way (it set them aside as a finished run's).
r=$d/rd
timeout 60 "$bin" train "${args[@]}" --set train.steps=4 --set train.checkpoint_every=2 --set train.out_dir="$r" ||
    fail "read eio: 4 steps"
before=$(ls "$r" "$r/ckpt")
out=$(LD_PRELOAD="$tmp/vanish.so" ST_VANISH_READ_EIO=/ckpt/step-4/model.safetensors timeout 60 "$bin" train \
    "${loud[@]}" --set train.checkpoint_every=2 --set train.out_dir="$r" --resume auto 2>&1) &&
    fail "read eio: the resume went on: $out"
grep -q "error: resume: $r/ckpt/step-4 could not be read (the storage, not the checkpoint: it was not passed over, and nothing was moved or written; try again once the storage reads): $r/ckpt/step-4/model.safetensors: cannot open: Input/output error" <<<"$out" ||
    fail "read eio: the resume's error does not name the file and the storage: $out"
[ "$(ls "$r" "$r/ckpt")" = "$before" ] && ! grep -q "falling back" <<<"$out" ||
    fail "read eio: the resume fell back or moved something: $(ls "$r" "$r/ckpt"): $out"
out=$(LD_PRELOAD="$tmp/vanish.so" ST_VANISH_READ_EIO=/ckpt/step-4/model.safetensors timeout 60 "$bin" train \
    "${args[@]}" --set train.steps=4 --set train.out_dir="$r" 2>&1) && fail "read eio: the new run went on: $out"
grep -q "A new run in train.out_dir $r would set aside checkpoints it could not read, which may be an unfinished run's (nothing was written)" <<<"$out" ||
    fail "read eio: the new run's error: $out"
[ "$(ls "$r" "$r/ckpt")" = "$before" ] || fail "read eio: the refused new run moved something: $(ls "$r" "$r/ckpt")"
out=$(timeout 60 "$bin" train "${loud[@]}" --set train.checkpoint_every=2 --set train.out_dir="$r" --resume auto 2>&1) ||
    fail "read eio: the resume once the file reads: $out"
grep -q "^resumed from $r/ckpt/step-4 at step 4$" <<<"$out" || fail "read eio: not resumed from step-4: $out"
echo "a checkpoint file the storage does not read: an error naming it, nothing passed over or moved; then resumed from it"
# A save that fails after its commit (the folder renamed into place; then
# `latest` is not written): the error says the checkpoint is whole and the
# resume takes it (it said "was not saved"), and --resume auto does.
r=$d/lt
out=$(LD_PRELOAD="$tmp/vanish.so" ST_VANISH_WRITE_EIO=/ckpt/latest.tmp timeout 60 "$bin" train "${args[@]}" \
    --set train.steps=4 --set train.checkpoint_every=2 --set train.out_dir="$r" 2>&1) &&
    fail "latest eio: the run went on: $out"
grep -q "the checkpoint of step 2 is whole in $r/ckpt/step-2 and --resume auto continues from it, but its save did not finish: $r/ckpt/latest.tmp.[0-9]*: cannot create: Input/output error" <<<"$out" ||
    fail "latest eio: the error does not say the checkpoint is whole: $out"
grep -q "not saved" <<<"$out" && fail "latest eio: the error says not saved: $out"
[ -f "$r/ckpt/step-2/state.json" ] && [ ! -e "$r/ckpt/latest" ] || fail "latest eio: $(ls "$r/ckpt")"
out=$(timeout 60 "$bin" train "${loud[@]}" --set train.steps=4 --set train.checkpoint_every=2 \
    --set train.out_dir="$r" --resume auto 2>&1) || fail "latest eio: the resume: $out"
grep -q "^resumed from $r/ckpt/step-2 at step 2$" <<<"$out" || fail "latest eio: not resumed from step-2: $out"
echo "a save that fails after its commit: the error says the checkpoint is whole; the resume takes it"
# --init with --resume (one command line for every restart of a fine-tuning
# job): the checkpoint's weights, --init not read (said); the bytes of 6
# steps from --init.
w=$d/run.safetensors
timeout 60 "$bin" train "${args[@]}" --init "$w" --set train.out_dir="$d/ft_full" || fail "init: 6 steps"
timeout 60 "$bin" train "${args[@]}" --init "$w" --set train.steps=3 --set train.out_dir="$d/ft" || fail "init: 3 steps"
out=$(timeout 60 "$bin" train "${loud[@]}" --init "$w" --set train.out_dir="$d/ft" --resume auto 2>&1) ||
    fail "init: --init with --resume: $out"
grep -q "^weights: --init $w not read: the checkpoint --resume auto names replaces them$" <<<"$out" &&
    grep -q "^resumed from $d/ft/ckpt/step-3 at step 3$" <<<"$out" ||
    fail "init: --init with --resume did not say it passed --init over: $out"
cmp "$d/ft_full/model.safetensors" "$d/ft/model.safetensors" ||
    fail "init: --init with --resume: not the bytes of 6 steps from --init"
echo "--init with --resume: the checkpoint's weights, --init not read (said)"

# keep_checkpoints, and the fallback from a damaged latest checkpoint.
d=$tmp/keep
mlp=(--set model.type=mlp --set model.hidden=[32] --set train.batch_size=8 --set data.num_workers=0)
timeout 60 "$bin" train "${common[@]}" "${mlp[@]}" --quiet --set train.steps=10 --set train.checkpoint_every=2 \
    --set train.keep_checkpoints=2 --set train.out_dir="$d" || fail "keep: the run"
got=$(cd "$d/ckpt" && ls -d step-* | sort | tr '\n' ' ')
[ "$got" = "step-10 step-8 " ] || fail "keep_checkpoints=2 left: $got (expected step-10 step-8)"
[ "$(cat "$d/ckpt/latest")" = "step-10" ] || fail "latest is '$(cat "$d/ckpt/latest")', expected step-10"
mkdir "$d/ckpt/step-12.tmp.99999" # what a crash while saving leaves behind
truncate -s 1000 "$d/ckpt/step-10/model.safetensors"
# (its warnings on standard error, the rest on standard output)
out=$(timeout 60 "$bin" train "${common[@]}" "${mlp[@]}" --set train.steps=12 --set train.out_dir="$d" \
    --resume auto --json 2>"$tmp/fallback.err"); rc=$?
err=$(cat "$tmp/fallback.err")
echo "$err$out" | grep -E "resum|falling"
# its --json: 4 steps run from 8 to 12, measured
/usr/bin/python3 -c 'import json, sys; o = json.loads(sys.argv[1])
sys.exit(not (o["steps"] == 12 and o["steps_run"] == 4 and o["samples_per_s"] > 0 and o["seconds"] > 0
              and o["train_loss"] > 0 and o["loss"] == o["train_loss"]))' "$(tail -n 1 <<<"$out")" ||
    fail "--resume auto from step 8 to 12: --json is not 4 steps run, measured: $(tail -n 1 <<<"$out")"
[ $rc -eq 0 ] || fail "--resume auto with a damaged latest: exit $rc"
grep -q "^resume: falling back to .*step-8" <<<"$err" || fail "--resume auto did not say on stderr it fell back to step-8"
grep -q "damaged: .*model.safetensors" <<<"$err" || fail "--resume auto did not name the damaged file on stderr"
grep -q "resumed from .*step-8 at step 8" <<<"$out" || fail "--resume auto did not resume from step 8"
# Resumed at its last step (the run above reached step 12): nothing to train, said so, exit 0.
# Its --json says so too: steps 12, steps_run 0, and what was not measured
# (losses, rates, times) is null, not 0.
out=$(timeout 60 "$bin" train "${common[@]}" "${mlp[@]}" --set train.steps=12 --set train.out_dir="$d" \
    --resume auto --json 2>&1); rc=$?
echo "$out" | grep "^done"
[ $rc -eq 0 ] || fail "--resume auto at the last step: exit $rc"
grep -q "^done: nothing to train, the checkpoint is at step 12 of train.steps 12" <<<"$out" ||
    fail "--resume auto at the last step did not say there was nothing to train"
/usr/bin/python3 -c 'import json, sys; o = json.loads(sys.argv[1])
unmeasured = ["loss", "samples_per_s", "train_loss", "first_loss", "seconds", "gflops_per_s",
              "step_ms_median", "data_wait_fraction"]
sys.exit(not (o["steps"] == 12 and o["steps_run"] == 0 and all(k in o and o[k] is None for k in unmeasured)
              and o["strategy"] == "ddp" and o["optim_state_bytes"] > 0))' "$(tail -n 1 <<<"$out")" ||
    fail "--resume auto at the last step: --json does not say that nothing was run: $(tail -n 1 <<<"$out")"
# resumed past its train.steps (a checkpoint at step 9 of 20, train.steps lowered to 5): nothing to
# train, and no warning that the learning rate goes on from step 9 (it warned so, though no step runs)
timeout 60 "$bin" train "${common[@]}" "${mlp[@]}" --set train.steps=20 --set train.checkpoint_every=9 \
    --set train.out_dir="$tmp/past" --quiet || fail "the run to resume past its train.steps"
out=$(timeout 60 "$bin" train "${common[@]}" "${mlp[@]}" --set train.steps=5 --set train.out_dir="$tmp/past" \
    --resume "$tmp/past/ckpt/step-9" 2>&1) || fail "--resume past train.steps: exit $?"
grep -q "^done: nothing to train, the checkpoint is at step 9 of train.steps 5" <<<"$out" &&
    ! grep -q "the learning rate goes" <<<"$out" ||
    fail "--resume auto past train.steps: $(grep -E "^done|warning" <<<"$out")"
truncate -s 1000 "$d/ckpt/step-8/model.safetensors"
out=$(timeout 60 "$bin" train "${common[@]}" "${mlp[@]}" --set train.steps=12 --set train.out_dir="$d" \
    --resume "$d/ckpt/step-8" 2>&1); rc=$?
echo "$out" | tail -n 1
[ $rc -eq 1 ] || fail "--resume of a damaged checkpoint: exit $rc, expected 1"
grep -q "error: .*step-8/model.safetensors" <<<"$out" || fail "the error does not name the damaged file"
# Every checkpoint damaged: --resume auto is an error and writes nothing
# (before, it started over from step 0 and replaced them). (2: the
# damaged step-10, after the step-8 the resume fell back to, was moved to
# ckpt.abandoned by that resume.)
truncate -s 1000 "$d/ckpt/step-12/model.safetensors"
before=$(cd "$d" && find . -type f -exec cksum {} + | sort)
out=$(timeout 60 "$bin" train "${common[@]}" "${mlp[@]}" --set train.steps=14 --set train.out_dir="$d" \
    --resume auto --quiet 2>&1); rc=$?
echo "$out" | tail -n 1
[ $rc -eq 1 ] && grep -q "error: resume: no good checkpoint among the 2 in $d/ckpt (the first: .*step-12/model.safetensors.*); nothing was written" <<<"$out" ||
    fail "--resume auto with every checkpoint damaged: exit $rc: $out"
[ "$(cd "$d" && find . -type f -exec cksum {} + | sort)" = "$before" ] ||
    fail "--resume auto with every checkpoint damaged changed $d"
# eval --init of that folder: the advice is --init's, not a resume's (it said "resume again, or move ... aside
# to start over")
out=$(timeout 60 "$bin" eval "${common[@]}" "${mlp[@]}" --set data.val=/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz --init "$d/ckpt" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "error: --init: no good checkpoint among the 2 in $d/ckpt (the first: .*); nothing was written. Repair the storage or the files, or give --init another checkpoint or weights file" <<<"$out" ||
    fail "eval --init of a folder of damaged checkpoints: exit $rc: $out"

# A rewind: resumed from an older checkpoint of its own out_dir, the later
# ones (the trajectory it leaves) move to ckpt.abandoned, said, where
# keep_checkpoints (which goes by step number) had kept them and deleted the
# new run's own; `latest` names the step resumed from until the first save.
d=$tmp/rewind
timeout 60 "$bin" train "${common[@]}" "${const[@]}" "${mlp[@]}" --quiet --set train.steps=10 --set train.checkpoint_every=2 \
    --set train.keep_checkpoints=0 --set train.out_dir="$d" || fail "rewind: the 10-step run"
# (--quiet: a warning is said all the same)
out=$(timeout 60 "$bin" train "${common[@]}" "${const[@]}" "${mlp[@]}" --set train.steps=8 --set train.checkpoint_every=2 \
    --set train.keep_checkpoints=2 --set train.out_dir="$d" --resume "$d/ckpt/step-4" --quiet 2>&1) || fail "rewind: $out"
grep -q "resume: warning: $d/ckpt held 3 checkpoints after step 4 (step-10, step-8, step-6), of the run this one leaves at that step: moved to $d/ckpt.abandoned" <<<"$out" ||
    fail "rewind: no warning: $out"
[ "$(cd "$d/ckpt" && ls | tr '\n' ' ')" = "latest step-6 step-8 " ] && [ "$(cat "$d/ckpt/latest")" = step-8 ] &&
    [ "$(cd "$d/ckpt.abandoned" && ls | tr '\n' ' ')" = "step-10 step-6 step-8 " ] ||
    fail "rewind: ckpt holds $(ls "$d/ckpt" | tr '\n' ' '), ckpt.abandoned $(ls "$d/ckpt.abandoned" | tr '\n' ' ')"
# (the same steps again, in order: the new step-8 is the one set aside, bit for bit)
cmp -s "$d/ckpt/step-8/model.safetensors" "$d/ckpt.abandoned/step-8/model.safetensors" ||
    fail "rewind: step 8 again has other weights than the first time"
out=$(timeout 60 "$bin" train "${common[@]}" "${const[@]}" "${mlp[@]}" --quiet --set train.steps=6 --set train.out_dir="$d" \
    --resume "$d/ckpt/step-6" --set train.checkpoint_every=2 2>&1) || fail "rewind twice: $out"
[ -d "$d/ckpt.abandoned/step-8.1" ] && [ -d "$d/ckpt.abandoned/step-8" ] || fail "rewind twice: $(ls "$d/ckpt.abandoned" | tr '\n' ' ')"
# (what ckpt.abandoned holds in all, which nothing prunes, is said)
mib=$(/usr/bin/python3 -c "import os, sys; print('%.1f' % (sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(sys.argv[1]) for f in fs) / 2**20))" "$d/ckpt.abandoned")
grep -q "($d/ckpt.abandoned holds $mib MiB, the checkpoints of trajectories resumes left: nothing prunes them; remove them once you no longer need them)" <<<"$out" ||
    fail "rewind twice: what ckpt.abandoned holds ($mib MiB) is not said: $out"
[ "$fails" -ne 0 ] || echo "rewind to step 4: steps 6-10 moved to ckpt.abandoned; a second rewind keeps both step-8s"

# SIGTERM in the middle of a cosine run: a checkpoint, exit 143, then resume.
# (1500 steps, about 2 s here, so that the signal sent once step 7 is
# logged lands mid-run on a loaded machine too; 300 were over in 0.5 s.)
d=$tmp/term
long=1500
big=("${common[@]}" --set model.type=mlp --set model.hidden=[256,256] --set train.batch_size=16
    --set data.num_workers=1 --set model.dropout=0.1 --set train.steps=$long)
timeout 60 "$bin" train "${big[@]}" --quiet --set train.out_dir="$d/full" || fail "term: the full run"
# (a line every 7 steps: the stop's steps after the last one are its own line)
"$bin" train "${big[@]}" --set log.every=7 --set train.out_dir="$d/run" >"$d.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do # up to 30 s for step 7 to be logged
    grep -q "^step 7/" "$d.log" 2>/dev/null && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.05
done
kill -TERM $pid
wait $pid; rc=$?
tail -n 2 "$d.log"
[ $rc -eq 143 ] || fail "SIGTERM: exit $rc, expected 143"
grep -q "stopped by SIGTERM after step" "$d.log" || fail "SIGTERM: no message saying where it stopped"
latest=$(cat "$d/run/ckpt/latest" 2>/dev/null)
[ -n "$latest" ] && [ -f "$d/run/ckpt/$latest/state.json" ] || fail "SIGTERM left no checkpoint"
[ -f "$d/run/model.safetensors" ] && fail "an interrupted run wrote the final weights"
# metrics.jsonl's last step line is the stop's step (the steps after the last log.every line were left out)
last=$(/usr/bin/python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if "\"step\"" in l and "loss" in l][-1]["step"])' "$d/run/metrics.jsonl")
[ "$last" = "${latest#step-}" ] && echo "SIGTERM: metrics.jsonl's last step line is the checkpoint's step, $last" ||
    fail "SIGTERM: metrics.jsonl's last step line is step $last, the checkpoint $latest"
# ... whose grad_norm, that step's norm not measured (no clip, not a logged step), is null (it repeated
# the last logged step's)
/usr/bin/python3 -c '
import json, sys
l = [json.loads(l) for l in open(sys.argv[1]) if "\"step\"" in l and "loss" in l][-1]
ok = l["grad_norm"] is None if l["step"] % 7 else l["grad_norm"] > 0
print("SIGTERM: the stop line of step", l["step"], "grad_norm", l["grad_norm"], "ok" if ok else "FAIL")
sys.exit(0 if ok else 1)' "$d/run/metrics.jsonl" || fail "SIGTERM: the stop line's grad_norm"
# started again without --resume (forgotten): refused, naming the checkpoint and --resume auto, nothing written
before=$(cd "$d/run" && find . -type f -exec md5sum {} + | sort)
out=$(timeout 60 "$bin" train "${big[@]}" --quiet --set train.out_dir="$d/run" 2>&1) && fail "term: a new run started"
echo "$out" | tail -n 1
grep -q "holds an unfinished run: its latest good checkpoint, $d/run/ckpt/$latest, is at step .* of $long. Continue it with --resume auto" \
    <<<"$out" || fail "term: no clear refusal of a new run over the unfinished one"
[ "$(cd "$d/run" && find . -type f -exec md5sum {} + | sort)" = "$before" ] || fail "term: the refused run changed files"
timeout 60 "$bin" train "${big[@]}" --set log.every=7 --quiet --set train.out_dir="$d/run" --resume auto ||
    fail "term: the resume"
cmp "$d/full/model.safetensors" "$d/run/model.safetensors" && echo "SIGTERM at $latest + resume: same bytes" ||
    fail "SIGTERM + resume differs from the uninterrupted run"
# and the resumed run's lines follow on: every step line once, in order, up to the end
/usr/bin/python3 -c '
import json, sys
s = [json.loads(l)["step"] for l in open(sys.argv[1]) if l.startswith("{\"step\"")]
sys.exit(0 if s == sorted(set(s)) and s[-1] == int(sys.argv[2]) else 1)' "$d/run/metrics.jsonl" "$long" ||
    fail "SIGTERM + resume: metrics.jsonl's step lines repeat, go back, or stop short of $long"


# A new run over the finished one: its checkpoints are set aside in
# ckpt.previous (still good, and --resume takes them from there); but not by
# a run refused before it writes (--init of weights of another shape).
before=$(cd "$d/run" && find . -type f -exec md5sum {} + | sort)
out=$(timeout 60 "$bin" train "${big[@]}" --quiet --set train.steps=4 --set train.out_dir="$d/run" \
    --set model.hidden=[7] --init "$d/full/model.safetensors" 2>&1) && fail "a run with --init of another shape ran"
grep -q "mismatches with the mlp model" <<<"$out" || fail "--init of another shape: $out"
[ "$(cd "$d/run" && find . -type f -exec md5sum {} + | sort)" = "$before" ] && [ ! -e "$d/run/ckpt.previous" ] ||
    fail "a refused run moved or changed the finished run's files"
# (nor by one whose configuration is refused: sync batch-norm with
# deterministic, refused by the configuration's check since `scaletrain
# check` should say so too; before, only once the model was built)
out=$(timeout 60 "$bin" train "${big[@]}" --quiet --set train.steps=4 --set train.out_dir="$d/run" \
    --set dist.sync_batchnorm=true --set dist.deterministic=true 2>&1) && fail "sync batch-norm, deterministic: ran"
grep -q "dist.sync_batchnorm (true, --set) and dist.deterministic (true, --set) exclude each other" <<<"$out" ||
    fail "sync batch-norm, deterministic: $out"
# (run.lock says who held it last: this run took it)
[ "$(cd "$d/run" && find . -type f ! -name run.lock -exec md5sum {} + | sort)" = "$(grep -v ' ./run.lock$' <<<"$before")" ] &&
    [ ! -e "$d/run/ckpt.previous" ] ||
    fail "a run its set-up refused moved or changed the finished run's files: $(cd "$d/run" && find . -type f -exec md5sum {} + | sort | diff - <(echo "$before"))"
out=$(timeout 60 "$bin" train "${big[@]}" --quiet --set train.steps=4 --set train.out_dir="$d/run" 2>&1) ||
    fail "a new run over a finished one: $out"
echo "$out" | tail -n 1
grep -q "holds a finished run (the latest checkpoint at step $long): its checkpoints are now in $d/run/ckpt.previous" \
    <<<"$out" || fail "a new run over a finished one did not say where its checkpoints went"
[ "$(cat "$d/run/ckpt/latest")" = "step-4" ] && [ ! -e "$d/run/ckpt/step-$long" ] ||
    fail "the new run's checkpoint folder holds the old run's"
"$bin" data inspect "$d/run/ckpt.previous" | grep -q "step-$long *good" || fail "ckpt.previous/step-$long is not good"

e2e_finish "all passed"
