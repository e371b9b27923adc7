#!/usr/bin/env python3
"""A collective that waits for a busy (not dead) rank, as NCCL does: rank 0 calls an all-reduce
at once; the other ranks are busy on the host for --busy seconds first (rank 0 evaluating or
saving while the others wait is the everyday case, in reverse). NCCL has no timeout of its own,
so the call must wait and then complete with the right sum; only the client's watchdog (here
set to --watchdog seconds, far above --busy) may give up.

    python3 -m torch.distributed.run --standalone --nproc-per-node 2 busy_peer.py --busy 400

Prints one line `RESULT {json}` (rank 0): how long rank 0 waited, and whether the sum was right.
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--busy", type=float, default=400)
    ap.add_argument("--watchdog", type=float, default=1800)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    dev, rank, world = common.init_process_group(args.watchdog)
    x = torch.full((1 << 20,), float(rank + 1), device=dev)
    dist.all_reduce(x)  # everyone present: warm
    torch.cuda.synchronize()
    if rank != 0:
        time.sleep(args.busy)  # busy on the host, alive
    y = torch.full((1 << 20,), float(rank + 1), device=dev)
    t0 = time.time()
    dist.all_reduce(y)
    torch.cuda.synchronize()
    waited = time.time() - t0
    want = world * (world + 1) / 2
    ok = bool(torch.all(y == want).item())
    res = {"provider": common.nccl_provider(), "world": world, "busy_s": args.busy,
           "rank0_waited_s": round(waited, 1), "sum_ok": ok}
    flags = torch.tensor([0 if ok else 1], device=dev)
    dist.all_reduce(flags)
    res["failed_ranks"] = int(flags.item())
    if rank == 0:
        common.report(res, args.out)
    dist.destroy_process_group()
    sys.exit(0 if ok and res["failed_ranks"] == 0 and (rank != 0 or waited >= args.busy * 0.9) else 1)


if __name__ == "__main__":
    main()
