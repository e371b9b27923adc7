#!/bin/bash
# imports.sh [LIB] — the nccl* symbols NCCL's clients on this machine import (nm -D
# --undefined-only): PyTorch (every shared object under torch/lib, libtorch_cuda.so being the
# one that matters) and CuPy's NCCL extension module; one sorted list per client, then their
# union. With LIB (libshmddp-nccl.so), also the imported names LIB does not export: each one
# is a client that fails to load (`undefined symbol`) or, for CuPy, silently loses NCCL.
# Also diffs the union against nccl/exports.txt, the list the library is built to. Exit status
# 1 when LIB misses a symbol.
set -u
LIB=${1:-}
HERE=$(cd "$(dirname "$0")" && pwd)
EXPORTS="$HERE/../../nccl/exports.txt"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

undef_nccl() { # the nccl* names a shared object imports
  nm -D --undefined-only "$1" 2>/dev/null | awk '{print $NF}' | sed 's/@.*//' | grep '^nccl' | sort -u
}

# Locate the packages without importing them (no CUDA, no preload needed).
TORCH_DIR=$(python3 -c 'import importlib.util, os; s = importlib.util.find_spec("torch"); print(os.path.dirname(s.origin) if s else "")' 2>/dev/null)
CUPY_DIR=$(python3 -c 'import importlib.util, os; s = importlib.util.find_spec("cupy_backends"); print(os.path.dirname(s.origin) if s else "")' 2>/dev/null)

echo "# nccl* symbols imported by NCCL's clients ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
: > "$tmp/union"
if [ -n "$TORCH_DIR" ] && [ -d "$TORCH_DIR/lib" ]; then
  ver=$(python3 -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null)
  : > "$tmp/torch"
  for so in "$TORCH_DIR"/lib/*.so*; do
    undef_nccl "$so" > "$tmp/one"
    if [ -s "$tmp/one" ]; then
      echo "## torch $ver: $(basename "$so"): $(wc -l < "$tmp/one") symbols"
      cat "$tmp/one" >> "$tmp/torch"
    fi
  done
  sort -u -o "$tmp/torch" "$tmp/torch"
  echo "## torch $ver (all of torch/lib): $(wc -l < "$tmp/torch") symbols"
  sed 's/^/  /' "$tmp/torch"
  cat "$tmp/torch" >> "$tmp/union"
else
  echo "## torch: not found"
fi

if [ -n "$CUPY_DIR" ]; then
  ver=$(python3 -c 'import importlib.metadata as m, sys
for d in ("cupy-cuda13x", "cupy-cuda12x", "cupy"):
    try:
        print(d, m.version(d)); sys.exit()
    except m.PackageNotFoundError:
        pass' 2>/dev/null)
  mods=$(find "$CUPY_DIR" -name 'nccl*.so' 2>/dev/null)
  if [ -n "$mods" ]; then
    : > "$tmp/cupy"
    for so in $mods; do
      undef_nccl "$so" >> "$tmp/cupy"
    done
    sort -u -o "$tmp/cupy" "$tmp/cupy"
    echo "## cupy ($ver): $(echo "$mods" | sed "s|$CUPY_DIR/||" | tr '\n' ' '): $(wc -l < "$tmp/cupy") symbols"
    sed 's/^/  /' "$tmp/cupy"
    cat "$tmp/cupy" >> "$tmp/union"
  else
    echo "## cupy: no nccl*.so under $CUPY_DIR"
  fi
else
  echo "## cupy: not found"
fi

sort -u -o "$tmp/union" "$tmp/union"
echo "## union: $(wc -l < "$tmp/union") symbols"
sed 's/^/  /' "$tmp/union"

if [ -f "$EXPORTS" ]; then
  grep -v '^#' "$EXPORTS" | grep . | sort -u > "$tmp/exports"
  echo "## imported but not in nccl/exports.txt: $(comm -23 "$tmp/union" "$tmp/exports" | wc -l)"
  comm -23 "$tmp/union" "$tmp/exports" | sed 's/^/  /'
fi

rc=0
if [ -n "$LIB" ]; then
  nm -D --defined-only "$LIB" 2>/dev/null | awk '{print $NF}' | sed 's/@.*//' | grep '^nccl' | sort -u > "$tmp/lib"
  missing=$(comm -23 "$tmp/union" "$tmp/lib")
  echo "## $(basename "$LIB") exports $(wc -l < "$tmp/lib") nccl* symbols; imported but missing: $(printf '%s' "$missing" | grep -c .)"
  printf '%s\n' "$missing" | grep . | sed 's/^/  MISSING /'
  [ -z "$missing" ] || rc=1
fi
exit $rc
