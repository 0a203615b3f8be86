#!/usr/bin/env bash
# The default run from a fresh machine: install what is missing, build, and
# train the default model (a small CNN on Fashion-MNIST, one epoch). Extra
# arguments go to `scaletrain train`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
make -j"$(nproc 2>/dev/null || echo 2)" build/scaletrain
exec build/scaletrain train "$@"
