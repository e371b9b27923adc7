#!/bin/sh
# SIGKILL one of two ranks that share GPU 0 while the other waits for it inside an all-reduce of
# device buffers, once the member (rank 1) and once the leader (rank 0, whose kernel does the
# group's work): the survivor must report the error within 1 s, naming the dead rank; the run
# must end (no rank killed by the launcher's grace), non-zero, leave nothing in /dev/shm, and no
# process of the run may hold GPU memory afterwards. SKIP (77) without a GPU or without CUDA in
# the build.
#
# Both paths of ranks that share a GPU:
#  - co-located (a large all-reduce, KILL_BIG, default 16M; every size without MPS): under each
#    way of waiting for the peers' events (SHMDDP_COLOC_WAIT: KILL_WAITS lists them, default
#    "host stream");
#  - in-kernel (a small all-reduce, KILL_SMALL, default 64K, forced with -a direct: what captured
#    calls take, where a kernel spins on the peer's flags): only under MPS (run the
#    test under a daemon, e.g. `shmddp-nccl-run --mps sh tests/kill_rank_gpu.sh`; the run's
#    header line says whether the ranks are under MPS, and a run under a daemon whose header does
#    not say so fails). The survivor's kernel spins on the stopped peer's flags while its host
#    waits for the stream after every call (-z 1), in the group's poll.
#
# Event-driven, as tests/kill_rank.sh: the victim is stopped (SIGSTOP) once the run is timing,
# the survivor is seen asleep on the segment's futex (inside the all-reduce, or waiting for its
# stream after it), then the victim is killed and the clock starts. Every wait is bounded (the
# start and the sighting by WAIT_LIMIT, 30 s here; the error by 5 s, the end by 15 s after the
# kill), and a run that does not end is killed and reported, so the script always ends.
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
# one_kill PATH SIZE WAITS VICTIM [BENCH ARGS...]: one run, one kill; 0 passed, 1 failed,
# 3 the run's header says the ranks are not under MPS (for PATH in-kernel: the case is void).
one_kill() {
  path=$1 size=$2 waits=$3 victim_rank=$4
  shift 4
  echo "--- $path path (all-reduce of $size), SHMDDP_COLOC_WAIT=$waits, victim rank $victim_rank"
  out=$(mktemp)
  SHMDDP_COLOC_WAIT=$waits CUDA_VISIBLE_DEVICES=${COLOC_GPU:-0} "$bench" --device cuda --nproc 2 \
    -n 1000000 -b "$size" -e "$size" -c 0 "$@" >"$out" 2>&1 &
  launcher=$!
  # the header line is printed once both ranks have their transport
  wait_line "$out" "rank\\(s\\) on rank 0's GPU" "$launcher" ||
    { abandon "the run did not start within $WAIT_LIMIT s"; return 1; }
  ranks=$(pgrep -P "$launcher" | sort -n)
  victim=$(echo "$ranks" | sed -n "$((victim_rank + 1))p")
  peer=$(echo "$ranks" | sed -n "$((2 - victim_rank))p")
  survivor_rank=$((1 - victim_rank))
  grep -q "2 rank(s) on rank 0's GPU" "$out" ||
    { abandon "the ranks do not share the GPU"; return 1; }
  if grep -q "every sharing rank under MPS" "$out"; then mps_seen=1; else mps_seen=0; fi
  if [ "$path" = in-kernel ] && [ "$mps_seen" = 0 ]; then
    echo "the ranks are not under MPS: the forced in-kernel case would wait for time slices"
    kill -9 "$launcher" $(pgrep -P "$launcher") 2>/dev/null
    wait "$launcher" 2>/dev/null
    rm -f "$out"
    return 3
  fi
  kill -STOP "$victim"
  wait_in_shm_wait "$peer"
  case $? in
    0) echo "rank $survivor_rank (pid $peer) waits inside the all-reduce for the stopped rank $victim_rank" ;;
    2) echo "note: /proc/$peer/syscall is not readable here: killing without seeing the wait" ;;
    *) abandon "rank $survivor_rank was never seen waiting"; return 1 ;;
  esac
  t0=$(now_ms)
  kill -9 "$victim"
  # (the error is due within 1 s; 5 s only bound the wait)
  wait_for -t 5 _line_or_end "$out" "allreduce_bench: rank $survivor_rank:" "$launcher"
  t_err=$(now_ms)
  if ! wait_for -t 15 gone "$launcher"; then
    abandon "the run did not end within 15 s of the kill"
    return 1
  fi
  wait "$launcher"
  rc=$?
  t_end=$(now_ms)
  f=0
  echo "$path path, victim rank $victim_rank ($waits waits): the survivor's error after $((t_err - t0)) ms, exit status $rc after $((t_end - t0)) ms"
  cat "$out"
  [ "$rc" -ne 0 ] || { echo "FAIL: exit status 0"; f=1; }
  grep -q "allreduce_bench: rank $survivor_rank:.*rank $victim_rank" "$out" ||
    { echo "FAIL: the survivor's error does not name rank $victim_rank"; f=1; }
  [ $((t_err - t0)) -lt 1000 ] || { echo "FAIL: the survivor's error came after $((t_err - t0)) ms"; f=1; }
  ! grep -q "did not stop within" "$out" || { echo "FAIL: a rank had to be killed"; f=1; }
  if ls /dev/shm | grep -q "^shmddp-$launcher-"; then echo "FAIL: segment left in /dev/shm"; f=1; fi
  wait_for -t 5 gpu_released "$victim" "$peer" ||
    { echo "FAIL: pid(s) $(gpu_holders "$victim" "$peer") still hold GPU memory"; f=1; }
  rm -f "$out"
  return $f
}

# The co-located path: a large all-reduce (every size without MPS).
mps_seen=0
for waits in ${KILL_WAITS:-host stream}; do
  for victim_rank in 1 0; do
    one_kill co-located "${KILL_BIG:-16M}" "$waits" "$victim_rank" || fail=1
  done
done
# The in-kernel path (forced): a small all-reduce under MPS, the host waiting for its stream after every
# call (the waits of the co-located protocol play no part: the first of KILL_WAITS).
if [ "$mps_seen" = 1 ]; then
  for victim_rank in 1 0; do
    one_kill in-kernel "${KILL_SMALL:-64K}" "$(echo ${KILL_WAITS:-host stream} | cut -d' ' -f1)" \
      "$victim_rank" -z 1 -a direct
    rc=$?
    [ "$rc" -eq 0 ] && continue
    [ "$rc" -eq 3 ] && echo "FAIL: the ranks are no longer under MPS"
    fail=1
  done
elif [ -n "${CUDA_MPS_PIPE_DIRECTORY:-}" ]; then
  echo "FAIL: CUDA_MPS_PIPE_DIRECTORY is set, but the runs' header does not say the ranks are under MPS: the in-kernel path was not tested"
  fail=1
else
  echo "note: not under MPS: ranks sharing a GPU take the co-located path at every size, so the in-kernel case is left out (run the test under an MPS daemon for it)"
fi
exit $fail
