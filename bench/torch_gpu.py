#!/usr/bin/env python3
"""The PyTorch side of bench/gpu_vs_torch.py: one measurement in this process.

    python3 bench/torch_gpu.py '{"model": "gpt2", "spec": {...}, "batch": 16, "steps": 30,
        "warmup": 5, "device": "cuda", "precision": "bf16", "compile": "auto", "optim": {...}}'

The models are written plainly, as PyTorch users write them, and match
scaletrain's (src/model/model.c): the same shapes, initialisation scheme and
parameter count. On CUDA: bf16 autocast, fused AdamW, torch.compile (of the
model with its loss) and scaled_dot_product_attention when this PyTorch has
them, each said in the JSON line printed last; random data held on the
device; step times from CUDA events after the warm-up steps. On the CPU (the
harness's --tiny check, PyTorch 1.13 there) whatever of that exists.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_vs_torch as cvt  # noqa: E402  (stdlib at import; torch inside its functions)


def last_error_line(text):
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "(no output)"


def torch_modules():
    import torch.nn as nn
    import torch.nn.functional as F
    has_sdpa = hasattr(F, "scaled_dot_product_attention")

    # the models are cpu_vs_torch.py's (the CPU benchmark's twins; its gpt
    # uses scaled_dot_product_attention where this PyTorch has it)
    base = cvt.torch_models()

    class WithLoss(nn.Module):  # the loss inside the compiled graph, as nanoGPT's forward(idx, targets)
        def __init__(self, net):
            super().__init__()
            self.net = net

        def forward(self, x, y):
            logits = self.net(x)
            return F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))

    return {"mlp": base["mlp"], "cnn": base["cnn"], "gpt2": base["gpt"]}, WithLoss, has_sdpa


def torch_worker(w):
    """One PyTorch measurement as the JSON `w` says; prints one JSON line."""
    import torch
    model, s, B, dev = w["model"], w["spec"], w["batch"], torch.device(w["device"])
    cuda = dev.type == "cuda"
    bf16 = w["precision"] == "bf16"
    torch.manual_seed(1)
    if cuda:
        torch.backends.cudnn.benchmark = True
        # nanoGPT's set-up: TF32 for what autocast leaves in fp32; none in an fp32 comparison
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = bf16
    classes, WithLoss, has_sdpa = torch_modules()
    net = classes[model](**s).to(dev)
    net.train()
    params = sum(p.numel() for p in net.parameters())
    lossmod = WithLoss(net)
    info = {"torch": torch.__version__, "params": params, "batch": B, "precision": w["precision"],
            "sdpa": has_sdpa if model == "gpt2" else None, "device_name": "cpu", "tf32": bool(cuda and bf16)}
    if cuda:
        info["device_name"] = torch.cuda.get_device_name(dev)
    try:
        opt = torch.optim.AdamW(net.parameters(), **w["optim"], fused=True) if cuda else None
        info["fused_adamw"] = opt is not None
    except (TypeError, RuntimeError):
        opt = None
        info["fused_adamw"] = False
    if opt is None:
        opt = torch.optim.AdamW(net.parameters(), **w["optim"])
    want_compile = w["compile"] == "on" or (w["compile"] == "auto" and cuda)
    step_fn = lossmod
    info["compile"] = False
    if want_compile and hasattr(torch, "compile"):
        step_fn = torch.compile(lossmod)
        info["compile"] = True
    elif want_compile:
        info["compile_note"] = f"torch {torch.__version__} has no torch.compile"

    # Random data held on the device; each step gathers a random batch there.
    # As many sequences as the run draws, as the scaletrain side's shard has
    # (bench/gpu_vs_torch.py make_data): few repeats, so neither side's loss
    # falls by memorising a small pool.
    n = max(8 * B, 256, B * (w["warmup"] + w["steps"]))
    if model == "gpt2":
        toks = torch.randint(s["vocab"], (n, s["block"] + 1), device=dev)
    else:
        h, wd, c = s["image"]
        xs = torch.randn(n, h * wd * c, device=dev) if model == "mlp" else torch.randn(n, c, h, wd, device=dev)
        ys = torch.randint(s["classes"], (n,), device=dev)

    def step():
        idx = torch.randint(n, (B,), device=dev)
        if model == "gpt2":
            x, y = toks[idx, :-1], toks[idx, 1:]
        else:
            x, y = xs[idx], ys[idx]
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=bf16):
            loss = step_fn(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    losses, times = [], []
    t0 = time.perf_counter()
    try:
        losses.append(step())
    except Exception as e:  # noqa: BLE001 - a compile failure falls back to eager, said in the table
        if not info["compile"] or "out of memory" in str(e):
            raise
        info["compile"] = False
        info["compile_note"] = f"torch.compile failed, eager instead: {last_error_line(str(e))[:200]}"
        step_fn = lossmod
        opt.zero_grad(set_to_none=True)
        losses.append(step())
    sync()
    info["first_step_s"] = time.perf_counter() - t0  # torch.compile's time is in here
    for _ in range(w["warmup"] - 1):
        losses.append(step())
    sync()
    if cuda:
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(w["steps"])]
    t0 = time.perf_counter()
    for i in range(w["steps"]):
        if cuda:
            ev[i][0].record()
            losses.append(step())
            ev[i][1].record()
        else:
            t1 = time.perf_counter()
            losses.append(step())
            times.append(1e3 * (time.perf_counter() - t1))
    sync()
    wall = time.perf_counter() - t0
    if cuda:
        times = [a.elapsed_time(b) for a, b in ev]
        info["peak_alloc_bytes"] = torch.cuda.max_memory_allocated(dev)
        info["peak_reserved_bytes"] = torch.cuda.max_memory_reserved(dev)
    info.update(step_ms_median=sorted(times)[len(times) // 2], step_ms_mean_wall=1e3 * wall / w["steps"],
                steps=w["steps"], first_loss=losses[0].item(), last_loss=losses[-1].item())
    if model == "gpt2" and has_sdpa:
        info.update(sdpa_timing(torch, s, B, dev, torch.bfloat16 if bf16 else torch.float32))
    print(json.dumps(info))


def sdpa_timing(torch, s, B, dev, dtype, reps=20):
    """One layer's causal scaled_dot_product_attention at the model's shape
    (B, heads, T, head size), as PyTorch picks its kernel: the median of
    `reps` timings (CUDA events; the clock on the CPU) of forward, and of
    forward + backward (ms), to set beside scaletrain's attention passes in
    its profile."""
    import torch.nn.functional as F
    T, nh, hs = s["block"], s["n_head"], s["n_embd"] // s["n_head"]
    q, k, v = (torch.randn(B, nh, T, hs, device=dev, dtype=dtype, requires_grad=True) for _ in range(3))
    dy = torch.randn(B, nh, T, hs, device=dev, dtype=dtype)

    def timed(fn):
        for _ in range(3):
            fn()
        if dev.type != "cuda":
            t = []
            for _ in range(reps):
                t0 = time.perf_counter()
                fn()
                t.append(1e3 * (time.perf_counter() - t0))
            return sorted(t)[len(t) // 2]
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        for a, b in ev:
            a.record()
            fn()
            b.record()
        torch.cuda.synchronize(dev)
        t = sorted(a.elapsed_time(b) for a, b in ev)
        return t[len(t) // 2]

    def fwd():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def fwd_bwd():
        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(dy)

    try:
        return {"sdpa_fwd_ms": timed(fwd), "sdpa_fwd_bwd_ms": timed(fwd_bwd)}
    except RuntimeError as e:  # noqa: BLE001 - a note, not a failed benchmark
        return {"sdpa_error": last_error_line(str(e))[:200]}


if __name__ == "__main__":
    torch_worker(json.loads(sys.argv[1]))
