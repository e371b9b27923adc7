#!/usr/bin/env python3
"""Compare the per-step losses of two training runs' log.jsonl(.gz) files (./train --out DIR).

Usage: bench/compare_losses.py A/log.jsonl B/log.jsonl [label]
Prints how many common steps have identical losses, the largest difference and the mean of the
last 500 steps of each; exits 0 (a report, not a verdict)."""
import gzip
import json
import sys


def losses(path):
    opener = gzip.open if path.endswith(".gz") else open
    out = {}
    with opener(path, "rt") as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("type") == "step":
                out[r["step"]] = r["loss"]
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    a, b = losses(sys.argv[1]), losses(sys.argv[2])
    label = sys.argv[3] if len(sys.argv) > 3 else "A vs B"
    steps = sorted(set(a) & set(b))
    same = sum(1 for s in steps if a[s] == b[s])
    diff = max((abs(a[s] - b[s]) for s in steps), default=0)
    last = steps[-500:]
    mean = lambda xs: sum(xs) / max(len(xs), 1)
    print(f"losses {label}: {len(steps)} common steps, {same} identical, max |diff| {diff:.3g}; "
          f"mean of the last 500: {mean([a[s] for s in last]):.6f} / {mean([b[s] for s in last]):.6f}")


if __name__ == "__main__":
    main()
