#!/bin/sh
# bench/same_training_gpu.sh NEW_BUILD OLD_BUILD OUTDIR — do two builds train the same? For a
# change meant to leave behaviour alone (code moved, layers rearranged): the same short
# deterministic trainings (1 GPU, bf16 and fp32, BatchNorm; the step as a CUDA graph) with both
# builds must print identical losses, step by step (MOVE_CKPT=1: and write byte-identical
# checkpoints), and the reference job's images/s of both, alternated twice (new, then old).
# GPU machine, 1 GPU; NEW_BUILD and OLD_BUILD are build folders of the two trees, configured
# with CUDA and built (`make -j`). Prints one line per precision and per speed run, then PASS or
# FAIL (exit status 1); the runs' folders and logs go to OUTDIR
# (bench/results/move_1xh200.txt, move_lower_1xh200.txt).
set -u
. "$(dirname "$0")/lib.sh"
N=${1:?usage: bench/same_training_gpu.sh NEW_BUILD OLD_BUILD OUTDIR}
O=${2:?usage: bench/same_training_gpu.sh NEW_BUILD OLD_BUILD OUTDIR}
bench_out "${3:?usage: bench/same_training_gpu.sh NEW_BUILD OLD_BUILD OUTDIR}"
bench_header "two builds: the same losses, and their speed" "$N" "$O" OUTDIR
F="--device cuda --nproc 1 --widths small --image-size 64 --batch-size 4 --train-size 48 \
--val-size 8 --steps 12 --workers 2 --save-every 12 --timeout 60 --seed 3 --log-every 1"
fail=0
for prec in bf16 fp32; do
  for b in new old; do
    [ $b = new ] && dir=$N || dir=$O
    "$dir/shmddp-train" $F --precision $prec --out "$OUT/$b-$prec" > "$OUT/$b-$prec.log" 2>&1 ||
      echo "$b $prec: exit $?"
  done
  a=$(sha256sum < "$OUT/new-$prec/checkpoint.ckpt" 2>/dev/null | cut -c1-16)
  b=$(sha256sum < "$OUT/old-$prec/checkpoint.ckpt" 2>/dev/null | cut -c1-16)
  # every step's loss (log.jsonl), then the result line's losses (val_miou is left out: how it
  # is averaged over the classes may differ between the builds)
  losses() { { grep -o '"loss":[^,}]*' "$OUT/$1-$prec/log.jsonl"; grep '^result:' "$OUT/$1-$prec.log" |
             tr ' ' '\n' | grep -E '^(train_loss|val_loss|initial_loss)='; } 2>/dev/null; }
  n=$(losses new | wc -l)
  la=$(losses new | sha256sum | cut -c1-16)
  lb=$(losses old | sha256sum | cut -c1-16)
  note "$prec: checkpoint new $a old $b; $n losses new $la old $lb"
  # The losses decide. A checkpoint's bytes also hold its settings line, which gains fields as
  # the trainer gains options (e.g. groups=, ignore_label=): set MOVE_CKPT=1 to require equal
  # checkpoints too, between builds that write the same settings.
  [ "$n" -gt 12 ] && [ "$la" = "$lb" ] || fail=1
  [ "${MOVE_CKPT:-0}" = 1 ] && { [ -n "$a" ] && [ "$a" = "$b" ] || fail=1; }
done
R="--device cuda --nproc 1 $REF_FLAGS --batch-size 6 --steps 48 --workers 8 --sync-bn on --precision bf16"
for round in 1 2; do
  for b in new old; do
    [ $b = new ] && dir=$N || dir=$O
    "$dir/shmddp-train" $R --out "$OUT/speed-$b-$round" > "$OUT/speed-$b-$round.log" 2>&1
    ips=$(log_value images_per_s "$OUT/speed-$b-$round.log")
    peak=$(log_value peak_mib "$OUT/speed-$b-$round.log")
    note "speed, run $round, $b build: images/s $ips peak_mib $peak"
  done
done
[ $fail = 0 ] && note "PASS: the two builds train bit-identically" || note "FAIL: the builds differ"
exit $fail
