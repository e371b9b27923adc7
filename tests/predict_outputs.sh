#!/bin/sh
# shmddp-predict never destroys a file it did not write: an --out that is the --images folder
# (the same path, a symlink to it, "DIR/.") is refused; two images whose outputs would share a
# name (a.png's overlay and a.overlay.png's mask) are refused, naming both; an --out that
# already holds an output name (a user's file, an earlier run's outputs, a planted symlink) is
# refused. Each refusal: exit status 2 and one line before any work, every file as it was. The
# outputs it does write are private (mode 0600) and no temporary file is left.
set -u
command -v python3 > /dev/null 2>&1 || { echo "SKIP: python3 makes the PNG files"; exit 77; }
. "${srcdir:-.}/tests/predict_lib.sh"
predict=${top_builddir:-.}/shmddp-predict
. "${srcdir:-.}/tests/lib.sh"
# sums DIR: a line per file (name, type, content); links are listed, not followed
sums() { (cd "$1" && for f in $(ls -A); do
  if [ -L "$f" ]; then echo "$f -> $(readlink "$f")"; else echo "$f $(cksum < "$f")"; fi
done); }
ckpt=$tmp/run/checkpoint.ckpt
run() { "$predict" --checkpoint "$ckpt" --device cpu "$@" > "$tmp/p.log" 2>&1; }
refused() { [ $1 -eq 2 ] && [ "$(wc -l < "$tmp/p.log")" -eq 1 ] && grep -q "$2" "$tmp/p.log"; }

train_ckpt "$tmp/run" --widths 4,8 --classes 2
check "a checkpoint to predict with" '[ -s "$ckpt" ]'
make_images "$tmp/img" 16x16 16x16
sums "$tmp/img" > "$tmp/img.sums"

# --out is --images, under three of its names
ln -s "$tmp/img" "$tmp/link"
for out in "$tmp/img" "$tmp/link" "$tmp/img/."; do
  run --images "$tmp/img" --out "$out"
  rc=$?
  check "--out $out is --images: refused, the images untouched" \
    'refused $rc "is the --images folder" && sums "$tmp/img" | cmp -s - "$tmp/img.sums"' ||
    cat "$tmp/p.log"
done
run --images "$tmp/link" --out "$tmp/img"
rc=$?
check "--images a symlink to --out: refused" 'refused $rc "is the --images folder"'

# a.png and a.overlay.png: a.png's overlay is a.overlay.png's mask
mkdir "$tmp/clash"
cp "$tmp/img/img00.png" "$tmp/clash/a.png"
cp "$tmp/img/img01.png" "$tmp/clash/a.overlay.png"
run --images "$tmp/clash" --out "$tmp/o1"
rc=$?
check "a.png beside a.overlay.png: refused, naming both, nothing written" \
  'refused $rc "a.overlay.png and .*a.png would both write .*a.overlay.png" || refused $rc "a.png and .*a.overlay.png would both write .*a.overlay.png"; [ $? -eq 0 ] && [ ! -e "$tmp/o1" ]' ||
  cat "$tmp/p.log"
run --images "$tmp/clash" --out "$tmp/o2" --overlay off
rc=$?
check "the same images without overlays: no clash, two masks" \
  '[ $rc -eq 0 ] && [ -s "$tmp/o2/a.png" ] && [ -s "$tmp/o2/a.overlay.png" ]' || cat "$tmp/p.log"
mkdir "$tmp/case"
cp "$tmp/img/img00.png" "$tmp/case/b.png"
cp "$tmp/img/img01.png" "$tmp/case/b.PNG"
run --images "$tmp/case" --out "$tmp/o3"
rc=$?
check "b.png beside b.PNG (one mask name): refused" 'refused $rc "would both write" && [ ! -e "$tmp/o3" ]' ||
  cat "$tmp/p.log"

# an --out that holds an output name already
mkdir "$tmp/o4"
echo "the user's notes" > "$tmp/o4/img01.logits"
sums "$tmp/o4" > "$tmp/o4.sums"
run --images "$tmp/img" --out "$tmp/o4" --logits
rc=$?
check "a file of the user's under an output name: refused, untouched, nothing written" \
  'refused $rc "o4/img01.logits already exists" && sums "$tmp/o4" | cmp -s - "$tmp/o4.sums"' ||
  cat "$tmp/p.log"
mkdir "$tmp/o5"
echo precious > "$tmp/precious"
ln -s "$tmp/precious" "$tmp/o5/img00.overlay.png"
run --images "$tmp/img" --out "$tmp/o5"
rc=$?
check "a symlink planted under an output name: refused, its target untouched" \
  'refused $rc "img00.overlay.png already exists" && [ "$(cat "$tmp/precious")" = precious ] && [ -L "$tmp/o5/img00.overlay.png" ]' ||
  cat "$tmp/p.log"

# a run, then the same run again into the same folder
run --images "$tmp/img" --out "$tmp/o6" --logits
rc=$?
check "a run writes every output, mode 0600, no temporary file left" \
  '[ $rc -eq 0 ] && [ "$(ls "$tmp/o6" | wc -l)" -eq 6 ] && [ -z "$(find "$tmp/o6" -type f ! -perm 600)" ] && ! ls -A "$tmp/o6" | grep -q "tmp"' ||
  { cat "$tmp/p.log"; ls -lA "$tmp/o6"; }
sums "$tmp/o6" > "$tmp/o6.sums"
run --images "$tmp/img" --out "$tmp/o6" --logits
rc=$?
check "the same run again: refused, the first outputs untouched" \
  'refused $rc "already exists" && sums "$tmp/o6" | cmp -s - "$tmp/o6.sums"' || cat "$tmp/p.log"
exit $fail
