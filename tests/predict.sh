#!/bin/sh
# shmddp-predict as a user runs it (CPU): a checkpoint and a folder of PNG images give, per
# image, a mask of its size holding the classes the scores rank first, a colour overlay and the
# raw scores, batch-wise (images of one size share a batch); bad input (no checkpoint, a damaged
# one, no images, a device the build lacks, an --out this user cannot write) is refused with
# exit status 2 and one line before any work; --version; --export writes a safetensors file.
set -u
command -v python3 > /dev/null 2>&1 || { echo "SKIP: python3 makes the PNG files"; exit 77; }
. "${srcdir:-.}/tests/predict_lib.sh"
predict=${top_builddir:-.}/shmddp-predict
. "${srcdir:-.}/tests/lib.sh"

train_ckpt "$tmp/run" --widths 4,8,16 --classes 3
check "a checkpoint to predict with" '[ -s "$tmp/run/checkpoint.ckpt" ]'
make_images "$tmp/img" 32x32 32x32 32x32 48x24 30x18
"$predict" --checkpoint "$tmp/run/checkpoint.ckpt" --images "$tmp/img" --out "$tmp/pred" \
  --device cpu --batch-size 2 --logits > "$tmp/p.log" 2>&1
rc=$?
check "exit 0" '[ $rc -eq 0 ]'
check "batch-wise: 2 + 1 images of 32x32, then one batch per other size" '[ "$(grep -c "^predict: " "$tmp/p.log")" -eq 4 ] && grep -q "img00.png .. img01.png (2 images, 32x32)" "$tmp/p.log"'
check "per image: mask, overlay, scores" '[ "$(ls "$tmp/pred" | wc -l)" -eq 15 ]'
check "masks, overlays and scores have each image's size; masks hold the top-ranked class" 'python3 - "$tmp/img" "$tmp/pred" 3 <<"PY"
import os, struct, sys
from png_io import read as png
img, pred, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
for name in sorted(os.listdir(img)):
    w, h, _, _ = png(os.path.join(img, name))
    mw, mh, mc, mask = png(os.path.join(pred, name))
    ow, oh, oc, _ = png(os.path.join(pred, name[:-4] + ".overlay.png"))
    lg = open(os.path.join(pred, name[:-4] + ".logits"), "rb").read()
    assert (mw, mh, mc, ow, oh, oc) == (w, h, 1, w, h, 3), name
    assert len(lg) == w * h * k * 4, name
    s = struct.unpack("<%df" % (w * h * k), lg)
    for p in range(w * h):
        v = s[p * k:(p + 1) * k]
        assert mask[p] == v.index(max(v)), (name, p)
PY'

# refusals: exit 2, one line, nothing done
"$predict" --checkpoint "$tmp/none.ckpt" --images "$tmp/img" --out "$tmp/o1" > "$tmp/r1.log" 2>&1
rc=$?
check "missing checkpoint: exit 2, one line, no --out" '[ $rc -eq 2 ] && [ $(wc -l < "$tmp/r1.log") -eq 1 ] && grep -q "none.ckpt" "$tmp/r1.log" && [ ! -e "$tmp/o1" ]'
cp "$tmp/run/checkpoint.ckpt" "$tmp/bad.ckpt"
printf 'XXXX' | dd of="$tmp/bad.ckpt" bs=1 seek=300 conv=notrunc 2>/dev/null
"$predict" --checkpoint "$tmp/bad.ckpt" --images "$tmp/img" --out "$tmp/o2" > "$tmp/r2.log" 2>&1
rc=$?
check "damaged checkpoint: exit 2, one line" '[ $rc -eq 2 ] && [ $(wc -l < "$tmp/r2.log") -eq 1 ] && [ ! -e "$tmp/o2" ]'
mkdir "$tmp/empty"
"$predict" --checkpoint "$tmp/run/checkpoint.ckpt" --images "$tmp/empty" --out "$tmp/o3" > "$tmp/r3.log" 2>&1
rc=$?
check "no images: exit 2, one line" '[ $rc -eq 2 ] && grep -q "no \*.png images" "$tmp/r3.log" && [ ! -e "$tmp/o3" ]'
if grep -q "^#define HAVE_CUDA 1" "${top_builddir:-.}/config.h"; then
  echo "skip: --device cuda refusal (this build has CUDA)"
else
  "$predict" --checkpoint "$tmp/run/checkpoint.ckpt" --images "$tmp/img" --out "$tmp/o4" --device cuda > "$tmp/r4.log" 2>&1
  rc=$?
  check "--device cuda in a CPU-only build: exit 2, says so" '[ $rc -eq 2 ] && grep -q "no CUDA backend" "$tmp/r4.log"'
fi
if [ "$(id -u)" -eq 0 ] && command -v setpriv > /dev/null 2>&1; then
  mkdir -m 755 "$tmp/locked"
  chmod 755 "$tmp"
  # checkpoints are written 0600: a copy the other user may read
  cp "$tmp/run/checkpoint.ckpt" "$tmp/shared.ckpt" && chmod 644 "$tmp/shared.ckpt"
  setpriv --reuid=nobody --regid=nogroup --clear-groups "$predict" --checkpoint "$tmp/shared.ckpt" \
    --images "$tmp/img" --out "$tmp/locked" > "$tmp/r5.log" 2>&1
  rc=$?
  check "--out another user owns: exit 2, says so" '[ $rc -eq 2 ] && grep -q "cannot write in" "$tmp/r5.log"'
else
  echo "skip: --out as another user (needs root and setpriv)"
fi
"$predict" --version > "$tmp/v.log" 2>&1
check "--version" 'grep -q "^shmddp-predict [0-9]" "$tmp/v.log"'
"$predict" --checkpoint "$tmp/run/checkpoint.ckpt" --export "$tmp/w.safetensors" > /dev/null 2>&1
check "--export writes a safetensors file (8-byte length, JSON header)" 'python3 -c "
import json, struct, sys
d = open(\"$tmp/w.safetensors\", \"rb\").read()
(n,) = struct.unpack(\"<Q\", d[:8]); h = json.loads(d[8:8 + n])
sys.exit(not (n % 8 == 0 and \"head.weight\" in h and h[\"head.weight\"][\"shape\"] == [3, 4, 1, 1]
              and max(t[\"data_offsets\"][1] for k, t in h.items() if k != \"__metadata__\") == len(d) - 8 - n))"'
exit $fail
