#!/usr/bin/env bash
# bench/ops_cuda_run.sh — on the GPU machine: build the CUDA ops, run their tests, the U-Net
# step benchmark (bf16 and f32) and compute-sanitizer memcheck on the own kernels' tests.
# usage: bench/ops_cuda_run.sh OUTDIR [build-dir]   (from the source root; needs Check)
set -u
out=${1:?usage: $0 OUTDIR [build-dir]}
bdir=${2:-build-ops-cuda}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
cd "$root" && ./autogen.sh > "$out/build.log" 2>&1
mkdir -p "$bdir" && cd "$bdir" || exit 1
{ ../configure -q && make -j16 libopscuda.a libmodel.a tests/check_ops_cuda bench/ops_cuda_bench; } \
  >> "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw \
  --format=csv; } > "$out/machine.txt" 2>&1
cat "$out/machine.txt"
timeout 200 ./tests/check_ops_cuda > "$out/check_ops_cuda.log" 2>&1
echo "check_ops_cuda rc=$?"
grep -E "^[0-9]+%|:[EF]:" "$out/check_ops_cuda.log" | head -20
for p in ${OPS_CUDA_PRECISIONS:-bf16 f32}; do
  timeout 90 ./bench/ops_cuda_bench -p "$p" > "$out/bench_$p.txt" 2>&1
  echo "bench $p rc=$?"
  grep -E "^step|^total|^last loss|ops_cuda_bench:" "$out/bench_$p.txt"
done
if [ -n "${OPS_CUDA_MEMCHECK:-1}" ] && command -v compute-sanitizer >/dev/null; then
  CK_FORK=no CK_EXCLUDE_CASE=conv timeout "${OPS_CUDA_MEMCHECK_S:-100}" compute-sanitizer \
    --tool memcheck ./tests/check_ops_cuda > "$out/memcheck.log" 2>&1
  echo "memcheck rc=$?"
  tail -4 "$out/memcheck.log"
fi
