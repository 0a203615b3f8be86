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
# Training: 2 ranks give the same weights, to the bit, with the shared-memory
# all-reduce (default: the buckets of 16 KiB and more; and every bucket), both
# zero-copy (the gradient arena in the segment), and without it
# (dist.shm_allreduce=false).
if [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
    e2e_tmpdir
    train=(train --set model.type=mlp --set model.hidden=[64,32] --set train.batch_size=32 --set train.steps=10
           --set train.threads=1 --set data.num_workers=0 --set data.val= --set dist.bucket_cap_mb=0.05
           --set dist.timeout_s=30 --json --quiet)
    OMP_WAIT_POLICY=PASSIVE "${mpi[@]}" -np 2 "$build/scaletrain" "${train[@]}" --set train.out_dir="$tmp/on" \
        >"$tmp/on.json" 2>&1 || fail "training with shm: $(tail -3 "$tmp/on.json")"
    SCALETRAIN_SHM_MIN_BYTES=4 OMP_WAIT_POLICY=PASSIVE "${mpi[@]}" -np 2 "$build/scaletrain" "${train[@]}" \
        --set train.out_dir="$tmp/all" >"$tmp/all.json" 2>&1 || fail "training, all through shm: $(tail -3 "$tmp/all.json")"
    OMP_WAIT_POLICY=PASSIVE "${mpi[@]}" -np 2 "$build/scaletrain" "${train[@]}" --set dist.shm_allreduce=false \
        --set train.out_dir="$tmp/off" >"$tmp/off.json" 2>&1 || fail "training without shm: $(tail -3 "$tmp/off.json")"
    # "on" and "all" reduce the gradient buckets without copies (the arena in
    # the shared segment), "off" does not.
    for r in on all off; do
        want=true
        [ $r = off ] && want=false
        grep -q "\"grad_zero_copy\":$want" "$tmp/$r.json" && echo "training ($r): grad_zero_copy $want" ||
            fail "training ($r): grad_zero_copy is not $want: $(grep -o '"grad_zero_copy":[a-z]*' "$tmp/$r.json")"
    done
    for r in on all; do
        cmp -s "$tmp/$r/model.safetensors" "$tmp/off/model.safetensors" && echo "training ($r): the same bits as MPI" ||
            fail "training ($r): the weights differ from those trained through MPI"
    done
else
    echo "training comparison skipped: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)"
fi
# A bad setting is an error that names the variable, on every rank, before any collective.
out=$(SCALETRAIN_SHM_MIN_BYTES=lots "${mpi[@]}" -np 2 "$bin" 2>&1)
[ $? -ne 0 ] && grep -q "SCALETRAIN_SHM_MIN_BYTES=lots is not a number" <<<"$out" || fail "bad setting: $out"
e2e_finish "ok"
