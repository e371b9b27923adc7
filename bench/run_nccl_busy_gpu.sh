#!/bin/bash
# run_nccl_busy_gpu.sh OUTDIR [BUSY_S] — a collective waits for a busy (not dead) rank, as NCCL
# does: under unmodified PyTorch with libshmddp-nccl.so preloaded, two ranks sharing one GPU,
# rank 0 enters an all-reduce while rank 1 is busy on the host for BUSY_S seconds (default 400,
# beyond the 300 s the library once imposed); the call must wait and complete with the right
# sum (bench/nccl/busy_peer.py). Assumes a CUDA build in the tree root; builds nothing.
# Writes OUTDIR/busy_peer.log and OUTDIR/nccl_busy_1xh200.txt. About BUSY_S + 60 seconds.
set -u
[ $# -ge 1 ] || { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
OUT=$1
BUSY=${2:-400}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
LIB=$(pwd)/.libs/libshmddp-nccl.so
[ -f "$LIB" ] || { echo "no $LIB: configure with CUDA and run make first"; exit 1; }
SUM="$OUT/nccl_busy_1xh200.txt"
export NCCL_NVLS_ENABLE=0 TORCH_NCCL_ASYNC_ERROR_HANDLING=1
unset SHMDDP_TIMEOUT
t0=$(date +%s)
timeout -k 20 $((BUSY + 150)) env LD_PRELOAD="$LIB" NCCL_DEBUG=WARN "${PYTHON:-python3}" \
  -m torch.distributed.run --standalone --nproc-per-node 2 bench/nccl/busy_peer.py \
  --busy "$BUSY" --out "$OUT/busy_peer.json" > "$OUT/busy_peer.log" 2>&1
rc=$?
{
  echo "# a collective waiting ${BUSY} s for a busy rank; $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null)"
  echo "# machine: $(nvidia-smi -L 2>/dev/null | head -1)"
  echo "busy_peer $([ $rc = 0 ] && echo PASS || echo FAIL) rc=$rc $(( $(date +%s) - t0 ))s $(grep -a '^RESULT ' "$OUT/busy_peer.log" | tail -1)"
} | tee "$SUM"
