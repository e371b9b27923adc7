#!/bin/sh
# bench/speed_anchor_gpu.sh OUT_DIR [PATCH] — the training speed on one GPU against PyTorch
# compiled, in one run (GPU machine, 1 GPU): (a) the account of the step
# (dev/ops_cuda_bench -A: per layer and pass the FLOPs, bytes, time inside the replayed step,
# the roofline against a cuBLAS GEMM and a device-to-device copy measured in the same run, MFU),
# (b) the PyTorch anchor of the same model and settings, eager and torch.compile (max-autotune
# by default; compile time reported apart and capped), (c) our trainer's reference row, before
# and after the anchor, and (d) optionally one A/B patch (bench/step_ab_gpu.sh) when the time
# left allows. Builds nothing: it uses the CUDA build in BUILD (default b, a folder of the tree:
# out of the tree's root, so the A/B script can configure its own builds beside it). From the
# tree's root (~1 min to build, ~5-7 min to run):
#   ./autogen.sh && mkdir -p b && cd b && ../configure -q --with-cuda-arch=90 && make -j16 &&
#   cd .. && sh bench/speed_anchor_gpu.sh OUT_DIR
# Environment: BUILD (build folder, default b), PRECS (default bf16; "bf16 fp32" adds the TF32
#   rows), MODES (torch.compile modes, default max-autotune; e.g. "default max-autotune" or
#   max-autotune-no-cudagraphs; set and empty: eager only), CAP (seconds the compiling step may take, default 240),
#   PAIRS (ablation pairs per account row, default 7), BUDGET (seconds for the whole script,
#   default 470: the A/B is skipped when less than 200 s are left), COMMIT (the tree's commit,
#   where git cannot tell it),
#   ACCOUNT (default 1; 0 skips part (a), ~3 min, when only the rates are wanted),
#   TRAIN_RUNS (our trainer's runs before PyTorch's rows and again after them, default 3: the
#   ratio takes the median of the runs that did not wait for their batches, see below),
#   ENGINES (SHMDDP_CONV_ENGINE settings our trainer rows run under, default auto; "auto library"
#   puts the fused engine and the library's convolutions side by side in the same run;
#   auto+SHAPES runs auto with SHMDDP_CONV_FUSE_SHAPES=SHAPES, e.g. "auto auto+stats:256:512":
#   one shape more on the fused kernels against the table's choice, in the same run).
# On a freshly started machine max-autotune's compile can take more than 200 s (its caches are
# empty): for the ratio alone run ACCOUNT=0 CAP=420, and the account in a run of its own.
# Our rate is the median of our runs (TRAIN_RUNS before PyTorch's rows, as many after) whose
# step waited less than 1 % for its batches (the trainer's summary, "data wait"): a run that
# waited measured the host's loader (its cores busy with other work), not the step, and is listed
# but left out; where every run waited, no ratio is given, and the line says so
# (bench/fed_median.py).
# Writes OUT_DIR/speed.txt (the summary, also printed; bench/results/speed_anchor_1xh200.txt),
# roofline_1xh200.md/.json (the account; bench/results/roofline_1xh200.md), report_1xh200.html
# (tools/report of our bf16 run with the account), speed.tsv (rows in train_1xh200.tsv's
# columns plus compile_s) and the logs.
set -u
. "$(dirname "$0")/lib.sh"
O=${1:?usage: bench/speed_anchor_gpu.sh OUT_DIR [PATCH]}; PATCH=${2:-}
B=${BUILD:-b}; PRECS=${PRECS:-bf16}; MODES=${MODES-max-autotune}; CAP=${CAP:-240}
PAIRS=${PAIRS:-7}; BUDGET=${BUDGET:-470}; ACCOUNT=${ACCOUNT:-1}; ENGINES=${ENGINES:-auto}
TRAIN_RUNS=${TRAIN_RUNS:-3}
case $TRAIN_RUNS in '' | *[!0-9]* | 0) echo "speed_anchor_gpu: TRAIN_RUNS must be a count of runs, 1 or more" >&2; exit 2 ;; esac
for e in $ENGINES; do
  case $e in auto | library | fused | auto+?*) ;; *) echo "speed_anchor_gpu: ENGINES: $e is not auto, library, fused or auto+SHAPES" >&2; exit 2 ;; esac
done
mkdir -p "$O"
sum="$O/speed.txt"; tsv="$O/speed.tsv"
t0=$(date +%s)
el() { echo $(($(date +%s) - t0)); }
say() { echo "$*" | tee -a "$sum"; }
for f in "$B/dev/ops_cuda_bench" "$B/train"; do
  [ -x "$f" ] || { echo "speed_anchor_gpu: no $f: configure and build with CUDA first (see the top of this file)" >&2; exit 2; }
done
[ -z "$PATCH" ] || [ -r "$PATCH" ] || { echo "speed_anchor_gpu: cannot read $PATCH" >&2; exit 2; }
: > "$sum"
say "# training speed against PyTorch: commit $COMMIT, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
say "# command: BUILD=$B PRECS=\"$PRECS\" MODES=\"$MODES\" CAP=$CAP ENGINES=\"$ENGINES\" ACCOUNT=$ACCOUNT sh bench/speed_anchor_gpu.sh OUT_DIR${PATCH:+ PATCH}"
nvidia-smi -L 2>/dev/null | sed 's/^/# /' | tee -a "$sum"
printf 'date\tcommit\timpl\tprecision\tvariant\timages_per_s\tpeak_mib\tgraph\tcompile_s\tdata_wait_pct\n' > "$tsv"
row() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%F)" "$@" >> "$tsv"; }

# (a) the account, bf16 at the trainer's recompute policy
if [ "$ACCOUNT" = 1 ]; then
timeout 200 "$B/dev/ops_cuda_bench" -p bf16 -t 0 -r auto -R "$PAIRS" -T 120 \
  -A "$O/roofline_1xh200.md" -J "$O/roofline_1xh200.json" > "$O/account.log" 2>&1
say "account: rc $? ($(el) s): $(grep -h '^step (CUDA graph)' "$O/account.log")"
grep -h '^ceilings:\|^account: .*MFU' "$O/account.log" | tee -a "$sum"
if [ -s "$O/roofline_1xh200.md" ]; then
  sed -n '/^## Where the time goes/,/^## Per pass/p' "$O/roofline_1xh200.md" | grep '^|' | tee -a "$sum"
  sed -n '/^## Per pass/,/^## The largest/p' "$O/roofline_1xh200.md" | grep '^|' | tee -a "$sum"
else
  tail -5 "$O/account.log" | tee -a "$sum"
fi
else
  say "account: skipped (ACCOUNT=$ACCOUNT)"
fi

# (c) our trainer, the reference configuration (as step_ab_gpu.sh and train_speed_gpu.sh)
common="--device cuda $REF_FLAGS --batch-size 6 --steps 68 --workers 8 --nproc 1"
ours1() { # precision tag engine last (1: the tag's last run, which makes the report)
  f=$(printf '%s' "$3" | tr ':,+' '---') # the engine in file names: letters, digits, - and _
  r="$O/run_$1_$2_$f"; lg="$O/train_$1_$2_$f.log"
  shapes=""
  case $3 in *+*) shapes=${3#*+} ;; esac
  SHMDDP_CONV_ENGINE=${3%%+*} SHMDDP_CONV_FUSE_SHAPES=$shapes timeout 90 "$B/train" $common \
    --precision "$1" --out "$r" > "$lg" 2>&1
  rc=$?
  ips=$(log_value images_per_s "$lg")
  peak=$(log_value peak_mib "$lg")
  wait=$(data_wait "$lg")
  [ $rc = 0 ] || ips="failed($rc)"
  row "$COMMIT" shmddp "$1" "engine $3 ($2)" "${ips:--}" "${peak:--}" graph - "${wait:--}"
  say "shmddp $1 engine $3 ($2): rc $rc images_per_s=${ips:--} peak_mib=${peak:--} data_wait=${wait:--}% ($(el) s)"
  if [ "$1 $2 $3 $4" = "bf16 after auto 1" ] && [ -s "$O/roofline_1xh200.json" ]; then
    # the run's report with the account in its step section
    python3 tools/report "$r" --account "$O/roofline_1xh200.json" \
      -o "$O/report_1xh200.html" > /dev/null 2>&1 && say "report: report_1xh200.html"
  fi
  rm -rf "$r"
}
ours() { # precision tag: TRAIN_RUNS runs under each engine, the engines interleaved
  i=0
  while [ $i -lt "$TRAIN_RUNS" ]; do
    i=$((i + 1))
    for e in $ENGINES; do ours1 "$1" "$2" "$e" $((i == TRAIN_RUNS)); done
  done
}
# (b) PyTorch, the same model and settings: eager, then each compile mode
torch_row() { # precision mode
  cap=$CAP; [ "$2" = none ] && cap=0
  timeout $((CAP + 120)) python3 bench/torch_unet.py --precision "$1" --channels-last 1 \
    --steps 30 --warmup 8 --compile "$2" --compile-cap "$cap" > "$O/torch_$1_$2.log" 2>&1
  rc=$?
  line=$(grep '^torch ' "$O/torch_$1_$2.log" | tail -1)
  ips=$(echo "$line" | grep -o 'img_s=[0-9.]*' | cut -d= -f2)
  peak=$(echo "$line" | grep -o 'peak_mib=[0-9.]*' | cut -d= -f2)
  cs=$(echo "$line" | grep -o 'compile_s=[0-9a-z.]*' | cut -d= -f2)
  [ $rc = 0 ] || ips="failed($rc)"
  variant="channels-last autocast"; [ "$1" = fp32 ] && variant="channels-last TF32"
  [ "$2" = none ] || variant="$variant, torch.compile($2)"
  row - torch "$1" "$variant" "${ips:--}" "${peak:--}" - "${cs:--}" -
  say "torch $1 $2: rc $rc ${line:-$(tail -2 "$O/torch_$1_$2.log" | tr '\n' ' ')} ($(el) s)"
}
for p in $PRECS; do
  ours "$p" before
  torch_row "$p" none
  for m in $MODES; do torch_row "$p" "$m"; done
  ours "$p" after
done
say "## ratios (ours / PyTorch, per engine; the targets: bf16 >= 1.3 x max-autotune at <= 1100 MiB, fp32 >= 1.2 x eager; PyTorch peaks: max_memory_allocated from its second step on, CUDA graph pools included)"
python3 "$(dirname "$0")/fed_median.py" anchor "$tsv" | tee -a "$sum"

# (d) one A/B patch, if the budget allows (~3 min with the default job, ~2 without)
if [ -n "$PATCH" ]; then
  left=$((BUDGET - $(el)))
  if [ $left -lt 200 ]; then
    say "A/B of $PATCH: skipped, $left s left of $BUDGET (run it alone: sh bench/step_ab_gpu.sh $PATCH OUT)"
  else
    parts="tests ops train default"; [ $left -lt 260 ] && parts="tests ops train"
    say "A/B of $PATCH ($parts; $left s left):"
    PARTS="$parts" timeout $((left - 10)) sh bench/step_ab_gpu.sh "$PATCH" "$O/ab" > "$O/ab.log" 2>&1
    say "A/B rc $?"
    [ -r "$O/ab/ab.txt" ] && tee -a "$sum" < "$O/ab/ab.txt"
  fi
fi
say "done in $(el) s"
