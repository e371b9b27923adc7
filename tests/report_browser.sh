#!/bin/sh
# The report's page in a real browser (Debian's chromium-headless-shell, else chromium; installed
# by tools/install-deps.sh): report.html of a normal 2-rank CPU run and of a run folder an
# attacker wrote (tests/hostile_run.py; its page written into that folder, beside a planted
# script file). Each page loads and renders: the screenshot is not blank and shows the charts'
# colours, and the DOM the browser built holds every chart the page has (the same SVG elements,
# the same shapes, in the sections that must have one). Nothing from the folder runs: the page
# has no script of its own, and no marker that a payload would set is in the DOM after the load
# (with time given for scripts to run), and the title is the one given.
# SKIP (77) where no such browser is installed, or without python3.
set -u
command -v python3 > /dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }
browser=""
for b in chromium-headless-shell chromium; do
  command -v "$b" > /dev/null 2>&1 && { browser=$b; break; }
done
[ -n "$browser" ] || { echo "SKIP: no headless browser (tools/install-deps.sh installs chromium-headless-shell)"; exit 77; }
top=${top_builddir:-.}
src=${srcdir:-.}
. "$src/tests/lib.sh"
. "$src/tests/predict_lib.sh"

# open PAGE NAME: the DOM after the load (NAME.dom) and a screenshot (NAME.png). Virtual time
# lets any script that would run (a timer, an onload) run before the DOM is taken.
open_page() {
  flags="--no-sandbox --disable-gpu --hide-scrollbars --no-first-run --user-data-dir=$tmp/profile"
  [ "$browser" = chromium ] && flags="--headless $flags"
  # shellcheck disable=SC2086
  timeout 120 "$browser" $flags --virtual-time-budget=3000 --dump-dom "file://$1" \
    > "$tmp/$2.dom" 2> "$tmp/$2.err" &&
  timeout 120 "$browser" $flags --window-size=1200,9000 --screenshot="$tmp/$2.png" "file://$1" \
    > /dev/null 2>> "$tmp/$2.err"
}

# a normal run
"$top/shmddp-train" --device cpu --nproc 2 --out "$tmp/cpu" --classes 2 --image-size 32 \
  --widths 8,16 --train-size 48 --val-size 8 --epochs 2 --batch-size 4 --workers 0 \
  --bucket-mb 0.004 --timeline 2 --log-every 100 > "$tmp/train.log" 2>&1 ||
  { cat "$tmp/train.log"; echo "FAIL: the training run"; exit 1; }
python3 "$src/tools/report" "$tmp/cpu" > "$tmp/report.log" 2>&1 || { cat "$tmp/report.log"; exit 1; }
# a hostile one, its page in the folder itself
python3 "$src/tests/hostile_run.py" "$tmp/h" || exit 1
python3 "$src/tools/report" "$tmp/h/run" --account "$tmp/h/account.json" --title "a title" \
  > "$tmp/report2.log" 2>&1 || { cat "$tmp/report2.log"; exit 1; }

for run in cpu h/run; do
  name=$(echo "$run" | tr / _)
  open_page "$tmp/$run/report.html" "$name"
  rc=$?
  check "$run: the browser loads the page" '[ $rc -eq 0 ] && [ -s "$tmp/$name.dom" ] && [ -s "$tmp/$name.png" ]' ||
    tail -5 "$tmp/$name.err"
  check "$run: rendered (screenshot not blank, the charts' colours in it); every chart in the DOM; nothing ran" \
    'python3 - "$tmp/$run/report.html" "$tmp/$name.dom" "$tmp/$name.png" "$run" <<"PY"
import html.parser, sys
import png_io
page, dom, shot, run = sys.argv[1:5]
class Charts(html.parser.HTMLParser):
    """Per section: its number of SVG elements and of shapes inside them; the title, scripts."""
    def __init__(self):
        super().__init__()
        self.sec, self.svgs, self.shapes, self.scripts, self.root, self.title = None, {}, {}, 0, {}, ""
        self.in_title = False
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "html":
            self.root = a
        if tag == "section":
            self.sec = a.get("id")
        if tag == "svg":
            self.svgs[self.sec] = self.svgs.get(self.sec, 0) + 1
        if tag in ("rect", "polyline", "circle", "line"):
            self.shapes[self.sec] = self.shapes.get(self.sec, 0) + 1
        self.scripts += tag == "script"
        self.in_title = tag == "title" and self.sec is None
    def handle_data(self, d):
        if self.in_title:
            self.title += d
    def handle_endtag(self, tag):
        self.in_title = False
def parse(path):
    c = Charts()
    c.feed(open(path, encoding="utf-8").read())
    return c
src, got = parse(page), parse(dom)
assert src.scripts == 0 and got.scripts == 0, "scripts in the page: %d, in the DOM: %d" % (src.scripts, got.scripts)
assert "data-ran" not in got.root, "a payload ran: the root element has %r" % got.root
assert got.title == ("a title" if run != "cpu" else "shmddp training report"), "title %r" % got.title
assert got.svgs == src.svgs and got.shapes == src.shapes, "charts: page %r, DOM %r" % (src.svgs, got.svgs)
want = ["loss", "throughput", "step-split", "memory"] + (["miou", "allreduce", "timeline"] if run == "cpu" else [])
for sec in want:
    assert got.svgs.get(sec, 0) >= 1 and got.shapes.get(sec, 0) >= 3, "section %s: no chart drawn" % sec
# the screenshot: an 8-bit RGB or RGBA PNG
w, h, ch, px = png_io.read(shot)
assert ch in (3, 4), ch
st, colours = w * ch, {}
for y in range(h):
    line = px[y * st:(y + 1) * st]
    for x in range(0, st, ch * 2):  # every other pixel is enough to count colours
        k = bytes(line[x:x + 3])
        colours[k] = colours.get(k, 0) + 1
white = colours.get(b"\xff\xff\xff", 0)
total = sum(colours.values())
assert total - white > total // 50, "the screenshot is blank: %d of %d pixels not white" % (total - white, total)
for name, rgb in (("the first run", b"\x4e\x79\xa7"), ("exposed communication", b"\xf2\x8e\x2b")):
    assert colours.get(rgb, 0) > 50, "no %s colour in the screenshot" % name
print("%s: %d charts, %d of %d sampled pixels drawn" % (run, sum(got.svgs.values()), total - white, total))
PY'
done
exit $fail
