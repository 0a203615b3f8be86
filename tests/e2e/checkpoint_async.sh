#!/usr/bin/env bash
# Asynchronous checkpoints (train.checkpoint_async; docs/formats.md,
# "Checkpoints"): periodic checkpoints written on a thread from host copies
# while training goes on, committed when every rank's files are written.
# A tiny gpt on a token file; 1 rank, and 2 ranks (ddp and zero1) under real mpirun.
# (a) 9 steps, a checkpoint every 3, every checkpoint kept: the async run's
#     step-3, step-6 and step-9 files (weights and optimizer state) are the
#     same bits as the synchronous run's, and its final weights too.
#     And a wider model on 2 ranks (zero1), whose writes usually end between
#     checkpoints: committed at the first step every rank's writer is done.
# (b) each fsync of model.safetensors 0.7 s slow (tests/lib/slowfs.c): the
#     async checkpoints of steps 3 and 6 are committed after later steps
#     (metrics.jsonl: committed_step > step, async true) while the sync run's
#     are committed at their own step; the last (step 9) is synchronous.
# (c) SIGKILL while the step-6 checkpoint is being written (1.5 s per fsync):
#     `latest` names step-3, which verifies and resumes; no step-6 directory.
# (d) SIGTERM while the step-3 checkpoint is being written: step-3 is
#     committed, the stop's checkpoint saved and latest, exit 143.
# tests/run.sh: light (it mostly waits: on the slowed writes and fsyncs of its checkpoints)
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_mpirun
[ -x "$bin" ] || { echo "FAIL: $bin is not built"; exit 1; }
command -v cc >/dev/null || e2e_skip "no C compiler for the slow-filesystem shim (apt-get install gcc)"
e2e_tmpdir
e2e_mpi 90
export OMP_WAIT_POLICY=PASSIVE
cc -shared -fPIC -O2 -o "$tmp/slowfs.so" tests/lib/slowfs.c -ldl || { echo "FAIL: cannot build the shim"; exit 1; }
for i in $(seq 1 300); do printf 'line %010d\n' $((i * 7919 % 100003)); done >"$tmp/t.txt"
"$bin" data tokenize "$tmp/t.tokens" "$tmp/t.txt" >/dev/null || fail "tokenize"
gpt=(--set model.type=gpt --set data.type=tokens --set data.val= --set model.n_layer=1 --set model.n_head=2
     --set model.n_embd=16 --set model.block_size=16 --set train.threads=1 --set data.num_workers=0
     --set data.train="$tmp/t.tokens" --set train.batch_size=8 --set dist.timeout_s=30 --set log.progress=off
     --set train.checkpoint_every=3 --set train.keep_checkpoints=0 --set train.steps=9 --quiet)

# run NAME N ASYNC [ARGS...]
run() {
    local name=$1 n=$2 async=$3
    shift 3
    local cmd=("$bin" train "${gpt[@]}" --set train.out_dir="$tmp/$name" --set train.checkpoint_async="$async" "$@")
    if [ "$n" -eq 1 ]; then timeout 60 "${cmd[@]}"; else "${mpi[@]}" -np "$n" "${cmd[@]}"; fi >"$tmp/$name.log" 2>&1 ||
        fail "$name: $(tail -n 3 "$tmp/$name.log")"
}

for cfg in "1 ddp" "2 ddp" "2 zero1"; do
    set -- $cfg
    n=$1 st=$2
    run "sync-$n-$st" "$n" false --set dist.strategy="$st"
    run "async-$n-$st" "$n" true --set dist.strategy="$st"
    same=0 files=0
    for s in 3 6 9; do
        for f in "$tmp/sync-$n-$st/ckpt/step-$s"/*.safetensors; do
            files=$((files + 1))
            g="$tmp/async-$n-$st/ckpt/step-$s/$(basename "$f")"
            if cmp -s "$f" "$g"; then same=$((same + 1)); else fail "$n rank(s) $st: $g differs from the sync run's"; fi
        done
    done
    cmp -s "$tmp/sync-$n-$st/model.safetensors" "$tmp/async-$n-$st/model.safetensors" ||
        fail "$n rank(s) $st: the final weights differ"
    [ "$files" -ge 6 ] || fail "$n rank(s) $st: only $files checkpoint files"
    echo "$n rank(s) $st: $same of $files checkpoint files the same bits, sync and async"
done

# A wider model (steps of ~30 ms): the writer usually finishes between
# checkpoints and the ranks commit at the first step all report it done
# (the "stop" all-reduce), not at the next checkpoint. The same bits again.
wide=(--set model.n_layer=4 --set model.n_head=4 --set model.n_embd=256 --set train.checkpoint_every=10
      --set train.steps=30 --set dist.strategy=zero1)
run wide-sync 2 false "${wide[@]}"
run wide-async 2 true "${wide[@]}"
for s in 10 20 30; do
    for f in "$tmp/wide-sync/ckpt/step-$s"/*.safetensors; do
        cmp -s "$f" "$tmp/wide-async/ckpt/step-$s/$(basename "$f")" || fail "wide: step-$s/$(basename "$f") differs"
    done
done
/usr/bin/python3 - "$tmp/wide-async/metrics.jsonl" <<'PY' || fail "wide: the checkpoints' records"
import json, sys
ck = [r for r in map(json.loads, open(sys.argv[1])) if r.get("checkpoint")]
for r in ck:
    print(f"wide, 2 ranks, zero1: step {r['step']} committed after step {r['committed_step']}",
          f"({'polled' if r['async'] and r['committed_step'] % 10 else 'at a checkpoint'}), write {r['write_s']:.3f} s,",
          f"the loop stalled {r['stall_s']:.3f} s")
sys.exit(0 if [r["step"] for r in ck] == [10, 20, 30] and all(r["committed_step"] > r["step"] for r in ck[:2]) else 1)
PY

slow=(env LD_PRELOAD="$tmp/slowfs.so" ST_SLOWFS_MATCH=model.safetensors ST_SLOWFS_MS=700)
for async in false true; do
    timeout 60 "${slow[@]}" "$bin" train "${gpt[@]}" --set train.out_dir="$tmp/slow-$async" \
        --set train.checkpoint_async=$async >"$tmp/slow-$async.log" 2>&1 || fail "slow $async: $(tail -n 3 "$tmp/slow-$async.log")"
    /usr/bin/python3 - "$tmp/slow-$async/metrics.jsonl" "$async" <<'PY' || fail "slow $async: the checkpoints' records"
import json, sys
async_ = sys.argv[2] == "true"
ck = [r for r in map(json.loads, open(sys.argv[1])) if r.get("checkpoint")]
ok = [r["step"] for r in ck] == [3, 6, 9]
for r in ck:
    later = r["committed_step"] > r["step"]
    want_async = async_ and r["step"] < 9
    ok &= r["async"] == want_async and later == want_async and r["write_s"] >= 0.65
    print(f"checkpoint_async {sys.argv[2]}: step {r['step']} committed after step {r['committed_step']},",
          f"async {r['async']}, write {r['write_s']:.2f} s, the loop stalled {r['stall_s']:.2f} s")
sys.exit(0 if ok else 1)
PY
done

# (c) killed mid-write
d=$tmp/kill
mkdir -p "$d"
env LD_PRELOAD="$tmp/slowfs.so" ST_SLOWFS_MATCH=model.safetensors ST_SLOWFS_MS=1500 \
    timeout 60 "$bin" train "${gpt[@]}" --set train.out_dir="$d" --set train.checkpoint_async=true \
    --set train.steps=1000000 >"$d.log" 2>&1 &
pid=$!
seen=
for i in $(seq 1 300); do # at most ~30 s
    if compgen -G "$d/ckpt/step-6.tmp.*/model.safetensors*" >/dev/null && [ -d "$d/ckpt/step-3" ]; then seen=1; break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
{
    pkill -KILL -f "train.out_dir=$d " # the trainer (timeout's child)
    kill -KILL "$pid"
    wait "$pid"
} 2>/dev/null
[ -n "$seen" ] || fail "kill: the step-6 checkpoint was never seen being written: $(tail -n 3 "$d.log")"
[ "$(cat "$d/ckpt/latest" 2>/dev/null)" = "step-3" ] || fail "kill: latest is '$(cat "$d/ckpt/latest" 2>/dev/null)', not step-3"
[ ! -e "$d/ckpt/step-6" ] || fail "kill: a step-6 checkpoint directory exists"
timeout 60 "$bin" train "${gpt[@]}" --set train.out_dir="$d" --set train.steps=5 --resume auto --json \
    >"$d-resume.log" 2>&1 || fail "kill: resume: $(tail -n 3 "$d-resume.log")"
grep -q '"steps":5,"steps_run":2,' "$d-resume.log" || fail "kill: did not resume from step 3: $(tail -n 1 "$d-resume.log")"
# (d) SIGTERM while the step-3 checkpoint is being written: the run commits
#     it (waiting for its writer), saves the stop's checkpoint, exits 143.
d=$tmp/term
mkdir -p "$d"
env LD_PRELOAD="$tmp/slowfs.so" ST_SLOWFS_MATCH=model.safetensors ST_SLOWFS_MS=800 \
    timeout 60 "$bin" train "${gpt[@]}" --set train.out_dir="$d" --set train.checkpoint_async=true \
    --set train.steps=1000000 >"$d.log" 2>&1 &
pid=$!
seen=
for i in $(seq 1 300); do # at most ~30 s
    if compgen -G "$d/ckpt/step-3.tmp.*/model.safetensors*" >/dev/null; then seen=1; break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
pkill -TERM -f "train.out_dir=$d "
wait "$pid"
rc=$?
[ -n "$seen" ] || fail "term: the step-3 checkpoint was never seen being written: $(tail -n 3 "$d.log")"
[ "$rc" -eq 143 ] || fail "term: exit $rc, not 143: $(tail -n 3 "$d.log")"
stop=$(cat "$d/ckpt/latest" 2>/dev/null)
[ -f "$d/ckpt/step-3/state.json" ] || fail "term: the pending step-3 checkpoint was not committed"
[ -n "$stop" ] && [ "${stop#step-}" -gt 3 ] && [ -f "$d/ckpt/$stop/state.json" ] ||
    fail "term: latest is '$stop', not the stop's checkpoint after step 3"
echo "SIGTERM while step 3 was written: exit $rc, step-3 committed, latest $stop"
e2e_finish "asynchronous checkpoints: the same bits as synchronous ones, committed later, and a kill mid-write loses only that one"
