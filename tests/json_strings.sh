#!/bin/sh
# Strings from outside in the JSON files a run writes: a dataset folder and an --out folder whose
# names hold bytes that are not UTF-8 (Latin-1, a cut sequence, an overlong form, a surrogate),
# quotes, a backslash and a newline. Every JSON file of the run (summary.json, log.jsonl, the
# timelines, DataParallel's dp_devices.json) and the safetensors header of an export is read by
# a strict reader (python3's json on the raw bytes, which must be UTF-8); the bad bytes become
# U+FFFD and the good characters (é) stay. tools/report reads the same folder into a page.
set -u
command -v python3 > /dev/null 2>&1 || { echo "SKIP: python3 is the strict reader"; exit 77; }
top=${top_builddir:-.}
src=${srcdir:-.}
. "$src/tests/predict_lib.sh"
. "${srcdir:-.}/tests/lib.sh"

# the names: printf's octal escapes give the raw bytes
weird=$(printf 'x\377\376-\303\251-\300\257-\355\240\200-"q"\\b\nl-\342\202')
data="$tmp/d-$weird"
out="$tmp/o-$weird"
python3 - "$data" <<'PY' || exit 1
import os, sys
from png_io import write as png
root = os.fsencode(sys.argv[1])
for sub in (b"images", b"masks"):
    os.makedirs(os.path.join(root, sub))
for i in range(10):
    mask = [1 if 4 <= x < 12 + i and 4 <= y < 12 else 0 for y in range(16) for x in range(16)]
    png(os.path.join(root, b"images", b"s%02d.png" % i), 16, 16, 3, [v * 200 for m in mask for v in (m, 1 - m, m)])
    png(os.path.join(root, b"masks", b"s%02d.png" % i), 16, 16, 1, mask)
PY

"$top/shmddp-train" --device cpu --nproc 2 --data "$data" --out "$out" --classes 2 --image-size 16 \
  --widths 4,8 --batch-size 2 --epochs 1 --workers 0 --timeline 1 --save-every 1000 \
  --progress off > "$tmp/train.log" 2>&1
check "a DDP run on the dataset" '[ -s "$out/summary.json" ]' || cat "$tmp/train.log"
"$top/shmddp-train" --device cpu --mode dp --nproc 2 --data "$data" --out "$out/dp" --classes 2 \
  --image-size 16 --widths 4,8 --batch-size 2 --steps 2 --workers 0 --progress off \
  > "$tmp/dp.log" 2>&1
check "a DataParallel run on the dataset" '[ -s "$out/dp/dp_devices.json" ]' || cat "$tmp/dp.log"
"$top/shmddp-predict" --checkpoint "$out/checkpoint.ckpt" --export "$out/w.safetensors" \
  > "$tmp/export.log" 2>&1
check "the export" '[ -s "$out/w.safetensors" ]' || cat "$tmp/export.log"

check "every JSON file is strict JSON; bad bytes are U+FFFD, good characters stay" 'python3 - "$out" <<"PY"
import glob, json, os, struct, sys
out = sys.argv[1]
texts = {}
for name in ("summary.json", "timeline-rank0.json", "timeline-rank1.json", "dp/dp_devices.json",
             "dp/summary.json"):
    texts[name] = open(os.path.join(out, name), "rb").read()
for n, line in enumerate(open(os.path.join(out, "log.jsonl"), "rb")):
    texts["log.jsonl:%d" % (n + 1)] = line
d = open(os.path.join(out, "w.safetensors"), "rb").read()
(hlen,) = struct.unpack("<Q", d[:8])
texts["w.safetensors header"] = d[8:8 + hlen]
values = {}
for name, raw in texts.items():
    try:
        values[name] = json.loads(raw)  # bytes: decoded as UTF-8, strictly
    except ValueError as e:
        sys.exit("%s: %s" % (name, e))
config = values["summary.json"]["config"] + values["w.safetensors header"]["__metadata__"]["settings"]
want = "\ufffd\ufffd-\u00e9-\ufffd\ufffd-\ufffd\ufffd\ufffd-\"q\"\\b\nl-\ufffd\ufffd"
if want not in config:
    sys.exit("the data path is not in the settings as %r: %r" % (want, config))
print("checked %d JSON texts" % len(texts))
PY'

python3 "$src/tools/report" "$out" -o "$tmp/report.html" > "$tmp/report.log" 2>&1
rc=$?
check "tools/report reads the run folder" '[ $rc -eq 0 ] && python3 -c "import sys; open(sys.argv[1], encoding=\"utf-8\").read()" "$tmp/report.html"' ||
  cat "$tmp/report.log"
exit $fail
