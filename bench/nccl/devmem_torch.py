#!/usr/bin/env python3
"""Collectives on PyTorch's own device memory, whatever allocator PYTORCH_CUDA_ALLOC_CONF
chooses (expandable_segments:True: cuMem chunks; backend:cudaMallocAsync: a pool no other
process can map), through whatever library serves NCCL's C API in this process:

    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True LD_PRELOAD=libshmddp-nccl.so \\
      python3 -m torch.distributed.run --standalone --nproc-per-node 2 devmem_torch.py

Each round runs all_reduce, all_gather_into_tensor, reduce_scatter_tensor and broadcast at 1 KiB,
6 MB and 46 MB (the last crosses the 20 MiB chunks of an expandable segment), checked exactly
(small integers); every fifth round frees everything and empties the cache, so new tensors land
in new or re-mapped memory and stale mappings would read stale data. Prints `RESULT {json}`
(rank 0); exit status 1 on any wrong element.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402 - bench/nccl/common.py, found next to this script


def check(name, got, want, failures):
    bad = int((got != want).sum().item())
    if bad:
        failures.append(f"{name}: {bad} wrong")


def one_round(rnd, dev, rank, world, failures):
    for numel in (256, 1_500_000, 11_500_000):
        tag = f"round {rnd}, {numel * 4} bytes"
        x = torch.full((numel,), float(rank + 1 + rnd), device=dev)
        dist.all_reduce(x)
        check(f"all_reduce {tag}", x, float(sum(r + 1 + rnd for r in range(world))), failures)
        out = torch.empty(world * numel, device=dev)
        dist.all_gather_into_tensor(out, torch.full((numel,), float(rank * 3 + rnd), device=dev))
        want = torch.arange(world, device=dev, dtype=torch.float32).repeat_interleave(numel) * 3 + rnd
        check(f"all_gather {tag}", out, want, failures)
        inp = torch.arange(world, device=dev, dtype=torch.float32).repeat_interleave(numel) + rank
        red = torch.empty(numel, device=dev)
        dist.reduce_scatter_tensor(red, inp)
        check(f"reduce_scatter {tag}", red, float(rank * world + sum(range(world))), failures)
        root = rnd % world
        b = torch.full((numel,), float(rank * 7 + 1), device=dev)
        dist.broadcast(b, src=root)
        check(f"broadcast {tag}", b, float(root * 7 + 1), failures)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    t0 = time.time()
    dev, rank, world = common.init_process_group(120)
    failures = []
    for rnd in range(args.rounds):
        one_round(rnd, dev, rank, world, failures)
        if rnd % 5 == 4:
            torch.cuda.synchronize(dev)
            torch.cuda.empty_cache()
    torch.cuda.synchronize(dev)
    flag = torch.tensor([len(failures)], device=dev, dtype=torch.int64)
    dist.all_reduce(flag)
    ok = int(flag.item()) == 0
    result = {"test": "devmem_torch", "lib": common.nccl_provider(), "world": world,
              "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
              "rounds": args.rounds, "ok": ok, "failures": failures[:5],
              "elapsed_s": round(time.time() - t0, 1)}
    if rank == 0:
        print("RESULT " + json.dumps(result), flush=True)
        if args.out:
            with open(args.out, "w") as f:
                json.dump(result, f)
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
