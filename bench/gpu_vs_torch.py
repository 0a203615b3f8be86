#!/usr/bin/env python3
"""scaletrain against PyTorch on one GPU: GPT-2 124M, cnn and mlp training.

    python3 bench/gpu_vs_torch.py [--models gpt2,cnn,mlp] [--steps N] [--out FILE.md]
    /usr/bin/python3 bench/gpu_vs_torch.py --tiny --device cpu    # the pipeline, in seconds, anywhere

For each model it trains first with scaletrain (`scaletrain train CONFIG
--set ... --json` on random data written as a token shard or a pair of .npy
files), then with the same model written plainly in PyTorch (bf16 autocast,
fused AdamW, torch.compile, scaled_dot_product_attention where the PyTorch at
hand has them; bench/torch_gpu.py) in a child process, and prints a Markdown
table last: ms/step, tokens/s or samples/s, the ratio, MFU, and the peak GPU
memory of each side. bench/README.md says what each figure means.

scaletrain runs in bf16 when the device accepts it; otherwise (bf16 refused,
as before the bf16 kernels exist) in fp32, which the table says, with the
reason in the notes. A batch that runs out of memory is halved. Nothing here
crashes on a failed side: its row says "failed" and the exit status is 1.
With --cudnn-attention, --flash-attention, --offload, --selective,
--plain-head and --gelu-layer, scaletrain's gpt2 runs again with
model.attention_kernel=cudnn (cuDNN's fused attention), with
model.attention_kernel=flash (scaletrain's kernels), with optim.offload, with selective activation
checkpointing, with model.fused_head=off and with model.fused_gelu=off, and
a note gives each one's step time and peak GPU memory against the run
without (and, for selective, whether the final loss is the same: to the bit
where the GELU is its own layer, within roundings where forward fuses it,
which selective does not; for cuDNN, the plain head and the GELU layer, how
far it is; for cuDNN also how many attention passes it ran). With --profile
it runs again with the profiler trace over two steps after the warm-up and
notes where the step went on the GPU (bench/trace_summary.py: each stream's
busy share, the layer kinds' GPU time per step); with --out the trace and
its table are written beside the Markdown (gpt2_trace.json, gpt2_trace.md),
and the note gives scaletrain's attention passes per step, to set beside
PyTorch's scaled_dot_product_attention timed alone at gpt2's shape (one
layer, forward and forward + backward; a note of every gpt2 run whose
PyTorch has SDPA).
Not here: convergence (random data), more than one GPU, writing
bench/RESULTS.md (copy the table there).
"""
import argparse
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_vs_torch as cvt  # noqa: E402  (stdlib at import; torch inside its functions)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
H100_BF16_TFLOPS = 989.0  # H100 SXM dense bf16 (the H200 has the same tensor cores)
MFU_TARGET = 0.45
WARMUP = 5  # PyTorch steps before timing (torch.compile runs in the first); scaletrain runs as many extra

# The models. bench/configs/<config> describes the same model (the shape keys
# are also passed with --set, so --tiny shrinks both sides alike); the
# harness checks that both sides train the same number of parameters.
SPECS = {
    "gpt2": dict(config="gpt2_124m.yaml", batch=16, steps=30, vocab=50257, block=1024, n_layer=12, n_head=12,
                 n_embd=768),
    "cnn": dict(config="cnn.yaml", batch=128, steps=50, image=(28, 28, 1), channels=(32, 64, 128),
                pool=(0, 1, 1), kernel=3, classes=10),
    "mlp": dict(config="mlp.yaml", batch=256, steps=100, image=(28, 28, 1), hidden=(1024, 1024), classes=10),
}
TINY = {
    "gpt2": dict(batch=4, steps=3, vocab=512, block=64, n_layer=2, n_head=2, n_embd=64),
    "cnn": dict(batch=16, steps=3, channels=(8, 16, 16)),
    "mlp": dict(batch=32, steps=3, hidden=(64, 64)),
}
OPTIM = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)


def flops_per_step(model, s, batch):
    """Training FLOPs of one step, counted the same way for both sides.

    gpt2: tokens x (6 N + 12 L T C), N the parameters without the position
    embedding (the tied token embedding counts once, as the output layer's
    matrix product) and 12 L T C the attention scores and values forward and
    backward over the full T x T (PaLM, appendix B; nanoGPT's estimate_mfu).
    mlp, cnn: 3 x the forward matrix-product and convolution FLOPs (2 per
    multiply-add), as st_model_flops_per_sample counts them."""
    if model == "gpt2":
        C, L, T, V = s["n_embd"], s["n_layer"], s["block"], s["vocab"]
        n = V * C + L * (12 * C * C + 13 * C) + 2 * C  # wte, blocks, ln_f
        return batch * T * (6.0 * n + 12.0 * L * T * C)
    return 3.0 * batch * cvt.forward_flops(model, s)


def per_step_items(model, s, batch):
    """Tokens (gpt2) or samples (cnn, mlp) per step."""
    return batch * (s["block"] if model == "gpt2" else 1)


# --- data: random, written in scaletrain's formats -----------------------------

def write_tokens(path, count, vocab, seed):
    """A token shard (docs/formats.md, src/data/tokens.c): 64-byte header
    ("STTOKENS", u32 version 1, u32 width, u64 count, u64 vocab, zeros), then
    little-endian tokens, uniformly random: throughput does not care."""
    import array
    width = 2 if vocab <= 65536 else 4
    rng = random.Random(seed)
    toks = array.array("H" if width == 2 else "I", (rng.randrange(vocab) for _ in range(count)))
    if sys.byteorder != "little":
        toks.byteswap()
    with open(path, "wb") as f:
        f.write(b"STTOKENS" + struct.pack("<IIQQ", 1, width, count, vocab) + bytes(32))
        f.write(toks.tobytes())


def write_npy_u8(path, shape, data):
    """NPY 1.0, uint8, C order (what numpy.save writes)."""
    hdr = "{'descr': '|u1', 'fortran_order': False, 'shape': (%s), }" % "".join(f"{d}, " for d in shape)
    hdr += " " * (63 - (10 + len(hdr)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode("latin1"))
        f.write(data)


def make_data(model, s, batch, steps, tmp):
    """The scaletrain side's data: --set overrides naming the files."""
    rng = random.Random(1)
    if model == "gpt2":
        path = os.path.join(tmp, f"{model}.tokens")
        windows = max(batch * steps, 4 * batch)  # one pass without repeating a window
        write_tokens(path, windows * s["block"] + 1, s["vocab"], 1)
        return [f"data.train={path}"]
    h, w, c = s["image"]
    n = max(8 * batch, 1024)
    x, y = os.path.join(tmp, f"{model}_x.npy"), os.path.join(tmp, f"{model}_y.npy")
    write_npy_u8(x, (n, h, w) if c == 1 else (n, h, w, c), rng.randbytes(n * h * w * c))
    write_npy_u8(y, (n,), bytes(i % s["classes"] for i in range(n)))  # every class present
    return ["data.type=npy", f"data.train={x}", f"data.train_labels={y}"]


# --- the scaletrain side -------------------------------------------------------

def shape_sets(model, s):
    if model == "gpt2":
        return [f"model.vocab_size={s['vocab']}", f"model.block_size={s['block']}",
                f"model.n_layer={s['n_layer']}", f"model.n_head={s['n_head']}", f"model.n_embd={s['n_embd']}"]
    if model == "mlp":
        return [f"model.hidden=[{','.join(map(str, s['hidden']))}]"]
    return [f"model.channels=[{','.join(map(str, s['channels']))}]",
            f"model.pool=[{','.join(map(str, s['pool']))}]", f"model.kernel={s['kernel']}"]


def last_error_line(text):
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "(no output)"


def child_env():
    """Idle OpenMP workers sleep rather than spin (the project's OpenBLAS
    thread trap; it matters only for the CPU mode)."""
    env = dict(os.environ)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return env


def side_timeout(a):
    """Seconds the next process may take: --timeout, clipped to what is left of
    --budget (a few seconds kept for the table); 0 when the budget is spent."""
    left = a.deadline - time.time() - 5
    return int(min(a.timeout, left)) if left >= 15 else 0


def run_st_once(a, model, s, batch, precision, data_sets, run_dir, extra=()):
    sets = shape_sets(model, s) + data_sets + [
        f"train.batch_size={batch}", f"train.micro_batch_size={batch}", f"train.steps={s['steps'] + WARMUP}",
        f"train.device={a.device}", f"precision={precision}", "data.val=", f"train.out_dir={run_dir}",
        "log.progress=off", "train.activation_checkpointing=off"] + list(extra)  # (the last --set wins)
    cmd = [a.binary, "train", os.path.join(ROOT, "bench", "configs", s["config"])]
    for kv in sets:
        cmd += ["--set", kv]
    cmd.append("--json")
    t0, limit = time.time(), side_timeout(a)
    if not limit:
        return {"error": "not run: the --budget is spent", "cmd": cmd}
    try:
        r = subprocess.run(cmd, cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {limit} s", "cmd": cmd}
    out = {"cmd": cmd, "wall_s": time.time() - t0, "rc": r.returncode}
    if r.returncode != 0:
        err = last_error_line(r.stderr or r.stdout)
        out["error"] = err if r.returncode > 0 else f"killed by signal {-r.returncode}; last line: {err}"
        out["oom"] = "out of device memory" in err or "out of memory" in err
        return out
    j = None
    for ln in reversed(r.stdout.splitlines()):
        if ln.startswith("{"):
            j = json.loads(ln)
            break
    m = re.search(r"^model: \w+, (\d+) parameters", r.stdout, re.M)
    d = re.search(r"^device: (.*)$", r.stdout, re.M)
    if j is None or not m:
        out["error"] = "no JSON line or no 'model:' line in its output"
        return out
    out.update(j=j, params=int(m.group(1)), device_name=d.group(1) if d else "cpu")
    return out


def run_st(a, model, s, tmp):
    """scaletrain at the spec's batch, halving it on out-of-memory, in each of
    the precisions a.st_precision lists until one is accepted."""
    notes, batch = [], s["batch"]
    precisions = [p for p in a.st_precision.split(",") if p]
    data_sets, data_batch = None, None
    i = 0
    while i < len(precisions) and batch >= 1:
        if data_batch != batch:
            data_sets, data_batch = make_data(model, s, batch, s["steps"] + WARMUP, tmp), batch
        prec = precisions[i]
        r = run_st_once(a, model, s, batch, prec, data_sets, os.path.join(tmp, f"run-{model}"))
        if "error" not in r:
            r.update(batch=batch, precision=prec, refused=precisions[:i], notes=notes)
            return r
        if "not run" in r["error"] or "timed out" in r["error"]:
            notes.append(f"scaletrain {prec}: {r['error']}")
            break
        if r.get("oom") and batch > 1:
            notes.append(f"scaletrain {prec} at batch {batch}: out of memory; batch halved")
            batch //= 2
            continue
        notes.append(f"scaletrain {prec} refused or failed: {r['error']}")
        i += 1
    return {"error": notes[-1] if notes else "nothing tried", "notes": notes, "batch": s["batch"]}


def run_variant(a, model, s, st, tmp, key, extra, what):
    """--offload, --selective: scaletrain again at the batch and precision it
    ran in with `extra` set, against its own run without: a note with both
    step times and peak GPU memories (and whether the loss is the same)."""
    data = make_data(model, s, st["batch"], s["steps"] + WARMUP, tmp)
    r = run_st_once(a, model, s, st["batch"], st["precision"], data, os.path.join(tmp, f"run-{model}-{key}"),
                    extra=extra)
    if "error" in r:
        return f"{model} with {what}: failed: {r['error']}"
    ms, ms0 = r["j"]["step_ms_median"], st["j"]["step_ms_median"]
    mem, mem0 = r["j"].get("device_mem_peak_bytes", 0), st["j"].get("device_mem_peak_bytes", 0)
    mfu, mfu0 = (side_figures(model, s, st["batch"], x, a.peak_tflops)[2] for x in (ms, ms0))
    note = (f"{model} with {what}: {ms:.1f} ms/step, {ms / ms0:.2f}x the step without ({ms0:.1f} ms), MFU "
            f"{100 * mfu:.1f}% against {100 * mfu0:.1f}%; peak GPU "
            f"memory {mib(mem)} MiB against {mib(mem0)} MiB ({mib(mem0 - mem)} MiB saved")
    if key == "offload":
        return note + f"; optimizer state {mib(r['j']['optim_state_bytes'])} MiB on the host)"
    if key == "profile":  # where the step went: the GPU's own timeline (bench/trace_summary.py)
        trace = os.path.join(tmp, f"run-{model}-{key}", "trace.json")
        if not os.path.exists(trace):
            return f"{model} profiled: no trace.json was written"
        import trace_summary
        r = trace_summary.summarize(trace)
        kept = ""
        if a.out:
            kept = os.path.join(os.path.dirname(os.path.abspath(a.out)), f"{model}_trace.json")
            os.makedirs(os.path.dirname(kept), exist_ok=True)
            shutil.copyfile(trace, kept)
            with open(os.path.join(os.path.dirname(kept), f"{model}_trace.md"), "w") as f:
                f.write(trace_summary.markdown(r) + "\n")
        attn = sum(k[2] for k in r["kinds"] if k[0] == "attention")
        return (f"{model} profiled (steps {PROFILE_STEPS[0] + WARMUP}-{PROFILE_STEPS[1] + WARMUP}, "
                f"{ms:.1f} ms/step with the trace's events): attention forward + backward {attn:.2f} ms per "
                "step (against PyTorch's SDPA alone, its note); " + trace_summary.one_line(r) +
                (f"; the trace and its table: {kept}, {model}_trace.md" if kept else ""))
    if key in ("cudnn_attention", "flash_attention"):
        note += (f"; cuDNN ran {r['j'].get('attention_cudnn_calls', 0)} attention passes, "
                 f"{st['j'].get('attention_cudnn_calls', 0)} without")
    if key in ("fused_bias_grad", "candidates"):
        note += (f"; cuBLASLt's epilogue summed {r['j'].get('bias_grad_epilogues', 0)} bias gradients, "
                 f"{st['j'].get('bias_grad_epilogues', 0)} without")
    if key in ("matmul_tune", "candidates"):
        j, n = r["j"], max(r["j"].get("steps_run", 0), 1)
        note += (f"; {j.get('matmul_tuned', 0)} product plans timed, {j.get('matmul_tune_switched', 0)} of them "
                 "kept another algorithm than cuBLASLt's heuristic's first: their products "
                 f"{j.get('matmul_tune_first_ms', 0) / n:.2f} ms a step at the first's timed speed, "
                 f"{j.get('matmul_tune_chosen_ms', 0) / n:.2f} at the kept's")
    if key in ("plain_head", "gelu_layer", "cudnn_attention", "flash_attention", "fused_bias_grad",
               "matmul_tune", "candidates") or (key == "selective" and fused_gelu_forward(st)):
        # other roundings: the same loss to a few bf16 ulps, not to the bit
        l, l0 = r["j"].get("loss"), st["j"].get("loss")
        rel = abs(l - l0) / abs(l0) if l is not None and l0 else float("nan")
        return note + f"; final loss {l} against {l0}: relative difference {rel:.2g})"
    same = r["j"].get("loss") == st["j"].get("loss")
    return note + f"; final loss {r['j'].get('loss')} against {st['j'].get('loss')}: " + \
        ("the same" if same else "DIFFERENT") + ")"


def fused_gelu_forward(st):
    """The run put GELU in the forward products' epilogues (model.fused_gelu resolved on; selective
    checkpointing keeps it out of forward, so its loss then differs by roundings)."""
    return st["j"].get("fused_gelu_fwd", 0) > 0


PROFILE_STEPS = (2, 3)  # after the warm-up steps

VARIANTS = {  # flag: (--set values, what the note calls it); run in this order while the budget lasts
    "candidates": (["model.fused_bias_grad=on", "model.kernel_variants=all", "model.matmul_tune=on"],
                   "every candidate for a default at once (model.fused_bias_grad=on, "
                   "model.kernel_variants=all, model.matmul_tune=on)"),
    "fused_bias_grad": (["model.fused_bias_grad=on"],
                        "model.fused_bias_grad=on (the linear layers' bias gradients in their dW products' "
                        "cuBLASLt epilogues, not column-sum kernels)"),
    "matmul_tune": (["model.matmul_tune=on"],
                    "model.matmul_tune=on (each product's cuBLASLt algorithm the fastest of the heuristic's "
                    "first 8, timed in the first step)"),
    "kernel_variants": (["model.kernel_variants=all"],
                        "model.kernel_variants=all (every kernel variant: the same bits, another speed; "
                        "docs/cuda.md)"),
    "profile": (["log.trace=true", f"log.trace_steps=[{PROFILE_STEPS[0] + WARMUP},{PROFILE_STEPS[1] + WARMUP}]"],
                "the profiler trace (--profile: the GPU's own timeline, per stream)"),
    "cudnn_attention": (["model.attention_kernel=cudnn"],
                        "model.attention_kernel=cudnn (cuDNN's fused attention instead of scaletrain's flash "
                        "kernels)"),
    "flash_attention": (["model.attention_kernel=flash"],
                        "model.attention_kernel=flash (scaletrain's flash kernels instead of cuDNN's fused "
                        "attention, auto's choice in bf16 from sm_90)"),
    "gelu_layer": (["model.fused_gelu=off"],
                   "model.fused_gelu=off (GELU as its own kernels, not in the MLP's product epilogues)"),
    "offload": (["optim.offload=true"], "optim.offload (optimizer state and update on the host)"),
    "selective": (["train.activation_checkpointing=selective"],
                  "selective activation checkpointing (norms and GELUs recomputed in backward)"),
    "plain_head": (["model.fused_head=off"],
                   "model.fused_head=off (the output layer and loss apart: the logits kept)"),
}


# --- the PyTorch side (bench/torch_gpu.py in a child process) --------------------

def run_torch(a, model, s, batch, precision):
    """The worker at `batch`, halving it on out-of-memory."""
    notes = []
    while batch >= 1:
        w = dict(model=model, spec=s, batch=batch, steps=s["steps"], device=a.device, precision=precision,
                 compile=a.compile)
        w.update(warmup=WARMUP, optim=OPTIM)
        cmd = [sys.executable, os.path.join(ROOT, "bench", "torch_gpu.py"), json.dumps(w)]
        limit = side_timeout(a)
        if not limit:
            return {"error": "not run: the --budget is spent", "notes": notes}
        try:
            r = subprocess.run(cmd, cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=limit)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {limit} s", "notes": notes}
        if r.returncode == 0:
            for ln in reversed(r.stdout.splitlines()):
                if ln.startswith("{"):
                    j = json.loads(ln)
                    j["notes"] = notes
                    return j
            return {"error": "it printed no JSON line", "notes": notes}
        err = last_error_line(r.stderr)
        if "out of memory" in r.stderr and batch > 1:
            notes.append(f"PyTorch at batch {batch}: out of memory; batch halved")
            batch //= 2
            continue
        return {"error": err, "notes": notes, "stderr": r.stderr[-2000:]}
    return {"error": "out of memory at batch 1", "notes": notes}


# --- the table -----------------------------------------------------------------

def mib(b):
    return f"{b / 2**20:,.0f}" if b else "n/a"


def side_figures(model, s, batch, ms, peak_tflops):
    per_s = 1e3 / ms
    tflops = flops_per_step(model, s, batch) * per_s / 1e12
    return per_step_items(model, s, batch) * per_s, tflops, tflops / peak_tflops


def build_row(model, s, st, tc, peak_tflops):
    row = {"model": model, "unit": "tok/s" if model == "gpt2" else "samples/s", "st": st, "tc": tc,
           "n_layer": s.get("n_layer", 1)}
    if "error" not in st:
        row["st_rate"], row["st_tflops"], row["st_mfu"] = side_figures(model, s, st["batch"],
                                                                       st["j"]["step_ms_median"], peak_tflops)
    if "error" not in tc:
        row["tc_rate"], row["tc_tflops"], row["tc_mfu"] = side_figures(model, s, tc["batch"],
                                                                       tc["step_ms_median"], peak_tflops)
    if "st_rate" in row and "tc_rate" in row:
        row["ratio"] = row["st_rate"] / row["tc_rate"]
    return row


def table(rows):
    head = ["model", "batch", "scaletrain precision", "scaletrain ms/step", "PyTorch ms/step",
            "scaletrain throughput", "PyTorch throughput", "scaletrain/PyTorch", "scaletrain MFU", "PyTorch MFU",
            "scaletrain peak GPU MiB", "PyTorch peak GPU MiB (reserved)", "target"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        st, tc = r["st"], r["tc"]
        batch = st.get("batch", "?")
        if "error" not in tc and tc["batch"] != batch:
            batch = f"{batch} / {tc['batch']}"
        if "error" in st:
            prec, sms, srate, smfu, smem = "failed", "failed", "-", "-", "-"
        else:
            prec = st["precision"] + (f" ({', '.join(st['refused'])} refused)" if st["refused"] else "")
            sms, srate = f"{st['j']['step_ms_median']:.1f}", f"{r['st_rate']:,.0f} {r['unit']}"
            smfu, smem = f"{100 * r['st_mfu']:.1f}% ({r['st_tflops']:.3g} TFLOP/s)", mib(
                st["j"].get("device_mem_peak_bytes", 0))
        if "error" in tc:
            tms, trate, tmfu, tmem = "failed", "-", "-", "-"
        else:
            tms, trate = f"{tc['step_ms_median']:.1f}", f"{r['tc_rate']:,.0f} {r['unit']}"
            tmfu = f"{100 * r['tc_mfu']:.1f}% ({r['tc_tflops']:.3g} TFLOP/s)"
            tmem = (f"{mib(tc['peak_alloc_bytes'])} ({mib(tc['peak_reserved_bytes'])})"
                    if "peak_alloc_bytes" in tc else "n/a")
        ratio = f"{r['ratio']:.2f}x" if "ratio" in r else "-"
        target = "-"
        if r["model"] == "gpt2" and "ratio" in r:
            ok = r["ratio"] >= 1.0 and r["st_mfu"] >= MFU_TARGET
            target = f">= 1.0x and MFU >= {100 * MFU_TARGET:.0f}%: {'yes' if ok else 'NO'}"
        out.append(f"| {r['model']} | {batch} | {prec} | {sms} | {tms} | {srate} | {trate} | {ratio} | {smfu} | "
                   f"{tmfu} | {smem} | {tmem} | {target} |")
    return out


def notes_of(rows, a):
    n = [f"MFU = training FLOPs per second / {a.peak_tflops:g} TFLOP/s (H100 SXM dense bf16 peak, used for "
         "every row and precision). gpt2 FLOPs per step = tokens x (6 N + 12 L T C), N the parameters "
         "without the position embedding, 12 L T C the attention over the full T x T (PaLM appendix B, "
         "nanoGPT); mlp and cnn: 3 x the forward matrix-product and convolution FLOPs.",
         f"ms/step: scaletrain's step_ms_median (the --json line: median host wall time of its "
         f"{WARMUP} + N steps, each ending with the loss read back); PyTorch's median of CUDA-event times "
         f"over N steps after {WARMUP} warm-up steps (torch.compile runs in the first and is not timed). "
         "Throughput = batch (x 1024 tokens for gpt2) / median. Peak GPU memory: scaletrain's "
         "device_mem_peak_bytes (its arenas and cuBLASLt workspace), PyTorch's "
         "torch.cuda.max_memory_allocated (max_memory_reserved in brackets); neither counts the CUDA context.",
         "Both sides: AdamW lr 1e-3, betas 0.9/0.999, no weight decay, constant lr, no clipping, random data "
         "(a token shard or .npy files for scaletrain, device tensors for PyTorch)."]
    for r in rows:
        st, tc, m = r["st"], r["tc"], r["model"]
        for x in st.get("notes", []) + tc.get("notes", []):
            n.append(f"{m}: {x}")
        if "error" in st:
            if st["error"] not in st.get("notes", []):
                n.append(f"{m}: scaletrain failed: {st['error']}")
        else:
            j = st["j"]
            n.append(f"{m}: scaletrain on {st['device_name']}, {st['params']:,} parameters, loss "
                     f"{j['first_loss']:.3f} -> {j['train_loss']:.3f}, process {st['wall_s']:.0f} s" +
                     (f", attention passes on cuDNN {j['attention_cudnn_calls']}" if m == "gpt2" and
                      "attention_cudnn_calls" in j else ""))
        if "error" in tc:
            n.append(f"{m}: PyTorch failed: {tc['error']}")
        else:
            feats = [f"autocast {tc['precision']}" if tc["precision"] == "bf16" else "fp32",
                     "torch.compile" if tc["compile"] else "no torch.compile",
                     "fused AdamW" if tc["fused_adamw"] else "AdamW (not fused)"]
            if tc.get("sdpa") is not None:
                feats.append("scaled_dot_product_attention" if tc["sdpa"] else "attention by hand (no SDPA)")
            if tc.get("tf32"):
                feats.append("TF32")
            n.append(f"{m}: PyTorch {tc['torch']} on {tc['device_name']}, {tc['params']:,} parameters, "
                     f"{', '.join(feats)}; loss {tc['first_loss']:.3f} -> {tc['last_loss']:.3f}; first step "
                     f"{tc['first_step_s']:.1f} s; mean wall {tc['step_ms_mean_wall']:.1f} ms/step"
                     + (f"; {tc['compile_note']}" if tc.get("compile_note") else ""))
            if "sdpa_fwd_ms" in tc:
                L = r.get("n_layer", 1)
                n.append(f"{m}: PyTorch's scaled_dot_product_attention alone, one layer at batch {tc['batch']}: "
                         f"forward {tc['sdpa_fwd_ms']:.3f} ms, forward + backward {tc['sdpa_fwd_bwd_ms']:.3f} ms "
                         f"({L * tc['sdpa_fwd_bwd_ms']:.2f} ms for {L} layers; scaletrain's attention passes "
                         "are in its profile note, with --profile)")
            elif "sdpa_error" in tc:
                n.append(f"{m}: PyTorch's scaled_dot_product_attention alone: failed: {tc['sdpa_error']}")
        if "error" not in st and "error" not in tc and st["params"] != tc["params"]:
            n.append(f"{m}: PARAMETER MISMATCH: scaletrain {st['params']:,}, PyTorch {tc['params']:,}")
    return n


def machine_lines(a):
    lines = [f"host {os.uname().nodename}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}"]
    if a.device == "cuda":
        try:
            r = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                                "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
            gpu = r.stdout.strip() or "nvidia-smi gave nothing"
        except (OSError, subprocess.TimeoutExpired) as e:
            gpu = f"nvidia-smi failed: {e}"
        lines.append(f"GPU: {gpu}")
    try:
        git = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                             text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        git = ""
    lines.append(f"scaletrain {a.binary}, commit {git or '?'}")
    return lines


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="gpt2,cnn,mlp", help="comma-separated: gpt2, cnn, mlp")
    p.add_argument("--steps", type=int, help="timed steps per side (default: gpt2 30, cnn 50, mlp 100; tiny 3)")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="both sides (default cuda)")
    p.add_argument("--tiny", action="store_true", help="small shapes and batches, 3 steps: checks the pipeline")
    p.add_argument("--st-precision", default="bf16,fp32",
                   help="precisions scaletrain tries in order until one is accepted (default bf16,fp32)")
    p.add_argument("--torch-precision", default="bf16", choices=("bf16", "fp32", "match"),
                   help="PyTorch: bf16 autocast (default), fp32, or match what scaletrain ran in")
    p.add_argument("--compile", default="auto", choices=("auto", "on", "off"),
                   help="PyTorch torch.compile: auto = on CUDA when available (default)")
    p.add_argument("--peak-tflops", type=float, default=H100_BF16_TFLOPS, help="peak for MFU (default 989)")
    p.add_argument("--timeout", type=int, default=300, help="seconds each side's process may take (default 300)")
    p.add_argument("--budget", type=int, default=3600,
                   help="seconds for the whole benchmark: what does not fit is left out, and the table is "
                        "still printed (default 3600)")
    p.add_argument("--build", default="build", help="folder holding scaletrain (default build)")
    p.add_argument("--offload", action="store_true",
                   help="also run scaletrain's gpt2 with optim.offload and note its cost against the run without")
    p.add_argument("--selective", action="store_true",
                   help="also run scaletrain's gpt2 with train.activation_checkpointing=selective and note its "
                        "cost, memory and loss against the run without")
    p.add_argument("--plain-head", action="store_true",
                   help="also run scaletrain's gpt2 with model.fused_head=off (the logits kept, as PyTorch keeps "
                        "them) and note its step time and memory against the run with the default")
    p.add_argument("--cudnn-attention", action="store_true",
                   help="also run scaletrain's gpt2 with model.attention_kernel=cudnn (cuDNN's fused attention) "
                        "and note its step time, memory and loss against the run with scaletrain's flash kernels")
    p.add_argument("--flash-attention", action="store_true",
                   help="also run scaletrain's gpt2 with model.attention_kernel=flash (scaletrain's own kernels) "
                        "and note its step time, memory and loss against the default (cuDNN's in bf16 from "
                        "compute capability 9.0)")
    p.add_argument("--fused-bias-grad", action="store_true",
                   help="also run scaletrain's gpt2 with model.fused_bias_grad=on (bias gradients in the dW "
                        "products' cuBLASLt epilogues) and note its step time, memory and loss against the "
                        "default (column-sum kernels)")
    p.add_argument("--matmul-tune", action="store_true",
                   help="also run scaletrain's gpt2 with model.matmul_tune=on (each matrix product's cuBLASLt "
                        "algorithm timed among the heuristic's first 8 in the first step) and note its step "
                        "time, MFU, the plans that kept another algorithm, and the loss against the default")
    p.add_argument("--kernel-variants", action="store_true",
                   help="also run scaletrain's gpt2 with model.kernel_variants=all (every kernel variant that "
                        "computes its layer's default values another way) and note its step time and MFU "
                        "against the default, and that the final loss is the same")
    p.add_argument("--candidates", action="store_true",
                   help="also run scaletrain's gpt2 with every setting that is a candidate for its default "
                        "(model.fused_bias_grad=on, model.kernel_variants=all and model.matmul_tune=on) at "
                        "once, and note its step time and MFU against the default: what adopting all of them "
                        "would give")
    p.add_argument("--gelu-layer", action="store_true",
                   help="also run scaletrain's gpt2 with model.fused_gelu=off (GELU as its own layer) and note "
                        "its step time and memory against the run with the default (on from compute "
                        "capability 9.0)")
    p.add_argument("--profile", action="store_true",
                   help="also run scaletrain's gpt2 with --profile over two steps after the warm-up and note "
                        "where its step went (bench/trace_summary.py: each GPU stream's busy share, the layer "
                        "kinds' GPU time); with --out, the trace and its table beside it")
    p.add_argument("--out", help="also write the machine lines, the notes and the table as Markdown here")
    a = p.parse_args()
    models = [m for m in a.models.split(",") if m]
    bad = [m for m in models if m not in SPECS]
    if bad or not models:
        p.error(f"unknown model(s) {', '.join(bad)}; known: {', '.join(SPECS)}")
    if a.steps is not None and a.steps < 1:
        p.error("--steps must be >= 1")
    a.binary = os.path.join(ROOT, a.build, "scaletrain")
    if not os.access(a.binary, os.X_OK):
        raise SystemExit(f"{a.binary} not found: build scaletrain first (make, or make BUILD={a.build} CUDA=1)")
    a.deadline = time.time() + a.budget
    info = machine_lines(a)
    print("\n".join(info), flush=True)
    tmp = tempfile.mkdtemp(prefix="st-gpubench-")
    rows, ok, extra_notes = [], True, []
    try:
        for m in models:
            s = dict(SPECS[m], **(TINY[m] if a.tiny else {}))
            if a.steps:
                s["steps"] = a.steps
            t0 = time.time()
            st = run_st(a, m, s, tmp)
            tprec = a.torch_precision
            if tprec == "match":
                tprec = st.get("precision", "bf16")
            tc = run_torch(a, m, s, st.get("batch", s["batch"]), tprec)
            row = build_row(m, s, st, tc, a.peak_tflops)
            rows.append(row)
            ok = ok and "error" not in st and "error" not in tc and st["params"] == tc["params"]
            print(f"{m}: scaletrain " + (f"{st['j']['step_ms_median']:.1f} ms/step ({st['precision']})"
                                        if "error" not in st else "failed")
                  + ", PyTorch " + (f"{tc['step_ms_median']:.1f} ms/step" if "error" not in tc else "failed")
                  + f" ({time.time() - t0:.0f} s)", flush=True)
            if "stderr" in tc:
                print(tc["stderr"], file=sys.stderr)
            for key, (extra, what) in VARIANTS.items():
                if getattr(a, key) and m == "gpt2" and "error" not in st:
                    extra_notes.append(run_variant(a, m, s, st, tmp, key, extra, what))
                    print(extra_notes[-1], flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    notes = notes_of(rows, a) + extra_notes
    tab = table(rows)
    print("\n" + "\n".join(f"- {x}" for x in notes) + "\n\n" + "\n".join(tab))
    if a.out:
        with open(a.out, "w") as f:
            f.write("# scaletrain vs PyTorch on one GPU\n\n" + "".join(f"- {x}\n" for x in info) + "\n")
            f.write("".join(f"- {x}\n" for x in notes) + "\n" + "\n".join(tab) + "\n\n")
            f.write(f"Command: `python3 bench/gpu_vs_torch.py {' '.join(sys.argv[1:])}`\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
