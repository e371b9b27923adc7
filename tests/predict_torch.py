#!/usr/bin/env python3
"""Loads an exported safetensors file into a plain torch.nn.Module written from docs/training.md's
description alone (no shmddp code, no safetensors package: the format is read here), runs it on
the test images and compares its logits with shmddp-predict's NAME.logits.

usage: predict_torch.py WEIGHTS.safetensors IMAGES_DIR LOGITS_DIR
Prints one line per image and exits 1 when a logit differs by more than 1e-3 (relative to the
largest) or an argmax disagrees anywhere the top two scores are not nearly tied."""
import json
import os
import struct
import sys
import zlib

import torch
import torch.nn as nn
import torch.nn.functional as F


def read_safetensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    body = data[8 + n:]
    dtypes = {"F32": torch.float32, "I64": torch.int64}
    out = {}
    for name, t in header.items():
        a, b = t["data_offsets"]
        out[name] = torch.frombuffer(bytearray(body[a:b]), dtype=dtypes[t["dtype"]]).reshape(t["shape"])
    return out, meta


def read_png_rgb(path):
    """8-bit RGB PNGs without interlacing (what the test writes), all filter types."""
    data = open(path, "rb").read()
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        (ln,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + ln]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype == 2, "the test writes 8-bit RGB"
        elif kind == b"IDAT":
            idat += body
        pos += 12 + ln
    raw, stride, rows, prev = zlib.decompress(idat), w * 3, [], bytearray(w * 3)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - 3] if i >= 3 else 0
            b, c = prev[i], prev[i - 3] if i >= 3 else 0
            p = a + b - c
            pred = [0, a, b, (a + b) // 2, a if abs(p - a) <= abs(p - b) and abs(p - a) <= abs(p - c)
                    else b if abs(p - b) <= abs(p - c) else c][f]
            line[i] = (line[i] + pred) & 255
        rows.append(line)
        prev = line
    return torch.tensor(list(b"".join(rows)), dtype=torch.float32).reshape(h, w, 3)


class UNet(nn.Module):
    """conv3x3-norm-ReLU twice per level, max-pool down, transposed conv 2x2 up, cat(skip, up),
    1x1 head: the network docs/training.md describes, with its names."""

    def __init__(self, widths, classes, norm, groups):
        super().__init__()
        self.levels = len(widths)
        mk_norm = (lambda c: nn.BatchNorm2d(c, eps=1e-5)) if norm == "batch" else \
            (lambda c: nn.GroupNorm(groups, c, eps=1e-5))

        def block(cin, cout, up_from=None):
            m = nn.Module()
            if up_from:
                m.up = nn.ConvTranspose2d(up_from, cout, 2, stride=2)
            m.conv1, m.norm1 = nn.Conv2d(cin, cout, 3, padding=1, bias=False), mk_norm(cout)
            m.conv2, m.norm2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False), mk_norm(cout)
            return m
        for i, w in enumerate(widths):
            setattr(self, "enc%d" % i, block(3 if i == 0 else widths[i - 1], w))
        for i in range(len(widths) - 1):
            setattr(self, "dec%d" % i, block(2 * widths[i], widths[i], up_from=widths[i + 1]))
        self.head = nn.Conv2d(widths[0], classes, 1)

    @staticmethod
    def run(m, v):
        v = F.relu(m.norm1(m.conv1(v)))
        return F.relu(m.norm2(m.conv2(v)))

    def forward(self, x):
        skips = []
        for i in range(self.levels):
            x = self.run(getattr(self, "enc%d" % i), x)
            if i < self.levels - 1:
                skips.append(x)
                x = F.max_pool2d(x, 2)
        for i in range(self.levels - 2, -1, -1):
            d = getattr(self, "dec%d" % i)
            x = self.run(d, torch.cat([skips.pop(), d.up(x)], 1))
        return self.head(x)


def main():
    weights, images, logits_dir = sys.argv[1:4]
    state, meta = read_safetensors(weights)
    levels, classes = int(meta["levels"]), int(meta["classes"])
    widths = [state["enc%d.conv1.weight" % i].shape[0] for i in range(levels)]
    net = UNet(widths, classes, meta["norm"], int(meta["groups"]))
    net.load_state_dict(state, strict=True)
    net.eval()
    bad = 0
    for name in sorted(os.listdir(images)):
        rgb = read_png_rgb(os.path.join(images, name))
        h, w, _ = rgb.shape
        x = ((rgb / 255.0 - 0.5) * 4.0).permute(2, 0, 1).unsqueeze(0)
        with torch.no_grad():
            ref = net(x)[0].permute(1, 2, 0)  # H, W, classes
        path = os.path.join(logits_dir, name[:-4] + ".logits")
        ours = torch.frombuffer(bytearray(open(path, "rb").read()), dtype=torch.float32).reshape(h, w, classes)
        err = ((ours - ref).abs().max() / ref.abs().max()).item()
        top2 = ref.topk(2, dim=2).values
        clear = (top2[..., 0] - top2[..., 1]) > 1e-3 * ref.abs().max()
        disagree = ((ours.argmax(2) != ref.argmax(2)) & clear).sum().item()
        print("%s: %dx%d, largest logit difference %.2e (relative), %d argmax disagreements"
              % (name, w, h, err, disagree))
        bad += err > 1e-3 or disagree > 0
    print("predict_torch: %s" % ("FAIL" if bad else "PASS"))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
