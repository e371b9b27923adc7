#!/bin/sh
# Every environment variable that a program of shmddp reads or sets is in the one table
# (shm/env.c, printed by `shmddp-train --help-env`): the names are collected from the programs'
# and libraries' sources — getenv/setenv/unsetenv and the table readers (shm_env_*) in C, "${NAME"
# and NAME= in the installed shell scripts — and each must be listed. A variable the table lacks
# would make the trainer warn that an exported setting "is not a shmddp setting".
set -u
train=${top_builddir:-.}/shmddp-train
src=${srcdir:-.}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$train" --help-env=markdown > "$tmp/table.md" || { echo "FAIL: --help-env=markdown failed"; exit 1; }
sed -n 's/^| `\([A-Za-z_][A-Za-z0-9_]*\)` .*/\1/p' "$tmp/table.md" | sort -u > "$tmp/listed"
[ -s "$tmp/listed" ] || { echo "FAIL: no variable in --help-env's table"; exit 1; }
twice=$(sed -n 's/^| `\([A-Za-z_][A-Za-z0-9_]*\)` .*/\1/p' "$tmp/table.md" | sort | uniq -d)
[ -z "$twice" ] || { echo "FAIL: listed twice in the table:" $twice; exit 1; }
dirs="$src/src $src/shm $src/collectives $src/nccl $src/kernels $src/tools $src/include"
{
  grep -rhoE '(getenv|setenv|unsetenv|shm_env_[a-z_]+)\("[A-Za-z_][A-Za-z0-9_]*"' $dirs \
    --include='*.c' --include='*.cu' --include='*.h' | sed 's/.*("//; s/"$//'
  for f in "$src"/nccl/*.in "$src"/tools/*.in; do
    [ -f "$f" ] || continue
    grep -hoE '\$\{[A-Z_][A-Z0-9_]*' "$f" | sed 's/^..//'
    grep -hoE '(^|[[:space:];])[A-Z_][A-Z0-9_]*=' "$f" | sed 's/^[[:space:];]*//; s/=$//'
  done
} | sort -u > "$tmp/used"
[ "$(wc -l < "$tmp/used")" -ge 10 ] || { echo "FAIL: found only $(wc -l < "$tmp/used") variable names in the sources"; exit 1; }
missing=$(comm -23 "$tmp/used" "$tmp/listed")
if [ -n "$missing" ]; then
  echo "FAIL: read or set by the programs but not in shm/env.c's table:" $missing
  exit 1
fi
echo "ok: the $(wc -l < "$tmp/used") variables the programs read or set are all in the table"
