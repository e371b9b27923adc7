#!/usr/bin/env python3
"""The calls of NCCL's contract that PyTorch issues beyond the DDP path, checked against exact
CPU references, on whatever library serves NCCL's C API in this process (libshmddp-nccl.so when
it is preloaded):

  all_to_all_single, equal splits (ncclAlltoAll) and uneven splits (grouped ncclSend/ncclRecv
  to every rank, oneself included); all_to_all of tensor lists; gather; scatter;
  all_gather_into_tensor and reduce_scatter_tensor of float8_e4m3fn and float8_e5m2 tensors;
  coalesced all-reduces with PREMUL_SUM (each rank its own factor; a Python float, read on the
  host, and a device tensor, read when the collective runs), the op destroyed right after the
  calls are queued.

Run under torchrun (ranks may share a GPU: device = local_rank % device_count):

    python3 -m torch.distributed.run --standalone --nproc-per-node 3 contract.py --out c.json

Values are multiples of 1/8 (floats) or small integers, so every result is exact. Prints the
failures in detail, then one line `RESULT {json}` (rank 0). Exit status 1 on any failure.
"""
import argparse
import os
import sys
import traceback

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402 - bench/nccl/common.py, found next to this script


def vals(rank, n, salt, dtype=torch.float32):
    """Rank `rank`'s n values for test `salt`: k/8 with k in [-16, 16] (exact in every float
    type, float8_e4m3fn included: at most 4 significant bits), as float64 on the CPU."""
    i = torch.arange(n, dtype=torch.int64)
    k = torch.remainder(i * 7 + rank * 13 + salt * 5, 33) - 16
    v = k.to(torch.float64) / 8
    if dtype == torch.float8_e5m2:  # 3 significant bits: multiples of 1/4 up to 4
        v = torch.remainder(i * 3 + rank * 5 + salt, 17).to(torch.float64) / 4 - 2
    return v


class Checks:
    def __init__(self, rank, world, dev):
        self.rank, self.world, self.dev = rank, world, dev
        self.passed, self.failed, self.details, self.skipped = 0, 0, [], []

    def expect(self, name, got, want):
        got = got.detach().to("cpu", torch.float64)
        want = want.to(torch.float64)
        ok = got.shape == want.shape and bool(torch.equal(got, want))
        if ok:
            self.passed += 1
            return
        self.failed += 1
        if got.shape == want.shape:
            bad = (got != want).nonzero()
            first = bad[0].tolist() if len(bad) else []
            msg = "%s: %d of %d elements differ (first %s: %s, want %s)" % (
                name, len(bad), want.numel(), first,
                got[tuple(first)].item() if first else "?", want[tuple(first)].item() if first else "?")
        else:
            msg = "%s: shape %s, want %s" % (name, tuple(got.shape), tuple(want.shape))
        self.details.append("rank %d: %s" % (self.rank, msg))
        print("FAIL rank %d %s" % (self.rank, msg), flush=True)

    def run(self, name, fn):
        try:
            fn()
        except Exception as e:  # a refused call is a failure with its message
            self.failed += 1
            self.details.append("rank %d: %s raised %s" % (self.rank, name, e))
            print("FAIL rank %d %s raised:\n%s" % (self.rank, name, traceback.format_exc()), flush=True)


def all_to_all_single(c, uneven):
    n, me, k = c.world, c.rank, 1000
    if not uneven:
        inp = vals(me, n * k, 1).to(c.dev, torch.float32)
        out = torch.full((n * k,), -99.0, device=c.dev)
        dist.all_to_all_single(out, inp)
        want = torch.cat([vals(j, n * k, 1)[me * k:(me + 1) * k] for j in range(n)])
        c.expect("all_to_all_single equal", out, want)
        return
    # Rank s sends size(s, d) = k + 3 * s + d elements to rank d (so to itself too).
    size = lambda s, d: k + 3 * s + d  # noqa: E731
    send_sizes = [size(me, d) for d in range(n)]
    recv_sizes = [size(s, me) for s in range(n)]
    inp = vals(me, sum(send_sizes), 2).to(c.dev, torch.float32)
    out = torch.full((sum(recv_sizes),), -99.0, device=c.dev)
    dist.all_to_all_single(out, inp, output_split_sizes=recv_sizes, input_split_sizes=send_sizes)
    parts = []
    for s in range(n):
        src = vals(s, sum(size(s, d) for d in range(n)), 2)
        off = sum(size(s, d) for d in range(me))
        parts.append(src[off:off + size(s, me)])
    c.expect("all_to_all_single uneven", out, torch.cat(parts))


def all_to_all_lists(c):
    n, me = c.world, c.rank
    ins = [vals(me, 100 + 10 * d, 10 + d).to(c.dev, torch.float32) for d in range(n)]
    outs = [torch.full((100 + 10 * me,), -99.0, device=c.dev) for _ in range(n)]
    dist.all_to_all(outs, ins)
    for s in range(n):
        c.expect("all_to_all list from %d" % s, outs[s], vals(s, 100 + 10 * me, 10 + me))


def gather_scatter(c):
    n, me, k = c.world, c.rank, 777
    for root in range(n):
        t = vals(me, k, 20 + root).to(c.dev, torch.float32)
        lst = [torch.full((k,), -99.0, device=c.dev) for _ in range(n)] if me == root else None
        dist.gather(t, gather_list=lst, dst=root)
        if me == root:
            for s in range(n):
                c.expect("gather root %d from %d" % (root, s), lst[s], vals(s, k, 20 + root))
        out = torch.full((k,), -99.0, device=c.dev)
        src = [vals(root, k, 40 + d).to(c.dev, torch.float32) for d in range(n)] if me == root else None
        dist.scatter(out, scatter_list=src, src=root)
        c.expect("scatter root %d" % root, out, vals(root, k, 40 + me))


def float8(c):
    n, me, k = c.world, c.rank, 4096
    for dt in (torch.float8_e4m3fn, torch.float8_e5m2):
        name = str(dt).replace("torch.", "")
        mine = vals(me, k, 60, dt).to(torch.float32).to(dt)
        out = torch.empty(n * k, dtype=dt, device=c.dev)
        dist.all_gather_into_tensor(out, mine.to(c.dev))
        want = torch.cat([vals(s, k, 60, dt).to(torch.float32).to(dt) for s in range(n)])
        c.expect("all_gather_into_tensor %s" % name, out.to(torch.float32), want.to(torch.float32))
        # reduce_scatter: the sum over ranks in f32, rounded once to the 8-bit type.
        inp = vals(me, n * k, 61, dt).to(torch.float32).to(dt)
        out = torch.empty(k, dtype=dt, device=c.dev)
        try:
            dist.reduce_scatter_tensor(out, inp.to(c.dev), op=dist.ReduceOp.SUM)
        except (RuntimeError, TypeError) as e:
            if "loat8" not in str(e):
                raise
            # PyTorch itself refuses 8-bit reductions on some builds: say so, do not hide it.
            c.skipped.append("reduce_scatter_tensor %s refused by PyTorch: %s" % (name, e))
            print("SKIP rank %d %s" % (c.rank, c.skipped[-1]), flush=True)
            continue
        acc = sum(vals(s, n * k, 61, dt).to(torch.float32).to(dt).to(torch.float32) for s in range(n))
        want = acc[me * k:(me + 1) * k].to(dt).to(torch.float32)
        c.expect("reduce_scatter_tensor %s" % name, out.to(torch.float32), want)


def premul_coalesced(c):
    n, me, k = c.world, c.rank, 5000
    factors = [(r + 1) * 0.5 for r in range(n)]
    for residence in ("host", "device"):
        f = factors[me]
        op = dist._make_nccl_premul_sum(f if residence == "host" else
                                        torch.tensor([f], dtype=torch.float32, device=c.dev))
        ts = [vals(me, k + j, 80 + j).to(c.dev, torch.float32) for j in range(3)]
        with dist._coalescing_manager(async_ops=True) as cm:
            for t in ts:
                dist.all_reduce(t, op=op)
        cm.wait()
        for j, t in enumerate(ts):
            want = sum(factors[s] * vals(s, k + j, 80 + j) for s in range(n))
            c.expect("coalesced premul_sum (%s factor) #%d" % (residence, j), t, want)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    dev, rank, world = common.init_process_group(600)
    c = Checks(rank, world, dev)
    c.run("all_to_all_single equal", lambda: all_to_all_single(c, False))
    c.run("all_to_all_single uneven", lambda: all_to_all_single(c, True))
    c.run("all_to_all lists", lambda: all_to_all_lists(c))
    c.run("gather/scatter", lambda: gather_scatter(c))
    c.run("float8", lambda: float8(c))
    c.run("premul coalesced", lambda: premul_coalesced(c))
    torch.cuda.synchronize()
    counts = torch.tensor([c.passed, c.failed], dtype=torch.int64, device=dev)
    dist.all_reduce(counts)
    details = [None] * world
    dist.all_gather_object(details, c.details[:10])
    result = {"provider": common.nccl_provider(), "world": world, "passed": int(counts[0]),
              "failed": int(counts[1]), "skipped": len(c.skipped), "torch": torch.__version__}
    if rank == 0:
        common.report(result, args.out, dict(result, details=details))
    dist.destroy_process_group()
    sys.exit(1 if int(counts[1]) else 0)


if __name__ == "__main__":
    main()
