#!/usr/bin/env bash
# `scaletrain report RUN_DIR` (docs/commands.md): an mlp run of 8 steps with
# log.every=1 and evaluation every 4 steps, resumed to 12, then the report:
# every chart is well-formed SVG with one path per series and the right
# number of points, report.html references every chart and says the run was
# resumed, the PNGs (when gnuplot is installed) are PNG files of plausible
# size, the output is the same bytes twice. Without gnuplot the SVGs are
# written and the PNGs skipped with the reason. Edge cases from edited copies
# of the file: lines a resumed run logged again replace the older ones, one
# logged step, NaN losses (null), a torn last line, 200k steps (thinned
# to the plot's columns, the spike and the gap kept). Errors: a missing
# directory, a malformed line (named by number), no step lines.
source "$(dirname "$0")/../lib/e2e.sh"
bin=$(realpath "$build/scaletrain")
e2e_need_fmnist
e2e_tmpdir
export OMP_WAIT_POLICY=PASSIVE
common=(--set model.type=mlp --set model.hidden=[64,32] --set train.batch_size=16 --set train.threads=1
    --set log.every=1 --set log.progress=off --set train.eval_every=4 --set train.eval_steps=2
    --set train.checkpoint_every=4 --set train.out_dir="$tmp/run" --quiet)
timeout 60 "$bin" train "${common[@]}" --set train.steps=8 || fail "the 8-step run"
timeout 60 "$bin" train "${common[@]}" --set train.steps=12 --resume auto || fail "the run resumed to 12"
have_gnuplot=0
command -v gnuplot >/dev/null && have_gnuplot=1

# check DIR PNG(0/1) STEPS EVALS [HTML_TEXT]: the charts and the page in DIR.
check() {
    /usr/bin/python3 - "$@" <<'PY'
import os, re, struct, sys
import xml.etree.ElementTree as ET
d, png, steps, evals = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), int(sys.argv[4])
html_text = sys.argv[5] if len(sys.argv) > 5 else None
ok = True
def check(cond, what):
    global ok
    if not cond:
        print("FAIL:", what); ok = False
ns = "{http://www.w3.org/2000/svg}"
# chart -> [(series name, points)]
want = {"loss": [("train loss", steps)] + ([("eval loss", evals)] if evals else []),
        "throughput": [("samples/s", steps)],
        "memory": [("peak RSS, rank 0", steps), ("optimizer state", steps), ("gradients (resident)", steps)],
        "lr": [("learning rate", steps)],
        "grad_norm": [("gradient norm (before clipping)", steps)]}
if evals:
    want["accuracy"] = [("eval accuracy", evals)]
html = open(os.path.join(d, "report.html")).read()
for name, series in want.items():
    path = os.path.join(d, name + ".svg")
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        check(False, f"{path}: {e}"); continue
    check(root.tag == ns + "svg", f"{path}: root is <{root.tag}>")
    paths = [p for p in root.iter(ns + "path") if p.get("class") == "series"]
    got = []
    for p in paths:
        coords = re.findall(r"[ML]\s*(-?[\d.]+) (-?[\d.]+)", p.get("d"))
        check(len(coords) == int(p.get("data-points")), f"{path}: {p.get('data-name')}: d has {len(coords)} points, "
              f"data-points says {p.get('data-points')}")
        check(all(0 <= float(x) <= 760 and 0 <= float(y) <= 430 for x, y in coords), f"{path}: a point off the chart")
        got.append((p.get("data-name"), len(coords)))
    check(got == series, f"{path}: series {got}, expected {series}")
    check(f'src="{name}.svg"' in html, f"report.html does not show {name}.svg")
    pngp = os.path.join(d, name + ".png")
    if png:
        data = open(pngp, "rb").read() if os.path.exists(pngp) else b""
        check(data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", f"{pngp}: not a PNG file")
        if len(data) > 24:
            w, h = struct.unpack(">II", data[16:24])
            check(w >= 600 and h >= 300 and 5000 < len(data) < 2_000_000, f"{pngp}: {w}x{h}, {len(data)} bytes")
        check(f'href="{name}.png"' in html, f"report.html does not link {name}.png")
    else:
        check(not os.path.exists(pngp), f"{pngp} written without gnuplot")
if html_text:
    check(html_text in html, f"report.html lacks {html_text!r}")
print(f"{d}: {len(want)} charts checked" + ("" if ok else ": FAILED"))
sys.exit(0 if ok else 1)
PY
}

"$bin" report "$tmp/run" >"$tmp/out.txt" 2>&1 || fail "report: $(cat "$tmp/out.txt")"
check "$tmp/run/report" $have_gnuplot 12 3 "resumed" || fail "the report of the resumed run"
grep -q "model.type" "$tmp/run/report/report.html" || fail "report.html lacks the effective config"
cp -r "$tmp/run/report" "$tmp/first"
# without ckpt/latest (a save that ended before it): the newest checkpoint's config, as --resume auto takes
# it (it said "the run directory holds no checkpoint")
mkdir -p "$tmp/nolatest" && cp -r "$tmp/run/ckpt" "$tmp/run/metrics.jsonl" "$tmp/nolatest/" && rm "$tmp/nolatest/ckpt/latest"
newest=$(ls "$tmp/nolatest/ckpt" | sed -n 's/^step-//p' | sort -n | tail -1)
out=$("$bin" report "$tmp/nolatest/" --no-png 2>&1) || fail "report without ckpt/latest"
grep -qF "report: $tmp/nolatest/report/report.html" <<<"$out" || fail "report RUN/: not RUN/report: $out" # (was RUN//report)
grep -q "ckpt/step-$newest/state.json" "$tmp/nolatest/report/report.html" && grep -q "model.type" "$tmp/nolatest/report/report.html" ||
    fail "report without ckpt/latest: no config from step-$newest: $(grep -i 'config' "$tmp/nolatest/report/report.html" | head -3)"
"$bin" report "$tmp/run" >/dev/null 2>&1 || fail "the second report"
for f in "$tmp"/first/*.svg "$tmp/first/report.html"; do
    cmp -s "$f" "$tmp/run/report/$(basename "$f")" || fail "$(basename "$f") differs between two reports"
done

# Without gnuplot on PATH: SVGs, and the PNGs skipped with the reason.
PATH=/nonexistent "$bin" report "$tmp/run" --out "$tmp/nognuplot" >"$tmp/out.txt" 2>&1 ||
    fail "report without gnuplot: $(cat "$tmp/out.txt")"
grep -q "PNGs skipped: gnuplot is not on PATH" "$tmp/out.txt" || fail "no reason for skipping PNGs: $(cat "$tmp/out.txt")"
check "$tmp/nognuplot" 0 12 3 || fail "the report without gnuplot"

# Edited copies. m DIR: a run directory holding stdin as metrics.jsonl.
m() { mkdir -p "$1" && cat >"$1/metrics.jsonl"; }
lines=$tmp/run/metrics.jsonl
# Steps 5..12 logged again after 12 (a resumed run whose older lines were kept): they replace, not add.
{ cat "$lines"; grep -v '"eval"\|"checkpoint"' "$lines" | sed -n '5,12p'; } | m "$tmp/again"
"$bin" report "$tmp/again" --no-png >/dev/null 2>&1 || fail "report of a file with repeated steps"
check "$tmp/again/report" 0 12 1 || fail "repeated steps replace the earlier lines"
head -n 1 "$lines" | m "$tmp/one"
"$bin" report "$tmp/one" --no-png >/dev/null 2>&1 || fail "report of one logged step"
check "$tmp/one/report" 0 1 0 || fail "one logged step"
grep -c '<circle' "$tmp/one/report/loss.svg" | grep -qx 1 || fail "one logged step: no marker on loss.svg"
sed -e '3s/"loss":[-0-9.e]*/"loss":null/' -e '4s/"loss":[-0-9.e]*/"loss":null/' "$lines" | m "$tmp/nan"
"$bin" report "$tmp/nan" --no-png >"$tmp/out.txt" 2>&1 || fail "report with NaN losses: $(cat "$tmp/out.txt")"
grep -q 'data-name="train loss" data-points="10"' "$tmp/nan/report/loss.svg" || fail "NaN losses are not left out"
grep -q "non-finite train loss" "$tmp/nan/report/report.html" || fail "report.html does not count NaN losses"
# (the first loss names its line's step: it is a logged window's mean, not the first step's)
grep -qE "train loss</th><td>first [0-9.]+ at step [0-9]+, final" "$tmp/nan/report/report.html" ||
    fail "report.html's first loss does not say its step"
# A run that diverged: its last two step lines' losses and its last
# evaluation's are null. The final losses are not the last finite ones,
# which are named as such; the non-finite evaluation is counted.
/usr/bin/python3 -c 'import json,sys
rows=[json.loads(l) for l in open(sys.argv[1])]
steps=[r for r in rows if "loss" in r and not r.get("eval")]
evals=[r for r in rows if r.get("eval")]
for r in steps[-2:] + evals[-1:]: r["loss"]=None
print("\n".join(json.dumps(r) for r in rows))' "$lines" | m "$tmp/diverged"
"$bin" report "$tmp/diverged" --no-png >/dev/null 2>&1 || fail "report of a run that diverged"
grep -qE "train loss</th><td>first [0-9.]+ at step [0-9]+, final not finite \(the last finite [0-9.]+ at step 10\)" \
    "$tmp/diverged/report/report.html" &&
    grep -qE "eval loss</th><td>final not finite \(the last finite [0-9.]+ at step 8\)" "$tmp/diverged/report/report.html" &&
    grep -q "non-finite eval loss</th><td>1 of 3 evaluations" "$tmp/diverged/report/report.html" ||
    fail "report of a run that diverged: $(grep -E "loss</th>" "$tmp/diverged/report/report.html")"
sed -e '1s/"loss":[-0-9.e]*/"loss":null/' "$lines" | m "$tmp/nan1" # (the first line's: "first" is the first finite)
"$bin" report "$tmp/nan1" --no-png >/dev/null 2>&1 || fail "report with the first loss NaN"
grep -qE "first -?nan|[ (]-?nan%" "$tmp/nan1/report/report.html" && fail "report.html prints a NaN: $(grep -E "first|%" "$tmp/nan1/report/report.html")"
# A resume seen by a checkpoint line's time alone: the resumed process's
# first step line comes later by its clock than the first's last step line
printf '%s\n' '{"step":10,"loss":1.0,"time":0.0044}' '{"step":10,"checkpoint":true,"time":0.034}' \
    '{"step":50,"loss":0.9,"time":0.0203}' '{"step":100,"loss":0.8,"time":0.0444}' | m "$tmp/seg"
"$bin" report "$tmp/seg" --no-png >/dev/null 2>&1 || fail "report of a resumed run"
grep -q "1 time(s)" "$tmp/seg/report/report.html" && grep -q "0.0784 s (step loops, all runs)" "$tmp/seg/report/report.html" ||
    fail "the resume seen by the checkpoint line's time is not reported: $(grep -A1 'resumed\|training time' "$tmp/seg/report/report.html")"
# A resume its clock does not show (the first process stopped sooner than the
# resumed one's first line): its first line's resumed_from says it (it was
# missed: one process, 4.5 s)
printf '%s\n' '{"step":10,"loss":1.0,"time":1.0}' '{"step":20,"loss":0.95,"time":2.0}' \
    '{"step":20,"checkpoint":true,"time":2.2}' '{"step":30,"loss":0.9,"time":3.5,"resumed_from":20}' \
    '{"step":40,"loss":0.8,"time":4.5}' | m "$tmp/seg2"
"$bin" report "$tmp/seg2" --no-png >/dev/null 2>&1 || fail "report of a resumed run (resumed_from)"
grep -q "1 time(s)" "$tmp/seg2/report/report.html" && grep -q "6.7 s (step loops, all runs)" "$tmp/seg2/report/report.html" ||
    fail "the resume said by resumed_from is not reported: $(grep -A1 'resumed\|training time' "$tmp/seg2/report/report.html")"
# A file that begins with a run resumed from another out_dir's checkpoint (resumed_from on its first
# line): said (the report read as if its 12 steps trained in a few milliseconds); and the data wait is
# the mean wait over the mean step time, as the run says it (the mean of the lines' fractions weighed
# a short window as a long one: 20% where the run said 40%)
printf '%s\n' '{"step":10,"loss":1.0,"time":1.0,"resumed_from":8,"step_ms":10,"data_wait_ms":8,"data_wait_fraction":0.8}' \
    '{"step":12,"loss":0.9,"time":2.0,"step_ms":90,"data_wait_ms":32,"data_wait_fraction":0.3556}' | m "$tmp/from8"
"$bin" report "$tmp/from8" --no-png >/dev/null 2>&1 || fail "report of a run resumed from another folder"
grep -q "step 8 of another run's checkpoint (--resume)" "$tmp/from8/report/report.html" ||
    fail "a run resumed from another folder is not said: $(grep -A1 'started\|resumed' "$tmp/from8/report/report.html")"
grep -q "40.0% of step time, 20.000 ms per step (means)" "$tmp/from8/report/report.html" ||
    fail "the data wait: $(grep -A1 'data wait' "$tmp/from8/report/report.html")"
# and a real resume writes it on its first line, once
n=$(grep -c '"resumed_from":' "$tmp/run/metrics.jsonl")
[ "$n" = 1 ] || fail "the resumed run's metrics.jsonl holds $n resumed_from lines, want 1"
{ cat "$lines"; printf '{"step":13,"loss":0.'; } | m "$tmp/torn"
"$bin" report "$tmp/torn" --no-png >"$tmp/out.txt" 2>&1 || fail "report with a torn last line: $(cat "$tmp/out.txt")"
grep -q "last line is cut short" "$tmp/out.txt" || fail "no warning for the torn last line"
# A GPU run's lines (docs/formats.md "Metrics"): the device's used memory on
# the memory chart, and the GPU's figures in the summary.
gpu='"gpu_mem_peak_mb":1024,"gpu_mem_used_mb":2048,"gpu_mem_total_mb":81920,"gpu_util":95,"gpu_power_w":300,"gpu_temp_c":60'
sed -E "/\"eval\"/!s/\}\$/,$gpu}/" "$lines" | m "$tmp/gpu"
"$bin" report "$tmp/gpu" --no-png >"$tmp/out.txt" 2>&1 || fail "report of a GPU run: $(cat "$tmp/out.txt")"
grep -q 'data-name="GPU used, rank 0"' "$tmp/gpu/report/memory.svg" || fail "memory.svg lacks the GPU's memory"
grep -q "1.00 GiB peak held by the run, 2.00 GiB used at most of 80.00 GiB" "$tmp/gpu/report/report.html" ||
    fail "report.html lacks the GPU memory"
grep -q "95% utilisation (mean of 12 samples), up to 300 W and 60 C" "$tmp/gpu/report/report.html" ||
    fail "report.html lacks the GPU's utilisation"
grep -q "GPU" "$tmp/one/report/report.html" && fail "a CPU run's report mentions a GPU"

# A long run: 200k logged steps (loss about 1, one spike of 5 at step
# 123457, no loss for steps 150001-150100) draw as a few thousand points
# per chart, the spike and the gap kept, in both renderers.
/usr/bin/python3 - "$tmp/long" <<'PY'
import json, os, sys
os.makedirs(sys.argv[1], exist_ok=True)
with open(os.path.join(sys.argv[1], "metrics.jsonl"), "w") as f:
    for s in range(1, 200001):
        loss = None if 150001 <= s <= 150100 else (5.0 if s == 123457 else 1.0 + 0.1 * ((s * 7919) % 101) / 101)
        f.write(json.dumps({"step": s, "loss": loss, "lr": 1e-3, "samples_per_s": 5000 + s % 7,
                            "peak_rss_mb": 200, "time": s * 0.01}) + "\n")
PY
"$bin" report "$tmp/long" >"$tmp/out.txt" 2>&1 || fail "report of 200k steps: $(cat "$tmp/out.txt")"
/usr/bin/python3 - "$tmp/long/report/loss.svg" <<'PY' || fail "200k steps: loss.svg is not thinned as it should be"
import os, re, sys
import xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
paths = [e for e in ET.parse(sys.argv[1]).getroot().iter(ns + "path") if e.get("class") == "series"]
p = paths[0]
names = [e.get("data-name") for e in paths]
if names != ["train loss", "train loss, smoothed (moving average of 2000 lines)"]:
    print("loss.svg series:", names); sys.exit(1)
sm = [float(y) for _, y in re.findall(r"[ML]\s*(-?[\d.]+) (-?[\d.]+)", paths[1].get("d"))]
raw = [float(y) for _, y in re.findall(r"[ML]\s*(-?[\d.]+) (-?[\d.]+)", p.get("d")) if float(y) > 200]
# (the smoothed line lies within the noise band, far narrower: pixels, y down)
if not (sm and max(sm) - min(sm) < 0.5 * (max(raw) - min(raw)) and min(raw) <= min(sm) and max(sm) <= max(raw)):
    print("the smoothed loss:", min(sm), max(sm), "the noise:", min(raw), max(raw)); sys.exit(1)
d = p.get("d")
pts = [(float(x), float(y)) for x, y in re.findall(r"[ML]\s*(-?[\d.]+) (-?[\d.]+)", d)]
spikes = [pt for pt in pts if pt[1] < 200]
ok = (p.get("data-thinned-from") == "199900" and int(p.get("data-points")) == len(pts) and 2000 < len(pts) <= 4 * 1304
      and d.count("M") == 2 and len(spikes) == 1 and abs(spikes[0][0] - (84 + 123456 / 200000 * 652)) < 2
      and os.path.getsize(sys.argv[1]) < 200_000)
print(f"loss.svg: {len(pts)} of {p.get('data-thinned-from')} points, {d.count('M')} runs, spikes {spikes}, "
      f"{os.path.getsize(sys.argv[1])} bytes")
sys.exit(0 if ok else 1)
PY

# Errors: exit 1 and a message that names the problem.
expect_error() { # WANT ARGS...
    local want=$1; shift
    "$bin" report "$@" >"$tmp/err.txt" 2>&1
    local rc=$?
    [ $rc -eq 1 ] || fail "report $*: exit $rc, expected 1"
    grep -q -- "$want" "$tmp/err.txt" || fail "report $*: expected '$want' in: $(cat "$tmp/err.txt")"
}
expect_error "$tmp/missing: No such file or directory" "$tmp/missing"
mkdir -p "$tmp/empty" && expect_error "metrics.jsonl: cannot open" "$tmp/empty"
sed '3s/.*/{"step": 3, "loss": oops}/' "$lines" | m "$tmp/bad"
expect_error "metrics.jsonl:3: not a JSON object" "$tmp/bad"
# two lines run together (a writer that lost a newline): the line is named, not read as its first object
sed '3s/$/{"step": 99, "loss": 1}/' "$lines" | m "$tmp/joined"
expect_error "metrics.jsonl:3: not a JSON object" "$tmp/joined"
# a disk that fills while the charts are written: the error names the file, and no empty chart is left
mkdir -p "$tmp/full"
if mount -t tmpfs -o size=64k tmpfs "$tmp/full" 2>/dev/null; then
    e2e_cleanup() { umount "$tmp/full" 2>/dev/null; }
    # (the run's metrics alone: a copy of the whole run, 2 MB of checkpoints, filled the 64 KiB first and
    # left metrics.jsonl empty wherever the directory listed ckpt before it)
    mkdir -p "$tmp/full/run" && cp "$tmp/run/metrics.jsonl" "$tmp/full/run/" || fail "report onto a full disk: the copy"
    head -c 1M /dev/zero >"$tmp/full/fill" 2>/dev/null
    "$bin" report "$tmp/full/run" --no-png >"$tmp/full.txt" 2>&1; rc=$?
    left=$(find "$tmp/full/run/report" -type f -size 0 2>/dev/null)
    [ $rc -eq 1 ] && grep -q "write failed: No space left on device (the part written was removed)" "$tmp/full.txt" &&
        [ -z "$left" ] || fail "report onto a full disk: exit $rc, empty files: $left: $(cat "$tmp/full.txt")"
    umount "$tmp/full"
else
    echo "report onto a full disk: skipped: cannot mount a tmpfs here"
fi
# a step that is no step number, a loss that is text: named (they were a resume that dropped the lines
# before, and a non-finite loss)
sed '3s/.*/{"step": -5, "loss": 1}/' "$lines" | m "$tmp/negstep"
expect_error 'metrics.jsonl:3: "step" is -5, not a step number' "$tmp/negstep"
sed '3s/.*/{"step": 1e300, "loss": 1}/' "$lines" | m "$tmp/hugestep"
expect_error 'metrics.jsonl:3: "step" is 1.0000000000000001e+300, not a step number' "$tmp/hugestep"
sed '3s/.*/{"step": 3, "loss": "x"}/' "$lines" | m "$tmp/textloss"
expect_error 'metrics.jsonl:3: "loss" is not a number (nor null)' "$tmp/textloss"
# a stop (SIGTERM) while gnuplot draws (a gnuplot on PATH that waits for the test): exit 143, said; no
# scratch or temporary file left, and the report.html of an earlier report whole (it was opened in place and
# left empty, and gnuplot's .dat and .gp files stayed)
"$bin" report "$tmp/run" --out "$tmp/stopped" --no-png >/dev/null 2>&1 || fail "the report before the stop"
cp "$tmp/stopped/report.html" "$tmp/html.before"
mkdir -p "$tmp/holdplot"
printf '#!/bin/sh\n: >"%s/held"\nuntil [ -e "%s/go" ]; do sleep 0.05; done\nexit 0\n' "$tmp/holdplot" "$tmp/holdplot" \
    >"$tmp/holdplot/gnuplot"
chmod +x "$tmp/holdplot/gnuplot"
PATH="$tmp/holdplot:$PATH" timeout -s KILL 120 "$bin" report "$tmp/run" --out "$tmp/stopped" >"$tmp/stop.txt" 2>&1 &
rpid=$!
for _ in $(seq 600); do [ -e "$tmp/holdplot/held" ] && break; sleep 0.1; done
kill -TERM "$(pgrep -P $rpid)"
touch "$tmp/holdplot/go"
wait $rpid; rc=$?
[ $rc -eq 143 ] && grep -q "scaletrain report: stopped by SIGTERM; the files in $tmp/stopped are whole" "$tmp/stop.txt" &&
    [ -z "$(find "$tmp/stopped" -name '*.tmp.*' -o -name '*.dat' -o -name '*.gp' -o -name '*.log')" ] &&
    cmp -s "$tmp/stopped/report.html" "$tmp/html.before" ||
    fail "report stopped while gnuplot draws: exit $rc: $(cat "$tmp/stop.txt"); $(ls "$tmp/stopped")"
# report.html a symbolic link (to a web folder): written through it, the link kept (it was replaced)
mkdir -p "$tmp/www" "$tmp/linked" && echo old >"$tmp/www/r.html" && ln -s "$tmp/www/r.html" "$tmp/linked/report.html"
"$bin" report "$tmp/run" --out "$tmp/linked" --no-png >/dev/null 2>&1 && [ -L "$tmp/linked/report.html" ] &&
    grep -q "<!DOCTYPE html>" "$tmp/www/r.html" || fail "report.html a symbolic link: not written through it"
# an --out that starts with '-': gnuplot is given its script as a path, not an option (every PNG was lost)
mkdir -p "$tmp/optplot"
cat >"$tmp/optplot/gnuplot" <<'SH'
#!/bin/sh
case "$1" in -*) echo "gnuplot: $1 read as an option" >&2; exit 3 ;; esac
o=$(sed -n 's/^set output "\(.*\)"$/\1/p' "$1")
: >"$o"
SH
chmod +x "$tmp/optplot/gnuplot"
(cd "$tmp" && PATH="$tmp/optplot:$PATH" "$bin" report "$tmp/run" --out -dash >"$tmp/dash.txt" 2>&1) &&
    [ -e "$tmp/-dash/loss.png" ] || fail "report --out -dash: $(cat "$tmp/dash.txt")"
# --out makes its parents, as bench's does
"$bin" report "$tmp/run" --out "$tmp/deep/er/out" --no-png >/dev/null 2>&1 && [ -s "$tmp/deep/er/out/report.html" ] ||
    fail "report --out into missing parents: no report.html"
# --out under a regular file: refused naming it and --out (the folder was taken as made, and the first chart's
# write failed, naming a path below it)
echo x >"$tmp/afile"
out=$("$bin" report "$tmp/run" --out "$tmp/afile/sub" --no-png 2>&1)
[ $? -eq 1 ] && grep -q "error: --out: $tmp/afile: is a regular file, not a directory: choose another path" <<<"$out" ||
    fail "report --out under a file: $out"
grep eval "$lines" | m "$tmp/noeval"
expect_error "no step lines" "$tmp/noeval"
printf '{"step":1,"lo' | m "$tmp/torn1" # (its only line cut short: said, not only "no step yet")
expect_error "no step lines (0 lines read, and a last one cut short, not a whole line of JSON)" "$tmp/torn1"
"$bin" report >/dev/null 2>&1
[ $? -eq 2 ] || fail "report without RUN_DIR: expected exit 2"

# A report into the folder of an earlier one that made more: --no-png (and
# a run with no evaluations) leaves none of that report's charts beside its
# own (six PNGs and accuracy.svg removed, said); its own SVGs stay.
if [ "$have_gnuplot" = 1 ]; then
    "$bin" report "$tmp/run" --out "$tmp/stale" >/dev/null 2>&1 || fail "the report to go stale"
    grep -v '"eval"' "$lines" | m "$tmp/noev"
    "$bin" report "$tmp/noev" --out "$tmp/stale" --no-png >"$tmp/out.txt" 2>&1 || fail "report over a report: $(cat "$tmp/out.txt")"
    grep -q "^report: removed 7 chart file(s) of an earlier report there, not made this time" "$tmp/out.txt" &&
        [ -z "$(ls "$tmp/stale" | grep -E '\.png$|^accuracy')" ] && [ -s "$tmp/stale/loss.svg" ] ||
        fail "report --no-png over an earlier report: $(cat "$tmp/out.txt"); $(ls "$tmp/stale" | tr '\n' ' ')"
fi
e2e_finish ok
