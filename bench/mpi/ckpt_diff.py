#!/usr/bin/env python3
"""ckpt_diff.py A.ckpt B.ckpt: compare two shmddp checkpoints (src/train/checkpoint.c's format:
magic, version, count, config text, then per tensor name, dtype, count, CRC32, data) tensor by
tensor. Prints "bit-identical" or the largest difference of the float tensors (absolute, and
relative to the tensor's largest magnitude). Standard library only."""
import struct
import sys

DT = {0: ("B", 1), 1: ("i", 4), 2: ("q", 8), 3: ("f", 4), 4: ("d", 8)}


def read(path):
    with open(path, "rb") as f:
        b = f.read()
    o = 8
    _version, n = struct.unpack_from("<II", b, o)
    o += 8
    (clen,) = struct.unpack_from("<Q", b, o)
    o += 8 + clen
    out = {}
    for _ in range(n):
        (nl,) = struct.unpack_from("<I", b, o)
        o += 4
        name = b[o:o + nl].decode()
        o += nl
        dt, cnt = struct.unpack_from("<IQ", b, o)
        o += 12 + 4  # dtype, count, crc
        fmt, size = DT[dt]
        out[name] = (fmt, b[o:o + cnt * size], cnt)
        o += cnt * size
    return out


def main():
    a, b = read(sys.argv[1]), read(sys.argv[2])
    if a.keys() != b.keys():
        print("different tensors:", sorted(set(a) ^ set(b)))
        return 1
    identical = all(a[k][1] == b[k][1] for k in a)
    if identical:
        print("checkpoints: every tensor bit-identical (%d tensors)" % len(a))
        return 0
    worst_abs, worst_rel, where = 0.0, 0.0, ""
    for k in sorted(a):
        fmt, da, cnt = a[k]
        if fmt not in ("f", "d") or da == b[k][1]:
            continue
        va = struct.unpack("<%d%s" % (cnt, fmt), da)
        vb = struct.unpack("<%d%s" % (cnt, fmt), b[k][1])
        scale = max(1.0, max(abs(x) for x in va))
        d = max(abs(x - y) for x, y in zip(va, vb))
        if d / scale > worst_rel:
            worst_abs, worst_rel, where = d, d / scale, k
    print("checkpoints differ: largest difference %.3g (relative %.3g) in %s" % (worst_abs, worst_rel, where))
    return 0


if __name__ == "__main__":
    sys.exit(main())
