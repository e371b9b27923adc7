#!/bin/sh
# Checkpoints across the padded parameter layout (CPU ranks). The flat parameter buffers start
# every tensor 16-byte aligned, with zero padding between tensors; checkpoints keep the
# parameters and the optimizer state packed, as they were laid out before the padding. The
# fixture tests/data/prepad_step6.ckpt.b64 (base64, so that it travels in text patches) was
# written by the trainer of that earlier layout (the settings F below, stopped after step 6),
# and tests/data/prepad_result.txt holds the losses
# that trainer reported for the straight 12-step run. Widths 4,6,10 and 3 classes leave padding
# between tensors in today's layout. Checked:
#  - a straight run today reports the same losses as the earlier trainer (training unchanged);
#  - resuming the earlier trainer's checkpoint gives today's straight run bit for bit (the same
#    final checkpoint: weights, momentum, statistics, position);
#  - today's checkpoint at step 6 holds the earlier trainer's tensors byte for byte (the format
#    did not change; it grew by the run record alone, ckpt_run.h), and resuming it gives the
#    straight run too (round trip).
# Checkpoints are compared by tests/ckpt_look: the same settings and tensors, run ids aside.
set -u
srcdir=${srcdir:-.}
train=${top_builddir:-.}/shmddp-train
look=${top_builddir:-.}/tests/ckpt_look
. "${srcdir:-.}/tests/lib.sh"
F="--device cpu --nproc 2 --widths 4,6,10 --classes 3 --image-size 16 --steps 12 --train-size 32 --val-size 8 --batch-size 2 --epochs 2 --workers 0"
old="$tmp/prepad_step6.ckpt"
base64 -d < "$srcdir/tests/data/prepad_step6.ckpt.b64" > "$old" || { echo "FAIL: decoding the fixture"; exit 1; }
losses() { grep -o "train_loss=[^ ]* val_loss=[^ ]*" "$1"; }

"$train" $F --save-every 12 --out "$tmp/straight" > "$tmp/straight.log" 2>&1
check "straight run" '[ -s "$tmp/straight/checkpoint.ckpt" ]'
check "the same losses as the trainer before the padded layout" \
  '[ "$(losses "$tmp/straight.log")" = "$(cat "$srcdir/tests/data/prepad_result.txt")" ]'

"$train" $F --save-every 12 --resume "$old" --out "$tmp/from_old" > "$tmp/from_old.log" 2>&1
check "a checkpoint of the earlier layout resumes" 'grep -q "^result: steps=12" "$tmp/from_old.log"'
check "and continues bit for bit" '"$look" "$tmp/straight/checkpoint.ckpt" "$tmp/from_old/checkpoint.ckpt"'
check "with the same losses" '[ "$(losses "$tmp/straight.log")" = "$(losses "$tmp/from_old.log")" ]'

"$train" $F --stop-after 6 --out "$tmp/part" > "$tmp/part.log" 2>&1
check "today's checkpoint holds the earlier one's tensors byte for byte" '"$look" "$old" "$tmp/part/checkpoint.ckpt"'
check "and the run record besides (the earlier one has none)" '"$look" "$old" | grep -q " run=- classes=0 " && "$look" "$tmp/part/checkpoint.ckpt" | grep -q " run=[0-9a-f]\{32\} classes=3 values=0,1,2$"'
"$train" $F --save-every 12 --resume "$tmp/part/checkpoint.ckpt" --out "$tmp/again" > "$tmp/again.log" 2>&1
check "today's checkpoint round-trips bit for bit" '"$look" "$tmp/straight/checkpoint.ckpt" "$tmp/again/checkpoint.ckpt"'
if [ $fail -ne 0 ]; then
  for f in straight from_old part again; do echo "--- $f"; tail -3 "$tmp/$f.log"; done
fi
exit $fail
