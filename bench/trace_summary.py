#!/usr/bin/env python3
"""Where a profiled run's step time went, from its trace.json (`scaletrain
train --profile A-B`; docs/formats.md, "Profiler trace").

For one rank (default 0), per traced step: the host's step time and, on a
CUDA device, how busy each of the GPU's streams was over the step (the sum of
its spans); then per kind of layer (the "(kind)" of a layer event's name)
the time of its forward and backward passes per step: the GPU's (compute
stream) where the trace has the device's tracks, else the host's; and the
rate each reached from the work the trace's events carry (their "args": the
matrix products' FLOPs as TFLOP/s, the elements elementwise work moves as
GB/s at the trace's bytes per element), to set against the device's peaks;
on a device also each matrix product and named kernel inside the layers by
its label (the trace's kernel track: "linear_ce dh", "flash dQ"), with the
products' TFLOP/s. A compute
stream far from fully busy means the GPU waited: for the host, the data or
the communication.

    python3 bench/trace_summary.py runs/x/trace.json [--rank R] [--markdown]
"""
import argparse
import json
import re
import sys
from collections import defaultdict

GPU_COMPUTE, GPU_COMM, GPU_COPY, GPU_KERNEL = 2000, 2001, 2002, 2003


def summarize(path, rank=0):
    d = json.load(open(path))
    X = [e for e in d["traceEvents"] if e.get("ph") == "X" and e["pid"] == rank]
    steps = sorted((e for e in X if e["tid"] == 0 and e["cat"] == "step" and e["name"].startswith("step ")),
                   key=lambda e: e["ts"])
    if not steps:
        raise SystemExit(f"{path}: no step of rank {rank} in the trace")
    gpu = any(e["tid"] == GPU_COMPUTE for e in X)

    def step_of(e):  # the host step a host event falls in
        for i, s in enumerate(steps):
            if s["ts"] <= e["ts"] < s["ts"] + s["dur"]:
                return i
        return None

    # The GPU's spans by the host events they time: the compute stream runs
    # them in the order the host queued them, one span per layer pass and per
    # optimizer, so the k-th span is the k-th such host event's (a GPU may
    # run a step's kernels while the host is in the next step).
    host = sorted((e for e in X if e["tid"] == 0 and ((e["cat"] in ("forward", "backward") and "(" in e["name"])
                                                       or (e["cat"] == "optim" and e["name"] == "optimizer"))),
                  key=lambda e: e["ts"])
    comp = sorted((e for e in X if e["tid"] == GPU_COMPUTE), key=lambda e: e["ts"])
    owner = {}
    if gpu and len(comp) == len(host):
        for h, g in zip(host, comp):
            owner[id(g)] = step_of(h)
    else:
        for g in comp:
            owner[id(g)] = step_of(g)
    rows = []
    for i, s in enumerate(steps):
        row = {"step": s["name"], "host_ms": s["dur"] / 1e3}
        mine = [g for g in comp if owner.get(id(g)) == i]
        if mine:
            t0 = min(e["ts"] for e in mine)
            t1 = max(e["ts"] + e["dur"] for e in mine)
            row["gpu_ms"] = (t1 - t0) / 1e3
            for tid, key in ((GPU_COMPUTE, "compute"), (GPU_COMM, "comm"), (GPU_COPY, "copy")):
                busy = sum(min(e["ts"] + e["dur"], t1) - max(e["ts"], t0) for e in X
                           if e["tid"] == tid and e["ts"] < t1 and e["ts"] + e["dur"] > t0)
                row[key + "_busy"] = busy / (t1 - t0) if t1 > t0 else 0.0
        rows.append(row)
    per_kind = defaultdict(lambda: [0.0, 0.0, 0.0])  # ms, flops, elems
    for e in (comp if gpu else host):
        m = re.search(r"\((\w+)\)$", e["name"])
        kind = m.group(1) if m else e["name"]
        if (owner.get(id(e)) if gpu else step_of(e)) is not None:
            acc = per_kind[(kind, e["cat"])]
            acc[0] += e["dur"] / 1e3
            acc[1] += e.get("args", {}).get("flops", 0)
            acc[2] += e.get("args", {}).get("elems", 0)
    n = len(steps)
    eb = d.get("otherData", {}).get("elem_bytes", 4)
    kinds = []
    for (k, c), (ms, fl, el) in per_kind.items():
        tflops = fl / (ms * 1e-3) / 1e12 if ms > 0 and fl > 0 else None
        gbs = el * eb / (ms * 1e-3) / 1e9 if ms > 0 and el > 0 else None
        kinds.append((k, c, ms / n, tflops, gbs))
    kinds.sort(key=lambda r: -r[2])
    # The products and named kernels inside layers (track 2003), by label.
    per_kernel = defaultdict(lambda: [0.0, 0.0, 0])  # ms, flops, count
    for e in X:
        if e["tid"] == GPU_KERNEL:
            acc = per_kernel[e["name"]]
            acc[0] += e["dur"] / 1e3
            acc[1] += e.get("args", {}).get("flops", 0)
            acc[2] += 1
    kernels = [(name, ms / n, fl / (ms * 1e-3) / 1e12 if ms > 0 and fl > 0 else None, cnt / n)
               for name, (ms, fl, cnt) in per_kernel.items()]
    kernels.sort(key=lambda r: -r[1])
    return {"path": path, "rank": rank, "gpu": gpu, "steps": rows, "kinds": kinds, "elem_bytes": eb,
            "kernels": kernels}


def rates(tflops, gbs):
    """The rate a pass reached against its floor: TFLOP/s for the matrix
    products, GB/s for the elements moved (at the trace's element size)."""
    parts = []
    if tflops:
        parts.append(f"{tflops:.3g} TFLOP/s")
    if gbs:
        parts.append(f"{gbs:.3g} GB/s")
    return ", ".join(parts) or "-"


def markdown(r):
    out = []
    src = "GPU (compute stream)" if r["gpu"] else "host"
    head = "| step | host ms |" + (" GPU ms | compute busy | comm busy | copy busy |" if r["gpu"] else "")
    out += [head, "|" + "---|" * (head.count("|") - 1)]
    for s in r["steps"]:
        line = f"| {s['step']} | {s['host_ms']:.2f} |"
        if r["gpu"]:
            line += (f" {s.get('gpu_ms', 0):.2f} | {100 * s.get('compute_busy', 0):.1f}% | "
                     f"{100 * s.get('comm_busy', 0):.1f}% | {100 * s.get('copy_busy', 0):.1f}% |")
        out.append(line)
    total = sum(k[2] for k in r["kinds"]) or 1.0
    out += ["", f"| layer kind | pass | {src} ms per step | share | reached (products: TFLOP/s; "
            f"elementwise: GB/s at {r['elem_bytes']} bytes an element) |", "|---|---|---|---|---|"]
    for kind, cat, ms, tflops, gbs in r["kinds"]:
        out.append(f"| {kind} | {cat} | {ms:.3f} | {100 * ms / total:.1f}% | {rates(tflops, gbs)} |")
    if r.get("kernels"):
        out += ["", "| product or kernel (inside layers) | GPU ms per step | calls per step | share | "
                "products: TFLOP/s |", "|---|---|---|---|---|"]
        for name, ms, tflops, calls in r["kernels"]:
            out.append(f"| {name} | {ms:.3f} | {calls:g} | {100 * ms / total:.1f}% | "
                       f"{f'{tflops:.3g}' if tflops else '-'} |")
    return "\n".join(out)


def one_line(r, top=6):
    """A short note: the compute stream's busy fraction and the heaviest layer kinds."""
    busy = [s["compute_busy"] for s in r["steps"] if "compute_busy" in s]
    head = (f"compute stream busy {100 * min(busy):.0f}-{100 * max(busy):.0f}% of the GPU's step"
            if busy else "no GPU tracks (host times)")
    tot = sum(k[2] for k in r["kinds"]) or 1.0
    kinds = ", ".join(f"{k} {c} {ms:.2f} ms ({100 * ms / tot:.0f}%; {rates(tf, gb)})"
                      for k, c, ms, tf, gb in r["kinds"][:top])
    line = f"{head}; per step by layer kind: {kinds}"
    if r.get("kernels"):
        line += "; heaviest products and kernels inside them: " + ", ".join(
            f"{name} {ms:.2f} ms" + (f" ({tf:.3g} TFLOP/s)" if tf else "") for name, ms, tf, _ in r["kernels"][:top])
    return line


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace")
    p.add_argument("--rank", type=int, default=0)
    a = p.parse_args()
    r = summarize(a.trace, a.rank)
    print(markdown(r))
    print("\n" + one_line(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
