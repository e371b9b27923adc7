#!/bin/sh
# bench/engine_miou_gpu.sh BUILD OUT — does the convolution engine change what the default job
# learns? The default job (`./train` with its defaults: the reference U-Net, bf16, 4 epochs of
# 12000 synthetic images) once under each SHMDDP_CONV_ENGINE setting, one after the other on the
# same GPU: the result line (validation mIoU, pixel accuracy and loss, training loss, images/s,
# wall time, peak memory) and the validation IoU of each class, side by side. 1 GPU; BUILD is a
# configured and built CUDA build folder (its ./train). About 1.5 min per engine on an H100.
# Environment: ENGINES (default "auto library"), TIMEOUT (seconds per run, default 300).
# Writes OUT/miou.txt (the summary, also printed; bench/results/engine_miou_1xh100.txt) and
# OUT/<engine>.log, OUT/<engine>/ (each run's folder).
set -u
. "$(dirname "$0")/lib.sh"
build_and_out "$@"
B=$(cd "$B" && pwd) || exit 2
O=$(cd "$O" && pwd) || exit 2
ENGINES=${ENGINES:-"auto library"}
TIMEOUT=${TIMEOUT:-300}
sum=$O/miou.txt
record_header "ENGINES=\"$ENGINES\" TIMEOUT=$TIMEOUT sh bench/engine_miou_gpu.sh BUILD OUT" > "$sum"
rc=0
for e in $ENGINES; do
  rm -rf "${O:?}/$e"
  t0=$(date +%s)
  SHMDDP_CONV_ENGINE=$e timeout "$TIMEOUT" "$B/train" --out "$O/$e" > "$O/$e.log" 2>&1
  r=$?
  [ $r -eq 0 ] || rc=1
  {
    echo "engine $e: exit $r after $(($(date +%s) - t0)) s"
    grep -E '^(result:|val IoU per class)' "$O/$e.log" | sed 's/^/  /'
  } >> "$sum"
done
cat "$sum"
exit $rc
