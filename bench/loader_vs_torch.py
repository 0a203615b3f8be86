#!/usr/bin/python3
"""scaletrain's data loader against PyTorch's DataLoader: the same files, batch and workers.

For Fashion-MNIST (batch 128) and a token file (block 256, batch 8), with 1
and 2 workers, it times how many samples per second each loader hands to a
consumer that does nothing but read the targets: scaletrain's
build/bench/bench_loader (the library's dataset, sampler and loader, set up as
a training run sets them up) and torch.utils.data.DataLoader over a Dataset
that reads the same files. It then reads the data-wait fraction of the default
training run (`scaletrain train`, a few dozen steps).

    /usr/bin/python3 bench/loader_vs_torch.py [--workers 1,2] [--repeats R] [--batches N]
        [--warmup K] [--wait-steps S | --metrics FILE] [--build DIR] [--tokens FILE] [--quick]
        [--out FILE.md]

Targets: scaletrain >= 2x PyTorch's samples/s at the same worker count; data
wait below 1% of the default run's step time. bench/README.md says what each
figure means. Needs Debian's python3-torch (so /usr/bin/python3), a built
scaletrain and bench_loader (`make build/scaletrain benches`). Not here: GPU
copies (pin_memory), augmentation, or writing bench/RESULTS.md (run this on an
idle machine and copy the table).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_vs_torch import FMNIST, ROOT, machine_info, make_tokens, read_idx_gz  # noqa: E402

TARGET_RATIO = 2.0  # scaletrain samples/s / PyTorch samples/s, same workers
TARGET_WAIT = 0.01  # data wait / step time of the default run
IMAGES = (f"{FMNIST}/train-images-idx3-ubyte.gz", f"{FMNIST}/train-labels-idx1-ubyte.gz")
SETS = {"images": dict(batch=128), "tokens": dict(batch=8, block=256)}


def child_env():
    env = dict(os.environ)
    env["OMP_WAIT_POLICY"] = "PASSIVE"  # no OpenMP thread left spinning after the pixel statistics
    return env


# --- the PyTorch side (runs in a child process: --torch-worker) ------------------

def torch_datasets():
    import numpy as np
    import torch
    from torch.utils.data import Dataset

    class FashionMNIST(Dataset):
        """As torchvision's MNIST keeps it: the IDX files decoded once into
        uint8 tensors; __getitem__ is ToTensor (/255) then Normalize(mean, std)
        with the training set's statistics, without the PIL round trip
        torchvision makes (which would only slow PyTorch down)."""

        def __init__(self, images, labels):
            px = read_idx_gz(images)
            self.data = torch.from_numpy(px.copy())  # (n, 28, 28) uint8
            self.targets = torch.from_numpy(read_idx_gz(labels).astype(np.int64))
            v = px.astype(np.float64) / 255.0
            self.mean, self.std = float(v.mean()), float(v.std())

        def __len__(self):
            return len(self.data)

        def __getitem__(self, i):
            x = self.data[i].unsqueeze(0).float().div_(255.0).sub_(self.mean).div_(self.std)  # (1, 28, 28)
            return x, int(self.targets[i])

    class Tokens(Dataset):
        """A scaletrain token file (docs/formats.md) through np.memmap, cut
        into windows of block+1 tokens without overlap: x and the shifted y."""

        def __init__(self, path, block):
            import struct
            with open(path, "rb") as f:
                head = f.read(64)
            version, width, count, _ = struct.unpack("<IIQQ", head[8:32])
            if head[:8] != b"STTOKENS" or version != 1 or width not in (2, 4):
                raise ValueError(f"{path}: not a version 1 scaletrain token file")
            self.tok = np.memmap(path, dtype=np.uint16 if width == 2 else np.uint32, mode="r", offset=64,
                                 shape=(count,))
            self.block, self.n = block, (count - 1) // block
            self.mean, self.std = 0.0, 1.0

        def __len__(self):
            return self.n

        def __getitem__(self, i):
            t = self.block
            w = torch.from_numpy(self.tok[i * t:i * t + t + 1].astype(np.int64))  # (T+1,)
            return w[:-1], w[1:]

    return FashionMNIST, Tokens


def torch_worker(kind, workers, batches, warmup, tokens):
    """One measurement of PyTorch's DataLoader; prints one JSON line."""
    import torch
    from torch.utils.data import DataLoader
    FashionMNIST, Tokens = torch_datasets()
    ds = FashionMNIST(*IMAGES) if kind == "images" else Tokens(tokens, SETS["tokens"]["block"])
    dl = DataLoader(ds, batch_size=SETS[kind]["batch"], shuffle=True, num_workers=workers, drop_last=True,
                    pin_memory=False, persistent_workers=workers > 0,
                    generator=torch.Generator().manual_seed(1))

    def batches_forever():
        while True:
            yield from dl

    it = batches_forever()
    for _ in range(warmup):
        next(it)
    checksum, t0 = 0, time.perf_counter()
    for _ in range(batches):
        _, y = next(it)
        checksum += int(y.sum())  # the consumer reads the targets, as bench_loader's does
    secs = time.perf_counter() - t0
    print(json.dumps({"samples_per_s": batches * SETS[kind]["batch"] / secs, "seconds": secs, "n": len(ds),
                      "mean": ds.mean, "std": ds.std, "checksum": checksum}))


# --- the two sides, one measurement each ------------------------------------------

def last_json(stdout, what):
    for ln in reversed(stdout.strip().splitlines()):
        if ln.startswith("{"):
            return json.loads(ln)
    raise RuntimeError(f"{what} printed no JSON line")


def run_torch(kind, workers, batches, warmup, tokens):
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-worker", kind, "--workers", str(workers),
           "--batches", str(batches), "--warmup", str(warmup)] + (["--tokens", tokens] if tokens else [])
    r = subprocess.run(cmd, cwd=ROOT, env=child_env(), capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"PyTorch {kind} W={workers} failed:\n{r.stderr[-3000:]}")
    return last_json(r.stdout, "PyTorch worker")


def run_st(bench, kind, workers, batches, warmup, tokens):
    data = ["--images", IMAGES[0], "--labels", IMAGES[1]] if kind == "images" else \
        ["--tokens", tokens, "--block", str(SETS["tokens"]["block"])]
    cmd = [bench, *data, "--workers", str(workers), "--batch", str(SETS[kind]["batch"]),
           "--batches", str(batches), "--warmup", str(warmup)]
    r = subprocess.run(cmd, cwd=ROOT, env=child_env(), capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"bench_loader failed: {' '.join(cmd)}\n{r.stderr[-3000:]}")
    return last_json(r.stdout, "bench_loader")


def check_same_data(kind, s, t):
    """Both sides must read the same number of samples and normalise alike."""
    if s["n"] != t["n"]:
        raise RuntimeError(f"{kind}: scaletrain reads {s['n']} samples, PyTorch {t['n']}")
    if kind == "images" and (abs(s["mean"] - t["mean"]) > 1e-5 or abs(s["std"] / t["std"] - 1) > 1e-5):
        raise RuntimeError(f"{kind}: normalisation differs: scaletrain mean {s['mean']} std {s['std']}, "
                           f"PyTorch mean {t['mean']} std {t['std']}")


def measure(bench, kind, workers, batches, warmup, repeats, tokens, torch_first):
    """Alternate the two sides `repeats` times (A B B A ...); each side's best
    (highest) samples/s: on a shared machine other tenants only take time."""
    st, tc = [], []
    for rep in range(repeats):
        order = ("torch", "st") if (rep % 2 == 0) == torch_first else ("st", "torch")
        for side in order:
            if side == "torch":
                tc.append(run_torch(kind, workers, batches, warmup, tokens))
            else:
                st.append(run_st(bench, kind, workers, batches, warmup, tokens))
        print(f"  {kind} W={workers} repeat {rep + 1}: PyTorch {tc[-1]['samples_per_s']:,.0f}, scaletrain "
              f"{st[-1]['samples_per_s']:,.0f} samples/s", flush=True)
    check_same_data(kind, st[0], tc[0])
    return max(x["samples_per_s"] for x in tc), max(x["samples_per_s"] for x in st), st[0]["n"]


# --- the data wait of the default run ------------------------------------------------

def wait_from_run(binary, steps, run_dir):
    """`scaletrain train` with the default configuration for `steps` steps
    (no evaluation: it is outside the step time anyway)."""
    cmd = [binary, "train", "--set", f"train.steps={steps}", "--set", "data.val=", "--set",
           f"train.out_dir={run_dir}", "--json", "--quiet"]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"default run failed: {' '.join(cmd)}\n{r.stderr[-3000:]}")
    j = last_json(r.stdout, "scaletrain train")
    return j["data_wait_fraction"], (f"`scaletrain train` with the default configuration (cnn, Fashion-MNIST, "
                                     f"batch 128, data.num_workers auto), {j['steps']:.0f} steps, median "
                                     f"{j['step_ms_median']:.1f} ms/step")


def wait_from_metrics(path):
    """The mean of data_wait_fraction over a metrics.jsonl's training lines
    (each line is one logging window of log.every steps)."""
    fr = []
    with open(path) as f:
        for ln in f:
            o = json.loads(ln)
            if "data_wait_fraction" in o:
                fr.append(o["data_wait_fraction"])
    if not fr:
        raise RuntimeError(f"{path}: no line with data_wait_fraction (a training run's metrics.jsonl?)")
    return sum(fr) / len(fr), f"{path}: mean over {len(fr)} logged windows"


# --- the report --------------------------------------------------------------------

def table(rows):
    head = ["data", "batch", "workers", "PyTorch samples/s", "scaletrain samples/s", "scaletrain/PyTorch",
            "target"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['data']} | {r['batch']} | {r['workers']} | failed | failed | - | - |")
            continue
        ratio = r["st"] / r["torch"]
        out.append(f"| {r['data']} | {r['batch']} | {r['workers']} | {r['torch']:,.0f} | {r['st']:,.0f} | "
                   f"{ratio:.2f}x | >= {TARGET_RATIO:.0f}x: {'yes' if ratio >= TARGET_RATIO else 'NO'} |")
    return out


def data_name(kind, n):
    if kind == "images":
        return f"Fashion-MNIST train ({n:,} x 28x28)"
    return f"tokens ({n:,} windows of {SETS['tokens']['block'] + 1})"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", default="1,2", help="comma-separated worker counts (default 1,2; 0: "
                   "batches assembled in the consumer's own thread or process)")
    p.add_argument("--batches", type=int, help="timed batches per measurement (default 300; --quick 20)")
    p.add_argument("--warmup", type=int, help="batches taken before timing (default 20; --quick 3)")
    p.add_argument("--repeats", type=int, help="measurements per side and configuration, alternating; the "
                   "table shows each side's best (default 3; --quick 1)")
    p.add_argument("--wait-steps", type=int, help="steps of the default training run (default 60; --quick 5)")
    p.add_argument("--metrics", help="read the data-wait fraction from this metrics.jsonl instead of a run")
    p.add_argument("--build", default="build", help="scaletrain build folder (default build)")
    p.add_argument("--tokens", help="token file (default: made from about 2 MB of text under /usr/share)")
    p.add_argument("--quick", action="store_true", help="a few batches, to check the harness works")
    p.add_argument("--out", help="also write the machine, the table and the notes as Markdown to this file")
    p.add_argument("--torch-worker", choices=list(SETS), help=argparse.SUPPRESS)
    a = p.parse_args()
    q = a.quick
    batches = a.batches if a.batches is not None else (20 if q else 300)
    warmup = a.warmup if a.warmup is not None else (3 if q else 20)
    repeats = a.repeats if a.repeats is not None else (1 if q else 3)
    wait_steps = a.wait_steps if a.wait_steps is not None else (5 if q else 60)
    try:
        workers = [int(w) for w in a.workers.split(",") if w]
    except ValueError:
        p.error("--workers takes comma-separated integers")

    if a.torch_worker:
        torch_worker(a.torch_worker, workers[0], batches, warmup, a.tokens)
        return 0

    if not workers or min(workers) < 0 or batches < 1 or warmup < 0 or repeats < 1 or wait_steps < 1:
        p.error("need worker counts >= 0, --batches >= 1, --warmup >= 0, --repeats >= 1, --wait-steps >= 1")
    binary = os.path.join(ROOT, a.build, "scaletrain")
    bench = os.path.join(ROOT, a.build, "bench", "bench_loader")
    for f in (binary, bench):
        if not os.access(f, os.X_OK):
            raise SystemExit(f"{f} not found: build it first (cd {ROOT} && make BUILD={a.build} "
                             f"{a.build}/scaletrain benches)")
    try:
        import torch  # noqa: F401
    except ImportError:
        raise SystemExit("PyTorch is not importable: run this with /usr/bin/python3 (Debian's python3-torch)")
    for f in IMAGES:
        if not os.path.exists(f):
            raise SystemExit(f"{f} is missing: apt-get install dataset-fashion-mnist")
    if a.tokens and not os.path.isfile(a.tokens):
        raise SystemExit(f"{a.tokens}: no such token file")
    if a.metrics and not os.path.isfile(a.metrics):
        raise SystemExit(f"{a.metrics}: no such metrics file")

    info = machine_info(binary)
    notes = [f"Loader throughput: samples/s handed to a consumer that only sums each batch's targets; "
             f"{warmup} warm-up batches, then {batches} timed; best of {repeats} alternating measurements per "
             f"side. Both sides: shuffled, drop_last, no pinned memory, prefetch 2 batches per worker, each "
             f"measurement in a fresh process. Images: pixel/255 normalised with the training set's mean and "
             f"std (scaletrain: float32 (B, 28, 28, 1) and int32 labels; PyTorch: float32 (B, 1, 28, 28) and "
             f"int64 labels). Tokens: windows of {SETS['tokens']['block'] + 1} tokens without overlap, inputs "
             f"and next-token targets (scaletrain int32, PyTorch int64 from np.memmap).",
             f"scaletrain/PyTorch = scaletrain samples/s / PyTorch samples/s; target >= {TARGET_RATIO:.0f}x at "
             f"the same worker count."]
    print("\n".join(info + notes))
    tmp = tempfile.mkdtemp(prefix="st-loaderbench-")
    rows, ok, wait_line = [], True, ""
    try:
        tokens = os.path.abspath(a.tokens) if a.tokens else os.path.join(tmp, "bench.tokens")
        if not a.tokens:
            make_tokens(binary, tokens)
        print()
        for kind in SETS:
            for w in workers:
                try:
                    t, s, n = measure(bench, kind, w, batches, warmup, repeats, tokens,
                                      torch_first=len(rows) % 2 == 0)
                    rows.append({"data": data_name(kind, n), "batch": SETS[kind]["batch"], "workers": w,
                                 "torch": t, "st": s})
                except RuntimeError as e:
                    print(f"  {kind} W={w}: {e}", file=sys.stderr)
                    rows.append({"data": kind, "batch": SETS[kind]["batch"], "workers": w, "error": str(e)})
                    ok = False
        try:
            fr, how = wait_from_metrics(a.metrics) if a.metrics else \
                wait_from_run(binary, wait_steps, os.path.join(tmp, "run"))
            wait_line = (f"Data-wait fraction of the default run: {100 * fr:.3f}% of step time; target < "
                         f"{100 * TARGET_WAIT:.0f}%: {'yes' if fr < TARGET_WAIT else 'NO'} ({how}).")
        except (RuntimeError, KeyError, ValueError) as e:
            print(f"  data wait: {e}", file=sys.stderr)
            wait_line, ok = "Data-wait fraction of the default run: failed.", False
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    tab = table(rows)
    print("\n" + "\n".join(tab) + "\n\n" + wait_line)
    if a.out:
        with open(a.out, "w") as f:
            f.write("Machine (as the harness printed it):\n\n" + "".join(f"    {ln}\n" for ln in info) + "\n")
            f.write("\n".join(tab) + "\n\n" + wait_line + "\n\n" + "\n\n".join(notes) + "\n\n")
            f.write(f"Command: `/usr/bin/python3 bench/loader_vs_torch.py {' '.join(sys.argv[1:])}`\n")
        print(f"\nwrote {a.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
