#!/usr/bin/env bash
# train.out_dir must be one directory that every rank sees (a shared
# filesystem across nodes). Under real mpirun, 2 ranks, a tiny gpt; rank 1
# runs in its own mount namespace with a private tmpfs over the run's
# directory, as a node without the shared filesystem would.
# (a) zero1 (every rank writes its optimizer shard): rank 1 does not see
#     train.out_dir as rank 0 does: refused before the first step, naming it
#     (st_train's check). Where only its ckpt folder is its own (a mount over
#     it after the start), rank 1 does not see the checkpoint's directory
#     rank 0 made, and the save fails on every rank with a message naming it
#     and train.out_dir; no checkpoint is pointed at as latest. Then rank 1
#     sees a directory of that name, but its own: rank 0 does not see rank
#     1's shard and the save fails naming the file.
# (b) --resume auto where only rank 0 sees the checkpoint (DDP, saved by a
#     normal run): the ranks look for it together (st_ckpt_find_shared), rank
#     0 at step 4 and rank 1 with none; the run fails on both, naming both
#     and the checkpoint folder, before any rank loads anything.
# tests/run.sh: light (it mostly waits: on mpirun, or on the timeouts it provokes)
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_mpirun
[ -x "$bin" ] || { echo "FAIL: $bin is not built"; exit 1; }
[ "$(id -u)" -eq 0 ] || e2e_skip "a private mount for rank 1 needs root (unshare -m)"
unshare -m true 2>/dev/null || e2e_skip "unshare -m is not allowed here (no mount namespaces)"
e2e_tmpdir
e2e_mpi 60
export OMP_WAIT_POLICY=PASSIVE
for i in $(seq 1 300); do printf 'line %010d\n' $((i * 7919 % 100003)); done >"$tmp/t.txt"
"$bin" data tokenize "$tmp/t.tokens" "$tmp/t.txt" >/dev/null || fail "tokenize"
gpt=(--set model.type=gpt --set data.type=tokens --set data.val= --set model.n_layer=1 --set model.n_head=2
     --set model.n_embd=16 --set model.block_size=16 --set train.threads=1 --set data.num_workers=0
     --set data.train="$tmp/t.tokens" --set train.batch_size=8 --set dist.timeout_s=20 --set log.progress=off
     --quiet)

# split NAME DIR ARGS...: rank 0 sees DIR, rank 1 a private tmpfs over
# DIR/$over (DIR itself by default), holding the directories named in
# $premade, relative to it.
premade= over=.
split() {
    local name=$1 dir=$2
    shift 2
    mkdir -p "$dir/$over"
    "${mpi[@]}" -np 1 "$bin" train "${gpt[@]}" --set train.out_dir="$dir" "$@" : \
        -np 1 unshare -m sh -c 'mount -t tmpfs none "$0" && (cd "$0" && mkdir -p $1) && shift && exec "$@"' \
        "$dir/$over" "${premade:-.}" "$bin" train "${gpt[@]}" --set train.out_dir="$dir" "$@" >"$tmp/$name.log" 2>&1
    rc=$?
    echo "--- $name: exit $rc"
}

split start "$tmp/s" --set dist.strategy=zero1 --set train.steps=2
[ "$rc" -ne 0 ] || fail "start: a train.out_dir rank 1 does not share was accepted"
grep -q "rank 1 does not see in its train.out_dir, $tmp/s, the folder rank 0 just made in its own" "$tmp/start.log" &&
    grep -q "train.out_dir seen by every rank failed on another rank" "$tmp/start.log" ||
    fail "start: no message naming train.out_dir on both ranks: $(grep -m3 rank "$tmp/start.log")"
[ ! -e "$tmp/s/ckpt" ] || fail "start: a checkpoint folder was made"
over=ckpt split zero1 "$tmp/z" --set dist.strategy=zero1 --set train.steps=2
[ "$rc" -ne 0 ] || fail "zero1: a checkpoint whose shard rank 0 cannot see was accepted"
grep -q "step-2.tmp: rank 0 created this directory, but rank 1 does not see it: train.out_dir ($tmp/z) must be one directory that every node sees" \
    "$tmp/zero1.log" || fail "zero1: no message naming the directory and train.out_dir: $(grep -m3 rank "$tmp/zero1.log")"
grep -q "checkpoint directory seen failed on another rank, rank 1 (its error is in its output)" "$tmp/zero1.log" || fail "zero1: rank 0 did not learn of the failure"
[ ! -e "$tmp/z/ckpt/latest" ] || fail "zero1: a checkpoint was pointed at as latest"
# Rank 1 sees a directory of that name, but its own: rank 0 misses the shard.
over=ckpt premade=step-2.tmp split zero1-own "$tmp/z2" --set dist.strategy=zero1 --set train.steps=2
[ "$rc" -ne 0 ] || fail "zero1-own: a checkpoint whose shard rank 0 cannot see was accepted"
grep -q "optim-rank1.safetensors: rank 1 wrote it ([0-9]* bytes), but rank 0 does not see it: train.out_dir ($tmp/z2) must be one directory" \
    "$tmp/zero1-own.log" || fail "zero1-own: no message naming the shard: $(grep -m3 rank "$tmp/zero1-own.log")"
[ ! -e "$tmp/z2/ckpt/latest" ] || fail "zero1-own: a checkpoint was pointed at as latest"

"${mpi[@]}" -np 2 "$bin" train "${gpt[@]}" --set train.out_dir="$tmp/d" --set train.steps=4 >"$tmp/d.log" 2>&1 ||
    fail "the 4-step run: $(tail -n 3 "$tmp/d.log")"
split resume "$tmp/d" --set train.steps=8 --resume auto
[ "$rc" -ne 0 ] || fail "resume: ranks resuming at different steps were accepted"
grep -q "the ranks do not look at the same checkpoint in $tmp/d/ckpt: rank 0 at step 4 ([0-9]* files), rank 1 at no checkpoint left to look at; every rank must see the same $tmp/d/ckpt" "$tmp/resume.log" ||
    fail "resume: no message naming the steps and the directory: $(grep -m3 error "$tmp/resume.log")"
e2e_finish "a train.out_dir that not every rank sees is an error naming it, at save and at resume"
