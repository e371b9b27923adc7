#!/bin/bash
# bench/nccl_life_gpu.sh OUTDIR — the NCCL front end's communicator life on the GPU machine (1 GPU
# is enough: the ranks share it): tests/check_nccl_life (its GPU case: windows on ncclMemAlloc
# and cudaMalloc memory, 16 MiB reduced in place through them, 2 and 3 ranks as processes; then
# its host cases: shrink, shrink after SIGKILL, grow, suspend/resume, memory statistics,
# simulated groups), and unmodified PyTorch shrinking its default group 3 -> 2 through
# ncclCommShrink (bench/nccl/shrink_torch.py; SKIP when this torch has no
# torch.distributed.shrink_group).
#
# Run from the root of a tree configured and built with CUDA (`make -j && make
# tests/check_nccl_life`); builds nothing. Each part is time-bounded and the next one runs
# whatever happened. Writes OUTDIR/summary.txt (bench/results/nccl_life_1xh200.txt) and
# OUTDIR/<part>.log. About 1 minute; at most BUDGET_S (200) seconds.
set -u
BUDGET_S=${BUDGET_S:-200}
. "$(dirname "$0")/lib.sh"
bench_start "$@"
PART_RESULT='^RESULT |^SKIP|^PASS|^FAIL|^[0-9]+%: Checks|not registered'
bench_header "NCCL communicator life on one GPU, ranks sharing it" OUTDIR
if [ ! -x tests/check_nccl_life ] || [ ! -f "$LIB" ]; then
  note "tests/check_nccl_life or $LIB missing: configure with CUDA, make, make tests/check_nccl_life"
  exit 1
fi
part device_windows 90 env CK_RUN_CASE=gpu CK_VERBOSITY=normal tests/check_nccl_life
failures device_windows
grep -a -q 'not registered' "$OUT/device_windows.log" && note "    the GPU case was not registered: no GPU visible?"
part host_cases 90 env CK_VERBOSITY=normal tests/check_nccl_life
failures host_cases
export NCCL_NVLS_ENABLE=0 TORCH_NCCL_ASYNC_ERROR_HANDLING=1
part torch_shrink_3to2 60 env LD_PRELOAD="$LIB" NCCL_DEBUG=WARN \
  "$PY" -m torch.distributed.run --standalone --nproc-per-node 3 bench/nccl/shrink_torch.py \
  --out "$OUT/torch_shrink.json"
exit "$FAILED"
