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
forward and backward value is then an integer below 2^21 in magnitude (bounds at the widths
allowed: hidden and input 16, output and batch 8) and every average over a power-of-two world
a multiple of 1/world below 2^22: float32 holds all of them exactly and every summation order
gives the same bits. So the tolerance is zero: each rank computes every rank's local gradient
with a plain copy of the model, averages them, and the distributed gradient (DDP's buckets,
FSDP2's reduce-scatter, read back whole with full_tensor()) and the parameters after the step
must equal the reference exactly. (TF32 is switched off: it rounds operands to 11 bits.)

--inject-error KIND corrupts one result of KIND (one element, on the last rank, before its
check) to show that the checks see it: that kind must then report exactly one error.

Rank 0 prints one line per kind (calls made by each rank, errors summed over the ranks, dtypes,
bytes of one rank's input) and last `soak: N calls, E errors`; --table FILE gets the same lines.
Exit status: 0 clean, 1 when any check failed, 2 on bad arguments or a crash.
"""
import argparse
import copy
import gc
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "nccl"))
import common  # noqa: E402 - bench/nccl/common.py: which library serves NCCL here

OPS = ["sum", "avg", "min", "max", "product"]
DTYPE_NAMES = ["float32", "bfloat16", "float16", "int32", "int64", "uint8"]
SHORT = {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "int32": "i32", "int64": "i64",
         "uint8": "u8"}
# Collectives of one dtype per step, in the order every rank runs them; the ones whose input is
# world chunks (or whose output is) draw their per-rank size from max_bytes / world.
COLLECTIVES = ["all_reduce", "reduce", "broadcast", "all_gather_into_tensor", "all_gather",
               "reduce_scatter_tensor", "reduce_scatter", "all_to_all_single.even",
               "all_to_all_single.uneven", "gather", "scatter", "send_recv.ring",
               "send_recv.pair"]
CHUNKED = {"all_gather_into_tensor", "all_gather", "reduce_scatter_tensor", "reduce_scatter",
           "all_to_all_single.even", "all_to_all_single.uneven", "gather", "scatter"}
KINDS = (["all_reduce." + op for op in OPS] + COLLECTIVES[1:]
         + ["barrier", "ddp", "fsdp2", "setup"])
INJECTABLE = KINDS[:-1]
MAX_DETAILS = 20
INT_SCALE = {"int32": (1 << 20) + 1, "int64": (1 << 40) + 1}
# Largest model widths: the exactness bounds in the docstring hold up to these.
MAX_IN, MAX_HIDDEN, MAX_OUT, MAX_BATCH = 16, 16, 8, 8


class Refused(Exception):
    """A run that cannot start, with what to do instead; exit status 2."""


def mix(*xs):
    """A deterministic 31-bit hash of integers (Python's hash() of str is salted per process)."""
    h = 0x2545F491
    for x in xs:
        h = ((h ^ (x & 0xFFFFFFFFFFFF)) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
        h ^= h >> 29
    return h & 0x7FFFFFFF


def salt_of(text):
    """A stable number for a name (kind, op): the bytes' sum weighted by position."""
    return sum((i + 1) * b for i, b in enumerate(text.encode()))


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description="Soak of torch.distributed on the NCCL front end (see the file's docstring).")
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
    if a.table and (os.path.lexists(a.table) or not os.path.isdir(os.path.dirname(a.table) or ".")):
        bad.append(f"--table {a.table}: give a new file in an existing folder")
    if not 0 <= a.spawn <= 8:
        bad.append("--spawn: 1 to 8 ranks")
    if bad:
        ap.error("; ".join(bad))
    return a


# ---------------------------------------------------------------- the collectives, or gloo's
class Done:
    """What an emulated asynchronous call returns: already complete."""

    def wait(self):
        return True


class Comm:
    """The default process group's collectives. Under gloo, what gloo lacks (a probe at start
    calls each collective on one element of each dtype) is emulated through what it has: a
    dtype through float32 (exact for these data), AVG through SUM, the *_tensor collectives
    through the list ones, so every check still runs on the CPU; the table's header says which
    were emulated. On NCCL nothing is emulated: every call goes to the library under test."""

    def __init__(self, torch, dist, rank, world):
        self.torch, self.dist, self.rank, self.world = torch, dist, rank, world
        self.lacks = {}     # (method, dtype) -> gloo's message

    def op(self, name):
        R = self.dist.ReduceOp
        return {"sum": R.SUM, "avg": R.AVG, "min": R.MIN, "max": R.MAX, "product": R.PRODUCT}[name]

    def _via_f32(self, key):
        """Whether key's method works on float32 (so the lacking piece is the dtype)."""
        return (key[0], self.torch.float32) not in self.lacks

    def _div(self, t):
        if t.is_floating_point():
            t.div_(self.world)
        else:
            t.copy_(self.torch.div(t, self.world, rounding_mode="trunc"))

    def all_reduce(self, t, op, async_op=False):
        key = ("all_reduce." + op, t.dtype)
        if key not in self.lacks:
            return self.dist.all_reduce(t, op=self.op(op), async_op=async_op)
        if not self._via_f32(key):
            self.all_reduce(t, "sum")
            self._div(t)
        else:
            f = t.float()
            self.all_reduce(f, op)
            t.copy_(f)
        return Done()

    def reduce(self, t, dst, op):
        key = ("reduce." + op, t.dtype)
        if key not in self.lacks:
            return self.dist.reduce(t, dst, op=self.op(op))
        if not self._via_f32(key):
            self.reduce(t, dst, "sum")
            if self.rank == dst:
                self._div(t)
        else:
            f = t.float()
            self.reduce(f, dst, op)
            t.copy_(f)

    def broadcast(self, t, src):
        if ("broadcast", t.dtype) not in self.lacks:
            return self.dist.broadcast(t, src)
        f = t.float()
        self.broadcast(f, src)
        t.copy_(f)

    def all_gather_into_tensor(self, out, inp):
        key = ("all_gather_into_tensor", inp.dtype)
        if key not in self.lacks:
            return self.dist.all_gather_into_tensor(out, inp)
        if self._via_f32(key):
            f = out.float()
            self.all_gather_into_tensor(f, inp.float())
            out.copy_(f)
        else:
            self.all_gather(list(out.chunk(self.world)), inp)

    def all_gather(self, outs, inp):
        if ("all_gather", inp.dtype) not in self.lacks:
            return self.dist.all_gather(outs, inp)
        fs = [o.float() for o in outs]
        self.all_gather(fs, inp.float())
        for o, f in zip(outs, fs):
            o.copy_(f)

    def reduce_scatter_tensor(self, out, inp, op):
        key = ("reduce_scatter_tensor." + op, inp.dtype)
        if key not in self.lacks:
            return self.dist.reduce_scatter_tensor(out, inp, op=self.op(op))
        self._reduce_scatter_emulated(key, out, inp, op)

    def reduce_scatter(self, out, inps, op):
        key = ("reduce_scatter." + op, out.dtype)
        if key not in self.lacks:
            return self.dist.reduce_scatter(out, inps, op=self.op(op))
        self._reduce_scatter_emulated(key, out, self.torch.cat(inps), op)

    def _reduce_scatter_emulated(self, key, out, whole, op):
        if self._via_f32(key):
            f = out.float()
            if key[0].startswith("reduce_scatter_tensor"):
                self.reduce_scatter_tensor(f, whole.float(), op)
            else:
                self.reduce_scatter(f, list(whole.float().chunk(self.world)), op)
            out.copy_(f)
        else:
            t = whole.clone()
            self.all_reduce(t, op)
            out.copy_(t.chunk(self.world)[self.rank])

    def all_to_all_single(self, out, inp, out_splits=None, in_splits=None):
        if ("all_to_all_single", inp.dtype) not in self.lacks:
            return self.dist.all_to_all_single(out, inp, out_splits, in_splits)
        f = out.float()
        self.all_to_all_single(f, inp.float(), out_splits, in_splits)
        out.copy_(f)

    def gather(self, t, gather_list, dst):
        if ("gather", t.dtype) not in self.lacks:
            return self.dist.gather(t, gather_list, dst=dst)
        fs = [g.float() for g in gather_list] if gather_list is not None else None
        self.gather(t.float(), fs, dst)
        for g, f in zip(gather_list or [], fs or []):
            g.copy_(f)

    def scatter(self, t, scatter_list, src):
        if ("scatter", t.dtype) not in self.lacks:
            return self.dist.scatter(t, scatter_list, src=src)
        f = t.float()
        self.scatter(f, [s.float() for s in scatter_list] if scatter_list is not None else None,
                     src)
        t.copy_(f)

    def ring(self, send, recv):
        """send to rank+1 and receive from rank-1, as one batch_isend_irecv."""
        if ("send_recv.ring", send.dtype) in self.lacks:
            f = recv.float()
            self.ring(send.float(), f)
            recv.copy_(f)
            return
        d, w = self.dist, self.world
        ops = [d.P2POp(d.isend, send, (self.rank + 1) % w),
               d.P2POp(d.irecv, recv, (self.rank - 1) % w)]
        for work in d.batch_isend_irecv(ops):
            work.wait()

    def pair(self, send, recv, peer):
        """Blocking send and recv with peer; the lower rank sends first."""
        if ("send_recv.pair", send.dtype) in self.lacks:
            f = recv.float()
            self.pair(send.float(), f, peer)
            recv.copy_(f)
            return
        if self.rank < peer:
            self.dist.send(send, peer)
            self.dist.recv(recv, peer)
        else:
            self.dist.recv(recv, peer)
            self.dist.send(send, peer)

    def probe(self, dev, dtypes):
        """gloo only: call everything once on one element per rank; what raises is noted as
        lacking (every rank raises alike: gloo refuses before it communicates)."""
        t, w = self.torch, self.world
        for dt in dtypes:
            def one():
                return t.ones(1, dtype=dt, device=dev)

            def many():
                return [one() for _ in range(w)]
            calls = {"broadcast": lambda: self.dist.broadcast(one(), 0),
                     "all_gather_into_tensor": lambda: self.dist.all_gather_into_tensor(
                         t.ones(w, dtype=dt, device=dev), one()),
                     "all_gather": lambda: self.dist.all_gather(many(), one()),
                     "all_to_all_single": lambda: self.dist.all_to_all_single(
                         t.ones(w, dtype=dt, device=dev), t.ones(w, dtype=dt, device=dev)),
                     "gather": lambda: self.dist.gather(one(), many() if self.rank == 0 else None,
                                                        dst=0),
                     "scatter": lambda: self.dist.scatter(
                         one(), many() if self.rank == 0 else None, src=0),
                     "send_recv.ring": lambda: self.ring(one(), one()),
                     "send_recv.pair": lambda: self.pair(one(), one(), self.rank ^ 1)
                     if (self.rank ^ 1) < w else None}
            for op in OPS:
                o = self.op(op)
                calls["all_reduce." + op] = lambda o=o: self.dist.all_reduce(one(), op=o)
                calls["reduce." + op] = lambda o=o: self.dist.reduce(one(), 0, op=o)
                calls["reduce_scatter_tensor." + op] = lambda o=o: self.dist.reduce_scatter_tensor(
                    one(), t.ones(w, dtype=dt, device=dev), op=o)
                calls["reduce_scatter." + op] = lambda o=o: self.dist.reduce_scatter(
                    one(), many(), op=o)
            for name, fn in calls.items():
                try:
                    fn()
                except RuntimeError as e:
                    self.lacks[(name, dt)] = str(e).strip().splitlines()[0][:120]

    def lacking_lines(self):
        """One line per refusal message of gloo: the calls and dtypes it refused."""
        by = {}
        for (name, dt), msg in self.lacks.items():
            names, dts = by.setdefault(msg, ([], []))
            if name not in names:
                names.append(name)
            d = SHORT[str(dt).replace("torch.", "")]
            if d not in dts:
                dts.append(d)
        lines = []
        for msg, (names, dts) in sorted(by.items()):
            shown = []
            for name in names:      # a collective refused with every op: named once
                base, _, op = name.partition(".")
                whole = op in OPS and all(f"{base}.{o}" in names for o in OPS)
                if (base if whole else name) not in shown:
                    shown.append(base if whole else name)
            lines.append(f"gloo refuses {', '.join(shown)} on {','.join(dts)} (\"{msg}\"): "
                         "emulated")
        return lines


# ---------------------------------------------------------------- bookkeeping and checks
class Soak:
    def __init__(self, torch, dist, args, rank, world, dev):
        self.torch, self.dist, self.args = torch, dist, args
        self.rank, self.world, self.dev = rank, world, dev
        self.comm = Comm(torch, dist, rank, world)
        self.dtypes = [getattr(torch, n) for n in DTYPE_NAMES]
        self.elem = {dt: torch.tensor([], dtype=dt).element_size() for dt in self.dtypes}
        self.stats = {k: {"calls": 0, "errors": 0, "dtypes": set(), "min": None, "max": 0}
                      for k in KINDS}
        self.details = 0
        self.step = 0
        # --inject-error: on the last rank only, from --inject-step on, the first result of
        # each named kind that this rank checks.
        self.inject = set(args.inject) if rank == world - 1 else set()
        self.notes = []

    # ---- data ----
    def data(self, n, dtype, rank, salt, op="sum"):
        """n values of rank `rank` for this step and salt: see the docstring for the ranges."""
        t = self.torch
        name = str(dtype).replace("torch.", "")
        c = mix(self.args.seed, rank, self.step, salt)
        # An odd multiplier modulo 2^32, then the high bits: no short period, so a chunk read
        # from the wrong offset or rank does not repeat the right values.
        i = t.arange(n, dtype=t.int64, device=self.dev)
        h = (((i * 2654435761 + c) & 0xFFFFFFFF) >> 11)
        unsigned = dtype == t.uint8
        if op == "product":
            table = t.tensor([1, 2] if unsigned else [1, -1, 2], dtype=t.int64, device=self.dev)
            return table[h % table.numel()].to(dtype)
        if op == "avg":
            v = (h % 4) if unsigned else (h % 7 - 3)
            v = v * self.world
        else:
            v = (h % 9) if unsigned else (h % 17 - 8)
        return (v * INT_SCALE.get(name, 1)).to(dtype)

    def sentinel(self, n, dtype):
        """An output's value before the call: outside every result's range."""
        t = self.torch
        fill = {t.uint8: 0xEE, t.int32: 0x5A5A5A5B, t.int64: 0x5A5A5A5A5A5A5A5B}.get(dtype, -777)
        return t.full((n,), fill, dtype=dtype, device=self.dev)

    def reduce_ref(self, op, xs):
        """The op over xs in rank order, in their dtype (exact for these data)."""
        t = self.torch
        acc = xs[0].clone()
        for x in xs[1:]:
            if op in ("sum", "avg"):
                acc = acc + x
            elif op == "product":
                acc = acc * x
            elif op == "min":
                acc = t.minimum(acc, x)
            else:
                acc = t.maximum(acc, x)
        if op == "avg":
            if acc.is_floating_point():
                acc = acc / self.world
            else:
                acc = t.div(acc, self.world, rounding_mode="trunc")
        return acc

    # ---- counting ----
    def call(self, kind, dtype, nbytes, fn):
        """One collective call of `kind`: fn() runs it and returns [(name, got, want)...] to
        compare on this rank (empty where this rank has no result). A raise is an error."""
        s = self.stats[kind]
        s["calls"] += 1
        if dtype is not None:
            s["dtypes"].add(SHORT[str(dtype).replace("torch.", "")])
        s["min"] = nbytes if s["min"] is None else min(s["min"], nbytes)
        s["max"] = max(s["max"], nbytes)
        what = f"step {self.step} {kind}" + (f" {str(dtype).replace('torch.', '')}" if dtype else "")
        try:
            pairs = fn()
        except Exception as e:      # counted, and the soak goes on
            self.error(kind, f"{what}: raised {type(e).__name__}: {str(e).strip()[:300]}",
                       traceback.format_exc())
            return
        self.compare(kind, what, pairs)

    def compare(self, kind, what, pairs):
        t = self.torch
        bad = []
        for name, got, want in pairs:
            if kind in self.inject and self.step >= self.args.inject_step and got.numel():
                self.inject.discard(kind)
                got = got.clone()
                flat = got.view(-1)
                flat[0] = flat[0] + 1
                print(f"soak: rank {self.rank}: injected an error into {what} ({name}, element 0)",
                      flush=True)
            if got.shape == want.shape and got.dtype == want.dtype and t.equal(got, want):
                continue
            bad.append(self.describe(name, got, want))
        if bad:
            self.error(kind, f"{what}: {len(bad)} of {len(pairs)} results wrong: {bad[0]}")

    def describe(self, name, got, want):
        if got.shape != want.shape or got.dtype != want.dtype:
            return f"{name}: got {got.dtype} {tuple(got.shape)}, want {want.dtype} {tuple(want.shape)}"
        diff = (got != want).view(-1)
        nbad = int(diff.sum().item())
        first = int(diff.nonzero()[0].item())
        g, w = got.reshape(-1)[first].item(), want.reshape(-1)[first].item()
        return f"{name}: {nbad} of {got.numel()} elements differ, first [{first}] got {g!r} want {w!r}"

    def error(self, kind, msg, tb=None):
        self.stats[kind]["errors"] += 1
        self.details += 1
        if self.details <= MAX_DETAILS:
            print(f"soak: ERROR rank {self.rank}: {msg}", flush=True)
            if tb:
                print(tb, end="", flush=True)
        elif self.details == MAX_DETAILS + 1:
            print(f"soak: rank {self.rank}: more errors, counted but not shown", flush=True)

    def nbytes(self, n, dtype):
        return n * self.elem[dtype]


# ---------------------------------------------------------------- sizes per resize
def draw_sizes(args, epoch, world, dtypes, elem):
    """Per (kind, dtype): the count of one rank's input (chunked kinds: of one chunk); the
    uneven all_to_all split matrices; the model's widths. Same on every rank."""
    rng = random.Random(mix(args.seed, epoch, 0x51235))
    top = max(1, int(args.max_mib * (1 << 20)))
    sizes = {}
    kinds = ["all_reduce." + op for op in OPS] + COLLECTIVES[1:]
    for kind in kinds:
        for dt in dtypes:
            cap = max(1, top // (world if kind in CHUNKED else 1) // elem[dt])
            nbytes = int(math.exp(rng.uniform(0.0, math.log(top))))
            n = min(cap, max(1, nbytes // elem[dt]))
            if rng.random() < 0.5 and n < cap:
                n |= 1
            if kind == "all_to_all_single.uneven":
                # splits[i][j]: what rank i sends to rank j; some empty, none of the rows.
                splits = [[rng.randint(0, max(1, n)) if rng.random() < 0.8 else 0
                           for _ in range(world)] for _ in range(world)]
                for i in range(world):
                    splits[i][(i + 1) % world] = max(1, splits[i][(i + 1) % world])
                sizes[(kind, dt)] = splits
            else:
                sizes[(kind, dt)] = n
    model = {"d_in": rng.randint(1, MAX_IN), "hidden": rng.randint(1, MAX_HIDDEN),
             "d_out": rng.randint(1, MAX_OUT), "batch": rng.randint(1, MAX_BATCH),
             "vocab": int(math.exp(rng.uniform(0.0, math.log(1 << 17)))) | 1,
             "bucket_mb": rng.choice([0.001, 0.05, 1.0, 25.0])}
    return sizes, model


# ---------------------------------------------------------------- one step of collectives
def raiser(e):
    """A call that raises e: a launch that failed, counted by Soak.call like any other."""
    def fn():
        raise e
    return fn


def run_collectives(S, sizes):
    torch, w, r = S.torch, S.world, S.rank
    for di, dt in enumerate(S.dtypes):
        # all_reduce: the five ops in flight at once, then each waited for and checked.
        flying = []
        for op in OPS:
            kind = "all_reduce." + op
            n = sizes[(kind, dt)]
            salt = salt_of(kind)
            x = S.data(n, dt, r, salt, op)
            try:
                flying.append((kind, op, n, salt, x, S.comm.all_reduce(x, op, async_op=True)))
            except Exception as e:
                S.call(kind, dt, S.nbytes(n, dt), raiser(e))
        for kind, op, n, salt, x, work in flying:
            def check(op=op, n=n, salt=salt, x=x, work=work):
                work.wait()
                want = S.reduce_ref(op, [S.data(n, dt, i, salt, op) for i in range(w)])
                return [("result", x, want)]
            S.call(kind, dt, S.nbytes(n, dt), check)
        for ki, kind in enumerate(COLLECTIVES[1:]):
            size = sizes[(kind, dt)]
            root = (S.step + di + ki) % w
            op = OPS[(S.step + di) % len(OPS)]
            fn = COLLECTIVE_CHECKS[kind]
            n = size if isinstance(size, int) else sum(size[r])
            S.call(kind, dt, S.nbytes(n, dt), lambda fn=fn, size=size, root=root, op=op:
                   fn(S, dt, size, root, op, salt_of(kind)))


def c_reduce(S, dt, n, root, op, salt):
    x = S.data(n, dt, S.rank, salt, op)
    S.comm.reduce(x, root, op)
    if S.rank != root:
        return []
    return [(f"root {root} op {op}", x, S.reduce_ref(op, [S.data(n, dt, i, salt, op)
                                                          for i in range(S.world)]))]


def c_broadcast(S, dt, n, root, op, salt):
    want = S.data(n, dt, root, salt)
    x = want.clone() if S.rank == root else S.sentinel(n, dt)
    S.comm.broadcast(x, root)
    return [(f"root {root}", x, want)]


def c_all_gather_into_tensor(S, dt, n, root, op, salt):
    out = S.sentinel(n * S.world, dt)
    S.comm.all_gather_into_tensor(out, S.data(n, dt, S.rank, salt))
    return [("output", out, S.torch.cat([S.data(n, dt, i, salt) for i in range(S.world)]))]


def c_all_gather(S, dt, n, root, op, salt):
    outs = [S.sentinel(n, dt) for _ in range(S.world)]
    S.comm.all_gather(outs, S.data(n, dt, S.rank, salt))
    return [(f"output {i}", outs[i], S.data(n, dt, i, salt)) for i in range(S.world)]


def c_reduce_scatter_tensor(S, dt, n, root, op, salt):
    out = S.sentinel(n, dt)
    S.comm.reduce_scatter_tensor(out, S.data(n * S.world, dt, S.rank, salt, op), op)
    whole = S.reduce_ref(op, [S.data(n * S.world, dt, i, salt, op) for i in range(S.world)])
    return [(f"op {op}", out, whole[S.rank * n:(S.rank + 1) * n])]


def c_reduce_scatter(S, dt, n, root, op, salt):
    out = S.sentinel(n, dt)
    S.comm.reduce_scatter(out, list(S.data(n * S.world, dt, S.rank, salt, op).chunk(S.world)), op)
    whole = S.reduce_ref(op, [S.data(n * S.world, dt, i, salt, op) for i in range(S.world)])
    return [(f"op {op}", out, whole[S.rank * n:(S.rank + 1) * n])]


def c_all_to_all_even(S, dt, n, root, op, salt):
    w, r = S.world, S.rank
    out = S.sentinel(n * w, dt)
    S.comm.all_to_all_single(out, S.data(n * w, dt, r, salt))
    want = S.torch.cat([S.data(n * w, dt, i, salt)[r * n:(r + 1) * n] for i in range(w)])
    return [("output", out, want)]


def c_all_to_all_uneven(S, dt, splits, root, op, salt):
    w, r = S.world, S.rank
    ins = splits[r]
    outs = [splits[i][r] for i in range(w)]
    out = S.sentinel(sum(outs), dt)
    S.comm.all_to_all_single(out, S.data(sum(ins), dt, r, salt), outs, ins)
    parts = []
    for i in range(w):
        start = sum(splits[i][:r])
        parts.append(S.data(sum(splits[i]), dt, i, salt)[start:start + splits[i][r]])
    return [(f"splits {splits}", out, S.torch.cat(parts))]


def c_gather(S, dt, n, root, op, salt):
    lst = [S.sentinel(n, dt) for _ in range(S.world)] if S.rank == root else None
    S.comm.gather(S.data(n, dt, S.rank, salt), lst, root)
    if lst is None:
        return []
    return [(f"root {root} part {i}", lst[i], S.data(n, dt, i, salt)) for i in range(S.world)]


def c_scatter(S, dt, n, root, op, salt):
    out = S.sentinel(n, dt)
    parts = [S.data(n, dt, root, salt + 7919 * j) for j in range(S.world)]
    S.comm.scatter(out, parts if S.rank == root else None, root)
    return [(f"root {root}", out, S.data(n, dt, root, salt + 7919 * S.rank))]


def c_ring(S, dt, n, root, op, salt):
    w, r = S.world, S.rank
    recv = S.sentinel(n, dt)
    S.comm.ring(S.data(n, dt, r, salt), recv)
    return [(f"from {(r - 1) % w}", recv, S.data(n, dt, (r - 1) % w, salt))]


def c_pair(S, dt, n, root, op, salt):
    peer = S.rank ^ 1
    if peer >= S.world:
        return []
    recv = S.sentinel(n, dt)
    S.comm.pair(S.data(n, dt, S.rank, salt), recv, peer)
    return [(f"from {peer}", recv, S.data(n, dt, peer, salt))]


COLLECTIVE_CHECKS = {
    "reduce": c_reduce, "broadcast": c_broadcast,
    "all_gather_into_tensor": c_all_gather_into_tensor, "all_gather": c_all_gather,
    "reduce_scatter_tensor": c_reduce_scatter_tensor, "reduce_scatter": c_reduce_scatter,
    "all_to_all_single.even": c_all_to_all_even, "all_to_all_single.uneven": c_all_to_all_uneven,
    "gather": c_gather, "scatter": c_scatter, "send_recv.ring": c_ring, "send_recv.pair": c_pair}


def run_barrier(S, store):
    """After dist.barrier() returns, every rank must have counted itself in the store."""
    key = f"torch_soak/barrier/{S.step}"

    def fn():
        store.add(key, 1)
        S.dist.barrier()
        seen = store.add(key, 0)
        t = S.torch
        return [("ranks arrived", t.tensor([seen]), t.tensor([S.world]))]
    S.call("barrier", None, 0, fn)


# ---------------------------------------------------------------- DDP and FSDP2
def make_net(torch, dims):
    nn = torch.nn

    class SoakNet(nn.Module):
        """Linear-ReLU-Linear plus an embedding of a per-sample index, added to the output."""

        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(dims["d_in"], dims["hidden"])
            self.fc2 = nn.Linear(dims["hidden"], dims["d_out"])
            self.emb = nn.Embedding(dims["vocab"], dims["d_out"])

        def forward(self, x, idx):
            return self.fc2(torch.relu(self.fc1(x))) + self.emb(idx)
    return SoakNet()


class Trainer:
    """The DDP or FSDP2 model of one resize and its reference, a plain copy of the model."""

    def __init__(self, S, dims, epoch, kind, fully_shard=None, mesh=None):
        torch = S.torch
        self.S, self.kind, self.dims = S, kind, dims
        g = torch.Generator().manual_seed(mix(S.args.seed, epoch, salt_of(kind)))
        net = make_net(torch, dims)
        with torch.no_grad():
            for p in net.parameters():
                p.copy_(torch.randint(-1, 2, tuple(p.shape), generator=g).float())
        net = net.to(S.dev)
        self.ref = copy.deepcopy(net)
        self.names = [n for n, _ in self.ref.named_parameters()]
        if kind == "ddp":
            ids = [S.dev.index] if S.dev.type == "cuda" else None
            self.model = torch.nn.parallel.DistributedDataParallel(
                net, device_ids=ids, bucket_cap_mb=dims["bucket_mb"])
            named = dict(self.model.module.named_parameters())
        else:
            for m in (net.fc1, net.fc2, net.emb):
                fully_shard(m, mesh=mesh)
            fully_shard(net, mesh=mesh)
            self.model = net
            named = dict(net.named_parameters())
        self.params = [named[n] for n in self.names]

    def batch(self, rank):
        """Rank `rank`'s batch at this step: inputs in {-1, 0, 1}, indices, targets in [-4, 4]."""
        torch, S, d = self.S.torch, self.S, self.dims
        g = torch.Generator().manual_seed(mix(S.args.seed, rank, S.step, salt_of(self.kind)))
        x = torch.randint(-1, 2, (d["batch"], d["d_in"]), generator=g).float()
        idx = torch.randint(0, d["vocab"], (d["batch"],), generator=g)
        tgt = torch.randint(-4, 5, (d["batch"], d["d_out"]), generator=g).float()
        return x.to(S.dev), idx.to(S.dev), tgt.to(S.dev)

    def full(self, t):
        """A parameter or gradient whole (FSDP2's are sharded DTensors)."""
        return t.full_tensor() if hasattr(t, "full_tensor") else t

    def step(self):
        torch, S = self.S.torch, self.S
        x, idx, tgt = self.batch(S.rank)
        ((self.model(x, idx) - tgt) ** 2).sum().backward()
        # The reference: every rank's local gradient, in rank order, averaged.
        avg = None
        for r in range(S.world):
            self.ref.zero_grad(set_to_none=True)
            xr, ir, tr = self.batch(r)
            ((self.ref(xr, ir) - tr) ** 2).sum().backward()
            grads = [p.grad / S.world for p in self.ref.parameters()]
            avg = grads if avg is None else [a + g for a, g in zip(avg, grads)]
        pairs = [(n + ".grad", self.full(p.grad), a)
                 for n, p, a in zip(self.names, self.params, avg)]
        with torch.no_grad():
            for p in self.params:
                p.sub_(p.grad.sign()).clamp_(-2, 2)
                p.grad = None
            for p, a in zip(self.ref.parameters(), avg):
                p.sub_(a.sign()).clamp_(-2, 2)
        pairs += [(n, self.full(p).detach(), q.detach())
                  for n, p, q in zip(self.names, self.params, self.ref.parameters())]
        return pairs


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
        header.append(f"# fsdp2: skipped: {fsdp_why}")
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
