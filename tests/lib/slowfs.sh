# The set-up of the stall tests (tests/e2e/checkpoint_stall.sh,
# storage_stall.sh), sourced after tests/lib/e2e.sh and e2e_tmpdir: a token
# file $tmp/t.tokens, the slow file system $tmp/slowfs.so (tests/lib/slowfs.c,
# for LD_PRELOAD; give it to scaletrain alone, through env, never to the
# `timeout` around it), and run=(...): a tiny GPT on the CPU, one rank, a
# checkpoint every 5 steps, train.checkpoint_timeout_s 1, 20 steps.
source "$(dirname "${BASH_SOURCE[0]}")/tiny_gpt.sh"
cc -shared -fPIC -O2 -o "$tmp/slowfs.so" tests/lib/slowfs.c -ldl || { echo "FAIL: cannot build the shim"; exit 1; }
run+=(--set optim.schedule=constant --set train.checkpoint_every=5 --set train.checkpoint_every_s=0
      --set train.checkpoint_timeout_s=1 --set log.progress=off --set train.steps=20)
