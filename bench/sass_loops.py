#!/usr/bin/env python3
"""What a CUDA kernel's hot loop issues, read from its compiled SASS: for
each kernel whose name holds PATTERN, its largest loops (a backward branch
and its target) with the instruction count, the tensor-core products
(HMMA/HGMMA) among them and the commonest opcodes. On a machine with no
GPU this is the measure of an issue-bound kernel's work: the flash
attention loops held about ten instructions per mma.sync before ldmatrix
(docs/cuda.md "Flash attention").

    python3 bench/sass_loops.py src/cuda/attention_flash.cu flash_fwd_mmaILi64
    python3 bench/sass_loops.py build/obj/src/cuda/attention_flash.o flash_dq --loops 3

A .cu file is compiled for sm_90 (--arch to change) with the build's flags;
an object or cubin is read as it is. Needs cuobjdump and nvdisasm, which the
CUDA toolkit ships but a compile-only install may lack: `--fetch` downloads
NVIDIA's wheels of the two from PyPI into .tools/sass (ignored by git).
Static counts: both sides of a branch inside the loop are counted, and the
instructions run per iteration can be fewer.
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = os.path.join(ROOT, ".tools", "sass")
WHEELS = ("nvidia-cuda-cuobjdump", "nvidia-cuda-nvdisasm")


def fetch_tools():
    os.makedirs(TOOLS, exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", d, *WHEELS], check=True)
        for w in os.listdir(d):
            with zipfile.ZipFile(os.path.join(d, w)) as z:
                for name in z.namelist():
                    if name.endswith("/bin/cuobjdump") or name.endswith("/bin/nvdisasm"):
                        dst = os.path.join(TOOLS, os.path.basename(name))
                        with z.open(name) as src, open(dst, "wb") as out:
                            shutil.copyfileobj(src, out)
                        os.chmod(dst, 0o755)


def tool_env():
    env = dict(os.environ)
    env["PATH"] = TOOLS + os.pathsep + "/usr/local/cuda/bin" + os.pathsep + env.get("PATH", "")
    return env


def sass_of(path, arch):
    env = tool_env()
    if shutil.which("cuobjdump", path=env["PATH"]) is None or shutil.which("nvdisasm", path=env["PATH"]) is None:
        sys.exit("sass_loops: cuobjdump or nvdisasm not found (on PATH, /usr/local/cuda/bin or .tools/sass): "
                 "run with --fetch once to download them")
    with tempfile.TemporaryDirectory() as d:
        obj = path
        if path.endswith(".cu"):
            obj = os.path.join(d, "k.cubin")
            cmd = ["nvcc", "-std=c++17", "-O3", "-gencode", f"arch=compute_{arch},code=sm_{arch}", "-DST_HAVE_CUDA",
                   "-D_GNU_SOURCE", "-I/usr/local/cuda/include", "-I" + os.path.join(ROOT, "include"),
                   "-I" + os.path.join(ROOT, "src"), "-cubin", "-o", obj, path]
            subprocess.run(cmd, check=True, env=env)
        r = subprocess.run(["cuobjdump", "-sass", obj], capture_output=True, text=True, env=env)
        if r.returncode != 0:
            sys.exit(f"sass_loops: cuobjdump -sass {obj}: {r.stderr.strip()}")
        return r.stdout


def kernels(sass):
    for part in re.split(r"\n\s*Function : ", sass)[1:]:
        name = part.split("\n", 1)[0].strip()
        ins = []
        for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", part):
            text = re.sub(r"^@!?U?P\w+\s+", "", m.group(2).strip())  # drop the predicate
            ins.append((int(m.group(1), 16), text.split()[0] if text else "", text))
        yield name, ins


def loops(ins):
    out = []
    for addr, op, text in ins:
        if op.startswith("BRA"):
            t = re.search(r"0x([0-9a-f]+)", text)
            if t and int(t.group(1), 16) < addr:
                out.append((int(t.group(1), 16), addr))
    return sorted(out, key=lambda lh: lh[0] - lh[1])  # largest first


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", nargs="?", help=".cu source, object file or cubin")
    ap.add_argument("pattern", nargs="?", default="", help="part of the (mangled) kernel name")
    ap.add_argument("--loops", type=int, default=1, help="how many of the largest loops per kernel")
    ap.add_argument("--arch", default="90", help="compute capability to compile a .cu file for (90, 80)")
    ap.add_argument("--fetch", action="store_true", help="download cuobjdump and nvdisasm into .tools/sass")
    a = ap.parse_args()
    if a.fetch:
        fetch_tools()
        if not a.file:
            return
    if not a.file:
        ap.error("a file is needed")
    found = False
    for name, ins in kernels(sass_of(a.file, a.arch)):
        if a.pattern not in name:
            continue
        found = True
        print(f"{name}: {len(ins)} instructions")
        for lo, hi in loops(ins)[:a.loops]:
            ops = collections.Counter(op.split(".")[0] for addr, op, _ in ins if lo <= addr <= hi)
            n, mma = sum(ops.values()), ops["HMMA"] + ops["HGMMA"]
            per = f", {n / mma:.1f} per product" if mma else ""
            top = ", ".join(f"{k} {v}" for k, v in ops.most_common(12))
            print(f"  loop {lo:#x}-{hi:#x}: {n} instructions, {mma} tensor-core products{per}; {top}")
    if not found:
        sys.exit(f"sass_loops: no kernel's name holds {a.pattern!r}")


if __name__ == "__main__":
    main()
