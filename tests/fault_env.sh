#!/bin/sh
# Faults of the environment, on CPU ranks: a rank that stalls (SIGSTOP) is named by the
# collective timeout (--timeout) and the run ends; /dev/shm too small is a clear error before
# any rank is forked (huge SHMDDP_SLOT_MB, and a 1 MiB tmpfs on /dev/shm where root may mount
# one); a stale /dev/shm/shmddp-* file does not confuse a new run; the segment is 0600 and its
# name is gone before the ranks run, so another uid cannot attach (tested as uid nobody where
# this runs as root with setpriv and strace; skipped with a message otherwise).
set -u
. "${srcdir:-.}/tests/fault_lib.sh"
echo "fault_env: FAULT_SEED=$FAULT_SEED"
# Names no other run of this test uses: concurrent runs on one machine share /dev/shm, and a fixed
# name would let one run's stale file be rewritten or removed by another's.
stale1=/dev/shm/shmddp-1-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
stale2=/dev/shm/shmddp-$$-ffffffffffffffff
trap 'rm -rf "$tmp"; rm -f "$stale1" "$stale2"' EXIT
RUN="$SHORT --nproc 2 --workers 0 --steps 100000 --epochs 100000"

# --- a stalled rank: the collective timeout names it, the run ends -------------------------
for trial in 1 2; do
  start "$tmp/stall.log" $RUN --timeout 1 --out "$tmp/stall$trial"
  pids=$(ranks 2) || { bad "stall: ranks did not start"; kill -9 $launcher; continue; }
  r=$((trial - 1)) # rank 0, then rank 1
  rand 4; k=$((R + 1)) # stall after a random step (an event: rank 0 printed it)
  wait_step "$tmp/stall.log" $k "$launcher" || { bad "stall $trial: step $k never came"; kill -9 $launcher; continue; }
  t0=$(now_ms)
  kill -STOP "$(echo $pids | cut -d' ' -f$((r + 1)))"
  wait "$launcher"; rc=$?
  ms=$(($(now_ms) - t0))
  # The run ends because the other rank's wait times out (1 s after it began waiting, at most
  # one step after the stop) and the launcher then kills the stopped rank after its 2 s grace,
  # which it says. The bound allows that 3 s and 2 s more for the step in progress and for
  # scheduling on a loaded machine; without the timeout the run would wait 300 s.
  f=$fails
  [ "$rc" -ne 0 ] || bad "stall $trial: exit status 0"
  [ "$ms" -lt 5000 ] || bad "stall $trial: the run took $ms ms to end (--timeout 1)"
  grep -q "timed out after 1 s: rank $((1 - r)) waited in .* for rank(s) $r, which did not arrive" \
    "$tmp/stall.log" || bad "stall $trial: the timeout does not name rank $r"
  grep -q "rank $r did not stop within 2.0 s; killing it" "$tmp/stall.log" ||
    bad "stall $trial: the launcher did not kill the stopped rank $r after its grace"
  gone $pids || bad "stall $trial: a rank is still there"
  no_segment "$launcher" || bad "stall $trial: a segment is left in /dev/shm"
  [ $f -eq $fails ] && ok "stall $trial: rank $r stopped; named by the timeout, run ended after $ms ms (exit $rc)"
  [ $f -eq $fails ] || tail -4 "$tmp/stall.log"
done

# --- /dev/shm too small: refused before any rank is forked ---------------------------------
tracer=""
command -v strace >/dev/null 2>&1 && strace -o /dev/null true 2>/dev/null && tracer=strace
shm_small() { # LABEL [ns] [ENV=VALUE]: the run must fail with the /dev/shm message, forking nothing
  label=$1; ns=$2; shift 2
  set -- env "$@"
  [ -n "$tracer" ] && set -- "$@" strace -f -qq -e trace=clone,clone3,fork,vfork -o "$tmp/trace"
  rm -f "$tmp/trace"
  if [ "$ns" = ns ]; then
    # A private mount namespace with a 1 MiB /dev/shm; the strace (if any) runs after the mount,
    # so only train is traced.
    unshare -m sh -c 'mount -t tmpfs -o size=1m tmpfs /dev/shm && exec "$@"' sh \
      "$@" "$train" $RUN --out "$tmp/small" > "$tmp/small.log" 2>&1
  else
    "$@" "$train" $RUN --out "$tmp/small" > "$tmp/small.log" 2>&1
  fi
  rc=$?
  f=$fails
  [ "$rc" -ne 0 ] || bad "$label: exit status 0"
  grep -q "/dev/shm has .* MiB free but 2 ranks need .*--shm-size" "$tmp/small.log" ||
    bad "$label: no clear /dev/shm message"
  if [ -n "$tracer" ]; then
    [ -f "$tmp/trace" ] && ! grep -Eq "clone|fork" "$tmp/trace" ||
      bad "$label: a process was forked before the error"
  fi
  ! grep -q "^epoch\|step " "$tmp/small.log" || bad "$label: training started"
  [ $f -eq $fails ] && ok "$label: refused before forking (${tracer:-no strace: forks not traced})"
  [ $f -eq $fails ] || cat "$tmp/small.log"
}
shm_small "SHMDDP_SLOT_MB=65536 (the largest)" - SHMDDP_SLOT_MB=65536
if [ "$(id -u)" -eq 0 ] && unshare -m sh -c 'mount -t tmpfs -o size=1m tmpfs /dev/shm' 2>/dev/null; then
  shm_small "1 MiB tmpfs on /dev/shm" ns
else
  echo "skip: 1 MiB tmpfs on /dev/shm (needs root and a private mount namespace)"
fi

# --- stale segments of crashed runs do not confuse a new run ---------------------------------
head -c 65536 /dev/urandom > "$stale1"
head -c 4096 /dev/urandom > "$stale2"
chmod 600 "$stale1" "$stale2"
cp "$stale1" "$tmp/stale1.copy"
"$train" $SHORT --nproc 2 --workers 0 --steps 4 --out "$tmp/stale" > "$tmp/stale.log" 2>&1
rc=$?
f=$fails
[ "$rc" -eq 0 ] || bad "stale segment: the run failed (exit $rc)"
grep -q "^result: steps=4" "$tmp/stale.log" || bad "stale segment: no result line"
cmp -s "$stale1" "$tmp/stale1.copy" || bad "stale segment: another run's file was changed"
[ $f -eq $fails ] && ok "stale /dev/shm/shmddp-* files: the run trains and leaves them alone"
[ $f -eq $fails ] || tail -3 "$tmp/stale.log"

# --- another uid cannot attach ------------------------------------------------------------
# The name exists only between shm_open and shm_unlink in the launcher; strace holds that
# window open (every unlink is delayed 3 s) while uid nobody tries to open the segment.
if [ "$(id -u)" -ne 0 ] || [ -z "$tracer" ] || ! command -v setpriv >/dev/null 2>&1; then
  echo "skip: another uid attaching (needs root, strace and setpriv)"
else
  strace -qq -o /dev/null -e trace=unlink -e inject=unlink:delay_enter=3000000 \
    "$train" $SHORT --nproc 2 --workers 0 --steps 4 --out "$tmp/uid" > "$tmp/uid.log" 2>&1 &
  tracer_pid=$!
  seg=""
  # Polled until the name shows or the run has ended (the 3 s window opens whenever start-up
  # gets there, however slow; a poll takes milliseconds).
  seen_or_ended() {
    child=$(pgrep -P $tracer_pid | head -1)
    [ -n "$child" ] && seg=$(ls /dev/shm 2>/dev/null | grep "^shmddp-$child-" | head -1)
    [ -n "$seg" ] || ! alive $tracer_pid
  }
  wait_for seen_or_ended
  f=$fails
  if [ -z "$seg" ]; then
    bad "other uid: the segment of launcher ${child:-?} was not seen in /dev/shm"
  else
    mode=$(stat -c %a "/dev/shm/$seg")
    [ "$mode" = 600 ] || bad "other uid: /dev/shm/$seg has mode $mode, not 600"
    echo "$seg" | grep -Eq "^shmddp-$child-[0-9a-f]{16}$" || bad "other uid: $seg is not an unpredictable name"
    if setpriv --reuid=65534 --regid=65534 --clear-groups cat "/dev/shm/$seg" > /dev/null 2>"$tmp/uid.err"; then
      bad "other uid: uid 65534 could read /dev/shm/$seg"
    fi
    grep -q "Permission denied" "$tmp/uid.err" || bad "other uid: unexpected error: $(cat "$tmp/uid.err")"
    if setpriv --reuid=65534 --regid=65534 --clear-groups sh -c "echo x >> /dev/shm/$seg" 2>/dev/null; then
      bad "other uid: uid 65534 could write /dev/shm/$seg"
    fi
  fi
  wait $tracer_pid; rc=$?
  [ "$rc" -eq 0 ] || bad "other uid: the traced run failed (exit $rc)"
  no_segment "${child:-none}" || bad "other uid: a segment is left in /dev/shm"
  [ $f -eq $fails ] && ok "other uid: $seg is 0600, uid 65534 gets Permission denied, the name is gone after start"
  [ $f -eq $fails ] || tail -3 "$tmp/uid.log"
fi
[ $fails -eq 0 ]
