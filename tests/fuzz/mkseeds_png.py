# mkseeds_png.py — writes the seed inputs of the png fuzzer (colour types, bit depths, interlace,
# the directory case) into DIR; with a second argument it prints the valid pair for png_input.h.
# Usage: python3 tests/fuzz/mkseeds_png.py tests/fuzz/regress_png [c]
import struct, zlib, sys, os
def chunk(t, d): return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
def png(w, h, ctype, depth, rows_bits, plte=None, interlace=0, extra=b''):
    ihdr = struct.pack('>IIBBBBB', w, h, depth, ctype, 0, 0, interlace)
    out = b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', ihdr)
    if plte: out += chunk(b'PLTE', plte)
    out += extra
    out += chunk(b'IDAT', zlib.compress(rows_bits)) + chunk(b'IEND', b'')
    return out
def raw(w, h, bpp_bits, interlace=0, filt=0):
    def rows(pw, ph):
        rb = (pw * bpp_bits + 7) // 8
        return b''.join(bytes([filt]) + bytes((x * 7 + y * 13) & 0xff for x in range(rb)) for y in range(ph))
    if not interlace: return rows(w, h)
    passes = [(0,0,8,8),(4,0,8,8),(0,4,4,8),(2,0,4,4),(0,2,2,4),(1,0,2,2),(0,1,1,2)]
    out = b''
    for x0, y0, dx, dy in passes:
        pw = (w - x0 + dx - 1) // dx if w > x0 else 0
        ph = (h - y0 + dy - 1) // dy if h > y0 else 0
        if pw and ph: out += rows(pw, ph)
    return out
pal = bytes(range(48))
seeds = {
 'rgb8': (0, png(8, 8, 2, 8, raw(8, 8, 24))),
 'rgba16': (0, png(5, 3, 6, 16, raw(5, 3, 64, filt=1))),
 'gray1': (0, png(9, 4, 0, 1, raw(9, 4, 1))),
 'graya8': (0, png(4, 4, 4, 8, raw(4, 4, 16, filt=2))),
 'pal4': (0, png(7, 5, 3, 4, raw(7, 5, 4), plte=pal)),
 'rgb8i': (0, png(9, 9, 2, 8, raw(9, 9, 24, interlace=1), interlace=1)),
 'mask8': (1, png(8, 8, 0, 8, bytes(b for y in range(8) for b in [0] + [(x + y) % 3 for x in range(8)]))),
 'mask2': (1, png(6, 6, 0, 2, raw(6, 6, 2))),
 'maskpal': (1, png(4, 4, 3, 8, bytes(b for y in range(4) for b in [0] + [x % 2 for x in range(4)]), plte=pal)),
 'rgbtrns': (0, png(4, 4, 2, 8, raw(4, 4, 24, filt=3), extra=chunk(b'tRNS', b'\0\1\0\2\0\3') + chunk(b'gAMA', struct.pack('>I', 45455)))),
}
d = sys.argv[1]
for name, (mask, data) in seeds.items():
    open(os.path.join(d, 'ok-' + name), 'wb').write(bytes([mask | 8]) + data)
# directory case: flags bit1, then u16 image length, image, mask
img = png(8, 8, 2, 8, raw(8, 8, 24)); msk = seeds['mask8'][1]
open(os.path.join(d, 'ok-dir'), 'wb').write(bytes([0x1a]) + struct.pack('<H', len(img)) + img + msk)
open(os.path.join(d, 'ok-dirval'), 'wb').write(bytes([0x1e]) + struct.pack('<H', len(img)) + img + msk)
if len(sys.argv) > 2:  # the valid pair, as C arrays
    for n, b in (('png_fuzz_good_image', img), ('png_fuzz_good_mask', msk)):
        print('static const unsigned char %s[%d] = {' % (n, len(b)))
        for i in range(0, len(b), 16): print('  ' + ', '.join('0x%02x' % c for c in b[i:i+16]) + ',')
        print('};')
