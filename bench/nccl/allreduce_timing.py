#!/usr/bin/env python3
"""Latency and bandwidth of torch.distributed.all_reduce (float32 SUM) from 4 B to 1 GiB,
through whatever library serves NCCL's C API (real NCCL, or libshmddp-nccl.so when preloaded).

    python3 -m torch.distributed.run --standalone --nproc-per-node 2 allreduce_timing.py --out t.json

Per size: one checked call (inputs from seeded CUDA generators, so every rank can rebuild the
others' and verify the sum), 5 warm-up calls, then 20-100 timed calls (fewer for large sizes).
Each call is bracketed by CUDA events on the caller's stream, which is what a PyTorch user
waits for (the launch, the cross-stream hand-off, the collective); the median is reported,
and the mean of a back-to-back loop (one event pair around all calls) next to it.
busbw = 2 (n-1)/n * bytes / time, the nccl-tests convention. Prints a table and
`RESULT {json}` (rank 0); exit status 1 when a checked result is wrong.
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402 - bench/nccl/common.py, found next to this script

SIZES = [4, 64, 1 << 10, 16 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20,
         1 << 30]


def iterations(nbytes):
    if nbytes <= 1 << 20:
        return 100
    if nbytes <= 16 << 20:
        return 50
    if nbytes <= 64 << 20:
        return 30
    return 20


def human(n):
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n // k} {unit}"
    return f"{n} B"


def rand(n, seed, dev):
    g = torch.Generator(device=dev).manual_seed(seed)
    return torch.rand(n, device=dev, generator=g)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--sizes", default=",".join(str(s) for s in SIZES), help="bytes")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--timeout", type=int, default=120)
    args = ap.parse_args()
    t_start = time.time()

    dev, rank, world = common.init_process_group(args.timeout)
    provider = common.nccl_provider()
    if rank == 0:
        print(f"allreduce_timing: world {world}, NCCL API served by {provider}", flush=True)
        print(f"{'bytes':>10} {'iters':>5} {'median_us':>10} {'mean_us':>10} {'algbw_GB/s':>10} "
              f"{'busbw_GB/s':>10}  check", flush=True)

    rows, failures = [], 0
    for nbytes in (int(s) for s in args.sizes.split(",")):
        n = max(1, nbytes // 4)
        # Check once: every rank rebuilds all inputs from their seeds.
        x = rand(n, 1000 + rank, dev)
        dist.all_reduce(x)
        want = rand(n, 1000, dev)
        for r in range(1, world):
            want += rand(n, 1000 + r, dev)
        ok_here = bool(torch.allclose(x, want, rtol=1e-6 * world, atol=1e-6))
        del want

        iters = iterations(nbytes)
        for _ in range(args.warmup):
            dist.all_reduce(x)
        stream = torch.cuda.current_stream(dev)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        torch.cuda.synchronize(dev)
        dist.barrier()
        for i in range(iters):
            starts[i].record(stream)
            dist.all_reduce(x)
            ends[i].record(stream)
        torch.cuda.synchronize(dev)
        per_call = [s.elapsed_time(e) * 1000 for s, e in zip(starts, ends)]
        # Back-to-back: the rate when calls queue up without gaps.
        b0, b1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        dist.barrier()
        b0.record(stream)
        for _ in range(iters):
            dist.all_reduce(x)
        b1.record(stream)
        torch.cuda.synchronize(dev)
        mean_us = b0.elapsed_time(b1) * 1000 / iters
        # The slowest rank defines the collective's time (max of the medians); the check holds
        # only if it held on every rank.
        med = torch.tensor([statistics.median(per_call), mean_us, 0.0 if ok_here else 1.0],
                           device=dev, dtype=torch.float64)
        dist.all_reduce(med, op=dist.ReduceOp.MAX)
        median_us, mean_us, ok = float(med[0]), float(med[1]), float(med[2]) == 0.0
        failures += 0 if ok else 1
        bytes_ = n * 4
        algbw = bytes_ / (median_us * 1e-6) / 1e9
        busbw = algbw * 2 * (world - 1) / world
        row = {"bytes": bytes_, "iters": iters, "median_us": round(median_us, 2),
               "mean_us": round(mean_us, 2), "algbw_GBps": round(algbw, 3),
               "busbw_GBps": round(busbw, 3), "check": ok}
        rows.append(row)
        if rank == 0:
            print(f"{human(bytes_):>10} {iters:5d} {median_us:10.1f} {mean_us:10.1f} "
                  f"{algbw:10.2f} {busbw:10.2f}  {'ok' if ok else 'WRONG'}", flush=True)
        del x

    result = {"test": "allreduce_timing", "lib": provider, "world": world, "rows": rows,
              "failures": failures, "elapsed_s": round(time.time() - t_start, 1),
              "torch": torch.__version__}
    if rank == 0:
        common.report(result, args.out)
    dist.destroy_process_group()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
