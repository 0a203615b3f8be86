#!/usr/bin/env bash
# Installs the Debian packages scaletrain builds and tests with, when missing.
set -euo pipefail
pkgs=(build-essential libopenblas-openmp-dev libyaml-dev libcjson-dev zlib1g-dev
      openmpi-bin libopenmpi-dev dataset-fashion-mnist python3-numpy python3-torch
      slurm-wlm munge) # slurm-wlm and munge: the single-node SLURM cluster of tests/e2e/slurm.sh
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
