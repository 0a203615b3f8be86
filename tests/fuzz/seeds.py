#!/usr/bin/python3
"""Seed corpora for the fuzz targets: a few valid files of each format.
Usage: seeds.py DIR   (writes DIR/npy, DIR/idx, DIR/tokens)"""
import gzip
import os
import struct
import sys


def npy(descr, shape, data, version=1):
    h = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    pre = 10 if version == 1 else 12
    h += " " * ((64 - (pre + len(h) + 1) % 64) % 64) + "\n"
    ln = struct.pack("<H" if version == 1 else "<I", len(h))
    return b"\x93NUMPY" + bytes([version, 0]) + ln + h.encode() + data


def main():
    root = sys.argv[1]
    for d in ("npy", "idx", "tokens"):
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
    for name, raw in seeds.items():
        with open(os.path.join(root, name), "wb") as f:
            f.write(raw)


if __name__ == "__main__":
    main()
