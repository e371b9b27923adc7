#!/usr/bin/env python3
"""Cross-check one training step of shmddp's U-Net against PyTorch (float64 reference).

Usage: tools/torch_crosscheck.py DIR [--tol T]
DIR was written by tools/torch_check (see its header for the format). Rebuilds the same network
with torch.nn.functional in float64 (on a GPU when there is one), loads the same weights and
batch, and compares the loss and every parameter gradient. Prints one line per tensor and a
summary line `crosscheck: precision=... loss_rel=... grad_rel_max=... grad_rel_median=...`; exits
1 when the largest relative gradient error is above the tolerance (default by precision)."""
import argparse
import statistics
import sys

import numpy as np
import torch
import torch.nn.functional as F

DEFAULT_TOL = {"fp32": 3e-2, "bf16": 1.5e-1, "fp16": 1.5e-1}  # TF32 / 16-bit convolutions


def load(d):
    cfg, tensors, loss = {}, [], None
    for line in open(f"{d}/meta.txt"):
        f = line.split()
        if f[0] == "config":
            cfg = dict(kv.split("=", 1) for kv in f[1:])
        elif f[0] == "tensor":
            tensors.append((f[1], int(f[2]), int(f[3]), [int(v) for v in f[4].split("x")]))
        elif f[0] == "loss":
            loss = float(f[1])
    read = lambda n, dt: np.fromfile(f"{d}/{n}", dtype=dt)
    return cfg, tensors, loss, read("params.bin", "<f4"), read("grads.bin", "<f4"), read("x.bin", "<f4"), read("y.bin", "<i4")


def to_torch_layout(name, flat, shape):
    t = torch.from_numpy(flat.astype(np.float64)).reshape(shape)
    if len(shape) == 4:  # conv3x3 [cout][3][3][cin], convT [cin][2][2][cout]: both -> (0, 3, 1, 2)
        return t.permute(0, 3, 1, 2).contiguous()
    if len(shape) == 2:  # 1x1 [cout][cin]
        return t.reshape(shape[0], shape[1], 1, 1)
    return t


def from_torch_layout(g, shape):
    if len(shape) == 4:
        return g.permute(0, 2, 3, 1).reshape(-1)
    return g.reshape(-1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--tol", type=float, default=None)
    a = ap.parse_args()
    cfg, tensors, our_loss, params, grads, x, y = load(a.dir)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    widths = [int(w) for w in cfg["widths"].split(",")]
    L, S, B, K = len(widths), int(cfg["size"]), int(cfg["batch"]), int(cfg["classes"])
    P = {}
    for name, off, count, shape in tensors:
        P[name] = to_torch_layout(name, params[off:off + count], shape).to(dev).requires_grad_(True)
    xt = torch.from_numpy(x.astype(np.float64)).reshape(B, S, S, 3).permute(0, 3, 1, 2).to(dev)
    yt = torch.from_numpy(y.astype(np.int64)).reshape(B, S, S).to(dev)
    groups = int(cfg.get("groups", 8))

    def norm(v, pre):
        if cfg["norm"] == "group":
            return F.group_norm(v, groups, P[pre + ".weight"], P[pre + ".bias"], eps=1e-5)
        return F.batch_norm(v, None, None, P[pre + ".weight"], P[pre + ".bias"], training=True, eps=1e-5)

    def block(v, pre):
        v = F.relu(norm(F.conv2d(v, P[pre + ".conv1.weight"], padding=1), pre + ".norm1"))
        return F.relu(norm(F.conv2d(v, P[pre + ".conv2.weight"], padding=1), pre + ".norm2"))

    v, skips = xt, []
    for i in range(L):
        v = block(v, f"enc{i}")
        if i < L - 1:
            skips.append(v)
            v = F.max_pool2d(v, 2)
    for i in range(L - 2, -1, -1):
        v = F.conv_transpose2d(v, P[f"dec{i}.up.weight"], P[f"dec{i}.up.bias"], stride=2)
        v = block(torch.cat([skips.pop(), v], 1), f"dec{i}")
    logits = F.conv2d(v, P["head.weight"], P["head.bias"])
    loss = F.cross_entropy(logits, yt)
    loss.backward()
    loss_rel = abs(our_loss - loss.item()) / abs(loss.item())
    rels = []
    for name, off, count, shape in tensors:
        ref = from_torch_layout(P[name].grad.detach().cpu(), shape).numpy()
        ours = grads[off:off + count].astype(np.float64)
        rel = float(np.linalg.norm(ours - ref) / (np.linalg.norm(ref) + 1e-300))
        rels.append(rel)
        print(f"  {name:24s} {count:9d}  rel err {rel:.3e}")
    tol = a.tol if a.tol is not None else DEFAULT_TOL.get(cfg["precision"], 3e-2)
    if cfg["device"] == "cpu" and cfg["precision"] == "fp32" and a.tol is None:
        tol = 1e-4
    ok = max(rels) <= tol and loss_rel <= tol
    print(f"crosscheck: device={cfg['device']} precision={cfg['precision']} widths={cfg['widths']} "
          f"size={S} batch={B} loss_ours={our_loss:.6f} loss_torch={loss.item():.6f} "
          f"loss_rel={loss_rel:.2e} grad_rel_max={max(rels):.2e} "
          f"grad_rel_median={statistics.median(rels):.2e} tol={tol:g} {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
