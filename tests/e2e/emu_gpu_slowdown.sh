#!/usr/bin/env bash
# A GPU whose clocks heat or the power supply slows while it trains (NVML's
# clock event reasons) says so from its own rank: one slowed GPU holds back
# every rank of a data-parallel run. In the CUDA emulator's build (make
# emu), with tests/lib/sick_nvml.c as libnvidia-ml.so.1 (its k-th reading
# of the clocks the k-th value of ST_FAKE_NVML_CLOCKS; the monitor finds
# the emulator's GPU there by its PCI address), log.every 2 and
# log.gpu_interval 1, so the clocks are read at steps 2, 4, 6, ...:
#  1. one GPU slowed (HW thermal slowdown) on the 3rd and 4th readings: a
#     warning at step 6 naming the rank, host, GPU and reason, nothing at
#     step 8, "no longer slowed at step 10"; metrics.jsonl's
#     gpu_clocks_slowed is 0, 0, 64, 64, 0, 0, the progress line says
#     "slowed" at steps 6 and 8; SW power cap and idle (0x5)
#     are not a slowdown;
#  2. 2 ranks, only rank 1's GPU slowed (HW power brake): rank 1 warns that
#     every rank waits for it; rank 0 says nothing of clocks;
#  3. an NVML without the clock readings: no word, no metrics field;
#  4. clocks that come and go at every reading (a power cap at its edge,
#     log.every 1): the first 4 changes said, the next 3 not (at most a
#     line every 5 minutes after 4), and the run's end says the state they
#     left, with their count.
# Given any other build it skips.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_mpirun
e2e_need_fmnist
e2e_need_emu
e2e_tmpdir
e2e_mpi 120
export OMP_WAIT_POLICY=PASSIVE
mkdir -p "$tmp/lib" "$tmp/old"
cc -shared -fPIC -O2 -o "$tmp/lib/libnvidia-ml.so.1" tests/lib/sick_nvml.c &&
    cc -shared -fPIC -O2 -DST_FAKE_NVML_OLD -o "$tmp/old/libnvidia-ml.so.1" tests/lib/sick_nvml.c ||
    { echo "FAIL: cannot build the test's NVML"; exit 1; }
tr=(train --set train.device=cuda --set model.type=mlp --set model.hidden=[32] --set train.batch_size=32
    --set data.val= --set train.threads=1 --set data.num_workers=0 --set train.steps=12 --set log.every=2
    --set log.gpu_interval=1 --set log.progress=off --set dist.timeout_s=60)
slowed() { grep -o '"gpu_clocks_slowed":[0-9]*' "$1/metrics.jsonl" | cut -d: -f2 | tr '\n' ' '; }

# 1. one GPU
ST_CUDAEMU_DEVICES=1 LD_LIBRARY_PATH="$tmp/lib" ST_FAKE_NVML_CLOCKS=0x5,0x1,0x40,0x40,0x1 timeout 120 \
    "$bin" "${tr[@]}" --set train.out_dir="$tmp/one" >"$tmp/one.log" 2>&1 || fail "one GPU: $(tail -3 "$tmp/one.log")"
grep -i "slowed" "$tmp/one.log"
want="^scaletrain: warning: rank 0 \(host $(hostname), cuda:0 .*\): the GPU's clocks are slowed \(HW thermal slowdown\) at step 6: the run trains slower while it lasts"
grep -qE "$want" "$tmp/one.log" || fail "one GPU: no warning at step 6"
[ "$(grep -c "clocks are slowed" "$tmp/one.log")" -eq 1 ] || fail "one GPU: the warning more than once"
grep -qE "^scaletrain: rank 0 .*: the GPU's clocks are no longer slowed at step 10 \(first seen slowed at step 6\)" \
    "$tmp/one.log" || fail "one GPU: no end of the slowdown at step 10"
[ "$(slowed "$tmp/one")" = "0 0 64 64 0 0 " ] || fail "one GPU: gpu_clocks_slowed '$(slowed "$tmp/one")'"
grep -qE "^step 6/12 .* C slowed \| " "$tmp/one.log" && grep -qE "^step 10/12 .* C \| " "$tmp/one.log" ||
    fail "one GPU: the progress lines: $(grep '^step' "$tmp/one.log")"

# 2. two ranks, rank 1's GPU slowed
cat >"$tmp/rank1_slow.sh" <<'EOF'
#!/bin/sh
[ "$OMPI_COMM_WORLD_RANK" = 1 ] && export ST_FAKE_NVML_CLOCKS=0x1,0x80
exec "$@"
EOF
chmod +x "$tmp/rank1_slow.sh"
ST_CUDAEMU_DEVICES=2 "${mpi[@]}" -x LD_LIBRARY_PATH="$tmp/lib" -np 2 "$tmp/rank1_slow.sh" "$bin" "${tr[@]}" \
    --set train.out_dir="$tmp/two" >"$tmp/two.log" 2>&1 || fail "2 GPUs: $(tail -3 "$tmp/two.log")"
grep -i "slowed" "$tmp/two.log"
grep -qE "scaletrain: warning: rank 1 \(host .*, cuda:1 .*\): the GPU's clocks are slowed \(HW power brake\) at step 4: every rank waits for it at each step's gradient exchange" \
    "$tmp/two.log" || fail "2 GPUs: rank 1 did not warn at step 4"
! grep -q "rank 0 .*clocks" "$tmp/two.log" || fail "2 GPUs: rank 0 spoke of its clocks"
[ "$(slowed "$tmp/two")" = "0 0 0 0 0 0 " ] || fail "2 GPUs: rank 0's gpu_clocks_slowed '$(slowed "$tmp/two")'"

# 3. no clock readings
ST_CUDAEMU_DEVICES=1 LD_LIBRARY_PATH="$tmp/old" ST_FAKE_NVML_CLOCKS=0x40 timeout 120 "$bin" "${tr[@]}" \
    --set train.out_dir="$tmp/old-run" >"$tmp/old.log" 2>&1 || fail "an older NVML: $(tail -3 "$tmp/old.log")"
! grep -qi "slowed" "$tmp/old.log" || fail "an older NVML: a word on the clocks"
grep -q '"gpu_temp_c"' "$tmp/old-run/metrics.jsonl" || fail "an older NVML: the monitor did not read it"
! grep -q gpu_clocks_slowed "$tmp/old-run/metrics.jsonl" || fail "an older NVML: gpu_clocks_slowed in the metrics"

# 4. flapping clocks
ST_CUDAEMU_DEVICES=1 LD_LIBRARY_PATH="$tmp/lib" ST_FAKE_NVML_CLOCKS=0x1,0x40,0x1,0x40,0x1,0x40,0x1,0x80 timeout 120 \
    "$bin" "${tr[@]}" --set log.every=1 --set train.out_dir="$tmp/flap" >"$tmp/flap.log" 2>&1 ||
    fail "flapping clocks: $(tail -3 "$tmp/flap.log")"
grep -i "clocks" "$tmp/flap.log"
[ "$(grep -c "the GPU's clocks are slowed (HW thermal slowdown) at step [24]: " "$tmp/flap.log")" -eq 2 ] &&
    [ "$(grep -c "the GPU's clocks are no longer slowed at step [35] " "$tmp/flap.log")" -eq 2 ] ||
    fail "flapping clocks: not the first 4 changes said"
[ "$(grep -c "clocks are" "$tmp/flap.log")" -eq 5 ] || fail "flapping clocks: not 5 lines in all"
grep -qE "^scaletrain: warning: rank 0 .*: the GPU's clocks are slowed \(HW power brake\) at step 12 \(its clocks changed 3 times since step 6, said at most every 300 s\): the run trains slower while it lasts" \
    "$tmp/flap.log" || fail "flapping clocks: the end does not say the state and the changes unsaid"

e2e_finish "a GPU slowed by heat or its power supply is named by its rank when the slowdown starts and ends, and in rank 0's metrics"
