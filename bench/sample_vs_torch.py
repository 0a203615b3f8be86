#!/usr/bin/python3
"""`scaletrain sample` against PyTorch's generation loop, on the CPU or a GPU.

One gpt's weights (random, GPT-2's initialisation, written as safetensors with
the model's metadata), one prompt, greedy decoding of N new tokens on each
side with the same threads, under torch.inference_mode. The peer is
PyTorch with a cache of keys and values, as scaletrain keeps one (and as
Hugging Face's generate does): a position a step while the sequence fits
block_size, then the window cropped to the block recomputed for each token
(scaletrain pads it to a multiple of 8 tokens; PyTorch runs the exact
length). PyTorch without a cache (nanoGPT's `generate`) is shown beside it.
Prints each side's tokens/s and the ratio, and how many of the greedy
tokens agree (near ties of random weights may part them; the exact check
is tests/py/sample_torch.py on trained weights).

    /usr/bin/python3 bench/sample_vs_torch.py [--threads 1,2] [--tokens N] [--prompt P]
        [--repeats R] [--model small|gpt2] [--device cpu|cuda] [--top-k K [--temperature T]]
        [--build DIR] [--out FILE.md]

--top-k K draws each token among the K most likely at temperature T on both
sides (scaletrain: its own draw on the host; PyTorch: torch.topk, softmax,
multinomial), instead of greedy decoding: what drawing costs at the
model's vocabulary (the tokens are not compared).

--model gpt2 takes GPT-2 124M's shape (vocabulary 50257, block 1024, 12
layers of 768) instead of the CPU-sized gpt. --device cuda runs both sides
on the GPU (scaletrain: train.device cuda, its cache on the GPU and each
token's step replayed as a captured CUDA graph, and again with --no-graph,
each token's kernels launched one by one, the same tokens; PyTorch: the
same loops on CUDA tensors), threads then only the host's. Needs a
PyTorch (Debian's python3-torch: /usr/bin/python3) and a built
scaletrain.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "parity"))
from ref_models import GPT  # noqa: E402

# bench/cpu_vs_torch.py's gpt: the CPU-sized model (--model gpt2: GPT-2 124M's shape)
SPEC = dict(vocab=256, block=256, n_layer=4, n_head=4, n_embd=256)
GPT2 = dict(vocab=50257, block=1024, n_layer=12, n_head=12, n_embd=768)
DEVICE = "cpu"
TOP_K, TEMPERATURE = 0, 1.0  # --top-k K: drawn among the K most likely at --temperature (0: greedy)


def pick(logits):
    """The next token from one position's logits (V,): greedy, or drawn among the top k."""
    if TOP_K <= 0:
        return int(logits.argmax())
    v, i = torch.topk(logits.float() / TEMPERATURE, TOP_K)
    return int(i[torch.multinomial(torch.softmax(v, -1), 1)])


def save(model, path):
    """The model's weights as scaletrain writes them: F32 safetensors, the
    model.* settings in the metadata."""
    meta = {"format": "scaletrain", "model": "gpt", "model.type": "gpt",
            "model.n_layer": str(SPEC["n_layer"]), "model.n_head": str(SPEC["n_head"]),
            "model.n_embd": str(SPEC["n_embd"]), "model.vocab_size": str(SPEC["vocab"]),
            "model.block_size": str(SPEC["block"])}
    header, blobs, off = {"__metadata__": meta}, [], 0
    for name, t in model.state_dict().items():
        b = t.detach().cpu().contiguous().float().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def torch_generate_cached(model, prompt, n):
    """The same greedy decoding with a cache of keys and values (as Hugging
    Face's generate keeps one): a position a step while the sequence fits
    the block, then nanoGPT's cropped window for the rest."""
    import math
    import torch.nn.functional as F
    C, H = SPEC["n_embd"], SPEC["n_head"]
    hs = C // H
    cache = [([], []) for _ in model.h]
    seq = list(prompt)
    t0 = time.perf_counter()
    with torch.inference_mode():
        def step(tok, pos):
            x = model.wte.weight[tok] + model.wpe.weight[pos]
            for blk, (ks, vs) in zip(model.h, cache):
                qkv = blk.attn.c_attn(blk.ln_1(x))
                q, k, v = qkv.split(C)
                ks.append(k.view(H, hs))
                vs.append(v.view(H, hs))
                K, Vv = torch.stack(ks, 1), torch.stack(vs, 1)  # (H, t, hs)
                att = F.softmax((K @ q.view(H, hs, 1)).squeeze(-1) / math.sqrt(hs), dim=-1)
                y = (att.unsqueeze(1) @ Vv).reshape(C)
                x = x + blk.attn.c_proj(y)
                x = x + blk.mlp(blk.ln_2(x))
            return model.ln_f(x) @ model.wte.weight.t()
        for pos, tok in enumerate(prompt[:-1]):
            step(tok, pos)
        logits = step(prompt[-1], len(prompt) - 1)
        for _ in range(n):
            if len(seq) <= SPEC["block"]:
                nxt = pick(logits)
            else:
                nxt = pick(model(torch.tensor([seq[-SPEC["block"]:]], device=DEVICE))[0, -1])
            seq.append(nxt)
            if len(seq) < SPEC["block"] + 1 and len(seq) - len(prompt) < n:
                logits = step(nxt, len(seq) - 1)
    return time.perf_counter() - t0, seq[len(prompt):]


def torch_generate(model, prompt, n):
    idx = torch.tensor([prompt], device=DEVICE)
    t0 = time.perf_counter()
    with torch.inference_mode():
        for _ in range(n):
            logits = model(idx[:, -SPEC["block"]:])[:, -1]
            idx = torch.cat([idx, torch.tensor([[pick(logits[0])]], device=DEVICE)], dim=1)
    toks = idx[0, len(prompt):].tolist()  # (on a GPU: waits for the last token)
    return time.perf_counter() - t0, toks


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--tokens", type=int, default=300, help="new tokens (past block_size 256: the window slides)")
    ap.add_argument("--prompt", type=int, default=16, help="prompt tokens")
    ap.add_argument("--repeats", type=int, default=3, help="runs per side; the table shows each side's best")
    ap.add_argument("--model", default="small", choices=["small", "gpt2"])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--top-k", type=int, default=0,
                    help="draw among the K most likely tokens (both sides; 0, the default: greedy)")
    ap.add_argument("--temperature", type=float, default=1.0, help="with --top-k (default 1)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out")
    a = ap.parse_args()
    global DEVICE, TOP_K, TEMPERATURE
    DEVICE, TOP_K, TEMPERATURE = a.device, a.top_k, a.temperature
    draw = ["--temperature", "0"] if a.top_k <= 0 else ["--temperature", str(a.temperature), "--top-k",
                                                         str(a.top_k), "--seed", "1"]
    if a.model == "gpt2":
        SPEC.update(GPT2)
    torch.manual_seed(0)
    model = GPT(SPEC["vocab"], SPEC["block"], SPEC["n_layer"], SPEC["n_head"], SPEC["n_embd"])
    for name, p in model.named_parameters():  # GPT-2's initialisation
        if p.dim() == 2:
            torch.nn.init.normal_(p, 0.0, 0.02)
    model.eval().to(DEVICE)
    prompt = [(7 * i + 3) % SPEC["vocab"] for i in range(a.prompt)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        w = os.path.join(tmp, "gpt.safetensors")
        save(model, w)
        for t in (int(x) for x in a.threads.split(",")):
            torch.set_num_threads(t)
            torch_generate(model, prompt, 4)  # (warm-up)
            env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS=str(t))
            best_s = best_p = best_w = best_n = 0.0

            def st_sample(*more):
                out = subprocess.run([os.path.join(a.build, "scaletrain"), "sample", "--init", w, "--prompt-ids",
                                      ",".join(map(str, prompt)), "--tokens", str(a.tokens), *draw,
                                      "--json", "--set", f"train.threads={t}", "--set",
                                      f"train.device={a.device}", *more],
                                     check=True, capture_output=True, text=True, env=env).stdout
                return json.loads(out.strip().splitlines()[-1])

            for _ in range(a.repeats):  # each side's best: on a shared machine others only add time
                wsec, _ = torch_generate(model, prompt, a.tokens)
                tsec, ttoks = torch_generate_cached(model, prompt, a.tokens)
                best_w = max(best_w, a.tokens / wsec)
                r = st_sample()
                best_s, best_p = max(best_s, r["tokens_per_s"]), max(best_p, a.tokens / tsec)
                if a.device == "cuda":  # each token's kernels launched one by one: what the replay saves
                    n = st_sample("--no-graph")
                    assert n["samples"][0]["tokens"] == r["samples"][0]["tokens"], "--no-graph drew other tokens"
                    best_n = max(best_n, n["tokens_per_s"])
            stoks = r["samples"][0]["tokens"]
            same = next((i for i, (x, y) in enumerate(zip(stoks, ttoks)) if x != y), len(stoks))
            rows.append((t, best_s, best_p, best_w, same, best_n, r.get("replayed_steps", 0), r.get("cached_steps", 0)))
    lines = [f"gpt {SPEC['n_layer']} layers x {SPEC['n_embd']} (vocab {SPEC['vocab']}, block {SPEC['block']}), "
             f"prompt {a.prompt} tokens, {a.tokens} new, "
             f"{'greedy' if a.top_k <= 0 else f'drawn among the top {a.top_k} at temperature {a.temperature}'}, "
             f"each side's best of {a.repeats}, on the "
             f"{'GPU (' + torch.cuda.get_device_name() + ')' if a.device == 'cuda' else 'CPU'}",
             "",
             "| threads | scaletrain tokens/s | PyTorch, cached, tokens/s | ratio | PyTorch, windows (nanoGPT), tokens/s "
             "| greedy tokens alike before the first difference |"
             + (" scaletrain --no-graph, tokens/s | the graph's gain | steps replayed |" if a.device == "cuda" else ""),
             "|---|---|---|---|---|---|" + ("---|---|---|" if a.device == "cuda" else "")]
    for t, s, p, w, same, n, rep, cached in rows:
        alike = f"{same} of {a.tokens}" if a.top_k <= 0 else "(drawn: not compared)"
        lines.append(f"| {t} | {s:.1f} | {p:.1f} | {s / p:.2f}x | {w:.1f} | {alike} |"
                     + (f" {n:.1f} | {s / n:.2f}x | {rep} of {cached} |" if a.device == "cuda" and n > 0 else ""))
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
