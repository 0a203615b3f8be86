#!/usr/bin/env bash
# A CUDA build on a machine without the CUDA libraries (src/cuda/libs.h):
# the runtime is linked in and cuBLASLt, NCCL, cuDNN and NVRTC are loaded
# when first needed, so the binary must start and train on the CPU, saying
# why. In a mount namespace of the test's own, every folder of the binary's
# rpath that holds one of those libraries is hidden under an empty one:
#  1. the binary starts (the loader needs none of them): plan --probe;
#  2. the default run with train.device auto trains on the CPU, its
#     effective configuration saying why: no driver (this machine), or on
#     one with a GPU, cuBLASLt missing;
#  3. train.device cuda is an error saying the same (with cuBLASLt, naming
#     it and LD_LIBRARY_PATH);
#  4. check runs to its end;
#  5. test_cuda_libs finds none of the four, each failure naming it;
#  6. with the libraries' folder on LD_LIBRARY_PATH (the fix the message
#     gives) test_cuda_libs loads all four and calls into each.
# Skips, saying why, for a build that links the libraries at start (no
# CUDA, CUDA_LAZY=0, the emulator), without root's mount namespaces, or
# where the libraries share a folder with the system's own.
source "$(dirname "$0")/../lib/e2e.sh"
[ -x "$bin" ] || { echo "FAIL: $bin is not built"; exit 1; }
e2e_need_fmnist
e2e_tmpdir
export OMP_WAIT_POLICY=PASSIVE
libs_test=$build/tests/test_cuda_libs
[ -x "$libs_test" ] || fail "$libs_test is not built"
"$libs_test" >"$tmp/libs_here.txt" 2>&1
[ $? -ne 77 ] || e2e_skip "$(tail -1 "$tmp/libs_here.txt")"
grep -q "^ok   cuBLASLt" "$tmp/libs_here.txt" ||
    e2e_skip "cuBLASLt does not load here either: $(cat "$tmp/libs_here.txt")"
[ "$(id -u)" -eq 0 ] && unshare -m true 2>/dev/null || e2e_skip "needs root and unshare -m (a mount namespace)"

# the folders to hide: those of the binary's rpath holding a CUDA library
hide=()
for d in $(readelf -d "$bin" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p; s/.*(RPATH).*\[\(.*\)\]/\1/p' | tr ':' ' '); do
    d=$(realpath -m "$d")
    [[ " ${hide[*]} " == *" $d "* ]] && continue
    ls "$d"/libcublasLt.so* "$d"/libnccl.so* "$d"/libcudnn.so* "$d"/libnvrtc.so* >/dev/null 2>&1 || continue
    ls "$d"/libc.so.6 "$d"/libz.so.1 >/dev/null 2>&1 &&
        e2e_skip "the CUDA libraries share $d with the system's own libraries: hiding it would hide those"
    hide+=("$d")
done
((${#hide[@]})) || e2e_skip "no folder of $bin's rpath holds the CUDA libraries"
mkdir "$tmp/empty" "$tmp/cudalib"
# hidden COMMAND...: runs it with the folders hidden, the first one's libraries at $tmp/cudalib
hidden() {
    unshare -m bash -c 'lib=$1 at=$2 empty=$3 n=$4; shift 4
        mount --bind "$lib" "$at" || exit 111
        for ((i = 0; i < n; i++)); do mount --bind "$empty" "$1" || exit 111; shift; done
        exec "$@"' _ "${hide[0]}" "$tmp/cudalib" "$tmp/empty" "${#hide[@]}" "${hide[@]}" "$@"
}

# 1. it starts
hidden "$bin" plan --probe >"$tmp/probe.txt" 2>&1 || fail "plan --probe: $(cat "$tmp/probe.txt")"
grep -q "^cuda: " "$tmp/probe.txt" || fail "plan --probe has no cuda line: $(cat "$tmp/probe.txt")"

# 2. train.device auto: the CPU, saying why
hidden "$bin" train --set train.steps=3 --set train.out_dir="$tmp/run" >"$tmp/auto.txt" 2>&1 ||
    fail "train (device auto) failed: $(tail -5 "$tmp/auto.txt")"
grep -q "device: *cpu *# auto: no CUDA device" "$tmp/auto.txt" ||
    fail "the effective configuration does not say why the CPU: $(grep device: "$tmp/auto.txt")"
grep -q "^done: 3 steps" "$tmp/auto.txt" || fail "the run did not finish: $(tail -3 "$tmp/auto.txt")"

# 3. train.device cuda: an error with the fix
hidden "$bin" train --set train.steps=3 --set train.device=cuda --set train.out_dir="$tmp/run2" \
    >"$tmp/cuda.txt" 2>&1 && fail "train.device cuda succeeded without cuBLASLt"
grep -q "error: train.device cuda: no CUDA device" "$tmp/cuda.txt" || fail "train.device cuda's error: $(cat "$tmp/cuda.txt")"
! grep -q "no CUDA device usable" "$tmp/cuda.txt" ||
    grep -q "no CUDA device usable: cuBLASLt could not be loaded (libcublasLt.so.[0-9]*: cannot open shared object file.*LD_LIBRARY_PATH" \
        "$tmp/cuda.txt" || fail "train.device cuda's error: $(cat "$tmp/cuda.txt")"

# 4. check runs to its end
hidden "$bin" check >"$tmp/check.txt" 2>&1
grep -q "^skip  cuda " "$tmp/check.txt" || fail "check's cuda line: $(cat "$tmp/check.txt")"

# 5. none of the four loads, each failure naming its library and the fix
hidden "$libs_test" >"$tmp/libs.txt" 2>&1 || fail "test_cuda_libs with the libraries hidden: $(cat "$tmp/libs.txt")"
for l in cuBLASLt NCCL cuDNN NVRTC; do
    grep -q "^skipped: $l: $l could not be loaded (.*): install it, or put its folder on LD_LIBRARY_PATH" "$tmp/libs.txt" ||
        fail "$l's failure to load: $(cat "$tmp/libs.txt")"
done

# 6. LD_LIBRARY_PATH finds them again
if [ ${#hide[@]} -eq 1 ]; then
    hidden env LD_LIBRARY_PATH="$tmp/cudalib" "$libs_test" >"$tmp/libs_path.txt" 2>&1 ||
        fail "test_cuda_libs with LD_LIBRARY_PATH: $(cat "$tmp/libs_path.txt")"
    [ "$(grep -c "^ok   " "$tmp/libs_path.txt")" -eq "$(grep -c "^ok   " "$tmp/libs_here.txt")" ] ||
        fail "with LD_LIBRARY_PATH not every library loads as it does here: $(cat "$tmp/libs_path.txt")"
else
    echo "(the libraries sit in ${#hide[@]} folders: the LD_LIBRARY_PATH case runs where they share one)"
fi
e2e_finish "a CUDA build without the CUDA libraries starts, trains on the CPU and says why; LD_LIBRARY_PATH finds them"
