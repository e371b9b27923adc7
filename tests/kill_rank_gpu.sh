#!/bin/sh
# SIGKILL one of two ranks that share GPU 0 (the co-located path) while the other waits for it
# inside an all-reduce of device buffers, once the member (rank 1) and once the leader (rank 0,
# whose kernel does the group's work), under each way of waiting for the peers' events
# (SHMDDP_COLOC_WAIT: KILL_WAITS lists them, default "host stream"): the survivor must report the
# error within 1 s, naming the dead rank; the run must end (no rank killed by the launcher's
# grace), non-zero, leave nothing in /dev/shm, and no process of the run may hold GPU memory
# afterwards. SKIP (77) without a GPU or without CUDA in the build.
#
# Event-driven, as tests/kill_rank.sh: the victim is stopped (SIGSTOP) once the run is timing,
# the survivor is seen asleep in the segment's futex (inside the all-reduce), then the victim is
# killed and the clock starts. Every wait is bounded (the start and the sighting by WAIT_LIMIT,
# 30 s here; the error by 5 s, the end by 15 s after the kill), and a run that does not end is
# killed and reported, so the script always ends.
set -u
WAIT_LIMIT=${WAIT_LIMIT:-30}
. "${srcdir:-.}/tests/wait_lib.sh"
bench=${top_builddir:-.}/tools/allreduce_bench
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "${ngpu:-0}" -ge 1 ] || { echo "SKIP: no GPU visible"; exit 77; }
"$bench" --device cuda --nproc 1 -b 8 -e 8 -n 1 -w 0 -c 0 2>&1 | grep -q "build has no CUDA" &&
  { echo "SKIP: a build without CUDA"; exit 77; }

# gpu_holders PID...: those of the pids that hold GPU memory (the driver lets go a moment after exit)
gpu_holders() {
  nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | tr -d ' ' |
    grep -xE "$(echo "$@" | tr ' ' '|')"
}
gpu_released() { [ -z "$(gpu_holders "$@")" ]; }

fail=0
# the run that did not end: killed, with what it printed
abandon() {
  echo "FAIL: $1"
  kill -9 "$launcher" $(pgrep -P "$launcher") 2>/dev/null
  cat "$out"
  rm -f "$out"
}
for waits in ${KILL_WAITS:-host stream}; do
for victim_rank in 1 0; do
  echo "--- SHMDDP_COLOC_WAIT=$waits, victim rank $victim_rank"
  out=$(mktemp)
  SHMDDP_COLOC_WAIT=$waits CUDA_VISIBLE_DEVICES=${COLOC_GPU:-0} "$bench" --device cuda --nproc 2 \
    -n 1000000 -b 1M -e 1M -c 0 >"$out" 2>&1 &
  launcher=$!
  # the header line is printed once both ranks have their transport
  wait_line "$out" "rank\\(s\\) on rank 0's GPU" "$launcher" ||
    { abandon "the run did not start within $WAIT_LIMIT s"; exit 1; }
  ranks=$(pgrep -P "$launcher" | sort -n)
  victim=$(echo "$ranks" | sed -n "$((victim_rank + 1))p")
  peer=$(echo "$ranks" | sed -n "$((2 - victim_rank))p")
  survivor_rank=$((1 - victim_rank))
  grep -q "2 rank(s) on rank 0's GPU" "$out" ||
    { abandon "the ranks do not share the GPU"; exit 1; }
  kill -STOP "$victim"
  wait_in_shm_wait "$peer"
  case $? in
    0) echo "rank $survivor_rank (pid $peer) waits inside the all-reduce for the stopped rank $victim_rank" ;;
    2) echo "note: /proc/$peer/syscall is not readable here: killing without seeing the wait" ;;
    *) abandon "rank $survivor_rank was never seen waiting"; exit 1 ;;
  esac
  t0=$(now_ms)
  kill -9 "$victim"
  # (the error is due within 1 s; 5 s only bound the wait)
  wait_for -t 5 _line_or_end "$out" "allreduce_bench: rank $survivor_rank:" "$launcher"
  t_err=$(now_ms)
  if ! wait_for -t 15 gone "$launcher"; then
    abandon "the run did not end within 15 s of the kill"
    fail=1
    continue
  fi
  wait "$launcher"
  rc=$?
  t_end=$(now_ms)
  echo "victim rank $victim_rank ($waits waits): the survivor's error after $((t_err - t0)) ms, exit status $rc after $((t_end - t0)) ms"
  cat "$out"
  [ "$rc" -ne 0 ] || { echo "FAIL: exit status 0"; fail=1; }
  grep -q "allreduce_bench: rank $survivor_rank:.*rank $victim_rank" "$out" ||
    { echo "FAIL: the survivor's error does not name rank $victim_rank"; fail=1; }
  [ $((t_err - t0)) -lt 1000 ] || { echo "FAIL: the survivor's error came after $((t_err - t0)) ms"; fail=1; }
  ! grep -q "did not stop within" "$out" || { echo "FAIL: a rank had to be killed"; fail=1; }
  if ls /dev/shm | grep -q "^shmddp-$launcher-"; then echo "FAIL: segment left in /dev/shm"; fail=1; fi
  wait_for -t 5 gpu_released "$victim" "$peer" ||
    { echo "FAIL: pid(s) $(gpu_holders "$victim" "$peer") still hold GPU memory"; fail=1; }
  rm -f "$out"
done
done
exit $fail
