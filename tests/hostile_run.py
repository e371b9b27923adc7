#!/usr/bin/env python3
"""hostile_run.py DIR — writes DIR/run, a run folder as someone who wants to attack whoever opens
its report would write it: hostile strings (markup that would run a script, break out of an
attribute or an SVG text, bytes that are not UTF-8, control characters) in every field the
report reads, strings where numbers belong, numbers that are not finite or absurdly large,
wrong types, and a planted script file; also DIR/account.json, a step account of the same kind,
and DIR/PAYLOADS, the markers of what would show that a script ran. Used by
tests/report_hostile.sh (the page's markup) and tests/report_browser.sh (a real browser).

A script that runs sets the attribute data-ran="yes" on the page's root element (written in
the payloads as 'y'+'es', so the marker appears in the page only if the script ran)."""
import json
import os
import sys

RUN = "document.documentElement.setAttribute('data-ran','y'+'es')"
PAYLOADS = [
    "<script>%s</script>" % RUN,
    "\"><svg onload=\"%s\">" % RUN,
    "'><img src=x onerror=\"%s\">" % RUN,
    "</text></svg><script>%s</script>" % RUN,
    "</title><script>%s</script>" % RUN,
    "<iframe src=\"javascript:%s\"></iframe>" % RUN,
    "]]><!-- <style>*{display:none}</style>",
    "\u2028\u2029\x00\x1b[31m\x7f",
    "javascript:%s" % RUN,
]
BAD_BYTES = b"\xff\xfe<script>" + RUN.encode() + b"</script>\xc0\xaf"


def hostile(i):
    return PAYLOADS[i % len(PAYLOADS)]


def main():
    root = sys.argv[1]
    run = os.path.join(root, "run")
    os.makedirs(run)
    n = 0

    def h():
        nonlocal n
        n += 1
        return hostile(n)

    steps = []
    for s in range(1, 13):
        m = {"parameters": 1.0, "gradients": 2.0, "activations": 3.0, "total": 6.0, "peak": 7.0,
             h(): h()}
        steps.append({"type": "step", "step": s, "epoch": 0, "loss": 1.0 / s, "lr": 0.01,
                      "loss_scale": 1, "images_per_s": 100.0 + s, "step_ms": 10.0,
                      "data_wait_ms": 0.5, "exposed_comm_ms": 1.0, "syncbn_ms": 0.2,
                      "skipped": False, "memory_mib": [m, m], "gpu_util": [50, h()],
                      "gpu_mem_used_mib": [h(), 100.0], h(): h()})
    bad = [  # records of every wrong shape: each is left out
        {"type": "step", "step": h(), "loss": 1.0},
        {"type": "step", "step": -1, "loss": 1.0},
        {"type": "step", "step": 1e300, "loss": 1.0},
        {"type": "step", "step": True, "loss": 1.0},
        {"type": h(), "step": 3},
        {"type": "step", "step": 13, "loss": h(), "images_per_s": 1e308, "step_ms": h(),
         "memory_mib": h(), "gpu_util": {h(): h()}},
        [h()], h(), 7, None,
    ]
    vals = [{"type": "val", "step": 12, "epoch": 0, "val_loss": 0.5, "val_miou": 0.25,
             "val_acc": 0.75, "val_seconds": h()}]
    with open(os.path.join(run, "log.jsonl"), "wb") as f:
        for rec in steps + bad + vals:
            f.write(json.dumps(rec).encode() + b"\n")
        f.write(BAD_BYTES + b"\n")
        f.write(b"{\"type\": \"step\", \"step\": 14, \"loss\": NaN, \"lr\": Infinity}\n")
        f.write(b"[" * 100000 + b"\n")  # deeper than any parser's recursion
        f.write(b"{\"type\": \"step\", \"step\": 1" + b"0" * 5000 + b"}\n")  # a 5001-digit step
    summary = {"steps": 12, "epochs": h(), "world": 2, "images_per_s": h(), "val_miou": 0.25,
               "val_loss": float("nan"), "wall_s": 1e300, "class_iou": [0.5, h(), None, 1e308],
               "miou_classes": h(), "peak_mib_per_rank": [h(), 7.0],
               "config": " | ".join(PAYLOADS),  # shown whole: every payload as text
               "memory": {"current": {"parameters": 1048576, h(): h(), "activations": h()},
                          "peak": h()}}
    raw = json.dumps(summary).encode().replace(b'"config": "', b'"config": "' + BAD_BYTES.replace(
        b"\"", b"'"), 1)
    with open(os.path.join(run, "summary.json"), "wb") as f:
        f.write(raw)
    for r in range(2):
        ev = [{"name": "process_name", "ph": "M", "pid": r, "tid": 0, "args": {"name": h()}},
              {"name": "thread_name", "ph": "M", "pid": r, "tid": h(), "args": {"name": h()}}]
        t = 1000.0
        for step in (11, 12):
            for name, tid, dur, args in (("step", 0, 900.0, {}), ("forward", 1, 300.0, {}),
                                         ("backward", 1, 400.0, {}),
                                         ("allreduce", 2, 200.0, {"bucket": 0, "bytes": 4096}),
                                         ("allreduce", 2, 100.0, {"bucket": h(), "bytes": h()}),
                                         (h(), 1, 50.0, {h(): 1.5, "x": h()}),
                                         ("optimizer", h(), 60.0, {}),
                                         ("forward", 1, h(), {}),
                                         ("forward", -3, 10.0, {}),
                                         ("forward", 1, 10.0, h())):
                args = dict(args, step=step) if isinstance(args, dict) else args
                ev.append({"name": name, "cat": h(), "ph": "X", "pid": r, "tid": tid, "ts": t,
                           "dur": dur, "args": args})
                t += 10.0
            t += 1000.0
        ev += [h(), 5, None, {"ph": "X"}, {"ph": "X", "name": "step", "pid": h(), "tid": 0,
                                           "ts": 1, "dur": 1, "args": {"step": 12}}]
        with open(os.path.join(run, "timeline-rank%d.json" % r), "w") as f:
            json.dump({"displayTimeUnit": h(), "otherData": {"rank": r, "clock": h()},
                       "traceEvents": ev}, f)
    for name, body in (("timeline-rank2.json", b"not json " + BAD_BYTES),
                       ("timeline-rank3.json", b"[1, 2]"),
                       ("timeline-rankX.json", b"{}"),
                       ("timeline-rank%s.json" % hostile(0).replace("/", ""), b"{}")):
        with open(os.path.join(run, name), "wb") as f:
            f.write(body)
    os.makedirs(os.path.join(run, "timeline-rank4.json"))  # a folder under a file's name
    with open(os.path.join(run, "planted.js"), "w") as f:
        f.write(RUN + "\n")
    with open(os.path.join(run, "report.html.js"), "w") as f:
        f.write(RUN + "\n")
    account = {"device": h(), "config": h(), "step_ms": 6.0, "images": 6, "ceiling_tflops": h(),
               "gflop": 10.0, "mfu": h(), "roofline_ms": 3.0, "engine": h(), "fused_layers": h(),
               "passes": [{"pass": h(), "ops": h(), "gflop": 1.0, "mb": h(), "ms": 1.0,
                           "roofline_ms": 0.5},
                          {"pass": h(), "ops": 3, "gflop": 1.0, "mb": 10, "ms": h()},
                          h(), None]}
    with open(os.path.join(root, "account.json"), "w") as f:
        json.dump(account, f)
    with open(os.path.join(root, "PAYLOADS"), "w") as f:
        json.dump(PAYLOADS, f)


if __name__ == "__main__":
    main()
