# The body of tests/e2e/rescue_checkpoint.sh (the CPU) and
# emu_rescue_checkpoint.sh (an emulated GPU), sourced after tests/lib/e2e.sh
# and e2e_tmpdir with the arrays dev (the run's device settings) and launch
# (empty, or mpirun and its ranks), $label (a folder of $tmp of its own) and
# $victim: train (the training file is shortened) or val (the validation
# file, read whole by an evaluation every 10 steps: the error comes in the
# evaluation after the update, so step N is a multiple of 10); what it
# checks is written there; $workers (default 0) is data.num_workers. It
# leaves run=(...) set: its runs' settings.
export OMP_WAIT_POLICY=PASSIVE
d=$tmp/$label
mkdir -p "$d"
for i in $(seq 1 20000); do echo "the quick brown fox $i jumps over the lazy dog"; done >"$d/text.txt"
"$bin" data tokenize "$d/a.tokens" "$d/text.txt" >/dev/null || fail tokenize
cp "$d/a.tokens" "$d/u.tokens"
val=(--set data.val= --set train.eval_every=0)
if [ "$victim" = val ]; then
    head -n 3000 "$d/text.txt" >"$d/val.txt"
    "$bin" data tokenize "$d/v0.tokens" "$d/val.txt" >/dev/null || fail tokenize
    cp "$d/v0.tokens" "$d/v.tokens"
    val=(--set data.val="$d/v.tokens" --set train.eval_every=10 --set train.eval_steps=0)
fi
file=$([ "$victim" = val ] && echo v.tokens || echo u.tokens) orig=$([ "$victim" = val ] && echo v0.tokens || echo a.tokens)
run=(train --set model.type=gpt --set data.type=tokens --set data.train="$d/u.tokens" "${val[@]}"
     --set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 --set model.block_size=16
     --set train.batch_size=4 "${dev[@]}" --set train.threads=1 --set data.num_workers=${workers:-0}
     --set data.shuffle=false --set optim.schedule=constant --set optim.warmup_steps=0
     --set train.checkpoint_every=0 --set train.checkpoint_every_s=0
     --set log.progress=off --set log.every=10)

# 1. The progress lines are read as they come; at step 50 (3,200 tokens, 6.4 KB
# into the training file, past its first page) the file is cut to its header
# and 18 tokens.
shortened=
while IFS= read -r line; do
    echo "$line" >>"$d/run.log"
    if [ -z "$shortened" ] && [[ $line =~ ^step\ ([0-9]+)/ ]] && [ "${BASH_REMATCH[1]}" -ge 50 ]; then
        truncate -s 100 "$d/$file" && shortened=yes
    fi
done < <(timeout 300 "${launch[@]}" "$bin" "${run[@]}" --set train.steps=1000000 --set train.out_dir="$d/o" 2>&1; echo "exit $?")
[ -n "$shortened" ] || fail "the run never reached step 50: $(tail -3 "$d/run.log")"
grep -q "^exit 1$" "$d/run.log" || fail "the run did not fail: $(tail -2 "$d/run.log")"
err=$(grep -E "error( \(rank [0-9]+\))?:|aborting every rank:" "$d/run.log")
grep -q "$file: the file was shortened while it was read" <<<"$err" || fail "no data error: $err"
# (one rank: "the weights ... after step N were saved first, to DIR"; one of
# several: "rank K saved the weights ... after step N first, to DIR", and
# "another rank saved ..." from a rank that failed too and found it written)
n=$(sed -nE 's/.*saved the weights and optimizer state after step ([0-9]+) first, to [^ ]*ckpt\/step-([0-9]+).*/\1 \2/p
              s/.*the weights and optimizer state after step ([0-9]+) were saved first, to [^ ]*ckpt\/step-([0-9]+).*/\1 \2/p' \
    <<<"$err" | head -n 1)
read -r n n2 <<<"$n"
[ -n "${n:-}" ] && [ "$n" = "$n2" ] && [ "$n" -ge 50 ] || fail "no checkpoint of step 50 or later named: $err"
[ "$victim" != val ] || [ $((${n:-1} % 10)) -eq 0 ] || fail "the evaluation's failure saved step $n, not a multiple of 10"
# (a rank that saves alone says its error first: the others wait in a
# collective, and their watchdog may end the job before the save ends)
[ "$label" != two ] || grep -qE "error \(rank [01] of 2, host [^)]*\): .*$file: the file was shortened while it was read.*; saving the finished steps alone before every rank is ended" \
    "$d/run.log" || fail "the rank that saved alone did not say its error first: $err"
[ "$(ls "$d/o/ckpt" 2>/dev/null | tr '\n' ' ')" = "latest step-$n " ] ||
    fail "checkpoints: $(ls "$d/o/ckpt" 2>/dev/null | tr '\n' ' ')"
grep -q "step-$n\$" <<<"$(readlink -f "$d/o/ckpt/latest" 2>/dev/null; cat "$d/o/ckpt/latest" 2>/dev/null)" ||
    fail "ckpt/latest is not step-$n"
[ "$fails" -ne 0 ] || echo "$victim file shortened under the run: it stopped naming the file, its $n steps saved"

# 2. Written back (a new file renamed over the old), resumed to N + 20,
# against an uninterrupted run of N + 20 steps.
if [ "$fails" -eq 0 ]; then
    cp "$d/$orig" "$d/new.tokens" && mv "$d/new.tokens" "$d/$file"
    timeout 300 "${launch[@]}" "$bin" "${run[@]}" --set train.steps=$((n + 20)) --set train.out_dir="$d/o" --resume auto \
        >"$d/resumed.log" 2>&1 || fail "resumed: exit $?: $(grep -i error "$d/resumed.log" | head -2)"
    grep -q "resumed from .*step-$n at step $n" "$d/resumed.log" ||
        fail "not resumed from step $n: $(grep -i resum "$d/resumed.log")"
    timeout 300 "${launch[@]}" "$bin" "${run[@]}" --set train.steps=$((n + 20)) --set train.out_dir="$d/ref" \
        >"$d/ref.log" 2>&1 || fail "uninterrupted: exit $?: $(tail -2 "$d/ref.log")"
    cmp -s "$d/ref/model.safetensors" "$d/o/model.safetensors" &&
        echo "resumed from it to step $((n + 20)): the uninterrupted run's weights bit for bit" ||
        fail "resumed from step $n to $((n + 20)): other weights than the uninterrupted run's"
fi
