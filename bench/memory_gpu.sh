#!/bin/sh
# bench/memory_gpu.sh BUILD_DIR OUT_DIR [PRECISIONS] — memory of the training step on one GPU,
# ours beside PyTorch in the same run (GPU machine, 1 GPU): the trainer's
# ledger by category (the way PyTorch's max_memory_allocated counts: every tensor the step
# holds, at its peak) and the device's used memory (NVML; CUDA context, cuDNN and cuBLAS
# included), for the shared memory plan and for SHMDDP_MEM_PLAN=separate (every activation in
# its own memory), in bf16 and fp32. PyTorch: max_memory_allocated, max_memory_reserved and
# the device's used memory (bench/torch_unet.py).
# PRECISIONS default "bf16 fp32". The reference configuration (bench/README.md).
# Writes OUT_DIR/memory.tsv and OUT_DIR/memory.log (bench/results/memory_1xh200.txt).
# Environment: STEPS (timed steps, default 30); PLANS (default "shared separate"); TORCH=0 leaves
# PyTorch out (e.g. for a second build in the same run).
set -u
. "$(dirname "$0")/lib.sh"
build_and_out "$@"
PRECS=${3:-"bf16 fp32"}
log="$O/memory.log"; tsv="$O/memory.tsv"
{
  record_header "bench/memory_gpu.sh BUILD_DIR OUT_DIR \"$PRECS\""
  echo "# reference U-Net 64..1024, batch 6, 3x256x256, 4 classes, SGD momentum 0.9, 1 GPU, ${STEPS:-30} timed steps"
  printf 'impl\tprecision\tvariant\timages_per_s\tpeak_mib\tparameters\tgradients\toptimizer\tactivations\tworkspace\tdevice_used_mib\treserved_mib\n'
} > "$tsv"
common="--device cuda --nproc 1 $REF_FLAGS --batch-size 6 --steps $((${STEPS:-30} + 8)) --workers 8"
row() { # label in the ledger
  grep -E "^  $1 " "$O/last.log" | tail -1 | awk '{print $(NF)}'
}
for p in $PRECS; do
  for plan in ${PLANS:-shared separate}; do
    train_run "$O/last.log" "$log" "SHMDDP_MEM_PLAN=$plan $B/train $common --precision $p --out $O/run_${p}_$plan"
    nvml=$(grep -E "device memory used \(NVML\)" "$O/last.log" | tail -1 | awk '{print $NF}')
    printf 'shmddp\t%s\tplan=%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t-\n' "$p" "$plan" "${IPS:--}" \
      "${PEAK:--}" "$(row parameters)" "$(row gradients)" "$(row optimizer)" "$(row activations)" \
      "$(row workspace)" "${nvml:--}" >> "$tsv"
  done
  [ "${TORCH:-1}" = 1 ] || continue
  cmd="python3 bench/torch_unet.py --gpus 1 --precision $p --channels-last 1 --steps ${STEPS:-30}"
  echo "+ $cmd" >> "$log"
  line=$(timeout -s KILL 150 $cmd 2>>"$log" | tail -1)
  echo "$line" >> "$log"
  get() { echo "$line" | grep -o "$1=[0-9.,]*" | cut -d= -f2; }
  printf 'torch\t%s\tchannels-last\t%s\t%s\t-\t-\t-\t-\t-\t%s\t%s\n' "$p" "$(get img_s)" \
    "$(get peak_mib)" "$(get device_used_mib)" "$(get reserved_mib)" >> "$tsv"
done
cat "$tsv"
