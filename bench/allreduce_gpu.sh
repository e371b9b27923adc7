#!/usr/bin/env bash
# bench/allreduce_gpu.sh — the CUDA collectives beside NCCL on this machine's GPUs (GPU machine,
# 2 GPUs or more: one rank per GPU), as recorded in bench/results/allreduce_2xh200*. Run from a
# build directory (where tools/allreduce_bench is):
#   ../bench/allreduce_gpu.sh OUTDIR [COMMIT] [main|algos|all]
# main (default): OUTDIR/allreduce_2xh200.tsv (f32 sum, auto algorithm, NCCL in the same run,
# every result checked) and OUTDIR/bench.log; algos: OUTDIR/algos.txt (each algorithm forced over
# its range, CUDA-graph replays, bf16 and f64 sweeps); all: both.
set -uo pipefail
out=${1:?usage: allreduce_gpu.sh OUTDIR [COMMIT] [main|algos|all]}
mode=${3:-main}
commit=${2:-$(sh "$(dirname "$0")/tree_name.sh" "$(dirname "$0")/..")}
mkdir -p "$out"
bench=./tools/allreduce_bench
export NCCL_NVLS_ENABLE=0 # never NVLink multicast
ngpu=$(nvidia-smi -L | wc -l)
cmd="$bench --device cuda -b 8 -e 1G -f 2 -n 50 -w 10 -c 1 --compare nccl"
if [ "$mode" != algos ]; then
{
  echo "# allreduce: shmddp CUDA transport vs NCCL (same run), f32 sum, out-of-place, busbw = algbw * 2(n-1)/n"
  echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  commit: $commit"
  nvidia-smi -L | sed 's/^/# gpu: /'
  nvidia-smi topo -m 2>/dev/null | sed 's/^/# topo: /'
  echo "# driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)  nccl: $(ldconfig -p 2>/dev/null | grep -o "/[^ ]*libnccl.so.2" | head -1 | xargs -r readlink -f | sed "s/.*libnccl.so.//")"
  echo "# command: $cmd --tsv FILE  (ranks: $ngpu, one per GPU)"
} > "$out/header.txt"
$cmd --tsv "$out/table.tsv" 2>&1 | tee "$out/bench.log"
cat "$out/header.txt" "$out/table.tsv" > "$out/allreduce_2xh200.tsv" && rm -f "$out/table.tsv"
rm -f "$out/header.txt"
fi
[ "$mode" = main ] && exit 0
{
  for a in direct twoshot cering staged; do
    case $a in
      direct) r="-b 8 -e 4M -f 4" ;;
      twoshot) r="-b 64K -e 1G -f 4" ;;
      cering) r="-b 1M -e 1G -f 4" ;;
      staged) r="-b 64K -e 256M -f 4" ;;
    esac
    echo "## forced: -a $a $r"
    $bench --device cuda -a $a $r -n 30 -w 5 -c 1
  done
  echo "## forced: -a direct, then -a twoshot, one CUDA-graph replay of 30 calls (no host cost)"
  $bench --device cuda -a direct -b 8 -e 1M -f 4 -n 30 -w 5 -c 1 --graph
  $bench --device cuda -a twoshot -b 64K -e 16M -f 4 -n 30 -w 5 -c 1 --graph
  echo "## bf16 sum, auto (the DDP gradient case)"
  $bench --device cuda -d bf16 -b 1M -e 64M -f 4 -n 30 -w 5 -c 1 --compare nccl
  echo "## f64 sum, small (the SyncBN case), graph replays"
  $bench --device cuda -d f64 -b 8 -e 64K -f 4 -n 100 -w 10 -c 1 --graph --compare nccl
} 2>&1 | tee "$out/algos.txt"
