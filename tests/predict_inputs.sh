#!/bin/sh
# shmddp-predict on a user's own data (CPU), as the trainer treats its inputs:
#  - masks come out in the values the training masks held (trained from masks of 100/200 with
#    --mask-map 100:0,200:1: every pixel is 100 or 200), the same pixels as --class-ids, which
#    writes the classes 0/1; a checkpoint of an earlier version (no run record) still loads and
#    gives class ids;
#  - every image is read whole before anything is written: one damaged PNG (cut short inside
#    its image data), or a file that is no PNG, is named, exit status 2, and nothing is written
#    (no --out made, an existing --out left empty); --keep-going predicts the others, names the
#    skipped ones and exits 1.
set -u
command -v python3 > /dev/null 2>&1 || { echo "SKIP: python3 makes the PNG files"; exit 77; }
. "${srcdir:-.}/tests/predict_lib.sh"
train=${top_builddir:-.}/shmddp-train
predict=${top_builddir:-.}/shmddp-predict
. "${srcdir:-.}/tests/lib.sh"

# 10 images 32x32 with masks of 100 (background) and 200 (a square)
python3 - "$tmp/d" <<'PY'
import os, sys
from png_io import write as png
root = sys.argv[1]
for sub in ("images", "masks"):
    os.makedirs(os.path.join(root, sub), exist_ok=True)
for i in range(10):
    S, a, b = 32, 4 + i, 14 + i
    mask = [200 if a <= x < b and a <= y < b else 100 for y in range(S) for x in range(S)]
    rgb = [v for m in mask for v in ((200, 40, 40) if m == 200 else (30, 90, 30))]
    png(os.path.join(root, "images", "s%02d.png" % i), S, S, 3, rgb)
    png(os.path.join(root, "masks", "s%02d.png" % i), S, S, 1, mask)
PY
"$train" --device cpu --nproc 2 --data "$tmp/d" --classes 2 --mask-map 100:0,200:1 \
  --image-size 32 --widths 4,8 --batch-size 2 --steps 4 --workers 0 --progress off \
  --out "$tmp/run" > "$tmp/train.log" 2>&1
check "a model trained on masks of 100/200" '[ -s "$tmp/run/checkpoint.ckpt" ]'
make_images "$tmp/img" 32x32 32x32 32x32 24x40
# gray values of a PNG (8-bit, filters undone), one per line
values() {
  python3 - "$1" <<'PY'
import sys
import png_io
w, h, ch, px = png_io.read(sys.argv[1])
assert ch == 1
print("\n".join(str(v) for v in px))
PY
}

"$predict" --checkpoint "$tmp/run/checkpoint.ckpt" --images "$tmp/img" --out "$tmp/vals" \
  --device cpu --overlay off > "$tmp/vals.log" 2>&1
rc=$?
"$predict" --checkpoint "$tmp/run/checkpoint.ckpt" --images "$tmp/img" --out "$tmp/ids" \
  --device cpu --overlay off --class-ids > "$tmp/ids.log" 2>&1
rc2=$?
check "both ran (exit 0)" '[ $rc -eq 0 ] && [ $rc2 -eq 0 ]'
check "the run says the masks hold the training values" 'grep -q "masks hold the values the training masks held (class 0 is 100)" "$tmp/vals.log"'
for n in img00 img03; do
  values "$tmp/vals/$n.png" > "$tmp/$n.vals"
  values "$tmp/ids/$n.png" > "$tmp/$n.ids"
  check "$n: every pixel 100 or 200 by default" '[ -s "$tmp/$n.vals" ] && ! grep -qvx "100\|200" "$tmp/$n.vals"'
  check "$n: --class-ids: every pixel 0 or 1" '[ -s "$tmp/$n.ids" ] && ! grep -qvx "0\|1" "$tmp/$n.ids"'
  check "$n: the same pixels (0 is 100, 1 is 200)" '[ "$(sed "s/^100$/0/;s/^200$/1/" "$tmp/$n.vals")" = "$(cat "$tmp/$n.ids")" ]'
done
base64 -d < "${srcdir:-.}/tests/data/prepad_step6.ckpt.b64" > "$tmp/old.ckpt"
"$predict" --checkpoint "$tmp/old.ckpt" --images "$tmp/img" --out "$tmp/old" --device cpu \
  --overlay off > "$tmp/old.log" 2>&1
rc=$?
values "$tmp/old/img00.png" > "$tmp/old.vals"
check "a checkpoint of an earlier version (no run record): class ids" '[ $rc -eq 0 ] && [ -s "$tmp/old.vals" ] && ! grep -qvx "0\|1\|2" "$tmp/old.vals"'

# bad inputs: img01b.png cut short inside its image data, notpng.png text
cp -r "$tmp/img" "$tmp/bad"
python3 - "$tmp/img/img01.png" "$tmp/bad/img01b.png" <<'PY'
import struct, sys
d = open(sys.argv[1], "rb").read()
(n,) = struct.unpack(">I", d[33:37])  # the IDAT after the 8-byte signature and 25-byte IHDR
assert d[37:41] == b"IDAT"
open(sys.argv[2], "wb").write(d[:41 + n // 2])
PY
"$predict" --checkpoint "$tmp/run/checkpoint.ckpt" --images "$tmp/bad" --out "$tmp/o1" \
  --device cpu > "$tmp/b1.log" 2>&1
rc=$?
check "a damaged image: exit 2, one line naming it, no --out made" '[ $rc -eq 2 ] && [ $(wc -l < "$tmp/b1.log") -eq 1 ] && grep -q "img01b.png cannot be read" "$tmp/b1.log" && grep -q "nothing was written.*--keep-going" "$tmp/b1.log" && [ ! -e "$tmp/o1" ]'
mkdir "$tmp/o2"
echo "not a png" > "$tmp/bad/notpng.png"
"$predict" --checkpoint "$tmp/run/checkpoint.ckpt" --images "$tmp/bad" --out "$tmp/o2" \
  --device cpu > "$tmp/b2.log" 2>&1
rc=$?
check "two bad files: exit 2, both named, an existing --out left empty" '[ $rc -eq 2 ] && grep -q "img01b.png cannot be read.*1 more: notpng.png" "$tmp/b2.log" && [ -z "$(ls -A "$tmp/o2")" ]'
"$predict" --checkpoint "$tmp/run/checkpoint.ckpt" --images "$tmp/bad" --out "$tmp/o3" \
  --device cpu --keep-going > "$tmp/b3.log" 2>&1
rc=$?
check "--keep-going: exit 1, the others predicted" '[ $rc -eq 1 ] && for n in img00 img01 img02 img03; do [ -s "$tmp/o3/$n.png" ] || exit 1; done'
check "--keep-going: the skipped ones listed, nothing written for them" 'grep -q "skipped 2 images that cannot be read: img01b.png (.*), notpng.png (" "$tmp/b3.log" && [ ! -e "$tmp/o3/img01b.png" ] && [ ! -e "$tmp/o3/notpng.png" ]'
[ $fail -eq 0 ] || tail_logs 3
exit $fail
