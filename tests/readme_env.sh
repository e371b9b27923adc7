#!/bin/sh
# The README's table of environment variables is the one in the code: the lines between its
# help-env markers equal `shmddp-train --help-env=markdown` (make readme-env rewrites them).
set -u
train=${top_builddir:-.}/shmddp-train
readme=${srcdir:-.}/README.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$train" --help-env=markdown > "$tmp/code.md" || { echo "FAIL: --help-env=markdown failed"; exit 1; }
sed -n '/^<!-- help-env: /,/^<!-- help-env end -->/p' "$readme" | sed '1d;$d' > "$tmp/readme.md"
[ -s "$tmp/readme.md" ] || { echo "FAIL: README.md has no help-env table"; exit 1; }
if ! diff -u "$tmp/readme.md" "$tmp/code.md"; then
  echo "FAIL: README.md's environment table differs from shm/env.c's (run make readme-env)"
  exit 1
fi
echo "ok: README.md's environment table is shm/env.c's ($(wc -l < "$tmp/code.md") lines)"
