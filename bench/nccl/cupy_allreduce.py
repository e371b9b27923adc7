#!/usr/bin/env python3
"""CuPy's NCCL binding (cupy.cuda.nccl) across 2 processes, through whatever library serves
NCCL's C API (run with LD_PRELOAD=libshmddp-nccl.so to test shmddp):

    [LD_PRELOAD=libshmddp-nccl.so] python3 cupy_allreduce.py [--out c.json]

Rank 0 makes the unique id (get_unique_id) and passes it to rank 1 through a pipe; both
create an NcclCommunicator on device rank % device_count and run: the float32 SUM all-reduce
of 1M elements (the main check), then broadcast, bcast, reduce, all-gather, reduce-scatter and a
grouped send/recv, grouped send/recv to every rank with oneself included (uneven sizes), each
checked exactly (the data are multiples of 1/8), and an unknown datatype refused by the call. Also reports
nccl.get_version() and the build version. Prints `RESULT {json}`; exit status 0 when every
check passed.
"""
import argparse
import multiprocessing as mp
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402 - bench/nccl/common.py, found next to this script

N = 1 << 20


def worker(rank, world, conns, results):
    out = {"rank": rank, "checks": 0, "failures": [], "info": {}}
    try:
        import cupy as cp
        from cupy.cuda import nccl
        if not getattr(nccl, "available", False):
            # cupy.cuda.nccl swallows the import error: import the extension to show it.
            try:
                import cupy_backends.cuda.libs.nccl  # noqa: F401
                why = "unknown"
            except ImportError as e:
                why = str(e)
            raise RuntimeError(f"cupy.cuda.nccl is not available: {why}")
        dev = rank % cp.cuda.runtime.getDeviceCount()
        cp.cuda.Device(dev).use()
        out["info"].update(version=nccl.get_version(), build_version=nccl.get_build_version(),
                           device=dev, lib=common.nccl_provider(), cupy=cp.__version__)
        if rank == 0:
            uid = nccl.get_unique_id()
            for c in conns[1:]:
                c.send(uid)
        else:
            uid = conns[rank].recv()
        comm = nccl.NcclCommunicator(world, uid, rank)
        stream = cp.cuda.Stream(non_blocking=True)
        # Every CuPy kernel on the same stream as the NCCL calls: a non-blocking stream does not
        # wait for the legacy default stream.
        with stream:
            out["info"].update(comm_size=comm.size(), comm_rank=comm.rank_id(),
                               comm_device=comm.device_id())

            def data(r, n, salt):
                i = cp.arange(n, dtype=cp.int64)
                return (((i * 2654435761 + r * 40503 + salt * 977) % 17 - 8) / 8).astype(cp.float32)

            def check(name, got, want):
                stream.synchronize()
                out["checks"] += 1
                g, w = cp.asnumpy(got), cp.asnumpy(want)
                if g.shape != w.shape or not (g == w).all():
                    bad = int((g != w).sum()) if g.shape == w.shape else -1
                    out["failures"].append(f"rank {rank}: {name}: {bad} elements differ")

            F32 = nccl.NCCL_FLOAT32
            mine = data(rank, N, 1)
            want = sum(data(r, N, 1) for r in range(world))

            # The main check: all-reduce float32 SUM of 1M elements.
            recv = cp.full(N, cp.nan, dtype=cp.float32)
            t0 = time.time()
            comm.allReduce(mine.data.ptr, recv.data.ptr, N, F32, nccl.NCCL_SUM, stream.ptr)
            check("allReduce/float32/SUM", recv, want)
            out["info"]["allreduce_ms"] = round(1000 * (time.time() - t0), 3)
            # In place, and MAX.
            buf = mine.copy()
            comm.allReduce(buf.data.ptr, buf.data.ptr, N, F32, nccl.NCCL_MAX, stream.ptr)
            want_max = data(0, N, 1)
            for r in range(1, world):
                want_max = cp.maximum(want_max, data(r, N, 1))
            check("allReduce/float32/MAX/in-place", buf, want_max)

            root = world - 1
            x = data(rank, N, 2)
            recv = cp.full(N, cp.nan, dtype=cp.float32)
            comm.broadcast(x.data.ptr, recv.data.ptr, N, F32, root, stream.ptr)
            check("broadcast", recv, data(root, N, 2))
            x = data(rank, N, 3)
            comm.bcast(x.data.ptr, N, F32, 0, stream.ptr)
            check("bcast", x, data(0, N, 3))

            x = data(rank, N, 4)
            recv = cp.full(N, cp.nan, dtype=cp.float32)
            comm.reduce(x.data.ptr, recv.data.ptr, N, F32, nccl.NCCL_SUM, 0, stream.ptr)
            if rank == 0:
                check("reduce/root0", recv, sum(data(r, N, 4) for r in range(world)))
            stream.synchronize()

            x = data(rank, N, 5)
            recv = cp.full(N * world, cp.nan, dtype=cp.float32)
            comm.allGather(x.data.ptr, recv.data.ptr, N, F32, stream.ptr)
            check("allGather", recv, cp.concatenate([data(r, N, 5) for r in range(world)]))

            x = data(rank, N * world, 6)
            recv = cp.full(N, cp.nan, dtype=cp.float32)
            comm.reduceScatter(x.data.ptr, recv.data.ptr, N, F32, nccl.NCCL_SUM, stream.ptr)
            full = sum(data(r, N * world, 6) for r in range(world))
            check("reduceScatter", recv, full[rank * N:(rank + 1) * N])

            if world > 1:
                nxt, prv = (rank + 1) % world, (rank - 1) % world
                x = data(rank, N, 7)
                recv = cp.full(N, cp.nan, dtype=cp.float32)
                nccl.groupStart()
                comm.send(x.data.ptr, N, F32, nxt, stream.ptr)
                comm.recv(recv.data.ptr, N, F32, prv, stream.ptr)
                nccl.groupEnd()
                check("group send/recv", recv, data(prv, N, 7))

            # To every rank, oneself included, uneven sizes, in one group: the pattern of
            # PyTorch's uneven all_to_all, gather and scatter (rank s sends size(s, d) to d).
            def size(s, d):
                return 1000 + 7 * s + d
            x = data(rank, sum(size(rank, d) for d in range(world)), 8)
            recv = cp.full(sum(size(s, rank) for s in range(world)), cp.nan, dtype=cp.float32)
            nccl.groupStart()
            so = ro = 0
            for q in range(world):
                comm.send(x[so:].data.ptr, size(rank, q), F32, q, stream.ptr)
                comm.recv(recv[ro:].data.ptr, size(q, rank), F32, q, stream.ptr)
                so += size(rank, q)
                ro += size(q, rank)
            nccl.groupEnd()
            parts = []
            for s in range(world):
                off = sum(size(s, d) for d in range(rank))
                parts.append(data(s, sum(size(s, d) for d in range(world)), 8)[off:off + size(s, rank)])
            check("grouped send/recv to every rank, oneself included", recv, cp.concatenate(parts))

            # A refused argument is returned by the call itself (an unknown datatype).
            out["checks"] += 1
            try:
                comm.allReduce(mine.data.ptr, recv.data.ptr, 16, 99, nccl.NCCL_SUM, stream.ptr)
                out["failures"].append(f"rank {rank}: an unknown datatype was accepted")
            except nccl.NcclError as e:
                if getattr(e, "status", None) != 4:  # ncclInvalidArgument
                    out["failures"].append(f"rank {rank}: unknown datatype: {e}")

            stream.synchronize()
            comm.destroy()
    except Exception as e:  # noqa: BLE001 - any error is a failure to report
        out["failures"].append(f"rank {rank}: {type(e).__name__}: {e}")
        out["traceback"] = traceback.format_exc()
    results.put(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=120)
    args = ap.parse_args()
    t_start = time.time()
    ctx = mp.get_context("spawn")   # fresh processes: no CUDA state inherited from the parent
    results = ctx.Queue()
    pipes = [ctx.Pipe() for _ in range(args.world)]
    conns = [None] + [p[0] for p in pipes[1:]]          # rank 0 sends on these ...
    procs = []
    for r in range(args.world):
        mine = conns if r == 0 else [None] * args.world
        if r > 0:
            mine = list(mine)
            mine[r] = pipes[r][1]                        # ... rank r receives on its end
        p = ctx.Process(target=worker, args=(r, args.world, mine, results))
        p.start()
        procs.append(p)

    outs, deadline = {}, time.time() + args.timeout
    while len(outs) < args.world and time.time() < deadline:
        try:
            o = results.get(timeout=1)
            outs[o["rank"]] = o
        except Exception:  # noqa: BLE001 - queue.Empty: keep waiting while they live
            if all(not p.is_alive() for p in procs) and results.empty():
                break
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join()

    failures = [f for o in outs.values() for f in o["failures"]]
    for r in range(args.world):
        if r not in outs:
            failures.append(f"rank {r}: no result (exit code {procs[r].exitcode}, "
                            f"timeout {args.timeout} s)")
    info = outs.get(0, {}).get("info", {})
    result = {"test": "cupy_allreduce", "world": args.world,
              "checks": sum(o["checks"] for o in outs.values()), "failures": len(failures),
              "version": info.get("version"), "build_version": info.get("build_version"),
              "lib": info.get("lib"), "cupy": info.get("cupy"),
              "allreduce_ms": info.get("allreduce_ms"),
              "elapsed_s": round(time.time() - t_start, 1), "ok": not failures}
    print(f"cupy_allreduce: NCCL API served by {result['lib']}, get_version() = "
          f"{result['version']} (built against {result['build_version']}), "
          f"{result['checks']} checks, {len(failures)} failures")
    for f in failures[:20]:
        print(f"FAIL {f}")
    for o in outs.values():
        if "traceback" in o:
            print(o["traceback"])
    common.report(result, args.out, saved=dict(result, failure_details=failures[:20]))
    sys.exit(0 if not failures else 1)


if __name__ == "__main__":
    main()
