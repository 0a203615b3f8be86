#!/usr/bin/env bash
# The whole test suite from a fresh machine: install what is missing, build the
# normal, the sanitizer (address + undefined), the ThreadSanitizer and the
# CUDA emulator's builds (the last where the CUDA toolkit is installed), run
# the static analyzer, run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh build
# What only the tests need (PyTorch, the data set, SLURM, arm64's tools:
# most of a fresh machine's install) goes in while the builds run; the
# tests start once it has ended. (Not fatal: the tests that lack a package
# skip, saying why.)
scripts/deps.sh tests > >(sed -u 's/^/deps, beside the builds: /') 2>&1 &
deps_tests=$!
jobs=$(nproc 2>/dev/null || echo 2)
# The CUDA kernels for one architecture, sm_80 and its PTX (docs/cuda.md):
# every kernel through nvcc and ptxas in less than half the time of the
# default list; exported, so that the tests' own make calls build the same
# (the Makefile rebuilds objects built for other architectures).
export CUDA_ARCH="${CUDA_ARCH:--gencode arch=compute_80,code=sm_80 -gencode arch=compute_80,code=compute_80}"
# The four builds in one make: their objects share the cores to the end,
# where one after another each ended on its last links with a core idle.
emu=
if [ -f "${CUDA_HOME:-/usr/local/cuda}/include/cuda_runtime.h" ]; then
    emu=build-emu
else
    echo "the CUDA emulator's build is left out: no CUDA toolkit headers (${CUDA_HOME:-/usr/local/cuda}/include)"
fi
make -j"$jobs" all asan tsan ${emu:+emu}
wait $deps_tests || echo "deps: installing the tests' packages failed (exit $?): the tests that need them skip, saying why"
# clang's static analyzer (make analyze: a report fails the suite; README,
# Tests) runs as the first of the tests, in one lane, where it fills the
# time the others spend waiting on processes and timeouts
export ST_TEST_ANALYZE=1
tests/run.sh build build-asan "$emu" build-tsan
