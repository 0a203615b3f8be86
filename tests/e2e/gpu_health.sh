#!/usr/bin/env bash
# The driver's health readings of a GPU (NVML): a memory row remap pending
# or failed, uncorrectable ECC errors since the driver loaded, clocks
# slowed by heat or the power supply. tests/lib/one_gpu_driver.c as
# libcuda.so.1 shows the probe one GPU and tests/lib/sick_nvml.c as
# libnvidia-ml.so.1 reads it as the environment says (a GPU in such a
# state cannot be made on demand; the probe and check are what is tested):
#  1. healthy: check's health line is ok; the probe prints no health line;
#  2. a failed row remapping: check's health line is a FAIL naming the GPU
#     and the fix, and check is not ready;
#  3. a pending remap, 3 ECC errors and HW thermal slowdown: a warning
#     naming all three (check, and the probe's health line), not a failure;
#     the software power cap and idle clocks alone are no warning;
#  4. readings the GPU does not support, and a driver without the
#     functions: the health line says so (skip), nothing fails;
#  5. NVML numbering a busy GPU first (hidden from CUDA by
#     CUDA_VISIBLE_DEVICES): the probe reads CUDA's GPU, found by its PCI
#     bus id, not NVML's first;
#  6. four GPUs with NVLink bridges joining 0-1 and 2-3 (every GPU has
#     active links): the probe's links say NVLink for those two pairs alone,
#     the others PCIe through the host bridge (NVML's peer-to-peer status
#     per pair, not "both have links").
source "$(dirname "$0")/../lib/e2e.sh"
[ -x "$bin" ] || { echo "FAIL: $bin is not built"; exit 1; }
e2e_need_fmnist
e2e_tmpdir
export OMP_WAIT_POLICY=PASSIVE
mkdir -p "$tmp/lib" "$tmp/old"
cc -shared -fPIC -O2 -o "$tmp/lib/libcuda.so.1" tests/lib/one_gpu_driver.c &&
    cc -shared -fPIC -O2 -o "$tmp/lib/libnvidia-ml.so.1" tests/lib/sick_nvml.c &&
    cp "$tmp/lib/libcuda.so.1" "$tmp/old/" &&
    cc -shared -fPIC -O2 -DST_FAKE_NVML_OLD -o "$tmp/old/libnvidia-ml.so.1" tests/lib/sick_nvml.c ||
    { echo "FAIL: cannot build the fake driver and NVML"; exit 1; }

# check_health LIBDIR: check's health line (the whole output in $tmp/check.txt)
check_health() {
    LD_LIBRARY_PATH="$1" timeout 300 "$bin" check --set train.out_dir="$tmp/out" >"$tmp/check.txt" 2>&1
    grep -E "^[a-zA-Z]+ +health " "$tmp/check.txt"
}
probe() { LD_LIBRARY_PATH="$tmp/lib" timeout 60 "$bin" plan --probe --set model.type=mlp 2>&1; }

# 1. healthy
h=$(check_health "$tmp/lib")
echo "healthy: $h"
grep -qE "^ok +health +1 of 1 GPU read: no memory row remap pending or failed, no uncorrectable ECC error" <<<"$h" ||
    fail "healthy: check's health line: '$h'"
p=$(probe)
grep -q "^  gpu 0: Fake GPU" <<<"$p" || fail "the probe does not see the fake GPU: $p"
! grep -q "health:" <<<"$p" || fail "healthy: the probe printed a health line: $(grep health: <<<"$p")"
ST_FAKE_NVML_CLOCKS=0x5 probe | grep -q "health:" && fail "idle clocks under the software power cap: a health line"

# 2. a failed row remapping
h=$(ST_FAKE_NVML_REMAP=failed check_health "$tmp/lib")
echo "remapping failed: $h"
grep -qE "^FAIL +health +gpu 0 \(Fake GPU\): a memory row remapping failed: the GPU's memory needs service" <<<"$h" ||
    fail "a failed remapping: check's health line: '$h'"
grep -q "^not ready" "$tmp/check.txt" || fail "a failed remapping: check did not end 'not ready'"

# 3. warnings
export ST_FAKE_NVML_REMAP=pending ST_FAKE_NVML_ECC=3 ST_FAKE_NVML_CLOCKS=0x41
h=$(check_health "$tmp/lib")
echo "warnings: $h"
for w in "^warn +health +gpu 0 \(Fake GPU\): " "a memory row remap is pending: it takes effect when the GPU is next reset" \
         "3 uncorrectable ECC errors since the driver loaded" "its clocks are slowed now \(HW thermal slowdown\)"; do
    grep -qE "$w" <<<"$h" || fail "warnings: no '$w' in check's health line: '$h'"
done
probe | grep -qE "^    health: a memory row remap is pending.*; 3 uncorrectable ECC errors.*; its clocks are slowed now" ||
    fail "warnings: the probe's health line: $(probe | grep -A1 'gpu 0')"
unset ST_FAKE_NVML_REMAP ST_FAKE_NVML_ECC ST_FAKE_NVML_CLOCKS

# 4. nothing to read
h=$(ST_FAKE_NVML_REMAP=unsupported ST_FAKE_NVML_ECC=unsupported ST_FAKE_NVML_CLOCKS=unsupported check_health "$tmp/lib")
echo "unsupported: $h"
grep -qE "^skip +health +the driver gives no health readings for the GPU" <<<"$h" || fail "unsupported readings: '$h'"
h=$(check_health "$tmp/old")
echo "an older driver: $h"
grep -qE "^skip +health +the driver gives no health readings" <<<"$h" || fail "an older driver: '$h'"
h=$(ST_FAKE_NVML_ECC=unsupported check_health "$tmp/lib")
echo "no ECC: $h"
grep -qE "^ok +health +1 of 1 GPU read: no memory row remap pending or failed, clocks not slowed by heat or power$" <<<"$h" ||
    fail "a GPU without ECC, otherwise healthy (its line claims only what was read): '$h'"

# 5. NVML's first GPU is not CUDA's: the probe reads the one at CUDA's PCI bus id
p=$(ST_FAKE_NVML_BUSY_FIRST=1 CUDA_VISIBLE_DEVICES=1 probe)
echo "NVML's busy GPU first: $(grep '^  gpu 0:' <<<"$p")"
grep -q "^  gpu 0: Fake GPU, 80.0 GiB (79.0 GiB free)" <<<"$p" ||
    fail "NVML numbering a busy GPU first: the probe read another GPU than CUDA's: $p"

# 6. NVLink bridges joining 0-1 and 2-3: NVLink between those pairs alone
p=$(ST_FAKE_GPUS=4 ST_FAKE_NVML_NVLINK_PAIRS=0-1,2-3 probe)
links=$(grep "^  gpu [0-9] - gpu [0-9]:" <<<"$p")
echo "four GPUs, bridged in pairs:" $links
want="  gpu 0 - gpu 1: NVLink
  gpu 0 - gpu 2: PCIe (through the host bridge)
  gpu 0 - gpu 3: PCIe (through the host bridge)
  gpu 1 - gpu 2: PCIe (through the host bridge)
  gpu 1 - gpu 3: PCIe (through the host bridge)
  gpu 2 - gpu 3: NVLink"
[ "$links" = "$want" ] && grep -q "^  gpu 3: Fake GPU, .*, 4 NVLinks" <<<"$p" ||
    fail "four GPUs bridged in pairs: the probe's links: $p"

e2e_finish "the GPU's health readings (row remapping, ECC errors, clock slowdowns) in check and the probe: ok, warn, FAIL and skip as they say"
