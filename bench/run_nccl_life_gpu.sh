#!/bin/bash
# run_nccl_life_gpu.sh OUTDIR — the NCCL front end's communicator life on the GPU machine, ranks
# sharing one GPU: tests/check_nccl_life (its GPU case: windows on ncclMemAlloc and cudaMalloc
# memory, 16 MiB reduced in place through them, 2 and 3 ranks as processes; then its host
# cases: shrink, shrink after SIGKILL, grow, suspend/resume, memory statistics, simulated
# groups), and unmodified PyTorch shrinking its default group 3 -> 2 through ncclCommShrink
# (bench/nccl/shrink_torch.py; SKIP when this torch has no torch.distributed.shrink_group).
#
# Assumes a configured CUDA build in the tree root (`make` and `make tests/check_nccl_life`
# done); builds nothing. Each part is time-bounded and the next one runs whatever happened.
# Writes OUTDIR/<part>.log and OUTDIR/nccl_life_1xh200.txt (the summary, also printed).
# About 1 minute; at most BUDGET (200) seconds.
set -u
[ $# -eq 1 ] || { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
OUT=$1
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
LIB=$(pwd)/.libs/libshmddp-nccl.so
PY=${PYTHON:-python3}
SUM="$OUT/nccl_life_1xh200.txt"
{
  echo "# NCCL communicator life on one GPU, ranks sharing it"
  echo "# date: $(date -u +%FT%TZ)  commit: $(git rev-parse --short HEAD 2>/dev/null)"
  echo "# machine: $(nvidia-smi -L 2>/dev/null | head -2 | tr '\n' ' ')"
  echo "# command: bench/run_nccl_life_gpu.sh OUTDIR"
} > "$SUM"
BUDGET=${BUDGET:-200}
T_END=$(( $(date +%s) + BUDGET ))
# part NAME SECONDS CMD...: run, log, one summary line (PASS/FAIL, rc, time, its last result).
part() {
  local name=$1 limit=$2
  shift 2
  local t0 rc secs res left=$(( T_END - $(date +%s) ))
  if [ "$left" -lt 10 ]; then
    printf '%-24s SKIP: out of the %ss budget\n' "$name" "$BUDGET" | tee -a "$SUM"
    return 0
  fi
  [ "$left" -lt "$limit" ] && limit=$left
  t0=$(date +%s.%N)
  timeout -k 20 "$limit" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  res=$(grep -a -E '^RESULT |^SKIP|^PASS|^FAIL|^[0-9]+%: Checks|not registered' "$OUT/$name.log" | tail -1 | cut -c1-300)
  printf '%-24s %s rc=%s %6ss  %s\n' "$name" "$([ $rc = 0 ] && echo PASS || echo FAIL)" "$rc" "$secs" "$res" | tee -a "$SUM"
  [ $rc = 124 ] && echo "    timed out after $limit s" | tee -a "$SUM"
  grep -a -E ':F:|:E:' "$OUT/$name.log" | head -8 | cut -c1-300 | sed 's/^/    /' | tee -a "$SUM"
  return 0
}
if [ ! -x tests/check_nccl_life ] || [ ! -f "$LIB" ]; then
  echo "tests/check_nccl_life or $LIB missing: configure with CUDA, make, make tests/check_nccl_life" | tee -a "$SUM"
  exit 1
fi
part device_windows 90 env CK_RUN_CASE=gpu CK_VERBOSITY=normal tests/check_nccl_life
grep -a -q 'not registered' "$OUT/device_windows.log" && echo "    the GPU case was not registered: no GPU visible?" | tee -a "$SUM"
part host_cases 90 env CK_VERBOSITY=normal tests/check_nccl_life
export NCCL_NVLS_ENABLE=0 TORCH_NCCL_ASYNC_ERROR_HANDLING=1
part torch_shrink_3to2 60 env LD_PRELOAD="$LIB" NCCL_DEBUG=WARN \
  "$PY" -m torch.distributed.run --standalone --nproc-per-node 3 bench/nccl/shrink_torch.py \
  --out "$OUT/torch_shrink.json"
echo "# logs: $OUT" >> "$SUM"
