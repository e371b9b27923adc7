#!/bin/sh
# What shmddp-train tells a user before it starts (CPU ranks): an --out folder this user cannot
# write is refused before the fork (exit 2, one line from the launcher, nothing created), checked
# as another user; --progress: lines in a file by default, the bar only when asked, off keeps the
# other lines; --version names configure's version and the git commit it was built from, also
# tools/report's in the build tree (the script itself); every program's --help names it as
# installed (shmddp-NAME); a mistyped flag gets the flag it resembles.
set -u
train=${top_builddir:-.}/shmddp-train
. "${srcdir:-.}/tests/lib.sh"
F="--device cpu --nproc 2 --widths 4,8 --image-size 16 --train-size 32 --val-size 4 --batch-size 4 --epochs 1 --workers 0 --log-every 1"

if [ "$(id -u)" -eq 0 ] && command -v setpriv > /dev/null 2>&1 && id nobody > /dev/null 2>&1; then
  chmod 755 "$tmp"
  mkdir -m 755 "$tmp/theirs"
  setpriv --reuid=nobody --regid=nogroup --clear-groups "$train" $F --out "$tmp/theirs" > "$tmp/a.log" 2>&1
  rc=$?
  check "--out another user owns: exit 2" '[ $rc -eq 2 ]'
  check "one line from the launcher, naming --out and what to do" '[ $(wc -l < "$tmp/a.log") -eq 1 ] && grep -q "^train: --out: cannot write in $tmp/theirs: Permission denied; give a folder" "$tmp/a.log"'
  check "nothing written there" '[ -z "$(ls -A "$tmp/theirs")" ]'
  setpriv --reuid=nobody --regid=nogroup --clear-groups "$train" $F --out "$tmp/theirs/sub" > "$tmp/b.log" 2>&1
  rc=$?
  check "a folder that cannot be created: exit 2, one line" '[ $rc -eq 2 ] && [ $(wc -l < "$tmp/b.log") -eq 1 ] && grep -q "cannot create" "$tmp/b.log"'
else
  echo "SKIP (part): --out as another user needs root, setpriv and the user nobody"
fi

esc=$(printf '\033')
cr=$(printf '\r')
"$train" $F --out "$tmp/p1" > "$tmp/p1.log" 2>&1
check "auto into a file: plain lines, no bar" '! grep -q "$esc" "$tmp/p1.log" && ! grep -q "$cr" "$tmp/p1.log" && [ "$(grep -c "^epoch 1/1 step [0-9]*/4 loss" "$tmp/p1.log")" -eq 4 ]'
"$train" $F --progress bar --out "$tmp/p2" > "$tmp/p2.log" 2>&1
check "--progress bar: the bar even into a file" 'grep -q "${cr}${esc}\[K\[#*\.*\] epoch 1/1 step 4/4" "$tmp/p2.log"'
"$train" $F --progress off --out "$tmp/p3" > "$tmp/p3.log" 2>&1
check "--progress off: no step lines; the first lines, validation and result stay" '! grep -q "step [0-9]*/4" "$tmp/p3.log" && grep -q "^train: 2 ranks" "$tmp/p3.log" && grep -q "^validation after epoch 1" "$tmp/p3.log" && grep -q "^result: steps=4" "$tmp/p3.log"'
"$train" $F --progress lines --log-every 2 --out "$tmp/p4" > "$tmp/p4.log" 2>&1
check "--progress lines --log-every 2: steps 1, 2, 4" '[ "$(grep -o "^epoch 1/1 step [0-9]*" "$tmp/p4.log" | grep -o "[0-9]*$" | tr "\n" " ")" = "1 2 4 " ]'

"$train" --version > "$tmp/v.log" 2>&1
rc=$?
version=$(sed -n 's/^#define PACKAGE_VERSION "\(.*\)"$/\1/p' "${top_builddir:-.}/config.h")
check "--version: exit 0, configure's version" '[ $rc -eq 0 ] && grep -q "^shmddp-train $version" "$tmp/v.log"'
if commit=$(git -C "${srcdir:-.}" rev-parse --short=12 HEAD 2>/dev/null); then
  check "--version: the git commit built from" 'grep -q "(git $commit)" "$tmp/v.log"'
fi
if command -v python3 > /dev/null 2>&1; then
  "${srcdir:-.}/tools/report" --version > "$tmp/rv.log" 2>&1
  check "tools/report --version in the tree: configure's version" 'grep -q "^shmddp-report $version" "$tmp/rv.log"'
  if [ "$(cd "${srcdir:-.}" && pwd)" = "$(cd "${top_builddir:-.}" && pwd)" ] && [ -n "${commit:-}" ]; then
    check "tools/report --version: the commit of the build beside it" 'grep -q "(git $commit)" "$tmp/rv.log"'
  fi
fi
for p in shmddp-train shmddp-predict shmddp-doctor shmddp-allreduce-bench shmddp-compare; do
  "${top_builddir:-.}/$p" --help > "$tmp/h.log" 2>&1
  check "$p --help: usage names $p" 'grep -q "^usage: $p " "$tmp/h.log"'
done
"$train" --batchsize 4 > "$tmp/d.log" 2>&1
rc=$?
check "a mistyped flag: exit 2, did you mean" '[ $rc -eq 2 ] && grep -q "unknown option .--batchsize.; did you mean --batch-size?" "$tmp/d.log"'
"$train" --qqqqqqqq > "$tmp/e.log" 2>&1
check "nothing near: no guess" '! grep -q "did you mean" "$tmp/e.log" && grep -q "unknown option" "$tmp/e.log"'
exit $fail
