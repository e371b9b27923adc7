#!/bin/sh
# --max-restarts N (CPU ranks): when a rank dies, every rank starts again from the last
# checkpoint, at most N times.
#  1. rank 1 SIGKILLed mid-run (once rank 0 has printed step 5, after the checkpoint of step
#     4): every rank starts again from a checkpoint, the run finishes,
#     and its final checkpoint holds the same training state, bit for bit, as an uninterrupted
#     run's; log.jsonl holds every step once, in order, and the restart; summary.json lists it.
#  2. without --save-every a checkpoint is written at every epoch's end: killed once the first
#     validation is printed, the run restarts from an epoch's end, not from the start.
#  3. a rank that dies at once on every start (killed as soon as it exists): the run stops after
#     N restarts, non-zero, saying so; each restart is in log.jsonl.
#  4. --max-restarts where it cannot work is refused before anything starts.
# Every run leaves nothing in /dev/shm. Kills are placed by events (a line printed, a rank
# forked: tests/fault_lib.sh), never by time.
set -u
. "${srcdir:-.}/tests/fault_lib.sh"
look=${top_builddir:-.}/tests/ckpt_look
# 64 samples / 2 ranks / batch 4: 8 steps per epoch; 48 steps, so a kill at step 5 lands mid-run
F="$SHORT --image-size 16 --nproc 2 --workers 0 --steps 48 --epochs 1000 --progress lines"
steps() { grep -o '"type": "step", "step": [0-9]*' "$1" | grep -o '[0-9]*$' | tr '\n' ' '; }
all_steps=$(seq 1 48 | tr '\n' ' ')
restart_steps() { grep -o '"type": "restart", "step": [0-9]*' "$1" | grep -o '[0-9]*$' | tr '\n' ' '; }

"$train" $F --out "$tmp/ref" > "$tmp/ref.log" 2>&1 || { tail -3 "$tmp/ref.log"; bad "the uninterrupted run failed"; exit 1; }

echo "== 1. a rank killed mid-run"
start "$tmp/one.log" $F --save-every 4 --max-restarts 2 --out "$tmp/one"
pids=$(ranks 2) || { bad "the ranks did not start"; kill -9 $launcher; exit 1; }
victim=$(echo $pids | cut -d' ' -f2)
wait_step "$tmp/one.log" 5 $launcher || bad "the run never printed step 5"
kill -9 "$victim"
wait $launcher
rc=$?
[ $rc -eq 0 ] && ok "the run finished (exit 0)" || { bad "exit status $rc"; tail -5 "$tmp/one.log"; }
grep -q "rank 1 (pid $victim) was killed by signal 9" "$tmp/one.log" && ok "the dead rank is named" ||
  bad "the dead rank is not named"
grep -q "^train: restarting every rank from the checkpoint at step [1-9][0-9]* (restart 1 of 2)" "$tmp/one.log" &&
  ok "the restart is said: $(grep "^train: restarting" "$tmp/one.log")" || bad "no restart said"
"$look" "$tmp/ref/checkpoint.ckpt" "$tmp/one/checkpoint.ckpt" &&
  ok "the final checkpoint is bit for bit the uninterrupted run's" ||
  bad "the final checkpoint differs from the uninterrupted run's"
[ "$(steps "$tmp/one/log.jsonl")" = "$all_steps" ] && ok "log.jsonl: every step once, in order" ||
  bad "log.jsonl steps: $(steps "$tmp/one/log.jsonl")"
at=$(restart_steps "$tmp/one/log.jsonl")
[ "$(echo $at | wc -w)" -eq 1 ] && [ "$at" -ge 4 ] && grep -q '"type": "restart", .*"restart": 1, "reason": "rank 1 (pid '"$victim"') was killed by signal 9' "$tmp/one/log.jsonl" &&
  ok "log.jsonl records the restart (from step $at) and why" || bad "log.jsonl restarts: '$at'"
python3 -c "
import json, sys
s = json.load(open('$tmp/one/summary.json'))
sys.exit(not (len(s['restarts']) == 1 and s['restarts'][0]['step'] == $at and
              'killed by signal 9' in s['restarts'][0]['reason']))" 2>/dev/null &&
  ok "summary.json lists the restart" || bad "summary.json restarts"
no_segment $launcher && ok "nothing left in /dev/shm" || bad "a segment left in /dev/shm"

echo "== 2. without --save-every: a checkpoint at every epoch's end"
start "$tmp/two.log" $F --max-restarts 1 --out "$tmp/two"
pids=$(ranks 2) || { bad "the ranks did not start"; kill -9 $launcher; exit 1; }
victim=$(echo $pids | cut -d' ' -f2)
wait_line "$tmp/two.log" "^validation after epoch 1 " $launcher || bad "no validation printed"
kill -9 "$victim"
wait $launcher
rc=$?
at=$(restart_steps "$tmp/two/log.jsonl")
[ $rc -eq 0 ] && [ -n "$at" ] && [ "$at" -gt 0 ] && [ $((at % 8)) -eq 0 ] &&
  ok "restarted from the end of an epoch (step $at)" || bad "exit $rc, restarted from step '$at'"
"$look" "$tmp/ref/checkpoint.ckpt" "$tmp/two/checkpoint.ckpt" &&
  ok "and finished as the uninterrupted run" || bad "the final checkpoint differs"
no_segment $launcher && ok "nothing left in /dev/shm" || bad "a segment left in /dev/shm"

echo "== 3. a rank that dies at once on every start"
seen=""
# two ranks of a start this test has not seen yet (or the launcher has ended)
_new_ranks() {
  fresh=""
  for p in $(pgrep -P "$launcher"); do
    case " $seen " in *" $p "*) ;; *) alive "$p" && fresh="$fresh $p" ;; esac
  done
  [ "$(echo $fresh | wc -w)" -ge 2 ] || ! alive "$launcher"
}
start "$tmp/three.log" $F --save-every 4 --max-restarts 2 --out "$tmp/three"
kills=0
while wait_for _new_ranks && alive "$launcher"; do
  victim=$(echo $fresh | tr ' ' '\n' | sort -n | tail -n 1)
  kill -9 "$victim"
  seen="$seen $fresh"
  kills=$((kills + 1))
  [ $kills -le 3 ] || break
done
wait $launcher
rc=$?
[ $rc -ne 0 ] && [ $kills -eq 3 ] && ok "stopped after 2 restarts, exit $rc" ||
  bad "exit $rc after $kills starts"
grep -q "^train: no restart left: the run failed after 2 restarts (--max-restarts 2); the last: rank 1 (pid [0-9]*) was killed by signal 9" "$tmp/three.log" &&
  ok "and says why: $(grep "^train: no restart left" "$tmp/three.log")" || { bad "no clear message"; tail -4 "$tmp/three.log"; }
[ "$(grep -c "^train: restarting every rank" "$tmp/three.log")" -eq 2 ] &&
  [ "$(grep -c '"type": "restart"' "$tmp/three/log.jsonl")" -eq 2 ] &&
  ok "both restarts said and in log.jsonl" || bad "restarts: $(grep -c '"type": "restart"' "$tmp/three/log.jsonl" 2>/dev/null) in log.jsonl"
no_segment $launcher && ok "nothing left in /dev/shm" || bad "a segment left in /dev/shm"

echo "== 4. refused before anything starts"
"$train" $F --max-restarts 1 --save-every 0 --out "$tmp/r1" > "$tmp/r1.log" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q -- "--max-restarts: a restart starts from the last checkpoint" "$tmp/r1.log" && [ ! -e "$tmp/r1" ] &&
  ok "with --save-every 0" || bad "--save-every 0: exit $rc"
"$train" $F --max-restarts 1 --mode dp --out "$tmp/r2" > "$tmp/r2.log" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q -- "--max-restarts) and --timeline belong to --mode ddp" "$tmp/r2.log" &&
  ok "in --mode dp" || bad "--mode dp: exit $rc"

[ "$fails" -eq 0 ] || { echo "restart: $fails failure(s)"; exit 1; }
echo "restart: all passed"
