#!/usr/bin/env bash
# Ranks started with different settings (issue 4), under real mpirun (MPMD:
# `mpirun -np 1 A : -np 1 B`), a tiny gpt on a token file:
# (a) each dist.* key and precision set differently on rank 1 (ZeRO against
#     DDP, deterministic against bucketed, ...): every run exits non-zero
#     (not 124: no hang) well within dist.timeout_s, with one error on each
#     rank naming the key, both values and both ranks; nothing was set up
#     (no "memory per rank" line: the strategy's set-up comes after the
#     agreement) and nothing saved;
# (b) 3 ranks, two of them with another dist.timeout_s: "ranks 1-2 have 30";
# (b') a batch that 3 ranks cannot split: one error from each rank, no abort;
# (c) the same strategy but different models: a head count (every tensor's
#     shape the same) is named as a setting; a vocabulary from each rank's
#     own token file (model.vocab_size auto: the configs agree) by the model
#     check, naming the tensor; both before the strategy's set-up (no
#     "memory per rank" line); a validation set on one rank only, by its size;
# (d) the control: the same settings on both ranks train and exit 0 (but
#     train.threads, a rank's own: 1 on rank 0, auto on rank 1, whose count
#     takes an all-gather that rank 0 must join too).
# (f) under ZeRO, a train.out_dir rank 1 alone sees: refused before the first step.
# (g) --resume on some ranks only, or --init on a rank above 0 alone: refused, naming it.
# (h) rank 0's first writes to train.out_dir failing: an error on every rank, not an abort.
# (e) a rank that fails before it starts MPI (its config file missing), with
#     mpirun told to let the others run on (as an srun without
#     --kill-on-bad-exit does): the other rank ends after dist.timeout_s,
#     saying it waited for the others to start MPI, where it waited for ever.
# tests/run.sh: light (it mostly waits: on mpirun, or on the timeouts it provokes)
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_mpirun
[ -x "$bin" ] || { echo "FAIL: $bin is not built"; exit 1; }
e2e_tmpdir
e2e_mpi 40
export OMP_WAIT_POLICY=PASSIVE

for i in $(seq 1 200); do printf 'line %010d\n' $((i * 7919 % 100003)); done >"$tmp/t.txt"
"$bin" data tokenize "$tmp/t.tokens" "$tmp/t.txt" >/dev/null || fail "tokenize"
T=20 # dist.timeout_s: a hang would take at least this long
gpt=(--set model.type=gpt --set data.type=tokens --set data.train="$tmp/t.tokens" --set data.val=
     --set model.n_layer=1 --set model.n_head=2 --set model.n_embd=16 --set model.block_size=16
     --set train.threads=1 --set data.num_workers=0 --set train.batch_size=8 --set train.steps=3
     --set dist.timeout_s=$T --set log.peak_gflops=10 --set log.progress=off)

# differ NAME KEY V0 V1 [RANKS_TEXT]: rank 0 with KEY=V0, rank 1 with KEY=V1.
differ() {
    local name=$1 key=$2 v0=$3 v1=$4 d=$tmp/$1
    local t0=$SECONDS
    out=$("${mpi[@]}" -np 1 "$bin" train "${gpt[@]}" --set train.out_dir="$d" --set "$key=$v0" : \
        -np 1 "$bin" train "${gpt[@]}" --set train.out_dir="$d" --set "$key=$v1" 2>&1); rc=$?
    local dt=$((SECONDS - t0))
    echo "--- $name: exit $rc in ${dt}s: $(grep -m1 'scaletrain: error' <<<"$out")"
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "$name: exit $rc"
    [ $dt -lt $T ] || fail "$name: ${dt}s, as long as the watchdog's timeout: it waited instead of failing"
    local want="the ranks were started with different settings: the first difference is in $key: rank 0 has $v0; rank 1 has $v1 (start every rank"
    [ "$(grep -cF -- "$want" <<<"$out")" -eq 2 ] || fail "$name: not one '$want' from each rank: $out"
    ! grep -q "memory per rank\|collectives out of step\|timed out" <<<"$out" ||
        fail "$name: the ranks got past the agreement: $out"
    [ ! -e "$d/model.safetensors" ] && [ ! -e "$d/ckpt" ] || fail "$name: something was saved"
}
differ strategy dist.strategy ddp zero1
differ zero2 dist.strategy zero2 zero1
differ grad_dtype dist.grad_dtype fp32 bf16
differ deterministic dist.deterministic false true
differ sync_batchnorm dist.sync_batchnorm false true
differ bucket_cap dist.bucket_cap_mb 25 0.001
differ timeout dist.timeout_s $T 30
differ shm_allreduce dist.shm_allreduce true false
differ comm dist.comm auto nccl
differ precision precision fp32 bf16

# (b) 3 ranks: the ranks that differ from rank 0 are grouped.
out=$("${mpi[@]}" -np 1 "$bin" train "${gpt[@]}" --set train.batch_size=6 --set train.out_dir="$tmp/three" : \
    -np 2 "$bin" train "${gpt[@]}" --set train.batch_size=6 --set train.out_dir="$tmp/three" \
    --set dist.timeout_s=30 2>&1); rc=$?
echo "--- 3 ranks: exit $rc: $(grep -m1 'scaletrain: error' <<<"$out")"
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "3 ranks: exit $rc"
[ "$(grep -cF "first difference is in dist.timeout_s: rank 0 has $T; ranks 1-2 have 30 (" <<<"$out")" -eq 3 ] ||
    fail "3 ranks: not one error naming ranks 1-2 from each rank: $out"

# (b') the same settings, but a batch (from a config file) that 3 ranks cannot
# split: every rank returns the error (no MPI_Abort: it follows from settings
# they agreed on), naming the file, the line and the key, and how to fix it.
printf 'train:\n  batch_size: 8\n' >"$tmp/split.yaml"
from_file=()
for a in "${gpt[@]}"; do # the same settings but the batch size
    if [ "$a" = train.batch_size=8 ]; then unset 'from_file[-1]'; else from_file+=("$a"); fi
done
out=$("${mpi[@]}" -np 3 "$bin" train "$tmp/split.yaml" "${from_file[@]}" --set train.out_dir="$tmp/split" 2>&1); rc=$?
echo "--- batch over 3 ranks: exit $rc: $(grep -m1 'scaletrain: error' <<<"$out")"
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "batch over 3 ranks: exit $rc"
want="$tmp/split.yaml: train.batch_size (8, split.yaml:2) cannot be split over 3 ranks (the global batch is micro_batch_size x accumulation steps x ranks); start a number of ranks that divides it (e.g. 2 or 4), or set train.batch_size to a multiple of 3 (e.g. 6 or 9; a resume with another batch goes on from the same place in the data)"
[ "$(grep -cF "$want" <<<"$out")" -eq 3 ] &&
    ! grep -q "MPI_ABORT" <<<"$out" || fail "batch over 3 ranks: not one '$want' from each rank, or an abort: $out"
# dist.comm nccl where the ranks agreed on the CPU (no GPU here; on a GPU machine, train.device cpu):
# every rank returns the error (it was an MPI_Abort, "aborting every rank")
out=$("${mpi[@]}" -np 2 "$bin" train "${gpt[@]}" --set dist.comm=nccl --set train.device=cpu \
    --set train.out_dir="$tmp/nccl" 2>&1); rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] &&
    [ "$(grep -c "error (rank [01]): dist.comm (nccl, --set) needs a GPU, and this rank trains on the CPU" <<<"$out")" -eq 2 ] &&
    ! grep -q "MPI_ABORT\|aborting every rank" <<<"$out" || fail "dist.comm nccl on CPU ranks: exit $rc: $out"

# (c) different models, the same (sharded) strategy.
out=$("${mpi[@]}" -np 1 "$bin" train "${gpt[@]}" --set dist.strategy=zero1 --set train.out_dir="$tmp/model" : \
    -np 1 "$bin" train "${gpt[@]}" --set dist.strategy=zero1 --set train.out_dir="$tmp/model" \
    --set model.n_head=4 2>&1); rc=$?
echo "--- heads: exit $rc: $(grep -m1 'scaletrain: error' <<<"$out")"
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "heads: exit $rc"
[ "$(grep -cF "different settings: the first difference is in model.n_head: rank 0 has 2; rank 1 has 4" <<<"$out")" -eq 2 ] ||
    fail "heads: not one error naming model.n_head from each rank: $out"
# (the same tokens, in a file saying vocabulary 512: bytes 24-31 of the header)
cp "$tmp/t.tokens" "$tmp/v512.tokens"
printf '\000\002' | dd of="$tmp/v512.tokens" bs=1 seek=24 conv=notrunc status=none
out=$("${mpi[@]}" -np 1 "$bin" train "${gpt[@]}" --set dist.strategy=zero1 --set train.out_dir="$tmp/model" : \
    -np 1 "$bin" train "${gpt[@]}" --set dist.strategy=zero1 --set train.out_dir="$tmp/model" \
    --set data.train="$tmp/v512.tokens" 2>&1); rc=$?
echo "--- model: exit $rc: $(grep -m1 'scaletrain: error' <<<"$out")"
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "model: exit $rc"
grep -qE "different models or data settings: the first difference is in tensor 0 \(in declaration order\): rank 0 has parameter [^ ]+ \[256, 16\]; rank 1 has parameter [^ ]+ \[512, 16\]" <<<"$out" ||
    fail "model: no error naming the tensor and both shapes: $out"
! grep -q "memory per rank" <<<"$out" || fail "model: ZeRO was set up before the ranks agreed: $out"
# validation data on one rank only (data.val may differ by rank, as a
# node-local path, but not in what it holds): the shares would not add up
out=$("${mpi[@]}" -np 1 "$bin" train "${gpt[@]}" --set train.out_dir="$tmp/val" : \
    -np 1 "$bin" train "${gpt[@]}" --set train.out_dir="$tmp/val" --set data.val="$tmp/t.tokens" 2>&1); rc=$?
echo "--- val: exit $rc: $(grep -m1 'scaletrain: error' <<<"$out")"
[ "$(grep -cF "the first difference is in validation samples: rank 0 has none (data.val empty); rank 1 has 199" <<<"$out")" -eq 2 ] ||
    fail "val: not one error naming the validation samples from each rank: $out"

# (d) the control: the same settings (ZeRO-1, bf16 gradients are DDP-only) train.
out=$("${mpi[@]}" -np 1 "$bin" train "${gpt[@]}" --set dist.strategy=zero1 --set train.out_dir="$tmp/same" \
    --quiet --json : -np 1 "$bin" train "${gpt[@]}" --set dist.strategy=zero1 --set train.out_dir="$tmp/same" \
    --set train.threads=auto --quiet --json 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q '"ranks":2' <<<"$out" && grep -q '"strategy":"zero1"' <<<"$out" ||
    fail "the same settings on both ranks: exit $rc: $out"
echo "--- the same settings: exit $rc, $(grep -o '"strategy":"zero1"' <<<"$out"), 2 ranks"

# (f) ZeRO with a train.out_dir of rank 1's own: refused before the first
#     step, naming it (each rank writes its shard into the checkpoints)
out=$("${mpi[@]}" -np 1 "$bin" train "${gpt[@]}" --set dist.strategy=zero1 --set train.out_dir="$tmp/od0" : \
    -np 1 "$bin" train "${gpt[@]}" --set dist.strategy=zero1 --set train.out_dir="$tmp/od1" 2>&1); rc=$?
echo "--- out_dir: exit $rc: $(grep -m1 'scaletrain: error' <<<"$out")"
grep -q "rank 1 does not see in its train.out_dir, $tmp/od1, the folder rank 0 just made in its own" <<<"$out" &&
    ! grep -q "^step \|step 1/" <<<"$out" || fail "out_dir: not refused before the first step: $out"
[ -z "$(ls -A "$tmp/od0" | grep -v 'run.lock\|metrics.jsonl')" ] || fail "out_dir: rank 0 left $(ls -A "$tmp/od0")"
# (h) rank 0's first writes to train.out_dir fail (metrics.jsonl a
#     directory): every rank ends with it, each saying so, not an abort
mkdir -p "$tmp/fw/metrics.jsonl"
out=$("${mpi[@]}" -np 2 "$bin" train "${gpt[@]}" --set train.out_dir="$tmp/fw" 2>&1); rc=$?
echo "--- first writes: exit $rc: $(grep -m1 'scaletrain: error' <<<"$out")"
[ $rc -eq 1 ] && grep -q "error (rank 0): $tmp/fw/metrics.jsonl: cannot open for writing: Is a directory" <<<"$out" &&
    grep -q "error (rank 1): rank 0's first writes to train.out_dir failed on another rank, rank 0" <<<"$out" &&
    ! grep -q "MPI_ABORT\|aborting every rank" <<<"$out" || fail "first writes on rank 0 failing: exit $rc: $out"
# (g) --resume on rank 0 alone, --init on rank 1 alone: refused, naming the option
out=$("${mpi[@]}" -np 1 "$bin" train "${gpt[@]}" --set train.out_dir="$tmp/opt" --resume auto : \
    -np 1 "$bin" train "${gpt[@]}" --set train.out_dir="$tmp/opt" 2>&1)
[ "$(grep -cF "different options: the first difference is in --resume: rank 0 has auto; rank 1 has none" <<<"$out")" -eq 2 ] ||
    fail "--resume on rank 0 alone: $out"
"${mpi[@]}" -np 1 "$bin" train "${gpt[@]}" --set train.out_dir="$tmp/w" --quiet >/dev/null 2>&1 || fail "the run for --init"
out=$("${mpi[@]}" -np 1 "$bin" train "${gpt[@]}" --set train.out_dir="$tmp/opt" : \
    -np 1 "$bin" train "${gpt[@]}" --set train.out_dir="$tmp/opt" --init "$tmp/w" 2>&1)
grep -qF "rank 1 was given --init $tmp/w, and rank 0 none" <<<"$out" || fail "--init on rank 1 alone: $out"
echo "--- options: --resume on one rank, --init on rank 1 alone refused"
# (e) a rank that never starts MPI
# (mpirun told so may itself wait on, its ranks ended without MPI_Finalize:
# what counts is rank 0's own end, with its message; mpirun is then ended)
mkfifo "$tmp/noinit.fifo"
timeout 30 mpirun --allow-run-as-root --oversubscribe --bind-to none --mca orte_abort_on_non_zero_status 0 \
    -np 1 "$bin" train "${gpt[@]}" --set dist.timeout_s=2 --set train.out_dir="$tmp/noinit" : \
    -np 1 "$bin" train "$tmp/missing.yaml" >"$tmp/noinit.fifo" 2>&1 &
mp=$!
pid= ended=
while IFS= read -r l; do
    echo "$l" >>"$tmp/noinit.log"
    [ -z "$pid" ] || continue
    pid=$(sed -nE 's/^scaletrain: rank 0 \(host .*, pid ([0-9]+)\): starting MPI.*/\1/p' <<<"$l")
    [ -n "$pid" ] || continue
    e2e_gone "$pid" && ended=1 # (it ends itself right after its message)
    kill -TERM $mp 2>/dev/null
done <"$tmp/noinit.fifo"
wait $mp
out=$(cat "$tmp/noinit.log")
echo "--- a rank without MPI: $(grep -m1 'MPI_Init' <<<"$out")"
[ -n "$pid" ] && [ -n "$ended" ] || fail "a rank without MPI: rank 0 (pid '$pid') did not end itself"
grep -q "rank 0 (host .*): starting MPI (MPI_Init_thread) with the other ranks has not finished after 2 s (dist.timeout_s: 2 s): another rank did not start MPI" <<<"$out" ||
    fail "a rank without MPI: rank 0 did not say what it waited for: $out"
e2e_finish "all passed"
