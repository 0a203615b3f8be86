#!/usr/bin/python3
"""scaletrain against PyTorch on the CPU: the same models, batch, threads and data.

For each model (mlp, cnn, gpt) and thread count it trains the model for a few
steps with PyTorch, then with scaletrain (the order flips from one
configuration to the next), and prints each side's median step time, its
throughput, the achieved model GFLOP/s and the ratio scaletrain/PyTorch.

    /usr/bin/python3 bench/cpu_vs_torch.py [--models mlp,cnn,gpt] [--threads 1,2]
        [--steps N] [--repeats R] [--build DIR] [--tokens FILE] [--out FILE.md]

Both sides: fp32, AdamW(lr 1e-3, betas 0.9/0.999, eps 1e-8, no weight
decay), data held in memory (batch assembly is timed, data loading is not),
OMP_WAIT_POLICY=PASSIVE and OMP_NUM_THREADS=T. bench/README.md says what each
figure means. Needs Debian's python3-torch (so /usr/bin/python3) and a built
scaletrain. Not here: accuracy or convergence comparisons, GPUs, MPI, or
writing bench/RESULTS.md (run this on an idle machine and copy the table).
"""
import argparse
import ctypes
import gzip
import json
import math
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FMNIST = "/usr/share/datasets/fashion-mnist"
WARMUP = 5  # PyTorch steps run before timing; scaletrain runs as many extra steps

# The PyTorch twins' shapes; bench/configs/<model>.yaml must describe the same
# model (checked at run time through the parameter count, FLOPs and batch).
SPECS = {
    "mlp": dict(batch=256, steps=60, image=(28, 28, 1), hidden=(1024, 1024), classes=10,
                targets={1: 1.0, 2: 1.2}),
    "cnn": dict(batch=128, steps=30, image=(28, 28, 1), channels=(32, 64, 128), pool=(0, 1, 1),
                kernel=3, classes=10, targets={1: 1.2, 2: 1.5}),
    "gpt": dict(batch=8, steps=30, vocab=256, block=256, n_layer=4, n_head=4, n_embd=256,
                targets={1: 1.2, 2: 1.5}),
}
OPTIM = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)


def flops_per_sample(model):
    """Forward matmul/conv FLOPs of one sample, as st_model_flops_per_sample
    counts them (2 per multiply-add; attention over the full T x T). A training
    step is counted as 3x this: forward, and backward to inputs and weights."""
    return forward_flops(model, SPECS[model])


def forward_flops(model, s):
    """flops_per_sample for a model of spec s (SPECS' keys; bench/gpu_vs_torch.py
    has specs of its own)."""
    if model == "mlp":
        dims = [s["image"][0] * s["image"][1] * s["image"][2], *s["hidden"], s["classes"]]
        return sum(2.0 * a * b for a, b in zip(dims[:-1], dims[1:]))
    if model == "cnn":
        h, w, ch = s["image"]
        k, f = s["kernel"], 0.0
        for co, pool in zip(s["channels"], s["pool"]):
            f += 2.0 * h * w * co * ch * k * k
            ch = co
            if pool:
                h, w = h // 2, w // 2
        return f + 2.0 * h * w * ch * s["classes"]
    C, L, T, V = s["n_embd"], s["n_layer"], s["block"], s["vocab"]
    return T * (24.0 * L * C * C + 4.0 * L * T * C + 2.0 * C * V)


def upper_median(xs):
    """The median as scaletrain reports it: sorted[n // 2]."""
    return sorted(xs)[len(xs) // 2]


# --- data, shared by both sides -------------------------------------------------

def read_idx_gz(path):
    """IDX (gzip): big-endian u32 magic (0x800 | ndim) and dims, then uint8 data."""
    import numpy as np
    with gzip.open(path, "rb") as f:
        raw = f.read()
    magic, = struct.unpack(">I", raw[:4])
    ndim = magic & 0xFF
    if magic >> 8 != 0x08 or ndim < 1:
        raise ValueError(f"{path}: not a uint8 IDX file (magic {magic:#x})")
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def read_tokens(path):
    """A scaletrain token file (docs/formats.md): 64-byte header, then tokens."""
    import numpy as np
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:8] != b"STTOKENS":
        raise ValueError(f"{path}: not a scaletrain token file")
    version, width, count, vocab = struct.unpack("<IIQQ", raw[8:32])
    if version != 1 or width not in (2, 4) or len(raw) != 64 + count * width:
        raise ValueError(f"{path}: bad header or size")
    dtype = np.uint16 if width == 2 else np.uint32
    return np.frombuffer(raw, dtype=dtype, offset=64, count=count).astype(np.int64), vocab


def text_files(min_bytes):
    """Plain-text files on any Debian machine, in a fixed order, until min_bytes."""
    cands = sorted(os.path.join("/usr/share/common-licenses", n)
                   for n in os.listdir("/usr/share/common-licenses"))
    doc = "/usr/share/doc"
    cands += sorted(os.path.join(doc, d, "copyright") for d in os.listdir(doc))
    seen, out, total = set(), [], 0
    for p in cands:
        r = os.path.realpath(p)
        if r in seen or not os.path.isfile(r) or os.path.getsize(r) == 0:
            continue
        seen.add(r)
        out.append(r)
        total += os.path.getsize(r)
        if total >= min_bytes:
            return out, total
    raise SystemExit(f"only {total} bytes of text found under /usr/share; pass --tokens FILE")


def make_tokens(binary, path):
    files, total = text_files(2 << 20)
    r = subprocess.run([binary, "data", "tokenize", path, *files], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"scaletrain data tokenize failed:\n{r.stderr}")
    print(f"token file: {path}: {total} bytes of text from {len(files)} files "
          "(/usr/share/common-licenses, /usr/share/doc/*/copyright)")


# --- the PyTorch side (runs in a child process: --torch-worker) ------------------

def torch_models():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class MLP(nn.Module):
        def __init__(self, image, hidden, classes, **_):
            super().__init__()
            dims = [image[0] * image[1] * image[2], *hidden]
            self.fc = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
            self.head = nn.Linear(dims[-1], classes)

        def forward(self, x):  # x (B, 784)
            for fc in self.fc:
                x = F.relu(fc(x))
            return self.head(x)

    class CNN(nn.Module):
        def __init__(self, image, channels, pool, kernel, classes, **_):
            super().__init__()
            H, W, cin = image
            layers = []
            for c, p in zip(channels, pool):
                layers += [nn.Conv2d(cin, c, kernel, padding=kernel // 2, bias=False), nn.BatchNorm2d(c),
                           nn.ReLU(inplace=True)]
                if p:
                    layers.append(nn.MaxPool2d(2, 2))
                    H, W = H // 2, W // 2
                cin = c
            self.features = nn.Sequential(*layers)
            self.head = nn.Linear(cin * H * W, classes)

        def forward(self, x):  # x (B, 1, 28, 28), NCHW
            return self.head(torch.flatten(self.features(x), 1))

    # nanoGPT (Karpathy), without dropout modules (p = 0 on both sides): the
    # fused scaled_dot_product_attention where this PyTorch has it (2.x, as
    # bench/torch_gpu.py uses this model on a GPU), the plain masked softmax
    # otherwise (Debian's 1.13, the CPU benchmark).
    has_sdpa = hasattr(F, "scaled_dot_product_attention")

    class CausalSelfAttention(nn.Module):
        def __init__(self, C, n_head, block):
            super().__init__()
            self.n_head = n_head
            self.c_attn = nn.Linear(C, 3 * C)
            self.c_proj = nn.Linear(C, C)
            if not has_sdpa:
                self.register_buffer("bias", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(C, dim=2)
            k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            if has_sdpa:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
                att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
                att = F.softmax(att, dim=-1)
                y = att @ v
            return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    class Block(nn.Module):
        def __init__(self, C, n_head, block):
            super().__init__()
            self.ln_1 = nn.LayerNorm(C)
            self.attn = CausalSelfAttention(C, n_head, block)
            self.ln_2 = nn.LayerNorm(C)
            self.mlp = nn.Sequential(nn.Linear(C, 4 * C), nn.GELU(approximate="tanh"), nn.Linear(4 * C, C))

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self, vocab, block, n_layer, n_head, n_embd, **_):
            super().__init__()
            self.wte = nn.Embedding(vocab, n_embd)
            self.wpe = nn.Embedding(block, n_embd)
            self.h = nn.ModuleList(Block(n_embd, n_head, block) for _ in range(n_layer))
            self.ln_f = nn.LayerNorm(n_embd)
            self.lm_head = nn.Linear(n_embd, vocab, bias=False)
            self.wte.weight = self.lm_head.weight  # tied
            self.apply(self._init_weights)
            for name, p in self.named_parameters():  # GPT-2's scaled residual projections
                if name.endswith("attn.c_proj.weight") or name.endswith("mlp.2.weight"):
                    nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

        @staticmethod
        def _init_weights(m):
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

        def forward(self, idx):  # idx (B, T) -> logits (B, T, V)
            pos = torch.arange(idx.size(1), dtype=torch.long, device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            return self.lm_head(self.ln_f(x))

    return {"mlp": MLP, "cnn": CNN, "gpt": GPT}


def torch_data(model, tokens):
    """All training samples as in-memory tensors, prepared as scaletrain
    prepares them: images as pixel/255 standardised with the training set's
    mean and std, token windows of block+1 tokens without overlap."""
    import numpy as np
    import torch
    s = SPECS[model]
    if model == "gpt":
        tok, _ = read_tokens(tokens)
        T = s["block"]
        n = (len(tok) - 1) // T
        x = torch.from_numpy(tok[:n * T].reshape(n, T).copy())
        y = torch.from_numpy(tok[1:n * T + 1].reshape(n, T).copy())
        return x, y
    px = read_idx_gz(f"{FMNIST}/train-images-idx3-ubyte.gz").astype(np.float32) / 255.0
    labels = read_idx_gz(f"{FMNIST}/train-labels-idx1-ubyte.gz").astype(np.int64)
    px = (px - px.mean()) / px.std()
    x = torch.from_numpy(px)
    x = x.reshape(len(x), -1) if model == "mlp" else x.unsqueeze(1)  # (N, 784) or (N, 1, 28, 28)
    return x.contiguous(), torch.from_numpy(labels)


def torch_worker(model, threads, steps, tokens):
    """One PyTorch measurement; prints one JSON line."""
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    s = SPECS[model]
    x_all, y_all = torch_data(model, tokens)
    net = torch_models()[model](**s)
    net.train()
    opt = torch.optim.AdamW(net.parameters(), **OPTIM)
    n, B = len(x_all), s["batch"]
    gen = torch.Generator().manual_seed(1)
    perm, pos = torch.randperm(n, generator=gen), 0
    times, losses = [], []
    for step in range(WARMUP + steps):
        t0 = time.perf_counter()
        if pos + B > n:  # drop the last partial batch, as scaletrain does
            perm, pos = torch.randperm(n, generator=gen), 0
        idx = perm[pos:pos + B]
        pos += B
        x, y = x_all[idx], y_all[idx]
        logits = net(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step >= WARMUP:
            times.append(time.perf_counter() - t0)
    blas = sorted({os.path.basename(ln.split()[-1]) for ln in open("/proc/self/maps") if "blas" in ln})
    core = ""  # the kernels this process's OpenBLAS loaded (Debian's PyTorch multiplies through it)
    for path in sorted({ln.split()[-1] for ln in open("/proc/self/maps") if "libopenblas" in ln}):
        try:
            lib = ctypes.CDLL(path)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            core = lib.openblas_get_corename().decode()
        except (OSError, AttributeError):
            pass
    print(json.dumps({
        "step_ms_median": 1e3 * upper_median(times), "steps": len(times),
        "params": sum(p.numel() for p in net.parameters()), "threads": torch.get_num_threads(),
        "first_loss": losses[0], "last_loss": losses[-1], "blas": blas, "blas_core": core,
    }))


# --- running both sides ------------------------------------------------------

def child_env(threads):
    env = dict(os.environ)
    env.update(OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    return env


def last_json(stdout, what):
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"{what}: no JSON line in its output")


def run_torch(model, threads, steps, tokens):
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-worker", model, "--threads", str(threads),
           "--steps", str(steps)] + (["--tokens", tokens] if tokens else [])
    r = subprocess.run(cmd, cwd=ROOT, env=child_env(threads), capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"PyTorch {model} failed:\n{r.stderr[-3000:]}")
    j = last_json(r.stdout, "PyTorch worker")
    want = os.environ.get("OPENBLAS_CORETYPE", "")
    if j.get("blas_core") and want and j["blas_core"].lower() != want.lower():
        raise RuntimeError(f"PyTorch's OpenBLAS ran {j['blas_core']} kernels, not {want}: the sides differ")
    return j


def same_blas_kernels(binary):
    """The OpenBLAS kernels scaletrain runs on this CPU, given to both sides.

    Debian's PyTorch multiplies through the same OpenBLAS, which on a CPU
    newer than the library (an Emerald Rapids for 0.3.21) loads its SSE3
    (Prescott) kernels, 3-6x slower; scaletrain corrects that for itself
    (src/core/blas.h) and PyTorch does not. Set before anything here loads
    OpenBLAS, OPENBLAS_CORETYPE then gives every process the same kernels.
    Returns the line the header prints."""
    if os.environ.get("OPENBLAS_CORETYPE"):
        return f"OpenBLAS kernels: {os.environ['OPENBLAS_CORETYPE']} on both sides (OPENBLAS_CORETYPE, as given)"
    r = subprocess.run([binary, "help"], env=dict(os.environ, OPENBLAS_VERBOSE="2"), capture_output=True,
                       text=True)
    cores = [ln.split(":", 1)[1].strip() for ln in (r.stderr + r.stdout).splitlines() if ln.startswith("Core:")]
    if not cores:
        return "OpenBLAS kernels: unknown (OPENBLAS_VERBOSE=2 printed no Core: line); each side its own"
    os.environ["OPENBLAS_CORETYPE"] = cores[-1]
    own = f"; OpenBLAS itself chose {cores[0]} for this CPU" if cores[0] != cores[-1] else ""
    return f"OpenBLAS kernels: {cores[-1]} on both sides (OPENBLAS_CORETYPE{own})"


def st_args(binary, model, threads, steps, tokens, out_dir):
    a = [binary, "train", f"bench/configs/{model}.yaml", "--set", f"train.steps={steps}",
         "--set", f"train.threads={threads}", "--set", "data.val=", "--set", f"train.out_dir={out_dir}"]
    return a + (["--set", f"data.train={tokens}"] if model == "gpt" else [])


def run_st(binary, model, threads, steps, tokens, out_dir):
    # log.every=1 only makes train_loss the last step's loss, as PyTorch's is;
    # the log line is written after the step's time is taken.
    cmd = st_args(binary, model, threads, steps, tokens, out_dir) + ["--set", "log.every=1", "--json", "--quiet"]
    r = subprocess.run(cmd, cwd=ROOT, env=child_env(threads), capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"scaletrain {model} failed: {' '.join(cmd)}\n{r.stderr[-3000:]}")
    j = last_json(r.stdout, "scaletrain")
    # The batch and the FLOPs per sample scaletrain used, recovered from its summary.
    j["batch"] = j["samples_per_s"] * j["seconds"] / j["steps"]
    j["flops_per_sample"] = j["gflops_per_s"] * 1e9 * j["seconds"] / (3.0 * j["steps"] * j["batch"])
    return j


def st_param_count(binary, model, tokens, out_dir):
    """scaletrain's own parameter count: one step, not quiet."""
    cmd = st_args(binary, model, 1, 1, tokens, out_dir)
    r = subprocess.run(cmd, cwd=ROOT, env=child_env(1), capture_output=True, text=True)
    m = re.search(r"^model: \w+, (\d+) parameters", r.stdout, re.M)
    if r.returncode != 0 or not m:
        raise RuntimeError(f"scaletrain {model} failed: {' '.join(cmd)}\n{r.stderr[-3000:]}")
    return int(m.group(1))


# --- the machine ---------------------------------------------------------------

def machine_info(binary):
    lines = []
    cpu = "unknown"
    cores = set()
    phys = core = None
    for ln in open("/proc/cpuinfo"):
        k, _, v = ln.partition(":")
        k, v = k.strip(), v.strip()
        if k == "model name" and cpu == "unknown":
            cpu = v
        elif k == "physical id":
            phys = v
        elif k == "core id":
            core = v
            cores.add((phys, core))
    logical = os.cpu_count()
    usable = len(os.sched_getaffinity(0))
    lines.append(f"CPU: {cpu}; {logical} logical CPUs ({len(cores) or '?'} physical cores), "
                 f"{usable} usable by this process")
    blas = "not found"
    ldd = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    m = re.search(r"libopenblas\S*\s+=>\s+(\S+)", ldd)
    if m:
        try:
            lib = ctypes.CDLL(m.group(1))
            lib.openblas_get_config.restype = ctypes.c_char_p
            blas = f"{lib.openblas_get_config().decode()} ({os.path.realpath(m.group(1))})"
        except (OSError, AttributeError):
            blas = os.path.realpath(m.group(1))
    lines.append(f"scaletrain: {binary}, OpenBLAS {blas}")
    import numpy
    import torch
    deb = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "python3-torch"], capture_output=True,
                         text=True).stdout.strip()
    lines.append(f"PyTorch {torch.__version__}" + (f" (Debian python3-torch {deb})" if deb else "") +
                 f", NumPy {numpy.__version__}, Python {sys.version.split()[0]}")
    git = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                         text=True).stdout.strip()
    if git:
        changed = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "src", "tools", "include",
                                  "Makefile"], capture_output=True, text=True).stdout.strip()
        lines.append(f"scaletrain commit: {git}" + (" plus uncommitted or untracked files in src, tools, "
                                                    "include or Makefile" if changed else ""))
    load = open("/proc/loadavg").read().split()[:3]
    lines.append(f"load average at start: {' '.join(load)}")
    if float(load[0]) > 0.5:
        lines.append("WARNING: the machine is not idle; these timings are not results")
    return lines


# --- the table -----------------------------------------------------------------

def fmt_rate(v, unit):
    return f"{v:,.0f} {unit}"


def paired_cell(r):
    """The repeats' own ratios: their median and range (one repeat: that ratio)."""
    p = r.get("paired") or []
    if not p:
        return "-"
    if len(p) == 1:
        return f"{p[0]:.2f}x"
    return f"{statistics.median(p):.2f}x ({p[0]:.2f}-{p[-1]:.2f})"


def table(rows):
    head = ["model", "threads", "PyTorch ms/step", "scaletrain ms/step", "PyTorch throughput",
            "scaletrain throughput", "PyTorch GFLOP/s", "scaletrain GFLOP/s", "scaletrain/PyTorch",
            "paired (median, range)", "target"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['model']} | {r['threads']} | " + " | ".join(["failed"] * 8) + " | - |")
            continue
        unit = "tok/s" if r["model"] == "gpt" else "samples/s"
        tgt = r["target"]
        tcell = "-" if tgt is None else f">= {tgt:.1f}x: {'yes' if r['ratio'] >= tgt else 'NO'}"
        out.append(f"| {r['model']} | {r['threads']} | {r['torch_ms']:.1f} | {r['st_ms']:.1f} | "
                   f"{fmt_rate(r['torch_rate'], unit)} | {fmt_rate(r['st_rate'], unit)} | "
                   f"{r['torch_gflops']:.1f} | {r['st_gflops']:.1f} | {r['ratio']:.2f}x | {paired_cell(r)} | "
                   f"{tcell} |")
    return out


def check_scaletrain_model(j, model):
    """The batch and FLOPs scaletrain used must be the PyTorch twin's."""
    batch, fps = SPECS[model]["batch"], flops_per_sample(model)
    if abs(j["batch"] / batch - 1) > 1e-6 or abs(j["flops_per_sample"] / fps - 1) > 1e-6:
        raise RuntimeError(f"bench/configs/{model}.yaml differs from the PyTorch twin: batch {j['batch']:.0f} "
                           f"vs {batch}, FLOPs per sample {j['flops_per_sample']:.0f} vs {fps:.0f}")


def measure(binary, model, threads, steps, repeats, tokens, run_dir, torch_first):
    """Alternate the two sides `repeats` times; the best (lowest) median ms/step
    of each side: on a shared machine other tenants only ever add time, so the
    fastest repeat is the closest to what the code costs. Also each repeat's
    own ratio (its PyTorch run over its scaletrain run, taken one after the
    other): where the machine's speed drifts between repeats, their median is
    the steadier figure."""
    tm, sm = [], []
    for rep in range(repeats):
        order = ("torch", "st") if (rep % 2 == 0) == torch_first else ("st", "torch")
        for side in order:
            if side == "torch":
                j = run_torch(model, threads, steps, tokens)
                tm.append(j["step_ms_median"])
                print(f"  {model} T={threads} PyTorch    {j['step_ms_median']:8.1f} ms/step  loss "
                      f"{j['first_loss']:.3f} -> {j['last_loss']:.3f}  ({j['threads']} threads, "
                      f"{', '.join(j['blas']) or 'BLAS ?'})", flush=True)
            else:
                j = run_st(binary, model, threads, steps + WARMUP, tokens, run_dir)
                check_scaletrain_model(j, model)
                sm.append(j["step_ms_median"])
                print(f"  {model} T={threads} scaletrain {j['step_ms_median']:8.1f} ms/step  loss "
                      f"{j['first_loss']:.3f} -> {j['train_loss']:.3f}", flush=True)
    return min(tm), min(sm), [a / b for a, b in zip(tm, sm)]


def row_of(model, threads, torch_ms, st_ms, paired=()):
    s = SPECS[model]
    per_step = s["batch"] * (s["block"] if model == "gpt" else 1)  # samples, or tokens for the gpt
    flop_step = 3.0 * flops_per_sample(model) * s["batch"]
    row = {"model": model, "threads": threads, "target": s["targets"].get(threads),
           "torch_ms": torch_ms, "st_ms": st_ms, "ratio": torch_ms / st_ms, "paired": sorted(paired)}
    for side in ("torch", "st"):
        sec = row[f"{side}_ms"] / 1e3
        row[f"{side}_rate"] = per_step / sec
        row[f"{side}_gflops"] = flop_step / sec / 1e9
    return row


def check_params(binary, models, tokens, run_dir):
    """Both sides must train the same number of parameters; False if not."""
    ok = True
    for m in models:
        s = SPECS[m]
        torch_params = sum(q.numel() for q in torch_models()[m](**s).parameters())
        st_params = st_param_count(binary, m, tokens, run_dir)
        print(f"{m}: parameters scaletrain {st_params:,}, PyTorch {torch_params:,} "
              f"({'equal' if st_params == torch_params else 'MISMATCH'}); "
              f"{flops_per_sample(m) / 1e6:.2f} MFLOP forward per sample, batch {s['batch']}")
        ok = ok and st_params == torch_params
    return ok


def write_markdown(path, info, tab, notes):
    with open(path, "w") as f:
        f.write("# scaletrain vs PyTorch, CPU training step\n\n")
        f.write("".join(f"- {ln}\n" for ln in info))
        f.write("\n" + "\n".join(tab) + "\n\n")
        f.write("".join(f"{ln}\n\n" for ln in notes))
        f.write(f"Command: `/usr/bin/python3 bench/cpu_vs_torch.py {' '.join(sys.argv[1:])}`\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="mlp,cnn,gpt", help="comma-separated: mlp, cnn, gpt")
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    p.add_argument("--steps", type=int, help="timed steps per measurement (default: mlp 60, cnn and gpt 30)")
    p.add_argument("--repeats", type=int, default=1, help="measurements per side and configuration, "
                   "alternating; the table shows each side's best median (default 1)")
    p.add_argument("--build", default="build", help="scaletrain build folder (default build)")
    p.add_argument("--tokens", help="token file for the gpt (default: made from text under /usr/share)")
    p.add_argument("--out", help="also write the machine, the table and the notes as Markdown to this file")
    p.add_argument("--torch-worker", metavar="MODEL", help=argparse.SUPPRESS)
    a = p.parse_args()

    if a.torch_worker:
        torch_worker(a.torch_worker, int(a.threads), a.steps, a.tokens)
        return 0

    try:
        models = [m for m in a.models.split(",") if m]
        threads = [int(t) for t in a.threads.split(",") if t]
    except ValueError:
        p.error("--threads takes comma-separated integers")
    bad = [m for m in models if m not in SPECS]
    if bad:
        p.error(f"unknown model(s) {', '.join(bad)}; known: {', '.join(SPECS)}")
    if not models or not threads or min(threads) < 1 or (a.steps is not None and a.steps < 1) or a.repeats < 1:
        p.error("need at least one model, thread counts >= 1, --steps >= 1 and --repeats >= 1")
    binary = os.path.join(ROOT, a.build, "scaletrain")
    if not os.access(binary, os.X_OK):
        make = "make" if a.build == "build" else f"make BUILD={a.build} {a.build}/scaletrain"
        raise SystemExit(f"{binary} not found: build scaletrain first (cd {ROOT} && {make})")
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    kernels = same_blas_kernels(binary)  # (before torch loads OpenBLAS here)
    try:
        import torch  # noqa: F401
    except ImportError:
        raise SystemExit("PyTorch is not importable: run this with /usr/bin/python3 (Debian's python3-torch)")
    if "mlp" in models or "cnn" in models:
        for f in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"):
            if not os.path.exists(f"{FMNIST}/{f}"):
                raise SystemExit(f"{FMNIST}/{f} is missing: apt-get install dataset-fashion-mnist")
    if a.tokens and not os.path.isfile(a.tokens):
        raise SystemExit(f"{a.tokens}: no such token file")

    info = machine_info(binary) + [kernels]
    notes = [f"Both sides: fp32, AdamW lr 1e-3 (no weight decay), the same batch and data, "
             f"OMP_WAIT_POLICY=PASSIVE and OMP_NUM_THREADS=T. PyTorch runs {WARMUP} warm-up steps, then N "
             f"timed; scaletrain runs N+{WARMUP} steps, all of them in its median.",
             "ms/step: median over the timed steps (batch assembly, forward, backward, AdamW). Throughput "
             "and GFLOP/s come from that median; GFLOP/s counts 3x the forward matmul/conv FLOPs on both "
             "sides. scaletrain/PyTorch = PyTorch ms/step / scaletrain ms/step (above 1: scaletrain faster)."]
    print("\n".join(info + notes))
    tmp = tempfile.mkdtemp(prefix="st-bench-")
    run_dir = os.path.join(tmp, "run")  # scaletrain saves its weights here; thrown away
    rows, ok = [], True
    try:
        tokens = os.path.abspath(a.tokens) if a.tokens else None
        if "gpt" in models and not tokens:
            tokens = os.path.join(tmp, "bench.tokens")
            make_tokens(binary, tokens)
        print()
        ok = check_params(binary, models, tokens, run_dir)
        print()
        for m in models:
            for t in threads:
                try:
                    torch_ms, st_ms, paired = measure(binary, m, t, a.steps or SPECS[m]["steps"], a.repeats,
                                                      tokens, run_dir, torch_first=len(rows) % 2 == 0)
                    rows.append(row_of(m, t, torch_ms, st_ms, paired))
                except RuntimeError as e:
                    print(f"  {m} T={t}: {e}", file=sys.stderr)
                    rows.append({"model": m, "threads": t, "error": str(e)})
                    ok = False
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    tab = table(rows)
    print("\n" + "\n".join(tab))
    if a.out:
        write_markdown(a.out, info, tab, notes)
        print(f"\nwrote {a.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
