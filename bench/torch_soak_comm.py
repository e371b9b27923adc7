"""The collectives of torch.distributed's default process group as bench/torch_soak.py calls them.
On NCCL every call goes straight to the library under test; under gloo (the soak's CPU dry run)
what gloo refuses is emulated through what it has, so that every check still runs on the CPU.
PyTorch is handed in (this module imports nothing heavy)."""

OPS = ["sum", "avg", "min", "max", "product"]
SHORT = {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "int32": "i32", "int64": "i64",
         "uint8": "u8"}


class Done:
    """What an emulated asynchronous call returns: already complete."""

    def wait(self):
        return True


# What the gloo probe calls, by the names the emulation looks up (and --gloo-lacks takes).
GLOO_NAMES = (["broadcast", "all_gather_into_tensor", "all_gather", "all_to_all_single", "gather",
               "scatter", "send_recv.ring", "send_recv.pair"]
              + [f"{c}.{o}" for c in ("all_reduce", "reduce", "reduce_scatter_tensor",
                                      "reduce_scatter") for o in OPS])


def wide(t):
    """The carrier of a dtype that gloo lacks: float32 for bfloat16 and float16, float64 for the
    integers (the soak's integers reach 2^46, past float32's 24-bit significand but exact in
    float64's 53; gloo serves float64 wherever it serves float32)."""
    return t.float() if t.is_floating_point() else t.double()


class Comm:
    """The default process group's collectives. Under gloo, what gloo lacks (a probe at start
    calls each collective on one element of each dtype) is emulated through what it has: a
    dtype through a wider one (wide(): exact for these data), AVG through SUM, the *_tensor
    collectives through the list ones, so every check still runs on the CPU; the table's header
    says which were emulated. On NCCL nothing is emulated: every call goes to the library under test."""

    def __init__(self, torch, dist, rank, world):
        self.torch, self.dist, self.rank, self.world = torch, dist, rank, world
        self.lacks = {}     # (method, dtype) -> gloo's message

    def op(self, name):
        R = self.dist.ReduceOp
        return {"sum": R.SUM, "avg": R.AVG, "min": R.MIN, "max": R.MAX, "product": R.PRODUCT}[name]

    def _via_wide(self, key):
        """Whether key's method can run on wide()'s carrier: gloo serves it on float32 (so the
        lacking piece is the dtype; float64 is served wherever float32 is)."""
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
        if not self._via_wide(key):
            self.all_reduce(t, "sum")
            self._div(t)
        else:
            f = wide(t)
            self.all_reduce(f, op)
            t.copy_(f)
        return Done()

    def reduce(self, t, dst, op):
        key = ("reduce." + op, t.dtype)
        if key not in self.lacks:
            return self.dist.reduce(t, dst, op=self.op(op))
        if not self._via_wide(key):
            self.reduce(t, dst, "sum")
            if self.rank == dst:
                self._div(t)
        else:
            f = wide(t)
            self.reduce(f, dst, op)
            t.copy_(f)

    def broadcast(self, t, src):
        if ("broadcast", t.dtype) not in self.lacks:
            return self.dist.broadcast(t, src)
        f = wide(t)
        self.broadcast(f, src)
        t.copy_(f)

    def all_gather_into_tensor(self, out, inp):
        key = ("all_gather_into_tensor", inp.dtype)
        if key not in self.lacks:
            return self.dist.all_gather_into_tensor(out, inp)
        if self._via_wide(key):
            f = wide(out)
            self.all_gather_into_tensor(f, wide(inp))
            out.copy_(f)
        else:
            self.all_gather(list(out.chunk(self.world)), inp)

    def all_gather(self, outs, inp):
        if ("all_gather", inp.dtype) not in self.lacks:
            return self.dist.all_gather(outs, inp)
        fs = [wide(o) for o in outs]
        self.all_gather(fs, wide(inp))
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
        if self._via_wide(key):
            f = wide(out)
            if key[0].startswith("reduce_scatter_tensor"):
                self.reduce_scatter_tensor(f, wide(whole), op)
            else:
                self.reduce_scatter(f, list(wide(whole).chunk(self.world)), op)
            out.copy_(f)
        else:
            t = whole.clone()
            self.all_reduce(t, op)
            out.copy_(t.chunk(self.world)[self.rank])

    def all_to_all_single(self, out, inp, out_splits=None, in_splits=None):
        if ("all_to_all_single", inp.dtype) not in self.lacks:
            return self.dist.all_to_all_single(out, inp, out_splits, in_splits)
        f = wide(out)
        self.all_to_all_single(f, wide(inp), out_splits, in_splits)
        out.copy_(f)

    def gather(self, t, gather_list, dst):
        if ("gather", t.dtype) not in self.lacks:
            return self.dist.gather(t, gather_list, dst=dst)
        fs = [wide(g) for g in gather_list] if gather_list is not None else None
        self.gather(wide(t), fs, dst)
        for g, f in zip(gather_list or [], fs or []):
            g.copy_(f)

    def scatter(self, t, scatter_list, src):
        if ("scatter", t.dtype) not in self.lacks:
            return self.dist.scatter(t, scatter_list, src=src)
        f = wide(t)
        self.scatter(f, [wide(s) for s in scatter_list] if scatter_list is not None else None,
                     src)
        t.copy_(f)

    def ring(self, send, recv):
        """send to rank+1 and receive from rank-1, as one batch_isend_irecv."""
        if ("send_recv.ring", send.dtype) in self.lacks:
            f = wide(recv)
            self.ring(wide(send), f)
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
            f = wide(recv)
            self.pair(wide(send), f, peer)
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
            assert sorted(calls) == sorted(GLOO_NAMES), "GLOO_NAMES is the probe's calls"
            for name, fn in calls.items():
                try:
                    fn()
                except RuntimeError as e:
                    self.lacks[(name, dt)] = str(e).strip().splitlines()[0][:120]

    def assume_lacking(self, name, dt):
        """Treat NAME on dtype DT as refused by gloo (--gloo-lacks): its emulation then runs
        whatever this PyTorch's gloo serves."""
        self.lacks[(name, dt)] = "named by --gloo-lacks"

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
