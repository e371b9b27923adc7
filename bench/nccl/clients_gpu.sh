#!/bin/bash
# bench/nccl/clients_gpu.sh LIB OUT [PARTS...] — the NCCL-interface suite: unmodified PyTorch and CuPy on
# libshmddp-nccl.so (LD_PRELOAD, "ours") next to the real NCCL (no preload), on this machine.
#
#   LIB    path to libshmddp-nccl.so
#   OUT    output folder (created): one <step>.log and <step>.json per run, imports.txt,
#          compare_*.txt, steps.tsv, summary.txt / summary.json
#   PARTS  any of: imports collectives ddp kill cupy timing (default: all)
#
# With 2+ GPUs every part runs ours and NCCL (NPROC ranks, default the GPU count). With 1 GPU
# two ranks share it: ours only (NCCL refuses two ranks on one GPU), DDP (with and without
# SyncBN) for 60 steps as a correctness check, no timing. Each step has a timeout, so one hang
# costs only its own budget; whatever a step leaves running is killed before the next starts.
# Environment: NPROC, DDP_STEPS (200; 60 on 1 GPU), KILL_TIMEOUT (60: the watchdog timeout of
# the kill test), BIG_ELEMS (64Mi: the large float32/bfloat16 collective tests; 0 = none).
# Exit status 1 when the summary has a FAIL.
set -u
if [ $# -lt 2 ]; then
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
LIB=$(readlink -f "$1")
OUT=$2
shift 2
PARTS=${*:-imports collectives ddp kill cupy timing}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
if [ ! -f "$LIB" ]; then
  echo "clients_gpu.sh: $LIB: no such file" >&2
  exit 2
fi

NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "$NGPU" -ge 2 ]; then NPROC=${NPROC:-$NGPU}; else NPROC=${NPROC:-2}; fi
if [ "$NGPU" -ge 2 ]; then DDP_STEPS=${DDP_STEPS:-200}; else DDP_STEPS=${DDP_STEPS:-60}; fi
KILL_TIMEOUT=${KILL_TIMEOUT:-60}
BIG_ELEMS=${BIG_ELEMS:-67108864}

# Both libraries get the same environment; only LD_PRELOAD differs. NVLS (NVLink SHARP) stays
# off, and PyTorch's watchdog tears a process down on a communicator error.
export NCCL_NVLS_ENABLE=0 TORCH_NCCL_ASYNC_ERROR_HANDLING=1
PY=${PYTHON:-python3}
TORCHRUN="$PY -m torch.distributed.run --standalone --nproc-per-node $NPROC"
FIRST_OURS=1
printf 'step\trc\tseconds\n' > "$OUT/steps.tsv"

has_part() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }

# Kill whatever processes of step $1 survived it (torchrun's workers call setsid,
# so a timeout that kills torchrun can orphan them); they carry the step's tag in their env.
reap() {
  local tag="SHMDDP_BENCH_TAG=$1" e p
  for e in /proc/[0-9]*/environ; do
    p=${e#/proc/}; p=${p%/environ}
    [ "$p" = "$$" ] && continue
    # -z: environ is NUL-separated; unreadable or vanished processes are skipped silently.
    if grep -qzxF "$tag" "$e" 2>/dev/null; then
      kill -KILL "$p" 2>/dev/null
    fi
  done
}

# step NAME TIMEOUT ours|nccl CMD... : run one step, log to $OUT/NAME.log, record rc and time.
step() {
  local name=$1 limit=$2 impl=$3
  shift 3
  local log="$OUT/$name.log" pre=() tag
  tag="$name.$$.$RANDOM"
  if [ "$impl" = ours ]; then
    pre=(env "LD_PRELOAD=$LIB")
    # The first run on ours prints the library's one line per communicator ("served by shmddp").
    if [ "$FIRST_OURS" = 1 ]; then pre+=("SHMDDP_NCCL_DEBUG=1"); FIRST_OURS=0; fi
  else
    pre=(env -u LD_PRELOAD)
  fi
  echo "+ ${pre[*]} $*" > "$log"
  printf '%-18s %-4s ... ' "$name" "$impl"
  local t0 t1 rc
  t0=$(date +%s.%N)
  # -k: torchrun forwards SIGTERM to its workers and gives them 30 s before SIGKILL.
  SHMDDP_BENCH_TAG=$tag timeout -k 40 "$limit" "${pre[@]}" "$@" >> "$log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  reap "$tag"
  local secs
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  printf '%s\t%s\t%s\n' "$name" "$rc" "$secs" >> "$OUT/steps.tsv"
  local res
  res=$(grep -a '^RESULT ' "$log" | tail -1 | cut -c8- | cut -c1-150)
  echo "rc $rc, ${secs} s  ${res}"
  [ "$rc" = 124 ] && echo "    timed out after $limit s: see $log"
  return 0
}

echo "clients_gpu.sh: $NGPU GPU(s), $NPROC ranks, lib $LIB, out $OUT, parts: $PARTS"
nvidia-smi -L 2>/dev/null | sed 's/^/  /'
T_START=$(date +%s)

if has_part imports; then
  printf '%-18s %-4s ... ' imports -
  t0=$(date +%s.%N)
  bash "$HERE/imports.sh" "$LIB" > "$OUT/imports.txt" 2> "$OUT/imports.log"
  rc=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  printf 'imports\t%s\t%s\n' "$rc" "$secs" >> "$OUT/steps.tsv"
  echo "rc $rc, ${secs} s  $(grep '^## union' "$OUT/imports.txt"); $(grep -c MISSING "$OUT/imports.txt") missing in lib"
fi

if has_part collectives; then
  C="$HERE/collectives.py --big-elems $BIG_ELEMS"
  step coll_ours1 200 ours $TORCHRUN $C --out "$OUT/coll_ours1.json"
  grep -a 'served by shmddp' "$OUT/coll_ours1.log" | head -2 | sed 's/^/    /'
  step coll_ours2 200 ours $TORCHRUN $C --out "$OUT/coll_ours2.json"
  if [ "$NGPU" -ge 2 ]; then
    step coll_nccl 200 nccl $TORCHRUN $C --out "$OUT/coll_nccl.json"
  fi
fi

if has_part ddp; then
  D="$HERE/ddp_train.py --steps $DDP_STEPS"
  step ddp_ours 180 ours $TORCHRUN $D --out "$OUT/ddp_ours.json"
  [ "$NGPU" -ge 2 ] && step ddp_nccl 180 nccl $TORCHRUN $D --out "$OUT/ddp_nccl.json"
  step ddp_syncbn_ours 180 ours $TORCHRUN $D --syncbn --out "$OUT/ddp_syncbn_ours.json"
  [ "$NGPU" -ge 2 ] && step ddp_syncbn_nccl 180 nccl $TORCHRUN $D --syncbn --out "$OUT/ddp_syncbn_nccl.json"
fi

if has_part kill; then
  # Its own launcher (no torchrun); it gives up on rank 0 100 s after the kill.
  K="$HERE/kill_worker.py --timeout $KILL_TIMEOUT --hard-timeout $((KILL_TIMEOUT + 40))"
  step kill_ours $((KILL_TIMEOUT + 120)) ours $PY $K --out "$OUT/kill_ours.json"
  [ "$NGPU" -ge 2 ] && step kill_nccl $((KILL_TIMEOUT + 120)) nccl $PY $K --out "$OUT/kill_nccl.json"
fi

if has_part cupy; then
  step cupy_ours 120 ours $PY "$HERE/cupy_allreduce.py" --out "$OUT/cupy_ours.json"
  [ "$NGPU" -ge 2 ] && step cupy_nccl 120 nccl $PY "$HERE/cupy_allreduce.py" --out "$OUT/cupy_nccl.json"
fi

if has_part timing && [ "$NGPU" -ge 2 ]; then
  step timing_ours 150 ours $TORCHRUN "$HERE/allreduce_timing.py" --out "$OUT/timing_ours.json"
  step timing_nccl 150 nccl $TORCHRUN "$HERE/allreduce_timing.py" --out "$OUT/timing_nccl.json"
fi

echo "clients_gpu.sh: $(( $(date +%s) - T_START )) s"
echo
$PY "$HERE/compare.py" summary "$OUT"
