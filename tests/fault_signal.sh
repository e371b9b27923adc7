#!/bin/sh
# Stops as supervisors send them. GNU `timeout -s TERM` signals the launcher and then its whole
# process group (two SIGTERMs; systemd and Slurm repeat theirs too): the run must stop at a step
# boundary, write its checkpoint and end with status 143, the repeat absorbed; the checkpoint
# resumes. (A SIGSTOPped rank named by the collective timeout: tests/fault_env.sh.)
set -u
. "${srcdir:-.}/tests/fault_lib.sh"
command -v timeout >/dev/null 2>&1 || { echo "SKIP: no timeout(1) here"; exit 77; }
np=2 # on GPUs: as many as there are, at most 2
[ "$FAULT_DEVICE" = cpu ] || { np=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU'); [ "$np" -gt 2 ] && np=2; }
[ "${np:-0}" -ge 1 ] || { echo "SKIP: no GPU"; exit 77; }
F="$SHORT --nproc $np --workers 0 --steps 100000 --epochs 100000"
out=$tmp/run
# timeout runs the job (as a service manager would); the test signals timeout, which passes the
# signal on exactly as it does when its time runs out (to its child, then to its group).
timeout -s TERM 600 "$train" $F --out "$out" > "$tmp/log" 2>&1 &
tpid=$!
wait_step "$tmp/log" 3 "$tpid" || { bad "the run printed no step 3"; cat "$tmp/log"; exit 1; }
kill -TERM "$tpid"
# Once the launcher has taken the first, repeat it (as systemd or a second Ctrl-C would), if the
# run is still stopping; the unit test repeated_sigterm_is_absorbed (check_shm) does it always.
wait_line "$tmp/log" "received Terminated; asking the ranks to stop" "$tpid" && kill -TERM "$tpid" 2>/dev/null
wait "$tpid"; rc=$?
f=$fails
[ "$rc" -eq 143 ] || bad "exit status $rc, not 143"
grep -q "stopped after step" "$tmp/log" || bad "the run did not stop at a step boundary"
! grep -q "killing it\|was killed by signal 9" "$tmp/log" || bad "a rank was killed"
[ -f "$out/checkpoint.ckpt" ] || bad "no checkpoint was written"
grep -q "received Terminated again; still stopping" "$tmp/log" &&
  again="the launcher got the repeat and absorbed it" || again="no repeat reached the launcher"
at=$(sed -n 's/.*stopped after step \([0-9]*\).*/\1/p' "$tmp/log" | head -1)
[ $f -eq $fails ] && ok "timeout -s TERM: stopped after step $at with a checkpoint, exit 143 ($again)"
[ $f -eq $fails ] || tail -5 "$tmp/log"
if [ -f "$out/checkpoint.ckpt" ] && [ -n "$at" ]; then
  "$train" $F --resume "$out/checkpoint.ckpt" --stop-after $((at + 1)) --out "$out" \
    > "$tmp/resume.log" 2>&1 || bad "the checkpoint did not resume ($(tail -1 "$tmp/resume.log"))"
  grep -q "resumed from .* at step $at" "$tmp/resume.log" && ok "the checkpoint resumes at step $at" ||
    bad "the resumed run does not say it resumed at step $at"
fi
[ "$fails" -eq 0 ]
