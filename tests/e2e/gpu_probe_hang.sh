#!/usr/bin/env bash
# A GPU that stopped answering before any command touches it (a driver whose
# cuInit never returns: tests/lib/hung_driver.c, loaded by the hardware probe
# as libcuda.so.1 from LD_LIBRARY_PATH) does not hang `scaletrain check`,
# `plan --probe` or `bench`'s prediction: each ends with exit 1 after
# train.device_timeout_s, naming the probe and the key. Without the hung
# driver the same commands answer (the probe reports no driver).
# tests/run.sh: light (it mostly waits: on mpirun, or on the timeouts it provokes)
source "$(dirname "$0")/../lib/e2e.sh"
e2e_tmpdir
mkdir -p "$tmp/driver"
cc -shared -fPIC -O2 -o "$tmp/driver/libcuda.so.1" tests/lib/hung_driver.c ||
    { echo "FAIL: cannot build the hung driver"; exit 1; }
line_re="^scaletrain: scaletrain %s \\(pid [0-9]+\\): probing the GPUs \\(the CUDA driver, NVML\\) has not finished after [0-9]+ s \\(train\\.device_timeout_s: 2 s\\): a GPU that stopped answering"
for cmd in check plan; do
    args=("$cmd" --set train.device_timeout_s=2)
    [ "$cmd" = plan ] && args+=(--probe --set model.type=mlp)
    out=$(LD_LIBRARY_PATH="$tmp/driver" timeout -k 10 60 "$bin" "${args[@]}" 2>&1); rc=$?
    # (check's report may go on a line of its own first)
    if [ $rc -eq 1 ] && grep -qE "$(printf "$line_re" "$cmd")" <<<"$out"; then
        echo "$cmd on a hung driver: exit 1 after the 2 s wait, naming the probe"
    else
        fail "$cmd on a hung driver: exit $rc (want 1 and the watch's line): $(tail -n 3 <<<"$out")"
    fi
done
out=$(timeout 120 "$bin" plan --probe --set model.type=mlp --set train.device_timeout_s=2 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "cuda:" <<<"$out" && echo "plan --probe without it: exit 0, the probe's report" ||
    fail "plan --probe without the hung driver: exit $rc: $(tail -n 3 <<<"$out")"
e2e_finish "a GPU that does not answer the probe ends check and plan after train.device_timeout_s, naming it"
