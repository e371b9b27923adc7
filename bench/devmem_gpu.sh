#!/usr/bin/env bash
# bench/devmem_gpu.sh OUTDIR — any device pointer at any size through the NCCL front end: ranks
# sharing the visible GPUs, each kind of device memory. GPU machine, 1 GPU or more. Builds
# nothing: run from the root of a tree configured and built with CUDA (`make -j && make -j
# tests/check_devmem tests/check_devmem_cuda`).
#   check_devmem       the sharing protocol on the fake driver (CPU)
#   check_devmem_cuda  2 and 3 ranks: cudaMalloc, cuMem chunks, ncclMemAlloc, cudaMallocAsync
#                      (staged), mixed kinds; 1000x free/realloc (mappings bounded, no stale
#                      read); ncclMemAlloc + register/deregister 50x
#   torch_expandable   PyTorch collectives on expandable_segments:True memory, with frees
#   torch_async        the same on backend:cudaMallocAsync memory (all-reduce > 4 MiB staged)
#   ddp_expandable     DDP, 2 ranks, 200 steps, expandable_segments:True, params equal at the end
#   cupy               CuPy's nccl module with its memory pool
# Each part has its own time limit and the next runs whatever happened. Writes
# OUTDIR/summary.txt (PASS/FAIL per part; bench/results/devmem_1xh200.txt) and OUTDIR/<part>.log.
# Under 4 minutes. FULL=1 adds check_join_cuda and check_cuda_collectives.
set -u
. "$(dirname "$0")/lib.sh"
bench_out "${1:?usage: bench/devmem_gpu.sh OUTDIR}"
lib=$(readlink -f .libs/libshmddp-nccl.so 2> /dev/null)
py=${PYTHON:-python3}
torchrun="$py -m torch.distributed.run --standalone --nproc-per-node 2"
export NCCL_NVLS_ENABLE=0 TORCH_NCCL_ASYNC_ERROR_HANDLING=1
bench_header "any device memory through the NCCL front end" "$@"

part check_devmem 60 env CK_VERBOSITY=normal ./tests/check_devmem
part check_devmem_cuda 150 env CK_VERBOSITY=verbose ./tests/check_devmem_cuda
grep -a -E "churn:|rank [0-9]: (kinds|churn)" "$OUT/check_devmem_cuda.log" | head -8 | sed 's/^/    /' |
  tee -a "$SUM"
if [ -z "$lib" ]; then
  note "no .libs/libshmddp-nccl.so: the PyTorch and CuPy parts cannot run"
  FAILED=1
else
  part torch_expandable 90 env LD_PRELOAD="$lib" PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
    $torchrun bench/nccl/devmem_torch.py --rounds 20 --out "$OUT/torch_expandable.json"
  part torch_async 90 env LD_PRELOAD="$lib" PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync \
    $torchrun bench/nccl/devmem_torch.py --rounds 10 --out "$OUT/torch_async.json"
  part ddp_expandable 150 env LD_PRELOAD="$lib" PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
    $torchrun bench/nccl/ddp_train.py --steps 200 --warmup 10 --widths 32,64,128,256,512 \
    --size 128 --batch 4 --out "$OUT/ddp_expandable.json"
  part cupy 60 env LD_PRELOAD="$lib" $py bench/nccl/cupy_allreduce.py --out "$OUT/cupy.json"
fi
if [ "${FULL:-0}" = 1 ]; then
  part check_join_cuda 300 ./tests/check_join_cuda
  part check_cuda_collectives 300 ./tests/check_cuda_collectives
fi
echo "summary: $SUM"
exit "$FAILED"
