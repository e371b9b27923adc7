#!/usr/bin/env python3
"""ncclCommShrink through PyTorch, on whatever library serves NCCL's C API in this process
(libshmddp-nccl.so when it is preloaded): the default group, eagerly initialised, is shrunk by
every rank but the last (torch.distributed.shrink_group, which calls ncclCommShrink on the
parent's communicator), and an all-reduce on the shrunk group must sum the survivors' values.
The last rank takes no part and exits. Run under torchrun (ranks may share a GPU):

    python3 -m torch.distributed.run --standalone --nproc-per-node 3 shrink_torch.py

A PyTorch without shrink_group reports SKIP (and exits 0), naming its version. Prints one line
`RESULT {json}` (rank 0); exit status 1 on a failure.
"""
import argparse
import os
import sys
import traceback

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402 - bench/nccl/common.py, found next to this script


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    dev, rank, world = common.init_process_group(120)
    result = {"torch": torch.__version__, "provider": common.nccl_provider(), "world": world}
    shrink = getattr(dist, "shrink_group", None)
    if shrink is None or world < 2:
        result["skip"] = "this torch has no torch.distributed.shrink_group" if shrink is None else "one rank"
        if rank == 0:
            print("SKIP: " + result["skip"], flush=True)
            common.report(result, args.out)
        dist.destroy_process_group()
        return 0
    x = torch.full((1 << 20,), float(rank + 1), device=dev)
    dist.all_reduce(x)  # the parent works first
    ok = bool(torch.all(x == world * (world + 1) / 2))
    last = world - 1
    if rank != last:
        try:
            sub = shrink([last])
            y = torch.full((1 << 20,), float(rank + 1), device=dev)
            dist.all_reduce(y, group=sub)
            want = (world - 1) * world / 2
            ok = ok and bool(torch.all(y == want)) and dist.get_world_size(sub) == world - 1
            result["shrunk_size"] = dist.get_world_size(sub)
        except Exception:  # noqa: BLE001 - reported, then the run fails
            traceback.print_exc()
            ok = False
    result["ok"] = ok
    if rank == 0:
        print(("PASS" if ok else "FAIL") + ": all-reduce on the shrunk group", flush=True)
        common.report(result, args.out)
    if rank != last:
        torch.cuda.synchronize()
    os._exit(0 if ok else 1)  # the shrunk-away rank never rejoins: no collective teardown


if __name__ == "__main__":
    sys.exit(main())
