# predict_lib.sh — shared by the tests that write or read PNG files (tests/predict*.sh and
# others): python3 finds tests/png_io.py (PYTHONPATH), make_images DIR writes RGB PNG images of
# the given sizes (python3, standard library), train_ckpt OUT FLAGS trains a small CPU network
# and leaves OUT/checkpoint.ckpt.
PYTHONPATH=$(cd "${srcdir:-.}/tests" && pwd)${PYTHONPATH:+:$PYTHONPATH}
export PYTHONPATH
make_images() { # DIR WxH ...
  dir=$1
  shift
  python3 - "$dir" "$@" <<'PY'
import os, random, sys
from png_io import write
d = sys.argv[1]
os.makedirs(d, exist_ok=True)
random.seed(7)
for i, size in enumerate(sys.argv[2:]):
    w, h = (int(v) for v in size.split("x"))
    px = bytes(random.randrange(256) for _ in range(w * h * 3))
    write(os.path.join(d, "img%02d.png" % i), w, h, 3, px)
PY
}
train_ckpt() { # OUT FLAGS...
  out=$1
  shift
  "${top_builddir:-.}/shmddp-train" --device cpu --nproc 2 --image-size 32 --train-size 32 \
    --val-size 4 --batch-size 4 --epochs 1 --workers 0 --progress off --save-every 1000 \
    --out "$out" "$@" > "$out.log" 2>&1
}
