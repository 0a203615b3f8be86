#!/usr/bin/env bash
# Out of memory at every allocation (STYLE.md: make each allocation fail in
# turn and expect a clean error, not a crash). tests/lib/failalloc.c,
# LD_PRELOADed, fails the N-th allocation scaletrain's own code makes (the
# libraries' own allocations go through). Each scenario below runs once to
# count its allocations, then once per case N, and each case must either
#   - end with exit 1 and a message that says memory ran out and what it
#     was for (not a bare "out of memory"), and, when it is scaletrain's
#     error line, what the process holds and may take besides (args.c), or
#   - finish (exit 0) with the same result, bit for bit, as the run without
#     a failure (an allocation it could do without);
# never a signal, another exit code, a hang or a different result; and an
# out_dir's ckpt/latest, when it exists, names a whole checkpoint.
# Scenarios: a tiny gpt (validation, loader workers, asynchronous
# checkpoints, TensorBoard); the same resumed from its step-2 checkpoint; a
# cnn on Fashion-MNIST; `eval`; `data tokenize` into shards; and 2 ranks
# under `launch` (ddp), where a rank that fails must end the job (the other
# rank and the launcher too), not hang it.
# CI walks the gpt's first 100 allocations (start-up: the config, data,
# model, optimizer, writers) and launch's first 12 (its communicator's
# start-up), and a drawn sample of each scenario's others (about 60 s in
# all), the seed in the output; ALLOC_FAILURE_ALL=1 walks every one (about
# 10 minutes, and 30 more for launch's), ALLOC_FAILURE_SCALE=K draws K times
# as many, ALLOC_FAILURE_ONLY="gpt cnn" runs those scenarios alone. A
# failure prints the failed allocation's function and line.
# tests/run.sh: long (one of the suite's longest: started before the others)
source "$(dirname "$0")/../lib/e2e.sh"
source tests/lib/alloc_walk.sh
source tests/lib/tiny_gpt.sh

gpt=("$bin" "${run[@]}" --set data.val="$tmp/t.tokens" --set train.steps=4 --set train.checkpoint_every=2
     --set train.eval_every=2 --set train.eval_steps=2 --set log.every=1 --set data.num_workers=2
     --set train.checkpoint_async=true --set log.tensorboard=true --set train.out_dir=o)
scenario gpt 100 40 o/model.safetensors "${gpt[@]}"

# resumed from step 2 of a run like the one above
mkdir -p "$tmp/base" && (cd "$tmp/base" && "${gpt[@]}" --set train.checkpoint_async=false >/dev/null 2>&1) ||
    fail "the run to resume from"
scenario resume 0 30 o/model.safetensors bash -c 'cp -r "$0" o && exec "$@"' "$tmp/base/o" \
    "${gpt[@]}" --resume o/ckpt/step-2

if e2e_have_fmnist; then
    scenario cnn 0 30 o/model.safetensors "$bin" train --set train.steps=2 --set train.batch_size=16 \
        --set train.threads=1 --set data.num_workers=0 --set train.eval_steps=2 --set train.out_dir=o
else
    echo "cnn: skipped: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)"
fi

scenario eval 0 30 loss.txt bash -c '"$@" >eval.json; r=$?; grep -o "\"eval_loss\":[^,}]*" eval.json >loss.txt; exit $r' _ "$bin" eval --init "$tmp/base/o/model.safetensors" \
    "${run[@]:1}" --set data.val="$tmp/t.tokens" --set train.eval_steps=3 --json

scenario tokenize 60 20 tok-000005.tokens "$bin" data tokenize tok "$tmp/text.txt" "$tmp/text.txt" "$tmp/text.txt" \
    "$tmp/text.txt" --shard-tokens 4000 --jobs 2

if command -v mpirun >/dev/null; then # rank 1's allocations fail
    export ST_FAILALLOC_RANK=1
    scenario launch 12 3 o/model.safetensors "$bin" launch -n 2 "${run[@]}" --set train.steps=3 \
        --set train.checkpoint_every=2 --set dist.timeout_s=20 --set train.out_dir=o
    unset ST_FAILALLOC_RANK
else
    echo "launch: skipped: mpirun is missing (apt-get install openmpi-bin libopenmpi-dev)"
fi
e2e_finish "each allocation failing in turn: a clean error or the same result"
