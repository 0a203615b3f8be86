#!/usr/bin/env bash
# optim.lr_scaling (issue 4): the learning rate scaled with the number of
# ranks, printed in the effective configuration, and used. On 2 ranks under
# real mpirun: linear gives the same bytes as lr x 2 given by hand, sqrt the
# same weights as lr x sqrt(2) (to float rounding of the typed value); on one
# rank it changes nothing; none (the default) leaves lr alone; a resume on
# another number of ranks says the rate changed, as does a resume with
# another optim.lr; a bad value is an error
# naming the accepted ones.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_mpirun
e2e_tmpdir
export OMP_WAIT_POLICY=PASSIVE
e2e_mpi 60
mpi+=(-np 2)

for i in $(seq 1 200); do echo "the quick brown fox $i jumps over the lazy dog $((i * 7 % 13))"; done >"$tmp/t.txt"
"$bin" data tokenize "$tmp/t.tokens" "$tmp/t.txt" >/dev/null || fail "tokenize"
args=(--set model.type=gpt --set data.type=tokens --set data.train="$tmp/t.tokens" --set data.val=
      --set model.n_layer=1 --set model.n_head=2 --set model.n_embd=16 --set model.block_size=16
      --set train.threads=1 --set data.num_workers=0 --set train.batch_size=8 --set train.steps=10
      --set optim.lr=1e-3 --set log.peak_gflops=10 --set log.progress=off --set dist.timeout_s=30)

# run NAME NP ARGS...: train, keep the printed configuration in NAME.log.
run() {
    local name=$1 np=$2; shift 2
    if [ "$np" -eq 1 ]; then
        timeout 60 "$bin" train "${args[@]}" --set train.out_dir="$tmp/$name" "$@" >"$tmp/$name.log" 2>&1
    else
        "${mpi[@]}" "$bin" train "${args[@]}" --set train.out_dir="$tmp/$name" "$@" >"$tmp/$name.log" 2>&1
    fi || fail "$name: exit $?: $(tail -n 3 "$tmp/$name.log")"
}
lr_line() { grep -m1 -E '^  lr_scaling: ' "$tmp/$1.log"; }

run lin2 2 --set optim.lr_scaling=linear
run hand2 2 --set optim.lr=2e-3
run sqrt2 2 --set optim.lr_scaling=sqrt
run hsqrt2 2 --set optim.lr=0.0014142135623730951
run lin1 1 --set optim.lr_scaling=linear
run none1 1
run none2 2
for r in lin2 sqrt2 lin1 none2; do echo "$r: $(lr_line $r)"; done

lr_line lin2 | grep -qE "^  lr_scaling: +linear +# --set; the run's lr is 0\.002 = optim\.lr x 2 ranks$" ||
    fail "linear: printed $(lr_line lin2)"
lr_line sqrt2 | grep -qE "^  lr_scaling: +sqrt +# --set; the run's lr is 0\.00141421[0-9]* = optim\.lr x sqrt\(2 ranks\)$" ||
    fail "sqrt: printed $(lr_line sqrt2)"
lr_line lin1 | grep -qE "^  lr_scaling: +linear +# --set; the run's lr is 0\.001 = optim\.lr x 1 rank$" ||
    fail "1 rank: printed $(lr_line lin1)"
for r in lin2 sqrt2 lin1 none2; do # optim.lr stays as given: the printed configuration runs the same again
    grep -qE '^  lr: +0\.001 +# --set$' "$tmp/$r.log" || fail "$r: optim.lr printed as $(grep -m1 -E '^  lr: ' "$tmp/$r.log")"
done
grep -qE '^  lr_scaling: +none +# default$' "$tmp/none2.log" || fail "none: lr_scaling is not shown as the default"

cmp "$tmp/lin2/model.safetensors" "$tmp/hand2/model.safetensors" &&
    echo "linear on 2 ranks: the same bytes as optim.lr=2e-3" || fail "linear: weights differ from lr=2e-3"
cmp -s "$tmp/lin2/model.safetensors" "$tmp/none2/model.safetensors" && fail "linear: same weights as unscaled"
echo -n "sqrt on 2 ranks against optim.lr=1.41421e-3: "
/usr/bin/python3 tests/py/weights_diff.py "$tmp/sqrt2/model.safetensors" "$tmp/hsqrt2/model.safetensors" 1e-6 ||
    fail "sqrt: weights differ"
cmp "$tmp/lin1/model.safetensors" "$tmp/none1/model.safetensors" &&
    echo "linear on 1 rank: the same bytes as no scaling" || fail "1 rank: scaling changed the weights"

# Resumed on 1 rank from lin2's 10 steps (the same train.batch_size): the
# rate halves, said; on 2 ranks again, nothing said
run lin2r 1 --set optim.lr_scaling=linear --set train.steps=12 --resume "$tmp/lin2/ckpt/step-10"
grep -q "resume: warning: the learning rate is 0.001 here (optim.lr 0.001, optim.lr_scaling linear over 1 rank), where the checkpoint's run trained with 0.002, .*set optim.lr: 0.002 and optim.lr_scaling: none" "$tmp/lin2r.log" ||
    fail "resumed on 1 rank: no warning: $(grep resum "$tmp/lin2r.log")"
run lin2s 2 --set optim.lr_scaling=linear --set train.steps=12 --resume "$tmp/lin2/ckpt/step-10"
# (the cosine's decay over the 12 steps of a run of 10 extended is said: not the rate's)
! grep "resume: warning" "$tmp/lin2s.log" | grep -vq "optim.schedule cosine decays over" ||
    fail "resumed on 2 ranks: $(grep "resume: warning" "$tmp/lin2s.log")"
echo "linear, resumed on 1 rank from 2: the changed rate said; on 2 from 2: nothing said"
# optim.lr changed by hand on resume (no scaling): allowed, and said
run none1r 1 --set optim.lr=5e-4 --set train.steps=12 --resume "$tmp/none1/ckpt/step-10"
grep -q "resume: warning: optim.lr is 0.0005 here, where the checkpoint's run trained with 0.001: the schedule goes on from step 10 at the new rate (to continue the interrupted run, set optim.lr: 0.001)" "$tmp/none1r.log" ||
    fail "optim.lr changed on resume: $(grep resum "$tmp/none1r.log")"
run none1s 1 --set train.steps=12 --resume "$tmp/none1/ckpt/step-10"
! grep "resume: warning" "$tmp/none1s.log" | grep -vq "optim.schedule cosine decays over" ||
    fail "resumed with the same optim.lr: $(grep "resume: warning" "$tmp/none1s.log")"
echo "optim.lr changed on resume: said; the same: nothing said"

out=$("$bin" train "${args[@]}" --set optim.lr_scaling=cubic 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "optim.lr_scaling.*none.*linear.*sqrt" <<<"$out" || fail "bad value: exit $rc: $out"

e2e_finish "all passed"
