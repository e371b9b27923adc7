#!/bin/sh
# Exported weights in PyTorch: shmddp-predict --export writes safetensors, which
# tests/predict_torch.py loads into a plain torch.nn.Module written from docs/training.md's
# description (reading the file itself, without shmddp code) and runs on the images that
# shmddp-predict scored: the logits agree to 1e-3 of the largest, and so does every argmax that
# is not a near tie. BatchNorm and GroupNorm networks. SKIP (77) where no python3 imports torch
# (apt-get install python3-torch; .ci/run installs it).
set -u
. "${srcdir:-.}/tests/lib.sh"
torch_python 'import torch; print(torch.__version__)' ||
  { echo "SKIP: no python3 here imports torch (apt-get install python3-torch)"; exit 77; }
. "${srcdir:-.}/tests/predict_lib.sh"
predict=${top_builddir:-.}/shmddp-predict
make_images "$tmp/img" 32x32 32x32 64x48 16x40
for norm in "batch" "group --groups 2"; do
  name=$(echo "$norm" | cut -d' ' -f1)
  train_ckpt "$tmp/$name" --widths 4,8,16 --classes 3 --norm $norm || { echo "FAIL: training ($name)"; fail=1; continue; }
  "$predict" --checkpoint "$tmp/$name/checkpoint.ckpt" --images "$tmp/img" --out "$tmp/p-$name" \
    --device cpu --logits --overlay off > /dev/null &&
  "$predict" --checkpoint "$tmp/$name/checkpoint.ckpt" --export "$tmp/$name.safetensors" > /dev/null ||
    { echo "FAIL: shmddp-predict ($name)"; fail=1; continue; }
  echo "== $name norm"
  "$py3" "${srcdir:-.}/tests/predict_torch.py" "$tmp/$name.safetensors" "$tmp/img" "$tmp/p-$name" || fail=1
done
exit $fail
