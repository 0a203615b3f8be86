#!/usr/bin/python3
"""Check `scaletrain sample --temperature 0 --json` against PyTorch.

Usage: /usr/bin/python3 tests/py/sample_torch.py WEIGHTS SAMPLE.json
Loads WEIGHTS (a gpt's safetensors, its shape from the metadata) into the
plain PyTorch gpt of tests/parity/ref_models.py and replays the sample: at
every new token, the logits of the context so far (its last block_size
tokens, as scaletrain slides its window) must have their largest value at
the token scaletrain chose (to 1e-4, a near tie in fp32 either way). Exits 0
when every token agrees, 1 otherwise. Used by tests/e2e/gpt_run.sh (not a
test itself: its name does not start with test_). Needs torch and NumPy.
"""
import json
import os
import sys

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "parity"))
sys.path.insert(0, here)
from ref_models import GPT  # noqa: E402
from weights_diff import load_with_metadata  # noqa: E402


def load(path):
    meta, arrays = load_with_metadata(path)
    return meta, {name: torch.from_numpy(a.copy()) for name, a in arrays.items()}


def main():
    meta, tensors = load(sys.argv[1])
    r = json.load(open(sys.argv[2]))
    V, block = tensors["wte.weight"].shape[0], int(meta["model.block_size"])
    model = GPT(V, block, int(meta["model.n_layer"]), int(meta["model.n_head"]), int(meta["model.n_embd"]))
    missing = model.load_state_dict(tensors, strict=True)
    assert not missing.missing_keys and not missing.unexpected_keys, missing
    model.eval()
    bad = 0
    checked = 0
    for s in r["samples"]:
        seq = list(r["prompt"]) + list(s["tokens"])
        with torch.no_grad():
            for k in range(len(r["prompt"]), len(seq)):
                ctx = torch.tensor([seq[max(0, k - block):k]])
                logits = model(ctx)[0, -1]
                mx = float(logits.max())
                got = float(logits[seq[k]])
                checked += 1
                if got < mx - 1e-4 * (1 + abs(mx)):
                    bad += 1
                    if bad <= 5:
                        print(f"FAIL: token {k}: scaletrain chose {seq[k]} (logit {got:.6f}), PyTorch's "
                              f"largest is {int(logits.argmax())} ({mx:.6f})")
    print(f"{checked - bad} of {checked} greedy tokens are PyTorch's largest logit (windows up to {block})")
    return 0 if bad == 0 and checked > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
