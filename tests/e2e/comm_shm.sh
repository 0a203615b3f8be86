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
# (dist.shm_allreduce=false); the same when one rank's environment turns it
# off (rank 0's settings hold for every rank), and when /dev/shm is too small
# for the segment or the zero-copy arena (rank 0 says so once).
if e2e_have_fmnist; then
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
    # dist.deterministic's fold and 16-bit buckets take the copying path: not zero-copy (it said true)
    for r in deterministic grad_dtype; do
        set_=(--set dist.deterministic=true)
        [ $r = grad_dtype ] && set_=(--set dist.grad_dtype=bf16)
        OMP_WAIT_POLICY=PASSIVE "${mpi[@]}" -np 2 "$build/scaletrain" "${train[@]}" "${set_[@]}" \
            --set train.out_dir="$tmp/$r" >"$tmp/$r.json" 2>&1 || fail "training ($r): $(tail -3 "$tmp/$r.json")"
        grep -q '"grad_zero_copy":false' "$tmp/$r.json" && echo "training ($r): grad_zero_copy false" ||
            fail "training ($r): grad_zero_copy is not false: $(grep -o '"grad_zero_copy":[a-z]*' "$tmp/$r.json")"
    done
    for r in on all; do
        cmp -s "$tmp/$r/model.safetensors" "$tmp/off/model.safetensors" && echo "training ($r): the same bits as MPI" ||
            fail "training ($r): the weights differ from those trained through MPI"
    done
    # One rank's environment differs (MPMD: `env VAR=... scaletrain` for that
    # rank alone). Rank 0's SCALETRAIN_SHM_* hold for every rank, so all take
    # one path: rank 1's "off" (and its other piece size) leaves the shared
    # segment and the zero-copy arena on; rank 0's turns both off everywhere.
    # A rank on another path would hang (the watchdog's 30 s) or sum wrongly.
    off_env=(env SCALETRAIN_SHM_MIN_BYTES=0 SCALETRAIN_SHM_PIECE_BYTES=4096)
    for who in 1 0; do
        cmd=("$build/scaletrain" "${train[@]}" --set train.out_dir="$tmp/env$who")
        if [ $who = 1 ]; then
            m=(-np 1 "${cmd[@]}" : -np 1 "${off_env[@]}" "${cmd[@]}"); want=true
        else
            m=(-np 1 "${off_env[@]}" "${cmd[@]}" : -np 1 "${cmd[@]}"); want=false
        fi
        OMP_WAIT_POLICY=PASSIVE "${mpi[@]}" "${m[@]}" >"$tmp/env$who.json" 2>&1 ||
            fail "training, shm off in rank $who's environment: $(tail -3 "$tmp/env$who.json")"
        grep -q "\"grad_zero_copy\":$want" "$tmp/env$who.json" &&
            cmp -s "$tmp/env$who/model.safetensors" "$tmp/off/model.safetensors" &&
            echo "training, shm off in rank $who's environment only: trained, grad_zero_copy $want, the same bits" ||
            fail "training, shm off in rank $who's environment: not grad_zero_copy $want with the same bits: $(tail -3 "$tmp/env$who.json")"
    done
    # A /dev/shm too small (a tmpfs of our size in a private mount namespace,
    # as in a container; OpenMPI's own shared memory kept in /tmp): rank 0
    # says so once and the run trains on, with the same bits. Too small for
    # the all-reduce segment (16 MiB + 4 KiB at 2 ranks): everything through
    # MPI. Room for that segment but not the zero-copy arena's (416 KiB):
    # the gradients copied through the segment. (Before the segment was
    # reserved with posix_fallocate, both died of SIGBUS at its first touch.)
    if [ "$(id -u)" -eq 0 ] && unshare -m sh -c 'mount -t tmpfs -o size=1m tmpfs /dev/shm' 2>/dev/null; then
        small() { # NAME SIZE_BYTES WARNING
            OMP_WAIT_POLICY=PASSIVE unshare -m sh -c 'mount -t tmpfs -o size=$0 tmpfs /dev/shm && exec "$@"' "$2" \
                "${mpi[@]}" --mca btl_vader_backing_directory /tmp -np 2 "$build/scaletrain" "${train[@]}" \
                --set train.out_dir="$tmp/$1" >"$tmp/$1.json" 2>&1 || fail "$1: exit $?: $(tail -3 "$tmp/$1.json")"
            local n; n=$(grep -c "scaletrain: warning: $3 (rank 0: cannot reserve [0-9]* bytes for /scaletrain-allreduce-[0-9-]* in /dev/shm: No space left on device)" "$tmp/$1.json")
            [ "$n" -eq 1 ] && grep -q '"grad_zero_copy":false' "$tmp/$1.json" &&
                cmp -s "$tmp/$1/model.safetensors" "$tmp/off/model.safetensors" &&
                echo "$1: said once, trained, the same bits as MPI" ||
                fail "$1: not one warning '$3', grad_zero_copy false and the same bits ($n warnings): $(cat "$tmp/$1.json")"
        }
        small small_shm $((1 << 20)) "no shared-memory all-reduce"
        small no_room_for_the_arena $((4096 + 16 * 1048576 + 131072)) "no zero-copy gradient all-reduce"
    else
        echo "small /dev/shm skipped: needs root and a private mount namespace (unshare -m)"
    fi
else
    echo "training comparison skipped: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)"
fi
# A bad setting is an error that names the variable, on every rank, before any collective.
out=$(SCALETRAIN_SHM_MIN_BYTES=lots "${mpi[@]}" -np 2 "$bin" 2>&1)
[ $? -ne 0 ] && grep -q "SCALETRAIN_SHM_MIN_BYTES=lots is not a number" <<<"$out" || fail "bad setting: $out"
e2e_finish "ok"
