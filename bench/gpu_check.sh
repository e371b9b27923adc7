#!/bin/bash
# gpu_check.sh — the GPU suites the way a user's machine runs them: every suite of `make check` in
# parallel, several rounds in a row, while a training job runs on the same GPU (memory freed and
# reused, contexts taking turns), then compute-sanitizer over the CUDA suites. Every change to GPU
# code runs this on a GPU machine before it is called done (docs/testing.md: Changing GPU code).
#
# Usage, from the repository root of a checkout on the GPU machine:
#   bench/gpu_check.sh [OUTDIR]          (default gpu_check.out)
# Settings (environment): ROUNDS (5), JOBS (nproc), BUILD (1: autogen, configure, build first;
# 0: use the configured build in the tree), COMMIT (the tree's name in the record, where git
# cannot tell it), SANITIZE (1), SAN_BUDGET (seconds the sanitizer part
# may take, default 200; a case that would start past it is listed as not run), DEADLINE
# (seconds for the whole script, default 570: a round that would not finish by then, judged by
# the slowest round so far, is not started and the report says so).
#
# Five rounds and the sanitizer part take longer than 10 minutes on one H100 (the times are in
# bench/results/gpu_check_1xh100.txt): where one command may run 10 minutes, run the rounds with
# SANITIZE=0, then the sanitizer part with ROUNDS=0 BUILD=0 on the same build.
#
# Writes OUTDIR/gpu_check.txt: the commit, machine and command; one line per round
# `round N: P passed, F failed (S skipped, T s)`; the training job beside (runs, each exit
# status, and each run's result line: its validation mIoU); each sanitizer
# run's command and `ERROR SUMMARY` lines. The logs of failed tests go to
# OUTDIR/failed-round-N.tar.gz. Exit status 0 only when every round and every sanitizer run is
# clean and the training job never failed.
#
# Sanitizer cases (chosen to cover every kind of CUDA code in a few minutes on one H100/H200):
#   memcheck  check_devmem_cuda (gpu: every kind of memory, free and reallocate 1000 times),
#             check_coloc_cuda (one_gpu: every collective among ranks sharing the GPU, processes
#             and threads), check_cuda_collectives (reduce_kernel), check_ops_cuda
#             (elementwise, normalisation, loss, and optimizer last: about a minute alone)
#   racecheck check_ops_cuda (normalisation, loss), check_cuda_collectives (reduce_kernel): the
#             kernels that share data through shared memory
#   synccheck the same as racecheck (block-level barriers in those kernels)
#   memcheck, synccheck, racecheck  check_ops_cuda head_train (the head's training pass: lanes
#             sharing a pixel by shuffles, the block's sums through shared memory, its input by
#             cp.async), and check_conv_sm90_cuda (sanitize: small shapes through every
#             Hopper convolution kernel, narrow and wide, forward, dgrad and wgrad; skipped on
#             other GPUs)
# The other convolution cases and the model suites are left out of the sanitizer part: they run
# cuDNN and cuBLAS kernels (not ours), or ours on large shapes, for minutes under the tools; they
# run in every round.
set -u
start=$(date +%s)
out=${1:-gpu_check.out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
rounds=${ROUNDS:-5}
jobs=${JOBS:-$(nproc)}
deadline=$((start + ${DEADLINE:-570}))
report=$out/gpu_check.txt
bad=0
now() { date +%s; }
say() { echo "$*" | tee -a "$report"; }

# The tree's name from its files (bench/tree_name.sh: HEAD, or the tree object where the files are
# not HEAD's, as in a copy whose .git is stale); COMMIT overrides it.
commit=${COMMIT:-$(sh "$(dirname "$0")/tree_name.sh" "$(dirname "$0")/..")}
{
  echo "# bench/gpu_check.sh: make -j$jobs check, $rounds rounds, beside a training job; compute-sanitizer"
  echo "# commit $commit; $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "# machine: $(nvidia-smi -L 2> /dev/null | tr '\n' ' ')$(nproc) CPUs"
  echo "# driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2> /dev/null | head -1), $(nvcc --version 2> /dev/null | tail -1)"
  echo "# command: ROUNDS=$rounds JOBS=$jobs SAN_BUDGET=${SAN_BUDGET:-200} DEADLINE=${DEADLINE:-570} bench/gpu_check.sh"
} > "$report"

if [ "${BUILD:-1}" = 1 ]; then
  { ./autogen.sh && ./configure -q && make -j"$jobs" && make -j"$jobs" check TESTS=; } \
    > "$out/build.log" 2>&1 || { say "build failed (build.log)"; tail -30 "$out/build.log"; exit 1; }
  say "# built in $(($(now) - start)) s"
fi

# ---- the training job beside: the trainer's default job on the same GPU, again and again ----
bgdir=$(mktemp -d /tmp/gpu_check_bg.XXXXXX)
(
  i=0
  while [ ! -e "$bgdir/stop" ]; do
    i=$((i + 1))
    ./shmddp-train --out "$bgdir/run$i" --progress lines > "$bgdir/train$i.log" 2>&1
    rc=$?
    [ -e "$bgdir/stop" ] && [ $rc -ne 0 ] && rc="stopped ($rc)"
    echo "$i $rc" >> "$bgdir/status"
    rm -rf "$bgdir/run$i"
  done
) &
bgpid=$!
# The job is on the GPU before the first round starts: its first step is logged.
for _ in $(seq 600); do
  grep -qs '"step"' "$bgdir"/run1/log.jsonl 2> /dev/null && break
  grep -qs . "$bgdir/status" && break
  sleep 0.1
done

# ---- the rounds ----
# Round 1 runs the tests in make's order; each later round starts the ones that finished last in
# the round before first (longest first: the round ends when its longest test does).
slowest=0
order=""
for r in $(seq "$rounds"); do
  t0=$(now)
  if [ $((t0 + slowest)) -gt "$deadline" ]; then
    say "round $r: not run (the slowest round took ${slowest} s; the deadline is near)"
    bad=1
    continue
  fi
  make -j"$jobs" check ${order:+"TESTS=$order"} > "$out/round$r.log" 2>&1
  t=$(($(now) - t0))
  [ $t -gt $slowest ] && slowest=$t
  sum=tests/test-suite.log
  [ -f test-suite.log ] && sum=test-suite.log
  get() { sed -n "s/^# $1: *//p" "$sum" | head -1; }
  pass=$(get PASS) skip=$(get SKIP) fail=$(get FAIL) err=$(get ERROR) xpass=$(get XPASS)
  failed=$((${fail:-0} + ${err:-0} + ${xpass:-0}))
  if [ -z "$pass" ]; then
    say "round $r: no test summary (make check failed before the tests: round$r.log)"
    bad=1
    continue
  fi
  say "round $r: $pass passed, $failed failed ($skip skipped, $t s)"
  # When each test finished, from the round's start (the last ones set the round's length).
  for f in tests/*.trs; do echo "$(($(stat -c %Y "$f") - t0)) ${f%.trs}"; done | sort -rn \
    > "$out/round$r.finish"
  order=$(awk '{printf "%s%s", sep, $2; sep = " "}' "$out/round$r.finish")
  if [ $failed -ne 0 ]; then
    bad=1
    logs=$(grep -lE '^:test-result: (FAIL|ERROR|XPASS)' tests/*.trs 2> /dev/null | sed 's/\.trs$/.log/')
    for f in $logs; do say "  failed: ${f%.log}"; done
    # shellcheck disable=SC2086
    tar czf "$out/failed-round-$r.tar.gz" $logs 2> /dev/null
  fi
done

touch "$bgdir/stop"
kill -TERM $(pgrep -P $bgpid) 2> /dev/null
wait $bgpid
runs=$(wc -l < "$bgdir/status" 2> /dev/null || echo 0)
fails=$(awk '$2 != 0 && $2 !~ /^stopped/' "$bgdir/status" 2> /dev/null | wc -l)
say "training beside: $runs runs of the default job, $fails failed ($(awk '{printf "%s%s", sep, $2; sep=" "}' "$bgdir/status" 2> /dev/null))"
# What each run learned (its result line: validation mIoU, images/s beside the tests): the default
# job's quality on this tree, from runs that shared the GPU with the suites. A run stopped when the
# rounds ended writes the line of the epochs it finished; its exit status says which it was.
for i in $(seq "$runs"); do
  res=$(grep -h '^result:' "$bgdir/train$i.log" 2> /dev/null | tail -1)
  st=$(awk -v i="$i" '$1 == i { $1 = ""; sub(/^ /, ""); print }' "$bgdir/status")
  [ -n "$res" ] && say "  run $i (exit $st): $res"
done
[ "$fails" -ne 0 ] && { bad=1; cp "$bgdir"/train*.log "$out/" 2> /dev/null; }
rm -rf "$bgdir"

# ---- compute-sanitizer ----
if [ "${SANITIZE:-1}" = 1 ]; then
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  san_end=$(($(now) + ${SAN_BUDGET:-200}))
  [ $san_end -gt "$deadline" ] && san_end=$deadline
  export CK_TIMEOUT_MULTIPLIER=20
  n=0
  sanitize() { # TOOL SUITE CASE
    n=$((n + 1))
    local left=$((san_end - $(now)))
    if [ $left -le 10 ]; then
      say "sanitizer $1 $2 ($3): not run (budget spent)"
      return
    fi
    local log="$out/san$n-$1-$(basename "$2")-$3.log"
    CK_RUN_CASE=$3 timeout -s KILL "$left" "$cs" --tool "$1" --target-processes all \
      --error-exitcode 99 --print-limit 20 "$2" > "$log" 2>&1
    local rc=$? errors
    # memcheck and synccheck end with "ERROR SUMMARY: N errors", racecheck with
    # "RACECHECK SUMMARY: H hazards displayed (N errors, W warnings)": one per process.
    errors=$(sed -n -e 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p' \
      -e 's/.*RACECHECK SUMMARY: .*(\([0-9]*\) errors.*/\1/p' "$log" | awk '{s += $1} END {print s + 0}')
    local procs
    procs=$(grep -cE '(ERROR|RACECHECK) SUMMARY' "$log")
    if [ $rc -eq 77 ] && [ "$errors" -eq 0 ]; then
      say "sanitizer $1 $2 ($3): SKIP (nothing of the case runs on this GPU)"
    elif [ $rc -eq 137 ]; then
      say "sanitizer $1 $2 ($3): stopped at the budget's end ($procs processes summarised, $errors errors)"
      bad=1
    elif [ $rc -ne 0 ] || [ "$errors" -ne 0 ] || [ "$procs" -eq 0 ]; then
      say "sanitizer $1 $2 ($3): rc $rc, ERROR SUMMARY: $errors errors over $procs processes"
      grep -m 20 -E '=========|FAIL|Error' "$log" | sed 's/^/    /' | tee -a "$report"
      bad=1
    else
      say "sanitizer $1 $2 ($3): ERROR SUMMARY: 0 errors ($procs process$([ "$procs" -eq 1 ] || echo es))"
    fi
  }
  sanitize memcheck tests/check_devmem_cuda gpu
  sanitize memcheck tests/check_cuda_collectives reduce_kernel
  sanitize racecheck tests/check_cuda_collectives reduce_kernel
  sanitize synccheck tests/check_cuda_collectives reduce_kernel
  sanitize racecheck tests/check_ops_cuda normalisation
  sanitize synccheck tests/check_ops_cuda normalisation
  sanitize racecheck tests/check_ops_cuda loss
  sanitize synccheck tests/check_ops_cuda loss
  for t in memcheck racecheck synccheck; do sanitize $t tests/check_ops_cuda head_train; done
  for c in elementwise normalisation loss; do sanitize memcheck tests/check_ops_cuda $c; done
  sanitize memcheck tests/check_coloc_cuda one_gpu
  sanitize memcheck tests/check_ops_cuda optimizer
  sanitize memcheck tests/check_conv_sm90_cuda sanitize
  sanitize synccheck tests/check_conv_sm90_cuda sanitize
  sanitize racecheck tests/check_conv_sm90_cuda sanitize
fi

say "# total $(($(now) - start)) s; $([ $bad -eq 0 ] && echo clean || echo 'NOT CLEAN')"
exit $bad
