#!/usr/bin/env python3
"""conv_sm90_protocol.py — a model of the barrier protocol of kernels/conv_sm90_cuda.cu (the
64 -> 64 forward and dgrad, one block): the loader thread, the three prologue warps, the two
consumer warpgroups, the copy engine's loads and stores, run in random interleavings. Each role
walks the block's tiles with the kernel's stage and parity arithmetic; mbarriers are modelled by
their phases (arrival count and transaction bytes). Shared memory is modelled by line ranges:
a halo stage holds lines 0..263 (4 rows of 66 pixels), an output tile 128 lines (2 rows of 64).
Asynchronous readers (wgmmas between issue and wait, a tensor store until its read is done)
hold the lines they read; every write asserts that none of its lines is held, and every read
asserts the lines hold what it expects (the tile, normalised by the prologue or not). It checks
that every run ends (no deadlock) and no read or write breaks those rules.

COUT_M's 64 -> 128 (output-channel halves, the kernel's params) needs no model of its own:
each block is this one block on its half of the output channels, with the same roles, stages,
barriers and phases; only which tiles it walks (every bph-th from its place in its half), the
weights' box it loads and the channel offset of its stores change, and the two halves' blocks
share no shared memory or barrier (they write disjoint channels of the output).

Layouts (conv_sm90.h):
  pixels  PIXELS_M: per tile 36 k-steps reading the whole halo (both image rows at once), then
          the named barrier. Forward (3 stages): the storing thread first waits until its last
          store has read the warpgroup's output buffer, the stage goes back after the barrier,
          and the output is written into that buffer. dgrad (3 stages): the previous tile's
          stage handed back when this tile starts, once its store has read it, before the wait
          for this tile's stage; the output written into the stage after every warp's k-steps
          are done.
  cout    COUT_M: image row 0's k-steps (halo rows 0..2, lines 0..197), wait, row 0's output,
          then row 1's (halo rows 1..3, lines 66..263), wait, row 1's output; each warpgroup's
          output tile in a buffer of its own (the weights' shared memory), written once its
          last store has read it; the stage handed back as soon as row 1's k-steps are done,
          before the epilogue. The forward's prologue is done by the consumer warpgroup on its
          stage before its k-steps (the prologue warps only pass full on as ready).
--mutant  COUT_M handing the stage back right after row 1's k-steps are issued, before they are
          done: the model must fail.
--mutant-out  the PIXELS_M forward writing its output buffer without waiting for the last
          store's read: the model must fail.
--mutant-dg  the PIXELS_M dgrad handing the previous tile's stage back without waiting for its
          store's read: the model must fail.

usage: python3 dev/conv_sm90_protocol.py [--mutant | --mutant-out | --mutant-dg]
       (prints "ok N runs")"""
import random, sys

sys.dont_write_bytecode = True  # nothing written next to the sources
from sm90_protocol_model import Bar, interleave

HALO_W, HALO_LINES, TILE_LINES = 66, 264, 128

class Buf:
    """a shared-memory buffer: what each line holds, and the line ranges asynchronous readers
    hold"""
    def __init__(s, name, lines): s.name, s.val, s.held = name, [None] * lines, []
    def write(s, lo, hi, v, who):
        for (a, b, r) in s.held:
            assert hi <= a or b <= lo, "%s writes %s lines %d..%d held by %s" % (
                who, s.name, lo, hi - 1, r)
        for l in range(lo, hi): s.val[l] = v
    def check(s, lo, hi, v, who):
        got = set(s.val[lo:hi])
        assert got == {v}, "%s reads %s lines %d..%d: %s, expected %s" % (
            who, s.name, lo, hi - 1, sorted(map(str, got)), v)
    def hold(s, lo, hi, who): s.held.append((lo, hi, who)); return (lo, hi, who)
    def release(s, h): s.held.remove(h)

def run(layout, ntiles, block, grid, stages, pro, dg, seed, mutant=False, mutant_out=False,
        mutant_dg=False):
    cm = layout == 'cout'  # COUT_M: its own output buffers, its forward prologue the consumers'
    own = cm or not dg     # the output tile in the warpgroup's own buffer (both forwards)
    obuf = [Buf('out buffer %d' % w, TILE_LINES) for w in range(2)]
    rnd = random.Random(seed)
    full = [Bar(1) for _ in range(stages)]; ready = [Bar(96) for _ in range(stages)]
    empty = [Bar(1) for _ in range(stages)]
    stage = [Buf("stage %d" % s, HALO_LINES) for s in range(stages)]
    xt = [Buf("x tile %d" % w, TILE_LINES) for w in range(2)]
    xbar = [Bar(1) for _ in range(2)]
    engine = []          # pending copies: (kind, buf, lo, hi, value, bar or hold)
    stores = [[], []]    # per warpgroup: its stores whose reads are not done
    tiles = list(range(block, ntiles, grid))  # the block's tiles; the i-th goes to warpgroup i % 2
    def loader():
        for i, t in enumerate(tiles):
            s, k = i % stages, i // stages
            if k > 0:
                while not empty[s].done((k - 1) & 1): yield
            full[s].expect_tx(1)
            engine.append(('load', stage[s], 0, HALO_LINES, ('halo', t, False), full[s]))
            yield
    def prologue(w):  # a prologue warp: its lines are w, w + 3, ... (a share of every line set)
        for i, t in enumerate(tiles):
            s, k = i % stages, i // stages
            while not full[s].done(k & 1): yield
            if pro and not dg and not cm:
                lines = range(w, HALO_LINES, 3)
                for l in lines:
                    assert stage[s].val[l] == ('halo', t, False), ("prologue reads", l, stage[s].val[l], t)
                for l in lines:
                    stage[s].write(l, l + 1, ('halo', t, True), "prologue")
            ready[s].arrive(32)
            yield
    def consumer(wg):
        norm = pro and not dg
        pending, nt = -1, 0
        for i in range(wg, len(tiles), 2):
            t, s, k = tiles[i], i % stages, i // stages
            if dg:  # thread 0 loads the x tile at the output tile (the mask's and sums' input)
                xbar[wg].expect_tx(1)
                engine.append(('load', xt[wg], 0, TILE_LINES, ('x', t), xbar[wg]))
            if pending >= 0:  # dgrad: the previous tile's stage back, before this tile's wait
                if not mutant_dg:
                    while stores[wg]: yield   # tma_store_wait_read
                empty[pending].arrive()
                yield
            while not ready[s].done(k & 1): yield
            want = ('halo', t, norm)
            if layout == 'pixels':
                stage[s].check(0, HALO_LINES, want, "ldmatrix")
                h = stage[s].hold(0, HALO_LINES, "k-steps of tile %d" % t)
                yield
                yield
                if not dg and not mutant_out:
                    while stores[wg]: yield  # the storing thread, before the barrier
                stage[s].release(h)          # wgmma.wait_group 0, then the named barrier
                if not dg: empty[s].arrive() # the forward's stage back
                yield
                if dg:
                    while not xbar[wg].done(nt & 1): yield
                    xt[wg].check(0, TILE_LINES, ('x', t), "epilogue (x tile)")
                (stage[s] if dg else obuf[wg]).write(0, TILE_LINES, ('out', t), "epilogue")
            else:
                if norm:  # the consumers normalise their own stage before the k-steps
                    stage[s].check(0, HALO_LINES, ('halo', t, False), "the consumers' prologue")
                    stage[s].write(0, HALO_LINES, want, "the consumers' prologue")
                    yield
                for mb in (0, 1):
                    lo, hi = mb * HALO_W, (mb + 3) * HALO_W
                    stage[s].check(lo, hi, want, "row %d's k-steps" % mb)
                    h = stage[s].hold(lo, hi, "row %d's k-steps of tile %d" % (mb, t))
                    yield
                    if mb == 0:
                        while stores[wg]: yield  # the output buffer's last store has read it
                    if mutant and mb == 1: empty[s].arrive()  # before the wait: caught
                    yield
                    stage[s].release(h)      # wgmma.wait_group 0, then the named barrier
                    if mb == 1 and not mutant: empty[s].arrive()
                    if dg and mb == 0:
                        while not xbar[wg].done(nt & 1): yield
                    if dg: xt[wg].check(mb * 64, mb * 64 + 64, ('x', t), "epilogue (x tile)")
                    obuf[wg].write(mb * 64, mb * 64 + 64, ('out', t), "row %d's epilogue" % mb)
                    yield
            ob = obuf[wg] if own else stage[s]
            h = ob.hold(0, TILE_LINES, "the store of tile %d" % t)
            stores[wg].append(h)
            engine.append(('store', ob, 0, TILE_LINES, ('out', t), (wg, h)))
            pending = -1 if own else s; nt += 1
            yield
        while stores[wg]: yield
    actors = {'L': loader(), 'C0': consumer(0), 'C1': consumer(1)}
    for w in range(3): actors['P%d' % w] = prologue(w)
    def complete(op):
        kind, buf, lo, hi, v, x = op
        if kind == 'load':
            buf.write(lo, hi, v, "a tensor load"); x.complete_tx(1)
        else:
            buf.check(lo, hi, v, "a tensor store"); wg, h = x
            buf.release(h); stores[wg].remove(h)
    return interleave(rnd, actors, engine, complete)

def main():
    args = sys.argv[1:]
    mutant, mutant_out, mutant_dg = '--mutant' in args, '--mutant-out' in args, '--mutant-dg' in args
    n = 0
    layouts = (('cout',) if mutant else ('pixels',) if mutant_out or mutant_dg
               else ('pixels', 'cout'))
    dgs = (0,) if mutant_out else (1,) if mutant_dg else (0, 1)
    for layout in layouts:
        for ntiles, grid in ((1, 1), (3, 1), (7, 2), (13, 3), (24, 4)):
            for block in range(min(grid, ntiles)):
                for dg in dgs:
                    stages = 4 if layout == 'cout' and not dg else 3  # conv_sm90_cuda.cu's lay
                    for pro in (0, 1):
                        for seed in range(20):
                            run(layout, ntiles, block, grid, stages, pro, dg, seed, mutant,
                                mutant_out, mutant_dg); n += 1
    print("ok", n, "runs")

main()
