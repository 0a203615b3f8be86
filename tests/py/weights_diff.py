#!/usr/bin/python3
"""Compare two safetensors weight files (F32) tensor by tensor.

Usage: /usr/bin/python3 tests/py/weights_diff.py A B TOL
Prints the worst tensor's relative difference, max|a - b| / (max|a| + 1e-6),
and exits 0 when every tensor has the same names and shapes and is within
TOL, 1 otherwise. Used by tests/e2e/ddp_equivalence.sh (not a test itself:
its name does not start with test_). Needs NumPy.
"""
import json
import struct
import sys

import numpy as np


def load_with_metadata(path):
    """(the file's metadata, {name: F32 array}); tests/py/sample_torch.py uses it too."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    meta = header.pop("__metadata__", {})
    out = {}
    for name, t in header.items():
        if t["dtype"] != "F32":
            raise SystemExit(f"{path}: {name} is {t['dtype']}, not F32")
        lo, hi = t["data_offsets"]
        out[name] = np.frombuffer(data[lo:hi], dtype="<f4").reshape(t["shape"])
    return meta, out


def load(path):
    return load_with_metadata(path)[1]


def main():
    a, b, tol = load(sys.argv[1]), load(sys.argv[2]), float(sys.argv[3])
    if a.keys() != b.keys():
        print(f"FAIL: different tensors: {sorted(a.keys() ^ b.keys())}")
        return 1
    worst, worst_name = 0.0, ""
    for name in a:
        if a[name].shape != b[name].shape:
            print(f"FAIL: {name}: shape {a[name].shape} against {b[name].shape}")
            return 1
        d = float(np.max(np.abs(a[name] - b[name]))) / (float(np.max(np.abs(a[name]))) + 1e-6)
        if not np.isfinite(d):
            print(f"FAIL: {name}: the difference is {d}")
            return 1
        if d > worst:
            worst, worst_name = d, name
    ok = worst <= tol
    print(f"{'ok' if ok else 'FAIL'}: worst relative difference {worst:.3g} in {worst_name} (tolerance {tol:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
