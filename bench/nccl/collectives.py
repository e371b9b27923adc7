#!/usr/bin/env python3
"""Correctness of every collective PyTorch's ProcessGroupNCCL issues, checked against exact CPU
references, for whatever library serves NCCL's C API in this process (real NCCL, or
libshmddp-nccl.so when it is preloaded).

Run under torchrun (N ranks; ranks may share a GPU: device = local_rank % device_count):

    python3 -m torch.distributed.run --standalone --nproc-per-node 2 collectives.py --out h.json

Inputs are deterministic functions of (rank, index, test number): integers in [-8, 8] ([0, 8]
unsigned; scaled up for int32/int64 so the high bytes carry data), floats k/8 for those
integers, and for PRODUCT values in {1, -1, 2}. Every such sum, product, min and max is exactly
representable, so a correct library gives exact results whatever its reduction order: floats
are still compared with the dtype tolerance the brief asks for, integers and MIN/MAX exactly.

--out gets (rank 0) a SHA-256 of every result tensor of every rank with a tier per result:
  required     integers, MIN/MAX, pure data movement: any two correct libraries agree bitwise
  float-exact  float SUM/PRODUCT/AVG/PREMUL_SUM on exact data: equal unless a library rounds
               differently (e.g. the sign of a zero)
  float        results that depend on rounding (AVG with a world size that is not a power of 2,
               bfloat16 PREMUL_SUM, see below)
compare.py diffs two such files (ours vs ours: all must be equal; ours vs NCCL: the required
tier must be).

bfloat16 PREMUL_SUM: PyTorch (issue pytorch/pytorch#190745, fixed after 2.11) passes the factor
to ncclRedOpCreatePreMulSum as a 4-byte float while NCCL reads 2 bytes (a bfloat16), i.e. the
low half of the float, which is 0 for factors like 0.375. An NCCL-compatible library reproduces
that, so both the mathematically correct result and the "low half" result are accepted and the
log says which one came back.

Prints progress and the first 20 failures in detail, then one line `RESULT {json}` (rank 0).
Exit status 1 when any check failed on any rank.
"""
import argparse
import hashlib
import json
import os
import re
import struct
import sys
import time
import traceback

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402 - bench/nccl/common.py, found next to this script

DTYPES = ["int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"]
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# Integer values are multiplied by these so that int32/int64 results use all their bytes while
# every sum of a few ranks stays exact and far from overflow.
INT_SCALE = {torch.int8: 1, torch.uint8: 1, torch.int32: (1 << 20) + 1, torch.int64: (1 << 40) + 1}
SENTINEL_INT = {torch.int8: 127, torch.uint8: 0xEE, torch.int32: 0x5A5A5A5A,
                torch.int64: 0x5A5A5A5A5A5A5A5A}
PREMUL_HOST_FACTOR = 0.375   # exact in every float type; low half of its float32 bits is 0
PREMUL_DEVICE_FACTOR = 0.5
MAX_DETAILS = 20


def tolerance(dtype, world):
    """(rtol, atol) for float results; data are O(1), so atol = rtol still sees a 1/8 error."""
    rtol = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2,
            torch.float32: 1e-6 * world, torch.float64: 1e-12 * world}[dtype]
    return rtol, rtol


def sha256(t):
    """SHA-256 of a tensor's bytes (moved to the CPU), without needing numpy."""
    return common.hash_tensor(hashlib.sha256(), t).hexdigest()


def wrap_int(v, dtype):
    """Two's-complement wrap of exact int64 values to dtype's width (what the GPU computes)."""
    bits = {torch.int8: 8, torch.uint8: 8, torch.int32: 32, torch.int64: 64}[dtype]
    if bits == 64:
        return v
    m = 1 << bits
    v = torch.remainder(v, m)
    if dtype != torch.uint8:
        v = torch.where(v >= m // 2, v - m, v)
    return v


def bf16_low_half(f):
    """The value NCCL sees when a float32 factor is read as a bfloat16 (its low 16 bits)."""
    low = struct.unpack("<HH", struct.pack("<f", f))[0]
    return struct.unpack("<f", struct.pack("<I", low << 16))[0]


class Data:
    """Known inputs of every rank: a fixed random byte stream per rank (seeded CPU generator,
    so identical in every process and run), mapped per test to the value range needed."""

    def __init__(self, world, length):
        self.base = []
        for r in range(world):
            g = torch.Generator().manual_seed(20250 + r)
            self.base.append(torch.randint(0, 256, (length,), dtype=torch.uint8, generator=g))
        # The large tests reuse one test number; keeping the longest array per key makes their
        # CPU side cheap (shorter requests are prefixes of it).
        self.cache = {}

    def values(self, r, n, it, dtype, kind="val"):
        """Exact values rank r contributes to test `it`: int64 for integer dtypes, float64 for
        floats. kind 'prod' gives {1, -1, 2} (unsigned {1, 2}) with few 2s."""
        key = (r, it, dtype, kind)
        hit = self.cache.get(key)
        if hit is not None and hit.numel() >= n:
            return hit[:n]
        v = self._make(r, n, it, dtype, kind)
        if n >= (1 << 20):
            if len(self.cache) > 4 * len(self.base):
                self.cache.clear()
            self.cache[key] = v
        return v

    def _make(self, r, n, it, dtype, kind):
        s = self.base[r][:n].to(torch.int32) + 37 * it
        unsigned = dtype == torch.uint8
        if kind == "prod":
            p = torch.remainder(s, 17)
            v = torch.ones(n, dtype=torch.int64)
            if not unsigned:
                v[(p >= 1) & (p <= 4)] = -1
            v[p == 0] = 2
            return v.to(torch.float64) if dtype in FLOATS else v
        if unsigned:
            v = torch.remainder(s, 9).to(torch.int64)
        else:
            v = (torch.remainder(s, 17) - 8).to(torch.int64)
        if dtype in FLOATS:
            return v.to(torch.float64) / 8
        return v * INT_SCALE[dtype]


class Suite:
    def __init__(self, args, rank, world, dev):
        self.args, self.rank, self.world, self.dev = args, rank, world, dev
        self.it = 0
        self.fixed_it = None
        self.checks = 0
        self.failures = 0
        self.details = []
        self.entries = {}       # key -> {"tier": ..., "sha": sha of this rank's result}
        self.notes = {}         # e.g. which bf16 PREMUL_SUM interpretation came back
        self.skipped = []
        self.premul = getattr(dist, "_make_nccl_premul_sum", None)
        self.bf16_factor_dtype = torch.float32
        self.only = re.compile(args.only) if args.only else None
        if self.premul is None:
            self.skipped.append("PREMUL_SUM: torch.distributed._make_nccl_premul_sum missing")
        big = max(args.big_elems, max(args.sizes))
        self.data = Data(world, big * world)

    # ---- bookkeeping ----
    def next_it(self):
        """A new test number, so every test sees different data; the large tests share one
        (fixed_it) to spare the CPU, and rely on sentinel-filled outputs instead."""
        if self.fixed_it is not None:
            return self.fixed_it
        self.it += 1
        return self.it

    def fail(self, key, msg):
        self.failures += 1
        if len(self.details) < MAX_DETAILS:
            self.details.append(f"rank {self.rank}: {key}: {msg}")
            print(f"FAIL rank {self.rank}: {key}: {msg}", flush=True)

    def compare(self, key, got, expected, dtype, exact, tier, alt=None, alt_name=None):
        """Check one result tensor and record its hash. `expected` holds exact values (int64 or
        float64); `alt`, when given, is a second accepted answer (bf16 PREMUL_SUM)."""
        self.checks += 1
        got = got.detach().cpu()
        self.entries[key] = {"tier": tier, "sha": sha256(got)}
        # Fast path: equal to the exact answer rounded to dtype (one pass; within any tolerance).
        if self._equal(got, expected, dtype):
            if alt is not None:
                self.notes[key] = "correct"
            return
        if alt is not None and self._equal(got, alt, dtype):
            self.notes[key] = alt_name
            return
        bad = self._mismatch(got, expected, dtype, exact)
        if int(bad.sum()) == 0:
            if alt is not None:
                self.notes[key] = "correct"
            return
        if alt is not None and int(self._mismatch(got, alt, dtype, exact).sum()) == 0:
            self.notes[key] = alt_name
            return
        nbad = int(bad.sum())
        idx = bad.nonzero().flatten()[:4].tolist()
        shown = ", ".join(f"[{i}] got {got[i].item()!r} want {expected[i].item()!r}" for i in idx)
        self.fail(key, f"{nbad} of {got.numel()} elements wrong: {shown}")

    @staticmethod
    def _equal(got, expected, dtype):
        return got.shape == expected.shape and torch.equal(got, expected.to(dtype))

    def _mismatch(self, got, expected, dtype, exact):
        if got.shape != expected.shape:
            return torch.ones(1, dtype=torch.bool)
        if dtype in FLOATS:
            g = got.to(torch.float64)
            if exact:
                return ~(g == expected)
            rtol, atol = tolerance(dtype, self.world)
            return ~((g - expected).abs() <= atol + rtol * expected.abs())  # NaN is a mismatch
        return got.to(torch.int64) != expected

    def run(self, key, fn):
        """Run one test; an exception is a failure of that test, and the suite goes on."""
        if self.only is not None and not self.only.search(key):
            return
        if self.args.trace:
            print(f"rank {self.rank}: {key}", flush=True)
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - any error of the library under test counts
            self.checks += 1
            msg = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            self.fail(key, "raised " + msg)
            if self.args.verbose:
                traceback.print_exc()

    # ---- checks and fills ----
    def tensor(self, values, dtype):
        return values.to(dtype).to(self.dev)

    def empty(self, n, dtype):
        """An output buffer holding a sentinel, so a collective that writes nothing is caught
        even when the caching allocator hands back the previous test's (correct) memory."""
        t = torch.empty(n, dtype=dtype, device=self.dev)
        t.fill_(float("nan") if dtype in FLOATS else SENTINEL_INT[dtype])
        return t

    def ops_for(self, dtype, big):
        """(name, factory of the torch op) for the reductions tested on dtype; the large
        tests keep the cheap, most used ones."""
        R = dist.ReduceOp
        ops = [("SUM", lambda: R.SUM), ("MAX", lambda: R.MAX)]
        if not big:
            ops += [("PRODUCT", lambda: R.PRODUCT), ("MIN", lambda: R.MIN)]
        if dtype in FLOATS:
            ops.append(("AVG", lambda: R.AVG))
            if self.premul is not None:
                ops.append(("PREMUL_SUM_host", lambda: self.premul(PREMUL_HOST_FACTOR)))
                if not big:
                    ops.append(("PREMUL_SUM_dev", None))  # factor tensor made per dtype
        return ops

    def expected_reduce(self, name, vals, dtype):
        """Exact result of reducing the per-rank values, and an alternative accepted answer."""
        alt = None
        if name in ("SUM", "AVG") or name.startswith("PREMUL"):
            acc = vals[0].clone()
            for v in vals[1:]:
                acc += v
            if name == "AVG":
                acc = acc / self.world
            elif name.startswith("PREMUL"):
                f = PREMUL_HOST_FACTOR if name.endswith("host") else PREMUL_DEVICE_FACTOR
                if dtype == torch.bfloat16:
                    alt = acc * bf16_low_half(f)
                acc = acc * f
        elif name == "PRODUCT":
            acc = vals[0].clone()
            for v in vals[1:]:
                acc = acc * v
        elif name == "MIN":
            acc = vals[0].clone()
            for v in vals[1:]:
                acc = torch.minimum(acc, v)
        elif name == "MAX":
            acc = vals[0].clone()
            for v in vals[1:]:
                acc = torch.maximum(acc, v)
        else:
            raise ValueError(name)
        if dtype not in FLOATS:
            acc = wrap_int(acc, dtype)
        return acc, alt

    def tier(self, name, dtype):
        if dtype not in FLOATS or name in ("MIN", "MAX", "move"):
            return "required"
        if name == "AVG" and self.world & (self.world - 1):
            return "float"
        if name.startswith("PREMUL") and dtype == torch.bfloat16:
            return "float"
        return "float-exact"

    # ---- tests ----
    def all_reduce(self, dtype, n, name, factory, offset=0):
        it = self.next_it()
        kind = "prod" if name == "PRODUCT" else "val"
        vals = [self.data.values(r, n, it, dtype, kind) for r in range(self.world)]
        key = f"all_reduce/{dtype_name(dtype)}/{n}/{name}" + (f"/offset{offset}" if offset else "")
        buf = torch.empty(n + offset, dtype=dtype, device=self.dev)
        x = buf[offset:]             # a tensor at an offset inside its allocation
        x.copy_(vals[self.rank].to(dtype))
        op = self._make_op(name, factory, dtype)
        dist.all_reduce(x, op=op)
        exp, alt = self.expected_reduce(name, vals, dtype)
        exact = dtype not in FLOATS or name in ("MIN", "MAX")
        self.compare(key, x, exp, dtype, exact, self.tier(name, dtype), alt, "bf16-low-half")

    def _make_op(self, name, factory, dtype):
        if name != "PREMUL_SUM_dev":
            return factory()
        # PyTorch 2.11 reads a bfloat16 op's factor tensor as float32 (see the module doc).
        tdt = self.bf16_factor_dtype if dtype == torch.bfloat16 else dtype
        return self.premul(torch.tensor([PREMUL_DEVICE_FACTOR], dtype=tdt, device=self.dev))

    def reduce(self, dtype, n, name, factory, root):
        it = self.next_it()
        kind = "prod" if name == "PRODUCT" else "val"
        vals = [self.data.values(r, n, it, dtype, kind) for r in range(self.world)]
        x = self.tensor(vals[self.rank], dtype)
        dist.reduce(x, dst=root, op=self._make_op(name, factory, dtype))
        if self.rank == root:  # other ranks' buffers are unspecified after a reduce
            exp, alt = self.expected_reduce(name, vals, dtype)
            exact = dtype not in FLOATS or name in ("MIN", "MAX")
            self.compare(f"reduce/{dtype_name(dtype)}/{n}/{name}/root{root}", x, exp, dtype,
                         exact, self.tier(name, dtype), alt, "bf16-low-half")
        else:
            torch.cuda.synchronize(self.dev)

    def reduce_scatter(self, dtype, n, name, factory):
        it = self.next_it()
        kind = "prod" if name == "PRODUCT" else "val"
        vals = [self.data.values(r, n * self.world, it, dtype, kind) for r in range(self.world)]
        inp = self.tensor(vals[self.rank], dtype)
        out = self.empty(n, dtype)
        dist.reduce_scatter_tensor(out, inp, op=self._make_op(name, factory, dtype))
        mine = [v[self.rank * n:(self.rank + 1) * n] for v in vals]
        exp, alt = self.expected_reduce(name, mine, dtype)
        exact = dtype not in FLOATS or name in ("MIN", "MAX")
        self.compare(f"reduce_scatter/{dtype_name(dtype)}/{n}/{name}", out, exp, dtype, exact,
                     self.tier(name, dtype), alt, "bf16-low-half")

    def broadcast(self, dtype, n, root, offset=0):
        it = self.next_it()
        vals = [self.data.values(r, n, it, dtype) for r in range(self.world)]
        buf = torch.empty(n + offset, dtype=dtype, device=self.dev)
        x = buf[offset:]
        x.copy_(vals[self.rank].to(dtype))   # non-roots start with their own (wrong) data
        dist.broadcast(x, src=root)
        key = f"broadcast/{dtype_name(dtype)}/{n}/root{root}" + \
            (f"/offset{offset}" if offset else "")
        self.compare(key, x, vals[root], dtype, True, "required")

    def all_gather_into_tensor(self, dtype, n, offset=0):
        it = self.next_it()
        vals = [self.data.values(r, n, it, dtype) for r in range(self.world)]
        buf = torch.empty(n + offset, dtype=dtype, device=self.dev)
        x = buf[offset:]
        x.copy_(vals[self.rank].to(dtype))
        out = self.empty(n * self.world, dtype)
        dist.all_gather_into_tensor(out, x)
        key = f"all_gather_into_tensor/{dtype_name(dtype)}/{n}" + \
            (f"/offset{offset}" if offset else "")
        self.compare(key, out, torch.cat(vals), dtype, True, "required")

    def all_gather_list(self, dtype, n):
        it = self.next_it()
        vals = [self.data.values(r, n, it, dtype) for r in range(self.world)]
        x = self.tensor(vals[self.rank], dtype)
        outs = [self.empty(n, dtype) for _ in range(self.world)]
        dist.all_gather(outs, x)
        for r in range(self.world):
            self.compare(f"all_gather/{dtype_name(dtype)}/{n}/from{r}", outs[r], vals[r], dtype,
                         True, "required")

    def send_recv_batch(self, dtype, n):
        """Each rank sends to both neighbours and receives from both, in one batch (one NCCL
        group). With 2 ranks both messages go to the same peer: they match in issue order."""
        it_fwd, it_bwd = self.next_it(), self.next_it()
        nxt, prv = (self.rank + 1) % self.world, (self.rank - 1) % self.world
        fwd = self.tensor(self.data.values(self.rank, n, it_fwd, dtype), dtype)
        bwd = self.tensor(self.data.values(self.rank, n, it_bwd, dtype), dtype)
        from_prv, from_nxt = self.empty(n, dtype), self.empty(n, dtype)
        ops = [dist.P2POp(dist.isend, fwd, nxt), dist.P2POp(dist.irecv, from_prv, prv),
               dist.P2POp(dist.isend, bwd, prv), dist.P2POp(dist.irecv, from_nxt, nxt)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        torch.cuda.synchronize(self.dev)
        name = dtype_name(dtype)
        self.compare(f"batch_isend_irecv/{name}/{n}/from_prev", from_prv,
                     self.data.values(prv, n, it_fwd, dtype), dtype, True, "required")
        self.compare(f"batch_isend_irecv/{name}/{n}/from_next", from_nxt,
                     self.data.values(nxt, n, it_bwd, dtype), dtype, True, "required")

    def send_recv_plain(self, dtype, n):
        """Blocking send/recv around the ring; even ranks send first, odd ranks receive first,
        so the host never blocks in a cycle."""
        it = self.next_it()
        nxt, prv = (self.rank + 1) % self.world, (self.rank - 1) % self.world
        x = self.tensor(self.data.values(self.rank, n, it, dtype), dtype)
        got = self.empty(n, dtype)
        if self.rank % 2 == 0:
            dist.send(x, dst=nxt)
            dist.recv(got, src=prv)
        else:
            dist.recv(got, src=prv)
            dist.send(x, dst=nxt)
        self.compare(f"send_recv/{dtype_name(dtype)}/{n}", got,
                     self.data.values(prv, n, it, dtype), dtype, True, "required")

    def barrier(self, tag):
        self.checks += 1
        dist.barrier()

    # ---- the whole suite for one (dtype, size) ----
    def dtype_size(self, dtype, n, big=False):
        name = dtype_name(dtype)
        roots = sorted({0, self.world - 1})
        ops = self.ops_for(dtype, big)
        for opname, factory in ops:
            self.run(f"all_reduce/{name}/{n}/{opname}",
                     lambda: self.all_reduce_op(dtype, n, opname, factory))
        for root in roots:
            self.run(f"broadcast/{name}/{n}/root{root}", lambda: self.broadcast(dtype, n, root))
        self.run(f"all_gather_into_tensor/{name}/{n}",
                 lambda: self.all_gather_into_tensor(dtype, n))
        if not big:
            self.run(f"all_gather/{name}/{n}", lambda: self.all_gather_list(dtype, n))
        rs_ops = ops if not big else ops[:1]
        for opname, factory in rs_ops:
            self.run(f"reduce_scatter/{name}/{n}/{opname}",
                     lambda: self.reduce_scatter_op(dtype, n, opname, factory))
        red_ops = ops if not big else ops[:1]
        for root in roots:
            for opname, factory in red_ops:
                self.run(f"reduce/{name}/{n}/{opname}/root{root}",
                         lambda: self.reduce_op(dtype, n, opname, factory, root))
        if self.world > 1:
            self.run(f"batch_isend_irecv/{name}/{n}", lambda: self.send_recv_batch(dtype, n))
            if not big:
                self.run(f"send_recv/{name}/{n}", lambda: self.send_recv_plain(dtype, n))
        self.run(f"barrier/{name}/{n}", lambda: self.barrier(f"{name}/{n}"))

    def dtype_size_offset(self, dtype, n):
        """Buffers that start one element into their allocation: misaligned for vector loads
        (1 byte for int8). Run after everything else: a kernel that faults on them kills the
        process, and should not hide the other results."""
        name = dtype_name(dtype)
        last = self.world - 1
        self.run(f"all_reduce/{name}/{n}/SUM/offset1",
                 lambda: self.all_reduce(dtype, n, "SUM", lambda: dist.ReduceOp.SUM, offset=1))
        self.run(f"broadcast/{name}/{n}/root{last}/offset1",
                 lambda: self.broadcast(dtype, n, last, offset=1))
        self.run(f"all_gather_into_tensor/{name}/{n}/offset1",
                 lambda: self.all_gather_into_tensor(dtype, n, offset=1))

    # PREMUL_SUM_dev needs the bf16 retry; the other ops go straight through.
    def all_reduce_op(self, dtype, n, opname, factory):
        return self._with_bf16_retry(opname, dtype,
                                     lambda: self.all_reduce(dtype, n, opname, factory))

    def reduce_scatter_op(self, dtype, n, opname, factory):
        return self._with_bf16_retry(opname, dtype,
                                     lambda: self.reduce_scatter(dtype, n, opname, factory))

    def reduce_op(self, dtype, n, opname, factory, root):
        return self._with_bf16_retry(opname, dtype,
                                     lambda: self.reduce(dtype, n, opname, factory, root))

    def _with_bf16_retry(self, opname, dtype, call):
        if not (opname == "PREMUL_SUM_dev" and dtype == torch.bfloat16):
            return call()
        try:
            return call()
        except RuntimeError as e:
            # PyTorch's own check of the factor tensor's dtype fails before any NCCL call: this
            # PyTorch has the fix and wants a bfloat16 factor. Switch for good and retry.
            msg = str(e).lower()
            if self.bf16_factor_dtype != torch.float32 or \
                    ("scalar type" not in msg and "dtype" not in msg):
                raise
        self.bf16_factor_dtype = torch.bfloat16
        self.skipped.append("bfloat16 device-scalar PREMUL_SUM: this PyTorch wants a bfloat16 "
                            "factor tensor (fixed pytorch#190745)")
        self.it -= 1     # the failed attempt used a test number: keep the sequence stable
        return call()

    def split_groups(self):
        """new_group on an eagerly initialised default group makes communicators with
        ncclCommSplit: one group of all ranks, one of all ranks but the last."""
        everyone = dist.new_group(ranks=list(range(self.world)))
        it = self.next_it()
        vals = [self.data.values(r, 1000, it, torch.float32) for r in range(self.world)]
        x = self.tensor(vals[self.rank], torch.float32)
        dist.all_reduce(x, group=everyone)
        exp, _ = self.expected_reduce("SUM", vals, torch.float32)
        self.compare("split/all/float32/1000/SUM", x, exp, torch.float32, False, "float-exact")
        if self.world > 1:
            members = list(range(self.world - 1))
            sub = dist.new_group(ranks=members)
            it = self.next_it()
            vals = [self.data.values(r, 1000, it, torch.int32) for r in members]
            if self.rank in members:
                x = self.tensor(vals[self.rank], torch.int32)
                dist.all_reduce(x, group=sub)
                exp, _ = self.expected_reduce("SUM", vals, torch.int32)
                self.compare(f"split/first{len(members)}/int32/1000/SUM", x, exp, torch.int32,
                             True, "required")
        dist.barrier()


def dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def merge(out, world, meta):
    """Rank 0: combine the per-rank files into one hash file for compare.py."""
    entries, ranks = {}, []
    for r in range(world):
        path = f"{out}.rank{r}.json"
        deadline = time.time() + 30
        while not os.path.exists(path) and time.time() < deadline:
            time.sleep(0.1)
        try:
            with open(path) as f:
                part = json.load(f)
        except (OSError, ValueError) as e:
            ranks.append({"rank": r, "missing": str(e), "checks": 0, "failures": 1})
            continue
        ranks.append({k: part[k] for k in ("rank", "checks", "failures", "details", "notes",
                                            "skipped")})
        for key, e in part["entries"].items():
            ent = entries.setdefault(key, {"tier": e["tier"], "sha": {}})
            ent["sha"][str(r)] = e["sha"]
    merged = dict(meta, checks=sum(p["checks"] for p in ranks),
                  failures=sum(p["failures"] for p in ranks), ranks=ranks, entries=entries)
    write_json(out, merged)
    return merged


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="", help="hash file (JSON), written by rank 0")
    ap.add_argument("--dtypes", default=",".join(DTYPES))
    ap.add_argument("--sizes", default="1,7,1000,65537,1048576",
                    help="element counts tested for every dtype")
    ap.add_argument("--big-elems", type=int, default=64 << 20,
                    help="element count of the large float32/bfloat16 tests (0: none)")
    ap.add_argument("--big-dtypes", default="float32,bfloat16")
    ap.add_argument("--split", type=int, default=1, help="test new_group (ncclCommSplit)")
    ap.add_argument("--offsets", type=int, default=1,
                    help="test buffers one element into their allocation (run last)")
    ap.add_argument("--only", default="", help="run only the tests whose key matches this regex")
    ap.add_argument("--trace", action="store_true",
                    help="print each test's key before it runs (with CUDA_LAUNCH_BLOCKING=1 "
                         "the last one printed is the one that faulted)")
    ap.add_argument("--timeout", type=int, default=120, help="process-group timeout, seconds")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    t_start = time.time()

    # torchrun sets OMP_NUM_THREADS=1; the CPU references of the 64Mi-element tests want more.
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    torch.set_num_threads(max(1, min(8, (os.cpu_count() or 2) // local_world)))
    dev, rank, world = common.init_process_group(args.timeout)
    provider = common.nccl_provider()
    if rank == 0:
        print(f"collectives: world {world}, device cuda:{dev.index} of "
              f"{torch.cuda.device_count()}, "
              f"NCCL API served by {provider}, torch {torch.__version__}", flush=True)

    if args.out and os.path.exists(f"{args.out}.rank{rank}.json"):
        os.remove(f"{args.out}.rank{rank}.json")   # a stale file must not be merged
    suite = Suite(args, rank, world, dev)
    for name in args.dtypes.split(","):
        dtype = getattr(torch, name)
        t0, c0, f0 = time.time(), suite.checks, suite.failures
        for n in args.sizes:
            suite.dtype_size(dtype, n)
        if args.big_elems and name in args.big_dtypes.split(","):
            suite.fixed_it = suite.it + 1
            suite.dtype_size(dtype, args.big_elems, big=True)
            suite.it, suite.fixed_it = suite.fixed_it, None
            suite.data.cache.clear()
        torch.cuda.synchronize(dev)
        if rank == 0:
            print(f"  {name:9s} {suite.checks - c0:4d} checks {suite.failures - f0:3d} failures "
                  f"{time.time() - t0:6.1f} s (rank 0)", flush=True)

    meta = {"test": "collectives", "lib": provider, "world": world,
            "torch": torch.__version__, "sizes": args.sizes, "big_elems": args.big_elems}

    def save_rank_file():
        if args.out:
            write_json(f"{args.out}.rank{rank}.json",
                       {"rank": rank, "checks": suite.checks, "failures": suite.failures,
                        "details": suite.details, "notes": suite.notes,
                        "skipped": suite.skipped, "entries": suite.entries})

    def checkpoint(tag):
        """Per-rank files, then (rank 0) the merged file: what is done so far survives a hang
        or a crash in the next phase."""
        save_rank_file()
        try:    # not through suite.run: --only must not skip it
            dist.barrier()
        except Exception as e:  # noqa: BLE001
            suite.checks += 1
            suite.fail(f"barrier/{tag}", f"raised {type(e).__name__}: {e}")
        if rank == 0 and args.out:
            merge(args.out, world, meta)

    checkpoint("aligned")
    if args.split:
        suite.run("split", suite.split_groups)
        checkpoint("split")
    if args.offsets:
        t0, c0, f0 = time.time(), suite.checks, suite.failures
        for name in args.dtypes.split(","):
            for n in args.sizes:
                if n > 1:
                    suite.dtype_size_offset(getattr(torch, name), n)
        torch.cuda.synchronize(dev)
        if rank == 0:
            print(f"  {'offset1':9s} {suite.checks - c0:4d} checks {suite.failures - f0:3d} "
                  f"failures {time.time() - t0:6.1f} s (rank 0; misaligned buffers)", flush=True)
        checkpoint("offsets")

    elapsed = time.time() - t_start
    summary = dict(meta, checks=suite.checks, failures=suite.failures, elapsed_s=round(elapsed, 1))
    if rank == 0:
        if args.out:
            merged = common.load_json(args.out) or {}
            summary.update(checks=merged.get("checks", suite.checks),
                           failures=merged.get("failures", suite.failures))
        bf16_notes = sorted(set(suite.notes.values()))
        if bf16_notes:
            print(f"  bfloat16 PREMUL_SUM came back as: {', '.join(bf16_notes)} "
                  "(bf16-low-half = PyTorch passes a float32 factor for bfloat16, pytorch#190745)")
        for s in suite.skipped:
            print(f"  skipped: {s}")
        print(f"collectives: {summary['checks']} checks, {summary['failures']} failures, "
              f"{elapsed:.1f} s", flush=True)
        common.print_result(summary)
    try:
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001 - teardown errors are reported, not fatal
        print(f"rank {rank}: destroy_process_group raised {e}", flush=True)
    sys.exit(1 if summary["failures"] else 0)


if __name__ == "__main__":
    main()
