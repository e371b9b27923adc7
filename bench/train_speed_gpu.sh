#!/bin/sh
# bench/train_speed_gpu.sh BUILD_DIR OUT_DIR [PRECISIONS] — training speed in the reference
# configuration (bench/README.md): shmddp on 1 GPU, DDP on every GPU of the machine with and
# without SyncBN, and the PyTorch anchor (bench/torch_unet.py) in the same run. GPU machine,
# 1 GPU (the single rows) or 2+ (DDP too). PRECISIONS default "bf16 fp32".
# Environment: VARIANTS=1 adds rows for our switches (--cuda-graph off, --deterministic off, and
# for DDP SHMDDP_CUDA_TS_BLOCKS=32|128 and the copy-engine all-reduce; VARIANTS=comm only the DDP
# communication ones); TORCH=0 leaves PyTorch out; STEPS (timed steps, default 60); WORKERS
# (loader threads, 8).
# Writes OUT_DIR/train.tsv (one row per run) and OUT_DIR/train.log (everything printed).
set -u
. "$(dirname "$0")/lib.sh"
build_and_out "$@"
PRECS=${3:-"bf16 fp32"}
log="$O/train.log"; tsv="$O/train.tsv"
ngpu=$(nvidia-smi -L | wc -l)
{
  record_header "bench/train_speed_gpu.sh BUILD_DIR OUT_DIR \"$PRECS\"$([ "${VARIANTS:-0}" = 0 ] || echo "  (VARIANTS=$VARIANTS)")"
  echo "# reference: U-Net 64..1024, batch 6 per GPU, 3x256x256, 4 classes, SGD momentum 0.9;"
  echo "# images/s over ${STEPS:-60} steps after 8 warm-up steps; peak MiB per GPU"
  printf 'impl\tmode\tgpus\tsyncbn\tprecision\tvariant\timages_per_s\tpeak_mib\tgraph\tcommand\n'
} > "$tsv"
common="--device cuda $REF_FLAGS --batch-size 6 --steps $((${STEPS:-60} + 8)) --workers ${WORKERS:-8}"
ours() { # mode gpus syncbn prec [variant [env VAR=value ...] [flags ...]]
  mode=$1; gpus=$2; sb=$3; prec=$4; label=${5:-default}
  shift 4; [ $# -gt 0 ] && shift
  pre=; post=
  for a in "$@"; do case $a in env|*=*) pre="$pre$a " ;; *) post="$post $a" ;; esac; done
  cmd="$pre$B/train $common --nproc $gpus --sync-bn $sb --precision $prec$post"
  train_run "$O/last.log" "$log" "$cmd --out $O/run_${mode}_${gpus}_${sb}_${prec}_${label}"
  graph=$(grep -o 'CUDA graph of the step: [0-9]* nodes, replayed for [0-9]* of [0-9]*' "$O/last.log" |
          sed 's/CUDA graph of the step: \([0-9]*\) nodes, replayed for \([0-9]*\) of \([0-9]*\)/\1 nodes, \2\/\3 steps/')
  printf 'shmddp\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$mode" "$gpus" "$sb" "$prec" "$label" "${IPS:--}" "${PEAK:--}" "${graph:-off}" "$cmd" >> "$tsv"
}
torch() { # gpus syncbn prec
  cmd="python3 bench/torch_unet.py --gpus $1 --syncbn $2 --precision $3 --channels-last 1 --steps ${STEPS:-60}"
  echo "+ $cmd" >> "$log"
  line=$(timeout -s KILL 150 $cmd 2>>"$log" | tail -1)
  echo "$line" >> "$log"
  ips=$(echo "$line" | grep -o 'img_s=[0-9.]*' | cut -d= -f2)
  peak=$(echo "$line" | grep -o 'peak_mib=[0-9,]*' | cut -d= -f2)
  mode=single; [ "$1" -gt 1 ] && mode=ddp
  printf 'torch\t%s\t%s\t%s\t%s\tchannels-last\t%s\t%s\t-\t%s\n' "$mode" "$1" "$( [ "$2" = 1 ] && echo on || echo off)" "$3" "${ips:--}" "${peak:--}" "$cmd" >> "$tsv"
}
for p in $PRECS; do
  ours single 1 off "$p"
  if [ "${VARIANTS:-0}" = 1 ]; then
    ours single 1 off "$p" graph-off --cuda-graph off
    ours single 1 off "$p" timed-algos --deterministic off
  fi
  if [ "$ngpu" -ge 2 ]; then
    ours ddp "$ngpu" off "$p"
    [ "${VARIANTS:-0}" = 1 ] && ours ddp "$ngpu" off "$p" graph-off --cuda-graph off
    if [ "${VARIANTS:-0}" = 1 ] || [ "${VARIANTS:-0}" = comm ]; then
      ours ddp "$ngpu" off "$p" ts-blocks-32 env SHMDDP_CUDA_TS_BLOCKS=32
      ours ddp "$ngpu" off "$p" ts-blocks-128 env SHMDDP_CUDA_TS_BLOCKS=128
      ours ddp "$ngpu" off "$p" copy-engines env SHMDDP_CUDA_CE_MIN=1M
    fi
    ours ddp "$ngpu" on "$p"
    [ "$p" = bf16 ] && ours ddp "$ngpu" off "$p" grad-comm-bf16 --grad-comm bf16
  fi
  if [ "${TORCH:-1}" = 1 ]; then
    torch 1 0 "$p"
    if [ "$ngpu" -ge 2 ]; then
      torch "$ngpu" 0 "$p"
      torch "$ngpu" 1 "$p"
    fi
  fi
done
cat "$tsv"
