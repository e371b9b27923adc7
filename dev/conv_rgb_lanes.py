#!/usr/bin/env python3
"""The lane arithmetic of the few-channel 3x3 kernels (kernels/conv_rgb_cuda.cu,
kernels/conv_rgb_tf32_cuda.cu, kernels/conv_rgb.cuh), on the CPU.

Each kernel's lanes are walked as the kernel walks them: which taps and pixels a lane gathers
(the taps' nibbles and offsets, the pixel's edge masks), how it packs them into mma.sync
fragments, where the weights' and dY's fragments come from (the shared-memory fragment table,
the swizzled dY rows read by ldmatrix .trans, dY loaded from global memory), and where the
accumulators go (the forward's quad transpose and stores, the weight gradient's sums). The
fragments are checked against the PTX ISA's layouts of m16n8k16 (16-bit) and m16n8k8 (TF32):
every A, B element must be the im2col matrix's, the weights' or dY's element there, and the
forward's stores must cover every output once with its value. Prints "ok ..." and exits 0, or
names the first mismatch and exits 1.

--mutant-pair: the forward packs pixel g + 8's taps where pixel g's belong (a0/a1 swapped);
--mutant-swizzle: the weight gradient's ldmatrix rows read unswizzled; each must fail.
"""
import random
import sys

MUT = set(a for a in sys.argv[1:] if a.startswith("--mutant"))


class Mismatch(Exception):
    pass


def need(cond, what):
    if not cond:
        raise Mismatch(what)


def close(a, b):
    return abs(a - b) <= 1e-9 * (1 + abs(b))


def im2col(x, n, h, w, cin):
    P = n * h * w
    A = [[0.0] * 32 for _ in range(P)]
    for p in range(P):
        img, rem = divmod(p, h * w)
        yy, xx = divmod(rem, w)
        for tap in range(9 * cin):
            r, ci = divmod(tap, cin)
            ky, kx = divmod(r, 3)
            sy, sx = yy + ky - 1, xx + kx - 1
            if 0 <= sy < h and 0 <= sx < w:
                A[p][tap] = x[((img * h + sy) * w + sx) * cin + ci]
    return A


def locate(p, P, h, w):  # rgb_locate: the pixel's row and column masks
    if p >= P:
        return (0, 0)
    rem = p % (h * w)
    yy, xx = rem // w, rem % w
    return (2 | (1 if yy > 0 else 0) | (4 if yy + 1 < h else 0),
            2 | (1 if xx > 0 else 0) | (4 if xx + 1 < w else 0))


def taps(cin, w, N, tap_of):  # rgb_taps: nibbles and offsets
    off, code = [0] * N, 0
    for i in range(N):
        tap = tap_of(i)
        r, ci = divmod(tap, cin)
        ky, kx = divmod(r, 3)
        real = tap < 9 * cin
        off[i] = ((ky - 1) * w + kx - 1) * cin + ci if real else 0
        code |= ((ky | kx << 2) if real else 0xF) << (4 * i)
    return code, off


def gather(x, p, q, code, off, N, cin):  # rgb_gather
    v = []
    for i in range(N):
        c = (code >> (4 * i)) & 0xF
        ok = (q[0] >> (c & 3)) & (q[1] >> ((c >> 2) & 3)) & 1
        v.append(x[p * cin + off[i]] if ok else 0.0)
    return v


def quad_transpose(U):  # rgb_quad_transpose over the 32 lanes' 4 words
    for b in (1, 0):
        m = 1 << b
        for k in range(2):
            lo = k if b else 2 * k
            hi = lo | m
            send = [U[l][lo] if ((l & 3) >> b) & 1 else U[l][hi] for l in range(32)]
            for l in range(32):
                if ((l & 3) >> b) & 1:
                    U[l][lo] = send[l ^ m]
                else:
                    U[l][hi] = send[l ^ m]


def fwd16(n, h, w, cin, cout, rnd):
    """rgb_fwd: m16n8k16, A = pixels x taps from registers, B from the fragment table."""
    P = n * h * w
    x = [rnd.gauss(0, 1) for _ in range(P * cin)]
    wt = [[rnd.gauss(0, 1) for _ in range(9 * cin)] for _ in range(cout)]
    A = im2col(x, n, h, w, cin)
    nt = cout // 8
    y = [None] * (P * cout)
    for grp in range((P + 15) // 16):
        rows = [A[grp * 16 + r] if grp * 16 + r < P else [0.0] * 32 for r in range(16)]
        D = [[sum(rows[r][t] * (wt[k][t] if t < 9 * cin else 0.0) for t in range(32))
              for k in range(cout)] for r in range(16)]
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            code, off = taps(cin, w, 8, lambda i: 16 * (i >> 2) + 2 * t + (i & 1) + 8 * ((i >> 1) & 1))
            pa, pb = grp * 16 + g, grp * 16 + g + 8
            va = gather(x, pa, locate(pa, P, h, w), code, off, 8, cin)
            vb = gather(x, pb, locate(pb, P, h, w), code, off, 8, cin)
            if "--mutant-pair" in MUT:
                va, vb = vb, va
            for s in range(2):
                regs = [(va[4 * s], va[4 * s + 1]), (vb[4 * s], vb[4 * s + 1]),
                        (va[4 * s + 2], va[4 * s + 3]), (vb[4 * s + 2], vb[4 * s + 3])]
                for ri, (lo, hi) in enumerate(regs):  # PTX: a_2ri, a_2ri+1
                    row, col = g + 8 * (ri & 1), 16 * s + 2 * t + 8 * (ri >> 1)
                    need(close(lo, rows[row][col]) and close(hi, rows[row][col + 1]),
                         f"fwd16 A: group {grp} lane {lane} k-step {s} register {ri}")
                for j in range(nt):  # the fragment table sb[s][j][lane]
                    k = 8 * j + g
                    e = [wt[k][tap] if tap < 9 * cin else 0.0 for tap in
                         (16 * s + 2 * t, 16 * s + 2 * t + 1, 16 * s + 2 * t + 8, 16 * s + 2 * t + 9)]
                    for kk, v in zip((2 * t, 2 * t + 1, 2 * t + 8, 2 * t + 9), e):
                        tap = 16 * s + kk
                        need(close(v, wt[k][tap] if tap < 9 * cin else 0.0), "fwd16 B")
        # the epilogue: lane (g, t) holds D[g][8j + 2t, +1] and D[g + 8][...]
        for q in range(2):
            if 4 * q >= nt:
                break
            for half in (0, 8):
                U = [[(D[(l >> 2) + half][8 * (4 * q + u) + 2 * (l & 3)],
                       D[(l >> 2) + half][8 * (4 * q + u) + 2 * (l & 3) + 1])
                      if 4 * q + u < nt else (0.0, 0.0) for u in range(4)] for l in range(32)]
                if nt % 4 == 0:
                    quad_transpose(U)
                    for l in range(32):
                        p = grp * 16 + (l >> 2) + half
                        if p < P:
                            ch = 8 * (4 * q + (l & 3))
                            for u in range(4):
                                for e in range(2):
                                    need(y[p * cout + ch + 2 * u + e] is None, "fwd16: written twice")
                                    y[p * cout + ch + 2 * u + e] = U[l][u][e]
                else:
                    for l in range(32):
                        p = grp * 16 + (l >> 2) + half
                        for u in range(4):
                            if 4 * q + u >= nt or p >= P:
                                continue
                            ch = 8 * (4 * q + u) + 2 * (l & 3)
                            for e in range(2):
                                need(y[p * cout + ch + e] is None, "fwd16: written twice")
                                y[p * cout + ch + e] = U[l][u][e]
    for p in range(P):
        for k in range(cout):
            ref = sum(A[p][t] * wt[k][t] for t in range(9 * cin))
            need(y[p * cout + k] is not None and close(y[p * cout + k], ref),
                 f"fwd16: output pixel {p} channel {k}")


def wgrad16(n, h, w, cin, cout, rnd):
    """rgb_wgrad_part: m16n8k16, A = taps x pixels gathered, B = dY by ldmatrix .trans."""
    P = n * h * w
    x = [rnd.gauss(0, 1) for _ in range(P * cin)]
    dy = [rnd.gauss(0, 1) for _ in range(P * cout)]
    A = im2col(x, n, h, w, cin)
    nt = cout // 8
    seen = set()
    for grp in range((P + 15) // 16):
        p0 = grp * 16
        stage = {}  # (pixel, 16-byte slot) -> 8 channels, from the copies
        for qq in range(16 * nt):
            px, c = divmod(qq, nt)
            stage[px, c ^ (px & 7)] = [dy[(p0 + px) * cout + 8 * c + i] if p0 + px < P else 0.0
                                       for i in range(8)]
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            code, off = taps(cin, w, 4, lambda i: 16 * (i >> 1) + g + 8 * (i & 1))
            v = []
            for k in range(4):
                pk = p0 + 2 * t + (k & 1) + 8 * (k >> 1)
                v.append(gather(x, pk, locate(pk, P, h, w), code, off, 4, cin))
            for m in range(2):
                regs = [(v[0][2 * m], v[1][2 * m]), (v[0][2 * m + 1], v[1][2 * m + 1]),
                        (v[2][2 * m], v[3][2 * m]), (v[2][2 * m + 1], v[3][2 * m + 1])]
                for ri, (lo, hi) in enumerate(regs):
                    row, col = g + 8 * (ri & 1), 2 * t + 8 * (ri >> 1)
                    for cc, val in ((col, lo), (col + 1, hi)):
                        p = p0 + cc
                        need(close(val, A[p][16 * m + row] if p < P else 0.0),
                             f"wgrad16 A: group {grp} lane {lane} tile {m} register {ri}")
        for j in range(0, nt, 2):  # ldmatrix .x4 .trans: lane l addresses row l % 8 of matrix l / 8
            mats = []
            for mi in range(4):
                rows = []
                for r in range(8):
                    l = 8 * mi + r
                    px, c = (mi & 1) * 8 + (l & 7), j + (mi >> 1)
                    slot = c if "--mutant-swizzle" in MUT else c ^ (px & 7)
                    rows.append(stage.get((px, slot), [float("nan")] * 8))
                mats.append(rows)
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                r = [(mats[i][2 * t][g], mats[i][2 * t + 1][g]) for i in range(4)]
                for jj, lo8, hi8 in ((j, r[0], r[1]), (j + 1, r[2], r[3])):
                    for kk, val in ((2 * t, lo8[0]), (2 * t + 1, lo8[1]), (2 * t + 8, hi8[0]),
                                    (2 * t + 9, hi8[1])):
                        p = p0 + kk
                        need(close(val, dy[p * cout + 8 * jj + g] if p < P else 0.0),
                             f"wgrad16 B: group {grp} tiles {j} lane {lane}")
    for m in range(2):
        for j in range(nt):
            for lane in range(32):
                for e in range(4):
                    key = (16 * m + (lane >> 2) + 8 * (e >> 1), 8 * j + 2 * (lane & 3) + (e & 1))
                    need(key not in seen, "wgrad16: a sum written twice")
                    seen.add(key)
    need(len(seen) == 32 * cout, "wgrad16: sums missing")


def tf32(n, h, w, cin, cout, rnd):
    """rgb_tf32_fwd and rgb_tf32_wgrad_part: m16n8k8 fragments."""
    P = n * h * w
    x = [rnd.gauss(0, 1) for _ in range(P * cin)]
    A = im2col(x, n, h, w, cin)
    KS, MT = (9 * cin + 7) // 8, (9 * cin + 15) // 16
    frag = ((0, 0), (8, 0), (0, 4), (8, 4))  # PTX a0..a3: (row g +, col t +)
    for grp in range((P + 15) // 16):
        p0 = grp * 16
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            code, off = taps(cin, w, 2 * KS, lambda i: 8 * (i >> 1) + t + 4 * (i & 1))
            pa, pb = p0 + g, p0 + g + 8
            va = gather(x, pa, locate(pa, P, h, w), code, off, 2 * KS, cin)
            vb = gather(x, pb, locate(pb, P, h, w), code, off, 2 * KS, cin)
            for s in range(KS):
                a = [va[2 * s], vb[2 * s], va[2 * s + 1], vb[2 * s + 1]]
                for ri, (dr, dc) in enumerate(frag):
                    p = p0 + g + dr
                    need(close(a[ri], A[p][8 * s + t + dc] if p < P else 0.0),
                         f"tf32 fwd A: group {grp} lane {lane} k-step {s} register {ri}")
            code, off = taps(cin, w, 2 * MT, lambda i: 16 * (i >> 1) + g + 8 * (i & 1))
            for s in range(2):
                v = []
                for e in range(2):
                    pe = p0 + 8 * s + t + 4 * e
                    v.append(gather(x, pe, locate(pe, P, h, w), code, off, 2 * MT, cin))
                for m in range(MT):
                    a = [v[0][2 * m], v[0][2 * m + 1], v[1][2 * m], v[1][2 * m + 1]]
                    for ri, (dr, dc) in enumerate(frag):
                        p = p0 + 8 * s + t + dc
                        need(close(a[ri], A[p][16 * m + g + dr] if p < P else 0.0),
                             f"tf32 wgrad A: group {grp} lane {lane} k-step {s} tile {m}")
    for p in range(P):  # the taps past the k-steps' and tiles' reach are zero
        need(all(A[p][tap] == 0.0 for tap in range(8 * KS, 32)), "tf32: taps past K")


def main():
    rnd = random.Random(1)
    shapes = [(2, 5, 7, 3, 64), (1, 3, 3, 1, 16), (2, 4, 6, 2, 48), (1, 9, 11, 3, 32),
              (3, 1, 5, 3, 64), (2, 4, 5, 2, 32), (1, 2, 1, 1, 16)]
    try:
        for sh in shapes:
            fwd16(*sh, rnd)
            wgrad16(*sh, rnd)
            tf32(*sh, rnd)
    except Mismatch as e:
        print(f"mismatch: {e}")
        return 1
    print(f"ok {len(shapes)} shapes: forward, weight gradient (16-bit) and TF32 fragments")
    return 0


if __name__ == "__main__":
    sys.exit(main())
