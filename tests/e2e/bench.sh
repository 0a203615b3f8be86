#!/usr/bin/env bash
# `scaletrain bench -n 1,2` on a tiny gpt (issue 6): the table on stdout and
# in bench.md has a header, a separator and one row per rank count with 12
# columns (8 measured, 4 the planner's prediction); bench.json has the same
# runs with positive, finite figures that agree with each other (per rank =
# throughput / ranks, the 1-rank efficiency is 1, the global batch grows with
# the ranks, measured/predicted = throughput / predicted throughput); the
# throughput and efficiency SVGs parse and hold two series (measured,
# predicted) of one point per rank count, and the PNGs exist when gnuplot is
# installed; bad options are usage errors. The report folder's name holds " #1"
# (a YAML comment, were it passed unquoted).
# It checks the report's shape and sanity, not the speed (the machine is shared).
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_mpirun
e2e_tmpdir
export OMP_WAIT_POLICY=PASSIVE

for i in $(seq 1 200); do echo "the quick brown fox $i jumps over the lazy dog $((i * 7 % 13))"; done >"$tmp/t.txt"
"$bin" data tokenize "$tmp/t.tokens" "$tmp/t.txt" >/dev/null || fail "tokenize"
cat >"$tmp/tiny.yaml" <<YAML
model: { type: gpt, n_layer: 1, n_head: 2, n_embd: 16, block_size: 16 }
data:  { type: tokens, train: $tmp/t.tokens, val: "" }
train: { batch_size: 4, threads: 1 }
dist:  { timeout_s: 60 }
log:   { peak_gflops: 10 }
YAML

out=$(timeout 300 "$bin" bench -n 1,2 "$tmp/tiny.yaml" --set optim.lr=1e-3 --steps 8 --warmup 2 --out "$tmp/rep #1" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "bench: exit $rc"
table=$(grep '^|' <<<"$out")
[ "$(wc -l <<<"$table")" -eq 4 ] || fail "the table has $(wc -l <<<"$table") lines, expected 4"
head -n 1 <<<"$table" | grep -q '^| ranks | global batch | tokens/s | per rank | speed-up | efficiency | step ms (median) | comm ms | predicted tokens/s | predicted efficiency | predicted step ms | measured/predicted |$' ||
    fail "the header: $(head -n 1 <<<"$table")"
for r in 1 2; do
    grep -qE "^\| $r \| $((4 * r)) \|( [0-9.]+ \|){10}$" <<<"$table" || fail "no well-formed row for $r rank(s)"
done
diff <(grep '^|' "$tmp/rep #1/bench.md") <(echo "$table") >/dev/null || fail "bench.md's table differs from stdout's"
/usr/bin/python3 - "$tmp/rep #1/bench.json" <<'PY' || fail "bench.json"
import json, math, os, statistics, sys
r = json.load(open(sys.argv[1]))
runs = r["runs"]
assert [x["ranks"] for x in runs] == [1, 2], runs
assert r["unit"] == "tokens/s" and r["micro_batch_per_rank"] == 4 and r["warmup_steps"] == 2
for x in runs:
    for k in ("throughput", "throughput_per_rank", "speedup", "efficiency", "samples_per_s", "tokens_per_s",
              "step_ms_median"):
        assert math.isfinite(x[k]) and x[k] > 0, (k, x)
    assert math.isfinite(x["comm_ms"]) and x["comm_ms"] >= 0, x
    assert x["measured_steps"] == 6, x
    # the median of the run's own step times (an even count: the mean of the middle two, where it took the
    # upper one)
    lines = [json.loads(l) for l in open(os.path.join(os.path.dirname(sys.argv[1]), "n%d" % x["ranks"],
                                                      "metrics.jsonl"))]
    ms = [l["step_ms"] for l in lines if "step_ms" in l and l.get("step", 0) > 2]
    assert len(ms) == 6 and abs(x["step_ms_median"] - statistics.median(ms)) <= 1e-9 * x["step_ms_median"], (ms, x)
    assert x["global_batch"] == 4 * x["ranks"], x
    assert abs(x["throughput_per_rank"] * x["ranks"] - x["throughput"]) <= 1e-9 * x["throughput"], x
    assert abs(x["tokens_per_s"] - 16 * x["samples_per_s"]) <= 1e-9 * x["tokens_per_s"], x
    p = x["predicted"]
    for k in ("throughput", "speedup", "efficiency", "step_ms", "samples_per_s", "tokens_per_s"):
        assert math.isfinite(p[k]) and p[k] > 0, (k, x)
    assert abs(p["tokens_per_s"] - 16 * p["samples_per_s"]) <= 1e-9 * p["tokens_per_s"], x
    assert abs(p["samples_per_s"] * p["step_ms"] / 1e3 - x["global_batch"]) <= 1e-6 * x["global_batch"], x
    m = x["measured_over_predicted"]
    assert math.isfinite(m) and m > 0 and abs(m - x["throughput"] / p["throughput"]) <= 1e-9 * m, x
assert runs[0]["efficiency"] == 1 and runs[0]["speedup"] == 1
assert runs[0]["predicted"]["efficiency"] == 1 and 0 < runs[1]["predicted"]["efficiency"] <= 1, runs
assert math.isfinite(r["cpu_gflops_per_core"]) and r["cpu_gflops_per_core"] > 0, r
assert r["plots"]["throughput"] == "bench_throughput.svg" and r["plots"]["efficiency"] == "bench_efficiency.svg"
e = runs[1]["throughput_per_rank"] / runs[0]["throughput_per_rank"]
assert abs(runs[1]["efficiency"] - e) <= 1e-9, runs
print("bench.json: 2 runs, figures positive, finite and consistent; 2-rank efficiency %.3f" % e)
PY
/usr/bin/python3 - "$tmp/rep #1" <<'PY' || fail "the plots"
import sys, xml.etree.ElementTree as ET
d = sys.argv[1]
md = open(d + "/bench.md").read()
for name in ("bench_throughput", "bench_efficiency"):
    assert "(%s.svg)" % name in md, ("bench.md does not link", name)
    root = ET.parse("%s/%s.svg" % (d, name)).getroot()
    series = [e for e in root.iter() if e.tag.endswith("path") and e.get("class") == "series"]
    names = [e.get("data-name") for e in series]
    assert names == ["measured", "predicted (planner)"], (name, names)
    for e in series:
        assert e.get("data-points") == "2" and e.get("d", "").count("L") == 1, (name, e.get("d"))
print("plots: 2 SVGs, each with a measured and a predicted series")
PY
if command -v gnuplot >/dev/null; then
    for name in bench_throughput bench_efficiency; do
        [ "$(head -c 4 "$tmp/rep #1/$name.png" | tail -c 3)" = PNG ] || fail "$name.png is not a PNG"
    done
fi
[ -f "$tmp/rep #1/n2/metrics.jsonl" ] && [ -f "$tmp/rep #1/n2.log" ] || fail "the runs' metrics and logs are not kept"
# Again over the same report folder, its 1-rank run left as an interrupted one
# (latest at an earlier step): bench's runs are its own, started afresh (a
# plain `train` would refuse that out_dir and ask for --resume auto).
latest=$(cat "$tmp/rep #1/n1/ckpt/latest")
/usr/bin/python3 - "$tmp/rep #1/n1/ckpt/$latest/state.json" <<'PY' # (state.json's checksums are of the files it lists)
import json, sys
st = json.load(open(sys.argv[1]))
st["config"]["train"]["steps"] = 1000
json.dump(st, open(sys.argv[1], "w"), indent=1)
PY
"$bin" data inspect "$tmp/rep #1/n1/ckpt/$latest" | grep -q "checkpoint of step" || fail "the edited state.json is not good"
out=$(timeout 300 "$bin" bench -n 1 "$tmp/tiny.yaml" --steps 4 --warmup 1 --out "$tmp/rep #1" 2>&1) ||
    fail "bench over an earlier bench's interrupted run: $out"
# evaluation off, data.val_split too (given, its share was evaluated at each run's end)
out=$(timeout 300 "$bin" bench -n 1 "$tmp/tiny.yaml" --set data.val_split=0.1 --steps 4 --warmup 1 --out "$tmp/split" 2>&1) ||
    fail "bench with data.val_split: $out"
[ -s "$tmp/split/n1.log" ] && ! grep -q '"eval_samples"' "$tmp/split/n1.log" ||
    fail "bench with data.val_split evaluated: $(grep -o '"eval_samples":[0-9]*' "$tmp/split/n1.log")"

# A gnuplot that fails (the PNGs are optional): the report is written all the same, the PNGs' failure said
# (it ended bench with exit 1 before bench.md and bench.json)
mkdir -p "$tmp/badplot" && printf '#!/bin/sh\necho "gnuplot: broken" >&2\nexit 1\n' >"$tmp/badplot/gnuplot" &&
    chmod +x "$tmp/badplot/gnuplot"
out=$(PATH="$tmp/badplot:$PATH" timeout 300 "$bin" bench -n 1 "$tmp/tiny.yaml" --steps 4 --warmup 1 --out "$tmp/rep2" 2>&1)
rc=$?
[ $rc -eq 0 ] && [ -s "$tmp/rep2/bench.md" ] && [ -s "$tmp/rep2/bench.json" ] && grep -q "^report: PNGs skipped: .*gnuplot" <<<"$out" ||
    fail "bench with a failing gnuplot: exit $rc: $out"
# --out naming a regular file: refused before any run (the folder was taken as made, and every rank failed
# at train.out_dir below it)
echo x >"$tmp/afile"
out=$(timeout 60 "$bin" bench -n 1 "$tmp/tiny.yaml" --steps 4 --warmup 1 --out "$tmp/afile" 2>&1)
[ $? -eq 1 ] && grep -q "error: --out: $tmp/afile: is a regular file, not a directory" <<<"$out" &&
    ! grep -q "train.out_dir" <<<"$out" || fail "bench --out a file: $out"
# bench.md or bench.json whose write fails (tests/lib/slowfs.c: its close says EIO, as a network file
# system's write-back refused): exit 1 naming it, nothing left (each is written under a temporary name and
# renamed once whole: a table that lacks rows read as the whole result)
cc -shared -fPIC -O2 -o "$tmp/slowfs.so" "$(dirname "$0")/../lib/slowfs.c" -ldl || fail "cannot build slowfs"
for f in bench.md bench.json; do
    rm -rf "$tmp/rep4" && mkdir -p "$tmp/rep4"
    out=$(LD_PRELOAD="$tmp/slowfs.so" ST_SLOWFS_MATCH="rep4/$f" ST_SLOWFS_MS=0 ST_SLOWFS_CLOSE_EIO=1 \
        timeout 300 "$bin" bench -n 1 "$tmp/tiny.yaml" --steps 4 --warmup 1 --out "$tmp/rep4" 2>&1)
    rc=$?
    [ $rc -eq 1 ] && grep -q "error: $tmp/rep4/$f: write failed: Input/output error (the part written was removed)" <<<"$out" &&
        [ ! -e "$tmp/rep4/$f" ] && [ -z "$(find "$tmp/rep4" -maxdepth 1 -name '*.tmp.*')" ] ||
        fail "bench with $f failing to write: exit $rc: $out"
done
[ "$fails" -ne 0 ] || echo "bench.md, bench.json whose write fails: said, nothing left"
# bench stopped (SIGTERM, as timeout or a closed terminal's session sends)
# while its job trains: the stop is passed on to the job, which saves a
# checkpoint and ends, and bench exits 143 saying so (it died of the signal,
# its job ended a second later by its parent's death, and before that the
# job trained on, holding its out_dir, for the rest of its steps: minutes)
"$bin" bench -n 1 "$tmp/tiny.yaml" --set model.n_layer=4 --set model.n_embd=128 --set model.block_size=64 --steps 4000 --warmup 1 --out "$tmp/rep3" >"$tmp/rep3.log" 2>&1 & # (bounded: the loops below, then KILL)
bpid=$!
for _ in $(seq 1 600); do
    [ -n "$(pgrep -P "$bpid")" ] && [ -s "$tmp/rep3/n1/metrics.jsonl" ] && break # (training: a step logged)
    e2e_alive $bpid || break
    sleep 0.1
done
child=$(pgrep -P "$bpid")
if [ -z "$child" ]; then
    fail "bench's job never started: $(tail -3 "$tmp/rep3.log")"
else
    kill -TERM "$bpid"
    wait "$bpid" 2>/dev/null
    brc=$?
    [ $brc -eq 143 ] && grep -q "scaletrain bench: stopped by SIGTERM during the 1-rank run (its job stopped too, its checkpoint in $tmp/rep3/n1); no run had finished: no report" "$tmp/rep3.log" ||
        fail "bench stopped: exit $brc: $(tail -n 3 "$tmp/rep3.log")"
    gone=
    for _ in $(seq 1 150); do # (15 s: the job's 4000 steps of a larger gpt take minutes)
        e2e_alive "$child" || { gone=yes; break; }
        sleep 0.1
    done
    [ -n "$gone" ] && [ -z "$(pgrep -f -- "$tmp/rep3")" ] || {
        fail "bench ended, its job ($child) still runs: $(ps -o pid,args --ppid "$child" 2>/dev/null | head -3)"
        pkill -KILL -f -- "$tmp/rep3"
    }
fi
kill -KILL "$bpid" 2>/dev/null
# stopped during its 2-rank run: the 1-rank run, finished, is reported (it was lost)
timeout -s KILL 120 "$bin" bench -n 1,2 "$tmp/tiny.yaml" --steps 1500 --warmup 1 --out "$tmp/rep5" >"$tmp/rep5.log" 2>&1 &
bpid=$!
for _ in $(seq 1 600); do [ -s "$tmp/rep5/n2/metrics.jsonl" ] && break; e2e_alive $bpid || break; sleep 0.1; done
kill -TERM "$(pgrep -P $bpid)" 2>/dev/null
wait $bpid
brc=$?
[ $brc -eq 143 ] && grep -q "stopped by SIGTERM during the 2-rank run (its job stopped too, its checkpoint in $tmp/rep5/n2); the report covers the runs that finished before it" "$tmp/rep5.log" &&
    grep -qE "^\| 1 \| 4 \|" "$tmp/rep5/bench.md" && ! grep -qE "^\| 2 \|" "$tmp/rep5/bench.md" ||
    fail "bench stopped in its second run: exit $brc: $(tail -n 3 "$tmp/rep5.log")"
[ "$fails" -ne 0 ] || echo "bench stopped in its 2-rank run: the 1-rank run reported, exit 143"
"$bin" bench -n 0 "$tmp/tiny.yaml" >/dev/null 2>&1; [ $? -eq 2 ] || fail "-n 0 is not a usage error"
"$bin" bench "$tmp/tiny.yaml" --steps 3 --warmup 5 >/dev/null 2>&1; [ $? -eq 2 ] || fail "steps <= warmup"
# a run that fails: its error is said (the log's tail, mpirun's banner, had cut it off)
out=$(timeout 120 "$bin" bench -n 1 "$tmp/tiny.yaml" --set data.train="$tmp/missing.tokens" --steps 3 --warmup 1 \
    --out "$tmp/failed" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "^\[rank 0\] scaletrain: error: data.train: $tmp/missing.tokens: cannot open" <<<"$out" ||
    fail "a failing run: exit $rc: $out"

e2e_finish "all passed"
