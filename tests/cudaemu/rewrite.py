#!/usr/bin/env python3
"""Rewrite a CUDA C++ source for the CUDA emulator (tests/cudaemu/README.md).

Every kernel launch `K<<<CFG>>>(ARGS)` becomes
`st_emu_launch(st_emu_config(CFG), "K (FILE:LINE)", [](auto &&...st_a_) { K(st_a_...); }, ARGS)`:
the arguments are evaluated (and copied) at the launch, as CUDA does, and the
kernel is called by name for every thread, so templates deduce as before.
Every shared-memory declaration `__shared__ T a[N], b[M];` (one line) is
followed, on the same line, by `st_emu_shared(&a, sizeof a);` for each array,
so that the first thread of a block to pass it fills it with 0xFF bytes, as
garbage stands in a GPU's shared memory when a block starts.
Everything else is left byte for byte; a `#line` keeps compiler messages
pointing at the original file. Usage: rewrite.py IN.cu OUT.cpp"""
import re
import sys


def skip_back_ws(s, i):
    while i >= 0 and s[i].isspace():
        i -= 1
    return i


def match_back(s, i, open_c, close_c):
    """s[i] == close_c: index of its matching open_c."""
    depth = 0
    while i >= 0:
        if s[i] == close_c:
            depth += 1
        elif s[i] == open_c:
            depth -= 1
            if depth == 0:
                return i
        i -= 1
    raise SystemExit("rewrite.py: unbalanced %s before a launch" % open_c)


def match_fwd(s, i, open_c, close_c):
    """s[i] == open_c: index of its matching close_c (skipping strings and chars)."""
    depth = 0
    n = len(s)
    while i < n:
        c = s[i]
        if c in "\"'":
            q = c
            i += 1
            while s[i] != q:
                i += 2 if s[i] == "\\" else 1
        elif c == open_c:
            depth += 1
        elif c == close_c:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise SystemExit("rewrite.py: unbalanced %s after a launch" % open_c)


def rewrite(src, path):
    out = []
    pos = 0
    while True:
        at = src.find("<<<", pos)
        if at < 0:
            out.append(src[pos:])
            return "".join(out)
        # the kernel expression: an identifier (with ::), optionally with <template args>
        j = skip_back_ws(src, at - 1)
        if src[j] == ">":
            j = skip_back_ws(src, match_back(src, j, "<", ">") - 1)
        k = j
        while k >= 0 and (src[k].isalnum() or src[k] in "_:"):
            k -= 1
        start = k + 1
        if start > j:
            raise SystemExit("rewrite.py: no kernel name before <<< at offset %d" % at)
        name = src[start:at].rstrip()
        end_cfg = src.find(">>>", at)
        cfg = src[at + 3:end_cfg]
        p = end_cfg + 3
        while src[p].isspace():
            p += 1
        if src[p] != "(":
            raise SystemExit("rewrite.py: no argument list after >>> at offset %d" % end_cfg)
        close = match_fwd(src, p, "(", ")")
        # NULL (an integer constant in C++) would be stored as a long: pass nullptr
        args = re.sub(r"\bNULL\b", "nullptr", src[p + 1:close])
        out.append(src[pos:start])
        # keep the line count: newlines of the original go inside the new text
        sep = ", " if args.strip() else ""
        kname = re.sub(r"\s+", " ", name)
        where = "%s (%s:%d)" % (kname, path, src.count("\n", 0, at) + 1)
        out.append("st_emu_launch(st_emu_config(%s), \"%s\", [](auto &&...st_a_) { %s(st_a_...); }%s%s)"
                   % (cfg, where, kname, sep, args))
        out.append("\n" * (src[start:close + 1].count("\n") - (cfg + args).count("\n")))
        pos = close + 1


def split_top(s):
    """s split at its commas outside brackets and parentheses."""
    parts, depth, cur = [], 0, ""
    for c in s:
        if c in "[(":
            depth += 1
        elif c in "])":
            depth -= 1
        if c == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += c
    return parts + [cur]


def shared_decls(src, path):
    out = []
    for n, line in enumerate(src.split("\n"), 1):
        m = re.match(r"^(\s*)__shared__\s+(.*?);(.*)$", line)
        dyn = re.match(r"^(\s*)extern\s+__shared__\s+(?:__align__\s*\([^)]*\)\s+)?([\w:<> ]+?)\s+(\w+)\s*\[\s*\]\s*;(.*)$",
                     line)
        if line.lstrip().startswith("extern __shared__") and not dyn:
            raise SystemExit("rewrite.py: %s:%d: dynamic shared memory not understood (one array a line: "
                             "extern __shared__ T name[];)" % (path, n))
        if dyn:  # the launch's dynamic shared memory
            line = "%s%s *%s = (%s *)st_emu_dynamic_shared();%s" % (dyn.group(1), dyn.group(2), dyn.group(3), dyn.group(2),
                                                                    dyn.group(4))
        elif m:
            body = re.sub(r"__align__\s*\([^)]*\)", "", m.group(2))
            names = []
            for d in split_top(body):
                d = d.split("=")[0]
                k = re.search(r"(\w+)\s*(\[.*)?$", d.strip())
                if not k:
                    raise SystemExit("rewrite.py: %s:%d: a __shared__ declaration not understood" % (path, n))
                names.append(k.group(1))
            line = "%s__shared__ %s; %s%s" % (m.group(1), m.group(2),
                                            " ".join("st_emu_shared(&%s, sizeof %s);" % (a, a) for a in names),
                                            m.group(3))
        elif "__shared__" in line and not line.lstrip().startswith(("/*", "*", "//")):
            raise SystemExit("rewrite.py: %s:%d: a __shared__ declaration must be one line" % (path, n))
        out.append(line)
    return "\n".join(out)


def main():
    src_path, out_path = sys.argv[1], sys.argv[2]
    with open(src_path) as f:
        src = f.read()
    with open(out_path, "w") as f:
        f.write('#line 1 "%s"\n' % src_path)
        f.write(rewrite(shared_decls(src, src_path), src_path))


if __name__ == "__main__":
    main()
