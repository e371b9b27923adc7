#!/bin/sh
# The table of environment variables in docs/environment.md is the one in the code: the lines
# between its help-env markers equal `shmddp-train --help-env=markdown` (make readme-env rewrites
# them).
set -u
train=${top_builddir:-.}/shmddp-train
page=${srcdir:-.}/docs/environment.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$train" --help-env=markdown > "$tmp/code.md" || { echo "FAIL: --help-env=markdown failed"; exit 1; }
sed -n '/^<!-- help-env: /,/^<!-- help-env end -->/p' "$page" | sed '1d;$d' > "$tmp/page.md"
[ -s "$tmp/page.md" ] || { echo "FAIL: docs/environment.md has no help-env table"; exit 1; }
if ! diff -u "$tmp/page.md" "$tmp/code.md"; then
  echo "FAIL: docs/environment.md's table differs from shm/env.c's (run make readme-env)"
  exit 1
fi
echo "ok: docs/environment.md's table is shm/env.c's ($(wc -l < "$tmp/code.md") lines)"
