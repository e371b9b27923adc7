#!/bin/sh
# nccl_exports.sh — libshmddp-nccl.so exports every nccl* symbol its clients import
# (nccl/exports.txt: PyTorch 2.11, CuPy 14, vLLM's pynccl) and nothing else (the front end's own nccl_* helpers stay local).
# A client missing one symbol fails to load, so this is what makes the preload usable.
set -u
srcdir=${srcdir:-.}
top_builddir=${top_builddir:-.}
lib="$top_builddir/.libs/libshmddp-nccl.so"
[ -f "$lib" ] || { echo "SKIP: $lib not built (CUDA build only)"; exit 77; }
command -v nm >/dev/null 2>&1 || { echo "SKIP: no nm"; exit 77; }
defined=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TWV]$/ {print $3}' | sed 's/@.*//' | sort -u)
fail=0
missing=$(grep -v '^#' "$srcdir/nccl/exports.txt" | grep . | sort -u | comm -23 - /dev/fd/3 3<<EOF2
$defined
EOF2
)
if [ -n "$missing" ]; then echo "FAIL: not exported: $missing"; fail=1; fi
extra=$(printf '%s\n' "$defined" | grep -v '^nccl[A-Z]' | grep -v '^_init$\|^_fini$' | grep .)
if [ -n "$extra" ]; then echo "FAIL: exported but not nccl*: $extra"; fail=1; fi
n=$(printf '%s\n' "$defined" | grep -c '^nccl[A-Z]')
[ "$fail" = 0 ] && echo "PASS: $n nccl* symbols exported, every client import among them"
exit $fail
