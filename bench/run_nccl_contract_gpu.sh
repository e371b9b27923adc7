#!/bin/bash
# run_nccl_contract_gpu.sh OUTDIR — NCCL's contract on the GPU machine, with ranks sharing one
# GPU: unmodified PyTorch on libshmddp-nccl.so (bench/nccl/contract.py:
# all_to_all_single equal and uneven, all_to_all of lists, gather, scatter, float8
# all_gather_into_tensor / reduce_scatter_tensor, coalesced PREMUL_SUM with host and device
# factors; 2 and 3 ranks), CuPy's nccl module (bench/nccl/cupy_allreduce.py: grouped send/recv to
# every rank with oneself included, refusals), the library's exports (tests/nccl_exports.sh),
# and, in the time left, the conformance harness with device buffers (tests/check_nccl_conf's
# GPU cases: ranks as threads and as processes).
#
# Assumes a configured CUDA build in the tree root (`make` and `make tests/check_nccl_conf`
# done); builds nothing. Each part is time-bounded and the next one runs whatever happened.
# Writes OUTDIR/<part>.log and OUTDIR/nccl_contract_1xh200.txt (the summary, also printed).
# At most BUDGET (230) seconds; about 3 minutes. The 400 s busy-rank test is
# bench/run_nccl_busy_gpu.sh (7 minutes).
set -u
[ $# -eq 1 ] || { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
OUT=$1
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
LIB=$(pwd)/.libs/libshmddp-nccl.so
PY=${PYTHON:-python3}
SUM="$OUT/nccl_contract_1xh200.txt"
{
  echo "# NCCL contract on one GPU, ranks sharing it"
  echo "# date: $(date -u +%FT%TZ)  commit: $(git rev-parse --short HEAD 2>/dev/null)"
  echo "# machine: $(nvidia-smi -L 2>/dev/null | head -2 | tr '\n' ' ')"
  echo "# command: bench/run_nccl_contract_gpu.sh OUTDIR"
} > "$SUM"

# part NAME SECONDS CMD...: run, log, one summary line (PASS/FAIL, rc, time, its RESULT line).
# The whole script stays within BUDGET seconds: a part gets what is left, at most its own limit.
BUDGET=${BUDGET:-230}
T_END=$(( $(date +%s) + BUDGET ))
part() {
  local name=$1 limit=$2
  shift 2
  local t0 rc secs res left=$(( T_END - $(date +%s) ))
  if [ "$left" -lt 10 ]; then
    printf '%-28s SKIP: out of the %ss budget\n' "$name" "$BUDGET" | tee -a "$SUM"
    return 0
  fi
  [ "$left" -lt "$limit" ] && limit=$left
  t0=$(date +%s.%N)
  timeout -k 20 "$limit" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  res=$(grep -a -E '^RESULT |^PASS|^[0-9]+%: Checks' "$OUT/$name.log" | tail -1 | cut -c1-300)
  printf '%-28s %s rc=%s %6ss  %s\n' "$name" "$([ $rc = 0 ] && echo PASS || echo FAIL)" "$rc" "$secs" "$res" | tee -a "$SUM"
  [ $rc = 124 ] && echo "    timed out after $limit s" | tee -a "$SUM"
  return 0
}

if [ ! -f "$LIB" ]; then
  echo "no $LIB: configure with CUDA and run make first" | tee -a "$SUM"
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
  echo "conformance_gpu              FAIL: tests/check_nccl_conf not built (make tests/check_nccl_conf)" | tee -a "$SUM"
fi
echo "# logs: $OUT" >> "$SUM"
