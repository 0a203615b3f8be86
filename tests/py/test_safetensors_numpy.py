#!/usr/bin/python3
"""Interop of our safetensors reader and writer with an independent one.

A minimal writer and reader built on struct, json and NumPy (what the reference
implementation does, minus torch) stand on the other side:
  1. Python writes a file (F32, F16, BF16, F64, a 0-d and an empty tensor,
     metadata; JSON keys in a different order from the data) and the C reader,
     `test_safetensors --check FILE EXPECTED`, compares every value.
  2. The C writer, `test_safetensors --write FILE`, writes a fixed file that
     Python parses and checks (padding, contiguous offsets, values).

Usage: /usr/bin/python3 tests/py/test_safetensors_numpy.py BUILD/tests/test_safetensors
Exit status: 0 ok, 1 failure, 77 skipped (no NumPy; Debian's python3-numpy has it).
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("test_safetensors_numpy: skipped: NumPy is not installed (apt-get install python3-numpy)")
    sys.exit(77)

DTYPES = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I64": "<i8", "BF16": "<u2", "U8": "u1"}
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def write_safetensors(path, tensors, metadata):
    """tensors: [(name, dtype, array)]; data in list order, JSON keys reversed."""
    entries, blobs, offset = [], [], 0
    for name, dtype, arr in tensors:
        blob = np.ascontiguousarray(arr, dtype=DTYPES[dtype]).tobytes()
        entries.append((name, {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(blob)]}))
        blobs.append(blob)
        offset += len(blob)
    header = {"__metadata__": metadata} if metadata else {}
    header.update(reversed(entries))
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def bf16_bits(x):
    """float32 -> bfloat16 bits, round to nearest even (as torch does)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def reader_interop(binary, tmp):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    h = np.array([1, -2.5, 65504, 6e-8, 0.1], dtype=np.float16)
    bf = bf16_bits(rng.standard_normal((2, 3)) * 100).reshape(2, 3)
    d = np.array([0.1, -1e-3, 3e38, 1e-45], dtype=np.float64)
    s = np.array(42.5, dtype=np.float32)
    z = np.zeros((0, 3), dtype=np.float32)
    tensors = [("w", "F32", w), ("h", "F16", h), ("bf", "BF16", bf), ("d", "F64", d), ("s", "F32", s), ("z", "F32", z)]
    expected = {
        "w": w,
        "h": h.astype(np.float32),
        "bf": (bf.astype(np.uint32) << 16).view(np.float32),
        "d": d.astype(np.float32),
        "s": s,
        "z": z,
    }
    path, exp = os.path.join(tmp, "np.safetensors"), os.path.join(tmp, "np.expected")
    write_safetensors(path, tensors, {"format": "np", "epoch": "3"})
    with open(exp, "w") as f:
        f.write("meta format np\nmeta epoch 3\n")
        for name, dtype, arr in tensors:
            vals = expected[name].reshape(-1)
            dims = " ".join(str(n) for n in arr.shape)
            f.write(f"tensor {name} {dtype} {arr.ndim} {dims} {vals.size} " + " ".join(repr(float(v)) for v in vals) + "\n")
    r = subprocess.run([binary, "--check", path, exp], capture_output=True, text=True)
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    check(r.returncode == 0, f"the C reader disagrees with the NumPy writer (exit {r.returncode})")


def writer_interop(binary, tmp):
    path = os.path.join(tmp, "c.safetensors")
    r = subprocess.run([binary, "--write", path], capture_output=True, text=True)
    check(r.returncode == 0, f"test_safetensors --write failed: {r.stderr.strip()}")
    if r.returncode != 0:
        return
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    check(n % 8 == 0, f"header length {n} is not a multiple of 8")
    check(raw[8:9] == b"{", "the header does not start with '{'")
    header = json.loads(raw[8 : 8 + n].decode("utf-8"))
    data = raw[8 + n :]
    check(header.pop("__metadata__", None) == {"k": "v"}, "metadata")
    want = {
        "a": ("F32", [2, 3], np.array([[0, 0.5, 1], [1.5, 2, 2.5]], dtype=np.float32)),
        "b": ("F16", [3], np.array([1, -2, 0.5], dtype=np.float16)),
        "c": ("I64", [2], np.array([-1, 2**40], dtype=np.int64)),
        "s": ("F32", [], np.array(7.25, dtype=np.float32)),
        "e": ("F32", [0], np.zeros(0, dtype=np.float32)),
    }
    check(sorted(header) == sorted(want), f"tensor names {sorted(header)}")
    end = 0
    for name in ["a", "b", "c", "s", "e"]:  # written back to back in this order
        info = header.get(name, {})
        dtype, shape, values = want[name]
        check(info.get("dtype") == dtype and info.get("shape") == shape, f"{name}: {info}")
        b, e = info.get("data_offsets", [-1, -1])
        check(b == end, f"{name}: begins at {b}, expected {end}")
        end = e
        got = np.frombuffer(data[b:e], dtype=DTYPES[dtype]).reshape(shape)
        check(np.array_equal(got, values), f"{name}: {got} != {values}")
    check(end == len(data), f"the data is {len(data)} bytes, the tensors cover {end}")


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    binary = sys.argv[1]
    if os.path.isdir(binary):  # a build folder, as tests/run.sh passes
        binary = os.path.join(binary, "tests", "test_safetensors")
    with tempfile.TemporaryDirectory(prefix="st_np_") as tmp:
        reader_interop(binary, tmp)
        writer_interop(binary, tmp)
    if failures:
        print(f"test_safetensors_numpy: {len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print("test_safetensors_numpy: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
