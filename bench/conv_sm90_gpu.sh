#!/usr/bin/env bash
# bench/conv_sm90_gpu.sh — on an H100/H200: the fused 3x3 convolutions on Hopper, forward,
# dgrad and wgrad (kernels/conv_sm90.h). Shows the compiled kernels' resources (registers,
# spills, HGMMA in their machine code), runs their GPU test (against the CPU references) and
# dev/conv_sm90_bench (checks, then times them against cuDNN and the trainer's separate passes
# on the U-Net's 64 -> 64 layer at 256 x 256, batch 6), then the same bench on the U-Net's wider
# layers (the wide kernels, kernels/conv_sm90_wide_cuda.cu and, for wgrad,
# kernels/conv_sm90_wgrad_wide_cuda.cu), batch 6, one run per row of WIDE_SHAPES ("cin cout
# size" per line; WIDE_SHAPES= none). Writes everything to OUT (default: stdout); prints the
# tables last. About 5 minutes for the test and the 64 -> 64 part after the build (the test
# checks against f64 oracles on the CPU: minutes of it), up to a minute per wide shape. From the
# source root, after
#   ./autogen.sh && ./configure -q --with-cuda-arch=90 &&
#   make -j16 tests/check_conv_sm90_cuda dev/conv_sm90_bench
# usage: bench/conv_sm90_gpu.sh [OUT]   (BUILD=dir: the build tree, default the source root;
# COMMIT=hash names the commit where the checkout's own history is not the tree's)
set -u
out=${1:-/dev/stdout}
build=${BUILD:-.}
obj=$build/kernels/conv_sm90_cuda.o
wobj=$build/kernels/conv_sm90_wide_cuda.o
wgobj=$build/kernels/conv_sm90_wgrad_wide_cuda.o
# the U-Net's 3x3 layers other than 64 -> 64 (encoder a -> b, b -> b; decoder 2b -> b after the
# concat), level by level: 256 x 256, 128, 64, 32, 16
default_wide="128 64 256
64 128 128
128 128 128
256 128 128
128 256 64
256 256 64
512 256 64
256 512 32
512 512 32
1024 512 32
512 1024 16
1024 1024 16"
wide_shapes=${WIDE_SHAPES-$default_wide}
rc=0
{
  echo "# conv_sm90: commit ${COMMIT:-$(sh "$(dirname "$0")/tree_name.sh" "$(dirname "$0")/..")}, $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1
  echo "== machine code ($obj)"
  if command -v cuobjdump > /dev/null; then
    cuobjdump -res-usage "$obj" 2>&1 | grep -E "Function|REG" | sed 's/^[[:space:]]*//'
    sass=$(cuobjdump -sass "$obj" 2>&1)
    echo "HGMMA instructions: $(grep -c HGMMA <<< "$sass"); local memory (LDL/STL): $(grep -cE '\b(LDL|STL)\b' <<< "$sass"); USETMAXREG: $(grep -c USETMAXREG <<< "$sass"); LDSM: $(grep -c LDSM <<< "$sass"); STSM: $(grep -c STSM <<< "$sass"); UTMALDG: $(grep -c UTMALDG <<< "$sass"); UTMASTG: $(grep -c UTMASTG <<< "$sass")"
    for o in "$wobj" "$wgobj"; do
      echo "== machine code ($o)"
      cuobjdump -res-usage "$o" 2>&1 | grep -E "Function|REG" | sed 's/^[[:space:]]*//'
      sass=$(cuobjdump -sass "$o" 2>&1)
      echo "HGMMA instructions: $(grep -c HGMMA <<< "$sass"); local memory (LDL/STL): $(grep -cE '\b(LDL|STL)\b' <<< "$sass"); USETMAXREG: $(grep -c USETMAXREG <<< "$sass"); LDSM: $(grep -c LDSM <<< "$sass"); STSM: $(grep -c STSM <<< "$sass"); UTMALDG: $(grep -c UTMALDG <<< "$sass"); UTMASTG: $(grep -c UTMASTG <<< "$sass")"
    done
  else
    echo "cuobjdump not found"
  fi
  echo "== tests/check_conv_sm90_cuda"
  start=$(date +%s)
  timeout 480 "$build/tests/check_conv_sm90_cuda" 2>&1
  t=$?
  echo "check_conv_sm90_cuda: rc $t ($(( $(date +%s) - start )) s)"
  [ "$t" -eq 0 ] || rc=1
  echo "== dev/conv_sm90_bench"
  start=$(date +%s)
  SHMDDP_CONV_VERBOSE=1 timeout 150 "$build/dev/conv_sm90_bench" 2>&1
  t=$?
  echo "conv_sm90_bench: rc $t ($(( $(date +%s) - start )) s)"
  [ "$t" -eq 0 ] || rc=1
  while read -r cin cout size; do
    [ -n "${cin:-}" ] || continue
    echo "== dev/conv_sm90_bench -i $cin -o $cout -s $size -b 6"
    start=$(date +%s)
    SHMDDP_CONV_VERBOSE=1 timeout 120 "$build/dev/conv_sm90_bench" -i "$cin" -o "$cout" \
      -s "$size" -b 6 2>&1
    t=$?
    echo "conv_sm90_bench: rc $t ($(( $(date +%s) - start )) s)"
    [ "$t" -eq 0 ] || rc=1
  done <<< "$wide_shapes"
} > "$out"
if [ "$out" != /dev/stdout ]; then
  grep -E "^(HGMMA|check |variant|ours|cuDNN|today|#|check_conv|conv_sm90_bench)|[0-9]+%: Checks" "$out"
fi
exit $rc
