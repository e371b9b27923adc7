#!/bin/sh
# Files a run trusts or leaves: crafted checkpoints (valid CRCs, so only the loader's own checks
# stand between them and memory) are refused before training starts, naming the tensor or the
# value, and the good checkpoint beside them is untouched; what a run writes into --out
# (checkpoint, log, summary) is mode 0600; a symlink planted where the old writer put its
# temporary file ("<path>.tmp.<pid>") is not followed.
set -u
. "${srcdir:-.}/tests/fault_lib.sh"
craft=${top_builddir:-.}/tests/ckpt_craft
F="$SHORT --nproc 2 --workers 0 --steps 3 --epochs 1000 --save-every 1"

"$train" $F --out "$tmp/good" > "$tmp/good.log" 2>&1 || { cat "$tmp/good.log"; bad "the reference run failed"; exit 1; }
good=$tmp/good/checkpoint.ckpt
cp "$good" "$tmp/good.copy"

# --- modes of what a run writes --------------------------------------------------------------
for f in checkpoint.ckpt log.jsonl summary.json; do
  if [ -f "$tmp/good/$f" ]; then
    mode=$(stat -c %a "$tmp/good/$f")
    [ "$mode" = 600 ] && ok "$f is mode 600" || bad "$f is mode $mode, not 600"
  else
    bad "the run wrote no $f"
  fi
done
ls "$tmp/good" | grep -q '\.tmp\.' && bad "a temporary file was left in --out"

# --- crafted checkpoints --------------------------------------------------------------------
# kind: the words the refusal must contain
for case in "buffers-u8:tensor 'buffers' holds" "optimizer-u8:tensor 'optimizer' holds" \
            "params-f64:tensor 'params' holds" "params-short:tensor 'params' holds" \
            "state-nan-step:step is nan" "state-huge-step:step is 1e+30" \
            "state-negative-epoch:epoch is -3" "state-fractional-taken:batches taken is 2.5" \
            "state-zero-scale:loss scale is 0"; do
  kind=${case%%:*}; want=${case#*:}
  out=$tmp/$kind
  mkdir -p "$out"
  "$craft" "$good" "$out/crafted.ckpt" "$kind" || { bad "$kind: could not craft"; continue; }
  "$train" $F --resume "$out/crafted.ckpt" --out "$out" > "$out/log" 2>&1
  rc=$?
  f=$fails
  [ "$rc" -ne 0 ] || bad "$kind: the run accepted it (exit 0)"
  grep -qF -- "$want" "$out/log" || bad "$kind: the refusal does not say \"$want\""
  ! grep -q "^step \|resumed from" "$out/log" || bad "$kind: training started"
  [ $f -eq $fails ] && ok "$kind: refused before training ($(grep -o "checkpoint[^;]*$want[^:]*" "$out/log" | head -1))"
  [ $f -eq $fails ] || tail -3 "$out/log"
done
cmp -s "$good" "$tmp/good.copy" || bad "the good checkpoint changed"

# --- a planted symlink at the old temporary name ---------------------------------------------
# The attack: in a shared --out, another user links <checkpoint>.tmp.<pid> to a file of the
# victim's; the old writer opened that name with O_TRUNC and wrote through the link. The pids a
# run may get are unknown, so plant links for a window of the next ones.
out=$tmp/planted
mkdir -p "$out"
echo "precious" > "$tmp/precious"
next=$(sh -c 'echo $$')
i=0
while [ $i -lt 400 ]; do
  ln -s "$tmp/precious" "$out/checkpoint.ckpt.tmp.$((next + i))"
  i=$((i + 1))
done
"$train" $F --out "$out" > "$out/log" 2>&1 || bad "planted links: the run failed ($(tail -1 "$out/log"))"
[ "$(cat "$tmp/precious")" = precious ] && ok "planted links: not followed" ||
  bad "planted links: the run wrote through a planted symlink"
[ -f "$out/checkpoint.ckpt" ] && [ ! -L "$out/checkpoint.ckpt" ] || bad "planted links: no checkpoint"

# --- temporary files a killed run left -------------------------------------------------------
# A writer killed mid-write (kill -9, power loss) leaves "<file>.tmp.<16 hex digits>"; the next
# run in the folder removes those of the files a run writes, and only those that are regular
# files of this user that no live writer holds (a writer holds an flock on its temporary file):
# other names, links and a held file stay.
out=$tmp/stale
mkdir -p "$out"
for f in checkpoint.ckpt.tmp.0123456789abcdef summary.json.tmp.fedcba9876543210 \
         timeline-rank1.json.tmp.00112233445566aa log.jsonl.tmp.a1b2c3d4e5f60718 \
         checkpoint.ckpt.tmp.aaaaaaaaaaaaaaaa notes.txt.tmp.0123456789abcdef \
         checkpoint.ckpt.tmp.1234 checkpoint.ckpt.tmp.0123456789ABCDEF; do
  echo "half-written" > "$out/$f"
done
ln -s "$tmp/precious" "$out/checkpoint.ckpt.tmp.bbbbbbbbbbbbbbbb"
# checkpoint.ckpt.tmp.aaaaaaaaaaaaaaaa is held, as a live writer holds its file (flock(1), of
# util-linux), until fd 3 closes
mkfifo "$tmp/hold"
exec 3<> "$tmp/hold"
flock -x "$out/checkpoint.ckpt.tmp.aaaaaaaaaaaaaaaa" sh -c 'echo held; exec cat > /dev/null' \
  < "$tmp/hold" > "$tmp/held" 3>&- &
holder=$!
wait_line "$tmp/held" "^held" "$holder" || bad "stale files: the lock holder did not start"
"$train" $F --out "$out" > "$out/log" 2>&1 || bad "stale files: the run failed ($(tail -1 "$out/log"))"
exec 3>&-
wait "$holder"
for f in checkpoint.ckpt.tmp.0123456789abcdef summary.json.tmp.fedcba9876543210 \
         timeline-rank1.json.tmp.00112233445566aa log.jsonl.tmp.a1b2c3d4e5f60718; do
  [ -e "$out/$f" ] && bad "stale files: $f was left"
done
for f in checkpoint.ckpt.tmp.aaaaaaaaaaaaaaaa notes.txt.tmp.0123456789abcdef \
         checkpoint.ckpt.tmp.1234 checkpoint.ckpt.tmp.0123456789ABCDEF; do
  [ "$(cat "$out/$f" 2>/dev/null)" = half-written ] || bad "stale files: $f was removed or changed"
done
[ -L "$out/checkpoint.ckpt.tmp.bbbbbbbbbbbbbbbb" ] && [ "$(cat "$tmp/precious")" = precious ] ||
  bad "stale files: the planted link or its target was touched"
grep -q "^train: removed 4 temporary files a killed run left in $out" "$out/log" &&
  ok "stale files: the 4 of ours removed, the held one, other names and the link left" ||
  bad "stale files: the run does not say it removed 4 ($(grep removed "$out/log"))"

[ "$fails" -eq 0 ] || { echo "fault_files: $fails failure(s)"; exit 1; }
echo "fault_files: all passed"
