#!/bin/sh
# After a build, `git status` shows nothing of it: every program, script and link the makefiles
# build (bin_, noinst_ and check_PROGRAMS, bin_SCRIPTS, the build tree's links, CLEANFILES) in
# any configuration, the CUDA build's too, is covered by .gitignore. The names are read from
# Makefile.am and every */*.mk and */*/*.mk, inside automake conditionals as well, so a CPU
# build checks the CUDA build's programs. SKIP (77) where the source tree is not a git checkout
# of its own (a tarball, also one unpacked inside a checkout by make distcheck). And no tracked
# file matches an ignore pattern.
set -u
src=${srcdir:-.}
top=$(command -v git > /dev/null 2>&1 && git -C "$src" rev-parse --show-toplevel 2>/dev/null)
[ -n "$top" ] && [ "$(cd "$top" && pwd -P)" = "$(cd "$src" && pwd -P)" ] ||
  { echo "SKIP: the source tree is not a git checkout (a tarball)"; exit 77; }
# The words assigned to the variables that name built files, continuation lines joined;
# $(VARIABLES) and patterns are left out, $(EXEEXT) dropped.
names=$(cd "$src" && cat Makefile.am ./*/*.mk ./*/*/*.mk 2>/dev/null | awk '
  { line = cont ? cont " " $0 : $0; cont = "" }
  /\\$/ { sub(/\\$/, "", line); cont = line; next }
  line ~ /^[ \t]*(bin_PROGRAMS|noinst_PROGRAMS|check_PROGRAMS|bin_SCRIPTS|NCCL_RUN_SCRIPT|BUILD_TREE_LINKS|CLEANFILES)[ \t]*\+?=/ {
    sub(/^[^=]*=/, "", line)
    n = split(line, w, /[ \t]+/)
    for (i = 1; i <= n; i++) {
      gsub(/\$\(EXEEXT\)/, "", w[i])
      if (w[i] != "" && w[i] !~ /[$*?\[]/) print w[i]
    }
  }' | sort -u)
[ -n "$names" ] || { echo "FAIL: no built files found in the makefiles"; exit 1; }
fail=0
count=0
for n in $names; do
  count=$((count + 1))
  # --no-index: whether .gitignore covers the name, tracked or not
  if ! git -C "$src" check-ignore -q --no-index "$n"; then
    echo "FAIL: $n is built but not covered by .gitignore (git status would list it)"
    fail=1
  fi
done
[ $fail -eq 0 ] && echo "ok: .gitignore covers all $count built files the makefiles name"
# ...and no file of the tree: a tracked file that an ignore pattern matches is left out where the
# tree is named from its files (bench/tree_name.sh adds them to an empty index)
tracked=$(git -C "$src" ls-files -ci --exclude-standard)
if [ -n "$tracked" ]; then
  echo "FAIL: tracked files that .gitignore matches (add a ! rule for them): $tracked"
  fail=1
else
  echo "ok: .gitignore matches no tracked file"
fi
exit $fail
