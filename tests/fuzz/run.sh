#!/bin/sh
# Build a libFuzzer harness with clang (ASan + UBSan) and run it.
# Usage: tests/fuzz/run.sh checkpoint|cli|png|segment|log|compare SECONDS [extra libFuzzer args]
# New crash inputs land in tests/fuzz/crashes/; keep the fixed ones in tests/fuzz/regress_<target>/.
# (The files tools/report reads, in python: tests/fuzz/fuzz_report.py, run by tests/report_fuzz.sh.)
set -eu
target=$1; secs=${2:-60}; shift 2 || true
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${FUZZ_OUT:-/tmp/shmddp-fuzz}
mkdir -p "$out/corpus_$target" "$root/tests/fuzz/crashes"
[ -f "$root/config.h" ] || [ -n "${FUZZ_CONFIG_DIR:-}" ] || { echo "configure first (config.h), or set FUZZ_CONFIG_DIR to a build dir" >&2; exit 1; }
cfg=${FUZZ_CONFIG_DIR:-$root}
case $target in
  checkpoint) srcs="tests/fuzz/fuzz_checkpoint.c src/train/ckpt_file.c src/obs/outfile.c"; libs="-lz" ;;
  *) srcs="tests/fuzz/fuzz_$target.c $(cat "$root/tests/fuzz/$target.sources")"; libs="$(cat "$root/tests/fuzz/$target.libs" 2>/dev/null || true)" ;;
esac
cd "$root"
# shellcheck disable=SC2086
clang -g -O1 -std=gnu11 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$cfg" -I. -Iinclude $srcs -o "$out/fuzz_$target" $libs -lm -lpthread
seeds="$root/tests/fuzz/regress_$target"
[ -d "$seeds" ] || seeds=""
dict="$root/tests/fuzz/$target.dict"
if [ -f "$dict" ]; then dict="-dict=$dict"; else dict=""; fi
# shellcheck disable=SC2086
"$out/fuzz_$target" -max_total_time="$secs" -artifact_prefix="$root/tests/fuzz/crashes/$target-" \
  -print_final_stats=1 $dict "$@" "$out/corpus_$target" $seeds
