#!/usr/bin/env python3
"""conv_sm90_wide_protocol.py — a model of the barrier protocol of
kernels/conv_sm90_wide_cuda.cu (one block): the loader thread, the prologue warps, the two
consumer warpgroups and the copy engine, run in random interleavings. Each role walks the
kernel's sequence of chunks and weight slices with the kernel's slot and parity arithmetic;
mbarriers are modelled by their phases (arrival count and transaction bytes), and
wgmma.wait_group 1 by keeping only the newest group in flight. It checks that every run ends
(no deadlock), that every read (the prologue's pass, ldmatrix of a halo chunk, a wgmma's
weight slice) finds the chunk or slice it expects, and that no weight slot is loaded again
while a wgmma in flight still reads it. Change the model with the kernel.

usage: python3 dev/conv_sm90_wide_protocol.py   (about a minute; prints "ok N runs")"""
import random, sys

sys.dont_write_bytecode = True  # nothing written next to the sources
from sm90_protocol_model import Bar, interleave

def run(KC, nitems, grid_b, G, HST, WST, PRO, seed, HALO_AT=3):
    rnd = random.Random(seed)
    full = [Bar(1) for _ in range(HST)]; ready = [Bar(96) for _ in range(HST)]
    hempty = [Bar(2) for _ in range(HST)]; wfull = [Bar(1) for _ in range(WST)]
    wempty = [Bar(2) for _ in range(WST)]
    halo = [None] * HST      # (chunk id, normalised) or 'writing'
    wslot = [None] * WST     # slice id or 'writing'
    inflight = [[], []]      # per consumer: list of groups, each a list of weight slots read
    tma = []                 # pending copies: (kind, slot, tag, bar)
    items = list(range(grid_b, nitems, G))
    def chunks():
        g = 0
        for it in items:
            for kc in range(KC): yield g; g += 1
    def loader():
        hn = 0; hiter = chunks()
        def next_halo():
            nonlocal hn
            g = next(hiter, None)
            if g is None: return
            s = hn % HST
            if hn >= HST:
                while not hempty[s].done((hn // HST - 1) & 1): yield
            full[s].expect_tx(1)
            halo[s] = 'writing'; tma.append(('h', s, g, full[s])); hn += 1
        yield from next_halo()
        wn = 0
        for it in items:
            for kc in range(KC):
                for tap in range(9):
                    s = wn % WST
                    if wn >= WST:
                        while not wempty[s].done((wn // WST - 1) & 1): yield
                    for c in (0, 1):
                        for grp in inflight[c]:
                            assert s not in grp, "weight slot overwritten under a wgmma"
                    wfull[s].expect_tx(1); wslot[s] = 'writing'; tma.append(('w', s, wn, wfull[s]))
                    wn += 1
                    if tap == HALO_AT: yield from next_halo()
                    yield
    def prologue():
        hn = 0
        for g in chunks():
            s = hn % HST
            while not full[s].done((hn // HST) & 1): yield
            assert halo[s] == (g, False), ("prologue reads", halo[s], g)
            halo[s] = (g, True)
            for _ in range(96): ready[s].arrive()
            hn += 1; yield
    def consumer(wg):
        hwait = ready if PRO else full
        hn = 0; wn = 0; g = 0
        def lda(s, gexp):
            assert halo[s] == (gexp, PRO), ("ldmatrix reads", halo[s], gexp, wg)
        for it in items:
            hs = hn % HST
            while not hwait[hs].done((hn // HST) & 1): yield
            stage = hs; lda(stage, g)
            prev_ws = prev_hs = 0
            for kc in range(KC):
                next_hs = hs
                for ks in range(36):
                    j = ks & 3; ws = wn % WST
                    if j == 0:
                        while not wfull[ws].done((wn // WST) & 1): yield
                    assert wslot[ws] == wn, ("wgmma reads", wslot[ws], wn)
                    inflight[wg].append([ws])
                    if ks + 1 < 36: lda(stage, g)
                    elif kc + 1 < KC:
                        next_hs = (hn + 1) % HST
                        while not hwait[next_hs].done(((hn + 1) // HST) & 1): yield
                        lda(next_hs, g + 1)
                    # wait_group 1: a random number of older groups may have retired already;
                    # afterwards at most the newest is in flight
                    inflight[wg] = inflight[wg][-1:]
                    if j == 0 and (kc or ks):
                        wempty[prev_ws].arrive()
                        if ks == 0: hempty[prev_hs].arrive()
                    if j == 3: prev_ws = ws; wn += 1
                    yield
                prev_hs = hs; hn += 1; hs = next_hs; stage = next_hs; g += 1
            inflight[wg] = []
            wempty[prev_ws].arrive(); hempty[prev_hs].arrive()
            yield
    actors = {'L': loader(), 'C0': consumer(0), 'C1': consumer(1)}
    if PRO: actors['P'] = prologue()
    def complete(op):
        kind, s, tag, bar = op
        if kind == 'h': halo[s] = (tag, False)
        else: wslot[s] = tag
        bar.complete_tx(1)
    return interleave(rnd, actors, tma, complete)

# chunks per item (cin / 64), items and blocks (this block b of G), ring depths (BN = 128 and
# 64), with and without the prologue
n = 0
for KC in (1, 2, 3, 5):
    for nitems, G in ((1, 1), (3, 2), (7, 3), (20, 4)):
        for b in range(min(G, nitems)):
            for (HST, WST) in ((2, 6), (3, 12)):
                for PRO in (0, 1):
                    for seed in range(4):
                        run(KC, nitems, b, G, HST, WST, PRO, seed); n += 1
print("ok", n, "runs")
