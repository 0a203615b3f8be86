# The set-up every end-to-end test (tests/e2e/*.sh) shares, sourced first thing:
#   source "$(dirname "$0")/../lib/e2e.sh"
# It lives outside tests/e2e/ because tests/run.sh runs every tests/e2e/*.sh.
# It sets `set -uo pipefail`, $build (the test's first argument, default
# build), $bin ($build/scaletrain; a test may redefine it) and provides:
#   e2e_need_mpirun, e2e_need_fmnist, e2e_need_numpy, e2e_need_slurm [CMD...]:
#       skip the test (print
#       "NAME: skipped: why (the apt-get command)", exit 77) without it;
#   e2e_skip WHY: the same for any other reason;
#   e2e_real_lib SONAME: real=, the library of that file name $bin's loader
#       would find (a shim's target); skip without one;
#   e2e_have_fmnist: true when Fashion-MNIST is installed (for a part of a
#       test that needs it);
#   e2e_need_emu: skip unless $bin is the CUDA emulator's build (make emu;
#       tests/run.sh passes it to tests/e2e/emu_*.sh), and give the ranks two
#       emulated GPUs (ST_CUDAEMU_DEVICES=2, one per rank as NCCL wants);
#   e2e_tmpdir: $tmp, a new directory removed at exit, after the test's own
#       e2e_cleanup function if it defines one (the trap calls it by name);
#       with KEEP_TMP set in the environment it is kept and named instead;
#   e2e_mpi [SECONDS]: the array mpi=([timeout SECONDS] mpirun ... --bind-to
#       none), for "${mpi[@]}" -np N PROGRAM;
#   e2e_wait_ckpt PID DIR: poll (at most ~60 s) until DIR/ckpt/latest
#       exists (true), or PID has ended (false);
#   e2e_alive PID: true while PID runs (a zombie counts as gone);
#   e2e_gone PID: wait, at most ~5 s, for PID to go (true) or not (false):
#       a launcher may return while the kernel still tears a killed rank down;
#   fail MESSAGE: print "FAIL: MESSAGE" and count it in $fails;
#   e2e_finish [MESSAGE]: exit 1 after any fail, else print "NAME: MESSAGE"
#       (when given) and exit 0.
set -uo pipefail
build=${1:-build}
bin=$build/scaletrain
e2e_name=$(basename "$0" .sh)
fails=0

e2e_skip() { echo "$e2e_name: skipped: $*"; exit 77; }
e2e_need_mpirun() {
    command -v mpirun >/dev/null || e2e_skip "mpirun is missing (apt-get install openmpi-bin libopenmpi-dev)"
}
# The local SLURM test cluster (tests/slurm/cluster.sh): its daemons and
# commands (and any more named), run as root with munge's key.
e2e_need_slurm() {
    local c
    for c in slurmctld slurmd munged sbatch srun scontrol "$@"; do
        command -v "$c" >/dev/null || e2e_skip "$c is missing (apt-get install slurm-wlm munge; scripts/deps.sh installs them)"
    done
    [ "$(id -u)" -eq 0 ] && [ -r /etc/munge/munge.key ] ||
        e2e_skip "the test cluster runs its daemons as root and needs /etc/munge/munge.key"
}
e2e_have_fmnist() { [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; }
# The library $bin's loader would find for file name $1 (on LD_LIBRARY_PATH,
# $bin's run path, or ldconfig's list), as real=...: for a test's shim of
# that name to pass calls on to; the test skips when there is none.
e2e_real_lib() {
    local d dirs
    real=
    IFS=: read -ra dirs <<<"${LD_LIBRARY_PATH:-}:$(readelf -d "$bin" | sed -n 's/.*R[UN]*PATH.*\[\(.*\)\]/\1/p')"
    for d in "${dirs[@]}"; do
        [ -n "$d" ] && [ -e "$d/$1" ] && real=$(readlink -f "$d/$1") && break
    done
    [ -n "$real" ] || real=$(ldconfig -p | awk -v s="$1" '$1 == s { print $NF; exit }')
    [ -n "$real" ] || e2e_skip "$1 is not on LD_LIBRARY_PATH, $bin's run path or ldconfig's list"
}
e2e_need_fmnist() {
    e2e_have_fmnist || e2e_skip "Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)"
}
e2e_need_emu() {
    grep -qa "cudaemu: " "$bin" 2>/dev/null ||
        e2e_skip "$build is not the CUDA emulator's build (make emu; tests/run.sh BUILD ASAN build-emu)"
    export ST_CUDAEMU_DEVICES=2
}
e2e_need_numpy() {
    /usr/bin/python3 -c 'import numpy' 2>/dev/null || e2e_skip "NumPy is not installed (apt-get install python3-numpy)"
}
e2e_wait_ckpt() {
    local i
    for i in $(seq 1 600); do
        [ -s "$2/ckpt/latest" ] && return 0
        kill -0 "$1" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
e2e_alive() { kill -0 "$1" 2>/dev/null && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }
e2e_gone() {
    local i
    for i in $(seq 1 100); do
        e2e_alive "$1" || return 0
        sleep 0.05
    done
    ! e2e_alive "$1"
}
# e2e_tmpdir [memory]: $tmp, removed at exit. With `memory`, in /dev/shm
# where it is a tmpfs with 1 GiB free: for tests that give storage a limit
# of a second or so and stall it by a shim (tests/lib/slowfs.c), so that a
# real disk's fsync, slow while other tests write, cannot trip the limit.
e2e_tmpdir() {
    local in=
    if [ "${1:-}" = memory ] && [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ] &&
        [ "$(df -k --output=avail /dev/shm 2>/dev/null | tail -1)" -gt 1048576 ] 2>/dev/null; then
        in=/dev/shm
    fi
    tmp=$(mktemp -d ${in:+-p "$in"})
    [ -z "${KEEP_TMP:-}" ] || echo "tmp: $tmp"
    trap 'if declare -F e2e_cleanup >/dev/null; then e2e_cleanup; fi; [ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"' EXIT
}
e2e_mpi() {
    mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
    [ $# -eq 0 ] || mpi=(timeout "$1" "${mpi[@]}")
}
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
e2e_finish() {
    if [ "$fails" -ne 0 ]; then
        echo "$e2e_name: $fails failure(s)"
        exit 1
    fi
    [ $# -eq 0 ] || echo "$e2e_name: $*"
    exit 0
}
