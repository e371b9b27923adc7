#!/usr/bin/env python3
"""DDP training of the reference U-Net (bench/torch_unet.py: widths 64..1024, batch 6 per GPU,
3x256x256 inputs, 4 classes, SGD momentum 0.9, bf16 autocast, channels-last) through whatever
library serves NCCL's C API in this process: real NCCL, or libshmddp-nccl.so when preloaded.

Run under torchrun (ranks may share a GPU: device = local_rank % device_count):

    python3 -m torch.distributed.run --standalone --nproc-per-node 2 ddp_train.py --out d.json [--syncbn]

Data are synthetic and fixed per rank (seeded generator, as torch_unet.py does), so the loss
curve is reproducible and must fall. Records the per-step loss averaged over ranks, images/s
over the steps after the warm-up (CUDA-synchronised wall time), peak memory per rank, and
whether every rank ends with bitwise identical parameters (DDP's invariant: all ranks must
receive the same all-reduced gradients). Prints `RESULT {json}` (rank 0); exit status 1 when
the loss is not finite, does not fall, or the ranks' parameters differ.
"""
import argparse
import hashlib
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from torch_unet import UNet  # noqa: E402 - the reference model, shared with bench/torch_unet.py
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402 - bench/nccl/common.py, found next to this script


def param_digest(model):
    """SHA-256 over every parameter's bytes, in order (buffers differ by design: BatchNorm's
    running statistics are local unless SyncBN)."""
    h = hashlib.sha256()
    for p in model.parameters():
        common.hash_tensor(h, p)
    return h.digest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20, help="steps left out of the timing")
    ap.add_argument("--syncbn", action="store_true")
    ap.add_argument("--batch", type=int, default=6)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--widths", default="64,128,256,512,1024")
    ap.add_argument("--classes", type=int, default=4)
    ap.add_argument("--precision", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--channels-last", type=int, default=1)
    ap.add_argument("--timeout", type=int, default=120, help="process-group timeout, seconds")
    args = ap.parse_args()
    t_start = time.time()

    dev, rank, world = common.init_process_group(args.timeout)
    provider = common.nccl_provider()

    # The settings of torch_unet.py, so the figures compare with its DDP rows.
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(1)
    model = UNet([int(w) for w in args.widths.split(",")], classes=args.classes).to(dev)
    if args.syncbn:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[dev.index])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator(device=dev).manual_seed(rank)
    x = torch.randn(args.batch, 3, args.size, args.size, device=dev, generator=g)
    x = x.to(memory_format=fmt)
    y = torch.randint(0, args.classes, (args.batch, args.size, args.size), device=dev, generator=g)
    amp = args.precision == "bf16"
    losses = torch.zeros(args.steps, device=dev, dtype=torch.float32)
    if rank == 0:
        print(f"ddp_train: world {world}, syncbn {int(args.syncbn)}, {args.steps} steps, "
              f"device cuda:{dev.index}, NCCL API served by {provider}", flush=True)

    warmup = min(args.warmup, max(args.steps - 1, 0))
    t0 = None
    for step in range(args.steps):
        if step == warmup:
            # Time only the steady state: all ranks start the timed window together.
            torch.cuda.synchronize(dev)
            dist.barrier()
            torch.cuda.synchronize(dev)
            torch.cuda.reset_peak_memory_stats(dev)
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = F.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        losses[step] = loss.detach().float()   # kept on the GPU: no sync inside the loop
        if rank == 0 and step == 0:
            print(f"  step 0: loss {loss.item():.5f}", flush=True)
    torch.cuda.synchronize(dev)
    elapsed = time.perf_counter() - t0 if t0 is not None else float("nan")
    timed = args.steps - warmup
    img_s = args.batch * world * timed / elapsed if timed > 0 else float("nan")
    peak_mib = torch.cuda.max_memory_allocated(dev) / 2**20

    # One all-reduce for the whole curve, after the loop, so the timing holds no extra calls.
    dist.all_reduce(losses)
    losses /= world
    curve = [float(v) for v in losses.cpu()]

    peaks = torch.zeros(world, device=dev, dtype=torch.float64)
    dist.all_gather_into_tensor(peaks, torch.tensor([peak_mib], device=dev, dtype=torch.float64))
    digest = param_digest(model)
    mine = torch.tensor(list(digest), dtype=torch.uint8, device=dev)
    all_digests = torch.zeros(world * len(digest), dtype=torch.uint8, device=dev)
    dist.all_gather_into_tensor(all_digests, mine)
    digests = all_digests.view(world, -1).cpu()
    params_equal = bool((digests == digests[0]).all())

    k = min(10, len(curve))
    first, last = sum(curve[:3]) / len(curve[:3]), sum(curve[-k:]) / k
    finite = all(v == v and abs(v) != float("inf") for v in curve)
    fell = last < first * 0.999
    ok = finite and fell and params_equal
    result = {
        "test": "ddp_train", "lib": provider, "world": world, "syncbn": bool(args.syncbn),
        "steps": args.steps, "warmup": warmup, "batch": args.batch, "size": args.size,
        "precision": args.precision, "img_s": round(img_s, 2),
        "step_ms": round(1000 * elapsed / timed, 3) if timed > 0 else None,
        "peak_mib": [round(float(p), 1) for p in peaks.cpu()],
        "loss_first": round(first, 6), "loss_last": round(last, 6),
        "loss_finite": finite, "loss_fell": fell, "params_equal": params_equal,
        "param_sha256": digest.hex(), "ok": ok, "elapsed_s": round(time.time() - t_start, 1),
        "torch": torch.__version__,
    }
    if rank == 0:
        print(f"ddp_train: {img_s:.1f} images/s ({result['step_ms']} ms/step), loss "
              f"{curve[0]:.4f} -> {curve[-1]:.4f}, peak {result['peak_mib']} MiB, params equal "
              f"across ranks: {params_equal}", flush=True)
        if not ok:
            print(f"FAIL: finite {finite}, loss fell {fell}, params equal {params_equal}",
                  flush=True)
        common.report(result, args.out, saved=dict(result, loss=curve))
    dist.destroy_process_group()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
