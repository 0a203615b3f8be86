#!/usr/bin/env bash
# End to end: random configurations (tests/py/config_fuzz.py): 60 runs of
# `scaletrain train`, each with 3 to 8 keys of docs/config.md set to values
# of their kind, on a small mlp, cnn or gpt, a fifth of them under
# `launch -n 2`: each trains or refuses with a message; none crashes, hangs,
# refuses without a word or trains to a NaN. A new seed each run (printed;
# ST_FUZZ_SEED=N repeats one).
set -uo pipefail
build=${1:-build}
bin=$build/scaletrain
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_fmnist
e2e_tmpdir
fails=0
mpi=0
command -v mpirun >/dev/null && mpi=1
seed=${ST_FUZZ_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
cat docs/*.md > "$tmp/corpus.txt"
"$bin" data tokenize "$tmp/corpus.tokens" "$tmp/corpus.txt" >/dev/null || fail "tokenize"
/usr/bin/python3 tests/py/config_fuzz.py "$bin" "$tmp/corpus.tokens" "$tmp" 60 "$seed" "$mpi" ||
    fail "random configurations (seed $seed: ST_FUZZ_SEED=$seed repeats them)"
e2e_finish "random configurations trained or refused, none crashed"
