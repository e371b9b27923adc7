#!/bin/sh
# startup_libs.sh — what a program loads before it does anything: --help and --version of every
# installed program, a CPU training run (--device cpu, and the default where no GPU is visible)
# and a CPU prediction open none of the CUDA math libraries (cuBLAS, cuBLASLt, cuDNN; cuBLASLt's
# initialisation alone takes ~0.7 s). Those come with the CUDA ops module, loaded on first GPU
# use (src/device/ops_module.c). The dynamic linker's own record (LD_DEBUG=files, one file per
# process, forked ranks included) says what each process opened; in a CUDA build the doctor,
# which loads the module, shows that the record does see them when they are loaded.
# Environment (tests/local.mk): top_builddir, srcdir, bin_programs (the installed programs).
set -u
top=${top_builddir:-.}
. "${srcdir:-.}/tests/predict_lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }

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
if grep -q '^#define HAVE_CUDNN 1' "$top/config.h"; then
  opened "$top/shmddp-doctor"
  check "shmddp-doctor (CUDA build) loads the ops module and its libraries: cuBLAS, cuBLASLt, cuDNN seen (opened: $libs)" \
    'seen libcublasLt.so && seen libcublas.so && seen libcudnn.so'
else
  echo "SKIP (part): a build without the CUDA ops module has no library to see loaded"
fi
exit $fail
