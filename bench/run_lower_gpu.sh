#!/bin/sh
# run_lower_gpu.sh OUT [OLD_BUILD] — on the GPU machine, after the lower layers were rearranged
# (the reductions in collectives/reduce/, kernels/ built on its own, the library's check macros,
# tools/ and dev/): the GPU suites of the library and the trainer's ops, allreduce_bench on
# device buffers with every result checked, and, when OLD_BUILD names a build of the commit
# before, bench/run_move_check.sh: the same short deterministic trainings must write
# byte-identical checkpoints and print identical losses, and the reference job's images/s of both.
#
# Builds nothing: the tree root must hold a configured and built CUDA build with its test
# programs (`./configure --with-cuda-arch=90 && make -j16 && make -j16 check TESTS=`); OLD_BUILD
# (optional) the same for the older tree. Every part runs under a time limit and the next one
# runs whatever happened; all of it stays under about 4 minutes. Logs go to OUT; a summary is
# printed, ending in PASS or FAIL.
set -u
OUT=${1:?usage: bench/run_lower_gpu.sh OUT [OLD_BUILD]}
OLD=${2:-}
mkdir -p "$OUT"
t0=$(date +%s)
fail=0
el() { echo "$(($(date +%s) - t0)) s"; }
# left LIMIT: LIMIT seconds, or what is left of the 230 s budget when that is less (at least 5).
left() {
  rest=$((230 - ($(date +%s) - t0)))
  [ "$rest" -lt "$1" ] && { [ "$rest" -lt 5 ] && echo 5 || echo "$rest"; } || echo "$1"
}
# run NAME LIMIT CMD...: the command's output to OUT/NAME.log; one summary line; 77 is SKIP.
run() {
  name=$1; lim=$(left "$2"); shift 2
  timeout -s KILL "$lim" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  case $rc in
    0) verdict=PASS ;;
    77) verdict=SKIP ;;
    137) verdict="FAIL (killed after $lim s)"; fail=1 ;;
    *) verdict="FAIL (rc $rc)"; fail=1 ;;
  esac
  echo "$name: $verdict $(grep -E '^[0-9]+%: Checks' "$OUT/$name.log" | tail -1) [$(el)]"
  grep -E ':F:|:E:|^FAIL' "$OUT/$name.log" | head -5
}

echo "# run_lower_gpu.sh $(date -u +%Y-%m-%dT%H:%M:%SZ)"
nvidia-smi -L 2>/dev/null | sed 's/^/# /'
for p in shmddp-train tests/check_cuda_collectives tests/check_ops_cuda; do
  [ -x "$p" ] || { echo "FAIL: ./$p is missing: build the CUDA variant in the tree root first"; exit 1; }
done

# The library on device buffers: the reductions against the CPU reference bit for bit, the
# collectives against the f64 reference, graphs and failures; joined communicators; the NCCL
# front end (host-only communicators) and its exported symbols.
run check_cuda_collectives 90 ./tests/check_cuda_collectives
run check_join_cuda 60 ./tests/check_join_cuda
run check_nccl 40 ./tests/check_nccl
run nccl_exports 20 env srcdir=. top_builddir=. sh tests/nccl_exports.sh
# The trainer's ops (kernels/, now libkernels.a) against the CPU reference, the model on the GPU.
run check_ops_cuda 60 ./tests/check_ops_cuda
run check_model_cuda 60 ./tests/check_model_cuda
# allreduce_bench (its table now in allreduce_bench_table.c, the checks in libcollcheck.a) on
# device buffers, every result checked: the #wrong column must be 0.
run allreduce_bench 30 ./tools/allreduce_bench --device cuda --nproc 2 -b 8 -e 64M -f 8 -n 5 -w 2 -c 1
wrong=$(awk '$1 ~ /^[0-9]+$/ && $9 != 0' "$OUT/allreduce_bench.log" | wc -l)
rows=$(awk '$1 ~ /^[0-9]+$/' "$OUT/allreduce_bench.log" | wc -l)
echo "allreduce_bench: $rows sizes, $wrong with wrong results"
[ "$rows" -gt 0 ] && [ "$wrong" = 0 ] || fail=1
run doctor 20 ./tools/doctor

# Before and after: bit-identical trainings (bench/run_move_check.sh).
if [ -n "$OLD" ]; then
  if [ -x "$OLD/shmddp-train" ]; then
    run move_check 150 sh bench/run_move_check.sh . "$OLD" "$OUT/move"
    grep -E '^(bf16|fp32):|^speed|^PASS|^FAIL' "$OUT/move_check.log"
  else
    echo "move_check: FAIL ($OLD/shmddp-train is missing)"; fail=1
  fi
else
  echo "move_check: not run (no OLD_BUILD given)"
fi

[ $fail = 0 ] && echo "PASS: every part passed or skipped [$(el)]" || echo "FAIL: see above and $OUT [$(el)]"
exit $fail
