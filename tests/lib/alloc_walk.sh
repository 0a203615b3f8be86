# The allocation walk of tests/e2e/alloc_failure.sh and
# tests/e2e/emu_alloc_failure.sh, sourced after tests/lib/e2e.sh: checks the
# build, builds the shim (tests/lib/failalloc.c) into $tmp, draws the seed,
# and defines `scenario` (below), which the tests call once per scenario.
[ -x "$bin" ] || { echo "FAIL: $bin is not built"; exit 1; }
command -v cc >/dev/null || e2e_skip "no C compiler for the allocation shim (apt-get install gcc)"
case "$(ldd "$bin" 2>/dev/null)" in *libasan* | *libtsan*) e2e_skip "$bin is a sanitizer build (its runtime owns malloc)" ;; esac
e2e_tmpdir
bin=$(realpath "$bin") # each case runs in a folder of its own
export OMP_WAIT_POLICY=PASSIVE
cc -shared -fPIC -O2 -o "$tmp/failalloc.so" tests/lib/failalloc.c || { echo "FAIL: cannot build the shim"; exit 1; }
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
# allocations_in FUNC CMD...: CMD once, without a failure (in $tmp/jc;
# ST_FAILALLOC_RANK as set), and `cases`, the numbers of the allocations
# that FUNC makes, itself or in a function inlined into it (their callers,
# ST_FAILALLOC_LOG, named by addr2line: -a prints each address, then its
# frames). Sets rc (CMD's exit).
allocations_in() {
    local func=$1
    shift
    rm -rf "$tmp/jc" "$tmp/jc.allocs" && mkdir -p "$tmp/jc"
    (cd "$tmp/jc" && LD_PRELOAD="$tmp/failalloc.so" ST_FAILALLOC_EXE=scaletrain ST_FAILALLOC_LOG="$tmp/jc.allocs" \
        timeout 120 "$@") >"$tmp/jc.txt" 2>&1
    rc=$?
    cases=
    [ -s "$tmp/jc.allocs" ] || return 0
    cases=$(addr2line -a -f -i -C -s -e "$bin" <"$tmp/jc.allocs" |
        awk -v f="$func" '/^0x/ { n++; next } $0 == f && !(n in seen) { seen[n] = 1; print n }')
}
where() { # the failed allocation's function and line
    local at
    at=$(cat "$tmp/count.at" 2>/dev/null) || { echo "no allocation failed"; return; }
    addr2line -e "$bin" -f -C -s "$at" 2>/dev/null | paste -sd ' ' || echo "$at"
}
# scenario NAME FIRST SAMPLE RESULT CMD...: count CMD's allocations, then
# fail each of the first FIRST and SAMPLE drawn from the rest (every one
# with ALLOC_FAILURE_ALL). RESULT, the file that holds CMD's result
# (compared bit for bit), is relative to the run's own folder. Set for the
# call: walk_from=N, the walk starts at allocation N (the first FIRST are
# N, N+1, ...); walk_no_abort=1, a case in which a rank aborts every rank
# ("aborting every rank") fails, whatever its exit.
scenario() {
    local name=$1 first=$2 sample=$3 result=$4 total n clean=0 same=0 l from=${walk_from:-1}
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
        cases=$(seq "$from" "$total")
    else
        cases=$(/usr/bin/python3 -c '
import random, sys
first, sample, total, seed, start = map(int, sys.argv[1:])
rest = list(range(start + first, total + 1))
random.Random(seed).shuffle(rest)
print(*sorted(list(range(start, min(start + first - 1, total) + 1)) + rest[:sample]))' "$first" "$sample" "$total" "$seed" "$from")
    fi
    for n in $cases; do
        one "$name" "$n" "$@"
        if [ -n "${walk_no_abort:-}" ] && grep -q "aborting every rank" "$tmp/$name.log"; then
            fail "$name, allocation $n ($(where)): $(grep -m1 'aborting every rank' "$tmp/$name.log")"
        elif [ "$rc" -eq 1 ] && grep -qE "^scaletrain: error( \(rank [0-9]+\))?: out of memory( \(this process holds [^)]*\))?$" "$tmp/$name.log"; then
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
