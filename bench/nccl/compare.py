#!/usr/bin/env python3
"""Comparisons for the NCCL-interface suite (no torch needed).

    compare.py hashes A.json B.json --mode identical|nccl   diff two collectives.py hash files
    compare.py summary OUTDIR                               the table clients_gpu.sh ends with

hashes --mode identical: every result of every rank must be bitwise equal (two runs of the same
library: it must be deterministic). --mode nccl: results of the "required" tier (integers,
MIN/MAX, data movement) must be equal; "float-exact" differences are listed as warnings,
"float" ones counted as information (see collectives.py). Exit status 1 on a failure.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402 - bench/nccl/common.py, found next to this script


# ---------------------------------------------------------------- hash files

def diff_hashes(a, b, mode):
    """-> (failures, warnings, infos, lines): lists of keys, and printable lines."""
    ea, eb = a.get("entries", {}), b.get("entries", {})
    failures, warnings, infos, lines = [], [], [], []
    for key in sorted(set(ea) | set(eb)):
        if key not in ea or key not in eb:
            where = "first" if key not in ea else "second"
            # A key only one run has is a test that raised there (its failure is counted in
            # that run) or a PyTorch-version difference: information, not a mismatch.
            infos.append(key)
            lines.append(f"info: {key}: missing in the {where} file")
            continue
        ta, sa, sb = ea[key]["tier"], ea[key]["sha"], eb[key]["sha"]
        if sa == sb:
            continue
        ranks = sorted(set(sa) | set(sb), key=int)
        bad = [r for r in ranks if sa.get(r) != sb.get(r)]
        msg = f"{key} [{ta}] differs on rank(s) {','.join(bad)}"
        if mode == "identical" or ta == "required":
            failures.append(key)
            lines.append("FAIL: " + msg)
        elif ta == "float-exact":
            warnings.append(key)
            lines.append("warn: " + msg)
        else:
            infos.append(key)
            lines.append("info: " + msg)
    return failures, warnings, infos, lines


def cmd_hashes(args):
    a, b = common.load_json(args.a), common.load_json(args.b)
    if a is None or b is None:
        print(f"cannot read {args.a if a is None else args.b}")
        return 1
    failures, warnings, infos, lines = diff_hashes(a, b, args.mode)
    in_both = len(set(a.get("entries", {})) & set(b.get("entries", {})))
    for line in lines[:200]:
        print(line)
    print(f"compare ({args.mode}): {in_both} results in both, {len(failures)} failures, "
          f"{len(warnings)} warnings, {len(infos)} informational")
    print("RESULT " + json.dumps({"test": "compare", "mode": args.mode, "common": in_both,
                                  "failures": len(failures), "warnings": len(warnings),
                                  "infos": len(infos)}))
    return 1 if failures else 0


# ---------------------------------------------------------------- summary

def read_steps(out):
    """steps.tsv (written by clients_gpu.sh): step, rc, seconds."""
    steps = {}
    try:
        with open(os.path.join(out, "steps.tsv")) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) >= 3 and parts[0] != "step":
                    steps[parts[0]] = {"rc": int(parts[1]), "s": float(parts[2])}
    except OSError:
        pass
    return steps


class Row:
    def __init__(self, name):
        self.name, self.ours, self.nccl, self.verdict, self.notes = name, "-", "-", "-", []

    def worst(self, verdict):
        order = {"-": 0, "INFO": 1, "PASS": 2, "WARN": 3, "FAIL": 4, "SKIP": 0}
        if order[verdict] > order.get(self.verdict, 0):
            self.verdict = verdict


def lib_check(row, res, want):
    """An "ours" run that NCCL served (preload not effective) proves nothing: say so."""
    if res and res.get("lib") not in (want, None, "unknown"):
        row.worst("FAIL")
        row.notes.append(f"ran on {res.get('lib')}, not {want}")


def first_error(out, name):
    """The most telling line of a step's log: the first of the most specific kind found."""
    keys = ("CUDA error", "undefined symbol", "FAIL", "Error:", "error:", "Traceback")
    try:
        with open(os.path.join(out, name + ".log"), errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for k in keys:
        hit = next((l.strip() for l in lines if k in l), None)
        if hit:
            return hit[:200]
    return None


def step_status(steps, name):
    st = steps.get(name)
    if st is None:
        return None
    if st["rc"] == 124 or st["rc"] == 137:
        return f"timed out after {st['s']:.0f} s"
    return None if st["rc"] == 0 else f"exit status {st['rc']}"


def no_result(steps, name):
    """What a row shows for a step that left no JSON file."""
    return f"no result ({step_status(steps, name) or 'no file'})"


def part_row(out, steps, name, first_step, fill, *extra, mildest="PASS"):
    """The row of one part of the suite: SKIP when its first step is not in steps.tsv (the part
    was not run), else filled in by fill(row, out, steps, *extra), with `mildest` as the verdict
    when fill found nothing worse."""
    row = Row(name)
    if first_step not in steps:
        row.verdict = "SKIP"
        return row
    fill(row, out, steps, *extra)
    row.worst(mildest)
    return row


def summary_imports(row, out, steps):
    st = steps["imports"]
    try:
        text = open(os.path.join(out, "imports.txt")).read()
    except OSError:
        text = ""
    union = next((l for l in text.splitlines() if l.startswith("## union")), "")
    missing = [l.split()[-1] for l in text.splitlines() if l.strip().startswith("MISSING")]
    row.ours = f"{union[3:].strip()}; missing in lib: {len(missing)}"
    if missing:
        row.notes.append("missing: " + " ".join(missing))
    row.worst("FAIL" if st["rc"] != 0 or missing else "PASS")


def summary_collectives(row, out, steps):
    runs = {k: common.load_json(os.path.join(out, f"coll_{k}.json"))
            for k in ("ours1", "ours2", "nccl")}

    def desc(k):
        r = runs[k]
        if r is None:
            return no_result(steps, f"coll_{k}")
        bad = step_status(steps, f"coll_{k}")
        s = f"{r['checks']} checks, {r['failures']} failed"
        return s + (f" ({bad})" if bad else "")

    row.ours = desc("ours1") + "; run 2: " + desc("ours2")
    for k in ("ours1", "ours2", "nccl"):
        if f"coll_{k}" in steps and step_status(steps, f"coll_{k}"):
            err = first_error(out, f"coll_{k}")
            row.notes.append(f"coll_{k}: {step_status(steps, f'coll_{k}')}" +
                             (f": {err}" if err else ""))
    for k in ("ours1", "ours2"):
        r = runs[k]
        if r is None or r["failures"] or step_status(steps, f"coll_{k}"):
            row.worst("FAIL")
        lib_check(row, r, "shmddp")
    if runs["ours1"] and runs["ours2"]:
        f, w, i, lines = diff_hashes(runs["ours1"], runs["ours2"], "identical")
        write_lines(out, "compare_ours_ours.txt", lines)
        row.notes.append(f"ours vs ours: {len(f)} results differ" + ("" if not f else
                         " (see compare_ours_ours.txt)"))
        if f:
            row.worst("FAIL")
    if "coll_nccl" in steps:
        row.nccl = desc("nccl")
        lib_check(row, runs["nccl"], "nccl")
        if runs["ours1"] and runs["nccl"]:
            f, w, i, lines = diff_hashes(runs["ours1"], runs["nccl"], "nccl")
            write_lines(out, "compare_ours_nccl.txt", lines)
            row.notes.append(f"ours vs NCCL: {len(f)} required results differ, {len(w)} "
                             f"float warnings, {len(i)} informational (compare_ours_nccl.txt)")
            if f:
                row.worst("FAIL")
            elif w:
                row.worst("WARN")


def write_lines(out, name, lines):
    with open(os.path.join(out, name), "w") as f:
        f.write("\n".join(lines) + ("\n" if lines else ""))


def summary_ddp(row, out, steps, tag):
    names = {k: f"ddp{tag}_{k}" for k in ("ours", "nccl")}
    res = {k: common.load_json(os.path.join(out, n + ".json")) for k, n in names.items()}

    def desc(k):
        r = res[k]
        if r is None:
            return no_result(steps, names[k])
        bad = step_status(steps, names[k])
        return (f"{r['img_s']:.1f} img/s, loss {r['loss'][0]:.4f}->{r['loss'][-1]:.4f}, "
                f"params equal {r['params_equal']}" + (f" ({bad})" if bad else ""))

    row.ours = desc("ours")
    ro = res["ours"]
    if ro is None or not ro.get("ok") or step_status(steps, names["ours"]):
        row.worst("FAIL")
    lib_check(row, ro, "shmddp")
    if names["nccl"] in steps:
        row.nccl = desc("nccl")
        rn = res["nccl"]
        lib_check(row, rn, "nccl")
        if ro and rn:
            lo, ln = ro["loss"], rn["loss"]
            k = min(len(lo), len(ln))
            rel = [abs(a - b) / max(abs(b), 1e-12) for a, b in zip(lo[:k], ln[:k])]
            last_rel = abs(ro["loss_last"] - rn["loss_last"]) / max(abs(rn["loss_last"]), 1e-12)
            row.notes.append(f"loss curves: max rel diff {max(rel):.3g}, last-10 mean rel diff "
                             f"{last_rel:.3g}; throughput ours/NCCL "
                             f"{ro['img_s'] / rn['img_s']:.2f}")
            # Both runs pick cuDNN algorithms by timing, so curves drift apart a little.
            if last_rel > 0.05:
                row.worst("WARN")


def summary_kill(row, out, steps):
    ro = common.load_json(os.path.join(out, "kill_ours.json"))
    rn = common.load_json(os.path.join(out, "kill_nccl.json"))
    row.ours = ro["summary"] if ro else no_result(steps, "kill_ours")
    lib_check(row, ro, "shmddp")
    if ro is None or ro["outcome"] not in ("error", "watchdog"):
        row.worst("FAIL")
    elif ro["outcome"] == "watchdog":
        row.worst("WARN")
        row.notes.append("ours noticed the dead peer only through the watchdog timeout")
    if "kill_nccl" in steps:
        row.nccl = rn["summary"] if rn else no_result(steps, "kill_nccl")
        lib_check(row, rn, "nccl")


def summary_cupy(row, out, steps):
    for k in ("ours", "nccl"):
        name = f"cupy_{k}"
        if name not in steps:
            continue
        r = common.load_json(os.path.join(out, name + ".json"))
        text = (f"{r['checks']} checks, {r['failures']} failed, version {r['version']}"
                if r else no_result(steps, name))
        setattr(row, k, text)
        lib_check(row, r, "shmddp" if k == "ours" else "nccl")
        if k == "ours" and (r is None or not r.get("ok")):
            row.worst("FAIL")


def summary_timing(row, out, steps):
    res = {k: common.load_json(os.path.join(out, f"timing_{k}.json")) for k in ("ours", "nccl")}

    def pick(r, nbytes):
        return next((x for x in r["rows"] if x["bytes"] == nbytes), None) if r else None

    def desc(k):
        r = res[k]
        if r is None:
            return no_result(steps, "timing_" + k)
        parts = []
        small = pick(r, 4)
        if small:
            parts.append(f"4 B {small['median_us']:.1f} us")
        for nb, label in ((256 << 20, "256 MiB"), (1 << 30, "1 GiB")):
            x = pick(r, nb)
            if x:
                parts.append(f"{label} {x['busbw_GBps']:.0f} GB/s")
        bad = step_status(steps, "timing_" + k)
        return ", ".join(parts) + (f", {r['failures']} wrong" if r["failures"] else "") + \
            (f" ({bad})" if bad else "")

    row.ours = desc("ours")
    lib_check(row, res["ours"], "shmddp")
    if res["ours"] is None or res["ours"]["failures"]:
        row.worst("FAIL")
    if "timing_nccl" in steps:
        row.nccl = desc("nccl")
        lib_check(row, res["nccl"], "nccl")
        if res["ours"] and res["nccl"]:
            ratios = []
            for x in res["ours"]["rows"]:
                y = pick(res["nccl"], x["bytes"])
                if y:
                    ratios.append(f"{x['bytes']}:{y['median_us'] / x['median_us']:.2f}")
            row.notes.append("speed ours/NCCL per size (bytes:ratio, >1 = ours faster): " +
                             " ".join(ratios))


def cmd_summary(args):
    out = args.out
    steps = read_steps(out)
    rows = [part_row(out, steps, "imports", "imports", summary_imports),
            part_row(out, steps, "collectives", "coll_ours1", summary_collectives),
            part_row(out, steps, "ddp", "ddp_ours", summary_ddp, ""),
            part_row(out, steps, "ddp+syncbn", "ddp_syncbn_ours", summary_ddp, "_syncbn"),
            part_row(out, steps, "kill worker", "kill_ours", summary_kill),
            part_row(out, steps, "cupy", "cupy_ours", summary_cupy),
            part_row(out, steps, "allreduce timing", "timing_ours", summary_timing,
                     mildest="INFO")]
    # Say why a failed step failed, next to its row (collectives does its own).
    by_prefix = [("ddp_syncbn_", rows[3]), ("ddp_", rows[2]), ("kill_", rows[4]),
                 ("cupy_", rows[5]), ("timing_", rows[6])]
    for name in steps:
        bad = step_status(steps, name)
        row = next((r for p, r in by_prefix if name.startswith(p)), None)
        if bad and row is not None:
            err = first_error(out, name)
            row.notes.append(f"{name}: {bad}" + (f": {err}" if err else ""))
            # Ours failing is decided per row above; NCCL failing makes the comparison moot.
            if name.endswith("_nccl"):
                row.worst("WARN")
    w0 = max(len(r.name) for r in rows)
    w1 = min(60, max(len(r.ours) for r in rows))
    w2 = min(60, max(len(r.nccl) for r in rows))
    lines = [f"{'step':{w0}}  {'ours (shmddp)':{w1}}  {'nccl':{w2}}  verdict",
             f"{'-' * w0}  {'-' * w1}  {'-' * w2}  -------"]
    for r in rows:
        lines.append(f"{r.name:{w0}}  {r.ours:{w1}}  {r.nccl:{w2}}  {r.verdict}")
        for n in r.notes:
            lines.append(f"{'':{w0}}    {n}")
    total = sum(s["s"] for s in steps.values())
    lines.append(f"steps: " + ", ".join(f"{k} {v['s']:.0f}s" + ("" if v["rc"] == 0 else
                                                               f" (rc {v['rc']})")
                                        for k, v in steps.items()) + f"; total {total:.0f} s")
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write(text + "\n")
    verdicts = {r.name: r.verdict for r in rows}
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump({"verdicts": verdicts, "steps": steps,
                   "rows": [vars(r) for r in rows]}, f, indent=1)
    common.print_result({"test": "summary", "verdicts": verdicts, "total_s": round(total, 1)})
    return 1 if "FAIL" in verdicts.values() else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("hashes")
    h.add_argument("a")
    h.add_argument("b")
    h.add_argument("--mode", choices=["identical", "nccl"], default="identical")
    s = sub.add_parser("summary")
    s.add_argument("out")
    args = ap.parse_args()
    sys.exit(cmd_hashes(args) if args.cmd == "hashes" else cmd_summary(args))


if __name__ == "__main__":
    main()
