#!/usr/bin/env python3
"""A soak of PyTorch's distributed package on whatever serves NCCL's C API in this process
(libshmddp-nccl.so when shmddp-nccl-run preloads it): collectives of every kind, dtype and size,
DDP and FSDP2 training, memory freed and reused, for a given time; every result is checked
against a reference each rank computes by itself, errors are counted per kind, never fatal.

On the GPU machine (bench/torch_soak.sh runs this with and without MPS, beside a GPU load):

    shmddp-nccl-run [--mps] python3 -m torch.distributed.run --standalone --nproc-per-node 2 \\
        bench/torch_soak.py --seconds 90
CPU dry run of the same checks on gloo (ranks started by the script itself):

    python3 bench/torch_soak.py --backend gloo --device cpu --spawn 2 --steps 6 --max-mib 0.25

Each step runs, for every dtype (float32, bfloat16, float16, int32, int64, uint8): all_reduce
with sum, avg, min, max and product (the five in flight at once), reduce (rotating root and op),
broadcast, all_gather_into_tensor, all_gather, reduce_scatter_tensor, reduce_scatter,
all_to_all_single (even and uneven splits), gather, scatter, send/recv (a ring in one
batch_isend_irecv, and pairs with blocking send and recv); then barrier, one DDP step and one
FSDP2 step. Every --resize-every steps the sizes change (each drawn log-uniformly from 1 byte
to --max-mib, odd counts half of the time, from an RNG seeded alike on every rank), the models
are rebuilt at new widths and torch.cuda.empty_cache() gives the memory back.

Exact references. Inputs are a pure function of (seed, rank, step, kind): integers in [-8, 8]
([0, 8] unsigned; [-3, 3] * world for avg; int32 and int64 scaled by 2^20+1 and 2^40+1 so the
high bytes carry data), {1, -1, 2} for product ({1, 2} unsigned). Every sum, average over a
power-of-two world, product, min and max of them is exact in every dtype, so each rank computes
every rank's inputs and the result, and compares bit for bit. What is checked: every output of
every rank, except where the call defines none (reduce: the root's result; gather: the root's).
Outputs start as a sentinel value, so an output never written is an error too; barrier is
checked through the rendezvous store (after it returns, every rank must have arrived).

DDP and FSDP2: the model (Linear-ReLU-Linear plus an Embedding added to the output, widths
drawn per resize) starts with weights in {-1, 0, 1}, sees inputs in {-1, 0, 1}, targets in
[-4, 4], a summed squared error, and steps by p -= sign(grad), clamped to [-2, 2]. Every
activation and gradient (and every partial sum of one) is then an integer below 2^20 in
magnitude (at the widths allowed, input and hidden 16, output and batch 8: |hidden| <= 34,
|output| <= 1092, |weight gradient| <= 8 * 2192 * 34 < 2^20), and an average over a
power-of-two world of at most 8 ranks a multiple of 1/8 below 2^20: float32 (24-bit
significand) holds all of them exactly, so every summation order gives the same bits (the loss
itself is not exact and is not compared). So the tolerance is zero: each rank computes every
rank's local gradient with a plain copy of the model, averages them, and the distributed
gradient (DDP's buckets, FSDP2's reduce-scatter, read back whole with full_tensor()) and the
parameters after the step must equal the reference exactly. (TF32 is switched off: it rounds
operands to 11 bits.)

--inject-error KIND corrupts one result of KIND (one element, on the last rank, before its
check) to show that the checks see it: that kind must then report exactly one error.

The checks are in torch_soak_checks.py, the calls (and what stands in for what gloo lacks) in
torch_soak_comm.py, both beside this file. Rank 0 prints one line per kind (calls made by each
rank, errors summed over the ranks, dtypes, bytes of one rank's input) and last
`soak: N calls, E errors`; --table FILE gets the same lines.
Exit status: 0 clean, 1 when any check failed, 2 on bad arguments or a crash.
"""
import argparse
import gc
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback

sys.dont_write_bytecode = True     # no __pycache__ left in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "nccl"))
import common  # noqa: E402 - bench/nccl/common.py: which library serves NCCL here
from torch_soak_comm import GLOO_NAMES  # noqa: E402 - beside this file
from torch_soak_checks import (  # noqa: E402 - beside this file
    DTYPE_NAMES, INJECTABLE, KINDS, SHORT, Soak, Trainer, draw_sizes, run_barrier, run_collectives)


class Refused(Exception):
    """A run that cannot start, with what to do instead; exit status 2."""


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--seconds", type=float, default=100.0,
                    help="run steps until this many seconds have passed (default 100)")
    ap.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: no limit)")
    ap.add_argument("--max-mib", type=float, default=32.0,
                    help="largest input of one rank, MiB (default 32)")
    ap.add_argument("--resize-every", type=int, default=3,
                    help="new sizes, new models and empty_cache() every N steps (default 3)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--inject-error", default="",
                    help="comma-separated kinds, each of which gets one corrupted result")
    ap.add_argument("--inject-step", type=int, default=1,
                    help="the first step at which --inject-error may corrupt (default 1)")
    ap.add_argument("--gloo-lacks", default="",
                    help="gloo only: comma-separated NAME:DTYPE (e.g. all_reduce.avg:int64, "
                         "broadcast:int32) treated as refused by gloo, so that their emulation "
                         "runs whatever this PyTorch's gloo serves")
    ap.add_argument("--expect-mps", choices=["on", "off"],
                    help="count an error in 'setup' unless every rank's context runs under "
                         "MPS (on) or not (off)")
    ap.add_argument("--require-shmddp", action="store_true",
                    help="count an error in 'setup' unless libshmddp-nccl.so serves NCCL here")
    ap.add_argument("--table", default="", help="rank 0 writes the table here (a new file)")
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="process-group timeout, seconds (a hung collective fails after it)")
    ap.add_argument("--spawn", type=int, default=0,
                    help="start N ranks here (without torchrun), rendezvous through a file")
    ap.add_argument("--init-file", default="", help=argparse.SUPPRESS)
    ap.add_argument("--gpu-load", action="store_true",
                    help="instead: a GPU load (float32 matmuls) until SIGTERM or SIGINT")
    a = ap.parse_args(argv)
    bad = []
    if a.seconds <= 0 and a.steps <= 0:
        bad.append("give --seconds or --steps a positive value")
    if not 0 < a.max_mib <= 1024:
        bad.append(f"--max-mib {a.max_mib}: give a size in (0, 1024]")
    if a.resize_every < 1:
        bad.append("--resize-every must be 1 or more")
    if a.backend == "nccl" and a.device != "cuda":
        bad.append("--backend nccl needs --device cuda")
    a.inject = [k for k in a.inject_error.split(",") if k]
    for k in a.inject:
        if k not in INJECTABLE:
            bad.append(f"--inject-error {k}: not a kind; kinds: {', '.join(INJECTABLE)}")
    a.lacks = []
    for item in (x for x in a.gloo_lacks.split(",") if x):
        name, _, dt = item.partition(":")
        if name not in GLOO_NAMES or dt not in DTYPE_NAMES:
            bad.append(f"--gloo-lacks {item}: give NAME:DTYPE, NAME one of "
                       f"{', '.join(GLOO_NAMES)}, DTYPE one of {', '.join(DTYPE_NAMES)}")
        a.lacks.append((name, dt))
    if a.lacks and a.backend != "gloo":
        bad.append("--gloo-lacks needs --backend gloo")
    if a.table and (os.path.lexists(a.table) or not os.path.isdir(os.path.dirname(a.table) or ".")):
        bad.append(f"--table {a.table}: give a new file in an existing folder")
    if a.spawn not in (0, 2, 4, 8):
        bad.append(f"--spawn {a.spawn}: give 2, 4 or 8 ranks (averages are exact over a "
                   "power-of-two world)")
    if bad:
        ap.error("; ".join(bad))
    return a


def fsdp2_api(torch):
    """(fully_shard, init_device_mesh) or (None, why)."""
    try:
        from torch.distributed.fsdp import fully_shard
    except Exception:
        try:
            from torch.distributed._composable.fsdp import fully_shard
        except Exception as e:
            return None, f"no fully_shard in PyTorch {torch.__version__} ({type(e).__name__})"
    from torch.distributed.device_mesh import init_device_mesh
    return fully_shard, init_device_mesh


# ---------------------------------------------------------------- set-up and the loop
def mps_enabled(dev):
    """Whether the driver runs this process's context under MPS (CU_DEVICE_ATTRIBUTE_MPS_ENABLED,
    133), or None where that cannot be asked."""
    import ctypes
    try:
        cu = ctypes.CDLL("libcuda.so.1")
        v = ctypes.c_int()
        if cu.cuDeviceGetAttribute(ctypes.byref(v), 133, dev.index) != 0:
            return None
        return bool(v.value)
    except OSError:
        return None


def init(args):
    import torch
    import torch.distributed as dist
    from datetime import timedelta

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", str(rank)))
    if world < 2 or world & (world - 1):
        raise Refused(f"{world} ranks: run 2, 4 or 8 (averages are exact over a power-of-two "
                      "world); under torchrun: --nproc-per-node 2")
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise Refused("no CUDA device here; on the CPU: --backend gloo --device cpu")
        dev = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        torch.backends.cuda.matmul.allow_tf32 = False
    else:
        dev = torch.device("cpu")
    torch.set_float32_matmul_precision("highest")
    kw = {"timeout": timedelta(seconds=args.timeout)}
    if args.init_file:
        kw.update(init_method="file://" + args.init_file, rank=rank, world_size=world)
    if args.backend == "nccl":
        import inspect
        if "device_id" in inspect.signature(dist.init_process_group).parameters:
            kw["device_id"] = dev
    dist.init_process_group(args.backend, **kw)
    return torch, dist, rank, world, dev


def describe_rank(S, torch):
    info = {"rank": S.rank, "device": str(S.dev), "provider": None, "mps": None,
            "alloc": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "(default)")}
    if S.dev.type == "cuda":
        info["device"] += " " + torch.cuda.get_device_name(S.dev)
        info["mps"] = mps_enabled(S.dev)
    if S.args.backend == "nccl":
        info["provider"] = common.nccl_provider()
    return info


def check_setup(S, info):
    """--expect-mps and --require-shmddp, counted in 'setup'."""
    pairs = []
    t = S.torch
    if S.args.expect_mps:
        want = S.args.expect_mps == "on"
        if info["mps"] is None:
            raise RuntimeError("cannot ask the driver whether this context runs under MPS")
        pairs.append((f"MPS {'on' if info['mps'] else 'off'}, expected {S.args.expect_mps}",
                      t.tensor([int(info["mps"])]), t.tensor([int(want)])))
    if S.args.require_shmddp:
        pairs.append((f"NCCL served by {info['provider']}, not shmddp",
                      t.tensor([int(info["provider"] == "shmddp")]), t.tensor([1])))
    return pairs


def soak(args):
    torch, dist, rank, world, dev = init(args)
    S = Soak(torch, dist, args, rank, world, dev)
    ctrl = dist.new_group(backend="gloo")   # the stop flag and the final counts
    store = dist.distributed_c10d._get_default_store()
    header = [f"# torch_soak: backend {args.backend}, device {args.device}, {world} ranks, "
              f"PyTorch {torch.__version__}, seed {args.seed}, "
              + (f"{args.seconds:g} s" if args.seconds > 0 else "")
              + (f" (at most {args.steps} steps)" if args.steps else "")
              + f", inputs up to {args.max_mib:g} MiB, new sizes every {args.resize_every} steps"]
    if args.backend == "gloo":
        S.comm.probe(dev, S.dtypes)
        for name, dt in args.lacks:
            S.comm.assume_lacking(name, getattr(torch, dt))
        header += ["# " + line for line in S.comm.lacking_lines()]
    fully_shard, mesh_fn = fsdp2_api(torch)
    fsdp_why = None
    if fully_shard is None:
        fsdp_why = mesh_fn
    info = describe_rank(S, torch)
    S.call("setup", None, 0, lambda: check_setup(S, info))
    infos = [None] * world
    dist.all_gather_object(infos, info, group=ctrl)
    for i in infos:
        header.append(f"# rank {i['rank']}: {i['device']}"
                      + (f", NCCL served by {i['provider']}" if i["provider"] else "")
                      + ("" if i["mps"] is None else f", MPS {'on' if i['mps'] else 'off'}")
                      + (f", PYTORCH_CUDA_ALLOC_CONF={i['alloc']}" if dev.type == "cuda" else ""))
    mesh = None
    if fully_shard is not None:
        try:
            mesh = mesh_fn(dev.type, (world,))
        except Exception as e:
            fully_shard, fsdp_why = None, f"init_device_mesh failed: {e}"
    if fully_shard is None:
        if args.backend == "nccl":
            S.error("setup", f"FSDP2 is required on the GPU: {fsdp_why}")
        header.append(f"# fsdp2: skipped: {fsdp_why}"
                      + (" (so --inject-error fsdp2 injects nothing)" if "fsdp2" in args.inject
                         else ""))
        S.inject.discard("fsdp2")
    if rank == 0:
        print("\n".join(header), flush=True)

    t0 = time.time()
    epoch = -1
    trainers = {}
    while True:
        stop = torch.tensor([0], dtype=torch.int32)
        if rank == 0:
            stop[0] = int((args.steps and S.step >= args.steps)
                          or (args.seconds > 0 and time.time() - t0 >= args.seconds))
        dist.broadcast(stop, 0, group=ctrl)
        if stop.item():
            break
        if S.step // args.resize_every != epoch:
            epoch = S.step // args.resize_every
            trainers.clear()
            gc.collect()    # DDP's reducer holds cycles: free the old models before empty_cache
            if dev.type == "cuda":
                torch.cuda.empty_cache()
            sizes, dims = draw_sizes(args, epoch, world, S.dtypes, S.elem)
            for kind in ("ddp", "fsdp2"):
                if kind == "fsdp2" and fully_shard is None:
                    continue

                def build(kind=kind):
                    trainers[kind] = Trainer(S, dims, epoch, kind, fully_shard, mesh)
                    return [(f"{n} at start", p.detach() if not hasattr(p, "full_tensor")
                             else p.full_tensor(), q) for n, p, q in
                            zip(trainers[kind].names, trainers[kind].params,
                                trainers[kind].ref.parameters())]
                S.call(kind, None, 0, build)
        run_collectives(S, sizes)
        run_barrier(S, store)
        for kind, tr in trainers.items():
            S.call(kind, None, 0, tr.step)
        S.step += 1
        if dev.type == "cuda":
            torch.cuda.synchronize()
    elapsed = time.time() - t0
    trainers.clear()
    for kind in sorted(S.inject):
        S.error("setup", f"--inject-error {kind}: no result of {kind} was checked on rank "
                f"{rank} from step {args.inject_step} on: nothing was injected")

    mine = {k: dict(v, dtypes=sorted(v["dtypes"])) for k, v in S.stats.items()}
    every = [None] * world
    dist.all_gather_object(every, mine, group=ctrl)
    calls = errors = 0
    lines = []
    for k in KINDS:
        c = every[0][k]["calls"]
        e = sum(s[k]["errors"] for s in every)
        if any(s[k]["calls"] != c for s in every):
            e += 1
            lines.append(f"# {k}: the ranks made different numbers of calls: "
                         f"{[s[k]['calls'] for s in every]}")
        dts = sorted(set().union(*[s[k]["dtypes"] for s in every]),
                     key=lambda d: list(SHORT.values()).index(d))
        lo, hi = every[0][k]["min"], every[0][k]["max"]
        lines.append(f"{k:<26} {c:>8} {e:>7}  {','.join(dts) or '-':<24} "
                     + (f"{lo}..{hi}" if hi else "-"))
        calls += c
        errors += e
    table = header + [f"# {S.step} steps in {elapsed:.1f} s; calls: each rank's; errors: "
                      "failed checks summed over the ranks; bytes: one rank's input",
                      f"# {'kind':<24} {'calls':>8} {'errors':>7}  {'dtypes':<24} bytes"] + lines
    table.append(f"soak: {calls} calls, {errors} errors")
    if rank == 0:
        print("\n".join(table[len(header):]), flush=True)
        if args.table:
            fd = os.open(args.table, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "w") as f:
                f.write("\n".join(table) + "\n")
    dist.barrier(group=ctrl)
    dist.destroy_process_group()
    return 1 if errors else 0


# ---------------------------------------------------------------- launchers and the GPU load
def spawn(args, argv):
    """--spawn N: N ranks of this script, rendezvous through a file in a private folder; a rank
    that crashes (exit status above 1, or a signal) ends the others. -> the worst exit status."""
    folder = tempfile.mkdtemp(prefix="torch_soak.")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # the finally below ends the ranks
    rest = []
    skip = False
    for a in argv:      # this command line without --spawn N / --spawn=N
        if skip:
            skip = False
        elif a == "--spawn":
            skip = True
        elif not a.startswith("--spawn="):
            rest.append(a)
    procs = []
    try:
        for r in range(args.spawn):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(args.spawn), LOCAL_RANK=str(r))
            procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)] + rest
                                          + ["--init-file", os.path.join(folder, "rendezvous")],
                                          env=env))
        worst = 0
        left = {p.pid: p for p in procs}
        while left:
            pid, status = os.wait()
            p = left.pop(pid, None)
            if p is None:
                continue
            p.returncode = os.waitstatus_to_exitcode(status)
            rc = p.returncode if p.returncode >= 0 else 128 - p.returncode
            worst = max(worst, rc)
            if rc > 1:
                for q in left.values():
                    q.terminate()
        return worst
    finally:
        for p in procs:
            if p.returncode is None:
                p.kill()
                p.wait()
        for f in os.listdir(folder):
            os.unlink(os.path.join(folder, f))
        os.rmdir(folder)


def gpu_load():
    """Float32 matmuls (2048 x 2048) on the GPU until SIGTERM or SIGINT; prints `gpu-load:
    ready` once the first has run, and at the end how many ran."""
    import torch
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    dev = torch.device("cuda", 0)
    a = torch.randn(2048, 2048, device=dev)
    b = torch.randn(2048, 2048, device=dev)
    c = a @ b
    torch.cuda.synchronize()
    print(f"gpu-load: ready on {torch.cuda.get_device_name(dev)}", flush=True)
    n, t0 = 1, time.time()
    while not stop:
        c = a @ b
        n += 1
        if n % 16 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    del c
    print(f"gpu-load: {n} matmuls of 2048x2048 float32 in {time.time() - t0:.1f} s", flush=True)
    return 0


def main(argv):
    args = parse_args(argv)
    if args.gpu_load:
        return gpu_load()
    if args.spawn:
        return spawn(args, argv)
    try:
        return soak(args)
    except Refused as e:
        print(f"torch_soak: {e}", file=sys.stderr, flush=True)
        return 2
    except Exception:
        traceback.print_exc()
        sys.stdout.flush()
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
