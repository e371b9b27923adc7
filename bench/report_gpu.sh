#!/bin/sh
# bench/report_gpu.sh BUILD_DIR OUT_DIR [PRECISION] — a short DDP run on 2 GPUs with the timeline
# on, then its report (GPU machine, 2 GPUs). About a minute; writes at most
# three files to OUT_DIR: report.html, timeline.json (both ranks' traces merged, a pid per rank:
# open in ui.perfetto.dev) and, where chromium exists, report.png.
# The run's own folder is kept out of OUT_DIR (in a temporary folder); its summary is printed.
# PRECISION default bf16 (bench/results/report_2xh200.html, .png and timeline_2xh200.json).
set -u
. "$(dirname "$0")/lib.sh"
build_and_out "$@"
P=${3:-bf16}
here=$(cd "$(dirname "$0")" && pwd)
run=$(mktemp -d /tmp/shmddp_report_XXXXXX) || exit 1
trap 'rm -rf "$run"' EXIT
echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ) commit: $COMMIT"
nvidia-smi -L 2>/dev/null | sed 's/^/# /'
# The reference configuration for 60 steps; steps 9-12 traced (after 8 warm-up steps).
cmd="$B/train --device cuda --nproc 2 $REF_FLAGS --batch-size 6 --steps 60 --timeline 4 \
--workers 6 --precision $P --sync-bn on --out $run/ddp_2gpu_$P"
echo "+ $cmd"
timeout -s KILL 100 $cmd
rc=$?
[ $rc -eq 0 ] || { echo "report_gpu: training failed (exit $rc)"; exit $rc; }
python3 "$here/../tools/report" "$run/ddp_2gpu_$P" -o "$O/report.html" \
  --merge-timeline "$O/timeline.json" --title "shmddp: DDP on 2 GPUs, $P, timeline and ledger" ||
  exit 1
if command -v chromium >/dev/null 2>&1; then
  timeout 60 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --window-size=1150,4400 --screenshot="$O/report.png" "file://$(cd "$O" && pwd)/report.html" \
    >/dev/null 2>&1 || echo "report_gpu: no screenshot (chromium failed)"
fi
ls -l "$O"
