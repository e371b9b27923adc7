"""png_io.py: the PNG files of the shell tests, with python3's standard library only.

write() makes an 8-bit gray or RGB PNG; read() decodes an 8-bit one without interlacing (gray,
RGB or RGBA, every filter type). tests/predict_lib.sh puts tests/ on PYTHONPATH.
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
    w, h, depth, ct, _, _, interlace = struct.unpack(">IIBBBBB", d[16:29])
    assert depth == 8 and ct in _CHANNELS and interlace == 0, (path, depth, ct, interlace)
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
        for i in range(st if f else 0):
            a = line[i - ch] if i >= ch else 0
            b = prev[i]
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            else:
                c = prev[i - ch] if i >= ch else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return w, h, ch, b"".join(rows)
