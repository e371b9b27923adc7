#!/bin/sh
# DataParallel against DDP on the GPUs of this machine (issue 8), through tools/compare: the
# reference configuration (BENCHMARKS.md: U-Net 64..1024, 256x256, batch 6 per GPU, 4 classes,
# SGD, bf16) and an imbalance configuration as users meet it (512x512, 150 classes, AdamW, fp32:
# DataParallel's gathered logits and optimizer state on GPU 0), each in dp, ddp and ddp-syncbn.
# Usage: bench/run_dp_gpu.sh BUILD_DIR OUT_DIR
# Writes 4 files: OUT_DIR/dp_vs_ddp.tsv (machine header, then the table) and
# OUT_DIR/{throughput,step_time,memory}.svg. The runs' own output goes to a temporary folder;
# the log of a failed run is printed. Six runs of 38 steps, each killed after 60 s.
set -u
B=$1; O=$2
mkdir -p "$O"
work=$(mktemp -d /tmp/dp_vs_ddp.XXXXXX)
ngpu=$(nvidia-smi -L | wc -l)
[ "$ngpu" -ge 2 ] || echo "run_dp_gpu.sh: only $ngpu GPU(s) visible; DataParallel runs on 1"
n=$([ "$ngpu" -ge 2 ] && echo 2 || echo 1)
common="--device cuda --nproc $n --widths reference --batch-size 6 --steps 38 --timing-warmup 8 \
--warmup-steps 1 --train-size 1200 --val-size 12 --workers 6 --log-every 10 --timeout 60"
ref="$common --image-size 256 --classes 4 --optimizer sgd --momentum 0.9 --lr 0.01 --precision bf16"
imb="$common --image-size 512 --classes 150 --optimizer adamw --lr 0.0001 --precision fp32"
COMMIT=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
export COMMIT
"$B/tools/compare" --train "$B/train" --out "$work/out" --work "$work/runs" \
  --table dp_vs_ddp.tsv --skip 8 --run-timeout 60 --title "DataParallel vs DDP, $n x $(nvidia-smi \
  --query-gpu=name --format=csv,noheader | head -1)" \
  --case "reference=$ref" --case "imbalance=$imb"
rc=$?
{
  echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "# commit: $COMMIT"
  nvidia-smi -L | sed 's/^/# /'
  nvidia-smi topo -m 2>/dev/null | head -4 | sed 's/^/# topo: /'
  echo "# produced by: bench/run_dp_gpu.sh BUILD_DIR OUT_DIR"
  echo "# reference: $ref"
  echo "# imbalance: $imb"
  cat "$work/out/dp_vs_ddp.tsv" 2>/dev/null
} > "$O/dp_vs_ddp.tsv"
cp "$work"/out/*.svg "$O"/ 2>/dev/null
for d in "$work"/runs/*; do # what DP printed (its per-device ledger), and any failure
  if [ "${d##*-}" = dp ] || ! grep -q '^result:' "$d/train.log" 2>/dev/null; then
    echo "== $(basename "$d")"; tail -n 16 "$d/train.log" 2>/dev/null
  fi
done
grep -v '^#' "$O/dp_vs_ddp.tsv" | cut -f1-12
rm -rf "$work"
exit $rc
