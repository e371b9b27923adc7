#!/usr/bin/env python3
"""Cross-check one training step of shmddp's U-Net against PyTorch (float64 reference).

Usage: dev/torch_crosscheck.py DIR [--tol T] [--torch-precision P] [--ratio-median R]
                                     [--ratio-max R] [--floor] [--torch-loss-scale S]
DIR was written by dev/torch_check (see its header for the format). Rebuilds the same network
with torch.nn.functional in float64 (on a GPU when there is one), loads the same weights and
batch, and compares the loss and every parameter gradient. Prints one line per tensor and a
summary line `crosscheck: precision=... loss_rel=... grad_rel_max=... grad_rel_median=...`.

Reduced-precision baseline (--torch-precision, default auto): the same step is also run by
PyTorch itself at a reduced precision (fp32, tf32, or bf16/fp16 autocast with float32 master
weights), and PyTorch's own error against its float64 reference is measured with the same
metric as ours. That tells how large an error ANY implementation shows at that precision on this
problem, so ours is judged relative to it: it passes when the loss is within the tolerance, ours'
median gradient error is at most --ratio-median times PyTorch's and ours' largest at most
--ratio-max times PyTorch's. With --torch-precision none the old absolute rule applies (the
largest relative gradient error and the loss error within the tolerance, default by precision).
--floor also runs plain fp32 (no TF32) as a conditioning floor. Exits 1 on FAIL."""
import argparse
import contextlib
import os
import statistics
import sys
import warnings

import numpy as np
import torch
import torch.nn.functional as F

DEFAULT_TOL = {"fp32": 3e-2, "bf16": 1.5e-1, "fp16": 1.5e-1}  # TF32 / 16-bit convolutions

# The reduced precisions PyTorch can be run at: (master dtype of weights and input, autocast
# dtype or None, whether convolutions/matmuls may use TF32 tensor cores).
REDUCED = {
    "fp32": (torch.float32, None, False),
    "tf32": (torch.float32, None, True),
    "bf16": (torch.float32, torch.bfloat16, False),
    "fp16": (torch.float32, torch.float16, False),
}
NP_DTYPE = {torch.float64: np.float64, torch.float32: np.float32}
FP16_INITIAL_SCALE = 65536.0  # the starting loss scale of torch.cuda.amp.GradScaler


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


def to_torch_layout(name, flat, shape, dtype=torch.float64):
    t = torch.from_numpy(flat.astype(NP_DTYPE[dtype])).reshape(shape)
    if len(shape) == 4:  # conv3x3 [cout][3][3][cin], convT [cin][2][2][cout]: both -> (0, 3, 1, 2)
        return t.permute(0, 3, 1, 2).contiguous()
    if len(shape) == 2:  # 1x1 [cout][cin]
        return t.reshape(shape[0], shape[1], 1, 1)
    return t


def from_torch_layout(g, shape):
    if len(shape) == 4:
        return g.permute(0, 2, 3, 1).reshape(-1)
    return g.reshape(-1)


@contextlib.contextmanager
def tf32_allowed(enabled):
    """Sets PyTorch's two TF32 switches (cuDNN convolutions, cuBLAS matmuls) for the duration of
    the block and puts the previous values back afterwards, also on an exception. Newer PyTorch
    versions warn that these switches are being replaced; the warning is silenced so that it
    cannot land between our output lines."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        saved = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
        torch.backends.cudnn.allow_tf32 = enabled
        torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def unet_loss(P, xt, yt, cfg):
    """Forward pass of the U-Net and its mean per-pixel cross-entropy. Works in whatever dtype P
    and xt have (float64 for the reference, float32 otherwise); called inside torch.autocast the
    convolutions run in the 16-bit type while BatchNorm keeps float32 statistics, as in ordinary
    PyTorch mixed-precision training."""
    widths = [int(w) for w in cfg["widths"].split(",")]
    L = len(widths)
    groups = int(cfg.get("groups", 8))

    def norm(v, pre):
        if cfg["norm"] == "group":
            # GroupNorm is computed in the master dtype: autocast does that by itself on the GPU;
            # the explicit cast also covers CPU autocast, which leaves it 16-bit (and then fails
            # on the float32 weights). A no-op without autocast.
            w = P[pre + ".weight"]
            return F.group_norm(v.to(w.dtype), groups, w, P[pre + ".bias"], eps=1e-5)
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
    # Under autocast the logits come out 16-bit; the loss is taken in the master dtype, which is
    # what autocast does for cross_entropy anyway (made explicit here). A no-op in float64.
    return F.cross_entropy(logits.to(P["head.weight"].dtype), yt)


def run_step(data, dtype, dev, amp=None, loss_scale=1.0):
    """One forward and backward pass with the weights and batch of the dump, weights and input in
    dtype on dev, optionally under autocast to amp. With loss_scale > 1 the loss is multiplied
    before backward and the gradients divided after (as GradScaler does); when that overflows the
    scale is halved and the step repeated. Returns (loss, gradients in our flat layout as float64
    numpy arrays in the order of the dump's tensors, the loss scale used)."""
    cfg, tensors, _, params, _, x, y = data
    S, B = int(cfg["size"]), int(cfg["batch"])
    scale = float(loss_scale)
    while True:
        P = {}
        for name, off, count, shape in tensors:
            P[name] = to_torch_layout(name, params[off:off + count], shape, dtype).to(dev).requires_grad_(True)
        xt = torch.from_numpy(x.astype(NP_DTYPE[dtype])).reshape(B, S, S, 3).permute(0, 3, 1, 2).to(dev)
        yt = torch.from_numpy(y.astype(np.int64)).reshape(B, S, S).to(dev)
        ctx = torch.autocast(device_type=dev, dtype=amp) if amp is not None else contextlib.nullcontext()
        with ctx:
            loss = unet_loss(P, xt, yt, cfg)
        if scale == 1.0:
            loss.backward()
        else:
            (loss * scale).backward()
        # Gradients of the float32/float64 leaves come back in that dtype; widen to float64 before
        # unscaling (dividing by a power of two is then exact).
        grads = [from_torch_layout(P[name].grad.detach().cpu().double(), shape).numpy() / scale
                 for name, _, _, shape in tensors]
        finite = all(np.isfinite(g).all() for g in grads)
        if finite or scale <= 1.0:
            return loss.item(), grads, scale
        scale /= 2.0  # overflow in the scaled backward pass: back off like GradScaler


def rel_err(ours, ref):
    """The metric for everything: |ours - ref| / |ref| in the 2-norm over the whole tensor."""
    return float(np.linalg.norm(ours - ref) / (np.linalg.norm(ref) + 1e-300))


def ratio(a, b):
    """a / b, with 0/0 = 0 and x/0 = inf for x > 0 (a reduced run that is exact)."""
    if b > 0:
        return a / b
    return 0.0 if a == 0 else float("inf")


def resolve_precision(choice, cfg):
    """The precision PyTorch is run at for --torch-precision auto: the one our dump was made at.
    Our fp32 GPU convolutions use TF32 unless SHMDDP_TF32=0 is set (kernels/conv_cuda.cu), so the
    variable is read here too: it has to be set for this script as well, not only for torch_check.
    A CPU dump in fp32 has no reduced precision at all; it keeps the old (stricter) absolute
    check, so auto means none there."""
    if choice != "auto":
        return choice
    p = cfg.get("precision")
    if p == "fp32":
        if cfg.get("device") == "cpu":
            return "none"
        return "fp32" if os.environ.get("SHMDDP_TF32") == "0" else "tf32"
    if p in ("bf16", "fp16"):
        return p
    return "none"


def run_reduced(data, prec, dev, loss_scale):
    """PyTorch's own step at a reduced precision (a key of REDUCED) with the TF32 switches set for
    that precision only during the run. Returns (the precision actually run, loss, gradients), or
    None when it cannot run here. Prints a note when the run differs from the request."""
    dtype, amp, tf32 = REDUCED[prec]
    if dev == "cpu":
        if prec == "fp16":
            print("note: no GPU: the torch fp16 run is skipped (fp16 autocast is a GPU feature here); "
                  "falling back to the absolute rule")
            return None
        if prec == "tf32":
            print("note: no GPU: TF32 does not exist on the CPU, the torch run is plain fp32")
            prec, tf32 = "fp32", False
    if loss_scale is None:
        loss_scale = FP16_INITIAL_SCALE if prec == "fp16" else 1.0
    with tf32_allowed(tf32):
        loss, grads, used = run_step(data, dtype, dev, amp, loss_scale)
    if used != loss_scale:
        print(f"note: torch {prec}: loss scale {loss_scale:g} overflowed, used {used:g}")
    return prec, loss, grads


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--tol", type=float, default=None)
    ap.add_argument("--torch-precision", choices=("auto", "none") + tuple(REDUCED), default="auto",
                    help="also run PyTorch at this precision and judge ours relative to it "
                         "(auto: the dump's precision; none: only the float64 reference)")
    ap.add_argument("--ratio-median", type=float, default=2.0,
                    help="ours' median gradient error may be at most this times torch's")
    ap.add_argument("--ratio-max", type=float, default=3.0,
                    help="ours' largest gradient error may be at most this times torch's")
    ap.add_argument("--floor", action="store_true",
                    help="also run torch in plain fp32 (no TF32): the conditioning floor")
    ap.add_argument("--torch-loss-scale", type=float, default=None,
                    help="loss scale of the torch reduced run (default 65536 for fp16, else 1)")
    a = ap.parse_args()
    if not (a.ratio_median > 0 and a.ratio_max > 0):
        ap.error("--ratio-median and --ratio-max must be positive")
    if a.torch_loss_scale is not None and not 1 <= a.torch_loss_scale < float("inf"):
        ap.error("--torch-loss-scale must be a finite number of at least 1")
    data = load(a.dir)
    cfg, tensors, our_loss, params, grads, x, y = data
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    S, B = int(cfg["size"]), int(cfg["batch"])

    # The float64 reference runs first, with TF32 off (float64 never uses TF32 anyway; this only
    # makes sure no switch left by anything else could matter).
    with tf32_allowed(False):
        ref_loss, ref_grads, _ = run_step(data, torch.float64, dev)

    # PyTorch at the reduced precision, and optionally plain fp32 as the conditioning floor.
    tprec = resolve_precision(a.torch_precision, cfg)
    torch_run = run_reduced(data, tprec, dev, a.torch_loss_scale) if tprec != "none" else None
    floor_run = None
    if a.floor:
        if torch_run is not None and torch_run[0] == "fp32":
            floor_run = torch_run  # the same run: no need to do it twice
        else:
            floor_run = run_reduced(data, "fp32", dev, None)

    rels, trels, frels = [], [], []
    for i, (name, off, count, shape) in enumerate(tensors):
        ours = grads[off:off + count].astype(np.float64)
        rel = rel_err(ours, ref_grads[i])
        rels.append(rel)
        line = f"  {name:24s} {count:9d}  rel err {rel:.3e}"
        if torch_run is not None:
            trels.append(rel_err(torch_run[2][i], ref_grads[i]))
            line += f"  torch {torch_run[0]} {trels[-1]:.3e}"
        if floor_run is not None:
            frels.append(rel_err(floor_run[2][i], ref_grads[i]))
            line += f"  fp32 floor {frels[-1]:.3e}"
        print(line)

    loss_rel = abs(our_loss - ref_loss) / abs(ref_loss)
    tol = a.tol if a.tol is not None else DEFAULT_TOL.get(cfg["precision"], 3e-2)
    if cfg["device"] == "cpu" and cfg["precision"] == "fp32" and a.tol is None:
        tol = 1e-4
    gmax, gmed = max(rels), statistics.median(rels)
    extra = ""
    if torch_run is not None:
        tmax, tmed = max(trels), statistics.median(trels)
        tloss_rel = abs(torch_run[1] - ref_loss) / abs(ref_loss)
        rmed, rmax = ratio(gmed, tmed), ratio(gmax, tmax)
        ok = loss_rel <= tol and rmed <= a.ratio_median and rmax <= a.ratio_max
        print(f"rule: relative to torch {torch_run[0]}: loss_rel {loss_rel:.2e} <= tol {tol:g}, "
              f"median {gmed:.2e} <= {a.ratio_median:g} x {tmed:.2e} (ratio {rmed:.3g}), "
              f"max {gmax:.2e} <= {a.ratio_max:g} x {tmax:.2e} (ratio {rmax:.3g}) -> "
              f"{'PASS' if ok else 'FAIL'}")
        extra += (f" torch_precision={torch_run[0]} torch_loss_rel={tloss_rel:.2e} "
                  f"torch_grad_rel_max={tmax:.2e} torch_grad_rel_median={tmed:.2e} "
                  f"ratio_median={rmed:.3g} ratio_max={rmax:.3g}")
    else:
        ok = gmax <= tol and loss_rel <= tol
        print(f"rule: absolute tolerance: grad_rel_max {gmax:.2e} and loss_rel {loss_rel:.2e} "
              f"<= tol {tol:g} -> {'PASS' if ok else 'FAIL'}")
    if floor_run is not None:
        extra += f" torch_fp32_grad_rel_median={statistics.median(frels):.2e}"
    sys.stdout.flush()
    # The summary stays the last line (scripts read it with tail -1).
    print(f"crosscheck: device={cfg['device']} precision={cfg['precision']} widths={cfg['widths']} "
          f"size={S} batch={B} loss_ours={our_loss:.6f} loss_torch={ref_loss:.6f} "
          f"loss_rel={loss_rel:.2e} grad_rel_max={gmax:.2e} "
          f"grad_rel_median={gmed:.2e} tol={tol:g}{extra} {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
