# A tiny GPT on the CPU for end-to-end tests, sourced after tests/lib/e2e.sh
# and e2e_tmpdir: a token file $tmp/t.tokens (300 short lines) and
# run=(train ...): one rank, 1 layer, 32 wide, 2 heads, batches of 4 x 16
# tokens, 1 thread, no loader workers, no validation set. A test appends its
# own --set to run (or after "${run[@]}").
export OMP_WAIT_POLICY=PASSIVE
for i in $(seq 1 300); do echo "the quick brown fox $i jumps over the lazy dog"; done >"$tmp/text.txt"
"$bin" data tokenize "$tmp/t.tokens" "$tmp/text.txt" >/dev/null || fail tokenize
run=(train --set model.type=gpt --set data.type=tokens --set data.train="$tmp/t.tokens" --set data.val=
     --set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 --set model.block_size=16
     --set train.batch_size=4 --set train.device=cpu --set train.threads=1 --set data.num_workers=0)
