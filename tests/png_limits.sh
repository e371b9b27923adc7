#!/bin/sh
# PNG files that ask for memory: a file of a few dozen bytes whose chunk header claims 2 GiB (a
# text, compressed text, international text, suggested palette, ICC profile, Exif or unknown
# chunk; before the image data and after it), or whose header claims more pixels than allowed,
# is refused by the trainer's dataset scan and by shmddp-predict with exit status 2 and the
# file's name, and the process's peak resident memory (ru_maxrss from wait4) stays within a few
# tens of MB; nothing is written. A valid image beside the bombs still decodes.
set -u
command -v python3 > /dev/null 2>&1 || { echo "SKIP: python3 makes the PNG files"; exit 77; }
. "${srcdir:-.}/tests/predict_lib.sh"
top=${top_builddir:-.}
. "${srcdir:-.}/tests/lib.sh"
# Peak resident set of a run a few tens of MB: the binaries idle at ~10-15 MB; the sanitizer
# build adds its shadow and quarantine, so it gets more room (it is still far below a chunk).
limit_mb=48
ldd "$top/shmddp-train" 2> /dev/null | grep -q libasan && limit_mb=160

# crafts: NAME -> a PNG of 8x8 RGB whose chunk of type NAME claims 0x7fffffff bytes (2 GiB - 1)
# and holds a few; "late-X": the chunk comes after the image data; "huge": a header of
# 16384x16384 (268 Mpx) with a few bytes of data.
python3 - "$tmp/bombs" <<'PY' || exit 1
import os, struct, sys, zlib
root = sys.argv[1]
os.makedirs(root)
def chunk(t, b, claim=None):
    n = len(b) if claim is None else claim
    return struct.pack(">I", n) + t + b + struct.pack(">I", zlib.crc32(t + b) & 0xffffffff)
def ihdr(w, h):
    return chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
idat = chunk(b"IDAT", zlib.compress(b"".join(b"\0" + bytes(24) for _ in range(8))))
sig = b"\x89PNG\r\n\x1a\n"
for t in (b"tEXt", b"zTXt", b"iTXt", b"sPLT", b"iCCP", b"eXIf", b"prVt"):
    bomb = chunk(t, b"k\0" + b"x" * 30, claim=0x7fffffff)
    name = t.decode()
    open(os.path.join(root, name + ".png"), "wb").write(sig + ihdr(8, 8) + bomb)
    open(os.path.join(root, "late-" + name + ".png"), "wb").write(sig + ihdr(8, 8) + idat + bomb)
open(os.path.join(root, "huge.png"), "wb").write(sig + ihdr(16384, 16384) + chunk(b"IDAT", b"x\x9c"))
PY
ls "$tmp/bombs" > "$tmp/names"

# rss LOG CMD...: runs CMD (stdout and stderr to LOG); prints "STATUS PEAK_MB"
rss() {
  python3 - "$@" <<'PY'
import os, sys
log, cmd = sys.argv[1], sys.argv[2:]
pid = os.fork()
if pid == 0:
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1); os.dup2(fd, 2)
    os.execv(cmd[0], cmd)
_, status, ru = os.wait4(pid, 0)
print(os.waitstatus_to_exitcode(status), ru.ru_maxrss // 1024)
PY
}

train_ckpt "$tmp/run" --widths 4,8 --classes 2
check "a checkpoint to predict with" '[ -s "$tmp/run/checkpoint.ckpt" ]'
make_images "$tmp/good" 8x8

while read -r f; do
  # the trainer's scan: the bomb as the image of a pair (the masks are good), train and val
  d=$tmp/ds-${f%.png}
  mkdir -p "$d/images" "$d/masks" "$d/val/images" "$d/val/masks"
  cp "$tmp/bombs/$f" "$d/images/a.png"
  for m in "$d/masks/a.png" "$d/val/images/a.png" "$d/val/masks/a.png"; do
    cp "$tmp/good/img00.png" "$m"
  done
  res=$(rss "$tmp/t.log" "$top/shmddp-train" --device cpu --nproc 1 --data "$d" --classes 2 \
    --image-size 8 --out "$tmp/tout")
  st=${res% *} mb=${res#* }
  check "train, $f: refused (exit 2), naming the file, peak RSS $mb MB <= $limit_mb MB" \
    '[ "$st" -eq 2 ] && grep -q "$d/images/a.png" "$tmp/t.log" && [ "$mb" -le $limit_mb ] && [ ! -e "$tmp/tout" ]' ||
    cat "$tmp/t.log"
  # shmddp-predict: the bomb among the images
  mkdir -p "$tmp/pin-${f%.png}"
  cp "$tmp/bombs/$f" "$tmp/pin-${f%.png}/$f"
  res=$(rss "$tmp/p.log" "$top/shmddp-predict" --checkpoint "$tmp/run/checkpoint.ckpt" \
    --images "$tmp/pin-${f%.png}" --out "$tmp/pout" --device cpu)
  st=${res% *} mb=${res#* }
  check "predict, $f: refused (exit 2), naming the file, peak RSS $mb MB <= $limit_mb MB" \
    '[ "$st" -eq 2 ] && grep -q "$f" "$tmp/p.log" && [ "$mb" -le $limit_mb ] && [ ! -e "$tmp/pout" ]' ||
    cat "$tmp/p.log"
done < "$tmp/names"

"$top/shmddp-predict" --checkpoint "$tmp/run/checkpoint.ckpt" --images "$tmp/good" \
  --out "$tmp/gout" --device cpu > "$tmp/g.log" 2>&1
check "a valid image is predicted" '[ -s "$tmp/gout/img00.png" ]' || cat "$tmp/g.log"
exit $fail
