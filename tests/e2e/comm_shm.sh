#!/usr/bin/env bash
# The shared-memory all-reduce (src/comm/comm_shm.c) under real mpirun on 2, 3
# and 4 ranks (tests/mpi/shm_check.c): the same bits as the rank-order sum on
# every rank and as MPI's with 2 ranks, odd counts, counts larger than the
# segment, collectives in flight waited for out of order; once with the
# default 1 MiB pieces and once with 4 KiB pieces (every buffer in many
# pieces, the segment reused many times over). The faults through it are in
# comm_mpi.sh.
source "$(dirname "$0")/../lib/e2e.sh"
bin=$build/tests/mpi/shm_check
e2e_need_mpirun
[ -x "$bin" ] || { echo "FAIL: $bin is not built (make tests)"; exit 1; }
e2e_mpi 120
# (ranks, piece bytes, largest count): the segment holds 8 pieces per rank, so
# 3 Mi floats are 1.5 segments at 1 MiB, and 65537 floats 8 segments at 4 KiB.
for run in "2 1048576 99999999" "4 1048576 65537" "2 4096 65537" "3 4096 65537" "4 4096 65537"; do
    read -r n piece max <<<"$run"
    out=$(SCALETRAIN_SHM_PIECE_BYTES=$piece "${mpi[@]}" -np "$n" "$bin" "$max" 2>&1); rc=$?
    echo "$out" | grep -v '^ *$' | sed "s/^/[np $n, piece $piece] /" | tail -4
    [ $rc -eq 0 ] && grep -q "shm_check: ok ($n ranks)" <<<"$out" || fail "np $n, piece $piece: exit $rc"
done
# A bad setting is an error that names the variable, on every rank, before any collective.
out=$(SCALETRAIN_SHM_MIN_BYTES=lots "${mpi[@]}" -np 2 "$bin" 2>&1)
[ $? -ne 0 ] && grep -q "SCALETRAIN_SHM_MIN_BYTES=lots is not a number" <<<"$out" || fail "bad setting: $out"
e2e_finish "ok"
