#!/usr/bin/python3
"""Our float -> bf16 / fp16 conversions (src/core/half.h) against PyTorch's.

About four million float32 values: every bf16 rounding boundary class
(ties, just above and below), every fp16 exponent including the subnormal
range and the overflow edge (65504, 65519.99, 65520), zeros, infinities,
NaNs, float32 subnormals and random bit patterns over the whole range.
`test_half --convert IN OUT` writes our 16-bit bits and rounded floats;
PyTorch's torch.tensor(x).to(torch.bfloat16 / torch.float16) gives its
bits (viewed as int16) and .float() its rounded values. Every value must
agree bit for bit, except NaNs, which must be NaN on both sides (NaN
payloads differ between PyTorch's scalar and vector paths and the hardware).

Usage: /usr/bin/python3 tests/py/test_half_torch.py BUILD_DIR
Exit status: 0 ok, 1 failure, 77 skipped (no torch under /usr/bin/python3).
"""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"skipped: {e} (Debian's python3-torch provides torch for /usr/bin/python3)")
    sys.exit(77)


def values():
    rng = np.random.default_rng(12345)
    parts = []
    # random bit patterns over every exponent (NaNs and Infs included)
    parts.append(rng.integers(0, 1 << 32, size=2_000_000, dtype=np.uint64).astype(np.uint32))
    # every bf16 value with each of the low 16 bits' interesting patterns
    hi = np.arange(0, 1 << 16, dtype=np.uint32) << 16
    for lo in (0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF):
        parts.append(hi | lo)
    # fp16-relevant floats: every fp16 value's float and its neighbours/midpoints
    h = np.arange(0, 1 << 16, dtype=np.uint16)
    f = h.view(np.float16).astype(np.float32)
    f = f[np.isfinite(f)]
    fb = f.view(np.uint32)
    for d in (-1, 0, 1, 0x1000, 0xFFF, 0x1001, -0x1000, 0x2000):
        parts.append((fb.astype(np.int64) + d).astype(np.uint32))
    # the fp16 subnormal range, densely
    parts.append(np.linspace(0, 2 ** -14, 200_001, dtype=np.float32).view(np.uint32))
    edge = np.array([0.0, -0.0, 1.0, 65504.0, 65519.99, 65520.0, 65536.0, -65520.0, 2 ** -24, 2 ** -25,
                     1.5 * 2 ** -25, 3.4028235e38, -3.4028235e38, np.inf, -np.inf, np.nan, 1e-45, -1e-45,
                     1.17549435e-38], dtype=np.float32).view(np.uint32)
    parts.append(edge)
    parts.append(np.array([0x7F800001, 0x7FC00000, 0xFFC00001, 0x7FFFFFFF, 0x00000001, 0x007FFFFF],
                          dtype=np.uint32))
    return np.concatenate(parts).view(np.float32)


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    exe = build if build.endswith("test_half") else os.path.join(build, "tests", "test_half")
    x = values()
    n = x.size
    with tempfile.TemporaryDirectory(prefix="st_half_") as tmp:
        inp, out = os.path.join(tmp, "in.f32"), os.path.join(tmp, "out.bin")
        x.tofile(inp)
        p = subprocess.run([exe, "--convert", inp, out], capture_output=True, text=True)
        if p.returncode != 0:
            print(f"FAIL: {exe} --convert exited {p.returncode}: {p.stderr}")
            return 1
        raw = np.fromfile(out, dtype=np.uint8)
    bits = raw[: 4 * n].view(np.uint16).reshape(n, 2)
    rounded = raw[4 * n:].view(np.float32).reshape(2, n)
    t = torch.from_numpy(x.copy())
    failed = False
    for k, (name, dt) in enumerate((("bf16", torch.bfloat16), ("fp16", torch.float16))):
        ref16 = t.to(dt)
        ref_bits = ref16.view(torch.int16).numpy().view(np.uint16)
        ref_f = ref16.float().numpy()
        ours_bits = bits[:, k]
        ours_f = rounded[k]
        nan_ref, nan_ours = np.isnan(ref_f), np.isnan(ours_f)
        bad = (nan_ref != nan_ours) | (~nan_ref & (ref_bits != ours_bits)) | \
              (~nan_ref & (ref_f.view(np.uint32) != ours_f.view(np.uint32)))
        # our own 16-bit -> float of the bits must be NaN exactly where torch's is
        nb = int(bad.sum())
        print(f"{name}: {n} values, {int(nan_ref.sum())} NaN, {nb} differ from torch")
        if nb:
            failed = True
            for i in np.flatnonzero(bad)[:10]:
                print(f"  x={x[i]!r} (0x{x.view(np.uint32)[i]:08x}): ours 0x{ours_bits[i]:04x} "
                      f"{ours_f[i]!r}, torch 0x{ref_bits[i]:04x} {ref_f[i]!r}")
    print("FAIL" if failed else "ok: every value matches PyTorch bit for bit (NaNs as NaN)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
