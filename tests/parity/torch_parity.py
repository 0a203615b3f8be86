#!/usr/bin/python3
"""PyTorch parity oracle for scaletrain's CPU layers, models and AdamW.

Run by build/tests/test_parity (which passes --driver, its own path). For each
case it draws random inputs and weights with torch, writes them to a
safetensors file, runs `DRIVER CASE in.safetensors out.safetensors`, computes
the same thing with PyTorch and compares forward outputs, the loss, every
parameter gradient, every input gradient and the batch-norm running
statistics. One line per case; the exit status is 1 if any case failed.

    torch_parity.py --driver build/tests/test_parity [--seed N] [--case SUBSTR] [-v]

Every run draws a fresh seed (printed first); --seed N repeats a run.
Needs Debian's python3-torch (/usr/bin/python3). Not here: timing, CUDA,
dropout masks (torch's generator cannot be matched; dropout is checked as
the identity it is with p = 0 or in eval).
"""
import argparse
import json
import math
import os
import secrets
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import ref_models as rm

# Error of a tensor = max |ours - ref| / max |ref| (max |ours - ref| when ref is
# all zero); NaN or Inf anywhere fails, and so does a missing, extra or
# misshapen tensor. References are float64 from the same float32 inputs, so
# the error is scaletrain's own fp32 rounding: ~1e-7 for every layer and model
# here (sums of at most a few hundred terms), so 1e-4 leaves a wide margin and
# still fails a wrong index, sign, scale or layout, which give O(1).
TOLERANCES = {
    "out": 1e-4,     # forward outputs and logits
    "loss": 1e-5,    # losses, including the ten losses of the AdamW runs
    "dparam": 1e-4,  # parameter gradients
    "dinput": 1e-4,  # input gradients
    "buffer": 1e-5,  # batch-norm running mean / var (a short sum, then a blend)
    # Weights after ten AdamW steps, relative to the tensor's largest update,
    # over the elements where Adam is well conditioned (ADAM_RMS_FLOOR):
    # ~5e-5 typical, 2e-4 seen. Looser than the rest because Adam divides by
    # the gradient's RMS, which amplifies rounding in small gradients.
    "weights": 1e-2,
    # bf16 / fp16 outputs (docs/precision.md): the reference rounds inputs and
    # weights to 16 bits, multiplies in float64 and rounds the result to 16
    # bits; ours sums in fp32, so a value next to a rounding boundary may land
    # one 16-bit ulp away: at most 2^-7 (bf16) or 2^-10 (fp16) of the largest
    # value, and at least LOWP_EXACT of the elements must match bit for bit.
    "out_bf16": 2.0 ** -7,
    "out_fp16": 2.0 ** -10,
}
LOWP_EXACT = 0.95


# --- safetensors ------------------------------------------------------------

DTYPES = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32"}


def save_safetensors(path, tensors):
    """Minimal writer: 8-byte little-endian header length, JSON header padded
    with spaces to a multiple of 8, then the data back to back."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        a = np.ascontiguousarray(t.detach().cpu().numpy() if torch.is_tensor(t) else t)
        data = a.tobytes()
        header[name] = {"dtype": DTYPES[a.dtype], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for data in blobs:
            f.write(data)


def load_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        dtype = {"F32": np.float32, "I32": np.int32}[e["dtype"]]
        b, end = e["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + b:8 + n + end], dtype=dtype).reshape(e["shape"])
    return out


# --- comparison -------------------------------------------------------------

def compare(ours, ref, verbose):
    """ref: name -> (class, tensor), or ("weights", final, initial, mask): the
    error of final weights is relative to the largest update, over the
    elements where mask is true. Returns (ok, {class: worst error}, messages)."""
    ok, worst, msgs = True, {}, []
    for name in sorted(set(ours) - set(ref)):
        ok = False
        msgs.append(f"  {name}: output not checked by the reference (a parameter torch lacks?)")
    for name, (cls, t, *init) in ref.items():
        r = t.detach().double().numpy()
        if name not in ours:
            ok = False
            msgs.append(f"  {name}: missing from the driver's output")
            continue
        o = ours[name].astype(np.float64)
        if o.shape != r.shape and not (o.size == 1 and r.size == 1):
            ok = False
            msgs.append(f"  {name}: shape {list(o.shape)}, torch {list(r.shape)}")
            continue
        o, r = o.reshape(-1), r.reshape(-1)
        scale = np.abs(r).max() if r.size else 0.0
        if init:
            keep = init[1].numpy().reshape(-1)
            o, r = o[keep], r[keep]
            scale = np.abs(r - init[0].detach().double().numpy().reshape(-1)[keep]).max()
        diff = np.abs(o - r)
        err = float(diff.max() / scale if scale > 0 else diff.max()) if r.size else 0.0
        if not np.all(np.isfinite(o)):
            err = float("nan")
        prev = worst.get(cls, 0.0)
        worst[cls] = err if not math.isnan(prev) and (math.isnan(err) or err > prev) else prev
        tol = TOLERANCES[cls]
        if cls.startswith("out_") and r.size:
            exact = float(np.mean(o == r))
            if not (exact >= LOWP_EXACT):
                ok = False
                msgs.append(f"  {name} ({cls}): only {100 * exact:.1f}% of the values equal the 16-bit "
                            f"reference (want {100 * LOWP_EXACT:.0f}%)")
        if not (err <= tol):
            ok = False
            bad = ~np.isfinite(o)
            i = int(np.argmax(bad)) if bad.any() else int(np.argmax(diff))
            msgs.append(f"  {name} ({cls}): error {err:.3g} > {tol:g}; "
                        f"worst at [{i}]: ours {o[i]:.9g}, torch {r[i]:.9g}")
        elif verbose:
            msgs.append(f"  {name} ({cls}): error {err:.3g}")
    return ok, worst, msgs


# --- layer cases ------------------------------------------------------------

def rand(gen, *shape, scale=1.0):
    return scale * torch.randn(*shape, generator=gen)


def layer(gen, inputs, fn, diff, params=(), args=None, loss=False):
    """Run fn on float64 copies of `inputs` (name -> float32/int32 tensor).
    `diff` are inputs and `params` parameters that get gradients; fn may
    replace entries of its dict by module parameters and may return
    (y, extras) with extras: name -> (class, tensor). Returns (file, ref)."""
    t = {}
    for n, v in inputs.items():
        t[n] = v.double().requires_grad_(n in diff or n in params) if v.is_floating_point() else v.long()
    y = fn(t)
    y, extras = y if isinstance(y, tuple) else (y, {})
    file = dict(inputs)
    if args is not None:
        file["args"] = torch.tensor(args, dtype=torch.int32)
    if loss:
        y.backward()
        ref = {"loss": ("loss", y)}
    else:
        dy = rand(gen, *y.shape)
        y.backward(dy.double())
        file["dy"] = dy
        ref = {"out": ("out", y)}
    for n in (*diff, *params):
        ref["grad." + n] = ("dinput" if n in diff else "dparam", t[n].grad)
    ref.update(extras)
    return file, ref


def nchw(x):
    return x.permute(0, 3, 1, 2)


def nhwc(x):
    return x.permute(0, 2, 3, 1)


def case_linear(gen, shape, N, in_out=False, bias=True, tied=False):
    K = shape[-1]
    x = rand(gen, *shape)
    if tied:
        w = rand(gen, N, K, scale=0.5)
        return layer(gen, {"x": x, "w": w}, lambda t: t["x"] @ t["w"].t(), ["x", "w"], args=[N, 0, 0, 1])
    inputs = {"x": x, "lin.weight": rand(gen, *((K, N) if in_out else (N, K)), scale=0.5)}
    params = ["lin.weight"]
    if bias:
        inputs["lin.bias"] = rand(gen, N, scale=0.5)
        params.append("lin.bias")

    def fn(t):
        y = t["x"] @ t["lin.weight"] if in_out else F.linear(t["x"], t["lin.weight"])
        return y + t["lin.bias"] if bias else y
    return layer(gen, inputs, fn, ["x"], params, args=[N, int(in_out), int(bias), 0])


def case_linear_lowp(gen, shape, N, dtype):
    """A bf16/fp16 linear as the GPU runs it without autocast: x, weight and
    bias rounded to 16 bits, an fp32-accumulated product (float64 here), the
    output rounded to 16 bits. dy is given in 16 bits (as the GPU stores it);
    the gradients are fp32 (parameter gradients accumulate in fp32)."""
    K = shape[-1]
    x = rand(gen, *shape)
    inputs = {"x": x, "lin.weight": rand(gen, N, K, scale=0.5), "lin.bias": rand(gen, N, scale=0.5)}
    r16 = {n: v.to(dtype).double() for n, v in inputs.items()}
    dy = rand(gen, *shape[:-1], N).to(dtype).float()
    t = {n: v.clone().requires_grad_(True) for n, v in r16.items()}
    y = F.linear(t["x"], t["lin.weight"], t["lin.bias"])
    y.backward(dy.double())
    y16 = y.detach().float().to(dtype).float()
    file = dict(inputs, dy=dy, args=torch.tensor([N, 0, 1, 0], dtype=torch.int32))
    cls = "out_bf16" if dtype == torch.bfloat16 else "out_fp16"
    ref = {"out": (cls, y16), "grad.x": ("dinput", t["x"].grad),
           "grad.lin.weight": ("dparam", t["lin.weight"].grad), "grad.lin.bias": ("dparam", t["lin.bias"].grad)}
    return file, ref


def case_embedding(gen, B, T, vocab, dim):
    # vocab < B*T: repeated indices must accumulate their gradients
    idx = torch.randint(0, vocab, (B, T), generator=gen, dtype=torch.int32)
    inputs = {"idx": idx, "emb.weight": rand(gen, vocab, dim)}
    return layer(gen, inputs, lambda t: F.embedding(t["idx"], t["emb.weight"]), [], ["emb.weight"],
                 args=[vocab, dim])


def case_pos_embedding(gen, B, T, C, max_len):
    inputs = {"x": rand(gen, B, T, C), "pos.weight": rand(gen, max_len, C)}
    return layer(gen, inputs, lambda t: t["x"] + t["pos.weight"][:T], ["x"], ["pos.weight"], args=[max_len])


def case_layernorm(gen, shape):
    C = shape[-1]
    inputs = {"x": rand(gen, *shape, scale=2.0) + 0.5, "ln.weight": 1 + rand(gen, C, scale=0.3),
              "ln.bias": rand(gen, C, scale=0.3)}
    return layer(gen, inputs, lambda t: F.layer_norm(t["x"], (C,), t["ln.weight"], t["ln.bias"], 1e-5),
                 ["x"], ["ln.weight", "ln.bias"])


def case_gelu(gen, shape):
    return layer(gen, {"x": rand(gen, *shape, scale=3.0)}, lambda t: F.gelu(t["x"], approximate="tanh"), ["x"])


def case_relu(gen, shape):
    return layer(gen, {"x": rand(gen, *shape)}, lambda t: F.relu(t["x"]), ["x"])


def case_add(gen, shape):
    return layer(gen, {"a": rand(gen, *shape), "b": rand(gen, *shape)}, lambda t: t["a"] + t["b"], ["a", "b"])


def case_dropout(gen, shape, p_percent, training):
    def fn(t):
        drop = nn.Dropout(p_percent / 100)
        drop.train(training)
        return drop(t["x"])
    return layer(gen, {"x": rand(gen, *shape)}, fn, ["x"], args=[p_percent, int(training)])


def case_attention(gen, B, T, C, n_head):
    return layer(gen, {"qkv": rand(gen, B, T, 3 * C)}, lambda t: rm.causal_attention(t["qkv"], n_head),
                 ["qkv"], args=[n_head])


def case_conv2d(gen, B, H, W, cin, cout, k, stride, pad, bias):
    inputs = {"x": rand(gen, B, H, W, cin), "conv.weight": rand(gen, cout, cin, k, k, scale=0.3)}
    params = ["conv.weight"]
    if bias:
        inputs["conv.bias"] = rand(gen, cout, scale=0.3)
        params.append("conv.bias")

    def fn(t):
        y = F.conv2d(nchw(t["x"]), t["conv.weight"], t.get("conv.bias"), stride=stride, padding=pad)
        return nhwc(y)
    return layer(gen, inputs, fn, ["x"], params, args=[cout, k, stride, pad, int(bias)])


def case_maxpool2d(gen, B, H, W, C, k, stride):
    return layer(gen, {"x": rand(gen, B, H, W, C)}, lambda t: nhwc(F.max_pool2d(nchw(t["x"]), k, stride)),
                 ["x"], args=[k, stride])


def case_batchnorm(gen, shape, training):
    C = shape[-1]
    inputs = {"x": rand(gen, *shape, scale=2.0) + 1.0, "bn.weight": 1 + rand(gen, C, scale=0.3),
              "bn.bias": rand(gen, C, scale=0.3), "bn.running_mean": rand(gen, C, scale=0.5),
              "bn.running_var": 0.5 + torch.rand(C, generator=gen)}

    def fn(t):
        bn = (nn.BatchNorm2d if len(shape) == 4 else nn.BatchNorm1d)(C, eps=1e-5, momentum=0.1).double()
        with torch.no_grad():
            for n in ("weight", "bias", "running_mean", "running_var"):
                getattr(bn, n).copy_(t["bn." + n])
        bn.train(training)
        t["bn.weight"], t["bn.bias"] = bn.weight, bn.bias  # grads come from the module
        x = t["x"]
        y = nhwc(bn(nchw(x))) if len(shape) == 4 else bn(x)
        return y, {"bn.running_mean": ("buffer", bn.running_mean), "bn.running_var": ("buffer", bn.running_var)}
    return layer(gen, inputs, fn, ["x"], ["bn.weight", "bn.bias"], args=[int(training)])


def case_flatten(gen, shape):
    def fn(t):  # NHWC in, nn.Flatten on NCHW out; other ranks flatten as they are
        return nn.Flatten()(nchw(t["x"]) if len(shape) == 4 else t["x"])
    return layer(gen, {"x": rand(gen, *shape)}, fn, ["x"])


def case_softmax_ce(gen, shape):
    V = shape[-1]
    targets = torch.randint(0, V, shape[:-1], generator=gen, dtype=torch.int32)
    ignore = torch.rand(shape[:-1], generator=gen) < 0.25
    ignore.view(-1)[0] = True
    ignore.view(-1)[-1] = False  # at least one counted target
    targets[ignore] = -100
    inputs = {"logits": rand(gen, *shape, scale=3.0), "targets": targets}

    def fn(t):
        return F.cross_entropy(t["logits"].reshape(-1, V), t["targets"].reshape(-1), ignore_index=-100)
    return layer(gen, inputs, fn, ["logits"], loss=True)


def case_linear_ce(gen, shape, V):
    """The fused output layer and loss: cross_entropy(h W^T) (rows in 8
    chunks on our side)."""
    targets = torch.randint(0, V, shape[:-1], generator=gen, dtype=torch.int32)
    ignore = torch.rand(shape[:-1], generator=gen) < 0.25
    ignore.view(-1)[-1] = False
    targets[ignore] = -100
    inputs = {"h": rand(gen, *shape, scale=2.0), "w": rand(gen, V, shape[-1], scale=0.5), "targets": targets}

    def fn(t):
        return F.cross_entropy((t["h"] @ t["w"].t()).reshape(-1, V), t["targets"].reshape(-1), ignore_index=-100)
    return layer(gen, inputs, fn, ["h", "w"], loss=True)


def case_mse(gen, shape):
    inputs = {"pred": rand(gen, *shape), "target": rand(gen, *shape)}
    return layer(gen, inputs, lambda t: F.mse_loss(t["pred"], t["target"]), ["pred"], loss=True)


# --- model cases ------------------------------------------------------------

def well_conditioned(draw):
    """Call draw() until its model's forward passes stayed KINK_MARGIN away
    from every ReLU and max-pool kink (about one draw in eight of the mlp
    training runs is redrawn); each draw continues the case's generator, so a
    seed still fixes everything."""
    for _ in range(50):
        result = draw()
        if result[0].margin >= rm.KINK_MARGIN:
            return result
    raise RuntimeError("50 draws in a row came within KINK_MARGIN of a kink")


def case_model(gen, kind, B):
    """One forward and backward of a whole model: logits, loss, every parameter
    gradient and (cnn) the running statistics after the step."""
    def draw():
        model = rm.make_model(kind).double()
        rm.randomize(model, gen)
        xn, x, yn, y = rm.batch(kind, B, gen)
        if kind == "gpt":  # a few ignored targets
            y.view(-1)[torch.randperm(y.numel(), generator=gen)[:3]] = -100
        file = {**rm.weights(model), xn: x, yn: y}
        model.train()
        logits, loss = rm.loss_of(kind, model, x.long() if kind == "gpt" else x, y)
        return model, file, logits, loss
    model, file, logits, loss = well_conditioned(draw)
    loss.backward()
    ref = {"logits": ("out", logits), "loss": ("loss", loss)}
    for n, p in model.named_parameters():
        ref["grad." + n] = ("dparam", p.grad)
    for n, b in model.named_buffers():
        if not n.endswith("num_batches_tracked"):
            ref[n] = ("buffer", b)
    return file, ref


# Mirrors pm_train_case / pm_config in tests/parity_models.h.
TRAIN = dict(steps=10, lr=1e-3, weight_decay=0.1, betas=(0.9, 0.999), eps=1e-8)
# Final weights are compared only where Adam's update is well conditioned: an
# element whose gradient RMS (sqrt of the bias-corrected second moment) fell
# below this fraction of its tensor's largest at some step has a gradient
# near fp32's noise floor, which Adam's division by that RMS turns into an
# O(lr) step of either sign. Examples: an element whose first gradient is
# ~1e-8 by chance; the attention key bias, whose gradient is zero in exact
# arithmetic (q.b is added to a whole row of scores, which the softmax
# cancels) but not in rounding. Gradients that are exactly zero on both sides
# (a ReLU unit dead for the whole batch) are well conditioned and kept.
ADAM_RMS_FLOOR = 1e-4


def case_train(gen, kind, B):
    """TRAIN["steps"] AdamW steps on the same weights and batches: the loss
    before each step and the final weights. Weight decay applies to tensors
    with 2+ dimensions only (two parameter groups)."""
    def draw():
        model = rm.make_model(kind).double()
        rm.randomize(model, gen)
        init = rm.weights(model)
        batches = [rm.batch(kind, B, gen) for _ in range(TRAIN["steps"])]
        xs = torch.stack([b[1] for b in batches])
        ys = torch.stack([b[3] for b in batches])
        names = {p: n for n, p in model.named_parameters()}
        decay = [p for p in model.parameters() if p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": TRAIN["weight_decay"]},
                                 {"params": no_decay, "weight_decay": 0.0}],
                                lr=TRAIN["lr"], betas=TRAIN["betas"], eps=TRAIN["eps"])
        model.train()
        losses, keep = [], {n: torch.ones(p.shape, dtype=torch.bool) for p, n in names.items()}
        for step, (x, y) in enumerate(zip(xs, ys), 1):
            opt.zero_grad()
            _, loss = rm.loss_of(kind, model, x.long() if kind == "gpt" else x, y)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
            for p, n in names.items():
                rms = (opt.state[p]["exp_avg_sq"] / (1 - TRAIN["betas"][1] ** step)).sqrt()
                keep[n] &= (rms >= ADAM_RMS_FLOOR * rms.max()) | (rms == 0)
        return model, init, xs, ys, losses, keep
    model, init, xs, ys, losses, keep = well_conditioned(draw)
    ref = {"losses": ("loss", torch.stack(losses))}
    for n, w in init.items():
        ref["final." + n] = ("weights", model.state_dict()[n], w, keep[n])
    return {**init, "steps.x": xs, "steps.y": ys}, ref


# (name, driver case, builder); cheap shapes, several per layer where cheap.
CASES = [
    ("linear", "linear", lambda g: case_linear(g, (2, 3, 5), 4)),
    ("linear/nobias", "linear", lambda g: case_linear(g, (7, 16), 9, bias=False)),
    ("linear/conv1d", "linear", lambda g: case_linear(g, (2, 4, 8), 12, in_out=True)),
    ("linear/conv1d-nobias", "linear", lambda g: case_linear(g, (3, 6), 5, in_out=True, bias=False)),
    ("linear/tied", "linear", lambda g: case_linear(g, (2, 3, 6), 11, tied=True)),
    ("linear/bf16", "linear_bf16", lambda g: case_linear_lowp(g, (4, 8, 64), 48, torch.bfloat16)),
    ("linear/fp16", "linear_fp16", lambda g: case_linear_lowp(g, (4, 8, 64), 48, torch.float16)),
    ("embedding", "embedding", lambda g: case_embedding(g, 3, 5, 7, 4)),
    ("embedding/wide", "embedding", lambda g: case_embedding(g, 2, 9, 50, 13)),
    ("pos_embedding", "pos_embedding", lambda g: case_pos_embedding(g, 2, 5, 6, 8)),
    ("pos_embedding/full", "pos_embedding", lambda g: case_pos_embedding(g, 3, 8, 3, 8)),
    ("layernorm", "layernorm", lambda g: case_layernorm(g, (2, 3, 16))),
    ("layernorm/2d", "layernorm", lambda g: case_layernorm(g, (5, 33))),
    ("gelu", "gelu", lambda g: case_gelu(g, (4, 37))),
    ("relu", "relu", lambda g: case_relu(g, (3, 5, 7))),
    ("add", "add", lambda g: case_add(g, (2, 3, 4))),
    ("dropout/p0-train", "dropout", lambda g: case_dropout(g, (3, 17), 0, True)),
    ("dropout/p50-eval", "dropout", lambda g: case_dropout(g, (3, 17), 50, False)),
    ("attention", "attention", lambda g: case_attention(g, 2, 5, 8, 2)),
    ("attention/3heads", "attention", lambda g: case_attention(g, 1, 7, 12, 3)),
    ("attention/1head", "attention", lambda g: case_attention(g, 2, 4, 4, 1)),
    ("conv2d", "conv2d", lambda g: case_conv2d(g, 2, 7, 6, 3, 4, 3, 1, 1, True)),
    ("conv2d/stride2", "conv2d", lambda g: case_conv2d(g, 1, 9, 9, 2, 3, 3, 2, 0, False)),
    ("conv2d/1x1", "conv2d", lambda g: case_conv2d(g, 2, 5, 5, 1, 2, 1, 1, 0, True)),
    ("conv2d/5x5", "conv2d", lambda g: case_conv2d(g, 1, 8, 7, 3, 2, 5, 1, 2, True)),
    # 3x3, stride 1, padding 1, 8 channels in and out: the Winograd F(2x2, 3x3)
    # path (winograd.c), odd height for a partial tile
    ("conv2d/winograd", "conv2d", lambda g: case_conv2d(g, 2, 7, 6, 8, 8, 3, 1, 1, True)),
    ("maxpool2d", "maxpool2d", lambda g: case_maxpool2d(g, 2, 6, 6, 3, 2, 2)),
    ("maxpool2d/3s2", "maxpool2d", lambda g: case_maxpool2d(g, 1, 7, 5, 2, 3, 2)),
    ("maxpool2d/overlap", "maxpool2d", lambda g: case_maxpool2d(g, 1, 5, 5, 1, 2, 1)),
    ("batchnorm/train-2d", "batchnorm", lambda g: case_batchnorm(g, (2, 4, 5, 3), True)),
    ("batchnorm/train-1d", "batchnorm", lambda g: case_batchnorm(g, (6, 5), True)),
    ("batchnorm/eval-2d", "batchnorm", lambda g: case_batchnorm(g, (2, 4, 5, 3), False)),
    ("batchnorm/eval-1d", "batchnorm", lambda g: case_batchnorm(g, (6, 5), False)),
    ("flatten", "flatten", lambda g: case_flatten(g, (2, 3, 4, 5))),
    ("flatten/3d", "flatten", lambda g: case_flatten(g, (3, 4, 5))),
    ("softmax_ce", "softmax_ce", lambda g: case_softmax_ce(g, (6, 10))),
    ("softmax_ce/3d", "softmax_ce", lambda g: case_softmax_ce(g, (2, 4, 7))),
    ("linear_ce", "linear_ce", lambda g: case_linear_ce(g, (2, 13, 12), 53)),
    ("mse", "mse", lambda g: case_mse(g, (3, 4))),
    ("mse/3d", "mse", lambda g: case_mse(g, (2, 3, 5))),
    ("model_mlp", "model_mlp", lambda g: case_model(g, "mlp", 4)),
    ("model_cnn", "model_cnn", lambda g: case_model(g, "cnn", 4)),
    ("model_gpt", "model_gpt", lambda g: case_model(g, "gpt", 2)),
    ("train_mlp", "train_mlp", lambda g: case_train(g, "mlp", 8)),
    ("train_gpt", "train_gpt", lambda g: case_train(g, "gpt", 2)),
]


def run_case(index, name, driver_case, build, args, tmp):
    gen = torch.Generator().manual_seed(args.seed * 1000 + index)
    file, ref = build(gen)
    inp, out = os.path.join(tmp, "in.safetensors"), os.path.join(tmp, "out.safetensors")
    save_safetensors(inp, file)
    if os.path.exists(out):
        os.remove(out)
    p = subprocess.run([args.driver, driver_case, inp, out], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        return False, {}, [f"  driver exited {p.returncode}: {p.stderr.strip()}"]
    return compare(load_safetensors(out), ref, args.verbose)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--driver", required=True, help="the test_parity binary")
    ap.add_argument("--seed", type=int, default=None, help="repeat a run (default: a fresh seed)")
    ap.add_argument("--case", default="", help="run only cases whose name contains this")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every tensor's error")
    args = ap.parse_args()
    if args.seed is None:
        args.seed = secrets.randbelow(1 << 31)
    torch.set_num_threads(1)
    print(f"torch_parity: seed {args.seed} (repeat with: {args.driver} --seed {args.seed})",
          flush=True)
    if not any(args.case in name for name, _, _ in CASES):
        print(f"torch_parity: no case name contains '{args.case}'", file=sys.stderr)
        return 2
    failed = []
    with tempfile.TemporaryDirectory(prefix="st_parity_") as tmp:
        for index, (name, driver_case, build) in enumerate(CASES):
            if args.case not in name:
                continue
            try:
                ok, worst, msgs = run_case(index, name, driver_case, build, args, tmp)
            except Exception as e:  # a broken case fails alone; the others still run
                ok, worst, msgs = False, {}, [f"  {type(e).__name__}: {e}"]
            errs = "  ".join(f"{c} {e:.1e}" for c, e in sorted(worst.items()))
            print(f"{'PASS' if ok else 'FAIL'} {name:<22} {errs}", flush=True)
            for m in msgs:
                print(m, flush=True)
            if not ok:
                failed.append(name)
    if failed:
        print(f"torch_parity: {len(failed)} case(s) failed: {' '.join(failed)} (seed {args.seed})")
        return 1
    print("torch_parity: all cases pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
