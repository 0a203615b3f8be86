#!/usr/bin/env bash
# End to end: a text tokenized into shards by two threads reads back, through
# the shards' pattern and their folder, as the same stream as the one-file
# tokenize: `data inspect`, `plan`, `check`'s data line and a training run
# (loss and weights to the bit) all see the same data; a second tokenize with
# fewer shards is refused before it writes, and the shards stay whole; so is
# one whose shard name a folder holds; a commit that fails halfway says the
# pattern names a mix.
set -euo pipefail
build=${1:-build}
bin=$build/scaletrain
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for i in $(seq 1 600); do echo "shard $i of a corpus written in parts $((i * 11 % 17))"; done >"$tmp/a.txt"
for i in $(seq 1 300); do echo "and a second file, line $i"; done >"$tmp/b.txt"
mkdir "$tmp/shards"
"$bin" data tokenize "$tmp/one.tokens" "$tmp/a.txt" "$tmp/b.txt"
"$bin" data tokenize "$tmp/shards/corpus.tokens" "$tmp/a.txt" "$tmp/b.txt" --shard-tokens 4096 --jobs 2 |
    tee "$tmp/tok.txt"
bytes=$(($(stat -c %s "$tmp/a.txt") + $(stat -c %s "$tmp/b.txt")))
shards=$(((bytes + 4095) / 4096))
grep -q "$bytes tokens in $shards shards of up to 4096" "$tmp/tok.txt"
[ "$(ls "$tmp/shards" | wc -l)" -eq "$shards" ]
# the shards' tokens, header by header, are the one file's
/usr/bin/python3 - "$tmp/one.tokens" "$tmp"/shards/corpus-*.tokens <<'PY'
import struct, sys
def payload(p):
    b = open(p, "rb").read()
    assert b[:8] == b"STTOKENS", p
    count, vocab = struct.unpack_from("<QQ", b, 16)
    assert len(b) == 64 + 2 * count and vocab == 256, p
    return b[64:]
one, parts = payload(sys.argv[1]), [payload(p) for p in sys.argv[2:]]
assert all(len(p) == 2 * 4096 for p in parts[:-1]), [len(p) for p in parts]
assert b"".join(parts) == one, "the shards differ from the one file"
print("shards ok:", len(parts), "files,", len(one) // 2, "tokens")
PY
pat="$tmp/shards/corpus-*.tokens"
"$bin" data inspect "$pat" | tee "$tmp/inspect.txt"
grep -q "$shards token files read as one stream, $bytes tokens, vocabulary 256" "$tmp/inspect.txt"
grep -q "every token is below the vocabulary size" "$tmp/inspect.txt"
"$bin" data inspect "$tmp/shards" | grep -q "$shards token files read as one stream"
gpt=(--set model.type=gpt --set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2
    --set model.block_size=64 --set data.type=tokens --set train.batch_size=8 --set train.steps=20
    --set train.eval_every=10 --set log.progress=off)
"$bin" plan "${gpt[@]}" --set data.train="$pat" --set data.val="$tmp/shards" | grep -q "^local "
"$bin" check "${gpt[@]}" --set data.train="$pat" --set data.val="$tmp/shards" >"$tmp/check.txt" || true
grep -Eq "^ *ok +data +.*corpus-\*\.tokens: [0-9]+ samples of 64 tokens, vocabulary 256" "$tmp/check.txt"
grep -Eq "^ *ok +val data +.*shards: [0-9]+ samples" "$tmp/check.txt"
for d in one shards; do
    spec="$tmp/one.tokens"
    [ $d = shards ] && spec="$pat"
    "$bin" train "${gpt[@]}" --set data.train="$spec" --set data.val="$spec" --set train.out_dir="$tmp/run-$d" \
        --json | tail -n 1 >"$tmp/$d.json"
done
/usr/bin/python3 - "$tmp/one.json" "$tmp/shards.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
for k in ("loss", "train_loss", "first_loss", "steps"):
    assert a[k] == b[k], (k, a[k], b[k])
print("same run on the shards: loss", a["loss"])
PY
cmp "$tmp/run-one/model.safetensors" "$tmp/run-shards/model.safetensors"
# a run resumed on changed data is told so (its sampler counts samples of the stream)
"$bin" train "${gpt[@]}" --set data.train="$pat" --set data.val= --set train.eval_every=0 --set train.steps=10 \
    --set train.checkpoint_every=5 --set train.out_dir="$tmp/run-resume" >/dev/null
grep -q '"samples":' "$tmp/run-resume/ckpt/step-10/state.json"
last=$(ls "$tmp"/shards/corpus-*.tokens | tail -n 1)
mv "$last" "$tmp/last.tokens"
"$bin" train "${gpt[@]}" --set data.train="$pat" --set data.val= --set train.eval_every=0 --set train.steps=15 \
    --set train.out_dir="$tmp/run-resume" --resume auto >"$tmp/resume.txt" 2>&1
grep -q "resume: warning: data.train (.*) holds [0-9]* samples; the run that wrote the checkpoint had [0-9]*" \
    "$tmp/resume.txt"
mv "$tmp/last.tokens" "$last"
# on data so much smaller that the checkpoint's step is past its epoch's end
# (63 samples: 7 steps of 8; the checkpoint at 15), the run goes on at the next epoch, saying so,
# where it failed on a "sampler position" after warning that it would go on
"$bin" train "${gpt[@]}" --set data.train="$tmp/shards/corpus-000000.tokens" --set data.val= --set train.eval_every=0 \
    --set train.steps=20 --set train.checkpoint_every=5 --set train.out_dir="$tmp/run-resume" --resume auto >"$tmp/resume.txt" 2>&1 ||
    { cat "$tmp/resume.txt"; exit 1; }
grep -q "resume: warning: the checkpoint is at step 15 of epoch 0, but an epoch of data.train (.*corpus-000000.tokens: 63 samples, train.batch_size 8, data.drop_last true) is 7 steps now: the run goes on at the start of epoch 1" \
    "$tmp/resume.txt" || { cat "$tmp/resume.txt"; exit 1; }
/usr/bin/python3 -c 'import json, sys; p = json.load(open(sys.argv[1]))["sampler"]; sys.exit(0 if (p["epoch"], p["step"]) == (1, 5) else 1)' \
    "$tmp/run-resume/ckpt/step-20/state.json" || { echo "step 20 is not epoch 1's step 5"; exit 1; }
# data.val_split on tokens: the stream's last tenth is the validation data
"$bin" train "${gpt[@]}" --set data.train="$pat" --set data.val_split=0.1 --set train.steps=2 --set train.eval_every=2 \
    --set train.eval_steps=1 --set train.out_dir="$tmp/run-split" >"$tmp/split.txt" 2>&1 || { cat "$tmp/split.txt"; exit 1; }
n=$(((bytes - 1) / 64))
grep -q "^data: $((n - (n + 5) / 10)) samples of 64+1 tokens ($bytes tokens, vocabulary 256); validation: $(((n + 5) / 10)) samples$" "$tmp/split.txt" &&
    grep -q "^eval at step 2: loss" "$tmp/split.txt" || { grep -E "^data: |^eval" "$tmp/split.txt"; exit 1; }
# validation data that is one of the training pattern's shards: said
"$bin" train "${gpt[@]}" --set data.train="$pat" --set data.val="$tmp/shards/corpus-000001.tokens" --set train.steps=1 \
    --set train.eval_every=0 --set train.out_dir="$tmp/run-same" --quiet >"$tmp/same.txt" 2>&1 || { cat "$tmp/same.txt"; exit 1; }
grep -q "warning: data.val (.*corpus-000001.tokens) is (or holds) a file of data.train" "$tmp/same.txt" || { cat "$tmp/same.txt"; exit 1; }
# fewer, larger shards would leave old ones in the pattern: refused, nothing written
before=$(md5sum "$tmp"/shards/* | md5sum)
if "$bin" data tokenize "$tmp/shards/corpus.tokens" "$tmp/a.txt" --shard-tokens 100000 2>"$tmp/err.txt"; then
    echo "a tokenize that leaves stale shards in the pattern was accepted"
    exit 1
fi
grep -q "corpus-000001.tokens exists, and training on the pattern .*corpus-\*.tokens would read it" "$tmp/err.txt"
[ "$(md5sum "$tmp"/shards/* | md5sum)" = "$before" ]
[ -z "$(find "$tmp/shards" -name '*.tmp.*')" ]
# an input that grows while it is tokenized (tests/lib/vanish.c's ST_VANISH_GROW:
# a line of 37 bytes appended after its size was taken) is an error naming it.
# Shards of its size + 10 tokens: the first shard read the file's first 10
# added bytes and ended full, and the second's start, counted from the sizes,
# skipped the next file's first 10: a scrambled stream, silently
cc -shared -fPIC -o "$tmp/vanish.so" "$(dirname "$0")/../lib/vanish.c" -ldl
cp "$tmp/a.txt" "$tmp/grows.txt"
mkdir "$tmp/grown"
if ST_VANISH_GROW=grows.txt LD_PRELOAD="$tmp/vanish.so" "$bin" data tokenize "$tmp/grown/g.tokens" "$tmp/grows.txt" \
    "$tmp/b.txt" --shard-tokens $(($(stat -c %s "$tmp/a.txt") + 10)) --jobs 2 2>"$tmp/grow.txt"; then
    echo "a tokenize whose input grew under it succeeded: $(ls "$tmp/grown")"
    exit 1
fi
grep -q "grows.txt: $(($(stat -c %s "$tmp/a.txt") + 37)) bytes where it had $(stat -c %s "$tmp/a.txt") when tokenizing began; it changed" \
    "$tmp/grow.txt" || { cat "$tmp/grow.txt"; exit 1; }
[ -z "$(ls "$tmp/grown")" ] || { echo "a failed tokenize left $(ls "$tmp/grown")"; exit 1; }
# a shard's name held by a folder: refused before anything is written (the
# rename over it failed after the shards before it had replaced theirs)
mkdir -p "$tmp/held/c-000001.tokens" && touch "$tmp/held/c-000001.tokens/x"
if "$bin" data tokenize "$tmp/held/c.tokens" "$tmp/a.txt" --shard-tokens 4096 2>"$tmp/held.txt"; then
    echo "a tokenize over a folder of a shard's name succeeded"
    exit 1
fi
grep -q "c-000001.tokens exists and is not a file, so the shard of that name cannot replace it; move it away" "$tmp/held.txt" ||
    { cat "$tmp/held.txt"; exit 1; }
[ "$(ls "$tmp/held")" = "c-000001.tokens" ] || { echo "the refused tokenize wrote $(ls "$tmp/held")"; exit 1; }
# a shard's name held by a file that is not a token file (here the only input itself): refused, the
# file as it was (it was replaced by the shard, the text lost, where one OUT file refuses it)
mkdir -p "$tmp/own"
printf 'my only copy\n' >"$tmp/own/corpus-000000.tokens"
if "$bin" data tokenize "$tmp/own/corpus.tokens" "$tmp/own/corpus-000000.tokens" --shard-tokens 100 2>"$tmp/own.txt"; then
    echo "a tokenize over its own input, named as its first shard, succeeded"
    exit 1
fi
grep -q "corpus-000000.tokens exists and is not a token file (what looks like text), and the shard of that name would replace it" "$tmp/own.txt" ||
    { cat "$tmp/own.txt"; exit 1; }
[ "$(cat "$tmp/own/corpus-000000.tokens")" = "my only copy" ] && [ "$(ls "$tmp/own")" = "corpus-000000.tokens" ] ||
    { echo "the refused tokenize changed its input: $(ls "$tmp/own")"; exit 1; }
# a commit the storage refuses halfway (tests/lib/vanish.c: the rename onto
# the second shard fails): the message says the pattern names a mix
mkdir "$tmp/half"
if ST_VANISH_RENAME_EIO=h-000001.tokens LD_PRELOAD="$tmp/vanish.so" "$bin" data tokenize "$tmp/half/h.tokens" \
    "$tmp/a.txt" --shard-tokens 4096 2>"$tmp/half.txt"; then
    echo "a tokenize whose second rename failed succeeded"
    exit 1
fi
grep -q "h-000001.tokens: cannot rename .* over it: Input/output error; the shards before it are this tokenize's and from it on not all are (an earlier run's, or none), so .*h-\*.tokens names a mix of the two: delete the files it names and tokenize again" \
    "$tmp/half.txt" || { cat "$tmp/half.txt"; exit 1; }
[ -z "$(find "$tmp/half" -name '*.tmp.*')" ] || { echo "temporary files left: $(ls "$tmp/half")"; exit 1; }
# a stop (SIGTERM, as Ctrl-C or a batch system's) while a tokenize writes: its
# temporary files are removed and the old shards stay (a 9.6 GB temporary file
# of an endless input was left behind, its name no later run sweeps)
before=$(ls "$tmp/shards" | tr '\n' ' ')
"$bin" data tokenize "$tmp/shards/corpus.tokens" /dev/zero 2>"$tmp/stop.txt" &
tpid=$!
for _ in $(seq 600); do [ -n "$(find "$tmp/shards" -name '*.tmp.*')" ] && break; sleep 0.1; done
[ -n "$(find "$tmp/shards" -name '*.tmp.*')" ] || { echo "the endless tokenize wrote nothing"; kill -KILL $tpid; exit 1; }
kill -TERM $tpid
rc=0; wait $tpid || rc=$?
[ $rc -eq 143 ] && grep -q "stopped by SIGTERM; .*corpus.tokens is as it was" "$tmp/stop.txt" &&
    [ -z "$(find "$tmp/shards" -name '*.tmp.*')" ] && [ "$(ls "$tmp/shards" | tr '\n' ' ')" = "$before" ] ||
    { echo "a stopped tokenize: exit $rc: $(cat "$tmp/stop.txt"); left $(ls "$tmp/shards")"; exit 1; }
# a stop while the finished file is synced (held there by tests/lib/slowfs.c until the test lets it go):
# nothing replaced, exit 143 (the stop was not looked at again, and the file was renamed into place)
cc -shared -fPIC -O2 -o "$tmp/slowfs.so" "$(dirname "$0")/../lib/slowfs.c" -ldl || { echo "cannot build slowfs"; exit 1; }
LD_PRELOAD="$tmp/slowfs.so" ST_SLOWFS_MATCH=fin.tokens.tmp ST_SLOWFS_MS=100000 ST_SLOWFS_UNTIL="$tmp/fin.go" \
    ST_SLOWFS_MARK="$tmp/fin.held" timeout -s KILL 120 "$bin" data tokenize "$tmp/shards/fin.tokens" "$tmp/a.txt" \
    2>"$tmp/fin.txt" &
tpid=$!
for _ in $(seq 600); do [ -e "$tmp/fin.held" ] && break; sleep 0.1; done
[ -e "$tmp/fin.held" ] || { echo "the tokenize was not held at its sync: $(cat "$tmp/fin.txt")"; kill -KILL $tpid; exit 1; }
kill -TERM "$(pgrep -P $tpid)"
touch "$tmp/fin.go"
rc=0; wait $tpid || rc=$?
[ $rc -eq 143 ] && grep -q "stopped by SIGTERM; .*fin.tokens is as it was" "$tmp/fin.txt" && [ ! -e "$tmp/shards/fin.tokens" ] &&
    [ -z "$(find "$tmp/shards" -name '*.tmp.*')" ] ||
    { echo "a tokenize stopped during its sync: exit $rc: $(cat "$tmp/fin.txt"); left $(ls "$tmp/shards")"; exit 1; }
# OUT with glob characters: the printed pattern escapes them (x[1]-*.tokens named x1-*.tokens'
# files, not the shards), in YAML's single quotes, and it reads the shards back
mkdir "$tmp/br"
"$bin" data tokenize "$tmp/br/x[1].tokens" "$tmp/a.txt" --shard-tokens 4096 >"$tmp/br.txt"
grep -qF "train on them with data.train: '$tmp/br/x\[1\]-*.tokens'" "$tmp/br.txt" ||
    { echo "the pattern of x[1].tokens' shards is not escaped: $(cat "$tmp/br.txt")"; exit 1; }
"$bin" data inspect "$tmp/br/x\[1\]-*.tokens" | grep -q "token files read as one stream, $(stat -c %s "$tmp/a.txt") tokens" ||
    { echo "the escaped pattern does not read the shards"; exit 1; }
# a file that says 0 bytes and holds some (/proc's): read to its end, not left out; sharded, refused
"$bin" data tokenize "$tmp/proc.tokens" "$tmp/b.txt" /proc/self/status >"$tmp/proc.txt"
want=$(($(stat -c %s "$tmp/b.txt") + $(wc -c </proc/self/status)))
got=$(sed -n 's/.*: \([0-9]*\) tokens,.*/\1/p' "$tmp/proc.txt")
[ "$got" -gt "$(stat -c %s "$tmp/b.txt")" ] && [ "$got" -le $((want + 200)) ] ||
    { echo "/proc/self/status was left out: $got tokens, about $want wanted: $(cat "$tmp/proc.txt")"; exit 1; }
if "$bin" data tokenize "$tmp/procs.tokens" /proc/self/status --shard-tokens 100 2>"$tmp/procs.txt"; then exit 1; fi
grep -q "its size is not known before it is read (it says 0 bytes, as /proc and /sys files do)" "$tmp/procs.txt"
# more shards than a process here may map (vm.max_map_count): refused before any is written (they were
# written, and nothing could read them)
maps=$(cat /proc/sys/vm/max_map_count)
if [ "$maps" -lt 90000 ]; then
    head -c $((maps + 10)) /dev/zero | tr '\0' a >"$tmp/many.txt"
    if "$bin" data tokenize "$tmp/many/m.tokens" "$tmp/many.txt" --shard-tokens 1 2>"$tmp/many.err"; then exit 1; fi
    grep -q "a process here may map $maps files (vm.max_map_count)" "$tmp/many.err" && [ ! -e "$tmp/many" ] ||
        { echo "shards past vm.max_map_count: $(cat "$tmp/many.err"); $(ls "$tmp/many" 2>/dev/null | wc -l) written"; exit 1; }
fi
# a tokenize that fails leaves none of the folders it made for OUT
if "$bin" data tokenize "$tmp/new/er/x.tokens" /dev/null 2>/dev/null; then exit 1; fi
[ ! -e "$tmp/new" ] || { echo "a failed tokenize left $(find "$tmp/new")"; exit 1; }
# validation data of a larger vocabulary than the weights' (300 against 256): the error says the data
# does not fit them. eval takes the weights' vocabulary from their metadata: the error names it (it
# said "set model.vocab_size to 300 or more", which the weights refuse); with model.vocab_size auto
# set, the run takes the data's and the load's hint says the same (it said --set model.vocab_size=256,
# which is refused as smaller than the data's)
g=(--set model.type=gpt --set model.n_layer=1 --set model.n_head=2 --set model.n_embd=32 --set model.block_size=32
    --set train.threads=1 --set data.type=tokens --set data.num_workers=0)
"$bin" train "${g[@]}" --set train.steps=2 --set data.train="$tmp/one.tokens" --set data.val= \
    --set train.out_dir="$tmp/g" --quiet
/usr/bin/python3 - "$tmp/one.tokens" "$tmp/v300.tokens" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
struct.pack_into("<Q", b, 24, 300)  # the header's vocabulary
struct.pack_into("<H", b, 64, 299)  # and a token past 255
open(sys.argv[2], "wb").write(b)
PY
if "$bin" eval "${g[@]}" --init "$tmp/g" --set data.val="$tmp/v300.tokens" 2>"$tmp/v300.txt" >/dev/null; then exit 1; fi
grep -qF "model.vocab_size (256, auto: $tmp/g/model.safetensors's metadata) is smaller than the vocabulary of $tmp/v300.tokens (300): the weights have no embedding row for its tokens from 256 on; give data tokenized with their vocabulary" "$tmp/v300.txt" ||
    { echo "eval of data with a larger vocabulary: $(cat "$tmp/v300.txt")"; exit 1; }
if "$bin" eval "${g[@]}" --init "$tmp/g" --set data.val="$tmp/v300.tokens" --set model.vocab_size=auto \
    2>"$tmp/v300.txt" >/dev/null; then exit 1; fi
grep -q "hint: the weights' vocabulary is 256 tokens, and this run's data has 300 (model.vocab_size auto takes the data's): these weights cannot read its tokens from 256 on" "$tmp/v300.txt" &&
    ! grep -q "run with those settings" "$tmp/v300.txt" ||
    { echo "eval of data with a larger vocabulary: $(cat "$tmp/v300.txt")"; exit 1; }
# a pattern that names nothing; one in a folder that does not exist (it said "a folder cannot be read")
if "$bin" data inspect "$tmp/shards/nothing-*.tokens" 2>"$tmp/err2.txt"; then exit 1; fi
grep -q "nothing-\*.tokens: no file matches this pattern" "$tmp/err2.txt"
if "$bin" train "${g[@]}" --set data.train="$tmp/nowhere/*.tokens" --set data.val= 2>"$tmp/err3.txt"; then exit 1; fi
grep -qF "$tmp/nowhere/*.tokens: cannot list the files it names: the folder $tmp/nowhere: No such file or directory" \
    "$tmp/err3.txt" || { echo "a pattern in a missing folder: $(cat "$tmp/err3.txt")"; exit 1; }
# shards numbered without zero-padding are read in name order (x-10 before x-2): said
mkdir -p "$tmp/unpadded" && for i in 1 2 10; do cp "$tmp/one.tokens" "$tmp/unpadded/x-$i.tokens"; done
"$bin" train "${g[@]}" --set data.train="$tmp/unpadded/x-*.tokens" --set data.val= --set train.steps=1 \
    --set train.out_dir="$tmp/unpadded-run" --quiet 2>"$tmp/err4.txt" || { cat "$tmp/err4.txt"; exit 1; }
grep -qF "which puts $tmp/unpadded/x-10.tokens before $tmp/unpadded/x-2.tokens; where their numbers are the order, zero-pad them" \
    "$tmp/err4.txt" || { echo "unpadded shards: no warning: $(cat "$tmp/err4.txt")"; exit 1; }
"$bin" train "${g[@]}" --set data.train="$pat" --set data.val= --set train.steps=1 --set train.out_dir="$tmp/padded-run" \
    --quiet 2>"$tmp/err5.txt" && ! grep -q "name order" "$tmp/err5.txt" ||
    { echo "zero-padded shards: $(cat "$tmp/err5.txt")"; exit 1; }
# one text tokenized whole and in shards into one folder: the second tokenize warns; a run on the folder
# is refused (it read the text twice, and data.val_split's held-out end was trained on in the other copy);
# whole and shards of different texts: warned, and the run goes on
mkdir "$tmp/twice" && cp "$tmp/one.tokens" "$tmp/twice/corpus.tokens"
"$bin" data tokenize "$tmp/twice/corpus.tokens" "$tmp/a.txt" "$tmp/b.txt" --shard-tokens 4096 2>"$tmp/tw1.txt" >/dev/null
grep -qF "warning: $tmp/twice holds $tmp/twice/corpus.tokens and $shards shards named from it ($tmp/twice/corpus-000000.tokens...) with the same $bytes tokens" \
    "$tmp/tw1.txt" || { echo "tokenize into a folder holding the whole text: $(cat "$tmp/tw1.txt")"; exit 1; }
if "$bin" train "${g[@]}" --set data.train="$tmp/twice" --set data.val_split=0.1 --set train.steps=1 \
    --set train.out_dir="$tmp/twice-run" 2>"$tmp/tw2.txt"; then exit 1; fi
grep -qF "data.train $tmp/twice: reads $tmp/twice/corpus.tokens and $shards shards named from it" "$tmp/tw2.txt" &&
    grep -qF "name one (data.train: $tmp/twice/corpus.tokens, or '$tmp/twice/corpus-*.tokens')" "$tmp/tw2.txt" ||
    { echo "a run on a folder holding one text twice: $(cat "$tmp/tw2.txt")"; exit 1; }
"$bin" data inspect "$tmp/twice" 2>&1 >/dev/null | grep -qF "one text tokenized whole and in shards" ||
    { echo "data inspect of the folder says nothing"; exit 1; }
"$bin" data tokenize "$tmp/twice/corpus.tokens" "$tmp/b.txt" 2>"$tmp/tw3.txt" >/dev/null
grep -qF "named as if cut from it" "$tmp/tw3.txt" || { echo "another text: $(cat "$tmp/tw3.txt")"; exit 1; }
"$bin" train "${g[@]}" --set data.train="$tmp/twice" --set data.val= --set train.steps=1 \
    --set train.out_dir="$tmp/twice-run" --quiet 2>"$tmp/tw4.txt" || { cat "$tmp/tw4.txt"; exit 1; }
grep -qF "if one text was tokenized twice, it is read twice" "$tmp/tw4.txt" ||
    { echo "whole and shards of different texts: $(cat "$tmp/tw4.txt")"; exit 1; }
echo "token shards e2e ok"
