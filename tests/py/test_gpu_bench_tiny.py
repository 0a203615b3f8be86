#!/usr/bin/python3
"""bench/gpu_vs_torch.py end to end on the CPU (--tiny --device cpu), so that
the GPU benchmark, which runs only when a GPU is lent, does not rot:

  1. gpt2 and cnn, small shapes, 2 timed steps: both sides run (scaletrain in
     bf16, PyTorch under bf16 autocast), train the same number of parameters
     (the harness exits 1 otherwise), and the Markdown table printed last and
     written by --out has one row per model with positive ms/step figures;
     --offload, --selective, --plain-head, --kernel-variants, --matmul-tune and --candidates add their gpt2
     notes (--matmul-tune's counting the product plans timed: none on the CPU)
     (selective and the kernel variants: the same final loss as the run without;
     each note with both runs' MFU); PyTorch's SDPA is timed alone at gpt2's shape;
  2. the precision fall-back: with --st-precision fp8,fp32 scaletrain's fp8
     run is refused (not a precision it knows) and the mlp row runs in fp32,
     saying so in the table and giving the reason in the notes;
  3. a missing scaletrain binary is an error that says to build it;
  4. bench/ncu_kernels.py, the same way: its training run (the tiny gpt2 on
     the CPU) under a stand-in for ncu that drops ncu's options and prints
     two figure lines, which it keeps, with ncu's options as ncu takes them
     (the kernel filter, the skip and count, the sections); with no ncu it
     skips (77), saying so.

Usage: /usr/bin/python3 tests/py/test_gpu_bench_tiny.py BUILD_DIR
Exit status: 0 ok, 1 failure, 77 skipped (no PyTorch: Debian's python3-torch).
"""
import os
import re
import subprocess
import sys
import tempfile

try:
    import torch
except ImportError:
    print("test_gpu_bench_tiny: skipped: PyTorch is not installed (apt-get install python3-torch)")
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "bench", "gpu_vs_torch.py")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL {what}")


def bench(build, *args):
    r = subprocess.run([sys.executable, BENCH, "--tiny", "--device", "cpu", "--steps", "2", "--build", build,
                        *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout, r.stderr


def rows_of(text):
    """The table printed last: {model: {column: cell}}."""
    lines = [ln for ln in text.strip().splitlines() if ln.startswith("|")]
    if len(lines) < 3:
        return {}
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    out = {}
    for ln in lines[2:]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        out[cells[0]] = dict(zip(head, cells))
    return out


def positive(cell):
    try:
        return float(cell.replace(",", "")) > 0
    except ValueError:
        return False


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    if os.path.basename(build).startswith("test_"):  # BUILD/tests/test_x given
        build = os.path.dirname(os.path.dirname(build))
    build = os.path.abspath(build)
    if not os.access(os.path.join(build, "scaletrain"), os.X_OK):
        print(f"test_gpu_bench_tiny: skipped: {build}/scaletrain is not built")
        return 77

    with tempfile.TemporaryDirectory() as tmp:
        md = os.path.join(tmp, "bench.md")
        rc, out, err = bench(build, "--models", "gpt2,cnn", "--out", md, "--offload", "--selective",
                            "--plain-head", "--kernel-variants", "--matmul-tune", "--candidates")
        check(rc == 0, f"gpt2,cnn: exit {rc}\n{out[-3000:]}\n{err[-3000:]}")
        rows = rows_of(out)
        check(sorted(rows) == ["cnn", "gpt2"], f"gpt2,cnn: table rows {sorted(rows)}")
        for m, r in rows.items():
            check(r.get("scaletrain precision") == "bf16", f"{m}: scaletrain precision {r.get('scaletrain precision')}")
            for col in ("scaletrain ms/step", "PyTorch ms/step", "scaletrain/PyTorch"):
                check(positive(r.get(col, "").rstrip("x")), f"{m}: {col} is {r.get(col)!r}")
        check("PARAMETER MISMATCH" not in out, "gpt2,cnn: parameter counts differ")
        check("gpt2: PyTorch" in out and "autocast bf16" in out, "gpt2: the notes name PyTorch's set-up")
        m_sdpa = re.search(r"gpt2: PyTorch's scaled_dot_product_attention alone, one layer at batch \d+: "
                           r"forward ([0-9.]+) ms, forward \+ backward ([0-9.]+) ms", out)
        if hasattr(torch.nn.functional, "scaled_dot_product_attention"):
            check(m_sdpa and 0 < float(m_sdpa.group(1)) and 0 < float(m_sdpa.group(2)),
                  "gpt2: the note times PyTorch's SDPA alone (forward, forward + backward)")
        else:
            print(f"test_gpu_bench_tiny: PyTorch {torch.__version__} has no scaled_dot_product_attention: its "
                  "timing note is not checked here (it is on a GPU machine's PyTorch)")
            check(not m_sdpa and "attention by hand (no SDPA)" in out, "gpt2: no SDPA, no SDPA timing note")
        check(os.path.exists(md) and rows_of(open(md).read()) == rows, "--out holds the same table")
        check("gpt2 with optim.offload (optimizer state and update on the host): " in out and "x the step without"
              in out and "gpt2 with optim.offload" in open(md).read(),
              "--offload: the gpt2 note against the run without")
        check("gpt2 with selective activation checkpointing" in out and ": the same)" in out,
              "--selective: the gpt2 note, the same final loss as the run without")
        check("gpt2 with model.fused_head=off" in out and "relative difference" in out,
              "--plain-head: the gpt2 note against the run with the default head")
        check(re.search(r"gpt2 with model\.kernel_variants=all [^\n]*x the step without \([0-9.]+ ms\), MFU "
                        r"[0-9.]+% against [0-9.]+%[^\n]*: the same\)", out),
              "--kernel-variants: the gpt2 note with both MFUs and the same final loss as the run without")
        check(re.search(r"gpt2 with model\.matmul_tune=on [^\n]*MFU [0-9.]+% against [0-9.]+%[^\n]*; 0 product "
                        r"plans timed, 0 of them kept another algorithm[^\n]*0\.00 ms a step at the first's "
                        r"timed speed, 0\.00 at the kept's[^\n]*relative difference", out),
              "--matmul-tune: the gpt2 note with both MFUs, the plans timed (none on the CPU), the losses compared")
        check(re.search(r"gpt2 with every candidate for a default at once [^\n]*MFU [0-9.]+% against [0-9.]+%"
                        r"[^\n]*relative difference", out),
              "--candidates: the gpt2 note with both MFUs and the final losses compared")

        rc, out, err = bench(build, "--models", "mlp", "--st-precision", "fp8,fp32")
        check(rc == 0, f"mlp fall-back: exit {rc}\n{out[-3000:]}\n{err[-3000:]}")
        r = rows_of(out).get("mlp", {})
        check(r.get("scaletrain precision") == "fp32 (fp8 refused)",
              f"mlp fall-back: scaletrain precision {r.get('scaletrain precision')!r}")
        check(positive(r.get("scaletrain ms/step", "")), f"mlp fall-back: ms/step {r.get('scaletrain ms/step')!r}")
        check("scaletrain fp8 refused or failed" in out and "precision" in out,
              "mlp fall-back: the notes give scaletrain's reason")

    rc, out, err = bench(os.path.join(tmp, "no-such-build"), "--models", "mlp")
    check(rc != 0 and "build scaletrain first" in err, f"missing binary: exit {rc}, stderr {err[-500:]!r}")

    with tempfile.TemporaryDirectory() as tmp:
        fake = os.path.join(tmp, "ncu")
        with open(fake, "w") as f:  # ncu's options dropped, the run's own arguments run
            f.write("#!/bin/sh\necho \"$@\" >\"$0.args\"\n"
                    "while [ $# -gt 0 ] && [ \"${1##*/}\" != scaletrain ]; do shift; done\n"
                    "\"$@\" >\"$0.run\" 2>&1 || exit $?\n"
                    "echo '  ln_backward_fused_kernel<3> (1024, 1, 1)x(128, 1, 1), Context 1, Stream 13'\n"
                    "echo '    DRAM Throughput     %     35.20'\necho '    unrelated line'\n")
        os.chmod(fake, 0o755)
        ncu_py = os.path.join(ROOT, "bench", "ncu_kernels.py")
        report = os.path.join(tmp, "report.txt")
        r = subprocess.run([sys.executable, ncu_py, "--tiny", "--device", "cpu", "--build", build, "--ncu", fake,
                            "--out", report], cwd=ROOT, capture_output=True, text=True, timeout=300)
        args = open(fake + ".args").read() if os.path.exists(fake + ".args") else ""
        run = open(fake + ".run").read() if os.path.exists(fake + ".run") else ""
        check(r.returncode == 0 and "    DRAM Throughput     %     35.20" in r.stdout and
              "unrelated line" not in r.stdout.split("ncu_kernels:")[0].split("\n", 1)[-1],
              f"ncu_kernels.py: exit {r.returncode}, the figure lines not kept alone: {r.stdout[-2000:]}"
              f"{r.stderr[-1000:]}{run[-2000:]}")
        check(re.search(r"--clock-control none .*--kernel-name regex:ln_backward_fused_kernel\|.* --launch-skip 108 "
                        r"--launch-count 108 --section SpeedOfLight .*--print-summary per-kernel \S*scaletrain train",
                        args), f"ncu_kernels.py: ncu's options: {args!r}")
        check(re.search(r"^done: 3 steps", run, re.M), f"ncu_kernels.py: the training run: {run[-1500:]}")
        check(os.path.exists(report) and "unrelated line" in open(report).read(),
              "ncu_kernels.py: --out holds ncu's whole output")
        r = subprocess.run([sys.executable, ncu_py, "--tiny", "--device", "cpu", "--build", build, "--ncu",
                            os.path.join(tmp, "no-ncu")], cwd=ROOT, capture_output=True, text=True, timeout=60)
        check(r.returncode == 77 and "skipped: no ncu" in r.stdout, f"ncu_kernels.py without ncu: exit "
              f"{r.returncode}: {r.stdout[-500:]}")

    if failures:
        print(f"test_gpu_bench_tiny: {len(failures)} failure(s)")
        return 1
    print("test_gpu_bench_tiny: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
