#!/usr/bin/env bash
# Checkpoints under ZeRO (issue 5), under real mpirun:
# - zero2 on 4 ranks writes one optim-rank{K} file per shard and the layout
#   in state.json.
# - Resharding: 4 steps saved on 4 ranks (zero2), resumed to 8 steps on 2
#   ranks (zero1), on 1 rank (ddp) and on 4 (zero2); 4 steps of DDP on 2
#   ranks resumed on 4 with zero2: each ends with the weights of the
#   uninterrupted 8-step run, within ddp_equivalence.sh's 1e-4 (the same
#   bits where the world size and strategy are those of the uninterrupted
#   run). In deterministic mode a change of world size keeps the same bits.
# - A damaged (truncated) or missing shard file: --resume DIR fails with the
#   file named; --resume auto falls back to the previous checkpoint.
# - The ranks share the checksums (st_ckpt_find_shared: each reads half of
#   every file on 2 ranks, the parts' CRC32s joined): one flipped bit in
#   either half of the latest checkpoint's model file is found, rank 0 says
#   which file and both fall back to the previous checkpoint together; ranks
#   that look at different checkpoints (MPMD, an out_dir each: one at a later
#   step, or one with none) both end with an error naming the steps, within
#   the timeout, rather than waiting on each other.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_mpirun
e2e_need_fmnist
e2e_need_numpy
e2e_tmpdir
e2e_mpi 60
export OMP_WAIT_POLICY=PASSIVE
# AdamW (two moments per shard), constant schedule after warmup: 4 + 4 steps
# follow the same schedule as 8.
args=(--set train.threads=1 --set data.val= --set log.progress=off --quiet --set optim.schedule=constant
      --set optim.warmup_steps=2 --set model.type=mlp --set model.hidden=[64,32] --set train.batch_size=16
      --set data.num_workers=0 --set dist.timeout_s=30 --set dist.bucket_cap_mb=0.05 --set optim.grad_clip=0.5)

# train N STRATEGY STEPS DIR [ARGS...]
train() {
    local n=$1 st=$2 steps=$3 dir=$4; shift 4
    local cmd=("$bin" train "${args[@]}" --set dist.strategy="$st" --set train.steps="$steps"
               --set train.out_dir="$dir" "$@")
    if [ "$n" -eq 1 ]; then timeout 60 "${cmd[@]}"; else "${mpi[@]}" -np "$n" "${cmd[@]}"; fi
}

train 4 zero2 8 "$tmp/full" || fail "the uninterrupted zero2 run"
train 4 zero2 4 "$tmp/half" || fail "the 4-step zero2 run"
ck=$tmp/half/ckpt/step-4
for k in 0 1 2 3; do [ -f "$ck/optim-rank$k.safetensors" ] || fail "no optim-rank$k.safetensors in $ck"; done
/usr/bin/python3 - "$ck/state.json" <<'PY' || fail "state.json has no shard layout"
import json, sys
o = json.load(open(sys.argv[1]))["optim"]
ok = o["layout"] == "shards" and o["world"] == 4 and o["shard"] % 1024 == 0 and o["shard"] * 4 >= o["count"]
print("layout:", o, "ok" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY

# resume NAME FROM N STRATEGY: copy run FROM, resume to 8 steps, compare with $tmp/full.
resume() {
    local name=$1 from=$2 n=$3 st=$4 ref=${5:-$tmp/full}
    rm -rf "$tmp/$name"
    cp -r "$from" "$tmp/$name"
    train "$n" "$st" 8 "$tmp/$name" --resume auto || fail "$name: the resumed run"
    echo -n "$name: "
    /usr/bin/python3 tests/py/weights_diff.py "$ref/model.safetensors" "$tmp/$name/model.safetensors" 1e-4 ||
        fail "$name: differs from the uninterrupted run"
}
resume "4-zero2-to-2-zero1" "$tmp/half" 2 zero1
resume "4-zero2-to-1-ddp" "$tmp/half" 1 ddp
resume "4-zero2-to-4-zero2" "$tmp/half" 4 zero2
cmp -s "$tmp/full/model.safetensors" "$tmp/4-zero2-to-4-zero2/model.safetensors" ||
    fail "the same world size and strategy should resume to the same bits"
train 2 ddp 4 "$tmp/ddp-half" || fail "the 4-step ddp run"
resume "2-ddp-to-4-zero2" "$tmp/ddp-half" 4 zero2

# Deterministic: saved on 4 ranks, resumed on 2 and on 1: the same bits as 8 steps on 1 rank.
det=(--set dist.deterministic=true --set train.micro_batch_size=4)
train 1 ddp 8 "$tmp/det-full" "${det[@]}" || fail "the deterministic 1-rank run"
train 4 zero2 4 "$tmp/det-half" "${det[@]}" || fail "the deterministic 4-rank run"
for n in 2 1; do
    rm -rf "$tmp/det-$n"
    cp -r "$tmp/det-half" "$tmp/det-$n"
    train "$n" zero1 8 "$tmp/det-$n" "${det[@]}" --resume auto || fail "deterministic resume on $n ranks"
    if cmp -s "$tmp/det-full/model.safetensors" "$tmp/det-$n/model.safetensors"; then
        echo "deterministic: 4 steps on 4 ranks (zero2) + 4 on $n (zero1): the same bits as 8 on 1 rank"
    else
        fail "deterministic resume on $n ranks: not the same bits"
    fi
done
# ... with the micro-batch auto (16 on 1 rank, 8 on 2): a resume on 2 ranks trains otherwise, and the
# warning names the rank counts that keep it (it advised "resume with its values", which 2 ranks refuse)
train 1 ddp 2 "$tmp/det-auto" --set dist.deterministic=true || fail "the deterministic run, micro-batch auto"
out=$(train 2 ddp 4 "$tmp/det-auto" --set dist.deterministic=true --resume auto 2>&1) ||
    fail "its resume on 2 ranks: $out"
grep -qF "train.micro_batch_size 16 -> 8; from step 2 on this run trains differently from the interrupted one (its train.micro_batch_size 16 does not split train.batch_size 16 on 2 ranks: to continue it, resume on 1 rank(s) with its values)" <<<"$out" &&
    echo "deterministic, micro-batch auto, resumed on 2 ranks: the rank counts that keep it named" ||
    fail "deterministic resume on 2 ranks: the warning does not name the rank counts: $out"
# another train.batch_size on a resume (more ranks, each its micro-batch): it goes on from the same
# place in the data, its 64 samples (4 steps of 16) 2 steps of 32, said once (it was an error; before
# that an MPI_Abort, its banner over the message); and where the new batch does not divide it, at the
# step that holds it, the samples before it read again
out=$(train 2 ddp 6 "$tmp/det-auto" --set train.batch_size=32 --resume auto 2>&1) ||
    fail "a resume with another batch: $out"
[ "$(grep -c "resume: warning: the checkpoint was written with train.batch_size 16; this run has 32: it goes on at step 2 of epoch 0 in batches of 32 (sample 64 of the epoch, where the checkpoint's run stood). The steps count on from 4" <<<"$out")" -eq 1 ] &&
    [ -d "$tmp/det-auto/ckpt/step-6" ] || fail "another batch on a 2-rank resume: $out"
out=$(train 2 ddp 7 "$tmp/det-auto" --set train.batch_size=40 --resume auto 2>&1) ||
    fail "a resume with a batch that does not divide the position: $out"
grep -qF "it goes on at step 3 of epoch 0 in batches of 40 (sample 128 of the epoch, where the checkpoint's run stood; the step starts 8 samples before it, which are read again)" <<<"$out" ||
    fail "a resume with a batch that does not divide the position: $out"
echo "another train.batch_size on a resume: on from the same place in the data, said"

# A damaged shard: --resume DIR names it; a missing one too; auto falls back.
train 4 zero2 6 "$tmp/bad" --set train.checkpoint_every=2 || fail "the run with checkpoints"
bad=$tmp/bad/ckpt/step-6
truncate -s 100 "$bad/optim-rank2.safetensors"
out=$(train 2 zero2 8 "$tmp/bad" --resume "$bad" 2>&1); rc=$?
echo "truncated shard: exit $rc: $(grep -m1 'optim-rank2' <<<"$out")"
[ $rc -ne 0 ] && grep -q "optim-rank2.safetensors" <<<"$out" || fail "a truncated shard: $out"
rm "$bad/optim-rank2.safetensors"
out=$(train 2 zero2 8 "$tmp/bad" --resume "$bad" 2>&1); rc=$?
echo "missing shard: exit $rc: $(grep -m1 'optim-rank2' <<<"$out")"
[ $rc -ne 0 ] && grep -q "optim-rank2.safetensors" <<<"$out" || fail "a missing shard: $out"
out=$(train 2 zero2 8 "$tmp/bad" --resume auto --set log.progress=off 2>&1); rc=$?
[ $rc -eq 0 ] || fail "resume auto past a damaged shard: exit $rc: $out"

# One bit flipped at a quarter and at three quarters of the model file:
# rank 0's half, then rank 1's.
train 2 zero1 6 "$tmp/flip" --set train.checkpoint_every=2 || fail "the run to flip a bit in"
for at in 1 3; do
    rm -rf "$tmp/flip$at"
    cp -r "$tmp/flip" "$tmp/flip$at"
    f=$tmp/flip$at/ckpt/step-6/model.safetensors
    /usr/bin/python3 -c 'import sys; p, q = sys.argv[1], int(sys.argv[2]); b = bytearray(open(p, "rb").read())
b[len(b) * q // 4] ^= 4; open(p, "wb").write(b)' "$f" $at
    out=$(train 2 zero1 8 "$tmp/flip$at" --resume auto --set log.progress=off 2>&1); rc=$?
    if [ $rc -eq 0 ] &&
        grep -q "^resume: the latest checkpoint is damaged: $f: CRC32 [0-9a-f]*, state.json says [0-9a-f]* (damaged checkpoint)$" <<<"$out" &&
        grep -q "^resume: falling back to $tmp/flip$at/ckpt/step-4$" <<<"$out"; then
        echo "a bit flipped at $at/4 of the model file: found by the shared checksums, both ranks resumed step-4"
    else
        fail "a bit flipped at $at/4 of the model file: exit $rc: $(grep -m3 'resume\|error' <<<"$out")"
    fi
done
# MPMD: rank 0 at step 6 in one out_dir, rank 1 at step 4 in another (then none).
cp -r "$tmp/flip" "$tmp/other"
rm -rf "$tmp/other/ckpt/step-6"
echo step-4 >"$tmp/other/ckpt/latest"
two=("$bin" train "${args[@]}" --set dist.strategy=zero1 --set train.steps=10 --resume auto)
for case in "step 4 (3 files)" "no checkpoint left to look at"; do
    [ "$case" = "step 4 (3 files)" ] || rm -rf "$tmp/other/ckpt"
    out=$("${mpi[@]}" -np 1 "${two[@]}" --set train.out_dir="$tmp/flip" : -np 1 "${two[@]}" \
        --set train.out_dir="$tmp/other" 2>&1); rc=$?
    want="the ranks do not look at the same checkpoint in $tmp/flip/ckpt: rank 0 at step 6 (3 files), rank 1 at $case"
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -qF "$want" <<<"$out"; then
        echo "ranks at different checkpoints (rank 1 at $case): exit $rc, said"
    else
        fail "ranks at different checkpoints (rank 1 at $case): exit $rc: $(grep -m2 'error\|aborting' <<<"$out")"
    fi
done
e2e_finish
