#!/bin/sh
# PyTorch as an oracle, on the CPU: one training step of the U-Net (fp32, CPU kernels) against
# the same step in PyTorch in float64 — the loss and the gradient of every parameter.
# dev/torch_check writes our step (weights, batch, loss, gradients); dev/torch_crosscheck.py
# rebuilds the network with torch.nn.functional and compares; a CPU fp32 step must agree within
# 1e-4 (relative, per tensor; measured: about 1e-8 in the loss and 1e-6 in the gradients).
# BatchNorm and GroupNorm, several widths, image sizes and batch sizes; every case runs and every
# failing one is named. Then the check is shown to fail: one gradient altered by 1 % is refused.
#
# SKIP (77) where no python3 can import torch and numpy. On Debian/Ubuntu:
# apt-get install python3-torch (PyTorch 1.13, CPU; .ci/run installs it).
set -u
tc=${top_builddir:-.}/dev/torch_check
py=${srcdir:-.}/dev/torch_crosscheck.py
. "${srcdir:-.}/tests/lib.sh"
if ! torch_python 'import numpy, torch; print(torch.__version__)'; then
  echo "SKIP: no python3 here imports torch and numpy (apt-get install python3-torch)"
  exit 77
fi
echo "torch_oracle: PyTorch $v ($py3)"
[ -x "$tc" ] || { echo "FAIL: $tc was not built"; exit 1; }
failed=""
n=0
# norm widths size batch classes
while read -r norm widths size batch classes; do
  n=$((n + 1))
  d="$tmp/case$n"
  name="$norm widths $widths ${size}x$size batch $batch classes $classes"
  if ! "$tc" --device cpu --precision fp32 --norm "$norm" --widths "$widths" --size "$size" \
      --batch "$batch" --classes "$classes" --seed "$n" --out "$d" > "$d.log" 2>&1; then
    echo "FAIL: $name: torch_check failed: $(tail -1 "$d.log")"
    failed="$failed
  $name (torch_check)"
    continue
  fi
  "$py3" "$py" "$d" > "$d.cmp" 2>&1
  rc=$?
  summary=$(tail -1 "$d.cmp")
  if [ $rc -eq 0 ] && [ "${summary##* }" = PASS ]; then
    echo "ok: $name: $summary"
  else
    echo "FAIL: $name (exit $rc):"
    cat "$d.cmp"
    failed="$failed
  $name"
  fi
done <<EOF
batch 8,16 16 4 4
batch 16,32,64 32 2 4
group 16,32,64 32 3 4
batch 16,32,64,128 64 2 3
group 16,32,64,128 64 1 5
EOF

# The oracle can fail: the first case's gradients, 50 of them 1 % larger, must be refused.
bad="$tmp/altered"
cp -r "$tmp/case1" "$bad" 2>/dev/null &&
  "$py3" -c 'import sys, numpy as np; p = sys.argv[1] + "/grads.bin"; g = np.fromfile(p, "<f4")
g[:50] *= 1.01; g.tofile(p)' "$bad" &&
  ! "$py3" "$py" "$bad" > "$bad.cmp" 2>&1 && [ "$(tail -1 "$bad.cmp" | awk '{print $NF}')" = FAIL ]
if [ $? -eq 0 ]; then
  echo "ok: altered gradients are refused: $(tail -1 "$bad.cmp")"
else
  echo "FAIL: altered gradients were not refused"
  cat "$bad.cmp" 2>/dev/null
  failed="$failed
  altered gradients accepted"
fi

if [ -n "$failed" ]; then
  echo "torch_oracle: failed:$failed"
  exit 1
fi
echo "torch_oracle: $n cases agree with PyTorch (float64)"
