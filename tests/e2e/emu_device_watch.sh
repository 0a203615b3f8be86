#!/usr/bin/env bash
# The device's stall watch (train.device_timeout_s, src/cuda/device.cu): a
# wait of the host for the GPU that never ends (the emulator's
# ST_CUDAEMU_HANG_SYNC=K: its K-th stream or event wait never returns, as
# behind a kernel that does not end) ends the process with exit 1 and a
# message naming the rank, the device, the stream and the step, within the
# timeout and a period; a run with checkpoints resumes from its latest with
# --resume auto and finishes. A run that does not hang is not ended, nor is
# one whose process is stopped (SIGSTOP) for longer than the timeout while it
# trains: that time is not the device's. A GPU that does not answer when the
# run opens it ends the process the same way (and `launch -n auto`'s count
# of the GPUs), and so does one whose NVML
# readings (the GPU monitor's, on logged steps) never return.
# tests/run.sh passes it the emulator's build folder; given any other build it skips.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_emu
e2e_need_fmnist
e2e_tmpdir
export OMP_WAIT_POLICY=PASSIVE
tr=(train --set train.device=cuda --set model.type=mlp --set model.hidden=[64] --set data.val= --set data.num_workers=0
    --set train.batch_size=32 --set train.threads=1 --set log.progress=off --set train.device_timeout_s=2)

# A hang at the 25th wait: steps in (8 to 16 in the three stream modes), after a checkpoint.
out=$(ST_CUDAEMU_HANG_SYNC=25 timeout -k 10 60 "$bin" "${tr[@]}" --set train.steps=40 --set train.checkpoint_every=4 \
    --set train.out_dir="$tmp/hang" 2>&1); rc=$?
line=$(grep "has not finished after" <<<"$out")
[ $rc -eq 1 ] || fail "a hung wait: exit $rc (want 1): $(tail -n 3 <<<"$out")"
grep -qE "^scaletrain: rank 0 of 1 \(host [^,]+, pid [0-9]+\): what cuda:0 \(.*\) has queued on (its [a-z-]+ stream|its streams \(an event\)) at step [0-9]+ has not finished after [0-9]+ s \(train.device_timeout_s: 2 s\): a kernel that does not end, or a GPU that stopped answering" <<<"$line" ||
    fail "a hung wait: no message naming the rank, device, stream and step: $out"
echo "hung: exit $rc: $(cut -c1-200 <<<"$line")..."
[ -d "$tmp/hang/ckpt" ] && ls "$tmp/hang/ckpt" | grep -q "^step-" || fail "a hung wait: no checkpoint before the hang"
out=$(timeout 120 "$bin" "${tr[@]}" --set train.steps=40 --set train.checkpoint_every=4 --set train.out_dir="$tmp/hang" \
    --resume auto --json --quiet 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q '"steps":40' <<<"$out" || fail "resumed after the hang: exit $rc: $(tail -n 3 <<<"$out")"
echo "resumed after the hang: exit 0, 40 steps"

# A GPU that does not answer before the run begins (the emulator's
# ST_CUDAEMU_HANG_OPEN: the driver's first call never returns).
out=$(ST_CUDAEMU_HANG_OPEN=1 timeout -k 10 60 "$bin" "${tr[@]}" --set train.steps=4 --set train.out_dir="$tmp/open" 2>&1); rc=$?
[ $rc -eq 1 ] || fail "a GPU hung at start-up: exit $rc (want 1): $(tail -n 3 <<<"$out")"
grep -qE "^scaletrain: rank 0 of 1 \(host [^,]+, pid [0-9]+\): finding and opening the GPU \(train.device\) has not finished after [0-9]+ s \(train.device_timeout_s: 2 s\): a GPU that stopped answering" <<<"$out" &&
    echo "a GPU hung at start-up: exit 1, naming the wait" || fail "a GPU hung at start-up: no message naming it: $out"
# The same GPU under `launch -n auto`, which counts the node's GPUs before
# starting anything: the launcher ends, naming the count and the limit the
# command's --set gives (it waited for good, and a batch job with it).
if command -v mpirun >/dev/null; then
    # (the limit from the config file, as the ranks read it: no --set)
    printf 'train: { device_timeout_s: 2 }\n' >"$tmp/watch.yaml"
    lt=()
    for a in "${tr[@]}"; do [ "$a" = train.device_timeout_s=2 ] && unset 'lt[-1]' || lt+=("$a"); done
    out=$(ST_CUDAEMU_HANG_OPEN=1 timeout -k 10 60 "$bin" launch -n auto "${lt[0]}" "$tmp/watch.yaml" "${lt[@]:1}" \
        --set train.steps=4 --set train.out_dir="$tmp/launch" 2>&1); rc=$?
    [ $rc -eq 1 ] && [ ! -e "$tmp/launch" ] || fail "launch -n auto, GPU hung: exit $rc (want 1, nothing started): $out"
    grep -qE "^scaletrain: scaletrain launch \(pid [0-9]+\): counting this node's GPUs for -n auto has not finished after [0-9]+ s \(train.device_timeout_s: 2 s\): a GPU that stopped answering.*nothing was started; -n N starts N ranks without counting the GPUs" <<<"$out" &&
        echo "launch -n auto, GPU hung: exit 1, naming the count" || fail "launch -n auto, GPU hung: $out"
else
    echo "launch -n auto part skipped: mpirun is missing"
fi

# NVML's readings never return (tests/lib/hung_nvml.c as libnvidia-ml.so.1,
# first on LD_LIBRARY_PATH): the monitor's wait is the device's.
mkdir -p "$tmp/nvml"
cc -shared -fPIC -O2 -o "$tmp/nvml/libnvidia-ml.so.1" tests/lib/hung_nvml.c || fail "cannot build the NVML"
out=$(LD_LIBRARY_PATH="$tmp/nvml${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout -k 10 60 "$bin" "${tr[@]}" --set train.steps=20 \
    --set log.every=5 --set train.out_dir="$tmp/nvml/run" 2>&1); rc=$?
[ $rc -eq 1 ] || fail "NVML hung: exit $rc (want 1): $(tail -n 3 <<<"$out")"
grep -qE "^scaletrain: rank 0 of 1 \(host [^,]+, pid [0-9]+\): reading cuda:0 \(.*\)'s memory, use, power and temperature through NVML \(the GPU monitor\) at step [0-9]+ has not finished after [0-9]+ s \(train.device_timeout_s: 2 s\)" <<<"$out" &&
    echo "NVML hung: exit 1, naming the reading" || fail "NVML hung: no message naming the reading: $out"

# Stopped for 4 s (twice the timeout) while training: not the device's time.
# (A wider mlp: the emulator runs the kernels inside the host's waits, so a
# stop lands in one nearly always.)
"$bin" "${tr[@]}" --set model.hidden=[1024,1024] --set train.batch_size=128 --set train.steps=100000 \
    --set train.out_dir="$tmp/stop" --quiet >"$tmp/stop.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do # until it trains (its metrics file has a step)
    grep -q '"step"' "$tmp/stop/metrics.jsonl" 2>/dev/null && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.05
done
last_step() { sed -nE 's/.*"step":([0-9]+).*/\1/p' "$tmp/stop/metrics.jsonl" 2>/dev/null | tail -n 1; }
kill -STOP $pid
s0=$(last_step)
sleep 4 # the stop itself, twice train.device_timeout_s (a stimulus, not a wait for an event)
kill -CONT $pid
# The watch looks at once when the process runs again (its tick is overdue);
# the run going on for 20 more steps shows that it did not fire.
for _ in $(seq 1 1200); do
    s1=$(last_step)
    [ -n "$s1" ] && [ "$s1" -ge $((s0 + 20)) ] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.05
done
if kill -0 $pid 2>/dev/null && [ "$(last_step)" -ge $((s0 + 20)) ]; then
    echo "stopped for 4 s with a 2 s timeout at step $s0: still training at step $(last_step)"
    kill -TERM $pid
    wait $pid
else
    kill -KILL $pid 2>/dev/null
    wait $pid
    fail "stopped for 4 s at step $s0: the run did not go on ($(last_step)): $(tail -n 3 "$tmp/stop.log")"
fi
grep -q "has not finished after" "$tmp/stop.log" && fail "stopped for 4 s: the watch fired: $(cat "$tmp/stop.log")"
e2e_finish "a hung device wait ends the run with its message, and the run resumes; a stopped process is not blamed"
