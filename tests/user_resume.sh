#!/bin/sh
# Resuming as a user does (CPU ranks): a refused resume (other settings, a damaged file, a run
# shorter than the checkpoint) says so in one line from one process, exits 2 and changes nothing
# in --out; a resumed run continues its run's log.jsonl, so it holds every step of the run once
# and in order, also when the run had crashed past its last checkpoint; --epochs may
# grow on --resume: warm-up as before, cosine decay over the new length, the same learning rate
# at every step as a run planned that long from the start; tools/report warns about an empty or
# truncated log.
set -u
train=${top_builddir:-.}/shmddp-train
report=${srcdir:-.}/tools/report
. "${srcdir:-.}/tests/lib.sh"
F="--device cpu --nproc 2 --widths 4,8 --image-size 16 --train-size 48 --val-size 8 --batch-size 4 --workers 0 --warmup-steps 2 --progress lines"
# 48 samples / 2 ranks / batch 4: 6 steps per epoch
steps() { grep -o '"type": "step", "step": [0-9]*' "$1" | grep -o '[0-9]*$' | tr '\n' ' '; }
lrs() { grep '"type": "step"' "$1" | grep -o '"lr": [^,]*' | tail -n "$2" | tr '\n' ' '; }
snapshot() { (cd "$1" && for f in *; do printf '%s ' "$f"; cksum < "$f"; done); }

"$train" $F --epochs 1 --save-every 6 --out "$tmp/run" > "$tmp/a.log" 2>&1
check "first run: one epoch, a checkpoint" '[ -s "$tmp/run/checkpoint.ckpt" ] && [ "$(steps "$tmp/run/log.jsonl")" = "1 2 3 4 5 6 " ]'
before=$(snapshot "$tmp/run")

"$train" $F --epochs 2 --lr 0.2 --resume "$tmp/run/checkpoint.ckpt" --out "$tmp/run" > "$tmp/b.log" 2>&1
rc=$?
check "other settings: exit 2, one line naming the setting" '[ $rc -eq 2 ] && [ $(wc -l < "$tmp/b.log") -eq 1 ] && grep -q "the checkpoint has lr=0.3, this run lr=0.2" "$tmp/b.log"'
check "refused resume changed nothing in --out" '[ "$(snapshot "$tmp/run")" = "$before" ]'
cp "$tmp/run/checkpoint.ckpt" "$tmp/bad.ckpt"
printf 'XXXX' | dd of="$tmp/bad.ckpt" bs=1 seek=0 conv=notrunc 2>/dev/null
"$train" $F --epochs 2 --resume "$tmp/bad.ckpt" --out "$tmp/run" > "$tmp/c.log" 2>&1
rc=$?
check "damaged checkpoint: exit 2, one line" '[ $rc -eq 2 ] && [ $(wc -l < "$tmp/c.log") -eq 1 ] && grep -q "bad.ckpt" "$tmp/c.log"'
check "still nothing changed in --out" '[ "$(snapshot "$tmp/run")" = "$before" ]'
"$train" $F --epochs 1 --steps 4 --resume "$tmp/run/checkpoint.ckpt" --out "$tmp/run" > "$tmp/d.log" 2>&1
rc=$?
check "a shorter run than the checkpoint: refused, one line" '[ $rc -eq 2 ] && [ $(wc -l < "$tmp/d.log") -eq 1 ] && grep -q "past the 4 steps" "$tmp/d.log"'

# extend to 2 epochs in the same folder
"$train" $F --epochs 2 --save-every 6 --resume "$tmp/run/checkpoint.ckpt" --out "$tmp/run" > "$tmp/e.log" 2>&1
rc=$?
check "--epochs 2 on --resume accepted" '[ $rc -eq 0 ] && grep -q "^result: steps=12 " "$tmp/e.log"'
check "the log holds every step once, in order" '[ "$(steps "$tmp/run/log.jsonl")" = "1 2 3 4 5 6 7 8 9 10 11 12 " ]'
check "and a validation after each epoch, once" '[ "$(grep -o "\"type\": \"val\", \"step\": [0-9]*" "$tmp/run/log.jsonl" | grep -o "[0-9]*$" | tr "\n" " ")" = "6 12 " ]'
"$train" $F --epochs 2 --out "$tmp/long" > "$tmp/f.log" 2>&1
check "the schedule over the new length: the same learning rates as a 2-epoch run" '[ "$(lrs "$tmp/run/log.jsonl" 6)" = "$(lrs "$tmp/long/log.jsonl" 6)" ]'

# a crash after step 12 whose last checkpoint was at step 6: the folder holds the run's log up
# to 12 (and a line cut short) beside its step-6 checkpoint
"$train" $F --epochs 2 --stop-after 6 --out "$tmp/six" > /dev/null 2>&1
"$train" $F --epochs 2 --stop-after 6 --out "$tmp/crash" > /dev/null 2>&1
cp "$tmp/crash/checkpoint.ckpt" "$tmp/crash6.ckpt"
"$train" $F --epochs 2 --resume "$tmp/crash/checkpoint.ckpt" --out "$tmp/crash" > /dev/null 2>&1
cp "$tmp/crash6.ckpt" "$tmp/crash/checkpoint.ckpt"
printf '{"type": "step", "step": 13, "epo' >> "$tmp/crash/log.jsonl" # killed mid-write
head -n 7 "$tmp/crash/log.jsonl" > "$tmp/first6" # the run's line and steps 1-6
"$train" $F --epochs 2 --resume "$tmp/crash/checkpoint.ckpt" --out "$tmp/crash" > "$tmp/g.log" 2>&1
rc=$?
check "after a crash: every step once, in order" '[ $rc -eq 0 ] && [ "$(steps "$tmp/crash/log.jsonl")" = "1 2 3 4 5 6 7 8 9 10 11 12 " ]'
check "steps up to the checkpoint kept as they were written" '[ "$(head -n 7 "$tmp/crash/log.jsonl")" = "$(cat "$tmp/first6")" ]'
check "resumed into another folder: that log holds the whole run too" '"$train" $F --epochs 2 --resume "$tmp/six/checkpoint.ckpt" --out "$tmp/other" > /dev/null 2>&1 && [ "$(steps "$tmp/other/log.jsonl")" = "1 2 3 4 5 6 7 8 9 10 11 12 " ]'

if command -v python3 > /dev/null 2>&1; then
  python3 "$report" "$tmp/run" > "$tmp/r1.log" 2>&1
  check "report of a whole log: no warning" '! grep -q "warning" "$tmp/r1.log"'
  sed -i '2,4d' "$tmp/run/log.jsonl" # steps 1-3 (line 1 names the run)
  python3 "$report" "$tmp/run" > "$tmp/r2.log" 2>&1
  check "report warns about a truncated log" 'grep -q "warning: .*log.jsonl starts at step 4" "$tmp/r2.log"'
  : > "$tmp/run/log.jsonl"
  python3 "$report" "$tmp/run" > "$tmp/r3.log" 2>&1
  check "report warns about an empty log" 'grep -q "warning: .*log.jsonl is empty" "$tmp/r3.log"'
else
  echo "skip: tools/report checks (no python3)"
fi
exit $fail
