#!/usr/bin/env python3
"""fed_median.py — our trainer's rate from several runs, leaving out the runs that waited for
their batches (the trainer's summary, "data wait": a run that waited 1 % of its step or more
measured the host, its loader or a stall of its cores, not the step). The median of the runs
that did not wait; where every run waited, none is given and the lines say so.

  fed_median.py anchor SPEED_TSV   bench/speed_anchor_gpu.sh's speed.tsv: per precision and
                                   engine, our runs, their median against each PyTorch row
  fed_median.py ab RUNS_TSV PREC   bench/step_ab_gpu.sh's runs (variant, images/s, data wait %
                                   per line): per variant its median, and against A's

Standard library only."""
import sys

WAIT_PCT = 1.0  # a run that waited this share of its step for data or more is left out


def number(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return None


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def split_fed(runs):
    """runs: (images/s, wait %) pairs with a rate. The ones that did not wait (a run without a
    wait figure counts as one that waited: nothing shows it did not), then the others."""
    fed = [r for r in runs if r[1] is not None and r[1] < WAIT_PCT]
    return fed, [r for r in runs if r not in fed]


def anchor(path):
    rows = [l.rstrip("\n").split("\t") for l in open(path) if not l.startswith("date\t")]
    ours = [r for r in rows if len(r) > 6 and r[2] == "shmddp" and number(r[5])]
    engines = []
    for r in ours:
        e = r[4].split(" (")[0]
        if e not in engines:
            engines.append(e)
    for prec in ("bf16", "fp32"):
        for eng in engines:
            mine = [r for r in ours if r[3] == prec and r[4].startswith(eng + " (")]
            if not mine:
                continue
            runs = [(number(r[5]), number(r[9]) if len(r) > 9 else None) for r in mine]
            fed, waited = split_fed(runs)
            print(f"{prec}: shmddp {eng} runs: " +
                  " ".join(f"{ips:.1f}" + (f" (waited {w} %)" if (ips, w) in waited else "")
                           for ips, w in runs))
            if not fed:
                print(f"{prec}: shmddp {eng}: every run waited for data: no ratio")
                continue
            best = median([ips for ips, _ in fed])
            how = f"median of {len(fed)} of {len(runs)} runs"
            if waited:
                how += f", {len(waited)} left out (waited for data)"
            for r in rows:
                if len(r) > 8 and r[2] == "torch" and r[3] == prec and number(r[5]):
                    mem = "-"
                    if number(mine[-1][6]) and number(r[6]):
                        mem = f"{number(mine[-1][6]) / number(r[6]):.2f} x"
                    print(f"{prec}: shmddp {eng} {best:.1f} img/s ({how}), {mine[-1][6]} MiB / "
                          f"{r[4]} {number(r[5]):.1f} img/s, {r[6]} MiB (compile {r[8]} s) = "
                          f"{best / number(r[5]):.3f} x speed, {mem} memory")


def ab(path, prec):
    runs = {}
    for line in open(path):
        f = line.rstrip("\n").split("\t")
        if len(f) < 3:
            continue
        ips = number(f[1])
        runs.setdefault(f[0], [])
        if ips:
            runs[f[0]].append((ips, number(f[2])))
    med = {}
    for v, rs in runs.items():
        fed, waited = split_fed(rs)
        if not fed:
            print(f"trainer {v} {prec}: every run waited for data ({len(rs)} runs): no figure")
            continue
        med[v] = median([ips for ips, _ in fed])
        line = f"trainer {v} {prec}: median of {len(fed)} runs that did not wait {med[v]:.1f} img/s"
        if v != "A" and "A" in med:
            line += f", {100 * (med[v] / med['A'] - 1):+.1f} % against A"
        if waited:
            line += f" ({len(waited)} left out: waited for data)"
        print(line)


def main(argv):
    if len(argv) == 3 and argv[1] == "anchor":
        anchor(argv[2])
    elif len(argv) == 4 and argv[1] == "ab":
        ab(argv[2], argv[3])
    else:
        sys.stderr.write("usage: fed_median.py anchor SPEED_TSV | ab RUNS_TSV PREC\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
