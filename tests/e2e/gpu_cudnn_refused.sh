#!/usr/bin/env bash
# cuDNN that is found but will not start on a real GPU: its library and
# version load (so `model.attention_kernel: cudnn`, or auto's choice on
# sm_90, is taken), and cudnnCreate refuses, as it does on a driver or
# device it cannot use. tests/lib/refuse_cudnn.c, built by the test and put
# first on LD_LIBRARY_PATH under cuDNN's file name, passes every call to the
# real cuDNN but that one. The run must go on with scaletrain's flash
# kernels: exit 0, one warning naming cudnnCreate's status and the flash
# kernels, no attention pass run by cuDNN, cudnnCreate asked once (the
# device remembers the refusal), and the same final loss, to the bit, as a
# run with model.attention_kernel=flash (the same kernels run).
# Skips, saying why, without a GPU (nvidia-smi) or in a build that does not
# load cuDNN by its file name (no cuDNN, the emulator's, CUDA_LAZY=0).
# scripts/gpu-session.sh runs it on the lent GPU machine.
source "$(dirname "$0")/../lib/e2e.sh"
soname=$(grep -ao 'libcudnn\.so\.[0-9]*' "$bin" 2>/dev/null | head -n 1)
[ -n "$soname" ] || e2e_skip "$bin does not load cuDNN by its file name (no cuDNN, the emulator's build or CUDA_LAZY=0)"
# the shim first: built (and so checked) on a machine without a GPU too
e2e_tmpdir
mkdir -p "$tmp/lib"
cc -shared -fPIC -O2 -Wall -Wextra -Iinclude -Isrc -o "$tmp/lib/$soname" tests/lib/refuse_cudnn.c -ldl ||
    { fail "cannot build the shim"; e2e_finish; }
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "${gpus:-0}" -ge 1 ] || e2e_skip "no GPU (nvidia-smi lists none; the shim tests/lib/refuse_cudnn.c built)"
# the real cuDNN: where the program's loader would find it
e2e_real_lib "$soname"
source tests/lib/tiny_gpt.sh
run+=(--set train.device=cuda --set model.n_layer=2 --set model.n_embd=64 --set model.n_head=4
      --set model.block_size=64 --set train.batch_size=8 --set precision=bf16 --set train.steps=6
      --set log.progress=off --json --quiet)

# the reference: the flash kernels chosen
timeout 120 "$bin" "${run[@]}" --set model.attention_kernel=flash --set train.out_dir="$tmp/flash" \
    >"$tmp/flash.json" 2>"$tmp/flash.err" || fail "the run with the flash kernels: $(tail -3 "$tmp/flash.err")"

echo "the shim passes to $real, but cudnnCreate"
LD_LIBRARY_PATH="$tmp/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ST_REFUSE_CUDNN=$real \
    timeout 120 "$bin" "${run[@]}" --set model.attention_kernel=cudnn --set train.out_dir="$tmp/refused" \
    >"$tmp/refused.json" 2>"$tmp/refused.err"
rc=$?
cat "$tmp/refused.err"
[ $rc -eq 0 ] || fail "the run with cuDNN refusing: exit $rc, want 0 (the flash kernels)"
n=$(grep -c "scaletrain: warning: cuDNN attention on .*: cudnnCreate: CUDNN_STATUS_NOT_INITIALIZED; scaletrain's flash kernels run the attention" "$tmp/refused.err")
[ "$n" -eq 1 ] || fail "$n warnings naming cudnnCreate's refusal and the flash kernels, want 1"
grep -q "^refuse_cudnn: cudnnCreate refused 1 times$" "$tmp/refused.err" ||
    fail "cudnnCreate was not asked exactly once: $(grep '^refuse_cudnn' "$tmp/refused.err")"
val() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p" "$2" | tail -n 1; }
calls=$(val attention_cudnn_calls "$tmp/refused.json")
[ "$calls" = 0 ] || fail "cuDNN ran '$calls' attention passes, want 0"
l0=$(val loss "$tmp/flash.json") l1=$(val loss "$tmp/refused.json")
echo "final loss: flash kernels chosen $l0, cuDNN refused $l1"
[ -n "$l0" ] && [ "$l0" = "$l1" ] || fail "final loss '$l1' with cuDNN refused, '$l0' with the flash kernels chosen"
e2e_finish "cuDNN that loads but refuses its handle leaves the attention to the flash kernels, said once, the run the flash kernels' to the bit"
