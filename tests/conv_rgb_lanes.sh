#!/bin/sh
# The few-channel 3x3 kernels' lane arithmetic, on the CPU: dev/conv_rgb_lanes.py walks each
# lane's gathers, fragments and stores against the PTX layouts and the im2col matrix and must
# end "ok"; its mutants (pixel g + 8's taps packed as pixel g's; dY's rows read unswizzled) must
# fail, so the model can tell. SKIP (77) without python3.
set -u
src=${srcdir:-.}
command -v python3 > /dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }
fail=0
out=$(python3 "$src/dev/conv_rgb_lanes.py" 2>&1)
rc=$?
case "$rc:$out" in
  0:ok\ *) echo "ok: the few-channel kernels' lanes: $out" ;;
  *) echo "FAIL: the few-channel kernels' lanes (exit $rc): $out" | tail -5; fail=1 ;;
esac
for m in --mutant-pair --mutant-swizzle; do
  if python3 "$src/dev/conv_rgb_lanes.py" $m > /dev/null 2>&1; then
    echo "FAIL: the lane model passed $m"
    fail=1
  else
    echo "ok: the lane model catches $m"
  fi
done
exit $fail
