#!/bin/bash
# bench/nccl_busy_peer_gpu.sh OUTDIR [BUSY_S] — a collective waits for a busy (not dead) rank, as
# NCCL does: under unmodified PyTorch with libshmddp-nccl.so preloaded, two ranks sharing one
# GPU, rank 0 enters an all-reduce while rank 1 is busy on the host for BUSY_S seconds (default
# 400); the call must wait and complete with the right sum (bench/nccl/busy_peer.py). GPU
# machine, 1 GPU. Run from the root of a tree built with CUDA; builds nothing.
# Writes OUTDIR/summary.txt (bench/results/nccl_contract_1xh200.txt) and OUTDIR/busy_peer.log. About
# BUSY_S + 60 seconds.
set -u
. "$(dirname "$0")/lib.sh"
[ $# -ge 1 ] || bench_usage
bench_out "$1"
in_tree_root
BUSY=${2:-400}
[ -f "$LIB" ] || { echo "no $LIB: configure with CUDA and run make first"; exit 1; }
export NCCL_NVLS_ENABLE=0 TORCH_NCCL_ASYNC_ERROR_HANDLING=1
unset SHMDDP_TIMEOUT
bench_header "a collective waiting $BUSY s for a busy rank" OUTDIR "$BUSY"
part busy_peer $((BUSY + 150)) env LD_PRELOAD="$LIB" NCCL_DEBUG=WARN "$PY" \
  -m torch.distributed.run --standalone --nproc-per-node 2 bench/nccl/busy_peer.py \
  --busy "$BUSY" --out "$OUT/busy_peer.json"
exit "$FAILED"
