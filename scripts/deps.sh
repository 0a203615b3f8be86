#!/usr/bin/env bash
# Installs the Debian packages scaletrain builds and tests with, when missing.
set -euo pipefail
pkgs=(build-essential libopenblas-openmp-dev libyaml-dev libcjson-dev zlib1g-dev
      openmpi-bin libopenmpi-dev dataset-fashion-mnist python3-numpy python3-torch python3-pip
      slurm-wlm munge  # slurm-wlm and munge: the single-node SLURM cluster of tests/e2e/slurm.sh
      gnuplot-nox)     # the PNG charts of `scaletrain report`
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "installing: ${missing[*]}"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -q "${missing[@]}"
fi
# TensorBoard's own reader, for tests/py/test_tensorboard.py (PyPI; Debian has
# no package). Debian 12's pip refuses system-wide installs without
# --break-system-packages. Not fatal: offline, that test skips and says why.
py=/usr/bin/python3
if [ -x "$py" ] && ! "$py" -c 'import tensorboard' 2>/dev/null; then
    echo "installing: tensorboard (pip, for the TensorBoard reader test)"
    "$py" -m pip install -q --break-system-packages tensorboard 2>/dev/null ||
        "$py" -m pip install -q tensorboard ||
        echo "deps: could not install tensorboard with pip; tests/py/test_tensorboard.py will skip"
fi
