#!/bin/sh
# Checkpoints in training (CPU ranks): stopping and resuming gives bit-identical results; SIGINT
# stops at a step boundary with a checkpoint and exit status 130; a SIGINT that the run inherited
# as ignored (a script's background job) stays ignored, and SIGTERM stops such a run (143); a
# checkpoint of other settings or a damaged one is refused with a message, and the previous one
# stays usable. Signals are sent once the run has printed a step (an event, not a delay).
set -u
. "${srcdir:-.}/tests/wait_lib.sh"
train=${top_builddir:-.}/shmddp-train
look=${top_builddir:-.}/tests/ckpt_look # the same training state, run ids aside
. "${srcdir:-.}/tests/lib.sh"
F="--device cpu --nproc 2 --widths tiny --image-size 32 --steps 24 --train-size 64 --val-size 8 --batch-size 4 --epochs 4 --workers 0"

"$train" $F --save-every 24 --out "$tmp/straight" > "$tmp/straight.log" 2>&1
check "straight run" '[ -s "$tmp/straight/checkpoint.ckpt" ]'
# stop mid-epoch (step 9), resume, continue to 24
"$train" $F --stop-after 9 --out "$tmp/part" > "$tmp/part.log" 2>&1
check "stopped run wrote a checkpoint" '[ -s "$tmp/part/checkpoint.ckpt" ]'
"$train" $F --save-every 24 --resume "$tmp/part/checkpoint.ckpt" --out "$tmp/resumed" > "$tmp/resumed.log" 2>&1
check "resumed run finished" 'grep -q "^result: steps=24" "$tmp/resumed.log"'
check "resume is bit-identical (weights, optimizer, scaler, position)" '"$look" "$tmp/straight/checkpoint.ckpt" "$tmp/resumed/checkpoint.ckpt"'
check "same reported losses" '[ "$(grep -o "train_loss=[^ ]* val_loss=[^ ]*" "$tmp/straight.log")" = "$(grep -o "train_loss=[^ ]* val_loss=[^ ]*" "$tmp/resumed.log")" ]'

# other settings are refused, naming the difference
"$train" $F --lr 0.01 --resume "$tmp/part/checkpoint.ckpt" --out "$tmp/other" > "$tmp/other.log" 2>&1
rc=$?
check "other settings refused" '[ $rc -ne 0 ] && grep -q "lr=" "$tmp/other.log"'

# a damaged checkpoint is refused; the file it came from is untouched
cp "$tmp/part/checkpoint.ckpt" "$tmp/bad.ckpt"
printf 'garbage' | dd of="$tmp/bad.ckpt" bs=1 seek=200 conv=notrunc 2>/dev/null
"$train" $F --resume "$tmp/bad.ckpt" --out "$tmp/bad" > "$tmp/bad.log" 2>&1
rc=$?
check "damaged checkpoint refused with a message" '[ $rc -ne 0 ] && grep -q "not usable" "$tmp/bad.log"'

L="--steps 100000 --epochs 100000 --train-size 256 --log-every 1"
# SIGINT: stop at a step boundary, checkpoint, exit 130. A background job of this script starts
# with SIGINT ignored, which train honours; env --default-signal=INT (coreutils 8.31+) starts it
# with SIGINT's default instead, as a job of an interactive shell or a terminal's Ctrl-C has it.
if env --default-signal=INT true 2>/dev/null; then
  env --default-signal=INT "$train" $F $L --out "$tmp/int" > "$tmp/int.log" 2>&1 &
  pid=$!
  check "the run prints step 2" 'wait_step "$tmp/int.log" 2 $pid'
  kill -INT $pid
  wait $pid
  rc=$?
  check "SIGINT exits 130" '[ $rc -eq 130 ]'
  check "SIGINT wrote a checkpoint that loads" '[ -s "$tmp/int/checkpoint.ckpt" ] && grep -q "stopped after step" "$tmp/int.log"'
  check "nothing left in /dev/shm" '! ls /dev/shm | grep -q "^shmddp-$pid-"'
else
  echo "skip: SIGINT with its default disposition (this env has no --default-signal)"
fi

# SIGINT inherited as ignored: the run goes on (it prints 3 more steps after the signal and does
# not report it); SIGTERM then stops it at a step boundary with a checkpoint, exit 143.
"$train" $F $L --out "$tmp/ign" > "$tmp/ign.log" 2>&1 &
pid=$!
check "the run prints step 2" 'wait_step "$tmp/ign.log" 2 $pid'
kill -INT $pid
n=$(grep -c "^epoch .* step " "$tmp/ign.log")
check "an ignored SIGINT does not stop the run" 'wait_step "$tmp/ign.log" $((n + 3)) $pid && ! grep -q "received Interrupt" "$tmp/ign.log"'
check "the run says SIGINT stays ignored" 'grep -q "SIGINT was ignored when this started" "$tmp/ign.log"'
kill -TERM $pid
wait $pid
rc=$?
check "SIGTERM exits 143" '[ $rc -eq 143 ]'
check "SIGTERM wrote a checkpoint" '[ -s "$tmp/ign/checkpoint.ckpt" ] && grep -q "stopped after step" "$tmp/ign.log"'
check "nothing left in /dev/shm" '! ls /dev/shm | grep -q "^shmddp-$pid-"'
[ $fail -eq 0 ] || tail_logs 5
exit $fail
