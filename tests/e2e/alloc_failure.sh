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
# rank and the launcher too), not hang it. Then allocations found by their
# function on one rank of two: a checkpoint's bookkeeping (the ranks agree
# on the failure), the CPU calibration and the profiler trace's gather (the
# run goes on); and a draw of rank 1's allocations under ZeRO-2 once
# training has begun, where no rank may abort the others.
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

    # A checkpoint's own bookkeeping (checkpoint.c's job_new) out of memory
    # on rank 1 alone, under ZeRO-2 (every rank writes its shard), in a
    # synchronous and an asynchronous save: the ranks agree on the failure
    # (rank 0 names rank 1), save the rescue checkpoint and end with exit 1;
    # not an abort of every rank with the steps since the last checkpoint
    # lost. The allocations to fail are found by their caller
    # (ST_FAILALLOC_LOG, addr2line), not by number. (ALLOC_FAILURE_ONLY's
    # name for it: bookkeeping)
    if [[ " ${ALLOC_FAILURE_ONLY:-bookkeeping} " != *" bookkeeping "* ]]; then
        :
    elif command -v addr2line >/dev/null; then
        for how in sync async; do
            zero=("$bin" launch -n 2 "${run[@]}" --set train.steps=4 --set train.checkpoint_every=2
                  --set dist.strategy=zero2 --set dist.timeout_s=20 --set train.out_dir=o
                  --set train.checkpoint_async=$([ $how = async ] && echo true || echo false))
            export ST_FAILALLOC_RANK=1
            allocations_in job_new "${zero[@]}"
            [ "$rc" -eq 0 ] || fail "zero2 $how without a failure: exit $rc: $(tail -n 3 "$tmp/jc.txt")"
            [ "$(wc -w <<<"$cases")" -eq 2 ] || fail "zero2 $how: rank 1 made $(wc -w <<<"$cases") checkpoint jobs, not 2 (steps 2 and 4)"
            for n in $cases; do
                one jn "$n" "${zero[@]}"
                log=$tmp/jn.log
                [ "$rc" -eq 1 ] || fail "zero2 $how, rank 1's allocation $n ($(where)): exit $rc, not 1"
                grep -q "^\[rank 1\] scaletrain: error (rank 1): the checkpoint of step [24] was not saved.*out of memory for a checkpoint's bookkeeping" "$log" ||
                    fail "zero2 $how, allocation $n ($(where)): rank 1 does not say its checkpoint ran out of memory: $(grep -m2 error "$log")"
                grep -q "^\[rank 0\] scaletrain: error (rank 0): the checkpoint of step [24] was not saved.*failed on another rank, rank 1" "$log" ||
                    fail "zero2 $how, allocation $n: rank 0 does not name rank 1: $(grep -m2 error "$log")"
                ! grep -q "aborting every rank" "$log" || fail "zero2 $how, allocation $n: a rank aborted every rank: $(grep -m1 aborting "$log")"
                # (a synchronous save failing at step 2, the first, leaves none: a
                # failed save is not tried again by the rescue; any other, step
                # 2's or the rescue's of step 3)
                l=$tmp/jn.out/o/ckpt/latest
                if [ $how = async ] || ! grep -q "checkpoint of step 2 was not saved" "$log"; then
                    [ -s "$l" ] && [ -f "$tmp/jn.out/o/ckpt/$(cat "$l")/state.json" ] ||
                        fail "zero2 $how, allocation $n: no whole checkpoint in o/ckpt (the rescue's, or step 2's)"
                elif [ -e "$l" ]; then
                    fail "zero2 $how, allocation $n: o/ckpt/latest names $(cat "$l") after the first save failed"
                fi
            done
            unset ST_FAILALLOC_RANK
        done
        echo "checkpoint bookkeeping out of memory on rank 1 (zero2, sync and async): agreed, rescued, exit 1"

        # The CPU's calibration (for metrics.jsonl's mfu), rank 0's alone:
        # out of memory for its matrices, the run goes on without an mfu
        # (a warning says so), where rank 0 used to end alone and leave rank 1
        # waiting in the first step until dist.timeout_s.
        export ST_FAILALLOC_RANK=0
        ddp=("$bin" launch -n 2 "${run[@]}" --set train.steps=3 --set dist.timeout_s=60 --set train.out_dir=o)
        allocations_in st_device_calibrate_cpu "${ddp[@]}"
        [ "$rc" -eq 0 ] || fail "the 2-rank run without a failure: exit $rc: $(tail -n 3 "$tmp/jc.txt")"
        [ -n "$cases" ] || fail "rank 0 made no allocation in st_device_calibrate_cpu"
        for n in $cases; do
            one cal "$n" "${ddp[@]}"
            [ "$rc" -eq 0 ] || fail "rank 0's calibration allocation $n ($(where)): exit $rc: $(grep -m2 error "$tmp/cal.log")"
            grep -q "warning: the CPU's peak was not measured, so metrics.jsonl has no mfu.*out of memory" "$tmp/cal.log" ||
                fail "calibration allocation $n: no warning that says the mfu is left out, and why"
            cmp -s "$tmp/cal.out/o/model.safetensors" "$tmp/jc/o/model.safetensors" ||
                fail "calibration allocation $n: the weights differ from the run's without a failure"
            ! grep -q '"mfu"' "$tmp/cal.out/o/metrics.jsonl" || fail "calibration allocation $n: metrics.jsonl has an mfu"
            grep -q '"mfu"' "$tmp/jc/o/metrics.jsonl" || fail "the run without a failure: metrics.jsonl has no mfu"
        done
        unset ST_FAILALLOC_RANK
        echo "the CPU calibration out of memory on rank 0: the run finished, without an mfu, saying so"

        # The profiler trace's gather (st_trace_write) out of memory on rank
        # 1: agreed before each gather, a warning on every rank and no
        # trace.json, the run finished with the same weights; rank 1 used to
        # leave the others in the gather.
        export ST_FAILALLOC_RANK=1
        prof=("${ddp[@]}" --set log.trace=true --set "log.trace_steps=[1,2]")
        allocations_in st_trace_write "${prof[@]}"
        [ "$rc" -eq 0 ] && [ -s "$tmp/jc/o/trace.json" ] ||
            fail "the traced run without a failure: exit $rc, trace.json $(ls "$tmp/jc/o/trace.json" 2>&1)"
        [ -n "$cases" ] || fail "rank 1 made no allocation in st_trace_write"
        for n in $cases; do
            one prof "$n" "${prof[@]}"
            [ "$rc" -eq 0 ] || fail "rank 1's trace allocation $n ($(where)): exit $rc: $(grep -m2 error "$tmp/prof.log")"
            [ "$(grep -c "warning: .*out of memory gathering the profiler trace.*; the run goes on without its profiler trace\|warning: memory for the profiler trace's .* failed on another rank, rank 1.*; the run goes on without its profiler trace" "$tmp/prof.log")" -eq 2 ] ||
                fail "trace allocation $n: not a warning on each rank: $(grep -m3 'warning\|error' "$tmp/prof.log")"
            [ ! -e "$tmp/prof.out/o/trace.json" ] || fail "trace allocation $n: a trace.json was written"
            cmp -s "$tmp/prof.out/o/model.safetensors" "$tmp/jc/o/model.safetensors" ||
                fail "trace allocation $n: the weights differ from the run's without a failure"
        done
        unset ST_FAILALLOC_RANK
        echo "the profiler trace's gather out of memory on rank 1: a warning on both ranks, the run finished"

        # The ranks' comparison of their settings (st_dist_agree_config) and
        # of their models (st_ddp_agree) out of memory on rank 1: agreed
        # before the comparison, exit 1 with rank 1's error and rank 0
        # naming rank 1; rank 1 used to return before it, and the others
        # waited in it until rank 1 aborted them all.
        export ST_FAILALLOC_RANK=1
        for fn in st_dist_agree_config st_ddp_agree; do
            allocations_in $fn "${ddp[@]}"
            [ "$rc" -eq 0 ] || fail "the 2-rank run without a failure: exit $rc: $(tail -n 3 "$tmp/jc.txt")"
            [ -n "$cases" ] || fail "rank 1 made no allocation in $fn"
            for n in $cases; do
                one cmp "$n" "${ddp[@]}"
                log=$tmp/cmp.log
                [ "$rc" -eq 1 ] && grep -q "^\[rank 1\] scaletrain: error (rank 1): out of host memory comparing" "$log" &&
                    grep -q "^\[rank 0\] scaletrain: error (rank 0): .* failed on another rank, rank 1" "$log" &&
                    ! grep -q "aborting every rank" "$log" ||
                    fail "$fn, rank 1's allocation $n ($(where)): exit $rc: $(grep -m3 'error\|abort' "$log")"
            done
        done
        unset ST_FAILALLOC_RANK
        echo "the ranks' comparison of settings and models out of memory on rank 1: agreed, exit 1"

        # Once training has begun (from the first evaluation on), rank 1 out
        # of memory anywhere under ZeRO-2 (evaluation, asynchronous
        # checkpoints, the text sample, the trace): the ranks agree on it
        # and end together, with exit 1, or it goes on to the same weights;
        # never one rank aborting every rank. CI draws 8 of those
        # allocations (ALLOC_FAILURE_ALL: every one; ALLOC_FAILURE_ONLY's
        # names for it: "bookkeeping zero2").
        export ST_FAILALLOC_RANK=1
        loop=("$bin" launch -n 2 "${run[@]}" --set data.val="$tmp/t.tokens" --set train.steps=4
              --set train.checkpoint_every=2 --set train.eval_every=2 --set train.eval_steps=2
              --set train.checkpoint_async=true --set dist.strategy=zero2 --set dist.timeout_s=20
              --set log.sample_every=2 --set log.trace=true --set "log.trace_steps=[2,3]" --set train.out_dir=o)
        allocations_in st_session_evaluate "${loop[@]}"
        [ "$rc" -eq 0 ] && [ -n "$cases" ] ||
            fail "the zero2 run without a failure: exit $rc, evaluation allocations: $cases: $(tail -n 3 "$tmp/jc.txt")"
        walk_from=$(head -1 <<<"$cases") walk_no_abort=1 scenario zero2 0 8 o/model.safetensors "${loop[@]}"
        unset ST_FAILALLOC_RANK
    else
        echo "checkpoint bookkeeping: skipped: no addr2line (apt-get install binutils)"
    fi
else
    echo "launch: skipped: mpirun is missing (apt-get install openmpi-bin libopenmpi-dev)"
fi
e2e_finish "each allocation failing in turn: a clean error or the same result"
