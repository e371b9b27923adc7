#!/usr/bin/env python3
"""bench/graph_timeline.py TRACE.csv REPLAYS — where a graph-replayed step's time goes
between its kernels.

TRACE.csv is Nsight Systems' GPU trace of REPLAYS replays of one CUDA graph and nothing else
(`nsys stats --report cuda_gpu_trace --format csv` of a run recorded with
--capture-range=cudaProfilerApi around `dev/ops_cuda_bench -P REPLAYS`; bench/graph_timeline_gpu.sh
does both). Graph launches on one stream run one after the other, so the trace, ordered by start,
is REPLAYS runs of the same operations in the same order; each must hold the same count.

Per replay: the span (first start to last end), the time some operation runs (the union of
their intervals: the two streams' operations overlap) and the time none does (idle). Then, on the
replay of median span, every gap where the GPU ran nothing (an operation's start after the last
end before it), largest first, with the operations on both sides; and by kernel name, how many
ran, their time and the idle time before them, as medians over the replays of each position.

Only the standard library: the CSV module reads the quoted names (template arguments hold
commas). Prints the summary (markdown) on standard output.
"""
import csv
import statistics
import sys


def fail(msg):
    sys.stderr.write("graph_timeline: %s\n" % msg)
    sys.exit(2)


def column(header, *prefixes):
    for i, h in enumerate(header):
        for p in prefixes:
            if h.strip().lower().startswith(p):
                return i
    return -1


def short(name):
    """A kernel's name without its return type, arguments or template arguments."""
    n = name.strip()
    if n.startswith("void "):
        n = n[5:]
    depth, out = 0, []
    for ch in n:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif ch == "(" and depth == 0:
            break
        elif depth == 0:
            out.append(ch)
    s = "".join(out).strip()
    return s if s else n[:60]


def read_trace(path):
    try:
        f = open(path, newline="", encoding="utf-8", errors="replace")
    except OSError as e:
        fail("cannot read %s: %s" % (path, e.strerror))
    with f:
        rows = list(csv.reader(f))
    # nsys may print lines before the table; the header is the first row naming a start column
    for h, row in enumerate(rows):
        if column(row, "start") >= 0 and column(row, "duration") >= 0 and column(row, "name") >= 0:
            break
    else:
        fail("%s has no header with Start, Duration and Name columns" % path)
    header = rows[h]
    cs, cd, cn = column(header, "start"), column(header, "duration"), column(header, "name")
    ops = []
    for r in rows[h + 1:]:
        if len(r) <= max(cs, cd, cn) or not r[cs].strip():
            continue
        try:
            start, dur = float(r[cs]), float(r[cd])
        except ValueError:
            fail("%s: a row whose start or duration is not a number: %r" % (path, r[:3]))
        if dur < 0 or start < 0:
            fail("%s: a negative start or duration" % path)
        ops.append((start, start + dur, r[cn]))
    ops.sort(key=lambda o: (o[0], o[1]))
    return ops


def replay_stats(ops):
    """span, busy (the union), idle gaps as (index of the op after, gap) on one replay."""
    first, last = ops[0][0], max(o[1] for o in ops)
    busy, gaps, end = 0.0, [], ops[0][0]
    for i, (s, e, _) in enumerate(ops):
        if s > end:
            gaps.append((i, s - end))
            busy += e - s
            end = e
        elif e > end:
            busy += e - end
            end = e
    return last - first, busy, gaps


def us(ns):
    return ns / 1e3


def main(argv):
    if len(argv) != 3:
        fail("usage: graph_timeline.py TRACE.csv REPLAYS")
    try:
        n = int(argv[2])
    except ValueError:
        n = 0
    if n < 1:
        fail("REPLAYS must be a count, 1 or more")
    ops = read_trace(argv[1])
    if not ops:
        fail("%s holds no operations" % argv[1])
    if len(ops) % n:
        fail("%d operations do not split into %d replays of one count (was anything else "
             "recorded?)" % (len(ops), n))
    k = len(ops) // n
    reps = [ops[r * k:(r + 1) * k] for r in range(n)]
    names = [short(o[2]) for o in reps[0]]
    for r, rep in enumerate(reps[1:], 1):
        if [short(o[2]) for o in rep] != names:
            fail("replay %d runs other operations than replay 0 (the trace is not %d replays "
                 "of one graph)" % (r, n))
    stats = [replay_stats(rep) for rep in reps]
    out = []
    w = out.append
    w("# Where the graph-replayed step's time goes between its kernels")
    w("")
    w("%d replays of %d operations each (kernels, copies and memsets as the trace lists them)."
      % (n, k))
    w("")
    w("| replay | span us | some op running us | idle us | idle % | idle gaps |")
    w("|---:|---:|---:|---:|---:|---:|")
    for r, (span, busy, gaps) in enumerate(stats):
        w("| %d | %.1f | %.1f | %.1f | %.1f | %d |" % (r, us(span), us(busy), us(span - busy),
                                                     100 * (span - busy) / span if span else 0,
                                                     len(gaps)))
    order = sorted(range(n), key=lambda r: stats[r][0])
    m = order[(n - 1) // 2]
    span, busy, gaps = stats[m]
    w("")
    w("The replay of median span is %d: %.1f us, of which %.1f us (%.1f %%) with no operation "
      "running, in %d gaps." % (m, us(span), us(span - busy),
                                100 * (span - busy) / span if span else 0, len(gaps)))
    bins = [(0, 1e3), (1e3, 2e3), (2e3, 5e3), (5e3, float("inf"))]
    w("")
    w("| gap | count | us in all |")
    w("|---|---:|---:|")
    for lo, hi in bins:
        sel = [g for _, g in gaps if lo <= g < hi]
        label = ("under %.0f us" % us(hi) if lo == 0 else
                 "%.0f us and more" % us(lo) if hi == float("inf") else
                 "%.0f to %.0f us" % (us(lo), us(hi)))
        w("| %s | %d | %.1f |" % (label, len(sel), us(sum(sel))))
    rep = reps[m]
    w("")
    w("The largest gaps (replay %d), with the operation that ended last before each and the one "
      "after it:" % m)
    w("")
    w("| gap us | after | before | at us |")
    w("|---:|---|---|---:|")
    ends = []
    last_i, end = 0, rep[0][1]
    for i, (s, e, _) in enumerate(rep):
        ends.append(last_i)
        if e >= end:
            end, last_i = e, i
    for i, g in sorted(gaps, key=lambda t: -t[1])[:25]:
        w("| %.2f | %s | %s | %.1f |" % (us(g), short(rep[ends[i]][2]), names[i],
                                         us(rep[i][0] - rep[0][0])))
    # per position, medians over the replays: duration and the idle time before it
    idle_before = []
    for rp in reps:
        ib, end = [0.0] * k, rp[0][0]
        for i, (s, e, _) in enumerate(rp):
            if s > end:
                ib[i] = s - end
            end = max(end, e)
        idle_before.append(ib)
    dur = [statistics.median(rp[i][1] - rp[i][0] for rp in reps) for i in range(k)]
    idle = [statistics.median(ib[i] for ib in idle_before) for i in range(k)]
    by = {}
    for i, nm in enumerate(names):
        c, d, g = by.get(nm, (0, 0.0, 0.0))
        by[nm] = (c + 1, d + dur[i], g + idle[i])
    w("")
    w("By kernel name (medians over the replays of each position; sorted by time plus the idle "
      "time before them):")
    w("")
    w("| kernel | count | us running | us idle before | us idle before each |")
    w("|---|---:|---:|---:|---:|")
    for nm, (c, d, g) in sorted(by.items(), key=lambda t: -(t[1][1] + t[1][2])):
        w("| %s | %d | %.1f | %.1f | %.2f |" % (nm, c, us(d), us(g), us(g) / c))
    w("")
    w("Totals: %.1f us running (summed, overlap counted twice), %.1f us idle before "
      "operations (medians)." % (us(sum(dur)), us(sum(idle))))
    sys.stdout.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
