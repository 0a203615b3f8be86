#!/usr/bin/env python3
"""Nsight Compute's counters for the GPT-2 step's own kernels: what limits
each (DRAM throughput against the peak, achieved occupancy, registers and
waves, L1 and L2 hit rates, what its warps wait on), for the kernels that
CUDA events alone cannot explain. One GPT-2 124M training run in bf16 on
the GPU (bench/configs/gpt2_124m.yaml, batch 16 x 1024, random tokens, as
bench/gpu_vs_torch.py runs it), every launch of the named kernels in its
second step profiled, the figures averaged per kernel (ncu --print-summary
per-kernel).

The kernels by default: layernorm's fused backward (or, with
--set model.kernel_variants=all, its packed variant) and one-pass forward, the
fused head's rows kernel, the column sums (the linear layers' bias
gradients) and the fused AdamW: about 108 launches a step (25 + 25 + 8 + 49
+ 1), each replayed once per counter pass; about a minute with the run's
start. ncu runs with --clock-control none (the GPU's own clocks, as the
benchmark sees them).

    python3 bench/ncu_kernels.py --build build --out ncu_kernels.txt
    python3 bench/ncu_kernels.py --build build --set model.fused_bias_grad=on --kernels 'ln_backward'

Writes ncu's whole report to --out and prints the lines that matter most
(each kernel's name and launch shape, then duration, DRAM and compute
throughput, occupancy, registers, waves, hit rates and cycles per issued
instruction). Exits 77 (skipped) without ncu; --dry-run prints the command
and runs nothing.
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_vs_torch as gvt  # noqa: E402  (the benchmark's data and shape helpers)

KERNELS = ("ln_backward_fused_kernel|ln_backward_packed_kernel|ln_forward_rows_kernel|lce_rows_kernel|"
           "st_colsum_kernel|adamw_kernel")
PER_STEP = 108  # launches of KERNELS a GPT-2 step makes (see the docstring): the first step is skipped
SECTIONS = ["SpeedOfLight", "LaunchStats", "Occupancy", "MemoryWorkloadAnalysis", "WarpStateStats"]
KEEP = re.compile(r"^\s+\S.*\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\)|"
                  r"^\s+(Duration|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput|"
                  r"Achieved Occupancy|Theoretical Occupancy|Registers Per Thread|Waves Per SM|"
                  r"L1/TEX Hit Rate|L2 Hit Rate|Warp Cycles Per Issued Instruction|Block Limit \w+)\s")


def find_ncu(given):
    if given:
        return given if os.path.exists(given) or shutil.which(given) else None
    for c in [shutil.which("ncu"), "/usr/local/cuda/bin/ncu"] + sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu")):
        if c and os.path.exists(c):
            return c
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="build", help="the build folder holding scaletrain (default build)")
    p.add_argument("--out", default="ncu_kernels.txt", help="ncu's whole report (default ncu_kernels.txt)")
    p.add_argument("--kernels", default=KERNELS, help=f"a regular expression of kernel names (default {KERNELS})")
    p.add_argument("--skip", type=int, default=PER_STEP, help=f"matching launches to skip first (default {PER_STEP})")
    p.add_argument("--count", type=int, default=PER_STEP,
                   help=f"matching launches to profile (default {PER_STEP}: about one step)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="more settings for the run")
    p.add_argument("--ncu", default="", help="the ncu to run (default: on PATH, or under /opt/nvidia/nsight-compute)")
    p.add_argument("--timeout", type=int, default=240, help="seconds for the whole ncu run (default 240)")
    p.add_argument("--tiny", action="store_true", help="a small GPT (the plumbing, on any device)")
    p.add_argument("--device", default="cuda", help="train.device (default cuda)")
    p.add_argument("--dry-run", action="store_true", help="print the command, run nothing")
    a = p.parse_args()

    s = dict(gvt.SPECS["gpt2"])
    if a.tiny:
        s.update(gvt.TINY["gpt2"])
    batch, steps = s["batch"], 3
    ncu = find_ncu(a.ncu)
    tmp = tempfile.mkdtemp(prefix="ncu-kernels-")
    try:
        sets = gvt.shape_sets("gpt2", s) + gvt.make_data("gpt2", s, batch, steps, tmp) + [
            f"train.batch_size={batch}", f"train.micro_batch_size={batch}", f"train.steps={steps}",
            f"train.device={a.device}", "precision=bf16", "data.val=", f"train.out_dir={tmp}/run",
            "log.progress=off", "train.activation_checkpointing=off"] + a.set
        run = [os.path.join(a.build, "scaletrain"), "train", os.path.join(gvt.ROOT, "bench", "configs", "gpt2_124m.yaml")]
        for kv in sets:
            run += ["--set", kv]
        cmd = [ncu or "ncu", "--clock-control", "none", "--target-processes", "all", "--kernel-name-base", "function",
               "--kernel-name", f"regex:{a.kernels}", "--launch-skip", str(a.skip), "--launch-count", str(a.count)]
        for sec in SECTIONS:
            cmd += ["--section", sec]
        cmd += ["--print-summary", "per-kernel"] + run
        print(" ".join(cmd))
        if a.dry_run:
            return 0
        if not ncu:
            print("ncu_kernels: skipped: no ncu (Nsight Compute) on PATH, in /usr/local/cuda/bin or under "
                  "/opt/nvidia/nsight-compute; give --ncu PATH")
            return 77
        try:
            r = subprocess.run(cmd, cwd=gvt.ROOT, env=gvt.child_env(), capture_output=True, text=True,
                               timeout=a.timeout)
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            with open(a.out, "w") as f:
                f.write(out)
            print(f"ncu_kernels: timed out after {a.timeout} s (what ncu printed is in {a.out}); "
                  "profile fewer launches (--count) or fewer kernels (--kernels)")
            return 1
        with open(a.out, "w") as f:
            f.write(r.stdout)
            f.write(r.stderr)
        kept = [ln.rstrip() for ln in r.stdout.splitlines() if KEEP.search(ln)]
        print("\n".join(kept) if kept else "\n".join((r.stdout + r.stderr).splitlines()[-20:]))
        if r.returncode != 0 or not kept:
            print(f"ncu_kernels: ncu exit {r.returncode}, {len(kept)} figure lines; its whole output is in {a.out}")
            return 1
        print(f"ncu_kernels: ncu's whole report is in {a.out}")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
