# The set-up of the stall tests (tests/e2e/checkpoint_stall.sh,
# storage_stall.sh), sourced after tests/lib/e2e.sh and e2e_tmpdir: a token
# file $tmp/t.tokens, the slow file system $tmp/slowfs.so (tests/lib/slowfs.c,
# for LD_PRELOAD; give it to scaletrain alone, through env, never to the
# `timeout` around it), and run=(...): a tiny GPT on the CPU, one rank, a
# checkpoint every 5 steps, train.checkpoint_timeout_s 1, 20 steps.
export OMP_WAIT_POLICY=PASSIVE
for i in $(seq 1 300); do echo "the quick brown fox $i jumps over the lazy dog"; done >"$tmp/text.txt"
"$bin" data tokenize "$tmp/t.tokens" "$tmp/text.txt" >/dev/null || fail tokenize
cc -shared -fPIC -O2 -o "$tmp/slowfs.so" tests/lib/slowfs.c -ldl || { echo "FAIL: cannot build the shim"; exit 1; }
run=(train --set model.type=gpt --set data.type=tokens --set data.train="$tmp/t.tokens" --set data.val=
     --set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 --set model.block_size=16
     --set train.batch_size=4 --set train.device=cpu --set train.threads=1 --set data.num_workers=0
     --set optim.schedule=constant --set train.checkpoint_every=5 --set train.checkpoint_every_s=0
     --set train.checkpoint_timeout_s=1 --set log.progress=off --set train.steps=20)
