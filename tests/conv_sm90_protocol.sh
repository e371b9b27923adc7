#!/bin/sh
# The barrier protocols of the Hopper convolution kernels, on the CPU: dev/conv_sm90_protocol.py
# (64 -> 64 forward and dgrad, both GEMM layouts), dev/conv_sm90_wide_protocol.py (the wider
# layers' forward and dgrad) and dev/conv_sm90_wgrad_protocol.py (weight gradient, tiles of 1, 2
# and 4 rows) walk each kernel's roles and copy engine in random interleavings and must end "ok";
# each mutant (64 -> 64: a stage handed back before its k-steps are done, an output buffer
# written before its last store has read it, dgrad's stage handed back before its store has read
# it; wgrad: strips freed one row late) must fail, so the models can tell. SKIP (77) without
# python3.
set -u
src=${srcdir:-.}
command -v python3 > /dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }
fail=0
for m in 64 wide wgrad; do
  f=$src/dev/conv_sm90_${m}_protocol.py name=$m
  [ "$m" = 64 ] && f=$src/dev/conv_sm90_protocol.py name="64 -> 64"
  out=$(python3 "$f" 2>&1)
  rc=$?
  case "$rc:$out" in
    0:ok\ *) echo "ok: the $name kernel's protocol: $out" ;;
    *) echo "FAIL: the $name kernel's protocol (exit $rc): $out" | tail -5; fail=1 ;;
  esac
done
if python3 "$src/dev/conv_sm90_protocol.py" --mutant > /dev/null 2>&1; then
  echo "FAIL: the 64 -> 64 model passed a stage handed back under its k-steps"
  fail=1
else
  echo "ok: the 64 -> 64 model catches a stage handed back under its k-steps"
fi
if python3 "$src/dev/conv_sm90_protocol.py" --mutant-out > /dev/null 2>&1; then
  echo "FAIL: the 64 -> 64 model passed an output buffer written under its last store"
  fail=1
else
  echo "ok: the 64 -> 64 model catches an output buffer written under its last store"
fi
if python3 "$src/dev/conv_sm90_protocol.py" --mutant-dg > /dev/null 2>&1; then
  echo "FAIL: the 64 -> 64 model passed a dgrad stage handed back under its store"
  fail=1
else
  echo "ok: the 64 -> 64 model catches a dgrad stage handed back under its store"
fi
if python3 "$src/dev/conv_sm90_wgrad_protocol.py" --mutant > /dev/null 2>&1; then
  echo "FAIL: the wgrad model passed a protocol that frees strips still to be read"
  fail=1
else
  echo "ok: the wgrad model catches strips freed one row late"
fi
exit $fail
