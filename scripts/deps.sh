#!/usr/bin/env bash
# Installs the Debian packages scaletrain builds and tests with, when missing.
# scripts/deps.sh [build|tests]: `build`, what the builds need (compilers,
# libraries, cudnn-frontend's headers); `tests`, what only the tests and the
# default run use (the data set, PyTorch, SLURM, arm64's cross tools, ...),
# which scripts/test.sh installs while the builds run; neither: both.
set -euo pipefail
what=${1:-all}
case "$what" in build | tests | all) ;; *) echo "usage: scripts/deps.sh [build|tests]" >&2; exit 2 ;; esac
build_pkgs=(build-essential libopenblas-openmp-dev libyaml-dev libcjson-dev zlib1g-dev libdeflate-dev
            openmpi-bin libopenmpi-dev python3-pip
            clang libomp-dev)  # `make tsan` with LLVM's OpenMP, whose Archer lets TSan check the parallel loops
test_pkgs=(dataset-fashion-mnist python3-numpy python3-torch
           slurm-wlm munge  # slurm-wlm and munge: the single-node SLURM cluster of tests/e2e/slurm.sh
           gnuplot-nox)     # the PNG charts of `scaletrain report`
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
# apt_install PACKAGE...: apt-get update and install those not installed yet
# (none missing: nothing run); its status is apt-get's
apt_install() {
    local p missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    ((${#missing[@]})) || return 0
    echo "installing: ${missing[*]}"
    $sudo apt-get update -q &&
        DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -q "${missing[@]}"
}
pkgs=()
[ "$what" = tests ] || pkgs+=("${build_pkgs[@]}")
[ "$what" = build ] || pkgs+=("${test_pkgs[@]}")
apt_install "${pkgs[@]}"
# arm64 (tests/e2e/arm64.sh, `make arm64`, `make arm64-cuda`): cross compilers, qemu's
# user-mode emulator and Debian's arm64 libraries, installed beside the
# machine's own (multiarch), on an x86-64 Debian or Ubuntu. Not fatal:
# where the package sources have no arm64 (Ubuntu's x86-64 mirrors serve
# it from ports.ubuntu.com only) the architecture is taken back out and
# that test skips, saying why.
arm_pkgs=(gcc-aarch64-linux-gnu g++-aarch64-linux-gnu qemu-user libc6-dev:arm64 libstdc++6:arm64 libopenblas-openmp-dev:arm64
          libyaml-dev:arm64 libcjson-dev:arm64 zlib1g-dev:arm64 libdeflate-dev:arm64)
if [ "$what" != build ] && [ "$(dpkg --print-architecture 2>/dev/null)" = amd64 ]; then
    added=""
    if ! dpkg --print-foreign-architectures | grep -qx arm64; then
        $sudo dpkg --add-architecture arm64
        added=1
    fi
    if ! apt_install "${arm_pkgs[@]}"; then
        echo "deps: could not install the arm64 packages; tests/e2e/arm64.sh will skip"
        if [ -n "$added" ]; then
            $sudo dpkg --remove-architecture arm64 && $sudo apt-get update -q >/dev/null 2>&1 || true
        fi
    fi
fi
# TensorBoard's own reader, for tests/py/test_tensorboard.py (PyPI; Debian has
# no package). Debian 12's pip refuses system-wide installs without
# --break-system-packages. Not fatal: offline, that test skips and says why.
py=/usr/bin/python3
if [ "$what" != build ] && [ -x "$py" ] && ! "$py" -c 'import tensorboard' 2>/dev/null; then
    echo "installing: tensorboard (pip, for the TensorBoard reader test)"
    "$py" -m pip install -q --break-system-packages tensorboard 2>/dev/null ||
        "$py" -m pip install -q tensorboard ||
        echo "deps: could not install tensorboard with pip; tests/py/test_tensorboard.py will skip"
fi
# fetch_wheel DEST EXTRACT PIP_ARGS...: pip-download one wheel (PIP_ARGS
# name it, with any --platform) and unpack it into DEST with the python
# code EXTRACT (argv: the wheel, the folder to fill; it exits non-zero when
# the wheel lacks what it takes), through DEST.part, renamed when whole.
# Status 1, and no DEST, when either fails (offline, say).
fetch_wheel() {
    local dest=$1 extract=$2 tmp rc=1
    shift 2
    tmp=$(mktemp -d)
    if "$py" -m pip download -q --no-deps --only-binary :all: -d "$tmp" "$@" 2>/dev/null &&
        "$py" -c "$extract" "$(ls "$tmp"/*.whl | head -1)" "$dest.part" && mv -T "$dest.part" "$dest"; then
        rc=0
    fi
    rm -rf "$tmp" "$dest.part"
    return $rc
}
# NVIDIA's cudnn-frontend (header-only C++, PyPI's nvidia-cudnn-frontend
# wheel holds its include/), for cuDNN's fused attention
# (src/cuda/attention_cudnn.cpp, model.attention_kernel): into
# .tools/cudnn-frontend/include (ignored by git), when the CUDA toolkit has
# cuDNN. Not fatal: without it the build leaves cuDNN's attention out and
# says so when asked for it.
fe_version=1.32.0
fe_dir=.tools/cudnn-frontend
cuda_home=${CUDA_HOME:-/usr/local/cuda}
if [ "$what" != tests ] && [ -f "$cuda_home/include/cudnn.h" ] && [ ! -f "$fe_dir/include/cudnn_frontend.h" ]; then
    echo "fetching: cudnn-frontend $fe_version headers (pip download nvidia-cudnn-frontend) into $fe_dir"
    if fetch_wheel "$fe_dir" '
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
names = [n for n in z.namelist() if n.startswith("include/")]
if "include/cudnn_frontend.h" not in names:
    sys.exit("the wheel holds no include/cudnn_frontend.h")
z.extractall(sys.argv[2], names)' "nvidia-cudnn-frontend==$fe_version"; then
        echo "cudnn-frontend $fe_version: $(find "$fe_dir/include" -name '*.h' | wc -l) headers in $fe_dir/include"
    else
        echo "deps: could not fetch cudnn-frontend; the build leaves cuDNN's attention out"
    fi
fi
# The arm64 static CUDA runtime (`make arm64-cuda` links the CUDA build for
# an arm64 host against it; tests/e2e/arm64.sh with ARM64_CUDA=1): PyPI's
# nvidia-cuda-runtime wheel for aarch64, of this toolkit's version, into
# .tools/cuda-aarch64/lib (ignored by git), where the toolkit and the arm64
# cross compiler are here. Not fatal: without it make arm64-cuda builds the
# library only.
rt_dir=.tools/cuda-aarch64
if [ "$what" != build ] && [ -x "$cuda_home/bin/nvcc" ] && command -v aarch64-linux-gnu-g++ >/dev/null &&
    [ ! -f "$rt_dir/lib/libcudart_static.a" ]; then
    # the runtime's version: the toolkit's wheel metadata where it has one, else nvcc's major.minor
    rt_version=""
    for d in "$cuda_home"/dist-info/nvidia_cuda_runtime-*.dist-info; do
        [ -d "$d" ] && rt_version=${d##*/nvidia_cuda_runtime-} && rt_version=${rt_version%.dist-info}
    done
    [ -n "$rt_version" ] ||
        rt_version=$("$cuda_home/bin/nvcc" --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1.*/p' || true)
    echo "fetching: the arm64 CUDA runtime $rt_version (pip download nvidia-cuda-runtime, aarch64) into $rt_dir"
    if [ -n "$rt_version" ] && fetch_wheel "$rt_dir" '
import os, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
names = [n for n in z.namelist() if n.endswith("/lib/libcudart_static.a")]
if len(names) != 1:
    sys.exit("the wheel holds no lib/libcudart_static.a")
os.makedirs(sys.argv[2] + "/lib")
with open(sys.argv[2] + "/lib/libcudart_static.a", "wb") as f:
    f.write(z.read(names[0]))' --platform manylinux2014_aarch64 --python-version 3.11 "nvidia-cuda-runtime==$rt_version"; then
        echo "arm64 CUDA runtime $rt_version: $rt_dir/lib/libcudart_static.a"
    else
        echo "deps: could not fetch the arm64 CUDA runtime; make arm64-cuda builds the library only"
    fi
fi
