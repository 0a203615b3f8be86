# What the tests that make a matrix product overflow share (tests/e2e/
# weights_overflow.sh, emu_grads_overflow.sh), sourced after e2e_tmpdir:
# tests/lib/overflow_sgemm.c built into $tmp/overflow_sgemm.so (or the test
# skips, saying why), and
#   overflow_products S [STRATEGY]: how many products a run of
#     "${run[@]}" with train.steps S ran (on two ranks under scaletrain
#     launch and dist.strategy STRATEGY: rank 1's), as the shim counts them
#     at exit; empty when it did not say.
cc -O1 -shared -fPIC -o "$tmp/overflow_sgemm.so" "$(dirname "${BASH_SOURCE[0]}")/overflow_sgemm.c" -ldl ||
    e2e_skip "tests/lib/overflow_sgemm.c does not build (apt-get install gcc libopenblas-dev)"
overflow_products() {
    local two=() out
    [ $# -gt 1 ] && two=(launch -n 2 --cores-per-rank 1)
    out=$(mktemp -d "$tmp/count.XXXXXX")
    ST_OVERFLOW_SGEMM_AT=100000000 LD_PRELOAD="$tmp/overflow_sgemm.so" timeout 300 "$bin" "${two[@]}" "${run[@]}" \
        --set train.steps="$1" ${2:+--set dist.strategy=$2} --set train.out_dir="$out/run" 2>&1 |
        sed -nE 's/^(\[rank 1\] )?overflow_sgemm: .*no overflow, ([0-9]+) products ran$/\2/p' | tail -n 1
}
