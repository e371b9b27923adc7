#!/usr/bin/env bash
# bench/step_ops_gpu.sh OUTDIR [BUILD_DIR] — where a U-Net training step's time goes on one GPU,
# op by op (GPU machine, 1 GPU): builds the CUDA ops in BUILD_DIR (default build-ops-cuda), runs
# their tests, the step benchmark dev/ops_cuda_bench (bf16, f32; variants of the convolution
# choices), the model itself on the GPU, and compute-sanitizer memcheck on our own kernels'
# tests. From the source root; needs Check. Writes 7 files under OUTDIR (check_ops_cuda.log,
# bench_bf16.txt, bench_f32.txt, bench_variants.txt, bench_model.txt, memcheck.log, build.log;
# bench/results/ops_cuda_1xh200.txt).
set -u
out=${1:?usage: $0 OUTDIR [build-dir]}
bdir=${2:-build-ops-cuda}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out" && out=$(cd "$out" && pwd)
cd "$root" && ./autogen.sh > "$out/build.log" 2>&1
mkdir -p "$bdir" && cd "$bdir" || exit 1
{ ../configure -q &&
  make -j16 kernels/shmddp-ops-cuda.la libmodel.a tests/check_ops_cuda tests/check_model_cuda dev/ops_cuda_bench; } \
  >> "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
date -u
nvidia-smi -L
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv
{
  timeout "${OPS_CUDA_TEST_S:-150}" ./tests/check_ops_cuda
  echo "check_ops_cuda rc=$?"
  timeout "${OPS_CUDA_TEST_S:-150}" ./tests/check_model_cuda
  echo "check_model_cuda rc=$?"
} > "$out/check_ops_cuda.log" 2>&1
grep -E "rc=|^[0-9]+%|:[EF]:" "$out/check_ops_cuda.log" | head -20
grep -E "^[0-9]+%|:[EF]:" "$out/check_ops_cuda.log" | head -20
b=./dev/ops_cuda_bench
summary() { grep -E "^step|^total|^last loss|^model|ops_cuda_bench:|per-op profile" "$1"; }
SHMDDP_CONV_VERBOSE=1 timeout 60 $b -p bf16 -t 40 > "$out/bench_bf16.txt" 2>&1
echo "bench bf16 rc=$?"; summary "$out/bench_bf16.txt"
timeout 60 $b -p f32 -t 30 > "$out/bench_f32.txt" 2>&1
echo "bench f32 rc=$?"; summary "$out/bench_f32.txt"
{
  echo "== bf16, cuDNN heuristics instead of the search"
  SHMDDP_CONV_SEARCH=heuristic timeout 60 $b -p bf16 -t 0
  echo "== bf16, no channel padding, cuDNN for 1x1"
  SHMDDP_CONV_PAD=0 SHMDDP_CONV1X1=cudnn timeout 60 $b -p bf16 -t 0
  echo "== f16"
  timeout 60 $b -p f16 -t 0
} > "$out/bench_variants.txt" 2>&1
grep -E "^==|^step" "$out/bench_variants.txt"
{
  echo "== model bf16"; timeout 60 $b -m -p bf16
  echo "== model f32"; timeout 60 $b -m -p f32
} > "$out/bench_model.txt" 2>&1
echo "model bench rc=$?"; grep -E "^==|^model|ops_cuda_bench:" "$out/bench_model.txt"
if command -v compute-sanitizer > /dev/null; then
  for c in elementwise normalisation loss optimizer; do # own kernels; cuDNN's are slow under it
    echo "== $c"
    CK_FORK=no CK_RUN_CASE=$c timeout "${OPS_CUDA_MEMCHECK_S:-40}" compute-sanitizer \
      --tool memcheck ./tests/check_ops_cuda
    echo "rc=$?"
  done > "$out/memcheck.log" 2>&1
  grep -E "^==|^rc=|^[0-9]+%|ERROR SUMMARY|:[EF]:" "$out/memcheck.log" | head -20
fi
