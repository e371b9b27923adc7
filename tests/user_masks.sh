#!/bin/sh
# What a user with a folder of PNG masks sees (CPU ranks): masks saved as 0/255 (255 is the
# ignore label) are refused before any rank starts, with the fix named (--classes 2 too when
# the run asks for other than 2 classes, so that the fix followed as printed trains a binary
# model), and nothing is created; --mask-map 255:1 trains them, the scan's pixel counts per label are printed at start and are
# exact in summary.json; a class absent from the validation labels is reported absent, and the
# mIoU says over which classes it was taken; --ignore-label is checked against --classes; the
# settings line gives the validation split's size as made (10 % of the names by default).
set -u
train=${top_builddir:-.}/shmddp-train
command -v python3 > /dev/null 2>&1 || { echo "SKIP: python3 makes the PNG files"; exit 77; }
. "${srcdir:-.}/tests/predict_lib.sh"
. "${srcdir:-.}/tests/lib.sh"

# 10 images 32x32 (8 train, 2 val by name): a square of 255 (or 1 with LABEL=1) on 0. The
# generator prints the pixel counts per mask value of each split.
python3 - "$tmp/d" > "$tmp/counts" <<'PY'
import os, sys
from png_io import write as png
root = sys.argv[1]
for sub in ("images", "masks"):
    os.makedirs(os.path.join(root, sub), exist_ok=True)
counts = {"train": [0, 0], "val": [0, 0]}
for i in range(10):
    S, a, b = 32, 4 + i, 14 + i
    mask = [255 if a <= x < b and a <= y < b else 0 for y in range(S) for x in range(S)]
    rgb = [v for m in mask for v in ((200, 40, 40) if m else (30, 90, 30))]
    png(os.path.join(root, "images", "s%02d.png" % i), S, S, 3, rgb)
    png(os.path.join(root, "masks", "s%02d.png" % i), S, S, 1, mask)
    split = "train" if i < 8 else "val"
    counts[split][0] += mask.count(0)
    counts[split][1] += mask.count(255)
print(counts["train"][0], counts["train"][1], counts["val"][0], counts["val"][1])
PY
read tr0 tr1 va0 va1 < "$tmp/counts"
F="--device cpu --nproc 2 --data $tmp/d --val-size 2 --classes 2 --image-size 32 --widths 4,8 --batch-size 2 --steps 4 --workers 0 --progress lines"

"$train" $F --out "$tmp/out1" > "$tmp/r1.log" 2>&1
rc=$?
check "0/255 masks refused with exit status 2" '[ $rc -eq 2 ]'
check "the message names the fix" 'grep -q -- "--mask-map 255:1" "$tmp/r1.log" && grep -q "only 0 and 255" "$tmp/r1.log"'
check "one line, from the launcher (no rank started)" '[ $(wc -l < "$tmp/r1.log") -eq 1 ] && ! grep -q "rank" "$tmp/r1.log"'
check "nothing created" '[ ! -e "$tmp/out1" ]'

G=$(echo "$F" | sed 's/ --classes 2//')
"$train" $G --out "$tmp/out1b" > "$tmp/r1b.log" 2>&1
rc=$?
check "with the default 4 classes: refused, the fix says --classes 2 too" '[ $rc -eq 2 ] && grep -q -- "give --mask-map 255:1 --classes 2 (--classes is 4 now)" "$tmp/r1b.log"'
fix=$(grep -o -- "--mask-map 255:1 --classes 2" "$tmp/r1b.log")
"$train" $G $fix --out "$tmp/out1c" > "$tmp/r1c.log" 2>&1
rc=$?
check "the fix as printed trains a model of 2 classes" '[ $rc -eq 0 ] && grep -q "classes=2 " "$tmp/r1c.log" && grep -q "miou_classes=2/2" "$tmp/r1c.log"'
"$train" $(echo "$F" | sed 's/ --val-size 2//') --mask-map 255:1 --out "$tmp/out1d" > "$tmp/r1d.log" 2>&1
check "without --val-size: the settings line says the split made (1 of 10 images)" 'grep -q "9 training / 1 validation samples" "$tmp/r1d.log" && grep -q " val_size=1 " "$tmp/r1d.log"'

"$train" $F --mask-map 255:1 --out "$tmp/out2" > "$tmp/r2.log" 2>&1
rc=$?
check "--mask-map 255:1 trains (exit 0)" '[ $rc -eq 0 ] && grep -q "^result: steps=4" "$tmp/r2.log"'
check "pixels per label printed at start" 'grep -q "train labels (share of pixels): 0 [0-9.]*%, 1 [0-9.]*%, ignored 0.0%" "$tmp/r2.log"'
check "summary.json: the scan's exact counts" 'python3 -c "
import json, sys
s = json.load(open(\"$tmp/out2/summary.json\"))[\"label_pixels\"]
sys.exit(not (s[\"train\"] == [$tr0, $tr1] and s[\"val\"] == [$va0, $va1] and s[\"train_ignored\"] == 0))"'
check "mIoU over both classes" 'grep -q "miou_classes=2/2" "$tmp/r2.log"'

# 3 classes, labels 0 and 1 only: class 2 is absent, not IoU 1 (or 0), and mIoU says so
"$train" $F --classes 3 --mask-map 255:1 --out "$tmp/out3" > "$tmp/r3.log" 2>&1
check "a class absent from validation is reported absent" 'grep -q "val IoU per class (mIoU over 2 of 3 classes, the others absent from the validation labels): 0 [0-9.]*, 1 [0-9.]*, 2 absent" "$tmp/r3.log"'
check "result line: mIoU over 2 of 3 classes" 'grep -q "miou_classes=2/3" "$tmp/r3.log"'
check "summary.json: class 2 absent, its IoU null" 'python3 -c "
import json, sys
s = json.load(open(\"$tmp/out3/summary.json\"))
sys.exit(not (s[\"class_present\"] == [True, True, False] and s[\"class_iou\"][2] is None and s[\"miou_classes\"] == 2))"'

"$train" $F --ignore-label 1 --out "$tmp/out4" > "$tmp/r4.log" 2>&1
rc=$?
check "--ignore-label that is a class refused" '[ $rc -eq 2 ] && grep -q -- "--ignore-label: 1 is a class" "$tmp/r4.log"'
"$train" $F --ignore-label 7 --out "$tmp/out5" > "$tmp/r5.log" 2>&1
rc=$?
check "255 with another ignore label: not a class, the message names --mask-map" '[ $rc -eq 2 ] && grep -q "label 255 at pixel" "$tmp/r5.log" && grep -q -- "--mask-map" "$tmp/r5.log"'
"$train" --device cpu --mask-map 255:1 --out "$tmp/out6" > "$tmp/r6.log" 2>&1
rc=$?
check "--mask-map on synthetic data refused" '[ $rc -eq 2 ] && grep -q "only for --data DIR" "$tmp/r6.log"'
"$train" $F --mask-map 255:9 --out "$tmp/out7" > "$tmp/r7.log" 2>&1
rc=$?
check "--mask-map to no class refused" '[ $rc -eq 2 ] && grep -q "maps to no class" "$tmp/r7.log"'
exit $fail
