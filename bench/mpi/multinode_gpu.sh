#!/bin/sh
# bench/mpi/multinode_gpu.sh OUTDIR [BUILD_DIR] — the trainer across nodes over MPI, measured on one GPU machine
# (built with --with-mpi; BUILD_DIR defaults to ./b, else the current directory):
#  (a) 2 "nodes" x 1 GPU over MPI (--ranks-per-node 1: the gradients cross MPI) against 1 node
#      x 2 GPUs (--ranks-per-node 2: the same two MPI processes as one shmddp group), the same
#      reference U-Net job: final checkpoints compared tensor by tensor, images/s of both (and
#      of the one-node run without CUDA graphs, which the MPI path cannot use, to separate the
#      two effects); tests/mpi_ddp --gpu: the engine against one GPU on the whole batch;
#  (b) the inter-node all-reduce's bandwidth: dev/mpi_allreduce_bench between the 2 ranks
#      (device buffers through the world, and host buffers with MPI_Allreduce beside them).
# On one machine the two "nodes" talk through MPI's shared-memory transport, not a NIC: (b) is
# what the MPI path itself costs (copies, staging, the ring), an upper bound for a network.
# With ONE GPU both ranks share GPU 0: the comparison holds (correctness), the speeds do not.
# Writes OUTDIR/summary.txt (everything below) and the runs' folders and logs.
set -u
O=${1:?usage: bench/mpi/multinode_gpu.sh OUTDIR [BUILD_DIR]}
B=${2:-}
[ -n "$B" ] || { [ -x b/shmddp-train ] && B=b || B=.; }
[ -x "$B/shmddp-train" ] || { echo "multinode_gpu.sh: no shmddp-train in $B (build first)"; exit 2; }
[ -x "$B/dev/mpi_allreduce_bench" ] || { echo "multinode_gpu.sh: $B was configured without MPI (configure --with-mpi)"; exit 2; }
# tests/mpi_ddp is a check program: built here if `make` alone built the tree
[ -x "$B/tests/mpi_ddp" ] || make -s -C "$B" tests/mpi_ddp > /dev/null 2>&1 ||
  echo "multinode_gpu.sh: could not build $B/tests/mpi_ddp; its part is left out"
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$O"
S="$O/summary.txt"
# Root on the GPU machine: Open MPI refuses that without these two.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Two processes: no core binding (the loader threads need more than one core each).
MPIRUN="mpirun -np 2 --oversubscribe --bind-to none"
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
say() { echo "$*" | tee -a "$S"; }
: > "$S"
say "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
say "# commit: ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
nvidia-smi -L 2>/dev/null | sed 's/^/# /' | tee -a "$S"
say "# $(mpirun --version 2>&1 | head -1); ompi_info CUDA: $(ompi_info --parsable --all 2>/dev/null | grep -m1 'mpi_built_with_cuda_support:value' | cut -d: -f4 || echo unknown)"
if [ "$ngpu" -lt 2 ]; then
  say "# ONE GPU: both ranks share GPU 0 - correctness only; images/s and bandwidths below are not those of two GPUs"
fi
STEPS=${STEPS:-60}
common="--device cuda --widths reference --batch-size 6 --image-size 256 --classes 4 \
--optimizer sgd --momentum 0.9 --lr 0.01 --warmup-steps 1 --steps $((STEPS + 8)) --timing-warmup 8 \
--train-size 1200 --val-size 12 --workers ${WORKERS:-8} --log-every 10 --timeout 120 \
--precision ${PRECISION:-bf16} --save-every $((STEPS + 8))"
run() { # name flags...
  name=$1; shift
  cmd="$MPIRUN $B/shmddp-train $common $* --out $O/$name"
  echo "+ $cmd" > "$O/$name.log"
  timeout -s KILL 300 sh -c "$cmd" >> "$O/$name.log" 2>&1
  rc=$?
  ips=$(grep -o 'images_per_s=[0-9.]*' "$O/$name.log" | tail -1 | cut -d= -f2)
  desc=$(grep -o 'train: 2 ranks: [^,]*' "$O/$name.log" | head -1 | sed 's/train: 2 ranks: //')
  comm=$(grep -E '^  exposed communication' "$O/$name.log" | awk '{print $3}')
  step=$(grep -o '[0-9.]* ms/step' "$O/$name.log" | head -1)
  say "$name: exit $rc, ${ips:-?} img/s, ${step:-?}, exposed communication ${comm:-?} ms/step; $desc"
  [ $rc -eq 0 ] || tail -20 "$O/$name.log" | tee -a "$S"
}
say "== (a) 2 nodes x 1 GPU over MPI against 1 node x 2 GPUs ($STEPS timed steps, batch 6 per GPU, ${PRECISION:-bf16})"
run two_nodes --ranks-per-node 1
run one_node --ranks-per-node 2
run one_node_nograph --ranks-per-node 2 --cuda-graph off
for r in two_nodes one_node; do grep '^result:' "$O/$r.log" | sed "s/^/$r /" | tee -a "$S"; done
if [ -f "$O/two_nodes/checkpoint.ckpt" ] && [ -f "$O/one_node/checkpoint.ckpt" ]; then
  say "weights after $((STEPS + 8)) steps, two_nodes vs one_node: $(python3 "$here/ckpt_diff.py" "$O/two_nodes/checkpoint.ckpt" "$O/one_node/checkpoint.ckpt" 2>&1)"
  say "weights, one_node vs one_node_nograph: $(python3 "$here/ckpt_diff.py" "$O/one_node/checkpoint.ckpt" "$O/one_node_nograph/checkpoint.ckpt" 2>&1)"
else
  say "weights: a checkpoint is missing (a run failed)"
fi
say "-- tests/mpi_ddp --gpu: the engine over 2 nodes x 1 GPU against one GPU on the whole batch"
[ -x "$B/tests/mpi_ddp" ] && timeout -s KILL 300 $MPIRUN "$B/tests/mpi_ddp" --gpu --ranks-per-node 1 2>&1 | tee -a "$S"
say "== (b) the inter-node all-reduce between the 2 ranks (f32 sum; busbw = algbw for 2 ranks)"
say "-- device buffers through the world (the path the gradient buckets take)"
timeout -s KILL 300 $MPIRUN "$B/dev/mpi_allreduce_bench" --device cuda --ranks-per-node 1 \
  -b 64K -e 256M -f 4 -n 20 -w 5 2>&1 | tee -a "$S"
say "-- host buffers: the world's ring, and MPI_Allreduce (Open MPI's own) beside it"
timeout -s KILL 300 $MPIRUN "$B/dev/mpi_allreduce_bench" --device cpu --ranks-per-node 1 \
  -b 64K -e 256M -f 4 -n 20 -w 5 --mpi-native 2>&1 | tee -a "$S"
say "-- for scale: the same 2 GPUs as one shmddp group (device buffers, one node)"
timeout -s KILL 300 $MPIRUN "$B/dev/mpi_allreduce_bench" --device cuda --ranks-per-node 2 \
  -b 64K -e 256M -f 4 -n 20 -w 5 2>&1 | tee -a "$S"
echo "multinode_gpu.sh: done; summary in $S"
