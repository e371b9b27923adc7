#!/bin/sh
# Issue 17: the convolutions on cuDNN's graph API against the legacy API, in one call on the GPU
# machine — layer by layer (tools/dnn_graph_bench), the trainer (bf16 and fp32, with PyTorch in
# the same call), the per-op breakdown of the new step, and the default job's loss curve on both.
# Usage: bench/run_conv_api_gpu.sh BUILD_DIR OUT_DIR
# Environment: STEPS (timed steps of the trainer rows, default 60); PARTS (default
# "layers train default ops"); COMMIT (recorded; the device copy's git HEAD can be stale).
# Writes OUT_DIR/conv_api.txt (the summary), train.tsv/train.log (bench/run_train_gpu.sh's rows),
# ops.txt, default_{legacy,graph}/ (summary.json + log.jsonl) and layers_*.txt.
set -u
B=$1; O=$2
mkdir -p "$O"
sum="$O/conv_api.txt"
PARTS=${PARTS:-"layers train default ops"}
{
  echo "# conv_api: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}"
  nvidia-smi -L | sed 's/^/# /'
} > "$sum"
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
if has layers; then
  timeout -s KILL 120 "$B/tools/dnn_graph_bench" -p bf16 -c 6 -r 10 > "$O/layers_bf16.txt" 2>&1
  tail -6 "$O/layers_bf16.txt" >> "$sum"
fi
if has train; then
  # the trainer: graph (default) and legacy in one call; PyTorch's rows come from run_train_gpu.sh
  STEPS=${STEPS:-60} TORCH=1 sh bench/run_train_gpu.sh "$B" "$O/tr" "bf16 fp32" > /dev/null 2>&1
  common="--device cuda --widths reference --batch-size 6 --image-size 256 --classes 4 \
--optimizer sgd --momentum 0.9 --lr 0.01 --warmup-steps 1 --steps $((${STEPS:-60} + 8)) --timing-warmup 8 \
--train-size 1200 --val-size 12 --workers 8 --log-every 10 --timeout 60 --nproc 1"
  for row in "bf16 SHMDDP_CONV_API=legacy" "fp32 SHMDDP_CONV_API=legacy" \
             "bf16 SHMDDP_RECOMPUTE=0"; do
    set -- $row
    p=$1; shift
    env "$@" timeout -s KILL 150 "$B/train" $common --precision "$p" --out "$O/tr/x" > "$O/last.log" 2>&1
    ips=$(grep -o 'images_per_s=[0-9.]*' "$O/last.log" | tail -1 | cut -d= -f2)
    peak=$(grep -o 'peak_mib=[0-9,]*' "$O/last.log" | tail -1 | cut -d= -f2)
    printf 'shmddp\tsingle\t1\toff\t%s\t%s\t%s\t%s\n' "$p" "$*" "${ips:-failed}" "${peak:--}" >> "$O/tr/train.tsv"
    cat "$O/last.log" >> "$O/tr/train.log"
  done
  rm -rf "$O/tr"/run_* "$O/tr/x" "$O/last.log"
  echo "## trainer rows (images/s, peak MiB)" >> "$sum"
  cut -f1-8 "$O/tr/train.tsv" | grep -v '^#' >> "$sum"
fi
if has default; then
  # the default job (./train with its defaults: bf16, 4 epochs, 8000 steps) on both APIs
  for api in legacy graph; do
    SHMDDP_CONV_API=$api timeout -s KILL 200 "$B/train" --out "$O/default_$api" > "$O/default_$api.log" 2>&1
    echo "default job, $api: rc $? $(grep -o 'val_miou=[0-9.]*' "$O/default_$api.log" | tr '\n' ' ') \
$(grep -o 'images_per_s=[0-9.]*' "$O/default_$api.log" | tail -1)" >> "$sum"
  done
  python3 - "$O/default_legacy/log.jsonl" "$O/default_graph/log.jsonl" >> "$sum" 2>&1 <<'EOF'
import json, sys
def losses(p):
    out = {}
    for line in open(p):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if "loss" in r and "step" in r:
            out[r["step"]] = r["loss"]
    return out
a, b = losses(sys.argv[1]), losses(sys.argv[2])
steps = sorted(set(a) & set(b))
same = sum(1 for s in steps if a[s] == b[s])
d = [abs(a[s] - b[s]) for s in steps]
def mean(xs): return sum(xs) / max(len(xs), 1)
last = steps[-500:]
print(f"loss curves: {len(steps)} common steps, {same} identical; max |diff| {max(d) if d else 0:.3g}; "
      f"mean loss over the last 500 steps legacy {mean([a[s] for s in last]):.6f} graph {mean([b[s] for s in last]):.6f}")
for k in (100, 1000, 4000, 8000):
    if k in a and k in b:
        print(f"  step {k}: legacy {a[k]:.6f} graph {b[k]:.6f}")
EOF
fi
if has ops; then
  timeout -s KILL 120 "$B/bench/ops_cuda_bench" -p bf16 -t 40 > "$O/ops.txt" 2>&1
  grep -E '^step|^category|^total' -A0 "$O/ops.txt" >> "$sum"
fi
cat "$sum"
