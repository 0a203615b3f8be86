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
source "$(dirname "$0")/../lib/e2e.sh"
[ -x "$bin" ] || { echo "FAIL: $bin is not built"; exit 1; }
command -v cc >/dev/null || e2e_skip "no C compiler for the allocation shim (apt-get install gcc)"
case "$(ldd "$bin" 2>/dev/null)" in *libasan* | *libtsan*) e2e_skip "$bin is a sanitizer build (its runtime owns malloc)" ;; esac
e2e_tmpdir
bin=$(realpath "$bin") # each case runs in a folder of its own
export OMP_WAIT_POLICY=PASSIVE
cc -shared -fPIC -O2 -o "$tmp/failalloc.so" tests/lib/failalloc.c || { echo "FAIL: cannot build the shim"; exit 1; }
source tests/lib/tiny_gpt.sh
seed=${ALLOC_FAILURE_SEED:-$RANDOM}
echo "seed $seed (ALLOC_FAILURE_SEED=$seed repeats the draw; ALLOC_FAILURE_ALL=1 walks every allocation)"

# one NAME N CMD...: CMD, in $tmp/NAME.out, with its N-th allocation
# failing (0: none); its output in $tmp/NAME.log. Sets rc.
one() {
    local name=$1 n=$2
    shift 2
    rm -rf "$tmp/$name.out" "$tmp/count" "$tmp/count.at"
    mkdir -p "$tmp/$name.out"
    (cd "$tmp/$name.out" && LD_PRELOAD="$tmp/failalloc.so" ST_FAILALLOC_EXE=scaletrain ST_FAILALLOC_AT=$n \
        ST_FAILALLOC_REPORT="$tmp/count" timeout 120 "$@") >"$tmp/$name.log" 2>&1
    rc=$?
}
where() { # the failed allocation's function and line
    local at
    at=$(cat "$tmp/count.at" 2>/dev/null) || { echo "no allocation failed"; return; }
    addr2line -e "$bin" -f -C -s "$at" 2>/dev/null | paste -sd ' ' || echo "$at"
}
# scenario NAME FIRST SAMPLE RESULT CMD...: count CMD's allocations, then
# fail each of the first FIRST and SAMPLE drawn from the rest (every one
# with ALLOC_FAILURE_ALL). RESULT, the file that holds CMD's result
# (compared bit for bit), is relative to the run's own folder.
scenario() {
    local name=$1 first=$2 sample=$3 result=$4 total n clean=0 same=0 l
    shift 4
    case " ${ALLOC_FAILURE_ONLY:-$name} " in *" $name "*) ;; *) return ;; esac
    first=$((first * ${ALLOC_FAILURE_SCALE:-1})) sample=$((sample * ${ALLOC_FAILURE_SCALE:-1}))
    one "$name" 0 "$@"
    if [ "$rc" -ne 0 ] || [ ! -s "$tmp/count" ]; then
        fail "$name without a failure: exit $rc: $(tail -n 3 "$tmp/$name.log")"
        return
    fi
    total=$(cat "$tmp/count")
    cp "$tmp/$name.out/$result" "$tmp/$name.want"
    local cases
    if [ -n "${ALLOC_FAILURE_ALL:-}" ]; then
        cases=$(seq 1 "$total")
    else
        cases=$(/usr/bin/python3 -c '
import random, sys
first, sample, total, seed = map(int, sys.argv[1:])
rest = list(range(first + 1, total + 1))
random.Random(seed).shuffle(rest)
print(*sorted(list(range(1, min(first, total) + 1)) + rest[:sample]))' "$first" "$sample" "$total" "$seed")
    fi
    for n in $cases; do
        one "$name" "$n" "$@"
        if [ "$rc" -eq 1 ] && grep -qE "^scaletrain: error( \(rank [0-9]+\))?: out of memory( \(this process holds [^)]*\))?$" "$tmp/$name.log"; then
            fail "$name, allocation $n ($(where)): the message does not say what the memory was for"
        elif [ "$rc" -eq 1 ] && grep -qE "^(\[rank [0-9]+\] )?scaletrain: error.*out of memory" "$tmp/$name.log" &&
            ! grep -qE "^(\[rank [0-9]+\] )?scaletrain: error.*out of memory.* \(this process holds [0-9.]+ GiB and may take [0-9.]+ GiB more, as .* allows\)$" "$tmp/$name.log"; then
            fail "$name, allocation $n ($(where)): the error does not say what this process holds and may take: $(grep "scaletrain: error" "$tmp/$name.log" | head -2)"
        elif [ "$rc" -eq 1 ] && grep -qi "memory" "$tmp/$name.log"; then
            clean=$((clean + 1))
        elif [ "$rc" -eq 0 ] && cmp -s "$tmp/$name.out/$result" "$tmp/$name.want"; then
            same=$((same + 1))
        elif [ "$rc" -eq 0 ]; then
            fail "$name, allocation $n ($(where)): finished with a different $result"
        else
            fail "$name, allocation $n ($(where)): exit $rc: $(grep -v '^step' "$tmp/$name.log" | tail -n 2 | paste -sd ' ')"
        fi
        for l in "$tmp/$name.out"/*/ckpt/latest "$tmp/$name.out"/ckpt/latest; do
            [ -s "$l" ] || continue
            local d
            d=$(dirname "$l")/$(cat "$l")
            [ -f "$d/state.json" ] && [ -f "$d/model.safetensors" ] ||
                fail "$name, allocation $n ($(where)): ckpt/latest names $d, which is not a whole checkpoint"
        done
    done
    echo "$name: $(wc -w <<<"$cases") of $total allocations failed in turn: $clean ended with an out-of-memory error, $same finished with the same result"
}

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
