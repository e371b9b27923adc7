"""png_io.py: the PNG files of the shell tests, with python3's standard library only.

write() makes an 8-bit gray or RGB PNG; read() decodes an 8-bit one without interlacing (gray,
RGB or RGBA, every filter type). The scripts import it with PYTHONPATH=$srcdir/tests.
"""
import struct
import zlib

_CHANNELS = {0: 1, 2: 3, 6: 4}  # colour type -> channels


def _chunk(kind, body):
    crc = struct.pack(">I", zlib.crc32(kind + body) & 0xffffffff)
    return struct.pack(">I", len(body)) + kind + body + crc


def write(path, w, h, ch, px):
    """w x h pixels of ch channels (1: gray, 3: RGB), px the values row by row."""
    raw = b"".join(b"\0" + bytes(px[y * w * ch:(y + 1) * w * ch]) for y in range(h))
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2 if ch == 3 else 0, 0, 0, 0)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", zlib.compress(raw))
                + _chunk(b"IEND", b""))


def read(path):
    """(w, h, ch, pixels): the image's size, its channels and its bytes row by row."""
    d = open(path, "rb").read()
    w, h, depth, ct = struct.unpack(">IIBB", d[16:26])
    assert depth == 8 and ct in _CHANNELS, (path, depth, ct)
    ch = _CHANNELS[ct]
    pos, idat = 8, b""
    while pos < len(d):
        (n,) = struct.unpack(">I", d[pos:pos + 4])
        if d[pos + 4:pos + 8] == b"IDAT":
            idat += d[pos + 8:pos + 8 + n]
        pos += 12 + n
    raw, st = zlib.decompress(idat), w * ch
    rows, prev = [], bytearray(st)
    for y in range(h):
        f, line = raw[y * (st + 1)], bytearray(raw[y * (st + 1) + 1:(y + 1) * (st + 1)])
        for i in range(st):
            a = line[i - ch] if i >= ch else 0
            b = prev[i]
            c = prev[i - ch] if i >= ch else 0
            p = a + b - c
            paeth = a if abs(p - a) <= abs(p - b) and abs(p - a) <= abs(p - c) else b if abs(p - b) <= abs(p - c) else c
            line[i] = (line[i] + [0, a, b, (a + b) // 2, paeth][f]) & 255
        rows.append(line)
        prev = line
    return w, h, ch, b"".join(rows)
