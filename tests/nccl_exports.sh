#!/bin/sh
# nccl_exports.sh — libshmddp-nccl.so exports every nccl* symbol its clients import and every
# function of NCCL 2.28's C interface (nccl/exports.txt), each also under its pncclXxx name
# (profilers interpose on those), and nothing else (the front end's own nccl_* functions stay
# local). A client missing one symbol fails to load, so this is what makes the preload usable.
set -u
srcdir=${srcdir:-.}
top_builddir=${top_builddir:-.}
lib="$top_builddir/.libs/libshmddp-nccl.so"
[ -f "$lib" ] || { echo "SKIP: $lib not built (CUDA build only)"; exit 77; }
command -v nm >/dev/null 2>&1 || { echo "SKIP: no nm"; exit 77; }
defined=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TWV]$/ {print $3}' | sed 's/@.*//' | sort -u)
fail=0
wanted=$(grep -v '^#' "$srcdir/nccl/exports.txt" | grep . | sort -u)
missing=$(printf '%s\n' "$wanted" | comm -23 - /dev/fd/3 3<<EOF2
$defined
EOF2
)
if [ -n "$missing" ]; then echo "FAIL: not exported: $missing"; fail=1; fi
# Every nccl* function has its pnccl* twin, at the same address.
for f in $(printf '%s\n' "$defined" | grep '^nccl[A-Z]'); do
  a=$(nm -D --defined-only "$lib" | awk -v n="$f" '$3 == n {print $1}')
  b=$(nm -D --defined-only "$lib" | awk -v n="p$f" '$3 == n {print $1}')
  if [ -z "$b" ]; then echo "FAIL: p$f is not exported"; fail=1
  elif [ "$a" != "$b" ]; then echo "FAIL: p$f is not $f"; fail=1; fi
done
extra=$(printf '%s\n' "$defined" | grep -v '^p\{0,1\}nccl[A-Z]' | grep -v '^_init$\|^_fini$' | grep .)
if [ -n "$extra" ]; then echo "FAIL: exported but not nccl*/pnccl*: $extra"; fail=1; fi
n=$(printf '%s\n' "$defined" | grep -c '^nccl[A-Z]')
[ "$fail" = 0 ] && echo "PASS: $n nccl* symbols and their pnccl* twins exported, every client import among them"
exit $fail
