# What tests/e2e/nan_stop.sh and emu_nan_stop.sh share, sourced after
# e2e_tmpdir: a token file, the array run (SGD at lr 9.9 with momentum 0.99
# on a tiny GPT: its loss becomes NaN at a step between 5 and 20; the train
# command and its settings, less train.device and train.out_dir; on a
# device the loss is read on steps 1, 4, 8, 12, 16 and 20), check_stop and
# check_two_ranks.
for i in $(seq 1 200); do echo "the quick brown fox $i jumps over the lazy dog and runs far away"; done >"$tmp/text.txt"
"$bin" data tokenize "$tmp/t.tokens" "$tmp/text.txt" >/dev/null || fail tokenize
run=(train --set model.type=gpt --set data.type=tokens --set data.train="$tmp/t.tokens" --set data.val=
     --set model.n_layer=2 --set model.n_embd=64 --set model.n_head=4 --set model.block_size=32
     --set train.batch_size=8 --set optim.type=sgd --set optim.lr=9.9
     --set optim.momentum=0.99 --set optim.weight_decay=0 --set train.steps=20
     --set train.checkpoint_every=4 --set train.eval_every=0 --set log.every=20 --set data.num_workers=0)

# check_stop WHAT OUT_DIR LOG [EVERY]: the step N the log names ($nan_step),
# the checkpoints those of the multiples of EVERY (4) below it, latest the last.
check_stop() {
    local what=$1 dir=$2 log=$3 every=${4:-4} want=() k
    nan_step=$(sed -nE 's/.*the loss became NaN at step ([0-9]+); lower optim.lr or set optim.grad_clip$/\1/p' "$log" | head -1)
    if [ -z "$nan_step" ] || [ "$nan_step" -lt 5 ] || [ "$nan_step" -gt 20 ]; then
        fail "$what: no 'the loss became NaN at step N' with N in 5..20: $(grep -i error "$log" | head -2)"
        return
    fi
    ! grep -q -- "-nan" "$log" || fail "$what: printed -nan"
    for ((k = every; k < nan_step; k += every)); do want+=("step-$k"); done
    [ "$(ls "$dir/ckpt" | grep -E '^step-' | sort -t- -k2 -n | tr '\n' ' ')" = "${want[*]} " ] ||
        fail "$what: NaN at step $nan_step, checkpoints $(ls "$dir/ckpt" | tr '\n' ' '), want ${want[*]}"
    grep -q "${want[-1]}\$" <<<"$(readlink -f "$dir/ckpt/latest" 2>/dev/null; cat "$dir/ckpt/latest" 2>/dev/null)" ||
        fail "$what: ckpt/latest is not ${want[-1]}"
    [ ! -e "$dir/model.safetensors" ] || fail "$what: model.safetensors written after a NaN"
}


# check_two_ranks WHAT: `run` on two ranks (scaletrain launch) into
# $tmp/two: a failure, every rank naming the same step, the checkpoints as
# check_stop wants them.
check_two_ranks() {
    local what=$1 r
    if ! command -v mpirun >/dev/null; then
        echo "$what: skipped: mpirun is missing (apt-get install openmpi-bin libopenmpi-dev)"
        return
    fi
    timeout 300 "$bin" launch -n 2 --cores-per-rank 1 "${run[@]}" --set train.out_dir="$tmp/two" >"$tmp/two.log" 2>&1
    [ $? -ne 0 ] || fail "$what: exit 0"
    check_stop "$what" "$tmp/two" "$tmp/two.log"
    for r in 0 1; do
        grep -q "rank $r.*the loss became NaN at step $nan_step;" "$tmp/two.log" ||
            fail "$what: rank $r does not name step $nan_step"
    done
}
