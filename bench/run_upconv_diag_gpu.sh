#!/usr/bin/env bash
# bench/run_upconv_diag_gpu.sh OUTDIR — does the parameters' alignment change the graph-replayed
# step? On the GPU machine, from a configured and built CUDA tree (run in its root; nothing is
# built here). About a minute.
#
# dev/ops_cuda_bench lays every parameter tensor 16-byte aligned; the model's flat buffer puts
# every 16-bit tensor after the head 8 bytes off (-o 4 reproduces that). The same step (bf16,
# batch 6, the in-graph ablation per category) with -o 0 and -o 4, then the trainer's images/s
# (bf16, 68 steps) for reference. On a tree where a convolution path hands such weights to
# cuBLAS as they are, -o 4 shows its category slower; where every path copies them to an
# aligned place first (weights before forward and input gradient, the weight gradient through
# an aligned buffer), -o 4 costs only those copies: what laying the model's tensors out
# 16-byte aligned would save.
# Writes OUTDIR/ops_o0.txt, OUTDIR/ops_o4.txt, OUTDIR/train.log and OUTDIR/summary.txt (printed).
set -u
OUT=${1:?usage: bench/run_upconv_diag_gpu.sh OUTDIR}
mkdir -p "$OUT"
SUM="$OUT/summary.txt"
B=./dev/ops_cuda_bench
: > "$SUM"
note() { echo "$*" | tee -a "$SUM"; }
note "# parameter alignment and the step: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
nvidia-smi -L 2>/dev/null | sed 's/^/# gpu: /' | tee -a "$SUM"
[ -x "$B" ] || { note "$B is missing: configure with CUDA and make first"; exit 1; }
for off in 0 4; do
  timeout 60 "$B" -p bf16 -t 0 -o "$off" > "$OUT/ops_o$off.txt" 2>&1
  note "ops_cuda_bench -o $off: rc $?"
done
python3 - "$OUT/ops_o0.txt" "$OUT/ops_o4.txt" >> "$SUM" 2>&1 <<'EOF'
import re, sys
def table(p):
    out, on, step = {}, False, float("nan")
    for line in open(p):
        m = re.match(r"in the CUDA graph \(step ([0-9.]+) ms\)", line)
        if m: on, step = True, float(m.group(1)); continue
        if on:
            f = line.split()
            if f and f[0] == "sum": break
            if len(f) >= 4:
                try: out[" ".join(f[:-3])] = float(f[-2])
                except ValueError: pass
    return step, out
(s0, t0), (s4, t4) = table(sys.argv[1]), table(sys.argv[2])
print(f"{'ms in the graph':16s} {'-o 0':>8s} {'-o 4':>8s} {'diff':>8s}")
print(f"{'step':16s} {s0:8.3f} {s4:8.3f} {s4 - s0:+8.3f}")
for k in t0:
    v4 = t4.get(k, float("nan"))
    print(f"{k:16s} {t0[k]:8.3f} {v4:8.3f} {v4 - t0[k]:+8.3f}")
EOF
if [ -x ./train ]; then
  timeout 60 ./train --device cuda --widths reference --batch-size 6 --image-size 256 --classes 4 \
    --optimizer sgd --momentum 0.9 --lr 0.01 --warmup-steps 1 --steps 68 --timing-warmup 8 \
    --train-size 1200 --val-size 12 --workers 8 --log-every 10 --timeout 60 --nproc 1 \
    --precision bf16 --out "$OUT/run" > "$OUT/train.log" 2>&1
  note "trainer bf16: rc $? $(grep -o 'images_per_s=[0-9.]*' "$OUT/train.log" | tail -1)"
  rm -rf "$OUT/run"
fi
cat "$SUM"
