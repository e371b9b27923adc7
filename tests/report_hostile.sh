#!/bin/sh
# tools/report on a run folder an attacker wrote (tests/hostile_run.py: markup, bytes that are not
# UTF-8 and control characters in every field; strings where numbers belong; numbers that are not
# finite; wrong types; files that are not JSON), under a hostile folder name, --label, --title
# and --account: the report is written (exit 0, a warning per file left out), and its page holds
# no markup from the files: only the tags and attributes the report itself writes, no event
# handler attribute, no javascript: URL, no marker of a script that ran; the hostile strings it
# shows are there as text (escaped, not dropped), and the page is UTF-8. The merged trace is
# strict JSON. The page and the trace are written through a fresh private file: a symlink
# planted at the old temporary name (report.html.tmp) or at the page's name is not followed,
# and the page is mode 0600.
set -u
command -v python3 > /dev/null 2>&1 || { echo "check_report: no python3; skipped"; exit 77; }
src=${srcdir:-.}
. "${srcdir:-.}/tests/lib.sh"

python3 "$src/tests/hostile_run.py" "$tmp" || exit 1
label=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[1])' "$tmp/PAYLOADS")
title=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[4])' "$tmp/PAYLOADS")
named="$tmp/$label"
cp -r "$tmp/run" "$named"
out=$tmp/out
mkdir "$out"
echo precious > "$tmp/precious"
ln -s "$tmp/precious" "$out/report.html.tmp"
ln -s "$tmp/precious" "$out/report.html"
ln -s "$tmp/precious" "$out/merged.json.tmp"
python3 "$src/tools/report" "$tmp/run" "$named" --label "$label" --title "$title" \
  --account "$tmp/account.json" -o "$out/report.html" --merge-timeline "$out/merged.json" \
  > "$tmp/report.log" 2>&1
rc=$?
check "the report is written, with warnings for what it left out" \
  '[ $rc -eq 0 ] && grep -q "not JSON" "$tmp/report.log" && grep -q "not as the trainer writes them" "$tmp/report.log"' ||
  cat "$tmp/report.log"
check "planted links are not followed; the page is a new private file" \
  '[ "$(cat "$tmp/precious")" = precious ] && [ -f "$out/report.html" ] && [ ! -L "$out/report.html" ] && [ "$(stat -c %a "$out/report.html")" = 600 ] && [ -z "$(ls "$out" | grep "\.tmp\.")" ]'
check "the page holds no markup of the files; what they say is shown as text" 'python3 - "$out/report.html" "$tmp/PAYLOADS" "$label" "$title" <<"PY"
import html.parser, json, sys
path, payloads, label, title = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3], sys.argv[4]
raw = open(path, "rb").read()
page = raw.decode("utf-8")  # strict: the page is UTF-8
TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "b", "section",
        "table", "tr", "th", "td", "div", "svg", "line", "polyline", "rect", "circle", "text"}
ATTRS = {"lang", "charset", "id", "class", "xmlns", "width", "height", "viewbox", "font-family",
         "font-size", "x", "y", "x1", "x2", "y1", "y2", "cx", "cy", "r", "fill", "stroke",
         "stroke-width", "stroke-dasharray", "points", "text-anchor", "transform"}
class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.text, self.styles, self.titles, self.tag = [], 0, [], None
    def handle_starttag(self, tag, attrs):
        assert tag in TAGS, "a <%s> element" % tag
        self.styles += tag == "style"
        self.tag = tag
        for k, v in attrs:
            assert k in ATTRS, "a %s attribute on <%s>" % (k, tag)
            assert "javascript" not in (v or "").lower(), "%s=%r" % (k, v)
    def handle_data(self, d):
        self.text.append(d)
        if self.tag == "title":
            self.titles.append(d)
    def handle_comment(self, d):
        raise AssertionError("a comment: %r" % d)
    def unknown_decl(self, d):
        raise AssertionError("a declaration: %r" % d)
p = Page()
p.feed(page)
p.close()
assert p.styles == 1, "%d <style> elements" % p.styles
assert "data-ran" not in page.replace("setAttribute(&#x27;data-ran", ""), "a script marker"
text = "".join(p.text)
assert label in text and title in p.titles[0], "the label or the title is not shown"
for pl in payloads:  # in the settings, shown whole; control characters as U+FFFD
    pl = "".join("\ufffd" if ord(c) < 32 or c == "\x7f" else c for c in pl)
    assert pl in text, "%r is not shown as text" % pl
print("%d bytes, every payload shown as text" % len(raw))
PY'
check "the merged trace is strict JSON" \
  'python3 -c "import json, sys; json.loads(open(sys.argv[1], \"rb\").read())" "$out/merged.json"'
exit $fail
