"""What bench/torch_soak.py runs and checks: each rank's inputs (a pure function of seed, rank,
step and kind), the references computed from every rank's inputs, one step of collectives of every
kind and dtype, the DDP and FSDP2 models and their references, and the per-kind counts of calls
and errors. Why the comparisons can be exact is in bench/torch_soak.py's docstring. PyTorch is
handed in (importing this module is cheap: the soak checks its arguments before PyTorch loads)."""
import copy
import math
import random
import traceback

from torch_soak_comm import OPS, SHORT, Comm

DTYPE_NAMES = ["float32", "bfloat16", "float16", "int32", "int64", "uint8"]
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
# Largest model widths: the exactness bounds in bench/torch_soak.py's docstring hold up to these.
MAX_IN, MAX_HIDDEN, MAX_OUT, MAX_BATCH = 16, 16, 8, 8


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
        what = f"step {self.step} {kind}"
        if dtype is not None:
            what += " " + str(dtype).replace("torch.", "")
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
            return (f"{name}: got {got.dtype} {tuple(got.shape)}, "
                    f"want {want.dtype} {tuple(want.shape)}")
        diff = (got != want).view(-1)
        nbad = int(diff.sum().item())
        first = int(diff.nonzero()[0].item())
        g, w = got.reshape(-1)[first].item(), want.reshape(-1)[first].item()
        return (f"{name}: {nbad} of {got.numel()} elements differ, "
                f"first [{first}] got {g!r} want {w!r}")

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
    w, r = S.world, S.rank
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
