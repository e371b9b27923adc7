#!/bin/sh
# A short 2-GPU DDP run with the timeline on, then its report. About a minute; writes at most
# three files to OUT_DIR: report.html, timeline.json (both ranks' traces merged, a pid per rank:
# open in ui.perfetto.dev) and, where chromium exists, report.png.
# The run's own folder is kept out of OUT_DIR (in a temporary folder); its summary is printed.
# Usage: bench/run_report_gpu.sh BUILD_DIR OUT_DIR [PRECISION]   (PRECISION default bf16)
set -u
B=$1; O=$2; P=${3:-bf16}
here=$(cd "$(dirname "$0")" && pwd)
run=$(mktemp -d /tmp/shmddp_report_XXXXXX) || exit 1
trap 'rm -rf "$run"' EXIT
mkdir -p "$O"
echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ) commit: ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
nvidia-smi -L 2>/dev/null | sed 's/^/# /'
# The reference model (BENCHMARKS.md) for 60 steps; steps 9-12 traced (after 8 warm-up steps).
cmd="$B/train --device cuda --nproc 2 --widths reference --batch-size 6 --image-size 256 \
--classes 4 --optimizer sgd --momentum 0.9 --lr 0.01 --warmup-steps 1 --steps 60 \
--timing-warmup 8 --timeline 4 --train-size 1200 --val-size 24 --workers 6 --log-every 20 \
--precision $P --sync-bn on --timeout 60 --out $run/ddp_2gpu_$P"
echo "+ $cmd"
timeout -s KILL 100 $cmd
rc=$?
[ $rc -eq 0 ] || { echo "run_report_gpu: training failed (exit $rc)"; exit $rc; }
python3 "$here/../tools/report" "$run/ddp_2gpu_$P" -o "$O/report.html" \
  --merge-timeline "$O/timeline.json" --title "shmddp: DDP on 2 GPUs, $P, timeline and ledger" ||
  exit 1
if command -v chromium >/dev/null 2>&1; then
  timeout 60 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --window-size=1150,4400 --screenshot="$O/report.png" "file://$(cd "$O" && pwd)/report.html" \
    >/dev/null 2>&1 || echo "run_report_gpu: no screenshot (chromium failed)"
fi
ls -l "$O"
