#!/usr/bin/env bash
# bench/torch_soak.sh OUTFILE [MODE...] — the PyTorch soak of libshmddp-nccl.so on one GPU: ranks
# sharing the GPU run bench/torch_soak.py (every collective and dtype at sizes that change, DDP
# and FSDP2, expandable segments, empty_cache; every result checked exactly) under torchrun
# through shmddp-nccl-run, once per MODE, while a background process keeps the GPU busy with
# matmuls (started before the first run, stopped after the last). On the GPU machine, in the root
# of a configured and built CUDA tree (./shmddp-nccl-run, .libs/libshmddp-nccl.so.0):
#
#     bench/torch_soak.sh OUT/torch_soak.txt            # nomps then mps, 90 s each: ~4 min
#
# MODE: nomps (without MPS) or mps (under the wrapper's private MPS daemon); default both. The
# wrapper's flag for each mode is taken from its --help (--mps where MPS is opt-in, --no-mps where
# it is opt-out, none for its default), and each rank checks that its context runs under MPS or
# not, as the mode says.
# Writes OUTFILE (it must not exist; written whole at the end): commit, machine, command and date,
# then per run its command, exit status and the soak's table (calls and errors per kind), the
# load's matmul count, and last `soak: N calls, E errors` over all runs. Each run's log and the
# load's go to the folder OUTFILE less .txt plus _logs (new too). Exit status 0 only when every
# run exited 0 with 0 errors, the load ran throughout and nothing of shmddp was left in /dev/shm
# (a segment made during a run and there after it, which no live process holds: other programs
# beside, a test suite say, make and hold their own); 2 when an argument or a prerequisite is
# wrong (nothing is started then).
# Environment: SOAK_SECONDS (90: each run's soak), SOAK_RANKS ("2"; "2 4" adds 4 ranks per mode),
# SOAK_MAX_MIB (32: largest input of a rank), SOAK_SEED (1), PYTHON (python3), COMMIT (the commit
# named in the header; default: bench/tree_name.sh's name of the tree, where it is a git checkout).
set -u
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2; }
die() { echo "torch_soak.sh: $*" >&2; exit 2; }
[ $# -ge 1 ] || usage
case $1 in -h | --help) usage ;; esac
OUTFILE=$1
shift
MODES=${*:-nomps mps}
SECS=${SOAK_SECONDS:-90}
RANKS=${SOAK_RANKS:-2}
MAX_MIB=${SOAK_MAX_MIB:-32}
SEED=${SOAK_SEED:-1}
PY=${PYTHON:-python3}
RUNNER=./shmddp-nccl-run
SOAK=bench/torch_soak.py

# ---- every check before anything starts ----
for m in $MODES; do
  case $m in nomps | mps) ;; *) die "mode '$m': give nomps or mps" ;; esac
done
for r in $RANKS; do
  case $r in 2 | 4 | 8) ;; *) die "SOAK_RANKS: '$r' ranks: give 2, 4 or 8" ;; esac
done
case $SECS in '' | *[!0-9]*) die "SOAK_SECONDS='$SECS': give whole seconds" ;; esac
[ -e "$OUTFILE" ] || [ -L "$OUTFILE" ] && die "$OUTFILE exists: remove it or name another file"
OUTDIR=$(dirname "$OUTFILE")
if [ ! -d "$OUTDIR" ] || [ ! -w "$OUTDIR" ]; then die "$OUTDIR: no such writable folder"; fi
LOGS=${OUTFILE%.txt}_logs
[ -e "$LOGS" ] && die "$LOGS exists: remove it or name another OUTFILE"
[ -f "$SOAK" ] || die "run in the root of the shmddp tree ($SOAK is missing)"
[ -x "$RUNNER" ] || die "$RUNNER is missing: configure with CUDA and run make first"
LIB=$(readlink -f .libs/libshmddp-nccl.so.0 2>/dev/null)
if [ -z "$LIB" ] || [ ! -f "$LIB" ]; then
  die ".libs/libshmddp-nccl.so.0 is missing: configure with CUDA and run make first"
fi
nvidia-smi -L > /dev/null 2>&1 || die "nvidia-smi -L failed: no GPU here"
torch_v=$("$PY" -c 'import torch; assert torch.cuda.is_available(), "no CUDA"; print(torch.__version__, torch.version.cuda)' 2>&1) ||
  die "$PY cannot import torch with CUDA: $(echo "$torch_v" | tail -1)"
help=$("$RUNNER" --help 2>&1)
has_opt() { printf '%s\n' "$help" | grep -qE -- "(^|[^a-z-])$1([^a-z-]|$)"; }
# mode_flag MODE: the wrapper's flag for MODE ('' where MODE is what it does by default).
mode_flag() {
  case $1 in
    mps)
      if has_opt --mps; then echo --mps
      elif has_opt --no-mps; then echo ""
      else return 1; fi ;;
    nomps) if has_opt --no-mps; then echo --no-mps; else echo ""; fi ;;
  esac
}
for m in $MODES; do
  mode_flag "$m" > /dev/null || die "$RUNNER --help names neither --mps nor --no-mps: it cannot run mode $m"
  if [ "$m" = mps ] && ! command -v nvidia-cuda-mps-control > /dev/null; then
    die "mode mps: nvidia-cuda-mps-control (it comes with the driver) is not on PATH"
  fi
done
mkdir "$LOGS" || die "cannot make $LOGS"
LOGS=$(cd "$LOGS" && pwd)

export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True NCCL_NVLS_ENABLE=0 SHMDDP_NCCL_DEBUG=1
T_START=$(date +%s)
TMP_OUT=$(mktemp "$OUTDIR/.torch_soak.XXXXXX")
LOAD=
stop_load() {
  [ -n "$LOAD" ] || return 0
  kill -TERM "$LOAD" 2> /dev/null
  wait "$LOAD"
  LOAD_RC=$?
  LOAD=
}
trap 'stop_load; rm -f "$TMP_OUT"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
out() { printf '%s\n' "$*" >> "$TMP_OUT"; }

# alive PID: the process exists and is not a zombie.
alive() { [ -e "/proc/$1" ] && ! grep -qs '^State:.*zombie' "/proc/$1/status"; }
# Processes of a run that outlived it (torchrun may start its workers apart, with setsid) carry
# the run's tag in their environment; they are killed after the run, and waited for (30 s at
# most), so that no process of the run is alive when its leftovers are looked for.
reap() {
  local p pids t0
  pids=$(grep -lzxF "SHMDDP_BENCH_TAG=$1" /proc/[0-9]*/environ 2> /dev/null |
    sed -n 's|^/proc/\([0-9]*\)/environ$|\1|p' | grep -vxF "$$")
  [ -n "$pids" ] || return 0
  for p in $pids; do kill -KILL "$p" 2> /dev/null; done
  t0=$(date +%s)
  for p in $pids; do
    while alive "$p"; do
      [ $(($(date +%s) - t0)) -lt 30 ] || break
      sleep 0.1
    done
  done
}
# Whether a live process holds segment NAME of /dev/shm: the process whose pid its name carries
# (shmddp-PID-...) is alive, or one maps it. After reap, none of them is the run's.
held() {
  local pid
  pid=$(sed -n 's/^shmddp-\([0-9][0-9]*\)-.*/\1/p' <<< "$1")
  { [ -n "$pid" ] && alive "$pid"; } || grep -qsF "/dev/shm/$1" /proc/[0-9]*/maps
}
# The segments made during a run (not in BEFORE) and left after it: those no live process holds.
left_by_run() {
  local f
  comm -13 <(echo "$1") <(shm_list) | while read -r f; do
    held "$f" || echo "$f"
  done
}
shm_list() {
  local f
  for f in /dev/shm/shmddp*; do [ -e "$f" ] && echo "${f#/dev/shm/}"; done | sort
}

{
  echo "# torch_soak: PyTorch on libshmddp-nccl.so, ranks sharing one GPU, beside a GPU load"
  if [ -n "${COMMIT:-}" ]; then
    echo "# commit: $COMMIT"
  elif c=$(sh "$(dirname "$0")/tree_name.sh" "$(dirname "$0")/..") && [ "$c" != unknown ]; then
    echo "# commit: $c"
  else
    echo "# commit: unknown (no git here; $("$RUNNER" --version 2>&1 | head -1))"
  fi
  echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi -L | sed 's/^/# machine: /'
  echo "# driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1); PyTorch, CUDA: $torch_v; $(nproc) CPUs"
  echo "# command: bench/torch_soak.sh $OUTFILE $MODES (SOAK_SECONDS=$SECS SOAK_RANKS=\"$RANKS\" SOAK_MAX_MIB=$MAX_MIB SOAK_SEED=$SEED)"
  echo "# environment: CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES PYTORCH_CUDA_ALLOC_CONF=$PYTORCH_CUDA_ALLOC_CONF NCCL_NVLS_ENABLE=0 SHMDDP_NCCL_DEBUG=1"
  echo "# load: $PY $SOAK --gpu-load (2048x2048 float32 matmuls on GPU 0, outside MPS, from before the first run to after the last)"
} > "$TMP_OUT"

"$PY" "$SOAK" --gpu-load > "$LOGS/gpu_load.log" 2>&1 &
LOAD=$!
# Wait for the load's first matmul (its line), or its end; 120 s at most.
t0=$(date +%s)
until grep -q '^gpu-load: ready' "$LOGS/gpu_load.log"; do
  if ! kill -0 "$LOAD" 2> /dev/null || [ $(($(date +%s) - t0)) -gt 120 ]; then
    die "the GPU load did not start within 120 s: $(tail -n 3 "$LOGS/gpu_load.log")"
  fi
  sleep 0.2
done

FAILED=""
CALLS=0
ERRORS=0
for mode in $MODES; do
  flag=$(mode_flag "$mode")
  expect=off
  [ "$mode" = mps ] && expect=on
  for r in $RANKS; do
    name=${mode}_${r}ranks
    log="$LOGS/$name.log"
    table="$LOGS/$name.table"
    cmd=(env "SHMDDP_NCCL_LIB=$LIB" "$RUNNER" ${flag:+"$flag"} "$PY" -m torch.distributed.run --standalone
      --nproc-per-node "$r" "$SOAK" --seconds "$SECS" --max-mib "$MAX_MIB" --seed "$SEED"
      --timeout 120 --expect-mps "$expect" --require-shmddp --table "$table")
    echo "torch_soak.sh: $name: ${cmd[*]}"
    before=$(shm_list)
    t0=$(date +%s)
    tag="torch_soak.$$.$name"
    SHMDDP_BENCH_TAG=$tag timeout -k 20 $((SECS + 90)) "${cmd[@]}" > "$log" 2>&1
    rc=$?
    reap "$tag"
    secs=$(($(date +%s) - t0))
    left=$(left_by_run "$before" | tr '\n' ' ')
    served=$(grep -c 'served by shmddp' "$log")
    out ""
    out "## $name: shmddp-nccl-run ${flag:-(no flag: its default)}, $r ranks on GPU $CUDA_VISIBLE_DEVICES"
    out "# command: SHMDDP_NCCL_LIB=$LIB ${cmd[*]:2}"
    out "# exit status $rc after $secs s$([ "$rc" = 124 ] && echo " (timed out)"); communicators made by shmddp: $served; /dev/shm: ${left:-nothing of shmddp left}"
    if [ -s "$table" ]; then
      cat "$table" >> "$TMP_OUT"
    else
      out "# no table: see $log"
    fi
    res=$(tail -n 1 "$table" 2> /dev/null)
    rm -f "$table" # in the record now
    if [[ $res =~ ^soak:\ ([0-9]+)\ calls,\ ([0-9]+)\ errors$ ]]; then
      CALLS=$((CALLS + BASH_REMATCH[1]))
      ERRORS=$((ERRORS + BASH_REMATCH[2]))
      [ "${BASH_REMATCH[2]}" = 0 ] || FAILED="$FAILED $name(errors)"
    else
      FAILED="$FAILED $name(no result)"
    fi
    [ "$rc" = 0 ] || FAILED="$FAILED $name(exit $rc)"
    [ "$served" -gt 0 ] || FAILED="$FAILED $name(no communicator from shmddp)"
    [ -z "$left" ] || FAILED="$FAILED $name(left in /dev/shm: $left)"
    if ! kill -0 "$LOAD" 2> /dev/null; then
      FAILED="$FAILED load(ended during $name)"
    fi
    echo "torch_soak.sh: $name: exit status $rc after $secs s: $res"
  done
done
LOAD_RC=
stop_load
out ""
out "## load: $(grep '^gpu-load: [0-9]' "$LOGS/gpu_load.log" || echo 'no count'); exit status $LOAD_RC"
[ "$LOAD_RC" = 0 ] || FAILED="$FAILED load(exit $LOAD_RC)"
out "# $(($(date +%s) - T_START)) s in all; failed:${FAILED:- none}"
out "soak: $CALLS calls, $ERRORS errors"
trap - EXIT
mv -n "$TMP_OUT" "$OUTFILE"
[ -e "$TMP_OUT" ] && die "$OUTFILE appeared meanwhile: the record is left in $TMP_OUT"
cat "$OUTFILE"
[ -z "$FAILED" ] && [ "$ERRORS" = 0 ]
