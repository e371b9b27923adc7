#!/usr/bin/env python3
"""conv_sm90_wgrad_protocol.py — a model of the barrier protocol of the weight-gradient kernels
(kernels/conv_sm90_wgrad_wide_cuda.cu, one block; kernels/conv_sm90_wgrad_cuda.cu runs the same
protocol): the loader thread, the prologue warps, the three consumer warpgroups (one per kernel
row ky) and the copy engine, in random interleavings. Each role walks the kernel's sequence —
the block's K range of row tiles cut into runs down column strips (wrun_of), R L + 2 x strips
and L dy strips a run of L tiles of R image rows (R = 1; 2 and 4 on images 32 and 16 wide) — with the kernel's slot and parity arithmetic; mbarriers are modelled by
their phases (arrival count and transaction bytes), wgmma.wait_group 1 by keeping only the
newest group in flight. It checks that every run ends (no deadlock), that every read (the
prologue's pass, ldmatrix of a dy strip, a wgmma's x strip lines) finds the strip it expects
(normalised where there is a prologue), and that no x slot is loaded again while a wgmma in
flight still reads it. The split-K plan of the wide kernel is modelled too (wplan): every row
tile in exactly one split, splits of at least 8 tiles when there are several. Change the model
with the kernel.

usage: python3 dev/conv_sm90_wgrad_protocol.py [--mutant]   (seconds; prints "ok N runs")
--mutant: the consumers free each tile's strips one row late (the next tile's first row instead
of the tile's last), a defect the model must catch: it exits with an error (tests/
conv_sm90_protocol.sh checks that it does)."""
import random, sys

sys.dont_write_bytecode = True  # nothing written next to the sources
from sm90_protocol_model import Bar, interleave

MUTANT = '--mutant' in sys.argv[1:]

XS, DS = 14, 11


def runs(h, tiles_x, t0, t1):
    """The kernel's runs of tiles [t0, t1): (image, x0, ya, len)."""
    t = t0
    while t < t1:
        strip = t // h; ya = t - strip * h; ln = min(t1 - t, h - ya)
        yield (strip // tiles_x, (strip % tiles_x) * 64, ya, ln)
        t += ln


def run(h, tiles_x, t0, t1, PRO, seed, xs=XS, ds=DS, rows=1):
    rnd = random.Random(seed)
    xfull = [Bar(1) for _ in range(xs)]; xready = [Bar(96) for _ in range(xs)]
    xempty = [Bar(3) for _ in range(xs)]; dfull = [Bar(1) for _ in range(ds)]
    dempty = [Bar(3) for _ in range(ds)]
    xslot = [None] * xs      # (strip j, normalised) or 'writing'
    dslot = [None] * ds      # dy strip i or 'writing'
    inflight = [[], [], []]  # per consumer: groups, each the x slot its wgmmas read
    tma = []
    R = list(runs(h, tiles_x, t0, t1))

    def loader():
        i = j = 0
        def load_x(jj):
            s = jj % xs
            if jj >= xs:
                while not xempty[s].done((jj // xs - 1) & 1): yield
            for c in range(3):
                assert s not in inflight[c], "x slot loaded under a wgmma in flight"
            xfull[s].expect_tx(1); xslot[s] = 'writing'; tma.append(('x', s, jj, xfull[s]))
            yield
        for (_, _, _, ln) in R:
            yield from load_x(j); yield from load_x(j + 1)
            for k in range(ln):
                for q in range(rows):
                    yield from load_x(j + rows * k + 2 + q)
                s = i % ds
                if i >= ds:
                    while not dempty[s].done((i // ds - 1) & 1): yield
                dfull[s].expect_tx(1); dslot[s] = 'writing'; tma.append(('d', s, i, dfull[s]))
                i += 1; yield
            j += rows * ln + 2

    def prologue():
        j = 0
        for (_, _, _, ln) in R:
            for q in range(rows * ln + 2):
                s = j % xs
                while not xfull[s].done((j // xs) & 1): yield
                if PRO:
                    assert xslot[s] == (j, False), ("prologue reads", xslot[s], j)
                    xslot[s] = (j, True)
                for _ in range(96): xready[s].arrive()
                j += 1; yield

    def consumer(ky):
        i = j = 0
        for (_, _, _, ln) in R:
            for k in range(ln):
                jx = j + rows * k + ky; sd = i % ds
                for q in range(rows):
                    while not xready[(jx + q) % xs].done(((jx + q) // xs) & 1): yield
                while not dfull[sd].done((i // ds) & 1): yield
                for ks in range(4):
                    jk = jx + 16 * ks // (64 // rows); sx = jk % xs   # the k-step's row
                    assert dslot[sd] == i, ("ldmatrix reads", dslot[sd], i, ky)
                    assert xslot[sx] == (jk, bool(PRO)), ("wgmma reads", xslot[sx], jk, ky)
                    inflight[ky].append(sx)
                    inflight[ky] = inflight[ky][-1:]   # wait_group 1
                    yield
                inflight[ky] = []                      # wait_group 0
                dempty[sd].arrive()
                for q in range(rows):
                    xempty[(j + rows * k + q + (1 if MUTANT else 0)) % xs].arrive()
                i += 1; yield
            jl = j + rows * ln + 1
            while not xready[jl % xs].done((jl // xs) & 1): yield
            xempty[(jl - 1) % xs].arrive(); xempty[jl % xs].arrive()
            j += rows * ln + 2; yield

    actors = {'L': loader(), 'P': prologue(), 'C0': consumer(0), 'C1': consumer(1),
              'C2': consumer(2)}
    def complete(op):
        kind, s, tag, bar = op
        if kind == 'x': xslot[s] = (tag, False)
        else: dslot[s] = tag
        bar.complete_tx(1)
    return interleave(rnd, actors, tma, complete, engine_weight=2)


def wplan(n, h, w, cin, cout, sms):
    """The wide kernel's split-K plan (kernels/conv_sm90_wgrad_wide_cuda.cu)."""
    tw = w if w in (16, 32) else 64
    tiles = n * -(-h // (64 // tw)) * -(-w // tw); ot = (cin // 64) * (cout // 64)
    s = sms // ot if ot < sms else 1
    s = min(s, max(1, tiles // 8), max(1, (64 << 20) // (36 * cin * cout)))
    s = max(s, 1)
    per = -(-tiles // s) if tiles else 1
    splits = -(-tiles // per) if tiles else 1
    return tiles, per, splits, ot


nruns = 0
# the plan: every tile in one split, splits of >= 8 tiles, no more blocks than multiprocessors
# unless the output tiles alone are more
for sms in (78, 114, 132, 144):
    for (n, h, w) in ((1, 1, 1), (2, 5, 70), (3, 5, 130), (6, 16, 16), (6, 32, 32),
                      (6, 128, 128), (6, 256, 256)):
        for cin in (64, 128, 192, 256, 512, 1024):
            for cout in (64, 128, 320, 512, 1024):
                tiles, per, splits, ot = wplan(n, h, w, cin, cout, sms)
                assert (splits - 1) * per < tiles <= splits * per
                assert splits == 1 or per >= 8
                assert splits * ot <= max(sms, ot)
                assert splits * 36 * cin * cout <= 64 << 20 or splits == 1
# the protocol: blocks of the plans' shapes (image height h, column strips a row, the split's
# tile range), runs that cross strips and images and start part-way down a strip, one-row
# images, ranges longer than the rings
for (h, tiles_x, t0, t1) in ((1, 1, 0, 1), (5, 2, 9, 18), (5, 3, 0, 9), (1, 5, 3, 11),
                             (16, 1, 0, 48), (25, 3, 40, 80), (64, 2, 100, 160)):
    for PRO in (0, 1):
        for seed in range(6):
            run(h, tiles_x, t0, t1, PRO, seed); nruns += 1
# tiles of whole rows (images 32 and 16 wide: 2 and 4 rows a tile; h here counts tiles down
# the image): runs of one tile, runs longer than the x ring holds strips, ranges across images
for rows in (2, 4):
    for (h, t0, t1) in ((1, 0, 3), (3, 2, 11), (8, 0, 24), (16, 5, 40)):
        for PRO in (0, 1):
            for seed in range(4):
                run(h, 1, t0, t1, PRO, seed, rows=rows); nruns += 1
# smaller rings than the kernel's (the deadlock argument needs XS >= R + 2, DS >= 1)
for seed in range(6):
    run(5, 2, 0, 20, 1, seed, xs=3, ds=1); nruns += 1
# and with tiles of R rows, the smallest x ring that holds a tile's R + 2 strips
for rows in (2, 4):
    for seed in range(4):
        run(4, 1, 0, 12, 1, seed, xs=rows + 2, ds=1, rows=rows); nruns += 1
print("ok", nruns, "runs")
