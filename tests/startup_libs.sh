#!/bin/sh
# startup_libs.sh — what a program loads before it does anything: --help and --version of every
# installed program, a CPU training run (--device cpu, and the default where no GPU is visible)
# and a CPU prediction open none of the CUDA math libraries (cuBLAS, cuBLASLt, cuDNN; cuBLASLt's
# initialisation alone takes ~0.7 s). Those come with the CUDA ops module, loaded on first GPU
# use (src/device/ops_module.c). The dynamic linker's own record (LD_DEBUG=files, one file per
# process, forked ranks included) says what each process opened; in a CUDA build the doctor,
# which loads the module, shows that the record does see them when they are loaded. On a GPU
# also: a GPU run loads the module once, before the fork, and a program without its module
# refuses a GPU run before it makes anything.
# Environment (tests/local.mk): top_builddir, srcdir, bin_programs (the installed programs),
# pkglibdir (where make install puts the module).
set -u
top=${top_builddir:-.}
. "${srcdir:-.}/tests/predict_lib.sh"
. "${srcdir:-.}/tests/lib.sh"

# Runs a command and sets rc (its exit status) and libs: the CUDA math libraries its processes
# opened (LD_DEBUG's "file=NAME" lines), sorted, on one line; its output is in $tmp/ld$n.out.
n=0
opened() {
  n=$((n + 1))
  mkdir "$tmp/ld$n"
  LD_DEBUG=files LD_DEBUG_OUTPUT="$tmp/ld$n/ld" "$@" > "$tmp/ld$n.out" 2>&1
  rc=$?
  libs=$(cat "$tmp/ld$n"/ld.* 2> /dev/null |
    grep -E -o 'file=[^ ]*lib(cublas|cublasLt|cudnn)[^ /]*\.so[^ ]*' | sed 's/^file=//; s|.*/||' |
    sort -u | tr '\n' ' ')
}
seen() { case " $libs" in *" $1"*) return 0 ;; *) return 1 ;; esac; }

: "${bin_programs:=shmddp-train shmddp-predict shmddp-allreduce-bench shmddp-doctor shmddp-compare}"
for p in $bin_programs; do
  if [ "$p" = shmddp-report ] && ! command -v python3 > /dev/null 2>&1; then
    echo "SKIP (part): no python3: $p not started"
    continue
  fi
  for a in --help --version; do
    opened "$top/$p" $a
    check "$p $a: exit 0, no CUDA math library opened${libs:+ (opened: $libs)}" \
      '[ $rc -eq 0 ] && [ -z "$libs" ]'
  done
done

F="--nproc 2 --widths 4,8 --image-size 16 --train-size 32 --val-size 4 --batch-size 4 --epochs 1
  --workers 0 --progress off"
opened "$top/shmddp-train" --device cpu $F --out "$tmp/cpu"
check "a CPU run (--device cpu, 2 ranks): finished, no CUDA math library in any process${libs:+ (opened: $libs)}" \
  '[ $rc -eq 0 ] && grep -q "^result: steps=" "$tmp/ld$n.out" && [ -z "$libs" ]'
opened env CUDA_VISIBLE_DEVICES= "$top/shmddp-train" $F --out "$tmp/nogpu"
check "no GPU visible, the default device: a CPU run, no CUDA math library${libs:+ (opened: $libs)}" \
  '[ $rc -eq 0 ] && grep -q "^result: steps=" "$tmp/ld$n.out" && [ -z "$libs" ]'

if ! command -v python3 > /dev/null 2>&1; then
  echo "SKIP (part): no python3 to make the PNG images for shmddp-predict"
elif train_ckpt "$tmp/model" && make_images "$tmp/img" 32x32 40x24; then
  opened "$top/shmddp-predict" --checkpoint "$tmp/model/checkpoint.ckpt" --images "$tmp/img" \
    --out "$tmp/pred" --device cpu
  check "shmddp-predict --device cpu: finished, no CUDA math library${libs:+ (opened: $libs)}" \
    '[ $rc -eq 0 ] && [ -n "$(ls "$tmp/pred")" ] && [ -z "$libs" ]'
else
  echo "FAIL: the checkpoint or the images for shmddp-predict could not be made"
  cat "$tmp/model.log"
  fail=1
fi

# The record sees the libraries where they are loaded: the doctor of a build with the CUDA ops
# module loads it (and cuDNN and cuBLAS with it) to report their versions.
if ! grep -q '^#define HAVE_CUDNN 1' "$top/config.h"; then
  echo "SKIP (part): a build without the CUDA ops module has no library to see loaded"
  exit $fail
fi
opened "$top/shmddp-doctor"
check "shmddp-doctor (CUDA build) loads the ops module and its libraries: cuBLAS, cuBLASLt, cuDNN seen (opened: $libs)" \
  'seen libcublasLt.so && seen libcublas.so && seen libcudnn.so'

# A program that cannot find its module: the doctor, copied out of the build tree, says so.
mkdir "$tmp/alone"
cp "$top/shmddp-doctor" "$tmp/alone/"
"$tmp/alone/shmddp-doctor" > "$tmp/alone.log" 2>&1
if [ -e "${pkglibdir:-/nonexistent}/shmddp-ops-cuda.so" ]; then
  echo "SKIP (part): a module is installed in $pkglibdir: a copied program finds that one"
else
  check "a program without its module: where it looked and what to do" \
    'grep -q "^\[FAIL\] GPU ops *the CUDA ops module shmddp-ops-cuda.so is not installed (looked for $tmp/alone/kernels/.libs/shmddp-ops-cuda.so, .*make install" "$tmp/alone.log"'
fi

# On a GPU: a GPU run loads the module once, before its ranks fork; a program that cannot find
# the module (a copy outside the build tree and any prefix) refuses a GPU run with exit 2 before
# it makes anything.
if ! ls /proc/driver/nvidia/gpus 2> /dev/null | grep -q .; then
  echo "SKIP (part): no GPU: the GPU runs of the CUDA ops module are not made"
  exit $fail
fi
G="--device cuda --nproc 1 --widths 4,8 --image-size 32 --train-size 8 --val-size 4 --batch-size 4
  --epochs 1 --workers 0 --progress off --timeout 60"
opened "$top/shmddp-train" $G --out "$tmp/gpu"
check "a GPU run: finished, with cuBLAS, cuBLASLt and cuDNN (opened: $libs)" \
  '[ $rc -eq 0 ] && grep -q "^result: steps=" "$tmp/ld$n.out" && seen libcublasLt.so && seen libcudnn.so'
# A forked rank writes to its launcher's record (ld.PID), its own pid in front of each line.
by_launcher=0
by_rank=0
for f in "$tmp/ld$n"/ld.*; do
  for q in $(grep 'file=[^ ]*shmddp-ops-cuda\.so .*dynamically loaded' "$f" | sed 's/^ *\([0-9]*\):.*/\1/'); do
    if [ "$q" = "${f##*.}" ]; then by_launcher=$((by_launcher + 1)); else by_rank=$((by_rank + 1)); fi
  done
done
check "the module loaded once, by the launcher before the fork (launcher: $by_launcher, ranks: $by_rank)" \
  '[ $by_launcher -eq 1 ] && [ $by_rank -eq 0 ]'
mkdir "$tmp/moved"
cp "$top/shmddp-train" "$tmp/moved/"
"$tmp/moved/shmddp-train" $G --out "$tmp/moved/out" > "$tmp/moved.log" 2>&1
rc=$?
check "the module missing: exit 2, one line naming it and what to do, nothing made" \
  '[ $rc -eq 2 ] && [ "$(wc -l < "$tmp/moved.log")" -eq 1 ] && grep -q "^train: .*CUDA ops module" "$tmp/moved.log" && [ ! -e "$tmp/moved/out" ]'
exit $fail
