#!/usr/bin/env bash
# The whole test suite from a fresh machine: install what is missing, build the
# normal and the sanitizer (address + undefined) builds, run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
jobs=$(nproc 2>/dev/null || echo 2)
make -j"$jobs" all
make -j"$jobs" asan
tests/run.sh build build-asan
