#!/usr/bin/python3
"""Seed corpora for the fuzz targets: a few valid files of each format.
Usage: seeds.py DIR   (writes DIR/npy, DIR/idx, DIR/tokens, DIR/safetensors,
DIR/config, and DIR/config.dict: every configuration key and value from
docs/config.md, as a libFuzzer dictionary)"""
import gzip
import json
import os
import re
import struct
import sys

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def safetensors(tensors, metadata=None):
    """tensors: [(name, dtype, shape, bytes)], laid out in order."""
    header, data = {}, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


def config_dict(out):
    """Keys (as section headers and leaves) and the accepted values of docs/config.md's tables."""
    words = set(["model", "data", "train", "optim", "precision", "dist", "log", "auto", "true", "false",
                 "null", "~", ": ", "- ", "{", "}", "[", "]", "&a", "*a", "!!str", "'", '"', "#"])
    with open(os.path.join(REPO, "docs", "config.md")) as f:
        for line in f:
            m = re.match(r"\| `([a-z_.]+)` \|[^|]*\|([^|]*)\|([^|]*)\|", line)
            if not m:
                continue
            words.update(m.group(1).split("."))
            words.update(re.findall(r"`([^`]+)`", m.group(2) + m.group(3)))
    with open(out, "w") as f:
        for w in sorted(words):
            f.write('"%s"\n' % w.replace("\\", "\\\\").replace('"', '\\"'))


def npy(descr, shape, data, version=1):
    h = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    pre = 10 if version == 1 else 12
    h += " " * ((64 - (pre + len(h) + 1) % 64) % 64) + "\n"
    ln = struct.pack("<H" if version == 1 else "<I", len(h))
    return b"\x93NUMPY" + bytes([version, 0]) + ln + h.encode() + data


def main():
    root = sys.argv[1]
    for d in ("npy", "idx", "tokens", "safetensors", "config"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    seeds = {
        "npy/f4.npy": npy("<f4", "(2, 3)", bytes(range(24))),
        "npy/u1.npy": npy("|u1", "(5,)", b"abcde"),
        "npy/i8_v2.npy": npy("<i8", "(1, 1, 2)", bytes(16), 2),
        "npy/f8_v3.npy": npy("<f8", "()", bytes(8), 3),
        "npy/i4_empty.npy": npy("<i4", "(0, 4)", b""),
        "idx/raw.idx": bytes([0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 3]) + bytes(range(12)),
        "idx/labels.idx": bytes([0, 0, 8, 1, 0, 0, 0, 4, 1, 2, 3, 4]),
        "tokens/t2.bin": b"STTOKENS" + struct.pack("<IIQQ", 1, 2, 5, 256) + bytes(32) + struct.pack("<5H", 1, 2, 3, 4, 255),
        "tokens/t4.bin": b"STTOKENS" + struct.pack("<IIQQ", 1, 4, 2, 70000) + bytes(32) + struct.pack("<2I", 69999, 0),
    }
    seeds["idx/raw.idx.gz"] = gzip.compress(seeds["idx/raw.idx"])
    seeds["safetensors/model.safetensors"] = safetensors(
        [("a.weight", "F32", [2, 3], struct.pack("<6f", *range(6))), ("a.bias", "F32", [3], bytes(12)),
         ("s", "F64", [], bytes(8))], {"format": "pt", "step": "20"})
    seeds["safetensors/half.safetensors"] = safetensors(
        [("h", "BF16", [4], bytes(8)), ("f", "F16", [1, 2], bytes(4)), ("i", "I32", [0], b""),
         ("u", "U8", [3], b"xyz")])
    for name in sorted(os.listdir(os.path.join(REPO, "bench", "configs"))):
        with open(os.path.join(REPO, "bench", "configs", name), "rb") as f:
            seeds["config/" + name] = f.read()
    seeds["config/lists.yaml"] = (b"model:\n  type: mlp\n  hidden: [64, 32]\ntrain:\n  batch_size: 32\n"
                                  b"  trace_steps: [1, 2]\nlog: { every: auto }\n")
    config_dict(os.path.join(root, "config.dict"))
    for name, raw in seeds.items():
        with open(os.path.join(root, name), "wb") as f:
            f.write(raw)


if __name__ == "__main__":
    main()
