#!/usr/bin/env bash
# Fetches, on the development machine, the Debian packages that the lent GPU
# machine lacks to build and run scaletrain: OpenBLAS (OpenMP flavour),
# libyaml, cJSON, zlib's headers, libdeflate and OpenMPI with the libraries
# they load.
# They land in .debs/ (ignored by git); scripts/gpu-session.sh unpacks them
# with `dpkg -x` into a private prefix there (nothing is installed on the
# device's /). The GPU machine reaches no package registry, so this runs here
# and the device tool carries .debs/ (`carry: [".debs"]`).
# Usage: scripts/gpu-fetch-debs.sh        (about 25 MiB; fails above 60 MiB)
#        ARCH=arm64 scripts/gpu-fetch-debs.sh   (for an arm64 GPU machine, a GH200:
#        Debian's arm64 packages, which scripts/deps.sh makes apt-get know)
set -euo pipefail
cd "$(dirname "$0")/.."

# What the build links (with the libraries those load) ...
build=(libopenblas0-openmp libopenblas-openmp-dev libopenblas-dev libgfortran5 libquadmath0 zlib1g
       libyaml-0-2 libyaml-dev libcjson1 libcjson-dev zlib1g-dev libdeflate0 libdeflate-dev)
# ... and OpenMPI (libmpi, mpicc's flags, mpirun) with what its libraries and
# plugins load, beyond a base system (libc, libudev, libuuid, libatomic, zlib).
mpi=(libopenmpi3 libopenmpi-dev openmpi-bin openmpi-common libevent-core-2.1-7
     libevent-pthreads-2.1-7 libhwloc15 libpmix2 libfabric1 libucx0 libibverbs1 ibverbs-providers
     librdmacm1 libnl-3-200 libnl-route-3-200 libnuma1 libpsm2-2 libpsm-infinipath1 libmunge2)

mkdir -p .debs
rm -f .debs/*.deb
# apt-get download writes into the current directory; as root it may warn
# that the _apt user cannot write there, which is harmless.
pkgs=("${build[@]}" "${mpi[@]}")
if [ -n "${ARCH:-}" ]; then
    dpkg --print-foreign-architectures | grep -qx "$ARCH" || [ "$ARCH" = "$(dpkg --print-architecture)" ] || {
        echo "error: apt-get does not know the architecture $ARCH: dpkg --add-architecture $ARCH && apt-get update" >&2
        exit 1
    }
    # Architecture: all packages take no qualifier; those Debian does not build
    # for $ARCH are left out, named (on arm64: libquadmath0, which its gfortran
    # does not use, and the Intel Omni-Path libraries libfabric loads where present)
    arch_pkgs=() left=()
    for p in "${pkgs[@]}"; do
        if apt-cache show --no-all-versions "$p" 2>/dev/null | grep -qx "Architecture: all"; then
            arch_pkgs+=("$p")
        elif apt-cache show --no-all-versions "$p:$ARCH" >/dev/null 2>&1; then
            arch_pkgs+=("$p:$ARCH")
        else
            left+=("$p")
        fi
    done
    pkgs=("${arch_pkgs[@]}")
    [ ${#left[@]} -eq 0 ] || echo "not built for $ARCH, left out: ${left[*]}"
fi
(cd .debs && timeout 600 apt-get -q download "${pkgs[@]}")
total=$(du -cb .debs/*.deb | tail -1 | cut -f1)
echo "$(ls .debs/*.deb | wc -l) packages, $((total / 1048576)) MiB in .debs/"
if [ "$total" -gt $((60 * 1048576)) ]; then
    echo "error: .debs/ is over 60 MiB; the device tool carries at most 64 MiB in all" >&2
    exit 1
fi
