#!/bin/sh
# check_report.sh — tools/report end to end: a short 2-rank CPU run with --timeline prints the
# end-of-run table, and its report.html parses, has every section with a drawn SVG chart whose
# shapes stay inside the picture, draws both ranks' timeline rows; the merged trace is valid JSON
# with a pid per rank. A synthetic GPU run (NVML fields, stream rows) covers what CI cannot run.
# Skips (77) without python3.
set -u
command -v python3 >/dev/null 2>&1 || { echo "check_report: no python3; skipped"; exit 77; }
top=${top_builddir:-.}
src=${srcdir:-.}
tmp=$(mktemp -d /tmp/check_report_XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail() { echo "check_report: $*"; exit 1; }

"$top/shmddp-train" --device cpu --nproc 2 --out "$tmp/cpu" --classes 2 --image-size 32 \
  --widths 8,16 --train-size 96 --val-size 16 --epochs 2 --batch-size 4 --workers 0 \
  --bucket-mb 0.004 --timeline 2 --log-every 100 > "$tmp/train.log" 2>&1 ||
  { cat "$tmp/train.log"; fail "the training run failed"; }
for want in "^summary: 2 ranks, 24 steps (23 timed)" "^  exposed communication " \
            "^  memory ledger, peak MiB *rank 0 *rank 1" "^  timeline: .*timeline-rank0.json" \
            "^result: steps=24 "; do
  grep -q "$want" "$tmp/train.log" || { cat "$tmp/train.log"; fail "no '$want' in the output"; }
done

# A GPU run as the trainer writes it, made up: what NVML and CUDA events add.
python3 - "$tmp/gpu" <<'EOF' || fail "could not write the synthetic GPU run"
import json, os, sys
d = sys.argv[1]; os.makedirs(d)
mem = {"parameters": 118.0, "gradients": 118.0, "optimizer": 118.0, "activations": 2100.0,
       "workspace": 300.0, "communication": 0.0, "dp_gather": 0.0, "other": 0.0}
with open(os.path.join(d, "log.jsonl"), "w") as f:
    for s in range(1, 21):
        m = dict(mem, total=2754.0, peak=2760.0)
        f.write(json.dumps({"type": "step", "step": s, "epoch": 0, "loss": 1.5 - s * 0.05,
                            "lr": 0.01, "loss_scale": 1, "images_per_s": 1200 + s,
                            "step_ms": 10.0, "data_wait_ms": 0.1, "exposed_comm_ms": 1.5,
                            "syncbn_ms": 0.8, "skipped": False, "memory_mib": [m, m],
                            "gpu_util": [90, 88], "gpu_mem_used_mib": [3900.0, 3890.0]}) + "\n")
    f.write(json.dumps({"type": "val", "step": 20, "epoch": 0, "val_loss": 0.6,
                        "val_miou": 0.7, "val_acc": 0.9, "val_seconds": 0.2}) + "\n")
for r in range(2):
    ev = [{"name": "process_name", "ph": "M", "pid": r, "tid": 0, "args": {"name": "rank %d" % r}}]
    t = 1e6 + 3.0 * r
    for step in (19, 20):
        x = lambda n, tid, ts, dur, **a: ev.append(dict(name=n, cat="c", ph="X", pid=r, tid=tid,
                                                        ts=ts, dur=dur, args=dict(step=step, **a)))
        x("step", 0, t, 9000); x("data wait", 0, t, 100)
        x("forward", 1, t + 200, 3000); x("syncbn", 1, t + 500, 80, count=129)
        x("backward", 1, t + 3300, 5000)
        for b in range(3):
            x("allreduce", 2, t + 4000 + 1500 * b, 1200, bucket=b, bytes=(1 << 20) * (1 + 10 * b))
        x("wait for gradients", 1, t + 8300, 400); x("optimizer", 1, t + 8700, 250)
        t += 10000
    with open(os.path.join(d, "timeline-rank%d.json" % r), "w") as f:
        json.dump({"otherData": {"rank": r, "clock": "cuda events"}, "traceEvents": ev}, f)
EOF

python3 "$src/tools/report" "$tmp/cpu" --merge-timeline "$tmp/cpu/timeline.json" \
  > "$tmp/report.log" 2>&1 || { cat "$tmp/report.log"; fail "tools/report failed on the CPU run"; }
python3 "$src/tools/report" "$tmp/gpu" "$tmp/cpu" --label gpu --label cpu -o "$tmp/both.html" \
  > "$tmp/report2.log" 2>&1 || { cat "$tmp/report2.log"; fail "tools/report failed on two runs"; }
# The step's account as dev/ops_cuda_bench -J writes it (made up: three passes), in the step
# section; an unreadable one is a note, not a failure.
cat > "$tmp/account.json" <<'EOF2'
{"device": "GPU", "config": "U-Net test", "step_ms": 6.0, "images": 6, "ceiling_tflops": 790,
 "ceiling_gbs": 4300, "gflop": 1733.1, "gbytes": 5.2, "roofline_ms": 3.4, "mfu": 0.3656,
 "engine": "auto", "fused_layers": 2,
 "passes": [
  {"pass": "conv fwd", "ops": 23, "gflop": 578.2, "mb": 900, "ms": 1.1, "roofline_ms": 0.73},
  {"pass": "bn stats", "ops": 18, "gflop": 0, "mb": 384, "ms": 0.31, "roofline_ms": 0.089},
  {"pass": "optimizer", "ops": 1, "gflop": 0, "mb": 620, "ms": null, "roofline_ms": 0.14}],
 "rows": []}
EOF2
python3 "$src/tools/report" "$tmp/gpu" --account "$tmp/account.json" -o "$tmp/account.html" \
  > "$tmp/report3.log" 2>&1 || { cat "$tmp/report3.log"; fail "tools/report failed with --account"; }
echo "not json" > "$tmp/bad.json"
python3 "$src/tools/report" "$tmp/gpu" --account "$tmp/bad.json" -o "$tmp/bad.html" \
  > "$tmp/report4.log" 2>&1 || { cat "$tmp/report4.log"; fail "tools/report failed on a bad account"; }
grep -q "unreadable" "$tmp/bad.html" || fail "a bad account file is not reported as unreadable"

python3 - "$tmp" <<'EOF'
import html.parser, json, math, re, sys
tmp = sys.argv[1]
SECTIONS = ["summary", "loss", "miou", "classes", "throughput", "step-split", "memory", "gpu-util",
            "allreduce", "timeline"]

class Doc(html.parser.HTMLParser):
    """Per section: its SVGs (size, shapes) and its text; tags must balance."""
    def __init__(self):
        super().__init__()
        self.sections, self.stack, self.sec, self.svg = {}, [], None, None
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag not in ("meta", "line", "polyline", "rect", "circle"):
            self.stack.append(tag)
        if tag == "section":
            self.sec = self.sections.setdefault(a["id"], {"svgs": [], "text": []})
        elif tag == "svg":
            self.svg = {"w": float(a["width"]), "h": float(a["height"]), "shapes": []}
            self.sec["svgs"].append(self.svg)
        elif tag in ("polyline", "rect", "circle", "line") and self.svg is not None:
            self.svg["shapes"].append((tag, a))
    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in ("meta", "line", "polyline", "rect", "circle"):
            self.stack.pop()
    def handle_endtag(self, tag):
        if tag in ("line", "polyline", "rect", "circle"):
            return
        assert self.stack and self.stack[-1] == tag, "</%s> closes <%s>" % (tag, self.stack[-1:])
        self.stack.pop()
        if tag == "svg":
            self.svg = None
    def handle_data(self, data):
        if self.sec is not None:
            self.sec["text"].append(data)

def parse(path):
    d = Doc()
    d.feed(open(path).read())
    d.close()
    assert not d.stack, "unclosed tags in %s: %s" % (path, d.stack)
    for sid in SECTIONS:
        assert sid in d.sections, "%s: no section %s" % (path, sid)
    return d.sections

def inside(svg, where):
    """Every shape's coordinates are finite and inside the picture."""
    for tag, a in svg["shapes"]:
        xs, ys = [], []
        if tag == "polyline":
            pts = [p.split(",") for p in a["points"].split()]
            assert len(pts) >= 1, where
            xs, ys = [float(p[0]) for p in pts], [float(p[1]) for p in pts]
        elif tag == "rect":
            x, y, w, h = (float(a[k]) for k in ("x", "y", "width", "height"))
            assert w >= 0 and h >= 0, "%s: negative rect" % where
            xs, ys = [x, x + w], [y, y + h]
        elif tag == "circle":
            xs, ys = [float(a["cx"])], [float(a["cy"])]
        for v in xs + ys:
            assert math.isfinite(v), "%s: %s has a non-finite coordinate" % (where, tag)
        for x in xs:
            assert -0.5 <= x <= svg["w"] + 0.5, "%s: %s x=%g outside 0..%g" % (where, tag, x, svg["w"])
        for y in ys:
            assert -0.5 <= y <= svg["h"] + 0.5, "%s: %s y=%g outside 0..%g" % (where, tag, y, svg["h"])

def drawn(sec, sid, kinds):
    assert sec["svgs"], "section %s has no chart" % sid
    for i, svg in enumerate(sec["svgs"]):
        inside(svg, "%s chart %d" % (sid, i))
    n = sum(1 for svg in sec["svgs"] for t, a in svg["shapes"] if t in kinds and
            (t != "polyline" or len(a["points"].split()) >= 2))
    assert n > 0, "section %s draws no %s" % (sid, "/".join(kinds))
    return n

cpu = parse(tmp + "/cpu/report.html")
for sid, kinds in [("loss", {"polyline"}), ("miou", {"polyline"}), ("throughput", {"polyline"}),
                   ("step-split", {"rect"}), ("memory", {"rect"}), ("allreduce", {"rect"}),
                   ("timeline", {"rect"})]:
    drawn(cpu[sid], sid, kinds)
assert not cpu["gpu-util"]["svgs"], "CPU ranks have no NVML: no utilisation chart"
# CPU ranks are no GPUs; the mIoU axis stops at 1; the IoU of every class, and mIoU's classes.
html_cpu = open(tmp + "/cpu/report.html").read()
assert "Memory per CPU rank" in html_cpu and "Memory per GPU" not in html_cpu
miou_html = re.search(r'<section id="miou">.*?</section>', html_cpu, re.S).group(0)
miou_ticks = [float(t) for t in re.findall(r'text-anchor="end">([0-9.]+)</text>', miou_html)]
assert miou_ticks and max(miou_ticks) <= 1.0, "the mIoU axis goes to %s" % max(miou_ticks)
cls = "".join(cpu["classes"]["text"])
assert "class 0" in cls and "class 1" in cls and re.search(r"\(over [12] of 2\)", cls), cls
assert "not measured" in "".join(cpu["gpu-util"]["text"])
text = "".join(cpu["timeline"]["text"])
assert "r0 host" in text and "r1 host" in text, "the timeline lacks a rank's row: " + text
# One bar segment per logged step and phase (24 steps: no binning).
split = sum(1 for svg in cpu["step-split"]["svgs"] for t, a in svg["shapes"] if t == "rect")
assert split >= 24 * 4, "step split: %d bars for 24 steps" % split
ar = "".join(cpu["allreduce"]["text"])
assert re.search(r"bucket\s*MiB\s*mean ms", ar), "no all-reduce table"

merged = json.load(open(tmp + "/cpu/timeline.json"))
spans = [e for e in merged["traceEvents"] if e["ph"] == "X"]
assert {e["pid"] for e in spans} == {0, 1}, "the merged trace lacks a rank"
assert all(e["dur"] >= 0 and "step" in e["args"] for e in spans)
assert {e["name"] for e in spans} >= {"forward", "backward", "allreduce", "syncbn", "optimizer",
                                       "data wait", "step"}

both = parse(tmp + "/both.html")
assert drawn(both["gpu-util"], "gpu-util", {"polyline"}) == 2, "one utilisation line per GPU"
text = "".join(both["timeline"]["text"])
for row in ("r0 host", "r0 compute", "r0 comm", "r1 comm"):
    assert row in text, "GPU timeline lacks the row " + row
assert "gpu" in "".join(both["summary"]["text"]) and "cpu" in "".join(both["summary"]["text"])
assert len(both["memory"]["svgs"]) == 2 and len(both["allreduce"]["svgs"]) == 4
acc = parse(tmp + "/account.html")["step-split"]
text = "".join(acc["text"])
for want in ("Account of the step", "MFU 36.6 %", "790.0", "conv fwd", "bn stats", "roofline ms",
             "convolution engine auto, 2 layers fused"):
    assert want in text, "the account lacks '%s': %s" % (want, text)
assert "620" not in text, "a pass without a measured time is drawn"
# two segments (roofline, above) per measured pass, besides the step bars
first = acc["svgs"][0]
inside(first, "account chart")
assert sum(1 for t, a in first["shapes"] if t == "rect") == 4, "account: 2 bars x 2 passes"
print("check_report: report structure ok")
EOF
