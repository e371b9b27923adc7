#!/bin/sh
# bench/user_paths_gpu.sh OUTDIR — what a user meets, on a GPU: shmddp-predict on a GPU against
# the CPU, the exported weights of a GPU-trained (bf16) checkpoint in a plain PyTorch module, a
# short GPU run on a PNG folder (the label scan, per-class IoU, miou_classes; 0/255 masks
# refused), a resumed-and-extended GPU run whose log holds every step once, and the CPU user
# tests of this build. GPU machine, 1 GPU. Run from the root of a tree configured with CUDA
# (it runs `make` of what is configured, nothing more). About 2-3 minutes.
# Every part is bounded by a timeout and the next one runs whatever happened. Writes
# OUTDIR/summary.txt (PASS/FAIL per part; bench/results/user_gpu_1xh200.txt) and OUTDIR/*.log.
set -u
. "$(dirname "$0")/lib.sh"
bench_out "${1:?usage: bench/user_paths_gpu.sh OUTDIR}"
T=./shmddp-train
P=./shmddp-predict
bench_header "what a user meets, on a GPU" OUTDIR
py3=""
for p in ${PYTHON:-} python3 /usr/bin/python3; do
  if "$p" -c 'import torch, numpy' 2>/dev/null; then py3=$p; break; fi
done
make -j8 > "$OUT/make.log" 2>&1 || { echo "make failed: $OUT/make.log"; tail -20 "$OUT/make.log"; }
W=$(mktemp -d /tmp/user_gpu.XXXXXX)

# 1. train on the GPU (bf16, CUDA graph), save a checkpoint; predict on GPU and CPU
. tests/predict_lib.sh
make_images "$W/img" 64x64 64x64 64x64 96x64 64x32
part gpu_train 150 sh -c "$T --device cuda --nproc 1 --widths 16,32,64 --image-size 64 --train-size 256 --val-size 16 --batch-size 8 --epochs 2 --save-every 1000 --progress lines --out $W/run > $W/train.log 2>&1; cat $W/train.log; grep -q '^result: steps=64 ' $W/train.log"
part predict_gpu 150 sh -c "$P --checkpoint $W/run/checkpoint.ckpt --images $W/img --out $W/pg --device cuda --logits --batch-size 4"
part predict_cpu 150 sh -c "$P --checkpoint $W/run/checkpoint.ckpt --images $W/img --out $W/pc --device cpu --logits --batch-size 4"
if [ -n "$py3" ]; then
  part predict_gpu_vs_cpu 150 sh -c "$py3 - $W/img $W/pg $W/pc 4 <<'PY'
import os, sys, numpy as np
img, g, c, k = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
worst, agree, total = 0.0, 0, 0
for n in sorted(os.listdir(img)):
    a = np.fromfile(os.path.join(g, n[:-4] + '.logits'), '<f4')
    b = np.fromfile(os.path.join(c, n[:-4] + '.logits'), '<f4')
    assert a.size == b.size and a.size % k == 0, n
    worst = max(worst, float(np.abs(a - b).max() / np.abs(b).max()))
    agree += int((a.reshape(-1, k).argmax(1) == b.reshape(-1, k).argmax(1)).sum()); total += a.size // k
print('GPU vs CPU logits: largest difference %.2e of the largest; argmax agreement %.5f' % (worst, agree / total))
sys.exit(0 if worst < 2e-2 and agree / total > 0.99 else 1)
PY"
  part export_torch 150 sh -c "$P --checkpoint $W/run/checkpoint.ckpt --export $W/w.safetensors && $py3 tests/predict_torch.py $W/w.safetensors $W/img $W/pc"
else
  note "predict_gpu_vs_cpu, export_torch: SKIP (no python3 with torch and numpy)"
fi

# 2. a PNG folder on the GPU: the label scan, per-class IoU, miou_classes; 0/255 refused
part gpu_png 150 sh -c "python3 - $W/png <<'PY'
import os, random, struct, sys, zlib
root = sys.argv[1]
def png(path, w, h, ch, px):
    raw = b''.join(b'\\0' + bytes(px[y * w * ch:(y + 1) * w * ch]) for y in range(h))
    chunk = lambda t, d: struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
    open(path, 'wb').write(b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2 if ch == 3 else 0, 0, 0, 0)) + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b''))
for s in ('images', 'masks'): os.makedirs(os.path.join(root, s), exist_ok=True)
for i in range(40):
    a = 8 + i % 20; m = [255 if a <= x < a + 24 and a <= y < a + 24 else 0 for y in range(64) for x in range(64)]
    png(os.path.join(root, 'images', 'i%02d.png' % i), 64, 64, 3, [v for q in m for v in ((200, 50, 50) if q else (40, 90, 40))])
    png(os.path.join(root, 'masks', 'i%02d.png' % i), 64, 64, 1, m)
PY
$T --device cuda --nproc 1 --data $W/png --classes 2 --image-size 64 --widths 16,32 --steps 4 --out $W/p0
test \$? -eq 2 || { echo '0/255 masks were not refused'; exit 1; }
$T --device cuda --nproc 1 --data $W/png --classes 3 --mask-map 255:1 --image-size 64 --widths 16,32 --batch-size 4 --epochs 2 --progress lines --out $W/p1 > $W/p1.log 2>&1
rc=\$?
cat $W/p1.log
test \$rc -eq 0 && grep -q 'train labels (share of pixels)' $W/p1.log && grep -q '2 absent' $W/p1.log && grep -q 'miou_classes=2/3' $W/p1.log"

# 3. resume and extend on the GPU: the whole log, bit-identical checkpoints to a straight run
part gpu_resume_extend 150 sh -c "$T --device cuda --nproc 1 --widths 16,32 --image-size 64 --train-size 96 --val-size 8 --batch-size 8 --warmup-steps 2 --epochs 1 --save-every 12 --out $W/r > /dev/null &&
$T --device cuda --nproc 1 --widths 16,32 --image-size 64 --train-size 96 --val-size 8 --batch-size 8 --warmup-steps 2 --epochs 2 --save-every 24 --resume $W/r/checkpoint.ckpt --out $W/r &&
test \"\$(grep -o '\"type\": \"step\", \"step\": [0-9]*' $W/r/log.jsonl | grep -o '[0-9]*\$' | tr '\\n' ' ')\" = '1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 '"

# 4. the CPU user tests of this (CUDA) build
part cpu_user_tests 150 sh -c "make -j8 check TESTS='tests/user_masks.sh tests/user_resume.sh tests/user_cli.sh tests/predict.sh tests/predict_torch.sh tests/check_cli tests/check_metrics' && grep -h '^# \\(PASS\\|FAIL\\|SKIP\\)' test-suite.log"

rm -rf "$W"
exit "$FAILED"
