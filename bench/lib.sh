# shellcheck shell=sh
# bench/lib.sh — what the runners in bench/ share, sourced by them (POSIX sh; bash runners source
# it too): the output folder and its summary, the record's header (date, commit, machine,
# command), parts run under a time limit within the script's budget, the reference training
# configuration, and values read back from the trainer's output.
#
#   . "$(dirname "$0")/lib.sh"
#   bench_out "$1"                   # OUT (absolute), SUM=OUT/summary.txt, FAILED=0
#   bench_header "what this measures" "$@"
#   part NAME 60 ./tests/check_foo   # PASS / SKIP / FAIL line in SUM, output in OUT/NAME.log
#   exit "$FAILED"

# The commit the record names: this checkout's HEAD where the files are HEAD's, else the tree they
# make (bench/tree_name.sh: a copy with a stale .git is named by its content), or COMMIT where
# git cannot tell (a copy of a tree without its history).
COMMIT=${COMMIT:-$(sh "$(dirname "$0")/tree_name.sh" "$(dirname "$0")/..")}
# Seconds the whole script may take (0: no budget); a part gets at most what is left of it.
BUDGET_S=${BUDGET_S:-0}
T_START=$(date +%s)
FAILED=0

# The reference configuration (bench/README.md): the U-Net 64..1024, 3x256x256 images, 4 classes,
# SGD with momentum, 8 warm-up steps left out of the timing. Runners add --device, --nproc,
# --batch-size (6 per rank), --steps (timed steps + 8), --workers and --precision.
REF_FLAGS="--widths reference --image-size 256 --classes 4 --optimizer sgd --momentum 0.9 \
--lr 0.01 --warmup-steps 1 --timing-warmup 8 --train-size 1200 --val-size 12 --log-every 10 \
--timeout 60"

# bench_usage: print the script's first comment (its usage) and exit 2.
bench_usage() {
  sed -n '2,/^[^#]/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 2
}

# record_header COMMAND: a record's header lines on stdout (date, commit, command, the GPUs and
# how they are connected), for the tables the runners write.
record_header() {
  echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "# commit: $COMMIT"
  echo "# command: $1"
  nvidia-smi -L 2> /dev/null | sed 's/^/# gpu: /'
  nvidia-smi topo -m 2> /dev/null | sed 's/^/# topo: /'
}

# build_and_out BUILD_DIR OUT_DIR: the training runners' first two arguments: B, the build
# folder, and O, the output folder (created). Without them: the usage, exit status 2.
build_and_out() {
  [ $# -ge 2 ] || bench_usage
  B=$1
  O=$2
  mkdir -p "$O" || exit 2
}

# in_tree_root: cd to the tree's root (where the runners are run from); LIB is the NCCL front
# end built there, PY the python to run PyTorch and CuPy with.
in_tree_root() {
  cd "$(dirname "$0")/.." || exit 2
  LIB=$(pwd)/.libs/libshmddp-nccl.so
  PY=${PYTHON:-python3}
}

# bench_out DIR: create DIR; OUT is its absolute path, SUM the summary in it (emptied).
bench_out() {
  mkdir -p "$1" && OUT=$(cd "$1" && pwd) || { echo "cannot create $1" >&2; exit 2; }
  SUM=$OUT/summary.txt
  : > "$SUM"
}

# bench_start "$@": the start of a runner whose one argument is OUTDIR (else its usage, exit
# status 2): OUT and SUM made there (bench_out), then the tree's root as the working folder.
bench_start() {
  [ $# -eq 1 ] || bench_usage
  bench_out "$1"
  in_tree_root
}

# note TEXT: print TEXT and add it to the summary.
note() { echo "$*" | tee -a "$SUM"; }

# elapsed: seconds since the script started.
elapsed() { echo $(($(date +%s) - T_START)); }

# bench_header TITLE ARGS...: the summary's header: what it measures, date, commit, GPUs and
# driver, and the command (this script with ARGS).
bench_header() {
  _title=$1
  shift
  note "# $_title"
  note "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  commit: $COMMIT"
  nvidia-smi -L 2> /dev/null | sed 's/^/# gpu: /' | tee -a "$SUM"
  _driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2> /dev/null | head -1)
  [ -z "$_driver" ] || note "# driver: $_driver"
  note "# command: bench/$(basename "$0") $*"
}

# part NAME LIMIT_S CMD...: run CMD with a time limit of LIMIT_S seconds, cut to what is left of
# BUDGET_S; its output (the command first) in OUT/NAME.log. One line in the summary: PASS, SKIP
# (exit status 77, a Check suite with nothing to run here) or FAIL (its exit status, or the time
# limit), its seconds, and the last result line of its log (PART_RESULT: the pattern, by default
# a Check summary or a line starting "RESULT "). A failure, or a part the budget leaves no time
# for, sets FAILED=1. Returns the command's exit status.
part() {
  _name=$1 _limit=$2
  shift 2
  if [ "$BUDGET_S" -gt 0 ]; then
    _left=$((BUDGET_S - $(elapsed)))
    if [ "$_left" -lt 10 ]; then
      FAILED=1
      note "$(printf '%-24s SKIP: the budget of %s s is spent' "$_name" "$BUDGET_S")"
      return 1
    fi
    [ "$_left" -lt "$_limit" ] && _limit=$_left
  fi
  echo "+ $*" > "$OUT/$_name.log"
  _t0=$(date +%s)
  timeout -k 10 "$_limit" "$@" >> "$OUT/$_name.log" 2>&1
  _rc=$?
  case $_rc in
    0) _verdict=PASS ;;
    77) _verdict=SKIP ;;
    124 | 137) _verdict="FAIL (over $_limit s)" ;;
    *) _verdict="FAIL (exit $_rc)" ;;
  esac
  case $_verdict in FAIL*) FAILED=1 ;; esac
  _result=$(grep -a -E "${PART_RESULT:-^RESULT |^[0-9]+%: Checks}" "$OUT/$_name.log" | tail -1 | cut -c1-200)
  note "$(printf '%-24s %-5s %4s s  %s' "$_name" "$_verdict" "$(($(date +%s) - _t0))" "$_result")"
  return $_rc
}

# failures NAME: the first failed checks of a Check suite's log, indented, into the summary.
failures() {
  grep -a -E ':F:|:E:' "$OUT/$1.log" | head -8 | cut -c1-300 | sed 's/^/    /' | tee -a "$SUM"
}

# train_run LOG ALL_LOG CMD: run the training command line CMD (killed after 150 s), its output in
# LOG and appended to ALL_LOG after the command; sets RC, IPS (images/s from its result line, or
# failed(RC)) and PEAK (the peak MiB per rank).
train_run() {
  _log=$1 _all=$2
  shift 2
  echo "+ $*" >> "$_all"
  timeout -s KILL 150 sh -c "$*" > "$_log" 2>&1
  RC=$?
  cat "$_log" >> "$_all"
  IPS=$(log_value images_per_s "$_log")
  PEAK=$(log_value peak_mib "$_log")
  [ $RC -eq 0 ] || IPS="failed($RC)"
}

# log_value KEY FILE: the last KEY=value the trainer printed in FILE (images_per_s, peak_mib, ...).
log_value() {
  grep -o "$1=[0-9.,]*" "$2" 2> /dev/null | tail -1 | cut -d= -f2
}

# data_wait FILE: the % of rank 0's step the trainer in FILE waited for its batch (its summary's
# "data wait" row). A run that waited was bound by the host's loader, not by the step: the
# benchmarks print it beside images/s and leave such runs out of their ratios.
data_wait() {
  awk '$1 == "data" && $2 == "wait" { v = $4 } END { if (v != "") print v }' "$1" 2> /dev/null
}
