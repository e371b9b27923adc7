#!/usr/bin/env python3
"""PyTorch anchor for the training benchmarks (bench/README.md): the reference U-Net (widths
64..1024, conv3x3 no bias + BN + ReLU x2 per level, 2x2 max-pool, 2x2 stride-2 transposed conv,
skip concat, 1x1 head, per-pixel softmax cross-entropy), SGD momentum 0.9, batch per GPU, random
inputs. Prints one line per configuration:  torch <mode> gpus=N syncbn=0|1 prec=... img_s=... peak_mib=...
(max_memory_allocated) reserved_mib=... (max_memory_reserved) device_used_mib=... (the device's used
memory at the end, CUDA context included, as NVML counts it) peak_scope=from-step-2.
peak_scope: both maxima cover every step from the second on, the timed ones included: the
allocator's statistics are reset once, after the first step (and its cache emptied, so that
compilation and autotuning buffers are not counted), never after the warm-up. A compiled model's
CUDA graphs are recorded in the steps after the first; their private memory pool is allocated
there, so it is in the peak (a reset after the warm-up left only the replays' few hundred MiB).
Modes: single GPU, DDP over N GPUs (NCCL), DDP + SyncBatchNorm. Run it on the same machine, in the
same script run, as shmddp's own benchmark and report ratios.
--compile MODE: the model through torch.compile (default, reduce-overhead, max-autotune,
max-autotune-no-cudagraphs; single GPU). The compilation (the first step, and inductor's
autotuning in it) is timed on its own (compile_s=, the first step's wall time; the second step's
too, where CUDA graphs are recorded) and excluded from img_s. --compile-cap S: give up after S
seconds of the first step (prints compile_s=timeout and exits 3), so a benchmark script can bound
max-autotune's search, which takes minutes for this model on a fresh machine."""
import argparse, os, signal, sys, time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


def block(cin, cout):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class UNet(nn.Module):
    def __init__(self, widths, cin=3, classes=4):
        super().__init__()
        self.down = nn.ModuleList()
        c = cin
        for w in widths:
            self.down.append(block(c, w))
            c = w
        self.up = nn.ModuleList()
        self.upblock = nn.ModuleList()
        for w in reversed(widths[:-1]):
            self.up.append(nn.ConvTranspose2d(c, w, 2, stride=2))
            self.upblock.append(block(2 * w, w))
            c = w
        self.head = nn.Conv2d(c, classes, 1)

    def forward(self, x):
        skips = []
        for i, b in enumerate(self.down):
            x = b(x)
            if i < len(self.down) - 1:
                skips.append(x)
                x = F.max_pool2d(x, 2)
        for up, b in zip(self.up, self.upblock):
            x = up(x)
            x = b(torch.cat([skips.pop(), x], dim=1))
        return self.head(x)


def run(rank, world, args, results):
    torch.cuda.set_device(rank)
    if world > 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        dist.init_process_group("nccl", rank=rank, world_size=world)
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(1)
    model = UNet([int(w) for w in args.widths.split(",")], classes=args.classes).cuda()
    if args.syncbn and world > 1:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    net = model
    if args.compile != "none":
        net = torch.compile(model, mode=None if args.compile == "default" else args.compile)
    g = torch.Generator(device="cuda").manual_seed(rank)
    x = torch.randn(args.batch, 3, args.size, args.size, device="cuda", generator=g).to(memory_format=fmt)
    y = torch.randint(0, args.classes, (args.batch, args.size, args.size), device="cuda", generator=g)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}[args.precision]
    scaler = torch.amp.GradScaler(enabled=args.precision == "fp16")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = F.cross_entropy(net(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    first = []  # wall seconds of the first two steps: compilation, CUDA graph recording
    if args.compile != "none" and args.compile_cap > 0:
        def cap(signum, frame):
            raise TimeoutError
        signal.signal(signal.SIGALRM, cap)
        signal.alarm(args.compile_cap)
    try:
        for i in range(args.warmup):
            t = time.perf_counter()
            step()
            if i < 2:
                torch.cuda.synchronize()
                first.append(time.perf_counter() - t)
            if i == 0:  # peaks from the second step on (peak_scope in the docstring)
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
    except TimeoutError:
        print("torch single gpus=1 prec=%s compile=%s compile_s=timeout cap_s=%d" % (
            args.precision, args.compile, args.compile_cap), flush=True)
        os._exit(3)  # inductor's autotuning workers may still run: leave without waiting
    signal.alarm(0)
    if world == 1:
        results["first_s"] = first
    torch.cuda.synchronize()
    if world > 1:
        dist.barrier()
    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0.record()
    for _ in range(args.steps):
        step()
    t1.record()
    torch.cuda.synchronize()
    ms = t0.elapsed_time(t1)
    peak = torch.cuda.max_memory_allocated() / 2**20
    reserved = torch.cuda.max_memory_reserved() / 2**20
    free, total = torch.cuda.mem_get_info()  # the device as NVML sees it, CUDA context included
    results[rank] = (ms, peak, reserved, (total - free) / 2**20)
    if world > 1:
        dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--syncbn", type=int, default=0)
    ap.add_argument("--precision", default="bf16", choices=["bf16", "fp16", "fp32"])
    ap.add_argument("--channels-last", type=int, default=1)
    ap.add_argument("--widths", default="64,128,256,512,1024")
    ap.add_argument("--classes", type=int, default=4)
    ap.add_argument("--batch", type=int, default=6)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--compile", default="none",
                    choices=["none", "default", "reduce-overhead", "max-autotune",
                             "max-autotune-no-cudagraphs"])
    ap.add_argument("--compile-cap", type=int, default=0,
                    help="seconds the first (compiling) step may take; 0: no limit")
    args = ap.parse_args()
    world = args.gpus
    if args.compile != "none" and world > 1:
        ap.error("--compile is for one GPU (--gpus 1)")
    if args.steps < 1 or args.warmup < 2:
        ap.error("--steps >= 1 and --warmup >= 2 (the compiled model's first two steps are not "
                 "timed)")
    if world == 1:
        res = {}
        run(0, 1, args, res)
    else:
        manager = mp.Manager()
        res = manager.dict()
        mp.spawn(run, args=(world, args, res), nprocs=world, join=True)
    first = res.pop("first_s", None) if world == 1 else None
    ms = max(v[0] for v in res.values())
    peaks = [res[r][1] for r in sorted(res.keys())]
    img_s = args.batch * world * args.steps / (ms / 1000.0)
    mode = "single" if world == 1 else ("ddp-syncbn" if args.syncbn else "ddp")
    print(f"torch {mode} gpus={world} syncbn={args.syncbn} prec={args.precision} "
          f"channels_last={args.channels_last} compile={args.compile} "
          + (f"compile_s={first[0]:.1f} second_step_s={first[1]:.2f} "
             if first and args.compile != "none" else "")
          + f"img_s={img_s:.1f} step_ms={ms / args.steps:.3f} timed_steps={args.steps} "
          f"peak_mib={','.join(f'{p:.0f}' for p in peaks)} "
          f"reserved_mib={','.join(f'{res[r][2]:.0f}' for r in sorted(res.keys()))} "
          f"device_used_mib={','.join(f'{res[r][3]:.0f}' for r in sorted(res.keys()))} "
          f"peak_scope=from-step-2", flush=True)


if __name__ == "__main__":
    main()
