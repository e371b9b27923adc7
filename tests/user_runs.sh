#!/bin/sh
# A run's folder as a user meets it (CPU ranks):
#  - every run ends with its model: DIR/checkpoint.ckpt holds the last step after a run without
#    --save-every, with one, after --stop-after, after a resumed (and extended) run, after a
#    resume with nothing left to train into a folder of its own, and in --mode dp; the last
#    lines say where it is and give the predict and export commands, which work as printed
#    when pasted into a shell, also for a folder with a space and a quote in its name;
#  - the log follows the run, not the path: stopped at step 4, resumed from a copy of the
#    checkpoint into the same --out, log.jsonl still holds steps 1-4 (and names the run);
#  - two runs never mix in one folder: without --out every run gets runs/YYYYMMDD-HHMMSS and
#    runs/latest points at the newest (a folder there is refused, with what to do); an --out
#    holding another run is refused with exit status 2 and nothing changed, also when --resume
#    names another run's checkpoint, unless --overwrite: then nothing of the old run is left
#    (and --overwrite never removes the checkpoint --resume reads).
set -u
top=$(cd "${top_builddir:-.}" && pwd)
train=$top/shmddp-train
look=$top/tests/ckpt_look
. "${srcdir:-.}/tests/lib.sh"
F="--device cpu --nproc 2 --widths 4,8 --image-size 16 --train-size 48 --val-size 8 --batch-size 4 --workers 0 --warmup-steps 2 --progress off"
# 48 samples / 2 ranks / batch 4: 6 steps per epoch
step_of() { "$look" "$1" 2>/dev/null | sed -n 's/^step=\([0-9]*\) .*/\1/p'; }
run_of() { "$look" "$1" 2>/dev/null | sed -n 's/.* run=\([0-9a-f-]*\) .*/\1/p'; }
log_run() { sed -n '1s/^{"type": "run", "run_id": "\([0-9a-f]*\)"}$/\1/p' "$1"; }
steps() { grep -o '"type": "step", "step": [0-9]*' "$1" | grep -o '[0-9]*$' | tr '\n' ' '; }
snapshot() { (cd "$1" && for f in *; do printf '%s ' "$f"; cksum < "$f"; done); }

# ---- every run ends with its model, at its last step ----
"$train" $F --epochs 2 --out "$tmp/plain" > "$tmp/plain.log" 2>&1
check "no --save-every: the model at the last step" '[ "$(step_of "$tmp/plain/checkpoint.ckpt")" = 12 ]'
"$train" $F --epochs 2 --save-every 5 --out "$tmp/every5" > "$tmp/every5.log" 2>&1
check "--save-every 5: the model at the last step (12), not at 10" '[ "$(step_of "$tmp/every5/checkpoint.ckpt")" = 12 ]'
"$train" $F --epochs 2 --stop-after 4 --out "$tmp/part" > "$tmp/part.log" 2>&1
check "--stop-after 4: the model at step 4" '[ "$(step_of "$tmp/part/checkpoint.ckpt")" = 4 ]'
"$train" $F --epochs 3 --resume "$tmp/part/checkpoint.ckpt" --out "$tmp/part" > "$tmp/ext.log" 2>&1
check "resumed and extended to 3 epochs: the model at step 18" '[ "$(step_of "$tmp/part/checkpoint.ckpt")" = 18 ]'
"$train" $F --epochs 3 --resume "$tmp/part/checkpoint.ckpt" --out "$tmp/nothing" > "$tmp/nothing.log" 2>&1
check "resumed with nothing left, into a new folder: the model there, at step 18" \
  'grep -q "nothing left to train" "$tmp/nothing.log" && "$look" "$tmp/part/checkpoint.ckpt" "$tmp/nothing/checkpoint.ckpt"'
"$train" $F --epochs 1 --mode dp --out "$tmp/dp" > "$tmp/dp.log" 2>&1
check "--mode dp: the model at the last step" '[ "$(step_of "$tmp/dp/checkpoint.ckpt")" = 6 ]'

# the last lines, pasted into a shell as printed (a folder named with a space and a quote)
odd="$tmp/it's a run"
"$train" $F --epochs 1 --out "$odd" > "$tmp/odd.log" 2>&1
check "the last lines name the model and its step" 'tail -n 3 "$tmp/odd.log" | head -n 1 | grep -q "^train: the model (step 6) is in "'
pcmd=$(sed -n 's/^  predict: //p' "$tmp/odd.log")
ecmd=$(sed -n 's/^  export:  //p' "$tmp/odd.log")
check "predict and export commands given" '[ -n "$pcmd" ] && [ -n "$ecmd" ]'
if command -v python3 > /dev/null 2>&1; then
  . "${srcdir:-.}/tests/predict_lib.sh"
  make_images "$tmp/img" 16x16 24x16
  pcmd=$(printf '%s' "$pcmd" | sed "s|--images IMAGES --out MASKS|--images '$tmp/img' --out '$tmp/masks' --device cpu|")
  check "the predict command works as printed" '(eval "$pcmd") > "$tmp/p.out" 2>&1 && [ -s "$tmp/masks/img00.png" ]'
else
  echo "skip: the predict command (python3 makes the PNG files)"
fi
ecmd=$(printf '%s' "$ecmd" | sed "s|--export model.safetensors|--export '$tmp/model.safetensors'|")
check "the export command works as printed" '(eval "$ecmd") > "$tmp/e.out" 2>&1 && [ -s "$tmp/model.safetensors" ]'
quoted="'$(printf '%s' "$odd" | sed "s/'/'\\\\''/g")'"
check "the report command quotes the folder" 'grep -qF "report: shmddp-report $quoted " "$tmp/odd.log"'

# ---- the log follows the run, not the path ----
"$train" $F --epochs 2 --stop-after 4 --save-every 4 --out "$tmp/run2" > /dev/null 2>&1
cp "$tmp/run2/checkpoint.ckpt" "$tmp/copy.ckpt"
"$train" $F --epochs 2 --resume "$tmp/copy.ckpt" --out "$tmp/run2" > "$tmp/copy.log" 2>&1
rc=$?
check "resumed from a copy of the checkpoint into the same --out" '[ $rc -eq 0 ]'
check "log.jsonl keeps steps 1-4: every step once, in order" '[ "$(steps "$tmp/run2/log.jsonl")" = "1 2 3 4 5 6 7 8 9 10 11 12 " ]'
check "the log and the checkpoint name the same run" '[ -n "$(log_run "$tmp/run2/log.jsonl")" ] && [ "$(log_run "$tmp/run2/log.jsonl")" = "$(run_of "$tmp/run2/checkpoint.ckpt")" ]'
check "summary.json names it too" 'grep -q "\"run_id\": \"$(log_run "$tmp/run2/log.jsonl")\"" "$tmp/run2/summary.json"'

# ---- two runs never mix in one folder ----
mkdir "$tmp/w"
(cd "$tmp/w" && "$train" $F --epochs 1 > a.log 2>&1 && "$train" $F --epochs 1 --seed 2 > b.log 2>&1)
first=$(sed -n "s|^train: this run's folder is \(runs/[0-9-]*\) .*|\1|p" "$tmp/w/a.log")
second=$(sed -n "s|^train: this run's folder is \(runs/[0-9-]*\) .*|\1|p" "$tmp/w/b.log")
check "without --out: a folder per run, named when the run starts" '[ -n "$first" ] && [ -n "$second" ] && [ "$first" != "$second" ]'
check "each folder holds its own run's model and log" '[ "$(run_of "$tmp/w/$first/checkpoint.ckpt")" = "$(log_run "$tmp/w/$first/log.jsonl")" ] && [ "$(run_of "$tmp/w/$second/checkpoint.ckpt")" = "$(log_run "$tmp/w/$second/log.jsonl")" ] && [ "$(run_of "$tmp/w/$first/checkpoint.ckpt")" != "$(run_of "$tmp/w/$second/checkpoint.ckpt")" ]'
check "runs/latest points at the newest: the README's predict path is its model" '[ "$(readlink "$tmp/w/runs/latest")" = "${second#runs/}" ] && "$look" "$tmp/w/runs/latest/checkpoint.ckpt" "$tmp/w/$second/checkpoint.ckpt"'
(cd "$tmp/w" && "$train" $F --epochs 2 --seed 2 --resume runs/latest/checkpoint.ckpt > c.log 2>&1)
check "--resume without --out goes on in the checkpoint's folder" '[ "$(step_of "$tmp/w/$second/checkpoint.ckpt")" = 12 ] && [ "$(steps "$tmp/w/$second/log.jsonl")" = "1 2 3 4 5 6 7 8 9 10 11 12 " ] && [ "$(ls "$tmp/w/runs" | wc -l)" -eq 3 ]'
mkdir "$tmp/v" "$tmp/v/runs" "$tmp/v/runs/latest"
(cd "$tmp/v" && "$train" $F --epochs 1 > a.log 2>&1; echo $? > rc)
check "runs/latest as a folder: refused (exit 2), saying what to do" '[ "$(cat "$tmp/v/rc")" = 2 ] && grep -q "runs/latest is a folder.*mv runs/latest" "$tmp/v/a.log" && [ "$(ls "$tmp/v/runs")" = latest ]'

before=$(snapshot "$tmp/plain")
"$train" $F --epochs 1 --seed 3 --out "$tmp/plain" > "$tmp/again.log" 2>&1
rc=$?
check "an --out holding another run: refused, exit 2, one line" '[ $rc -eq 2 ] && [ $(wc -l < "$tmp/again.log") -eq 1 ] && grep -q "holds another run" "$tmp/again.log"'
check "the refusal names --overwrite and how to continue it" 'grep -q -- "--overwrite to replace that run, or --resume .*/plain/checkpoint.ckpt to continue it" "$tmp/again.log"'
check "and nothing in it changed" '[ "$(snapshot "$tmp/plain")" = "$before" ]'
"$train" $F --epochs 2 --resume "$tmp/every5/checkpoint.ckpt" --out "$tmp/plain" > "$tmp/other.log" 2>&1
rc=$?
check "--resume of another run's checkpoint into it: refused, exit 2" '[ $rc -eq 2 ] && grep -q "holds another run .* than the one --resume" "$tmp/other.log" && [ "$(snapshot "$tmp/plain")" = "$before" ]'

old_id=$(log_run "$tmp/plain/log.jsonl")
printf '<html>the old report</html>' > "$tmp/plain/report.html"
printf '{}' > "$tmp/plain/timeline-rank1.json"
printf 'mine' > "$tmp/plain/notes.txt"
"$train" $F --epochs 1 --seed 3 --overwrite --out "$tmp/plain" > "$tmp/over.log" 2>&1
rc=$?
new_id=$(log_run "$tmp/plain/log.jsonl")
check "--overwrite: the run goes ahead and says what it removed" '[ $rc -eq 0 ] && grep -q "^train: --overwrite: removed run ${old_id%????????????????????????}" "$tmp/over.log"'
check "nothing of the old run is left" '[ -n "$new_id" ] && [ "$new_id" != "$old_id" ] && ! grep -q "$old_id" "$tmp/plain/log.jsonl" "$tmp/plain/summary.json" && [ ! -e "$tmp/plain/report.html" ] && [ ! -e "$tmp/plain/timeline-rank1.json" ]'
check "the new run's files agree: log, checkpoint, summary" '[ "$(steps "$tmp/plain/log.jsonl")" = "1 2 3 4 5 6 " ] && [ "$(run_of "$tmp/plain/checkpoint.ckpt")" = "$new_id" ] && grep -q "\"run_id\": \"$new_id\"" "$tmp/plain/summary.json" && [ "$(step_of "$tmp/plain/checkpoint.ckpt")" = 6 ]'
check "files that are no run's stay" '[ "$(cat "$tmp/plain/notes.txt")" = mine ]'
# a folder whose checkpoint is another run's than its log: --overwrite would remove what
# --resume reads
mkdir "$tmp/mixed"
cp "$tmp/every5/log.jsonl" "$tmp/part/checkpoint.ckpt" "$tmp/mixed/"
before=$(snapshot "$tmp/mixed")
"$train" $F --epochs 3 --resume "$tmp/mixed/checkpoint.ckpt" --overwrite --out "$tmp/mixed" > "$tmp/mixed.log" 2>&1
rc=$?
check "--overwrite of the checkpoint --resume reads: refused, exit 2, nothing removed" '[ $rc -eq 2 ] && grep -q "overwrite would remove .*which --resume reads" "$tmp/mixed.log" && [ "$(snapshot "$tmp/mixed")" = "$before" ]'
if [ $fail -ne 0 ]; then
  tail_logs 4 "$tmp"/*.log "$tmp"/w/*.log
fi
exit $fail
