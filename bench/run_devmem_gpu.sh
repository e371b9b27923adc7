#!/usr/bin/env bash
# bench/run_devmem_gpu.sh OUTDIR — any device pointer at any size, on the GPU machine. Builds
# nothing: run from the root of a tree configured and built with CUDA (make, make check's
# programs: `make -j tests/check_devmem tests/check_devmem_cuda`), ranks sharing the visible GPUs.
#   1 check_devmem       the sharing protocol on the fake driver (CPU)
#   2 check_devmem_cuda  2 and 3 ranks: cudaMalloc, cuMem chunks, ncclMemAlloc, cudaMallocAsync
#                        (staged), mixed kinds; 1000x free/realloc (mappings bounded, no stale
#                        read); ncclMemAlloc + register/deregister 50x
#   3 torch_expandable   PyTorch collectives on expandable_segments:True memory, with frees
#   4 torch_async        the same on backend:cudaMallocAsync memory (all-reduce > 4 MiB staged)
#   5 ddp_expandable     DDP, 2 ranks, 200 steps, expandable_segments:True, params equal at the end
#   6 cupy               CuPy's nccl module with its memory pool
# Each part has its own time limit and the next runs whatever happened; OUTDIR/<part>.log per
# part, OUTDIR/summary.txt (PASS/FAIL per part). Expected total: under 4 minutes.
# FULL=1 adds check_join_cuda and check_cuda_collectives (the transport's other suites).
set -u
out=${1:?usage: run_devmem_gpu.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
lib=$(readlink -f .libs/libshmddp-nccl.so 2>/dev/null)
py=${PYTHON:-python3}
torchrun="$py -m torch.distributed.run --standalone --nproc-per-node 2"
export NCCL_NVLS_ENABLE=0 TORCH_NCCL_ASYNC_ERROR_HANDLING=1
: > "$out/summary.txt"
{
  echo "# run_devmem_gpu.sh  date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  nvidia-smi -L 2>/dev/null | sed 's/^/# gpu: /'
} | tee "$out/header.txt"

# part NAME LIMIT_S CMD...: PASS when CMD exits 0 (77 from a Check suite is SKIP).
part() {
  local name=$1 limit=$2
  shift 2
  local t0 rc
  t0=$(date +%s)
  echo "+ $*" > "$out/$name.log"
  timeout -k 10 "$limit" "$@" >> "$out/$name.log" 2>&1
  rc=$?
  local verdict=FAIL
  [ $rc = 0 ] && verdict=PASS
  [ $rc = 77 ] && verdict=SKIP
  [ $rc = 124 ] && verdict="FAIL (timed out after $limit s)"
  local res
  res=$(grep -a -E '^RESULT |^[0-9]+%: Checks' "$out/$name.log" | tail -1 | cut -c1-160)
  printf '%-18s %-5s rc %3s %4s s  %s\n' "$name" "$verdict" "$rc" "$(($(date +%s) - t0))" "$res" |
    tee -a "$out/summary.txt"
}

part check_devmem 60 env CK_VERBOSITY=normal ./tests/check_devmem
part check_devmem_cuda 150 env CK_VERBOSITY=verbose ./tests/check_devmem_cuda
grep -a -E "churn:|rank [0-9]: (kinds|churn)" "$out/check_devmem_cuda.log" | head -8 | sed 's/^/    /' |
  tee -a "$out/summary.txt"
if [ -z "$lib" ]; then
  echo "no .libs/libshmddp-nccl.so: the PyTorch and CuPy parts cannot run" | tee -a "$out/summary.txt"
else
  part torch_expandable 90 env LD_PRELOAD="$lib" PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
    $torchrun bench/nccl/devmem_torch.py --rounds 20 --out "$out/torch_expandable.json"
  part torch_async 90 env LD_PRELOAD="$lib" PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync \
    $torchrun bench/nccl/devmem_torch.py --rounds 10 --out "$out/torch_async.json"
  part ddp_expandable 150 env LD_PRELOAD="$lib" PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
    $torchrun bench/nccl/ddp_train.py --steps 200 --warmup 10 --widths 32,64,128,256,512 \
    --size 128 --batch 4 --out "$out/ddp_expandable.json"
  part cupy 60 env LD_PRELOAD="$lib" $py bench/nccl/cupy_allreduce.py --out "$out/cupy.json"
fi
if [ "${FULL:-0}" = 1 ]; then
  part check_join_cuda 300 ./tests/check_join_cuda
  part check_cuda_collectives 300 ./tests/check_cuda_collectives
fi
echo "summary: $out/summary.txt"
grep -q FAIL "$out/summary.txt" && exit 1
exit 0
