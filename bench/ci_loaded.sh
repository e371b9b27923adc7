#!/bin/sh
# bench/ci_loaded.sh [RUNS] [BRANCH] — .ci/run on a fresh clone, RUNS times in a row (default 5),
# with two busy loops beside it the whole time (`sh -c 'while :; do :; done'`, killed at the end
# by their pids). Appends one line per run to bench/results/ci_loaded_runs.txt of the clone's
# source (pass/fail, exit status, minutes, load average) and keeps each run's output in
# $LOADED_LOGS (default /tmp/ci_loaded). Run from the repository root.
set -u
runs=${1:-5}
branch=${2:-$(git rev-parse --abbrev-ref HEAD)}
src=$(pwd)
logs=${LOADED_LOGS:-/tmp/ci_loaded}
results="$src/bench/results/ci_loaded_runs.txt"
mkdir -p "$logs" "$(dirname "$results")"
commit=$(git rev-parse --short "$branch")
sh -c 'while :; do :; done' & b1=$!
sh -c 'while :; do :; done' & b2=$!
trap 'kill $b1 $b2 2>/dev/null' EXIT
trap 'exit 1' INT TERM
{
  echo "# $(date -u '+%Y-%m-%d %H:%M UTC'): .ci/run on a fresh clone of $branch ($commit), $runs runs in"
  echo "# a row, two busy loops beside it; $(nproc) cores; $(uname -sr)"
} >> "$results"
passed=0
for i in $(seq "$runs"); do
  dir=$(mktemp -d /tmp/ci_clone.XXXXXX)
  git clone -q -b "$branch" "$src" "$dir/shmddp"
  at=$(git -C "$dir/shmddp" rev-parse --short HEAD)
  t0=$(date +%s)
  (cd "$dir/shmddp" && .ci/run) > "$logs/run$i.log" 2>&1
  rc=$?
  t1=$(date +%s)
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  tests=$(grep -E '^# (TOTAL|PASS|SKIP|FAIL|ERROR):' "$logs/run$i.log" | tr -s ' ' | tr '\n' ' ')
  [ $rc -eq 0 ] && { verdict=PASS; passed=$((passed + 1)); } || verdict=FAIL
  line="run $i ($at): $verdict (exit $rc) in $(((t1 - t0) / 60)) min $(((t1 - t0) % 60)) s; load average $load; $tests"
  echo "$line" | tee -a "$results"
  [ $rc -eq 0 ] || grep -E '^(FAIL|ERROR):' "$logs/run$i.log" | sed 's/^/  /' | tee -a "$results"
  rm -rf "$dir"
done
echo "# $passed of $runs runs passed" | tee -a "$results"
