#!/bin/sh
# SIGKILL one rank of a long allreduce_bench run while the others wait for it inside an
# all-reduce: the run must end within 2 s, non-zero, with a message naming the rank, and leave
# nothing in /dev/shm.
#
# Event-driven: rank 1 is stopped (SIGSTOP) once all four ranks exist, so the all-reduce in
# flight cannot complete; once rank 0 is seen asleep in the segment's futex (inside that
# all-reduce, tests/wait_lib.sh), rank 1 is killed. The 2 s are measured from the kill: the
# launcher is woken by SIGCHLD at once and the waiting ranks leave within one 50 ms sleep, so
# load only adds scheduling delays of milliseconds; after 2 s the launcher kills what is left,
# which the message check below would also catch ("did not stop").
set -u
. "${srcdir:-.}/tests/wait_lib.sh"
bench=${top_builddir:-.}/tools/allreduce_bench
out=$(mktemp)
"$bench" --device cpu --nproc 4 -n 1000000 -b 1M -e 1M >"$out" 2>&1 &
launcher=$!
four_ranks() { [ "$(pgrep -P "$launcher" | wc -l)" -eq 4 ] || ! alive "$launcher"; }
wait_for four_ranks
ranks=$(pgrep -P "$launcher" | sort -n)
victim=$(echo "$ranks" | sed -n 2p)
peer=$(echo "$ranks" | sed -n 1p)
[ "$(echo "$ranks" | wc -w)" -eq 4 ] && [ -n "$victim" ] ||
  { echo "FAIL: ranks not found"; kill -9 "$launcher" 2>/dev/null; cat "$out"; exit 1; }
kill -STOP "$victim"
wait_in_shm_wait "$peer"
case $? in
  0) echo "rank 0 (pid $peer) waits inside the all-reduce for the stopped rank 1" ;;
  2) echo "note: /proc/$peer/syscall is not readable here: killing rank 1 without seeing rank 0 wait" ;;
  *) echo "FAIL: rank 0 was never seen waiting inside the all-reduce"; kill -9 "$launcher"; cat "$out"; exit 1 ;;
esac
t0=$(date +%s%N)
kill -9 "$victim"
wait "$launcher"
rc=$?
t1=$(date +%s%N)
ms=$(( (t1 - t0) / 1000000 ))
echo "exit status $rc after ${ms} ms"; cat "$out"
fail=0
[ "$rc" -ne 0 ] || { echo "FAIL: exit status 0"; fail=1; }
[ "$ms" -lt 2000 ] || { echo "FAIL: took ${ms} ms"; fail=1; }
grep -q "rank 1 (pid $victim) was killed by signal 9" "$out" || { echo "FAIL: rank not named"; fail=1; }
! grep -q "did not stop within" "$out" || { echo "FAIL: a rank had to be killed"; fail=1; }
if ls /dev/shm | grep -q "^shmddp-$launcher-"; then echo "FAIL: segment left in /dev/shm"; fail=1; fi
rm -f "$out"
exit $fail
