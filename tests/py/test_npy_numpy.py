#!/usr/bin/python3
"""Interop of our NPY reader and writer with NumPy's own (numpy.lib.format).

  1. NumPy writes every supported dtype (float32, float64, uint8, int32,
     int64) in format versions 1.0, 2.0 and 3.0 (forced) and the version
     NumPy picks, in several shapes (0-d, empty, 1-d to 4-d), and
     `test_npy --check FILE EXPECTED` compares every value exactly (integers
     in decimal, floats in hex).
  2. Every bad case, made from NumPy's own bytes: truncated data, a truncated
     header, a bad magic, a bad version, Fortran order, unsupported dtypes,
     big-endian data, a header that lies about its length (longer and shorter),
     bytes after the data; `test_npy --fail FILE NEEDLE` wants an error that
     names the file and says what is wrong.
  3. NumPy image/label pairs open as datasets (`test_npy --dataset`), and bad
     pairs (counts, label range, float labels) fail.
  4. The C writer (`test_npy --write DIR`) writes files that numpy.load reads
     back with the right dtype, shape and values.

Usage: /usr/bin/python3 tests/py/test_npy_numpy.py BUILD_DIR (or BUILD/tests/test_npy)
Exit status: 0 ok, 1 failure, 77 skipped (no NumPy; Debian's python3-numpy has it).
"""
import io
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("test_npy_numpy: skipped: NumPy is not installed (apt-get install python3-numpy)")
    sys.exit(77)

failures = []
DTYPES = {"float32": "<f4", "float64": "<f8", "uint8": "|u1", "int32": "<i4", "int64": "<i8"}


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def run(binary, *args):
    r = subprocess.run([binary, *args], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def sample_array(dtype, shape, rng):
    n = int(np.prod(shape)) if shape else 1
    if dtype == "uint8":
        a = rng.integers(0, 256, n)
    elif dtype in ("int32", "int64"):
        info = np.iinfo(dtype)
        a = rng.integers(info.min, info.max, n, endpoint=True, dtype=dtype)
        if n >= 2:
            a[0], a[1] = info.min, info.max
    else:
        a = rng.standard_normal(n) * 1e3
        if n >= 4:
            a[:4] = [0.1, -0.0, np.finfo(dtype).tiny, np.finfo(dtype).max]
    return np.asarray(a, dtype=DTYPES[dtype]).reshape(shape)


def write_expected(path, arr, dtype):
    vals = arr.reshape(-1)
    if dtype.startswith("float"):
        text = " ".join(float(v).hex() for v in vals)
    else:
        text = " ".join(str(int(v)) for v in vals)
    with open(path, "w") as f:
        f.write(f"{dtype} {arr.ndim} {' '.join(str(d) for d in arr.shape)} {vals.size} {text}\n")


def save(path, arr, version=None, fortran=False):
    with open(path, "wb") as f:
        np.lib.format.write_array(f, np.asfortranarray(arr) if fortran else arr, version=version,
                                  allow_pickle=False)


def reads(binary, tmp):
    rng = np.random.default_rng(0)
    shapes = [(), (0,), (7,), (3, 5), (2, 3, 4), (2, 1, 3, 2), (4, 0, 2)]
    n = 0
    for dtype in DTYPES:
        for version in [(1, 0), (2, 0), (3, 0), None]:
            for shape in shapes:
                arr = sample_array(dtype, shape, rng)
                path = os.path.join(tmp, f"r_{dtype}_{n}.npy")
                exp = path + ".txt"
                n += 1
                save(path, arr, version)
                write_expected(exp, arr, dtype)
                rc, out = run(binary, "--check", path, exp)
                check(rc == 0, f"{dtype} version {version} shape {shape}: {out.strip()}")
    # numpy.save itself
    path = os.path.join(tmp, "save.npy")
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.save(path, arr)
    write_expected(path + ".txt", arr, "float32")
    rc, out = run(binary, "--check", path, path + ".txt")
    check(rc == 0, f"numpy.save: {out.strip()}")
    print(f"read {n + 1} NumPy files")


def mutate(tmp, name, raw):
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        f.write(raw)
    return path


def bad_files(binary, tmp):
    arr = np.arange(24, dtype="<f4").reshape(4, 6)
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, version=(1, 0))
    good = buf.getvalue()
    hlen = int.from_bytes(good[8:10], "little")
    cut = good.index(b"}") - 10  # a header length that ends before the dict's '}'
    buf3 = io.BytesIO()
    np.lib.format.write_array(buf3, arr, version=(3, 0))
    good3 = buf3.getvalue()
    cut3 = good3.index(b"}") - 12

    def save_bad(name, a, **kw):
        path = os.path.join(tmp, name)
        save(path, a, **kw)
        return path

    cases = [
        (mutate(tmp, "trunc_data.npy", good[:-5]), "it is truncated"),
        (mutate(tmp, "trunc_header.npy", good[:40]), "the file is truncated or its header length is wrong"),
        (mutate(tmp, "trunc_pre.npy", good[:7]), "truncated"),
        (mutate(tmp, "trunc_len.npy", good3[:10]), "truncated"),
        (mutate(tmp, "empty.npy", b""), "too short"),
        (mutate(tmp, "magic.npy", b"\x93NUMPZ" + good[6:]), "not an NPY file"),
        (mutate(tmp, "magic2.npy", b"PK\x03\x04" + good[4:]), "not an NPY file"),
        (mutate(tmp, "version4.npy", good[:6] + b"\x04\x00" + good[8:]), "version 4.0"),
        (mutate(tmp, "version0.npy", good[:6] + b"\x00\x00" + good[8:]), "version 0.0"),
        (mutate(tmp, "version12.npy", good[:6] + b"\x01\x02" + good[8:]), "version 1.2"),
        (save_bad("fortran.npy", arr, fortran=True), "Fortran order"),
        (save_bad("f16.npy", arr.astype("<f2")), "dtype '<f2' is not supported"),
        (save_bad("i16.npy", arr.astype("<i2")), "dtype '<i2' is not supported"),
        (save_bad("bool.npy", arr > 3), "dtype '|b1' is not supported"),
        (save_bad("c64.npy", arr.astype("<c8")), "dtype '<c8' is not supported"),
        (save_bad("u32.npy", arr.astype("<u4")), "dtype '<u4' is not supported"),
        (save_bad("be_f4.npy", arr.astype(">f4")), "big-endian ('>f4')"),
        (save_bad("be_i8.npy", arr.astype(">i8")), "big-endian ('>i8')"),
        (save_bad("be_f8.npy", arr.astype(">f8")), "big-endian ('>f8')"),
        (save_bad("struct.npy", np.zeros(3, dtype=[("a", "<f4"), ("b", "<i4")])), "structured"),
        (mutate(tmp, "hlen_long.npy", good[:8] + (hlen + 16).to_bytes(2, "little") + good[10:]), "malformed"),
        (mutate(tmp, "hlen_past.npy", good[:8] + (len(good)).to_bytes(2, "little") + good[10:]), "only"),
        (mutate(tmp, "hlen_short.npy", good[:8] + cut.to_bytes(2, "little") + good[10:]), "malformed"),
        (mutate(tmp, "hlen3_huge.npy", good3[:8] + (1 << 31).to_bytes(4, "little") + good3[12:]), "more than"),
        (mutate(tmp, "hlen3_short.npy", good3[:8] + cut3.to_bytes(4, "little") + good3[12:]), "malformed"),
        (mutate(tmp, "hlen_pad.npy", good[:8] + (hlen - 1).to_bytes(2, "little") + good[10:]), "more than one array"),
        (mutate(tmp, "extra.npy", good + b"\0\0\0\0"), "more than one array"),
        (mutate(tmp, "two.npy", good + good), "more than one array"),
        (mutate(tmp, "shape_lie.npy", good.replace(b"(4, 6)", b"(4, 7)")), "it is truncated"),
    ]
    for path, needle in cases:
        rc, out = run(binary, "--fail", path, needle)
        check(rc == 0, f"{os.path.basename(path)}: {out.strip()}")
    # object arrays need pickle, which np.save refuses without allow_pickle; write one by hand
    obj = b"{'descr': '|O', 'fortran_order': False, 'shape': (2,), }"
    obj += b" " * (64 - 10 - len(obj) - 1) + b"\n"
    path = mutate(tmp, "object.npy", b"\x93NUMPY\x01\x00" + len(obj).to_bytes(2, "little") + obj + b"\0" * 16)
    rc, out = run(binary, "--fail", path, "dtype '|O' is not supported")
    check(rc == 0, f"object.npy: {out.strip()}")
    print(f"refused {len(cases) + 1} bad files")


def summary(out):
    """'n=50 h=8 ... sum=1.5 labels=3' -> {'n': 50.0, ...}"""
    line = [l for l in out.splitlines() if l.startswith("n=")]
    return {k: float(v) for k, v in (f.split("=") for f in line[0].split())} if line else {}


def datasets(binary, tmp):
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (50, 8, 6), dtype=np.uint8)
    y = rng.integers(0, 10, 50).astype(np.int64)
    y[7] = 9
    px, py = os.path.join(tmp, "x.npy"), os.path.join(tmp, "y.npy")
    np.save(px, x)
    np.save(py, y)
    rc, out = run(binary, "--dataset", px, py, "0")
    want = dict(n=50, h=8, w=6, c=1, classes=10, flat=0, bytes=1, sum=float(x.sum()), labels=int(y.sum()))
    check(rc == 0 and summary(out) == want, f"uint8 images: {out.strip()} vs {want}")
    xf = rng.standard_normal((20, 4, 4, 3)).astype(np.float32)
    yf = (np.arange(20) % 3).astype(np.int32)
    np.save(px, xf)
    np.save(py, yf)
    rc, out = run(binary, "--dataset", px, py, "3")
    got = summary(out)
    want = dict(n=20, h=4, w=4, c=3, classes=3, flat=0, bytes=0, labels=int(yf.sum()))
    check(rc == 0 and {k: got.get(k) for k in want} == want, f"float32 images: {out.strip()}")
    check(abs(got.get("sum", 0) - float(xf.astype(np.float64).sum())) < 1e-9, f"float32 sum: {out.strip()}")
    np.save(px, rng.standard_normal((20, 5)))  # float64 features
    np.save(py, (np.arange(20) % 2).astype(np.uint8))
    rc, out = run(binary, "--dataset", px, py, "0")
    check(rc == 0 and "n=20 h=1 w=5 c=1 classes=2 flat=1 bytes=0" in out, f"float64 features: {out.strip()}")
    np.save(py, (np.arange(19) % 2).astype(np.uint8))
    rc, out = run(binary, "--dataset-fail", px, py, "0", "holds 20 samples but")
    check(rc == 0, f"counts that disagree: {out.strip()}")
    lab = (np.arange(20) % 2).astype(np.int64)
    lab[13] = 10
    np.save(py, lab)
    rc, out = run(binary, "--dataset-fail", px, py, "10", "label 10 at index 13 is outside [0, 10)")
    check(rc == 0 and py in out, f"label outside the class count: {out.strip()}")
    np.save(py, np.zeros(20, dtype=np.float32))
    rc, out = run(binary, "--dataset-fail", px, py, "0", "must be integers")
    check(rc == 0, f"float labels: {out.strip()}")
    np.save(px, np.zeros((0, 5), dtype=np.float32))
    np.save(py, np.zeros(0, dtype=np.int64))
    rc, out = run(binary, "--dataset-fail", px, py, "0", "the dataset is empty")
    check(rc == 0, f"empty dataset: {out.strip()}")


def writes(binary, tmp):
    d = os.path.join(tmp, "w")
    os.mkdir(d)
    rc, out = run(binary, "--write", d)
    check(rc == 0, f"test_npy --write: {out.strip()}")
    if rc != 0:
        return
    u = np.array([i * 7 % 256 + (i == 23) * 200 for i in range(24)]) % 256
    want = {
        "w_f32.npy": np.array([i * 0.5 - 1 for i in range(12)], dtype="<f4").reshape(3, 4),
        "w_u8.npy": u.astype("|u1").reshape(2, 3, 4),
        "w_i64.npy": np.array([-(2**63), -1, 0, 2**40, 2**63 - 1], dtype="<i8"),
        "w_i32.npy": np.array([-(2**31), -7, 7, 2**31 - 1], dtype="<i4"),
        "w_f64.npy": np.array(3.25, dtype="<f8"),
        "w_empty.npy": np.zeros((0, 3), dtype="<f4"),
    }
    for name, arr in want.items():
        path = os.path.join(d, name)
        with open(path, "rb") as f:
            check(np.lib.format.read_magic(f) == (1, 0), f"{name}: not version 1.0")
            f.seek(0)
            raw = f.read()
        hl = int.from_bytes(raw[8:10], "little")
        check((10 + hl) % 64 == 0 and raw[9 + hl : 10 + hl] == b"\n", f"{name}: data not 64-aligned or no newline")
        got = np.load(path, allow_pickle=False)
        check(got.dtype == arr.dtype and got.shape == arr.shape and np.array_equal(got, arr),
              f"{name}: numpy reads {got.dtype} {got.shape} {got!r}, expected {arr.dtype} {arr.shape}")


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    binary = sys.argv[1]
    if os.path.isdir(binary):  # a build folder, as tests/run.sh passes
        binary = os.path.join(binary, "tests", "test_npy")
    if not os.access(binary, os.X_OK):
        print(f"test_npy_numpy: skipped: {binary} is not built (make tests)")
        return 77
    with tempfile.TemporaryDirectory(prefix="st_npy_") as tmp:
        reads(binary, tmp)
        bad_files(binary, tmp)
        datasets(binary, tmp)
        writes(binary, tmp)
    if failures:
        print(f"test_npy_numpy: {len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print("test_npy_numpy: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
