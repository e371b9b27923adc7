# predict_lib.sh — shared by tests/predict.sh and tests/predict_torch.sh: make_images DIR writes
# RGB PNG images of the given sizes (python3, standard library), train_ckpt OUT FLAGS trains a
# small CPU network and leaves OUT/checkpoint.ckpt.
make_images() { # DIR WxH ...
  dir=$1
  shift
  python3 - "$dir" "$@" <<'PY'
import os, random, struct, sys, zlib
d = sys.argv[1]
os.makedirs(d, exist_ok=True)
random.seed(7)
for i, size in enumerate(sys.argv[2:]):
    w, h = (int(v) for v in size.split("x"))
    px = bytes(random.randrange(256) for _ in range(w * h * 3))
    raw = b"".join(b"\0" + px[y * w * 3:(y + 1) * w * 3] for y in range(h))
    chunk = lambda t, b: struct.pack(">I", len(b)) + t + b + struct.pack(">I", zlib.crc32(t + b) & 0xffffffff)
    with open(os.path.join(d, "img%02d.png" % i), "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
PY
}
train_ckpt() { # OUT FLAGS...
  out=$1
  shift
  "${top_builddir:-.}/shmddp-train" --device cpu --nproc 2 --image-size 32 --train-size 32 \
    --val-size 4 --batch-size 4 --epochs 1 --workers 0 --progress off --save-every 1000 \
    --out "$out" "$@" > "$out.log" 2>&1
}
