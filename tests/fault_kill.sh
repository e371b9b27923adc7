#!/bin/sh
# SIGKILL of a random rank at a random point of a short CPU training run, FAULT_TRIALS times
# (default 50): at a random moment (forward, backward, a bucket's all-reduce, validation),
# inside a collective (the victim waits in one for a stopped peer), right after the fork, and
# the launcher itself (its ranks die with it: PR_SET_PDEATHSIG). Every rank must exit within
# 2 s, the run non-zero with a message naming the rank (and pid) that died, and nothing may be
# left in /dev/shm.
#
# Moments are events, not delays (tests/fault_lib.sh): "a random moment" is right after rank 0
# printed a random step (1-20; an epoch is 8 steps, so validation is among them), "inside a
# collective" is once the victim is seen asleep in the segment's futex while its peer is stopped.
# The 2 s are measured from the kill; the survivors leave by themselves (the launcher's own
# 2 s grace kill would print "did not stop within", which fails the trial too).
set -u
. "${srcdir:-.}/tests/fault_lib.sh"
trials=${FAULT_TRIALS:-50}
echo "fault_kill: $trials trials, FAULT_SEED=$FAULT_SEED"
survived=0
for t in $(seq "$trials"); do
  rand 4; nproc=$((2 + R / 3)) # 2 ranks, or 3 one time in four
  [ $nproc -le "$FAULT_NPROC_MAX" ] || nproc=$FAULT_NPROC_MAX
  rand 2; workers=$R
  rand 10; mode=$R             # 0-4 random moment, 5-7 inside a collective, 8 at fork, 9 launcher
  start "$tmp/log" $SHORT --nproc $nproc --workers $workers --steps 100000 --epochs 100000 \
    --out "$tmp/out$t" # a folder per trial: one holding another run is refused
  pids=$(ranks $nproc) || { bad "trial $t: $nproc ranks did not start"; cat "$tmp/log"; kill -9 $launcher; continue; }
  rand $nproc; vi=$((R + 1))
  victim=$(echo $pids | cut -d' ' -f$vi)
  case $mode in
    [0-4]) rand 20; k=$((R + 1)); what="after step $k"
      wait_step "$tmp/log" $k "$launcher" || { bad "trial $t: step $k never came"; tail -3 "$tmp/log"; kill -9 $launcher; continue; } ;;
    [5-7]) # the victim waits inside a collective for a stopped peer when it dies
      rand 10; k=$((R + 1)); what="inside a collective (after step $k)"
      peer=$(echo $pids | cut -d' ' -f$((vi % nproc + 1)))
      wait_step "$tmp/log" $k "$launcher" || { bad "trial $t: step $k never came"; tail -3 "$tmp/log"; kill -9 $launcher; continue; }
      kill -STOP "$peer"
      in_collective "$victim" || { bad "trial $t: the victim was never seen waiting in a collective"; kill -9 $launcher; continue; } ;;
    8) what="right after the fork" ;;
    9) what="(the launcher)"; victim=$launcher ;;
  esac
  # The name was unlinked before the fork: nothing to attach to while the ranks run.
  no_segment "$launcher" || bad "trial $t: the segment's name is still in /dev/shm during the run"
  t0=$(now_ms)
  kill -9 "$victim"
  [ "$mode" -ge 5 ] && [ "$mode" -le 7 ] && kill -CONT "$peer"
  if [ "$mode" -eq 9 ]; then
    { wait "$launcher"; } 2>/dev/null; rc=$?
    wait_for gone $pids
  else
    wait "$launcher"; rc=$?
  fi
  ms=$(($(now_ms) - t0))
  name="trial $t ($nproc ranks, workers $workers, kill $what, pid $victim)"
  f=$fails
  gone $pids || bad "$name: a rank is still running"
  [ "$ms" -lt 2000 ] || bad "$name: the run took $ms ms to end"
  [ "$rc" -ne 0 ] || bad "$name: exit status 0"
  if [ "$mode" -ne 9 ]; then
    grep -Eq "rank [0-9] \(pid $victim\) was killed by signal 9" "$tmp/log" ||
      bad "$name: the message does not name the rank"
    ! grep -q "did not stop within" "$tmp/log" || bad "$name: a rank had to be killed"
  fi
  no_segment "$launcher" || bad "$name: a segment is left in /dev/shm"
  if [ $f -eq $fails ]; then survived=$((survived + 1)); else tail -5 "$tmp/log"; fi
  echo "trial $t: $what, $nproc ranks, exit $rc after $ms ms"
done
echo "fault_kill: $survived of $trials faults survived (FAULT_SEED=$FAULT_SEED)"
[ $fails -eq 0 ]
