#!/bin/sh
# bench/graph_timeline_gpu.sh OUT_DIR — the idle time between the kernels of the training step as
# the trainer replays it (a CUDA graph), on a GPU machine with Nsight Systems: what the step
# account's "in no pass alone" is, and how much of a small pass is its launches. Builds nothing:
# it uses the CUDA build in BUILD (default b, as bench/speed_anchor_gpu.sh). Runs
# dev/ops_cuda_bench -P REPLAYS under nsys, recording only the replays (its cudaProfilerStart /
# Stop range; each kernel of the graph traced on its own), then bench/graph_timeline.py on the
# GPU trace. About a minute. From the tree's root:
#   ./autogen.sh && mkdir -p b && cd b && ../configure -q --with-cuda-arch=90 && make -j16 &&
#   cd .. && sh bench/graph_timeline_gpu.sh OUT_DIR
# Environment: BUILD (build folder, default b), PREC (bf16, f16 or f32; default bf16), REPLAYS
#   (default 5), NSYS (the nsys program; default: on PATH, in /usr/local/cuda/bin or under
#   /opt/nvidia), COMMIT (the tree's commit, where git cannot tell it); the SHMDDP_* settings the
#   bench reads (docs/environment.md) pass through.
# Writes OUT_DIR/timeline.md (the summary, also printed), OUT_DIR/trace.csv (the GPU trace) and
# OUT_DIR/nsys.log; the report file itself (tl.nsys-rep) stays in OUT_DIR.
set -u
. "$(dirname "$0")/lib.sh"
O=${1:-}
[ -n "$O" ] || bench_usage
B=${BUILD:-b}; PREC=${PREC:-bf16}; REPLAYS=${REPLAYS:-5}
case $REPLAYS in '' | *[!0-9]* | 0) echo "graph_timeline_gpu: REPLAYS must be a count, 1 or more" >&2; exit 2 ;; esac
case $PREC in bf16 | f16 | f32) ;; *) echo "graph_timeline_gpu: PREC must be bf16, f16 or f32" >&2; exit 2 ;; esac
[ -x "$B/dev/ops_cuda_bench" ] || { echo "graph_timeline_gpu: no $B/dev/ops_cuda_bench: configure and build with CUDA first (see the top of this file)" >&2; exit 2; }
nsys=${NSYS:-$(command -v nsys 2> /dev/null)}
[ -n "$nsys" ] || [ ! -x /usr/local/cuda/bin/nsys ] || nsys=/usr/local/cuda/bin/nsys
[ -n "$nsys" ] || nsys=$(ls -d /opt/nvidia/nsight-systems/*/bin/nsys 2> /dev/null | tail -1)
[ -n "$nsys" ] && [ -x "$nsys" ] || { echo "graph_timeline_gpu: no nsys (Nsight Systems) on this machine: set NSYS" >&2; exit 2; }
mkdir -p "$O" || exit 2
cmd="BUILD=$B PREC=$PREC REPLAYS=$REPLAYS sh bench/graph_timeline_gpu.sh OUT_DIR"
{
  record_header "$cmd"
  echo "# nsys: $("$nsys" --version 2> /dev/null | head -1)"
} > "$O/header.txt"
rm -f "$O/tl.nsys-rep" "$O/tl.sqlite" "$O/tl_cuda_gpu_trace.csv"
timeout 300 "$nsys" profile --capture-range=cudaProfilerApi --capture-range-end=stop \
  --cuda-graph-trace=node --trace=cuda --sample=none --cpuctxsw=none --force-overwrite=true \
  -o "$O/tl" "$B/dev/ops_cuda_bench" -p "$PREC" -n 10 -W 4 -P "$REPLAYS" > "$O/nsys.log" 2>&1 ||
  { echo "graph_timeline_gpu: nsys profile failed (rc $?):" >&2; tail -15 "$O/nsys.log" >&2; exit 1; }
timeout 300 "$nsys" stats --report cuda_gpu_trace --format csv --force-export=true \
  --output "$O/tl" "$O/tl.nsys-rep" >> "$O/nsys.log" 2>&1 ||
  { echo "graph_timeline_gpu: nsys stats failed (rc $?):" >&2; tail -15 "$O/nsys.log" >&2; exit 1; }
[ -s "$O/tl_cuda_gpu_trace.csv" ] || { echo "graph_timeline_gpu: nsys wrote no GPU trace" >&2; tail -15 "$O/nsys.log" >&2; exit 1; }
mv "$O/tl_cuda_gpu_trace.csv" "$O/trace.csv"
{
  cat "$O/header.txt"
  grep -h '^ops_cuda_bench:\|^step (CUDA graph)' "$O/nsys.log" | sed 's/^/# /'
  echo
  python3 "$(dirname "$0")/graph_timeline.py" "$O/trace.csv" "$REPLAYS"
} > "$O/timeline.md" || { echo "graph_timeline_gpu: graph_timeline.py failed" >&2; cat "$O/timeline.md" >&2; exit 1; }
cat "$O/timeline.md"
