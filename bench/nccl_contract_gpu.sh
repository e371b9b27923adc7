#!/bin/bash
# bench/nccl_contract_gpu.sh OUTDIR — NCCL's contract on the GPU machine (1 GPU is enough: the
# ranks share it): unmodified PyTorch on libshmddp-nccl.so (bench/nccl/contract.py:
# all_to_all_single equal and uneven, all_to_all of lists, gather, scatter, float8
# all_gather_into_tensor / reduce_scatter_tensor, coalesced PREMUL_SUM with host and device
# factors; 2 and 3 ranks), CuPy's nccl module (bench/nccl/cupy_allreduce.py: grouped send/recv to
# every rank with oneself included, refusals), the library's exports (tests/nccl_exports.sh),
# and, in the time left, the conformance harness with device buffers (tests/check_nccl_conf's
# GPU cases: ranks as threads and as processes).
#
# Run from the root of a tree configured and built with CUDA (`make -j && make
# tests/check_nccl_conf`); builds nothing. Each part is time-bounded and the next one runs
# whatever happened. Writes OUTDIR/summary.txt (bench/results/nccl_contract_1xh200.txt) and
# OUTDIR/<part>.log. At most BUDGET_S (230) seconds; about 3 minutes. The busy-rank test is
# bench/nccl_busy_peer_gpu.sh.
set -u
BUDGET_S=${BUDGET_S:-230}
. "$(dirname "$0")/lib.sh"
bench_start "$@"
PART_RESULT='^RESULT |^PASS|^[0-9]+%: Checks'
bench_header "NCCL contract on one GPU, ranks sharing it" OUTDIR

if [ ! -f "$LIB" ]; then
  note "no $LIB: configure with CUDA and run make first"
  exit 1
fi
part exports 30 env top_builddir=. srcdir=. sh tests/nccl_exports.sh
export NCCL_NVLS_ENABLE=0 TORCH_NCCL_ASYNC_ERROR_HANDLING=1
for n in 2 3; do
  part "torch_contract_${n}ranks" 70 env LD_PRELOAD="$LIB" NCCL_DEBUG=WARN \
    "$PY" -m torch.distributed.run --standalone --nproc-per-node "$n" bench/nccl/contract.py \
    --out "$OUT/torch_contract_${n}ranks.json"
  grep -a '^FAIL' "$OUT/torch_contract_${n}ranks.log" | head -8 | sed 's/^/    /' | tee -a "$SUM"
done
for n in 2 3; do
  part "cupy_${n}ranks" 40 env LD_PRELOAD="$LIB" "$PY" bench/nccl/cupy_allreduce.py --world "$n" --timeout 35 \
    --out "$OUT/cupy_${n}ranks.json"
  grep -a '^FAIL' "$OUT/cupy_${n}ranks.log" | head -8 | sed 's/^/    /' | tee -a "$SUM"
done
if [ -x tests/check_nccl_conf ]; then
  part conformance_gpu 150 env CK_RUN_CASE=gpu CK_VERBOSITY=normal tests/check_nccl_conf
  grep -a -E 'ranks: [0-9]+ calls|:F:|:E:' "$OUT/conformance_gpu.log" | head -12 | sed 's/^/    /' | tee -a "$SUM"
else
  note "conformance_gpu          FAIL: tests/check_nccl_conf not built (make tests/check_nccl_conf)"
  FAILED=1
fi
exit "$FAILED"
